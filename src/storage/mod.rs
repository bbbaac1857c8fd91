//! Storage: the module data type that keeps one lock per key, and typed
//! access to it.
//!
//! A key holds a [`Stored`]: the core's [`Lock`] plus the module's own
//! bookkeeping (its expiry-index entry and how many of its places the
//! waiters gauge counts), which the core never sees. Commands reach a
//! stored lock only through a guard:
//! - [`open`] opens a key for writing and gives an [`Opened`]: a [`Guard`]
//!   (a lock is there; `&mut` access through `&mut self`), a [`Vacant`] key
//!   (store a new lock, which gives a guard), or another type;
//! - [`Guard::delete`] consumes the guard, so no borrow of the lock can be
//!   live when Redis frees it; a value is replaced only through `&mut`;
//! - [`read`] opens a key for reading and hands out `&Stored` only. The
//!   index bookkeeping is in `Cell`s, so an event callback that may not
//!   write keys can still refile a lock it reads.
//!
//! The type callbacks: RDB save/load (also DUMP/RESTORE and MIGRATE), AOF
//! rewrite, MEMORY USAGE, DEBUG DIGEST, free, and the token counter saved
//! as aux data. (`unlink2`, which reacts to a lock leaving the keyspace, is
//! an event and lives in `services::events`.)

pub mod tokens;

use crate::ffi::{rm, Ctx, Key, KeyValue, ModuleType, RStr, RString};
use crate::stats;
use dlock_core::{codec, Lock};
use redis_module::raw;
use std::cell::Cell;
use std::ffi::{c_char, c_int, c_void};
use std::ptr::{self, NonNull};

/// RDB encoding version of the type (the payload carries its own as well).
pub const ENCVER: i32 = 1;

/// (deadline, entry id) of a lock in the expiry index; deadline 0: not
/// filed. A 32-bit id keeps [`Stored`] in the allocator's 192-byte class
/// (the index never files two locks under one entry: see
/// `services::expiry::reindex`).
pub type Entry = (u64, u32);

/// What one key holds: the lock, and the module's bookkeeping of it (not
/// persisted).
#[derive(Debug)]
pub struct Stored {
    pub lock: Lock,
    /// The lock's entry in the expiry index (`services::expiry`), as two
    /// cells so that no padding grows the value.
    entry_at: Cell<u64>,
    entry_id: Cell<u32>,
    /// How many of the lock's places the server-wide waiters gauge counts.
    counted_waiters: Cell<u32>,
}

impl Stored {
    pub fn new(lock: Lock) -> Stored {
        Stored {
            lock,
            entry_at: Cell::new(0),
            entry_id: Cell::new(0),
            counted_waiters: Cell::new(0),
        }
    }

    /// The lock's expiry-index entry ((0, _): not filed).
    pub fn entry(&self) -> Entry {
        (self.entry_at.get(), self.entry_id.get())
    }

    /// Records the lock's expiry-index entry (bookkeeping: allowed through
    /// a key opened for reading).
    pub fn set_entry(&self, e: Entry) {
        self.entry_at.set(e.0);
        self.entry_id.set(e.1);
    }

    /// Brings the server-wide waiters gauge in step with the lock's queue.
    pub fn account_waiters(&self) {
        let now = u32::try_from(self.lock.waiters().len()).unwrap_or(u32::MAX);
        let before = self.counted_waiters.replace(now);
        stats::waiters_changed(before, now);
    }
}

/// The module type, registered at load ([`set_type`]; its method table is
/// declared with the other registrations, in lib.rs).
static LOCK_TYPE: std::sync::OnceLock<&'static redis_module::native_types::RedisType> =
    std::sync::OnceLock::new();

/// Names the registered module type (once, at load).
pub fn set_type(t: &'static redis_module::native_types::RedisType) {
    let _ = LOCK_TYPE.set(t);
}

/// The registered type (None before registration).
fn lock_type() -> Option<ModuleType> {
    let p = match LOCK_TYPE.get().map(|t| t.raw_type.try_borrow()) {
        Some(Ok(t)) => *t,
        _ => ptr::null_mut(),
    };
    // SAFETY: null, or the type redis_module registered for LOCK_TYPE at
    // load, alive for the module's life.
    unsafe { ModuleType::from_raw(p) }
}

