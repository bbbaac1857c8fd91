//! The table runner of the rule tests (mutex, rw, fair, fifo, tokens, codec).
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
//! This file holds what they share (steps, outcomes, the table runner, the
//! invariants; payloads written by hand are in raw.rs); one file per kind
//! or topic holds the tests.
//!
//! Time is plain numbers: setups usually act at `now = 1000` with a lease of
//! 100 ms (so leases end at 1100), and tokens are issued with `now_us = 0` by
//! a fresh [`Tokens`], so the tokens of a case are 1, 2, 3, ...

use dlock_core::*;
use std::collections::HashSet;

pub const X: Mode = Mode::Exclusive;
pub const R: Mode = Mode::Read;
pub const W: Mode = Mode::Write;

// ---------------------------------------------------------------------------
// Steps, outcomes and the table runner
// ---------------------------------------------------------------------------

/// One call on a lock.
#[derive(Clone, Copy, Debug)]
pub enum Op {
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
pub enum Out {
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
    pub fn refused(&self) -> bool {
        match *self {
            Out::Acq(r) => !matches!(r, Ok(Grant::Granted { .. })),
            Out::Rel(r) => r.is_err(),
            Out::Ended(b) | Out::Renewed(b) | Out::Forced(b) | Out::Removed(b) => !b,
            Out::Ticked(t) => t == Tick::default(),
            Out::Enq(_) => false,
        }
    }
}

pub fn granted(token: u64) -> Out {
    Out::Acq(Ok(Grant::Granted {
        token,
        reentrant: false,
    }))
}

pub fn reentered(token: u64) -> Out {
    Out::Acq(Ok(Grant::Granted {
        token,
        reentrant: true,
    }))
}

pub const DENIED: Out = Out::Acq(Ok(Grant::Denied));

pub fn acq_err(e: LockError) -> Out {
    Out::Acq(Err(e))
}

pub fn released(gone: bool, freed: bool) -> Out {
    Out::Rel(Ok(Released { gone, freed }))
}

pub fn rel_err(e: LockError) -> Out {
    Out::Rel(Err(e))
}

pub fn ticked(expired: usize, dropped: usize, freed: bool) -> Out {
    Out::Ticked(Tick {
        expired,
        dropped,
        freed,
        ..Tick::default()
    })
}

/// Applies `op`; tokens are issued with `now_us = 0`.
pub fn apply(lock: &mut Lock, tokens: &mut Tokens, op: Op) -> Out {
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
pub type HoldRow = (&'static str, Mode, u32, u64, u64);
/// Expected place: id, owner, mode, blocked, expires_at.
pub type WaitRow = (u64, &'static str, Mode, bool, u64);

pub fn hold_rows(lock: &Lock) -> Vec<(String, Mode, u32, u64, u64)> {
    lock.holders()
        .iter()
        .map(|h| {
            let owner = String::from_utf8_lossy(&h.owner).into_owned();
            (owner, h.mode, h.count, h.expires_at, h.token)
        })
        .collect()
}

pub fn wait_rows(lock: &Lock) -> Vec<(u64, String, Mode, bool, u64)> {
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
pub struct Case<'a> {
    pub name: &'a str,
    pub kind: Kind,
    pub setup: &'a [Op],
    pub action: Op,
    pub expect: Out,
    pub holders: &'a [HoldRow],
    pub waiters: &'a [WaitRow],
}

pub fn run_cases(cases: &[Case<'_>]) {
    let mut names = HashSet::new();
    for c in cases {
        assert!(names.insert(c.name), "duplicate case name {:?}", c.name);
        run_case(c);
    }
}

pub fn run_case(c: &Case<'_>) {
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

pub fn cat(parts: &[&[Op]]) -> Vec<Op> {
    parts.concat()
}

/// The invariants every lock must keep (and every decoded lock must have).
pub fn invariants(lock: &Lock) -> Result<(), String> {
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
