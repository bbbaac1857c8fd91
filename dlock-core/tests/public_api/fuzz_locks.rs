//! Deterministic property-based fuzzing of the lock state machine and its
//! codec, with no crates: a xorshift generator drives arbitrary operation
//! sequences on every kind of lock the way the command layer drives them —
//! acquires by new requests and by blocked waiters, enqueue (blocked or
//! queued), wait ends, disconnects, releases with and without a mode,
//! renewals, ticks with random liveness and advancing, jumping or stepping
//! back time, force-release, deletion of the key, and encode → decode round
//! trips (also of corrupted payloads, whose survivors are adopted) — and
//! checks after every step:
//!
//! - mutual exclusion: never two holders of a mutex or fair lock, and no
//!   WRITE hold coexisting with another owner's hold;
//! - tokens: every new grant's token is greater than every token issued
//!   before (across deleted keys too) and at least the clock in µs; a
//!   reentrant grant returns the hold's own token;
//! - counts are never zero;
//! - every error and every denial changes nothing (lock and token counter);
//! - waiters are served in order: a new hold is granted exactly when docs/commands.md
//!   says (mutex/fair: free and the request is the head of the queue or
//!   there is no queue; READ: no foreign WRITE hold and no writer ahead,
//!   unless the owner already holds; WRITE: no foreign hold, and the owner
//!   is the only reader or nobody waits ahead);
//! - no waiter is stuck: once every holder is gone, the queue drains in
//!   order;
//! - the codec round-trips exactly and never accepts a payload that breaks
//!   the invariants above.
//!
//! `fuzz_state_machine` runs 200 000 operations in well under a second in
//! release builds (a few seconds in debug builds).

use crate::common::*;
use dlock_core::codec;
use dlock_core::*;
use std::collections::HashMap;

/// Few owners, so that reentry, upgrades and contention are frequent.
const OWNERS: &[&[u8]] = &[b"a", b"b", b"c", b"d", b"\0\xff{x}"];
const LEASES: &[u64] = &[1, 5, 20, 100, 1000, 30_000, MAX_MS];

/// What one run saw; the figures of the closing report.
#[derive(Debug, Default)]
struct Stats {
    ops: u64,
    sequences: u64,
    new_grants: u64,
    reentrant_grants: u64,
    handoffs: u64,
    denied: u64,
    errors: u64,
    releases: u64,
    renewals: u64,
    ticks: u64,
    expired: u64,
    dropped: u64,
    wait_ends: u64,
    disconnects: u64,
    force_releases: u64,
    key_deletions: u64,
    round_trips: u64,
    corrupt_payloads: u64,
    corrupt_accepted: u64,
    corrupt_adopted: u64,
    time_jumps: u64,
    clock_steps_back: u64,
    count_overflow_injections: u64,
    /// Waiters the command layer's shortcut declared denied, checked.
    shortcut_checks: u64,
    drains: u64,
    max_holders: usize,
    max_waiters: usize,
    /// Commits replicated as a delta / as the whole state.
    deltas: u64,
    fulls: u64,
}

impl Stats {
    /// Faults injected: dead connections, time jumps and steps back,
    /// corrupted payloads, counts pushed to the limit, key deletions.
    fn faults(&self) -> u64 {
        self.disconnects
            + self.time_jumps
            + self.clock_steps_back
            + self.corrupt_payloads
            + self.count_overflow_injections
            + self.key_deletions
    }
}

/// A connection blocked on the server: its waiter id, owner, mode and the
/// kind of command it sent (on_ready answers WRONGKIND for another kind).
#[derive(Clone, Debug)]
struct Conn {
    owner: &'static [u8],
    mode: Mode,
    kind: Kind,
}

/// One fuzzed world: one lock key, the server-wide token counter, the clock
/// and the blocked connections.
struct World {
    rng: Rng,
    seed: u64,
    lock: Lock,
    tokens: Tokens,
    /// Greatest token ever issued in this world (0: none yet).
    max_issued: u64,
    /// Tokens run out in this world (the counter started near 2^63).
    exhaustible: bool,
    now: u64,
    fair_timeout: u64,
    conns: HashMap<u64, Conn>,
    next_id: u64,
    /// The last operations, for the failure report.
    trail: Vec<String>,
    step: usize,
    stats: Stats,
    /// A replica of the key, synced after every operation (a commit).
    replica: Replica,
}

impl World {
    fn new(seed: u64) -> World {
        let mut rng = Rng::new(seed);
        let kind = rng.pick(&[Kind::Mutex, Kind::Rw, Kind::Fair]);
        let exhaustible = rng.one_in(40);
        let tokens = Tokens {
            last: if exhaustible {
                MAX_TOKEN - rng.below(6)
            } else {
                rng.below(1000)
            },
        };
        let now = 1_700_000_000_000 + rng.below(1 << 30);
        let fair_timeout = rng.pick(&[1, 30, 5000]);
        World {
            rng,
            seed,
            lock: Lock::new(kind),
            tokens,
            max_issued: tokens.last,
            exhaustible,
            now,
            fair_timeout,
            conns: HashMap::new(),
            next_id: 1 << 40,
            trail: Vec::new(),
            step: 0,
            stats: Stats::default(),
            replica: Default::default(),
        }
    }

