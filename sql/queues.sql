-- Queues for DBAs: jobs.queue_stats, jobs.outcome_stats, jobs.pause_queue, jobs.resume_queue.
--
-- jobs_data.queues lists every queue ever used (enqueue adds new ones). queue_stats reads one
-- partial index per live state, so its live counts never read finished history; each column
-- is its own subquery, so a query that selects only some columns computes only those. The
-- finished counts read jobs_finished_idx.

-- The run_at of the oldest ready job of a queue: the first entry of jobs_ready_idx at each
-- priority (a loose index scan), so it reads a few entries per distinct priority, not the
-- backlog. NULL for a role bound to tenants: it counts every tenant's jobs (monitors may call
-- it; a bound one reads its own tenants' ages in jobs.queue_stats()).
create function jobs._oldest_ready(p_queue text)
returns timestamptz
language sql stable
begin atomic
  with recursive levels as (
    (select j.priority, j.run_at from jobs_data.jobs as j
     where j.queue = p_queue and j.state = 'ready'
     order by j.priority desc, j.run_at limit 1)
    union all
    select n.priority, n.run_at
    from levels as l
    cross join lateral (select j.priority, j.run_at from jobs_data.jobs as j
                        where j.queue = p_queue and j.state = 'ready' and j.priority < l.priority
                        order by j.priority desc, j.run_at limit 1) as n
  )
  select min(l.run_at) from levels as l where (select jobs._tenants()) is null;
end;

-- The counts per queue. The query is a view in jobs_data, which no role but admins may name:
-- any role with USAGE on a schema can queue a lock request on a view there (CREATE RULE or
-- CREATE TRIGGER naming it asks for its lock before PostgreSQL checks ownership), which waits
-- behind a reader's open transaction, and every later reader of the view waits behind it.
-- Monitors read jobs.queue_stats(), a function, which takes no lock on a view; DBAs at a psql
-- prompt read the view jobs.queue_stats, whose unused columns the planner leaves out (the live
-- counts read none of the finished history).
create view jobs_data.queue_stats as
select q.queue,
       q.paused,
       (select count(*) from jobs_data.jobs j where j.queue = q.queue and j.state = 'ready') as ready,
       (select count(*) from jobs_data.jobs j where j.queue = q.queue and j.state = 'delayed') as delayed,
       (select count(*) from jobs_data.jobs j where j.queue = q.queue and j.state = 'running'
          and j.lease_scan_at is not null) as running,  -- every running job has one: jobs_lease_idx
       (select count(*) from jobs_data.jobs j where j.queue = q.queue and j.state = 'suspended') as suspended,
       (select count(*) from jobs_data.jobs j where j.queue = q.queue and j.state = 'completed') as completed,
       (select count(*) from jobs_data.jobs j where j.queue = q.queue and j.state = 'failed') as failed,
       (select count(*) from jobs_data.jobs j where j.queue = q.queue and j.state = 'dead') as dead,
       (select count(*) from jobs_data.jobs j where j.queue = q.queue and j.state = 'cancelled') as cancelled,
       jobs.clock() - jobs._oldest_ready(q.queue) as oldest_ready_age
from jobs_data.queues as q;

-- A role bound to tenants counts its tenants' jobs only (every queue is listed): no index
-- holds the tenant, so one grouped pass reads the jobs of the queues.
create function jobs.queue_stats()
returns table (queue text, paused boolean, ready bigint, delayed bigint, running bigint,
               suspended bigint, completed bigint, failed bigint, dead bigint, cancelled bigint,
               oldest_ready_age interval)
language plpgsql stable  -- security definer: sql/privileges.sql
as $$
declare
  v_tenants text[] := jobs._tenants();  -- NULL: the role is bound to no tenant
begin
  if v_tenants is null then
    return query
    select s.queue, s.paused, s.ready, s.delayed, s.running, s.suspended, s.completed, s.failed,
           s.dead, s.cancelled, s.oldest_ready_age
    from jobs_data.queue_stats as s;
    return;
  end if;
  return query
  select q.queue, q.paused,
         count(*) filter (where j.state = 'ready'),
         count(*) filter (where j.state = 'delayed'),
         count(*) filter (where j.state = 'running' and j.lease_scan_at is not null),
         count(*) filter (where j.state = 'suspended'),
         count(*) filter (where j.state = 'completed'),
         count(*) filter (where j.state = 'failed'),
         count(*) filter (where j.state = 'dead'),
         count(*) filter (where j.state = 'cancelled'),
         jobs.clock() - min(j.run_at) filter (where j.state = 'ready')
  from jobs_data.queues as q
  left join jobs_data.jobs as j on j.queue = q.queue and j.tenant_id = any(v_tenants)
  group by q.queue, q.paused;
