//! The expiry index: every lock with a deadline (a lease end, a queued
//! place's end, a latch waiter's deadline) is filed here by deadline, and
//! one module timer is armed for the earliest. The timer's callback is the
//! expiry driver's (`expiry`), installed at load ([`set_on_timer`]): this
//! file holds the data and arms the timer, never commits.

use super::state;
use crate::ffi::{AnyCtx, Ctx, TimerFn};
use crate::storage::{Entry, Stored};
use dlock_core::deadlines::{Deadlines, KeyName};
use redis_module::raw;
use std::cell::{Cell, RefCell};

thread_local! {
    static INDEX: RefCell<Index> = RefCell::new(Index::default());
    /// Db -> keys of locks with blocked places that arrived while this
    /// server was a replica or loading: places of connections of another
    /// server or process. A lock of blocked places only has no deadline and
    /// is not in the index, so the prune after a promotion or a load
    /// ([`take_all_keys`]) finds it here.
    static FOREIGN: RefCell<state::Map<i32, state::Set<Box<[u8]>>>> = RefCell::new(state::Map::default());
    /// The expiry timer's callback (the expiry driver's), set at load.
    static ON_TIMER: Cell<Option<TimerFn>> = const { Cell::new(None) };
}

/// Installs the expiry timer's callback (once, at load, by the expiry
/// driver): what [`arm`] hands the timer it creates.
pub fn set_on_timer(on: TimerFn) {
    ON_TIMER.with(|c| c.set(Some(on)));
}

/// Every lock with a deadline, by (deadline, entry id), naming its db and
/// key. A stored lock remembers its entry (`Stored::entry`), so moving or
/// removing it compares integers only and never copies the key again.
///
/// An entry is one `u64` (the deadline in its high [`AT_BITS`] bits, an id
/// in the low [`ID_BITS`]) and a 24-byte [`KeyName`] (the key inline up to
/// 22 bytes), in sorted chunks ([`Deadlines`]): ~33 B per filed lock when
/// deadlines grow as leases are granted. Ids come from one wrapping
/// counter; an id already taken at that deadline is skipped, and after
/// [`PROBES`] taken ids in a row the lock is filed 1 ms later (its timer
/// then fires 1 ms late; needs millions of locks on one millisecond).
///
/// Locks with waiters are filed in a second index, `first`, which the
/// timer drains first: when many leases end at one instant, the waiters
/// are served before the other locks are deleted. `Stored::entry`'s id has
/// [`FIRST`] set for those.
#[derive(Default)]
struct Index {
    entries: Deadlines<KeyName>,
    first: Deadlines<KeyName>,
    next_id: u32,
    /// The armed timer and the instant it fires.
    armed: Option<(raw::RedisModuleTimerID, u64)>,
}

/// Bits of an entry's key holding its id.
const ID_BITS: u32 = 22;
const ID_MASK: u32 = (1 << ID_BITS) - 1;
/// Bits of an entry's key holding its deadline (unix ms, until 2109; a
/// later deadline is filed at the last one).
const AT_BITS: u32 = 64 - ID_BITS;
const MAX_AT: u64 = (1 << AT_BITS) - 1;
/// Set in a stored entry's id: filed in the waiters-first index.
const FIRST: u32 = 1 << 31;
/// Taken ids tried at one deadline before filing 1 ms later.
const PROBES: u32 = 16;

fn pack(at: u64, id: u32) -> u64 {
    (at.min(MAX_AT) << ID_BITS) | u64::from(id & ID_MASK)
}

impl Index {
    fn map(&mut self, id: u32) -> &mut Deadlines<KeyName> {
        if id & FIRST != 0 {
            &mut self.first
        } else {
            &mut self.entries
        }
    }

    fn remove(&mut self, (at, id): Entry) -> Option<KeyName> {
        self.map(id).remove(pack(at, id))
    }

    /// Files `name` at `at` (or a little later: see [`Index`]) under a new
    /// id; the entry, or (0, 0) when no id was free (not filed).
    fn file(&mut self, at: u64, first: bool, name: KeyName) -> Entry {
        let flag = if first { FIRST } else { 0 };
        let mut at = at.min(MAX_AT);
        let mut tries = 0u32;
        loop {
            let id = self.next_id & ID_MASK;
            self.next_id = self.next_id.wrapping_add(1) & ID_MASK;
            let key = pack(at, id);
            let map = self.map(flag);
            if !map.contains_key(key) {
                map.insert(key, name);
                return (at, id | flag);
            }
            tries += 1;
            if at < MAX_AT && tries.is_multiple_of(PROBES) {
                at += 1;
            } else if tries > ID_MASK {
                return (0, 0);
            }
        }
    }
}

