//! Main-thread state without global mutexes.
//!
//! Everything the module keeps outside keys (waiting connections, the expiry
//! index, deferred jobs, bound keys, the handoff hint) is touched only on
//! Redis' main thread: commands, blocked-client, timer and event callbacks
//! all run there. Each piece lives in a `thread_local!` `RefCell`, reached
//! through [`with`], which never panics: a nested borrow (which would mean a
//! Redis call made while borrowed, calling back into the module) gets
//! `None`. The rule that keeps that from happening: no module API call while
//! a borrow is live — callers copy out what they need first.

use std::cell::RefCell;
use std::thread::LocalKey;

/// Runs `f` on the state in `cell`; `None` if it is already borrowed.
pub fn with<T: 'static, R>(
    cell: &'static LocalKey<RefCell<T>>,
    f: impl FnOnce(&mut T) -> R,
) -> Option<R> {
    cell.try_with(|c| c.try_borrow_mut().ok().map(|mut v| f(&mut v)))
        .ok()
        .flatten()
}

/// The hash maps of the module's main-thread state (waiters, the deadlock
/// index, wait statistics, bound keys). Keys are waiter ids, owners and key
/// names, hashed on every wait and handoff: foldhash with a per-process
/// random seed costs a fraction of std's SipHash per lookup (a profile of
/// the handoff path put SipHash at ~3 k instructions per handoff).
pub type Map<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// The set counterpart of [`Map`].
pub type Set<K> = std::collections::HashSet<K, foldhash::fast::RandomState>;
