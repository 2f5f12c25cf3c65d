-- pg_jobs's router: a database that offers pg_jobs's functions under their own names and
-- arguments and runs each on the shard it concerns, through PL/Proxy (Debian's
-- postgresql-NN-plproxy). Install it into an empty database of its own, as a superuser, with
-- the shards' connection strings in shard order (shard i is the server with pg_jobs.shard = i):
--
--   psql -d router -v shards="array['host=db0 dbname=app', 'host=db1 dbname=app']" \
--        -f router/pg_jobs_router.sql
--
-- Run it again to change the shards or after the shards' pg_jobs is upgraded: it makes the
-- schema jobs again from what shard 0 has. Leave the role out of the connection strings: a
-- call through the router reaches each shard as the role that called the router, so each
-- shard's grants and tenant bindings apply (give each role the same password on the router and
-- the shards, or a .pgpass file for the router's server user). docs/SCALING.md says what
-- each function does across shards.
--
-- A routed call runs on its shard in a transaction of its own, committed when the call
-- returns: a router transaction that rolls back does not take back the calls it made.

\set ON_ERROR_STOP 1
set client_min_messages = warning;
create extension if not exists plproxy;
create schema if not exists jobs_router;
comment on schema jobs_router is 'pg_jobs''s router: its shards and how a call finds its shard';

create table if not exists jobs_router.shards (
  shard int primary key check (shard between 0 and 255),
  dsn   text not null
);
comment on table jobs_router.shards is
  'The shards, by their pg_jobs.shard: jobs_router.set_shards() writes it';
revoke all on table jobs_router.shards from public;

-- The number of shards (jobs_router.set_shards makes it again with theirs).
do $$
begin
  if to_regprocedure('jobs_router.shard_count()') is null then
    create function jobs_router.shard_count() returns int language sql stable strict parallel safe return 0;
  end if;
end
$$;

