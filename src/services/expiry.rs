//! The expiry service: every lock with a deadline (a lease end, a queued
//! place's end, a latch waiter's deadline) is filed in one index by
//! deadline, and one module timer fires at the earliest. The timer ends
//! what time ended on each due lock, in 2 ms slices, and commits.

use super::bound::DbKey;
use super::commit::{commit, tick_due};
use super::{observe, state};
use crate::ffi::{self, rm, Ctx};
use crate::storage::{self, Entry, Stored};
use redis_module::raw;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::ffi::c_void;

thread_local! {
    static INDEX: RefCell<Index> = RefCell::new(Index::default());
}

/// Every lock with a deadline, by (deadline, entry id), naming its db and
/// key. A stored lock remembers its entry (`Stored::entry`), so moving or
/// removing it compares integers only and never copies the key again.
#[derive(Default)]
struct Index {
    entries: BTreeMap<Entry, DbKey>,
    next_id: u32,
    /// The armed timer and the instant it fires.
    armed: Option<(raw::RedisModuleTimerID, u64)>,
}

/// Files the lock at (`db`, `key`) under its next deadline, moving it from
/// the one it had, and makes sure the timer fires in time.
pub fn reindex(ctx: Ctx, db: i32, key: &[u8], stored: &Stored) {
    let next = stored.next_deadline_hint().unwrap_or(0);
    let (at, id) = stored.entry();
    if next == at {
        return;
    }
    let id = state::with(&INDEX, |ix| {
        let old = if at != 0 {
            ix.entries.remove(&(at, id))
        } else {
            None
        };
        let mut id = id;
        if next != 0 {
            let name = match old {
                Some((d, k)) if d == db && *k == *key => k,
                _ => Box::from(key),
            };
            // A new filing takes a new id; so does a refiling whose entry is
            // taken (possible only once the 32-bit ids wrapped): one entry,
            // one lock.
            if at == 0 || ix.entries.contains_key(&(next, id)) {
                loop {
                    ix.next_id = ix.next_id.wrapping_add(1);
                    id = ix.next_id;
                    if !ix.entries.contains_key(&(next, id)) {
                        break;
                    }
                }
            }
            ix.entries.insert((next, id), (db, name));
        }
        id
    });
    let Some(id) = id else { return };
    stored.set_entry((next, id));
    if next != 0 {
        arm(ctx, next);
    }
}

/// Files anew a lock that arrived at (`db`, `key`) from elsewhere (load,
/// RESTORE, RENAME, MOVE): whatever entry it names is not its own here.
pub fn refile(ctx: Ctx, db: i32, key: &[u8], stored: &Stored) {
    stored.set_entry((0, stored.entry().1));
    reindex(ctx, db, key, stored);
}

/// The expiry timer took `entry` out of the index: true when it was
/// `lock`'s current entry (which the lock then no longer has), false for a
/// stale entry (the lock was refiled under another deadline).
pub fn take_entry(stored: &Stored, entry: Entry) -> bool {
    if stored.entry() != entry {
        return false;
    }
    stored.set_entry((0, entry.1));
    true
}

/// Removes the entry of a lock that leaves the keyspace.
pub fn unindex(stored: &Stored) {
    let e = stored.entry();
    if e.0 != 0 {
        state::with(&INDEX, |ix| ix.entries.remove(&e));
    }
}

/// Removes and returns the keys of `db` (all dbs when -1): FLUSHDB/FLUSHALL.
pub fn take_db(db: i32) -> Flushed {
    state::with(&INDEX, |ix| {
        let all = std::mem::take(&mut ix.entries);
        if db == -1 {
            return all.into_values();
        }
        let (gone, kept): (BTreeMap<_, _>, BTreeMap<_, _>) =
            all.into_iter().partition(|(_, (d, _))| *d == db);
        ix.entries = kept;
        gone.into_values()
    })
    .unwrap_or_else(|| BTreeMap::new().into_values())
}

/// The keys a flush took out of the index, consumed a slice at a time.
pub type Flushed = std::collections::btree_map::IntoValues<Entry, DbKey>;

