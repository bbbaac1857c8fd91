//! One binary encoding of a lock, used for RDB, DUMP/RESTORE, AOF rewrite and
//! replication (`DLOCK.APPLY`). Every payload can come from a caller (RESTORE,
//! DLOCK.APPLY), so [`decode`] checks every invariant the state machine relies
//! on and refuses anything else.
//!
//! Layout (integers are LEB128 varints unless noted):
//! ```text
//! u8 version (=1) | u8 kind | last_token | token_floor
//! n_holders  { owner_len owner u8 mode  count expires_at token }
//! n_waiters  { id owner_len owner u8 mode u8 blocked expires_at }
//! ```
//! Delta payloads (replication and AOF's command log only, never RDB or
//! DUMP: see [`super::journal`]) start with the marker byte [`DELTA`]; they
//! carry everything but the queue in full (holds always with the version 3
//! flags), then the queue's edits since the state the replica has:
//! ```text
//! u8 DELTA (=0x44) | u8 kind | last_token | token_floor | size
//! n_holders  { owner_len owner u8 mode  count expires_at token u8 flags delay_ms }
//! base_len | final_len
//! n_edits    { u8 0 id | u8 1 id waiter }      (removed | replaced)
//! n_appended { waiter }
//! waiter = id owner_len owner u8 mode u8 blocked expires_at permits
//! ```
//!
//! Version 4 and the delta marker [`DELTA_TIMED`] (0x45) add each hold's
//! `granted_at` (after `delay_ms`; version 4 always has the version 3
//! flags) and each place's `since` (after `permits`), unix ms.
//!
//! `token_floor` carries the server-wide token counter so that tokens keep
//! increasing for keys deleted before a restart.
//!
//! Floor-only payloads (replication and AOF's command log only, sent after a
//! promotion raised the counter) carry nothing but the counter, and change
//! no key:
//! ```text
//! u8 FLOOR (=0x46) | token_floor
//! ```
//!
//! Version 2 (written for semaphores and latches; version 1 payloads of the
//! other kinds still decode, and are still what those kinds write) adds the
//! kind's size after `token_floor` (a semaphore's limit, a latch's count,
//! 0 otherwise) and each waiter's permits after its `expires_at`:
//! ```text
//! u8 version (=2) | u8 kind | last_token | token_floor | size
//! n_holders  { owner_len owner u8 mode  count expires_at token }
//! n_waiters  { id owner_len owner u8 mode u8 blocked expires_at permits }
//! ```

use super::journal::{Edit, IdRanges};
use super::{Delayed, Holder, Kind, Lock, Mode, Waiter, MAX_INSTANT, MAX_OWNER_LEN, MAX_TOKEN};
use std::collections::{HashMap, HashSet, VecDeque};

/// The encoding version written today for mutex, rw and fair locks.
pub const VERSION: u8 = 1;
/// The encoding version of semaphores and latches (size and permits).
pub const VERSION_2: u8 = 2;
/// Version 2 plus, per hold, a flags byte (bit 0: bound by `BIND`; bits 1-2:
/// lock-delay state 0 live, 1 after a lease end, 2 after a closed
/// connection) and its `LOCKDELAY` ms: written, for any kind, only when some
/// hold uses BIND or LOCKDELAY, so every other lock encodes as before.
pub const VERSION_3: u8 = 3;
/// Version 3 (always sized and with the hold flags) plus each hold's grant
/// time after its `LOCKDELAY` ms and each place's wait start after its
/// permits (unix ms, 0: unknown): written whenever a lock knows any of
/// them (every lock made by this version), so replicas, RESTORE and a
/// restart answer `held_ms` and `waited_ms` as the master did. Versions 1
/// to 3 still decode, with the times unknown.
pub const VERSION_4: u8 = 4;
/// The first byte of a delta payload (never a version of a full one).
pub const DELTA: u8 = 0x44;
/// The first byte of a delta payload that carries the times of version 4
/// (holds: grant time after `delay_ms`; places: wait start after permits).
pub const DELTA_TIMED: u8 = 0x45;
/// The first byte of a floor-only payload (never a version of a full one).
pub const FLOOR: u8 = 0x46;
/// Largest semaphore limit or latch count (2^32).
pub const MAX_SIZE: u64 = 1 << 32;

