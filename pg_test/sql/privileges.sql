-- Privileges: nothing for PUBLIC; producer, worker and admin capabilities; a hostile
-- search_path changes nothing.
\set VERBOSITY terse
\set SHOW_CONTEXT never
truncate jobs_data.jobs, jobs_data.job_types, jobs_data.queues, jobs_data.steps, jobs_data.events;
create role pgj_nobody;
create role pgj_producer;
create role pgj_worker;
create role pgj_admin;
create role pgj_monitor;
select jobs.grant_producer('pgj_producer');
select jobs.grant_worker('pgj_worker');
select jobs.grant_admin('pgj_admin');
select jobs.grant_monitor('pgj_monitor');
select jobs.grant_worker('pgj_missing');
\echo :LAST_ERROR_SQLSTATE
select jobs.grant_worker(null);
\echo :LAST_ERROR_SQLSTATE

-- Nothing for PUBLIC.
set role pgj_nobody;
select jobs.enqueue('x');
select count(*) from jobs.jobs;
reset role;

-- A producer enqueues and publishes; it cannot claim or read jobs.
set role pgj_producer;
select deduped from jobs.enqueue('task', idempotency_key => 'k1');
select count(*) from jobs.enqueue_batch('[{"name": "task"}]');
-- It names itself, never another role: the label is its own, the role the one it acts as.
select deduped from jobs.enqueue('labelled', enqueued_by => 'postgres');
select jobs.publish('evt') is not null as published;
select count(*) from jobs.claim('p');
select count(*) from jobs.jobs;
select jobs.cancel('00000000-0000-0000-0000-000000000000');
reset role;

-- A worker also claims and settles; it cannot cancel, requeue or read the tables.
set role pgj_worker;
select id, run_id, claim from jobs.claim('w') \gset
select jobs.heartbeat(:'id', :claim) is not null as held;
select jobs.save_step(:'id', :claim, 's', '1');
select done from jobs.get_step(:'run_id', 's');
select done from jobs.start_step(:'id', :claim, 't');
select jobs.fail_step(:'id', :claim, 't', 'boom');
select step, state from jobs.get_steps(:'run_id') order by step;
select jobs.complete(:'id', :claim);
select jobs.cancel(:'id');
select jobs.requeue(:'id');
select jobs.sweep();
select count(*) from jobs.jobs;
update jobs.jobs set state = 'ready';
reset role;

-- An admin does everything.
set role pgj_admin;
select name, enqueued_by from jobs.jobs where name in ('task', 'labelled') order by name, enqueued_by;
select jobs.requeue(:'id');
select count(*) from jobs.jobs;
select queue, ready from jobs.queue_stats where queue = 'default';
select count(*) >= 0 as swept from jobs.sweep();
select jobs.pause_queue('default');
select jobs.resume_queue('default');
reset role;

-- A monitor reads queue_stats and nothing else.
set role pgj_monitor;
select queue, ready, oldest_ready_age is not null as aged from jobs.queue_stats where queue = 'default';
select count(*) from jobs.jobs;
select jobs.enqueue('x');
reset role;

-- A hostile search_path: a schema ahead of pg_catalog whose = on bigint is always true and
-- whose clock_timestamp() is far in the future. The fence still refuses a wrong token.
create schema evil;
create function evil.eq_always(bigint, bigint) returns boolean language sql as 'select true';
create operator evil.= (leftarg = bigint, rightarg = bigint, function = evil.eq_always);
create function evil.clock_timestamp() returns timestamptz language sql as $$select '2999-01-01'::timestamptz$$;
create function evil.gen_random_uuid() returns uuid language sql as $$select '00000000-0000-0000-0000-000000000bad'::uuid$$;
set search_path = evil, pg_catalog, public;
select 1::bigint = 2::bigint as evil_equals;
select id <> '00000000-0000-0000-0000-000000000bad' as real_uuid from jobs.enqueue('hostile');
select id, claim from jobs.claim('w') \gset
select jobs.complete(:'id', :claim + 1) as wrong_token_lands;
select jobs.heartbeat(:'id', :claim + 7) is null as wrong_token_refused;
select jobs.complete(:'id', :claim) as right_token_lands;
reset search_path;
drop schema evil cascade;

reset role;
drop owned by pgj_producer, pgj_worker, pgj_admin, pgj_nobody, pgj_monitor;
drop role pgj_nobody, pgj_producer, pgj_worker, pgj_admin, pgj_monitor;
