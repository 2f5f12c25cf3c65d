//! The CONTEXT of a refusal names the public function that refused, not the helpers it went
//! through. A refusal is raised by the PL/pgSQL helper `jobs._raise`, usually two or three
//! calls below the function the caller called, and PostgreSQL adds a line per call between
//! (`PL/pgSQL function jobs._raise(...) line 3 at RAISE`, `SQL statement "SELECT
//! jobs._refuse(...)"`, ...); clients such as psycopg put all of them in the exception's text.
//!
//! An `emit_log_hook` cuts the context of an error raised by `jobs._raise` to the outermost
//! frame of a pg_jobs function and what lies outside it (the caller's own functions, which
//! stay). Errors raised anywhere else keep their whole context. The hook is installed when the
//! library is loaded in a backend; `jobs._raise` calls a function of the library first
//! (`jobs._quiet_context`), so it is loaded by the time its error is reported.

use pgrx::prelude::*;
use std::ffi::{CStr, CString};

static mut PREV_EMIT: pg_sys::emit_log_hook_type = None;

pub fn init() {
    unsafe {
        PREV_EMIT = pg_sys::emit_log_hook;
        pg_sys::emit_log_hook = Some(emit);
    }
}

/// `jobs._quiet_context()`: does nothing; calling it loads the library, and with it the hook.
#[pg_extern(immutable, parallel_safe, name = "_quiet_context")]
fn quiet_context() {}

/// Runs inside error reporting: it must not raise, allocate outside ErrorContext or panic.
unsafe extern "C-unwind" fn emit(edata: *mut pg_sys::ErrorData) {
    unsafe {
        if let Some(prev) = PREV_EMIT {
            prev(edata);
        }
        if edata.is_null()
            || (*edata).elevel < PgLogLevel::ERROR as i32
            || (*edata).context.is_null()
        {
            return;
        }
        let context = CStr::from_ptr((*edata).context).to_string_lossy();
        let Some(kept) = trimmed(&context) else {
            return;
        };
        let Ok(kept) = CString::new(kept) else {
            return;
        };
        (*edata).context = pg_sys::MemoryContextStrdup(pg_sys::ErrorContext, kept.as_ptr());
    }
}

/// The lines of a context from the outermost pg_jobs frame on, when it is a refusal's.
pub(crate) fn trimmed(context: &str) -> Option<String> {
    let lines: Vec<&str> = context.lines().collect();
    if !lines.first()?.starts_with("PL/pgSQL function jobs._raise(") {
        return None;
    }
    let outermost = lines
        .iter()
        .rposition(|line| line.starts_with("PL/pgSQL function jobs."))?;
    Some(lines[outermost..].join("\n"))
}
