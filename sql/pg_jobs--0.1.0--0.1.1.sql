-- pg_jobs 0.1.0 -> 0.1.1. Run by ALTER EXTENSION pg_jobs UPDATE. scripts/upgrade-check.sh
-- installs 0.1.0, fills it, runs this, and checks that nothing was lost and that the result is
-- the same, object for object, as a fresh install of 0.1.1. CREATE OR REPLACE resets an API
-- function's SECURITY DEFINER and settings, so they are set again after each; a new function
-- is revoked from PUBLIC, as sql/privileges.sql does for all of them.

-- 1. Retention: jobs._prune deletes finished jobs by ctid in a locking subselect (a TID scan
--    whatever the statistics were when a session cached its plan), oldest first per state
--    (in 0.1.0 a generic plan could read the whole history on every pass), and their runs' steps;
--    jobs.sweep uses it, and the background worker passes 5000 rows a task. Completing
--    settles take a share of retention (jobs._settle_prune), so it keeps pace with them.
--    The steps of a run go with its last job under a lock on them (jobs._drop_orphan_steps),
--    so two transactions deleting a run's last two jobs cannot both leave them behind; and
--    with pg_jobs.completed_retention = 0 completing deletes the job (jobs._keeps_no_completed).
create function jobs._drop_orphan_steps(p_runs uuid[])
returns bigint
language plpgsql volatile
as $$
declare
  v_n bigint;
begin
  perform from jobs.steps as s
  where s.run_id = any(p_runs)
  order by s.run_id, s.seq
  for update;
  if not found then
    return 0;
  end if;
  delete from jobs.steps as s
  where s.run_id = any(p_runs)
    and not exists (select from jobs.jobs as j where j.id = s.run_id)
    and not exists (select from jobs.jobs as j where j.run_id = s.run_id and j.run_id <> j.id);
  get diagnostics v_n = row_count;
  return v_n;
end
$$;
revoke all on function jobs._drop_orphan_steps(uuid[]) from public;

create function jobs._prune(p_states jobs.job_state[], p_before timestamptz, p_max int,
                            out jobs_deleted bigint, out steps_deleted bigint)
language plpgsql volatile
as $$
declare
  v_runs  uuid[] := '{}';
  v_part  uuid[];
  v_n     bigint;
  v_state jobs.job_state;
begin
  jobs_deleted := 0;
  -- One state at a time, oldest first: the order jobs_finished_idx keeps, so every plan of
  -- this statement walks that index from its oldest entry and stops at the first one inside
  -- retention. Without the ORDER BY, a generic plan costed finished_at < $2 at a third of the
  -- rows, preferred a sequential scan with a LIMIT, and read every row of a large history on
  -- every pass (claims with 1M finished rows ran at 0.65x those with none; 0.95x without).
  foreach v_state in array p_states loop
    with gone as (
      delete from jobs.jobs as j
      where j.ctid = any(array(
        select f.ctid from jobs.jobs as f
        where f.state in ('completed', 'failed', 'dead', 'cancelled') and f.state = v_state
          and f.finished_at < p_before
        order by f.state, f.finished_at
        limit p_max - jobs_deleted for update skip locked))
      returning j.run_id
    )
    select coalesce(array_agg(distinct g.run_id), '{}'), count(*) into v_part, v_n from gone as g;
    v_runs := v_runs || v_part;
    jobs_deleted := jobs_deleted + v_n;
    exit when jobs_deleted >= p_max;
  end loop;
  steps_deleted := 0;
  if jobs_deleted > 0 then
    steps_deleted := jobs._drop_orphan_steps(v_runs);
  end if;
end
$$;
revoke all on function jobs._prune(jobs.job_state[], timestamptz, int) from public;

create or replace function jobs.sweep(max_rows int default 1000)
returns table (task text, affected bigint)
language plpgsql volatile
as $$
#variable_conflict use_column
declare
  v_now       timestamptz := jobs.clock();
  v_completed timestamptz := v_now - jobs._retention('pg_jobs.completed_retention', '7 days');
  v_dead      timestamptz := v_now - jobs._retention('pg_jobs.dead_retention', '30 days');
  v_steps     bigint := 0;
  v_n         bigint;
  v_task      text;
