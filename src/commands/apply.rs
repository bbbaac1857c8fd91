//! `DLOCK.APPLY key payload` — internal: what replicas and the AOF receive
//! instead of a re-execution. Sets the whole state of the lock at `key` from
//! a payload of [`dlock_core::codec`] (absolute times, tokens); an empty
//! payload deletes the lock. Payloads are validated like RESTORE payloads.
//! Refused unless it comes from the master link or AOF loading (or the
//! load-time config `dlock.apply-from-clients yes` allows clients, for tests).

use crate::datatype::{Held, LockKey};
use crate::error;
use crate::ffi::{self, Ctx, RawCtx, RawStr};
use crate::runtime;
use dlock_core::codec;
use std::ffi::c_int;

/// # Safety
/// Called by Redis with a valid context and arguments.
pub unsafe extern "C" fn apply_cmd(ctx: RawCtx, argv: *mut RawStr, argc: c_int) -> c_int {
    let ctx = Ctx(ctx);
    // SAFETY: argv/argc are the arguments Redis passed to this command.
    let args = unsafe { ffi::args(argv, argc) };
    if args.len() != 3 {
        return ctx.wrong_arity();
    }
    // Only the master link and AOF loading may set state: a payload from a
    // client could forge tokens (a floor of 2^63-1 would end every grant).
    if !ctx.is_replay() && !crate::config::apply_from_clients() {
        return ctx.reply_error(error::APPLY_CLIENT);
    }
    let name = ffi::arg_ptr(args, 1);
    // SAFETY: a command argument, live for the whole call.
    let payload = unsafe { ffi::bytes(ffi::arg_ptr(args, 2)) };
    if codec::is_delta(payload) {
        return apply_delta(ctx, name, payload);
    }
    let decoded = if payload.is_empty() {
        None
    } else {
        match codec::decode(payload) {
            Ok(d) => Some(d),
            Err(e) => return ctx.reply_error(&error::bad_payload(e.0)),
        }
    };
    runtime::changed();
    let key = ctx.open(name, true);
    let held = key.held();
    if let Held::Other = held {
        return ctx.reply_error(error::WRONGTYPE);
    }
    match (held, decoded) {
        (Held::Lock(_), None) => key.delete(),
        (_, None) => {}
        (held, Some((mut lock, floor))) => {
            runtime::observe_token(floor.max(lock.last_token()));
            let stored = match held {
                Held::Lock(existing) => {
                    lock.keep_bookkeeping(existing);
                    *existing = lock;
                    Some(existing)
                }
                _ => {
                    if !key.set(lock) {
                        return ctx.reply_error(error::OOM_STORE);
                    }
                    match key.held() {
                        Held::Lock(l) => Some(l),
                        _ => None,
                    }
                }
            };
            if let Some(l) = stored {
                after_apply(ctx, name, l);
            }
        }
    }
    ctx.replicate_verbatim();
    ctx.reply_ok()
}

/// A delta payload (the change of one lock's queue since the state this
/// server has, and the rest of its state): applied to the lock at `name`
/// in place, all or nothing. No lock there, or one of another kind, or a
/// delta that does not fit it: an error reply, and nothing changes.
fn apply_delta(ctx: Ctx, name: RawStr, payload: &[u8]) -> c_int {
    let delta = match codec::decode_delta(payload) {
        Ok(d) => d,
        Err(e) => return ctx.reply_error(&error::bad_payload(e.0)),
    };
    runtime::changed();
    let key = ctx.open(name, true);
    let lock = match key.held() {
        Held::Other => return ctx.reply_error(error::WRONGTYPE),
        Held::Empty => return ctx.reply_error(error::DELTA_NO_LOCK),
        Held::Lock(l) => l,
    };
    match lock.apply_delta(delta) {
        Ok(floor) => runtime::observe_token(floor.max(lock.last_token())),
        Err(e) => return ctx.reply_error(&error::bad_payload(e.0)),
    }
    after_apply(ctx, name, lock);
    ctx.replicate_verbatim();
    ctx.reply_ok()
}

/// The bookkeeping after a lock was set from a payload: gauges, the expiry
/// index, and on a master waiters that name no connection here.
fn after_apply(ctx: Ctx, name: RawStr, l: &mut dlock_core::Lock) {
    crate::stats::account_waiters(l);
    // SAFETY: the key name is a command argument, live for the whole call.
    runtime::reindex(ctx, ctx.db(), unsafe { ffi::bytes(name) }, l);
    if !ctx.is_replica() && !ctx.is_loading() && l.has_blocked() {
        // Waiters in the payload may name no connection here.
        // SAFETY: the key name is a command argument, live for the whole call.
        runtime::schedule(runtime::Job::Prune(
            ctx.db(),
            unsafe { ffi::bytes(name) }.into(),
        ));
        ctx.signal_ready(name);
    }
}
