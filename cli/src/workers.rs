//! `pgjobs workers` and the dashboard's Workers page: the claimers the database has seen, read
//! from the jobs they hold and the ones they finished in the last hour (a claim writes its
//! worker id into `claimed_by`; a heartbeat moves `lease_expires_at`), and the running jobs
//! whose holder's lease lapsed.

use crate::output;
use anyhow::Result;
use tokio_postgres::Client;

/// Each claimer: the jobs it holds, the queues it works, its last claim, how long its leases
/// run (a heartbeat moves them), how many of its jobs lapsed, the jobs it finished in the last
/// hour, and its status: `working` (a lease not lapsed), `gone` (every lease it holds lapsed: it
/// stopped heartbeating), `idle` (holds nothing, finished jobs in the last hour). Finished jobs
/// are read through jobs_finished_idx, once for roots and once for children; running ones
/// through jobs_lease_idx. (Children are `< true`: `= false` is rewritten as a NOT, which no
/// index condition takes.)
pub const WORKERS: &str = "select row_to_json(x) from (
  select s.worker,
         case when not bool_or(s.held) then 'idle'
              when max(s.lease_expires_at) filter (where s.held) <= jobs.clock() then 'gone'
              else 'working' end as status,
         count(*) filter (where s.held) as held,
         count(*) filter (where s.held and s.lease_expires_at <= jobs.clock()) as lapsed,
         string_agg(distinct s.queue, ', ') as queues,
         date_trunc('second', max(s.claimed_at)) as last_claim,
         date_trunc('second', max(s.lease_expires_at) filter (where s.held)) as lease_until,
         count(*) filter (where not s.held) as finished_last_hour
  from (
    select j.claimed_by as worker, j.queue, true as held, j.claimed_at, j.lease_expires_at
    from jobs.jobs as j where j.state = 'running' and j.lease_scan_at is not null
    union all
    select j.claimed_by, j.queue, false, j.claimed_at, null
    from jobs.jobs as j
    where j.state in ('completed', 'failed', 'dead') and (j.parent_id is null) = true
      and j.finished_at > (select jobs.clock()) - interval '1 hour'
    union all
    select j.claimed_by, j.queue, false, j.claimed_at, null
    from jobs.jobs as j
    where j.state in ('completed', 'failed', 'dead') and (j.parent_id is null) < true
      and j.finished_at > (select jobs.clock()) - interval '1 hour'
  ) as s
  where s.worker is not null
  group by s.worker) as x
order by x.status = 'gone' desc, x.status = 'idle', x.worker";

/// Per queue, the running jobs whose lease lapsed and who held them: a claim on the queue, or
/// the sweep, takes them back (as a new attempt, or buried on the final one).
pub const LAPSED: &str = "select row_to_json(x) from (
  select j.queue, count(*) as lapsed, string_agg(distinct j.claimed_by, ', ') as holders
  from jobs.jobs as j
  where j.state = 'running' and j.lease_scan_at is not null and j.lease_expires_at <= jobs.clock()
  group by j.queue order by j.queue) as x";

pub async fn workers(client: &Client, json: bool) -> Result<()> {
    let rows = output::rows(client, WORKERS, &[]).await?;
    if json {
        println!("{}", output::json_rows(rows));
    } else if rows.is_empty() {
        println!("no worker holds a job or finished one in the last hour");
    } else {
        println!("{}", output::table(&rows, 40));
    }
    Ok(())
}
