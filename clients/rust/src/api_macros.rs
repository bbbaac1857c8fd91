//! The public methods that the blocking and the async halves share word for word:
//! the builders and accessors of lock handles and RedLocks. Written once here and
//! instantiated in each half; the logic behind them is in [`crate::core`].

/// The builder and accessor methods of a lock handle ([`crate::Lock`],
/// [`crate::aio::AsyncLock`]): a struct with `inner` (whose `owner()` gives the
/// caller's owner id) and `spec: LockSpec`. `$client` is the path of the client type,
/// for the examples.
macro_rules! lock_handle_methods {
    ($Handle:ident, $client:literal) => {
        /// The same lock, whose holds are bound to the connection that was granted them
        /// (`BIND`): the server ends such a hold at once when that connection closes — in
        /// practice when this process dies or is killed, so the next waiter does not wait
        /// out the lease. The client's connections are pooled: while the process lives,
        /// the granting connection goes back to the pool and keeps the binding alive, so
        /// `bind` protects against crashes, not against a live process that forgets a
        /// guard (the lease and the watchdog's lost signal still do that).
        ///
        /// ```
        #[doc = concat!(" ", "# let client = ", $client, "::open(\"redis://127.0.0.1/\")?;")]
        /// let lock = client.mutex("k").bind();
        /// # Ok::<(), dlock_client::Error>(())
        /// ```
        pub fn bind(mut self) -> $Handle {
            self.spec.hold.bind = true;
            self
        }

        /// The same lock with Chubby's lock-delay (`LOCKDELAY`): a hold that ends other
        /// than by a release (its lease ran out, its bound connection closed) keeps
        /// excluding everyone for `delay` more.
        ///
        /// ```
        /// # use std::time::Duration;
        #[doc = concat!(" ", "# let client = ", $client, "::open(\"redis://127.0.0.1/\")?;")]
        /// let lock = client.mutex("k").lock_delay(Duration::from_secs(5));
        /// # Ok::<(), dlock_client::Error>(())
        /// ```
        pub fn lock_delay(mut self, delay: Duration) -> $Handle {
            self.spec.lock_delay(delay);
            self
        }

        /// The same lock with durable grants: after each grant, `WAIT` on the connection
        /// that got it until `replicas` replicas have it, at most `timeout`. When fewer
        /// acknowledge, the grant is released again and the acquire fails with
        /// [`crate::Error::NotDurable`] (see [`Self::durable`] to try again instead).
        /// Costs one round trip plus the replicas' acknowledgement per grant.
        ///
        /// ```
        /// # use std::time::Duration;
        #[doc = concat!(" ", "# let client = ", $client, "::open(\"redis://127.0.0.1/\")?;")]
        /// let lock = client.mutex("k").replicas(1, Duration::from_millis(500));
        /// # Ok::<(), dlock_client::Error>(())
        /// ```
        pub fn replicas(self, replicas: u32, timeout: Duration) -> $Handle {
            self.durable(crate::Durable::new(replicas, timeout))
        }

        /// The same lock with the given durability ([`crate::Durable`]: replicas,
        /// timeout, and how many times to try again after a short count).
        ///
        /// ```
        /// # use std::time::Duration;
        /// use dlock_client::Durable;
        #[doc = concat!(" ", "# let client = ", $client, "::open(\"redis://127.0.0.1/\")?;")]
        /// let lock = client.fair("k").durable(Durable::new(2, Duration::from_secs(1)).retries(3));
        /// # Ok::<(), dlock_client::Error>(())
        /// ```
        pub fn durable(mut self, durable: crate::Durable) -> $Handle {
            self.spec.durable = Some(durable);
            self
        }

        /// The same lock, waiting the given way (default [`WaitMode::Server`]).
        ///
        /// ```
        /// # use dlock_client::WaitMode;
        #[doc = concat!(" ", "# let client = ", $client, "::open(\"redis://127.0.0.1/\")?;")]
        /// let lock = client.mutex("k").wait_mode(WaitMode::Notifications);
        /// # Ok::<(), dlock_client::Error>(())
        /// ```
        pub fn wait_mode(mut self, mode: WaitMode) -> $Handle {
            self.spec.wait_mode = mode;
            self
        }

        /// The same lock, acting with a fixed owner id instead of the per-thread (blocking) or
        /// per-task (async) one (e.g. to release a lock later from another thread or process).
        ///
        /// ```no_run
        #[doc = concat!(" ", "# let client = ", $client, "::open(\"redis://127.0.0.1/\")?;")]
        /// let lock = client.mutex("batch").with_owner("batch-runner-3");
        /// assert_eq!(lock.owner(), "batch-runner-3");
        /// # Ok::<(), dlock_client::Error>(())
        /// ```
        pub fn with_owner(mut self, owner: impl Into<String>) -> $Handle {
            self.spec.owner = Some(owner.into());
            self
        }

        /// The owner id used when called from this thread (async: from this task).
        ///
        /// ```
        #[doc = concat!(" ", "# let client = ", $client, "::open(\"redis://127.0.0.1/\")?;")]
        /// assert_eq!(client.mutex("a").owner(), client.owner());
        /// # Ok::<(), dlock_client::Error>(())
        /// ```
        pub fn owner(&self) -> String {
            self.spec
                .owner
                .clone()
                .unwrap_or_else(|| self.inner.owner())
        }

        /// The lock's key.
        ///
        /// ```
        #[doc = concat!(" ", "# let client = ", $client, "::open(\"redis://127.0.0.1/\")?;")]
        /// assert_eq!(client.fair("q").name(), "q");
        /// # Ok::<(), dlock_client::Error>(())
        /// ```
        pub fn name(&self) -> &str {
            &self.spec.key
        }

        /// The lock's kind.
        ///
        /// ```
        /// # use dlock_client::LockKind;
        #[doc = concat!(" ", "# let client = ", $client, "::open(\"redis://127.0.0.1/\")?;")]
        /// assert_eq!(client.rw("d").write().kind(), LockKind::Write);
        /// # Ok::<(), dlock_client::Error>(())
        /// ```
        pub fn kind(&self) -> LockKind {
            self.spec.kind
        }
    };
}

