//! The sans-IO core shared by the blocking and the async halves: what to send next
//! and what a reply means, with no I/O and with time passed in.
//!
//! Each half is a thin driver: it sends the command a machine asks for (on its own
//! kind of connection), feeds the reply back with the current instant, and acts on
//! the machine's answer. A rule (slicing of `WAIT`, re-anchoring of a late grant,
//! the lost-lock deadline of an explicit lease, the meaning of a release reply, the
//! RedLock round and quorum, the MultiLock order and rollback) lives here once.

pub(crate) mod multi;
pub(crate) mod notice;
pub(crate) mod redlock;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::{Cmd, IntoConnectionInfo, RedisResult, Value};

use crate::cmd::{self, HoldOpts};
use crate::durable::{self, Durable};
use crate::error::{is_connection_error, Error, Result};
use crate::lost::{LostReason, LostSignal, LostState};
use crate::watchdog::{Renewal, Watch};
use crate::{LockKind, Options, Unlock};

/// How [`crate::Lock::lock`] and [`crate::Lock::try_lock`] (and their async
/// counterparts) wait for a busy lock.
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
    /// Wait on the server (`WAIT ms`, in slices of [`Options::server_wait_slice`]): FIFO among
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

/// One server's connection settings, decided once for both halves: the redis crate
/// connects without credentials or database (its own handshake reads without a
/// timeout and would hang on a frozen server); this client then sends `setup`
/// (AUTH, SELECT) under its own timeouts.
pub(crate) struct Endpoint {
    /// What the redis crate connects with (RESP2, no AUTH, db 0).
    pub client: redis::Client,
    /// `host:port/db`, for the deterministic order of MultiLocks.
    pub server: String,
    /// AUTH / SELECT to send on each new connection.
    pub setup: Vec<Cmd>,
    /// The full settings (with credentials), for a pub/sub connection the redis crate
    /// sets up itself (under the caller's timeout).
    pub pubsub: redis::Client,
}

impl Endpoint {
    pub(crate) fn open(url: impl IntoConnectionInfo) -> Result<Endpoint> {
        let info = url.into_connection_info()?;
        let settings = info.redis_settings().clone();
        let full = settings
            .clone()
            .set_protocol(redis::ProtocolVersion::RESP2)
            .set_skip_set_lib_name();
        let pubsub = redis::Client::open(info.clone().set_redis_settings(full))?;
        let server = format!("{}/{}", info.addr(), settings.db());
        let mut setup = Vec::new();
        if let Some(password) = settings.password() {
            let mut auth = redis::cmd("AUTH");
            if let Some(user) = settings.username() {
                auth.arg(user);
            }
            auth.arg(password);
            setup.push(auth);
        }
        if settings.db() != 0 {
            let mut select = redis::cmd("SELECT");
            select.arg(settings.db());
            setup.push(select);
        }
        // No credentials, database 0, RESP2, no CLIENT SETINFO: this client's own
        // handshake (`setup`) follows under its timeouts.
        let info = info.set_redis_settings(bare_settings());
        Ok(Endpoint {
            client: redis::Client::open(info)?,
            server,
            setup,
            pubsub,
        })
    }
}

/// What the redis crate connects with: RESP2, no credentials, database 0, and no
/// `CLIENT SETINFO` (AUTH and SELECT are sent by this client, under its timeouts).
pub(crate) fn bare_settings() -> redis::RedisConnectionInfo {
    redis::RedisConnectionInfo::default()
        .set_protocol(redis::ProtocolVersion::RESP2)
        .set_skip_set_lib_name()
}

/// Idle connections kept per client.
const MAX_IDLE: usize = 16;

/// A small pool of idle connections (blocking or multiplexed async ones).
#[derive(Debug)]
pub(crate) struct Pool<C>(Mutex<Vec<C>>);

impl<C> Pool<C> {
    pub(crate) fn new() -> Pool<C> {
        Pool(Mutex::new(Vec::new()))
    }

    /// Drops every idle connection (they may lead to a master that is gone).
    pub(crate) fn clear(&self) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }

    pub(crate) fn take(&self) -> Option<C> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).pop()
    }

    /// Puts `con` back after a command answered `r`, unless the connection failed (it
    /// may still owe a reply) or enough are idle.
    pub(crate) fn give_back<T>(&self, con: C, r: &RedisResult<T>) {
        if let Err(e) = r {
            if !reusable(e) {
                return;
            }
        }
        let mut pool = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if pool.len() < MAX_IDLE {
            pool.push(con);
        }
    }
}

/// Whether a connection whose command failed with `e` may be used again: not after a
/// transport failure (it may still owe a reply), nor after `READONLY` (it leads to a
/// replica, e.g. a master demoted by a failover: a new connection finds the master).
pub(crate) fn reusable(e: &redis::RedisError) -> bool {
    !is_connection_error(e) && !is_read_only(e)
}

/// Whether `e` is a `READONLY` refusal (a replica, e.g. a master demoted by a failover).
pub(crate) fn is_read_only(e: &redis::RedisError) -> bool {
    e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::ReadOnly)
}

/// The error of a [`Step::SendPinned`] whose connection is gone.
pub(crate) fn pinned_gone() -> redis::RedisError {
    std::io::Error::new(
        std::io::ErrorKind::ConnectionAborted,
        "the connection that was granted the lock is gone",
    )
    .into()
}

/// Everything a lock handle is, apart from the client it acts through: shared by
/// [`crate::Lock`] and [`crate::aio::AsyncLock`].
#[derive(Clone, Debug)]
pub(crate) struct LockSpec {
    pub kind: LockKind,
    pub key: String,
    pub owner: Option<String>,
    pub wait_mode: WaitMode,
    pub hold: HoldOpts,
    /// `WAIT` for replicas after each grant ([`Durable`]); `None`: no check.
    pub durable: Option<Durable>,
}

