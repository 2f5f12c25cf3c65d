//! `pgjobs status`: each queue's jobs per state, its oldest ready job's wait and whether it is
//! paused (`jobs.queue_stats()`), and what happened to its jobs (`jobs.outcome_stats()`: since
//! the server started, or per minute between two looks with --watch; empty without preload).

use crate::output::{self, Row};
use anyhow::Result;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::time::{Duration, Instant};
use tokio_postgres::Client;

const QUEUES: &str = "select row_to_json(x) from (
  select s.queue, s.paused, s.ready, s.delayed, s.running, s.suspended, s.completed, s.failed,
         s.dead, s.cancelled, date_trunc('second', s.oldest_ready_age) as oldest_ready
  from jobs.queue_stats() as s order by s.queue) as x";

const OUTCOMES: &str = "select row_to_json(x) from (
  select o.queue, o.completed, o.retried, o.dead, o.failed, o.cancelled, o.timed_out,
         o.lease_lapsed, date_trunc('second', o.since) as since
  from jobs.outcome_stats() as o order by o.queue) as x";

pub async fn status(
    client: &Client,
    watch: Option<u64>,
    count: Option<u64>,
    json: bool,
) -> Result<()> {
    let mut before: Option<(Instant, HashMap<String, Row>)> = None;
    let mut shown = 0u64;
    loop {
        let queues = output::rows(client, QUEUES, &[]).await?;
        let outcomes = output::rows(client, OUTCOMES, &[]).await?;
        let now = Instant::now();
        let rates = before
            .as_ref()
            .map(|(at, earlier)| per_minute(&outcomes, earlier, now - *at));
        print(&queues, &outcomes, rates.as_deref(), watch.is_some(), json);
        shown += 1;
        let Some(secs) = watch else { return Ok(()) };
        if count.is_some_and(|n| shown >= n) {
            return Ok(());
        }
        let by_queue = outcomes
            .into_iter()
            .filter_map(|r| Some((r.get("queue")?.as_str()?.to_string(), r)))
            .collect();
        before = Some((now, by_queue));
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(secs.max(1))) => {}
            _ = tokio::signal::ctrl_c() => return Ok(()),
        }
    }
}

/// Each queue's counters' growth between two looks, per minute.
fn per_minute(now: &[Row], earlier: &HashMap<String, Row>, elapsed: Duration) -> Vec<Row> {
    let minutes = elapsed.as_secs_f64() / 60.0;
    now.iter()
        .filter_map(|r| {
            let queue = r.get("queue")?.as_str()?;
            let mut rate = Row::new();
            rate.insert("queue".into(), Value::String(queue.to_string()));
            // Every counter of the row (the numbers; not the queue, nor since).
            for (c, v) in r.iter().filter(|(_, v)| v.is_i64()) {
                let delta = v.as_i64()?
                    - earlier
                        .get(queue)
                        .and_then(|e| e.get(c)?.as_i64())
                        .unwrap_or(0);
                rate.insert(
                    format!("{c}/min"),
                    json!((delta as f64 / minutes * 10.0).round() / 10.0),
                );
            }
            Some(rate)
        })
        .collect()
}

fn print(queues: &[Row], outcomes: &[Row], rates: Option<&[Row]>, watching: bool, json: bool) {
    if json {
        let mut doc = json!({"queues": queues, "outcomes": outcomes});
        if let Some(r) = rates {
            doc["per_minute"] = json!(r);
        }
        // One document per look: a line each while watching.
        println!(
            "{}",
            if watching {
                output::json_line(&doc)
            } else {
                output::json(&doc)
            }
        );
        return;
    }
    if watching {
        print!("\x1b[2J\x1b[H");
    }
    println!("queues:\n{}", output::table(queues, 40));
    match (rates, outcomes.is_empty()) {
        (_, true) => {
            println!("\noutcomes: none counted (they need shared_preload_libraries = 'pg_jobs')")
        }
        (Some(r), false) => println!(
            "\noutcomes per minute since the last look:\n{}",
            output::table(r, 40)
        ),
        (None, false) => println!(
            "\noutcomes since the server started:\n{}",
            output::table(outcomes, 40)
        ),
    }
}
