//! The launcher: one background worker per server that finds the databases where pg_jobs is
//! installed and keeps one sweeper (src/background/sweeper.rs) running in each, up to
//! `pg_jobs.max_databases`. It exists only when the library is preloaded.
//!
//! A worker can connect to one database for its life, and only a process connected to a
//! database can read its `pg_extension`. So the launcher, connected to none, reads the list of
//! databases (`pg_database`, a catalog shared by all of them) every `pg_jobs.sweep_interval`
//! and starts a sweeper in each database it has not yet looked into. A sweeper that finds no
//! pg_jobs there says so and exits; the launcher looks again a minute later, or at once when a
//! `CREATE EXTENSION pg_jobs` commits anywhere (the utility hook below counts those commits
//! and wakes it). A sweeper whose extension is dropped exits the same way. A sweeper that
//! stopped for any other reason (pg_terminate_backend, an error) is started again after
//! `RESTART`.
//!
//! A session connected to a database stops `DROP DATABASE`, `ALTER DATABASE ... RENAME` or
//! `SET TABLESPACE`, and `CREATE DATABASE ... TEMPLATE` of it. The hook therefore stops that
//! database's sweeper first and holds the launcher off it for `PAUSE`; every shared state the
//! two read is under one lock, so a sweeper starting at that moment either is seen and
//! stopped or sees the pause and leaves.
//!
//! The launcher starts when recovery has finished: on a standby nothing runs until promotion.

use crate::commit::xact;
use crate::gucs;
use pgrx::atomics::PgAtomic;
use pgrx::bgworkers::{
    BackgroundWorker, BackgroundWorkerBuilder, BackgroundWorkerStatus, BgWorkerStartTime,
    DynamicBackgroundWorker, SignalWakeFlags,
};
use pgrx::lwlock::PgLwLock;
use pgrx::prelude::*;
use pgrx::{pg_shmem_init, PGRXSharedMemory};
use std::cell::Cell;
use std::collections::HashMap;
use std::ffi::CStr;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The size of the shared table: the most databases `pg_jobs.max_databases` may allow.
const MAX_DATABASES: usize = gucs::MAX_DATABASES_CAP;
/// How long after a sweeper stopped for a reason other than a missing extension it is started
/// again (the static worker's restart time before the launcher).
const RESTART: Duration = Duration::from_secs(2);
/// How often a database without pg_jobs is looked into again, besides at every commit of a
/// `CREATE EXTENSION pg_jobs`.
const RECHECK: Duration = Duration::from_secs(60);
/// How long the launcher keeps off a database that a command needs without sessions; a DROP
/// DATABASE waits up to 5 s for the others to leave.
const PAUSE_US: i64 = 10_000_000;
const PAUSES: usize = 16;
/// How long the hook waits for a stopped sweeper to leave (a DROP DATABASE waits as long).
const EXIT_WAIT: Duration = Duration::from_secs(5);
const NAME: &str = "pg_jobs launcher";

#[derive(Copy, Clone, Default)]
struct Slot {
    /// The database (0: a free slot).
    db: u32,
    /// The sweeper's process, once it runs; 0 before and after.
    pid: i32,
    /// The launcher generation that started it.
    generation: u64,
    /// The sweeper found no pg_jobs and left.
    no_extension: bool,
}

#[derive(Copy, Clone, Default)]
struct Pause {
    db: u32,
    until: i64,
}

#[derive(Copy, Clone)]
pub struct Shared {
    slots: [Slot; MAX_DATABASES],
    pauses: [Pause; PAUSES],
}

impl Default for Shared {
    fn default() -> Self {
        Shared {
            slots: [Slot::default(); MAX_DATABASES],
            pauses: [Pause::default(); PAUSES],
        }
    }
}

unsafe impl PGRXSharedMemory for Shared {}

