//! Delta replication (issue 16): the journal of queue edits and the delta
//! payloads made from it. [`Replica`] is what the fuzzers use after every
//! operation (a commit point): it applies what the command layer would
//! replicate to its copy of the last committed state, and checks the copy
//! then equals the master's lock exactly (encoded full payloads compared).

use crate::common::*;
use dlock_core::codec::{self, DecodeError};
use dlock_core::*;

fn req(owner: &[u8], waiter: Option<u64>) -> Request<'_> {
    Request {
        owner,
        mode: Mode::Exclusive,
        lease_ms: 1000,
        waiter,
    }
}

/// A mutex held by `h` with `n` blocked waiters (ids 1..=n), committed.
fn queued(n: u64) -> (Lock, Replica, Tokens) {
    let mut tokens = Tokens::default();
    let mut l = Lock::new(Kind::Mutex);
    assert!(matches!(
        l.acquire(&req(b"h", None), 0, &mut tokens, 1),
        Ok(Grant::Granted { .. })
    ));
    for id in 1..=n {
        assert!(l.enqueue(
            format!("w{id}").as_bytes(),
            Mode::Exclusive,
            id,
            true,
            60_000
        ));
    }
    let mut r = Replica::default();
    r.sync(Some(&mut l), tokens.last).unwrap();
    (l, r, tokens)
}

/// A handoff cycle (release, the head granted, the granted owner queueing
/// again) and a waiter timing out, sent as deltas whose size does not grow
/// with the queue.
#[test]
fn handoff_delta_is_independent_of_queue_length() {
    let mut sizes = Vec::new();
    for n in [64u64, 4096] {
        let (mut l, mut r, mut tokens) = queued(n);
        assert_eq!(r.fulls, 1);
        let mut owner = b"h".to_vec();
        for round in 0..20u64 {
            assert!(l.release(&owner, None).unwrap().gone);
            r.sync(Some(&mut l), tokens.last).unwrap();
            let head = l.next_handoff().unwrap();
            owner = l.waiters().front().unwrap().owner.to_vec();
            assert!(matches!(
                l.acquire(&req(&owner, Some(head)), 10, &mut tokens, 100 + round),
                Ok(Grant::Granted { .. })
            ));
            r.sync(Some(&mut l), tokens.last).unwrap();
            // A waiter in the middle times out; another queues.
            let mid = l.waiters().get(l.waiters().len() / 2).unwrap().id;
            assert!(l.wait_ended(mid, 5000));
            assert!(l.enqueue(b"again", Mode::Exclusive, 10_000 + round, true, 60_000));
            r.sync(Some(&mut l), tokens.last).unwrap();
            let w = l.waiters().back().unwrap().id;
            assert!(l.remove_waiter(w));
            r.sync(Some(&mut l), tokens.last).unwrap();
        }
        assert_eq!((r.fulls, r.deltas), (1, 80));
        sizes.push(r.delta_bytes);
    }
    // Same deltas whatever the queue (ids and owners a few bytes longer),
    // under 60 bytes each, where the whole state is ~9 bytes per waiter.
    assert!(
        sizes[1] < sizes[0] * 3 / 2 && sizes[1] < 80 * 60,
        "{sizes:?}"
    );
}

/// Fair-lock places changed in place (a wait that ends keeps a queued
/// place; a queued owner waiting again from its place) and queued places
/// timing out, through the tick's scan.
#[test]
fn fair_places_changed_in_place_and_timed_out() {
    let mut tokens = Tokens::default();
    let mut l = Lock::new(Kind::Fair);
    l.acquire(&req(b"h", None), 0, &mut tokens, 1).unwrap();
    for id in 1..=10u64 {
        l.enqueue(
            format!("w{id}").as_bytes(),
            Mode::Exclusive,
            id,
            id % 2 == 0,
            100 * id,
        );
    }
    let mut r = Replica::default();
    r.sync(Some(&mut l), tokens.last).unwrap();
    assert!(l.wait_ended(4, 50));
    r.sync(Some(&mut l), tokens.last).unwrap();
    // w3 (queued) waits on the server from its place: same place, new id.
    assert!(!l.enqueue(b"w3", Mode::Exclusive, 33, true, 9000));
    assert!(l.waiters().iter().any(|w| w.id == 33));
    r.sync(Some(&mut l), tokens.last).unwrap();
    // Queued places 1, 4 (at 50), 5, 7 end by 700; a new one too.
    l.enqueue(b"late", Mode::Exclusive, 99, false, 650);
    let t = l.tick(700, |_| true);
    assert_eq!(t.dropped, 5);
    r.sync(Some(&mut l), tokens.last).unwrap();
    assert_eq!(r.deltas, 3);
}

