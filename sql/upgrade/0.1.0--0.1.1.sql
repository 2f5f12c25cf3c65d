-- pg_jobs 0.1.0 -> 0.1.1. Run by ALTER EXTENSION pg_jobs UPDATE. scripts/upgrade-check.sh
-- installs 0.1.0, fills it, runs this, and checks that nothing was lost and that the result is
-- the same, object for object, as a fresh install of 0.1.1. What changed in the functions
-- follows from their files (below the hand-written part); what changed elsewhere:
--
-- 1. Retention deletes finished jobs by ctid, oldest first per state, with their runs' steps,
--    and never waits on another transaction (jobs._prune); completing settles take a share of
--    it; with pg_jobs.completed_retention = 0 completing deletes the job.
-- 2. Enqueue: jobs._spec_problem is inlined; a batch with no key and no id is one INSERT.
-- 3. Backups: pg_dump carries the rows of pg_jobs's tables (see sql/backup.sql).
-- 4. Job ids are UUIDv7 (jobs._uuid_v7, src/functions/ids.rs).
-- 5. Claims and settles: jobs_lease_idx names lease_scan_at in its predicate, so a fence
--    cannot use it; jobs._within_limits takes no lapse array.
-- 6. No vacuum truncation on jobs.jobs; the background worker vacuums it when autovacuum would.
-- 7. Security (docs/SECURITY.md): jobs.clock() and the retention settings are read by the
--    library, so a role cannot move them through a placeholder; claim tokens carry 32 random
--    bits (jobs._next_claim); limits and events lock rows of jobs_data.lock_slots, not public
--    advisory keys; every function pins search_path or has a SQL-standard body; payloads are
--    bounded by pg_jobs.max_payload_size; event keys are limited in bytes. The tables move to
--    jobs_data, which only admins may use, and jobs shows them to DBAs as views.
-- 8. A refusal's CONTEXT names the public function that refused, not pg_jobs's helpers.
-- 9. A claim from a queue no job was ever enqueued to warns, once per connection.
-- 10. jobs.claim takes a last argument, wait (a blocking claim, woken from shared memory:
--     src/commit/wakeups.rs); the roles that could call the 4-argument claim may call the new one.
-- 13. Recurring schedules: jobs.schedules, jobs.schedule, jobs.unschedule, jobs.run_schedules,
--     and a task of jobs.sweep (sql/schedules.sql, src/functions/cron.rs).
-- 14. Run-time limits: jobs.job_types.timeout, timeout in enqueue specs, the attempt's deadline
--     in jobs.jobs and in what claim answers.
-- 15. Rate limits: jobs.job_types.rate_limit, rate_period and rate_limit_per_key, the starts in
--     jobs_data.rate_starts; jobs._within_limits takes the batch's room and whether to wait.
-- 16. Attempt history: jobs.attempts, and when each attempt was claimed (jobs.jobs.claimed_at).
-- 17. Outcome counters (jobs.outcome_stats) and signals to holders and watchers
--     (pg_jobs_cancel, pg_jobs_dead): src/commit/outcomes.rs.
-- 18. Child jobs: jobs.spawn, jobs.await_children, the close policy (sql/children.sql).
-- 20. Events per tenant: jobs_data.events.tenant_id, jobs.publish(..., tenant_id).
-- 19. Waiting claims on a full limit sleep until a slot of it can free (jobs._held_back, and
--     jobs._slot_freed in every statement that takes a job out of running: src/commit/wakeups.rs).
-- 21. The grants answer what the role may now do (text, not void); admins may call them again
--     (the last block but one).
-- 22. jobs.get_job and jobs.get_jobs (sql/status.sql): the roles that may enqueue may call them.
-- 23. Tenant admins and monitors (jobs.grant_admin(role, tenant), jobs.grant_monitor(role,
--     tenant)), and what a tenant admin reads (jobs.tenant_jobs, ...: sql/tenant_views.sql);
--     jobs.outcome_stats runs as its owner.
-- 25. Debounce and replace: on_conflict 'replace' and 'debounce' (jobs.enqueue's debounce and
--     debounce_max, the same keys in batch specs); what enqueue does is answered (action).
-- 26. Tags and metadata (jobs.jobs.tags, meta; in enqueue, batch specs, what claim and
--     get_job answer) and run deadlines (run_timeout on enqueue and job types; the sweep's
--     run_timeouts task).
-- 27. Ordering keys: jobs.enqueue's ordering_key (sql/ordering.sql), their tables, triggers and
--     the sweep's ordering_turns task.
-- 28. Fair queues: jobs_data.queues.fairness, jobs.set_fairness, the jobs' fair_group and
--     jobs_fair_idx (sql/fairness.sql), and the trigger that checks and applies a change.
-- 24. Durable sleep (jobs.sleep, sql/steps.sql); jobs.wait_for_job (sql/status.sql); each lease_lost hint says what becomes of the
--     job in the state it is in now (jobs._lost_hint); jobs.attempts numbers its rows (seq).
-- 29. Retention deletes a child with the root of its family, and walks only roots
--     (jobs_finished_idx holds whether a row has a parent). Limits measure values
--     uncompressed (jobs._size, src/functions/sizes.rs); jobs.max_payload_size() tells producers and
--     workers the limit. A binding follows the grant (jobs._binding): a
--     member of a bound role is bound as it is, and one holding rights both bound and unbound
--     is refused (insufficient_privilege, 42501).
-- 30. Non-retryable errors per job type (jobs.job_types.non_retryable_errors, matched by
--     jobs.fail's error_names); claims report the jobs they buried (report_buried, and the
--     buried attribute of jobs.claimed_job) for the libraries' onExhausted hooks.
-- 31. Keyed concurrency above one (jobs.job_types.key_concurrency) and what an enqueue does
--     when its key is busy (jobs.job_types.when_busy, jobs._enqueue_busy, jobs_busy_idx, and
--     lock slots 2048-3071 in sql/internal.sql).
-- 32. Step states: a step is marked running when it starts and failed with its error
--     (jobs_data.steps.state, started_at, finished_at, error; jobs.start_step, jobs.fail_step,
--     jobs.get_steps in sql/steps.sql); only a completed step is a memo. jobs.fail takes a last
--     argument, timed_out (a step past its timeout). Provenance: jobs.jobs.enqueued_by, set by
--     every enqueue (jobs._enqueuer), and jobs.enqueue's last argument of the same name.
-- 33. Operating: jobs.delete (a finished family now; not_deletable, PJ009); a child keeps its
--     key (jobs.jobs.child_key, set by jobs.spawn only).
-- 34. Prefetch: jobs.claim's and jobs.complete_and_claim's last argument, prefetch; when an
--     attempt started (jobs.jobs.started_at); jobs.mark_started and jobs.hand_back; a held job
--     whose lease lapses before it started is given back without using an attempt
--     (jobs.attempts outcome 'not_started').
-- 35. Shards: on a server with pg_jobs.shard set, every id it makes ends with its number
--     (jobs._shard, jobs._uuid_v7), a child's id with its parent's (jobs._child_id), and a
--     caller's id of another shard is refused; jobs.new_id() makes an id; jobs.add_queue makes
--     a queue known before its first job; jobs.config_export and jobs.config_apply.

