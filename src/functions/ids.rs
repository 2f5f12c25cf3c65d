//! Job ids: a job enqueued without a caller-allocated id gets a UUIDv7 (RFC 9562), from the
//! `uuid` crate, because PostgreSQL 15 has no generator for them. The first 48 bits are the
//! Unix time in milliseconds, then a counter that the crate's per-process context
//! (`ContextV7`) seeds at random each millisecond and increments, so the ids one backend makes
//! are strictly increasing, then random bits. Jobs enqueued one after another get ids that
//! sort one after another, so a batch a worker claims sits on neighbouring primary-key pages
//! instead of pages scattered at random: draining batches of 100 ran 10-15% faster than with
//! random ids, CPU-bound (docs/BENCHMARKS.md). An id thus tells when its job was enqueued.

use pgrx::prelude::*;

/// A new UUIDv7, for `jobs._enqueue`.
#[pg_extern(volatile, parallel_safe, name = "_uuid_v7")]
fn uuid_v7() -> pgrx::Uuid {
    pgrx::Uuid::from_bytes(uuid::Uuid::now_v7().into_bytes())
}
