//! Rust client for the dlock Redis module (`libdlock.so`): waiting, watchdog, lost-lock signal,
//! MultiLock and RedLock — what a Rust service uses instead of Redisson.
//!
//! The crate talks to the module only through its commands (`DLOCK.ACQUIRE`,
//! `DLOCK.RWACQUIRE`, `DLOCK.FAIRACQUIRE`, `DLOCK.RELEASE`, `DLOCK.RENEW`, `DLOCK.CHECK`,
//! `DLOCK.CANCEL`) over the [`redis`] crate, and keeps the client contract of every
//! dlock client (the repository's `docs/clients.md`). It adds what a command cannot do
//! on its own:
//!
//! - **waiting** with the server-side `WAIT` (no polling), split into slices that fit
//!   the client's reply timeout ([`Options::server_wait_slice`]: 4 s by default), the
//!   caller's deadline kept even when the server is down or partitioned;
//! - **owner ids** unique per client instance and per thread (blocking API) or per task
//!   (async API): `<uuid>:<thread-id>`, which makes the locks reentrant per thread;
//! - a **watchdog**: a lock taken without an explicit lease gets a 30 s lease renewed
//!   every third of it while its guard lives ([`Options::watchdog_lease`],
//!   [`Options::renew_interval`]);
//! - an honest **lost-lock signal** ([`Guard::is_lost`], [`Guard::lost_signal`]): it
//!   fires, from a clock of its own, no later than the instant the lease could have
//!   ended on the server, whatever the network does — and within a round trip of the
//!   lock's notice when the server ends the hold (force-release, `DEL`, a closed `BIND`
//!   connection), with the [`LostReason`];
//! - a typed release outcome, [`Unlock`]: releasing a lost lock answers
//!   [`Unlock::Lost`]; a release that cannot get through (also on a fresh connection)
//!   [`Unlock::Unknown`]; the watchdog stops whatever the answer;
//! - [`MultiLock`] (all of several locks or none) and [`RedLock`] (majority of N
//!   independent servers);
//! - **durable grants** ([`Lock::replicas`], [`Durable`]): `WAIT` for replicas on the
//!   connection that got the grant, and a release plus [`Error::NotDurable`] (or
//!   another try) when too few acknowledge;
//! - **Sentinel** ([`Client::sentinel`], [`aio::AsyncClient::sentinel`]): the master is
//!   asked of the Sentinels, and followed across a failover;
//! - **no abandoned queue places**: a fair try that gives up (or an async acquire whose
//!   future is dropped) sends `DLOCK.CANCEL`, so the next owner is served at once;
//! - **typed errors** ([`Error`]), one predicate per kind: `is_timeout`,
//!   `is_wrong_kind` (with the [`FoundKind`]), `is_module_not_loaded` (the error says
//!   how to load the module), `is_deadlock`, `is_queue_full`, `is_not_durable`,
//!   `is_connection`, `is_invalid_argument` (bad input is refused before anything is
//!   sent);
//! - **no leftovers**: [`Client::close`] stops the client's background work, and none
//!   keeps a process alive.
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
mod subscriber;
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

/// What [`Guard::unlock`] (and the other guards' `unlock`) found. Whichever it is, the
/// watchdog has stopped: the hold is never renewed again (docs/clients.md, rule 3).
///
/// ```no_run
/// # use dlock_client::{Client, Unlock};
/// # let client = Client::open("redis://127.0.0.1/")?;
/// let guard = client.mutex("job").lock()?;
/// match guard.unlock()? {
///     Unlock::Released => {}                        // the lock is free for others
///     Unlock::StillHeld => {}                       // reentrant: an outer guard holds it
///     Unlock::Lost => eprintln!("lease ran out"),   // someone else may have had it
///     Unlock::Unknown => eprintln!("not confirmed"), // ends at its lease at the latest
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
    /// The release could not be confirmed: it failed on the connection, and once more
    /// on a fresh connection (server down, partitioned, or an unexpected reply). The
    /// hold is not renewed any more, so it ends at its lease at the latest; the guard's
    /// lost signal fires then unless the server said otherwise.
    Unknown,
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
/// let opts = Options::default().watchdog_lease(Duration::from_secs(6));
/// assert_eq!(opts.renew_every(), Duration::from_secs(2)); // a third of the lease
/// assert_eq!(opts.server_wait_slice(), Duration::from_secs(4));
/// ```
#[derive(Clone, Debug)]
pub struct Options {
    /// Lease of a lock taken without an explicit lease; the watchdog renews it.
    /// Default 30 s.
    pub watchdog_lease: Duration,
    /// How often the watchdog renews. `None` (the default): a third of the lease being
    /// renewed, so the interval follows [`Options::watchdog_lease`] (and an election's
    /// lease). An interval not below the lease is refused with [`Error::Invalid`] when a
    /// hold would use it, before anything is sent.
    pub renew_interval: Option<Duration>,
    /// The longest single server-side `WAIT` (default 4 s); longer waits are split into
    /// slices. A slice is also kept shorter than [`Options::command_timeout`], the reply
    /// timeout of the client's connections: see [`Options::server_wait_slice`].
    pub wait_slice: Duration,
    /// The reply timeout of every connection this client makes — the transport timeout
    /// of `docs/clients.md`: no reply (a `WAIT` slice's included) is waited for longer.
    /// Applied by the client to each command on its blocking connections (socket
    /// timeouts) and its async ones (in place of redis-rs' own response timeout, 500 ms
    /// on multiplexed connections, which would cut every longer `WAIT`). Default 5 s.
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
            renew_interval: None,
            wait_slice: DEFAULT_SLICE,
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
    /// assert_eq!(o.renew_interval, Some(Duration::from_millis(300)));
    /// ```
    pub fn renew_interval(mut self, interval: Duration) -> Self {
        self.renew_interval = Some(interval);
        self
    }

