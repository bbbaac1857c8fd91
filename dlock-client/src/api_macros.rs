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
