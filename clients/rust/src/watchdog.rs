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

/// What a watchdog keeps: a lease of `lease` renewed every `interval`, last confirmed
/// by a request sent at `confirmed`, and the lost state whose lease clock each
/// acknowledged renewal moves on (docs/clients.md, rule 1).
#[derive(Debug)]
pub(crate) struct Watch {
    pub lease: Duration,
    pub interval: Duration,
    pub confirmed: Instant,
    pub lost: Arc<LostState>,
}

/// When to renew; shared by the blocking and the async watchdog. When the hold counts
/// as lost is the lost state's clock, not the schedule's.
#[derive(Debug)]
pub(crate) struct Schedule {
    lease: Duration,
    interval: Duration,
    next: Instant,
}

impl Schedule {
    /// The renewals of a lease last confirmed by a request sent at `confirmed`.
    pub(crate) fn new(lease: Duration, interval: Duration, confirmed: Instant) -> Schedule {
        let interval = interval.max(Duration::from_millis(1));
        Schedule {
            lease,
            interval,
            next: crate::later(confirmed, interval),
        }
    }

    /// When to wake up next: the next attempt, or the end of the lease (`lost_at`).
    pub(crate) fn wake_at(&self, lost_at: Instant) -> Instant {
        self.next.min(lost_at)
    }

    /// Timeout for an attempt started at `now`: never past the end of the lease
    /// (`lost_at`), nor (much) past the next attempt.
    pub(crate) fn attempt_timeout(&self, now: Instant, lost_at: Instant) -> Duration {
        lost_at
            .saturating_duration_since(now)
            .min(self.interval.max(Duration::from_millis(200)))
            .max(Duration::from_millis(1))
    }

    /// A renewal sent at `sent` was acknowledged; the lease now lasts until `lease_end`.
    pub(crate) fn renewed(&mut self, sent: Instant) -> Instant {
        self.next = crate::later(sent, self.interval);
        crate::core::lease_end(sent, self.lease)
    }

    pub(crate) fn failed(&mut self, now: Instant) {
        let retry = crate::part(self.lease, 10)
            .max(Duration::from_millis(20))
            .min(self.interval);
        self.next = crate::later(now, retry);
    }
}

