//! The slow log (`dlock_core::slowlog`).

use dlock_core::slowlog::*;
use dlock_core::{Kind, Mode};

fn entry(ms: u64) -> Entry {
    Entry {
        id: 0,
        ended_ms: 1000 + ms,
        phase: Phase::Wait,
        key: b"k".as_slice().into(),
        owner: b"o".as_slice().into(),
        kind: Kind::Mutex,
        mode: Mode::Exclusive,
        duration_ms: ms,
        outcome: Outcome::Timeout,
        blocked_by: vec![b"h".as_slice().into()],
    }
}

#[test]
fn bounded_newest_first_ids_survive_reset() {
    let mut l = SlowLog::new();
    for ms in 0..10 {
        l.push(entry(ms), 4);
    }
    assert_eq!(l.len(), 4);
    let got: Vec<(u64, u64)> = l.newest(10).map(|e| (e.id, e.duration_ms)).collect();
    assert_eq!(got, vec![(9, 9), (8, 8), (7, 7), (6, 6)]);
    assert_eq!(l.newest(2).count(), 2);
    l.trim(1);
    assert_eq!(l.len(), 1);
    l.reset();
    assert!(l.is_empty());
    l.push(entry(1), 4);
    assert_eq!(l.newest(1).next().map(|e| e.id), Some(10));
    l.push(entry(1), 0);
    assert!(l.is_empty());
}
