//! The blocking API: [`Client`], [`Lock`], [`RwLock`], [`Guard`].

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::{Cmd, IntoConnectionInfo, RedisResult, Value};

use crate::error::{is_connection_error, Error, Result};
use crate::lost::{LostReason, LostSignal, LostState};
use crate::watchdog::{Renewal, Watchdog};
use crate::{cmd, LockKind, Options, Unlock};

/// Idle connections kept per client.
const MAX_IDLE: usize = 16;

/// Shared state of a [`Client`]: the redis client, settings, owner prefix and a small
/// pool of idle connections.
pub(crate) struct Inner {
    redis: redis::Client,
    pub(crate) opts: Options,
    pub(crate) prefix: String,
    /// `host:port/db`, for deterministic ordering across servers.
    pub(crate) server: String,
    /// AUTH / SELECT sent by this client after connecting (under its timeouts): the
    /// redis crate's own handshake reads without a timeout and would hang on a
    /// frozen server.
    setup: Vec<Cmd>,
    pool: Mutex<Vec<redis::Connection>>,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("server", &self.server)
            .field("prefix", &self.prefix)
            .field("opts", &self.opts)
            .finish_non_exhaustive()
    }
}

impl Inner {
    /// Runs `cmd` on a pooled connection with `timeout` for connecting, writing and
    /// reading. A connection that failed is dropped, never reused (it may still owe a
    /// reply).
    pub(crate) fn run(&self, cmd: &Cmd, timeout: Duration) -> RedisResult<Value> {
        let timeout = timeout.max(Duration::from_millis(1));
        let pooled = self.pool.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let mut con = match pooled {
            Some(c) => c,
            None => self.connect(timeout)?,
        };
        con.set_read_timeout(Some(timeout))?;
        con.set_write_timeout(Some(timeout))?;
        let r: RedisResult<Value> = cmd.query(&mut con);
        let keep = match &r {
            Ok(_) => true,
            Err(e) => !is_connection_error(e),
        };
        if keep {
            let mut pool = self.pool.lock().unwrap_or_else(|e| e.into_inner());
            if pool.len() < MAX_IDLE {
                pool.push(con);
            }
        }
        r
    }

    /// A new connection, handshake (AUTH, SELECT) done under `timeout`.
    fn connect(&self, timeout: Duration) -> RedisResult<redis::Connection> {
        let t = self
            .opts
            .connect_timeout
            .min(timeout)
            .max(Duration::from_millis(1));
        let mut c = self.redis.get_connection_with_timeout(t)?;
        c.set_read_timeout(Some(t))?;
        c.set_write_timeout(Some(t))?;
        for s in &self.setup {
            s.query::<()>(&mut c)?;
        }
        Ok(c)
    }

    pub(crate) fn owner(&self) -> String {
        format!("{}:{}", self.prefix, crate::thread_tag())
    }
}

/// How [`Lock::lock`] and [`Lock::try_lock`] wait for a busy lock.
///
/// ```no_run
/// use dlock_client::{Client, WaitMode};
/// # let client = Client::open("redis://127.0.0.1/")?;
/// let lock = client.mutex("k").wait_mode(WaitMode::Notifications);
/// let guard = lock.lock()?;
/// # Ok::<(), dlock_client::Error>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum WaitMode {
    /// Wait on the server (`WAIT ms`, in slices of [`Options::wait_slice`]): FIFO among
    /// waiters, one grant per release, no polling. Occupies one connection per waiter
    /// while it waits. The default.
    #[default]
    Server,
    /// Subscribe to the lock's channel ([`crate::channel_for`]) and retry
    /// (`WAIT 0`) on each `released` / `expired` / `deleted` notice, and at least once
    /// per slice. Blocks no connection on the server (for proxies or pools that must
    /// not hold a blocked connection), but is not FIFO: every subscriber retries on a
    /// release.
    Notifications,
}

/// A connection to one Redis server with the dlock module, and the factory of lock
/// handles. Cheap to clone (clones share settings, owner prefix and connections).
///
/// ```no_run
/// use dlock_client::Client;
///
/// let client = Client::open("redis://127.0.0.1:6379/")?;
/// let guard = client.mutex("orders").lock()?;
/// println!("holding orders as {} with token {}", guard.owner(), guard.token());
/// # Ok::<(), dlock_client::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Client {
    pub(crate) inner: Arc<Inner>,
}