static SHARED: PgLwLock<Shared> = unsafe { PgLwLock::new(c"pg_jobs launcher") };
static LAUNCHER_PID: PgAtomic<AtomicI32> = unsafe { PgAtomic::new(c"pg_jobs launcher pid") };
/// Bumped by each launcher as it starts; a sweeper of an earlier one leaves.
static GENERATION: PgAtomic<AtomicU64> = unsafe { PgAtomic::new(c"pg_jobs launcher generation") };
/// Commits of `CREATE EXTENSION pg_jobs` since the server started.
static CREATED: PgAtomic<AtomicU64> = unsafe { PgAtomic::new(c"pg_jobs extensions created") };

static mut PREV_UTILITY: pg_sys::ProcessUtility_hook_type = None;

/// From `_PG_init` while preloading: the shared state, the launcher, the utility hook.
pub fn init() {
    pg_shmem_init!(SHARED);
    pg_shmem_init!(LAUNCHER_PID);
    pg_shmem_init!(GENERATION);
    pg_shmem_init!(CREATED);
    BackgroundWorkerBuilder::new(NAME)
        .set_type(NAME)
        .set_library("pg_jobs")
        .set_function("pg_jobs_launcher_main")
        .enable_spi_access()
        .set_start_time(BgWorkerStartTime::RecoveryFinished)
        .set_restart_time(Some(RESTART))
        .load();
    unsafe {
        PREV_UTILITY = pg_sys::ProcessUtility_hook;
        pg_sys::ProcessUtility_hook = Some(utility_hook);
    }
}

enum State {
    /// `created`: CREATED when it was started.
    Running {
        handle: DynamicBackgroundWorker,
        created: u64,
    },
    /// Not running; start it at this instant, or, when the last sweeper found no pg_jobs
    /// (`no_extension`), as soon as CREATED moves past `created`. `kept`: its sweeper stopped
    /// (terminated, an error) and is started again after RESTART: its place among the
    /// `max_databases` swept keeps it, so databases made meanwhile (clones of a template with
    /// pg_jobs, say) cannot take it.
    Waiting {
        at: Instant,
        no_extension: bool,
        created: u64,
        kept: bool,
    },
}

fn created_count() -> u64 {
    CREATED.get().load(Ordering::SeqCst)
}

