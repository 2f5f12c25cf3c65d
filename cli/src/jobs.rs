//! Jobs: listed by filter, one job in full, and the bulk actions (`requeue`, `cancel`,
//! `promote`, `delete`), each through the `jobs.*` views and functions, so the engine decides and refuses
//! as it does for any caller. The command line (`pgjobs jobs`, `show`, the actions) prints
//! what these answer; the dashboard renders it.

use crate::filter::{Filters, Where};
use crate::output::{self, Row};
use anyhow::{bail, Result};
use serde_json::{json, Value};
use tokio_postgres::Client;

/// The columns a listing shows.
const LISTED: &str = "select row_to_json(x) from (
  select j.id, j.name, j.queue, j.state, j.attempt || '/' || j.max_attempts as attempts,
         j.priority, date_trunc('second', j.run_at) as run_at,
         date_trunc('second', j.finished_at) as finished_at, j.tenant_id as tenant, j.last_error,
         left(j.payload::text, 121) as payload_preview, left(j.result::text, 121) as result_preview
  from jobs.jobs as j";

/// The orders a listing takes: enqueue order (by id: UUIDv7s, and a child's id starts with the
/// time of its spawn), or by a column; ties by id, so a cursor keeps the order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum SortBy {
    #[default]
    Enqueued,
    RunAt,
    Finished,
    Attempts,
    Priority,
    Name,
    Queue,
    State,
}

impl SortBy {
    pub const ALL: [SortBy; 8] = [
        SortBy::Enqueued,
        SortBy::RunAt,
        SortBy::Finished,
        SortBy::Attempts,
        SortBy::Priority,
        SortBy::Name,
        SortBy::Queue,
        SortBy::State,
    ];

    /// Its name on the command line and in the dashboard's links.
    pub fn name(self) -> &'static str {
        match self {
            SortBy::Enqueued => "enqueued",
            SortBy::RunAt => "run-at",
            SortBy::Finished => "finished",
            SortBy::Attempts => "attempts",
            SortBy::Priority => "priority",
            SortBy::Name => "name",
            SortBy::Queue => "queue",
            SortBy::State => "state",
        }
    }

    pub fn parse(s: &str) -> Option<SortBy> {
        SortBy::ALL.into_iter().find(|b| b.name() == s)
    }

    /// The value sorted on, of the row `t` (never NULL: a live job's finish sorts as the
    /// earliest, so that the row comparison of the cursor holds for every row).
    fn expr(self, t: &str) -> String {
        match self {
            SortBy::Enqueued => format!("{t}.id"),
            SortBy::RunAt => format!("{t}.run_at"),
            SortBy::Finished => format!("coalesce({t}.finished_at, '-infinity'::timestamptz)"),
            SortBy::Attempts => format!("{t}.attempt"),
            SortBy::Priority => format!("{t}.priority"),
            SortBy::Name => format!("{t}.name"),
            SortBy::Queue => format!("{t}.queue"),
            SortBy::State => format!("{t}.state"),
        }
    }
}

/// A listing's order: by what, and largest (newest) first unless `ascending`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Order {
    pub by: SortBy,
    pub ascending: bool,
}

/// A page of jobs in the order asked (newest first by default), after the job `before` in that
/// order. Enqueue order walks the primary key; any other reads every job the filters select and
/// keeps the page's worth (a top-N sort), so on a large table narrow it by state or queue.
pub async fn page(
    client: &Client,
    filters: &Filters,
    limit: i64,
    before: Option<&str>,
    order: Order,
) -> Result<Vec<Row>> {
    let mut w = filters.conditions(None);
    let (cmp, dir) = if order.ascending {
        (">", "asc")
    } else {
        ("<", "desc")
    };
    let key = order.by.expr("j");
    if let Some(id) = before {
        if order.by == SortBy::Enqueued {
            w.add(
                &format!("j.id {cmp} $?::text::uuid"),
                Box::new(id.to_string()),
            );
        } else {
            // The cursor is a job: the rows after its (value, id) in this order.
            w.add(
                &format!(
                    "({key}, j.id) {cmp} (select {}, c.id from jobs.jobs as c where c.id = $?::text::uuid)",
                    order.by.expr("c")
                ),
                Box::new(id.to_string()),
            );
        }
    }
    let limit_param = w.param(Box::new(limit));
    let sorted = if order.by == SortBy::Enqueued {
        format!("j.id {dir}")
    } else {
        format!("{key} {dir}, j.id {dir}")
    };
    let sql = format!(
        "{LISTED}{} order by {sorted} limit {limit_param}) as x",
        w.sql()
    );
    output::rows(client, &sql, &w.refs()).await
}

