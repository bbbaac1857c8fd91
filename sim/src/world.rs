//! The simulated server: keys, connections, blocked clients, timers, a
//! replica and the persistence files, over dlock-core — what the module's
//! services do over the FFI, in memory — and the checks after every step.

use crate::invariant::{fail, Invariant as I, Violation};
use crate::spec::{self, view, Want};
use crate::{Op, FRESH, SLOTS};
use dlock_core::deadlock::{find_cycle, Search};
use dlock_core::{codec, Ask, Grant, Kind, Lock, Mode, Request, Tokens, Waiter};
use std::collections::{BTreeMap, BTreeSet};

/// A key: (db, name).
type Key = (u8, Vec<u8>);

/// A connection blocked in a waiting command.
#[derive(Clone, Debug)]
struct Blocked {
    client: u64,
    key: Key,
    owner: Vec<u8>,
    mode: Mode,
    permits: u32,
    limit: Option<u64>,
    lease: u64,
    deadline: u64,
    bind: bool,
    delay: u64,
    latch: bool,
}

/// One entry of the AOF's command log.
#[derive(Clone, Debug)]
enum Aof {
    /// DLOCK.APPLY key payload (empty: the key is gone).
    Apply(Key, Vec<u8>),
    /// RENAME / MOVE.
    Rename(Key, Key),
}

/// Queued places of a fair lock last this long without the owner asking.
const FAIR_TIMEOUT: u64 = 300;
/// `dlock.max-queue` of the simulated server.
const MAX_QUEUE: usize = 32;
/// `dlock.promotion-gap-ms` in µs (the default, an hour).
const PROMOTION_GAP_US: u64 = 3_600_000_000;
/// Key names.
const NAMES: [&[u8]; 6] = [b"k0", b"k1", b"k2", b"k3", b"k4", b"k5"];

/// The simulated server.
pub struct World {
    now: u64,
    /// The latest the clock has been.
    max_now: u64,
    tokens: Tokens,
    keys: BTreeMap<Key, Lock>,
    replica: BTreeMap<Key, Lock>,
    /// The highest token floor the replica received.
    replica_floor: u64,
    clients: [u64; SLOTS as usize],
    next_client: u64,
    dead_clients: BTreeSet<u64>,
    next_id: u64,
    blocked: BTreeMap<u64, Blocked>,
    /// Tokens granted lately (newest last), for CHECK.
    issued: Vec<u64>,
    /// The largest token ever replied: every new hold's is above it.
    max_token: u64,
    /// Live tokens and their key; tokens whose hold ended.
    live_tokens: BTreeMap<u64, Key>,
    dead_tokens: BTreeSet<u64>,
    touched: BTreeSet<Key>,
    aof_base: BTreeMap<Key, Vec<u8>>,
    aof_floor: u64,
    aof_log: Vec<Aof>,
    /// Operations applied (all worlds of this process count in `crate`).
    pub ops: u64,
}

impl Default for World {
    fn default() -> Self {
        World::new()
    }
}

impl World {
    pub fn new() -> World {
        let mut clients = [0u64; SLOTS as usize];
        for (i, c) in clients.iter_mut().enumerate() {
            *c = 1 + i as u64;
        }
        World {
            now: 1_700_000_000_000,
            max_now: 1_700_000_000_000,
            tokens: Tokens::default(),
            keys: BTreeMap::new(),
            replica: BTreeMap::new(),
            replica_floor: 0,
            clients,
            next_client: 1 + u64::from(SLOTS),
            dead_clients: BTreeSet::new(),
            next_id: 1 << 40,
            blocked: BTreeMap::new(),
            issued: Vec::new(),
            max_token: 0,
            live_tokens: BTreeMap::new(),
            dead_tokens: BTreeSet::new(),
            touched: BTreeSet::new(),
            aof_base: BTreeMap::new(),
            aof_floor: 0,
            aof_log: Vec::new(),
            ops: 0,
        }
    }

    fn now_us(&self) -> u64 {
        self.now * 1000 + self.ops % 1000
    }

    fn owner(&self, o: u8) -> Vec<u8> {
        if o < FRESH {
            format!("o{o}").into_bytes()
        } else {
            // A fresh owner: the same within one simulated second (it can
            // release what it took), never seen again after.
            format!("f{}-{o}", self.now / 1000).into_bytes()
        }
    }

    fn key(db: u8, k: u8) -> Key {
        (db, NAMES[usize::from(k) % NAMES.len()].to_vec())
    }

    fn is_blocked(&self, client: u64) -> bool {
        self.blocked.values().any(|b| b.client == client)
    }

