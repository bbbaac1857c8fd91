//! The expiry driver: the timer the expiry index (`expiry_index`) arms
//! fires here; it ends what time ended on each due lock, in 2 ms slices,
//! and commits.

use super::commit::{commit, settle};
use super::expiry_index::{arm, arm_next, first_due, take_due, take_entry, timer_fired, SLICE};
use super::jobq::detached;
use super::pause;
use crate::ffi::callbacks::{next_turn, timer_fn, NextTurn, Timer};
use crate::ffi::{self, AnyCtx, Ctx};
use crate::storage::{self, Entry};

// What the commands and the events reach under their old paths.
pub use super::expiry_index::{refile, reindex, swap_dbs, take_db, unindex};

/// Installs the expiry timer's callback in the index (at load).
pub fn install() {
    super::expiry_index::set_on_timer(timer_fn::<ExpiryTimer>());
}

/// The expiry timer ([`on_timer`]) and the next-turn callback that re-arms
/// it ([`on_next_turn`]), called by the FFI's trampolines.
struct ExpiryTimer;

impl Timer for ExpiryTimer {
    fn fire(ctx: Ctx<'_>) {
        on_timer(ctx);
    }
}

impl NextTurn for ExpiryTimer {
    fn run() {
        on_next_turn();
    }
}

/// The expiry timer fired: end what is due, a slice at a time, then arm
/// the timer for what is next.
fn on_timer(ctx: Ctx<'_>) {
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
    if pause::paused() {
        // Clients are paused: nothing may be propagated, so nothing ends
        // now (`pause`); look again soon.
        arm(ctx, now.saturating_add(pause::POLL_MS));
        return;
    }
    let start = std::time::Instant::now();
    let mut served_first = false;
    let mut more = false;
    loop {
        let (due, first) = take_due(now);
        if due.is_empty() {
            break;
        }
        for (entry, name) in due {
            expire_key(ctx, name.db(), name.key(), entry, now);
        }
        served_first |= first;
        more = false;
        if start.elapsed() >= SLICE {
            more = true;
            break;
        }
        // Every due lock with waiters was served: yield, so that the
        // waiters' replies go out before the other locks are ended. Ending
        // locks nobody waits on, yield as soon as a lock with waiters falls
        // due (the next run serves it first).
        if served_first && !first_due(now) || !first && first_due(ffi::now().0) {
            more = true;
            break;
        }
    }
    if more {
        again_next_turn(ctx);
    } else {
        arm_next(ctx);
    }
}

/// The timer yielded with more due: run it again in the next event-loop
/// turn. A timer made inside a module timer's callback fires only after
/// about as long as that callback ran (at least 1 ms: Redis' module timer
/// handler reschedules itself so), which would leave the server idle
/// between slices for as long as it works; a one-shot event-loop callback
/// runs in the next turn and arms the timer from outside the handler, so
/// it fires in that turn. Without the API (Redis < 7.0) or a context, the
/// timer is armed from here.
fn again_next_turn(ctx: Ctx<'_>) {
    if detached().is_some() && next_turn::<ExpiryTimer>() {
        return;
    }
    arm_next(ctx);
}

/// The event loop's next turn after a yielding slice: arm the timer for
/// what is due (at once).
fn on_next_turn() {
    // The one-shot event-loop callback gets no context: the module's
    // detached one arms the timer (it cannot open keys, and need not).
    let Some(ctx) = detached() else {
        return;
    };
    arm_next(ctx);
}

/// The expiry timer found `key` due at `entry`: end leases and queued
/// places, then serve whoever is next.
fn expire_key(ctx: Ctx<'_>, db: i32, key: &[u8], entry: Entry, now: u64) {
    storage::with_lock(ctx, db, key, |mut g| {
        if !take_entry(g.get(), entry) {
            // A stale entry: the lock was refiled under another deadline.
            return;
        }
        let (_, fx) = settle(ctx, key, g.lock_mut(), now);
        commit(g, fx);
    });
}
