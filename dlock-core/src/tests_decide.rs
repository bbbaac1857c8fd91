//! Every caller of the grant rule agrees with [`Lock::decide`], and
//! `decide` agrees with the independent specs (the model's
//! `expected_acquire`, `spec_grantable`, the semaphore's `spec_grant`).
//!
//! [`check_agreement`] runs after every operation of the three fuzzers
//! (`fuzz.rs`, `fuzz_sem.rs`, `fuzz_delay.rs`, and their proptest runs) on
//! whatever state they reached, and checks:
//!
//! - for every place: `surely_denied(id)` is exactly "decide says Deny",
//!   and an attempt by that waiter (`acquire` / `acquire_permits` with
//!   its id, on a copy) has the outcome kind decide gave: Grant → a new
//!   hold (or `TokensExhausted`), Reenter → a reentrant grant, Deny →
//!   denied with nothing changed, Error(e) → `Err(e)` with nothing
//!   changed;
//! - the same for new requests (no waiter id) of every owner that holds or
//!   waits and of a stranger, in every mode of the kind and one it does
//!   not allow, at the place `place_of` gives them; on a semaphore also
//!   `SEMACQUIRE`s of 0, 1, 2 permits and one naming a wrong limit;
//! - `next_handoff()` names exactly the waiter the handoff rules pick with
//!   decide: the head when it is blocked and decide does not deny it; else,
//!   on an rw lock read by one owner only, that owner's first blocked WRITE
//!   place when decide does not deny it; else none (a latch: none);
//! - `head_may_be_granted()` is "a semaphore whose head decide serves";
//! - `exclusive_owner()`: while it names an owner, decide denies every
//!   other owner, with or without a place;
//! - `blocked_by(place)` is empty exactly when decide does not deny, and
//!   names only owners that hold or wait ahead;
//! - the oracle: with no hold in its lock-delay, decide equals the model's
//!   `expected_acquire` (mutex, rw, fair; every owner and mode, with and
//!   without a place) and the semaphore's `spec_grant`.

use super::*;
use crate::tests::model::{expected_acquire, Expect};

/// What an attempt gave, compared with what decide said.
fn outcome_fits(
    d: Decision,
    out: Result<Grant, LockError>,
    changed: bool,
) -> Result<(), &'static str> {
    let ok = match (d, out) {
        (Decision::Grant, Ok(Grant::Granted { reentrant, .. })) => !reentrant,
        (Decision::Grant, Err(LockError::TokensExhausted)) => !changed,
        (Decision::Reenter, Ok(Grant::Granted { reentrant, .. })) => reentrant,
        (Decision::Deny, Ok(Grant::Denied)) => !changed,
        (Decision::Error(e), Err(g)) => e == g && !changed,
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err("the attempt's outcome is not decide's")
    }
}

/// One attempt on a copy of `l`, the way the command layer makes it:
/// semaphores through `acquire_permits` (under `limit`), other kinds
/// through `acquire`.
fn attempt(
    l: &Lock,
    tokens: &Tokens,
    owner: &[u8],
    mode: Mode,
    permits: u32,
    limit: Option<u64>,
    waiter: Option<u64>,
) -> (Result<Grant, LockError>, bool) {
    let mut c = l.clone();
    let mut t = *tokens;
    let req = Request {
        owner,
        mode,
        lease_ms: 7,
        waiter,
    };
    let now = 1;
    let out = match limit {
        Some(limit) => c.acquire_permits(&req, permits, limit, now, &mut t, 1000),
        None => c.acquire(&req, now, &mut t, 1000),
    };
    let changed = c != *l || t != *tokens;
    (out, changed)
}

/// The waiter the handoff rules pick, asked of decide (written from the
/// doc of `next_handoff`, independently of its code).
fn handoff_by_rule(l: &Lock) -> Option<u64> {
    if l.kind() == Kind::Latch {
        return None;
    }
    // The first blocked waiter, in queue order, that decide serves.
    l.waiters()
        .iter()
        .enumerate()
        .find(|(pos, w)| w.blocked && l.decide(&Ask::of(w), Some(*pos)).serves())
        .map(|(_, w)| w.id)
}

