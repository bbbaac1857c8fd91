//! The async (tokio) API, mirroring the blocking one: [`AsyncClient`], [`AsyncLock`],
//! [`AsyncRwLock`], [`AsyncGuard`], [`AsyncMultiLock`] and [`AsyncRedLock`].
//!
//! Owner ids are `<uuid>:task-<id>` inside a tokio task (so two tasks on one worker
//! thread are different owners, and a task stays the same owner when it moves between
//! threads), `<uuid>:<thread>` outside one. Each command runs on a connection of the
//! client's own pool, used by one command at a time, so a server-side `WAIT` never
//! holds up other commands. Use an `AsyncClient` within one tokio runtime (its
//! connections are driven by tasks of the runtime that opened them).
//!
//! ```no_run
//! use dlock_client::aio::AsyncClient;
//!
//! # #[tokio::main] async fn main() -> dlock_client::Result<()> {
//! let client = AsyncClient::open("redis://127.0.0.1:6379/")?;
//! let guard = client.mutex("orders").lock().await?;
//! println!("token {}", guard.token());
//! guard.unlock().await?;
//! # Ok(()) }
//! ```

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Cmd, IntoConnectionInfo, RedisError, RedisResult, Value};
use tokio::task::AbortHandle;

use crate::core::notice::{Halt, NoticeId, Notices};
use crate::core::{self, Acquire, Endpoint, Grant, Hold, LatchWait, LockSpec, Pool, Release, Step};
use crate::error::Result;
use crate::lost::{LostSignal, LostState};
use crate::watchdog::AsyncWatchdog;
use crate::{cmd, LockKind, Options, Unlock, WaitMode};

mod multi;
mod redlock;
mod subscriber;

pub use multi::{AsyncMultiGuard, AsyncMultiLock};
pub use redlock::{AsyncRedLock, AsyncRedLockGuard};

struct AsyncInner {
    /// The server, connected to the same way as by the blocking client.
    endpoint: Endpoint,
    opts: Options,
    prefix: String,
    pool: Pool<MultiplexedConnection>,
    /// The Sentinels that name the master ([`AsyncClient::sentinel`]), or `None`.
    sentinel: Option<crate::sentinel::AsyncSource>,
    /// Whether tries that give up still send `DLOCK.CANCEL`.
    cancel: core::Cancel,
    /// The holds of this client and its subscription (docs/clients.md, rule 2).
    notices: Arc<Notices>,
    /// The subscriber task ([`subscriber`]), once started.
    subscriber: Mutex<Option<AbortHandle>>,
    /// The background `DLOCK.CANCEL`s of waits that gave up.
    background: Mutex<Vec<AbortHandle>>,
    /// Set by [`AsyncClient::close`]: every command fails from then on.
    closed: AtomicBool,
}

impl std::fmt::Debug for AsyncInner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncClient")
            .field("prefix", &self.prefix)
            .field("opts", &self.opts)
            .finish_non_exhaustive()
    }
}

fn closed(what: &str) -> RedisError {
    std::io::Error::new(
        std::io::ErrorKind::ConnectionAborted,
        format!("{what} closed"),
    )
    .into()
}

fn timed_out(what: &str) -> RedisError {
    std::io::Error::new(std::io::ErrorKind::TimedOut, format!("{what} timed out")).into()
}

impl AsyncInner {
    async fn run(&self, cmd: &Cmd, timeout: Duration) -> RedisResult<Value> {
        let (r, con) = self.run_keep(cmd, timeout).await;
        if let Some(con) = con {
            self.pool.give_back(con, &r);
        }
        r
    }

