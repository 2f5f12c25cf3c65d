//! Claims and heartbeats that do not wait for their WAL flush (`pg_jobs.async_claims`, on by
//! default).
//!
//! A claim changes nothing outside pg_jobs. If a crash or a failover loses one that committed
//! without waiting for its flush, the job is simply claimable again, and its worker is fenced
//! out: its token is never issued again (src/functions/tokens.rs), so its settles, steps and heartbeats
//! are refused. A lost heartbeat only shortens a lease. So when one of them is its
//! transaction's only work, that transaction commits with `synchronous_commit = off`: one WAL
//! flush less per claim, and the worker's next transaction (its settle) flushes both.
//!
//! "Its only work": the statement is a bare call (src/commit/statement.rs), outside any transaction
//! block, in a transaction that has written nothing before it (no transaction id yet); and at
//! the commit no later statement has run in that transaction (a pipeline of the extended
//! protocol runs several before one commit: each starts a new statement time). Anything else
//! (a claim inside BEGIN, after or before the application's writes, or called from a
//! function) keeps the caller's durability: an application's writes are never made
//! asynchronous.

use crate::commit::xact;
use crate::gucs;
use pgrx::prelude::*;
use std::cell::Cell;

/// Its hooks at the end of a transaction (src/commit/xact.rs).
static HOOKS: xact::Hooks = xact::Hooks {
    order: 1,
    before_commit: Some(before_commit),
    at_end: Some(at_end),
    at_subtransaction_abort: None,
};

thread_local! {
    /// The statement time of the standalone call this transaction made, until its end.
    static STANDALONE_AT: Cell<Option<i64>> = const { Cell::new(None) };
}

/// `jobs._async_if_alone(function)`: called by jobs.claim and jobs.heartbeat before they
/// write; when the call is its transaction's only work, its commit will not wait for the WAL
/// flush.
#[pg_extern(volatile, parallel_unsafe, name = "_async_if_alone")]
fn async_if_alone(function: &str) {
    if !gucs::async_claims() {
        return;
    }
    let alone = unsafe {
        !pg_sys::IsTransactionBlock()
            && pg_sys::GetTopTransactionIdIfAny() == pg_sys::InvalidTransactionId
    } && std::ffi::CString::new(function)
        .is_ok_and(|name| crate::commit::statement::is_a_bare_call(&name));
    if !alone {
        return;
    }
    STANDALONE_AT.with(|s| s.set(Some(unsafe { pg_sys::GetCurrentStatementStartTimestamp() })));
    xact::register(&HOOKS);
}

/// Before the commit: if the transaction's only work was a standalone claim or heartbeat,
/// `synchronous_commit = off` for this commit alone.
fn before_commit() {
    let alone_since = STANDALONE_AT.with(|s| s.take());
    let still_alone = alone_since == Some(unsafe { pg_sys::GetCurrentStatementStartTimestamp() })
        && !unsafe { pg_sys::IsTransactionBlock() };
    if still_alone {
        commit_without_flush();
    }
}

/// At any end of a transaction: forgets its standalone call.
fn at_end(_commit: bool) {
    STANDALONE_AT.with(|s| s.set(None));
}

/// `SET LOCAL synchronous_commit = off`: the current transaction's commit does not wait for
/// its WAL flush (also the sweeper's relay of notifications, src/background/sweeper.rs).
pub fn commit_without_flush() {
    unsafe {
        pg_sys::set_config_option(
            c"synchronous_commit".as_ptr(),
            c"off".as_ptr(),
            pg_sys::GucContext::PGC_USERSET,
            pg_sys::GucSource::PGC_S_SESSION,
            pg_sys::GucAction::GUC_ACTION_LOCAL,
            true,
            pgrx::PgLogLevel::ERROR as i32,
            false,
        )
    };
}
