//! A sweeper: the background worker of one database, started by the launcher
//! (src/background/launcher.rs) in every database with pg_jobs. It sweeps its database every
//! `pg_jobs.sweep_interval` with `jobs.sweep()`, so lapsed leases, expired events and
//! retention are handled when no client is alive.
//!
//! It re-reads its settings on SIGHUP and checks on every pass that the extension exists; when
//! it does not (never created, or dropped), the sweeper says so to the launcher and exits, and
//! the launcher looks again later. For the pass it holds a share lock on the extension, so a
//! `DROP EXTENSION` waits for the sweep to end. It exits at SIGTERM (the launcher starts it
//! again after `pg_terminate_backend` or an error), and when the launcher that started it is
//! gone (a new launcher starts its own).
//!
//! Every `pg_jobs.vacuum_interval` it also asks whether `jobs_data.jobs` has as many dead rows as
//! autovacuum waits for, and if so vacuums it (`VACUUM (SKIP_LOCKED)`, with a larger ring of
//! buffers than the command's: src/background/vacuum.rs).
//! Autovacuum visits a database once per `autovacuum_naptime`, a minute by default, and a busy
//! queue leaves a minute of dead row versions behind in between (docs/BENCHMARKS.md, churn).

use crate::background::{launcher, vacuum};
use crate::commit::{async_claims, relay};
use crate::gucs;
use pgrx::bgworkers::{BackgroundWorker, SignalWakeFlags};
use pgrx::prelude::*;
use std::ffi::CString;
use std::time::Instant;

const NAME: &str = "pg_jobs sweeper";
/// Rows each sweep task may handle in one pass (one transaction). 5000 lets retention keep up
/// with about 10k completed jobs a second on 2 cores (tests/server/test_load.py); 1000 did not.
const BATCH: i32 = 5000;

/// What a pass found.
enum Pass {
    /// Swept; `full`: a task filled its batch, so another pass follows at once.
    Swept { full: bool },
    /// Nothing to do now: the server is in recovery, or a DROP EXTENSION is in progress.
    Skipped,
    /// pg_jobs is not installed in this database.
    NoExtension,
}

#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn pg_jobs_sweeper_main(arg: pg_sys::Datum) {
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGHUP | SignalWakeFlags::SIGTERM);
    let db = arg.value() as u32;
    BackgroundWorker::connect_worker_to_spi_by_oid(Some(pg_sys::Oid::from(db)), None);
    pin_search_path();
    let Some(generation) = launcher::enter(db) else {
        exit(0)
    };
    let database = database_name();
    relay::register();

    let mut last_vacuum_check = Instant::now();
    let mut next_sweep = Instant::now();
    let mut first = true;
    loop {
        if BackgroundWorker::sighup_received() {
            unsafe { pg_sys::ProcessConfigFile(pg_sys::GucContext::PGC_SIGHUP) };
            next_sweep = Instant::now(); // a new setting applies at once
        }
        if !launcher::current(generation) {
            break;
        }
        relay_notifications();
        if Instant::now() < next_sweep {
            // Woken to relay: sleep out the rest of the interval.
            let left = next_sweep.saturating_duration_since(Instant::now());
            if !BackgroundWorker::wait_latch(Some(left.max(relay::GAP))) || stopping() {
                break;
            }
            continue;
        }
        // Passes back to back while a task fills its batch, so a backlog drains at once but
        // no single transaction holds many rows. Under load that lasts as long as the load
        // does, so the vacuum check is made between passes too.
        loop {
            relay_notifications();
            match BackgroundWorker::transaction(pass) {
                Pass::NoExtension => {
                    if first {
                        debug1!("{NAME}: pg_jobs is not installed in database {database:?}");
                    } else {
                        log!("{NAME}: pg_jobs was dropped from database {database:?}; leaving");
                    }
                    launcher::no_extension(db);
                    exit(0);
                }
                Pass::Skipped => break,
                Pass::Swept { full } => {
                    if first {
                        log!("{NAME}: sweeping database {database:?}");
                        first = false;
                    }
                    report_stats();
                    vacuum_if_due(&mut last_vacuum_check);
                    if !full || stopping() {
                        break;
                    }
                }
            }
        }
        report_stats();
        vacuum_if_due(&mut last_vacuum_check);
        next_sweep = Instant::now() + gucs::sweep_interval();
        relay_notifications();
        if stopping() || !BackgroundWorker::wait_latch(Some(gucs::sweep_interval())) {
            break;
        }
    }
    log!("{NAME}: stopping in database {database:?}");
    exit(1);
}

