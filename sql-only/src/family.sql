-- The SQL-only edition's counts of live children (src/commit/children.rs in the extension). The
-- extension's row trigger notes each child's move in the backend's memory and a statement
-- trigger applies them; without a library nothing outlives a call but what a role could also
-- write (a setting), so here the statement triggers read the statement's own rows from its
-- transition tables and move each parent's count by the sum, one parent after the other in
-- id order (jobs._family_apply), as the extension does. The cost: every UPDATE and DELETE of
-- jobs_data.jobs keeps its old and new rows for its trigger (transition tables cannot be
-- limited to UPDATE OF state).

-- `jobs._family_note(parent, move)`: the statement triggers find the moves themselves.
create function jobs._family_note(parent uuid, delta int)
returns boolean
language sql volatile strict
as $$ select true $$;

-- `jobs._in_background_worker()`: whether this session is the sweep's (a background worker, or
-- pg_cron's connection): its statements must not wait on a parent row another transaction
-- holds (jobs._family_apply). A client that claims to be pg_cron only defers its own moves to
-- the next sweep.
create function jobs._in_background_worker()
returns boolean
language sql stable strict parallel safe
as $$
  select coalesce(current_setting('application_name', true), '') = 'pg_cron'
         or coalesce((select a.backend_type <> 'client backend' from pg_catalog.pg_stat_activity as a
                      where a.pid = pg_catalog.pg_backend_pid()), false)
$$;

-- The statement triggers on jobs_data.jobs (UPDATE; DELETE): each parent's count moves by the
-- number of its children that became live less those that stopped being live.
create function jobs._family_statement_end()
returns trigger
language plpgsql volatile
as $$
declare
  v_parents uuid[];
  v_deltas  int[];
begin
  if tg_op = 'UPDATE' then
    select array_agg(m.parent_id order by m.parent_id), array_agg(m.delta order by m.parent_id)
      into v_parents, v_deltas
    from (select n.parent_id,
                 sum(case when n.state in ('ready', 'delayed', 'running', 'suspended') then 1 else -1 end)::int as delta
          from family_old as o join family_new as n on n.id = o.id
          where n.parent_id is not null
            and (o.state in ('ready', 'delayed', 'running', 'suspended'))
                <> (n.state in ('ready', 'delayed', 'running', 'suspended'))
          group by n.parent_id) as m
    where m.delta <> 0;
  else
    select array_agg(m.parent_id order by m.parent_id), array_agg(m.delta order by m.parent_id)
      into v_parents, v_deltas
    from (select o.parent_id, -count(*)::int as delta
          from family_old as o
          where o.parent_id is not null and o.state in ('ready', 'delayed', 'running', 'suspended')
          group by o.parent_id) as m;
  end if;
  if v_parents is not null then
    perform jobs._family_apply(v_parents, v_deltas);
  end if;
  return null;
end
$$;

create trigger jobs_family_statement_end
after update on jobs_data.jobs
referencing old table as family_old new table as family_new
for each statement
execute function jobs._family_statement_end();

create trigger jobs_family_statement_end_delete
after delete on jobs_data.jobs
referencing old table as family_old
for each statement
execute function jobs._family_statement_end();