/// What [`open`] found at a key.
pub enum Opened<'n> {
    /// No key: a lock may be stored.
    Vacant(Vacant<'n>),
    /// A lock.
    Lock(Guard<'n>),
    /// A key of another type.
    Other,
}

/// A key that holds nothing, open for writing.
pub struct Vacant<'n> {
    key: Key,
    name: RStr<'n>,
    ctx: Ctx,
}

/// A key that holds a lock, open for writing: the only way to reach a
/// stored lock mutably.
pub struct Guard<'n> {
    key: Key,
    name: RStr<'n>,
    ctx: Ctx,
    /// The key's value, owned by Redis while the key holds it; reached only
    /// through `&self`/`&mut self` of this guard, which owns the open key.
    claim: Claim,
}

/// A key that holds a lock, open for reading.
pub struct ReadGuard {
    _key: Key,
    claim: Claim,
}

/// A stored value reached by one guard: while a `Claim` on it lives, no
/// other guard can be made for it (a second [`open`] or [`read`] of the
/// same key finds it claimed and answers "another type"), so a `&mut` from
/// one guard never aliases a reference from another.
struct Claim(NonNull<Stored>);

thread_local! {
    /// The values claimed now (few: a command holds one guard at a time).
    static CLAIMED: std::cell::RefCell<Vec<NonNull<Stored>>> = const {
        std::cell::RefCell::new(Vec::new())
    };
}

impl Claim {
    fn new(v: NonNull<Stored>) -> Option<Claim> {
        CLAIMED
            .try_with(|c| {
                let mut c = c.try_borrow_mut().ok()?;
                if c.contains(&v) {
                    return None;
                }
                c.push(v);
                Some(Claim(v))
            })
            .ok()
            .flatten()
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        let _ = CLAIMED.try_with(|c| {
            if let Ok(mut c) = c.try_borrow_mut() {
                if let Some(i) = c.iter().position(|v| *v == self.0) {
                    c.swap_remove(i);
                }
            }
        });
    }
}

