//! The codec: golden bytes, hand-written payloads, every rejection rule,
//! round trips and fuzz loops.

use crate::common::*;
use dlock_core::*;
use std::collections::{HashSet, VecDeque};

#[test]
fn codec_golden_bytes() {
    let mut lock = Lock::new(Kind::Mutex);
    let mut tokens = Tokens::default();
    apply(&mut lock, &mut tokens, Op::Acq("a", X, None, 200, 100));
    // version 4: as version 3 (size 0, flags 0, delay 0) plus the grant
    // time 200 (0xc8 0x01).
    let v4 = vec![
        4, 0, 1, 2, 0, 1, 1, b'a', 0, 1, 0xac, 0x02, 1, 0, 0, 0xc8, 0x01, 0,
    ];
    assert_eq!(encode(&lock, 2), v4);
    assert_eq!(decode(&v4), Ok((lock.clone(), 2)));
    // A lock that does not know its times (loaded from an older payload;
    // here granted at 0, unknown, with its lease ending at 300) writes the
    // old version.
    let mut lock = Lock::new(Kind::Mutex);
    let mut tokens = Tokens::default();
    apply(&mut lock, &mut tokens, Op::Acq("a", X, None, 0, 300));
    // version 1, mutex, last_token 1, floor 2, one holder "a" exclusive,
    // count 1, expires 300 (0xac 0x02), token 1, no waiters.
    let want = vec![1, 0, 1, 2, 1, 1, b'a', 0, 1, 0xac, 0x02, 1, 0];
    assert_eq!(encode(&lock, 2), want);
    assert_eq!(decode(&want), Ok((lock, 2)));
}

#[test]
fn codec_hand_written_payload_matches_encode() {
    let raw = Raw::new(1, 70_000)
        .holder(b"alice", 2, 3, 69_999)
        .holder(b"alice", 1, 1, 70_000)
        .waiter(12, b"bob", 2, 1)
        .waiter(300, &[0u8, 255, 7], 1, 0)
        .with(|r| r.floor = 1 << 40);
    let bytes = raw.bytes();
    let (lock, floor) = decode(&bytes).unwrap();
    assert_eq!(floor, 1 << 40);
    assert_eq!(lock.kind(), Kind::Rw);
    assert_eq!(lock.last_token(), 70_000);
    assert_eq!(
        hold_rows(&lock),
        vec![
            ("alice".to_string(), W, 3, 5000, 69_999),
            ("alice".to_string(), R, 1, 5000, 70_000),
        ]
    );
    assert_eq!(lock.waiters().len(), 2);
    assert_eq!(
        lock.waiters()[1],
        Waiter {
            id: 300,
            owner: vec![0u8, 255, 7].into(),
            mode: R,
            blocked: false,
            expires_at: 6000,
            permits: 1,
            since: 0,
        }
    );
    assert_eq!(encode(&lock, floor), bytes);
}

