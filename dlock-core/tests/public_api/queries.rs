//! Small API pieces (kinds, modes, queries) and `next_deadline`.

use crate::common::*;
use dlock_core::*;

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
    }
    for (mode, name) in [(X, "exclusive"), (R, "read"), (W, "write")] {
        assert_eq!(mode.name(), name);
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
