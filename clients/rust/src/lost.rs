//! The lost-lock signal.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Why a guard reports its lock as lost.
///
/// ```
/// use dlock_client::LostReason;
/// assert_ne!(LostReason::NotHeld, LostReason::Unreachable);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LostReason {
    /// A renewal answered 0 (the lease had ended or the lock was force-released), or
    /// a release answered `NOTHELD`.
    NotHeld,
    /// The server could not be reached (or did not answer) until the lease would end,
    /// less a margin for clock drift (1 % + 2 ms).
    Unreachable,
    /// The lock was taken with an explicit lease (no watchdog) and that lease has run
    /// out (less the drift margin).
    LeaseEnded,
    /// RedLock: renewals no longer reach a majority of the servers.
    NoQuorum,
}

/// Shared state behind a [`LostSignal`].
#[derive(Debug, Default)]
pub(crate) struct LostState {
    flag: AtomicBool,
    reason: Mutex<Option<LostReason>>,
    cv: Condvar,
    notify: tokio::sync::Notify,
    /// For explicit leases: the instant at which the lock counts as lost.
    deadline: Option<Instant>,
    /// Other states that become lost when this one does (MultiLock).
    listeners: Mutex<Vec<Arc<LostState>>>,
}

impl LostState {
    pub(crate) fn new(deadline: Option<Instant>) -> Arc<LostState> {
        Arc::new(LostState {
            deadline,
            ..Default::default()
        })
    }

    /// Marks the lock as lost (first reason wins); wakes every waiter.
    pub(crate) fn mark(&self, reason: LostReason) {
        {
            let mut r = self.reason.lock().unwrap_or_else(|e| e.into_inner());
            if r.is_none() {
                *r = Some(reason);
            }
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

    /// Makes `other` lost whenever `self` is (at once if it already is).
    pub(crate) fn forward_to(&self, other: Arc<LostState>) {
        let mut ls = self.listeners.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(reason) = self.reason() {
            drop(ls);
            other.mark(reason);
        } else {
            ls.push(other);
        }
    }

    fn check_deadline(&self) {
        if let Some(d) = self.deadline {
            if !self.flag.load(Ordering::SeqCst) && Instant::now() >= d {
                self.mark(LostReason::LeaseEnded);
            }
        }
    }

    pub(crate) fn is_lost(&self) -> bool {
        self.check_deadline();
        self.flag.load(Ordering::SeqCst)
    }

    pub(crate) fn reason(&self) -> Option<LostReason> {
        self.check_deadline();
        *self.reason.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A handle on a guard's lost-lock signal: a flag to check, and a signal to block on
/// ([`LostSignal::wait`], [`LostSignal::wait_timeout`]) or await ([`LostSignal::lost`]).
/// Cloneable, and usable after the guard is gone (it then never fires, unless it
/// already had).
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
        let mut guard = s.reason.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(r) = *guard {
                return Some(r);
            }
            let now = Instant::now();
            if let Some(d) = s.deadline {
                if now >= d {
                    drop(guard);
                    s.mark(LostReason::LeaseEnded);
                    return s.reason();
                }
            }
            if now >= end {
                return None;
            }
            let mut until = end;
            if let Some(d) = s.deadline {
                until = until.min(d);
            }
            guard =
                s.cv.wait_timeout(guard, until.saturating_duration_since(now))
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
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
            match s.deadline {
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
