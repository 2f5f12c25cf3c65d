//! The job filters shared by `pgjobs jobs` and the bulk actions, as SQL conditions on
//! `jobs.jobs` with their values passed as parameters (never spliced into the text).

use clap::Args;
use tokio_postgres::types::ToSql;

/// The states of `jobs.job_state`.
pub const STATES: [&str; 8] = [
    "ready",
    "delayed",
    "running",
    "suspended",
    "completed",
    "failed",
    "dead",
    "cancelled",
];

#[derive(Args, Clone, Debug, Default)]
pub struct Filters {
    /// Only jobs of this queue
    #[arg(long)]
    pub queue: Option<String>,
    /// Only jobs in these states (comma-separated)
    #[arg(long, value_delimiter = ',', value_parser = STATES)]
    pub state: Vec<String>,
    /// Only jobs of this name (job type)
    #[arg(long)]
    pub name: Option<String>,
    /// Only jobs of this tenant
    #[arg(long)]
    pub tenant: Option<String>,
    /// Only jobs that finished (live jobs: were enqueued) within this interval, e.g. '1 hour'
    #[arg(long, value_name = "INTERVAL")]
    pub since: Option<String>,
    /// Only jobs whose last error matches this ILIKE pattern; without % it matches anywhere
    #[arg(long, value_name = "PATTERN")]
    pub error_like: Option<String>,
    /// Only jobs whose last error is exactly this
    #[arg(long, value_name = "TEXT")]
    pub error: Option<String>,
    /// Only jobs whose payload or last error contains this text (case-insensitive)
    #[arg(long, value_name = "TEXT")]
    pub text: Option<String>,
    /// Only jobs with this tag (enqueue's tags); repeat for jobs with all of them
    #[arg(long = "tag", value_name = "TAG")]
    pub tags: Vec<String>,
    /// Find jobs: this job id or run id (whole), the start or the end of an id (4 to 35
    /// characters: the short ids show ends), an idempotency key, or text in the payload or
    /// last error
    #[arg(long, value_name = "TEXT")]
    pub find: Option<String>,
}

/// A like-pattern's own `%`, `_` and `\` matched literally.
fn like_escaped(t: &str) -> String {
    t.replace('\\', "\\\\")
        .replace('%', "\\%")
        .replace('_', "\\_")
}

/// Whether the text is a whole UUID (36 characters, hex digits and dashes).
fn whole_uuid(t: &str) -> bool {
    t.len() == 36 && t.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-')
}

/// Whether the text can be the start or the end of an id (the short ids show ends).
fn id_part(t: &str) -> bool {
    (4..36).contains(&t.len()) && t.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-')
}

pub type Param = Box<dyn ToSql + Sync + Send>;

/// SQL conditions and their parameters, numbered from $1.
#[derive(Default)]
pub struct Where {
    pub conditions: Vec<String>,
    pub params: Vec<Param>,
}

impl Where {
    /// The next parameter's placeholder (`$n`) for this value.
    pub fn param(&mut self, value: Param) -> String {
        self.params.push(value);
        format!("${}", self.params.len())
    }

    /// Adds a condition whose `$?` is the next parameter.
    pub fn add(&mut self, condition: &str, value: Param) {
        let placeholder = self.param(value);
        self.conditions.push(condition.replace("$?", &placeholder));
    }

    /// ` where a and b`, or nothing.
    pub fn sql(&self) -> String {
        if self.conditions.is_empty() {
            String::new()
        } else {
            format!(" where {}", self.conditions.join(" and "))
        }
    }

    pub fn refs(&self) -> Vec<&(dyn ToSql + Sync)> {
        self.params
            .iter()
            .map(|p| p.as_ref() as &(dyn ToSql + Sync))
            .collect()
    }
}

impl Filters {
    pub fn is_empty(&self) -> bool {
        self.queue.is_none()
            && self.state.is_empty()
            && self.name.is_none()
            && self.tenant.is_none()
            && self.since.is_none()
            && self.error_like.is_none()
            && self.text.is_none()
            && self.error.is_none()
            && self.tags.is_empty()
            && self.find.is_none()
    }

    /// The conditions on `jobs.jobs as j`; `states` narrows --state to those an action takes.
    pub fn conditions(&self, states: Option<&[&str]>) -> Where {
        let mut w = Where::default();
        if let Some(q) = &self.queue {
            w.add("j.queue = $?", Box::new(q.clone()));
        }
        let mut wanted: Vec<String> = self.state.clone();
        if let Some(allowed) = states {
            if wanted.is_empty() {
                wanted = allowed.iter().map(|s| s.to_string()).collect();
            } else {
                wanted.retain(|s| allowed.contains(&s.as_str()));
            }
        }
        if !wanted.is_empty() || states.is_some() {
            // Written out, not a parameter: a state list the planner sees can use the partial
            // indexes of live and of finished jobs (a parameter cast to the enum is not folded,
            // and a million finished rows were read in full). Only the names of STATES are
            // written, never the text given.
            let listed: Vec<String> = STATES
                .iter()
                .filter(|s| wanted.iter().any(|w| w == *s))
                .map(|s| format!("'{s}'"))
                .collect();
            w.conditions.push(if listed.is_empty() {
                "false".to_string()
            } else {
                format!("j.state in ({})", listed.join(", "))
            });
        }
        if let Some(n) = &self.name {
            w.add("j.name = $?", Box::new(n.clone()));
        }
        if let Some(t) = &self.tenant {
            w.add("j.tenant_id = $?", Box::new(t.clone()));
        }
        if let Some(s) = &self.since {
            w.add(
                "coalesce(j.finished_at, j.enqueued_at) >= jobs.clock() - $?::text::interval",
                Box::new(s.clone()),
            );
        }
        if let Some(p) = &self.error_like {
            let pattern = if p.contains('%') {
                p.clone()
            } else {
                format!("%{p}%")
            };
            w.add("j.last_error ilike $?", Box::new(pattern));
        }
        if let Some(e) = &self.error {
            w.add("j.last_error = $?", Box::new(e.clone()));
        }
        if !self.tags.is_empty() {
            // By jobs_tags_idx (a GIN index of the tagged jobs).
            w.add("j.tags @> $?::text[]", Box::new(self.tags.clone()));
        }
        if let Some(t) = &self.text {
            // A contains-match: the text's own % and _ are matched literally.
            w.add(
                "(j.payload::text ilike $? or j.last_error ilike $?)",
                Box::new(format!("%{}%", like_escaped(t))),
            );
        }
        if let Some(t) = self.find.as_deref().map(str::trim) {
            let exact = w.param(Box::new(t.to_string()));
            let contains = w.param(Box::new(format!("%{}%", like_escaped(t))));
            let mut arms = vec![
                format!("j.idempotency_key = {exact}"),
                format!("j.payload::text ilike {contains}"),
                format!("j.last_error ilike {contains}"),
            ];
            if whole_uuid(t) {
                arms.push(format!("j.id = {exact}::text::uuid"));
                arms.push(format!("j.run_id = {exact}::text::uuid"));
            } else if id_part(t) {
                let t = t.to_ascii_lowercase();
                let start = w.param(Box::new(format!("{t}%")));
                let end = w.param(Box::new(format!("%{t}")));
                arms.push(format!("j.id::text like {start}"));
                arms.push(format!("j.id::text like {end}"));
            }
            w.conditions.push(format!("({})", arms.join(" or ")));
        }
        w
    }
}
