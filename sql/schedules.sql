-- Recurring schedules: a job enqueued at every slot of a cron expression, in a time zone, by
-- the background worker's sweep (jobs.sweep) or by jobs.run_schedules() without preload.
--
-- Each slot is enqueued once. A pass takes the due schedules' rows FOR UPDATE SKIP LOCKED and
-- moves next_slot past the slots it enqueued in the same transaction: a second pass, on
-- another connection or server, either skips a row that is held or, once the first committed,
-- finds next_slot in the future (READ COMMITTED rechecks the row it waited for). The slot is
-- also in the job's idempotency key (pg_jobs.schedule:<name>@<slot>, the name's md5 for a name
-- of over 400 bytes), so a slot's live job is handed back, not enqueued again, by any enqueue
-- that races it.
--
-- Slots follow src/functions/cron.rs: local wall-clock times of the schedule's zone, as PostgreSQL's
-- tz database maps them; a local time that a spring-forward skips runs once, just after the
-- gap, and one that a fall-back repeats runs once.

create table jobs_data.schedules (
  name       text primary key check (length(name) between 1 and 200),
  cron       text not null check (length(cron) <= 200),
  timezone   text not null default 'UTC' check (length(timezone) <= 200),
  job        jsonb not null default '{}',
  catch_up   text not null default 'latest' check (catch_up in ('latest', 'all', 'none')),
  enabled    boolean not null default true,
  last_slot  timestamptz,  -- the latest slot enqueued
  next_slot  timestamptz,  -- the next slot to enqueue; NULL while disabled
  last_job_id uuid,        -- the job of last_slot
  last_error text,         -- why the last due slot could not be enqueued, if it could not
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now()
);
comment on table jobs_data.schedules is
  'Recurring schedules: a job (an enqueue spec) at every slot of a cron expression in a time zone';
create index schedules_due_idx on jobs_data.schedules (next_slot) where enabled;
select pg_catalog.pg_extension_config_dump('jobs_data.schedules', '');

create view jobs.schedules as select * from jobs_data.schedules;
comment on view jobs.schedules is
  'Recurring schedules (the table jobs_data.schedules), with each one''s last and next slot';

-- Every row written, by jobs.schedule or by plain SQL, is checked here when its definition
-- changed, and its next slot set when its expression, zone or enabled flag changed. A pass's
-- own update (slots, last_error) is not checked again: a job that a later policy or setting
-- refuses is reported in last_error, not by failing the pass.
create function jobs._schedule_check()
returns trigger
language plpgsql volatile
as $$
declare
  v_what    text := format('jobs.schedule: schedule %L', new.name);
  v_problem text[];
  v_key     text;
