//! `DLOCK.ACQUIRE key owner [PX lease] [WAIT ms]`
//! `DLOCK.RWACQUIRE key owner READ|WRITE [PX lease] [WAIT ms]`
//! `DLOCK.FAIRACQUIRE key owner [PX lease] [WAIT ms]`
//!
//! Reply: the fencing token on grant, nil when not granted within WAIT.
//! A request that cannot be granted and may wait blocks the connection on the
//! key (`RedisModule_BlockClientOnKeys`, so Redis still redirects it with
//! `-MOVED` when the slot moves and ends it at WAIT).
//!
//! **Handoff on the server side.** A change that may let someone in (a
//! release, an expiry, a force-release, a requeue) does not signal the key:
//! [`super::commit`] calls [`hand_over`], where the state machine names the
//! waiter(s) the lock can serve now (`Lock::next_handoff`: the mutex or fair
//! head, the rw head readers together, the semaphore heads that fit), the
//! grant is made with the request kept in that waiter's [`Waiting`] (found
//! by waiter id through `runtime::live_handle`), the reply is recorded there,
//! and exactly those connections are unblocked with
//! `RedisModule_UnblockClient`, which for a client blocked on keys runs
//! [`on_timeout`] at once; it replies the recorded answer. The other
//! waiters' callbacks never run, so a handoff costs the same with 16 or
//! 4096 waiters. [`on_ready`], run by Redis for every blocked connection
//! when the key is signalled, remains for full re-checks (DLOCK.APPLY, a key
//! overwritten by another type or kind).
//!
//! A waiter whose WAIT ends as the lock is handed over ends in exactly one
//! state. Everything runs on the main thread. If [`hand_over`] grants first,
//! it marks the `Waiting` done and answered and calls `UnblockClient`, which
//! sets the blocked client's `unblocked` flag: the server's own timeout
//! check skips such a client, so [`on_timeout`] runs once, from
//! `UnblockClient`, and replies the token without touching the key. If the
//! WAIT ended first, [`on_timeout`] took the place out of the queue (or, on
//! a fair lock, made it a queued place of a connection that no longer
//! waits), so no handoff can name it; a connection that closed is taken out
//! of the registry by [`on_disconnect`] before its place is pruned, and
//! [`hand_over`] drops a place whose connection is not registered instead of
//! granting it.

use super::{commit, tick_due, Effects};
use crate::args::{self, arg};
use crate::datatype::{Held, LockKey};
use crate::error::{self, Msg};
use crate::ffi::{self, rm, Ctx, RString, RawCtx, RawStr};
use crate::{config, runtime, stats};
use dlock_core::{Grant, Kind, Lock, LockError, Mode, Request};
use redis_module::raw;
use std::cell::Cell;
use std::ffi::{c_int, c_void};

/// A parsed acquire request.
pub(super) struct Parsed<'a> {
    pub kind: Kind,
    pub owner: &'a [u8],
    pub mode: Mode,
    pub lease: u64,
    pub wait: u64,
    /// Semaphores: permits asked for and the limit named (1 and 0 for
    /// locks).
    pub permits: u32,
    pub limit: u64,
    /// `BIND`: the hold this grant creates ends when the connection closes.
    pub bind: bool,
    /// `LOCKDELAY ms` of the hold this grant creates (0: none).
    pub lock_delay: u64,
}

fn parse<'a>(args: &[RawStr], kind: Kind) -> Result<Parsed<'a>, Msg> {
    let owner = args::owner(arg(args, 2))?;
    let (mode, rest) = match kind {
        Kind::Rw => {
            if args.len() < 4 {
                return Err(error::MODE_MISSING);
            }
            (args::mode(arg(args, 3))?, 4)
        }
        _ => (Mode::Exclusive, 3),
    };
    let o = args::options(args, rest, true)?;
    Ok(Parsed {
        kind,
        owner,
        mode,
        lease: o.px.unwrap_or_else(config::default_lease_ms),
        wait: o.wait.unwrap_or(0),
        permits: 1,
        limit: 0,
        bind: o.bind,
        lock_delay: o.lock_delay.unwrap_or(0),
    })
}

