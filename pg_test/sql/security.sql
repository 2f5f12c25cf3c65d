-- Hostile roles, without preload (this instance does not preload pg_jobs; the preloaded
-- cases are in tests/security/test_security.py). docs/SECURITY.md lists what each part guards.
\set VERBOSITY terse
\set SHOW_CONTEXT never
truncate jobs_data.jobs, jobs_data.job_types, jobs_data.queues, jobs_data.steps, jobs_data.events;

-- 1. No function of pg_jobs resolves a name through the caller's search_path: each written in
-- SQL or PL/pgSQL pins it, or has a SQL-standard body resolved when it was created. Before
-- 0.1.1 this listed every helper without SECURITY DEFINER.
select p.oid::regprocedure as resolves_through_the_callers_path
from pg_proc as p
join pg_depend as d on d.classid = 'pg_proc'::regclass and d.objid = p.oid and d.deptype = 'e'
join pg_extension as e on e.oid = d.refobjid and e.extname = 'pg_jobs'
join pg_language as l on l.oid = p.prolang
where l.lanname in ('sql', 'plpgsql') and p.prosqlbody is null
  and not exists (select from unnest(p.proconfig) as c(setting) where c.setting like 'search_path=%')
order by 1;

-- A superuser whose search_path puts a hostile role's schema first calls the helpers
-- directly: the operators planted there (exact matches for types pg_catalog compares only
-- through a cast or a polymorphic operator) never run. Checked to fail on 0.1.1's
-- jobs._vacuum_due (an unpinned SQL function), which ran the planted oid = regclass.
create role pgj_mallory;
create schema mallory authorization pgj_mallory;
create table public.pwned (fn text);
grant insert on public.pwned to public;
select jobs.grant_worker('pgj_mallory');
-- pg_jobs grants no USAGE on its types (part 10); an admin might, and then the plants below
-- are possible.
grant usage on type jobs.job_state to pgj_mallory;
set role pgj_mallory;
create function mallory.eq_oid_regclass(a oid, b regclass) returns boolean language plpgsql
as $$ begin insert into public.pwned values ('oid = regclass'); return a = b::oid; end $$;
create operator mallory.= (leftarg = oid, rightarg = regclass, function = mallory.eq_oid_regclass);
create function mallory.eq_state(a jobs.job_state, b jobs.job_state) returns boolean
language plpgsql
as $$ begin insert into public.pwned values ('job_state = job_state'); return a::text = b::text; end $$;
create operator mallory.= (leftarg = jobs.job_state, rightarg = jobs.job_state,
                           function = mallory.eq_state);
create function mallory.format(f text, a integer, b integer) returns text language plpgsql
as $$ begin insert into public.pwned values ('format(text, int, int)'); return f; end $$;
reset role;
set search_path = mallory, public;
select jobs._vacuum_due() is not null as vacuum_checked;
select jobs._lapse_error(1, 3) like 'lease lapsed on attempt 1 of 3%' as lapse_worded;
select jobs._final_state(true) as final_state;
select count(*) as policies from jobs._policy('x');
select jobs.enqueue('planted') is not null as enqueued;
select count(*) as claimed from jobs.claim('w');
select count(*) as swept from jobs.sweep();
select * from jobs.queue_stats where queue = 'default';
reset search_path;
select fn as planted_code_that_ran from public.pwned;
drop schema mallory cascade;
drop table public.pwned;
drop owned by pgj_mallory;
drop role pgj_mallory;
truncate jobs_data.jobs;

