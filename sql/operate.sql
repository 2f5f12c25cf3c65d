-- Operating: jobs.cancel, jobs.requeue, jobs.promote, jobs.delete.
--
-- Each is one UPDATE that moves the job only from the states it accepts; when it moves
-- nothing, jobs._refuse tells why: no such job (job_not_found), or the state it is in.
-- Cancel and requeue advance the claim token, so a worker still holding the old one can
-- change nothing.

-- A role bound to tenants (a tenant admin) operates on its tenants' jobs only: any other job
-- is no job to it, as an unknown id is. Called first, before anything is read or moved; a
-- job's tenant never changes.
create function jobs._check_tenant_job(p_fn text, p_id uuid)
returns void
language plpgsql stable
as $$
declare
  v_tenants text[] := jobs._tenants();  -- NULL: the role is bound to no tenant
begin
  if v_tenants is not null
     and not exists (select from jobs_data.jobs as j where j.id = p_id and j.tenant_id = any(v_tenants)) then
    perform jobs._raise('PJ003', format('%s: no job has id %s', p_fn, p_id),
      'check the id; finished jobs are deleted after their retention period');
  end if;
end
$$;

-- Raises job_not_found, or p_code with the job's state and p_rule, for a call that moved nothing.
create function jobs._refuse(p_fn text, p_id uuid, p_code text, p_rule text, p_hint text)
returns void
language plpgsql stable
as $$
declare
  v_state jobs.job_state;
begin
  select j.state into v_state from jobs_data.jobs as j where j.id = p_id;
  if not found then
    perform jobs._raise('PJ003', format('%s: no job has id %s', p_fn, p_id),
      'check the id; finished jobs are deleted after their retention period');
  end if;
  -- The fix depends on the state the job is in; p_hint where one fix fits every state.
  perform jobs._raise(p_code, format('%s: job %s is %s; %s', p_fn, p_id, v_state, p_rule),
    case
      when p_fn = 'jobs.promote' and v_state = 'ready' then 'a ready job is claimable already'
      when p_fn = 'jobs.promote' and v_state = 'running' then 'it is running already'
      when p_fn = 'jobs.promote' and v_state = 'suspended' then
        'it waits for an event or for its children: publish the event, or cancel the job'
      when p_fn = 'jobs.promote' then 'it has finished; jobs.requeue runs it again'
      when p_fn = 'jobs.requeue' and v_state = 'ready' then 'it waits to be claimed already'
      when p_fn = 'jobs.requeue' and v_state = 'delayed' then
        'it waits for its run_at; jobs.promote makes it ready now'
      when p_fn = 'jobs.requeue' then 'it is live; cancel it first to requeue it'
      else p_hint
    end);
end
$$;

create function jobs.cancel(id uuid)
returns boolean
language plpgsql volatile
as $$
declare
  v_now     timestamptz := jobs.clock();
  v_counted boolean;
begin
  if cancel.id is null then
    perform jobs._raise('22004', 'jobs.cancel: id must not be NULL', 'pass the id of the job to cancel');
  end if;
  perform jobs._check_tenant_job('jobs.cancel', cancel.id);
  update jobs_data.jobs as j set
    state = 'cancelled', claim = jobs._next_claim(j.claim), lease_expires_at = null,
    wait_event = null, wait_key = null, wait_until = null,
    finished_at = v_now,
    -- A running job's holder is told on pg_jobs_cancel (src/commit/outcomes.rs), from the row as
    -- this update takes it.
    updated_at = jobs._cancelling(j.id, j.state = 'running', v_now)
  where j.id = cancel.id and j.state in ('ready', 'delayed', 'running', 'suspended')
  returning jobs._outcome(j.queue, 'cancelled') and jobs._slot_freed(j.name, j.concurrency_key) into v_counted;
  if not found then
    perform jobs._refuse('jobs.cancel', cancel.id, 'PJ005',
      'only live jobs (ready, delayed, running, suspended) can be cancelled',
      'a finished job stays as it ended; use jobs.requeue to run it again');
  end if;
  return true;
end
$$;
comment on function jobs.cancel(uuid) is
  'Cancel a live job; a running holder loses its claim. Raises not_cancellable for finished jobs';

create function jobs.requeue(id uuid, from_step text default null)
returns boolean
language plpgsql volatile
as $$
declare
  v_now   timestamptz := jobs.clock();
  v_seq   bigint;
  v_queue text;
  v_key   record;
  v_wait  boolean := false;  -- it waits behind a live job of its ordering key
