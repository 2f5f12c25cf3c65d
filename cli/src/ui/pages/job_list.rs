//! The jobs page: jobs by filter, a page at a time, with the bulk actions' selection.

use super::*;

pub async fn jobs(State(app): State<Arc<App>>, RawQuery(raw): RawQuery) -> Page {
    let p = pairs(raw.as_deref());
    let f = match filters(&p) {
        Ok(f) => f,
        Err(e) => return failed(&app, "Jobs", anyhow::anyhow!(e)),
    };
    let before = opt(&p, "before");
    let order = order_of(&p);
    let (rows, queues) = match app.db().await {
        Ok(db) => (
            jobs::page(&db, &f, PAGE_SIZE, before.as_deref(), order).await,
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
    let sorting = Sorting {
        order,
        params: &params,
    };
    let mut ordered = params.clone();
    ordered.extend(order_params(order));
    let older = rows
        .last()
        .filter(|_| rows.len() as i64 == PAGE_SIZE)
        .map(|r| {
            let mut p = ordered.clone();
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
            (hidden(&order_params(order)))
            button type="submit" { "Filter" }
        }
        @if app.read_only {
            (job_table(&rows, false, Some(&sorting)))
        } @else {
            form #selected method="post" action="/act" {
                (render::csrf(&app.csrf))
                (job_table(&rows, true, Some(&sorting)))
                @if !rows.is_empty() {
                    div.actions {
                        "Selected: "
                        button name="action" value="requeue" { "Requeue" }
                        button name="action" value="cancel" { "Cancel" }
                        button name="action" value="promote" { "Promote" }
                        button name="action" value="delete" { "Delete…" }
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
                    button name="action" value="delete" { "Delete…" }
                }
            }
        }
        nav.pages {
            @if before.is_some() { a href=(link("/jobs", &ordered)) { "← first page" } }
            @if let Some(o) = older { a #older href=(o) { "next page →" } }
        }
    };
    ok(&app, "Jobs", body)
}

/// The queues a role may pick from (every queue ever used, by name; at most 500).
const QUEUES: &str =
    "select row_to_json(x) from (select q.queue from jobs.queues as q order by q.queue limit 500) as x";

/// A sortable table's order and the filter its heading links keep.
pub(super) struct Sorting<'a> {
    pub order: Order,
    pub params: &'a [(&'static str, String)],
}

/// The listing's params for this order (none for the default, enqueue order newest first).
pub(super) fn order_params(order: Order) -> Vec<(&'static str, String)> {
    let mut p = Vec::new();
    if order.by != SortBy::Enqueued {
        p.push(("sort", order.by.name().to_string()));
    }
    if order.ascending {
        p.push(("order", "asc".to_string()));
    }
    p
}

/// The order a page asks for (`?sort=COLUMN&order=asc`); enqueue order, newest first, else.
pub(super) fn order_of(pairs: &[(String, String)]) -> Order {
    Order {
        by: SortBy::parse(get(pairs, "sort")).unwrap_or_default(),
        ascending: get(pairs, "order") == "asc",
    }
}

/// A column's heading: a link that sorts by it (largest first; again: smallest first), marked
/// for screen readers when the table is sorted by it.
fn heading(title: &str, by: SortBy, sorting: Option<&Sorting>) -> Markup {
    let Some(s) = sorting else {
        return html! { th { (title) } };
    };
    let current = s.order.by == by;
    let next = Order {
        by,
        ascending: current && !s.order.ascending,
    };
    let mut p = s.params.to_vec();
    p.extend(order_params(next));
    let sort = match (current, s.order.ascending) {
        (false, _) => None,
        (true, true) => Some("ascending"),
        (true, false) => Some("descending"),
    };
    html! {
        th aria-sort=[sort] { a.sort href=(link("/jobs", &p)) { (title)
            @if let Some(d) = sort { " " span aria-hidden="true" { (if d == "ascending" { "▲" } else { "▼" }) } } } }
    }
}

pub(super) fn job_table(rows: &[Row], selectable: bool, sorting: Option<&Sorting>) -> Markup {
    if rows.is_empty() {
        return html! { p.none { "No job matches." } };
    }
    html! {
        div.scroll { table.jobs {
            thead { tr {
                @if selectable { th {} }
                (heading("id", SortBy::Enqueued, sorting)) (heading("name", SortBy::Name, sorting))
                (heading("queue", SortBy::Queue, sorting)) (heading("state", SortBy::State, sorting))
                (heading("attempts", SortBy::Attempts, sorting)) (heading("run at", SortBy::RunAt, sorting))
                (heading("finished", SortBy::Finished, sorting))
                th { "tenant" } th { "payload" } th { "result" } th { "last error" }
            } }
            tbody {
                @for r in rows {
                    @let id = render::text(r, "id");
                    tr {
                        @if selectable { td { input type="checkbox" name="ids" value=(id) aria-label="select"; } }
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