/// The ways a payload must be refused: (name, payload, words of the error).
fn rejected_payloads() -> Vec<(&'static str, Vec<u8>, &'static str)> {
    let ok = Raw::new(0, 5).holder(b"a", 0, 1, 5);
    let long = [b'o'; MAX_OWNER_LEN + 1];
    let two = |kind: u8, m1: u8, o2: &[u8], m2: u8| {
        Raw::new(kind, 5)
            .holder(b"a", m1, 1, 4)
            .holder(o2, m2, 1, 5)
    };
    // A mutex holder whose count field is given as raw bytes.
    let count_bytes = |count: &[u8]| {
        let mut b = vec![1, 0, 1, 0, 1, 1, b'a', 0];
        b.extend_from_slice(count);
        b.extend_from_slice(&[5, 1, 0]);
        b
    };
    // A payload whose last_token field is given as raw bytes.
    let last_bytes = |field: &[u8]| {
        let mut b = vec![1, 0];
        b.extend_from_slice(field);
        b.extend_from_slice(&[0, 0, 1, 1, 1, b'w', 0, 1, 5]);
        b
    };
    let mut ff9 = vec![0xffu8; 9];
    ff9.push(0x02);
    let mut ff9c = vec![0xffu8; 9];
    ff9c.extend_from_slice(&[0x81, 0x00]);
    let mut zero10 = vec![0x80u8; 9];
    zero10.push(0x00);
    let mut umax = vec![0xffu8; 9];
    umax.push(0x01);
    vec![
        ("empty input", vec![], "truncated"),
        ("version only", vec![1], "truncated"),
        ("header only", vec![1, 0], "truncated"),
        (
            "version 0",
            ok.clone().with(|r| r.version = 0).bytes(),
            "version",
        ),
        (
            "version 5",
            ok.clone().with(|r| r.version = 5).bytes(),
            "version",
        ),
        (
            "version 255",
            ok.clone().with(|r| r.version = 255).bytes(),
            "version",
        ),
        ("kind 3", ok.clone().with(|r| r.kind = 3).bytes(), "kind"),
        (
            "kind 255",
            ok.clone().with(|r| r.kind = 255).bytes(),
            "kind",
        ),
        (
            "one trailing byte",
            ok.clone().with(|r| r.trailing = vec![0]).bytes(),
            "trailing",
        ),
        (
            "a second payload after the first",
            ok.clone().with(|r| r.trailing = ok.bytes()).bytes(),
            "trailing",
        ),
        (
            "holder owner length 0",
            Raw::new(0, 5).holder(b"", 0, 1, 5).bytes(),
            "owner length",
        ),
        (
            "holder owner length 513",
            Raw::new(0, 5).holder(&long, 0, 1, 5).bytes(),
            "owner length",
        ),
        (
            "waiter owner length 0",
            Raw::new(0, 5).waiter(1, b"", 0, 1).bytes(),
            "owner length",
        ),
        (
            "waiter owner length 513",
            Raw::new(0, 5).waiter(1, &long, 0, 1).bytes(),
            "owner length",
        ),
        (
            "owner longer than the payload",
            Raw::new(0, 5)
                .holder(b"a", 0, 1, 5)
                .with(|r| r.holders[0].owner = vec![b'a'; 40])
                .bytes()[..12]
                .to_vec(),
            "truncated",
        ),
        (
            "zero count",
            Raw::new(0, 5).holder(b"a", 0, 0, 5).bytes(),
            "count is zero",
        ),
        (
            "count u32::MAX + 1",
            Raw::new(0, 5).holder(b"a", 0, 1 << 32, 5).bytes(),
            "count is out of range",
        ),
        (
            "count u64::MAX",
            Raw::new(0, 5).holder(b"a", 0, u64::MAX, 5).bytes(),
            "count is out of range",
        ),
        (
            "holder lease end past MAX_INSTANT",
            Raw::new(0, 5)
                .holder(b"a", 0, 1, 5)
                .with(|r| r.holders[0].expires_at = MAX_INSTANT + 1)
                .bytes(),
            "instant is out of range",
        ),
        (
            "waiter deadline u64::MAX",
            Raw::new(0, 0)
                .waiter(1, b"a", 0, 1)
                .with(|r| r.waiters[0].expires_at = u64::MAX)
                .bytes(),
            "instant is out of range",
        ),
        (
            "holder token 0",
            Raw::new(0, 5).holder(b"a", 0, 1, 0).bytes(),
            "holder token",
        ),
        (
            "holder token above last_token",
            Raw::new(0, 5).holder(b"a", 0, 1, 6).bytes(),
            "holder token",
        ),
        (
            "holder token above last_token 0",
            Raw::new(0, 0).holder(b"a", 0, 1, 1).bytes(),
            "holder token",
        ),
        (
            "last_token above i64::MAX",
            Raw::new(0, MAX_TOKEN + 1).holder(b"a", 0, 1, 5).bytes(),
            "token is out of range",
        ),
        (
            "last_token u64::MAX",
            Raw::new(0, u64::MAX).holder(b"a", 0, 1, u64::MAX).bytes(),
            "token is out of range",
        ),
        (
            "floor above i64::MAX",
            ok.clone().with(|r| r.floor = MAX_TOKEN + 1).bytes(),
            "token is out of range",
        ),
        (
            "duplicate hold on a mutex",
            two(0, 0, b"a", 0).bytes(),
            "duplicate hold",
        ),
        (
            "duplicate READ hold",
            two(1, 1, b"a", 1).bytes(),
            "duplicate hold",
        ),
        (
            "duplicate WRITE hold",
            two(1, 2, b"a", 2).bytes(),
            "duplicate hold",
        ),
        (
            "two holders of a mutex",
            two(0, 0, b"b", 0).bytes(),
            "exclusive",
        ),
        (
            "two holders of a fair lock",
            two(2, 0, b"b", 0).bytes(),
            "exclusive",
        ),
        (
            "two writers of an rw lock",
            two(1, 2, b"b", 2).bytes(),
            "exclusive",
        ),
        (
            "READ then another's WRITE",
            two(1, 1, b"b", 2).bytes(),
            "exclusive",
        ),
        (
            "WRITE then another's READ",
            two(1, 2, b"b", 1).bytes(),
            "exclusive",
        ),
        (
            "a reader between a writer and its READ",
            Raw::new(1, 5)
                .holder(b"a", 2, 1, 3)
                .holder(b"b", 1, 1, 4)
                .holder(b"a", 1, 1, 5)
                .bytes(),
            "exclusive",
        ),
        (
            "READ hold on a mutex",
            Raw::new(0, 5).holder(b"a", 1, 1, 5).bytes(),
            "does not fit",
        ),
        (
            "WRITE hold on a fair lock",
            Raw::new(2, 5).holder(b"a", 2, 1, 5).bytes(),
            "does not fit",
        ),
        (
            "exclusive hold on an rw lock",
            Raw::new(1, 5).holder(b"a", 0, 1, 5).bytes(),
            "does not fit",
        ),
        (
            "READ waiter on a mutex",
            Raw::new(0, 5).waiter(1, b"w", 1, 1).bytes(),
            "does not fit",
        ),
        (
            "exclusive waiter on an rw lock",
            Raw::new(1, 5).waiter(1, b"w", 0, 1).bytes(),
            "does not fit",
        ),
        (
            "holder mode 5",
            Raw::new(1, 5).holder(b"a", 5, 1, 5).bytes(),
            "unknown mode",
        ),
        (
            "holder mode 255",
            Raw::new(1, 5).holder(b"a", 255, 1, 5).bytes(),
            "unknown mode",
        ),
        (
            "waiter mode 5",
            Raw::new(0, 5).waiter(1, b"w", 5, 1).bytes(),
            "unknown mode",
        ),
        (
            "blocked flag 2",
            Raw::new(0, 5).waiter(1, b"w", 0, 2).bytes(),
            "blocked flag",
        ),
        (
            "blocked flag 255",
            Raw::new(0, 5).waiter(1, b"w", 0, 255).bytes(),
            "blocked flag",
        ),
        (
            "duplicate waiter ids",
            ok.clone()
                .waiter(4, b"w", 0, 1)
                .waiter(4, b"v", 0, 0)
                .bytes(),
            "duplicate waiter id",
        ),
        (
            "duplicate waiter ids of one owner",
            Raw::new(2, 0)
                .waiter(0, b"w", 0, 1)
                .waiter(0, b"w", 0, 1)
                .bytes(),
            "duplicate waiter id",
        ),
        (
            "empty lock",
            Raw::new(0, 5).bytes(),
            "neither holders nor waiters",
        ),
        (
            "holder count u64::MAX in a tiny payload",
            ok.clone().with(|r| r.n_holders = Some(u64::MAX)).bytes(),
            "entry count",
        ),
        (
            "holder count 2^40 in a tiny payload",
            ok.clone().with(|r| r.n_holders = Some(1 << 40)).bytes(),
            "entry count",
        ),
        (
            "waiter count u64::MAX in a tiny payload",
            ok.clone().with(|r| r.n_waiters = Some(u64::MAX)).bytes(),
            "entry count",
        ),
        (
            "one holder more than present",
            ok.clone().with(|r| r.n_holders = Some(2)).bytes(),
            "",
        ),
        (
            "one waiter more than present",
            ok.clone()
                .waiter(1, b"w", 0, 1)
                .with(|r| r.n_waiters = Some(2))
                .bytes(),
            "",
        ),
        (
            "fewer holders than present",
            two(1, 1, b"b", 1).with(|r| r.n_holders = Some(1)).bytes(),
            "",
        ),
        (
            "overlong varint: 11 bytes of 0xff",
            last_bytes(&[0xff; 11]),
            "overflows",
        ),
        (
            "10-byte varint above 64 bits",
            last_bytes(&ff9),
            "overflows",
        ),
        (
            "varint continuing past 10 bytes",
            last_bytes(&ff9c),
            "overflows",
        ),
        ("non-minimal zero", last_bytes(&[0x80, 0x00]), "minimally"),
        ("non-minimal 10-byte zero", last_bytes(&zero10), "minimally"),
        ("non-minimal count", count_bytes(&[0x81, 0x00]), "minimally"),
        (
            "non-minimal count with padding",
            count_bytes(&[0x81, 0x80, 0x80, 0x00]),
            "minimally",
        ),
        (
            "valid u64::MAX varint as last_token",
            last_bytes(&umax),
            "token is out of range",
        ),
        ("varint cut by the end", vec![1, 0, 0x80], "truncated"),
    ]
}