/// The constructors, builders and accessors of a RedLock ([`crate::RedLock`],
/// [`crate::aio::AsyncRedLock`]): a struct with `nodes: Vec<Arc<$Inner>>` and
/// `spec: RedSpec`, over clients of type `$Client`; `$owner(prefix)` is the caller's
/// owner id. `$red` and `$client` are the paths of the types, for the examples.
macro_rules! redlock_methods {
    ($Red:ident, $Client:ident, $Inner:ident, $red:literal, $client:literal, $owner:path) => {
    /// A RedLock named `name` over the given clients (one per independent server).
    /// The [`Options`] of the first client apply.
    ///
    /// ```
    #[doc = concat!(" let clients: Vec<", $client, "> = (6379..6382)")]
    #[doc = concat!("     .map(|p| ", $client, "::open(format!(\"redis://127.0.0.1:{p}/\")))")]
    ///     .collect::<Result<_, _>>()?;
    #[doc = concat!(" let lock = ", $red, "::new(clients, \"reports\")?;")]
    /// assert_eq!(lock.quorum(), 2);
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn new(
        clients: impl IntoIterator<Item = $Client>,
        name: impl Into<String>,
    ) -> Result<$Red> {
        let nodes: Vec<Arc<$Inner>> = clients.into_iter().map(|c| c.inner).collect();
        let spec = RedSpec::new(name.into(), nodes.first().map(|n| &n.opts), nodes.len())?;
        Ok($Red { nodes, spec })
    }

    /// A RedLock over the servers at `urls`, with default [`Options`].
    ///
    /// ```
    #[doc = concat!(" ", "let lock = ", $red, "::open(")]
    ///     ["redis://127.0.0.1:7001/", "redis://127.0.0.1:7002/", "redis://127.0.0.1:7003/"],
    ///     "reports",
    /// )?;
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn open<U: IntoConnectionInfo>(
        urls: impl IntoIterator<Item = U>,
        name: impl Into<String>,
    ) -> Result<$Red> {
        Self::open_with_options(urls, name, Options::default())
    }

    /// Like [`Self::open`], with [`Options`] (watchdog lease and interval, owner
    /// prefix).
    ///
    /// ```
    /// # use std::time::Duration;
    /// use dlock_client::Options;
    /// let opts = Options::default().watchdog_lease(Duration::from_secs(3))
    ///     .renew_interval(Duration::from_secs(1));
    #[doc = concat!(" let lock = ", $red, "::open_with_options([\"redis://127.0.0.1:7001/\"], \"r\", opts)?;")]
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn open_with_options<U: IntoConnectionInfo>(
        urls: impl IntoIterator<Item = U>,
        name: impl Into<String>,
        opts: Options,
    ) -> Result<$Red> {
        let clients = urls
            .into_iter()
            .map(|u| $Client::with_options(u, opts.clone()))
            .collect::<Result<Vec<_>>>()?;
        Self::new(clients, name)
    }

    /// Sets the per-node timeout of one attempt (connect + answer). Default 100 ms;
    /// keep it small compared to the lease.
    ///
    /// ```
    /// # use std::time::Duration;
    #[doc = concat!(" ", "# let lock = ", $red, "::open([\"redis://127.0.0.1/\"], \"r\")?;")]
    /// let lock = lock.node_timeout(Duration::from_millis(50));
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn node_timeout(mut self, timeout: Duration) -> $Red {
        self.spec.node_timeout(timeout);
        self
    }

    /// Sets the largest random delay between two attempts. Default 200 ms.
    ///
    /// ```
    /// # use std::time::Duration;
    #[doc = concat!(" ", "# let lock = ", $red, "::open([\"redis://127.0.0.1/\"], \"r\")?;")]
    /// let lock = lock.retry_delay(Duration::from_millis(50));
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn retry_delay(mut self, delay: Duration) -> $Red {
        self.spec.retry_delay = delay;
        self
    }

    /// Uses a fixed owner id instead of `<uuid>:<thread>` (async: `<uuid>:task-<id>`).
    ///
    /// ```
    #[doc = concat!(" ", "# let lock = ", $red, "::open([\"redis://127.0.0.1/\"], \"r\")?;")]
    /// let lock = lock.with_owner("node-a");
    /// assert_eq!(lock.owner(), "node-a");
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn with_owner(mut self, owner: impl Into<String>) -> $Red {
        self.spec.owner = Some(owner.into());
        self
    }

    /// The owner id used from the calling thread (async: from the calling task).
    ///
    /// ```
    #[doc = concat!(" ", "# let lock = ", $red, "::open([\"redis://127.0.0.1/\"], \"r\")?;")]
    /// assert!(lock.owner().contains(':'));
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn owner(&self) -> String {
        self.spec
            .owner
            .clone()
            .unwrap_or_else(|| $owner(&self.spec.prefix))
    }

    /// How many nodes must grant: `N/2 + 1`.
    ///
    /// ```
    #[doc = concat!(" ", "# let lock = ", $red, "::open([\"redis://127.0.0.1:1/\"; 5], \"r\")?;")]
    /// assert_eq!(lock.quorum(), 3);
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn quorum(&self) -> usize {
        self.spec.quorum
    }
    };
}

