//! `jobs._size(value)`: the size of a payload, a result, a step's output or an event's
//! payload as pg_jobs's limits measure it, uncompressed. `pg_column_size()` answers the size as
//! stored, which is compressed for a value read from a table (any role may fill a temporary
//! one): a 240 MB result of repeated text measured under the 1 MB limit. The size comes from the
//! value's header (or its TOAST pointer): nothing is decompressed or read to measure it.

use pgrx::prelude::*;
use pgrx::AnyElement;

/// `jobs._size(anyelement)`: the value's size in bytes uncompressed, its header included (the
/// same figure pg_column_size() gives for a value stored uncompressed).
#[pg_extern(immutable, parallel_safe, name = "_size")]
fn size(value: AnyElement) -> i64 {
    // SAFETY: the type's length is read from the catalog; a varlena's header (or its TOAST
    // pointer) is read from the datum PostgreSQL handed us, which it keeps alive for the call.
    let typlen = unsafe { pg_sys::get_typlen(value.oid()) };
    if typlen != -1 {
        error!("jobs._size: a value of a variable-length type was expected, got one of length {typlen}");
    }
    unsafe { pg_sys::toast_raw_datum_size(value.datum()) as i64 }
}