/// Opens `name` in the context's selected db for writing.
pub fn open(ctx: Ctx, name: RStr<'_>) -> Opened<'_> {
    let key = ctx.open(name, true);
    let Some(ty) = lock_type() else {
        return Opened::Other;
    };
    match key.module_value(ty) {
        KeyValue::Empty => Opened::Vacant(Vacant { key, name, ctx }),
        KeyValue::Mine(v) => match NonNull::new(v.cast::<Stored>()).and_then(Claim::new) {
            Some(claim) => Opened::Lock(Guard {
                key,
                name,
                ctx,
                claim,
            }),
            None => Opened::Other,
        },
        KeyValue::Other => Opened::Other,
    }
}

/// Opens `name` in the context's selected db for reading: `Ok(None)` when
/// there is no key, `Err(())` for a key of another type.
pub fn read(ctx: Ctx, name: RStr<'_>) -> Result<Option<ReadGuard>, ()> {
    let key = ctx.open(name, false);
    let Some(ty) = lock_type() else {
        return Err(());
    };
    match key.module_value(ty) {
        KeyValue::Empty => Ok(None),
        KeyValue::Mine(v) => match NonNull::new(v.cast::<Stored>()).and_then(Claim::new) {
            Some(claim) => Ok(Some(ReadGuard { _key: key, claim })),
            None => Err(()),
        },
        KeyValue::Other => Err(()),
    }
}

/// A lock found at a key, or a new one for a vacant key, stored only when
/// something must be (a grant, a place).
pub enum Slot<'n> {
    Stored(Guard<'n>),
    New(Vacant<'n>, Lock),
}

impl<'n> Slot<'n> {
    /// Opens `name` for writing: the lock there, or `fresh()` for a vacant
    /// key; None for a key of another type.
    pub fn open(ctx: Ctx, name: RStr<'n>, fresh: impl FnOnce() -> Lock) -> Option<Slot<'n>> {
        match open(ctx, name) {
            Opened::Other => None,
            Opened::Lock(g) => Some(Slot::Stored(g)),
            Opened::Vacant(v) => Some(Slot::New(v, fresh())),
        }
    }

    pub fn lock_mut(&mut self) -> &mut Lock {
        match self {
            Slot::Stored(g) => g.lock_mut(),
            Slot::New(_, l) => l,
        }
    }

    /// The guard of the stored lock, storing the new one first (None when
    /// Redis refuses).
    pub fn store(self) -> Option<Guard<'n>> {
        match self {
            Slot::Stored(g) => Some(g),
            Slot::New(v, l) => v.store(l),
        }
    }

    /// The guard of a lock that was stored before (a new lock that was not
    /// stored has nothing to commit).
    pub fn stored(self) -> Option<Guard<'n>> {
        match self {
            Slot::Stored(g) => Some(g),
            Slot::New(..) => None,
        }
    }
}

/// Selects `db`, opens `key` for writing and, when it holds a lock, runs
/// `f` with its guard; the db the context had is selected again afterwards.
/// None when `db` cannot be selected or the key holds no lock.
pub fn with_lock<R>(ctx: Ctx, db: i32, key: &[u8], f: impl FnOnce(Guard<'_>) -> R) -> Option<R> {
    let _db = ctx.use_db(db)?;
    let name = RString::new(key)?;
    match open(ctx, name.as_rstr()) {
        Opened::Lock(g) => Some(f(g)),
        _ => None,
    }
}

/// [`with_lock`] for reading.
pub fn with_read<R>(ctx: Ctx, db: i32, key: &[u8], f: impl FnOnce(&Stored) -> R) -> Option<R> {
    let _db = ctx.use_db(db)?;
    let name = RString::new(key)?;
    match read(ctx, name.as_rstr()) {
        Ok(Some(g)) => Some(f(g.get())),
        _ => None,
    }
}

impl<'n> Vacant<'n> {
    /// Stores `lock` in the key; None when Redis refuses (the lock is
    /// dropped).
    pub fn store(self, lock: Lock) -> Option<Guard<'n>> {
        let ty = lock_type()?;
        let value = NonNull::from(Box::leak(Box::new(Stored::new(lock))));
        // SAFETY: a Box<Stored> is what this type's callbacks expect and
        // free.
        let ok = unsafe {
            self.key
                .set_module_value(ty, value.as_ptr().cast::<c_void>())
        };
        if !ok {
            // SAFETY: Redis did not take the box, so we still own it.
            drop(unsafe { Box::from_raw(value.as_ptr()) });
            return None;
        }
        stats::lock_created();
        Some(Guard {
            key: self.key,
            name: self.name,
            ctx: self.ctx,
            // A value just stored is reached by nobody else.
            claim: Claim::new(value)?,
        })
    }
}

impl<'n> Guard<'n> {
    pub fn get(&self) -> &Stored {
        // SAFETY: the value is the key's Box<Stored>, alive while the key
        // holds it: it is not replaced or deleted while this guard lives
        // (both go through `self`, and `delete` consumes it); no other guard
        // reaches it (the claim); and Redis runs no other code on it during
        // our callback (single-threaded; the unlink and free callbacks run
        // only on deletion).
        unsafe { self.claim.0.as_ref() }
    }

    pub fn get_mut(&mut self) -> &mut Stored {
        // SAFETY: as in `get`; `&mut self` and the claim make this the only
        // reference.
        unsafe { self.claim.0.as_mut() }
    }

    pub fn lock(&self) -> &Lock {
        &self.get().lock
    }

    pub fn lock_mut(&mut self) -> &mut Lock {
        &mut self.get_mut().lock
    }

    pub fn name(&self) -> RStr<'n> {
        self.name
    }

    pub fn key_bytes(&self) -> &'n [u8] {
        self.name.bytes()
    }

    pub fn ctx(&self) -> Ctx {
        self.ctx
    }

    /// Deletes the key, and the lock with it (Redis frees it through the
    /// type's unlink and free callbacks, synchronously). Consumes the guard:
    /// nothing can reach the lock afterwards.
    pub fn delete(self) {
        let Guard { key, claim, .. } = self;
        key.delete();
        // Unclaimed only now that the value is gone with its key.
        drop(claim);
    }
}

