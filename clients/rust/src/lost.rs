//! The lost-lock signal.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Why a guard reports its lock as lost — the loss reasons of docs/clients.md.
///
/// ```
/// use dlock_client::LostReason;
/// assert_eq!(LostReason::Forced.as_str(), "forced");
/// assert_ne!(LostReason::NotHeld, LostReason::Unreachable);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LostReason {
    /// The server ended the hold without this guard releasing it: `DLOCK.FORCERELEASE`,
    /// or the same owner released it elsewhere (a `released` notice, then `DLOCK.CHECK`
    /// said the token is gone).
    Forced,
    /// Its lease ended: an explicit lease (no watchdog) ran out on the client's lease
    /// clock, or the server's `expired` notice.
    Expired,
    /// Its key was deleted (`DEL`, `FLUSHDB`, eviction: the `deleted` notice).
    Deleted,
    /// Its `BIND` connection closed (the `disconnected` notice).
    Disconnected,
    /// No renewal was acknowledged before the lease could have ended on the server
    /// (`sent + lease − margin`, margin = min(lease / 2, lease / 100 + 50 ms)): the
    /// server is down, partitioned or too slow.
    Unreachable,
    /// The server says the hold is gone (a renewal answered 0, a release `NOTHELD`, or
    /// `DLOCK.CHECK` 0 after a reconnect) and no notice said why.
    NotHeld,
    /// RedLock: renewals no longer reach a majority of the servers.
    NoQuorum,
}

impl LostReason {
    /// The old name of [`LostReason::Expired`] (an explicit lease that ran out).
    #[deprecated(since = "0.2.0", note = "renamed to LostReason::Expired")]
    #[allow(non_upper_case_globals)]
    pub const LeaseEnded: LostReason = LostReason::Expired;

    /// The reason's name in docs/clients.md: `forced`, `expired`, `deleted`,
    /// `disconnected`, `unreachable`, `not_held` or `no_quorum`.
    pub fn as_str(self) -> &'static str {
        match self {
            LostReason::Forced => "forced",
            LostReason::Expired => "expired",
            LostReason::Deleted => "deleted",
            LostReason::Disconnected => "disconnected",
            LostReason::Unreachable => "unreachable",
            LostReason::NotHeld => "not_held",
            LostReason::NoQuorum => "no_quorum",
        }
    }

    /// The reason a notice on the lock's channel gives for a hold that `DLOCK.CHECK`
    /// then calls dead: `released` → [`LostReason::Forced`] (this guard did not
    /// release it), `expired`, `deleted`, `disconnected`; anything else
    /// [`LostReason::NotHeld`].
    pub(crate) fn of_notice(message: &[u8]) -> LostReason {
        match message {
            b"released" => LostReason::Forced,
            b"expired" => LostReason::Expired,
            b"deleted" => LostReason::Deleted,
            b"disconnected" => LostReason::Disconnected,
            _ => LostReason::NotHeld,
        }
    }
}

impl std::fmt::Display for LostReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The lease clock of a hold and its reason, under one lock.
#[derive(Debug)]
struct Clock {
    reason: Option<LostReason>,
    /// When the hold counts as lost unless a renewal extends it (`None`: no clock —
    /// a joint signal, or a hold its owner let go).
    valid_until: Option<Instant>,
    /// The reason the clock gives when it runs out.
    expiry: LostReason,
}

/// Shared state behind a [`LostSignal`]: the hold's lease clock (rule 1 of
/// docs/clients.md) and the reason once lost. The clock is a timer of its own: whoever
/// waits on the signal wakes at `valid_until` whatever any network call does, and every
/// question (`is_lost`, `reason`, the waits) answers from this one state.
#[derive(Debug)]
pub(crate) struct LostState {
    flag: AtomicBool,
    clock: Mutex<Clock>,
    cv: Condvar,
    notify: tokio::sync::Notify,
    /// Other states that become lost when this one does (MultiLock).
    listeners: Mutex<Vec<Arc<LostState>>>,
    /// The parts of a joint state (MultiLock): their clocks count as this one's.
    parts: Vec<Arc<LostState>>,
}

