//! Claim tokens (the fence). A token is a bigint: a per-job counter in the high 31 bits and 32
//! random bits below it, so each token of a job is greater than every earlier one (the
//! contract), yet no token can be derived from an earlier one: a worker that saw claim N of a
//! job cannot compute claim N+1 and act for the worker that holds it. A refused write never
//! names the current token (docs/SECURITY.md).

use crate::random;
use pgrx::prelude::*;

const RANDOM_BITS: u32 = 32;

/// `jobs._next_claim(previous)`: the token after `previous`, for a claim, a cancel or a requeue
/// (the last two move the token so that no earlier holder is fenced in).
#[pg_extern(volatile, strict, parallel_safe, name = "_next_claim")]
fn next_claim(previous: i64) -> i64 {
    let counter = (previous.max(0) >> RANDOM_BITS) + 1;
    if counter > i64::from(i32::MAX) {
        error!(
            "pg_jobs: this job has been claimed 2^31 times; its claim token cannot grow further"
        );
    }
    let mut low = [0u8; 4];
    random::fill(&mut low);
    (counter << RANDOM_BITS) | i64::from(u32::from_be_bytes(low))
}
