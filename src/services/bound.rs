//! Holds bound to connections (`BIND`): which keys each connection was
//! granted bound holds on, so that its holds end when it closes.

use super::state::Map as HashMap;
use super::{jobq, state};
use std::cell::RefCell;

pub use super::state::DbKey;

/// The keys where one connection was granted bound holds. Holds released
/// meanwhile leave their key here until a prune (`Job::PruneBound`), run
/// when the list doubles since the last one, so a long-lived connection
/// that binds many keys over time costs memory for its live holds only
/// (amortised O(1) per grant).
#[derive(Default)]
struct BoundKeys {
    keys: Vec<DbKey>,
    prune_at: usize,
}

/// Fewest keys a connection's list holds before the first prune.
const BOUND_PRUNE_MIN: usize = 16;

thread_local! {
    /// Connection id -> the (db, key)s where it was granted a bound hold.
    static BOUND: RefCell<HashMap<u64, BoundKeys>> = RefCell::new(HashMap::default());
    /// Connection id -> when it closed (unix ms), for a connection with
    /// bound holds, from the server's event until the job that ends them
    /// has run: the instant their lock-delays start.
    static CLOSED: RefCell<HashMap<u64, u64>> = RefCell::new(HashMap::default());
}

/// Connection `client` was granted a bound hold of (`db`, `key`).
pub fn note_bound(client: u64, db: i32, key: &[u8]) {
    let prune = state::with(&BOUND, |b| {
        let e = b.entry(client).or_default();
        if !e.keys.iter().any(|(d, k)| *d == db && **k == *key) {
            e.keys.push((db, key.into()));
        }
        e.prune_at = e.prune_at.max(BOUND_PRUNE_MIN);
        e.keys.len() > e.prune_at
    });
    if prune == Some(true) {
        jobq::schedule(jobq::Job::PruneBound(client));
    }
}

/// A lock with holds bound to `clients` appeared at (`db`, `key`) under a
/// new name (RENAME, MOVE): each hold follows its key. A connection still
/// open notes the new key; for one that closed meanwhile (its unbind job
/// looked at the old name), the hold ends now, by a job.
pub fn refile(db: i32, key: &[u8], clients: impl Iterator<Item = u64>) {
    for client in clients {
        if crate::ffi::client_connected(client) {
            note_bound(client, db, key);
        } else {
            jobq::schedule(jobq::Job::Unbind(client, vec![(db, key.into())]));
        }
    }
}

/// SWAPDB `a` `b`: the keys noted in one db are now in the other, both
/// those of open connections and those of closed ones whose unbind job has
/// not run yet.
pub fn swap_dbs(a: i32, b: i32) {
    state::with(&BOUND, |m| {
        for e in m.values_mut() {
            for (d, _) in e.keys.iter_mut() {
                *d = state::swapped_db(*d, a, b);
            }
        }
    });
    jobq::swap_unbind_dbs(a, b);
}

/// Connection `client` closed at `at` (unix ms): the keys where it may
/// hold bound holds (they end by a job, `Job::Unbind`; until then every
/// read and write finds them ended by [`closed_since`]).
pub fn take_bound(client: u64, at: u64) -> Option<Vec<DbKey>> {
    let keys = state::with(&BOUND, |b| b.remove(&client).map(|e| e.keys)).flatten()?;
    state::with(&CLOSED, |c| c.insert(client, at));
    Some(keys)
}

/// Since when the connection `client` a hold is bound to is closed (unix
/// ms), as far as this server knows at `now`: from its close event on (the
/// instant it closed), or, once that is forgotten, whenever the server no
/// longer has it (`now`). None while it is open. `client` names a
/// connection of this process (not 0, not `BOUND_ELSEWHERE`).
pub fn closed_since(client: u64, now: u64) -> Option<u64> {
    if let Some(Some(at)) = state::with(&CLOSED, |c| c.get(&client).copied()) {
        return Some(at.min(now));
    }
    (!crate::ffi::client_connected(client)).then_some(now)
}

/// The job that ends the bound holds of `client`, which closed, has run:
/// its close instant is no longer needed.
pub fn forget_closed(client: u64) {
    state::with(&CLOSED, |c| c.remove(&client));
}

/// The keys noted for `client` (to prune them).
pub fn bound_keys(client: u64) -> Vec<DbKey> {
    state::with(&BOUND, |b| b.get(&client).map(|e| e.keys.clone()))
        .flatten()
        .unwrap_or_default()
}

/// After a prune: the keys where `client` still has bound holds (nothing
/// when it closed meanwhile).
pub fn set_bound_keys(client: u64, keys: Vec<DbKey>) {
    state::with(&BOUND, |b| {
        if keys.is_empty() {
            b.remove(&client);
        } else if let Some(e) = b.get_mut(&client) {
            e.prune_at = keys.len().saturating_mul(2).max(BOUND_PRUNE_MIN);
            e.keys = keys;
        }
    });
}

/// Number of connections with noted bound keys, and of keys (for tests and
/// INFO).
pub fn bound_counts() -> (u64, u64) {
    state::with(&BOUND, |b| {
        let keys: usize = b.values().map(|e| e.keys.len()).sum();
        (b.len() as u64, keys as u64)
    })
    .unwrap_or((0, 0))
}

/// Forgets the noted keys for which `gone(db, key)` holds (their locks left
/// this server: a slot exported by atomic slot migration).
pub fn forget_keys(gone: impl Fn(i32, &[u8]) -> bool) {
    state::with(&BOUND, |b| {
        b.retain(|_, e| {
            e.keys.retain(|(db, key)| !gone(*db, key));
            !e.keys.is_empty()
        })
    });
}
