//! RedLock: a lock over N independent servers, held when a majority granted it.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::Rng;
use redis::IntoConnectionInfo;

use crate::blocking::{Client, Inner};
use crate::error::{Error, Result};
use crate::lost::{LostReason, LostSignal, LostState};
use crate::watchdog::{Renewal, Watchdog};
use crate::{cmd, LockKind, Options, Unlock};

/// The Redlock algorithm over N independent dlock servers (no replication between
/// them), with the module's mutex on each.
///
/// One attempt sends `DLOCK.ACQUIRE key owner PX lease` to every node in parallel,
/// each with a per-node timeout ([`RedLock::node_timeout`], 100 ms by default). The
/// lock is held when a majority (`N/2 + 1`) granted it and the validity
/// `lease − elapsed − drift` (drift = 1 % of the lease + 2 ms) is still positive.
/// Otherwise the attempt releases on every node and, while the wait allows, tries
/// again after a random delay of up to [`RedLock::retry_delay`] (200 ms by default).
///
/// Without an explicit lease, the watchdog renews on every node and keeps the lock
/// while a majority renews; the guard reports [`LostReason::NoQuorum`] when a majority
/// says the lock is gone, or [`LostReason::Unreachable`] when no majority answered
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
    key: String,
    prefix: String,
    owner: Option<String>,
    node_timeout: Duration,
    retry_delay: Duration,
    opts: Options,
}

impl RedLock {
    /// A RedLock named `name` over the given clients (one per independent server).
    ///
    /// ```
    /// use dlock_client::{Client, RedLock};
    /// let clients: Vec<Client> = (6379..6382)
    ///     .map(|p| Client::open(format!("redis://127.0.0.1:{p}/")))
    ///     .collect::<Result<_, _>>()?;
    /// let lock = RedLock::new(clients, "reports")?;
    /// assert_eq!(lock.quorum(), 2);
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn new(
        clients: impl IntoIterator<Item = Client>,
        name: impl Into<String>,
    ) -> Result<RedLock> {
        let nodes: Vec<Arc<Inner>> = clients.into_iter().map(|c| c.inner).collect();
        let Some(first) = nodes.first() else {
            return Err(Error::Invalid("a RedLock needs at least one server".into()));
        };
        let opts = first.opts.clone();
        Ok(RedLock {
            key: name.into(),
            prefix: opts.new_prefix(),
            owner: None,
            node_timeout: Duration::from_millis(100),
            retry_delay: Duration::from_millis(200),
            opts,
            nodes,
        })
    }

    /// A RedLock over the servers at `urls`, with default [`Options`].
    ///
    /// ```
    /// let lock = dlock_client::RedLock::open(
    ///     ["redis://127.0.0.1:7001/", "redis://127.0.0.1:7002/", "redis://127.0.0.1:7003/"],
    ///     "reports",
    /// )?;
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn open<U: IntoConnectionInfo>(
        urls: impl IntoIterator<Item = U>,
        name: impl Into<String>,
    ) -> Result<RedLock> {
        Self::open_with_options(urls, name, Options::default())
    }

    /// Like [`RedLock::open`], with [`Options`] (watchdog lease and interval, owner
    /// prefix).
    ///
    /// ```
    /// # use std::time::Duration;
    /// use dlock_client::{Options, RedLock};
    /// let opts = Options::default().watchdog_lease(Duration::from_secs(3))
    ///     .renew_interval(Duration::from_secs(1));
    /// let lock = RedLock::open_with_options(["redis://127.0.0.1:7001/"], "r", opts)?;
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn open_with_options<U: IntoConnectionInfo>(
        urls: impl IntoIterator<Item = U>,
        name: impl Into<String>,
        opts: Options,
    ) -> Result<RedLock> {
        let clients = urls
            .into_iter()
            .map(|u| Client::with_options(u, opts.clone()))
            .collect::<Result<Vec<_>>>()?;
        Self::new(clients, name)
    }

    /// Sets the per-node timeout of one attempt (connect + answer). Default 100 ms;
    /// keep it small compared to the lease.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # let lock = dlock_client::RedLock::open(["redis://127.0.0.1/"], "r")?;
    /// let lock = lock.node_timeout(Duration::from_millis(50));
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn node_timeout(mut self, timeout: Duration) -> RedLock {
        self.node_timeout = timeout.max(Duration::from_millis(1));
        self
    }

    /// Sets the largest random delay between two attempts. Default 200 ms.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # let lock = dlock_client::RedLock::open(["redis://127.0.0.1/"], "r")?;
    /// let lock = lock.retry_delay(Duration::from_millis(50));
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn retry_delay(mut self, delay: Duration) -> RedLock {
        self.retry_delay = delay;
        self
    }

    /// Uses a fixed owner id instead of `<uuid>:<thread>`.
    ///
    /// ```
    /// # let lock = dlock_client::RedLock::open(["redis://127.0.0.1/"], "r")?;
    /// let lock = lock.with_owner("node-a");
    /// assert_eq!(lock.owner(), "node-a");
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn with_owner(mut self, owner: impl Into<String>) -> RedLock {
        self.owner = Some(owner.into());
        self
    }

