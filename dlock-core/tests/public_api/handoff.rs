//! The server-side handoff queries: [`Lock::next_handoff`] names exactly the
//! waiter an attempt with its own request would serve (checked against a
//! brute-force attempt on a copy, over many random states), and
//! [`Lock::tick_due`] does what `tick(now, |_| true)` does.

use dlock_core::*;

const LEASE: u64 = 1_000;

fn req(owner: &[u8], mode: Mode, waiter: Option<u64>) -> Request<'_> {
    Request {
        owner,
        mode,
        lease_ms: LEASE,
        waiter,
    }
}

fn grant(l: &mut Lock, owner: &str, mode: Mode, now: u64) {
    let mut t = Tokens::default();
    let r = req(owner.as_bytes(), mode, None);
    let g = if l.kind() == Kind::Semaphore {
        l.acquire_permits(&r, 1, l.limit().unwrap_or(1), now, &mut t, 0)
    } else {
        l.acquire(&r, now, &mut t, 0)
    };
    assert!(matches!(g, Ok(Grant::Granted { .. })), "{owner}: {g:?}");
}

/// What an attempt by waiter `w` would do now: `Some(true)` granted,
/// `Some(false)` an error, `None` denied.
fn attempt(l: &Lock, w: &Waiter, now: u64) -> Option<bool> {
    let mut c = l.clone();
    let mut t = Tokens::default();
    let r = req(&w.owner, w.mode, Some(w.id));
    let out = if l.kind() == Kind::Semaphore {
        c.acquire_permits(&r, w.permits, l.limit().unwrap_or(0), now, &mut t, 0)
    } else {
        c.acquire(&r, now, &mut t, 0)
    };
    match out {
        Ok(Grant::Granted { .. }) => Some(true),
        Ok(Grant::Denied) => None,
        Err(_) => Some(false),
    }
}

#[test]
fn mutex_hands_over_to_the_head_only() {
    let mut l = Lock::new(Kind::Mutex);
    grant(&mut l, "a", Mode::Exclusive, 0);
    for i in 0..5 {
        l.enqueue(
            format!("w{i}").as_bytes(),
            Mode::Exclusive,
            10 + i,
            true,
            9_000,
        );
    }
    assert_eq!(l.next_handoff(), None, "held: nobody");
    l.release(b"a", None).unwrap();
    assert_eq!(l.next_handoff(), Some(10));
    let r = req(b"w0", Mode::Exclusive, Some(10));
    l.acquire(&r, 1, &mut Tokens::default(), 0).unwrap();
    assert_eq!(l.next_handoff(), None, "one grant per release");
}

#[test]
fn fair_head_queued_but_not_waiting_serves_nobody() {
    let mut l = Lock::new(Kind::Fair);
    l.enqueue(b"polling", Mode::Exclusive, 1, false, 9_000);
    l.enqueue(b"blocked", Mode::Exclusive, 2, true, 9_000);
    assert_eq!(l.next_handoff(), None);
    l.remove_waiter(1);
    assert_eq!(l.next_handoff(), Some(2));
}

#[test]
fn rw_head_readers_one_call_each_then_the_upgrade_anywhere() {
    let mut l = Lock::new(Kind::Rw);
    grant(&mut l, "w", Mode::Write, 0);
    l.enqueue(b"r1", Mode::Read, 1, true, 9_000);
    l.enqueue(b"r2", Mode::Read, 2, true, 9_000);
    l.enqueue(b"x", Mode::Write, 3, true, 9_000);
    l.enqueue(b"r3", Mode::Read, 4, true, 9_000);
    l.release(b"w", None).unwrap();
    let mut t = Tokens::default();
    for (id, o) in [(1, "r1"), (2, "r2")] {
        assert_eq!(l.next_handoff(), Some(id));
        l.acquire(&req(o.as_bytes(), Mode::Read, Some(id)), 1, &mut t, 0)
            .unwrap();
    }
    assert_eq!(l.next_handoff(), None, "the writer waits for both readers");
    // r1 waits to upgrade, behind the writer; r2 leaves: r1 is the only
    // reader and upgrades from its place.
    l.enqueue(b"r1", Mode::Write, 5, true, 9_000);
    assert_eq!(l.next_handoff(), None);
    l.release(b"r2", None).unwrap();
    assert_eq!(l.next_handoff(), Some(5));
}

