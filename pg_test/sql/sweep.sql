-- jobs.sweep(): the background worker's pass, by hand. Time is moved with pg_jobs.clock_offset.
\set VERBOSITY default
\set SHOW_CONTEXT never
truncate jobs_data.jobs, jobs_data.job_types, jobs_data.queues, jobs_data.steps, jobs_data.events;

-- Lapsed leases: back to ready with attempts left, buried on the final attempt.
select jobs.enqueue('flaky', max_attempts => 3, id => '00000000-0000-0000-0000-0000000000d1') is not null;
select jobs.enqueue('poison', max_attempts => 1, id => '00000000-0000-0000-0000-0000000000d2') is not null;
insert into jobs.job_types (name, dead_letter) values ('quiet', false);
select jobs.enqueue('quiet', max_attempts => 1, id => '00000000-0000-0000-0000-0000000000d3') is not null;
select count(*) from jobs.claim('w', max_jobs => 10, lease => '1 minute');
select * from jobs.sweep();
set pg_jobs.clock_offset = '2min';
-- At most max_rows rows per task and pass.
select * from jobs.sweep(max_rows => 2) where task = 'lapsed_leases';
select * from jobs.sweep() where task = 'lapsed_leases';
reset pg_jobs.clock_offset;
select name, state, attempt, last_error, finished_at is not null as finished from jobs.jobs order by name;

-- Waiters whose timeout passed become ready; expired events are deleted.
truncate jobs_data.jobs;
select jobs.enqueue('waits', id => '00000000-0000-0000-0000-0000000000d4') is not null;
select id, claim from jobs.claim('w') \gset
select status from jobs.await_event(:'id', :claim, 'never', timeout => '1 minute');
select jobs.publish('short', ttl => '1 minute') is not null, jobs.publish('long', ttl => '1 hour') is not null;
set pg_jobs.clock_offset = '2min';
select * from jobs.sweep() where task in ('waiter_timeouts', 'expired_events');
reset pg_jobs.clock_offset;
select state, wait_event from jobs.jobs;
select name from jobs.events;

-- Retention: completed and cancelled jobs after pg_jobs.completed_retention (7 days), failed
-- and dead ones after pg_jobs.dead_retention (30 days); steps go with the run's last job.
truncate jobs_data.jobs, jobs_data.steps, jobs_data.events;
select jobs.enqueue('done', run_id => '00000000-0000-0000-0000-0000000000f1') is not null;
select id, claim from jobs.claim('w') \gset
select jobs.save_step(:'id', :claim, 'one', '1');
select jobs.complete(:'id', :claim);
select jobs.enqueue('later', run_id => '00000000-0000-0000-0000-0000000000f1') is not null;
select jobs.enqueue('broken', max_attempts => 1, queue => 'b') is not null;
select id, claim from jobs.claim('w', array['b']) \gset
select jobs.fail(:'id', :claim, 'boom');
select * from jobs.sweep() where affected > 0;
set pg_jobs.clock_offset = '8d';
select * from jobs.sweep() where affected > 0;
select name, state from jobs.jobs order by name;
select count(*) as steps_of_a_live_run from jobs.steps;
-- When the run's last job goes, its steps go too.
reset pg_jobs.clock_offset;
select id, claim from jobs.claim('w') \gset
select jobs.complete(:'id', :claim);
set pg_jobs.clock_offset = '16d';
select * from jobs.sweep() where affected > 0;
select count(*) as steps_left from jobs.steps;
set pg_jobs.clock_offset = '31d';
select * from jobs.sweep() where affected > 0;
reset pg_jobs.clock_offset;
select count(*) as jobs_left from jobs.jobs;

-- Settles take a share of retention, the background worker or not: one completing call in 8,
-- drawn at random (seeded here), also deletes up to 16 completed jobs past retention per job
-- it completed. 300 jobs completed 8 days ago, then 40 completed now one at a time.
truncate jobs_data.jobs, jobs_data.steps, jobs_data.events;
select count(*) from jobs.enqueue_batch(
  (select jsonb_agg(jsonb_build_object('name', 'old')) from generate_series(1, 300)));
set pg_jobs.clock_offset = '-8d';
select count(*) filter (where jobs.complete(c.id, c.claim)) as completed_8_days_ago
from jobs.claim('w', array['default'], 300) as c;
reset pg_jobs.clock_offset;
select count(*) from jobs.enqueue_batch(
  (select jsonb_agg(jsonb_build_object('name', 'new')) from generate_series(1, 40)));
select setseed(0.25);
select count(*) filter (where jobs.complete(c.id, c.claim)) as completed_one_by_one
from jobs.claim('w', array['default'], 20) as c;
select count(*) as old_left from jobs.jobs where name = 'old' \gset
select :old_left < 300 as complete_deleted_some, (300 - :old_left) % 16 = 0 as sixteen_a_draw;
select count(*) filter (where m.landed) as completed_by_complete_many_of_one
from jobs.claim('w', array['default'], 20) as c
cross join lateral jobs.complete_many(array[c.id], array[c.claim]) as m;
select count(*) filter (where name = 'new') as new_kept,
       count(*) filter (where name = 'old') between 1 and :old_left - 1
         as complete_many_deleted_some,
       (300 - count(*) filter (where name = 'old')) % 16 = 0 as sixteen_a_draw
from jobs.jobs;

-- Bad input: a clear error.
select * from jobs.sweep(0);
\echo :LAST_ERROR_SQLSTATE