impl LostState {
    /// A state whose clock runs out at `valid_until` (`None`: no clock) with `expiry`.
    pub(crate) fn new(valid_until: Option<Instant>, expiry: LostReason) -> Arc<LostState> {
        Self::build(valid_until, expiry, Vec::new())
    }

    /// A state that is lost when any of `parts` is (a MultiLock's), with their clocks.
    pub(crate) fn joint(parts: Vec<Arc<LostState>>) -> Arc<LostState> {
        let joint = Self::build(None, LostReason::NotHeld, parts.clone());
        for p in &parts {
            p.forward_to(joint.clone());
        }
        joint
    }

    fn build(
        valid_until: Option<Instant>,
        expiry: LostReason,
        parts: Vec<Arc<LostState>>,
    ) -> Arc<LostState> {
        Arc::new(LostState {
            flag: AtomicBool::new(false),
            clock: Mutex::new(Clock {
                reason: None,
                valid_until,
                expiry,
            }),
            cv: Condvar::new(),
            notify: tokio::sync::Notify::new(),
            listeners: Mutex::new(Vec::new()),
            parts,
        })
    }

    fn clock(&self) -> std::sync::MutexGuard<'_, Clock> {
        self.clock.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Marks the lock as lost (first reason wins; it stays lost); wakes every waiter.
    pub(crate) fn mark(&self, reason: LostReason) {
        {
            let mut c = self.clock();
            if c.reason.is_none() {
                c.reason = Some(reason);
            }
            c.valid_until = None;
            self.flag.store(true, Ordering::SeqCst);
        }
        self.cv.notify_all();
        self.notify.notify_waiters();
        let listeners =
            std::mem::take(&mut *self.listeners.lock().unwrap_or_else(|e| e.into_inner()));
        for l in listeners {
            l.mark(reason);
        }
    }

    /// A renewal acknowledged at `now` moves the clock to `until`. A hold whose clock had
    /// already run out stays lost (marked now if nobody looked yet), as does one that was
    /// lost or let go: answers whether the hold is still valid.
    pub(crate) fn extend(&self, until: Instant, now: Instant) -> bool {
        let expiry = {
            let mut c = self.clock();
            match c.valid_until {
                _ if c.reason.is_some() => return false,
                None => return false,
                Some(v) if now >= v => c.expiry,
                Some(v) => {
                    c.valid_until = Some(v.max(until));
                    return true;
                }
            }
        };
        self.mark(expiry);
        false
    }

    /// The owner let the hold go (released, or still held by an outer guard): its clock
    /// stops; it is lost only if it already was.
    pub(crate) fn disarm(&self) {
        self.clock().valid_until = None;
    }

    /// When this hold's own clock runs out (`None`: lost, let go, or no clock).
    pub(crate) fn valid_until(&self) -> Option<Instant> {
        let c = self.clock();
        if c.reason.is_some() {
            return None;
        }
        c.valid_until
    }

    /// The earliest instant at which this state (or a part) counts as lost.
    fn deadline(&self) -> Option<Instant> {
        let own = self.valid_until();
        self.parts
            .iter()
            .filter_map(|p| p.deadline())
            .chain(own)
            .min()
    }

    /// Marks the state lost when its clock (or a part's) has run out.
    fn check_deadline(&self) {
        let now = Instant::now();
        let expired = {
            let c = self.clock();
            match c.valid_until {
                Some(v) if c.reason.is_none() && now >= v => Some(c.expiry),
                _ => None,
            }
        };
        if let Some(reason) = expired {
            self.mark(reason);
        }
        for p in &self.parts {
            p.check_deadline();
        }
    }

    /// Makes `other` lost whenever `self` is (at once if it already is).
    pub(crate) fn forward_to(&self, other: Arc<LostState>) {
        let mut ls = self.listeners.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(reason) = self.clock().reason {
            drop(ls);
            other.mark(reason);
        } else {
            ls.push(other);
        }
    }

    pub(crate) fn is_lost(&self) -> bool {
        self.check_deadline();
        self.flag.load(Ordering::SeqCst)
    }

    pub(crate) fn reason(&self) -> Option<LostReason> {
        self.check_deadline();
        self.clock().reason
    }
}

