-- Ordering keys: the jobs of one queue, tenant and ordering_key run one at a time, in enqueue
-- order (jobs.enqueue's ordering_key).
--
-- A key's first live job (its current job) is ready, delayed, running or suspended as any job
-- is; every later live job of the key waits behind it, parked: state 'delayed', run_at
-- 'infinity', so no claim ever finds it (the due scan reads run_at <= now) and no claim pays
-- for it. A retry, a snooze or an event wait of the current job keeps it current, so the key
-- stays held. When the current job ends (completed, failed, dead, cancelled, or deleted
-- while live), its trigger (sql/ordering_triggers.sql) makes the key's earliest parked job
-- ready: the next in (enqueued_at, id) order.
--
-- Races: an enqueue must see the end of the key's current job, or that end must see the
-- enqueue's parked job. Both lock the key's row of jobs_data.ordering_keys, the enqueue waiting
-- for it (jobs._ordering_lock) and holding it until it commits, the end never waiting (SKIP
-- LOCKED): an end that finds the row locked leaves the key to the next sweep
-- (jobs_data.ordering_pending), as does one in a transaction whose snapshot could miss a
-- committed enqueue (REPEATABLE READ or SERIALIZABLE). The sweep starts such a key's next job
-- within a pass (ordering_turns), and checks every key at most hourly.
--
-- Keys belong to a tenant: another tenant's jobs with the same key are another key, so no
-- tenant can hold back another's.

-- The key's label in messages.
create function jobs._ordering_ref(p_queue text, p_tenant text, p_key text)
returns text
language sql immutable
begin atomic
  select format('ordering key %L of queue %L%s', p_key, p_queue,
                case when p_tenant <> '' then format(' (tenant %L)', p_tenant) else '' end);
end;

-- Whether the key has a live job (current or waiting): the first entry of jobs_ordering_idx.
create function jobs._ordering_live(p_queue text, p_tenant text, p_key text)
returns boolean
language sql stable
begin atomic
  select exists (select from jobs_data.jobs as j
                 where j.queue = p_queue and j.ordering_key = p_key and coalesce(j.tenant_id, '') = p_tenant
                   and j.state in ('ready', 'delayed', 'running', 'suspended'));
end;

-- Locks the rows of these keys (queue, tenant, key), made if new, in one order, waiting for
-- an enqueue of the same key that is still open. A row the sweep deletes meanwhile (its key
-- had no live job) is made again.
create function jobs._ordering_lock(p_queues text[], p_tenants text[], p_keys text[])
returns void
language plpgsql volatile
as $$
declare
  v_want int;
  v_got  int;
begin
  select count(*) into v_want
  from (select distinct q, t, k from unnest(p_queues, p_tenants, p_keys) as u(q, t, k)) as d;
  loop
    insert into jobs_data.ordering_keys (queue, tenant, key)
    select distinct u.q, u.t, u.k from unnest(p_queues, p_tenants, p_keys) as u(q, t, k)
    order by 1, 2, 3
    on conflict do nothing;
    select count(*) into v_got
    from (select from jobs_data.ordering_keys as o
          where (o.queue, o.tenant, o.key) in (select * from unnest(p_queues, p_tenants, p_keys))
          order by o.queue, o.tenant, o.key
          for no key update) as l;
    exit when v_got = v_want;
  end loop;
end
$$;

-- Makes the key's earliest parked job ready, unless the key has a current job (or no parked
-- one). False when that job is locked by another transaction: the caller leaves the key to
-- the sweep. The caller holds the key's row.
create function jobs._ordering_next(p_queue text, p_tenant text, p_key text)
returns boolean
language plpgsql volatile
as $$
declare
  v_now timestamptz := jobs.clock();
  v_id  uuid;
begin
  -- (run_at = 'infinity' as jobs_ordering_idx has it, so that both are index conditions; IS
  -- FALSE, as the planner turns NOT (a = b) into a <> b, which the index does not have)
  if exists (select from jobs_data.jobs as j
             where j.queue = p_queue and j.ordering_key = p_key and coalesce(j.tenant_id, '') = p_tenant
               and j.state in ('ready', 'delayed', 'running', 'suspended') and (j.run_at = 'infinity') is false) then
    return true;
  end if;
  select j.id into v_id from jobs_data.jobs as j
  where j.queue = p_queue and j.ordering_key = p_key and coalesce(j.tenant_id, '') = p_tenant
    and j.state in ('ready', 'delayed', 'running', 'suspended') and (j.run_at = 'infinity')
  order by j.enqueued_at, j.id
  limit 1;
  if v_id is null then
    return true;
  end if;
  update jobs_data.jobs as j set state = 'ready', run_at = v_now, updated_at = v_now
  where j.ctid = any(array(select x.ctid from jobs_data.jobs as x
                           where x.id = v_id and x.state = 'delayed' and x.run_at = 'infinity'
                           for update skip locked));
  if not found then
    return false;
  end if;
  perform jobs._wake(array[p_queue], array[v_id]);
  return true;
