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

/// A (db, key): how the registries name a key.
pub type DbKey = (i32, Box<[u8]>);

/// Where what was in db `d` is after `SWAPDB a b`.
pub fn swapped_db(d: i32, a: i32, b: i32) -> i32 {
    if d == a {
        b
    } else if d == b {
        a
    } else {
        d
    }
}

/// Runs `f` on the state in `cell`; `None` if it is already borrowed (or
/// gone: the thread is ending). A borrowed cell means the rule above was
/// broken and `f`'s work is skipped: never silently — `INFO dlock` counts
/// it (`dlock_state_busy`), and debug builds (tests) fail at once.
pub fn with<T: 'static, R>(
    cell: &'static LocalKey<RefCell<T>>,
    f: impl FnOnce(&mut T) -> R,
) -> Option<R> {
    let out = cell.try_with(|c| c.try_borrow_mut().ok().map(|mut v| f(&mut v)));
    match out {
        Ok(Some(r)) => Some(r),
        Ok(None) => {
            busy();
            None
        }
        Err(_) => None,
    }
}

/// A state cell was found borrowed: count it; in a debug build, fail.
fn busy() {
    crate::stats::add(&crate::stats::counter::state_busy, 1);
    debug_assert!(
        false,
        "main-thread state borrowed twice: a module API call made while a borrow was live"
    );
}

/// The hash maps of the module's main-thread state (waiters, the deadlock
/// index, wait statistics, bound keys). Keys are waiter ids, owners and key
/// names, hashed on every wait and handoff: foldhash with a per-process
/// random seed costs a fraction of std's SipHash per lookup (a profile of
/// the handoff path put SipHash at ~3 k instructions per handoff).
pub type Map<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// The set counterpart of [`Map`].
pub type Set<K> = std::collections::HashSet<K, foldhash::fast::RandomState>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering::Relaxed;

    thread_local! {
        static CELL: RefCell<u32> = const { RefCell::new(0) };
    }

    /// A nested borrow skips the inner work, and says so: counted in
    /// `INFO dlock`; in a debug build it fails.
    #[test]
    #[cfg_attr(debug_assertions, should_panic(expected = "borrowed twice"))]
    fn a_nested_borrow_is_counted_and_fails_in_debug_builds() {
        let before = crate::stats::counter::state_busy.load(Relaxed);
        let inner = with(&CELL, |v| {
            *v += 1;
            with(&CELL, |w| *w += 1)
        });
        assert_eq!(inner, Some(None));
        assert_eq!(with(&CELL, |v| *v), Some(1));
        assert_eq!(crate::stats::counter::state_busy.load(Relaxed), before + 1);
    }
}
