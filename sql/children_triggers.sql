-- The triggers of child jobs on jobs_data.jobs: jobs._family_changed (sql/children.sql) runs
-- for a row whose state changes while it has a parent or live children, and for a child
-- deleted (it tests whether the child was live: the WHEN clause stays short, as in
-- sql/ordering_triggers.sql); jobs._family_statement_end (src/commit/children.rs) at the end of every
-- UPDATE and DELETE, applies what those noted (at once when they noted nothing). Run by the
-- install and by the upgrade (after the functions exist).

create trigger jobs_family_changed
after update of state on jobs_data.jobs
for each row
when ((new.parent_id is not null or old.children_live > 0) and old.state is distinct from new.state)
execute function jobs._family_changed();

create trigger jobs_child_deleted
after delete on jobs_data.jobs
for each row
when (old.parent_id is not null)
execute function jobs._family_changed();

create trigger jobs_family_statement_end
after update or delete on jobs_data.jobs
for each statement
execute function jobs._family_statement_end();
