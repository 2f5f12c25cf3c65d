//! Nothing a superuser runs calls code a less trusted role owns. Whoever owns schema `jobs` or
//! a function in it may replace that function with code of its own (SECURITY INVOKER), which
//! then runs with the rights of whoever calls it: a superuser's `pgjobs status` would make that
//! owner a superuser. The SQL-only edition belongs to the role that ran its file, often not a
//! superuser. So before its first call into `jobs`, pgjobs looks up those owners and, when the
//! session is a superuser's and an owner is not a superuser, refuses with the cause and the fix
//! (`--trust-owner` overrides it).

use anyhow::{bail, Result};
use std::sync::atomic::{AtomicBool, Ordering};
use tokio_postgres::Client;

/// `--trust-owner`: call pg_jobs as a superuser even where a role that is not one owns it.
pub static TRUSTED: AtomicBool = AtomicBool::new(false);

/// The roles, not superusers, that own schema jobs or a function in it, when the session's
/// role is a superuser; empty otherwise. (Every name qualified: a superuser's search_path is
/// not trusted either.)
pub const UNTRUSTED_OWNERS: &str = "select pg_catalog.string_agg(distinct o.rolname::text, ', ')
     from (select n.nspowner as owner from pg_catalog.pg_namespace as n where n.nspname = 'jobs'
           union
           select p.proowner from pg_catalog.pg_proc as p
           join pg_catalog.pg_namespace as n on n.oid = p.pronamespace where n.nspname = 'jobs') as x
     join pg_catalog.pg_roles as o on o.oid = x.owner
     where not o.rolsuper
       and (select r.rolsuper from pg_catalog.pg_roles as r where r.rolname = current_user)";

pub async fn check(client: &Client) -> Result<()> {
    if TRUSTED.load(Ordering::Relaxed) {
        return Ok(());
    }
    let row = client
        .query_one(UNTRUSTED_OWNERS, &[])
        .await
        .map_err(|e| crate::output::db_error(&e))?;
    if let Some(owners) = row.get::<_, Option<String>>(0) {
        bail!(
            "refusing to call pg_jobs as a superuser: schema jobs or its functions belong to {owners}, \
             which is not a superuser and could replace them with code that would run with this \
             session's rights\n  fix: connect as a role that is not a superuser (jobs.grant_admin), \
             or pass --trust-owner if {owners} is trusted as a superuser is"
        );
    }
    Ok(())
}
