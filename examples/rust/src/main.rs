//! A pg_jobs worker in Rust with tokio-postgres.
//!
//!   cargo run --release -- --dsn "host=... dbname=..." [--queue default] [--batch 10]
//!                          [--lease 30] [--poll 5] [--until-empty] [--quiet]
//!
//! Runs up to --batch jobs at once, each on a task and a connection of its own, and claims
//! more as soon as one finishes: a slow job never holds back the others. Heartbeats held jobs
//! every lease/3 on its own connection, made again when it fails; a heartbeat answering NULL
//! (the claim is lost) tells the job's handler to stop, and a job named on pg_jobs_cancel (a
//! LISTEN connection of its own) is heartbeaten at once, so a cancelled job's handler stops
//! within moments; a handler stops at its attempt's deadline too (a timeout). Runs each handler and its completion in
//! ONE transaction, which also claims the job's successor for the same task
//! (jobs.complete_and_claim: one commit per job; rolled back when it raises lease_lost),
//! reports failures with jobs.fail, snoozes a job whose name has no handler (no attempt used),
//! and waits for work in the server (jobs.claim with wait: no LISTEN connection, so it works
//! through a transaction-pooling PgBouncer). On SIGTERM or SIGINT it cancels a claim that waits, stops claiming, finishes what
//! it holds, and exits 0.

use std::collections::HashMap;
use std::error::Error;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::{mpsc, watch, Notify};
use tokio::task::JoinSet;
use tokio_postgres::error::SqlState;
use tokio_postgres::{AsyncMessage, Client, NoTls, Row, Transaction};
use uuid::Uuid;

struct Job {
    id: Uuid,
    claim: i64,
    name: String,
    payload: Value,
    attempt: i32,
    max_attempts: i32,
    /// Becomes true when the claim is lost: a long handler should stop.
    stop: watch::Receiver<bool>,
    /// The attempt's deadline (its job type's timeout), if any: a handler should stop then too.
    deadline: Option<tokio::time::Instant>,
}

impl Job {
    /// A job a claim answered (its columns in CLAIMED's order), and the sender that stops it.
    fn from_row(r: &Row) -> (Job, watch::Sender<bool>) {
        let (tell, stop) = watch::channel(false);
        let job = Job {
            id: r.get(0),
            claim: r.get(1),
            name: r.get(2),
            payload: r.get(3),
            attempt: r.get(4),
            max_attempts: r.get(5),
            stop,
            deadline: r
                .get::<_, Option<f64>>(6)
                .map(|left| tokio::time::Instant::now() + Duration::from_secs_f64(left.max(0.0))),
        };
        (job, tell)
    }

    /// Resolves when the handler should stop: its claim was lost, or its deadline passed.
    async fn stopped(&self) -> &'static str {
        let mut stop = self.stop.clone();
        let deadline = async {
            match self.deadline {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = stop.wait_for(|lost| *lost) => "the claim was lost: stopped",
            _ = deadline => "its timeout passed: stopped",
        }
    }
}

/// time_left: seconds to the attempt's deadline, computed in the server; NULL for none.
const CLAIMED: &str = "id, claim, name, payload, attempt, max_attempts, \
                       extract(epoch from deadline - clock_timestamp())::float8 as time_left";

/// What to claim when a job completes: the worker, its queues, the lease.
struct Chain {
    worker: String,
    queues: Vec<String>,
    lease: f64,
}

/// The job names this worker has a handler for.
const HANDLED: [&str; 3] = ["record", "sleep", "fail"];

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
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_secs_f64(seconds)) => {}
                why = job.stopped() => return Err(why.into()),
            }
            tx.execute(
                "insert into example_log (job_id, worker, payload) values ($1, $2, $3)",
                &[&job.id, &"rust", &job.payload],
            )
            .await
            .map_err(|e| e.to_string())?;
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

/// Connects, and drives the connection on a task of its own.
async fn connect(dsn: &str) -> Result<Client, tokio_postgres::Error> {
    let (client, connection) = tokio_postgres::connect(dsn, NoTls).await?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            eprintln!("connection lost: {e}");
        }
    });
    Ok(client)
}

