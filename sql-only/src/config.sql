-- The SQL-only edition's settings and tenant bindings. The extension keeps them in settings
-- of its library that only a superuser may set (src/gucs.rs, docs/SECURITY.md); without the
-- library a setting is a placeholder any role may SET, so this edition keeps them in tables of
-- a schema of their own, jobs_config, that the installing role owns and grants to nobody (not
-- to admins either: jobs.grant_admin grants the tables of jobs and jobs_data). Only that role
-- (or a superuser) moves the clock, changes a retention or a payload limit, or binds a role
-- to a tenant by hand; the functions below read the tables as their owner.

create schema jobs_config;
comment on schema jobs_config is
  'The settings and tenant bindings of pg_jobs''s SQL-only edition: its owner''s alone';
revoke all on schema jobs_config from public;

-- The extension's settings pg_jobs.clock_offset (seconds), pg_jobs.completed_retention and
-- pg_jobs.dead_retention (seconds), pg_jobs.max_payload_size (kB), with their ranges; a
-- setting without a row has its default (jobs_config.setting). No row is made here, so a dump
-- of the pg_tle form restores the rows an owner wrote into a table the restore made empty.
create table jobs_config.settings (
  name  text primary key check (name in ('clock_offset', 'completed_retention', 'dead_retention',
                                         'max_payload_size', 'shard')),
  value int not null,
  check (case name when 'clock_offset' then value > -2147483647
                   when 'max_payload_size' then value between 1 and 1048576
                   when 'shard' then value between 0 and 255
                   else value >= 0 end)
);
comment on table jobs_config.settings is
  'pg_jobs''s settings in the SQL-only edition (the extension''s pg_jobs.clock_offset, '
  'completed_retention, dead_retention in seconds, max_payload_size in kB, shard); no row: the default';

-- When jobs.sweep() last ran (jobs._retention notes it): a claim warns, once per connection,
-- when nothing has swept the database for ten minutes (jobs._async_if_alone).
create table jobs_config.last_sweep (at timestamptz);
insert into jobs_config.last_sweep (at) values (null);
comment on table jobs_config.last_sweep is
  'When jobs.sweep() last ran in this database (run it from pg_cron: docs/EDITIONS.md)';

-- The extension's pg_jobs.tenants set for a role in a database (pg_db_role_setting).
-- (regrole: a dump names the role, a restore finds it again, and a rename keeps the binding.)
create table jobs_config.tenant_bindings (
  role    regrole not null,
  tenants jsonb not null,
  primary key (role)
);
comment on table jobs_config.tenant_bindings is
  'The tenants a role of this database is bound to (jobs.grant_producer(role, tenant), ...): '
  'DELETE a row to unbind';

-- `jobs._last_sweep()`: when jobs.sweep() last ran here (NULL: never), for `pgjobs doctor`; an
-- admin's (jobs.grant_admin), as every function of jobs is. This edition's own.
create function jobs._last_sweep()
returns timestamptz
language sql stable security definer
set search_path = pg_catalog, pg_temp
as $$ select l.at from jobs_config.last_sweep as l $$;

-- Installed as an extension (pg_tle), its tables' rows are dumped by pg_dump only so: a restore
-- without the bindings would leave bound roles unbound. (Not the last sweep's time: a restored
-- database has not been swept.) (The file form's tables are dumped as
-- any table is; scripts/sql-only.py leaves these calls out of it.)
select pg_catalog.pg_extension_config_dump('jobs_config.settings', '');
select pg_catalog.pg_extension_config_dump('jobs_config.tenant_bindings', '');

