-- The no-framework limit, prepared: one SKIP LOCKED claim statement, then a delete.
with c as (
  update plain.jobs set claimed_at = now()
  where id in (select id from plain.jobs where claimed_at is null
               order by id limit :batch for update skip locked)
  returning id)
select coalesce(array_agg(id), '{}') as ids from c \gset
delete from plain.jobs where id = any(:ids::bigint[]);
