//! The async RedLock: a lock over N independent servers, held when a majority granted
//! it. The algorithm and its arithmetic are shared with the blocking [`crate::RedLock`].

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::IntoConnectionInfo;
use tokio::task::JoinSet;

use super::{task_owner, AsyncClient, AsyncInner};
use crate::error::{Error, Result};
use crate::lost::{LostSignal, LostState};
use crate::redlock::{
    granted_until, lease_start, quorum_of, release_outcome, renewal_outcome, retry_pause,
    valid_from,
};
use crate::watchdog::{AsyncWatchdog, Renewal};
use crate::{cmd, LockKind, Options, Unlock};

/// The async counterpart of [`crate::RedLock`]: the Redlock algorithm over N
/// independent dlock servers, with the module's mutex on each.
///
/// One attempt sends `DLOCK.ACQUIRE key owner PX lease` to every node concurrently
/// (one tokio task per node), each with a per-node timeout
/// ([`AsyncRedLock::node_timeout`], 100 ms by default). The lock is held when a
/// majority (`N/2 + 1`) granted it and the validity `lease − elapsed − drift`
/// (drift = 1 % of the lease + 2 ms) is still positive. Otherwise the attempt releases
/// on every node and, while the wait allows, tries again after a random delay of up to
/// [`AsyncRedLock::retry_delay`] (200 ms by default).
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
    key: String,
    prefix: String,
    owner: Option<String>,
    node_timeout: Duration,
    retry_delay: Duration,
    opts: Options,
}

impl AsyncRedLock {
    /// An async RedLock named `name` over the given clients (one per independent
    /// server). The [`Options`] of the first client apply.
    ///
    /// ```no_run
    /// use dlock_client::aio::{AsyncClient, AsyncRedLock};
    /// let clients: Vec<AsyncClient> = (6379..6382)
    ///     .map(|p| AsyncClient::open(format!("redis://127.0.0.1:{p}/")))
    ///     .collect::<Result<_, _>>()?;
    /// let lock = AsyncRedLock::new(clients, "reports")?;
    /// assert_eq!(lock.quorum(), 2);
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn new(
        clients: impl IntoIterator<Item = AsyncClient>,
        name: impl Into<String>,
    ) -> Result<AsyncRedLock> {
        let nodes: Vec<Arc<AsyncInner>> = clients.into_iter().map(|c| c.inner).collect();
        let Some(first) = nodes.first() else {
            return Err(Error::Invalid("a RedLock needs at least one server".into()));
        };
        let opts = first.opts.clone();
        Ok(AsyncRedLock {
            key: name.into(),
            prefix: opts.new_prefix(),
            owner: None,
            node_timeout: Duration::from_millis(100),
            retry_delay: Duration::from_millis(200),
            opts,
            nodes,
        })
    }

    /// An async RedLock over the servers at `urls`, with default [`Options`].
    ///
    /// ```no_run
    /// let lock = dlock_client::aio::AsyncRedLock::open(
    ///     ["redis://127.0.0.1:7001/", "redis://127.0.0.1:7002/", "redis://127.0.0.1:7003/"],
    ///     "reports",
    /// )?;
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn open<U: IntoConnectionInfo>(
        urls: impl IntoIterator<Item = U>,
        name: impl Into<String>,
    ) -> Result<AsyncRedLock> {
        Self::open_with_options(urls, name, Options::default())
    }

    /// Like [`AsyncRedLock::open`], with [`Options`] (watchdog lease and interval,
    /// owner prefix, command timeout of releases).
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// use dlock_client::{aio::AsyncRedLock, Options};
    /// let opts = Options::default().watchdog_lease(Duration::from_secs(3))
    ///     .renew_interval(Duration::from_secs(1));
    /// let lock = AsyncRedLock::open_with_options(["redis://127.0.0.1:7001/"], "r", opts)?;
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn open_with_options<U: IntoConnectionInfo>(
        urls: impl IntoIterator<Item = U>,
        name: impl Into<String>,
        opts: Options,
    ) -> Result<AsyncRedLock> {
        let clients = urls
            .into_iter()
            .map(|u| AsyncClient::with_options(u, opts.clone()))
            .collect::<Result<Vec<_>>>()?;
        Self::new(clients, name)
    }

    /// Sets the per-node timeout of one attempt (connect + answer). Default 100 ms;
    /// keep it small compared to the lease.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # let lock = dlock_client::aio::AsyncRedLock::open(["redis://127.0.0.1/"], "r")?;
    /// let lock = lock.node_timeout(Duration::from_millis(50));
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn node_timeout(mut self, timeout: Duration) -> AsyncRedLock {
        self.node_timeout = timeout.max(Duration::from_millis(1));
        self
    }

    /// Sets the largest random delay between two attempts. Default 200 ms.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # let lock = dlock_client::aio::AsyncRedLock::open(["redis://127.0.0.1/"], "r")?;
    /// let lock = lock.retry_delay(Duration::from_millis(50));
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn retry_delay(mut self, delay: Duration) -> AsyncRedLock {
        self.retry_delay = delay;
        self
    }