impl LockSpec {
    pub(crate) fn new(kind: LockKind, key: String) -> LockSpec {
        LockSpec {
            kind,
            key,
            owner: None,
            wait_mode: WaitMode::Server,
            hold: HoldOpts::default(),
            durable: None,
        }
    }

    pub(crate) fn lock_delay(&mut self, delay: Duration) {
        self.hold.lock_delay_ms = crate::ceil_ms(delay);
    }

    /// `DLOCK.FORCERELEASE key`.
    pub(crate) fn force_release(&self) -> Cmd {
        let mut c = redis::cmd("DLOCK.FORCERELEASE");
        c.arg(&self.key);
        c
    }
}

/// A FORCERELEASE reply: whether a lock existed.
pub(crate) fn force_released(v: Value) -> Result<bool> {
    match v {
        Value::Int(n) => Ok(n == 1),
        other => Err(Error::Unexpected(format!(
            "DLOCK.FORCERELEASE answered {other:?}, expected 1 or 0"
        ))),
    }
}

/// What an acquire machine asks its driver to do next.
pub(crate) enum Step {
    /// Send the command on a pooled connection with this timeout, then call
    /// [`Acquire::on_result`]. Keep that connection until the next `Send` or the end:
    /// a [`Step::SendPinned`] may follow.
    Send(Cmd, Duration),
    /// Send the command on the connection of the last [`Step::Send`] (the one that got
    /// the grant: `WAIT` counts what that connection wrote), then call
    /// [`Acquire::on_result`]; when that connection is gone, answer with an error.
    SendPinned(Cmd, Duration),
    /// Open a pub/sub connection (timeout: the duration) subscribed to the channel,
    /// then call [`Acquire::on_subscribed`].
    Subscribe(String, Duration),
    /// Wait for a message on the subscription, at most this long, then call
    /// [`Acquire::on_notice`] (a timeout counts as a notice).
    Listen(Duration),
    /// The connection failed within a wait that has time left: pause this long, then
    /// call [`Acquire::on_paused`] (the next try gets a fresh connection).
    Pause(Duration),
    /// The wait ended without a grant: send this `DLOCK.CANCEL` in the background (best
    /// effort, with this timeout, never delaying the caller: [`Cancel`]), so no queue
    /// place of this owner is left behind to delay later owners; then the acquire is
    /// over: [`Acquire::outcome`].
    GiveUp(Cmd, Duration),
    /// Finished: the grant, or `None` when the wait ended first (then
    /// [`Acquire::outcome`]).
    Done(Option<Grant>),
}

/// How late past its deadline a wait's last reply may come before the client gives up
/// on it: the deadline holds within 250 ms (docs/clients.md, rule 4) with room for the
/// caller's own scheduling.
pub(crate) const DEADLINE_GRACE: Duration = Duration::from_millis(100);

/// The first pause after a connection failure within a wait; it doubles up to
/// [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(50);
const MAX_PAUSE: Duration = Duration::from_millis(500);

/// The reply timeout of one request of a wait with `left` to its deadline (`None`:
/// unbounded, or a single try): the client's reply timeout, cut to the deadline plus
/// [`DEADLINE_GRACE`].
pub(crate) fn reply_timeout(opts: &Options, left: Option<Duration>) -> Duration {
    match left {
        Some(l) => opts.command_timeout.min(l.saturating_add(DEADLINE_GRACE)),
        None => opts.command_timeout,
    }
}

/// Refuses bad input before anything is sent (docs/clients.md, rule 5), naming the
/// argument: an empty key or owner, an owner longer than 512 bytes, a semaphore limit
/// or permit count out of range, a lease out of 1 ms..2^40 ms, and — for a hold the
/// watchdog renews — a renew interval not below its lease. Answers the `PX` to send.
pub(crate) fn check_request(
    spec: &LockSpec,
    owner: &str,
    opts: &Options,
    lease: Option<Duration>,
) -> Result<u64> {
    check_key(&spec.key)?;
    check_owner(owner)?;
    if let LockKind::Semaphore { limit, permits } = spec.kind {
        if !(1..=1u64 << 32).contains(&limit) {
            return Err(Error::Invalid(format!(
                "the semaphore limit must be in 1..=2^32, got {limit}"
            )));
        }
        if permits == 0 || u64::from(permits) > limit {
            return Err(Error::Invalid(format!(
                "the semaphore permits must be in 1..=limit ({limit}), got {permits}"
            )));
        }
    }
    match lease {
        Some(l) => crate::lease_ms(l, "the lease"),
        None => check_watchdog(opts.watchdog_lease, opts, "Options::watchdog_lease"),
    }
}

/// A lock key: not empty.
pub(crate) fn check_key(key: &str) -> Result<()> {
    if key.is_empty() {
        return Err(Error::Invalid(
            "the key must not be empty: name the lock (any non-empty string)".into(),
        ));
    }
    Ok(())
}

/// An owner id: 1 to 512 bytes (the server's limit).
pub(crate) fn check_owner(owner: &str) -> Result<()> {
    if owner.is_empty() || owner.len() > 512 {
        return Err(Error::Invalid(format!(
            "the owner must be 1 to 512 bytes long, got {} bytes",
            owner.len()
        )));
    }
    Ok(())
}

/// A lease the watchdog renews (`what` names it): in range, and above the renew
/// interval that applies to it. Answers its `PX`.
pub(crate) fn check_watchdog(lease: Duration, opts: &Options, what: &str) -> Result<u64> {
    let ms = crate::lease_ms(lease, what)?;
    let interval = opts.renew_interval_for(lease);
    if interval >= lease || interval.is_zero() {
        return Err(Error::Invalid(format!(
            "Options::renew_interval must be positive and below the lease it renews \
             ({what} = {lease:?}), got {interval:?}: a renewal must come before the lease \
             ends (leave it unset for a third of the lease)"
        )));
    }
    Ok(ms)
}

