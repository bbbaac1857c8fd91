//! Storage: the module data type that keeps one lock per key, and typed
//! access to it.
//!
//! A key holds a [`Stored`]: the core's [`Lock`] plus the module's own
//! bookkeeping (its expiry-index entry and how many of its places the
//! waiters gauge counts), which the core never sees. The lock is kept in
//! one of two forms (issue 27, memory per lock): [`Stored::Held`], the
//! core's fixed-size [`Compact`] form of a lock with one plain holder (or
//! none) and no waiter, 80 bytes in all; or [`Stored::Full`], a box with
//! the lock as it is. A guard works on a [`Lock`]: it inflates a compact
//! value into one it owns (no heap allocation), and when it is dropped
//! writes it back in the form that fits. Commands reach a stored lock only
//! through a guard:
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
use dlock_core::{codec, Compact, Lock};
use redis_module::raw;
use std::borrow::Cow;
use std::cell::Cell;
use std::ffi::{c_char, c_int, c_void};
use std::ptr::{self, NonNull};

/// RDB encoding version of the type (the payload carries its own as well).
pub const ENCVER: i32 = 1;

/// (deadline, entry id) of a lock in the expiry index; deadline 0: not
/// filed. A 32-bit id keeps [`Stored`] in the allocator's 80-byte class
/// (the index never files two locks under one entry: see
/// `services::expiry_index::reindex`).
pub type Entry = (u64, u32);

/// Bytes of the module's expiry index per filed lock, counted by
/// `MEMORY USAGE`: one entry of `services::expiry`'s index (a 32-byte entry
/// in sorted chunks that leases granted in deadline order fill; the key
/// name inline up to 22 bytes), measured ~33 B per lock with 100 000
/// `lock:N` keys on Redis 7.0 (`dlock-bench --only memory`).
pub const INDEX_ENTRY_BYTES: usize = dlock_core::deadlines::ENTRY_BYTES;

/// What one key holds: the lock, and the module's bookkeeping of it (not
/// persisted). The bookkeeping sits in each variant, so no padding grows
/// the common one.
#[derive(Debug)]
pub enum Stored {
    /// A lock that has a compact form (`Lock::compact`): one plain holder
    /// or none, no waiter. Its waiters are counted as none.
    Held {
        /// The lock's entry in the expiry index (`services::expiry`), as
        /// two cells so that no padding grows the value.
        entry_at: Cell<u64>,
        entry_id: Cell<u32>,
        hold: Compact,
    },
    /// Any other lock.
    Full(Box<Full>),
}

/// A [`Stored`] lock that has no compact form, with its bookkeeping.
#[derive(Debug)]
pub struct Full {
    pub lock: Lock,
    entry_at: Cell<u64>,
    entry_id: Cell<u32>,
    /// How many of the lock's places the server-wide waiters gauge counts.
    counted_waiters: Cell<u32>,
}

impl Stored {
    /// `lock`, in the form that fits it, not filed in the index.
    pub fn new(lock: Lock) -> Stored {
        Stored::formed(lock, (0, 0)).0
    }

    /// `lock` in the form that fits it, filed at `entry`; the lock is
    /// given back when it went in compact form (a guard may keep working
    /// on it), None when it was boxed.
    fn formed(lock: Lock, entry: Entry) -> (Stored, Option<Lock>) {
        let (entry_at, entry_id) = (Cell::new(entry.0), Cell::new(entry.1));
        match lock.compact() {
            Some(hold) => (
                Stored::Held {
                    entry_at,
                    entry_id,
                    hold,
                },
                Some(lock),
            ),
            None => (
                Stored::Full(Box::new(Full {
                    lock,
                    entry_at,
                    entry_id,
                    counted_waiters: Cell::new(0),
                })),
                None,
            ),
        }
    }

    fn cells(&self) -> (&Cell<u64>, &Cell<u32>) {
        match self {
            Stored::Held {
                entry_at, entry_id, ..
            } => (entry_at, entry_id),
            Stored::Full(f) => (&f.entry_at, &f.entry_id),
        }
    }

