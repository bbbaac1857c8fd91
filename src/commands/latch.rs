//! `DLOCK.LATCHSET key count`, `DLOCK.COUNTDOWN key`, `DLOCK.AWAIT key [WAIT ms]`
//!
//! A countdown latch (kind `latch`). AWAIT takes a place of mode `await` in
//! the latch's queue, named by the connection's client id, and waits through
//! the blocking service (`services::blocking`, like every other wait).
//!
//! When the latch opens (COUNTDOWN to 0, FORCERELEASE, or the key deleted)
//! its key is removed — and Redis 7.0 serves blocked clients only of keys
//! that exist — so the waiters are answered directly, in the same pass
//! (`waiters::answer_opened`).

use super::args;
use super::{command, open_lock, Outcome, Refused, Reply};
use crate::error;
use crate::ffi::{self, AnyCtx, Args, Ctx};
use crate::services::blocking;
use crate::services::commit::{commit, live_at, settle_pruning, Effects};
use crate::services::notify;
use crate::services::waiters::{self, Want};
use crate::storage::{self, Guard, Opened};
use crate::{config, stats};
use dlock_core::{codec::MAX_SIZE, Countdown, Kind, Lock, Mode};

command!(latchset_cmd => latchset);
command!(countdown_cmd => countdown);
command!(await_cmd => await_open);

/// Opens the latch in `g` at once (FORCERELEASE): removes it, publishes
/// `released`, answers every waiter 1.
pub fn force_open(mut g: Guard<'_>) {
    let ids = g.lock_mut().open();
    stats::add(&stats::counter::latches_opened, 1);
    let fx = Effects {
        notice: Some(notify::RELEASED),
        wake: false,
    };
    commit(g, fx);
    waiters::answer_opened(&ids);
}

fn latchset(ctx: Ctx<'_>, args: Args<'_>) -> Outcome {
    if args.len() != 3 {
        return Err(Refused::Arity);
    }
    let count = match args::millis(args.get(2), 1, error::COUNT_RANGE) {
        Ok(c) if c <= MAX_SIZE => c,
        _ => return Err(error::COUNT_RANGE.into()),
    };
    let name = args.string(1).ok_or(Refused::Arity)?;
    match storage::open(ctx, name) {
        Opened::Other => Err(error::WRONGTYPE.into()),
        Opened::Lock(g) if g.lock().kind() != Kind::Latch => {
            Err(error::wrong_kind(g.lock().kind()).into())
        }
        Opened::Lock(_) => Ok(Reply::Int(0)),
        Opened::Vacant(v) => {
            let g = v.store(Lock::latch(count)).ok_or(error::OOM_STORE)?;
            commit(g, Effects::default());
            Ok(Reply::Int(1))
        }
    }
}

fn countdown(ctx: Ctx<'_>, args: Args<'_>) -> Outcome {
    if args.len() != 2 {
        return Err(Refused::Arity);
    }
    let name = args.string(1).ok_or(Refused::Arity)?;
    let Some(mut g) = open_lock(ctx, name, Some(Kind::Latch))? else {
        return Ok(Reply::Int(0));
    };
    let (now, _) = ffi::now();
    let lock = g.lock_mut();
    let (_, fx) = settle_pruning(
        ctx,
        name.bytes(),
        lock,
        now,
        live_at(ctx.db(), name.bytes()),
    );
    match lock.countdown().map_err(error::lock_error)? {
        Countdown::Counted(n) => {
            commit(g, Effects { wake: false, ..fx });
            Ok(Reply::Int(i64::try_from(n).unwrap_or(i64::MAX)))
        }
        Countdown::Opened(ids) => {
            stats::add(&stats::counter::latches_opened, 1);
            let fx = Effects {
                notice: Some(notify::RELEASED),
                wake: false,
            };
            commit(g, fx);
            waiters::answer_opened(&ids);
            Ok(Reply::Int(0))
        }
    }
}

/// `[WAIT ms]` of AWAIT.
fn await_wait(args: Args<'_>) -> Result<u64, error::Msg> {
    let mut wait = None;
    let mut i = 2;
    while i < args.len() {
        if !args.get(i).eq_ignore_ascii_case(b"WAIT") {
            return Err(error::AWAIT_OPTION);
        }
        if wait.is_some() {
            return Err(error::WAIT_TWICE);
        }
        if i + 1 >= args.len() {
            return Err(error::WAIT_VALUE);
        }
        wait = Some(args::millis(args.get(i + 1), 0, error::WAIT_RANGE)?);
        i += 2;
    }
    Ok(wait.unwrap_or(0))
}

fn await_open(ctx: Ctx<'_>, args: Args<'_>) -> Outcome {
    if args.len() < 2 {
        return Err(Refused::Arity);
    }
    let wait = await_wait(args)?;
    let name = args.string(1).ok_or(Refused::Arity)?;
    let Some(mut g) = open_lock(ctx, name, Some(Kind::Latch))? else {
        // No latch: open.
        return Ok(Reply::Int(1));
    };
    if wait == 0 || ctx.deny_blocking() {
        return Ok(Reply::Null);
    }
    // Waiting takes a queue place: refused under maxmemory, as a deny-oom
    // command is (AWAIT itself is not deny-oom, so that a look at a latch
    // always works).
    if ctx.is_oom() {
        return Err(error::OOM_WAIT.into());
    }
    let (now, _) = ffi::now();
    let deadline = now.saturating_add(wait);
    let id = waiters::new_id();
    let lock = g.lock_mut();
    let (changed, fx) = settle_pruning(
        ctx,
        name.bytes(),
        lock,
        now,
        live_at(ctx.db(), name.bytes()),
    );
    let conn = ctx.client_id().to_string();
    if let Err(e) = lock.check_room(conn.as_bytes(), Mode::Await, true, config::max_queue()) {
        if changed {
            commit(g, fx);
        }
        return Err(error::lock_error_text(e).into());
    }
    lock.enqueue_await(conn.as_bytes(), id, deadline);
    lock.stamp_wait(id, now);
    commit(g, Effects { wake: false, ..fx });
    blocking::block(ctx, name, id, wait, deadline, Want::Open);
    Ok(Reply::Done)
}
