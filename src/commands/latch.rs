//! `DLOCK.LATCHSET key count`, `DLOCK.COUNTDOWN key`, `DLOCK.AWAIT key [WAIT ms]`
//!
//! A countdown latch (kind `latch`). AWAIT blocks the connection on the
//! key (`RedisModule_BlockClientOnKeys`, so Redis Cluster redirects it with
//! `-MOVED` when the slot moves, and WAIT ends it) and takes a place of mode
//! `await` in the latch's queue, named by the connection's client id.
//!
//! When the latch opens (COUNTDOWN to 0, FORCERELEASE, or the key deleted)
//! its key is removed — and Redis 7.0 serves blocked clients only of keys
//! that exist — so the waiters are answered directly, in the same pass: each
//! waiting connection's handle is kept in [`AWAITING`], marked opened, and
//! unblocked with `RedisModule_UnblockClient`, which for a client blocked on
//! keys runs its timeout callback at once; that callback sees the mark and
//! replies 1 instead of nil.

use super::{commit, live_at, tick, Effects};
use crate::args::{self, arg};
use crate::datatype::{with_lock, Held, LockKey};
use crate::error;
use crate::ffi::{self, rm, Ctx, Key, RString, RawCtx, RawStr};
use crate::{config, notify, runtime, stats};
use dlock_core::{codec::MAX_SIZE, Countdown, Kind, Lock, Mode};
use std::cell::Cell;
use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::sync::{Mutex, MutexGuard};

/// A connection waiting in AWAIT: its blocked-client handle and whether
/// its latch opened.
struct Awaiting {
    handle: ffi::BlockedClient,
    opened: bool,
    db: i32,
}

lazy_static::lazy_static! {
    static ref AWAITING: Mutex<HashMap<u64, Awaiting>> = Mutex::new(HashMap::new());
}

fn awaiting() -> MutexGuard<'static, HashMap<u64, Awaiting>> {
    AWAITING.lock().unwrap_or_else(|e| e.into_inner())
}

/// Answers `1` to the waiting connections `ids` of a latch that opened (or
/// left its key). Ids that name no connection of this process are skipped.
pub fn answer_opened(ids: &[u64]) {
    let handles: Vec<ffi::BlockedClient> = {
        let mut map = awaiting();
        ids.iter()
            .filter_map(|id| {
                // Each connection is unblocked once.
                map.get_mut(id).filter(|a| !a.opened).map(|a| {
                    a.opened = true;
                    a.handle
                })
            })
            .collect()
    };
    for h in handles {
        // SAFETY: the handle was returned by BlockClientOnKeys and stays
        // valid until on_free, which removes it from AWAITING first; for a
        // client blocked on keys UnblockClient runs on_timeout at once (or
        // does nothing when the client is already being unblocked).
        unsafe { h.unblock() };
    }
}

/// FLUSHDB (`db`) or FLUSHALL (-1): every latch of the db is gone, so its
/// waiting connections are answered 1.
pub fn answer_flushed(db: i32) {
    let ids: Vec<u64> = awaiting()
        .iter()
        .filter(|(_, a)| db == -1 || a.db == db)
        .map(|(id, _)| *id)
        .collect();
    answer_opened(&ids);
}

fn is_opened(id: u64) -> bool {
    awaiting().get(&id).is_some_and(|a| a.opened)
}

/// Opens the latch in `key` at once (FORCERELEASE): removes it, publishes
/// `released`, answers every waiter 1.
pub fn force_open(ctx: Ctx, key: &Key, name: RawStr, lock: &mut Lock) {
    let ids = lock.open();
    stats::add(&stats::counter::latches_opened, 1);
    let fx = Effects {
        notice: Some(notify::RELEASED),
        wake: false,
    };
    commit(ctx, key, name, lock, fx);
    answer_opened(&ids);
}

/// # Safety
/// Called by Redis with a valid context and arguments.
pub unsafe extern "C" fn latchset_cmd(ctx: RawCtx, argv: *mut RawStr, argc: c_int) -> c_int {
    let ctx = Ctx(ctx);
    // SAFETY: argv/argc are the arguments Redis passed to this command.
    let args = unsafe { ffi::args(argv, argc) };
    if args.len() != 3 {
        return ctx.wrong_arity();
    }
    let count = match args::millis(arg(args, 2), 1, error::COUNT_RANGE) {
        Ok(c) if c <= MAX_SIZE => c,
        _ => return ctx.reply_error(error::COUNT_RANGE),
    };
    let name = ffi::arg_ptr(args, 1);
    let key = ctx.open(name, true);
    match key.held() {
        Held::Other => ctx.reply_error(error::WRONGTYPE),
        Held::Lock(l) if l.kind() != Kind::Latch => ctx.reply_error(error::wrong_kind(l.kind())),
        Held::Lock(_) => ctx.reply_int(0),
        Held::Empty => {
            if !key.set(Lock::latch(count)) {
                return ctx.reply_error(error::OOM_STORE);
            }
            if let Held::Lock(stored) = key.held() {
                commit(ctx, &key, name, stored, Effects::default());
            }
            ctx.reply_int(1)
        }
    }
}