    /// The lock: borrowed from a full value, inflated from a compact one
    /// (no heap allocation).
    pub fn lock(&self) -> Cow<'_, Lock> {
        match self {
            Stored::Held { hold, .. } => Cow::Owned(hold.inflate()),
            Stored::Full(f) => Cow::Borrowed(&f.lock),
        }
    }

    /// [`Lock::next_deadline_hint`] (of a compact value without inflating
    /// it: its hold's lease end, exact).
    pub fn next_deadline_hint(&self) -> Option<u64> {
        match self {
            Stored::Held { hold, .. } => hold.deadline(),
            Stored::Full(f) => f.lock.next_deadline_hint(),
        }
    }

    /// Whether the lock has places of blocked connections (a compact value
    /// never has).
    pub fn has_blocked(&self) -> bool {
        match self {
            Stored::Held { .. } => false,
            Stored::Full(f) => f.lock.has_blocked(),
        }
    }

    /// Whether the lock has queue places (a compact value never has).
    pub fn has_waiters(&self) -> bool {
        match self {
            Stored::Held { .. } => false,
            Stored::Full(f) => !f.lock.waiters().is_empty(),
        }
    }

    /// [`Lock::is_empty`] (of a compact value without inflating it).
    pub fn is_empty(&self) -> bool {
        match self {
            Stored::Held { hold, .. } => hold.is_empty(),
            Stored::Full(f) => f.lock.is_empty(),
        }
    }

    /// The lock's expiry-index entry ((0, _): not filed).
    pub fn entry(&self) -> Entry {
        let (at, id) = self.cells();
        (at.get(), id.get())
    }

    /// Records the lock's expiry-index entry (bookkeeping: allowed through
    /// a key opened for reading).
    pub fn set_entry(&self, e: Entry) {
        let (at, id) = self.cells();
        at.set(e.0);
        id.set(e.1);
    }

    /// How many of the lock's places the waiters gauge counts now.
    fn counted(&self) -> u32 {
        match self {
            Stored::Held { .. } => 0,
            Stored::Full(f) => f.counted_waiters.get(),
        }
    }

    /// Brings the server-wide waiters gauge in step with the lock's queue.
    pub fn account_waiters(&self) {
        // A compact lock has no waiter, and counts none.
        if let Stored::Full(f) = self {
            let now = u32::try_from(f.lock.waiters().len()).unwrap_or(u32::MAX);
            let before = f.counted_waiters.replace(now);
            stats::waiters_changed(before, now);
        }
    }

    /// Puts `lock` here in the form that fits, keeping the bookkeeping
    /// (a full value that becomes compact gives its gauge count back: a
    /// compact lock has no waiter). Returns the lock when it went in
    /// compact form (the caller may keep working on it), None when it was
    /// boxed.
    fn put(&mut self, lock: Lock) -> Option<Lock> {
        let entry = self.entry();
        match (lock.compact(), &mut *self) {
            (Some(hold), Stored::Held { hold: h, .. }) => {
                *h = hold;
                Some(lock)
            }
            (Some(_), Stored::Full(_)) => {
                stats::waiters_changed(self.counted(), 0);
                let (stored, lock) = Stored::formed(lock, entry);
                *self = stored;
                lock
            }
            (None, Stored::Full(f)) => {
                f.lock = lock;
                None
            }
            (None, Stored::Held { .. }) => {
                let (stored, lock) = Stored::formed(lock, entry);
                *self = stored;
                lock
            }
        }
    }

    /// Bytes this value takes: itself, a full value's box and the lock's
    /// heap (what the core counts beyond the `Lock` itself).
    fn bytes(&self) -> usize {
        let me = std::mem::size_of::<Stored>();
        match self {
            Stored::Held { .. } => me,
            Stored::Full(f) => {
                me + (std::mem::size_of::<Full>() - std::mem::size_of::<Lock>())
                    + f.lock.mem_usage()
            }
        }
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
    key: Key<'n>,
    name: RStr<'n>,
    ctx: Ctx<'n>,
}

