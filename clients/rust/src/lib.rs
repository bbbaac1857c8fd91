//! Rust client for the dlock Redis module (`libdlock.so`): waiting, watchdog, lost-lock signal,
//! MultiLock and RedLock — what a Rust service uses instead of Redisson.
//!
//! The crate talks to the module only through its commands (`DLOCK.ACQUIRE`,
//! `DLOCK.RWACQUIRE`, `DLOCK.FAIRACQUIRE`, `DLOCK.RELEASE`, `DLOCK.RENEW`) over the
//! [`redis`] crate. It adds what a command cannot do on its own:
//!
//! - **waiting** with the server-side `WAIT` (no polling), split into bounded slices
//!   ([`Options::wait_slice`], 5 s by default) so a connection is never blocked
//!   indefinitely;
//! - **owner ids** unique per client instance and per thread (blocking API) or per task
//!   (async API): `<uuid>:<thread-id>`, which makes the locks reentrant per thread;
//! - a **watchdog**: a lock taken without an explicit lease gets a 30 s lease renewed
//!   every 10 s while its guard lives ([`Options::watchdog_lease`],
//!   [`Options::renew_interval`]);
//! - an honest **lost-lock signal**: when a renewal answers 0, or the server stays
//!   unreachable until the lease would end, the guard says so ([`Guard::is_lost`],
//!   [`Guard::lost_signal`]) — never silently;
//! - a typed release outcome, [`Unlock`]: releasing a lost lock answers
//!   [`Unlock::Lost`], it does not panic;
//! - [`MultiLock`] (all of several locks or none) and [`RedLock`] (majority of N
//!   independent servers);
//! - **durable grants** ([`Lock::replicas`], [`Durable`]): `WAIT` for replicas on the
//!   connection that got the grant, and a release plus [`Error::NotDurable`] (or
//!   another try) when too few acknowledge;
//! - **Sentinel** ([`Client::sentinel`], [`aio::AsyncClient::sentinel`]): the master is
//!   asked of the Sentinels, and followed across a failover;
//! - **no abandoned queue places**: a fair try that gives up (or an async acquire whose
//!   future is dropped) sends `DLOCK.CANCEL`, so the next owner is served at once;
//! - **typed errors** ([`Error`]): `is_wrong_kind` (with the [`FoundKind`]),
//!   `is_not_held`, `is_queue_full`, `is_deadlock`, `is_unknown_command` — and a server
//!   without the module gets an error that says how to load it.
//!
//! The blocking API is at the crate root ([`Client`], [`Lock`], [`Guard`]); the async
//! (tokio) API mirrors it in [`aio`], including [`aio::AsyncMultiLock`] and
//! [`aio::AsyncRedLock`].
//!
//! ```no_run
//! use std::time::Duration;
//! use dlock_client::{Client, Unlock};
//!
//! let client = Client::open("redis://127.0.0.1:6379/")?;
//! let orders = client.mutex("orders");
//!
//! // Waits until granted; the watchdog keeps the lock while `guard` lives.
//! let guard = orders.lock()?;
//! println!("fencing token {}", guard.token());
//! assert_eq!(guard.unlock()?, Unlock::Released);
//!
//! // Waits at most 2 s, with an explicit 10 s lease (no watchdog).
//! if let Some(guard) = orders.try_lock(Duration::from_secs(2), Some(Duration::from_secs(10)))? {
//!     // ... work, checking guard.is_lost() at safe points ...
//!     drop(guard); // releases
//! }
//! # Ok::<(), dlock_client::Error>(())
//! ```

// A library must return errors, not panic (tests and doc examples may unwrap).
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::unreachable,
        clippy::indexing_slicing,
        clippy::arithmetic_side_effects
    )
)]
#![warn(missing_docs)]

#[macro_use]
mod api_macros;
pub mod aio;
mod blocking;
mod cmd;
mod core;
mod deadlock;
mod durable;
mod error;
mod lost;
mod multi;
pub mod recipes;
mod redlock;
mod sentinel;
mod visibility;
mod watchdog;

