//! # dlock-core — the lock state machine of dlock, in plain Rust
//!
//! Every rule of docs/commands.md lives here. Nothing here knows about Redis
//! (no `redis-module`, no FFI): time comes in as arguments (`now` in unix
//! milliseconds, `now_us` in unix microseconds for token issue), and whether a
//! blocked waiter's connection is still alive comes in as a predicate. The
//! module crate (`dlock`) parses, calls one of these methods, and turns the
//! outcome into replies, replication, notifications and wake-ups; the client
//! crate and the tests build payloads with [`codec`].
//!
//! One [`Lock`] value lives in one Redis key and has one [`Kind`] for life.
//! Holders carry a count (reentrancy), an absolute lease end and the fencing
//! token of their grant. Waiters form one FIFO queue per lock; each is either
//! *blocked* (a connection waits on the server with `WAIT`) or *queued* (a
//! fair-lock owner that polls and must ask again before its place expires).
//!
//! Whether a request may be granted now is decided in one place,
//! [`Lock::decide`] (`rule.rs`); every grant, handoff and shortcut asks it.

// Module code runs inside redis-server: a panic aborts the user's whole
// server. The core is linked into the module, so the same rules hold here.
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::indexing_slicing
    )
)]
#![forbid(unsafe_code)]

#[cfg(any(test, feature = "rng"))]
pub mod checks;
pub mod codec;
mod compact;
pub mod deadlines;
pub mod deadlock;
mod handoff;
pub mod histogram;
mod journal;
mod latch;
mod queue;
#[cfg(any(test, feature = "rng"))]
pub mod rng;
mod rule;
mod semaphore;
pub mod slowlog;

pub use codec::Delta;
pub use compact::Compact;
pub use journal::Edit;
pub use latch::Countdown;
pub use rule::{Ask, Decision};

use smallvec::SmallVec;
use std::collections::VecDeque;

/// Room for one more element: exact while the collection is small (most
/// locks have one holder and a short queue: memory per lock), amortized
/// doubling beyond, so that 10 000 waiters or readers cost O(n) to add,
/// not O(n²) reallocations.
macro_rules! reserve_one {
    ($c:expr) => {
        if $c.len() < 8 {
            $c.reserve_exact(1);
        } else {
            $c.reserve(1);
        }
    };
}

/// An owner name, stored inline when it is as short as most are (a UUID
/// plus a thread id), so a held lock is one allocation.
pub type Owner = SmallVec<[u8; OWNER_INLINE]>;
/// Owner bytes kept inline in a hold.
pub const OWNER_INLINE: usize = 40;

/// Longest owner accepted, in bytes.
pub const MAX_OWNER_LEN: usize = 512;
/// Largest lease or wait, in milliseconds (2^40).
pub const MAX_MS: u64 = 1 << 40;
/// Latest lease end or deadline accepted in a payload, unix ms (2^42, in
/// the year 2109: any real `now + 2^40`).
pub const MAX_INSTANT: u64 = 1 << 42;
/// Largest token we ever issue: tokens are replied as signed 64-bit integers.
pub const MAX_TOKEN: u64 = i64::MAX as u64;

/// The kind of a lock, fixed when the lock is created.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Reentrant mutex (`DLOCK.ACQUIRE`).
    Mutex,
    /// Read-write lock (`DLOCK.RWACQUIRE`).
    Rw,
    /// Fair FIFO mutex (`DLOCK.FAIRACQUIRE`).
    Fair,
    /// Counting semaphore (`DLOCK.SEMACQUIRE`): a fixed limit of permits,
    /// held per owner with a lease and a token.
    Semaphore,
    /// Countdown latch (`DLOCK.LATCHSET`, `COUNTDOWN`, `AWAIT`).
    Latch,
}

impl Kind {
    /// The name used in replies and errors.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Mutex => "mutex",
            Kind::Rw => "rw",
            Kind::Fair => "fair",
            Kind::Semaphore => "semaphore",
            Kind::Latch => "latch",
        }
    }

    pub(crate) fn code(self) -> u8 {
        match self {
            Kind::Mutex => 0,
            Kind::Rw => 1,
            Kind::Fair => 2,
            Kind::Semaphore => 3,
            Kind::Latch => 4,
        }
    }

    pub(crate) fn from_code(c: u8) -> Option<Kind> {
        match c {
            0 => Some(Kind::Mutex),
            1 => Some(Kind::Rw),
            2 => Some(Kind::Fair),
            3 => Some(Kind::Semaphore),
            4 => Some(Kind::Latch),
            _ => None,
        }
    }

    /// Whether `mode` is a mode this kind of lock can be held or awaited in.
    pub fn allows(self, mode: Mode) -> bool {
        match self {
            Kind::Mutex | Kind::Fair => mode == Mode::Exclusive,
            Kind::Rw => matches!(mode, Mode::Read | Mode::Write),
            Kind::Semaphore => mode == Mode::Permit,
            Kind::Latch => mode == Mode::Await,
        }
    }
}

