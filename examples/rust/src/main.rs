//! A pg_jobs worker in Rust with tokio-postgres.
//!
//!   cargo run --release -- --dsn "host=... dbname=..." [--queue default] [--batch 10]
//!                          [--lease 30] [--poll 5] [--until-empty] [--quiet]
//!
//! Claims in batches, heartbeats held jobs every lease/3 on its own connection, runs each
//! handler and jobs.complete in ONE transaction (rolled back when complete answers false),
//! reports failures with jobs.fail, sleeps on LISTEN pg_jobs with a polling fallback, and on
//! SIGTERM or SIGINT stops claiming, finishes what it holds, and exits 0.

use std::collections::HashMap;
use std::error::Error;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::{stream, StreamExt};
use serde_json::{json, Value};
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::Notify;
use tokio_postgres::{AsyncMessage, Client, NoTls, Transaction};
use uuid::Uuid;

struct Job {
    id: Uuid,
    claim: i64,
    name: String,
    payload: Value,
    attempt: i32,
    max_attempts: i32,
}

/// The handlers: each runs inside the transaction that completes its job.
async fn handle(tx: &Transaction<'_>, job: &Job) -> Result<Value, String> {
    match job.name.as_str() {
        "record" => {
            tx.execute(
                "insert into example_log (job_id, worker, payload) values ($1, $2, $3)",
                &[&job.id, &"rust", &job.payload],
            )
            .await
            .map_err(|e| e.to_string())?;
            Ok(json!({ "recorded": true }))
        }
        "sleep" => {
            let seconds = job
                .payload
                .get("seconds")
                .and_then(Value::as_f64)
                .unwrap_or(1.0);
            tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
            Ok(json!({ "slept": seconds }))
        }
        "fail" => Err(job
            .payload
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("this job always fails")
            .to_string()),
        other => Err(format!("no handler for job {other:?}")),
    }
}

struct Args {
    dsn: String,
    queues: Vec<String>,
    batch: i32,
    lease: f64,
    poll: f64,
    until_empty: bool,
    quiet: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        dsn: std::env::var("PG_JOBS_DSN").unwrap_or_default(),
        queues: vec![],
        batch: 10,
        lease: 30.0,
        poll: 5.0,
        until_empty: false,
        quiet: false,
    };
    let mut argv = std::env::args().skip(1);
    while let Some(flag) = argv.next() {
        let mut value = || argv.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--until-empty" => args.until_empty = true,
            "--quiet" => args.quiet = true,
            "--dsn" => args.dsn = value()?,
            "--queue" => args.queues.push(value()?),
            "--batch" => args.batch = value()?.parse().map_err(|e| format!("--batch: {e}"))?,
            "--lease" => args.lease = value()?.parse().map_err(|e| format!("--lease: {e}"))?,
            "--poll" => args.poll = value()?.parse().map_err(|e| format!("--poll: {e}"))?,
            _ => return Err(format!("unknown argument {flag}")),
        }
    }
    if args.queues.is_empty() {
        args.queues.push("default".into());
    }
    Ok(args)
}

