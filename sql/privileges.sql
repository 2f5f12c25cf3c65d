-- Privileges. Nothing in jobs is granted to PUBLIC. Three capabilities, granted per role:
--   producer  enqueue, enqueue_batch, publish, get_job, get_jobs, wait_for_job
--   worker    a producer's, and claim, heartbeat, complete, complete_many, complete_and_claim,
--             fail, snooze, mark_started, hand_back, assert_claim, save_step, get_step, await_event, spawn,
--             await_children, sleep
--   admin     everything: every function (including the grants), every table and view
--   monitor   select on jobs.queue_stats and jobs.outcome_stats only (for postgres_exporter
--             and alerts)
-- A producer, worker or monitor may be bound to tenants (jobs.grant_worker(role, tenant), ...),
-- and an admin of some tenants only is a tenant admin (jobs.grant_admin(role, tenant), below).
-- Only admins read or write the tables. The API functions run as their owner (SECURITY
-- DEFINER) so producers and workers need no table privileges, and each pins search_path to
-- pg_catalog, pg_temp, so no schema a caller puts first can shadow a function, operator or type
-- they use. Installed last, after every function exists.
--
-- The same functions run on cached generic plans (plan_cache_mode = force_generic_plan):
-- their statements are index lookups whose best plan does not depend on the values, and a
-- custom plan for the claim's candidate scan cost more to plan than to run (measured: the
-- drain of docs/BENCHMARKS.md went from about 8.6k to 11.7k jobs/s). And without JIT
-- (jit = off): a generic plan estimates a LIMIT of max_jobs at a tenth of the rows it reads,
-- so with a backlog of 1M the claim's plan passed jit_above_cost and was compiled again on
-- every call, 320 ms each, for a statement that runs in well under one. And without
-- sequential scans of their own (enable_seqscan = off): a generic plan lives as long as the
-- session or the next ANALYZE, and one made while jobs_data.jobs was empty (after a TRUNCATE, or
-- after the queue drained and vacuum ran) estimates the table at a page, where a sequential
-- scan is cheapest. That plan then read every row on every call once the table filled: 25 ms
-- per heartbeat with 200k jobs (docs/PLANS.md). Every statement here has an index to go by;
-- each join against an array of ids also names the ids (j.id = any(...)), so its index scan
-- has a condition and is not a walk of the whole index.

create function jobs._grant(p_fn text, p_role name, p_functions text[], p_admin boolean)
returns void
language plpgsql volatile
as $$
declare
  v_fn regprocedure;
begin
  if p_role is null then
    perform jobs._raise('22004', p_fn || ': role must not be NULL', 'name an existing role');
  elsif not exists (select from pg_catalog.pg_roles where rolname = p_role) then
    perform jobs._raise('22023', format('%s: role %I does not exist', p_fn, p_role),
      format('create it first: create role %I login', p_role));
  end if;
  -- No USAGE on pg_jobs's types: calling with or reading their values needs none, and with
  -- it a role could make a table (a temporary one) of jobs.job_spec, which blocks
  -- DROP EXTENSION and every upgrade that changes the type.
  execute format('grant usage on schema jobs to %I', p_role);
  for v_fn in
    select p.oid::regprocedure from pg_catalog.pg_proc as p
    where p.pronamespace = 'jobs'::regnamespace and (p_admin or p.proname = any(p_functions))
  loop
    execute format('grant execute on function %s to %I', v_fn, p_role);
  end loop;
  if p_admin then
    execute format('grant usage on schema jobs_data to %I', p_role);
    execute format('grant select, insert, update, delete on all tables in schema jobs, jobs_data to %I',
                   p_role);
    execute format('grant usage, select on all sequences in schema jobs_data to %I', p_role);
  end if;
end
$$;

