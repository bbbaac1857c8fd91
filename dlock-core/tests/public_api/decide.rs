//! Every caller of the grant rule agrees with [`Lock::decide`], and
//! `decide` agrees with the independent specs (the model's
//! `expected_acquire`, `spec_grantable`, the semaphore's `spec_grant`).
//!
//! `check_agreement` (common/check.rs) runs after every operation of the
//! three fuzzers (`fuzz_locks.rs`, `fuzz_semaphore_latch.rs`,
//! `fuzz_lock_delay_bind.rs`, and their proptest runs) on whatever state
//! they reached, and checks:
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

use crate::common::*;
use dlock_core::*;

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
