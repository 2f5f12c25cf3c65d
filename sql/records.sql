-- What the claim and the settles record beside the jobs, in tables of their own: the attempts
-- that did not complete, and the starts of rate-limited jobs. The same file creates them at
-- CREATE EXTENSION and in the upgrade from 0.1.0.

-- Attempt history: one row per attempt that did not complete (failed, timed out, its lease
-- lapsed, or buried on the final attempt), and per job a prefetching worker held but never
-- started before its lease lapsed (not_started: given back, the attempt not used), written by
-- the statement that settles it and deleted with its job. An attempt that completes writes
-- nothing here. last_error keeps the latest.
create table jobs_data.attempts (
  job_id      uuid not null,
  attempt     int not null,
  worker      text,            -- claimed_by of the attempt
  claimed_at  timestamptz,
  finished_at timestamptz not null,
  outcome     text not null check (outcome in ('failed', 'timed_out', 'lease_lapsed', 'buried', 'not_started')),
  error       text,
  seq         bigint generated always as identity  -- the order they were written in
);
-- Not unique: a requeued job counts its attempts from 1 again, so order a job's rows by seq.
create index attempts_job_idx on jobs_data.attempts (job_id, attempt);
comment on table jobs_data.attempts is
  'One row per attempt that did not complete: failed, timed out, lease lapsed or buried; '
  'and per held job given back unstarted (not_started)';

-- The starts of rate-limited jobs (jobs_data.job_types.rate_limit) in their window: one row
-- per start, written by the claim (jobs._within_limits), deleted once older than the window.
create table jobs_data.rate_starts (
  name       text not null,
  key        text,              -- the concurrency_key, with rate_limit_per_key
  started_at timestamptz not null,
  tenant     text not null default ''  -- the job's tenant_id ('': none): each has its own limit
);
create index rate_starts_idx on jobs_data.rate_starts (name, started_at);
comment on table jobs_data.rate_starts is
  'Starts of rate-limited jobs within their job type''s rate_period (jobs_data.job_types.rate_limit)';