begin
  if max_rows is null or max_rows not between 1 and 100000 then
    perform jobs._raise(case when max_rows is null then '22004' else '22023' end,
      'jobs.sweep: max_rows must be 1 to 100000, got ' || coalesce(max_rows::text, 'NULL'),
      'pass how many rows each task may handle in this pass');
  end if;

  -- Each task picks its rows by physical address (ctid) in a locking subselect and then
  -- changes exactly those: a TID scan whatever the table's statistics say, and no second
  -- lookup through the primary key. The rows are locked, so their addresses cannot change.
  update jobs.jobs as j set
    state = case when jobs._lapse_buries(j.attempt, j.max_attempts)
                 then jobs._final_state((select p.dead_letter from jobs._policy(j.name) as p))
                 else 'ready' end,
    lease_expires_at = null,
    last_error = jobs._lapse_error(j.attempt, j.max_attempts),
    finished_at = case when jobs._lapse_buries(j.attempt, j.max_attempts) then v_now end,
    updated_at = v_now
  where j.ctid = any(array(
      select l.ctid from jobs.jobs as l
      where l.state = 'running' and l.lease_scan_at <= v_now and l.lease_expires_at <= v_now
      order by l.lease_scan_at limit max_rows for update skip locked))
    and j.state = 'running';
  get diagnostics v_n = row_count;
  task := 'lapsed_leases'; affected := v_n; return next;

  update jobs.jobs as j set state = 'ready', updated_at = v_now
  where j.ctid = any(array(
      select w.ctid from jobs.jobs as w
      where w.state = 'suspended' and w.wait_event is not null and w.wait_until <= v_now
      order by w.wait_until limit max_rows for update skip locked))
    and j.state = 'suspended';
  get diagnostics v_n = row_count;
  task := 'waiter_timeouts'; affected := v_n; return next;

  delete from jobs.events as e
  where e.ctid = any(array(
      select x.ctid from jobs.events as x where x.expires_at <= v_now
      order by x.expires_at limit max_rows for update skip locked));
  get diagnostics v_n = row_count;
  task := 'expired_events'; affected := v_n; return next;

  -- Retention, per pair of states (jobs._prune, which the settles also call).
  foreach v_task in array array['completed_deleted', 'dead_deleted'] loop
    select p.jobs_deleted, v_steps + p.steps_deleted into v_n, v_steps
    from jobs._prune(case v_task when 'completed_deleted' then '{completed,cancelled}'
                                 else '{failed,dead}' end::jobs.job_state[],
                     case v_task when 'completed_deleted' then v_completed else v_dead end,
                     max_rows) as p;
    task := v_task; affected := v_n; return next;
  end loop;
  task := 'steps_deleted'; affected := v_steps; return next;
end
$$;
comment on function jobs.sweep(int) is
  'One housekeeping pass, as the background worker runs it: lapsed leases, waiter timeouts, '
  'expired events, retention. Each task handles at most max_rows rows. Answers (task, affected).';
alter function jobs.sweep(int) security definer set search_path = pg_catalog, pg_temp
  set plan_cache_mode = force_generic_plan;

create function jobs._settle_prune(p_now timestamptz, p_completed int)
returns bigint
language sql volatile
as $$
  select (jobs._prune('{completed,cancelled}',
                      p_now - jobs._retention('pg_jobs.completed_retention', '7 days'),
                      16 * p_completed)).jobs_deleted
$$;
revoke all on function jobs._settle_prune(timestamptz, int) from public;

create function jobs._keeps_no_completed()
returns boolean
language sql stable
as $$ select jobs._retention('pg_jobs.completed_retention', '7 days') = interval '0' $$;

revoke all on function jobs._keeps_no_completed() from public;

create or replace function jobs.complete(id uuid, claim bigint, result jsonb default null)
returns boolean
language plpgsql volatile
as $$
declare
  v_now timestamptz := jobs.clock();
  v_run uuid;
begin
  perform jobs._check_hold_args('jobs.complete', complete.id, complete.claim);
  if jobs._keeps_no_completed() then
    delete from jobs.jobs as j
    where j.id = complete.id and j.claim = complete.claim
      and j.state = 'running' and j.lease_expires_at > jobs.clock()
    returning j.run_id into v_run;
    if not found then
      return false;
    end if;
    perform jobs._drop_orphan_steps(array[v_run]);
    return true;
  end if;
  update jobs.jobs as j set
    state = 'completed', result = complete.result, lease_expires_at = null,
    finished_at = v_now, updated_at = v_now
  where j.id = complete.id and j.claim = complete.claim
    and j.state = 'running' and j.lease_expires_at > jobs.clock();
  if not found then
    return false;
  end if;
  if random() < 0.125 then  -- a share of retention: see jobs._settle_prune
    perform jobs._settle_prune(v_now, 1);
  end if;
  return true;
end
$$;
alter function jobs.complete(uuid, bigint, jsonb) security definer set search_path = pg_catalog, pg_temp
  set plan_cache_mode = force_generic_plan;

create or replace function jobs.complete_many(ids uuid[], claims bigint[], results jsonb[] default null)
returns table (id uuid, landed boolean)
language plpgsql volatile
as $$
#variable_conflict use_column
declare
  v_now    timestamptz := jobs.clock();
  v_landed uuid[];
  v_runs   uuid[];
  v_sorted uuid[];   -- ids sorted, and results in that order: see the update below
  v_results jsonb[];
