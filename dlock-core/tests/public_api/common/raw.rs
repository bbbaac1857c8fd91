//! Payloads written by hand, independently of `codec::encode`, and locks
//! made of given parts through them.

use dlock_core::codec::DecodeError;
use dlock_core::*;

/// Numbers as the codec writes them (LEB128 varints).
pub use dlock_core::codec::write_varint as leb;

/// A payload written by hand (independently of `encode`), so that it can
/// also say things `encode` never would.
#[derive(Clone, Debug)]
pub struct Raw {
    pub version: u8,
    pub kind: u8,
    pub last_token: u64,
    pub floor: u64,
    pub n_holders: Option<u64>,
    pub holders: Vec<RawHolder>,
    pub n_waiters: Option<u64>,
    pub waiters: Vec<RawWaiter>,
    pub trailing: Vec<u8>,
}

#[derive(Clone, Debug)]
pub struct RawHolder {
    pub owner: Vec<u8>,
    pub mode: u8,
    pub count: u64,
    pub expires_at: u64,
    pub token: u64,
}

#[derive(Clone, Debug)]
pub struct RawWaiter {
    pub id: u64,
    pub owner: Vec<u8>,
    pub mode: u8,
    pub blocked: u8,
    pub expires_at: u64,
}

impl Raw {
    pub fn new(kind: u8, last_token: u64) -> Raw {
        Raw {
            version: 1,
            kind,
            last_token,
            floor: 9,
            n_holders: None,
            holders: Vec::new(),
            n_waiters: None,
            waiters: Vec::new(),
            trailing: Vec::new(),
        }
    }

    pub fn holder(mut self, owner: &[u8], mode: u8, count: u64, token: u64) -> Raw {
        self.holders.push(RawHolder {
            owner: owner.to_vec(),
            mode,
            count,
            expires_at: 5000,
            token,
        });
        self
    }

    pub fn waiter(mut self, id: u64, owner: &[u8], mode: u8, blocked: u8) -> Raw {
        self.waiters.push(RawWaiter {
            id,
            owner: owner.to_vec(),
            mode,
            blocked,
            expires_at: 6000,
        });
        self
    }

    pub fn with(mut self, f: impl FnOnce(&mut Raw)) -> Raw {
        f(&mut self);
        self
    }

    pub fn bytes(&self) -> Vec<u8> {
        let mut out = vec![self.version, self.kind];
        leb(&mut out, self.last_token);
        leb(&mut out, self.floor);
        leb(
            &mut out,
            self.n_holders.unwrap_or(self.holders.len() as u64),
        );
        for h in &self.holders {
            leb(&mut out, h.owner.len() as u64);
            out.extend_from_slice(&h.owner);
            out.push(h.mode);
            leb(&mut out, h.count);
            leb(&mut out, h.expires_at);
            leb(&mut out, h.token);
        }
        leb(
            &mut out,
            self.n_waiters.unwrap_or(self.waiters.len() as u64),
        );
        for w in &self.waiters {
            leb(&mut out, w.id);
            leb(&mut out, w.owner.len() as u64);
            out.extend_from_slice(&w.owner);
            out.push(w.mode);
            out.push(w.blocked);
            leb(&mut out, w.expires_at);
        }
        out.extend_from_slice(&self.trailing);
        out
    }
}

/// The byte a payload gives `kind` (the codec's layout).
pub fn kind_byte(kind: Kind) -> u8 {
    match kind {
        Kind::Mutex => 0,
        Kind::Rw => 1,
        Kind::Fair => 2,
        Kind::Semaphore => 3,
        Kind::Latch => 4,
    }
}

/// The byte a payload gives `mode` (the codec's layout).
pub fn mode_byte(mode: Mode) -> u8 {
    match mode {
        Mode::Exclusive => 0,
        Mode::Read => 1,
        Mode::Write => 2,
        Mode::Permit => 3,
        Mode::Await => 4,
    }
}

/// A version 4 payload of a lock made of these parts, written by hand
/// (every field: sized, hold flags, grant and wait-start times).
pub fn payload_v4(
    kind: Kind,
    last_token: u64,
    floor: u64,
    size: u64,
    holders: &[Holder],
    waiters: &[Waiter],
) -> Vec<u8> {
    let mut out = vec![4, kind_byte(kind)];
    leb(&mut out, last_token);
    leb(&mut out, floor);
    leb(&mut out, size);
    leb(&mut out, holders.len() as u64);
    for h in holders {
        leb(&mut out, h.owner.len() as u64);
        out.extend_from_slice(&h.owner);
        out.push(mode_byte(h.mode));
        leb(&mut out, u64::from(h.count));
        leb(&mut out, h.expires_at);
        leb(&mut out, h.token);
        let delayed = match h.delayed {
            Delayed::No => 0,
            Delayed::Expired => 1,
            Delayed::Disconnected => 2,
        };
        out.push(u8::from(h.bound != 0) | delayed << 1);
        leb(&mut out, h.delay_ms);
        leb(&mut out, h.granted_at);
    }
    leb(&mut out, waiters.len() as u64);
    for w in waiters {
        leb(&mut out, w.id);
        leb(&mut out, w.owner.len() as u64);
        out.extend_from_slice(&w.owner);
        out.push(mode_byte(w.mode));
        out.push(u8::from(w.blocked));
        leb(&mut out, w.expires_at);
        leb(&mut out, u64::from(w.permits));
        leb(&mut out, w.since);
    }
    out
}

/// The lock made of these parts, through its payload (so it is valid: the
/// parts must keep every rule `decode` checks). It is a lock as loaded:
/// its journal sends the next commit whole, and a bound hold is bound
/// elsewhere ([`BOUND_ELSEWHERE`]). A lock with neither holds nor places
/// (which no payload but a latch's carries) is made with one place, then
/// removed.
pub fn lock_from_parts(
    kind: Kind,
    last_token: u64,
    size: u64,
    holders: Vec<Holder>,
    waiters: std::collections::VecDeque<Waiter>,
) -> Lock {
    match try_lock_from_parts(kind, last_token, size, holders, waiters) {
        Ok(lock) => lock,
        Err(e) => panic!("the parts of a {kind:?} lock do not decode: {e:?}"),
    }
}

/// [`lock_from_parts`], or why `decode` refuses those parts.
pub fn try_lock_from_parts(
    kind: Kind,
    last_token: u64,
    size: u64,
    holders: Vec<Holder>,
    waiters: std::collections::VecDeque<Waiter>,
) -> Result<Lock, DecodeError> {
    let placeholder = kind != Kind::Latch && holders.is_empty() && waiters.is_empty();
    let mut waiters: Vec<Waiter> = waiters.into();
    if placeholder {
        let mode = match kind {
            Kind::Rw => Mode::Write,
            Kind::Semaphore => Mode::Permit,
            _ => Mode::Exclusive,
        };
        waiters.push(Waiter {
            id: 1,
            owner: Box::from(&b"placeholder"[..]),
            mode,
            blocked: true,
            expires_at: 1,
            permits: 1,
            since: 0,
        });
    }
    let payload = payload_v4(kind, last_token, 0, size, &holders, &waiters);
    let (mut lock, _) = codec::decode(&payload)?;
    if placeholder {
        lock.remove_waiter(1);
    }
    Ok(lock)
}

/// The size field of `l`'s payload: a semaphore's limit, a latch's count,
/// 0 for the other kinds.
pub fn size_of(l: &Lock) -> u64 {
    l.limit().or(l.latch_count()).unwrap_or(0)
}
