//! The overview's longer chart: completed, and failed or dead, jobs per hour over the last 24
//! hours or 7 days, counted from the finished rows (as crate::finished::recent reads them),
//! read at most every HOURS_EVERY for every open page. Retries are not rows: only the last hour's chart, from the outcome
//! counters, shows them.

use super::*;

pub(super) const HOURS_EVERY: std::time::Duration = std::time::Duration::from_secs(300);

/// The ranges offered, in hours, with their names.
pub(super) const RANGES: [(u32, &str); 2] = [(24, "24 hours"), (168, "7 days")];

fn per_hour(hours: u32) -> String {
    format!(
        "select row_to_json(x) from (
           select (extract(epoch from date_trunc('hour', f.finished_at)) / 3600)::bigint as hour,
                  count(*) filter (where f.state = 'completed') as completed,
                  count(*) filter (where f.state <> 'completed') as failed
           from ({}) as f
           group by 1) as x",
        crate::finished::recent(
            "j.state, j.finished_at",
            "'completed', 'failed', 'dead'",
            &format!("{hours} hours"),
            "",
            ""
        )
    )
}

/// The chart of the last `hours` (one of RANGES), as last drawn when that was less than
/// HOURS_EVERY ago.
pub(super) async fn hours_chart(app: &App, hours: u32) -> Markup {
    if let Some((at, html)) = app.hours.lock().expect("hours").get(&hours) {
        if at.elapsed() < HOURS_EVERY {
            return maud::PreEscaped(html.clone());
        }
    }
    let rows = match read(app, &per_hour(hours)).await {
        Ok(rows) => rows,
        Err(e) if output::sqlstate(&e) == Some(&SqlState::INSUFFICIENT_PRIVILEGE) => {
            return html! { p.none { "Counted from the finished jobs, which this role may not read." } }
        }
        Err(e) => return render::error(&e),
    };
    let now_hour = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() / 3600) as i64;
    let drawn = draw(&rows, now_hour, hours);
    app.hours
        .lock()
        .expect("hours")
        .insert(hours, (std::time::Instant::now(), drawn.0.clone()));
    drawn
}

fn draw(rows: &[Row], now_hour: i64, hours: u32) -> Markup {
    let count = |r: &Row, k: &str| r.get(k).and_then(Value::as_i64).unwrap_or(0);
    let hour_of = |r: &Row| r.get("hour").and_then(Value::as_i64).unwrap_or(0);
    let (completed, failed): (i64, i64) = rows.iter().fold((0, 0), |(c, f), r| {
        (c + count(r, "completed"), f + count(r, "failed"))
    });
    let max = rows
        .iter()
        .map(|r| count(r, "completed") + count(r, "failed"))
        .max()
        .unwrap_or(0)
        .max(1) as f64;
    let (width, height) = (600.0, 120.0);
    let bar = width / f64::from(hours);
    let name = RANGES
        .iter()
        .find(|(h, _)| *h == hours)
        .map_or("", |(_, n)| n);
    html! {
        svg.chart viewBox={ "0 0 " (width) " " (height + 14.0) } role="img"
            aria-label={ "jobs per hour over the last " (name) "; in all: " (completed) " completed, " (failed) " failed or dead" } {
            @for r in rows {
                @let x = width - (now_hour - hour_of(r) + 1) as f64 * bar;
                @let c = count(r, "completed") as f64 / max * height;
                @let f = count(r, "failed") as f64 / max * height;
                @if x >= 0.0 {
                    @if c > 0.0 { rect class="completed" x=(x) y=(height - c) width=(bar.max(1.5) - 0.5) height=(c) {} }
                    @if f > 0.0 { rect class="dead" x=(x) y=(height - c - f) width=(bar.max(1.5) - 0.5) height=(f) {} }
                }
            }
            text x="0" y=(height + 12.0) { (name) " ago" }
            text x=(width) y=(height + 12.0) text-anchor="end" { "now" }
        }
        p.legend {
            span.completed { "completed " (completed) } " · " span.dead { "failed or dead " (failed) }
            " in the last " (name) ", all queues, from the finished jobs kept (a bar per hour; the busiest hour, "
            (max as i64) " jobs, is the full height; retries show in the last hour's chart only)"
        }
    }
}
