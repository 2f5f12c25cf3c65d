-- Everything pg_jobs defines, one entry per object, sorted: functions (definition, settings,
-- security, privileges, comment), tables, views, sequences and types (columns, defaults,
-- options, privileges, comments), indexes, constraints, triggers, enum labels, the schema's
-- privileges, the configuration tables pg_dump carries, and a count of members per catalog.
-- An upgraded database must print exactly what a fresh install prints. Without the extension
-- (the SQL-only edition installed by psql), its members are what is in its schemas.
with ext as (
  select oid, extconfig, extcondition from pg_extension where extname = 'pg_jobs'
), schemas as (
  select oid from pg_namespace where nspname in ('jobs', 'jobs_data', 'jobs_config')
), members as (
  select d.classid::regclass::text as catalog, d.objid
  from pg_depend d, ext
  where d.refclassid = 'pg_extension'::regclass and d.refobjid = ext.oid and d.deptype = 'e'
  union all
  select 'pg_proc', p.oid from pg_proc p
  where not exists (select from ext) and p.pronamespace in (select oid from schemas)
  union all
  select 'pg_class', c.oid from pg_class c
  where not exists (select from ext) and c.relnamespace in (select oid from schemas)
    and c.relkind in ('r', 'p', 'v', 'm', 'S')
  union all
  select 'pg_type', t.oid from pg_type t left join pg_class c on c.oid = t.typrelid
  where not exists (select from ext) and t.typnamespace in (select oid from schemas)
    and (t.typtype in ('e', 'd', 'r', 'm') or c.relkind = 'c')
), rels as (
  select c.* from pg_class c join members m on m.catalog = 'pg_class' and m.objid = c.oid
  union
  select c.* from pg_class c join pg_type t on t.typrelid = c.oid
  join members m on m.catalog = 'pg_type' and m.objid = t.oid
)
select entry from (
  select 'function ' || p.oid::regprocedure || E'\n' || pg_get_functiondef(p.oid)
         || E'\n  acl ' || coalesce(p.proacl::text, '(default)')
         || E'\n  comment ' || coalesce(obj_description(p.oid, 'pg_proc'), '(none)') as entry
  from pg_proc p join members m on m.catalog = 'pg_proc' and m.objid = p.oid
  union all
  select format('relation %s kind %s options %s acl %s comment %s', c.oid::regclass, c.relkind,
                coalesce(c.reloptions::text, '(none)'), coalesce(c.relacl::text, '(default)'),
                coalesce(obj_description(c.oid, 'pg_class'), '(none)'))
  from rels c
  union all
  select format('column %s #%s %s %s%s%s%s comment %s', c.oid::regclass,
                row_number() over (partition by c.oid order by a.attnum), a.attname,
                format_type(a.atttypid, a.atttypmod),
                case when a.attnotnull then ' not null' else '' end,
                coalesce(' default ' || pg_get_expr(d.adbin, d.adrelid), ''),
                coalesce(' identity ' || nullif(a.attidentity::text, ''), ''),
                coalesce(col_description(c.oid, a.attnum), '(none)'))
  from rels c join pg_attribute a on a.attrelid = c.oid and a.attnum > 0 and not a.attisdropped
  left join pg_attrdef d on d.adrelid = c.oid and d.adnum = a.attnum
  union all
  select 'view ' || c.oid::regclass || E'\n' || pg_get_viewdef(c.oid) from rels c where c.relkind = 'v'
  union all
  select format('index %s on %s: %s options %s', i.indexrelid::regclass, i.indrelid::regclass,
                pg_get_indexdef(i.indexrelid), coalesce(ic.reloptions::text, '(none)'))
  from pg_index i join rels c on c.oid = i.indrelid join pg_class ic on ic.oid = i.indexrelid
  union all
  select format('constraint %s on %s: %s', co.conname, coalesce(co.conrelid::regclass::text, co.contypid::regtype::text),
                pg_get_constraintdef(co.oid))
  from pg_constraint co
  where co.conrelid in (select oid from rels)
     or co.contypid in (select objid from members where catalog = 'pg_type')
  union all
  select format('trigger %s', pg_get_triggerdef(tg.oid))
  from pg_trigger tg where tg.tgrelid in (select oid from rels) and not tg.tgisinternal
  union all
  select format('type %s kind %s labels %s acl %s', t.oid::regtype, t.typtype,
                (select string_agg(e.enumlabel, ',' order by e.enumsortorder) from pg_enum e where e.enumtypid = t.oid),
                coalesce(t.typacl::text, '(default)'))
  from pg_type t join members m on m.catalog = 'pg_type' and m.objid = t.oid
  union all
  select format('schema %s owner %s acl %s', n.nspname, n.nspowner::regrole, coalesce(n.nspacl::text, '(default)'))
  from pg_namespace n where n.nspname in ('jobs', 'jobs_data', 'jobs_config')
  union all
  select format('dumped with pg_dump: %s %s', cfg.rel::regclass, coalesce(cond.c, ''))
  from ext, unnest(ext.extconfig) with ordinality as cfg(rel, i)
  left join unnest(ext.extcondition) with ordinality as cond(c, i) using (i)
  union all
  select format('members in %s: %s', catalog, count(*)) from members group by catalog
) entries
order by entry;