/// Whether a SIGTERM came: once seen, for the rest of the process. pgrx's
/// `sigterm_received()` answers it once and clears it (so does `wait_latch`, which calls it):
/// a check between two passes then swallowed the signal, and the worker swept on.
fn stopping() -> bool {
    static STOPPING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if BackgroundWorker::sigterm_received() {
        STOPPING.store(true, std::sync::atomic::Ordering::Relaxed);
    }
    STOPPING.load(std::sync::atomic::Ordering::Relaxed)
}

/// Ends the process: `proc_exit`, which does not return (its binding says so on some releases
/// only).
#[allow(unreachable_code)]
fn exit(code: i32) -> ! {
    unsafe { pg_sys::proc_exit(code) };
    unreachable!("proc_exit returned")
}

/// The name of the database this worker is connected to.
fn database_name() -> String {
    BackgroundWorker::transaction(|| unsafe {
        let name = pg_sys::get_database_name(pg_sys::MyDatabaseId);
        if name.is_null() {
            String::new()
        } else {
            std::ffi::CStr::from_ptr(name)
                .to_string_lossy()
                .into_owned()
        }
    })
}

/// The worker is a superuser: every name in its statements must resolve in pg_catalog or by
/// its schema, never through a schema another role may create objects in (`public` before
/// PostgreSQL 15, or one named after the worker's user), where a planted function or operator
/// would run as the superuser. Set over any `ALTER DATABASE` / `ALTER ROLE ... SET
/// search_path` (PGC_S_OVERRIDE), before the worker runs any statement. The functions of
/// pg_jobs pin their own search_path as well (sql/privileges.sql).
fn pin_search_path() {
    unsafe {
        pg_sys::SetConfigOption(
            c"search_path".as_ptr(),
            c"pg_catalog, pg_temp".as_ptr(),
            pg_sys::GucContext::PGC_SUSET,
            pg_sys::GucSource::PGC_S_OVERRIDE,
        )
    };
}

/// A backend's main loop reports its table statistics when idle; a background worker must do
/// it itself. Unreported, the rows a sweep deletes never reach n_dead_tup, and autovacuum does
/// not come for them.
fn report_stats() {
    unsafe { pg_sys::pgstat_report_stat(true) };
}

/// Every `pg_jobs.vacuum_interval`: vacuums jobs_data.jobs if autovacuum would.
fn vacuum_if_due(last_check: &mut Instant) {
    let Some(every) = gucs::vacuum_interval() else {
        return;
    };
    if last_check.elapsed() < every || stopping() {
        return;
    }
    *last_check = Instant::now();
    if let Some(relid) = BackgroundWorker::transaction(vacuum_due) {
        // A vacuum may take a while: until it ends, transactions notify for themselves.
        relay_notifications();
        relay::set_ready(false);
        report_activity(pg_sys::BackendState::STATE_RUNNING, VACUUMING);
        vacuum::vacuum(relid);
        report_activity(pg_sys::BackendState::STATE_IDLE, VACUUMING);
        relay::set_ready(true);
        report_stats();
    }
}

/// Sends the notifications that committed transactions handed to this sweeper (src/commit/relay.rs),
/// in one transaction that does not wait for its WAL flush, then waits `relay::GAP`, so a burst
/// of commits becomes one notification per queue.
fn relay_notifications() {
    let due = relay::take();
    if due.queues.is_empty() && !due.every_queue && due.signals.is_empty() && !due.lost_signals {
        return;
    }
    if unsafe { pg_sys::RecoveryInProgress() } {
        return; // no NOTIFY on a standby (nor any commit that would hand one over)
    }
    BackgroundWorker::transaction(move || {
        let mut queues = due.queues;
        if due.every_queue {
            queues.insert("*".to_owned()); // some did not fit: every queue
        }
        async_claims::commit_without_flush();
        relay::send(&queues);
        relay::send_signals(&due.signals, due.lost_signals);
    });
    std::thread::sleep(relay::GAP);
}