/// The model's answer as a decision.
fn from_model(e: Expect) -> Decision {
    match e {
        Expect::Fail(e) => Decision::Error(e),
        Expect::Reenter(_) => Decision::Reenter,
        Expect::Grant => Decision::Grant,
        Expect::Deny => Decision::Deny,
    }
}

/// Checks every caller of the rule against [`Lock::decide`] on `l`, and
/// decide against the specs. `tokens` is the server's counter.
pub(super) fn check_agreement(l: &Lock, tokens: &Tokens) -> Result<(), String> {
    let kind = l.kind();
    let sem_limit = l.limit();
    let no_delay = l.holders().iter().all(Holder::is_live);
    // Every place, as its waiter asks.
    for (pos, w) in l.waiters().iter().enumerate() {
        let d = l.decide(&Ask::of(w), Some(pos));
        if l.surely_denied(w.id) != (d == Decision::Deny) {
            return Err(format!(
                "surely_denied({}) is {} but decide says {d:?}",
                w.id,
                l.surely_denied(w.id)
            ));
        }
        if l.decide_place(w.id) != Some(d) {
            return Err("decide_place differs from decide at the place".into());
        }
        let (out, changed) = attempt(
            l,
            tokens,
            &w.owner,
            w.mode,
            w.permits,
            sem_limit,
            Some(w.id),
        );
        outcome_fits(d, out, changed)
            .map_err(|e| format!("waiter {} at {pos}: {e}: decide {d:?}, got {out:?}", w.id))?;
        let blockers = l.blocked_by(pos);
        for max in [0, 1, 2, 17] {
            let first = l.blocked_by_first(pos, max);
            if first[..] != blockers[..blockers.len().min(max)] {
                return Err(format!(
                    "blocked_by_first({pos}, {max}) = {first:?}, blocked_by = {blockers:?}"
                ));
            }
        }
        if (d == Decision::Deny) == blockers.is_empty() {
            return Err(format!(
                "blocked_by({pos}) = {blockers:?} but decide says {d:?}"
            ));
        }
        for b in &blockers {
            let holds = l.holders().iter().any(|h| *h.owner == **b);
            let ahead = l.waiters().iter().take(pos).any(|o| *o.owner == **b);
            if !holds && !ahead {
                return Err(format!(
                    "blocked_by({pos}) names {b:?}, who neither holds nor waits ahead"
                ));
            }
        }
        if no_delay && kind != Kind::Latch {
            let spec = if kind == Kind::Semaphore {
                let fits = crate::fuzz_sem::spec_grant(l, Some(pos), w.permits);
                let valid = w.permits >= 1 && sem_limit.is_some_and(|s| u64::from(w.permits) <= s);
                (
                    valid,
                    fits == matches!(
                        d,
                        Decision::Grant
                            | Decision::Reenter
                            | Decision::Error(LockError::CountOverflow)
                    ),
                )
            } else {
                (
                    true,
                    from_model(expected_acquire(l, &w.owner, w.mode, Some(pos))) == d,
                )
            };
            if spec.0 && !spec.1 {
                return Err(format!(
                    "decide says {d:?} for waiter {} at {pos}; the spec differs",
                    w.id
                ));
            }
        }
    }
    // New requests of every owner that holds or waits, and of a stranger,
    // in every mode of the kind and one it does not allow.
    let exclusive = l.exclusive_owner().map(<[u8]>::to_vec);
    let mut owners: Vec<&[u8]> = vec![b"stranger"];
    for o in l
        .holders()
        .iter()
        .map(|h| &*h.owner)
        .chain(l.waiters().iter().map(|w| &*w.owner))
    {
        if !owners.contains(&o) {
            owners.push(o);
        }
    }
    let modes: &[Mode] = match kind {
        Kind::Mutex | Kind::Fair => &[Mode::Exclusive, Mode::Read],
        Kind::Rw => &[Mode::Read, Mode::Write, Mode::Exclusive],
        Kind::Semaphore => &[Mode::Permit],
        Kind::Latch => &[Mode::Await],
    };
    for &owner in &owners {
        for &mode in modes {
            let req = Request {
                owner,
                mode,
                lease_ms: 7,
                waiter: None,
            };
            let place = l.place_of(&req);
            let ask = Ask::hold(owner, mode);
            let d = l.decide(&ask, place);
            let (out, changed) = attempt(l, tokens, owner, mode, 1, None, None);
            outcome_fits(d, out, changed).map_err(|e| {
                format!(
                    "new request {:?} {mode:?} at {place:?}: {e}: decide {d:?}, got {out:?}",
                    String::from_utf8_lossy(owner)
                )
            })?;
            if let Some(o) = &exclusive {
                if **o != *owner && kind.allows(mode) && d != Decision::Deny {
                    return Err(format!(
                        "exclusive_owner {o:?}, yet decide lets {owner:?} {mode:?}: {d:?}"
                    ));
                }
            }
            if no_delay && matches!(kind, Kind::Mutex | Kind::Rw | Kind::Fair) {
                // The model's place of a new request: the owner's place in
                // that mode (when the owner has places in other modes only,
                // which place counts is unsettled: see model.rs).
                let other_mode = l
                    .waiters()
                    .iter()
                    .any(|w| *w.owner == *owner && w.mode != mode);
                let model = from_model(expected_acquire(l, owner, mode, place));
                if !other_mode && model != d {
                    return Err(format!(
                        "decide says {d:?} for {:?} {mode:?} at {place:?}; the model says {model:?}",
                        String::from_utf8_lossy(owner)
                    ));
                }
            }
        }
        // SEMACQUIRE: a few permits under the limit in force, and a wrong
        // limit.
        if let Some(limit) = sem_limit {
            for (k, named) in [(0, limit), (1, limit), (2, limit), (1, limit + 1)] {
                let d = l.decide(&Ask::permits(owner, k, named), None);
                let (out, changed) = attempt(l, tokens, owner, Mode::Permit, k, Some(named), None);
                outcome_fits(d, out, changed).map_err(|e| {
                    format!("SEMACQUIRE {owner:?} {k}/{named}: {e}: decide {d:?}, got {out:?}")
                })?;
            }
        }
    }
    // A semaphore request on another kind.
    if kind != Kind::Semaphore {
        let d = l.decide(&Ask::permits(b"a", 1, 1), None);
        if d != Decision::Error(LockError::WrongKind { found: kind }) {
            return Err(format!("SEMACQUIRE on a {kind:?} lock: {d:?}"));
        }
    }
    let want = handoff_by_rule(l);
    if l.next_handoff() != want {
        return Err(format!(
            "next_handoff is {:?}, the handoff rule with decide names {want:?}",
            l.next_handoff()
        ));
    }
    let head_serves = kind == Kind::Semaphore
        && l.waiters()
            .front()
            .is_some_and(|w| l.decide(&Ask::of(w), Some(0)).serves());
    if l.head_may_be_granted() != head_serves {
        return Err("head_may_be_granted disagrees with decide".into());
    }
    Ok(())
}