/// The two sides of a read-write lock handle ([`crate::RwLock`],
/// [`crate::aio::AsyncRwLock`]): a struct with `client` and `key`. The examples run
/// between `$open` and `$close`, each client call followed by `$aw`.
macro_rules! rw_handle_methods {
    ($Lock:ident, $open:literal, $aw:literal, $close:literal) => {
        /// The shared (READ) side.
        ///
        /// ```no_run
        #[doc = $open]
        #[doc = concat!(" let g = client.rw(\"config\").read().lock()", $aw, "?;")]
        #[doc = $close]
        /// ```
        pub fn read(&self) -> $Lock {
            self.client.handle(LockKind::Read, self.key.clone())
        }

        /// The exclusive (WRITE) side.
        ///
        /// ```no_run
        #[doc = $open]
        #[doc = concat!(" let g = client.rw(\"config\").write().lock()", $aw, "?;")]
        #[doc = $close]
        /// ```
        pub fn write(&self) -> $Lock {
            self.client.handle(LockKind::Write, self.key.clone())
        }
    };
}

/// The accessors of a RedLock guard ([`crate::RedLockGuard`],
/// [`crate::aio::AsyncRedLockGuard`]): a struct with `hold: Arc<RedHold>`. The
/// examples run between `$open` (which has a RedLock `lock`) and `$close`, each
/// client call followed by `$aw`.
macro_rules! redlock_guard_methods {
    ($open:literal, $aw:literal, $close:literal) => {
        /// How much longer the lock is certainly held: the validity of the last grant
        /// or majority renewal (lease − elapsed − margin), minus the time since. Zero
        /// when it ran out or the lock is lost.
        ///
        /// ```no_run
        /// # use std::time::Duration;
        #[doc = $open]
        /// let lease = Some(Duration::from_secs(10));
        #[doc = concat!(" let g = lock.try_lock(Duration::ZERO, lease)", $aw, "?.unwrap();")]
        /// assert!(g.validity() > Duration::from_secs(9));
        #[doc = $close]
        /// ```
        pub fn validity(&self) -> Duration {
            self.hold.validity(Instant::now())
        }

        /// The fencing token from each node, in the order the nodes were given
        /// (`None` where the node did not grant). Tokens of different nodes are
        /// unrelated.
        ///
        /// ```no_run
        #[doc = $open]
        #[doc = concat!(" let g = lock.lock()", $aw, "?;")]
        /// assert!(g.tokens().iter().flatten().count() >= lock.quorum());
        #[doc = $close]
        /// ```
        pub fn tokens(&self) -> &[Option<u64>] {
            &self.hold.tokens
        }

        /// The owner id the lock is held with.
        ///
        /// ```no_run
        #[doc = $open]
        #[doc = concat!(" let g = lock.lock()", $aw, "?;")]
        /// println!("{}", g.owner());
        #[doc = $close]
        /// ```
        pub fn owner(&self) -> &str {
            &self.hold.owner
        }

        /// True once the lock is known to be lost.
        ///
        /// ```no_run
        #[doc = $open]
        #[doc = concat!(" assert!(!lock.lock()", $aw, "?.is_lost());")]
        #[doc = $close]
        /// ```
        pub fn is_lost(&self) -> bool {
            self.hold.lost.is_lost()
        }

        /// A signal to block on or await ([`LostSignal::lost`]) until the lock is
        /// lost.
        ///
        /// ```no_run
        #[doc = $open]
        #[doc = concat!(" let g = lock.lock()", $aw, "?;")]
        /// let lost = g.lost_signal();
        #[doc = $close]
        /// ```
        pub fn lost_signal(&self) -> LostSignal {
            self.hold.signal()
        }
    };
}