/// A key that holds a lock, open for writing: the only way to reach a
/// stored lock mutably.
///
/// A compact value is worked on as a [`Lock`] the guard owns (`work`); a
/// full value in place. What changed is written back in the form that fits
/// when the guard is dropped, when [`Guard::get`] is asked for the stored
/// value, and before [`Guard::delete`].
pub struct Guard<'n> {
    /// The open key (None only after [`Guard::delete`] took it).
    key: Option<Key<'n>>,
    name: RStr<'n>,
    ctx: Ctx<'n>,
    /// The key's value, owned by Redis while the key holds it; reached only
    /// through `&self`/`&mut self` of this guard, which owns the open key.
    claim: Claim,
    /// The lock of a compact value, inflated (Some exactly while the value
    /// is [`Stored::Held`]).
    work: Option<Lock>,
    /// The lock was reached mutably since it was last written back.
    dirty: bool,
    /// The lock had queue places when it was opened: it stays full when
    /// they go, and the next command that finds none compacts it. A lock
    /// under contention would else be boxed at every wait start and
    /// compacted at every handoff.
    contended: bool,
}

/// A key that holds a lock, open for reading; it borrows the callback's
/// context (through its open key) and the key's name, so it cannot outlive
/// either.
pub struct ReadGuard<'cb> {
    _key: Key<'cb>,
    claim: Claim,
}

/// A stored value reached by one guard: while a `Claim` on it lives, no
/// other guard can be made for it (a second [`open`] or [`read`] of the
/// same key finds it claimed and answers "another type"), so a `&mut` from
/// one guard never aliases a reference from another. The claim names the
/// key too, (db, name), and [`open`] and [`read`] look for it *before*
/// opening the key: opening runs the server's lazy expiry, which could
/// free a value an outer guard holds (a lock key given a TTL by the user).
struct Claim(NonNull<Stored>);

/// One claimed value, with the key it was claimed at. `name` is the
/// guard's key name, which the guard borrows for as long as it lives, and
/// so for as long as its claim is listed (its bytes are read only when a
/// key is opened while a claim is listed, which is rare).
struct Claimed {
    value: NonNull<Stored>,
    db: i32,
    name: crate::ffi::RawStr,
}

thread_local! {
    /// The values claimed now (few: a command holds one guard at a time).
    static CLAIMED: std::cell::RefCell<Vec<Claimed>> = const {
        std::cell::RefCell::new(Vec::new())
    };
}

impl Claim {
    /// Claims the value `v` found at `name` in the context's selected db;
    /// `name` must outlive the claim (the guard that holds the claim borrows
    /// it: see [`open`], [`read`], [`Vacant::store`]).
    fn new(v: NonNull<Stored>, db: i32, name: RStr<'_>) -> Option<Claim> {
        CLAIMED
            .try_with(|c| {
                let mut c = c.try_borrow_mut().ok()?;
                if c.iter().any(|e| e.value == v) {
                    return None;
                }
                c.push(Claimed {
                    value: v,
                    db,
                    name: name.as_ptr(),
                });
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
                if let Some(i) = c.iter().position(|e| e.value == self.0) {
                    c.swap_remove(i);
                }
            }
        });
    }
}

