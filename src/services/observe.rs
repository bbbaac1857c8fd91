//! Wait and hold times: the histograms of `DLOCK.STATS` (and the
//! percentiles of `INFO dlock`) and the entries of `DLOCK.SLOWLOG`.
//!
//! - A **wait** is a connection that waited on the server (`WAIT` > 0, or
//!   `AWAIT`): from the moment its place was made ([`wait_began`], called by
//!   the blocking service when it queues the place) to the end of the wait
//!   ([`wait_ended`], from the blocked client's free callback: granted,
//!   timed out, answered an error, or its connection closed).
//! - A **hold** runs from its grant (the core's `Holder::granted_at`) to its
//!   end: release ([`hold_released`]), lease end ([`before_tick`]),
//!   force-release, deletion of the key and a bound connection closing
//!   ([`holds_ended`]). Holds whose grant time is unknown (loaded from an
//!   older payload) are not counted. Replicas count nothing: they only
//!   apply the master's effects.
//!
//! Config `dlock.stats` (`yes`) turns the histograms off; the slowlog has
//! its own thresholds (`dlock.slowlog-wait-ms`, `dlock.slowlog-hold-ms`,
//! -1: off). Both are main-thread state (see `state`).

use super::state;
use super::state::Map as HashMap;
use crate::config;
use crate::ffi::{self, AnyCtx, Ctx};
use dlock_core::histogram::Histogram;
use dlock_core::slowlog::{Entry, Outcome, Phase, SlowLog};
use dlock_core::{Holder, Kind, Lock, Mode};
use std::cell::RefCell;

/// The kinds, in the order STATS and INFO list them.
pub const KINDS: [Kind; 5] = [
    Kind::Mutex,
    Kind::Rw,
    Kind::Fair,
    Kind::Semaphore,
    Kind::Latch,
];

/// Longest `blocked_by` kept with a wait for the slowlog.
const MAX_BLOCKED_BY: usize = 16;

fn slot(kind: Kind) -> usize {
    KINDS.iter().position(|k| *k == kind).unwrap_or(0)
}

/// The wait and hold histograms of one kind.
#[derive(Default)]
pub struct KindStats {
    pub waits: Histogram,
    pub holds: Histogram,
}

/// A wait in progress: when it began and whom it waited on then.
struct Began {
    at_us: u64,
    /// Who it waited on when it began, packed in one allocation: for each
    /// owner, its length (2 bytes, little-endian) and its bytes.
    blocked_by: Box<[u8]>,
    outcome: Option<Outcome>,
}

/// Packs owners for [`Began::blocked_by`] (owners are at most 512 bytes).
fn pack<'a>(owners: impl Iterator<Item = &'a [u8]>) -> Box<[u8]> {
    let mut out = Vec::new();
    for o in owners {
        let n = u16::try_from(o.len()).unwrap_or(u16::MAX);
        out.extend_from_slice(&n.to_le_bytes());
        out.extend_from_slice(o.get(..usize::from(n)).unwrap_or(o));
    }
    out.into_boxed_slice()
}

/// The owners [`pack`] packed.
fn unpack(mut b: &[u8]) -> Vec<Box<[u8]>> {
    let mut out = Vec::new();
    while let Some((len, rest)) = b.split_first_chunk::<2>() {
        let n = usize::from(u16::from_le_bytes(*len));
        let Some((o, rest)) = rest.split_at_checked(n) else {
            break;
        };
        out.push(Box::from(o));
        b = rest;
    }
    out
}

/// The holds of a lock value that left a key (the unlink hook), recorded as
/// `deleted` by the next job unless the same value turns up under a new
/// name first (RENAME, MOVE: the server unlinks the source after adding
/// the value at the destination, and the holds go on there).
struct Unlinked {
    /// The value's address, and its holds' tokens: what identifies it.
    value: usize,
    tokens: Vec<u64>,
    key: Box<[u8]>,
    kind: Kind,
    holds: Vec<Holder>,
    at_ms: u64,
}

#[derive(Default)]
struct Observed {
    kinds: [KindStats; 5],
    slowlog: SlowLog,
    waits: HashMap<u64, Began>,
    unlinked: Vec<Unlinked>,
}