-- 2. pg_jobs.clock_offset counts only as a superuser set it. A role may SET the placeholder
-- while the library is not loaded in its backend; the first function of pg_jobs that loads it
-- drops that value with a WARNING, and the clock does not move (nor retention shrink).
-- Checked to fail on 0.1.1, whose jobs.clock() read the placeholder: it ran a day ahead.
create role pgj_clock login;
select jobs.grant_worker('pgj_clock');
select jobs.enqueue('timed') is not null as enqueued;
\c - pgj_clock
\set VERBOSITY terse
set pg_jobs.clock_offset = '1d';
set pg_jobs.completed_retention = 0;
-- The claim is the first call of pg_jobs in this backend (its clock is the first function of
-- the library it runs), so nothing has loaded the library before it.
select lease_expires_at - clock_timestamp() between interval '0' and interval '1 minute' as clock_not_moved
from jobs.claim('w', lease => '1 minute');
show pg_jobs.clock_offset;
show pg_jobs.completed_retention;
set pg_jobs.clock_offset = '1d';
\c - postgres
\set VERBOSITY terse
\set SHOW_CONTEXT never
-- A superuser moves it (the tests do).
set pg_jobs.clock_offset = '1d';
select jobs.clock() - clock_timestamp() > interval '23 hours' as superuser_moves_it;
reset pg_jobs.clock_offset;
drop owned by pgj_clock;
drop role pgj_clock;
truncate jobs_data.jobs;

-- 3. Claim tokens cannot be derived from earlier ones: the claim's millisecond (or the last
-- token's plus one) in the high 40 bits, 23 random bits below. Strictly increasing per job; a
-- refusal does not name the current token.
-- Checked to fail on 0.1.1, whose tokens counted 1, 2, 3.
create temp table tokens (n int, claim bigint);
select (jobs.enqueue('tokened', id => '00000000-0000-0000-0000-00000000070c')).id is not null as enqueued;
do $$
declare
  v_claim bigint;
begin
  for i in 1..20 loop
    select c.claim into v_claim from jobs.claim('w') as c;
    insert into tokens values (i, v_claim);
    perform jobs.snooze('00000000-0000-0000-0000-00000000070c', v_claim, jobs.clock());
  end loop;
end
$$;
select bool_and(t.claim > p.claim) as increasing,
       bool_and((t.claim >> 23) > (p.claim >> 23)) as high_bits_grow,
       bool_and(t.claim - p.claim not in (1, 8388608)) as not_the_last_plus_one
from tokens as t join tokens as p on p.n = t.n - 1;
select claim as old from tokens where n = 19 \gset
select jobs.assert_claim('00000000-0000-0000-0000-00000000070c', :old);
truncate jobs_data.jobs;

-- 4. Lower: a payload over pg_jobs.max_payload_size, and an idempotency key or event key over
-- 512 bytes, are refused with 22023 and change nothing. Before 0.1.1 a key of 512 four-byte
-- characters passed the check and failed in the index (54000).
set pg_jobs.max_payload_size = '1kB';
select jobs.enqueue('big', jsonb_build_object('data', repeat('x', 2000)));
\echo :LAST_ERROR_SQLSTATE
select count(*) from jobs.enqueue_batch(jsonb_build_array(
  jsonb_build_object('name', 'fine'), jsonb_build_object('name', 'big', 'payload', jsonb_build_object('data', repeat('x', 2000)))));
\echo :LAST_ERROR_SQLSTATE
select jobs.publish('big', jsonb_build_object('data', repeat('x', 2000)));
\echo :LAST_ERROR_SQLSTATE
reset pg_jobs.max_payload_size;
select jobs.enqueue('keyed', idempotency_key => k.key, tenant_id => repeat('😀', 200))
from (select string_agg(chr(65536 + (i * 7919) % 100000), '') as key
      from generate_series(1, 512) as i) as k;
\echo :LAST_ERROR_SQLSTATE
select jobs.publish('keyed', key => repeat('😀', 129));
\echo :LAST_ERROR_SQLSTATE
select (select count(*) from jobs.jobs) as jobs, (select count(*) from jobs.events) as events;
select deduped from jobs.enqueue('keyed', idempotency_key => repeat('😀', 128));