    /// Applies one operation, serves what it made grantable, commits
    /// (replica, AOF), and checks every invariant.
    pub fn step(&mut self, op: &Op) -> Result<(), Violation> {
        self.ops += 1;
        self.touched.clear();
        self.apply(op)?;
        self.max_now = self.max_now.max(self.now);
        let touched: Vec<Key> = self.touched.iter().cloned().collect();
        for k in &touched {
            self.serve(k)?;
        }
        for k in &touched {
            self.commit(k)?;
        }
        if self.aof_log.len() > 400 {
            // Between steps: every key is committed.
            self.aof_rewrite();
        }
        self.check(&touched)
    }

    fn apply(&mut self, op: &Op) -> Result<(), Violation> {
        match *op {
            Op::Acquire {
                slot,
                db,
                key,
                owner,
                kind,
                mode,
                permits,
                limit,
                lease,
                wait,
                bind,
                delay,
            } => {
                let a = AcquireArgs {
                    client: self.clients[usize::from(slot) % self.clients.len()],
                    key: Self::key(db, key),
                    owner: self.owner(owner),
                    kind: [Kind::Mutex, Kind::Rw, Kind::Fair, Kind::Semaphore]
                        [usize::from(kind) % 4],
                    mode,
                    permits: u32::from(permits.max(1)),
                    limit: u64::from(limit.max(1)),
                    lease: u64::from(lease.max(1)),
                    wait: u64::from(wait),
                    bind,
                    delay: u64::from(delay),
                };
                self.acquire(a)
            }
            Op::Release {
                db,
                key,
                owner,
                mode,
                permits,
            } => {
                let o = self.owner(owner);
                self.with_due_lock(db, key, |l, _| {
                    let _ = match (l.kind(), mode) {
                        (Kind::Semaphore, _) => l.release_permits(&o, u32::from(permits.max(1))),
                        (_, 1) => l.release(&o, Some(Mode::Read)),
                        (_, 2) => l.release(&o, Some(Mode::Write)),
                        _ => l.release(&o, None),
                    };
                });
                Ok(())
            }
            Op::Renew {
                db,
                key,
                owner,
                lease,
            } => {
                let o = self.owner(owner);
                self.with_due_lock(db, key, |l, now| {
                    l.renew(&o, u64::from(lease.max(1)), now);
                });
                Ok(())
            }
            Op::Force { db, key } => {
                let k = Self::key(db, key);
                if let Some(l) = self.keys.get_mut(&k) {
                    let opened = l.open();
                    l.force_release();
                    self.answer(&opened);
                    self.touched.insert(k);
                }
                Ok(())
            }
            Op::Cancel { db, key, owner } => {
                let k = Self::key(db, key);
                let o = self.owner(owner);
                if let Some(l) = self.keys.get_mut(&k) {
                    if l.kind() != Kind::Latch {
                        let ids: Vec<u64> = l
                            .waiters()
                            .iter()
                            .filter(|w| *w.owner == *o)
                            .map(|w| w.id)
                            .collect();
                        for id in &ids {
                            l.remove_waiter(*id);
                        }
                        self.answer(&ids);
                        self.touched.insert(k);
                    }
                }
                Ok(())
            }
            Op::Check { db, key, pick } => {
                let k = Self::key(db, key);
                let n = self.issued.len();
                let Some(&t) = n
                    .checked_sub(1 + usize::from(pick))
                    .and_then(|i| self.issued.get(i))
                else {
                    return Ok(());
                };
                let live = self.keys.get(&k).is_some_and(|l| l.token_live(t, self.now));
                if live && self.dead_tokens.contains(&t) {
                    return fail(I::EndedTokenLive, format!("token {t} at {k:?}"));
                }
                Ok(())
            }
            Op::LatchSet { db, key, count } => {
                let k = Self::key(db, key);
                if !self.keys.contains_key(&k) {
                    self.keys
                        .insert(k.clone(), Lock::latch(u64::from(count.max(1))));
                    self.touched.insert(k);
                }
                Ok(())
            }
            Op::Countdown { db, key } => {
                let k = Self::key(db, key);
                if let Some(l) = self.keys.get_mut(&k) {
                    if let Ok(dlock_core::Countdown::Opened(ids)) = l.countdown() {
                        self.answer(&ids);
                    }
                    self.touched.insert(k);
                }
                Ok(())
            }
            Op::Await {
                slot,
                db,
                key,
                wait,
            } => {
                let client = self.clients[usize::from(slot) % self.clients.len()];
                let k = Self::key(db, key);
                if self.is_blocked(client) || wait == 0 {
                    return Ok(());
                }
                let id = self.next_id;
                let deadline = self.now + u64::from(wait);
                if let Some(l) = self.keys.get_mut(&k) {
                    if l.latch_count().is_some_and(|c| c > 0) {
                        self.next_id += 1;
                        l.enqueue_await(format!("c{client}").as_bytes(), id, deadline);
                        self.blocked.insert(
                            id,
                            Blocked {
                                client,
                                key: k.clone(),
                                owner: Vec::new(),
                                mode: Mode::Await,
                                permits: 1,
                                limit: None,
                                lease: 0,
                                deadline,
                                bind: false,
                                delay: 0,
                                latch: true,
                            },
                        );
                        self.touched.insert(k);
                    }
                }
                Ok(())
            }
            Op::Kill { slot } => {
                let i = usize::from(slot) % self.clients.len();
                let client = self.clients[i];
                let now = self.now;
                for (k, l) in self.keys.iter_mut() {
                    if l.end_bound(client, now).ended > 0 {
                        self.touched.insert(k.clone());
                    }
                }
                let gone: Vec<u64> = self
                    .blocked
                    .iter()
                    .filter(|(_, b)| b.client == client)
                    .map(|(id, _)| *id)
                    .collect();
                for id in gone {
                    if let Some(b) = self.blocked.remove(&id) {
                        if let Some(l) = self.keys.get_mut(&b.key) {
                            l.remove_waiter(id);
                        }
                        self.touched.insert(b.key);
                    }
                }
                self.dead_clients.insert(client);
                self.clients[i] = self.next_client;
                self.next_client += 1;
                Ok(())
            }
            Op::Advance { ms, fire } => {
                self.now += u64::from(ms);
                if fire {
                    self.fire_timers();
                }
                Ok(())
            }
            Op::Jump { ms } => {
                self.now = self.now.saturating_add_signed(i64::from(ms)).max(1);
                Ok(())
            }
            Op::Del { db, key } => {
                let k = Self::key(db, key);
                let Some(mut l) = self.keys.remove(&k) else {
                    return Ok(());
                };
                self.touched.insert(k.clone());
                if l.kind() == Kind::Latch {
                    let ids = l.open();
                    self.answer(&ids);
                    return Ok(());
                }
                // Connections waiting at the key go on waiting: their
                // places go to a new lock of the same kind.
                let places: Vec<Waiter> = l
                    .blocked_waiters()
                    .into_iter()
                    .filter(|w| self.blocked.contains_key(&w.id))
                    .collect();
                if !places.is_empty() {
                    let mut fresh = match l.limit() {
                        Some(n) => Lock::semaphore(n),
                        None => Lock::new(l.kind()),
                    };
                    fresh.adopt(places);
                    self.keys.insert(k, fresh);
                }
                l.force_release();
                Ok(())
            }
            Op::Rename { db, key, to } => {
                let (a, b) = (Self::key(db, key), Self::key(db, to));
                self.refile(a, b);
                Ok(())
            }
            Op::Move { db, key, to } => {
                let (a, b) = (Self::key(db, key), Self::key(to % crate::DBS, key));
                self.refile(a, b);
                Ok(())
            }
            Op::Restore { db, key } => {
                let k = Self::key(db, key);
                let Some(l) = self.keys.get(&k) else {
                    return Ok(());
                };
                let dump = codec::encode(l, self.tokens.last);
                let (mut back, floor) = match codec::decode(&dump) {
                    Ok(x) => x,
                    Err(e) => {
                        return fail(
                            I::PersistenceChangedState,
                            format!("DUMP does not RESTORE: {e:?} {l:?}"),
                        )
                    }
                };
                if view(&back) != view(l) {
                    return fail(
                        I::PersistenceChangedState,
                        format!("{l:?}\nrestored {back:?}"),
                    );
                }
                self.tokens.observe(floor);
                // A restored lock's bound holds end (their connection is
                // not known to have it).
                back.end_all_bound(self.now);
                self.keys.insert(k.clone(), back);
                self.touched.insert(k);
                Ok(())
            }
            Op::Restart { aof } => self.restart(aof),
            Op::Swapdb => {
                let keys = std::mem::take(&mut self.keys);
                self.keys = keys
                    .into_iter()
                    .map(|((db, n), l)| ((1 - db.min(1), n), l))
                    .collect();
                let replica = std::mem::take(&mut self.replica);
                self.replica = replica
                    .into_iter()
                    .map(|((db, n), l)| ((1 - db.min(1), n), l))
                    .collect();
                for b in self.blocked.values_mut() {
                    b.key.0 = 1 - b.key.0.min(1);
                }
                // Logged as whole states: the AOF has no SWAPDB of its own here.
                let all: Vec<Key> = self.keys.keys().cloned().collect();
                for k in &all {
                    if let Some(l) = self.keys.get_mut(k) {
                        l.journal_reset();
                        self.aof_log
                            .push(Aof::Apply(k.clone(), codec::encode(l, self.tokens.last)));
                    }
                    self.touched.insert(k.clone());
                    self.touched.insert((1 - k.0.min(1), k.1.clone()));
                }
                for k in self.replica.keys() {
                    if !self.keys.contains_key(&(1 - k.0.min(1), k.1.clone())) {
                        self.aof_log
                            .push(Aof::Apply((1 - k.0.min(1), k.1.clone()), Vec::new()));
                    }
                }
                Ok(())
            }
            Op::Flushdb { db } => {
                let names: Vec<u8> = (0..NAMES.len() as u8).collect();
                for k in names {
                    self.apply(&Op::Del { db, key: k })?;
                }
                Ok(())
            }
            // A failover loses nothing: the replica here has every commit.
            Op::Promote | Op::Failover => self.promote(),
            // Inside MULTI or a script, WAIT acts as 0.
            Op::Atomic {
                slot,
                db,
                key,
                owner,
                kind,
                ..
            } => self.apply(&Op::Acquire {
                slot,
                db,
                key,
                owner,
                kind,
                mode: 2,
                permits: 1,
                limit: 3,
                lease: 1000,
                wait: 0,
                bind: false,
                delay: 0,
            }),
            // Key expiry, the server's states (pause, OOM), CLIENT UNBLOCK,
            // COPY, FENCED and cluster slots are not modelled here: the
            // module world runs them in its simulated server.
            Op::Expire { .. }
            | Op::Persist { .. }
            | Op::Pause { .. }
            | Op::Unpause
            | Op::Oom { .. }
            | Op::Unblock { .. }
            | Op::Copy { .. }
            | Op::Fenced { .. }
            | Op::Migrate { .. } => Ok(()),
        }
    }

