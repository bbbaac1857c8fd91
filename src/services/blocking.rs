//! The one blocking service: every connection that waits on the server —
//! for a lock, a semaphore's permits (ACQUIRE, RWACQUIRE, FAIRACQUIRE,
//! SEMACQUIRE with `WAIT`) or a latch to open (AWAIT) — is blocked here on
//! its key with `RedisModule_BlockClientOnKeys` (so Redis Cluster still
//! redirects it with `-MOVED` when the slot moves, and ends it at WAIT), and
//! recorded in one registry, by waiter id, with what it waits for.
//!
//! **Handoff on the server side.** A change that may let someone in (a
//! release, an expiry, a force-release, a requeue) does not signal the key:
//! `commit` calls [`hand_over`], where the state machine names the waiter(s)
//! the lock can serve now (`Lock::next_handoff`), the grant is made with the
//! request kept in that waiter's registry entry, the answer is recorded
//! there, and exactly those connections are unblocked with
//! `RedisModule_UnblockClient`, which for a client blocked on keys runs
//! [`on_timeout`] at once; it replies the recorded answer. The other
//! waiters' callbacks never run, so a handoff costs the same with 16 or 4096
//! waiters. A latch that opens answers its waiters the same way
//! ([`answer_opened`]). [`on_ready`], run by Redis for every connection
//! blocked on a signalled key, remains for full re-checks (DLOCK.APPLY, a
//! key overwritten by another type or kind, a latch key gone).
//!
//! A waiter whose WAIT ends as the lock is handed over ends in exactly one
//! state. Everything runs on the main thread. If [`hand_over`] grants first,
//! it marks the entry done and answered and calls `UnblockClient`, which
//! sets the blocked client's `unblocked` flag: the server's own timeout
//! check skips such a client, so [`on_timeout`] runs once, from
//! `UnblockClient`, and replies the answer without touching the key. If the
//! WAIT ended first, [`on_timeout`] took the place out of the queue (or, on
//! a fair lock, made it a queued place of a connection that no longer
//! waits), so no handoff can name it; a connection that closed is marked
//! gone by [`on_disconnect`] before its place is pruned, and [`hand_over`]
//! drops a place whose connection does not wait here instead of granting it.

use super::bound::DbKey;
use super::commit::{self, commit, tick_due, Effects};
use super::{cluster, deadlock, hint, jobs, observe, state};
use crate::ffi::{self, BlockedClient, Ctx, RStr, RString, RawCtx, RawStr};
use crate::storage::{self, tokens, Slot};
use crate::{config, error, stats};
use dlock_core::{Grant, Kind, Lock, LockError, Mode, Request};
use redis_module::raw;
use std::cell::RefCell;
use std::ffi::{c_int, c_void};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// What a waiting connection waits for.
pub enum Want {
    /// A grant of a lock or of a semaphore's permits.
    Grant(Ask),
    /// A latch to open (`DLOCK.AWAIT`).
    Open,
}

