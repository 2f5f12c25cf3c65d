-- Stored events: jobs_data.events, jobs.publish, jobs.await_event.
--
-- An event is a (name, key) with a payload and an expiry. await_event answers 'received' when
-- an unexpired event of that name and key exists (the newest one), and memoises the answer as
-- a step of the run ('event:<name>' or 'event:<name>:<key>'), so every later attempt sees the
-- same payload even when newer events arrive. Otherwise it suspends the job (no attempt used,
-- the claim released) and answers 'waiting'. publish wakes every job waiting on its name and
-- key. A waiter whose timeout passes is due again (run_at), so claim picks it up without the
-- background worker, and its next await_event answers 'timed_out' (memoised the same way).
-- An expired event is invisible at once: every read filters on expires_at.
--
-- No lost wake-up: "no event yet, so suspend" (await_event) and "insert the event, then wake
-- the waiters" (publish) both hold the lock slot of (name, key) (jobs_data.lock_slots, the
-- slots of the job's tenant; jobs._event_lock), so one of them commits before the other looks:
-- publish then sees the suspended waiter, or await_event sees the event.
--
-- Lock order: the (name, key) lock slot, then job rows. Keys are stored as '' for none.
--
-- Tenants: an event may belong to a tenant (tenant_id): only that tenant's jobs receive it, or
-- are woken by it. A role bound to tenants publishes for them only (its one tenant unless it
-- names another of its own); an unbound role publishes for every tenant unless it names one.
-- So a tenant can neither read another's events nor forge one its jobs accept.

create table jobs_data.events (
  id           uuid primary key,
  name         text not null check (length(name) between 1 and 200),
  key          text not null default '' check (octet_length(key) <= 512),
  payload      jsonb,
  published_at timestamptz not null,
  expires_at   timestamptz not null,
  tenant_id    text   -- only this tenant's jobs receive it; NULL: every job
);
create index events_lookup_idx on jobs_data.events (name, key, published_at desc);
create index events_expiry_idx on jobs_data.events (expires_at);
comment on table jobs_data.events is 'Published events; a row past expires_at is invisible and swept';

-- The lock of an event's (name, key) slot: a publish locks its tenant's slot ('' for a
-- publish to every tenant); an await locks its job's tenant's slot and, for a tenant's job,
-- shares the slot of publishes to every tenant, so it is ordered against both kinds of publish
-- that can wake it, and against no other tenant's.
create function jobs._event_lock(p_name text, p_key text, p_tenant text, p_await boolean)
returns void
language plpgsql volatile
as $$
declare
  v_slot int := 1024 + (hashtext(p_name || '/' || p_key) & 1023);
begin
  perform jobs._lock_slots(array[coalesce(p_tenant, '')], array[v_slot], 'wait');
  if p_await and p_tenant is not null then
    perform jobs._lock_slots(array[''], array[v_slot], 'share');
  end if;
end
$$;

create function jobs._check_event_args(p_fn text, p_name text, p_key text)
returns void
language plpgsql immutable
as $$
begin
  if p_name is null then
    perform jobs._raise('22004', p_fn || ': name must not be NULL',
      'name the event, e.g. ''order_paid''');
  elsif length(p_name) not between 1 and 200 then
    perform jobs._raise('22023', p_fn || ': name must be 1 to 200 characters, got ' || length(p_name),
      'use a short event name and put data in the payload');
  elsif octet_length(p_key) > 512 then
    perform jobs._raise('22023', p_fn || ': key must be at most 512 bytes, got ' || octet_length(p_key),
      'hash a long key, e.g. md5(...)');
  end if;
end
$$;

create function jobs.publish(name text, payload jsonb default null, key text default null,
                             ttl interval default '7 days', tenant_id text default null)
returns uuid
language plpgsql volatile
as $$
declare
  v_id  uuid := gen_random_uuid();
  v_now timestamptz := jobs.clock();
  v_key    text := coalesce(publish.key, '');
  v_queues text[];
  v_woken  uuid[];
  v_bound  text[] := jobs._tenants();
  v_tenant text := coalesce(publish.tenant_id, case when cardinality(v_bound) = 1 then v_bound[1] end);
begin
  perform jobs._check_event_args('jobs.publish', publish.name, publish.key);
  if v_bound is not null and (v_tenant is null or v_tenant <> all(v_bound)) then
    perform jobs._raise('PJ007', format('jobs.publish: this role is bound to the tenants %s and may not '
      'publish for %s', array_to_string(v_bound, ', '), coalesce(quote_literal(v_tenant), 'every tenant')),
      'pass tenant_id => one of the role''s tenants');
  end if;
  if publish.ttl is null then
    perform jobs._raise('22004', 'jobs.publish: ttl must not be NULL',
      'pass how long the event stays receivable, e.g. interval ''1 day''');
  end if;
  perform jobs._check_interval('jobs.publish: ttl', publish.ttl, interval '10 years',
    'pass how long the event stays receivable, e.g. interval ''1 day''');
  if jobs._size(publish.payload) > jobs._max_payload_size() then
    perform jobs._raise('22023', format('jobs.publish: payload must be at most %s bytes '
      '(pg_jobs.max_payload_size), got %s', jobs._max_payload_size(), jobs._size(publish.payload)),
      'store large data elsewhere (a table, object storage) and pass its key in the payload');
  end if;
  perform jobs._event_lock(publish.name, v_key, v_tenant, false);
  insert into jobs_data.events (id, name, key, payload, published_at, expires_at, tenant_id)
  values (v_id, publish.name, v_key, publish.payload, v_now, v_now + publish.ttl, v_tenant);
  -- Wake the waiters: claimable now, and their await_event will find this event.
  with woken as (
    update jobs_data.jobs as j set state = 'ready', run_at = v_now, updated_at = v_now
    where j.state = 'suspended' and j.wait_event = publish.name and j.wait_key = v_key
      and (v_tenant is null or j.tenant_id = v_tenant)
    returning j.id, j.queue
  )
  select array_agg(distinct w.queue), array_agg(w.id) into v_queues, v_woken from woken as w;
  if v_woken is not null then
    perform jobs._wake(v_queues, v_woken);
  end if;
  return v_id;
