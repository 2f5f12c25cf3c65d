-- Fair queues: a claim takes turns among a queue's tenants (or concurrency keys), so one
-- group's backlog cannot starve the others.
\set VERBOSITY default
\set SHOW_CONTEXT never
truncate jobs_data.jobs, jobs_data.job_types, jobs_data.attempts;
delete from jobs_data.queues where queue <> 'default';
select queue, paused, fairness from jobs.queues;

-- Refusals change nothing.
\set VERBOSITY sqlstate
select jobs.set_fairness(null, 'tenant');
select jobs.set_fairness('fair', 'round_robin');
select jobs.set_fairness('fair', null);
update jobs.queues set fairness = 'tenants' where queue = 'default';
\set VERBOSITY default
select jobs.set_fairness('fair', 'round_robin');
update jobs.queues set fairness = 'tenants' where queue = 'default';
select queue, fairness from jobs.queues order by queue;

-- A backlog of 20 jobs of tenant big, then two of tenant a, one of b and one with no tenant,
-- in a queue made fair before any job (set_fairness registers it).
select jobs.set_fairness('fair', 'tenant');
select count(*) from (select jobs.enqueue('t', jsonb_build_object('n', i), queue => 'fair', tenant_id => 'big')
                      from generate_series(1, 20) as i) as e;
select jobs.enqueue('t', '{"n": 21}', queue => 'fair', tenant_id => 'a') is not null as a1,
       jobs.enqueue('t', '{"n": 22}', queue => 'fair', tenant_id => 'a', priority => 5) is not null as a2,
       jobs.enqueue('t', '{"n": 23}', queue => 'fair', tenant_id => 'b') is not null as b1,
       jobs.enqueue('t', '{"n": 24}', queue => 'fair') is not null as none1;
select fair_group, count(*) from jobs_data.jobs group by 1 order by 1;
-- Claims of one job take the groups in turn ('' is the jobs without a tenant); a's
-- higher-priority job first within a.
select tenant_id, payload->>'n' as n from jobs.claim('w', array['fair'], 1);
select tenant_id, payload->>'n' as n from jobs.claim('w', array['fair'], 1);
select tenant_id, payload->>'n' as n from jobs.claim('w', array['fair'], 1);
select tenant_id, payload->>'n' as n from jobs.claim('w', array['fair'], 1);
select tenant_id, payload->>'n' as n from jobs.claim('w', array['fair'], 1);
-- A claim of four: a's last job, then big fills the batch (the groups ran short), in claim order.
select tenant_id, payload->>'n' as n from jobs.claim('w', array['fair'], 4) order by (payload->>'n')::int;

-- Due jobs take turns too: a delayed job of tenant c comes due behind big's backlog.
select jobs.enqueue('t', '{"n": 25}', queue => 'fair', tenant_id => 'c', run_at => jobs.clock() + interval '2 seconds') is not null as c1;
set pg_jobs.clock_offset = '5s';
select count(*) filter (where tenant_id = 'c') as of_c, count(*) as claimed
from jobs.claim('w', array['fair'], 2);
select state, count(*) from jobs_data.jobs where tenant_id = 'c' group by 1;
reset pg_jobs.clock_offset;

-- Fairness by concurrency key; changing it regroups the live jobs, and 'none' ungroups them.
select jobs.set_fairness('fair', 'concurrency_key');
select jobs.enqueue('t', '{"n": 26}', queue => 'fair', tenant_id => 'big', concurrency_key => 'k1') is not null as k1;
select fair_group, count(*) from jobs_data.jobs where state in ('ready', 'running') group by 1 order by 1;
select tenant_id, payload->>'n' as n from jobs.claim('w', array['fair'], 2) order by 2;
update jobs.queues set fairness = 'none' where queue = 'fair';
select count(*) filter (where fair_group is not null) as grouped from jobs_data.jobs;
select count(*) as claimed_in_order from jobs.claim('w', array['fair'], 5);

-- A requeued job takes its queue's grouping as it is now.
select jobs.set_fairness('fair', 'tenant');
select id, claim from jobs.jobs where payload->>'n' = '26' \gset
select jobs.complete(:'id', :claim) as completed;
select state from jobs.jobs where id = :'id';
select jobs.requeue(:'id') is not null as requeued;
select fair_group, state from jobs_data.jobs where id = :'id';

-- A claim of several queues: each fair queue's first turn beside the others' jobs, in claim
-- order, then its later turns.
select jobs.enqueue('t', '{"n": 27}') is not null as in_default,
       jobs.enqueue('t', '{"n": 28}', queue => 'fair', tenant_id => 'a') is not null as a3;
select queue, tenant_id, payload->>'n' as n from jobs.claim('w', array['default', 'fair'], 3)
order by queue, (payload->>'n')::int;
select count(*) as left_ready from jobs.jobs where state = 'ready';

-- The sweep's hourly prune of queues with no job keeps a fair one (its row holds the setting).
select jobs.set_fairness('fair_and_empty', 'tenant');
update jobs_data.maintenance set queues_pruned_at = null;
select affected from jobs.sweep() where task = 'queues_deleted';
select queue, fairness from jobs.queues where queue = 'fair_and_empty';
