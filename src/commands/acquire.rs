//! `DLOCK.ACQUIRE key owner [PX lease] [WAIT ms] [BIND] [LOCKDELAY ms]`
//! `DLOCK.RWACQUIRE key owner READ|WRITE [PX lease] [WAIT ms] [BIND] [LOCKDELAY ms]`
//! `DLOCK.FAIRACQUIRE key owner [PX lease] [WAIT ms] [BIND] [LOCKDELAY ms]`
//!
//! Reply: the fencing token on grant, nil when not granted within WAIT. A
//! request that cannot be granted and may wait is queued and its connection
//! blocked by `services::blocking`, which serves it on the server side when
//! the lock changes hands. `DLOCK.SEMACQUIRE` (semaphore.rs) takes the same
//! path ([`acquire`]) with its own parsing.

use super::args;
use super::{command, Outcome, Refused, Reply};
use crate::config;
use crate::error;
use crate::ffi::{self, AnyCtx, Args, Ctx, RStr};
use crate::services::blocking::{self, Ask, Want};
use crate::services::commit::{self, commit, settle, Effects};
use crate::services::deadlock;
use crate::storage::Slot;
use dlock_core::{Grant, Kind, Mode};

command!(acquire_cmd => acquire_mutex);
command!(rwacquire_cmd => acquire_rw);
command!(fairacquire_cmd => acquire_fair);

fn acquire_mutex(ctx: Ctx<'_>, args: Args<'_>) -> Outcome {
    run(ctx, args, Kind::Mutex)
}

fn acquire_rw(ctx: Ctx<'_>, args: Args<'_>) -> Outcome {
    run(ctx, args, Kind::Rw)
}

fn acquire_fair(ctx: Ctx<'_>, args: Args<'_>) -> Outcome {
    run(ctx, args, Kind::Fair)
}

fn parse(args: Args<'_>, kind: Kind) -> Result<(Ask, u64), Refused> {
    let owner = args::owner(args.get(2))?;
    let (mode, rest) = match kind {
        Kind::Rw => {
            if args.len() < 4 {
                return Err(error::MODE_MISSING.into());
            }
            (args::mode(args.get(3))?, 4)
        }
        _ => (Mode::Exclusive, 3),
    };
    let o = args::options(args, rest, true)?;
    let ask = Ask {
        kind,
        owner: owner.into(),
        mode,
        lease: o.px.unwrap_or_else(config::default_lease_ms),
        permits: 1,
        limit: 0,
        bind: o.bind,
        lock_delay: o.lock_delay.unwrap_or(0),
    };
    Ok((ask, o.wait.unwrap_or(0)))
}

fn run(ctx: Ctx<'_>, args: Args<'_>, kind: Kind) -> Outcome {
    if args.len() < 3 {
        return Err(Refused::Arity);
    }
    let (ask, wait) = parse(args, kind)?;
    let name = args.string(1).ok_or(Refused::Arity)?;
    acquire(ctx, name, ask, wait)
}

/// Commits a change to a lock that was stored before.
fn commit_if(slot: Slot<'_>, changed: bool, fx: Effects) {
    if let (true, Some(g)) = (changed, slot.stored()) {
        commit(g, fx);
    }
}

/// Acquires `ask` at `name`: grant now, queue and block for up to `wait`
/// ms, or reply nil. The one acquire path of every kind but the latch.
pub fn acquire(ctx: Ctx<'_>, name: RStr<'_>, ask: Ask, wait: u64) -> Outcome {
    // One read of the context's flags and of the clock for the whole call.
    let _scope = ctx.call_scope();
    if ask.bind && ctx.in_script() {
        return Err(error::BIND_IN_SCRIPT.into());
    }
    let mut slot =
        Slot::open(ctx, name, || commit::fresh(ask.kind, ask.limit)).ok_or(error::WRONGTYPE)?;
    let (now, now_us) = ffi::now();
    let lock = slot.lock_mut();
    if ask.kind == Kind::Semaphore {
        lock.check_limit(ask.limit)
            .map_err(error::lock_error_text)?;
    } else if lock.kind() != ask.kind {
        return Err(error::wrong_kind(lock.kind()).into());
    }
    let (changed, mut fx) = settle(ctx, name.bytes(), lock, now);
    match blocking::attempt(&ask, None, lock, now, now_us) {
        Err(e) => {
            commit_if(slot, changed, fx);
            Err(error::lock_error_text(e).into())
        }
        Ok(Grant::Granted { token, reentrant }) => {
            commit::count_grant(reentrant, false);
            if !reentrant {
                let hold = (&*ask.owner, ask.mode, ask.bind, ask.lock_delay);
                commit::new_hold(ctx, ctx.client_id(), name.bytes(), lock, hold);
            }
            commit(slot.store().ok_or(error::OOM_STORE)?, fx);
            Ok(Reply::Int(token as i64))
        }
        Ok(Grant::Denied) => {
            let block = wait > 0 && !ctx.deny_blocking();
            let fair_queue = !block && ask.kind == Kind::Fair;
            if block || fair_queue {
                if let Err(e) = lock.check_room(&ask.owner, ask.mode, block, config::max_queue()) {
                    commit_if(slot, changed, fx);
                    return Err(error::lock_error_text(e).into());
                }
            }
            if fair_queue {
                // A fair-lock owner that does not wait keeps a place it must
                // claim within dlock.fair-queue-timeout-ms.
                let id = blocking::new_id();
                let deadline = now.saturating_add(config::fair_queue_timeout_ms());
                lock.enqueue(&ask.owner, ask.mode, id, false, deadline);
                lock.stamp_wait(id, now);
                commit(slot.store().ok_or(error::OOM_STORE)?, fx);
                return Ok(Reply::Null);
            }
            if !block {
                commit_if(slot, changed, fx);
                return Ok(Reply::Null);
            }
            // A wait that would close a wait-for cycle is refused at once;
            // nothing is queued, the owner's other holds stay.
            if let Err(text) = deadlock::check_wait(ctx, name.bytes(), lock, &ask) {
                commit_if(slot, changed, fx);
                return Err(text.into());
            }
            let id = blocking::new_id();
            let deadline = now.saturating_add(wait);
            blocking::enqueue(lock, &ask, id, deadline);
            // No handoff inside this commit: it could serve this request's
            // own place before its connection is blocked. But what time
            // ended just now (a lease, a lock-delay whose timer has not
            // fired yet) may have made earlier waiters grantable: the key
            // is signalled once this connection is blocked, and the ready
            // callbacks serve them in order (found by the simulator).
            let woke = fx.wake;
            fx.wake = false;
            commit(slot.store().ok_or(error::OOM_STORE)?, fx);
            blocking::block(ctx, name, id, wait, deadline, Want::Grant(ask));
            if woke {
                ctx.signal_ready(name);
            }
            Ok(Reply::Done)
        }
    }
}