begin
  -- One test on the way in (each PL/pgSQL expression costs a set-up per transaction); the
  -- chain inside names the cause.
  if ids is null or claims is null or cardinality(ids) <> cardinality(claims)
     or (results is not null and cardinality(results) <> cardinality(ids))
     or cardinality(ids) > 10000 or array_position(ids, null) is not null
     or array_position(claims, null) is not null then
    if ids is null or claims is null then
      perform jobs._raise('22004', 'jobs.complete_many: ids and claims must not be NULL',
        'pass the ids and claim tokens of the jobs jobs.claim returned, as two arrays');
    elsif cardinality(ids) <> cardinality(claims)
          or (results is not null and cardinality(results) <> cardinality(ids)) then
      perform jobs._raise('22023', format('jobs.complete_many: ids, claims and results must be '
        'equally long, got %s, %s and %s', cardinality(ids), cardinality(claims),
        coalesce(cardinality(results)::text, 'NULL')), 'pass one claim (and result) per id');
    elsif cardinality(ids) > 10000 then
      perform jobs._raise('22023', 'jobs.complete_many: at most 10000 jobs per call, got '
        || cardinality(ids), 'split the batch');
    elsif array_position(ids, null) is not null or array_position(claims, null) is not null then
      perform jobs._raise('22004', 'jobs.complete_many: ids and claims must not contain NULL',
        'pass the id and claim token of every job');
    end if;
  end if;

  -- Each branch is one statement, fenced per row, and collects the ids that landed. Neither
  -- joins jobs.jobs to the arrays: a join's plan rests on the row estimates, and a plan
  -- cached while the table looked empty read every job for every id given (5 minutes for
  -- 10,000 ids with 200k jobs; docs/PLANS.md). So the one scan is the primary key with
  -- id = any(ids); each job's own token is checked against a hash of the (id, claim) pairs
  -- (a hashed SubPlan: "is true" keeps the planner from turning the IN into a join); and a
  -- result is found by binary search (width_bucket) in the sorted ids.
  if jobs._keeps_no_completed() then
    with gone as (
      delete from jobs.jobs as j
      where j.id = any(ids)
        and ((j.id, j.claim) in (select i.id, i.claim from unnest(ids, claims) as i(id, claim))) is true
        and j.state = 'running' and j.lease_expires_at > jobs.clock()
      returning j.id, j.run_id
    )
    select coalesce(array_agg(g.id), '{}'), coalesce(array_agg(g.run_id), '{}')
      into v_landed, v_runs
    from gone as g;
    perform jobs._drop_orphan_steps(v_runs);
  else
    if results is not null then
      -- An id given twice gets the result given with its highest claim: the only one that
      -- can be the job's current claim unless a claim never handed out is given.
      select array_agg(i.id order by i.id, i.claim), array_agg(i.result order by i.id, i.claim)
        into v_sorted, v_results
      from unnest(ids, claims, results) as i(id, claim, result);
    end if;
    with landed as (
      update jobs.jobs as j set
        state = 'completed', result = v_results[width_bucket(j.id, v_sorted)],  -- no results: NULL
        lease_expires_at = null, finished_at = v_now, updated_at = v_now
      where j.id = any(ids)
        and ((j.id, j.claim) in (select i.id, i.claim from unnest(ids, claims) as i(id, claim))) is true
        and j.state = 'running' and j.lease_expires_at > jobs.clock()
      returning j.id
    )
    select coalesce(array_agg(l.id), '{}') into v_landed from landed as l;
    if random() < 0.125 then  -- a share of retention: see jobs._settle_prune
      perform jobs._settle_prune(v_now, cardinality(v_landed));
    end if;
  end if;

  -- Usually every job landed, and the answer is the input as it came. Otherwise (a lost
  -- claim, or an id given twice: a statement changes each row once) join the landed ids back.
  if cardinality(v_landed) = cardinality(ids) then
    return query select u.id, true from unnest(ids) as u(id);
  else
    return query
    select u.id, l.id is not null
    from unnest(ids) with ordinality as u(id, ord)
    left join unnest(v_landed) as l(id) on l.id = u.id
    order by u.ord;
  end if;
end
$$;
alter function jobs.complete_many(uuid[], bigint[], jsonb[]) security definer set search_path = pg_catalog, pg_temp
  set plan_cache_mode = force_generic_plan;

-- 2. Enqueue: jobs._spec_problem is STABLE, as its body is, so the planner inlines it (as
--    IMMUTABLE it was a function call per spec); a batch with no idempotency key and no
--    caller-allocated id is one INSERT; the queue registry and wake-up are one function.
--    jobs._final_state and jobs._lapse_error are STABLE for the same reason.
alter function jobs._spec_problem(jobs.job_spec) stable;
alter function jobs._final_state(boolean) stable;
alter function jobs._lapse_error(int, int) stable;
create function jobs._register_and_wake(p_specs jobs.job_spec[], p_deduped boolean[],
                                        p_now timestamptz, p_new uuid[])
returns void
language plpgsql volatile
as $$
begin
  insert into jobs.queues (queue)
  select distinct s.queue from unnest(p_specs) as s
  where not exists (select from jobs.queues as q where q.queue = s.queue)
  on conflict do nothing;
  perform jobs._wake(array(select distinct s.queue from unnest(p_specs) with ordinality as s
                           where coalesce(s.run_at, p_now) <= p_now
                             and not coalesce(p_deduped[s.ordinality], false)), p_new);
end
$$;
revoke all on function jobs._register_and_wake(jobs.job_spec[], boolean[], timestamptz, uuid[]) from public;
create function jobs._insert_unkeyed(p_specs jobs.job_spec[], p_ids uuid[], p_runs uuid[],
                                     p_now timestamptz)
returns void
language plpgsql volatile
as $$
begin
  insert into jobs.jobs as j (id, run_id, name, queue, state, priority, run_at, max_attempts,
                              tenant_id, idempotency_key, concurrency_key, payload,
                              enqueued_at, created_at, updated_at)
  select p_ids[s.ordinality], p_runs[s.ordinality], s.name, s.queue,
         case when s.run_at > p_now then 'delayed' else 'ready' end::jobs.job_state,
         s.priority, coalesce(s.run_at, p_now), coalesce(s.max_attempts, p.max_attempts),
         s.tenant_id, null, s.concurrency_key, s.payload, p_now, p_now, p_now
  from unnest(p_specs) with ordinality as s
  cross join lateral jobs._policy(s.name) as p;
