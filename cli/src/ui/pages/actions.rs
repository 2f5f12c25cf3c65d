//! The actions: cancel, requeue, promote, delete and their bulk forms (a preview first), and a queue's
//! pause and resume.

use super::*;

pub async fn act(State(app): State<Arc<App>>, RawForm(body): RawForm) -> Page {
    let p = match form(&app, &body) {
        Ok(p) => p,
        Err(refused) => return refused,
    };
    let Some(action) = Action::parse(get(&p, "action")) else {
        return failed(
            &app,
            "Refused",
            anyhow::anyhow!("no such action: requeue, cancel, promote or delete"),
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
    // A filter's action, and any delete, shows what it would take first.
    if (by_filter || action == Action::Delete) && get(&p, "confirm") != "1" {
        let params = filter_params(&f);
        let shown: Vec<Row> = selected.iter().take(100).cloned().collect();
        let body = html! {
            p { "This would " (action.verb()) " " strong #count { (selected.len()) } " job(s)"
                @if selected.len() > 100 { " (the first 100 below)" } ":"
                @if action == Action::Delete { " each with its children, attempts and steps, for good." } }
            (job_table(&shown, false, None))
            form.actions method="post" action="/act" {
                (render::csrf(&app.csrf))
                @if by_filter { input type="hidden" name="scope" value="filter"; }
                input type="hidden" name="confirm" value="1";
                input type="hidden" name="action" value=(action.verb());
                (hidden(&params))
                @for id in &ids { input type="hidden" name="ids" value=(id); }
                button #confirm type="submit" { (capitalised(action.verb())) " " (selected.len()) " job(s)" }
                " " a href=(link("/jobs", &params)) { "back" }
            }
        };
        return ok(&app, &title, body);
    }
    let (changed, refused) = jobs::apply(&db, action, selected, from_step.as_deref()).await;
    forget_finished(&app);
    let body = html! {
        p.done { (capitalised(action.done())) " " strong #changed { (changed.len()) } " job(s)"
            @if !changed.is_empty() { ", as they are now:" } @else { "." } }
        (job_table(&changed, false, None))
        @if !refused.is_empty() {
            h2 { "Refused by the engine: " (refused.len()) }
            (render::table(&refused, 400, Some(("id", "/jobs/"))))
        }
        p { a href="/jobs" { "Jobs" } " · " a href="/" { "Overview" } }
    };
    ok(&app, &title, body)
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
