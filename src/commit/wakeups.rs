//! Wake-ups in shared memory, for the blocking claim (`jobs.claim(..., wait => ...)`).
//!
//! Each queue of each database hashes to one of `BUCKETS` counters. A transaction that makes
//! work in a queue (a job ready or due sooner: enqueue, publish, requeue, promote, a retry, a
//! snooze, an event wait with a timeout, a queue resumed) notes the queue's bucket
//! (`jobs._signal_work`), and at its commit, once its rows are visible, bumps the counters and,
//! when a claim waits on one of those buckets, broadcasts one condition variable (a commit to
//! queues nobody waits on wakes nobody). A claim that found nothing reads its queues' counters
//! before it looks (`jobs._work_seen`) and sleeps on the condition variable until one of them
//! moves, or its next due time or its deadline passes (`jobs._await_work`). Reading before
//! looking makes the wake-up impossible to miss: a commit before the read is seen by the look,
//! one after it moves a counter. A counter shared by two queues only wakes a claim for nothing
//! now and then.
//!
//! No NOTIFY is involved, so the application's commit takes no lock for it, and a claim woken
//! this way is one SQL call: it works through a transaction-pooling PgBouncer.
//!
//! A claim that found candidates but a limit (concurrency, concurrency key, rate) held back
//! every one of them waits the same way on the limits' own keys (`limit_key`), which every
//! statement that takes a job out of `running` notes (`jobs._slot_freed`).
//!
//! Without `shared_preload_libraries = 'pg_jobs'` there is no shared memory: `_await_work`
//! then sleeps one step of `POLL` and the claim looks again (a documented difference: waits
//! are polled).

use crate::commit::xact;
use pgrx::atomics::PgAtomic;
use pgrx::prelude::*;
use pgrx::{pg_shmem_init, PGRXSharedMemory};
use std::cell::{Cell, RefCell, UnsafeCell};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

const BUCKETS: usize = 1024;
/// The step of a wait without shared memory.
const POLL: Duration = Duration::from_millis(100);

pub struct Wakeups {
    counters: [AtomicU64; BUCKETS],
    /// Claims asleep in `_await_work` now, per bucket they wait on.
    waiting: [AtomicU64; BUCKETS],
    cv: UnsafeCell<pg_sys::ConditionVariable>,
}

unsafe impl PGRXSharedMemory for Wakeups {}
unsafe impl Sync for Wakeups {}

static WAKEUPS: PgAtomic<Wakeups> = unsafe { PgAtomic::new(c"pg_jobs wakeups") };
/// Set in a process whose server preloaded the library: WAKEUPS exists.
static SHARED: AtomicBool = AtomicBool::new(false);

/// From `_PG_init` while preloading.
pub fn init() {
    pg_shmem_init!(
        WAKEUPS = {
            let mut cv = pg_sys::ConditionVariable::default();
            unsafe { pg_sys::ConditionVariableInit(&mut cv) };
            Wakeups {
                counters: std::array::from_fn(|_| AtomicU64::new(0)),
                waiting: std::array::from_fn(|_| AtomicU64::new(0)),
                cv: UnsafeCell::new(cv),
            }
        }
    );
    SHARED.store(true, Ordering::SeqCst);
}

fn shared() -> Option<&'static Wakeups> {
    SHARED.load(Ordering::SeqCst).then(|| WAKEUPS.get())
}

