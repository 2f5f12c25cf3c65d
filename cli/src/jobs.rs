//! `pgjobs jobs`, `pgjobs show` and the bulk actions (`requeue`, `cancel`, `promote`), each
//! through the `jobs.*` view and functions, so the engine decides and refuses as it does for
//! any caller.

use crate::filter::{Filters, Where};
use crate::output::{self, Row};
use anyhow::{bail, Result};
use serde_json::{json, Value};
use tokio_postgres::Client;

/// The columns a listing shows, newest job first (ids are UUIDv7: time-ordered).
const LISTED: &str = "select row_to_json(x) from (
  select j.id, j.name, j.queue, j.state, j.attempt || '/' || j.max_attempts as attempts,
         j.priority, date_trunc('second', j.run_at) as run_at,
         date_trunc('second', j.finished_at) as finished_at, j.tenant_id as tenant, j.last_error
  from jobs.jobs as j";

pub async fn list(
    client: &Client,
    filters: &Filters,
    limit: i64,
    before: Option<&str>,
    json: bool,
) -> Result<()> {
    let mut w = filters.conditions(None);
    if let Some(id) = before {
        w.add("j.id < $?::text::uuid", Box::new(id.to_string()));
    }
    let limit_param = w.param(Box::new(limit));
    let sql = format!(
        "{LISTED}{} order by j.id desc limit {limit_param}) as x",
        w.sql()
    );
    let rows = output::rows(client, &sql, &w.refs()).await?;
    if json {
        println!(
            "{}",
            output::json(&Value::Array(rows.into_iter().map(Value::Object).collect()))
        );
    } else {
        println!("{}", output::table(&rows, 60));
        if rows.len() as i64 == limit {
            if let Some(last) = rows
                .last()
                .and_then(|r| r.get("id"))
                .and_then(Value::as_str)
            {
                println!("more: add --before {last}");
            }
        }
    }
    Ok(())
}

pub async fn show(client: &Client, id: &str, json: bool) -> Result<bool> {
    let job = output::rows(
        client,
        "select row_to_json(x) from (
           select j.id, j.run_id, j.name, j.queue, j.state, j.attempt, j.max_attempts, j.priority,
                  j.tenant_id, j.idempotency_key, j.concurrency_key, j.parent_id,
                  j.claimed_by, j.claim, date_trunc('second', j.enqueued_at) as enqueued_at,
                  date_trunc('second', j.run_at) as run_at,
                  date_trunc('second', j.claimed_at) as claimed_at,
                  date_trunc('second', j.lease_expires_at) as lease_expires_at,
                  date_trunc('second', j.deadline) as deadline,
                  date_trunc('second', j.finished_at) as finished_at,
                  j.wait_event, j.wait_key, date_trunc('second', j.wait_until) as wait_until,
                  j.children_live, j.last_error, j.payload, j.result
           from jobs.jobs as j where j.id = $1::text::uuid) as x",
        &[&id],
    )
    .await?;
    let Some(job) = job.into_iter().next() else {
        bail!("no job has id {id}\n  fix: check the id; finished jobs are deleted after their retention period");
    };
    let attempts = output::rows(
        client,
        "select row_to_json(x) from (
           select a.attempt, a.outcome, a.worker, date_trunc('second', a.claimed_at) as claimed_at,
                  date_trunc('second', a.finished_at) as finished_at, a.error
           from jobs.attempts as a where a.job_id = $1::text::uuid order by a.finished_at, a.attempt) as x",
        &[&id],
    )
    .await?;
    let steps = output::rows(
        client,
        "select row_to_json(x) from (
           select s.step, s.attempt, date_trunc('second', s.saved_at) as saved_at, s.output
           from jobs.steps as s
           where s.run_id = (select j.run_id from jobs.jobs as j where j.id = $1::text::uuid)
           order by s.seq) as x",
        &[&id],
    )
    .await?;
    let children = output::rows(
        client,
        "select row_to_json(x) from (
           select c.id, c.name, c.state, c.attempt || '/' || c.max_attempts as attempts, c.last_error
           from jobs.jobs as c where c.parent_id = $1::text::uuid order by c.id) as x",
        &[&id],
    )
    .await?;
    if json {
        let all = json!({"job": job, "attempts": attempts, "steps": steps, "children": children});
        println!("{}", output::json(&all));
    } else {
        println!("{}", output::fields(&job));
        for (title, rows) in [
            ("attempts that did not complete", &attempts),
            ("steps", &steps),
            ("children", &children),
        ] {
            println!("\n{title}:\n{}", output::table(rows, 60));
        }
    }
    Ok(true)
}

/// A bulk action: the engine function it calls per job and the states it takes a job from.
#[derive(Clone, Copy, Debug)]
pub enum Action {
    Requeue,
    Cancel,
    Promote,
}

