-- Ordering keys: the jobs of a queue, tenant and key run one at a time, in enqueue order.
\set VERBOSITY default
\set SHOW_CONTEXT never
truncate jobs_data.jobs, jobs_data.job_types, jobs_data.attempts, jobs_data.ordering_keys,
  jobs_data.ordering_pending;
insert into jobs.job_types (name, backoff_base, jitter, max_attempts) values ('sync', '10 seconds', 0, 2);

-- Three jobs of key a, one of key b, and one without a key; a's later jobs wait behind its
-- first, whatever their priority.
select id as a1 from jobs.enqueue('sync', '{"n": 1}', ordering_key => 'account:a') \gset
select id as a2 from jobs.enqueue('sync', '{"n": 2}', ordering_key => 'account:a', priority => 10) \gset
select id as a3 from jobs.enqueue('sync', '{"n": 3}', ordering_key => 'account:a') \gset
select id as b1 from jobs.enqueue('sync', '{"n": 4}', ordering_key => 'account:b') \gset
select jobs.enqueue('sync', '{"n": 5}') is not null as unkeyed;
select payload->>'n' as n, state, run_at = 'infinity' as waiting from jobs.jobs order by payload->>'n';
-- A claim of ten takes one job of each key, and the unkeyed one.
select payload->>'n' as n from jobs.claim('w1', max_jobs => 10) order by 1;
select id, claim from jobs.jobs where id = :'a1' \gset
-- a1 fails and waits for its retry: the key stays held.
select jobs.fail(:'id', :claim, 'try again') as failed;
select count(*) as claimed from jobs.claim('w1', max_jobs => 10);
-- A waiting job cannot be promoted past its turn.
\set VERBOSITY sqlstate
select jobs.promote(:'a2');
\set VERBOSITY default
-- After the backoff a1 runs again and completes: a2 is next.
set pg_jobs.clock_offset = '11s';
select payload->>'n' as n, attempt from jobs.claim('w1', max_jobs => 10);
select id, claim from jobs.jobs where id = :'a1' \gset
select jobs.complete(:'id', :claim) as completed;
select payload->>'n' as n, state, run_at = 'infinity' as waiting from jobs.jobs
where ordering_key = 'account:a' order by payload->>'n';
select payload->>'n' as n from jobs.claim('w1', max_jobs => 10);
-- Cancelling the current job starts the next; a waiting job cancelled is just cancelled.
select jobs.cancel(:'a2') as cancelled;
select payload->>'n' as n, state from jobs.jobs where ordering_key = 'account:a' order by 1;
-- A lapsed final attempt buried by a claim releases the key too.
select id, claim from jobs.claim('w1', max_jobs => 10, lease => '1 second') where id = :'a3' \gset
select jobs.enqueue('sync', '{"n": 6}', ordering_key => 'account:a') is not null as enqueued;
update jobs.jobs set max_attempts = 1 where id = :'a3';
set pg_jobs.clock_offset = '20s';
select payload->>'n' as n from jobs.claim('w2', max_jobs => 10);
select payload->>'n' as n, state from jobs.jobs where ordering_key = 'account:a' order by 1;
reset pg_jobs.clock_offset;

-- A batch: the first spec of a key runs first; keys are per tenant, so another tenant's job with
-- the same key does not wait.
truncate jobs_data.jobs;
select ordinal, action from jobs.enqueue_batch('[
  {"name": "sync", "payload": {"n": 1}, "ordering_key": "k", "tenant_id": "t1"},
  {"name": "sync", "payload": {"n": 2}, "ordering_key": "k", "tenant_id": "t1"},
  {"name": "sync", "payload": {"n": 3}, "ordering_key": "k", "tenant_id": "t2"}]') order by 1;
select payload->>'n' as n, tenant_id, state, run_at = 'infinity' as waiting from jobs.jobs order by 1;