/// Anything the journal cannot express makes the next commit send the
/// whole state: a made or loaded lock, places put at the front.
#[test]
fn rewrite_all_where_the_journal_cannot_say() {
    let (mut l, mut r, tokens) = queued(3);
    assert!(!l.delta_ok() || !l.journal_dirty());
    let places = vec![Waiter {
        id: 77,
        owner: b"front".as_slice().into(),
        mode: Mode::Exclusive,
        blocked: true,
        expires_at: 10,
        permits: 1,
        since: 0,
    }];
    assert!(l.adopt(places));
    assert!(!l.delta_ok());
    r.sync(Some(&mut l), tokens.last).unwrap();
    assert!(l.delta_ok());
    let (decoded, _) = codec::decode(&codec::encode(&l, 0)).unwrap();
    assert!(!decoded.delta_ok());
    assert!(!Lock::new(Kind::Rw).delta_ok());
}

fn delta_of(l: &Lock) -> Vec<u8> {
    let mut out = Vec::new();
    codec::encode_delta_into(l, 0, &mut out);
    out
}

/// Deltas that do not fit the lock they are applied to are refused with
/// an error naming why, and change nothing.
#[test]
fn deltas_that_do_not_fit_are_refused() {
    let (mut l, r, mut tokens) = queued(3);
    let base = r.lock.clone().unwrap();
    assert!(l.remove_waiter(2));
    let d = delta_of(&l);
    l.journal_reset();
    let refuse = |target: &Lock, bytes: &[u8], why: &str| {
        let mut t = target.clone();
        let before = codec::encode(&t, 0);
        let got = codec::decode_delta(bytes).and_then(|d| t.apply_delta(d).map(|_| ()));
        assert_eq!(got, Err(DecodeError(leak(why))), "{why}");
        assert_eq!(codec::encode(&t, 0), before);
    };
    // Applied twice: the base no longer matches.
    let mut once = base.clone();
    once.apply_delta(codec::decode_delta(&d).unwrap()).unwrap();
    refuse(
        &once,
        &d,
        "delta base queue length differs from the lock's queue (expected the state of the master's previous change)",
    );
    // Another kind.
    let mut rw = Lock::new(Kind::Rw);
    for id in 1..=3 {
        rw.enqueue(b"x", Mode::Write, id, true, 5);
    }
    refuse(
        &rw,
        &d,
        "delta is for another kind of lock than the key holds (expected the same kind)",
    );
    // The removed id is unknown (same length, other ids).
    let mut other = Lock::new(Kind::Mutex);
    other.acquire(&req(b"h", None), 0, &mut tokens, 1).unwrap();
    for id in [1, 5, 3] {
        other.enqueue(b"o", Mode::Exclusive, id, true, 5);
    }
    refuse(&other, &d, "delta removes a place that is not in the queue");
    // An appended id already in the queue.
    let mut m = base.clone();
    m.journal_reset();
    m.enqueue(b"dup", Mode::Exclusive, 50, true, 5);
    let mut bytes = delta_of(&m);
    // The appended waiter's id is the first varint after the counts:
    // rewrite 50 to 1 (both one byte).
    let pos = bytes.iter().rposition(|&b| b == 50).unwrap();
    bytes[pos] = 1;
    refuse(
        &base,
        &bytes,
        "delta appends a place whose id is already in the queue",
    );
    // A delta is never a full payload.
    assert!(codec::decode(&d).is_err());
    // Truncations and trailing bytes.
    for n in 0..d.len() {
        assert!(codec::decode_delta(&d[..n]).is_err());
    }
    let mut long = d.clone();
    long.push(0);
    assert_eq!(
        codec::decode_delta(&long).map(|_| ()),
        Err(DecodeError("trailing bytes after the delta"))
    );
}

