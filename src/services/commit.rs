//! Committing a change: after the state machine changed a stored lock, hand
//! it over to the waiters it can serve now, delete the key when the lock is
//! empty, keep the expiry index, replicate the effect with absolute times,
//! publish, and unblock the waiters served. [`commit`] consumes the key's
//! guard, so nothing can touch the lock after the key may have been deleted.

use super::waiters::{self, HandOver};
use super::{deadlock, expiry_index, grant, hint, notify};
use crate::ffi::AnyCtx;
use crate::stats;
use crate::storage::{tokens, Guard};
use dlock_core::{codec, Lock, Tick};

// The grant helpers the commands reach under their old paths.
pub use super::grant::{count_grant, fresh, new_hold};

/// What a change means for others, besides the new state itself.
#[derive(Clone, Copy, Default)]
pub struct Effects {
    /// Message to publish on the lock's channel.
    pub notice: Option<&'static [u8]>,
    /// Waiters of the lock should look again (served by a handoff).
    pub wake: bool,
}

impl Effects {
    /// Both changes' effects: wake when either wakes; the first notice wins.
    pub fn and(self, other: Effects) -> Effects {
        Effects {
            notice: self.notice.or(other.notice),
            wake: self.wake || other.wake,
        }
    }
}

/// How a change reaches replicas and the AOF.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Propagate {
    /// `DLOCK.APPLY key <state>`: the resulting state, absolute times.
    Effect,
    /// The command as received. Only for a command whose effect does not
    /// depend on the clock given the state before it (a RELEASE at an
    /// instant when nothing else ended), which replicas and the AOF replay
    /// without consulting their own clock.
    Verbatim,
}

/// Commits the change to the lock in `g`, replicated as its effect.
pub fn commit(g: Guard<'_>, fx: Effects) {
    commit_as(g, fx, Propagate::Effect);
}

/// [`commit`], choosing how the change is propagated.
pub fn commit_as(mut g: Guard<'_>, fx: Effects, how: Propagate) {
    let ctx = g.ctx();
    let name = g.name();
    let key = name.bytes();
    hint::changed();
    let mut how = how;
    let mut wake = fx.wake && g.lock().has_blocked();
    let mut handed = HandOver::default();
    // Replicas and replays (master link, AOF) never serve waiters: their
    // places name connections of the master, and its grants come as effects.
    if wake && !ctx.is_replay() && !ctx.is_replica() {
        handed = grant::hand_over(ctx, key, g.lock_mut());
        // A lock that changed hands (a handoff, a release, an expiry) may
        // close a wait-for cycle through one of its waiters: that waiter is
        // answered DEADLOCK, its place goes, and whoever that lets in is
        // served.
        if deadlock::after_handoff(ctx, key, g.lock_mut(), &mut handed) {
            let more = grant::hand_over(ctx, key, g.lock_mut());
            handed.absorb(more);
        }
        if handed.changed {
            // More changed than the command itself did.
            how = Propagate::Effect;
        }
        // Every waiter the lock can serve now was served: no signal, so no
        // other waiter's callback runs.
        wake = false;
    }
    g.get().account_waiters();
    let empty = g.lock().is_empty();
    if !empty {
        expiry_index::reindex(ctx, ctx.db(), key, g.get());
    }
    // A verbatim release changes holds only: if the queue changed too (it
    // never should), replicas need the effect.
    if how == Propagate::Verbatim && g.lock().journal_dirty() {
        how = Propagate::Effect;
    }
    match how {
        Propagate::Verbatim => ctx.replicate_verbatim(),
        Propagate::Effect if empty => ctx.replicate_apply(name, b""),
        // The queue's change since the last commit when the lock's journal
        // can say it, else the whole state.
        Propagate::Effect => {
            codec::with_replication_payload(g.lock(), tokens::last(), |payload, _| {
                ctx.replicate_apply(name, payload)
            })
        }
    }
    if empty {
        // The guard goes with the key: nothing can reach the freed lock.
        g.delete();
    } else {
        // Replicas and the AOF now have this state.
        g.lock_mut().journal_reset();
    }
    if let Some(n) = fx.notice {
        notify::publish(ctx, key, n);
    }
    if wake {
        ctx.signal_ready(name);
    }
    // Last: the served connections' callbacks run now (they only reply).
    handed.unblock();
}

/// Ends what time ended on `lock` (and drops waiters `live` says are gone),
/// counts expirations, and says what that means for others. Returns whether
/// anything changed, and the effects to commit.
pub fn tick(lock: &mut Lock, now: u64, live: impl Fn(u64) -> bool) -> (bool, Effects) {
    effects_of(lock.tick(now, live))
}

/// [`tick`] for time alone, without a look at waiters' connections (those
/// that went away are pruned by the events that tell so) and without a scan
/// of the queue unless a queued place may have ended (`Lock::tick_due`):
/// O(1) in the number of waiters.
pub fn tick_due(lock: &mut Lock, now: u64) -> (bool, Effects) {
    effects_of(lock.tick_due(now))
}

fn effects_of(t: Tick) -> (bool, Effects) {
    stats::add(&stats::counter::expirations, t.expired as u64);
    stats::add(&stats::counter::delayed_ends, t.delay_ended as u64);
    let changed = t.expired > 0 || t.delay_ended > 0 || t.dropped > 0;
    let notice = if t.disconnected {
        notify::DISCONNECTED
    } else {
        notify::EXPIRED
    };
    let fx = Effects {
        notice: t.freed.then_some(notice),
        wake: changed,
    };
    (changed, fx)
}

/// Whether a blocked waiter's connection still waits on (`db`, `key`) in
/// this process.
pub fn live_at(db: i32, key: &[u8]) -> impl Fn(u64) -> bool + '_ {
    move |id| waiters::is_live_at(id, db, key)
}
