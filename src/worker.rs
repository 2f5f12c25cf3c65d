//! The background worker: registration and its loop, nothing else. It sweeps the database
//! named by `pg_jobs.database_name` every `pg_jobs.sweep_interval` with `jobs.sweep()`, so
//! lapsed leases, expired events and retention are handled when no client is alive.
//!
//! It starts when recovery has finished (never on a standby; after a promotion it starts),
//! re-reads its settings on SIGHUP, checks on every pass that the extension exists (it may be
//! created, dropped and created again while the worker runs) and holds a share lock on it for
//! the pass, so a `DROP EXTENSION` waits for the sweep to end; it exits at SIGTERM. It exits
//! with status 1, so the postmaster starts it again after `pg_terminate_backend` or a crash.
//!
//! Every `pg_jobs.vacuum_interval` it also asks whether `jobs_data.jobs` has as many dead rows as
//! autovacuum waits for, and if so vacuums it (`VACUUM (SKIP_LOCKED)`, with a larger ring of
//! buffers than the command's: src/vacuum.rs).
//! Autovacuum visits a database once per `autovacuum_naptime`, a minute by default, and a busy
//! queue leaves a minute of dead row versions behind in between (docs/BENCHMARKS.md, churn).

use crate::{gucs, vacuum};
use pgrx::bgworkers::{
    BackgroundWorker, BackgroundWorkerBuilder, BgWorkerStartTime, SignalWakeFlags,
};
use pgrx::prelude::*;
use std::ffi::CString;
use std::time::{Duration, Instant};

const NAME: &str = "pg_jobs sweeper";
/// Rows each sweep task may handle in one pass (one transaction). 5000 lets retention keep up
/// with about 10k completed jobs a second on 2 cores (tests/test_load.py); 1000 did not.
const BATCH: i32 = 5000;

pub fn register() {
    BackgroundWorkerBuilder::new(NAME)
        .set_type(NAME)
        .set_library("pg_jobs")
        .set_function("pg_jobs_sweeper_main")
        .enable_spi_access()
        .set_start_time(BgWorkerStartTime::RecoveryFinished)
        .set_restart_time(Some(Duration::from_secs(2)))
        .load();
}

#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn pg_jobs_sweeper_main(_arg: pg_sys::Datum) {
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGHUP | SignalWakeFlags::SIGTERM);
    let database = gucs::database_name();
    BackgroundWorker::connect_worker_to_spi(Some(&database), None);
    pin_search_path();
    log!("{NAME}: started on database {database:?}");

    let mut last_vacuum_check = Instant::now();
    while BackgroundWorker::wait_latch(Some(gucs::sweep_interval())) {
        if BackgroundWorker::sighup_received() {
            unsafe { pg_sys::ProcessConfigFile(pg_sys::GucContext::PGC_SIGHUP) };
        }
        // Passes back to back while a task fills its batch, so a backlog drains at once but
        // no single transaction holds many rows. Under load that lasts as long as the load
        // does, so the vacuum check is made between passes too.
        while let Some(full) = BackgroundWorker::transaction(pass) {
            report_stats();
            vacuum_if_due(&mut last_vacuum_check);
            if !full || BackgroundWorker::sigterm_received() {
                break;
            }
        }
        report_stats();
        vacuum_if_due(&mut last_vacuum_check);
    }
    log!("{NAME}: stopping");
    unsafe { pg_sys::proc_exit(1) };
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
    if last_check.elapsed() < every || BackgroundWorker::sigterm_received() {
        return;
    }
    *last_check = Instant::now();
    if let Some(relid) = BackgroundWorker::transaction(vacuum_due) {
        report_activity(pg_sys::BackendState::STATE_RUNNING, VACUUMING);
        vacuum::vacuum(relid);
        report_activity(pg_sys::BackendState::STATE_IDLE, VACUUMING);
        report_stats();
    }
}

/// One sweep in the current transaction. None when there is nothing to sweep here: the server
/// is in recovery, the extension is not installed in this database, or another session is
/// dropping it.
fn pass() -> Option<bool> {
    if unsafe { pg_sys::RecoveryInProgress() } {
        return None;
    }
    if !hold_extension() {
        return None;
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
    Some(counts.iter().any(|(_, n)| *n >= BATCH as i64))
}

/// jobs_data.jobs, when it has as many dead rows as autovacuum waits for (`jobs._vacuum_due`).
fn vacuum_due() -> Option<pg_sys::Oid> {
    if unsafe { pg_sys::RecoveryInProgress() } || !hold_extension() {
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
/// waits itself: while another session holds a drop open, the pass is skipped. False when there
/// is nothing to lock, or it is being dropped.
fn hold_extension() -> bool {
    let oid = extension_oid();
    if oid == pg_sys::InvalidOid {
        report_activity(pg_sys::BackendState::STATE_IDLE, WAITING_FOR_CREATE);
        return false;
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
        return false;
    }
    // A drop may have committed between the lookup and the lock: look again, under the lock.
    if extension_oid() != oid {
        report_activity(pg_sys::BackendState::STATE_IDLE, WAITING_FOR_CREATE);
        return false;
    }
    true
}

const WAITING_FOR_CREATE: &str = "waiting for CREATE EXTENSION pg_jobs";
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
