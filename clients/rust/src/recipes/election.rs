//! `Election`: leader election on one fair lock (etcd's `concurrency.Election`,
//! Curator's `LeaderLatch`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use redis::{Cmd, Value};

use super::listen;
use crate::blocking::Inner;
use crate::core::notice::NoticeId;
use crate::core::{lease_end, renewal};
use crate::error::{Error, Result};
use crate::lost::{LostReason, LostSignal, LostState};
use crate::watchdog::{Watch, Watchdog};
use crate::{ceil_ms, channel_for, cmd, Client, LockKind, Unlock};

static ELECTIONS: AtomicU64 = AtomicU64::new(1);

/// The companion key that holds the proclaimed value of election `name`, in the lock
/// key's hash slot: `{name}:proclaimed`, or `name:proclaimed` when `name` has a hash tag.
///
/// ```
/// use dlock_client::recipes::value_key;
/// assert_eq!(value_key("svc"), "{svc}:proclaimed");
/// assert_eq!(value_key("{app}:leader"), "{app}:leader:proclaimed");
/// ```
pub fn value_key(name: &str) -> String {
    if channel_for(name) == format!("dlock:{name}") {
        format!("{name}:proclaimed")
    } else {
        format!("{{{name}}}:proclaimed")
    }
}

/// Who leads a term: its owner id, the term's fencing token, and the value it
/// proclaimed during this term (`None` when it has proclaimed nothing yet).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leader {
    /// The leader's owner id.
    pub owner: String,
    /// The term's fencing token.
    pub token: u64,
    /// The value proclaimed in this term.
    pub value: Option<String>,
}

/// Leader election on one fair lock (see `docs/recipes.md`).
///
/// ```no_run
/// use std::time::Duration;
/// use dlock_client::{Client, recipes::Election};
///
/// let client = Client::open("redis://127.0.0.1/")?;
/// let election = Election::new(&client, "billing-leader").bind(true);
/// let term = election.campaign()?;            // waits, FIFO, on the server
/// term.proclaim("10.0.0.7:8080")?;            // fenced: only this term can write it
/// while !term.is_lost() {
///     // ... lead ...
///     # break;
/// }
/// term.resign()?;
/// # Ok::<(), dlock_client::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Election {
    inner: Arc<Inner>,
    name: String,
    owner: String,
    lease: Duration,
    /// `None`: a third of the lease.
    renew_interval: Option<Duration>,
    bind: bool,
    lock_delay_ms: u64,
}

impl Election {
    /// The election `name` (its lock key) through `client`, with the client's watchdog
    /// lease and renew interval, no `BIND`, no `LOCKDELAY`, and an owner id of its own.
    pub fn new(client: &Client, name: impl Into<String>) -> Election {
        let inner = client.inner.clone();
        let owner = format!(
            "{}:election{}",
            inner.owner(),
            ELECTIONS.fetch_add(1, Ordering::Relaxed)
        );
        Election {
            lease: inner.opts.watchdog_lease,
            renew_interval: inner.opts.renew_interval,
            inner,
            name: name.into(),
            owner,
            bind: false,
            lock_delay_ms: 0,
        }
    }
    /// Campaigns with this owner id (e.g. the host name).
    pub fn owner(mut self, owner: impl Into<String>) -> Election {
        self.owner = owner.into();
        self
    }
    /// The term's lease (renewed by its watchdog). Must be positive: a campaign with a
    /// zero lease is refused ([`Error::Invalid`]). Unless a renew interval was given
    /// (here or in the client's [`crate::Options`]), the term renews every third of it.
    pub fn lease(mut self, lease: Duration) -> Election {
        self.lease = lease;
        self
    }
    /// How often the term's watchdog renews (below the lease, or the campaign is
    /// refused).
    pub fn renew_interval(mut self, interval: Duration) -> Election {
        self.renew_interval = Some(interval);
        self
    }
    /// `BIND`: the term is bound to a connection of its own, so a process that dies loses
    /// leadership at once (`disconnected`) instead of after the lease.
    pub fn bind(mut self, on: bool) -> Election {
        self.bind = on;
        self
    }
    /// `LOCKDELAY`: after a term that ends other than by resigning, nobody leads for
    /// `delay` (Chubby's lock-delay).
    pub fn lock_delay(mut self, delay: Duration) -> Election {
        self.lock_delay_ms = ceil_ms(delay);
        self
    }
    /// The election's name (its lock key).
    pub fn name(&self) -> &str {
        &self.name
    }
    /// The owner id this election campaigns with.
    pub fn owner_id(&self) -> &str {
        &self.owner
    }

