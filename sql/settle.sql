-- Working, after the claim: heartbeat, complete, complete_many, fail, snooze, assert_claim,
-- and a prefetching worker's mark_started and hand_back.
--
-- Every function here is fenced. Each write is a single UPDATE whose WHERE clause holds the
-- fence:  state = 'running' and claim = <token> and lease_expires_at > jobs.clock().
-- The row lock is taken by that UPDATE; if another transaction changed the row first (a
-- re-claim, a cancel, a burial), PostgreSQL re-reads the newest version and evaluates the
-- fence again (clock included) before writing, so a stale token never lands. A refused write
-- changes nothing and answers NULL / false; assert_claim raises lease_lost.

create function jobs._check_hold_args(p_fn text, p_id uuid, p_claim bigint)
returns void
language plpgsql immutable
as $$
begin
  if p_id is null then
    perform jobs._raise('22004', p_fn || ': id must not be NULL', 'pass the id jobs.claim returned');
  elsif p_claim is null then
    perform jobs._raise('22004', p_fn || ': claim must not be NULL',
      'pass the claim token jobs.claim returned with the job');
  end if;
end
$$;

-- Raises lease_lost for a claim not held: why, in words (the message), and what to do now,
-- p_first, then what becomes of the job by the state it is in now (the hint; p_again follows
-- when it runs again). p_fn prefixes the message ('jobs.save_step: ', or ''). Another tenant's
-- job, to a role bound to tenants, is as no job: its state is not the caller's to learn.
create function jobs._raise_lost(p_fn text, p_id uuid, p_claim bigint, p_first text,
                                 p_again text default '')
returns void
language plpgsql stable
as $$
declare
  v_job record;
begin
  select j.state, j.claim, j.lease_expires_at into v_job
  from jobs_data.jobs as j
  where j.id = p_id and (jobs._tenants() is null or j.tenant_id = any(jobs._tenants()));
  perform jobs._raise('PJ001',
    format('%sjob %s is no longer held by the claim given: %s', p_fn, p_id,
           case
             when v_job is null then 'no job has this id'
             when v_job.state <> 'running' then format('the job is now %s', v_job.state)
             when v_job.claim <> p_claim then 'the job was claimed again'
             else format('its lease expired at %s', v_job.lease_expires_at)
           end),
    p_first || '; ' ||
      case
        when v_job is null then 'it no longer exists (finished jobs are deleted after their retention period)'
        when v_job.state in ('running', 'ready', 'delayed') then 'it runs again under a new claim' || p_again
        when v_job.state = 'suspended' then 'it runs again under a new claim when it wakes' || p_again
        when v_job.state = 'completed' then 'it was completed: nothing is left to do'
        else format('it ended %s and runs again only if jobs.requeue runs it', v_job.state)
      end);
end
$$;

-- The fence of every call a holder makes beside its settle (steps, sleeps, events, children,
-- assert_claim): the job's row when the claim is held, locked until this transaction ends, so
-- a re-claim or a cancel waits for it (and a concurrent one makes PostgreSQL re-check the row
-- first). FOR SHARE, or FOR UPDATE for a caller that changes the row after. Else lease_lost
-- (jobs._raise_lost: p_fn, p_first and p_again as there). Only the small columns come back: a
-- composite of the whole row would read the payload out of TOAST on every call.
create function jobs._hold(p_fn text, p_id uuid, p_claim bigint, p_for_update boolean,
                           p_first text, p_again text default '',
                           out run_id uuid, out attempt int, out tenant_id text,
                           out children_live int, out wait_event text, out wait_key text,
                           out wait_until timestamptz)
language plpgsql volatile
as $$
#variable_conflict use_column
begin
  if p_for_update then
    select j.run_id, j.attempt, j.tenant_id, j.children_live, j.wait_event, j.wait_key, j.wait_until
      into run_id, attempt, tenant_id, children_live, wait_event, wait_key, wait_until
    from jobs_data.jobs as j
    where j.id = p_id and j.claim = p_claim and jobs._tenant_ok(j.tenant_id)
      and j.state = 'running' and j.lease_expires_at > jobs.clock()
    for update;
  else
    select j.run_id, j.attempt, j.tenant_id, j.children_live, j.wait_event, j.wait_key, j.wait_until
      into run_id, attempt, tenant_id, children_live, wait_event, wait_key, wait_until
    from jobs_data.jobs as j
    where j.id = p_id and j.claim = p_claim and jobs._tenant_ok(j.tenant_id)
      and j.state = 'running' and j.lease_expires_at > jobs.clock()
    for share;
  end if;
  if not found then
    perform jobs._raise_lost(p_fn, p_id, p_claim, p_first, p_again);
  end if;
