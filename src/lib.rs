//! pg_jobs: a durable job queue inside PostgreSQL.
//!
//! The SQL surface is hand-written in `sql/` (one file per capability) and embedded here in
//! dependency order. Rust holds what is better said once in Rust: the catalogue of error codes
//! (`error.rs`), exported as `jobs.error_codes()`, and the tests that run inside the server.

use pgrx::prelude::*;

mod error;

::pgrx::pg_module_magic!(name, version);

extension_sql_file!("../sql/schema.sql", name = "schema", bootstrap);
extension_sql_file!("../sql/policy.sql", name = "policy", requires = ["schema"]);
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
