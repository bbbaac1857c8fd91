//! Keyspace and server events that keep the expiry index in step with the
//! keyspace when keys change outside our commands.

use crate::ffi::{bytes, rm, Ctx, Held, RString, RawStr};
use crate::{notify, runtime};
use redis_module::raw;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};

/// Subscribes to the events below.
pub fn subscribe(ctx: *mut raw::RedisModuleCtx) -> bool {
    let types = raw::REDISMODULE_NOTIFY_GENERIC | raw::REDISMODULE_NOTIFY_LOADED;
    // SAFETY: plain extern callbacks; ctx is the OnLoad context.
    unsafe {
        if rm!(RedisModule_SubscribeToKeyspaceEvents(ctx, types, Some(on_keyspace)) else 1) != 0 {
            return false;
        }
        for id in [
            raw::REDISMODULE_EVENT_FLUSHDB,
            raw::REDISMODULE_EVENT_LOADING,
            raw::REDISMODULE_EVENT_REPLICATION_ROLE_CHANGED,
            raw::REDISMODULE_EVENT_SWAPDB,
        ] {
            let ev = raw::RedisModuleEvent { id, dataver: 1 };
            if rm!(RedisModule_SubscribeToServerEvent(ctx, ev, Some(on_server_event)) else 1) != 0 {
                return false;
            }
        }
        // Servers whose filters can name the client (Redis 7.2+, Valkey):
        // note the caller's db before the commands that may fire events in
        // another db (see `caller_db`). Without it only MOVE is covered.
        let has_filter_client = { raw::RedisModule_CommandFilterGetClientId }.is_some();
        if has_filter_client && { raw::RedisModule_GetClientInfoById }.is_some() {
            rm!(RedisModule_RegisterCommandFilter(
                ctx,
                Some(on_command),
                raw::REDISMODULE_CMDFILTER_NOSELF as c_int
            ) else std::ptr::null_mut());
        }
    }
    true
}

// ---- the caller's db ------------------------------------------------------
//
// Valkey 8.1 runs keyspace-notification callbacks on the client whose
// command fired the event (valkey PR #1819) and selects the event's db on it
// without selecting back (fixed upstream by valkey PR #4024). For the events
// in another db than the caller's (MOVE's move_to, COPY ... DB's copy_to,
// DEBUG RELOAD's loaded) the caller would stay in that db, even though the
// callback does nothing to it. The callback therefore selects back the db
// the caller had, when it knows it: from the move_from event that MOVE fires
// just before move_to, or from the command filter below for COPY and DEBUG.
// On servers that run these callbacks on a temporary client, the ids match
// no connection (at most a temporary client, whose db matters to no one).

/// (client id, db) seen by the last move_from event; client 0: none.
static MOVE_FROM: (AtomicU64, AtomicI64) = (AtomicU64::new(0), AtomicI64::new(0));
/// (client id, db) of the client that last sent COPY or DEBUG.
static SENT_BY: (AtomicU64, AtomicI64) = (AtomicU64::new(0), AtomicI64::new(0));

fn note(slot: &(AtomicU64, AtomicI64), client: u64, db: i32) {
    slot.0.store(client, Relaxed);
    slot.1.store(i64::from(db), Relaxed);
}

/// The db noted in `slot` for `client`, if any; `take` forgets it.
fn noted(slot: &(AtomicU64, AtomicI64), client: u64, take: bool) -> Option<i32> {
    let id = if take {
        slot.0.swap(0, Relaxed)
    } else {
        slot.0.load(Relaxed)
    };
    if id == 0 || id != client {
        return None;
    }
    i32::try_from(slot.1.load(Relaxed)).ok()
}

/// The db the client of a keyspace callback had before the server selected
/// the event's db on it, for the events that can differ from it.
fn caller_db(ctx: Ctx, ev: &[u8]) -> Option<i32> {
    match ev {
        b"move_from" => {
            note(&MOVE_FROM, ctx.client_id(), ctx.db());
            None
        }
        b"move_to" => noted(&MOVE_FROM, ctx.client_id(), true),
        b"copy_to" => noted(&SENT_BY, ctx.client_id(), true),
        b"loaded" => noted(&SENT_BY, ctx.client_id(), false),
        _ => None,
    }
}

/// (client id, db) of a client in MULTI: the db its queued commands will
/// run in, as far as its queued SELECTs tell.
static QUEUED_IN: (AtomicU64, AtomicI64) = (AtomicU64::new(0), AtomicI64::new(0));