fn leak(s: &str) -> &'static str {
    Box::leak(s.to_owned().into_boxed_str())
}

/// Corrupted deltas: refused (and nothing changes) or applied to a lock
/// that keeps every invariant. Never a panic.
#[test]
fn corrupt_deltas_are_refused_or_valid() {
    let mut rng = Rng::new(0xDE17A);
    let (mut accepted, mut refused) = (0, 0);
    for round in 0..400u64 {
        let (mut l, r, mut tokens) = queued(1 + round % 20);
        let base = r.lock.unwrap();
        // Some edits: a grant of the head, a timeout, an append.
        l.release(b"h", None).unwrap();
        let head = l.next_handoff().unwrap();
        let owner = l.waiters().front().unwrap().owner.to_vec();
        l.acquire(&req(&owner, Some(head)), 1, &mut tokens, 9)
            .unwrap();
        if let Some(w) = l.waiters().back().map(|w| w.id) {
            l.wait_ended(w, 100);
        }
        l.enqueue(b"n", Mode::Exclusive, 1000 + round, true, 70);
        let good = delta_of(&l);
        for _ in 0..20 {
            let mut bad = good.clone();
            match rng.below(4) {
                0 => {
                    let i = rng.below(bad.len() as u64) as usize;
                    bad[i] ^= 1 << rng.below(8);
                }
                1 => {
                    let i = rng.below(bad.len() as u64) as usize;
                    bad[i] = rng.next() as u8;
                }
                2 => bad.truncate(rng.below(bad.len() as u64) as usize),
                _ => {
                    let i = 1 + rng.below(bad.len() as u64 - 1) as usize;
                    bad.insert(i, rng.next() as u8);
                }
            }
            let mut t = base.clone();
            let before = codec::encode(&t, 0);
            match codec::decode_delta(&bad).and_then(|d| t.apply_delta(d)) {
                Ok(_) => {
                    accepted += 1;
                    check_lock(&t).unwrap();
                }
                Err(_) => {
                    refused += 1;
                    assert_eq!(codec::encode(&t, 0), before);
                }
            }
        }
    }
    assert!(accepted > 100 && refused > 1000, "{accepted} {refused}");
}

/// Many edits in one delta take the indexed path (and the same result).
#[test]
fn many_edits_in_one_delta() {
    let (mut l, mut r, _) = queued(300);
    for id in (1..=300u64).step_by(3) {
        assert!(l.remove_waiter(id));
    }
    for id in (2..=300u64).step_by(7) {
        l.wait_ended(id, 5);
    }
    for id in 0..40u64 {
        l.enqueue(b"m", Mode::Exclusive, 5000 + id, true, 9);
    }
    r.sync(Some(&mut l), 0).unwrap();
    assert_eq!(r.deltas, 1);
}

mod prop {
    use super::*;
    use proptest::prelude::*;