end
$$;

create function jobs.heartbeat(id uuid, claim bigint, lease interval default null)
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
  -- On its own, it commits without waiting for its WAL flush (pg_jobs.async_claims): a lost
  -- heartbeat only shortens the lease (src/commit/async_claims.rs).
  perform jobs._async_if_alone('heartbeat');
  -- lease_scan_at moves only once it has passed (or the lease got shorter), so most
  -- heartbeats change no indexed column: HOT updates (see jobs_lease_idx).
  -- Never past the attempt's deadline (a timeout): the answer is the capped expiry.
  update jobs_data.jobs as j set
    lease = coalesce(heartbeat.lease, j.lease),
    lease_expires_at = least(v_now + coalesce(heartbeat.lease, j.lease), j.deadline),
    lease_scan_at = case
      when j.lease_scan_at > v_now and j.lease_scan_at <= v_now + coalesce(heartbeat.lease, j.lease)
      then j.lease_scan_at else least(v_now + coalesce(heartbeat.lease, j.lease), j.deadline) end
  where j.id = heartbeat.id and j.claim = heartbeat.claim and jobs._tenant_ok(j.tenant_id)
    and j.state = 'running' and j.lease_expires_at > jobs.clock()
  returning j.lease_expires_at into v_expires;
  return v_expires;
end
$$;
comment on function jobs.heartbeat(uuid, bigint, interval) is
  'Extend the lease of a held job; answers the new expiry, or NULL when the claim is no longer held';

-- Retention a share at a time: one completing settle in 8, chosen at random by the caller
-- (`if random() < 0.125`), also deletes up to 16 completed jobs past
-- pg_jobs.completed_retention per job it completed (jobs._prune, skipping rows others hold):
-- twice the completions on average. Retention then keeps pace with the completions however
-- little CPU the background worker gets on a saturated server (measured: at 16k jobs/s on 2
-- cores the worker alone fell behind and the table grew without bound). Probing on every
-- settle cost 8% of the drain. The draw is the caller's own IF, a PL/pgSQL expression, so the
-- seven settles in 8 that do not prune run no statement for it (a PERFORM that drew inside
-- this function cost 2% of a drain of single jobs: docs/BENCHMARKS.md). Answers the jobs
-- deleted.
create function jobs._settle_prune(p_now timestamptz, p_completed int)
returns bigint
language sql volatile
as $$
  select (jobs._prune('{completed,cancelled}',
                      p_now - jobs._retention('pg_jobs.completed_retention', '7 days'),
                      16 * p_completed)).jobs_deleted
$$;

-- pg_jobs.completed_retention = 0 keeps completed jobs for no time: complete and complete_many
-- then delete the job (and its run's steps with the run's last job) instead of keeping it as
-- completed, as pgmq's delete and graphile-worker do; the result is not kept. A delete writes
-- no new row version and no index entry: the drain of 100-job batches ran 16-17% faster (see
-- docs/BENCHMARKS.md). The fence is the same WHERE clause, re-checked under the row lock.
create function jobs._keeps_no_completed()
returns boolean
language sql stable
begin atomic
  select jobs._retention('pg_jobs.completed_retention', '7 days') = interval '0';
end;

create function jobs.complete(id uuid, claim bigint, result jsonb default null)
returns boolean
language plpgsql volatile
as $$
declare
  v_now   timestamptz := jobs.clock();
  v_run   uuid;
  v_tried boolean;
  v_counted boolean;
