-- Child jobs: jobs.spawn, jobs.await_children, and the close policy.
--
-- A child records its parent (parent_id) and what happens to it when the parent ends failed,
-- dead or cancelled (close_policy): 'terminate' (the default) cancels it, in the same
-- transaction, and its own live children with it; 'abandon' lets it carry on. The parent
-- counts its live children (children_live), changed under its row lock: by the enqueue of a
-- child (jobs._attach_children, for spawn and for producers' jobs.enqueue(..., parent_id)), and
-- at the end of every statement in which a child starts or stops being live (any path:
-- complete, complete_many, fail, cancel, a claim's or the sweep's burial, a requeue, a delete;
-- the triggers below), which also wakes a parent waiting in jobs.await_children when the
-- count reaches 0.
--
-- Why a count on the parent row, and not a look at the children: two children ending at once
-- would each see the other still live (neither committed) and neither would wake the parent;
-- and a parent deciding to wait would not see a child ending now. Every change of the count
-- is an UPDATE of the parent row, so they queue on its lock and each applies to the newest
-- count (READ COMMITTED re-reads it; REPEATABLE READ refuses with a serialization failure, to
-- be retried), and await_children decides under the same lock.
--
-- Lock order: a child's row, then its parent's. A statement that ends children of several
-- parents locks all its children first (the statement's rows), then the parents, at its end,
-- in id order (src/commit/children.rs): two such statements cannot deadlock on them.

-- A waiting parent: suspended with wait_event 'pg_jobs.children' and no wait_key, which no
-- publish can match (publish compares a key, '' for none), nor run_at, so no claim takes it.

-- The row trigger on jobs_data.jobs: a child that stops or starts being live notes the move of
-- its parent's count (jobs._family_note, src/commit/children.rs), which the statement's end applies
-- (jobs._family_apply); a parent that ends failed, dead or cancelled cancels, in one statement,
-- every live descendant that its 'terminate' policy reaches (a child, its own 'terminate'
-- children, and so on; an 'abandon' child and what hangs below it carry on), each holder
-- fenced: its claim advances (jobs._cascade_cancel). No recursion: the descendants' own firings
-- of this trigger find nothing left to cancel, so its depth does not grow with the family's,
-- and the cost is linear in the family's size (a cycle, which enqueue refuses, would be walked
-- once).
create function jobs._family_changed()
returns trigger
language plpgsql volatile
as $$
declare
  v_was   boolean;  -- the row was live before
  v_is    boolean;  -- and is now
begin
  v_was := tg_op <> 'INSERT' and old.state in ('ready', 'delayed', 'running', 'suspended');
  v_is := tg_op = 'UPDATE' and new.state in ('ready', 'delayed', 'running', 'suspended');
  if tg_op = 'DELETE' then
    new := old;
  end if;
  if new.parent_id is not null and v_was <> v_is then
    perform jobs._family_note(new.parent_id, case when v_is then 1 else -1 end);
  end if;
  if tg_op = 'UPDATE' and old.children_live > 0 and v_was
     and new.state in ('failed', 'dead', 'cancelled') then
    perform jobs._cascade_cancel(new.id);
  end if;
  return null;
end
$$;

-- Cancels the live descendants of p_parent that its 'terminate' policy reaches (a child, its
-- own 'terminate' children, and so on), each holder fenced: its claim advances. In the
-- sweeper, a descendant another transaction holds is left for a later sweep, which the
-- parent's mark in jobs_data.family_pending (a move of 0) asks for (jobs._family_pending_apply):
-- the sweeper never waits on a row a client holds.
create function jobs._cascade_cancel(p_parent uuid)
returns void
language plpgsql volatile
as $$
declare
  v_now timestamptz := jobs.clock();
  v_all uuid[];
  v_ids uuid[];
  v_n   bigint;
begin
  v_all := array(
    with recursive reached (id) as (
      select c.id from jobs_data.jobs as c
      where c.parent_id = p_parent and c.close_policy = 'terminate'
        and c.state in ('ready', 'delayed', 'running', 'suspended')
      union
      select c.id from reached as r
      join jobs_data.jobs as c on c.parent_id = r.id
      where c.close_policy = 'terminate' and c.state in ('ready', 'delayed', 'running', 'suspended')
    )
    select r.id from reached as r);
  if cardinality(v_all) = 0 then
    return;
  end if;
  v_ids := v_all;
  if jobs._in_background_worker() then
    v_ids := array(select x.id from jobs_data.jobs as x where x.id = any(v_all)
                   order by x.id for no key update skip locked);
    if cardinality(v_ids) < cardinality(v_all) then
      insert into jobs_data.family_pending (parent_id, delta) values (p_parent, 0);
    end if;
  end if;
  with closed as (
    update jobs_data.jobs as c set
      state = 'cancelled', claim = jobs._next_claim(c.claim), lease_expires_at = null,
      wait_event = null, wait_key = null, wait_until = null, finished_at = v_now,
      updated_at = jobs._cancelling(c.id, c.state = 'running', v_now)
    where c.id = any(v_ids)
      and c.state in ('ready', 'delayed', 'running', 'suspended')
    returning jobs._outcome(c.queue, 'cancelled') and jobs._slot_freed(c.name, c.concurrency_key) as counted
  )
  select count(*) into v_n from closed;
end
$$;

-- The end of a statement that moved children (src/commit/children.rs): each parent's count of live
-- children moves by the sum of its children's moves, one parent after the other in id order
-- (p_parents comes sorted), and a parent waiting in jobs.await_children whose last child ended
-- is woken.
create function jobs._family_apply(p_parents uuid[], p_deltas int[])
returns void
language plpgsql volatile
as $$
declare
  v_now   timestamptz := jobs.clock();
  v_queue text;
  v_skip  boolean := jobs._in_background_worker();
begin
  for i in 1 .. coalesce(cardinality(p_parents), 0) loop
    -- The sweeper never waits on a parent another transaction holds: the move waits in
    -- jobs_data.family_pending for a later sweep (jobs._family_pending_apply).
    if v_skip then
      perform from jobs_data.jobs as p where p.id = p_parents[i] for no key update skip locked;
      if not found then
        insert into jobs_data.family_pending (parent_id, delta) values (p_parents[i], p_deltas[i]);
        continue;
      end if;
    end if;
    update jobs_data.jobs as p set
      children_live = greatest(coalesce(p.children_live, 0) + p_deltas[i], 0),
      state = case when coalesce(p.children_live, 0) + p_deltas[i] <= 0 and p.state = 'suspended'
                        and p.wait_event = 'pg_jobs.children' then 'ready' else p.state end,
      run_at = case when coalesce(p.children_live, 0) + p_deltas[i] <= 0 and p.state = 'suspended'
                         and p.wait_event = 'pg_jobs.children' then v_now else p.run_at end,
      wait_event = case when coalesce(p.children_live, 0) + p_deltas[i] <= 0 and p.state = 'suspended'
                             and p.wait_event = 'pg_jobs.children' then null else p.wait_event end,
      updated_at = v_now
    where p.id = p_parents[i]
    returning case when p.state = 'ready' and p.run_at = v_now then p.queue end into v_queue;
    if v_queue is not null then
      perform jobs._wake(array[v_queue], array[p_parents[i]]);  -- its last child ended
    end if;
  end loop;
end
$$;

-- The triggers that run it: sql/children_triggers.sql (the install and the upgrade run it).

-- In each sweep: the moves in jobs_data.family_pending of parents no other transaction holds
-- now, applied and deleted (and those of parents gone, deleted); how many parents moved.
create function jobs._family_pending_apply(p_max int)
returns bigint
language plpgsql volatile
as $$
declare
  v_parents uuid[];
  v_deltas  int[];
begin
  delete from jobs_data.family_pending as f
  where not exists (select from jobs_data.jobs as j where j.id = f.parent_id);
  with locked as (
    select p.id from jobs_data.jobs as p
    where p.id in (select distinct f.parent_id from jobs_data.family_pending as f limit p_max)
    order by p.id
    for no key update skip locked
  ),
  taken as (
    delete from jobs_data.family_pending as f using locked as l
    where f.parent_id = l.id
    returning f.parent_id, f.delta
  )
  select array_agg(t.parent_id order by t.parent_id), array_agg(t.delta order by t.parent_id)
    into v_parents, v_deltas
  from (select t.parent_id, sum(t.delta)::int as delta from taken as t group by t.parent_id) as t;
  perform jobs._family_apply(v_parents, v_deltas);
  -- Descendants a sweep's cascade left (held then by another transaction): cancelled now, or
  -- marked again for the next sweep.
  perform jobs._cascade_cancel(p.id)
  from jobs_data.jobs as p
  where p.id = any(v_parents) and p.state in ('failed', 'dead', 'cancelled');
  return coalesce(cardinality(v_parents), 0);
end
$$;

-- A child's id: a version 8 UUID (RFC 9562's for ids of an application's own making), which
-- only jobs.spawn may enqueue (jobs._enqueue). Its first 48 bits are those of p_at, a UUIDv7
-- made at the spawn (the time in milliseconds), so that children's ids sort in enqueue order
-- among the others; its last byte is its parent's, which on a shard names the shard
-- (src/functions/ids.rs), so a child lives where its parent does and a router finds it by its
-- id; the rest is the digest of its parent's id and its key, which jobs._child_digest reads
-- back.
create function jobs._child_id(p_parent uuid, p_key text, p_at uuid)
returns uuid
language sql immutable parallel safe
begin atomic
  select overlay(overlay(overlay(overlay(md5(p_parent::text || '/' || p_key)
                                         placing substr(replace(p_at::text, '-', ''), 1, 12) from 1 for 12)
                                 placing '8' from 13 for 1)
                         placing '8' from 17 for 1)
                 placing right(p_parent::text, 2) from 31 for 2)::uuid;
end;

create function jobs.spawn(id uuid, claim bigint, spec jsonb)
returns jobs.enqueued
language plpgsql volatile
as $$
declare
  v_parent record;
  v_key    text;
  v_policy text;
  v_spec   jsonb;
  v_row    record;
  v_child  record;
  v_id     uuid;
begin
  perform jobs._check_hold_args('jobs.spawn', spawn.id, spawn.claim);
  if spec is null then
    perform jobs._raise('22004', 'jobs.spawn: spec must not be NULL',
      'pass the child as a JSON object with a child_key, e.g. ''{"name": "resize", "child_key": "img-1"}''');
  elsif jsonb_typeof(spec) <> 'object' then
    perform jobs._raise('22023', 'jobs.spawn: spec must be a JSON object, got ' || jsonb_typeof(spec),
      'pass one child as an object with enqueue_batch''s keys and a child_key');
  end if;
  v_key := spec->>'child_key';
  v_policy := coalesce(spec->>'close_policy', 'terminate');
  if v_key is null then
    perform jobs._raise('22023', 'jobs.spawn: spec needs a child_key',
      'name the child within its parent, e.g. "child_key": "item-17": a parent that runs again '
      'and spawns the same key gets the same child back');
  elsif octet_length(v_key) not between 1 and 200 then
    perform jobs._raise('22023', 'jobs.spawn: child_key must be 1 to 200 bytes, got ' || octet_length(v_key),
      'use a short key, unique among the parent''s children');
  elsif v_policy not in ('terminate', 'abandon') then
    perform jobs._raise('22023', format('jobs.spawn: close_policy must be ''terminate'' or ''abandon'', got %L',
      v_policy), '''terminate'' (the default) cancels the child when the parent ends failed, dead '
      'or cancelled; ''abandon'' lets it carry on');
  elsif spec ?| array['id', 'on_conflict', 'idempotency_key', 'parent_id', 'debounce', 'debounce_max'] then
    perform jobs._raise('22023',
      'jobs.spawn: a child''s spec takes no id, idempotency_key, on_conflict, debounce or parent_id',
      'its child_key makes it idempotent (the same key gives the same child), and its parent is '
      'the job spawning it');
  end if;

  -- The fence (jobs._hold), under the parent's row lock (FOR UPDATE: its count of live
  -- children changes below), held until this transaction ends, so a cancel of the parent waits
  -- for it.
  select h.tenant_id into v_parent
  from jobs._hold('jobs.spawn: ', spawn.id, spawn.claim, true,
    'stop working on this job and roll back',
    ', and spawns with the same child_key get the children spawned so far') as h;
  if spec ? 'tenant_id' and spec->>'tenant_id' is distinct from v_parent.tenant_id then
    perform jobs._raise('22023', 'jobs.spawn: a child has its parent''s tenant_id',
      'leave tenant_id out of the spec');
  end if;

  -- The child's id carries its parent's and key's digest (a caller-allocated id,
  -- jobs._child_id): one child per key, whatever its state. A parent that runs again, or
  -- spawns the key again, finds the child it has by that digest (jobs_children_idx), under the
  -- parent's row lock taken above, so two spawns of one key never race; a new child's id
  -- starts with the time of its spawn. No producer may enqueue an id of its kind (version 8).
  -- The enqueue counts it among the parent's live children (jobs._attach_children).
  v_id := jobs._child_id(spawn.id, v_key, jobs._uuid_v7());
  v_id := coalesce((select c.id from jobs_data.jobs as c
                    where c.parent_id = spawn.id and jobs._child_digest(c.id) = jobs._child_digest(v_id)),
                   v_id);
  v_spec := spec
            || jsonb_build_object('id', v_id,
                                  'tenant_id', v_parent.tenant_id, 'parent_id', spawn.id,
                                  'close_policy', v_policy);
  select e.id, e.run_id, e.deduped into v_row
  from jobs._enqueue_json(jsonb_build_array(v_spec), 'jobs.spawn') as e;
  if v_row.deduped then
    select c.parent_id into v_child from jobs_data.jobs as c where c.id = v_row.id;
    if v_child.parent_id is distinct from spawn.id then
      perform jobs._raise('PJ002', format('jobs.spawn: the id of child %L, %s, is held by a job '
        'that is not a child of job %s', v_key, v_row.id, spawn.id),
        'use another child_key; the job holding that id was enqueued with it by a producer');
    end if;
  end if;
  return row(v_row.id, v_row.run_id, v_row.deduped,
             case when v_row.deduped then 'returned' else 'inserted' end)::jobs.enqueued;
end
$$;
comment on function jobs.spawn(uuid, bigint, jsonb) is
  'Enqueue a child of a held job (spec as enqueue_batch''s, with a child_key and a close_policy); '
  'the same key gives the same child back; raises lease_lost when the claim is no longer held';

create function jobs.await_children(id uuid, claim bigint)
returns table (status text, children jsonb)
language plpgsql volatile
as $$
#variable_conflict use_column
declare
  v_live  int;
  v_now   timestamptz := jobs.clock();
begin
  perform jobs._check_hold_args('jobs.await_children', await_children.id, await_children.claim);
  -- Under the parent's row lock, which every change of its count of live children waits for.
  select h.children_live into v_live
  from jobs._hold('jobs.await_children: ', await_children.id, await_children.claim, true,
    'stop working on this job') as h;
  -- The sweep's moves not yet applied (jobs_data.family_pending) count too.
  v_live := coalesce(v_live, 0) + coalesce((select sum(f.delta) from jobs_data.family_pending as f
                                             where f.parent_id = await_children.id), 0);
  if v_live <= 0 then
    return query
    select 'done'::text,
           coalesce(jsonb_agg(jsonb_build_object('id', c.id, 'name', c.name, 'state', c.state,
                                                 'result', c.result, 'error', c.last_error)
                              order by c.enqueued_at, c.id), '[]'::jsonb)
    from jobs_data.jobs as c
    where c.parent_id = await_children.id;
    return;
  end if;
  -- Suspend until the last child ends: no attempt used, the claim released.
  update jobs_data.jobs as j set
    state = 'suspended', attempt = j.attempt - 1, lease_expires_at = null, run_at = null,
    wait_event = 'pg_jobs.children', wait_key = null, wait_until = null, updated_at = v_now
  where j.id = await_children.id
    and jobs._slot_freed(j.name, j.concurrency_key);
  return query select 'waiting'::text, null::jsonb;
end
$$;
comment on function jobs.await_children(uuid, bigint) is
  '''done'' with every child''s id, name, state, result and error once none is live; else '
  'suspend the job (no attempt used) until its last child ends (''waiting'')';