    /// Like [`AsyncInner::run`], but hands the connection back to the caller (unless
    /// it failed), for a command that must follow on the same connection.
    async fn run_keep(
        &self,
        cmd: &Cmd,
        timeout: Duration,
    ) -> (RedisResult<Value>, Option<MultiplexedConnection>) {
        let timeout = timeout.max(Duration::from_millis(1));
        if let Err(e) = self.check_open() {
            return (Err(e), None);
        }
        if let Some(s) = &self.sentinel {
            if s.moved().await {
                self.pool.clear(); // connections to the old master
                self.notices.master_moved();
            }
        }
        let (mut con, pooled) = match self.pool.take() {
            Some(c) => (c, true),
            None => match self.connect(timeout).await {
                Ok(c) => (c, false),
                Err(e) => return (Err(e), None),
            },
        };
        let mut r = query_on(&mut con, cmd, timeout).await;
        if let (Err(e), Some(_)) = (&r, &self.sentinel) {
            if !core::reusable(e) {
                // Perhaps a failover: the idle connections lead to the old master.
                self.pool.clear();
                self.notices.master_moved();
                if pooled && core::is_read_only(e) {
                    // Not run (a replica refused it): once more, on the master now.
                    match self.connect(timeout).await {
                        Ok(c) => {
                            con = c;
                            r = query_on(&mut con, cmd, timeout).await;
                        }
                        Err(e) => return (Err(e), None),
                    }
                }
            }
        }
        match &r {
            Err(e) if !core::reusable(e) => (r, None), // dropped
            _ => (r, Some(con)),
        }
    }

    /// Runs `cmd` on `con` (the subscriber's checks' own connection, so that no pooled
    /// one — a `BIND` hold's, say — runs them), and once more on a fresh connection when
    /// that fails on the connection (`Err` second: the first connection failed).
    async fn run_on(
        &self,
        con: Option<MultiplexedConnection>,
        cmd: &Cmd,
        timeout: Duration,
    ) -> (RedisResult<Value>, bool) {
        if let Some(mut con) = con {
            match query_on(&mut con, cmd, timeout).await {
                Err(e) if !core::reusable(&e) => {}
                r => return (r, false),
            }
        }
        (self.run_fresh(cmd, timeout).await, true)
    }

    /// Runs `cmd` on a new connection (kept in the pool afterwards when it is fine).
    async fn run_fresh(&self, cmd: &Cmd, timeout: Duration) -> RedisResult<Value> {
        let mut con = self.connect(timeout).await?;
        let r = query_on(&mut con, cmd, timeout).await;
        self.pool.give_back(con, &r);
        r
    }

    /// Releases a hold with `release` (docs/clients.md, rule 3): once, then once more on
    /// a fresh connection after a connection failure; the outcome (never an error), and
    /// what it means for the hold's lost state.
    pub(crate) async fn unlock(&self, release: &Cmd, lost: &LostState) -> Unlock {
        core::settle(self.release_outcome(release).await, lost)
    }

