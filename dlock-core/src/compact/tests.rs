//! The compact form (`compact.rs`): every compactable lock inflates back to
//! itself (journal state and deadlines included); every other lock has no
//! compact form.
//!
//! Unit tests, not tests/: they build locks at and beyond each field's
//! limit (tokens and instants no payload may carry, a size on a mutex, a
//! connection id in `bound`, a queue journal to rewrite) to find each
//! boundary of the compact form, which only the crate can make.

use crate::*;
use std::collections::VecDeque;

use crate::checks::compact_round_trip as round_trip;

fn holder(owner: &[u8], mode: Mode, token: u64) -> Holder {
    Holder {
        owner: Owner::from_slice(owner),
        mode,
        count: 1,
        expires_at: 5_000,
        token,
        bound: 0,
        delay_ms: 0,
        delayed: Delayed::No,
        granted_at: 1_000,
    }
}

fn one_holder(kind: Kind, h: Holder, last_token: u64) -> Lock {
    let mut l = Lock::from_parts(kind, last_token, vec![h], VecDeque::new());
    l.journal_reset();
    l
}

#[test]
fn the_compact_value_is_67_bytes_align_1() {
    assert_eq!(std::mem::size_of::<Compact>(), 67);
    assert_eq!(std::mem::align_of::<Compact>(), 1);
    // The kind's niche leaves room for a tag.
    assert_eq!(std::mem::size_of::<Option<Compact>>(), 67);
}