pub async fn list(
    client: &Client,
    filters: &Filters,
    limit: i64,
    before: Option<&str>,
    order: Order,
    json: bool,
    wide: bool,
) -> Result<()> {
    let rows = page(client, filters, limit, before, order).await?;
    if json {
        println!("{}", output::json_rows(rows));
    } else {
        // A terminal of 120 columns: short ids, and one time relative to now (when it
        // finished, else when it runs); `--wide` shows the rows whole.
        use output::Column::{Id, Text, Time};
        let columns = [
            Id("id", "id"),
            Text("name", "name"),
            Text("queue", "queue"),
            Text("state", "state"),
            Text("attempts", "attempts"),
            Time(&["finished_at", "run_at"], "when"),
            Text("last_error", "last_error"),
        ];
        println!("{}", output::listing(&rows, wide, &columns, 26));
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

/// One job in full (but its claim token, a worker's fence: nothing an operator needs): its row, its attempts that did not complete, its run's steps, and its
/// descendants (children first, to `depth` levels and at most 500, each with its parent_id).
pub struct Detail {
    pub job: Row,
    pub attempts: Vec<Row>,
    pub steps: Vec<Row>,
    pub children: Vec<Row>,
}

/// How much of a job `detail` reads: a payload or result larger than `value_bytes` as text
/// (a step's output larger than `step_bytes`) comes cut, as `NAME_cut` (its first bytes) and
/// `NAME_bytes` (its size) instead of `NAME`; `page` attempts and steps after the `seq`s
/// given, and `page` children after the id given, each with one more row when there are more.
pub struct Bounds {
    pub value_bytes: i32,
    pub step_bytes: i32,
    pub page: i64,
    pub attempts_after: i64,
    pub steps_after: i64,
    pub children_after: Option<String>,
}

impl Bounds {
    /// Everything, as `pgjobs show` prints it.
    pub fn all() -> Bounds {
        Bounds {
            value_bytes: i32::MAX,
            step_bytes: i32::MAX,
            page: i64::MAX,
            attempts_after: 0,
            steps_after: 0,
            children_after: None,
        }
    }
}

/// A JSON value `expr` (of a lateral `src`) as the columns `name` or `name_cut`, and
/// `name_bytes`, cut at $2 bytes of text.
fn bounded(expr: &str, name: &str) -> String {
    format!(
        "case when octet_length(({expr})::text) <= $2 then {expr} end as {name}, \
         case when octet_length(({expr})::text) > $2 then left(({expr})::text, $2) end as {name}_cut, \
         case when octet_length(({expr})::text) > $2 then octet_length(({expr})::text) end as {name}_bytes"
    )
}

pub async fn detail(client: &Client, id: &str, depth: i32, b: &Bounds) -> Result<Option<Detail>> {
    let job = output::rows(
        client,
        &format!(
            "select row_to_json(x) from (
           select j.id, j.run_id, j.name, j.queue, j.state, j.attempt, j.max_attempts, j.priority,
                  j.tenant_id, j.idempotency_key, j.concurrency_key, j.parent_id, j.enqueued_by,
                  j.claimed_by, date_trunc('second', j.enqueued_at) as enqueued_at,
                  date_trunc('second', j.run_at) as run_at,
                  date_trunc('second', j.claimed_at) as claimed_at,
                  date_trunc('second', j.lease_expires_at) as lease_expires_at,
                  date_trunc('second', j.deadline) as deadline,
                  date_trunc('second', j.finished_at) as finished_at,
                  date_trunc('second', j.updated_at) as updated_at,
                  date_trunc('millisecond', j.finished_at - j.enqueued_at)::text as run_time,
                  date_trunc('millisecond', case when j.state = 'running' then jobs.clock() - j.claimed_at
                                                 when j.finished_at is not null then j.finished_at - j.claimed_at
                                            end)::text as attempt_time,
                  j.wait_event, j.wait_key, date_trunc('second', j.wait_until) as wait_until,
                  j.child_key, j.children_live, j.tags, j.ordering_key,
                  date_trunc('second', j.run_deadline) as run_deadline,
                  j.last_error, j.meta, {}, {}
           from jobs.jobs as j where j.id = $1::text::uuid) as x",
            bounded("j.payload", "payload"),
            bounded("j.result", "result")
        ),
        &[&id, &b.value_bytes],
    )
    .await?;
    let Some(job) = job.into_iter().next() else {
        return Ok(None);
    };
    let attempts = output::rows(
        client,
        "select row_to_json(x) from (
           select a.seq, a.attempt, a.outcome, a.worker, date_trunc('second', a.claimed_at) as claimed_at,
                  date_trunc('second', a.finished_at) as finished_at,
                  date_trunc('millisecond', a.finished_at - a.claimed_at)::text as took, a.error
           from jobs.attempts as a where a.job_id = $1::text::uuid and a.seq > $2::bigint
           order by a.seq limit $3::bigint) as x",
        &[&id, &b.attempts_after, &b.page.saturating_add(1)],
    )
    .await?;
    let steps = output::rows(
        client,
        &format!(
            "select row_to_json(x) from (
           select s.seq, s.step, s.state, s.attempt, date_trunc('second', s.saved_at) as saved_at,
                  date_trunc('second', s.started_at) as started_at,
                  date_trunc('second', s.finished_at) as finished_at,
                  date_trunc('millisecond', s.finished_at - s.started_at)::text as took, s.error, {}
           from jobs.steps as s
           where s.run_id = (select j.run_id from jobs.jobs as j where j.id = $1::text::uuid)
             and s.seq > $3::bigint
           order by s.seq limit $4::bigint) as x",
            bounded("s.output", "output")
        ),
        &[
            &id,
            &b.step_bytes,
            &b.steps_after,
            &b.page.saturating_add(1),
        ],
    )
    .await?;
    // Each level by jobs_children_idx; bounded in depth and count whatever the tree holds: the
    // first level a page at a time (by id), 500 rows in all.
    let children = output::rows(
        client,
        "with recursive tree as (
           (select c.id, c.parent_id, c.name, c.child_key, c.enqueued_at, c.state, c.attempt, c.max_attempts,
                   c.last_error, 1 as depth
            from jobs.jobs as c where c.parent_id = $1::text::uuid
              and ($3::text is null or c.id > $3::text::uuid)
            order by c.id limit least($4::bigint, 500))
           union all
           select c.id, c.parent_id, c.name, c.child_key, c.enqueued_at, c.state, c.attempt, c.max_attempts,
                  c.last_error, t.depth + 1
           from tree as t join jobs.jobs as c on c.parent_id = t.id
           where t.depth < $2 and c.parent_id is not null)  -- (jobs_children_idx's predicate)
         select row_to_json(x) from (
           select t.id, t.parent_id, t.name, t.child_key as key,
                  date_trunc('second', t.enqueued_at) as enqueued_at, t.state,
                  t.attempt || '/' || t.max_attempts as attempts, t.last_error, t.depth
           from tree as t order by t.depth, t.id limit 500) as x",
        &[&id, &depth, &b.children_after, &b.page.saturating_add(1)],
    )
    .await?;
    let mut job = job;
    let mut steps = steps;
    for row in std::iter::once(&mut job).chain(steps.iter_mut()) {
        row.retain(|k, v| !(v.is_null() && (k.ends_with("_cut") || k.ends_with("_bytes"))));
    }
    Ok(Some(Detail {
        job,
        attempts,
        steps,
        children,
    }))
}