    /// Waits (on the server, FIFO among campaigners) until this process leads.
    pub fn campaign(&self) -> Result<Term> {
        match self.try_campaign(None)? {
            Some(t) => Ok(t),
            None => Err(Error::Unexpected(
                "an unbounded campaign ended without a grant".into(),
            )),
        }
    }

    /// Waits at most `wait` (`None`: as long as it takes) until this process leads. A
    /// campaign that gives up leaves the queue at once (`DLOCK.CANCEL`).
    pub fn try_campaign(&self, wait: Option<Duration>) -> Result<Option<Term>> {
        let inner = &self.inner;
        let slice = inner.opts.server_wait_slice();
        let deadline = wait.map(|w| crate::later(Instant::now(), w));
        crate::core::check_key(&self.name)?;
        crate::core::check_owner(&self.owner)?;
        let lease_ms = crate::lease_ms(self.lease, "Election::lease")?;
        let interval = self.interval();
        if interval.is_zero() || interval >= self.lease {
            return Err(Error::Invalid(format!(
                "Election::renew_interval must be positive and below Election::lease ({:?}), \
                 got {interval:?}",
                self.lease
            )));
        }
        let mut con = inner.connect(inner.opts.connect_timeout)?;
        loop {
            let sent = Instant::now();
            let left = deadline.map(|d| d.saturating_duration_since(sent));
            let step = left.map_or(slice, |l| l.min(slice));
            let wait_ms = u64::try_from(step.as_millis()).unwrap_or(u64::MAX);
            let mut c = cmd::acquire(LockKind::Fair, &self.name, &self.owner, lease_ms, wait_ms);
            cmd::hold_opts(
                &mut c,
                cmd::HoldOpts {
                    bind: self.bind,
                    lock_delay_ms: self.lock_delay_ms,
                },
            );
            let t = crate::core::reply_timeout(&inner.opts, left).max(Duration::from_millis(1));
            con.set_read_timeout(Some(t))?;
            con.set_write_timeout(Some(t))?;
            let v: Value = c.query(&mut con)?;
            if let Some(token) = cmd::token(v)? {
                let mut anchored = sent;
                let now = Instant::now();
                if now.saturating_duration_since(sent) > crate::lease_clock_slack(self.lease) {
                    // Granted late in a long wait: restart the lease from a known instant.
                    let r: Value = cmd::renew(&self.name, &self.owner, lease_ms).query(&mut con)?;
                    if cmd::renewed(&r) != Some(true) {
                        continue;
                    }
                    anchored = now;
                }
                let bound = if self.bind { Some(con) } else { None };
                let term = Term::start(self, token, anchored, bound)?;
                self.publish("elected");
                return Ok(Some(term));
            }
            if let Some(d) = deadline {
                if Instant::now() >= d {
                    // Gives the campaign's queue place up, so the next campaigner is
                    // served at once instead of after dlock.fair-queue-timeout-ms.
                    let cancel = cmd::cancel(&self.name, &self.owner);
                    self.inner.cancel_later(cancel, inner.opts.command_timeout);
                    return Ok(None);
                }
            }
        }
    }

    /// The term's renew interval: the one given, or a third of the lease.
    fn interval(&self) -> Duration {
        self.renew_interval
            .unwrap_or_else(|| crate::part(self.lease, 3))
    }

    /// Tells observers to look again, on the lock's own channel (every client treats any
    /// message there as "look again").
    fn publish(&self, what: &str) {
        let mut c = redis::cmd("PUBLISH");
        c.arg(channel_for(&self.name)).arg(what);
        let _ = self.inner.run(&c, self.inner.opts.command_timeout);
    }

    /// Who leads now (`DLOCK.INFO`) and the value it proclaimed in this term — `None`
    /// when nobody leads (also during a lock-delay after a lost term).
    pub fn leader(&self) -> Result<Option<Leader>> {
        let t = self.inner.opts.command_timeout;
        // The value first, then the holder: a value is shown only when it was written
        // under the holder's token.
        let mut hget = redis::cmd("HGETALL");
        hget.arg(value_key(&self.name));
        let proclaimed = self.inner.run(&hget, t)?;
        let mut info = redis::cmd("DLOCK.INFO");
        info.arg(&self.name);
        let v = self.inner.run(&info, t)?;
        let Some(holders) = field(&v, "holders") else {
            return Ok(None);
        };
        let Value::Array(holders) = holders else {
            return Ok(None);
        };
        for h in holders {
            if field(h, "delayed").is_some() {
                continue;
            }
            let (Some(owner), Some(Value::Int(token))) = (field(h, "owner"), field(h, "token"))
            else {
                continue;
            };
            let token = u64::try_from(*token).unwrap_or(0);
            let value = match (field(&proclaimed, "token"), field(&proclaimed, "value")) {
                (Some(t), Some(val)) if text(t).parse::<u64>().ok() == Some(token) => {
                    Some(text(val))
                }
                _ => None,
            };
            return Ok(Some(Leader {
                owner: text(owner),
                token,
                value,
            }));
        }
        Ok(None)
    }

