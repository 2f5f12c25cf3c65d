-- pg_jobs 0.1.0 -> 0.1.1. Run by ALTER EXTENSION pg_jobs UPDATE; scripts/upgrade-check.sh
-- installs 0.1.0, fills it, runs this, and checks that nothing was lost and that the result is
-- the same, object for object, as a fresh install of 0.1.1.

-- 1. jobs.sweep picks rows by ctid (a TID scan whatever the statistics were when a session
--    cached its plan); the background worker passes 5000 rows a task. CREATE OR REPLACE
--    resets SECURITY DEFINER and the function's settings, so they are set again after it.
create or replace function jobs.sweep(max_rows int default 1000)
returns table (task text, affected bigint)
language plpgsql volatile
as $$
#variable_conflict use_column
declare
  v_now       timestamptz := jobs.clock();
  v_completed timestamptz := v_now - jobs._retention('pg_jobs.completed_retention', '7 days');
  v_dead      timestamptz := v_now - jobs._retention('pg_jobs.dead_retention', '30 days');
  v_runs      uuid[] := '{}';
  v_part      uuid[];
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

  -- Retention, per pair of states. The literal state list lets the planner use
  -- jobs_finished_idx, whose predicate it is.
  foreach v_task in array array['completed_deleted', 'dead_deleted'] loop
    with gone as (
      delete from jobs.jobs as j
      where j.ctid = any(array(
        select f.ctid from jobs.jobs as f
        where f.state in ('completed', 'failed', 'dead', 'cancelled')
          and f.state = any(case v_task when 'completed_deleted'
                                 then '{completed,cancelled}' else '{failed,dead}' end::jobs.job_state[])
          and f.finished_at < case v_task when 'completed_deleted' then v_completed else v_dead end
        limit max_rows for update skip locked))
      returning j.run_id
    )
    select coalesce(array_agg(distinct g.run_id), '{}'), count(*) into v_part, v_n from gone as g;
    v_runs := v_runs || v_part;
    task := v_task; affected := v_n; return next;
  end loop;

  delete from jobs.steps as s
  where s.run_id = any(v_runs)
    and not exists (select from jobs.jobs as j where j.id = s.run_id)
    and not exists (select from jobs.jobs as j where j.run_id = s.run_id and j.run_id <> j.id);
  get diagnostics v_n = row_count;
  task := 'steps_deleted'; affected := v_n; return next;
end
$$;
comment on function jobs.sweep(int) is
  'One housekeeping pass, as the background worker runs it: lapsed leases, waiter timeouts, '
  'expired events, retention. Each task handles at most max_rows rows. Answers (task, affected).';
alter function jobs.sweep(int) security definer set search_path = pg_catalog, pg_temp
  set plan_cache_mode = force_generic_plan;

-- 2. Backups: pg_dump carries the rows of pg_jobs's tables (see sql/backup.sql).
select pg_catalog.pg_extension_config_dump('jobs.jobs', '');
select pg_catalog.pg_extension_config_dump('jobs.steps', '');
select pg_catalog.pg_extension_config_dump('jobs.steps_seq_seq', '');
select pg_catalog.pg_extension_config_dump('jobs.events', '');
select pg_catalog.pg_extension_config_dump('jobs.job_types', '');
select pg_catalog.pg_extension_config_dump('jobs.queues', $$where queue <> 'default'$$);