/// # Safety
/// Called by Redis with a valid context and arguments.
pub unsafe extern "C" fn acquire_cmd(ctx: RawCtx, argv: *mut RawStr, argc: c_int) -> c_int {
    // SAFETY: argv/argc are the arguments Redis passed to this command.
    run(Ctx(ctx), unsafe { ffi::args(argv, argc) }, Kind::Mutex)
}

/// # Safety
/// Called by Redis with a valid context and arguments.
pub unsafe extern "C" fn rwacquire_cmd(ctx: RawCtx, argv: *mut RawStr, argc: c_int) -> c_int {
    // SAFETY: argv/argc are the arguments Redis passed to this command.
    run(Ctx(ctx), unsafe { ffi::args(argv, argc) }, Kind::Rw)
}

/// # Safety
/// Called by Redis with a valid context and arguments.
pub unsafe extern "C" fn fairacquire_cmd(ctx: RawCtx, argv: *mut RawStr, argc: c_int) -> c_int {
    // SAFETY: argv/argc are the arguments Redis passed to this command.
    run(Ctx(ctx), unsafe { ffi::args(argv, argc) }, Kind::Fair)
}

fn run(ctx: Ctx, args: &[RawStr], kind: Kind) -> c_int {
    if args.len() < 3 {
        return ctx.wrong_arity();
    }
    let p = match parse(args, kind) {
        Ok(p) => p,
        Err(e) => return ctx.reply_error(e),
    };
    if p.bind && ctx.in_script() {
        return ctx.reply_error(error::BIND_IN_SCRIPT);
    }
    let name = ffi::arg_ptr(args, 1);
    let key = ctx.open(name, true);
    let (now, now_us) = ffi::now();
    let mut fresh;
    let lock: &mut Lock = match key.held() {
        Held::Other => return ctx.reply_error(error::WRONGTYPE),
        Held::Lock(l) if l.kind() != kind => return ctx.reply_error(error::wrong_kind(l.kind())),
        Held::Lock(l) => l,
        Held::Empty => {
            fresh = Lock::new(kind);
            &mut fresh
        }
    };
    let existed = !lock.is_empty();
    let (changed, mut fx) = tick_due(lock, now);
    let req = Request {
        owner: p.owner,
        mode: p.mode,
        lease_ms: p.lease,
        waiter: None,
    };
    let mut tokens = runtime::tokens();
    let outcome = lock.acquire(&req, now, &mut tokens, now_us);
    runtime::set_tokens(tokens);
    match outcome {
        Err(e) => {
            if changed {
                commit(ctx, &key, name, lock, fx);
            }
            ctx.reply_error(error::lock_error(e))
        }
        Ok(Grant::Granted { token, reentrant }) => {
            count_grant(reentrant, false);
            if !reentrant {
                // SAFETY: name is a live argument of the running command.
                let key_name = unsafe { ffi::bytes(name) };
                let client = ctx.client_id();
                let hold = (p.owner, p.mode, p.bind, p.lock_delay);
                super::new_hold(ctx, client, key_name, lock, hold);
            }
            if !existed {
                if !key.set(std::mem::replace(lock, Lock::new(kind))) {
                    return ctx.reply_error(error::OOM_STORE);
                }
                let Held::Lock(stored) = key.held() else {
                    return ctx.reply_error(error::OOM_STORE);
                };
                commit(ctx, &key, name, stored, fx);
            } else {
                commit(ctx, &key, name, lock, fx);
            }
            ctx.reply_int(token as i64)
        }
        Ok(Grant::Denied) => {
            // A lock that exists but is not grantable: `existed` is true.
            let block = p.wait > 0 && !ctx.deny_blocking();
            if block || kind == Kind::Fair {
                if let Err(e) = lock.check_room(p.owner, p.mode, block, config::max_queue()) {
                    if changed {
                        commit(ctx, &key, name, lock, fx);
                    }
                    return ctx.reply_error(&error::lock_error_text(e));
                }
            }
            if block {
                let id = runtime::new_waiter_id();
                lock.enqueue(p.owner, p.mode, id, true, now.saturating_add(p.wait));
                fx.wake = false;
                commit(ctx, &key, name, lock, fx);
                drop(key);
                block_on(ctx, name, &p, id, now.saturating_add(p.wait));
                return ffi::OK;
            }
            if kind == Kind::Fair {
                let id = runtime::new_waiter_id();
                let deadline = now.saturating_add(config::fair_queue_timeout_ms());
                lock.enqueue(p.owner, p.mode, id, false, deadline);
                commit(ctx, &key, name, lock, fx);
            } else if changed {
                commit(ctx, &key, name, lock, fx);
            }
            ctx.reply_null()
        }
    }
}