    /// Every change of leader (or of its proclaimed value), driven by the lock's
    /// notifications: see [`Observer`].
    pub fn observe(&self) -> Result<Observer> {
        let (tx, rx) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let handle = listen(
            &self.inner,
            channel_for(&self.name),
            stop.clone(),
            move || tx.send(()).is_ok(),
        )?;
        Ok(Observer {
            election: self.clone(),
            rx,
            stop,
            handle: Some(handle),
            last: None,
        })
    }
}

fn text(v: &Value) -> String {
    match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        Value::Int(i) => i.to_string(),
        other => format!("{other:?}"),
    }
}

/// The value of `name` in a flat field/value array (or a map).
fn field<'a>(v: &'a Value, name: &str) -> Option<&'a Value> {
    match v {
        Value::Array(items) => items
            .chunks(2)
            .find(|kv| kv.first().map(text).as_deref() == Some(name))
            .and_then(|kv| kv.get(1)),
        Value::Map(items) => items
            .iter()
            .find(|(k, _)| text(k) == name)
            .map(|(_, val)| val),
        _ => None,
    }
}

/// Leader changes of one [`Election`]: the first [`Observer::next`] answers the current
/// state, each later one the next state that differs (`None`: nobody leads). A thread
/// subscribed to the lock's channel wakes it; each message means "look again"
/// (`DLOCK.INFO`), so nothing polls. Dropping it stops the thread.
#[derive(Debug)]
pub struct Observer {
    election: Election,
    rx: mpsc::Receiver<()>,
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
    last: Option<Option<Leader>>,
}

impl Observer {
    /// The next state that differs from the last one answered (the first call: the
    /// current state): `Ok(Some(state))`, or `Ok(None)` when nothing changed within
    /// `timeout`.
    #[allow(clippy::option_option)]
    pub fn next(&mut self, timeout: Duration) -> Result<Option<Option<Leader>>> {
        let end = crate::later(Instant::now(), timeout);
        let mut dirty = self.last.is_none();
        loop {
            if dirty {
                // Drain what is queued: one look covers them all.
                while self.rx.try_recv().is_ok() {}
                let now = self.election.leader()?;
                if self.last.as_ref() != Some(&now) {
                    self.last = Some(now.clone());
                    return Ok(Some(now));
                }
            }
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            match self.rx.recv_timeout(left) {
                Ok(()) => dirty = true,
                Err(mpsc::RecvTimeoutError::Timeout) => return Ok(None),
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(Error::Unexpected(
                        "the observer's subscription ended".into(),
                    ))
                }
            }
        }
    }
}

impl Iterator for Observer {
    type Item = Result<Option<Leader>>;
    /// Blocks until the next change.
    fn next(&mut self) -> Option<Self::Item> {
        loop {
            match Observer::next(self, Duration::from_secs(3600)) {
                Ok(Some(state)) => return Some(Ok(state)),
                Ok(None) => {}
                Err(e) => return Some(Err(e)),
            }
        }
    }
}

impl Drop for Observer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// A won campaign: leadership until [`Term::resign`] (or drop) or until it is lost.
///
/// The lost signal fires the moment leadership is known to be over: a renewal answered
/// 0; no renewal got through before the lease could have ended (the lease clock of
/// docs/clients.md, a timer of its own); or a notice on the lock's channel after which
/// `DLOCK.CHECK` says the term's token is no longer live (force-release
/// ([`LostReason::Forced`]), a `BIND` connection that closed
/// ([`LostReason::Disconnected`])), heard by the client's one subscriber.
pub struct Term {
    inner: Arc<Inner>,
    name: String,
    owner: String,
    token: u64,
    lost: Arc<LostState>,
    watchdog: Option<Watchdog>,
    notice: NoticeId,
    /// The bound connection (`BIND`): the term lives as long as it is open.
    conn: Option<redis::Connection>,
    done: bool,
}

