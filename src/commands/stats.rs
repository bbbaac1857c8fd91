//! `DLOCK.STATS [RESET]` and `DLOCK.SLOWLOG GET [n] | LEN | RESET`: the wait
//! and hold times that `services::observe` collects.
//!
//! STATS replies, for each kind (`mutex`, `rw`, `fair`, `semaphore`,
//! `latch`), a map of `waits` and `holds`, each an array of
//! `[upper-bound-µs, count]` for its non-empty buckets (bounds at most
//! 1/16 apart: `dlock_core::histogram`). SLOWLOG GET replies its entries
//! newest first, each an array: id, unix ms when it ended, `wait` or
//! `hold`, key, owner, kind, mode, duration ms, outcome, and the
//! `blocked_by` owners when the wait began (empty for a hold).

use super::{command, Outcome, Refused, Reply};
use crate::error;
use crate::ffi::{Args, Ctx};
use crate::services::observe::{self, KINDS};
use dlock_core::histogram::Histogram;

command!(stats_cmd => stats);
command!(slowlog_cmd => slowlog);

/// SLOWLOG GET's default count (as Redis' SLOWLOG GET).
const GET_DEFAULT: usize = 10;

fn reply_histogram(ctx: Ctx<'_>, h: &Histogram) {
    let n = h.buckets().count();
    ctx.reply_array(n);
    for (bound, count) in h.buckets() {
        ctx.reply_array(2);
        ctx.reply_int(i64::try_from(bound).unwrap_or(i64::MAX));
        ctx.reply_int(i64::try_from(count).unwrap_or(i64::MAX));
    }
}

fn stats(ctx: Ctx<'_>, args: Args<'_>) -> Outcome {
    match args.len() {
        1 => {}
        2 if args.get(1).eq_ignore_ascii_case(b"RESET") => {
            observe::reset_stats();
            return Ok(Reply::Ok);
        }
        2 => return Err(error::STATS_SYNTAX.into()),
        _ => return Err(Refused::Arity),
    }
    // Copied out first: no module call while the state is borrowed.
    let kinds: Vec<(Histogram, Histogram)> = observe::with_stats(|k| {
        k.iter()
            .map(|s| (s.waits.clone(), s.holds.clone()))
            .collect()
    })
    .unwrap_or_default();
    ctx.reply_map(kinds.len());
    for (kind, (waits, holds)) in KINDS.iter().zip(kinds.iter()) {
        ctx.reply_str(kind.name());
        ctx.reply_map(2);
        ctx.reply_str("waits");
        reply_histogram(ctx, waits);
        ctx.reply_str("holds");
        reply_histogram(ctx, holds);
    }
    Ok(Reply::Done)
}

/// SLOWLOG GET's count: -1 (all) or 0..=i32::MAX.
fn count(b: &[u8]) -> Result<usize, Refused> {
    let v = std::str::from_utf8(b)
        .ok()
        .and_then(|s| s.parse::<i64>().ok())
        .filter(|v| (-1..=i64::from(i32::MAX)).contains(v))
        .ok_or(error::SLOWLOG_COUNT)?;
    Ok(usize::try_from(v).unwrap_or(usize::MAX))
}

fn slowlog(ctx: Ctx<'_>, args: Args<'_>) -> Outcome {
    if args.len() < 2 {
        return Err(Refused::Arity);
    }
    let sub = args.get(1);
    let is = |s: &[u8]| sub.eq_ignore_ascii_case(s);
    if is(b"LEN") && args.len() == 2 {
        let n = observe::with_slowlog(|l| l.len()).unwrap_or(0);
        return Ok(Reply::Int(i64::try_from(n).unwrap_or(i64::MAX)));
    }
    if is(b"RESET") && args.len() == 2 {
        observe::reset_slowlog();
        return Ok(Reply::Ok);
    }
    if !is(b"GET") || args.len() > 3 {
        return Err(error::SLOWLOG_SYNTAX.into());
    }
    let n = if args.len() == 3 {
        count(args.get(2))?
    } else {
        GET_DEFAULT
    };
    let entries: Vec<dlock_core::slowlog::Entry> =
        observe::with_slowlog(|l| l.newest(n).cloned().collect()).unwrap_or_default();
    ctx.reply_array(entries.len());
    for e in &entries {
        ctx.reply_array(10);
        ctx.reply_int(i64::try_from(e.id).unwrap_or(i64::MAX));
        ctx.reply_int(i64::try_from(e.ended_ms).unwrap_or(i64::MAX));
        ctx.reply_str(e.phase.name());
        ctx.reply_bulk(&e.key);
        ctx.reply_bulk(&e.owner);
        ctx.reply_str(e.kind.name());
        ctx.reply_str(e.mode.name());
        ctx.reply_int(i64::try_from(e.duration_ms).unwrap_or(i64::MAX));
        ctx.reply_str(e.outcome.name());
        ctx.reply_array(e.blocked_by.len());
        for b in &e.blocked_by {
            ctx.reply_bulk(b);
        }
    }
    Ok(Reply::Done)
}