pub(super) fn count_grant(reentrant: bool, handoff: bool) {
    stats::add(&stats::counter::grants, 1);
    if reentrant {
        stats::add(&stats::counter::reentrant_grants, 1);
    }
    if handoff {
        stats::add(&stats::counter::handoffs, 1);
    }
}

/// What a blocked connection waits for; owned by Redis as the blocked
/// client's private data and freed in [`on_free`].
struct Waiting {
    id: u64,
    db: i32,
    key: Box<[u8]>,
    kind: Kind,
    owner: Box<[u8]>,
    mode: Mode,
    lease: u64,
    deadline: u64,
    /// Semaphores: the permits asked for and the limit named.
    permits: u32,
    limit: u64,
    /// `BIND`: the hold a grant creates is bound to this connection.
    bind: bool,
    /// `LOCKDELAY` of the hold a grant creates.
    lock_delay: u64,
    /// The waiting connection's client id (a `BIND` hold made by a handoff
    /// is bound to it, not to the connection that released).
    client: u64,
    /// Set once the wait ended by a reply (grant, error or timeout).
    done: Cell<bool>,
    /// What [`hand_over`] answered before unblocking the connection.
    answer: Cell<Answer>,
}

/// The reply [`hand_over`] recorded for [`on_timeout`] to send.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Answer {
    None,
    Token(u64),
    Error(LockError),
}

pub(super) fn block_on(ctx: Ctx, name: RawStr, p: &Parsed<'_>, id: u64, deadline: u64) {
    // SAFETY: name is a live argument of the running command.
    let key = unsafe { ffi::bytes(name) };
    let w = Box::new(Waiting {
        id,
        db: ctx.db(),
        key: key.into(),
        kind: p.kind,
        owner: p.owner.into(),
        mode: p.mode,
        lease: p.lease,
        deadline,
        permits: p.permits,
        limit: p.limit,
        bind: p.bind,
        lock_delay: p.lock_delay,
        client: ctx.client_id(),
        done: Cell::new(false),
        answer: Cell::new(Answer::None),
    });
    stats::add(&stats::counter::waits_begun, 1);
    let mut keys = [name];
    let timeout = i64::try_from(p.wait).unwrap_or(i64::MAX);
    let request = Box::into_raw(w);
    // SAFETY: callbacks are extern fns of the right shape; the private data
    // is a leaked Box<Waiting> that Redis hands to on_free exactly once.
    let bc = unsafe {
        rm!(RedisModule_BlockClientOnKeys(
            ctx.0,
            Some(on_ready),
            Some(on_timeout),
            Some(on_free),
            timeout,
            keys.as_mut_ptr(),
            1,
            request.cast::<c_void>()
        ) else std::ptr::null_mut())
    };
    if !bc.is_null() {
        // SAFETY: bc is the handle just returned, valid until the client is
        // unblocked; the callback is an extern fn of the right shape.
        unsafe { rm!(RedisModule_SetDisconnectCallback(bc, Some(on_disconnect)) else ()) };
    }
    // The handle and request stay valid until on_free, which takes them out
    // of the registry first.
    let handoff = ffi::BlockedClient::new(bc)
        .zip(ffi::PrivData::new(request.cast::<c_void>()))
        .map(|(client, data)| runtime::Handoff { client, data });
    runtime::add_live_handle(id, ctx.db(), key, handoff);
}

