//! A compact, fixed-size form of the most common lock: a mutex, fair or rw
//! lock with exactly one live holder and nobody waiting (issue 27: memory
//! per held lock). A lock of any kind with no holder and no waiter (about
//! to leave its key: a release commits it, then deletes the key) has one
//! too, so that the module never allocates for it.
//!
//! [`Lock::compact`] gives a [`Compact`] only when the lock is exactly
//! representable; [`Compact::inflate`] gives the lock back, equal to the one
//! compacted (and so is every observable answer: the hold, the token, the
//! lease end, the grant time, the journal's "send everything" flag). The
//! module stores the compact form in a key and inflates it into a `Lock`
//! on the stack while a command works on it.
//!
//! What is left out is bookkeeping that an empty queue makes moot:
//! - the places-due bound: with no place, "no queued place ends before
//!   `u64::MAX`" is exact, and that is what [`Compact::inflate`] gives;
//! - the journal's queued-owner set and edit buffer: with an empty queue and
//!   no edit, the next place added starts the set again
//!   (`Queue::push_back`), and a known empty set and an unknown one answer
//!   `Queue::may_have` alike (false: no place).

use super::queue::Queue;
use super::{Delayed, Holder, Kind, Lock, Mode, Owner, OWNER_INLINE};
use smallvec::SmallVec;

/// Instants kept in 48 bits (far beyond [`super::MAX_INSTANT`], 2^42).
const MAX48: u64 = (1 << 48) - 1;

/// [`Compact::flags`]: the hold's mode, in the low two bits.
const MODE_MASK: u8 = 0b11;
/// [`Compact::flags`]: the journal says "send the whole state" (a lock made,
/// loaded or applied on a replica since the last commit).
const REWRITE: u8 = 0b100;
/// [`Compact::flags`]: the lock has its one holder (else none, and the
/// lease-end field keeps the lock's size).
const HOLDER: u8 = 0b1000;

/// A lock with one live holder (or none) and no waiter, in 67 bytes
/// (alignment 1; the [`Kind`] gives an enclosing enum a niche for its tag).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Compact {
    kind: Kind,
    /// The holder's token, which is also the lock's last token.
    token: [u8; 8],
    /// The lease end, unix ms, 48 bits little-endian (no holder: the
    /// lock's size).
    expires_at: [u8; 6],
    /// The grant time, unix ms, 48 bits little-endian.
    granted_at: [u8; 6],
    /// The reentrant count.
    count: [u8; 4],
    /// The mode's code (low two bits), [`REWRITE`] and [`HOLDER`].
    flags: u8,
    owner_len: u8,
    owner: [u8; OWNER_INLINE],
}

fn to48(v: u64) -> Option<[u8; 6]> {
    if v > MAX48 {
        return None;
    }
    let b = v.to_le_bytes();
    let [a0, a1, a2, a3, a4, a5, _, _] = b;
    Some([a0, a1, a2, a3, a4, a5])
}

fn from48(b: [u8; 6]) -> u64 {
    let [a0, a1, a2, a3, a4, a5] = b;
    u64::from_le_bytes([a0, a1, a2, a3, a4, a5, 0, 0])
}

impl Lock {
    /// The compact form of this lock, when it is exactly representable: no
    /// waiter, a journal with no edit (clean, or "send everything"), and
    /// either a mutex, fair or rw lock with one live holder (not bound, no
    /// lock-delay, owner of at most [`OWNER_INLINE`] bytes, its token the
    /// lock's last token), or a lock of any kind with no holder.
    pub fn compact(&self) -> Option<Compact> {
        if !self.queue.is_empty() {
            return None;
        }
        let rewrite = self.queue.compact_state()?;
        let rewrite = if rewrite { REWRITE } else { 0 };
        let h = match self.holders.as_slice() {
            [] => {
                return Some(Compact {
                    kind: self.kind,
                    token: self.last_token.to_le_bytes(),
                    expires_at: to48(self.size)?,
                    granted_at: [0; 6],
                    count: [0; 4],
                    flags: rewrite,
                    owner_len: 0,
                    owner: [0; OWNER_INLINE],
                })
            }
            [h] => h,
            _ => return None,
        };
        if !matches!(self.kind, Kind::Mutex | Kind::Fair | Kind::Rw)
            || self.size != 0
            || h.delayed != Delayed::No
            || !self.kind.allows(h.mode)
            || h.bound != 0
            || h.delay_ms != 0
            || h.token != self.last_token
            || h.owner.len() > OWNER_INLINE
            || h.owner.spilled()
        {
            return None;
        }
        let mut owner = [0u8; OWNER_INLINE];
        owner.get_mut(..h.owner.len())?.copy_from_slice(&h.owner);
        let mode = h.mode.code();
        if mode > MODE_MASK {
            return None;
        }
        Some(Compact {
            kind: self.kind,
            token: h.token.to_le_bytes(),
            expires_at: to48(h.expires_at)?,
            granted_at: to48(h.granted_at)?,
            count: h.count.to_le_bytes(),
            flags: mode | rewrite | HOLDER,
            owner_len: u8::try_from(h.owner.len()).ok()?,
            owner,
        })
    }
}

impl Compact {
    /// The lock's kind.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// The lock's only deadline: its hold's lease end (None: no holder).
    pub fn deadline(&self) -> Option<u64> {
        (self.flags & HOLDER != 0).then(|| from48(self.expires_at))
    }

    /// Whether the lock has no holder and no waiter ([`Lock::is_empty`]:
    /// a latch also needs its count at 0).
    pub fn is_empty(&self) -> bool {
        self.flags & HOLDER == 0 && (self.kind != Kind::Latch || from48(self.expires_at) == 0)
    }

    /// The lock this is the compact form of (no heap allocation: the owner
    /// fits inline).
    pub fn inflate(&self) -> Lock {
        let token = u64::from_le_bytes(self.token);
        let rewrite = self.flags & REWRITE != 0;
        if self.flags & HOLDER == 0 {
            return Lock {
                kind: self.kind,
                last_token: token,
                size: from48(self.expires_at),
                holders: SmallVec::new(),
                queue: Queue::compacted(rewrite),
            };
        }
        let owner = self
            .owner
            .get(..usize::from(self.owner_len))
            .unwrap_or(&self.owner);
        let holder = Holder {
            owner: Owner::from_slice(owner),
            // Only codes of modes were stored (`Lock::compact`).
            mode: Mode::from_code(self.flags & MODE_MASK).unwrap_or(Mode::Exclusive),
            count: u32::from_le_bytes(self.count),
            expires_at: from48(self.expires_at),
            token,
            bound: 0,
            delay_ms: 0,
            delayed: Delayed::No,
            granted_at: from48(self.granted_at),
        };
        Lock {
            kind: self.kind,
            last_token: token,
            size: 0,
            holders: SmallVec::from_buf([holder]),
            queue: Queue::compacted(rewrite),
        }
    }
}

#[cfg(test)]
mod tests;