/// The version `kind` is written in.
fn version_of(kind: Kind) -> u8 {
    match kind {
        Kind::Mutex | Kind::Rw | Kind::Fair => VERSION,
        Kind::Semaphore | Kind::Latch => VERSION_2,
    }
}

/// Why a payload was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecodeError(pub &'static str);

/// Encodes `lock`, with the server-wide token counter `token_floor`.
pub fn encode(lock: &Lock, token_floor: u64) -> Vec<u8> {
    let mut out = Vec::new();
    encode_into(lock, token_floor, &mut out);
    out
}

/// Calls `f` with the encoding of `lock`, built in a buffer reused across
/// calls (replication encodes on every change; this saves an allocation).
pub fn with_encoded<R>(lock: &Lock, token_floor: u64, f: impl FnOnce(&[u8]) -> R) -> R {
    with_buffer(|buf| encode_into(lock, token_floor, buf), f)
}

/// Calls `f` with what replication sends for `lock`'s change since the last
/// commit: a delta ([`encode_delta_into`]) when its journal allows, else
/// the whole state. The second argument says which it was.
pub fn with_replication_payload<R>(
    lock: &Lock,
    token_floor: u64,
    f: impl FnOnce(&[u8], bool) -> R,
) -> R {
    let delta = lock.delta_ok();
    with_buffer(
        |buf| {
            if delta {
                encode_delta_into(lock, token_floor, buf);
            } else {
                encode_into(lock, token_floor, buf);
            }
        },
        |payload| f(payload, delta),
    )
}