/// What [`hand_over`] did: whether the lock changed, and the connections to
/// unblock (with [`HandOver::unblock`]) once the change is committed.
#[derive(Default)]
pub(super) struct HandOver {
    pub changed: bool,
    handles: Vec<ffi::BlockedClient>,
}

impl HandOver {
    /// Unblocks the connections the lock was handed to: for each,
    /// `UnblockClient` runs [`on_timeout`] at once, which replies the
    /// recorded answer and touches no key.
    pub(super) fn unblock(self) {
        for h in self.handles {
            // SAFETY: the handle was registered by block_on for a connection
            // still in the registry during hand_over (so not yet freed: on_free
            // runs from the server's blocked-client handling, never inside a
            // command or callback of ours); its Waiting is answered and done,
            // so the nested timeout callback only replies.
            unsafe { h.unblock() };
        }
    }
}

/// Hands `lock` (at `key` in the context's db) over, on the server side, to
/// the waiters it can serve now, in queue order: grants each with its own
/// request, records the reply in its [`Waiting`], and collects its handle.
/// Places whose connection no longer waits here are dropped, never granted.
/// Stops at the first waiter the state machine denies. O(1) per waiter
/// served (plus, on an rw lock held by one reader, a look for its upgrade).
pub(super) fn hand_over(ctx: Ctx, key: &[u8], lock: &mut Lock) -> HandOver {
    let db = ctx.db();
    let mut out = HandOver::default();
    let (now, now_us) = ffi::now();
    while let Some(id) = lock.next_handoff() {
        let live = runtime::live_handle(id, db, key);
        // SAFETY: a registered request is the leaked Box<Waiting> of a
        // connection still blocked (on_free unregisters it before freeing,
        // and does not run during this call).
        let w = live.and_then(|l| unsafe { l.data.as_ptr().cast::<Waiting>().as_ref() });
        let (Some(handle), Some(w)) = (live.map(|l| l.client), w) else {
            // A gone connection, or a place carried here from elsewhere.
            lock.remove_waiter(id);
            out.changed = true;
            continue;
        };
        if w.done.get() {
            lock.remove_waiter(id);
            out.changed = true;
            continue;
        }
        match attempt_for(w, lock, now, now_us) {
            Ok(Grant::Granted { token, reentrant }) => {
                count_grant(reentrant, true);
                if !reentrant {
                    let hold = (&*w.owner, w.mode, w.bind, w.lock_delay);
                    super::new_hold(ctx, w.client, key, lock, hold);
                }
                w.answer.set(Answer::Token(token));
            }
            Ok(Grant::Denied) => break,
            Err(e) => {
                lock.remove_waiter(id);
                w.answer.set(Answer::Error(e));
            }
        }
        w.done.set(true);
        out.changed = true;
        out.handles.push(handle);
    }
    out
}

/// Asks the state machine to grant waiter `w` its request now.
fn attempt_for(w: &Waiting, lock: &mut Lock, now: u64, now_us: u64) -> Result<Grant, LockError> {
    let req = Request {
        owner: &w.owner,
        mode: w.mode,
        lease_ms: w.lease,
        waiter: Some(w.id),
    };
    let mut tokens = runtime::tokens();
    let outcome =
        super::semaphore::attempt(lock, &req, w.permits, w.limit, now, &mut tokens, now_us);
    runtime::set_tokens(tokens);
    outcome
}

