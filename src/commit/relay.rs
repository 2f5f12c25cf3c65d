//! The NOTIFY relay: with `shared_preload_libraries = 'pg_jobs'`, the application's commit
//! sends no NOTIFY.
//!
//! A transaction that sends `NOTIFY` takes a database-wide lock at its commit and holds it
//! through the commit's WAL flush, so every such commit waits for the one before it (group
//! commit is lost). `jobs._wake` notifies when a queue with no ready job gets one, which is
//! the common case while workers keep up; with the library preloaded it calls
//! `jobs._notify(queue)` instead, which notes the queue, and at the transaction's commit the
//! noted queues go into a ring in shared memory and the sweeper of the database (the relay) is
//! woken through its latch. The sweeper sends `NOTIFY pg_jobs, '<queue>'` for each, from one
//! short transaction of its own (`synchronous_commit = off`: a notification lost in a crash
//! wakes nobody who was not polling anyway), and at most one such transaction per `GAP`, so a
//! burst of commits becomes one notification per queue.
//!
//! Falls back to the in-transaction NOTIFY of before, decided at the call: without preload,
//! when the database has no sweeper (`pg_jobs.max_databases` reached, `pg_jobs.database_name`
//! names another) or its sweeper is vacuuming, and for a queue name longer than a ring entry
//! holds. Each database has a share of the ring (`SHARE` entries), so one database's burst
//! cannot crowd out another's. A full share loses no wake-up: the sweeper is told, and sends
//! one `NOTIFY pg_jobs, '*'` (every queue: a listening worker claims from all its queues), not
//! a notification per queue of the database (which one transaction waking 257 queues turned
//! into 51,389, one per queue ever used). A sweeper that exits between a call and its commit loses that commit's
//! notifications (workers that LISTEN poll as well); a savepoint rolled back after the call
//! still notifies at the commit (a worker woken for nothing claims nothing).
//!
//! The ring also carries the signals of src/commit/outcomes.rs (`pg_jobs_cancel`, `pg_jobs_dead`),
//! handed over after the commit; the relay merges the deaths of a queue into one signal. A
//! full ring loses them, and the relay then says so (`*`, a null queue).

use crate::commit::xact;
use pgrx::lwlock::PgLwLock;
use pgrx::prelude::*;
use pgrx::{pg_shmem_init, PGRXSharedMemory};
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{CStr, CString};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Entries the ring holds between two relays (all databases).
const RING: usize = 1024;
/// Entries of one database the ring holds (a database's share): a transaction waking many
/// queues, or signalling many jobs, in one database fills its share and not the ring, so the
/// other databases' wake-ups and signals still fit.
const SHARE: u16 = 64;
/// The longest queue name (in bytes) the ring holds; longer ones are notified in the
/// transaction.
const NAME_BYTES: usize = 200;
/// Sweepers that relay at once: the cap of `pg_jobs.max_databases`.
const RELAYS: usize = 128;
/// The shortest time between two relays of one sweeper.
pub const GAP: Duration = Duration::from_millis(5);

#[derive(Copy, Clone)]
struct Entry {
    db: u32,
    kind: Kind,
    len: u16,
    /// A queue's name (a wake-up, a death).
    name: [u8; NAME_BYTES],
    /// A job's id (a cancel; the one death of a transaction).
    id: [u8; 16],
    /// Jobs that died.
    count: u32,
}

#[derive(Copy, Clone, PartialEq, Eq)]
enum Kind {
    Wake,
    Cancelled,
    Dead,
}

impl Entry {
    fn new(db: u32, kind: Kind, name: &str) -> Entry {
        let mut entry = Entry {
            db,
            kind,
            len: name.len() as u16,
            name: [0; NAME_BYTES],
            id: [0; 16],
            count: 0,
        };
        entry.name[..name.len()].copy_from_slice(name.as_bytes());
        entry
    }

    fn name(&self) -> String {
        String::from_utf8_lossy(&self.name[..self.len as usize]).into_owned()
    }
}

