//! Deterministic property fuzzing of the semaphore and latch kinds, in the
//! style of `fuzz_locks.rs` (whose generator and checks it shares): arbitrary operation
//! sequences driven the way the command layer drives them — SEMACQUIRE by
//! new requests and by blocked waiters (with PERMITS, wrong LIMITs, too many
//! permits), releases of k permits, renewals, ticks with dead connections
//! and advancing, jumping or stepping-back time, wait ends, force-release,
//! key deletion, LATCHSET / COUNTDOWN / AWAIT, and encode → decode round
//! trips of valid and corrupted payloads — checking after every step:
//!
//! - never more than `limit` permits held, every hold's count ≥ 1;
//! - FIFO: a grant goes to the head of the queue only (a request without a
//!   place only to an empty queue), and exactly when docs/commands.md says (nobody
//!   ahead and the permits fit) — so a head asking for many is never
//!   overtaken by later requests for fewer;
//! - tokens: every new hold's token is above every token issued before; an
//!   owner asking again keeps its token and gains exactly k permits;
//! - every error and every denial changes nothing;
//! - the queue drains in order once the holds are gone;
//! - a latch opens exactly once, at its count's last COUNTDOWN (or by
//!   force-release or deletion), and answers every connection that waited,
//!   in queue order; a latch has no holders and issues no tokens;
//! - the codec round-trips both kinds exactly and never accepts a payload
//!   that breaks the rules above.

use crate::common::*;
use dlock_core::codec;
use dlock_core::*;
use std::collections::HashMap;

const OWNERS: &[&[u8]] = &[b"a", b"b", b"c", b"d", b"e", b"\0\xff{x}"];
const LEASES: &[u64] = &[1, 5, 20, 100, 1000, 30_000, MAX_MS];
const LIMITS: &[u64] = &[1, 2, 3, 5, 8, 1 << 32];

#[derive(Debug, Default)]
struct Stats {
    ops: u64,
    new_grants: u64,
    more_permits: u64,
    handoffs: u64,
    denied: u64,
    errors: u64,
    releases: u64,
    renewals: u64,
    expired: u64,
    dropped: u64,
    wait_ends: u64,
    disconnects: u64,
    force_releases: u64,
    key_deletions: u64,
    round_trips: u64,
    corrupt_payloads: u64,
    corrupt_accepted: u64,
    time_jumps: u64,
    clock_steps_back: u64,
    drains: u64,
    latches_set: u64,
    countdowns: u64,
    latches_opened: u64,
    waiters_answered: u64,
    max_held: u64,
    max_waiters: usize,
}

impl Stats {
    fn faults(&self) -> u64 {
        self.disconnects
            + self.time_jumps
            + self.clock_steps_back
            + self.corrupt_payloads
            + self.key_deletions
    }

    fn add(&mut self, o: &Stats) {
        macro_rules! sum { ($($f:ident),*) => { $(self.$f += o.$f;)* } }
        sum!(
            ops,
            new_grants,
            more_permits,
            handoffs,
            denied,
            errors,
            releases,
            renewals,
            expired,
            dropped,
            wait_ends,
            disconnects,
            force_releases,
            key_deletions,
            round_trips,
            corrupt_payloads,
            corrupt_accepted,
            time_jumps,
            clock_steps_back,
            drains,
            latches_set,
            countdowns,
            latches_opened,
            waiters_answered
        );
        self.max_held = self.max_held.max(o.max_held);
        self.max_waiters = self.max_waiters.max(o.max_waiters);
    }
}

/// A connection blocked on the server: owner and permits (semaphore), or
/// an AWAIT (latch).
#[derive(Clone, Debug)]
struct Conn {
    owner: &'static [u8],
    permits: u32,
    limit: u64,
}