/// Files the lock at (`db`, `key`) under its next deadline, moving it from
/// the one it had, and makes sure the timer fires in time.
pub fn reindex(ctx: Ctx<'_>, db: i32, key: &[u8], stored: &Stored) {
    let next = stored.next_deadline_hint().unwrap_or(0);
    let (at, id) = stored.entry();
    let first = next != 0 && stored.has_waiters();
    if next == at && (next == 0 || (id & FIRST != 0) == first) {
        return;
    }
    let filed = state::with(&INDEX, |ix| {
        let old = if at != 0 { ix.remove((at, id)) } else { None };
        if next == 0 {
            return (0, id);
        }
        let name = match old {
            Some(n) if n.is(db, key) => n,
            _ => KeyName::new(db, key),
        };
        ix.file(next, first, name)
    });
    let Some(filed) = filed else { return };
    stored.set_entry(filed);
    if filed.0 != 0 {
        arm(ctx, filed.0);
    }
}

/// Files anew a lock that arrived at (`db`, `key`) from elsewhere (load,
/// RESTORE, RENAME, MOVE): whatever entry it names is not its own here.
pub fn refile(ctx: Ctx<'_>, db: i32, key: &[u8], stored: &Stored) {
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
        state::with(&INDEX, |ix| ix.remove(e));
    }
}

/// Removes and returns the keys of `db` (all dbs when -1): FLUSHDB/FLUSHALL.
pub fn take_db(db: i32) -> Flushed {
    let take = |m: &mut Deadlines<KeyName>| {
        if db == -1 {
            m.take_all()
        } else {
            m.take_where(|k| k.db() == db)
        }
    };
    state::with(&FOREIGN, |f| {
        if db == -1 {
            f.clear();
        } else {
            f.remove(&db);
        }
    });
    let keys = state::with(&INDEX, |ix| {
        let mut keys = take(&mut ix.first);
        keys.append(&mut take(&mut ix.entries));
        keys
    })
    .unwrap_or_default();
    Flushed(keys.into_iter())
}

/// The keys a flush took out of the index, consumed a slice at a time:
/// (db, key name) pairs.
pub struct Flushed(std::vec::IntoIter<KeyName>);

impl Iterator for Flushed {
    type Item = (i32, KeyName);
    fn next(&mut self) -> Option<(i32, KeyName)> {
        self.0.next().map(|k| (k.db(), k))
    }
}

/// SWAPDB: entries of the two dbs trade places.
pub fn swap_dbs(a: i32, b: i32) {
    state::with(&INDEX, |ix| {
        for k in ix.entries.values_mut().chain(ix.first.values_mut()) {
            k.set_db(state::swapped_db(k.db(), a, b));
        }
    });
    state::with(&FOREIGN, |f| {
        let (x, y) = (f.remove(&a), f.remove(&b));
        if let Some(x) = x {
            f.insert(b, x);
        }
        if let Some(y) = y {
            f.insert(a, y);
        }
    });
}

/// A lock arrived at (`db`, `key`) from a replicated or loaded state (a
/// `DLOCK.APPLY`, a load, a RENAME or MOVE on a replica): on a replica or
/// while loading, notes whether it has blocked places (see `FOREIGN`).
pub fn note_arrived(ctx: Ctx<'_>, db: i32, key: &[u8], stored: &Stored) {
    if ctx.is_replica() || ctx.is_loading() {
        note_foreign(db, key, stored.has_blocked());
    }
}

/// Notes (or forgets) that the lock at (`db`, `key`) has blocked places of
/// connections of another server or process (see `FOREIGN`).
fn note_foreign(db: i32, key: &[u8], blocked: bool) {
    state::with(&FOREIGN, |f| {
        if blocked {
            let keys = f.entry(db).or_default();
            if !keys.contains(key) {
                keys.insert(key.into());
            }
        } else if let Some(keys) = f.get_mut(&db) {
            keys.remove(key);
        }
    });
}