#[test]
fn codec_rejects_bad_payloads() {
    for (name, bytes, words) in rejected_payloads() {
        match decode(&bytes) {
            Ok(got) => panic!("{name}: accepted as {got:?}"),
            Err(DecodeError(msg)) => assert!(
                msg.contains(words),
                "{name}: refused with {msg:?}, expected {words:?}"
            ),
        }
    }
}

#[test]
fn codec_accepts_edge_payloads() {
    let max = [b'm'; MAX_OWNER_LEN];
    let cases: Vec<(&str, Raw)> = vec![
        ("owner of 512 bytes", Raw::new(0, 5).holder(&max, 0, 1, 5)),
        (
            "waiter owner of 512 bytes",
            Raw::new(0, 5).waiter(1, &max, 0, 1),
        ),
        (
            "binary owner",
            Raw::new(2, 5).holder(&[0, 255, b'\n', 0x80], 0, 1, 5),
        ),
        (
            "count u32::MAX",
            Raw::new(0, 5).holder(b"a", 0, u64::from(u32::MAX), 5),
        ),
        (
            "tokens at the maximum",
            Raw::new(0, MAX_TOKEN)
                .holder(b"a", 0, 1, MAX_TOKEN)
                .with(|r| r.floor = MAX_TOKEN),
        ),
        (
            "floor 0",
            Raw::new(0, 5).holder(b"a", 0, 1, 1).with(|r| r.floor = 0),
        ),
        (
            "expiry instants 0 and MAX_INSTANT",
            Raw::new(1, 5)
                .holder(b"a", 1, 1, 1)
                .holder(b"b", 1, 1, 2)
                .waiter(1, b"c", 2, 0)
                .with(|r| {
                    r.holders[0].expires_at = 0;
                    r.holders[1].expires_at = MAX_INSTANT;
                    r.waiters[0].expires_at = MAX_INSTANT;
                }),
        ),
        (
            "waiters only, last_token 0",
            Raw::new(2, 0).waiter(1, b"q", 0, 0).waiter(2, b"b", 0, 1),
        ),
        (
            "waiter ids 0 and u64::MAX",
            Raw::new(0, 0)
                .waiter(0, b"a", 0, 1)
                .waiter(u64::MAX, b"b", 0, 1),
        ),
        (
            "READ and WRITE of one owner, READ first",
            Raw::new(1, 5).holder(b"a", 1, 1, 4).holder(b"a", 2, 2, 5),
        ),
        (
            "many readers",
            (1..=40u64).fold(Raw::new(1, 40), |r, i| {
                r.holder(format!("reader-{i}").as_bytes(), 1, i, i)
            }),
        ),
        (
            "holders and a mixed queue",
            Raw::new(1, 9)
                .holder(b"a", 1, 1, 8)
                .holder(b"b", 1, 1, 9)
                .waiter(3, b"c", 2, 1)
                .waiter(4, b"a", 2, 1)
                .waiter(5, b"d", 1, 1),
        ),
    ];
    for (name, raw) in cases {
        let bytes = raw.bytes();
        let (lock, floor) = match decode(&bytes) {
            Ok(v) => v,
            Err(e) => panic!("{name}: refused: {e:?}"),
        };
        assert_eq!(floor, raw.floor, "{name}");
        assert_eq!(lock.holders().len(), raw.holders.len(), "{name}");
        assert_eq!(lock.waiters().len(), raw.waiters.len(), "{name}");
        if let Err(e) = invariants(&lock) {
            panic!("{name}: {e}");
        }
        assert_eq!(encode(&lock, floor), bytes, "{name}: re-encoding differs");
    }
}