-- The largest payload, result, step output or event payload the server takes, in bytes
-- (pg_jobs.max_payload_size): the libraries check a result against it before they settle it.
create function jobs.max_payload_size()
returns bigint
language sql stable
as $$ select jobs._max_payload_size() $$;
comment on function jobs.max_payload_size() is
  'The largest payload, result, step output or event payload the server takes, in bytes (pg_jobs.max_payload_size)';

-- A new job id, for a producer that chooses its jobs' ids (to know one before it enqueues, or
-- to enqueue one job twice as the same job): a UUIDv7, which on a shard (pg_jobs.shard) ends
-- with the shard's number, as every id the shard makes does (src/functions/ids.rs).
create function jobs.new_id()
returns uuid
language sql volatile
as $$ select jobs._uuid_v7() $$;
comment on function jobs.new_id() is
  'A new job id (UUIDv7) for enqueue''s id: on a shard it names the shard (pg_jobs.shard)';

-- Each grant answers what the role may now do, so psql shows more than an empty row.
create function jobs.grant_producer(role name)
returns text
language sql volatile
as $$ select jobs._grant('jobs.grant_producer', $1,
                         array['enqueue', 'enqueue_batch', 'publish', 'error_codes', 'get_job', 'get_jobs', 'wait_for_job',
                               'max_payload_size', 'new_id'],
                         false);
      select format('%I may enqueue jobs, read their state and publish events (producer)', $1) $$;
comment on function jobs.grant_producer(name) is 'Let a role enqueue, read its jobs'' state and publish';

create function jobs.grant_worker(role name)
returns text
language sql volatile
as $$ select jobs._grant('jobs.grant_worker', $1,
                         array['enqueue', 'enqueue_batch', 'publish', 'error_codes', 'get_job', 'get_jobs', 'wait_for_job',
                               'max_payload_size', 'new_id', 'claim',
                               'heartbeat', 'complete', 'complete_many', 'complete_and_claim',
                               'fail', 'snooze', 'mark_started', 'hand_back',
                               'assert_claim', 'save_step', 'get_step', 'await_event', 'spawn',
                               'await_children', 'sleep', 'start_step', 'fail_step', 'get_steps'], false);
      select format('%I may enqueue, publish, claim and settle jobs (worker)', $1) $$;
comment on function jobs.grant_worker(name) is
  'Let a role enqueue and publish, claim, settle, heartbeat, save steps and await events';

-- Binding a role to a tenant: pg_jobs.tenants, a superuser-only setting (a JSON array), set
-- for the role in this database, so it applies whenever the role connects here and the role
-- cannot change it. A bound role enqueues (and dedupes) for its tenants only, is handed only
-- their jobs by claim, and reads only their runs' steps (jobs._tenants, src/gucs.rs). Each
-- call adds one tenant; a role with no binding behaves as before. Takes effect at the role's
-- next connection (role settings apply at connection start). To unbind:
--   alter role r in database d reset pg_jobs.tenants;
-- The refusals of a binding (both editions: sql-only/src/config.sql binds in a table).
create function jobs._check_binding(p_fn text, p_role name, p_tenant text)
returns void
language plpgsql stable
as $$
begin
  if p_tenant is null then
    perform jobs._raise('22004', p_fn || ': tenant must not be NULL',
      'pass the tenant_id the role may act for, or call ' || p_fn || '(role) for no binding');
  elsif length(p_tenant) not between 1 and 200 then
    perform jobs._raise('22023', p_fn || ': tenant must be 1 to 200 characters, got ' || length(p_tenant),
      'pass a tenant_id as the jobs carry it');
  elsif (select r.rolsuper from pg_catalog.pg_roles as r where r.rolname = p_role) then
    perform jobs._raise('22023', format('%s: role %I is a superuser, which no binding holds', p_fn, p_role),
      'a superuser may change any setting and read every table; bind a role of the tenant''s own, '
      'without SUPERUSER');
  end if;
end
$$;

create function jobs._bind_tenant(p_fn text, p_role name, p_tenant text)
returns jsonb
language plpgsql volatile
as $$
declare
  v_tenants jsonb;
