//! The workers: each claimer the database has seen, what it holds and whether it is gone.

use super::*;

pub async fn workers(State(app): State<Arc<App>>) -> Page {
    let (rows, connections) = match async {
        anyhow::Ok((
            read(&app, &crate::workers::WORKERS).await?,
            read(&app, crate::workers::CONNECTIONS).await?,
        ))
    }
    .await
    {
        Ok(r) => r,
        Err(e) => return failed(&app, "Workers", e),
    };
    let body = html! {
        p.note { "Read from the jobs and the connections: a claim names its worker, a heartbeat moves its lease, \
                  and the libraries name each connection after its worker. Gone: every lease it holds lapsed (it \
                  stopped heartbeating); a claim on the queue, or the sweep, takes its jobs back. Of the jobs it holds, \
                  those fetched ahead (a worker's prefetch) have not started: their attempts are not spent." }
        @if rows.is_empty() { p.none { "No worker holds a job, finished one in the last hour, or is connected." } }
        @else {
            div.scroll { table #workers {
                thead { tr { th { "worker" } th { "status" } th { "holds" } th { "fetched ahead" } th { "lapsed" } th { "queues" }
                    th { "last claim" } th { "leases until" } th { "finished, last hour" } th { "connections" } } }
                tbody {
                    @for w in &rows {
                        @let status = render::text(w, "status");
                        @let worker = render::text(w, "worker");
                        tr data-worker=(worker) {
                            td { code { (worker) } }
                            td { span class={ "state " (if status == "gone" { "dead" } else if status == "working" { "running" } else { "" }) } { (status) } }
                            td.num { (render::text(w, "held")) }
                            td.num { (render::text(w, "ahead")) }
                            td.num { (render::text(w, "lapsed")) }
                            td { (render::text(w, "queues")) }
                            td { (render::time(w, "last_claim")) }
                            td { (render::time(w, "lease_until")) }
                            td.num { (render::text(w, "finished_last_hour")) }
                            td { (render::text(w, "connections"))
                                 @if w.get("backends").is_some_and(|b| !b.is_null()) { " (backends " (render::text(w, "backends")) ")" } }
                        }
                    }
                }
            } }
        }
        h2 { "Connected" }
        p.note { "The connections to this database whose application_name says they are pg_jobs workers', \
                  by name and address (a role without pg_read_all_stats sees no address of another role's)." }
        @if connections.is_empty() { p.none { "None." } }
        @else {
            div.scroll { table #connections {
                thead { tr { th { "application_name" } th { "from" } th { "connections" } th { "active" }
                    th { "backends" } th { "oldest since" } } }
                tbody {
                    @for c in &connections {
                        tr {
                            td { code { (render::text(c, "application_name")) } }
                            td { (render::text(c, "client")) }
                            td.num { (render::text(c, "connections")) }
                            td.num { (render::text(c, "active")) }
                            td { (render::text(c, "backends")) }
                            td { (render::time(c, "oldest")) }
                        }
                    }
                }
            } }
        }
    };
    ok(&app, "Workers", body)
}

/// The overview's warning: running jobs whose holder's lease lapsed, per queue, with what to
/// do. Nothing for a role that may not read the jobs (a monitor), nor when none lapsed.
pub(super) async fn lapsed_notice(db: &tokio_postgres::Client) -> anyhow::Result<Markup> {
    let rows = match output::rows(db, crate::workers::LAPSED, &[]).await {
        Err(e) if output::sqlstate(&e) == Some(&SqlState::INSUFFICIENT_PRIVILEGE) => Vec::new(),
        other => other?,
    };
    Ok(html! {
        @for q in &rows {
            @let queue = render::text(q, "queue");
            p.failure.lapsed {
                (render::text(q, "lapsed")) " running job(s) of queue " strong { (queue) } " held by "
                a href="/workers" { (render::text(q, "holders")) } ", whose lease lapsed: that worker is gone. "
                "A worker claiming on the queue, or the sweep, takes them back (a new attempt; buried on the final one). "
                "If none works this queue, start one, or "
                a href=(render::url("/jobs", &[("queue", &queue), ("state", "running")])) { "cancel them" } "."
            }
        }
    })
}