    /// Uses a fixed owner id instead of `<uuid>:task-<id>`.
    ///
    /// ```no_run
    /// # let lock = dlock_client::aio::AsyncRedLock::open(["redis://127.0.0.1/"], "r")?;
    /// let lock = lock.with_owner("node-a");
    /// assert_eq!(lock.owner(), "node-a");
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn with_owner(mut self, owner: impl Into<String>) -> AsyncRedLock {
        self.owner = Some(owner.into());
        self
    }

    /// The owner id used from the calling task (or thread, outside a task).
    ///
    /// ```no_run
    /// # let lock = dlock_client::aio::AsyncRedLock::open(["redis://127.0.0.1/"], "r")?;
    /// assert!(lock.owner().contains(':'));
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn owner(&self) -> String {
        self.owner
            .clone()
            .unwrap_or_else(|| task_owner(&self.prefix))
    }

    /// How many nodes must grant: `N/2 + 1`.
    ///
    /// ```no_run
    /// # let lock = dlock_client::aio::AsyncRedLock::open(["redis://127.0.0.1:1/"; 5], "r")?;
    /// assert_eq!(lock.quorum(), 3);
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn quorum(&self) -> usize {
        quorum_of(self.nodes.len())
    }

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
        let lease_d = lease.unwrap_or(self.opts.watchdog_lease);
        let lease_ms = crate::ceil_ms(lease_d).max(1);
        let owner = self.owner();
        let deadline = Instant::now() + wait;
        let timeout = self.node_timeout;
        loop {
            let start = Instant::now();
            let c = cmd::acquire(LockKind::Mutex, &self.key, &owner, lease_ms, 0);
            let tokens: Vec<Option<u64>> = on_all(&self.nodes, |n| {
                let c = c.clone();
                async move {
                    n.run(&c, timeout)
                        .await
                        .ok()
                        .and_then(|v| cmd::token(v).ok().flatten())
                }
            })
            .await;
            if let Some(valid_until) = granted_until(&tokens, self.quorum(), start, lease_d) {
                return Ok(Some(AsyncRedLockGuard::new(
                    self,
                    owner,
                    tokens,
                    valid_until,
                    lease,
                )));
            }
            // Failed attempt: release on every node (also where the answer was lost).
            let r = cmd::release(LockKind::Mutex, &self.key, &owner);
            on_all(&self.nodes, |n| {
                let r = r.clone();
                async move {
                    let _ = n.run(&r, timeout).await;
                }
            })
            .await;
            let now = Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            tokio::time::sleep(retry_pause(self.retry_delay).min(deadline - now)).await;
        }
    }
}

/// What a node whose task was cancelled (its runtime shutting down) counts
/// as: no answer.
trait NoAnswer {
    fn no_answer() -> Self;
}

impl<X> NoAnswer for Option<X> {
    fn no_answer() -> Self {
        None
    }
}

impl NoAnswer for () {
    fn no_answer() {}
}

impl NoAnswer for Result<Unlock> {
    fn no_answer() -> Self {
        Err(Error::Unexpected(
            "the RedLock node task was cancelled".into(),
        ))
    }
}