impl Client {
    /// A client for the server at `url` (`redis://host:port/db`, see the `redis` crate)
    /// with default [`Options`]. Does not connect yet.
    ///
    /// ```
    /// let client = dlock_client::Client::open("redis://127.0.0.1:6379/")?;
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn open(url: impl IntoConnectionInfo) -> Result<Client> {
        Self::with_options(url, Options::default())
    }

    /// A client with the given [`Options`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use dlock_client::{Client, Options};
    ///
    /// let opts = Options::default().watchdog_lease(Duration::from_secs(6))
    ///     .renew_interval(Duration::from_secs(2));
    /// let client = Client::with_options("redis://127.0.0.1/", opts)?;
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn with_options(url: impl IntoConnectionInfo, opts: Options) -> Result<Client> {
        let mut info = url.into_connection_info()?;
        let server = format!("{}/{}", info.addr, info.redis.db);
        let mut setup = Vec::new();
        if let Some(password) = info.redis.password.take() {
            let mut auth = redis::cmd("AUTH");
            if let Some(user) = info.redis.username.take() {
                auth.arg(user);
            }
            auth.arg(password);
            setup.push(auth);
        }
        if info.redis.db != 0 {
            let mut select = redis::cmd("SELECT");
            select.arg(info.redis.db);
            setup.push(select);
            info.redis.db = 0;
        }
        info.redis.protocol = redis::ProtocolVersion::RESP2;
        let redis = redis::Client::open(info)?;
        Ok(Client {
            inner: Arc::new(Inner {
                redis,
                prefix: opts.new_prefix(),
                opts,
                server,
                setup,
                pool: Mutex::new(Vec::new()),
            }),
        })
    }

    /// The owner id this client uses on the calling thread: `<prefix>:<thread>`.
    ///
    /// ```
    /// let client = dlock_client::Client::open("redis://127.0.0.1/")?;
    /// let here = client.owner();
    /// let there = std::thread::scope(|s| s.spawn(|| client.owner()).join().unwrap());
    /// assert_ne!(here, there);
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn owner(&self) -> String {
        self.inner.owner()
    }

    /// The client's settings.
    ///
    /// ```
    /// let client = dlock_client::Client::open("redis://127.0.0.1/")?;
    /// assert_eq!(client.options().watchdog_lease.as_secs(), 30);
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn options(&self) -> &Options {
        &self.inner.opts
    }

    /// A handle on the reentrant mutex stored at key `name` (`DLOCK.ACQUIRE`).
    ///
    /// ```no_run
    /// # let client = dlock_client::Client::open("redis://127.0.0.1/")?;
    /// let guard = client.mutex("orders").lock()?;
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn mutex(&self, name: impl Into<String>) -> Lock {
        self.handle(LockKind::Mutex, name.into())
    }

    /// A handle on the fair (FIFO) lock at key `name` (`DLOCK.FAIRACQUIRE`).
    ///
    /// Note: an owner that gives up waiting (a `try_lock` that returns `None`) keeps
    /// its place in the server's queue until `dlock.fair-queue-timeout-ms` (5 s by
    /// default) passes.
    ///
    /// ```no_run
    /// # let client = dlock_client::Client::open("redis://127.0.0.1/")?;
    /// let guard = client.fair("printer").lock()?;
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn fair(&self, name: impl Into<String>) -> Lock {
        self.handle(LockKind::Fair, name.into())
    }

