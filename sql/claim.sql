-- Working: jobs.claim, which hands out jobs.
--
-- The common case is one statement: it finds the candidates as statement 1 below does, and
-- when every one is plain (a ready or due job of a queue without fairness, with no
-- concurrency key, of a job type without limits, its run not over; no lapsed lease), it moves
-- the first max_jobs as statement 2 does. Otherwise it moves nothing, and the claim goes on as
-- follows, each part a statement of its own (unless it found nothing at all).
--
-- Statement 1 finds candidates. For each requested (unpaused) queue, three bounded index range
-- scans, each at most max_jobs rows, skipping rows other claimers hold (FOR UPDATE SKIP LOCKED):
--   jobs_ready_idx  ready jobs, already in claim order (priority desc, run_at)
--   jobs_due_idx    delayed and suspended jobs whose run_at has passed, oldest first
--   jobs_lease_idx  running jobs whose lease lapsed, oldest lapse first
-- merged by priority desc, run_at. Neither backlog nor finished history is read, so the cost of
-- a claim does not grow with them. A fair queue's ready and due jobs come instead from
-- jobs._fair_ready, which takes them in turns among the queue's groups (sql/fairness.sql).
--
-- A worker bound to tenants (jobs.grant_worker(role, tenant)) is handed only their jobs.
--
-- Then one statement reads the policy of each job name among the candidates (jobs._policy:
-- lease, dead-lettering, concurrency), once per call, not once per candidate.
--
-- Limits (only when a candidate has a concurrency_key or its job type a concurrency), per
-- tenant: jobs._within_limits locks the slot of each limited name and key of a tenant
-- (jobs_data.lock_slots, in one order, so claimers never deadlock), then counts the running jobs in a new statement, whose snapshot sees every
-- claim committed under those locks, and keeps the candidates that fit. A candidate held back
-- is not updated, so it is charged no attempt.
--
-- Statement 2 moves up to max_jobs of them. A lapsed lease with attempts left becomes a new
-- attempt. A lapse on the final attempt is BURIED by the claim (dead, or failed where the job
-- type does not dead-letter) and never handed out: a job that kills its worker every time
-- reaches the dead letters instead of killing one worker per lease forever. A candidate whose
-- run is over (its run_deadline passed: run_timeout) is buried too, whatever attempts it has
-- left; an attempt's deadline is capped at its run's. Candidates not
-- moved stay locked, unclaimed, until the claim's transaction ends.
--
-- Lock order: job rows (skipping locked ones), then the lock slots of limits.


-- The candidates (in claim order) that fit their limits, at most p_max of them to start and
-- every burial (which takes no slot):
-- jobs_data.job_types.concurrency (running jobs of a name, fleet-wide), concurrency_key (at
-- most key_concurrency running jobs per key, one by default), and rate_limit per rate_period (jobs of a name started in any window
-- of that length, or of a name and key with rate_limit_per_key). Buried candidates always pass:
-- burying is neither running nor starting. Called by jobs.claim with the candidate rows locked.
--
-- The starts of rate-limited jobs are rows of jobs_data.rate_starts, written here for the
-- candidates kept, at a time taken after the limits' locks: every claimer under the same lock
-- wrote earlier times, so at each start the window ending then holds at most rate_limit
-- starts, and so does every window. Rows older than their name's window are deleted here and
-- by the sweep.
--
-- p_wait: wait for the limits' locks (the first look of a claim). A later look (past
-- held-back candidates) already holds some, so it takes only those free now, and holds back
-- the candidates under a lock it did not get: claimers never wait on each other in a cycle.
-- p_kept, p_kept_bury: what earlier looks of the same claim kept, which counts as running.
create function jobs._within_limits(p_ids uuid[], p_names text[], p_bury boolean[],
                                    p_now timestamptz, p_max int, p_wait boolean,
                                    p_kept uuid[], p_kept_bury boolean[])
returns table (ids uuid[], names text[], bury boolean[])
language plpgsql volatile
as $$
declare
  v_tenants text[];
  v_slots   int[];
  v_locked  text[];
  v_at      timestamptz;
