-- Housekeeping: jobs.sweep(), the background worker's pass, callable by hand.
--
-- Each task handles at most max_rows rows (retention: any of those past it; the others: oldest
-- first), and skips rows other transactions
-- hold (SKIP LOCKED), so a pass never waits on a worker and never holds many locks for long.
-- The background worker runs passes back to back while any task fills its batch.
--   lapsed_leases    running jobs whose lease lapsed: back to ready with attempts left, buried
--                    (dead / failed) on the final attempt; the claim's own transition
--                    (jobs._lapse_buries, jobs._lapse_error, jobs._final_state)
--   waiter_timeouts  jobs waiting on an event whose timeout passed: ready (claim would take
--                    them anyway once due; this makes the state say so)
--   run_timeouts     waiting jobs whose run is over (run_timeout): buried
--   ordering_turns   ordering keys whose current job ended while an enqueue held the key: the
--                    next job starts (and each key is checked at most hourly)
--   fair_groups      queues whose fairness changed: once the transactions open at the change
--                    have ended, their live jobs out of step get their group
--   expired_events   events past expires_at deleted (they were invisible already)
--   completed_deleted, dead_deleted
--                    finished jobs past pg_jobs.completed_retention (completed, cancelled) or
--                    pg_jobs.dead_retention (failed, dead) deleted
--   steps_deleted    the steps of runs that no longer have any job
--   queues_deleted   at most hourly: jobs.queues rows of queues with no job, not paused, not
--                    fair (the row holds the setting)
-- Correctness never waits for a sweep: an expired event is invisible before it is deleted, and
-- a lapsed lease or a due waiter is claimable before it is swept.

-- Whether a job's parent is live: then it may run again and spawn the child's key again, which
-- must give back the same child, its result with it. Retention keeps such a child, whatever its
-- age; the family goes once its parent has finished (and so on up to its root).
create function jobs._parent_live(p_parent uuid)
returns boolean
language sql stable
begin atomic
  select exists (select from jobs_data.jobs as p
                 where p.id = p_parent and p.state in ('ready', 'delayed', 'running', 'suspended'));
end;

-- Deletes up to p_max jobs in p_states that finished before p_before, and the steps of the
-- runs it left with no job. Only the roots of families are walked (jobs no job spawned): a
-- root goes with its descendants, every one finished (a root whose family has a live member
-- waits), so the finished children a live parent keeps are never read by a pass, however
-- many there are (one tenant's 100,000 kept children made every pass, and every 8th
-- settle of any tenant, walk them all). A child is so kept as long as the root of its family.
-- Called by jobs.sweep for retention, and by jobs.complete and jobs.complete_many for a share
-- of it (see there). It never waits on another transaction:
--   - job rows others hold are skipped (FOR UPDATE SKIP LOCKED), roots picked oldest first per
--     state, by ctid (see jobs.sweep), and a family any of whose rows another holds waits; the literal state list lets the planner use jobs_finished_idx,
--     whose predicate it is;
--   - a run's steps go with its last job, and two transactions deleting a run's last two jobs
--     would each still see the other's job and leave the steps behind. So the steps of a run
--     are locked before any of its jobs is deleted here, and a run whose steps another
--     transaction holds (a settle idle in its transaction, another prune) keeps its jobs until
--     a later pass: the locks are taken with SKIP LOCKED, and a run with fewer steps locked
--     than it has is left alone. Whoever deletes a run's job holds its steps until it commits,
--     so the last deleter, in a later statement, sees every other deletion.
create function jobs._prune(p_states jobs.job_state[], p_before timestamptz, p_max int,
                            out jobs_deleted bigint, out steps_deleted bigint)
language plpgsql volatile
as $$
declare
  v_runs   uuid[] := '{}';
  v_ctids  tid[];
  v_ids    uuid[];
  v_roots  uuid[];
  v_f_root uuid[];  -- the families of the roots that spawned jobs: each descendant's root,
  v_f_ctid tid[];   -- row,
  v_f_id   uuid[];  -- id,
  v_f_run  uuid[];  -- run,
  v_f_live boolean[];  -- and whether it is live or has live children
  v_held   uuid[];
  v_cands  uuid[];
  v_locked uuid[];
  v_busy   uuid[];
  v_part   uuid[];
  v_n      bigint;
  v_state  jobs.job_state;
