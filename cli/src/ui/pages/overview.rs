//! The overview: each queue's live and finished counts, and the chart of the last hour; the part
//! that live events replace.

use super::*;

/// The live counts, read at every refresh: the view computes only the columns selected, each
/// from the partial index of its state.
pub(super) const LIVE: &str = "select row_to_json(x) from (
  select s.queue, s.paused, s.ready, s.delayed, s.running, s.suspended,
         date_trunc('second', s.oldest_ready_age) as oldest_ready
  from jobs.queue_stats as s order by s.queue) as x";

/// The finished counts read the index of finished rows, whose cost grows with the history
/// kept: read at most every FINISHED_EVERY, for every open page at once, in one pass over the
/// index (jobs_finished_idx holds the queue) rather than one per queue and state.
pub(super) const FINISHED: &str = "select row_to_json(x) from (
  select j.queue, count(*) filter (where j.state = 'completed') as completed,
         count(*) filter (where j.state = 'failed') as failed,
         count(*) filter (where j.state = 'dead') as dead,
         count(*) filter (where j.state = 'cancelled') as cancelled
  from jobs.jobs as j where j.state in ('completed', 'failed', 'dead', 'cancelled')
  group by j.queue) as x";
/// The same for a role that may not read jobs.jobs (a monitor): one pass per queue and state.
pub(super) const FINISHED_MONITOR: &str = "select row_to_json(x) from (
  select s.queue, s.completed, s.failed, s.dead, s.cancelled from jobs.queue_stats() as s) as x";
pub(super) const FINISHED_EVERY: std::time::Duration = std::time::Duration::from_secs(30);

/// Per queue, how long jobs waited from due (run_at) to their start (the last attempt's claim):
/// the median over the last 1,000 roots and 1,000 children that completed in the last 5
/// minutes, each read backwards (as crate::finished::recent reads them). Read with the finished counts, by a role that may read the jobs.
pub(super) static WAITED: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "select row_to_json(x) from (
  select w.queue, percentile_cont(0.5) within group (order by w.waited) as waited
  from ({}) as w
  group by w.queue) as x",
        crate::finished::recent(
            "j.queue, greatest(extract(epoch from j.claimed_at - j.run_at), 0) as waited",
            "'completed'",
            "5 minutes",
            " and j.claimed_at is not null",
            " order by j.finished_at desc limit 1000"
        )
    )
});

pub(super) fn finished_age(app: &App) -> Option<u64> {
    app.finished
        .lock()
        .expect("finished")
        .as_ref()
        .map(|(at, _)| at.elapsed().as_secs())
}

/// After an action the finished counts are read again at the next look.
pub(super) fn forget_finished(app: &App) {
    *app.finished.lock().expect("finished") = None;
    if let Ok(mut live) = app.live.try_lock() {
        *live = None;
    }
}

pub(super) async fn finished_counts(
    app: &App,
    db: &tokio_postgres::Client,
) -> anyhow::Result<HashMap<String, Row>> {
    if let Some((at, counts)) = app.finished.lock().expect("finished").as_ref() {
        if at.elapsed() < FINISHED_EVERY {
            return Ok(counts.clone());
        }
    }
    let rows = match output::rows(db, FINISHED, &[]).await {
        Err(e) if output::sqlstate(&e) == Some(&SqlState::INSUFFICIENT_PRIVILEGE) => {
            output::rows(db, FINISHED_MONITOR, &[]).await?
        }
        other => other?,
    };
    let mut counts: HashMap<String, Row> = rows
        .into_iter()
        .map(|r| (render::text(&r, "queue"), r))
        .collect();
    let waited = match output::rows(db, &WAITED, &[]).await {
        Err(e) if output::sqlstate(&e) == Some(&SqlState::INSUFFICIENT_PRIVILEGE) => Vec::new(),
        other => other?,
    };
    for w in waited {
        if let Some(row) = counts.get_mut(&render::text(&w, "queue")) {
            row.insert(
                "waited".into(),
                w.get("waited").cloned().unwrap_or(Value::Null),
            );
        }
    }
    *app.finished.lock().expect("finished") = Some((std::time::Instant::now(), counts.clone()));
    Ok(counts)
}

pub async fn overview(State(app): State<Arc<App>>, RawQuery(raw): RawQuery) -> Page {
    let q = pairs(raw.as_deref());
    let hours = RANGES
        .iter()
        .find(|(h, _)| get(&q, "hours") == h.to_string())
        .map_or(RANGES[0].0, |(h, _)| *h);
    let body = html! {
        div #notices aria-live="polite" {}
        section #live { (live_part(&app).await) }
        section #hours {
            h2 { "Longer" }
            nav.ranges {
                @for (h, name) in RANGES {
                    @if h == hours { strong { (name) } } @else { a href={ "/?hours=" (h) } { (name) } }
                    " "
                }
            }
            (hours_chart(&app, hours).await)
        }
    };
    ok(&app, "Overview", body)
}

/// The queues and the chart: the overview's part that live events replace.
pub async fn live_part(app: &App) -> Markup {
    // Every open page's events share one look per LIVE_EVERY: a thousand open connections
    // cost the database what one does.
    let mut cached = app.live.lock().await;
    if let Some((at, html)) = cached.as_ref() {
        if at.elapsed() < LIVE_EVERY {
            return maud::PreEscaped(html.clone());
        }
    }
    let fresh = look(app).await;
    *cached = Some((std::time::Instant::now(), fresh.0.clone()));
    fresh
}

pub(super) const LIVE_EVERY: std::time::Duration = std::time::Duration::from_millis(1500);