    /// One step of [`long_queues_replicate_exactly`], on a queue of `len`
    /// places (`x` picks a place, an owner, a seed).
    #[derive(Clone, Debug)]
    enum Step {
        /// The holder releases; the head, when it waits, is granted.
        Handoff,
        /// The wait of the place `x` ends (a fair lock keeps it queued).
        WaitEnds(usize),
        /// The place `x` leaves (its connection closed).
        Leaves(usize),
        /// A new owner queues, waiting on the server or not.
        Queues(bool),
        /// The queued (not waiting) place `x`'s owner waits on the server
        /// from it: the place takes the connection's id.
        WaitsFromPlace(usize),
        /// Another master (a failover): ids from a new random seed.
        Failover(u64),
        /// The command layer's commit: the delta (or the whole state) is
        /// applied to the replica and compared.
        Commit,
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            3 => Just(Step::Handoff),
            2 => any::<usize>().prop_map(Step::WaitEnds),
            2 => any::<usize>().prop_map(Step::Leaves),
            4 => any::<bool>().prop_map(Step::Queues),
            2 => any::<usize>().prop_map(Step::WaitsFromPlace),
            1 => (0u64..(1 << 62)).prop_map(Step::Failover),
            6 => Just(Step::Commit),
        ]
    }

    /// Long queues (hundreds to thousands of places), edited at the head,
    /// in the middle and at the back, with ids from several masters: every
    /// delta the journal makes applies to the replica's copy, which then
    /// equals the master's lock (`Replica::sync` compares them).
    fn long_queue_run(kind: Kind, len: u64, seed: u64, steps: &[Step]) -> Result<(), String> {
        let mut tokens = Tokens::default();
        let mut l = Lock::new(kind);
        let mut next_id = seed;
        let fresh = |next_id: &mut u64| {
            *next_id = next_id.wrapping_add(1) & ((1 << 62) - 1);
            *next_id
        };
        let mut owner = b"h".to_vec();
        l.acquire(&req(&owner, None), 0, &mut tokens, 1)
            .map_err(|e| format!("{e:?}"))?;
        for i in 0..len {
            l.enqueue(
                format!("w{i}").as_bytes(),
                Mode::Exclusive,
                fresh(&mut next_id),
                i % 3 != 0,
                60_000,
            );
        }
        let mut r = Replica::default();
        r.sync(Some(&mut l), tokens.last)?;
        let mut made = 0u64;
        for s in steps {
            let n = l.waiters().len();
            let at = |x: usize| {
                l.waiters()
                    .get(x % n.max(1))
                    .map(|w| (w.id, w.blocked, w.owner.clone()))
            };
            match s {
                Step::Handoff => {
                    if l.release(&owner, None).is_ok_and(|r| r.gone) {
                        if let Some(head) = l.next_handoff() {
                            let o = l
                                .waiters()
                                .front()
                                .map(|w| w.owner.to_vec())
                                .unwrap_or_default();
                            if matches!(
                                l.acquire(&req(&o, Some(head)), 10, &mut tokens, 100),
                                Ok(Grant::Granted { .. })
                            ) {
                                owner = o;
                            }
                        }
                        if l.holders().is_empty() {
                            // Nobody waiting was granted: the holder comes back.
                            owner = b"h".to_vec();
                            l.acquire(&req(&owner, None), 10, &mut tokens, 100)
                                .map_err(|e| format!("{e:?}"))?;
                        }
                    }
                }
                Step::WaitEnds(x) => {
                    if let Some((id, true, _)) = at(*x) {
                        l.wait_ended(id, 5_000);
                    }
                }
                Step::Leaves(x) => {
                    if let Some((id, _, _)) = at(*x) {
                        l.remove_waiter(id);
                    }
                }
                Step::Queues(blocked) => {
                    made += 1;
                    let id = fresh(&mut next_id);
                    l.enqueue(
                        format!("n{made}").as_bytes(),
                        Mode::Exclusive,
                        id,
                        *blocked,
                        60_000,
                    );
                }
                Step::WaitsFromPlace(x) => {
                    if let Some((_, false, o)) = at(*x) {
                        let id = fresh(&mut next_id);
                        l.enqueue(&o, Mode::Exclusive, id, true, 70_000);
                    }
                }
                Step::Failover(s) => next_id = *s,
                Step::Commit => r.sync(Some(&mut l), tokens.last)?,
            }
        }
        r.sync(Some(&mut l), tokens.last)?;
        if r.deltas == 0 {
            return Err("no delta was sent".into());
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]

        #[test]
        fn long_queues_replicate_exactly(
            fair in any::<bool>(),
            len in 200u64..3000,
            seed in 0u64..(1 << 62),
            steps in proptest::collection::vec(step(), 1..120),
        ) {
            let kind = if fair { Kind::Fair } else { Kind::Mutex };
            prop_assert_eq!(long_queue_run(kind, len, seed, &steps), Ok(()));
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

        /// Any bytes as a delta, applied to a queued lock: refused, or a
        /// lock that keeps every invariant. Never a panic.
        #[test]
        fn arbitrary_deltas_never_panic(mut bytes in proptest::collection::vec(any::<u8>(), 0..200), n in 0u64..6) {
            let (l, _, _) = queued(n);
            let mut t = l.clone();
            if let Some(b) = bytes.first_mut() {
                *b = codec::DELTA;
            }
            if let Ok(d) = codec::decode_delta(&bytes) {
                if t.apply_delta(d).is_ok() {
                    prop_assert!(check_lock(&t).is_ok());
                }
            }
        }
    }
}

