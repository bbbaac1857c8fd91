//! The watchdog: renews a lease while a guard lives, reports the lock as lost when a
//! renewal answers 0 or the server stays unreachable until the lease would end.

use std::future::Future;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::lost::{LostReason, LostState};

/// The outcome of one renewal attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Renewal {
    /// Renewed (on a majority, for RedLock).
    Renewed,
    /// The server says the lock is not held (or a majority can no longer renew).
    Lost(LostReason),
    /// No answer (unreachable, timeout, error): try again until the lease would end.
    Failed,
}

/// What a watchdog keeps: a lease of `lease` renewed every `interval`, last
/// confirmed at `confirmed` (when the granting request was sent), and the lost state
/// it marks.
#[derive(Debug)]
pub(crate) struct Watch {
    pub lease: Duration,
    pub interval: Duration,
    pub confirmed: Instant,
    pub lost: Arc<LostState>,
}

/// When to renew and when to give up; shared by the blocking and the async watchdog.
#[derive(Debug)]
pub(crate) struct Schedule {
    lease: Duration,
    interval: Duration,
    /// Start of the last confirmed lease (the instant the granting or renewing request
    /// was sent: the server's lease started no earlier).
    confirmed: Instant,
    next: Instant,
}

impl Schedule {
    pub(crate) fn new(lease: Duration, interval: Duration, confirmed: Instant) -> Schedule {
        let interval = interval.max(Duration::from_millis(1));
        Schedule {
            lease,
            interval,
            confirmed,
            next: crate::later(confirmed, interval),
        }
    }

    /// When the lock must count as lost without a confirmed renewal.
    pub(crate) fn lost_at(&self) -> Instant {
        crate::core::lease_end(self.confirmed, self.lease)
    }

    /// When to wake up next: the next attempt, or the end of the lease.
    pub(crate) fn wake_at(&self) -> Instant {
        self.next.min(self.lost_at())
    }

    /// Timeout for an attempt started at `now` (never past the end of the lease).
    pub(crate) fn attempt_timeout(&self, now: Instant) -> Duration {
        self.lost_at()
            .saturating_duration_since(now)
            .min(self.interval.max(Duration::from_millis(200)))
            .max(Duration::from_millis(1))
    }

    pub(crate) fn renewed(&mut self, sent: Instant) {
        self.confirmed = sent;
        self.next = crate::later(sent, self.interval);
    }

    pub(crate) fn failed(&mut self, now: Instant) {
        let retry = crate::part(self.lease, 10)
            .max(Duration::from_millis(20))
            .min(self.interval);
        self.next = crate::later(now, retry);
    }
}

/// A blocking watchdog: one thread per guard, stopped (and joined) by [`Watchdog::stop`].
#[derive(Debug)]
pub(crate) struct Watchdog {
    stop: Arc<(Mutex<bool>, Condvar)>,
    handle: Option<JoinHandle<()>>,
}