    fn acquire(&mut self, a: AcquireArgs) -> Result<(), Violation> {
        if self.is_blocked(a.client) {
            return Ok(());
        }
        let mode = match a.kind {
            Kind::Rw if a.mode == 1 => Mode::Read,
            Kind::Rw => Mode::Write,
            Kind::Semaphore => Mode::Permit,
            _ => Mode::Exclusive,
        };
        let sem = a.kind == Kind::Semaphore;
        let (now, now_us) = (self.now, self.now_us());
        let l = self.keys.entry(a.key.clone()).or_insert_with(|| {
            if sem {
                Lock::semaphore(a.limit)
            } else {
                Lock::new(a.kind)
            }
        });
        self.touched.insert(a.key.clone());
        if l.kind() != a.kind {
            return Ok(());
        }
        l.tick_due(now);
        let before = l.clone();
        // SPEC's place of a request without a wait: a fair owner's place
        // (queued once); for every kind, the owner's place in that mode.
        let other_mode_place = before
            .waiters()
            .iter()
            .any(|w| *w.owner == *a.owner && w.mode != mode);
        let pos = if sem {
            before.waiters().len()
        } else {
            before
                .waiters()
                .iter()
                .position(|w| *w.owner == *a.owner && w.mode == mode)
                .unwrap_or(before.waiters().len())
        };
        let want = Want {
            owner: &a.owner,
            mode,
            permits: if sem { a.permits } else { 1 },
        };
        let spec_serves = spec::serves(&before, &want, pos);
        let req = Request {
            owner: &a.owner,
            mode,
            lease_ms: a.lease,
            waiter: None,
        };
        let out = if sem {
            l.acquire_permits(&req, a.permits, a.limit, now, &mut self.tokens, now_us)
        } else {
            l.acquire(&req, now, &mut self.tokens, now_us)
        };
        match out {
            Ok(Grant::Granted { token, reentrant }) => {
                if !spec_serves {
                    return fail(
                        I::GrantedWhatSpecMakesWait,
                        format!("{:?} {mode:?} at {pos}: {before:?}", a.owner),
                    );
                }
                self.granted(
                    &a.key, &a.owner, mode, token, reentrant, a.client, a.bind, a.delay,
                )?;
            }
            Ok(Grant::Denied) => {
                if spec_serves && !other_mode_place {
                    return fail(
                        I::DeniedWhatSpecGrants,
                        format!("{:?} {mode:?} at {pos}: {before:?}", a.owner),
                    );
                }
                let fair_poll = a.kind == Kind::Fair && a.wait == 0;
                if a.wait == 0 && !fair_poll {
                    return Ok(());
                }
                let blocked = a.wait > 0;
                if l.check_room(&a.owner, mode, blocked, MAX_QUEUE).is_err() {
                    return Ok(());
                }
                let id = self.next_id;
                self.next_id += 1;
                if !blocked {
                    l.enqueue(&a.owner, mode, id, false, now + FAIR_TIMEOUT);
                    l.stamp_wait(id, now);
                    return Ok(());
                }
                let deadline = now + a.wait;
                if sem {
                    l.enqueue_permits(&a.owner, a.permits, id, deadline);
                } else {
                    l.enqueue(&a.owner, mode, id, true, deadline);
                }
                l.stamp_wait(id, now);
                self.blocked.insert(
                    id,
                    Blocked {
                        client: a.client,
                        key: a.key,
                        owner: a.owner,
                        mode,
                        permits: a.permits,
                        limit: sem.then_some(a.limit),
                        lease: a.lease,
                        deadline,
                        bind: a.bind,
                        delay: a.delay,
                        latch: false,
                    },
                );
            }
            Err(_) => {}
        }
        Ok(())
    }

