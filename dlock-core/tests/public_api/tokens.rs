//! Fencing tokens: issue, order, floor, exhaustion, overflow.

use crate::common::*;
use dlock_core::*;

// ---------------------------------------------------------------------------
// Fencing tokens
// ---------------------------------------------------------------------------

#[test]
fn token_issue_table() {
    // (last, floor, now_us, result, last afterwards)
    let exhausted = Err(LockError::TokensExhausted);
    type Row = (u64, u64, u64, Result<u64, LockError>, u64);
    let table: [Row; 16] = [
        (0, 0, 0, Ok(1), 1),
        (5, 0, 0, Ok(6), 6),
        (5, 10, 0, Ok(11), 11),
        (10, 5, 0, Ok(11), 11),
        (5, 10, 100, Ok(100), 100),
        (200, 10, 100, Ok(201), 201),
        (100, 0, 100, Ok(101), 101),
        (0, 0, MAX_TOKEN, Ok(MAX_TOKEN), MAX_TOKEN),
        (MAX_TOKEN - 1, 0, 0, Ok(MAX_TOKEN), MAX_TOKEN),
        (0, MAX_TOKEN - 1, 0, Ok(MAX_TOKEN), MAX_TOKEN),
        (0, 0, MAX_TOKEN + 1, exhausted, 0),
        (MAX_TOKEN, 0, 0, exhausted, MAX_TOKEN),
        (0, MAX_TOKEN, 0, exhausted, 0),
        (u64::MAX, 0, 0, exhausted, u64::MAX),
        (0, u64::MAX, 0, exhausted, 0),
        (0, 0, u64::MAX, exhausted, 0),
    ];
    for (last, floor, now_us, want, last_after) in table {
        let mut t = Tokens { last };
        assert_eq!(
            t.issue(floor, now_us),
            want,
            "issue({floor}, {now_us}) after {last}"
        );
        assert_eq!(
            t.last, last_after,
            "counter after issue({floor}, {now_us}) after {last}"
        );
    }
}

#[test]
fn tokens_strictly_increase() {
    let mut t = Tokens::default();
    let mut prev = 0;
    let mut rng = Rng::new(7);
    for _ in 0..10_000 {
        // The clock may jump back and forth; tokens never do.
        let now_us = match rng.below(4) {
            0 => 0,
            1 => prev,
            2 => prev + rng.below(1000),
            _ => rng.below(prev + 1),
        };
        let floor = rng.below(prev + 2);
        let token = t.issue(floor, now_us).unwrap();
        assert!(token > prev, "{token} after {prev}");
        assert!(token > floor);
        assert!(token >= now_us);
        prev = token;
    }
}

#[test]
fn tokens_across_locks_sharing_one_counter() {
    let mut tokens = Tokens::default();
    let mut locks = [
        Lock::new(Kind::Mutex),
        Lock::new(Kind::Rw),
        Lock::new(Kind::Fair),
    ];
    let modes = [X, W, X];
    let mut prev = 0;
    let mut now_us = 1_000_000;
    for round in 0..300u64 {
        let i = (round % 3) as usize;
        if round % 7 == 0 {
            now_us += 5_000; // the clock moves ahead of the counter
        }
        let req = Request {
            owner: b"o",
            mode: modes[i],
            lease_ms: 100,
            waiter: None,
        };
        let got = locks[i].acquire(&req, 1000, &mut tokens, now_us);
        let Ok(Grant::Granted {
            token,
            reentrant: false,
        }) = got
        else {
            panic!("round {round}: {got:?}");
        };
        assert!(token > prev, "round {round}: {token} after {prev}");
        assert!(token >= now_us, "round {round}: token below the clock");
        assert_eq!(locks[i].last_token(), token);
        assert_eq!(
            locks[i].release(b"o", None),
            Ok(Released {
                gone: true,
                freed: true
            })
        );
        prev = token;
        // Deleting the key (a new, empty lock) does not reset tokens.
        if round % 5 == 0 {
            locks[i] = Lock::new(locks[i].kind());
        }
    }
}

