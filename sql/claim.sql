-- Working: jobs.claim, the one statement that hands out jobs.
--
-- For each requested (unpaused) queue, three bounded index range scans find candidates, each
-- at most max_jobs rows, skipping rows other claimers hold (FOR UPDATE SKIP LOCKED):
--   jobs_ready_idx  ready jobs, already in claim order (priority desc, run_at)
--   jobs_due_idx    delayed and suspended jobs whose run_at has passed, oldest first
--   jobs_lease_idx  running jobs whose lease lapsed, oldest lapse first
-- The candidates (at most 3 * max_jobs per queue) are merged by priority desc, run_at and cut
-- to max_jobs; a candidate cut here stays locked, unclaimed, until the claim's transaction ends.
-- Neither backlog nor finished history is read, so the cost of a claim does not grow with them.
--
-- A lapsed lease with attempts left becomes a new attempt. A lapse on the final attempt is
-- BURIED by the claim (dead, or failed where the job type does not dead-letter) and never
-- handed out: a job that kills its worker every time reaches the dead letters instead of
-- killing one worker per lease forever.

create function jobs.claim(
  worker_id text,
  queues    text[]   default array['default'],
  max_jobs  int      default 1,
  lease     interval default null
) returns setof jobs.claimed_job
language plpgsql volatile
as $$
declare
  v_now timestamptz := jobs.clock();
begin
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
    perform jobs._raise('22004', 'jobs.claim: max_jobs must not be NULL', 'pass a batch size from 1 to 1000');
  elsif max_jobs not between 1 and 1000 then
    perform jobs._raise('22023', 'jobs.claim: max_jobs must be 1 to 1000, got ' || max_jobs,
      'pass a batch size from 1 to 1000');
  elsif lease is not null and lease <= interval '0' then
    perform jobs._raise('22023', 'jobs.claim: lease must be positive, got ' || lease,
      'pass a lease longer than the time between heartbeats, or NULL for the job type''s policy');
  end if;

  return query
  with candidates as materialized (
    select c.id, c.name, c.priority, c.run_at, c.lapsed, c.bury
    from (select distinct q.queue from unnest(queues) as q(queue)) as q
    cross join lateral (
      select * from (
        select j.id, j.name, j.priority, j.run_at, false as lapsed, false as bury from jobs.jobs j
        where j.queue = q.queue and j.state = 'ready'
        order by j.priority desc, j.run_at
        limit max_jobs for update skip locked) as ready
      union all
      select * from (
        select j.id, j.name, j.priority, j.run_at, false, false from jobs.jobs j
        where j.queue = q.queue and j.state in ('delayed', 'suspended') and j.run_at <= v_now
        order by j.run_at
        limit max_jobs for update skip locked) as due
      union all
      select * from (
        select j.id, j.name, j.priority, j.run_at, true,
               jobs._lapse_buries(j.attempt, j.max_attempts) from jobs.jobs j
        where j.queue = q.queue and j.state = 'running' and j.lease_expires_at <= v_now
        order by j.lease_expires_at
        limit max_jobs for update skip locked) as lapsed
    ) as c
    where not exists (select from jobs.queues p where p.queue = q.queue and p.paused)
    order by c.priority desc, c.run_at
    limit max_jobs
  ),
  moved as (
    update jobs.jobs as j set
      state = case when c.bury then jobs._final_state(p.dead_letter) else 'running' end,
      attempt = case when c.bury then j.attempt else j.attempt + 1 end,
      claim = case when c.bury then j.claim else j.claim + 1 end,
      lease = case when c.bury then null else coalesce(claim.lease, p.lease) end,
      lease_expires_at = case when c.bury then null else v_now + coalesce(claim.lease, p.lease) end,
      claimed_by = case when c.bury then j.claimed_by else worker_id end,
      last_error = case when c.lapsed then jobs._lapse_error(j.attempt, j.max_attempts)
                   else j.last_error end,
      finished_at = case when c.bury then v_now end,
      updated_at = v_now
    from candidates as c
    cross join lateral jobs._policy(c.name) as p
    where j.id = c.id
    returning j.*
  )
  select m.id, m.run_id, m.name, m.queue, m.payload, m.attempt, m.max_attempts, m.claim,
         m.lease_expires_at, m.tenant_id, m.priority, m.enqueued_at, m.last_error
  from moved as m
  where m.state = 'running'
  order by m.priority desc, m.run_at;
end
$$;
comment on function jobs.claim(text, text[], int, interval) is
  'Claim up to max_jobs jobs from queues under a lease: highest priority, then oldest run_at. '
  'Each comes with a claim token that every later write for it must present.';
