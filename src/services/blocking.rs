//! The blocking driver: every connection that waits on the server —
//! for a lock, a semaphore's permits (ACQUIRE, RWACQUIRE, FAIRACQUIRE,
//! SEMACQUIRE with `WAIT`) or a latch to open (AWAIT) — is blocked here on
//! its key with `RedisModule_BlockClientOnKeys` (so Redis Cluster still
//! redirects it with `-MOVED` when the slot moves, and ends it at WAIT), and
//! recorded in one registry (`waiters`), by waiter id, with what it waits
//! for; its callbacks ([`on_ready`], [`on_timeout`], [`on_free`],
//! [`on_disconnect`]) are called by the FFI's trampolines
//! (`ffi::callbacks::Blocked`).
//!
//! **Handoff on the server side.** A change that may let someone in (a
//! release, an expiry, a force-release, a requeue) does not signal the key:
//! `commit` calls `grant::hand_over`, where the state machine names the waiter(s)
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
//! state. Everything runs on the main thread. If `grant::hand_over` grants first,
//! it marks the entry done and answered and calls `UnblockClient`, which
//! sets the blocked client's `unblocked` flag: the server's own timeout
//! check skips such a client, so [`on_timeout`] runs once, from
//! `UnblockClient`, and replies the answer without touching the key. If the
//! WAIT ended first, [`on_timeout`] took the place out of the queue (or, on
//! a fair lock, made it a queued place of a connection that no longer
//! waits), so no handoff can name it; a connection that closed is marked
//! gone by [`on_disconnect`] before its place is pruned, and `grant::hand_over`
//! drops a place whose connection does not wait here instead of granting it.

use super::commit::{commit, end_wait_place, settle, Effects};
use super::grant;
use super::jobq::{self, Job};
use super::waiters::{self, mark_done, seen, with, Answer, Entry, Waiting};
use super::{cluster, deadlock, hint, observe, pause};
use crate::ffi::callbacks::{block_callbacks, Blocked};
use crate::ffi::{self, Ctx, RStr, RString};
use crate::storage::{self, Slot};
use crate::{config, error, stats};
use dlock_core::{Grant, Kind, LockError, Mode};
use std::ffi::c_int;
use std::rc::Rc;

// What the commands, the events and registration reach through this
// driver: the registry's items (below it) under their old paths.
pub use super::grant::{attempt, enqueue};
pub use super::waiters::{
    answer_cancelled, answer_flushed, answer_opened, new_id, seed_ids, waited_keys, waiting, Ask,
    HandOver, Want,
};

