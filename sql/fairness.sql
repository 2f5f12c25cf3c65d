-- Fair queues: a claim shares a queue among groups of jobs, so one group's backlog cannot
-- starve the others (jobs_data.queues.fairness; jobs.set_fairness).
--
--   'none'             claim order: priority desc, then run_at (the default)
--   'tenant'           the groups are tenants (jobs without one are a group of their own)
--   'concurrency_key'  the groups are concurrency keys (jobs without one are a group)
--
-- A job of a fair queue carries its group (jobs_data.jobs.fair_group, set by enqueue and
-- requeue, and for the queue's live jobs when its fairness changes), and its ready jobs are in
-- jobs_fair_idx, per group in claim order. That index is made when a queue is first made fair
-- (by the trigger below, as the tables' owner), not by the install: each index of the table
-- costs every statement that writes a job its opening, and a database without fair queues
-- pays nothing for them. (A restore makes it again: the queues' rows come back through the
-- trigger.) A claim of N jobs from a fair queue (jobs._fair_ready):
--   1. makes the queue's due delayed and suspended jobs ready (as the sweep makes a timed-out
--      waiter ready), so they wait for their group's turn like the others;
--   2. finds up to N groups that have ready jobs, one index entry each (a loose index scan),
--      starting after the last group this connection's previous claim of the queue reached,
--      and round again from the first (so every group gets its turn, however many there are);
--   3. takes turns: each group's first job, then each group's second, ... up to N jobs;
--   4. fills what is left of N in claim order, when the groups found have too few jobs.
-- Within a group, priority and run_at order the jobs as they do a queue.
--
-- A change of a queue's fairness regroups its live jobs in the changing transaction; an
-- enqueue open meanwhile gives its job the grouping it read, and the sweep regroups such a job
-- once every transaction open at the change has ended (jobs._fair_sweep).
--
-- A claim of a queue without fairness reads none of this: its statement skips the fair scan
-- by the queue's row, which it reads anyway (paused), and enqueue writes fair_group NULL,
-- which no index holds.

-- The group of a job of a tenant and concurrency key in a queue of this fairness; NULL without
-- fairness. A plain expression, so the planner inlines it (a subquery in it would stop that,
-- and plan the function on every call): the inserts of sql/enqueue.sql join the queue's row.
create function jobs._fair_group(p_fairness text, p_tenant text, p_key text)
returns text
language sql immutable
begin atomic
  select case p_fairness when 'tenant' then coalesce(p_tenant, '')
                         when 'concurrency_key' then coalesce(p_key, '') end;
end;

-- Checks a queue's fairness when a row of jobs_data.queues is written (jobs.set_fairness, or an
-- admin's INSERT or UPDATE of jobs.queues), makes jobs_fair_idx for the first fair queue, and
-- gives the queue's live jobs their group. Runs as its owner (sql/privileges.sql), who owns
-- the tables.
create function jobs._queue_fairness_set()
returns trigger
language plpgsql volatile
as $$
begin
  if new.fairness is null or new.fairness not in ('none', 'tenant', 'concurrency_key') then
    perform jobs._raise(case when new.fairness is null then '22004' else '22023' end,
      format('fairness of queue %L must be ''none'', ''tenant'' or ''concurrency_key'', got %s',
             new.queue, coalesce(quote_literal(new.fairness), 'NULL')),
      '''tenant'' and ''concurrency_key'' make claims take turns among those groups; ''none'' '
      'claims in priority order');
  end if;
  if new.fairness <> 'none' and to_regclass('jobs_data.jobs_fair_idx') is null then
    -- Building it holds off writes of jobs until this transaction ends (a scan of the table,
    -- once: no job has a group yet).
    create index jobs_fair_idx on jobs_data.jobs (queue, fair_group, priority desc, run_at)
      where state = 'ready' and fair_group is not null;
  end if;
  if (tg_op = 'INSERT' and new.fairness <> 'none') or (tg_op = 'UPDATE' and old.fairness <> new.fairness) then
    -- The live jobs already there (a running one may come back by a retry). One statement,
    -- under the rows' locks: it waits for a claim or settle that holds one.
    update jobs_data.jobs as j set fair_group = jobs._fair_group(new.fairness, j.tenant_id, j.concurrency_key)
    where j.queue = new.queue and j.state in ('ready', 'delayed', 'running', 'suspended')
      and j.fair_group is distinct from jobs._fair_group(new.fairness, j.tenant_id, j.concurrency_key);
    -- An enqueue open now gives its job the old grouping: the sweep regroups after it ends.
    insert into jobs_data.fair_pending as p (queue) values (new.queue)
    on conflict on constraint fair_pending_pkey do update set waiting_for = null;
  end if;
  return new;
end
$$;

-- The refusals of a queue's name given to a function that may make the queue known.
create function jobs._check_queue_name(p_fn text, p_queue text)
returns void
language plpgsql immutable
as $$
begin
  if p_queue is null then
    perform jobs._raise('22004', p_fn || ': queue must not be NULL', 'name the queue, e.g. ''default''');
  elsif length(p_queue) not between 1 and 128 then
    perform jobs._raise('22023', p_fn || ': queue must be 1 to 128 characters, got ' || length(p_queue),
      'name the queue, e.g. ''default''');
  end if;
end
$$;

create function jobs.set_fairness(queue text, fairness text)
returns text
language plpgsql volatile
as $$
begin
  perform jobs._check_queue_name('jobs.set_fairness', set_fairness.queue);
  -- (the trigger checks fairness and regroups the queue's live jobs)
  insert into jobs_data.queues as q (queue, fairness) values (set_fairness.queue, set_fairness.fairness)
  on conflict on constraint queues_pkey do update set fairness = excluded.fairness;
  return format('queue %L: %s', set_fairness.queue,
                case set_fairness.fairness when 'none' then 'claims take jobs in priority order'
                     else format('claims take turns among its %ss', set_fairness.fairness) end);
end
$$;
comment on function jobs.set_fairness(text, text) is
  'How claims share a queue: ''none'' (priority order), ''tenant'' or ''concurrency_key'' (those '
  'groups take turns, so no group''s backlog starves another)';

-- Up to p_max groups of the queue that have ready jobs, in order, from p_first (a group that
-- has them) on, none past p_upto (NULL: no bound). A loose index scan of jobs_fair_idx: one
-- descent per group, whatever its backlog. (PL/pgSQL, so its plan is kept per connection: a
-- SQL function's is made again on every call.)
create function jobs._fair_groups(p_queue text, p_first text, p_upto text, p_max int)
returns text[]
language plpgsql stable
as $$
begin
  return (
    with recursive g(grp, n) as (
      select p_first, 1
      union all
      select (select j.fair_group from jobs_data.jobs as j
              where j.queue = p_queue and j.state = 'ready' and j.fair_group is not null
                and j.fair_group > g.grp
              order by j.fair_group limit 1), g.n + 1
      from g where g.grp is not null and g.n < p_max and (p_upto is null or g.grp < p_upto)
    )
    select coalesce(array_agg(g.grp order by g.n), '{}') from g
    where g.grp is not null and (p_upto is null or g.grp <= p_upto));
end
$$;

-- The candidates of a claim of up to p_max jobs from a fair queue (see the header), locked
-- (FOR UPDATE SKIP LOCKED) as jobs.claim's scans lock theirs, with each one's turn: the
-- round-robin round it was taken in (the jobs that fill the batch come after every round).
-- p_tenants: the tenants a bound worker may claim for (NULL: any).
create function jobs._fair_ready(p_queue text, p_fairness text, p_tenants text[], p_max int,
                                 p_now timestamptz)
returns table (id uuid, name text, priority int, run_at timestamptz, concurrency_key text,
               bury boolean, turn bigint)
language plpgsql volatile
as $$
#variable_conflict use_column
declare
  -- Where this connection's last claim of the queue stopped among its groups: a setting of
  -- the connection, so claimers never write a shared row to take turns. (A role that sets it
  -- itself moves its own start, nothing else.)
  v_cursor text := 'pg_jobs_fair.q' || (hashtext(p_queue) & 2147483647);
  v_after  text := nullif(current_setting(v_cursor, true), '');
  v_first  text;
  v_groups text[];
  v_ids    uuid[];
  v_turns  bigint[];
  v_k      int;
begin
  -- 1. Due jobs wait for their turn too (each is made ready once).
  update jobs_data.jobs as j set state = 'ready', updated_at = p_now
  where j.ctid = any(array(
      select d.ctid from jobs_data.jobs as d
      where d.queue = p_queue and d.state in ('delayed', 'suspended') and d.run_at <= p_now
        and (p_tenants is null or d.tenant_id = any(p_tenants))
      order by d.run_at limit greatest(p_max, 100) for update skip locked))
    and j.state in ('delayed', 'suspended');

  -- 2. The groups whose turn it is.
  if p_fairness = 'tenant' and p_tenants is not null then
    -- A bound worker's groups are its tenants (those with nothing ready take no job).
    v_groups := array(select t.tenant from unnest(p_tenants) as t(tenant)
                      order by t.tenant <= coalesce(v_after, ''), t.tenant limit p_max);
  else
    if v_after is null then
      select j.fair_group into v_first from jobs_data.jobs as j
      where j.queue = p_queue and j.state = 'ready' and j.fair_group is not null
      order by j.fair_group limit 1;
    else
      select j.fair_group into v_first from jobs_data.jobs as j
      where j.queue = p_queue and j.state = 'ready' and j.fair_group is not null
        and j.fair_group > v_after
      order by j.fair_group limit 1;
    end if;
    v_groups := case when v_first is not null then jobs._fair_groups(p_queue, v_first, null, p_max)
                     else '{}' end;
    if cardinality(v_groups) < p_max and v_after is not null then
      -- Round again from the first group, up to where this round started.
      select j.fair_group into v_first from jobs_data.jobs as j
      where j.queue = p_queue and j.state = 'ready' and j.fair_group is not null
      order by j.fair_group limit 1;
      if v_first is not null and v_first <= v_after then
        v_groups := v_groups || jobs._fair_groups(p_queue, v_first, v_after, p_max - cardinality(v_groups));
      end if;
    end if;
  end if;

  -- 3. Turns: up to v_k jobs of each group, the first of every group before any second.
  if cardinality(v_groups) > 0 then
    perform set_config(v_cursor, v_groups[cardinality(v_groups)], false);
    v_k := ceil(p_max::numeric / cardinality(v_groups));
    select array_agg(x.id order by x.turn, x.pos), array_agg(x.turn order by x.turn, x.pos)
      into v_ids, v_turns
    from (
      select c.id, c.pos, row_number() over (partition by c.pos order by c.priority desc, c.run_at) as turn
      from unnest(v_groups) with ordinality as g(grp, pos)
      cross join lateral (
        select j.id, j.priority, j.run_at, g.pos
        from jobs_data.jobs as j
        where j.queue = p_queue and j.state = 'ready' and j.fair_group = g.grp
          and (p_tenants is null or j.tenant_id = any(p_tenants))
        order by j.priority desc, j.run_at
        limit v_k for update skip locked) as c
    ) as x;
    v_ids := v_ids[1:p_max];
  end if;

  -- 4. The rest of the batch in claim order (past the jobs taken above, which this claim holds).
  return query
  select j.id, j.name, j.priority, j.run_at, j.concurrency_key, jobs._run_over(j.run_deadline, p_now),
         u.turn
  from unnest(v_ids, v_turns[1:p_max]) as u(id, turn)
  join jobs_data.jobs as j on j.id = u.id;
  if coalesce(cardinality(v_ids), 0) < p_max then
    return query
    select f.id, f.name, f.priority, f.run_at, f.concurrency_key, jobs._run_over(f.run_deadline, p_now),
           coalesce(v_k, 0)::bigint + 1
    from (select j.id, j.name, j.priority, j.run_at, j.concurrency_key, j.run_deadline
          from jobs_data.jobs as j
          where j.queue = p_queue and j.state = 'ready'
            and (p_tenants is null or j.tenant_id = any(p_tenants))
            and (v_ids is null or j.id <> all(v_ids))
          order by j.priority desc, j.run_at
          limit p_max - coalesce(cardinality(v_ids), 0) for update skip locked) as f;
  end if;
end
$$;

-- The sweep's task fair_groups (see jobs_data.fair_pending): for each queue whose fairness
-- changed, the first pass that sees it notes the transactions open then; a later pass, once
-- none of them is, gives the queue's live jobs that are out of step their group (up to p_max
-- rows, skipping rows a claim holds) and, when none is left, forgets the queue. Answers the
-- jobs regrouped.
create function jobs._fair_sweep(p_max int)
returns bigint
language plpgsql volatile
as $$
declare
  v_queue    record;
  v_fairness text;
  v_n        bigint := 0;
  v_rows     bigint;
begin
  for v_queue in select p.queue, p.waiting_for from jobs_data.fair_pending as p for update skip locked loop
    if v_queue.waiting_for is null then
      update jobs_data.fair_pending as p
      set waiting_for = array(select l.virtualxid from pg_catalog.pg_locks as l
                              where l.locktype = 'virtualxid' and l.granted and l.pid <> pg_backend_pid())
      where p.queue = v_queue.queue;
    elsif not exists (select from pg_catalog.pg_locks as l
                      where l.locktype = 'virtualxid' and l.virtualxid = any(v_queue.waiting_for)) then
      select q.fairness into v_fairness from jobs_data.queues as q where q.queue = v_queue.queue;
      -- (Each live state through its own index: ready, due and running jobs of the queue.)
      with regrouped as (
        update jobs_data.jobs as j set fair_group = jobs._fair_group(v_fairness, j.tenant_id, j.concurrency_key)
        where j.ctid = any(array(
            select * from (select x.ctid from jobs_data.jobs as x
                           where x.queue = v_queue.queue and x.state = 'ready'
                             and x.fair_group is distinct from jobs._fair_group(v_fairness, x.tenant_id, x.concurrency_key)
                           limit p_max for update skip locked) as r
            union all
            select * from (select x.ctid from jobs_data.jobs as x
                           where x.queue = v_queue.queue and x.state in ('delayed', 'suspended')
                             and x.fair_group is distinct from jobs._fair_group(v_fairness, x.tenant_id, x.concurrency_key)
                           limit p_max for update skip locked) as d
            union all
            select * from (select x.ctid from jobs_data.jobs as x
                           where x.queue = v_queue.queue and x.state = 'running' and x.lease_scan_at is not null
                             and x.fair_group is distinct from jobs._fair_group(v_fairness, x.tenant_id, x.concurrency_key)
                           limit p_max for update skip locked) as l))
        returning 1
      )
      select count(*) into v_rows from regrouped;
      v_n := v_n + v_rows;
      if not exists (select from jobs_data.jobs as x
                     where x.queue = v_queue.queue and x.state = 'ready'
                       and x.fair_group is distinct from jobs._fair_group(v_fairness, x.tenant_id, x.concurrency_key))
         and not exists (select from jobs_data.jobs as x
                         where x.queue = v_queue.queue and x.state in ('delayed', 'suspended')
                           and x.fair_group is distinct from jobs._fair_group(v_fairness, x.tenant_id, x.concurrency_key))
         and not exists (select from jobs_data.jobs as x
                         where x.queue = v_queue.queue and x.state = 'running' and x.lease_scan_at is not null
                           and x.fair_group is distinct from jobs._fair_group(v_fairness, x.tenant_id, x.concurrency_key)) then
        delete from jobs_data.fair_pending as p where p.queue = v_queue.queue;
      end if;
    end if;
  end loop;
  return v_n;
end
$$;