begin
  jobs_deleted := 0;
  -- One state at a time, oldest first: the order jobs_finished_idx keeps (its roots apart from
  -- its children), so every plan of this statement walks that index from its oldest root and
  -- stops at the first one inside retention. Without the ORDER BY, a generic plan costed
  -- finished_at < $2 at a third of the rows, preferred a sequential scan with a LIMIT, and
  -- read every row of a large history on every pass (claims with 1M finished rows ran at
  -- 0.65x those with none; 0.95x without).
  foreach v_state in array p_states loop
    select array_agg(f.ctid), array_agg(f.id), array_agg(f.id) filter (where f.children_live is not null),
           array_agg(distinct f.run_id) into v_ctids, v_ids, v_roots, v_cands
    from (select f.ctid, f.id, f.run_id, f.children_live from jobs_data.jobs as f
          where f.state in ('completed', 'failed', 'dead', 'cancelled') and f.state = v_state
            and f.parent_id is null
            and f.finished_at < p_before
            and coalesce(f.children_live, 0) = 0
          order by f.state, (f.parent_id is null), f.finished_at
          limit p_max - jobs_deleted for update skip locked) as f;
    continue when v_ctids is null;
    if v_roots is not null then
      -- The descendants of the roots that spawned any go with them. A root waits while a
      -- descendant is live (an 'abandon' child still running) or another transaction holds one.
      with recursive d (root, id) as (
        select c.parent_id, c.id from jobs_data.jobs as c
        where c.parent_id = any(v_roots) and c.parent_id is not null
        union all
        select d.root, c.id from d join jobs_data.jobs as c on c.parent_id = d.id
        where c.parent_id is not null)
      select array_agg(d.root), array_agg(c.ctid), array_agg(c.id), array_agg(c.run_id),
             array_agg(c.state in ('ready', 'delayed', 'running', 'suspended') or coalesce(c.children_live, 0) > 0)
      into v_f_root, v_f_ctid, v_f_id, v_f_run, v_f_live
      from d join jobs_data.jobs as c on c.id = d.id;
      if v_f_id is not null then
        v_held := array(select x.id from jobs_data.jobs as x where x.id = any(v_f_id)
                        order by x.id for update skip locked);
        v_roots := array(select distinct t.root from unnest(v_f_root, v_f_id, v_f_live) as t(root, id, live)
                         where t.live or t.id <> all(v_held));
        select array_agg(t.ctid), array_agg(t.id) into v_ctids, v_ids
        from unnest(v_ctids, v_ids) as t(ctid, id) where t.id <> all(v_roots);
        v_ctids := coalesce(v_ctids, '{}') || array(select t.ctid from unnest(v_f_root, v_f_ctid) as t(root, ctid)
                                                    where t.root <> all(v_roots));
        v_cands := v_cands || array(select distinct t.run from unnest(v_f_root, v_f_run) as t(root, run)
                                    where t.root <> all(v_roots));
      end if;
    end if;
    v_locked := array(select s.run_id from jobs_data.steps as s where s.run_id = any(v_cands)
                      order by s.run_id, s.seq for update skip locked);
    select coalesce(array_agg(b.run_id), '{}') into v_busy
    from (select s.run_id from jobs_data.steps as s where s.run_id = any(v_cands)
          group by s.run_id
          having count(*) > (select count(*) from unnest(v_locked) as l(run_id)
                             where l.run_id = s.run_id)) as b;
    with gone as (
      delete from jobs_data.jobs as j
      where j.ctid = any(v_ctids) and j.run_id <> all(v_busy)
      returning j.id, j.run_id, j.last_error is not null as tried
    ),
    tried as (  -- their attempts (only a job that failed one has any)
      delete from jobs_data.attempts as a
      where a.job_id = any(array(select g.id from gone as g where g.tried))
    )
    select coalesce(array_agg(distinct g.run_id), '{}'), count(*) into v_part, v_n from gone as g;
    v_runs := v_runs || v_part;
    jobs_deleted := jobs_deleted + v_n;
    exit when jobs_deleted >= p_max;
  end loop;
  steps_deleted := 0;
  if jobs_deleted > 0 then
    -- The steps of those runs are locked already (above); a new statement sees every job
    -- deleted by whoever held them before.
    delete from jobs_data.steps as s
    where s.run_id = any(v_runs)
      and not exists (select from jobs_data.jobs as j where j.id = s.run_id)
      and not exists (select from jobs_data.jobs as j where j.run_id = s.run_id and j.run_id <> j.id);
    get diagnostics steps_deleted = row_count;
  end if;
end
$$;