/// Runs `f` on every node concurrently (one tokio task each); results in node order.
async fn on_all<T, F, Fut>(nodes: &[Arc<AsyncInner>], f: F) -> Vec<T>
where
    F: Fn(Arc<AsyncInner>) -> Fut,
    Fut: Future<Output = T> + Send + 'static,
    T: Send + NoAnswer + 'static,
{
    let mut set = JoinSet::new();
    for (i, n) in nodes.iter().enumerate() {
        let fut = f(n.clone());
        set.spawn(async move { (i, fut.await) });
    }
    let mut out: Vec<T> = (0..nodes.len()).map(|_| T::no_answer()).collect();
    while let Some(joined) = set.join_next().await {
        match joined {
            Ok((i, v)) => {
                if let Some(slot) = out.get_mut(i) {
                    *slot = v;
                }
            }
            // A node's future panicked: pass that panic on unchanged (this
            // function adds none of its own).
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(_) => {}
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
    key: String,
    owner: String,
    tokens: Vec<Option<u64>>,
    valid_until: Arc<Mutex<Instant>>,
    lost: Arc<LostState>,
    watchdog: Option<AsyncWatchdog>,
    quorum: usize,
    timeout: Duration,
    done: bool,
}

impl AsyncRedLockGuard {
    fn new(
        lock: &AsyncRedLock,
        owner: String,
        tokens: Vec<Option<u64>>,
        valid_until: Instant,
        lease: Option<Duration>,
    ) -> AsyncRedLockGuard {
        let valid = Arc::new(Mutex::new(valid_until));
        let quorum = lock.quorum();
        let (lost, watchdog) = match lease {
            Some(_) => (LostState::new(Some(valid_until)), None),
            None => {
                let lost = LostState::new(None);
                let lease = lock.opts.watchdog_lease;
                let c = cmd::renew(&lock.key, &owner, crate::ceil_ms(lease).max(1));
                let nodes = lock.nodes.clone();
                let valid2 = valid.clone();
                let wd = AsyncWatchdog::spawn(
                    lease,
                    lock.opts.renew_interval,
                    lease_start(valid_until, lease),
                    lost.clone(),
                    move |timeout| {
                        let (nodes, c, valid2) = (nodes.clone(), c.clone(), valid2.clone());
                        async move {
                            let sent = Instant::now();
                            let answers: Vec<Option<bool>> = on_all(&nodes, |n| {
                                let c = c.clone();
                                async move {
                                    n.run(&c, timeout).await.ok().and_then(|v| cmd::renewed(&v))
                                }
                            })
                            .await;
                            let outcome = renewal_outcome(&answers, quorum);
                            if outcome == Renewal::Renewed {
                                *valid2.lock().unwrap_or_else(|e| e.into_inner()) =
                                    valid_from(sent, lease);
                            }
                            outcome
                        }
                    },
                );
                (lost, Some(wd))
            }
        };
        AsyncRedLockGuard {
            nodes: lock.nodes.clone(),
            key: lock.key.clone(),
            owner,
            tokens,
            valid_until: valid,
            lost,
            watchdog,
            quorum,
            timeout: lock.opts.command_timeout,
            done: false,
        }
    }

    /// How much longer the lock is certainly held: the validity of the last grant or
    /// majority renewal (lease − elapsed − drift), minus the time since. Zero when
    /// it ran out or the lock is lost.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn f(lock: dlock_client::aio::AsyncRedLock) -> dlock_client::Result<()> {
    /// let lease = Some(Duration::from_secs(10));
    /// let g = lock.try_lock(Duration::ZERO, lease).await?.unwrap();
    /// assert!(g.validity() > Duration::from_secs(9));
    /// # Ok(()) }
    /// ```
    pub fn validity(&self) -> Duration {
        if self.lost.is_lost() {
            return Duration::ZERO;
        }
        let until = *self.valid_until.lock().unwrap_or_else(|e| e.into_inner());
        until.saturating_duration_since(Instant::now())
    }

    /// The fencing token from each node, in the order the nodes were given (`None`
    /// where the node did not grant). Tokens of different nodes are unrelated.
    ///
    /// ```no_run
    /// # async fn f(lock: dlock_client::aio::AsyncRedLock) -> dlock_client::Result<()> {
    /// let g = lock.lock().await?;
    /// assert!(g.tokens().iter().flatten().count() >= lock.quorum());
    /// # Ok(()) }
    /// ```
    pub fn tokens(&self) -> &[Option<u64>] {
        &self.tokens
    }

    /// The owner id the lock is held with.
    ///
    /// ```no_run
    /// # async fn f(lock: dlock_client::aio::AsyncRedLock) -> dlock_client::Result<()> {
    /// let g = lock.lock().await?;
    /// println!("{}", g.owner());
    /// # Ok(()) }
    /// ```
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// True once the lock is known to be lost.
    ///
    /// ```no_run
    /// # async fn f(lock: dlock_client::aio::AsyncRedLock) -> dlock_client::Result<()> {
    /// assert!(!lock.lock().await?.is_lost());
    /// # Ok(()) }
    /// ```
    pub fn is_lost(&self) -> bool {
        self.lost.is_lost()
    }

    /// A signal to await ([`LostSignal::lost`]) or block on until the lock is lost.
    ///
    /// ```no_run
    /// # async fn f(lock: dlock_client::aio::AsyncRedLock) -> dlock_client::Result<()> {
    /// let g = lock.lock().await?;
    /// let reason = g.lost_signal().lost().await; // completes only when lost
    /// # Ok(()) }
    /// ```
    pub fn lost_signal(&self) -> LostSignal {
        LostSignal(self.lost.clone())
    }

    /// Releases on every node (concurrently). [`Unlock::Released`] when a majority
    /// released, [`Unlock::StillHeld`] when a majority still holds (reentrant),
    /// [`Unlock::Lost`] when a majority answered that the owner held nothing; an error
    /// when too few nodes answered.
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
        let c = cmd::release(LockKind::Mutex, &self.key, &self.owner);
        let timeout = self.timeout;
        let outcomes: Vec<Result<Unlock>> = on_all(&self.nodes, |n| {
            let c = c.clone();
            async move { cmd::unlock(n.run(&c, timeout).await) }
        })
        .await;
        release_outcome(outcomes, self.quorum, &self.lost)
    }
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
            let c = cmd::release(LockKind::Mutex, &self.key, &self.owner);
            let timeout = self.timeout;
            rt.spawn(async move {
                on_all(&nodes, |n| {
                    let c = c.clone();
                    async move {
                        let _ = n.run(&c, timeout).await;
                    }
                })
                .await;
            });
        }
    }
}
