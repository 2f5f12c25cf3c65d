-- Durable steps: jobs_data.steps, jobs.save_step, jobs.get_step.
--
-- A step is memoised work inside a run (run_id): saved once by the holder of a claim, it is
-- returned by get_step on every later attempt, so a retried job replays finished steps instead
-- of redoing them. The first save of a step wins; saving it again keeps the first output.
-- seq keeps the order steps were saved in, so requeue can drop "this step and every later one".
--
-- Lock order: the job row (FOR SHARE, holding the claim), then the step row.

create table jobs_data.steps (
  run_id   uuid not null,
  step     text not null check (length(step) between 1 and 200),
  output   jsonb,
  saved_at timestamptz not null,
  attempt  int not null,
  seq      bigint generated always as identity,
  primary key (run_id, step)
);
create index steps_run_seq_idx on jobs_data.steps (run_id, seq);
comment on table jobs_data.steps is 'Memoised steps of durable runs, in the order they were saved (seq)';

-- A run's steps go with its last job: deletes the steps of those of p_runs that no longer have
-- any job, after the caller deleted jobs of them; answers how many. Called by retention
-- (jobs._prune) and by completions that delete (pg_jobs.completed_retention = 0).
-- Two transactions deleting the last two jobs of a run each still see the other's job, so
-- each would leave the steps behind. Locking the run's steps first serialises them: the second
-- waits until the first commits, and its next statement, with a new snapshot, sees both jobs
-- gone. Runs without steps take no lock. Lock order: the deleted job rows, then step rows in
-- (run_id, seq) order.
create function jobs._drop_orphan_steps(p_runs uuid[])
returns bigint
language plpgsql volatile
as $$
declare
  v_n bigint;
begin
  perform from jobs_data.steps as s
  where s.run_id = any(p_runs)
  order by s.run_id, s.seq
  for update;
  if not found then
    return 0;
  end if;
  delete from jobs_data.steps as s
  where s.run_id = any(p_runs)
    and not exists (select from jobs_data.jobs as j where j.id = s.run_id)
    and not exists (select from jobs_data.jobs as j where j.run_id = s.run_id and j.run_id <> j.id);
  get diagnostics v_n = row_count;
  return v_n;
end
$$;

create function jobs.save_step(id uuid, claim bigint, step text, output jsonb default null)
returns void
language plpgsql volatile
as $$
declare
  v_run     uuid;
  v_attempt int;
begin
  perform jobs._check_hold_args('jobs.save_step', save_step.id, save_step.claim);
  if save_step.step is null then
    perform jobs._raise('22004', 'jobs.save_step: step must not be NULL',
      'name the step, e.g. ''charge_card''; the name is its memo key within the run');
  elsif length(save_step.step) not between 1 and 200 then
    perform jobs._raise('22023', 'jobs.save_step: step must be 1 to 200 characters, got '
      || length(save_step.step), 'use a short, stable step name');
  end if;
  perform jobs._check_size('jobs.save_step: output', save_step.output);
  -- The fence, under the job's row lock: FOR SHARE keeps a re-claim or a cancel out until
  -- this transaction ends, and a concurrent one makes PostgreSQL re-check the row first.
  select j.run_id, j.attempt into v_run, v_attempt
  from jobs_data.jobs as j
  where j.id = save_step.id and j.claim = save_step.claim and jobs._tenant_ok(j.tenant_id)
    and j.state = 'running' and j.lease_expires_at > jobs.clock()
  for share;
  if v_run is null then
    perform jobs._raise('PJ001',
      format('jobs.save_step: job %s is no longer held by the claim given: %s', save_step.id,
             jobs._lost_reason(save_step.id, save_step.claim)),
      'stop working on this job and roll back; it runs again under a new claim, which sees the '
      'steps saved so far');
  end if;
  insert into jobs_data.steps (run_id, step, output, saved_at, attempt)
  values (v_run, save_step.step, save_step.output, jobs.clock(), v_attempt)
  on conflict on constraint steps_pkey do nothing;
end
$$;
comment on function jobs.save_step(uuid, bigint, text, jsonb) is
  'Memoise a finished step of a held job''s run; raises lease_lost (and saves nothing) when the '
  'claim is no longer held. A step saved before keeps its first output.';

create function jobs.get_step(run_id uuid, step text)
returns table (done boolean, output jsonb)
language plpgsql stable
as $$
#variable_conflict use_column
begin
  if get_step.run_id is null or get_step.step is null then
    perform jobs._raise('22004', 'jobs.get_step: run_id and step must not be NULL',
      'pass the run_id jobs.claim returned and the step name');
  end if;
  -- A role bound to tenants reads the steps of its tenants' runs only.
  -- (By the primary key, then jobs_attached_idx: one index each.)
  if jobs._tenants() is not null
     and not exists (select from jobs_data.jobs as j
                     where j.id = get_step.run_id and j.tenant_id = any(jobs._tenants()))
     and not exists (select from jobs_data.jobs as j
                     where j.run_id = get_step.run_id and j.run_id <> j.id
                       and j.tenant_id = any(jobs._tenants())) then
    perform jobs._raise('PJ007', format('jobs.get_step: run %s is not a run of this role''s tenants (%s)',
      get_step.run_id, array_to_string(jobs._tenants(), ', ')),
      'read the steps of runs your claims returned');
  end if;
  return query
  select s.step is not null, s.output
  from (select) as d
  left join jobs_data.steps as s on s.run_id = get_step.run_id and s.step = get_step.step;
end
$$;
comment on function jobs.get_step(uuid, text) is
  'Whether a step of a run was saved, and its output: replay it instead of redoing it';