thread_local! {
    static OBSERVED: RefCell<Observed> = RefCell::new(Observed::default());
}

fn with<R>(f: impl FnOnce(&mut Observed) -> R) -> Option<R> {
    state::with(&OBSERVED, f)
}

/// Reads the histograms of every kind (in [`KINDS`] order).
pub fn with_stats<R>(f: impl FnOnce(&[KindStats; 5]) -> R) -> Option<R> {
    with(|o| f(&o.kinds))
}

/// The percentiles `INFO dlock` shows, in latencystats' format
/// (`p50=…,p99=…,p99.9=…`, µs with three decimals): `wait_percentiles_usec`
/// and `hold_percentiles_usec` over every kind, then the same per kind
/// (`wait_percentiles_usec_mutex`, …), each only once something was counted.
pub fn percentile_fields() -> Vec<(String, String)> {
    let Some(mut per_kind) = with(|o| {
        o.kinds
            .iter()
            .map(|k| (k.waits.clone(), k.holds.clone()))
            .collect::<Vec<_>>()
    }) else {
        return Vec::new();
    };
    let mut all = (Histogram::new(), Histogram::new());
    for (w, h) in &per_kind {
        all.0.merge(w);
        all.1.merge(h);
    }
    let fmt = |h: &Histogram| -> Option<String> {
        let p = |q: f64| h.percentile(q).map(|v| format!("{v}.000"));
        Some(format!(
            "p50={},p99={},p99.9={}",
            p(50.0)?,
            p(99.0)?,
            p(99.9)?
        ))
    };
    let mut out = Vec::new();
    let mut push = |name: String, h: &Histogram| {
        if let Some(v) = fmt(h) {
            out.push((name, v));
        }
    };
    push("wait_percentiles_usec".into(), &all.0);
    push("hold_percentiles_usec".into(), &all.1);
    for (kind, (w, h)) in KINDS.iter().zip(per_kind.drain(..)) {
        push(format!("wait_percentiles_usec_{}", kind.name()), &w);
        push(format!("hold_percentiles_usec_{}", kind.name()), &h);
    }
    out
}

/// `DLOCK.STATS RESET`.
pub fn reset_stats() {
    with(|o| {
        for k in o.kinds.iter_mut() {
            k.waits.reset();
            k.holds.reset();
        }
    });
}

/// Reads the slowlog.
pub fn with_slowlog<R>(f: impl FnOnce(&SlowLog) -> R) -> Option<R> {
    with(|o| f(&o.slowlog))
}

/// `DLOCK.SLOWLOG RESET`.
pub fn reset_slowlog() {
    with(|o| o.slowlog.reset());
}

/// Whether a duration of `ms` crosses a slowlog threshold (-1: off).
fn over(ms: u64, threshold: i64) -> bool {
    threshold >= 0 && ms >= threshold as u64
}

/// Adds an entry to the slowlog (bounded by `dlock.slowlog-max-len`).
fn log(o: &mut Observed, e: Entry) {
    o.slowlog.push(e, config::slowlog_max_len());
}

/// Counts and logs a wait answered with a `DEADLOCK` error: for the
/// deadlock detector, which answers a request at once instead of queueing
/// it (so no wait of it is in progress here). SPEC: such a request counts
/// as a wait in DLOCK.STATS (of `waited_ms`, 0 for a request that never
/// waited), as it does in the slowlog; `blocked_by` are the owners of the
/// cycle it would close.
pub fn log_deadlock(
    key: &[u8],
    kind: Kind,
    owner: &[u8],
    mode: Mode,
    waited_ms: u64,
    blocked_by: &[&[u8]],
) {
    if config::stats() {
        with(|o| {
            if let Some(k) = o.kinds.get_mut(slot(kind)) {
                k.waits.record(waited_ms.saturating_mul(1000));
            }
        });
    }
    // A deadlock is logged whatever its wait (unless waits are not logged).
    if config::slowlog_wait_ms() < 0 {
        return;
    }
    let (now, _) = ffi::now();
    with(|o| {
        let e = Entry {
            id: 0,
            ended_ms: now,
            phase: Phase::Wait,
            key: key.into(),
            owner: owner.into(),
            kind,
            mode,
            duration_ms: waited_ms,
            outcome: Outcome::Deadlock,
            blocked_by: blocked_by.iter().map(|b| Box::from(*b)).collect(),
        };
        log(o, e);
    });
}

