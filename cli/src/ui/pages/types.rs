//! The job types: each name's policy, edited in place.

use super::*;

/// The columns of jobs.job_types a page edits, and the cast of each (NULL: an empty field).
pub(super) const POLICY: [(&str, &str); 14] = [
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
