//! The whole module under simulation: the same schedules ([`Op`]) sent as
//! DLOCK.* commands and server commands to the real `libdlock.so` loaded
//! into the in-memory servers of [`crate::host`]. Here nothing is
//! modelled: the commands, services, FFI and storage of `src/` run as they
//! do in a server, on simulated time, and the invariants ([`check`]) are
//! checked from the outside: the replies, and each lock's value as the
//! type itself saves it (`rdb_save`), decoded into a `dlock_core::Lock`.
//!
//! The servers around the module are the host's, in the states a seed's
//! [`Profile`] draws: the server family (Redis 7.0, Redis 8, Valkey 8.1,
//! Valkey 9), CLIENT PAUSE and FAILOVER, a replica applying the stream
//! some steps late (a promotion drops what it had not applied), clocks
//! with offsets and drift, cluster slots on two masters with MIGRATE and
//! atomic slot migration, OOM, loading, CLIENT UNBLOCK, MULTI and scripts,
//! FENCED's inner commands on the host's keys.

mod check;
mod child;

use crate::host::{self, cluster, Family, Reply};
use crate::invariant::{fail, Invariant as I, Violation};
use crate::profile::{Profile, PROMOTION_GAP_MS};
use crate::spec::{view, View};
use crate::{coverage, Op, DBS, FENCED_CMDS, FRESH, SLOTS};
use dlock_core::Lock;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::hash::{Hash, Hasher};

pub use child::Outcome;

/// The module args the simulated servers load with: SPEC's defaults
/// scaled to the schedules' time steps, and a promotion gap the clock
/// offsets stay within (see [`Profile`]).
pub const MODULE_ARGS: &[&str] = &["fair-queue-timeout-ms", "300", "promotion-gap-ms", "5000"];

/// Servers loaded beside each family's master: a schedule's restarts,
/// promotions, replicas and second shard take from them (one replica at
/// the start, one per restart or promotion and one per new replica).
pub const SPARES: usize = 7;

/// The locks of a server by (db, key), as copies must agree on them.
type Locks = BTreeMap<(i32, Vec<u8>), View>;

/// A BIND grant: the connection, the owner, the key it holds (by the key's
/// identity, which follows RENAME, MOVE and SWAPDB), its token, and whether
/// it made the binding (a reentrant grant binds nothing): known from the
/// lock at the end of its step (None: two BIND grants of one turn got the
/// token, and the lock does not say which bound it).
struct BoundGrant {
    client: u64,
    owner: Vec<u8>,
    ident: u64,
    token: i64,
    binds: Option<bool>,
}

/// A request a connection waits on (blocked, or postponed by a pause).
struct Pending {
    owner: Vec<u8>,
    db: i32,
    key: u8,
    bind: bool,
}

/// The connections of one server: one per slot, one for the commands that
/// never block (RELEASE, RENEW, …), one for the probes of the checks.
struct Conns {
    slots: Vec<u64>,
    admin: u64,
    probe: u64,
}

impl Conns {
    fn open(server: usize) -> Conns {
        Conns {
            slots: (0..SLOTS).map(|_| host::connect(server)).collect(),
            admin: host::connect(server),
            probe: host::connect(server),
        }
    }
}

/// The replica of shard A: its server, its master link, and how far into
/// the master's stream it applied.
#[derive(Clone, Copy)]
struct Replica {
    server: usize,
    link: u64,
    at: usize,
}

pub struct ModWorld {
    p: Profile,
    /// Shard A's master (the only one outside cluster mode).
    m: usize,
    /// Shard B's master (cluster seeds).
    b: Option<usize>,
    conns: BTreeMap<usize, Conns>,
    /// Waiting requests by (server, slot).
    pending: BTreeMap<(usize, usize), Pending>,
    /// (db, key) -> identity of the lock value there.
    ident: BTreeMap<(i32, u8), u64>,
    next_ident: u64,
    bound: Vec<BoundGrant>,
    /// Tokens granted per (db, key), for CHECK's and FENCED's picks.
    tokens: BTreeMap<(i32, u8), Vec<i64>>,
    /// Requests by a fresh owner so far (each names a new owner).
    fresh: u64,
    /// Module-owned bytes when the schedule began (or the last restart).
    baseline: i64,
    /// The largest memory excess seen over the budget (SIM_MEMSTAT).
    pub mem_peak: i64,
    replica: Option<Replica>,
    /// The master's stream length at the end of each step (the lagging
    /// replica applies up to the one `lag` steps back).
    marks: VecDeque<usize>,
    /// The master's locks at the end of each recent step, by its stream
    /// length then: what the lagging replica must equal when it has
    /// applied that much.
    views: VecDeque<(usize, Locks)>,
    /// Freshly loaded servers, for restarts, promotions and new replicas.
    spares: Vec<usize>,
    /// The highest token granted per key name, and every (key, owner,
    /// token) granted (a reentrant grant repeats its hold's token).
    max_token: BTreeMap<u8, i64>,
    /// `max_token` as it was when the step began.
    step_max: BTreeMap<u8, i64>,
    grants: BTreeSet<(u8, Vec<u8>, i64)>,
    /// After a promotion: every new token of that server is at least this
    /// (the promoted replica's last token seen plus the gap).
    gap_floor: Option<(usize, i64)>,
    /// The servers made master by a promotion, a FAILOVER or a restart in
    /// this run (whose module prunes the places of connections it never
    /// had: finding A).
    promoted: BTreeSet<usize>,
    /// Each promotion of the run (FAILOVER's too): whether the replica
    /// lagged (the stream's tail lost).
    promotions: Vec<bool>,
    /// A FAILOVER in progress: the steps until the promotion.
    failover: Option<u8>,
    /// Slots whose keys left a server this step (their waiters there must
    /// be answered -MOVED): (server, slot).
    moved: Vec<(usize, u16)>,
    /// What the run did, hashed: every command and reply, every step's
    /// locks (waiter ids left out: they are drawn at random per process).
    trace: std::hash::DefaultHasher,
    /// Whether the trace hashes each step's locks too ([`trace_hash`]).
    tracing: bool,
    /// A loading server's answer that broke a rule (seen during a load).
    loading_failure: Option<Violation>,
    /// A command that left its connection in another db than it was sent
    /// in.
    db_changed: Option<String>,
    /// The BIND grants of this step, to check against the lock's holds.
    unverified: Vec<usize>,
}

pub(crate) fn key_name(k: u8) -> Vec<u8> {
    format!("k{k}").into_bytes()
}

/// The data key of FENCED's inner commands beside lock `k` (in its slot).
fn data_key(k: u8, name: &str) -> Vec<u8> {
    format!("{{k{k}}}{name}").into_bytes()
}