/// Rules the fuzzers rarely reach, stated directly.
#[test]
fn decide_by_hand() {
    let mut t = Tokens::default();
    let req = |owner: &'static [u8], mode, waiter| Request {
        owner,
        mode,
        lease_ms: 100,
        waiter,
    };
    // A latch is never acquired.
    let l = Lock::latch(2);
    assert_eq!(
        l.decide(&Ask::hold(b"a", Mode::Await), None),
        Decision::Error(LockError::WrongKind { found: Kind::Latch })
    );
    // Semaphore: strict FIFO, limit and permits checked first.
    let mut s = Lock::semaphore(3);
    assert_eq!(
        s.decide(&Ask::permits(b"a", 2, 4), None),
        Decision::Error(LockError::LimitMismatch { limit: 3 })
    );
    assert_eq!(
        s.decide(&Ask::permits(b"a", 4, 3), None),
        Decision::Error(LockError::PermitsOverLimit { limit: 3 })
    );
    assert_eq!(s.decide(&Ask::permits(b"a", 2, 3), None), Decision::Grant);
    s.acquire_permits(&req(b"a", Mode::Permit, None), 2, 3, 0, &mut t, 0)
        .unwrap();
    assert_eq!(s.decide(&Ask::permits(b"a", 1, 3), None), Decision::Reenter);
    assert_eq!(s.decide(&Ask::permits(b"b", 2, 3), None), Decision::Deny);
    assert!(s.enqueue_permits(b"b", 2, 1, 1000));
    // Behind the head nobody passes, even when its permits fit.
    assert_eq!(s.decide(&Ask::permits(b"c", 1, 3), None), Decision::Deny);
    assert_eq!(s.blocked_by(0), vec![b"a".as_slice()]);
    // The owner's hold in its lock-delay keeps the owner waiting.
    let mut d = Lock::semaphore(3);
    d.acquire_permits(&req(b"a", Mode::Permit, None), 1, 3, 0, &mut t, 0)
        .unwrap();
    d.set_lock_delay(b"a", Mode::Permit, 50);
    d.tick(120, |_| true);
    assert!(!d.holders()[0].is_live());
    assert_eq!(d.decide(&Ask::permits(b"a", 1, 3), None), Decision::Deny);
    assert_eq!(
        d.blocked_by_ask(&Ask::permits(b"a", 1, 3), None),
        vec![b"a".as_slice()]
    );
    assert_eq!(d.decide(&Ask::permits(b"b", 1, 3), None), Decision::Grant);
    // Rw: writer preference, upgrade ahead of the queue, the deadlock.
    let mut rw = Lock::new(Kind::Rw);
    for o in [b"r1".as_slice(), b"r2"] {
        rw.acquire(&req(o, Mode::Read, None), 0, &mut t, 0).unwrap();
    }
    assert_eq!(
        rw.decide(&Ask::hold(b"w", Mode::Write), None),
        Decision::Deny
    );
    assert!(rw.enqueue(b"w", Mode::Write, 1, true, 1000));
    assert_eq!(
        rw.decide(&Ask::hold(b"r3", Mode::Read), None),
        Decision::Deny
    );
    assert_eq!(
        rw.blocked_by_ask(&Ask::hold(b"r3", Mode::Read), None),
        vec![b"w".as_slice()]
    );
    assert_eq!(
        rw.decide(&Ask::hold(b"r1", Mode::Read), None),
        Decision::Reenter
    );
    assert!(rw.enqueue(b"r1", Mode::Write, 2, true, 1000));
    assert_eq!(
        rw.decide(&Ask::hold(b"r2", Mode::Write), None),
        Decision::Error(LockError::UpgradeDeadlock)
    );
    // r1's upgrade waits for r2's READ only.
    assert_eq!(rw.blocked_by(1), vec![b"r2".as_slice()]);
    rw.release(b"r2", None).unwrap();
    assert_eq!(rw.decide_place(2), Some(Decision::Grant));
    assert_eq!(rw.next_handoff(), Some(2));
    // Mutex: a request of another kind.
    let m = Lock::new(Kind::Mutex);
    assert_eq!(
        m.decide(&Ask::hold(b"a", Mode::Read), None),
        Decision::Error(LockError::ModeNotApplicable)
    );
    assert_eq!(
        m.decide(&Ask::permits(b"a", 1, 1), None),
        Decision::Error(LockError::WrongKind { found: Kind::Mutex })
    );
}

