//! The module data type that stores one lock per key: RDB save/load (also
//! DUMP/RESTORE and MIGRATE), AOF rewrite, MEMORY USAGE, DEBUG DIGEST, and
//! the unlink hook that turns a deletion from outside (DEL, RENAME, eviction,
//! overwrite) into a `deleted` notification.

use crate::ffi::{bytes, rm, Ctx, Key, KeyValue, RString, RawStr};
use crate::{notify, runtime, stats};
use dlock_core::{codec, Lock};
use redis_module::native_types::RedisType;
use redis_module::raw;
use std::ffi::{c_char, c_int, c_void};
use std::ptr;

/// RDB encoding version of the type (the payload carries its own as well).
pub const ENCVER: i32 = 1;

pub static LOCK_TYPE: RedisType = RedisType::new(
    "dlocklock",
    ENCVER,
    raw::RedisModuleTypeMethods {
        version: raw::REDISMODULE_TYPE_METHOD_VERSION as u64,
        rdb_load: Some(rdb_load),
        rdb_save: Some(rdb_save),
        aof_rewrite: Some(aof_rewrite),
        mem_usage: Some(mem_usage),
        digest: Some(digest),
        free: Some(free),
        aux_load: Some(aux_load),
        aux_save: Some(aux_save),
        aux_save2: None,
        aux_save_triggers: raw::REDISMODULE_AUX_BEFORE_RDB as c_int,
        free_effort: None,
        unlink: None,
        copy: None,
        defrag: None,
        mem_usage2: None,
        free_effort2: None,
        unlink2: Some(unlink2),
        copy2: None,
    },
);

/// What an open key holds.
pub enum Held<'a> {
    Empty,
    Lock(&'a mut Lock),
    /// Another type, or a lock this `Key` already handed out (see
    /// [`Key::module_value`]).
    Other,
}

/// A key that may store a lock.
pub trait LockKey {
    /// What the key holds. The lock is handed out once per `Key` (and once
    /// more after [`LockKey::set`]), so two `&mut Lock` never alias.
    fn held(&self) -> Held<'_>;
    /// Stores a new lock in an empty key.
    fn set(&self, lock: Lock) -> bool;
}

impl LockKey for Key {
    fn held(&self) -> Held<'_> {
        match self.module_value(raw_type()) {
            KeyValue::Empty => Held::Empty,
            // SAFETY: a value of our type is a Box<Lock> we created; the
            // key hands it out once, so this is its only reference while the
            // key is open (Redis is single-threaded here).
            KeyValue::Mine(v) => match unsafe { v.cast::<Lock>().as_mut() } {
                Some(l) => Held::Lock(l),
                None => Held::Other,
            },
            KeyValue::Lent | KeyValue::Other => Held::Other,
        }
    }

    fn set(&self, lock: Lock) -> bool {
        let b = Box::into_raw(Box::new(lock));
        let ok = self.set_module_value(raw_type(), b.cast::<c_void>());
        if ok {
            stats::lock_created();
        } else {
            // SAFETY: Redis did not take the box, so we still own it.
            drop(unsafe { Box::from_raw(b) });
        }
        ok
    }
}

/// Selects `db`, opens `key` (for writing when `write`) and, when it holds
/// a lock, runs `f` with the open key, its name and the lock; the db the
/// context had is selected again afterwards. None when `db` cannot be
/// selected or the key holds no lock.
pub fn with_lock<R>(
    ctx: Ctx,
    db: i32,
    key: &[u8],
    write: bool,
    f: impl FnOnce(&Key, RawStr, &mut Lock) -> R,
) -> Option<R> {
    let _db = ctx.use_db(db)?;
    let name = RString::new(key);
    let k = ctx.open(name.ptr(), write);
    let Held::Lock(lock) = k.held() else {
        return None;
    };
    Some(f(&k, name.ptr(), lock))
}

/// The registered type pointer.
pub fn raw_type() -> *mut raw::RedisModuleType {
    match LOCK_TYPE.raw_type.try_borrow() {
        Ok(t) => *t,
        Err(_) => ptr::null_mut(),
    }
}

unsafe extern "C" fn rdb_load(rdb: *mut raw::RedisModuleIO, encver: c_int) -> *mut c_void {
    if encver != ENCVER {
        return ptr::null_mut();
    }
    let mut len: usize = 0;
    // SAFETY: Redis calls this with a live RDB/RESTORE io handle; every read
    // is checked for an io error and the payload is validated by decode().
    let buf = unsafe { rm!(RedisModule_LoadStringBuffer(rdb, &mut len) else ptr::null_mut()) };
    // SAFETY: as above.
    if buf.is_null() || unsafe { rm!(RedisModule_IsIOError(rdb) else 1) } != 0 {
        if !buf.is_null() {
            // SAFETY: the buffer Redis gave us, freed once.
            unsafe { rm!(RedisModule_Free(buf.cast::<c_void>()) else ()) };
        }
        return ptr::null_mut();
    }
    // SAFETY: Redis returned a buffer of `len` bytes that we own until Free.
    let decoded = codec::decode(unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), len) });
    // SAFETY: as above, freed once, after its last use.
    unsafe { rm!(RedisModule_Free(buf.cast::<c_void>()) else ()) };
    match decoded {
        Ok((mut lock, floor)) => {
            runtime::observe_token(floor.max(lock.last_token()));
            stats::lock_created();
            stats::account_waiters(&mut lock);
            Box::into_raw(Box::new(lock)).cast::<c_void>()
        }
        Err(_) => ptr::null_mut(),
    }
}

/// # Safety
/// `value` is a pointer this type created (a `Box<Lock>`), alive for the call.
unsafe fn lock_ref<'a>(value: *const c_void) -> Option<&'a Lock> {
    // SAFETY: null or a live Box<Lock> (the caller's contract).
    unsafe { value.cast::<Lock>().as_ref() }
}

