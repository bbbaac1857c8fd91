//! A tiny deterministic pseudo-random generator (xorshift64*), for the
//! fuzzers and property tests of this workspace and for tools: the same
//! seed gives the same sequence on every machine, so a failure reproduces
//! from its seed, with no dependency.
//!
//! Not for anything that must be unpredictable. Behind the `rng` feature
//! (on in this crate's own tests): the module itself never uses it.

// Test support: `pick` indexes (an empty slice is the caller's bug).
#![allow(clippy::indexing_slicing)]

/// xorshift64* (Vigna): 64 bits of state, any nonzero state is valid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rng(pub u64);

impl Rng {
    /// A generator from any seed (0 included): the seed is mixed and made
    /// odd, so the state is never 0.
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// The next 64 bits.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// In `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// True about once in `n` calls.
    pub fn one_in(&mut self, n: u64) -> bool {
        self.below(n) == 0
    }

    /// True about `percent` times in 100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// One of `items`.
    ///
    /// # Panics
    /// When `items` is empty.
    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len() as u64) as usize]
    }

    /// Up to `max_len` random bytes.
    pub fn bytes(&mut self, max_len: u64) -> Vec<u8> {
        let n = self.below(max_len.saturating_add(1));
        (0..n).map(|_| self.next() as u8).collect()
    }
}