/// Whether a client still sends `DLOCK.CANCEL` when a try gives up: it stops after
/// the first `unknown command` (a module older than CANCEL; its fair-queue places
/// then lapse after `dlock.fair-queue-timeout-ms`, as before). Any other failure of a
/// CANCEL is ignored too: giving up never fails.
#[derive(Debug, Default)]
pub(crate) struct Cancel(AtomicBool);

impl Cancel {
    /// Whether to send a CANCEL at all.
    pub(crate) fn wanted(&self) -> bool {
        !self.0.load(Ordering::Relaxed)
    }

    /// Files the answer to a CANCEL.
    pub(crate) fn answered(&self, r: &RedisResult<Value>) {
        if let Err(e) = r {
            if crate::error::unknown_command(e).is_some() {
                self.0.store(true, Ordering::Relaxed);
            }
        }
    }
}

/// A granted hold, before its guard exists.
#[derive(Debug)]
pub(crate) struct Grant {
    pub owner: String,
    pub token: u64,
    /// When the request that started the server's current lease was sent.
    pub anchored: Instant,
}

#[derive(Debug)]
enum Phase {
    /// An acquire is out, sent at this instant.
    Asking(Instant),
    /// Granted with this token after a long wait; the re-anchoring RENEW was sent at
    /// this instant.
    Anchoring(u64, Instant),
    /// Waiting for a pub/sub notice.
    Listening,
    /// Granted with this token, anchored at this instant; the `WAIT` for replicas is
    /// out (durable acquires).
    Confirming(u64, Instant),
    /// A grant that is not durable is being released; then this error, or another try.
    Undoing(Error),
}

/// The acquire loop of one lock handle: server-side `WAIT` in slices of
/// [`Options::server_wait_slice`] (or, in [`WaitMode::Notifications`], `WAIT 0`
/// retries on each notice), each reply bounded by the client's reply timeout and the
/// caller's deadline; tries again after a connection failure while the wait has time
/// left; and the re-anchoring RENEW of a grant that came late in a wait.
#[derive(Debug)]
pub(crate) struct Acquire<'a> {
    spec: &'a LockSpec,
    owner: String,
    lease: Duration,
    lease_ms: u64,
    /// When the caller's wait ends (`None`: unbounded, or a single try).
    deadline: Option<Instant>,
    /// A single try (`WAIT 0`, a wait of zero).
    single: bool,
    started: Instant,
    opts: &'a Options,
    notified: bool,
    subscribed: bool,
    phase: Phase,
    /// Tries left after a grant too few replicas acknowledged.
    retries_left: u32,
    /// The last connection failure of this wait, reported with its timeout.
    failure: Option<redis::RedisError>,
    /// The next pause after a connection failure.
    pause: Duration,
    /// A `WAIT` was cut short by the client (no reply): it may still be queued on the
    /// server, so giving up sends `DLOCK.CANCEL` whatever the kind.
    cut: bool,
}