    /// A grant was made: the token rule, BIND and LOCKDELAY.
    #[allow(clippy::too_many_arguments)]
    fn granted(
        &mut self,
        k: &Key,
        owner: &[u8],
        mode: Mode,
        token: u64,
        reentrant: bool,
        client: u64,
        bind: bool,
        delay: u64,
    ) -> Result<(), Violation> {
        if !reentrant {
            if token <= self.max_token {
                return fail(
                    I::TokenNotAbove,
                    format!("token {token} after {} at {k:?}", self.max_token),
                );
            }
            self.max_token = token;
            if let Some(l) = self.keys.get_mut(k) {
                if bind {
                    l.bind_hold(owner, mode, client);
                }
                if delay > 0 {
                    l.set_lock_delay(owner, mode, delay);
                }
            }
        }
        if self.issued.len() >= 16 {
            self.issued.remove(0);
        }
        self.issued.push(token);
        Ok(())
    }

    /// Answers the blocked connections `ids` (granted, opened, or nil).
    fn answer(&mut self, ids: &[u64]) {
        for id in ids {
            self.blocked.remove(id);
        }
    }

    /// RENAME / MOVE: the lock is filed again at `to` when that is free;
    /// its waiting connections and bound holds go with it.
    fn refile(&mut self, from: Key, to: Key) {
        if from == to || self.keys.contains_key(&to) || !self.keys.contains_key(&from) {
            return;
        }
        if let Some(l) = self.keys.remove(&from) {
            self.keys.insert(to.clone(), l);
        }
        for b in self.blocked.values_mut() {
            if b.key == from {
                b.key = to.clone();
            }
        }
        // Replicated (and logged) as the command itself.
        if let Some(l) = self.replica.remove(&from) {
            self.replica.insert(to.clone(), l);
        }
        self.aof_log.push(Aof::Rename(from.clone(), to.clone()));
        self.touched.insert(from);
        self.touched.insert(to);
    }