/// How a hold is held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// The only mode of mutex and fair locks.
    Exclusive,
    /// Shared mode of an rw lock.
    Read,
    /// Exclusive mode of an rw lock.
    Write,
    /// Permits of a semaphore (a hold's count is its number of permits).
    Permit,
    /// A connection waiting in `DLOCK.AWAIT` for a latch to open.
    Await,
}

impl Mode {
    /// The name used in replies.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Exclusive => "exclusive",
            Mode::Read => "read",
            Mode::Write => "write",
            Mode::Permit => "permit",
            Mode::Await => "await",
        }
    }

    pub(crate) fn code(self) -> u8 {
        match self {
            Mode::Exclusive => 0,
            Mode::Read => 1,
            Mode::Write => 2,
            Mode::Permit => 3,
            Mode::Await => 4,
        }
    }

    pub(crate) fn from_code(c: u8) -> Option<Mode> {
        match c {
            0 => Some(Mode::Exclusive),
            1 => Some(Mode::Read),
            2 => Some(Mode::Write),
            3 => Some(Mode::Permit),
            4 => Some(Mode::Await),
            _ => None,
        }
    }
}

/// One hold of one owner in one mode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holder {
    pub owner: Owner,
    pub mode: Mode,
    /// Reentrant count, at least 1.
    pub count: u32,
    /// Absolute lease end, unix ms.
    pub expires_at: u64,
    /// Fencing token of the grant that created this hold.
    pub token: u64,
    /// `BIND`: the id of the connection this hold is bound to (0: not
    /// bound; [`BOUND_ELSEWHERE`]: bound to a connection of another process
    /// — loaded from a payload, e.g. on a replica or after a restart).
    pub bound: u64,
    /// `LOCKDELAY`: ms this hold keeps excluding everyone after it ends
    /// other than by RELEASE or FORCERELEASE (0: none).
    pub delay_ms: u64,
    /// Whether the hold has ended and is in its lock-delay (until
    /// `expires_at`): it excludes as it did, but nobody can renew, release
    /// or re-enter it, and its token is not live.
    pub delayed: Delayed,
    /// Unix ms when the hold was first granted (re-entry and renewal keep
    /// it; 0: unknown, a hold loaded from a payload written before it was
    /// recorded). `DLOCK.INFO`'s `held_ms`, the hold histograms.
    pub granted_at: u64,
}

/// The state of a hold's lock-delay.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Delayed {
    /// A live hold.
    #[default]
    No,
    /// Its lease ended; `expired` is published when the delay is over.
    Expired,
    /// Its bound connection closed; `disconnected` is published then.
    Disconnected,
}

impl Holder {
    /// A live hold (not in its lock-delay).
    pub fn is_live(&self) -> bool {
        self.delayed == Delayed::No
    }

    /// Ends this hold for `cause` at `at`: true when it must be removed now,
    /// false when it enters its lock-delay instead.
    fn end(&mut self, cause: Delayed, at: u64) -> bool {
        if !self.is_live() || self.delay_ms == 0 {
            return true;
        }
        self.delayed = cause;
        self.bound = 0;
        self.expires_at = at.saturating_add(self.delay_ms);
        false
    }
}

/// [`Holder::bound`] of a hold bound to a connection this process does not
/// have (the flag came through a payload).
pub const BOUND_ELSEWHERE: u64 = u64::MAX;

/// One place in the queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Waiter {
    /// Unique id; for a blocked waiter it names the waiting connection.
    pub id: u64,
    pub owner: Box<[u8]>,
    pub mode: Mode,
    /// True while a connection waits on the server for this place.
    pub blocked: bool,
    /// Absolute unix ms: end of the server-side wait (blocked), or the
    /// instant a queued owner loses its place unless it asks again.
    pub expires_at: u64,
    /// Permits the place asks for: `PERMITS k` of a semaphore waiter, 1
    /// for every other kind.
    pub permits: u32,
    /// Unix ms when the place was taken (kept when a blocked wait takes
    /// over a queued place or a fair waiter keeps its place; 0: unknown).
    /// `DLOCK.INFO`'s `waited_ms`; set by [`Lock::stamp_wait`].
    pub since: u64,
}

