//! Unit tests of [`Lock::token_live`], the rule behind `DLOCK.CHECK` and
//! `DLOCK.FENCED`: a token is live while a hold carrying it has a lease that
//! has not ended at `now` — whether or not [`Lock::tick`] has removed the
//! hold yet.
//!
//! First a table of cases (a lock built by setup steps, then the question
//! asked at one instant), then properties over pseudo-random operation
//! sequences driven the way the command layer drives the state machine
//! (`tick` before every acquire and renew, time never going back).
//!
//! As in the rule tables (common/table.rs): setups act at `now = 1000`
//! with a lease of 100 ms (so leases end at 1100), and a fresh [`Tokens`]
//! with `now_us = 0` issues the tokens 1, 2, 3, ...

use dlock_core::*;

const X: Mode = Mode::Exclusive;
const R: Mode = Mode::Read;
const W: Mode = Mode::Write;

/// One setup step.
#[derive(Clone, Copy, Debug)]
enum Step {
    /// `tick(now)` then `acquire(owner, mode)` at `now` with `lease` ms; the
    /// grant must happen.
    Acq(&'static str, Mode, u64, u64),
    /// `release(owner, mode)`.
    Rel(&'static str, Option<Mode>),
    /// `tick(now)` then `renew(owner)` at `now` with `lease` ms.
    Renew(&'static str, u64, u64),
    /// `tick(now)`: what the expiry timer does.
    Tick(u64),
    /// `force_release()`.
    Force,
}

struct Case {
    name: &'static str,
    kind: Kind,
    setup: &'static [Step],
    /// (token, now, expected answer)
    asks: &'static [(u64, u64, bool)],
}

fn build(kind: Kind, setup: &[Step]) -> Lock {
    let mut lock = Lock::new(kind);
    let mut tokens = Tokens::default();
    for step in setup {
        match *step {
            Step::Acq(owner, mode, now, lease) => {
                lock.tick(now, |_| true);
                let req = Request {
                    owner: owner.as_bytes(),
                    mode,
                    lease_ms: lease,
                    waiter: None,
                };
                let got = lock.acquire(&req, now, &mut tokens, 0);
                assert!(
                    matches!(got, Ok(Grant::Granted { .. })),
                    "setup {step:?}: {got:?}"
                );
            }
            Step::Rel(owner, mode) => {
                let got = lock.release(owner.as_bytes(), mode);
                assert!(got.is_ok(), "setup {step:?}: {got:?}");
            }
            Step::Renew(owner, now, lease) => {
                lock.tick(now, |_| true);
                assert!(lock.renew(owner.as_bytes(), lease, now), "setup {step:?}");
            }
            Step::Tick(now) => {
                lock.tick(now, |_| true);
            }
            Step::Force => {
                lock.force_release();
            }
        }
    }
    lock
}

const CASES: &[Case] = &[
    Case {
        name: "no lock: no token is live",
        kind: Kind::Mutex,
        setup: &[],
        asks: &[(1, 1000, false), (0, 1000, false), (u64::MAX, 0, false)],
    },
    Case {
        name: "a hold is live until its lease ends, exclusive of the end",
        kind: Kind::Mutex,
        setup: &[Step::Acq("a", X, 1000, 100)],
        asks: &[
            (1, 1000, true),
            (1, 1099, true),
            (1, 1100, false),
            (1, 5000, false),
        ],
    },
    Case {
        name: "another token, or 0, is not live",
        kind: Kind::Mutex,
        setup: &[Step::Acq("a", X, 1000, 100)],
        asks: &[(2, 1000, false), (0, 1000, false), (u64::MAX, 1000, false)],
    },
    Case {
        name: "a lease that ended is not live before the timer removed the hold",
        kind: Kind::Fair,
        setup: &[Step::Acq("a", X, 1000, 100)],
        asks: &[(1, 1100, false), (1, 1101, false)],
    },
    Case {
        name: "released: not live",
        kind: Kind::Mutex,
        setup: &[Step::Acq("a", X, 1000, 100), Step::Rel("a", None)],
        asks: &[(1, 1000, false)],
    },
    Case {
        name: "a reentrant grant keeps the token and restarts its lease",
        kind: Kind::Mutex,
        setup: &[Step::Acq("a", X, 1000, 100), Step::Acq("a", X, 1050, 100)],
        asks: &[
            (1, 1120, true),
            (1, 1149, true),
            (1, 1150, false),
            (2, 1120, false),
        ],
    },
    Case {
        name: "one release of a reentrant hold keeps the token live",
        kind: Kind::Mutex,
        setup: &[
            Step::Acq("a", X, 1000, 100),
            Step::Acq("a", X, 1000, 100),
            Step::Rel("a", None),
        ],
        asks: &[(1, 1000, true)],
    },
    Case {
        name: "renew extends liveness",
        kind: Kind::Mutex,
        setup: &[Step::Acq("a", X, 1000, 100), Step::Renew("a", 1090, 100)],
        asks: &[(1, 1150, true), (1, 1189, true), (1, 1190, false)],
    },
    Case {
        name: "force-released: not live",
        kind: Kind::Mutex,
        setup: &[Step::Acq("a", X, 1000, 100), Step::Force],
        asks: &[(1, 1000, false)],
    },
    Case {
        name: "superseded: the lease ended and another owner holds a newer token",
        kind: Kind::Mutex,
        setup: &[Step::Acq("a", X, 1000, 100), Step::Acq("b", X, 1100, 100)],
        asks: &[(1, 1100, false), (2, 1100, true), (2, 1199, true)],
    },
    Case {
        name: "the same owner after its lease ended gets a new token; the old is dead",
        kind: Kind::Mutex,
        setup: &[Step::Acq("a", X, 1000, 100), Step::Acq("a", X, 1200, 100)],
        asks: &[(1, 1200, false), (2, 1200, true)],
    },
    Case {
        name: "rw: every reader's token is live; a released reader's is not",
        kind: Kind::Rw,
        setup: &[
            Step::Acq("r1", R, 1000, 100),
            Step::Acq("r2", R, 1000, 200),
            Step::Rel("r1", Some(R)),
        ],
        asks: &[
            (1, 1000, false),
            (2, 1000, true),
            (2, 1150, true),
            (2, 1200, false),
        ],
    },
    Case {
        name: "rw: a downgrade is a new hold with its own token",
        kind: Kind::Rw,
        setup: &[
            Step::Acq("a", W, 1000, 100),
            Step::Acq("a", R, 1000, 100),
            Step::Rel("a", Some(W)),
        ],
        asks: &[(1, 1000, false), (2, 1000, true)],
    },
    Case {
        name: "rw: a writer's token after readers ended",
        kind: Kind::Rw,
        setup: &[
            Step::Acq("r", R, 1000, 100),
            Step::Tick(1100),
            Step::Acq("w", W, 1100, 100),
        ],
        asks: &[(1, 1100, false), (2, 1100, true)],
    },
];

#[test]
fn token_live_cases() {
    for case in CASES {
        let lock = build(case.kind, case.setup);
        for &(token, now, want) in case.asks {
            assert_eq!(
                lock.token_live(token, now),
                want,
                "{}: token {token} at {now}; lock {lock:?}",
                case.name
            );
            // The timer removing what ended never changes the answer.
            let mut ticked = lock.clone();
            ticked.tick(now, |_| true);
            assert_eq!(
                ticked.token_live(token, now),
                want,
                "{}: token {token} at {now} after tick",
                case.name
            );
        }
    }
}

#[test]
fn asking_changes_nothing() {
    let lock = build(Kind::Rw, &[Step::Acq("r", R, 1000, 100)]);
    let before = lock.clone();
    for now in [0, 1000, 1100, u64::MAX] {
        for token in [0, 1, 2, u64::MAX] {
            lock.token_live(token, now);
        }
    }
    assert_eq!(lock, before);
}

mod props {
    use super::*;
    use proptest::prelude::*;

    /// One operation on a lock, as the command layer performs it.
    #[derive(Clone, Debug)]
    enum Op {
        /// Time passes by this many ms, then the timer ticks (or not).
        Pass(u64, bool),
        Acq(u8, Mode, u64),
        Rel(u8, Option<Mode>),
        Renew(u8, u64),
        Force,
    }

    fn op(kind: Kind) -> impl Strategy<Value = Op> {
        let mode = match kind {
            Kind::Rw => prop_oneof![Just(R), Just(W)].boxed(),
            _ => Just(X).boxed(),
        };
        let rel_mode = match kind {
            Kind::Rw => prop_oneof![Just(None), Just(Some(R)), Just(Some(W))].boxed(),
            _ => Just(None).boxed(),
        };
        prop_oneof![
            3 => (0u64..150, any::<bool>()).prop_map(|(d, t)| Op::Pass(d, t)),
            3 => (0u8..3, mode, 1u64..200).prop_map(|(o, m, l)| Op::Acq(o, m, l)),
            2 => (0u8..3, rel_mode).prop_map(|(o, m)| Op::Rel(o, m)),
            1 => (0u8..3, 1u64..200).prop_map(|(o, l)| Op::Renew(o, l)),
            1 => Just(Op::Force),
        ]
    }

    fn kind() -> impl Strategy<Value = Kind> {
        prop_oneof![Just(Kind::Mutex), Just(Kind::Fair), Just(Kind::Rw)]
    }

    fn run(kind: Kind, ops: &[Op]) -> Result<(), TestCaseError> {
        let owners: [&[u8]; 3] = [b"a", b"b", b"c"];
        let mut lock = Lock::new(kind);
        let mut tokens = Tokens::default();
        let mut now = 1000u64;
        // Tokens seen dead at some instant: time only moves forward, so
        // they must stay dead.
        let mut dead: Vec<u64> = Vec::new();
        for o in ops {
            match *o {
                Op::Pass(d, t) => {
                    now += d;
                    if t {
                        lock.tick(now, |_| true);
                    }
                }
                Op::Acq(i, mode, lease) => {
                    lock.tick(now, |_| true);
                    let req = Request {
                        owner: owners[usize::from(i)],
                        mode,
                        lease_ms: lease,
                        waiter: None,
                    };
                    if let Ok(Grant::Granted { token, .. }) =
                        lock.acquire(&req, now, &mut tokens, 0)
                    {
                        // A grant's token is live at once.
                        prop_assert!(lock.token_live(token, now));
                        prop_assert!(!dead.contains(&token), "token {token} came back");
                    }
                }
                Op::Rel(i, mode) => {
                    let _ = lock.release(owners[usize::from(i)], mode);
                }
                Op::Renew(i, lease) => {
                    lock.tick(now, |_| true);
                    lock.renew(owners[usize::from(i)], lease, now);
                }
                Op::Force => {
                    lock.force_release();
                }
            }
            let mut ticked = lock.clone();
            ticked.tick(now, |_| true);
            let mut live_holders = 0;
            for token in 0..=tokens.last + 1 {
                let live = lock.token_live(token, now);
                // The definition: a hold with this token whose lease has
                // not ended.
                let want = lock
                    .holders()
                    .iter()
                    .any(|h| h.token == token && h.expires_at > now);
                prop_assert_eq!(live, want, "token {} at {}", token, now);
                // Whether the timer already ran does not matter.
                prop_assert_eq!(ticked.token_live(token, now), live);
                if live {
                    live_holders += 1;
                    prop_assert!(!dead.contains(&token), "token {token} came back");
                } else if !dead.contains(&token) && token <= tokens.last {
                    dead.push(token);
                }
            }
            // Exclusive kinds: at most one live token at any instant.
            if kind != Kind::Rw {
                prop_assert!(live_holders <= 1, "{live_holders} live tokens: {lock:?}");
            }
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

        /// Liveness is exactly "a hold with this token whose lease has not
        /// ended", independent of the timer; a token that was dead at one
        /// instant is never live later; an exclusive lock has at most one
        /// live token.
        #[test]
        fn token_liveness_follows_the_holds(
            (kind, ops) in kind().prop_flat_map(|k| (Just(k), proptest::collection::vec(op(k), 1..60))),
        ) {
            run(kind, &ops)?;
        }
    }
}