/// The place `id` of `lock` was made for a connection that waits on the
/// server: its wait begins (with whom it waits on, for the slowlog). Only
/// masters have connections waiting on the server.
pub fn wait_began(lock: &Lock, id: u64) {
    let (_, now_us) = ffi::now();
    if !config::stats() && config::slowlog_wait_ms() < 0 {
        return;
    }
    let blocked_by = match lock.waiters().iter().rposition(|w| w.id == id) {
        Some(p) if config::slowlog_wait_ms() >= 0 => {
            pack(lock.blocked_by_first(p, MAX_BLOCKED_BY).into_iter())
        }
        _ => Box::default(),
    };
    with(|o| {
        o.waits.entry(id).or_insert(Began {
            at_us: now_us,
            blocked_by,
            outcome: None,
        });
    });
}

/// Records how the wait `id` ended, when its free callback cannot tell
/// (a time-out, an error answered by a ready callback).
pub fn wait_outcome(id: u64, outcome: Outcome) {
    with(|o| {
        if let Some(b) = o.waits.get_mut(&id) {
            b.outcome = Some(outcome);
        }
    });
}

/// The wait `id` ended (its blocked client is freed): counts it and logs
/// it when slow. `outcome` is used unless [`wait_outcome`] named one.
pub fn wait_ended(id: u64, key: &[u8], kind: Kind, owner: &[u8], mode: Mode, outcome: Outcome) {
    let Some(Some(began)) = with(|o| o.waits.remove(&id)) else {
        return;
    };
    let outcome = began.outcome.unwrap_or(outcome);
    let (now, now_us) = ffi::now();
    let us = now_us.saturating_sub(began.at_us);
    let ms = us / 1000;
    let stats = config::stats();
    // A deadlock is logged whatever its wait (unless waits are not logged).
    let slow = over(ms, config::slowlog_wait_ms())
        || (outcome == Outcome::Deadlock && config::slowlog_wait_ms() >= 0);
    if !stats && !slow {
        return;
    }
    with(|o| {
        if stats {
            if let Some(k) = o.kinds.get_mut(slot(kind)) {
                k.waits.record(us);
            }
        }
        if slow {
            let e = Entry {
                id: 0,
                ended_ms: now,
                phase: Phase::Wait,
                key: key.into(),
                owner: owner.into(),
                kind,
                mode,
                duration_ms: ms,
                outcome,
                blocked_by: unpack(&began.blocked_by),
            };
            log(o, e);
        }
    });
}

/// Counts (and logs when slow) one hold of `kind` at `key` that ended at
/// `end_ms` for `outcome`.
fn hold_ended(o: &mut Observed, key: &[u8], kind: Kind, h: &Holder, end_ms: u64, outcome: Outcome) {
    if h.granted_at == 0 {
        return;
    }
    let ms = end_ms.saturating_sub(h.granted_at);
    if config::stats() {
        if let Some(k) = o.kinds.get_mut(slot(kind)) {
            k.holds.record(ms.saturating_mul(1000));
        }
    }
    if over(ms, config::slowlog_hold_ms()) {
        let e = Entry {
            id: 0,
            ended_ms: end_ms,
            phase: Phase::Hold,
            key: key.into(),
            owner: h.owner.as_slice().into(),
            kind,
            mode: h.mode,
            duration_ms: ms,
            outcome,
            blocked_by: Vec::new(),
        };
        log(o, e);
    }
}

/// Whether hold ends are observed at all (a master with stats or a hold
/// threshold on, not loading a file: what it replays ended long ago).
fn observing(ctx: impl AnyCtx) -> bool {
    (config::stats() || config::slowlog_hold_ms() >= 0) && !ctx.is_replica() && !ctx.is_loading()
}

