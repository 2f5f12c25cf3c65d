-- The no-framework limit in its best loop, prepared: the last batch deleted and the next
-- claimed (SKIP LOCKED) in one statement and one commit, as jobs.complete_and_claim chains
-- them. Start with -D ids={}.
with done as (
  delete from plain.jobs where id = any(:ids::bigint[])
  returning 1),
claimed as (
  update plain.jobs set claimed_at = now()
  where id in (select id from plain.jobs where claimed_at is null
               order by id limit :batch for update skip locked)
  returning id)
select (select count(*) from done) as deleted, coalesce(array_agg(id), '{}') as ids
from claimed \gset