impl std::fmt::Debug for Term {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Term")
            .field("name", &self.name)
            .field("owner", &self.owner)
            .field("token", &self.token)
            .field("bound", &self.conn.is_some())
            .finish_non_exhaustive()
    }
}

impl Term {
    fn start(
        e: &Election,
        token: u64,
        anchored: Instant,
        conn: Option<redis::Connection>,
    ) -> Result<Term> {
        let inner = e.inner.clone();
        let lost = LostState::new(Some(lease_end(anchored, e.lease)), LostReason::Unreachable);
        let renew = cmd::renew(&e.name, &e.owner, ceil_ms(e.lease).max(1));
        let i2 = inner.clone();
        let watchdog = Watchdog::spawn(
            Watch {
                lease: e.lease,
                interval: e.interval(),
                confirmed: anchored,
                lost: lost.clone(),
            },
            move |timeout| renewal(i2.run(&renew, timeout)),
        );
        let notice = inner.watch(&e.name, token, &lost, Some(watchdog.halt()));
        Ok(Term {
            inner,
            name: e.name.clone(),
            owner: e.owner.clone(),
            token,
            lost,
            watchdog: Some(watchdog),
            notice,
            conn,
            done: false,
        })
    }

    /// The term's fencing token: strictly greater than every earlier term's.
    pub fn token(&self) -> u64 {
        self.token
    }
    /// The leader's owner id.
    pub fn owner(&self) -> &str {
        &self.owner
    }
    /// True once leadership is known to be over (also when the last confirmed lease has
    /// run out on this process's clock, less the margin).
    pub fn is_lost(&self) -> bool {
        self.lost.is_lost()
    }
    /// The "leadership lost" signal, to wait on or await.
    pub fn lost_signal(&self) -> LostSignal {
        LostSignal(self.lost.clone())
    }
    /// When the term counts as over on this process's clock unless a renewal gets
    /// through first (now, once it is over).
    pub fn valid_until(&self) -> Instant {
        self.lost.valid_until().unwrap_or_else(Instant::now)
    }

    /// `DLOCK.FENCED name token command…`: runs only while this term lasts (an error
    /// with [`Error::is_fenced`] otherwise, and the lost signal fires).
    pub fn fenced(&self, command: &Cmd) -> Result<Value> {
        super::fenced(&self.inner, &self.name, self.token, &self.lost, command)
    }

    /// Publishes `value` (e.g. this leader's address) for [`Election::leader`] and
    /// observers: `HSET {name}:proclaimed token <t> owner <o> value <v>` through
    /// `DLOCK.FENCED` under the term's token, so only the current term's leader can write
    /// it; fails with [`Error::is_fenced`] when the term is over.
    pub fn proclaim(&self, value: &str) -> Result<()> {
        let mut hset = redis::cmd("HSET");
        hset.arg(value_key(&self.name))
            .arg("token")
            .arg(self.token)
            .arg("owner")
            .arg(&self.owner)
            .arg("value")
            .arg(value);
        self.fenced(&hset)?;
        let mut c = redis::cmd("PUBLISH");
        c.arg(channel_for(&self.name)).arg("proclaimed");
        let _ = self.inner.run(&c, self.inner.opts.command_timeout);
        Ok(())
    }

    /// Ends the term: deletes the proclaimed value (fenced) and releases the lock, which
    /// hands it to the next campaigner in line. [`Unlock::Released`], [`Unlock::Lost`]
    /// when the term had already ended, or [`Unlock::Unknown`] when the release failed
    /// on its connection and on a fresh one (the term is not renewed any more).
    pub fn resign(mut self) -> Result<Unlock> {
        Ok(self.end())
    }

    fn end(&mut self) -> Unlock {
        self.done = true;
        if let Some(mut w) = self.watchdog.take() {
            w.stop();
        }
        self.inner.notices.unwatch(self.notice);
        let t = self.inner.opts.command_timeout;
        let mut del = redis::cmd("DEL");
        del.arg(value_key(&self.name));
        let _ = self
            .inner
            .run(&cmd::fenced(&self.name, self.token, &del), t);
        let release = cmd::release(LockKind::Fair, &self.name, &self.owner);
        let outcome = self.inner.unlock(&release, &self.lost);
        self.conn = None;
        outcome
    }
}

impl Drop for Term {
    fn drop(&mut self) {
        if !self.done {
            self.end();
        }
    }
}
