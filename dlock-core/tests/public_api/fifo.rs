//! FIFO order of blocked waiters.

use crate::common::*;
use dlock_core::*;

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