/// Every combination of the fields at and beyond their limits: compacts
/// exactly when each field fits, and then round-trips.
#[test]
fn exhaustive_fields_at_their_limits() {
    let kinds = [
        Kind::Mutex,
        Kind::Fair,
        Kind::Rw,
        Kind::Semaphore,
        Kind::Latch,
    ];
    let modes = [
        Mode::Exclusive,
        Mode::Read,
        Mode::Write,
        Mode::Permit,
        Mode::Await,
    ];
    let owners: [&[u8]; 4] = [b"a", &[7u8; 39], &[0xffu8; 40], &[1u8; 41]];
    let instants = [0, 1, MAX_INSTANT, (1 << 48) - 1, 1 << 48, u64::MAX];
    let tokens = [1, MAX_TOKEN, u64::MAX];
    let mut seen = 0;
    for kind in kinds {
        for mode in modes {
            for owner in owners {
                for &at in &instants {
                    for &granted in &instants {
                        for &token in &tokens {
                            for count in [1, u32::MAX] {
                                for rewrite in [false, true] {
                                    let mut h = holder(owner, mode, token);
                                    h.expires_at = at;
                                    h.granted_at = granted;
                                    h.count = count;
                                    let mut l = one_holder(kind, h, token);
                                    if rewrite {
                                        l.queue.rewrite();
                                    }
                                    let fits = matches!(kind, Kind::Mutex | Kind::Fair | Kind::Rw)
                                        && kind.allows(mode)
                                        && owner.len() <= OWNER_INLINE
                                        && at < 1 << 48
                                        && granted < 1 << 48;
                                    assert_eq!(round_trip(&l), fits, "{l:?}");
                                    seen += usize::from(fits);
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    assert!(seen > 1000);
}

#[test]
fn anything_beyond_one_plain_hold_does_not_compact() {
    let base = || one_holder(Kind::Mutex, holder(b"a", Mode::Exclusive, 9), 9);
    assert!(round_trip(&base()));
    // Bound, lock-delay, in its delay.
    let mut l = base();
    l.holders[0].bound = 3;
    assert!(!round_trip(&l));
    let mut l = base();
    l.holders[0].bound = BOUND_ELSEWHERE;
    assert!(!round_trip(&l));
    let mut l = base();
    l.holders[0].delay_ms = 1;
    assert!(!round_trip(&l));
    for d in [Delayed::Expired, Delayed::Disconnected] {
        let mut l = base();
        l.holders[0].delayed = d;
        assert!(!round_trip(&l));
    }
    // The lock's last token is not the hold's.
    let mut l = base();
    l.last_token = 10;
    assert!(!round_trip(&l));
    // Two holders.
    let mut l = Lock::from_parts(
        Kind::Rw,
        9,
        vec![holder(b"a", Mode::Read, 8), holder(b"b", Mode::Read, 9)],
        VecDeque::new(),
    );
    l.journal_reset();
    assert!(!round_trip(&l));
    // A size (only semaphores and latches have one).
    let mut l = base();
    l.size = 1;
    assert!(!round_trip(&l));
}

fn req(owner: &[u8], mode: Mode) -> Request<'_> {
    Request {
        owner,
        mode,
        lease_ms: 10_000,
        waiter: None,
    }
}

/// Through the commands' own methods: waiters, a journal with edits, and
/// back to compact once the queue is gone and committed.
#[test]
fn waiters_and_journal_edits_do_not_compact_until_committed() {
    let mut t = Tokens::default();
    let mut l = Lock::new(Kind::Fair);
    let g = l.acquire(&req(b"a", Mode::Exclusive), 1_000, &mut t, 1);
    assert!(matches!(g, Ok(Grant::Granted { .. })));
    // A new lock, not yet committed: "send everything", kept.
    assert!(l.journal_dirty() && !l.delta_ok());
    assert!(round_trip(&l));
    l.journal_reset();
    assert!(round_trip(&l));
    assert!(l.enqueue(b"b", Mode::Exclusive, 5, true, 9_000));
    assert!(!round_trip(&l), "a waiter");
    l.journal_reset();
    assert!(!round_trip(&l), "a waiter, committed");
    assert!(l.remove_waiter(5));
    assert!(l.journal_dirty());
    assert!(!round_trip(&l), "an edit not yet replicated");
    l.journal_reset();
    assert!(round_trip(&l), "committed: compact again");
    // Reentry and renewal keep it compact, with their count and lease.
    let g = l.acquire(&req(b"a", Mode::Exclusive), 2_000, &mut t, 2);
    assert_eq!(
        g,
        Ok(Grant::Granted {
            token: 1,
            reentrant: true
        })
    );
    assert!(l.renew(b"a", 50_000, 3_000));
    assert!(round_trip(&l));
    assert_eq!(l.compact().map(|c| c.inflate().holders()[0].count), Some(2));
    // A replica's copy after a delta: "send everything", kept.
    let mut r = l.clone();
    r.queue.rewrite();
    assert!(round_trip(&r));
    assert!(!r.compact().map(|c| c.inflate().delta_ok()).unwrap_or(true));
}

#[test]
fn rw_holds_compact_in_either_mode_and_a_long_owner_does_not() {
    let mut t = Tokens::default();
    for mode in [Mode::Read, Mode::Write] {
        let mut l = Lock::new(Kind::Rw);
        assert!(l.acquire(&req(b"r", mode), 1_000, &mut t, 1).is_ok());
        l.journal_reset();
        assert!(round_trip(&l));
    }
    let long = [b'x'; 41];
    let mut l = Lock::new(Kind::Mutex);
    assert!(l
        .acquire(&req(&long, Mode::Exclusive), 1_000, &mut t, 1)
        .is_ok());
    assert!(!round_trip(&l));
}

/// A lock with no holder and no waiter (committed just before its key is
/// deleted) of every kind and size compacts, with its last token.
#[test]
fn blank_locks_compact_with_token_and_size() {
    for kind in [
        Kind::Mutex,
        Kind::Fair,
        Kind::Rw,
        Kind::Semaphore,
        Kind::Latch,
    ] {
        for size in [0, 1, 7, (1 << 48) - 1, 1 << 48] {
            for token in [0, 5, MAX_TOKEN, u64::MAX] {
                for reset in [false, true] {
                    let mut l = Lock::from_parts(kind, token, vec![], VecDeque::new());
                    l.size = size;
                    if reset {
                        l.journal_reset();
                    }
                    assert_eq!(round_trip(&l), size < 1 << 48, "{l:?}");
                }
            }
        }
    }
    let mut s = Lock::semaphore(3);
    s.journal_reset();
    assert!(round_trip(&s));
    // A release that empties a held lock.
    let mut t = Tokens::default();
    let mut l = Lock::new(Kind::Mutex);
    assert!(l
        .acquire(&req(b"a", Mode::Exclusive), 1_000, &mut t, 1)
        .is_ok());
    l.journal_reset();
    assert!(l.release(b"a", None).is_ok_and(|r| r.gone));
    assert!(l.is_empty());
    assert!(round_trip(&l));
    assert_eq!(l.compact().and_then(|c| c.deadline()), None);
}