-- The shards, in shard order; PL/Proxy's cluster pg_jobs_shards with a partition per shard,
-- as many as the next power of 2 (PL/Proxy's rule): the ones beyond the last shard are the
-- first shard's again, and no call is routed to them by its shard number.
create or replace function jobs_router.set_shards(p_dsns text[])
returns text
language plpgsql volatile
set search_path = pg_catalog, pg_temp
set client_min_messages = warning
as $$
declare
  v_count int := coalesce(cardinality(p_dsns), 0);
  v_parts int := 1;
  v_options text;
begin
  if v_count not between 1 and 256 or array_position(p_dsns, null) is not null then
    raise exception 'jobs_router.set_shards: pass 1 to 256 connection strings, none NULL, got %', v_count
      using errcode = '22023', hint = 'one per shard, in the order of their pg_jobs.shard (0, 1, ...)';
  end if;
  while v_parts < v_count loop
    v_parts := v_parts * 2;
  end loop;
  delete from jobs_router.shards;
  insert into jobs_router.shards (shard, dsn)
  select i - 1, p_dsns[i] from generate_series(1, v_count) as i;
  select string_agg(format('partition_%s %L', i, p_dsns[(i % v_count) + 1]), ', ' order by i)
  into v_options from generate_series(0, v_parts - 1) as i;
  -- (a constant: every enqueue hashes by it, and a table read there cost a tenth of a
  -- millisecond a call; strict, so that jobs_router.hash_shard, strict, is inlined)
  execute format('create or replace function jobs_router.shard_count() returns int '
                 'language sql stable strict parallel safe return %s', v_count);
  drop server if exists pg_jobs_shards cascade;
  execute 'create server pg_jobs_shards foreign data wrapper plproxy options (' || v_options || ')';
  create user mapping for public server pg_jobs_shards;
  grant usage on foreign server pg_jobs_shards to public;
  return format('%s shards', v_count);
end
$$;
revoke all on function jobs_router.set_shards(text[]) from public;

\if :{?shards}
select jobs_router.set_shards(:shards);
\endif

-- The shard an id names: its last byte (pg_jobs.shard, src/functions/ids.rs).
create or replace function jobs_router.shard_of(p_id uuid)
returns int
language sql immutable strict parallel safe
return get_byte(uuid_send(p_id), 15);

-- A key's shard: the first 32 bits of its MD5 modulo the number of shards. The libraries hash
-- a producer's enqueue the same way.
create or replace function jobs_router.hash_shard(p_key text)
returns int
language sql stable strict parallel safe
return (('x' || left(md5(p_key), 8))::bit(32)::bigint % jobs_router.shard_count())::int;

-- Where an enqueue goes: the shard of the id, the run or the parent given, else its tenant's,
-- else its job name's. One key of one tenant (or of one job name, untenanted) always goes to
-- one shard, so an idempotency key makes one job across the shards.
-- A key placed on a shard (a tenant, or the job name of untenanted jobs) goes there whatever
-- its hash says: jobs_router.add_shard places every key the shards hold before the number of
-- shards changes, and jobs_router.move_tenant moves a tenant's placement.
create table if not exists jobs_router.placements (
  key   text primary key,
  shard int not null check (shard between 0 and 255)
);
comment on table jobs_router.placements is
  'Tenants (and job names of untenanted jobs) placed on a shard, whatever their hash says';
revoke all on table jobs_router.placements from public;

-- A key's shard: its placement, else its hash. In PL/pgSQL, whose plans a session keeps: a
-- SQL function that cannot be inlined (this one reads a table only its owner may) is planned
-- again on every call, which cost an enqueue through the router a tenth of a millisecond.
create or replace function jobs_router.key_shard(p_key text)
returns int
language plpgsql stable strict parallel safe security definer
set search_path = pg_catalog, pg_temp
as $$
declare
  v_shard int;
begin
  select p.shard into v_shard from jobs_router.placements as p where p.key = p_key;
  return coalesce(v_shard, jobs_router.hash_shard(p_key));
end
$$;

create or replace function jobs_router.enqueue_shard(p_id uuid, p_run_id uuid, p_parent_id uuid,
                                                     p_tenant_id text, p_name text)
returns int
language sql stable parallel safe
return coalesce(jobs_router.shard_of(coalesce(p_id, p_run_id, p_parent_id)),
                jobs_router.key_shard(coalesce(p_tenant_id, p_name)), 0);

-- The shards in an order that starts at a random one, so that claims across shards spread.
-- (In PL/pgSQL, as jobs_router.key_shard is: a SQL function that cannot be inlined is planned
-- again on every call.)
create or replace function jobs_router.shards_from_random()
returns setof int
language plpgsql volatile security definer
set search_path = pg_catalog, pg_temp
as $$
begin
  return query
  select s.shard from jobs_router.shards as s,
         (select floor(random() * count(*))::int as start from jobs_router.shards) as r
  order by (s.shard - r.start + 256) % 256;
end
$$;

-- Whether an error of a call through PL/Proxy is that its shard could not be reached
-- (PL/Proxy's own XX000), not a shard's answer (which keeps its SQLSTATE and says REMOTE ERROR).
create or replace function jobs_router.unreachable(p_state text, p_message text)
returns boolean
language sql immutable
return p_state = 'XX000' and p_message like 'PL/Proxy%' and p_message not like '%REMOTE ERROR%';

-- pg_jobs's functions as shard 0 has them: their arguments and results, and the types these
-- use. (A query PL/Proxy runs on shard 0.)
create or replace function jobs_router.shard_catalog(
  out kind text, out name text, out args text, out bare_args text, out call_args text, out result text)
returns setof record
language plproxy
as $$
  cluster 'pg_jobs_shards';
  run on 0;
  select 'type'::text as kind, t.typname::text as name,
         case when t.typtype = 'e'
              then (select string_agg(quote_literal(e.enumlabel), ', ' order by e.enumsortorder)
                    from pg_catalog.pg_enum as e where e.enumtypid = t.oid)
              else (select string_agg(quote_ident(a.attname) || ' ' || pg_catalog.format_type(a.atttypid, a.atttypmod),
                                      ', ' order by a.attnum)
                    from pg_catalog.pg_attribute as a
                    where a.attrelid = t.typrelid and a.attnum > 0 and not a.attisdropped) end as args,
         t.typtype::text as bare_args, null::text as call_args, null::text as result
  from pg_catalog.pg_type as t
  where t.typnamespace = 'jobs'::regnamespace
    and (t.typtype = 'e' or t.typname in ('claimed_job', 'enqueued', 'schedules'))
  union all
  select 'function', p.proname::text, pg_catalog.pg_get_function_arguments(p.oid),
         (select string_agg(quote_ident(a.n) || ' ' || pg_catalog.format_type(a.t, null), ', ' order by a.i)
          from unnest(p.proargnames, p.proargtypes::oid[]) with ordinality as a(n, t, i)
          where a.i <= p.pronargs),
         (select string_agg(quote_ident(a.n), ', ' order by a.i)
          from unnest(p.proargnames) with ordinality as a(n, i) where a.i <= p.pronargs),
         pg_catalog.pg_get_function_result(p.oid)
  from pg_catalog.pg_proc as p
  where p.pronamespace = 'jobs'::regnamespace and p.proname !~ '^_'
  order by 1 desc, 2;
$$;

-- The schema jobs, made again: pg_jobs's types, then its functions, each routed by its rule.
drop schema if exists jobs cascade;
drop schema if exists jobs_on cascade;
create schema jobs;
create schema jobs_on;
comment on schema jobs_on is 'pg_jobs''s functions on one shard, given by its number';
comment on schema jobs is 'pg_jobs through its router: each call runs on the shard it concerns';

-- How each function is routed. A function not listed is not offered by the router.
--   id      by the job (or run) its first argument names
--   enqueue jobs_router.enqueue_shard
--   first   on shard 0 (what every shard answers alike)
-- The others (claim, the batches, the counters, queues) are written below.
create temporary table routes (name text primary key, rule text not null);
insert into routes values
  ('assert_claim', 'id'), ('await_children', 'id'), ('await_event', 'id'), ('cancel', 'id'),
  ('complete', 'id'), ('delete', 'id'), ('fail', 'id'), ('fail_step', 'id'), ('get_job', 'id'),
  ('get_step', 'id'), ('get_steps', 'id'), ('heartbeat', 'id'), ('promote', 'id'),
  ('requeue', 'id'), ('save_step', 'id'), ('sleep', 'id'), ('snooze', 'id'), ('spawn', 'id'),
  ('start_step', 'id'), ('wait_for_job', 'id'),
  ('enqueue', 'enqueue'),
  ('clock', 'first'), ('error_codes', 'first'), ('max_payload_size', 'first'), ('config_export', 'first');

do $$
declare
  v record;
  v_route text;
begin
  for v in select * from jobs_router.shard_catalog() as c where c.kind = 'type' order by c.bare_args desc loop
    if v.bare_args = 'e' then
      execute format('create type jobs.%I as enum (%s)', v.name, v.args);
    else
      execute format('create type jobs.%I as (%s)', v.name, v.args);
    end if;
  end loop;
  for v in select c.*, r.rule from jobs_router.shard_catalog() as c join routes as r on r.name = c.name
           where c.kind = 'function' loop
    v_route := case v.rule
      when 'id' then format('jobs_router.shard_of(%s)', split_part(v.args, ' ', 1))
      when 'enqueue' then 'jobs_router.enqueue_shard(id, run_id, parent_id, tenant_id, name)'
      when 'first' then '0' end;
    execute format('create function jobs.%I(%s) returns %s language plproxy as %L',
                   v.name, v.args, v.result,
                   format(E'cluster ''pg_jobs_shards'';\nrun on %s;\ntarget jobs.%I;', v_route, v.name));
  end loop;
  -- A function on one shard given by number, for the functions written below:
  -- jobs_on.<name>(shard, arguments).
  for v in select c.* from jobs_router.shard_catalog() as c
           where c.kind = 'function'
             and c.name in ('claim', 'complete_many', 'mark_started', 'hand_back', 'get_jobs', 'config_export',
                            'queue_stats', 'outcome_stats', 'pause_queue', 'resume_queue',
                            'set_fairness', 'publish', 'enqueue_batch', 'sweep', 'add_queue',
                            'schedule', 'unschedule', 'run_schedules', 'config_apply') loop
    execute format('create function jobs_on.%I(%s) returns %s language plproxy as %L',
                   v.name, concat_ws(', ', 'shard int', v.bare_args), replace(v.result, 'void', 'setof int'),
                   format(E'cluster ''pg_jobs_shards'';\nrun on shard;\nselect %s from jobs.%I(%s);',
                          case when v.result = 'void' then '0' else '*' end, v.name,
                          coalesce(v.call_args, '')));
  end loop;
end
$$;
drop table routes;

-- A tenant's schedules and live jobs on a shard, for jobs_router.move_tenant.
create function jobs_on.schedules_of(shard int, p_tenant text)
returns setof jobs.schedules
language plproxy
as $$
  cluster 'pg_jobs_shards';
  run on shard;
  select * from jobs.schedules as s where s.job->>'tenant_id' = p_tenant;
$$;

create function jobs_on.live_jobs_of(shard int, p_tenant text)
returns bigint
language plproxy
as $$
  cluster 'pg_jobs_shards';
  run on shard;
  select count(*) from jobs.jobs as j
  where j.tenant_id = p_tenant and j.state not in ('completed', 'failed', 'dead', 'cancelled');
$$;

-- The functions that run on several shards, in PL/pgSQL, with pg_jobs's arguments and results
-- (claim takes one more, shard).
create temporary table bodies (name text primary key, extra_args text, body text not null);

-- claim: on the shard given, as pg_jobs claims (waiting as it does); else across the shards,
-- from a random one on, each asked for the jobs still wanted, without waiting, a shard that
-- cannot be reached skipped with a warning. With wait, it asks again, after 20 ms, then
-- twice as long each time up to 500 ms, until a job comes or wait has passed.
insert into bodies values ('claim', 'shard int DEFAULT NULL::integer', $body$
declare
  v_shard    int;
  v_left     int := max_jobs;
  v_count    int;
  v_deadline timestamptz := clock_timestamp() + coalesce(wait, '0'::interval);
  v_pause    float8 := 0.02;
begin
  if shard is not null or max_jobs is null or max_jobs < 1 then
    return query select * from jobs_on.claim(coalesce(shard, 0), worker_id, queues, max_jobs,
                                                     lease, wait, report_buried, prefetch);
    return;
  end if;
  loop
    for v_shard in select * from jobs_router.shards_from_random() loop
      exit when v_left < 1;
      begin
        return query select * from jobs_on.claim(v_shard, worker_id, queues, v_left, lease,
                                                         null, report_buried, prefetch);
        get diagnostics v_count = row_count;
        v_left := v_left - v_count;
      exception when internal_error then
        if not jobs_router.unreachable(sqlstate, sqlerrm) then
          raise;
        end if;
        raise warning 'jobs.claim: shard % skipped: %', v_shard, sqlerrm;
      end;
    end loop;
    exit when v_left < max_jobs or clock_timestamp() + make_interval(secs => v_pause) > v_deadline;
    perform pg_sleep(v_pause);
    v_pause := least(v_pause * 2, 0.5);
  end loop;
end
$body$);

-- enqueue_batch: on the one shard its specs go to; a batch whose specs would go to several is
-- refused (it could not be taken back on one shard when another refuses).
insert into bodies values ('enqueue_batch', null, $body$
declare
  v_shards int[];
begin
  v_shards := array(select distinct jobs_router.spec_shard(s.spec)
                    from jsonb_array_elements(case jsonb_typeof(specs) when 'array' then specs
                                                   else '[]' end) as s(spec));
  if cardinality(v_shards) > 1 then
    raise exception 'jobs.enqueue_batch: the specs go to % shards (%), and a batch is one transaction on one shard',
      cardinality(v_shards), array_to_string(v_shards, ', ')
      using errcode = '22023',
            hint = 'send one batch per tenant (untenanted: per job name), or give the specs ids, run_ids '
                   'or parent_ids of one shard';
  end if;
  return query select * from jobs_on.enqueue_batch(coalesce(v_shards[1], 0), specs);
end
$body$);

-- The batches of settles: each shard's jobs settled there, one call per shard.
insert into bodies values ('complete_many', null, $body$
declare
  v_shard int;
begin
  for v_shard in select distinct jobs_router.shard_of(i) from unnest(ids) as i where i is not null loop
    return query
      select * from jobs_on.complete_many(v_shard,
        array(select ids[i] from generate_subscripts(ids, 1) as i where jobs_router.shard_of(ids[i]) = v_shard order by i),
        array(select claims[i] from generate_subscripts(ids, 1) as i where jobs_router.shard_of(ids[i]) = v_shard order by i),
        case when results is not null then
          array(select results[i] from generate_subscripts(ids, 1) as i where jobs_router.shard_of(ids[i]) = v_shard order by i) end);
  end loop;
  if cardinality(ids) is distinct from cardinality(claims) or array_position(ids, null) is not null
     or not exists (select from unnest(ids)) then
    return query select * from jobs_on.complete_many(0, ids, claims, results);
  end if;
end
$body$);
insert into bodies values ('mark_started', null, $body$
begin
  return (select coalesce(sum(jobs_on.mark_started(g.shard, g.ids, g.claims)), 0)
          from jobs_router.by_shard(ids, claims) as g);
end
$body$);
insert into bodies values ('hand_back', null, $body$
begin
  return (select coalesce(sum(jobs_on.hand_back(g.shard, g.ids, g.claims)), 0)
          from jobs_router.by_shard(ids, claims) as g);
end
$body$);
insert into bodies values ('get_jobs', null, $body$
declare
  v_group record;
begin
  for v_group in select * from jobs_router.by_shard(ids, null) loop
    return query select * from jobs_on.get_jobs(v_group.shard, v_group.ids);
  end loop;
end
$body$);

-- complete_and_claim: the settles (complete_many), the starts (mark_started), then a claim,
-- each as above; not one transaction.
insert into bodies values ('complete_and_claim', null, $body$
begin
  if cardinality(ids) > 0 then
    perform jobs.complete_many(ids, claims, results);
  end if;
  if cardinality(start_ids) > 0 then
    perform jobs.mark_started(start_ids, start_claims);
  end if;
  if max_jobs > 0 then
    return query select * from jobs.claim(worker_id, queues, max_jobs, lease, null, report_buried, prefetch);
  end if;
end
$body$);

-- The counters: every shard's, added up per queue; a shard that cannot be reached is left out
-- with a warning.
insert into bodies values ('queue_stats', null, $body$
begin
  return query
    select s.queue, bool_or(s.paused), sum(s.ready)::bigint, sum(s.delayed)::bigint, sum(s.running)::bigint,
           sum(s.suspended)::bigint, sum(s.completed)::bigint, sum(s.failed)::bigint, sum(s.dead)::bigint,
           sum(s.cancelled)::bigint, max(s.oldest_ready_age)
    from jobs_router.each_shard('queue_stats') as g,
         lateral jobs_on.queue_stats(g.shard) as s
    group by s.queue order by s.queue;
end
$body$);
insert into bodies values ('outcome_stats', null, $body$
begin
  return query
    select s.queue, sum(s.completed)::bigint, sum(s.retried)::bigint, sum(s.dead)::bigint,
           sum(s.failed)::bigint, sum(s.cancelled)::bigint, sum(s.timed_out)::bigint,
           sum(s.lease_lapsed)::bigint, min(s.since)
    from jobs_router.each_shard('outcome_stats') as g,
         lateral jobs_on.outcome_stats(g.shard) as s
    group by s.queue order by s.queue;
end
$body$);

-- What every shard must do alike: on each, in shard order. A shard that cannot be reached
-- stops it with an error naming the shard; the shards before it have done it, so run it again.
-- A queue paused or resumed is made known to every shard first, when one knows it (a shard
-- knows a queue once a job was enqueued to it there): a queue no shard knows is refused, as
-- pg_jobs refuses it.
insert into bodies values ('pause_queue', null, $body$
begin
  perform jobs_router.register_queue(queue);
  perform jobs_on.pause_queue(g.shard, queue) from jobs_router.every_shard() as g;
end
$body$);
insert into bodies values ('resume_queue', null, $body$
begin
  perform jobs_router.register_queue(queue);
  perform jobs_on.resume_queue(g.shard, queue) from jobs_router.every_shard() as g;
end
$body$);
insert into bodies values ('set_fairness', null, $body$
begin
  perform jobs_router.register_queue(queue);
  return (select max(jobs_on.set_fairness(g.shard, queue, fairness)) from jobs_router.every_shard() as g);
end
$body$);
insert into bodies values ('sweep', null, $body$
begin
  return query select s.* from jobs_router.every_shard() as g, lateral jobs_on.sweep(g.shard, max_rows) as s;
end
$body$);

insert into bodies values ('add_queue', null, $body$
begin
  return (select coalesce(bool_or(jobs_on.add_queue(g.shard, queue)), false) from jobs_router.every_shard() as g);
end
$body$);

-- config_apply: on every shard, in order (a shard that fails stops it; run it again).
insert into bodies values ('config_apply', null, $body$
begin
  return (select format('%s, on each of %s shards', min(jobs_on.config_apply(g.shard, config)), count(*))
          from jobs_router.every_shard() as g);
end
$body$);

-- A schedule lives on one shard, which alone fires it: its job's shard, as an enqueue of the
-- job would go (jobs_router.enqueue_shard). Made there first, then removed from every other
-- shard (where an earlier schedule of the name, for another tenant, may be).
insert into bodies values ('schedule', null, $body$
declare
  v_shard int := jobs_router.enqueue_shard(null, null, null, job->>'tenant_id', coalesce(job->>'name', name));
  v_made  jobs.schedules;
begin
  v_made := jobs_on.schedule(v_shard, name, cron, job, timezone, catch_up, enabled);
  perform jobs_on.unschedule(g.shard, name) from jobs_router.every_shard() as g where g.shard <> v_shard;
  return v_made;
end
$body$);
insert into bodies values ('unschedule', null, $body$
begin
  return (select coalesce(bool_or(jobs_on.unschedule(g.shard, name)), false) from jobs_router.every_shard() as g);
end
$body$);
insert into bodies values ('run_schedules', null, $body$
begin
  return query select r.* from jobs_router.every_shard() as g, lateral jobs_on.run_schedules(g.shard, max_schedules) as r;
end
$body$);

-- publish: a tenant's event to the tenant's shard; an event without a tenant to every shard
-- (its id is the first shard's).
insert into bodies values ('publish', null, $body$
begin
  if tenant_id is not null then
    return jobs_on.publish(jobs_router.key_shard(tenant_id), name, payload, key, ttl, tenant_id);
  end if;
  return (select (array_agg(jobs_on.publish(g.shard, name, payload, key, ttl, null) order by g.shard))[1]
          from jobs_router.every_shard() as g);
end
$body$);

-- The shard a spec of enqueue_batch goes to (jobs_router.enqueue_shard); one whose ids are not
-- UUIDs goes to shard 0, which refuses it.
create or replace function jobs_router.spec_shard(p_spec jsonb)
returns int
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
begin
  return jobs_router.enqueue_shard((p_spec->>'id')::uuid, (p_spec->>'run_id')::uuid, (p_spec->>'parent_id')::uuid,
                                   p_spec->>'tenant_id', p_spec->>'name');
exception when others then
  return 0;
end
$$;

-- Ids (and their claims) grouped by the shard their ids name, in their order.
create or replace function jobs_router.by_shard(p_ids uuid[], p_claims bigint[])
returns table (shard int, ids uuid[], claims bigint[])
language sql immutable
as $$
  select jobs_router.shard_of(p_ids[i]), array_agg(p_ids[i] order by i), array_agg(p_claims[i] order by i)
  from generate_subscripts(p_ids, 1) as i
  group by 1 order by 1
$$;

-- Every shard, in order.
create or replace function jobs_router.every_shard()
returns table (shard int)
language plpgsql stable security definer
set search_path = pg_catalog, pg_temp
as $$
begin
  return query select s.shard from jobs_router.shards as s order by s.shard;
end
$$;

-- Every shard that can be reached, in order (for the counters): one that cannot is left out
-- with a warning naming it.
create or replace function jobs_router.each_shard(p_caller text)
returns table (shard int)
language plpgsql volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_shard int;
begin
  for v_shard in select e.shard from jobs_router.every_shard() as e loop
    begin
      perform jobs_router.ping(v_shard);
      shard := v_shard;
      return next;
    exception when internal_error then
      if not jobs_router.unreachable(sqlstate, sqlerrm) then
        raise;
      end if;
      raise warning 'jobs.%: shard % left out: %', p_caller, v_shard, sqlerrm;
    end;
  end loop;
end
$$;

create or replace function jobs_router.queue_known(shard int, p_queue text)
returns boolean
language plproxy
as $$
  cluster 'pg_jobs_shards';
  run on shard;
  select exists (select from jobs.queues as q where q.queue = p_queue);
$$;

create or replace function jobs_router.register_queue(p_queue text)
returns void
language sql volatile
set search_path = pg_catalog, pg_temp
as $$
  select jobs_on.add_queue(g.shard, p_queue) from jobs_router.every_shard() as g
  where p_queue is not null
    and exists (select from jobs_router.every_shard() as k where jobs_router.queue_known(k.shard, p_queue))
$$;

create or replace function jobs_router.ping(shard int)
returns int
language plproxy
as $$
  cluster 'pg_jobs_shards';
  run on shard;
  select 1;
$$;

-- The keys a shard holds jobs or schedules of: its tenants, and the job names of its
-- untenanted jobs.
create or replace function jobs_router.keys_on(shard int)
returns setof text
language plproxy
as $$
  cluster 'pg_jobs_shards';
  run on shard;
  select distinct coalesce(j.tenant_id, j.name) from jobs.jobs as j
  union select coalesce(s.job->>'tenant_id', s.job->>'name', s.name) from jobs.schedules as s;
$$;

create or replace function jobs_router.shard_number(shard int)
returns int
language plproxy
as $$
  cluster 'pg_jobs_shards';
  run on shard;
  select jobs._shard();
$$;

-- A new shard, the last: every key the shards hold is placed first where it is, so only keys
-- not seen yet hash over the new number of shards (some of them to the new shard); the new
-- shard is given shard 0's configuration (jobs.config_export). Its server must have
-- pg_jobs.shard set to the new shard's number. Run it with no producer writing through the
-- router (a key first enqueued while it runs could be placed on one shard and enqueued on
-- another).
create or replace function jobs_router.add_shard(p_dsn text)
returns text
language plpgsql volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_count  int := jobs_router.shard_count();
  v_placed int;
  v_number int;
begin
  insert into jobs_router.placements (key, shard)
  select k.key, g.shard from jobs_router.every_shard() as g, lateral jobs_router.keys_on(g.shard) as k(key)
  where k.key is not null
  on conflict (key) do nothing;
  get diagnostics v_placed = row_count;
  perform jobs_router.set_shards(array(select s.dsn from jobs_router.shards as s order by s.shard) || p_dsn);
  v_number := jobs_router.shard_number(v_count);
  if v_number is distinct from v_count then
    raise exception 'jobs_router.add_shard: the new server''s pg_jobs.shard is %, not %', coalesce(v_number::text, 'unset'), v_count
      using errcode = '22023', hint = format('set pg_jobs.shard = %s in its postgresql.conf, reload, and add it again', v_count);
  end if;
  perform jobs_on.config_apply(v_count, jobs_on.config_export(0));
  return format('shard %s added; %s keys placed where they were', v_count, v_placed);
end
$$;
revoke all on function jobs_router.add_shard(text) from public;

-- Moves a tenant: its new jobs go to the shard given; its jobs already enqueued finish where
-- they are (each call naming one goes by its id), and its schedules are made again there.
-- While the old shard still has live jobs of the tenant, an idempotency key, an ordering key
-- or a limit of the tenant's is each shard's.
create or replace function jobs_router.move_tenant(p_tenant text, p_shard int)
returns text
language plpgsql volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_from      int := jobs_router.key_shard(p_tenant);
  v_schedule  record;
  v_live      bigint;
begin
  if p_tenant is null or p_shard is null or not exists (select from jobs_router.shards as s where s.shard = p_shard) then
    raise exception 'jobs_router.move_tenant: no shard %', p_shard
      using errcode = '22023', hint = 'pass a tenant and the number of one of jobs_router.shards';
  end if;
  insert into jobs_router.placements (key, shard) values (p_tenant, p_shard)
  on conflict (key) do update set shard = excluded.shard;
  for v_schedule in select * from jobs_on.schedules_of(v_from, p_tenant) loop
    perform jobs.schedule(v_schedule.name, v_schedule.cron, v_schedule.job, v_schedule.timezone,
                          v_schedule.catch_up, v_schedule.enabled);
  end loop;
  v_live := jobs_on.live_jobs_of(v_from, p_tenant);
  return format('tenant %s: new jobs go to shard %s; %s live jobs finish on shard %s', p_tenant, p_shard, v_live, v_from);
end
$$;
revoke all on function jobs_router.move_tenant(text, int) from public;

do $$
declare
  v record;
begin
  for v in select c.*, b.extra_args, b.body from jobs_router.shard_catalog() as c
           join bodies as b on b.name = c.name where c.kind = 'function' loop
    execute format('create function jobs.%I(%s) returns %s language plpgsql volatile as %L',
                   v.name, concat_ws(', ', nullif(v.args, ''), v.extra_args), v.result, v.body);
  end loop;
end
$$;
drop table bodies;

-- Who may call what: every role may use the router's functions (each shard decides, by the
-- role's own grants there, what it may do); only the installing superuser may read the shards'
-- connection strings and the placements, or change them.
grant usage on schema jobs, jobs_on, jobs_router to public;
revoke all on all tables in schema jobs_router from public;
revoke all on function jobs_router.set_shards(text[]), jobs_router.add_shard(text),
  jobs_router.move_tenant(text, int) from public;
