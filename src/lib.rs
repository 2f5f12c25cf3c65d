//! pg_jobs: a durable job queue inside PostgreSQL.
//!
//! The SQL surface is hand-written in `sql/` (one file per capability) and embedded here in
//! dependency order. Rust holds what needs the server's C API or is better said once in Rust,
//! in three parts: the background processes (`background/`: the launcher, a sweeper per
//! database, its vacuum), what runs at a transaction's end in a client's backend (`commit/`),
//! and SQL-callable functions that need no more than their call (`functions/`: the clock, cron,
//! job ids, claim tokens, sizes); beside them the settings (`gucs.rs`), the catalogue of error
//! codes (`error.rs`, exported as `jobs.error_codes()`), and the tests that run inside the
//! server.
//!
//! Who owns what of the server's process-wide state:
//! - The transaction and subtransaction callbacks: `commit/xact.rs`, the only module that
//!   registers one; async_claims, children, relay, outcomes, wakeups and the launcher give it
//!   their hooks.
//! - Shared memory (with `shared_preload_libraries = 'pg_jobs'`, set up in `_PG_init` below):
//!   `background/launcher.rs` (the databases it runs sweepers for), `commit/wakeups.rs` (the
//!   wake-up counters and condition variable of the blocking claim), `commit/relay.rs` (the
//!   ring of notifications the sweepers send), `commit/outcomes.rs` (the outcome counters and
//!   their queue names).
//! - Signal handlers: the launcher and the sweeper attach the background workers' SIGHUP and
//!   SIGTERM handlers; `background/vacuum.rs` swaps SIGTERM's around the sweeper's vacuum and
//!   restores it. Nothing of pg_jobs sets a handler in a client's backend.

use pgrx::prelude::*;

mod background;
mod commit;
mod error;
mod error_context;
mod functions;
mod gucs;

use background::launcher;
use commit::{outcomes, relay, wakeups};

::pgrx::pg_module_magic!(name, version);

extension_sql_file!("../sql/schema.sql", name = "schema", bootstrap);
extension_sql_file!(
    "../sql/internal.sql",
    name = "internal",
    requires = ["schema"]
);
extension_sql_file!(
    "../sql/records.sql",
    name = "records",
    requires = ["schema"]
);
extension_sql_file!(
    "../sql/policy.sql",
    name = "policy",
    requires = [
        "schema",
        "records",
        functions::clock::clock,
        functions::clock::retention,
        gucs::max_payload_size,
        gucs::tenants,
        commit::outcomes::outcome
    ]
);
extension_sql_file!(
    "../sql/enqueue.sql",
    name = "enqueue",
    requires = ["policy"]
);
extension_sql_file!("../sql/claim.sql", name = "claim", requires = ["policy"]);
extension_sql_file!("../sql/settle.sql", name = "settle", requires = ["policy"]);
extension_sql_file!("../sql/steps.sql", name = "steps", requires = ["settle"]);
extension_sql_file!("../sql/events.sql", name = "events", requires = ["steps"]);
extension_sql_file!("../sql/operate.sql", name = "operate", requires = ["steps"]);
extension_sql_file!("../sql/status.sql", name = "status", requires = ["operate"]);
extension_sql_file!(
    "../sql/children.sql",
    name = "children",
    requires = ["operate", "enqueue"]
);
extension_sql_file!(
    "../sql/children_triggers.sql",
    name = "children_triggers",
    requires = ["children", children::_family_statement_end]
);
extension_sql_file!(
    "../sql/ordering.sql",
    name = "ordering",
    requires = ["children_triggers"]
);
extension_sql_file!(
    "../sql/ordering_triggers.sql",
    name = "ordering_triggers",
    requires = ["ordering"]
);
extension_sql_file!(
    "../sql/fairness.sql",
    name = "fairness",
    requires = ["ordering_triggers"]
);
extension_sql_file!(
    "../sql/fairness_triggers.sql",
    name = "fairness_triggers",
    requires = ["fairness"]
);
extension_sql_file!(
    "../sql/schedules.sql",
    name = "schedules",
    requires = [
        "fairness_triggers",
        functions::cron::cron_problem,
        functions::cron::cron_next,
        functions::cron::cron_slots,
        functions::cron::cron_latest
    ]
);
extension_sql_file!(
    "../sql/sweep.sql",
    name = "sweep",
    requires = ["events", "schedules"]
);
extension_sql_file!(
    "../sql/queues.sql",
    name = "queues",
    requires = ["sweep", commit::outcomes::outcome_stats]
);
extension_sql_file!(
    "../sql/backup.sql",
    name = "backup",
    requires = ["queues", "records"]
);
extension_sql_file!("../sql/views.sql", name = "views", requires = ["backup"]);
extension_sql_file!(
    "../sql/tenant_views.sql",
    name = "tenant_views",
    requires = ["views"]
);
extension_sql_file!("../sql/privileges.sql", name = "privileges", finalize);

/// Turns off Rust backtraces in errors, defines the settings and, when preloaded
/// (`shared_preload_libraries`), registers the background worker. Nothing else needs preloading; a binary upgrade runs no worker.
#[pg_guard]
pub extern "C-unwind" fn _PG_init() {
    // No Rust backtrace in an error a client sees (a cancelled wait, a statement timeout in a
    // search), whatever RUST_BACKTRACE the server was started with: pgrx's panic hook captures
    // one (std::backtrace::Backtrace::capture) into the error's DETAIL, 37 frames of it, and
    // RUST_LIB_BACKTRACE decides for capture over RUST_BACKTRACE. Set before any capture (the
    // choice is made once per process); a server process runs no other thread.
    std::env::set_var("RUST_LIB_BACKTRACE", "0");
    let preloaded = unsafe { pg_sys::process_shared_preload_libraries_in_progress };
    gucs::init(preloaded);
    error_context::init();
    if preloaded && !unsafe { pg_sys::IsBinaryUpgrade } {
        launcher::init();
        wakeups::init();
        relay::init();
        outcomes::init();
    }
}

#[cfg(any(test, feature = "pg_test"))]
mod tests;

/// Required by `cargo pgrx test`.
#[cfg(test)]
pub mod pg_test {
    pub fn setup(_options: Vec<&str>) {}

    #[must_use]
    pub fn postgresql_conf_options() -> Vec<&'static str> {
        vec![]
    }
}
