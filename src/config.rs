//! Module configs: `dlock.default-lease-ms`, `dlock.fair-queue-timeout-ms`,
//! `dlock.max-queue` and `dlock.apply-from-clients`. Defaults and ranges are
//! the constants here, used by the `redis_module!` registration and the
//! module-argument check alike.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering::Relaxed};

/// Largest lease, wait or timeout config, in ms (2^40).
pub const MAX_MS: i64 = 1 << 40;
/// Default and largest `dlock.max-queue`.
pub const MAX_QUEUE_DEFAULT: i64 = 10_000;
pub const MAX_QUEUE_MAX: i64 = 1 << 32;

/// Lease used when an acquire or RENEW gives no `PX`.
pub static DEFAULT_LEASE_MS: AtomicI64 = AtomicI64::new(30_000);
/// How long a queued fair-lock owner keeps its place without asking again.
pub static FAIR_QUEUE_TIMEOUT_MS: AtomicI64 = AtomicI64::new(5_000);

pub fn default_lease_ms() -> u64 {
    DEFAULT_LEASE_MS.load(Relaxed).max(1) as u64
}

pub fn fair_queue_timeout_ms() -> u64 {
    FAIR_QUEUE_TIMEOUT_MS.load(Relaxed).max(1) as u64
}

/// Most places one lock's queue may hold (`QUEUEFULL` beyond).
pub static MAX_QUEUE: AtomicI64 = AtomicI64::new(MAX_QUEUE_DEFAULT);

pub fn max_queue() -> usize {
    usize::try_from(MAX_QUEUE.load(Relaxed).max(1)).unwrap_or(usize::MAX)
}

/// Load-time only (immutable), off by default: accept DLOCK.APPLY from
/// clients too, like Redis' `enable-debug-command`. For test suites and
/// tooling that inject state; never where untrusted clients connect.
pub static APPLY_FROM_CLIENTS: AtomicBool = AtomicBool::new(false);

pub fn apply_from_clients() -> bool {
    APPLY_FROM_CLIENTS.load(Relaxed)
}