begin
  new.updated_at := now();
  if tg_op = 'UPDATE' and (new.cron, new.timezone, new.job, new.enabled)
                          is not distinct from (old.cron, old.timezone, old.job, old.enabled) then
    return new;
  end if;
  v_problem := array[jobs._cron_problem(new.cron)];
  if v_problem[1] is not null then
    perform jobs._raise('22023', format('%s: %s', v_what, v_problem[1]),
      'write five fields, minute hour day-of-month month day-of-week, e.g. ''*/5 * * * *'' or '
      '''30 2 * * mon-fri'', or a macro such as ''@daily''');
  end if;
  begin
    perform pg_catalog.timezone(new.timezone, now());
  exception when invalid_parameter_value then
    perform jobs._raise('22023', format('%s: unknown time zone %L', v_what, new.timezone),
      'name a zone of pg_timezone_names, e.g. ''Europe/Berlin'', or ''UTC''');
  end;
  if jsonb_typeof(new.job) <> 'object' then
    perform jobs._raise('22023', format('%s: job must be a JSON object, got %s', v_what,
      jsonb_typeof(new.job)), 'pass what jobs.enqueue takes, e.g. ''{"name": "report"}''');
  end if;
  select k into v_key from jsonb_object_keys(new.job) as k
  where k not in ('name', 'payload', 'queue', 'priority', 'max_attempts', 'tenant_id',
                  'concurrency_key', 'timeout', 'tags', 'meta', 'run_timeout', 'ordering_key')
  order by k limit 1;
  if v_key is not null then
    perform jobs._raise('22023', format('%s: job has the key %L, which a schedule sets itself '
      'or enqueue does not take', v_what, v_key),
      'a schedule''s job takes name, payload, queue, priority, max_attempts, tenant_id, '
      'concurrency_key, timeout, tags, meta, run_timeout and ordering_key; each slot sets run_at, idempotency_key '
      'and enqueued_by');
  end if;
  if jsonb_typeof(coalesce(new.job->'payload', '{}')) <> 'object' then
    perform jobs._raise('22023', format('%s: the job''s payload must be a JSON object, got %s',
      v_what, jsonb_typeof(new.job->'payload')),
      'each slot adds scheduled_for to it; wrap other values, e.g. {"items": [...]}');
  end if;
  begin
    v_problem := jobs._spec_problem(row(new.job->>'name', coalesce(new.job->'payload', '{}'),
      coalesce(new.job->>'queue', 'default'), null, coalesce((new.job->>'priority')::int, 0),
      (new.job->>'max_attempts')::int, null, new.job->>'tenant_id', new.job->>'concurrency_key',
      'return', null, null, (new.job->>'timeout')::interval, null, null, null, null,
      case when new.job ? 'tags' and new.job->'tags' <> 'null'
           then array(select jsonb_array_elements_text(new.job->'tags')) end,
      nullif(new.job->'meta', 'null'), (new.job->>'run_timeout')::interval,
      new.job->>'ordering_key', null, null)::jobs.job_spec);
  exception when data_exception then
    perform jobs._raise('22023', format('%s: the job has a value of the wrong type: %s', v_what,
      sqlerrm), 'priority and max_attempts are integers, timeout and run_timeout intervals, tags an '
      'array of strings, meta an object, the others text');
  end;
  if v_problem is not null then
    perform jobs._raise(v_problem[1], format('%s: job: %s', v_what, v_problem[2]), v_problem[3]);
  end if;

  if tg_op = 'INSERT' or new.cron is distinct from old.cron
     or new.timezone is distinct from old.timezone or new.enabled is distinct from old.enabled then
    new.next_slot := case when new.enabled
                          then jobs._cron_next(new.cron, new.timezone, jobs.clock()) end;
    if new.enabled and new.next_slot is null then
      perform jobs._raise('22023', format('%s: cron %L names no time that ever comes', v_what,
        new.cron), 'check the day of month against the month, e.g. February has no day 30');
    end if;
  end if;
  return new;
end
$$;
create trigger schedules_check before insert or update on jobs_data.schedules
  for each row execute function jobs._schedule_check();

create function jobs.schedule(name text, cron text, job jsonb default '{}',
                              timezone text default 'UTC', catch_up text default 'latest',
                              enabled boolean default true)
returns jobs.schedules
language plpgsql volatile
as $$
#variable_conflict use_column
declare
  r jobs.schedules;
