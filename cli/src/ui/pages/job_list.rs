//! The jobs page: jobs by filter, a page at a time, with the bulk actions' selection.

use super::*;

pub async fn jobs(State(app): State<Arc<App>>, RawQuery(raw): RawQuery) -> Page {
    let p = pairs(raw.as_deref());
    let f = match filters(&p) {
        Ok(f) => f,
        Err(e) => return failed(&app, "Jobs", anyhow::anyhow!(e)),
    };
    let before = opt(&p, "before");
    let (rows, queues) = match app.db().await {
        Ok(db) => (
            jobs::page(&db, &f, PAGE_SIZE, before.as_deref()).await,
            // The queue picker's choices; none for a role that may not read them.
            output::rows(&db, QUEUES, &[]).await.unwrap_or_default(),
        ),
        Err(e) => (Err(e), vec![]),
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
            label { "queue " input name="queue" list="queues" value=(f.queue.clone().unwrap_or_default()); }
            datalist #queues { @for q in &queues { option value=(render::text(q, "queue")) {} } }
            label { "state " select name="state" {
                option value="" { "any" }
                @for s in STATES { option value=(s) selected[f.state.len() == 1 && f.state[0] == s] { (s) } }
            } }
            label { "name " input name="name" value=(f.name.clone().unwrap_or_default()); }
            label { "tenant " input name="tenant" value=(f.tenant.clone().unwrap_or_default()); }
            label { "within " input name="since" placeholder="1 hour" value=(f.since.clone().unwrap_or_default()); }
            label { "find " input name="find" type="search" placeholder="id or part of it, key or text" value=(f.find.clone().unwrap_or_default()); }
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

/// The queues a role may pick from (every queue ever used, by name; at most 500).
const QUEUES: &str =
    "select row_to_json(x) from (select q.queue from jobs.queues as q order by q.queue limit 500) as x";

pub(super) fn job_table(rows: &[Row], selectable: Option<()>) -> Markup {
    if rows.is_empty() {
        return html! { p.none { "No job matches." } };
    }
    html! {
        div.scroll { table.jobs {
            thead { tr {
                @if selectable.is_some() { th {} }
                th { "id" } th { "name" } th { "queue" } th { "state" } th { "attempts" }
                th { "run at" } th { "finished" } th { "tenant" } th { "payload" } th { "result" } th { "last error" }
            } }
            tbody {
                @for r in rows {
                    @let id = render::text(r, "id");
                    tr {
                        @if selectable.is_some() { td { input type="checkbox" name="ids" value=(id) aria-label="select"; } }
                        td.id { (render::short_id(&id)) }
                        td { (render::text(r, "name")) }
                        td { (render::text(r, "queue")) }
                        td { span class={ "state " (render::text(r, "state")) } { (render::text(r, "state")) } }
                        td.num { (render::text(r, "attempts")) }
                        td { (render::time(r, "run_at")) }
                        td { (render::time(r, "finished_at")) }
                        td { (render::text(r, "tenant")) }
                        td.preview { code { (output::cell(r.get("payload_preview").unwrap_or(&Value::Null), 120)) } }
                        td.preview { code { (output::cell(r.get("result_preview").unwrap_or(&Value::Null), 120)) } }
                        td.error { (output::cell(r.get("last_error").unwrap_or(&Value::Null), 120)) }
                    }
                }
            }
        } }
    }
}
