//! The whole module under simulation: the same schedules ([`Op`]) sent as
//! DLOCK.* commands and keyspace operations to the real `libdlock.so`
//! loaded into the in-memory server of [`crate::host`]. Here nothing is
//! modelled: the commands, services, FFI and storage of `src/` run as they
//! do in a server, on simulated time, and the invariants below are checked
//! from the outside (INFO replies, the clients' replies), as SPEC words
//! them.
//!
//! Each schedule runs in a child process forked from one that has just
//! loaded the module, so every run starts from a freshly loaded module
//! (its thread-local registries, timers and counters included) at the
//! cost of a fork.

use crate::host::{self, Reply};
use crate::{Op, Violation, DBS, FRESH, KEYS, SLOTS};
use std::collections::BTreeMap;

/// The module args the simulated server loads with: SPEC's defaults
/// scaled to the schedules' time steps.
pub const MODULE_ARGS: &[&str] = &["fair-queue-timeout-ms", "300"];

/// Memory budget of the live state (see [`ModWorld::check`]).
const MEM_PER_LOCK: i64 = 4096;
const MEM_PER_ENTRY: i64 = 1024;
const MEM_FIXED: i64 = 256 * 1024;

/// A BIND grant: the connection, the owner and the key it holds (by the
/// key's identity, which follows RENAME, MOVE and SWAPDB).
struct BoundGrant {
    client: u64,
    owner: Vec<u8>,
    ident: u64,
}

/// A request a blocked connection waits on.
struct Pending {
    owner: Vec<u8>,
    db: i32,
    key: u8,
    bind: bool,
}

pub struct ModWorld {
    m: usize,
    slots: Vec<u64>,
    /// Sends the commands that never block (RELEASE, RENEW, ...), and INFO.
    admin: u64,
    pending: BTreeMap<usize, Pending>,
    /// (db, key) -> identity of the lock value there.
    ident: BTreeMap<(i32, u8), u64>,
    next_ident: u64,
    bound: Vec<BoundGrant>,
    /// Tokens granted per (db, key), for CHECK's picks.
    tokens: BTreeMap<(i32, u8), Vec<i64>>,
    /// Requests by a fresh owner so far (each names a new owner).
    fresh: u64,
    /// Module-owned bytes when the schedule began.
    baseline: i64,
    /// The largest memory excess seen over the budget (SIM_MEMSTAT).
    pub mem_peak: i64,
    /// The replica: its server, the master-link client, and how much of
    /// the master's stream it applied.
    replica: Option<(usize, u64, usize)>,
    /// Freshly loaded servers, for restarts, promotions and new replicas.
    spares: Vec<usize>,
    /// The highest token granted per key name, and every (key, owner,
    /// token) granted (a reentrant grant repeats its hold's token).
    max_token: BTreeMap<u8, i64>,
    /// `max_token` as it was when the step began.
    step_max: BTreeMap<u8, i64>,
    grants: std::collections::BTreeSet<(u8, Vec<u8>, i64)>,
}

fn key_name(k: u8) -> Vec<u8> {
    format!("k{k}").into_bytes()
}

/// A reply's text (a simple or bulk string), else empty.
fn text(r: Option<&Reply>) -> String {
    match r {
        Some(Reply::Simple(s)) => s.clone(),
        Some(Reply::Bulk(b)) => String::from_utf8_lossy(b).into_owned(),
        _ => String::new(),
    }
}

fn fail<T>(what: &'static str, detail: String) -> Result<T, Violation> {
    Err(Violation {
        step: 0,
        what,
        detail: format!("{detail}\nmodule log:\n{}", host::log_tail()),
    })
}

