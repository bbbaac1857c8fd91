//! The async RedLock: a lock over N independent servers, held when a majority granted
//! it. The algorithm and its arithmetic are shared with the blocking [`crate::RedLock`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::{Cmd, IntoConnectionInfo, RedisResult, Value};
use tokio::task::JoinSet;

use super::{task_owner, AsyncClient, AsyncInner};
use crate::core::redlock::{no_answer, RedAcquire, RedGrant, RedHold, RedSpec, RedStep};
use crate::error::Result;
use crate::lost::LostSignal;
use crate::watchdog::AsyncWatchdog;
use crate::{Options, Unlock};

/// The async counterpart of [`crate::RedLock`]: the Redlock algorithm over N
/// independent dlock servers, with the module's mutex on each.
///
/// One attempt sends `DLOCK.ACQUIRE key owner PX lease` to every node concurrently
/// (one tokio task per node), each with a per-node timeout
/// ([`AsyncRedLock::node_timeout`], 100 ms by default). The lock is held when a
/// majority (`N/2 + 1`) granted it and the validity `lease − elapsed − margin` (the
/// lease clock's margin: min(lease / 2, 1 % + 50 ms)) is still positive. Otherwise the
/// attempt releases on every node and, while the wait allows, tries again after a
/// random delay of up to [`AsyncRedLock::retry_delay`] (200 ms by default).
///
/// Without an explicit lease, the watchdog (a tokio task) renews on every node and
/// keeps the lock while a majority renews; the guard reports
/// [`crate::LostReason::NoQuorum`] when a majority says the lock is gone, or
/// [`crate::LostReason::Unreachable`] when no majority answered before the validity
/// ran out.
///
/// Owner ids are `<uuid>:task-<id>` (`<uuid>:<thread>` outside a task) with a uuid per
/// `AsyncRedLock` value; do not take the same AsyncRedLock twice in one task (a failed
/// retry releases on every node).
///
/// ```no_run
/// use std::time::Duration;
/// use dlock_client::aio::AsyncRedLock;
///
/// # #[tokio::main] async fn main() -> dlock_client::Result<()> {
/// let urls = ["redis://10.0.0.1/", "redis://10.0.0.2/", "redis://10.0.0.3/"];
/// let lock = AsyncRedLock::open(urls, "reports")?;
/// if let Some(guard) = lock.try_lock(Duration::from_secs(1), Some(Duration::from_secs(10))).await? {
///     println!("valid for {:?} more", guard.validity());
///     guard.unlock().await?;
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct AsyncRedLock {
    nodes: Vec<Arc<AsyncInner>>,
    spec: RedSpec,
}

impl AsyncRedLock {
    redlock_methods!(
        AsyncRedLock,
        AsyncClient,
        AsyncInner,
        "dlock_client::aio::AsyncRedLock",
        "dlock_client::aio::AsyncClient",
        task_owner
    );

    /// Waits until a majority grants the lock (watchdog lease, renewed on a majority).
    ///
    /// ```no_run
    /// # async fn f(lock: dlock_client::aio::AsyncRedLock) -> dlock_client::Result<()> {
    /// let guard = lock.lock().await?;
    /// # Ok(()) }
    /// ```
    pub async fn lock(&self) -> Result<AsyncRedLockGuard> {
        loop {
            if let Some(g) = self.try_lock(Duration::from_secs(3600), None).await? {
                return Ok(g);
            }
        }
    }

    /// Tries for at most `wait` (zero: one attempt). With `lease: None` the lock gets
    /// the watchdog lease and is renewed on a majority while the guard lives.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn f(lock: dlock_client::aio::AsyncRedLock) -> dlock_client::Result<()> {
    /// let lease = Some(Duration::from_secs(5));
    /// if let Some(g) = lock.try_lock(Duration::from_millis(500), lease).await? {
    ///     assert!(g.validity() <= Duration::from_secs(5));
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_lock(
        &self,
        wait: Duration,
        lease: Option<Duration>,
    ) -> Result<Option<AsyncRedLockGuard>> {
        let mut m = RedAcquire::new(&self.spec, self.owner(), wait, lease, Instant::now())?;
        let mut step = m.start(Instant::now());
        loop {
            step = match step {
                RedStep::Broadcast(c, timeout) => {
                    let replies = on_all(&self.nodes, &c, timeout).await;
                    m.on_replies(replies, Instant::now())
                }
                RedStep::Sleep(d) => {
                    tokio::time::sleep(d).await;
                    m.on_slept(Instant::now())
                }
                RedStep::Done(grant) => {
                    return Ok(grant.map(|g| AsyncRedLockGuard::new(self, g, lease)));
                }
            };
        }
    }
}

