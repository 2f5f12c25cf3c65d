//! What runs at a transaction's end in a client's backend, through the one owner of the
//! transaction callbacks (`xact`): the blocking claim's wake-ups, the notifications handed to
//! the sweepers (`relay`), the outcome counters, the asynchronous commit of a lone claim or
//! heartbeat, and the counts of live children; `statement` tells them what the top-level
//! statement was.

pub(crate) mod async_claims;
pub(crate) mod children;
pub(crate) mod outcomes;
pub(crate) mod relay;
pub(crate) mod statement;
pub(crate) mod wakeups;
pub(crate) mod xact;
