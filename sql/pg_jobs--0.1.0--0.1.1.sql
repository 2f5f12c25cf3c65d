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
returns void
language plpgsql volatile
as $$
begin
  if random() < 0.125 then
    perform jobs._prune('{completed,cancelled}',
                        p_now - jobs._retention('pg_jobs.completed_retention', '7 days'),
                        16 * p_completed);
  end if;
end
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
  perform jobs._settle_prune(v_now, 1);
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
  v_now  timestamptz := jobs.clock();
  v_gone uuid[];
  v_runs uuid[];
begin
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

  if jobs._keeps_no_completed() then
    with gone as (
      delete from jobs.jobs as j
      using unnest(ids, claims) as i(id, claim)
      where j.id = i.id and j.claim = i.claim
        and j.state = 'running' and j.lease_expires_at > jobs.clock()
      returning j.id, j.run_id
    )
    select coalesce(array_agg(g.id), '{}'), coalesce(array_agg(g.run_id), '{}')
      into v_gone, v_runs
    from gone as g;
    perform jobs._drop_orphan_steps(v_runs);
    return query
    select u.id, g.id is not null
    from unnest(ids) with ordinality as u(id, ord)
    left join unnest(v_gone) as g(id) on g.id = u.id  -- a DELETE returns each row once
    order by u.ord;
    return;
  end if;

  return query
  with input as (
    select u.id, u.claim, u.result, u.ord
    from unnest(ids, claims, coalesce(results, array_fill(null::jsonb, array[cardinality(ids)])))
         with ordinality as u(id, claim, result, ord)
  ),
  landed as (
    update jobs.jobs as j set
      state = 'completed', result = i.result, lease_expires_at = null,
      finished_at = v_now, updated_at = v_now
    from input as i
    where j.id = i.id and j.claim = i.claim
      and j.state = 'running' and j.lease_expires_at > jobs.clock()
    returning j.id
  )
  select i.id, l.id is not null
  from input as i left join landed as l on l.id = i.id
  order by i.ord;
  perform jobs._settle_prune(v_now, cardinality(ids));
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
    insert into jobs.jobs as j (id, run_id, name, queue, state, priority, run_at, max_attempts,
                                tenant_id, idempotency_key, concurrency_key, payload,
                                enqueued_at, created_at, updated_at)
    select v_ids[s.ordinality], v_runs[s.ordinality], s.name, s.queue,
           case when s.run_at > v_now then 'delayed' else 'ready' end::jobs.job_state,
           s.priority, coalesce(s.run_at, v_now), coalesce(s.max_attempts, p.max_attempts),
           s.tenant_id, null, s.concurrency_key, s.payload, v_now, v_now, v_now
    from unnest(p_specs) with ordinality as s
    cross join lateral jobs._policy(s.name) as p;
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
