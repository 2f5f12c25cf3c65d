//! The dashboard's pages and actions.

use super::{history::History, render, same, App};
use crate::filter::{Filters, STATES};
use crate::jobs::{self, Action, Selection};
use crate::output::{self, Row};
use axum::extract::{Path, RawForm, RawQuery, State};
use axum::http::StatusCode;
use maud::{html, Markup};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;
use tokio_postgres::error::SqlState;

pub type Page = (StatusCode, Markup);

const PAGE_SIZE: i64 = 50;

fn pairs(raw: Option<&str>) -> Vec<(String, String)> {
    raw.map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
        .unwrap_or_default()
}

fn get<'a>(pairs: &'a [(String, String)], key: &str) -> &'a str {
    pairs
        .iter()
        .find(|(k, v)| k == key && !v.is_empty())
        .map(|(_, v)| v.as_str())
        .unwrap_or("")
}

fn opt(pairs: &[(String, String)], key: &str) -> Option<String> {
    Some(get(pairs, key).to_string()).filter(|v| !v.is_empty())
}

/// The filters of a page's query or a form: queue, state (comma-separated or repeated),
/// name, tenant, since, error (exact), error_like, q (payload or error contains), tag (repeated:
/// all of them).
fn filters(pairs: &[(String, String)]) -> Result<Filters, String> {
    let mut state = Vec::new();
    for (_, v) in pairs.iter().filter(|(k, _)| k == "state") {
        for s in v.split(',').filter(|s| !s.is_empty()) {
            if !STATES.contains(&s) {
                return Err(format!("unknown state {s:?}: one of {}", STATES.join(", ")));
            }
            state.push(s.to_string());
        }
    }
    Ok(Filters {
        queue: opt(pairs, "queue"),
        state,
        name: opt(pairs, "name"),
        tenant: opt(pairs, "tenant"),
        since: opt(pairs, "since"),
        error_like: opt(pairs, "error_like"),
        text: opt(pairs, "q"),
        error: opt(pairs, "error"),
        tags: pairs
            .iter()
            .filter(|(k, v)| k == "tag" && !v.is_empty())
            .map(|(_, v)| v.clone())
            .collect(),
    })
}

/// The filters as query parameters (for links and hidden fields).
fn filter_params(f: &Filters) -> Vec<(&'static str, String)> {
    let mut p = vec![("state", f.state.join(","))];
    for (k, v) in [
        ("queue", &f.queue),
        ("name", &f.name),
        ("tenant", &f.tenant),
        ("since", &f.since),
        ("error", &f.error),
        ("error_like", &f.error_like),
        ("q", &f.text),
    ] {
        p.push((k, v.clone().unwrap_or_default()));
    }
    p.extend(f.tags.iter().map(|t| ("tag", t.clone())));
    p
}