/// The journal costs every lock 16 bytes: a held lock stays in jemalloc's
/// 192-byte class (memory per lock, issue 16).
#[test]
fn a_lock_fits_in_192_bytes() {
    assert!(
        std::mem::size_of::<Lock>() <= 192,
        "{}",
        std::mem::size_of::<Lock>()
    );
}

/// Wait starts (`Waiter::since`) and grant times travel in deltas and full
/// payloads; a blocked wait that takes over a queued place keeps its start.
#[test]
fn wait_starts_and_grant_times_replicate() {
    let mut t = Tokens::default();
    let mut l = Lock::new(Kind::Fair);
    let mut r = Replica::default();
    let req = Request {
        owner: b"h",
        mode: Mode::Exclusive,
        lease_ms: 1000,
        waiter: None,
    };
    assert!(matches!(
        l.acquire(&req, 100, &mut t, 100_000),
        Ok(Grant::Granted { .. })
    ));
    assert_eq!(l.holders()[0].granted_at, 100);
    r.sync(Some(&mut l), 0).unwrap();
    assert!(l.enqueue(b"q", Mode::Exclusive, 1, false, 5000));
    l.stamp_wait(1, 200);
    r.sync(Some(&mut l), 0).unwrap();
    assert!(r.deltas > 0);
    // The owner now waits on the server from its queued place: same start.
    assert!(!l.enqueue(b"q", Mode::Exclusive, 2, true, 6000));
    l.stamp_wait(2, 300);
    assert_eq!((l.waiters()[0].id, l.waiters()[0].since), (2, 200));
    assert!(l.enqueue(b"z", Mode::Exclusive, 3, true, 6000));
    l.stamp_wait(3, 400);
    r.sync(Some(&mut l), 0).unwrap();
    let since: Vec<u64> = r
        .lock
        .as_ref()
        .unwrap()
        .waiters()
        .iter()
        .map(|w| w.since)
        .collect();
    assert_eq!(since, vec![200, 400]);
    // Re-entry and renewal keep the grant time.
    assert!(l.acquire(&req, 900, &mut t, 900_000).is_ok());
    assert!(l.renew(b"h", 1000, 950));
    assert_eq!(l.holders()[0].granted_at, 100);
    r.sync(Some(&mut l), 0).unwrap();
    assert_eq!(r.lock.as_ref().unwrap().holders()[0].granted_at, 100);
}

/// The deltas of `n` commits on a mutex held by "h", each queueing one
/// more blocked waiter (ids `first_id..`), with the replica's copy of the
/// state before the first: what a replica applies while `n` connections
/// start waiting on one lock.
fn append_deltas(n: u64, first_id: u64) -> (Lock, Lock, Vec<Vec<u8>>) {
    let (mut l, r, _) = queued(0);
    let replica = r.lock.unwrap();
    let mut deltas = Vec::with_capacity(n as usize);
    for i in 0..n {
        assert!(l.enqueue(
            format!("w{i}").as_bytes(),
            Mode::Exclusive,
            first_id + i,
            true,
            60_000
        ));
        deltas.push(delta_of(&l));
        l.journal_reset();
    }
    (l, replica, deltas)
}