impl ReadGuard {
    pub fn get(&self) -> &Stored {
        // SAFETY: the value is the key's Box<Stored>, alive while the key
        // is open and nothing deletes it: this guard hands out `&` only, no
        // other guard reaches it (the claim), and our callback runs alone on
        // the main thread.
        unsafe { self.claim.0.as_ref() }
    }
}

pub unsafe extern "C" fn rdb_load(rdb: *mut raw::RedisModuleIO, encver: c_int) -> *mut c_void {
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
        Ok((lock, floor)) => {
            tokens::observe(floor.max(lock.last_token()));
            stats::lock_created();
            let stored = Stored::new(lock);
            stored.account_waiters();
            Box::into_raw(Box::new(stored)).cast::<c_void>()
        }
        Err(_) => ptr::null_mut(),
    }
}

/// # Safety
/// `value` is null or a pointer this type created (a `Box<Stored>`), alive
/// and not mutated for `'a`.
pub unsafe fn stored_ref<'a>(value: *const c_void) -> Option<&'a Stored> {
    // SAFETY: null or a live Box<Stored> (the caller's contract).
    unsafe { value.cast::<Stored>().as_ref() }
}

/// # Safety
/// As [`stored_ref`].
unsafe fn lock_ref<'a>(value: *const c_void) -> Option<&'a Lock> {
    // SAFETY: the caller's contract.
    unsafe { stored_ref(value) }.map(|s| &s.lock)
}

pub unsafe extern "C" fn rdb_save(rdb: *mut raw::RedisModuleIO, value: *mut c_void) {
    // SAFETY: `value` is a Box<Stored> of this type, alive for the call.
    if let Some(lock) = unsafe { lock_ref(value) } {
        let buf = codec::encode(lock, tokens::last());
        // SAFETY: `rdb` is a live io handle; the buffer is valid for its length.
        unsafe {
            rm!(RedisModule_SaveStringBuffer(rdb, buf.as_ptr().cast::<c_char>(), buf.len()) else ())
        };
    }
}

pub unsafe extern "C" fn aof_rewrite(
    aof: *mut raw::RedisModuleIO,
    key: *mut raw::RedisModuleString,
    value: *mut c_void,
) {
    // SAFETY: `value` is a Box<Stored> of this type, alive for the call.
    if let Some(lock) = unsafe { lock_ref(value) } {
        let buf = codec::encode(lock, tokens::last());
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

pub unsafe extern "C" fn mem_usage(value: *const c_void) -> usize {
    // SAFETY: `value` is a Box<Stored> of this type, alive for the call.
    unsafe { stored_ref(value) }.map_or(0, |s| {
        // The lock's own count, plus the bookkeeping beside it.
        s.lock.mem_usage() + (std::mem::size_of::<Stored>() - std::mem::size_of::<Lock>())
    })
}

pub unsafe extern "C" fn digest(md: *mut raw::RedisModuleDigest, value: *mut c_void) {
    // SAFETY: `value` is a Box<Stored> of this type, alive for the call.
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

pub unsafe extern "C" fn free(value: *mut c_void) {
    if !value.is_null() {
        // SAFETY: every value of this type is a Box<Stored> made by us; Redis
        // frees each once. May run on a lazy-free thread: only memory and
        // atomics are touched.
        let stored = unsafe { Box::from_raw(value.cast::<Stored>()) };
        stats::waiters_changed(stored.counted_waiters.get(), 0);
        drop(stored);
        stats::lock_freed();
    }
}

#[cfg(test)]
mod tests {
    /// A held lock is one allocation of the 192-byte class: the module's
    /// bookkeeping must not push the stored value past it.
    #[test]
    fn stored_fits_the_192_byte_class() {
        assert!(std::mem::size_of::<super::Stored>() <= 192);
    }
}