/// Before the lock is ticked at `now`: the live holds whose lease ended
/// by then end (at their lease end).
pub fn before_tick(ctx: Ctx<'_>, key: &[u8], lock: &Lock, now: u64) {
    if !observing(ctx) || lock.holders().iter().all(|h| h.expires_at > now) {
        return;
    }
    with(|o| {
        for h in lock.holders() {
            if h.is_live() && h.expires_at <= now {
                hold_ended(o, key, lock.kind(), h, h.expires_at, Outcome::Expired);
            }
        }
    });
}

/// The live holds `which` picks end now for `outcome` (force-release,
/// deletion, a bound connection closing).
pub fn holds_ended(
    ctx: Ctx<'_>,
    key: &[u8],
    lock: &Lock,
    outcome: Outcome,
    which: impl Fn(&Holder) -> bool,
) {
    if !observing(ctx) || lock.holders().is_empty() {
        return;
    }
    let (now, _) = ffi::now();
    with(|o| {
        for h in lock.holders() {
            if h.is_live() && which(h) {
                hold_ended(o, key, lock.kind(), h, now, outcome);
            }
        }
    });
}

/// The lock value at `value` left `key` (the unlink hook): its live holds
/// end as `deleted` unless [`moved`] sees the value at a new name before
/// [`flush_unlinked`] runs (from the next job). True when something was
/// kept for the job.
pub fn holds_unlinked(ctx: impl AnyCtx, key: &[u8], lock: &Lock, value: usize) -> bool {
    if !observing(ctx)
        || !lock
            .holders()
            .iter()
            .any(|h| h.is_live() && h.granted_at != 0)
    {
        return false;
    }
    let (now, _) = ffi::now();
    let holds: Vec<Holder> = lock
        .holders()
        .iter()
        .filter(|h| h.is_live())
        .cloned()
        .collect();
    let u = Unlinked {
        value,
        tokens: lock.holders().iter().map(|h| h.token).collect(),
        key: key.into(),
        kind: lock.kind(),
        holds,
        at_ms: now,
    };
    with(|o| o.unlinked.push(u)).is_some()
}

/// The lock value at `value` appeared under a new name (RENAME, MOVE): its
/// holds did not end.
pub fn moved(lock: &Lock, value: usize) {
    with(|o| {
        o.unlinked.retain(|u| {
            u.value != value
                || !u
                    .tokens
                    .iter()
                    .copied()
                    .eq(lock.holders().iter().map(|h| h.token))
        });
    });
}

/// Records the holds of the values that left their keys for good as ended
/// (`deleted`, at the instant they left).
pub fn flush_unlinked() {
    with(|o| {
        for u in std::mem::take(&mut o.unlinked) {
            for h in &u.holds {
                hold_ended(o, &u.key, u.kind, h, u.at_ms, Outcome::Deleted);
            }
        }
    });
}

/// The hold of `owner` (in `mode`, or its only live hold) before a release:
/// what [`hold_released`] needs if the release ends it.
pub fn hold_before_release(lock: &Lock, owner: &[u8], mode: Option<Mode>) -> Option<Holder> {
    let mut it = lock
        .holders()
        .iter()
        .filter(|h| h.is_live() && *h.owner == *owner && mode.is_none_or(|m| m == h.mode));
    let h = it.next()?;
    it.next().is_none().then(|| h.clone())
}

/// A release ended the hold `h` (its count reached 0).
pub fn hold_released(ctx: Ctx<'_>, key: &[u8], kind: Kind, h: &Holder) {
    if !observing(ctx) {
        return;
    }
    let (now, _) = ffi::now();
    with(|o| hold_ended(o, key, kind, h, now, Outcome::Released));
}

#[cfg(test)]
mod tests {
    #[test]
    fn packed_owners_round_trip() {
        let owners: [&[u8]; 3] = [b"a", b"", &[7u8; 512]];
        let back = super::unpack(&super::pack(owners.iter().copied()));
        let back: Vec<&[u8]> = back.iter().map(|b| &**b).collect();
        assert_eq!(back, owners);
        assert!(super::unpack(&[5, 0, 1]).is_empty());
    }
}
