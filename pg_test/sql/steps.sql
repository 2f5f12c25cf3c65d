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

-- Durable sleep: the first call saves the step and suspends the job, its attempt given back;
-- once it runs again (promoted here, or at until) the same call answers true at once.
truncate jobs_data.jobs, jobs_data.steps;
select jobs.enqueue('reminder', id => '00000000-0000-0000-0000-0000000000a2') is not null;
select id, claim from jobs.claim('w') \gset
select jobs.sleep(:'id', :claim, 'wait_a_day', jobs.clock() + interval '1 day');
select state, attempt, run_at > jobs.clock() + interval '23 hours' as until_tomorrow from jobs.jobs;
select step, output ? 'until' as has_until from jobs.steps;
-- The sleeper's claim is gone: it can sleep no more.
select jobs.sleep(:'id', :claim, 'again', jobs.clock() + interval '1 day');
\echo :LAST_ERROR_SQLSTATE
select jobs.promote(:'id');
select id, claim, attempt from jobs.claim('w') \gset
select jobs.sleep(:'id', :claim, 'wait_a_day', jobs.clock() + interval '1 day');
select state, attempt from jobs.jobs;
-- A time already past: the step is saved and the job goes on.
select jobs.sleep(:'id', :claim, 'no_wait', jobs.clock() - interval '1 second');
select step from jobs.steps order by seq;
-- Bad input: a clear error, and nothing changes.
select jobs.sleep(:'id', :claim, 'x', null);
\echo :LAST_ERROR_SQLSTATE
select jobs.sleep(:'id', :claim, 'x', 'infinity');
\echo :LAST_ERROR_SQLSTATE
select jobs.sleep(:'id', :claim, '', jobs.clock());
\echo :LAST_ERROR_SQLSTATE
select jobs.sleep(:'id', null, 'x', jobs.clock());
\echo :LAST_ERROR_SQLSTATE
select state, attempt, (select count(*) from jobs.steps) as steps from jobs.jobs;

-- Each lease_lost hint says what becomes of the job in the state it is in now.
select jobs.complete(:'id', :claim);
select jobs.save_step(:'id', :claim, 'late', '{}');
select jobs.enqueue('doomed', id => '00000000-0000-0000-0000-0000000000a3', max_attempts => 1) is not null;
select id as doomed, claim as doomed_claim from jobs.claim('w') \gset
select jobs.fail(:'doomed', :doomed_claim, 'boom');
select jobs.save_step(:'doomed', :doomed_claim, 'late', '{}');
select jobs.requeue(:'doomed');
select jobs.assert_claim(:'doomed', :doomed_claim);
select jobs.save_step('00000000-0000-0000-0000-00000000dead', 1, 'late', '{}');

-- Step states: start_step marks a step running (or answers its saved output), fail_step keeps
-- a failure with its error, and only a completed step is a memo: a failed one runs again.
truncate jobs_data.jobs, jobs_data.steps;
select jobs.enqueue('stateful', id => '00000000-0000-0000-0000-0000000000a4') is not null;
select id, claim, run_id from jobs.claim('w') \gset
select * from jobs.start_step(:'id', :claim, 'fetch');
select step, state, error, finished_at is null as unfinished from jobs.get_steps(:'run_id');
select jobs.fail_step(:'id', :claim, 'fetch', 'connection refused');
select step, state, error, finished_at >= started_at as finished from jobs.get_steps(:'run_id');
select * from jobs.get_step(:'run_id', 'fetch');
select jobs.fail(:'id', :claim, 'step fetch timed out after 50 ms', timed_out => true);
select outcome, error from jobs.attempts where job_id = :'id';
select jobs.promote(:'id');
select id, claim, attempt from jobs.claim('w') \gset
-- The second attempt runs it again; its save completes it, and a late failure changes nothing.
select * from jobs.start_step(:'id', :claim, 'fetch');
select step, state, attempt, error from jobs.get_steps(:'run_id');
select jobs.save_step(:'id', :claim, 'fetch', '{"rows": 3}');
select jobs.fail_step(:'id', :claim, 'fetch', 'too late');
select * from jobs.start_step(:'id', :claim, 'fetch');
select step, state, output, error from jobs.get_steps(:'run_id');
-- A step that failed and is saved by a plain save_step (no start) completes too.
select jobs.fail_step(:'id', :claim, 'direct', 'boom');
select jobs.save_step(:'id', :claim, 'direct', '1');
select step, state, output from jobs.get_steps(:'run_id') order by step;
-- Bad input and lost claims: a clear error, and nothing changes.
select jobs.fail_step(:'id', :claim, 'fetch', null);
\echo :LAST_ERROR_SQLSTATE
select jobs.start_step(:'id', :claim, '');
\echo :LAST_ERROR_SQLSTATE
select jobs.get_steps(null);
\echo :LAST_ERROR_SQLSTATE
select jobs.start_step(:'id', :claim + 1, 'other');
\echo :LAST_ERROR_SQLSTATE
select jobs.fail_step(:'id', :claim + 1, 'fetch', 'stale');
\echo :LAST_ERROR_SQLSTATE
select step, state, error from jobs.get_steps(:'run_id') order by step;