    /// The owner id used from the calling thread.
    ///
    /// ```
    /// # let lock = dlock_client::RedLock::open(["redis://127.0.0.1/"], "r")?;
    /// assert!(lock.owner().contains(':'));
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn owner(&self) -> String {
        self.owner
            .clone()
            .unwrap_or_else(|| format!("{}:{}", self.prefix, crate::thread_tag()))
    }

    /// How many nodes must grant: `N/2 + 1`.
    ///
    /// ```
    /// # let lock = dlock_client::RedLock::open(["redis://127.0.0.1:1/"; 5], "r")?;
    /// assert_eq!(lock.quorum(), 3);
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn quorum(&self) -> usize {
        quorum_of(self.nodes.len())
    }

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
        let lease_d = lease.unwrap_or(self.opts.watchdog_lease);
        let lease_ms = crate::ceil_ms(lease_d).max(1);
        let owner = self.owner();
        let deadline = Instant::now() + wait;
        loop {
            let start = Instant::now();
            let c = cmd::acquire(LockKind::Mutex, &self.key, &owner, lease_ms, 0);
            let tokens: Vec<Option<u64>> = on_all(&self.nodes, |n| {
                n.run(&c, self.node_timeout)
                    .ok()
                    .and_then(|v| cmd::token(v).ok().flatten())
            });
            if let Some(valid_until) = granted_until(&tokens, self.quorum(), start, lease_d) {
                return Ok(Some(RedLockGuard::new(
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
                let _ = n.run(&r, self.node_timeout);
            });
            let now = Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            std::thread::sleep(retry_pause(self.retry_delay).min(deadline - now));
        }
    }
}

/// How many of `n` nodes must grant: `n/2 + 1`.
pub(crate) fn quorum_of(n: usize) -> usize {
    n / 2 + 1
}

/// The end of the validity of a lease of `lease` whose request was sent at `sent`:
/// `sent + lease − drift` (drift = 1 % + 2 ms).
pub(crate) fn valid_from(sent: Instant, lease: Duration) -> Instant {
    sent + lease - crate::drift(lease)
}

/// The inverse of [`valid_from`]: when the lease ending at `valid_until` was requested.
pub(crate) fn lease_start(valid_until: Instant, lease: Duration) -> Instant {
    valid_until + crate::drift(lease) - lease
}

/// The outcome of an acquire attempt started at `start`, evaluated now: the end of
/// its validity when at least `quorum` nodes granted and the validity
/// `lease − elapsed − drift` is still positive, else `None`.
pub(crate) fn granted_until(
    tokens: &[Option<u64>],
    quorum: usize,
    start: Instant,
    lease: Duration,
) -> Option<Instant> {
    let granted = tokens.iter().filter(|t| t.is_some()).count();
    let elapsed = start.elapsed();
    (granted >= quorum && elapsed + crate::drift(lease) < lease).then(|| valid_from(start, lease))
}

/// A random pause of at most `max` between two attempts.
pub(crate) fn retry_pause(max: Duration) -> Duration {
    let max = max.as_millis() as u64;
    Duration::from_millis(if max == 0 {
        0
    } else {
        rand::thread_rng().gen_range(0..=max)
    })
}

/// The watchdog's verdict on the nodes' renew answers (`Some(true)` renewed,
/// `Some(false)` not held, `None` no answer): renewed on a majority, lost when so
/// many say "not held" that no majority can renew any more, else failed (retry).
pub(crate) fn renewal_outcome(answers: &[Option<bool>], quorum: usize) -> Renewal {
    let yes = answers.iter().filter(|a| **a == Some(true)).count();
    let no = answers.iter().filter(|a| **a == Some(false)).count();
    if yes >= quorum {
        Renewal::Renewed
    } else if no > answers.len() - quorum {
        Renewal::Lost(LostReason::NoQuorum)
    } else {
        Renewal::Failed
    }
}

/// The answer of a RedLock release from each node's outcome: released or still held
/// on a majority; an error when fewer than a majority answered; else lost (and `lost`
/// is marked).
pub(crate) fn release_outcome(
    outcomes: Vec<Result<Unlock>>,
    quorum: usize,
    lost: &LostState,
) -> Result<Unlock> {
    let count = |u: Unlock| {
        outcomes
            .iter()
            .filter(|o| matches!(o, Ok(x) if *x == u))
            .count()
    };
    if count(Unlock::Released) >= quorum {
        return Ok(Unlock::Released);
    }
    if count(Unlock::StillHeld) >= quorum {
        return Ok(Unlock::StillHeld);
    }
    let answered = outcomes.iter().filter(|o| o.is_ok()).count();
    if answered < quorum {
        if let Some(Err(e)) = outcomes.into_iter().find(|o| o.is_err()) {
            return Err(e);
        }
    }
    lost.mark(LostReason::NoQuorum);
    Ok(Unlock::Lost)
}

/// Runs `f` on every node in parallel; results in node order.
fn on_all<T: Send>(nodes: &[Arc<Inner>], f: impl Fn(&Inner) -> T + Sync) -> Vec<T> {
    if nodes.len() == 1 {
        return vec![f(&nodes[0])];
    }
    std::thread::scope(|s| {
        let f = &f;
        let handles: Vec<_> = nodes.iter().map(|n| s.spawn(move || f(n))).collect();
        handles
            .into_iter()
            // A node's closure panicked: pass that panic on unchanged
            // (this function adds none of its own).
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
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
    key: String,
    owner: String,
    tokens: Vec<Option<u64>>,
    valid_until: Arc<Mutex<Instant>>,
    lost: Arc<LostState>,
    watchdog: Option<Watchdog>,
    quorum: usize,
    timeout: Duration,
    done: bool,
}

impl RedLockGuard {
    fn new(
        lock: &RedLock,
        owner: String,
        tokens: Vec<Option<u64>>,
        valid_until: Instant,
        lease: Option<Duration>,
    ) -> RedLockGuard {
        let valid = Arc::new(Mutex::new(valid_until));
        let quorum = lock.quorum();
        let (lost, watchdog) = match lease {
            Some(_) => (LostState::new(Some(valid_until)), None),
            None => {
                let lost = LostState::new(None);
                let lease = lock.opts.watchdog_lease;
                let lease_ms = crate::ceil_ms(lease).max(1);
                let c = cmd::renew(&lock.key, &owner, lease_ms);
                let nodes = lock.nodes.clone();
                let valid2 = valid.clone();
                let started = lease_start(valid_until, lease);
                let wd = Watchdog::spawn(
                    lease,
                    lock.opts.renew_interval,
                    started,
                    lost.clone(),
                    move |timeout| {
                        let sent = Instant::now();
                        let answers: Vec<Option<bool>> = on_all(&nodes, |node| {
                            node.run(&c, timeout).ok().and_then(|v| cmd::renewed(&v))
                        });
                        let outcome = renewal_outcome(&answers, quorum);
                        if outcome == Renewal::Renewed {
                            *valid2.lock().unwrap_or_else(|e| e.into_inner()) =
                                valid_from(sent, lease);
                        }
                        outcome
                    },
                );
                (lost, Some(wd))
            }
        };
        RedLockGuard {
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
    /// it ran out.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # let lock = dlock_client::RedLock::open(["redis://127.0.0.1/"], "r")?;
    /// let g = lock.try_lock(Duration::ZERO, Some(Duration::from_secs(10)))?.unwrap();
    /// assert!(g.validity() > Duration::from_secs(9));
    /// # Ok::<(), dlock_client::Error>(())
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
    /// # let lock = dlock_client::RedLock::open(["redis://127.0.0.1/"], "r")?;
    /// let g = lock.lock()?;
    /// assert!(g.tokens().iter().flatten().count() >= lock.quorum());
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn tokens(&self) -> &[Option<u64>] {
        &self.tokens
    }

    /// True once the lock is known to be lost.
    ///
    /// ```no_run
    /// # let lock = dlock_client::RedLock::open(["redis://127.0.0.1/"], "r")?;
    /// assert!(!lock.lock()?.is_lost());
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn is_lost(&self) -> bool {
        self.lost.is_lost()
    }

    /// A signal to block on or await until the lock is lost.
    ///
    /// ```no_run
    /// # let lock = dlock_client::RedLock::open(["redis://127.0.0.1/"], "r")?;
    /// let g = lock.lock()?;
    /// let lost = g.lost_signal();
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn lost_signal(&self) -> LostSignal {
        LostSignal(self.lost.clone())
    }

    /// Releases on every node. [`Unlock::Released`] when a majority released,
    /// [`Unlock::StillHeld`] when a majority still holds (reentrant),
    /// [`Unlock::Lost`] when a majority answered that the owner held nothing; an error
    /// when too few nodes answered.
    ///
    /// ```no_run
    /// # let lock = dlock_client::RedLock::open(["redis://127.0.0.1/"], "r")?;
    /// let outcome = lock.lock()?.unlock()?;
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn unlock(mut self) -> Result<Unlock> {
        self.release()
    }

    fn release(&mut self) -> Result<Unlock> {
        self.done = true;
        if let Some(mut wd) = self.watchdog.take() {
            wd.stop();
        }
        let c = cmd::release(LockKind::Mutex, &self.key, &self.owner);
        let outcomes: Vec<Result<Unlock>> =
            on_all(&self.nodes, |n| cmd::unlock(n.run(&c, self.timeout)));
        release_outcome(outcomes, self.quorum, &self.lost)
    }
}

impl Drop for RedLockGuard {
    fn drop(&mut self) {
        if !self.done {
            let _ = self.release();
        }
    }
}
