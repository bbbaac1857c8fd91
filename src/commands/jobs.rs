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
    for ((deadline, id), (db, key)) in runtime::take_due(now) {
        expire_key(ctx, db, &key, (deadline, id), now);
    }
    runtime::arm_next(ctx);
}

unsafe extern "C" fn on_jobs(ctx: *mut raw::RedisModuleCtx, _data: *mut c_void) {
    let ctx = Ctx(ctx);
    let master = !ctx.is_replica();
    for job in runtime::take_jobs() {
        match job {
            Job::Prune(db, key) if master => prune_key(ctx, db, &key),
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