impl Waiter {
    fn mode_fits(&self, kind: Kind) -> bool {
        kind.allows(self.mode)
    }
}

/// Why an operation was refused. Nothing changes when one is returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockError {
    /// The lock is of another kind than the command works on.
    WrongKind { found: Kind },
    /// The owner holds nothing (never did, lease ended, or force-released).
    NotHeld,
    /// The owner holds both READ and WRITE and did not say which to release.
    ModeRequired,
    /// A READ|WRITE mode was given for a lock that is not an rw lock.
    ModeNotApplicable,
    /// Another reader already waits to upgrade: waiting too would deadlock.
    UpgradeDeadlock,
    /// The reentrant count would overflow.
    CountOverflow,
    /// No token is left (more than 2^63 grants).
    TokensExhausted,
    /// A semaphore request named another limit than the one in force.
    LimitMismatch { limit: u64 },
    /// A semaphore request asked for more permits than the limit.
    PermitsOverLimit { limit: u64 },
    /// `PERMITS k` was given for a lock that is not a semaphore.
    PermitsNotApplicable,
    /// The owner holds fewer permits than it asked to release.
    NotEnoughPermits { held: u32 },
    /// The queue already holds `max` places (config `dlock.max-queue`).
    QueueFull { max: usize },
}

/// Issues fencing tokens: strictly increasing, and never below the current
/// unix time in microseconds, so they keep increasing across a restart that
/// lost the counter (the persisted counter covers every other case).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tokens {
    pub last: u64,
}

impl Tokens {
    /// Records a token seen in loaded or replicated state.
    pub fn observe(&mut self, token: u64) {
        self.last = self.last.max(token);
    }

    /// The next token: above every token issued or observed, and above
    /// `floor` (the lock's own last token) and the clock.
    pub fn issue(&mut self, floor: u64, now_us: u64) -> Result<u64, LockError> {
        let base = self.last.max(floor);
        let next = base.checked_add(1).ok_or(LockError::TokensExhausted)?;
        let token = next.max(now_us);
        if token > MAX_TOKEN {
            return Err(LockError::TokensExhausted);
        }
        self.last = token;
        Ok(token)
    }
}

/// What an acquire asks for.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    pub owner: &'a [u8],
    pub mode: Mode,
    pub lease_ms: u64,
    /// The id of the blocked waiter making this request, if it is one.
    pub waiter: Option<u64>,
}

/// The outcome of an acquire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Grant {
    /// Granted: the token, and whether it was a reentrant grant.
    Granted { token: u64, reentrant: bool },
    /// Not grantable now.
    Denied,
}

/// The outcome of a release.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Released {
    /// The hold is gone (count reached zero).
    pub gone: bool,
    /// The lock became grantable to someone who could not have it before.
    pub freed: bool,
}

/// What ending bound holds did ([`Lock::end_bound`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ended {
    /// Bound holds ended (gone, or in their lock-delay).
    pub ended: usize,
    /// The lock became grantable to someone who could not have it before
    /// (no lock-delay held it back): publish `disconnected` now.
    pub freed: bool,
}

/// What [`Lock::tick`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tick {
    /// Holds whose lease ended (gone, or now in their lock-delay).
    pub expired: usize,
    /// Holds whose lock-delay ended (gone).
    pub delay_ended: usize,
    /// Waiters removed: queued places that timed out, blocked waiters whose
    /// connection is gone.
    pub dropped: usize,
    /// The lock became grantable to someone who could not have it before
    /// because a lease (or a lock-delay) ended.
    pub freed: bool,
    /// What `freed` was for the end of a lock-delay that began when a bound
    /// connection closed: publish `disconnected` rather than `expired`.
    pub disconnected: bool,
}

/// One lock: its kind, holders and queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lock {
    kind: Kind,
    last_token: u64,
    /// Semaphore: its limit of permits. Latch: its count (0: open). Other
    /// kinds: 0.
    size: u64,
    /// Inline room for one hold: most locks have one holder.
    holders: SmallVec<[Holder; 1]>,
    /// The queue, with its bookkeeping: how it changed since the last
    /// commit (for replicating the change rather than the whole queue) and
    /// no queued place ending before a bound (`Queue::due`).
    queue: queue::Queue,
}