/// The waiting connection closed (or was redirected): it can no longer be
/// answered, so it leaves the registry at once and no handoff picks it
/// before its place is pruned (by [`on_free`]'s job).
unsafe extern "C" fn on_disconnect(ctx: RawCtx, _bc: *mut raw::RedisModuleBlockedClient) {
    // SAFETY: a disconnect callback's context carries the private data.
    if let Some(w) = unsafe { waiting(Ctx(ctx)) } {
        runtime::remove_live(w.id);
    }
}

/// # Safety
/// `ctx` is a blocked-client context whose private data is a `Waiting`.
unsafe fn waiting<'a>(ctx: Ctx) -> Option<&'a Waiting> {
    // SAFETY: by the caller's contract the context is a blocked client's, and
    // its private data is null or a live `Waiting` (leaked in `block_on`,
    // freed only by `on_free`, after every other callback).
    unsafe {
        rm!(RedisModule_GetBlockedClientPrivateData(ctx.0) else std::ptr::null_mut())
            .cast::<Waiting>()
            .as_ref()
    }
}

/// The key was signalled: try to grant this waiter. `REDISMODULE_ERR` keeps
/// the connection blocked.
unsafe extern "C" fn on_ready(ctx: RawCtx, _argv: *mut RawStr, _argc: c_int) -> c_int {
    let ctx = Ctx(ctx);
    // SAFETY: a blocked-client callback; its private data is our Waiting (see
    // block_on), alive until on_free.
    let Some(w) = (unsafe { waiting(ctx) }) else {
        return ffi::ERR;
    };
    stats::add(&stats::counter::ready_callbacks, 1);
    // Answered by a handoff: its unblock is on the way.
    if w.done.get() {
        return ffi::ERR;
    }
    // Right after a waiter ahead was granted the lock exclusively in this
    // round, and nothing changed since: keep waiting, without a look.
    if runtime::held_by_another(ctx.db(), &w.key, &w.owner) {
        return ffi::ERR;
    }
    // The signalled key is our key: use Redis' string rather than a copy.
    let ready = ctx.ready_key();
    let owned;
    // SAFETY: a non-null ready key is a live string for this callback.
    let name = if !ready.is_null() && unsafe { ffi::bytes(ready) } == &*w.key {
        ready
    } else {
        owned = RString::new(&w.key);
        owned.ptr()
    };
    let key = ctx.open(name, true);
    let (now, now_us) = ffi::now();
    let mut fresh;
    let lock: &mut Lock = match key.held() {
        Held::Other => {
            w.done.set(true);
            ctx.reply_error(error::WRONGTYPE);
            return ffi::OK;
        }
        Held::Lock(l) if l.kind() != w.kind => {
            w.done.set(true);
            ctx.reply_error(error::wrong_kind(l.kind()));
            return ffi::OK;
        }
        Held::Lock(l) => l,
        // In cluster mode the key may be gone because its slot moved: never
        // make a lock here then; Redis redirects the client (-MOVED).
        Held::Empty if !crate::cluster::serves(ctx, &w.key) => return ffi::ERR,
        Held::Empty => {
            fresh = super::semaphore::fresh(w.kind, w.limit);
            &mut fresh
        }
    };
    let existed = !lock.is_empty();
    // Called for every waiter on every signal, in the order they blocked:
    // most are not next. When nothing of the lock is due (its earliest lease
    // or queued-place end, as filed in the expiry index, is still ahead),
    // a waiter the state machine surely denies keeps waiting at once,
    // after a scan of waiter ids instead of a full attempt.
    if existed && lock.indexed_at > now && lock.surely_denied(w.id) {
        return ffi::ERR;
    }
    // Time-based expiry only, no per-waiter liveness lookups (dead
    // connections are pruned by jobs).
    let (ticked, fx) = tick_due(lock, now);
    let had_place = lock.has_waiter(w.id);
    match attempt_for(w, lock, now, now_us) {
        Ok(Grant::Granted { token, reentrant }) => {
            count_grant(reentrant, had_place);
            w.done.set(true);
            if !reentrant {
                // The ready callback runs on the waiting connection's
                // context: a BIND hold is bound to the waiter.
                let hold = (&*w.owner, w.mode, w.bind, w.lock_delay);
                super::new_hold(ctx, w.client, &w.key, lock, hold);
            }
            let exclusive = lock.exclusive_owner().is_some();
            // A semaphore may have permits left for the next in line.
            let mut fx = fx;
            fx.wake |= lock.head_may_be_granted();
            if existed {
                commit(ctx, &key, name, lock, fx);
            } else if key.set(std::mem::replace(lock, Lock::new(w.kind))) {
                if let Held::Lock(stored) = key.held() {
                    commit(ctx, &key, name, stored, fx);
                }
            }
            if exclusive {
                runtime::note_exclusive_grant(ctx.db(), &w.key, &w.owner);
            }
            ctx.reply_int(token as i64);
            ffi::OK
        }
        Ok(Grant::Denied) => {
            let mut changed = ticked;
            if !had_place {
                // The lock was deleted and made anew meanwhile: queue again.
                super::semaphore::enqueue_blocked(
                    lock, &w.owner, w.mode, w.permits, w.id, w.deadline,
                );
                changed = true;
            }
            if changed && existed {
                commit(ctx, &key, name, lock, fx);
            }
            ffi::ERR
        }
        Err(e) => {
            w.done.set(true);
            if lock.remove_waiter(w.id) || ticked {
                commit(ctx, &key, name, lock, Effects { wake: true, ..fx });
            }
            ctx.reply_error(error::lock_error(e));
            ffi::OK
        }
    }
}