impl<'a> Acquire<'a> {
    /// A wait of `wait` (`None`: unbounded) starting at `now`, for a hold of `lease`
    /// (`None`: the watchdog lease). Bad input is refused ([`check_request`]).
    pub(crate) fn new(
        spec: &'a LockSpec,
        owner: String,
        opts: &'a Options,
        wait: Option<Duration>,
        lease: Option<Duration>,
        now: Instant,
    ) -> Result<Acquire<'a>> {
        let lease_ms = check_request(spec, &owner, opts, lease)?;
        let lease = lease.unwrap_or(opts.watchdog_lease);
        Ok(Acquire {
            spec,
            owner,
            lease,
            lease_ms,
            // A single try has no deadline to keep: it reports a failure at once.
            deadline: wait
                .filter(|w| !w.is_zero())
                .and_then(|w| now.checked_add(w)),
            single: wait == Some(Duration::ZERO),
            started: now,
            opts,
            notified: spec.wait_mode == WaitMode::Notifications && wait != Some(Duration::ZERO),
            subscribed: false,
            phase: Phase::Listening,
            retries_left: spec.durable.map_or(0, |d| d.retries),
            failure: None,
            pause: FIRST_PAUSE,
            cut: false,
        })
    }

    /// The first step.
    pub(crate) fn start(&mut self, now: Instant) -> Step {
        self.ask(now)
    }

    /// When the reply to the acquire that is out is given up at the latest: the wait's
    /// deadline plus [`DEADLINE_GRACE`] (`None`: unbounded, a single try, or no acquire
    /// out — a grant's re-anchoring RENEW, a durable grant's release, run to their end).
    pub(crate) fn hard_deadline(&self) -> Option<Instant> {
        match self.phase {
            Phase::Asking(_) => self.deadline.map(|d| crate::later(d, DEADLINE_GRACE)),
            _ => None,
        }
    }

    /// `DLOCK.RELEASE` of what the last acquire may have granted (a grant that came too
    /// late to be used).
    pub(crate) fn late_grant_release(&self) -> Cmd {
        cmd::release(self.spec.kind, &self.spec.key, &self.owner)
    }

    /// What is left of the wait at `now` (`None`: unbounded, or a single try).
    fn left(&self, now: Instant) -> Option<Duration> {
        self.deadline.map(|d| d.saturating_duration_since(now))
    }

    /// Sends an acquire: a `WAIT` slice, or `WAIT 0` when waiting on notices or when
    /// the wait is a single try.
    fn ask(&mut self, now: Instant) -> Step {
        let left = self.left(now);
        let wait = match left {
            _ if self.notified || self.single => Duration::ZERO,
            Some(l) => l.min(self.opts.server_wait_slice()),
            None => self.opts.server_wait_slice(),
        };
        let wait_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX);
        let mut c = cmd::acquire(
            self.spec.kind,
            &self.spec.key,
            &self.owner,
            self.lease_ms,
            wait_ms,
        );
        cmd::hold_opts(&mut c, self.spec.hold);
        self.phase = Phase::Asking(now);
        Step::Send(c, reply_timeout(self.opts, left))
    }

    /// The reply to the command of the last [`Step::Send`], received at `now`.
    #[cfg(test)]
    pub(crate) fn on_reply(&mut self, reply: Value, now: Instant) -> Result<Step> {
        self.on_result(Ok(reply), now)
    }

    /// The answer to the command of the last [`Step::Send`] or [`Step::SendPinned`]
    /// (a reply, or the error it failed with), received at `now`.
    pub(crate) fn on_result(&mut self, answer: RedisResult<Value>, now: Instant) -> Result<Step> {
        let phase = std::mem::replace(&mut self.phase, Phase::Listening);
        if let Phase::Undoing(why) = phase {
            // The release's answer does not matter: released, or the lease ends it.
            return self.undone(why, now);
        }
        if let Phase::Confirming(token, anchored) = phase {
            return Ok(self.confirmed(answer, token, anchored));
        }
        let reply = match answer {
            Ok(v) => v,
            // A durable grant whose re-anchoring failed: let it go again.
            Err(e) if matches!(phase, Phase::Anchoring(..)) && self.spec.durable.is_some() => {
                return Ok(self.undo(e.into()));
            }
            Err(e) if matches!(phase, Phase::Asking(_)) && is_connection_error(&e) => {
                return self.failed(e, now);
            }
            Err(e) => return Err(e.into()),
        };
        match phase {
            Phase::Asking(sent) => match cmd::token(reply)? {
                // The grant came at an unknown instant of the wait. After a long
                // wait, restart the lease now so the lost-lock clock starts from a
                // known instant; 0 means it already lapsed.
                Some(token)
                    if now.saturating_duration_since(sent)
                        > crate::lease_clock_slack(self.lease) =>
                {
                    self.phase = Phase::Anchoring(token, now);
                    let c = cmd::renew(&self.spec.key, &self.owner, self.lease_ms);
                    // Durable: on the granting connection, so the WAIT covers it too.
                    Ok(match self.spec.durable {
                        Some(_) => Step::SendPinned(c, self.opts.command_timeout),
                        None => Step::Send(c, self.opts.command_timeout),
                    })
                }
                Some(token) => Ok(self.granted(token, sent)),
                None => Ok(self.missed(now)),
            },
            Phase::Anchoring(token, sent) => Ok(match cmd::renewed(&reply) {
                Some(true) => self.granted(token, sent),
                _ => self.missed(now),
            }),
            Phase::Listening | Phase::Confirming(..) | Phase::Undoing(_) => Err(Error::Unexpected(
                "a reply came while no command was out".into(),
            )),
        }
    }

    fn granted(&mut self, token: u64, anchored: Instant) -> Step {
        if let Some(d) = self.spec.durable {
            self.phase = Phase::Confirming(token, anchored);
            return Step::SendPinned(d.wait(), d.wait_timeout(self.opts.command_timeout));
        }
        self.done(token, anchored)
    }

    /// The `WAIT` after a durable grant answered: done, or release it again.
    fn confirmed(&mut self, answer: RedisResult<Value>, token: u64, anchored: Instant) -> Step {
        let wanted = self.spec.durable.map_or(0, |d| d.replicas);
        match answer.map_err(Error::from).and_then(durable::acked) {
            Ok(acked) if acked >= wanted => self.done(token, anchored),
            Ok(acked) => self.undo(Error::NotDurable { wanted, acked }),
            Err(e) => self.undo(e),
        }
    }

    /// Releases a grant that is not durable (on any connection), then fails with `why`.
    fn undo(&mut self, why: Error) -> Step {
        self.phase = Phase::Undoing(why);
        let c = cmd::release(self.spec.kind, &self.spec.key, &self.owner);
        Step::Send(c, self.opts.command_timeout)
    }

    /// The grant is released: another try (a short count with tries left; it waits
    /// what is left of the wait, if anything), or the error.
    fn undone(&mut self, why: Error, now: Instant) -> Result<Step> {
        if why.is_not_durable() && self.retries_left > 0 {
            self.retries_left = self.retries_left.saturating_sub(1);
            return Ok(self.ask(now));
        }
        Err(why)
    }

    fn done(&mut self, token: u64, anchored: Instant) -> Step {
        Step::Done(Some(Grant {
            owner: std::mem::take(&mut self.owner),
            token,
            anchored,
        }))
    }

    /// An acquire failed on the connection at `now`. Within a wait with time left:
    /// pause, then try again on a fresh connection. At the deadline: give up, reporting
    /// [`Error::Timeout`] with the failure (the last slice's reply not coming by the
    /// deadline is no failure of its own: not granted in time). A single try or an
    /// unbounded wait reports the failure at once (no deadline covers it).
    fn failed(&mut self, e: redis::RedisError, now: Instant) -> Result<Step> {
        let timed_out = e.is_timeout();
        if timed_out {
            self.cut = true;
        }
        let Some(left) = self.left(now) else {
            if self.cut {
                // The WAIT may still be queued on the server: free the place.
                self.failure = Some(e);
                return Ok(self.give_up());
            }
            return Err(e.into());
        };
        if left.is_zero() {
            // The last slice's reply did not come by the deadline (and its grace):
            // slow or partitioned alike, not granted in time — an earlier failure of
            // this wait, if any, is what the timeout reports.
            if !timed_out {
                self.failure = Some(e);
            }
            return Ok(self.give_up());
        }
        self.failure = Some(e);
        let pause = self.pause.min(left);
        self.pause = self.pause.saturating_mul(2).min(MAX_PAUSE);
        Ok(Step::Pause(pause))
    }

    /// The pause after a connection failure is over.
    pub(crate) fn on_paused(&mut self, now: Instant) -> Step {
        match self.left(now) {
            Some(l) if l.is_zero() => self.give_up(),
            _ => self.ask(now),
        }
    }

    /// The wait is over without a grant. A fair lock keeps the place it queued
    /// between polls (and a `WAIT` that ended), and a `WAIT` the client cut short may
    /// still be queued: `DLOCK.CANCEL` gives it up at once.
    fn give_up(&mut self) -> Step {
        if self.spec.kind == LockKind::Fair || self.cut {
            return Step::GiveUp(
                cmd::cancel(&self.spec.key, &self.owner),
                self.opts.command_timeout,
            );
        }
        Step::Done(None)
    }

    /// How an acquire that gave up ([`Step::GiveUp`], or [`Step::Done`] with `None`)
    /// ends: not granted in time (`Ok(None)`), or — when the connection failed on the
    /// way — [`Error::Timeout`] with that failure (a single try or an unbounded wait:
    /// the failure itself).
    pub(crate) fn outcome(&mut self) -> Result<Option<Grant>> {
        match self.failure.take() {
            None => Ok(None),
            Some(e) if self.deadline.is_none() => Err(e.into()),
            Some(source) => Err(Error::Timeout {
                waited: self.deadline.map_or(Duration::ZERO, |d| {
                    d.saturating_duration_since(self.started)
                }),
                source,
            }),
        }
    }

    /// Not granted (yet): ask again, subscribe, listen, or give up.
    fn missed(&mut self, now: Instant) -> Step {
        if !self.notified {
            if self.single {
                return self.give_up();
            }
            return match self.deadline {
                Some(d) if now >= d => self.give_up(),
                _ => self.ask(now),
            };
        }
        if !self.subscribed {
            self.phase = Phase::Listening;
            return Step::Subscribe(
                crate::channel_for(&self.spec.key),
                self.opts.command_timeout,
            );
        }
        // A fair lock keeps a polling owner's place only while it asks again in time.
        let slice = match self.spec.kind {
            LockKind::Fair => self.opts.wait_slice.min(Duration::from_secs(1)),
            _ => self.opts.wait_slice,
        };
        let left = match self.deadline {
            Some(d) => d.saturating_duration_since(now),
            None => slice,
        };
        if left.is_zero() {
            return self.give_up();
        }
        self.phase = Phase::Listening;
        Step::Listen(left.min(slice).max(Duration::from_millis(1)))
    }

    /// The subscription of the last [`Step::Subscribe`] is in place: ask again
    /// (subscribed first, then asked: a release in between is not missed).
    pub(crate) fn on_subscribed(&mut self, now: Instant) -> Step {
        self.subscribed = true;
        self.ask(now)
    }

    /// A notice arrived (or the listen timed out).
    pub(crate) fn on_notice(&mut self, now: Instant) -> Step {
        self.ask(now)
    }
}

