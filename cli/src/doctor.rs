//! `pgjobs doctor`: what users get wrong, each found from the server's own catalogs and views
//! and told with its fix. Reads only; any role may run it (a check it cannot read says so).

use crate::output::{self, Row};
use anyhow::Result;
use serde_json::{json, Value};
use tokio_postgres::Client;

pub struct Thresholds {
    /// A transaction open longer than this holds back vacuum.
    pub transaction_age: String,
    /// A ready job waiting longer than this in a queue that is not paused has no worker.
    pub ready_age: String,
}

/// One check: its name, and the problem with its fix when there is one, or why the role
/// connected cannot tell.
struct Finding {
    check: &'static str,
    problem: Option<(String, String)>,
    unknown: Option<String>,
}

impl Finding {
    fn ok(check: &'static str) -> Self {
        Finding {
            check,
            problem: None,
            unknown: None,
        }
    }
    fn problem(check: &'static str, what: String, fix: String) -> Self {
        Finding {
            check,
            problem: Some((what, fix)),
            unknown: None,
        }
    }
    fn unknown(check: &'static str, why: String) -> Self {
        Finding {
            check,
            problem: None,
            unknown: Some(why),
        }
    }
}

async fn one(
    client: &Client,
    sql: &str,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) -> Result<Option<Row>> {
    Ok(output::rows(client, sql, params).await?.into_iter().next())
}

fn text(r: &Row, k: &str) -> String {
    output::cell(r.get(k).unwrap_or(&Value::Null), 200)
}

fn int(r: &Row, k: &str) -> i64 {
    r.get(k).and_then(Value::as_i64).unwrap_or(0)
}

/// The SQL-only edition's sweep: pg_cron (or another scheduler) runs jobs.sweep(), which notes
/// when it ran (jobs._last_sweep()); ten minutes without one is a problem, as the claim's
/// warning says.
async fn sql_only_sweeper(client: &Client, db: &str, owner: &str) -> Result<Finding> {
    let last = one(
        client,
        "select row_to_json(x) from (
           select s.at::text as at, s.at > clock_timestamp() - interval '10 minutes' as recent
           from jobs._last_sweep() as s(at)) as x",
        &[],
    )
    .await;
    let Ok(last) = last else {
        return Ok(Finding::unknown(
            "sweeper",
            "this role may not call jobs._last_sweep(); an admin's may (jobs.grant_admin)".into(),
        ));
    };
    let last = last.unwrap_or_default();
    if last.get("recent").and_then(Value::as_bool) == Some(true) {
        return Ok(Finding::ok("sweeper"));
    }
    let since = match last.get("at").and_then(Value::as_str) {
        Some(at) => format!("since {at}"),
        None => "yet".into(),
    };
    Ok(Finding::problem(
        "sweeper",
        format!(
            "nothing has swept database {db} {since}: the SQL-only edition has no background worker, so \
             timeouts, schedules, expired events and retention wait for jobs.sweep()"
        ),
        format!(
            "schedule it with pg_cron, to run as the role that owns pg_jobs: in pg_cron's database, select \
             cron.schedule_in_database('pg_jobs sweep', '* * * * *', 'select jobs.sweep()', '{db}', '{owner}'); \
             (docs/EDITIONS.md)"
        ),
    ))
}

