//! A claim from a queue that no job was ever enqueued to (a typo such as `'Default'`) answers
//! nothing, for ever, like a claim from an empty queue. `jobs.claim` calls this when it found
//! nothing, and it warns once per connection and queue when a queue is not in
//! `jobs_data.queues` (every enqueue registers its queue there). What it learned is kept for
//! the life of the backend, so a worker polling known queues pays a hash lookup per empty
//! claim, not a query.

use pgrx::pg_sys::panic::ErrorReport;
use pgrx::prelude::*;
use std::cell::RefCell;
use std::collections::HashSet;

thread_local! {
    /// Queues seen in jobs_data.queues, and queues warned about, by this backend.
    static KNOWN: RefCell<HashSet<String>> = RefCell::new(HashSet::new());
    static WARNED: RefCell<HashSet<String>> = RefCell::new(HashSet::new());
}

/// `jobs._warn_unknown_queues(queues)`: a WARNING for each queue never used, once per
/// connection.
#[pg_extern(volatile, parallel_unsafe, name = "_warn_unknown_queues")]
fn warn_unknown_queues(queues: Vec<Option<String>>) {
    for queue in queues.into_iter().flatten() {
        if KNOWN.with(|k| k.borrow().contains(&queue))
            || WARNED.with(|w| w.borrow().contains(&queue))
        {
            continue;
        }
        // A read-only look (Spi::get_one_with_args would give the transaction an id: a waiting
        // claim would then hold back vacuum while it sleeps).
        let exists = Spi::connect(|client| {
            client
                .select(
                    "select exists (select from jobs_data.queues as q where q.queue = $1)",
                    Some(1),
                    &[queue.as_str().into()],
                )?
                .first()
                .get_one::<bool>()
        })
        .ok()
        .flatten()
        .unwrap_or(true);
        if exists {
            KNOWN.with(|k| k.borrow_mut().insert(queue));
        } else {
            ErrorReport::new(
                PgSqlErrorCode::ERRCODE_WARNING,
                format!("jobs.claim: queue \"{queue}\" is unknown: no job is, or lately was, enqueued to it"),
                "jobs.claim",
            )
            .set_hint(
                "check the queue's name (names are case-sensitive: 'default', not 'Default'); \
                 jobs.queues lists every queue in use. Warned once per connection",
            )
            .report(PgLogLevel::WARNING);
            WARNED.with(|w| w.borrow_mut().insert(queue));
        }
    }
}
