//! A job's run as one timeline: its enqueue, each attempt that did not complete (with its
//! duration, worker and error), its steps, the children it spawned (key and state), what it
//! waits for, and its end or its current attempt, in the order they happened.

use super::*;

/// One moment of the run: when (text as the database gave it, to the second), what order it
/// takes among moments of the same second (the order a run goes through: enqueued, attempts
/// that ended, the current one, its steps, its children, what it waits for, its end), and what
/// it says.
struct Moment {
    at: String,
    rank: u8,
    said: Markup,
}

fn at(r: &Row, k: &str) -> Option<String> {
    r.get(k).and_then(Value::as_str).map(str::to_string)
}

fn took(r: &Row) -> Markup {
    match r.get("took").and_then(Value::as_str) {
        Some(t) => html! { " (" (t) ")" },
        None => html! {},
    }
}

/// The timeline of the job, from the page of attempts, steps and children its page read.
pub(super) fn timeline(job: &Row, attempts: &[Row], steps: &[Row], children: &[Row]) -> Markup {
    let mut moments: Vec<Moment> = Vec::new();
    let mut add = |at: Option<String>, rank: u8, said: Markup| {
        if let Some(at) = at {
            moments.push(Moment { at, rank, said });
        }
    };
    add(
        at(job, "enqueued_at"),
        0,
        html! { strong { "enqueued" } @if let Some(by) = at(job, "enqueued_by") { " by " (by) } },
    );
    for a in attempts {
        add(
            at(a, "claimed_at"),
            1,
            html! {
                strong { "attempt " (render::text(a, "attempt")) } " claimed by " (render::text(a, "worker"))
                ": " span class={ "state " (render::text(a, "outcome")) } { (render::text(a, "outcome")) }
                @if a.get("finished_at").is_some_and(|t| !t.is_null()) { " at " (render::time(a, "finished_at")) }
                (took(a))
                @if a.get("error").is_some_and(|e| !e.is_null()) { pre { (render::text(a, "error")) } }
            },
        );
    }
    for s in steps {
        let state = render::text(s, "state");
        add(
            at(s, "started_at").or_else(|| at(s, "saved_at")),
            3,
            html! {
                "step " strong { (render::text(s, "step")) } " "
                span class={ "state " (state) } { (state) } (took(s))
                @if state == "failed" { pre { (render::text(s, "error")) } }
            },
        );
    }
    for c in children
        .iter()
        .filter(|c| c.get("depth").and_then(Value::as_i64) == Some(1))
    {
        let id = render::text(c, "id");
        let state = render::text(c, "state");
        add(
            at(c, "enqueued_at"),
            4,
            html! {
                "spawned " a href={ "/jobs/" (id) } { (render::text(c, "name")) }
                @if let Some(k) = at(c, "key") { " " code { (k) } }
                " " span class={ "state " (state) } { (state) }
            },
        );
    }
    let state = render::text(job, "state");
    let claimed = at(job, "claimed_at");
    if claimed.is_some() && !(state == "ready" || state == "delayed") {
        add(
            claimed,
            2,
            // A parked job (snoozed, waiting) got its attempt back: its claim is not one.
            html! {
                @if state == "suspended" { "claimed by " (render::text(job, "claimed_by")) ", then parked" }
                @else {
                    strong { "attempt " (render::text(job, "attempt")) } " claimed by "
                    (render::text(job, "claimed_by"))
                    @if let Some(t) = at(job, "attempt_time") { " · " (t) @if state == "running" { " so far" } }
                }
            },
        );
    }
    if let Some(event) = at(job, "wait_event") {
        add(
            at(job, "updated_at").or_else(|| at(job, "claimed_at")),
            5,
            html! {
                "waits for "
                @if event == "pg_jobs.children" { "its children" }
                @else { "event " code { (event) } @if let Some(k) = at(job, "wait_key").filter(|k| !k.is_empty()) { " key " code { (k) } } }
                @if job.get("wait_until").is_some_and(|t| !t.is_null()) { " until " (render::time(job, "wait_until")) }
            },
        );
    } else if state == "ready" || state == "delayed" || state == "suspended" {
        add(
            at(job, "run_at"),
            5,
            html! { "due" @if state == "suspended" { " (snoozed)" } },
        );
    }
    if let Some(end) = at(job, "finished_at") {
        add(
            Some(end),
            6,
            html! { strong { "ended " span class={ "state " (state) } { (state) } }
            @if let Some(t) = at(job, "run_time") { " · " (t) " from enqueue" } },
        );
    }
    moments.sort_by(|a, b| a.at.cmp(&b.at).then(a.rank.cmp(&b.rank)));
    html! {
        ol.timeline {
            @for m in &moments {
                li { time datetime=(m.at) title=(m.at) { (m.at) } " · " (m.said) }
            }
        }
    }
}