/// The state of a granted hold shared by [`crate::Guard`] and
/// [`crate::aio::AsyncGuard`]: who holds what, and the lost signal.
#[derive(Debug)]
pub(crate) struct Hold {
    pub kind: LockKind,
    pub key: String,
    pub owner: String,
    pub token: u64,
    /// When the request that started the current lease was sent (the watchdog's
    /// first confirmed lease).
    pub anchored: Instant,
    pub lost: Arc<LostState>,
}

impl Hold {
    /// The hold of `grant`, valid until its lease (`lease`, or the watchdog lease when
    /// `None`) less the margin, counted from when the grant was anchored: the lease
    /// clock of docs/clients.md (rule 1). An explicit lease that runs out is
    /// [`LostReason::Expired`]; a watchdog lease no renewal extended in time,
    /// [`LostReason::Unreachable`].
    pub(crate) fn new(
        spec: &LockSpec,
        grant: Grant,
        lease: Option<Duration>,
        opts: &Options,
    ) -> Hold {
        let (l, expiry) = match lease {
            Some(l) => (l, LostReason::Expired),
            None => (opts.watchdog_lease, LostReason::Unreachable),
        };
        Hold {
            kind: spec.kind,
            key: spec.key.clone(),
            owner: grant.owner,
            token: grant.token,
            anchored: grant.anchored,
            lost: LostState::new(Some(lease_end(grant.anchored, l)), expiry),
        }
    }

    /// What the watchdog keeps, and its RENEW: only a hold without an explicit
    /// `lease` has one, with the watchdog lease and its renew interval, first confirmed
    /// when the grant was anchored.
    pub(crate) fn watch(&self, lease: Option<Duration>, opts: &Options) -> Option<(Watch, Cmd)> {
        if lease.is_some() {
            return None;
        }
        let lease = opts.watchdog_lease;
        let renew = cmd::renew(&self.key, &self.owner, crate::ceil_ms(lease).max(1));
        let watch = Watch {
            lease,
            interval: opts.renew_interval_for(lease),
            confirmed: self.anchored,
            lost: self.lost.clone(),
        };
        Some((watch, renew))
    }

    /// `DLOCK.RELEASE` of this hold.
    pub(crate) fn release(&self) -> Cmd {
        cmd::release(self.kind, &self.key, &self.owner)
    }

    /// `DLOCK.CHECK` of this hold's token.
    pub(crate) fn check(&self) -> Cmd {
        cmd::check(&self.key, self.token)
    }

    /// `DLOCK.FENCED` of `inner` under this hold's token.
    pub(crate) fn fenced(&self, inner: &Cmd) -> Cmd {
        cmd::fenced(&self.key, self.token, inner)
    }

