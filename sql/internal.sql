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
-- per event on slots 1024-2047, and enqueues that replace a busy key's waiting job per key
-- on slots 2048-3071 (a key hashes to a slot: two keys may share one, which only serialises
-- them). Advisory locks would do the same, but their keys are public: any role
-- that can connect could take and hold them and stall every limited claim and event wait.
-- Each tenant has slots of its own (tenant ''; jobs of no tenant), made at its first use, so
-- a tenant's open transaction holding every slot it can reach stalls only that tenant.
create table jobs_data.lock_slots (
  tenant text not null default '',
  slot   int  not null,
  primary key (tenant, slot)
);
insert into jobs_data.lock_slots (slot) select generate_series(0, 3071);
comment on table jobs_data.lock_slots is
  'Lock slots for concurrency limits (0-1023), events (1024-2047) and busy keys (2048-3071), '
  'per tenant; rows never change';

-- Locks the slots (p_tenants[i], p_slots[i]) in (tenant, slot) order, one lock order for all:
-- p_how 'wait' waits for each and answers them all; 'skip' takes those free now and answers
-- which; 'share' waits for a share lock on each (answers them all). Slots are answered as
-- slot || ':' || tenant. A tenant's slots are inserted at its first use; the insert waits
-- only on that tenant's own first use in an open transaction.
create function jobs._lock_slots(p_tenants text[], p_slots int[], p_how text)
returns text[]
language plpgsql volatile
as $$
begin
  if exists (select from unnest(p_tenants, p_slots) as w(tenant, slot)
             where w.tenant <> ''
               and not exists (select from jobs_data.lock_slots as s
                               where s.tenant = w.tenant and s.slot = w.slot)) then
    insert into jobs_data.lock_slots (tenant, slot)
    select distinct w.tenant, w.slot from unnest(p_tenants, p_slots) as w(tenant, slot)
    where w.tenant <> ''
    order by 1, 2
    on conflict do nothing;
  end if;
  if p_how = 'skip' then
    return array(select s.slot || ':' || s.tenant from jobs_data.lock_slots as s
                 where (s.tenant, s.slot) in (select * from unnest(p_tenants, p_slots))
                 order by s.tenant, s.slot for no key update skip locked);
  elsif p_how = 'share' then
    perform from jobs_data.lock_slots as s
    where (s.tenant, s.slot) in (select * from unnest(p_tenants, p_slots))
    order by s.tenant, s.slot for share;
  else
    perform from jobs_data.lock_slots as s
    where (s.tenant, s.slot) in (select * from unnest(p_tenants, p_slots))
    order by s.tenant, s.slot for no key update;
  end if;
  return array(select w.slot || ':' || w.tenant from unnest(p_tenants, p_slots) as w(tenant, slot));
end
$$;

-- Moves of a parent's count of live children (jobs_data.jobs.children_live) that the sweeper
-- made while another transaction held the parent's row (a producer attaching a child in an
-- open transaction, say): the sweeper never waits on it. The next sweep that can lock the
-- parent applies them (jobs._family_pending_apply); jobs.await_children counts them meanwhile.
create table jobs_data.family_pending (
  parent_id uuid not null,
  delta     int  not null
);
create index family_pending_parent_idx on jobs_data.family_pending (parent_id);
comment on table jobs_data.family_pending is
  'Moves of children_live the sweep could not apply without waiting; applied by a later sweep';

-- Ordering keys (sql/ordering.sql): a row per queue, tenant and key that has had a job. An
-- enqueue of the key locks its row until it commits, so two enqueues of a key, and an enqueue
-- and the end of the key's current job (which locks it too, never waiting), see each other.
-- The sweep deletes the rows of keys with no live job, and makes sure of each key's next job
-- (checked_at) at most hourly.
create table jobs_data.ordering_keys (
  queue      text not null,
  tenant     text not null,  -- '' for jobs of no tenant
  key        text not null,
  checked_at timestamptz,    -- when the sweep last made sure its next job was not left waiting
  primary key (queue, tenant, key)
);
create index ordering_keys_checked_idx on jobs_data.ordering_keys (checked_at nulls first);
comment on table jobs_data.ordering_keys is
  'Each ordering key (queue, tenant, key) that has had a job: locked by enqueues and ends of its jobs';

-- Keys whose current job ended while their row was locked (an enqueue of the key still open),
-- or in a transaction that could not see the latest enqueues: the next sweep starts their
-- next job, if the enqueue did not.
create table jobs_data.ordering_pending (
  queue  text not null,
  tenant text not null,
  key    text not null
);
comment on table jobs_data.ordering_pending is
  'Ordering keys whose next job a sweep must make sure of (their row was locked when their job ended)';
-- Their rows go with a dump, as the jobs' do (sql/backup.sql).
select pg_catalog.pg_extension_config_dump('jobs_data.ordering_keys', '');
select pg_catalog.pg_extension_config_dump('jobs_data.ordering_pending', '');

-- Queues whose fairness changed (sql/fairness.sql). An enqueue whose statement began before
-- the change committed gave its job the grouping it read; the sweep waits out every
-- transaction that was open when it first saw the change (waiting_for: their virtual
-- transaction ids, from pg_locks), then gives the queue's live jobs their group once more.
create table jobs_data.fair_pending (
  queue       text primary key,
  waiting_for text[]  -- NULL until a sweep has seen the change
);
comment on table jobs_data.fair_pending is
  'Queues whose fairness changed: a sweep regroups their live jobs once the transactions open at the change have ended';
select pg_catalog.pg_extension_config_dump('jobs_data.fair_pending', '');