/// Command filter: notes the db of a client sending COPY or DEBUG (for a
/// command queued in MULTI, the db it will run in: the db at MULTI, changed
/// by queued SELECTs). Costs every other command a few length comparisons.
unsafe extern "C" fn on_command(fctx: *mut raw::RedisModuleCommandFilterCtx) {
    // SAFETY: Redis passes a filter context valid for the call; arguments
    // are live strings; the client-info struct is ours, versioned and
    // zero-initialised as the API requires.
    let name = bytes(rm!(RedisModule_CommandFilterArgGet(fctx, 0) else std::ptr::null_mut()));
    let is = |n: &[u8]| name.eq_ignore_ascii_case(n);
    let (multi, select, sent) = (is(b"multi"), is(b"select"), is(b"copy") || is(b"debug"));
    if !(multi || select || sent) {
        return;
    }
    let id = rm!(RedisModule_CommandFilterGetClientId(fctx) else 0);
    let mut info: raw::RedisModuleClientInfo = std::mem::zeroed();
    info.version = 1;
    let found = rm!(RedisModule_GetClientInfoById((&mut info as *mut raw::RedisModuleClientInfo).cast::<c_void>(), id) else crate::ffi::ERR);
    if id == 0 || found != crate::ffi::OK {
        SENT_BY.0.store(0, Relaxed);
        return;
    }
    let db = i32::from(info.db);
    let in_multi = info.flags & u64::from(raw::REDISMODULE_CLIENTINFO_FLAG_MULTI) != 0;
    if multi && !in_multi {
        note(&QUEUED_IN, id, db);
    } else if select && in_multi {
        let arg = bytes(rm!(RedisModule_CommandFilterArgGet(fctx, 1) else std::ptr::null_mut()));
        match std::str::from_utf8(arg)
            .ok()
            .and_then(|a| a.parse::<i32>().ok())
        {
            Some(n) if noted(&QUEUED_IN, id, false).is_some() => note(&QUEUED_IN, id, n),
            _ => {}
        }
    } else if sent {
        let queued = if in_multi {
            noted(&QUEUED_IN, id, false)
        } else {
            None
        };
        note(&SENT_BY, id, queued.unwrap_or(db));
    }
}

/// A key appeared under a new name or from a load: file it in the index.
/// (Notification callbacks must not write keys; this only reads the value
/// and updates module memory.)
unsafe extern "C" fn on_keyspace(
    ctx: *mut raw::RedisModuleCtx,
    _type: c_int,
    event: *const c_char,
    key: RawStr,
) -> c_int {
    // SAFETY: Redis passes a context, a NUL-terminated event name and a key
    // object valid for the call; the key is copied before OpenKey.
    runtime::changed();
    if event.is_null() {
        return 0;
    }
    let ev = CStr::from_ptr(event).to_bytes();
    let ctx = Ctx(ctx);
    // Dropped last: the caller's db is selected back after the work below.
    let _back = ctx.select_on_drop(caller_db(ctx, ev));
    if !matches!(ev, b"loaded" | b"restore" | b"rename_to" | b"move_to") {
        return 0;
    }
    // The "loaded" event passes a key object on the stack, which OpenKey
    // must not retain: open a copy.
    let name = RString::new(bytes(key));
    let k = ctx.open(name.ptr(), false);
    if let Held::Lock(lock) = k.held() {
        lock.indexed_at = 0;
        runtime::reindex(ctx, ctx.db(), bytes(key), lock);
        if lock.has_blocked() && !ctx.is_replica() && !ctx.is_loading() {
            let job = if matches!(ev, b"rename_to" | b"move_to") {
                // The waiting connections wait on the old key, where their
                // places were given back (Job::Requeue): drop them here.
                let ids = lock.blocked_waiters().iter().map(|w| w.id).collect();
                runtime::Job::Forget(ctx.db(), bytes(key).into(), ids)
            } else {
                // Waiters persisted with the lock may name gone connections.
                runtime::Job::Prune(ctx.db(), bytes(key).into())
            };
            runtime::schedule(job);
        }
    }
    0
}

unsafe extern "C" fn on_server_event(
    ctx: *mut raw::RedisModuleCtx,
    event: raw::RedisModuleEvent,
    sub: u64,
    data: *mut c_void,
) {
    // SAFETY: `data` points to the event's info struct (FlushInfo, SwapDbInfo)
    // for the event ids it is read for, and is only read during the call.
    runtime::changed();
    let ctx = Ctx(ctx);
    match event.id {
        raw::REDISMODULE_EVENT_FLUSHDB if sub == raw::REDISMODULE_SUBEVENT_FLUSHDB_START => {
            let db = data
                .cast::<raw::RedisModuleFlushInfo>()
                .as_ref()
                .map_or(-1, |f| f.dbnum);
            for (d, key) in runtime::take_db(db) {
                notify::publish(ctx, &key, notify::DELETED);
                if ctx.is_replica() {
                    continue;
                }
                let Some(_db) = ctx.use_db(d) else { continue };
                let name = RString::new(&key);
                let k = ctx.open(name.ptr(), false);
                if let Held::Lock(lock) = k.held() {
                    if lock.has_blocked() {
                        let places = lock.blocked_waiters();
                        runtime::schedule(runtime::Job::Requeue(d, key, lock.kind(), places));
                    }
                }
            }
        }
        raw::REDISMODULE_EVENT_LOADING if sub == raw::REDISMODULE_SUBEVENT_LOADING_ENDED => {
            runtime::schedule(runtime::Job::PruneAll);
        }
        raw::REDISMODULE_EVENT_REPLICATION_ROLE_CHANGED
            if sub == raw::REDISMODULE_EVENT_REPLROLECHANGED_NOW_MASTER =>
        {
            runtime::schedule(runtime::Job::PruneAll);
        }
        raw::REDISMODULE_EVENT_SWAPDB => {
            if let Some(info) = data.cast::<raw::RedisModuleSwapDbInfo>().as_ref() {
                runtime::swap_dbs(info.dbnum_first, info.dbnum_second);
            }
        }
        _ => {}
    }
}
