//! Checks shared by the crate's unit tests and its integration tests
//! (`tests/`), with the deterministic generator behind the `rng` feature:
//! never in the module.

use crate::Lock;

/// Checks the round trip of `l` when it compacts; returns whether it did.
pub fn compact_round_trip(l: &Lock) -> bool {
    let Some(c) = l.compact() else {
        return false;
    };
    let back = c.inflate();
    assert_eq!(&back, l, "inflate(compact(l)) == l");
    // What `PartialEq` leaves out (bookkeeping) must agree too.
    assert_eq!(back.journal_dirty(), l.journal_dirty());
    assert_eq!(back.delta_ok(), l.delta_ok());
    assert_eq!(back.next_deadline(), l.next_deadline());
    assert_eq!(back.next_deadline_hint(), back.next_deadline());
    assert_eq!(c.deadline(), l.holders().first().map(|h| h.expires_at));
    assert_eq!(c.kind(), l.kind());
    assert_eq!(c.is_empty(), l.is_empty());
    // What the module reads without inflating: the index deadline (exact).
    assert_eq!(c.deadline(), back.next_deadline_hint());
    assert_eq!(c.deadline(), l.next_deadline());
    assert_eq!(back.compact(), Some(c), "compacts again to the same");
    assert!(back.holders().iter().all(|h| !h.owner.spilled()), "no heap");
    true
}