/// Random states of every kind (with lock-delays and bindings), checked
/// with [`check_agreement`] after every step: a fuzzer of its own besides
/// the checks the other fuzzers run.
#[test]
fn fuzz_decide_agreement() {
    use crate::rng::Rng;
    let owners: [&[u8]; 4] = [b"a", b"b", b"c", b"d"];
    let mut checks = 0u64;
    let mut denied_places = 0u64;
    for seed in 0..600u64 {
        let mut rng = Rng::new(seed);
        let kind = rng.pick(&[Kind::Mutex, Kind::Rw, Kind::Fair, Kind::Semaphore]);
        let mut l = if kind == Kind::Semaphore {
            Lock::semaphore(1 + rng.below(4))
        } else {
            Lock::new(kind)
        };
        let mut t = Tokens::default();
        let mut now = 1_000u64;
        let mut id = 1u64;
        for _ in 0..60 {
            let owner = rng.pick(&owners);
            let mode = match kind {
                Kind::Rw => rng.pick(&[Mode::Read, Mode::Write]),
                Kind::Semaphore => Mode::Permit,
                _ => Mode::Exclusive,
            };
            match rng.below(10) {
                0..=3 => {
                    let waiter = if rng.one_in(3) {
                        l.waiters().get(rng.below(8) as usize).map(|w| w.id)
                    } else {
                        None
                    };
                    let (wo, wm, wp) =
                        match waiter.and_then(|i| l.waiters().iter().find(|w| w.id == i)) {
                            Some(w) => (w.owner.to_vec(), w.mode, w.permits),
                            None => (owner.to_vec(), mode, 1 + rng.below(2) as u32),
                        };
                    let r = Request {
                        owner: &wo,
                        mode: wm,
                        lease_ms: 1 + rng.below(40),
                        waiter,
                    };
                    let g = match l.limit() {
                        Some(limit) => l.acquire_permits(&r, wp, limit, now, &mut t, now * 1000),
                        None => l.acquire(&r, now, &mut t, now * 1000),
                    };
                    if g == Ok(Grant::Granted {
                        token: t.last,
                        reentrant: false,
                    }) {
                        if rng.one_in(3) {
                            l.set_lock_delay(
                                &wo,
                                if kind == Kind::Semaphore {
                                    Mode::Permit
                                } else {
                                    wm
                                },
                                1 + rng.below(30),
                            );
                        }
                        if rng.one_in(4) {
                            l.bind_hold(&wo, wm, 1 + rng.below(2));
                        }
                    }
                    if g == Ok(Grant::Denied) && waiter.is_none() {
                        let blocked = kind != Kind::Fair || rng.one_in(2);
                        if kind == Kind::Semaphore {
                            l.enqueue_permits(&wo, wp, id, now + 500);
                        } else {
                            l.enqueue(&wo, wm, id, blocked, now + 500);
                        }
                        id += 1;
                    }
                }
                4 => {
                    let _ = l.release(owner, None);
                }
                5 => {
                    now += rng.below(20);
                    l.tick(now, |_| true);
                }
                6 => {
                    l.end_bound(1 + rng.below(2), now);
                }
                7 => {
                    if let Some(w) = l.waiters().get(rng.below(6) as usize) {
                        let i = w.id;
                        l.wait_ended(i, now + 300);
                    }
                }
                8 if rng.one_in(4) => {
                    l.force_release();
                }
                _ => {
                    if let Some(next) = l.next_handoff() {
                        let w = l.waiters().iter().find(|w| w.id == next).cloned();
                        if let Some(w) = w {
                            let r = Request {
                                owner: &w.owner,
                                mode: w.mode,
                                lease_ms: 20,
                                waiter: Some(w.id),
                            };
                            let g = match l.limit() {
                                Some(limit) => {
                                    l.acquire_permits(&r, w.permits, limit, now, &mut t, now * 1000)
                                }
                                None => l.acquire(&r, now, &mut t, now * 1000),
                            };
                            if g.is_err() {
                                l.remove_waiter(w.id);
                            }
                        }
                    }
                }
            }
            denied_places += l.waiters().iter().filter(|w| l.surely_denied(w.id)).count() as u64;
            if let Err(e) = check_agreement(&l, &t) {
                panic!("seed {seed}: {e}\n{l:#?}");
            }
            checks += 1;
        }
    }
    assert!(
        checks >= 30_000 && denied_places > 10_000,
        "{checks} {denied_places}"
    );
}