    pub(crate) fn signal(&self) -> LostSignal {
        LostSignal(self.lost.clone())
    }
}

/// What to do after a release's answer.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Release {
    /// The outcome.
    Done(Unlock),
    /// The release failed on its connection: send it once more on a fresh one.
    Retry,
}

/// The meaning of a release's answer (docs/clients.md, rule 3); `retried` when it
/// answers the retry on a fresh connection: released, still held, lost (`NOTHELD`), a
/// retry after a connection failure, or — when the retry failed too, or the answer
/// makes no sense — unknown.
pub(crate) fn release_answer(r: RedisResult<Value>, retried: bool) -> Release {
    match r {
        Err(e) if !retried && !reusable(&e) => Release::Retry,
        r => Release::Done(cmd::unlock(r).unwrap_or(Unlock::Unknown)),
    }
}

/// What a release's outcome does to the hold's lost state: released or still held —
/// its clock stops (the owner let it go); lost — the signal fires
/// ([`LostReason::NotHeld`] unless a notice said why first); unknown — the clock keeps
/// running, so the signal fires when the lease could have ended.
pub(crate) fn settle(outcome: Unlock, lost: &LostState) -> Unlock {
    match outcome {
        Unlock::Lost => lost.mark(LostReason::NotHeld),
        Unlock::Released | Unlock::StillHeld => lost.disarm(),
        Unlock::Unknown => {}
    }
    outcome
}

/// When a lease anchored at `anchored` counts as run out on the client's lease clock:
/// `anchored + lease − margin` (docs/clients.md, rule 1).
pub(crate) fn lease_end(anchored: Instant, lease: Duration) -> Instant {
    crate::later(anchored, lease.saturating_sub(crate::margin(lease)))
}

/// What a watchdog's RENEW answer means.
pub(crate) fn renewal(r: RedisResult<Value>) -> Renewal {
    match r.as_ref().ok().and_then(cmd::renewed) {
        Some(true) => Renewal::Renewed,
        Some(false) => Renewal::Lost(LostReason::NotHeld),
        None => Renewal::Failed,
    }
}

/// The wait of a latch: `DLOCK.AWAIT` in slices of [`Options::server_wait_slice`].
#[derive(Debug)]
pub(crate) struct LatchWait<'a> {
    key: &'a str,
    deadline: Instant,
    opts: &'a Options,
}