#[test]
fn semaphore_heads_that_fit() {
    let mut l = Lock::semaphore(3);
    grant(&mut l, "a", Mode::Permit, 0);
    grant(&mut l, "b", Mode::Permit, 0);
    grant(&mut l, "c", Mode::Permit, 0);
    l.enqueue_permits(b"two", 2, 1, 9_000);
    l.enqueue_permits(b"one", 1, 2, 9_000);
    l.release(b"a", None).unwrap();
    assert_eq!(l.next_handoff(), None, "the head needs 2: strict FIFO");
    l.release(b"b", None).unwrap();
    assert_eq!(l.next_handoff(), Some(1));
}

use dlock_core::rng::Rng;

/// Over random states of every lock kind: a waiter named is one an attempt
/// serves; when none is named, every blocked waiter is denied (no
/// exemption: a reader behind a reader stalled by its own delayed hold is
/// named).
#[test]
fn next_handoff_agrees_with_brute_force_attempts() {
    let mut rng = Rng::new(7);
    let owners = ["a", "b", "c", "d"];
    for case in 0..4_000 {
        let kind = [Kind::Mutex, Kind::Fair, Kind::Rw, Kind::Semaphore][case % 4];
        let mut l = if kind == Kind::Semaphore {
            Lock::semaphore(1 + rng.below(3))
        } else {
            Lock::new(kind)
        };
        let now = 100;
        let mut t = Tokens::default();
        let mut id = 1;
        for _ in 0..rng.below(8) {
            let owner = owners[rng.below(4) as usize].as_bytes();
            let mode = match kind {
                Kind::Rw if rng.below(2) == 0 => Mode::Read,
                Kind::Rw => Mode::Write,
                Kind::Semaphore => Mode::Permit,
                _ => Mode::Exclusive,
            };
            let blocked = kind != Kind::Fair || rng.below(3) != 0;
            match rng.below(4) {
                0 | 1 => {
                    let r = req(owner, mode, None);
                    let permits = 1 + rng.below(2) as u32;
                    let g = if kind == Kind::Semaphore {
                        l.acquire_permits(&r, permits, l.limit().unwrap_or(1), now, &mut t, 0)
                    } else {
                        l.acquire(&r, now, &mut t, 0)
                    };
                    if g == Ok(Grant::Denied) {
                        if kind == Kind::Semaphore {
                            l.enqueue_permits(owner, permits, id, 9_000);
                        } else if l.check_room(owner, mode, blocked, 64).is_ok() {
                            l.enqueue(owner, mode, id, blocked, 9_000);
                        }
                        id += 1;
                    }
                }
                2 => {
                    let _ = l.release(owner, None);
                }
                _ => {
                    if rng.below(2) == 0 {
                        l.set_lock_delay(owner, mode, 50);
                    }
                    l.end_all_bound(now);
                    let _ = l.bind_hold(owner, mode, 9);
                    l.end_bound(9, now);
                }
            }
        }
        let named = l.next_handoff();
        let waiters: Vec<Waiter> = l.waiters().iter().cloned().collect();
        match named {
            Some(n) => {
                let w = waiters.iter().find(|w| w.id == n).expect("named a place");
                assert!(w.blocked, "case {case}: named a queued place: {l:?}");
                assert!(attempt(&l, w, now).is_some(), "case {case}: {l:?}");
            }
            None => {
                if let Some(h) = waiters.first().filter(|h| h.blocked) {
                    assert!(attempt(&l, h, now).is_none(), "case {case}: {l:?}");
                }
                for w in waiters.iter().filter(|w| w.blocked) {
                    assert!(attempt(&l, w, now).is_none(), "case {case}: {w:?} {l:?}");
                }
            }
        }
    }
}