impl Lock {
    /// A new, empty lock of `kind`.
    pub fn new(kind: Kind) -> Lock {
        Lock {
            kind,
            last_token: 0,
            size: 0,
            holders: SmallVec::new(),
            queue: queue::Queue::rewrite_all(VecDeque::new()),
        }
    }

    pub(crate) fn from_parts(
        kind: Kind,
        last_token: u64,
        holders: Vec<Holder>,
        waiters: VecDeque<Waiter>,
    ) -> Lock {
        Lock {
            kind,
            last_token,
            size: 0,
            holders: SmallVec::from_vec(holders),
            queue: queue::Queue::rewrite_all(waiters),
        }
    }

    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// The last token issued for this lock.
    pub fn last_token(&self) -> u64 {
        self.last_token
    }

    pub fn holders(&self) -> &[Holder] {
        &self.holders
    }

    pub fn waiters(&self) -> &VecDeque<Waiter> {
        &self.queue
    }

    /// After the change was replicated (the command layer's commit): the
    /// queue as it is now is what replicas have.
    pub fn journal_reset(&mut self) {
        self.queue.committed();
    }

    /// Entries the journal's bookkeeping holds (the queued-owner set and
    /// the edits since the last commit): after a commit, bounded by the
    /// queue's length (the simulator's memory invariant, the tests').
    pub fn journal_entries(&self) -> usize {
        self.queue.journal_entries()
    }

    /// Whether the queue changed since the last commit.
    pub fn journal_dirty(&self) -> bool {
        self.queue.dirty()
    }

    /// Whether the next commit can send a delta ([`codec`]'s
    /// `encode_delta`), rather than the whole state.
    pub fn delta_ok(&self) -> bool {
        self.queue.delta_ok()
    }

    /// No holder and no waiter (a latch: open): the key should not exist.
    pub fn is_empty(&self) -> bool {
        if self.kind == Kind::Latch {
            return self.size == 0 && self.queue.is_empty();
        }
        self.holders.is_empty() && self.queue.is_empty()
    }

    /// Whether any connection waits on the server for this lock.
    pub fn has_blocked(&self) -> bool {
        self.queue.iter().any(|w| w.blocked)
    }

    /// Fails unless the lock is of `kind`.
    pub fn check_kind(&self, kind: Kind) -> Result<(), LockError> {
        if self.kind == kind {
            Ok(())
        } else {
            Err(LockError::WrongKind { found: self.kind })
        }
    }

    /// The earliest instant at which [`Lock::tick`] has work: a lease end or
    /// the end of a queued (not blocked) place. `None` when there is none.
    /// Blocked waiters are timed out by the server's own blocking machinery
    /// (a latch's too, but their deadlines count here: see the body).
    pub fn next_deadline(&self) -> Option<u64> {
        let h = self.holders.iter().map(|h| h.expires_at);
        // A latch has no holds: its AWAIT places end at their deadline too,
        // so that it is indexed (and pruned after a restart or promotion).
        let latch = self.kind == Kind::Latch;
        let w = self
            .queue
            .iter()
            .filter(|w| !w.blocked || latch)
            .map(|w| w.expires_at);
        h.chain(w).min()
    }

    /// How open the lock is to others, for deciding when to notify:
    /// 0 exclusively held, 1 read by several owners, 2 read by one owner
    /// (who may upgrade), 3 free.
    fn openness(&self) -> u8 {
        let mut first_reader: Option<&[u8]> = None;
        let mut several = false;
        for h in &self.holders {
            if h.mode != Mode::Read {
                return 0;
            }
            match first_reader {
                None => first_reader = Some(&h.owner),
                Some(o) if o != &*h.owner => several = true,
                Some(_) => {}
            }
        }
        match (first_reader, several) {
            (None, _) => 3,
            (Some(_), true) => 1,
            (Some(_), false) => 2,
        }
    }

    /// Removes holds whose lease ended at or before `now`, queued places that
    /// timed out, and blocked waiters whose connection `is_live` says is gone.
    pub fn tick(&mut self, now: u64, is_live: impl Fn(u64) -> bool) -> Tick {
        self.tick_with(now, is_live, true)
    }