fn random_u64(rng: &mut Rng) -> u64 {
    match rng.below(6) {
        0 => 0,
        1 => u64::MAX,
        2 => rng.below(128),
        3 => rng.below(1 << 14),
        4 => 1 << rng.below(64),
        _ => rng.next(),
    }
}

fn random_owner(rng: &mut Rng) -> Vec<u8> {
    let len = match rng.below(20) {
        0 => MAX_OWNER_LEN,
        1 | 2 => 1 + rng.below(MAX_OWNER_LEN as u64) as usize,
        _ => 1 + rng.below(4) as usize,
    };
    let small = rng.chance(50);
    (0..len)
        .map(|_| {
            if small {
                b"abc"[rng.below(3) as usize]
            } else {
                rng.next() as u8
            }
        })
        .collect()
}

fn random_holder(rng: &mut Rng, owner: Vec<u8>, mode: Mode, last_token: u64) -> Holder {
    let count = match rng.below(4) {
        0 => 1,
        1 => u32::MAX,
        _ => 1 + rng.below(u64::from(u32::MAX)) as u32,
    };
    Holder {
        owner: owner.into(),
        mode,
        count,
        expires_at: rng.below(MAX_INSTANT + 1),
        token: 1 + rng.below(last_token),
        bound: 0,
        delay_ms: 0,
        delayed: Delayed::No,
        granted_at: if rng.chance(50) {
            0
        } else {
            rng.below(MAX_INSTANT + 1)
        },
    }
}