pub async fn show(client: &Client, id: &str, json: bool) -> Result<bool> {
    let Some(mut d) = detail(client, id, 1, &Bounds::all()).await? else {
        bail!("no job has id {id}\n  fix: check the id; finished jobs are deleted after their retention period");
    };
    for row in d.attempts.iter_mut().chain(d.steps.iter_mut()) {
        row.shift_remove("seq");
    }
    if json {
        let all =
            json!({"job": d.job, "attempts": d.attempts, "steps": d.steps, "children": d.children});
        println!("{}", output::json(&all));
    } else {
        println!("{}", output::fields(&d.job));
        for (title, rows) in [
            ("attempts that did not complete", &d.attempts),
            ("steps", &d.steps),
            ("children", &d.children),
        ] {
            println!("\n{title}:\n{}", output::table(rows, 60));
        }
    }
    Ok(true)
}

/// A bulk action: the engine function it calls per job and the states it takes a job from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Requeue,
    Cancel,
    Promote,
    Delete,
}

impl Action {
    pub fn parse(s: &str) -> Option<Action> {
        match s {
            "requeue" => Some(Action::Requeue),
            "cancel" => Some(Action::Cancel),
            "promote" => Some(Action::Promote),
            "delete" => Some(Action::Delete),
            _ => None,
        }
    }
    pub fn states(self) -> &'static [&'static str] {
        match self {
            Action::Requeue | Action::Delete => &["completed", "failed", "dead", "cancelled"],
            Action::Cancel => &["ready", "delayed", "running", "suspended"],
            Action::Promote => &["delayed", "suspended"],
        }
    }
    pub fn verb(self) -> &'static str {
        match self {
            Action::Requeue => "requeue",
            Action::Cancel => "cancel",
            Action::Promote => "promote",
            Action::Delete => "delete",
        }
    }
    pub fn done(self) -> &'static str {
        match self {
            Action::Requeue => "requeued",
            Action::Cancel => "cancelled",
            Action::Promote => "promoted",
            Action::Delete => "deleted",
        }
    }
}

