-- Producing: jobs.enqueue and jobs.enqueue_batch, both through jobs._enqueue.
--
-- Idempotency: jobs_idempotency_live_idx allows one live row per (name, tenant, key). The
-- insert uses ON CONFLICT DO NOTHING, which waits for an uncommitted holder of the key (or of a
-- caller-allocated id) and then either inserts (the holder rolled back) or does nothing. What
-- was not inserted is then looked up in a new statement, so its snapshot sees the holder that
-- committed meanwhile. The holder may also have finished between the two statements, freeing
-- the key: the insert is then sent once more and lands. Nobody gets an error for a race.
--
-- Bounds: at most 10000 specs per call. Rows are inserted in (name, tenant, key, ordinal) order, so
-- two batches that share keys wait on each other in one order and never deadlock, and of two
-- specs with one key in a batch the first is inserted.

-- What is wrong with a spec, as (SQLSTATE, message, hint), or NULL when nothing is. A single
-- CASE expression, so the planner inlines it and a batch is checked in one statement. STABLE,
-- not IMMUTABLE: its messages format values as text, which depends on settings, and the
-- planner inlines no IMMUTABLE function whose body is not (0.1.0 declared it IMMUTABLE, and
-- each spec cost a function call: 2.7 ms of a 100-spec batch).
-- The longest label of a spec's tags (jobs._spec_problem calls it only for a spec with tags).
create function jobs._longest_tag(p_tags text[])
returns int
language sql stable strict parallel safe  -- (strict: a spec without tags never calls it)
begin atomic
  select max(length(t.tag)) from unnest(p_tags) as t(tag);
end;

create function jobs._spec_problem(s jobs.job_spec)
returns text[]
language sql stable parallel safe
begin atomic
  select case
    when s.name is null then array['22004', 'name must not be NULL',
      'pass the job name your workers dispatch on, e.g. jobs.enqueue(''send_email'', ''{}'')']
    when length(s.name) not between 1 and 200 then array['22023',
      'name must be 1 to 200 characters, got ' || length(s.name),
      'use a short, stable job name; put data in the payload']
    when s.payload is null then array['22004', 'payload must not be NULL', 'pass ''{}'' for no payload']
    when jobs._size(s.payload) > jobs._max_payload_size() then array['22023',
      format('payload must be at most %s bytes (pg_jobs.max_payload_size), got %s',
             jobs._max_payload_size(), jobs._size(s.payload)),
      'store large data elsewhere (a table, object storage) and pass its key in the payload']
    when s.queue is null then array['22004', 'queue must not be NULL', 'omit queue to use ''default''']
    when length(s.queue) not between 1 and 128 then array['22023',
      'queue must be 1 to 128 characters, got ' || length(s.queue),
      'use a short queue name such as ''default'' or ''emails''']
    when s.priority is null then array['22004', 'priority must not be NULL', 'omit priority to use 0']
    when s.max_attempts < 1 then array['22023', 'max_attempts must be at least 1, got ' || s.max_attempts,
      'pass 1 for a job that must never be retried, or NULL for the job type''s policy']
    when octet_length(s.idempotency_key) not between 1 and 512 then array['22023',
      'idempotency_key must be 1 to 512 bytes, got ' || octet_length(s.idempotency_key),
      'hash a long natural key, e.g. md5(...), or pass NULL']
    when length(s.tenant_id) not between 1 and 200 then array['22023',
      'tenant_id must be 1 to 200 characters, got ' || length(s.tenant_id),
      'pass a short tenant identifier or NULL']
    when length(s.concurrency_key) not between 1 and 200 then array['22023',
      'concurrency_key must be 1 to 200 characters, got ' || length(s.concurrency_key),
      'pass a short key or NULL']
    -- A role bound to tenants (pg_jobs.tenants, jobs.grant_producer(role, tenant)) enqueues
    -- for those tenants only: so it dedupes against, and gets back, only their jobs.
    when jobs._tenants() is not null
         and (s.tenant_id is null or not s.tenant_id = any(jobs._tenants())) then array['PJ007',
      format('this role is bound to the tenants %s and may not enqueue for %s',
             array_to_string(jobs._tenants(), ', '), coalesce(quote_literal(s.tenant_id), 'no tenant')),
      'pass tenant_id => one of its tenants, or bind it to this one: jobs.grant_producer(role, tenant => ...)']
    when not isfinite(s.run_at) then array['22023', 'run_at must be a finite time, got ' || s.run_at,
      'pass NULL to run now, or a time such as now() + interval ''1 hour''']
    when s.timeout <= interval '0' or s.timeout > interval '7 days' then array['22023',
      'timeout must be more than 0 and at most 7 days, got ' || s.timeout,
      'pass the most one attempt may run, e.g. ''5 minutes'', or NULL for the job type''s']
    when s.close_policy not in ('terminate', 'abandon') then array['22023',
      format('close_policy must be ''terminate'' or ''abandon'', got %L', s.close_policy),
      '''terminate'' (the default) cancels the child when its parent ends failed, dead or '
      'cancelled; ''abandon'' lets it carry on']
    when s.close_policy is not null and s.parent_id is null then array['22023',
      'close_policy is for a child: pass parent_id too', 'pass the parent''s id, or no close_policy']
    when s.on_conflict is null or s.on_conflict not in ('return', 'error', 'replace', 'debounce') then array[
      case when s.on_conflict is null then '22004' else '22023' end,
      'on_conflict must be ''return'', ''error'', ''replace'' or ''debounce'', got '
        || coalesce(quote_literal(s.on_conflict), 'NULL'),
      '''return'' hands back the live job holding the key; ''error'' raises duplicate_job; '
      '''replace'' and ''debounce'' give a job still waiting to run the new payload and run time']
    when s.on_conflict in ('replace', 'debounce') and s.idempotency_key is null then array['22023',
      format('on_conflict %L needs an idempotency_key', s.on_conflict),
      'pass the key whose waiting job the repeats replace, e.g. idempotency_key => ''digest:'' || user_id']
    when (s.on_conflict = 'debounce') <> (s.debounce is not null) then array['22023',
      'debounce goes with on_conflict ''debounce'', and it with debounce',
      'pass both, e.g. on_conflict => ''debounce'', debounce => ''30 seconds''']
    when s.debounce <= interval '0' or s.debounce > interval '7 days' then array['22023',
      'debounce must be more than 0 and at most 7 days, got ' || s.debounce,
      'pass how long after the last repeat the job runs, e.g. ''30 seconds''']
    when s.debounce_max is not null and s.debounce is null then array['22023',
      'debounce_max goes with debounce', 'pass debounce as well, or no debounce_max']
    when s.debounce_max < s.debounce or s.debounce_max > interval '30 days' then array['22023',
      format('debounce_max must be at least debounce (%s) and at most 30 days, got %s', s.debounce, s.debounce_max),
      'pass the longest a job may be put off after its first enqueue, or NULL for no limit']
    when cardinality(s.tags) > 20 or array_position(s.tags, null) is not null or '' = any(s.tags)
         or jobs._longest_tag(s.tags) > 100 then array['22023',
      format('tags must be at most 20 labels of 1 to 100 characters, none NULL; got %s labels, the longest %s characters',
             cardinality(s.tags), coalesce(jobs._longest_tag(s.tags), 0)),
      'pass short labels to find the job by, e.g. array[''customer:42'', ''import''], or NULL']
    when jsonb_typeof(s.meta) <> 'object' then array['22023',
      'meta must be a JSON object, got a JSON ' || jsonb_typeof(s.meta),
      'pass an object, e.g. ''{"traceparent": "00-..."}'', or NULL']
    when jobs._size(s.meta) > 8192 then array['22023',
      'meta must be at most 8192 bytes, got ' || jobs._size(s.meta),
      'keep meta to small values (trace context, labels); data belongs in the payload']
    when length(s.ordering_key) not between 1 and 200 then array['22023',
      'ordering_key must be 1 to 200 characters, got ' || length(s.ordering_key),
      'pass a short key, e.g. ''account:'' || account_id, or NULL']
    when s.run_timeout <= interval '0' or s.run_timeout > interval '365 days' then array['22023',
      'run_timeout must be more than 0 and at most 365 days, got ' || s.run_timeout,
      'pass the most the whole run (every attempt, waits included) may take, e.g. ''1 hour'', '
      'or NULL for the job type''s']
    when length(s.enqueued_by) not between 1 and 200 then array['22023',
      'enqueued_by must be 1 to 200 characters, got ' || length(s.enqueued_by),
      'pass a short service name, e.g. ''billing-api'', or NULL for application_name']
  end;
