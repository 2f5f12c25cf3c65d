//! Every setting of pg_jobs, in one place, named `pg_jobs.<name>`. The SQL reads them through
//! functions of this library (`jobs.clock()`, `jobs._retention`, `jobs._max_payload_size`),
//! never with `current_setting`: a setting this library defines is a real one only once the
//! library is loaded in the backend, and before that it is a placeholder any role may `SET`.
//! Calling a function of the library loads it, and PostgreSQL then re-checks each value set on
//! a placeholder against the setting's context: a value a non-superuser set for a superuser-only
//! or server-wide setting is dropped with a WARNING. So each setting counts only as its context
//! allows, whether or not the library is preloaded (docs/SECURITY.md).

use pgrx::guc::{GucContext, GucFlags, GucRegistry, GucSetting};
use std::ffi::CString;
use std::time::Duration;

pub static DATABASE_NAME: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(None);
/// 4 by default: the launcher and 4 sweepers leave 3 of the default max_worker_processes (8)
/// to parallel queries and other workers.
pub static MAX_DATABASES: GucSetting<i32> = GucSetting::<i32>::new(4);
/// The most databases `pg_jobs.max_databases` may allow (the launcher's shared table has a
/// slot for each).
pub const MAX_DATABASES_CAP: usize = 128;
pub static SWEEP_INTERVAL_MS: GucSetting<i32> = GucSetting::<i32>::new(1000);
pub static VACUUM_INTERVAL_MS: GucSetting<i32> = GucSetting::<i32>::new(10_000);
pub static COMPLETED_RETENTION_S: GucSetting<i32> = GucSetting::<i32>::new(7 * 24 * 3600);
pub static DEAD_RETENTION_S: GucSetting<i32> = GucSetting::<i32>::new(30 * 24 * 3600);
pub static CLOCK_OFFSET_S: GucSetting<i32> = GucSetting::<i32>::new(0);
pub static MAX_PAYLOAD_KB: GucSetting<i32> = GucSetting::<i32>::new(1024);
pub static TENANTS: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(None);
pub static ASYNC_CLAIMS: GucSetting<bool> = GucSetting::<bool>::new(true);
/// -1 by default: the server is no shard, and its ids name none (src/functions/ids.rs).
pub static SHARD: GucSetting<i32> = GucSetting::<i32>::new(-1);

