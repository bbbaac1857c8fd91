//! Table-driven tests of the semaphore kind: each case builds a semaphore
//! with setup steps, applies one action, and compares the outcome and the
//! whole resulting state (holds: owner, permits, lease end, token; queue:
//! id, owner, permits) with docs/commands.md. Every refusal must change nothing.
//! Time: setups act at `now = 1000` with 100 ms leases; tokens come from a
//! fresh counter with `now_us = 0`, so they are 1, 2, 3, ...

use dlock_core::codec::{decode, encode};
use dlock_core::*;

#[derive(Clone, Copy, Debug)]
enum Op {
    /// acquire_permits: owner, permits, limit, waiter id, now.
    Acq(&'static str, u32, u64, Option<u64>, u64),
    /// enqueue_permits: owner, permits, id.
    Enq(&'static str, u32, u64),
    /// release_permits: owner, permits.
    Rel(&'static str, u32),
    /// release (no PERMITS, or a mode).
    Rel1(&'static str, Option<Mode>),
    /// renew: owner, now.
    Renew(&'static str, u64),
    /// tick at now.
    Tk(u64),
    /// force_release.
    Force,
    /// wait_ended: id.
    Ended(u64),
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Out {
    Acq(Result<Grant, LockError>),
    Enq(bool),
    Rel(Result<Released, LockError>),
    Renewed(bool),
    Ticked(Tick),
    Forced(bool),
    Ended(bool),
}

fn apply(l: &mut Lock, t: &mut Tokens, op: Op) -> Out {
    match op {
        Op::Acq(o, k, limit, waiter, now) => {
            let req = Request {
                owner: o.as_bytes(),
                mode: Mode::Permit,
                lease_ms: 100,
                waiter,
            };
            Out::Acq(l.acquire_permits(&req, k, limit, now, t, 0))
        }
        Op::Enq(o, k, id) => Out::Enq(l.enqueue_permits(o.as_bytes(), k, id, 5000)),
        Op::Rel(o, k) => Out::Rel(l.release_permits(o.as_bytes(), k)),
        Op::Rel1(o, m) => Out::Rel(l.release(o.as_bytes(), m)),
        Op::Renew(o, now) => Out::Renewed(l.renew(o.as_bytes(), 100, now)),
        Op::Tk(now) => Out::Ticked(l.tick(now, |_| true)),
        Op::Force => Out::Forced(l.force_release()),
        Op::Ended(id) => Out::Ended(l.wait_ended(id, 9999)),
    }
}

fn granted(token: u64) -> Out {
    Out::Acq(Ok(Grant::Granted {
        token,
        reentrant: false,
    }))
}

fn more(token: u64) -> Out {
    Out::Acq(Ok(Grant::Granted {
        token,
        reentrant: true,
    }))
}

const DENIED: Out = Out::Acq(Ok(Grant::Denied));

fn released(gone: bool) -> Out {
    Out::Rel(Ok(Released { gone, freed: true }))
}

struct Case {
    name: &'static str,
    limit: u64,
    setup: Vec<Op>,
    action: Op,
    expect: Out,
    /// (owner, permits, expires_at, token)
    holders: Vec<(&'static str, u32, u64, u64)>,
    /// (id, owner, permits)
    waiters: Vec<(u64, &'static str, u32)>,
}

fn run(c: &Case) {
    let mut l = Lock::semaphore(c.limit);
    let mut t = Tokens::default();
    for op in &c.setup {
        let out = apply(&mut l, &mut t, *op);
        assert!(
            !matches!(out, Out::Acq(Err(_)) | Out::Rel(Err(_))),
            "{}: setup {op:?} failed: {out:?}",
            c.name
        );
    }
    let (before, tokens_before) = (l.clone(), t);
    let out = apply(&mut l, &mut t, c.action);
    assert_eq!(out, c.expect, "{}: outcome", c.name);
    let refused = matches!(
        out,
        Out::Acq(Err(_) | Ok(Grant::Denied)) | Out::Rel(Err(_)) | Out::Renewed(false)
    );
    if refused {
        assert_eq!(l, before, "{}: a refusal changed the lock", c.name);
        assert_eq!(t, tokens_before, "{}: a refusal issued a token", c.name);
    }
    let holders: Vec<_> = l
        .holders()
        .iter()
        .map(|h| {
            assert_eq!(h.mode, Mode::Permit);
            (
                std::str::from_utf8(&h.owner).unwrap_or("?"),
                h.count,
                h.expires_at,
                h.token,
            )
        })
        .collect();
    let want: Vec<_> = c
        .holders
        .iter()
        .map(|&(o, k, e, tk)| (o, k, e, tk))
        .collect();
    assert_eq!(holders, want, "{}: holders", c.name);
    let waiters: Vec<_> = l
        .waiters()
        .iter()
        .map(|w| {
            (
                w.id,
                std::str::from_utf8(&w.owner).unwrap_or("?"),
                w.permits,
            )
        })
        .collect();
    assert_eq!(waiters, c.waiters, "{}: waiters", c.name);
    assert!(l.held_permits() <= c.limit, "{}: over the limit", c.name);
    // Every state round-trips through the codec (unless it is empty).
    if !l.is_empty() {
        assert_eq!(
            decode(&encode(&l, 7)),
            Ok((l.clone(), 7)),
            "{}: codec",
            c.name
        );
    }
}

use Op::*;

#[test]
fn semaphore_rules() {
    let cases = vec![
        Case {
            name: "first grant takes k permits and a token",
            limit: 3,
            setup: vec![],
            action: Acq("a", 2, 3, None, 1000),
            expect: granted(1),
            holders: vec![("a", 2, 1100, 1)],
            waiters: vec![],
        },
        Case {
            name: "a second owner fits",
            limit: 3,
            setup: vec![Acq("a", 2, 3, None, 1000)],
            action: Acq("b", 1, 3, None, 1000),
            expect: granted(2),
            holders: vec![("a", 2, 1100, 1), ("b", 1, 1100, 2)],
            waiters: vec![],
        },
        Case {
            name: "permits that do not fit are denied",
            limit: 3,
            setup: vec![Acq("a", 2, 3, None, 1000)],
            action: Acq("b", 2, 3, None, 1000),
            expect: DENIED,
            holders: vec![("a", 2, 1100, 1)],
            waiters: vec![],
        },
        Case {
            name: "asking again adds k, restarts the lease, keeps the token",
            limit: 5,
            setup: vec![Acq("a", 2, 5, None, 1000), Acq("b", 1, 5, None, 1000)],
            action: Acq("a", 2, 5, None, 1050),
            expect: more(1),
            holders: vec![("a", 4, 1150, 1), ("b", 1, 1100, 2)],
            waiters: vec![],
        },
        Case {
            name: "asking again beyond the limit is denied",
            limit: 3,
            setup: vec![Acq("a", 2, 3, None, 1000)],
            action: Acq("a", 2, 3, None, 1000),
            expect: DENIED,
            holders: vec![("a", 2, 1100, 1)],
            waiters: vec![],
        },
        Case {
            name: "another limit is an error naming the limit in force",
            limit: 3,
            setup: vec![Acq("a", 1, 3, None, 1000)],
            action: Acq("b", 1, 4, None, 1000),
            expect: Out::Acq(Err(LockError::LimitMismatch { limit: 3 })),
            holders: vec![("a", 1, 1100, 1)],
            waiters: vec![],
        },
        Case {
            name: "more permits than the limit is an error",
            limit: 3,
            setup: vec![],
            action: Acq("a", 4, 3, None, 1000),
            expect: Out::Acq(Err(LockError::PermitsOverLimit { limit: 3 })),
            holders: vec![],
            waiters: vec![],
        },
        Case {
            name: "FIFO: a new request never passes a waiter, even when it fits",
            limit: 3,
            setup: vec![Acq("a", 2, 3, None, 1000), Enq("b", 2, 10)],
            action: Acq("c", 1, 3, None, 1000),
            expect: DENIED,
            holders: vec![("a", 2, 1100, 1)],
            waiters: vec![(10, "b", 2)],
        },
        Case {
            name: "FIFO: a waiter behind the head waits, even when it fits",
            limit: 3,
            setup: vec![Acq("a", 2, 3, None, 1000), Enq("b", 2, 10), Enq("c", 1, 11)],
            action: Acq("c", 1, 3, Some(11), 1000),
            expect: DENIED,
            holders: vec![("a", 2, 1100, 1)],
            waiters: vec![(10, "b", 2), (11, "c", 1)],
        },
        Case {
            name: "FIFO: a holder asking for more queues like everyone",
            limit: 3,
            setup: vec![Acq("a", 1, 3, None, 1000), Enq("b", 3, 10)],
            action: Acq("a", 1, 3, None, 1000),
            expect: DENIED,
            holders: vec![("a", 1, 1100, 1)],
            waiters: vec![(10, "b", 3)],
        },
        Case {
            name: "head of line: the head asking for all permits is granted once they are back",
            limit: 3,
            setup: vec![
                Acq("a", 2, 3, None, 1000),
                Enq("b", 3, 10),
                Enq("c", 1, 11),
                Rel("a", 2),
            ],
            action: Acq("b", 3, 3, Some(10), 1000),
            expect: granted(2),
            holders: vec![("b", 3, 1100, 2)],
            waiters: vec![(11, "c", 1)],
        },
        Case {
            name: "head of line: later smaller requests wait while the head does not fit",
            limit: 3,
            setup: vec![
                Acq("a", 2, 3, None, 1000),
                Enq("b", 3, 10),
                Enq("c", 1, 11),
                Rel("a", 1),
            ],
            action: Acq("c", 1, 3, Some(11), 1000),
            expect: DENIED,
            holders: vec![("a", 1, 1100, 1)],
            waiters: vec![(10, "b", 3), (11, "c", 1)],
        },
        Case {
            name: "the next in line is granted after the head",
            limit: 3,
            setup: vec![
                Acq("a", 3, 3, None, 1000),
                Enq("b", 1, 10),
                Enq("c", 2, 11),
                Rel("a", 3),
                Acq("b", 1, 3, Some(10), 1000),
            ],
            action: Acq("c", 2, 3, Some(11), 1000),
            expect: granted(3),
            holders: vec![("b", 1, 1100, 2), ("c", 2, 1100, 3)],
            waiters: vec![],
        },
        Case {
            name: "release k of more permits keeps the hold",
            limit: 5,
            setup: vec![Acq("a", 4, 5, None, 1000)],
            action: Rel("a", 3),
            expect: released(false),
            holders: vec![("a", 1, 1100, 1)],
            waiters: vec![],
        },
        Case {
            name: "release of the last permits ends the hold",
            limit: 5,
            setup: vec![Acq("a", 4, 5, None, 1000)],
            action: Rel("a", 4),
            expect: released(true),
            holders: vec![],
            waiters: vec![],
        },
        Case {
            name: "release of more than held is an error, nothing changes",
            limit: 5,
            setup: vec![Acq("a", 2, 5, None, 1000)],
            action: Rel("a", 3),
            expect: Out::Rel(Err(LockError::NotEnoughPermits { held: 2 })),
            holders: vec![("a", 2, 1100, 1)],
            waiters: vec![],
        },
        Case {
            name: "release by a non-holder is NOTHELD",
            limit: 5,
            setup: vec![Acq("a", 2, 5, None, 1000)],
            action: Rel("b", 1),
            expect: Out::Rel(Err(LockError::NotHeld)),
            holders: vec![("a", 2, 1100, 1)],
            waiters: vec![],
        },
        Case {
            name: "RELEASE without PERMITS gives one permit back",
            limit: 5,
            setup: vec![Acq("a", 2, 5, None, 1000)],
            action: Rel1("a", None),
            expect: released(false),
            holders: vec![("a", 1, 1100, 1)],
            waiters: vec![],
        },
        Case {
            name: "RELEASE with READ|WRITE on a semaphore is refused",
            limit: 5,
            setup: vec![Acq("a", 2, 5, None, 1000)],
            action: Rel1("a", Some(Mode::Read)),
            expect: Out::Rel(Err(LockError::ModeNotApplicable)),
            holders: vec![("a", 2, 1100, 1)],
            waiters: vec![],
        },
        Case {
            name: "renew restarts the lease",
            limit: 2,
            setup: vec![Acq("a", 1, 2, None, 1000)],
            action: Renew("a", 1080),
            expect: Out::Renewed(true),
            holders: vec![("a", 1, 1180, 1)],
            waiters: vec![],
        },
        Case {
            name: "renew by a non-holder is 0",
            limit: 2,
            setup: vec![Acq("a", 1, 2, None, 1000)],
            action: Renew("b", 1080),
            expect: Out::Renewed(false),
            holders: vec![("a", 1, 1100, 1)],
            waiters: vec![],
        },
        Case {
            name: "expiry gives permits back and frees",
            limit: 2,
            setup: vec![Acq("a", 1, 2, None, 1000), Acq("b", 1, 2, None, 1050)],
            action: Tk(1100),
            expect: Out::Ticked(Tick {
                expired: 1,
                dropped: 0,
                freed: true,
                ..Tick::default()
            }),
            holders: vec![("b", 1, 1150, 2)],
            waiters: vec![],
        },
        Case {
            name: "force release drops the holds and keeps the queue",
            limit: 2,
            setup: vec![Acq("a", 2, 2, None, 1000), Enq("b", 1, 10)],
            action: Force,
            expect: Out::Forced(true),
            holders: vec![],
            waiters: vec![(10, "b", 1)],
        },
        Case {
            name: "a wait that ends leaves the queue",
            limit: 2,
            setup: vec![Acq("a", 2, 2, None, 1000), Enq("b", 1, 10), Enq("c", 2, 11)],
            action: Ended(10),
            expect: Out::Ended(true),
            holders: vec![("a", 2, 1100, 1)],
            waiters: vec![(11, "c", 2)],
        },
        Case {
            name: "limit 2^32 holds large counts",
            limit: 1 << 32,
            setup: vec![Acq("a", u32::MAX, 1 << 32, None, 1000)],
            action: Acq("b", 1, 1 << 32, None, 1000),
            expect: granted(2),
            holders: vec![("a", u32::MAX, 1100, 1), ("b", 1, 1100, 2)],
            waiters: vec![],
        },
        Case {
            name: "one owner's count is at most 2^32-1",
            limit: 1 << 32,
            setup: vec![Acq("a", u32::MAX, 1 << 32, None, 1000)],
            action: Acq("a", 1, 1 << 32, None, 1000),
            expect: Out::Acq(Err(LockError::CountOverflow)),
            holders: vec![("a", u32::MAX, 1100, 1)],
            waiters: vec![],
        },
    ];
    for c in &cases {
        run(c);
    }
}

#[test]
fn semaphore_api_pieces() {
    let mut l = Lock::semaphore(4);
    assert_eq!(l.kind().name(), "semaphore");
    assert_eq!(Mode::Permit.name(), "permit");
    assert!(Kind::Semaphore.allows(Mode::Permit));
    assert!(!Kind::Semaphore.allows(Mode::Exclusive));
    assert_eq!(l.limit(), Some(4));
    assert_eq!(l.latch_count(), None);
    assert!(l.is_empty());
    let mut t = Tokens::default();
    let req = |o: &'static str, w| Request {
        owner: o.as_bytes(),
        mode: Mode::Permit,
        lease_ms: 10,
        waiter: w,
    };
    // acquire() on a semaphore takes one permit.
    assert!(matches!(
        l.acquire(&req("a", None), 0, &mut t, 0),
        Ok(Grant::Granted { .. })
    ));
    assert_eq!((l.held_permits(), l.available()), (1, 3));
    assert_eq!(l.exclusive_owner(), None);
    assert!(l.enqueue_permits(b"b", 4, 7, 100));
    assert!(l.surely_denied(7));
    assert!(!l.head_may_be_granted());
    assert_eq!(
        l.release_permits(b"a", 1),
        Ok(Released {
            gone: true,
            freed: true
        })
    );
    assert!(l.head_may_be_granted());
    assert!(!l.surely_denied(7));
    // PERMITS on other kinds.
    let mut m = Lock::new(Kind::Mutex);
    assert_eq!(
        m.release_permits(b"a", 1),
        Err(LockError::PermitsNotApplicable)
    );
    assert_eq!(
        m.check_limit(3),
        Err(LockError::WrongKind { found: Kind::Mutex })
    );
    assert_eq!(
        Lock::latch(2).release_permits(b"a", 1),
        Err(LockError::WrongKind { found: Kind::Latch })
    );
}

#[test]
fn semaphore_codec() {
    let mut l = Lock::semaphore(5);
    let mut t = Tokens::default();
    let req = Request {
        owner: b"a",
        mode: Mode::Permit,
        lease_ms: 100,
        waiter: None,
    };
    l.acquire_permits(&req, 3, 5, 200, &mut t, 0).unwrap();
    l.enqueue_permits(b"b", 4, 9, 300);
    l.stamp_wait(9, 250);
    // version 4: version 3 plus the grant time 200 (0xc8 0x01) of the hold
    // and the wait start 250 (0xfa 0x01) of the place.
    let v4 = vec![
        4, 3, 1, 2, 5, 1, 1, b'a', 3, 3, 0xac, 0x02, 1, 0, 0, 0xc8, 0x01, 1, 9, 1, b'b', 3, 1,
        0xac, 0x02, 4, 0xfa, 0x01,
    ];
    assert_eq!(encode(&l, 2), v4);
    assert_eq!(decode(&v4), Ok((l.clone(), 2)));
    // Without its times (a lock loaded from an older payload: granted at 0,
    // unknown, with its lease still ending at 300; the place never
    // stamped) the lock writes the old version.
    let mut l = Lock::semaphore(5);
    let mut t = Tokens::default();
    let untimed = Request {
        lease_ms: 300,
        ..req
    };
    l.acquire_permits(&untimed, 3, 5, 0, &mut t, 0).unwrap();
    l.enqueue_permits(b"b", 4, 9, 300);
    let bytes = encode(&l, 2);
    // version 2, kind 3, last_token 1, floor 2, limit 5, one holder "a"
    // permit(3) count 3 expires 300 token 1, one waiter id 9 "b" permit
    // blocked expires 300 permits 4.
    let want = vec![
        2, 3, 1, 2, 5, 1, 1, b'a', 3, 3, 0xac, 0x02, 1, 1, 9, 1, b'b', 3, 1, 0xac, 0x02, 4,
    ];
    assert_eq!(bytes, want);
    assert_eq!(decode(&want), Ok((l.clone(), 2)));
    // Old (version 1) payloads still decode; a version-1 semaphore does not.
    let v1 = vec![1, 0, 1, 2, 1, 1, b'a', 0, 1, 0xac, 0x02, 1, 0];
    assert!(decode(&v1).is_ok());
    let mut bad = want.clone();
    bad[0] = 1;
    assert!(decode(&bad).is_err());
    // Every rule of the kind is checked.
    let refuse = |f: &dyn Fn(&mut Vec<u8>), words: &str| {
        let mut b = want.clone();
        f(&mut b);
        match decode(&b) {
            Err(e) => assert!(e.0.contains(words), "{:?} vs {words}", e.0),
            Ok(l) => panic!("accepted {b:?}: {l:?}"),
        }
    };
    refuse(&|b| b[4] = 0, "limit");
    refuse(&|b| b[4] = 2, "more permits than its limit");
    refuse(&|b| b[9] = 6, "more permits than its limit");
    refuse(&|b| b[21] = 0, "permits");
    refuse(&|b| b[21] = 6, "permits");
    refuse(&|b| b[8] = 0, "mode");
    // A mutex payload in version 2 must have size 0 and one permit per waiter.
    let m = vec![2, 0, 1, 2, 1, 1, 1, b'a', 0, 1, 0xac, 0x02, 1, 0];
    assert_eq!(
        decode(&m).map_err(|e| e.0),
        Err("size of a lock that has none")
    );
    let m = vec![2, 0, 1, 2, 0, 1, 1, b'a', 0, 1, 0xac, 0x02, 1, 0];
    assert!(decode(&m).is_ok());
}

/// Model-based: a reference semaphore written from docs/commands.md (a map of owner
/// → (permits, lease end, token) and a FIFO of (id, owner, permits)) runs
/// the same pseudo-random operations; after every step the whole state must
/// match.
#[test]
fn model_semaphore() {
    use dlock_core::rng::Rng;
    use std::collections::{BTreeMap, VecDeque};
    const OWNERS: [&str; 4] = ["a", "b", "c", "d"];
    let mut steps = 0;
    for seed in 1..=40u64 {
        let mut rng = Rng::new(seed);
        let limit = 1 + rng.below(6);
        let mut l = Lock::semaphore(limit);
        let mut t = Tokens::default();
        let mut holds: BTreeMap<&str, (u32, u64, u64)> = BTreeMap::new();
        let mut queue: VecDeque<(u64, &str, u32)> = VecDeque::new();
        let mut last = 0u64;
        let mut now = 1000u64;
        let mut next_id = 1u64;
        for _ in 0..500 {
            steps += 1;
            let owner = OWNERS[rng.below(4) as usize];
            let fits = |holds: &BTreeMap<&str, (u32, u64, u64)>, k: u32| {
                holds.values().map(|h| u64::from(h.0)).sum::<u64>() + u64::from(k) <= limit
            };
            match rng.below(6) {
                0 | 1 => {
                    // A new request; when denied, wait on the server half the time.
                    let k = 1 + rng.below(limit) as u32;
                    let req = Request {
                        owner: owner.as_bytes(),
                        mode: Mode::Permit,
                        lease_ms: 50,
                        waiter: None,
                    };
                    let got = l.acquire_permits(&req, k, limit, now, &mut t, 0).unwrap();
                    if queue.is_empty() && fits(&holds, k) {
                        let e = holds.entry(owner).or_insert_with(|| {
                            last += 1;
                            (0, 0, last)
                        });
                        e.0 += k;
                        e.1 = now + 50;
                        assert!(matches!(got, Grant::Granted { token, .. } if token == e.2));
                    } else {
                        assert_eq!(got, Grant::Denied);
                        if rng.below(2) == 0 {
                            l.enqueue_permits(owner.as_bytes(), k, next_id, now + 500);
                            queue.push_back((next_id, owner, k));
                            next_id += 1;
                        }
                    }
                }
                2 => {
                    // A waiter looks (Redis calls every blocked client).
                    if let Some(&(id, o, k)) = queue.get(rng.below(queue.len() as u64 + 1) as usize)
                    {
                        let req = Request {
                            owner: o.as_bytes(),
                            mode: Mode::Permit,
                            lease_ms: 50,
                            waiter: Some(id),
                        };
                        let got = l.acquire_permits(&req, k, limit, now, &mut t, 0).unwrap();
                        if queue.front().map(|f| f.0) == Some(id) && fits(&holds, k) {
                            queue.pop_front();
                            let e = holds.entry(o).or_insert_with(|| {
                                last += 1;
                                (0, 0, last)
                            });
                            e.0 += k;
                            e.1 = now + 50;
                            assert!(matches!(got, Grant::Granted { .. }));
                        } else {
                            assert_eq!(got, Grant::Denied);
                        }
                    }
                }
                3 => {
                    let k = 1 + rng.below(3) as u32;
                    let got = l.release_permits(owner.as_bytes(), k);
                    match holds.get_mut(owner) {
                        None => assert_eq!(got, Err(LockError::NotHeld)),
                        Some(h) if h.0 < k => {
                            assert_eq!(got, Err(LockError::NotEnoughPermits { held: h.0 }))
                        }
                        Some(h) => {
                            h.0 -= k;
                            let gone = h.0 == 0;
                            if gone {
                                holds.remove(owner);
                            }
                            assert_eq!(got, Ok(Released { gone, freed: true }));
                        }
                    }
                }
                4 => {
                    now += rng.below(40);
                    l.tick(now, |_| true);
                    holds.retain(|_, h| h.1 > now);
                }
                _ => {
                    if let Some(&(id, _, _)) = queue.get(rng.below(queue.len() as u64 + 1) as usize)
                    {
                        assert!(l.wait_ended(id, 0));
                        queue.retain(|q| q.0 != id);
                    }
                }
            }
            let mut got: Vec<(&str, (u32, u64, u64))> = l
                .holders()
                .iter()
                .map(|h| {
                    (
                        OWNERS
                            .iter()
                            .copied()
                            .find(|o| o.as_bytes() == &*h.owner)
                            .unwrap(),
                        (h.count, h.expires_at, h.token),
                    )
                })
                .collect();
            got.sort();
            let want: Vec<_> = holds.iter().map(|(o, h)| (*o, *h)).collect();
            assert_eq!(got, want, "seed {seed}: holders");
            let q: Vec<(u64, u32)> = l.waiters().iter().map(|w| (w.id, w.permits)).collect();
            let wq: Vec<(u64, u32)> = queue.iter().map(|q| (q.0, q.2)).collect();
            assert_eq!(q, wq, "seed {seed}: queue");
            assert!(l.held_permits() <= limit);
        }
    }
    assert_eq!(steps, 20_000);
}