/// A blocking watchdog: one thread per guard, stopped (and joined) by
/// [`Watchdog::stop`], on drop, or by its [`Watchdog::halt`] when the client closes.
#[derive(Debug)]
pub(crate) struct Watchdog {
    stop: Arc<(Mutex<bool>, Condvar)>,
    handle: Arc<Mutex<Option<JoinHandle<()>>>>,
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
                let stopped = || *flag.lock().unwrap_or_else(|e| e.into_inner());
                loop {
                    // Sleep until the next attempt or until stopped.
                    let lost_at = {
                        let mut stopped = flag.lock().unwrap_or_else(|e| e.into_inner());
                        loop {
                            if *stopped {
                                return;
                            }
                            // Lost, or let go: nothing to renew.
                            let Some(lost_at) = watch.lost.valid_until() else {
                                return;
                            };
                            let now = Instant::now();
                            let wake = plan.wake_at(lost_at);
                            if now >= wake {
                                break lost_at;
                            }
                            stopped = cv
                                .wait_timeout(stopped, wake.saturating_duration_since(now))
                                .unwrap_or_else(|e| e.into_inner())
                                .0;
                        }
                    };
                    let now = Instant::now();
                    if now >= lost_at {
                        // The clock ran out: the lost state says so (`is_lost`).
                        watch.lost.is_lost();
                        return;
                    }
                    let r = renew(plan.attempt_timeout(now, lost_at));
                    if stopped() {
                        return;
                    }
                    match r {
                        Renewal::Renewed => {
                            let until = plan.renewed(now);
                            if !watch.lost.extend(until, Instant::now()) {
                                return;
                            }
                        }
                        Renewal::Lost(reason) => {
                            watch.lost.mark(reason);
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
        Watchdog {
            stop,
            handle: Arc::new(Mutex::new(handle)),
        }
    }

    /// A handle that stops (and joins) this watchdog from elsewhere.
    pub(crate) fn halt(&self) -> crate::core::notice::Halt {
        let (stop, handle) = (self.stop.clone(), self.handle.clone());
        Box::new(move || halt(&stop, &handle))
    }

    /// Stops renewing and waits for the thread (at most one attempt's timeout).
    pub(crate) fn stop(&mut self) {
        halt(&self.stop, &self.handle);
    }
}

/// Stops a blocking watchdog and joins its thread (unless called on it).
fn halt(stop: &(Mutex<bool>, Condvar), handle: &Mutex<Option<JoinHandle<()>>>) {
    {
        let (flag, cv) = stop;
        *flag.lock().unwrap_or_else(|e| e.into_inner()) = true;
        cv.notify_all();
    }
    let h = handle.lock().unwrap_or_else(|e| e.into_inner()).take();
    if let Some(h) = h {
        if h.thread().id() != std::thread::current().id() {
            let _ = h.join();
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
                // Lost, or let go: nothing to renew.
                let Some(lost_at) = watch.lost.valid_until() else {
                    return;
                };
                tokio::time::sleep_until(plan.wake_at(lost_at).into()).await;
                let now = Instant::now();
                let Some(lost_at) = watch.lost.valid_until() else {
                    return;
                };
                if now >= lost_at {
                    watch.lost.is_lost();
                    return;
                }
                match renew(plan.attempt_timeout(now, lost_at)).await {
                    Renewal::Renewed => {
                        let until = plan.renewed(now);
                        if !watch.lost.extend(until, Instant::now()) {
                            return;
                        }
                    }
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

    /// A handle that stops this watchdog from elsewhere.
    pub(crate) fn halt(&self) -> Option<crate::core::notice::Halt> {
        let abort = self.handle.as_ref()?.abort_handle();
        Some(Box::new(move || abort.abort()))
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
    fn schedule_renews_on_time_and_never_past_the_lease() {
        let t0 = Instant::now();
        let lease = Duration::from_secs(1);
        let mut s = Schedule::new(lease, Duration::from_millis(300), t0);
        // 1 s − min(500 ms, 10 ms + 50 ms)
        let lost_at = crate::core::lease_end(t0, lease);
        assert_eq!(lost_at, t0 + Duration::from_millis(940));
        assert_eq!(s.wake_at(lost_at), t0 + Duration::from_millis(300));
        s.failed(t0 + Duration::from_millis(300));
        assert_eq!(s.wake_at(lost_at), t0 + Duration::from_millis(400));
        let late = t0 + Duration::from_millis(900);
        assert_eq!(s.attempt_timeout(late, lost_at), Duration::from_millis(40));
        let until = s.renewed(t0 + Duration::from_millis(400));
        assert_eq!(until, t0 + Duration::from_millis(1340));
        assert_eq!(s.wake_at(until), t0 + Duration::from_millis(700));
    }

    #[test]
    fn a_renewal_acknowledged_after_the_clock_ran_out_does_not_revive_the_hold() {
        let t0 = Instant::now();
        let lost = LostState::new(
            Some(t0 + Duration::from_millis(100)),
            LostReason::Unreachable,
        );
        assert!(lost.extend(
            t0 + Duration::from_millis(200),
            t0 + Duration::from_millis(50)
        ));
        assert_eq!(lost.valid_until(), Some(t0 + Duration::from_millis(200)));
        let late = t0 + Duration::from_millis(250);
        assert!(!lost.extend(t0 + Duration::from_secs(5), late));
        assert_eq!(lost.reason(), Some(LostReason::Unreachable));
        lost.disarm();
        assert_eq!(
            lost.reason(),
            Some(LostReason::Unreachable),
            "it stays fired"
        );
    }
}