    /// The timers due: blocked waits that ended, then every lock's leases,
    /// lock-delays and queued places.
    fn fire_timers(&mut self) {
        let now = self.now;
        let due: Vec<u64> = self
            .blocked
            .iter()
            .filter(|(_, b)| b.deadline <= now)
            .map(|(id, _)| *id)
            .collect();
        for id in due {
            if let Some(b) = self.blocked.remove(&id) {
                if let Some(l) = self.keys.get_mut(&b.key) {
                    if b.latch {
                        l.remove_waiter(id);
                    } else {
                        l.wait_ended(id, now + FAIR_TIMEOUT);
                    }
                }
                self.touched.insert(b.key);
            }
        }
        for (k, l) in self.keys.iter_mut() {
            l.tick_due(now);
            self.touched.insert(k.clone());
        }
    }

    /// The handoff: serves, in the order the core names them, the waiting
    /// connections the lock can serve now; then deletes an empty lock.
    fn serve(&mut self, k: &Key) -> Result<(), Violation> {
        let (now, now_us) = (self.now, self.now_us());
        loop {
            let Some(l) = self.keys.get_mut(k) else {
                return Ok(());
            };
            let Some(id) = l.next_handoff() else {
                break;
            };
            let b = match self.blocked.get(&id) {
                Some(b) if b.key == *k && !b.latch => b.clone(),
                _ => {
                    l.remove_waiter(id);
                    continue;
                }
            };
            let pos = l.waiters().iter().position(|w| w.id == id).unwrap_or(0);
            let want = Want {
                owner: &b.owner,
                mode: b.mode,
                permits: b.permits,
            };
            if !spec::serves(l, &want, pos) {
                return fail(
                    I::HandedToWaiterSpecMakesWait,
                    format!("waiter {id} at {pos}: {l:?}"),
                );
            }
            let req = Request {
                owner: &b.owner,
                mode: b.mode,
                lease_ms: b.lease,
                waiter: Some(id),
            };
            let out = match b.limit {
                Some(limit) => {
                    l.acquire_permits(&req, b.permits, limit, now, &mut self.tokens, now_us)
                }
                None => l.acquire(&req, now, &mut self.tokens, now_us),
            };
            self.blocked.remove(&id);
            match out {
                Ok(Grant::Granted { token, reentrant }) => {
                    self.granted(
                        k, &b.owner, b.mode, token, reentrant, b.client, b.bind, b.delay,
                    )?;
                }
                Ok(Grant::Denied) => {
                    return fail(I::HandoffDenied, format!("waiter {id}: {l:?}"));
                }
                Err(_) => {
                    l.remove_waiter(id);
                }
            }
        }
        if self.keys.get(k).is_some_and(|l| l.is_empty()) {
            self.keys.remove(k);
        }
        Ok(())
    }

