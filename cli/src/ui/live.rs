//! The overview's live parts: the last hour of outcomes per minute (sampled from
//! `jobs.outcome_stats()`, which needs preload), `pg_jobs_dead` notifications, and the
//! server-sent events that carry both, with fresh counts, to open overview pages.

use super::{pages, render, App};
use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::{Stream, StreamExt};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio_postgres::AsyncMessage;

/// How often the counters are read, and the open pages refreshed.
const SAMPLE: Duration = Duration::from_secs(5);
const REFRESH: Duration = Duration::from_secs(2);

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
            // (The row of a NULL queue counts a database's queues past its share of slots.)
            let rows = db
                .query(
                    "select s.queue, s.completed, s.retried, s.dead from jobs.outcome_stats() as s",
                    &[],
                )
                .await;
            if let Ok(rows) = rows {
                let mut totals = [0i64; 3];
                let mut queues = Vec::new();
                for row in &rows {
                    for (i, t) in totals.iter_mut().enumerate() {
                        *t += row.get::<_, i64>(i + 1);
                    }
                    if let Some(queue) = row.get::<_, Option<String>>(0) {
                        queues.push((queue, row.get::<_, i64>(1)));
                    }
                }
                let second = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs());
                let mut history = app.history.lock().expect("history");
                history.add(minute_now(), totals);
                history.add_queues(second, &queues);
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
