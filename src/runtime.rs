//! Process-wide state of the module that is not part of any key: the token
//! counter, the connections waiting on the server, the expiry index with its
//! one timer, and deferred jobs.
//!
//! Locking rule: no Redis API is called while a mutex here is held (Redis may
//! call back into the module synchronously, e.g. unlink on DeleteKey).

use crate::ffi::{rm, Ctx};
use dlock_core::Tokens;
use redis_module::raw;
use std::collections::{BTreeMap, HashMap};
use std::ffi::c_void;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, MutexGuard};

fn guard<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

// ---- fencing tokens -------------------------------------------------------

static TOKENS: AtomicU64 = AtomicU64::new(0);

/// The server-wide token counter (highest token issued or seen).
pub fn tokens() -> Tokens {
    Tokens {
        last: TOKENS.load(Relaxed),
    }
}

pub fn set_tokens(t: Tokens) {
    TOKENS.fetch_max(t.last, Relaxed);
}

pub fn observe_token(token: u64) {
    TOKENS.fetch_max(token, Relaxed);
}

// ---- connections waiting on the server -------------------------------------

lazy_static::lazy_static! {
    static ref LIVE: Mutex<HashMap<u64, Live>> = Mutex::new(HashMap::new());
    static ref INDEX: Mutex<Index> = Mutex::new(Index::default());
    static ref JOBS: Mutex<Jobs> = Mutex::new(Jobs::default());
}

/// The (db, key) a waiting connection waits on (or an index entry names).
type WaitsOn = (i32, Box<[u8]>);

static NEXT_WAITER: AtomicU64 = AtomicU64::new(0);

/// Seeds waiter ids randomly, so ids persisted by an earlier process never
/// name a connection of this one.
pub fn seed_waiter_ids() {
    let r = uuid::Uuid::new_v4().as_u64_pair().0 >> 2;
    NEXT_WAITER.store(r.max(1), Relaxed);
}

pub fn new_waiter_id() -> u64 {
    NEXT_WAITER.fetch_add(1, Relaxed)
}

/// How to answer a lock or semaphore waiter directly: its blocked-client
/// handle and its request (the blocked client's private data), both valid
/// until the connection's free callback calls [`remove_live`].
#[derive(Clone, Copy)]
pub struct Handoff {
    pub client: crate::ffi::BlockedClient,
    pub data: crate::ffi::PrivData,
}

/// A connection waiting on the server: the (db, key) it waits on, and, for
/// a lock or semaphore waiter, how a release hands the lock over to it.
struct Live {
    on: WaitsOn,
    handoff: Option<Handoff>,
}

/// Records that connection `id` now waits on the server for (`db`, `key`).
pub fn add_live(id: u64, db: i32, key: &[u8]) {
    add_live_handle(id, db, key, None);
}

/// [`add_live`] with what [`live_handle`] gives back to a handoff.
pub fn add_live_handle(id: u64, db: i32, key: &[u8], handoff: Option<Handoff>) {
    let live = Live {
        on: (db, key.into()),
        handoff,
    };
    guard(&LIVE).insert(id, live);
}

pub fn remove_live(id: u64) {
    guard(&LIVE).remove(&id);
}

/// Whether a connection of this process still waits as `id` on this very
/// key: a place copied to another key (RESTORE, DLOCK.APPLY) or carried by a
/// RENAME names no connection there.
pub fn is_live_at(id: u64, db: i32, key: &[u8]) -> bool {
    guard(&LIVE)
        .get(&id)
        .is_some_and(|l| l.on.0 == db && *l.on.1 == *key)
}

/// For a connection that still waits as `id` on (`db`, `key`) and can be
/// handed the lock: see [`Handoff`].
pub fn live_handle(id: u64, db: i32, key: &[u8]) -> Option<Handoff> {
    guard(&LIVE)
        .get(&id)
        .filter(|l| l.on.0 == db && *l.on.1 == *key)
        .and_then(|l| l.handoff)
}

/// The keys of `db` (every db for -1) that connections of this process
/// wait on, each once: what a flush has to requeue, found without opening
/// every flushed key.
pub fn waited_keys(db: i32) -> Vec<WaitsOn> {
    let live = guard(&LIVE);
    let keys: std::collections::HashSet<&WaitsOn> = live
        .values()
        .map(|l| &l.on)
        .filter(|(d, _)| db == -1 || *d == db)
        .collect();
    keys.into_iter().cloned().collect()
}

/// Connections currently waiting on the server.
pub fn waiting() -> u64 {
    guard(&LIVE).len() as u64
}

// ---- holds bound to connections (BIND) ------------------------------------

