//! The command layer: parse, call the state machine, reply, replicate,
//! notify, wake. One file per command family; this file holds what they
//! share: [`commit`] and the timer-driven paths; command registration is in
//! `registry`.

pub mod acquire;
pub mod apply;
pub mod fence;
pub mod info;
pub mod jobs;
pub mod latch;
pub mod release;
pub mod semaphore;

use crate::datatype::{with_lock, Held, LockKey};
use crate::ffi::{self, Ctx, Key, RString, RawStr};
use crate::{notify, runtime, stats};
use dlock_core::{codec, Kind, Lock, Mode, Waiter};

/// What a change means for others, besides the new state itself.
#[derive(Clone, Copy, Default)]
pub struct Effects {
    /// Message to publish on the lock's channel.
    pub notice: Option<&'static [u8]>,
    /// Connections blocked on the key should look again.
    pub wake: bool,
}

/// After the state machine changed the lock in `key`: hand the lock over to
/// the waiters it can serve now (see [`acquire`]), delete the key when the
/// lock is empty, keep the expiry index, replicate the new state with
/// absolute times, publish, and unblock the waiters served.
pub fn commit(ctx: Ctx, key: &Key, name: RawStr, lock: &mut Lock, fx: Effects) {
    commit_as(ctx, key, name, lock, fx, Propagate::Effect);
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

/// [`commit`], choosing how the change is propagated.
pub fn commit_as(ctx: Ctx, key: &Key, name: RawStr, lock: &mut Lock, fx: Effects, how: Propagate) {
    // SAFETY: `name` is a live module string for the whole call.
    let key_bytes = unsafe { ffi::bytes(name) };
    runtime::changed();
    let mut how = how;
    let mut wake = fx.wake && lock.has_blocked();
    let mut handed = acquire::HandOver::default();
    // Replicas and replays (master link, AOF) never serve waiters: their
    // places name connections of the master, and its grants come as effects.
    if wake && !ctx.is_replay() && !ctx.is_replica() {
        handed = acquire::hand_over(ctx, key_bytes, lock);
        if handed.changed {
            // More changed than the command itself did.
            how = Propagate::Effect;
        }
        // Every waiter the lock can serve now was served: no signal, so no
        // other waiter's callback runs.
        wake = false;
    }
    stats::account_waiters(lock);
    let empty = lock.is_empty();
    if empty {
        key.delete();
    } else {
        runtime::reindex(ctx, ctx.db(), key_bytes, lock);
    }
    // A verbatim release changes holds only: if the queue changed too (it
    // never should), replicas need the effect.
    if how == Propagate::Verbatim && lock.journal_dirty() {
        how = Propagate::Effect;
    }
    match how {
        Propagate::Verbatim => ctx.replicate_verbatim(),
        Propagate::Effect if empty => ctx.replicate_apply(name, b""),
        // The queue's change since the last commit when the lock's journal
        // can say it, else the whole state.
        Propagate::Effect => {
            codec::with_replication_payload(lock, runtime::tokens().last, |payload, _| {
                ctx.replicate_apply(name, payload)
            })
        }
    }
    if !empty {
        // Replicas and the AOF now have this state. (An empty lock's key
        // was deleted, and the lock with it: not touched again.)
        lock.journal_reset();
    }
    if let Some(n) = fx.notice {
        notify::publish(ctx, key_bytes, n);
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
/// that went away are pruned by the events that tell so: the disconnect
/// and free callbacks, keyspace and server events) and without a scan of
/// the queue unless a queued place may have ended (`Lock::tick_due`): O(1)
/// in the number of waiters.
pub fn tick_due(lock: &mut Lock, now: u64) -> (bool, Effects) {
    effects_of(lock.tick_due(now))
}

fn effects_of(t: dlock_core::Tick) -> (bool, Effects) {
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
    move |id| runtime::is_live_at(id, db, key)
}

/// The expiry timer found `key` due at `deadline`: end leases and queued
/// places, then serve whoever is next.
pub fn expire_key(ctx: Ctx, db: i32, key: &[u8], entry: (u64, u64), now: u64) {
    with_lock(ctx, db, key, true, |k, name, lock| {
        if !runtime::take_entry(lock, entry) {
            // A stale entry: the lock was refiled under another deadline.
            return;
        }
        let (_, fx) = tick_due(lock, now);
        commit(ctx, k, name, lock, fx);
    });
}

/// Drops waiters of `key` whose connection is gone, ends holds bound to a
/// connection of another process (loaded from a payload: restart,
/// promotion), and serves the next.
pub fn prune_key(ctx: Ctx, db: i32, key: &[u8]) {
    with_lock(ctx, db, key, true, |k, name, lock| {
        let (now, _) = ffi::now();
        let unbound = lock.end_bound(dlock_core::BOUND_ELSEWHERE, now);
        let (changed, mut fx) = tick(lock, now, live_at(db, key));
        if unbound.ended > 0 {
            stats::add(&stats::counter::bound_ends, unbound.ended as u64);
            if unbound.freed {
                fx.notice = Some(notify::DISCONNECTED);
            }
            fx.wake = true;
        } else if !changed {
            return;
        }
        commit(ctx, k, name, lock, fx);
    });
}

/// The hold a grant created: owner, mode, `BIND`, `LOCKDELAY` ms.
pub type NewHold<'a> = (&'a [u8], Mode, bool, u64);

/// After a grant that created the hold `(owner, mode, bind, lock_delay)`:
/// its `LOCKDELAY`, and with `BIND` its binding to connection `client`, the
/// one that asked (whose bound key is recorded). Called before the change
/// is committed, so replicas get both.
pub fn new_hold(ctx: Ctx, client: u64, key: &[u8], lock: &mut Lock, hold: NewHold<'_>) {
    let (owner, mode, bind, lock_delay) = hold;
    if lock_delay > 0 {
        lock.set_lock_delay(owner, mode, lock_delay);
    }
    if bind && lock.bind_hold(owner, mode, client) {
        runtime::note_bound(client, ctx.db(), key);
    }
}

/// Keeps, of the keys noted for `client`, those where it still has a bound
/// hold (see `runtime::note_bound`).
pub fn prune_bound(ctx: Ctx, client: u64) {
    let mut live = Vec::new();
    for (db, key) in runtime::bound_keys(client) {
        let bound_here = with_lock(ctx, db, &key, false, |_, _, l| {
            l.holders().iter().any(|h| h.bound == client)
        });
        if bound_here == Some(true) {
            live.push((db, key));
        }
    }
    runtime::set_bound_keys(client, live);
}

/// The connection `client` closed: end its bound holds on these keys,
/// publish `disconnected` and serve the next waiters (one pass each).
pub fn unbind(ctx: Ctx, client: u64, keys: &[(i32, Box<[u8]>)]) {
    for (db, key) in keys {
        with_lock(ctx, *db, key, true, |k, name, lock| {
            let (now, _) = ffi::now();
            let ended = lock.end_bound(client, now);
            if ended.ended == 0 {
                return;
            }
            stats::add(&stats::counter::bound_ends, ended.ended as u64);
            // Leases due at this instant end too (counted as expirations).
            let _ = tick_due(lock, now);
            // With a lock-delay the hold keeps excluding: `disconnected` is
            // published when the delay ends (by the expiry timer).
            let fx = Effects {
                notice: ended.freed.then_some(notify::DISCONNECTED),
                wake: ended.freed,
            };
            commit(ctx, k, name, lock, fx);
        });
    }
}

/// See [`runtime::Job::Requeue`].
pub fn requeue(ctx: Ctx, db: i32, key: &[u8], kind: Kind, places: Vec<Waiter>) {
    let Some(_db) = ctx.use_db(db) else { return };
    let places: Vec<Waiter> = places
        .into_iter()
        .filter(|w| runtime::is_live_at(w.id, db, key))
        .collect();
    if places.is_empty() {
        return;
    }
    if kind == Kind::Latch {
        // A latch that left its key is open for those who waited on it.
        let ids: Vec<u64> = places.iter().map(|w| w.id).collect();
        latch::answer_opened(&ids);
        return;
    }
    let name = RString::new(key);
    let k = ctx.open(name.ptr(), true);
    let wake = Effects {
        notice: None,
        wake: true,
    };
    match k.held() {
        Held::Empty => {
            let mut lock = semaphore::fresh_for(kind, &places);
            lock.adopt(places);
            if k.set(lock) {
                if let Held::Lock(l) = k.held() {
                    commit(ctx, &k, name.ptr(), l, wake);
                }
            }
        }
        Held::Lock(l) if l.kind() == kind => {
            if l.adopt(places) {
                commit(ctx, &k, name.ptr(), l, wake);
            }
        }
        // Another type or kind took the key: let the waiters see it.
        _ => ctx.signal_ready(name.ptr()),
    }
}

/// See [`runtime::Job::Forget`].
pub fn forget(ctx: Ctx, db: i32, key: &[u8], ids: &[u64]) {
    with_lock(ctx, db, key, true, |k, name, lock| {
        let mut changed = false;
        for id in ids {
            changed |= lock.remove_waiter(*id);
        }
        if changed {
            let fx = Effects {
                notice: None,
                wake: true,
            };
            commit(ctx, k, name, lock, fx);
        }
    });
}

// ---- registration -----------------------------------------------------------

mod registry;
pub use registry::register;