begin
  perform jobs._check_binding(p_fn, p_role, p_tenant);
  select coalesce(jsonb_agg(distinct t.tenant), '[]') into v_tenants
  from (select jsonb_array_elements_text(substr(c.setting, length('pg_jobs.tenants=') + 1)::jsonb) as tenant
        from pg_catalog.pg_db_role_setting as s
        cross join lateral unnest(s.setconfig) as c(setting)
        where s.setrole = (select r.oid from pg_catalog.pg_roles as r where r.rolname = p_role)
          and s.setdatabase = (select d.oid from pg_catalog.pg_database as d
                               where d.datname = current_database())
          and c.setting like 'pg_jobs.tenants=%'
        union
        select p_tenant) as t;
  execute format('alter role %I in database %I set pg_jobs.tenants = %L', p_role,
                 current_database(), v_tenants::text);
  return v_tenants;
end
$$;

-- The bindings of this database's roles: each bound role and the text of its pg_jobs.tenants,
-- its setting for this database over one for every database (the order PostgreSQL applies
-- them in at login). The SQL-only edition keeps its bindings in a table
-- (sql-only/src/config.sql).
create function jobs._bindings()
returns table (role oid, tenants text)
language sql stable
set search_path = pg_catalog, pg_temp
as $$
  select distinct on (s.setrole) s.setrole, substr(c.setting, length('pg_jobs.tenants=') + 1)
  from pg_catalog.pg_db_role_setting as s, unnest(s.setconfig) as c(setting)
  where s.setdatabase in (0, (select d.oid from pg_catalog.pg_database as d
                              where d.datname = pg_catalog.current_database()))
    and c.setting like 'pg_jobs.tenants=%'
  order by s.setrole, s.setdatabase desc
$$;

-- A binding's tenants as a JSON array of strings; anything else binds to no tenant at all ('[]'),
-- so a mistyped binding refuses rather than allows.
create function jobs._binding_array(p_text text)
returns jsonb
language plpgsql immutable
set search_path = pg_catalog, pg_temp
as $$
declare
  v_tenants jsonb;
begin
  v_tenants := p_text::jsonb;
  if jsonb_typeof(v_tenants) = 'array'
     and not jsonb_path_exists(v_tenants, '$[*] ? (@.type() != "string")') then
    return v_tenants;
  end if;
  return '[]';
exception when others then
  return '[]';
end
$$;

-- The binding of the session's login role, as the text of a JSON array of tenants (NULL for a
-- role bound to none), or of a refusal, a JSON object with its message and hint (jobs._tenants
-- raises it: insufficient_privilege, 42501). A binding follows the grant:
--   * the role's own binding, where it has one (a superuser's is only its own);
--   * else the union of the bindings of the roles it is a member of (it acts with their
--     grants, as itself or after SET ROLE): grant grp_acme, bound to acme, to svc, and svc is
--     bound to acme;
--   * refused when it is also a member of a role bound to none that holds rights in jobs (or
--     holds them itself): pg_jobs does not widen a binding through a grant.
create function jobs._binding()
returns text
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
declare
  v_user oid;
  v_super boolean;
  v_own text;
  v_through name[];
  v_tenants jsonb;
  v_unbound name;