/// Whether a live guard claims the key `name` of the context's selected db
/// (checked before opening it). Free when no guard lives, the common case.
fn name_claimed(ctx: Ctx<'_>, name: RStr<'_>) -> bool {
    // The claims' (db, name), copied out: no module API call while the
    // list is borrowed. None: the list could not be read (refuse).
    let claims = CLAIMED.try_with(|c| {
        let c = c.try_borrow().ok()?;
        // The common case: no guard lives, nothing to copy.
        if c.is_empty() {
            return Some(Vec::new());
        }
        Some(c.iter().map(|e| (e.db, e.name)).collect::<Vec<_>>())
    });
    let Ok(Some(claims)) = claims else {
        return true;
    };
    if claims.is_empty() {
        return false;
    }
    let (db, name) = (ctx.db(), name.bytes());
    claims.into_iter().any(|(d, n)| {
        // SAFETY: a listed claim's name is the module string its guard
        // borrows; the guard lives (it drops its claim first, and the
        // claims were read just now, with nothing run since that could
        // drop a guard), so the string is alive and unchanged.
        d == db && unsafe { RStr::from_raw(n) }.is_some_and(|n| n.bytes() == name)
    })
}

/// Opens `name` in the context's selected db for writing.
pub fn open<'n>(ctx: Ctx<'n>, name: RStr<'n>) -> Opened<'n> {
    if name_claimed(ctx, name) {
        return Opened::Other;
    }
    let key = ctx.open(name, true);
    let Some(ty) = lock_type() else {
        return Opened::Other;
    };
    match key.module_value(ty) {
        KeyValue::Empty => Opened::Vacant(Vacant { key, name, ctx }),
        KeyValue::Mine(v) => {
            match NonNull::new(v.cast::<Stored>()).and_then(|v| Claim::new(v, ctx.db(), name)) {
                Some(claim) => Opened::Lock(Guard::new(key, name, ctx, claim)),
                None => Opened::Other,
            }
        }
        KeyValue::Other => Opened::Other,
    }
}

/// Opens `name` in the context's selected db for reading: `Ok(None)` when
/// there is no key, `Err(())` for a key of another type.
pub fn read<'n>(ctx: Ctx<'n>, name: RStr<'n>) -> Result<Option<ReadGuard<'n>>, ()> {
    if name_claimed(ctx, name) {
        return Err(());
    }
    read_key(ctx, name, ctx.open(name, false))
}

/// As [`read`], without touching the key's LRU/LFU (`OPEN_KEY_NOTOUCH`):
/// for bookkeeping that is not an access by a client.
pub fn read_untouched<'n>(ctx: Ctx<'n>, name: RStr<'n>) -> Result<Option<ReadGuard<'n>>, ()> {
    if name_claimed(ctx, name) {
        return Err(());
    }
    read_key(ctx, name, ctx.open_untouched(name))
}