impl Action {
    fn states(self) -> &'static [&'static str] {
        match self {
            Action::Requeue => &["completed", "failed", "dead", "cancelled"],
            Action::Cancel => &["ready", "delayed", "running", "suspended"],
            Action::Promote => &["delayed", "suspended"],
        }
    }
    fn verb(self) -> &'static str {
        match self {
            Action::Requeue => "requeue",
            Action::Cancel => "cancel",
            Action::Promote => "promote",
        }
    }
}

pub struct ActArgs<'a> {
    pub ids: &'a [String],
    pub filters: &'a Filters,
    pub all: bool,
    pub limit: Option<i64>,
    pub dry_run: bool,
    pub from_step: Option<&'a str>,
    pub json: bool,
}

/// Selects the jobs (the ids given, or the filter narrowed to the states the action takes),
/// lists them with --dry-run, else calls the action's function for each and prints what
/// changed and what the engine refused. Answers whether every job selected changed.
pub async fn act(client: &Client, action: Action, a: ActArgs<'_>) -> Result<bool> {
    let verb = action.verb();
    if !a.ids.is_empty() && (!a.filters.is_empty() || a.all) {
        bail!("{verb}: pass job ids or filters, not both");
    }
    if a.ids.is_empty() && a.filters.is_empty() && !a.all {
        bail!("{verb}: no jobs selected\n  fix: name job ids, or filter (--queue, --state, --name, --tenant, --since, --error-like), or pass --all for every job it can take");
    }
    if !a.filters.state.is_empty()
        && a.filters
            .state
            .iter()
            .all(|s| !action.states().contains(&s.as_str()))
    {
        bail!(
            "{verb}: takes jobs that are {} only; --state {} selects none",
            action.states().join(", "),
            a.filters.state.join(",")
        );
    }
    let mut w = if a.ids.is_empty() {
        a.filters.conditions(Some(action.states()))
    } else {
        let mut w = Where::default();
        w.add("j.id = any($?::text[]::uuid[])", Box::new(a.ids.to_vec()));
        w
    };
    if matches!(action, Action::Promote) && a.ids.is_empty() {
        // A suspended job waiting for an event or its children is not promotable (jobs.promote).
        w.conditions
            .push("(j.state <> 'suspended' or j.wait_event is null)".into());
    }
    let limit = match a.limit {
        Some(n) => format!(" limit {}", w.param(Box::new(n))),
        None => String::new(),
    };
    let sql = format!("{LISTED}{} order by j.id{limit}) as x", w.sql());
    let selected = output::rows(client, &sql, &w.refs()).await?;
    if a.ids.len() > selected.len() {
        let found: Vec<&str> = selected
            .iter()
            .filter_map(|r| r.get("id").and_then(Value::as_str))
            .collect();
        let missing: Vec<&String> = a
            .ids
            .iter()
            .filter(|id| !found.contains(&id.as_str()))
            .collect();
        bail!("{verb}: no job has id {}\n  fix: check the ids; finished jobs are deleted after their retention period",
              missing.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", "));
    }
    if a.dry_run {
        if a.json {
            println!(
                "{}",
                output::json(&json!({"would": verb, "jobs": selected}))
            );
        } else {
            println!(
                "{}\nwould {verb} {} job(s); run it without --dry-run to do it",
                output::table(&selected, 60),
                selected.len()
            );
        }
        return Ok(true);
    }
    let mut changed: Vec<Row> = Vec::new();
    let mut refused: Vec<Row> = Vec::new();
    for job in selected {
        let id = job
            .get("id")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let called = match action {
            Action::Requeue => {
                client
                    .execute(
                        "select jobs.requeue($1::text::uuid, $2::text)",
                        &[&id, &a.from_step],
                    )
                    .await
            }
            Action::Cancel => {
                client
                    .execute("select jobs.cancel($1::text::uuid)", &[&id])
                    .await
            }
            Action::Promote => {
                client
                    .execute("select jobs.promote($1::text::uuid)", &[&id])
                    .await
            }
        };
        match called {
            Ok(_) => changed.push(job),
            Err(e) => {
                let mut r = Row::new();
                r.insert("id".into(), Value::String(id));
                r.insert("refused".into(), Value::String(output::describe(&e)));
                refused.push(r);
            }
        }
    }
    let done = match action {
        Action::Requeue => "requeued",
        Action::Cancel => "cancelled",
        Action::Promote => "promoted",
    };
    if a.json {
        println!(
            "{}",
            output::json(&json!({ done: changed, "refused": refused }))
        );
    } else {
        println!(
            "{}\n{done} {} job(s)",
            output::table(&changed, 60),
            changed.len()
        );
        if !refused.is_empty() {
            println!(
                "\nrefused {} job(s):\n{}",
                refused.len(),
                output::table(&refused, 200)
            );
        }
    }
    Ok(refused.is_empty())
}