    /// The outcome of `release` (once, then once more on a fresh connection after a
    /// connection failure), with no effect on a hold's state (RedLock decides by
    /// majority).
    pub(crate) async fn release_outcome(&self, release: &Cmd) -> Unlock {
        let t = self.opts.command_timeout;
        match core::release_answer(self.run(release, t).await, false) {
            Release::Done(u) => u,
            Release::Retry => match core::release_answer(self.run_fresh(release, t).await, true) {
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
                "the dlock client is closed (AsyncClient::close): open a new one",
            )
            .into());
        }
        Ok(())
    }

    /// Registers a hold for prompt notice (docs/clients.md, rule 2), starting the
    /// client's subscriber task (on the current runtime) if none runs.
    fn watch(
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
            match tokio::runtime::Handle::try_current() {
                Ok(rt) => {
                    let task = subscriber::run(Arc::downgrade(self), self.notices.clone());
                    *sub = Some(rt.spawn(task).abort_handle());
                }
                // No runtime: no notices; the hold's lease clock still decides.
                Err(_) => self.notices.stopped(),
            }
        }
        id
    }

    /// Sends the `DLOCK.CANCEL` of a wait that gave up from a task of the current
    /// runtime (bounded by `timeout`), so the caller's deadline is kept.
    fn cancel_later(self: &Arc<Self>, cancel: Cmd, timeout: Duration) {
        if !self.cancel.wanted() || self.closed.load(Ordering::SeqCst) {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let inner = self.clone();
        let task = rt.spawn(async move { inner.give_up(&cancel, timeout).await });
        let mut bg = self.background.lock().unwrap_or_else(|e| e.into_inner());
        bg.retain(|h| !h.is_finished());
        bg.push(task.abort_handle());
    }

    /// [`AsyncClient::close`].
    fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        self.notices.close();
        self.pool.clear();
        if let Some(h) = self
            .subscriber
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            h.abort();
        }
        for h in std::mem::take(&mut *self.background.lock().unwrap_or_else(|e| e.into_inner())) {
            h.abort();
        }
    }

    /// The settings of this client's multiplexed connections: redis-rs' own response
    /// timeout (500 ms by default) is lifted — each command gets the client's reply
    /// timeout instead ([`Options::command_timeout`], which the `WAIT` slices fit).
    fn connection_config(&self, connect: Duration) -> AsyncConnectionConfig {
        AsyncConnectionConfig::new()
            .set_response_timeout(None)
            .set_connection_timeout(Some(connect))
    }

    /// A new connection, handshake (AUTH, SELECT: [`Endpoint::setup`]) done under
    /// `timeout`, as in the blocking client.
    async fn connect(&self, timeout: Duration) -> RedisResult<MultiplexedConnection> {
        self.check_open()?;
        let t = self
            .opts
            .connect_timeout
            .min(timeout)
            .max(Duration::from_millis(1));
        let config = self.connection_config(t);
        let handshake = async {
            let mut c = match &self.sentinel {
                Some(s) => {
                    s.master()
                        .await?
                        .get_multiplexed_async_connection_with_config(&config)
                        .await?
                }
                None => {
                    self.endpoint
                        .client
                        .get_multiplexed_async_connection_with_config(&config)
                        .await?
                }
            };
            for s in &self.endpoint.setup {
                s.query_async::<()>(&mut c).await?;
            }
            Ok(c)
        };
        tokio::time::timeout(t, handshake)
            .await
            .map_err(|_| timed_out("connect"))?
    }

    /// A pub/sub connection (the redis crate's handshake, with AUTH and SELECT),
    /// under `timeout`.
    async fn pubsub(&self, timeout: Duration) -> RedisResult<redis::aio::PubSub> {
        self.check_open()?;
        let t = timeout.max(Duration::from_millis(1));
        let connect = async {
            match &self.sentinel {
                Some(s) => s.master().await?.get_async_pubsub().await,
                None => self.endpoint.pubsub.get_async_pubsub().await,
            }
        };
        tokio::time::timeout(t, connect)
            .await
            .map_err(|_| timed_out("pub/sub connect"))?
    }

    /// A pub/sub connection subscribed to `channel`, under `timeout`.
    async fn subscribe(
        &self,
        channel: String,
        timeout: Duration,
    ) -> RedisResult<redis::aio::PubSub> {
        let t = timeout.max(Duration::from_millis(1));
        let subscribed = async {
            let mut ps = self.pubsub(t).await?;
            ps.subscribe(channel).await?;
            Ok(ps)
        };
        tokio::time::timeout(t, subscribed)
            .await
            .map_err(|_| timed_out("subscribe"))?
    }

    fn owner(&self) -> String {
        task_owner(&self.prefix)
    }

    /// Sends the `DLOCK.CANCEL` of a try that gave up, best effort: its answer and
    /// any failure are ignored (a module without CANCEL is not asked again).
    async fn give_up(&self, cancel: &Cmd, timeout: Duration) {
        if self.cancel.wanted() {
            self.cancel.answered(&self.run(cancel, timeout).await);
        }
    }
}

/// Gives up the queue places of an acquire whose future is dropped before it ends
/// (`tokio::time::timeout`, `select!`, an aborted task): its `Drop` sends
/// `DLOCK.CANCEL` from a task of the current runtime, unless [`Abandon::finished`].
struct Abandon {
    inner: Arc<AsyncInner>,
    cancel: Option<Cmd>,
}

impl Abandon {
    fn new(inner: &Arc<AsyncInner>, key: &str, owner: &str) -> Abandon {
        Abandon {
            inner: inner.clone(),
            cancel: Some(cmd::cancel(key, owner)),
        }
    }

    /// The acquire ended by itself (granted, given up, or failed).
    fn finished(mut self) {
        self.cancel = None;
    }
}

impl Drop for Abandon {
    fn drop(&mut self) {
        if let Some(c) = self.cancel.take() {
            self.inner.cancel_later(c, self.inner.opts.command_timeout);
        }
    }
}

/// Runs `cmd` on `con` within `timeout` (a timeout is an error; drop the connection).
async fn query_on(
    con: &mut MultiplexedConnection,
    cmd: &Cmd,
    timeout: Duration,
) -> RedisResult<Value> {
    let timeout = timeout.max(Duration::from_millis(1));
    match tokio::time::timeout(timeout, cmd.query_async::<Value>(con)).await {
        Ok(r) => r,
        Err(_) => Err(timed_out("command")),
    }
}

