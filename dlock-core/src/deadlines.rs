//! An ordered map from `u64` keys (a packed deadline and id) to values,
//! lean for the expiry index: entries live in sorted chunks of at most
//! [`CHUNK`] entries, each chunk filed in a `BTreeMap` under a lower bound
//! of its keys.
//!
//! Deadlines mostly grow, so inserts are mostly appends: an insert past the
//! last entry of a full chunk starts a new chunk (full chunks stay full), any
//! other insert into a full chunk first splits it in halves. A chunk that
//! falls below a quarter full after a removal merges with its successor when
//! both fit in one chunk; empty chunks go. Due entries are taken from the
//! front a range at a time ([`Deadlines::take_due`]).
//!
//! [`KeyName`] is the (db, key name) an entry names: 24 bytes, the name
//! inline up to [`INLINE`] bytes (db 0..=255), on the heap beyond.
//!
//! Invariant: every chunk is non-empty and sorted, its keys are ≥ its bound
//! and < the next chunk's bound.

use std::collections::BTreeMap;

/// Most entries of one chunk.
pub const CHUNK: usize = 64;

/// Mean bytes per entry of a `Deadlines<KeyName>` filled in deadline order
/// (every chunk full): the 32-byte entry and its share of the chunk's
/// B-tree slot. A name over [`INLINE`] bytes (or a db over 255) adds its
/// length + 24 on the heap. Checked by a test.
pub const ENTRY_BYTES: usize = 33;

/// An ordered `u64` → `V` map in sorted chunks (see the module docs).
#[derive(Debug, Clone)]
pub struct Deadlines<V> {
    chunks: BTreeMap<u64, Vec<(u64, V)>>,
    len: usize,
    /// One emptied chunk kept for the next new one: a lock filed and
    /// unfiled on an otherwise empty index (acquire, release) would else
    /// allocate and free a chunk every time.
    spare: Option<Vec<(u64, V)>>,
}

impl<V> Default for Deadlines<V> {
    fn default() -> Self {
        Deadlines {
            chunks: BTreeMap::new(),
            len: 0,
            spare: None,
        }
    }
}

impl<V> Deadlines<V> {
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Number of chunks (for memory accounting and tests).
    pub fn chunks(&self) -> usize {
        self.chunks.len()
    }

    /// A chunk to fill: the spare one, or a new one.
    fn fresh(spare: &mut Option<Vec<(u64, V)>>) -> Vec<(u64, V)> {
        spare.take().unwrap_or_else(|| Vec::with_capacity(CHUNK))
    }

    /// Keeps an emptied chunk as the spare (one at most).
    fn retire(spare: &mut Option<Vec<(u64, V)>>, mut c: Vec<(u64, V)>) {
        if spare.is_none() && c.capacity() == CHUNK {
            c.clear();
            *spare = Some(c);
        }
    }

    /// Bound of the chunk that holds (or would hold) `key`: the last chunk
    /// whose bound is ≤ `key`, else the first chunk.
    fn locate(&self, key: u64) -> Option<u64> {
        self.chunks
            .range(..=key)
            .next_back()
            .or_else(|| self.chunks.iter().next())
            .map(|(b, _)| *b)
    }

    /// Inserts `key` → `value`; returns the value it replaced, if any.
    pub fn insert(&mut self, key: u64, value: V) -> Option<V> {
        let Some(mut bound) = self.locate(key) else {
            let mut c = Self::fresh(&mut self.spare);
            c.push((key, value));
            self.chunks.insert(key, c);
            self.len += 1;
            return None;
        };
        if key < bound {
            // Below every key: the first chunk's bound moves down.
            if let Some(c) = self.chunks.remove(&bound) {
                self.chunks.insert(key, c);
            }
            bound = key;
        }
        let chunk = self.chunks.get_mut(&bound)?;
        let at = match chunk.binary_search_by_key(&key, |e| e.0) {
            Ok(i) => {
                return chunk.get_mut(i).map(|e| std::mem::replace(&mut e.1, value));
            }
            Err(i) => i,
        };
        self.len += 1;
        if chunk.len() < CHUNK {
            chunk.insert(at, (key, value));
            return None;
        }
        if at == chunk.len() {
            // Past the end of a full chunk: a new chunk (its keys lie
            // between this chunk's last key and the next chunk's bound).
            let mut c = Self::fresh(&mut self.spare);
            c.push((key, value));
            self.chunks.insert(key, c);
            return None;
        }
        let mut hi = Self::fresh(&mut self.spare);
        hi.extend(chunk.drain(CHUNK / 2..));
        let hi_bound = hi.first().map_or(key, |e| e.0);
        if at < CHUNK / 2 {
            chunk.insert(at, (key, value));
        } else {
            hi.insert(at - CHUNK / 2, (key, value));
        }
        self.chunks.insert(hi_bound, hi);
        None
    }