pub use blocking::{Client, Guard, Latch, Lock, RwLock};
pub use core::WaitMode;
pub use deadlock::{DeadlockError, DeadlockStep};
pub use durable::Durable;
pub use error::{Error, FoundKind, Result};
pub use lost::{LostReason, LostSignal};
pub use multi::{MultiGuard, MultiLock};
pub use redlock::{RedLock, RedLockGuard};
pub use visibility::{
    Histogram, HolderInfo, KindStats, LockInfo, ScanOptions, SlowEntry, WaiterInfo,
};

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// What [`Guard::unlock`] (and the other guards' `unlock`) found.
///
/// ```no_run
/// # use dlock_client::{Client, Unlock};
/// # let client = Client::open("redis://127.0.0.1/")?;
/// let guard = client.mutex("job").lock()?;
/// match guard.unlock()? {
///     Unlock::Released => {}                        // the lock is free for others
///     Unlock::StillHeld => {}                       // reentrant: an outer guard holds it
///     Unlock::Lost => eprintln!("lease ran out"),   // someone else may have had it
/// }
/// # Ok::<(), dlock_client::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Unlock {
    /// This hold is gone and the owner holds the lock no more (`DLOCK.RELEASE` answered 1).
    Released,
    /// The owner still holds the lock: it was taken more than once (reentrant) and an
    /// outer hold remains (`DLOCK.RELEASE` answered 0).
    StillHeld,
    /// The owner did not hold the lock any more: its lease ended, or it was
    /// force-released (`DLOCK.RELEASE` answered `NOTHELD`). Whatever the guard protected
    /// may have been changed by another holder meanwhile.
    Lost,
}

/// The kind of lock a [`Lock`] handle takes.
///
/// ```
/// # use dlock_client::LockKind;
/// assert_eq!(LockKind::Read.command(), "DLOCK.RWACQUIRE");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LockKind {
    /// Reentrant mutex (`DLOCK.ACQUIRE`).
    Mutex,
    /// Shared side of a read-write lock (`DLOCK.RWACQUIRE … READ`).
    Read,
    /// Exclusive side of a read-write lock (`DLOCK.RWACQUIRE … WRITE`).
    Write,
    /// Fair (FIFO) mutex (`DLOCK.FAIRACQUIRE`).
    Fair,
    /// `permits` permits of a counting semaphore of `limit` permits
    /// (`DLOCK.SEMACQUIRE … LIMIT limit PERMITS permits`): strict FIFO, every
    /// hold leased, fenced and renewed like a lock hold.
    Semaphore {
        /// The semaphore's limit (fixed when the key is created).
        limit: u64,
        /// Permits this handle takes and gives back.
        permits: u32,
    },
}

impl LockKind {
    /// The acquire command for this kind.
    ///
    /// ```
    /// # use dlock_client::LockKind;
    /// assert_eq!(LockKind::Fair.command(), "DLOCK.FAIRACQUIRE");
    /// ```
    pub fn command(self) -> &'static str {
        match self {
            LockKind::Mutex => "DLOCK.ACQUIRE",
            LockKind::Read | LockKind::Write => "DLOCK.RWACQUIRE",
            LockKind::Fair => "DLOCK.FAIRACQUIRE",
            LockKind::Semaphore { .. } => "DLOCK.SEMACQUIRE",
        }
    }
}

/// Client settings shared by the blocking [`Client`] and the async [`aio::AsyncClient`].
///
/// ```
/// use std::time::Duration;
/// use dlock_client::Options;
///
/// let opts = Options::default()
///     .watchdog_lease(Duration::from_secs(5))
///     .renew_interval(Duration::from_millis(1500));
/// assert_eq!(opts.wait_slice, Duration::from_secs(5));
/// ```
#[derive(Clone, Debug)]
pub struct Options {
    /// Lease of a lock taken without an explicit lease; the watchdog renews it.
    /// Default 30 s.
    pub watchdog_lease: Duration,
    /// How often the watchdog renews. Default 10 s (a third of the lease).
    pub renew_interval: Duration,
    /// The longest single server-side `WAIT`; longer waits are split into slices of
    /// this length, so a connection is never blocked longer. Default 5 s.
    pub wait_slice: Duration,
    /// Timeout of one command (beyond its `WAIT`), e.g. a release. Default 5 s.
    pub command_timeout: Duration,
    /// Timeout to open a connection. Default 5 s.
    pub connect_timeout: Duration,
    /// Replaces the random uuid at the start of owner ids (`<prefix>:<thread>`).
    /// Default `None`: a fresh uuid v4 per client instance.
    pub owner_prefix: Option<String>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            watchdog_lease: Duration::from_secs(30),
            renew_interval: Duration::from_secs(10),
            wait_slice: Duration::from_secs(5),
            command_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(5),
            owner_prefix: None,
        }
    }
}