/// One job: handler and completion in one transaction; a failure rolls back and is reported.
/// With a chain, the completion also claims the job's successor in that transaction
/// (jobs.complete_and_claim: one commit per job), answered with the outcome.
async fn run_job(
    client: &mut Client,
    job: &Job,
    chain: Option<&Chain>,
) -> Result<(String, Option<Row>), tokio_postgres::Error> {
    if !HANDLED.contains(&job.name.as_str()) {
        // Not a failure: no attempt used; a worker that knows the name will run it.
        client
            .execute(
                "select jobs.snooze($1, $2, now() + interval '1 minute')",
                &[&job.id, &job.claim],
            )
            .await?;
        let snoozed = "no handler for this name here; snoozed for a minute (no attempt used)";
        return Ok((snoozed.into(), None));
    }
    let tx = client.transaction().await?;
    let mut next = None;
    let attempt = async {
        let result = handle(&tx, job).await?;
        let Some(chain) = chain else {
            let landed: bool = tx
                .query_one(
                    "select jobs.complete($1, $2, $3)",
                    &[&job.id, &job.claim, &result],
                )
                .await
                .map_err(|e| e.to_string())?
                .get(0);
            return Ok::<bool, String>(landed);
        };
        let sql = format!(
            "select {CLAIMED} from jobs.complete_and_claim(array[$1]::uuid[], \
             array[$2]::bigint[], $3, $4, 1, make_interval(secs => $5), array[$6]::jsonb[])"
        );
        let args: [&(dyn tokio_postgres::types::ToSql + Sync); 6] = [
            &job.id,
            &job.claim,
            &chain.worker,
            &chain.queues,
            &chain.lease,
            &result,
        ];
        match tx.query(&sql, &args).await {
            Ok(rows) => {
                next = rows.into_iter().next();
                Ok(true)
            }
            // lease_lost: the claim is no longer held
            Err(e) if e.code() == Some(&SqlState::from_code("PJ001")) => Ok(false),
            Err(e) => Err(e.to_string()),
        }
    }
    .await;
    match attempt {
        Ok(true) => {
            tx.commit().await?;
            Ok(("completed".into(), next))
        }
        Ok(false) => {
            tx.rollback().await?; // the claim was lost: undo this job's writes
            Ok(("lost its claim; its writes were rolled back".into(), None))
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
            let then = match outcome.as_deref() {
                Some("retried") => "retried after its backoff",
                Some("dead") => "dead-lettered: out of attempts",
                Some(_) => "failed: out of attempts",
                None => "the claim was already lost",
            };
            Ok((format!("failed ({message}); {then}"), None))
        }
    }
}

/// Connections for jobs, one per job running, kept for the next.
#[derive(Clone)]
struct Pool {
    dsn: String,
    idle: Arc<Mutex<Vec<Client>>>,
}

impl Pool {
    async fn take(&self) -> Result<Client, tokio_postgres::Error> {
        let idle = self.idle.lock().unwrap().pop();
        match idle {
            Some(client) if !client.is_closed() => Ok(client),
            _ => connect(&self.dsn).await,
        }
    }

    fn give_back(&self, client: Client) {
        if !client.is_closed() {
            self.idle.lock().unwrap().push(client);
        }
    }
}

/// Held jobs: id -> (claim, the sender that tells its handler to stop).
type Held = Arc<Mutex<HashMap<Uuid, (i64, String, watch::Sender<bool>)>>>;

