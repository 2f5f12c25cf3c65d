-- Durable steps: jobs_data.steps, jobs.start_step, jobs.save_step, jobs.fail_step,
-- jobs.get_step, jobs.get_steps.
--
-- A step is memoised work inside a run (run_id): saved once by the holder of a claim, it is
-- returned by get_step on every later attempt, so a retried job replays finished steps instead
-- of redoing them. The first save of a step wins; saving it again keeps the first output.
-- A library marks a step running when it starts it (start_step, which answers the saved output
-- instead when there is one) and failed, with its error, when it throws or times out
-- (fail_step); only a completed step is a memo, so a failed or interrupted one runs again on
-- the next attempt. seq keeps the order steps were first started or saved in, so requeue can
-- drop "this step and every later one".
--
-- Lock order: the job row (FOR SHARE, holding the claim), then the step row.

create table jobs_data.steps (
  run_id   uuid not null,
  step     text not null check (length(step) between 1 and 200),
  output   jsonb,
  saved_at timestamptz not null,
  attempt  int not null,
  seq      bigint generated always as identity,
  -- (Columns added in 0.1.1 follow, so that an upgraded table has its columns in this order.)
  state       text not null default 'completed' check (state in ('running', 'completed', 'failed')),
  started_at  timestamptz,
  finished_at timestamptz,
  error       text,
  primary key (run_id, step)
);
create index steps_run_seq_idx on jobs_data.steps (run_id, seq);
comment on table jobs_data.steps is
  'Steps of durable runs, in the order they were started (seq): running, failed (with its error) '
  'or completed (its output is the memo); saved_at is when the row was last written';

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

create function jobs._check_step(p_fn text, p_step text)
returns void
language plpgsql immutable
as $$
begin
  if p_step is null then
    perform jobs._raise('22004', p_fn || ': step must not be NULL',
      'name the step, e.g. ''charge_card''; the name is its memo key within the run');
  elsif length(p_step) not between 1 and 200 then
    perform jobs._raise('22023', p_fn || ': step must be 1 to 200 characters, got ' || length(p_step),
      'use a short, stable step name');
  end if;
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
  perform jobs._check_step('jobs.save_step', save_step.step);
  perform jobs._check_size('jobs.save_step: output', save_step.output);
  -- The fence (jobs._hold): the job's row locked FOR SHARE until this transaction ends.
  select h.run_id, h.attempt into v_run, v_attempt
  from jobs._hold('jobs.save_step: ', save_step.id, save_step.claim, false,
    'stop working on this job and roll back', ', which sees the steps saved so far') as h;
  insert into jobs_data.steps as s (run_id, step, output, saved_at, attempt, finished_at)
  values (v_run, save_step.step, save_step.output, jobs.clock(), v_attempt, jobs.clock())
  on conflict on constraint steps_pkey do update
    set output = excluded.output, saved_at = excluded.saved_at, attempt = excluded.attempt,
        state = 'completed', finished_at = excluded.finished_at, error = null
    where s.state <> 'completed';
end
$$;
comment on function jobs.save_step(uuid, bigint, text, jsonb) is
  'Memoise a finished step of a held job''s run; raises lease_lost (and saves nothing) when the '
  'claim is no longer held. A step saved before keeps its first output.';

-- Durable sleep: a step that is a wait. The first call in a run saves the step (its output:
-- {"until": ...}) and suspends the job until then, giving back the attempt its claim counted
-- (as jobs.snooze does), and answers false: the handler returns. When the job runs again (at
-- until, or sooner if promoted) the call finds the step saved and answers true at once, so a
-- job that sleeps a week and then retries does not sleep again. An until already past saves
-- the step and answers true. Fenced like jobs.save_step: a claim no longer held saves nothing
-- and raises lease_lost.
--
-- Lock order: the job row (FOR UPDATE, holding the claim), then the step row.
create function jobs.sleep(id uuid, claim bigint, step text, until timestamptz)
returns boolean
language plpgsql volatile
as $$
declare
  v_now     timestamptz := jobs.clock();
  v_run     uuid;
  v_attempt int;
begin
  perform jobs._check_hold_args('jobs.sleep', sleep.id, sleep.claim);
  perform jobs._check_step('jobs.sleep', sleep.step);
  if sleep.until is null then
    perform jobs._raise('22004', 'jobs.sleep: until must not be NULL',
      'pass when the job should go on, e.g. now() + interval ''1 day''');
  end if;
  perform jobs._check_finite('jobs.sleep: until', sleep.until,
    'pass when the job should go on, e.g. now() + interval ''1 day''');
  select h.run_id, h.attempt into v_run, v_attempt
  from jobs._hold('jobs.sleep: ', sleep.id, sleep.claim, true,
    'stop working on this job and roll back', ', which sees the steps saved so far') as h;
  if exists (select from jobs_data.steps as s
             where s.run_id = v_run and s.step = sleep.step and s.state = 'completed') then
    return true;  -- slept already
  end if;
  insert into jobs_data.steps as s (run_id, step, output, saved_at, attempt, started_at, finished_at)
  values (v_run, sleep.step, jsonb_build_object('until', sleep.until), v_now, v_attempt, v_now, v_now)
  on conflict on constraint steps_pkey do update
    set output = excluded.output, saved_at = v_now, attempt = v_attempt, state = 'completed',
        started_at = v_now, finished_at = v_now, error = null;
  if sleep.until <= v_now then
    return true;
  end if;
  perform jobs.snooze(sleep.id, sleep.claim, sleep.until);  -- (held: the row is locked above)
  return false;
end
$$;
comment on function jobs.sleep(uuid, bigint, text, timestamptz) is
  'A durable sleep step: the first call suspends the held job until then (no attempt used) and '
  'answers false; once it runs again the call answers true at once';