/// The keys where one connection was granted bound holds. Holds released
/// meanwhile leave their key here until a prune (`Job::PruneBound`), run
/// when the list doubles since the last one, so a long-lived connection
/// that binds many keys over time costs memory for its live holds only
/// (amortised O(1) per grant).
#[derive(Default)]
struct BoundKeys {
    keys: Vec<WaitsOn>,
    prune_at: usize,
}

/// Fewest keys a connection's list holds before the first prune.
const BOUND_PRUNE_MIN: usize = 16;

lazy_static::lazy_static! {
    /// Connection id -> the (db, key)s where it was granted a bound hold.
    static ref BOUND: Mutex<HashMap<u64, BoundKeys>> = Mutex::new(HashMap::new());
}

/// Connection `client` was granted a bound hold of (`db`, `key`).
pub fn note_bound(client: u64, db: i32, key: &[u8]) {
    let prune = {
        let mut b = guard(&BOUND);
        let e = b.entry(client).or_default();
        if !e.keys.iter().any(|(d, k)| *d == db && **k == *key) {
            e.keys.push((db, key.into()));
        }
        e.prune_at = e.prune_at.max(BOUND_PRUNE_MIN);
        e.keys.len() > e.prune_at
    };
    if prune {
        schedule(Job::PruneBound(client));
    }
}

/// Connection `client` closed: the keys where it may hold bound holds.
pub fn take_bound(client: u64) -> Option<Vec<WaitsOn>> {
    guard(&BOUND).remove(&client).map(|e| e.keys)
}

/// The keys noted for `client` (to prune them).
pub fn bound_keys(client: u64) -> Vec<WaitsOn> {
    guard(&BOUND)
        .get(&client)
        .map(|e| e.keys.clone())
        .unwrap_or_default()
}

/// After a prune: the keys where `client` still has bound holds (nothing
/// when it closed meanwhile).
pub fn set_bound_keys(client: u64, keys: Vec<WaitsOn>) {
    let mut b = guard(&BOUND);
    if keys.is_empty() {
        b.remove(&client);
    } else if let Some(e) = b.get_mut(&client) {
        e.prune_at = keys.len().saturating_mul(2).max(BOUND_PRUNE_MIN);
        e.keys = keys;
    }
}

/// Number of connections with noted bound keys, and of keys (for tests and
/// INFO).
pub fn bound_counts() -> (u64, u64) {
    let b = guard(&BOUND);
    let keys: usize = b.values().map(|e| e.keys.len()).sum();
    (b.len() as u64, keys as u64)
}

// ---- handoff hint ----------------------------------------------------------

/// Bumped on every change to any lock or to the keyspace around locks
/// (commit, APPLY, unlink, keyspace and server events).
static GENERATION: AtomicU64 = AtomicU64::new(0);

/// A lock was just granted to `owner` inside a ready callback, at
/// `generation`, leaving it held exclusively (`Lock::exclusive_owner`).
/// While nothing changed since, every other owner waiting on that key is
/// certainly denied: the ready
/// callbacks Redis runs for them in the same round can answer "keep
/// waiting" without opening the key.
#[derive(Default)]
struct Hint {
    generation: u64,
    db: i32,
    key: Vec<u8>,
    owner: Vec<u8>,
}

lazy_static::lazy_static! {
    static ref HINT: Mutex<Option<Hint>> = Mutex::new(None);
}

/// Something about locks changed: forget the handoff hint.
pub fn changed() {
    GENERATION.fetch_add(1, Relaxed);
}

/// Records an exclusive grant to `owner` of (`db`, `key`), after its commit.
pub fn note_exclusive_grant(db: i32, key: &[u8], owner: &[u8]) {
    let mut h = guard(&HINT);
    let h = h.get_or_insert_with(Hint::default);
    h.generation = GENERATION.load(Relaxed);
    h.db = db;
    h.key.clear();
    h.key.extend_from_slice(key);
    h.owner.clear();
    h.owner.extend_from_slice(owner);
}

/// Whether (`db`, `key`) is, with certainty, held exclusively by an owner
/// other than `owner` (see [`Hint`]).
pub fn held_by_another(db: i32, key: &[u8], owner: &[u8]) -> bool {
    guard(&HINT).as_ref().is_some_and(|h| {
        h.generation == GENERATION.load(Relaxed) && h.db == db && h.key == key && h.owner != owner
    })
}

// ---- expiry index ----------------------------------------------------------

/// (deadline, entry id) of a lock in the expiry index.
type Entry = (u64, u64);

/// Every lock with a deadline, by (deadline, entry id), naming its db and
/// key. A lock remembers its entry (`Lock::indexed_at`, `Lock::index_id`),
/// so moving or removing it compares integers only and never copies the key
/// again.
#[derive(Default)]
struct Index {
    entries: BTreeMap<Entry, WaitsOn>,
    next_id: u64,
    /// The armed timer and the instant it fires.
    armed: Option<(raw::RedisModuleTimerID, u64)>,
}

