-- What a producer or a worker may know of a job: its state, attempts and outcome, without
-- rights on the tables (jobs.jobs is for admins). A role bound to tenants sees its tenants'
-- jobs only: another tenant's job answers as no job, as an unknown id does. A job completing
-- settles delete where pg_jobs.completed_retention is 0, and retention deletes finished jobs
-- later: those answer as no job too.

create function jobs.get_jobs(ids uuid[])
returns table (id uuid, name text, queue text, state text, attempt int, max_attempts int,
               result jsonb, last_error text, run_at timestamptz, enqueued_at timestamptz,
               finished_at timestamptz, tenant_id text, tags text[], meta jsonb)
language plpgsql stable
as $$
#variable_conflict use_column
declare
  v_tenants text[] := jobs._tenants();  -- NULL: the role is bound to no tenant
begin
  if get_jobs.ids is null then
    perform jobs._raise('22004', 'jobs.get_jobs: ids must not be NULL', 'pass an array of job ids');
  elsif cardinality(get_jobs.ids) > 10000 then
    perform jobs._raise('22023', 'jobs.get_jobs: at most 10000 ids per call, got '
      || cardinality(get_jobs.ids), 'split the ids');
  end if;
  -- In the order of ids (the first of a repeated id only), each looked up by the primary key.
  return query
  select j.id, j.name, j.queue, j.state::text, j.attempt, j.max_attempts, j.result, j.last_error,
         j.run_at, j.enqueued_at, j.finished_at, j.tenant_id, j.tags, j.meta
  from (select distinct on (i.id) i.id, i.ord
        from unnest(get_jobs.ids) with ordinality as i(id, ord)
        where i.id is not null
        order by i.id, i.ord) as i
  cross join lateral (select * from jobs_data.jobs as j
                      where j.id = i.id and (v_tenants is null or j.tenant_id = any(v_tenants))) as j
  order by i.ord;
end
$$;
comment on function jobs.get_jobs(uuid[]) is
  'The state, attempts and outcome of these jobs, in the order given; a job this role may not see answers no row';

-- Its argument is job_id: no argument may share a name with a column the function answers.
create function jobs.get_job(job_id uuid)
returns table (id uuid, name text, queue text, state text, attempt int, max_attempts int,
               result jsonb, last_error text, run_at timestamptz, enqueued_at timestamptz,
               finished_at timestamptz, tenant_id text, tags text[], meta jsonb)
language plpgsql stable
as $$
begin
  if get_job.job_id is null then
    perform jobs._raise('22004', 'jobs.get_job: id must not be NULL', 'pass the id jobs.enqueue answered');
  end if;
  return query select * from jobs.get_jobs(array[get_job.job_id]);
end
$$;
comment on function jobs.get_job(uuid) is
  'The state, attempts and outcome of a job; no row for a job this role may not see';

-- Waits until the job has ended (completed, failed, dead or cancelled) or wait passes, and
-- answers its row as jobs.get_job does: ended, or as it is at the deadline; no row for a job
-- this role may not see, none has this id, or (completed_retention = 0) whose completion
-- deleted it while it was waited for. Woken from shared memory by the commit that
-- ends a job of its queue (src/commit/outcomes.rs, src/commit/wakeups.rs: jobs._await_work); without
-- preload it looks again every 100 ms. Each look is a new statement, so it needs READ
-- COMMITTED, as a waiting claim does; at most an hour, as a waiting claim may.
create function jobs.wait_for_job(job_id uuid, wait interval)
returns table (id uuid, name text, queue text, state text, attempt int, max_attempts int,
               result jsonb, last_error text, run_at timestamptz, enqueued_at timestamptz,
               finished_at timestamptz, tenant_id text, tags text[], meta jsonb)
language plpgsql volatile
as $$
declare
  v_until timestamptz;
  v_key   text[];
  v_seen  bigint[];
  v_row   record;
begin
  if wait_for_job.job_id is null then
    perform jobs._raise('22004', 'jobs.wait_for_job: id must not be NULL', 'pass the id jobs.enqueue answered');
  end if;
  if wait_for_job.wait is null then
    perform jobs._raise('22004', 'jobs.wait_for_job: wait must not be NULL',
      'pass how long to wait, at most an hour; 0 answers at once');
  end if;
  if wait_for_job.wait <> interval '0' then
    perform jobs._check_interval('jobs.wait_for_job: wait', wait_for_job.wait, interval '1 hour',
      'pass how long to wait, at most an hour (the wait holds its transaction open); 0 answers at once');
    if current_setting('transaction_isolation') <> 'read committed' then
      perform jobs._raise('PJ008',
        format('jobs.wait_for_job: wait needs READ COMMITTED; this transaction is %s',
               upper(current_setting('transaction_isolation'))),
        'wait in its own statement or a READ COMMITTED transaction, or pass wait 0');
    end if;
  end if;
  v_until := clock_timestamp() + wait_for_job.wait;
  loop
    -- The counter before the look: a commit after the look moves it (no wake-up missed).
    select array[chr(2) || 'finished:' || j.queue] into v_key
    from jobs_data.jobs as j where j.id = wait_for_job.job_id;
    v_seen := jobs._work_seen(v_key);
    select * into v_row from jobs.get_jobs(array[wait_for_job.job_id]) as g;
    if not found or v_row.state in ('completed', 'failed', 'dead', 'cancelled')
       or clock_timestamp() >= v_until then
      exit;
    end if;
    perform jobs._await_work(v_key, v_seen, v_until);
  end loop;
  if v_row.id is not null then  -- (as read: a completion may delete the job, completed_retention = 0)
    return query select v_row.id, v_row.name, v_row.queue, v_row.state, v_row.attempt,
                        v_row.max_attempts, v_row.result, v_row.last_error, v_row.run_at,
                        v_row.enqueued_at, v_row.finished_at, v_row.tenant_id, v_row.tags,
                        v_row.meta;
  end if;
end
$$;
comment on function jobs.wait_for_job(uuid, interval) is
  'Wait up to wait for the job to end, then answer its row as jobs.get_job does';