begin
  -- Serialise the claimers of each limited name and key of a tenant until they commit, so
  -- the counts below see every claim made under the same limit (jobs._lock_slots, in one
  -- lock order for all).
  select coalesce(array_agg(w.tenant), '{}'), coalesce(array_agg(w.slot), '{}')
    into v_tenants, v_slots
  from (
    select distinct coalesce(j.tenant_id, '') as tenant, hashtext(x.lock_key) & 1023 as slot
    from jobs_data.jobs as j
    left join jobs_data.job_types as t on t.name = j.name
    cross join lateral (values ('name:' || j.name, t.concurrency is not null or t.rate_limit is not null),
                               ('key:' || j.concurrency_key, j.concurrency_key is not null))
               as x(lock_key, limited)
    where j.id = any(p_ids) and x.limited) as w;
  v_locked := jobs._lock_slots(v_tenants, v_slots, case when p_wait then 'wait' else 'skip' end);
  v_at := jobs.clock();

  -- Starts that left their window count no more.
  if exists (select from jobs_data.job_types as t where t.name = any(p_names) and t.rate_limit is not null) then
    delete from jobs_data.rate_starts as r
    using jobs_data.job_types as t
    where t.name = any(p_names) and t.rate_limit is not null
      and r.name = t.name and r.started_at <= v_at - t.rate_period;
  end if;

  -- A new statement, so a new snapshot: it sees the claims committed under those locks.
  return query
  with c as (  -- a lookup per candidate, not a join (see the UPDATE in jobs.claim)
    select u.id, u.name, u.bury, u.ord, k.concurrency_key, k.tenant, t.concurrency, t.rate_limit,
           t.rate_period, coalesce(t.rate_limit_per_key, false) as per_key,
           coalesce(t.key_concurrency, 1) as key_limit,
           (t.concurrency is null and t.rate_limit is null
              or (hashtext('name:' || u.name) & 1023) || ':' || k.tenant = any(v_locked))
           and (k.concurrency_key is null
                or (hashtext('key:' || k.concurrency_key) & 1023) || ':' || k.tenant = any(v_locked)) as locked
    from unnest(p_ids, p_names, p_bury) with ordinality as u(id, name, bury, ord)
    cross join lateral (select j.concurrency_key, coalesce(j.tenant_id, '') as tenant
                        from jobs_data.jobs as j where j.id = u.id) as k
    left join lateral (select t.concurrency, t.rate_limit, t.rate_period, t.rate_limit_per_key,
                              t.key_concurrency
                       from jobs_data.job_types as t where t.name = u.name) as t on true
  ),
  -- The jobs running now under a candidate's name or key. No candidate is among them: a
  -- lapsed one's lease ended by p_now (jobs.claim found it so and holds its row), and the
  -- others are not running. Each tenant's limits count its own jobs only.
  held as (
    select r.name, r.concurrency_key, coalesce(r.tenant_id, '') as tenant
    from jobs_data.jobs as r
    where r.state = 'running' and r.lease_scan_at is not null  -- all running jobs: jobs_lease_idx
      and r.lease_expires_at > p_now
      and (r.name in (select c.name from c where c.concurrency is not null)
           or r.concurrency_key in (select c.concurrency_key from c))
    union all
    select r.name, r.concurrency_key, coalesce(r.tenant_id, '')
    from unnest(p_kept, p_kept_bury) as k(id, bury)
    join jobs_data.jobs as r on r.id = k.id
    where not k.bury
  ),
  held_per_name as (
    select h.name, h.tenant, count(*) as n from held as h group by h.name, h.tenant
  ),
  held_per_key as (
    select h.concurrency_key, h.tenant, count(*) as n from held as h
    where h.concurrency_key is not null group by h.concurrency_key, h.tenant
  ),
  -- The starts in each rate-limited name's window, per name and key.
  started as (
    select r.name, r.tenant, r.key, count(*) as n
    from jobs_data.rate_starts as r
    join jobs_data.job_types as t on t.name = r.name
    where r.name in (select c.name from c where c.rate_limit is not null)
      and r.started_at > v_at - t.rate_period
    group by r.name, r.tenant, r.key
  ),
  ranked as (
    select c.*,
           row_number() over (partition by c.tenant, c.name order by c.ord) as nth_of_name,
           row_number() over (partition by c.tenant, c.concurrency_key order by c.ord) as nth_of_key,
           row_number() over (partition by c.tenant, c.name, c.concurrency_key order by c.ord) as nth_of_name_key
    from c where not c.bury
  ),
  fits as (
    select c.id, c.name, c.bury, c.ord, c.tenant, null::text as start_key, false as starts
    from c where c.bury
    union all
    -- A join and a hashed IN: a count or an EXISTS per candidate read all of held for each.
    select r.id, r.name, r.bury, r.ord, r.tenant, case when r.per_key then r.concurrency_key end,
           r.rate_limit is not null
    from ranked as r
    left join held_per_name as hn on hn.name = r.name and hn.tenant = r.tenant
    left join held_per_key as hk on hk.concurrency_key = r.concurrency_key and hk.tenant = r.tenant
    where r.locked
      and (r.concurrency is null or r.nth_of_name + coalesce(hn.n, 0) <= r.concurrency)
      and (r.concurrency_key is null or r.nth_of_key + coalesce(hk.n, 0) <= r.key_limit)
      and (r.rate_limit is null
           or case when r.per_key
                then r.nth_of_name_key + coalesce((select s.n from started as s where s.name = r.name
                                                    and s.tenant = r.tenant
                                                    and s.key is not distinct from r.concurrency_key), 0)
                else r.nth_of_name + coalesce((select sum(s.n) from started as s
                                               where s.name = r.name and s.tenant = r.tenant), 0)
              end <= r.rate_limit)
  ),
  kept as (  -- every burial, and up to p_max jobs to start: a burial takes no slot of the batch
    select * from fits as f where f.bury
    union all
    (select * from fits as f where not f.bury order by f.ord limit p_max)
  ),
  logged as (
    insert into jobs_data.rate_starts (name, key, started_at, tenant)
    select k.name, k.start_key, v_at, k.tenant from kept as k where k.starts
  )
  select array_agg(k.id order by k.ord), array_agg(k.name order by k.ord),
         array_agg(k.bury order by k.ord)
  from kept as k;
end
$$;

