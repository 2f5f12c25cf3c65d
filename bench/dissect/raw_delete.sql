-- Dissection: as raw_update.sql, but the completion deletes the row (what
-- pg_jobs.completed_retention = 0 does). See docs/BENCHMARKS.md, "Where the remaining gap comes from".
with c as (
  update jobs.jobs j set state = 'running', attempt = j.attempt + 1, claim = j.claim + 1,
    lease = '30 seconds', lease_expires_at = now() + interval '30 seconds', lease_scan_at = now() + interval '30 seconds',
    claimed_by = 'w', updated_at = now()
  where j.id in (select id from jobs.jobs where queue = 'bench' and state = 'ready'
               order by priority desc, run_at limit :batch for update skip locked)
  returning j.id, j.claim)
select coalesce(array_agg(id), '{}') as ids, coalesce(array_agg(claim), '{}') as claims from c \gset
delete from jobs.jobs j 
using unnest(':ids'::uuid[], ':claims'::bigint[]) as i(id, claim)
where j.id = i.id and j.claim = i.claim and j.state = 'running' and j.lease_expires_at > now();
