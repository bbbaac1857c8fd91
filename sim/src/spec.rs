//! The rules of /work/shared/SPEC.md, written again here from its words,
//! independently of dlock-core's `decide`: the simulator's oracle.
//!
//! Only the state the core exposes is read (kind, holds, places); nothing
//! here calls the grant rule under test.

use dlock_core::{Holder, Kind, Lock, Mode, Waiter};

/// A request as SPEC words it: who, in which mode, how many permits.
#[derive(Clone, Copy, Debug)]
pub struct Want<'a> {
    pub owner: &'a [u8],
    pub mode: Mode,
    pub permits: u32,
}

fn live(h: &Holder) -> bool {
    h.is_live()
}

/// Whether SPEC answers the request `w`, whose place is `pos` (the number
/// of places ahead of it), now: granted, or refused with an error (the
/// upgrade deadlock). False means it must wait.
///
/// - every kind: a hold in its lock-delay "keeps excluding every owner,
///   exactly as it did" — its own owner included in that mode;
/// - mutex, fair: "granted when the lock is free or already held by
///   owner"; waiters are "served in arrival order" (nobody ahead);
/// - rw READ: "no other owner holds WRITE and no writer is waiting ahead
///   of it — except that an owner already holding READ or WRITE is granted
///   READ at once";
/// - rw WRITE: "no other owner holds READ or WRITE"; the only reader may
///   upgrade (ahead of the queue); a second reader waiting to upgrade
///   "fails at once with an error"; otherwise served in arrival order;
/// - semaphore: "the permits held by all owners plus k are at most n and
///   nobody waits ahead — strict FIFO"; a holder asking again is raised by
///   the same rule.
pub fn serves(l: &Lock, w: &Want<'_>, pos: usize) -> bool {
    let hs = l.holders();
    let own_delayed_in = |m: Option<Mode>| {
        hs.iter()
            .any(|h| !live(h) && *h.owner == *w.owner && m.is_none_or(|m| h.mode == m))
    };
    match l.kind() {
        Kind::Latch => false,
        Kind::Semaphore => {
            let held: u64 = hs.iter().map(|h| u64::from(h.count)).sum();
            let limit = l.limit().unwrap_or(0);
            pos == 0 && !own_delayed_in(None) && held + u64::from(w.permits) <= limit
        }
        Kind::Mutex | Kind::Fair => {
            let reenter = hs
                .iter()
                .any(|h| live(h) && *h.owner == *w.owner && h.mode == w.mode);
            reenter || (hs.is_empty() && pos == 0)
        }
        Kind::Rw => {
            let holds_live =
                |o: &[u8], m: Mode| hs.iter().any(|h| live(h) && *h.owner == *o && h.mode == m);
            if holds_live(w.owner, w.mode) {
                return true;
            }
            if own_delayed_in(Some(w.mode)) {
                return false;
            }
            let holds_any_live = hs.iter().any(|h| live(h) && *h.owner == *w.owner);
            let ahead = l.waiters().iter().take(pos);
            match w.mode {
                Mode::Read => {
                    if holds_any_live {
                        return true;
                    }
                    let write_held = hs.iter().any(|h| h.mode == Mode::Write);
                    let writer_ahead = ahead.clone().any(|x| x.mode == Mode::Write);
                    !write_held && !writer_ahead
                }
                _ => {
                    let reader = holds_live(w.owner, Mode::Read);
                    // A second reader waiting to upgrade: an error at once.
                    let other_upgrader = l.waiters().iter().any(|x| {
                        x.mode == Mode::Write
                            && *x.owner != *w.owner
                            && holds_live(&x.owner, Mode::Read)
                    });
                    if reader && other_upgrader {
                        return true;
                    }
                    let others = hs.iter().any(|h| !live(h) || *h.owner != *w.owner);
                    !others && (reader || pos == 0)
                }
            }
        }
    }
}

/// Mutual exclusion per kind, over every hold (a hold in its lock-delay
/// excludes as it did): mutex and fair locks have one owner; an rw lock
/// with a WRITE hold has no hold of another owner; a semaphore's holds sum
/// to at most its limit; a latch has no hold.
pub fn exclusion(l: &Lock) -> Result<(), String> {
    let hs = l.holders();
    match l.kind() {
        Kind::Mutex | Kind::Fair => {
            if let Some(first) = hs.first() {
                if hs.iter().any(|h| h.owner != first.owner) {
                    return Err(format!("two owners hold a {:?} lock", l.kind()));
                }
            }
        }
        Kind::Rw => {
            if let Some(w) = hs.iter().find(|h| h.mode == Mode::Write) {
                if hs.iter().any(|h| h.owner != w.owner) {
                    return Err("a WRITE hold next to another owner's hold".into());
                }
            }
        }
        Kind::Semaphore => {
            let held: u64 = hs.iter().map(|h| u64::from(h.count)).sum();
            if held > l.limit().unwrap_or(0) {
                return Err(format!(
                    "{held} permits held over the limit {:?}",
                    l.limit()
                ));
            }
        }
        Kind::Latch => {
            if !hs.is_empty() {
                return Err("a latch with holds".into());
            }
        }
    }
    Ok(())
}

/// The memory a lock's value may hold beyond its holds and places, in
/// journal entries (queued-owner set, edits), after a commit.
pub fn journal_bound(l: &Lock) -> usize {
    2 * l.waiters().len() + 8
}

/// What a copy of a lock must agree on: everything, but a bound hold's
/// connection (a copy says "bound elsewhere").
pub type View = (
    Kind,
    u64,
    Option<u64>,
    Option<u64>,
    Vec<dlock_core::Holder>,
    Vec<Waiter>,
);

pub fn view(l: &Lock) -> View {
    let holders = l
        .holders()
        .iter()
        .map(|h| {
            let mut h = h.clone();
            if h.bound != 0 {
                h.bound = dlock_core::BOUND_ELSEWHERE;
            }
            h
        })
        .collect();
    (
        l.kind(),
        l.last_token(),
        l.limit(),
        l.latch_count(),
        holders,
        l.waiters().iter().cloned().collect(),
    )
}