    /// [`Lock::tick`], looking at the queue only when `scan`.
    fn tick_with(&mut self, now: u64, is_live: impl Fn(u64) -> bool, scan: bool) -> Tick {
        let before = self.openness();
        let holders_before = self.holders.len();
        // A live hold whose lease ended either goes or enters its
        // lock-delay (counted as expired either way); a delayed hold goes
        // at the end of its delay.
        let mut expired = 0;
        let mut delay_ended = 0;
        let mut disconnected = false;
        self.holders.retain_mut(|h| {
            if h.expires_at > now {
                return true;
            }
            if h.is_live() {
                expired += 1;
                let lease_end = h.expires_at;
                if h.end(Delayed::Expired, lease_end) {
                    return false;
                }
                if h.expires_at > now {
                    return true;
                }
            }
            delay_ended += 1;
            disconnected |= h.delayed == Delayed::Disconnected;
            false
        });
        let removed = holders_before - self.holders.len();
        // Every permit a semaphore hold gives back makes room for someone.
        let sem_freed = self.kind == Kind::Semaphore && removed > 0;
        let waiters_before = self.queue.len();
        let latch = self.kind == Kind::Latch;
        if scan {
            self.queue.retain(|w| {
                if w.blocked {
                    is_live(w.id) && !(latch && w.expires_at <= now)
                } else {
                    w.expires_at > now
                }
            });
            self.queue.recompute_due();
        }
        let dropped = waiters_before - self.queue.len();
        let freed = sem_freed || (removed > 0 && self.openness() > before);
        Tick {
            expired,
            delay_ended,
            dropped,
            freed,
            disconnected: freed && disconnected,
        }
    }

    /// The live hold of `owner` in `mode` (a hold in its lock-delay is
    /// nobody's: it cannot be re-entered, renewed or released).
    fn hold_index(&self, owner: &[u8], mode: Mode) -> Option<usize> {
        self.holders
            .iter()
            .position(|h| h.is_live() && h.mode == mode && &*h.owner == owner)
    }

    /// The live hold of `owner` in `mode`.
    fn live_hold(&self, owner: &[u8], mode: Mode) -> Option<&Holder> {
        self.hold_index(owner, mode)
            .and_then(|i| self.holders.get(i))
    }

    fn holds_any(&self, owner: &[u8]) -> bool {
        self.holders
            .iter()
            .any(|h| h.is_live() && &*h.owner == owner)
    }

    /// Tries to grant `req`. On [`Grant::Denied`] nothing changed; the
    /// caller may then [`Lock::enqueue`] the request. Call [`Lock::tick`]
    /// first so ended leases do not count.
    pub fn acquire(
        &mut self,
        req: &Request<'_>,
        now: u64,
        tokens: &mut Tokens,
        now_us: u64,
    ) -> Result<Grant, LockError> {
        let ask = Ask::hold(req.owner, req.mode);
        self.apply(req, &ask, now, tokens, now_us)
    }

    /// Applies [`Lock::decide`]'s answer to `ask`, made by `req` (its place,
    /// lease): re-enters or creates the hold, issues the token, takes the
    /// place out of the queue. On [`Grant::Denied`] and on errors nothing
    /// changed.
    pub(crate) fn apply(
        &mut self,
        req: &Request<'_>,
        ask: &Ask<'_>,
        now: u64,
        tokens: &mut Tokens,
        now_us: u64,
    ) -> Result<Grant, LockError> {
        let pos = self.place_of(req);
        let (mode, units) = match self.kind {
            Kind::Semaphore => (Mode::Permit, ask.permits),
            _ => (ask.mode, 1),
        };
        let expires_at = now.saturating_add(req.lease_ms);
        let granted = match self.decide(ask, pos) {
            Decision::Error(e) => return Err(e),
            Decision::Deny => return Ok(Grant::Denied),
            Decision::Reenter => {
                let Some(h) = self
                    .hold_index(ask.owner, mode)
                    .and_then(|i| self.holders.get_mut(i))
                else {
                    return Err(LockError::NotHeld);
                };
                h.count = h.count.checked_add(units).ok_or(LockError::CountOverflow)?;
                h.expires_at = expires_at;
                Grant::Granted {
                    token: h.token,
                    reentrant: true,
                }
            }
            Decision::Grant => {
                let token = tokens.issue(self.last_token, now_us)?;
                self.last_token = token;
                // Most locks have one holder: no spare capacity (memory per lock).
                reserve_one!(self.holders);
                self.holders.push(Holder {
                    owner: Owner::from_slice(ask.owner),
                    mode,
                    count: units,
                    expires_at,
                    token,
                    bound: 0,
                    delay_ms: 0,
                    delayed: Delayed::No,
                    granted_at: now,
                });
                Grant::Granted {
                    token,
                    reentrant: false,
                }
            }
        };
        // The place the grant stands for leaves the queue: the request's
        // own, or its owner's queued place. A place where another
        // connection of the owner waits on the server stays: that wait is
        // served next (a re-entry now), never left waiting with no place.
        let taken =
            pos.filter(|&p| req.waiter.is_some() || self.queue.get(p).is_some_and(|w| !w.blocked));
        if let Some(p) = taken {
            self.queue.remove(p);
        }
        Ok(granted)
    }

