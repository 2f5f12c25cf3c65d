-- Recurring schedules: cron expressions and their slots, schedule/unschedule and their
-- refusals, and the pass that enqueues each due slot once.
\set VERBOSITY default
\set SHOW_CONTEXT never
truncate jobs_data.jobs, jobs_data.schedules;
set timezone = 'UTC';

-- Next slots of a table of expressions (UTC unless a zone is named).
select c.cron, c.zone, c.after, jobs._cron_next(c.cron, c.zone, c.after) as next
from (values
  ('*/15 * * * *', 'UTC', timestamptz '2026-12-01 10:07:00+00'),
  ('*/15 * * * *', 'UTC', timestamptz '2026-12-01 10:15:00+00'),   -- strictly after
  ('5/20 * * * *', 'UTC', timestamptz '2026-12-01 10:46:00+00'),
  ('0 9 * * mon-fri', 'UTC', timestamptz '2026-12-04 10:00:00+00'), -- a Friday: Monday next
  ('0 9 * * 1-5', 'UTC', timestamptz '2026-12-05 08:00:00+00'),
  ('0 0 * * 7', 'UTC', timestamptz '2026-12-01 00:00:00+00'),      -- 7 is Sunday
  ('0 0 13 * fri', 'UTC', timestamptz '2026-12-01 00:00:00+00'),   -- the 13th or a Friday
  ('0 0 13 * fri', 'UTC', timestamptz '2026-12-11 00:00:00+00'),
  ('0 12 1 jan,jul *', 'UTC', timestamptz '2026-02-01 00:00:00+00'),
  ('0 0 29 2 *', 'UTC', timestamptz '2026-03-01 00:00:00+00'),     -- February 29: 2028
  ('0 0 29 2 *', 'UTC', timestamptz '2096-03-01 00:00:00+00'),     -- 2100 is no leap year
  ('@hourly', 'UTC', timestamptz '2026-12-01 10:00:00+00'),
  ('@daily', 'Asia/Tokyo', timestamptz '2026-12-01 10:00:00+00'),
  ('@weekly', 'UTC', timestamptz '2026-12-01 10:00:00+00'),
  ('@monthly', 'UTC', timestamptz '2026-12-01 10:00:00+00'),
  ('@yearly', 'UTC', timestamptz '2026-12-01 10:00:00+00'),
  ('0 9 * * *', 'America/New_York', timestamptz '2026-07-01 00:00:00+00'),
  ('0 9 * * *', 'America/New_York', timestamptz '2026-12-01 00:00:00+00')
) as c(cron, zone, after);

-- Daylight saving. New York skips 02:00-03:00 on 2026-03-08: a 02:30 job runs once that day,
-- just after the gap (03:30 EDT); and repeats 01:00-02:00 on 2026-11-01: a 01:30 job runs once.
select s at time zone 'America/New_York' as local, s as instant
from unnest(jobs._cron_slots('30 2 * * *', 'America/New_York', '2026-03-06 12:00+00', '2026-03-10 12:00+00', 100)) as s;
select s at time zone 'America/New_York' as local, s as instant
from unnest(jobs._cron_slots('30 1 * * *', 'America/New_York', '2026-10-30 12:00+00', '2026-11-03 12:00+00', 100)) as s;
-- Berlin: 2026-03-29 skips 02:00-03:00, 2026-10-25 repeats 02:00-03:00.
select s at time zone 'Europe/Berlin' as local, s as instant
from unnest(jobs._cron_slots('30 2 * * *', 'Europe/Berlin', '2026-03-27 12:00+00', '2026-03-31 12:00+00', 100)) as s;
select s at time zone 'Europe/Berlin' as local, s as instant
from unnest(jobs._cron_slots('30 2 * * *', 'Europe/Berlin', '2026-10-23 12:00+00', '2026-10-27 12:00+00', 100)) as s;
-- Every 30 minutes through the skipped hour: no slot twice, none out of order.
select s at time zone 'America/New_York' as local, s as instant
from unnest(jobs._cron_slots('*/30 * * * *', 'America/New_York', '2026-03-08 06:00+00', '2026-03-08 08:00+00', 100)) as s;
-- The latest slot of a window, and at most max slots.
select jobs._cron_latest('0 0 1 1 *', 'UTC', '2020-01-01 00:00+00', '2026-12-01 00:00+00') as latest_new_year,
       jobs._cron_latest('0 0 1 1 *', 'UTC', '2026-01-01 00:00+00', '2026-12-01 00:00+00') as none_after_it,
       cardinality(jobs._cron_slots('* * * * *', 'UTC', '2026-01-01 00:00+00', '2026-02-01 00:00+00', 1000)) as capped;