/// Connects, and drives the connection on a task of its own; notifications on a queue we
/// work wake `wake`.
async fn connect(
    dsn: &str,
    wake: Option<(Vec<String>, Arc<Notify>)>,
) -> Result<Client, tokio_postgres::Error> {
    let (client, mut connection) = tokio_postgres::connect(dsn, NoTls).await?;
    tokio::spawn(async move {
        let mut messages = stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(message) = messages.next().await {
            match message {
                Ok(AsyncMessage::Notification(n)) => {
                    if let Some((queues, notify)) = &wake {
                        if queues.iter().any(|q| q == n.payload()) {
                            notify.notify_one();
                        }
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    eprintln!("connection lost: {e}");
                    break;
                }
            }
        }
    });
    Ok(client)
}

/// One job: handler and complete in one transaction; a failure rolls back and is reported.
async fn run_job(client: &mut Client, job: &Job) -> Result<String, tokio_postgres::Error> {
    let tx = client.transaction().await?;
    let attempt = async {
        let result = handle(&tx, job).await?;
        let landed: bool = tx
            .query_one(
                "select jobs.complete($1, $2, $3)",
                &[&job.id, &job.claim, &result],
            )
            .await
            .map_err(|e| e.to_string())?
            .get(0);
        Ok::<bool, String>(landed)
    }
    .await;
    match attempt {
        Ok(true) => {
            tx.commit().await?;
            Ok("completed".into())
        }
        Ok(false) => {
            tx.rollback().await?; // the claim was lost: undo this job's writes
            Ok("lost its claim".into())
        }
        Err(message) => {
            tx.rollback().await?;
            let outcome: Option<String> = client
                .query_one(
                    "select jobs.fail($1, $2, $3)",
                    &[&job.id, &job.claim, &message],
                )
                .await?
                .get(0);
            Ok(outcome.unwrap_or_else(|| "lost its claim".into()))
        }
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn Error>> {
    let args = parse_args()?;
    let worker_id = format!("rust:{}", std::process::id());
    let wake = Arc::new(Notify::new());
    let stopping = Arc::new(AtomicBool::new(false));

    let mut client = connect(&args.dsn, None).await?;
    let beat_client = connect(&args.dsn, None).await?;
    let listener = connect(&args.dsn, Some((args.queues.clone(), wake.clone()))).await?;
    listener.batch_execute("listen pg_jobs").await?;

    for kind in [SignalKind::terminate(), SignalKind::interrupt()] {
        let mut signals = signal(kind)?;
        let (stopping, wake) = (stopping.clone(), wake.clone());
        tokio::spawn(async move {
            signals.recv().await;
            stopping.store(true, Ordering::SeqCst);
            wake.notify_one();
        });
    }

    // Held jobs (id -> claim token), heartbeated every lease/3 on their own connection.
    let held: Arc<Mutex<HashMap<Uuid, i64>>> = Arc::default();
    let beats = {
        let held = held.clone();
        let period = Duration::from_secs_f64(args.lease / 3.0);
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(period);
            loop {
                ticks.tick().await;
                let now_held: Vec<(Uuid, i64)> =
                    held.lock().unwrap().iter().map(|(k, v)| (*k, *v)).collect();
                for (id, claim) in now_held {
                    let _ = beat_client
                        .execute("select jobs.heartbeat($1, $2)", &[&id, &claim])
                        .await;
                }
            }
        })
    };

    while !stopping.load(Ordering::SeqCst) {
        let jobs: Vec<Job> = client
            .query(
                "select id, claim, name, payload, attempt, max_attempts \
                 from jobs.claim($1, $2, $3, make_interval(secs => $4))",
                &[&worker_id, &args.queues, &args.batch, &args.lease],
            )
            .await?
            .iter()
            .map(|r| Job {
                id: r.get(0),
                claim: r.get(1),
                name: r.get(2),
                payload: r.get(3),
                attempt: r.get(4),
                max_attempts: r.get(5),
            })
            .collect();
        held.lock()
            .unwrap()
            .extend(jobs.iter().map(|j| (j.id, j.claim)));
        for job in &jobs {
            // A SIGTERM now still lets the batch finish.
            let outcome = run_job(&mut client, job).await?;
            held.lock().unwrap().remove(&job.id);
            if !args.quiet {
                println!(
                    "  {:13} attempt {}/{}: {outcome}",
                    job.name, job.attempt, job.max_attempts
                );
            }
        }
        if !jobs.is_empty() {
            continue;
        }
        if args.until_empty {
            let live: i64 = client
                .query_one(
                    "select count(*) from jobs.jobs where queue = any($1) \
                     and state in ('ready', 'delayed', 'running', 'suspended')",
                    &[&args.queues],
                )
                .await?
                .get(0);
            if live == 0 {
                break;
            }
        }
        // Idle: sleep until a wake-up on our queues, a signal, or the poll interval.
        tokio::select! {
            _ = wake.notified() => {}
            _ = tokio::time::sleep(Duration::from_secs_f64(args.poll)) => {}
        }
    }
    beats.abort();
    Ok(())
}