/// Micro-bench (issue 27): a replica applying the deltas of 10 000
/// connections queueing on one lock, one commit each, then 10 000
/// handoffs (the head granted, one more queued) at that queue length.
/// `cargo test -p dlock-core --release -- --ignored --nocapture
/// replica_apply_bench`.
#[test]
#[ignore]
fn replica_apply_bench() {
    let n = 10_000u64;
    let (mut master, mut replica, deltas) = append_deltas(n, 1 << 40);
    let decoded: Vec<_> = deltas
        .iter()
        .map(|d| codec::decode_delta(d).unwrap())
        .collect();
    let t = std::time::Instant::now();
    for d in decoded {
        replica.apply_delta(d).unwrap();
    }
    let appends = t.elapsed();
    assert_eq!(codec::encode(&replica, 0), codec::encode(&master, 0));
    // Handoffs at a queue of n: release, the head granted, one queued.
    let mut tokens = Tokens {
        last: master.last_token(),
    };
    let mut owner = b"h".to_vec();
    let mut handoffs = Vec::new();
    for i in 0..n {
        assert!(master.release(&owner, None).unwrap().gone);
        let head = master.next_handoff().unwrap();
        owner = master.waiters().front().unwrap().owner.to_vec();
        assert!(matches!(
            master.acquire(&req(&owner, Some(head)), 10, &mut tokens, 100 + i),
            Ok(Grant::Granted { .. })
        ));
        assert!(master.enqueue(
            format!("again{i}").as_bytes(),
            Mode::Exclusive,
            (1 << 41) + i,
            true,
            60_000
        ));
        handoffs.push(codec::decode_delta(&delta_of(&master)).unwrap());
        master.journal_reset();
    }
    let t = std::time::Instant::now();
    for d in handoffs {
        replica.apply_delta(d).unwrap();
    }
    let handoff = t.elapsed();
    assert_eq!(codec::encode(&replica, 0), codec::encode(&master, 0));
    println!(
        "replica apply: {n} appends {:.1} ms ({:.0} ns each); {n} handoffs at queue {n}: {:.1} ms ({:.0} ns each)",
        appends.as_secs_f64() * 1e3,
        appends.as_nanos() as f64 / n as f64,
        handoff.as_secs_f64() * 1e3,
        handoff.as_nanos() as f64 / n as f64,
    );
}

/// A replica that knows the ranges of its queue's ids (kept by the deltas
/// it applied, across ids of three masters) still refuses a delta that
/// appends, or renames a place to, an id already in its queue.
#[test]
fn known_id_ranges_still_refuse_duplicates() {
    let seeds = [1u64 << 50, 7, 1 << 61];
    let (mut l, mut r, _) = queued(0);
    let mut ids = Vec::new();
    for (m, &seed) in seeds.iter().enumerate() {
        for i in 0..300u64 {
            let id = seed + i;
            // Every tenth place is queued without waiting (renamed below).
            let blocked = i % 10 != 0;
            assert!(l.enqueue(
                format!("m{m}-{i}").as_bytes(),
                Mode::Exclusive,
                id,
                blocked,
                9
            ));
            ids.push(id);
            r.sync(Some(&mut l), 0).unwrap();
        }
    }
    assert_eq!((r.fulls, r.deltas), (1, 900));
    // (That such a replica knows its id ranges is checked inside the
    // crate: journal.rs, `appended_deltas_leave_the_replica_knowing_its_id_ranges`.)
    let replica = r.lock.clone().unwrap();
    for &dup in ids.iter().step_by(37).chain([ids[0], ids[899]].iter()) {
        let mut m = l.clone();
        m.journal_reset();
        m.enqueue(b"dup", Mode::Exclusive, dup, true, 9);
        let mut t = replica.clone();
        assert_eq!(
            codec::decode_delta(&delta_of(&m)).and_then(|d| t.apply_delta(d)),
            Err(DecodeError(
                "delta appends a place whose id is already in the queue"
            )),
            "{dup}"
        );
        // The queued place of m0-0 waits from its place, taking `dup`.
        let mut m = l.clone();
        m.journal_reset();
        assert!(!m.enqueue(b"m0-0", Mode::Exclusive, dup, true, 9));
        let mut t = replica.clone();
        let got = codec::decode_delta(&delta_of(&m)).and_then(|d| t.apply_delta(d));
        if dup == ids[0] {
            assert!(got.is_ok());
        } else {
            assert_eq!(
                got,
                Err(DecodeError(
                    "delta gives a place an id already in the queue"
                )),
                "{dup}"
            );
        }
    }
    // Fresh ids between and around the ranges are accepted.
    for fresh in [0u64, 5, 1 << 40, (1 << 50) + 300, (1 << 61) + 300, 1 << 62] {
        let mut m = l.clone();
        m.journal_reset();
        m.enqueue(b"new", Mode::Exclusive, fresh, true, 9);
        let mut t = replica.clone();
        codec::decode_delta(&delta_of(&m))
            .and_then(|d| t.apply_delta(d))
            .unwrap();
    }
}
