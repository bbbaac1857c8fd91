//! Module configs: `dlock.default-lease-ms` and `dlock.fair-queue-timeout-ms`.

use std::sync::atomic::{AtomicI64, Ordering::Relaxed};

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
