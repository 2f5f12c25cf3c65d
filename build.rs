//! Writes the upgrade script to the version being built (sql/pg_jobs--LAST--VERSION.sql, where
//! `cargo pgrx install`, `package` and `test` find it) with scripts/upgrade-script.py, the one
//! source of it, which the SQL-only edition's build reads too. The script of an unreleased
//! version is not tracked: it follows its hand-written part (sql/upgrade/) and the install
//! files. A released one is committed once, at its release (CONTRIBUTING.md), and never changes.

use std::process::Command;

fn main() {
    for watched in [
        "Cargo.toml",
        "src/lib.rs",
        "sql",
        "scripts/upgrade-script.py",
    ] {
        println!("cargo:rerun-if-changed={watched}");
    }
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    let done = Command::new(&python)
        .arg("scripts/upgrade-script.py")
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .status();
    match done {
        Ok(status) if status.success() => {}
        Ok(status) => panic!("scripts/upgrade-script.py failed ({status}): the upgrade script was not written"),
        Err(err) => panic!(
            "{python} could not be run ({err}): it writes the upgrade script (scripts/upgrade-script.py); \
             install Python 3, or name it in PYTHON"
        ),
    }
}