    /// A handle on the read-write lock at key `name` (`DLOCK.RWACQUIRE`).
    ///
    /// ```no_run
    /// # let client = dlock_client::Client::open("redis://127.0.0.1/")?;
    /// let doc = client.rw("doc:42");
    /// let r1 = doc.read().lock()?;
    /// drop(r1);
    /// let w = doc.write().lock()?;
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn rw(&self, name: impl Into<String>) -> RwLock {
        RwLock {
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
    /// # let client = dlock_client::Client::open("redis://127.0.0.1/")?;
    /// // At most 8 workers at once on the fragile database; this one takes 2.
    /// let guard = client.semaphore("db-conns", 8, 2).lock()?;
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn semaphore(&self, name: impl Into<String>, limit: u64, permits: u32) -> Lock {
        self.handle(LockKind::Semaphore { limit, permits }, name.into())
    }

    /// A handle on the countdown latch at key `name` (`DLOCK.LATCHSET`,
    /// `DLOCK.COUNTDOWN`, `DLOCK.AWAIT`).
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # let client = dlock_client::Client::open("redis://127.0.0.1/")?;
    /// let shards = client.latch("shards-loaded");
    /// shards.set(2)?;
    /// shards.count_down()?;
    /// shards.count_down()?;
    /// assert!(shards.wait(Duration::from_secs(1))?);
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn latch(&self, name: impl Into<String>) -> Latch {
        Latch {
            inner: self.inner.clone(),
            key: name.into(),
        }
    }

    fn handle(&self, kind: LockKind, key: String) -> Lock {
        Lock {
            inner: self.inner.clone(),
            kind,
            key,
            owner: None,
            wait_mode: WaitMode::Server,
            hold: cmd::HoldOpts::default(),
        }
    }
}

/// A read-write lock: take its shared side with [`RwLock::read`] and its exclusive
/// side with [`RwLock::write`].
///
/// ```no_run
/// # let client = dlock_client::Client::open("redis://127.0.0.1/")?;
/// let cfg = client.rw("config");
/// let reader = cfg.read().lock()?;     // many readers at once
/// drop(reader);
/// let writer = cfg.write().lock()?;    // one writer, no readers
/// # Ok::<(), dlock_client::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct RwLock {
    client: Client,
    key: String,
}

impl RwLock {
    /// The shared (READ) side.
    ///
    /// ```no_run
    /// # let client = dlock_client::Client::open("redis://127.0.0.1/")?;
    /// let g = client.rw("config").read().lock()?;
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn read(&self) -> Lock {
        self.client.handle(LockKind::Read, self.key.clone())
    }

    /// The exclusive (WRITE) side.
    ///
    /// ```no_run
    /// # let client = dlock_client::Client::open("redis://127.0.0.1/")?;
    /// let g = client.rw("config").write().lock()?;
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn write(&self) -> Lock {
        self.client.handle(LockKind::Write, self.key.clone())
    }
}

/// A handle on one lock (a key and a kind) through one [`Client`]. Taking it gives a
/// [`Guard`]. Cheap to clone and `Send`: move it into other threads, where it acts with
/// that thread's owner id.
///
/// ```no_run
/// # use std::time::Duration;
/// # let client = dlock_client::Client::open("redis://127.0.0.1/")?;
/// let lock = client.mutex("invoices");
/// match lock.try_lock(Duration::from_millis(500), None)? {
///     Some(guard) => println!("got it, token {}", guard.token()),
///     None => println!("busy"),
/// }
/// # Ok::<(), dlock_client::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Lock {
    pub(crate) inner: Arc<Inner>,
    kind: LockKind,
    key: String,
    owner: Option<String>,
    wait_mode: WaitMode,
    hold: cmd::HoldOpts,
}

impl Lock {
    /// The same lock, whose holds are bound to the connection that was granted them
    /// (`BIND`): the server ends such a hold at once when that connection closes — in
    /// practice when this process dies or is killed, so the next waiter does not wait
    /// out the lease. The client's connections are pooled: while the process lives,
    /// the granting connection goes back to the pool and keeps the binding alive, so
    /// `bind` protects against crashes, not against a live process that forgets a
    /// guard (the lease and the watchdog's lost signal still do that).
    ///
    /// ```
    /// # let client = dlock_client::Client::open("redis://127.0.0.1/")?;
    /// let lock = client.mutex("k").bind();
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn bind(mut self) -> Lock {
        self.hold.bind = true;
        self
    }

    /// The same lock with Chubby's lock-delay (`LOCKDELAY`): a hold that ends other
    /// than by a release (its lease ran out, its bound connection closed) keeps
    /// excluding everyone for `delay` more.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # let client = dlock_client::Client::open("redis://127.0.0.1/")?;
    /// let lock = client.mutex("k").lock_delay(Duration::from_secs(5));
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn lock_delay(mut self, delay: Duration) -> Lock {
        self.hold.lock_delay_ms = crate::ceil_ms(delay);
        self
    }