/// Sends `c` to every node concurrently (one tokio task each), each with `timeout`;
/// answers in node order (a node whose task did not finish counts as no answer).
async fn on_all(nodes: &[Arc<AsyncInner>], c: &Cmd, timeout: Duration) -> Vec<RedisResult<Value>> {
    let mut set = JoinSet::new();
    for (i, n) in nodes.iter().enumerate() {
        let (n, c) = (n.clone(), c.clone());
        set.spawn(async move { (i, n.run(&c, timeout).await) });
    }
    let mut out: Vec<RedisResult<Value>> = nodes.iter().map(|_| Err(no_answer())).collect();
    // A node's task that did not finish keeps "no answer".
    while let Some(joined) = set.join_next().await {
        if let Ok((i, v)) = joined {
            if let Some(slot) = out.get_mut(i) {
                *slot = v;
            }
        }
    }
    out
}

/// An [`AsyncRedLock`] held on a majority of its nodes. Dropping it stops the watchdog
/// and releases on every node in a background task (best effort); prefer
/// [`AsyncRedLockGuard::unlock`].
///
/// ```no_run
/// # async fn f(lock: dlock_client::aio::AsyncRedLock) -> dlock_client::Result<()> {
/// let guard = lock.lock().await?;
/// println!("held on {} nodes", guard.tokens().iter().flatten().count());
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct AsyncRedLockGuard {
    nodes: Vec<Arc<AsyncInner>>,
    hold: Arc<RedHold>,
    watchdog: Option<AsyncWatchdog>,
    done: bool,
}

impl AsyncRedLockGuard {
    fn new(lock: &AsyncRedLock, grant: RedGrant, lease: Option<Duration>) -> Self {
        let hold = Arc::new(RedHold::new(&lock.spec, grant, lease));
        let watchdog = hold.watch(lease, &lock.spec.opts).map(|(w, c)| {
            let (nodes, h) = (lock.nodes.clone(), hold.clone());
            AsyncWatchdog::spawn(w, move |timeout| {
                let (nodes, c, h) = (nodes.clone(), c.clone(), h.clone());
                async move { h.renewed(on_all(&nodes, &c, timeout).await) }
            })
        });
        AsyncRedLockGuard {
            nodes: lock.nodes.clone(),
            hold,
            watchdog,
            done: false,
        }
    }

    redlock_guard_methods!(
        "# async fn f(lock: dlock_client::aio::AsyncRedLock) -> dlock_client::Result<()> {",
        ".await",
        "# Ok(()) }"
    );

    /// Releases on every node (concurrently; each once more on a fresh connection after
    /// a connection failure): as [`crate::RedLockGuard::unlock`].
    ///
    /// ```no_run
    /// # async fn f(lock: dlock_client::aio::AsyncRedLock) -> dlock_client::Result<()> {
    /// let outcome = lock.lock().await?.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub async fn unlock(mut self) -> Result<Unlock> {
        self.done = true;
        if let Some(mut wd) = self.watchdog.take() {
            wd.stop();
        }
        let c = self.hold.release();
        Ok(self.hold.released(release_all(&self.nodes, &c).await))
    }
}

/// Releases `c` on every node concurrently (a tokio task each); the outcomes in node
/// order (a node whose task did not finish counts as unknown).
async fn release_all(nodes: &[Arc<AsyncInner>], c: &Cmd) -> Vec<Unlock> {
    let mut set = JoinSet::new();
    for (i, n) in nodes.iter().enumerate() {
        let (n, c) = (n.clone(), c.clone());
        set.spawn(async move { (i, n.release_outcome(&c).await) });
    }
    let mut out = vec![Unlock::Unknown; nodes.len()];
    while let Some(joined) = set.join_next().await {
        if let Ok((i, u)) = joined {
            if let Some(slot) = out.get_mut(i) {
                *slot = u;
            }
        }
    }
    out
}

impl Drop for AsyncRedLockGuard {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        if let Some(mut wd) = self.watchdog.take() {
            wd.stop();
        }
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let nodes = std::mem::take(&mut self.nodes);
            let c = self.hold.release();
            rt.spawn(async move {
                release_all(&nodes, &c).await;
            });
        }
    }
}