/// Which jobs an action takes: ids, or the filters (or every job, `all`), at most `limit`.
pub struct Selection<'a> {
    pub ids: &'a [String],
    pub filters: &'a Filters,
    pub all: bool,
    pub limit: Option<i64>,
}

/// The jobs the action would take: the ids given (each must exist), or the filter narrowed to
/// the states the action takes. Refuses an empty selection, ids with filters, and a --state
/// the action cannot take; changes nothing.
pub async fn select(client: &Client, action: Action, s: &Selection<'_>) -> Result<Vec<Row>> {
    let verb = action.verb();
    if !s.ids.is_empty() && (!s.filters.is_empty() || s.all) {
        bail!("{verb}: pass job ids or filters, not both");
    }
    if s.ids.is_empty() && s.filters.is_empty() && !s.all {
        bail!("{verb}: no jobs selected\n  fix: name job ids, or filter (--queue, --state, --name, --tenant, --since, --error-like, --text, --tag), or pass --all for every job it can take");
    }
    if !s.filters.state.is_empty()
        && s.filters
            .state
            .iter()
            .all(|st| !action.states().contains(&st.as_str()))
    {
        bail!(
            "{verb}: takes jobs that are {} only; --state {} selects none",
            action.states().join(", "),
            s.filters.state.join(",")
        );
    }
    let mut w = if s.ids.is_empty() {
        s.filters.conditions(Some(action.states()))
    } else {
        let mut w = Where::default();
        w.add("j.id = any($?::text[]::uuid[])", Box::new(s.ids.to_vec()));
        w
    };
    if action == Action::Promote && s.ids.is_empty() {
        // A suspended job waiting for an event or its children is not promotable (jobs.promote).
        w.conditions
            .push("(j.state <> 'suspended' or j.wait_event is null)".into());
    }
    if action == Action::Delete && s.ids.is_empty() {
        // A child goes with its root (jobs.delete), as retention deletes it.
        w.conditions.push("j.parent_id is null".into());
    }
    let limit = match s.limit {
        Some(n) => format!(" limit {}", w.param(Box::new(n))),
        None => String::new(),
    };
    let sql = format!("{LISTED}{} order by j.id{limit}) as x", w.sql());
    let selected = output::rows(client, &sql, &w.refs()).await?;
    if s.ids.len() > selected.len() {
        let found: Vec<&str> = selected
            .iter()
            .filter_map(|r| r.get("id").and_then(Value::as_str))
            .collect();
        let missing: Vec<&str> = s
            .ids
            .iter()
            .map(String::as_str)
            .filter(|id| !found.contains(id))
            .collect();
        bail!(
            "{verb}: no job has id {}\n  fix: check the ids; finished jobs are deleted after their retention period",
            missing.join(", ")
        );
    }
    Ok(selected)
}

/// Calls the action's function for each job, each on its own: the jobs changed, and those the
/// engine refused (id and the engine's message, hint and code).
pub async fn apply(
    client: &Client,
    action: Action,
    jobs: Vec<Row>,
    from_step: Option<&str>,
) -> (Vec<Row>, Vec<Row>) {
    let mut changed = Vec::new();
    let mut refused = Vec::new();
    for job in jobs {
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
                        &[&id, &from_step],
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
            Action::Delete => {
                client
                    .execute("select jobs.delete($1::text::uuid)", &[&id])
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
    (as_now(client, changed).await, refused)
}

/// The jobs changed as they are now, read again after the action (the rows selected before
/// it still say dead for a job requeued, and it may have run since); one gone since (deleted,
/// or its retention) is shown as it was selected.
async fn as_now(client: &Client, changed: Vec<Row>) -> Vec<Row> {
    let ids: Vec<String> = changed
        .iter()
        .filter_map(|r| r.get("id").and_then(Value::as_str).map(str::to_string))
        .collect();
    if ids.is_empty() {
        return changed;
    }
    let sql = format!("{LISTED} where j.id = any($1::text[]::uuid[])) as x");
    let Ok(now) = output::rows(client, &sql, &[&ids]).await else {
        return changed;
    };
    changed
        .into_iter()
        .map(|old| {
            now.iter()
                .find(|r| r.get("id") == old.get("id"))
                .cloned()
                .unwrap_or(old)
        })
        .collect()
}

/// The command line's bulk action: lists the selection with --dry-run, else applies it and
/// prints what changed and what was refused. Answers whether every job selected changed.
pub async fn act(
    client: &Client,
    action: Action,
    s: Selection<'_>,
    dry_run: bool,
    from_step: Option<&str>,
    json: bool,
) -> Result<bool> {
    let verb = action.verb();
    let selected = select(client, action, &s).await?;
    if dry_run {
        if json {
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
    let (changed, refused) = apply(client, action, selected, from_step).await;
    let done = action.done();
    if json {
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