    fn now_us(&mut self) -> u64 {
        self.now.saturating_mul(1000) + self.rng.below(1000)
    }

    fn note(&mut self, s: String) {
        if self.trail.len() >= 40 {
            self.trail.remove(0);
        }
        self.trail.push(s);
    }

    fn fail(&self, what: &str) -> ! {
        panic!(
            "fuzz seed {} step {}: {what}\nlock: {:#?}\ntokens: {:?} now {}\nlast operations:\n  {}",
            self.seed,
            self.step,
            self.lock,
            self.tokens,
            self.now,
            self.trail.join("\n  ")
        );
    }

    fn check(&self, ok: bool, what: impl FnOnce() -> String) {
        if !ok {
            self.fail(&what());
        }
    }

    fn owner(&mut self) -> &'static [u8] {
        // Mostly owners that hold or wait, so operations do something.
        if self.rng.one_in(2) && !self.lock.holders().is_empty() {
            let i = self.rng.below(self.lock.holders().len() as u64) as usize;
            if let Some(o) = OWNERS
                .iter()
                .find(|o| **o == &*self.lock.holders()[i].owner)
            {
                return o;
            }
        }
        self.rng.pick(OWNERS)
    }

    fn mode(&mut self) -> Mode {
        let kind = self.lock.kind();
        if self.rng.one_in(25) {
            return self.rng.pick(&[Mode::Exclusive, Mode::Read, Mode::Write]);
        }
        match kind {
            Kind::Rw => self.rng.pick(&[Mode::Read, Mode::Write]),
            _ => Mode::Exclusive,
        }
    }

    fn lease(&mut self) -> u64 {
        self.rng.pick(LEASES)
    }

    // ---------------------------------------------------------------
    // Invariants
    // ---------------------------------------------------------------

    /// Structural invariants that must hold after every operation.
    fn check_invariants(&self) {
        check_lock(&self.lock).unwrap_or_else(|e| self.fail(&e));
        self.check(self.lock.last_token() <= self.tokens.last, || {
            "the lock's last token is above the server's counter".into()
        });
        for h in self.lock.holders() {
            self.check(h.token <= self.max_issued, || {
                "a holder's token was never issued".into()
            });
        }
        // (A queued owner should have one place per mode, but two blocked
        // connections of one owner whose waits end both become queued
        // places: see `fair_owner_keeps_one_place_when_two_waits_end`.)
    }

    // ---------------------------------------------------------------
    // Operations
    // ---------------------------------------------------------------

    /// The command layer's acquire: optionally tick first, then acquire; on
    /// denial wait on the server (blocked place), queue (fair lock) or
    /// leave no trace.
    fn op_acquire(&mut self) {
        if self.rng.one_in(2) {
            self.op_tick(false);
        }
        let owner = self.owner();
        let mode = self.mode();
        let lease = self.lease();
        let req = Request {
            owner,
            mode,
            lease_ms: lease,
            waiter: None,
        };
        let outcome = self.acquire_checked(&req);
        if outcome == Some(Grant::Denied) && self.lock.kind().allows(mode) {
            let wait = self.rng.one_in(3);
            if wait {
                let id = self.new_id();
                let deadline = self.now + 1 + self.rng.below(200);
                self.enqueue_checked(owner, mode, id, true, deadline);
                let kind = self.lock.kind();
                self.conns.insert(id, Conn { owner, mode, kind });
            } else if self.lock.kind() == Kind::Fair {
                let id = self.new_id();
                let deadline = self.now + self.fair_timeout;
                self.enqueue_checked(owner, mode, id, false, deadline);
            }
        }
    }

    /// Redis calls on_ready for a blocked connection: try to grant it by
    /// its waiter id; re-queue it when the lock was made anew.
    fn op_waiter_ready(&mut self) {
        let mut ids: Vec<u64> = self.conns.keys().copied().collect();
        if ids.is_empty() {
            return self.op_acquire();
        }
        ids.sort_unstable();
        // Prefer the head of the queue now and then, so handoffs happen.
        let head = self.lock.waiters().iter().find(|w| w.blocked).map(|w| w.id);
        let id = match head {
            Some(h) if self.rng.one_in(2) && self.conns.contains_key(&h) => h,
            _ => self.rng.pick(&ids),
        };
        let c = self.conns[&id].clone();
        if c.kind != self.lock.kind() {
            // on_ready answers WRONGKIND and the connection is done.
            self.note(format!(
                "waiter {id} meets a {:?} lock: WRONGKIND",
                self.lock.kind()
            ));
            self.conns.remove(&id);
            return;
        }
        if self.rng.one_in(2) {
            self.op_tick(false);
        }
        let had_place = self.lock.has_waiter(id);
        let req = Request {
            owner: c.owner,
            mode: c.mode,
            lease_ms: self.lease(),
            waiter: Some(id),
        };
        // The command layer's shortcut: when it says "denied" and nothing is
        // due, the full attempt must say so too and change nothing.
        let nothing_due = self.lock.next_deadline().is_none_or(|d| d > self.now);
        let shortcut = nothing_due && self.lock.surely_denied(id);
        // The handoff hint: an exclusive holder of another owner denies it.
        let excluded = nothing_due && self.lock.exclusive_owner().is_some_and(|o| o != c.owner);
        let before = self.lock.clone();
        let outcome = self.acquire_checked(&req);
        if shortcut || excluded {
            self.stats.shortcut_checks += 1;
            self.check(
                outcome == Some(Grant::Denied) && self.lock == before,
                || {
                    let place = before.waiters().iter().find(|w| w.id == id).map(|w| (w.owner.to_vec(), w.mode));
                    format!("waiter {id} (asking as {:?} {:?}; its place: {place:?}) declared denied (shortcut {shortcut}, excluded {excluded}) but the attempt gave {outcome:?}", c.owner, c.mode)
                },
            );
        }
        match outcome {
            Some(Grant::Granted { .. }) => {
                if had_place {
                    self.stats.handoffs += 1;
                }
                self.conns.remove(&id);
            }
            Some(Grant::Denied) => {
                if !had_place {
                    let deadline = self.now + 1 + self.rng.below(200);
                    self.enqueue_checked(c.owner, c.mode, id, true, deadline);
                }
            }
            None => {
                // An error reply ends the wait and leaves no place behind.
                let before = self.lock.clone();
                let removed = self.lock.remove_waiter(id);
                self.check(removed == before.has_waiter(id), || {
                    "remove_waiter result".into()
                });
                self.conns.remove(&id);
            }
        }
    }

    /// Calls `acquire` and checks it against docs/commands.md. `None` on an error.
    fn acquire_checked(&mut self, req: &Request<'static>) -> Option<Grant> {
        let before = self.lock.clone();
        let tokens_before = self.tokens;
        let now = self.now;
        let now_us = self.now_us();
        let kind = before.kind();
        let pos = match req.waiter {
            Some(id) => before.waiters().iter().position(|w| w.id == id),
            None => before
                .waiters()
                .iter()
                .position(|w| &*w.owner == req.owner && w.mode == req.mode),
        };
        let own = before
            .holders()
            .iter()
            .find(|h| &*h.owner == req.owner && h.mode == req.mode)
            .cloned();
        let should_grant = kind.allows(req.mode) && spec_grantable(&before, req, pos);
        let out = self.lock.acquire(req, now, &mut self.tokens, now_us);
        self.note(format!(
            "acquire owner={:?} mode={:?} lease={} waiter={:?} pos={pos:?} now={now} -> {out:?}",
            show(req.owner),
            req.mode,
            req.lease_ms,
            req.waiter
        ));
        match out {
            Err(e) => {
                self.stats.errors += 1;
                self.check(self.lock == before && self.tokens == tokens_before, || {
                    format!("acquire failed with {e:?} but changed the state")
                });
                let legit = match e {
                    LockError::ModeNotApplicable => !kind.allows(req.mode),
                    LockError::CountOverflow => own.as_ref().is_some_and(|h| h.count == u32::MAX),
                    LockError::TokensExhausted => self.exhaustible,
                    LockError::UpgradeDeadlock => {
                        kind == Kind::Rw
                            && req.mode == Mode::Write
                            && holds(&before, req.owner, Mode::Read)
                            && !holds(&before, req.owner, Mode::Write)
                            && before.waiters().iter().any(|w| {
                                w.mode == Mode::Write
                                    && &*w.owner != req.owner
                                    && holds(&before, &w.owner, Mode::Read)
                            })
                    }
                    _ => false,
                };
                self.check(legit, || format!("acquire failed with {e:?} for no reason"));
                None
            }
            Ok(Grant::Denied) => {
                self.stats.denied += 1;
                self.check(self.lock == before && self.tokens == tokens_before, || {
                    "a denied acquire changed the state".into()
                });
                self.check(own.is_none(), || "a reentrant acquire was denied".into());
                self.check(!should_grant, || {
                    "denied although docs/commands.md grants it (a waiter would be stuck)".into()
                });
                Some(Grant::Denied)
            }
            Ok(Grant::Granted { token, reentrant }) => {
                if reentrant {
                    self.stats.reentrant_grants += 1;
                    let Some(h) = own else {
                        self.fail("a reentrant grant to an owner without that hold");
                    };
                    self.check(token == h.token, || {
                        "a reentrant grant returned another token".into()
                    });
                    self.check(self.tokens == tokens_before, || {
                        "a reentrant grant issued a token".into()
                    });
                    let after = self
                        .lock
                        .holders()
                        .iter()
                        .find(|x| &*x.owner == req.owner && x.mode == req.mode);
                    self.check(
                        after.is_some_and(|x| {
                            x.count == h.count + 1
                                && x.expires_at == now.saturating_add(req.lease_ms)
                        }),
                        || "a reentrant grant did not add one and restart the lease".into(),
                    );
                } else {
                    self.stats.new_grants += 1;
                    self.check(own.is_none(), || {
                        "a new hold granted next to the same hold".into()
                    });
                    self.check(should_grant, || {
                        format!(
                            "granted although docs/commands.md forbids it (pos {pos:?} in a queue of {})",
                            before.waiters().len()
                        )
                    });
                    self.check(token > self.max_issued, || {
                        format!(
                            "token {token} not above every earlier token ({})",
                            self.max_issued
                        )
                    });
                    self.check(token > before.last_token(), || {
                        "token not above the lock's last token".into()
                    });
                    self.check(token >= now_us, || "token below the clock in µs".into());
                    self.check(self.lock.last_token() == token, || {
                        "the lock's last token is not the new token".into()
                    });
                    self.check(
                        self.lock.holders().iter().any(|h| {
                            &*h.owner == req.owner
                                && h.mode == req.mode
                                && h.count == 1
                                && h.token == token
                        }),
                        || "the new hold is missing".into(),
                    );
                    self.max_issued = token;
                }
                // The place of the request leaves the queue; a place where
                // another connection of the owner waits on the server stays
                // (that wait is served next, as a re-entry).
                let own = pos.filter(|&p| req.waiter.is_some() || !before.waiters()[p].blocked);
                if let Some(p) = own {
                    let id = before.waiters()[p].id;
                    self.check(!self.lock.has_waiter(id), || {
                        "the granted request kept its place in the queue".into()
                    });
                    self.check(
                        self.lock.waiters().len() + 1 == before.waiters().len(),
                        || "a grant removed more than its own place".into(),
                    );
                } else {
                    self.check(self.lock.waiters() == before.waiters(), || {
                        "a grant without a place changed the queue".into()
                    });
                }
                Some(Grant::Granted { token, reentrant })
            }
        }
    }

    fn enqueue_checked(
        &mut self,
        owner: &'static [u8],
        mode: Mode,
        id: u64,
        blocked: bool,
        at: u64,
    ) {
        let before = self.lock.clone();
        let made = self.lock.enqueue(owner, mode, id, blocked, at);
        self.note(format!(
            "enqueue owner={:?} mode={mode:?} id={id} blocked={blocked} at={at} -> {made}",
            show(owner)
        ));
        let queued_place = before
            .waiters()
            .iter()
            .position(|w| !w.blocked && w.mode == mode && &*w.owner == owner);
        match queued_place {
            Some(p) => {
                self.check(
                    !made && self.lock.waiters().len() == before.waiters().len(),
                    || "enqueue made a second place for a queued owner".into(),
                );
                let w = &self.lock.waiters()[p];
                self.check(
                    w.id == id
                        && w.blocked == blocked
                        && w.expires_at == at
                        && &*w.owner == owner
                        && w.mode == mode,
                    || "enqueue did not take over the owner's queued place".into(),
                );
            }
            None if !blocked && before.waiters().iter().any(|w| &*w.owner == owner) => {
                self.check(!made && self.lock == before, || {
                    "a polling owner got a second place beside its waiting connection".into()
                });
            }
            None => {
                self.check(made, || "enqueue made no place".into());
                let last = self.lock.waiters().back();
                self.check(
                    last.is_some_and(|w| {
                        w.id == id
                            && w.blocked == blocked
                            && w.expires_at == at
                            && &*w.owner == owner
                            && w.mode == mode
                    }) && self.lock.waiters().len() == before.waiters().len() + 1,
                    || "a new place is not at the back of the queue".into(),
                );
            }
        }
    }

    fn op_release(&mut self) {
        let owner = self.owner();
        let mode = if self.rng.one_in(2) {
            None
        } else {
            Some(self.mode())
        };
        let before = self.lock.clone();
        let kind = before.kind();
        let out = self.lock.release(owner, mode);
        self.note(format!(
            "release owner={:?} mode={mode:?} -> {out:?}",
            show(owner)
        ));
        let mine: Vec<&Holder> = before
            .holders()
            .iter()
            .filter(|h| &*h.owner == owner)
            .collect();
        let target = match mode {
            Some(m) => mine.iter().find(|h| h.mode == m).copied(),
            None if mine.len() == 1 => Some(mine[0]),
            None => None,
        };
        let expected_err = match mode {
            Some(m) if !kind.allows(m) => Some(LockError::ModeNotApplicable),
            None if mine.len() > 1 => Some(LockError::ModeRequired),
            _ if target.is_none() => Some(LockError::NotHeld),
            _ => None,
        };
        match (out, expected_err) {
            (Err(e), Some(want)) if e == want => {
                self.stats.errors += 1;
                self.check(self.lock == before, || {
                    "a failed release changed the lock".into()
                });
            }
            (Ok(r), None) => {
                self.stats.releases += 1;
                let h = target.unwrap_or_else(|| self.fail("released a hold that is not there"));
                let gone = h.count == 1;
                self.check(r.gone == gone, || "release: wrong `gone`".into());
                let after = self
                    .lock
                    .holders()
                    .iter()
                    .find(|x| x.owner == h.owner && x.mode == h.mode);
                if gone {
                    self.check(after.is_none(), || "a released hold stayed".into());
                } else {
                    self.check(after.is_some_and(|x| x.count == h.count - 1), || {
                        "release did not take exactly one hold away".into()
                    });
                }
                self.check(self.lock.waiters() == before.waiters(), || {
                    "release changed the queue".into()
                });
                if r.freed {
                    self.check(gone, || "a partial release freed the lock".into());
                }
            }
            (out, want) => self.fail(&format!(
                "release gave {out:?}, docs/commands.md says {want:?}"
            )),
        }
    }

    fn op_renew(&mut self) {
        let owner = self.owner();
        let lease = self.lease();
        let before = self.lock.clone();
        let renewed = self.lock.renew(owner, lease, self.now);
        self.note(format!(
            "renew owner={:?} lease={lease} -> {renewed}",
            show(owner)
        ));
        let held = before.holders().iter().any(|h| &*h.owner == owner);
        self.check(renewed == held, || "renew answered wrong".into());
        if !renewed {
            self.check(self.lock == before, || {
                "a failed renew changed the lock".into()
            });
            return;
        }
        self.stats.renewals += 1;
        let at = self.now.saturating_add(lease);
        for (a, b) in self.lock.holders().iter().zip(before.holders()) {
            let ok = if &*a.owner == owner {
                a.expires_at == at && a.count == b.count && a.token == b.token
            } else {
                a == b
            };
            self.check(ok, || "renew touched the wrong holds".into());
        }
    }

    /// With `faults`: moves the clock (small steps, jumps, steps back) or
    /// closes a blocked connection (its place is pruned by the tick). Then
    /// ticks.
    fn op_tick(&mut self, faults: bool) {
        if faults {
            match self.rng.below(20) {
                0..=13 => self.now += self.rng.below(40),
                14..=16 => {
                    self.stats.time_jumps += 1;
                    self.now += self.rng.below(70_000);
                }
                17 => {
                    self.stats.clock_steps_back += 1;
                    self.now -= self.rng.below(30);
                }
                _ => {
                    let mut ids: Vec<u64> = self.conns.keys().copied().collect();
                    ids.sort_unstable();
                    if !ids.is_empty() {
                        let id = self.rng.pick(&ids);
                        // The connection went away (deferred prune).
                        self.stats.disconnects += 1;
                        self.conns.remove(&id);
                        self.note(format!("connection of waiter {id} closed"));
                    }
                }
            }
        }
        let before = self.lock.clone();
        let now = self.now;
        let conns = &self.conns;
        let t = self.lock.tick(now, |id| conns.contains_key(&id));
        self.stats.ticks += 1;
        self.stats.expired += t.expired as u64;
        self.stats.dropped += t.dropped as u64;
        self.note(format!("tick now={now} -> {t:?}"));
        let kept: Vec<&Holder> = before
            .holders()
            .iter()
            .filter(|h| h.expires_at > now)
            .collect();
        self.check(self.lock.holders().iter().eq(kept.iter().copied()), || {
            "tick did not remove exactly the ended leases".into()
        });
        self.check(t.expired == before.holders().len() - kept.len(), || {
            "tick miscounted expirations".into()
        });
        let kept_w: Vec<&Waiter> = before
            .waiters()
            .iter()
            .filter(|w| {
                if w.blocked {
                    self.conns.contains_key(&w.id)
                } else {
                    w.expires_at > now
                }
            })
            .collect();
        self.check(
            self.lock.waiters().iter().eq(kept_w.iter().copied()),
            || "tick did not remove exactly the dead and timed-out places".into(),
        );
        self.check(t.dropped == before.waiters().len() - kept_w.len(), || {
            "tick miscounted dropped waiters".into()
        });
        if t.freed {
            self.check(t.expired > 0, || "tick freed without an expiry".into());
        }
    }

    /// The server-side wait of a blocked connection ran out.
    fn op_wait_ended(&mut self) {
        let blocked: Vec<u64> = self
            .lock
            .waiters()
            .iter()
            .filter(|w| w.blocked)
            .map(|w| w.id)
            .collect();
        let id = if blocked.is_empty() || self.rng.one_in(8) {
            self.rng.below(1 << 41) // a stale id
        } else {
            self.rng.pick(&blocked)
        };
        let before = self.lock.clone();
        let deadline = self.now + self.fair_timeout;
        let changed = self.lock.wait_ended(id, deadline);
        self.note(format!("wait_ended id={id} -> {changed}"));
        self.conns.remove(&id);
        let Some(p) = before.waiters().iter().position(|w| w.id == id) else {
            self.check(!changed && self.lock == before, || {
                "wait_ended of an unknown id changed the lock".into()
            });
            return;
        };
        self.stats.wait_ends += 1;
        self.check(changed, || "wait_ended reported no change".into());
        let queued_elsewhere = before.waiters().get(p).is_some_and(|w| {
            before
                .waiters()
                .iter()
                .any(|o| !o.blocked && o.id != id && o.mode == w.mode && o.owner == w.owner)
        });
        if before.kind() == Kind::Fair && !queued_elsewhere {
            let w = &self.lock.waiters()[p];
            self.check(
                !w.blocked
                    && w.expires_at == deadline
                    && self.lock.waiters().len() == before.waiters().len(),
                || "a fair waiter whose wait ended did not keep its place as queued".into(),
            );
        } else {
            self.check(
                !self.lock.has_waiter(id)
                    && self.lock.waiters().len() + 1 == before.waiters().len(),
                || "a waiter whose wait ended kept a place (or a second queued place)".into(),
            );
        }
    }

    /// A connection closes and the command layer removes its place at once.
    fn op_remove_waiter(&mut self) {
        let ids: Vec<u64> = self.lock.waiters().iter().map(|w| w.id).collect();
        let id = if ids.is_empty() || self.rng.one_in(8) {
            self.rng.below(1 << 41)
        } else {
            self.rng.pick(&ids)
        };
        let before = self.lock.clone();
        let removed = self.lock.remove_waiter(id);
        self.note(format!("remove_waiter id={id} -> {removed}"));
        if self.conns.remove(&id).is_some() {
            self.stats.disconnects += 1;
        }
        self.check(removed == before.has_waiter(id), || {
            "remove_waiter answered wrong".into()
        });
        self.check(
            !self.lock.has_waiter(id) && self.lock.holders() == before.holders(),
            || "remove_waiter left the place or touched holders".into(),
        );
    }

    fn op_force_release(&mut self) {
        let before = self.lock.clone();
        let had = self.lock.force_release();
        self.note(format!("force_release -> {had}"));
        self.stats.force_releases += 1;
        self.check(had != before.holders().is_empty(), || {
            "force_release answered wrong".into()
        });
        self.check(
            self.lock.holders().is_empty() && self.lock.waiters() == before.waiters(),
            || "force_release must drop every hold and keep the queue".into(),
        );
    }

    /// DEL / FLUSHALL / eviction: the key and its lock are gone; blocked
    /// connections stay blocked and will meet a new lock (maybe of another
    /// kind). The server's token counter survives.
    fn op_delete_key(&mut self) {
        let kind = self.rng.pick(&[Kind::Mutex, Kind::Rw, Kind::Fair]);
        self.note(format!("key deleted; next lock is {kind:?}"));
        self.stats.key_deletions += 1;
        self.lock = Lock::new(kind);
    }

    /// encode → decode must give the same lock and counter; a corrupted
    /// payload must be refused or decode to a lock that keeps every
    /// invariant (and such a lock is sometimes adopted, as RESTORE would).
    fn op_round_trip(&mut self) {
        let bytes = codec::encode(&self.lock, self.tokens.last);
        let decoded = codec::decode(&bytes);
        self.stats.round_trips += 1;
        if self.lock.is_empty() {
            self.check(decoded.is_err(), || "an empty lock decoded".into());
        } else {
            match &decoded {
                Ok((l, floor)) => {
                    self.check(*l == self.lock && *floor == self.tokens.last, || {
                        "round trip changed the lock".into()
                    });
                }
                Err(e) => self.fail(&format!("a valid lock does not decode: {e:?}")),
            }
        }
        // Corrupt it.
        let mut bad = bytes.clone();
        match self.rng.below(5) {
            0 if !bad.is_empty() => {
                let i = self.rng.below(bad.len() as u64) as usize;
                bad[i] ^= 1 << self.rng.below(8);
            }
            1 if !bad.is_empty() => {
                let i = self.rng.below(bad.len() as u64) as usize;
                bad[i] = self.rng.next() as u8;
            }
            2 => bad.truncate(self.rng.below(bad.len() as u64 + 1) as usize),
            3 => {
                let i = self.rng.below(bad.len() as u64 + 1) as usize;
                bad.insert(i, self.rng.next() as u8);
            }
            _ => {
                if bad.len() > 2 {
                    let i = 2 + self.rng.below(bad.len() as u64 - 2) as usize;
                    bad.remove(i);
                }
            }
        }
        if bad == bytes {
            return;
        }
        self.stats.corrupt_payloads += 1;
        let Ok((l, floor)) = codec::decode(&bad) else {
            return;
        };
        self.stats.corrupt_accepted += 1;
        if let Err(e) = check_lock(&l) {
            self.fail(&format!(
                "decode accepted a corrupted payload that breaks: {e}"
            ));
        }
        let again = codec::decode(&codec::encode(&l, floor));
        self.check(
            again
                .as_ref()
                .is_ok_and(|(l2, f2)| *l2 == l && *f2 == floor),
            || "a decoded payload does not round-trip".into(),
        );
        // Adopt it now and then, as RESTORE would, unless it would exhaust
        // the tokens of this world or reuse waiter ids, or a place of a
        // waiting connection now names another owner or mode than that
        // connection asks with (a corruption of its bytes: the shortcut
        // would judge the place's request and the attempt the connection's,
        // two different requests).
        let top = floor.max(l.last_token());
        let fresh_ids = l.waiters().iter().all(|w| {
            w.id < self.next_id
                && self
                    .conns
                    .get(&w.id)
                    .is_none_or(|c| c.owner == &*w.owner && c.mode == w.mode)
        });
        // Lock-delay and bound holds are fuzzed in fuzz_lock_delay_bind.rs (a version 4
        // payload carries their flags, so a corruption can set them).
        let plain = l
            .holders()
            .iter()
            .all(|h| h.delay_ms == 0 && h.bound == 0 && h.is_live());
        if self.rng.one_in(3)
            && fresh_ids
            && plain
            && (self.exhaustible || top < self.tokens.last + (1 << 40))
        {
            self.stats.corrupt_adopted += 1;
            self.note("adopted a corrupted payload".into());
            self.tokens.observe(top);
            self.max_issued = self.max_issued.max(top);
            self.lock = l;
        }
    }

    /// Pushes one holder's count to the limit, as a long-lived reentrant
    /// holder (or a restored payload) would.
    fn op_count_to_limit(&mut self) {
        if self.lock.holders().is_empty() {
            return;
        }
        self.stats.count_overflow_injections += 1;
        let i = self.rng.below(self.lock.holders().len() as u64) as usize;
        let mut holders = self.lock.holders().to_vec();
        holders[i].count = u32::MAX - self.rng.below(2) as u32;
        self.note(format!("count of holder {i} set to {}", holders[i].count));
        self.lock = lock_from_parts(
            self.lock.kind(),
            self.lock.last_token(),
            0,
            holders,
            self.lock.waiters().clone(),
        );
    }

    /// Liveness: once every holder is gone, the queue drains in order —
    /// the head is always grantable, and a head that conflicts with holds
    /// granted during the drain is granted once those are released.
    fn op_drain_check(&mut self) {
        self.stats.drains += 1;
        let mut l = self.lock.clone();
        let mut t = self.tokens;
        l.force_release();
        let now = self.now;
        let mut rounds = 0;
        while let Some(w) = l.waiters().front().cloned() {
            rounds += 1;
            self.check(rounds < 1000, || "the queue does not drain".into());
            let req = Request {
                owner: &w.owner,
                mode: w.mode,
                lease_ms: 1000,
                waiter: w.blocked.then_some(w.id),
            };
            match l.acquire(&req, now, &mut t, now.saturating_mul(1000)) {
                Ok(Grant::Granted { .. }) => {
                    self.check(!l.has_waiter(w.id), || {
                        "a drained head kept its place".into()
                    });
                }
                Ok(Grant::Denied) => {
                    self.check(!l.holders().is_empty(), || {
                        format!("the head of the queue {w:?} is denied on a lock nobody holds")
                    });
                    l.force_release();
                }
                Err(LockError::TokensExhausted) if self.exhaustible => return,
                Err(LockError::UpgradeDeadlock) => {
                    // Its owner got READ earlier in the drain while another
                    // reader waits to upgrade: the command layer answers
                    // DEADLOCK and removes the place.
                    l.remove_waiter(w.id);
                }
                Err(e) => self.fail(&format!("draining the queue failed with {e:?} at {w:?}")),
            }
        }
    }

    fn new_id(&mut self) -> u64 {
        self.next_id += 1 + self.rng.below(3);
        self.next_id
    }

    fn run(&mut self, ops: usize) {
        for step in 0..ops {
            self.step = step;
            match self.rng.below(100) {
                0..=27 => self.op_acquire(),
                28..=41 => self.op_waiter_ready(),
                42..=57 => self.op_release(),
                58..=62 => self.op_renew(),
                63..=77 => self.op_tick(true),
                78..=81 => self.op_wait_ended(),
                82..=84 => self.op_remove_waiter(),
                85..=86 => self.op_force_release(),
                87 => self.op_delete_key(),
                88..=93 => self.op_round_trip(),
                94 if self.rng.one_in(4) => self.op_count_to_limit(),
                _ => self.op_drain_check(),
            }
            self.stats.ops += 1;
            self.check_invariants();
            // Every caller of the grant rule agrees with `decide`.
            if let Err(e) = check_agreement(&self.lock, &self.tokens) {
                self.fail(&e);
            }
            if let Err(e) = self.replica.sync(Some(&mut self.lock), self.tokens.last) {
                self.fail(&e);
            }
            self.stats.max_holders = self.stats.max_holders.max(self.lock.holders().len());
            self.stats.max_waiters = self.stats.max_waiters.max(self.lock.waiters().len());
            if self.lock.is_empty() && self.lock.last_token() != 0 && self.rng.one_in(2) {
                // The command layer deletes an empty lock's key.
                self.lock = Lock::new(self.lock.kind());
            }
        }
    }
}