-- Refusals name the field and what it accepts (22023), and write nothing.
select jobs.schedule('bad', '0 25 * * *');
select jobs.schedule('bad', '*/0 * * * *');
select jobs.schedule('bad', '0 0 * foo *');
select jobs.schedule('bad', '0 0 * * 8');
select jobs.schedule('bad', '0 0 * *');
select jobs.schedule('bad', '@often');
select jobs.schedule('bad', '0 0 30 2 *', '{"name": "never"}');
select jobs.schedule('bad', '@daily', '{"name": "report"}', timezone => 'Mars/Olympus');
select jobs.schedule('bad', '@daily', '{"name": "report", "run_at": "2026-01-01"}');
select jobs.schedule('bad', '@daily', '{"name": "report", "payload": [1]}');
select jobs.schedule('bad', '@daily', '{"payload": {}}');
select jobs.schedule('bad', '@daily', '{"name": "report", "priority": "high"}');
select jobs.schedule('bad', '@daily', '[]');
select jobs.schedule('bad', '@daily', catch_up => 'some');
select jobs.schedule(null, '@daily');
insert into jobs.schedules (name, cron) values ('bad', '61 * * * *');
select count(*) as schedules from jobs.schedules;

-- schedule is an upsert by name; the row shows the next slot.
select name, cron, timezone, catch_up, enabled, next_slot > now() as next_is_future, last_slot
from jobs.schedule('nightly', '30 2 * * *', '{"name": "report", "payload": {"kind": "nightly"}}',
                   timezone => 'Europe/Berlin');
select jobs._cron_next('30 2 * * *', 'Europe/Berlin', now()) = next_slot as next_is_berlin_0230
from jobs.schedule('nightly', '30 2 * * *', '{"name": "report", "payload": {"kind": "nightly"}}',
                   timezone => 'Europe/Berlin');
select next_slot is null as disabled_has_no_next
from jobs.schedule('nightly', '30 2 * * *', '{"name": "report"}', enabled => false);
select count(*) from jobs.schedules;
-- Plain SQL goes through the same checks and gets its next slot.
insert into jobs.schedules (name, cron, job) values ('sql', '*/5 * * * *', '{"name": "tick"}');
select name, next_slot > now() and next_slot <= now() + interval '5 minutes' as within_5_min from jobs.schedules where name = 'sql';
select jobs.unschedule('sql'), jobs.unschedule('sql');

-- A pass enqueues nothing before a slot is due.
select count(*) from jobs.run_schedules();

-- catch_up: a yearly schedule whose next slot was years ago (no pass ran since).
select name from jobs.schedule('all', '0 0 1 1 *', '{"name": "yearly", "queue": "sched"}', catch_up => 'all');
select name from jobs.schedule('latest', '0 0 1 1 *', '{"name": "yearly", "queue": "sched", "payload": {"kind": "new year"}}', catch_up => 'latest');
select name from jobs.schedule('none', '0 0 1 1 *', '{"name": "yearly", "queue": "sched"}', catch_up => 'none');
update jobs.schedules set next_slot = '2020-01-01 00:00+00' where name in ('all', 'latest', 'none');
select schedule,
       count(*) = case schedule when 'all' then extract(year from now()) - 2019 else 1 end as slots_as_catch_up_says,
       min(slot) = case schedule when 'all' then '2020-01-01 00:00+00' else date_trunc('year', now()) end as first,
       max(slot) = date_trunc('year', now()) as last_is_this_new_year