    /// Replicates the key's change (delta or whole state) to the replica
    /// and the AOF, then commits the journal.
    fn commit(&mut self, k: &Key) -> Result<(), Violation> {
        let Some(l) = self.keys.get_mut(k) else {
            self.replica.remove(k);
            self.aof_log.push(Aof::Apply(k.clone(), Vec::new()));
            return Ok(());
        };
        let payload = codec::with_replication_payload(l, self.tokens.last, |p, _| p.to_vec());
        l.journal_reset();
        match apply_payload(&mut self.replica, k, &payload) {
            Ok(f) => self.replica_floor = self.replica_floor.max(f),
            Err(e) => {
                return fail(
                    I::ReplicaDiffers,
                    format!("the replica refused a payload: {e} at {k:?}"),
                )
            }
        }
        self.aof_log.push(Aof::Apply(k.clone(), payload));
        Ok(())
    }

    fn aof_rewrite(&mut self) {
        self.aof_base = self
            .keys
            .iter()
            .map(|(k, l)| (k.clone(), codec::encode(l, self.tokens.last)))
            .collect();
        self.aof_floor = self.tokens.last;
        self.aof_log.clear();
    }

    fn restart(&mut self, aof: bool) -> Result<(), Violation> {
        let (keys, last) = if aof {
            let mut keys = BTreeMap::new();
            let mut last = self.aof_floor;
            for (k, p) in &self.aof_base {
                if let Err(e) = apply_payload(&mut keys, k, p) {
                    return fail(I::PersistenceChangedState, e);
                }
            }
            for e in &self.aof_log {
                match e {
                    Aof::Apply(k, p) => match apply_payload(&mut keys, k, p) {
                        Ok(f) => last = last.max(f),
                        Err(e) => return fail(I::PersistenceChangedState, e),
                    },
                    Aof::Rename(a, b) => {
                        if let Some(l) = keys.remove(a) {
                            keys.insert(b.clone(), l);
                        }
                    }
                }
            }
            (keys, last)
        } else {
            let mut keys = BTreeMap::new();
            for (k, l) in &self.keys {
                match codec::decode(&codec::encode(l, self.tokens.last)) {
                    Ok((l, _)) => {
                        keys.insert(k.clone(), l);
                    }
                    Err(e) => return fail(I::PersistenceChangedState, format!("{e:?}")),
                }
            }
            (keys, self.tokens.last)
        };
        if !same_state(&keys, &self.keys) {
            return fail(
                I::PersistenceChangedState,
                format!(
                    "the {} loads another state: loaded {keys:?}\nhad {:?}",
                    if aof { "AOF" } else { "RDB" },
                    self.keys
                ),
            );
        }
        // The new process: its token counter from the file, the clock a
        // second on, no connection of the old one.
        self.tokens = Tokens { last };
        self.now += 1000;
        for l in keys.values() {
            self.tokens.observe(l.last_token());
        }
        self.take_over(keys);
        Ok(())
    }

    /// Runs `f` on the lock at `db`/`key`, if there is one, after its due
    /// timers, with the clock; the key is touched.
    fn with_due_lock(&mut self, db: u8, key: u8, f: impl FnOnce(&mut Lock, u64)) {
        let k = Self::key(db, key);
        let now = self.now;
        if let Some(l) = self.keys.get_mut(&k) {
            l.tick_due(now);
            f(l, now);
            self.touched.insert(k);
        }
    }

    /// A new master process takes `keys` as its state: bound holds end
    /// (their connections were the old process's), the timers due run,
    /// every connection reconnects, the replica syncs in full and the AOF
    /// is rewritten.
    fn take_over(&mut self, mut keys: BTreeMap<Key, Lock>) {
        let now = self.now;
        for l in keys.values_mut() {
            l.end_all_bound(now);
            l.tick(now, |_| false);
        }
        keys.retain(|_, l| !l.is_empty());
        for k in self.keys.keys().chain(keys.keys()) {
            self.touched.insert(k.clone());
        }
        self.keys = keys;
        self.blocked.clear();
        for c in self.clients.iter_mut() {
            self.dead_clients.insert(*c);
            *c = self.next_client;
            self.next_client += 1;
        }
        self.replica = self
            .keys
            .iter()
            .map(|(k, l)| (k.clone(), l.clone()))
            .collect();
        for l in self.keys.values_mut() {
            l.journal_reset();
        }
        self.aof_rewrite();
    }