/// Defines the settings. The launcher's (`database_name`, `max_databases`) exist only when the
/// library is preloaded, as the launcher does; the others are defined whenever it is loaded.
pub fn init(preloaded: bool) {
    if preloaded {
        GucRegistry::define_string_guc(
            c"pg_jobs.database_name",
            c"Restricts the pg_jobs background worker to one database; unset: every database.",
            c"Reloadable (SIGHUP). Unset or empty, every database with pg_jobs installed is swept.",
            &DATABASE_NAME,
            GucContext::Sighup,
            GucFlags::default(),
        );
        GucRegistry::define_int_guc(
            c"pg_jobs.max_databases",
            c"The most databases the pg_jobs background worker sweeps at once.",
            c"Reloadable (SIGHUP). One sweeper per database, each a background worker counted \
              in max_worker_processes; past the cap the launcher logs the databases it leaves out.",
            &MAX_DATABASES,
            1,
            MAX_DATABASES_CAP as i32,
            GucContext::Sighup,
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
        c"How often the background worker checks whether jobs_data.jobs needs a vacuum.",
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
    GucRegistry::define_int_guc(
        c"pg_jobs.max_payload_size",
        c"The largest payload a job or an event may have.",
        c"Superuser only. Larger ones are refused with 22023 (invalid_parameter_value). \
          Measured uncompressed.",
        &MAX_PAYLOAD_KB,
        1,
        1024 * 1024,
        GucContext::Suset,
        GucFlags::UNIT_KB,
    );
    GucRegistry::define_string_guc(
        c"pg_jobs.tenants",
        c"The tenants a role is bound to, as a JSON array; unset: not bound.",
        c"Superuser only. Set per role and database by jobs.grant_producer and \
          jobs.grant_worker with a tenant; a bound role enqueues, dedupes, claims and reads \
          steps of its tenants' jobs only. Takes effect when the role next connects.",
        &TENANTS,
        GucContext::Suset,
        GucFlags::default(),
    );
    GucRegistry::define_bool_guc(
        c"pg_jobs.async_claims",
        c"Whether a claim or heartbeat that is its transaction's only work commits without \
          waiting for its WAL flush.",
        c"After a crash or a failover, claims from the last moments before it may be handed \
          out again; their workers are fenced out (their tokens are never issued again). Off: \
          every claim is as durable as synchronous_commit says. Any role may set it for its \
          own sessions: it changes only the durability of that role's own claims.",
        &ASYNC_CLAIMS,
        GucContext::Userset,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"pg_jobs.shard",
        c"This server's shard number, which every job id it makes carries; -1: not a shard.",
        c"Reloadable (SIGHUP), server-wide. 0 to 255: ids end with this byte, and a caller's id \
          that names another shard is refused. Set it before the server's first job; a shard's \
          number never changes (docs/SCALING.md).",
        &SHARD,
        -1,
        255,
        GucContext::Sighup,
        GucFlags::default(),
    );
    unsafe { pgrx::pg_sys::MarkGUCPrefixReserved(c"pg_jobs".as_ptr()) };
}

/// pg_jobs.async_claims (src/commit/async_claims.rs).
pub fn async_claims() -> bool {
    ASYNC_CLAIMS.get()
}

/// The one database to sweep, if `pg_jobs.database_name` names one.
pub fn database_name() -> Option<String> {
    DATABASE_NAME
        .get()
        .map(|name| name.to_string_lossy().into_owned())
        .filter(|name| !name.is_empty())
}

pub fn max_databases() -> usize {
    MAX_DATABASES.get().clamp(1, MAX_DATABASES_CAP as i32) as usize
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

/// pg_jobs.shard, if the server is a shard.
pub fn shard() -> Option<u8> {
    u8::try_from(SHARD.get()).ok()
}

/// `jobs._max_payload_size()`: pg_jobs.max_payload_size in bytes.
#[pgrx::pg_extern(stable, parallel_safe, name = "_max_payload_size")]
pub fn max_payload_size() -> i64 {
    i64::from(MAX_PAYLOAD_KB.get()) * 1024
}

/// `jobs._tenants()`: the tenants the connected role is bound to, or NULL for a role that is
/// not bound. The binding is read from the catalog by `jobs._binding()` (sql/privileges.sql:
/// the login role's own pg_jobs.tenants, written by jobs.grant_producer and the other grants,
/// else those of the roles whose grants it holds through membership; refused (42501) when it
/// holds rights through a role bound to none as well), once per backend for the session's
/// login role; the session's value of the setting counts only where the catalog binds nothing.
/// So a role cannot unbind itself by connecting with the setting emptied (`PGOPTIONS='-c
/// pg_jobs.tenants='`): without preload, PostgreSQL drops such a value when the library loads
/// and the compiled default, unbound, would apply. A value that is not a JSON array of
/// strings binds the role to no tenant at all, so a mistyped binding refuses rather than
/// allows.
#[pgrx::pg_extern(stable, parallel_safe, name = "_tenants")]
pub fn tenants() -> Option<Vec<String>> {
    let text = match catalog_binding() {
        Some(text) => text,
        None => {
            let raw = TENANTS.get()?;
            raw.to_str().unwrap_or("[]").to_owned()
        }
    };
    if text.is_empty() {
        return None;
    }
    Some(serde_json::from_str::<Binding>(&text).map_or_else(|_| Vec::new(), |b| b.0))
}

/// A role's binding as pg_jobs.tenants holds it: a JSON array of tenant ids. Anything else
/// binds the role to no tenant (so a mistyped binding refuses rather than allows).
#[derive(serde::Deserialize)]
#[serde(transparent)]
struct Binding(Vec<String>);

thread_local! {
    /// The login role whose binding was read, and the binding (its setting's text, if any).
    static BINDING: std::cell::RefCell<Option<(pgrx::pg_sys::Oid, Option<String>)>> =
        const { std::cell::RefCell::new(None) };
}

/// A binding jobs._binding() refuses: why, and what to do.
#[derive(serde::Deserialize)]
struct Refusal {
    refusal: String,
    hint: Option<String>,
}

/// The login role's own pg_jobs.tenants in the catalog, for this database, else for every one.
const OWN_BINDING: &str = "select substr(c.setting, length('pg_jobs.tenants=') + 1)
     from pg_catalog.pg_db_role_setting as s, unnest(s.setconfig) as c(setting)
     where s.setrole = (select r.oid from pg_catalog.pg_roles as r where r.rolname = session_user)
       and s.setdatabase in (0, (select d.oid from pg_catalog.pg_database as d
                                 where d.datname = pg_catalog.current_database()))
       and c.setting like 'pg_jobs.tenants=%'
     order by s.setdatabase desc limit 1";

/// The session's login role's binding in the catalog (`jobs._binding()`). Read once per
/// backend and login role (a binding applies from the role's next connection); a refusal is
/// not kept, so it is raised at every call, as insufficient_privilege (42501: an error raised
/// inside SPI would reach the caller as an internal error, its SQLSTATE lost).
fn catalog_binding() -> Option<String> {
    let role = unsafe { pgrx::pg_sys::GetSessionUserId() };
    if let Some(text) = BINDING.with(|b| {
        b.borrow()
            .as_ref()
            .filter(|(oid, _)| *oid == role)
            .map(|(_, text)| text.clone())
    }) {
        return text;
    }
    // Read-only (Spi::get_one would give the transaction an id). A schema of 0.1.0, before
    // its ALTER EXTENSION UPDATE, has no jobs._binding(): the role's own setting only.
    let text = pgrx::spi::Spi::connect(|client| {
        let current = client
            .select(
                "select to_regprocedure('jobs._binding()') is not null",
                Some(1),
                &[],
            )?
            .first()
            .get_one::<bool>()?
            .unwrap_or(false);
        let query = if current {
            "select jobs._binding()"
        } else {
            OWN_BINDING
        };
        client
            .select(query, Some(1), &[])?
            .first()
            .get_one::<String>()
    })
    .unwrap_or_else(|err| pgrx::error!("jobs._tenants: {err}"));
    if let Some(Ok(refusal)) = text
        .as_deref()
        .filter(|t| t.starts_with('{'))
        .map(serde_json::from_str::<Refusal>)
    {
        let mut report = pgrx::pg_sys::panic::ErrorReport::new(
            pgrx::PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE,
            refusal.refusal,
            "jobs._tenants",
        );
        if let Some(hint) = refusal.hint {
            report = report.set_hint(hint);
        }
        report.report(pgrx::PgLogLevel::ERROR);
    }
    BINDING.with(|b| *b.borrow_mut() = Some((role, text.clone())));
    text
}