/// A key opened for reading as a guard; the guard's lifetime is the
/// name's too (its claim names the key).
fn read_key<'n>(ctx: Ctx<'n>, name: RStr<'n>, key: Key<'n>) -> Result<Option<ReadGuard<'n>>, ()> {
    let Some(ty) = lock_type() else {
        return Err(());
    };
    match key.module_value(ty) {
        KeyValue::Empty => Ok(None),
        KeyValue::Mine(v) => {
            match NonNull::new(v.cast::<Stored>()).and_then(|v| Claim::new(v, ctx.db(), name)) {
                Some(claim) => Ok(Some(ReadGuard { _key: key, claim })),
                None => Err(()),
            }
        }
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
    pub fn open(ctx: Ctx<'n>, name: RStr<'n>, fresh: impl FnOnce() -> Lock) -> Option<Slot<'n>> {
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
pub fn with_lock<R>(
    ctx: Ctx<'_>,
    db: i32,
    key: &[u8],
    f: impl FnOnce(Guard<'_>) -> R,
) -> Option<R> {
    let _db = ctx.use_db(db)?;
    let name = RString::new(key)?;
    // A statement, not the tail: the guard goes before the name it borrows.
    let r = match open(ctx, name.as_rstr()) {
        Opened::Lock(g) => Some(f(g)),
        _ => None,
    };
    r
}

/// [`with_lock`] for reading.
pub fn with_read<R>(ctx: Ctx<'_>, db: i32, key: &[u8], f: impl FnOnce(&Stored) -> R) -> Option<R> {
    let _db = ctx.use_db(db)?;
    let name = RString::new(key)?;
    // A statement, not the tail: the guard goes before the name it borrows
    // and the db scope.
    let r = match read(ctx, name.as_rstr()) {
        Ok(Some(g)) => Some(f(g.get())),
        _ => None,
    };
    r
}

impl<'n> Vacant<'n> {
    /// Stores `lock` in the key, in the form that fits it; None when Redis
    /// refuses (the lock is dropped).
    pub fn store(self, lock: Lock) -> Option<Guard<'n>> {
        let ty = lock_type()?;
        // A compact lock stays the guard's work copy as it is.
        let (stored, work) = Stored::formed(lock, (0, 0));
        let value = NonNull::from(Box::leak(Box::new(stored)));
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
        // A value just stored is reached by nobody else.
        let claim = Claim::new(value, self.ctx.db(), self.name)?;
        Some(Guard {
            key: Some(self.key),
            name: self.name,
            ctx: self.ctx,
            claim,
            work,
            dirty: false,
            contended: false,
        })
    }
}

impl<'n> Guard<'n> {
    fn new(key: Key<'n>, name: RStr<'n>, ctx: Ctx<'n>, claim: Claim) -> Guard<'n> {
        // SAFETY: as in `stored`.
        let (work, contended) = match unsafe { claim.0.as_ref() } {
            Stored::Held { hold, .. } => (Some(hold.inflate()), false),
            Stored::Full(f) => (None, !f.lock.waiters().is_empty()),
        };
        Guard {
            key: Some(key),
            name,
            ctx,
            claim,
            work,
            dirty: false,
            contended,
        }
    }

    fn stored(&self) -> &Stored {
        // SAFETY: the value is the key's Box<Stored>, alive while the key
        // holds it: it is not replaced or deleted while this guard lives
        // (both go through `self`, and `delete` consumes it); no other guard
        // reaches it (the claim); and Redis runs no other code on it during
        // our callback (single-threaded; the unlink and free callbacks run
        // only on deletion).
        unsafe { self.claim.0.as_ref() }
    }

    fn stored_mut(&mut self) -> &mut Stored {
        // SAFETY: as in `stored`; `&mut self` and the claim make this the
        // only reference.
        unsafe { self.claim.0.as_mut() }
    }

    /// Writes the lock back into the stored value, in the form that fits
    /// (a full value that has a compact form becomes compact; the work copy
    /// of a compact one that has none any more goes into a box).
    fn write_back(&mut self) {
        self.dirty = false;
        // SAFETY: as in `stored_mut` (the claim is a field apart from
        // `work`, so both can be borrowed at once).
        let stored = unsafe { self.claim.0.as_mut() };
        match (&mut self.work, stored) {
            // The common case, in place: a compact lock stays compact.
            (Some(l), Stored::Held { hold, .. }) => match l.compact() {
                Some(c) => *hold = c,
                None => {
                    if let Some(l) = self.work.take() {
                        self.work = self.stored_mut().put(l);
                    }
                }
            },
            (None, Stored::Full(f)) => {
                if !self.contended && f.lock.compact().is_some() {
                    let kind = f.lock.kind();
                    let l = std::mem::replace(&mut f.lock, Lock::new(kind));
                    self.work = self.stored_mut().put(l);
                }
            }
            // Not reached (`work` is Some exactly while the value is
            // compact); `put` picks the form whatever it was.
            (Some(_), Stored::Full(_)) => {
                if let Some(l) = self.work.take() {
                    self.work = self.stored_mut().put(l);
                }
            }
            (None, Stored::Held { .. }) => {}
        }
    }

    /// The stored value, brought in step with the lock first.
    pub fn get(&mut self) -> &Stored {
        if self.dirty {
            self.write_back();
        }
        self.stored()
    }

    /// The lock's expiry-index entry (bookkeeping: always in step, no
    /// write-back needed).
    pub fn entry(&self) -> Entry {
        self.stored().entry()
    }

    pub fn lock(&self) -> &Lock {
        match (&self.work, self.stored()) {
            (Some(l), _) => l,
            (None, Stored::Full(f)) => &f.lock,
            // Not reached: `work` is Some while the value is compact.
            (None, Stored::Held { .. }) => empty_lock(),
        }
    }

    pub fn lock_mut(&mut self) -> &mut Lock {
        self.dirty = true;
        // SAFETY: as in `stored_mut` (the claim is a field apart from
        // `work`, so both can be borrowed at once).
        let stored = unsafe { self.claim.0.as_mut() };
        match (&mut self.work, stored) {
            (Some(l), _) => l,
            (None, Stored::Full(f)) => &mut f.lock,
            // Not reached (`work` is Some while the value is compact).
            (w @ None, Stored::Held { hold, .. }) => w.insert(hold.inflate()),
        }
    }

    pub fn name(&self) -> RStr<'n> {
        self.name
    }

    pub fn key_bytes(&self) -> &'n [u8] {
        self.name.bytes()
    }

    pub fn ctx(&self) -> Ctx<'n> {
        self.ctx
    }

    /// Deletes the key, and the lock with it (Redis frees it through the
    /// type's unlink and free callbacks, synchronously, and the unlink
    /// callback sees the lock as this guard left it). Consumes the guard:
    /// nothing can reach the lock afterwards.
    pub fn delete(mut self) {
        if self.dirty {
            self.write_back();
        }
        self.work = None;
        if let Some(key) = self.key.take() {
            key.delete();
        }
        // The claim goes with `self`, only now that the value is gone.
    }
}

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        if self.dirty && self.key.is_some() {
            self.write_back();
        }
    }
}

