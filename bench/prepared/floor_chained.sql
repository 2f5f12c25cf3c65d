-- The contract's floor: the two row versions a job needs under pg_jobs's contract (the claim:
-- running, with a lease and a new token; the completion: completed, kept as history), written
-- by bare statements on pg_jobs's own table, with none of pg_jobs's checks, fence, policies,
-- limits, burials, retention or wake-ups. The last batch completed and the next claimed in one
-- statement and one commit, as jobs.complete_and_claim does. Start with -D ids={}.
-- Not a queue anyone should run: it is what no implementation of the contract can beat.
with done as (
  update jobs_data.jobs as j set state = 'completed', lease = null, lease_expires_at = null,
         lease_scan_at = null, finished_at = now(), updated_at = now()
  where j.id = any(:ids::uuid[]) and j.state = 'running'
  returning 1),
claimed as (
  update jobs_data.jobs as j set state = 'running', attempt = j.attempt + 1, claim = j.claim + 1,
         lease = interval '30 s', lease_expires_at = now() + interval '30 s',
         lease_scan_at = now() + interval '30 s', claimed_by = 'bench', updated_at = now()
  where j.id in (select f.id from jobs_data.jobs as f where f.queue = 'bench' and f.state = 'ready'
                 order by f.priority desc, f.run_at limit :batch for update skip locked)
  returning j.id)
select (select count(*) from done) as completed, coalesce(array_agg(id), '{}') as ids
from claimed \gset
