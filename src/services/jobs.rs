//! Deferred jobs: work that cannot be done where it is noticed (no
//! context, or writes not allowed there — keyspace callbacks on Redis 7.0,
//! the unlink hook, free callbacks), done by a 0 ms timer on the main
//! thread; and the jobs themselves: pruning waiters whose connection is
//! gone, requeueing waiters of a lock that left its key, ending the bound
//! holds of a closed connection.

use super::bound::{self, DbKey};
use super::commit::{commit, fresh, live_at, tick, tick_due, Effects};
use super::expiry::Flushed;
use super::{blocking, cluster, expiry, notify, observe, state};
use crate::ffi::{self, Ctx, RString};
use crate::stats;
use crate::storage::{self, Opened};
use dlock_core::slowlog::Outcome;
use dlock_core::{Kind, Lock, Waiter};
use redis_module::raw;
use std::cell::{Cell, RefCell};
use std::ffi::c_void;

/// Work that cannot be done where it is noticed (no context, or writes not
/// allowed there): done by a 0 ms timer on the main thread.
pub enum Job {
    /// Drop waiters whose connection is gone, serve the next.
    Prune(i32, Box<[u8]>),
    /// A lock of this kind left the key (DEL, FLUSHDB, RENAME source,
    /// overwrite) while connections waited on it: give their places to a new
    /// lock at the key (Redis 7.0 serves waiters only of keys that exist),
    /// ahead of anyone who came since, and wake them.
    Requeue(i32, Box<[u8]>, dlock_core::Kind, Vec<dlock_core::Waiter>),
    /// Cluster mode: a lock left the key. Unless this node no longer serves
    /// the slot (MIGRATE), publish `deleted` (when it was held) and requeue.
    Left(
        i32,
        Box<[u8]>,
        dlock_core::Kind,
        Vec<dlock_core::Waiter>,
        bool,
    ),
    /// These waiters moved with their lock to another key (RENAME, MOVE), but
    /// their connections wait on the old key: drop their places here.
    Forget(i32, Box<[u8]>, Vec<u64>),
    /// After loading or promotion: prune every lock and arm the timer.
    PruneAll,
    /// A connection with bound holds closed: end them (`BIND`).
    Unbind(u64, Vec<DbKey>),
    /// Forget the keys where this connection no longer has bound holds.
    PruneBound(u64),
    /// Publish `deleted` for these flushed keys (a slice at a time, so that
    /// a flush of a million locks does not stall the server).
    Flushed(Flushed),
    /// After a promotion: replicate the raised token floor.
    Floor,
    /// Record the holds of lock values that left their keys for good as
    /// ended (`deleted`); see `observe::holds_unlinked`.
    Unlinked,
}

#[derive(Default)]
struct Jobs {
    queue: Vec<Job>,
    armed: bool,
}

thread_local! {
    static JOBS: RefCell<Jobs> = RefCell::new(Jobs::default());
    /// The module's detached context (see [`set_detached`]).
    static DETACHED: Cell<Option<Ctx>> = const { Cell::new(None) };
}

/// Keeps the module's detached context, for creating timers where Redis
/// gives no context (the unlink hook). Set once at load.
pub fn set_detached(ctx: Ctx) {
    DETACHED.with(|d| d.set(Some(ctx)));
}

/// The module's detached context (None before load finished).
pub fn detached() -> Option<Ctx> {
    DETACHED.try_with(Cell::get).ok().flatten()
}

/// Queues `job` and makes sure the job timer runs soon.
pub fn schedule(job: Job) {
    let arm = state::with(&JOBS, |j| {
        j.queue.push(job);
        !std::mem::replace(&mut j.armed, true)
    });
    if arm == Some(true) {
        let Some(ctx) = detached() else { return };
        ctx.create_timer(0, on_jobs);
    }
}

/// Takes the queued jobs, to run them: the job timer fired.
fn take_jobs() -> Vec<Job> {
    state::with(&JOBS, |j| {
        j.armed = false;
        std::mem::take(&mut j.queue)
    })
    .unwrap_or_default()
}

/// The job timer fired: run the queued jobs (one prune per key).
unsafe extern "C" fn on_jobs(ctx: *mut raw::RedisModuleCtx, _data: *mut c_void) {
    // SAFETY: Redis passes a context valid for the callback.
    let ctx = unsafe { Ctx::from_raw(ctx) };
    let master = !ctx.is_replica();
    let jobs = take_jobs();
    let mut last_prune = std::collections::HashMap::new();
    for (i, job) in jobs.iter().enumerate() {
        if let Job::Prune(db, key) = job {
            last_prune.insert((*db, &**key), i);
        }
    }
    let last_prune: std::collections::HashSet<usize> = last_prune.into_values().collect();
    for (i, job) in jobs.into_iter().enumerate() {
        match job {
            Job::Prune(db, key) if master && last_prune.contains(&i) => prune_key(ctx, db, &key),
            Job::Requeue(db, key, kind, places) if master => requeue(ctx, db, &key, kind, places),
            Job::Forget(db, key, ids) if master => forget(ctx, db, &key, &ids),
            Job::Left(db, key, kind, places, notify) if master && cluster::serves(ctx, &key) => {
                if notify {
                    notify::publish(ctx, &key, notify::DELETED);
                }
                requeue(ctx, db, &key, kind, places)
            }
            Job::Unbind(client, keys) if master => unbind(ctx, client, &keys),
            Job::PruneBound(client) => prune_bound(ctx, client),
            Job::Flushed(mut keys) => {
                let start = std::time::Instant::now();
                let mut left = false;
                for (_, key) in keys.by_ref() {
                    notify::publish(ctx, &key, notify::DELETED);
                    if start.elapsed() >= expiry::SLICE {
                        left = true;
                        break;
                    }
                }
                if left {
                    schedule(Job::Flushed(keys));
                }
            }
            Job::Floor if master => super::promotion::replicate_floor(ctx),
            Job::Unlinked => observe::flush_unlinked(),
            Job::PruneAll if master => {
                for (db, key) in expiry::all_keys() {
                    prune_key(ctx, db, &key);
                }
                expiry::arm_next(ctx);
            }
            _ => {}
        }
    }
}