#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn pg_jobs_launcher_main(_arg: pg_sys::Datum) {
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGHUP | SignalWakeFlags::SIGTERM);
    BackgroundWorker::connect_worker_to_spi(None, None);
    let generation = GENERATION.get().fetch_add(1, Ordering::SeqCst) + 1;
    LAUNCHER_PID
        .get()
        .store(unsafe { pg_sys::MyProcPid }, Ordering::SeqCst);
    log!("{NAME}: started");
    let mut databases: HashMap<u32, State> = HashMap::new();
    let mut cap_logged = false;
    loop {
        if BackgroundWorker::sighup_received() {
            unsafe { pg_sys::ProcessConfigFile(pg_sys::GucContext::PGC_SIGHUP) };
        }
        let listed = BackgroundWorker::transaction(list_databases);
        let only = gucs::database_name();
        let wanted: Vec<(u32, String)> = listed
            .into_iter()
            .filter(|(_, name)| only.as_deref().is_none_or(|only| only == name))
            .collect();

        // Databases gone, or no longer wanted: stop their sweepers and forget them.
        databases.retain(|db, state| {
            let keep = wanted.iter().any(|(oid, _)| oid == db);
            if !keep {
                let idle = State::Waiting {
                    at: Instant::now(),
                    no_extension: false,
                    created: 0,
                    kept: false,
                };
                if let State::Running { handle, .. } = std::mem::replace(state, idle) {
                    let _ = handle.terminate();
                }
                free_slot(*db);
            }
            keep
        });

        let mut running = databases
            .values()
            .filter(|s| matches!(s, State::Running { .. } | State::Waiting { kept: true, .. }))
            .count();
        for (db, name) in &wanted {
            let state = databases.entry(*db).or_insert(State::Waiting {
                at: Instant::now(),
                no_extension: false,
                created: 0,
                kept: false,
            });
            if let State::Running { handle, created } = state {
                match handle.pid() {
                    Ok(_) | Err(BackgroundWorkerStatus::NotYetStarted) => continue,
                    Err(_) => {
                        let no_extension = free_slot(*db);
                        let wait = if no_extension { RECHECK } else { RESTART };
                        *state = State::Waiting {
                            at: Instant::now() + wait,
                            no_extension,
                            created: *created,
                            kept: !no_extension,
                        };
                        if no_extension {
                            running -= 1;
                        }
                    }
                }
            }
            let State::Waiting {
                at,
                no_extension,
                created,
                kept,
            } = *state
            else {
                continue;
            };
            // A CREATE EXTENSION pg_jobs committed since the last sweeper here looked.
            let created_since = no_extension && created_count() != created;
            if Instant::now() < at && !created_since {
                continue;
            }
            if running >= gucs::max_databases() && !kept {
                if !cap_logged {
                    log!(
                        "{NAME}: pg_jobs.max_databases ({}) reached: database {name:?} is not \
                         swept; raise pg_jobs.max_databases (and max_worker_processes) to sweep it",
                        gucs::max_databases()
                    );
                    cap_logged = true;
                }
                continue;
            }
            // Read before the start: a CREATE EXTENSION committed after this is seen by the
            // sweeper, or moves the count past this.
            let created = created_count();
            if let Some(handle) = start_sweeper(*db, name, generation) {
                *state = State::Running { handle, created };
                if !kept {
                    running += 1;
                }
            } else {
                *state = State::Waiting {
                    at: Instant::now() + RESTART,
                    no_extension,
                    created,
                    kept,
                };
            }
        }
        if running < gucs::max_databases() {
            cap_logged = false;
        }
        if !BackgroundWorker::wait_latch(Some(
            gucs::sweep_interval().max(Duration::from_millis(100)),
        )) {
            break;
        }
    }
    log!("{NAME}: stopping");
    unsafe { pg_sys::proc_exit(1) };
}

/// Every database a sweeper may connect to: not a template, accepting connections, not left
/// invalid by an interrupted DROP DATABASE. Read from the shared catalog with a heap scan:
/// the launcher is connected to no database, so it has no SQL.
fn list_databases() -> Vec<(u32, String)> {
    let mut out = Vec::new();
    unsafe {
        let rel = pg_sys::table_open(
            pg_sys::DatabaseRelationId,
            pg_sys::AccessShareLock as pg_sys::LOCKMODE,
        );
        let scan = pg_sys::table_beginscan_catalog(rel, 0, std::ptr::null_mut());
        loop {
            let tuple = pg_sys::heap_getnext(scan, pg_sys::ScanDirection::ForwardScanDirection);
            if tuple.is_null() {
                break;
            }
            let form = pg_sys::heap_tuple_get_struct::<pg_sys::FormData_pg_database>(tuple);
            if (*form).datistemplate || !(*form).datallowconn || (*form).datconnlimit == -2 {
                continue;
            }
            let name = CStr::from_ptr((*form).datname.data.as_ptr())
                .to_string_lossy()
                .into_owned();
            out.push(((*form).oid.to_u32(), name));
        }
        pg_sys::table_endscan(scan);
        pg_sys::table_close(rel, pg_sys::AccessShareLock as pg_sys::LOCKMODE);
    }
    out
}