end
$$;
revoke all on function jobs._insert_unkeyed(jobs.job_spec[], uuid[], uuid[], timestamptz) from public;
create or replace function jobs._enqueue(p_specs jobs.job_spec[], p_caller text)
returns table (ordinal int, id uuid, run_id uuid, deduped boolean)
language plpgsql volatile
as $$
#variable_conflict use_column
declare
  v_n        int := coalesce(cardinality(p_specs), 0);
  v_now      timestamptz := jobs.clock();
  v_ids      uuid[];
  v_runs     uuid[];
  r_id       uuid[];
  r_run      uuid[];
  r_dedup    boolean[];
  v_pending  int[];
  v_missed   int[];
  v_spec     jobs.job_spec;
  v_fid      uuid;
  v_frun     uuid;
  v_i        int;
  v_pos      int;
  v_ins      record;
  v_problem  text[];
begin
  -- Each spec taken once from the array (unnest in the select list yields it whole):
  -- p_specs[i] in the check would walk the array from the start for every field it reads.
  select x.i into v_i
  from (select unnest(p_specs) as spec, generate_series(1, v_n) as i) as x
  where jobs._spec_problem(x.spec) is not null
  order by x.i limit 1;
  if v_i is not null then
    v_problem := jobs._spec_problem(p_specs[v_i]);
    perform jobs._raise(v_problem[1],
      case when p_caller = 'jobs.enqueue' then 'jobs.enqueue: '
           else p_caller || ': spec ' || v_i || ': ' end || v_problem[2], v_problem[3]);
  end if;

  v_ids := array(select coalesce(s.id, jobs._uuid_v7()) from unnest(p_specs) with ordinality s
                 order by s.ordinality);
  -- A new run is named after its first job: run_id = id (see jobs_attached_idx).
  v_runs := array(select coalesce(s.run_id, v_ids[s.ordinality]) from unnest(p_specs) with ordinality s
                  order by s.ordinality);

  -- The common case, with no idempotency key and no caller-allocated id in the batch, cannot
  -- conflict with anything: one INSERT of every spec, and the answer is the ids made above
  -- (docs/BENCHMARKS.md, "What we tried").
  if not exists (select from unnest(p_specs) as s where s.idempotency_key is not null or s.id is not null)
  then
    perform jobs._insert_unkeyed(p_specs, v_ids, v_runs, v_now);
    perform jobs._register_and_wake(p_specs, null, v_now, v_ids);
    return query select o.i, v_ids[o.i], v_runs[o.i], false from generate_series(1, v_n) as o(i);
    return;
  end if;

  r_id := array_fill(null::uuid, array[v_n]);
  r_run := r_id;
  r_dedup := array_fill(null::boolean, array[v_n]);
  v_pending := array(select generate_series(1, v_n));

  -- Twice at most: a second miss is not a race (see the header) and is reported.
  for v_round in 1 .. 2 loop
    exit when cardinality(v_pending) = 0;

    for v_ins in
      insert into jobs.jobs as j (id, run_id, name, queue, state, priority, run_at, max_attempts,
                                  tenant_id, idempotency_key, concurrency_key, payload,
                                  enqueued_at, created_at, updated_at)
      select v_ids[o.i], v_runs[o.i], s.name, s.queue,
             case when s.run_at > v_now then 'delayed' else 'ready' end::jobs.job_state,
             s.priority, coalesce(s.run_at, v_now), coalesce(s.max_attempts, p.max_attempts),
             s.tenant_id, s.idempotency_key, s.concurrency_key, s.payload,
             v_now, v_now, v_now
      from unnest(v_pending) as o(i)
      cross join lateral (select (p_specs[o.i]).*) as s
      cross join lateral jobs._policy(s.name) as p
      order by s.name, s.tenant_id, s.idempotency_key, o.i
      on conflict do nothing
      returning j.id, j.run_id
    loop
      v_pos := array_position(v_ids, v_ins.id);
      r_id[v_pos] := v_ins.id;
      r_run[v_pos] := v_ins.run_id;
      r_dedup[v_pos] := false;
    end loop;

    v_missed := '{}';
    foreach v_i in array v_pending loop
      continue when r_dedup[v_i] is not null;
      v_spec := p_specs[v_i];
      v_fid := null;
      -- Nothing inserted under an id the caller allocated: that job is the answer, whatever
      -- its state (the outbox publishing one staged row twice).
      if v_spec.id is not null then
        select j.id, j.run_id into v_fid, v_frun from jobs.jobs j where j.id = v_spec.id;
      end if;
      -- A live job of this name, in this tenant, holds the key. Name and tenant are both in
      -- the lookup: without them the answer could be another name's or another tenant's job.
      if v_fid is null and v_spec.idempotency_key is not null then
        if v_spec.tenant_id is null then
          select j.id, j.run_id into v_fid, v_frun from jobs.jobs j
          where j.name = v_spec.name and j.tenant_id is null
            and j.idempotency_key = v_spec.idempotency_key
            and j.state in ('ready', 'delayed', 'running', 'suspended');
        else
          select j.id, j.run_id into v_fid, v_frun from jobs.jobs j
          where j.name = v_spec.name and j.tenant_id = v_spec.tenant_id
            and j.idempotency_key = v_spec.idempotency_key
            and j.state in ('ready', 'delayed', 'running', 'suspended');
        end if;
        if v_fid is not null and v_spec.on_conflict = 'error' then
          perform jobs._raise('PJ002',
            format('job %L%s already has a live job with idempotency key %L: %s',
                   v_spec.name,
                   coalesce(' of tenant ' || quote_literal(v_spec.tenant_id), ''),
                   v_spec.idempotency_key, v_fid),
            'use on_conflict => ''return'' to get the live job back, or a new key for new work');
        end if;
      end if;
      if v_fid is null then
        v_missed := v_missed || v_i;  -- the holder finished in between: insert again
      else
        r_id[v_i] := v_fid;
        r_run[v_i] := v_frun;
        r_dedup[v_i] := true;
      end if;
    end loop;
    v_pending := v_missed;
  end loop;

  perform jobs._register_and_wake(p_specs, r_dedup, v_now, r_id);

  if cardinality(v_pending) > 0 then
    perform jobs._raise('40001',
      p_caller || ': the idempotency key of spec ' || v_pending[1]
        || ' was taken and freed twice while this call ran',
      'retry the call; it is safe, nothing was inserted twice');
  end if;

  return query select o.i, r_id[o.i], r_run[o.i], r_dedup[o.i]
               from generate_series(1, v_n) as o(i);