/// One sweep in the current transaction.
fn pass() -> Pass {
    if unsafe { pg_sys::RecoveryInProgress() } {
        return Pass::Skipped;
    }
    match hold_extension() {
        Held::Yes => {}
        Held::Dropping => return Pass::Skipped,
        Held::Missing => return Pass::NoExtension,
    }
    report_activity(
        pg_sys::BackendState::STATE_RUNNING,
        "select * from jobs.sweep()",
    );
    let counts: Vec<(String, i64)> = Spi::connect(|client| {
        client
            .select(
                "select task, affected from jobs.sweep($1)",
                None,
                &[BATCH.into()],
            )
            .map(|rows| {
                rows.map(|row| {
                    let task = row.get::<String>(1).ok().flatten().unwrap_or_default();
                    let affected = row.get::<i64>(2).ok().flatten().unwrap_or(0);
                    (task, affected)
                })
                .collect()
            })
            .unwrap_or_else(|e| error!("{NAME}: jobs.sweep() failed: {e}"))
    });
    report_activity(
        pg_sys::BackendState::STATE_IDLE,
        "select * from jobs.sweep()",
    );
    let summary = counts
        .iter()
        .map(|(task, n)| format!("{task}={n}"))
        .collect::<Vec<_>>()
        .join(" ");
    if counts.iter().any(|(_, n)| *n > 0) {
        log!("{NAME}: {summary}");
    } else {
        debug1!("{NAME}: nothing to do ({summary})");
    }
    Pass::Swept {
        full: counts.iter().any(|(_, n)| *n >= BATCH as i64),
    }
}

/// jobs_data.jobs, when it has as many dead rows as autovacuum waits for (`jobs._vacuum_due`).
fn vacuum_due() -> Option<pg_sys::Oid> {
    if unsafe { pg_sys::RecoveryInProgress() } || !matches!(hold_extension(), Held::Yes) {
        return None;
    }
    Spi::get_one::<pg_sys::Oid>(
        "select case when jobs._vacuum_due() then 'jobs_data.jobs'::regclass::oid end",
    )
    .unwrap_or_else(|e| error!("{NAME}: jobs._vacuum_due() failed: {e}"))
}

/// Takes a share lock on the extension for the rest of the pass, so that a `DROP EXTENSION`
/// (which locks the extension before it drops anything) waits for the sweep to end, instead of
/// dropping the tables under it: the sweep would fail, and the worker exit and restart. Never
/// waits itself: while another session holds a drop open, the pass is skipped.
fn hold_extension() -> Held {
    let oid = extension_oid();
    if oid == pg_sys::InvalidOid {
        return Held::Missing;
    }
    let locked = unsafe {
        pg_sys::ConditionalLockDatabaseObject(
            pg_sys::ExtensionRelationId,
            oid,
            0,
            pg_sys::AccessShareLock as pg_sys::LOCKMODE,
        )
    };
    if !locked {
        report_activity(
            pg_sys::BackendState::STATE_IDLE,
            "waiting for a DROP EXTENSION pg_jobs to end",
        );
        return Held::Dropping;
    }
    // A drop may have committed between the lookup and the lock: look again, under the lock.
    if extension_oid() != oid {
        return Held::Missing;
    }
    Held::Yes
}

enum Held {
    /// Locked for the pass.
    Yes,
    /// Another session is dropping it.
    Dropping,
    /// Not installed.
    Missing,
}
const VACUUMING: &str = "vacuum (skip_locked) jobs_data.jobs";

/// The extension's oid in this database, or InvalidOid. get_extension_oid reads pg_extension
/// with a fresh catalog snapshot on every call (that catalog has no syscache), not with the
/// snapshot this transaction started with, so it sees a drop committed since.
fn extension_oid() -> pg_sys::Oid {
    unsafe { pg_sys::get_extension_oid(c"pg_jobs".as_ptr(), true) }
}

/// What `pg_stat_activity` shows for the worker: its state, and `query_start` as the time of
/// the last pass.
fn report_activity(state: pg_sys::BackendState::Type, what: &str) {
    let text = CString::new(what).expect("activity text has no NUL");
    unsafe { pg_sys::pgstat_report_activity(state, text.as_ptr()) };
}
