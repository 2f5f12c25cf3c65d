//! The jobs that finished in a recent span, as the overview's wait, its per-hour chart and
//! the workers read them: through jobs_finished_idx, whose rows are ordered by state, then
//! roots apart from children, then finish time. So the span is read as two index ranges, roots
//! (`(parent_id is null) = true`) and children (`< true`: `= false` is rewritten as a NOT, which
//! no index condition takes), each from `now()` back: a stable function, whose value the
//! planner estimates with (with jobs.clock(), which is volatile, it guessed a third of a million
//! finished rows and read them all).

/// `(select COLUMNS ... roots ...) union all (select COLUMNS ... children ...)` over `jobs.jobs
/// as j`: the jobs in `states` (SQL, e.g. `'completed', 'dead'`) that finished within `span`
/// (an interval's text) of now, each branch with `more` (further conditions, each starting
/// `and`) and ending with `tail` (an order and a limit, or nothing).
pub fn recent(columns: &str, states: &str, span: &str, more: &str, tail: &str) -> String {
    let branch = |root: &str| {
        format!(
            "(select {columns} from jobs.jobs as j
              where j.state in ({states}) and (j.parent_id is null) {root}
                and j.finished_at > now() - interval '{span}'{more}{tail})"
        )
    };
    format!("{}\n union all\n {}", branch("= true"), branch("< true"))
}
