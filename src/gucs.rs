//! Every setting of pg_jobs, in one place, named `pg_jobs.<name>`. The SQL reads the ones it
//! needs with `current_setting('pg_jobs.<name>', true)`, so it works whether or not this library
//! is loaded in the backend; the background worker reads them here.

use pgrx::guc::{GucContext, GucFlags, GucRegistry, GucSetting};
use std::ffi::CString;
use std::time::Duration;

pub static DATABASE_NAME: GucSetting<Option<CString>> =
    GucSetting::<Option<CString>>::new(Some(c"postgres"));
pub static SWEEP_INTERVAL_MS: GucSetting<i32> = GucSetting::<i32>::new(1000);
pub static VACUUM_INTERVAL_MS: GucSetting<i32> = GucSetting::<i32>::new(10_000);
pub static COMPLETED_RETENTION_S: GucSetting<i32> = GucSetting::<i32>::new(7 * 24 * 3600);
pub static DEAD_RETENTION_S: GucSetting<i32> = GucSetting::<i32>::new(30 * 24 * 3600);
pub static CLOCK_OFFSET_S: GucSetting<i32> = GucSetting::<i32>::new(0);

/// Defines the settings. `database_name` can only be set at server start, so it exists only
/// when the library is preloaded; the others are defined whenever it is loaded.
pub fn init(preloaded: bool) {
    if preloaded {
        GucRegistry::define_string_guc(
            c"pg_jobs.database_name",
            c"The database the pg_jobs background worker sweeps.",
            c"Set in postgresql.conf; takes effect at server start.",
            &DATABASE_NAME,
            GucContext::Postmaster,
            GucFlags::default(),
        );
    }
    GucRegistry::define_int_guc(
        c"pg_jobs.sweep_interval",
        c"Time between the background worker's sweeps.",
        c"Reloadable (SIGHUP).",
        &SWEEP_INTERVAL_MS,
        10,
        24 * 3600 * 1000,
        GucContext::Sighup,
        GucFlags::UNIT_MS,
    );
    GucRegistry::define_int_guc(
        c"pg_jobs.vacuum_interval",
        c"How often the background worker checks whether jobs.jobs needs a vacuum.",
        c"Reloadable (SIGHUP). It vacuums the table when autovacuum would (the same thresholds), \
          instead of once per autovacuum_naptime. 0: autovacuum alone.",
        &VACUUM_INTERVAL_MS,
        0,
        24 * 3600 * 1000,
        GucContext::Sighup,
        GucFlags::UNIT_MS,
    );
    GucRegistry::define_int_guc(
        c"pg_jobs.completed_retention",
        c"Completed and cancelled jobs older than this are deleted by the sweep.",
        c"Reloadable (SIGHUP). 0: completing deletes the job; cancelled ones go at the next sweep.",
        &COMPLETED_RETENTION_S,
        0,
        i32::MAX,
        GucContext::Sighup,
        GucFlags::UNIT_S,
    );
    GucRegistry::define_int_guc(
        c"pg_jobs.dead_retention",
        c"Failed and dead jobs older than this are deleted by the sweep.",
        c"Reloadable (SIGHUP). 0 deletes them at the next sweep.",
        &DEAD_RETENTION_S,
        0,
        i32::MAX,
        GucContext::Sighup,
        GucFlags::UNIT_S,
    );
    GucRegistry::define_int_guc(
        c"pg_jobs.clock_offset",
        c"Shifts the time pg_jobs decides by (jobs.clock()); for tests only.",
        c"Superuser only. Moves leases, run_at, backoffs and retention as if time had passed.",
        &CLOCK_OFFSET_S,
        -i32::MAX,
        i32::MAX,
        GucContext::Suset,
        GucFlags::UNIT_S,
    );
    unsafe { pgrx::pg_sys::MarkGUCPrefixReserved(c"pg_jobs".as_ptr()) };
}

pub fn database_name() -> String {
    DATABASE_NAME
        .get()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_else(|| "postgres".to_string())
}

pub fn sweep_interval() -> Duration {
    Duration::from_millis(SWEEP_INTERVAL_MS.get().max(10) as u64)
}

/// None when the worker leaves vacuum to autovacuum alone.
pub fn vacuum_interval() -> Option<Duration> {
    match VACUUM_INTERVAL_MS.get() {
        0 => None,
        ms => Some(Duration::from_millis(ms as u64)),
    }
}
