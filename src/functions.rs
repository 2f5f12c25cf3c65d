//! SQL-callable functions written in Rust that need no more than their call: the clock and
//! retention settings, cron expressions, job ids, sizes, claim tokens (and their random bits),
//! and the claim's warning for a queue never used.

pub(crate) mod clock;
pub(crate) mod cron;
pub(crate) mod ids;
pub(crate) mod random;
pub(crate) mod sizes;
pub(crate) mod tokens;
pub(crate) mod unknown_queues;