fn link(path: &str, params: &[(&'static str, String)]) -> String {
    let refs: Vec<(&str, &str)> = params.iter().map(|(k, v)| (*k, v.as_str())).collect();
    render::url(path, &refs)
}

fn hidden(params: &[(&'static str, String)]) -> Markup {
    html! { @for (k, v) in params { @if !v.is_empty() { input type="hidden" name=(k) value=(v); } } }
}

/// A failure as a page: a missing grant is 403, a bad value 400, the rest 500.
fn failed(app: &App, title: &str, e: anyhow::Error) -> Page {
    let status = match output::sqlstate(&e).map(|c| c.code()) {
        Some("42501") => StatusCode::FORBIDDEN,
        // A bad value (class 22), a constraint (23), a refusal of pg_jobs (PJ).
        Some(c) if c.starts_with("22") || c.starts_with("23") || c.starts_with("PJ") => {
            StatusCode::BAD_REQUEST
        }
        Some(_) => StatusCode::INTERNAL_SERVER_ERROR,
        // Not the database's: the dashboard refused what it was sent.
        None => StatusCode::BAD_REQUEST,
    };
    (
        status,
        render::page(title, app.read_only, render::error(&e)),
    )
}

/// The rows of a query without parameters, on the shared connection.
async fn read(app: &App, sql: &str) -> anyhow::Result<Vec<Row>> {
    output::rows(&*app.db().await?, sql, &[]).await
}

fn ok(app: &App, title: &str, body: Markup) -> Page {
    (StatusCode::OK, render::page(title, app.read_only, body))
}

/// The live counts, read at every refresh: the view computes only the columns selected, each
/// from the partial index of its state.
const LIVE: &str = "select row_to_json(x) from (
  select s.queue, s.paused, s.ready, s.delayed, s.running, s.suspended,
         date_trunc('second', s.oldest_ready_age) as oldest_ready
  from jobs.queue_stats as s order by s.queue) as x";

/// The finished counts read the index of finished rows, whose cost grows with the history
/// kept: read at most every FINISHED_EVERY, for every open page at once, in one pass over the
/// index (jobs_finished_idx holds the queue) rather than one per queue and state.
const FINISHED: &str = "select row_to_json(x) from (
  select j.queue, count(*) filter (where j.state = 'completed') as completed,
         count(*) filter (where j.state = 'failed') as failed,
         count(*) filter (where j.state = 'dead') as dead,
         count(*) filter (where j.state = 'cancelled') as cancelled
  from jobs.jobs as j where j.state in ('completed', 'failed', 'dead', 'cancelled')
  group by j.queue) as x";
/// The same for a role that may not read jobs.jobs (a monitor): one pass per queue and state.
const FINISHED_MONITOR: &str = "select row_to_json(x) from (
  select s.queue, s.completed, s.failed, s.dead, s.cancelled from jobs.queue_stats() as s) as x";
const FINISHED_EVERY: std::time::Duration = std::time::Duration::from_secs(30);

fn finished_age(app: &App) -> Option<u64> {
    app.finished
        .lock()
        .expect("finished")
        .as_ref()
        .map(|(at, _)| at.elapsed().as_secs())
}

/// After an action the finished counts are read again at the next look.
fn forget_finished(app: &App) {
    *app.finished.lock().expect("finished") = None;
    if let Ok(mut live) = app.live.try_lock() {
        *live = None;
    }
}

async fn finished_counts(
    app: &App,
    db: &tokio_postgres::Client,
) -> anyhow::Result<HashMap<String, Row>> {
    if let Some((at, counts)) = app.finished.lock().expect("finished").as_ref() {
        if at.elapsed() < FINISHED_EVERY {
            return Ok(counts.clone());
        }
    }
    let rows = match output::rows(db, FINISHED, &[]).await {
        Err(e) if output::sqlstate(&e) == Some(&SqlState::INSUFFICIENT_PRIVILEGE) => {
            output::rows(db, FINISHED_MONITOR, &[]).await?
        }
        other => other?,
    };
    let counts: HashMap<String, Row> = rows
        .into_iter()
        .map(|r| (render::text(&r, "queue"), r))
        .collect();
    *app.finished.lock().expect("finished") = Some((std::time::Instant::now(), counts.clone()));
    Ok(counts)
}

pub async fn overview(State(app): State<Arc<App>>) -> Page {
    let body = html! {
        div #notices aria-live="polite" {}
        section #live { (live_part(&app).await) }
    };
    ok(&app, "Overview", body)
}

/// The queues and the chart: the overview's part that live events replace.
pub async fn live_part(app: &App) -> Markup {
    // Every open page's events share one look per LIVE_EVERY: a thousand open connections
    // cost the database what one does.
    let mut cached = app.live.lock().await;
    if let Some((at, html)) = cached.as_ref() {
        if at.elapsed() < LIVE_EVERY {
            return maud::PreEscaped(html.clone());
        }
    }
    let fresh = look(app).await;
    *cached = Some((std::time::Instant::now(), fresh.0.clone()));
    fresh
}

const LIVE_EVERY: std::time::Duration = std::time::Duration::from_millis(1500);

async fn look(app: &App) -> Markup {
    let counts = async {
        let db = app.db().await?;
        let mut queues = output::rows(&db, LIVE, &[]).await?;
        let finished = finished_counts(app, &db).await?;
        for q in &mut queues {
            let f = finished.get(&render::text(q, "queue"));
            for state in ["completed", "failed", "dead", "cancelled"] {
                let count = f
                    .and_then(|f| f.get(state))
                    .cloned()
                    .unwrap_or(Value::from(0));
                q.insert(state.into(), count);
            }
        }
        anyhow::Ok(queues)
    };
    let queues = match counts.await {
        Ok(q) => q,
        Err(e) => return render::error(&e),
    };
    let chart = chart(&app.history.lock().expect("history"));
    html! {
        div.scroll {
            table #queues {
                thead { tr {
                    th { "queue" } th { "ready" } th { "delayed" } th { "running" } th { "suspended" }
                    th { "completed" } th { "failed" } th { "dead" } th { "cancelled" } th { "oldest ready" }
                    th { "paused" } @if !app.read_only { th {} }
                } }
                tbody {
                    @for q in &queues {
                        @let name = render::text(q, "queue");
                        @let paused = q.get("paused").and_then(Value::as_bool) == Some(true);
                        tr data-queue=(name) {
                            td { a href=(render::url("/jobs", &[("queue", &name)])) { (name) } }
                            @for state in ["ready", "delayed", "running", "suspended", "completed", "failed", "dead", "cancelled"] {
                                td.num { a href=(render::url("/jobs", &[("queue", &name), ("state", state)])) { (render::text(q, state)) } }
                            }
                            td { (render::text(q, "oldest_ready")) }
                            td { @if paused { strong { "paused" } } @else { "no" } }
                            @if !app.read_only {
                                td {
                                    form method="post" action={ "/queues/" (render::segment(&name)) "/" (if paused { "resume" } else { "pause" }) } {
                                        (render::csrf(&app.csrf))
                                        button type="submit" { (if paused { "Resume" } else { "Pause" }) }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        @if let Some(age) = finished_age(app) {
            p.note { "Completed, failed, dead and cancelled as counted " (age) " s ago (every 30 s, and after each action here)." }
        }
        h2 { "The last hour" }
        (chart)
    }
}

/// Completed, retried and dead jobs per minute as stacked bars (an SVG drawn here).
fn chart(h: &History) -> Markup {
    if h.minutes.is_empty() {
        return html! { p.none { "No outcomes counted yet (they need shared_preload_libraries = 'pg_jobs'; the chart fills as jobs end)." } };
    }
    let last = h.minutes.back().map(|m| m.0).unwrap_or(0);
    let max = h
        .minutes
        .iter()
        .map(|(_, c)| c.iter().sum::<i64>())
        .max()
        .unwrap_or(0)
        .max(1) as f64;
    let (width, height, bar) = (600.0, 120.0, 10.0);
    let totals: [i64; 3] = h
        .minutes
        .iter()
        .fold([0; 3], |t, (_, c)| [t[0] + c[0], t[1] + c[1], t[2] + c[2]]);
    let mut bars = Vec::new(); // (class, x, y, height), stacked from the bottom
    for (minute, counts) in &h.minutes {
        let x = width - (last - minute + 1) as f64 * bar;
        let mut y = height;
        for (i, class) in ["completed", "retried", "dead"].into_iter().enumerate() {
            let hgt = counts[i] as f64 / max * height;
            if hgt > 0.0 {
                bars.push((class, x, y - hgt, hgt));
                y -= hgt;
            }
        }
    }
    html! {
        svg.chart viewBox={ "0 0 " (width) " " (height + 14.0) } role="img"
            aria-label={ "jobs per minute, the last hour: " (totals[0]) " completed, " (totals[1]) " retried, " (totals[2]) " dead" } {
            @for (class, x, y, hgt) in &bars {
                rect class=(class) x=(x) y=(y) width=(bar - 1.0) height=(hgt) {}
            }
            text x="0" y=(height + 12.0) { "60 min ago" }
            text x=(width) y=(height + 12.0) text-anchor="end" { "now" }
        }
        p.legend {
            span.completed { "completed " (totals[0]) } " · "
            span.retried { "retried " (totals[1]) } " · "
            span.dead { "dead " (totals[2]) }
            " (per minute, all queues; the peak minute is the full height: " (max as i64) ")"
        }
    }
}

pub async fn jobs(State(app): State<Arc<App>>, RawQuery(raw): RawQuery) -> Page {
    let p = pairs(raw.as_deref());
    let f = match filters(&p) {
        Ok(f) => f,
        Err(e) => return failed(&app, "Jobs", anyhow::anyhow!(e)),
    };
    let before = opt(&p, "before");
    let rows = match app.db().await {
        Ok(db) => jobs::page(&db, &f, PAGE_SIZE, before.as_deref()).await,
        Err(e) => Err(e),
    };
    let rows = match rows {
        Ok(r) => r,
        Err(e) => return failed(&app, "Jobs", e),
    };
    let params = filter_params(&f);
    let older = rows
        .last()
        .filter(|_| rows.len() as i64 == PAGE_SIZE)
        .map(|r| {
            let mut p = params.clone();
            p.push(("before", render::text(r, "id")));
            link("/jobs", &p)
        });
    let body = html! {
        form.filters method="get" action="/jobs" {
            label { "queue " input name="queue" value=(f.queue.clone().unwrap_or_default()); }
            label { "state " select name="state" {
                option value="" { "any" }
                @for s in STATES { option value=(s) selected[f.state.len() == 1 && f.state[0] == s] { (s) } }
            } }
            label { "name " input name="name" value=(f.name.clone().unwrap_or_default()); }
            label { "tenant " input name="tenant" value=(f.tenant.clone().unwrap_or_default()); }
            label { "within " input name="since" placeholder="1 hour" value=(f.since.clone().unwrap_or_default()); }
            label { "text " input name="q" placeholder="in payload or error" value=(f.text.clone().unwrap_or_default()); }
            label { "tag " input name="tag" value=(f.tags.first().cloned().unwrap_or_default()); }
            @for t in f.tags.iter().skip(1) { input type="hidden" name="tag" value=(t); }
            @if let Some(e) = &f.error { input type="hidden" name="error" value=(e); }
            button type="submit" { "Filter" }
        }
        @if app.read_only {
            (job_table(&rows, None))
        } @else {
            form #selected method="post" action="/act" {
                (render::csrf(&app.csrf))
                (job_table(&rows, Some(())))
                @if !rows.is_empty() {
                    div.actions {
                        "Selected: "
                        button name="action" value="requeue" { "Requeue" }
                        button name="action" value="cancel" { "Cancel" }
                        button name="action" value="promote" { "Promote" }
                    }
                }
            }
            @if !f.is_empty() {
                form.actions method="post" action="/act" {
                    (render::csrf(&app.csrf))
                    input type="hidden" name="scope" value="filter";
                    (hidden(&params))
                    "Every job of this filter: "
                    button name="action" value="requeue" { "Requeue…" }
                    button name="action" value="cancel" { "Cancel…" }
                    button name="action" value="promote" { "Promote…" }
                }
            }
        }
        nav.pages {
            @if before.is_some() { a href=(link("/jobs", &params)) { "← newest" } }
            @if let Some(o) = older { a #older href=(o) { "older →" } }
        }
    };
    ok(&app, "Jobs", body)
}

fn job_table(rows: &[Row], selectable: Option<()>) -> Markup {
    if rows.is_empty() {
        return html! { p.none { "No job matches." } };
    }
    html! {
        div.scroll { table.jobs {
            thead { tr {
                @if selectable.is_some() { th {} }
                th { "id" } th { "name" } th { "queue" } th { "state" } th { "attempts" }
                th { "run at" } th { "finished" } th { "tenant" } th { "last error" }
            } }
            tbody {
                @for r in rows {
                    @let id = render::text(r, "id");
                    tr {
                        @if selectable.is_some() { td { input type="checkbox" name="ids" value=(id) aria-label="select"; } }
                        td.id { a href={ "/jobs/" (id) } { (id) } }
                        td { (render::text(r, "name")) }
                        td { (render::text(r, "queue")) }
                        td { span class={ "state " (render::text(r, "state")) } { (render::text(r, "state")) } }
                        td.num { (render::text(r, "attempts")) }
                        td { (render::text(r, "run_at")) }
                        td { (render::text(r, "finished_at")) }
                        td { (render::text(r, "tenant")) }
                        td.error { (output::cell(r.get("last_error").unwrap_or(&Value::Null), 120)) }
                    }
                }
            }
        } }
    }
}

/// The most of a payload or result a job's page shows, and of each step's output in its list
/// of 50; the rest is a download (`/jobs/ID/payload`, `/jobs/ID/steps/STEP`, ...).
const VALUE_BYTES: i32 = 64 * 1024;
const STEP_BYTES: i32 = 4 * 1024;

/// A job's page: its fields, payload and result, then its attempts, steps and children a page
/// of each at a time (`?attempts_after=SEQ`, `?steps_after=SEQ`, `?children_after=ID`), so
/// that whatever the job holds, the page and the dashboard's memory stay bounded.
pub async fn job(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    RawQuery(raw): RawQuery,
) -> Page {
    let q = pairs(raw.as_deref());
    let after = |key: &str| get(&q, key).parse::<i64>().unwrap_or(0);
    let bounds = jobs::Bounds {
        value_bytes: VALUE_BYTES,
        step_bytes: STEP_BYTES,
        page: PAGE_SIZE,
        attempts_after: after("attempts_after"),
        steps_after: after("steps_after"),
        children_after: opt(&q, "children_after").filter(|v| uuid_like(v)),
    };
    let detail = match app.db().await {
        Ok(db) => jobs::detail(&db, &id, 5, &bounds).await,
        Err(e) => Err(e),
    };
    let d = match detail {
        Ok(Some(d)) => d,
        Ok(None) => {
            let e = anyhow::anyhow!(
                "no job has id {id}\nfinished jobs are deleted after their retention period"
            );
            return (
                StatusCode::NOT_FOUND,
                render::page("Job", app.read_only, render::error(&e)),
            );
        }
        Err(e) => return failed(&app, "Job", e),
    };
    let state = render::text(&d.job, "state");
    let finished = ["completed", "failed", "dead", "cancelled"].contains(&state.as_str());
    let promotable = state == "delayed"
        || (state == "suspended" && d.job.get("wait_event").is_none_or(Value::is_null));
    let mut fields = d.job.clone();
    for key in ["payload_cut", "payload_bytes", "result_cut", "result_bytes"] {
        fields.shift_remove(key);
    }
    let payload = value(&d.job, "payload", &format!("/jobs/{id}/payload"));
    let result = value(&d.job, "result", &format!("/jobs/{id}/result"));
    let (attempts, more_attempts) = page_of(&d.attempts);
    let (steps, more_steps) = page_of(&d.steps);
    let first_level = d
        .children
        .iter()
        .filter(|c| c.get("depth").and_then(Value::as_i64) == Some(1))
        .count();
    let more_children = first_level as i64 > PAGE_SIZE;
    let last_child = d
        .children
        .iter()
        .filter(|c| c.get("depth").and_then(Value::as_i64) == Some(1))
        .take(PAGE_SIZE as usize)
        .last()
        .map(|c| render::text(c, "id"));
    let children: Vec<Row> = d
        .children
        .iter()
        .filter(|c| {
            c.get("depth").and_then(Value::as_i64) != Some(1)
                || last_child
                    .as_ref()
                    .is_none_or(|l| render::text(c, "id") <= *l)
        })
        .cloned()
        .collect();
    let body = html! {
        @if !app.read_only {
            div.actions {
                @if finished {
                    form method="post" action="/act" {
                        (render::csrf(&app.csrf))
                        input type="hidden" name="ids" value=(id);
                        button name="action" value="requeue" { "Requeue" }
                        @if !d.steps.is_empty() {
                            " from step "
                            select name="from_step" {
                                option value="" { "(keep every step)" }
                                @for s in &d.steps { @let step = render::text(s, "step"); option value=(step) { (step) } }
                            }
                        }
                    }
                } @else {
                    form method="post" action="/act" {
                        (render::csrf(&app.csrf))
                        input type="hidden" name="ids" value=(id);
                        button name="action" value="cancel" { "Cancel" }
                        @if promotable { button name="action" value="promote" { "Promote" } }
                    }
                }
            }
        }
        div.scroll { table.fields {
            @for (k, v) in fields.iter().filter(|(_, v)| !v.is_null()) {
                tr { th { (k) } td {
                    @if k == "parent_id" && !v.is_null() {
                        a href={ "/jobs/" (output::cell(v, 100)) } { (output::cell(v, 100)) }
                    } @else { (output::cell(v, 100_000)) }
                } }
            }
        } }
        h2 { "Payload" } (payload)
        h2 { "Result" } (result)
        h2 { "Attempts that did not complete" }
        @if attempts.is_empty() { p.none { "None." } }
        ol.timeline {
            @for a in attempts {
                li {
                    strong { "attempt " (render::text(a, "attempt")) ": " (render::text(a, "outcome")) }
                    " · " (render::text(a, "worker")) " · " (render::text(a, "claimed_at")) " → " (render::text(a, "finished_at"))
                    pre { (render::text(a, "error")) }
                }
            }
        }
        @if let Some(last) = more_attempts { p { a href={ "/jobs/" (id) "?attempts_after=" (last) } { "later attempts →" } } }
        h2 { "Steps" }
        @if steps.is_empty() { p.none { "None." } }
        ol.steps {
            @for s in steps {
                @let step = render::text(s, "step");
                @let state = render::text(s, "state");
                li { strong { (step) } " · " span class={ "state " (state) } { (state) }
                     " · attempt " (render::text(s, "attempt")) " · " (render::text(s, "saved_at"))
                     @if state == "failed" { pre { (render::text(s, "error")) } }
                     @else if state == "completed" { (value(s, "output", &format!("/jobs/{id}/steps/{}", urlencoding(&step)))) } }
            }
        }
        @if let Some(last) = more_steps { p { a href={ "/jobs/" (id) "?steps_after=" (last) } { "later steps →" } } }
        h2 { "Children" }
        (tree(&children, &id))
        @if more_children {
            @if let Some(last) = &last_child { p { a href={ "/jobs/" (id) "?children_after=" (last) } { "more children →" } } }
        }
    };
    ok(&app, &format!("Job {id}"), body)
}

/// A page of rows (the query read one more when there are more): the page, and the `seq` of
/// its last row when there are more.
fn page_of(rows: &[Row]) -> (&[Row], Option<i64>) {
    let n = rows.len().min(PAGE_SIZE as usize);
    let more = (rows.len() > n)
        .then(|| rows[n - 1].get("seq").and_then(Value::as_i64))
        .flatten();
    (&rows[..n], more)
}

fn uuid_like(v: &str) -> bool {
    v.len() == 36 && v.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-')
}

/// A path segment: every byte but a letter, a digit, `-`, `_`, `.` and `~` as %XX.
fn urlencoding(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A JSON value of a row (`name`), or its first bytes when it was cut (`name_cut`), with its
/// size and a link that downloads it whole.
fn value(row: &Row, name: &str, download: &str) -> Markup {
    match row.get(&format!("{name}_cut")).and_then(Value::as_str) {
        Some(head) => {
            let bytes = row
                .get(&format!("{name}_bytes"))
                .and_then(Value::as_i64)
                .unwrap_or(0);
            html! {
                pre.cut { (output::escape_c1(head)) "…" }
                p { "Cut at " (head.len() / 1024) " kB of " (bytes) " bytes: "
                    a href=(download) download { "download it whole" } }
            }
        }
        None => render::json(row.get(name)),
    }
}

/// A job's payload or result whole, as a JSON file (`/jobs/ID/payload`, `/jobs/ID/result`).
pub async fn job_value(
    State(app): State<Arc<App>>,
    Path((id, what)): Path<(String, String)>,
) -> axum::response::Response {
    let sql = match what.as_str() {
        "payload" => {
            "select j.payload from jobs.jobs as j where j.id = $1::text::uuid and $2::text is null"
        }
        "result" => {
            "select j.result from jobs.jobs as j where j.id = $1::text::uuid and $2::text is null"
        }
        _ => return not_found(),
    };
    download(&app, sql, &id, None).await
}

/// A step's output whole, as a JSON file (`/jobs/ID/steps/STEP`).
pub async fn job_step(
    State(app): State<Arc<App>>,
    Path((id, step)): Path<(String, String)>,
) -> axum::response::Response {
    download(
        &app,
        "select s.output from jobs.steps as s where s.run_id = \
         (select j.run_id from jobs.jobs as j where j.id = $1::text::uuid) and s.step = $2",
        &id,
        Some(step),
    )
    .await
}

fn not_found() -> axum::response::Response {
    use axum::response::IntoResponse;
    (
        StatusCode::NOT_FOUND,
        render::message_page("Not found", "no such job, value or step"),
    )
        .into_response()
}

async fn download(
    app: &App,
    sql: &str,
    id: &str,
    step: Option<String>,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    if !uuid_like(id) {
        return not_found();
    }
    let found = match app.db().await {
        Ok(db) => db
            .query_opt(crate::role::for_role(sql).as_ref(), &[&id, &step])
            .await
            .map_err(|e| output::db_error(&e)),
        Err(e) => Err(e),
    };
    match found {
        Ok(Some(row)) => (
            [
                (axum::http::header::CONTENT_TYPE, "application/json"),
                (
                    axum::http::header::CONTENT_DISPOSITION,
                    "attachment; filename=\"value.json\"",
                ),
            ],
            row.get::<_, Option<Value>>(0)
                .unwrap_or(Value::Null)
                .to_string(),
        )
            .into_response(),
        Ok(None) => not_found(),
        Err(e) => failed(app, "Job", e).into_response(),
    }
}

/// The descendants as nested lists, from the rows' parent ids.
fn tree(rows: &[Row], root: &str) -> Markup {
    let mut under: HashMap<String, Vec<&Row>> = HashMap::new();
    for r in rows {
        under
            .entry(render::text(r, "parent_id"))
            .or_default()
            .push(r);
    }
    fn level(under: &HashMap<String, Vec<&Row>>, parent: &str) -> Markup {
        let Some(kids) = under.get(parent) else {
            return html! {};
        };
        html! {
            ul.tree {
                @for k in kids {
                    @let id = render::text(k, "id");
                    li {
                        a href={ "/jobs/" (id) } { (render::text(k, "name")) }
                        " " span class={ "state " (render::text(k, "state")) } { (render::text(k, "state")) }
                        " " (render::text(k, "attempts"))
                        (level(under, &id))
                    }
                }
            }
        }
    }
    if rows.is_empty() {
        return html! { p.none { "None." } };
    }
    level(&under, root)
}

pub async fn act(State(app): State<Arc<App>>, RawForm(body): RawForm) -> Page {
    let p = match form(&app, &body) {
        Ok(p) => p,
        Err(refused) => return refused,
    };
    let Some(action) = Action::parse(get(&p, "action")) else {
        return failed(
            &app,
            "Refused",
            anyhow::anyhow!("no such action: requeue, cancel or promote"),
        );
    };
    let by_filter = get(&p, "scope") == "filter";
    let f = match filters(&p) {
        Ok(f) if by_filter => f,
        Ok(_) => Filters::default(),
        Err(e) => return failed(&app, "Refused", anyhow::anyhow!(e)),
    };
    let ids: Vec<String> = if by_filter {
        vec![]
    } else {
        p.iter()
            .filter(|(k, _)| k == "ids")
            .map(|(_, v)| v.clone())
            .collect()
    };
    let from_step = opt(&p, "from_step");
    let title = format!("{} jobs", capitalised(action.verb()));
    let db = match app.db().await {
        Ok(db) => db,
        Err(e) => return failed(&app, &title, e),
    };
    let selection = Selection {
        ids: &ids,
        filters: &f,
        all: false,
        limit: None,
    };
    let selected = match jobs::select(&db, action, &selection).await {
        Ok(s) => s,
        Err(e) => return failed(&app, &title, e),
    };
    if by_filter && get(&p, "confirm") != "1" {
        let params = filter_params(&f);
        let shown: Vec<Row> = selected.iter().take(100).cloned().collect();
        let body = html! {
            p { "This would " (action.verb()) " " strong #count { (selected.len()) } " job(s)"
                @if selected.len() > 100 { " (the first 100 below)" } ":" }
            (job_table(&shown, None))
            form.actions method="post" action="/act" {
                (render::csrf(&app.csrf))
                input type="hidden" name="scope" value="filter";
                input type="hidden" name="confirm" value="1";
                input type="hidden" name="action" value=(action.verb());
                (hidden(&params))
                button #confirm type="submit" { (capitalised(action.verb())) " " (selected.len()) " job(s)" }
                " " a href=(link("/jobs", &params)) { "back" }
            }
        };
        return ok(&app, &title, body);
    }
    let (changed, refused) = jobs::apply(&db, action, selected, from_step.as_deref()).await;
    forget_finished(&app);
    let body = html! {
        p.done { (capitalised(action.done())) " " strong #changed { (changed.len()) } " job(s)." }
        (job_table(&changed, None))
        @if !refused.is_empty() {
            h2 { "Refused by the engine: " (refused.len()) }
            (render::table(&refused, 400, Some(("id", "/jobs/"))))
        }
        p { a href="/jobs" { "Jobs" } " · " a href="/" { "Overview" } }
    };
    ok(&app, &title, body)
}

fn capitalised(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_uppercase().collect::<String>() + c.as_str())
        .unwrap_or_default()
}

/// A POST's fields, once its CSRF token is checked (a refusal page when it is missing or wrong).
#[allow(clippy::result_large_err)]
fn form(app: &App, body: &[u8]) -> Result<Vec<(String, String)>, Page> {
    let p: Vec<(String, String)> = form_urlencoded::parse(body).into_owned().collect();
    if same(get(&p, "csrf"), &app.csrf) {
        Ok(p)
    } else {
        let e = anyhow::anyhow!(
            "refused: the form's CSRF token is missing or wrong\nreload the page and try again"
        );
        Err((
            StatusCode::FORBIDDEN,
            render::page("Refused", app.read_only, render::error(&e)),
        ))
    }
}

pub async fn queue_op(
    State(app): State<Arc<App>>,
    Path((queue, op)): Path<(String, String)>,
    RawForm(body): RawForm,
) -> Page {
    if let Err(refused) = form(&app, &body) {
        return refused;
    }
    let sql = match op.as_str() {
        "pause" => "select jobs.pause_queue($1)",
        "resume" => "select jobs.resume_queue($1)",
        _ => {
            return failed(
                &app,
                "Refused",
                anyhow::anyhow!("no such action: pause or resume"),
            )
        }
    };
    let done = match app.db().await {
        Ok(db) => db
            .execute(sql, &[&queue])
            .await
            .map_err(|e| output::db_error(&e)),
        Err(e) => Err(e),
    };
    forget_finished(&app);
    match done {
        Ok(_) => ok(
            &app,
            "Queue",
            html! { p.done { (if op == "pause" { "Paused" } else { "Resumed" }) " queue " strong { (queue) } "." }
            p { a href="/" { "Overview" } } },
        ),
        Err(e) => failed(&app, "Queue", e),
    }
}

pub async fn dead(State(app): State<Arc<App>>) -> Page {
    // Through the index of finished rows (state, finished_at): dead rows only.
    let groups = read(
        &app,
        "select row_to_json(x) from (
           select j.queue, j.name, j.last_error, count(*) as jobs,
                  date_trunc('second', max(j.finished_at)) as newest
           from jobs.jobs as j where j.state = 'dead'
           group by j.queue, j.name, j.last_error
           order by count(*) desc, max(j.finished_at) desc limit 100) as x",
    )
    .await;
    let groups = match groups {
        Ok(g) => g,
        Err(e) => return failed(&app, "Dead letters", e),
    };
    let body = html! {
        p { "Dead jobs grouped by queue, name and last error, the largest groups first." }
        @if groups.is_empty() { p.none { "No dead job." } }
        div.scroll { table.dead {
            @if !groups.is_empty() { thead { tr { th { "jobs" } th { "queue" } th { "name" } th { "last error" } th { "newest" } th {} } } }
            tbody {
                @for g in &groups {
                    @let params = vec![("state", "dead".to_string()), ("queue", render::text(g, "queue")),
                                       ("name", render::text(g, "name")), ("error", render::text(g, "last_error"))];
                    tr {
                        td.num { a href=(link("/jobs", &params)) { (render::text(g, "jobs")) } }
                        td { (render::text(g, "queue")) }
                        td { (render::text(g, "name")) }
                        td.error { (output::cell(g.get("last_error").unwrap_or(&Value::Null), 200)) }
                        td { (render::text(g, "newest")) }
                        td { @if !app.read_only {
                            form method="post" action="/act" {
                                (render::csrf(&app.csrf))
                                input type="hidden" name="scope" value="filter";
                                (hidden(&params))
                                button name="action" value="requeue" { "Requeue…" }
                            }
                        } }
                    }
                }
            }
        } }
    };
    ok(&app, "Dead letters", body)
}

pub async fn schedules(State(app): State<Arc<App>>) -> Page {
    let rows = read(&app, crate::queues::SCHEDULES).await;
    let rows = match rows {
        Ok(r) => r,
        Err(e) => return failed(&app, "Schedules", e),
    };
    let body = html! {
        @if rows.is_empty() { p.none { "No schedule." } }
        div.scroll { table {
            @if !rows.is_empty() { thead { tr { th { "name" } th { "cron" } th { "time zone" } th { "enabled" } th { "last slot" }
                th { "next slot" } th { "last job" } th { "last error" } th { "job" } th {} } } }
            tbody {
                @for s in &rows {
                    @let name = render::text(s, "name");
                    @let enabled = s.get("enabled").and_then(Value::as_bool) == Some(true);
                    tr {
                        td { (name) } td { code { (render::text(s, "cron")) } } td { (render::text(s, "timezone")) }
                        td { (if enabled { "yes" } else { "no" }) }
                        td { (render::text(s, "last_slot")) } td { (render::text(s, "next_slot")) }
                        td { @let j = render::text(s, "last_job_id"); @if !j.is_empty() { a href={ "/jobs/" (j) } { "job" } } }
                        td.error { (render::text(s, "last_error")) }
                        td { code { (output::cell(s.get("job").unwrap_or(&Value::Null), 120)) } }
                        td { @if !app.read_only {
                            form method="post" action={ "/schedules/" (render::segment(&name)) "/" (if enabled { "disable" } else { "enable" }) } {
                                (render::csrf(&app.csrf))
                                button type="submit" { (if enabled { "Disable" } else { "Enable" }) }
                            }
                        } }
                    }
                }
            }
        } }
    };
    ok(&app, "Schedules", body)
}

pub async fn schedule_op(
    State(app): State<Arc<App>>,
    Path((name, op)): Path<(String, String)>,
    RawForm(body): RawForm,
) -> Page {
    if let Err(refused) = form(&app, &body) {
        return refused;
    }
    let enabled = match op.as_str() {
        "enable" => true,
        "disable" => false,
        _ => {
            return failed(
                &app,
                "Refused",
                anyhow::anyhow!("no such action: enable or disable"),
            )
        }
    };
    // jobs.schedule sets every field: the others as they are.
    let done = match app.db().await {
        Ok(db) => db
            .execute(
                "select jobs.schedule(s.name, s.cron, s.job, s.timezone, s.catch_up, $2)
                 from jobs.schedules as s where s.name = $1",
                &[&name, &enabled],
            )
            .await
            .map_err(|e| output::db_error(&e)),
        Err(e) => Err(e),
    };
    match done {
        Ok(0) => failed(
            &app,
            "Schedule",
            anyhow::anyhow!("no schedule is named {name:?}"),
        ),
        Ok(_) => ok(
            &app,
            "Schedule",
            html! { p.done { (if enabled { "Enabled" } else { "Disabled" }) " schedule " strong { (name) } "." }
            p { a href="/schedules" { "Schedules" } } },
        ),
        Err(e) => failed(&app, "Schedule", e),
    }
}

/// The columns of jobs.job_types a page edits, and the cast of each (NULL: an empty field).
const POLICY: [(&str, &str); 14] = [
    ("max_attempts", "$::text::int"),
    ("backoff", "$::text"),
    ("backoff_base", "$::text::interval"),
    ("backoff_max", "$::text::interval"),
    ("jitter", "$::text::float8"),
    ("dead_letter", "$::text::boolean"),
    ("lease", "nullif($::text, '')::interval"),
    ("concurrency", "nullif($::text, '')::int"),
    ("timeout", "nullif($::text, '')::interval"),
    ("rate_limit", "nullif($::text, '')::int"),
    ("rate_period", "nullif($::text, '')::interval"),
    ("rate_limit_per_key", "$::text::boolean"),
    ("key_concurrency", "$::text::int"),
    ("when_busy", "$::text"),
];

pub async fn types(State(app): State<Arc<App>>) -> Page {
    let rows = read(
        &app,
        "select row_to_json(t) from jobs.job_types as t order by t.name",
    )
    .await;
    let rows = match rows {
        Ok(rows) => rows,
        Err(e) => return failed(&app, "Job types", e),
    };
    let body = html! {
        p { "The policy of each job name (jobs.job_types); a name not listed has the defaults. A library's "
            "syncPolicies writes it too, when asked." }
        (render::table(&rows, 60, None))
        @if !app.read_only {
            @for r in &rows {
                @let name = render::text(r, "name");
                details.policy {
                    summary { "Edit " (name) }
                    form method="post" action="/types" {
                        (render::csrf(&app.csrf))
                        input type="hidden" name="name" value=(name);
                        @for (col, _) in POLICY {
                            label { (col) " " input name=(col) value=(render::text(r, col)); }
                        }
                        button type="submit" { "Save" }
                    }
                }
            }
            form.actions method="post" action="/types" {
                (render::csrf(&app.csrf))
                input type="hidden" name="op" value="add";
                label { "A policy for the job name " input name="name" required; }
                button type="submit" { "Add, with the defaults" }
            }
        }
    };
    ok(&app, "Job types", body)
}

/// Saves a job type's policy (one UPDATE of jobs.job_types: the table's checks refuse a bad
/// value and nothing changes), or adds a name with the defaults.
pub async fn type_op(State(app): State<Arc<App>>, RawForm(body): RawForm) -> Page {
    let p = match form(&app, &body) {
        Ok(p) => p,
        Err(refused) => return refused,
    };
    let name = get(&p, "name").to_string();
    if name.is_empty() {
        return failed(&app, "Job types", anyhow::anyhow!("name the job type"));
    }
    let db = match app.db().await {
        Ok(db) => db,
        Err(e) => return failed(&app, "Job types", e),
    };
    let adding = get(&p, "op") == "add";
    let done = if adding {
        db.execute(
            "insert into jobs.job_types (name) values ($1) on conflict (name) do nothing",
            &[&name],
        )
        .await
    } else {
        let sets: Vec<String> = POLICY
            .iter()
            .enumerate()
            .map(|(i, (col, cast))| {
                format!("{col} = {}", cast.replace('$', &format!("${}", i + 2)))
            })
            .collect();
        let sql = format!(
            "update jobs.job_types set {} where name = $1",
            sets.join(", ")
        );
        let values: Vec<String> = POLICY
            .iter()
            .map(|(col, _)| get(&p, col).to_string())
            .collect();
        let mut params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = vec![&name];
        params.extend(
            values
                .iter()
                .map(|v| v as &(dyn tokio_postgres::types::ToSql + Sync)),
        );
        db.execute(&sql, &params).await
    };
    match done.map_err(|e| output::db_error(&e)) {
        Ok(0) if !adding => failed(
            &app,
            "Job types",
            anyhow::anyhow!("no job type is named {name:?}"),
        ),
        Ok(_) => ok(
            &app,
            "Job types",
            html! { p.done { (if adding { "Added " } else { "Saved the policy of " }) strong { (name) } "." }
            p { a href="/types" { "Job types" } } },
        ),
        Err(e) => failed(&app, "Job types", e),
    }
}
