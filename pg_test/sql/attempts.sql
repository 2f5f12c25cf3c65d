-- Attempt history: jobs.attempts has one row per attempt that did not complete, written by
-- the statement that settled it, and goes with its job. The clock is moved, not waited for.
\set VERBOSITY default
\set SHOW_CONTEXT never
truncate jobs_data.jobs, jobs_data.attempts, jobs_data.job_types;
insert into jobs.job_types (name, max_attempts, backoff_base, jitter, timeout)
values ('flaky', 5, '0', 0, '1 minute');

select jobs.enqueue('flaky') is not null;
-- 1: failed by its worker.
select id, claim from jobs.claim('w1', lease => '10 seconds') \gset
select jobs.fail(:'id', :claim, 'connection refused');
-- 2: its lease lapsed; the next claim takes it again.
select claim from jobs.claim('w2', lease => '10 seconds') \gset
set pg_jobs.clock_offset = '11s';
select attempt from jobs.claim('w3', lease => '10 minutes');
-- 3: held past its timeout, then swept.
set pg_jobs.clock_offset = '72s';
select task, affected from jobs.sweep() where task = 'lapsed_leases';
-- 4: its lease lapsed; the sweep finds it first.
select claim from jobs.claim('w4', lease => '10 seconds') \gset
set pg_jobs.clock_offset = '83s';
select task, affected from jobs.sweep() where task = 'lapsed_leases';
-- 5, the last: its lease lapsed, and the claim that finds it buries it.
select claim from jobs.claim('w5', lease => '10 seconds') \gset
set pg_jobs.clock_offset = '94s';
select count(*) as handed_out from jobs.claim('w6');
reset pg_jobs.clock_offset;

select attempt, worker, outcome, claimed_at is not null as claimed, finished_at >= claimed_at as ordered, error
from jobs.attempts order by attempt;
select state, attempt, last_error = (select error from jobs.attempts where attempt = 5) as last_error_kept
from jobs.jobs;

-- A job that completes on its first attempt writes nothing here.
truncate jobs_data.jobs, jobs_data.attempts;
select jobs.enqueue('quick') is not null;
select jobs.complete(id, claim) from jobs.claim('w');
select count(*) as attempts from jobs.attempts;

-- The rows go with their job (here by retention; tests/jobs/test_no_history.py: by a completion
-- that keeps no history).
truncate jobs_data.jobs, jobs_data.attempts;
select jobs.enqueue('flaky') is not null;
select jobs.fail(id, claim, 'once') from jobs.claim('w');
select jobs.complete(id, claim) from jobs.claim('w');
select count(*) as attempts_of_a_completed_job from jobs.attempts;
set pg_jobs.clock_offset = '8d';
select task, affected from jobs.sweep() where task = 'completed_deleted';
reset pg_jobs.clock_offset;
select count(*) as jobs, (select count(*) from jobs.attempts) as attempts from jobs.jobs;

truncate jobs_data.jobs, jobs_data.attempts, jobs_data.job_types;

-- A requeued job counts its attempts from 1 again; seq keeps the order the rows were written.
select jobs.enqueue('twice', max_attempts => 2) is not null;
select jobs.fail(id, claim, 'first run, 1') from jobs.claim('w');
update jobs.jobs set run_at = jobs.clock(), state = 'ready' where name = 'twice';
select jobs.fail(id, claim, 'first run, 2') from jobs.claim('w');
select jobs.requeue(id) from jobs.jobs where name = 'twice';
select jobs.fail(id, claim, 'second run, 1') from jobs.claim('w');
select attempt, error from jobs.attempts order by seq;