/// `<prefix>:task-<id>` inside a tokio task, `<prefix>:<thread>` outside one.
fn task_owner(prefix: &str) -> String {
    match tokio::task::try_id() {
        Some(id) => format!("{prefix}:task-{id}"),
        None => format!("{prefix}:{}", crate::thread_tag()),
    }
}

/// The async counterpart of [`crate::Client`]. Cheap to clone.
///
/// ```no_run
/// # #[tokio::main] async fn main() -> dlock_client::Result<()> {
/// use dlock_client::aio::AsyncClient;
/// let client = AsyncClient::open("redis://127.0.0.1/")?;
/// let g = client.fair("printer").lock().await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct AsyncClient {
    inner: Arc<AsyncInner>,
}

impl AsyncClient {
    /// A client for the server at `url`, with default [`Options`]. Does not connect yet.
    ///
    /// ```
    /// let client = dlock_client::aio::AsyncClient::open("redis://127.0.0.1:6379/")?;
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn open(url: impl IntoConnectionInfo) -> Result<AsyncClient> {
        Self::with_options(url, Options::default())
    }

    /// A client with the given [`Options`].
    ///
    /// ```
    /// # use std::time::Duration;
    /// use dlock_client::{aio::AsyncClient, Options};
    /// let opts = Options::default().watchdog_lease(Duration::from_secs(9));
    /// let client = AsyncClient::with_options("redis://127.0.0.1/", opts)?;
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn with_options(url: impl IntoConnectionInfo, opts: Options) -> Result<AsyncClient> {
        opts.check()?;
        Ok(AsyncClient {
            inner: Arc::new(AsyncInner {
                endpoint: Endpoint::open(url)?,
                prefix: opts.new_prefix(),
                opts,
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

    /// The async counterpart of [`crate::Client::sentinel`]: a client for the master
    /// of `service` as named by the Sentinels at `sentinels`, following failovers.
    ///
    /// ```no_run
    /// # async fn f() -> dlock_client::Result<()> {
    /// let client = dlock_client::aio::AsyncClient::sentinel(
    ///     ["redis://127.0.0.1:26379/"],
    ///     "mymaster",
    /// )?;
    /// let g = client.mutex("orders").lock().await?;
    /// # Ok(()) }
    /// ```
    pub fn sentinel<U: IntoConnectionInfo>(
        sentinels: impl IntoIterator<Item = U>,
        service: &str,
    ) -> Result<AsyncClient> {
        Self::sentinel_with_options(sentinels, service, Options::default())
    }

    /// [`AsyncClient::sentinel`] with [`Options`].
    pub fn sentinel_with_options<U: IntoConnectionInfo>(
        sentinels: impl IntoIterator<Item = U>,
        service: &str,
        opts: Options,
    ) -> Result<AsyncClient> {
        opts.check()?;
        let (source, endpoint) = crate::sentinel::async_source(sentinels, service)?;
        Ok(AsyncClient {
            inner: Arc::new(AsyncInner {
                endpoint,
                prefix: opts.new_prefix(),
                opts,
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

    /// The owner id of the calling task (or thread, outside a task).
    ///
    /// ```
    /// let client = dlock_client::aio::AsyncClient::open("redis://127.0.0.1/")?;
    /// assert!(client.owner().contains(':'));
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn owner(&self) -> String {
        self.inner.owner()
    }

    /// The client's settings.
    pub fn options(&self) -> &Options {
        &self.inner.opts
    }

    /// Closes the client (and every clone of it), as [`crate::Client::close`]: aborts
    /// the watchdogs of its holds, its subscriber task and its background `CANCEL`s,
    /// drops its connections; every command through it fails from then on. Holds are
    /// not released (their leases end on the server; their lost signals fire then).
    /// Idempotent.
    ///
    /// ```no_run
    /// # async fn f() -> dlock_client::Result<()> {
    /// let client = dlock_client::aio::AsyncClient::open("redis://127.0.0.1/")?;
    /// client.mutex("k").lock().await?.unlock().await?;
    /// client.close();
    /// client.close();
    /// # Ok(()) }
    /// ```
    pub fn close(&self) {
        self.inner.close();
    }

    client_methods!(
        AsyncLock,
        AsyncRwLock,
        AsyncLatch,
        "# async fn f(client: dlock_client::aio::AsyncClient) -> dlock_client::Result<()> {",
        ".await",
        "# Ok(()) }"
    );
}

/// The async counterpart of [`crate::RwLock`].
///
/// ```no_run
/// # async fn f(client: dlock_client::aio::AsyncClient) -> dlock_client::Result<()> {
/// let cfg = client.rw("config");
/// let w = cfg.write().lock().await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct AsyncRwLock {
    client: AsyncClient,
    key: String,
}

impl AsyncRwLock {
    rw_handle_methods!(
        AsyncLock,
        "# async fn f(client: dlock_client::aio::AsyncClient) -> dlock_client::Result<()> {",
        ".await",
        "# Ok(()) }"
    );
}

/// The async counterpart of [`crate::Lock`].
///
/// ```no_run
/// # use std::time::Duration;
/// # async fn f(client: dlock_client::aio::AsyncClient) -> dlock_client::Result<()> {
/// let lock = client.mutex("invoices");
/// if let Some(g) = lock.try_lock(Duration::from_millis(500), None).await? {
///     g.unlock().await?;
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct AsyncLock {
    inner: Arc<AsyncInner>,
    spec: LockSpec,
}

impl AsyncLock {
    lock_handle_methods!(AsyncLock, "dlock_client::aio::AsyncClient");

    /// Waits until granted (server-side `WAIT` in slices), watchdog lease.
    ///
    /// ```no_run
    /// # async fn f(client: dlock_client::aio::AsyncClient) -> dlock_client::Result<()> {
    /// let g = client.mutex("orders").lock().await?;
    /// # Ok(()) }
    /// ```
    pub async fn lock(&self) -> Result<AsyncGuard> {
        loop {
            if let Some(g) = self.acquire(None, None).await? {
                return Ok(g);
            }
        }
    }

    /// Tries for at most `wait`; `lease: None` means the watchdog lease, renewed while
    /// the guard lives. See [`crate::Lock::try_lock`].
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn f(client: dlock_client::aio::AsyncClient) -> dlock_client::Result<()> {
    /// let g = client.mutex("r").try_lock(Duration::ZERO, Some(Duration::from_secs(5))).await?;
    /// # Ok(()) }
    /// ```
    pub async fn try_lock(
        &self,
        wait: Duration,
        lease: Option<Duration>,
    ) -> Result<Option<AsyncGuard>> {
        self.acquire(Some(wait), lease).await
    }

    /// Drives the shared acquire machine ([`core::Acquire`]) over this client's
    /// connections.
    pub(crate) async fn acquire(
        &self,
        wait: Option<Duration>,
        lease: Option<Duration>,
    ) -> Result<Option<AsyncGuard>> {
        let opts = &self.inner.opts;
        let owner = self.owner();
        let mut m = Acquire::new(&self.spec, owner.clone(), opts, wait, lease, Instant::now())?;
        self.inner.check_open()?;
        let abandon = Abandon::new(&self.inner, &self.spec.key, &owner);
        let mut step = m.start(Instant::now());
        let mut sub: Option<redis::aio::PubSub> = None;
        // The connection of the last Send, kept while a SendPinned may follow.
        let mut last: Option<MultiplexedConnection> = None;
        let out = self
            .drive(&mut m, &mut step, &mut sub, lease, &mut last)
            .await;
        abandon.finished();
        if let Some(con) = last {
            self.inner.pool.give_back(con, &Ok::<(), _>(()));
        }
        out
    }

    async fn drive(
        &self,
        m: &mut Acquire<'_>,
        step: &mut Step,
        sub: &mut Option<redis::aio::PubSub>,
        lease: Option<Duration>,
        last: &mut Option<MultiplexedConnection>,
    ) -> Result<Option<AsyncGuard>> {
        loop {
            let now = std::mem::replace(step, Step::Done(None));
            if !matches!(now, Step::SendPinned(..)) {
                if let Some(con) = last.take() {
                    self.inner.pool.give_back(con, &Ok::<(), _>(()));
                }
            }
            *step = match now {
                Step::Send(c, timeout) => {
                    let (r, con) = self.inner.run_keep(&c, timeout).await;
                    *last = con;
                    m.on_result(r, Instant::now())?
                }
                Step::SendPinned(c, timeout) => {
                    let r = match last.as_mut() {
                        Some(con) => query_on(con, &c, timeout).await,
                        None => Err(core::pinned_gone()),
                    };
                    if matches!(&r, Err(e) if !core::reusable(e)) {
                        *last = None;
                    }
                    m.on_result(r, Instant::now())?
                }
                Step::Subscribe(channel, timeout) => {
                    *sub = Some(self.inner.subscribe(channel, timeout).await?);
                    m.on_subscribed(Instant::now())
                }
                Step::Listen(timeout) => {
                    if let Some(ps) = sub.as_mut() {
                        // A notice or a timeout: ask again. A closed subscription is
                        // an error, as in the blocking half (no busy retry loop).
                        let notice = tokio::time::timeout(timeout, ps.on_message().next()).await;
                        if let Ok(None) = notice {
                            return Err(closed("the pub/sub connection").into());
                        }
                    }
                    m.on_notice(Instant::now())
                }
                Step::Pause(d) => {
                    tokio::time::sleep(d).await;
                    m.on_paused(Instant::now())
                }
                Step::GiveUp(c, timeout) => {
                    self.inner.cancel_later(c, timeout);
                    return m.outcome().map(|_| None);
                }
                Step::Done(None) => return m.outcome().map(|_| None),
                Step::Done(Some(g)) => return Ok(Some(AsyncGuard::new(self, g, lease))),
            };
        }
    }
}

/// The async counterpart of [`crate::Guard`]. Dropping it stops the watchdog and
/// releases in a background task of the current runtime (best effort); prefer
/// [`AsyncGuard::unlock`], which reports the outcome.
///
/// ```no_run
/// # async fn f(client: dlock_client::aio::AsyncClient) -> dlock_client::Result<()> {
/// let g = client.mutex("ledger").lock().await?;
/// let lost = g.lost_signal();
/// tokio::select! {
///     _ = lost.lost() => eprintln!("lost the lock; abandoning the work"),
///     _ = tokio::time::sleep(std::time::Duration::from_secs(1)) => {}
/// }
/// g.unlock().await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct AsyncGuard {
    inner: Arc<AsyncInner>,
    hold: Hold,
    watchdog: Option<AsyncWatchdog>,
    /// Its registration for prompt notice.
    notice: NoticeId,
    done: bool,
}

impl AsyncGuard {
    fn new(lock: &AsyncLock, grant: Grant, lease: Option<Duration>) -> AsyncGuard {
        let inner = lock.inner.clone();
        let hold = Hold::new(&lock.spec, grant, lease, &inner.opts);
        let watchdog = hold.watch(lease, &inner.opts).map(|(w, c)| {
            let i2 = inner.clone();
            AsyncWatchdog::spawn(w, move |timeout| {
                let (i3, c) = (i2.clone(), c.clone());
                async move { core::renewal(i3.run(&c, timeout).await) }
            })
        });
        let halt = watchdog.as_ref().and_then(AsyncWatchdog::halt);
        let notice = inner.watch(&hold.key, hold.token, &hold.lost, halt);
        AsyncGuard {
            inner,
            hold,
            watchdog,
            notice,
            done: false,
        }
    }

    pub(crate) fn lost_state(&self) -> &Arc<LostState> {
        &self.hold.lost
    }

    /// As [`crate::Guard::check`].
    pub async fn check(&self) -> Result<bool> {
        let c = self.hold.check();
        let v = self.inner.run(&c, self.inner.opts.command_timeout).await?;
        cmd::live(v)
    }

    /// As [`crate::Guard::fenced`].
    pub async fn fenced(&self, command: &Cmd) -> Result<Value> {
        let c = self.hold.fenced(command);
        Ok(self.inner.run(&c, self.inner.opts.command_timeout).await?)
    }

    guard_methods!(
        "# async fn f(client: dlock_client::aio::AsyncClient) -> dlock_client::Result<()> {",
        ".await",
        "# Ok(()) }"
    );

    /// Releases this hold; see [`crate::Guard::unlock`] (the watchdog stops whatever
    /// the answer; [`Unlock::Unknown`] when the release failed twice; never an error).
    ///
    /// ```no_run
    /// # async fn f(client: dlock_client::aio::AsyncClient) -> dlock_client::Result<()> {
    /// let g = client.mutex("k").lock().await?;
    /// assert_eq!(g.unlock().await?, dlock_client::Unlock::Released);
    /// # Ok(()) }
    /// ```
    pub async fn unlock(mut self) -> Result<Unlock> {
        self.done = true;
        if let Some(mut wd) = self.watchdog.take() {
            wd.stop();
        }
        self.inner.notices.unwatch(self.notice);
        Ok(self
            .inner
            .unlock(&self.hold.release(), &self.hold.lost)
            .await)
    }
}

impl AsyncLock {
    /// `DLOCK.FORCERELEASE`: drops every hold of the lock (administrative).
    ///
    /// ```no_run
    /// # async fn f(client: dlock_client::aio::AsyncClient) -> dlock_client::Result<()> {
    /// let existed = client.mutex("stuck").force_unlock().await?;
    /// # Ok(()) }
    /// ```
    pub async fn force_unlock(&self) -> Result<bool> {
        let c = self.spec.force_release();
        core::force_released(self.inner.run(&c, self.inner.opts.command_timeout).await?)
    }
}

impl Drop for AsyncGuard {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        if let Some(mut wd) = self.watchdog.take() {
            wd.stop();
        }
        self.inner.notices.unwatch(self.notice);
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let inner = self.inner.clone();
            let (c, lost) = (self.hold.release(), self.hold.lost.clone());
            rt.spawn(async move {
                inner.unlock(&c, &lost).await;
            });
        }
    }
}

impl Drop for AsyncInner {
    fn drop(&mut self) {
        // The last client handle and guard are gone: stop the subscriber.
        self.close();
    }
}

/// The async counterpart of [`crate::Latch`]. See [`AsyncClient::latch`].
#[derive(Clone, Debug)]
pub struct AsyncLatch {
    inner: Arc<AsyncInner>,
    key: String,
}

impl AsyncLatch {
    /// The key of the latch.
    pub fn name(&self) -> &str {
        &self.key
    }

    /// As [`crate::Latch::set`].
    pub async fn set(&self, count: u64) -> Result<bool> {
        let c = cmd::latch_set(&self.key, count);
        let v = self.inner.run(&c, self.inner.opts.command_timeout).await?;
        Ok(cmd::count(v, "DLOCK.LATCHSET")? == 1)
    }

    /// As [`crate::Latch::count_down`].
    pub async fn count_down(&self) -> Result<u64> {
        let c = cmd::count_down(&self.key);
        let v = self.inner.run(&c, self.inner.opts.command_timeout).await?;
        cmd::count(v, "DLOCK.COUNTDOWN")
    }

    /// As [`crate::Latch::wait`].
    pub async fn wait(&self, timeout: Duration) -> Result<bool> {
        let m = LatchWait::new(&self.key, timeout, &self.inner.opts, Instant::now());
        loop {
            let (c, t) = m.next(Instant::now());
            let r = self.inner.run(&c, t).await;
            if let Some(open) = m.on_result(r, Instant::now())? {
                return Ok(open);
            }
        }
    }
}

/// Visibility (issue 23): the same as the blocking [`crate::Client`]'s.
impl AsyncClient {
    async fn query(&self, c: &redis::Cmd) -> Result<Value> {
        Ok(self.inner.run(c, self.inner.opts.command_timeout).await?)
    }

    /// `DLOCK.INFO key` (see [`crate::Client::info`]).
    pub async fn info(&self, key: &str) -> Result<Option<crate::LockInfo>> {
        crate::visibility::parse_info(&self.query(&crate::visibility::info_cmd(key)).await?)
    }

    /// One `DLOCK.SCAN` call (see [`crate::Client::scan`]).
    pub async fn scan(&self, cursor: u64, opts: &crate::ScanOptions) -> Result<(u64, Vec<String>)> {
        let c = crate::visibility::scan_cmd(cursor, opts);
        crate::visibility::parse_scan(&self.query(&c).await?)
    }

    /// `DLOCK.STATS` (see [`crate::Client::stats`]).
    pub async fn stats(&self) -> Result<Vec<crate::KindStats>> {
        crate::visibility::parse_stats(&self.query(&crate::visibility::stats_cmd(false)).await?)
    }

    /// `DLOCK.SLOWLOG GET n` (see [`crate::Client::slowlog`]).
    pub async fn slowlog(&self, n: i64) -> Result<Vec<crate::SlowEntry>> {
        let c = crate::visibility::slowlog_cmd("GET", Some(n));
        crate::visibility::parse_slowlog(&self.query(&c).await?)
    }
}