fn show(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Runs `sequences` worlds of `ops` operations each from `seed`.
fn fuzz(seed: u64, sequences: u64, ops: usize) -> Stats {
    let mut total = Stats::default();
    for s in 0..sequences {
        let mut w = World::new(seed.wrapping_mul(1_000_003).wrapping_add(s));
        w.run(ops);
        let st = w.stats;
        total.sequences += 1;
        total.ops += st.ops;
        total.new_grants += st.new_grants;
        total.reentrant_grants += st.reentrant_grants;
        total.handoffs += st.handoffs;
        total.denied += st.denied;
        total.errors += st.errors;
        total.releases += st.releases;
        total.renewals += st.renewals;
        total.ticks += st.ticks;
        total.expired += st.expired;
        total.dropped += st.dropped;
        total.wait_ends += st.wait_ends;
        total.disconnects += st.disconnects;
        total.force_releases += st.force_releases;
        total.key_deletions += st.key_deletions;
        total.round_trips += st.round_trips;
        total.corrupt_payloads += st.corrupt_payloads;
        total.corrupt_accepted += st.corrupt_accepted;
        total.corrupt_adopted += st.corrupt_adopted;
        total.time_jumps += st.time_jumps;
        total.clock_steps_back += st.clock_steps_back;
        total.count_overflow_injections += st.count_overflow_injections;
        total.drains += st.drains;
        total.shortcut_checks += st.shortcut_checks;
        total.max_holders = total.max_holders.max(st.max_holders);
        total.max_waiters = total.max_waiters.max(st.max_waiters);
        total.deltas += w.replica.deltas;
        total.fulls += w.replica.fulls;
    }
    total
}

#[test]
fn fuzz_state_machine() {
    // 2000 worlds x 100 operations = 200 000 operations.
    let st = fuzz(0x5EED_D10C, 2000, 100);
    assert_eq!(st.ops, 200_000);
    eprintln!(
        "[fuzz] {} operations in {} sequences; {} faults injected; 0 overlaps; {st:?}",
        st.ops,
        st.sequences,
        st.faults()
    );
    // The run must have exercised what it claims to check.
    assert!(
        st.new_grants > 10_000 && st.reentrant_grants > 1000,
        "{st:?}"
    );
    assert!(
        st.handoffs > 500 && st.denied > 5000 && st.errors > 1000,
        "{st:?}"
    );
    assert!(
        st.expired > 1000 && st.dropped > 500 && st.wait_ends > 500,
        "{st:?}"
    );
    assert!(
        st.corrupt_accepted > 100 && st.corrupt_adopted > 10,
        "{st:?}"
    );
    assert!(st.max_holders >= 3 && st.max_waiters >= 4, "{st:?}");
    assert!(st.shortcut_checks > 1000, "{st:?}");
    // Most commits replicate a delta, checked against the whole state.
    assert!(st.deltas > 100_000 && st.fulls > 1000, "{st:?}");
}

#[test]
fn fuzz_long_sequences() {
    // Fewer, longer worlds: deep queues, many deletions and re-creations.
    let st = fuzz(0xD10C_0002, 20, 2000);
    assert_eq!(st.ops, 40_000);
}

#[test]

fn fair_owner_keeps_one_place_when_two_waits_end() {
    // docs/commands.md: a fair-lock owner takes its place at the back of the queue
    // *once*. Here owner `a` waits from two connections; both waits end.
    let mut tokens = Tokens::default();
    let mut l = Lock::new(Kind::Fair);
    let req = |owner: &'static [u8]| Request {
        owner,
        mode: Mode::Exclusive,
        lease_ms: 1000,
        waiter: None,
    };
    assert!(matches!(
        l.acquire(&req(b"h"), 0, &mut tokens, 0),
        Ok(Grant::Granted { .. })
    ));
    assert_eq!(l.acquire(&req(b"a"), 0, &mut tokens, 0), Ok(Grant::Denied));
    assert!(l.enqueue(b"a", Mode::Exclusive, 1, true, 100));
    assert!(l.enqueue(b"a", Mode::Exclusive, 2, true, 100));
    assert_eq!(l.acquire(&req(b"b"), 0, &mut tokens, 0), Ok(Grant::Denied));
    assert!(l.enqueue(b"b", Mode::Exclusive, 3, false, 5000));
    assert!(l.wait_ended(1, 5000));
    assert!(l.wait_ended(2, 5000));
    let places_of_a = l.waiters().iter().filter(|w| &*w.owner == b"a").count();
    assert_eq!(places_of_a, 1, "{:?}", l.waiters());
}

/// The same worlds and codec, driven by proptest: it picks the seeds and
/// lengths of arbitrary operation sequences (and arbitrary payloads), and
/// shrinks a failure to the shortest sequence that still breaks a rule.
mod prop {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

        /// Every invariant of the module doc holds after every step.
        #[test]
        fn arbitrary_operation_sequences_keep_every_invariant(seed in any::<u64>(), ops in 1usize..300) {
            let mut w = World::new(seed);
            w.run(ops);
        }

        /// Any bytes: refused, or a lock that meets every invariant and
        /// round-trips exactly. Never a panic.
        #[test]
        fn arbitrary_payloads_are_refused_or_valid(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            if let Ok((lock, floor)) = codec::decode(&bytes) {
                prop_assert!(check_lock(&lock).is_ok(), "{:?}", check_lock(&lock));
                prop_assert_eq!(codec::decode(&codec::encode(&lock, floor)), Ok((lock, floor)));
            }
        }
    }
}
