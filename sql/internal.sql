-- Tables of pg_jobs's own bookkeeping, which no role but pg_jobs's functions uses.

-- When the sweep last pruned the queue registry (jobs.sweep, queues_deleted): one row.
create table jobs_data.maintenance (
  one              boolean primary key default true check (one),
  queues_pruned_at timestamptz
);
insert into jobs_data.maintenance default values;
comment on table jobs_data.maintenance is 'When jobs.sweep last pruned jobs.queues (at most hourly)';

-- Locks that only pg_jobs's own functions can take: rows of a table no other role may read,
-- locked with SELECT ... FOR NO KEY UPDATE. Claims under a concurrency limit serialise per
-- name and key on slots 0-1023, and "no event yet, so suspend" against "publish, then wake"
-- per event on slots 1024-2047 (a key hashes to a slot: two keys may share one, which only
-- serialises them). Advisory locks would do the same, but their keys are public: any role
-- that can connect could take and hold them and stall every limited claim and event wait.
create table jobs_data.lock_slots (slot int primary key);
insert into jobs_data.lock_slots (slot) select generate_series(0, 2047);
comment on table jobs_data.lock_slots is
  'Lock slots for concurrency limits (0-1023) and events (1024-2047); rows never change';
