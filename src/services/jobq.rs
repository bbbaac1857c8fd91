//! The job queue: work that cannot be done where it is noticed (no
//! context, or writes not allowed there — keyspace callbacks on Redis 7.0,
//! the unlink hook, free callbacks) is queued here as data ([`Job`]), and a
//! 0 ms timer is armed whose callback, the job runner (`jobs`, installed at
//! load with [`set_runner`]), runs it on the main thread.

use super::expiry_index::Flushed;
use super::state;
use super::state::DbKey;
use crate::ffi::{AnyCtx, DetachedCtx, TimerFn};
use std::cell::{Cell, RefCell};

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
    /// Waits on the key ended while clients were paused (answered nil
    /// then, noted in `waiters::note_ended`): their places go.
    WaitEnded(i32, Box<[u8]>),
    /// Signal the key again: a ready callback ran while clients were
    /// paused and served no one.
    Signal(i32, Box<[u8]>),
    /// Record the holds of lock values that left their keys for good as
    /// ended (`deleted`); see `observe::holds_unlinked`.
    Unlinked,
}

#[derive(Default)]
struct Jobs {
    queue: Vec<Job>,
    armed: bool,
    /// A [`Job::PruneAll`] is queued: see [`prune_all_pending`].
    prune_all: bool,
}

thread_local! {
    static JOBS: RefCell<Jobs> = RefCell::new(Jobs::default());
    /// The module's detached context (see [`set_detached`]): it arms
    /// timers and publishes, and cannot open keys.
    static DETACHED: Cell<Option<DetachedCtx>> = const { Cell::new(None) };
    /// The job timer's callback (the job runner's, `jobs`), set at load.
    static RUNNER: Cell<Option<TimerFn>> = const { Cell::new(None) };
}

/// Installs the job timer's callback (once, at load, by the job runner):
/// what [`schedule`] hands the timer it creates.
pub fn set_runner(on: TimerFn) {
    RUNNER.with(|c| c.set(Some(on)));
}

/// Keeps the module's detached context, for creating timers where Redis
/// gives no context (the unlink hook, next-turn callbacks). Set once at
/// load.
pub fn set_detached(ctx: DetachedCtx) {
    DETACHED.with(|d| d.set(Some(ctx)));
}

/// The module's detached context (None before load finished).
pub fn detached() -> Option<DetachedCtx> {
    DETACHED.try_with(Cell::get).ok().flatten()
}

/// Queues `job` and makes sure the job timer runs soon.
pub fn schedule(job: Job) {
    let arm = state::with(&JOBS, |j| {
        j.prune_all |= matches!(job, Job::PruneAll);
        j.queue.push(job);
        !std::mem::replace(&mut j.armed, true)
    });
    if arm == Some(true) {
        let Some(ctx) = detached() else { return };
        let Some(on_jobs) = RUNNER.try_with(Cell::get).ok().flatten() else {
            return;
        };
        ctx.create_timer(0, on_jobs);
    }
}

/// The job timer fired while the jobs must wait (clients are paused: see
/// `pause`): it fires again in `ms`, and the queue is kept.
pub fn run_again_in(ctx: impl AnyCtx, ms: u64) {
    let Some(on_jobs) = RUNNER.try_with(Cell::get).ok().flatten() else {
        return;
    };
    ctx.create_timer(ms, on_jobs);
}

/// SWAPDB `a` `b`: the bound holds a queued [`Job::Unbind`] is to end went
/// with their locks to the other db (the job's keys were taken when the
/// connection closed), so its keys follow them.
pub fn swap_unbind_dbs(a: i32, b: i32) {
    state::with(&JOBS, |j| {
        for job in j.queue.iter_mut() {
            if let Job::Unbind(_, keys) = job {
                for (d, _) in keys.iter_mut() {
                    *d = super::state::swapped_db(*d, a, b);
                }
            }
        }
    });
}

/// Takes the queued jobs, to run them: the job timer fired.
pub fn take_jobs() -> Vec<Job> {
    state::with(&JOBS, |j| {
        j.armed = false;
        j.prune_all = false;
        std::mem::take(&mut j.queue)
    })
    .unwrap_or_default()
}

/// Whether a [`Job::PruneAll`] (after a promotion or a load) has not run
/// yet. Until it runs, every place in a lock may be of a connection this
/// server never had (the old master's, a previous process's), and a lock
/// whose only deadlines are such places is not in the expiry index that the
/// job walks: a command reaching it first drops those places itself
/// (`commit::settle`), or the one it queues stays behind a dead head.
pub fn prune_all_pending() -> bool {
    state::with(&JOBS, |j| j.prune_all).unwrap_or(false)
}