begin
  if schedule.name is null or schedule.cron is null or schedule.job is null
     or schedule.timezone is null or schedule.catch_up is null or schedule.enabled is null then
    perform jobs._raise('22004', 'jobs.schedule: no argument may be NULL',
      'omit an argument to take its default');
  elsif length(schedule.name) not between 1 and 200 then
    perform jobs._raise('22023', 'jobs.schedule: name must be 1 to 200 characters, got '
      || length(schedule.name), 'name the schedule, e.g. ''nightly-report''');
  elsif schedule.catch_up not in ('latest', 'all', 'none') then
    perform jobs._raise('22023', format('jobs.schedule: catch_up must be ''latest'', ''all'' or '
      '''none'', got %L', schedule.catch_up),
      '''latest'' enqueues the last slot missed while no pass ran, ''all'' each of them (at most '
      '1000 a pass), ''none'' none');
  end if;
  insert into jobs_data.schedules as s (name, cron, job, timezone, catch_up, enabled)
  values (schedule.name, schedule.cron, schedule.job, schedule.timezone, schedule.catch_up,
          schedule.enabled)
  on conflict (name) do update set cron = excluded.cron, job = excluded.job,
    timezone = excluded.timezone, catch_up = excluded.catch_up, enabled = excluded.enabled,
    last_error = null
  returning s.* into r;
  return r;
end
$$;
comment on function jobs.schedule(text, text, jsonb, text, text, boolean) is
  'Create or replace a recurring schedule: job (what jobs.enqueue takes) at every slot of cron '
  'in timezone. Answers the schedule, with its next slot.';

create function jobs.unschedule(name text)
returns boolean
language sql volatile
begin atomic
  with gone as (delete from jobs_data.schedules as s where s.name = unschedule.name returning 1)
  select count(*) > 0 from gone;
end;
comment on function jobs.unschedule(text) is
  'Delete a schedule; true if there was one. Jobs it enqueued are left alone.';

-- One pass over the due schedules: each slot due since the schedule's next_slot, as its
-- catch_up says, enqueued once. A schedule whose job cannot be enqueued (a job type's policy
-- or pg_jobs.max_payload_size changed since) keeps the error in last_error, warns, and moves on
-- to its next slot: it never stops the pass or the sweep.
create function jobs.run_schedules(max_schedules int default 100)
returns table (schedule text, slot timestamptz, job_id uuid)
language plpgsql volatile
as $$
#variable_conflict use_column
declare
  v_now   timestamptz := jobs.clock();
  s       jobs_data.schedules;
  v_slots timestamptz[];
  v_ids   uuid[];
  v_lock_timeout text := current_setting('lock_timeout');
begin
  if max_schedules is null or max_schedules not between 1 and 10000 then
    perform jobs._raise(case when max_schedules is null then '22004' else '22023' end,
      'jobs.run_schedules: max_schedules must be 1 to 10000, got '
      || coalesce(max_schedules::text, 'NULL'), 'pass how many due schedules this pass may take');
  end if;
  for s in
    select * from jobs_data.schedules as x
    where x.enabled and x.next_slot <= v_now
    order by x.next_slot limit max_schedules
    for update skip locked
  loop
    v_slots := case s.catch_up
      when 'all' then jobs._cron_slots(s.cron, s.timezone, s.next_slot - interval '1 microsecond',
                                       v_now, 1000)
      else array_remove(array[jobs._cron_latest(s.cron, s.timezone,
                                                s.next_slot - interval '1 microsecond', v_now)], null)
    end;
    -- 'none': a slot more than a minute late was missed, not due.
    if s.catch_up = 'none' then
      v_slots := array(select t from unnest(v_slots) as t where t >= v_now - interval '1 minute');
    end if;
    v_ids := null;
    if cardinality(v_slots) > 0 then
      begin
        -- A producer's open transaction holding a slot's key (an enqueue of it, uncommitted)
        -- makes this wait at most 100 ms; the slot is tried again at the next pass.
        perform set_config('lock_timeout', '100ms', true);
        v_ids := array(
          select e.id from jobs.enqueue_batch((
            select jsonb_agg(s.job || jsonb_build_object(
                     'run_at', u.t,
                     'enqueued_by', left('schedule ' || s.name, 200),
                     'payload', coalesce(s.job->'payload', '{}') || jsonb_build_object('scheduled_for', u.t),
                     'idempotency_key', format('pg_jobs.schedule:%s@%s',
                                               case when octet_length(s.name) <= 400 then s.name
                                                    else md5(s.name) end,
                                               to_char(u.t at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')))
                   order by u.ord)
            from unnest(v_slots) with ordinality as u(t, ord))) as e
          order by e.ordinal);
        perform set_config('lock_timeout', v_lock_timeout, true);
      exception when lock_not_available then
        raise warning 'pg_jobs: schedule % waits for a transaction that holds the key of a slot', s.name;
        continue;  -- next_slot unchanged: the next pass tries again (the subtransaction's end restored lock_timeout)
      when others then
        update jobs_data.schedules as x set last_error = sqlerrm where x.name = s.name;
        raise warning 'pg_jobs: schedule % could not enqueue its slot %: %', s.name,
          v_slots[cardinality(v_slots)], sqlerrm;
        v_slots := '{}';
      end;
    end if;
    update jobs_data.schedules as x set
      -- After a capped catch-up, from its last slot; else from now.
      next_slot = jobs._cron_next(s.cron, s.timezone,
                                  case when cardinality(v_slots) = 1000 then v_slots[1000] else v_now end),
      last_slot = coalesce(v_slots[cardinality(v_slots)], x.last_slot),
      last_job_id = coalesce(v_ids[cardinality(v_ids)], x.last_job_id),
      last_error = case when cardinality(v_slots) > 0 then null else x.last_error end
    where x.name = s.name;
    return query select s.name, u.t, v_ids[u.ord]
                 from unnest(v_slots) with ordinality as u(t, ord) order by u.ord;
  end loop;
end
$$;
comment on function jobs.run_schedules(int) is
  'One pass over the due schedules, as the background worker''s sweep runs it: enqueues each '
  'due slot once. Answers (schedule, slot, job_id) for each slot enqueued.';
