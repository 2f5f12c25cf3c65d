-- Outcome counters (jobs.outcome_stats) without shared_preload_libraries = 'pg_jobs', as in
-- this instance: nothing is counted and the view has no rows, while every settle works as
-- ever. With preload they are tested in tests/jobs/test_outcomes.py, with the signals to holders
-- (pg_jobs_cancel, pg_jobs_dead), whose notifications name the sender's pid.
\set SHOW_CONTEXT never
truncate jobs_data.jobs, jobs_data.attempts, jobs_data.job_types;
insert into jobs.job_types (name, max_attempts) values ('once', 1);
select jobs.enqueue('plain') is not null as enqueued;
select jobs.complete(c.id, c.claim) from jobs.claim('w') as c;
select jobs.enqueue('once') is not null as enqueued;
select jobs.fail(c.id, c.claim, 'x') from jobs.claim('w') as c;
select count(*) as rows from jobs.outcome_stats;
select state, count(*) from jobs.jobs group by state order by state;

-- jobs._outcome, called by the settling statements only, names what it does not count.
select jobs._outcome('default', 'exploded');