-- 5. A run belongs to the tenant of its jobs: a job of another tenant (or of none) cannot
-- attach to it, and so cannot write its steps; a new run may still be named by the caller.
-- Checked to fail on 0.1.1, which attached any job to any run.
select (jobs.enqueue('first', tenant_id => 'acme', run_id => '00000000-0000-0000-0000-0000000007a1')).run_id;
select (jobs.enqueue('second', tenant_id => 'acme', run_id => '00000000-0000-0000-0000-0000000007a1')).run_id;
select jobs.enqueue('intruder', tenant_id => 'other', run_id => '00000000-0000-0000-0000-0000000007a1');
\echo :LAST_ERROR_SQLSTATE
select jobs.enqueue('intruder', run_id => '00000000-0000-0000-0000-0000000007a1');
\echo :LAST_ERROR_SQLSTATE
select count(*) from jobs.enqueue_batch('[{"name": "intruder", "tenant_id": "other", "run_id": "00000000-0000-0000-0000-0000000007a1"}]');
\echo :LAST_ERROR_SQLSTATE
select name from jobs.jobs where run_id = '00000000-0000-0000-0000-0000000007a1' order by name;
-- A run named before its first job exists is taken by whoever names it first: the job whose
-- id it is (an outbox id, a spawned child's derived id), enqueued later for another tenant,
-- is refused rather than share the steps saved there. Checked: without the test of a spec's
-- own id, the job was enqueued and read the steps the other tenant had saved in its run.
select (jobs.enqueue('squatter', queue => 'squat', tenant_id => 'other',
                     run_id => '00000000-0000-0000-0000-0000000007b1')).run_id;
select id, claim from jobs.claim('w', array['squat']) \gset squat_
select jobs.save_step(:'squat_id', :squat_claim, 'planted', '{"from": "other"}');
select jobs.enqueue('victim', tenant_id => 'acme', id => '00000000-0000-0000-0000-0000000007b1');
\echo :LAST_ERROR_SQLSTATE
select count(*) as victims from jobs.jobs where id = '00000000-0000-0000-0000-0000000007b1';

-- 6. Roles bound to tenants: a producer enqueues (and dedupes) for its tenants only, a
-- worker is handed only their jobs and reads only their runs' steps; the binding is a
-- superuser-only setting the role cannot change; unbound roles are as before.
truncate jobs_data.jobs, jobs_data.steps;
create role pgj_acme_producer login;
create role pgj_acme_worker login;
select jobs.grant_producer('pgj_acme_producer', tenant => 'acme');
select jobs.grant_worker('pgj_acme_worker', tenant => 'acme');
select jobs.grant_worker('pgj_acme_worker', tenant => 'acme-eu');
select jobs.grant_worker('pgj_acme_worker', tenant => null);
\echo :LAST_ERROR_SQLSTATE
-- A superuser (the background worker's role) cannot be bound: it could change the setting.
select jobs.grant_worker(current_user, tenant => 'acme');
\echo :LAST_ERROR_SQLSTATE
select s.setconfig from pg_db_role_setting as s join pg_roles as r on r.oid = s.setrole
where r.rolname like 'pgj_acme_%' order by r.rolname;
select (jobs.enqueue('other', tenant_id => 'globex', idempotency_key => 'k1',
                     id => '00000000-0000-0000-0000-000000000a01')).id;
select jobs.enqueue('mine', tenant_id => 'acme-eu', run_id => '00000000-0000-0000-0000-000000000a0e') is not null as enqueued;
\c - pgj_acme_producer
\set VERBOSITY terse
-- Set on the placeholder before anything loaded the library: dropped with a WARNING.
set pg_jobs.tenants = '["globex"]';
select jobs.enqueue('theirs', tenant_id => 'globex');
\echo :LAST_ERROR_SQLSTATE
select (jobs.enqueue('mine', tenant_id => 'acme')).deduped;
select jobs.enqueue('theirs', tenant_id => 'globex', idempotency_key => 'k1');
\echo :LAST_ERROR_SQLSTATE
select jobs.enqueue('untenanted');
\echo :LAST_ERROR_SQLSTATE
select count(*) from jobs.enqueue_batch('[{"name": "mine", "tenant_id": "acme"}, {"name": "theirs", "tenant_id": "globex"}]');
\echo :LAST_ERROR_SQLSTATE
set pg_jobs.tenants = '["globex"]';
\c - pgj_acme_worker
\set VERBOSITY terse
select name, tenant_id from jobs.claim('w', max_jobs => 10) order by name, tenant_id;
select * from jobs.get_step('00000000-0000-0000-0000-000000000a01', 'x');
\echo :LAST_ERROR_SQLSTATE
select done from jobs.get_step('00000000-0000-0000-0000-000000000a0e', 'x');
-- Connecting with the setting emptied (PGOPTIONS, or options in the connection string) leaves
-- the role bound: the binding is read from the role's own settings in the catalog. At 551070c
-- PostgreSQL dropped the role's setting for the session's empty value, and then that value
-- too when the library loaded (a non-superuser's), so the compiled default, unbound, applied.
-- Checked: with jobs._tenants reading the session's value alone, the worker below claimed
-- globex's job and enqueued one for globex.
\c 'dbname=pg_jobs_regress user=pgj_acme_worker options=-cpg_jobs.tenants='
\set VERBOSITY terse
select name, tenant_id from jobs.claim('w', max_jobs => 10) order by name, tenant_id;
select count(*) as enqueued_for_globex from jobs.enqueue_batch('[{"name": "theirs", "tenant_id": "globex"}]');
\echo :LAST_ERROR_SQLSTATE
-- A bound worker's complete_many (up to 10,000 pairs a call, the fastest place to try guessed
-- tokens) lands only its tenants' jobs: here another tenant's job with its real token.
-- Checked: without the tenant test in complete_many it landed (true).
\c - postgres
select id as globex_id, claim as globex_claim from jobs.claim('other-worker', max_jobs => 1) \gset
\c - pgj_acme_worker
\set VERBOSITY terse
select landed from jobs.complete_many(array[:'globex_id']::uuid[], array[:globex_claim]::bigint[]);
-- Every fence of a held job's writes takes a bound role's token only for its tenants' jobs
-- (here assert_claim, given the real token), and the refusal tells it nothing of that job;
-- an enqueue under that job's id is refused rather than hand back the job and its run.
-- Checked: without jobs._tenant_ok in the fence the assert held, and without the tenant test
-- of a caller-allocated id the enqueue answered the globex job, deduped.
select jobs.assert_claim(:'globex_id', :globex_claim);
select jobs.enqueue('mine', tenant_id => 'acme', id => :'globex_id');
\echo :LAST_ERROR_SQLSTATE
-- jobs.get_job and get_jobs answer a bound role its tenants' jobs only; another tenant's job
-- answers as no job, as an unknown id does. Checked: without the tenant test in jobs.get_jobs
-- the producer saw globex's job.
\c - postgres
select id as acme_id from jobs.jobs where tenant_id = 'acme' order by enqueued_at, id limit 1 \gset
\c - pgj_acme_producer
\set VERBOSITY terse
select name, tenant_id from jobs.get_jobs(array[:'globex_id', :'acme_id',
                                                '00000000-0000-0000-0000-00000000ffff']::uuid[]);
select count(*) as globex_seen from jobs.get_job(:'globex_id');
\c - postgres
select state from jobs.jobs where id = :'globex_id';
\set VERBOSITY terse
\set SHOW_CONTEXT never
select name, tenant_id, state from jobs.jobs order by name, tenant_id;
drop owned by pgj_acme_producer;
drop owned by pgj_acme_worker;
drop role pgj_acme_producer;
drop role pgj_acme_worker;

-- 7. The queue registry does not grow forever: at most once an hour the sweep deletes the
-- queues with no job at all that are not paused (and never 'default'); enqueue registers a
-- queue again when it is next used. Before 0.1.1 every name ever used stayed.
truncate jobs_data.jobs, jobs_data.queues;
insert into jobs_data.queues (queue) select 'gone_' || g from generate_series(1, 50) as g;
insert into jobs_data.queues (queue, paused) values ('default', false), ('paused_one', true);
select jobs.enqueue('x', queue => 'live_one') is not null as enqueued;
select jobs.enqueue('y', queue => 'finished_one') is not null as enqueued;
update jobs_data.jobs set state = 'completed', finished_at = now() where queue = 'finished_one';
update jobs_data.maintenance set queues_pruned_at = null;
select affected as queues_deleted from jobs.sweep() where task = 'queues_deleted';
select queue from jobs.queues order by queue;
insert into jobs.queues (queue) values ('again');
select affected as within_the_hour from jobs.sweep() where task = 'queues_deleted';
set pg_jobs.clock_offset = '61min';
select affected as an_hour_later from jobs.sweep() where task = 'queues_deleted';
reset pg_jobs.clock_offset;
select count(*) as registered_again from jobs.enqueue_batch('[{"name": "z", "queue": "again"}]');
select queue from jobs.queues where queue = 'again';

-- 8. Results and step outputs are bounded by pg_jobs.max_payload_size, as payloads are: a
-- larger one is refused (22023) and nothing is written (at 551070c 50 MB were accepted).
truncate jobs_data.jobs, jobs_data.steps;
set pg_jobs.max_payload_size = '1kB';
select jobs.enqueue('big_result', queue => 'sizes') is not null as enqueued;
select id, claim from jobs.claim('w', array['sizes']) \gset big_
select jobs.complete(:'big_id', :big_claim, jsonb_build_object('blob', repeat('x', 5000)));
\echo :LAST_ERROR_SQLSTATE
select * from jobs.complete_many(array[:'big_id']::uuid[], array[:big_claim]::bigint[],
                                 array[jsonb_build_object('blob', repeat('x', 5000))]);
\echo :LAST_ERROR_SQLSTATE
select jobs.save_step(:'big_id', :big_claim, 'huge', jsonb_build_object('blob', repeat('x', 5000)));
\echo :LAST_ERROR_SQLSTATE
select state, result from jobs.jobs where id = :'big_id';
select count(*) as steps from jobs.steps;
select jobs.complete(:'big_id', :big_claim, '{"small": true}') as completed;
reset pg_jobs.max_payload_size;

-- 9. Events per tenant: a bound producer's event belongs to its tenant, wakes and reaches only
-- that tenant's jobs, and it cannot publish for another. Checked: at 551070c (events shared)
-- acme's forged event woke globex's waiting job, which then received acme's payload.
truncate jobs_data.jobs, jobs_data.steps, jobs_data.events;
create role pgj_acme_publisher login;
select jobs.grant_producer('pgj_acme_publisher', tenant => 'acme');
select jobs.enqueue('waits', tenant_id => 'globex', queue => 'ev') is not null as enqueued;
select id, claim from jobs.claim('w', array['ev']) \gset globex_
select status from jobs.await_event(:'globex_id', :globex_claim, 'order_paid', 'o-1');
\c - pgj_acme_publisher
\set VERBOSITY terse
select jobs.publish('order_paid', '{"forged": true}', 'o-1') is not null as published;
select jobs.publish('order_paid', '{"forged": true}', 'o-1', tenant_id => 'globex');
\echo :LAST_ERROR_SQLSTATE
\c - postgres
\set VERBOSITY terse
select state from jobs.jobs where id = :'globex_id';
select tenant_id from jobs.events;
select jobs.publish('order_paid', '{"real": true}', 'o-1', tenant_id => 'globex') is not null as published;
select id, claim from jobs.claim('w', array['ev']) \gset globex_
select status, payload from jobs.await_event(:'globex_id', :globex_claim, 'order_paid', 'o-1');
drop owned by pgj_acme_publisher;
drop role pgj_acme_publisher;

-- 10. A role pg_jobs granted cannot make an object of pg_jobs's types (a temporary table of
-- jobs.job_spec blocked DROP EXTENSION and every upgrade that changes the type): no USAGE on
-- them is granted, and calling with values of them needs none. Checked to fail on 515c644,
-- whose jobs.grant_producer granted USAGE: the table was made.
create role pgj_typer;
select jobs.grant_producer('pgj_typer');
set role pgj_typer;
create temporary table spec_hold (s jobs.job_spec);
create temporary table state_hold (s jobs.job_state);
select count(*) as enqueued from jobs.enqueue_batch('[{"name": "typed"}]');
select (row('typed_row', '{}', 'default', null, 0, null, null, null, null, null, null, null,
  null, null, null, null, null, null, null, null, null, null, null)::jobs.job_spec).name as a_value_needs_no_usage;
reset role;
select count(*) as spec_tables from pg_attribute where atttypid = 'jobs.job_spec'::regtype;
drop owned by pgj_typer;
drop role pgj_typer;
