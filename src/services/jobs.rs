//! Deferred jobs: work that cannot be done where it is noticed (no
//! context, or writes not allowed there — keyspace callbacks on Redis 7.0,
//! the unlink hook, free callbacks), done by a 0 ms timer on the main
//! thread; and the jobs themselves: pruning waiters whose connection is
//! gone, requeueing waiters of a lock that left its key, ending the bound
//! holds of a closed connection.

use super::bound;
use super::commit::{commit, live_at, settle, settle_pruning, Effects};
use super::grant::fresh;
use super::jobq::{schedule, take_jobs, Job};
use super::state::DbKey;
use super::{cluster, expiry, expiry_index, jobq, notify, observe, pause, promotion, waiters};
use crate::ffi::callbacks::{timer_fn, Timer};
use crate::ffi::{self, AnyCtx, Ctx, RString};
use crate::storage::{self, Opened};
use dlock_core::{Kind, Lock, Waiter};

/// At load: keeps the module's detached context (for timers where Redis
/// gives no context) and installs the callbacks of the timers the
/// registries arm: the job runner's ([`on_jobs`]) and the expiry timer's.
pub fn set_detached(ctx: ffi::DetachedCtx) {
    jobq::set_detached(ctx);
    jobq::set_runner(timer_fn::<JobTimer>());
    expiry::install();
}

/// The job timer fired: run the queued jobs (one prune and one signal per
/// key); while clients are paused, none (`pause`).
fn on_jobs(ctx: Ctx<'_>) {
    if pause::paused() {
        jobq::run_again_in(ctx, pause::POLL_MS);
        return;
    }
    let master = !ctx.is_replica();
    let jobs = take_jobs();
    let mut last = std::collections::HashMap::new();
    for (i, job) in jobs.iter().enumerate() {
        match job {
            Job::Prune(db, key) => last.insert((0, *db, &**key), i),
            Job::Signal(db, key) => last.insert((1, *db, &**key), i),
            _ => None,
        };
    }
    let last: std::collections::HashSet<usize> = last.into_values().collect();
    for (i, job) in jobs.into_iter().enumerate() {
        match job {
            Job::Prune(db, key) if master && last.contains(&i) => prune_key(ctx, db, &key),
            Job::Signal(db, key) if master && last.contains(&i) => signal(ctx, db, &key),
            Job::WaitEnded(db, key) => ended_waits(ctx, master, db, &key),
            Job::Requeue(db, key, kind, places) if master => requeue(ctx, db, &key, kind, places),
            Job::Forget(db, key, ids) if master => forget(ctx, db, &key, &ids),
            Job::Left(db, key, kind, places, notify) if master && cluster::serves(ctx, &key) => {
                if notify {
                    notify::publish(ctx, &key, notify::DELETED);
                }
                requeue(ctx, db, &key, kind, places)
            }
            Job::Unbind(client, keys) => {
                if master {
                    unbind(ctx, &keys);
                }
                bound::forget_closed(client);
            }
            Job::PruneBound(client) => prune_bound(ctx, client),
            Job::Flushed(mut keys) => {
                let start = std::time::Instant::now();
                let mut left = false;
                for (_, key) in keys.by_ref() {
                    notify::publish(ctx, &key, notify::DELETED);
                    if start.elapsed() >= expiry_index::SLICE {
                        left = true;
                        break;
                    }
                }
                if left {
                    schedule(Job::Flushed(keys));
                }
            }
            Job::Floor if master => promotion::replicate_floor(ctx),
            Job::Unlinked => observe::flush_unlinked(),
            Job::PruneAll if master => {
                for (db, key) in expiry_index::take_all_keys() {
                    prune_key(ctx, db, &key);
                }
                expiry_index::arm_next(ctx);
            }
            _ => {}
        }
    }
}

/// Drops waiters of `key` whose connection is gone, ends holds bound to a
/// connection of another process (loaded from a payload: restart,
/// promotion) and whatever else is over, and serves the next.
pub fn prune_key(ctx: Ctx<'_>, db: i32, key: &[u8]) {
    storage::with_lock(ctx, db, key, |mut g| {
        let (now, _) = ffi::now();
        let (changed, fx) = settle_pruning(ctx, key, g.lock_mut(), now, live_at(db, key));
        if changed {
            commit(g, fx);
        }
    });
}

/// Brings the lock at (`db`, `key`) to the present (`commit::settle`) and
/// commits what that ended.
fn settle_key(ctx: Ctx<'_>, db: i32, key: &[u8]) {
    storage::with_lock(ctx, db, key, |mut g| {
        let (now, _) = ffi::now();
        let (changed, fx) = settle(ctx, key, g.lock_mut(), now);
        if changed {
            commit(g, fx);
        }
    });
}

/// Waits on (`db`, `key`) ended while clients were paused: a master takes
/// their places out now; a server that became a replica meanwhile (a
/// `FAILOVER`) forgets them (its master's state arrives as it is).
fn ended_waits(ctx: Ctx<'_>, master: bool, db: i32, key: &[u8]) {
    if master {
        settle_key(ctx, db, key);
    }
    waiters::ended_waits(db, key, true);
}

/// Signals (`db`, `key`): the connections blocked on it look again.
fn signal(ctx: Ctx<'_>, db: i32, key: &[u8]) {
    let Some(_db) = ctx.use_db(db) else { return };
    if let Some(name) = RString::new(key) {
        ctx.signal_ready(name.as_rstr());
    }
}

/// Keeps, of the keys noted for `client`, those where it still has a bound
/// hold (see `bound::note_bound`).
fn prune_bound(ctx: Ctx<'_>, client: u64) {
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

/// The connection `client` closed: end its bound holds on these keys
/// (`commit::settle` ends them, as of when it closed), publish
/// `disconnected` and serve the next waiters (one pass each).
fn unbind(ctx: Ctx<'_>, keys: &[DbKey]) {
    for (db, key) in keys {
        settle_key(ctx, *db, key);
    }
}

/// A lock of `kind` that left `key` had these places: give them to a lock
/// at the key (made anew when the key is empty), ahead of anyone who came
/// since, and serve them. See [`Job::Requeue`].
fn requeue(ctx: Ctx<'_>, db: i32, key: &[u8], kind: Kind, places: Vec<Waiter>) {
    let Some(_db) = ctx.use_db(db) else { return };
    let places: Vec<Waiter> = places
        .into_iter()
        .filter(|w| waiters::is_live_at(w.id, db, key))
        .collect();
    if places.is_empty() {
        return;
    }
    if kind == Kind::Latch {
        // A latch that left its key is open for those who waited on it.
        let ids: Vec<u64> = places.iter().map(|w| w.id).collect();
        waiters::answer_opened(&ids);
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
        Kind::Semaphore => waiters::limit_of(places.iter().map(|w| w.id)).unwrap_or_else(|| {
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
fn forget(ctx: Ctx<'_>, db: i32, key: &[u8], ids: &[u64]) {
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

/// The job timer ([`on_jobs`]), called by the FFI's trampoline.
struct JobTimer;

impl Timer for JobTimer {
    fn fire(ctx: Ctx<'_>) {
        on_jobs(ctx);
    }
}