end
$$;

-- 3. Backups: pg_dump carries the rows of pg_jobs's tables (see sql/backup.sql).
select pg_catalog.pg_extension_config_dump('jobs.jobs', '');
select pg_catalog.pg_extension_config_dump('jobs.steps', '');
select pg_catalog.pg_extension_config_dump('jobs.steps_seq_seq', '');
select pg_catalog.pg_extension_config_dump('jobs.events', '');
select pg_catalog.pg_extension_config_dump('jobs.job_types', '');
select pg_catalog.pg_extension_config_dump('jobs.queues', $$where queue <> 'default'$$);

-- 4. Job ids: a job enqueued without an id gets a UUIDv7 (jobs._uuid_v7, src/ids.rs), so jobs
--    enqueued one after another sit on neighbouring primary-key pages.
CREATE  FUNCTION jobs."_uuid_v7"() RETURNS uuid
STRICT VOLATILE PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'uuid_v7_wrapper';
revoke all on function jobs._uuid_v7() from public;

-- 5. Claims and settles: the claim's candidate statement sorts once and looks up the paused
--    flag and the job type per row by primary key (no hash joins built on every call), and
--    checks a lease only when one is given; complete_many answers without a join when every
--    job landed, and the settles' share of retention is inlined into their expression.
--    jobs_lease_idx names lease_scan_at in its predicate (every running job has one), so a
--    fence cannot use it: settles go by primary key whatever the statistics say.
drop index jobs.jobs_lease_idx;
create index jobs_lease_idx on jobs.jobs (queue, lease_scan_at)
  where state = 'running' and lease_scan_at is not null;
create or replace view jobs.queue_stats as
select q.queue,
       q.paused,
       (select count(*) from jobs.jobs j where j.queue = q.queue and j.state = 'ready') as ready,
       (select count(*) from jobs.jobs j where j.queue = q.queue and j.state = 'delayed') as delayed,
       (select count(*) from jobs.jobs j where j.queue = q.queue and j.state = 'running'
          and j.lease_scan_at is not null) as running,  -- every running job has one: jobs_lease_idx
       (select count(*) from jobs.jobs j where j.queue = q.queue and j.state = 'suspended') as suspended,
       (select count(*) from jobs.jobs j where j.queue = q.queue and j.state = 'completed') as completed,
       (select count(*) from jobs.jobs j where j.queue = q.queue and j.state = 'failed') as failed,
       (select count(*) from jobs.jobs j where j.queue = q.queue and j.state = 'dead') as dead,
       (select count(*) from jobs.jobs j where j.queue = q.queue and j.state = 'cancelled') as cancelled,
       jobs.clock() - jobs._oldest_ready(q.queue) as oldest_ready_age
from jobs.queues as q;