#[derive(Copy, Clone, Default)]
struct Relay {
    /// 0: a free slot.
    db: u32,
    pid: i32,
    /// The sweeper's `MyLatch` (in shared memory, the same address in every process).
    latch: usize,
    /// Relaying now: false while the sweeper vacuums.
    ready: bool,
    /// Entries of this database in the ring now (at most SHARE).
    held: u16,
    /// Its share was full: notify `*` (every queue) once.
    overflowed: bool,
    /// The ring was full: signals were lost.
    lost_signals: bool,
}

pub struct Ring {
    len: usize,
    entries: [Entry; RING],
    relays: [Relay; RELAYS],
}

impl Default for Ring {
    fn default() -> Self {
        Ring {
            len: 0,
            entries: [Entry::new(0, Kind::Wake, ""); RING],
            relays: [Relay::default(); RELAYS],
        }
    }
}

unsafe impl PGRXSharedMemory for Ring {}

static RELAY: PgLwLock<Ring> = unsafe { PgLwLock::new(c"pg_jobs relay") };
static SHARED: AtomicBool = AtomicBool::new(false);

/// From `_PG_init` while preloading.
pub fn init() {
    pg_shmem_init!(RELAY);
    SHARED.store(true, Ordering::SeqCst);
}

fn shared() -> bool {
    SHARED.load(Ordering::SeqCst)
}

fn this_database() -> u32 {
    unsafe { pg_sys::MyDatabaseId }.to_u32()
}

thread_local! {
    /// Queues this transaction notifies through the relay, at its commit.
    static PENDING: RefCell<BTreeSet<String>> = const { RefCell::new(BTreeSet::new()) };
}

/// `jobs._notify(queue)`: `NOTIFY pg_jobs, queue` at this transaction's commit, sent by the
/// database's sweeper when it relays, else by this transaction.
#[pg_extern(volatile, parallel_unsafe, name = "_notify")]
fn notify(queue: &str) {
    if queue.len() <= NAME_BYTES && relaying(this_database()) {
        PENDING.with(|p| p.borrow_mut().insert(queue.to_owned()));
        xact::register(&HOOKS);
    } else {
        send_one(queue);
    }
}

// async.h is not among pgrx's bindings.
unsafe extern "C-unwind" {
    #[link_name = "Async_Notify"]
    fn async_notify(channel: *const std::ffi::c_char, payload: *const std::ffi::c_char);
}

/// `NOTIFY pg_jobs, queue` in the current transaction (an error is raised as PostgreSQL's).
fn send_one(queue: &str) {
    notify_now(c"pg_jobs", queue);
}

/// `jobs._relays()`: whether this database's sweeper relays notifications now, so that one
/// costs the transaction nothing (jobs._wake then notifies for every queue it made work in, not
/// only for a queue that had no ready job).
#[pg_extern(volatile, parallel_unsafe, name = "_relays")]
fn relays() -> bool {
    relaying(this_database())
}

/// Whether the sweeper of `db` relays now.
fn relaying(db: u32) -> bool {
    shared() && RELAY.share().relays.iter().any(|r| r.db == db && r.ready)
}

/// Its hooks at the end of a transaction (src/commit/xact.rs).
static HOOKS: xact::Hooks = xact::Hooks {
    order: 3,
    before_commit: None,
    at_end: Some(at_end),
    at_subtransaction_abort: None,
};

/// The end of a transaction that called `_notify`: at a commit, hands its queues to the
/// sweeper and wakes it; at an abort, forgets them.
fn at_end(commit: bool) {
    let queues = PENDING.with(|p| std::mem::take(&mut *p.borrow_mut()));
    if !commit || queues.is_empty() || !shared() {
        return;
    }
    let db = this_database();
    let mut ring = RELAY.exclusive();
    let Some(at) = ring.relays.iter().position(|r| r.db == db) else {
        return; // its sweeper is gone
    };
    for queue in &queues {
        if ring.len == RING || ring.relays[at].held >= SHARE {
            ring.relays[at].overflowed = true;
            break;
        }
        let len = ring.len;
        ring.entries[len] = Entry::new(db, Kind::Wake, queue);
        ring.len += 1;
        ring.relays[at].held += 1;
    }
    let latch = ring.relays[at].latch as *mut pg_sys::Latch;
    unsafe { pg_sys::SetLatch(latch) };
}

