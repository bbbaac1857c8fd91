//! `DLOCK.CANCEL key owner`: gives up every place `owner` has in the queue
//! of `key` — a fair-queue place kept between polls, and every wait of that
//! owner blocked on the server, on any connection (answered nil at once).
//! Holds are not touched. Reply: the number of places given up (0 when
//! none, and for a missing key).
//!
//! The change is committed like any other: the next places in line that
//! are now grantable are served at once (handoff), the new state reaches
//! replicas and the AOF as its effect (`DLOCK.APPLY`), and, when a place
//! went and the lock is not held exclusively, `released` is published so
//! that owners polling for the lock try again.

use super::args;
use super::{command, open_lock, Outcome, Refused, Reply};
use crate::error;
use crate::ffi::{self, Args, Ctx};
use crate::services::blocking::{self, HandOver};
use crate::services::commit::{commit, settle};
use crate::services::notify;
use crate::stats;
use dlock_core::Kind;

command!(cancel_cmd => cancel);

fn cancel(ctx: Ctx<'_>, args: Args<'_>) -> Outcome {
    let _scope = ctx.call_scope();
    if args.len() != 3 {
        return Err(Refused::Arity);
    }
    let owner = args::owner(args.get(2))?;
    let name = args.string(1).ok_or(Refused::Arity)?;
    let Some(mut g) = open_lock(ctx, name, None)? else {
        return Ok(Reply::Int(0));
    };
    // A latch's waits are connections, not owners: CANCEL is for locks.
    if g.lock().kind() == Kind::Latch {
        return Err(error::wrong_kind(Kind::Latch).into());
    }
    let (now, _) = ffi::now();
    let lock = g.lock_mut();
    let (changed, mut fx) = settle(ctx, name.bytes(), lock, now);
    let ids: Vec<u64> = lock
        .waiters()
        .iter()
        .filter(|w| *w.owner == *owner)
        .map(|w| w.id)
        .collect();
    if ids.is_empty() {
        if changed {
            commit(g, fx);
        }
        return Ok(Reply::Int(0));
    }
    // The connections that wait as these places are answered nil once the
    // change is committed (their callbacks only reply).
    let mut cancelled = HandOver::default();
    blocking::answer_cancelled(&mut cancelled, &ids);
    for id in &ids {
        lock.remove_waiter(*id);
    }
    fx.wake = true;
    if lock.exclusive_owner().is_none() {
        fx.notice = fx.notice.or(Some(notify::RELEASED));
    }
    stats::add(&stats::counter::places_cancelled, ids.len() as u64);
    commit(g, fx);
    cancelled.unblock();
    Ok(Reply::Int(ids.len() as i64))
}
