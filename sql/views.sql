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
comment on view jobs.steps is 'Memoised steps of durable runs (the table jobs_data.steps)';
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
