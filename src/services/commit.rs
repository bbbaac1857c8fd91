//! Committing a change: after the state machine changed a stored lock, hand
//! it over to the waiters it can serve now, delete the key when the lock is
//! empty, keep the expiry index, replicate the effect with absolute times,
//! publish, and unblock the waiters served. [`commit`] consumes the key's
//! guard, so nothing can touch the lock after the key may have been deleted.

use super::waiters::{self, EndedWait, HandOver};
use super::{bound, deadlock, expiry_index, grant, hint, jobq, notify, observe};
use crate::ffi::{AnyCtx, Ctx};
use crate::stats;
use crate::storage::{tokens, Guard};
use dlock_core::slowlog::Outcome;
use dlock_core::{codec, Kind, Lock, Tick};
use std::borrow::Cow;

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

/// Ends what time ended on `lock` and drops the waiters `live` says are
/// gone (an O(queue) look), counts expirations, and says what that means for
/// others. Only after [`settle`] observed what time ended ([`settle_pruning`]).
fn tick(lock: &mut Lock, now: u64, live: impl Fn(u64) -> bool) -> (bool, Effects) {
    effects_of(lock.tick(now, live))
}

/// [`tick`] for time alone, without a look at waiters' connections (those
/// that went away are pruned by the events that tell so) and without a scan
/// of the queue unless a queued place may have ended (`Lock::tick_due`):
/// O(1) in the number of waiters.
fn tick_due(lock: &mut Lock, now: u64) -> (bool, Effects) {
    effects_of(lock.tick_due(now))
}

// ---- what is over: one notion for every read and every write ---------------
//
// A hold is over when its lease (or its lock-delay) has ended, and when the
// connection it is bound to (`BIND`) has closed; a place is over when its
// queued time has ended, or its wait timed out while clients were paused.
// The timers and jobs that take them out may run late (a loaded server, a
// client pause: see `pause`), so every command brings the lock to the
// present first ([`settle`]: writers, which commit what it ended), and every
// read answers from the lock as of now ([`as_of`]: a copy, nothing
// committed). Both take the same [`steps`], so no answer depends on when a
// timer or job ran (issue 44: a killed bound holder's token passed CHECK and
// FENCED until the job ran; INFO listed ended leases until the timer ran).

/// One step that brings a lock to the present.
#[derive(Clone, Copy)]
enum Step {
    /// A wait that ended while clients were paused: its place goes.
    Wait(EndedWait),
    /// What time ended by this instant (unix ms) ends.
    Time(u64),
    /// The holds bound to this connection end, at this instant (when it
    /// closed).
    Bound(u64, u64),
}

/// Where a lock is read or written: the context (its db names the key),
/// and whether this server ends what is over by itself (a master, not
/// loading: a replica and a replay take holds and places as replicated).
#[derive(Clone, Copy)]
struct Here<'cb> {
    ctx: Ctx<'cb>,
    master: bool,
}