end
$$;
comment on function jobs.publish(text, jsonb, text, interval, text) is
  'Store an event for ttl (for one tenant''s jobs, or every job) and wake every job waiting on '
  'its name and key; answers its id';

-- The step that memoises an event wait's answer: 'event:' || name || ':' || key, or, where that
-- would pass the 200 characters of a step name (a long name and key), 'event#' and their digest.
create function jobs._event_step(p_name text, p_key text)
returns text
language sql immutable
begin atomic
  select case when length('event:' || p_name || coalesce(':' || p_key, '')) <= 200
              then 'event:' || p_name || coalesce(':' || p_key, '')
              else 'event#' || md5(length(p_name) || ':' || p_name || coalesce(':' || p_key, '')) end;
end;

create function jobs.await_event(id uuid, claim bigint, name text, key text default null,
                                 timeout interval default null)
returns table (status text, payload jsonb)
language plpgsql volatile
as $$
#variable_conflict use_column
declare
  v_now   timestamptz := jobs.clock();
  v_key   text := coalesce(await_event.key, '');
  v_step  text := jobs._event_step(await_event.name, await_event.key);
  v_job   record;
  v_memo  jsonb;
  v_until timestamptz;
  v_queue text;
begin
  perform jobs._check_hold_args('jobs.await_event', await_event.id, await_event.claim);
  perform jobs._check_event_args('jobs.await_event', await_event.name, await_event.key);
  perform jobs._check_interval('jobs.await_event: timeout', await_event.timeout, interval '10 years',
    'pass how long to wait, or NULL to wait until the event is published');

  -- The job's tenant picks its lock slot: read before the lock (it never changes), checked
  -- with the claim under it.
  perform jobs._event_lock(await_event.name, v_key,
    (select j.tenant_id from jobs_data.jobs as j where j.id = await_event.id), true);
  select h.run_id, h.attempt, h.wait_event, h.wait_key, h.wait_until, h.tenant_id into v_job
  from jobs._hold('jobs.await_event: ', await_event.id, await_event.claim, true,
    'stop working on this job') as h;

  -- Answered before: the same answer, whatever was published since.
  select s.output into v_memo from jobs_data.steps as s
  where s.run_id = v_job.run_id and s.step = v_step and s.state = 'completed';
  if found then
    return query select v_memo->>'status', nullif(v_memo->'payload', 'null'::jsonb);
    return;
  end if;

  select jsonb_build_object('status', 'received', 'payload', e.payload) into v_memo
  from jobs_data.events as e
  where e.name = await_event.name and e.key = v_key and e.expires_at > v_now
    and (e.tenant_id is null or e.tenant_id = v_job.tenant_id)
  order by e.published_at desc
  limit 1;
  if v_memo is null and v_job.wait_event = await_event.name and v_job.wait_key = v_key
     and v_job.wait_until <= v_now then
    v_memo := jsonb_build_object('status', 'timed_out', 'payload', null);
  end if;

  if v_memo is not null then
    insert into jobs_data.steps as s (run_id, step, output, saved_at, attempt, finished_at)
    values (v_job.run_id, v_step, v_memo, v_now, v_job.attempt, v_now)
    on conflict on constraint steps_pkey do update
      set output = excluded.output, saved_at = v_now, attempt = excluded.attempt,
          state = 'completed', finished_at = v_now, error = null;
    update jobs_data.jobs as j set wait_event = null, wait_key = null, wait_until = null
    where j.id = await_event.id and j.wait_event is not null;
    return query select v_memo->>'status', nullif(v_memo->'payload', 'null'::jsonb);
    return;
  end if;

  -- Suspend: no attempt used, the claim released. Waiting again for the same event keeps
  -- the first deadline.
  v_until := case when v_job.wait_event = await_event.name and v_job.wait_key = v_key
                  then v_job.wait_until
                  else v_now + await_event.timeout end;
  update jobs_data.jobs as j set
    state = 'suspended', attempt = j.attempt - 1, lease_expires_at = null,
    run_at = v_until, wait_event = await_event.name, wait_key = v_key, wait_until = v_until,
    updated_at = v_now
  where j.id = await_event.id
  returning case when jobs._slot_freed(j.name, j.concurrency_key) then j.queue end into v_queue;
  if v_until is not null then
    perform jobs._signal_work(array[v_queue]);  -- its timeout comes due: the blocking claims
  end if;
  return query select 'waiting'::text, null::jsonb;
end
$$;
comment on function jobs.await_event(uuid, bigint, text, text, interval) is
  'Receive the newest unexpired event of name (and key), memoised for the run; or suspend the '
  'job until it is published or timeout passes (''waiting''); ''timed_out'' once it has';
