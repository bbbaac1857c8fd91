//! Unit tests of the lock state machine and its codec.
//!
//! Most rules are checked as tables of cases (in the style of redis-cell's
//! `RateLimitCase`): a lock of one kind is built by a list of setup steps, one
//! action is applied, and both the outcome and the whole resulting state are
//! compared with what docs/commands.md asks for. Every refusal (an error, a denial, a
//! `false`) must also leave the lock exactly as it was.
//!
//! Then: fencing tokens, `next_deadline`, the codec (round trips, every
//! rejection rule, a small deterministic fuzz loop) and a model-based test
//! that runs long pseudo-random operation sequences against a reference.
//!
//! Time is plain numbers: setups usually act at `now = 1000` with a lease of
//! 100 ms (so leases end at 1100), and tokens are issued with `now_us = 0` by
//! a fresh [`Tokens`], so the tokens of a case are 1, 2, 3, ...

use super::codec::*;
use super::*;
use std::collections::{HashSet, VecDeque};

const X: Mode = Mode::Exclusive;
const R: Mode = Mode::Read;
const W: Mode = Mode::Write;

// ---------------------------------------------------------------------------
// Steps, outcomes and the table runner
// ---------------------------------------------------------------------------

/// One call on a lock.
#[derive(Clone, Copy, Debug)]
enum Op {
    /// `acquire`: owner, mode, waiter id, now, lease ms.
    Acq(&'static str, Mode, Option<u64>, u64, u64),
    /// `enqueue`: owner, mode, id, blocked, expires_at.
    Enq(&'static str, Mode, u64, bool, u64),
    /// `wait_ended`: id, queue deadline.
    Ended(u64, u64),
    /// `release`: owner, mode.
    Rel(&'static str, Option<Mode>),
    /// `renew`: owner, now, lease ms.
    Renew(&'static str, u64, u64),
    /// `tick`: now, ids of blocked waiters whose connection is gone.
    Tick(u64, &'static [u64]),
    /// `force_release`.
    Force,
    /// `remove_waiter`: id.
    Remove(u64),
}

/// What a call returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Out {
    Acq(Result<Grant, LockError>),
    Enq(bool),
    Ended(bool),
    Rel(Result<Released, LockError>),
    Renewed(bool),
    Ticked(Tick),
    Forced(bool),
    Removed(bool),
}

impl Out {
    /// Outcomes after which nothing may have changed.
    fn refused(&self) -> bool {
        match *self {
            Out::Acq(r) => !matches!(r, Ok(Grant::Granted { .. })),
            Out::Rel(r) => r.is_err(),
            Out::Ended(b) | Out::Renewed(b) | Out::Forced(b) | Out::Removed(b) => !b,
            Out::Ticked(t) => t == Tick::default(),
            Out::Enq(_) => false,
        }
    }
}

fn granted(token: u64) -> Out {
    Out::Acq(Ok(Grant::Granted {
        token,
        reentrant: false,
    }))
}

fn reentered(token: u64) -> Out {
    Out::Acq(Ok(Grant::Granted {
        token,
        reentrant: true,
    }))
}

const DENIED: Out = Out::Acq(Ok(Grant::Denied));

fn acq_err(e: LockError) -> Out {
    Out::Acq(Err(e))
}

fn released(gone: bool, freed: bool) -> Out {
    Out::Rel(Ok(Released { gone, freed }))
}

fn rel_err(e: LockError) -> Out {
    Out::Rel(Err(e))
}

fn ticked(expired: usize, dropped: usize, freed: bool) -> Out {
    Out::Ticked(Tick {
        expired,
        dropped,
        freed,
        ..Tick::default()
    })
}

/// Applies `op`; tokens are issued with `now_us = 0`.
fn apply(lock: &mut Lock, tokens: &mut Tokens, op: Op) -> Out {
    match op {
        Op::Acq(owner, mode, waiter, now, lease_ms) => {
            let req = Request {
                owner: owner.as_bytes(),
                mode,
                lease_ms,
                waiter,
            };
            Out::Acq(lock.acquire(&req, now, tokens, 0))
        }
        Op::Enq(owner, mode, id, blocked, expires_at) => {
            Out::Enq(lock.enqueue(owner.as_bytes(), mode, id, blocked, expires_at))
        }
        Op::Ended(id, deadline) => Out::Ended(lock.wait_ended(id, deadline)),
        Op::Rel(owner, mode) => Out::Rel(lock.release(owner.as_bytes(), mode)),
        Op::Renew(owner, now, lease_ms) => {
            Out::Renewed(lock.renew(owner.as_bytes(), lease_ms, now))
        }
        Op::Tick(now, dead) => Out::Ticked(lock.tick(now, |id| !dead.contains(&id))),
        Op::Force => Out::Forced(lock.force_release()),
        Op::Remove(id) => Out::Removed(lock.remove_waiter(id)),
    }
}

/// Expected hold: owner, mode, count, expires_at, token.
type HoldRow = (&'static str, Mode, u32, u64, u64);
/// Expected place: id, owner, mode, blocked, expires_at.
type WaitRow = (u64, &'static str, Mode, bool, u64);

fn hold_rows(lock: &Lock) -> Vec<(String, Mode, u32, u64, u64)> {
    lock.holders()
        .iter()
        .map(|h| {
            let owner = String::from_utf8_lossy(&h.owner).into_owned();
            (owner, h.mode, h.count, h.expires_at, h.token)
        })
        .collect()
}

fn wait_rows(lock: &Lock) -> Vec<(u64, String, Mode, bool, u64)> {
    lock.waiters()
        .iter()
        .map(|w| {
            let owner = String::from_utf8_lossy(&w.owner).into_owned();
            (w.id, owner, w.mode, w.blocked, w.expires_at)
        })
        .collect()
}

/// One table row: build a lock with `setup`, apply `action`, expect `expect`
/// and exactly `holders` and `waiters` (in order) afterwards.
struct Case<'a> {
    name: &'a str,
    kind: Kind,
    setup: &'a [Op],
    action: Op,
    expect: Out,
    holders: &'a [HoldRow],
    waiters: &'a [WaitRow],
}

fn run_cases(cases: &[Case<'_>]) {
    let mut names = HashSet::new();
    for c in cases {
        assert!(names.insert(c.name), "duplicate case name {:?}", c.name);
        run_case(c);
    }
}

fn run_case(c: &Case<'_>) {
    let mut lock = Lock::new(c.kind);
    let mut tokens = Tokens::default();
    for op in c.setup {
        apply(&mut lock, &mut tokens, *op);
        if let Err(e) = invariants(&lock) {
            panic!(
                "case {:?}: setup step {:?} broke an invariant: {e}",
                c.name, op
            );
        }
    }
    let before = lock.clone();
    let tokens_before = tokens;
    let got = apply(&mut lock, &mut tokens, c.action);
    assert_eq!(
        got, c.expect,
        "case {:?}: outcome of {:?}",
        c.name, c.action
    );
    if got.refused() {
        assert_eq!(
            lock, before,
            "case {:?}: a refusal changed the lock",
            c.name
        );
        assert_eq!(
            tokens, tokens_before,
            "case {:?}: a refusal used a token",
            c.name
        );
    }
    let want_holders: Vec<_> = c
        .holders
        .iter()
        .map(|&(o, m, n, e, t)| (o.to_string(), m, n, e, t))
        .collect();
    let want_waiters: Vec<_> = c
        .waiters
        .iter()
        .map(|&(i, o, m, b, e)| (i, o.to_string(), m, b, e))
        .collect();
    assert_eq!(hold_rows(&lock), want_holders, "case {:?}: holders", c.name);
    assert_eq!(wait_rows(&lock), want_waiters, "case {:?}: waiters", c.name);
    if let Err(e) = invariants(&lock) {
        panic!("case {:?}: {e}", c.name);
    }
    let max_token = lock.holders().iter().map(|h| h.token).max().unwrap_or(0);
    assert!(lock.last_token() >= max_token, "case {:?}", c.name);
    assert!(tokens.last >= lock.last_token(), "case {:?}", c.name);
}

fn cat(parts: &[&[Op]]) -> Vec<Op> {
    parts.concat()
}

/// The invariants every lock must keep (and every decoded lock must have).
fn invariants(lock: &Lock) -> Result<(), String> {
    let kind = lock.kind();
    let hs = lock.holders();
    for h in hs {
        if !kind.allows(h.mode) {
            return Err(format!(
                "hold in mode {:?} on a {} lock",
                h.mode,
                kind.name()
            ));
        }
        if h.count == 0 {
            return Err(format!("hold with count 0: {h:?}"));
        }
        if h.token == 0 || h.token > lock.last_token() {
            return Err(format!(
                "hold token {} outside 1..={}",
                h.token,
                lock.last_token()
            ));
        }
        if h.owner.is_empty() || h.owner.len() > MAX_OWNER_LEN {
            return Err(format!("owner length {}", h.owner.len()));
        }
    }
    if matches!(kind, Kind::Mutex | Kind::Fair) && hs.len() > 1 {
        return Err(format!("{} holders of a {} lock", hs.len(), kind.name()));
    }
    for (i, a) in hs.iter().enumerate() {
        for b in &hs[i + 1..] {
            if a.owner == b.owner && a.mode == b.mode {
                return Err(format!("duplicate hold {a:?}"));
            }
            let exclusive = |m: Mode| matches!(m, Mode::Exclusive | Mode::Write);
            if a.owner != b.owner && (exclusive(a.mode) || exclusive(b.mode)) {
                return Err(format!("exclusive hold shared: {a:?} and {b:?}"));
            }
        }
    }
    let mut ids = HashSet::new();
    for w in lock.waiters() {
        if !kind.allows(w.mode) {
            return Err(format!(
                "waiter in mode {:?} on a {} lock",
                w.mode,
                kind.name()
            ));
        }
        if w.owner.is_empty() || w.owner.len() > MAX_OWNER_LEN {
            return Err(format!("waiter owner length {}", w.owner.len()));
        }
        if !ids.insert(w.id) {
            return Err(format!("duplicate waiter id {}", w.id));
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Mutex
// ---------------------------------------------------------------------------

#[test]
fn mutex_rules() {
    use LockError::*;
    let a1 = [Op::Acq("a", X, None, 1000, 100)];
    let a2 = [
        Op::Acq("a", X, None, 1000, 100),
        Op::Acq("a", X, None, 1000, 100),
    ];
    let a_rel = [Op::Acq("a", X, None, 1000, 100), Op::Rel("a", None)];
    let a_expired = [Op::Acq("a", X, None, 1000, 100), Op::Tick(1100, &[])];
    let a_queue = [
        Op::Acq("a", X, None, 1000, 100),
        Op::Enq("b", X, 1, true, 9000),
    ];
    let a_held: &[HoldRow] = &[("a", X, 1, 1100, 1)];
    let b_waits: &[WaitRow] = &[(1, "b", X, true, 9000)];
    let cases = [
        Case {
            name: "grant on a free lock returns a token",
            kind: Kind::Mutex,
            setup: &[],
            action: Op::Acq("a", X, None, 1000, 100),
            expect: granted(1),
            holders: a_held,
            waiters: &[],
        },
        Case {
            name: "reentrant grant: same token, count grows, lease restarts",
            kind: Kind::Mutex,
            setup: &a1,
            action: Op::Acq("a", X, None, 1050, 300),
            expect: reentered(1),
            holders: &[("a", X, 2, 1350, 1)],
            waiters: &[],
        },
        Case {
            name: "third reentrant grant; the restarted lease may be shorter",
            kind: Kind::Mutex,
            setup: &a2,
            action: Op::Acq("a", X, None, 1060, 10),
            expect: reentered(1),
            holders: &[("a", X, 3, 1070, 1)],
            waiters: &[],
        },
        Case {
            name: "other owner denied",
            kind: Kind::Mutex,
            setup: &a1,
            action: Op::Acq("b", X, None, 1000, 100),
            expect: DENIED,
            holders: a_held,
            waiters: &[],
        },
        Case {
            name: "other owner denied as a waiter without a place",
            kind: Kind::Mutex,
            setup: &a1,
            action: Op::Acq("b", X, Some(7), 1000, 100),
            expect: DENIED,
            holders: a_held,
            waiters: &[],
        },
        Case {
            name: "owners are binary strings: a prefix is another owner",
            kind: Kind::Mutex,
            setup: &a1,
            action: Op::Acq("aa", X, None, 1000, 100),
            expect: DENIED,
            holders: a_held,
            waiters: &[],
        },
        Case {
            name: "release decrements the count",
            kind: Kind::Mutex,
            setup: &a2,
            action: Op::Rel("a", None),
            expect: released(false, false),
            holders: a_held,
            waiters: &[],
        },
        Case {
            name: "release naming the exclusive mode",
            kind: Kind::Mutex,
            setup: &a2,
            action: Op::Rel("a", Some(X)),
            expect: released(false, false),
            holders: a_held,
            waiters: &[],
        },
        Case {
            name: "last release frees",
            kind: Kind::Mutex,
            setup: &a1,
            action: Op::Rel("a", None),
            expect: released(true, true),
            holders: &[],
            waiters: &[],
        },
        Case {
            name: "last release of a reentrant hold frees",
            kind: Kind::Mutex,
            setup: &cat(&[&a2, &[Op::Rel("a", None)]]),
            action: Op::Rel("a", None),
            expect: released(true, true),
            holders: &[],
            waiters: &[],
        },
        Case {
            name: "release by a non-holder",
            kind: Kind::Mutex,
            setup: &a1,
            action: Op::Rel("b", None),
            expect: rel_err(NotHeld),
            holders: a_held,
            waiters: &[],
        },
        Case {
            name: "release on a free lock",
            kind: Kind::Mutex,
            setup: &[],
            action: Op::Rel("a", None),
            expect: rel_err(NotHeld),
            holders: &[],
            waiters: &[],
        },
        Case {
            name: "release after the last release",
            kind: Kind::Mutex,
            setup: &a_rel,
            action: Op::Rel("a", None),
            expect: rel_err(NotHeld),
            holders: &[],
            waiters: &[],
        },
        Case {
            name: "release by a waiter that holds nothing",
            kind: Kind::Mutex,
            setup: &a_queue,
            action: Op::Rel("b", None),
            expect: rel_err(NotHeld),
            holders: a_held,
            waiters: b_waits,
        },
        Case {
            name: "release READ on a mutex",
            kind: Kind::Mutex,
            setup: &a1,
            action: Op::Rel("a", Some(R)),
            expect: rel_err(ModeNotApplicable),
            holders: a_held,
            waiters: &[],
        },
        Case {
            name: "release WRITE on a mutex",
            kind: Kind::Mutex,
            setup: &a1,
            action: Op::Rel("a", Some(W)),
            expect: rel_err(ModeNotApplicable),
            holders: a_held,
            waiters: &[],
        },
        Case {
            name: "release WRITE by a non-holder of a mutex",
            kind: Kind::Mutex,
            setup: &a1,
            action: Op::Rel("b", Some(W)),
            expect: rel_err(ModeNotApplicable),
            holders: a_held,
            waiters: &[],
        },
        Case {
            name: "acquire READ on a mutex",
            kind: Kind::Mutex,
            setup: &[],
            action: Op::Acq("a", R, None, 1000, 100),
            expect: acq_err(ModeNotApplicable),
            holders: &[],
            waiters: &[],
        },
        Case {
            name: "acquire WRITE on a held mutex by its holder",
            kind: Kind::Mutex,
            setup: &a1,
            action: Op::Acq("a", W, None, 1000, 100),
            expect: acq_err(ModeNotApplicable),
            holders: a_held,
            waiters: &[],
        },
        Case {
            name: "renew restarts the holder's lease",
            kind: Kind::Mutex,
            setup: &a1,
            action: Op::Renew("a", 1090, 500),
            expect: Out::Renewed(true),
            holders: &[("a", X, 1, 1590, 1)],
            waiters: &[],
        },
        Case {
            name: "renew keeps the count",
            kind: Kind::Mutex,
            setup: &a2,
            action: Op::Renew("a", 1090, 500),
            expect: Out::Renewed(true),
            holders: &[("a", X, 2, 1590, 1)],
            waiters: &[],
        },
        Case {
            name: "renew by a non-holder",
            kind: Kind::Mutex,
            setup: &a1,
            action: Op::Renew("b", 1090, 500),
            expect: Out::Renewed(false),
            holders: a_held,
            waiters: &[],
        },
        Case {
            name: "renew by a waiter",
            kind: Kind::Mutex,
            setup: &a_queue,
            action: Op::Renew("b", 1090, 500),
            expect: Out::Renewed(false),
            holders: a_held,
            waiters: b_waits,
        },
        Case {
            name: "renew on a free lock",
            kind: Kind::Mutex,
            setup: &[],
            action: Op::Renew("a", 1090, 500),
            expect: Out::Renewed(false),
            holders: &[],
            waiters: &[],
        },
        Case {
            name: "tick before the lease ends keeps the hold",
            kind: Kind::Mutex,
            setup: &a1,
            action: Op::Tick(1099, &[]),
            expect: ticked(0, 0, false),
            holders: a_held,
            waiters: &[],
        },
        Case {
            name: "tick at the lease end removes the hold",
            kind: Kind::Mutex,
            setup: &a1,
            action: Op::Tick(1100, &[]),
            expect: ticked(1, 0, true),
            holders: &[],
            waiters: &[],
        },
        Case {
            name: "tick removes a reentrant hold whatever its count",
            kind: Kind::Mutex,
            setup: &a2,
            action: Op::Tick(5000, &[]),
            expect: ticked(1, 0, true),
            holders: &[],
            waiters: &[],
        },
        Case {
            name: "tick after expiry keeps blocked waiters",
            kind: Kind::Mutex,
            setup: &a_queue,
            action: Op::Tick(1100, &[]),
            expect: ticked(1, 0, true),
            holders: &[],
            waiters: b_waits,
        },
        Case {
            name: "tick on a free lock does nothing",
            kind: Kind::Mutex,
            setup: &[],
            action: Op::Tick(5000, &[]),
            expect: ticked(0, 0, false),
            holders: &[],
            waiters: &[],
        },
        Case {
            name: "renew after expiry",
            kind: Kind::Mutex,
            setup: &a_expired,
            action: Op::Renew("a", 1100, 100),
            expect: Out::Renewed(false),
            holders: &[],
            waiters: &[],
        },
        Case {
            name: "release after expiry",
            kind: Kind::Mutex,
            setup: &a_expired,
            action: Op::Rel("a", None),
            expect: rel_err(NotHeld),
            holders: &[],
            waiters: &[],
        },
        Case {
            name: "another owner gets a new token after expiry",
            kind: Kind::Mutex,
            setup: &a_expired,
            action: Op::Acq("b", X, None, 1100, 100),
            expect: granted(2),
            holders: &[("b", X, 1, 1200, 2)],
            waiters: &[],
        },
        Case {
            name: "the expired holder gets a new token",
            kind: Kind::Mutex,
            setup: &a_expired,
            action: Op::Acq("a", X, None, 1100, 100),
            expect: granted(2),
            holders: &[("a", X, 1, 1200, 2)],
            waiters: &[],
        },
        Case {
            name: "a grant after release gets a new token",
            kind: Kind::Mutex,
            setup: &a_rel,
            action: Op::Acq("a", X, None, 1000, 100),
            expect: granted(2),
            holders: &[("a", X, 1, 1100, 2)],
            waiters: &[],
        },
        Case {
            name: "force release drops a reentrant hold",
            kind: Kind::Mutex,
            setup: &a2,
            action: Op::Force,
            expect: Out::Forced(true),
            holders: &[],
            waiters: &[],
        },
        Case {
            name: "force release keeps the queue",
            kind: Kind::Mutex,
            setup: &a_queue,
            action: Op::Force,
            expect: Out::Forced(true),
            holders: &[],
            waiters: b_waits,
        },
        Case {
            name: "force release of a free lock",
            kind: Kind::Mutex,
            setup: &[],
            action: Op::Force,
            expect: Out::Forced(false),
            holders: &[],
            waiters: &[],
        },
        Case {
            name: "release after force release",
            kind: Kind::Mutex,
            setup: &cat(&[&a1, &[Op::Force]]),
            action: Op::Rel("a", None),
            expect: rel_err(NotHeld),
            holders: &[],
            waiters: &[],
        },
        Case {
            name: "lease end saturates",
            kind: Kind::Mutex,
            setup: &[],
            action: Op::Acq("a", X, None, u64::MAX - 10, 100),
            expect: granted(1),
            holders: &[("a", X, 1, u64::MAX, 1)],
            waiters: &[],
        },
        Case {
            name: "renewed lease end saturates",
            kind: Kind::Mutex,
            setup: &a1,
            action: Op::Renew("a", u64::MAX - 1, 100),
            expect: Out::Renewed(true),
            holders: &[("a", X, 1, u64::MAX, 1)],
            waiters: &[],
        },
        Case {
            name: "reentrant grant ignores the queue",
            kind: Kind::Mutex,
            setup: &a_queue,
            action: Op::Acq("a", X, None, 1000, 200),
            expect: reentered(1),
            holders: &[("a", X, 2, 1200, 1)],
            waiters: b_waits,
        },
        Case {
            name: "last release with a waiter frees",
            kind: Kind::Mutex,
            setup: &a_queue,
            action: Op::Rel("a", None),
            expect: released(true, true),
            holders: &[],
            waiters: b_waits,
        },
    ];
    run_cases(&cases);
}

// ---------------------------------------------------------------------------
// FIFO order of blocked waiters
// ---------------------------------------------------------------------------

#[test]
fn fifo_order() {
    let queued = [
        Op::Acq("h", X, None, 1000, 100),
        Op::Enq("w1", X, 1, true, 5000),
        Op::Enq("w2", X, 2, true, 5000),
        Op::Enq("w3", X, 3, true, 5000),
    ];
    let free = cat(&[&queued, &[Op::Rel("h", None)]]);
    let one_served = cat(&[
        &free,
        &[Op::Acq("w1", X, Some(1), 1000, 100), Op::Rel("w1", None)],
    ]);
    let two_served = cat(&[
        &one_served,
        &[Op::Acq("w2", X, Some(2), 1000, 100), Op::Rel("w2", None)],
    ]);
    let forced = cat(&[&queued, &[Op::Force]]);
    let head_ended = cat(&[&free, &[Op::Ended(1, 9000)]]);
    let lease_ended = cat(&[&queued, &[Op::Tick(1100, &[])]]);
    let h_held: &[HoldRow] = &[("h", X, 1, 1100, 1)];
    let q1: WaitRow = (1, "w1", X, true, 5000);
    let q2: WaitRow = (2, "w2", X, true, 5000);
    let q3: WaitRow = (3, "w3", X, true, 5000);
    let all = [q1, q2, q3];
    let cases = [
        Case {
            name: "head waiter denied while the lock is held",
            kind: Kind::Mutex,
            setup: &queued,
            action: Op::Acq("w1", X, Some(1), 1000, 100),
            expect: DENIED,
            holders: h_held,
            waiters: &all,
        },
        Case {
            name: "waiter 2 denied while waiter 1 is ahead, lock free",
            kind: Kind::Mutex,
            setup: &free,
            action: Op::Acq("w2", X, Some(2), 1000, 100),
            expect: DENIED,
            holders: &[],
            waiters: &all,
        },
        Case {
            name: "waiter 3 denied while waiters 1 and 2 are ahead",
            kind: Kind::Mutex,
            setup: &free,
            action: Op::Acq("w3", X, Some(3), 1000, 100),
            expect: DENIED,
            holders: &[],
            waiters: &all,
        },
        Case {
            name: "newcomer denied while the queue is not empty",
            kind: Kind::Mutex,
            setup: &free,
            action: Op::Acq("n", X, None, 1000, 100),
            expect: DENIED,
            holders: &[],
            waiters: &all,
        },
        Case {
            name: "a waiter id without a place is a newcomer",
            kind: Kind::Mutex,
            setup: &free,
            action: Op::Acq("n", X, Some(99), 1000, 100),
            expect: DENIED,
            holders: &[],
            waiters: &all,
        },
        Case {
            name: "head waiter granted and its place removed",
            kind: Kind::Mutex,
            setup: &free,
            action: Op::Acq("w1", X, Some(1), 1000, 100),
            expect: granted(2),
            holders: &[("w1", X, 1, 1100, 2)],
            waiters: &[q2, q3],
        },
        Case {
            name: "after waiter 1, waiter 3 still waits behind waiter 2",
            kind: Kind::Mutex,
            setup: &one_served,
            action: Op::Acq("w3", X, Some(3), 1000, 100),
            expect: DENIED,
            holders: &[],
            waiters: &[q2, q3],
        },
        Case {
            name: "after waiter 1, waiter 2 is granted",
            kind: Kind::Mutex,
            setup: &one_served,
            action: Op::Acq("w2", X, Some(2), 1000, 100),
            expect: granted(3),
            holders: &[("w2", X, 1, 1100, 3)],
            waiters: &[q3],
        },
        Case {
            name: "after waiters 1 and 2, waiter 3 is granted",
            kind: Kind::Mutex,
            setup: &two_served,
            action: Op::Acq("w3", X, Some(3), 1000, 100),
            expect: granted(4),
            holders: &[("w3", X, 1, 1100, 4)],
            waiters: &[],
        },
        Case {
            name: "newcomer still denied while waiter 3 waits",
            kind: Kind::Mutex,
            setup: &two_served,
            action: Op::Acq("n", X, None, 1000, 100),
            expect: DENIED,
            holders: &[],
            waiters: &[q3],
        },
        Case {
            name: "wait_ended on a mutex removes the place",
            kind: Kind::Mutex,
            setup: &queued,
            action: Op::Ended(2, 9000),
            expect: Out::Ended(true),
            holders: h_held,
            waiters: &[q1, q3],
        },
        Case {
            name: "wait_ended of an unknown id",
            kind: Kind::Mutex,
            setup: &queued,
            action: Op::Ended(9, 9000),
            expect: Out::Ended(false),
            holders: h_held,
            waiters: &all,
        },
        Case {
            name: "when the head's wait ends the next waiter is head",
            kind: Kind::Mutex,
            setup: &head_ended,
            action: Op::Acq("w2", X, Some(2), 1000, 100),
            expect: granted(2),
            holders: &[("w2", X, 1, 1100, 2)],
            waiters: &[q3],
        },
        Case {
            name: "remove_waiter",
            kind: Kind::Mutex,
            setup: &queued,
            action: Op::Remove(2),
            expect: Out::Removed(true),
            holders: h_held,
            waiters: &[q1, q3],
        },
        Case {
            name: "remove_waiter of an unknown id",
            kind: Kind::Mutex,
            setup: &queued,
            action: Op::Remove(9),
            expect: Out::Removed(false),
            holders: h_held,
            waiters: &all,
        },
        Case {
            name: "tick drops blocked waiters whose connection is gone",
            kind: Kind::Mutex,
            setup: &queued,
            action: Op::Tick(1000, &[1, 3]),
            expect: ticked(0, 2, false),
            holders: h_held,
            waiters: &[q2],
        },
        Case {
            name: "tick keeps live blocked waiters past their wait end",
            kind: Kind::Mutex,
            setup: &queued,
            action: Op::Tick(6000, &[]),
            expect: ticked(1, 0, true),
            holders: &[],
            waiters: &all,
        },
        Case {
            name: "enqueue of a new blocked waiter appends",
            kind: Kind::Mutex,
            setup: &queued,
            action: Op::Enq("w4", X, 4, true, 7000),
            expect: Out::Enq(true),
            holders: h_held,
            waiters: &[q1, q2, q3, (4, "w4", X, true, 7000)],
        },
        Case {
            name: "holder re-enters while others wait",
            kind: Kind::Mutex,
            setup: &queued,
            action: Op::Acq("h", X, None, 1000, 100),
            expect: reentered(1),
            holders: &[("h", X, 2, 1100, 1)],
            waiters: &all,
        },
        Case {
            name: "force release keeps the waiters in order",
            kind: Kind::Mutex,
            setup: &queued,
            action: Op::Force,
            expect: Out::Forced(true),
            holders: &[],
            waiters: &all,
        },
        Case {
            name: "head waiter granted after force release",
            kind: Kind::Mutex,
            setup: &forced,
            action: Op::Acq("w1", X, Some(1), 1000, 100),
            expect: granted(2),
            holders: &[("w1", X, 1, 1100, 2)],
            waiters: &[q2, q3],
        },
        Case {
            name: "newcomer denied after force release",
            kind: Kind::Mutex,
            setup: &forced,
            action: Op::Acq("n", X, None, 1000, 100),
            expect: DENIED,
            holders: &[],
            waiters: &all,
        },
        Case {
            name: "head waiter granted after the holder's lease ended",
            kind: Kind::Mutex,
            setup: &lease_ended,
            action: Op::Acq("w1", X, Some(1), 1100, 100),
            expect: granted(2),
            holders: &[("w1", X, 1, 1200, 2)],
            waiters: &[q2, q3],
        },
        Case {
            name: "writers of an rw lock wait in order too",
            kind: Kind::Rw,
            setup: &[
                Op::Acq("h", W, None, 1000, 100),
                Op::Enq("w1", W, 1, true, 5000),
                Op::Enq("w2", W, 2, true, 5000),
                Op::Rel("h", None),
            ],
            action: Op::Acq("w2", W, Some(2), 1000, 100),
            expect: DENIED,
            holders: &[],
            waiters: &[(1, "w1", W, true, 5000), (2, "w2", W, true, 5000)],
        },
    ];
    run_cases(&cases);
}

// ---------------------------------------------------------------------------
// Fair lock
// ---------------------------------------------------------------------------

#[test]
fn fair_queue() {
    use LockError::*;
    // Held until 11000, so ticks below that only touch the queue.
    let held = [Op::Acq("h", X, None, 1000, 10_000)];
    let h_held: &[HoldRow] = &[("h", X, 1, 11_000, 1)];
    let two_polling = cat(&[
        &held,
        &[
            Op::Enq("a", X, 1, false, 6000),
            Op::Enq("b", X, 2, false, 6000),
        ],
    ]);
    let a_blocked = cat(&[&held, &[Op::Enq("a", X, 1, true, 9000)]]);
    let two_blocked = cat(&[&a_blocked, &[Op::Enq("b", X, 2, true, 9000)]]);
    let a_queued = cat(&[&held, &[Op::Enq("a", X, 1, false, 6000)]]);
    let three = cat(&[
        &held,
        &[
            Op::Enq("a", X, 1, true, 9000),
            Op::Enq("b", X, 2, false, 6000),
            Op::Enq("c", X, 3, true, 9000),
        ],
    ]);
    // Mixed queue, lock free: a (polling), b (blocked), c (polling).
    let mix = cat(&[
        &held,
        &[
            Op::Enq("a", X, 1, false, 6000),
            Op::Enq("b", X, 2, true, 9000),
            Op::Enq("c", X, 3, false, 6000),
            Op::Rel("h", None),
        ],
    ]);
    let mix_a = cat(&[
        &mix,
        &[Op::Acq("a", X, None, 1000, 100), Op::Rel("a", None)],
    ]);
    let mix_ab = cat(&[
        &mix_a,
        &[Op::Acq("b", X, Some(2), 1000, 100), Op::Rel("b", None)],
    ]);
    let mix_rows = [
        (1, "a", X, false, 6000),
        (2, "b", X, true, 9000),
        (3, "c", X, false, 6000),
    ];
    let requeued = cat(&[
        &held,
        &[
            Op::Enq("a", X, 1, false, 2000),
            Op::Enq("b", X, 2, false, 6000),
            Op::Tick(2000, &[]),
            Op::Enq("a", X, 3, false, 7000),
        ],
    ]);
    let requeued_rows = [(2, "b", X, false, 6000), (3, "a", X, false, 7000)];
    let ended_then_free = cat(&[&two_blocked, &[Op::Ended(1, 7000), Op::Rel("h", None)]]);
    let cases = [
        Case {
            name: "poll on a free lock is granted",
            kind: Kind::Fair,
            setup: &[],
            action: Op::Acq("a", X, None, 1000, 100),
            expect: granted(1),
            holders: &[("a", X, 1, 1100, 1)],
            waiters: &[],
        },
        Case {
            name: "reentrant grant",
            kind: Kind::Fair,
            setup: &[Op::Acq("a", X, None, 1000, 100)],
            action: Op::Acq("a", X, None, 1050, 100),
            expect: reentered(1),
            holders: &[("a", X, 2, 1150, 1)],
            waiters: &[],
        },
        Case {
            name: "poll denied while held",
            kind: Kind::Fair,
            setup: &held,
            action: Op::Acq("a", X, None, 1000, 100),
            expect: DENIED,
            holders: h_held,
            waiters: &[],
        },
        Case {
            name: "a denied owner takes a place at the back",
            kind: Kind::Fair,
            setup: &held,
            action: Op::Enq("a", X, 1, false, 6000),
            expect: Out::Enq(true),
            holders: h_held,
            waiters: &[(1, "a", X, false, 6000)],
        },
        Case {
            name: "a polling owner asking again keeps its one place, refreshed",
            kind: Kind::Fair,
            setup: &two_polling,
            action: Op::Enq("a", X, 3, false, 7000),
            expect: Out::Enq(false),
            holders: h_held,
            waiters: &[(3, "a", X, false, 7000), (2, "b", X, false, 6000)],
        },
        Case {
            name: "a blocked waiter takes over its owner's queued place",
            kind: Kind::Fair,
            setup: &two_polling,
            action: Op::Enq("a", X, 7, true, 9000),
            expect: Out::Enq(false),
            holders: h_held,
            waiters: &[(7, "a", X, true, 9000), (2, "b", X, false, 6000)],
        },
        Case {
            name: "a polling owner that waits elsewhere keeps that place",
            kind: Kind::Fair,
            setup: &a_blocked,
            action: Op::Enq("a", X, 5, false, 6000),
            expect: Out::Enq(false),
            holders: h_held,
            waiters: &[(1, "a", X, true, 9000)],
        },
        Case {
            name: "a second blocked connection of one owner gets its own place",
            kind: Kind::Fair,
            setup: &a_blocked,
            action: Op::Enq("a", X, 2, true, 9000),
            expect: Out::Enq(true),
            holders: h_held,
            waiters: &[(1, "a", X, true, 9000), (2, "a", X, true, 9000)],
        },
        Case {
            name: "wait_ended turns the place back into a queued one",
            kind: Kind::Fair,
            setup: &two_blocked,
            action: Op::Ended(1, 7000),
            expect: Out::Ended(true),
            holders: h_held,
            waiters: &[(1, "a", X, false, 7000), (2, "b", X, true, 9000)],
        },
        Case {
            name: "wait_ended of an unknown id",
            kind: Kind::Fair,
            setup: &two_blocked,
            action: Op::Ended(9, 7000),
            expect: Out::Ended(false),
            holders: h_held,
            waiters: &[(1, "a", X, true, 9000), (2, "b", X, true, 9000)],
        },
        Case {
            name: "after its wait ended the owner is served at its old place",
            kind: Kind::Fair,
            setup: &ended_then_free,
            action: Op::Acq("a", X, None, 1000, 100),
            expect: granted(2),
            holders: &[("a", X, 1, 1100, 2)],
            waiters: &[(2, "b", X, true, 9000)],
        },
        Case {
            name: "after a's wait ended b still waits behind a",
            kind: Kind::Fair,
            setup: &ended_then_free,
            action: Op::Acq("b", X, Some(2), 1000, 100),
            expect: DENIED,
            holders: &[],
            waiters: &[(1, "a", X, false, 7000), (2, "b", X, true, 9000)],
        },
        Case {
            name: "tick keeps a queued place before its deadline",
            kind: Kind::Fair,
            setup: &a_queued,
            action: Op::Tick(5999, &[]),
            expect: ticked(0, 0, false),
            holders: h_held,
            waiters: &[(1, "a", X, false, 6000)],
        },
        Case {
            name: "tick drops a queued place at its deadline",
            kind: Kind::Fair,
            setup: &a_queued,
            action: Op::Tick(6000, &[]),
            expect: ticked(0, 1, false),
            holders: h_held,
            waiters: &[],
        },
        Case {
            name: "tick drops a dead blocked waiter, keeps the rest",
            kind: Kind::Fair,
            setup: &three,
            action: Op::Tick(2000, &[1]),
            expect: ticked(0, 1, false),
            holders: h_held,
            waiters: &[(2, "b", X, false, 6000), (3, "c", X, true, 9000)],
        },
        Case {
            name: "liveness does not apply to queued places",
            kind: Kind::Fair,
            setup: &three,
            action: Op::Tick(2000, &[2]),
            expect: ticked(0, 0, false),
            holders: h_held,
            waiters: &[
                (1, "a", X, true, 9000),
                (2, "b", X, false, 6000),
                (3, "c", X, true, 9000),
            ],
        },
        Case {
            name: "tick drops a timed-out queued place and a dead blocked waiter",
            kind: Kind::Fair,
            setup: &three,
            action: Op::Tick(6000, &[3]),
            expect: ticked(0, 2, false),
            holders: h_held,
            waiters: &[(1, "a", X, true, 9000)],
        },
        Case {
            name: "tick: lease end and queue timeout together",
            kind: Kind::Fair,
            setup: &three,
            action: Op::Tick(11_000, &[]),
            expect: ticked(1, 1, true),
            holders: &[],
            waiters: &[(1, "a", X, true, 9000), (3, "c", X, true, 9000)],
        },
        Case {
            name: "mix: blocked waiter denied behind a polling owner",
            kind: Kind::Fair,
            setup: &mix,
            action: Op::Acq("b", X, Some(2), 1000, 100),
            expect: DENIED,
            holders: &[],
            waiters: &mix_rows,
        },
        Case {
            name: "mix: polling owner denied behind two places",
            kind: Kind::Fair,
            setup: &mix,
            action: Op::Acq("c", X, None, 1000, 100),
            expect: DENIED,
            holders: &[],
            waiters: &mix_rows,
        },
        Case {
            name: "mix: newcomer denied",
            kind: Kind::Fair,
            setup: &mix,
            action: Op::Acq("d", X, None, 1000, 100),
            expect: DENIED,
            holders: &[],
            waiters: &mix_rows,
        },
        Case {
            name: "mix: first polling owner granted",
            kind: Kind::Fair,
            setup: &mix,
            action: Op::Acq("a", X, None, 1000, 100),
            expect: granted(2),
            holders: &[("a", X, 1, 1100, 2)],
            waiters: &mix_rows[1..],
        },
        Case {
            name: "mix: after a, polling c still denied",
            kind: Kind::Fair,
            setup: &mix_a,
            action: Op::Acq("c", X, None, 1000, 100),
            expect: DENIED,
            holders: &[],
            waiters: &mix_rows[1..],
        },
        Case {
            name: "mix: after a, blocked b granted",
            kind: Kind::Fair,
            setup: &mix_a,
            action: Op::Acq("b", X, Some(2), 1000, 100),
            expect: granted(3),
            holders: &[("b", X, 1, 1100, 3)],
            waiters: &mix_rows[2..],
        },
        Case {
            name: "mix: after a and b, polling c granted",
            kind: Kind::Fair,
            setup: &mix_ab,
            action: Op::Acq("c", X, None, 1000, 100),
            expect: granted(4),
            holders: &[("c", X, 1, 1100, 4)],
            waiters: &[],
        },
        Case {
            name: "an owner whose place timed out asks again at the back",
            kind: Kind::Fair,
            setup: &requeued,
            action: Op::Rel("h", None),
            expect: released(true, true),
            holders: &[],
            waiters: &requeued_rows,
        },
        Case {
            name: "the re-queued owner waits behind the one that stayed",
            kind: Kind::Fair,
            setup: &cat(&[&requeued, &[Op::Rel("h", None)]]),
            action: Op::Acq("a", X, None, 2000, 100),
            expect: DENIED,
            holders: &[],
            waiters: &requeued_rows,
        },
        Case {
            name: "queued head granted once the lease ended",
            kind: Kind::Fair,
            setup: &[
                Op::Acq("h", X, None, 1000, 100),
                Op::Enq("a", X, 1, false, 6000),
                Op::Tick(1100, &[]),
            ],
            action: Op::Acq("a", X, None, 1100, 100),
            expect: granted(2),
            holders: &[("a", X, 1, 1200, 2)],
            waiters: &[],
        },
        Case {
            name: "acquire READ on a fair lock",
            kind: Kind::Fair,
            setup: &held,
            action: Op::Acq("a", R, None, 1000, 100),
            expect: acq_err(ModeNotApplicable),
            holders: h_held,
            waiters: &[],
        },
        Case {
            name: "release WRITE on a fair lock",
            kind: Kind::Fair,
            setup: &held,
            action: Op::Rel("h", Some(W)),
            expect: rel_err(ModeNotApplicable),
            holders: h_held,
            waiters: &[],
        },
        Case {
            name: "release by a queued owner",
            kind: Kind::Fair,
            setup: &a_queued,
            action: Op::Rel("a", None),
            expect: rel_err(NotHeld),
            holders: h_held,
            waiters: &[(1, "a", X, false, 6000)],
        },
    ];
    run_cases(&cases);
}

// ---------------------------------------------------------------------------
// Read-write lock
// ---------------------------------------------------------------------------

#[test]
fn rw_rules() {
    use LockError::*;
    let a_r = [Op::Acq("a", R, None, 1000, 100)];
    let a_w = [Op::Acq("a", W, None, 1000, 100)];
    let a_r_b_r = [
        Op::Acq("a", R, None, 1000, 100),
        Op::Acq("b", R, None, 1000, 100),
    ];
    let a_wr = [
        Op::Acq("a", W, None, 1000, 100),
        Op::Acq("a", R, None, 1000, 200),
    ];
    let ar_held: &[HoldRow] = &[("a", R, 1, 1100, 1)];
    let aw_held: &[HoldRow] = &[("a", W, 1, 1100, 1)];
    let two_readers: &[HoldRow] = &[("a", R, 1, 1100, 1), ("b", R, 1, 1100, 2)];
    let c_waits: WaitRow = (1, "c", W, true, 9000);
    let writer_queued = cat(&[&a_r, &[Op::Enq("c", W, 1, true, 9000)]]);
    // a and b read; a waits (blocked, id 1) to upgrade.
    let upgrading = cat(&[
        &a_r_b_r,
        &[
            Op::Acq("a", W, Some(1), 1000, 100),
            Op::Enq("a", W, 1, true, 9000),
        ],
    ]);
    let a_up: WaitRow = (1, "a", W, true, 9000);
    // a wrote; c (W), d (R), e (R) queued; a left.
    let rq = cat(&[
        &a_w,
        &[
            Op::Enq("c", W, 1, true, 9000),
            Op::Enq("d", R, 2, true, 9000),
            Op::Enq("e", R, 3, true, 9000),
            Op::Rel("a", None),
        ],
    ]);
    let (qc, qd, qe) = (
        (1, "c", W, true, 9000),
        (2, "d", R, true, 9000),
        (3, "e", R, true, 9000),
    );
    let rq_c = cat(&[&rq, &[Op::Acq("c", W, Some(1), 1000, 100)]]);
    let rq_c_gone = cat(&[&rq_c, &[Op::Rel("c", None)]]);
    let rq_c_gone_d = cat(&[&rq_c_gone, &[Op::Acq("d", R, Some(2), 1000, 100)]]);
    // a wrote; d (R), c (W), e (R) queued; a left.
    let q2 = cat(&[
        &a_w,
        &[
            Op::Enq("d", R, 1, true, 9000),
            Op::Enq("c", W, 2, true, 9000),
            Op::Enq("e", R, 3, true, 9000),
            Op::Rel("a", None),
        ],
    ]);
    let q2_d = cat(&[&q2, &[Op::Acq("d", R, Some(1), 1000, 100)]]);
    let q2_rows = [
        (1, "d", R, true, 9000),
        (2, "c", W, true, 9000),
        (3, "e", R, true, 9000),
    ];
    let two_leases = [
        Op::Acq("a", R, None, 1000, 100),
        Op::Acq("b", R, None, 1000, 500),
    ];
    let own_two_leases = [
        Op::Acq("a", W, None, 1000, 100),
        Op::Acq("a", R, None, 1000, 500),
    ];
    let cases = [
        Case {
            name: "READ on a free lock",
            kind: Kind::Rw,
            setup: &[],
            action: Op::Acq("a", R, None, 1000, 100),
            expect: granted(1),
            holders: ar_held,
            waiters: &[],
        },
        Case {
            name: "READ is shared among owners",
            kind: Kind::Rw,
            setup: &a_r,
            action: Op::Acq("b", R, None, 1000, 200),
            expect: granted(2),
            holders: &[("a", R, 1, 1100, 1), ("b", R, 1, 1200, 2)],
            waiters: &[],
        },
        Case {
            name: "READ is reentrant",
            kind: Kind::Rw,
            setup: &a_r,
            action: Op::Acq("a", R, None, 1050, 300),
            expect: reentered(1),
            holders: &[("a", R, 2, 1350, 1)],
            waiters: &[],
        },
        Case {
            name: "WRITE on a free lock",
            kind: Kind::Rw,
            setup: &[],
            action: Op::Acq("a", W, None, 1000, 100),
            expect: granted(1),
            holders: aw_held,
            waiters: &[],
        },
        Case {
            name: "WRITE is reentrant",
            kind: Kind::Rw,
            setup: &a_w,
            action: Op::Acq("a", W, None, 1050, 300),
            expect: reentered(1),
            holders: &[("a", W, 2, 1350, 1)],
            waiters: &[],
        },
        Case {
            name: "WRITE excludes another writer",
            kind: Kind::Rw,
            setup: &a_w,
            action: Op::Acq("b", W, None, 1000, 100),
            expect: DENIED,
            holders: aw_held,
            waiters: &[],
        },
        Case {
            name: "WRITE excludes another reader",
            kind: Kind::Rw,
            setup: &a_w,
            action: Op::Acq("b", R, None, 1000, 100),
            expect: DENIED,
            holders: aw_held,
            waiters: &[],
        },
        Case {
            name: "READ excludes another writer",
            kind: Kind::Rw,
            setup: &a_r,
            action: Op::Acq("b", W, None, 1000, 100),
            expect: DENIED,
            holders: ar_held,
            waiters: &[],
        },
        Case {
            name: "two readers exclude a third owner's WRITE",
            kind: Kind::Rw,
            setup: &a_r_b_r,
            action: Op::Acq("c", W, None, 1000, 100),
            expect: DENIED,
            holders: two_readers,
            waiters: &[],
        },
        Case {
            name: "downgrade: the writer takes READ at once with a new token",
            kind: Kind::Rw,
            setup: &a_w,
            action: Op::Acq("a", R, None, 1010, 50),
            expect: granted(2),
            holders: &[("a", W, 1, 1100, 1), ("a", R, 1, 1060, 2)],
            waiters: &[],
        },
        Case {
            name: "downgrade at once even with a writer queued",
            kind: Kind::Rw,
            setup: &cat(&[&a_w, &[Op::Enq("c", W, 1, true, 9000)]]),
            action: Op::Acq("a", R, None, 1000, 100),
            expect: granted(2),
            holders: &[("a", W, 1, 1100, 1), ("a", R, 1, 1100, 2)],
            waiters: &[c_waits],
        },
        Case {
            name: "upgrade by the only reader",
            kind: Kind::Rw,
            setup: &a_r,
            action: Op::Acq("a", W, None, 1010, 50),
            expect: granted(2),
            holders: &[("a", R, 1, 1100, 1), ("a", W, 1, 1060, 2)],
            waiters: &[],
        },
        Case {
            name: "upgrade by the only reader goes ahead of queued writers",
            kind: Kind::Rw,
            setup: &cat(&[&writer_queued, &[Op::Enq("d", W, 2, true, 9000)]]),
            action: Op::Acq("a", W, None, 1000, 100),
            expect: granted(2),
            holders: &[("a", R, 1, 1100, 1), ("a", W, 1, 1100, 2)],
            waiters: &[c_waits, (2, "d", W, true, 9000)],
        },
        Case {
            name: "upgrade denied while another reader holds",
            kind: Kind::Rw,
            setup: &a_r_b_r,
            action: Op::Acq("a", W, None, 1000, 100),
            expect: DENIED,
            holders: two_readers,
            waiters: &[],
        },
        Case {
            name: "the waiting upgrader is granted once the other reader left",
            kind: Kind::Rw,
            setup: &cat(&[&upgrading, &[Op::Rel("b", None)]]),
            action: Op::Acq("a", W, Some(1), 1000, 100),
            expect: granted(3),
            holders: &[("a", R, 1, 1100, 1), ("a", W, 1, 1100, 3)],
            waiters: &[],
        },
        Case {
            name: "a second reader asking WRITE while one waits to upgrade",
            kind: Kind::Rw,
            setup: &upgrading,
            action: Op::Acq("b", W, None, 1000, 100),
            expect: acq_err(UpgradeDeadlock),
            holders: two_readers,
            waiters: &[a_up],
        },
        Case {
            name: "a second reader asking WRITE as a waiter",
            kind: Kind::Rw,
            setup: &upgrading,
            action: Op::Acq("b", W, Some(2), 1000, 100),
            expect: acq_err(UpgradeDeadlock),
            holders: two_readers,
            waiters: &[a_up],
        },
        Case {
            name: "a non-reader asking WRITE while a reader waits to upgrade",
            kind: Kind::Rw,
            setup: &upgrading,
            action: Op::Acq("c", W, None, 1000, 100),
            expect: DENIED,
            holders: two_readers,
            waiters: &[a_up],
        },
        Case {
            name: "an upgrader behind a plain writer is no deadlock",
            kind: Kind::Rw,
            setup: &cat(&[&a_r_b_r, &[Op::Enq("c", W, 1, true, 9000)]]),
            action: Op::Acq("a", W, Some(2), 1000, 100),
            expect: DENIED,
            holders: two_readers,
            waiters: &[c_waits],
        },
        Case {
            name: "when the upgrade wait ended the other reader may wait",
            kind: Kind::Rw,
            setup: &cat(&[&upgrading, &[Op::Ended(1, 7000)]]),
            action: Op::Acq("b", W, None, 1000, 100),
            expect: DENIED,
            holders: two_readers,
            waiters: &[],
        },
        Case {
            name: "wait_ended on an rw lock removes the place",
            kind: Kind::Rw,
            setup: &upgrading,
            action: Op::Ended(1, 7000),
            expect: Out::Ended(true),
            holders: two_readers,
            waiters: &[],
        },
        Case {
            name: "writer preference: a new reader is denied",
            kind: Kind::Rw,
            setup: &writer_queued,
            action: Op::Acq("b", R, None, 1000, 100),
            expect: DENIED,
            holders: ar_held,
            waiters: &[c_waits],
        },
        Case {
            name: "writer preference: a reader re-enters",
            kind: Kind::Rw,
            setup: &writer_queued,
            action: Op::Acq("a", R, None, 1000, 300),
            expect: reentered(1),
            holders: &[("a", R, 2, 1300, 1)],
            waiters: &[c_waits],
        },
        Case {
            name: "a reader behind a queued writer is denied",
            kind: Kind::Rw,
            setup: &rq,
            action: Op::Acq("d", R, Some(2), 1000, 100),
            expect: DENIED,
            holders: &[],
            waiters: &[qc, qd, qe],
        },
        Case {
            name: "a second reader behind a queued writer is denied",
            kind: Kind::Rw,
            setup: &rq,
            action: Op::Acq("e", R, Some(3), 1000, 100),
            expect: DENIED,
            holders: &[],
            waiters: &[qc, qd, qe],
        },
        Case {
            name: "a new writer waits behind the queue of a free lock",
            kind: Kind::Rw,
            setup: &rq,
            action: Op::Acq("f", W, None, 1000, 100),
            expect: DENIED,
            holders: &[],
            waiters: &[qc, qd, qe],
        },
        Case {
            name: "the queued writer at the head is granted",
            kind: Kind::Rw,
            setup: &rq,
            action: Op::Acq("c", W, Some(1), 1000, 100),
            expect: granted(2),
            holders: &[("c", W, 1, 1100, 2)],
            waiters: &[qd, qe],
        },
        Case {
            name: "readers stay denied while the writer holds",
            kind: Kind::Rw,
            setup: &rq_c,
            action: Op::Acq("d", R, Some(2), 1000, 100),
            expect: DENIED,
            holders: &[("c", W, 1, 1100, 2)],
            waiters: &[qd, qe],
        },
        Case {
            name: "after the writer left the first reader is granted",
            kind: Kind::Rw,
            setup: &rq_c_gone,
            action: Op::Acq("d", R, Some(2), 1000, 100),
            expect: granted(3),
            holders: &[("d", R, 1, 1100, 3)],
            waiters: &[qe],
        },
        Case {
            name: "after the writer left the second reader is grantable too",
            kind: Kind::Rw,
            setup: &rq_c_gone,
            action: Op::Acq("e", R, Some(3), 1000, 100),
            expect: granted(3),
            holders: &[("e", R, 1, 1100, 3)],
            waiters: &[qd],
        },
        Case {
            name: "readers at the head are granted together",
            kind: Kind::Rw,
            setup: &rq_c_gone_d,
            action: Op::Acq("e", R, Some(3), 1000, 100),
            expect: granted(4),
            holders: &[("d", R, 1, 1100, 3), ("e", R, 1, 1100, 4)],
            waiters: &[],
        },
        Case {
            name: "a reader at the head ahead of a writer is granted",
            kind: Kind::Rw,
            setup: &q2,
            action: Op::Acq("d", R, Some(1), 1000, 100),
            expect: granted(2),
            holders: &[("d", R, 1, 1100, 2)],
            waiters: &q2_rows[1..],
        },
        Case {
            name: "the writer behind a granted reader waits for it",
            kind: Kind::Rw,
            setup: &q2_d,
            action: Op::Acq("c", W, Some(2), 1000, 100),
            expect: DENIED,
            holders: &[("d", R, 1, 1100, 2)],
            waiters: &q2_rows[1..],
        },
        Case {
            name: "a reader behind that writer waits too",
            kind: Kind::Rw,
            setup: &q2_d,
            action: Op::Acq("e", R, Some(3), 1000, 100),
            expect: DENIED,
            holders: &[("d", R, 1, 1100, 2)],
            waiters: &q2_rows[1..],
        },
        Case {
            name: "a new reader passes queued readers when no writer waits",
            kind: Kind::Rw,
            setup: &cat(&[&a_w, &[Op::Enq("d", R, 1, true, 9000), Op::Rel("a", None)]]),
            action: Op::Acq("e", R, None, 1000, 100),
            expect: granted(2),
            holders: &[("e", R, 1, 1100, 2)],
            waiters: &[(1, "d", R, true, 9000)],
        },
        Case {
            name: "release without a mode of READ and WRITE",
            kind: Kind::Rw,
            setup: &a_wr,
            action: Op::Rel("a", None),
            expect: rel_err(ModeRequired),
            holders: &[("a", W, 1, 1100, 1), ("a", R, 1, 1200, 2)],
            waiters: &[],
        },
        Case {
            name: "release WRITE leaves READ",
            kind: Kind::Rw,
            setup: &a_wr,
            action: Op::Rel("a", Some(W)),
            expect: released(true, true),
            holders: &[("a", R, 1, 1200, 2)],
            waiters: &[],
        },
        Case {
            name: "release READ leaves WRITE",
            kind: Kind::Rw,
            setup: &a_wr,
            action: Op::Rel("a", Some(R)),
            expect: released(true, false),
            holders: aw_held,
            waiters: &[],
        },
        Case {
            name: "release without a mode of the only hold",
            kind: Kind::Rw,
            setup: &a_r,
            action: Op::Rel("a", None),
            expect: released(true, true),
            holders: &[],
            waiters: &[],
        },
        Case {
            name: "release of a reentrant READ",
            kind: Kind::Rw,
            setup: &cat(&[&a_r, &a_r]),
            action: Op::Rel("a", Some(R)),
            expect: released(false, false),
            holders: ar_held,
            waiters: &[],
        },
        Case {
            name: "release READ by a writer",
            kind: Kind::Rw,
            setup: &a_w,
            action: Op::Rel("a", Some(R)),
            expect: rel_err(NotHeld),
            holders: aw_held,
            waiters: &[],
        },
        Case {
            name: "release WRITE by a reader",
            kind: Kind::Rw,
            setup: &a_r,
            action: Op::Rel("a", Some(W)),
            expect: rel_err(NotHeld),
            holders: ar_held,
            waiters: &[],
        },
        Case {
            name: "release by a non-holder of an rw lock",
            kind: Kind::Rw,
            setup: &a_r,
            action: Op::Rel("b", None),
            expect: rel_err(NotHeld),
            holders: ar_held,
            waiters: &[],
        },
        Case {
            name: "release of the exclusive mode on an rw lock",
            kind: Kind::Rw,
            setup: &a_r,
            action: Op::Rel("a", Some(X)),
            expect: rel_err(ModeNotApplicable),
            holders: ar_held,
            waiters: &[],
        },
        Case {
            name: "acquire of the exclusive mode on an rw lock",
            kind: Kind::Rw,
            setup: &[],
            action: Op::Acq("a", X, None, 1000, 100),
            expect: acq_err(ModeNotApplicable),
            holders: &[],
            waiters: &[],
        },
        Case {
            name: "a reader leaving one other reader frees (it may upgrade)",
            kind: Kind::Rw,
            setup: &a_r_b_r,
            action: Op::Rel("a", None),
            expect: released(true, true),
            holders: &[("b", R, 1, 1100, 2)],
            waiters: &[],
        },
        Case {
            name: "a reader leaving two other readers does not free",
            kind: Kind::Rw,
            setup: &cat(&[&a_r_b_r, &[Op::Acq("c", R, None, 1000, 100)]]),
            action: Op::Rel("a", None),
            expect: released(true, false),
            holders: &[("b", R, 1, 1100, 2), ("c", R, 1, 1100, 3)],
            waiters: &[],
        },
        Case {
            name: "one lease per hold: only the ended reader is removed",
            kind: Kind::Rw,
            setup: &two_leases,
            action: Op::Tick(1100, &[]),
            expect: ticked(1, 0, true),
            holders: &[("b", R, 1, 1500, 2)],
            waiters: &[],
        },
        Case {
            name: "one lease per hold: an owner's WRITE ends, its READ stays",
            kind: Kind::Rw,
            setup: &own_two_leases,
            action: Op::Tick(1100, &[]),
            expect: ticked(1, 0, true),
            holders: &[("a", R, 1, 1500, 2)],
            waiters: &[],
        },
        Case {
            name: "one lease per hold: one of three readers ends",
            kind: Kind::Rw,
            setup: &cat(&[&two_leases, &[Op::Acq("c", R, None, 1000, 500)]]),
            action: Op::Tick(1100, &[]),
            expect: ticked(1, 0, false),
            holders: &[("b", R, 1, 1500, 2), ("c", R, 1, 1500, 3)],
            waiters: &[],
        },
        Case {
            name: "renew restarts every hold of the owner",
            kind: Kind::Rw,
            setup: &own_two_leases,
            action: Op::Renew("a", 1050, 1000),
            expect: Out::Renewed(true),
            holders: &[("a", W, 1, 2050, 1), ("a", R, 1, 2050, 2)],
            waiters: &[],
        },
        Case {
            name: "renew touches only the owner's holds",
            kind: Kind::Rw,
            setup: &two_leases,
            action: Op::Renew("a", 1050, 1000),
            expect: Out::Renewed(true),
            holders: &[("a", R, 1, 2050, 1), ("b", R, 1, 1500, 2)],
            waiters: &[],
        },
        Case {
            name: "force release drops all readers",
            kind: Kind::Rw,
            setup: &a_r_b_r,
            action: Op::Force,
            expect: Out::Forced(true),
            holders: &[],
            waiters: &[],
        },
    ];
    run_cases(&cases);
}

// ---------------------------------------------------------------------------
// Small API pieces
// ---------------------------------------------------------------------------

#[test]
fn kinds_and_modes() {
    // (kind, mode, allowed)
    let table = [
        (Kind::Mutex, X, true),
        (Kind::Mutex, R, false),
        (Kind::Mutex, W, false),
        (Kind::Fair, X, true),
        (Kind::Fair, R, false),
        (Kind::Fair, W, false),
        (Kind::Rw, X, false),
        (Kind::Rw, R, true),
        (Kind::Rw, W, true),
    ];
    for (kind, mode, allowed) in table {
        assert_eq!(kind.allows(mode), allowed, "{kind:?} {mode:?}");
    }
    let names = [
        (Kind::Mutex, "mutex"),
        (Kind::Rw, "rw"),
        (Kind::Fair, "fair"),
    ];
    for (kind, name) in names {
        assert_eq!(kind.name(), name);
        assert_eq!(Kind::from_code(kind.code()), Some(kind));
    }
    for (mode, name) in [(X, "exclusive"), (R, "read"), (W, "write")] {
        assert_eq!(mode.name(), name);
        assert_eq!(Mode::from_code(mode.code()), Some(mode));
    }
    // Semaphores and latches: tests_semaphore.rs and tests_latch.rs.
    for c in 5..=255u8 {
        assert_eq!(Kind::from_code(c), None);
        assert_eq!(Mode::from_code(c), None);
    }
}

#[test]
fn check_kind_names_the_kind_found() {
    for found in [Kind::Mutex, Kind::Rw, Kind::Fair] {
        let lock = Lock::new(found);
        for wanted in [Kind::Mutex, Kind::Rw, Kind::Fair] {
            let want = if wanted == found {
                Ok(())
            } else {
                Err(LockError::WrongKind { found })
            };
            assert_eq!(lock.check_kind(wanted), want);
        }
    }
}

#[test]
fn emptiness_and_waiter_queries() {
    let mut lock = Lock::new(Kind::Fair);
    let mut tokens = Tokens::default();
    assert!(lock.is_empty());
    assert!(!lock.has_blocked());
    assert_eq!(lock.kind(), Kind::Fair);
    assert_eq!(lock.last_token(), 0);
    let small = lock.mem_usage();
    apply(&mut lock, &mut tokens, Op::Acq("h", X, None, 1000, 100));
    assert!(!lock.is_empty());
    apply(&mut lock, &mut tokens, Op::Enq("a", X, 1, false, 6000));
    assert!(!lock.has_blocked());
    assert!(lock.has_waiter(1));
    assert!(!lock.has_waiter(2));
    apply(&mut lock, &mut tokens, Op::Enq("b", X, 2, true, 6000));
    assert!(lock.has_blocked());
    assert!(lock.has_waiter(2));
    assert!(lock.mem_usage() > small);
    apply(&mut lock, &mut tokens, Op::Ended(2, 7000));
    assert!(!lock.has_blocked());
    apply(&mut lock, &mut tokens, Op::Rel("h", None));
    assert!(!lock.is_empty(), "waiters keep the lock");
    apply(&mut lock, &mut tokens, Op::Tick(7000, &[]));
    assert!(lock.is_empty());
    assert_eq!(lock.last_token(), 1, "the lock remembers its last token");
}

// ---------------------------------------------------------------------------
// next_deadline
// ---------------------------------------------------------------------------

#[test]
fn next_deadline_cases() {
    struct DeadlineCase<'a> {
        name: &'a str,
        kind: Kind,
        setup: &'a [Op],
        want: Option<u64>,
    }
    let cases = [
        DeadlineCase {
            name: "empty lock",
            kind: Kind::Mutex,
            setup: &[],
            want: None,
        },
        DeadlineCase {
            name: "one holder",
            kind: Kind::Mutex,
            setup: &[Op::Acq("a", X, None, 1000, 100)],
            want: Some(1100),
        },
        DeadlineCase {
            name: "earliest of two readers",
            kind: Kind::Rw,
            setup: &[
                Op::Acq("a", R, None, 1000, 500),
                Op::Acq("b", R, None, 1000, 100),
            ],
            want: Some(1100),
        },
        DeadlineCase {
            name: "earliest of one owner's two holds",
            kind: Kind::Rw,
            setup: &[
                Op::Acq("a", W, None, 1000, 500),
                Op::Acq("a", R, None, 1000, 300),
            ],
            want: Some(1300),
        },
        DeadlineCase {
            name: "a queued place before the lease end",
            kind: Kind::Fair,
            setup: &[
                Op::Acq("h", X, None, 1000, 10_000),
                Op::Enq("a", X, 1, false, 6000),
            ],
            want: Some(6000),
        },
        DeadlineCase {
            name: "the lease end before a queued place",
            kind: Kind::Fair,
            setup: &[
                Op::Acq("h", X, None, 1000, 100),
                Op::Enq("a", X, 1, false, 6000),
            ],
            want: Some(1100),
        },
        DeadlineCase {
            name: "only blocked waiters",
            kind: Kind::Mutex,
            setup: &[
                Op::Acq("h", X, None, 1000, 100),
                Op::Enq("a", X, 1, true, 50),
                Op::Enq("b", X, 2, true, 60),
                Op::Rel("h", None),
            ],
            want: None,
        },
        DeadlineCase {
            name: "an earlier blocked waiter does not count",
            kind: Kind::Mutex,
            setup: &[
                Op::Acq("h", X, None, 1000, 100),
                Op::Enq("a", X, 1, true, 50),
            ],
            want: Some(1100),
        },
        DeadlineCase {
            name: "queued place among blocked waiters",
            kind: Kind::Fair,
            setup: &[
                Op::Acq("h", X, None, 1000, 100),
                Op::Enq("a", X, 1, true, 50),
                Op::Enq("b", X, 2, false, 6000),
                Op::Rel("h", None),
            ],
            want: Some(6000),
        },
        DeadlineCase {
            name: "a place whose wait ended counts",
            kind: Kind::Fair,
            setup: &[
                Op::Acq("h", X, None, 1000, 10_000),
                Op::Enq("a", X, 1, true, 50),
                Op::Ended(1, 3000),
            ],
            want: Some(3000),
        },
        DeadlineCase {
            name: "a renewed lease moves the deadline",
            kind: Kind::Mutex,
            setup: &[Op::Acq("a", X, None, 1000, 100), Op::Renew("a", 1050, 900)],
            want: Some(1950),
        },
    ];
    for c in &cases {
        let mut lock = Lock::new(c.kind);
        let mut tokens = Tokens::default();
        for op in c.setup {
            apply(&mut lock, &mut tokens, *op);
        }
        assert_eq!(lock.next_deadline(), c.want, "case {:?}", c.name);
    }
}

// ---------------------------------------------------------------------------
// Fencing tokens
// ---------------------------------------------------------------------------

#[test]
fn token_issue_table() {
    // (last, floor, now_us, result, last afterwards)
    let exhausted = Err(LockError::TokensExhausted);
    type Row = (u64, u64, u64, Result<u64, LockError>, u64);
    let table: [Row; 16] = [
        (0, 0, 0, Ok(1), 1),
        (5, 0, 0, Ok(6), 6),
        (5, 10, 0, Ok(11), 11),
        (10, 5, 0, Ok(11), 11),
        (5, 10, 100, Ok(100), 100),
        (200, 10, 100, Ok(201), 201),
        (100, 0, 100, Ok(101), 101),
        (0, 0, MAX_TOKEN, Ok(MAX_TOKEN), MAX_TOKEN),
        (MAX_TOKEN - 1, 0, 0, Ok(MAX_TOKEN), MAX_TOKEN),
        (0, MAX_TOKEN - 1, 0, Ok(MAX_TOKEN), MAX_TOKEN),
        (0, 0, MAX_TOKEN + 1, exhausted, 0),
        (MAX_TOKEN, 0, 0, exhausted, MAX_TOKEN),
        (0, MAX_TOKEN, 0, exhausted, 0),
        (u64::MAX, 0, 0, exhausted, u64::MAX),
        (0, u64::MAX, 0, exhausted, 0),
        (0, 0, u64::MAX, exhausted, 0),
    ];
    for (last, floor, now_us, want, last_after) in table {
        let mut t = Tokens { last };
        assert_eq!(
            t.issue(floor, now_us),
            want,
            "issue({floor}, {now_us}) after {last}"
        );
        assert_eq!(
            t.last, last_after,
            "counter after issue({floor}, {now_us}) after {last}"
        );
    }
}

#[test]
fn tokens_strictly_increase() {
    let mut t = Tokens::default();
    let mut prev = 0;
    let mut rng = Rng::new(7);
    for _ in 0..10_000 {
        // The clock may jump back and forth; tokens never do.
        let now_us = match rng.below(4) {
            0 => 0,
            1 => prev,
            2 => prev + rng.below(1000),
            _ => rng.below(prev + 1),
        };
        let floor = rng.below(prev + 2);
        let token = t.issue(floor, now_us).unwrap();
        assert!(token > prev, "{token} after {prev}");
        assert!(token > floor);
        assert!(token >= now_us);
        prev = token;
    }
}

#[test]
fn tokens_across_locks_sharing_one_counter() {
    let mut tokens = Tokens::default();
    let mut locks = [
        Lock::new(Kind::Mutex),
        Lock::new(Kind::Rw),
        Lock::new(Kind::Fair),
    ];
    let modes = [X, W, X];
    let mut prev = 0;
    let mut now_us = 1_000_000;
    for round in 0..300u64 {
        let i = (round % 3) as usize;
        if round % 7 == 0 {
            now_us += 5_000; // the clock moves ahead of the counter
        }
        let req = Request {
            owner: b"o",
            mode: modes[i],
            lease_ms: 100,
            waiter: None,
        };
        let got = locks[i].acquire(&req, 1000, &mut tokens, now_us);
        let Ok(Grant::Granted {
            token,
            reentrant: false,
        }) = got
        else {
            panic!("round {round}: {got:?}");
        };
        assert!(token > prev, "round {round}: {token} after {prev}");
        assert!(token >= now_us, "round {round}: token below the clock");
        assert_eq!(locks[i].last_token(), token);
        assert_eq!(
            locks[i].release(b"o", None),
            Ok(Released {
                gone: true,
                freed: true
            })
        );
        prev = token;
        // Deleting the key (a new, empty lock) does not reset tokens.
        if round % 5 == 0 {
            locks[i] = Lock::new(locks[i].kind());
        }
    }
}

#[test]
fn tokens_floor_and_observe() {
    // The lock's own last token is a floor, even for a fresh counter.
    let payload = Raw::new(0, 500).waiter(1, b"w", 0, 1).bytes();
    let (mut lock, floor) = decode(&payload).unwrap();
    assert_eq!(floor, 9);
    let mut tokens = Tokens::default();
    let req = Request {
        owner: b"w",
        mode: X,
        lease_ms: 100,
        waiter: Some(1),
    };
    let got = lock.acquire(&req, 1000, &mut tokens, 0);
    assert_eq!(
        got,
        Ok(Grant::Granted {
            token: 501,
            reentrant: false
        })
    );
    assert_eq!(tokens.last, 501);

    // observe() raises the counter, never lowers it.
    let mut t = Tokens::default();
    t.observe(1000);
    assert_eq!(t.last, 1000);
    t.observe(10);
    assert_eq!(t.last, 1000);
    assert_eq!(t.issue(0, 0), Ok(1001));
    t.observe(1001);
    assert_eq!(t.issue(0, 0), Ok(1002));
    t.observe(5000);
    assert_eq!(t.issue(0, 0), Ok(5001));
}

#[test]
fn tokens_exhausted_changes_nothing() {
    for (kind, mode) in [
        (Kind::Mutex, X),
        (Kind::Rw, R),
        (Kind::Rw, W),
        (Kind::Fair, X),
    ] {
        let mut lock = Lock::new(kind);
        let mut tokens = Tokens { last: MAX_TOKEN };
        let req = Request {
            owner: b"a",
            mode,
            lease_ms: 100,
            waiter: None,
        };
        let before = lock.clone();
        assert_eq!(
            lock.acquire(&req, 1000, &mut tokens, 0),
            Err(LockError::TokensExhausted)
        );
        assert_eq!(lock, before);
        assert_eq!(tokens.last, MAX_TOKEN);
        // A clock beyond the token range exhausts as well.
        let mut tokens = Tokens::default();
        assert_eq!(
            lock.acquire(&req, 1000, &mut tokens, MAX_TOKEN + 1),
            Err(LockError::TokensExhausted)
        );
        assert_eq!(lock, before);
        assert_eq!(tokens, Tokens::default());
    }
}

#[test]
fn reentrant_grant_reuses_the_token_even_when_exhausted() {
    let payload = Raw::new(0, 7).holder(b"a", 0, 3, 7).bytes();
    let (mut lock, _) = decode(&payload).unwrap();
    let mut tokens = Tokens { last: MAX_TOKEN };
    let req = Request {
        owner: b"a",
        mode: X,
        lease_ms: 100,
        waiter: None,
    };
    assert_eq!(
        lock.acquire(&req, 1000, &mut tokens, u64::MAX),
        Ok(Grant::Granted {
            token: 7,
            reentrant: true
        })
    );
    assert_eq!(lock.holders()[0].count, 4);
    assert_eq!(lock.holders()[0].expires_at, 1100);
    assert_eq!(tokens.last, MAX_TOKEN);
}

#[test]
fn count_overflow_changes_nothing() {
    let max = u64::from(u32::MAX);
    // (kind, mode code, mode)
    for (kind, code, mode) in [(0u8, 0u8, X), (1, 1, R), (1, 2, W), (2, 0, X)] {
        let payload = Raw::new(kind, 1).holder(b"a", code, max, 1).bytes();
        let (mut lock, _) = decode(&payload).unwrap();
        assert_eq!(lock.holders()[0].count, u32::MAX);
        let mut tokens = Tokens { last: 1 };
        let req = Request {
            owner: b"a",
            mode,
            lease_ms: 100,
            waiter: None,
        };
        let before = lock.clone();
        assert_eq!(
            lock.acquire(&req, 1000, &mut tokens, 0),
            Err(LockError::CountOverflow)
        );
        assert_eq!(lock, before, "{mode:?}");
        assert_eq!(tokens.last, 1);
        // One release makes room for one more reentrant grant.
        assert_eq!(
            lock.release(b"a", Some(mode)),
            Ok(Released {
                gone: false,
                freed: false
            })
        );
        assert_eq!(lock.holders()[0].count, u32::MAX - 1);
        assert_eq!(
            lock.acquire(&req, 1000, &mut tokens, 0),
            Ok(Grant::Granted {
                token: 1,
                reentrant: true
            })
        );
        assert_eq!(lock.holders()[0].count, u32::MAX);
    }
}

// ---------------------------------------------------------------------------
// Codec
// ---------------------------------------------------------------------------

fn leb(out: &mut Vec<u8>, mut v: u64) {
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

/// A payload written by hand (independently of `encode`), so that it can
/// also say things `encode` never would.
#[derive(Clone, Debug)]
struct Raw {
    version: u8,
    kind: u8,
    last_token: u64,
    floor: u64,
    n_holders: Option<u64>,
    holders: Vec<RawHolder>,
    n_waiters: Option<u64>,
    waiters: Vec<RawWaiter>,
    trailing: Vec<u8>,
}

#[derive(Clone, Debug)]
struct RawHolder {
    owner: Vec<u8>,
    mode: u8,
    count: u64,
    expires_at: u64,
    token: u64,
}

#[derive(Clone, Debug)]
struct RawWaiter {
    id: u64,
    owner: Vec<u8>,
    mode: u8,
    blocked: u8,
    expires_at: u64,
}

impl Raw {
    fn new(kind: u8, last_token: u64) -> Raw {
        Raw {
            version: 1,
            kind,
            last_token,
            floor: 9,
            n_holders: None,
            holders: Vec::new(),
            n_waiters: None,
            waiters: Vec::new(),
            trailing: Vec::new(),
        }
    }

    fn holder(mut self, owner: &[u8], mode: u8, count: u64, token: u64) -> Raw {
        self.holders.push(RawHolder {
            owner: owner.to_vec(),
            mode,
            count,
            expires_at: 5000,
            token,
        });
        self
    }

    fn waiter(mut self, id: u64, owner: &[u8], mode: u8, blocked: u8) -> Raw {
        self.waiters.push(RawWaiter {
            id,
            owner: owner.to_vec(),
            mode,
            blocked,
            expires_at: 6000,
        });
        self
    }

    fn with(mut self, f: impl FnOnce(&mut Raw)) -> Raw {
        f(&mut self);
        self
    }

    fn bytes(&self) -> Vec<u8> {
        let mut out = vec![self.version, self.kind];
        leb(&mut out, self.last_token);
        leb(&mut out, self.floor);
        leb(
            &mut out,
            self.n_holders.unwrap_or(self.holders.len() as u64),
        );
        for h in &self.holders {
            leb(&mut out, h.owner.len() as u64);
            out.extend_from_slice(&h.owner);
            out.push(h.mode);
            leb(&mut out, h.count);
            leb(&mut out, h.expires_at);
            leb(&mut out, h.token);
        }
        leb(
            &mut out,
            self.n_waiters.unwrap_or(self.waiters.len() as u64),
        );
        for w in &self.waiters {
            leb(&mut out, w.id);
            leb(&mut out, w.owner.len() as u64);
            out.extend_from_slice(&w.owner);
            out.push(w.mode);
            out.push(w.blocked);
            leb(&mut out, w.expires_at);
        }
        out.extend_from_slice(&self.trailing);
        out
    }
}

#[test]
fn codec_golden_bytes() {
    let mut lock = Lock::new(Kind::Mutex);
    let mut tokens = Tokens::default();
    apply(&mut lock, &mut tokens, Op::Acq("a", X, None, 200, 100));
    // version 1, mutex, last_token 1, floor 2, one holder "a" exclusive,
    // count 1, expires 300 (0xac 0x02), token 1, no waiters.
    let want = vec![1, 0, 1, 2, 1, 1, b'a', 0, 1, 0xac, 0x02, 1, 0];
    assert_eq!(encode(&lock, 2), want);
    assert_eq!(decode(&want), Ok((lock, 2)));
}

#[test]
fn codec_hand_written_payload_matches_encode() {
    let raw = Raw::new(1, 70_000)
        .holder(b"alice", 2, 3, 69_999)
        .holder(b"alice", 1, 1, 70_000)
        .waiter(12, b"bob", 2, 1)
        .waiter(300, &[0u8, 255, 7], 1, 0)
        .with(|r| r.floor = 1 << 40);
    let bytes = raw.bytes();
    let (lock, floor) = decode(&bytes).unwrap();
    assert_eq!(floor, 1 << 40);
    assert_eq!(lock.kind(), Kind::Rw);
    assert_eq!(lock.last_token(), 70_000);
    assert_eq!(lock.indexed_at, 0);
    assert_eq!(
        hold_rows(&lock),
        vec![
            ("alice".to_string(), W, 3, 5000, 69_999),
            ("alice".to_string(), R, 1, 5000, 70_000),
        ]
    );
    assert_eq!(lock.waiters().len(), 2);
    assert_eq!(
        lock.waiters()[1],
        Waiter {
            id: 300,
            owner: vec![0u8, 255, 7].into(),
            mode: R,
            blocked: false,
            expires_at: 6000,
            permits: 1,
        }
    );
    assert_eq!(encode(&lock, floor), bytes);
}

/// The ways a payload must be refused: (name, payload, words of the error).
fn rejected_payloads() -> Vec<(&'static str, Vec<u8>, &'static str)> {
    let ok = Raw::new(0, 5).holder(b"a", 0, 1, 5);
    let long = [b'o'; MAX_OWNER_LEN + 1];
    let two = |kind: u8, m1: u8, o2: &[u8], m2: u8| {
        Raw::new(kind, 5)
            .holder(b"a", m1, 1, 4)
            .holder(o2, m2, 1, 5)
    };
    // A mutex holder whose count field is given as raw bytes.
    let count_bytes = |count: &[u8]| {
        let mut b = vec![1, 0, 1, 0, 1, 1, b'a', 0];
        b.extend_from_slice(count);
        b.extend_from_slice(&[5, 1, 0]);
        b
    };
    // A payload whose last_token field is given as raw bytes.
    let last_bytes = |field: &[u8]| {
        let mut b = vec![1, 0];
        b.extend_from_slice(field);
        b.extend_from_slice(&[0, 0, 1, 1, 1, b'w', 0, 1, 5]);
        b
    };
    let mut ff9 = vec![0xffu8; 9];
    ff9.push(0x02);
    let mut ff9c = vec![0xffu8; 9];
    ff9c.extend_from_slice(&[0x81, 0x00]);
    let mut zero10 = vec![0x80u8; 9];
    zero10.push(0x00);
    let mut umax = vec![0xffu8; 9];
    umax.push(0x01);
    vec![
        ("empty input", vec![], "truncated"),
        ("version only", vec![1], "truncated"),
        ("header only", vec![1, 0], "truncated"),
        (
            "version 0",
            ok.clone().with(|r| r.version = 0).bytes(),
            "version",
        ),
        (
            "version 4",
            ok.clone().with(|r| r.version = 4).bytes(),
            "version",
        ),
        (
            "version 255",
            ok.clone().with(|r| r.version = 255).bytes(),
            "version",
        ),
        ("kind 3", ok.clone().with(|r| r.kind = 3).bytes(), "kind"),
        (
            "kind 255",
            ok.clone().with(|r| r.kind = 255).bytes(),
            "kind",
        ),
        (
            "one trailing byte",
            ok.clone().with(|r| r.trailing = vec![0]).bytes(),
            "trailing",
        ),
        (
            "a second payload after the first",
            ok.clone().with(|r| r.trailing = ok.bytes()).bytes(),
            "trailing",
        ),
        (
            "holder owner length 0",
            Raw::new(0, 5).holder(b"", 0, 1, 5).bytes(),
            "owner length",
        ),
        (
            "holder owner length 513",
            Raw::new(0, 5).holder(&long, 0, 1, 5).bytes(),
            "owner length",
        ),
        (
            "waiter owner length 0",
            Raw::new(0, 5).waiter(1, b"", 0, 1).bytes(),
            "owner length",
        ),
        (
            "waiter owner length 513",
            Raw::new(0, 5).waiter(1, &long, 0, 1).bytes(),
            "owner length",
        ),
        (
            "owner longer than the payload",
            Raw::new(0, 5)
                .holder(b"a", 0, 1, 5)
                .with(|r| r.holders[0].owner = vec![b'a'; 40])
                .bytes()[..12]
                .to_vec(),
            "truncated",
        ),
        (
            "zero count",
            Raw::new(0, 5).holder(b"a", 0, 0, 5).bytes(),
            "count is zero",
        ),
        (
            "count u32::MAX + 1",
            Raw::new(0, 5).holder(b"a", 0, 1 << 32, 5).bytes(),
            "count is out of range",
        ),
        (
            "count u64::MAX",
            Raw::new(0, 5).holder(b"a", 0, u64::MAX, 5).bytes(),
            "count is out of range",
        ),
        (
            "holder lease end past MAX_INSTANT",
            Raw::new(0, 5)
                .holder(b"a", 0, 1, 5)
                .with(|r| r.holders[0].expires_at = MAX_INSTANT + 1)
                .bytes(),
            "instant is out of range",
        ),
        (
            "waiter deadline u64::MAX",
            Raw::new(0, 0)
                .waiter(1, b"a", 0, 1)
                .with(|r| r.waiters[0].expires_at = u64::MAX)
                .bytes(),
            "instant is out of range",
        ),
        (
            "holder token 0",
            Raw::new(0, 5).holder(b"a", 0, 1, 0).bytes(),
            "holder token",
        ),
        (
            "holder token above last_token",
            Raw::new(0, 5).holder(b"a", 0, 1, 6).bytes(),
            "holder token",
        ),
        (
            "holder token above last_token 0",
            Raw::new(0, 0).holder(b"a", 0, 1, 1).bytes(),
            "holder token",
        ),
        (
            "last_token above i64::MAX",
            Raw::new(0, MAX_TOKEN + 1).holder(b"a", 0, 1, 5).bytes(),
            "token is out of range",
        ),
        (
            "last_token u64::MAX",
            Raw::new(0, u64::MAX).holder(b"a", 0, 1, u64::MAX).bytes(),
            "token is out of range",
        ),
        (
            "floor above i64::MAX",
            ok.clone().with(|r| r.floor = MAX_TOKEN + 1).bytes(),
            "token is out of range",
        ),
        (
            "duplicate hold on a mutex",
            two(0, 0, b"a", 0).bytes(),
            "duplicate hold",
        ),
        (
            "duplicate READ hold",
            two(1, 1, b"a", 1).bytes(),
            "duplicate hold",
        ),
        (
            "duplicate WRITE hold",
            two(1, 2, b"a", 2).bytes(),
            "duplicate hold",
        ),
        (
            "two holders of a mutex",
            two(0, 0, b"b", 0).bytes(),
            "exclusive",
        ),
        (
            "two holders of a fair lock",
            two(2, 0, b"b", 0).bytes(),
            "exclusive",
        ),
        (
            "two writers of an rw lock",
            two(1, 2, b"b", 2).bytes(),
            "exclusive",
        ),
        (
            "READ then another's WRITE",
            two(1, 1, b"b", 2).bytes(),
            "exclusive",
        ),
        (
            "WRITE then another's READ",
            two(1, 2, b"b", 1).bytes(),
            "exclusive",
        ),
        (
            "a reader between a writer and its READ",
            Raw::new(1, 5)
                .holder(b"a", 2, 1, 3)
                .holder(b"b", 1, 1, 4)
                .holder(b"a", 1, 1, 5)
                .bytes(),
            "exclusive",
        ),
        (
            "READ hold on a mutex",
            Raw::new(0, 5).holder(b"a", 1, 1, 5).bytes(),
            "does not fit",
        ),
        (
            "WRITE hold on a fair lock",
            Raw::new(2, 5).holder(b"a", 2, 1, 5).bytes(),
            "does not fit",
        ),
        (
            "exclusive hold on an rw lock",
            Raw::new(1, 5).holder(b"a", 0, 1, 5).bytes(),
            "does not fit",
        ),
        (
            "READ waiter on a mutex",
            Raw::new(0, 5).waiter(1, b"w", 1, 1).bytes(),
            "does not fit",
        ),
        (
            "exclusive waiter on an rw lock",
            Raw::new(1, 5).waiter(1, b"w", 0, 1).bytes(),
            "does not fit",
        ),
        (
            "holder mode 5",
            Raw::new(1, 5).holder(b"a", 5, 1, 5).bytes(),
            "unknown mode",
        ),
        (
            "holder mode 255",
            Raw::new(1, 5).holder(b"a", 255, 1, 5).bytes(),
            "unknown mode",
        ),
        (
            "waiter mode 5",
            Raw::new(0, 5).waiter(1, b"w", 5, 1).bytes(),
            "unknown mode",
        ),
        (
            "blocked flag 2",
            Raw::new(0, 5).waiter(1, b"w", 0, 2).bytes(),
            "blocked flag",
        ),
        (
            "blocked flag 255",
            Raw::new(0, 5).waiter(1, b"w", 0, 255).bytes(),
            "blocked flag",
        ),
        (
            "duplicate waiter ids",
            ok.clone()
                .waiter(4, b"w", 0, 1)
                .waiter(4, b"v", 0, 0)
                .bytes(),
            "duplicate waiter id",
        ),
        (
            "duplicate waiter ids of one owner",
            Raw::new(2, 0)
                .waiter(0, b"w", 0, 1)
                .waiter(0, b"w", 0, 1)
                .bytes(),
            "duplicate waiter id",
        ),
        (
            "empty lock",
            Raw::new(0, 5).bytes(),
            "neither holders nor waiters",
        ),
        (
            "holder count u64::MAX in a tiny payload",
            ok.clone().with(|r| r.n_holders = Some(u64::MAX)).bytes(),
            "entry count",
        ),
        (
            "holder count 2^40 in a tiny payload",
            ok.clone().with(|r| r.n_holders = Some(1 << 40)).bytes(),
            "entry count",
        ),
        (
            "waiter count u64::MAX in a tiny payload",
            ok.clone().with(|r| r.n_waiters = Some(u64::MAX)).bytes(),
            "entry count",
        ),
        (
            "one holder more than present",
            ok.clone().with(|r| r.n_holders = Some(2)).bytes(),
            "",
        ),
        (
            "one waiter more than present",
            ok.clone()
                .waiter(1, b"w", 0, 1)
                .with(|r| r.n_waiters = Some(2))
                .bytes(),
            "",
        ),
        (
            "fewer holders than present",
            two(1, 1, b"b", 1).with(|r| r.n_holders = Some(1)).bytes(),
            "",
        ),
        (
            "overlong varint: 11 bytes of 0xff",
            last_bytes(&[0xff; 11]),
            "overflows",
        ),
        (
            "10-byte varint above 64 bits",
            last_bytes(&ff9),
            "overflows",
        ),
        (
            "varint continuing past 10 bytes",
            last_bytes(&ff9c),
            "overflows",
        ),
        ("non-minimal zero", last_bytes(&[0x80, 0x00]), "minimally"),
        ("non-minimal 10-byte zero", last_bytes(&zero10), "minimally"),
        ("non-minimal count", count_bytes(&[0x81, 0x00]), "minimally"),
        (
            "non-minimal count with padding",
            count_bytes(&[0x81, 0x80, 0x80, 0x00]),
            "minimally",
        ),
        (
            "valid u64::MAX varint as last_token",
            last_bytes(&umax),
            "token is out of range",
        ),
        ("varint cut by the end", vec![1, 0, 0x80], "truncated"),
    ]
}

#[test]
fn codec_rejects_bad_payloads() {
    for (name, bytes, words) in rejected_payloads() {
        match decode(&bytes) {
            Ok(got) => panic!("{name}: accepted as {got:?}"),
            Err(DecodeError(msg)) => assert!(
                msg.contains(words),
                "{name}: refused with {msg:?}, expected {words:?}"
            ),
        }
    }
}

#[test]
fn codec_accepts_edge_payloads() {
    let max = [b'm'; MAX_OWNER_LEN];
    let cases: Vec<(&str, Raw)> = vec![
        ("owner of 512 bytes", Raw::new(0, 5).holder(&max, 0, 1, 5)),
        (
            "waiter owner of 512 bytes",
            Raw::new(0, 5).waiter(1, &max, 0, 1),
        ),
        (
            "binary owner",
            Raw::new(2, 5).holder(&[0, 255, b'\n', 0x80], 0, 1, 5),
        ),
        (
            "count u32::MAX",
            Raw::new(0, 5).holder(b"a", 0, u64::from(u32::MAX), 5),
        ),
        (
            "tokens at the maximum",
            Raw::new(0, MAX_TOKEN)
                .holder(b"a", 0, 1, MAX_TOKEN)
                .with(|r| r.floor = MAX_TOKEN),
        ),
        (
            "floor 0",
            Raw::new(0, 5).holder(b"a", 0, 1, 1).with(|r| r.floor = 0),
        ),
        (
            "expiry instants 0 and MAX_INSTANT",
            Raw::new(1, 5)
                .holder(b"a", 1, 1, 1)
                .holder(b"b", 1, 1, 2)
                .waiter(1, b"c", 2, 0)
                .with(|r| {
                    r.holders[0].expires_at = 0;
                    r.holders[1].expires_at = MAX_INSTANT;
                    r.waiters[0].expires_at = MAX_INSTANT;
                }),
        ),
        (
            "waiters only, last_token 0",
            Raw::new(2, 0).waiter(1, b"q", 0, 0).waiter(2, b"b", 0, 1),
        ),
        (
            "waiter ids 0 and u64::MAX",
            Raw::new(0, 0)
                .waiter(0, b"a", 0, 1)
                .waiter(u64::MAX, b"b", 0, 1),
        ),
        (
            "READ and WRITE of one owner, READ first",
            Raw::new(1, 5).holder(b"a", 1, 1, 4).holder(b"a", 2, 2, 5),
        ),
        (
            "many readers",
            (1..=40u64).fold(Raw::new(1, 40), |r, i| {
                r.holder(format!("reader-{i}").as_bytes(), 1, i, i)
            }),
        ),
        (
            "holders and a mixed queue",
            Raw::new(1, 9)
                .holder(b"a", 1, 1, 8)
                .holder(b"b", 1, 1, 9)
                .waiter(3, b"c", 2, 1)
                .waiter(4, b"a", 2, 1)
                .waiter(5, b"d", 1, 1),
        ),
    ];
    for (name, raw) in cases {
        let bytes = raw.bytes();
        let (lock, floor) = match decode(&bytes) {
            Ok(v) => v,
            Err(e) => panic!("{name}: refused: {e:?}"),
        };
        assert_eq!(floor, raw.floor, "{name}");
        assert_eq!(lock.holders().len(), raw.holders.len(), "{name}");
        assert_eq!(lock.waiters().len(), raw.waiters.len(), "{name}");
        if let Err(e) = invariants(&lock) {
            panic!("{name}: {e}");
        }
        assert_eq!(encode(&lock, floor), bytes, "{name}: re-encoding differs");
    }
}

fn random_u64(rng: &mut Rng) -> u64 {
    match rng.below(6) {
        0 => 0,
        1 => u64::MAX,
        2 => rng.below(128),
        3 => rng.below(1 << 14),
        4 => 1 << rng.below(64),
        _ => rng.next(),
    }
}

fn random_owner(rng: &mut Rng) -> Vec<u8> {
    let len = match rng.below(20) {
        0 => MAX_OWNER_LEN,
        1 | 2 => 1 + rng.below(MAX_OWNER_LEN as u64) as usize,
        _ => 1 + rng.below(4) as usize,
    };
    let small = rng.chance(50);
    (0..len)
        .map(|_| {
            if small {
                b"abc"[rng.below(3) as usize]
            } else {
                rng.next() as u8
            }
        })
        .collect()
}

fn random_holder(rng: &mut Rng, owner: Vec<u8>, mode: Mode, last_token: u64) -> Holder {
    let count = match rng.below(4) {
        0 => 1,
        1 => u32::MAX,
        _ => 1 + rng.below(u64::from(u32::MAX)) as u32,
    };
    Holder {
        owner: owner.into(),
        mode,
        count,
        expires_at: rng.below(MAX_INSTANT + 1),
        token: 1 + rng.below(last_token),
        bound: 0,
        delay_ms: 0,
        delayed: Delayed::No,
    }
}

/// A random lock that keeps every invariant, and a random token floor.
fn random_lock(rng: &mut Rng) -> (Lock, u64) {
    let kind = [Kind::Mutex, Kind::Rw, Kind::Fair][rng.below(3) as usize];
    let last_token = match rng.below(5) {
        0 => 0,
        1 => MAX_TOKEN,
        2 => 1 + rng.below(100),
        _ => 1 + rng.below(MAX_TOKEN),
    };
    let mut holders: Vec<Holder> = Vec::new();
    if last_token > 0 {
        match kind {
            Kind::Mutex | Kind::Fair => {
                if rng.chance(60) {
                    let o = random_owner(rng);
                    holders.push(random_holder(rng, o, X, last_token));
                }
            }
            // Random semaphores and latches: tests_semaphore.rs, tests_latch.rs.
            Kind::Semaphore | Kind::Latch => {}
            Kind::Rw => match rng.below(4) {
                0 => {}
                1 => {
                    let o = random_owner(rng);
                    holders.push(random_holder(rng, o, W, last_token));
                }
                2 => {
                    let o = random_owner(rng);
                    let (m1, m2) = if rng.chance(50) { (W, R) } else { (R, W) };
                    holders.push(random_holder(rng, o.clone(), m1, last_token));
                    holders.push(random_holder(rng, o, m2, last_token));
                }
                _ => {
                    for _ in 0..1 + rng.below(5) {
                        let o = random_owner(rng);
                        if holders.iter().all(|h| *h.owner != *o) {
                            holders.push(random_holder(rng, o, R, last_token));
                        }
                    }
                }
            },
        }
    }
    let modes: &[Mode] = if kind == Kind::Rw { &[R, W] } else { &[X] };
    let mut waiters = VecDeque::new();
    let mut ids = HashSet::new();
    let n = rng.below(6);
    while (waiters.len() as u64) < n || (holders.is_empty() && waiters.is_empty()) {
        let id = random_u64(rng);
        if !ids.insert(id) {
            continue;
        }
        let owner = match holders.first() {
            Some(h) if rng.chance(30) => h.owner.to_vec(),
            _ => random_owner(rng),
        };
        waiters.push_back(Waiter {
            id,
            owner: owner.into(),
            mode: modes[rng.below(modes.len() as u64) as usize],
            blocked: rng.chance(50),
            expires_at: rng.below(MAX_INSTANT + 1),
            permits: 1,
        });
    }
    let floor = match rng.below(3) {
        0 => 0,
        1 => MAX_TOKEN,
        _ => rng.below(MAX_TOKEN),
    };
    (Lock::from_parts(kind, last_token, holders, waiters), floor)
}

#[test]
fn codec_round_trip_of_random_locks() {
    let mut rng = Rng::new(0x5eed);
    for i in 0..3000 {
        let (lock, floor) = random_lock(&mut rng);
        if let Err(e) = invariants(&lock) {
            panic!("generator broke an invariant: {e}");
        }
        let bytes = encode(&lock, floor);
        assert_eq!(decode(&bytes), Ok((lock.clone(), floor)), "lock {i}");
        // Every truncation is refused.
        if i < 600 {
            for n in 0..bytes.len() {
                assert!(
                    decode(&bytes[..n]).is_err(),
                    "lock {i}: prefix {n} accepted"
                );
            }
        }
        let mut longer = bytes.clone();
        longer.push(rng.next() as u8);
        assert!(decode(&longer).is_err(), "lock {i}: trailing byte accepted");
    }
}

#[test]
fn codec_round_trip_drops_indexed_at() {
    let mut lock = Lock::new(Kind::Mutex);
    let mut tokens = Tokens::default();
    apply(&mut lock, &mut tokens, Op::Acq("a", X, None, 1000, 100));
    lock.indexed_at = 1100;
    let (back, _) = decode(&encode(&lock, 0)).unwrap();
    assert_eq!(back.indexed_at, 0);
    lock.indexed_at = 0;
    assert_eq!(back, lock);
}

/// Decodes `buf`; when accepted, the lock must keep every invariant and
/// encode back to exactly `buf` (the encoding is canonical).
fn decode_checked(buf: &[u8]) -> bool {
    match decode(buf) {
        Err(_) => false,
        Ok((lock, floor)) => {
            if let Err(e) = invariants(&lock) {
                panic!("accepted payload {buf:?} breaks an invariant: {e}");
            }
            assert!(!lock.is_empty(), "accepted an empty lock: {buf:?}");
            assert!(lock.last_token() <= MAX_TOKEN && floor <= MAX_TOKEN);
            let again = encode(&lock, floor);
            assert_eq!(again, buf, "accepted payload does not re-encode the same");
            assert_eq!(decode(&again), Ok((lock, floor)));
            true
        }
    }
}

/// Bytes shaped like a payload (small varints, small mode and flag bytes,
/// short owners), so that random input often reaches the deeper checks.
fn payload_shaped_bytes(rng: &mut Rng) -> Vec<u8> {
    let mut b = vec![
        if rng.chance(90) {
            VERSION
        } else {
            rng.next() as u8
        },
        rng.below(4) as u8,
    ];
    let small = |rng: &mut Rng, b: &mut Vec<u8>| {
        let v = if rng.chance(90) {
            rng.below(4)
        } else {
            random_u64(rng)
        };
        leb(b, v);
    };
    let owner = |rng: &mut Rng, b: &mut Vec<u8>| {
        let n = rng.below(3) as usize;
        leb(b, n as u64);
        b.extend((0..n).map(|_| b"ab"[rng.below(2) as usize]));
    };
    small(rng, &mut b);
    small(rng, &mut b);
    let holders = rng.below(3);
    leb(&mut b, holders);
    for _ in 0..holders {
        owner(rng, &mut b);
        b.push(rng.below(4) as u8);
        small(rng, &mut b);
        small(rng, &mut b);
        small(rng, &mut b);
    }
    let waiters = rng.below(3);
    leb(&mut b, waiters);
    for _ in 0..waiters {
        small(rng, &mut b);
        owner(rng, &mut b);
        b.push(rng.below(4) as u8);
        b.push(rng.below(3) as u8);
        small(rng, &mut b);
    }
    if rng.chance(5) {
        b.push(rng.next() as u8);
    }
    b
}

#[test]
fn codec_fuzz_random_bytes() {
    let mut rng = Rng::new(0xf00d);
    let mut accepted = 0;
    for i in 0..20_000 {
        let b = if i % 2 == 0 {
            // Plain random bytes, mostly behind a valid header.
            let len = rng.below(64) as usize;
            let mut b: Vec<u8> = (0..len)
                .map(|_| {
                    if rng.chance(70) {
                        rng.below(8) as u8
                    } else {
                        rng.next() as u8
                    }
                })
                .collect();
            if len > 0 && rng.chance(80) {
                b[0] = VERSION;
            }
            if len > 1 && rng.chance(80) {
                b[1] = rng.below(3) as u8;
            }
            b
        } else {
            payload_shaped_bytes(&mut rng)
        };
        if decode_checked(&b) {
            accepted += 1;
        }
    }
    // Not a goal in itself, but shows the loop reaches the deep checks.
    assert!(
        accepted > 100,
        "only {accepted} random payloads were accepted"
    );
}

#[test]
fn codec_fuzz_mutated_payloads() {
    let mut rng = Rng::new(0xbeef);
    let mut accepted = 0;
    for _ in 0..20_000 {
        let (lock, floor) = random_lock(&mut rng);
        let mut b = encode(&lock, floor);
        for _ in 0..1 + rng.below(3) {
            let len = b.len() as u64;
            match rng.below(8) {
                0 => {
                    let i = rng.below(len) as usize;
                    b[i] ^= 1 << rng.below(8);
                }
                1 => {
                    let i = rng.below(len) as usize;
                    b[i] = rng.next() as u8;
                }
                2 => {
                    let i = rng.below(len + 1) as usize;
                    b.insert(i, rng.next() as u8);
                }
                3 if len > 0 => {
                    let i = rng.below(len) as usize;
                    b.remove(i);
                }
                4 => b.truncate(rng.below(len + 1) as usize),
                5 => {
                    let i = rng.below(len) as usize;
                    b[i] = [0x00, 0x7f, 0x80, 0xff][rng.below(4) as usize];
                }
                6 => {
                    let i = rng.below(len) as usize;
                    let j = (i + 1 + rng.below(8) as usize).min(b.len());
                    let chunk = b[i..j].to_vec();
                    b.splice(i..i, chunk);
                }
                _ => {
                    let i = rng.below(len) as usize;
                    b[i] = b[i].wrapping_add(1);
                }
            }
            if b.is_empty() {
                break;
            }
        }
        if decode_checked(&b) {
            accepted += 1;
        }
    }
    assert!(accepted > 0, "no mutated payload was ever accepted");
}

// ---------------------------------------------------------------------------
// Model-based test
// ---------------------------------------------------------------------------

/// xorshift64: a tiny deterministic generator, no crates.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// Uniform-ish in `0..n`; `n` must not be 0.
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// How open a set of holds is (0 exclusive, 1 several readers, 2 one reader,
/// 3 free): the lock becomes grantable to someone new when this rises.
fn openness_ref(holders: &[Holder]) -> u8 {
    if holders.is_empty() {
        return 3;
    }
    if holders.iter().any(|h| h.mode != Mode::Read) {
        return 0;
    }
    if holders.iter().all(|h| h.owner == holders[0].owner) {
        2
    } else {
        1
    }
}

#[derive(Debug)]
enum Expect {
    Fail(LockError),
    Reenter(usize),
    Grant,
    Deny,
}

/// What docs/commands.md gives `owner` asking for `mode`, with `pos` its place.
fn expected_acquire(lock: &Lock, owner: &[u8], mode: Mode, pos: Option<usize>) -> Expect {
    if !lock.kind().allows(mode) {
        return Expect::Fail(LockError::ModeNotApplicable);
    }
    let hs = lock.holders();
    let held = |o: &[u8], m: Mode| hs.iter().position(|h| *h.owner == *o && h.mode == m);
    if let Some(i) = held(owner, mode) {
        if hs[i].count == u32::MAX {
            return Expect::Fail(LockError::CountOverflow);
        }
        return Expect::Reenter(i);
    }
    let n_ahead = pos.unwrap_or(lock.waiters().len());
    let mut ahead = lock.waiters().iter().take(n_ahead);
    let owner_holds = hs.iter().any(|h| *h.owner == *owner);
    let others_hold = hs.iter().any(|h| *h.owner != *owner);
    let grant = match (lock.kind(), mode) {
        (Kind::Mutex | Kind::Fair, _) => hs.is_empty() && n_ahead == 0,
        // READ: no other owner's WRITE and no writer waiting ahead, except
        // for an owner that holds READ or WRITE already.
        (Kind::Rw, Mode::Read) => {
            owner_holds
                || (!hs.iter().any(|h| h.mode == Mode::Write)
                    && !ahead.any(|w| w.mode == Mode::Write))
        }
        // WRITE: nobody else holds; the only reader upgrades at once, anyone
        // else in arrival order.
        (Kind::Rw, _) => !others_hold && (owner_holds || n_ahead == 0),
        // Not modelled here: see tests_semaphore.rs and tests_latch.rs.
        (Kind::Semaphore | Kind::Latch, _) => false,
    };
    if grant {
        return Expect::Grant;
    }
    let upgrading = |o: &[u8]| held(o, Mode::Read).is_some();
    if mode == Mode::Write
        && upgrading(owner)
        && lock
            .waiters()
            .iter()
            .any(|w| w.mode == Mode::Write && *w.owner != *owner && upgrading(&w.owner))
    {
        return Expect::Fail(LockError::UpgradeDeadlock);
    }
    Expect::Deny
}

#[derive(Debug, Default)]
struct Stats {
    granted: usize,
    reentered: usize,
    denied: usize,
    mode_change: usize,
    deadlock: usize,
    not_applicable: usize,
    enqueued: usize,
    took_over: usize,
    ended: usize,
    released: usize,
    gone: usize,
    freed: usize,
    not_held: usize,
    mode_required: usize,
    renewed: usize,
    expired: usize,
    dropped: usize,
    forced: usize,
    removed: usize,
    deleted: usize,
    round_trips: usize,
}

/// Runs `steps` pseudo-random operations on one lock of `kind`, checking the
/// full state after each against a reference and the invariants.
fn model(kind: Kind, seed: u64, steps: usize) -> Stats {
    const OWNERS: [&[u8]; 4] = [b"a", b"b", b"c", b"d"];
    let mut rng = Rng::new(seed);
    let mut lock = Lock::new(kind);
    let mut tokens = Tokens::default();
    let mut now: u64 = 1_000_000;
    let mut next_id: u64 = 1;
    let mut last_new_token = 0;
    let mut st = Stats::default();
    let modes: &[Mode] = if kind == Kind::Rw { &[R, W] } else { &[X] };
    for step in 0..steps {
        let before = lock.clone();
        let tokens_before = tokens;
        let roll = rng.below(100);
        let what: String;
        let mut want = before.clone();
        if roll < 40 {
            // ---- acquire, then maybe enqueue ----
            let owner = OWNERS[rng.below(4) as usize];
            let mode = if rng.chance(3) {
                Mode::from_code(rng.below(3) as u8).unwrap()
            } else {
                modes[rng.below(modes.len() as u64) as usize]
            };
            let own: Vec<u64> = lock
                .waiters()
                .iter()
                .filter(|w| *w.owner == *owner)
                .map(|w| w.id)
                .collect();
            let waiter = if !own.is_empty() && rng.chance(70) {
                Some(own[rng.below(own.len() as u64) as usize])
            } else if rng.chance(5) {
                Some(1 << 40 | rng.below(8))
            } else {
                None
            };
            if waiter.is_none()
                && lock
                    .waiters()
                    .iter()
                    .any(|w| *w.owner == *owner && w.mode != mode)
            {
                // Which place such a request has is unsettled (see the
                // ignored BUG tests below); the model stays out of it.
                continue;
            }
            let pos = match waiter {
                Some(id) => lock.waiters().iter().position(|w| w.id == id),
                None => lock.waiters().iter().position(|w| *w.owner == *owner),
            };
            let lease = 1 + rng.below(300);
            let now_us = if rng.chance(50) {
                now * 1000
            } else {
                rng.below(now * 1000)
            };
            let expect = expected_acquire(&lock, owner, mode, pos);
            let req = Request {
                owner,
                mode,
                lease_ms: lease,
                waiter,
            };
            let got = lock.acquire(&req, now, &mut tokens, now_us);
            what = format!("acquire {req:?} at {now} -> {got:?}, expected {expect:?}");
            match (&expect, got) {
                (Expect::Fail(e), Err(g)) if *e == g => {
                    match g {
                        LockError::UpgradeDeadlock => st.deadlock += 1,
                        _ => st.not_applicable += 1,
                    }
                    assert_eq!(tokens, tokens_before, "step {step}: {what}");
                }
                (Expect::Deny, Ok(Grant::Denied)) => {
                    st.denied += 1;
                    assert_eq!(tokens, tokens_before, "step {step}: {what}");
                    assert_eq!(lock, want, "step {step}: {what}");
                    let has_place = waiter.is_some_and(|id| lock.has_waiter(id));
                    if !has_place && lock.waiters().len() < 8 && rng.chance(80) {
                        let blocked = kind != Kind::Fair || rng.chance(50);
                        let at = now + 1 + rng.below(if blocked { 3000 } else { 400 });
                        let id = next_id;
                        next_id += 1;
                        let made = lock.enqueue(owner, mode, id, blocked, at);
                        let new = Waiter {
                            id,
                            owner: owner.into(),
                            mode,
                            blocked,
                            expires_at: at,
                            permits: 1,
                        };
                        let queued = want
                            .waiters
                            .iter()
                            .position(|w| !w.blocked && w.mode == mode && *w.owner == *owner);
                        let want_made = if let Some(p) = queued {
                            want.waiters[p] = new;
                            st.took_over += 1;
                            false
                        } else if !blocked && want.waiters.iter().any(|w| *w.owner == *owner) {
                            false
                        } else {
                            want.waiters.push_back(new);
                            st.enqueued += 1;
                            true
                        };
                        assert_eq!(made, want_made, "step {step}: enqueue after {what}");
                    }
                }
                (Expect::Reenter(i), Ok(Grant::Granted { token, reentrant })) => {
                    st.reentered += 1;
                    assert!(reentrant, "step {step}: {what}");
                    let h = &mut want.holders[*i];
                    assert_eq!(token, h.token, "step {step}: {what}");
                    h.count += 1;
                    h.expires_at = now.saturating_add(lease);
                    if let Some(p) = pos {
                        want.waiters.remove(p);
                    }
                    assert_eq!(tokens, tokens_before, "step {step}: {what}");
                }
                (Expect::Grant, Ok(Grant::Granted { token, reentrant })) => {
                    st.granted += 1;
                    assert!(!reentrant, "step {step}: {what}");
                    assert!(token > last_new_token, "step {step}: {what}");
                    assert!(token > before.last_token(), "step {step}: {what}");
                    assert!(token >= now_us, "step {step}: {what}");
                    assert_eq!(tokens.last, token, "step {step}: {what}");
                    last_new_token = token;
                    if before.holders().iter().any(|h| *h.owner == *owner) {
                        st.mode_change += 1;
                    }
                    want.last_token = token;
                    want.holders.push(Holder {
                        owner: owner.into(),
                        mode,
                        count: 1,
                        expires_at: now.saturating_add(lease),
                        token,
                        bound: 0,
                        delay_ms: 0,
                        delayed: Delayed::No,
                    });
                    if let Some(p) = pos {
                        want.waiters.remove(p);
                    }
                }
                _ => panic!("step {step}: {what}"),
            }
        } else if roll < 47 {
            // ---- wait_ended ----
            let id = match lock.waiters().len() {
                n if n > 0 && rng.chance(85) => lock.waiters()[rng.below(n as u64) as usize].id,
                _ => 1 << 41,
            };
            let deadline = now + 1 + rng.below(400);
            let got = lock.wait_ended(id, deadline);
            what = format!("wait_ended({id}, {deadline}) -> {got}");
            let p = want.waiters.iter().position(|w| w.id == id);
            assert_eq!(got, p.is_some(), "step {step}: {what}");
            if let Some(p) = p {
                st.ended += 1;
                // A fair owner keeps its place as a queued one, unless it
                // already has a queued place (an owner is queued once).
                let w = &want.waiters[p];
                let queued_elsewhere = want
                    .waiters
                    .iter()
                    .any(|o| !o.blocked && o.id != id && o.mode == w.mode && o.owner == w.owner);
                if kind == Kind::Fair && !queued_elsewhere {
                    want.waiters[p].blocked = false;
                    want.waiters[p].expires_at = deadline;
                } else {
                    want.waiters.remove(p);
                }
            }
        } else if roll < 67 {
            // ---- release ----
            let owner = OWNERS[rng.below(4) as usize];
            let mode = match rng.below(100) {
                0..=39 => None,
                40..=94 => Some(modes[rng.below(modes.len() as u64) as usize]),
                _ => Mode::from_code(rng.below(3) as u8),
            };
            let got = lock.release(owner, mode);
            what = format!("release({owner:?}, {mode:?}) -> {got:?}");
            let mine: Vec<usize> = (0..want.holders.len())
                .filter(|&i| *want.holders[i].owner == *owner)
                .filter(|&i| mode.is_none_or(|m| want.holders[i].mode == m))
                .collect();
            let expect = match (mode, mine.as_slice()) {
                (Some(m), _) if !kind.allows(m) => Err(LockError::ModeNotApplicable),
                (_, []) => Err(LockError::NotHeld),
                (_, [i]) => {
                    let i = *i;
                    want.holders[i].count -= 1;
                    let gone = want.holders[i].count == 0;
                    if gone {
                        want.holders.remove(i);
                    }
                    let freed =
                        gone && openness_ref(&want.holders) > openness_ref(before.holders());
                    Ok(Released { gone, freed })
                }
                _ => Err(LockError::ModeRequired),
            };
            assert_eq!(got, expect, "step {step}: {what}");
            match got {
                Ok(r) => {
                    st.released += 1;
                    st.gone += usize::from(r.gone);
                    st.freed += usize::from(r.freed);
                }
                Err(LockError::NotHeld) => st.not_held += 1,
                Err(LockError::ModeRequired) => st.mode_required += 1,
                Err(_) => {}
            }
        } else if roll < 74 {
            // ---- renew ----
            let owner = OWNERS[rng.below(4) as usize];
            let lease = 1 + rng.below(300);
            let got = lock.renew(owner, lease, now);
            what = format!("renew({owner:?}, {lease}) at {now} -> {got}");
            let mut any = false;
            for h in want.holders.iter_mut().filter(|h| *h.owner == *owner) {
                h.expires_at = now + lease;
                any = true;
            }
            assert_eq!(got, any, "step {step}: {what}");
            st.renewed += usize::from(got);
        } else if roll < 92 {
            // ---- time passes, tick ----
            now += rng.below(120);
            let dead: Vec<u64> = lock
                .waiters()
                .iter()
                .filter(|w| w.blocked)
                .map(|w| w.id)
                .filter(|_| rng.chance(15))
                .collect();
            let got = lock.tick(now, |id| !dead.contains(&id));
            what = format!("tick({now}, dead {dead:?}) -> {got:?}");
            want.holders.retain(|h| h.expires_at > now);
            want.waiters.retain(|w| {
                if w.blocked {
                    !dead.contains(&w.id)
                } else {
                    w.expires_at > now
                }
            });
            let expired = before.holders().len() - want.holders.len();
            let expect = Tick {
                expired,
                dropped: before.waiters().len() - want.waiters.len(),
                freed: expired > 0 && openness_ref(&want.holders) > openness_ref(before.holders()),
                ..Tick::default()
            };
            assert_eq!(got, expect, "step {step}: {what}");
            st.expired += got.expired;
            st.dropped += got.dropped;
            st.freed += usize::from(got.freed);
        } else if roll < 94 {
            // ---- force release ----
            let got = lock.force_release();
            what = format!("force_release() -> {got}");
            assert_eq!(got, !want.holders.is_empty(), "step {step}: {what}");
            want.holders.clear();
            st.forced += usize::from(got);
        } else {
            // ---- a waiting connection goes away ----
            let id = match lock.waiters().len() {
                n if n > 0 && rng.chance(85) => lock.waiters()[rng.below(n as u64) as usize].id,
                _ => 1 << 42,
            };
            let got = lock.remove_waiter(id);
            what = format!("remove_waiter({id}) -> {got}");
            let n = want.waiters.len();
            want.waiters.retain(|w| w.id != id);
            assert_eq!(got, n != want.waiters.len(), "step {step}: {what}");
            st.removed += usize::from(got);
        }

        // The whole state is what the reference says; refusals change nothing.
        assert_eq!(lock, want, "step {step}: {what}\nbefore: {before:?}");
        if let Err(e) = invariants(&lock) {
            panic!("step {step}: {what}: {e}\nbefore: {before:?}\nafter: {lock:?}");
        }
        assert!(lock.last_token() <= tokens.last, "step {step}: {what}");
        if lock.is_empty() {
            assert_eq!(lock.next_deadline(), None);
            // An empty lock's key is deleted; tokens must keep increasing.
            if rng.chance(50) {
                lock = Lock::new(kind);
                st.deleted += 1;
            }
        } else if step % 4 == 0 {
            let bytes = encode(&lock, tokens.last);
            assert_eq!(
                decode(&bytes),
                Ok((lock.clone(), tokens.last)),
                "step {step}: round trip"
            );
            st.round_trips += 1;
        }
    }
    st
}

#[test]
fn model_mutex() {
    let st = model(Kind::Mutex, 1, 20_000);
    assert!(
        st.granted > 500 && st.reentered > 200 && st.denied > 500,
        "{st:?}"
    );
    assert!(
        st.enqueued > 200 && st.ended > 50 && st.removed > 50,
        "{st:?}"
    );
    assert!(
        st.gone > 150 && st.not_held > 200 && st.freed > 300,
        "{st:?}"
    );
    assert!(
        st.expired > 100 && st.dropped > 50 && st.renewed > 100,
        "{st:?}"
    );
    assert!(
        st.not_applicable > 10 && st.forced > 10 && st.deleted > 10,
        "{st:?}"
    );
}

#[test]
fn model_fair() {
    let st = model(Kind::Fair, 2, 20_000);
    assert!(
        st.granted > 500 && st.reentered > 200 && st.denied > 500,
        "{st:?}"
    );
    assert!(
        st.enqueued > 200 && st.took_over > 20 && st.ended > 50,
        "{st:?}"
    );
    assert!(
        st.gone > 150 && st.not_held > 200 && st.freed > 300,
        "{st:?}"
    );
    assert!(
        st.expired > 100 && st.dropped > 50 && st.renewed > 100,
        "{st:?}"
    );
    assert!(
        st.not_applicable > 10 && st.forced > 10 && st.deleted > 10,
        "{st:?}"
    );
}

#[test]
fn model_rw() {
    let st = model(Kind::Rw, 3, 20_000);
    assert!(
        st.granted > 500 && st.reentered > 200 && st.denied > 500,
        "{st:?}"
    );
    assert!(
        st.mode_change > 50 && st.deadlock > 5 && st.mode_required > 20,
        "{st:?}"
    );
    assert!(
        st.enqueued > 200 && st.ended > 50 && st.removed > 50,
        "{st:?}"
    );
    assert!(
        st.gone > 150 && st.not_held > 200 && st.freed > 300,
        "{st:?}"
    );
    assert!(
        st.expired > 100 && st.dropped > 50 && st.renewed > 100,
        "{st:?}"
    );
    assert!(
        st.not_applicable > 10 && st.forced > 10 && st.deleted > 10,
        "{st:?}"
    );
}

#[test]
fn model_more_seeds() {
    for seed in 10..16 {
        for kind in [Kind::Mutex, Kind::Rw, Kind::Fair] {
            model(kind, seed, 3000);
        }
    }
}

// ---------------------------------------------------------------------------
// Regressions: bugs found by these tests, fixed in Lock::position
// ---------------------------------------------------------------------------

/// A request without a waiter id is matched to its owner's first place in
/// the queue whatever that place's mode, and a grant removes that place.
/// Here reader `a` waits (blocked, id 1) to upgrade; a READ reentry by `a`
/// from another connection removes the upgrade place, so when reader `b`
/// then asks WRITE it is not refused: both readers wait to upgrade and wait
/// for each other until their waits time out (SPEC: "when two readers both
/// wait to upgrade, the second request fails at once with an error").
#[test]

fn bug_reentrant_read_removes_the_upgrade_place() {
    let mut lock = Lock::new(Kind::Rw);
    let mut tokens = Tokens::default();
    for op in [
        Op::Acq("a", R, None, 1000, 100),
        Op::Acq("b", R, None, 1000, 100),
    ] {
        apply(&mut lock, &mut tokens, op);
    }
    assert_eq!(
        apply(&mut lock, &mut tokens, Op::Acq("a", W, Some(1), 1000, 100)),
        DENIED
    );
    assert_eq!(
        apply(&mut lock, &mut tokens, Op::Enq("a", W, 1, true, 9000)),
        Out::Enq(true)
    );
    assert_eq!(
        apply(&mut lock, &mut tokens, Op::Acq("a", R, None, 1000, 100)),
        reentered(1)
    );
    let still_waits = lock.has_waiter(1);
    assert_eq!(
        apply(&mut lock, &mut tokens, Op::Acq("b", W, None, 1000, 100)),
        acq_err(LockError::UpgradeDeadlock),
        "second upgrader must be refused"
    );
    assert!(
        still_waits,
        "a's upgrade place was consumed by an unrelated READ"
    );
}

/// Same root cause, without reentry: `a` waits (blocked, id 1) for WRITE
/// behind reader `c`. A READ request of `a` from another connection is
/// treated as if it stood at `a`'s WRITE place: it is granted and takes that
/// place away. The connection still waiting for WRITE no longer holds back
/// new readers, so a stream of readers can starve it (SPEC: "A stream of new
/// readers must not starve a waiting writer").
#[test]

fn bug_read_request_uses_the_write_place() {
    let mut lock = Lock::new(Kind::Rw);
    let mut tokens = Tokens::default();
    apply(&mut lock, &mut tokens, Op::Acq("c", R, None, 1000, 100));
    assert_eq!(
        apply(&mut lock, &mut tokens, Op::Acq("a", W, Some(1), 1000, 100)),
        DENIED
    );
    apply(&mut lock, &mut tokens, Op::Enq("a", W, 1, true, 9000));
    // A newcomer READ while a writer waits: denied by writer preference.
    let got = apply(&mut lock, &mut tokens, Op::Acq("a", R, None, 1000, 100));
    let still_waits = lock.has_waiter(1);
    let newcomer = apply(&mut lock, &mut tokens, Op::Acq("b", R, None, 1000, 100));
    assert!(
        still_waits,
        "a's WRITE place was removed by its READ grant ({got:?})"
    );
    assert_eq!(got, DENIED, "a READ newcomer passed a waiting writer");
    assert_eq!(newcomer, DENIED, "new readers pass the waiting writer");
}
