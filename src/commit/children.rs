//! Child jobs' counts, moved at the end of each statement, parent by parent in id order
//! (sql/children.sql).
//!
//! A child that starts or stops being live moves its parent's count of live children
//! (`children_live`). The row trigger (`jobs._family_changed`) only notes the move here
//! (`jobs._family_note`); the statement-level trigger below, which PostgreSQL fires after the
//! statement's row triggers, hands what the statement noted to `jobs._family_apply`: one
//! update per parent, summed, in id order. So a statement that ends children of several
//! parents locks them in one order (two such statements cannot deadlock on them), and a
//! parent whose 40,000 children are cancelled together is updated once, not 40,000 times.
//!
//! What a savepoint rolled back (or a failed statement) noted is forgotten with it.

use crate::commit::xact;
use pgrx::prelude::*;
use std::cell::RefCell;
use std::collections::BTreeMap;

/// Its hooks at the end of a transaction (src/commit/xact.rs).
static HOOKS: xact::Hooks = xact::Hooks {
    order: 2,
    before_commit: None,
    at_end: Some(at_end),
    at_subtransaction_abort: Some(forget_since),
};

thread_local! {
    /// The moves noted and not yet applied: (subtransaction, parent, move).
    static PENDING: RefCell<Vec<(pg_sys::SubTransactionId, pgrx::Uuid, i32)>> =
        const { RefCell::new(Vec::new()) };
}

/// `jobs._family_note(parent, move)`: the parent's count of live children moves by `move` at
/// the end of this statement. True, to sit in an expression.
#[pg_extern(volatile, parallel_unsafe, name = "_family_note")]
fn family_note(parent: pgrx::Uuid, delta: i32) -> bool {
    xact::register(&HOOKS);
    let sub = unsafe { pg_sys::GetCurrentSubTransactionId() };
    PENDING.with(|p| p.borrow_mut().push((sub, parent, delta)));
    true
}

/// The statement-level trigger on `jobs_data.jobs` (UPDATE, DELETE): applies what the
/// statement's row triggers noted. Nothing noted (every statement but those that move a
/// child): it returns at once.
#[pg_trigger]
fn _family_statement_end<'a>(
    _trigger: &'a pgrx::PgTrigger<'a>,
) -> Result<Option<PgHeapTuple<'a, AllocatedByPostgres>>, PgHeapTupleError> {
    let noted = PENDING.with(|p| std::mem::take(&mut *p.borrow_mut()));
    if noted.is_empty() {
        return Ok(None);
    }
    let mut sums: BTreeMap<[u8; 16], i32> = BTreeMap::new();
    for (_, parent, delta) in noted {
        *sums.entry(*parent.as_bytes()).or_default() += delta;
    }
    sums.retain(|_, delta| *delta != 0);
    if sums.is_empty() {
        return Ok(None);
    }
    // uuid orders as its bytes do, in PostgreSQL too.
    let parents: Vec<pgrx::Uuid> = sums.keys().map(|b| pgrx::Uuid::from_bytes(*b)).collect();
    let deltas: Vec<i32> = sums.values().copied().collect();
    Spi::run_with_args(
        "select jobs._family_apply($1, $2)",
        &[parents.into(), deltas.into()],
    )
    .unwrap_or_else(|e| error!("pg_jobs: the counts of live children: {e}"));
    Ok(None)
}

/// A savepoint rolled back, or a failed statement's subtransaction: what was noted under it
/// is forgotten.
fn forget_since(sub: pg_sys::SubTransactionId) {
    PENDING.with(|p| p.borrow_mut().retain(|(at, _, _)| *at < sub));
}

/// At any end of a transaction: forgets what a failed statement noted.
fn at_end(_commit: bool) {
    PENDING.with(|p| p.borrow_mut().clear());
}

/// `jobs._in_background_worker()`: whether this session is a background worker (the sweeper):
/// its statements must not wait on a parent row another transaction holds (`_family_apply`).
#[pg_extern(stable, parallel_safe, name = "_in_background_worker")]
fn in_background_worker() -> bool {
    unsafe { pg_sys::MyBackendType == pg_sys::BackendType::B_BG_WORKER }
}
