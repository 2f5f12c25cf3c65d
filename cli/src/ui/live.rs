//! The overview's live parts: the last hour of outcomes per minute (sampled from
//! `jobs.outcome_stats()`, which needs preload), `pg_jobs_dead` notifications, and the
//! server-sent events that carry both, with fresh counts, to open overview pages.

use super::{pages, render, App};
use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::{Stream, StreamExt};
use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio_postgres::AsyncMessage;

/// How often the counters are read, and the open pages refreshed.
const SAMPLE: Duration = Duration::from_secs(5);
const REFRESH: Duration = Duration::from_secs(2);

/// Completed, retried and dead jobs per minute, all queues together, the last 60 minutes.
#[derive(Default)]
pub struct History {
    pub minutes: VecDeque<(u64, [i64; 3])>,
    last: Option<[i64; 3]>,
}

impl History {
    fn add(&mut self, minute: u64, totals: [i64; 3]) {
        // Counters restart with the server: a total that fell starts over from it.
        let delta = match self.last {
            Some(last) if totals.iter().zip(last).all(|(t, l)| *t >= l) => [
                totals[0] - last[0],
                totals[1] - last[1],
                totals[2] - last[2],
            ],
            _ => [0; 3],
        };
        self.last = Some(totals);
        match self.minutes.back_mut() {
            Some((m, counts)) if *m == minute => {
                for (c, d) in counts.iter_mut().zip(delta) {
                    *c += d;
                }
            }
            _ => self.minutes.push_back((minute, delta)),
        }
        while self.minutes.front().is_some_and(|(m, _)| *m + 60 <= minute) {
            self.minutes.pop_front();
        }
    }
}

fn minute_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() / 60)
        .unwrap_or(0)
}

/// Reads the outcome counters every SAMPLE into the history, for as long as the server runs;
/// a database error skips a sample.
pub async fn sample(app: Arc<App>) {
    loop {
        if let Ok(db) = app.db().await {
            let totals = db
                .query_one(
                    "select coalesce(sum(completed), 0)::bigint, coalesce(sum(retried), 0)::bigint,
                            coalesce(sum(dead), 0)::bigint from jobs.outcome_stats()",
                    &[],
                )
                .await;
            if let Ok(row) = totals {
                let t = [row.get(0), row.get(1), row.get(2)];
                app.history.lock().expect("history").add(minute_now(), t);
            }
        }
        tokio::time::sleep(SAMPLE).await;
    }
}

/// LISTEN pg_jobs_dead on a connection of its own, made again (after a pause that doubles up
/// to a minute) whenever it is lost; each payload goes to the open overview pages.
pub async fn listen(app: Arc<App>) {
    let mut pause = Duration::from_secs(1);
    loop {
        if let Ok((client, mut connection)) = app.config.connect(app.tls.clone()).await {
            let deaths = app.deaths.clone();
            let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
            let driver = tokio::spawn(async move {
                while let Some(Ok(message)) = messages.next().await {
                    if let AsyncMessage::Notification(n) = message {
                        let _ = deaths.send(n.payload().to_string());
                    }
                }
            });
            if client.batch_execute("listen pg_jobs_dead").await.is_ok() {
                pause = Duration::from_secs(1);
            }
            let _ = driver.await;
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(60));
    }
}

/// The overview's events: `overview` (the queues and the chart, as HTML) every REFRESH and at
/// each death, and `dead` (the notification's payload, shown as text).
pub async fn events(
    State(app): State<Arc<App>>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let deaths = app.deaths.subscribe();
    let ticks = tokio::time::interval(REFRESH);
    let stream = futures_util::stream::unfold(
        (app, deaths, ticks),
        |(app, mut deaths, mut ticks)| async move {
            let event = tokio::select! {
                _ = ticks.tick() => Event::default().event("overview").data(render::event_data(pages::live_part(&app).await)),
                died = deaths.recv() => match died {
                    Ok(payload) => Event::default().event("dead").data(payload.replace(['\r', '\n'], " ")),
                    Err(_) => Event::default().event("overview").data(render::event_data(pages::live_part(&app).await)),
                },
            };
            Some((Ok(event), (app, deaths, ticks)))
        },
    );
    Sse::new(stream).keep_alive(KeepAlive::default())
}

#[cfg(test)]
mod tests {
    use super::History;

    #[test]
    fn history_counts_growth_per_minute_and_keeps_an_hour() {
        let mut h = History::default();
        h.add(100, [10, 1, 0]);
        h.add(100, [15, 1, 2]);
        h.add(101, [16, 3, 2]);
        h.add(101, [4, 0, 0]); // the server restarted: start over
        assert_eq!(
            h.minutes.iter().copied().collect::<Vec<_>>(),
            [(100, [5, 0, 2]), (101, [1, 2, 0])]
        );
        h.add(161, [5, 0, 0]);
        assert_eq!(h.minutes.front().map(|m| m.0), Some(161));
    }
}
