//! The dead letters, grouped by job name and error.

use super::*;

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