    pub fn contains_key(&self, key: u64) -> bool {
        self.get(key).is_some()
    }

    pub fn get(&self, key: u64) -> Option<&V> {
        let chunk = self.chunks.get(&self.locate(key)?)?;
        let i = chunk.binary_search_by_key(&key, |e| e.0).ok()?;
        chunk.get(i).map(|e| &e.1)
    }

    /// Removes `key`; returns its value.
    pub fn remove(&mut self, key: u64) -> Option<V> {
        let bound = self.locate(key)?;
        let chunk = self.chunks.get_mut(&bound)?;
        let i = chunk.binary_search_by_key(&key, |e| e.0).ok()?;
        let (_, v) = chunk.remove(i);
        self.len -= 1;
        let left = chunk.len();
        if left == 0 {
            if let Some(c) = self.chunks.remove(&bound) {
                Self::retire(&mut self.spare, c);
            }
        } else if left < CHUNK / 4 {
            self.merge_next(bound);
        }
        Some(v)
    }

    /// Merges the chunk at `bound` with its successor when both fit in one.
    fn merge_next(&mut self, bound: u64) {
        let next = self
            .chunks
            .range(bound.saturating_add(1)..)
            .next()
            .map(|(b, c)| (*b, c.len()));
        let Some((nb, nlen)) = next else { return };
        if bound == u64::MAX || self.chunks.get(&bound).map_or(0, Vec::len) + nlen > CHUNK {
            return;
        }
        if let Some(mut n) = self.chunks.remove(&nb) {
            if let Some(c) = self.chunks.get_mut(&bound) {
                c.append(&mut n);
            }
            Self::retire(&mut self.spare, n);
        }
    }

    /// The smallest key.
    pub fn first_key(&self) -> Option<u64> {
        self.chunks
            .first_key_value()
            .and_then(|(_, c)| c.first())
            .map(|e| e.0)
    }

    /// Removes and returns the entry with the smallest key.
    pub fn pop_first(&mut self) -> Option<(u64, V)> {
        let mut out = Vec::with_capacity(1);
        self.take_due(u64::MAX, 1, &mut out);
        out.pop()
    }

    /// Moves the entries with keys ≤ `limit` into `out`, smallest first,
    /// until `out` holds `max` entries; returns how many it moved.
    pub fn take_due(&mut self, limit: u64, max: usize, out: &mut Vec<(u64, V)>) -> usize {
        let start = out.len();
        while out.len() < max {
            let Some(mut first) = self.chunks.first_entry() else {
                break;
            };
            let c = first.get_mut();
            let n = c.partition_point(|e| e.0 <= limit).min(max - out.len());
            out.extend(c.drain(..n));
            self.len -= n;
            if !c.is_empty() {
                break;
            }
            Self::retire(&mut self.spare, first.remove());
        }
        out.len() - start
    }

    /// Every entry, in key order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, &V)> {
        self.chunks.values().flatten().map(|(k, v)| (*k, v))
    }

    /// Every value, mutably, in key order.
    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut V> {
        self.chunks.values_mut().flatten().map(|(_, v)| v)
    }

    /// Removes every entry; returns the values in key order.
    pub fn take_all(&mut self) -> Vec<V> {
        self.len = 0;
        std::mem::take(&mut self.chunks)
            .into_values()
            .flatten()
            .map(|(_, v)| v)
            .collect()
    }

    /// Removes the entries whose value satisfies `pred`; returns their
    /// values in key order. Chunks are kept (their bounds stay lower
    /// bounds) unless emptied.
    pub fn take_where(&mut self, mut pred: impl FnMut(&V) -> bool) -> Vec<V> {
        let mut out = Vec::new();
        for c in self.chunks.values_mut() {
            let mut kept = Vec::with_capacity(CHUNK);
            for (k, v) in c.drain(..) {
                if pred(&v) {
                    out.push(v);
                } else {
                    kept.push((k, v));
                }
            }
            *c = kept;
        }
        self.chunks.retain(|_, c| !c.is_empty());
        self.len -= out.len();
        out
    }

    /// Bytes the map holds besides the values' own heap: the chunks'
    /// capacity and an estimate of the B-tree's nodes (for MEMORY USAGE
    /// figures and tests).
    pub fn heap_bytes(&self) -> usize {
        let entry = std::mem::size_of::<(u64, V)>();
        let node = std::mem::size_of::<(u64, Vec<(u64, V)>)>();
        self.chunks
            .values()
            .map(|c| c.capacity() * entry + node * 3 / 2)
            .sum::<usize>()
            + self.spare.as_ref().map_or(0, |c| c.capacity() * entry)
    }

    /// Checks the invariant (tests).
    pub fn check(&self) -> bool {
        let mut prev: Option<u64> = None;
        let mut n = 0;
        let bounds: Vec<u64> = self.chunks.keys().copied().collect();
        for (i, (b, c)) in self.chunks.iter().enumerate() {
            if c.is_empty() || c.len() > CHUNK {
                return false;
            }
            let next = bounds.get(i + 1).copied();
            for (k, _) in c {
                if *k < *b || next.is_some_and(|nb| *k >= nb) || prev.is_some_and(|p| *k <= p) {
                    return false;
                }
                prev = Some(*k);
                n += 1;
            }
        }
        n == self.len
    }
}

