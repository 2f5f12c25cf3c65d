//! The end of a transaction, for the modules that keep something until then. This module owns
//! pg_jobs's one transaction callback and its one subtransaction callback (PostgreSQL's
//! `RegisterXactCallback` and `RegisterSubXactCallback`); no other module registers one.
//!
//! A module that notes something for the end of the current transaction calls
//! [`register`] with its [`Hooks`] (a `static`) before it notes it. The first call in a
//! backend registers the callbacks with PostgreSQL, for the backend's life; each set of hooks
//! is kept once, and they run in the order of their `order`, whichever registered first:
//!
//! | order | module | before the commit | at the end | a subtransaction rolled back |
//! |---|---|---|---|---|
//! | 1 | async_claims | `synchronous_commit = off` for a lone claim | forgets it | |
//! | 2 | children (child counts) | | forgets what was noted | forgets what it noted |
//! | 3 | relay (`LISTEN pg_jobs`) | | at a commit, hands the queues to the sweeper | |
//! | 4 | outcomes (counters, signals) | NOTIFYs what the relay cannot carry | at a commit, counts and hands the signals over | forgets what it noted |
//! | 5 | wakeups (blocking claims) | | at a commit, bumps the counters and wakes the waiters | |
//! | 6 | launcher (`CREATE EXTENSION pg_jobs`) | | at a commit, wakes the launcher to look for it | |
//!
//! So the modules depend on this one and this one on none of them. A prepared transaction is
//! an end without a commit: it commits later, from another session.

use pgrx::prelude::*;
use std::cell::{Cell, RefCell};

/// What a module does at the end of a transaction; `None` for nothing.
pub struct Hooks {
    /// Where it runs among the others (lower first).
    pub order: u8,
    /// Just before the commit, while the transaction can still write and fail.
    pub before_commit: Option<fn()>,
    /// At the end: true for a commit, false for an abort or a PREPARE TRANSACTION.
    pub at_end: Option<fn(bool)>,
    /// A subtransaction rolled back (a savepoint, or a failed statement's): forget what was
    /// noted since it began (its id, and those of the subtransactions under it, are at least
    /// the one given).
    pub at_subtransaction_abort: Option<fn(pg_sys::SubTransactionId)>,
}

/// Room for every module's hooks (six today).
const MAX_HOOKS: usize = 8;
type Registered = [Option<&'static Hooks>; MAX_HOOKS];

thread_local! {
    static REGISTERED: Cell<bool> = const { Cell::new(false) };
    /// The hooks registered in this backend, by order.
    static HOOKS: RefCell<Registered> = const { RefCell::new([None; MAX_HOOKS]) };
}

/// Makes sure `hooks` run at the end of this backend's transactions, from this one on.
pub fn register(hooks: &'static Hooks) {
    if !REGISTERED.with(Cell::get) {
        REGISTERED.with(|r| r.set(true));
        unsafe {
            pg_sys::RegisterXactCallback(Some(at_transaction_end), std::ptr::null_mut());
            pg_sys::RegisterSubXactCallback(Some(at_subtransaction_end), std::ptr::null_mut());
        }
    }
    HOOKS.with(|h| {
        let mut h = h.borrow_mut();
        if h.iter().flatten().any(|known| std::ptr::eq(*known, hooks)) {
            return;
        }
        let len = h.iter().flatten().count();
        assert!(
            len < MAX_HOOKS,
            "pg_jobs: more transaction hooks than MAX_HOOKS"
        );
        let at = h[..len].partition_point(|known| known.is_some_and(|k| k.order <= hooks.order));
        h[at..=len].rotate_right(1);
        h[at] = Some(hooks);
    });
}

/// The hooks, copied out (a hook may register another set meanwhile).
fn hooks() -> impl Iterator<Item = &'static Hooks> {
    HOOKS.with(|h| *h.borrow()).into_iter().flatten()
}

#[pg_guard]
unsafe extern "C-unwind" fn at_subtransaction_end(
    event: pg_sys::SubXactEvent::Type,
    sub: pg_sys::SubTransactionId,
    _parent: pg_sys::SubTransactionId,
    _arg: *mut std::ffi::c_void,
) {
    if event == pg_sys::SubXactEvent::SUBXACT_EVENT_ABORT_SUB {
        for forget in hooks().filter_map(|h| h.at_subtransaction_abort) {
            forget(sub);
        }
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn at_transaction_end(
    event: pg_sys::XactEvent::Type,
    _arg: *mut std::ffi::c_void,
) {
    use pg_sys::XactEvent::*;
    let commit = match event {
        XACT_EVENT_PRE_COMMIT => {
            for before in hooks().filter_map(|h| h.before_commit) {
                before();
            }
            return;
        }
        XACT_EVENT_COMMIT | XACT_EVENT_PARALLEL_COMMIT => true,
        XACT_EVENT_ABORT | XACT_EVENT_PARALLEL_ABORT | XACT_EVENT_PREPARE => false,
        _ => return,
    };
    for end in hooks().filter_map(|h| h.at_end) {
        end(commit);
    }
}
