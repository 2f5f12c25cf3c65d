-- Dissection: the drain on the hot/cold split of split_schema.sql. The claim updates the narrow
-- row and reads the payload from split.body; completing deletes the narrow row and writes a
-- narrow history row (drop the INSERT, answering count(*) from d, for no history).
with c as (
  update split.live l set state = 'running', attempt = l.attempt + 1, claim = l.claim + 1,
    lease_expires_at = now() + interval '30 seconds', lease_scan_at = now() + interval '30 seconds'
  where l.id in (select id from split.live where queue = 'bench' and state = 'ready'
                 order by priority desc, run_at limit :batch for update skip locked)
  returning l.id, l.claim)
select coalesce(array_agg(c.id), '{}') as ids, coalesce(array_agg(c.claim), '{}') as claims, count(b.payload) as n
from c join split.body b on b.id = c.id \gset
with d as (
  delete from split.live l using unnest(':ids'::uuid[], ':claims'::bigint[]) as i(id, claim)
  where l.id = i.id and l.claim = i.claim and l.state = 'running' and l.lease_expires_at > now()
  returning l.id, l.attempt)
insert into split.done (id, state, attempt, claimed_by, result, finished_at)
select d.id, 'completed', d.attempt, 'w', null, now() from d;
