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

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::{Cmd, IntoConnectionInfo, RedisError, RedisResult, Value};

use crate::error::{is_connection_error, Error, Result};
use crate::lost::{LostReason, LostSignal, LostState};
use crate::watchdog::{AsyncWatchdog, Renewal};
use crate::{cmd, LockKind, Options, Unlock};

mod multi;
mod redlock;

pub use multi::{AsyncMultiGuard, AsyncMultiLock};
pub use redlock::{AsyncRedLock, AsyncRedLockGuard};

const MAX_IDLE: usize = 16;

struct AsyncInner {
    redis: redis::Client,
    opts: Options,
    prefix: String,
    /// `host:port/db`, for the deterministic order of [`AsyncMultiLock`].
    server: String,
    pool: Mutex<Vec<MultiplexedConnection>>,
}

impl std::fmt::Debug for AsyncInner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncClient")
            .field("prefix", &self.prefix)
            .field("opts", &self.opts)
            .finish_non_exhaustive()
    }
}

fn timed_out(what: &str) -> RedisError {
    std::io::Error::new(std::io::ErrorKind::TimedOut, format!("{what} timed out")).into()
}

impl AsyncInner {
    async fn run(&self, cmd: &Cmd, timeout: Duration) -> RedisResult<Value> {
        let timeout = timeout.max(Duration::from_millis(1));
        let pooled = self.pool.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let mut con = match pooled {
            Some(c) => c,
            None => tokio::time::timeout(
                self.opts.connect_timeout.min(timeout),
                self.redis.get_multiplexed_async_connection(),
            )
            .await
            .map_err(|_| timed_out("connect"))??,
        };
        let r = match tokio::time::timeout(timeout, cmd.query_async::<Value>(&mut con)).await {
            Ok(r) => r,
            Err(_) => return Err(timed_out("command")), // connection dropped
        };
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

    fn owner(&self) -> String {
        task_owner(&self.prefix)
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
        let info = url.into_connection_info()?;
        let server = format!("{}/{}", info.addr, info.redis.db);
        let redis = redis::Client::open(info)?;
        Ok(AsyncClient {
            inner: Arc::new(AsyncInner {
                redis,
                server,
                prefix: opts.new_prefix(),
                opts,
                pool: Mutex::new(Vec::new()),
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

    /// A handle on the reentrant mutex at key `name`.
    ///
    /// ```no_run
    /// # async fn f(client: dlock_client::aio::AsyncClient) -> dlock_client::Result<()> {
    /// let g = client.mutex("orders").lock().await?;
    /// # Ok(()) }
    /// ```
    pub fn mutex(&self, name: impl Into<String>) -> AsyncLock {
        self.handle(LockKind::Mutex, name.into())
    }

    /// A handle on the fair (FIFO) lock at key `name`.
    ///
    /// ```no_run
    /// # async fn f(client: dlock_client::aio::AsyncClient) -> dlock_client::Result<()> {
    /// let g = client.fair("printer").lock().await?;
    /// # Ok(()) }
    /// ```
    pub fn fair(&self, name: impl Into<String>) -> AsyncLock {
        self.handle(LockKind::Fair, name.into())
    }

    /// A handle on the read-write lock at key `name`.
    ///
    /// ```no_run
    /// # async fn f(client: dlock_client::aio::AsyncClient) -> dlock_client::Result<()> {
    /// let r = client.rw("config").read().lock().await?;
    /// # Ok(()) }
    /// ```
    pub fn rw(&self, name: impl Into<String>) -> AsyncRwLock {
        AsyncRwLock {
            client: self.clone(),
            key: name.into(),
        }
    }

    /// The async counterpart of [`crate::Client::semaphore`]: `permits` permits of
    /// the semaphore of `limit` permits at key `name`.
    ///
    /// ```no_run
    /// # async fn f() -> dlock_client::Result<()> {
    /// let client = dlock_client::aio::AsyncClient::open("redis://127.0.0.1/")?;
    /// let guard = client.semaphore("db-conns", 8, 1).lock().await?;
    /// # Ok(()) }
    /// ```
    pub fn semaphore(&self, name: impl Into<String>, limit: u64, permits: u32) -> AsyncLock {
        self.handle(LockKind::Semaphore { limit, permits }, name.into())
    }

    /// The async counterpart of [`crate::Client::latch`].
    ///
    /// ```no_run
    /// # async fn f() -> dlock_client::Result<()> {
    /// # use std::time::Duration;
    /// let client = dlock_client::aio::AsyncClient::open("redis://127.0.0.1/")?;
    /// let done = client.latch("batch-done");
    /// done.set(3).await?;
    /// let opened = done.wait(Duration::from_secs(30)).await?;
    /// # Ok(()) }
    /// ```
    pub fn latch(&self, name: impl Into<String>) -> AsyncLatch {
        AsyncLatch {
            inner: self.inner.clone(),
            key: name.into(),
        }
    }

    fn handle(&self, kind: LockKind, key: String) -> AsyncLock {
        AsyncLock {
            inner: self.inner.clone(),
            kind,
            key,
            owner: None,
            hold: cmd::HoldOpts::default(),
        }
    }
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
    /// The shared (READ) side.
    ///
    /// ```no_run
    /// # async fn f(client: dlock_client::aio::AsyncClient) -> dlock_client::Result<()> {
    /// let r = client.rw("config").read().lock().await?;
    /// # Ok(()) }
    /// ```
    pub fn read(&self) -> AsyncLock {
        self.client.handle(LockKind::Read, self.key.clone())
    }

    /// The exclusive (WRITE) side.
    ///
    /// ```no_run
    /// # async fn f(client: dlock_client::aio::AsyncClient) -> dlock_client::Result<()> {
    /// let w = client.rw("config").write().lock().await?;
    /// # Ok(()) }
    /// ```
    pub fn write(&self) -> AsyncLock {
        self.client.handle(LockKind::Write, self.key.clone())
    }
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
    kind: LockKind,
    key: String,
    owner: Option<String>,
    hold: cmd::HoldOpts,
}

impl AsyncLock {
    /// As [`crate::Lock::bind`]. The async client multiplexes one connection, so the
    /// binding ends when the process (or the client and its connection) goes away.
    pub fn bind(mut self) -> AsyncLock {
        self.hold.bind = true;
        self
    }

    /// As [`crate::Lock::lock_delay`].
    pub fn lock_delay(mut self, delay: Duration) -> AsyncLock {
        self.hold.lock_delay_ms = crate::ceil_ms(delay);
        self
    }

    /// The same lock with a fixed owner id.
    ///
    /// ```
    /// # let client = dlock_client::aio::AsyncClient::open("redis://127.0.0.1/")?;
    /// assert_eq!(client.mutex("a").with_owner("me").owner(), "me");
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn with_owner(mut self, owner: impl Into<String>) -> AsyncLock {
        self.owner = Some(owner.into());
        self
    }

    /// The owner id used from the calling task.
    ///
    /// ```
    /// # let client = dlock_client::aio::AsyncClient::open("redis://127.0.0.1/")?;
    /// assert_eq!(client.mutex("a").owner(), client.owner());
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn owner(&self) -> String {
        self.owner.clone().unwrap_or_else(|| self.inner.owner())
    }

    /// The lock's key.
    ///
    /// ```
    /// # let client = dlock_client::aio::AsyncClient::open("redis://127.0.0.1/")?;
    /// assert_eq!(client.mutex("a").name(), "a");
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn name(&self) -> &str {
        &self.key
    }

    /// The lock's kind.
    ///
    /// ```
    /// # let client = dlock_client::aio::AsyncClient::open("redis://127.0.0.1/")?;
    /// assert_eq!(client.fair("a").kind(), dlock_client::LockKind::Fair);
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn kind(&self) -> LockKind {
        self.kind
    }

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

    async fn acquire(
        &self,
        wait: Option<Duration>,
        lease: Option<Duration>,
    ) -> Result<Option<AsyncGuard>> {
        let opts = &self.inner.opts;
        let owner = self.owner();
        let lease_ms = crate::ceil_ms(lease.unwrap_or(opts.watchdog_lease)).max(1);
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
                .run(&c, Duration::from_millis(slice_ms) + opts.command_timeout)
                .await?;
            if let Some(token) = cmd::token(reply)? {
                // See the blocking `Lock::acquire`: re-anchor the lease clock
                // after a long wait.
                let lease_d = lease.unwrap_or(opts.watchdog_lease);
                if sent.elapsed() <= crate::lease_clock_slack(lease_d) {
                    return Ok(Some(AsyncGuard::new(self, owner, token, sent, lease)));
                }
                let renew_sent = Instant::now();
                let v = self
                    .inner
                    .run(
                        &cmd::renew(&self.key, &owner, lease_ms),
                        opts.command_timeout,
                    )
                    .await?;
                if cmd::renewed(&v) == Some(true) {
                    return Ok(Some(AsyncGuard::new(self, owner, token, renew_sent, lease)));
                }
            }
            if let Some(d) = deadline {
                if Instant::now() >= d {
                    return Ok(None);
                }
            }
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
    kind: LockKind,
    key: String,
    owner: String,
    token: u64,
    lost: Arc<LostState>,
    watchdog: Option<AsyncWatchdog>,
    done: bool,
}

impl AsyncGuard {
    fn new(
        lock: &AsyncLock,
        owner: String,
        token: u64,
        sent: Instant,
        lease: Option<Duration>,
    ) -> AsyncGuard {
        let inner = lock.inner.clone();
        let (lost, watchdog) = match lease {
            Some(l) => {
                let margin = crate::drift(l).min(l / 2);
                (LostState::new(Some(sent + l - margin)), None)
            }
            None => {
                let lost = LostState::new(None);
                let lease = inner.opts.watchdog_lease;
                let c = cmd::renew(&lock.key, &owner, crate::ceil_ms(lease).max(1));
                let i2 = inner.clone();
                let wd = AsyncWatchdog::spawn(
                    lease,
                    inner.opts.renew_interval,
                    sent,
                    lost.clone(),
                    move |timeout| {
                        let (i3, c) = (i2.clone(), c.clone());
                        async move {
                            match i3.run(&c, timeout).await {
                                Ok(v) => match cmd::renewed(&v) {
                                    Some(true) => Renewal::Renewed,
                                    Some(false) => Renewal::Lost(LostReason::NotHeld),
                                    None => Renewal::Failed,
                                },
                                Err(_) => Renewal::Failed,
                            }
                        }
                    },
                );
                (lost, Some(wd))
            }
        };
        AsyncGuard {
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

    pub(crate) fn lost_state(&self) -> &Arc<LostState> {
        &self.lost
    }

    /// The fencing token of this hold.
    ///
    /// ```no_run
    /// # async fn f(client: dlock_client::aio::AsyncClient) -> dlock_client::Result<()> {
    /// let t = client.mutex("k").lock().await?.token();
    /// # Ok(()) }
    /// ```
    pub fn token(&self) -> u64 {
        self.token
    }

    /// As [`crate::Guard::check`].
    pub async fn check(&self) -> Result<bool> {
        let c = cmd::check(&self.key, self.token);
        let v = self.inner.run(&c, self.inner.opts.command_timeout).await?;
        cmd::live(v)
    }

    /// As [`crate::Guard::fenced`].
    pub async fn fenced(&self, command: &Cmd) -> Result<Value> {
        let c = cmd::fenced(&self.key, self.token, command);
        Ok(self.inner.run(&c, self.inner.opts.command_timeout).await?)
    }

    /// True once the lock is known to be lost.
    ///
    /// ```no_run
    /// # async fn f(client: dlock_client::aio::AsyncClient) -> dlock_client::Result<()> {
    /// assert!(!client.mutex("k").lock().await?.is_lost());
    /// # Ok(()) }
    /// ```
    pub fn is_lost(&self) -> bool {
        self.lost.is_lost()
    }

    /// A signal to await ([`LostSignal::lost`]) or block on until the lock is lost.
    ///
    /// ```no_run
    /// # async fn f(client: dlock_client::aio::AsyncClient) -> dlock_client::Result<()> {
    /// let g = client.mutex("k").lock().await?;
    /// let reason = g.lost_signal().lost().await; // completes only when lost
    /// # Ok(()) }
    /// ```
    pub fn lost_signal(&self) -> LostSignal {
        LostSignal(self.lost.clone())
    }

    /// The owner id the lock is held with.
    ///
    /// ```no_run
    /// # async fn f(client: dlock_client::aio::AsyncClient) -> dlock_client::Result<()> {
    /// let g = client.mutex("k").lock().await?;
    /// println!("{}", g.owner());
    /// # Ok(()) }
    /// ```
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// The lock's key.
    ///
    /// ```no_run
    /// # async fn f(client: dlock_client::aio::AsyncClient) -> dlock_client::Result<()> {
    /// assert_eq!(client.mutex("k").lock().await?.name(), "k");
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        &self.key
    }

    /// Releases this hold; see [`crate::Guard::unlock`].
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
        let c = cmd::release(self.kind, &self.key, &self.owner);
        let outcome = cmd::unlock(self.inner.run(&c, self.inner.opts.command_timeout).await)?;
        if outcome == Unlock::Lost {
            self.lost.mark(LostReason::NotHeld);
        }
        Ok(outcome)
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
        let mut c = redis::cmd("DLOCK.FORCERELEASE");
        c.arg(&self.key);
        match self.inner.run(&c, self.inner.opts.command_timeout).await? {
            Value::Int(n) => Ok(n == 1),
            other => Err(Error::Unexpected(format!(
                "DLOCK.FORCERELEASE answered {other:?}"
            ))),
        }
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
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let inner = self.inner.clone();
            let c = cmd::release(self.kind, &self.key, &self.owner);
            rt.spawn(async move {
                let _ = inner.run(&c, inner.opts.command_timeout).await;
            });
        }
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
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let ms = if left.is_zero() {
                0
            } else {
                cmd::slice_ms(left, self.inner.opts.wait_slice)
            };
            let c = cmd::await_latch(&self.key, ms);
            let v = self
                .inner
                .run(
                    &c,
                    Duration::from_millis(ms) + self.inner.opts.command_timeout,
                )
                .await?;
            if cmd::opened(v)? {
                return Ok(true);
            }
            if Instant::now() >= deadline {
                return Ok(false);
            }
        }
    }
}
