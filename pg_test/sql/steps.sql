-- jobs.save_step and jobs.get_step: memoised, fenced, kept across attempts.
\set VERBOSITY default
\set SHOW_CONTEXT never
truncate jobs_data.jobs, jobs_data.job_types, jobs_data.queues, jobs_data.steps;

select jobs.enqueue('pipeline', id => '00000000-0000-0000-0000-0000000000a1',
                    run_id => '00000000-0000-0000-0000-0000000000f1') is not null;
select id, claim from jobs.claim('w') \gset
select done, output from jobs.get_step('00000000-0000-0000-0000-0000000000f1', 'fetch');
select jobs.save_step(:'id', :claim, 'fetch', '{"rows": 10}');
select jobs.save_step(:'id', :claim, 'transform');
-- Saved once, the first output stays.
select jobs.save_step(:'id', :claim, 'fetch', '{"rows": 99}');
select done, output from jobs.get_step('00000000-0000-0000-0000-0000000000f1', 'fetch');
select done, output from jobs.get_step('00000000-0000-0000-0000-0000000000f1', 'transform');

-- A later attempt sees the steps; the earlier holder can save nothing.
update jobs.jobs set lease_expires_at = now() - interval '1 second', lease_scan_at = now() - interval '1 second';
select attempt from jobs.claim('w2');
select jobs.save_step(:'id', :claim, 'load', '{}');
\echo :LAST_ERROR_SQLSTATE
select step, output, attempt from jobs.steps order by seq;
select done, output from jobs.get_step('00000000-0000-0000-0000-0000000000f1', 'fetch');

-- A cancelled job's holder can save nothing either.
select claim as claim2 from jobs.jobs \gset
select jobs.cancel(:'id');
select jobs.save_step(:'id', :claim2, 'load', '{}');
\echo :LAST_ERROR_SQLSTATE
select count(*) from jobs.steps;

-- Bad input: a clear error, and nothing changes.
select jobs.save_step(:'id', :claim2, null);
\echo :LAST_ERROR_SQLSTATE
select * from jobs.get_step(null, 'fetch');
\echo :LAST_ERROR_SQLSTATE
select count(*) from jobs.steps;
