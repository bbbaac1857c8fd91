//! The two timer callbacks of the module, which act on keys: the expiry
//! timer (leases and queued places due) and the job timer (work noticed
//! where keys cannot be written: unlink, events, disconnects). `runtime`
//! keeps their state (index, job queue) and arms the timers with the
//! callbacks [`install`]ed here.

use super::{expire_key, forget, prune_bound, prune_key, requeue, unbind};
use crate::ffi::{self, Ctx};
use crate::runtime::{self, Job};
use crate::{cluster, notify};
use redis_module::raw;
use std::ffi::c_void;

/// Gives `runtime` the callbacks it arms its timers with (at load).
pub fn install() {
    runtime::set_callbacks(on_timer, on_jobs);
}

unsafe extern "C" fn on_timer(ctx: *mut raw::RedisModuleCtx, _data: *mut c_void) {
    let ctx = Ctx(ctx);
    runtime::timer_fired();
    // Replicas apply their master's effects and never expire on their own;
    // promotion re-arms the timer.
    if ctx.is_replica() {
        return;
    }
    if ctx.is_loading() {
        let (now, _) = ffi::now();
        runtime::arm(ctx, now.saturating_add(100));
        return;
    }
    let (now, _) = ffi::now();
    // Many leases can end at one instant (a million locks taken with one
    // lease): the work is cut into slices of at most ~SLICE, and what is
    // still due then is left to the timer, re-armed at once (0 ms), which
    // fires again after the event loop has served the clients waiting.
    let start = std::time::Instant::now();
    loop {
        let due = runtime::take_due(now);
        if due.is_empty() {
            break;
        }
        for ((deadline, id), (db, key)) in due {
            expire_key(ctx, db, &key, (deadline, id), now);
        }
        if start.elapsed() >= SLICE {
            break;
        }
    }
    runtime::arm_next(ctx);
}

/// Longest run of the expiry timer before it yields to the event loop.
const SLICE: std::time::Duration = std::time::Duration::from_millis(2);

unsafe extern "C" fn on_jobs(ctx: *mut raw::RedisModuleCtx, _data: *mut c_void) {
    let ctx = Ctx(ctx);
    let master = !ctx.is_replica();
    let jobs = runtime::take_jobs();
    // Many connections waiting on one key can close at once (each schedules
    // a prune of the key): prune each key once, at its last prune job, which
    // sees every connection gone before this run.
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
                    if start.elapsed() >= SLICE {
                        left = true;
                        break;
                    }
                }
                if left {
                    runtime::schedule(Job::Flushed(keys));
                }
            }
            Job::PruneAll if master => {
                for (db, key) in runtime::all_keys() {
                    prune_key(ctx, db, &key);
                }
                runtime::arm_next(ctx);
            }
            _ => {}
        }
    }
}