/// A random lock that keeps every invariant, and a random token floor.
fn random_lock(rng: &mut Rng) -> (Lock, u64) {
    let kind = [Kind::Mutex, Kind::Rw, Kind::Fair][rng.below(3) as usize];
    let last_token = match rng.below(5) {
        0 => 0,
        1 => MAX_TOKEN,
        2 => 1 + rng.below(100),
        _ => 1 + rng.below(MAX_TOKEN),
    };
    let mut holders: Vec<Holder> = Vec::new();
    if last_token > 0 {
        match kind {
            Kind::Mutex | Kind::Fair => {
                if rng.chance(60) {
                    let o = random_owner(rng);
                    holders.push(random_holder(rng, o, X, last_token));
                }
            }
            // Random semaphores and latches: semaphore.rs, latch.rs.
            Kind::Semaphore | Kind::Latch => {}
            Kind::Rw => match rng.below(4) {
                0 => {}
                1 => {
                    let o = random_owner(rng);
                    holders.push(random_holder(rng, o, W, last_token));
                }
                2 => {
                    let o = random_owner(rng);
                    let (m1, m2) = if rng.chance(50) { (W, R) } else { (R, W) };
                    holders.push(random_holder(rng, o.clone(), m1, last_token));
                    holders.push(random_holder(rng, o, m2, last_token));
                }
                _ => {
                    for _ in 0..1 + rng.below(5) {
                        let o = random_owner(rng);
                        if holders.iter().all(|h| *h.owner != *o) {
                            holders.push(random_holder(rng, o, R, last_token));
                        }
                    }
                }
            },
        }
    }
    let modes: &[Mode] = if kind == Kind::Rw { &[R, W] } else { &[X] };
    let mut waiters = VecDeque::new();
    let mut ids = HashSet::new();
    let n = rng.below(6);
    while (waiters.len() as u64) < n || (holders.is_empty() && waiters.is_empty()) {
        let id = random_u64(rng);
        if !ids.insert(id) {
            continue;
        }
        let owner = match holders.first() {
            Some(h) if rng.chance(30) => h.owner.to_vec(),
            _ => random_owner(rng),
        };
        waiters.push_back(Waiter {
            id,
            owner: owner.into(),
            mode: modes[rng.below(modes.len() as u64) as usize],
            blocked: rng.chance(50),
            expires_at: rng.below(MAX_INSTANT + 1),
            permits: 1,
            since: if rng.chance(50) {
                0
            } else {
                rng.below(MAX_INSTANT + 1)
            },
        });
    }
    let floor = match rng.below(3) {
        0 => 0,
        1 => MAX_TOKEN,
        _ => rng.below(MAX_TOKEN),
    };
    (
        lock_from_parts(kind, last_token, 0, holders, waiters),
        floor,
    )
}