/// # Safety
/// Called by Redis with a valid context and arguments.
pub unsafe extern "C" fn countdown_cmd(ctx: RawCtx, argv: *mut RawStr, argc: c_int) -> c_int {
    let ctx = Ctx(ctx);
    // SAFETY: argv/argc are the arguments Redis passed to this command.
    let args = unsafe { ffi::args(argv, argc) };
    if args.len() != 2 {
        return ctx.wrong_arity();
    }
    let name = ffi::arg_ptr(args, 1);
    let key = ctx.open(name, true);
    let lock = match key.held() {
        Held::Other => return ctx.reply_error(error::WRONGTYPE),
        Held::Empty => return ctx.reply_int(0),
        Held::Lock(l) if l.kind() != Kind::Latch => {
            return ctx.reply_error(error::wrong_kind(l.kind()))
        }
        Held::Lock(l) => l,
    };
    let (now, _) = ffi::now();
    // SAFETY: the key name is a command argument, live for the whole call.
    let (_, fx) = tick(lock, now, live_at(ctx.db(), unsafe { ffi::bytes(name) }));
    match lock.countdown() {
        Ok(Countdown::Counted(n)) => {
            commit(ctx, &key, name, lock, Effects { wake: false, ..fx });
            ctx.reply_int(i64::try_from(n).unwrap_or(i64::MAX))
        }
        Ok(Countdown::Opened(ids)) => {
            stats::add(&stats::counter::latches_opened, 1);
            let fx = Effects {
                notice: Some(notify::RELEASED),
                wake: false,
            };
            commit(ctx, &key, name, lock, fx);
            answer_opened(&ids);
            ctx.reply_int(0)
        }
        Err(e) => ctx.reply_error(error::lock_error(e)),
    }
}

/// What a connection waiting in AWAIT waits for; owned by Redis as the
/// blocked client's private data and freed in [`on_free`].
struct Waiting {
    id: u64,
    db: i32,
    key: Box<[u8]>,
    /// Set once the wait ended by a reply.
    done: Cell<bool>,
}

/// # Safety
/// Called by Redis with a valid context and arguments.
pub unsafe extern "C" fn await_cmd(ctx: RawCtx, argv: *mut RawStr, argc: c_int) -> c_int {
    let ctx = Ctx(ctx);
    // SAFETY: argv/argc are the arguments Redis passed to this command.
    let args = unsafe { ffi::args(argv, argc) };
    if args.len() < 2 {
        return ctx.wrong_arity();
    }
    let mut wait = None;
    let mut i = 2;
    while i < args.len() {
        if !arg(args, i).eq_ignore_ascii_case(b"WAIT") {
            return ctx.reply_error(error::AWAIT_OPTION);
        }
        if wait.is_some() {
            return ctx.reply_error(error::WAIT_TWICE);
        }
        if i + 1 >= args.len() {
            return ctx.reply_error(error::WAIT_VALUE);
        }
        match args::millis(arg(args, i + 1), 0, error::WAIT_RANGE) {
            Ok(v) => wait = Some(v),
            Err(e) => return ctx.reply_error(e),
        }
        i += 2;
    }
    let wait = wait.unwrap_or(0);
    let name = ffi::arg_ptr(args, 1);
    let key = ctx.open(name, true);
    let lock = match key.held() {
        Held::Other => return ctx.reply_error(error::WRONGTYPE),
        // No latch: open.
        Held::Empty => return ctx.reply_int(1),
        Held::Lock(l) if l.kind() != Kind::Latch => {
            return ctx.reply_error(error::wrong_kind(l.kind()))
        }
        Held::Lock(l) => l,
    };
    if wait == 0 || ctx.deny_blocking() {
        return ctx.reply_null();
    }
    let (now, _) = ffi::now();
    let deadline = now.saturating_add(wait);
    let id = runtime::new_waiter_id();
    // SAFETY: called on the running command's context.
    let client = unsafe { rm!(RedisModule_GetClientId(ctx.0) else 0) };
    // SAFETY: the key name is a command argument, live for the whole call.
    let (changed, fx) = tick(lock, now, live_at(ctx.db(), unsafe { ffi::bytes(name) }));
    let conn = client.to_string();
    if let Err(e) = lock.check_room(conn.as_bytes(), Mode::Await, true, config::max_queue()) {
        if changed {
            commit(ctx, &key, name, lock, fx);
        }
        return ctx.reply_error(&error::lock_error_text(e));
    }
    lock.enqueue_await(conn.as_bytes(), id, deadline);
    commit(ctx, &key, name, lock, Effects { wake: false, ..fx });
    drop(key);
    // SAFETY: the key name is a command argument, live for the whole call.
    let key_bytes = unsafe { ffi::bytes(name) };
    let w = Box::new(Waiting {
        id,
        db: ctx.db(),
        key: key_bytes.into(),
        done: Cell::new(false),
    });
    runtime::add_live(id, ctx.db(), key_bytes);
    stats::add(&stats::counter::waits_begun, 1);
    let mut keys = [name];
    let timeout = i64::try_from(wait).unwrap_or(i64::MAX);
    // SAFETY: callbacks are extern fns of the right shape; the private data
    // is a leaked Box<Waiting> that Redis hands to on_free exactly once.
    let handle = unsafe {
        rm!(RedisModule_BlockClientOnKeys(
            ctx.0,
            Some(on_ready),
            Some(on_timeout),
            Some(on_free),
            timeout,
            keys.as_mut_ptr(),
            1,
            Box::into_raw(w).cast::<c_void>()
        ) else std::ptr::null_mut())
    };
    if let Some(handle) = ffi::BlockedClient::new(handle) {
        awaiting().insert(
            id,
            Awaiting {
                handle,
                opened: false,
                db: ctx.db(),
            },
        );
    }
    ffi::OK
}