-- A setting's value: the table's, unless the setting of the same name counts as the
-- extension's would. pg_jobs.clock_offset and pg_jobs.max_payload_size may be set by a
-- superuser only, so a session's value counts when the session's user is a superuser (a
-- non-superuser's SET of the placeholder is ignored); pg_jobs.completed_retention and
-- pg_jobs.dead_retention are server-wide, so their value in the server's configuration files
-- counts (ALTER SYSTEM, postgresql.conf: pg_file_settings, where the owner may read it), never
-- a session's. Looked for only when the session has the setting at all, which no library
-- defines here: an unset one costs a current_setting(). Seconds, or kB for max_payload_size.
create function jobs_config.setting(p_name text)
returns bigint
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
declare
  v_text  text := current_setting('pg_jobs.' || p_name, true);
  v_parts text[];
begin
  if v_text is null or v_text = '' then
    v_text := null;
  elsif p_name in ('clock_offset', 'max_payload_size') then
    v_text := case when current_setting('is_superuser') = 'on' then v_text end;
  elsif has_table_privilege('pg_catalog.pg_file_settings', 'select') then
    select f.setting into v_text from pg_catalog.pg_file_settings as f
    where f.name = 'pg_jobs.' || p_name and f.error is null
    order by f.seqno desc limit 1;
  else
    v_text := null;
  end if;
  if v_text is not null then
    v_parts := regexp_match(v_text, '^\s*(-?[0-9]+)\s*([A-Za-z]*)\s*$');
    if p_name = 'max_payload_size' then
      return v_parts[1]::bigint * case v_parts[2] when '' then 1 when 'kB' then 1 when 'MB' then 1024
                                                   when 'GB' then 1048576 end;
    end if;
    return extract(epoch from v_text::interval)::bigint;
  end if;
  return coalesce((select s.value from jobs_config.settings as s where s.name = p_name),
                  case p_name when 'completed_retention' then 7 * 24 * 3600
                              when 'dead_retention' then 30 * 24 * 3600
                              when 'max_payload_size' then 1024
                              else 0 end);
end
$$;
revoke all on function jobs_config.setting(text) from public;

-- `jobs.clock()`: clock_timestamp() plus the clock_offset setting (0 unless set; tests move
-- time with it instead of sleeping). It is called several times by every claim and settle, so
-- it is a SQL-standard body the planner inlines (no SECURITY DEFINER, no setting, no table
-- read: each would stop that, and cost a call each time, measured in docs/BENCHMARKS.md): the
-- table's offset is written into it as a constant, by jobs_config._make_clock, when the table
-- changes; a superuser's session adds its own. Its names were resolved when it was made, with
-- pg_catalog first.
create function jobs.clock()
returns timestamptz
language sql volatile parallel safe
begin atomic
  select pg_catalog.clock_timestamp();  -- (made again below, with the offsets)
end;

create function jobs_config._make_clock()
returns trigger
language plpgsql volatile
set search_path = pg_catalog, pg_temp
as $$
begin
  execute format(
    'create or replace function jobs.clock() returns timestamptz language sql volatile parallel safe '
    'begin atomic select clock_timestamp() + %L::interval + case when current_setting(''is_superuser'') = ''on'' '
    'then coalesce(nullif(current_setting(''pg_jobs.clock_offset'', true), ''''), ''0'')::interval '
    'else ''0''::interval end; end',
    make_interval(secs => coalesce((select s.value from jobs_config.settings as s where s.name = 'clock_offset'), 0)));
  return null;
end
$$;
revoke all on function jobs_config._make_clock() from public;

create trigger settings_make_clock
after insert or update or delete or truncate on jobs_config.settings
for each statement execute function jobs_config._make_clock();

-- (the clock with the offsets: a statement on the table, which fires the trigger)
delete from jobs_config.settings where false;

-- `jobs._retention(setting, default)`: how long finished jobs are kept (volatile here: it notes
-- a sweep).
create function jobs._retention(setting text, _default interval)
returns interval
language plpgsql volatile security definer
set search_path = pg_catalog, pg_temp
as $$
begin
  if setting is null or setting not in ('pg_jobs.completed_retention', 'pg_jobs.dead_retention') then
    raise exception 'jobs._retention: % is not a retention setting of pg_jobs', setting
      using errcode = 'XX000';
  end if;
  -- jobs.sweep() reads dead_retention once per pass and nothing else reads it (sql/sweep.sql;
  -- sql-only/tests/test_sql_only.py checks it): the pass is noted here, skipping a row another
  -- sweep holds.
  if setting = 'pg_jobs.dead_retention' then
    update jobs_config.last_sweep set at = clock_timestamp()
    where ctid = (select l.ctid from jobs_config.last_sweep as l for update skip locked);
  end if;
  return make_interval(secs => jobs_config.setting(substr(setting, length('pg_jobs.') + 1)));
end
$$;

-- `jobs._max_payload_size()`: the max_payload_size setting in bytes.
create function jobs._max_payload_size()
returns bigint
language sql stable strict parallel safe security definer
set search_path = pg_catalog, pg_temp
as $$ select jobs_config.setting('max_payload_size') * 1024 $$;

-- `jobs._shard()`: this database's shard number, or NULL where it is not a shard. The
-- extension's pg_jobs.shard is server-wide; this edition's is the table's row alone (read for
-- every id made, so no configuration file is read): set it before the database's first job.
create function jobs._shard()
returns int
language sql stable parallel safe security definer
set search_path = pg_catalog, pg_temp
as $$ select s.value from jobs_config.settings as s where s.name = 'shard' $$;

-- `jobs._size(value)`: a value's size uncompressed, as every limit measures it. A value stored
-- uncompressed is measured as it is (pg_column_size); one that came compressed from a table is
-- measured as its text, as SQL cannot read the size in its header (the extension does).
create function jobs._size(p_value anyelement)
returns bigint
language sql immutable strict parallel safe
set search_path = pg_catalog, pg_temp
as $$ select case when pg_column_compression(p_value) is null then pg_column_size(p_value)
                  else octet_length(p_value::text) end $$;

-- `jobs._tenants()`: the tenants the session's login role is bound to, or NULL for a role that
-- is not bound, by the rule of jobs._binding() (sql/privileges.sql: its own binding, else its
-- bound roles' through membership; refused where a role bound to none lends it rights too). A
-- binding that is not a JSON array of strings binds the role to no tenant at all, so a
-- mistyped binding refuses rather than allows. (No setting a session may SET counts.) A
-- database that binds no role answers at once.
create function jobs._tenants()
returns text[]
language sql stable strict parallel safe security definer
set search_path = pg_catalog, pg_temp
as $$
  select case when not exists (select from jobs_config.tenant_bindings) then null
              else (select case when left(b.binding, 1) = '{' then jobs._binding_refused(b.binding::jsonb)
                                else array(select jsonb_array_elements_text(jobs._binding_array(b.binding))) end
                    from jobs._binding() as b(binding) where b.binding is not null) end
$$;

-- `jobs._bindings()`: the bound roles and their tenants, for jobs._binding().
create function jobs._bindings()
returns table (role oid, tenants text)
language sql stable security definer
set search_path = pg_catalog, pg_temp
as $$ select b.role::oid, b.tenants::text from jobs_config.tenant_bindings as b $$;

-- Binding a role to a tenant: a row of jobs_config.tenant_bindings, which the role cannot
-- change. A bound role enqueues (and dedupes) for its tenants only, is handed only their jobs
-- by claim, and reads only their runs' steps (jobs._tenants). Each call adds one tenant; a role
-- with no binding behaves as before. To unbind:
--   delete from jobs_config.tenant_bindings where role = 'r'::regrole;
create function jobs._bind_tenant(p_fn text, p_role name, p_tenant text)
returns jsonb
language plpgsql volatile
as $$
declare
  v_tenants jsonb;
begin
  perform jobs._check_binding(p_fn, p_role, p_tenant);
  insert into jobs_config.tenant_bindings as b (role, tenants)
  values (quote_ident(p_role)::regrole, jsonb_build_array(p_tenant))
  on conflict (role) do update
    set tenants = (select coalesce(jsonb_agg(distinct t.tenant), '[]')
                   from (select jsonb_array_elements_text(b.tenants) as tenant
                         union select p_tenant) as t)
  returning b.tenants into v_tenants;
  return v_tenants;
end
$$;