/// From the sweeper: relays for this database from now on, until it exits.
pub fn register() {
    if !shared() {
        return;
    }
    let db = this_database();
    {
        let mut ring = RELAY.exclusive();
        let Some(at) = ring
            .relays
            .iter()
            .position(|r| r.db == db)
            .or_else(|| ring.relays.iter().position(|r| r.db == 0))
        else {
            return;
        };
        ring.relays[at] = Relay {
            db,
            pid: unsafe { pg_sys::MyProcPid },
            latch: unsafe { pg_sys::MyLatch } as usize,
            ready: true,
            held: 0,
            overflowed: false,
            lost_signals: false,
        };
    }
    unsafe { pg_sys::before_shmem_exit(Some(unregister), pg_sys::Datum::from(0)) };
}

#[pg_guard]
unsafe extern "C-unwind" fn unregister(_code: i32, _arg: pg_sys::Datum) {
    let pid = unsafe { pg_sys::MyProcPid };
    let mut ring = RELAY.exclusive();
    let db = this_database();
    for r in ring.relays.iter_mut().filter(|r| r.pid == pid) {
        *r = Relay::default();
    }
    // Its database's queues wait for no one now (the database may be gone for good).
    let mut kept = 0;
    for i in 0..ring.len {
        if ring.entries[i].db != db {
            ring.entries[kept] = ring.entries[i];
            kept += 1;
        }
    }
    ring.len = kept;
}

/// From the sweeper: relays (true) or not, while it vacuums (false).
pub fn set_ready(ready: bool) {
    if !shared() {
        return;
    }
    let pid = unsafe { pg_sys::MyProcPid };
    for r in RELAY.exclusive().relays.iter_mut().filter(|r| r.pid == pid) {
        r.ready = ready;
    }
}

/// What a sweeper has to relay: the queues committed since its last relay, and whether the
/// ring overflowed (then every queue of the database); the signals (src/commit/outcomes.rs), the
/// deaths of a queue in one, and whether some were lost to a full ring.
#[derive(Default)]
pub struct Due {
    pub queues: BTreeSet<String>,
    pub every_queue: bool,
    pub signals: BTreeSet<Signal>,
    pub lost_signals: bool,
}

/// From the sweeper: takes this database's queues and signals out of the ring.
pub fn take() -> Due {
    let mut due = Due::default();
    if !shared() {
        return due;
    }
    let db = this_database();
    let pid = unsafe { pg_sys::MyProcPid };
    let mut dead: BTreeMap<String, (u32, [u8; 16])> = BTreeMap::new();
    let mut ring = RELAY.exclusive();
    let mut kept = 0;
    for i in 0..ring.len {
        let entry = ring.entries[i];
        if entry.db != db {
            ring.entries[kept] = entry;
            kept += 1;
            continue;
        }
        match entry.kind {
            Kind::Wake => {
                due.queues.insert(entry.name());
            }
            Kind::Cancelled => {
                due.signals
                    .insert(Signal::Cancelled(pgrx::Uuid::from_bytes(entry.id)));
            }
            Kind::Dead => dead.entry(entry.name()).or_insert((0, entry.id)).0 += entry.count,
        }
    }
    ring.len = kept;
    for r in ring.relays.iter_mut().filter(|r| r.pid == pid) {
        r.held = 0;
        due.every_queue |= std::mem::take(&mut r.overflowed);
        due.lost_signals |= std::mem::take(&mut r.lost_signals);
    }
    drop(ring);
    // The deaths of a queue since the last relay, in one signal.
    for (queue, (count, id)) in dead {
        due.signals.insert(Signal::Dead {
            queue,
            count,
            id: Some(pgrx::Uuid::from_bytes(id)),
        });
    }
    due
}

