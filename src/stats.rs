//! Counters and gauges for `INFO dlock`. Atomics, because the free callback
//! of a lock may run on a lazy-free thread.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};

macro_rules! counters {
    ($($name:ident),* $(,)?) => {
        /// Monotonic counters, in `INFO dlock` order.
        #[allow(non_upper_case_globals)]
        pub mod counter {
            use std::sync::atomic::AtomicU64;
            $(pub static $name: AtomicU64 = AtomicU64::new(0);)*
        }
        /// (field name, value) of every counter.
        pub fn counters() -> Vec<(&'static str, u64)> {
            vec![$((stringify!($name), counter::$name.load(Relaxed)),)*]
        }
    };
}

counters!(
    grants,
    reentrant_grants,
    releases,
    renewals,
    expirations,
    waits_begun,
    waits_timed_out,
    handoffs,
    force_releases,
    latches_opened,
    bound_ends,
    delayed_ends,
    fenced_run,
    fenced_refused,
    ready_callbacks,
    deadlocks,
    deadlock_checks_truncated,
    promotions,
    state_busy,
    places_cancelled,
);

/// Adds `n` to a counter.
pub fn add(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Relaxed);
}

static LOCKS: AtomicI64 = AtomicI64::new(0);

/// A lock value came into being (command, load, restore).
pub fn lock_created() {
    LOCKS.fetch_add(1, Relaxed);
}

/// A lock value was freed.
pub fn lock_freed() {
    LOCKS.fetch_sub(1, Relaxed);
}

/// Lock values in memory.
pub fn locks() -> u64 {
    LOCKS.load(Relaxed).max(0) as u64
}

static WAITERS: AtomicI64 = AtomicI64::new(0);

/// Brings the waiters gauge in step with `lock`'s queue (after a change, a
/// load or an APPLY).
/// A lock's queue went from `before` to `now` places (0 when it is freed).
pub fn waiters_changed(before: u32, now: u32) {
    let delta = i64::from(now) - i64::from(before);
    if delta != 0 {
        WAITERS.fetch_add(delta, Relaxed);
    }
}

pub fn waiters() -> u64 {
    WAITERS.load(Relaxed).max(0) as u64
}