    /// The same lock, waiting the given way (default [`WaitMode::Server`]).
    ///
    /// ```
    /// # use dlock_client::WaitMode;
    /// # let client = dlock_client::Client::open("redis://127.0.0.1/")?;
    /// let lock = client.mutex("k").wait_mode(WaitMode::Notifications);
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn wait_mode(mut self, mode: WaitMode) -> Lock {
        self.wait_mode = mode;
        self
    }

    /// The same lock, acting with a fixed owner id instead of the per-thread one (e.g.
    /// to release a lock later from another thread or process).
    ///
    /// ```no_run
    /// # let client = dlock_client::Client::open("redis://127.0.0.1/")?;
    /// let lock = client.mutex("batch").with_owner("batch-runner-3");
    /// assert_eq!(lock.owner(), "batch-runner-3");
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn with_owner(mut self, owner: impl Into<String>) -> Lock {
        self.owner = Some(owner.into());
        self
    }

    /// The owner id used when called from this thread.
    ///
    /// ```
    /// # let client = dlock_client::Client::open("redis://127.0.0.1/")?;
    /// assert_eq!(client.mutex("a").owner(), client.owner());
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn owner(&self) -> String {
        self.owner.clone().unwrap_or_else(|| self.inner.owner())
    }

    /// The lock's key.
    ///
    /// ```
    /// # let client = dlock_client::Client::open("redis://127.0.0.1/")?;
    /// assert_eq!(client.fair("q").name(), "q");
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn name(&self) -> &str {
        &self.key
    }

    /// The lock's kind.
    ///
    /// ```
    /// # use dlock_client::LockKind;
    /// # let client = dlock_client::Client::open("redis://127.0.0.1/")?;
    /// assert_eq!(client.rw("d").write().kind(), LockKind::Write);
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn kind(&self) -> LockKind {
        self.kind
    }

    /// Waits until the lock is granted, with the watchdog lease
    /// ([`Options::watchdog_lease`], renewed while the guard lives).
    ///
    /// Waiting happens on the server (`WAIT`), in slices of at most
    /// [`Options::wait_slice`]. Fails when the server cannot be reached.
    ///
    /// ```no_run
    /// # let client = dlock_client::Client::open("redis://127.0.0.1/")?;
    /// let guard = client.mutex("orders").lock()?;
    /// // ... critical section ...
    /// drop(guard); // or guard.unlock()?
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn lock(&self) -> Result<Guard> {
        match self.acquire(None, None)? {
            Some(g) => Ok(g),
            None => Err(Error::Unexpected(
                "an unbounded wait ended without a grant".into(),
            )),
        }
    }

    /// Tries to take the lock, waiting at most `wait` (zero: a single attempt).
    ///
    /// With `lease: None` the lock gets the watchdog lease and is renewed while the
    /// guard lives; with `Some(lease)` it is held for that lease and never renewed
    /// (the guard then reports [`LostReason::LeaseEnded`] when it runs out).
    /// Answers `Ok(None)` when the lock was not granted in time.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// # let client = dlock_client::Client::open("redis://127.0.0.1/")?;
    /// let lock = client.mutex("report");
    /// if let Some(guard) = lock.try_lock(Duration::ZERO, Some(Duration::from_secs(60)))? {
    ///     // held for at most 60 s
    /// }
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn try_lock(&self, wait: Duration, lease: Option<Duration>) -> Result<Option<Guard>> {
        self.acquire(Some(wait), lease)
    }