struct World {
    rng: Rng,
    seed: u64,
    latch: bool,
    /// The key: `None` when it does not exist.
    lock: Option<Lock>,
    tokens: Tokens,
    max_issued: u64,
    now: u64,
    conns: HashMap<u64, Conn>,
    next_id: u64,
    /// Latch: whether the latch in the key has opened already (it must
    /// not open twice).
    opened: bool,
    trail: Vec<String>,
    step: usize,
    stats: Stats,
    /// A replica of the key, synced after every operation (a commit).
    replica: Replica,
}

impl World {
    fn new(seed: u64, latch: bool) -> World {
        let mut rng = Rng::new(seed);
        let tokens = Tokens {
            last: rng.below(1000),
        };
        let now = 1_700_000_000_000 + rng.below(1 << 30);
        World {
            rng,
            seed,
            latch,
            lock: None,
            tokens,
            max_issued: tokens.last,
            now,
            conns: HashMap::new(),
            next_id: 1 << 40,
            opened: false,
            trail: Vec::new(),
            step: 0,
            stats: Stats::default(),
            replica: Default::default(),
        }
    }

    fn note(&mut self, s: String) {
        if self.trail.len() >= 40 {
            self.trail.remove(0);
        }
        self.trail.push(s);
    }

    fn fail(&self, what: &str) -> ! {
        panic!(
            "fuzz_sem seed {} step {}: {what}\nlock: {:#?}\nlast operations:\n  {}",
            self.seed,
            self.step,
            self.lock,
            self.trail.join("\n  ")
        );
    }

    fn check(&self, ok: bool, what: impl FnOnce() -> String) {
        if !ok {
            self.fail(&what());
        }
    }

    fn new_id(&mut self) -> u64 {
        self.next_id += 1 + self.rng.below(3);
        self.next_id
    }

    fn now_us(&mut self) -> u64 {
        self.now.saturating_mul(1000) + self.rng.below(1000)
    }

