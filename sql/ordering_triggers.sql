-- The triggers of ordering keys on jobs_data.jobs (sql/ordering.sql): the end of a key's current
-- job, by any path (a settle, a burial, a cancel, a timeout, a delete), starts its next. Their
-- WHEN clauses test ordering_key only, so a job without one costs one test; the function tests
-- the states. PostgreSQL reads a WHEN clause again for every statement that fires its trigger,
-- so every claim and settle of any job pays for the clause's length. Run by the install and by
-- the upgrade (after the functions exist).

create trigger jobs_ordering_ended
after update of state on jobs_data.jobs
for each row
when (old.ordering_key is not null)
execute function jobs._ordering_ended();

create trigger jobs_ordering_deleted
after delete on jobs_data.jobs
for each row
when (old.ordering_key is not null)
execute function jobs._ordering_ended();