create function jobs.sweep(max_rows int default 1000)
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
  -- A lease that ran out at the attempt's deadline is a timeout: a failed attempt, retried
  -- after the job type's backoff (or buried on the final attempt). Any other lapse runs again
  -- at once (or is buried on the final attempt); a prefetched job that never started is given
  -- back, its attempt not used (jobs._lapse_gives_back). Each gets its row in jobs.attempts
  -- (of the columns it reads, only the attempt given back is changed here). Nothing joins `ended` to
  -- `settled`: planned from statistics that see few lapsed leases (the usual case), such a
  -- join was a nested loop, and a pass of 5,000 took seconds. Whether an attempt timed out
  -- is asked of a hashed set instead.
  with ended as (
    select l.ctid, l.id, jobs._timed_out(l.lease_expires_at, l.deadline) as timed_out,
           l.started_at is null and jobs._lapse_gives_back(l.started_at, l.id) as given_back
    from jobs_data.jobs as l
    where l.state = 'running' and l.lease_scan_at <= v_now and l.lease_expires_at <= v_now
    order by l.lease_scan_at limit max_rows for update skip locked
  ),
  given as (select e.id from ended as e where e.given_back),  -- (read once: usually none)
  settled as (
  update jobs_data.jobs as j set
    state = case when jobs._run_over(j.run_deadline, v_now)
                 then jobs._final_state((select p.dead_letter from jobs._policy(j.name) as p))
                 when j.id in (select g.id from given as g)
                 then 'ready'
                 when jobs._timed_out(j.lease_expires_at, j.deadline) and j.attempt < j.max_attempts
                 then 'delayed'
                 when jobs._lapse_buries(j.attempt, j.max_attempts)
                 then jobs._final_state((select p.dead_letter from jobs._policy(j.name) as p))
                 else 'ready' end,
    -- a prefetched job never started: its attempt is given back (jobs._lapse_gives_back)
    attempt = j.attempt - case when j.id in (select g.id from given as g)
                                    and not jobs._run_over(j.run_deadline, v_now) then 1 else 0 end,
    run_at = case when jobs._timed_out(j.lease_expires_at, j.deadline) and j.attempt < j.max_attempts
                       and not jobs._run_over(j.run_deadline, v_now)
                  then v_now + (select jobs._backoff(p.backoff, p.backoff_base, p.backoff_max, p.jitter, j.attempt)
                                from jobs._policy(j.name) as p)
                  else j.run_at end,
    lease_expires_at = null,
    last_error = case when jobs._run_over(j.run_deadline, v_now)
                      then jobs._run_timeout_error(j.run_timeout, j.attempt, j.max_attempts)
                      when j.id in (select g.id from given as g)
                      then jobs._not_started_error(j.claimed_by)
                      when jobs._timed_out(j.lease_expires_at, j.deadline)
                      then jobs._timeout_error(
                             coalesce(j.timeout, (select p.timeout from jobs._policy(j.name) as p)),
                             j.attempt, j.max_attempts)
                      else jobs._lapse_error(j.attempt, j.max_attempts) end,
    finished_at = case when jobs._run_over(j.run_deadline, v_now)
                            or jobs._lapse_buries(j.attempt, j.max_attempts)
                               and j.id not in (select g.id from given as g) then v_now end,
    updated_at = v_now
  where j.ctid = any(array(select e.ctid from ended as e))
    and j.state = 'running'
  returning j.id, j.state, j.last_error, j.attempt, j.max_attempts, j.claimed_by, j.claimed_at,
            j.id in (select e.id from ended as e where e.timed_out) as timed_out,
            j.id in (select g.id from given as g) and j.state = 'ready' as given_back,
            jobs._outcome_ended(j.queue, j.id, j.state, j.id in (select e.id from ended as e where e.timed_out)),
            jobs._slot_freed(j.name, j.concurrency_key)
  ),
  noted as (
    insert into jobs_data.attempts (job_id, attempt, worker, claimed_at, finished_at, outcome, error)
    select s.id, s.attempt + case when s.given_back then 1 else 0 end, s.claimed_by, s.claimed_at, v_now,
           case when s.given_back then 'not_started'
                when s.timed_out then 'timed_out'
                when s.attempt >= s.max_attempts or s.state in ('dead', 'failed') then 'buried'
                else 'lease_lapsed' end,
           s.last_error
    from settled as s
  )
  select count(*) into v_n from settled;
  task := 'lapsed_leases'; affected := v_n; return next;

  update jobs_data.jobs as j set state = 'ready', updated_at = v_now
  where j.ctid = any(array(
      select w.ctid from jobs_data.jobs as w
      where w.state = 'suspended' and w.wait_event is not null and w.wait_until <= v_now
      order by w.wait_until limit max_rows for update skip locked))
    and j.state = 'suspended';
  get diagnostics v_n = row_count;
  task := 'waiter_timeouts'; affected := v_n; return next;

  -- Runs that are over (run_timeout) while waiting: buried, whatever attempts are left (a
  -- claim would bury them too, once due; this also ends those that never come due). A
  -- running one's lease ends at its run deadline, and the first task buries it.
  with buried as (
    update jobs_data.jobs as j set
      state = jobs._final_state((select p.dead_letter from jobs._policy(j.name) as p)),
      last_error = jobs._run_timeout_error(j.run_timeout, j.attempt, j.max_attempts),
      finished_at = v_now, updated_at = v_now
    where j.ctid = any(array(
        select r.ctid from jobs_data.jobs as r
        where r.run_deadline <= v_now and r.run_deadline is not null
          and r.state in ('ready', 'delayed', 'suspended')
        order by r.run_deadline limit max_rows for update skip locked))
      and j.state in ('ready', 'delayed', 'suspended')
    returning jobs._outcome(j.queue, j.state::text, j.id)
  )
  select count(*) into v_n from buried;
  task := 'run_timeouts'; affected := v_n; return next;

  -- Ordering keys whose current job ended while an enqueue of the key held it (sql/ordering.sql).
  task := 'ordering_turns'; affected := jobs._ordering_sweep(max_rows); return next;

  -- Queues whose fairness changed: their stragglers regrouped (sql/fairness.sql).
  task := 'fair_groups'; affected := jobs._fair_sweep(max_rows); return next;

  delete from jobs_data.events as e
  where e.ctid = any(array(
      select x.ctid from jobs_data.events as x where x.expires_at <= v_now
      order by x.expires_at limit max_rows for update skip locked));
  get diagnostics v_n = row_count;
  task := 'expired_events'; affected := v_n; return next;

  -- Starts of rate-limited jobs that left their window (the claims delete those of the names
  -- they claim; these are of names not claimed since, or no longer limited).
  delete from jobs_data.rate_starts as r
  where r.ctid = any(array(
      select x.ctid from jobs_data.rate_starts as x
      left join jobs_data.job_types as t on t.name = x.name
      where t.rate_limit is null or x.started_at <= v_now - t.rate_period
      limit max_rows for update of x skip locked));
  get diagnostics v_n = row_count;
  task := 'rate_starts_deleted'; affected := v_n; return next;

  -- Recurring schedules (sql/schedules.sql): each due slot enqueued once.
  select count(*) into v_n from jobs.run_schedules(least(max_rows, 10000));
  task := 'schedules_enqueued'; affected := v_n; return next;

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

  -- The queue registry: at most once an hour (the first sweep to find the hour passed takes
  -- the row, skipping it if another holds it), queues with no job at all, not paused, not fair
  -- and not 'default', are deleted; enqueue registers a queue again when it is next used. Finding the
  -- queues that have jobs reads the whole table once, so sequentially (this function turns
  -- sequential scans off for its index walks, and back off after).
  update jobs_data.maintenance as m set queues_pruned_at = v_now
  where m.ctid = any(array(
      select x.ctid from jobs_data.maintenance as x
      where x.queues_pruned_at is null or x.queues_pruned_at <= v_now - interval '1 hour'
      for update skip locked));
  v_n := 0;
  if found then
    perform set_config('enable_seqscan', 'on', true);
    delete from jobs_data.queues as q
    where q.ctid = any(array(
        select x.ctid from jobs_data.queues as x
        where not x.paused and x.fairness = 'none' and x.queue <> 'default'
          and x.queue not in (select j.queue from jobs_data.jobs as j)
        limit max_rows for update skip locked));
    get diagnostics v_n = row_count;
    perform set_config('enable_seqscan', 'off', true);
  end if;
  task := 'queues_deleted'; affected := v_n; return next;

  -- Moves of children's counts that a sweep made while another transaction held the parent
  -- (jobs._family_apply in the sweeper): applied to the parents free now.
  task := 'family_moves_applied'; affected := jobs._family_pending_apply(max_rows); return next;
end
$$;
comment on function jobs.sweep(int) is
  'One housekeeping pass, as the background worker runs it: lapsed leases, waiter timeouts, '
  'expired events, due schedules, old rate-limit starts, retention, children''s counts left for later. Each task handles at '
  'most max_rows rows. Answers (task, affected).';

-- Whether jobs_data.jobs has as many dead row versions as autovacuum waits for before it vacuums a
-- table (the table's autovacuum settings, else the server's), with autovacuum on for it. The
-- background worker asks every pg_jobs.vacuum_interval and, if so, vacuums the table itself:
-- autovacuum visits a database once per autovacuum_naptime, and a busy queue leaves a
-- minute's dead versions behind in between. A table with autovacuum_enabled = false, or a
-- server with autovacuum off, is left to whoever turned it off.
create function jobs._vacuum_due()
returns boolean
language sql stable
begin atomic
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
  where c.oid = 'jobs_data.jobs'::regclass;
end;