    /// How often the watchdog renews a hold of [`Options::watchdog_lease`]: the
    /// [`Options::renew_interval`] given, or a third of the lease.
    ///
    /// ```
    /// # use std::time::Duration;
    /// let o = dlock_client::Options::default().watchdog_lease(Duration::from_secs(3));
    /// assert_eq!(o.renew_every(), Duration::from_secs(1));
    /// ```
    pub fn renew_every(&self) -> Duration {
        self.renew_interval_for(self.watchdog_lease)
    }

    /// The renew interval of a hold of `lease`: the one given, or a third of `lease`.
    pub(crate) fn renew_interval_for(&self, lease: Duration) -> Duration {
        self.renew_interval.unwrap_or_else(|| part(lease, 3))
    }

    /// The longest server-side `WAIT` of one request (docs/clients.md, rule 4):
    /// `min(wait_slice, command_timeout − max(100 ms, command_timeout / 5))`, at least
    /// 10 ms — so every slice's reply arrives within the reply timeout.
    ///
    /// ```
    /// # use std::time::Duration;
    /// let o = dlock_client::Options::default().command_timeout(Duration::from_secs(1));
    /// assert_eq!(o.server_wait_slice(), Duration::from_millis(800));
    /// ```
    pub fn server_wait_slice(&self) -> Duration {
        let t = self.command_timeout;
        let headroom = part(t, 5).max(Duration::from_millis(100));
        self.wait_slice
            .min(t.saturating_sub(headroom))
            .max(Duration::from_millis(10))
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

    /// Refuses settings no client can work with, naming the field (docs/clients.md,
    /// rule 5): a zero or out-of-range watchdog lease, a renew interval that is zero or
    /// not below it, a zero reply or connect timeout or wait slice. The client
    /// constructors call it, so nothing is ever sent with them.
    pub(crate) fn check(&self) -> Result<()> {
        core::check_watchdog(self.watchdog_lease, self, "Options::watchdog_lease")?;
        for (what, d) in [
            ("Options::command_timeout", self.command_timeout),
            ("Options::connect_timeout", self.connect_timeout),
            ("Options::wait_slice", self.wait_slice),
        ] {
            if d.is_zero() {
                return Err(Error::Invalid(format!("{what} must be positive, got 0 ms")));
            }
        }
        Ok(())
    }

    /// The owner-id prefix of a new client: the configured one or a fresh uuid.
    pub(crate) fn new_prefix(&self) -> String {
        self.owner_prefix
            .clone()
            .unwrap_or_else(|| uuid::Uuid::new_v4().to_string())
    }
}

/// The default longest server-side `WAIT` ([`Options::wait_slice`]): under GLIDE's
/// warning threshold for a 5 s request timeout, as every client of docs/clients.md.
const DEFAULT_SLICE: Duration = Duration::from_secs(4);

/// The longest lease the server takes (`PX` is an integer in 1..2^40 ms).
pub(crate) const MAX_LEASE_MS: u64 = 1 << 40;

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

/// The margin of the lease clock (docs/clients.md, rule 1):
/// `min(lease / 2, lease / 100 + 50 ms)` — clock rate drift between client and server
/// (1 %) and how late a timer may fire under load (50 ms), never more than half the
/// lease.
pub(crate) fn margin(lease: Duration) -> Duration {
    part(lease, 100)
        .saturating_add(Duration::from_millis(50))
        .min(part(lease, 2))
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
/// is granted (every client refuses it), or one longer than the server takes (2^40 ms).
/// The advice fits where the lease was given: an explicit lease may be `None` (the
/// watchdog lease), the watchdog's own lease and an election's term cannot.
pub(crate) fn lease_ms(lease: Duration, what: &str) -> Result<u64> {
    if lease.is_zero() {
        let advice = match what {
            "the lease" => "give at least 1 ms, or None for the watchdog lease",
            "Options::watchdog_lease" => {
                "give at least 1 ms: it is the lease the watchdog renews while a guard \
                 lives (default 30 s)"
            }
            _ => "give at least 1 ms: it is the lease the term's watchdog renews",
        };
        return Err(Error::Invalid(format!(
            "{what} must be positive, got 0 ms: a zero lease would end as it is granted \
             ({advice})"
        )));
    }
    let ms = ceil_ms(lease).max(1);
    if ms > MAX_LEASE_MS {
        return Err(Error::Invalid(format!(
            "{what} must be at most 2^40 ms (about 34 years, the server's limit), got {ms} ms"
        )));
    }
    Ok(ms)
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