impl Options {
    /// Sets [`Options::watchdog_lease`].
    ///
    /// ```
    /// # use std::time::Duration;
    /// let o = dlock_client::Options::default().watchdog_lease(Duration::from_secs(1));
    /// assert_eq!(o.watchdog_lease, Duration::from_secs(1));
    /// ```
    pub fn watchdog_lease(mut self, lease: Duration) -> Self {
        self.watchdog_lease = lease;
        self
    }
    /// Sets [`Options::renew_interval`].
    ///
    /// ```
    /// # use std::time::Duration;
    /// let o = dlock_client::Options::default().renew_interval(Duration::from_millis(300));
    /// assert_eq!(o.renew_interval, Duration::from_millis(300));
    /// ```
    pub fn renew_interval(mut self, interval: Duration) -> Self {
        self.renew_interval = interval;
        self
    }
    /// Sets [`Options::wait_slice`].
    ///
    /// ```
    /// # use std::time::Duration;
    /// let o = dlock_client::Options::default().wait_slice(Duration::from_secs(1));
    /// assert_eq!(o.wait_slice, Duration::from_secs(1));
    /// ```
    pub fn wait_slice(mut self, slice: Duration) -> Self {
        self.wait_slice = slice;
        self
    }
    /// Sets [`Options::command_timeout`].
    ///
    /// ```
    /// # use std::time::Duration;
    /// let o = dlock_client::Options::default().command_timeout(Duration::from_secs(2));
    /// assert_eq!(o.command_timeout, Duration::from_secs(2));
    /// ```
    pub fn command_timeout(mut self, timeout: Duration) -> Self {
        self.command_timeout = timeout;
        self
    }
    /// Sets [`Options::connect_timeout`].
    ///
    /// ```
    /// # use std::time::Duration;
    /// let o = dlock_client::Options::default().connect_timeout(Duration::from_secs(2));
    /// assert_eq!(o.connect_timeout, Duration::from_secs(2));
    /// ```
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }
    /// Sets [`Options::owner_prefix`].
    ///
    /// ```
    /// let o = dlock_client::Options::default().owner_prefix("billing-7");
    /// assert_eq!(o.owner_prefix.as_deref(), Some("billing-7"));
    /// ```
    pub fn owner_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.owner_prefix = Some(prefix.into());
        self
    }

    /// The owner-id prefix of a new client: the configured one or a fresh uuid.
    pub(crate) fn new_prefix(&self) -> String {
        self.owner_prefix
            .clone()
            .unwrap_or_else(|| uuid::Uuid::new_v4().to_string())
    }
}

/// How long a grant may take to arrive (from sending the request) before the
/// client re-anchors the lease with a RENEW: a quarter of the lease, so the
/// lost-lock clock, which starts when the request was sent, always leaves
/// most of the lease.
pub(crate) fn lease_clock_slack(lease: Duration) -> Duration {
    part(lease, 4)
}

/// The channel on which the module publishes `released`, `expired` and `deleted` for
/// `key`: `dlock:` + key when the key has a Redis Cluster hash tag, else
/// `dlock:{` + key + `}`.
///
/// ```
/// use dlock_client::channel_for;
/// assert_eq!(channel_for("orders"), "dlock:{orders}");
/// assert_eq!(channel_for("{user1}:lock"), "dlock:{user1}:lock");
/// ```
pub fn channel_for(key: &str) -> String {
    if has_hash_tag(key) {
        format!("dlock:{key}")
    } else {
        format!("dlock:{{{key}}}")
    }
}

fn has_hash_tag(key: &str) -> bool {
    match key.find('{') {
        Some(open) => match key.get(open.saturating_add(1)..).and_then(|k| k.find('}')) {
            Some(len) => len > 0,
            None => false,
        },
        None => false,
    }
}

static NEXT_THREAD_TAG: AtomicU64 = AtomicU64::new(1);

/// A small number unique to the calling thread within this process.
pub(crate) fn thread_tag() -> u64 {
    thread_local! {
        static TAG: u64 = NEXT_THREAD_TAG.fetch_add(1, Ordering::Relaxed);
    }
    TAG.with(|t| *t)
}

/// The safety margin for clock drift over `lease`: 1 % + 2 ms (as in Redlock).
pub(crate) fn drift(lease: Duration) -> Duration {
    part(lease, 100).saturating_add(Duration::from_millis(2))
}

/// `d / n` (zero for `n == 0`).
pub(crate) fn part(d: Duration, n: u32) -> Duration {
    d.checked_div(n).unwrap_or(Duration::ZERO)
}

/// `t + d`, or `t` itself should that not be representable.
pub(crate) fn later(t: std::time::Instant, d: Duration) -> std::time::Instant {
    t.checked_add(d).unwrap_or(t)
}

/// The `PX` of a lease (`what` names where it came from, for the error): whole
/// milliseconds rounded up, or [`Error::Invalid`] for a zero lease, which would end as it
/// is granted (the Python and Node clients refuse it too).
pub(crate) fn lease_ms(lease: Duration, what: &str) -> Result<u64> {
    if lease.is_zero() {
        return Err(Error::Invalid(format!(
            "{what} must be positive, got 0 ms: a zero lease would end as it is granted \
             (give at least 1 ms, or None for the watchdog lease)"
        )));
    }
    Ok(ceil_ms(lease).max(1))
}

/// Whole milliseconds of `d`, rounded up (at least 1 for a non-zero duration).
pub(crate) fn ceil_ms(d: Duration) -> u64 {
    let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    if Duration::from_millis(ms) < d {
        ms.saturating_add(1)
    } else {
        ms
    }
}
