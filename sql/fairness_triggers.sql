-- The trigger of fair queues on jobs_data.queues (sql/fairness.sql): a queue's fairness is
-- checked, and its live jobs regrouped, however the row is written. Run by the install and by
-- the upgrade (after the function exists).

create trigger queues_fairness_set
before insert or update of fairness on jobs_data.queues
for each row
execute function jobs._queue_fairness_set();