begin
  select r.oid, r.rolsuper into v_user, v_super from pg_catalog.pg_roles as r where r.rolname = session_user;
  select b.tenants into v_own from jobs._bindings() as b where b.role = v_user;
  if v_own is not null or v_super then
    return v_own;
  end if;
  select array_agg(distinct r.rolname),
         coalesce(jsonb_agg(distinct t.tenant) filter (where t.tenant is not null), '[]')
  into v_through, v_tenants
  from jobs._bindings() as b
  join pg_catalog.pg_roles as r on r.oid = b.role
  left join lateral jsonb_array_elements_text(jobs._binding_array(b.tenants)) as t(tenant) on true
  where pg_catalog.pg_has_role(v_user, b.role, 'MEMBER');
  if v_through is null then
    return null;
  end if;
  select r.rolname into v_unbound
  from pg_catalog.pg_roles as r
  where pg_catalog.pg_has_role(v_user, r.oid, 'MEMBER')
    and not exists (select from jobs._bindings() as b where b.role = r.oid)
    and exists (select from pg_catalog.pg_proc as p, pg_catalog.aclexplode(p.proacl) as a
                where p.pronamespace = 'jobs'::regnamespace and a.grantee = r.oid
                  and a.grantee <> p.proowner)
  order by r.rolname
  limit 1;
  if v_unbound is not null then
    return jsonb_build_object(
      'refusal', format('role %I holds pg_jobs rights through roles bound to tenants (%s) and through %I, '
        'which is bound to none: pg_jobs does not widen a binding through a grant',
        session_user, array_to_string(v_through, ', '), v_unbound),
      'hint', format('bind %I itself (jobs.grant_producer(%L, tenant => ...) or alter role %I in database %I '
        'set pg_jobs.tenants = ...), or revoke its membership of %I or of the bound roles',
        session_user, session_user, session_user, current_database(), v_unbound))::text;
  end if;
  return v_tenants::text;
end
$$;

-- A binding jobs._binding() refuses (insufficient_privilege, 42501), as jobs._tenants raises it
-- (the SQL-only edition's calls this; the extension's raises it in Rust).
create function jobs._binding_refused(p_refusal jsonb)
returns text[]
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
begin
  raise exception using errcode = '42501', message = p_refusal->>'refusal', hint = p_refusal->>'hint';
end
$$;

create function jobs.grant_producer(role name, tenant text)
returns text
language sql volatile
as $$ select format('%s for the tenants %s, from its next connection', jobs.grant_producer($1),
                    jobs._bind_tenant('jobs.grant_producer', $1, $2)) $$;
comment on function jobs.grant_producer(name, text) is
  'Let a role enqueue and publish, for this tenant (and any it was bound to before) only';

create function jobs.grant_worker(role name, tenant text)
returns text
language sql volatile
as $$ select format('%s for the tenants %s, from its next connection', jobs.grant_worker($1),
                    jobs._bind_tenant('jobs.grant_worker', $1, $2)) $$;
comment on function jobs.grant_worker(name, text) is
  'Let a role work as jobs.grant_worker(role) does, on the jobs of this tenant (and any it was bound to before) only';

create function jobs.grant_admin(role name)
returns text
language sql volatile
as $$ select jobs._check_admin_kind('jobs.grant_admin', $1, false);
      select jobs._grant('jobs.grant_admin', $1, null, true);
      select format('%I may call every function of jobs and read and write every table (admin)', $1) $$;
comment on function jobs.grant_admin(name) is
  'Let a role do everything: every function, and read and write every table';

-- (jobs.outcome_stats() runs as its owner: no role is granted the counters themselves,
-- jobs._outcome_stats(), which count every tenant's jobs; jobs._oldest_ready answers a role
-- bound to tenants nothing.)
create function jobs.grant_monitor(role name)
returns text
language plpgsql volatile
as $$
begin
  perform jobs._grant('jobs.grant_monitor', role,
    array['clock', '_oldest_ready', 'queue_stats', 'outcome_stats', '_tenants', '_binding', '_bindings',
          '_binding_array'], false);
  execute format('grant select on jobs.queue_stats, jobs.outcome_stats to %I', role);
  return format('%I may read jobs.queue_stats and jobs.outcome_stats (monitor)', role);
end
$$;
comment on function jobs.grant_monitor(name) is
  'Let a role read jobs.queue_stats and jobs.outcome_stats (the views and the functions), and nothing '
  'else (for postgres_exporter and alerts)';