pub(super) async fn look(app: &App) -> Markup {
    let counts = async {
        let db = app.db().await?;
        let mut queues = output::rows(&db, LIVE, &[]).await?;
        let finished = finished_counts(app, &db).await?;
        for q in &mut queues {
            let f = finished.get(&render::text(q, "queue"));
            for state in ["completed", "failed", "dead", "cancelled"] {
                let count = f
                    .and_then(|f| f.get(state))
                    .cloned()
                    .unwrap_or(Value::from(0));
                q.insert(state.into(), count);
            }
            let waited = f.and_then(|f| f.get("waited")).cloned();
            q.insert("waited".into(), waited.unwrap_or(Value::Null));
        }
        let lapsed = lapsed_notice(&db).await?;
        anyhow::Ok((queues, lapsed))
    };
    let (queues, lapsed) = match counts.await {
        Ok(q) => q,
        Err(e) => return render::error(&e),
    };
    let (chart, rates): (Markup, Vec<Option<f64>>) = {
        let history = app.history.lock().expect("history");
        let rates = queues
            .iter()
            .map(|q| history.completed_per_minute(&render::text(q, "queue")))
            .collect();
        (chart(&history), rates)
    };
    html! {
        (lapsed)
        div.scroll {
            table #queues {
                thead { tr {
                    th { "queue" } th { "ready" } th { "delayed" } th { "running" } th { "suspended" }
                    th { "completed" } th { "failed" } th { "dead" } th { "cancelled" }
                    th title="completed per minute over the last 5 minutes (outcome counters: needs preload)" { "completed / min" }
                    th title="the median time from due to started of the jobs completed in the last 5 minutes (the last 1,000)" { "waited" }
                    th { "oldest ready" }
                    th { "paused" } @if !app.read_only { th {} }
                } }
                tbody {
                    @for (q, rate) in queues.iter().zip(&rates) {
                        @let name = render::text(q, "queue");
                        @let paused = q.get("paused").and_then(Value::as_bool) == Some(true);
                        tr data-queue=(name) {
                            td { a href=(render::url("/jobs", &[("queue", &name)])) { (name) } }
                            @for state in ["ready", "delayed", "running", "suspended", "completed", "failed", "dead", "cancelled"] {
                                td.num { a href=(render::url("/jobs", &[("queue", &name), ("state", state)])) { (render::text(q, state)) } }
                            }
                            td.num.rate { @if let Some(r) = rate { (if *r >= 10.0 { format!("{r:.0}") } else { format!("{r:.1}") }) } }
                            td.waited { (waited(q.get("waited"))) }
                            td { (render::text(q, "oldest_ready")) }
                            td { @if paused { strong { "paused" } } @else { "no" } }
                            @if !app.read_only {
                                td {
                                    form method="post" action={ "/queues/" (render::segment(&name)) "/" (if paused { "resume" } else { "pause" }) } {
                                        (render::csrf(&app.csrf))
                                        button type="submit" { (if paused { "Resume" } else { "Pause" }) }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        @if let Some(age) = finished_age(app) {
            p.note { "Completed, failed, dead and cancelled as counted " (age) " s ago (every 30 s, and after each action here)." }
        }
        h2 { "The last hour" }
        (chart)
    }
}

/// Completed, retried and dead jobs per minute as stacked bars (an SVG drawn here).
pub(super) fn chart(h: &History) -> Markup {
    if h.minutes.is_empty() {
        return html! { p.none { "No outcomes counted yet (they need shared_preload_libraries = 'pg_jobs'; the chart fills as jobs end)." } };
    }
    let last = h.minutes.back().map(|m| m.0).unwrap_or(0);
    let max = h
        .minutes
        .iter()
        .map(|(_, c)| c.iter().sum::<i64>())
        .max()
        .unwrap_or(0)
        .max(1) as f64;
    let (width, height, bar) = (600.0, 120.0, 10.0);
    let totals: [i64; 3] = h
        .minutes
        .iter()
        .fold([0; 3], |t, (_, c)| [t[0] + c[0], t[1] + c[1], t[2] + c[2]]);
    let mut bars = Vec::new(); // (class, x, y, height), stacked from the bottom
    for (minute, counts) in &h.minutes {
        let x = width - (last - minute + 1) as f64 * bar;
        let mut y = height;
        for (i, class) in ["completed", "retried", "dead"].into_iter().enumerate() {
            let hgt = counts[i] as f64 / max * height;
            if hgt > 0.0 {
                bars.push((class, x, y - hgt, hgt));
                y -= hgt;
            }
        }
    }
    html! {
        svg.chart viewBox={ "0 0 " (width) " " (height + 14.0) } role="img"
            aria-label={ "jobs per minute over the last hour; in all: " (totals[0]) " completed, " (totals[1]) " retried, " (totals[2]) " dead" } {
            @for (class, x, y, hgt) in &bars {
                rect class=(class) x=(x) y=(y) width=(bar - 1.0) height=(hgt) {}
            }
            text x="0" y=(height + 12.0) { "60 min ago" }
            text x=(width) y=(height + 12.0) text-anchor="end" { "now" }
        }
        p.legend {
            span.completed { "completed " (totals[0]) } " · "
            span.retried { "retried " (totals[1]) } " · "
            span.dead { "dead " (totals[2]) }
            " in the last hour, all queues (a bar per minute; the busiest minute, " (max as i64) " jobs, is the full height)"
        }
    }
}

/// Seconds as a person reads a wait: ms under a second, then s, then min.
fn waited(v: Option<&Value>) -> String {
    match v.and_then(Value::as_f64) {
        None => String::new(),
        Some(s) if s < 1.0 => format!("{:.0} ms", s * 1000.0),
        Some(s) if s < 120.0 => format!("{s:.1} s"),
        Some(s) => format!("{:.0} min", s / 60.0),
    }
}