/// Blocks the calling connection on `name` (in the context's db) until
/// `deadline`, `wait_ms` from now, waiting as `id` for `want` (the place is
/// already in the lock's queue).
pub fn block(ctx: Ctx<'_>, name: RStr<'_>, id: u64, wait_ms: u64, deadline: u64, want: Want) {
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
    let cbs = block_callbacks::<Waiter>();
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

/// The waiting connection closed (or was redirected): it can no longer be
/// answered, so no handoff picks it before its place is pruned (by
/// [`on_free`]'s job).
fn on_disconnect(ctx: Ctx<'_>) {
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
fn on_ready(ctx: Ctx<'_>) -> c_int {
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
        Want::Grant(_) if pause::paused() => {
            // A grant now could not be propagated (`pause`): the key is
            // signalled again once the pause is over.
            jobq::schedule(Job::Signal(w.db, w.key.clone()));
            ffi::ERR
        }
        Want::Grant(ask) => {
            stats::add(&stats::counter::ready_callbacks, 1);
            lock_ready(ctx, id, &w, ask)
        }
    }
}

/// A latch waiter's key was signalled. A latch at the key: keep waiting —
/// the answer comes from [`answer_opened`] or from [`on_timeout`]. The key
/// empty: the latch is gone, so it is open.
fn latch_ready(ctx: Ctx<'_>, id: u64, w: &Waiting) -> c_int {
    let Some(name) = RString::new(&w.key) else {
        return ffi::ERR;
    };
    // A statement, not the tail: the guard goes before the name it borrows.
    let r = match storage::read(ctx, name.as_rstr()) {
        // In cluster mode the key may be gone because its slot moved: Redis
        // redirects the client (-MOVED).
        Ok(None) if cluster::serves(ctx, &w.key) => {
            mark_done(id);
            ctx.reply_int(1);
            ffi::OK
        }
        // Our latch, or whatever replaced it (the unlink hook answers 1).
        _ => ffi::ERR,
    };
    r
}

fn lock_ready(ctx: Ctx<'_>, id: u64, w: &Waiting, ask: &Ask) -> c_int {
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

fn serve_ready(ctx: Ctx<'_>, id: u64, w: &Waiting, ask: &Ask, name: RStr<'_>) -> c_int {
    let (now, now_us) = ffi::now();
    let reply_error = |e: &std::ffi::CStr| {
        observe::wait_outcome(id, observe_error(e));
        mark_done(id);
        ctx.reply_error(e);
        ffi::OK
    };
    let Some(mut slot) = Slot::open(ctx, name, || grant::fresh(ask.kind, ask.limit)) else {
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
    // What is over ends; no per-waiter liveness lookups (dead connections
    // are pruned by jobs).
    let (ticked, fx) = settle(ctx, &w.key, lock, now);
    let had_place = lock.has_waiter(id);
    let mut outcome = attempt(ask, Some(id), lock, now, now_us);
    // No place here (the lock was made anew, or came from another key or
    // db: DEL, SWAPDB) and denied: queue again. The owner may have had a
    // place here already, which the new one takes over: ask again from it,
    // or a grantable head would wait for the next signal (found by the
    // simulator: SWAPDB bringing an owner's queued place and its wait
    // together).
    let requeued = matches!(outcome, Ok(Grant::Denied)) && !had_place;
    if requeued {
        enqueue(lock, ask, id, w.deadline);
        outcome = attempt(ask, Some(id), lock, now, now_us);
    }
    match outcome {
        Ok(Grant::Granted { token, reentrant }) => {
            grant::count_grant(reentrant, had_place || requeued);
            if !reentrant {
                // The ready callback runs on the waiting connection's
                // context: a BIND hold is bound to the waiter.
                let hold = (&*ask.owner, ask.mode, ask.bind, ask.lock_delay);
                grant::new_hold(ctx, w.client, &w.key, lock, hold);
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
            let changed = ticked || requeued;
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
fn on_timeout(ctx: Ctx<'_>) -> c_int {
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
    // A latch's place goes; a lock's place goes too, but a fair-lock owner
    // keeps it, queued, until this deadline.
    let until = match w.want {
        Want::Open => None,
        Want::Grant(_) => Some(now.saturating_add(config::fair_queue_timeout_ms())),
    };
    if pause::paused() {
        // Nothing may be propagated now: the place goes by a job once the
        // pause is over (`pause`); until then every read and write of the
        // lock finds it gone (`commit::settle`). The answer does not wait.
        waiters::note_ended(w.db, &w.key, (id, until));
        jobq::schedule(Job::WaitEnded(w.db, w.key.clone()));
        return ctx.reply_null();
    }
    storage::with_lock(ctx, w.db, &w.key, |mut g| {
        if end_wait_place(g.lock_mut(), (id, until)) {
            let fx = Effects {
                notice: None,
                wake: until.is_some(),
            };
            commit(g, fx);
        }
    });
    ctx.reply_null()
}

/// The blocked connection is done (replied, timed out, or disconnected).
/// A waiter that was never answered (its connection closed) leaves the
/// queue at once, by a deferred prune.
fn on_free(id: u64) {
    if let Some(Some(e)) = with(|m| m.remove(&id)) {
        note_end(id, &e);
        observe_end(id, &e);
        if !e.done {
            jobq::schedule(Job::Prune(e.w.db, e.w.key.clone()));
        }
    }
}

/// The wait of `id` ended: it leaves the deadlock detector's index.
fn note_end(id: u64, e: &Entry) {
    if let Want::Grant(a) = &e.w.want {
        deadlock::note_end(id, &a.owner, a.kind, e.w.db, &e.w.key);
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

/// The callbacks of a waiting connection (see [`block`]), called by the
/// FFI's trampolines with the blocked client's context.
struct Waiter;

impl Blocked for Waiter {
    fn ready(ctx: Ctx<'_>) -> c_int {
        on_ready(ctx)
    }
    fn timeout(ctx: Ctx<'_>) -> c_int {
        on_timeout(ctx)
    }
    fn free(id: u64) {
        on_free(id);
    }
    fn disconnect(ctx: Ctx<'_>) {
        on_disconnect(ctx);
    }
}
