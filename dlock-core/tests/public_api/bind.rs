//! `BIND`: a grant that creates a hold may bind it to a connection; reentry
//! never rebinds; closing the connection ends the hold whatever its count;
//! the flag (not the connection) survives encoding, and a decoded bound hold
//! belongs to no connection of this process.

use dlock_core::codec::{decode, encode};
use dlock_core::*;

fn req(owner: &[u8], mode: Mode) -> Request<'_> {
    Request {
        owner,
        mode,
        lease_ms: 10_000,
        waiter: None,
    }
}

fn grant(l: &mut Lock, t: &mut Tokens, owner: &[u8], mode: Mode) -> u64 {
    grant_at(l, t, owner, mode, 1_000)
}

/// A grant at `now` (0: a hold whose grant time is unknown, as one loaded
/// from a payload written before it was recorded).
fn grant_at(l: &mut Lock, t: &mut Tokens, owner: &[u8], mode: Mode, now: u64) -> u64 {
    match l.acquire(&req(owner, mode), now, t, 1) {
        Ok(Grant::Granted { token, .. }) => token,
        other => panic!("{owner:?} {mode:?}: {other:?}"),
    }
}

#[test]
fn bind_end_and_rebind_rules() {
    let mut t = Tokens::default();
    let mut l = Lock::new(Kind::Rw);
    grant(&mut l, &mut t, b"a", Mode::Read);
    grant(&mut l, &mut t, b"b", Mode::Read);
    assert!(l.bind_hold(b"a", Mode::Read, 7));
    // Already bound: a later (reentrant) grant does not rebind.
    grant(&mut l, &mut t, b"a", Mode::Read);
    assert!(!l.bind_hold(b"a", Mode::Read, 8));
    // No hold, or client 0: nothing.
    assert!(!l.bind_hold(b"zz", Mode::Read, 7));
    assert!(!l.bind_hold(b"b", Mode::Read, 0));
    assert_eq!(l.end_bound(8, 2_000).ended, 0);
    assert_eq!(l.end_bound(0, 2_000).ended, 0);
    let before = l.clone();
    assert_eq!(l.end_bound(9, 2_000).ended, 0);
    assert_eq!(l, before);
    // The count (2) does not matter.
    assert_eq!(l.end_bound(7, 2_000).ended, 1);
    assert_eq!(l.holders().len(), 1);
    assert_eq!(&*l.holders()[0].owner, b"b");
}

#[test]
fn the_flag_survives_encoding_and_names_no_local_connection() {
    let mut t = Tokens::default();
    let mut l = Lock::new(Kind::Mutex);
    grant(&mut l, &mut t, b"a", Mode::Exclusive);
    assert_eq!(encode(&l, 0).first(), Some(&codec::VERSION_4), "timed");
    // The same hold without its grant time.
    let mut l = Lock::new(Kind::Mutex);
    grant_at(&mut l, &mut Tokens::default(), b"a", Mode::Exclusive, 0);
    let plain = encode(&l, 0);
    assert_eq!(plain.first(), Some(&codec::VERSION), "unbound: old version");
    l.bind_hold(b"a", Mode::Exclusive, 42);
    let bytes = encode(&l, 0);
    assert_eq!(bytes.first(), Some(&codec::VERSION_3));
    let (mut back, _) = decode(&bytes).expect("decodes");
    assert_eq!(back.holders()[0].bound, BOUND_ELSEWHERE);
    // Re-encoding keeps the flag.
    assert_eq!(encode(&back, 0), bytes);
    // Connection 42 of this process is not that connection.
    assert_eq!(back.end_bound(42, 2_000).ended, 0);
    assert_eq!(back.end_bound(BOUND_ELSEWHERE, 2_000).ended, 1);
    assert!(back.is_empty());
    // A semaphore and an unbound hold beside a bound one, granted at `now`.
    let semaphore = |t: &mut Tokens, now: u64| {
        let mut s = Lock::semaphore(4);
        let r = req(b"s", Mode::Permit);
        assert!(matches!(
            s.acquire_permits(&r, 2, 4, now, t, 1),
            Ok(Grant::Granted { .. })
        ));
        let r = req(b"u", Mode::Permit);
        assert!(matches!(
            s.acquire_permits(&r, 1, 4, now, t, 1),
            Ok(Grant::Granted { .. })
        ));
        s.bind_hold(b"s", Mode::Permit, 5);
        s
    };
    let s = semaphore(&mut t, 1_000);
    let (mut back, _) = decode(&encode(&s, 0)).expect("decodes");
    assert_eq!(back.end_all_bound(2_000).ended, 1);
    assert_eq!(back.holders().len(), 1);
    assert_eq!(&*back.holders()[0].owner, b"u");
    // Hold flags out of range are refused (in a payload without grant
    // times, so the flags of the last hold sit where this test looks).
    let s = semaphore(&mut t, 0);
    let mut bad = encode(&s, 0);
    // ... flags of the last hold, its lock-delay (0), then 0 waiters.
    let flag_at = bad.len() - 3;
    if let Some(b) = bad.get_mut(flag_at) {
        *b = 0xfe;
    }
    assert!(decode(&bad).is_err());
}
