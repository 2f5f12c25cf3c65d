-- pg_jobs, as a driver that prepares calls it: claim a batch of :batch (its own transaction,
-- committed without waiting for its WAL flush), then settle it with complete_many.
select coalesce(array_agg(id), '{}') as ids, coalesce(array_agg(claim), '{}') as claims
from jobs.claim('bench', array['bench'], :batch) \gset
select count(*) from jobs.complete_many(:ids, :claims);