/// The accessors of a lock guard ([`crate::Guard`], [`crate::aio::AsyncGuard`]): a
/// struct with `hold: Hold`. The examples run between `$open` (which has a client
/// `client`) and `$close`, each client call followed by `$aw`.
macro_rules! guard_methods {
    ($open:literal, $aw:literal, $close:literal) => {
        /// The fencing token of this hold: greater than every token issued before for
        /// this key (a reentrant hold has the outer hold's token).
        ///
        /// ```no_run
        #[doc = $open]
        #[doc = concat!(" let t1 = client.mutex(\"k\").lock()", $aw, "?.token();")]
        #[doc = concat!(" let t2 = client.mutex(\"k\").lock()", $aw, "?.token();")]
        /// assert!(t2 > t1);
        #[doc = $close]
        /// ```
        pub fn token(&self) -> u64 {
            self.hold.token
        }

        /// True once the lock is known to be lost (see [`crate::LostReason`]).
        ///
        /// ```no_run
        #[doc = $open]
        #[doc = concat!(" let guard = client.mutex(\"k\").lock()", $aw, "?;")]
        /// assert!(!guard.is_lost());
        #[doc = $close]
        /// ```
        pub fn is_lost(&self) -> bool {
            self.hold.lost.is_lost()
        }

        /// A signal to block on ([`LostSignal::wait`]) or await ([`LostSignal::lost`])
        /// until the lock is lost.
        ///
        /// ```no_run
        /// # use std::time::Duration;
        #[doc = $open]
        #[doc = concat!(" let guard = client.mutex(\"k\").lock()", $aw, "?;")]
        /// let lost = guard.lost_signal();
        /// assert_eq!(lost.reason(), None);
        #[doc = $close]
        /// ```
        pub fn lost_signal(&self) -> LostSignal {
            self.hold.signal()
        }

        /// The owner id the lock is held with.
        ///
        /// ```no_run
        #[doc = $open]
        #[doc = concat!(" let guard = client.mutex(\"k\").lock()", $aw, "?;")]
        /// assert_eq!(guard.owner(), client.owner());
        #[doc = $close]
        /// ```
        pub fn owner(&self) -> &str {
            &self.hold.owner
        }

        /// The lock's key.
        ///
        /// ```no_run
        #[doc = $open]
        #[doc = concat!(" assert_eq!(client.mutex(\"k\").lock()", $aw, "?.name(), \"k\");")]
        #[doc = $close]
        /// ```
        pub fn name(&self) -> &str {
            &self.hold.key
        }
    };
}