/// Every indexed key, and every key noted with blocked places from a
/// replicated or loaded state (which are forgotten here): what the prune
/// after a promotion or a load walks. A key may come twice.
pub fn take_all_keys() -> Vec<(i32, Box<[u8]>)> {
    let foreign = state::with(&FOREIGN, std::mem::take).unwrap_or_default();
    let mut more: Vec<(i32, Box<[u8]>)> = foreign
        .into_iter()
        .flat_map(|(db, set)| set.into_iter().map(move |k| (db, k)))
        .collect();
    // In one order whatever the hash seeds (the prunes serve waiters).
    more.sort_unstable();
    let mut keys = all_keys();
    keys.append(&mut more);
    keys
}

/// Every indexed key.
fn all_keys() -> Vec<(i32, Box<[u8]>)> {
    state::with(&INDEX, |ix| {
        ix.first
            .iter()
            .chain(ix.entries.iter())
            .map(|(_, k)| (k.db(), Box::from(k.key())))
            .collect()
    })
    .unwrap_or_default()
}

/// Makes the expiry timer fire no later than `at` (unix ms).
///
/// A timer armed for an instant the clock has passed is late: the wall
/// clock jumped ahead of the server's timer clock (module timers count
/// from when they were armed), so what ended meanwhile waits for the
/// original delay, while every read already finds it over
/// (`commit::as_of`). The next arming (any commit) sees it and arms the
/// timer again to fire at once; it is recorded a millisecond ahead, so the
/// other commands of this millisecond leave it be.
pub fn arm(ctx: impl AnyCtx, at: u64) {
    let (now, _) = crate::ffi::now();
    let old = match state::with(&INDEX, |ix| ix.armed) {
        Some(Some((_, when))) if when <= at && when > now => return,
        Some(other) => other,
        None => return,
    };
    let at = match old {
        Some((id, when)) => {
            ctx.stop_timer(id);
            at.min(when)
        }
        None => at,
    };
    // A far deadline is reached in steps: the timer fires, finds nothing
    // due, and is armed again.
    let delay = at.saturating_sub(now).min(MAX_TIMER_MS);
    let Some(on_timer) = ON_TIMER.try_with(Cell::get).ok().flatten() else {
        return;
    };
    let id = ctx.create_timer(delay, on_timer);
    let at = at.max(now.saturating_add(1));
    state::with(&INDEX, |ix| ix.armed = Some((id, at)));
}

/// Arms the timer for the earliest indexed deadline, if any.
pub fn arm_next(ctx: impl AnyCtx) {
    let first = state::with(&INDEX, |ix| {
        match (ix.entries.first_key(), ix.first.first_key()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    });
    if let Some(Some(key)) = first {
        arm(ctx, key >> ID_BITS);
    }
}

/// Longest single timer period, in ms (an hour).
const MAX_TIMER_MS: u64 = 3_600_000;

/// Locks taken from the index at once by [`take_due`]; the timer callback
/// takes batches until its time slice is used up (small, so that a slice
/// overruns [`SLICE`] by little: a lock with waiters costs a grant).
const BATCH: usize = 16;

/// The expiry timer fired: it is no longer armed.
pub fn timer_fired() {
    state::with(&INDEX, |ix| ix.armed = None);
}

/// Removes and returns up to one batch of index entries due at `now`, with
/// the key each names: from the index of locks with waiters while it has
/// due entries (then `true`), else from the other; the caller re-arms with
/// [`arm_next`].
pub fn take_due(now: u64) -> (Vec<(Entry, KeyName)>, bool) {
    state::with(&INDEX, |ix| {
        let limit = pack(now, ID_MASK);
        let mut due = Vec::with_capacity(BATCH);
        let first = ix.first.take_due(limit, BATCH, &mut due) > 0;
        if !first {
            ix.entries.take_due(limit, BATCH, &mut due);
        }
        let flag = if first { FIRST } else { 0 };
        let due = due
            .into_iter()
            .map(|(k, name)| ((k >> ID_BITS, (k as u32 & ID_MASK) | flag), name))
            .collect();
        (due, first)
    })
    .unwrap_or_default()
}

/// Whether a lock with waiters is due at `now`.
pub fn first_due(now: u64) -> bool {
    state::with(&INDEX, |ix| {
        ix.first
            .first_key()
            .is_some_and(|k| k <= pack(now, ID_MASK))
    })
    .unwrap_or(false)
}

/// Longest run of one timer callback before it yields to the event loop.
pub const SLICE: std::time::Duration = std::time::Duration::from_millis(2);