    fn owner(&mut self) -> &'static [u8] {
        if let Some(l) = &self.lock {
            if self.rng.one_in(2) && !l.holders().is_empty() {
                let i = self.rng.below(l.holders().len() as u64) as usize;
                if let Some(o) = OWNERS.iter().find(|o| **o == &*l.holders()[i].owner) {
                    return o;
                }
            }
        }
        self.rng.pick(OWNERS)
    }

    /// The command layer deletes an empty lock's key.
    fn settle(&mut self) {
        if self.lock.as_ref().is_some_and(Lock::is_empty) {
            self.lock = None;
            self.opened = false;
        }
    }

    fn check_invariants(&self) {
        let Some(l) = &self.lock else {
            return;
        };
        check_lock(l).unwrap_or_else(|e| self.fail(&e));
        self.check(l.last_token() <= self.tokens.last, || {
            "the lock's last token is above the counter".into()
        });
        let head_fits = l.kind() == Kind::Semaphore
            && l.waiters()
                .front()
                .is_some_and(|w| l.held_permits() + u64::from(w.permits) <= l.limit().unwrap_or(0));
        self.check(l.head_may_be_granted() == head_fits, || {
            "head_may_be_granted disagrees with the head and the free permits".into()
        });
        if self.latch {
            self.check(l.kind() == Kind::Latch && l.last_token() == 0, || {
                "a latch issued a token".into()
            });
            for w in l.waiters() {
                self.check(self.conns.contains_key(&w.id), || {
                    format!("latch place {} names no waiting connection", w.id)
                });
            }
        }
    }

    // ---- semaphore -------------------------------------------------

    fn sem_acquire(&mut self, waiter: Option<u64>) {
        let (owner, k, limit) = match waiter {
            Some(id) => {
                let c = self.conns[&id].clone();
                (c.owner, c.permits, c.limit)
            }
            None => {
                let owner = self.owner();
                let cur = self
                    .lock
                    .as_ref()
                    .and_then(Lock::limit)
                    .unwrap_or_else(|| self.rng.pick(LIMITS));
                let limit = if self.rng.one_in(15) {
                    self.rng.pick(LIMITS)
                } else {
                    cur
                };
                let k = if self.rng.one_in(20) {
                    (limit.min(u64::from(u32::MAX)) as u32).saturating_add(1)
                } else {
                    1 + self.rng.below(limit.min(4)) as u32
                };
                (owner, k, limit)
            }
        };
        if self.rng.one_in(2) {
            self.op_tick(false);
        }
        let existed = self.lock.is_some();
        let mut l = self.lock.clone().unwrap_or_else(|| Lock::semaphore(limit));
        let before = l.clone();
        let tokens_before = self.tokens;
        let pos = waiter.and_then(|id| l.waiters().iter().position(|w| w.id == id));
        let own = l.holders().iter().find(|h| &*h.owner == owner).cloned();
        let lease = self.rng.pick(LEASES);
        let now = self.now;
        let now_us = self.now_us();
        let req = Request {
            owner,
            mode: Mode::Permit,
            lease_ms: lease,
            waiter,
        };
        // The shortcut of the command layer must agree with the attempt.
        let sure = waiter.is_some_and(|id| l.surely_denied(id))
            && l.next_deadline().is_none_or(|d| d > now);
        let out = l.acquire_permits(&req, k, limit, now, &mut self.tokens, now_us);
        self.note(format!(
            "semacquire {:?} k={k} limit={limit} waiter={waiter:?} pos={pos:?} -> {out:?}",
            String::from_utf8_lossy(owner)
        ));
        if sure {
            self.check(out == Ok(Grant::Denied), || {
                "surely_denied said denied, the attempt did not".into()
            });
        }
        match out {
            Err(e) => {
                self.stats.errors += 1;
                self.check(l == before && self.tokens == tokens_before, || {
                    format!("{e:?} changed the state")
                });
                let legit = match e {
                    LockError::LimitMismatch { limit: found } => {
                        found != limit && Some(found) == before.limit()
                    }
                    LockError::PermitsOverLimit { .. } => u64::from(k) > limit,
                    LockError::CountOverflow => own
                        .as_ref()
                        .is_some_and(|h| h.count.checked_add(k).is_none()),
                    _ => false,
                };
                self.check(legit, || format!("{e:?} for no reason"));
                if let Some(id) = waiter {
                    // The command layer answers the error and drops the place.
                    self.conns.remove(&id);
                    if let Some(cur) = self.lock.as_mut() {
                        cur.remove_waiter(id);
                    }
                }
            }
            Ok(Grant::Denied) => {
                self.stats.denied += 1;
                self.check(l == before && self.tokens == tokens_before, || {
                    "a denial changed the state".into()
                });
                self.check(!spec_grant(&before, pos, k), || {
                    "denied although docs/commands.md grants it".into()
                });
                match waiter {
                    Some(id) if pos.is_none() => {
                        let deadline = self.now + 1 + self.rng.below(200);
                        let mut cur = self.lock.take().unwrap_or_else(|| Lock::semaphore(limit));
                        cur.enqueue_permits(owner, k, id, deadline);
                        self.lock = Some(cur);
                    }
                    Some(_) => {}
                    None if existed && self.rng.one_in(2) => {
                        let id = self.new_id();
                        let deadline = self.now + 1 + self.rng.below(200);
                        let mut cur = l;
                        let made = cur.enqueue_permits(owner, k, id, deadline);
                        self.check(
                            made && cur
                                .waiters()
                                .back()
                                .is_some_and(|w| w.id == id && w.permits == k),
                            || "enqueue_permits did not add the place at the back".into(),
                        );
                        self.conns.insert(
                            id,
                            Conn {
                                owner,
                                permits: k,
                                limit,
                            },
                        );
                        self.lock = Some(cur);
                    }
                    None => {}
                }
            }
            Ok(Grant::Granted { token, reentrant }) => {
                self.check(spec_grant(&before, pos, k), || {
                    format!(
                        "granted although docs/commands.md forbids it (pos {pos:?} of {}, {} held)",
                        before.waiters().len(),
                        before.held_permits()
                    )
                });
                self.check(l.held_permits() <= limit, || "over the limit".into());
                let after = l.holders().iter().find(|h| &*h.owner == owner).cloned();
                let after = after.unwrap_or_else(|| self.fail("the grant made no hold"));
                self.check(after.expires_at == now.saturating_add(lease), || {
                    "the lease did not restart".into()
                });
                match own {
                    Some(h) => {
                        self.stats.more_permits += 1;
                        self.check(
                            reentrant
                                && token == h.token
                                && after.count == h.count + k
                                && self.tokens == tokens_before,
                            || "asking again must add k permits and keep the token".into(),
                        );
                    }
                    None => {
                        self.stats.new_grants += 1;
                        self.check(
                            !reentrant
                                && token > self.max_issued
                                && token > before.last_token()
                                && token >= now_us
                                && after.count == k
                                && after.token == token,
                            || format!("new hold with token {token} after {}", self.max_issued),
                        );
                        self.max_issued = token;
                    }
                }
                if let Some(id) = waiter {
                    if pos.is_some() {
                        self.stats.handoffs += 1;
                        self.check(pos == Some(0), || {
                            "a waiter not at the head was granted".into()
                        });
                    }
                    self.check(!l.has_waiter(id), || "the grant kept its place".into());
                    self.conns.remove(&id);
                } else {
                    self.check(l.waiters() == before.waiters(), || {
                        "a grant without a place changed the queue".into()
                    });
                }
                self.lock = Some(l);
            }
        }
    }

    fn op_waiter_ready(&mut self) {
        let mut ids: Vec<u64> = self.conns.keys().copied().collect();
        if ids.is_empty() {
            return self.sem_acquire(None);
        }
        ids.sort_unstable();
        let head = self
            .lock
            .as_ref()
            .and_then(|l| l.waiters().front())
            .map(|w| w.id);
        let id = match head {
            Some(h) if self.rng.one_in(2) && self.conns.contains_key(&h) => h,
            _ => self.rng.pick(&ids),
        };
        self.sem_acquire(Some(id));
    }

    fn op_release(&mut self) {
        let Some(mut l) = self.lock.clone() else {
            return;
        };
        let owner = self.owner();
        let held = l
            .holders()
            .iter()
            .find(|h| &*h.owner == owner)
            .map_or(0, |h| h.count);
        let k = if self.rng.one_in(3) {
            None
        } else {
            Some(1 + self.rng.below(u64::from(held) + 1) as u32)
        };
        let before = l.clone();
        let out = match k {
            Some(k) => l.release_permits(owner, k),
            None => l.release(owner, None),
        };
        let k = k.unwrap_or(1);
        self.note(format!(
            "release {:?} k={k} held={held} -> {out:?}",
            String::from_utf8_lossy(owner)
        ));
        match out {
            Ok(r) => {
                self.stats.releases += 1;
                self.check(held >= k && r.freed && r.gone == (held == k), || {
                    "release outcome".into()
                });
                self.check(
                    l.held_permits() + u64::from(k) == before.held_permits(),
                    || "release did not give back exactly k permits".into(),
                );
                self.lock = Some(l);
            }
            Err(e) => {
                self.stats.errors += 1;
                self.check(l == before, || "a failed release changed the lock".into());
                let want = if held == 0 {
                    LockError::NotHeld
                } else {
                    LockError::NotEnoughPermits { held }
                };
                self.check(e == want && held < k, || {
                    format!("{e:?}, expected {want:?}")
                });
            }
        }
    }

    fn op_renew(&mut self) {
        let owner = self.owner();
        let lease = self.rng.pick(LEASES);
        let now = self.now;
        if let Some(l) = self.lock.as_mut() {
            let holds = l.holders().iter().any(|h| &*h.owner == owner);
            let r = l.renew(owner, lease, now);
            self.stats.renewals += u64::from(r);
            if r != holds {
                self.fail("renew result");
            }
        }
    }

    /// Drain: with every hold gone, the queue is granted in order.
    fn op_drain_check(&mut self) {
        let Some(mut l) = self.lock.clone() else {
            return;
        };
        if l.kind() != Kind::Semaphore {
            return;
        }
        self.stats.drains += 1;
        let mut t = self.tokens;
        l.force_release();
        let limit = l.limit().unwrap_or(0);
        while let Some(w) = l.waiters().front().cloned() {
            let req = Request {
                owner: &w.owner,
                mode: Mode::Permit,
                lease_ms: 1000,
                waiter: Some(w.id),
            };
            match l.acquire_permits(&req, w.permits, limit, self.now, &mut t, 0) {
                Ok(Grant::Granted { .. }) => {}
                Ok(Grant::Denied) => {
                    self.check(!l.holders().is_empty(), || {
                        "the head is denied on a semaphore nobody holds".into()
                    });
                    l.force_release();
                }
                Err(LockError::CountOverflow) => {
                    l.remove_waiter(w.id);
                }
                Err(e) => self.fail(&format!("drain failed: {e:?}")),
            }
        }
    }

    // ---- latch -------------------------------------------------------

    fn op_latchset(&mut self) {
        let count = 1 + self.rng.below(4);
        match &self.lock {
            Some(l) => {
                // LATCHSET on an existing latch: 0, nothing changes.
                self.check(l.kind() == Kind::Latch, || "not a latch".into());
            }
            None => {
                self.stats.latches_set += 1;
                self.lock = Some(Lock::latch(count));
                self.opened = false;
                self.note(format!("latchset {count}"));
            }
        }
    }

    fn op_await(&mut self) {
        let Some(l) = self.lock.as_mut() else {
            // No latch: AWAIT answers 1 at once.
            return;
        };
        let id = {
            self.next_id += 1;
            self.next_id
        };
        let deadline = self.now + 1 + self.rng.below(300);
        let made = l.enqueue_await(id.to_string().as_bytes(), id, deadline);
        if !made {
            self.fail("enqueue_await made no place");
        }
        self.conns.insert(
            id,
            Conn {
                owner: b"",
                permits: 1,
                limit: 0,
            },
        );
        self.note(format!("await {id}"));
    }

    /// Answers the ids of an opened latch: they must be exactly the places
    /// it had, in queue order, and each a waiting connection.
    fn answered(&mut self, before: &Lock, ids: &[u64]) {
        let places: Vec<u64> = before.waiters().iter().map(|w| w.id).collect();
        self.check(ids == places.as_slice(), || {
            format!("opened latch answered {ids:?}, its places were {places:?}")
        });
        self.check(!self.opened, || "a latch opened twice".into());
        self.opened = true;
        self.stats.latches_opened += 1;
        for id in ids {
            let waited = self.conns.remove(id).is_some();
            self.check(waited, || format!("answered {id}, which does not wait"));
            self.stats.waiters_answered += 1;
        }
    }

    fn op_countdown(&mut self) {
        let Some(l) = self.lock.as_mut() else {
            return;
        };
        let before = l.clone();
        let out = l.countdown();
        self.stats.countdowns += 1;
        let was = before.latch_count().unwrap_or(0);
        self.note(format!("countdown {was} -> {out:?}"));
        match out {
            Ok(Countdown::Counted(n)) => {
                self.check(n + 1 == was && n > 0, || {
                    "countdown did not lower by one".into()
                });
            }
            Ok(Countdown::Opened(ids)) => {
                self.check(was == 1, || "opened before the count reached 0".into());
                let empty = self.lock.as_ref().is_some_and(Lock::is_empty);
                self.check(empty, || "an opened latch is not empty".into());
                self.answered(&before, &ids);
            }
            Err(e) => self.fail(&format!("countdown failed: {e:?}")),
        }
    }

    fn op_force_open(&mut self) {
        let Some(l) = self.lock.as_mut() else {
            return;
        };
        let before = l.clone();
        let ids = l.open();
        self.stats.force_releases += 1;
        self.answered(&before, &ids);
    }

    // ---- both ---------------------------------------------------------

    fn op_tick(&mut self, faults: bool) {
        if faults {
            match self.rng.below(10) {
                0 => {
                    self.stats.time_jumps += 1;
                    self.now += self.rng.pick(&[1000, 40_000, 70_000]);
                }
                1 => {
                    self.stats.clock_steps_back += 1;
                    self.now -= self.rng.below(50);
                }
                _ => self.now += self.rng.below(30),
            }
        }
        let dead: Vec<u64> = self
            .conns
            .keys()
            .copied()
            .filter(|_| faults && self.rng.one_in(8))
            .collect();
        let Some(l) = self.lock.as_mut() else {
            return;
        };
        let before = l.clone();
        let t = l.tick(self.now, |id| !dead.contains(&id));
        let expired = before.holders().len() - l.holders().len();
        if t.expired != expired || t.freed != (l.kind() == Kind::Semaphore && expired > 0) {
            self.fail("tick outcome");
        }
        if l.holders().iter().any(|h| h.expires_at <= self.now) {
            self.fail("tick kept an ended lease");
        }
        self.stats.expired += t.expired as u64;
        self.stats.dropped += t.dropped as u64;
        for id in dead {
            if before.has_waiter(id) {
                self.stats.disconnects += 1;
                self.conns.remove(&id);
            }
        }
    }

    fn op_wait_ended(&mut self) {
        let ids: Vec<u64> = self.conns.keys().copied().collect();
        if ids.is_empty() {
            return;
        }
        let id = self.rng.pick(&ids);
        self.stats.wait_ends += 1;
        let now = self.now;
        if let Some(l) = self.lock.as_mut() {
            let had = l.has_waiter(id);
            if l.wait_ended(id, now + 5000) != had || l.has_waiter(id) {
                self.fail("a wait end kept its place");
            }
        }
        self.conns.remove(&id);
    }

    fn op_delete_key(&mut self) {
        let Some(l) = self.lock.take() else {
            return;
        };
        self.stats.key_deletions += 1;
        self.note("key deleted".into());
        if l.kind() == Kind::Latch {
            // A latch that leaves its key opens for those who waited.
            let mut l2 = l.clone();
            let ids = l2.open();
            self.answered(&l, &ids);
        }
        // Semaphore waiters keep waiting and find a new key when they ask.
        self.opened = false;
    }

    fn op_round_trip(&mut self) {
        let Some(l) = self.lock.clone() else {
            return;
        };
        self.stats.round_trips += 1;
        let bytes = codec::encode(&l, self.tokens.last);
        match codec::decode(&bytes) {
            Ok((d, floor)) => self.check(d == l && floor == self.tokens.last, || {
                "round trip changed the lock".into()
            }),
            Err(e) if l.is_empty() => {
                let _ = e;
            }
            Err(e) => self.fail(&format!("a valid lock does not decode: {e:?}")),
        }
        let mut bad = bytes.clone();
        if bad.is_empty() {
            return;
        }
        let i = self.rng.below(bad.len() as u64) as usize;
        match self.rng.below(3) {
            0 => bad[i] ^= 1 << self.rng.below(8),
            1 => bad[i] = self.rng.next() as u8,
            _ => bad.truncate(i),
        }
        if bad == bytes {
            return;
        }
        self.stats.corrupt_payloads += 1;
        if let Ok((d, floor)) = codec::decode(&bad) {
            self.stats.corrupt_accepted += 1;
            check_lock(&d).unwrap_or_else(|e| self.fail(&format!("corrupt payload accepted: {e}")));
            let again = codec::decode(&codec::encode(&d, floor));
            self.check(again == Ok((d, floor)), || "no round trip".into());
        }
    }

    fn run(&mut self, ops: usize) {
        for step in 0..ops {
            self.step = step;
            let r = self.rng.below(100);
            if self.latch {
                match r {
                    0..=19 => self.op_latchset(),
                    20..=44 => self.op_await(),
                    45..=69 => self.op_countdown(),
                    70..=79 => self.op_tick(true),
                    80..=86 => self.op_wait_ended(),
                    87..=89 => self.op_force_open(),
                    90..=92 => self.op_delete_key(),
                    _ => self.op_round_trip(),
                }
            } else {
                match r {
                    0..=29 => self.sem_acquire(None),
                    30..=49 => self.op_waiter_ready(),
                    50..=64 => self.op_release(),
                    65..=69 => self.op_renew(),
                    70..=79 => self.op_tick(true),
                    80..=83 => self.op_wait_ended(),
                    84..=85 => {
                        if let Some(l) = self.lock.as_mut() {
                            self.stats.force_releases += u64::from(l.force_release());
                        }
                    }
                    86 => self.op_delete_key(),
                    87..=93 => self.op_round_trip(),
                    _ => self.op_drain_check(),
                }
            }
            self.settle();
            self.stats.ops += 1;
            self.check_invariants();
            // Every caller of the grant rule agrees with `decide`.
            if let Some(l) = &self.lock {
                if let Err(e) = check_agreement(l, &self.tokens) {
                    self.fail(&e);
                }
            }
            if let Err(e) = self.replica.sync(self.lock.as_mut(), self.tokens.last) {
                self.fail(&e);
            }
            if let Some(l) = &self.lock {
                self.stats.max_held = self.stats.max_held.max(l.held_permits());
                self.stats.max_waiters = self.stats.max_waiters.max(l.waiters().len());
            }
        }
    }
}