impl ModWorld {
    /// A world on the loaded servers of `p.family` (see [`load`]).
    pub fn new(set: &(usize, Vec<usize>), p: Profile) -> ModWorld {
        let (m, spares) = (set.0, set.1.clone());
        let mut all = vec![m];
        all.extend(&spares);
        for (i, s) in all.iter().enumerate() {
            let (offset, drift) = p.clocks.get(i).copied().unwrap_or((0, 0));
            host::set_clock(*s, offset, drift);
        }
        host::set_aof(m, p.aof);
        let mut w = ModWorld {
            p,
            m,
            b: None,
            conns: BTreeMap::new(),
            pending: BTreeMap::new(),
            ident: BTreeMap::new(),
            next_ident: 1,
            bound: Vec::new(),
            tokens: BTreeMap::new(),
            fresh: 0,
            baseline: 0,
            mem_peak: i64::MIN,
            replica: None,
            marks: VecDeque::new(),
            views: VecDeque::new(),
            spares,
            max_token: BTreeMap::new(),
            step_max: BTreeMap::new(),
            grants: BTreeSet::new(),
            gap_floor: None,
            promoted: BTreeSet::new(),
            promotions: Vec::new(),
            failover: None,
            moved: Vec::new(),
            trace: std::hash::DefaultHasher::new(),
            tracing: false,
            loading_failure: None,
            db_changed: None,
            unverified: Vec::new(),
        };
        w.spares.reverse();
        if p.cluster {
            // Shard B: a master of its own; each key's slot is served by
            // one shard (k1, k3, k5 by B at the start).
            let b = w.spares.pop();
            w.b = b;
            let mut nodes = vec![m];
            nodes.extend(b);
            cluster::enable(&nodes, m);
            if let Some(b) = b {
                for k in [1u8, 3, 5] {
                    cluster::assign(cluster::key_slot(&key_name(k)), b);
                }
            }
        }
        w.conns.insert(m, Conns::open(m));
        if let Some(b) = w.b {
            w.conns.insert(b, Conns::open(b));
        }
        w.new_replica();
        w.baseline = host::module_bytes();
        if p.skewed() {
            coverage::hit("skew");
        }
        w
    }

    /// The masters (shard A's, and shard B's in cluster seeds).
    fn masters(&self) -> Vec<usize> {
        let mut v = vec![self.m];
        v.extend(self.b);
        v
    }

    /// The db a command runs in (cluster mode has db 0 only).
    fn db(&self, d: u8) -> i32 {
        if self.p.cluster {
            0
        } else {
            i32::from(d)
        }
    }

    /// The master serving `key` (its slot's, in cluster seeds).
    fn node(&self, key: u8) -> usize {
        if self.p.cluster {
            cluster::owner(cluster::key_slot(&key_name(key)))
        } else {
            self.m
        }
    }

    fn conns(&mut self, server: usize) -> &mut Conns {
        self.conns
            .entry(server)
            .or_insert_with(|| Conns::open(server))
    }

    fn admin(&mut self, server: usize) -> u64 {
        self.conns(server).admin
    }

    /// A spare becomes shard A's replica, synced in full from the master's
    /// RDB (which it loads: the master's backlog exists from now on).
    fn new_replica(&mut self) {
        self.replica = None;
        let Some(r) = self.spares.pop() else { return };
        if self.p.cluster {
            cluster::join(r);
        }
        host::set_role(r, true);
        self.load_rdb(self.m, r);
        host::set_backlog(self.m);
        let link = host::connect(r);
        let at = host::stream_len(self.m);
        self.replica = Some(Replica {
            server: r,
            link,
            at,
        });
        self.marks.clear();
        self.views.clear();
    }

    /// `to` loads `from`'s RDB; halfway through, a connection asks it
    /// something (answered -LOADING, as a loading server answers).
    fn load_rdb(&mut self, from: usize, to: usize) {
        let snap = host::rdb::save(from);
        let mut failure = None;
        host::rdb::load_snapshot_with(to, &snap, &mut || {
            if failure.is_none() {
                failure = loading_probe(to).err();
            }
        });
        if self.loading_failure.is_none() {
            self.loading_failure = failure;
        }
    }