-- 7. The tables move (their indexes, constraints and identity sequence with them).
drop index jobs.jobs_lease_idx;
create schema jobs_data;
comment on schema jobs_data is 'The tables of pg_jobs; only admins may use it (jobs.grant_admin)';
alter table jobs.jobs set schema jobs_data;
alter table jobs.steps set schema jobs_data;
alter table jobs.events set schema jobs_data;
alter table jobs.job_types set schema jobs_data;
alter table jobs.queues set schema jobs_data;
-- 15. and 16. (before the backups' list of tables)
-- @include sql/records.sql
-- 3. (the tables under their new names)
-- @include sql/backup.sql

-- 4. and 7.: the functions written in Rust, as pgrx declares them in the install script.
CREATE  FUNCTION jobs."_uuid_v7"() RETURNS uuid
STRICT VOLATILE PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'uuid_v7_wrapper';
CREATE  FUNCTION jobs."_shard"() RETURNS INT
STRICT STABLE PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'shard_wrapper';
CREATE OR REPLACE FUNCTION jobs."clock"() RETURNS timestamp with time zone
STRICT VOLATILE PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'clock_wrapper';
drop function jobs._retention(text, interval);
CREATE  FUNCTION jobs."_retention"(
	"setting" TEXT,
	"_default" interval
) RETURNS interval
STABLE PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'retention_wrapper';
CREATE  FUNCTION jobs."_max_payload_size"() RETURNS bigint
STRICT STABLE PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'max_payload_size_wrapper';
CREATE  FUNCTION jobs."_size"("value" anyelement) RETURNS bigint
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'size_wrapper';
CREATE  FUNCTION jobs."_tenants"() RETURNS TEXT[]
STRICT STABLE PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'tenants_wrapper';
CREATE  FUNCTION jobs."_next_claim"(
	"previous" bigint
) RETURNS bigint
STRICT VOLATILE PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'next_claim_wrapper';
-- 8. A refusal's CONTEXT names the public function that refused (src/error_context.rs).
CREATE  FUNCTION jobs."_quiet_context"() RETURNS void
STRICT IMMUTABLE PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'quiet_context_wrapper';
-- 10. The wake-ups of the blocking claim (src/commit/wakeups.rs).
CREATE  FUNCTION jobs."_signal_work"(
	"queues" TEXT[]
) RETURNS void
STRICT VOLATILE PARALLEL UNSAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'signal_work_wrapper';
CREATE  FUNCTION jobs."_moving"(
	"candidates" uuid[],
	"max_jobs" INT,
	"queues" TEXT[]
) RETURNS uuid[]
STRICT VOLATILE PARALLEL UNSAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'moving_wrapper';
CREATE  FUNCTION jobs."_work_seen"(
	"queues" TEXT[]
) RETURNS bigint[]
STRICT VOLATILE PARALLEL UNSAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'work_seen_wrapper';
CREATE  FUNCTION jobs."_await_work"(
	"queues" TEXT[],
	"seen" bigint[],
	"until" timestamp with time zone
) RETURNS void
STRICT VOLATILE PARALLEL UNSAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'await_work_wrapper';
CREATE  FUNCTION jobs."_slot_freed"(
	"name" TEXT,
	"concurrency_key" TEXT
) RETURNS bool
VOLATILE PARALLEL UNSAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'slot_freed_wrapper';
-- 13. Claims and heartbeats that are their transaction's only work commit without waiting
-- for their WAL flush (pg_jobs.async_claims, src/commit/async_claims.rs).
CREATE  FUNCTION jobs."_async_if_alone"(
	"function" TEXT
) RETURNS void
STRICT VOLATILE PARALLEL UNSAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'async_if_alone_wrapper';
-- 11. Notifications relayed by the sweeper when preloaded (src/commit/relay.rs).
CREATE  FUNCTION jobs."_notify"(
	"queue" TEXT
) RETURNS void
STRICT VOLATILE PARALLEL UNSAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'notify_wrapper';
CREATE  FUNCTION jobs."_relays"() RETURNS bool
STRICT VOLATILE PARALLEL UNSAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'relays_wrapper';
-- 9. A claim from a queue never used warns, once per connection (src/functions/unknown_queues.rs).
CREATE  FUNCTION jobs."_warn_unknown_queues"(
	"queues" TEXT[]
) RETURNS void
STRICT VOLATILE PARALLEL UNSAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'warn_unknown_queues_wrapper';
-- 14.
alter table jobs_data.jobs add column timeout interval, add column deadline timestamptz;
alter table jobs_data.jobs add column claimed_at timestamptz;  -- 16.
-- 18.
alter table jobs_data.jobs add column parent_id uuid,
  add column close_policy text check (close_policy in ('terminate', 'abandon')),
  add column children_live int;
-- 29. Retention walks the roots of families before their children (jobs._prune).
drop index jobs_data.jobs_finished_idx;
create index jobs_finished_idx on jobs_data.jobs (state, (parent_id is null), finished_at) include (queue)
  where state in ('completed', 'failed', 'dead', 'cancelled');
alter table jobs_data.job_types add column timeout interval
  check (timeout > interval '0' and timeout <= interval '7 days');
alter type jobs.claimed_job add attribute deadline timestamptz, add attribute parent_id uuid;
alter type jobs.job_spec add attribute timeout interval;
-- 15.
alter table jobs_data.job_types add column rate_limit int check (rate_limit >= 1),
  add column rate_period interval check (rate_period > interval '0' and rate_period <= interval '1 day'),
  add column rate_limit_per_key boolean not null default false,
  add constraint job_types_rate_needs_period check ((rate_limit is null) = (rate_period is null));
comment on table jobs_data.job_types is
  'Policy per job name: retries, backoff, dead-lettering, default lease, concurrency, timeout, rate limit';

-- 17.
CREATE  FUNCTION jobs."_outcome"(
	"queue" TEXT,
	"outcome" TEXT,
	"id" uuid DEFAULT NULL
) RETURNS bool
VOLATILE PARALLEL UNSAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'outcome_wrapper';
CREATE  FUNCTION jobs."_cancelling"(
	"id" uuid,
	"was_running" bool,
	"value" timestamp with time zone
) RETURNS timestamp with time zone
STRICT VOLATILE PARALLEL UNSAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'cancelling_wrapper';
-- 18. The counts of live children, moved at each statement's end (src/commit/children.rs).
CREATE  FUNCTION jobs."_family_note"(
	"parent" uuid,
	"delta" INT
) RETURNS bool
STRICT VOLATILE PARALLEL UNSAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'family_note_wrapper';
CREATE  FUNCTION jobs."_family_statement_end"()
	RETURNS TRIGGER
	LANGUAGE c
	AS 'MODULE_PATHNAME', '_family_statement_end_wrapper';
CREATE  FUNCTION jobs."_in_background_worker"() RETURNS bool
STABLE PARALLEL SAFE STRICT
LANGUAGE c
AS 'MODULE_PATHNAME', 'in_background_worker_wrapper';
CREATE  FUNCTION jobs."_outcome_stats"() RETURNS TABLE (
	"queue" TEXT,
	"completed" bigint,
	"retried" bigint,
	"dead" bigint,
	"failed" bigint,
	"cancelled" bigint,
	"timed_out" bigint,
	"lease_lapsed" bigint,
	"since" timestamp with time zone
)
STRICT VOLATILE PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'outcome_stats_wrapper';

-- 13. Cron expressions and their slots (src/functions/cron.rs), then the schedules.
CREATE  FUNCTION jobs."_cron_problem"(
	"cron" TEXT
) RETURNS TEXT
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'cron_problem_wrapper';
CREATE  FUNCTION jobs."_cron_next"(
	"cron" TEXT,
	"zone" TEXT,
	"after" timestamp with time zone
) RETURNS timestamp with time zone
STRICT STABLE PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'cron_next_wrapper';
CREATE  FUNCTION jobs."_cron_slots"(
	"cron" TEXT,
	"zone" TEXT,
	"after" timestamp with time zone,
	"until" timestamp with time zone,
	"max" INT
) RETURNS timestamp with time zone[]
STRICT STABLE PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'cron_slots_wrapper';
CREATE  FUNCTION jobs."_cron_latest"(
	"cron" TEXT,
	"zone" TEXT,
	"after" timestamp with time zone,
	"until" timestamp with time zone
) RETURNS timestamp with time zone
STRICT STABLE PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'cron_latest_wrapper';
-- @include sql/schedules.sql

-- 5.
create index jobs_lease_idx on jobs_data.jobs (queue, lease_scan_at)
  where state = 'running' and lease_scan_at is not null;
drop function jobs._within_limits(uuid[], text[], boolean[], boolean[], timestamptz);
-- Event locks take the tenant's lock slot (jobs._event_lock(name, key, tenant, await)).
drop function jobs._event_lock(text, text);

-- 6.
alter table jobs_data.jobs set (vacuum_truncate = false);

-- 7.
-- @include sql/internal.sql
alter table jobs_data.events drop constraint events_key_check,
  add constraint events_key_check check (octet_length(key) <= 512);

-- The README no longer holds the reference.
comment on table jobs_data.jobs is 'One row per job; see docs/REFERENCE.md for the life of a row';

-- 10. The 4-argument claim gives way to the 5-argument one; who may call it is kept aside.
select set_config('pg_jobs_upgrade.claim_grantees',
  coalesce((select string_agg(quote_ident(a.grantee::regrole::text), ',')
            from pg_catalog.pg_proc as p, pg_catalog.aclexplode(p.proacl) as a
            where p.oid = 'jobs.claim(text, text[], int, interval)'::regprocedure
              and a.privilege_type = 'EXECUTE' and a.grantee <> p.proowner and a.grantee <> 0), ''),
  true);
drop function jobs.claim(text, text[], int, interval);
-- 18. jobs.enqueue takes a last argument, parent_id; who may call it is kept aside, as above.
select set_config('pg_jobs_upgrade.enqueue_grantees',
  coalesce((select string_agg(quote_ident(a.grantee::regrole::text), ',')
            from pg_catalog.pg_proc as p, pg_catalog.aclexplode(p.proacl) as a
            where p.oid = 'jobs.enqueue(text, jsonb, text, timestamptz, int, int, text, text, text, text, uuid, uuid)'::regprocedure
              and a.privilege_type = 'EXECUTE' and a.grantee <> p.proowner and a.grantee <> 0), ''),
  true);
drop function jobs.enqueue(text, jsonb, text, timestamptz, int, int, text, text, text, text, uuid, uuid);
-- 20. Events per tenant: jobs.publish takes a last argument, tenant_id; who may call it is
-- kept aside, as above.
alter table jobs_data.events add column tenant_id text;
select set_config('pg_jobs_upgrade.publish_grantees',
  coalesce((select string_agg(quote_ident(a.grantee::regrole::text), ',')
            from pg_catalog.pg_proc as p, pg_catalog.aclexplode(p.proacl) as a
            where p.oid = 'jobs.publish(text, jsonb, text, interval)'::regprocedure
              and a.privilege_type = 'EXECUTE' and a.grantee <> p.proowner and a.grantee <> 0), ''),
  true);
drop function jobs.publish(text, jsonb, text, interval);
-- 21.
drop function jobs.grant_producer(name), jobs.grant_worker(name), jobs.grant_admin(name),
  jobs.grant_monitor(name);
-- 25. jobs.enqueue_batch answers each spec's action, as jobs._enqueue does; who may call it is
-- kept aside, as above.
select set_config('pg_jobs_upgrade.enqueue_batch_grantees',
  coalesce((select string_agg(quote_ident(a.grantee::regrole::text), ',')
            from pg_catalog.pg_proc as p, pg_catalog.aclexplode(p.proacl) as a
            where p.oid = 'jobs.enqueue_batch(jsonb)'::regprocedure
              and a.privilege_type = 'EXECUTE' and a.grantee <> p.proowner and a.grantee <> 0), ''),
  true);
drop function jobs.enqueue_batch(jsonb), jobs._enqueue(jobs.job_spec[], text);
-- 24. lease_lost is raised by one function, jobs._raise_lost.
drop function jobs._lost_reason(uuid, bigint);
-- (a composite type's new attributes: job_spec, enqueued)
alter type jobs.job_spec add attribute parent_id uuid, add attribute close_policy text,
  add attribute debounce interval, add attribute debounce_max interval;
alter type jobs.enqueued add attribute action text;
-- 26. Tags and metadata, and a deadline for the whole run.
alter table jobs_data.jobs add column tags text[], add column meta jsonb,
  add column run_timeout interval, add column run_deadline timestamptz;
alter table jobs_data.job_types add column run_timeout interval
  check (run_timeout > interval '0' and run_timeout <= interval '365 days');
alter type jobs.claimed_job add attribute tags text[], add attribute meta jsonb;
-- 30.
alter type jobs.claimed_job add attribute buried boolean;
alter table jobs_data.job_types add column non_retryable_errors text[]
  check (cardinality(non_retryable_errors) <= 100 and array_position(non_retryable_errors, null) is null);
-- jobs.fail takes a last argument, error_names; who may call it is kept aside, as for the claim.
select set_config('pg_jobs_upgrade.fail_grantees',
  coalesce((select string_agg(quote_ident(a.grantee::regrole::text), ',')
            from pg_catalog.pg_proc as p, pg_catalog.aclexplode(p.proacl) as a
            where p.oid = 'jobs.fail(uuid, bigint, text, timestamptz, boolean)'::regprocedure
              and a.privilege_type = 'EXECUTE' and a.grantee <> p.proowner and a.grantee <> 0), ''),
  true);
drop function jobs.fail(uuid, bigint, text, timestamptz, boolean);
-- 32.
alter table jobs_data.steps
  add column state text not null default 'completed' check (state in ('running', 'completed', 'failed')),
  add column started_at timestamptz, add column finished_at timestamptz, add column error text;
comment on table jobs_data.steps is
  'Steps of durable runs, in the order they were started (seq): running, failed (with its error) '
  'or completed (its output is the memo); saved_at is when the row was last written';
-- 31.
alter table jobs_data.job_types
  add column key_concurrency int not null default 1 check (key_concurrency between 1 and 10000),
  add column when_busy text not null default 'queue' check (when_busy in ('queue', 'skip', 'replace'));
create index jobs_busy_idx on jobs_data.jobs (concurrency_key, name)
  where concurrency_key is not null and state in ('ready', 'delayed', 'running');
alter type jobs.job_spec add attribute tags text[], add attribute meta jsonb,
  add attribute run_timeout interval;
create index jobs_tags_idx on jobs_data.jobs using gin (tags) where tags is not null;
create index jobs_run_deadline_idx on jobs_data.jobs (run_deadline)
  where run_deadline is not null and state in ('ready', 'delayed', 'suspended');
-- 27. Ordering keys (their tables are in sql/internal.sql, above).
alter table jobs_data.jobs add column ordering_key text;
alter type jobs.job_spec add attribute ordering_key text;
-- The waiting ones (run_at infinity) after the current one, so whether a key has a current job
-- and which job is next are each one entry, however many wait. (One index, not two: each index
-- of the table costs every insert and update of a job a little.)
create index jobs_ordering_idx on jobs_data.jobs
  (queue, ordering_key, (coalesce(tenant_id, '')), (run_at = 'infinity'), enqueued_at, id)
  where ordering_key is not null and state in ('ready', 'delayed', 'running', 'suspended');
-- 28. Fair queues.
alter table jobs_data.queues add column fairness text not null default 'none'
  check (fairness in ('none', 'tenant', 'concurrency_key'));
comment on table jobs_data.queues is
  'Every queue ever used (enqueue adds it), whether it is paused and how claims share it';
alter table jobs_data.jobs add column fair_group text;
-- 32.
alter table jobs_data.jobs add column enqueued_by text;
alter type jobs.job_spec add attribute enqueued_by text;
-- 33.
alter table jobs_data.jobs add column child_key text;
alter type jobs.job_spec add attribute child_key text;
-- 34. (Every job running now started when it was claimed.)
alter table jobs_data.jobs add column started_at timestamptz;
update jobs_data.jobs set started_at = claimed_at where state = 'running';
-- @after
-- 18. A parent's children, found again by their keys (jobs._child_digest is made above).
create index jobs_children_idx on jobs_data.jobs (parent_id, jobs._child_digest(id))
  where parent_id is not null;
-- 20. ... and may call the new publish.
do $$
begin
  if current_setting('pg_jobs_upgrade.publish_grantees') <> '' then
    execute 'grant execute on function jobs.publish(text, jsonb, text, interval, text) to '
      || current_setting('pg_jobs_upgrade.publish_grantees');
  end if;
end
$$;
-- 18. ... and may call the new enqueue.
do $$
begin
  if current_setting('pg_jobs_upgrade.enqueue_grantees') <> '' then
    execute 'grant execute on function jobs.enqueue(text, jsonb, text, timestamptz, int, int, text, '
      || 'text, text, text, uuid, uuid, uuid, interval, interval, text[], jsonb, interval, text, text) to '
      || current_setting('pg_jobs_upgrade.enqueue_grantees');
  end if;
end
$$;
-- 25. ... and the new enqueue_batch.
do $$
begin
  if current_setting('pg_jobs_upgrade.enqueue_batch_grantees') <> '' then
    execute 'grant execute on function jobs.enqueue_batch(jsonb) to '
      || current_setting('pg_jobs_upgrade.enqueue_batch_grantees');
  end if;
end
$$;
-- 10. ... and may call the new claim.
do $$
begin
  if current_setting('pg_jobs_upgrade.claim_grantees') <> '' then
    execute 'grant execute on function jobs.claim(text, text[], int, interval, interval, boolean, boolean) to '
      || current_setting('pg_jobs_upgrade.claim_grantees');
  end if;
  if current_setting('pg_jobs_upgrade.fail_grantees') <> '' then  -- 30.
    execute 'grant execute on function jobs.fail(uuid, bigint, text, timestamptz, boolean, text[], boolean) to '
      || current_setting('pg_jobs_upgrade.fail_grantees');
  end if;
end
$$;
-- 17. Monitors may read the outcome counters.
do $$
declare
  v_grantees text;
begin
  select string_agg(quote_ident(a.grantee::regrole::text), ',') into v_grantees
  from pg_catalog.pg_class as c, pg_catalog.aclexplode(c.relacl) as a
  where c.oid = 'jobs.queue_stats'::regclass
    and a.privilege_type = 'SELECT' and a.grantee <> c.relowner and a.grantee <> 0;
  if v_grantees is not null then
    execute 'grant select on jobs.outcome_stats to ' || v_grantees;
  end if;
end
$$;
-- 7., 13., 16., 17. and 21. Admins (the roles that could delete from the table jobs.jobs, now
-- jobs_data.jobs, which kept its privileges when it moved) may use the new schema, tables,
-- views and functions.
do $$
declare
  v_role text;
begin
  for v_role in
    select distinct quote_ident(a.grantee::regrole::text)
    from pg_catalog.pg_class as c, pg_catalog.aclexplode(c.relacl) as a
    where c.oid = 'jobs_data.jobs'::regclass
      and a.privilege_type = 'DELETE' and a.grantee <> c.relowner and a.grantee <> 0
  loop
    execute 'grant usage on schema jobs_data to ' || v_role;
    execute 'grant select, insert, update, delete on all tables in schema jobs, jobs_data to ' || v_role;
    execute 'grant usage, select on all sequences in schema jobs_data to ' || v_role;
    execute 'grant execute on all functions in schema jobs to ' || v_role;
  end loop;
end
$$;
-- 18. The children's triggers (their function is above).
-- @include sql/children_triggers.sql
-- @include sql/ordering_triggers.sql
-- @include sql/fairness_triggers.sql
-- 12., 18., 22., 24. and 29. The roles that may call a function of 0.1.0 may call the new ones beside
-- it: who may complete a batch may complete it and claim the next in one call; the workers
-- (who may save a step) may spawn and await children, and sleep; the producers and workers (who may
-- enqueue) may read their jobs' state.
do $$
declare
  v_grant record;
  v_grantees text;
begin
  for v_grant in
    select * from (values
      ('jobs.complete_many(uuid[], bigint[], jsonb[])',
       'jobs.complete_and_claim(uuid[], bigint[], text, text[], int, interval, jsonb[], boolean, boolean, uuid[], bigint[]), '
       'jobs.mark_started(uuid[], bigint[]), jobs.hand_back(uuid[], bigint[])'),
      ('jobs.save_step(uuid, bigint, text, jsonb)',
       'jobs.spawn(uuid, bigint, jsonb), jobs.await_children(uuid, bigint), jobs.sleep(uuid, bigint, text, timestamptz), '
       'jobs.start_step(uuid, bigint, text), jobs.fail_step(uuid, bigint, text, text), jobs.get_steps(uuid)'),
      ('jobs.enqueue_batch(jsonb)', 'jobs.get_job(uuid), jobs.get_jobs(uuid[]), jobs.wait_for_job(uuid, interval), '
                                    'jobs.max_payload_size()'),
      ('jobs._tenants()', 'jobs._binding(), jobs._bindings(), jobs._binding_array(text)')) as g(held, added)
  loop
    select string_agg(quote_ident(a.grantee::regrole::text), ',') into v_grantees
    from pg_catalog.pg_proc as p, pg_catalog.aclexplode(p.proacl) as a
    where p.oid = v_grant.held::regprocedure
      and a.privilege_type = 'EXECUTE' and a.grantee <> p.proowner and a.grantee <> 0;
    if v_grantees is not null then
      execute 'grant execute on function ' || v_grant.added || ' to ' || v_grantees;
    end if;
  end loop;
end
$$;
