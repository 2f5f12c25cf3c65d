-- Dissection: a hot/cold split of jobs.jobs, measured at commit 9ab66a8, not adopted
-- (its figures in git history: git log -S split_schema). split.live holds what a claim and a settle write (narrow, updated in
-- place), split.body what enqueue writes once and a claim reads, split.done one narrow row per
-- finished job. Run with psql on a database with pg_jobs (for jobs.job_state and
-- jobs._uuid_v7): it makes the tables and fills 40k ready jobs; then drain with split_drain.sql.
drop schema if exists split cascade;
create schema split;
-- What a claim and a settle touch: narrow, updated in place.
create table split.live (
  id               uuid primary key,
  queue            text not null,
  state            jobs.job_state not null,
  priority         int not null default 0,
  run_at           timestamptz not null,
  attempt          int not null default 0,
  max_attempts     int not null default 25,
  claim            bigint not null default 0,
  lease_expires_at timestamptz,
  lease_scan_at    timestamptz
) with (fillfactor = 70, autovacuum_vacuum_cost_delay = 0, autovacuum_vacuum_scale_factor = 0.01,
        vacuum_truncate = false);
create index split_ready_idx on split.live (queue, priority desc, run_at) where state = 'ready';
create index split_lease_idx on split.live (queue, lease_scan_at) where state = 'running' and lease_scan_at is not null;
-- What enqueue writes once and a claim reads.
create table split.body (
  id uuid primary key, run_id uuid not null, name text not null, queue text not null,
  payload jsonb not null, tenant_id text, idempotency_key text, concurrency_key text,
  enqueued_at timestamptz not null, created_at timestamptz not null
);
-- History: one narrow row per finished job.
create table split.done (
  id uuid primary key, state jobs.job_state not null, attempt int not null, claimed_by text,
  result jsonb, last_error text, finished_at timestamptz not null
);

-- Fill: 40k ready jobs.
insert into split.body (id, run_id, name, queue, payload, enqueued_at, created_at)
select x.id, x.id, 'bench', 'bench', jsonb_build_object('n', x.g), now(), now()
from (select jobs._uuid_v7() as id, g from generate_series(1, 40000) g) as x;
insert into split.live (id, queue, state, run_at) select id, 'bench', 'ready', now() from split.body;
vacuum analyze split.live, split.body, split.done;