    /// The clients reconnect to the masters: waits and BIND connections
    /// of the servers that went away are gone.
    fn reconnect(&mut self) {
        // Unless the clients are eager, the new master turns once (its
        // timers due run: the jobs of its promotion or load) before they
        // reach it.
        if !self.p.eager_clients {
            host::turn(self.m, true);
        }
        let masters = self.masters();
        self.conns.retain(|s, _| masters.contains(s));
        self.pending.retain(|(s, _), _| masters.contains(s));
        self.conns(self.m);
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

    fn ident_of(&mut self, db: i32, key: u8) -> u64 {
        if let Some(i) = self.ident.get(&(db, key)) {
            return *i;
        }
        let i = self.next_ident;
        self.next_ident += 1;
        self.ident.insert((db, key), i);
        i
    }

    /// A grant came back to `client` of `server`: note BIND grants and
    /// tokens, and check the token rules.
    #[allow(clippy::too_many_arguments)]
    fn granted(
        &mut self,
        server: usize,
        client: u64,
        db: i32,
        key: u8,
        owner: &[u8],
        bind: bool,
        token: i64,
    ) -> Result<(), Violation> {
        self.tokens.entry((db, key)).or_default().push(token);
        // Every new hold's token is above every token granted before for
        // that key, across restarts, promotions and migrations; a
        // reentrant grant answers its hold's token (SPEC, fencing token).
        // Grants answered in one turn of the event loop are compared with
        // the tokens of earlier steps only: a handoff that serves two
        // coexisting holds (permits, readers) in one pass may answer the
        // later one first.
        let max = self.step_max.get(&key).copied().unwrap_or(0);
        let again = self.grants.contains(&(key, owner.to_vec(), token));
        if token <= max && !again {
            // Open finding C: the second of two promotions, of a replica
            // that lagged.
            let two = self.promotions.len() >= 2 && self.promotions.last() == Some(&true);
            return fail(
                if two && self.promoted.contains(&server) {
                    I::TokenRepeatedAfterTwoPromotions
                } else {
                    I::TokenNotAbove
                },
                format!(
                    "k{key}: {} granted {token}, not above {max} granted before",
                    String::from_utf8_lossy(owner)
                ),
            );
        }
        if let Some((s, floor)) = self.gap_floor {
            if s == server && !again && token < floor {
                return fail(
                    I::TokenUnderPromotionGap,
                    format!(
                        "k{key}: {} granted {token} after a promotion, under {floor} \
                         (the promoted replica's last token plus the {PROMOTION_GAP_MS} ms gap)",
                        String::from_utf8_lossy(owner)
                    ),
                );
            }
        }
        self.max_token.insert(key, max.max(token));
        self.grants.insert((key, owner.to_vec(), token));
        if bind {
            let ident = self.ident_of(db, key);
            self.unverified.push(self.bound.len());
            self.bound.push(BoundGrant {
                client,
                owner: owner.to_vec(),
                ident,
                token,
                binds: Some(!again),
            });
        }
        Ok(())
    }

    /// The BIND grants of this step, against the lock's holds (the order
    /// of the replies of one turn does not say which grant made a hold: a
    /// reentrant one may be answered first): a grant whose hold is unbound,
    /// or whose hold a BIND grant of an earlier step had, bound nothing; of
    /// this step's grants of a bound hold, the one alone with its token
    /// bound it, and two or more leave it open.
    fn verify_bindings(&mut self) {
        let fresh = std::mem::take(&mut self.unverified);
        for &i in &fresh {
            let Some(g) = self.bound.get(i) else { continue };
            let Ok(t) = u64::try_from(g.token) else {
                continue;
            };
            let Some((db, key)) = self
                .ident
                .iter()
                .find(|(_, id)| **id == g.ident)
                .map(|(k, _)| *k)
            else {
                continue;
            };
            let hold = check::decode_key(self.node(key), db, &key_name(key))
                .and_then(|l| l.holders().iter().find(|h| h.token == t).map(|h| h.bound));
            // (Tokens repeat across keys of two shards: each has its counter.)
            let same = fresh
                .iter()
                .filter(|j| {
                    self.bound
                        .get(**j)
                        .is_some_and(|o| o.token == g.token && o.ident == g.ident)
                })
                .count();
            let earlier = self
                .bound
                .iter()
                .enumerate()
                .any(|(j, o)| !fresh.contains(&j) && o.token == g.token && o.ident == g.ident);
            let binds = match hold {
                None => continue,
                Some(0) => Some(false),
                Some(_) if earlier => Some(false),
                Some(_) if same == 1 => Some(true),
                Some(_) => None,
            };
            if let Some(g) = self.bound.get_mut(i) {
                g.binds = binds;
            }
        }
    }

    /// Sends an acquire from the connection in `slot` of `server`: a grant
    /// is noted, a wait (or a postponed command) becomes pending.
    #[allow(clippy::too_many_arguments)]
    fn send_acquire(
        &mut self,
        server: usize,
        slot: usize,
        db: i32,
        key: u8,
        owner: Vec<u8>,
        bind: bool,
        argv: &[&[u8]],
    ) -> Result<(), Violation> {
        let client = self.conns(server).slots[slot];
        match self.send(server, client, db, argv) {
            Some(Reply::Int(t)) if !owner.is_empty() => {
                self.granted(server, client, db, key, &owner, bind, t)?
            }
            Some(_) => {}
            None => {
                self.pending.insert(
                    (server, slot),
                    Pending {
                        owner,
                        db,
                        key,
                        bind,
                    },
                );
            }
        }
        Ok(())
    }

    /// `client` of `server` sends `argv` in `db`: its reply (None: later),
    /// noted in the trace.
    fn send(&mut self, server: usize, client: u64, db: i32, argv: &[&[u8]]) -> Option<Reply> {
        let r = host::command_db(server, client, db, argv);
        argv.hash(&mut self.trace);
        r.hash(&mut self.trace);
        if std::env::var_os("SIM_TRACE_REPLIES").is_some() {
            let words: Vec<String> = argv
                .iter()
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            eprintln!("  > {} -> {r:?}", words.join(" "));
        }
        // SPEC: nothing the module does in reaction to a key event changes
        // the connection whose command caused it (its selected db).
        let now_in = host::with(|h| h.servers[server].clients.get(&client).map(|c| c.db));
        if r.is_some() && now_in.is_some_and(|d| d != db) && self.db_changed.is_none() {
            self.db_changed = Some(format!(
                "`{}` sent in db {db} left its connection in db {:?}",
                argv.iter()
                    .map(|a| String::from_utf8_lossy(a).into_owned())
                    .collect::<Vec<_>>()
                    .join(" "),
                now_in
            ));
        }
        r
    }

    /// A keyspace command on `server`'s admin connection; None when the
    /// server would postpone it (paused): then it is not sent, so that the
    /// bookkeeping of key identities stays what the server does.
    fn keyspace(&mut self, server: usize, db: i32, argv: &[&[u8]]) -> Option<Reply> {
        if host::paused(server) {
            return None;
        }
        let admin = self.admin(server);
        self.send(server, admin, db, argv)
    }

    /// One step: the op, then a turn of each server's event loop, the
    /// replica's share of the stream, then the checks.
    pub fn step(&mut self, op: &Op) -> Result<(), Violation> {
        self.step_max = self.max_token.clone();
        self.moved.clear();
        coverage::hit(coverage::op_name(op));
        // A violation the op itself saw comes first, but the step goes on
        // (its turn, the replica) so that a run passing over it (SIM_IGNORE)
        // continues as the server would.
        let (fire, early) = match self.apply(op) {
            Ok(fire) => (fire, None),
            Err(v) => (true, Some(v)),
        };
        let end = self.end_step(fire);
        match early {
            Some(v) => Err(v),
            None => end,
        }
    }

    /// The op itself: whether the timers due run at this step's turn.
    fn apply(&mut self, op: &Op) -> Result<bool, Violation> {
        let m = self.m;
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
                let (server, s, db) = (self.node(key), slot as usize, self.db(db));
                if self.pending.contains_key(&(server, s)) {
                    return Ok(true);
                }
                let (k, o) = (key_name(key), self.owner_name(owner));
                let (lease, wait, delay) = (lease.to_string(), wait.to_string(), delay.to_string());
                let (limit, permits) = (limit.to_string(), permits.to_string());
                let mut argv: Vec<&[u8]> =
                    acquire_argv(kind, mode, &k, &o, limit.as_bytes(), permits.as_bytes());
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
                self.send_acquire(server, s, db, key, o.clone(), bind, &argv)?;
            }
            Op::Release {
                db,
                key,
                owner,
                mode,
                permits,
            } => {
                let (server, db) = (self.node(key), self.db(db));
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
                let admin = self.admin(server);
                let r = self.send(server, admin, db, &argv);
                // SPEC: RELEASE always works, under OOM too.
                if let Some(Reply::Err(e)) = &r {
                    if e.starts_with("OOM") {
                        return fail(I::StateRule, format!("DLOCK.RELEASE refused: {e}"));
                    }
                }
            }
            Op::Renew {
                db,
                key,
                owner,
                lease,
            } => {
                let (server, db) = (self.node(key), self.db(db));
                let (k, o, l) = (key_name(key), self.owner_name(owner), lease.to_string());
                let admin = self.admin(server);
                self.send(
                    server,
                    admin,
                    db,
                    &[b"DLOCK.RENEW", &k, &o, b"PX", l.as_bytes()],
                );
            }
            Op::Force { db, key } => {
                let (server, db) = (self.node(key), self.db(db));
                let admin = self.admin(server);
                self.send(server, admin, db, &[b"DLOCK.FORCERELEASE", &key_name(key)]);
            }
            Op::Cancel { db, key, owner } => {
                let (server, db) = (self.node(key), self.db(db));
                let (k, o) = (key_name(key), self.owner_name(owner));
                let admin = self.admin(server);
                self.send(server, admin, db, &[b"DLOCK.CANCEL", &k, &o]);
            }
            Op::Check { db, key, pick } => {
                let (server, db) = (self.node(key), self.db(db));
                let t = self.pick_token(db, key, pick).to_string();
                let admin = self.admin(server);
                self.send(
                    server,
                    admin,
                    db,
                    &[b"DLOCK.CHECK", &key_name(key), t.as_bytes()],
                );
            }
            Op::LatchSet { db, key, count } => {
                let (server, db) = (self.node(key), self.db(db));
                let c = count.to_string();
                let admin = self.admin(server);
                self.send(
                    server,
                    admin,
                    db,
                    &[b"DLOCK.LATCHSET", &key_name(key), c.as_bytes()],
                );
            }
            Op::Countdown { db, key } => {
                let (server, db) = (self.node(key), self.db(db));
                let admin = self.admin(server);
                self.send(server, admin, db, &[b"DLOCK.COUNTDOWN", &key_name(key)]);
            }
            Op::Await {
                slot,
                db,
                key,
                wait,
            } => {
                let (server, s, db) = (self.node(key), slot as usize, self.db(db));
                if self.pending.contains_key(&(server, s)) {
                    return Ok(true);
                }
                let w = wait.to_string();
                let argv: [&[u8]; 4] = [b"DLOCK.AWAIT", &key_name(key), b"WAIT", w.as_bytes()];
                let oom = host::with(|h| h.servers[server].oom) && !host::paused(server);
                self.send_acquire(server, s, db, key, Vec::new(), false, &argv)?;
                // SPEC: AWAIT … WAIT takes a queue place and is refused with
                // OOM like the acquires, queuing nothing.
                if oom && self.pending.contains_key(&(server, s)) {
                    return fail(
                        I::StateRule,
                        format!("DLOCK.AWAIT k{key} WAIT {wait} waits under OOM"),
                    );
                }
            }
            Op::Kill { slot } => self.kill(slot as usize)?,
            Op::Advance { ms, fire } => {
                host::advance(u64::from(ms));
                for s in self.masters() {
                    host::expire_due(s);
                }
                return Ok(fire);
            }
            Op::Jump { ms } => {
                let now = host::with(|h| h.now_us);
                host::set_now_us(now.saturating_add_signed(i64::from(ms) * 1000));
                return Ok(false);
            }
            Op::Del { db, key } => {
                let (server, d) = (self.node(key), self.db(db));
                if let Some(Reply::Int(1)) = self.keyspace(server, d, &[b"DEL", &key_name(key)]) {
                    self.ident.remove(&(d, key));
                }
            }
            Op::Rename { db, key, to } => {
                let (server, d) = (self.node(key), self.db(db));
                let free =
                    host::with(|h| !h.servers[server].dbs[d as usize].contains_key(&key_name(to)));
                // (In cluster mode the two names are in two slots:
                // CROSSSLOT; not sent.)
                if free && !self.p.cluster && key != to {
                    let r = self.keyspace(server, d, &[b"RENAME", &key_name(key), &key_name(to)]);
                    if matches!(r, Some(Reply::Simple(_))) {
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
            }
            Op::Move { db, key, to } => {
                let (d, t) = (i32::from(db), i32::from(to));
                let server = self.node(key);
                let target = t.to_string();
                let r = self.keyspace(server, d, &[b"MOVE", &key_name(key), target.as_bytes()]);
                if let Some(Reply::Int(1)) = r {
                    if let Some(i) = self.ident.remove(&(d, key)) {
                        self.ident.insert((t, key), i);
                    }
                }
            }
            Op::Restore { db, key } => {
                let (server, d) = (self.node(key), self.db(db));
                let k = key_name(key);
                if let Some(Reply::Bulk(payload)) = self.keyspace(server, d, &[b"DUMP", &k]) {
                    let r = self.keyspace(server, d, &[b"RESTORE", &k, b"0", &payload, b"REPLACE"]);
                    if matches!(r, Some(Reply::Simple(_))) {
                        // A restored lock's bound holds end (SPEC, BIND).
                        self.ident.remove(&(d, key));
                    }
                }
            }
            Op::Expire { db, key, ms } => {
                let (server, d) = (self.node(key), self.db(db));
                let at = (host::server_now_ms(server) + u64::from(ms)).to_string();
                self.keyspace(server, d, &[b"PEXPIREAT", &key_name(key), at.as_bytes()]);
            }
            Op::Persist { db, key } => {
                let (server, d) = (self.node(key), self.db(db));
                self.keyspace(server, d, &[b"PERSIST", &key_name(key)]);
            }
            Op::Swapdb => {
                if !self.p.cluster && self.keyspace(m, 0, &[b"SWAPDB", b"0", b"1"]).is_some() {
                    self.ident = std::mem::take(&mut self.ident)
                        .into_iter()
                        .map(|((d, k), i)| ((1 - d, k), i))
                        .collect();
                }
            }
            Op::Flushdb { db } => {
                let d = self.db(db);
                for server in self.masters() {
                    if self.keyspace(server, d, &[b"FLUSHDB"]).is_some() {
                        let gone: Vec<(i32, u8)> = self
                            .ident
                            .keys()
                            .filter(|(x, k)| *x == d && self.node(*k) == server)
                            .copied()
                            .collect();
                        for k in gone {
                            self.ident.remove(&k);
                        }
                    }
                }
            }
            Op::Restart { aof } => self.restart(aof)?,
            Op::Promote => self.promote(),
            Op::Pause { all, ms } => {
                host::pause(m, all, u64::from(ms));
                coverage::hit("pause");
            }
            Op::Unpause => {
                if self.failover.is_none() {
                    host::unpause(m);
                }
            }
            Op::Failover => {
                if self.failover.is_none() && self.replica.is_some() {
                    // FAILOVER pauses writes until the replica has caught
                    // up, then promotes it.
                    host::pause(m, false, 60_000);
                    self.failover = Some(self.p.lag + 1);
                    coverage::hit("failover");
                }
            }
            Op::Oom { on } => {
                for s in self.masters() {
                    host::set_oom(s, on);
                }
                if on {
                    coverage::hit("OOM");
                }
            }
            Op::Unblock { slot, error } => self.unblock(slot as usize, error)?,
            Op::Copy { db, key, to, todb } => self.copy(db, key, to, todb)?,
            Op::Fenced { db, key, pick, cmd } => self.fenced(db, key, pick, cmd)?,
            Op::Atomic {
                slot,
                db,
                key,
                owner,
                kind,
                wait,
                lua,
            } => self.atomic(slot as usize, db, key, owner, kind, wait, lua)?,
            Op::Migrate { key, atomic } => self.migrate(key, atomic)?,
        }
        Ok(true)
    }

    /// Whether `token` is the token of a live hold of `l` (at `db`, `key` of
    /// `server`), as SPEC has it: its lease (or lock-delay) not over, and, if
    /// the hold is bound, the connection that bound it open there and the
    /// lock still the one it was bound in (RESTORE, a migration, a restart
    /// or a promotion end every bound hold).
    fn token_live(&self, server: usize, db: i32, key: u8, l: &Lock, token: i64, now: u64) -> bool {
        let Ok(t) = u64::try_from(token) else {
            return false;
        };
        if !l.token_live(t, now) {
            return false;
        }
        let bound = l.holders().iter().any(|h| h.token == t && h.bound != 0);
        if !bound {
            return true;
        }
        let ident = self.ident.get(&(db, key)).copied();
        let open = self
            .conns
            .get(&server)
            .map(|c| c.slots.clone())
            .unwrap_or_default();
        self.bound.iter().any(|g| {
            g.token == token
                && g.binds != Some(false)
                && Some(g.ident) == ident
                && open.contains(&g.client)
        })
    }

    /// The server whose connection in `slot` a kill or CLIENT UNBLOCK
    /// names: shard A's, or in cluster seeds shard B's for odd slots.
    fn slot_server(&self, slot: usize) -> usize {
        match self.b {
            Some(b) if slot % 2 == 1 => b,
            _ => self.m,
        }
    }

    /// The `pick`-th token granted for the key, from the newest (1 when
    /// none).
    fn pick_token(&self, db: i32, key: u8, pick: u8) -> i64 {
        self.tokens
            .get(&(db, key))
            .and_then(|v| v.iter().rev().nth(pick as usize).copied())
            .unwrap_or(1)
    }

    /// The connection in `slot` closes (on shard A; in cluster seeds the
    /// odd slots' on shard B), then — before the event loop turns, as the
    /// next commands of the same pipeline would — the probe asks CHECK
    /// and FENCED of every hold that connection bound: SPEC says no command
    /// after the kill sees such a hold.
    fn kill(&mut self, slot: usize) -> Result<(), Violation> {
        let server = self.slot_server(slot);
        let client = self.conns(server).slots[slot];
        host::disconnect(server, client);
        self.pending.remove(&(server, slot));
        let fresh = host::connect(server);
        self.conns(server).slots[slot] = fresh;
        if host::with(|h| h.servers[server].pause.is_some_and(|(all, _)| all)) {
            return Ok(());
        }
        for (db, key, token) in self.bound_tokens(server, client) {
            coverage::hit("kill probe");
            let probe = self.conns(server).probe;
            let t = token.to_string();
            let k = key_name(key);
            let seen = self.send(server, probe, db, &[b"DLOCK.CHECK", &k, t.as_bytes()]);
            if seen == Some(Reply::Int(1)) {
                return fail(
                    I::KilledHoldSeen,
                    format!(
                        "db {db} k{key}: DLOCK.CHECK of token {t} answered 1 right after the \
                         connection that bound it was closed"
                    ),
                );
            }
            if !host::paused(server) {
                let d = data_key(key, "fenced");
                let r = self.send(
                    server,
                    probe,
                    db,
                    &[b"DLOCK.FENCED", &k, t.as_bytes(), b"SET", &d, b"late"],
                );
                if matches!(r, Some(Reply::Simple(_))) {
                    return fail(
                        I::KilledHoldSeen,
                        format!(
                            "db {db} k{key}: DLOCK.FENCED with token {t} ran SET right after the \
                             connection that bound it was closed"
                        ),
                    );
                }
            }
        }
        Ok(())
    }

    /// CLIENT UNBLOCK of the connection in `slot`: its wait ends (TIMEOUT:
    /// answered as a time-out; ERROR: -UNBLOCKED), and the connection stays
    /// open, so the holds it bound stay (CHECK of each answers as before).
    fn unblock(&mut self, slot: usize, error: bool) -> Result<(), Violation> {
        let server = self.slot_server(slot);
        let client = self.conns(server).slots[slot];
        let bound = self.bound_tokens(server, client);
        let before = self.check_tokens(server, &bound);
        if host::client_unblock(server, client, error) == 1 {
            coverage::hit("CLIENT UNBLOCK");
        }
        let after = self.check_tokens(server, &bound);
        if before != after {
            return fail(
                I::BoundHoldOutlived,
                format!(
                    "CLIENT UNBLOCK {} of an open connection changed what CHECK says of its bound                      holds: {before:?} then {after:?}",
                    if error { "ERROR" } else { "TIMEOUT" }
                ),
            );
        }
        Ok(())
    }

    /// The tokens of the holds `client` of `server` bound (made with BIND),
    /// where their keys are now: (db, key, token).
    fn bound_tokens(&self, server: usize, client: u64) -> Vec<(i32, u8, i64)> {
        self.bound
            .iter()
            .filter(|g| g.client == client)
            .filter_map(|g| {
                if g.binds != Some(true) {
                    return None;
                }
                let token = g.token;
                let (db, key) = *self.ident.iter().find(|(_, i)| **i == g.ident)?.0;
                (self.node(key) == server).then_some((db, key, token))
            })
            .collect()
    }

    /// CHECK of each (db, key, token), on the probe connection (None for
    /// each when the server would not answer at once).
    fn check_tokens(&mut self, server: usize, tokens: &[(i32, u8, i64)]) -> Vec<Option<Reply>> {
        if host::with(|h| h.servers[server].pause.is_some_and(|(all, _)| all)) {
            return vec![None; tokens.len()];
        }
        let probe = self.conns(server).probe;
        tokens
            .iter()
            .map(|(db, key, t)| {
                let t = t.to_string();
                self.send(
                    server,
                    probe,
                    *db,
                    &[b"DLOCK.CHECK", &key_name(*key), t.as_bytes()],
                )
            })
            .collect()
    }

    /// COPY of a lock key: the server refuses a value of the module's
    /// type (no copy callback) and nothing changes.
    fn copy(&mut self, db: u8, key: u8, to: u8, todb: bool) -> Result<(), Violation> {
        let (server, d) = (self.node(key), self.db(db));
        // (In cluster mode two names of two slots: CROSSSLOT; not sent.)
        if self.p.cluster && key != to {
            return Ok(());
        }
        let target = if todb {
            (1 - d).to_string()
        } else {
            d.to_string()
        };
        let (src, dst) = (key_name(key), key_name(to));
        let mut argv: Vec<&[u8]> = vec![b"COPY", &src, &dst];
        if todb {
            argv.extend_from_slice(&[b"DB", target.as_bytes()]);
        }
        let dst_db = if todb { 1 - d } else { d };
        let is_lock = |s: usize, db: i32, k: &[u8]| {
            host::module_keys(s, db).iter().any(|n| n.as_slice() == k)
        };
        let before = check::decode_key(server, dst_db, &dst);
        let was_lock = is_lock(server, d, &src);
        let Some(r) = self.keyspace(server, d, &argv) else {
            return Ok(());
        };
        coverage::hit("COPY");
        let after = check::decode_key(server, dst_db, &dst);
        if was_lock && r == Reply::Int(1) || before != after {
            return fail(
                I::CopyOfLock,
                format!(
                    "COPY k{key} k{to}{}: {r}; the target was {before:?}, is {after:?}",
                    if todb { " DB other" } else { "" }
                ),
            );
        }
        Ok(())
    }

    /// DLOCK.FENCED with a picked token: it runs the command exactly when
    /// the token is live (else an error starting with FENCED), and then
    /// answers what a script running the command answers on this server.
    fn fenced(&mut self, db: u8, key: u8, pick: u8, cmd: u8) -> Result<(), Violation> {
        let (server, d) = (self.node(key), self.db(db));
        if host::paused(server) {
            return Ok(());
        }
        let Some(words) = FENCED_CMDS.get(usize::from(cmd)) else {
            return Ok(());
        };
        let inner: Vec<Vec<u8>> = words
            .iter()
            .enumerate()
            .map(|(i, w)| match *w {
                "data" | "data2" | "counter" | "list" | "st" if i > 0 => data_key(key, w),
                _ => w.as_bytes().to_vec(),
            })
            .collect();
        let inner_refs: Vec<&[u8]> = inner.iter().map(Vec::as_slice).collect();
        let token = self.pick_token(d, key, pick);
        let now = host::server_now_ms(server);
        // (A key whose TTL passed holds no lock for the command.)
        let live = host::key_alive(server, d, &key_name(key))
            && check::decode_key(server, d, &key_name(key))
                .is_some_and(|l| self.token_live(server, d, key, &l, token, now));
        let oracle = live.then(|| host::script_reply(server, d, &inner_refs));
        let t = token.to_string();
        let k = key_name(key);
        let mut argv: Vec<&[u8]> = vec![b"DLOCK.FENCED", &k, t.as_bytes()];
        argv.extend_from_slice(&inner_refs);
        let admin = self.admin(server);
        let Some(r) = self.send(server, admin, d, &argv) else {
            return Ok(());
        };
        coverage::hit("FENCED");
        let refused = matches!(&r, Reply::Err(e) if e.starts_with("FENCED "));
        let shown = words.join(" ");
        match oracle {
            None if !refused => fail(
                I::FencedTokenRule,
                format!("db {d} k{key}: FENCED with token {t} (not live) ran `{shown}`: {r}"),
            ),
            Some(_) if refused => fail(
                I::FencedTokenRule,
                format!("db {d} k{key}: FENCED with live token {t} refused `{shown}`: {r}"),
            ),
            Some(want) if want.is_err() != r.is_err() || !want.is_err() && want != r => fail(
                I::FencedNotAsScript,
                format!(
                    "db {d} k{key} on {:?}: FENCED … `{shown}` answered {r}; a script running \
                     it answers {want}",
                    self.p.family
                ),
            ),
            _ => Ok(()),
        }
    }

    /// An acquire inside MULTI/EXEC, or a script: WAIT acts as 0, so the
    /// module must not block (the server would answer an error).
    #[allow(clippy::too_many_arguments)]
    fn atomic(
        &mut self,
        slot: usize,
        db: u8,
        key: u8,
        owner: u8,
        kind: u8,
        wait: u16,
        lua: bool,
    ) -> Result<(), Violation> {
        let (server, d) = (self.node(key), self.db(db));
        if host::paused(server) || self.pending.contains_key(&(server, slot)) {
            return Ok(());
        }
        let (k, o) = (key_name(key), self.owner_name(owner));
        let w = wait.to_string();
        let mut argv: Vec<&[u8]> = acquire_argv(kind, 2, &k, &o, b"3", b"1");
        argv.extend_from_slice(&[b"PX", b"1000", b"WAIT", w.as_bytes()]);
        let client = self.conns(server).slots[slot];
        let r = if lua {
            host::script_command(server, client, d, &argv)
        } else {
            let multi = self.send(server, client, d, &[b"MULTI"]);
            if multi != Some(Reply::Simple("OK".into())) {
                return Ok(());
            }
            self.send(server, client, d, &argv);
            match self.send(server, client, d, &[b"EXEC"]) {
                Some(Reply::Array(mut v)) if v.len() == 1 => v.pop(),
                other => other,
            }
        };
        coverage::hit("MULTI/script");
        match r {
            Some(Reply::Err(e)) if e.contains("Blocking module command") => fail(
                I::BlockedInTransaction,
                format!(
                    "db {d} k{key}: {} with WAIT {wait} in {}: {e}",
                    String::from_utf8_lossy(argv[0]),
                    if lua { "a script" } else { "MULTI" }
                ),
            ),
            None => fail(
                I::BlockedInTransaction,
                format!(
                    "db {d} k{key}: {} with WAIT {wait} in {} left the connection waiting",
                    String::from_utf8_lossy(argv[0]),
                    if lua { "a script" } else { "MULTI" }
                ),
            ),
            Some(Reply::Int(t)) if kind < 4 => self.granted(server, client, d, key, &o, false, t),
            _ => Ok(()),
        }
    }

    /// Cluster seeds: the key's slot moves to the other shard — MIGRATE and
    /// the slot handed over, or Valkey 9's atomic slot migration.
    fn migrate(&mut self, key: u8, atomic: bool) -> Result<(), Violation> {
        let Some(b) = self.b else { return Ok(()) };
        let slot = cluster::key_slot(&key_name(key));
        let src = cluster::owner(slot);
        let dst = if src == self.m { b } else { self.m };
        if host::paused(src) || host::paused(dst) {
            return Ok(());
        }
        let before = check::decode_key(src, 0, &key_name(key)).map(|l| view(&l));
        // A slot that moves without a lock at the key moves no token
        // counter: the target issues from its own, which may be at or below
        // tokens the source issued for that key (the same microsecond, or a
        // source promoted past the gap). The token order of the key starts
        // again there (a limit of tokens in cluster mode, reported).
        if !host::module_keys(src, 0).contains(&key_name(key)) {
            self.max_token.remove(&key);
            self.grants.retain(|g| g.0 != key);
            coverage::hit("migrate without a lock");
        }
        let done = if atomic && self.p.family == Family::Valkey9 {
            let n = cluster::migrate_slot_atomic(src, dst, slot);
            if n.is_some() {
                coverage::hit("slot migration");
            }
            n
        } else {
            coverage::hit("migrate");
            Some(cluster::migrate_slot(src, dst, slot))
        };
        if done.is_some() {
            // Bound holds end on a server that receives the lock.
            self.ident.remove(&(0, key));
            self.moved.push((src, slot));
            // SPEC: the lock moves with its slot as it was — holders, absolute
            // lease ends, tokens, queues (its bound holds end on the target
            // afterwards, its waiting connections are redirected).
            let after = check::decode_key(dst, 0, &key_name(key)).map(|l| view(&l));
            if before.is_some() && after != before {
                return fail(
                    I::PersistenceChangedState,
                    format!(
                        "k{key} moved from server {src} to {dst} ({}):\nbefore {before:?}\nafter  {after:?}",
                        if atomic && self.p.family == Family::Valkey9 {
                            "atomic slot migration"
                        } else {
                            "MIGRATE"
                        }
                    ),
                );
            }
        }
        Ok(())
    }

    /// A restart: a fresh server (a spare) loads the master's RDB, or
    /// replays its AOF (the stream since the start, LOADING set); the
    /// clients reconnect, and a new replica syncs in full.
    fn restart(&mut self, aof: bool) -> Result<(), Violation> {
        let Some(new) = self.spares.pop() else {
            return Ok(());
        };
        let old = self.m;
        if self.p.cluster {
            cluster::join(new);
        }
        // The same machine: its clock.
        host::set_clock_raw(new, host::clock(old));
        if aof {
            host::load_aof(old, new);
            if host::with(|h| h.servers[new].loading) {
                return fail(I::StateRule, "the AOF load never ended".into());
            }
        } else {
            self.load_rdb(old, new);
        }
        host::set_aof(new, self.p.aof);
        self.promoted.insert(new);
        self.retire(old);
        self.m = new;
        cluster::replace(old, new);
        self.reconnect();
        self.new_replica();
        self.baseline = host::module_bytes();
        Ok(())
    }

    /// A server leaves the simulation (its process is gone): its
    /// connections close without events (nothing of it runs any more).
    fn retire(&mut self, server: usize) {
        host::with(|h| {
            let s = &mut h.servers[server];
            s.clients.clear();
            s.pause = None;
        });
        self.conns.remove(&server);
        self.pending.retain(|(s, _), _| *s != server);
    }

    /// The replica is promoted with what it had applied (a lagging one
    /// loses the tail of the stream, as asynchronous replication loses
    /// it); the clients reconnect to it, and a spare becomes the new
    /// replica.
    fn promote(&mut self) {
        let Some(r) = self.replica else { return };
        let lagged = host::stream_len(self.m) > r.at;
        if lagged {
            coverage::hit("lagging promotion");
        }
        self.promotions.push(lagged);
        // Every token the promoted server can have seen: its counter (the
        // type's aux data) and its locks' tokens.
        let seen = host::rdb::last_token(r.server);
        host::set_role(r.server, false);
        self.promoted.insert(r.server);
        self.gap_floor = Some((
            r.server,
            seen.saturating_add(PROMOTION_GAP_MS as i64 * 1000),
        ));
        let old = self.m;
        self.retire(old);
        self.m = r.server;
        cluster::replace(old, r.server);
        host::set_aof(r.server, self.p.aof);
        self.replica = None;
        self.reconnect();
        self.new_replica();
        self.baseline = host::module_bytes();
    }

    /// FAILOVER's end: the replica has caught up (writes were paused), it
    /// is promoted, and the old master becomes its replica (its blocked
    /// clients are answered -UNBLOCKED; its postponed ones, now on a
    /// replica, get -READONLY for their writes); the clients follow the
    /// new master.
    fn finish_failover(&mut self) {
        self.failover = None;
        let Some(r) = self.replica else {
            host::unpause(self.m);
            return;
        };
        let old = self.m;
        self.promotions.push(false);
        host::apply_stream(old, r.server, r.at, r.link);
        host::turn(r.server, true);
        let seen = host::rdb::last_token(r.server);
        host::set_role(r.server, false);
        self.promoted.insert(r.server);
        self.gap_floor = Some((
            r.server,
            seen.saturating_add(PROMOTION_GAP_MS as i64 * 1000),
        ));
        host::set_role(old, true);
        host::unblock_all(old);
        host::unpause(old);
        host::turn(old, true);
        // The clients of the old master move to the new one.
        let conns = self.conns.remove(&old);
        if let Some(c) = conns {
            for id in c.slots.iter().chain([&c.admin, &c.probe]) {
                host::disconnect(old, *id);
            }
        }
        self.pending.retain(|(s, _), _| *s != old);
        self.m = r.server;
        cluster::replace(old, r.server);
        host::set_aof(r.server, self.p.aof);
        let link = host::connect(old);
        self.replica = Some(Replica {
            server: old,
            link,
            at: host::stream_len(r.server),
        });
        if !self.p.eager_clients {
            host::turn(r.server, true);
        }
        self.conns(r.server);
        host::set_backlog(r.server);
        self.marks.clear();
        self.views.clear();
        self.baseline = host::module_bytes();
    }

    /// After the op: a turn of each master's event loop, the replies, the
    /// replica's share of the stream, a FAILOVER's progress, the checks.
    fn end_step(&mut self, fire: bool) -> Result<(), Violation> {
        for s in self.masters() {
            host::turn(s, fire);
        }
        self.collect()?;
        self.verify_bindings();
        if let Some(n) = self.failover {
            if n == 0 {
                self.finish_failover();
            } else {
                self.failover = Some(n - 1);
            }
        }
        self.marks.push_back(host::stream_len(self.m));
        while self.marks.len() > usize::from(self.p.lag) + 1 {
            self.marks.pop_front();
        }
        if let Some(r) = self.replica {
            // The replica applies the stream as it was `lag` steps ago.
            let upto = if self.p.lag == 0 {
                usize::MAX
            } else {
                self.marks.front().copied().unwrap_or(r.at)
            };
            let at = host::apply_stream_to(self.m, r.server, r.at, upto, r.link);
            host::turn(r.server, fire);
            self.replica = Some(Replica { at, ..r });
        }
        if let Some(a) = host::aborted() {
            return fail(I::ServerAborted, a);
        }
        if let Some(v) = self.loading_failure.take() {
            return Err(v);
        }
        if let Some(d) = self.db_changed.take() {
            return fail(I::StateRule, d);
        }
        if std::env::var_os("SIM_TRACE").is_some() {
            self.trace();
        }
        self.check(fire)
    }

    /// Replies that reached waiting connections: grants, ends of waits,
    /// redirects.
    fn collect(&mut self) -> Result<(), Violation> {
        // In the order the servers sent them.
        let mut got: Vec<(u64, usize, usize, Reply)> = Vec::new();
        let servers: Vec<(usize, Vec<u64>, u64)> = self
            .conns
            .iter()
            .map(|(s, c)| (*s, c.slots.clone(), c.admin))
            .collect();
        for (server, slots, admin) in servers {
            for (i, client) in slots.iter().enumerate() {
                for (seq, r) in host::take_replies(server, *client) {
                    got.push((seq, server, i, r));
                }
            }
            // The admin connection's late replies (after a pause) are
            // nobody's to check.
            host::take_replies(server, admin);
        }
        got.sort_by_key(|g| g.0);
        for (_, server, s, r) in got {
            (server, s, &r).hash(&mut self.trace);
            let client = self.conns(server).slots[s];
            let Some(p) = self.pending.remove(&(server, s)) else {
                continue;
            };
            let redirected = self
                .moved
                .iter()
                .any(|(src, slot)| *src == server && cluster::key_slot(&key_name(p.key)) == *slot);
            if redirected && !matches!(&r, Reply::Err(e) if e.starts_with("MOVED")) {
                return fail(
                    I::WaiterNotRedirected,
                    format!(
                        "k{} moved away from server {server}: its waiter was answered {r}",
                        p.key
                    ),
                );
            }
            if let Reply::Int(t) = r {
                if !p.owner.is_empty() {
                    let (db, key, owner, bind) = (p.db, p.key, p.owner.clone(), p.bind);
                    self.granted(server, client, db, key, &owner, bind, t)?;
                }
            }
        }
        for (src, slot) in &self.moved {
            if let Some(((_, s), p)) = self.pending.iter().find(|((server, _), p)| {
                server == src && cluster::key_slot(&key_name(p.key)) == *slot
            }) {
                return fail(
                    I::WaiterNotRedirected,
                    format!(
                        "k{} moved away from server {src}: the connection in slot {s} still waits there",
                        p.key
                    ),
                );
            }
        }
        Ok(())
    }

    /// SIM_TRACE: the step's state (on stderr).
    fn trace(&self) {
        eprintln!(
            "t={} m={} replica={:?} paused={:?} next timer={:?} mono={} pending={:?}",
            host::now_ms() % 1_000_000,
            self.m,
            self.replica.map(|r| (r.server, r.at)),
            host::with(|h| h.servers[self.m].pause),
            host::next_timer(self.m),
            host::mono_ms(),
            self.pending
                .iter()
                .map(|((s, slot), p)| (*s, *slot, String::from_utf8_lossy(&p.owner).into_owned()))
                .collect::<Vec<_>>()
        );
        let stream = host::with(|h| h.servers[self.m].repl.clone());
        for (db, argv) in stream.iter().rev().take(4).rev() {
            let words: Vec<String> = argv
                .iter()
                .take(2)
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            eprintln!("    stream (db {db}): {}", words.join(" "));
        }
        for s in self.masters() {
            for db in 0..i32::from(DBS) {
                for name in host::module_keys(s, db) {
                    eprintln!(
                        "    server {s} db {db} {}: {:?}",
                        String::from_utf8_lossy(&name),
                        check::decode_key(s, db, &name)
                    );
                }
            }
        }
    }

    /// The liveness phase, after the schedule: every fault is healed (the
    /// pause and OOM end, a failover completes, the replica catches up),
    /// then time runs forward with every timer firing: every waiting
    /// connection must be answered and every lease end (nothing renews).
    pub fn liveness(&mut self) -> Result<(), Violation> {
        coverage::hit("liveness");
        if self.failover.is_some() {
            self.finish_failover();
        }
        for s in self.masters() {
            host::unpause(s);
            host::set_oom(s, false);
        }
        self.p.lag = 0;
        for _ in 0..80 {
            self.step_max = self.max_token.clone();
            self.moved.clear();
            host::advance(500);
            for s in self.masters() {
                host::expire_due(s);
            }
            self.end_step(true)?;
        }
        if let Some(((server, slot), p)) = self.pending.iter().next() {
            return fail(
                I::WaiterNeverAnswered,
                format!(
                    "the connection in slot {slot} of server {server} still waits on k{} (owner {}) \
                     40 s after every fault healed",
                    p.key,
                    String::from_utf8_lossy(&p.owner)
                ),
            );
        }
        for s in self.masters() {
            for db in 0..i32::from(DBS) {
                for name in host::module_keys(s, db) {
                    if let Some(l) = check::decode_key(s, db, &name) {
                        if !l.holders().is_empty() || l.has_blocked() {
                            return fail(
                                I::LeaseNeverEnded,
                                format!(
                                    "server {s} db {db} {}: still {l:?} 40 s after every fault \
                                     healed and nothing renewed",
                                    String::from_utf8_lossy(&name)
                                ),
                            );
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

/// A command sent to a loading server: refused with -LOADING (no DLOCK
/// command has `allow-loading`; a read, so that a loading replica does not
/// answer -READONLY first).
fn loading_probe(server: usize) -> Result<(), Violation> {
    let c = host::connect(server);
    let r = host::command(server, c, &[b"DLOCK.CHECK", b"k0", b"1"]);
    host::with(|h| h.servers[server].clients.remove(&c));
    coverage::hit("loading");
    match r {
        Some(Reply::Err(e)) if e.starts_with("LOADING") => Ok(()),
        other => fail(
            I::StateRule,
            format!("a loading server answered DLOCK.CHECK with {other:?}, not -LOADING"),
        ),
    }
}

/// The acquire command of `kind` (0 ACQUIRE, 1 RWACQUIRE with `mode` 1
/// READ or 2 WRITE, 2 FAIRACQUIRE, 3 SEMACQUIRE with LIMIT and PERMITS).
fn acquire_argv<'a>(
    kind: u8,
    mode: u8,
    k: &'a [u8],
    o: &'a [u8],
    limit: &'a [u8],
    permits: &'a [u8],
) -> Vec<&'a [u8]> {
    match kind {
        0 => vec![b"DLOCK.ACQUIRE", k, o],
        1 => vec![
            b"DLOCK.RWACQUIRE",
            k,
            o,
            if mode == 1 { b"READ" } else { b"WRITE" },
        ],
        2 => vec![b"DLOCK.FAIRACQUIRE", k, o],
        _ => vec![
            b"DLOCK.SEMACQUIRE",
            k,
            o,
            b"LIMIT",
            limit,
            b"PERMITS",
            permits,
        ],
    }
}

/// The servers loaded for each family: its master and [`SPARES`] more.
pub struct Servers {
    sets: BTreeMap<Family, (usize, Vec<usize>)>,
}

impl Servers {
    fn of(&self, family: Family) -> Option<&(usize, Vec<usize>)> {
        self.sets.get(&family)
    }
}

/// Loads the module at `path` into a set of servers for each family (the
/// master and [`SPARES`] more): a copy of the file each — each copy has
/// its own statics and thread-locals, so each is a server.
pub fn load(path: &str) -> Result<Servers, String> {
    // Copies only, even of the first: two loads (two threads of a test
    // binary) must not share a module instance.
    static COPIES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let mut sets = BTreeMap::new();
    for family in Family::ALL {
        let mut set = Vec::new();
        for _ in 0..=SPARES {
            let n = COPIES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let copy =
                std::env::temp_dir().join(format!("dlock-sim-{}-{n}.so", std::process::id()));
            let copy = copy.to_string_lossy().into_owned();
            let lib = host::Lib::open(path, Some(&copy));
            // The mapping stays; the file is not needed once loaded.
            let _ = std::fs::remove_file(&copy);
            set.push(host::add_server(lib?, MODULE_ARGS, family)?);
        }
        let master = set.remove(0);
        sets.insert(family, (master, set));
    }
    Ok(Servers { sets })
}

/// Runs `ops` on the default profile (see [`run_with`]).
pub fn run(servers: &Servers, ops: &[Op]) -> Option<Violation> {
    run_with(servers, &Profile::default(), ops)
}

/// Runs `ops` with profile `p` on the loaded servers, in a forked child:
/// the first violation, with its step (the liveness phase's as the step
/// after the last).
pub fn run_with(servers: &Servers, p: &Profile, ops: &[Op]) -> Option<Violation> {
    run_counted(servers, p, ops).violation
}

/// [`run_with`], passing over violations of the invariants in `ignore`
/// (see SIM_IGNORE).
pub fn run_ignoring(servers: &Servers, p: &Profile, ops: &[Op], ignore: &[I]) -> Option<Violation> {
    run_outcome(servers, p, ops, ignore.to_vec()).violation
}

/// [`run_with`], with what the run covered.
pub fn run_counted(servers: &Servers, p: &Profile, ops: &[Op]) -> Outcome {
    run_outcome(servers, p, ops, ignored())
}

fn run_outcome(servers: &Servers, p: &Profile, ops: &[Op], ignore: Vec<I>) -> Outcome {
    let Some(set) = servers.of(p.family) else {
        return child::in_child(|| {
            Some(Violation {
                step: 0,
                what: I::Harness,
                detail: format!("no servers loaded for {:?}", p.family),
            })
        });
    };
    let p = *p;
    child::in_child(move || {
        let mut w = ModWorld::new(set, p);
        for (step, op) in ops.iter().enumerate() {
            match w.step(op) {
                Err(v) if ignore.contains(&v.what) => {
                    // Surveying past a known finding: the run goes on as if
                    // the server had not stopped.
                    host::with(|h| h.aborted = None);
                }
                Err(mut v) => {
                    v.step = step;
                    return Some(v);
                }
                Ok(()) => {}
            }
        }
        if let Err(mut v) = w.liveness() {
            v.step = ops.len();
            return Some(v);
        }
        if std::env::var_os("SIM_MEMSTAT").is_some() {
            eprintln!("MEMPEAK {}", w.mem_peak);
        }
        None
    })
}

/// The invariants SIM_IGNORE names (comma-separated, as printed): their
/// violations are passed over, so that a survey of many seeds goes past a
/// known finding (a fix not merged yet) to what else there is.
fn ignored() -> Vec<I> {
    std::env::var("SIM_IGNORE")
        .unwrap_or_default()
        .split(',')
        .filter_map(|n| I::from_name(n.trim()))
        .collect()
}

/// A trace of `ops` under `p`: a hash of every reply and every entry of
/// every stream (the same seed must give the same trace whatever the
/// process's hash seeds: no outcome may depend on map order).
pub fn trace_hash(servers: &Servers, p: &Profile, ops: &[Op]) -> Option<u64> {
    let set = servers.of(p.family)?;
    let p = *p;
    let out = child::in_child(move || {
        let mut w = ModWorld::new(set, p);
        w.tracing = true;
        let steps = std::env::var("SIM_TRACE_HASH").is_ok_and(|v| v == "steps");
        for (i, op) in ops.iter().enumerate() {
            let _ = w.step(op);
            if steps {
                eprintln!("step {i} {} {op:?}", w.trace.finish());
            }
        }
        let _ = w.liveness();
        let h = w.trace.finish();
        Some(Violation {
            step: 0,
            what: I::Harness,
            detail: format!("{h}"),
        })
    });
    out.violation.and_then(|v| v.detail.parse().ok())
}
