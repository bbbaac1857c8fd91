//! The checks of the fuzz targets: every decoder of dlock-core takes any
//! bytes without panicking, and what it accepts behaves.
//!
//! - [`decode`]: an RDB / DUMP / AOF-rewrite payload. Accepted ⇒ it
//!   encodes again and decodes to the same lock (and token floor).
//! - [`delta`]: a whole-state payload, then a replication delta applied to
//!   it. Accepted ⇒ the lock still round-trips through the codec.
//! - [`aof`]: an AOF command log: length-prefixed payloads (whole state,
//!   delta, floor-only, or empty: the key is gone) applied in order to a few
//!   keys, as loading the AOF does. Every lock after every accepted entry
//!   round-trips.
//!
//! Run with cargo-fuzz (nightly): `make fuzz FUZZ_TARGET=decode`; on
//! stable, `cargo test --manifest-path fuzz/Cargo.toml` runs them over
//! seeded random and mutated inputs.

use dlock_core::{codec, Lock};

/// Encodes `l` and decodes it: the same lock and floor, or a panic.
fn round_trip(l: &Lock, floor: u64) {
    let bytes = codec::encode(l, floor);
    match codec::decode(&bytes) {
        Ok((back, f)) => {
            assert_eq!(&back, l, "a lock that does not round-trip");
            assert_eq!(f, floor, "a floor that does not round-trip");
        }
        Err(e) => panic!("an accepted lock does not encode to a payload it accepts: {e:?} {l:?}"),
    }
}

/// An RDB payload.
pub fn decode(data: &[u8]) {
    if let Ok((l, floor)) = codec::decode(data) {
        round_trip(&l, floor);
        if let Some(c) = l.compact() {
            assert_eq!(
                c.inflate(),
                l,
                "a compact form that inflates to another lock"
            );
        }
    }
}

/// Splits `data` at a length given by its first byte.
fn split(data: &[u8]) -> (&[u8], &[u8]) {
    let Some((&n, rest)) = data.split_first() else {
        return (&[], &[]);
    };
    rest.split_at(usize::from(n).min(rest.len()))
}

/// A base payload, then a delta applied to it.
pub fn delta(data: &[u8]) {
    let (base, d) = split(data);
    let Ok((mut l, _)) = codec::decode(base) else {
        return;
    };
    let Ok(delta) = codec::decode_delta(d) else {
        return;
    };
    let before = l.clone();
    match l.apply_delta(delta) {
        Ok(floor) => round_trip(&l, floor),
        Err(_) => assert_eq!(l, before, "a refused delta changed the lock"),
    }
}

/// An AOF log: entries `key(u8 % 4) len(u8) payload`, applied in order.
pub fn aof(data: &[u8]) {
    let mut keys: [Option<Lock>; 4] = Default::default();
    let mut floor = 0u64;
    let mut rest = data;
    while let Some((&k, r)) = rest.split_first() {
        let (p, r) = split(r);
        rest = r;
        let slot = &mut keys[usize::from(k % 4)];
        if p.is_empty() {
            *slot = None;
        } else if codec::is_floor(p) {
            if let Ok(f) = codec::decode_floor(p) {
                floor = floor.max(f);
            }
        } else if codec::is_delta(p) {
            let (Some(l), Ok(d)) = (slot.as_mut(), codec::decode_delta(p)) else {
                continue;
            };
            let before = l.clone();
            match l.apply_delta(d) {
                Ok(f) => floor = floor.max(f),
                Err(_) => assert_eq!(*l, before, "a refused delta changed the lock"),
            }
        } else if let Ok((l, f)) = codec::decode(p) {
            floor = floor.max(f);
            *slot = Some(l);
        }
        for l in keys.iter().flatten() {
            round_trip(l, floor);
        }
    }
}

#[cfg(test)]
mod tests {
    use dlock_core::rng::Rng;
    use dlock_core::{codec, Kind, Lock, Mode, Request, Tokens};

    /// Valid payloads to mutate: a few locks of every kind.
    fn seeds() -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut t = Tokens::default();
        for kind in [Kind::Mutex, Kind::Rw, Kind::Fair] {
            let mut l = Lock::new(kind);
            let mode = if kind == Kind::Rw {
                Mode::Read
            } else {
                Mode::Exclusive
            };
            let r = Request {
                owner: b"a",
                mode,
                lease_ms: 100,
                waiter: None,
            };
            l.acquire(&r, 1_000, &mut t, 1_000_000).unwrap();
            l.enqueue(b"b", mode, 7, true, 5_000);
            l.enqueue(b"c", mode, 8, kind != Kind::Fair, 5_000);
            l.journal_reset();
            out.push(codec::encode(&l, t.last));
            l.remove_waiter(7);
            l.enqueue(b"d", mode, 9, true, 6_000);
            let mut d = Vec::new();
            codec::encode_delta_into(&l, t.last, &mut d);
            out.push(d);
        }
        let mut s = Lock::semaphore(3);
        let r = Request {
            owner: b"s",
            mode: Mode::Permit,
            lease_ms: 100,
            waiter: None,
        };
        s.acquire_permits(&r, 2, 3, 1_000, &mut t, 2_000_000)
            .unwrap();
        s.enqueue_permits(b"q", 2, 11, 9_000);
        out.push(codec::encode(&s, t.last));
        out.push(codec::encode(&Lock::latch(2), 0));
        out.push(codec::encode_floor(42));
        out
    }

    fn mutate(r: &mut Rng, mut v: Vec<u8>) -> Vec<u8> {
        for _ in 0..1 + r.below(4) {
            match r.below(4) {
                0 if !v.is_empty() => {
                    let i = r.below(v.len() as u64) as usize;
                    v[i] = r.next() as u8;
                }
                1 if !v.is_empty() => {
                    let i = r.below(v.len() as u64) as usize;
                    v.truncate(i);
                }
                2 => v.push(r.next() as u8),
                _ => {
                    let i = r.below(v.len() as u64 + 1) as usize;
                    v.insert(i, r.next() as u8);
                }
            }
        }
        v
    }

    #[test]
    fn decoders_take_mutated_and_random_input() {
        let seeds = seeds();
        let mut r = Rng::new(0xD10C);
        for _ in 0..200_000 {
            let a = seeds[r.below(seeds.len() as u64) as usize].clone();
            let b = seeds[r.below(seeds.len() as u64) as usize].clone();
            let a = if r.one_in(2) { mutate(&mut r, a) } else { a };
            let b = if r.one_in(2) { mutate(&mut r, b) } else { b };
            super::decode(&a);
            let mut d = vec![a.len().min(255) as u8];
            d.extend_from_slice(&a);
            d.extend_from_slice(&b);
            super::delta(&d);
            let mut log = Vec::new();
            for p in [&a, &b] {
                log.push(r.below(2) as u8);
                log.push(p.len().min(255) as u8);
                log.extend_from_slice(p);
            }
            super::aof(&log);
            super::decode(&r.bytes(64));
        }
    }
}