-- A requeued job goes behind its key's live jobs; with none, it runs.
truncate jobs_data.jobs;
select id as r1 from jobs.enqueue('sync', '{"n": 1}', ordering_key => 'r') \gset
select jobs.cancel(:'r1') as cancelled;
select id as r2 from jobs.enqueue('sync', '{"n": 2}', ordering_key => 'r') \gset
select jobs.requeue(:'r1') as requeued;
select payload->>'n' as n, state, run_at = 'infinity' as waiting from jobs.jobs order by 1;
select jobs.cancel(:'r2') as cancelled;
select payload->>'n' as n, state, run_at = 'infinity' as waiting from jobs.jobs order by 1;
select jobs.cancel(:'r1') as cancelled;
select jobs.requeue(:'r1') as requeued;
select payload->>'n' as n, state from jobs.jobs where id = :'r1';

-- Replace keeps a waiting job's place; the sweep deletes the rows of keys with no live job.
truncate jobs_data.jobs, jobs_data.ordering_keys;
select jobs.enqueue('sync', '{"v": 1}', ordering_key => 'x') is not null as first;
select jobs.enqueue('sync', '{"v": 1}', ordering_key => 'x', idempotency_key => 'x2') is not null as second;
select action from jobs.enqueue('sync', '{"v": 2}', ordering_key => 'x', idempotency_key => 'x2',
  on_conflict => 'replace');
select payload, state, run_at = 'infinity' as waiting from jobs.jobs where idempotency_key = 'x2';
select jobs.enqueue('sync', ordering_key => 'gone') is not null as enqueued;
update jobs.jobs set state = 'completed', finished_at = now() where ordering_key = 'gone';
select key from jobs_data.ordering_keys order by 1;
select task, affected from jobs.sweep() where task = 'ordering_turns';
select key from jobs_data.ordering_keys order by 1;

-- The sweep starts a key's next job when the end of its current job could not (an open enqueue
-- held the key: pg_test/isolation/specs/ordering-enqueue-vs-end.spec); here the trigger is
-- switched off and the pending row written by hand.
truncate jobs_data.jobs, jobs_data.ordering_keys;
select id as p1 from jobs.enqueue('sync', '{"n": 1}', ordering_key => 'p') \gset
select jobs.enqueue('sync', '{"n": 2}', ordering_key => 'p') is not null as parked;
alter table jobs_data.jobs disable trigger jobs_ordering_ended;
select jobs.cancel(:'p1') as cancelled;
alter table jobs_data.jobs enable trigger jobs_ordering_ended;
insert into jobs_data.ordering_pending values ('default', '', 'p');
select payload->>'n' as n, state from jobs.jobs order by 1;
select task, affected from jobs.sweep() where task = 'ordering_turns';
select payload->>'n' as n, state, run_at = 'infinity' as waiting from jobs.jobs order by 1;
select count(*) as pending from jobs_data.ordering_pending;

-- Only the end of a key's current job starts its next: a claim of it, and the cancel of a parked
-- job, leave the key alone. In REPEATABLE READ every end is left to the sweep (a row in
-- jobs_data.ordering_pending), so a row there shows the trigger's function went on.
truncate jobs_data.jobs, jobs_data.ordering_keys, jobs_data.ordering_pending;
select id as q1 from jobs.enqueue('sync', '{"n": 1}', ordering_key => 'q') \gset
select id as q2 from jobs.enqueue('sync', '{"n": 2}', ordering_key => 'q') \gset
begin isolation level repeatable read;
select count(*) as claimed from jobs.claim('w', array['default'], 5, '30 s');
select jobs.cancel(:'q2') as parked_cancelled;
select count(*) as pending from jobs_data.ordering_pending;
select jobs.cancel(:'q1') as current_cancelled;
select count(*) as pending from jobs_data.ordering_pending;
delete from jobs_data.jobs where id = :'q1';  -- no longer live: its delete starts nothing
select count(*) as pending from jobs_data.ordering_pending;
rollback;

-- Bad keys are refused, and nothing lands.
select count(*) as before from jobs.jobs \gset
select jobs.enqueue('x', ordering_key => '');
select jobs.enqueue('x', ordering_key => repeat('k', 201));
select count(*) = :before as unchanged from jobs.jobs;