begin
  -- The checks run only when an argument is missing or the result too large: each PERFORM is
  -- a statement (as in heartbeat; the functions test again, and name the cause).
  if complete.id is null or complete.claim is null then
    perform jobs._check_hold_args('jobs.complete', complete.id, complete.claim);
  end if;
  if jobs._size(complete.result) > jobs._max_payload_size() then
    perform jobs._check_size('jobs.complete: result', complete.result);
  end if;
  if jobs._keeps_no_completed() then
    delete from jobs_data.jobs as j
    where j.id = complete.id and j.claim = complete.claim and jobs._tenant_ok(j.tenant_id)
      and j.state = 'running' and j.lease_expires_at > jobs.clock()
      and (j.parent_id is null or not jobs._parent_live(j.parent_id)) and j.children_live is null
    returning j.run_id, j.last_error is not null,
              jobs._outcome(j.queue, 'completed') and jobs._slot_freed(j.name, j.concurrency_key)
      into v_run, v_tried, v_counted;
    if found then
      perform jobs._drop_orphan_steps(array[v_run]);
      if v_tried then  -- only a job that failed an attempt has any
        delete from jobs_data.attempts as a where a.job_id = complete.id;
      end if;
      return true;
    end if;
    -- Not deleted: a lost claim (the update below refuses it too), a child of a live
    -- parent, which is kept, completed, for the parent to find (jobs._parent_live), or a
    -- parent, which retention deletes with its family (jobs._prune).
  end if;
  update jobs_data.jobs as j set
    state = 'completed', result = complete.result, lease_expires_at = null,
    finished_at = v_now, updated_at = v_now
  where j.id = complete.id and j.claim = complete.claim and jobs._tenant_ok(j.tenant_id)
    and j.state = 'running' and j.lease_expires_at > jobs.clock()
  returning jobs._outcome(j.queue, 'completed') and jobs._slot_freed(j.name, j.concurrency_key)
    into v_counted;
  if not found then
    return false;
  end if;
  if random() < 0.125 then  -- a share of retention: see jobs._settle_prune
    perform jobs._settle_prune(v_now, 1);
  end if;
  return true;
end
$$;
comment on function jobs.complete(uuid, bigint, jsonb) is
  'Settle a held job as completed; false (and nothing changed) when the claim is no longer held';