-- Tenant admins and tenant monitors. jobs.grant_admin(role, tenant) binds the role to the
-- tenant (as jobs.grant_worker(role, tenant) does) and lets it read its tenants' jobs, attempts,
-- steps and events (jobs.tenant_jobs, jobs.tenant_attempts, jobs.tenant_steps,
-- jobs.tenant_events: sql/tenant_views.sql), the queues and job types (shared by every tenant:
-- read only), the counts of its tenants' jobs (jobs.queue_stats()), and cancel, requeue, promote
-- and delete its tenants' jobs; any other job is no job to it (job_not_found). It reads no table
-- and writes none, and gets nothing that acts on every tenant: pausing a queue, the job types'
-- policies, schedules, the sweep, the grants. Outcome counters are kept per queue for every
-- tenant, so a bound role reads none (jobs.outcome_stats answers no rows).

-- A tenant admin is not an admin of every tenant, and the other way round: each grant refuses
-- the role the other made.
create function jobs._check_admin_kind(p_fn text, p_role name, p_bound boolean)
returns void
language plpgsql stable
as $$
begin
  if p_role is null or not exists (select from pg_catalog.pg_roles as r
                                    where r.rolname = p_role and not r.rolsuper) then
    return;  -- (jobs._grant and jobs._bind_tenant say why)
  end if;
  if p_bound and has_table_privilege(p_role, 'jobs_data.jobs', 'select') then
    perform jobs._raise('22023', format('%s: role %I is an admin of every tenant (it may read jobs_data.jobs)',
      p_fn, p_role),
      format('make a role of the tenant''s own, or first revoke all on all tables in schema jobs, jobs_data '
             'and all functions in schema jobs from %I', p_role));
  elsif not p_bound and has_table_privilege(p_role, 'jobs.tenant_jobs', 'select')
        and not has_table_privilege(p_role, 'jobs_data.jobs', 'select') then
    perform jobs._raise('22023', format('%s: role %I is a tenant admin (jobs.grant_admin(role, tenant))',
      p_fn, p_role),
      format('grant another role, or first revoke all on all tables in schema jobs from %I; revoke all '
             'on all functions in schema jobs from %I; alter role %I in database %I reset pg_jobs.tenants',
             p_role, p_role, p_role, current_database()));
  end if;
end
$$;

create function jobs.grant_admin(role name, tenant text)
returns text
language plpgsql volatile
as $$
declare
  v_tenants jsonb;
begin
  perform jobs._check_admin_kind('jobs.grant_admin', role, true);
  perform jobs._grant('jobs.grant_admin', role,
    array['clock', 'error_codes', '_tenants', '_binding', '_bindings', '_binding_array', 'queue_stats',
          'outcome_stats', 'get_job', 'get_jobs', 'wait_for_job', 'cancel', 'requeue', 'promote',
          'delete', 'max_payload_size'], false);
  v_tenants := jobs._bind_tenant('jobs.grant_admin', role, tenant);
  execute format('grant select on jobs.tenant_jobs, jobs.tenant_attempts, jobs.tenant_steps, '
                 'jobs.tenant_events, jobs.queues, jobs.job_types to %I', role);
  return format('%I may read the jobs of the tenants %s and cancel, requeue, promote and delete them '
                '(tenant admin), from its next connection', role, v_tenants);
end
$$;
comment on function jobs.grant_admin(name, text) is
  'Let a role read the jobs of this tenant (and any it was bound to before) and cancel, requeue, '
  'promote and delete them, and nothing that acts on every tenant';

create function jobs.grant_monitor(role name, tenant text)
returns text
language sql volatile
as $$ select format('%s, counting the jobs of the tenants %s only, from its next connection',
                    jobs.grant_monitor($1), jobs._bind_tenant('jobs.grant_monitor', $1, $2)) $$;
comment on function jobs.grant_monitor(name, text) is
  'Let a role read jobs.queue_stats() for the jobs of this tenant (and any it was bound to before) only';

