-- pg_jobs schema: the tables, the job states and the indexes the hot statements walk.
--
-- The tables live in jobs_data, a schema no role but admins may use; the API functions and
-- types are in jobs, and DBAs see the tables there under their own names, as views
-- (sql/views.sql). A role that can use a schema can name its tables in CREATE TRIGGER,
-- CREATE RULE or a foreign key, and PostgreSQL queues a lock on the table before it checks
-- ownership: behind a long transaction that lock would stall every claim (docs/SECURITY.md).
--
-- Lifecycle of a row in jobs_data.jobs:
--   enqueue -> ready | delayed
--   claim   -> running          (attempt + 1, a new claim token, lease set)
--   running -> completed        (complete)
--           -> delayed          (fail with attempts left: backoff or retry_at)
--           -> dead | failed    (fail without attempts left, or not retryable)
--           -> suspended        (snooze, await_event: parked, no attempt used)
--           -> dead | failed    (its lease lapsed on the final attempt: buried by the next claim)
--           -> running          (its lease lapsed with attempts left: re-claimed as a new attempt)
--   suspended -> ready          (publish of the event it waits for)
--   live      -> cancelled      (cancel)
--   finished  -> ready          (requeue)
--   delayed / suspended rows whose run_at has passed are claimable: no promoter is needed.
--
-- The fence: a worker holds a job while state = 'running', claim = its token and
-- lease_expires_at > jobs.clock(). Every worker write checks that in the same UPDATE that
-- writes, so the check is made under the row lock (a concurrent writer makes the UPDATE
-- re-read the row and re-check). A refused write changes nothing.
--
-- Lock order: one jobs_data.jobs row at a time per statement, except claim and complete_many,
-- which lock only rows they then update, never waiting on a locked row (claim skips them).

-- The schema jobs, made by CREATE EXTENSION for the installing superuser. One that exists
-- already must be that role's or the bootstrap superuser's, and no other role may create in
-- it: its owner could rename pg_jobs's functions and plant its own in their place, which the
-- background worker (a superuser) and a DBA's jobs.sweep() would then run (docs/SECURITY.md).
do $$
declare
  v_owner text;
begin
  select n.nspowner::regrole::text into v_owner from pg_catalog.pg_namespace as n where n.nspname = 'jobs';
  if v_owner is distinct from current_user::regrole::text and v_owner is distinct from
     (select r.rolname::regrole::text from pg_catalog.pg_roles as r where r.oid = 10) then
    raise exception 'pg_jobs: the schema jobs exists and belongs to %, not to the superuser installing pg_jobs', v_owner
      using errcode = '42501',
            hint = 'a role that owns the schema could replace pg_jobs''s functions with its own; '
                   'rename or drop that schema (after checking what is in it), or make a superuser '
                   'its owner (ALTER SCHEMA jobs OWNER TO ...), then CREATE EXTENSION pg_jobs';
  end if;
  if exists (select from pg_catalog.pg_namespace as n, pg_catalog.aclexplode(n.nspacl) as a
             where n.nspname = 'jobs' and a.privilege_type = 'CREATE' and a.grantee <> n.nspowner) then
    raise exception 'pg_jobs: roles other than its owner may create objects in the schema jobs'
      using errcode = '42501',
            hint = 'they could plant functions there that pg_jobs''s callers would run; REVOKE CREATE '
                   'ON SCHEMA jobs FROM those roles (and PUBLIC), then CREATE EXTENSION pg_jobs';
  end if;
end
$$;

create schema jobs_data;
comment on schema jobs_data is 'The tables of pg_jobs; only admins may use it (jobs.grant_admin)';

create type jobs.job_state as enum (
  'ready', 'delayed', 'running', 'suspended', 'completed', 'failed', 'dead', 'cancelled'
);
comment on type jobs.job_state is
  'ready, delayed, running, suspended are live; completed, failed, dead, cancelled are finished';