impl<'a> LatchWait<'a> {
    pub(crate) fn new(
        key: &'a str,
        timeout: Duration,
        opts: &'a Options,
        now: Instant,
    ) -> LatchWait<'a> {
        LatchWait {
            key,
            deadline: now.checked_add(timeout).unwrap_or(now),
            opts,
        }
    }

    /// The next AWAIT and its timeout.
    pub(crate) fn next(&self, now: Instant) -> (Cmd, Duration) {
        let left = self.deadline.saturating_duration_since(now);
        let ms = if left.is_zero() {
            0
        } else {
            cmd::slice_ms(left, self.opts.server_wait_slice())
        };
        (
            cmd::await_latch(self.key, ms),
            reply_timeout(self.opts, Some(left)),
        )
    }

    /// The AWAIT answer received at `now`: `Some(open)` when the wait is over, `None`
    /// to send [`LatchWait::next`] again. A reply that did not come by the deadline
    /// (and its grace) is the wait's end, not an error: the latch did not open in time.
    pub(crate) fn on_result(&self, r: RedisResult<Value>, now: Instant) -> Result<Option<bool>> {
        let v = match r {
            Ok(v) => v,
            Err(e) if e.is_timeout() && now >= self.deadline => return Ok(Some(false)),
            Err(e) => return Err(e.into()),
        };
        if cmd::opened(v)? {
            return Ok(Some(true));
        }
        Ok((now >= self.deadline).then_some(false))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(c: &Cmd) -> Vec<String> {
        c.args_iter()
            .filter_map(|a| match a {
                redis::Arg::Simple(b) => Some(String::from_utf8_lossy(b).into_owned()),
                _ => None,
            })
            .collect()
    }

    fn sent(step: Step) -> (Vec<String>, Duration) {
        match step {
            Step::Send(c, t) => (words(&c), t),
            _ => panic!("expected a command to send"),
        }
    }

    fn opts() -> Options {
        Options::default()
            .wait_slice(Duration::from_secs(5))
            .watchdog_lease(Duration::from_secs(30))
    }

    #[test]
    fn server_wait_is_sliced_and_bounded() {
        let (o, t0) = (opts(), Instant::now());
        let spec = LockSpec::new(LockKind::Mutex, "k".into());
        let mut m = Acquire::new(
            &spec,
            "me".into(),
            &o,
            Some(Duration::from_secs(7)),
            None,
            t0,
        )
        .unwrap();
        let (w, timeout) = sent(m.start(t0));
        // 5 s reply timeout: slices of 5 s − 1 s.
        assert_eq!(
            w,
            ["DLOCK.ACQUIRE", "k", "me", "PX", "30000", "WAIT", "4000"]
        );
        assert_eq!(timeout, o.command_timeout);
        let t1 = t0 + Duration::from_secs(4);
        let (w, timeout) = sent(m.on_reply(Value::Nil, t1).unwrap());
        assert_eq!(w.last().map(String::as_str), Some("3000"), "what is left");
        assert_eq!(
            timeout,
            Duration::from_millis(3100),
            "the deadline, plus grace"
        );
        let t2 = t0 + Duration::from_secs(7);
        assert!(matches!(
            m.on_reply(Value::Nil, t2).unwrap(),
            Step::Done(None)
        ));
        assert!(matches!(m.outcome(), Ok(None)));
    }

    #[test]
    fn slices_fit_the_reply_timeout() {
        let t0 = Instant::now();
        let spec = LockSpec::new(LockKind::Mutex, "k".into());
        for (timeout, slice) in [
            (1000, 800),
            (500, 400),
            (5000, 4000),
            (60_000, 4000),
            (50, 10),
        ] {
            let o = Options::default().command_timeout(Duration::from_millis(timeout));
            let mut m = Acquire::new(&spec, "me".into(), &o, None, None, t0).unwrap();
            let (w, t) = sent(m.start(t0));
            assert_eq!(
                w.last(),
                Some(&slice.to_string()),
                "reply timeout {timeout} ms"
            );
            assert_eq!(t, Duration::from_millis(timeout));
        }
    }

    #[test]
    fn a_failing_connection_is_tried_again_until_the_deadline_then_a_timeout() {
        let (o, t0) = (opts(), Instant::now());
        let spec = LockSpec::new(LockKind::Mutex, "k".into());
        let refused = || -> RedisResult<Value> {
            Err(std::io::Error::from(std::io::ErrorKind::ConnectionRefused).into())
        };
        let mut m = Acquire::new(
            &spec,
            "me".into(),
            &o,
            Some(Duration::from_secs(1)),
            None,
            t0,
        )
        .unwrap();
        m.start(t0);
        let mut now = t0;
        let mut pauses = Vec::new();
        loop {
            match m.on_result(refused(), now).unwrap() {
                Step::Pause(d) => {
                    pauses.push(d.as_millis());
                    now += d;
                    if let Step::Done(None) = m.on_paused(now) {
                        break;
                    }
                }
                _ => panic!("expected a pause"),
            }
        }
        assert_eq!(
            pauses,
            [50, 100, 200, 400, 250],
            "doubling, cut to the deadline"
        );
        let e = m.outcome().unwrap_err();
        assert!(e.is_timeout(), "{e:?}");
        // A single try reports the failure at once.
        let mut m = Acquire::new(&spec, "me".into(), &o, Some(Duration::ZERO), None, t0).unwrap();
        let (w, _) = sent(m.start(t0));
        assert_eq!(w.last().map(String::as_str), Some("0"));
        assert!(matches!(m.on_result(refused(), t0), Err(e) if e.is_connection()));
        // A WAIT cut short by the reply timeout may still be queued: CANCEL it.
        let mut m = Acquire::new(
            &spec,
            "me".into(),
            &o,
            Some(Duration::from_secs(1)),
            None,
            t0,
        )
        .unwrap();
        m.start(t0);
        let cut: RedisResult<Value> =
            Err(std::io::Error::from(std::io::ErrorKind::TimedOut).into());
        let late = t0 + Duration::from_millis(1100);
        match m.on_result(cut, late).unwrap() {
            Step::GiveUp(c, _) => assert_eq!(words(&c), ["DLOCK.CANCEL", "k", "me"]),
            _ => panic!("expected a give-up with DLOCK.CANCEL"),
        }
        // Slow or partitioned: not granted in time.
        assert!(matches!(m.outcome(), Ok(None)));
    }

    #[test]
    fn bad_input_is_refused_naming_the_argument() {
        let t0 = Instant::now();
        let o = opts();
        let mutex = LockSpec::new(LockKind::Mutex, "k".into());
        let refused = |spec: &LockSpec, owner: &str, o: &Options, lease: Option<Duration>| {
            match Acquire::new(spec, owner.into(), o, None, lease, t0) {
                Err(Error::Invalid(text)) => text,
                other => panic!("expected Invalid, got {other:?}"),
            }
        };
        let empty = LockSpec::new(LockKind::Mutex, String::new());
        assert!(refused(&empty, "me", &o, None).contains("key"));
        assert!(refused(&mutex, "", &o, None).contains("owner"));
        assert!(refused(&mutex, &"o".repeat(513), &o, None).contains("owner"));
        assert!(refused(&mutex, "me", &o, Some(Duration::ZERO)).contains("lease"));
        let huge = Some(Duration::from_millis(1 << 41));
        assert!(refused(&mutex, "me", &o, huge).contains("2^40"));
        let slow = opts()
            .watchdog_lease(Duration::from_secs(1))
            .renew_interval(Duration::from_secs(1));
        assert!(refused(&mutex, "me", &slow, None).contains("renew_interval"));
        // The interval matters only to the watchdog: an explicit lease is fine.
        assert!(Acquire::new(
            &mutex,
            "me".into(),
            &slow,
            None,
            Some(Duration::from_secs(1)),
            t0
        )
        .is_ok());
        let sem = LockSpec::new(
            LockKind::Semaphore {
                limit: 2,
                permits: 3,
            },
            "s".into(),
        );
        assert!(refused(&sem, "me", &o, None).contains("permits"));
        let sem = LockSpec::new(
            LockKind::Semaphore {
                limit: 0,
                permits: 1,
            },
            "s".into(),
        );
        assert!(refused(&sem, "me", &o, None).contains("limit"));
    }

    #[test]
    fn a_release_is_retried_once_then_unknown() {
        let lost = LostState::new(
            Some(Instant::now() + Duration::from_secs(9)),
            LostReason::Unreachable,
        );
        let reset = || -> RedisResult<Value> {
            Err(std::io::Error::from(std::io::ErrorKind::ConnectionReset).into())
        };
        assert_eq!(release_answer(reset(), false), Release::Retry);
        assert_eq!(
            release_answer(reset(), true),
            Release::Done(Unlock::Unknown)
        );
        assert_eq!(settle(Unlock::Unknown, &lost), Unlock::Unknown);
        assert!(
            !lost.is_lost() && lost.valid_until().is_some(),
            "the clock runs on"
        );
        assert_eq!(
            release_answer(Ok(Value::Int(1)), true),
            Release::Done(Unlock::Released)
        );
        settle(Unlock::Released, &lost);
        assert_eq!(lost.valid_until(), None, "let go: the clock stops");
        let notheld = redis::parse_redis_value(b"-NOTHELD the owner holds nothing\r\n")
            .and_then(Value::extract_error);
        let gone = LostState::new(None, LostReason::Unreachable);
        if let Release::Done(u) = release_answer(notheld, false) {
            settle(u, &gone);
        }
        assert_eq!(gone.reason(), Some(LostReason::NotHeld));
    }

    #[test]
    fn a_late_grant_is_re_anchored_and_an_early_one_is_not() {
        let (o, t0) = (opts(), Instant::now());
        let spec = LockSpec::new(LockKind::Mutex, "k".into());
        let mut m = Acquire::new(&spec, "me".into(), &o, None, None, t0).unwrap();
        m.start(t0);
        let early = t0 + Duration::from_secs(1);
        match m.on_reply(Value::Int(7), early).unwrap() {
            Step::Done(Some(g)) => assert_eq!((g.token, g.anchored), (7, t0)),
            _ => panic!("an early grant is done"),
        }
        let mut m = Acquire::new(&spec, "me".into(), &o, None, None, t0).unwrap();
        m.start(t0);
        // Later than a quarter of the 30 s lease: RENEW, anchored when it was sent.
        let late = t0 + Duration::from_secs(8);
        let (w, _) = sent(m.on_reply(Value::Int(9), late).unwrap());
        assert_eq!(w, ["DLOCK.RENEW", "k", "me", "PX", "30000"]);
        match m
            .on_reply(Value::Int(1), late + Duration::from_millis(1))
            .unwrap()
        {
            Step::Done(Some(g)) => assert_eq!((g.token, g.anchored), (9, late)),
            _ => panic!("a re-anchored grant is done"),
        }
    }

    #[test]
    fn notification_wait_asks_subscribes_asks_listens() {
        let (o, t0) = (opts(), Instant::now());
        let mut spec = LockSpec::new(LockKind::Fair, "k".into());
        spec.wait_mode = WaitMode::Notifications;
        let mut m = Acquire::new(
            &spec,
            "me".into(),
            &o,
            Some(Duration::from_secs(3)),
            None,
            t0,
        )
        .unwrap();
        let (w, _) = sent(m.start(t0));
        assert_eq!(w.last().map(String::as_str), Some("0"), "WAIT 0");
        match m.on_reply(Value::Nil, t0).unwrap() {
            Step::Subscribe(ch, _) => assert_eq!(ch, "dlock:{k}"),
            _ => panic!("expected a subscription"),
        }
        sent(m.on_subscribed(t0));
        match m.on_reply(Value::Nil, t0).unwrap() {
            // A fair lock listens at most 1 s between asks.
            Step::Listen(d) => assert_eq!(d, Duration::from_secs(1)),
            _ => panic!("expected to listen"),
        }
        sent(m.on_notice(t0 + Duration::from_secs(3)));
        let end = t0 + Duration::from_secs(3);
        // A fair lock that gives up cancels its queue place.
        match m.on_reply(Value::Nil, end).unwrap() {
            Step::GiveUp(c, _) => assert_eq!(words(&c), ["DLOCK.CANCEL", "k", "me"]),
            _ => panic!("expected a give-up with DLOCK.CANCEL"),
        }
    }

    #[test]
    fn only_an_unknown_command_stops_the_cancels() {
        let c = Cancel::default();
        assert!(c.wanted());
        c.answered(&Ok(Value::Int(1)));
        c.answered(&Err(redis::RedisError::from((
            redis::ErrorKind::Io,
            "down",
        ))));
        assert!(c.wanted(), "a failed CANCEL is ignored");
        c.answered(&Err(redis::RedisError::from((
            redis::ErrorKind::Server(redis::ServerErrorKind::ResponseError),
            "An error was signalled by the server",
            "unknown command 'DLOCK.CANCEL', with args beginning with: 'k' 'me' ".to_string(),
        ))));
        assert!(!c.wanted(), "a module without CANCEL is not asked again");
    }

    #[test]
    fn a_latch_reply_that_misses_the_deadline_ends_the_wait() {
        let (o, t0) = (opts(), Instant::now());
        let m = LatchWait::new("l", Duration::from_millis(100), &o, t0);
        let (c, timeout) = m.next(t0);
        assert_eq!(words(&c), ["DLOCK.AWAIT", "l", "WAIT", "100"]);
        assert_eq!(
            timeout,
            Duration::from_millis(200),
            "the deadline, plus grace"
        );
        let late: RedisResult<Value> =
            Err(std::io::Error::from(std::io::ErrorKind::TimedOut).into());
        let end = t0 + Duration::from_millis(200);
        assert_eq!(m.on_result(late, end).unwrap(), Some(false));
        let down: RedisResult<Value> =
            Err(std::io::Error::from(std::io::ErrorKind::ConnectionRefused).into());
        assert!(
            m.on_result(down, t0).is_err(),
            "a failure before the deadline is one"
        );
        assert_eq!(m.on_result(Ok(Value::Int(1)), end).unwrap(), Some(true));
    }

    #[test]
    fn a_lease_is_valid_until_its_end_less_the_margin() {
        let t0 = Instant::now();
        // min(lease / 2, lease / 100 + 50 ms)
        for (lease, valid) in [(10_000, 9_850), (2_000, 1_930), (30_000, 29_650), (60, 30)] {
            let end = lease_end(t0, Duration::from_millis(lease));
            assert_eq!(end, t0 + Duration::from_millis(valid), "lease {lease} ms");
        }
        assert_eq!(lease_end(t0, Duration::ZERO), t0);
    }
}