/// A lock or semaphore request, kept while its connection waits.
pub struct Ask {
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

/// The reply recorded for [`on_timeout`] to send when the wait was ended by
/// a handoff or an opened latch.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Answer {
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
struct Waiting {
    /// The (db, key) it waits on.
    db: i32,
    key: Box<[u8]>,
    want: Want,
    /// Absolute end of the wait (unix ms).
    deadline: u64,
    /// The waiting connection's client id (a `BIND` hold made by a handoff
    /// is bound to it, not to the connection that released).
    client: u64,
}

/// One waiting connection.
struct Entry {
    w: Rc<Waiting>,
    /// Its blocked-client handle, valid until [`on_free`].
    handle: Option<BlockedClient>,
    /// The connection closed (or was redirected): it can no longer be
    /// answered.
    gone: bool,
    /// The wait ended by a reply (grant, error, opening or timeout).
    done: bool,
    answer: Answer,
}

thread_local! {
    /// Waiter id -> the connection waiting as that id.
    static WAITERS: RefCell<super::state::Map<u64, Entry>> = RefCell::new(super::state::Map::default());
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

fn with<R>(f: impl FnOnce(&mut super::state::Map<u64, Entry>) -> R) -> Option<R> {
    state::with(&WAITERS, f)
}

/// Whether a connection of this process still waits as `id` on this very
/// key: a place copied to another key (RESTORE, DLOCK.APPLY) or carried by
/// a RENAME names no connection there.
pub fn is_live_at(id: u64, db: i32, key: &[u8]) -> bool {
    with(|m| {
        m.get(&id)
            .is_some_and(|e| !e.gone && e.w.db == db && *e.w.key == *key)
    })
    .unwrap_or(false)
}

/// The keys of `db` (every db for -1) that connections of this process
/// wait on, each once: what a flush has to requeue, found without opening
/// every flushed key.
pub fn waited_keys(db: i32) -> Vec<DbKey> {
    with(|m| {
        let keys: std::collections::HashSet<(i32, &[u8])> = m
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

/// Blocks the calling connection on `name` (in the context's db) until
/// `deadline`, `wait_ms` from now, waiting as `id` for `want` (the place is
/// already in the lock's queue).
pub fn block(ctx: Ctx, name: RStr<'_>, id: u64, wait_ms: u64, deadline: u64, want: Want) {
    if let Want::Grant(a) = &want {
        deadlock::note_wait(id, &a.owner, a.kind, ctx.db(), name.bytes());
    }
    let entry = Entry {
        w: Rc::new(Waiting {
            db: ctx.db(),
            key: name.bytes().into(),
            want,
            deadline,
            client: ctx.client_id(),
        }),
        handle: None,
        gone: false,
        done: false,
        answer: Answer::None,
    };
    with(|m| m.insert(id, entry));
    stats::add(&stats::counter::waits_begun, 1);
    let cbs = ffi::BlockCallbacks {
        on_ready,
        on_timeout,
        on_free,
        on_disconnect,
    };
    match ctx.block_on_key(name, wait_ms, &cbs, id) {
        Some(handle) => {
            with(|m| {
                if let Some(e) = m.get_mut(&id) {
                    e.handle = Some(handle);
                }
            });
        }
        None => {
            if let Some(Some(e)) = with(|m| m.remove(&id)) {
                note_end(id, &e);
            }
        }
    }
}

/// What a callback needs of an entry, out of the registry: the wait (shared,
/// not copied), whether it ended, and the answer recorded.
fn seen(id: u64) -> Option<(Rc<Waiting>, bool, Answer)> {
    with(|m| m.get(&id).map(|e| (Rc::clone(&e.w), e.done, e.answer))).flatten()
}

fn mark_done(id: u64) {
    with(|m| {
        if let Some(e) = m.get_mut(&id) {
            e.done = true;
        }
    });
}

/// What [`hand_over`] did: whether the lock changed, and the connections to
/// unblock (with [`HandOver::unblock`]) once the change is committed.
#[derive(Default)]
pub struct HandOver {
    pub changed: bool,
    handles: Vec<BlockedClient>,
}

impl HandOver {
    /// Unblocks the connections the lock was handed to: for each,
    /// `UnblockClient` runs [`on_timeout`] at once, which replies the
    /// recorded answer and touches no key.
    pub fn unblock(self) {
        unblock_all(self.handles);
    }
}

fn unblock_all(handles: Vec<BlockedClient>) {
    for h in handles {
        // SAFETY: the handle was registered by `block` for a connection
        // still in the registry when it was collected (so not yet freed:
        // on_free runs from the server's blocked-client handling, never
        // inside a command or callback of ours); its entry is answered and
        // done, so the nested timeout callback only replies.
        unsafe { h.unblock() };
    }
}

/// Hands `lock` (at `key` in the context's db) over, on the server side, to
/// the waiters it can serve now, in queue order: grants each with its own
/// request, records the reply in its entry, and collects its handle. Places
/// whose connection no longer waits here are dropped, never granted. Stops
/// at the first waiter the state machine denies. O(1) per waiter served.
pub fn hand_over(ctx: Ctx, key: &[u8], lock: &mut Lock) -> HandOver {
    let db = ctx.db();
    let mut out = HandOver::default();
    let (now, now_us) = ffi::now();
    while let Some(id) = lock.next_handoff() {
        let found = with(|m| {
            m.get(&id)
                .filter(|e| !e.gone && !e.done && e.w.db == db && *e.w.key == *key)
                .and_then(|e| Some((e.handle?, Rc::clone(&e.w))))
        })
        .flatten();
        let Some((handle, w)) = found else {
            // A gone connection, or a place carried here from elsewhere.
            lock.remove_waiter(id);
            out.changed = true;
            continue;
        };
        let Want::Grant(ask) = &w.want else {
            lock.remove_waiter(id);
            out.changed = true;
            continue;
        };
        let answer = match attempt(ask, Some(id), lock, now, now_us) {
            Ok(Grant::Granted { token, reentrant }) => {
                commit::count_grant(reentrant, true);
                if !reentrant {
                    let hold = (&*ask.owner, ask.mode, ask.bind, ask.lock_delay);
                    commit::new_hold(ctx, w.client, key, lock, hold);
                }
                Answer::Token(token)
            }
            Ok(Grant::Denied) => break,
            Err(e) => {
                lock.remove_waiter(id);
                Answer::Error(e)
            }
        };
        with(|m| {
            if let Some(e) = m.get_mut(&id) {
                e.answer = answer;
                e.done = true;
            }
        });
        out.changed = true;
        out.handles.push(handle);
    }
    out
}

/// Asks the state machine to grant `ask` now (made by the waiter `waiter`,
/// or by a command), issuing its token from the server-wide counter. The one
/// grant attempt of acquire commands, handoffs and ready callbacks.
pub fn attempt(
    ask: &Ask,
    waiter: Option<u64>,
    lock: &mut Lock,
    now: u64,
    now_us: u64,
) -> Result<Grant, LockError> {
    let req = Request {
        owner: &ask.owner,
        mode: ask.mode,
        lease_ms: ask.lease,
        waiter,
    };
    let mut t = tokens::tokens();
    let outcome = if lock.kind() == Kind::Semaphore {
        lock.acquire_permits(&req, ask.permits, ask.limit, now, &mut t, now_us)
    } else {
        lock.acquire(&req, now, &mut t, now_us)
    };
    tokens::set(t);
    outcome
}

/// Puts the request of a connection about to wait on the server in the
/// queue (a semaphore place carries its permits), its wait starting now
/// unless it takes over a place that has a start. True when a place was
/// made.
pub fn enqueue(lock: &mut Lock, ask: &Ask, id: u64, deadline: u64) -> bool {
    let made = if lock.kind() == Kind::Semaphore {
        lock.enqueue_permits(&ask.owner, ask.permits, id, deadline)
    } else {
        lock.enqueue(&ask.owner, ask.mode, id, true, deadline)
    };
    lock.stamp_wait(id, ffi::now().0);
    observe::wait_began(lock, id);
    made
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

/// The waiting connection closed (or was redirected): it can no longer be
/// answered, so no handoff picks it before its place is pruned (by
/// [`on_free`]'s job).
unsafe extern "C" fn on_disconnect(ctx: RawCtx, _bc: *mut raw::RedisModuleBlockedClient) {
    // SAFETY: Redis passes the blocked client's context, valid for the
    // callback, which keeps no copy of it.
    let ctx = unsafe { Ctx::from_raw(ctx) };
    if let Some(id) = ctx.blocked_id() {
        with(|m| {
            if let Some(e) = m.get_mut(&id) {
                e.gone = true;
            }
        });
    }
}

/// The key was signalled: try to serve this waiter. `REDISMODULE_ERR` keeps
/// the connection blocked.
unsafe extern "C" fn on_ready(raw_ctx: RawCtx, _argv: *mut RawStr, _argc: c_int) -> c_int {
    // SAFETY: Redis passes the blocked client's context, valid for the
    // callback, which keeps no copy of it.
    let ctx = unsafe { Ctx::from_raw(raw_ctx) };
    let Some(id) = ctx.blocked_id() else {
        return ffi::ERR;
    };
    let Some((w, done, _)) = seen(id) else {
        return ffi::ERR;
    };
    // Answered by a handoff or an opening: its unblock is on the way.
    if done {
        return ffi::ERR;
    }
    match &w.want {
        Want::Open => latch_ready(ctx, id, &w),
        Want::Grant(ask) => {
            stats::add(&stats::counter::ready_callbacks, 1);
            lock_ready(ctx, id, &w, ask)
        }
    }
}

/// A latch waiter's key was signalled. A latch at the key: keep waiting —
/// the answer comes from [`answer_opened`] or from [`on_timeout`]. The key
/// empty: the latch is gone, so it is open.
fn latch_ready(ctx: Ctx, id: u64, w: &Waiting) -> c_int {
    let Some(name) = RString::new(&w.key) else {
        return ffi::ERR;
    };
    match storage::read(ctx, name.as_rstr()) {
        // In cluster mode the key may be gone because its slot moved: Redis
        // redirects the client (-MOVED).
        Ok(None) if cluster::serves(ctx, &w.key) => {
            mark_done(id);
            ctx.reply_int(1);
            ffi::OK
        }
        // Our latch, or whatever replaced it (the unlink hook answers 1).
        _ => ffi::ERR,
    }
}

fn lock_ready(ctx: Ctx, id: u64, w: &Waiting, ask: &Ask) -> c_int {
    // Right after a waiter ahead was granted the lock exclusively in this
    // round, and nothing changed since: keep waiting, without a look.
    if hint::held_by_another(ctx.db(), &w.key, &ask.owner) {
        return ffi::ERR;
    }
    // The signalled key is our key: use Redis' string rather than a copy.
    ctx.with_ready_key(|ready| match ready.filter(|r| r.bytes() == &*w.key) {
        Some(name) => serve_ready(ctx, id, w, ask, name),
        None => match RString::new(&w.key) {
            Some(owned) => serve_ready(ctx, id, w, ask, owned.as_rstr()),
            None => ffi::ERR,
        },
    })
}

fn serve_ready(ctx: Ctx, id: u64, w: &Waiting, ask: &Ask, name: RStr<'_>) -> c_int {
    let (now, now_us) = ffi::now();
    let reply_error = |e: &std::ffi::CStr| {
        observe::wait_outcome(id, observe_error(e));
        mark_done(id);
        ctx.reply_error(e);
        ffi::OK
    };
    let Some(mut slot) = Slot::open(ctx, name, || commit::fresh(ask.kind, ask.limit)) else {
        return reply_error(error::WRONGTYPE);
    };
    match &slot {
        Slot::Stored(g) if g.lock().kind() != ask.kind => {
            return reply_error(error::wrong_kind(g.lock().kind()))
        }
        // In cluster mode the key may be gone because its slot moved: never
        // make a lock here then; Redis redirects the client (-MOVED).
        Slot::New(..) if !cluster::serves(ctx, &w.key) => return ffi::ERR,
        _ => {}
    }
    // Called for every waiter on every signal, in the order they blocked:
    // most are not next. When nothing of the lock is due (its earliest lease
    // or queued-place end, as filed in the expiry index, is still ahead),
    // a waiter the state machine surely denies keeps waiting at once.
    if let Slot::Stored(g) = &slot {
        if g.entry().0 > now && g.lock().surely_denied(id) {
            return ffi::ERR;
        }
    }
    let lock = slot.lock_mut();
    observe::before_tick(ctx, &w.key, lock, now);
    // Time-based expiry only, no per-waiter liveness lookups (dead
    // connections are pruned by jobs).
    let (ticked, fx) = tick_due(lock, now);
    let had_place = lock.has_waiter(id);
    match attempt(ask, Some(id), lock, now, now_us) {
        Ok(Grant::Granted { token, reentrant }) => {
            commit::count_grant(reentrant, had_place);
            if !reentrant {
                // The ready callback runs on the waiting connection's
                // context: a BIND hold is bound to the waiter.
                let hold = (&*ask.owner, ask.mode, ask.bind, ask.lock_delay);
                commit::new_hold(ctx, w.client, &w.key, lock, hold);
            }
            let exclusive = lock.exclusive_owner().is_some();
            // A semaphore may have permits left for the next in line.
            let fx = Effects {
                wake: fx.wake || lock.head_may_be_granted(),
                ..fx
            };
            let Some(g) = slot.store() else {
                // The grant could not be stored: it did not happen.
                return reply_error(error::OOM_STORE);
            };
            commit(g, fx);
            if exclusive {
                hint::note_exclusive_grant(ctx.db(), &w.key, &ask.owner);
            }
            mark_done(id);
            ctx.reply_int(token as i64);
            ffi::OK
        }
        Ok(Grant::Denied) => {
            let mut changed = ticked;
            if !had_place {
                // The lock was deleted and made anew meanwhile: queue again.
                enqueue(lock, ask, id, w.deadline);
                changed = true;
            }
            if let (true, Some(g)) = (changed, slot.stored()) {
                commit(g, fx);
            }
            ffi::ERR
        }
        Err(e) => {
            let changed = lock.remove_waiter(id) || ticked;
            if let (true, Some(g)) = (changed, slot.stored()) {
                commit(g, Effects { wake: true, ..fx });
            }
            reply_error(error::lock_error(e))
        }
    }
}

/// WAIT ran out (reply nil, leave no waiter behind: a fair-lock owner keeps
/// a queued place it must claim within `dlock.fair-queue-timeout-ms`), or a
/// handoff or an opened latch unblocked the connection (reply its answer).
unsafe extern "C" fn on_timeout(raw_ctx: RawCtx, _argv: *mut RawStr, _argc: c_int) -> c_int {
    // SAFETY: as for on_ready.
    let ctx = unsafe { Ctx::from_raw(raw_ctx) };
    let Some((id, (w, _, answer))) = ctx.blocked_id().and_then(|id| Some((id, seen(id)?))) else {
        return ctx.reply_null();
    };
    match answer {
        Answer::Token(token) => return ctx.reply_int(token as i64),
        Answer::Error(e) => return ctx.reply_error(&error::lock_error_text(e)),
        Answer::Opened => return ctx.reply_int(1),
        Answer::Deadlock => return ctx.reply_error(&deadlock::take_reply(id)),
        Answer::Cancelled => return ctx.reply_null(),
        Answer::None => {}
    }
    mark_done(id);
    observe::wait_outcome(id, dlock_core::slowlog::Outcome::Timeout);
    stats::add(&stats::counter::waits_timed_out, 1);
    let (now, _) = ffi::now();
    let latch = matches!(w.want, Want::Open);
    storage::with_lock(ctx, w.db, &w.key, |mut g| {
        let changed = if latch {
            g.lock().kind() == Kind::Latch && g.lock_mut().remove_waiter(id)
        } else {
            let queue_deadline = now.saturating_add(config::fair_queue_timeout_ms());
            g.lock_mut().wait_ended(id, queue_deadline)
        };
        if changed {
            let fx = Effects {
                notice: None,
                wake: !latch,
            };
            commit(g, fx);
        }
    });
    ctx.reply_null()
}

/// The blocked connection is done (replied, timed out, or disconnected).
/// A waiter that was never answered (its connection closed) leaves the
/// queue at once, by a deferred prune.
unsafe extern "C" fn on_free(_ctx: RawCtx, privdata: *mut c_void) {
    // SAFETY: Redis hands the free callback the private data
    // `Ctx::block_on_key` set, once.
    let Some(id) = (unsafe { ffi::take_blocked_id(privdata) }) else {
        return;
    };
    if let Some(Some(e)) = with(|m| m.remove(&id)) {
        note_end(id, &e);
        observe_end(id, &e);
        if !e.done {
            jobs::schedule(jobs::Job::Prune(e.w.db, e.w.key.clone()));
        }
    }
}

/// The wait of `id` ended: it leaves the deadlock detector's index.
fn note_end(id: u64, e: &Entry) {
    if let Want::Grant(a) = &e.w.want {
        deadlock::note_end(id, &a.owner, a.kind, e.w.db, &e.w.key);
    }
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

/// How an error answered to a waiter reads in the slowlog.
fn observe_error(e: &std::ffi::CStr) -> dlock_core::slowlog::Outcome {
    if e.to_bytes().starts_with(b"DEADLOCK") {
        dlock_core::slowlog::Outcome::Deadlock
    } else {
        dlock_core::slowlog::Outcome::Error
    }
}

/// The wait of entry `e` ended: count it (and log it when slow).
fn observe_end(id: u64, e: &Entry) {
    use dlock_core::slowlog::Outcome;
    let outcome = match e.answer {
        _ if !e.done => Outcome::Disconnected,
        Answer::Error(LockError::UpgradeDeadlock) | Answer::Deadlock => Outcome::Deadlock,
        Answer::Error(_) => Outcome::Error,
        Answer::Cancelled => Outcome::Cancelled,
        // Granted by a handoff, a ready callback, or a latch that opened
        // (time-outs and errors of ready callbacks were recorded).
        Answer::Token(_) | Answer::Opened | Answer::None => Outcome::Granted,
    };
    match &e.w.want {
        Want::Grant(a) => observe::wait_ended(id, &e.w.key, a.kind, &a.owner, a.mode, outcome),
        Want::Open => {
            let conn = e.w.client.to_string();
            observe::wait_ended(
                id,
                &e.w.key,
                Kind::Latch,
                conn.as_bytes(),
                Mode::Await,
                outcome,
            );
        }
    }
}