-- complete_many's and complete_and_claim's settle: the ids of the jobs that landed (an id
-- given twice, once). A plain function, called in an expression: complete_and_claim calls it
-- with no statement of its own, where a call of complete_many took one (its rows kept in a
-- tuplestore, the API functions' settings set again): docs/BENCHMARKS.md.
create function jobs._complete_landed(ids uuid[], claims bigint[], results jsonb[])
returns uuid[]
language plpgsql volatile
as $$
#variable_conflict use_column
declare
  v_now    timestamptz := jobs.clock();
  v_landed uuid[];
  v_runs   uuid[];
  v_tried  uuid[];   -- deleted jobs that failed an attempt: their rows in jobs.attempts go too
  v_sorted uuid[];   -- ids sorted, and results in that order: see the update below
  v_results jsonb[];
  v_tenants text[] := jobs._tenants();  -- a bound role settles its tenants' jobs only
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
  if results is not null then
    perform jobs._check_size('jobs.complete_many: a result', r.result) from unnest(results) as r(result);
  end if;

  -- Each branch is one statement, fenced per row, and collects the ids that landed. A role
  -- bound to tenants lands only its tenants' jobs: with up to 10,000 pairs a call, this is
  -- where a guessed token would be tried fastest (docs/SECURITY.md). Neither
  -- joins jobs_data.jobs to the arrays: a join's plan rests on the row estimates, and a plan
  -- cached while the table looked empty read every job for every id given (5 minutes for
  -- 10,000 ids with 200k jobs; docs/PLANS.md). So the one scan is the primary key with
  -- id = any(ids); each job's own token is checked against a hash of the (id, claim) pairs
  -- (a hashed SubPlan: "is true" keeps the planner from turning the IN into a join); and a
  -- result is found by binary search (width_bucket) in the sorted ids.
  if jobs._keeps_no_completed() then
    with gone as (
      delete from jobs_data.jobs as j
      where j.id = any(ids)
        and ((j.id, j.claim) in (select i.id, i.claim from unnest(ids, claims) as i(id, claim))) is true
        and j.state = 'running' and j.lease_expires_at > jobs.clock()
        and (v_tenants is null or j.tenant_id = any(v_tenants))
        and (j.parent_id is null or not jobs._parent_live(j.parent_id)) and j.children_live is null
      returning j.id, j.run_id, j.last_error is not null as tried,
                jobs._outcome(j.queue, 'completed') and jobs._slot_freed(j.name, j.concurrency_key) as counted
    )
    select coalesce(array_agg(g.id), '{}'), coalesce(array_agg(g.run_id), '{}'),
           array_agg(g.id) filter (where g.tried)
      into v_landed, v_runs, v_tried
    from gone as g;
    perform jobs._drop_orphan_steps(v_runs);
    if v_tried is not null then  -- only jobs that failed an attempt have any
      delete from jobs_data.attempts as a where a.job_id = any(v_tried);
    end if;
  end if;
  -- Completed and kept: all of them, or (no completed kept) the children of live parents,
  -- which are kept for their parents to find (jobs._parent_live), and lost claims, which this
  -- refuses too.
  if v_landed is null or cardinality(v_landed) < cardinality(ids) then
    if results is not null then
      -- An id given twice gets the result given with its highest claim: the only one that
      -- can be the job's current claim unless a claim never handed out is given.
      select array_agg(i.id order by i.id, i.claim), array_agg(i.result order by i.id, i.claim)
        into v_sorted, v_results
      from unnest(ids, claims, results) as i(id, claim, result);
    end if;
    with landed as (
      update jobs_data.jobs as j set
        state = 'completed', result = v_results[width_bucket(j.id, v_sorted)],  -- no results: NULL
        lease_expires_at = null, finished_at = v_now, updated_at = v_now
      where j.id = any(ids)
        and ((j.id, j.claim) in (select i.id, i.claim from unnest(ids, claims) as i(id, claim))) is true
        and j.state = 'running' and j.lease_expires_at > jobs.clock()
        and (v_tenants is null or j.tenant_id = any(v_tenants))
      returning j.id,
                jobs._outcome(j.queue, 'completed') and jobs._slot_freed(j.name, j.concurrency_key) as counted
    )
    select coalesce(v_landed, '{}') || coalesce(array_agg(l.id), '{}') into v_landed from landed as l;
    if random() < 0.125 then  -- a share of retention: see jobs._settle_prune
      perform jobs._settle_prune(v_now, cardinality(v_landed));
    end if;
  end if;
  return v_landed;
end
$$;

create function jobs.complete_many(ids uuid[], claims bigint[], results jsonb[] default null)
returns table (id uuid, landed boolean)
language plpgsql volatile
as $$
#variable_conflict use_column
declare
  v_landed uuid[] := jobs._complete_landed(ids, claims, results);
begin
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
comment on function jobs.complete_many(uuid[], bigint[], jsonb[]) is
  'Complete a claimed batch in one statement, each job fenced on its own token; '
  'answers (id, landed) in the order given';

-- Settle and claim in one call, so in one transaction and one commit (a plain queue needs two):
-- complete_many's fence on every job, then claim's semantics for the next batch (limits,
-- burial of final-attempt lapses, priorities). All or nothing: a claim no longer held raises
-- lease_lost, and nothing of the call lands, so inside the worker's own transaction (the job's
-- writes, then this) a rollback undoes the writes with it. No wait: a transaction that wrote
-- must not sleep holding its locks; when this answers nothing, claim with wait.
-- A prefetching worker passes prefetch, the jobs it started since its last call (start_ids,
-- start_claims: jobs.mark_started's, in the same transaction, before the settle), and may pass
-- max_jobs 0 with prefetch to settle and start without claiming.
create function jobs.complete_and_claim(ids uuid[], claims bigint[], worker_id text,
                                        queues text[] default array['default'],
                                        max_jobs int default 1, lease interval default null,
                                        results jsonb[] default null,
                                        report_buried boolean default false,
                                        prefetch boolean default false,
                                        start_ids uuid[] default null, start_claims bigint[] default null)
returns setof jobs.claimed_job
language plpgsql volatile
as $$
declare
  v_start_ids    uuid[] := start_ids;
  v_start_claims bigint[] := start_claims;
  v_started      int;
  v_landed       uuid[];
  v_lost         bigint := 0;
begin
  -- A job started and completed in one call needs no mark (it ends here, or the call fails
  -- whole): in a steady drain every start is, so a batch writes each row once, not twice.
  if cardinality(start_ids) > 0 and cardinality(ids) > 0 and cardinality(start_ids) = cardinality(start_claims) then
    select coalesce(array_agg(s.id order by s.o), '{}'), coalesce(array_agg(s.claim order by s.o), '{}')
      into v_start_ids, v_start_claims
    from unnest(start_ids, start_claims) with ordinality as s(id, claim, o)
    where s.id not in (select i.id from unnest(ids) as i(id) where i.id is not null);
  end if;
  if v_start_ids is not null or v_start_claims is not null then
    if cardinality(v_start_ids) > 0 or cardinality(v_start_claims) > 0 or v_start_ids is null or v_start_claims is null then
      v_started := jobs.mark_started(v_start_ids, v_start_claims);
    end if;
  end if;
  v_landed := jobs._complete_landed(ids, claims, results);
  if cardinality(v_landed) < cardinality(ids) then  -- a lost claim, or an id given twice
    select count(*) into v_lost from unnest(ids) as u(id) where u.id <> all(v_landed);
  end if;
  if v_lost > 0 then
    perform jobs._raise('PJ001', format('jobs.complete_and_claim: %s of the %s claims given are '
      'no longer held (lease lapsed, claimed again, cancelled or settled)', v_lost, cardinality(ids)),
      'nothing was completed nor claimed: roll back the jobs'' writes; complete the rest with '
      'jobs.complete_many, then claim');
  end if;
  if max_jobs = 0 and prefetch then  -- (a prefetching worker's settle and starts only)
    return;
  end if;
  return query select * from jobs.claim(worker_id, queues, max_jobs, lease, null, report_buried, prefetch);
end
$$;
comment on function jobs.complete_and_claim(uuid[], bigint[], text, text[], int, interval, jsonb[], boolean,
                                            boolean, uuid[], bigint[]) is
  'Complete a claimed batch and claim the next in one transaction; lease_lost and nothing '
  'changed when a claim is no longer held. A prefetching worker also marks the jobs it started';

-- The arrays of ids and claim tokens that mark_started and hand_back take.
create function jobs._check_pairs(p_fn text, p_ids uuid[], p_claims bigint[])
returns void
language plpgsql immutable
as $$
begin
  if p_ids is null or p_claims is null then
    perform jobs._raise('22004', p_fn || ': ids and claims must not be NULL',
      'pass the ids and claim tokens of the jobs jobs.claim returned, as two arrays');
  elsif cardinality(p_ids) <> cardinality(p_claims) then
    perform jobs._raise('22023', format('%s: ids and claims must be equally long, got %s and %s', p_fn,
      cardinality(p_ids), cardinality(p_claims)), 'pass one claim token per id');
  elsif cardinality(p_ids) > 10000 then
    perform jobs._raise('22023', format('%s: at most 10000 jobs per call, got %s', p_fn, cardinality(p_ids)),
      'split the batch');
  elsif array_position(p_ids, null) is not null or array_position(p_claims, null) is not null then
    perform jobs._raise('22004', p_fn || ': ids and claims must not contain NULL',
      'pass the id and claim token of every job');
  end if;
end
$$;

-- A prefetched job starts: from now its attempt is used (a lapse ends it, as any other), and
-- its timeout counts. Fenced per job like complete_many (a claim not held, or a job started
-- already, is passed over). Answers how many started.
create function jobs.mark_started(ids uuid[], claims bigint[])
returns int
language plpgsql volatile
as $$
#variable_conflict use_column
declare
  v_now timestamptz := jobs.clock();
  v_tenants text[] := jobs._tenants();
  v_n int;
begin
  perform jobs._check_pairs('jobs.mark_started', ids, claims);  -- (once a batch)
  update jobs_data.jobs as j set
    started_at = v_now,
    deadline = least(v_now + coalesce(j.timeout, (select p.timeout from jobs._policy(j.name) as p)), j.run_deadline),
    lease_expires_at = least(j.lease_expires_at,
                             v_now + coalesce(j.timeout, (select p.timeout from jobs._policy(j.name) as p))),
    lease_scan_at = least(j.lease_scan_at,
                          v_now + coalesce(j.timeout, (select p.timeout from jobs._policy(j.name) as p)))
  where j.id = any(ids)
    and ((j.id, j.claim) in (select i.id, i.claim from unnest(ids, claims) as i(id, claim))) is true
    and j.state = 'running' and j.started_at is null and j.lease_expires_at > jobs.clock()
    and (v_tenants is null or j.tenant_id = any(v_tenants));
  get diagnostics v_n = row_count;
  return v_n;
end
$$;
comment on function jobs.mark_started(uuid[], bigint[]) is
  'Mark prefetched jobs (jobs.claim''s prefetch) as started: their attempts are used from now, '
  'and their timeouts count; answers how many started (claims not held are passed over)';

-- A worker gives back jobs it holds and will not run (prefetched, or stopping): each is ready
-- again at once, in its place in line, its attempt not used. Fenced per job; answers how many.
create function jobs.hand_back(ids uuid[], claims bigint[])
returns int
language plpgsql volatile
as $$
#variable_conflict use_column
declare
  v_now timestamptz := jobs.clock();
  v_tenants text[] := jobs._tenants();
  v_queues text[];
begin
  perform jobs._check_pairs('jobs.hand_back', ids, claims);  -- (once a batch)
  with given as (
    update jobs_data.jobs as j set
      state = 'ready', attempt = j.attempt - 1, lease_expires_at = null, started_at = null,
      updated_at = v_now
    where j.id = any(ids)
      and ((j.id, j.claim) in (select i.id, i.claim from unnest(ids, claims) as i(id, claim))) is true
      and j.state = 'running' and j.lease_expires_at > jobs.clock()
      and (v_tenants is null or j.tenant_id = any(v_tenants))
    returning j.queue, jobs._slot_freed(j.name, j.concurrency_key)
  )
  select array_agg(g.queue) into v_queues from given as g;
  if v_queues is null then
    return 0;
  end if;
  perform jobs._signal_work(array(select distinct q from unnest(v_queues) as q));
  return cardinality(v_queues);
end
$$;
comment on function jobs.hand_back(uuid[], bigint[]) is
  'Give back held jobs the worker will not run: ready again at once, no attempt used; '
  'answers how many (claims not held are passed over)';

create function jobs.fail(id uuid, claim bigint, error text,
                          retry_at timestamptz default null, retryable boolean default true,
                          error_names text[] default null, timed_out boolean default false)
returns text
language plpgsql volatile
as $$
declare
  v_now   timestamptz := jobs.clock();
  v_state jobs.job_state;
  v_queue text;
begin
  if fail.id is null or fail.claim is null then  -- (each PERFORM is a statement: see complete)
    perform jobs._check_hold_args('jobs.fail', fail.id, fail.claim);
  end if;
  if fail.error is null then
    perform jobs._raise('22004', 'jobs.fail: error must not be NULL',
      'pass the error text the job failed with; it is kept in last_error');
  elsif fail.retryable is null then
    perform jobs._raise('22004', 'jobs.fail: retryable must not be NULL',
      'pass false to dead-letter now, or true to retry while attempts are left');
  end if;
  if cardinality(fail.error_names) > 100 then
    perform jobs._raise('22023', 'jobs.fail: error_names must name at most 100 names, got '
      || cardinality(fail.error_names),
      'pass the error''s class, its bases and its code, which jobs.job_types.non_retryable_errors may name');
  end if;
  if not isfinite(fail.retry_at) then
    perform jobs._check_finite('jobs.fail: retry_at', fail.retry_at,
      'pass when to retry, or NULL for the job type''s backoff');
  end if;

  -- The failed attempt's row in jobs.attempts, in the same statement.
  with settled as (
  update jobs_data.jobs as j set
    state = case when r.retry then 'delayed' else jobs._final_state(p.dead_letter) end,
    run_at = case when r.retry
      then coalesce(fail.retry_at,
                    v_now + jobs._backoff(p.backoff, p.backoff_base, p.backoff_max, p.jitter, j.attempt))
      else j.run_at end,
    last_error = left(fail.error, 10000),
    lease_expires_at = null,
    finished_at = case when r.retry then null else v_now end,
    updated_at = v_now
  -- No retry on the final attempt, when the worker says so, or for an error its job type
  -- declares non-retryable (any of the error's names among non_retryable_errors).
  from (select h.name, h.attempt < h.max_attempts and fail.retryable
               and not coalesce(fail.error_names && (select t.non_retryable_errors from jobs_data.job_types as t
                                                     where t.name = h.name), false) as retry
        from jobs_data.jobs h where h.id = fail.id) as r
  cross join lateral jobs._policy(r.name) as p
  where j.id = fail.id and j.claim = fail.claim and jobs._tenant_ok(j.tenant_id)
    and j.state = 'running' and j.lease_expires_at > jobs.clock()
  returning j.id, j.attempt, j.claimed_by, j.claimed_at, j.state, j.queue,
            jobs._outcome(j.queue, case when j.state = 'delayed' then 'retried' else j.state::text end,
                          j.id) and jobs._slot_freed(j.name, j.concurrency_key) as counted
  ),
  noted as (
    insert into jobs_data.attempts (job_id, attempt, worker, claimed_at, finished_at, outcome, error)
    select s.id, s.attempt, s.claimed_by, s.claimed_at, v_now,
           case when fail.timed_out then 'timed_out' else 'failed' end, left(fail.error, 10000)
    from settled as s
  )
  select s.state, s.queue into v_state, v_queue from settled as s;

  if v_state = 'delayed' then
    perform jobs._signal_work(array[v_queue]);  -- its retry comes due: the blocking claims
    return 'retried';
  end if;
  return v_state::text;
end
$$;
comment on function jobs.fail(uuid, bigint, text, timestamptz, boolean, text[], boolean) is
  'Record a failed attempt: ''retried'' (delayed until retry_at or the backoff), ''dead'' or '
  '''failed'' (no attempts left, retryable false, or one of error_names among the job type''s '
  'non_retryable_errors); NULL when the claim is no longer held. timed_out records the attempt '
  'as timed out (a step past its timeout) rather than failed';

create function jobs.snooze(id uuid, claim bigint, run_at timestamptz)
returns boolean
language plpgsql volatile
as $$
declare
  v_queue text;
begin
  if snooze.id is null or snooze.claim is null then  -- (each PERFORM is a statement: see complete)
    perform jobs._check_hold_args('jobs.snooze', snooze.id, snooze.claim);
  end if;
  if snooze.run_at is null then
    perform jobs._raise('22004', 'jobs.snooze: run_at must not be NULL',
      'pass when the job should run again, e.g. now() + interval ''5 minutes''');
  end if;
  if not isfinite(snooze.run_at) then
    perform jobs._check_finite('jobs.snooze: run_at', snooze.run_at,
      'pass when the job should run again, e.g. now() + interval ''5 minutes''');
  end if;
  -- Parking is control flow, not a failure: the attempt the claim counted is given back.
  update jobs_data.jobs as j set
    state = 'suspended', run_at = snooze.run_at, attempt = j.attempt - 1,
    lease_expires_at = null, updated_at = jobs.clock()
  where j.id = snooze.id and j.claim = snooze.claim and jobs._tenant_ok(j.tenant_id)
    and j.state = 'running' and j.lease_expires_at > jobs.clock()
  returning case when jobs._slot_freed(j.name, j.concurrency_key) then j.queue end into v_queue;
  if v_queue is null then
    return false;
  end if;
  perform jobs._signal_work(array[v_queue]);  -- it comes due at run_at: the blocking claims
  return true;
end
$$;
comment on function jobs.snooze(uuid, bigint, timestamptz) is
  'Park a held job until run_at without using an attempt; false when the claim is no longer held';

create function jobs.assert_claim(id uuid, claim bigint)
returns void
language plpgsql volatile
as $$
begin
  if assert_claim.id is null or assert_claim.claim is null then  -- (see complete)
    perform jobs._check_hold_args('jobs.assert_claim', assert_claim.id, assert_claim.claim);
  end if;
  perform jobs._hold('', assert_claim.id, assert_claim.claim, false,
    'roll back this transaction so its side effects are not committed');
end
$$;
comment on function jobs.assert_claim(uuid, bigint) is
  'Raise lease_lost unless the claim is held; locks the job row FOR SHARE until the transaction '
  'ends, so call it in the transaction that writes the job''s side effects';