impl ModWorld {
    /// A world on the loaded server `m` (see [`load`]).
    pub fn new(m: usize, spares: &[usize]) -> ModWorld {
        let slots = (0..SLOTS).map(|_| host::connect(m)).collect();
        let admin = host::connect(m);
        let mut w = ModWorld {
            m,
            slots,
            admin,
            pending: BTreeMap::new(),
            ident: BTreeMap::new(),
            next_ident: 1,
            bound: Vec::new(),
            tokens: BTreeMap::new(),
            fresh: 0,
            baseline: 0,
            mem_peak: i64::MIN,
            replica: None,
            spares: spares.to_vec(),
            max_token: BTreeMap::new(),
            step_max: BTreeMap::new(),
            grants: std::collections::BTreeSet::new(),
        };
        w.new_replica();
        w.baseline = host::module_bytes();
        w
    }

    /// A spare becomes the replica, synced in full from the master's RDB.
    fn new_replica(&mut self) {
        self.replica = None;
        let Some(r) = self.spares.pop() else { return };
        host::set_role(r, true);
        host::rdb::load_snapshot(r, &host::rdb::save(self.m));
        let link = host::connect(r);
        self.replica = Some((r, link, host::stream_len(self.m)));
    }

    /// The clients reconnect to the (new) master: waits and BIND
    /// connections are gone with the old one.
    fn reconnect(&mut self) {
        self.slots = (0..SLOTS).map(|_| host::connect(self.m)).collect();
        self.admin = host::connect(self.m);
        self.pending.clear();
    }

    /// Owner `o`'s name; at or above [`FRESH`], a name never used before
    /// (as a UUID per request).
    fn owner_name(&mut self, o: u8) -> Vec<u8> {
        if o >= FRESH {
            self.fresh += 1;
            format!("f{}", self.fresh).into_bytes()
        } else {
            format!("o{o}").into_bytes()
        }
    }

    fn send(&self, client: u64, db: i32, argv: &[&[u8]]) -> Option<Reply> {
        let select = db.to_string();
        // Each connection's db: SELECT is the server's own command; the
        // host keeps the client's db, which the command's context reads.
        host::with(|h| {
            if let Some(c) = h.servers[self.m].clients.get_mut(&client) {
                c.db = db;
            }
        });
        let _ = select;
        host::command(self.m, client, argv)
    }

    fn ident_of(&mut self, db: i32, key: u8) -> u64 {
        if let Some(i) = self.ident.get(&(db, key)) {
            return *i;
        }
        let i = self.next_ident;
        self.next_ident += 1;
        self.ident.insert((db, key), i);
        i
    }

    /// A grant came back to `client`: note BIND grants and tokens.
    fn granted(
        &mut self,
        client: u64,
        db: i32,
        key: u8,
        owner: &[u8],
        bind: bool,
        token: i64,
    ) -> Result<(), Violation> {
        self.tokens.entry((db, key)).or_default().push(token);
        // Every new hold's token is above every token granted before for
        // that key, across restarts and promotions; a reentrant grant
        // answers its hold's token (SPEC, fencing token).
        // Grants answered in one turn of the event loop are compared with
        // the tokens of earlier steps only: a handoff that serves two
        // coexisting holds (permits, readers) in one pass may answer the
        // later one first (the server flushes a blocked client's reply
        // after its callback returns).
        let max = self.step_max.get(&key).copied().unwrap_or(0);
        let again = self.grants.contains(&(key, owner.to_vec(), token));
        if token <= max && !again {
            return fail(
                "a token not above the tokens before",
                format!(
                    "k{key}: {} granted {token}, not above {max} granted before",
                    String::from_utf8_lossy(owner)
                ),
            );
        }
        self.max_token.insert(key, max.max(token));
        self.grants.insert((key, owner.to_vec(), token));
        if bind {
            let ident = self.ident_of(db, key);
            self.bound.push(BoundGrant {
                client,
                owner: owner.to_vec(),
                ident,
            });
        }
        Ok(())
    }