#[test]
fn tick_due_does_what_tick_does() {
    let mut rng = Rng::new(11);
    for case in 0..2_000 {
        let mut l = Lock::new(Kind::Fair);
        let mut t = Tokens::default();
        let r = req(b"h", Mode::Exclusive, None);
        l.acquire(&r, 0, &mut t, 0).unwrap();
        for i in 0..rng.below(6) {
            let owner = format!("o{i}");
            let blocked = rng.below(2) == 0;
            l.enqueue(
                owner.as_bytes(),
                Mode::Exclusive,
                i + 1,
                blocked,
                50 + rng.below(100),
            );
            if !blocked && rng.below(3) == 0 {
                // Waits on the server from its queued place, then its WAIT
                // ends: a queued place again.
                l.enqueue(owner.as_bytes(), Mode::Exclusive, 100 + i, true, 300);
                l.wait_ended(100 + i, 50 + rng.below(100));
            }
        }
        let mut a = l.clone();
        let mut b = l.clone();
        for now in [0, 40, 60, 90, 120, 160, 2_000] {
            let ta = a.tick(now, |_| true);
            let tb = b.tick_due(now);
            assert_eq!(ta, tb, "case {case} at {now}");
            assert_eq!(a.waiters(), b.waiters(), "case {case} at {now}");
            assert_eq!(a.next_deadline(), b.next_deadline());
            if let Some(exact) = b.next_deadline() {
                let hint = b.next_deadline_hint();
                assert!(
                    hint.is_some_and(|h| h <= exact),
                    "the hint is never later: case {case}"
                );
            }
        }
    }
}

/// A READ waiter behind a reader stalled by its own hold in its lock-delay
/// is grantable (no other owner holds WRITE, no writer waits ahead): the
/// handoff names it rather than leaving it to wait out the delay.
#[test]
fn rw_reader_behind_a_delayed_reader_is_handed_the_lock() {
    let mut l = Lock::new(Kind::Rw);
    let mut t = Tokens::default();
    l.acquire(&req(b"o", Mode::Write, None), 0, &mut t, 0)
        .unwrap();
    // O's READ lease ends into its lock-delay.
    let mut short = req(b"o", Mode::Read, None);
    short.lease_ms = 10;
    l.acquire(&short, 0, &mut t, 0).unwrap();
    l.set_lock_delay(b"o", Mode::Read, 60_000);
    l.tick(11, |_| true);
    assert!(l.holders().iter().any(|h| !h.is_live()), "{l:?}");
    l.enqueue(b"o", Mode::Read, 1, true, 90_000);
    l.enqueue(b"p", Mode::Read, 2, true, 90_000);
    l.release(b"o", Some(Mode::Write)).unwrap();
    let p = l.waiters()[1].clone();
    assert_eq!(attempt(&l, &p, 12), Some(true), "P is grantable");
    assert_eq!(l.next_handoff(), Some(2), "{l:?}");
}

/// A request of the owner from another connection, granted at the place
/// where its first connection waits on the server, leaves that place: the
/// waiting connection is served next (a re-entry), not left with no place.
#[test]
fn a_grant_from_another_connection_keeps_the_waiting_place() {
    let mut l = Lock::new(Kind::Rw);
    let mut t = Tokens::default();
    l.acquire(&req(b"r", Mode::Read, None), 0, &mut t, 0)
        .unwrap();
    l.enqueue(b"o", Mode::Write, 7, true, 9_000);
    l.release(b"r", None).unwrap();
    // Before the handoff runs, o's other connection asks.
    let g = l.acquire(&req(b"o", Mode::Write, None), 1, &mut t, 0);
    assert!(matches!(g, Ok(Grant::Granted { .. })), "{g:?}");
    assert!(l.has_waiter(7), "the waiting connection keeps its place");
    assert_eq!(l.next_handoff(), Some(7), "{l:?}");
}