/// An empty lock, for the one branch of [`Guard::lock`] never reached.
fn empty_lock() -> &'static Lock {
    static EMPTY: std::sync::OnceLock<Lock> = std::sync::OnceLock::new();
    EMPTY.get_or_init(|| Lock::new(dlock_core::Kind::Mutex))
}

impl ReadGuard<'_> {
    pub fn get(&self) -> &Stored {
        // SAFETY: the value is the key's Box<Stored>, alive while the key
        // is open and nothing deletes it: this guard hands out `&` only, no
        // other guard reaches it (the claim), and our callback runs alone on
        // the main thread.
        unsafe { self.claim.0.as_ref() }
    }
}

// ---- loads into a temporary db ---------------------------------------------
//
// A replica with `repl-diskless-load swapdb` loads the master's payload into
// a temporary db while the old one still serves, then swaps them
// (REPL_ASYNC_LOAD events: started, then aborted or completed). The "loaded"
// keyspace event of a key in the temporary db names no key the module can
// open, so the locks loaded there are noted here, by (db, key) from the io
// handle, and filed by `services::events` once the swap made them the db's.

/// Locks noted as loaded: (db, key name).
pub type Loaded = Vec<(i32, Box<[u8]>)>;

/// Some while a load into a temporary db is under way: the locks loaded.
static TEMP_LOADED: std::sync::Mutex<Option<Loaded>> = std::sync::Mutex::new(None);

/// A load into a temporary db starts (`true`: note its locks from now on)
/// or ends (`false`: what was noted is returned and noting stops).
pub fn temp_load(start: bool) -> Loaded {
    match TEMP_LOADED.lock() {
        Ok(mut t) => {
            let noted = t.take().unwrap_or_default();
            if start {
                *t = Some(Vec::new());
            }
            noted
        }
        Err(_) => Vec::new(),
    }
}