    /// Puts a denied request in the queue. A blocked waiter gets its own
    /// place; a queued (polling) owner keeps the place it has, or takes one
    /// at the back. A blocked waiter of an owner with a queued place takes
    /// over that place. Returns true when a new place was made.
    pub fn enqueue(
        &mut self,
        owner: &[u8],
        mode: Mode,
        id: u64,
        blocked: bool,
        expires_at: u64,
    ) -> bool {
        let may_queue = self.queue.may_have(owner);
        let existing = if may_queue {
            self.queue
                .iter()
                .position(|w| !w.blocked && w.mode == mode && &*w.owner == owner)
        } else {
            None
        };
        if let Some(p) = existing {
            // A queued place's end is noted by the edit.
            self.queue.edit(p, |w| {
                w.id = id;
                w.blocked = blocked;
                w.expires_at = expires_at;
            });
            return false;
        }
        if !blocked && may_queue && self.queue.iter().any(|w| &*w.owner == owner) {
            // The owner already waits on the server from another connection:
            // that place is its place.
            return false;
        }
        // A queued place's end is noted by the push.
        self.queue.push_back(Waiter {
            id,
            owner: owner.into(),
            mode,
            blocked,
            expires_at,
            permits: 1,
            since: 0,
        });
        true
    }

    /// Records `now` as the start of the wait of the place `id` unless it
    /// has one (a place taken over keeps its start). Call right after
    /// [`Lock::enqueue`] (or its semaphore and latch forms).
    pub fn stamp_wait(&mut self, id: u64, now: u64) {
        if let Some(p) = self.queue.iter().rposition(|w| w.id == id) {
            if self.queue.get(p).is_some_and(|w| w.since == 0) {
                self.queue.edit(p, |w| w.since = now);
            }
        }
    }

    /// Whether [`Lock::enqueue`] of this request may make a new place: it
    /// may unless the queue already holds `max` places. A request that takes
    /// over or keeps a place it has (a queued owner asking again, or waiting
    /// on the server from its queued place) always fits, so a full queue
    /// never costs anyone the place they had.
    pub fn check_room(
        &self,
        owner: &[u8],
        mode: Mode,
        blocked: bool,
        max: usize,
    ) -> Result<(), LockError> {
        if self.queue.len() < max {
            return Ok(());
        }
        let keeps_place = self
            .queue
            .iter()
            .any(|w| &*w.owner == owner && (!blocked || (!w.blocked && w.mode == mode)));
        if keeps_place {
            Ok(())
        } else {
            Err(LockError::QueueFull { max })
        }
    }

    /// The places of connections waiting on the server, in queue order.
    pub fn blocked_waiters(&self) -> Vec<Waiter> {
        self.queue.iter().filter(|w| w.blocked).cloned().collect()
    }

    /// Takes over places from a lock that left this key (deleted, renamed):
    /// they go ahead of every place made since, in their own order. Places
    /// whose id is already here are skipped. Returns true when any was added.
    pub fn adopt(&mut self, places: Vec<Waiter>) -> bool {
        let mut added = false;
        for w in places.into_iter().rev() {
            if w.mode_fits(self.kind) && !self.has_waiter(w.id) {
                self.queue.push_front(w);
                added = true;
            }
        }
        added
    }

    /// For the blocked waiter `id`: true when it has a place and asking now
    /// would certainly be [`Grant::Denied`], provided nothing is due (no
    /// lease or queued place ends at or before now, so [`Lock::tick`] would
    /// change nothing). Lets the command layer skip a full attempt for each
    /// waiter that is not next when a lock changes hands. `false` only means
    /// "ask": it is never wrong to return it. Exactly "[`Lock::decide`]
    /// denies the request the place stands for".
    pub fn surely_denied(&self, id: u64) -> bool {
        self.decide_place(id) == Some(Decision::Deny)
    }