/// Files the lock at (`db`, `key`) under its next deadline, moving it from
/// the one it had, and makes sure the timer fires in time.
pub fn reindex(ctx: Ctx, db: i32, key: &[u8], lock: &mut dlock_core::Lock) {
    let next = lock.next_deadline_hint().unwrap_or(0);
    if next == lock.indexed_at {
        return;
    }
    {
        let mut ix = guard(&INDEX);
        let old = if lock.indexed_at != 0 {
            ix.entries.remove(&(lock.indexed_at, lock.index_id))
        } else {
            None
        };
        if next != 0 {
            let name = match old {
                Some((d, k)) if d == db && *k == *key => k,
                _ => Box::from(key),
            };
            if lock.indexed_at == 0 {
                ix.next_id = ix.next_id.wrapping_add(1);
                lock.index_id = ix.next_id;
            }
            ix.entries.insert((next, lock.index_id), (db, name));
        }
    }
    lock.indexed_at = next;
    if next != 0 {
        arm(ctx, next);
    }
}

/// Files anew a lock that arrived at (`db`, `key`) from elsewhere (load,
/// RESTORE, RENAME, MOVE): whatever entry it names is not its own here.
pub fn refile(ctx: Ctx, db: i32, key: &[u8], lock: &mut dlock_core::Lock) {
    lock.indexed_at = 0;
    reindex(ctx, db, key, lock);
}

/// The expiry timer took `entry` out of the index: true when it was
/// `lock`'s current entry (which the lock then no longer has), false for a
/// stale entry (the lock was refiled under another deadline).
pub fn take_entry(lock: &mut dlock_core::Lock, entry: Entry) -> bool {
    if (lock.indexed_at, lock.index_id) != entry {
        return false;
    }
    lock.indexed_at = 0;
    true
}

/// Removes the entry of a lock that leaves the keyspace.
pub fn unindex(lock: &dlock_core::Lock) {
    if lock.indexed_at != 0 {
        guard(&INDEX)
            .entries
            .remove(&(lock.indexed_at, lock.index_id));
    }
}

/// Removes and returns the keys of `db` (all dbs when -1): FLUSHDB/FLUSHALL.
pub fn take_db(db: i32) -> Flushed {
    let mut ix = guard(&INDEX);
    let all = std::mem::take(&mut ix.entries);
    if db == -1 {
        return all.into_values();
    }
    let (gone, kept): (BTreeMap<_, _>, BTreeMap<_, _>) =
        all.into_iter().partition(|(_, (d, _))| *d == db);
    ix.entries = kept;
    gone.into_values()
}

/// The keys a flush took out of the index, consumed a slice at a time.
pub type Flushed = std::collections::btree_map::IntoValues<Entry, WaitsOn>;

/// SWAPDB: entries of the two dbs trade places.
pub fn swap_dbs(a: i32, b: i32) {
    let mut ix = guard(&INDEX);
    for (d, _) in ix.entries.values_mut() {
        if *d == a {
            *d = b;
        } else if *d == b {
            *d = a;
        }
    }
}

/// Every indexed key.
pub fn all_keys() -> Vec<(i32, Box<[u8]>)> {
    guard(&INDEX).entries.values().cloned().collect()
}

/// Makes the expiry timer fire no later than `at` (unix ms).
pub fn arm(ctx: Ctx, at: u64) {
    let old = {
        let ix = guard(&INDEX);
        match ix.armed {
            Some((_, when)) if when <= at => return,
            other => other,
        }
    };
    if let Some((id, _)) = old {
        // SAFETY: stopping our own timer; its data pointer is null.
        unsafe { rm!(RedisModule_StopTimer(ctx.0, id, std::ptr::null_mut()) else 0) };
    }
    let (now, _) = crate::ffi::now();
    // A far deadline is reached in steps: the timer fires, finds nothing
    // due, and is armed again.
    let delay = at.saturating_sub(now).min(MAX_TIMER_MS) as i64;
    let Some(cb) = CALLBACKS.get() else { return };
    // SAFETY: the callback is a plain extern fn and its data pointer is null.
    let id = unsafe {
        rm!(RedisModule_CreateTimer(ctx.0, delay, Some(cb.expiry), std::ptr::null_mut()) else 0)
    };
    guard(&INDEX).armed = Some((id, at));
}

/// Arms the timer for the earliest indexed deadline, if any.
pub fn arm_next(ctx: Ctx) {
    let first = guard(&INDEX).entries.first_key_value().map(|(e, _)| e.0);
    if let Some(at) = first {
        arm(ctx, at);
    }
}