    fn acquire(&self, wait: Option<Duration>, lease: Option<Duration>) -> Result<Option<Guard>> {
        if self.wait_mode == WaitMode::Notifications && wait != Some(Duration::ZERO) {
            return self.acquire_notified(wait, lease);
        }
        let opts = &self.inner.opts;
        let owner = self.owner();
        let lease_d = lease.unwrap_or(opts.watchdog_lease);
        let lease_ms = crate::ceil_ms(lease_d).max(1);
        let deadline = wait.map(|w| Instant::now() + w);
        loop {
            let now = Instant::now();
            let slice = match deadline {
                Some(d) => d.saturating_duration_since(now).min(opts.wait_slice),
                None => opts.wait_slice,
            };
            let slice_ms = slice.as_millis() as u64;
            let mut c = cmd::acquire(self.kind, &self.key, &owner, lease_ms, slice_ms);
            cmd::hold_opts(&mut c, self.hold);
            let sent = Instant::now();
            let reply = self
                .inner
                .run(&c, Duration::from_millis(slice_ms) + opts.command_timeout)?;
            if let Some(token) = cmd::token(reply)? {
                // The grant came at an unknown instant of the wait. After a
                // long wait, restart the lease now so the lost-lock clock
                // starts from a known instant; 0 means it already lapsed.
                if sent.elapsed() <= crate::lease_clock_slack(lease_d) {
                    return Ok(Some(Guard::new(self, owner, token, sent, lease)));
                }
                let renew_sent = Instant::now();
                let v = self.inner.run(
                    &cmd::renew(&self.key, &owner, lease_ms),
                    opts.command_timeout,
                )?;
                if cmd::renewed(&v) == Some(true) {
                    return Ok(Some(Guard::new(self, owner, token, renew_sent, lease)));
                }
            }
            if let Some(d) = deadline {
                if Instant::now() >= d {
                    return Ok(None);
                }
            }
        }
    }

    /// One attempt without waiting on the server.
    fn attempt(&self, owner: &str, lease: Option<Duration>) -> Result<Option<Guard>> {
        let lease_ms = crate::ceil_ms(lease.unwrap_or(self.inner.opts.watchdog_lease)).max(1);
        let mut c = cmd::acquire(self.kind, &self.key, owner, lease_ms, 0);
        cmd::hold_opts(&mut c, self.hold);
        let sent = Instant::now();
        let reply = self.inner.run(&c, self.inner.opts.command_timeout)?;
        Ok(cmd::token(reply)?.map(|t| Guard::new(self, owner.to_string(), t, sent, lease)))
    }