/// WAIT ran out: reply nil and leave no waiter behind (a fair-lock owner
/// keeps a queued place it must claim within `dlock.fair-queue-timeout-ms`).
unsafe extern "C" fn on_timeout(ctx: RawCtx, _argv: *mut RawStr, _argc: c_int) -> c_int {
    let ctx = Ctx(ctx);
    // SAFETY: as for on_ready.
    if let Some(w) = unsafe { waiting(ctx) } {
        // Unblocked by hand_over: reply what it recorded, touch no key.
        match w.answer.get() {
            Answer::Token(token) => return ctx.reply_int(token as i64),
            Answer::Error(e) => return ctx.reply_error(&error::lock_error_text(e)),
            Answer::None => {}
        }
        w.done.set(true);
        stats::add(&stats::counter::waits_timed_out, 1);
        if let Some(_db) = ctx.use_db(w.db) {
            let name = RString::new(&w.key);
            let key = ctx.open(name.ptr(), true);
            if let Held::Lock(lock) = key.held() {
                let (now, _) = ffi::now();
                let queue_deadline = now.saturating_add(config::fair_queue_timeout_ms());
                if lock.wait_ended(w.id, queue_deadline) {
                    commit(
                        ctx,
                        &key,
                        name.ptr(),
                        lock,
                        Effects {
                            notice: None,
                            wake: true,
                        },
                    );
                }
            }
        }
    }
    ctx.reply_null()
}

/// The blocked connection is done (replied, timed out, or disconnected).
/// A disconnected waiter leaves the queue at once, by a deferred prune.
unsafe extern "C" fn on_free(_ctx: RawCtx, privdata: *mut c_void) {
    if privdata.is_null() {
        return;
    }
    // SAFETY: the Box<Waiting> leaked in block_on; Redis frees it once.
    let w = unsafe { Box::from_raw(privdata.cast::<Waiting>()) };
    runtime::remove_live(w.id);
    if w.kind == Kind::Semaphore {
        super::semaphore::forget_limit(w.id);
    }
    if !w.done.get() {
        runtime::schedule(runtime::Job::Prune(w.db, w.key.clone()));
    }
}