    /// Whether the lock is held in a way that denies every other owner (any
    /// hold of a mutex or fair lock, a WRITE hold of an rw lock), and by
    /// whom. While that holds and nothing is due, every waiter of another
    /// owner is [`Lock::surely_denied`] ([`Lock::decide`] denies every
    /// other owner: the agreement test checks it after every fuzzed step).
    pub fn exclusive_owner(&self) -> Option<&[u8]> {
        let h = match self.kind {
            Kind::Mutex | Kind::Fair => self.holders.first(),
            Kind::Rw => self.holders.iter().find(|h| h.mode == Mode::Write),
            Kind::Semaphore | Kind::Latch => None,
        };
        h.map(|h| &*h.owner)
    }

    /// Whether the waiter with `id` still has a place.
    pub fn has_waiter(&self, id: u64) -> bool {
        self.queue.iter().any(|w| w.id == id)
    }

    /// A blocked waiter's wait ended without a grant. On a fair lock the
    /// owner keeps its place as a queued owner until `queue_deadline`; on
    /// other kinds the place is removed. Returns true when something changed.
    pub fn wait_ended(&mut self, id: u64, queue_deadline: u64) -> bool {
        let Some(p) = self.queue.iter().position(|w| w.id == id) else {
            return false;
        };
        let keeps_place = self.kind == Kind::Fair
            && self.queue.get(p).is_some_and(|w| {
                // An owner is queued once: if it already has a queued place
                // (its other connection's wait ended first), that one stays.
                !self
                    .queue
                    .iter()
                    .any(|o| !o.blocked && o.id != id && o.mode == w.mode && o.owner == w.owner)
            });
        if keeps_place {
            // Now a queued place: its end is noted by the edit.
            self.queue.edit(p, |w| {
                w.blocked = false;
                w.expires_at = queue_deadline;
            });
        } else {
            self.queue.remove(p);
        }
        true
    }

    /// Removes the waiter with `id` (its connection went away).
    pub fn remove_waiter(&mut self, id: u64) -> bool {
        // Ids are unique in a queue: O(1) for the head.
        match self.queue.iter().position(|w| w.id == id) {
            Some(p) => self.queue.remove(p).is_some(),
            None => false,
        }
    }

    /// Takes one hold of `owner` away. `mode` may be left out unless the
    /// owner holds both READ and WRITE.
    pub fn release(&mut self, owner: &[u8], mode: Option<Mode>) -> Result<Released, LockError> {
        match self.kind {
            Kind::Latch => return Err(LockError::WrongKind { found: Kind::Latch }),
            Kind::Semaphore if mode.is_none_or(|m| m == Mode::Permit) => {
                return self.release_permits(owner, 1);
            }
            _ => {}
        }
        if let Some(m) = mode {
            if !self.kind.allows(m) {
                return Err(LockError::ModeNotApplicable);
            }
        }
        let i = match mode {
            Some(m) => self.hold_index(owner, m),
            None => {
                let mut found = self
                    .holders
                    .iter()
                    .enumerate()
                    .filter(|(_, h)| h.is_live() && &*h.owner == owner);
                let first = found.next().map(|(i, _)| i);
                if first.is_some() && found.next().is_some() {
                    return Err(LockError::ModeRequired);
                }
                first
            }
        };
        let i = i.ok_or(LockError::NotHeld)?;
        let before = self.openness();
        let Some(h) = self.holders.get_mut(i) else {
            return Err(LockError::NotHeld);
        };
        h.count = h.count.saturating_sub(1);
        if h.count > 0 {
            return Ok(Released {
                gone: false,
                freed: false,
            });
        }
        self.holders.remove(i);
        Ok(Released {
            gone: true,
            freed: self.openness() > before,
        })
    }

    /// `BIND`: binds the hold of `owner` in `mode` to connection `client`,
    /// unless it is bound already (only the grant that creates a hold binds
    /// it; the command layer calls this after a non-reentrant grant).
    /// Returns true when the hold is now bound to `client`.
    pub fn bind_hold(&mut self, owner: &[u8], mode: Mode, client: u64) -> bool {
        match self
            .hold_index(owner, mode)
            .and_then(|i| self.holders.get_mut(i))
        {
            Some(h) if h.bound == 0 && client != 0 => {
                h.bound = client;
                true
            }
            _ => false,
        }
    }