fn fuzz(seed: u64, sequences: u64, ops: usize, latch: bool) -> Stats {
    let mut total = Stats::default();
    for s in 0..sequences {
        let mut w = World::new(seed.wrapping_mul(1_000_003).wrapping_add(s), latch);
        w.run(ops);
        total.add(&w.stats);
    }
    total
}

#[test]
fn fuzz_semaphore() {
    let st = fuzz(0x5E3A_0001, 2000, 100, false);
    assert_eq!(st.ops, 200_000);
    eprintln!(
        "[fuzz semaphore] {} operations; {} faults injected; 0 over-limit; {st:?}",
        st.ops,
        st.faults()
    );
    assert!(st.new_grants > 5000 && st.more_permits > 500, "{st:?}");
    assert!(
        st.handoffs > 500 && st.denied > 5000 && st.errors > 1000,
        "{st:?}"
    );
    assert!(
        st.expired > 500 && st.dropped > 100 && st.wait_ends > 500,
        "{st:?}"
    );
    assert!(st.corrupt_accepted > 100 && st.drains > 1000, "{st:?}");
    assert!(st.max_held >= 5 && st.max_waiters >= 4, "{st:?}");
}

#[test]
fn fuzz_latch() {
    let st = fuzz(0x1A7C_0002, 2000, 100, true);
    assert_eq!(st.ops, 200_000);
    eprintln!(
        "[fuzz latch] {} operations; {} faults injected; {st:?}",
        st.ops,
        st.faults()
    );
    assert!(
        st.latches_opened > 1000 && st.waiters_answered > 1000,
        "{st:?}"
    );
    assert!(st.dropped > 100 && st.wait_ends > 500, "{st:?}");
}

mod prop {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

        #[test]
        fn semaphore_sequences_keep_every_invariant(seed in any::<u64>(), ops in 1usize..300) {
            World::new(seed, false).run(ops);
        }

        #[test]
        fn latch_sequences_keep_every_invariant(seed in any::<u64>(), ops in 1usize..300) {
            World::new(seed, true).run(ops);
        }
    }
}
