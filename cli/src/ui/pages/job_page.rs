//! A job's page: its fields, payload and result, its run as a timeline (pages/timeline.rs),
//! its steps and children, each a page at a time; and the downloads of its values whole.

use super::*;

/// The most of a payload or result a job's page shows, and of each step's output in its list
/// of 50; the rest is a download (`/jobs/ID/payload`, `/jobs/ID/steps/STEP`, ...).
pub(super) const VALUE_BYTES: i32 = 64 * 1024;
pub(super) const STEP_BYTES: i32 = 4 * 1024;

/// A job's page: its fields, payload and result, then its attempts, steps and children a page
/// of each at a time (`?attempts_after=SEQ`, `?steps_after=SEQ`, `?children_after=ID`), so
/// that whatever the job holds, the page and the dashboard's memory stay bounded. While the job
/// or a child shown is live, the page's script reads it again every 2 s as `?part=job` (the
/// section alone) and puts it in place; the section says when nothing shown is live any more.
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
    let live = !finished
        || children.iter().any(|c| {
            ["ready", "delayed", "running", "suspended"]
                .contains(&render::text(c, "state").as_str())
        });
    let section = html! { section #job data-live=[live.then_some("1")] {
        @if !app.read_only {
            div.actions {
                @if finished {
                    form method="post" action="/act" {
                        (render::csrf(&app.csrf))
                        input type="hidden" name="ids" value=(id);
                        button name="action" value="requeue" { "Requeue" }
                        @if d.job.get("parent_id").is_none_or(Value::is_null) {
                            " " button name="action" value="delete" { "Delete…" }
                        }
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
                    } @else if k.ends_with("_at") || k == "deadline" || k == "run_deadline" || k == "wait_until" {
                        (render::time(&fields, k))
                    } @else { (output::cell(v, 100_000)) }
                } }
            }
        } }
        h2 { "Payload" } (payload)
        h2 { "Result" } (result)
        h2 { "Timeline" }
        (timeline(&d.job, attempts, steps, &children))
        @if let Some(last) = more_attempts { p { a href={ "/jobs/" (id) "?attempts_after=" (last) } { "later attempts →" } } }
        h2 { "Steps" }
        @if steps.is_empty() { p.none { "None." } }
        ol.steps {
            @for s in steps {
                @let step = render::text(s, "step");
                @let state = render::text(s, "state");
                li { strong { (step) } " · " span class={ "state " (state) } { (state) }
                     " · attempt " (render::text(s, "attempt")) " · " (render::time(s, "saved_at"))
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
    } };
    if get(&q, "part") == "job" {
        return (StatusCode::OK, section);
    }
    ok(&app, &format!("Job {id}"), section)
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

/// The descendants as nested lists, from the rows' parent ids.
pub(super) fn tree(rows: &[Row], root: &str) -> Markup {
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
                        @if let Some(key) = k.get("key").and_then(Value::as_str) { " " code { (key) } }
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