    /// The replica becomes the master: its state as it is, its token
    /// counter the highest floor it received plus the promotion gap; bound
    /// holds end (their connections were the old master's), connections
    /// reconnect, a new replica syncs in full.
    fn promote(&mut self) -> Result<(), Violation> {
        let keys = std::mem::take(&mut self.replica);
        let mut last = self.replica_floor;
        for l in keys.values() {
            last = last.max(l.last_token());
        }
        self.tokens = Tokens {
            last: last.saturating_add(PROMOTION_GAP_US),
        };
        self.take_over(keys);
        Ok(())
    }

    /// The invariants, after a step (see the crate doc and docs/architecture.md).
    fn check(&mut self, touched: &[Key]) -> Result<(), Violation> {
        let mut now_live: BTreeMap<u64, Key> = BTreeMap::new();
        for k in touched {
            let master = self.keys.get(k);
            if master.map(view) != self.replica.get(k).map(view) {
                return fail(
                    I::ReplicaDiffers,
                    format!(
                        "{k:?}\nmaster {master:?}\nreplica {:?}",
                        self.replica.get(k)
                    ),
                );
            }
            let Some(l) = master else {
                continue;
            };
            if let Err(e) = spec::exclusion(l) {
                return fail(I::MutualExclusion, format!("{e}: {k:?} {l:?}"));
            }
            for (pos, w) in l.waiters().iter().enumerate() {
                if !w.blocked || l.kind() == Kind::Latch {
                    continue;
                }
                let want = Want {
                    owner: &w.owner,
                    mode: w.mode,
                    permits: w.permits,
                };
                if spec::serves(l, &want, pos) {
                    return fail(
                        I::GrantableWaiterLeft,
                        format!("waiter {} at {pos} of {k:?}: {l:?}", w.id),
                    );
                }
                if self.blocked.get(&w.id).is_none_or(|b| b.key != *k) {
                    return fail(
                        I::PlaceOfNoConnection,
                        format!("waiter {} of {k:?}: {l:?}", w.id),
                    );
                }
            }
            for h in l.holders() {
                if h.bound != 0
                    && (self.dead_clients.contains(&h.bound) || h.bound >= self.next_client)
                {
                    return fail(I::BoundHoldOutlived, format!("{k:?}: {l:?}"));
                }
                if h.is_live() {
                    if self.dead_tokens.contains(&h.token) {
                        return fail(I::EndedTokenLive, format!("{k:?}: {l:?}"));
                    }
                    now_live.insert(h.token, k.clone());
                }
            }
            if l.journal_entries() > spec::journal_bound(l) {
                return fail(
                    I::JournalUnbounded,
                    format!(
                        "{k:?}: {} journal entries for {} places",
                        l.journal_entries(),
                        l.waiters().len()
                    ),
                );
            }
        }
        // Tokens of touched keys that are no longer live: ended for good.
        let ended: Vec<u64> = self
            .live_tokens
            .iter()
            .filter(|(t, k)| self.touched.contains(*k) && !now_live.contains_key(*t))
            .map(|(t, _)| *t)
            .collect();
        for t in ended {
            self.live_tokens.remove(&t);
            self.dead_tokens.insert(t);
        }
        self.live_tokens.extend(now_live);
        self.check_places()?;
        self.check_deadlock()
    }

    /// Every waiting connection has its place in the lock at its key (a
    /// connection that waits with no place is never served).
    fn check_places(&self) -> Result<(), Violation> {
        for (id, b) in &self.blocked {
            if b.latch && b.deadline <= self.max_now {
                // A latch drops places whose wait is over when it is looked
                // at (the clock may have gone back since); the connection's
                // own timeout (late) answers it.
                continue;
            }
            let has = self.keys.get(&b.key).is_some_and(|l| l.has_waiter(*id));
            if !has {
                return fail(
                    I::WaiterLostPlace,
                    format!(
                        "waiter {id} ({:?}) at {:?}: {:?}",
                        b.owner,
                        b.key,
                        self.keys.get(&b.key)
                    ),
                );
            }
        }
        Ok(())
    }

