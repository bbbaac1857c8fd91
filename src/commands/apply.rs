//! `DLOCK.APPLY key payload` — internal: what replicas and the AOF receive
//! instead of a re-execution. Sets the whole state of the lock at `key` from
//! a payload of [`dlock_core::codec`] (absolute times, tokens); an empty
//! payload deletes the lock. A delta payload (`codec::is_delta`) edits the
//! queue of the lock in place. Payloads are validated like RESTORE payloads.
//! Refused unless it comes from the master link or AOF loading (or the
//! load-time config `dlock.apply-from-clients yes` allows clients, for tests).

use super::{command, Outcome, Refused, Reply};
use crate::ffi::{AnyCtx, Args, Ctx};
use crate::services::jobq::{self, Job};
use crate::services::{expiry_index, hint};
use crate::storage::{self, tokens, Guard, Opened};
use crate::{config, error};
use dlock_core::codec;

command!(apply_cmd => apply);

fn apply(ctx: Ctx<'_>, args: Args<'_>) -> Outcome {
    if args.len() != 3 {
        return Err(Refused::Arity);
    }
    if !ctx.is_replay() && !config::apply_from_clients() {
        return Err(error::APPLY_CLIENT.into());
    }
    let name = args.string(1).ok_or(Refused::Arity)?;
    let payload = args.get(2);
    if codec::is_delta(payload) {
        return apply_delta(ctx, args);
    }
    if codec::is_floor(payload) {
        // Floor-only (sent after a promotion): raises the token counter,
        // touches no key.
        let floor = codec::decode_floor(payload).map_err(|e| error::bad_payload(e.0))?;
        tokens::observe(floor);
        ctx.replicate_verbatim();
        return Ok(Reply::Ok);
    }
    let decoded = if payload.is_empty() {
        None
    } else {
        Some(codec::decode(payload).map_err(|e| error::bad_payload(e.0))?)
    };
    hint::changed();
    let opened = storage::open(ctx, name);
    match (opened, decoded) {
        (Opened::Other, _) => return Err(error::WRONGTYPE.into()),
        (Opened::Lock(g), None) => g.delete(),
        (Opened::Vacant(_), None) => {}
        (Opened::Lock(mut g), Some((lock, floor))) => {
            tokens::observe(floor.max(lock.last_token()));
            // Replaced in place: the key keeps its expiry-index entry and
            // gauge count, brought in step below.
            *g.lock_mut() = lock;
            after_apply(ctx, g);
        }
        (Opened::Vacant(v), Some((lock, floor))) => {
            tokens::observe(floor.max(lock.last_token()));
            let g = v.store(lock).ok_or(error::OOM_STORE)?;
            after_apply(ctx, g);
        }
    }
    ctx.replicate_verbatim();
    Ok(Reply::Ok)
}

fn apply_delta(ctx: Ctx<'_>, args: Args<'_>) -> Outcome {
    let name = args.string(1).ok_or(Refused::Arity)?;
    let delta = codec::decode_delta(args.get(2)).map_err(|e| error::bad_payload(e.0))?;
    hint::changed();
    let mut g = match storage::open(ctx, name) {
        Opened::Other => return Err(error::WRONGTYPE.into()),
        Opened::Vacant(_) => return Err(error::DELTA_NO_LOCK.into()),
        Opened::Lock(g) => g,
    };
    let lock = g.lock_mut();
    let floor = lock
        .apply_delta(delta)
        .map_err(|e| error::bad_payload(e.0))?;
    tokens::observe(floor.max(lock.last_token()));
    after_apply(ctx, g);
    ctx.replicate_verbatim();
    Ok(Reply::Ok)
}

/// After a lock was set from a payload: the waiters gauge and the expiry
/// index; on a master (`apply-from-clients`), its waiters named by the
/// payload may be gone: prune them and let the live ones look again.
fn after_apply(ctx: Ctx<'_>, mut g: Guard<'_>) {
    let key = g.key_bytes();
    let stored = g.get();
    stored.account_waiters();
    expiry_index::reindex(ctx, ctx.db(), key, stored);
    expiry_index::note_arrived(ctx, ctx.db(), key, stored);
    if !ctx.is_replica() && !ctx.is_loading() && stored.lock().has_blocked() {
        jobq::schedule(Job::Prune(ctx.db(), key.into()));
        ctx.signal_ready(g.name());
    }
}