end;

-- Who enqueues a job, as jobs.jobs.enqueued_by keeps it: a child is its parent's ('job <id>');
-- else the role (the one SET ROLE chose, else the session's, so a caller cannot name another)
-- with, in parentheses, the label it gave (enqueued_by) or else its application_name.
create function jobs._enqueuer(p_label text, p_parent uuid)
returns text
language sql stable
begin atomic
  select case when p_parent is not null then 'job ' || p_parent
    else coalesce(nullif(current_setting('role'), 'none'), session_user::text)
         || coalesce(' (' || coalesce(p_label, nullif(current_setting('application_name'), '')) || ')', '')
    end;
end;

-- How a refusal of jobs.enqueue or jobs.enqueue_batch names what it refuses: 'jobs.enqueue: '
-- (one job), or '<caller>: spec <n>: '.
create function jobs._spec_ref(p_caller text, p_n int)
returns text
language sql immutable
begin atomic
  select case when p_caller = 'jobs.enqueue' then 'jobs.enqueue: '
              else p_caller || ': spec ' || p_n || ': ' end;
end;

-- The first of p_specs (its ordinal) whose run names a run of another tenant, or NULL. A run
-- belongs to the tenant of its jobs: a job attaches to a run (and may then write its steps)
-- only where no job of that run has another tenant. A job with a caller-allocated id and no
-- run_id starts the run of that id, which another tenant's jobs may have attached to before
-- it existed (and saved steps there): refused too, or each would read the other's steps.
-- Apart from jobs._spec_problem, which must stay a plain expression to be inlined, and called
-- only when a spec has a run_id or an id: the primary key, then jobs_attached_idx.
create function jobs._run_problem(p_specs jobs.job_spec[])
returns int
language plpgsql stable
as $$
begin
  return (select s.ordinality from unnest(p_specs) with ordinality as s
          where coalesce(s.run_id, s.id) is not null
            and (exists (select from jobs_data.jobs as r
                         where r.id = s.run_id and r.tenant_id is distinct from s.tenant_id)
                 or exists (select from jobs_data.jobs as r
                            where r.run_id = coalesce(s.run_id, s.id) and r.run_id <> r.id
                              and r.tenant_id is distinct from s.tenant_id))
          order by s.ordinality limit 1);
end
$$;

-- After an insert: jobs_data.queues lists every queue ever used (queue_stats reads it), and the
-- queues that got a job ready now are woken (jobs._wake). p_deduped marks the specs that
-- inserted nothing (NULL: none did); p_new are the ids of the jobs.
create function jobs._register_and_wake(p_specs jobs.job_spec[], p_deduped boolean[],
                                        p_now timestamptz, p_new uuid[])
returns void
language plpgsql volatile
as $$
declare
  v_lock_timeout text;
begin
  -- A queue named for the first time is registered; its insert waits for another transaction
  -- that registers the same name and has not ended. That wait is bounded (lock_timeout) and
  -- then given up: the other transaction registers it, or the next enqueue to it does (a
  -- producer's open transaction must not hold up every other enqueue to a new queue).
  if exists (select from unnest(p_specs) as s
             where not exists (select from jobs_data.queues as q where q.queue = s.queue)) then
    v_lock_timeout := current_setting('lock_timeout');
    begin
      perform set_config('lock_timeout', '100ms', true);
      insert into jobs_data.queues (queue)
      select distinct s.queue from unnest(p_specs) as s
      where not exists (select from jobs_data.queues as q where q.queue = s.queue)
      on conflict do nothing;
      perform set_config('lock_timeout', v_lock_timeout, true);
    exception when lock_not_available then
      null;  -- the subtransaction's end restored lock_timeout
    end;
  end if;
  perform jobs._wake(array(select distinct s.queue from unnest(p_specs) with ordinality as s
                           where coalesce(s.run_at, p_now) <= p_now
                             and not coalesce(p_deduped[s.ordinality], false)), p_new);
  -- A delayed job is work that comes due: a blocking claim of its queue sleeps until then.
  if exists (select from unnest(p_specs) as s where s.run_at > p_now) then
    perform jobs._signal_work(array(select distinct s.queue from unnest(p_specs) as s where s.run_at > p_now));
  end if;
end
$$;

-- Inserts specs that cannot conflict (no idempotency key, no caller-allocated id) as new jobs
-- with the ids and run ids given: one INSERT, no ON CONFLICT. jobs.enqueue calls it for one
-- job, jobs._enqueue for a batch.
create function jobs._insert_unkeyed(p_specs jobs.job_spec[], p_ids uuid[], p_runs uuid[],
                                     p_now timestamptz, p_parked boolean[] default null)
returns void
language plpgsql volatile
as $$
begin
  insert into jobs_data.jobs as j (id, run_id, name, queue, state, priority, run_at, max_attempts,
                              tenant_id, idempotency_key, concurrency_key, payload,
                              enqueued_at, created_at, updated_at, timeout, parent_id, close_policy,
                              tags, meta, run_timeout, run_deadline, ordering_key, fair_group,
                              enqueued_by, child_key)
  select p_ids[s.ordinality], p_runs[s.ordinality], s.name, s.queue,
         case when s.run_at > p_now or p_parked[s.ordinality] then 'delayed' else 'ready' end::jobs.job_state,
         s.priority,
         case when p_parked[s.ordinality] then 'infinity' else coalesce(s.run_at, p_now) end,
         coalesce(s.max_attempts, p.max_attempts),
         s.tenant_id, null, s.concurrency_key, s.payload, p_now, p_now, p_now, s.timeout,
         s.parent_id, case when s.parent_id is not null then coalesce(s.close_policy, 'terminate') end,
         nullif(s.tags, '{}'), s.meta, coalesce(s.run_timeout, p.run_timeout),
         p_now + coalesce(s.run_timeout, p.run_timeout), s.ordering_key,
         jobs._fair_group(fq.fairness, s.tenant_id, s.concurrency_key),
         jobs._enqueuer(s.enqueued_by, s.parent_id), s.child_key
  from unnest(p_specs) with ordinality as s
  cross join lateral jobs._policy(s.name) as p
  left join jobs_data.queues as fq on fq.queue = s.queue;  -- (fair queues: sql/fairness.sql)
end
$$;

-- After an insert of children (specs with a parent_id; p_deduped marks those that inserted
-- nothing): each parent counts its new live children (sql/children.sql), under its row lock,
-- which orders this with the parent's await_children. A parent must be live and of its
-- children's tenant: else the enqueue is refused, and nothing of it lands.
create function jobs._attach_children(p_specs jobs.job_spec[], p_deduped boolean[], p_caller text)
returns void
language plpgsql volatile
as $$
declare
  v_bad int;
begin
  -- A parent exists before its children: one enqueued by the same call (a job its own parent,
  -- or two that name each other) would make a cycle, whose close policy never ends.
  select min(s.ordinality) into v_bad
  from unnest(p_specs) with ordinality as s
  where s.parent_id is not null and not coalesce(p_deduped[s.ordinality], false)
    and s.parent_id in (select x.id from unnest(p_specs) with ordinality as x
                        where x.id is not null and not coalesce(p_deduped[x.ordinality], false));
  if v_bad is not null then
    perform jobs._raise('22023',
      jobs._spec_ref(p_caller, v_bad)
      || format('parent_id %s is a job of this same call', p_specs[v_bad].parent_id),
      'enqueue the parent first, in an earlier call, then its children');
  end if;
  with wanted as (
    select s.parent_id, s.tenant_id, count(*) as n, min(s.ordinality) as first
    from unnest(p_specs) with ordinality as s
    where s.parent_id is not null and not coalesce(p_deduped[s.ordinality], false)
    group by s.parent_id, s.tenant_id
  ),
  counted as (
    update jobs_data.jobs as p set children_live = coalesce(p.children_live, 0) + w.n
    from wanted as w
    where p.id = any(array(select w2.parent_id from wanted as w2))
      and p.id = w.parent_id and p.tenant_id is not distinct from w.tenant_id
      and p.state in ('ready', 'delayed', 'running', 'suspended')
    returning p.id
  )
  select min(w.first) into v_bad from wanted as w
  where w.parent_id not in (select c.id from counted as c);
  if v_bad is not null then
    perform jobs._raise('22023',
      jobs._spec_ref(p_caller, v_bad)
      || format('parent_id %s is not a live job of this tenant', p_specs[v_bad].parent_id),
      'a child attaches to a ready, delayed, running or suspended job of its own tenant_id');
  end if;
end
$$;

-- Busy keys (jobs_data.job_types.when_busy), for jobs.enqueue and jobs.enqueue_batch: a spec
-- with a concurrency_key (and no parent: a child always lands, its parent counts it) whose
-- job type says
--   'skip'     while the key is at its limit (key_concurrency of its jobs running) inserts
--              nothing and answers the key's running job that started first ('skipped');
--   'replace'  while a job of its name and key waits to start (ready or delayed, never run)
--              gives that job its payload and answers it ('replaced'): at most one waits.
-- The other specs are inserted by jobs._enqueue. One row per spec, in order, as it answers.
--
-- Races: 'skip' reads the running jobs as committed when it looks, and needs no lock: an
-- enqueue that saw the key below its limit is one that came before the claim it raced (the
-- claim could not see its job either). 'replace' must not let two enqueues each find no
-- waiting job and insert one: they take the key's lock slot (2048-3071, none of the claims'
-- slots) until they commit, so the second finds the first's job. The waiting job is updated
-- only while it still waits: a claim that took it meanwhile leaves the update nothing, and
-- the spec is inserted. A claim holding that job as a candidate is waited for; it never waits
-- for these slots, so the wait is no cycle.
create function jobs._enqueue_busy(p_specs jobs.job_spec[], p_caller text)
returns table (ordinal int, id uuid, run_id uuid, deduped boolean, action text)
language plpgsql volatile
as $$
#variable_conflict use_column
declare
  v_n      int := cardinality(p_specs);
  v_now    timestamptz := jobs.clock();
  v_modes  text[];
  v_limits int[];
  v_rest   int[] := '{}';  -- the ordinals of the specs jobs._enqueue inserts
  v_done   int[] := '{}';  -- the ordinals answered here, and what they answer
  v_ids    uuid[] := '{}';
  v_runs   uuid[] := '{}';
  v_acts   text[] := '{}';
  v_dedup  boolean[] := '{}';
  v_spec   jobs.job_spec;
  v_got    record;
  v_id     uuid;
  v_run    uuid;
  v_count  bigint;
begin
  select array_agg(coalesce(t.when_busy, 'queue') order by s.ordinality),
         array_agg(coalesce(t.key_concurrency, 1) order by s.ordinality)
    into v_modes, v_limits
  from unnest(p_specs) with ordinality as s
  left join jobs_data.job_types as t
    on t.name = s.name and s.concurrency_key is not null and s.parent_id is null;
  perform jobs._lock_slots(array_agg(coalesce(s.tenant_id, '')),
                           array_agg(2048 + (hashtext('busy:' || s.concurrency_key) & 1023)), 'wait')
  from unnest(p_specs) with ordinality as s
  where v_modes[s.ordinality] = 'replace'
  having count(*) > 0;

  for v_i in 1 .. v_n loop
    v_spec := p_specs[v_i];
    v_id := null;
    if v_modes[v_i] = 'skip' then
      select (array_agg(j.id order by j.claimed_at, j.id))[1], (array_agg(j.run_id order by j.claimed_at, j.id))[1],
             count(*)
        into v_id, v_run, v_count
      from jobs_data.jobs as j
      where j.concurrency_key = v_spec.concurrency_key and j.state = 'running'
        and coalesce(j.tenant_id, '') = coalesce(v_spec.tenant_id, '') and j.lease_expires_at > v_now;
      if v_count < v_limits[v_i] then
        v_id := null;
      end if;
    elsif v_modes[v_i] = 'replace' then
      update jobs_data.jobs as j set payload = v_spec.payload, updated_at = v_now
      where j.id = (select x.id from jobs_data.jobs as x
                    where x.concurrency_key = v_spec.concurrency_key and x.name = v_spec.name
                      and x.state in ('ready', 'delayed') and x.attempt = 0
                      and coalesce(x.tenant_id, '') = coalesce(v_spec.tenant_id, '')
                    order by x.enqueued_at, x.id limit 1)
        and j.state in ('ready', 'delayed') and j.attempt = 0  -- (still waiting: see the header)
      returning j.id, j.run_id into v_id, v_run;
      if v_id is null then
        -- None waits: this one is inserted now, so that a later spec of the key finds it.
        select e.id, e.run_id, e.deduped, e.action into v_got
        from jobs._enqueue(array[v_spec], p_caller, false) as e;
        v_done := v_done || v_i;
        v_ids := v_ids || v_got.id;
        v_runs := v_runs || v_got.run_id;
        v_dedup := v_dedup || v_got.deduped;
        v_acts := v_acts || v_got.action;
        continue;
      end if;
    end if;
    if v_id is null then
      v_rest := v_rest || v_i;
    else
      v_done := v_done || v_i;
      v_ids := v_ids || v_id;
      v_runs := v_runs || v_run;
      v_dedup := v_dedup || true;
      v_acts := v_acts || case v_modes[v_i] when 'skip' then 'skipped' else 'replaced' end;
    end if;
  end loop;

  return query
  select d.o, d.id, d.run, d.dedup, d.act
  from unnest(v_done, v_ids, v_runs, v_dedup, v_acts) as d(o, id, run, dedup, act)
  union all
  select v_rest[e.ordinal], e.id, e.run_id, e.deduped, e.action
  from jobs._enqueue(array(select p_specs[r.o] from unnest(v_rest) with ordinality as r(o, n) order by r.n),
                     p_caller, false) as e
  where cardinality(v_rest) > 0
  order by 1;
end
$$;

-- Inserts p_specs, answering one row per spec in order: the job and whether it was deduped.
create function jobs._enqueue(p_specs jobs.job_spec[], p_caller text, p_busy boolean default true)
returns table (ordinal int, id uuid, run_id uuid, deduped boolean, action text)
language plpgsql volatile
as $$
#variable_conflict use_column
declare
  v_n        int := coalesce(cardinality(p_specs), 0);
  v_now      timestamptz := jobs.clock();
  v_ids      uuid[];
  v_runs     uuid[];
  r_id       uuid[];
  r_run      uuid[];
  r_dedup    boolean[];
  r_action   text[];
  v_moved    text;     -- the queue of a waiting job a repeat replaced or debounced
  v_parked   boolean[];  -- ordering keys: the specs that wait behind an earlier job of their key
  v_pending  int[];
  v_missed   int[];
  v_spec     jobs.job_spec;
  v_fid      uuid;
  v_frun     uuid;
  v_ften     text;     -- the tenant of the job found under a caller-allocated id
  v_i        int;
  v_pos      int;
  v_ins      record;
  v_problem  text[];
begin
  -- Each spec taken once from the array (unnest in the select list yields it whole):
  -- p_specs[i] in the check would walk the array from the start for every field it reads.
  select x.i into v_i
  from (select unnest(p_specs) as spec, generate_series(1, v_n) as i) as x
  where jobs._spec_problem(x.spec) is not null
  order by x.i limit 1;
  if v_i is not null then
    v_problem := jobs._spec_problem(p_specs[v_i]);
    perform jobs._raise(v_problem[1],
      jobs._spec_ref(p_caller, v_i) || v_problem[2], v_problem[3]);
  end if;
  if exists (select from unnest(p_specs) as s where s.run_id is not null or s.id is not null) then
    -- Version 8 ids are the children's that jobs.spawn derives (jobs._child_id): a producer
    -- that learned a parent's id could otherwise take its children's ids before it spawns them.
    if p_caller <> 'jobs.spawn' then
      select s.ordinality into v_i from unnest(p_specs) with ordinality as s
      where substr(s.id::text, 15, 1) = '8' order by s.ordinality limit 1;
      if v_i is not null then
        perform jobs._raise('22023', jobs._spec_ref(p_caller, v_i)
          || 'id: a version 8 UUID is the id of a child that jobs.spawn makes',
          'pass an id of another version (jobs use UUIDv7: gen_random_uuid() gives a v4)');
      end if;
      -- On a shard, an id names its shard in its last byte (src/functions/ids.rs): an id that
      -- names another would send every later call for the job to that shard.
      if jobs._shard() is not null then
        select s.ordinality into v_i from unnest(p_specs) with ordinality as s
        where s.id is not null and get_byte(uuid_send(s.id), 15) <> jobs._shard()
        order by s.ordinality limit 1;
        if v_i is not null then
          perform jobs._raise('22023', jobs._spec_ref(p_caller, v_i)
            || format('id %s names shard %s, and this server is shard %s (pg_jobs.shard)',
                      p_specs[v_i].id, get_byte(uuid_send(p_specs[v_i].id), 15), jobs._shard()),
            'make the id with jobs.new_id() on this shard, or end it with the byte of this shard '
            '(the last two hex digits: ' || lpad(to_hex(jobs._shard()), 2, '0') || ')');
        end if;
      end if;
    end if;
    v_i := jobs._run_problem(p_specs);
    if v_i is not null then
      perform jobs._raise('22023',
        jobs._spec_ref(p_caller, v_i)
        || format('run_id %s is a run of another tenant',
                  coalesce(p_specs[v_i].run_id, p_specs[v_i].id)),
        'attach a job only to a run of its own tenant_id, or pass NULL to start a new run');
    end if;
  end if;

  -- Busy keys: the specs whose key is busy insert nothing (jobs._enqueue_busy). Looked for in
  -- one statement, which reads jobs_data.job_types only for a spec with a key.
  if p_busy and exists (select from unnest(p_specs) as s
                        join jobs_data.job_types as t on t.name = s.name
                        where s.concurrency_key is not null and s.parent_id is null
                          and t.when_busy <> 'queue') then
    return query select * from jobs._enqueue_busy(p_specs, p_caller);
    return;
  end if;

  -- Ordering keys (sql/ordering.sql): under their rows' locks, a spec whose key has a live job,
  -- or an earlier spec in this call, waits behind it (parked).
  if exists (select from unnest(p_specs) as s where s.ordering_key is not null) then
    perform jobs._ordering_lock(k.queues, k.tenants, k.keys)
    from (select array_agg(s.queue) as queues, array_agg(coalesce(s.tenant_id, '')) as tenants,
                 array_agg(s.ordering_key) as keys
          from unnest(p_specs) as s where s.ordering_key is not null) as k;
    v_parked := array(
      select s.ordering_key is not null
             and (row_number() over (partition by s.queue, coalesce(s.tenant_id, ''), s.ordering_key
                                     order by s.ordinality) > 1
                  or jobs._ordering_live(s.queue, coalesce(s.tenant_id, ''), s.ordering_key))
      from unnest(p_specs) with ordinality as s
      order by s.ordinality);
  end if;

  -- A debounced job runs debounce after its enqueue, unless it names its own run_at. (Looked
  -- for in one statement first: indexing the array element by element costs a batch without
  -- debounce more than the rest of its checks.)
  if exists (select from unnest(p_specs) as s where s.debounce is not null and s.run_at is null) then
    for v_i in 1 .. v_n loop
      if p_specs[v_i].debounce is not null and p_specs[v_i].run_at is null then
        p_specs[v_i].run_at := v_now + p_specs[v_i].debounce;
      end if;
    end loop;
  end if;

  v_ids := array(select coalesce(s.id, jobs._uuid_v7()) from unnest(p_specs) with ordinality s
                 order by s.ordinality);
  -- A new run is named after its first job: run_id = id (see jobs_attached_idx).
  v_runs := array(select coalesce(s.run_id, v_ids[s.ordinality]) from unnest(p_specs) with ordinality s
                  order by s.ordinality);

  -- The common case, with no idempotency key and no caller-allocated id in the batch, cannot
  -- conflict with anything: one INSERT of every spec, and the answer is the ids made above
  -- (docs/BENCHMARKS.md, "What we tried").
  if not exists (select from unnest(p_specs) as s where s.idempotency_key is not null or s.id is not null)
  then
    perform jobs._insert_unkeyed(p_specs, v_ids, v_runs, v_now, v_parked);
    if exists (select from unnest(p_specs) as s where s.parent_id is not null) then
      perform jobs._attach_children(p_specs, null, p_caller);
    end if;
    -- (Nothing here was deduped, so each key's first spec is its current job or waits behind a
    -- live one: only a snapshot older than the key's lock needs the sweep's check.)
    if v_parked is not null and current_setting('transaction_isolation') <> 'read committed' then
      perform jobs._ordering_settled(p_specs);
    end if;
    perform jobs._register_and_wake(p_specs, null, v_now, v_ids);
    return query select o.i, v_ids[o.i], v_runs[o.i], false, 'inserted' from generate_series(1, v_n) as o(i);
    return;
  end if;

  r_id := array_fill(null::uuid, array[v_n]);
  r_run := r_id;
  r_dedup := array_fill(null::boolean, array[v_n]);
  r_action := array_fill(null::text, array[v_n]);
  v_pending := array(select generate_series(1, v_n));

  -- Twice at most: a second miss is not a race (see the header) and is reported.
  for v_round in 1 .. 2 loop
    exit when cardinality(v_pending) = 0;

    for v_ins in
      insert into jobs_data.jobs as j (id, run_id, name, queue, state, priority, run_at, max_attempts,
                                  tenant_id, idempotency_key, concurrency_key, payload,
                                  enqueued_at, created_at, updated_at, timeout, parent_id, close_policy,
                                  tags, meta, run_timeout, run_deadline, ordering_key, fair_group,
                                  enqueued_by, child_key)
      select v_ids[o.i], v_runs[o.i], s.name, s.queue,
             case when s.run_at > v_now or v_parked[o.i] then 'delayed' else 'ready' end::jobs.job_state,
             s.priority,
             case when v_parked[o.i] then 'infinity' else coalesce(s.run_at, v_now) end,
             coalesce(s.max_attempts, p.max_attempts),
             s.tenant_id, s.idempotency_key, s.concurrency_key, s.payload,
             v_now, v_now, v_now, s.timeout,
             s.parent_id, case when s.parent_id is not null then coalesce(s.close_policy, 'terminate') end,
             nullif(s.tags, '{}'), s.meta, coalesce(s.run_timeout, p.run_timeout),
             v_now + coalesce(s.run_timeout, p.run_timeout), s.ordering_key,
             jobs._fair_group(fq.fairness, s.tenant_id, s.concurrency_key),
             jobs._enqueuer(s.enqueued_by, s.parent_id), s.child_key
      from unnest(v_pending) as o(i)
      cross join lateral (select (p_specs[o.i]).*) as s
      cross join lateral jobs._policy(s.name) as p
      left join jobs_data.queues as fq on fq.queue = s.queue
      order by s.name, s.tenant_id, s.idempotency_key, o.i
      on conflict do nothing
      returning j.id, j.run_id
    loop
      v_pos := array_position(v_ids, v_ins.id);
      r_id[v_pos] := v_ins.id;
      r_run[v_pos] := v_ins.run_id;
      r_dedup[v_pos] := false;
      r_action[v_pos] := 'inserted';
    end loop;

    v_missed := '{}';
    foreach v_i in array v_pending loop
      continue when r_dedup[v_i] is not null;
      v_spec := p_specs[v_i];
      v_fid := null;
      -- Nothing inserted under an id the caller allocated: that job is the answer, whatever
      -- its state (the outbox publishing one staged row twice).
      if v_spec.id is not null then
        select j.id, j.run_id, j.tenant_id into v_fid, v_frun, v_ften from jobs_data.jobs j where j.id = v_spec.id;
        -- Another tenant's job is not handed back (nor its run): the id is refused.
        if v_fid is not null and v_ften is distinct from v_spec.tenant_id then
          perform jobs._raise('PJ002', jobs._spec_ref(p_caller, v_i)
            || format('id %s is taken by a job of another tenant', v_spec.id),
            'allocate a new id (a random UUID) for this job');
        end if;
      end if;
      -- A live job of this name, in this tenant, holds the key. Name and tenant are both in
      -- the lookup: without them the answer could be another name's or another tenant's job.
      if v_fid is null and v_spec.idempotency_key is not null then
        if v_spec.tenant_id is null then
          select j.id, j.run_id into v_fid, v_frun from jobs_data.jobs j
          where j.name = v_spec.name and j.tenant_id is null
            and j.idempotency_key = v_spec.idempotency_key
            and j.state in ('ready', 'delayed', 'running', 'suspended');
        else
          select j.id, j.run_id into v_fid, v_frun from jobs_data.jobs j
          where j.name = v_spec.name and j.tenant_id = v_spec.tenant_id
            and j.idempotency_key = v_spec.idempotency_key
            and j.state in ('ready', 'delayed', 'running', 'suspended');
        end if;
        if v_fid is not null and v_spec.on_conflict = 'error' then
          perform jobs._raise('PJ002',
            format('job %L%s already has a live job with idempotency key %L: %s',
                   v_spec.name,
                   coalesce(' of tenant ' || quote_literal(v_spec.tenant_id), ''),
                   v_spec.idempotency_key, v_fid),
            'use on_conflict => ''return'' to get the live job back, or a new key for new work');
        end if;
      end if;
      if v_fid is null then
        v_missed := v_missed || v_i;  -- the holder finished in between: insert again
      else
        r_id[v_i] := v_fid;
        r_run[v_i] := v_frun;
        r_dedup[v_i] := true;
        r_action[v_i] := 'returned';
        -- Replace or debounce a job still waiting to run (ready or delayed), under its row
        -- lock: a claim that holds it is waited for, and then it is running and left alone.
        -- A debounce puts it off by debounce from now, never past its first enqueue plus
        -- debounce_max; both take the new payload.
        if v_spec.on_conflict in ('replace', 'debounce') and v_spec.id is null then
          v_moved := null;
          -- A job waiting behind its ordering key takes the payload and keeps its place.
          update jobs_data.jobs as j set
            payload = v_spec.payload,
            run_at = case when j.run_at = 'infinity' then j.run_at else x.run_at end,
            state = case when j.run_at = 'infinity' or x.run_at > v_now then 'delayed'
                         else 'ready' end::jobs.job_state,
            updated_at = v_now
          from (select case when v_spec.on_conflict = 'replace' then coalesce(v_spec.run_at, v_now)
                            else least(v_now + v_spec.debounce,
                                       (select f.enqueued_at from jobs_data.jobs as f where f.id = v_fid)
                                         + coalesce(v_spec.debounce_max, interval '100 years'))
                       end as run_at) as x
          where j.id = v_fid and j.state in ('ready', 'delayed')
          returning j.queue into v_moved;
          if v_moved is not null then
            r_action[v_i] := case when v_spec.on_conflict = 'replace' then 'replaced' else 'debounced' end;
            perform jobs._signal_work(array[v_moved]);  -- ready now, or due at another time
          end if;
        end if;
      end if;
    end loop;
    v_pending := v_missed;
  end loop;

  if exists (select from unnest(p_specs) as s where s.parent_id is not null) then
    perform jobs._attach_children(p_specs, r_dedup, p_caller);
  end if;
  if v_parked is not null then
    perform jobs._ordering_settled(p_specs);
  end if;
  perform jobs._register_and_wake(p_specs, r_dedup, v_now, r_id);

  if cardinality(v_pending) > 0 then
    perform jobs._raise('40001',
      p_caller || ': the idempotency key of spec ' || v_pending[1]
        || ' was taken and freed twice while this call ran',
      'retry the call; it is safe, nothing was inserted twice');
  end if;

  return query select o.i, r_id[o.i], r_run[o.i], r_dedup[o.i], r_action[o.i]
               from generate_series(1, v_n) as o(i);
end
$$;

-- One job: through jobs._enqueue when it has a key or an id of its own. In PL/pgSQL, not SQL:
-- a SECURITY DEFINER SQL function is never inlined, so it parsed and planned its statement on
-- every call, where PL/pgSQL keeps the plan (single enqueues ran 13-23% faster;
-- docs/BENCHMARKS.md).
create function jobs.enqueue(
  name            text,
  payload         jsonb       default '{}',
  queue           text        default 'default',
  run_at          timestamptz default null,
  priority        int         default 0,
  max_attempts    int         default null,
  idempotency_key text        default null,
  tenant_id       text        default null,
  concurrency_key text        default null,
  on_conflict     text        default 'return',
  id              uuid        default null,
  run_id          uuid        default null,
  parent_id       uuid        default null,
  debounce        interval    default null,
  debounce_max    interval    default null,
  tags            text[]      default null,
  meta            jsonb       default null,
  run_timeout     interval    default null,
  ordering_key    text        default null,
  enqueued_by     text        default null
) returns jobs.enqueued
language plpgsql volatile
as $$
declare
  v_spec    jobs.job_spec := row($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, null, $13, null,
                                 $14, $15, $16, $17, $18, $19, $20, null);
  v_problem text[];
  v_now     timestamptz;
  r         jobs.enqueued;
begin
  -- A job with no idempotency key, no id of its own and no run to attach to cannot conflict
  -- and needs no run check: the same check, ids, insert and wake-up as jobs._enqueue, without
  -- the batch's statements around them (single enqueues ran 20% faster; docs/BENCHMARKS.md).
  if enqueue.idempotency_key is null and enqueue.id is null and enqueue.run_id is null
     and enqueue.parent_id is null and enqueue.ordering_key is null
     and (enqueue.concurrency_key is null
          or not exists (select from jobs_data.job_types as t
                         where t.name = enqueue.name and t.when_busy <> 'queue')) then
    v_problem := jobs._spec_problem(v_spec);
    if v_problem is not null then
      perform jobs._raise(v_problem[1], 'jobs.enqueue: ' || v_problem[2], v_problem[3]);
    end if;
    v_now := jobs.clock();
    r.id := jobs._uuid_v7();
    r.run_id := r.id;  -- a new run is named after its first job
    r.deduped := false;
    r.action := 'inserted';
    perform jobs._insert_unkeyed(array[v_spec], array[r.id], array[r.run_id], v_now);
    perform jobs._register_and_wake(array[v_spec], null, v_now, array[r.id]);
    return r;
  end if;
  select e.id, e.run_id, e.deduped, e.action into r
  from jobs._enqueue(array[v_spec], 'jobs.enqueue') as e;
  return r;
end
$$;
comment on function jobs.enqueue is
  'Enqueue one job. Returns (id, run_id, deduped, action); deduped is true when a live job of the '
  'same name and tenant already holds idempotency_key (or the caller-allocated id exists), and '
  'action says what was done: inserted, returned, replaced, debounced or skipped (when_busy).';

-- jobs.enqueue_batch, and jobs.spawn's enqueue of a child, named in refusals as p_caller.
create function jobs._enqueue_json(specs jsonb, p_caller text)
returns table (ordinal int, id uuid, run_id uuid, deduped boolean, action text)
language plpgsql volatile
as $$
#variable_conflict use_column
declare
  v_specs jobs.job_spec[];
  v_bad   text;
begin
  if specs is null then
    perform jobs._raise('22004', p_caller || ': specs must not be NULL',
      'pass a JSON array of job objects, e.g. ''[{"name": "send_email"}]''');
  elsif jsonb_typeof(specs) <> 'array' then
    perform jobs._raise('22023', p_caller || ': specs must be a JSON array, got '
      || jsonb_typeof(specs), 'wrap the job objects in [ ]');
  elsif jsonb_array_length(specs) > 10000 then
    perform jobs._raise('22023', p_caller || ': at most 10000 specs per call, got '
      || jsonb_array_length(specs), 'split the batch');
  end if;

  select format('spec %s is a JSON %s, not an object', e.ord, jsonb_typeof(e.spec)) into v_bad
  from jsonb_array_elements(specs) with ordinality as e(spec, ord)
  where jsonb_typeof(e.spec) <> 'object' order by e.ord limit 1;
  if v_bad is null then
    select format('spec %s has unknown key %L', e.ord, k.key) into v_bad
    from jsonb_array_elements(specs) with ordinality as e(spec, ord)
    cross join lateral jsonb_object_keys(e.spec) as k(key)
    where k.key not in ('name', 'payload', 'queue', 'run_at', 'priority', 'max_attempts',
                        'idempotency_key', 'tenant_id', 'concurrency_key', 'on_conflict',
                        'id', 'run_id', 'timeout', 'parent_id', 'close_policy', 'debounce',
                        'debounce_max', 'tags', 'meta', 'run_timeout', 'ordering_key', 'enqueued_by')
      and not (k.key = 'child_key' and p_caller = 'jobs.spawn')  -- (its own: jobs.spawn)
    order by e.ord limit 1;
  end if;
  if v_bad is not null then
    perform jobs._raise('22023', p_caller || ': ' || v_bad,
      'each spec is an object with the keys of jobs.enqueue''s arguments');
  end if;

  begin
    -- Missing or null keys take jobs.enqueue's defaults.
    v_specs := array(
      select row(r.name, coalesce(r.payload, '{}'), coalesce(r.queue, 'default'), r.run_at,
                 coalesce(r.priority, 0), r.max_attempts, r.idempotency_key, r.tenant_id,
                 r.concurrency_key, coalesce(r.on_conflict, 'return'), r.id, r.run_id,
                 r.timeout, r.parent_id, r.close_policy, r.debounce, r.debounce_max, r.tags, r.meta,
                 r.run_timeout, r.ordering_key, r.enqueued_by, r.child_key)::jobs.job_spec
      from jsonb_array_elements(specs) with ordinality as e(spec, ord)
      cross join lateral jsonb_populate_record(null::jobs.job_spec, e.spec) as r
      order by e.ord);
  exception when data_exception then
    perform jobs._raise('22023', p_caller || ': a spec has a value of the wrong type: ' || sqlerrm,
      'run_at is a timestamp, priority and max_attempts integers, id, run_id and parent_id UUIDs, '
      'timeout, debounce, debounce_max and run_timeout intervals, tags an array of strings, meta an object');
  end;

  return query select * from jobs._enqueue(v_specs, p_caller);
end
$$;

create function jobs.enqueue_batch(specs jsonb)
returns table (ordinal int, id uuid, run_id uuid, deduped boolean, action text)
language sql volatile
as $$ select * from jobs._enqueue_json(specs, 'jobs.enqueue_batch') $$;
comment on function jobs.enqueue_batch(jsonb) is
  'Enqueue a JSON array of jobs (objects with jobs.enqueue''s argument names) in one call; '
  'answers (ordinal, id, run_id, deduped, action) per spec, ordinal counting from 1';