#[test]
fn codec_round_trip_of_random_locks() {
    let mut rng = Rng::new(0x5eed);
    for i in 0..3000 {
        let (lock, floor) = random_lock(&mut rng);
        if let Err(e) = invariants(&lock) {
            panic!("generator broke an invariant: {e}");
        }
        let bytes = encode(&lock, floor);
        assert_eq!(decode(&bytes), Ok((lock.clone(), floor)), "lock {i}");
        // Every truncation is refused.
        if i < 600 {
            for n in 0..bytes.len() {
                assert!(
                    decode(&bytes[..n]).is_err(),
                    "lock {i}: prefix {n} accepted"
                );
            }
        }
        let mut longer = bytes.clone();
        longer.push(rng.next() as u8);
        assert!(decode(&longer).is_err(), "lock {i}: trailing byte accepted");
    }
}

/// Decodes `buf`; when accepted, the lock must keep every invariant and
/// encode back to exactly `buf` (the encoding is canonical).
fn decode_checked(buf: &[u8]) -> bool {
    match decode(buf) {
        Err(_) => false,
        Ok((lock, floor)) => {
            if let Err(e) = invariants(&lock) {
                panic!("accepted payload {buf:?} breaks an invariant: {e}");
            }
            assert!(!lock.is_empty(), "accepted an empty lock: {buf:?}");
            assert!(lock.last_token() <= MAX_TOKEN && floor <= MAX_TOKEN);
            let again = encode(&lock, floor);
            assert_eq!(again, buf, "accepted payload does not re-encode the same");
            assert_eq!(decode(&again), Ok((lock, floor)));
            true
        }
    }
}

/// Bytes shaped like a payload (small varints, small mode and flag bytes,
/// short owners), so that random input often reaches the deeper checks.
fn payload_shaped_bytes(rng: &mut Rng) -> Vec<u8> {
    let mut b = vec![
        if rng.chance(90) {
            VERSION
        } else {
            rng.next() as u8
        },
        rng.below(4) as u8,
    ];
    let small = |rng: &mut Rng, b: &mut Vec<u8>| {
        let v = if rng.chance(90) {
            rng.below(4)
        } else {
            random_u64(rng)
        };
        leb(b, v);
    };
    let owner = |rng: &mut Rng, b: &mut Vec<u8>| {
        let n = rng.below(3) as usize;
        leb(b, n as u64);
        b.extend((0..n).map(|_| b"ab"[rng.below(2) as usize]));
    };
    small(rng, &mut b);
    small(rng, &mut b);
    let holders = rng.below(3);
    leb(&mut b, holders);
    for _ in 0..holders {
        owner(rng, &mut b);
        b.push(rng.below(4) as u8);
        small(rng, &mut b);
        small(rng, &mut b);
        small(rng, &mut b);
    }
    let waiters = rng.below(3);
    leb(&mut b, waiters);
    for _ in 0..waiters {
        small(rng, &mut b);
        owner(rng, &mut b);
        b.push(rng.below(4) as u8);
        b.push(rng.below(3) as u8);
        small(rng, &mut b);
    }
    if rng.chance(5) {
        b.push(rng.next() as u8);
    }
    b
}

