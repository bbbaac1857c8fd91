//! The queue cap (`dlock.max-queue`): [`Lock::check_room`] refuses a new
//! place beyond the cap, and never the place a request already has.

use dlock_core::*;

/// A fair lock with `queued` owners q0.. queued (polling) and `blocked`
/// connections b0.. waiting on the server.
fn fair(queued: u64, blocked: u64) -> Lock {
    let mut l = Lock::new(Kind::Fair);
    for i in 0..queued {
        l.enqueue(format!("q{i}").as_bytes(), Mode::Exclusive, i, false, 9_000);
    }
    for i in 0..blocked {
        l.enqueue(
            format!("b{i}").as_bytes(),
            Mode::Exclusive,
            100 + i,
            true,
            9_000,
        );
    }
    l
}

/// (queued, blocked, owner, mode, blocked request, max, expected)
type Case = (
    u64,
    u64,
    &'static str,
    Mode,
    bool,
    usize,
    Result<(), LockError>,
);

#[test]
fn check_room_table() {
    let full = LockError::QueueFull { max: 2 };
    let cases: &[Case] = &[
        (0, 0, "new", Mode::Exclusive, true, 1, Ok(())),
        (1, 0, "new", Mode::Exclusive, true, 2, Ok(())),
        (2, 0, "new", Mode::Exclusive, true, 2, Err(full)),
        (2, 0, "new", Mode::Exclusive, false, 2, Err(full)),
        (0, 2, "new", Mode::Exclusive, true, 2, Err(full)),
        // A queued owner asking again keeps its place.
        (2, 0, "q1", Mode::Exclusive, false, 2, Ok(())),
        // A queued owner that now waits on the server takes over its place.
        (2, 0, "q0", Mode::Exclusive, true, 2, Ok(())),
        // An owner waiting on the server that polls too: that place is its.
        (0, 2, "b1", Mode::Exclusive, false, 2, Ok(())),
        // A second connection of a blocked owner needs a place of its own.
        (0, 2, "b1", Mode::Exclusive, true, 2, Err(full)),
        // Above the cap (it was lowered): still refused, nothing dropped.
        (3, 0, "new", Mode::Exclusive, true, 2, Err(full)),
    ];
    for &(q, b, owner, mode, blocked, max, want) in cases {
        let l = fair(q, b);
        let before = l.clone();
        let got = l.check_room(owner.as_bytes(), mode, blocked, max);
        assert_eq!(
            got, want,
            "queued {q} blocked {b} owner {owner} blocked {blocked} max {max}"
        );
        assert_eq!(l, before);
    }
}

#[test]
fn enqueue_after_check_room_never_exceeds_the_cap() {
    let max = 3;
    let mut l = Lock::new(Kind::Mutex);
    for i in 0..10u64 {
        let owner = format!("o{}", i % 5);
        let blocked = i % 2 == 0;
        if l.check_room(owner.as_bytes(), Mode::Exclusive, blocked, max)
            .is_ok()
        {
            l.enqueue(owner.as_bytes(), Mode::Exclusive, i, blocked, 9_000);
        }
        assert!(l.waiters().len() <= max, "{:?}", l.waiters());
    }
    assert_eq!(l.waiters().len(), max);
}
