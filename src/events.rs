//! Keyspace and server events that keep the expiry index in step with the
//! keyspace when keys change outside our commands.

use crate::ffi::{bytes, rm, Ctx, Held, RString, RawStr};
use crate::{notify, runtime};
use redis_module::raw;
use std::ffi::{c_char, c_int, c_void, CStr};

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
    }
    true
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
    if !matches!(ev, b"loaded" | b"restore" | b"rename_to" | b"move_to") {
        return 0;
    }
    let ctx = Ctx(ctx);
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
            // Latches have no deadline, so the index does not list them:
            // answer their waiting connections here (a flushed latch is open).
            if !ctx.is_replica() {
                crate::commands::latch::answer_flushed(db);
            }
            for (d, key) in runtime::take_db(db) {
                notify::publish(ctx, &key, notify::DELETED);
                if ctx.is_replica() || !ctx.select_db(d) {
                    continue;
                }
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