    /// One step: the op, then a turn of the event loop, then the checks.
    pub fn step(&mut self, op: &Op) -> Result<(), Violation> {
        let m = self.m;
        self.step_max = self.max_token.clone();
        let mut fire = true;
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
                let s = slot as usize;
                let client = self.slots[s];
                if self.pending.contains_key(&s) {
                    return self.check(true);
                }
                let (k, o) = (key_name(key), self.owner_name(owner));
                let (lease, wait, delay) = (lease.to_string(), wait.to_string(), delay.to_string());
                let (limit, permits) = (limit.to_string(), permits.to_string());
                let mut argv: Vec<&[u8]> = match kind {
                    0 => vec![b"DLOCK.ACQUIRE", &k, &o],
                    1 => vec![
                        b"DLOCK.RWACQUIRE",
                        &k,
                        &o,
                        if mode == 1 { b"READ" } else { b"WRITE" },
                    ],
                    2 => vec![b"DLOCK.FAIRACQUIRE", &k, &o],
                    _ => vec![
                        b"DLOCK.SEMACQUIRE",
                        &k,
                        &o,
                        b"LIMIT",
                        limit.as_bytes(),
                        b"PERMITS",
                        permits.as_bytes(),
                    ],
                };
                argv.extend_from_slice(&[b"PX", lease.as_bytes()]);
                if wait != "0" {
                    argv.extend_from_slice(&[b"WAIT", wait.as_bytes()]);
                }
                if bind {
                    argv.push(b"BIND");
                }
                if delay != "0" {
                    argv.extend_from_slice(&[b"LOCKDELAY", delay.as_bytes()]);
                }
                let db = i32::from(db);
                match self.send(client, db, &argv) {
                    Some(Reply::Int(t)) => self.granted(client, db, key, &o, bind, t)?,
                    Some(_) => {}
                    None => {
                        self.pending.insert(
                            s,
                            Pending {
                                owner: o.clone(),
                                db,
                                key,
                                bind,
                            },
                        );
                    }
                }
            }
            Op::Release {
                db,
                key,
                owner,
                mode,
                permits,
            } => {
                let (k, o, p) = (key_name(key), self.owner_name(owner), permits.to_string());
                let mut argv: Vec<&[u8]> = vec![b"DLOCK.RELEASE", &k, &o];
                match mode {
                    1 => argv.push(b"READ"),
                    2 => argv.push(b"WRITE"),
                    _ => {}
                }
                if key == 3 {
                    argv.extend_from_slice(&[b"PERMITS", p.as_bytes()]);
                }
                self.send(self.admin, i32::from(db), &argv);
            }
            Op::Renew {
                db,
                key,
                owner,
                lease,
            } => {
                let (k, o, l) = (key_name(key), self.owner_name(owner), lease.to_string());
                self.send(
                    self.admin,
                    i32::from(db),
                    &[b"DLOCK.RENEW", &k, &o, b"PX", l.as_bytes()],
                );
            }
            Op::Force { db, key } => {
                let k = key_name(key);
                self.send(self.admin, i32::from(db), &[b"DLOCK.FORCERELEASE", &k]);
            }
            Op::Cancel { db, key, owner } => {
                let (k, o) = (key_name(key), self.owner_name(owner));
                self.send(self.admin, i32::from(db), &[b"DLOCK.CANCEL", &k, &o]);
            }
            Op::Check { db, key, pick } => {
                let t = self
                    .tokens
                    .get(&(i32::from(db), key))
                    .and_then(|v| v.iter().rev().nth(pick as usize).copied())
                    .unwrap_or(1)
                    .to_string();
                let k = key_name(key);
                self.send(
                    self.admin,
                    i32::from(db),
                    &[b"DLOCK.CHECK", &k, t.as_bytes()],
                );
            }
            Op::LatchSet { db, key, count } => {
                let (k, c) = (key_name(key), count.to_string());
                self.send(
                    self.admin,
                    i32::from(db),
                    &[b"DLOCK.LATCHSET", &k, c.as_bytes()],
                );
            }
            Op::Countdown { db, key } => {
                let k = key_name(key);
                self.send(self.admin, i32::from(db), &[b"DLOCK.COUNTDOWN", &k]);
            }
            Op::Await {
                slot,
                db,
                key,
                wait,
            } => {
                let s = slot as usize;
                if self.pending.contains_key(&s) {
                    return self.check(true);
                }
                let (k, w) = (key_name(key), wait.to_string());
                let client = self.slots[s];
                if self
                    .send(
                        client,
                        i32::from(db),
                        &[b"DLOCK.AWAIT", &k, b"WAIT", w.as_bytes()],
                    )
                    .is_none()
                {
                    self.pending.insert(
                        s,
                        Pending {
                            owner: Vec::new(),
                            db: i32::from(db),
                            key,
                            bind: false,
                        },
                    );
                }
            }
            Op::Kill { slot } => {
                let s = slot as usize;
                host::disconnect(m, self.slots[s]);
                self.pending.remove(&s);
                self.slots[s] = host::connect(m);
            }
            Op::Advance { ms, fire: f } => {
                host::advance(u64::from(ms));
                host::expire_due(m);
                fire = f;
            }
            Op::Jump { ms } => {
                let now = host::with(|h| h.now_us);
                host::set_now_us(now.saturating_add_signed(i64::from(ms) * 1000));
                fire = false;
            }
            Op::Del { db, key } => {
                if host::del(m, i32::from(db), &key_name(key)) {
                    self.ident.remove(&(i32::from(db), key));
                }
            }
            Op::Rename { db, key, to } => {
                let d = i32::from(db);
                let exists_to =
                    host::with(|h| h.servers[m].dbs[d as usize].contains_key(&key_name(to)));
                if !exists_to && host::rename(m, d, &key_name(key), &key_name(to)) {
                    // The lock's holds keep their tokens at the new name.
                    let moved: Vec<_> =
                        self.grants.iter().filter(|g| g.0 == key).cloned().collect();
                    for (_, o, t) in moved {
                        self.grants.insert((to, o, t));
                    }
                    let top = self.max_token.get(&key).copied().unwrap_or(0);
                    let e = self.max_token.entry(to).or_insert(0);
                    *e = (*e).max(top);
                    let i = self.ident.remove(&(d, key));
                    self.ident.remove(&(d, to));
                    if let Some(i) = i {
                        self.ident.insert((d, to), i);
                    }
                }
            }
            Op::Move { db, key, to } => {
                let (d, t) = (i32::from(db), i32::from(to));
                if host::move_key(m, d, &key_name(key), t) {
                    if let Some(i) = self.ident.remove(&(d, key)) {
                        self.ident.insert((t, key), i);
                    }
                }
            }
            Op::Restore { db, key } => {
                let d = i32::from(db);
                let k = key_name(key);
                if let Some(items) = host::rdb::dump(m, d, &k) {
                    if host::rdb::restore(m, d, &k, items) {
                        // A restored lock's bound holds end (SPEC, BIND).
                        self.ident.remove(&(d, key));
                    }
                }
            }
            Op::Expire { db, key, ms } => {
                let at = host::now_ms() + u64::from(ms);
                host::expire(m, i32::from(db), &key_name(key), Some(at));
            }
            Op::Persist { db, key } => {
                host::expire(m, i32::from(db), &key_name(key), None);
            }
            Op::Swapdb => {
                host::swapdb(m, 0, 1);
                self.ident = std::mem::take(&mut self.ident)
                    .into_iter()
                    .map(|((d, k), i)| ((1 - d, k), i))
                    .collect();
            }
            Op::Flushdb { db } => {
                host::flushdb(m, i32::from(db));
                self.ident.retain(|(d, _), _| *d != i32::from(db));
            }
            // A restart: a fresh server (a spare, loaded when the run
            // began) loads the master's RDB, or replays its AOF (the
            // replication stream since the start); the clients reconnect,
            // and a new replica syncs in full.
            Op::Restart { aof } => {
                if let Some(new) = self.spares.pop() {
                    if aof {
                        host::load_aof(m, new);
                    } else {
                        host::rdb::load_snapshot(new, &host::rdb::save(m));
                    }
                    self.m = new;
                    self.reconnect();
                    self.new_replica();
                    self.baseline = host::module_bytes();
                }
            }
            // The replica is promoted; the clients reconnect to it, and a
            // spare becomes the new replica.
            Op::Promote => {
                if let Some((r, _, _)) = self.replica {
                    host::set_role(r, false);
                    self.m = r;
                    self.reconnect();
                    self.new_replica();
                    self.baseline = host::module_bytes();
                }
            }
        }
        let m = self.m;
        host::turn(m, fire);
        self.collect()?;
        if let Some((r, link, at)) = self.replica {
            let at = host::apply_stream(m, r, at, link);
            host::turn(r, fire);
            self.replica = Some((r, link, at));
            self.check_replica(r)?;
        }
        if std::env::var_os("SIM_TRACE").is_some() {
            self.trace(op);
        }
        self.check(fire)
    }

    /// SIM_TRACE: the op, then INFO of every lock (on stderr).
    fn trace(&self, op: &Op) {
        eprintln!("t={} {op:?}", host::now_ms() % 1_000_000);
        for db in 0..i32::from(DBS) {
            for name in host::module_keys(self.m, db) {
                host::with(|h| {
                    if let Some(c) = h.servers[self.m].clients.get_mut(&self.admin) {
                        c.db = db;
                    }
                });
                if let Some(info) = host::command(self.m, self.admin, &[b"DLOCK.INFO", &name]) {
                    eprintln!("    db {db} {}: {info}", String::from_utf8_lossy(&name));
                }
            }
        }
    }

    /// SPEC: after each command a replica's INFO equals the master's (up to
    /// the clocks' difference: ttl, held_ms and waited_ms are left out).
    fn check_replica(&self, r: usize) -> Result<(), Violation> {
        let norm = |info: &Reply| -> String {
            let mut out = format!(
                "kind={} token={} limit={} count={}",
                text(info.field("kind")),
                info.field("token").and_then(Reply::int).unwrap_or(0),
                info.field("limit").and_then(Reply::int).unwrap_or(0),
                info.field("count").and_then(Reply::int).unwrap_or(0),
            );
            for h in info.field("holders").map(Reply::items).unwrap_or_default() {
                out += &format!(
                    " H({} {} {} {} {} {} {})",
                    text(h.field("owner")),
                    text(h.field("mode")),
                    h.field("count").and_then(Reply::int).unwrap_or(0),
                    h.field("token").and_then(Reply::int).unwrap_or(0),
                    h.field("expires_at").and_then(Reply::int).unwrap_or(0),
                    h.field("lockdelay").and_then(Reply::int).unwrap_or(0),
                    text(h.field("delayed")),
                );
            }
            for w in info.field("waiters").map(Reply::items).unwrap_or_default() {
                out += &format!(
                    " W({} {} {} {})",
                    text(w.field("owner")),
                    text(w.field("mode")),
                    w.field("expires_at").and_then(Reply::int).unwrap_or(0),
                    w.field("permits").and_then(Reply::int).unwrap_or(0),
                );
            }
            out
        };
        let link = self.replica.map_or(0, |(_, l, _)| l);
        for db in 0..i32::from(DBS) {
            let mut names = host::module_keys(self.m, db);
            names.extend(host::module_keys(r, db));
            names.sort();
            names.dedup();
            for name in names {
                let on = |server: usize, client: u64| {
                    host::with(|h| {
                        if let Some(c) = h.servers[server].clients.get_mut(&client) {
                            c.db = db;
                        }
                    });
                    host::command(server, client, &[b"DLOCK.INFO", &name]).unwrap_or(Reply::Null)
                };
                let (a, b) = (on(self.m, self.admin), on(r, link));
                let (na, nb) = (norm(&a), norm(&b));
                if na != nb {
                    return fail(
                        "the replica differs from the master",
                        format!(
                            "db {db} {}:\nmaster  {a}\nreplica {b}",
                            String::from_utf8_lossy(&name)
                        ),
                    );
                }
            }
        }
        Ok(())
    }

    /// Replies that reached blocked connections: grants and ends of waits.
    fn collect(&mut self) -> Result<(), Violation> {
        // In the order the server sent them.
        let mut got: Vec<(u64, usize, Reply)> = Vec::new();
        for s in 0..self.slots.len() {
            for (seq, r) in host::take_replies(self.m, self.slots[s]) {
                got.push((seq, s, r));
            }
        }
        got.sort_by_key(|g| g.0);
        for (_, s, r) in got {
            let client = self.slots[s];
            if let Some(p) = self.pending.remove(&s) {
                if let Reply::Int(t) = r {
                    if !p.owner.is_empty() {
                        let (db, key, owner, bind) = (p.db, p.key, p.owner.clone(), p.bind);
                        self.granted(client, db, key, &owner, bind, t)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// The invariants, from SPEC. `settled`: the event loop has run every
    /// timer due (checks that wait for the module's deferred work).
    fn check(&mut self, settled: bool) -> Result<(), Violation> {
        let now = host::now_ms() as i64;
        let mono = host::mono_ms();
        let settled = settled && host::next_timer(self.m).is_none_or(|t| t > mono);
        let (mut locks, mut entries) = (0i64, 0i64);
        for db in 0..i32::from(DBS) {
            for name in host::module_keys(self.m, db) {
                host::with(|h| {
                    if let Some(c) = h.servers[self.m].clients.get_mut(&self.admin) {
                        c.db = db;
                    }
                });
                let Some(info) = host::command(self.m, self.admin, &[b"DLOCK.INFO", &name]) else {
                    return fail("INFO blocked", String::from_utf8_lossy(&name).into_owned());
                };
                if info.is_err() || info == Reply::Null {
                    continue;
                }
                self.check_lock(db, &name, &info, now, settled)?;
                locks += 1;
                entries += info.field("holders").map_or(0, |h| h.items().len() as i64)
                    + info.field("waiters").map_or(0, |w| w.items().len() as i64);
            }
        }
        // Module-owned memory is bounded by the live state (SPEC: no leak
        // on a lock that never goes idle): what the module holds beyond
        // what it held at the start stays within a budget per lock and per
        // hold or place, plus a fixed allowance for bounded caches
        // (SLOWLOG entries, histograms, cached messages).
        if settled {
            let excess = host::module_bytes() - self.baseline;
            // The replica holds the same state.
            let copies = 1 + i64::from(self.replica.is_some());
            let over = excess - copies * (MEM_PER_LOCK * locks + MEM_PER_ENTRY * entries);
            self.mem_peak = self.mem_peak.max(over);
            if over > MEM_FIXED {
                return fail(
                    "module memory beyond its live state",
                    format!(
                        "{excess} B more than at the start, with {locks} locks and {entries} holds and places: \
                         {over} B over their budget ({MEM_PER_LOCK} B a lock, {MEM_PER_ENTRY} B a hold or place), \
                         more than the {MEM_FIXED} B allowance"
                    ),
                );
            }
        }
        Ok(())
    }

    fn check_lock(
        &self,
        db: i32,
        name: &[u8],
        info: &Reply,
        now: i64,
        settled: bool,
    ) -> Result<(), Violation> {
        let kind = text(info.field("kind"));
        let holders = info.field("holders").map(Reply::items).unwrap_or_default();
        let live: Vec<&Reply> = holders
            .iter()
            .filter(|h| {
                let delayed = h.field("delayed").is_some_and(|d| text(Some(d)) != "no");
                let ends = h
                    .field("expires_at")
                    .and_then(Reply::int)
                    .unwrap_or(i64::MAX);
                !delayed && ends > now
            })
            .collect();
        let owner = |h: &Reply| text(h.field("owner")).into_bytes();
        let mode = |h: &Reply| text(h.field("mode"));
        let key = String::from_utf8_lossy(name);
        // Mutual exclusion per kind.
        match kind.as_str() {
            "mutex" | "fair" if live.len() > 1 => {
                return fail("two holders of a mutex", format!("db {db} {key}: {info}"));
            }
            "rw" => {
                let writers: Vec<Vec<u8>> = live
                    .iter()
                    .filter(|h| mode(h) == "write")
                    .map(|h| owner(h))
                    .collect();
                if let Some(w) = writers.first() {
                    if live.iter().any(|h| owner(h) != *w) {
                        return fail(
                            "a writer with another holder",
                            format!("db {db} {key}: {info}"),
                        );
                    }
                }
            }
            "semaphore" => {
                let limit = info.field("limit").and_then(Reply::int).unwrap_or(i64::MAX);
                let held: i64 = live
                    .iter()
                    .filter_map(|h| h.field("permits").and_then(Reply::int))
                    .sum();
                if held > limit {
                    return fail("semaphore over its limit", format!("db {db} {key}: {info}"));
                }
            }
            _ => {}
        }
        // No grantable waiter is left waiting on the server once the event
        // loop has turned (SPEC: a release serves the next waiters; READ
        // is granted when no other owner holds WRITE and no writer waits
        // ahead; strict FIFO for the others). Delayed holds exclude as
        // they did; only waiters whose owner holds nothing are judged.
        if settled {
            let waiters = info.field("waiters").map(Reply::items).unwrap_or_default();
            let limit = info.field("limit").and_then(Reply::int).unwrap_or(0);
            let held: i64 = holders
                .iter()
                .filter_map(|h| h.field("permits").and_then(Reply::int))
                .sum();
            for (pos, w) in waiters.iter().enumerate() {
                if text(w.field("state")) != "blocked" {
                    continue;
                }
                let o = owner(w);
                if holders.iter().any(|h| owner(h) == o) {
                    continue;
                }
                let grantable = match kind.as_str() {
                    "mutex" | "fair" => pos == 0 && holders.is_empty(),
                    "semaphore" => {
                        let want = w.field("permits").and_then(Reply::int).unwrap_or(1);
                        pos == 0 && held + want <= limit
                    }
                    "rw" if mode(w) == "read" => {
                        !holders.iter().any(|h| mode(h) == "write")
                            && !waiters[..pos].iter().any(|e| mode(e) == "write")
                    }
                    "rw" => pos == 0 && holders.is_empty(),
                    _ => false,
                };
                if grantable {
                    return fail(
                        "a grantable waiter left waiting",
                        format!(
                            "db {db} {key}: waiter {} at {pos} could be granted: {info}",
                            String::from_utf8_lossy(&o)
                        ),
                    );
                }
            }
        }
        // No bound hold outlives its connection (SPEC, BIND): once the
        // event loop has run what was due, a live bound hold has a live
        // connection among those that were granted it with BIND here.
        if settled {
            let kidx = name
                .strip_prefix(b"k")
                .and_then(|d| std::str::from_utf8(d).ok())
                .and_then(|d| d.parse::<u8>().ok());
            let ident = kidx.and_then(|k| self.ident.get(&(db, k))).copied();
            for h in &live {
                if h.field("bound").and_then(Reply::int) != Some(1) {
                    continue;
                }
                let o = owner(h);
                let alive = ident.is_some_and(|i| {
                    self.bound
                        .iter()
                        .any(|g| g.ident == i && g.owner == o && self.slots.contains(&g.client))
                });
                if !alive {
                    return fail(
                        "a bound hold outlived its connection",
                        format!(
                            "db {db} {key}: holder {} is bound, and no connection that bound it is open: {info}",
                            String::from_utf8_lossy(&o)
                        ),
                    );
                }
            }
        }
        Ok(())
    }
}

/// Spare servers loaded beside the master: a schedule's restarts,
/// promotions and replicas take from them (one replica at the start, then
/// one server per restart or promotion and one per new replica).
pub const SPARES: usize = 5;

/// Loads the module at `path` into a new simulated server (the master),
/// and copies of it into [`SPARES`] more (a copy of the file each: each
/// copy has its own statics and thread-locals, so each is a server).
pub fn load(path: &str) -> Result<(usize, Vec<usize>), String> {
    let master = host::add_server(host::Lib::open(path, None)?, MODULE_ARGS, false)?;
    let mut spares = Vec::new();
    for i in 0..SPARES {
        let copy = std::env::temp_dir().join(format!("dlock-sim-{}-{i}.so", std::process::id()));
        let copy = copy.to_string_lossy().into_owned();
        let lib = host::Lib::open(path, Some(&copy));
        // The mapping stays; the file is not needed once loaded.
        let _ = std::fs::remove_file(&copy);
        spares.push(host::add_server(lib?, MODULE_ARGS, false)?);
    }
    Ok((master, spares))
}

/// Runs `ops` on the loaded servers in a forked child: the first
/// violation, with its step.
pub fn run(servers: &(usize, Vec<usize>), ops: &[Op]) -> Option<Violation> {
    in_child(|| {
        let mut w = ModWorld::new(servers.0, &servers.1);
        for (step, op) in ops.iter().enumerate() {
            if let Err(mut v) = w.step(op) {
                v.step = step;
                return Some(v);
            }
        }
        if std::env::var_os("SIM_MEMSTAT").is_some() {
            eprintln!("MEMPEAK {}", w.mem_peak);
        }
        None
    })
}

/// Runs `f` in a child process forked from this one and returns what it
/// returned (a violation travels back through a pipe as text).
fn in_child(f: impl FnOnce() -> Option<Violation>) -> Option<Violation> {
    let mut fds = [0i32; 2];
    // SAFETY: a two-int array for the pipe's ends.
    if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
        return Some(Violation {
            step: 0,
            what: "pipe failed",
            detail: String::new(),
        });
    }
    // SAFETY: this process is single-threaded; the child runs `f` and exits.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // SAFETY: the read end is the parent's.
        unsafe { libc::close(fds[0]) };
        let out = match f() {
            None => String::from("ok"),
            Some(v) => format!("{}\n{}\n{}", v.step, v.what, v.detail),
        };
        let b = out.as_bytes();
        let mut off = 0;
        while off < b.len() {
            // SAFETY: writing our buffer to the pipe.
            let n = unsafe { libc::write(fds[1], b[off..].as_ptr().cast(), b.len() - off) };
            if n <= 0 {
                break;
            }
            off += n as usize;
        }
        // SAFETY: end the child without running the parent's exit handlers.
        unsafe { libc::_exit(0) };
    }
    // SAFETY: the write end is the child's.
    unsafe { libc::close(fds[1]) };
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        // SAFETY: reading into our buffer.
        let n = unsafe { libc::read(fds[0], buf.as_mut_ptr().cast(), buf.len()) };
        if n <= 0 {
            break;
        }
        out.extend_from_slice(&buf[..n as usize]);
    }
    // SAFETY: our read end.
    unsafe { libc::close(fds[0]) };
    let mut status = 0;
    // SAFETY: reaping our child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    let text = String::from_utf8_lossy(&out).into_owned();
    if text == "ok" {
        return None;
    }
    if text.is_empty() {
        return Some(Violation {
            step: 0,
            what: "the server crashed",
            detail: format!("the simulated server's process ended with status {status} (a module abort or panic)"),
        });
    }
    let mut parts = text.splitn(3, '\n');
    let step = parts.next().and_then(|s| s.parse().ok()).unwrap_or(0);
    let what = parts.next().unwrap_or("");
    let detail = parts.next().unwrap_or("").to_string();
    Some(Violation {
        step,
        what: intern(what),
        detail,
    })
}

/// The invariant names as 'static strings (a violation's `what`).
fn intern(s: &str) -> &'static str {
    const NAMES: &[&str] = &[
        "two holders of a mutex",
        "a writer with another holder",
        "semaphore over its limit",
        "a bound hold outlived its connection",
        "a grantable waiter left waiting",
        "INFO blocked",
        "module memory beyond its live state",
        "a token not above the tokens before",
        "the replica differs from the master",
    ];
    NAMES
        .iter()
        .find(|n| **n == s)
        .copied()
        .unwrap_or("module world")
}

#[allow(dead_code)]
const _KEYS: u8 = KEYS;
