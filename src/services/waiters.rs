//! The waiter registry: every connection that waits on the server (see
//! `blocking`, which blocks it and runs its callbacks) is recorded here, by
//! waiter id, with what it waits for and the answer a handoff, an opened
//! latch, a deadlock or a cancel recorded for it. Data only: nothing here
//! opens a key or commits; the handles it hands back are unblocked by the
//! caller once its change is committed ([`HandOver::unblock`]).

use super::state;
use super::state::DbKey;
use crate::ffi::BlockedClient;
use dlock_core::{Kind, LockError, Mode};
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// What a waiting connection waits for.
pub enum Want {
    /// A grant of a lock or of a semaphore's permits.
    Grant(Acquire),
    /// A latch to open (`DLOCK.AWAIT`).
    Open,
}

/// What an acquire command (a lock or semaphore request) asks for, kept
/// while its connection waits; the core's `dlock_core::Ask` is the grant
/// rule's view of it.
pub struct Acquire {
    pub kind: Kind,
    /// Inline up to `dlock_core::OWNER_INLINE` bytes: no allocation per
    /// request for the usual owner.
    pub owner: dlock_core::Owner,
    pub mode: Mode,
    pub lease: u64,
    /// Semaphores: the permits asked for and the limit named (1 and 0 for
    /// locks).
    pub permits: u32,
    pub limit: u64,
    /// `BIND`: the hold a grant creates is bound to the waiting connection.
    pub bind: bool,
    /// `LOCKDELAY` ms of the hold a grant creates (0: none).
    pub lock_delay: u64,
}

/// The reply recorded for `blocking::on_timeout` to send when the wait was ended by
/// a handoff or an opened latch.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Answer {
    None,
    Token(u64),
    Error(LockError),
    Opened,
    /// Answered `DEADLOCK` at a handoff (the text is kept by
    /// `services::deadlock`).
    Deadlock,
    /// Given up by `DLOCK.CANCEL`: answered nil.
    Cancelled,
}

/// What one waiting connection waits for, fixed while it waits; shared by
/// the registry and the callbacks that read it (no copy per callback).
pub(super) struct Waiting {
    /// The (db, key) it waits on.
    pub(super) db: i32,
    pub(super) key: Box<[u8]>,
    pub(super) want: Want,
    /// Absolute end of the wait (unix ms).
    pub(super) deadline: u64,
    /// The waiting connection's client id (a `BIND` hold made by a handoff
    /// is bound to it, not to the connection that released).
    pub(super) client: u64,
}

/// One waiting connection.
pub(super) struct Entry {
    pub(super) w: Rc<Waiting>,
    /// Its blocked-client handle, valid until `blocking::on_free`.
    pub(super) handle: Option<BlockedClient>,
    /// The connection closed (or was redirected): it can no longer be
    /// answered.
    pub(super) gone: bool,
    /// The wait ended by a reply (grant, error, opening or timeout).
    pub(super) done: bool,
    pub(super) answer: Answer,
}

thread_local! {
    /// Waiter id -> the connection waiting as that id.
    static WAITERS: RefCell<state::Map<u64, Entry>> = RefCell::new(state::Map::default());
}

static NEXT_ID: AtomicU64 = AtomicU64::new(0);

/// Seeds waiter ids randomly, so ids persisted by an earlier process never
/// name a connection of this one.
pub fn seed_ids() {
    let r = uuid::Uuid::new_v4().as_u64_pair().0 >> 2;
    NEXT_ID.store(r.max(1), Relaxed);
}

/// A waiter id not used before by this process.
pub fn new_id() -> u64 {
    NEXT_ID.fetch_add(1, Relaxed)
}

pub(super) fn with<R>(f: impl FnOnce(&mut state::Map<u64, Entry>) -> R) -> Option<R> {
    state::with(&WAITERS, f)
}

/// Whether a connection of this process still waits as `id` on this very
/// key: a place copied to another key (RESTORE, DLOCK.APPLY) or carried by
/// a RENAME names no connection there, and a wait already answered (a
/// grant, an error) waits no more: its place, given back by a job that ran
/// after the answer, would stay ahead of every later waiter (found by the
/// simulator: a RESTORE whose prune served the waiter before the old
/// value's requeue ran).
pub fn is_live_at(id: u64, db: i32, key: &[u8]) -> bool {
    with(|m| {
        m.get(&id)
            .is_some_and(|e| !e.gone && !e.done && e.w.db == db && *e.w.key == *key)
    })
    .unwrap_or(false)
}

/// Whether a connection of this process waits as `id`, on any key, and its
/// wait is not answered yet.
pub fn waits(id: u64) -> bool {
    with(|m| m.get(&id).is_some_and(|e| !e.gone && !e.done)).unwrap_or(false)
}