/// Longest single timer period, in ms (an hour).
const MAX_TIMER_MS: u64 = 3_600_000;

/// Locks taken from the index at once by [`take_due`]; the timer callback
/// takes batches until its time slice is used up.
const BATCH: usize = 256;

/// The expiry timer fired: it is no longer armed.
pub fn timer_fired() {
    guard(&INDEX).armed = None;
}

/// Removes and returns up to one batch of index entries due at `now`, with
/// the key each names; the caller re-arms with [`arm_next`].
pub fn take_due(now: u64) -> Vec<(Entry, WaitsOn)> {
    let mut ix = guard(&INDEX);
    let mut due = Vec::new();
    while due.len() < BATCH {
        match ix.entries.first_key_value() {
            Some((e, _)) if e.0 <= now => {}
            _ => break,
        }
        if let Some(e) = ix.entries.pop_first() {
            due.push(e);
        }
    }
    due
}

// ---- timer callbacks -------------------------------------------------------

/// A Redis timer callback.
pub type TimerProc = unsafe extern "C" fn(*mut raw::RedisModuleCtx, *mut c_void);

/// The callbacks of the expiry timer and of the job timer. They act on keys,
/// which is the command layer's business: it installs them at load
/// ([`set_callbacks`]), so this state layer never calls up into it.
struct Callbacks {
    expiry: TimerProc,
    jobs: TimerProc,
}

static CALLBACKS: std::sync::OnceLock<Callbacks> = std::sync::OnceLock::new();

/// Installs the expiry-timer and job-timer callbacks (once, at load).
pub fn set_callbacks(expiry: TimerProc, jobs: TimerProc) {
    let _ = CALLBACKS.set(Callbacks { expiry, jobs });
}

// ---- deferred jobs ---------------------------------------------------------

/// Work that cannot be done where it is noticed (no context, or writes not
/// allowed there): done by a 0 ms timer on the main thread.
pub enum Job {
    /// Drop waiters whose connection is gone, serve the next.
    Prune(i32, Box<[u8]>),
    /// A lock of this kind left the key (DEL, FLUSHDB, RENAME source,
    /// overwrite) while connections waited on it: give their places to a new
    /// lock at the key (Redis 7.0 serves waiters only of keys that exist),
    /// ahead of anyone who came since, and wake them.
    Requeue(i32, Box<[u8]>, dlock_core::Kind, Vec<dlock_core::Waiter>),
    /// Cluster mode: a lock left the key. Unless this node no longer serves
    /// the slot (MIGRATE), publish `deleted` (when it was held) and requeue.
    Left(
        i32,
        Box<[u8]>,
        dlock_core::Kind,
        Vec<dlock_core::Waiter>,
        bool,
    ),
    /// These waiters moved with their lock to another key (RENAME, MOVE), but
    /// their connections wait on the old key: drop their places here.
    Forget(i32, Box<[u8]>, Vec<u64>),
    /// After loading or promotion: prune every lock and arm the timer.
    PruneAll,
    /// A connection with bound holds closed: end them (`BIND`).
    Unbind(u64, Vec<WaitsOn>),
    /// Forget the keys where this connection no longer has bound holds.
    PruneBound(u64),
    /// Publish `deleted` for these flushed keys (a slice at a time, so that
    /// a flush of a million locks does not stall the server).
    Flushed(Flushed),
}

#[derive(Default)]
struct Jobs {
    queue: Vec<Job>,
    armed: bool,
}

/// A context for creating timers where Redis gives none (unlink callback):
/// the module's detached context, set once at load and kept for its life.
static DETACHED: AtomicPtr<raw::RedisModuleCtx> = AtomicPtr::new(std::ptr::null_mut());

pub fn set_detached(ctx: *mut raw::RedisModuleCtx) {
    DETACHED.store(ctx, Relaxed);
}

pub fn detached() -> Ctx {
    Ctx(DETACHED.load(Relaxed))
}

pub fn schedule(job: Job) {
    let arm = {
        let mut j = guard(&JOBS);
        j.queue.push(job);
        !std::mem::replace(&mut j.armed, true)
    };
    if arm {
        let Some(cb) = CALLBACKS.get() else { return };
        // SAFETY: the detached context belongs to this module for its whole
        // life; the callback is a plain extern fn with no data.
        unsafe {
            rm!(RedisModule_CreateTimer(detached().0, 0, Some(cb.jobs), std::ptr::null_mut()) else 0)
        };
    }
}

/// Takes the queued jobs, to run them: the job timer fired.
pub fn take_jobs() -> Vec<Job> {
    let mut j = guard(&JOBS);
    j.armed = false;
    std::mem::take(&mut j.queue)
}
