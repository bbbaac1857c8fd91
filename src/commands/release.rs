//! `DLOCK.RELEASE key owner [READ|WRITE | PERMITS k]`,
//! `DLOCK.RENEW key owner [PX lease]`, `DLOCK.FORCERELEASE key`. None is
//! refused under OOM, so locks can always be let go.

use super::args;
use super::{command, latch, open_lock, Outcome, Refused, Reply};
use crate::error;
use crate::ffi::{self, AnyCtx, Args, Ctx};
use crate::services::commit::{commit, commit_as, settle, Effects, Propagate};
use crate::services::notify;
use crate::services::observe;
use crate::{config, stats};
use dlock_core::slowlog::Outcome as Ended;
use dlock_core::Kind;

command!(release_cmd => release);
command!(renew_cmd => renew);
command!(forcerelease_cmd => forcerelease);

fn release(ctx: Ctx<'_>, args: Args<'_>) -> Outcome {
    // One read of the context's flags and of the clock for the whole call.
    let _scope = ctx.call_scope();
    if args.len() < 3 {
        return Err(Refused::Arity);
    }
    let permits = release_permits(args)?;
    if permits.is_none() && args.len() > 4 {
        return Err(error::RELEASE_SYNTAX.into());
    }
    let owner = args::owner(args.get(2))?;
    let mode = if args.len() == 4 && permits.is_none() {
        Some(args::mode(args.get(3))?)
    } else {
        None
    };
    let name = args.string(1).ok_or(Refused::Arity)?;
    let mut g = open_lock(ctx, name, None)?.ok_or(error::NOTHELD)?;
    let lock = g.lock_mut();
    // A replayed RELEASE (replica, AOF) changes holds only, as on the
    // master: it ends nothing by its own clock.
    let replay = ctx.is_replay();
    let (changed, mut fx) = if replay {
        (false, Effects::default())
    } else {
        let (now, _) = ffi::now();
        settle(ctx, name.bytes(), lock, now)
    };
    let hold_mode = match (lock.kind(), permits) {
        (Kind::Semaphore, _) | (_, Some(_)) => None,
        _ => mode,
    };
    let hold = if replay {
        None
    } else {
        observe::hold_before_release(lock, owner, hold_mode)
    };
    let kind = lock.kind();
    let outcome = match permits {
        Some(k) => lock.release_permits(owner, k),
        None => lock.release(owner, mode),
    };
    match outcome {
        Ok(r) => {
            stats::add(&stats::counter::releases, 1);
            if let (true, Some(h)) = (r.gone, &hold) {
                observe::hold_released(ctx, name.bytes(), kind, h);
            }
            if r.freed {
                fx.notice = Some(notify::RELEASED);
            }
            fx.wake |= r.gone || r.freed;
            let how = if changed {
                Propagate::Effect
            } else {
                Propagate::Verbatim
            };
            commit_as(g, fx, how);
            Ok(Reply::Int(i64::from(r.gone)))
        }
        Err(e) => {
            if changed {
                commit(g, fx);
            }
            Err(error::lock_error_text(e).into())
        }
    }
}

/// `PERMITS k` after the owner (semaphores): `Some(k)`, `None` when the
/// third argument is not PERMITS, or the error naming what is wrong.
fn release_permits(args: Args<'_>) -> Result<Option<u32>, error::Msg> {
    if args.len() < 4 || !args.get(3).eq_ignore_ascii_case(b"PERMITS") {
        return Ok(None);
    }
    if args.len() == 4 {
        return Err(error::PERMITS_VALUE);
    }
    if args.len() > 5 {
        return Err(if args.get(5).eq_ignore_ascii_case(b"PERMITS") {
            error::PERMITS_TWICE
        } else {
            error::RELEASE_SYNTAX
        });
    }
    let k = args::millis(args.get(4), 1, error::PERMITS_RANGE)?;
    u32::try_from(k).map(Some).map_err(|_| error::PERMITS_RANGE)
}

fn renew(ctx: Ctx<'_>, args: Args<'_>) -> Outcome {
    let _scope = ctx.call_scope();
    if args.len() < 3 {
        return Err(Refused::Arity);
    }
    let owner = args::owner(args.get(2))?;
    let lease = args::options(args, 3, false)?
        .px
        .unwrap_or_else(config::default_lease_ms);
    let name = args.string(1).ok_or(Refused::Arity)?;
    let Some(mut g) = open_lock(ctx, name, None)? else {
        return Ok(Reply::Int(0));
    };
    if g.lock().kind() == Kind::Latch {
        return Err(error::wrong_kind(Kind::Latch).into());
    }
    let (now, _) = ffi::now();
    let lock = g.lock_mut();
    let (changed, fx) = settle(ctx, name.bytes(), lock, now);
    let renewed = lock.renew(owner, lease, now);
    if renewed {
        stats::add(&stats::counter::renewals, 1);
    }
    if renewed || changed {
        commit(g, fx);
    }
    Ok(Reply::Int(i64::from(renewed)))
}

fn forcerelease(ctx: Ctx<'_>, args: Args<'_>) -> Outcome {
    if args.len() != 2 {
        return Err(Refused::Arity);
    }
    let name = args.string(1).ok_or(Refused::Arity)?;
    let Some(mut g) = open_lock(ctx, name, None)? else {
        return Ok(Reply::Int(0));
    };
    stats::add(&stats::counter::force_releases, 1);
    if g.lock().kind() == Kind::Latch {
        latch::force_open(g);
        return Ok(Reply::Int(1));
    }
    let lock = g.lock_mut();
    observe::holds_ended(ctx, name.bytes(), lock, Ended::Forced, |_| true);
    let had = lock.force_release();
    lock.tick_due(ffi::now().0);
    let fx = Effects {
        notice: had.then_some(notify::RELEASED),
        wake: true,
    };
    commit(g, fx);
    Ok(Reply::Int(1))
}