end
$$;

-- After an enqueue of keyed specs, under their keys' locks: each key has a current job if it
-- has any live one (a key whose first spec here was handed back an existing job, deduped,
-- would otherwise have only parked ones). In a transaction whose snapshot could miss a
-- committed end of a key's job, the keys are also left to the sweep.
create function jobs._ordering_settled(p_specs jobs.job_spec[])
returns void
language plpgsql volatile
as $$
declare
  v_key record;
begin
  for v_key in
    select distinct s.queue, coalesce(s.tenant_id, '') as tenant, s.ordering_key as key
    from unnest(p_specs) as s where s.ordering_key is not null
  loop
    if current_setting('transaction_isolation') <> 'read committed'
       or not jobs._ordering_next(v_key.queue, v_key.tenant, v_key.key) then
      insert into jobs_data.ordering_pending (queue, tenant, key) values (v_key.queue, v_key.tenant, v_key.key);
    end if;
  end loop;
end
$$;

-- The end of a key's current job (its triggers, for every update of a keyed job's state and
-- every delete of one): when a live job that held its key's turn (run_at not infinity) ends,
-- its next job starts, or the key is left to the sweep. Never waits.
create function jobs._ordering_ended()
returns trigger
language plpgsql volatile
as $$
declare
  v_tenant text := coalesce(old.tenant_id, '');
begin
  if old.run_at = 'infinity' or old.state not in ('ready', 'delayed', 'running', 'suspended')
     or (tg_op = 'UPDATE' and new.state not in ('completed', 'failed', 'dead', 'cancelled')) then
    return null;
  end if;
  if current_setting('transaction_isolation') = 'read committed' then
    perform from jobs_data.ordering_keys as o
    where o.queue = old.queue and o.tenant = v_tenant and o.key = old.ordering_key
    for no key update skip locked;
    if found and jobs._ordering_next(old.queue, v_tenant, old.ordering_key) then
      return null;
    end if;
  end if;
  insert into jobs_data.ordering_pending (queue, tenant, key) values (old.queue, v_tenant, old.ordering_key);
  return null;
end
$$;

-- The sweep's part (jobs.sweep, ordering_turns): the pending keys it can lock start their next
-- job; then up to p_max keys not checked for an hour are checked the same way, and deleted
-- when they have no live job. Never waits. Answers how many pending keys it settled.
create function jobs._ordering_sweep(p_max int)
returns bigint
language plpgsql volatile
as $$
declare
  v_now     timestamptz := jobs.clock();
  v_started bigint := 0;
  v_key     record;
begin
  for v_key in
    delete from jobs_data.ordering_pending as p
    where p.ctid = any(array(select x.ctid from jobs_data.ordering_pending as x limit p_max
                             for update skip locked))
    returning p.queue, p.tenant, p.key
  loop
    -- (A key's row is missing only if it was deleted by hand: made again. The insert waits only
    -- on an enqueue making the same row, whose commit then starts the key's next job.)
    insert into jobs_data.ordering_keys (queue, tenant, key) values (v_key.queue, v_key.tenant, v_key.key)
    on conflict do nothing;
    perform from jobs_data.ordering_keys as o
    where o.queue = v_key.queue and o.tenant = v_key.tenant and o.key = v_key.key
    for no key update skip locked;
    if not found or not jobs._ordering_next(v_key.queue, v_key.tenant, v_key.key) then
      insert into jobs_data.ordering_pending (queue, tenant, key) values (v_key.queue, v_key.tenant, v_key.key);
    else
      v_started := v_started + 1;
    end if;
  end loop;

  for v_key in
    select o.ctid, o.queue, o.tenant, o.key from jobs_data.ordering_keys as o
    where o.checked_at is null or o.checked_at <= v_now - interval '1 hour'
    order by o.checked_at nulls first
    limit p_max
    for no key update skip locked
  loop
    if not jobs._ordering_live(v_key.queue, v_key.tenant, v_key.key) then
      delete from jobs_data.ordering_keys as o where o.ctid = v_key.ctid;
    else
      if not jobs._ordering_next(v_key.queue, v_key.tenant, v_key.key) then
        insert into jobs_data.ordering_pending (queue, tenant, key) values (v_key.queue, v_key.tenant, v_key.key);
      end if;
      update jobs_data.ordering_keys as o set checked_at = v_now where o.ctid = v_key.ctid;
    end if;
  end loop;
  return v_started;
end
$$;
