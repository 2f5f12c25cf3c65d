-- pg_jobs: claim a batch of :batch, then settle it with complete_many (two transactions,
-- as a worker does).
select coalesce(array_agg(id), '{}') as ids, coalesce(array_agg(claim), '{}') as claims
from jobs.claim('bench', array['bench'], :batch) \gset
select count(*) from jobs.complete_many(':ids'::uuid[], ':claims'::bigint[]);