-- (jobs.claim no longer passes each candidate's lapse: its UPDATE reads it from the row.)
drop function jobs._within_limits(uuid[], text[], boolean[], boolean[], timestamptz);
create function jobs._within_limits(p_ids uuid[], p_names text[], p_bury boolean[],
                                    p_now timestamptz)
returns table (ids uuid[], names text[], bury boolean[])
language plpgsql volatile
as $$
begin
  -- Serialise the claimers of each limited name and key until they commit, so the count
  -- below sees every claim made under the same limit. Sorted: one lock order for everyone.
  perform pg_advisory_xact_lock(1886023523, hashtext(k.lock_key))
  from (select distinct x.lock_key
        from jobs.jobs as j
        left join jobs.job_types as t on t.name = j.name
        cross join lateral (values ('name:' || j.name, t.concurrency is not null),
                                   ('key:' || j.concurrency_key, j.concurrency_key is not null))
                   as x(lock_key, limited)
        where j.id = any(p_ids) and x.limited
        order by x.lock_key) as k;

  -- A new statement, so a new snapshot: it sees the claims committed under those locks.
  return query
  with c as (  -- a lookup per candidate, not a join (see the UPDATE in jobs.claim)
    select u.id, u.name, u.bury, u.ord,
           (select j.concurrency_key from jobs.jobs as j where j.id = u.id) as concurrency_key,
           (select t.concurrency from jobs.job_types as t where t.name = u.name) as concurrency
    from unnest(p_ids, p_names, p_bury) with ordinality as u(id, name, bury, ord)
  ),
  -- The jobs running now under a candidate's name or key. No candidate is among them: a
  -- lapsed one's lease ended by p_now (jobs.claim found it so and holds its row), and the
  -- others are not running.
  held as (
    select r.name, r.concurrency_key
    from jobs.jobs as r
    where r.state = 'running' and r.lease_scan_at is not null  -- all running jobs: jobs_lease_idx
      and r.lease_expires_at > p_now
      and (r.name in (select c.name from c where c.concurrency is not null)
           or r.concurrency_key in (select c.concurrency_key from c))
  ),
  held_per_name as (
    select h.name, count(*) as n from held as h group by h.name
  ),
  ranked as (
    select c.*,
           row_number() over (partition by c.name order by c.ord) as nth_of_name,
           row_number() over (partition by c.concurrency_key order by c.ord) as nth_of_key
    from c where not c.bury
  ),
  fits as (
    select c.id, c.name, c.bury, c.ord from c where c.bury
    union all
    -- A join and a hashed IN: a count or an EXISTS per candidate read all of held for each.
    select r.id, r.name, r.bury, r.ord
    from ranked as r
    left join held_per_name as hn on hn.name = r.name
    where (r.concurrency is null or r.nth_of_name + coalesce(hn.n, 0) <= r.concurrency)
      and (r.concurrency_key is null
           or (r.nth_of_key = 1
               and not (r.concurrency_key in (select h.concurrency_key from held as h
                                              where h.concurrency_key is not null))))
  )
  select array_agg(f.id order by f.ord), array_agg(f.name order by f.ord),
         array_agg(f.bury order by f.ord)
  from fits as f;
end
$$;
revoke all on function jobs._within_limits(uuid[], text[], boolean[], timestamptz) from public;

create or replace function jobs.claim(
  worker_id text,
  queues    text[]   default array['default'],
  max_jobs  int      default 1,
  lease     interval default null
) returns setof jobs.claimed_job
language plpgsql volatile
as $$
declare
  v_now     timestamptz := jobs.clock();
  v_ids     uuid[];
  v_names   text[];
  v_bury    boolean[];
  v_limited boolean;
  v_policy_names text[];    -- each name among the candidates once, with its policy:
  v_leases       interval[];  -- the lease a claim of it gets
  v_dead_letter  boolean[];   -- where a burial of it ends
begin
  -- One test on the way in (each PL/pgSQL expression costs a set-up per transaction); the
  -- chain inside names the cause.
  if worker_id is null or length(worker_id) > 200 or queues is null
     or array_position(queues, null) is not null or cardinality(queues) not between 1 and 100
     or max_jobs is null or max_jobs not between 1 and 1000 then
    if worker_id is null then
      perform jobs._raise('22004', 'jobs.claim: worker_id must not be NULL',
        'pass a name for this worker, e.g. its host and process id');
    elsif length(worker_id) > 200 then
      perform jobs._raise('22023', 'jobs.claim: worker_id must be at most 200 characters, got '
        || length(worker_id), 'pass a shorter worker name');
    elsif queues is null or array_position(queues, null) is not null then
      perform jobs._raise('22004', 'jobs.claim: queues must not be NULL or contain NULL',
        'pass the queue names to claim from, e.g. array[''default'']');
    elsif cardinality(queues) not between 1 and 100 then
      perform jobs._raise('22023', 'jobs.claim: queues must name 1 to 100 queues, got '
        || cardinality(queues), 'pass at least one queue name, e.g. array[''default'']');
    elsif max_jobs is null then
      perform jobs._raise('22004', 'jobs.claim: max_jobs must not be NULL',
        'pass a batch size from 1 to 1000');
    elsif max_jobs not between 1 and 1000 then
      perform jobs._raise('22023', 'jobs.claim: max_jobs must be 1 to 1000, got ' || max_jobs,
        'pass a batch size from 1 to 1000');
    end if;
  end if;
  if claim.lease is not null then
    perform jobs._check_interval('jobs.claim: lease', claim.lease, interval '7 days',
      'pass a lease longer than the time between heartbeats, or NULL for the job type''s policy; '
      'heartbeat to run longer');
  end if;

  -- One sort, then plain aggregates over the sorted rows. The paused flag is looked up per
  -- queue by primary key: a tiny table that, joined, got a hash join over a sequential scan
  -- built on every call (measured: docs/BENCHMARKS.md).
  select array_agg(c.id), array_agg(c.name), array_agg(c.bury),
         coalesce(bool_or(c.concurrency_key is not null), false)
    into v_ids, v_names, v_bury, v_limited
  from (
    select c.id, c.name, c.bury, c.concurrency_key
    from unnest(queues) with ordinality as q(queue, ord)
    cross join lateral (
      select * from (
        select j.id, j.name, j.priority, j.run_at, j.concurrency_key, false as bury
        from jobs.jobs j
        where j.queue = q.queue and j.state = 'ready'
        order by j.priority desc, j.run_at
        limit max_jobs for update skip locked) as ready
      union all
      select * from (
        select j.id, j.name, j.priority, j.run_at, j.concurrency_key, false
        from jobs.jobs j
        where j.queue = q.queue and j.state in ('delayed', 'suspended') and j.run_at <= v_now
        order by j.run_at
        limit max_jobs for update skip locked) as due
      union all
      select * from (
        select j.id, j.name, j.priority, j.run_at, j.concurrency_key,
               jobs._lapse_buries(j.attempt, j.max_attempts)
        from jobs.jobs j
        where j.queue = q.queue and j.state = 'running' and j.lease_scan_at <= v_now
          and j.lease_expires_at <= v_now
        order by j.lease_scan_at
        limit max_jobs for update skip locked) as lapsed
    ) as c
    where q.ord = array_position(queues, q.queue)  -- each queue once
      and (select p.paused from jobs.queues as p where p.queue = q.queue) is not true
    order by c.priority desc, c.run_at
  ) as c;

  if v_ids is null then
    return;
  end if;
  -- The policy of each name once per call, not per job: a lookup per row cost more than the
  -- rest of the claim's statement 1 at a batch of 10 (docs/BENCHMARKS.md).
  select array_agg(p.name), array_agg(coalesce(claim.lease, p.lease)), array_agg(p.dead_letter),
         v_limited or coalesce(bool_or(p.concurrency is not null), false)
    into v_policy_names, v_leases, v_dead_letter, v_limited
  from (select distinct n.name from unnest(v_names) as n(name)) as d
  cross join lateral jobs._policy(d.name) as p;
  if v_limited then
    select l.ids, l.names, l.bury into v_ids, v_names, v_bury
    from jobs._within_limits(v_ids, v_names, v_bury, v_now) as l;
    if v_ids is null then
      return;
    end if;
  end if;

  -- No join to the candidates: each row says what it is. A candidate still running is a lapsed
  -- lease (the ready and due scans find no running job, and the rows stay locked since
  -- statement 1), and one on its final attempt is buried, by a statement of its own that runs
  -- only when there is one. A join of the table to the arrays had its generic plan rescan the
  -- array for every row (max_jobs^2 comparisons).
  if true = any(v_bury[1:max_jobs]) then
    update jobs.jobs as j set
      state = jobs._final_state(v_dead_letter[array_position(v_policy_names, j.name)]),
      lease = null, lease_expires_at = null, lease_scan_at = null, finished_at = v_now,
      last_error = jobs._lapse_error(j.attempt, j.max_attempts), updated_at = v_now
    where j.id = any(v_ids[1:max_jobs])
      and j.state = 'running' and jobs._lapse_buries(j.attempt, j.max_attempts);
  end if;

  return query
  with moved as (
    update jobs.jobs as j set
      state = 'running', attempt = j.attempt + 1, claim = j.claim + 1,
      lease = v_leases[array_position(v_policy_names, j.name)],
      lease_expires_at = v_now + v_leases[array_position(v_policy_names, j.name)],
      lease_scan_at = v_now + v_leases[array_position(v_policy_names, j.name)],
      claimed_by = worker_id, finished_at = null,
      last_error = case when j.state = 'running' then jobs._lapse_error(j.attempt, j.max_attempts)
                   else j.last_error end,
      updated_at = v_now
    where j.id = any(v_ids[1:max_jobs])
      and j.state in ('ready', 'delayed', 'suspended', 'running')  -- not the ones just buried
    returning j.*
  )
  select m.id, m.run_id, m.name, m.queue, m.payload, m.attempt, m.max_attempts, m.claim,
         m.lease_expires_at, m.tenant_id, m.priority, m.enqueued_at, m.last_error
  from moved as m
  order by m.priority desc, m.run_at;
end
$$;
alter function jobs.claim(text, text[], int, interval) security definer
  set search_path = pg_catalog, pg_temp set plan_cache_mode = force_generic_plan;

-- The heartbeat runs its argument checks only when an argument is missing or a lease given.
create or replace function jobs.heartbeat(id uuid, claim bigint, lease interval default null)
returns timestamptz
language plpgsql volatile
as $$
declare
  v_now     timestamptz := jobs.clock();
  v_expires timestamptz;
begin
  -- The checks run only when an argument is missing or a lease given: each PERFORM is a
  -- statement, and the two cost 8% of a heartbeat (docs/BENCHMARKS.md).
  if heartbeat.id is null or heartbeat.claim is null then
    perform jobs._check_hold_args('jobs.heartbeat', heartbeat.id, heartbeat.claim);
  end if;
  if heartbeat.lease is not null then
    perform jobs._check_interval('jobs.heartbeat: lease', heartbeat.lease, interval '7 days',
      'pass the lease to extend by, or NULL to extend by the lease of the claim');
  end if;
  -- lease_scan_at moves only once it has passed (or the lease got shorter), so most
  -- heartbeats change no indexed column: HOT updates (see jobs_lease_idx).
  update jobs.jobs as j set
    lease = coalesce(heartbeat.lease, j.lease),
    lease_expires_at = v_now + coalesce(heartbeat.lease, j.lease),
    lease_scan_at = case
      when j.lease_scan_at > v_now and j.lease_scan_at <= v_now + coalesce(heartbeat.lease, j.lease)
      then j.lease_scan_at else v_now + coalesce(heartbeat.lease, j.lease) end
  where j.id = heartbeat.id and j.claim = heartbeat.claim
    and j.state = 'running' and j.lease_expires_at > jobs.clock()
  returning j.lease_expires_at into v_expires;
  return v_expires;
end
$$;
alter function jobs.heartbeat(uuid, bigint, interval) security definer
  set search_path = pg_catalog, pg_temp set plan_cache_mode = force_generic_plan;

-- 6. jobs.enqueue in PL/pgSQL, which keeps its plan (as SQL it planned every call), and a job
--    with no idempotency key and no id of its own inserted without jobs._enqueue's batch
--    statements around it.
create or replace function jobs.enqueue(
  name            text,
  payload         jsonb       default '{}',
  queue           text        default 'default',
  run_at          timestamptz default null,
  priority        int         default 0,
  max_attempts    int         default null,
  idempotency_key text        default null,
  tenant_id       text        default null,
  concurrency_key text        default null,
  on_conflict     text        default 'return',
  id              uuid        default null,
  run_id          uuid        default null
) returns jobs.enqueued
language plpgsql volatile
as $$
declare
  v_spec    jobs.job_spec := row($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12);
  v_problem text[];
  v_now     timestamptz;
  r         jobs.enqueued;
begin
  -- A job with no idempotency key and no id of its own cannot conflict: the same check, ids,
  -- insert and wake-up as jobs._enqueue, without the batch's statements around them (single
  -- enqueues ran 20% faster; docs/BENCHMARKS.md).
  if enqueue.idempotency_key is null and enqueue.id is null then
    v_problem := jobs._spec_problem(v_spec);
    if v_problem is not null then
      perform jobs._raise(v_problem[1], 'jobs.enqueue: ' || v_problem[2], v_problem[3]);
    end if;
    v_now := jobs.clock();
    r.id := jobs._uuid_v7();
    r.run_id := coalesce(enqueue.run_id, r.id);  -- a new run is named after its first job
    r.deduped := false;
    perform jobs._insert_unkeyed(array[v_spec], array[r.id], array[r.run_id], v_now);
    perform jobs._register_and_wake(array[v_spec], null, v_now, array[r.id]);
    return r;
  end if;
  select e.id, e.run_id, e.deduped into r
  from jobs._enqueue(array[v_spec], 'jobs.enqueue') as e;
  return r;