/// Longest key name stored inline in a [`KeyName`].
pub const INLINE: usize = 22;

/// Length of an inline name (0..=22): an enum so that [`KeyName`] keeps the
/// spare values for its discriminant and stays 24 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
#[rustfmt::skip]
enum Len {
    L0, L1, L2, L3, L4, L5, L6, L7, L8, L9, L10, L11, L12, L13, L14, L15, L16,
    L17, L18, L19, L20, L21, L22,
}

const LENS: [Len; INLINE + 1] = {
    use Len::*;
    [
        L0, L1, L2, L3, L4, L5, L6, L7, L8, L9, L10, L11, L12, L13, L14, L15, L16, L17, L18, L19,
        L20, L21, L22,
    ]
};

/// A db number and key name in 24 bytes: inline when the name is at most
/// [`INLINE`] bytes and the db at most 255, else one heap allocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyName(Repr);

#[derive(Debug, Clone, PartialEq, Eq)]
enum Repr {
    Inline {
        len: Len,
        db: u8,
        bytes: [u8; INLINE],
    },
    Heap(Box<(i32, Box<[u8]>)>),
}

impl KeyName {
    pub fn new(db: i32, key: &[u8]) -> KeyName {
        if let (Some(len), Ok(db)) = (LENS.get(key.len()), u8::try_from(db)) {
            let mut bytes = [0u8; INLINE];
            if let Some(dst) = bytes.get_mut(..key.len()) {
                dst.copy_from_slice(key);
                return KeyName(Repr::Inline {
                    len: *len,
                    db,
                    bytes,
                });
            }
        }
        KeyName(Repr::Heap(Box::new((db, key.into()))))
    }

    pub fn db(&self) -> i32 {
        match &self.0 {
            Repr::Inline { db, .. } => i32::from(*db),
            Repr::Heap(h) => h.0,
        }
    }

    pub fn set_db(&mut self, db: i32) {
        if self.db() != db {
            *self = KeyName::new(db, self.key());
        }
    }

    pub fn key(&self) -> &[u8] {
        match &self.0 {
            Repr::Inline { len, bytes, .. } => bytes.get(..*len as usize).unwrap_or(bytes),
            Repr::Heap(h) => &h.1,
        }
    }

    /// Whether this names `key` in `db`.
    pub fn is(&self, db: i32, key: &[u8]) -> bool {
        self.db() == db && self.key() == key
    }

    /// Heap bytes beyond the 24 inline ones (0 for an inline name).
    pub fn heap_bytes(&self) -> usize {
        match &self.0 {
            Repr::Inline { .. } => 0,
            Repr::Heap(h) => std::mem::size_of::<(i32, Box<[u8]>)>() + h.1.len(),
        }
    }
}

impl std::ops::Deref for KeyName {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.key()
    }
}

#[cfg(test)]
mod tests {
    //! The inline form of key names (private); everything else of this
    //! module is tested through its public API in tests/public_api/deadlines.rs.
    use super::*;

    #[test]
    fn key_names() {
        for n in [0, 1, 21, 22, 23, 100] {
            let key: Vec<u8> = (0..n).map(|i| i as u8).collect();
            for db in [0, 1, 15, 255, 256, -1, i32::MAX] {
                let k = KeyName::new(db, &key);
                assert_eq!(k.db(), db);
                assert_eq!(k.key(), &key[..]);
                assert!(k.is(db, &key));
                assert_eq!(
                    matches!(k.0, Repr::Inline { .. }),
                    n <= 22 && (0..=255).contains(&db)
                );
                let mut k2 = k.clone();
                k2.set_db(3);
                assert!(k2.is(3, &key));
                assert_eq!(&*k2, &key[..]);
            }
        }
    }
}
