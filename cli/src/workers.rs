//! `pgjobs workers` and the dashboard's Workers page: the claimers the database has seen, read
//! from the jobs they hold and the ones they finished in the last hour (a claim writes its
//! worker id into `claimed_by`; a heartbeat moves `lease_expires_at`), the workers' connections,
//! and the running jobs whose holder's lease lapsed.

use crate::{finished, output};
use anyhow::Result;
use std::sync::LazyLock;
use tokio_postgres::Client;

/// Each worker: the jobs it holds (and of those, the ones fetched ahead that it has not started:
/// a prefetching worker's local queue), the queues it works, its last claim, how long its leases
/// run (a heartbeat moves them), how many of its jobs lapsed, the jobs it finished in the last
/// hour, its connections now (the libraries name each `pg-jobs ROLE WORKER_ID`, cut to 63
/// bytes) and their backends, and its status: `working` (a lease not lapsed), `gone` (every
/// lease it holds lapsed: it stopped heartbeating), `idle` (holds nothing: finished jobs in the
/// last hour, or only connected). Finished jobs are read as finished::recent reads them;
/// running ones through jobs_lease_idx.
pub static WORKERS: LazyLock<String> = LazyLock::new(|| {
    format!(
        "select row_to_json(x) from (
  select w.*, c.connections, c.backends
  from (
    select s.worker,
           case when not bool_or(s.kind = 'held') then 'idle'
                when max(s.lease_expires_at) filter (where s.kind = 'held') <= jobs.clock() then 'gone'
                else 'working' end as status,
           count(*) filter (where s.kind = 'held') as held,
           count(*) filter (where s.kind = 'held' and s.ahead) as ahead,
           count(*) filter (where s.kind = 'held' and s.lease_expires_at <= jobs.clock()) as lapsed,
           string_agg(distinct s.queue, ', ') as queues,
           date_trunc('second', max(s.claimed_at)) as last_claim,
           date_trunc('second', max(s.lease_expires_at) filter (where s.kind = 'held')) as lease_until,
           count(*) filter (where s.kind = 'finished') as finished_last_hour
    from (
      select j.claimed_by as worker, j.queue, 'held' as kind, j.claimed_at, j.lease_expires_at,
             j.started_at is null as ahead
      from jobs.jobs as j where j.state = 'running' and j.lease_scan_at is not null
      union all
      {}
      union all
      select substr(a.application_name, 19), null, 'connected', null, null, false
      from pg_catalog.pg_stat_activity as a
      where a.datname = current_database() and a.application_name like 'pg-jobs heartbeat %'
    ) as s
    where s.worker is not null
    group by s.worker) as w
  left join lateral (
    select count(*) as connections, string_agg(a.pid::text, ', ' order by a.pid) as backends
    from pg_catalog.pg_stat_activity as a
    where a.datname = current_database()
      and a.application_name in (left('pg-jobs worker ' || w.worker, 63),
                                 left('pg-jobs heartbeat ' || w.worker, 63),
                                 left('pg-jobs listener ' || w.worker, 63))) as c on true) as x
order by x.status = 'gone' desc, x.status = 'idle', x.worker",
        finished::recent(
            "j.claimed_by, j.queue, 'finished', j.claimed_at, null::timestamptz, false",
            "'completed', 'failed', 'dead'",
            "1 hour",
            "",
            ""
        )
    )
});

/// The connections of pg_jobs's workers to this database, by what they say they are
/// (`application_name`: the libraries' `pg-jobs worker ID`, `pg-jobs heartbeat ID` and
/// `pg-jobs listener ID`, or a name starting `pg_jobs`) and where from: how many, their
/// backends, how many run a statement now, the oldest one's start. A role without
/// pg_read_all_stats sees no address for other roles' connections.
pub const CONNECTIONS: &str = "select row_to_json(x) from (
  select a.application_name, host(a.client_addr) as client, count(*) as connections,
         string_agg(a.pid::text, ', ' order by a.pid) as backends,
         count(*) filter (where a.state = 'active') as active,
         date_trunc('second', min(a.backend_start)) as oldest
  from pg_catalog.pg_stat_activity as a
  where a.datname = current_database() and a.pid <> pg_catalog.pg_backend_pid()
    and (a.application_name like 'pg-jobs %' or a.application_name like 'pg\\_jobs%')
  group by a.application_name, a.client_addr
  order by a.application_name, host(a.client_addr)) as x";

/// Per queue, the running jobs whose lease lapsed and who held them: a claim on the queue, or
/// the sweep, takes them back (as a new attempt, or buried on the final one).
pub const LAPSED: &str = "select row_to_json(x) from (
  select j.queue, count(*) as lapsed, string_agg(distinct j.claimed_by, ', ') as holders
  from jobs.jobs as j
  where j.state = 'running' and j.lease_scan_at is not null and j.lease_expires_at <= jobs.clock()
  group by j.queue order by j.queue) as x";

pub async fn workers(client: &Client, json: bool, wide: bool) -> Result<()> {
    use output::Column::{Text, Time};
    let rows = output::rows(client, &WORKERS, &[]).await?;
    let connections = output::rows(client, CONNECTIONS, &[]).await?;
    if json {
        let doc = serde_json::json!({ "workers": rows, "connections": connections });
        println!("{}", output::json(&doc));
        return Ok(());
    }
    if rows.is_empty() {
        println!("no worker holds a job or finished one in the last hour");
    } else {
        let columns = [
            Text("worker", "worker"),
            Text("status", "status"),
            Text("held", "held"),
            Text("ahead", "ahead"),
            Text("lapsed", "lapsed"),
            Text("queues", "queues"),
            Time(&["last_claim"], "claimed"),
            Time(&["lease_until"], "until"),
            Text("finished_last_hour", "done 1h"),
            Text("connections", "conns"),
        ];
        println!("{}", output::listing(&rows, wide, &columns, 24));
    }
    if connections.is_empty() {
        println!("no worker is connected (application_name pg-jobs ... or pg_jobs...)");
    } else {
        let columns = [
            Text("application_name", "application_name"),
            Text("client", "from"),
            Text("connections", "conns"),
            Text("active", "active"),
            Text("backends", "backends"),
            Time(&["oldest"], "since"),
        ];
        println!(
            "connected:\n{}",
            output::listing(&connections, wide, &columns, 40)
        );
    }
    Ok(())
}