end
$$;
alter function jobs.enqueue(text, jsonb, text, timestamptz, int, int, text, text, text, text, uuid, uuid)
  security definer set search_path = pg_catalog, pg_temp set plan_cache_mode = force_generic_plan;

-- 7. No JIT and no sequential scans in the functions that run on generic plans (see
--    sql/privileges.sql): with a large backlog the claim's generic plan passed jit_above_cost
--    and was compiled on every call; a plan made while jobs.jobs was empty read the whole
--    table on every call once it filled.
do $$
declare
  v_fn regprocedure;
begin
  for v_fn in
    select p.oid::regprocedure from pg_catalog.pg_proc as p
    where p.pronamespace = 'jobs'::regnamespace
      and 'plan_cache_mode=force_generic_plan' = any(p.proconfig)
  loop
    execute format('alter function %s set jit = off set enable_seqscan = off', v_fn);
  end loop;
end
$$;

-- 8. No vacuum truncation on jobs.jobs (see sql/schema.sql): under saturation the truncation
--    phase held each vacuum for seconds and the table grew a step at every pass.
alter table jobs.jobs set (vacuum_truncate = false);

-- 9. The background worker vacuums jobs.jobs when autovacuum would, checking every
--    pg_jobs.vacuum_interval instead of once per autovacuum_naptime (see sql/sweep.sql).
create function jobs._vacuum_due()
returns boolean
language sql stable
as $$
  select current_setting('autovacuum')::boolean
         and coalesce(o.enabled, true)
         and pg_catalog.pg_stat_get_dead_tuples(c.oid)
             > coalesce(o.threshold, current_setting('autovacuum_vacuum_threshold')::float8)
               + coalesce(o.scale_factor, current_setting('autovacuum_vacuum_scale_factor')::float8)
                 * greatest(c.reltuples, 0)
  from pg_catalog.pg_class as c
  cross join lateral (
    select (max(x.option_value) filter (where x.option_name = 'autovacuum_enabled'))::boolean
             as enabled,
           (max(x.option_value) filter (where x.option_name = 'autovacuum_vacuum_threshold'))::float8
             as threshold,
           (max(x.option_value) filter (where x.option_name = 'autovacuum_vacuum_scale_factor'))::float8
             as scale_factor
    from pg_catalog.pg_options_to_table(c.reloptions) as x) as o
  where c.oid = 'jobs.jobs'::regclass
$$;
revoke all on function jobs._vacuum_due() from public;