/// The keys of `db` (every db for -1) that connections of this process
/// wait on, each once: what a flush has to requeue, found without opening
/// every flushed key.
pub fn waited_keys(db: i32) -> Vec<DbKey> {
    with(|m| {
        // Ordered: the requeues that follow run in one order whatever the
        // hash seeds (the simulator's determinism test).
        let keys: std::collections::BTreeSet<(i32, &[u8])> = m
            .values()
            .filter(|e| !e.gone && (db == -1 || e.w.db == db))
            .map(|e| (e.w.db, &*e.w.key))
            .collect();
        keys.into_iter().map(|(d, k)| (d, Box::from(k))).collect()
    })
    .unwrap_or_default()
}

/// Connections currently waiting on the server.
pub fn waiting() -> u64 {
    with(|m| m.values().filter(|e| !e.gone).count() as u64).unwrap_or(0)
}

/// The limit a semaphore waiter among `ids` named (to make the semaphore
/// anew when its key was deleted under the waiters).
pub fn limit_of(ids: impl Iterator<Item = u64>) -> Option<u64> {
    with(|m| {
        let mut ids = ids;
        ids.find_map(|id| match m.get(&id).map(|e| &e.w.want) {
            Some(Want::Grant(a)) if a.kind == Kind::Semaphore => Some(a.limit),
            _ => None,
        })
    })
    .flatten()
}

/// What a callback needs of an entry, out of the registry: the wait (shared,
/// not copied), whether it ended, and the answer recorded.
pub(super) fn seen(id: u64) -> Option<(Rc<Waiting>, bool, Answer)> {
    with(|m| m.get(&id).map(|e| (Rc::clone(&e.w), e.done, e.answer))).flatten()
}

pub(super) fn mark_done(id: u64) {
    with(|m| {
        if let Some(e) = m.get_mut(&id) {
            e.done = true;
        }
    });
}

/// What `grant::hand_over` did: whether the lock changed, and the connections to
/// unblock (with [`HandOver::unblock`]) once the change is committed.
#[derive(Default)]
pub struct HandOver {
    pub changed: bool,
    pub(super) handles: Vec<BlockedClient>,
}

impl HandOver {
    /// Unblocks the connections the lock was handed to (inside a command:
    /// once it has replied, see [`replying_first`]): for each,
    /// `UnblockClient` runs `blocking::on_timeout`, which replies the
    /// recorded answer and touches no key.
    pub fn unblock(self) {
        unblock_all(self.handles);
    }
}

pub(super) fn unblock_all(handles: Vec<BlockedClient>) {
    if handles.is_empty() {
        return;
    }
    let inside = DEPTH.try_with(Cell::get).is_ok_and(|depth| depth > 0);
    let deferred = inside
        && DEFERRED
            .try_with(|d| {
                d.try_borrow_mut()
                    .map(|mut d| d.extend_from_slice(&handles))
                    .is_ok()
            })
            .unwrap_or(false);
    if !deferred {
        unblock_now(handles);
    }
}

fn unblock_now(handles: Vec<BlockedClient>) {
    for h in handles {
        // Its entry is answered and done, so the nested timeout callback
        // only replies (a client freed meanwhile is skipped by `unblock`).
        h.unblock();
    }
}

thread_local! {
    /// How many commands are running (nested through `RedisModule_Call`).
    static DEPTH: Cell<u32> = const { Cell::new(0) };
    /// The connections their commits served, to unblock once the outermost
    /// has replied.
    static DEFERRED: RefCell<Vec<BlockedClient>> = const { RefCell::new(Vec::new()) };
}

/// Runs a command, `run` (its handler and its reply): the connections its
/// commits served are unblocked after it, so the command's own reply is
/// queued before theirs. A server writes the last-queued reply first
/// (Redis 7.0 queues a served connection's reply as `UnblockClient` runs),
/// so the grant a RELEASE hands over leaves before the RELEASE's own
/// reply: the next holder, who waits, is told first.
pub fn replying_first<R>(run: impl FnOnce() -> R) -> R {
    let _ = DEPTH.try_with(|d| d.set(d.get().saturating_add(1)));
    let out = run();
    let outermost = DEPTH
        .try_with(|d| {
            let depth = d.get().saturating_sub(1);
            d.set(depth);
            depth == 0
        })
        .unwrap_or(false);
    if outermost {
        let handles = DEFERRED
            .try_with(|d| {
                d.try_borrow_mut()
                    .map(|mut d| std::mem::take(&mut *d))
                    .unwrap_or_default()
            })
            .unwrap_or_default();
        unblock_now(handles);
    }
    out
}

