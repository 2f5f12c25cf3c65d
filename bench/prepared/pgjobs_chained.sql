-- pg_jobs, chained: the last batch completed and the next claimed in one call and one commit
-- (jobs.complete_and_claim), as the example workers run. Start with -D ids={} -D claims={}.
select coalesce(array_agg(id), '{}') as ids, coalesce(array_agg(claim), '{}') as claims
from jobs.complete_and_claim(:ids, :claims, 'bench', array['bench'], :batch) \gset
