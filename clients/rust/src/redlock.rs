//! RedLock: a lock over N independent servers, held when a majority granted it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::{Cmd, IntoConnectionInfo, RedisResult, Value};

use crate::blocking::{Client, Inner};
use crate::core::redlock::{no_answer, RedAcquire, RedGrant, RedHold, RedSpec, RedStep};
use crate::error::Result;
use crate::lost::LostSignal;
use crate::watchdog::Watchdog;
use crate::{Options, Unlock};

/// The Redlock algorithm over N independent dlock servers (no replication between
/// them), with the module's mutex on each.
///
/// One attempt sends `DLOCK.ACQUIRE key owner PX lease` to every node in parallel,
/// each with a per-node timeout ([`RedLock::node_timeout`], 100 ms by default). The
/// lock is held when a majority (`N/2 + 1`) granted it and the validity
/// `lease − elapsed − margin` (the lease clock's margin, min(lease / 2, 1 % + 50 ms))
/// is still positive. Otherwise the attempt releases on every node and, while the wait
/// allows, tries again after a random delay of up to [`RedLock::retry_delay`] (200 ms
/// by default).
///
/// Without an explicit lease, the watchdog renews on every node and keeps the lock
/// while a majority renews; the guard reports [`crate::LostReason::NoQuorum`] when a majority
/// says the lock is gone, or [`crate::LostReason::Unreachable`] when no majority answered
/// before the validity ran out.
///
/// Owner ids are `<uuid>:<thread>` with a uuid per `RedLock` value; do not take the
/// same RedLock twice on one thread (a failed retry releases on every node).
///
/// ```no_run
/// use std::time::Duration;
/// use dlock_client::RedLock;
///
/// let urls = ["redis://10.0.0.1/", "redis://10.0.0.2/", "redis://10.0.0.3/"];
/// let lock = RedLock::open(urls, "reports")?;
/// if let Some(guard) = lock.try_lock(Duration::from_secs(1), Some(Duration::from_secs(10)))? {
///     println!("valid for {:?} more", guard.validity());
/// }
/// # Ok::<(), dlock_client::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct RedLock {
    nodes: Vec<Arc<Inner>>,
    spec: RedSpec,
}

impl RedLock {
    redlock_methods!(
        RedLock,
        Client,
        Inner,
        "dlock_client::RedLock",
        "dlock_client::Client",
        crate::blocking::thread_owner
    );

    /// Waits until a majority grants the lock (watchdog lease, renewed on a majority).
    ///
    /// ```no_run
    /// # let lock = dlock_client::RedLock::open(["redis://127.0.0.1/"], "r")?;
    /// let guard = lock.lock()?;
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn lock(&self) -> Result<RedLockGuard> {
        loop {
            if let Some(g) = self.try_lock(Duration::from_secs(3600), None)? {
                return Ok(g);
            }
        }
    }

    /// Tries for at most `wait` (zero: one attempt). With `lease: None` the lock gets
    /// the watchdog lease and is renewed while the guard lives.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # let lock = dlock_client::RedLock::open(["redis://127.0.0.1/"], "r")?;
    /// if let Some(g) = lock.try_lock(Duration::from_millis(500), Some(Duration::from_secs(5)))? {
    ///     assert!(g.validity() <= Duration::from_secs(5));
    /// }
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn try_lock(
        &self,
        wait: Duration,
        lease: Option<Duration>,
    ) -> Result<Option<RedLockGuard>> {
        let mut m = RedAcquire::new(&self.spec, self.owner(), wait, lease, Instant::now())?;
        let mut step = m.start(Instant::now());
        loop {
            step = match step {
                RedStep::Broadcast(c, timeout) => {
                    let replies = on_all(&self.nodes, &c, timeout);
                    m.on_replies(replies, Instant::now())
                }
                RedStep::Sleep(d) => {
                    std::thread::sleep(d);
                    m.on_slept(Instant::now())
                }
                RedStep::Done(grant) => {
                    return Ok(grant.map(|g| RedLockGuard::new(self, g, lease)));
                }
            };
        }
    }
}

/// Sends `c` to every node in parallel (one thread each), each with `timeout`;
/// answers in node order.
fn on_all(nodes: &[Arc<Inner>], c: &Cmd, timeout: Duration) -> Vec<RedisResult<Value>> {
    if let [only] = nodes {
        return vec![only.run(c, timeout)];
    }
    std::thread::scope(|s| {
        let handles: Vec<_> = nodes
            .iter()
            .map(|n| s.spawn(move || n.run(c, timeout)))
            .collect();
        handles
            .into_iter()
            // A node's thread that did not finish normally counts as no answer.
            .map(|h| h.join().unwrap_or_else(|_| Err(no_answer())))
            .collect()
    })
}

/// A RedLock held on a majority of its nodes. Releases on every node when dropped.
///
/// ```no_run
/// # let lock = dlock_client::RedLock::open(["redis://127.0.0.1/"], "r")?;
/// let guard = lock.lock()?;
/// println!("held on {} nodes", guard.tokens().iter().flatten().count());
/// guard.unlock()?;
/// # Ok::<(), dlock_client::Error>(())
/// ```
#[derive(Debug)]
pub struct RedLockGuard {
    nodes: Vec<Arc<Inner>>,
    hold: Arc<RedHold>,
    watchdog: Option<Watchdog>,
    done: bool,
}

impl RedLockGuard {
    fn new(lock: &RedLock, grant: RedGrant, lease: Option<Duration>) -> Self {
        let hold = Arc::new(RedHold::new(&lock.spec, grant, lease));
        let watchdog = hold.watch(lease, &lock.spec.opts).map(|(w, c)| {
            let (nodes, h) = (lock.nodes.clone(), hold.clone());
            Watchdog::spawn(w, move |timeout| h.renewed(on_all(&nodes, &c, timeout)))
        });
        RedLockGuard {
            nodes: lock.nodes.clone(),
            hold,
            watchdog,
            done: false,
        }
    }

    redlock_guard_methods!(
        "# let lock = dlock_client::RedLock::open([\"redis://127.0.0.1/\"], \"r\")?;",
        "",
        "# Ok::<(), dlock_client::Error>(())"
    );

    /// Releases on every node (each once more on a fresh connection after a connection
    /// failure). [`Unlock::Released`] when a majority released, [`Unlock::StillHeld`]
    /// when a majority still holds (reentrant), [`Unlock::Unknown`] when too few nodes
    /// answered, else [`Unlock::Lost`]. The watchdog has stopped, whatever the answer;
    /// never an error.
    ///
    /// ```no_run
    /// # let lock = dlock_client::RedLock::open(["redis://127.0.0.1/"], "r")?;
    /// let outcome = lock.lock()?.unlock()?;
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn unlock(mut self) -> Result<Unlock> {
        Ok(self.release())
    }

    fn release(&mut self) -> Unlock {
        self.done = true;
        if let Some(mut wd) = self.watchdog.take() {
            wd.stop();
        }
        self.hold
            .released(release_all(&self.nodes, &self.hold.release()))
    }
}

/// Releases `c` on every node in parallel (one thread each); the outcomes in node order.
fn release_all(nodes: &[Arc<Inner>], c: &Cmd) -> Vec<Unlock> {
    if let [only] = nodes {
        return vec![only.release_outcome(c)];
    }
    std::thread::scope(|s| {
        let handles: Vec<_> = nodes
            .iter()
            .map(|n| s.spawn(move || n.release_outcome(c)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or(Unlock::Unknown))
            .collect()
    })
}

impl Drop for RedLockGuard {
    fn drop(&mut self) {
        if !self.done {
            self.release();
        }
    }
}