/// Drops waiters of `key` whose connection is gone, ends holds bound to a
/// connection of another process (loaded from a payload: restart,
/// promotion), and serves the next.
pub fn prune_key(ctx: Ctx, db: i32, key: &[u8]) {
    storage::with_lock(ctx, db, key, |mut g| {
        let (now, _) = ffi::now();
        let lock = g.lock_mut();
        observe::holds_ended(ctx, key, lock, Outcome::Disconnected, |h| {
            h.bound == dlock_core::BOUND_ELSEWHERE
        });
        let unbound = lock.end_bound(dlock_core::BOUND_ELSEWHERE, now);
        observe::before_tick(ctx, key, lock, now);
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
        commit(g, fx);
    });
}

/// Keeps, of the keys noted for `client`, those where it still has a bound
/// hold (see `bound::note_bound`).
fn prune_bound(ctx: Ctx, client: u64) {
    let mut live = Vec::new();
    for (db, key) in bound::bound_keys(client) {
        let bound_here = storage::with_read(ctx, db, &key, |s| {
            s.lock().holders().iter().any(|h| h.bound == client)
        });
        if bound_here == Some(true) {
            live.push((db, key));
        }
    }
    bound::set_bound_keys(client, live);
}

/// What ending a closed connection's bound holds means for others, with
/// what time ended at the same instant (`tick`): the waiters are woken when
/// either freed the lock, and `disconnected` is published when the unbind
/// freed it, else `expired` when the lease ends did.
pub fn unbind_effects(ended: dlock_core::Ended, tick: Effects) -> Effects {
    let own = Effects {
        notice: ended.freed.then_some(notify::DISCONNECTED),
        wake: ended.freed,
    };
    own.and(tick)
}

/// The connection `client` closed: end its bound holds on these keys,
/// publish `disconnected` and serve the next waiters (one pass each).
fn unbind(ctx: Ctx, client: u64, keys: &[DbKey]) {
    for (db, key) in keys {
        storage::with_lock(ctx, *db, key, |mut g| {
            let (now, _) = ffi::now();
            let lock = g.lock_mut();
            observe::holds_ended(ctx, key, lock, Outcome::Disconnected, |h| h.bound == client);
            observe::before_tick(ctx, key, lock, now);
            let ended = lock.end_bound(client, now);
            if ended.ended == 0 {
                return;
            }
            stats::add(&stats::counter::bound_ends, ended.ended as u64);
            // Leases due at this instant end too (counted as expirations),
            // and what that frees counts. With a lock-delay the bound hold
            // keeps excluding: `disconnected` is published when the delay
            // ends (by the expiry timer).
            let (_, due) = tick_due(lock, now);
            commit(g, unbind_effects(ended, due));
        });
    }
}

/// A lock of `kind` that left `key` had these places: give them to a lock
/// at the key (made anew when the key is empty), ahead of anyone who came
/// since, and serve them. See [`Job::Requeue`].
fn requeue(ctx: Ctx, db: i32, key: &[u8], kind: Kind, places: Vec<Waiter>) {
    let Some(_db) = ctx.use_db(db) else { return };
    let places: Vec<Waiter> = places
        .into_iter()
        .filter(|w| blocking::is_live_at(w.id, db, key))
        .collect();
    if places.is_empty() {
        return;
    }
    if kind == Kind::Latch {
        // A latch that left its key is open for those who waited on it.
        let ids: Vec<u64> = places.iter().map(|w| w.id).collect();
        blocking::answer_opened(&ids);
        return;
    }
    let Some(name) = RString::new(key) else {
        return;
    };
    let wake = Effects {
        notice: None,
        wake: true,
    };
    match storage::open(ctx, name.as_rstr()) {
        Opened::Vacant(v) => {
            let mut lock = fresh_for(kind, &places);
            lock.adopt(places);
            if let Some(g) = v.store(lock) {
                commit(g, wake);
            }
        }
        Opened::Lock(mut g) if g.lock().kind() == kind => {
            if g.lock_mut().adopt(places) {
                commit(g, wake);
            }
        }
        // Another type or kind took the key: let the waiters see it.
        _ => ctx.signal_ready(name.as_rstr()),
    };
}

/// A new lock of `kind` for waiters whose lock left the key: a semaphore
/// gets the limit its waiters named.
fn fresh_for(kind: Kind, places: &[Waiter]) -> Lock {
    let limit = match kind {
        Kind::Semaphore => blocking::limit_of(places.iter().map(|w| w.id)).unwrap_or_else(|| {
            places
                .iter()
                .map(|w| u64::from(w.permits))
                .max()
                .unwrap_or(1)
        }),
        _ => 0,
    };
    fresh(kind, limit)
}

/// These waiters moved with their lock to another key; drop their places
/// here. See [`Job::Forget`].
fn forget(ctx: Ctx, db: i32, key: &[u8], ids: &[u64]) {
    storage::with_lock(ctx, db, key, |mut g| {
        let mut changed = false;
        for id in ids {
            changed |= g.lock_mut().remove_waiter(*id);
        }
        if changed {
            let fx = Effects {
                notice: None,
                wake: true,
            };
            commit(g, fx);
        }
    });
}
