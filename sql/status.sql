-- What a producer or a worker may know of a job: its state, attempts and outcome, without
-- rights on the tables (jobs.jobs is for admins). A role bound to tenants sees its tenants'
-- jobs only: another tenant's job answers as no job, as an unknown id does. A job completing
-- settles delete where pg_jobs.completed_retention is 0, and retention deletes finished jobs
-- later: those answer as no job too.

create function jobs.get_jobs(ids uuid[])
returns table (id uuid, name text, queue text, state text, attempt int, max_attempts int,
               result jsonb, last_error text, run_at timestamptz, enqueued_at timestamptz,
               finished_at timestamptz, tenant_id text)
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
         j.run_at, j.enqueued_at, j.finished_at, j.tenant_id
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
               finished_at timestamptz, tenant_id text)
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