unsafe extern "C" fn rdb_save(rdb: *mut raw::RedisModuleIO, value: *mut c_void) {
    // SAFETY: `value` is a Box<Lock> of this type, alive for the call.
    if let Some(lock) = unsafe { lock_ref(value) } {
        let buf = codec::encode(lock, runtime::tokens().last);
        // SAFETY: `rdb` is a live io handle; the buffer is valid for its length.
        unsafe {
            rm!(RedisModule_SaveStringBuffer(rdb, buf.as_ptr().cast::<c_char>(), buf.len()) else ())
        };
    }
}

unsafe extern "C" fn aof_rewrite(
    aof: *mut raw::RedisModuleIO,
    key: *mut raw::RedisModuleString,
    value: *mut c_void,
) {
    // SAFETY: `value` is a Box<Lock> of this type, alive for the call.
    if let Some(lock) = unsafe { lock_ref(value) } {
        let buf = codec::encode(lock, runtime::tokens().last);
        // SAFETY: `aof` and `key` are live for the call; "sb" takes a module
        // string and a (ptr, len) buffer.
        unsafe {
            rm!(RedisModule_EmitAOF(
                aof,
                c"DLOCK.APPLY".as_ptr(),
                c"sb".as_ptr(),
                key,
                buf.as_ptr().cast::<c_char>(),
                buf.len()
            ) else ())
        };
    }
}

unsafe extern "C" fn mem_usage(value: *const c_void) -> usize {
    // SAFETY: `value` is a Box<Lock> of this type, alive for the call.
    unsafe { lock_ref(value) }.map_or(0, Lock::mem_usage)
}

unsafe extern "C" fn digest(md: *mut raw::RedisModuleDigest, value: *mut c_void) {
    // SAFETY: `value` is a Box<Lock> of this type, alive for the call.
    if let Some(lock) = unsafe { lock_ref(value) } {
        // The token floor is server-wide, not part of this key's content.
        let buf = codec::encode(lock, 0);
        // SAFETY: `md` is live for the call; the buffer is valid for its length.
        unsafe {
            rm!(RedisModule_DigestAddStringBuffer(md, buf.as_ptr().cast::<c_char>(), buf.len()) else ());
            rm!(RedisModule_DigestEndSequence(md) else ());
        }
    }
}

unsafe extern "C" fn free(value: *mut c_void) {
    if !value.is_null() {
        // SAFETY: every value of this type is a Box<Lock> made by us; Redis
        // frees each once. May run on a lazy-free thread: only memory and
        // an atomic are touched.
        let lock = unsafe { Box::from_raw(value.cast::<Lock>()) };
        stats::waiters_freed(lock.counted_waiters);
        drop(lock);
        stats::lock_freed();
    }
}

unsafe extern "C" fn aux_save(rdb: *mut raw::RedisModuleIO, _when: c_int) {
    // SAFETY: `rdb` is a live io handle during the call.
    unsafe { rm!(RedisModule_SaveUnsigned(rdb, runtime::tokens().last) else ()) };
}

unsafe extern "C" fn aux_load(rdb: *mut raw::RedisModuleIO, encver: c_int, _when: c_int) -> c_int {
    if encver != ENCVER {
        return crate::ffi::ERR;
    }
    // SAFETY: `rdb` is a live io handle; the read is checked for an io error.
    let (t, failed) = unsafe {
        (
            rm!(RedisModule_LoadUnsigned(rdb) else 0),
            rm!(RedisModule_IsIOError(rdb) else 1) != 0,
        )
    };
    if failed {
        return crate::ffi::ERR;
    }
    runtime::observe_token(t.min(dlock_core::MAX_TOKEN));
    crate::ffi::OK
}

/// A lock leaves the keyspace (DEL, UNLINK, RENAME/MOVE source, overwrite,
/// eviction). Its expiry entry goes; if someone held it, waiters may now
/// take the key: publish `deleted` and wake connections blocked on it.
unsafe extern "C" fn unlink2(octx: *mut raw::RedisModuleKeyOptCtx, value: *const c_void) {
    // SAFETY: Redis passes the value being unlinked (a Box<Lock> of this type,
    // still alive) and an option context valid for the call, whose key name
    // lives as long.
    let (lock, name, db) = unsafe {
        let Some(lock) = lock_ref(value) else { return };
        (
            lock,
            rm!(RedisModule_GetKeyNameFromOptCtx(octx) else ptr::null()),
            rm!(RedisModule_GetDbIdFromOptCtx(octx) else 0),
        )
    };
    runtime::changed();
    // SAFETY: as above.
    let key = unsafe { bytes(name) };
    runtime::unindex(lock);
    if lock.is_empty() {
        return;
    }
    let ctx: Ctx = runtime::detached();
    // A latch that leaves its key is open: `deleted` tells whoever waits.
    let latch = lock.kind() == dlock_core::Kind::Latch;
    if ctx.is_replica() || (lock.holders().is_empty() && !lock.has_blocked() && !latch) {
        return;
    }
    let notify = !lock.holders().is_empty() || latch;
    let places = lock.blocked_waiters();
    if ctx.is_cluster() {
        // MIGRATE deletes the source copy too, but the lock lives on at the
        // target: decide once the job can see whether this node still serves
        // the slot.
        runtime::schedule(runtime::Job::Left(
            db,
            key.into(),
            lock.kind(),
            places,
            notify,
        ));
        return;
    }
    if notify {
        notify::publish(ctx, key, notify::DELETED);
    }
    if !places.is_empty() {
        runtime::schedule(runtime::Job::Requeue(db, key.into(), lock.kind(), places));
    }
}