/// # Safety
/// `ctx` is a blocked-client context whose private data is a `Waiting`.
unsafe fn waiting<'a>(ctx: Ctx) -> Option<&'a Waiting> {
    // SAFETY: the caller's contract: a blocked-client context whose private
    // data (null or a live Box<Waiting>) outlives the callback.
    unsafe {
        rm!(RedisModule_GetBlockedClientPrivateData(ctx.0) else std::ptr::null_mut())
            .cast::<Waiting>()
            .as_ref()
    }
}

/// The key was signalled. A latch at the key: keep waiting — our answer
/// comes from [`answer_opened`] when it opens (or leaves the key), or from
/// [`on_timeout`] (a place the timer dropped at its deadline is not an
/// opening). The key empty: the latch is gone, so it is open.
unsafe extern "C" fn on_ready(ctx: RawCtx, _argv: *mut RawStr, _argc: c_int) -> c_int {
    let ctx = Ctx(ctx);
    // SAFETY: a blocked-client callback; its private data is our Waiting.
    let Some(w) = (unsafe { waiting(ctx) }) else {
        return ffi::ERR;
    };
    if is_opened(w.id) {
        w.done.set(true);
        ctx.reply_int(1);
        return ffi::OK;
    }
    let name = RString::new(&w.key);
    let key = ctx.open(name.ptr(), false);
    match key.held() {
        // In cluster mode the key may be gone because its slot moved: Redis
        // redirects the client (-MOVED).
        Held::Empty if crate::cluster::serves(ctx, &w.key) => {
            w.done.set(true);
            ctx.reply_int(1);
            ffi::OK
        }
        // Our latch, or whatever replaced it (the unlink hook answers 1).
        _ => ffi::ERR,
    }
}

/// WAIT ran out (reply nil, leave the queue), or the latch opened and
/// [`answer_opened`] unblocked us (reply 1).
unsafe extern "C" fn on_timeout(ctx: RawCtx, _argv: *mut RawStr, _argc: c_int) -> c_int {
    let ctx = Ctx(ctx);
    // SAFETY: as for on_ready.
    let Some(w) = (unsafe { waiting(ctx) }) else {
        return ctx.reply_null();
    };
    w.done.set(true);
    if is_opened(w.id) {
        return ctx.reply_int(1);
    }
    stats::add(&stats::counter::waits_timed_out, 1);
    with_lock(ctx, w.db, &w.key, true, |key, name, lock| {
        if lock.kind() == Kind::Latch && lock.remove_waiter(w.id) {
            commit(ctx, key, name, lock, Effects::default());
        }
    });
    ctx.reply_null()
}

/// The blocked connection is done (replied, timed out, or disconnected).
/// A disconnected waiter leaves the queue at once, by a deferred prune.
unsafe extern "C" fn on_free(_ctx: RawCtx, privdata: *mut c_void) {
    if privdata.is_null() {
        return;
    }
    // SAFETY: the Box<Waiting> leaked in await_cmd; Redis frees it once.
    let w = unsafe { Box::from_raw(privdata.cast::<Waiting>()) };
    awaiting().remove(&w.id);
    runtime::remove_live(w.id);
    if !w.done.get() {
        runtime::schedule(runtime::Job::Prune(w.db, w.key.clone()));
    }
}