pub async fn doctor(client: &Client, t: &Thresholds, json: bool) -> Result<bool> {
    let mut found = Vec::new();
    // One row whether or not the server has pg_jobs: this database's name, and the versions.
    let ext = one(
        client,
        "select row_to_json(x) from (
           select current_database() as db, e.extversion as installed, a.default_version as available,
                  e.extname is null and to_regnamespace('jobs_config') is not null as sql_only,
                  (select n.nspowner::regrole::text from pg_namespace as n where n.nspname = 'jobs') as owner
           from (select) as one
           left join pg_available_extensions as a on a.name = 'pg_jobs'
           left join pg_extension as e on e.extname = 'pg_jobs') as x",
        &[],
    )
    .await?
    .unwrap_or_default();
    let db = text(&ext, "db");
    // The SQL-only edition (docs/EDITIONS.md): no library, so no preload, and pg_cron sweeps.
    let sql_only = ext
        .get("sql_only")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let owner = text(&ext, "owner");
    let ext = Some(ext).filter(|e| sql_only || !e.get("available").is_none_or(Value::is_null));
    match &ext {
        Some(_) if sql_only => {
            found.push(Finding::ok("extension"));
            found.push(Finding::ok("upgrade"));
        }
        Some(e) if !e.get("installed").is_some_and(Value::is_null) => {
            found.push(Finding::ok("extension"));
            if text(e, "installed") != text(e, "available") {
                found.push(Finding::problem(
                    "upgrade",
                    format!("database {db} runs pg_jobs {}, the server has {} installed: an upgrade is pending",
                            text(e, "installed"), text(e, "available")),
                    "ALTER EXTENSION pg_jobs UPDATE; (as the extension's owner or a superuser)".into(),
                ));
            } else {
                found.push(Finding::ok("upgrade"));
            }
        }
        Some(_) => found.push(Finding::problem(
            "extension",
            format!("pg_jobs is not created in database {db}"),
            "CREATE EXTENSION pg_jobs; (as a superuser)".into(),
        )),
        None => found.push(Finding::problem(
            "extension",
            "pg_jobs is not installed on this server".into(),
            "install the package for this PostgreSQL release (README: Install), then CREATE EXTENSION pg_jobs;".into(),
        )),
    }
    // The checks below read this release's functions: after the upgrade, if one is pending.
    let installed = found.iter().all(|f| f.problem.is_none());

    // The launcher's settings exist only when the library is preloaded, and any role reads them;
    // the server's processes other than its own sessions show only to pg_read_all_stats.
    let workers = one(
        client,
        "select row_to_json(x) from (
           select pg_has_role('pg_read_all_stats', 'member') as sees_all,
                  current_user as role,
                  count(*) filter (where a.backend_type = 'pg_jobs launcher') as launchers,
                  count(*) filter (where a.backend_type = 'pg_jobs sweeper'
                                   and a.datname = current_database()) as here,
                  count(*) filter (where a.backend_type = 'pg_jobs sweeper') as sweepers,
                  current_setting('pg_jobs.database_name', true) as database_name,
                  current_setting('pg_jobs.max_databases', true) as max_databases
           from pg_stat_activity as a) as x",
        &[],
    )
    .await?
    .unwrap_or_default();
    let preloaded =
        int(&workers, "launchers") > 0 || !workers.get("max_databases").is_none_or(Value::is_null);
    let sees_all = workers
        .get("sees_all")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let unseen = || {
        format!(
            "role {} does not see the server's other processes; GRANT pg_read_all_stats TO it to check",
            text(&workers, "role")
        )
    };
    if sql_only {
        found.push(sql_only_sweeper(client, &db, &owner).await?);
    } else if preloaded {
        found.push(Finding::ok("preload"));
    } else {
        found.push(Finding::problem(
            "preload",
            "pg_jobs is not preloaded: no background sweeper (expired leases, events, schedules and \
             retention wait for a claim or a jobs.sweep() call), no outcome counters (jobs.outcome_stats \
             is empty), no wakeups without LISTEN"
                .into(),
            "shared_preload_libraries = 'pg_jobs' in postgresql.conf, then restart; until then call \
             select jobs.sweep(); every few seconds (pg_cron, or a worker's loop)"
                .into(),
        ));
    }
    if preloaded && installed && !sql_only {
        if int(&workers, "here") > 0 {
            found.push(Finding::ok("sweeper"));
        } else if !sees_all {
            found.push(Finding::unknown("sweeper", unseen()));
        } else {
            let named = text(&workers, "database_name");
            let (why, fix) = if !named.is_empty() && named != db {
                (format!("pg_jobs.database_name is '{named}'"),
                 format!("pg_jobs.database_name = '' (every database) or '{db}' in postgresql.conf, then reload"))
            } else if int(&workers, "sweepers")
                >= text(&workers, "max_databases").parse().unwrap_or(i64::MAX)
            {
                (
                    format!(
                        "{} databases have one already, pg_jobs.max_databases",
                        int(&workers, "sweepers")
                    ),
                    "raise pg_jobs.max_databases in postgresql.conf, then restart".into(),
                )
            } else {
                ("it has not started yet (the launcher looks every pg_jobs.sweep_interval)".into(),
                 "wait a few seconds and run pgjobs doctor again; the server log says why a sweeper stopped".into())
            };
            found.push(Finding::problem(
                "sweeper",
                format!("no pg_jobs sweeper runs in database {db}: {why}"),
                fix,
            ));
        }
    }

    let long = output::rows(
        client,
        "select row_to_json(x) from (
           select a.pid, a.usename as role, a.datname as database, a.state,
                  date_trunc('second', now() - a.xact_start) as open_for, left(a.query, 60) as query
           from pg_stat_activity as a
           where a.xact_start < now() - $1::text::interval and a.pid <> pg_backend_pid()
             and (a.backend_xid is not null or a.backend_xmin is not null)
           order by a.xact_start) as x",
        &[&t.transaction_age],
    )
    .await?;
    if long.is_empty() && !sees_all {
        found.push(Finding::unknown("long transactions", unseen()));
    } else if long.is_empty() {
        found.push(Finding::ok("long transactions"));
    } else {
        let list: Vec<String> = long
            .iter()
            .map(|r| {
                format!(
                    "pid {} ({}, {} in {}) open for {}",
                    text(r, "pid"),
                    text(r, "role"),
                    text(r, "state"),
                    text(r, "database"),
                    text(r, "open_for")
                )
            })
            .collect();
        found.push(Finding::problem(
            "long transactions",
            format!("{} transaction(s) open longer than {} hold back vacuum, and pg_jobs's tables bloat: {}",
                    long.len(), t.transaction_age, list.join("; ")),
            "end them (select pg_terminate_backend(PID)), and set idle_in_transaction_session_timeout so an \
             idle one ends by itself"
                .into(),
        ));
    }

    if installed {
        let stuck = output::rows(
            client,
            "select row_to_json(x) from (
               select s.queue, s.paused, s.ready, date_trunc('second', s.oldest_ready_age) as oldest_ready,
                      l.lapsed
               from jobs.queue_stats as s  -- (the view computes only the columns read)
               cross join lateral (
                 -- jobs_lease_idx: a running job's lease_scan_at is at most its lease's end
                 select count(*) as lapsed from jobs.jobs as j
                 where j.queue = s.queue and j.state = 'running'
                   and j.lease_scan_at < jobs.clock() - interval '1 minute'
                   and j.lease_expires_at < jobs.clock() - interval '1 minute') as l
               where s.ready > 0 and s.paused or s.oldest_ready_age > $1::text::interval
                  or l.lapsed > 0) as x",
            &[&t.ready_age],
        )
        .await;
        match stuck {
            // A monitor reads the counts but not the jobs: it cannot tell.
            Err(e) => found.push(Finding::unknown("queues", e.to_string().replace('\n', " "))),
            Ok(rows) if rows.is_empty() => found.push(Finding::ok("queues")),
            Ok(rows) => {
                for r in rows {
                    let q = text(&r, "queue");
                    if r.get("paused").and_then(Value::as_bool) == Some(true) {
                        found.push(Finding::problem(
                            "queues",
                            format!("queue {q} is paused with {} ready job(s)", int(&r, "ready")),
                            format!("pgjobs resume {q} (select jobs.resume_queue('{q}');) when it should run"),
                        ));
                    } else if int(&r, "lapsed") > 0 {
                        found.push(Finding::problem(
                            "queues",
                            format!("queue {q}: {} running job(s) whose lease ended over a minute ago are not yet taken back",
                                    int(&r, "lapsed")),
                            "start a worker for the queue (a claim takes them back) or the sweeper (see preload and sweeper)".into(),
                        ));
                    } else {
                        found.push(Finding::problem(
                            "queues",
                            format!("queue {q}: its oldest ready job has waited {}: no worker takes it", text(&r, "oldest_ready")),
                            format!("start workers that claim from '{q}', or check the queue names they claim"),
                        ));
                    }
                }
            }
        }
        let bloat = one(
            client,
            "select row_to_json(x) from (
               select s.n_live_tup as live, s.n_dead_tup as dead,
                      date_trunc('second', greatest(s.last_vacuum, s.last_autovacuum)) as vacuumed
               from pg_stat_all_tables as s
               where s.schemaname = 'jobs_data' and s.relname = 'jobs') as x",
            &[],
        )
        .await?;
        match bloat {
            Some(b) if int(&b, "dead") > 10_000 && int(&b, "dead") > int(&b, "live") => found.push(Finding::problem(
                "bloat",
                format!("jobs_data.jobs holds {} dead row versions beside {} live ones (last vacuumed {})",
                        int(&b, "dead"), int(&b, "live"), text(&b, "vacuumed")),
                "a long transaction holds vacuum back (see above); else VACUUM jobs_data.jobs; and check autovacuum is on".into(),
            )),
            _ => found.push(Finding::ok("bloat")),
        }
        let rights = one(
            client,
            "select row_to_json(x) from (
               select current_user as role,
                      has_function_privilege('jobs.queue_stats()', 'execute') as read,
                      has_function_privilege('jobs.requeue(uuid, text)', 'execute') as act) as x",
            &[],
        )
        .await?
        .unwrap_or_default();
        let role = text(&rights, "role");
        let can = |k: &str| rights.get(k).and_then(Value::as_bool).unwrap_or(false);
        if can("read") && can("act") {
            found.push(Finding::ok("grants"));
        } else {
            found.push(Finding::problem(
                "grants",
                format!("role {role} may {}", if can("read") { "read the queues but not act on jobs" } else { "not read the queues" }),
                format!("a superuser runs select jobs.grant_admin('{role}'); for actions, or jobs.grant_monitor('{role}') to read"),
            ));
        }
        // Other roles: one that may call a producer's or a worker's first function but not
        // every function of that grant (a hand-made grant, or one older than a function) fails
        // where it calls the rest.
        let partial = output::rows(
            client,
            "with tiers (tier, marker, fns) as (values
               ('producer', 'enqueue', array['enqueue', 'enqueue_batch', 'publish', 'error_codes', 'get_job', 'get_jobs',
                  'wait_for_job']),
               ('worker', 'claim', array['enqueue', 'enqueue_batch', 'publish', 'error_codes', 'get_job', 'get_jobs',
                  'wait_for_job', 'claim', 'heartbeat', 'complete', 'complete_many', 'complete_and_claim', 'fail',
                  'snooze', 'assert_claim', 'save_step', 'get_step', 'await_event', 'spawn', 'await_children',
                  'sleep', 'start_step', 'fail_step', 'get_steps']))
             select row_to_json(x) from (
               select r.rolname as role, t.tier,
                      string_agg(distinct p.proname::text, ', ' order by p.proname::text) as missing
               from pg_roles as r
               cross join tiers as t
               join pg_proc as p on p.pronamespace = 'jobs'::regnamespace and p.proname = any(t.fns)
               where not r.rolsuper and r.rolcanlogin
                 and exists (select from pg_proc as m where m.pronamespace = 'jobs'::regnamespace
                             and m.proname = t.marker and has_function_privilege(r.oid, m.oid, 'execute'))
                 and not has_function_privilege(r.oid, p.oid, 'execute')
               group by r.rolname, t.tier order by r.rolname, t.tier) as x",
            &[],
        )
        .await?;
        if partial.is_empty() {
            found.push(Finding::ok("other roles' grants"));
        }
        for r in &partial {
            let role = text(r, "role");
            let tier = text(r, "tier");
            found.push(Finding::problem(
                "other roles' grants",
                format!("role {role} may call some of a {tier}'s functions but not {}", text(r, "missing")),
                format!("a superuser runs select jobs.grant_{tier}('{role}'); (it grants the whole set)"),
            ));
        }
    }

    let problems = found.iter().filter(|f| f.problem.is_some()).count();
    if json {
        let doc: Vec<Value> = found
            .iter()
            .map(|f| match (&f.problem, &f.unknown) {
                (Some((what, fix)), _) => {
                    json!({"check": f.check, "ok": false, "problem": what, "fix": fix})
                }
                (None, Some(why)) => json!({"check": f.check, "ok": null, "unknown": why}),
                (None, None) => json!({"check": f.check, "ok": true}),
            })
            .collect();
        println!("{}", output::json(&Value::Array(doc)));
    } else {
        for f in &found {
            match (&f.problem, &f.unknown) {
                (Some((what, fix)), _) => {
                    println!("PROBLEM  {}: {what}\n         fix: {fix}", f.check)
                }
                (None, Some(why)) => println!("?        {}: cannot tell: {why}", f.check),
                (None, None) => println!("ok       {}", f.check),
            }
        }
        println!(
            "{}",
            if problems == 0 {
                "no problems found".to_string()
            } else {
                format!("{problems} problem(s) found")
            }
        );
    }
    Ok(problems == 0)
}
