//! The schedules: their next slots and last errors; enable, disable, run now.

use super::*;

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
