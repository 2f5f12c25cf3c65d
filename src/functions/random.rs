//! Random bytes from the server's strong source (OpenSSL or /dev/urandom), for job ids and
//! claim tokens: neither may be guessed from earlier ones. Drawn 4 kB at a time into a pool of
//! the backend's own (no other process can read it): one pg_strong_random call cost about
//! 1 µs, as much as the rest of a claimed row's update, and a claim draws once per job.

use pgrx::prelude::*;
use std::cell::RefCell;

const POOL: usize = 4096;

thread_local! {
    /// The unused bytes of the pool are `bytes[next..]`.
    static STATE: RefCell<(Box<[u8; POOL]>, usize)> = RefCell::new((Box::new([0; POOL]), POOL));
}

pub fn fill(out: &mut [u8]) {
    assert!(out.len() <= POOL);
    STATE.with(|state| {
        let (bytes, next) = &mut *state.borrow_mut();
        if POOL - *next < out.len() {
            strong(&mut bytes[..]);
            *next = 0;
        }
        out.copy_from_slice(&bytes[*next..*next + out.len()]);
        // Spent bytes are not left behind to be handed out again.
        bytes[*next..*next + out.len()].fill(0);
        *next += out.len();
    });
}

fn strong(bytes: &mut [u8]) {
    // SAFETY: the buffer is bytes.len() writable bytes, and pg_strong_random writes at most len.
    let filled = unsafe { pg_sys::pg_strong_random(bytes.as_mut_ptr().cast(), bytes.len()) };
    if !filled {
        error!("pg_jobs: could not generate random bytes");
    }
}
