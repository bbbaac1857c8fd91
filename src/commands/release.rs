//! `DLOCK.RELEASE key owner [READ|WRITE]`, `DLOCK.RENEW key owner [PX lease]`,
//! `DLOCK.FORCERELEASE key`. None is refused under OOM, so locks can always
//! be let go.

use super::{commit, commit_as, tick_due, Effects, Propagate};
use crate::args::{self, arg};
use crate::datatype::{Held, LockKey};
use crate::error;
use crate::ffi::{self, Ctx, RawCtx, RawStr};
use crate::{config, notify, stats};
use dlock_core::Kind;
use std::ffi::c_int;

/// # Safety
/// Called by Redis with a valid context and arguments.
pub unsafe extern "C" fn release_cmd(ctx: RawCtx, argv: *mut RawStr, argc: c_int) -> c_int {
    let ctx = Ctx(ctx);
    // SAFETY: argv/argc are the arguments Redis passed to this command.
    let args = unsafe { ffi::args(argv, argc) };
    if args.len() < 3 {
        return ctx.wrong_arity();
    }
    let permits = match release_permits(args) {
        Ok(p) => p,
        Err(e) => return ctx.reply_error(e),
    };
    if permits.is_none() && args.len() > 4 {
        return ctx.reply_error(error::RELEASE_SYNTAX);
    }
    let owner = match args::owner(arg(args, 2)) {
        Ok(o) => o,
        Err(e) => return ctx.reply_error(e),
    };
    let mode = if args.len() == 4 && permits.is_none() {
        match args::mode(arg(args, 3)) {
            Ok(m) => Some(m),
            Err(e) => return ctx.reply_error(e),
        }
    } else {
        None
    };
    let name = ffi::arg_ptr(args, 1);
    let key = ctx.open(name, true);
    let lock = match key.held() {
        Held::Other => return ctx.reply_error(error::WRONGTYPE),
        Held::Empty => return ctx.reply_error(error::NOTHELD),
        Held::Lock(l) => l,
    };
    // From the master link or the AOF: replay the release alone, without
    // the clock (the master sent it verbatim only when nothing else ended).
    let replay = ctx.is_replay();
    let (changed, mut fx) = if replay {
        (false, Effects::default())
    } else {
        let (now, _) = ffi::now();
        tick_due(lock, now)
    };
    let outcome = match permits {
        Some(k) => lock.release_permits(owner, k),
        None => lock.release(owner, mode),
    };
    match outcome {
        Ok(r) => {
            stats::add(&stats::counter::releases, 1);
            if r.freed {
                fx.notice = Some(notify::RELEASED);
            }
            // (A semaphore's partial release frees permits too.)
            fx.wake |= r.gone || r.freed;
            // Nothing but this release changed the lock, so the command
            // itself is a deterministic effect: replicas and the AOF get it
            // as sent, which costs a fraction of a DLOCK.APPLY.
            let how = if changed {
                Propagate::Effect
            } else {
                Propagate::Verbatim
            };
            commit_as(ctx, &key, name, lock, fx, how);
            ctx.reply_int(i64::from(r.gone))
        }
        Err(e) => {
            if changed {
                commit(ctx, &key, name, lock, fx);
            }
            ctx.reply_error(&error::lock_error_text(e))
        }
    }
}

/// `PERMITS k` after the owner (semaphores): `Some(k)`, `None` when the
/// third argument is not PERMITS, or the error naming what is wrong.
fn release_permits(args: &[RawStr]) -> Result<Option<u32>, error::Msg> {
    if args.len() < 4 || !arg(args, 3).eq_ignore_ascii_case(b"PERMITS") {
        return Ok(None);
    }
    if args.len() == 4 {
        return Err(error::PERMITS_VALUE);
    }
    if args.len() > 5 {
        return Err(if arg(args, 5).eq_ignore_ascii_case(b"PERMITS") {
            error::PERMITS_TWICE
        } else {
            error::RELEASE_SYNTAX
        });
    }
    let k = args::millis(arg(args, 4), 1, error::PERMITS_RANGE)?;
    u32::try_from(k).map(Some).map_err(|_| error::PERMITS_RANGE)
}

/// # Safety
/// Called by Redis with a valid context and arguments.
pub unsafe extern "C" fn renew_cmd(ctx: RawCtx, argv: *mut RawStr, argc: c_int) -> c_int {
    let ctx = Ctx(ctx);
    // SAFETY: argv/argc are the arguments Redis passed to this command.
    let args = unsafe { ffi::args(argv, argc) };
    if args.len() < 3 {
        return ctx.wrong_arity();
    }
    let owner = match args::owner(arg(args, 2)) {
        Ok(o) => o,
        Err(e) => return ctx.reply_error(e),
    };
    let lease = match args::options(args, 3, false) {
        Ok(o) => o.px.unwrap_or_else(config::default_lease_ms),
        Err(e) => return ctx.reply_error(e),
    };
    let name = ffi::arg_ptr(args, 1);
    let key = ctx.open(name, true);
    let lock = match key.held() {
        Held::Other => return ctx.reply_error(error::WRONGTYPE),
        Held::Empty => return ctx.reply_int(0),
        Held::Lock(l) if l.kind() == Kind::Latch => {
            return ctx.reply_error(error::wrong_kind(Kind::Latch))
        }
        Held::Lock(l) => l,
    };
    let (now, _) = ffi::now();
    let (changed, fx) = tick_due(lock, now);
    let renewed = lock.renew(owner, lease, now);
    if renewed {
        stats::add(&stats::counter::renewals, 1);
    }
    if renewed || changed {
        commit(ctx, &key, name, lock, fx);
    }
    ctx.reply_int(i64::from(renewed))
}

/// # Safety
/// Called by Redis with a valid context and arguments.
pub unsafe extern "C" fn forcerelease_cmd(ctx: RawCtx, argv: *mut RawStr, argc: c_int) -> c_int {
    let ctx = Ctx(ctx);
    // SAFETY: argv/argc are the arguments Redis passed to this command.
    let args = unsafe { ffi::args(argv, argc) };
    if args.len() != 2 {
        return ctx.wrong_arity();
    }
    let name = ffi::arg_ptr(args, 1);
    let key = ctx.open(name, true);
    let lock = match key.held() {
        Held::Other => return ctx.reply_error(error::WRONGTYPE),
        Held::Empty => return ctx.reply_int(0),
        Held::Lock(l) if l.kind() == Kind::Latch => {
            stats::add(&stats::counter::force_releases, 1);
            super::latch::force_open(ctx, &key, name, l);
            return ctx.reply_int(1);
        }
        Held::Lock(l) => l,
    };
    let had = lock.force_release();
    stats::add(&stats::counter::force_releases, 1);
    let (now, _) = ffi::now();
    lock.tick_due(now);
    let fx = Effects {
        notice: had.then_some(notify::RELEASED),
        wake: true,
    };
    commit(ctx, &key, name, lock, fx);
    ctx.reply_int(1)
}