end
$$;
comment on function jobs.queue_stats() is
  'Per queue: paused, a count per state, and how long the oldest ready job has waited (what '
  'monitors read: no other role can stall it)';

-- (No rows for a role bound to tenants: it reads jobs.queue_stats(), which counts its own.)
create view jobs.queue_stats as
select s.queue, s.paused, s.ready, s.delayed, s.running, s.suspended, s.completed, s.failed,
       s.dead, s.cancelled, s.oldest_ready_age
from jobs_data.queue_stats as s
where (select jobs._tenants()) is null;
comment on view jobs.queue_stats is
  'Per queue: paused, a count per state, and how long the oldest ready job has waited';

-- What happened to the jobs of each queue since counting started (the server's start, or its
-- restart after a crash): counters, never gauges, kept in shared memory by the commits that
-- settle jobs (src/commit/outcomes.rs), so they do not depend on retention and no settle writes a
-- row for them. completed, retried (a failed or timed-out attempt with attempts left), dead,
-- failed, cancelled count jobs by what happened to them; timed_out and lease_lapsed count
-- attempts by how they ended (a timed-out attempt counts in retried, dead or failed as well).
-- Needs shared_preload_libraries = 'pg_jobs'; without it the view has no rows. The counters
-- count every tenant's jobs, so a role bound to tenants reads no rows.
create function jobs.outcome_stats()
returns table (queue text, completed bigint, retried bigint, dead bigint, failed bigint,
               cancelled bigint, timed_out bigint, lease_lapsed bigint, since timestamptz)
language sql volatile  -- security definer: sql/privileges.sql
begin atomic
  select s.queue, s.completed, s.retried, s.dead, s.failed, s.cancelled, s.timed_out,
         s.lease_lapsed, s.since
  from jobs._outcome_stats() as s
  where (select jobs._tenants()) is null;
end;
comment on function jobs.outcome_stats() is
  'Per queue, counters since the server started (what monitors read: no other role can stall '
  'it; see jobs.queue_stats())';

create view jobs.outcome_stats as
select s.queue, s.completed, s.retried, s.dead, s.failed, s.cancelled, s.timed_out,
       s.lease_lapsed, s.since
from jobs.outcome_stats() as s;
comment on view jobs.outcome_stats is
  'Per queue, counters since the server started: completed, retried, dead, failed, cancelled, '
  'timed out and lease-lapsed (needs shared_preload_libraries; no rows without)';

create function jobs._set_paused(p_fn text, p_queue text, p_paused boolean)
returns void
language plpgsql volatile
as $$
begin
  if p_queue is null then
    perform jobs._raise('22004', p_fn || ': queue must not be NULL', 'name the queue, e.g. ''default''');
  end if;
  update jobs_data.queues as q set paused = p_paused where q.queue = p_queue;
  if found and not p_paused then
    perform jobs._signal_work(array[p_queue]);  -- its jobs are claimable again
  end if;
  if not found then
    perform jobs._raise('22023', format('%s: unknown queue %L', p_fn, p_queue),
      'jobs.queues lists the queues; a queue is known once a job was enqueued to it, or after '
      'insert into jobs.queues (queue) values (...)');
  end if;
end
$$;

-- Makes a queue known before its first job, as enqueuing to it would, so that it can be
-- paused or given a fairness first: true when it was not known. (A router makes a queue that
-- one shard knows known to every shard before it pauses it: router/pg_jobs_router.sql.)
create function jobs.add_queue(queue text)
returns boolean
language plpgsql volatile
as $$
begin
  perform jobs._check_queue_name('jobs.add_queue', add_queue.queue);
  insert into jobs_data.queues (queue) values (add_queue.queue) on conflict do nothing;
  return found;
end
$$;
comment on function jobs.add_queue(text) is
  'Make a queue known before its first job (to pause it, or set its fairness): true if it was new';