/// The lock-handle factories of a client ([`crate::Client`],
/// [`crate::aio::AsyncClient`]): a struct with `inner`, making `$Lock`, `$RwLock` and
/// `$Latch` handles. The examples run between `$open` (which has a client `client`)
/// and `$close`, each client call followed by `$aw`.
macro_rules! client_methods {
    ($Lock:ident, $RwLock:ident, $Latch:ident, $open:literal, $aw:literal, $close:literal) => {
        /// A handle on the reentrant mutex stored at key `name` (`DLOCK.ACQUIRE`).
        ///
        /// ```no_run
        #[doc = $open]
        #[doc = concat!(" let guard = client.mutex(\"orders\").lock()", $aw, "?;")]
        #[doc = $close]
        /// ```
        pub fn mutex(&self, name: impl Into<String>) -> $Lock {
            self.handle(LockKind::Mutex, name.into())
        }

        /// A handle on the fair (FIFO) lock at key `name` (`DLOCK.FAIRACQUIRE`).
        ///
        /// Note: an owner that gives up waiting (a `try_lock` that returns `None`) keeps
        /// its place in the server's queue until `dlock.fair-queue-timeout-ms` (5 s by
        /// default) passes.
        ///
        /// ```no_run
        #[doc = $open]
        #[doc = concat!(" let guard = client.fair(\"printer\").lock()", $aw, "?;")]
        #[doc = $close]
        /// ```
        pub fn fair(&self, name: impl Into<String>) -> $Lock {
            self.handle(LockKind::Fair, name.into())
        }

        /// A handle on the read-write lock at key `name` (`DLOCK.RWACQUIRE`).
        ///
        /// ```no_run
        #[doc = $open]
        /// let doc = client.rw("doc:42");
        #[doc = concat!(" let r1 = doc.read().lock()", $aw, "?;")]
        /// drop(r1);
        #[doc = concat!(" let w = doc.write().lock()", $aw, "?;")]
        #[doc = $close]
        /// ```
        pub fn rw(&self, name: impl Into<String>) -> $RwLock {
            $RwLock {
                client: self.clone(),
                key: name.into(),
            }
        }

        /// A handle on `permits` permits of the counting semaphore of `limit` permits at
        /// key `name` (`DLOCK.SEMACQUIRE`). Its guard holds the permits, renewed by the
        /// watchdog (or with an explicit lease), with a fencing token and the lost
        /// signal, and gives them back (`DLOCK.RELEASE … PERMITS k`) when dropped.
        /// Waiters are served in strict FIFO order: a request for many permits is never
        /// starved by later smaller ones.
        ///
        /// ```no_run
        #[doc = $open]
        /// // At most 8 workers at once on the fragile database; this one takes 2.
        #[doc = concat!(" let guard = client.semaphore(\"db-conns\", 8, 2).lock()", $aw, "?;")]
        #[doc = $close]
        /// ```
        pub fn semaphore(&self, name: impl Into<String>, limit: u64, permits: u32) -> $Lock {
            self.handle(LockKind::Semaphore { limit, permits }, name.into())
        }

        /// A handle on the countdown latch at key `name` (`DLOCK.LATCHSET`,
        /// `DLOCK.COUNTDOWN`, `DLOCK.AWAIT`).
        ///
        /// ```no_run
        /// # use std::time::Duration;
        #[doc = $open]
        /// let shards = client.latch("shards-loaded");
        #[doc = concat!(" shards.set(2)", $aw, "?;")]
        #[doc = concat!(" shards.count_down()", $aw, "?;")]
        #[doc = concat!(" shards.count_down()", $aw, "?;")]
        #[doc = concat!(" assert!(shards.wait(Duration::from_secs(1))", $aw, "?);")]
        #[doc = $close]
        /// ```
        pub fn latch(&self, name: impl Into<String>) -> $Latch {
            $Latch {
                inner: self.inner.clone(),
                key: name.into(),
            }
        }

        fn handle(&self, kind: LockKind, key: String) -> $Lock {
            $Lock {
                inner: self.inner.clone(),
                spec: LockSpec::new(kind, key),
            }
        }
    };
}