#[test]
fn codec_fuzz_random_bytes() {
    let mut rng = Rng::new(0xf00d);
    let mut accepted = 0;
    for i in 0..20_000 {
        let b = if i % 2 == 0 {
            // Plain random bytes, mostly behind a valid header.
            let len = rng.below(64) as usize;
            let mut b: Vec<u8> = (0..len)
                .map(|_| {
                    if rng.chance(70) {
                        rng.below(8) as u8
                    } else {
                        rng.next() as u8
                    }
                })
                .collect();
            if len > 0 && rng.chance(80) {
                b[0] = VERSION;
            }
            if len > 1 && rng.chance(80) {
                b[1] = rng.below(3) as u8;
            }
            b
        } else {
            payload_shaped_bytes(&mut rng)
        };
        if decode_checked(&b) {
            accepted += 1;
        }
    }
    // Not a goal in itself, but shows the loop reaches the deep checks.
    assert!(
        accepted > 100,
        "only {accepted} random payloads were accepted"
    );
}

#[test]
fn codec_fuzz_mutated_payloads() {
    let mut rng = Rng::new(0xbeef);
    let mut accepted = 0;
    for _ in 0..20_000 {
        let (lock, floor) = random_lock(&mut rng);
        let mut b = encode(&lock, floor);
        for _ in 0..1 + rng.below(3) {
            let len = b.len() as u64;
            match rng.below(8) {
                0 => {
                    let i = rng.below(len) as usize;
                    b[i] ^= 1 << rng.below(8);
                }
                1 => {
                    let i = rng.below(len) as usize;
                    b[i] = rng.next() as u8;
                }
                2 => {
                    let i = rng.below(len + 1) as usize;
                    b.insert(i, rng.next() as u8);
                }
                3 if len > 0 => {
                    let i = rng.below(len) as usize;
                    b.remove(i);
                }
                4 => b.truncate(rng.below(len + 1) as usize),
                5 => {
                    let i = rng.below(len) as usize;
                    b[i] = [0x00, 0x7f, 0x80, 0xff][rng.below(4) as usize];
                }
                6 => {
                    let i = rng.below(len) as usize;
                    let j = (i + 1 + rng.below(8) as usize).min(b.len());
                    let chunk = b[i..j].to_vec();
                    b.splice(i..i, chunk);
                }
                _ => {
                    let i = rng.below(len) as usize;
                    b[i] = b[i].wrapping_add(1);
                }
            }
            if b.is_empty() {
                break;
            }
        }
        if decode_checked(&b) {
            accepted += 1;
        }
    }
    assert!(accepted > 0, "no mutated payload was ever accepted");
}

#[test]
fn floor_only_payloads() {
    for floor in [0, 1, 127, 128, 1 << 40, MAX_TOKEN] {
        let buf = codec::encode_floor(floor);
        assert!(codec::is_floor(&buf));
        assert!(!codec::is_delta(&buf));
        assert_eq!(codec::decode_floor(&buf), Ok(floor));
        // Never a lock: RESTORE and the like refuse it.
        assert!(codec::decode(&buf).is_err());
    }
    let mut long = codec::encode_floor(5);
    long.push(0);
    assert!(codec::decode_floor(&long).is_err());
    assert!(codec::decode_floor(&[codec::FLOOR]).is_err());
    let mut big = vec![codec::FLOOR];
    codec::write_varint(&mut big, MAX_TOKEN + 1);
    assert!(codec::decode_floor(&big).is_err());
    assert!(codec::decode_floor(&[]).is_err());
    assert!(!codec::is_floor(&codec::encode(&Lock::new(Kind::Mutex), 5)));
}