from jobs.run_schedules() group by schedule order by schedule;
-- Each job carries its slot, keyed by it, runs at it; the schedules moved on.
select (payload->>'scheduled_for')::timestamptz = run_at as payload_has_slot, payload->>'kind' as kept,
       idempotency_key = 'pg_jobs.schedule:latest@' || to_char(run_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') as keyed_by_slot,
       enqueued_by = current_user || ' (schedule latest)' as enqueued_by_its_schedule
from jobs.jobs where idempotency_key like 'pg_jobs.schedule:latest@%';
select name, last_slot = date_trunc('year', now()) as last_slot_set, next_slot = date_trunc('year', now()) + interval '1 year' as next_new_year,
       last_job_id is not null as has_job, last_error
from jobs.schedules where name in ('all', 'latest', 'none') order by name;
-- A second pass enqueues nothing: each slot once.
select count(*) from jobs.run_schedules();
select count(*) as jobs from jobs.jobs;

-- The sweep runs the same pass.
update jobs.schedules set cron = '* * * * *' where name = 'latest';
update jobs.schedules set next_slot = date_trunc('minute', now()) where name = 'latest';
select task, affected from jobs.sweep() where task = 'schedules_enqueued';
select count(*) from jobs.run_schedules();

-- A job that can no longer be enqueued (its payload now over pg_jobs.max_payload_size) keeps
-- the error and moves on; the pass does not fail.
select name from jobs.schedule('big', '* * * * *', jsonb_build_object('name', 'big', 'payload', jsonb_build_object('blob', (select string_agg(md5(g::text), '') from generate_series(1, 100) as g))));
update jobs.schedules set next_slot = date_trunc('minute', now()) where name = 'big';
set pg_jobs.max_payload_size = '1kB';
set client_min_messages = error;  -- the warning names the slot, a time that changes
select count(*) from jobs.run_schedules();
reset client_min_messages;
reset pg_jobs.max_payload_size;
select name, last_error, next_slot > now() as moved_on from jobs.schedules where name = 'big';

-- The movable clock: an hour on, an every-10-minutes schedule created now has six due slots.
truncate jobs_data.jobs, jobs_data.schedules;
select name from jobs.schedule('ten', '*/10 * * * *', '{"name": "tick"}', catch_up => 'all');
set pg_jobs.clock_offset = 3600;
select count(*) from jobs.run_schedules();
select count(*) from jobs.run_schedules();
reset pg_jobs.clock_offset;
truncate jobs_data.jobs, jobs_data.schedules;

-- A name of 200 four-byte characters (800 bytes) still enqueues its slots: its slots' keys
-- name it by its md5 (at 551070c the key outgrew 512 bytes and no slot was ever enqueued).
select name is not null as scheduled from jobs.schedule(repeat('🕐', 200), '0 0 1 1 *', '{"name": "wide"}');
update jobs_data.schedules set next_slot = date_trunc('year', now(), 'UTC') where name = repeat('🕐', 200);
select count(*) as enqueued from jobs.run_schedules() where schedule = repeat('🕐', 200);
select last_error from jobs.schedules where name = repeat('🕐', 200);
select jobs.unschedule(repeat('🕐', 200)) as removed;
-- Near the end of PostgreSQL's time there is no next slot (it failed with XX000).
select jobs._cron_next('* * * * *', 'UTC', '294276-12-30 00:00:00+00') as no_next_slot;
select cardinality(jobs._cron_slots('* * * * *', 'UTC', '294276-12-29 23:55:00+00', 'infinity', 10)) as up_to_the_end;
-- A search for two billion slots ends at a cancel (at 551070c only SIGKILL stopped it).
set statement_timeout = '300ms';
select cardinality(jobs._cron_slots('* * * * *', 'UTC', now(), 'infinity', 2000000000));
reset statement_timeout;
