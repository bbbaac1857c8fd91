//! Table-driven tests of the latch kind: LATCHSET makes a latch of a count,
//! COUNTDOWN lowers it and opens it at 0 (answering every waiting
//! connection, in queue order, exactly once), AWAIT takes a place, and the
//! lock commands refuse a latch with the error naming its kind.

use dlock_core::codec::{decode, encode};

use dlock_core::*;

#[derive(Clone, Copy, Debug)]
enum Op {
    /// enqueue_await: id.
    Await(u64),
    Down,
    Open,
    /// tick at now, with these connections gone.
    Tk(u64, &'static [u64]),
    /// remove_waiter (the wait ended).
    Gone(u64),
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Out {
    Placed(bool),
    Counted(Result<Countdown, LockError>),
    Opened(Vec<u64>),
    Ticked(usize),
    Removed(bool),
}

fn apply(l: &mut Lock, op: Op) -> Out {
    match op {
        Op::Await(id) => Out::Placed(l.enqueue_await(id.to_string().as_bytes(), id, 5000)),
        Op::Down => Out::Counted(l.countdown()),
        Op::Open => Out::Opened(l.open()),
        Op::Tk(now, gone) => Out::Ticked(l.tick(now, |id| !gone.contains(&id)).dropped),
        Op::Gone(id) => Out::Removed(l.remove_waiter(id)),
    }
}

struct Case {
    name: &'static str,
    count: u64,
    setup: Vec<Op>,
    action: Op,
    expect: Out,
    /// The count after, and the ids still waiting; `None`: the latch is
    /// open (empty, its key removed).
    after: Option<(u64, Vec<u64>)>,
}

use Op::*;

#[test]
fn latch_rules() {
    let cases = vec![
        Case {
            name: "countdown lowers the count",
            count: 3,
            setup: vec![Await(1)],
            action: Down,
            expect: Out::Counted(Ok(Countdown::Counted(2))),
            after: Some((2, vec![1])),
        },
        Case {
            name: "the last countdown opens and answers every waiter in order",
            count: 2,
            setup: vec![Await(5), Await(3), Down, Await(9)],
            action: Down,
            expect: Out::Counted(Ok(Countdown::Opened(vec![5, 3, 9]))),
            after: None,
        },
        Case {
            name: "a latch of 1 opens at once, with no waiters",
            count: 1,
            setup: vec![],
            action: Down,
            expect: Out::Counted(Ok(Countdown::Opened(vec![]))),
            after: None,
        },
        Case {
            name: "force-release opens with the count above 0",
            count: 7,
            setup: vec![Await(1), Await(2)],
            action: Open,
            expect: Out::Opened(vec![1, 2]),
            after: None,
        },
        Case {
            name: "a closed connection leaves the queue, the latch stays",
            count: 2,
            setup: vec![Await(1), Await(2)],
            action: Tk(1000, &[1]),
            expect: Out::Ticked(1),
            after: Some((2, vec![2])),
        },
        Case {
            name: "a place ends at its deadline (the AWAIT's WAIT), the latch stays",
            count: 2,
            setup: vec![Await(1)],
            action: Tk(5000, &[]),
            expect: Out::Ticked(1),
            after: Some((2, vec![])),
        },
        Case {
            name: "before its deadline a live place stays",
            count: 2,
            setup: vec![Await(1)],
            action: Tk(4999, &[]),
            expect: Out::Ticked(0),
            after: Some((2, vec![1])),
        },
        Case {
            name: "a wait that ends leaves the queue",
            count: 2,
            setup: vec![Await(1), Await(2)],
            action: Gone(1),
            expect: Out::Removed(true),
            after: Some((2, vec![2])),
        },
        Case {
            name: "opened latches answer nobody twice",
            count: 1,
            setup: vec![Await(1), Open],
            action: Open,
            expect: Out::Opened(vec![]),
            after: None,
        },
    ];
    for c in &cases {
        let mut l = Lock::latch(c.count);
        for op in &c.setup {
            apply(&mut l, *op);
        }
        let out = apply(&mut l, c.action);
        assert_eq!(out, c.expect, "{}", c.name);
        match &c.after {
            None => {
                assert!(l.is_empty(), "{}: not open", c.name);
                assert!(l.waiters().is_empty(), "{}", c.name);
                assert_eq!(l.next_deadline(), None, "{}", c.name);
            }
            Some((count, ids)) => {
                assert!(!l.is_empty(), "{}", c.name);
                assert_eq!(l.latch_count(), Some(*count), "{}", c.name);
                let got: Vec<u64> = l.waiters().iter().map(|w| w.id).collect();
                assert_eq!(&got, ids, "{}", c.name);
                assert!(l
                    .waiters()
                    .iter()
                    .all(|w| w.mode == Mode::Await && w.blocked));
                let first = l.waiters().iter().map(|w| w.expires_at).min();
                assert_eq!(
                    l.next_deadline(),
                    first,
                    "{}: deadline of its places",
                    c.name
                );
                assert_eq!(decode(&encode(&l, 3)), Ok((l.clone(), 3)), "{}", c.name);
            }
        }
        assert!(l.holders().is_empty() && l.last_token() == 0, "{}", c.name);
    }
}

#[test]
fn lock_commands_refuse_a_latch_and_latch_commands_a_lock() {
    let mut l = Lock::latch(2);
    let before = l.clone();
    let mut t = Tokens::default();
    let found = Err(LockError::WrongKind { found: Kind::Latch });
    let req = Request {
        owner: b"a",
        mode: Mode::Exclusive,
        lease_ms: 10,
        waiter: None,
    };
    assert_eq!(
        l.acquire(&req, 0, &mut t, 0),
        found.map(|_: ()| Grant::Denied)
    );
    assert_eq!(
        l.release(b"a", None),
        found.map(|_: ()| Released {
            gone: false,
            freed: false
        })
    );
    assert_eq!(
        l.acquire_permits(&req, 1, 2, 0, &mut t, 0),
        found.map(|_: ()| Grant::Denied)
    );
    assert_eq!(
        l.check_kind(Kind::Mutex),
        Err(LockError::WrongKind { found: Kind::Latch })
    );
    assert!(!l.renew(b"a", 10, 0));
    assert!(!l.force_release());
    assert_eq!(l, before);
    assert_eq!(t, Tokens::default());
    // Latch operations on other kinds.
    let mut m = Lock::new(Kind::Mutex);
    assert_eq!(
        m.countdown(),
        Err(LockError::WrongKind { found: Kind::Mutex })
    );
    assert_eq!(m.open(), Vec::<u64>::new());
    assert!(!m.enqueue_await(b"1", 1, 10));
    assert!(m.is_empty() && m.waiters().is_empty());
    assert_eq!(Kind::Latch.name(), "latch");
    assert_eq!(Mode::Await.name(), "await");
}

#[test]
fn latch_codec() {
    let mut l = Lock::latch(3);
    l.enqueue_await(b"12", 9, 300);
    let want = vec![2, 4, 0, 2, 3, 0, 1, 9, 2, b'1', b'2', 4, 1, 0xac, 0x02, 1];
    assert_eq!(encode(&l, 2), want);
    assert_eq!(decode(&want), Ok((l, 2)));
    // A latch without waiters is a valid payload (the count keeps it).
    assert!(decode(&[2, 4, 0, 2, 3, 0, 0]).is_ok());
    let refuse = |b: &[u8], words: &str| match decode(b) {
        Err(e) => assert!(e.0.contains(words), "{:?} vs {words}", e.0),
        Ok(l) => panic!("accepted {b:?}: {l:?}"),
    };
    refuse(&[2, 4, 0, 2, 0, 0, 0], "latch count");
    refuse(
        &[2, 4, 0, 2, 0x81, 0x80, 0x80, 0x80, 0x20, 0, 0],
        "latch count",
    );
    refuse(&[1, 4, 0, 2, 0, 0], "version 2");
    // Not blocked, or more than one permit: not a waiting connection.
    refuse(
        &[2, 4, 0, 2, 3, 0, 1, 9, 2, b'1', b'2', 4, 0, 0xac, 0x02, 1],
        "waiting connection",
    );
    refuse(
        &[2, 4, 0, 2, 3, 0, 1, 9, 2, b'1', b'2', 4, 1, 0xac, 0x02, 2],
        "waiting connection",
    );
    // A holder on a latch.
    refuse(
        &[2, 4, 1, 2, 3, 1, 1, b'a', 4, 1, 0xac, 0x02, 1, 0],
        "holders",
    );
    // The largest count, 2^32.
    assert!(decode(&[2, 4, 0, 2, 0x80, 0x80, 0x80, 0x80, 0x10, 0, 0]).is_ok());
}
