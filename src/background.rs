//! The background processes: the launcher (one per server, started by
//! `shared_preload_libraries`), which starts a sweeper per database with pg_jobs; the sweeper,
//! which sweeps its database, relays the notifications committed transactions hand it, and
//! vacuums `jobs_data.jobs` when autovacuum would.

pub(crate) mod launcher;
pub(crate) mod sweeper;
pub(crate) mod vacuum;