/// Answers `1` to the connections `ids` waiting on a latch that opened (or
/// left its key). Ids that name no such connection of this process are
/// skipped; each connection is unblocked once.
pub fn answer_opened(ids: &[u64]) {
    let handles = with(|m| {
        ids.iter()
            .filter_map(|id| {
                let e = m.get_mut(id)?;
                if !matches!(e.w.want, Want::Open) || e.done || e.gone {
                    return None;
                }
                e.answer = Answer::Opened;
                e.done = true;
                e.handle
            })
            .collect::<Vec<_>>()
    })
    .unwrap_or_default();
    unblock_all(handles);
}

/// FLUSHDB (`db`) or FLUSHALL (-1): every latch of the db is gone, so its
/// waiting connections are answered 1.
pub fn answer_flushed(db: i32) {
    let ids: Vec<u64> = with(|m| {
        m.iter()
            .filter(|(_, e)| matches!(e.w.want, Want::Open) && (db == -1 || e.w.db == db))
            .map(|(id, _)| *id)
            .collect()
    })
    .unwrap_or_default();
    answer_opened(&ids);
}

/// Where the connection waiting as `id` is blocked for a grant — (db, key)
/// — while it still waits (not gone, not answered).
pub fn blocked_at(id: u64) -> Option<(i32, Box<[u8]>)> {
    with(|m| {
        m.get(&id)
            .filter(|e| !e.gone && !e.done && matches!(e.w.want, Want::Grant(_)))
            .map(|e| (e.w.db, e.w.key.clone()))
    })
    .flatten()
}

/// Answers the waiter `id` DEADLOCK (its text kept by `services::deadlock`)
/// as part of `handed`: marked done, unblocked with the others. False when
/// it no longer waits.
pub fn answer_deadlock(handed: &mut HandOver, id: u64) -> bool {
    let handle = with(|m| {
        let e = m.get_mut(&id).filter(|e| !e.gone && !e.done)?;
        let h = e.handle?;
        e.answer = Answer::Deadlock;
        e.done = true;
        Some(h)
    })
    .flatten();
    match handle {
        Some(h) => {
            handed.handles.push(h);
            handed.changed = true;
            true
        }
        None => false,
    }
}

/// `DLOCK.CANCEL`: the connections of this process that wait as `ids`
/// (places given up) are answered nil, as part of `handed`: marked done,
/// unblocked once the change is committed. Ids that name no waiting
/// connection (a queued place, a gone connection) are skipped.
pub fn answer_cancelled(handed: &mut HandOver, ids: &[u64]) {
    let handles = with(|m| {
        ids.iter()
            .filter_map(|id| {
                let e = m.get_mut(id).filter(|e| !e.gone && !e.done)?;
                if !matches!(e.w.want, Want::Grant(_)) {
                    return None;
                }
                let h = e.handle?;
                e.answer = Answer::Cancelled;
                e.done = true;
                Some(h)
            })
            .collect::<Vec<_>>()
    })
    .unwrap_or_default();
    handed.changed |= !handles.is_empty();
    handed.handles.extend(handles);
}

impl HandOver {
    /// Adds the connections another handoff of the same lock served.
    pub fn absorb(&mut self, other: HandOver) {
        self.changed |= other.changed;
        self.handles.extend(other.handles);
    }
}

/// A wait that ended unanswered while clients were paused (see `pause`):
/// the waiter id, and until when a fair-lock owner keeps its place queued
/// (None: a latch's wait, whose place goes).
pub type EndedWait = (u64, Option<u64>);

thread_local! {
    /// Waits that ended while clients were paused, with the (db, key) they
    /// waited on: their places leave the queue by a job once the pause is
    /// over (`Job::WaitEnded`), and meanwhile every read and write of the
    /// lock finds them gone (`commit::settle`, `commit::as_of`). Empty
    /// except around a pause.
    static ENDED: RefCell<Vec<(DbKey, EndedWait)>> = const { RefCell::new(Vec::new()) };
}

/// Whether any wait ended during a pause is still noted (a look that
/// costs no borrow bookkeeping: the common answer is no).
pub fn any_ended() -> bool {
    ENDED
        .try_with(|e| e.try_borrow().map_or(true, |v| !v.is_empty()))
        .unwrap_or(false)
}

/// The wait `ended` on (`db`, `key`) timed out while clients were paused.
pub fn note_ended(db: i32, key: &[u8], ended: EndedWait) {
    state::with(&ENDED, |e| e.push(((db, key.into()), ended)));
}

/// The waits on (`db`, `key`) that ended while clients were paused and
/// whose places are still in the lock; `take` removes them (the caller
/// takes their places out).
pub fn ended_waits(db: i32, key: &[u8], take: bool) -> Vec<EndedWait> {
    state::with(&ENDED, |e| {
        if e.is_empty() {
            return Vec::new();
        }
        let at = |((d, k), _): &(DbKey, EndedWait)| *d == db && **k == *key;
        let found = e.iter().filter(|x| at(x)).map(|(_, w)| *w).collect();
        if take {
            e.retain(|x| !at(x));
        }
        found
    })
    .unwrap_or_default()
}