-- The next time after p_now a job of these queues comes due (a delayed or suspended job's
-- run_at, a running job's lease expiry), in jobs.clock() time: when a blocking claim must look
-- again, whatever wakes it. Per queue, one bounded probe of jobs_due_idx and a read of its
-- running jobs (jobs_lease_idx). Due times already past are left out: such a job is not
-- claimable now (another claimer holds it, or a limit does), and its holder settles it.
create function jobs._next_due(p_queues text[], p_now timestamptz)
returns timestamptz
language sql stable
begin atomic
  select min(d.at)
  from unnest(p_queues) as q(queue)
  cross join lateral (
    select (select j.run_at from jobs_data.jobs as j
            where j.queue = q.queue and j.state in ('delayed', 'suspended') and j.run_at > p_now
              and j.run_at < 'infinity'  -- (jobs waiting behind their ordering key never come due)
            order by j.run_at limit 1) as at
    union all
    select (select min(j.lease_expires_at) from jobs_data.jobs as j
            where j.queue = q.queue and j.state = 'running' and j.lease_scan_at is not null
              and j.lease_expires_at > p_now)
  ) as d;
end;

-- After a look of a waiting claim that claimed nothing, in the look's subtransaction: what a
-- limit holds back. It reads, in claim order, the first 1,000 ready and due jobs of the queues
-- and keeps those a limit applies to (a name's concurrency or rate limit, a concurrency key),
-- the candidates a limit held back among them. It locks nothing: a row locked here, in a look
-- about to be rolled back, would hide a job from another claim looking at that moment, which
-- would skip it and sleep beside it (a job made ready after this look's snapshot, which its
-- wake-up counters, read before the look, report to this claim, not to that one).
-- Answers the wake-up keys of their names and concurrency keys (src/commit/wakeups.rs, limit_key)
-- and when a slot of those limits frees by time alone: a holder's lease lapsing, or the oldest
-- start in a rate window leaving it (jobs.clock() time). None held back: keys NULL.
create function jobs._held_back(p_queues text[], p_tenants text[], p_now timestamptz,
                                out keys text[], out free_at timestamptz)
language plpgsql volatile
as $$
declare
  v_limited text[] := array(select t.name from jobs_data.job_types as t
                            where t.concurrency is not null or t.rate_limit is not null);
  v_names text[];
  v_keys  text[];
begin
  select array_agg(distinct h.name), array_agg(distinct h.concurrency_key)
    into v_names, v_keys
  from unnest(p_queues) as q(queue)
  cross join lateral (
    select * from (
      select j.name, j.concurrency_key from jobs_data.jobs as j
      where j.queue = q.queue and j.state = 'ready'
        and (p_tenants is null or j.tenant_id = any(p_tenants))
      order by j.priority desc, j.run_at
      limit 1000) as ready
    union all
    select * from (
      select j.name, j.concurrency_key from jobs_data.jobs as j
      where j.queue = q.queue and j.state in ('delayed', 'suspended') and j.run_at <= p_now
        and (p_tenants is null or j.tenant_id = any(p_tenants))
      order by j.run_at
      limit 1000) as due
  ) as h
  where (h.concurrency_key is not null or h.name = any(v_limited))
    and (select p.paused from jobs_data.queues as p where p.queue = q.queue) is not true;
  if v_names is null then
    return;
  end if;
  v_keys := array_remove(v_keys, null);
  keys := array(select chr(1) || 'name:' || n.name from unnest(v_names) as n(name))
          || array(select chr(1) || 'key:' || k.key from unnest(v_keys) as k(key));
  select min(x.at) into free_at
  from (
    select min(r.lease_expires_at) as at
    from jobs_data.jobs as r
    where r.state = 'running' and r.lease_scan_at is not null and r.lease_expires_at > p_now
      and (r.name in (select t.name from jobs_data.job_types as t
                      where t.name = any(v_names) and t.concurrency is not null)
           or r.concurrency_key = any(v_keys))
    union all
    select min(s.started_at + t.rate_period)
    from jobs_data.rate_starts as s
    join jobs_data.job_types as t on t.name = s.name
    where s.name = any(v_names) and t.rate_limit is not null
      and s.started_at + t.rate_period > p_now
  ) as x;
end
$$;

create function jobs.claim(
  worker_id text,
  queues    text[]   default array['default'],
  max_jobs  int      default 1,
  lease     interval default null,
  wait      interval default null,
  report_buried boolean default false,
  prefetch  boolean  default false
) returns setof jobs.claimed_job
language plpgsql volatile
as $$
declare
  v_now     timestamptz := jobs.clock();
  v_tenants text[] := jobs._tenants();  -- NULL: the role is bound to no tenant
  v_ids     uuid[];
  v_names   text[];
  v_bury    boolean[];
  v_buried  uuid[];           -- the candidates buried (or timed out), which take no slot
  v_limited boolean;
  v_lapsed  boolean;          -- a candidate is a lapsed lease: its attempt goes to jobs.attempts
  v_ended   bigint;           -- the lapsed leases whose attempts were ended
  v_free    uuid[];           -- the lapsed leases of prefetched jobs never started: given back
  v_updated bigint;           -- wait: the jobs this transaction had updated before a look
  v_fair_queues text[];       -- the fair queues among queues, and their fairness
  v_fair_modes  text[];
  v_policy_names text[];    -- each name among the candidates once, with its policy:
  v_leases       interval[];  -- the lease a claim of it gets
  v_dead_letter  boolean[];   -- where a burial of it ends
  v_timeouts     interval[];  -- the most an attempt of it may run (NULL: no limit)
  v_until   timestamptz;      -- wait: claim by then (clock_timestamp() time)
  v_seen    bigint[];         -- wait: the wake-up counters of the queues before a look
  v_limits  text[] := '{}';   -- wait: the wake-up keys of the limits that held back a look
  v_got     jobs.claimed_job[];  -- wait: what a look claimed
  v_held    text[];           -- wait: the wake-up keys of what a limit held back, and
  v_free_at timestamptz;      --   when a slot of those limits frees by time (jobs._held_back)
  v_limit   int;              -- limits: candidates per queue and kind in a later look
  v_skip    uuid[];           -- limits: candidates of earlier looks, held back or kept
  k_ids     uuid[];           -- limits: the candidates kept so far, and their policies
  k_names   text[];
  k_bury    boolean[];
  k_policy_names text[];
  k_leases       interval[];
  k_dead_letter  boolean[];
  k_timeouts     interval[];
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
  -- (The check's PERFORM is a statement of its own: a good lease, which every worker library
  -- passes, is told by an expression first.)
  if claim.lease <= interval '0' or claim.lease > interval '7 days' then
    perform jobs._check_interval('jobs.claim: lease', claim.lease, interval '7 days',
      'pass a lease longer than the time between heartbeats, or NULL for the job type''s policy; '
      'heartbeat to run longer');
  end if;
  if claim.wait is not null and claim.wait <> interval '0' then
    perform jobs._check_interval('jobs.claim: wait', claim.wait, interval '1 hour',
      'pass how long to wait for work, at most an hour (a waiting claim holds its transaction open), '
      'or NULL or 0 not to wait');
    -- Every look of a waiting claim needs a new snapshot; one taken for the whole transaction
    -- would sleep through every enqueue and answer nothing.
    if current_setting('transaction_isolation') <> 'read committed' then
      perform jobs._raise('PJ008',
        format('jobs.claim: wait needs READ COMMITTED; this transaction is %s',
               upper(current_setting('transaction_isolation'))),
        'claim with wait in its own statement or a READ COMMITTED transaction, or claim '
        'without wait (NULL or 0)');
    end if;
    v_until := clock_timestamp() + claim.wait;
  end if;

  -- With wait: each look is a claim without wait, in a subtransaction. When it claims nothing,
  -- the wait sleeps until a commit makes work in these queues, a job in them comes due, or the
  -- deadline passes (src/commit/wakeups.rs); then it looks again. When a limit held back everything
  -- the look found, the look is rolled back (its candidates and the limits' locks let go: a
  -- claim asleep holds nothing), and the wait is also woken by a slot of those limits that
  -- frees: a job of theirs that stops running, a holder's lease lapsing, a rate window's next
  -- start. A look that changed no job is rolled back as well (below); one that claimed,
  -- buried or put off a job keeps what it did.
  if v_until is not null then
    loop
      v_seen := jobs._work_seen(queues || v_limits);  -- before the look: no commit after it is missed
      v_held := null;
      v_free_at := null;
      v_updated := pg_stat_get_xact_tuples_updated('jobs_data.jobs'::regclass);
      begin
        v_got := array(select c from jobs.claim(worker_id, queues, max_jobs, claim.lease, null,
                                                 claim.report_buried, claim.prefetch) as c);
        if cardinality(v_got) = 0 then
          select h.keys, h.free_at into v_held, v_free_at
          from jobs._held_back(queues, v_tenants, v_now) as h;
          -- A look that changed no job is rolled back too, so that its transaction sleeps
          -- holding no row: in READ COMMITTED a FOR UPDATE that finds a row claimed since its
          -- snapshot locks the row's new version before it sees that the row no longer
          -- qualifies, and keeps that lock. Kept, it held the jobs another worker had just
          -- claimed, and that worker's settle waited out this whole wait.
          if v_held is not null or pg_stat_get_xact_tuples_updated('jobs_data.jobs'::regclass) = v_updated then
            raise exception using errcode = 'PJHLD', message = 'held back (never raised to a caller)';
          end if;
        end if;
      exception when sqlstate 'PJHLD' then
        null;  -- the look and its locks are rolled back
      end;
      if cardinality(v_got) > 0 then
        return query select * from unnest(v_got);
        return;
      end if;
      exit when clock_timestamp() >= v_until;
      if v_held is not null and not v_held <@ v_limits then
        -- Limits not yet watched: read their counters, then look again before sleeping.
        v_limits := v_held;
        continue;
      end if;
      perform jobs._await_work(queues || v_limits, v_seen,
        least(v_until, clock_timestamp() + (jobs._next_due(queues, v_now) - v_now),
              clock_timestamp() + (v_free_at - v_now)));
      v_now := jobs.clock();
    end loop;
    return;
  end if;
  -- A claim that is its transaction's only work commits without waiting for its WAL flush
  -- (pg_jobs.async_claims, src/commit/async_claims.rs): lost in a crash, its job is claimable again
  -- and its worker fenced out.
  perform jobs._async_if_alone('claim');

  -- The common case in one statement: every candidate found is a ready or due job of a queue
  -- without fairness, with no concurrency key, whose job type has no concurrency or rate
  -- limit and whose run is not over (no lapsed lease, no burial). Then the batch is the first
  -- max_jobs candidates in claim order, moved as below, with no look at limits; the same
  -- scans, locks, lease, deadline and token as the statements after it. If any candidate
  -- needs more, it moves nothing, and those statements look again (the candidates it locked
  -- stay this transaction's, so they find the same ones); if it found nothing, see below.
  return query
  with c as (
    select c.id, c.name, c.priority, c.run_at, c.slow
    from unnest(queues) with ordinality as q(queue, ord)
    left join lateral (select p.paused, p.fairness = 'none' as plain from jobs_data.queues as p
                       where p.queue = q.queue) as p on true
    cross join lateral (
      select * from (
        select j.id, j.name, j.priority, j.run_at,
               j.concurrency_key is not null or jobs._run_over(j.run_deadline, v_now) as slow
        from jobs_data.jobs j
        where j.queue = q.queue and j.state = 'ready'
          and (v_tenants is null or j.tenant_id = any(v_tenants))
          and p.plain is not false
        order by j.priority desc, j.run_at
        limit max_jobs for update skip locked) as ready
      union all
      select * from (
        select j.id, j.name, j.priority, j.run_at,
               j.concurrency_key is not null or jobs._run_over(j.run_deadline, v_now)
        from jobs_data.jobs j
        where j.queue = q.queue and j.state in ('delayed', 'suspended') and j.run_at <= v_now
          and (v_tenants is null or j.tenant_id = any(v_tenants))
          and p.plain is not false
        order by j.run_at
        limit max_jobs for update skip locked) as due
      union all
      select * from (
        select j.id, j.name, j.priority, j.run_at, true
        from jobs_data.jobs j
        where j.queue = q.queue and j.state = 'running' and j.lease_scan_at <= v_now
          and j.lease_expires_at <= v_now
          and (v_tenants is null or j.tenant_id = any(v_tenants))
        order by j.lease_scan_at
        limit max_jobs for update skip locked) as lapsed
      union all
      select null, null, null, null, true where p.plain is false  -- a fair queue: its turns
    ) as c
    where q.ord = array_position(queues, q.queue)  -- each queue once
      and p.paused is not true
  ),
  -- The policy of each name among the candidates, read once per name: a lookup per row (in the
  -- SET, in the answer, and for the limits) cost a claim of 500 prefetched jobs 5 to 10% of its time.
  p as (
    select p.* from (select distinct c.name from c) as d cross join lateral jobs._policy(d.name) as p
  ),
  moved as (
    update jobs_data.jobs as j set
      state = 'running', attempt = j.attempt + 1, claim = jobs._next_claim(j.claim),
      claimed_by = worker_id, claimed_at = v_now, finished_at = null, updated_at = v_now,
      started_at = case when not claim.prefetch then v_now end,
      -- (prefetched: no timeout until jobs.mark_started starts the attempt)
      lease = coalesce(claim.lease, p.lease),
      deadline = least(v_now + case when not claim.prefetch then coalesce(j.timeout, p.timeout) end,
                       j.run_deadline),
      lease_expires_at = least(v_now + coalesce(claim.lease, p.lease),
                               v_now + case when not claim.prefetch then coalesce(j.timeout, p.timeout) end,
                               j.run_deadline),
      lease_scan_at = least(v_now + coalesce(claim.lease, p.lease),
                            v_now + case when not claim.prefetch then coalesce(j.timeout, p.timeout) end,
                            j.run_deadline)
    from p
    where p.name = j.name
      -- The first max_jobs candidates, or none when one of them is slow; when it locked more
      -- than it moves, the claims that skipped them are woken at its commit (jobs._moving).
      -- (In a subquery: computed once, and the primary key's scan takes it as a key.)
      and j.id = any((select jobs._moving(array(select case when c.slow is not true then c.id end
                                                from c order by c.priority desc, c.run_at),
                                          max_jobs, queues))::uuid[])
      and not exists (select from p where p.concurrency is not null or p.rate_limit is not null)
      and j.state in ('ready', 'delayed', 'suspended')
    returning j.*, p.timeout as policy_timeout
  )
  select m.id, m.run_id, m.name, m.queue, m.payload, m.attempt, m.max_attempts, m.claim,
         m.lease_expires_at, m.tenant_id, m.priority, m.enqueued_at, m.last_error,
         -- prefetched: the deadline a start now would get
         case when claim.prefetch then least(v_now + coalesce(m.timeout, m.policy_timeout), m.run_deadline)
              else m.deadline end,
         m.parent_id, m.tags, m.meta, false
  from moved as m
  order by m.priority desc, m.run_at;
  if found then
    return;
  end if;
  -- Nothing moved. If the statement locked no row (its FOR UPDATE gives the transaction an id,
  -- so none here means no candidate, in a transaction that wrote nothing before) and no queue
  -- is fair (whose jobs it does not look at), the statements below would find nothing either.
  if pg_current_xact_id_if_assigned() is null
     and not exists (select from jobs_data.queues as p where p.queue = any(queues) and p.fairness <> 'none') then
    perform jobs._warn_unknown_queues(queues);  -- once per connection, for a queue never used
    return;
  end if;

  -- With limits: keep the candidates that fit, and while the batch is short because some were
  -- held back, look past them (no head-of-line blocking), up to 1,000 candidates in all.
  <<look>>
  loop
    -- One sort, then plain aggregates over the sorted rows. The queue's row (paused, fairness)
    -- is looked up per queue by primary key: a tiny table that, joined as a table, got a hash
    -- join over a sequential scan built on every call (measured: docs/BENCHMARKS.md). A fair
    -- queue's ready and due scans are skipped (their one-time conditions), and it answers one
    -- row without an id instead, which sends the claim to its turns below.
    select array_agg(c.id) filter (where c.id is not null),
           array_agg(c.name) filter (where c.id is not null),
           array_agg(c.bury) filter (where c.id is not null),
           coalesce(bool_or(c.concurrency_key is not null), false), bool_or(c.lapsed),
           array_agg(c.queue) filter (where c.id is null), array_agg(c.name) filter (where c.id is null)
      into v_ids, v_names, v_bury, v_limited, v_lapsed, v_fair_queues, v_fair_modes
    from (
      select c.id, c.name, c.bury, c.concurrency_key, c.lapsed, q.queue
      from unnest(queues) with ordinality as q(queue, ord)
      left join lateral (select p.paused, p.fairness, p.fairness = 'none' as plain from jobs_data.queues as p
                         where p.queue = q.queue) as p on true
      cross join lateral (
        select * from (
          select j.id, j.name, j.priority, j.run_at, j.concurrency_key,
                 jobs._run_over(j.run_deadline, v_now) as bury, false as lapsed
          from jobs_data.jobs j
          where j.queue = q.queue and j.state = 'ready'
            and (v_tenants is null or j.tenant_id = any(v_tenants))
            and p.plain is not false
          order by j.priority desc, j.run_at
          limit coalesce(v_limit, max_jobs) for update skip locked) as ready
        union all
        select * from (
          select j.id, j.name, j.priority, j.run_at, j.concurrency_key,
                 jobs._run_over(j.run_deadline, v_now), false
          from jobs_data.jobs j
          where j.queue = q.queue and j.state in ('delayed', 'suspended') and j.run_at <= v_now
            and (v_tenants is null or j.tenant_id = any(v_tenants))
            and p.plain is not false
          order by j.run_at
          limit coalesce(v_limit, max_jobs) for update skip locked) as due
        union all
        select * from (
          select j.id, j.name, j.priority, j.run_at, j.concurrency_key,
                 jobs._lapse_buries(j.attempt, j.max_attempts)
                   and not (j.started_at is null and jobs._lapse_gives_back(j.started_at, j.id))
                   or jobs._timed_out(j.lease_expires_at, j.deadline)
                   or jobs._run_over(j.run_deadline, v_now), true
          from jobs_data.jobs j
          where j.queue = q.queue and j.state = 'running' and j.lease_scan_at <= v_now
            and j.lease_expires_at <= v_now
            and (v_tenants is null or j.tenant_id = any(v_tenants))
          order by j.lease_scan_at
          limit coalesce(v_limit, max_jobs) for update skip locked) as lapsed
        union all
        select null, p.fairness, null, null, null, null, null where p.plain is false
      ) as c
      where q.ord = array_position(queues, q.queue)  -- each queue once
        and p.paused is not true
      order by c.priority desc, c.run_at
    ) as c;
    if v_fair_queues is not null then
      -- Fair queues: their turns (jobs._fair_ready, sql/fairness.sql), the first turn of each
      -- beside the other candidates in claim order, then the later turns. (A candidate found
      -- above that is still running is a lapsed lease, as below.)
      select array_agg(x.id order by x.turn, x.priority desc, x.run_at),
             array_agg(x.name order by x.turn, x.priority desc, x.run_at),
             array_agg(x.bury order by x.turn, x.priority desc, x.run_at),
             coalesce(bool_or(x.concurrency_key is not null), false), bool_or(x.lapsed)
        into v_ids, v_names, v_bury, v_limited, v_lapsed
      from (
        select j.id, j.name, u.bury, j.concurrency_key, j.priority, j.run_at, 1::bigint as turn,
               j.state = 'running' as lapsed
        from unnest(v_ids, v_bury) as u(id, bury)
        join jobs_data.jobs as j on j.id = u.id
        where j.id = any(v_ids)
        union all
        select f.id, f.name, f.bury, f.concurrency_key, f.priority, f.run_at, f.turn, false
        from unnest(v_fair_queues, v_fair_modes) as q(queue, fairness)
        cross join lateral jobs._fair_ready(q.queue, q.fairness, v_tenants, coalesce(v_limit, max_jobs), v_now) as f
      ) as x;
      v_fair_queues := null;
    end if;
    if v_skip is not null then
      -- A later look: its scan ran past the candidates of the earlier ones (which it locked,
      -- so they came back), and goes on from there. Nothing more: the batch is what was kept.
      select array_agg(u.id order by u.o), array_agg(u.name order by u.o), array_agg(u.bury order by u.o)
        into v_ids, v_names, v_bury
      from unnest(v_ids, v_names, v_bury) with ordinality as u(id, name, bury, o)
      where u.id <> all(v_skip);
      if v_ids is null then
        v_ids := k_ids; v_names := k_names; v_bury := k_bury; v_policy_names := k_policy_names;
        v_leases := k_leases; v_dead_letter := k_dead_letter; v_timeouts := k_timeouts;
        v_lapsed := true;  -- (some look may have had one)
        exit look;
      end if;
    elsif v_ids is null then
      exit look;
    end if;

    -- The policy of each name once per look, not per job: a lookup per row cost more than the
    -- rest of the claim's statement 1 at a batch of 10 (docs/BENCHMARKS.md).
    select array_agg(p.name), array_agg(coalesce(claim.lease, p.lease)), array_agg(p.dead_letter),
           array_agg(p.timeout),
           v_limited or coalesce(bool_or(p.concurrency is not null or p.rate_limit is not null), false)
      into v_policy_names, v_leases, v_dead_letter, v_timeouts, v_limited
    from (select distinct n.name from unnest(v_names) as n(name)) as d
    cross join lateral jobs._policy(d.name) as p;
    exit look when not (v_limited or v_skip is not null);  -- (a later look shares the batch)

    -- Limits: the candidates that fit (the first look waits for the limits' locks; a later
    -- one skips a limit another claimer holds, and the candidates under it with it).
    select k_ids || l.ids, k_names || l.names, k_bury || l.bury into k_ids, k_names, k_bury
    from jobs._within_limits(v_ids, v_names, v_bury, v_now,
                             max_jobs - coalesce(cardinality(array_remove(k_bury, true)), 0), v_skip is null,
                             k_ids, k_bury) as l;
    v_skip := coalesce(v_skip, '{}') || v_ids;
    k_policy_names := k_policy_names || v_policy_names; k_leases := k_leases || v_leases;
    k_dead_letter := k_dead_letter || v_dead_letter; k_timeouts := k_timeouts || v_timeouts;
    if coalesce(cardinality(array_remove(k_bury, true)), 0) >= max_jobs or cardinality(v_skip) >= 1000
       or coalesce(cardinality(k_ids), 0) = cardinality(v_skip) then  -- none held back
      v_ids := k_ids; v_names := k_names; v_bury := k_bury; v_policy_names := k_policy_names;
      v_leases := k_leases; v_dead_letter := k_dead_letter; v_timeouts := k_timeouts;
      v_lapsed := true;  -- (some look may have had one)
      exit look;
    end if;
    v_limit := cardinality(v_skip) + greatest(max_jobs, 100);
  end loop;

  if v_ids is null then
    perform jobs._warn_unknown_queues(queues);  -- once per connection, for a queue never used
    return;
  end if;
  if not v_limited and cardinality(v_ids) > max_jobs + coalesce(cardinality(array_positions(v_bury, true)), 0) then
    -- Candidates locked that this claim does not move (as in jobs._moving): the claims that
    -- skipped them are woken at its commit. (Not under limits: what a limit held back stays
    -- held back, and a claim woken for it would only look again.)
    perform jobs._signal_work(queues);
  end if;

  -- No join to the candidates: each row says what it is. A candidate still running is a lapsed
  -- lease (the ready and due scans find no running job, and the rows stay locked since
  -- statement 1). One on its final attempt is buried, and one whose attempt timed out is
  -- settled as a failed attempt (retried after the backoff, or buried on the final attempt),
  -- by a statement of its own that runs only when there is one. A join of the table to the
  -- arrays had its generic plan rescan the array for every row (max_jobs^2 comparisons).
  if true = any(v_bury) then
    -- Every burial among the candidates (all locked), and up to max_jobs of the others to
    -- start: a burial takes no slot of the batch. (When it took one, a claim of one job that
    -- found a lapsed final attempt first answered nothing, and a waiting claim slept through
    -- the ready job behind it until its wait ended.)
    select array_agg(u.id order by u.o) filter (where u.bury),
           (array_agg(u.id order by u.o) filter (where u.bury is not true))[1:max_jobs]
      into v_buried, v_ids
    from unnest(v_ids, v_bury) with ordinality as u(id, bury, o);
    -- The attempts that were running (a data-modifying statement's parts share one snapshot),
    -- asked of as hashed sets, not joined (see jobs.sweep): their rows in jobs.attempts.
    with ended as (
      select j.id, jobs._timed_out(j.lease_expires_at, j.deadline) as timed_out
      from jobs_data.jobs as j
      where j.id = any(v_buried) and j.state = 'running'
    ),
    settled as (
    update jobs_data.jobs as j set
      state = case when jobs._timed_out(j.lease_expires_at, j.deadline) and j.attempt < j.max_attempts
                        and not jobs._run_over(j.run_deadline, v_now)
                   then 'delayed'
                   else jobs._final_state(v_dead_letter[array_position(v_policy_names, j.name)]) end,
      run_at = case when jobs._timed_out(j.lease_expires_at, j.deadline) and j.attempt < j.max_attempts
                         and not jobs._run_over(j.run_deadline, v_now)
                    then v_now + (select jobs._backoff(p.backoff, p.backoff_base, p.backoff_max, p.jitter, j.attempt)
                                  from jobs._policy(j.name) as p)
                    else j.run_at end,
      finished_at = case when j.attempt >= j.max_attempts or jobs._run_over(j.run_deadline, v_now)
                         then v_now end,
      last_error = case when jobs._run_over(j.run_deadline, v_now)
                        then jobs._run_timeout_error(j.run_timeout, j.attempt, j.max_attempts)
                        when jobs._timed_out(j.lease_expires_at, j.deadline)
                        then jobs._timeout_error(
                               coalesce(j.timeout, v_timeouts[array_position(v_policy_names, j.name)]),
                               j.attempt, j.max_attempts)
                        else jobs._lapse_error(j.attempt, j.max_attempts) end,
      lease = null, lease_expires_at = null, lease_scan_at = null, updated_at = v_now
    where j.id = any(v_buried)
      and (j.state = 'running' and (jobs._lapse_buries(j.attempt, j.max_attempts)
                                    or jobs._timed_out(j.lease_expires_at, j.deadline))
           or jobs._run_over(j.run_deadline, v_now))  -- (the scans found it live)
    returning j.id, j.last_error, j.attempt, j.claimed_by, j.claimed_at,
              j.id in (select e.id from ended as e) as was_running,
              j.id in (select e.id from ended as e where e.timed_out) as timed_out,
              -- a job buried while waiting (its run over) ended no attempt
              case when j.id in (select e.id from ended as e)
                   then jobs._outcome_ended(j.queue, j.id, j.state,
                                            j.id in (select e.id from ended as e where e.timed_out))
                   else jobs._outcome(j.queue, j.state::text, j.id) end,
              jobs._slot_freed(j.name, j.concurrency_key)
    )
    insert into jobs_data.attempts (job_id, attempt, worker, claimed_at, finished_at, outcome, error)
    select s.id, s.attempt, s.claimed_by, s.claimed_at, v_now,
           case when s.timed_out then 'timed_out' else 'buried' end, s.last_error
    from settled as s
    where s.was_running;
    if claim.report_buried then
      -- The jobs this claim buried (not those it put off after a timeout), for the worker's
      -- onExhausted hook: rows marked buried, with no claim token to act on.
      return query
      select j.id, j.run_id, j.name, j.queue, j.payload, j.attempt, j.max_attempts, null::bigint,
             null::timestamptz, j.tenant_id, j.priority, j.enqueued_at, j.last_error, j.deadline,
             j.parent_id, j.tags, j.meta, true
      from jobs_data.jobs as j
      where j.id = any(v_buried) and j.state in ('dead', 'failed') and j.finished_at = v_now;
    end if;
  end if;

  if v_lapsed then
    -- A lapsed lease claimed again ends its attempt: its row in jobs.attempts, from the row as
    -- it is (locked since statement 1). A statement of its own, run only when a candidate was
    -- one: an INSERT set up in every claim opened jobs.attempts and its indexes each time.
    -- A prefetched job that never started is given back instead: its attempt is not used
    -- (jobs._lapse_gives_back), and the claim below counts the same attempt again.
    -- (The statement's snapshot does not see the rows it inserts: each job's given-back rows
    -- are counted as they were before it.)
    with lapsed as (
      insert into jobs_data.attempts (job_id, attempt, worker, claimed_at, finished_at, outcome, error)
      select j.id, j.attempt, j.claimed_by, j.claimed_at, v_now,
             case when j.free then 'not_started' else 'lease_lapsed' end,
             case when j.free then jobs._not_started_error(j.claimed_by)
                  else jobs._lapse_error(j.attempt, j.max_attempts) end
      from (select j.id, j.attempt, j.max_attempts, j.claimed_by, j.claimed_at,
                   j.started_at is null and jobs._lapse_gives_back(j.started_at, j.id) as free
            from jobs_data.jobs as j
            where j.id = any(v_ids[1:max_jobs]) and j.state = 'running') as j
      returning job_id, outcome,
                jobs._outcome((select q.queue from jobs_data.jobs as q where q.id = job_id), 'lease_lapsed')
    )
    select count(*), array_agg(l.job_id) filter (where l.outcome = 'not_started') into v_ended, v_free
    from lapsed as l;
  end if;

  return query
  -- A timeout caps the lease: no lease, heartbeat or write runs past the deadline.
  with moved as (
    update jobs_data.jobs as j set
      state = 'running', attempt = j.attempt + case when j.id = any(v_free) then 0 else 1 end,
      claim = jobs._next_claim(j.claim),
      lease = v_leases[array_position(v_policy_names, j.name)],
      -- (least() skips NULLs: no timeout and no run deadline, no deadline; prefetched, no
      -- timeout until jobs.mark_started)
      deadline = least(v_now + case when not claim.prefetch
                                    then coalesce(j.timeout, v_timeouts[array_position(v_policy_names, j.name)]) end,
                       j.run_deadline),
      lease_expires_at = least(v_now + v_leases[array_position(v_policy_names, j.name)],
                               v_now + case when not claim.prefetch
                                            then coalesce(j.timeout, v_timeouts[array_position(v_policy_names, j.name)]) end,
                               j.run_deadline),
      lease_scan_at = least(v_now + v_leases[array_position(v_policy_names, j.name)],
                            v_now + case when not claim.prefetch
                                         then coalesce(j.timeout, v_timeouts[array_position(v_policy_names, j.name)]) end,
                            j.run_deadline),
      claimed_by = worker_id, claimed_at = v_now, finished_at = null,
      started_at = case when not claim.prefetch then v_now end,
      last_error = case when j.state <> 'running' then j.last_error
                        when j.id = any(v_free) then jobs._not_started_error(j.claimed_by)
                        else jobs._lapse_error(j.attempt, j.max_attempts) end,
      updated_at = v_now
    where j.id = any(v_ids[1:max_jobs])
      -- not the ones just buried, nor a timed-out one just put off until its backoff
      and j.state in ('ready', 'delayed', 'suspended', 'running')
      and (j.state <> 'delayed' or j.run_at <= v_now)
    returning j.*
  )
  select m.id, m.run_id, m.name, m.queue, m.payload, m.attempt, m.max_attempts, m.claim,
         m.lease_expires_at, m.tenant_id, m.priority, m.enqueued_at, m.last_error,
         case when claim.prefetch
              then least(v_now + coalesce(m.timeout, v_timeouts[array_position(v_policy_names, m.name)]),
                         m.run_deadline)
              else m.deadline end,
         m.parent_id, m.tags, m.meta, false
  from moved as m
  order by m.priority desc, m.run_at;
end
$$;
comment on function jobs.claim(text, text[], int, interval, interval, boolean, boolean) is
  'Claim up to max_jobs jobs from queues under a lease: highest priority, then oldest run_at. '
  'Each comes with a claim token that every later write for it must present. With wait, '
  'sleep up to that long for work when none is claimable. With report_buried, the jobs the '
  'claim buried (their final attempt lapsed, or their run is over) come too, marked buried. '
  'With prefetch, the jobs are held for a worker''s local queue: each starts at '
  'jobs.mark_started, and one whose lease lapses before it started is given back, no attempt used.';