impl Watchdog {
    /// Starts renewing with `renew(timeout)` every `interval`; marks `lost` when the
    /// lock is lost.
    pub(crate) fn spawn<F>(watch: Watch, mut renew: F) -> Watchdog
    where
        F: FnMut(Duration) -> Renewal + Send + 'static,
    {
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let stop2 = stop.clone();
        let lost_if_unstarted = watch.lost.clone();
        let spawned = std::thread::Builder::new()
            .name("dlock-watchdog".into())
            .spawn(move || {
                let mut plan = Schedule::new(watch.lease, watch.interval, watch.confirmed);
                let (flag, cv) = &*stop2;
                loop {
                    // Sleep until the next attempt or until stopped.
                    {
                        let mut stopped = flag.lock().unwrap_or_else(|e| e.into_inner());
                        loop {
                            if *stopped {
                                return;
                            }
                            let now = Instant::now();
                            let wake = plan.wake_at();
                            if now >= wake {
                                break;
                            }
                            stopped = cv
                                .wait_timeout(stopped, wake.saturating_duration_since(now))
                                .unwrap_or_else(|e| e.into_inner())
                                .0;
                        }
                    }
                    let now = Instant::now();
                    if now >= plan.lost_at() {
                        watch.lost.mark(LostReason::Unreachable);
                        return;
                    }
                    match renew(plan.attempt_timeout(now)) {
                        Renewal::Renewed => plan.renewed(now),
                        Renewal::Lost(reason) => {
                            if !*flag.lock().unwrap_or_else(|e| e.into_inner()) {
                                watch.lost.mark(reason);
                            }
                            return;
                        }
                        Renewal::Failed => plan.failed(Instant::now()),
                    }
                }
            });
        // The OS refused a thread: nothing will renew the lease, so say so
        // now rather than let the caller believe the lock is kept.
        let handle = match spawned {
            Ok(h) => Some(h),
            Err(_) => {
                lost_if_unstarted.mark(LostReason::Unreachable);
                None
            }
        };
        Watchdog { stop, handle }
    }

    /// Stops renewing and waits for the thread (at most one attempt's timeout).
    pub(crate) fn stop(&mut self) {
        {
            let (flag, cv) = &*self.stop;
            *flag.lock().unwrap_or_else(|e| e.into_inner()) = true;
            cv.notify_all();
        }
        if let Some(h) = self.handle.take() {
            if h.thread().id() != std::thread::current().id() {
                let _ = h.join();
            }
        }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.stop();
    }
}

/// An async watchdog: a tokio task, aborted by [`AsyncWatchdog::stop`] or on drop.
#[derive(Debug)]
pub(crate) struct AsyncWatchdog {
    handle: Option<tokio::task::JoinHandle<()>>,
}

impl AsyncWatchdog {
    /// Like [`Watchdog::spawn`], on the current tokio runtime.
    pub(crate) fn spawn<F, Fut>(watch: Watch, mut renew: F) -> AsyncWatchdog
    where
        F: FnMut(Duration) -> Fut + Send + 'static,
        Fut: Future<Output = Renewal> + Send + 'static,
    {
        let handle = tokio::spawn(async move {
            let mut plan = Schedule::new(watch.lease, watch.interval, watch.confirmed);
            loop {
                tokio::time::sleep_until(plan.wake_at().into()).await;
                let now = Instant::now();
                if now >= plan.lost_at() {
                    watch.lost.mark(LostReason::Unreachable);
                    return;
                }
                match renew(plan.attempt_timeout(now)).await {
                    Renewal::Renewed => plan.renewed(now),
                    Renewal::Lost(reason) => {
                        watch.lost.mark(reason);
                        return;
                    }
                    Renewal::Failed => plan.failed(Instant::now()),
                }
            }
        });
        AsyncWatchdog {
            handle: Some(handle),
        }
    }

    /// Stops renewing (aborts the task).
    pub(crate) fn stop(&mut self) {
        if let Some(h) = self.handle.take() {
            h.abort();
        }
    }
}

impl Drop for AsyncWatchdog {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_gives_up_before_the_lease_ends() {
        let t0 = Instant::now();
        let mut s = Schedule::new(Duration::from_secs(1), Duration::from_millis(300), t0);
        assert_eq!(s.wake_at(), t0 + Duration::from_millis(300));
        // 1 s - (10 ms + 2 ms)
        assert_eq!(s.lost_at(), t0 + Duration::from_millis(988));
        s.failed(t0 + Duration::from_millis(300));
        assert_eq!(s.wake_at(), t0 + Duration::from_millis(400));
        assert!(s.attempt_timeout(t0 + Duration::from_millis(900)) <= Duration::from_millis(88));
        s.renewed(t0 + Duration::from_millis(400));
        assert_eq!(s.lost_at(), t0 + Duration::from_millis(1388));
        assert_eq!(s.wake_at(), t0 + Duration::from_millis(700));
    }
}