    /// `LOCKDELAY`: sets the lock-delay of the live hold of `owner` in `mode`
    /// (the command layer calls this after the grant that created it).
    pub fn set_lock_delay(&mut self, owner: &[u8], mode: Mode, ms: u64) {
        if let Some(h) = self
            .hold_index(owner, mode)
            .and_then(|i| self.holders.get_mut(i))
        {
            h.delay_ms = ms.min(MAX_MS);
        }
    }

    /// Ends, whatever their count, the holds bound to connection `client`
    /// at `now` (a hold with a lock-delay enters it instead of going).
    pub fn end_bound(&mut self, client: u64, now: u64) -> Ended {
        self.end_bound_where(now, |b| client != 0 && b == client)
    }

    /// Ends every bound hold (restart, promotion: no connection of this
    /// process can be the one a loaded hold was bound to).
    pub fn end_all_bound(&mut self, now: u64) -> Ended {
        self.end_bound_where(now, |b| b != 0)
    }

    fn end_bound_where(&mut self, now: u64, bound: impl Fn(u64) -> bool) -> Ended {
        let before = self.openness();
        let len = self.holders.len();
        let mut ended = 0;
        self.holders.retain_mut(|h| {
            if !h.is_live() || !bound(h.bound) {
                return true;
            }
            ended += 1;
            !h.end(Delayed::Disconnected, now)
        });
        let removed = len - self.holders.len();
        let freed = removed > 0 && (self.kind == Kind::Semaphore || self.openness() > before);
        Ended { ended, freed }
    }

    /// Restarts the lease of every hold of `owner`. False when it holds none.
    pub fn renew(&mut self, owner: &[u8], lease_ms: u64, now: u64) -> bool {
        let expires_at = now.saturating_add(lease_ms);
        let mut any = false;
        for h in self
            .holders
            .iter_mut()
            .filter(|h| h.is_live() && &*h.owner == owner)
        {
            h.expires_at = expires_at;
            any = true;
        }
        any
    }

    /// Drops every hold, keeping the queue so waiters are served in order.
    /// Returns true when there was a hold to drop.
    pub fn force_release(&mut self) -> bool {
        let had = !self.holders.is_empty();
        self.holders.clear();
        had
    }

    /// Whether `token` is the token of a live hold: one whose lease has not
    /// ended at `now`. A hold whose lease ended but that [`Lock::tick`] has
    /// not yet removed is not live, so the answer never depends on when the
    /// timer runs (`DLOCK.CHECK`, `DLOCK.FENCED`).
    pub fn token_live(&self, token: u64, now: u64) -> bool {
        self.holders
            .iter()
            .any(|h| h.is_live() && h.token == token && h.expires_at > now)
    }

    /// Approximate heap and inline size, for MEMORY USAGE.
    pub fn mem_usage(&self) -> usize {
        let spilled = |cap: usize, elem: usize, on_heap: bool| if on_heap { cap * elem } else { 0 };
        std::mem::size_of::<Lock>()
            + spilled(
                self.holders.capacity(),
                std::mem::size_of::<Holder>(),
                self.holders.spilled(),
            )
            + self
                .holders
                .iter()
                .map(|h| spilled(h.owner.capacity(), 1, h.owner.spilled()))
                .sum::<usize>()
            + self.queue.capacity() * std::mem::size_of::<Waiter>()
            + self.queue.iter().map(|w| w.owner.len()).sum::<usize>()
    }
}

#[cfg(test)]
mod codes {
    //! The one-byte codes of kinds and modes in payloads (crate-private:
    //! the integration tests see them only through the codec).
    use super::*;

    #[test]
    fn kind_and_mode_codes_round_trip_and_refuse_the_rest() {
        let kinds = [
            Kind::Mutex,
            Kind::Rw,
            Kind::Fair,
            Kind::Semaphore,
            Kind::Latch,
        ];
        for kind in kinds {
            assert_eq!(Kind::from_code(kind.code()), Some(kind));
        }
        let modes = [
            Mode::Exclusive,
            Mode::Read,
            Mode::Write,
            Mode::Permit,
            Mode::Await,
        ];
        for mode in modes {
            assert_eq!(Mode::from_code(mode.code()), Some(mode));
        }
        for c in 5..=255u8 {
            assert_eq!(Kind::from_code(c), None);
            assert_eq!(Mode::from_code(c), None);
        }
    }
}