/// Registers a sweeper for `db` in a free slot. None when the database is paused, an earlier
/// launcher's sweeper is still there, no slot is free or the postmaster has no worker slot.
fn start_sweeper(db: u32, name: &str, generation: u64) -> Option<DynamicBackgroundWorker> {
    {
        let mut shared = SHARED.exclusive();
        let now = unsafe { pg_sys::GetCurrentTimestamp() };
        if shared.pauses.iter().any(|p| p.db == db && p.until > now) {
            return None;
        }
        if shared.slots.iter().any(|s| s.db == db && s.pid != 0) {
            return None; // a sweeper of an earlier launcher, leaving
        }
        let index = shared
            .slots
            .iter()
            .position(|s| s.db == db)
            .or_else(|| shared.slots.iter().position(|s| s.db == 0))?;
        shared.slots[index] = Slot {
            db,
            pid: 0,
            generation,
            no_extension: false,
        };
    }
    let started = BackgroundWorkerBuilder::new(&format!("pg_jobs sweeper {name}"))
        .set_type("pg_jobs sweeper")
        .set_library("pg_jobs")
        .set_function("pg_jobs_sweeper_main")
        .enable_spi_access()
        .set_start_time(BgWorkerStartTime::RecoveryFinished)
        .set_restart_time(None)
        .set_argument(Some(pg_sys::Datum::from(db)))
        .set_notify_pid(unsafe { pg_sys::MyProcPid })
        .load_dynamic();
    match started {
        Ok(handle) => Some(handle),
        Err(_) => {
            free_slot(db);
            log!(
                "{NAME}: no background worker slot free for the sweeper of database {name:?}; \
                 raise max_worker_processes"
            );
            None
        }
    }
}

/// Frees the slot of `db` once its sweeper is gone; whether it had found no pg_jobs.
fn free_slot(db: u32) -> bool {
    let mut shared = SHARED.exclusive();
    let mut no_extension = false;
    for slot in shared.slots.iter_mut() {
        if slot.db == db && slot.pid == 0 {
            no_extension = slot.no_extension;
            *slot = Slot::default();
        }
    }
    no_extension
}

/// Called by a sweeper once connected to `db`: records its process, or answers false when it
/// must leave at once (the database is paused, or its launcher is gone). On exit its process
/// is cleared again (`leave`).
pub fn enter(db: u32) -> Option<u64> {
    let mut shared = SHARED.exclusive();
    let now = unsafe { pg_sys::GetCurrentTimestamp() };
    if shared.pauses.iter().any(|p| p.db == db && p.until > now) {
        return None;
    }
    let slot = shared.slots.iter_mut().find(|s| s.db == db && s.pid == 0)?;
    slot.pid = unsafe { pg_sys::MyProcPid };
    let generation = slot.generation;
    unsafe { pg_sys::before_shmem_exit(Some(on_exit), pg_sys::Datum::from(db)) };
    Some(generation)
}

/// Whether the launcher that started this sweeper is still the current one.
pub fn current(generation: u64) -> bool {
    GENERATION.get().load(Ordering::SeqCst) == generation
}

