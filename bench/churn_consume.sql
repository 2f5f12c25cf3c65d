-- Steady churn, worker side: claim up to 10, complete them; idle briefly when nothing is due.
select coalesce(array_agg(id), '{}') as ids, coalesce(array_agg(claim), '{}') as claims,
       count(*) as n
from jobs.claim('churn', array['bench'], 10) \gset
\if :n = 0
\sleep 5 ms
\else
select count(*) from jobs.complete_many(':ids'::uuid[], ':claims'::bigint[]);
\endif