/// Sends `NOTIFY pg_jobs, queue` for each, in the current transaction.
pub fn send(queues: &BTreeSet<String>) {
    for queue in queues {
        send_one(queue);
    }
}

/// Sends the signals, in the current transaction; when some were lost, `*` on
/// `pg_jobs_cancel` (every worker checks what it holds) and `{"queue": null, "count": null}`
/// on `pg_jobs_dead` (look at the table).
pub fn send_signals(signals: &BTreeSet<Signal>, lost: bool) {
    for signal in signals {
        notify_now(signal.channel(), &signal.payload());
    }
    if lost {
        notify_now(c"pg_jobs_cancel", "*");
        notify_now(c"pg_jobs_dead", r#"{"queue": null, "count": null}"#);
    }
}

/// Whether this database's sweeper relays the signals of a transaction committing now.
pub fn relays_signals() -> bool {
    relaying(this_database())
}

/// Whether a ring entry holds the signal.
pub fn carries(signal: &Signal) -> bool {
    match signal {
        Signal::Cancelled(_) => true,
        Signal::Dead { queue, .. } => queue.len() <= NAME_BYTES,
    }
}

/// `NOTIFY channel, payload` in the current transaction (an error is raised as PostgreSQL's).
pub fn notify_now(channel: &CStr, payload: &str) {
    let payload = CString::new(payload).expect("a text has no NUL");
    unsafe {
        pg_sys::ffi::pg_guard_ffi_boundary(|| async_notify(channel.as_ptr(), payload.as_ptr()))
    };
}

/// After a commit (src/commit/outcomes.rs): hands its signals to the sweeper and wakes it. A full
/// ring loses them, and the sweeper says so (`send_signals`).
pub fn hand_over(signals: &[Signal]) {
    if signals.is_empty() || !shared() {
        return;
    }
    let db = this_database();
    let mut ring = RELAY.exclusive();
    let Some(at) = ring.relays.iter().position(|r| r.db == db) else {
        return; // its sweeper is gone
    };
    for signal in signals {
        if ring.len == RING || ring.relays[at].held >= SHARE {
            ring.relays[at].lost_signals = true;
            break;
        }
        let entry = match signal {
            Signal::Cancelled(id) => {
                let mut entry = Entry::new(db, Kind::Cancelled, "");
                entry.id = **id;
                entry
            }
            Signal::Dead { queue, count, id } => {
                let mut entry = Entry::new(db, Kind::Dead, queue);
                entry.count = *count;
                entry.id = id.map(|id| *id).unwrap_or_default();
                entry
            }
        };
        let len = ring.len;
        ring.entries[len] = entry;
        ring.len += 1;
        ring.relays[at].held += 1;
    }
    let latch = ring.relays[at].latch as *mut pg_sys::Latch;
    unsafe { pg_sys::SetLatch(latch) };
}

/// A signal, as the relay carries it.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub enum Signal {
    /// `pg_jobs_cancel`: a running job was cancelled.
    Cancelled(pgrx::Uuid),
    /// `pg_jobs_dead`: jobs of a queue died: how many, and the id when one.
    Dead {
        queue: String,
        count: u32,
        id: Option<pgrx::Uuid>,
    },
}

impl Signal {
    pub fn channel(&self) -> &'static std::ffi::CStr {
        match self {
            Signal::Cancelled(_) => c"pg_jobs_cancel",
            Signal::Dead { .. } => c"pg_jobs_dead",
        }
    }

    pub fn payload(&self) -> String {
        match self {
            Signal::Cancelled(id) => id.to_string(),
            Signal::Dead { queue, count, id } => serde_json::to_string(&DeadPayload {
                count: *count,
                id: id.filter(|_| *count == 1).map(|id| id.to_string()),
                queue,
            })
            .expect("a pg_jobs_dead payload serializes"),
        }
    }
}

/// The payload of `pg_jobs_dead`: `{"count": n, "id": ..., "queue": q}`, the id when n = 1
/// (keys in this order, as before they were typed).
#[derive(serde::Serialize)]
struct DeadPayload<'a> {
    count: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<String>,
    queue: &'a str,
}