-- A role bound to tenants reads the steps of its tenants' runs only: refused (PJ007) otherwise.
-- (By the primary key, then jobs_attached_idx: one index each.)
create function jobs._check_run_readable(p_fn text, p_run uuid)
returns void
language plpgsql stable
as $$
begin
  if jobs._tenants() is not null
     and not exists (select from jobs_data.jobs as j
                     where j.id = p_run and j.tenant_id = any(jobs._tenants()))
     and not exists (select from jobs_data.jobs as j
                     where j.run_id = p_run and j.run_id <> j.id
                       and j.tenant_id = any(jobs._tenants())) then
    perform jobs._raise('PJ007', format('%s: run %s is not a run of this role''s tenants (%s)',
      p_fn, p_run, array_to_string(jobs._tenants(), ', ')),
      'read the steps of runs your claims returned');
  end if;
end
$$;

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
  perform jobs._check_run_readable('jobs.get_step', get_step.run_id);
  return query
  select s.step is not null, s.output
  from (select) as d
  left join jobs_data.steps as s on s.run_id = get_step.run_id and s.step = get_step.step
                                  and s.state = 'completed';
end
$$;
comment on function jobs.get_step(uuid, text) is
  'Whether a step of a run was saved (completed), and its output: replay it instead of redoing it';

-- Every step of a run, in the order they were started: what a run's page shows, and what a
-- worker may read of its own run.
create function jobs.get_steps(run_id uuid)
returns table (step text, state text, output jsonb, error text, attempt int,
               started_at timestamptz, finished_at timestamptz)
language plpgsql stable
as $$
#variable_conflict use_column
begin
  if get_steps.run_id is null then
    perform jobs._raise('22004', 'jobs.get_steps: run_id must not be NULL',
      'pass the run_id jobs.claim returned');
  end if;
  perform jobs._check_run_readable('jobs.get_steps', get_steps.run_id);
  return query
  select s.step, s.state, s.output, s.error, s.attempt, s.started_at, s.finished_at
  from jobs_data.steps as s
  where s.run_id = get_steps.run_id
  order by s.seq;
end
$$;
comment on function jobs.get_steps(uuid) is
  'The steps of a run in the order they started: running, completed (with the output replayed) '
  'or failed (with its error)';

-- A step begins: the saved output when the run completed it before (done, and the handler
-- replays it), else the step is marked running in this attempt (done false: run it, then
-- save_step or fail_step). One call where get_step and a separate mark would be two. Fenced
-- like save_step: a claim no longer held marks nothing and raises lease_lost.
--
-- Lock order: the job row (FOR SHARE, holding the claim), then the step row.
create function jobs.start_step(id uuid, claim bigint, step text, out done boolean, out output jsonb)
language plpgsql volatile
as $$
declare
  v_now     timestamptz := jobs.clock();
  v_run     uuid;
  v_attempt int;
begin
  perform jobs._check_hold_args('jobs.start_step', start_step.id, start_step.claim);
  perform jobs._check_step('jobs.start_step', start_step.step);
  select h.run_id, h.attempt into v_run, v_attempt
  from jobs._hold('jobs.start_step: ', start_step.id, start_step.claim, false,
    'stop working on this job', ', which sees the steps saved so far') as h;
  select s.output into output
  from jobs_data.steps as s
  where s.run_id = v_run and s.step = start_step.step and s.state = 'completed';
  if found then
    done := true;
    return;
  end if;
  insert into jobs_data.steps as s (run_id, step, output, saved_at, attempt, state, started_at)
  values (v_run, start_step.step, null, v_now, v_attempt, 'running', v_now)
  on conflict on constraint steps_pkey do update
    set saved_at = v_now, attempt = v_attempt, state = 'running', started_at = v_now,
        finished_at = null, error = null
    where s.state <> 'completed';
  done := false;
  output := null;
end
$$;
comment on function jobs.start_step(uuid, bigint, text) is
  'Begin a step of a held job''s run: (true, output) when the run completed it before, else it '
  'is marked running and (false, NULL) answers; lease_lost when the claim is no longer held';

-- A step failed (it threw, or ran past its timeout): kept with its error, so a run's page shows
-- where it stopped. Not a memo: the next attempt runs the step again. A step completed before
-- stays completed. Fenced like save_step.
create function jobs.fail_step(id uuid, claim bigint, step text, error text)
returns void
language plpgsql volatile
as $$
declare
  v_now     timestamptz := jobs.clock();
  v_run     uuid;
  v_attempt int;
begin
  perform jobs._check_hold_args('jobs.fail_step', fail_step.id, fail_step.claim);
  perform jobs._check_step('jobs.fail_step', fail_step.step);
  if fail_step.error is null then
    perform jobs._raise('22004', 'jobs.fail_step: error must not be NULL',
      'pass the error text the step failed with');
  end if;
  select h.run_id, h.attempt into v_run, v_attempt
  from jobs._hold('jobs.fail_step: ', fail_step.id, fail_step.claim, false,
    'stop working on this job', ', which sees the steps saved so far') as h;
  insert into jobs_data.steps as s (run_id, step, output, saved_at, attempt, state, started_at,
                                    finished_at, error)
  values (v_run, fail_step.step, null, v_now, v_attempt, 'failed', v_now, v_now,
          left(fail_step.error, 10000))
  on conflict on constraint steps_pkey do update
    set saved_at = v_now, attempt = v_attempt, state = 'failed', finished_at = v_now,
        error = excluded.error
    where s.state <> 'completed';
end
$$;
comment on function jobs.fail_step(uuid, bigint, text, text) is
  'Record that a step of a held job''s run failed, with its error (it runs again on the next '
  'attempt); lease_lost when the claim is no longer held';
