-- jobs.enqueue and jobs.enqueue_batch: states, defaults, policy, idempotency, refusals.
\set VERBOSITY default
\set SHOW_CONTEXT never
truncate jobs_data.jobs, jobs_data.job_types, jobs_data.queues;

-- A job enqueued now is ready; one for later is delayed.
select (jobs.enqueue('send_email', '{"to": "a@example.com"}')).deduped;
select (jobs.enqueue('send_email', run_at => now() + interval '1 hour')).deduped;
select name, queue, state, priority, attempt, max_attempts, claim, payload
from jobs.jobs order by state, created_at;

-- max_attempts: the argument, else the job type's policy, else 25.
insert into jobs.job_types (name, max_attempts) values ('report', 3);
select jobs.enqueue('report') is not null as enqueued;
select jobs.enqueue('report', max_attempts => 7) is not null as enqueued;
select name, max_attempts from jobs.jobs where name = 'report' order by max_attempts;

-- Idempotency: one live job per (name, tenant, key); the live job comes back deduped.
select id as first_id from jobs.enqueue('charge', idempotency_key => 'order-1', id => '00000000-0000-0000-0000-00000000000c') \gset
select id = :'first_id' as same_job, deduped from jobs.enqueue('charge', idempotency_key => 'order-1');
-- Another name or another tenant does not share the key.
select deduped from jobs.enqueue('refund', idempotency_key => 'order-1');
select deduped from jobs.enqueue('charge', idempotency_key => 'order-1', tenant_id => 'acme');
select deduped from jobs.enqueue('charge', idempotency_key => 'order-1', tenant_id => 'acme');
select count(*) from jobs.jobs where idempotency_key = 'order-1';
-- on_conflict => 'error' raises duplicate_job and inserts nothing.
select jobs.enqueue('charge', idempotency_key => 'order-1', on_conflict => 'error');
\echo :LAST_ERROR_SQLSTATE
-- A finished job frees its key.
update jobs.jobs set state = 'completed', finished_at = now() where id = :'first_id';
select id <> :'first_id' as new_job, deduped from jobs.enqueue('charge', idempotency_key => 'order-1');

-- A caller-allocated id that exists returns that job, whatever its state.
select deduped from jobs.enqueue('outbox', id => '00000000-0000-0000-0000-000000000001');
update jobs.jobs set state = 'completed' where id = '00000000-0000-0000-0000-000000000001';
select id, deduped from jobs.enqueue('outbox', id => '00000000-0000-0000-0000-000000000001');
-- run_id attaches a job to an existing run.
select run_id from jobs.enqueue('step2', run_id => '00000000-0000-0000-0000-0000000000aa');

-- enqueue_batch: one row per spec, in order; duplicates inside the batch dedupe too.
select ordinal, deduped from jobs.enqueue_batch('[
  {"name": "batch", "payload": {"n": 1}},
  {"name": "batch", "payload": {"n": 2}, "queue": "other", "priority": 5},
  {"name": "batch", "idempotency_key": "b"},
  {"name": "batch", "idempotency_key": "b"},
  {"name": "batch", "run_at": "2999-01-01T00:00:00Z"}
]');
select queue, state, priority, payload from jobs.jobs where name = 'batch' order by created_at, payload::text;
select count(*) from jobs.enqueue_batch('[]');

-- Bad input: a clear error, and nothing changes.
select count(*) as jobs_before from jobs.jobs \gset
select jobs.enqueue(null);
\echo :LAST_ERROR_SQLSTATE
select jobs.enqueue('x', payload => null);
\echo :LAST_ERROR_SQLSTATE
select jobs.enqueue('x', queue => '');
\echo :LAST_ERROR_SQLSTATE
select jobs.enqueue('x', max_attempts => 0);
\echo :LAST_ERROR_SQLSTATE
select jobs.enqueue('x', on_conflict => 'skip');
\echo :LAST_ERROR_SQLSTATE
select jobs.enqueue(repeat('n', 201));
\echo :LAST_ERROR_SQLSTATE
select jobs.enqueue_batch(null);
\echo :LAST_ERROR_SQLSTATE
select jobs.enqueue_batch('{"name": "x"}');
\echo :LAST_ERROR_SQLSTATE
select jobs.enqueue_batch('[{"name": "ok"}, {"nme": "typo"}]');
\echo :LAST_ERROR_SQLSTATE
select jobs.enqueue_batch('[{"name": "ok"}, {"name": "x", "max_attempts": "three"}]');
\echo :LAST_ERROR_SQLSTATE
select jobs.enqueue_batch('[{"name": "ok"}, {"name": null}]');
\echo :LAST_ERROR_SQLSTATE
select count(*) = :jobs_before as unchanged from jobs.jobs;