/// Sends the payload of every notification on pg_jobs_cancel, from a connection of its own,
/// made again a second after it fails.
async fn listen_cancels(dsn: String, cancels: mpsc::UnboundedSender<String>) {
    loop {
        if let Ok((client, mut connection)) = tokio_postgres::connect(&dsn, NoTls).await {
            let listening = async {
                client.batch_execute("listen pg_jobs_cancel").await?;
                std::future::pending::<()>().await;
                Ok::<(), tokio_postgres::Error>(())
            };
            let messages = async {
                while let Some(Ok(message)) =
                    std::future::poll_fn(|cx| connection.poll_message(cx)).await
                {
                    if let AsyncMessage::Notification(n) = message {
                        if cancels.send(n.payload().to_owned()).is_err() {
                            return; // the worker is done
                        }
                    }
                }
            };
            tokio::select! {
                _ = listening => {}
                _ = messages => {}
            }
        }
        if cancels.is_closed() {
            return;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Extends the lease of every held job every period, on a connection of its own, made again
/// when it fails. A NULL answer: the claim is lost; its handler is told to stop. A held job
/// named on pg_jobs_cancel (cancelled while it runs) is beaten at once, so its handler stops
/// within moments; a notification is a hint only (any role that can connect may NOTIFY), the
/// heartbeat's answer decides. "*": every held job.
async fn heartbeats(dsn: String, period: Duration, held: Held, quiet: bool) {
    let mut ticks = tokio::time::interval(period);
    let mut client: Option<Client> = None;
    let mut retried = false; // a failed beat is tried again at once, one time
    let (tell, mut cancels) = mpsc::unbounded_channel();
    tokio::spawn(listen_cancels(dsn.clone(), tell));
    loop {
        let named = tokio::select! {
            _ = ticks.tick() => None,
            Some(payload) = cancels.recv() => Some(payload),
        };
        if client.as_ref().is_none_or(Client::is_closed) {
            client = connect(&format!("{dsn} application_name='pg_jobs heartbeat'"))
                .await
                .ok();
        }
        let Some(beat) = client.as_ref() else {
            continue; // made again at the next beat
        };
        let now_held: Vec<(Uuid, i64)> = held
            .lock()
            .unwrap()
            .iter()
            .filter(|(id, _)| {
                named
                    .as_ref()
                    .is_none_or(|n| n == "*" || *n == id.to_string())
            })
            .map(|(id, (claim, _, _))| (*id, *claim))
            .collect();
        for (id, claim) in now_held {
            match beat
                .query_one("select jobs.heartbeat($1, $2)", &[&id, &claim])
                .await
            {
                Ok(row) if row.get::<_, Option<std::time::SystemTime>>(0).is_none() => {
                    if let Some((_, name, stop)) = held.lock().unwrap().remove(&id) {
                        if !quiet {
                            let short = id.to_string();
                            println!(
                                "  job {} {name}: the claim is lost; stopping its handler",
                                &short[short.len() - 8..]
                            );
                        }
                        let _ = stop.send(true);
                    }
                }
                Ok(_) => {}
                Err(_) => {
                    client = None; // made again, and the beat tried again, at once
                    if !std::mem::replace(&mut retried, true) {
                        ticks.reset_immediately();
                    }
                    break;
                }
            }
        }
        if client.is_some() {
            retried = false;
        }
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn Error>> {
    let args = parse_args()?;
    let worker_id = format!("rust:{}", std::process::id());
    let wake = Arc::new(Notify::new());
    let stopping = Arc::new(AtomicBool::new(false));

    let client = connect(&args.dsn).await?;
    let pool = Pool {
        dsn: args.dsn.clone(),
        idle: Arc::default(),
    };

    for kind in [SignalKind::terminate(), SignalKind::interrupt()] {
        let mut signals = signal(kind)?;
        let (stopping, wake) = (stopping.clone(), wake.clone());
        let cancel = client.cancel_token();
        tokio::spawn(async move {
            signals.recv().await;
            stopping.store(true, Ordering::SeqCst);
            // Ends a claim that waits for work; one that is claiming finishes.
            let _ = cancel.cancel_query(NoTls).await;
            wake.notify_one();
        });
    }

    let held: Held = Arc::default();
    let beats = tokio::spawn(heartbeats(
        args.dsn.clone(),
        Duration::from_secs_f64(args.lease / 3.0),
        held.clone(),
        args.quiet,
    ));

    let mut running: JoinSet<Result<(), tokio_postgres::Error>> = JoinSet::new();
    while !stopping.load(Ordering::SeqCst) {
        while let Some(ended) = running.try_join_next() {
            ended??;
        }
        let free = args.batch - running.len() as i32;
        if free == 0 {
            wake.notified().await; // full: wait for a job to end
            continue;
        }
        // The blocking claim: when nothing is claimable it sleeps in the server until a commit
        // makes work in our queues or a job there comes due, up to --poll seconds.
        let rows = match client
            .query(
                &format!(
                    "select {CLAIMED} from jobs.claim($1, $2, $3, make_interval(secs => $4), \
                     make_interval(secs => $5))"
                ),
                &[&worker_id, &args.queues, &free, &args.lease, &args.poll],
            )
            .await
        {
            Ok(rows) => rows,
            Err(_) if stopping.load(Ordering::SeqCst) => break, // cancelled by our signal
            Err(e) => return Err(e.into()),
        };
        let claimed = rows.len();
        for r in rows {
            let (job, tell) = Job::from_row(&r);
            held.lock()
                .unwrap()
                .insert(job.id, (job.claim, job.name.clone(), tell));
            let (pool, held, wake, stopping) =
                (pool.clone(), held.clone(), wake.clone(), stopping.clone());
            let chain = Chain {
                worker: worker_id.clone(),
                queues: args.queues.clone(),
                lease: args.lease,
            };
            let quiet = args.quiet;
            running.spawn(async move {
                let mut conn = pool.take().await?;
                let mut job = job;
                // The job, then each successor its completion claimed, until none or a signal.
                let ended = loop {
                    let chained = (!stopping.load(Ordering::SeqCst)).then_some(&chain);
                    let outcome = run_job(&mut conn, &job, chained).await;
                    held.lock().unwrap().remove(&job.id);
                    let (outcome, next) = match outcome {
                        Ok(done) => done,
                        Err(e) => break Err(e),
                    };
                    if !quiet {
                        let short = job.id.to_string();
                        println!(
                            "  job {} {:13} attempt {}/{}: {outcome}",
                            &short[short.len() - 8..],
                            job.name,
                            job.attempt,
                            job.max_attempts
                        );
                    }
                    let Some(row) = next else { break Ok(()) };
                    let (successor, tell) = Job::from_row(&row);
                    held.lock().unwrap().insert(
                        successor.id,
                        (successor.claim, successor.name.clone(), tell),
                    );
                    job = successor;
                };
                pool.give_back(conn);
                wake.notify_one();
                ended
            });
        }
        if claimed == 0 && running.is_empty() && args.until_empty {
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
    }
    while let Some(ended) = running.join_next().await {
        ended??; // a signal: stop claiming, finish the jobs held
    }
    beats.abort();
    Ok(())
}
