//! The time pg_jobs decides by, and how long it keeps finished jobs: the settings that move
//! them, read here and not with `current_setting` in SQL, so that only a superuser moves the
//! clock, with or without preload (see gucs.rs).

use crate::gucs;
use pgrx::prelude::*;

/// `jobs.clock()`: clock_timestamp() plus pg_jobs.clock_offset (0 unless a superuser set it;
/// tests move time with it instead of sleeping).
#[pg_extern(volatile, parallel_safe, name = "clock")]
pub fn clock() -> TimestampWithTimeZone {
    let now: i64 = unsafe { pg_sys::GetCurrentTimestamp() };
    let offset = i64::from(gucs::CLOCK_OFFSET_S.get()) * 1_000_000;
    let shifted = now.saturating_add(offset);
    TimestampWithTimeZone::try_from(shifted)
        .unwrap_or_else(|_| error!("pg_jobs.clock_offset moves the clock out of range"))
}

/// `jobs._retention(setting, default)`: how long finished jobs are kept, from
/// pg_jobs.completed_retention or pg_jobs.dead_retention (reloadable, server-wide).
#[pg_extern(stable, parallel_safe, name = "_retention")]
pub fn retention(setting: &str, _default: Option<Interval>) -> Interval {
    let seconds = match setting {
        "pg_jobs.completed_retention" => gucs::COMPLETED_RETENTION_S.get(),
        "pg_jobs.dead_retention" => gucs::DEAD_RETENTION_S.get(),
        other => error!("jobs._retention: {other} is not a retention setting of pg_jobs"),
    };
    Interval::new(0, 0, i64::from(seconds) * 1_000_000)
        .unwrap_or_else(|_| error!("jobs._retention: {setting} is out of range"))
}
