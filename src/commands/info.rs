//! `DLOCK.INFO key`: nil when no lock exists; otherwise a map (a flat
//! field/value array in RESP2): `kind`, `token`, `holders`, `waiters`.
//! Each holder: `owner`, `mode`, `count`, `token`, `ttl` (remaining ms),
//! `expires_at` (unix ms), and `bound` (BIND) and `lockdelay` / `delayed`
//! (LOCKDELAY) on holds that use them. Each waiter: `owner`, `mode`, `state`
//! (`blocked`: waits on the server; `queued`: a fair-lock place kept for an
//! owner that polls), `ttl`, `expires_at`. A semaphore adds `limit` and
//! `available` after `token`, and `permits` to each holder and waiter; a
//! latch adds `count` (its waiters are the connections in AWAIT, named by
//! client id, mode `await`). Each holder also has `held_ms` (since the hold
//! was first granted; -1 when unknown: a hold loaded from a payload of an
//! older version), each waiter `waited_ms` (since the place was taken; -1
//! when unknown), `position` (0-based) and `blocked_by` (the owners that
//! must let go or be served first: `Lock::blocked_by`, the core's rule;
//! at most the first 64) and `blocked_by_count` (how many there are in all).
//! Read-only: works on replicas and
//! shows the state as replicated, without expiring anything itself; but
//! the state as of now (`commit::as_of`): a hold whose lease (or
//! lock-delay) has ended, or whose `BIND` connection closed, is not
//! listed even while its timer or job has not run yet, and a lock with
//! nothing left answers nil, as a key past its TTL reads as gone.

use super::{command, Outcome, Refused, Reply};
use crate::error;
use crate::ffi::{self, Args, Ctx};
use crate::services::commit::as_of;
use crate::storage;
use dlock_core::Delayed;

command!(info_cmd => info);

/// Most `blocked_by` names INFO lists per waiter.
const BLOCKED_BY_MAX: usize = 64;

fn info(ctx: Ctx<'_>, args: Args<'_>) -> Outcome {
    if args.len() != 2 {
        return Err(Refused::Arity);
    }
    let name = args.string(1).ok_or(Refused::Arity)?;
    let g = match storage::read(ctx, name) {
        Err(()) => return Err(error::WRONGTYPE.into()),
        Ok(None) => return Ok(Reply::Null),
        Ok(Some(g)) => g,
    };
    let (now, _) = ffi::now();
    let stored = g.get().lock();
    // As of now: a hold whose lease ended or whose bound connection closed
    // is not listed, even before the timer or job that removes it has run
    // (CHECK and ACQUIRE see the same); nothing left is no lock.
    let lock = &*as_of(ctx, name.bytes(), &stored, now);
    if lock.is_empty() {
        return Ok(Reply::Null);
    }
    let ttl = |at: u64| at.saturating_sub(now) as i64;
    // Time since an instant (-1: unknown).
    let since = |at: u64| {
        if at == 0 {
            -1
        } else {
            i64::try_from(now.saturating_sub(at)).unwrap_or(i64::MAX)
        }
    };
    let limit = lock.limit();
    let count = lock.latch_count();
    let extra = if limit.is_some() {
        2
    } else {
        usize::from(count.is_some())
    };
    let per = usize::from(limit.is_some());
    ctx.reply_map(4 + extra);
    ctx.reply_str("kind");
    ctx.reply_str(lock.kind().name());
    ctx.reply_str("token");
    ctx.reply_int(lock.last_token() as i64);
    if let Some(limit) = limit {
        ctx.reply_str("limit");
        ctx.reply_int(i64::try_from(limit).unwrap_or(i64::MAX));
        ctx.reply_str("available");
        ctx.reply_int(i64::try_from(lock.available()).unwrap_or(i64::MAX));
    }
    if let Some(count) = count {
        ctx.reply_str("count");
        ctx.reply_int(i64::try_from(count).unwrap_or(i64::MAX));
    }
    ctx.reply_str("holders");
    ctx.reply_array(lock.holders().len());
    for h in lock.holders() {
        // BIND and LOCKDELAY fields appear only on holds that use them.
        let bound = h.bound != 0;
        let delay = h.delay_ms > 0;
        ctx.reply_map(7 + per + usize::from(bound) + 2 * usize::from(delay));
        ctx.reply_str("owner");
        ctx.reply_bulk(&h.owner);
        if per == 1 {
            ctx.reply_str("permits");
            ctx.reply_int(i64::from(h.count));
        }
        ctx.reply_str("mode");
        ctx.reply_str(h.mode.name());
        ctx.reply_str("count");
        ctx.reply_int(i64::from(h.count));
        ctx.reply_str("token");
        ctx.reply_int(h.token as i64);
        ctx.reply_str("ttl");
        ctx.reply_int(ttl(h.expires_at));
        ctx.reply_str("expires_at");
        ctx.reply_int(h.expires_at as i64);
        ctx.reply_str("held_ms");
        ctx.reply_int(since(h.granted_at));
        if bound {
            ctx.reply_str("bound");
            ctx.reply_int(1);
        }
        if delay {
            ctx.reply_str("lockdelay");
            ctx.reply_int(h.delay_ms as i64);
            // "no": a live hold; otherwise how it ended, and ttl/expires_at
            // are the end of its lock-delay.
            ctx.reply_str("delayed");
            ctx.reply_str(match h.delayed {
                Delayed::No => "no",
                Delayed::Expired => "expired",
                Delayed::Disconnected => "disconnected",
            });
        }
    }
    ctx.reply_str("waiters");
    ctx.reply_array(lock.waiters().len());
    for (position, w) in lock.waiters().iter().enumerate() {
        ctx.reply_map(9 + per);
        ctx.reply_str("owner");
        ctx.reply_bulk(&w.owner);
        if per == 1 {
            ctx.reply_str("permits");
            ctx.reply_int(i64::from(w.permits));
        }
        ctx.reply_str("mode");
        ctx.reply_str(w.mode.name());
        ctx.reply_str("state");
        ctx.reply_str(if w.blocked { "blocked" } else { "queued" });
        ctx.reply_str("ttl");
        ctx.reply_int(ttl(w.expires_at));
        ctx.reply_str("expires_at");
        ctx.reply_int(w.expires_at as i64);
        ctx.reply_str("waited_ms");
        ctx.reply_int(since(w.since));
        ctx.reply_str("position");
        ctx.reply_int(i64::try_from(position).unwrap_or(i64::MAX));
        ctx.reply_str("blocked_by");
        // At most BLOCKED_BY_MAX names: behind n places the list has n + holders
        // names, and INFO of a long queue must stay a small reply.
        let by = lock.blocked_by(position);
        let shown = by.len().min(BLOCKED_BY_MAX);
        ctx.reply_array(shown);
        let all = by.len();
        for o in by.into_iter().take(shown) {
            ctx.reply_bulk(o);
        }
        // How many there are in all (SPEC: the first 64 are listed).
        ctx.reply_str("blocked_by_count");
        ctx.reply_int(i64::try_from(all).unwrap_or(i64::MAX));
    }
    Ok(Reply::Done)
}