impl<'cb> Here<'cb> {
    fn of(ctx: Ctx<'cb>) -> Here<'cb> {
        Here {
            ctx,
            master: !ctx.is_replica() && !ctx.is_loading(),
        }
    }

    /// The waits on `key` that ended during a pause (none on a replica;
    /// the db is read only when there are any).
    fn ended_waits(self, key: &[u8], take: bool) -> Vec<EndedWait> {
        if !self.master || !waiters::any_ended() {
            return Vec::new();
        }
        waiters::ended_waits(self.ctx.db(), key, take)
    }
}

/// Since when the connection a hold is bound to (`client`) is closed, as
/// this server sees it at `now`; None while it is open (or for an unbound
/// hold). On a master, a hold bound to a connection of another process
/// (loaded or received from a payload) has none here: it is over now.
fn closed_at(client: u64, here: Here<'_>, now: u64) -> Option<u64> {
    match client {
        _ if !here.master => None,
        0 => None,
        dlock_core::BOUND_ELSEWHERE => Some(now),
        c => bound::closed_since(c, now),
    }
}

/// (closed since, connection) of the live holds of `lock` bound to a
/// connection that closed, in the order they closed, each connection once.
/// No allocation when the lock has no such hold.
fn closed_holds(lock: &Lock, here: Here<'_>, now: u64) -> Vec<(u64, u64)> {
    if !here.master || lock.holders().iter().all(|h| h.bound == 0) {
        return Vec::new();
    }
    let mut closed: Vec<(u64, u64)> = lock
        .holders()
        .iter()
        .filter(|h| h.is_live() && h.bound != 0)
        .filter_map(|h| Some((closed_at(h.bound, here, now)?, h.bound)))
        .collect();
    closed.sort_unstable();
    closed.dedup();
    closed
}

/// Runs the steps that bring `lock` (at `key` in `here`'s db) to `now`, in
/// order: the places of waits that ended during a pause (taken out of their
/// registry when `take`), then, for each bound connection that closed, in
/// the order they closed, what time ended by then and its holds; then what
/// time ended by `now`.
fn steps(
    lock: &mut Lock,
    key: &[u8],
    here: Here<'_>,
    now: u64,
    take: bool,
    mut step: impl FnMut(&mut Lock, Step),
) {
    for w in here.ended_waits(key, take) {
        step(lock, Step::Wait(w));
    }
    for (at, client) in closed_holds(lock, here, now) {
        step(lock, Step::Time(at));
        step(lock, Step::Bound(client, at));
    }
    step(lock, Step::Time(now));
}

/// Whether [`steps`] would change `lock` at `now` (a cheap look: the
/// earliest deadline, the bound holds, the pause's ended waits).
fn due(lock: &Lock, key: &[u8], here: Here<'_>, now: u64) -> bool {
    lock.next_deadline_hint().is_some_and(|d| d <= now)
        || !closed_holds(lock, here, now).is_empty()
        || !here.ended_waits(key, false).is_empty()
}

/// The place of the wait `id` that ended unanswered goes (`until`: None
/// for a latch's place; a fair-lock owner keeps it queued until then).
/// True when the lock changed.
pub fn end_wait_place(lock: &mut Lock, (id, until): EndedWait) -> bool {
    match until {
        None => lock.kind() == Kind::Latch && lock.remove_waiter(id),
        Some(queue_deadline) => lock.wait_ended(id, queue_deadline),
    }
}

/// Brings `lock` (at `key` in the context's db) to `now` before a command
/// or a job decides anything: ends what is over ([`steps`]), counts and
/// observes it, and says what that means for others. Returns whether
/// anything changed, and the effects to commit.
pub fn settle(ctx: Ctx<'_>, key: &[u8], lock: &mut Lock, now: u64) -> (bool, Effects) {
    let mut changed = false;
    let mut unbound = Effects::default();
    let mut other = Effects::default();
    steps(lock, key, Here::of(ctx), now, true, |lock, s| match s {
        Step::Wait(w) => {
            if end_wait_place(lock, w) {
                changed = true;
                other.wake |= w.1.is_some();
            }
        }
        Step::Time(at) => {
            observe::before_tick(ctx, key, lock, at);
            let (ticked, fx) = tick_due(lock, at);
            changed |= ticked;
            other = other.and(fx);
        }
        Step::Bound(client, at) => {
            observe::holds_ended(ctx, key, lock, Outcome::Disconnected, |h| h.bound == client);
            let ended = lock.end_bound(client, at);
            if ended.ended > 0 {
                stats::add(&stats::counter::bound_ends, ended.ended as u64);
                changed = true;
                // With a lock-delay the hold keeps excluding: `disconnected`
                // is published when the delay ends (by the expiry timer).
                unbound = unbound.and(Effects {
                    notice: ended.freed.then_some(notify::DISCONNECTED),
                    wake: ended.freed,
                });
            }
        }
    });
    let fx = unbound.and(other);
    if !jobq::prune_all_pending() || ctx.is_replica() {
        return (changed, fx);
    }
    // A promotion's or a load's prune has not run yet: this lock's places of
    // connections this server does not have go now (see `prune_all_pending`).
    let (pruned, more) = tick(lock, now, live_at(ctx.db(), key));
    (changed || pruned, fx.and(more))
}

/// [`settle`], then the waiters whose connection is gone (`live` says which)
/// leave the queue: O(queue), for a latch's commands (a gone awaiter's place
/// is never granted, so nothing else drops it) and the prune job. Returns
/// whether anything changed, and the effects to commit.
pub fn settle_pruning(
    ctx: Ctx<'_>,
    key: &[u8],
    lock: &mut Lock,
    now: u64,
    live: impl Fn(u64) -> bool,
) -> (bool, Effects) {
    let (settled, fx) = settle(ctx, key, lock, now);
    let (pruned, more) = tick(lock, now, live);
    (settled || pruned, fx.and(more))
}

/// `lock` (at `key` in the context's db) as it is at `now`: what
/// [`settle`] would leave of it, on a copy when anything is over (borrowed
/// otherwise), nothing counted or committed. What every read answers from.
pub fn as_of<'l>(ctx: Ctx<'_>, key: &[u8], lock: &'l Lock, now: u64) -> Cow<'l, Lock> {
    let here = Here::of(ctx);
    if !due(lock, key, here, now) {
        return Cow::Borrowed(lock);
    }
    let mut copy = lock.clone();
    steps(&mut copy, key, here, now, false, |lock, s| match s {
        Step::Wait(w) => {
            end_wait_place(lock, w);
        }
        Step::Time(at) => {
            lock.tick_due(at);
        }
        Step::Bound(client, at) => {
            lock.end_bound(client, at);
        }
    });
    Cow::Owned(copy)
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