/// The bucket of a queue of this database (FNV-1a, the same in every process).
fn bucket(queue: &str) -> usize {
    let db = unsafe { pg_sys::MyDatabaseId }.to_u32();
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in db.to_le_bytes().iter().chain(queue.as_bytes()) {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    (hash % BUCKETS as u64) as usize
}

thread_local! {
    /// Buckets this transaction made work in, bumped at its commit.
    static PENDING: RefCell<BTreeSet<usize>> = const { RefCell::new(BTreeSet::new()) };
}

/// Its hooks at the end of a transaction (src/commit/xact.rs).
static HOOKS: xact::Hooks = xact::Hooks {
    order: 5,
    before_commit: None,
    at_end: Some(at_end),
    at_subtransaction_abort: None,
};

/// `jobs._signal_work(queues)`: at this transaction's commit, wakes the claims waiting on
/// these queues. On every enqueue: a set insert, and at commit an atomic add per bucket and,
/// only while some claim waits on one of them, one broadcast.
#[pg_extern(volatile, parallel_unsafe, name = "_signal_work")]
fn signal_work(queues: Vec<Option<String>>) {
    if shared().is_none() {
        return;
    }
    PENDING.with(|p| {
        let mut p = p.borrow_mut();
        for queue in queues.iter().flatten() {
            p.insert(bucket(queue));
        }
    });
    xact::register(&HOOKS);
}

/// `jobs._moving(candidates, max_jobs, queues)`: the jobs a claim's one statement moves, of
/// the candidates it locked, in claim order (NULL for one that needs the statements after it:
/// then none). When it locked more than it moves (a ready and a due one for one job), the
/// others stay locked until its commit, and a waiting claim that looked meanwhile skipped them
/// and slept: the commit wakes the claims waiting on these queues.
#[pg_extern(volatile, parallel_unsafe, name = "_moving")]
fn moving(
    candidates: Vec<Option<pgrx::Uuid>>,
    max_jobs: i32,
    queues: Vec<Option<String>>,
) -> Vec<pgrx::Uuid> {
    if candidates.iter().any(Option::is_none) {
        return Vec::new();
    }
    let n = usize::try_from(max_jobs).unwrap_or(0);
    if candidates.len() > n {
        signal_work(queues);
    }
    candidates.into_iter().flatten().take(n).collect()
}

/// The wake-up key of a limit: a job name (`name:`) or a concurrency key (`key:`), after a
/// byte no queue name starts with in practice (a queue named so would only share wake-ups).
/// jobs.claim waits on these (`jobs._held_back`) when a limit holds back all it found.
fn limit_key(kind: &str, value: &str) -> String {
    format!("\u{1}{kind}:{value}")
}

/// `jobs._slot_freed(name, concurrency_key)`: a running job of this name and key stops
/// running (settled, parked, cancelled, lapsed, timed out), so a slot of a limit on either may
/// be free: at this transaction's commit, wakes the claims waiting on them. In the RETURNING
/// list of every statement that takes a job out of `running`; true, so it can stand in one.
#[pg_extern(volatile, parallel_unsafe, name = "_slot_freed")]
fn slot_freed(name: &str, concurrency_key: Option<&str>) -> bool {
    if shared().is_none() {
        return true;
    }
    PENDING.with(|p| {
        let mut p = p.borrow_mut();
        p.insert(bucket(&limit_key("name", name)));
        if let Some(key) = concurrency_key {
            p.insert(bucket(&limit_key("key", key)));
        }
    });
    xact::register(&HOOKS);
    true
}

/// The wake-up key of the jobs of a queue that end (completed, dead, failed, cancelled), which
/// `jobs.wait_for_job` waits on; src/commit/outcomes.rs bumps it at the commit that ends them.
pub fn finished_key(queue: &str) -> String {
    format!("\u{2}finished:{queue}")
}

/// The end of a transaction that made work: at a commit, bumps the buckets it made work in
/// (its rows are visible by now) and wakes the claims waiting on them; else forgets them. A
/// prepared transaction's wake-ups are forgotten too: it commits later, from another session
/// (the waiting claims find its jobs at their next look).
fn at_end(commit: bool) {
    let buckets = PENDING.with(|p| std::mem::take(&mut *p.borrow_mut()));
    if commit {
        bump(&buckets);
    }
}

/// At a commit, from another module's end of transaction (its rows visible by now): bumps
/// these keys and wakes whoever waits on them.
pub fn bump_now(keys: impl Iterator<Item = String>) {
    let buckets: BTreeSet<usize> = keys.map(|k| bucket(&k)).collect();
    bump(&buckets);
}

fn bump(buckets: &BTreeSet<usize>) {
    if buckets.is_empty() {
        return;
    }
    if let Some(w) = shared() {
        for &b in buckets {
            w.counters[b].fetch_add(1, Ordering::SeqCst);
        }
        // A claim counts itself in `waiting` of its buckets before it checks their counters
        // and sleeps, so one that these loads miss sees a counter moved and does not sleep.
        if buckets
            .iter()
            .any(|&b| w.waiting[b].load(Ordering::SeqCst) > 0)
        {
            unsafe { pg_sys::ConditionVariableBroadcast(w.cv.get()) };
        }
    }
}

/// `jobs._work_seen(queues)`: the counters of these queues now (empty without preload).
#[pg_extern(volatile, parallel_unsafe, name = "_work_seen")]
fn work_seen(queues: Vec<Option<String>>) -> Vec<i64> {
    let Some(w) = shared() else {
        return Vec::new();
    };
    queues
        .iter()
        .flatten()
        .map(|q| w.counters[bucket(q)].load(Ordering::SeqCst) as i64)
        .collect()
}

/// `jobs._await_work(queues, seen, until)`: sleeps until a counter of these queues moves past
/// `seen`, or `until` passes. Interrupted as any statement is (statement_timeout,
/// pg_cancel_backend, shutdown).
#[pg_extern(volatile, parallel_unsafe, name = "_await_work")]
fn await_work(queues: Vec<Option<String>>, seen: Vec<i64>, until: TimestampWithTimeZone) {
    let until: i64 = until.into();
    release_xmin_if_unused();
    let remaining = || {
        let now = unsafe { pg_sys::GetCurrentTimestamp() };
        Duration::from_micros(until.saturating_sub(now).max(0) as u64)
    };
    let Some(w) = shared() else {
        // No shared memory: one step of the poll, after which the claim looks again. (A latch
        // set by a signal ends the step early; the claim then looks again sooner.)
        let step = remaining().min(POLL);
        if !step.is_zero() {
            unsafe {
                pg_sys::WaitLatch(
                    pg_sys::MyLatch,
                    (pg_sys::WL_LATCH_SET | pg_sys::WL_TIMEOUT | pg_sys::WL_EXIT_ON_PM_DEATH)
                        as i32,
                    step.as_millis().max(1) as _,
                    pg_sys::PG_WAIT_EXTENSION,
                );
                pg_sys::ResetLatch(pg_sys::MyLatch);
            }
        }
        pg_sys::check_for_interrupts!();
        return;
    };
    let buckets: Vec<usize> = queues.iter().flatten().map(|q| bucket(q)).collect();
    let moved = || {
        buckets
            .iter()
            .zip(seen.iter())
            .any(|(b, s)| w.counters[*b].load(Ordering::SeqCst) as i64 != *s)
    };
    let _counted = Counted::new(w, buckets.clone());
    unsafe { pg_sys::ConditionVariablePrepareToSleep(w.cv.get()) };
    loop {
        if moved() {
            break;
        }
        let left = remaining();
        if left.is_zero() {
            break;
        }
        let timed_out = unsafe {
            pg_sys::ConditionVariableTimedSleep(
                w.cv.get(),
                left.as_millis().clamp(1, i64::MAX as u128) as _,
                pg_sys::PG_WAIT_EXTENSION,
            )
        };
        if timed_out && remaining().is_zero() {
            break;
        }
    }
    unsafe { pg_sys::ConditionVariableCancelSleep() };
}

/// Counts a claim in `waiting` of its buckets for as long as it waits: taken out when its wait
/// ends, also by an error (cancel), when the unwinding drops it, and by the exit of its
/// process (a shutdown or `pg_terminate_backend` ends the process without unwinding).
struct Counted;

thread_local! {
    /// The buckets this backend is counted in now.
    static COUNTED: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
    static EXIT_HOOKED: Cell<bool> = const { Cell::new(false) };
}

impl Counted {
    fn new(w: &'static Wakeups, buckets: Vec<usize>) -> Self {
        if !EXIT_HOOKED.with(Cell::get) {
            EXIT_HOOKED.with(|h| h.set(true));
            unsafe { pg_sys::before_shmem_exit(Some(uncount_at_exit), pg_sys::Datum::from(0)) };
        }
        uncount();
        for &b in &buckets {
            w.waiting[b].fetch_add(1, Ordering::SeqCst);
        }
        COUNTED.with(|c| *c.borrow_mut() = buckets);
        Counted
    }
}

/// Takes this backend out of `waiting` of the buckets it is counted in.
fn uncount() {
    let buckets = COUNTED.with(|c| std::mem::take(&mut *c.borrow_mut()));
    if let Some(w) = shared() {
        for b in buckets {
            w.waiting[b].fetch_sub(1, Ordering::SeqCst);
        }
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        uncount();
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn uncount_at_exit(_code: i32, _arg: pg_sys::Datum) {
    uncount();
}

/// Takes this backend out of vacuum's horizon for the wait (`backend_xmin` NULL), when no
/// snapshot it holds can be used again: the statement is `SELECT ... FROM jobs.claim(...)`
/// (or `jobs.wait_for_job(...)`) alone (src/commit/statement.rs), in its own transaction, in READ COMMITTED. Then the statement's
/// own snapshot is read by nothing after the claim returns (it scans no table, calls nothing
/// else), and each look of the claim after the wait takes a new snapshot, which advertises
/// the new xmin. Anything else
/// (a claim joined with a table, called from another function or inside BEGIN, where an open
/// cursor or a later use of an older snapshot could read rows vacuum removed meanwhile) keeps
/// its snapshot, and its xmin, for the wait.
fn release_xmin_if_unused() {
    unsafe {
        if pg_sys::IsTransactionBlock()
            || pg_sys::XactIsoLevel != pg_sys::XACT_READ_COMMITTED as i32
            || !(crate::commit::statement::is_a_bare_call(c"claim")
                || crate::commit::statement::is_a_bare_call(c"wait_for_job"))
        {
            return;
        }
        pg_sys::InvalidateCatalogSnapshot();
        (*pg_sys::MyProc).xmin = pg_sys::InvalidTransactionId;
    }
}
