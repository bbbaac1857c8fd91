//! The blocking API: [`Client`], [`Lock`], [`RwLock`], [`Guard`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use redis::{Cmd, IntoConnectionInfo, RedisResult, Value};

use crate::core::notice::{Halt, NoticeId, Notices};
use crate::core::{self, Acquire, Endpoint, Grant, Hold, LatchWait, LockSpec, Pool, Release, Step};
use crate::error::{Error, Result};
use crate::lost::{LostSignal, LostState};
use crate::watchdog::Watchdog;
use crate::{cmd, LockKind, Options, Unlock, WaitMode};

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
    pool: Pool<redis::Connection>,
    /// The Sentinels that name the master ([`Client::sentinel`]), or `None`.
    sentinel: Option<crate::sentinel::Source>,
    /// Whether tries that give up still send `DLOCK.CANCEL`.
    cancel: core::Cancel,
    /// The holds of this client and its subscription (docs/clients.md, rule 2).
    pub(crate) notices: Arc<Notices>,
    /// The subscriber thread ([`crate::subscriber`]), once started.
    subscriber: Mutex<Option<JoinHandle<()>>>,
    /// The background threads: `DLOCK.CANCEL`s of waits that gave up, and requests of
    /// waits given up at their deadline ([`Inner::run_keep_until`]).
    background: Mutex<Vec<JoinHandle<()>>>,
    /// Set by [`Client::close`]: every command fails from then on.
    closed: AtomicBool,
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
        let (r, con) = self.run_keep(cmd, timeout);
        if let Some(con) = con {
            self.pool.give_back(con, &r);
        }
        r
    }

    /// Like [`Inner::run`], but hands the connection back to the caller (unless it
    /// failed), for a command that must follow on the same connection.
    pub(crate) fn run_keep(
        &self,
        cmd: &Cmd,
        timeout: Duration,
    ) -> (RedisResult<Value>, Option<redis::Connection>) {
        let timeout = timeout.max(Duration::from_millis(1));
        if let Err(e) = self.check_open() {
            return (Err(e), None);
        }
        if self.sentinel.as_ref().is_some_and(|s| s.moved()) {
            self.pool.clear(); // connections to the old master
        }
        let (mut con, pooled) = match self.pool.take() {
            Some(c) => (c, true),
            None => match self.connect(timeout) {
                Ok(c) => (c, false),
                Err(e) => return (Err(e), None),
            },
        };
        let mut r = query_on(&mut con, cmd, timeout);
        if let (Err(e), Some(_)) = (&r, &self.sentinel) {
            if !core::reusable(e) {
                // Perhaps a failover: the idle connections lead to the old master.
                self.pool.clear();
                self.notices.master_moved();
                if pooled && core::is_read_only(e) {
                    // Not run (a replica refused it): once more, on the master now.
                    match self.connect(timeout) {
                        Ok(c) => {
                            con = c;
                            r = query_on(&mut con, cmd, timeout);
                        }
                        Err(e) => return (Err(e), None),
                    }
                }
            }
        }
        match &r {
            Err(e) if !core::reusable(e) => (r, None),
            _ => (r, Some(con)),
        }
    }

    /// Runs `cmd` on the connection in `slot` (made when empty), and once more on a
    /// fresh one when that fails on the connection; a failed connection leaves the slot.
    /// For the subscriber's checks, which keep their own connection so that no pooled
    /// one (a `BIND` hold's, say) runs them.
    pub(crate) fn run_in(
        &self,
        slot: &mut Option<redis::Connection>,
        cmd: &Cmd,
        timeout: Duration,
    ) -> RedisResult<Value> {
        let mut last = None;
        for _ in 0..2 {
            let mut con = match slot.take() {
                Some(c) => c,
                None => self.connect(timeout)?,
            };
            let r = query_on(&mut con, cmd, timeout);
            match r {
                Err(e) if !core::reusable(&e) => last = Some(e),
                r => {
                    *slot = Some(con);
                    return r;
                }
            }
        }
        Err(last.unwrap_or_else(core::pinned_gone))
    }

    /// Runs `cmd` on a new connection (kept in the pool afterwards when it is fine).
    fn run_fresh(&self, cmd: &Cmd, timeout: Duration) -> RedisResult<Value> {
        let mut con = self.connect(timeout)?;
        let r = query_on(&mut con, cmd, timeout);
        self.pool.give_back(con, &r);
        r
    }

    /// Releases a hold with `release` (docs/clients.md, rule 3): once, then once more on
    /// a fresh connection after a connection failure; the outcome (never an error), and
    /// what it means for the hold's lost state.
    pub(crate) fn unlock(&self, release: &Cmd, lost: &LostState) -> Unlock {
        core::settle(self.release_outcome(release), lost)
    }

    /// The outcome of `release` (once, then once more on a fresh connection after a
    /// connection failure), with no effect on a hold's state (RedLock decides by
    /// majority).
    pub(crate) fn release_outcome(&self, release: &Cmd) -> Unlock {
        let t = self.opts.command_timeout;
        match core::release_answer(self.run(release, t), false) {
            Release::Done(u) => u,
            Release::Retry => match core::release_answer(self.run_fresh(release, t), true) {
                Release::Done(u) => u,
                Release::Retry => Unlock::Unknown,
            },
        }
    }

    /// Fails once the client is closed.
    fn check_open(&self) -> RedisResult<()> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotConnected,
                "the dlock client is closed (Client::close): open a new one",
            )
            .into());
        }
        Ok(())
    }

    /// Registers a hold for prompt notice (docs/clients.md, rule 2), starting the
    /// client's subscriber thread if none runs. `halt` stops its watchdog on close.
    pub(crate) fn watch(
        self: &Arc<Self>,
        key: &str,
        token: u64,
        lost: &Arc<LostState>,
        halt: Option<Halt>,
    ) -> NoticeId {
        let mut sub = self.subscriber.lock().unwrap_or_else(|e| e.into_inner());
        let alive = sub.as_ref().is_some_and(|h| !h.is_finished());
        let (id, start) = self.notices.watch(key, token, lost.clone(), halt, alive);
        if start {
            match crate::subscriber::spawn(self) {
                Ok(h) => *sub = Some(h),
                // No thread: no notices; the hold's lease clock still decides.
                Err(_) => self.notices.stopped(),
            }
        }
        id
    }

    /// Sends the `DLOCK.CANCEL` of a wait that gave up in the background (bounded by
    /// `timeout`), so the caller's deadline is kept (docs/clients.md, rule 4).
    pub(crate) fn cancel_later(self: &Arc<Self>, cancel: Cmd, timeout: Duration) {
        if !self.cancel.wanted() || self.closed.load(Ordering::SeqCst) {
            return;
        }
        let inner = self.clone();
        let spawned = std::thread::Builder::new()
            .name("dlock-cancel".into())
            .spawn(move || inner.give_up(&cancel, timeout));
        if let Ok(h) = spawned {
            self.track(h);
        }
    }

    /// Keeps a background thread's handle, for [`Client::close`] to join.
    fn track(&self, h: JoinHandle<()>) {
        let mut bg = self.background.lock().unwrap_or_else(|e| e.into_inner());
        bg.retain(|h| !h.is_finished());
        bg.push(h);
    }

    /// [`Client::close`].
    fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        self.notices.close();
        self.pool.clear();
        let sub = self
            .subscriber
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        let bg = std::mem::take(&mut *self.background.lock().unwrap_or_else(|e| e.into_inner()));
        let me = std::thread::current().id();
        for h in sub.into_iter().chain(bg) {
            if h.thread().id() != me {
                let _ = h.join();
            }
        }
    }

    /// [`Inner::run_keep`] on a helper thread, given up at `until` precisely: a socket's
    /// own timeout fires late by up to an eighth of its length (the kernel's timer wheel
    /// puts long timeouts in coarse buckets: a 3 s one ~250 ms late where the tick is
    /// 4 ms), which would break a caller's deadline. The thread ends with the socket's
    /// timeout; a grant that answers only after `until` is let go with `undo` on its
    /// connection, so no hold is left that nobody knows of.
    pub(crate) fn run_keep_until(
        self: &Arc<Self>,
        cmd: &Cmd,
        timeout: Duration,
        until: Instant,
        undo: Cmd,
    ) -> (RedisResult<Value>, Option<redis::Connection>) {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let (inner, c) = (self.clone(), cmd.clone());
        let spawned = std::thread::Builder::new()
            .name("dlock-wait".into())
            .spawn(move || {
                let (r, con) = inner.run_keep(&c, timeout);
                if let Err(std::sync::mpsc::TrySendError::Disconnected((r, con))) =
                    tx.try_send((r, con))
                {
                    if let (Ok(Value::Int(_)), Some(mut con)) = (r, con) {
                        let _ = query_on(&mut con, &undo, inner.opts.command_timeout);
                    }
                }
            });
        match spawned {
            Ok(h) => self.track(h),
            Err(_) => return self.run_keep(cmd, timeout),
        }
        match rx.recv_timeout(until.saturating_duration_since(Instant::now())) {
            Ok(answer) => answer,
            Err(_) => (
                Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "no reply by the wait's deadline",
                )
                .into()),
                None,
            ),
        }
    }

    /// A new connection, handshake (AUTH, SELECT) done under `timeout`.
    pub(crate) fn connect(&self, timeout: Duration) -> RedisResult<redis::Connection> {
        self.check_open()?;
        let t = self
            .opts
            .connect_timeout
            .min(timeout)
            .max(Duration::from_millis(1));
        let mut c = match &self.sentinel {
            Some(s) => s.master()?.get_connection_with_timeout(t)?,
            None => self.redis.get_connection_with_timeout(t)?,
        };
        c.set_read_timeout(Some(t))?;
        c.set_write_timeout(Some(t))?;
        for s in &self.setup {
            s.query::<()>(&mut c)?;
        }
        Ok(c)
    }

    pub(crate) fn owner(&self) -> String {
        thread_owner(&self.prefix)
    }

    /// Sends the `DLOCK.CANCEL` of a try that gave up, best effort: its answer and
    /// any failure are ignored (a module without CANCEL is not asked again).
    pub(crate) fn give_up(&self, cancel: &Cmd, timeout: Duration) {
        if self.cancel.wanted() {
            self.cancel.answered(&self.run(cancel, timeout));
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // The last client handle and guard are gone: the subscriber stops on its own.
        self.notices.close();
    }
}

