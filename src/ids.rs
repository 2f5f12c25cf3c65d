//! Job ids: a job enqueued without a caller-allocated id gets a UUIDv7 (RFC 9562), made here
//! because PostgreSQL 15 has no generator for them. The first 48 bits are the Unix time in
//! milliseconds, the next 12 the fraction of that millisecond (RFC 9562, method 3), the last
//! 62 random. Jobs enqueued one after another get ids that sort one after another, so a
//! batch a worker claims sits on neighbouring primary-key pages instead of pages scattered at
//! random: draining batches of 100 ran 10-15% faster than with random ids, CPU-bound
//! (docs/BENCHMARKS.md). An id thus tells when its job was enqueued.

use crate::random;
use pgrx::prelude::*;
use std::time::{SystemTime, UNIX_EPOCH};

/// A new UUIDv7, for `jobs._enqueue`.
#[pg_extern(volatile, parallel_safe, name = "_uuid_v7")]
fn uuid_v7() -> pgrx::Uuid {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let mut bytes = [0u8; 16];
    random::fill(&mut bytes[8..]);
    let millis = now.as_millis() as u64;
    let fraction = (u64::from(now.subsec_nanos() % 1_000_000) * 4096 / 1_000_000) as u16;
    bytes[..6].copy_from_slice(&millis.to_be_bytes()[2..]);
    bytes[6] = 0x70 | (fraction >> 8) as u8; // version 7, then the fraction's top 4 bits
    bytes[7] = fraction as u8;
    bytes[8] = 0x80 | (bytes[8] & 0x3f); // the RFC 9562 variant
    pgrx::Uuid::from_bytes(bytes)
}
