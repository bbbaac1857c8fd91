//! The handoff hint: right after a ready callback granted a lock
//! exclusively, the other waiters' callbacks that Redis runs in the same
//! round can answer "keep waiting" without opening the key.

use super::state;
use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Bumped on every change to any lock or to the keyspace around locks
/// (commit, APPLY, unlink, keyspace and server events).
static GENERATION: AtomicU64 = AtomicU64::new(0);

/// A lock was just granted to `owner` inside a ready callback, at
/// `generation`, leaving it held exclusively (`Lock::exclusive_owner`).
/// While nothing changed since, every other owner waiting on that key is
/// certainly denied.
#[derive(Default)]
struct Hint {
    generation: u64,
    db: i32,
    key: Vec<u8>,
    owner: Vec<u8>,
}

thread_local! {
    static HINT: RefCell<Option<Hint>> = const { RefCell::new(None) };
}

/// Something about locks changed: forget the handoff hint.
pub fn changed() {
    GENERATION.fetch_add(1, Relaxed);
}

/// Records an exclusive grant to `owner` of (`db`, `key`), after its commit.
pub fn note_exclusive_grant(db: i32, key: &[u8], owner: &[u8]) {
    state::with(&HINT, |h| {
        let h = h.get_or_insert_with(Hint::default);
        h.generation = GENERATION.load(Relaxed);
        h.db = db;
        h.key.clear();
        h.key.extend_from_slice(key);
        h.owner.clear();
        h.owner.extend_from_slice(owner);
    });
}

/// Whether (`db`, `key`) is, with certainty, held exclusively by an owner
/// other than `owner` (see [`Hint`]).
pub fn held_by_another(db: i32, key: &[u8], owner: &[u8]) -> bool {
    state::with(&HINT, |h| {
        h.as_ref().is_some_and(|h| {
            h.generation == GENERATION.load(Relaxed)
                && h.db == db
                && h.key == key
                && h.owner != owner
        })
    })
    .unwrap_or(false)
}