create function jobs.pause_queue(queue text)
returns void
language sql volatile
as $$ select jobs._set_paused('jobs.pause_queue', $1, true) $$;
comment on function jobs.pause_queue(text) is
  'Pause a queue: claim hands out none of its jobs; running jobs finish';

create function jobs.resume_queue(queue text)
returns void
language sql volatile
as $$ select jobs._set_paused('jobs.resume_queue', $1, false) $$;
comment on function jobs.resume_queue(text) is 'Resume a paused queue';

-- The configuration a fleet of servers shares (shards: docs/SCALING.md): every queue with its
-- pause and fairness, and every job type's policy, as one JSON object that jobs.config_apply
-- takes on another server.
create function jobs.config_export()
returns jsonb
language sql stable
as $$
  select jsonb_build_object(
    'queues', coalesce((select jsonb_agg(jsonb_build_object('queue', q.queue, 'paused', q.paused,
                                                            'fairness', q.fairness) order by q.queue)
                        from jobs_data.queues as q), '[]'),
    'job_types', coalesce((select jsonb_agg(to_jsonb(t) order by t.name) from jobs_data.job_types as t), '[]'))
$$;
comment on function jobs.config_export() is
  'Every queue (paused, fairness) and job type, as JSON for jobs.config_apply on another server';

-- Makes this server's queues and job types those of a jobs.config_export(): each queue made
-- known, paused or resumed and given its fairness, each job type written, and the job types the
-- configuration does not name removed. One transaction: a configuration refused (not an
-- object, a mistyped value, a check of the tables) changes nothing. Queues it does not name are
-- left alone (a queue is known once a job used it).
create function jobs.config_apply(config jsonb)
returns text
language plpgsql volatile
as $$
declare
  v_queue   record;
  v_removed int;
begin
  if config is null or jsonb_typeof(config) <> 'object'
     or jsonb_typeof(coalesce(config->'queues', '[]')) <> 'array'
     or jsonb_typeof(coalesce(config->'job_types', '[]')) <> 'array' then
    perform jobs._raise('22023', 'jobs.config_apply: config must be an object with arrays queues and job_types',
      'pass what jobs.config_export() answers on another server');
  end if;
  for v_queue in select * from jsonb_to_recordset(coalesce(config->'queues', '[]'))
                            as x(queue text, paused boolean, fairness text) loop
    perform jobs.add_queue(v_queue.queue);
    perform jobs._set_paused('jobs.config_apply', v_queue.queue, coalesce(v_queue.paused, false));
    if (select q.fairness from jobs_data.queues as q where q.queue = v_queue.queue)
       is distinct from coalesce(v_queue.fairness, 'none') then
      perform jobs.set_fairness(v_queue.queue, coalesce(v_queue.fairness, 'none'));
    end if;
  end loop;
  delete from jobs_data.job_types as t
  where t.name not in (select x->>'name' from jsonb_array_elements(coalesce(config->'job_types', '[]')) as x
                       where x->>'name' is not null);
  get diagnostics v_removed = row_count;
  insert into jobs_data.job_types as t
  select * from jsonb_populate_recordset(null::jobs_data.job_types, coalesce(config->'job_types', '[]'))
  on conflict (name) do update
    set (max_attempts, backoff, backoff_base, backoff_max, jitter, dead_letter, lease, concurrency, timeout,
         rate_limit, rate_period, rate_limit_per_key, run_timeout, non_retryable_errors, key_concurrency,
         when_busy)
      = (excluded.max_attempts, excluded.backoff, excluded.backoff_base, excluded.backoff_max, excluded.jitter,
         excluded.dead_letter, excluded.lease, excluded.concurrency, excluded.timeout, excluded.rate_limit,
         excluded.rate_period, excluded.rate_limit_per_key, excluded.run_timeout, excluded.non_retryable_errors,
         excluded.key_concurrency, excluded.when_busy);
  return format('%s queues and %s job types applied, %s job types removed',
                jsonb_array_length(coalesce(config->'queues', '[]')),
                jsonb_array_length(coalesce(config->'job_types', '[]')), v_removed);
end
$$;
comment on function jobs.config_apply(jsonb) is
  'Make this server''s queues (pause, fairness) and job types those of a jobs.config_export()';