#[test]
fn tokens_floor_and_observe() {
    // The lock's own last token is a floor, even for a fresh counter.
    let payload = Raw::new(0, 500).waiter(1, b"w", 0, 1).bytes();
    let (mut lock, floor) = decode(&payload).unwrap();
    assert_eq!(floor, 9);
    let mut tokens = Tokens::default();
    let req = Request {
        owner: b"w",
        mode: X,
        lease_ms: 100,
        waiter: Some(1),
    };
    let got = lock.acquire(&req, 1000, &mut tokens, 0);
    assert_eq!(
        got,
        Ok(Grant::Granted {
            token: 501,
            reentrant: false
        })
    );
    assert_eq!(tokens.last, 501);

    // observe() raises the counter, never lowers it.
    let mut t = Tokens::default();
    t.observe(1000);
    assert_eq!(t.last, 1000);
    t.observe(10);
    assert_eq!(t.last, 1000);
    assert_eq!(t.issue(0, 0), Ok(1001));
    t.observe(1001);
    assert_eq!(t.issue(0, 0), Ok(1002));
    t.observe(5000);
    assert_eq!(t.issue(0, 0), Ok(5001));
}

#[test]
fn tokens_exhausted_changes_nothing() {
    for (kind, mode) in [
        (Kind::Mutex, X),
        (Kind::Rw, R),
        (Kind::Rw, W),
        (Kind::Fair, X),
    ] {
        let mut lock = Lock::new(kind);
        let mut tokens = Tokens { last: MAX_TOKEN };
        let req = Request {
            owner: b"a",
            mode,
            lease_ms: 100,
            waiter: None,
        };
        let before = lock.clone();
        assert_eq!(
            lock.acquire(&req, 1000, &mut tokens, 0),
            Err(LockError::TokensExhausted)
        );
        assert_eq!(lock, before);
        assert_eq!(tokens.last, MAX_TOKEN);
        // A clock beyond the token range exhausts as well.
        let mut tokens = Tokens::default();
        assert_eq!(
            lock.acquire(&req, 1000, &mut tokens, MAX_TOKEN + 1),
            Err(LockError::TokensExhausted)
        );
        assert_eq!(lock, before);
        assert_eq!(tokens, Tokens::default());
    }
}

#[test]
fn reentrant_grant_reuses_the_token_even_when_exhausted() {
    let payload = Raw::new(0, 7).holder(b"a", 0, 3, 7).bytes();
    let (mut lock, _) = decode(&payload).unwrap();
    let mut tokens = Tokens { last: MAX_TOKEN };
    let req = Request {
        owner: b"a",
        mode: X,
        lease_ms: 100,
        waiter: None,
    };
    assert_eq!(
        lock.acquire(&req, 1000, &mut tokens, u64::MAX),
        Ok(Grant::Granted {
            token: 7,
            reentrant: true
        })
    );
    assert_eq!(lock.holders()[0].count, 4);
    assert_eq!(lock.holders()[0].expires_at, 1100);
    assert_eq!(tokens.last, MAX_TOKEN);
}

#[test]
fn count_overflow_changes_nothing() {
    let max = u64::from(u32::MAX);
    // (kind, mode code, mode)
    for (kind, code, mode) in [(0u8, 0u8, X), (1, 1, R), (1, 2, W), (2, 0, X)] {
        let payload = Raw::new(kind, 1).holder(b"a", code, max, 1).bytes();
        let (mut lock, _) = decode(&payload).unwrap();
        assert_eq!(lock.holders()[0].count, u32::MAX);
        let mut tokens = Tokens { last: 1 };
        let req = Request {
            owner: b"a",
            mode,
            lease_ms: 100,
            waiter: None,
        };
        let before = lock.clone();
        assert_eq!(
            lock.acquire(&req, 1000, &mut tokens, 0),
            Err(LockError::CountOverflow)
        );
        assert_eq!(lock, before, "{mode:?}");
        assert_eq!(tokens.last, 1);
        // One release makes room for one more reentrant grant.
        assert_eq!(
            lock.release(b"a", Some(mode)),
            Ok(Released {
                gone: false,
                freed: false
            })
        );
        assert_eq!(lock.holders()[0].count, u32::MAX - 1);
        assert_eq!(
            lock.acquire(&req, 1000, &mut tokens, 0),
            Ok(Grant::Granted {
                token: 1,
                reentrant: true
            })
        );
        assert_eq!(lock.holders()[0].count, u32::MAX);
    }
}