/// Notes the lock being loaded through `rdb` when a temporary db is loading.
///
/// # Safety
/// `rdb` must be a live io handle of a load.
unsafe fn note_temp_loaded(rdb: *mut raw::RedisModuleIO) {
    let Ok(mut t) = TEMP_LOADED.lock() else {
        return;
    };
    let Some(noted) = t.as_mut() else {
        return;
    };
    // SAFETY: the API pointers are set once, when the module loads.
    let (name_of, db_of) = unsafe {
        ({ raw::RedisModule_GetKeyNameFromIO }, {
            raw::RedisModule_GetDbIdFromIO
        })
    };
    let (Some(name_of), Some(db_of)) = (name_of, db_of) else {
        return;
    };
    // SAFETY: the io handle is live (the caller's contract); the key name
    // it gives is alive during the load of this value and copied at once.
    let (name, db) = unsafe { (crate::ffi::bytes(name_of(rdb)), db_of(rdb)) };
    if !name.is_empty() {
        noted.push((db, name.into()));
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
            // SAFETY: the io handle is live for this call.
            unsafe { note_temp_loaded(rdb) };
            tokens::observe(floor.max(lock.last_token()));
            stats::lock_created();
            let stored = Stored::new(lock);
            stored.account_waiters();
            Box::into_raw(Box::new(stored)).cast::<c_void>()
        }
        Err(_) => ptr::null_mut(),
    }
}

/// What the module does when a lock value leaves the keyspace (DEL,
/// UNLINK, RENAME/MOVE source, overwrite, eviction, FLUSHDB of a lazy
/// free): the type's unlink hook, [`unlink2`], calls it with the key's db
/// and name and the value, all valid for that call only.
pub trait Unlinked {
    fn unlinked(db: i32, key: &[u8], stored: &Stored);
}

/// The type's `unlink2` callback, which runs `U::unlinked`.
///
/// # Safety
/// Called by the server only: `octx` is the key's option context, valid for
/// the call, and `value` this type's value being unlinked (still alive).
pub unsafe extern "C" fn unlink2<U: Unlinked>(
    octx: *mut raw::RedisModuleKeyOptCtx,
    value: *const c_void,
) {
    // SAFETY: the value being unlinked, a Box<Stored> of this type, alive
    // for the call (the caller's contract); not mutated during it.
    let Some(stored) = (unsafe { stored_ref(value) }) else {
        return;
    };
    // SAFETY: the option context is valid for the call; its key name lives
    // as long, and is only read during it.
    let (key, db) = unsafe {
        (
            crate::ffi::bytes(rm!(RedisModule_GetKeyNameFromOptCtx(octx) else ptr::null())),
            rm!(RedisModule_GetDbIdFromOptCtx(octx) else 0),
        )
    };
    U::unlinked(db, key, stored);
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
unsafe fn lock_ref<'a>(value: *const c_void) -> Option<Cow<'a, Lock>> {
    // SAFETY: the caller's contract.
    unsafe { stored_ref(value) }.map(Stored::lock)
}

pub unsafe extern "C" fn rdb_save(rdb: *mut raw::RedisModuleIO, value: *mut c_void) {
    // SAFETY: `value` is a Box<Stored> of this type, alive for the call.
    if let Some(lock) = unsafe { lock_ref(value) } {
        let buf = codec::encode(&lock, tokens::last());
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
        let buf = codec::encode(&lock, tokens::last());
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
        // The value (with a full lock's box and heap), plus the lock's
        // share of the expiry index when it is filed there.
        let filed = if s.entry().0 != 0 {
            INDEX_ENTRY_BYTES
        } else {
            0
        };
        s.bytes() + filed
    })
}

pub unsafe extern "C" fn digest(md: *mut raw::RedisModuleDigest, value: *mut c_void) {
    // SAFETY: `value` is a Box<Stored> of this type, alive for the call.
    if let Some(lock) = unsafe { lock_ref(value) } {
        // The token floor is server-wide, not part of this key's content.
        let buf = codec::encode(&lock, 0);
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
        stats::waiters_changed(stored.counted(), 0);
        drop(stored);
        stats::lock_freed();
    }
}

#[cfg(test)]
mod tests {
    /// A held lock is one allocation of the 80-byte class: the module's
    /// bookkeeping must not push the stored value past it (issue 27).
    #[test]
    fn stored_is_80_bytes() {
        assert_eq!(std::mem::size_of::<super::Stored>(), 80);
    }
}