-- Debounce and replace: a repeat of a key whose job still waits to run gives it the new
-- payload and run time; a running job is left as it is; the answer says which happened.
truncate jobs_data.jobs;
select deduped, action from jobs.enqueue('digest', '{"n": 1}', idempotency_key => 'u1',
  on_conflict => 'debounce', debounce => '30 s', debounce_max => '2 min');
select state, payload, floor(extract(epoch from run_at - enqueued_at)) as runs_after_s from jobs.jobs;
set pg_jobs.clock_offset = '20 s';
select deduped, action from jobs.enqueue('digest', '{"n": 2}', idempotency_key => 'u1',
  on_conflict => 'debounce', debounce => '30 s', debounce_max => '2 min');
select state, payload, floor(extract(epoch from run_at - enqueued_at)) as runs_after_s from jobs.jobs;
-- Never past the first enqueue plus debounce_max.
set pg_jobs.clock_offset = '100 s';
select action from jobs.enqueue('digest', '{"n": 3}', idempotency_key => 'u1',
  on_conflict => 'debounce', debounce => '30 s', debounce_max => '2 min');
select state, payload, floor(extract(epoch from run_at - enqueued_at)) as runs_after_s from jobs.jobs;
reset pg_jobs.clock_offset;
-- Replace: the new payload, and its run_at (now, when it names none).
select action from jobs.enqueue('digest', '{"n": 4}', idempotency_key => 'u1', on_conflict => 'replace');
select state, payload from jobs.jobs;
select count(*) as claimed from jobs.claim('w');
select deduped, action from jobs.enqueue('digest', '{"n": 5}', idempotency_key => 'u1', on_conflict => 'replace');
select state, payload from jobs.jobs;
-- In a batch: the second spec of a key debounces the first.
select ordinal, deduped, action from jobs.enqueue_batch('[
  {"name": "b", "idempotency_key": "k", "on_conflict": "debounce", "debounce": "1 min", "payload": {"v": 1}},
  {"name": "b", "idempotency_key": "k", "on_conflict": "debounce", "debounce": "1 min", "payload": {"v": 2}}]');
select state, payload from jobs.jobs where name = 'b';
-- Refusals change nothing.
select count(*) as jobs_before from jobs.jobs \gset
select jobs.enqueue('x', on_conflict => 'replace');
\echo :LAST_ERROR_SQLSTATE
select jobs.enqueue('x', idempotency_key => 'k', debounce => '1 s');
\echo :LAST_ERROR_SQLSTATE
select jobs.enqueue('x', idempotency_key => 'k', on_conflict => 'debounce');
\echo :LAST_ERROR_SQLSTATE
select jobs.enqueue('x', idempotency_key => 'k', on_conflict => 'debounce', debounce => '0 s');
\echo :LAST_ERROR_SQLSTATE
select jobs.enqueue('x', idempotency_key => 'k', on_conflict => 'debounce', debounce => '10 s', debounce_max => '5 s');
\echo :LAST_ERROR_SQLSTATE
select jobs.enqueue_batch('[{"name": "x", "idempotency_key": "k", "debounce_max": "1 min"}]');
\echo :LAST_ERROR_SQLSTATE
select jobs.enqueue_batch('[{"name": "x", "idempotency_key": "k", "on_conflict": "debounce", "debounce": "soon"}]');
\echo :LAST_ERROR_SQLSTATE
select count(*) = :jobs_before as unchanged from jobs.jobs;

-- Provenance: enqueued_by is the role and, in parentheses, the label given or else the
-- application_name; a child's is its parent. A caller names a label, never another role.
truncate jobs_data.jobs;
set application_name = 'billing-api';
select jobs.enqueue('prov_a') is not null;
select jobs.enqueue('prov_b', enqueued_by => 'nightly-import') is not null;
set application_name = '';
select jobs.enqueue('prov_c') is not null;
select count(*) from jobs.enqueue_batch('[{"name": "prov_d", "enqueued_by": "batch"}, {"name": "prov_e"}]');
select name, enqueued_by from jobs.jobs order by name;
select jobs.enqueue('prov_f', enqueued_by => repeat('x', 201));
\echo :LAST_ERROR_SQLSTATE
select jobs.enqueue_batch('[{"name": "prov_g", "enqueued_by": ""}]');
\echo :LAST_ERROR_SQLSTATE
select count(*) as still_five from jobs.jobs;
reset application_name;
