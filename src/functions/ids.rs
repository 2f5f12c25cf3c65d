//! Job ids: a job enqueued without a caller-allocated id gets a UUIDv7 (RFC 9562), from the
//! `uuid` crate, because PostgreSQL 15 has no generator for them. The first 48 bits are the
//! Unix time in milliseconds, then a counter that the crate's per-process context
//! (`ContextV7`) seeds at random each millisecond and increments, so the ids one backend makes
//! are strictly increasing, then random bits. Jobs enqueued one after another get ids that
//! sort one after another, so a batch a worker claims sits on neighbouring primary-key pages
//! instead of pages scattered at random: draining batches of 100 ran 10-15% faster than with
//! random ids, CPU-bound (docs/BENCHMARKS.md). An id thus tells when its job was enqueued.
//!
//! On a shard (`pg_jobs.shard` set), an id's last byte is the shard's number: a router, or a
//! library holding the shards' connections, finds a job's shard from its id alone
//! (docs/SCALING.md). The crate's counter takes the 42 bits after the version and the variant,
//! so the last byte is random bits, and the ids one backend makes still increase.

use pgrx::prelude::*;

/// A new UUIDv7, for `jobs._enqueue`: on a shard, ending with its number.
#[pg_extern(volatile, parallel_safe, name = "_uuid_v7")]
fn uuid_v7() -> pgrx::Uuid {
    let mut bytes = uuid::Uuid::now_v7().into_bytes();
    if let Some(shard) = crate::gucs::shard() {
        bytes[15] = shard;
    }
    pgrx::Uuid::from_bytes(bytes)
}

/// `jobs._shard()`: pg_jobs.shard, or NULL where the server is not a shard.
#[pg_extern(stable, parallel_safe, name = "_shard")]
fn shard() -> Option<i32> {
    crate::gucs::shard().map(i32::from)
}
