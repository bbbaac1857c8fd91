//! A fixed-size histogram of durations in microseconds, for `DLOCK.STATS`
//! and the wait/hold percentiles of `INFO dlock`.
//!
//! Buckets are log-linear: every power of two from 16 µs up is split into
//! 16 equal parts, so each bucket's upper bound is at most 1/16 (6.25 %)
//! above the one before; everything under 16 µs is one bucket. Recording
//! is an index computation and one add (no allocation, no search); the
//! bucket array is allocated once. Values past the last bucket (2^50 µs,
//! ~35 years) count in it.

/// Sub-buckets per power of two (a power of two itself).
const SUB: u64 = 16;
const SUB_BITS: u32 = SUB.trailing_zeros();
/// Powers of two covered above the first bucket: values up to 2^50 µs.
const TOP_BIT: u32 = 50;
/// Number of buckets.
pub const BUCKETS: usize = 1 + ((TOP_BIT - SUB_BITS) as usize) * SUB as usize;

/// Counts of durations by bucket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Histogram {
    counts: Box<[u64]>,
    total: u64,
}

impl Default for Histogram {
    fn default() -> Histogram {
        Histogram::new()
    }
}

/// The bucket of a duration of `us` microseconds.
fn index(us: u64) -> usize {
    if us < SUB {
        return 0;
    }
    let bit = 63 - us.leading_zeros(); // >= SUB_BITS
    if bit >= TOP_BIT {
        return BUCKETS - 1;
    }
    let sub = (us >> (bit - SUB_BITS)) & (SUB - 1);
    1 + ((bit - SUB_BITS) as usize) * SUB as usize + sub as usize
}

/// The largest duration (µs) bucket `i` holds.
pub fn upper_bound(i: usize) -> u64 {
    if i == 0 {
        return SUB - 1;
    }
    let j = (i - 1) as u64;
    let shift = j / SUB; // power of two above 16 µs
    let sub = j % SUB;
    ((SUB + sub + 1) << shift) - 1
}

impl Histogram {
    pub fn new() -> Histogram {
        Histogram {
            counts: vec![0; BUCKETS].into_boxed_slice(),
            total: 0,
        }
    }

    /// Counts one duration of `us` microseconds.
    pub fn record(&mut self, us: u64) {
        if let Some(c) = self.counts.get_mut(index(us)) {
            *c = c.saturating_add(1);
        }
        self.total = self.total.saturating_add(1);
    }

    /// Durations counted.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Adds every count of `other` to this one.
    pub fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(other.counts.iter()) {
            *a = a.saturating_add(*b);
        }
        self.total = self.total.saturating_add(other.total);
    }

    /// Forgets every count.
    pub fn reset(&mut self) {
        self.counts.iter_mut().for_each(|c| *c = 0);
        self.total = 0;
    }

    /// The non-empty buckets: (upper bound in µs, count), in order.
    pub fn buckets(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.counts
            .iter()
            .enumerate()
            .filter(|(_, c)| **c > 0)
            .map(|(i, c)| (upper_bound(i), *c))
    }

    /// The upper bound (µs) of the bucket that holds the `p`-th percentile
    /// (`p` in 0..=100): the smallest bound with at least `p` % of the
    /// counts at or below it. `None` when nothing was counted.
    pub fn percentile(&self, p: f64) -> Option<u64> {
        if self.total == 0 {
            return None;
        }
        let p = p.clamp(0.0, 100.0);
        // Rank of the percentile, at least 1 (ceil without float tricks).
        let want = ((self.total as f64) * p / 100.0).ceil().max(1.0) as u64;
        let mut seen = 0u64;
        for (i, c) in self.counts.iter().enumerate() {
            seen = seen.saturating_add(*c);
            if seen >= want {
                return Some(upper_bound(i));
            }
        }
        Some(upper_bound(BUCKETS - 1))
    }
}

#[cfg(test)]
mod tests {
    //! The bucket index (private); the percentiles are tested through
    //! the public API in tests/public_api/histogram.rs.
    use super::*;

    #[test]
    fn every_value_falls_in_its_bucket_and_bounds_are_close() {
        let mut prev = upper_bound(0);
        assert_eq!(prev, 15);
        for i in 1..BUCKETS {
            let b = upper_bound(i);
            assert!(b > prev, "{i}");
            // At most 1/16 above the previous bound (10 % is the contract).
            assert!((b - prev) * 16 <= prev + 1, "{i}: {prev} -> {b}");
            assert_eq!(index(b), i, "bound {b}");
            assert_eq!(index(prev + 1), i, "first of {i}");
            prev = b;
        }
        let mut rng = crate::rng::Rng::new(7);
        for _ in 0..100_000 {
            let v = rng.next() >> rng.below(64);
            let i = index(v);
            if v < (1 << TOP_BIT) {
                assert!(v <= upper_bound(i), "{v}");
                assert!(i == 0 || v > upper_bound(i - 1), "{v}");
            } else {
                assert_eq!(i, BUCKETS - 1);
            }
        }
    }
}