/// A handle on a guard's lost-lock signal: a flag to check, and a signal to block on
/// ([`LostSignal::wait`], [`LostSignal::wait_timeout`]) or await ([`LostSignal::lost`]).
/// It fires at the latest when the hold's lease could have ended on the server (the
/// lease clock, docs/clients.md rule 1), and within a round trip of the server's notice
/// when the server ends the hold (rule 2). Cloneable, and usable after the guard is
/// gone: after a release it never fires (unless it already had); after
/// [`Unlock::Unknown`](crate::Unlock::Unknown) or [`Client::close`](crate::Client::close)
/// it fires when the hold's lease has run out.
///
/// ```no_run
/// # use std::time::Duration;
/// # let client = dlock_client::Client::open("redis://127.0.0.1/")?;
/// let guard = client.mutex("leader").lock()?;
/// let lost = guard.lost_signal();
/// std::thread::spawn(move || {
///     lost.wait();
///     eprintln!("leadership lost: {:?}", lost.reason());
/// });
/// # Ok::<(), dlock_client::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct LostSignal(pub(crate) Arc<LostState>);

impl LostSignal {
    /// True once the lock is known to be lost.
    ///
    /// ```no_run
    /// # let client = dlock_client::Client::open("redis://127.0.0.1/")?;
    /// let guard = client.mutex("k").lock()?;
    /// assert!(!guard.lost_signal().is_lost());
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn is_lost(&self) -> bool {
        self.0.is_lost()
    }

    /// Why the lock was lost, or `None` while it is not.
    ///
    /// ```no_run
    /// # let client = dlock_client::Client::open("redis://127.0.0.1/")?;
    /// let guard = client.mutex("k").lock()?;
    /// assert_eq!(guard.lost_signal().reason(), None);
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn reason(&self) -> Option<LostReason> {
        self.0.reason()
    }

    /// Blocks the calling thread until the lock is lost.
    ///
    /// ```no_run
    /// # let client = dlock_client::Client::open("redis://127.0.0.1/")?;
    /// # let guard = client.mutex("k").lock()?;
    /// guard.lost_signal().wait(); // returns only when the lock is lost
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn wait(&self) -> LostReason {
        loop {
            if let Some(r) = self.wait_timeout(Duration::from_secs(3600)) {
                return r;
            }
        }
    }

    /// Blocks until the lock is lost (returns the reason) or `timeout` passes (`None`).
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # let client = dlock_client::Client::open("redis://127.0.0.1/")?;
    /// # let guard = client.mutex("k").lock()?;
    /// if let Some(reason) = guard.lost_signal().wait_timeout(Duration::from_secs(1)) {
    ///     eprintln!("lost: {reason:?}");
    /// }
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn wait_timeout(&self, timeout: Duration) -> Option<LostReason> {
        let end = crate::later(Instant::now(), timeout);
        let s = &*self.0;
        loop {
            if let Some(r) = s.reason() {
                return Some(r);
            }
            let deadline = s.deadline();
            let clock = s.clock();
            if clock.reason.is_some() {
                continue;
            }
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                continue;
            }
            if now >= end {
                return None;
            }
            let until = deadline.map_or(end, |d| d.min(end));
            drop(
                s.cv.wait_timeout(clock, until.saturating_duration_since(now))
                    .unwrap_or_else(|e| e.into_inner()),
            );
        }
    }

    /// Completes when the lock is lost (async; needs a tokio runtime with timers).
    ///
    /// ```no_run
    /// # async fn f(guard: dlock_client::aio::AsyncGuard) {
    /// let lost = guard.lost_signal();
    /// tokio::select! {
    ///     reason = lost.lost() => eprintln!("lock lost: {reason:?}"),
    ///     _ = tokio::time::sleep(std::time::Duration::from_secs(60)) => {}
    /// }
    /// # }
    /// ```
    pub async fn lost(&self) -> LostReason {
        let s = &*self.0;
        loop {
            let notified = s.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(r) = s.reason() {
                return r;
            }
            match s.deadline() {
                Some(d) => {
                    tokio::select! {
                        _ = notified => {}
                        _ = tokio::time::sleep_until(d.into()) => {}
                    }
                }
                None => notified.await,
            }
        }
    }
}
