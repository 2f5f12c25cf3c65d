//! Outcome counters (`jobs.outcome_stats`) and the signals to holders and watchers
//! (`pg_jobs_cancel`, `pg_jobs_dead`).
//!
//! The statements that settle a job name what happened to it, row by row, in their RETURNING
//! lists (`jobs._outcome(queue, outcome, id)`; a RETURNING list is computed once per row
//! written, after the write, so a row a concurrent change made the statement re-check is
//! counted once). What a transaction noted takes effect at its commit, and not at all if it
//! rolls back; a savepoint rolled back forgets what was noted under it.
//!
//! Counters: with `shared_preload_libraries = 'pg_jobs'`, one slot per queue of each database
//! in shared memory, `SLOTS` in all, holding one atomic counter per outcome; a commit adds to
//! them with atomic increments (a queue's slot is found under a shared lock once per backend,
//! and made under the exclusive lock the first time a queue is counted). No row is written,
//! so settles do not wait on each other for it. Counting starts with the server (and again
//! after a crash restart: `since`). A database takes at most `PER_DATABASE` slots: its queues
//! beyond them (and names over `NAME_BYTES`) are counted together in its row whose queue is
//! NULL, so a database making thousands of queues leaves the other databases their room;
//! queues beyond the whole table's room are counted in a NULL row shown to every database. Without preload there is no shared memory: nothing is counted,
//! and `jobs.outcome_stats` answers no rows.
//!
//! Signals: a running job cancelled (`jobs._cancelling`) is signalled on `pg_jobs_cancel`
//! (payload: its id); jobs that end `dead` on `pg_jobs_dead` (payload: JSON, the queue and the
//! id, or the queue and how many when several died in one transaction or relay). Through the
//! relay when the database's sweeper relays (src/commit/relay.rs), else by NOTIFY in the transaction
//! (just before its commit). Anybody who can connect can NOTIFY any channel: a signal is a
//! hint to look, never a fact (a worker heartbeats the job before it stops the handler).

use crate::commit::relay::Signal;
use crate::commit::xact;
use pgrx::atomics::PgAtomic;
use pgrx::lwlock::PgLwLock;
use pgrx::prelude::*;
use pgrx::{pg_shmem_init, PGRXSharedMemory};
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};

/// What `jobs.outcome_stats` counts, in its column order.
pub const OUTCOMES: [&str; 7] = [
    "completed",
    "retried",
    "dead",
    "failed",
    "cancelled",
    "timed_out",
    "lease_lapsed",
];
const DEAD: usize = 2;
/// The outcomes that end a job: completed, dead, failed, cancelled.
const ENDED: [usize; 4] = [0, DEAD, 3, 4];
/// Queue slots in shared memory (all databases).
const SLOTS: usize = 2048;
/// Queue slots one database may take (its queues beyond them are counted in its row whose
/// queue is NULL), so one database's thousands of queues leave room for the others'.
const PER_DATABASE: usize = 128;
/// The longest queue name (in bytes) a slot holds: any (128 characters of 4 bytes).
const NAME_BYTES: usize = 512;

#[derive(Copy, Clone)]
struct Name {
    /// 0: a free slot.
    db: u32,
    len: u16,
    bytes: [u8; NAME_BYTES],
}

pub struct Names {
    names: [Name; SLOTS],
}

impl Default for Names {
    fn default() -> Self {
        Names {
            names: [Name {
                db: 0,
                len: 0,
                bytes: [0; NAME_BYTES],
            }; SLOTS],
        }
    }
}

unsafe impl PGRXSharedMemory for Names {}

pub struct Counts {
    counts: [[AtomicU64; OUTCOMES.len()]; SLOTS],
    /// Queues the table had no room for.
    unplaced: [AtomicU64; OUTCOMES.len()],
    /// When counting started (a TimestampTz).
    since: AtomicI64,
}

unsafe impl PGRXSharedMemory for Counts {}

static NAMES: PgLwLock<Names> = unsafe { PgLwLock::new(c"pg_jobs outcome names") };
static COUNTS: PgAtomic<Counts> = unsafe { PgAtomic::new(c"pg_jobs outcome counts") };
static SHARED: AtomicBool = AtomicBool::new(false);

/// From `_PG_init` while preloading.
pub fn init() {
    pg_shmem_init!(NAMES);
    pg_shmem_init!(
        COUNTS = Counts {
            counts: std::array::from_fn(|_| std::array::from_fn(|_| AtomicU64::new(0))),
            unplaced: std::array::from_fn(|_| AtomicU64::new(0)),
            since: AtomicI64::new(unsafe { pg_sys::GetCurrentTimestamp() }),
        }
    );
    SHARED.store(true, Ordering::SeqCst);
}

fn counts() -> Option<&'static Counts> {
    SHARED.load(Ordering::SeqCst).then(|| COUNTS.get())
}

fn this_database() -> u32 {
    unsafe { pg_sys::MyDatabaseId }.to_u32()
}

