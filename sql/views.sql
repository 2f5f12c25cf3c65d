-- The tables under their DBA names. jobs.jobs, jobs.steps, jobs.events, jobs.job_types and
-- jobs.queues are views of the tables in jobs_data: simple views, so admins select, insert,
-- update and delete through them as through the tables (INSERT ... ON CONFLICT included).
-- TRUNCATE, ALTER TABLE and VACUUM name the tables themselves (jobs_data.jobs, ...).
--
-- A role that may use jobs (every producer, worker and monitor) can still name these views in
-- CREATE RULE or CREATE TRIGGER and queue a lock on a view behind a long transaction; that
-- stalls only statements that read the view (admins' queries), never a claim, an enqueue or a
-- sweep, which read the tables (docs/SECURITY.md).
create view jobs.jobs as select * from jobs_data.jobs;
comment on view jobs.jobs is 'One row per job (the table jobs_data.jobs); see docs/REFERENCE.md for the life of a row';
create view jobs.steps as select * from jobs_data.steps;
comment on view jobs.steps is 'Steps of durable runs, running, failed or completed (the table jobs_data.steps)';
create view jobs.events as select * from jobs_data.events;
comment on view jobs.events is 'Published events (the table jobs_data.events); a row past expires_at is invisible';
create view jobs.job_types as select * from jobs_data.job_types;
comment on view jobs.job_types is
  'Policy per job name (the table jobs_data.job_types): retries, backoff, dead-lettering, lease, concurrency';
create view jobs.attempts as select * from jobs_data.attempts;
comment on view jobs.attempts is
  'Attempts that did not complete (the table jobs_data.attempts): failed, timed out, lease lapsed, buried';
create view jobs.queues as select * from jobs_data.queues;
comment on view jobs.queues is 'Every queue ever used and whether it is paused (the table jobs_data.queues)';

-- Backfills: a long backfill is a job whose passes are steps named backfill:1, backfill:2, ...
-- (the libraries' ctx.backfill), each pass's output {"rows": n, "cursor": ..., "done": ...}.
-- One row per run that has passes: its job (the run's latest), how many passes finished, the
-- rows they handled, the cursor the next pass starts after, and when the first pass started and
-- the last one finished. Only admins read it, as the tables.
create view jobs.backfills as
select p.run_id, j.name, j.state, p.passes, p.rows, p.cursor, p.started_at, p.last_pass_at,
       j.finished_at, j.last_error
from (select s.run_id,
             count(*) filter (where s.state = 'completed') as passes,
             coalesce(sum(case when jsonb_typeof(s.output->'rows') = 'number' then (s.output->>'rows')::numeric end)
                      filter (where s.state = 'completed'), 0) as rows,
             (array_agg(s.output->'cursor' order by s.seq desc) filter (where s.state = 'completed'))[1] as cursor,
             min(s.started_at) as started_at,
             max(s.finished_at) filter (where s.state = 'completed') as last_pass_at
      from jobs_data.steps as s
      where s.step like 'backfill:%'
      group by s.run_id) as p
left join lateral (select j.name, j.state, j.finished_at, j.last_error
                   from jobs_data.jobs as j
                   where j.id = p.run_id or (j.run_id = p.run_id and j.run_id <> j.id)
                   order by j.enqueued_at desc limit 1) as j on true;
comment on view jobs.backfills is
  'Backfills (ctx.backfill): per run, its job, the passes finished, the rows they handled and the cursor to resume after';
