//! The kind of role pgjobs connects as. A role bound to tenants (a tenant admin,
//! `jobs.grant_admin(role, tenant)`, or a tenant monitor) reads `jobs.tenant_jobs`,
//! `jobs.tenant_attempts` and `jobs.tenant_steps`, the columns of `jobs.jobs`, `jobs.attempts`
//! and `jobs.steps` for its tenants' jobs only, and its counts from `jobs.queue_stats()` (the
//! view `jobs.queue_stats` counts every tenant's, and shows a bound role nothing). Every query
//! here names what an admin of every tenant reads and runs as `for_role` writes it; the engine,
//! not pgjobs, keeps each tenant to its own rows and refuses what a bound role may not do.

use std::borrow::Cow;
use std::sync::OnceLock;
use tokio_postgres::Client;

/// Learned at the first connection (one process connects as one role): the tenants the role
/// is bound to (a JSON array), or None for a role bound to none.
static TENANTS: OnceLock<Option<String>> = OnceLock::new();

pub async fn learn(client: &Client) {
    if TENANTS.get().is_some() {
        return;
    }
    // jobs._tenants() where the role may call it (every admin, bound or not; it reads the
    // binding where each edition keeps it: docs/EDITIONS.md), else the session's setting.
    let found = client
        .query_one(
            "select case when to_regprocedure('jobs._tenants()') is not null
                          and has_function_privilege('jobs._tenants()', 'execute')
                         then array_to_json(jobs._tenants())::text
                         else nullif(current_setting('pg_jobs.tenants', true), '') end",
            &[],
        )
        .await;
    if let Ok(row) = found {
        let _ = TENANTS.set(row.get::<_, Option<String>>(0));
    }
}

/// The tenants of a bound role, as its binding lists them; None for a role bound to none.
pub fn tenants() -> Option<&'static str> {
    TENANTS.get().and_then(|t| t.as_deref())
}

/// The query as the connected role reads it.
pub fn for_role(sql: &str) -> Cow<'_, str> {
    if tenants().is_none() {
        return Cow::Borrowed(sql);
    }
    Cow::Owned(
        sql.replace("jobs.jobs as ", "jobs.tenant_jobs as ")
            .replace("jobs.attempts as ", "jobs.tenant_attempts as ")
            .replace("jobs.steps as ", "jobs.tenant_steps as ")
            .replace("jobs.queue_stats as ", "jobs.queue_stats() as "),
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_role_bound_to_no_tenant_reads_the_views_named() {
        // (No binding learned in this process.)
        let sql = "select 1 from jobs.jobs as j join jobs.attempts as a on a.job_id = j.id";
        assert_eq!(super::for_role(sql), sql);
    }
}
