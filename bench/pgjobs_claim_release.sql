-- Claim throughput with a fixed backlog: claim 10, then put them back (the same statement
-- for every backlog, so only the claim's cost differs between backlogs).
select coalesce(array_agg(id), '{}') as ids from jobs.claim('bench', array['bench'], 10) \gset
update jobs_data.jobs set state = 'ready', lease_expires_at = null where id = any(':ids'::uuid[]);