fn with_buffer<R>(fill: impl FnOnce(&mut Vec<u8>), f: impl FnOnce(&[u8]) -> R) -> R {
    thread_local! {
        static BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    BUF.with(|cell| match cell.try_borrow_mut() {
        Ok(mut buf) => {
            buf.clear();
            fill(&mut buf);
            let r = f(&buf);
            // Do not keep a large lock's buffer around.
            if buf.capacity() > 64 * 1024 {
                *buf = Vec::new();
            }
            r
        }
        Err(_) => {
            let mut buf = Vec::new();
            fill(&mut buf);
            f(&buf)
        }
    })
}

/// Appends the encoding of `lock` to `out`.
pub fn encode_into(lock: &Lock, token_floor: u64, out: &mut Vec<u8>) {
    // Room for every field at its longest varint, so the buffer never grows.
    let holders: usize = lock.holders().iter().map(|h| h.owner.len() + 38).sum();
    let waiters: usize = lock.waiters().iter().map(|w| w.owner.len() + 34).sum();
    out.reserve(42 + holders + waiters);
    let timed = is_timed(lock);
    let extended = timed
        || lock
            .holders()
            .iter()
            .any(|h| h.bound != 0 || h.delay_ms != 0 || !h.is_live());
    let version = if timed {
        VERSION_4
    } else if extended {
        VERSION_3
    } else {
        version_of(lock.kind())
    };
    // Versions 2 and 3 carry the size and each waiter's permits.
    let sized = version != VERSION;
    if sized {
        out.reserve(10 + 5 * lock.waiters().len() + lock.holders().len());
    }
    out.push(version);
    out.push(lock.kind().code());
    put(out, lock.last_token());
    put(out, token_floor);
    if sized {
        put(out, lock.size());
    }
    put(out, lock.holders().len() as u64);
    for h in lock.holders() {
        put_holder(out, h, extended, timed);
    }
    put(out, lock.waiters().len() as u64);
    for w in lock.waiters() {
        put_waiter(out, w, sized, timed);
    }
}

/// Whether `lock` knows any grant or wait-start time (then it is written
/// with them: [`VERSION_4`], [`DELTA_TIMED`]).
fn is_timed(lock: &Lock) -> bool {
    lock.holders().iter().any(|h| h.granted_at != 0) || lock.waiters().iter().any(|w| w.since != 0)
}

fn put_holder(out: &mut Vec<u8>, h: &Holder, extended: bool, timed: bool) {
    put(out, h.owner.len() as u64);
    out.extend_from_slice(&h.owner);
    out.push(h.mode.code());
    put(out, u64::from(h.count));
    put(out, h.expires_at);
    put(out, h.token);
    if extended {
        let delayed = match h.delayed {
            Delayed::No => 0,
            Delayed::Expired => 1,
            Delayed::Disconnected => 2,
        };
        out.push(u8::from(h.bound != 0) | delayed << 1);
        put(out, h.delay_ms);
    }
    if timed {
        put(out, h.granted_at);
    }
}

fn put_waiter(out: &mut Vec<u8>, w: &Waiter, sized: bool, timed: bool) {
    put(out, w.id);
    put(out, w.owner.len() as u64);
    out.extend_from_slice(&w.owner);
    out.push(w.mode.code());
    out.push(u8::from(w.blocked));
    put(out, w.expires_at);
    if sized {
        put(out, u64::from(w.permits));
    }
    if timed {
        put(out, w.since);
    }
}

/// Appends the delta payload of `lock`'s change since its last commit (see
/// the module doc): its state but the queue, then the queue's edits. Only
/// meaningful when [`Lock::delta_ok`].
pub fn encode_delta_into(lock: &Lock, token_floor: u64, out: &mut Vec<u8>) {
    let (base_len, edits, appended) = lock.queue.journal_parts();
    let holders: usize = lock.holders().iter().map(|h| h.owner.len() + 50).sum();
    let waiters: usize = appended.clone().map(|w| w.owner.len() + 40).sum::<usize>()
        + edits
            .iter()
            .map(|e| match e {
                Edit::Removed(_) => 11,
                Edit::Replaced(_, w) => w.owner.len() + 51,
            })
            .sum::<usize>();
    let timed = is_timed(lock);
    out.reserve(72 + holders + waiters);
    out.push(if timed { DELTA_TIMED } else { DELTA });
    out.push(lock.kind().code());
    put(out, lock.last_token());
    put(out, token_floor);
    put(out, lock.size());
    put(out, lock.holders().len() as u64);
    for h in lock.holders() {
        put_holder(out, h, true, timed);
    }
    put(out, base_len as u64);
    put(out, lock.waiters().len() as u64);
    put(out, edits.len() as u64);
    for e in edits {
        match e {
            Edit::Removed(id) => {
                out.push(0);
                put(out, *id);
            }
            Edit::Replaced(id, w) => {
                out.push(1);
                put(out, *id);
                put_waiter(out, w, true, timed);
            }
        }
    }
    put(out, appended.len() as u64);
    for w in appended {
        put_waiter(out, w, true, timed);
    }
}

fn put(out: &mut Vec<u8>, v: u64) {
    write_varint(out, v);
}

/// Whether `buf` is a delta payload (to be applied to the lock in place).
pub fn is_delta(buf: &[u8]) -> bool {
    matches!(buf.first(), Some(&DELTA) | Some(&DELTA_TIMED))
}

/// Whether `buf` is a floor-only payload (see the module doc).
pub fn is_floor(buf: &[u8]) -> bool {
    buf.first() == Some(&FLOOR)
}

/// A floor-only payload carrying the token counter `token_floor`.
pub fn encode_floor(token_floor: u64) -> Vec<u8> {
    let mut out = vec![FLOOR];
    put(&mut out, token_floor);
    out
}

/// Decodes a floor-only payload: its token floor.
pub fn decode_floor(buf: &[u8]) -> Result<u64, DecodeError> {
    let mut r = Reader { buf };
    if r.byte()? != FLOOR {
        return Err(DecodeError("not a floor-only payload"));
    }
    let floor = r.varint()?;
    if floor > MAX_TOKEN {
        return Err(DecodeError("token is out of range"));
    }
    if !r.buf.is_empty() {
        return Err(DecodeError("trailing bytes after the payload"));
    }
    Ok(floor)
}

/// Appends `v` as an unsigned LEB128 varint, the way every integer of a
/// payload is written (for tools and tests that build payloads by hand).
pub fn write_varint(out: &mut Vec<u8>, mut v: u64) {
    loop {
        let byte = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn byte(&mut self) -> Result<u8, DecodeError> {
        let (&b, rest) = self
            .buf
            .split_first()
            .ok_or(DecodeError("payload is truncated"))?;
        self.buf = rest;
        Ok(b)
    }

    fn varint(&mut self) -> Result<u64, DecodeError> {
        let mut v: u64 = 0;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            let part = u64::from(b & 0x7f);
            if shift == 63 && part > 1 {
                return Err(DecodeError("integer overflows 64 bits"));
            }
            v |= part << shift;
            if b & 0x80 == 0 {
                if b == 0 && shift > 0 {
                    return Err(DecodeError("integer is not minimally encoded"));
                }
                return Ok(v);
            }
        }
        Err(DecodeError("integer overflows 64 bits"))
    }

    fn instant(&mut self) -> Result<u64, DecodeError> {
        let v = self.varint()?;
        if v > MAX_INSTANT {
            return Err(DecodeError("instant is out of range"));
        }
        Ok(v)
    }

    fn bytes(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if n > self.buf.len() {
            return Err(DecodeError("payload is truncated"));
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }

    fn owner(&mut self) -> Result<Box<[u8]>, DecodeError> {
        let n = self.varint()?;
        if n == 0 || n > MAX_OWNER_LEN as u64 {
            return Err(DecodeError("owner length is out of range"));
        }
        Ok(self.bytes(n as usize)?.into())
    }

    fn count(&mut self, min_entry: usize) -> Result<usize, DecodeError> {
        let n = self.varint()?;
        if n > (self.buf.len() / min_entry) as u64 {
            return Err(DecodeError("entry count exceeds the payload"));
        }
        Ok(n as usize)
    }

    fn mode(&mut self, kind: Kind) -> Result<Mode, DecodeError> {
        let m = Mode::from_code(self.byte()?).ok_or(DecodeError("unknown mode"))?;
        if !kind.allows(m) {
            return Err(DecodeError("mode does not fit the lock kind"));
        }
        Ok(m)
    }
}

/// Reads `n` holds (with the version 3 flags when `extended`), checking
/// each and that an exclusive hold is not shared.
fn read_holders(
    r: &mut Reader<'_>,
    kind: Kind,
    extended: bool,
    timed: bool,
    last_token: u64,
) -> Result<Vec<Holder>, DecodeError> {
    let n = r.count(5)?;
    let mut holders: Vec<Holder> = Vec::with_capacity(n.min(64));
    // (owner, mode) pairs seen: duplicate holds are found in linear time,
    // whatever the payload (RESTORE and APPLY payloads come from callers).
    let mut holds: HashSet<(Box<[u8]>, u8)> = HashSet::with_capacity(n.min(64));
    for _ in 0..n {
        let owner = r.owner()?;
        let mode = r.mode(kind)?;
        let count = u32::try_from(r.varint()?).map_err(|_| DecodeError("count is out of range"))?;
        let expires_at = r.instant()?;
        let token = r.varint()?;
        // A bound hold's connection is never this process's: the flag
        // survives (a replica shows it), the connection id does not.
        let (bound, delayed, delay_ms) = if extended {
            let flags = r.byte()?;
            let delayed = match flags >> 1 {
                0 => Delayed::No,
                1 => Delayed::Expired,
                2 => Delayed::Disconnected,
                _ => return Err(DecodeError("hold flags are out of range")),
            };
            let bound = if flags & 1 == 1 {
                super::BOUND_ELSEWHERE
            } else {
                0
            };
            let delay_ms = r.varint()?;
            if delay_ms > super::MAX_MS {
                return Err(DecodeError("lock-delay is out of range"));
            }
            if delayed != Delayed::No && (bound != 0 || delay_ms == 0) {
                return Err(DecodeError("a delayed hold is bound or has no delay"));
            }
            (bound, delayed, delay_ms)
        } else {
            (0, Delayed::No, 0)
        };
        let granted_at = if timed { r.instant()? } else { 0 };
        if count == 0 {
            return Err(DecodeError("count is zero"));
        }
        if token == 0 || token > last_token {
            return Err(DecodeError("holder token is out of range"));
        }
        let owner_inline = super::Owner::from_slice(&owner);
        if !holds.insert((owner, mode.code())) {
            return Err(DecodeError("duplicate hold"));
        }
        holders.push(Holder {
            owner: owner_inline,
            mode,
            count,
            expires_at,
            token,
            bound,
            delay_ms,
            delayed,
            granted_at,
        });
    }
    let exclusive = holders
        .iter()
        .find(|h| matches!(h.mode, Mode::Exclusive | Mode::Write))
        .map(|h| h.owner.clone());
    if let Some(owner) = exclusive {
        if holders.iter().any(|h| h.owner != owner) {
            return Err(DecodeError(
                "an exclusive hold is shared with another owner",
            ));
        }
    }
    Ok(holders)
}

/// Reads one place (with its permits when `sized`).
fn read_waiter(
    r: &mut Reader<'_>,
    kind: Kind,
    sized: bool,
    timed: bool,
) -> Result<Waiter, DecodeError> {
    let id = r.varint()?;
    let owner = r.owner()?;
    let mode = r.mode(kind)?;
    let blocked = match r.byte()? {
        0 => false,
        1 => true,
        _ => return Err(DecodeError("blocked flag is not 0 or 1")),
    };
    let expires_at = r.instant()?;
    let permits = if sized {
        u32::try_from(r.varint()?).map_err(|_| DecodeError("permits are out of range"))?
    } else {
        1
    };
    let since = if timed { r.instant()? } else { 0 };
    Ok(Waiter {
        id,
        owner,
        mode,
        blocked,
        expires_at,
        permits,
        since,
    })
}

/// Decodes and validates a payload. Returns the lock and the token floor.
pub fn decode(buf: &[u8]) -> Result<(Lock, u64), DecodeError> {
    let mut r = Reader { buf };
    let version = r.byte()?;
    if version == DELTA || version == DELTA_TIMED {
        return Err(DecodeError(
            "a delta payload needs the lock it changes (DLOCK.APPLY only)",
        ));
    }
    if !matches!(version, VERSION | VERSION_2 | VERSION_3 | VERSION_4) {
        return Err(DecodeError("unknown encoding version"));
    }
    let sized = version != VERSION;
    let kind = Kind::from_code(r.byte()?).ok_or(DecodeError("unknown lock kind"))?;
    if version == VERSION && version_of(kind) != VERSION {
        return Err(DecodeError("lock kind needs encoding version 2"));
    }
    let last_token = r.varint()?;
    let floor = r.varint()?;
    let size = if sized { r.varint()? } else { 0 };
    if last_token > MAX_TOKEN || floor > MAX_TOKEN {
        return Err(DecodeError("token is out of range"));
    }
    let timed = version == VERSION_4;
    let holders = read_holders(&mut r, kind, version >= VERSION_3, timed, last_token)?;
    let n = r.count(5)?;
    let mut waiters = VecDeque::with_capacity(n.min(64));
    let mut ids = HashSet::with_capacity(n.min(64));
    for _ in 0..n {
        let w = read_waiter(&mut r, kind, sized, timed)?;
        if !ids.insert(w.id) {
            return Err(DecodeError("duplicate waiter id"));
        }
        waiters.push_back(w);
    }
    if !r.buf.is_empty() {
        return Err(DecodeError("trailing bytes after the lock"));
    }
    check_holds(kind, size, &holders)?;
    for w in &waiters {
        check_waiter(kind, size, w)?;
    }
    if kind != Kind::Latch && holders.is_empty() && waiters.is_empty() {
        return Err(DecodeError("lock has neither holders nor waiters"));
    }
    Ok((
        Lock::from_parts(kind, last_token, holders, waiters).with_size(size),
        floor,
    ))
}

/// Decodes and validates a delta payload on its own (see the module doc);
/// [`Lock::apply_delta`] checks it against the lock it changes.
pub fn decode_delta(buf: &[u8]) -> Result<Delta, DecodeError> {
    let mut r = Reader { buf };
    let timed = match r.byte()? {
        DELTA => false,
        DELTA_TIMED => true,
        _ => return Err(DecodeError("not a delta payload")),
    };
    let kind = Kind::from_code(r.byte()?).ok_or(DecodeError("unknown lock kind"))?;
    let last_token = r.varint()?;
    let floor = r.varint()?;
    let size = r.varint()?;
    if last_token > MAX_TOKEN || floor > MAX_TOKEN {
        return Err(DecodeError("token is out of range"));
    }
    let holders = read_holders(&mut r, kind, true, timed, last_token)?;
    let len = |v: u64| usize::try_from(v).map_err(|_| DecodeError("queue length is out of range"));
    let base_len = len(r.varint()?)?;
    let final_len = len(r.varint()?)?;
    let n = r.count(2)?;
    let mut edits = Vec::with_capacity(n.min(64));
    for _ in 0..n {
        let e = match r.byte()? {
            0 => Edit::Removed(r.varint()?),
            1 => {
                let id = r.varint()?;
                Edit::Replaced(id, read_waiter(&mut r, kind, true, timed)?)
            }
            _ => return Err(DecodeError("unknown queue edit")),
        };
        edits.push(e);
    }
    let n = r.count(6)?;
    let mut appended = Vec::with_capacity(n.min(64));
    for _ in 0..n {
        appended.push(read_waiter(&mut r, kind, true, timed)?);
    }
    if !r.buf.is_empty() {
        return Err(DecodeError("trailing bytes after the delta"));
    }
    Ok(Delta {
        kind,
        last_token,
        floor,
        size,
        holders,
        base_len,
        final_len,
        edits,
        appended,
    })
}

/// A decoded delta payload: the lock's whole state except its queue, and
/// the queue's edits since the state the replica has.
#[derive(Clone, Debug)]
pub struct Delta {
    pub(super) kind: Kind,
    pub(super) last_token: u64,
    pub(super) floor: u64,
    pub(super) size: u64,
    pub(super) holders: Vec<Holder>,
    pub(super) base_len: usize,
    pub(super) final_len: usize,
    pub(super) edits: Vec<Edit>,
    pub(super) appended: Vec<Waiter>,
}

impl Lock {
    /// Applies a decoded delta (see [`decode_delta`]) to this lock, the
    /// state of the last commit: all or nothing. It is validated against
    /// this lock first ([`check_delta`]); nothing changes when it is
    /// refused. O(1) per edit whatever the queue's length for what
    /// replication sends most: places appended (their ids checked against
    /// ranges holding the queue's ids, see `IdRanges`), places removed at
    /// the head or in queue order (found where the last one was).
    /// Otherwise an id lookup scans the queue, and past two scans one index
    /// of it is built: O(queue) once per delta, like removing a place in
    /// the middle of the queue itself.
    pub fn apply_delta(&mut self, mut d: Delta) -> Result<u64, DecodeError> {
        let DeltaPlan {
            replaced,
            gone,
            ids,
        } = check_delta(self, &mut d)?;
        // Apply: cannot fail from here.
        self.queue.apply(replaced, gone, d.appended, ids);
        self.holders = smallvec::SmallVec::from_vec(d.holders);
        self.last_token = d.last_token;
        self.size = d.size;
        Ok(d.floor)
    }
}

/// What [`Lock::apply_delta`] does to the queue once [`check_delta`]
/// accepted the delta: the places replaced (by position), and the
/// positions removed, in increasing order; the ranges of the queue's ids
/// when the lock did not know them (found by one scan).
pub(super) struct DeltaPlan {
    pub(super) replaced: HashMap<usize, Waiter>,
    pub(super) gone: Vec<usize>,
    pub(super) ids: Option<IdRanges>,
}

/// Validates the delta `d` against `lock`, the state of the last commit
/// (same kind, same queue length, a semaphore's limit unchanged, holds and
/// places that keep every rule, every edit naming a place that is there,
/// ids unique, the final length and a lock that is not empty), and finds
/// every edit's place without changing anything. Takes the edits out of
/// `d`; what is left is applied as it is.
pub(super) fn check_delta(lock: &Lock, d: &mut Delta) -> Result<DeltaPlan, DecodeError> {
    if d.kind != lock.kind() {
        return Err(DecodeError(
            "delta is for another kind of lock than the key holds (expected the same kind)",
        ));
    }
    if d.base_len != lock.waiters().len() {
        return Err(DecodeError(
            "delta base queue length differs from the lock's queue (expected the state of the master's previous change)",
        ));
    }
    if lock.kind() == Kind::Semaphore && d.size != lock.size() {
        return Err(DecodeError("delta changes a semaphore's limit"));
    }
    check_holds(d.kind, d.size, &d.holders)?;
    // Resolve every edit to a position of the current queue, without
    // changing anything yet. An id outside the ranges of the queue's ids
    // is not there: no lookup.
    let known = lock.queue.id_ranges();
    let found_ids = known.is_none().then(|| IdRanges::of(lock.waiters()));
    let ranges = found_ids.as_ref().or(known);
    let mut finder = Finder::default();
    // Positions touched: the id there now (None: removed).
    let mut overlay: HashMap<usize, Option<u64>> = HashMap::new();
    // Ids given by replacements, and where.
    let mut renamed: HashMap<u64, usize> = HashMap::new();
    let mut replaced: HashMap<usize, Waiter> = HashMap::new();
    let mut removed = 0usize;
    let present = |finder: &mut Finder,
                   overlay: &HashMap<usize, Option<u64>>,
                   renamed: &HashMap<u64, usize>,
                   id: u64|
     -> Option<usize> {
        if let Some(&p) = renamed.get(&id) {
            return Some(p);
        }
        if ranges.is_some_and(|r| !r.may_hold(id)) {
            return None;
        }
        let p = finder.find(lock.waiters(), id)?;
        (!overlay.contains_key(&p)).then_some(p)
    };
    for e in std::mem::take(&mut d.edits) {
        match e {
            Edit::Removed(id) => {
                let p = present(&mut finder, &overlay, &renamed, id).ok_or(DecodeError(
                    "delta removes a place that is not in the queue",
                ))?;
                renamed.remove(&id);
                replaced.remove(&p);
                overlay.insert(p, None);
                removed = removed.saturating_add(1);
            }
            Edit::Replaced(id, w) => {
                let p = present(&mut finder, &overlay, &renamed, id).ok_or(DecodeError(
                    "delta changes a place that is not in the queue",
                ))?;
                if w.id != id && present(&mut finder, &overlay, &renamed, w.id).is_some() {
                    return Err(DecodeError(
                        "delta gives a place an id already in the queue",
                    ));
                }
                check_waiter(d.kind, d.size, &w)?;
                renamed.remove(&id);
                renamed.insert(w.id, p);
                overlay.insert(p, Some(w.id));
                replaced.insert(p, w);
            }
        }
    }
    let mut new_ids: HashSet<u64> = HashSet::with_capacity(d.appended.len());
    for w in &d.appended {
        check_waiter(d.kind, d.size, w)?;
        if !new_ids.insert(w.id) || present(&mut finder, &overlay, &renamed, w.id).is_some() {
            return Err(DecodeError(
                "delta appends a place whose id is already in the queue",
            ));
        }
    }
    let final_len = lock
        .waiters()
        .len()
        .checked_sub(removed)
        .and_then(|n| n.checked_add(d.appended.len()))
        .ok_or(DecodeError("delta queue length is out of range"))?;
    if final_len != d.final_len {
        return Err(DecodeError(
            "delta final queue length differs from its edits",
        ));
    }
    if d.kind != Kind::Latch && d.holders.is_empty() && final_len == 0 {
        return Err(DecodeError("lock has neither holders nor waiters"));
    }
    let mut gone: Vec<usize> = overlay
        .into_iter()
        .filter_map(|(p, id)| id.is_none().then_some(p))
        .collect();
    gone.sort_unstable();
    Ok(DeltaPlan {
        replaced,
        gone,
        ids: found_ids,
    })
}

/// Finds a place of the queue by id: first where the last one found was
/// followed (places removed from the head, or in queue order, are found in
/// O(1)), else a scan; past [`Finder::SCANS`] scans, an index built once.
#[derive(Default)]
struct Finder {
    /// The position after the last place found.
    next: usize,
    scans: usize,
    index: Option<HashMap<u64, usize>>,
}

impl Finder {
    const SCANS: usize = 2;

    /// The position of `id` in `queue` (whose ids are unique).
    fn find(&mut self, queue: &std::collections::VecDeque<Waiter>, id: u64) -> Option<usize> {
        let p = if queue.get(self.next).is_some_and(|w| w.id == id) {
            Some(self.next)
        } else if let Some(ix) = &self.index {
            ix.get(&id).copied()
        } else if self.scans < Self::SCANS {
            self.scans = self.scans.saturating_add(1);
            queue.iter().position(|w| w.id == id)
        } else {
            self.index
                .get_or_insert_with(|| queue.iter().enumerate().map(|(i, w)| (w.id, i)).collect())
                .get(&id)
                .copied()
        };
        if let Some(p) = p {
            self.next = p.saturating_add(1);
        }
        p
    }
}

/// The rules of a kind's size and its holds: a semaphore's limit in
/// 1..=2^32 with its holds' permits within it; a latch's count in
/// 1..=2^32 and no holds; size 0 for the other kinds.
pub(super) fn check_holds(kind: Kind, size: u64, holders: &[Holder]) -> Result<(), DecodeError> {
    match kind {
        Kind::Semaphore => {
            if size == 0 || size > MAX_SIZE {
                return Err(DecodeError("semaphore limit is out of range"));
            }
            let held: u64 = holders.iter().map(|h| u64::from(h.count)).sum();
            if held > size {
                return Err(DecodeError("semaphore holds more permits than its limit"));
            }
        }
        Kind::Latch => {
            if size == 0 || size > MAX_SIZE {
                return Err(DecodeError("latch count is out of range"));
            }
            if !holders.is_empty() {
                return Err(DecodeError("a latch has holders"));
            }
        }
        Kind::Mutex | Kind::Rw | Kind::Fair => {
            if size != 0 {
                return Err(DecodeError("size of a lock that has none"));
            }
        }
    }
    Ok(())
}

/// The rules of one place: a semaphore waiter asks for 1..=limit permits;
/// a latch's places are waiting connections; one permit per place for the
/// other kinds.
pub(super) fn check_waiter(kind: Kind, size: u64, w: &Waiter) -> Result<(), DecodeError> {
    match kind {
        Kind::Semaphore => {
            if w.permits == 0 || u64::from(w.permits) > size {
                return Err(DecodeError("waiter permits are out of range"));
            }
        }
        Kind::Latch => {
            if !w.blocked || w.permits != 1 {
                return Err(DecodeError("a latch waiter is not a waiting connection"));
            }
        }
        Kind::Mutex | Kind::Rw | Kind::Fair => {
            if w.permits != 1 {
                return Err(DecodeError("waiter permits on a lock that has none"));
            }
        }
    }
    Ok(())
}