/// Where a queue of this database probes first (FNV-1a).
fn home(db: u32, queue: &str) -> usize {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in db.to_le_bytes().iter().chain(queue.as_bytes()) {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    (hash % SLOTS as u64) as usize
}

/// The slot of a queue of this database: found, or made; None when the table is full.
fn slot_of(queue: &str) -> Option<usize> {
    thread_local! {
        static KNOWN: RefCell<HashMap<String, Option<usize>>> = RefCell::new(HashMap::new());
    }
    if let Some(known) = KNOWN.with(|k| k.borrow().get(queue).copied()) {
        return known;
    }
    let db = this_database();
    let probe = |names: &Names, queue: &str| -> Result<usize, Option<usize>> {
        // Ok: the queue's slot; Err: the first free slot on its path (None: no room). The
        // queue "" is the database's row for the queues beyond its share.
        let start = home(db, queue);
        for step in 0..SLOTS {
            let at = (start + step) % SLOTS;
            let name = &names.names[at];
            if name.db == 0 {
                return Err(Some(at));
            }
            if name.db == db && &name.bytes[..name.len as usize] == queue.as_bytes() {
                return Ok(at);
            }
        }
        Err(None)
    };
    let shared = probe(&NAMES.share(), queue); // (the shared lock is released here)
    let found = match shared {
        Ok(at) => Some(at),
        Err(_) => {
            let mut names = NAMES.exclusive();
            let full = queue.len() > NAME_BYTES
                || names
                    .names
                    .iter()
                    .filter(|n| n.db == db && n.len > 0)
                    .count()
                    >= PER_DATABASE;
            let queue = if full { "" } else { queue };
            match probe(&names, queue) {
                Ok(at) => Some(at),
                Err(None) => None,
                Err(Some(at)) => {
                    let name = &mut names.names[at];
                    name.bytes[..queue.len()].copy_from_slice(queue.as_bytes());
                    name.len = queue.len() as u16;
                    name.db = db;
                    Some(at)
                }
            }
        }
    };
    KNOWN.with(|k| k.borrow_mut().insert(queue.to_owned(), found));
    found
}

enum Noted {
    /// n jobs of a queue with an outcome (a statement's rows in a row: one entry).
    Counted {
        queue: String,
        outcome: usize,
        n: u64,
    },
    Dead {
        queue: String,
        id: pgrx::Uuid,
    },
    Cancelled {
        id: pgrx::Uuid,
    },
}

thread_local! {
    /// What this transaction noted, each with the subtransaction it was noted in.
    static PENDING: RefCell<Vec<(pg_sys::SubTransactionId, Noted)>> = const { RefCell::new(Vec::new()) };
}

/// Its hooks at the end of a transaction (src/commit/xact.rs).
static HOOKS: xact::Hooks = xact::Hooks {
    order: 4,
    before_commit: Some(before_commit),
    at_end: Some(at_end),
    at_subtransaction_abort: Some(forget_since),
};

fn note(noted: Noted) {
    xact::register(&HOOKS);
    let sub = unsafe { pg_sys::GetCurrentSubTransactionId() };
    PENDING.with(|p| p.borrow_mut().push((sub, noted)));
}

/// A savepoint rolled back: what it and the subtransactions under it noted is forgotten (they
/// all began after it, so their ids are at least its own).
fn forget_since(sub: pg_sys::SubTransactionId) {
    PENDING.with(|p| p.borrow_mut().retain(|(at, _)| *at < sub));
}

/// `jobs._outcome(queue, outcome, id)`: counts the outcome for the queue, and signals a job
/// that died on `pg_jobs_dead`, at this transaction's commit. Answers true, to sit in a
/// RETURNING list.
#[pg_extern(volatile, parallel_unsafe, name = "_outcome")]
fn outcome(queue: &str, outcome: &str, id: default!(Option<pgrx::Uuid>, "NULL")) -> bool {
    let Some(at) = OUTCOMES.iter().position(|o| *o == outcome) else {
        ereport!(
            ERROR,
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("jobs._outcome: no outcome is called {outcome:?}")
        );
    };
    if at == DEAD {
        if let Some(id) = id {
            note(Noted::Dead {
                queue: queue.to_owned(),
                id,
            });
        }
    }
    if counts().is_some() {
        count(queue, at);
    }
    true
}

/// Notes one more job of the queue with the outcome: the last entry counted again when it is
/// the same (one entry for a batch of a queue), else a new one.
fn count(queue: &str, outcome: usize) {
    let sub = unsafe { pg_sys::GetCurrentSubTransactionId() };
    let counted = PENDING.with(|p| match p.borrow_mut().last_mut() {
        Some((
            at,
            Noted::Counted {
                queue: q,
                outcome: o,
                n,
            },
        )) if *at == sub && *o == outcome && q == queue => {
            *n += 1;
            true
        }
        _ => false,
    });
    if !counted {
        note(Noted::Counted {
            queue: queue.to_owned(),
            outcome,
            n: 1,
        });
    }
}

/// `jobs._cancelling(id, was_running, value)`: signals `pg_jobs_cancel` at this transaction's
/// commit when the job being cancelled was running; answers `value`. It sits in the SET list
/// of jobs.cancel, which sees the row as it is when the update takes it (also after waiting
/// for a concurrent claim), where RETURNING sees only the new row. A SET list can be computed
/// twice for one row (once more after a concurrent change): then a job is signalled that is no
/// longer running, which its worker finds out by heartbeating (a signal is a hint).
#[pg_extern(volatile, parallel_unsafe, name = "_cancelling")]
fn cancelling(
    id: pgrx::Uuid,
    was_running: bool,
    value: TimestampWithTimeZone,
) -> TimestampWithTimeZone {
    if was_running {
        note(Noted::Cancelled { id });
    }
    value
}

/// What this transaction signals: one per cancelled job, and per queue one for its dead.
fn signals(pending: &[(pg_sys::SubTransactionId, Noted)]) -> Vec<Signal> {
    let mut dead: BTreeMap<&str, (u32, pgrx::Uuid)> = BTreeMap::new();
    let mut out = Vec::new();
    for (_, noted) in pending {
        match noted {
            Noted::Cancelled { id } => out.push(Signal::Cancelled(*id)),
            Noted::Dead { queue, id } => dead.entry(queue).or_insert((0, *id)).0 += 1,
            Noted::Counted { .. } => {}
        }
    }
    out.extend(dead.into_iter().map(|(queue, (count, id))| Signal::Dead {
        queue: queue.to_owned(),
        count,
        id: Some(id),
    }));
    out
}

/// Just before a commit: the signals the relay cannot carry are sent now, by NOTIFY in this
/// transaction; the others wait for the commit.
fn before_commit() {
    let has_signals = PENDING.with(|p| {
        p.borrow()
            .iter()
            .any(|(_, n)| !matches!(n, Noted::Counted { .. }))
    });
    if !has_signals {
        return;
    }
    let relayed = crate::commit::relay::relays_signals();
    PENDING.with(|p| {
        let mut p = p.borrow_mut();
        for signal in signals(&p) {
            if !(relayed && crate::commit::relay::carries(&signal)) {
                crate::commit::relay::notify_now(signal.channel(), &signal.payload());
            }
        }
        if !relayed {
            p.retain(|(_, n)| matches!(n, Noted::Counted { .. }));
        }
    });
}

/// The end of a transaction: at a commit, the counts go to shared memory and the signals not
/// sent yet to the relay; else they are forgotten.
fn at_end(commit: bool) {
    let pending = PENDING.with(|p| std::mem::take(&mut *p.borrow_mut()));
    if !commit || pending.is_empty() {
        return;
    }
    if let Some(c) = counts() {
        for (_, noted) in &pending {
            if let Noted::Counted { queue, outcome, n } = noted {
                let counter = match slot_of(queue) {
                    Some(at) => &c.counts[at][*outcome],
                    None => &c.unplaced[*outcome],
                };
                counter.fetch_add(*n, Ordering::Relaxed);
            }
        }
    }
    // Jobs that ended wake who waits for them (jobs.wait_for_job).
    crate::commit::wakeups::bump_now(pending.iter().filter_map(|(_, noted)| match noted {
        Noted::Counted { queue, outcome, .. } if ENDED.contains(outcome) => {
            Some(crate::commit::wakeups::finished_key(queue))
        }
        _ => None,
    }));
    let relayed: Vec<Signal> = signals(&pending)
        .into_iter()
        .filter(crate::commit::relay::carries)
        .collect();
    crate::commit::relay::hand_over(&relayed);
}

/// `jobs._outcome_stats()`: this database's counters, a row per queue counted (and one with a
/// NULL queue for those the table had no room for, server-wide); no rows without preload.
#[allow(clippy::type_complexity)]
#[pg_extern(volatile, parallel_safe, name = "_outcome_stats")]
fn outcome_stats() -> TableIterator<
    'static,
    (
        name!(queue, Option<String>),
        name!(completed, i64),
        name!(retried, i64),
        name!(dead, i64),
        name!(failed, i64),
        name!(cancelled, i64),
        name!(timed_out, i64),
        name!(lease_lapsed, i64),
        name!(since, Option<TimestampWithTimeZone>),
    ),
> {
    let Some(c) = counts() else {
        return TableIterator::new(Vec::new());
    };
    let db = this_database();
    let since = TimestampWithTimeZone::try_from(c.since.load(Ordering::Relaxed)).ok();
    let row = |queue: Option<String>, counters: &[AtomicU64; OUTCOMES.len()]| {
        let n: Vec<i64> = counters
            .iter()
            .map(|x| x.load(Ordering::Relaxed) as i64)
            .collect();
        (queue, n[0], n[1], n[2], n[3], n[4], n[5], n[6], since)
    };
    let mut rows = Vec::new();
    {
        let names = NAMES.share();
        for (at, name) in names.names.iter().enumerate() {
            if name.db == db {
                let queue = String::from_utf8_lossy(&name.bytes[..name.len as usize]).into_owned();
                rows.push(row((name.len > 0).then_some(queue), &c.counts[at]));
            }
        }
    }
    if c.unplaced.iter().any(|x| x.load(Ordering::Relaxed) > 0) {
        rows.push(row(None, &c.unplaced));
    }
    rows.sort_by(|a, b| a.0.cmp(&b.0));
    TableIterator::new(rows)
}