    /// The deadlock search ([`find_cycle`] over [`Lock::waits_for`]) equals
    /// a brute-force search of the whole wait-for graph.
    fn check_deadlock(&self) -> Result<(), Violation> {
        let mut graph: BTreeMap<Vec<u8>, Vec<(Key, Vec<u8>)>> = BTreeMap::new();
        for b in self.blocked.values() {
            let Some(l) = self.keys.get(&b.key) else {
                continue;
            };
            if !matches!(l.kind(), Kind::Mutex | Kind::Rw | Kind::Fair) {
                continue;
            }
            let Some((pos, w)) = l
                .waiters()
                .iter()
                .enumerate()
                .find(|(_, w)| *w.owner == *b.owner && w.blocked && w.mode == b.mode)
            else {
                continue;
            };
            let edges = graph.entry(b.owner.clone()).or_default();
            for o in l.waits_for(&Ask::of(w), Some(pos), self.now) {
                edges.push((b.key.clone(), o.to_vec()));
            }
        }
        if graph.len() < 2 {
            return Ok(());
        }
        for start in graph.keys() {
            let brute = reaches(&graph, start);
            let found = find_cycle(start, 1_000, |o: &Vec<u8>| graph.get(o).cloned());
            match (&found, brute) {
                (Search::Cycle(path), true) => {
                    let n = path.len();
                    for (i, (o, key)) in path.iter().enumerate() {
                        let next = &path[(i + 1) % n].0;
                        let ok = graph
                            .get(o)
                            .is_some_and(|es| es.iter().any(|(k, t)| k == key && t == next));
                        if !ok || path[0].0 != *start {
                            return fail(I::DeadlockSearch, format!("{path:?}\n{graph:?}"));
                        }
                    }
                }
                (Search::None, false) => {}
                _ => {
                    return fail(
                        I::DeadlockSearch,
                        format!("from {start:?}: {found:?}, brute force {brute}\n{graph:?}"),
                    );
                }
            }
        }
        Ok(())
    }

    /// Every lock (for the tests).
    pub fn locks(&self) -> impl Iterator<Item = &Lock> {
        self.keys.values()
    }

    /// The liveness phase: 40 s of time with every timer firing; then no
    /// connection waits and no lock has a hold or a place (a latch may stay,
    /// nobody waiting on it).
    pub fn liveness(&mut self) -> Result<(), Violation> {
        for _ in 0..80 {
            self.step(&Op::Advance {
                ms: 500,
                fire: true,
            })?;
        }
        if let Some((id, b)) = self.blocked.iter().next() {
            return fail(
                I::WaiterNeverAnswered,
                format!("waiter {id} ({:?}) at {:?} still waits", b.owner, b.key),
            );
        }
        if let Some((k, l)) = self
            .keys
            .iter()
            .find(|(_, l)| !l.holders().is_empty() || !l.waiters().is_empty())
        {
            return fail(I::LeaseNeverEnded, format!("{k:?} still {l:?}"));
        }
        Ok(())
    }
}

struct AcquireArgs {
    client: u64,
    key: Key,
    owner: Vec<u8>,
    kind: Kind,
    mode: u8,
    permits: u32,
    limit: u64,
    lease: u64,
    wait: u64,
    bind: bool,
    delay: u64,
}

/// Whether `start` is on a cycle: a depth-first walk of every path.
fn reaches(graph: &BTreeMap<Vec<u8>, Vec<(Key, Vec<u8>)>>, start: &Vec<u8>) -> bool {
    let mut seen: BTreeSet<&Vec<u8>> = BTreeSet::new();
    let mut stack: Vec<&Vec<u8>> = vec![start];
    while let Some(u) = stack.pop() {
        for (_, v) in graph.get(u).into_iter().flatten() {
            if v == start {
                return true;
            }
            if seen.insert(v) {
                stack.push(v);
            }
        }
    }
    false
}

fn same_state(a: &BTreeMap<Key, Lock>, b: &BTreeMap<Key, Lock>) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b.iter())
            .all(|((ka, la), (kb, lb))| ka == kb && view(la) == view(lb))
}

/// Applies a replication payload (whole state, delta, or empty: gone):
/// the token floor it carries.
fn apply_payload(keys: &mut BTreeMap<Key, Lock>, k: &Key, p: &[u8]) -> Result<u64, String> {
    if p.is_empty() {
        keys.remove(k);
        return Ok(0);
    }
    if codec::is_delta(p) {
        let d = codec::decode_delta(p).map_err(|e| format!("{e:?}"))?;
        let l = keys
            .get_mut(k)
            .ok_or_else(|| "a delta for a key that is not there".to_string())?;
        return l.apply_delta(d).map_err(|e| format!("{e:?}"));
    }
    let (l, floor) = codec::decode(p).map_err(|e| format!("{e:?}"))?;
    keys.insert(k.clone(), l);
    Ok(floor)
}
