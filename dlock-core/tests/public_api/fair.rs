//! Fair-lock queue rules, as tables of cases.

use crate::common::*;
use dlock_core::*;

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