do $$
declare
  v_fn regprocedure;
begin
  for v_fn in
    select p.oid::regprocedure from pg_catalog.pg_proc as p
    where p.pronamespace = 'jobs'::regnamespace
      and p.proname in ('enqueue', 'enqueue_batch', 'claim', 'heartbeat', 'complete',
                        'complete_many', 'complete_and_claim', 'fail', 'snooze', 'mark_started', 'hand_back',
                        'assert_claim', 'save_step',
                        'get_step', 'publish', 'await_event', 'cancel', 'requeue', 'promote',
                        'delete', 'spawn', 'await_children', 'get_job', 'get_jobs', 'sleep', 'wait_for_job',
                        'start_step', 'fail_step', 'get_steps',
                        'pause_queue', 'resume_queue', 'sweep', 'grant_producer', 'grant_worker',
                        'grant_admin', 'grant_monitor', '_oldest_ready', 'queue_stats', 'outcome_stats',
                        '_queue_fairness_set', 'max_payload_size', 'new_id')
  loop
    execute format('alter function %s security definer set search_path = pg_catalog, pg_temp '
                   'set plan_cache_mode = force_generic_plan set jit = off '
                   'set enable_seqscan = off', v_fn);
  end loop;
end
$$;

-- Every other function written in SQL or PL/pgSQL pins search_path as well, so no function of
-- pg_jobs resolves a name, an operator or a type through a schema another role can write,
-- whoever calls it (the background worker is a superuser). The exceptions need none: the
-- small SQL helpers the planner inlines into the statements above have SQL-standard bodies
-- (BEGIN ATOMIC), resolved once, when the extension was created (a setting would stop the
-- inlining), and the functions written in Rust run no SQL text.
do $$
declare
  v_fn regprocedure;
begin
  for v_fn in
    select p.oid::regprocedure from pg_catalog.pg_proc as p
    join pg_catalog.pg_language as l on l.oid = p.prolang
    where p.pronamespace = 'jobs'::regnamespace and l.lanname in ('sql', 'plpgsql')
      and p.prosqlbody is null
      and not exists (select from unnest(p.proconfig) as c(setting) where c.setting like 'search_path=%')
  loop
    execute format('alter function %s set search_path = pg_catalog, pg_temp', v_fn);
  end loop;
end
$$;

revoke all on all functions in schema jobs from public;
revoke all on type jobs.job_state, jobs.claimed_job, jobs.enqueued, jobs.job_spec from public;
-- ... and from the roles 0.1.0 granted it to.
do $$
declare
  v_grant record;
begin
  for v_grant in
    select distinct t.oid::regtype as type, a.grantee::regrole as role
    from pg_catalog.pg_type as t
    cross join lateral pg_catalog.aclexplode(t.typacl) as a
    where t.typnamespace = 'jobs'::regnamespace and a.grantee not in (0, t.typowner)
  loop
    execute format('revoke all on type %s from %s', v_grant.type, v_grant.role);
  end loop;
end
$$;

-- Monitors read the stats through functions (jobs.queue_stats(), jobs.outcome_stats()), which
-- no other role can stall; the roles that may read the views may call them (monitors granted
-- before 0.1.1 included), and jobs._tenants(), which the view jobs.queue_stats calls.
do $$
declare
  v_grantees text;
begin
  select string_agg(distinct quote_ident(a.grantee::regrole::text), ',') into v_grantees
  from pg_catalog.pg_class as c, pg_catalog.aclexplode(c.relacl) as a
  where c.oid = 'jobs.queue_stats'::regclass
    and a.privilege_type = 'SELECT' and a.grantee <> c.relowner and a.grantee <> 0;
  if v_grantees is not null then
    execute 'grant execute on function jobs.queue_stats(), jobs.outcome_stats(), jobs._tenants() to '
            || v_grantees;
  end if;
end
$$;