/// Called by a sweeper that found no pg_jobs in its database, before it exits.
pub fn no_extension(db: u32) {
    let mut shared = SHARED.exclusive();
    let me = unsafe { pg_sys::MyProcPid };
    if let Some(slot) = shared.slots.iter_mut().find(|s| s.db == db && s.pid == me) {
        slot.no_extension = true;
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn on_exit(_code: i32, arg: pg_sys::Datum) {
    let db = arg.value() as u32;
    let mut shared = SHARED.exclusive();
    let me = unsafe { pg_sys::MyProcPid };
    for slot in shared.slots.iter_mut() {
        if slot.db == db && slot.pid == me {
            slot.pid = 0;
        }
    }
}

/// Keeps the launcher off database `name` for `PAUSE_US` and stops its sweeper, so that a
/// command needing the database without sessions does not wait for it and fail.
fn pause(name: *const std::ffi::c_char) {
    if name.is_null() {
        return;
    }
    let oid = unsafe { pg_sys::get_database_oid(name, true) };
    if oid == pg_sys::InvalidOid || !owns(oid) {
        return;
    }
    let db = oid.to_u32();
    let pid = {
        let mut shared = SHARED.exclusive();
        let now = unsafe { pg_sys::GetCurrentTimestamp() };
        let index = shared
            .pauses
            .iter()
            .position(|p| p.db == db)
            .unwrap_or_else(|| {
                (0..PAUSES)
                    .min_by_key(|&i| shared.pauses[i].until)
                    .expect("PAUSES > 0")
            });
        shared.pauses[index] = Pause {
            db,
            until: now + PAUSE_US,
        };
        shared
            .slots
            .iter()
            .find(|s| s.db == db && s.pid != 0)
            .map(|s| s.pid)
    };
    if let Some(pid) = pid {
        unsafe { libc::kill(pid, libc::SIGTERM) };
        await_exit(pid);
    }
}

/// Waits (up to `EXIT_WAIT`, interruptibly) until process `pid` has left the process array.
/// `DROP DATABASE ... WITH (FORCE)` terminates the sessions it finds at once, and a database
/// owner who is not a superuser may not terminate the sweeper, a superuser's process: the
/// statement failed on a sweeper still exiting.
fn await_exit(pid: i32) {
    let started = Instant::now();
    while started.elapsed() < EXIT_WAIT && !unsafe { pg_sys::BackendPidGetProc(pid) }.is_null() {
        pgrx::check_for_interrupts!();
        unsafe { pg_sys::pg_usleep(10_000) };
    }
}

/// The database names a utility statement needs without other sessions.
unsafe fn needs_no_sessions(node: *mut pg_sys::Node) -> Vec<*const std::ffi::c_char> {
    let mut names = Vec::new();
    unsafe {
        if pgrx::is_a(node, pg_sys::NodeTag::T_DropdbStmt) {
            names.push((*(node as *mut pg_sys::DropdbStmt)).dbname as *const _);
        } else if pgrx::is_a(node, pg_sys::NodeTag::T_RenameStmt) {
            let stmt = node as *mut pg_sys::RenameStmt;
            if (*stmt).renameType == pg_sys::ObjectType::OBJECT_DATABASE {
                names.push((*stmt).subname as *const _);
            }
        } else if pgrx::is_a(node, pg_sys::NodeTag::T_CreatedbStmt) {
            let stmt = node as *mut pg_sys::CreatedbStmt;
            names.extend(option_values((*stmt).options, c"template"));
        } else if pgrx::is_a(node, pg_sys::NodeTag::T_AlterDatabaseStmt) {
            let stmt = node as *mut pg_sys::AlterDatabaseStmt;
            if !option_values((*stmt).options, c"tablespace").is_empty() {
                names.push((*stmt).dbname as *const _);
            }
        }
    }
    names
}

/// The string values of the options named `name` in a list of DefElem.
unsafe fn option_values(options: *mut pg_sys::List, name: &CStr) -> Vec<*const std::ffi::c_char> {
    let mut values = Vec::new();
    if options.is_null() {
        return values;
    }
    unsafe {
        for i in 0..(*options).length as usize {
            let def = (*(*options).elements.add(i)).ptr_value as *mut pg_sys::DefElem;
            if !(*def).defname.is_null()
                && CStr::from_ptr((*def).defname) == name
                && !(*def).arg.is_null()
            {
                values.push(pg_sys::defGetString(def) as *const _);
            }
        }
    }
    values
}

/// Whether the current user owns database `db` (or is a superuser): who may run the commands
/// the hook clears the way for. Anyone else's attempt fails on its own, and must not stop a
/// sweeper (a role could otherwise keep a database from being swept by failing to drop it).
fn owns(db: pg_sys::Oid) -> bool {
    unsafe {
        let user = pg_sys::GetUserId();
        #[cfg(feature = "pg15")]
        let owner = pg_sys::pg_database_ownercheck(db, user);
        #[cfg(not(feature = "pg15"))]
        let owner = pg_sys::object_ownercheck(pg_sys::DatabaseRelationId, db, user);
        owner
    }
}

/// Whether a utility statement is `CREATE EXTENSION pg_jobs`.
unsafe fn creates_pg_jobs(node: *mut pg_sys::Node) -> bool {
    unsafe {
        pgrx::is_a(node, pg_sys::NodeTag::T_CreateExtensionStmt) && {
            let stmt = node as *mut pg_sys::CreateExtensionStmt;
            !(*stmt).extname.is_null() && CStr::from_ptr((*stmt).extname) == c"pg_jobs"
        }
    }
}

// standard_ProcessUtility as PostgreSQL exports it. pgrx's binding catches an ERROR raised
// inside and raises it again as its own (with a backtrace in DETAIL, and SQLSTATEs outside its
// list lost); every utility statement of every session passes here, so its errors must pass
// through untouched.
unsafe extern "C-unwind" {
    #[link_name = "standard_ProcessUtility"]
    fn standard_process_utility(
        pstmt: *mut pg_sys::PlannedStmt,
        query: *const std::ffi::c_char,
        read_only_tree: bool,
        context: pg_sys::ProcessUtilityContext::Type,
        params: pg_sys::ParamListInfo,
        env: *mut pg_sys::QueryEnvironment,
        dest: *mut pg_sys::DestReceiver,
        qc: *mut pg_sys::QueryCompletion,
    );
}

/// Before a utility statement: clears the way for the commands that need a database without
/// sessions. Guarded: an error here is raised as PostgreSQL's, into the hook, which has
/// nothing to drop.
#[pg_guard]
unsafe extern "C-unwind" fn before_utility(node: *mut pg_sys::Node) -> bool {
    unsafe {
        for name in needs_no_sessions(node) {
            pause(name);
        }
        creates_pg_jobs(node)
    }
}

thread_local! {
    /// This transaction ran `CREATE EXTENSION pg_jobs`.
    static CREATED_HERE: Cell<bool> = const { Cell::new(false) };
}

/// The launcher's part of the end of a transaction (src/commit/xact.rs).
static HOOKS: xact::Hooks = xact::Hooks {
    order: 6,
    before_commit: None,
    at_end: Some(at_end),
    at_subtransaction_abort: None,
};

/// After `CREATE EXTENSION pg_jobs`: at its commit, the launcher is woken to look for it.
fn after_create_extension() {
    xact::register(&HOOKS);
    CREATED_HERE.with(|c| c.set(true));
}

fn at_end(commit: bool) {
    if !CREATED_HERE.with(|c| c.replace(false)) || !commit {
        return;
    }
    CREATED.get().fetch_add(1, Ordering::SeqCst);
    let pid = LAUNCHER_PID.get().load(Ordering::SeqCst);
    if pid != 0 {
        // Its latch is set by the SIGUSR1 handler of every worker with a database
        // connection (procsignal_sigusr1_handler).
        unsafe { libc::kill(pid, libc::SIGUSR1) };
    }
}

/// Not guarded, and holding nothing that needs dropping: an ERROR of the statement passes
/// through it as PostgreSQL raised it.
#[allow(clippy::too_many_arguments)]
unsafe extern "C-unwind" fn utility_hook(
    pstmt: *mut pg_sys::PlannedStmt,
    query: *const std::ffi::c_char,
    read_only_tree: bool,
    context: pg_sys::ProcessUtilityContext::Type,
    params: pg_sys::ParamListInfo,
    env: *mut pg_sys::QueryEnvironment,
    dest: *mut pg_sys::DestReceiver,
    qc: *mut pg_sys::QueryCompletion,
) {
    unsafe {
        let created = before_utility((*pstmt).utilityStmt);
        let next = PREV_UTILITY.unwrap_or(standard_process_utility);
        next(pstmt, query, read_only_tree, context, params, env, dest, qc);
        if created {
            after_create_extension();
        }
    }
}