    /// [`WaitMode::Notifications`]: retry on each notice of the lock's channel.
    fn acquire_notified(
        &self,
        wait: Option<Duration>,
        lease: Option<Duration>,
    ) -> Result<Option<Guard>> {
        let opts = &self.inner.opts;
        let owner = self.owner();
        let deadline = wait.map(|w| Instant::now() + w);
        if let Some(g) = self.attempt(&owner, lease)? {
            return Ok(Some(g));
        }
        let mut con = self.inner.connect(opts.command_timeout)?;
        let mut sub = con.as_pubsub();
        sub.subscribe(crate::channel_for(&self.key))?;
        // A fair lock keeps a polling owner's place only while it asks again in time.
        let slice = match self.kind {
            LockKind::Fair => opts.wait_slice.min(Duration::from_secs(1)),
            _ => opts.wait_slice,
        };
        loop {
            // Subscribed first, then asked: a release in between is not missed.
            if let Some(g) = self.attempt(&owner, lease)? {
                return Ok(Some(g));
            }
            let left = match deadline {
                Some(d) => d.saturating_duration_since(Instant::now()),
                None => slice,
            };
            if left.is_zero() {
                return Ok(None);
            }
            sub.set_read_timeout(Some(left.min(slice).max(Duration::from_millis(1))))?;
            match sub.get_message() {
                Ok(_) => {}
                Err(e) if e.is_timeout() => {}
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// `DLOCK.FORCERELEASE`: drops every hold of the lock, whoever holds it
    /// (administrative). Answers whether a lock existed.
    ///
    /// ```no_run
    /// # let client = dlock_client::Client::open("redis://127.0.0.1/")?;
    /// let existed = client.mutex("stuck-job").force_unlock()?;
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn force_unlock(&self) -> Result<bool> {
        let mut c = redis::cmd("DLOCK.FORCERELEASE");
        c.arg(&self.key);
        match self.inner.run(&c, self.inner.opts.command_timeout)? {
            Value::Int(n) => Ok(n == 1),
            other => Err(Error::Unexpected(format!(
                "DLOCK.FORCERELEASE answered {other:?}"
            ))),
        }
    }
}

/// A granted hold. Releases the lock when dropped (errors ignored: the lease then
/// ends by itself) or explicitly with [`Guard::unlock`], which reports the outcome.
///
/// While a guard taken without an explicit lease lives, its watchdog renews the lease;
/// if the lock is lost anyway, [`Guard::is_lost`] turns true and
/// [`Guard::lost_signal`] fires.
///
/// ```no_run
/// # let client = dlock_client::Client::open("redis://127.0.0.1/")?;
/// let guard = client.mutex("ledger").lock()?;
/// let token = guard.token(); // pass it to the resource to fence stale writers
/// if guard.is_lost() {
///     // stop touching the resource
/// }
/// guard.unlock()?;
/// # Ok::<(), dlock_client::Error>(())
/// ```
#[derive(Debug)]
pub struct Guard {
    inner: Arc<Inner>,
    kind: LockKind,
    key: String,
    owner: String,
    token: u64,
    lost: Arc<LostState>,
    watchdog: Option<Watchdog>,
    done: bool,
}

impl Guard {
    fn new(
        lock: &Lock,
        owner: String,
        token: u64,
        sent: Instant,
        lease: Option<Duration>,
    ) -> Guard {
        let inner = lock.inner.clone();
        let (lost, watchdog) = match lease {
            Some(l) => {
                let margin = crate::drift(l).min(l / 2);
                (LostState::new(Some(sent + l - margin)), None)
            }
            None => {
                let lost = LostState::new(None);
                let lease = inner.opts.watchdog_lease;
                let lease_ms = crate::ceil_ms(lease).max(1);
                let (i2, key2, owner2) = (inner.clone(), lock.key.clone(), owner.clone());
                let wd = Watchdog::spawn(
                    lease,
                    inner.opts.renew_interval,
                    sent,
                    lost.clone(),
                    move |timeout| match i2.run(&cmd::renew(&key2, &owner2, lease_ms), timeout) {
                        Ok(v) => match cmd::renewed(&v) {
                            Some(true) => Renewal::Renewed,
                            Some(false) => Renewal::Lost(LostReason::NotHeld),
                            None => Renewal::Failed,
                        },
                        Err(_) => Renewal::Failed,
                    },
                );
                (lost, Some(wd))
            }
        };
        Guard {
            inner,
            kind: lock.kind,
            key: lock.key.clone(),
            owner,
            token,
            lost,
            watchdog,
            done: false,
        }
    }

    /// The fencing token of this hold: greater than every token issued before for this
    /// key (a reentrant hold has the outer hold's token).
    ///
    /// ```no_run
    /// # let client = dlock_client::Client::open("redis://127.0.0.1/")?;
    /// let t1 = client.mutex("k").lock()?.token();
    /// let t2 = client.mutex("k").lock()?.token();
    /// assert!(t2 > t1);
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn token(&self) -> u64 {
        self.token
    }

    /// Asks the server whether this guard's token is still the token of a live hold
    /// (`DLOCK.CHECK`): `false` once the lease ended, the lock was released or
    /// force-released — even before the watchdog notices.
    pub fn check(&self) -> Result<bool> {
        let v = self.inner.run(
            &cmd::check(&self.key, self.token),
            self.inner.opts.command_timeout,
        )?;
        cmd::live(v)
    }

    /// Runs `command` on the lock's server only while this guard's token is live,
    /// atomically (`DLOCK.FENCED key token command…`): the command's own reply, or an
    /// error with [`Error::is_fenced`] when the token is no longer live (the command
    /// did not run). A paused holder's late write is refused where the data lives.
    /// In a cluster the command's keys must share the lock key's slot.
    ///
    /// ```no_run
    /// # let client = dlock_client::Client::open("redis://127.0.0.1/")?;
    /// let guard = client.mutex("{acct:7}:lock").lock()?;
    /// let mut set = redis::cmd("SET");
    /// set.arg("{acct:7}:balance").arg(100);
    /// guard.fenced(&set)?;
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn fenced(&self, command: &Cmd) -> Result<Value> {
        let c = cmd::fenced(&self.key, self.token, command);
        Ok(self.inner.run(&c, self.inner.opts.command_timeout)?)
    }

    /// True once the lock is known to be lost (see [`LostReason`]).
    ///
    /// ```no_run
    /// # let client = dlock_client::Client::open("redis://127.0.0.1/")?;
    /// let guard = client.mutex("k").lock()?;
    /// assert!(!guard.is_lost());
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn is_lost(&self) -> bool {
        self.lost.is_lost()
    }

    /// A signal to block on or await until the lock is lost.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # let client = dlock_client::Client::open("redis://127.0.0.1/")?;
    /// let guard = client.mutex("k").lock()?;
    /// let lost = guard.lost_signal();
    /// assert_eq!(lost.wait_timeout(Duration::from_millis(10)), None);
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn lost_signal(&self) -> LostSignal {
        LostSignal(self.lost.clone())
    }

    /// The owner id the lock is held with.
    ///
    /// ```no_run
    /// # let client = dlock_client::Client::open("redis://127.0.0.1/")?;
    /// let guard = client.mutex("k").lock()?;
    /// assert_eq!(guard.owner(), client.owner());
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// The lock's key.
    ///
    /// ```no_run
    /// # let client = dlock_client::Client::open("redis://127.0.0.1/")?;
    /// assert_eq!(client.mutex("k").lock()?.name(), "k");
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn name(&self) -> &str {
        &self.key
    }

    /// Releases this hold and says what the server found: [`Unlock::Released`],
    /// [`Unlock::StillHeld`] (reentrant) or [`Unlock::Lost`]. Fails only when the server
    /// cannot be reached (the lease then ends by itself).
    ///
    /// ```no_run
    /// # use dlock_client::Unlock;
    /// # let client = dlock_client::Client::open("redis://127.0.0.1/")?;
    /// let guard = client.mutex("k").lock()?;
    /// if guard.unlock()? == Unlock::Lost {
    ///     eprintln!("the lease had ended: the work may have overlapped another holder");
    /// }
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
        let c = cmd::release(self.kind, &self.key, &self.owner);
        let outcome = cmd::unlock(self.inner.run(&c, self.inner.opts.command_timeout))?;
        if outcome == Unlock::Lost {
            self.lost.mark(LostReason::NotHeld);
        }
        Ok(outcome)
    }

    pub(crate) fn lost_state(&self) -> &Arc<LostState> {
        &self.lost
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if !self.done {
            let _ = self.release();
        }
    }
}

/// A countdown latch (Redisson's RCountDownLatch, on the server): waiters are
/// answered by the server in the same pass that opens it. See [`Client::latch`].
#[derive(Clone, Debug)]
pub struct Latch {
    inner: Arc<Inner>,
    key: String,
}

impl Latch {
    /// The key of the latch.
    pub fn name(&self) -> &str {
        &self.key
    }

    /// Creates the latch with `count` (1..2^32) unless one exists: `true` when it was
    /// created, `false` when a latch was there already (nothing changes then).
    pub fn set(&self, count: u64) -> Result<bool> {
        let v = self.inner.run(
            &cmd::latch_set(&self.key, count),
            self.inner.opts.command_timeout,
        )?;
        Ok(cmd::count(v, "DLOCK.LATCHSET")? == 1)
    }

    /// Lowers the count by one; returns the new count (0: the latch opened, or there
    /// was none).
    pub fn count_down(&self) -> Result<u64> {
        let v = self
            .inner
            .run(&cmd::count_down(&self.key), self.inner.opts.command_timeout)?;
        cmd::count(v, "DLOCK.COUNTDOWN")
    }

    /// Waits on the server, in slices of [`Options::wait_slice`], until the latch is
    /// open (`true`; at once when no latch exists) or `timeout` passes (`false`).
    pub fn wait(&self, timeout: Duration) -> Result<bool> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let ms = if left.is_zero() {
                0
            } else {
                cmd::slice_ms(left, self.inner.opts.wait_slice)
            };
            let c = cmd::await_latch(&self.key, ms);
            let v = self.inner.run(
                &c,
                Duration::from_millis(ms) + self.inner.opts.command_timeout,
            )?;
            if cmd::opened(v)? {
                return Ok(true);
            }
            if Instant::now() >= deadline {
                return Ok(false);
            }
        }
    }
}