/// Runs `cmd` on `con` with `timeout` for writing and reading.
fn query_on(con: &mut redis::Connection, cmd: &Cmd, timeout: Duration) -> RedisResult<Value> {
    let timeout = timeout.max(Duration::from_millis(1));
    con.set_read_timeout(Some(timeout))?;
    con.set_write_timeout(Some(timeout))?;
    cmd.query(con)
}

/// `<prefix>:<thread>`: the owner id of the calling thread.
pub(crate) fn thread_owner(prefix: &str) -> String {
    format!("{prefix}:{}", crate::thread_tag())
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
        opts.check()?;
        let e = Endpoint::open(url)?;
        Ok(Client {
            inner: Arc::new(Inner {
                redis: e.client,
                prefix: opts.new_prefix(),
                opts,
                server: e.server,
                setup: e.setup,
                pool: Pool::new(),
                sentinel: None,
                cancel: core::Cancel::default(),
                notices: Arc::default(),
                subscriber: Mutex::new(None),
                background: Mutex::new(Vec::new()),
                closed: AtomicBool::new(false),
            }),
        })
    }

    /// A client for the master of `service` as named by the Sentinels at `sentinels`
    /// (`redis://host:port/` each), with default [`Options`]. Each new connection asks
    /// the Sentinels for the current master, so the client follows a failover. Masters
    /// are connected to without
    /// credentials, on database 0. Before a command, at most once a second, the client
    /// asks the Sentinels again and drops its idle connections when the master moved;
    /// a command refused with `READONLY` (by a demoted master) is sent once more to the
    /// new one; a command cut off by a dying master fails (try again).
    ///
    /// ```no_run
    /// let client = dlock_client::Client::sentinel(
    ///     ["redis://127.0.0.1:26379/", "redis://127.0.0.1:26380/"],
    ///     "mymaster",
    /// )?;
    /// let guard = client.mutex("orders").lock()?;
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn sentinel<U: IntoConnectionInfo>(
        sentinels: impl IntoIterator<Item = U>,
        service: &str,
    ) -> Result<Client> {
        Self::sentinel_with_options(sentinels, service, Options::default())
    }

    /// [`Client::sentinel`] with [`Options`].
    pub fn sentinel_with_options<U: IntoConnectionInfo>(
        sentinels: impl IntoIterator<Item = U>,
        service: &str,
        opts: Options,
    ) -> Result<Client> {
        opts.check()?;
        let (source, e) = crate::sentinel::source(sentinels, service)?;
        Ok(Client {
            inner: Arc::new(Inner {
                redis: e.client,
                prefix: opts.new_prefix(),
                opts,
                server: e.server,
                setup: e.setup,
                pool: Pool::new(),
                sentinel: Some(source),
                cancel: core::Cancel::default(),
                notices: Arc::default(),
                subscriber: Mutex::new(None),
                background: Mutex::new(Vec::new()),
                closed: AtomicBool::new(false),
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

    /// Closes the client (and every clone of it): stops the watchdogs of its holds and
    /// its subscriber thread (both joined before this returns), drops its connections;
    /// every command through it fails from then on. Holds are not released: their
    /// leases end on the server, and their lost signals fire then (only those of holds
    /// still held). Idempotent. Without it, the client's threads end when the last
    /// clone and guard are dropped; none keeps the process alive.
    ///
    /// ```no_run
    /// let client = dlock_client::Client::open("redis://127.0.0.1/")?;
    /// let guard = client.mutex("k").lock()?;
    /// guard.unlock()?;
    /// client.close();
    /// client.close(); // nothing more happens
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn close(&self) {
        self.inner.close();
    }

    client_methods!(
        Lock,
        RwLock,
        Latch,
        "# let client = dlock_client::Client::open(\"redis://127.0.0.1/\")?;",
        "",
        "# Ok::<(), dlock_client::Error>(())"
    );
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
    rw_handle_methods!(
        Lock,
        "# let client = dlock_client::Client::open(\"redis://127.0.0.1/\")?;",
        "",
        "# Ok::<(), dlock_client::Error>(())"
    );
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
    spec: LockSpec,
}

impl Lock {
    lock_handle_methods!(Lock, "dlock_client::Client");

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
    /// (the guard then reports [`LostReason::LeaseEnded`] when it runs out). A zero
    /// lease (explicit, or [`Options::watchdog_lease`]) is refused with
    /// [`Error::Invalid`] before anything is sent.
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

    /// Drives the shared acquire machine ([`core::Acquire`]) over this client's
    /// connections.
    pub(crate) fn acquire(
        &self,
        wait: Option<Duration>,
        lease: Option<Duration>,
    ) -> Result<Option<Guard>> {
        let opts = &self.inner.opts;
        let mut m = Acquire::new(&self.spec, self.owner(), opts, wait, lease, Instant::now())?;
        self.inner.check_open()?;
        let first = m.start(Instant::now());
        self.drive(&mut m, first, None, lease)
    }

    /// Runs `m` from `step`; `sub` is the subscription once [`Step::Subscribe`] made
    /// it (kept for the rest of the wait: dropping it unsubscribes).
    fn drive(
        &self,
        m: &mut Acquire<'_>,
        mut step: Step,
        mut sub: Option<&mut redis::PubSub<'_>>,
        lease: Option<Duration>,
    ) -> Result<Option<Guard>> {
        // The connection of the last Send, kept while a SendPinned may follow.
        let mut last: Option<redis::Connection> = None;
        let out = self.drive_on(m, &mut step, &mut sub, lease, &mut last);
        if let Some(con) = last {
            self.inner.pool.give_back(con, &Ok::<(), _>(()));
        }
        out
    }

    fn drive_on(
        &self,
        m: &mut Acquire<'_>,
        step: &mut Step,
        sub: &mut Option<&mut redis::PubSub<'_>>,
        lease: Option<Duration>,
        last: &mut Option<redis::Connection>,
    ) -> Result<Option<Guard>> {
        loop {
            let now = std::mem::replace(step, Step::Done(None));
            if !matches!(now, Step::SendPinned(..)) {
                if let Some(con) = last.take() {
                    self.inner.pool.give_back(con, &Ok::<(), _>(()));
                }
            }
            *step = match now {
                Step::Send(c, timeout) => {
                    let (r, con) = match m.hard_deadline() {
                        Some(until) => {
                            self.inner
                                .run_keep_until(&c, timeout, until, m.late_grant_release())
                        }
                        None => self.inner.run_keep(&c, timeout),
                    };
                    *last = con;
                    m.on_result(r, Instant::now())?
                }
                Step::SendPinned(c, timeout) => {
                    let r = match last.as_mut() {
                        Some(con) => query_on(con, &c, timeout),
                        None => Err(core::pinned_gone()),
                    };
                    if matches!(&r, Err(e) if !core::reusable(e)) {
                        *last = None;
                    }
                    m.on_result(r, Instant::now())?
                }
                Step::Subscribe(channel, timeout) => {
                    let mut con = self.inner.connect(timeout)?;
                    let mut ps = con.as_pubsub();
                    ps.subscribe(channel)?;
                    let next = m.on_subscribed(Instant::now());
                    return self.drive(m, next, Some(&mut ps), lease);
                }
                Step::Listen(timeout) => {
                    if let Some(ps) = sub.as_deref_mut() {
                        ps.set_read_timeout(Some(timeout))?;
                        match ps.get_message() {
                            Ok(_) => {}
                            Err(e) if e.is_timeout() => {}
                            Err(e) => return Err(e.into()),
                        }
                    }
                    m.on_notice(Instant::now())
                }
                Step::Pause(d) => {
                    std::thread::sleep(d);
                    m.on_paused(Instant::now())
                }
                Step::GiveUp(c, timeout) => {
                    self.inner.cancel_later(c, timeout);
                    return m.outcome().map(|_| None);
                }
                Step::Done(None) => return m.outcome().map(|_| None),
                Step::Done(Some(g)) => return Ok(Some(Guard::new(self, g, lease))),
            };
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
        let c = self.spec.force_release();
        core::force_released(self.inner.run(&c, self.inner.opts.command_timeout)?)
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
    hold: Hold,
    watchdog: Option<Watchdog>,
    /// Its registration for prompt notice.
    notice: NoticeId,
    done: bool,
}

impl Guard {
    fn new(lock: &Lock, grant: Grant, lease: Option<Duration>) -> Guard {
        let inner = lock.inner.clone();
        let hold = Hold::new(&lock.spec, grant, lease, &inner.opts);
        let watchdog = hold.watch(lease, &inner.opts).map(|(w, c)| {
            let i2 = inner.clone();
            Watchdog::spawn(w, move |timeout| core::renewal(i2.run(&c, timeout)))
        });
        let halt = watchdog.as_ref().map(Watchdog::halt);
        let notice = inner.watch(&hold.key, hold.token, &hold.lost, halt);
        Guard {
            inner,
            hold,
            watchdog,
            notice,
            done: false,
        }
    }

    /// Asks the server whether this guard's token is still the token of a live hold
    /// (`DLOCK.CHECK`): `false` once the lease ended, the lock was released or
    /// force-released — even before the watchdog notices.
    pub fn check(&self) -> Result<bool> {
        let v = self
            .inner
            .run(&self.hold.check(), self.inner.opts.command_timeout)?;
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
        let c = self.hold.fenced(command);
        Ok(self.inner.run(&c, self.inner.opts.command_timeout)?)
    }

    guard_methods!(
        "# let client = dlock_client::Client::open(\"redis://127.0.0.1/\")?;",
        "",
        "# Ok::<(), dlock_client::Error>(())"
    );

    /// Releases this hold and says what the server found (docs/clients.md, rule 3):
    /// [`Unlock::Released`], [`Unlock::StillHeld`] (reentrant), [`Unlock::Lost`], or
    /// [`Unlock::Unknown`] when the release failed on its connection and once more on a
    /// fresh one (the lease then ends by itself). Whatever the answer, the watchdog has
    /// stopped: the hold is never renewed again. Never an error (the `Result` is kept
    /// for the callers' `?`).
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
        Ok(self.release())
    }

    fn release(&mut self) -> Unlock {
        self.done = true;
        if let Some(mut wd) = self.watchdog.take() {
            wd.stop();
        }
        // Our own `released` notice is no news.
        self.inner.notices.unwatch(self.notice);
        self.inner.unlock(&self.hold.release(), &self.hold.lost)
    }

    pub(crate) fn lost_state(&self) -> &Arc<LostState> {
        &self.hold.lost
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if !self.done {
            self.release();
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
        let m = LatchWait::new(&self.key, timeout, &self.inner.opts, Instant::now());
        loop {
            let (c, t) = m.next(Instant::now());
            let r = self.inner.run(&c, t);
            if let Some(open) = m.on_result(r, Instant::now())? {
                return Ok(open);
            }
        }
    }
}