/// SWAPDB: entries of the two dbs trade places.
pub fn swap_dbs(a: i32, b: i32) {
    state::with(&INDEX, |ix| {
        for (d, _) in ix.entries.values_mut() {
            if *d == a {
                *d = b;
            } else if *d == b {
                *d = a;
            }
        }
    });
}

/// Every indexed key.
pub fn all_keys() -> Vec<(i32, Box<[u8]>)> {
    state::with(&INDEX, |ix| ix.entries.values().cloned().collect()).unwrap_or_default()
}

/// Makes the expiry timer fire no later than `at` (unix ms).
pub fn arm(ctx: Ctx, at: u64) {
    let old = match state::with(&INDEX, |ix| ix.armed) {
        Some(Some((_, when))) if when <= at => return,
        Some(other) => other,
        None => return,
    };
    if let Some((id, _)) = old {
        // SAFETY: stopping our own timer; its data pointer is null.
        unsafe { rm!(RedisModule_StopTimer(ctx.as_raw(), id, std::ptr::null_mut()) else 0) };
    }
    let (now, _) = crate::ffi::now();
    // A far deadline is reached in steps: the timer fires, finds nothing
    // due, and is armed again.
    let delay = at.saturating_sub(now).min(MAX_TIMER_MS) as i64;
    // SAFETY: the callback is a plain extern fn and its data pointer is null.
    let id = unsafe {
        rm!(RedisModule_CreateTimer(ctx.as_raw(), delay, Some(on_timer), std::ptr::null_mut()) else 0)
    };
    state::with(&INDEX, |ix| ix.armed = Some((id, at)));
}

/// Arms the timer for the earliest indexed deadline, if any.
pub fn arm_next(ctx: Ctx) {
    let first = state::with(&INDEX, |ix| ix.entries.first_key_value().map(|(e, _)| e.0));
    if let Some(Some(at)) = first {
        arm(ctx, at);
    }
}

/// Longest single timer period, in ms (an hour).
const MAX_TIMER_MS: u64 = 3_600_000;

/// Locks taken from the index at once by [`take_due`]; the timer callback
/// takes batches until its time slice is used up.
const BATCH: usize = 256;

/// The expiry timer fired: it is no longer armed.
fn timer_fired() {
    state::with(&INDEX, |ix| ix.armed = None);
}

/// Removes and returns up to one batch of index entries due at `now`, with
/// the key each names; the caller re-arms with [`arm_next`].
fn take_due(now: u64) -> Vec<(Entry, DbKey)> {
    state::with(&INDEX, |ix| {
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
    })
    .unwrap_or_default()
}

/// The expiry timer fired: end what is due, a slice at a time, then arm
/// the timer for what is next.
unsafe extern "C" fn on_timer(ctx: *mut raw::RedisModuleCtx, _data: *mut c_void) {
    // SAFETY: Redis passes a context valid for the callback.
    let ctx = unsafe { Ctx::from_raw(ctx) };
    timer_fired();
    if ctx.is_replica() {
        return;
    }
    if ctx.is_loading() {
        let (now, _) = ffi::now();
        arm(ctx, now.saturating_add(100));
        return;
    }
    let (now, _) = ffi::now();
    let start = std::time::Instant::now();
    loop {
        let due = take_due(now);
        if due.is_empty() {
            break;
        }
        for (entry, (db, key)) in due {
            expire_key(ctx, db, &key, entry, now);
        }
        if start.elapsed() >= SLICE {
            break;
        }
    }
    arm_next(ctx);
}

/// Longest run of one timer callback before it yields to the event loop.
pub const SLICE: std::time::Duration = std::time::Duration::from_millis(2);

/// The expiry timer found `key` due at `entry`: end leases and queued
/// places, then serve whoever is next.
fn expire_key(ctx: Ctx, db: i32, key: &[u8], entry: Entry, now: u64) {
    storage::with_lock(ctx, db, key, |mut g| {
        if !take_entry(g.get(), entry) {
            // A stale entry: the lock was refiled under another deadline.
            return;
        }
        observe::before_tick(ctx, key, g.lock(), now);
        let (_, fx) = tick_due(g.lock_mut(), now);
        commit(g, fx);
    });
}
