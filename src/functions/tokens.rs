//! Claim tokens (the fence). A token is a bigint: in its high 40 bits, the later of the
//! milliseconds since 2024-01-01 on the server's clock and the job's previous token's high bits
//! plus one; in its low 23 bits, random bits.
//!
//! - Each token of a job is greater than every earlier one (the contract): the high bits grow
//!   by one at least.
//! - A token is never handed out twice for a job, even by a claim that a crash or a failover
//!   lost (one committed without waiting for its WAL flush, `pg_jobs.async_claims`): such a
//!   claim was made before the crash, so at an earlier millisecond than any claim after the
//!   restart, and its token is smaller than theirs. This assumes the clock does not step back
//!   across the crash (or, after a failover, that the new primary's clock is not behind the
//!   old one's by more than the failover took); docs/GUARANTEES.md says what happens if it
//!   does. A job claimed faster than once a millisecond runs ahead of the clock, by as many
//!   milliseconds as it was claimed too often; a restart takes seconds.
//! - No token can be derived from an earlier one: a worker that saw one token of a job cannot
//!   compute the next and act for the worker that holds it (23 random bits, and the
//!   millisecond of a claim it did not see). A refused write never names the current token
//!   (docs/SECURITY.md).
//!
//! Tokens of 0.1.0 (a per-job counter above 32 random bits) are far below today's milliseconds,
//! so a job's first new token is greater than its last old one.

use crate::functions::random;
use pgrx::prelude::*;

const RANDOM_BITS: u32 = 23;
/// 2024-01-01 00:00:00 UTC in PostgreSQL's epoch (2000-01-01), in microseconds.
const EPOCH_2024_US: i64 = 757_382_400_000_000;
/// The high bits run out in 2058.
const MAX_HIGH: i64 = (1 << (63 - RANDOM_BITS)) - 1;

/// `jobs._next_claim(previous)`: the token after `previous`, for a claim, a cancel or a requeue
/// (the last two move the token so that no earlier holder is fenced in).
#[pg_extern(volatile, strict, parallel_safe, name = "_next_claim")]
fn next_claim(previous: i64) -> i64 {
    let now_us = unsafe { pg_sys::GetCurrentTimestamp() };
    let high = next_high(previous, now_us);
    let mut low = [0u8; 4];
    random::fill(&mut low);
    let low = i64::from(u32::from_be_bytes(low)) & ((1 << RANDOM_BITS) - 1);
    (high << RANDOM_BITS) | low
}

/// The high bits of the token after `previous` at `now_us` (PostgreSQL's timestamp).
fn next_high(previous: i64, now_us: i64) -> i64 {
    let millis = (now_us - EPOCH_2024_US).max(0) / 1000;
    let high = millis.max((previous.max(0) >> RANDOM_BITS) + 1);
    if high > MAX_HIGH {
        error!("pg_jobs: claim tokens ran out (their milliseconds end in 2058)");
    }
    high
}

#[cfg(any(test, feature = "pg_test"))]
#[pg_schema]
mod tests {
    use super::*;

    #[pg_test]
    fn a_token_follows_the_clock_and_never_falls_behind_the_last() {
        let t = EPOCH_2024_US + 1_000_000; // a second after the epoch
        assert_eq!(next_high(0, t), 1000);
        assert_eq!(next_high(5000 << RANDOM_BITS, t), 5001); // ahead of the clock: +1
        assert_eq!(next_high((999 << RANDOM_BITS) | 12345, t), 1000);
        // A 0.1.0 token (a counter of 7 above 32 random bits) is below the next one.
        let old: i64 = (7 << 32) | 0xFFFF_FFFF;
        assert!(next_high(old, t) << RANDOM_BITS > old);
    }
}
