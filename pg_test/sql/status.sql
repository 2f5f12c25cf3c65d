-- jobs.get_job and jobs.get_jobs: a job's state, attempts and outcome, for producers and
-- workers; every refusal.
\set VERBOSITY default
\set SHOW_CONTEXT never
truncate jobs_data.jobs, jobs_data.job_types, jobs_data.queues, jobs_data.steps;

select jobs.enqueue('a', id => '00000000-0000-0000-0000-0000000005a1') is not null;
select jobs.enqueue('b', id => '00000000-0000-0000-0000-0000000005b1',
                    run_at => now() + interval '1 hour') is not null;
select jobs.enqueue('c', id => '00000000-0000-0000-0000-0000000005c1', max_attempts => 1,
                    run_at => now() + interval '1 minute') is not null;
select id, name, queue, state, attempt, max_attempts, result, last_error, run_at is not null as has_run_at,
       enqueued_at is not null as enqueued, finished_at, tenant_id
from jobs.get_job('00000000-0000-0000-0000-0000000005a1');

-- Completed with a result; then a failure on the last attempt, with its error.
select id, claim from jobs.claim('w') \gset
select jobs.complete(:'id', :claim, '{"ok": true}');
select jobs.promote('00000000-0000-0000-0000-0000000005c1');
select id, claim from jobs.claim('w') \gset
select jobs.fail(:'id', :claim, 'boom');

-- In the order given; a repeated id answers once; unknown and NULL ids answer no row.
select name, state, attempt, result, last_error, finished_at is not null as finished
from jobs.get_jobs(array['00000000-0000-0000-0000-0000000005c1', '00000000-0000-0000-0000-0000000005b1',
                         '00000000-0000-0000-0000-0000000005a1', '00000000-0000-0000-0000-0000000005b1',
                         '00000000-0000-0000-0000-00000000ffff', null]::uuid[]);
select count(*) from jobs.get_job('00000000-0000-0000-0000-00000000ffff');
select count(*) from jobs.get_jobs('{}');

-- Refusals.
select * from jobs.get_job(null);
\echo :LAST_ERROR_SQLSTATE
select * from jobs.get_jobs(null);
\echo :LAST_ERROR_SQLSTATE
select count(*) from jobs.get_jobs(array(select gen_random_uuid() from generate_series(1, 10001)));
\echo :LAST_ERROR_SQLSTATE

-- A producer may read its jobs' state (jobs.grant_producer), a role without a grant may not.
create role pgj_status_producer;
create role pgj_status_nobody;
select jobs.grant_producer('pgj_status_producer');
set role pgj_status_producer;
select name, state from jobs.get_job('00000000-0000-0000-0000-0000000005a1');
select count(*) from jobs.jobs;
\echo :LAST_ERROR_SQLSTATE
set role pgj_status_nobody;
select name, state from jobs.get_job('00000000-0000-0000-0000-0000000005a1');
\echo :LAST_ERROR_SQLSTATE
reset role;
drop owned by pgj_status_producer;
drop role pgj_status_producer, pgj_status_nobody;
