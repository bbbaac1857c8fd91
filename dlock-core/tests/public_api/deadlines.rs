//! The deadline index (`dlock_core::deadlines`): against a `BTreeMap`,
//! at scale, and the size of its entries (the inline form of key names is
//! a unit test in src/deadlines.rs).

use dlock_core::deadlines::*;
use std::collections::BTreeMap;

/// A small deterministic generator (xorshift).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn same(d: &Deadlines<u32>, m: &BTreeMap<u64, u32>) {
    assert!(d.check(), "invariant broken");
    assert_eq!(d.len(), m.len());
    assert_eq!(d.first_key(), m.keys().next().copied());
    assert!(d
        .iter()
        .map(|(k, v)| (k, *v))
        .eq(m.iter().map(|(k, v)| (*k, *v))));
}

#[test]
fn sizes() {
    assert_eq!(std::mem::size_of::<KeyName>(), 24);
    assert_eq!(std::mem::size_of::<(u64, KeyName)>(), 32);
}

/// Random inserts, removals and due takes against `BTreeMap`, over
/// several key spaces (dense, sparse, mostly increasing).
#[test]
fn matches_btreemap() {
    for seed in 1..=40u64 {
        let mut r = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let mut d = Deadlines::new();
        let mut m = BTreeMap::new();
        let space = [50u64, 1_000, 1 << 40][(seed % 3) as usize];
        let mut clock = 0u64;
        for step in 0..20_000u32 {
            match r.below(10) {
                0..=4 => {
                    let k = if seed % 2 == 0 {
                        r.below(space)
                    } else {
                        clock += r.below(3);
                        clock + r.below(4)
                    };
                    assert_eq!(d.insert(k, step), m.insert(k, step));
                }
                5..=7 => {
                    let k = match m.keys().nth(r.below(m.len() as u64 + 1) as usize) {
                        Some(k) if r.below(4) > 0 => *k,
                        _ => r.below(space),
                    };
                    assert_eq!(d.remove(k), m.remove(&k));
                    assert!(!d.contains_key(k));
                }
                8 => {
                    let limit = m
                        .keys()
                        .nth(r.below(m.len() as u64 / 4 + 1) as usize)
                        .copied()
                        .unwrap_or(0);
                    let max = r.below(100) as usize + 1;
                    let mut out = Vec::new();
                    let n = d.take_due(limit, max, &mut out);
                    assert_eq!(n, out.len());
                    let mut want = Vec::new();
                    while want.len() < max {
                        match m.first_key_value() {
                            Some((k, _)) if *k <= limit => {}
                            _ => break,
                        }
                        want.extend(m.pop_first());
                    }
                    assert_eq!(out, want);
                }
                _ => {
                    if r.below(50) == 0 {
                        let odd = d.take_where(|v| v % 2 == 1);
                        let want: Vec<u32> = m.values().copied().filter(|v| v % 2 == 1).collect();
                        m.retain(|_, v| *v % 2 == 0);
                        assert_eq!(odd, want);
                    } else {
                        assert_eq!(d.pop_first(), m.pop_first());
                    }
                }
            }
            if step % 97 == 0 {
                same(&d, &m);
            }
        }
        same(&d, &m);
        let all = d.take_all();
        assert!(all.into_iter().eq(m.into_values()));
        assert!(d.is_empty() && d.check());
    }
}

/// 1 M entries on one deadline (ids 0..1 M in its low 22 bits), filed
/// in order: every chunk full; drained in batches in order.
#[test]
fn a_million_equal_deadlines() {
    let base = 1_700_000_000_000u64 << 22;
    let mut d = Deadlines::new();
    for i in 0..1_000_000u64 {
        assert!(d
            .insert(base | i, KeyName::new(0, format!("lock:{i}").as_bytes()))
            .is_none());
    }
    assert!(d.check());
    assert_eq!(d.chunks(), 1_000_000usize.div_ceil(CHUNK));
    // 32 B per entry, plus the chunk's share of the B-tree.
    let per = d.heap_bytes() as f64 / d.len() as f64;
    assert!(per <= ENTRY_BYTES as f64, "{per} B per entry");
    assert!(d.contains_key(base | 777_777));
    assert_eq!(
        d.remove(base | 777_777).map(|k| k.key().to_vec()),
        Some(b"lock:777777".to_vec())
    );
    let mut out = Vec::new();
    let mut next = 0u64;
    while d.take_due(base | 999_999, 256, &mut out) > 0 {
        for (k, name) in out.drain(..) {
            if next == 777_777 {
                next += 1;
            }
            assert_eq!(k, base | next);
            assert_eq!(name.key(), format!("lock:{next}").as_bytes());
            next += 1;
        }
    }
    assert_eq!(next, 1_000_000);
    assert!(d.is_empty() && d.check());
}

/// Long names (heap) and reverse-order inserts (every insert below the
/// first key).
#[test]
fn long_names_and_descending_keys() {
    let mut d = Deadlines::new();
    let mut m = BTreeMap::new();
    for i in (0..5_000u64).rev() {
        let name = KeyName::new(7, &vec![b'x'; 20 + (i % 40) as usize]);
        d.insert(i * 3, name.clone());
        m.insert(i * 3, name);
    }
    assert!(d.check());
    assert!(d
        .iter()
        .map(|(k, v)| (k, v.clone()))
        .eq(m.clone().into_iter()));
    for i in 0..5_000u64 {
        if i % 3 != 0 {
            assert_eq!(d.remove(i * 3), m.remove(&(i * 3)));
        }
    }
    assert!(d.check());
    // Sparse chunks merged: well under one chunk per 16 entries left.
    assert!(
        d.chunks() <= d.len() / 10 + 2,
        "{} chunks for {}",
        d.chunks(),
        d.len()
    );
    assert!(d.iter().map(|(k, v)| (k, v.clone())).eq(m.into_iter()));
}