-- Per-name policy, applied at enqueue (max_attempts), claim (lease) and fail (backoff,
-- dead_letter). A name with no row here gets the defaults of the columns.
create table jobs_data.job_types (
  name         text primary key check (length(name) between 1 and 200),
  max_attempts int not null default 25 check (max_attempts >= 1),
  backoff      text not null default 'exponential' check (backoff in ('exponential', 'fixed')),
  backoff_base interval not null default '1 second' check (backoff_base >= interval '0'),
  backoff_max  interval not null default '1 hour' check (backoff_max >= interval '0'),
  jitter       float8 not null default 0.1 check (jitter >= 0 and jitter <= 1),
  dead_letter  boolean not null default true,
  lease        interval check (lease > interval '0' and lease <= interval '7 days'),
  concurrency  int check (concurrency >= 1),
  timeout      interval check (timeout > interval '0' and timeout <= interval '7 days'),
  rate_limit   int check (rate_limit >= 1),
  rate_period  interval check (rate_period > interval '0' and rate_period <= interval '1 day'),
  rate_limit_per_key boolean not null default false,
  constraint job_types_rate_needs_period check ((rate_limit is null) = (rate_period is null)),
  run_timeout  interval check (run_timeout > interval '0' and run_timeout <= interval '365 days'),
  -- Errors that end a job at once, however many attempts it has left: matched by jobs.fail
  -- against the names its worker passes (an exception's class and bases, its code).
  non_retryable_errors text[] check (cardinality(non_retryable_errors) <= 100
                                     and array_position(non_retryable_errors, null) is null),
  -- The most jobs of one concurrency_key running at once (of a job of this name: its key's
  -- running jobs of any name count), fleet-wide, per tenant.
  key_concurrency int not null default 1 check (key_concurrency between 1 and 10000),
  -- What an enqueue with a concurrency_key does when its key is busy (sql/enqueue.sql,
  -- jobs._enqueue_busy): 'queue' (waits its turn), 'skip' (at the key's limit: nothing
  -- inserted, the running job answered), 'replace' (a job of the key waiting to start takes
  -- the new payload: at most one waits).
  when_busy text not null default 'queue' check (when_busy in ('queue', 'skip', 'replace'))
);
comment on table jobs_data.job_types is
  'Policy per job name: retries, backoff, dead-lettering, default lease, concurrency, timeout, rate limit';

create table jobs_data.queues (
  queue    text primary key check (length(queue) between 1 and 128),
  paused   boolean not null default false,
  -- How a claim shares this queue among groups of jobs (sql/fairness.sql): 'none' (claim
  -- order), 'tenant' or 'concurrency_key' (the groups take turns).
  fairness text not null default 'none' check (fairness in ('none', 'tenant', 'concurrency_key'))
);
comment on table jobs_data.queues is
  'Every queue ever used (enqueue adds it), whether it is paused and how claims share it';
insert into jobs_data.queues (queue) values ('default');

create table jobs_data.jobs (
  id               uuid primary key,
  run_id           uuid not null,  -- the first job's id for a new run
  name             text not null,
  queue            text not null,
  state            jobs.job_state not null,
  priority         int not null default 0,
  run_at           timestamptz,
  attempt          int not null default 0,
  max_attempts     int not null,
  claim            bigint not null default 0,
  lease            interval,
  lease_expires_at timestamptz,
  lease_scan_at    timestamptz,   -- when lapse scans look at this running job; <= lease_expires_at
  claimed_by       text,
  tenant_id        text,
  idempotency_key  text,
  concurrency_key  text,
  payload          jsonb not null,
  result           jsonb,
  last_error       text,
  wait_event       text,         -- await_event: the event name this job waits for
  wait_key         text,         -- and its key ('' for none)
  wait_until       timestamptz,  -- when the wait times out; NULL: never
  enqueued_at      timestamptz not null,
  created_at       timestamptz not null,
  updated_at       timestamptz not null,
  finished_at      timestamptz,
  timeout          interval,      -- the most one attempt may run; NULL: the job type's
  deadline         timestamptz,   -- the running attempt's end (claim time + timeout), if any
  claimed_at       timestamptz,   -- when the current (or last) attempt was claimed
  parent_id        uuid,          -- jobs.spawn: the job that spawned this one
  close_policy     text check (close_policy in ('terminate', 'abandon')),  -- and what its end does to it
  children_live    int,           -- jobs.spawn: this job's live children (NULL: it spawned none)
  tags             text[],        -- labels to find and act on jobs by (jobs_tags_idx)
  meta             jsonb,         -- what the producer carries to every attempt (a traceparent, ...)
  run_timeout      interval,      -- the most the whole run may take; NULL: no limit
  run_deadline     timestamptz,   -- enqueue (or requeue) + run_timeout: past it the job is buried
  ordering_key     text,          -- jobs of a queue, tenant and key run one at a time, in order
  fair_group       text,          -- in a fair queue, the group whose turn it waits for (sql/fairness.sql)
  enqueued_by      text,          -- who enqueued it: 'role (label)', or 'job <id>' for a child (jobs._enqueuer)
  child_key        text,          -- jobs.spawn: its key among its parent's children
  started_at       timestamptz    -- when the running attempt started; NULL while a prefetching
                                  -- worker holds it unstarted (jobs.claim's prefetch)
) with (
  -- Room on each page for HOT updates (heartbeats), and vacuum soon: the table churns.
  fillfactor = 70,
  autovacuum_vacuum_cost_delay = 0,
  autovacuum_vacuum_scale_factor = 0.01,
  autovacuum_vacuum_insert_scale_factor = 0.05,
  autovacuum_analyze_scale_factor = 0.02,
  -- No truncation: a queue's empty tail is refilled seconds later. Truncating it stalled each
  -- vacuum for seconds (it waits for an ACCESS EXCLUSIVE lock the workers keep taking away)
  -- while dead rows piled up, and the table grew a step at every pass (tests/server/test_load.py).
  vacuum_truncate = false
);
comment on table jobs_data.jobs is 'One row per job; see docs/REFERENCE.md for the life of a row';

-- What claim walks, one range scan each, so its cost does not grow with backlog or history:
--   ready jobs in claim order, due delayed/suspended jobs in run_at order, lapsed leases.
-- Finished rows are in none of them.
create index jobs_ready_idx on jobs_data.jobs (queue, priority desc, run_at) where state = 'ready';
create index jobs_due_idx on jobs_data.jobs (queue, run_at) where state in ('delayed', 'suspended');
-- Lapsed leases are found by lease_scan_at, not lease_expires_at: a heartbeat moves the expiry
-- but leaves lease_scan_at (an earlier bound) until it has passed, so most heartbeats change
-- no indexed column and are HOT updates. A scan then checks lease_expires_at on the row.
-- Every running job has a lease_scan_at, so "lease_scan_at is not null" leaves out no row; it
-- is there so that only lapse scans (lease_scan_at <= now) and counts that name it can use
-- this index. A fence (state = 'running' and claim = ...) cannot, and so goes by primary key:
-- with the index usable, a settle's generic plan made while the statistics saw no running
-- job read every running job on every call.
create index jobs_lease_idx on jobs_data.jobs (queue, lease_scan_at)
  where state = 'running' and lease_scan_at is not null;

-- publish finds the jobs waiting on an event by name (and key); the sweep finds the waiters
-- whose timeout passed.
create index jobs_waiting_idx on jobs_data.jobs (wait_event, wait_key)
  where state = 'suspended' and wait_event is not null;
create index jobs_wait_until_idx on jobs_data.jobs (wait_until)
  where state = 'suspended' and wait_event is not null;

-- What a child's id keeps of its parent's id and its key, whatever the time it was spawned at
-- (jobs._child_id): the id with its first 48 bits, the time, zeroed.
create function jobs._child_digest(p_id uuid)
returns uuid
language sql immutable parallel safe
begin atomic
  select overlay(p_id::text placing '00000000-0000' from 1 for 13)::uuid;
end;

-- A parent's children (jobs.await_children, and its end closing them: sql/children.sql), and
-- a spawn's child found again by its key (jobs.spawn).
create index jobs_children_idx on jobs_data.jobs (parent_id, jobs._child_digest(id))
  where parent_id is not null;

-- Retention: the sweep deletes finished rows past their retention, per state, the roots of
-- families (jobs no job spawned) first: a child goes with its root (jobs._prune), so the
-- children a live parent keeps are never walked. jobs.queue_stats counts them per queue
-- (index-only).
create index jobs_finished_idx on jobs_data.jobs (state, (parent_id is null), finished_at) include (queue)
  where state in ('completed', 'failed', 'dead', 'cancelled');

-- A run's steps go with its last job. A new run's run_id is its first job's id (found by the
-- primary key); only jobs attached to another job's run need this small index.
create index jobs_attached_idx on jobs_data.jobs (run_id) where run_id <> id;

-- Tags: jobs found by label (tags @> array['...']). Only tagged jobs are in it.
create index jobs_tags_idx on jobs_data.jobs using gin (tags) where tags is not null;

-- Run deadlines: the sweep buries waiting jobs whose run_timeout passed (a running one's
-- attempt deadline is capped at it, so its lease ends there).
create index jobs_run_deadline_idx on jobs_data.jobs (run_deadline)
  where run_deadline is not null and state in ('ready', 'delayed', 'suspended');

-- Ordering keys: a key's live jobs in enqueue order (sql/ordering.sql). Only keyed jobs are in it.
-- The waiting ones (run_at infinity) after the current one, so whether a key has a current job
-- and which job is next are each one entry, however many wait. (One index, not two: each index
-- of the table costs every insert and update of a job a little.)
create index jobs_ordering_idx on jobs_data.jobs
  (queue, ordering_key, (coalesce(tenant_id, '')), (run_at = 'infinity'), enqueued_at, id)
  where ordering_key is not null and state in ('ready', 'delayed', 'running', 'suspended');

-- Busy keys (jobs_data.job_types.when_busy): a concurrency key's running jobs and the ones
-- waiting to start. Only keyed jobs are in it.
create index jobs_busy_idx on jobs_data.jobs (concurrency_key, name)
  where concurrency_key is not null and state in ('ready', 'delayed', 'running');

-- (Fair queues have an index of their own, jobs_fair_idx, made when the first queue is made
-- fair: sql/fairness.sql.)

-- Idempotency: one live job per (name, tenant, key). NULL tenants are one tenant.
create unique index jobs_idempotency_live_idx
  on jobs_data.jobs (name, tenant_id, idempotency_key) nulls not distinct
  where idempotency_key is not null and state in ('ready', 'delayed', 'running', 'suspended');

-- A job as a claim hands it to a worker.
create type jobs.claimed_job as (
  id               uuid,
  run_id           uuid,
  name             text,
  queue            text,
  payload          jsonb,
  attempt          int,
  max_attempts     int,
  claim            bigint,
  lease_expires_at timestamptz,
  tenant_id        text,
  priority         int,
  enqueued_at      timestamptz,
  last_error       text,
  deadline         timestamptz,  -- when this attempt times out (jobs.job_types.timeout); NULL: never
  parent_id        uuid,         -- the job that spawned this one (jobs.spawn); NULL: none
  tags             text[],       -- the job's labels (enqueue's tags)
  meta             jsonb,        -- what its producer carried (enqueue's meta), e.g. a traceparent
  buried           boolean       -- claim's report_buried: a job this claim buried, not one to run
);

-- What enqueue answers: a composite, so its column names cannot clash with the arguments.
-- action: inserted, returned (a live job held the key: deduped), replaced or debounced (that
-- job, still waiting to run, took the new payload and run time: on_conflict).
create type jobs.enqueued as (id uuid, run_id uuid, deduped boolean, action text);

-- One job to enqueue; jobs.enqueue_batch reads its JSON objects into these.
create type jobs.job_spec as (
  name            text,
  payload         jsonb,
  queue           text,
  run_at          timestamptz,
  priority        int,
  max_attempts    int,
  idempotency_key text,
  tenant_id       text,
  concurrency_key text,
  on_conflict     text,
  id              uuid,
  run_id          uuid,
  timeout         interval,
  parent_id       uuid,
  close_policy    text,
  debounce        interval,
  debounce_max    interval,
  tags            text[],
  meta            jsonb,
  run_timeout     interval,
  ordering_key    text,
  enqueued_by     text,
  child_key       text  -- jobs.spawn's only: producers' specs may not carry it
);

-- The one source of time for every lease, run_at, backoff and retention decision is
-- jobs.clock() (src/functions/clock.rs): clock_timestamp() shifted by pg_jobs.clock_offset, a
-- superuser-only setting that tests use to move time instead of sleeping. It is a function of
-- the library, not SQL, so a role cannot move it by setting the placeholder of a library not
-- yet loaded.

-- Raise a documented refusal or bad-argument error: p_code is its SQLSTATE, p_message the
-- cause, p_hint the fix. The codes are listed by jobs.error_codes() and in docs/REFERENCE.md.
-- jobs._quiet_context() loads the library, whose hook cuts the error's CONTEXT to the public
-- function that refused (src/error_context.rs).
create function jobs._raise(p_code text, p_message text, p_hint text)
returns void
language plpgsql
as $$
begin
  perform jobs._quiet_context();
  raise exception using errcode = p_code, message = p_message, hint = p_hint;
end
$$;

-- Wake-ups: the blocking claims of these queues through shared memory, at commit
-- (jobs._signal_work); and NOTIFY on channel pg_jobs, payload the queue name, when a queue that had no ready
-- job gets one (p_queues; p_new are the jobs that just became ready, not counted). A queue
-- with ready jobs already has workers claiming (a worker only sleeps after a claim that
-- answered nothing), so under load no notification is sent. Sent by the database's sweeper
-- when pg_jobs is preloaded (jobs._notify, src/commit/relay.rs), since one sent by this transaction
-- costs its commit a database-wide lock held through the WAL flush; relayed, it is sent for
-- every queue that got work, as it costs the transaction nothing. At most one per queue per
-- call, and repeats within a transaction are folded.
create function jobs._wake(p_queues text[], p_new uuid[])
returns void
language plpgsql volatile
as $$
declare
  v_queue text;
begin
  perform jobs._signal_work(p_queues);  -- the blocking claims, at commit (src/commit/wakeups.rs)
  if jobs._relays() then
    -- Relayed, a notification costs this transaction nothing, and one for every queue leaves
    -- no gap: the probe below can see a job a claim has taken but not yet committed as
    -- ready, skip the notification, and a worker whose claim missed the new job then sleeps.
    foreach v_queue in array p_queues loop
      perform jobs._notify(v_queue);
    end loop;
    return;
  end if;
  foreach v_queue in array p_queues loop
    -- In jobs_ready_idx order, so the probe reads one index entry, never the table.
    perform from jobs_data.jobs as j
    where j.queue = v_queue and j.state = 'ready' and j.id <> all(p_new)
    order by j.priority desc, j.run_at
    limit 1;
    if not found then
      perform jobs._notify(v_queue);  -- relayed by the sweeper when preloaded (src/commit/relay.rs)
    end if;
  end loop;
end
$$;

-- Bounds for the intervals callers pass: p_value must be positive and at most p_max (22023
-- otherwise). NULL passes; callers that require a value check that first.
create function jobs._check_interval(p_what text, p_value interval, p_max interval, p_hint text)
returns void
language plpgsql immutable
as $$
begin
  if p_value <= interval '0' or p_value > p_max then
    perform jobs._raise('22023',
      format('%s must be positive and at most %s, got %s', p_what, p_max, p_value), p_hint);
  end if;
end
$$;

-- Timestamps callers pass must be finite ('infinity' would never come, or always be first).
create function jobs._check_finite(p_what text, p_value timestamptz, p_hint text)
returns void
language plpgsql immutable
as $$
begin
  if not isfinite(p_value) then
    perform jobs._raise('22023', format('%s must be a finite time, got %s', p_what, p_value), p_hint);
  end if;
end
$$;
