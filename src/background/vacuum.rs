//! The background worker's vacuum of jobs_data.jobs: `VACUUM (SKIP_LOCKED)` of one table, as
//! the command runs at top level, through a larger ring of buffers than the command's. The one
//! place where the server's C API differs between the releases pg_jobs supports: from
//! PostgreSQL 16 `vacuum()` takes the memory context that outlives its transactions and the
//! table itself is vacuumed only with `VACOPT_PROCESS_MAIN`, 17 and 18 add fields to
//! `VacuumParams`, and 18 changes `pqsignal` (so the SIGTERM handler is swapped with
//! sigaction(2) on every release).
//!
//! VACUUM commits the transaction it is called in and runs its own, so it is called outside
//! BackgroundWorker::transaction, in a bare transaction, with its arguments in a memory context
//! that outlives those transactions. By oid: a table dropped since is skipped without a word,
//! and so is one whose lock is taken (autovacuum, or a DROP EXTENSION under way).
//!
//! Through a 16 MB ring of buffers (BAS_BULKWRITE), not the 256 kB one VACUUM and autovacuum
//! use (PostgreSQL 15 has no setting for it). A churning queue dirties every page vacuum
//! visits, and before vacuum may reuse a buffer of its ring the WAL up to that page must be on
//! disk: with 32 buffers that is a WAL flush every 32 pages, and under load autovacuum spent
//! its passes waiting on them (`IO:WALSync`) while the table grew.

use pgrx::bgworkers::BackgroundWorker;
use pgrx::prelude::*;
use pgrx::PgMemoryContexts;

pub fn vacuum(relid: pg_sys::Oid) {
    let mut memory = PgMemoryContexts::new("pg_jobs vacuum");
    unsafe {
        let (relations, ring) = memory.switch_to(|_| {
            let rel = pg_sys::makeVacuumRelation(std::ptr::null_mut(), relid, std::ptr::null_mut());
            (
                pg_sys::lappend(std::ptr::null_mut(), rel.cast()),
                pg_sys::GetAccessStrategy(pg_sys::BufferAccessStrategyType::BAS_BULKWRITE),
            )
        });
        let mut params = params();
        // A SIGTERM during the vacuum ends it, and the worker, as it ends a backend's command
        // (with FATAL), so a shutdown or pg_terminate_backend does not wait for it to finish.
        let previous = swap_sigterm(postgres_die as *const () as libc::sighandler_t);
        if !BackgroundWorker::sigterm_received() {
            pg_sys::SetCurrentStatementStartTimestamp();
            pg_sys::StartTransactionCommand();
            #[cfg(feature = "pg15")]
            pg_sys::vacuum(relations, &mut params, ring, true);
            #[cfg(not(feature = "pg15"))]
            pg_sys::vacuum(relations, &mut params, ring, memory.value(), true);
            pg_sys::CommitTransactionCommand();
        }
        restore_sigterm(&previous);
    }
    pg_sys::check_for_interrupts!(); // one that came after the vacuum's last check
    drop(memory);
}

/// What a plain VACUUM (SKIP_LOCKED) sets, without parallel workers. Fields a release adds
/// and this does not name are zero: on 17 and 18 `toast_parent` (InvalidOid, none).
unsafe fn params() -> pg_sys::VacuumParams {
    // SAFETY: VacuumParams is plain data; zero is a valid value of each of its fields.
    let mut params: pg_sys::VacuumParams = unsafe { std::mem::zeroed() };
    params.options =
        pg_sys::VACOPT_VACUUM | pg_sys::VACOPT_SKIP_LOCKED | pg_sys::VACOPT_PROCESS_TOAST;
    // From 16 the table itself is vacuumed only when asked (VACUUM's PROCESS_MAIN, on by
    // default): without it only its TOAST table would be.
    #[cfg(not(feature = "pg15"))]
    {
        params.options |= pg_sys::VACOPT_PROCESS_MAIN;
    }
    params.freeze_min_age = -1;
    params.freeze_table_age = -1;
    params.multixact_freeze_min_age = -1;
    params.multixact_freeze_table_age = -1;
    params.is_wraparound = false;
    params.log_min_duration = -1;
    params.index_cleanup = pg_sys::VacOptValue::VACOPTVALUE_UNSPECIFIED;
    params.truncate = pg_sys::VacOptValue::VACOPTVALUE_UNSPECIFIED;
    params.nworkers = -1;
    // 18: eager freezing as VACUUM does it, by the server's setting.
    #[cfg(feature = "pg18")]
    {
        params.max_eager_freeze_failure_rate =
            unsafe { pg_sys::vacuum_max_eager_freeze_failure_rate };
    }
    params
}

/// Installs `handler` for SIGTERM, answering the action it replaces.
unsafe fn swap_sigterm(handler: libc::sighandler_t) -> libc::sigaction {
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = handler;
        action.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut action.sa_mask);
        let mut previous: libc::sigaction = std::mem::zeroed();
        libc::sigaction(libc::SIGTERM, &action, &mut previous);
        previous
    }
}

unsafe fn restore_sigterm(previous: &libc::sigaction) {
    unsafe { libc::sigaction(libc::SIGTERM, previous, std::ptr::null_mut()) };
}

unsafe extern "C-unwind" {
    /// PostgreSQL's SIGTERM handler for backends (tcop/postgres.c), itself: pg_sys::die is a
    /// guarded Rust wrapper, not a function a signal may call.
    #[link_name = "die"]
    fn postgres_die(signal: std::ffi::c_int);
}