begin
  if requeue.id is null then
    perform jobs._raise('22004', 'jobs.requeue: id must not be NULL', 'pass the id of the job to requeue');
  end if;
  perform jobs._check_tenant_job('jobs.requeue', requeue.id);
  if requeue.from_step is not null then
    select s.seq into v_seq
    from jobs_data.jobs as j join jobs_data.steps as s on s.run_id = j.run_id and s.step = requeue.from_step
    where j.id = requeue.id;
    if v_seq is null and exists (select from jobs_data.jobs as j where j.id = requeue.id
                                 and j.state in ('failed', 'dead', 'cancelled', 'completed')) then
      perform jobs._raise('22023', format('jobs.requeue: the run of job %s has no step %L',
        requeue.id, requeue.from_step),
        'pass a step name from jobs.steps for this run_id, or NULL to keep every step');
    end if;
  end if;

  -- A job with an ordering key goes back behind its key's live jobs, if it has any (under the
  -- key's lock, as an enqueue: sql/ordering.sql).
  select j.queue, coalesce(j.tenant_id, '') as tenant, j.ordering_key as key into v_key
  from jobs_data.jobs as j where j.id = requeue.id and j.ordering_key is not null;
  if v_key.key is not null then
    perform jobs._ordering_lock(array[v_key.queue], array[v_key.tenant], array[v_key.key]);
    v_wait := jobs._ordering_live(v_key.queue, v_key.tenant, v_key.key);
  end if;

  begin
    -- One statement moves the job and drops the steps, so a refused requeue deletes nothing.
    with moved as (
      update jobs_data.jobs as j set
        state = case when v_wait then 'delayed' else 'ready' end::jobs.job_state,
        attempt = 0, claim = jobs._next_claim(j.claim),
        run_at = case when v_wait then 'infinity' else v_now end,
        lease_expires_at = null, result = null, finished_at = null,
        wait_event = null, wait_key = null, wait_until = null, updated_at = v_now,
        run_deadline = v_now + j.run_timeout,  -- a new run gets its run_timeout again
        fair_group = jobs._fair_group((select q.fairness from jobs_data.queues as q where q.queue = j.queue),
                                      j.tenant_id, j.concurrency_key)  -- (its queue's now)
      where j.id = requeue.id and j.state in ('failed', 'dead', 'cancelled', 'completed')
      returning j.run_id, j.queue
    ), dropped as (
      delete from jobs_data.steps as s using moved as m
      where v_seq is not null and s.run_id = m.run_id and s.seq >= v_seq
    )
    select count(*), min(m.queue) into v_seq, v_queue from moved as m;
  exception when unique_violation then
    perform jobs._raise('PJ002', format('jobs.requeue: a live job now holds the idempotency key of job %s',
      requeue.id), 'let the live job finish, or cancel it, then requeue this one');
  end;
  if v_seq = 1 then
    perform jobs._wake(array[v_queue], array[requeue.id]);
  else
    perform jobs._refuse('jobs.requeue', requeue.id, 'PJ004',
      'only failed, dead, cancelled and completed jobs can be requeued',
      'a live job runs already; cancel it first to requeue it');
  end if;
  return true;
end
$$;
comment on function jobs.requeue(uuid, text) is
  'Run a finished job again: ready now, attempts reset, a new claim token; steps kept, or '
  'dropped from from_step on. Raises not_requeueable for live jobs';

create function jobs.promote(id uuid)
returns boolean
language plpgsql volatile
as $$
declare
  v_now   timestamptz := jobs.clock();
  v_queue text;
begin
  if promote.id is null then
    perform jobs._raise('22004', 'jobs.promote: id must not be NULL', 'pass the id of the delayed or snoozed job');
  end if;
  perform jobs._check_tenant_job('jobs.promote', promote.id);
  -- A snoozed job is suspended with no event to wait for (jobs.snooze); one waiting for an event
  -- or for its children keeps waiting.
  update jobs_data.jobs as j set state = 'ready', run_at = v_now, updated_at = v_now
  where j.id = promote.id and (j.state = 'delayed' or (j.state = 'suspended' and j.wait_event is null))
    and j.run_at <> 'infinity'  -- a job waiting behind its ordering key keeps its place
  returning j.queue into v_queue;
  if found then
    perform jobs._wake(array[v_queue], array[promote.id]);
  elsif exists (select from jobs_data.jobs as j where j.id = promote.id and j.state = 'delayed'
                and j.run_at = 'infinity') then
    perform jobs._raise('PJ006', format('jobs.promote: job %s waits behind an earlier job of its ordering key',
      promote.id), 'it runs when the jobs before it end; cancel those (jobs.jobs where ordering_key = ...) '
      'to run this one sooner');
  else
    perform jobs._refuse('jobs.promote', promote.id, 'PJ006', 'only delayed and snoozed jobs can be promoted',
      'a ready job is claimable already; a suspended one waits for its event or its children');
  end if;
  return true;
end
$$;
comment on function jobs.promote(uuid) is
  'Make a delayed or snoozed job claimable now. Raises not_promotable for any other state';

-- A finished job deleted now, as retention would delete it later: with its family (every
-- descendant, their attempts and their runs' steps). A child goes only with its root, as in
-- retention (jobs._prune): a parent's await_children reads its children, so one cannot be taken
-- from under it. Refused, changing nothing, while the job or any descendant is live.
--
-- Locks: the family's rows deepest first (a child's row, then its parent's, the order every
-- statement that ends or requeues a child keeps), then the family read again: a requeue that
-- made one live, or a child attached in between, is seen under the locks, and nothing of the
-- family can change until this transaction ends.
create function jobs.delete(id uuid)
returns bigint
language plpgsql volatile
as $$
declare
  v_id     uuid := $1;
  v_job    record;
  v_family uuid[];
  v_again  uuid[];
  v_live   uuid;
  v_n      bigint;
begin
  if v_id is null then
    perform jobs._raise('22004', 'jobs.delete: id must not be NULL', 'pass the id of the finished job to delete');
  end if;
  perform jobs._check_tenant_job('jobs.delete', v_id);
  loop
    with recursive d (id, depth) as (
      select j.id, 0 from jobs_data.jobs as j where j.id = v_id
      union all
      select c.id, d.depth + 1 from d join jobs_data.jobs as c on c.parent_id = d.id
      where c.parent_id is not null  -- (jobs_children_idx's predicate)
    )
    select array_agg(d.id order by d.depth desc, d.id) into v_family from d;
    perform from jobs_data.jobs as j where j.id = any(v_family)
    order by array_position(v_family, j.id) for update;
    select j.state, j.parent_id into v_job from jobs_data.jobs as j where j.id = v_id;
    if not found then
      perform jobs._raise('PJ003', format('jobs.delete: no job has id %s', v_id),
        'check the id; finished jobs are deleted after their retention period');
    elsif v_job.state in ('ready', 'delayed', 'running', 'suspended') then
      perform jobs._raise('PJ009', format('jobs.delete: job %s is %s; only finished jobs can be deleted',
        v_id, v_job.state), 'cancel it first (jobs.cancel), then delete it');
    elsif v_job.parent_id is not null then
      perform jobs._raise('PJ009', format('jobs.delete: job %s is a child of job %s; a child is deleted '
        'with its root', v_id, v_job.parent_id), 'delete the root of its family: its children go with it');
    end if;
    select j.id into v_live from jobs_data.jobs as j
    where j.id = any(v_family) and j.state in ('ready', 'delayed', 'running', 'suspended')
    order by j.id limit 1;
    if v_live is not null then
      perform jobs._raise('PJ009', format('jobs.delete: job %s of the family of job %s is live', v_live, v_id),
        'cancel it (jobs.cancel) or let it finish, then delete the family');
    end if;
    -- Every row read is finished and locked, so none can take a child now; one attached
    -- between the read and the locks shows here, and is locked on the next turn.
    with recursive d (id) as (
      select j.id from jobs_data.jobs as j where j.id = v_id
      union all
      select c.id from d join jobs_data.jobs as c on c.parent_id = d.id where c.parent_id is not null
    )
    select array_agg(d.id order by d.id) into v_again from d;
    exit when v_again = array(select f from unnest(v_family) as f order by f);
  end loop;
  with gone as (
    delete from jobs_data.jobs as j where j.id = any(v_family) returning j.id, j.run_id
  ), tried as (
    delete from jobs_data.attempts as a where a.job_id = any(array(select g.id from gone as g))
  ), runs as (
    select coalesce(array_agg(distinct g.run_id), '{}') as ids, count(*) as n from gone as g
  )
  select r.n, r.ids into v_n, v_again from runs as r;
  -- The runs' steps, unless another job still has the run (as jobs._prune keeps them).
  delete from jobs_data.steps as s
  where s.run_id = any(v_again)
    and not exists (select from jobs_data.jobs as j where j.id = s.run_id)
    and not exists (select from jobs_data.jobs as j where j.run_id = s.run_id);
  return v_n;
end
$$;
comment on function jobs.delete(uuid) is
  'Delete a finished root job now with its family (descendants, attempts, steps), as retention '
  'would later; answers how many jobs went. Raises not_deletable for a live job, a child or a '
  'family with a live job';
