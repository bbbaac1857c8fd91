//! Failover chaos harness: 1 master, 2 replicas (the module on each), 3
//! Sentinels; worker threads acquire, renew and release locks of every kind
//! (mutex, fair, rw, semaphore) with fenced writes
//! (`DLOCK.FENCED key token RPUSH log:<key> token`), while rounds of three
//! scenarios fail the master over:
//!
//! - (a) **cut**: both replicas frozen (SIGSTOP) and their links cut at the
//!   master (`CLIENT KILL TYPE replica`, what a partition does to them), the
//!   harness takes a grant, the master is SIGKILLed, the replicas continued,
//!   and a chosen replica promoted (`SENTINEL FAILOVER` with its
//!   `replica-priority` lowest: deterministic);
//! - (b) **kill**: SIGKILL of the master under load, the Sentinels fail over
//!   on their own;
//! - (c) **planned**: `SENTINEL FAILOVER` with the master alive.
//!
//! Run twice: durability **off** (a grant is used as soon as it is answered)
//! and **on** (`WAIT 2 <ms>` on the worker's connection after each grant:
//! when fewer than both replicas have it, the worker releases and counts an
//! acquire error, never a grant; after each renewal too: until both have
//! it, the owner trusts only the lease it had). Counted, per mode and scenario, from the
//! recorded history: acknowledged grants lost, two owners holding at once,
//! token regressions, stale writes accepted by FENCED (a token lower than
//! one the resource already logged), holds leaked past one lease, acquire
//! errors, and p50/p99 acquire latency. A table is printed.
//!
//! Rounds per mode: `DLOCK_CHAOS_ROUNDS` (default 3, one of each scenario:
//! the short version in `make test`); `make chaos-failover` runs 102 (34 of each scenario).

mod common;
use common::*;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use redis::{RedisError, Value};

const NAME: &str = "dlockchaos";
const LEASE_MS: u64 = 1500;
/// Server-side wait of each acquire.
const ACQ_WAIT_MS: u64 = 200;
/// `WAIT 2 <ms>` after a grant in durability-on mode.
const DURABLE_WAIT_MS: u64 = 300;
/// A worker judges a hold lost only when the answer saying so arrived this
/// far inside its lease: the server acted before the answer came, hence
/// before the lease's end (the wall clock the server reads and the
/// monotonic one here may drift a little).
const MARGIN: Duration = Duration::from_millis(20);
const SEM_LIMIT: usize = 2;
const SCENARIOS: [&str; 3] = ["a cut", "b kill", "c planned"];

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Mutex,
    Fair,
    RwRead,
    RwWrite,
    Sem,
    /// A mutex of its own (no contention): its acquire latency is the cost
    /// of the grant itself (and, durability on, of WAIT).
    Probe,
}

impl Kind {
    fn key(self) -> &'static str {
        match self {
            Kind::Mutex => "mutex",
            Kind::Fair => "fair",
            Kind::RwRead | Kind::RwWrite => "rw",
            Kind::Sem => "sem",
            Kind::Probe => "probe",
        }
    }
    fn shared(self) -> bool {
        matches!(self, Kind::RwRead | Kind::Sem)
    }
    fn acquire_args(self, owner: &str) -> Vec<String> {
        let lease = LEASE_MS.to_string();
        let wait = ACQ_WAIT_MS.to_string();
        let key = self.key().to_string();
        let own = owner.to_string();
        let tail = ["PX".into(), lease, "WAIT".into(), wait];
        let mut v: Vec<String> = match self {
            Kind::Mutex | Kind::Probe => vec!["DLOCK.ACQUIRE".into(), key, own],
            Kind::Fair => vec!["DLOCK.FAIRACQUIRE".into(), key, own],
            Kind::RwRead => vec!["DLOCK.RWACQUIRE".into(), key, own, "READ".into()],
            Kind::RwWrite => vec!["DLOCK.RWACQUIRE".into(), key, own, "WRITE".into()],
            Kind::Sem => vec![
                "DLOCK.SEMACQUIRE".into(),
                key,
                own,
                "LIMIT".into(),
                SEM_LIMIT.to_string(),
            ],
        };
        v.extend(tail);
        v
    }
    fn release_args(self, owner: &str) -> Vec<String> {
        let mut v = vec!["DLOCK.RELEASE".into(), self.key().into(), owner.into()];
        match self {
            Kind::RwRead => v.push("READ".into()),
            Kind::RwWrite => v.push("WRITE".into()),
            _ => {}
        }
        v
    }
}

/// One acknowledged grant, as its owner saw it.
#[derive(Clone, Debug)]
struct Hold {
    key: &'static str,
    kind: Kind,
    owner: String,
    token: u64,
    sent: Instant,
    acked: Instant,
    /// When the owner stopped believing it held the lock.
    end: Instant,
    scenario: usize,
}

#[derive(Default)]
struct Tally {
    grants: u64,
    lost: u64,
    acquire_errors: u64,
    latencies_us: Vec<u64>,
    probe_us: Vec<u64>,
}

struct Shared {
    sentinels: Vec<u16>,
    durable: bool,
    stop: AtomicBool,
    scenario: AtomicUsize,
    holds: Mutex<Vec<Hold>>,
    tallies: Mutex<[Tally; 3]>,
    owners_seq: AtomicU64,
}

impl Shared {
    fn tally(&self, f: impl FnOnce(&mut Tally)) {
        let s = self.scenario.load(SeqCst);
        let mut t = self.tallies.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut t[s]);
    }
}

fn run(con: &mut redis::Connection, args: &[String]) -> Result<Value, RedisError> {
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    cmd_str(con, &a)
}

/// Errors after which the worker must find the master again.
fn needs_reconnect(e: &RedisError) -> bool {
    let t = err_string(e);
    e.is_io_error()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_timeout()
        || [
            "READONLY",
            "LOADING",
            "MASTERDOWN",
            "TRYAGAIN",
            "NOREPLICAS",
        ]
        .iter()
        .any(|p| t.starts_with(p))
}

/// Asks the Sentinels for the master and connects to it (checking ROLE).
fn connect_master(shared: &Shared, deadline: Instant) -> Option<redis::Connection> {
    while Instant::now() < deadline && !shared.stop.load(SeqCst) {
        for &sp in &shared.sentinels {
            let Ok(client) = redis::Client::open(format!("redis://127.0.0.1:{sp}/")) else {
                continue;
            };
            let Ok(mut sc) = client.get_connection_with_timeout(Duration::from_millis(500)) else {
                continue;
            };
            let _ = sc.set_read_timeout(Some(Duration::from_secs(1)));
            let addr: Result<(String, u16), _> = redis::cmd("SENTINEL")
                .arg("GET-MASTER-ADDR-BY-NAME")
                .arg(NAME)
                .query(&mut sc);
            let Ok((_, port)) = addr else { continue };
            let Ok(client) = redis::Client::open(format!("redis://127.0.0.1:{port}/")) else {
                continue;
            };
            let Ok(mut con) = client.get_connection_with_timeout(Duration::from_millis(500)) else {
                continue;
            };
            let _ = con.set_read_timeout(Some(Duration::from_secs(3)));
            let role: Result<Value, _> = redis::cmd("ROLE").query(&mut con);
            if let Ok(Value::Array(items)) = role {
                if matches!(items.first(), Some(Value::BulkString(b)) if b == b"master") {
                    return Some(con);
                }
            }
        }
        thread::sleep(Duration::from_millis(20));
    }
    None
}

struct Worker {
    shared: Arc<Shared>,
    kind: Kind,
    con: Option<redis::Connection>,
    rng: Rng,
}

enum Step {
    Held,
    Lost,
    Gone,
}

impl Worker {
    /// `WAIT 2 <ms>` on the worker's connection: whether both replicas have
    /// what it wrote.
    fn wait_all(&mut self) -> bool {
        let n = self.con.as_mut().map(|c| {
            cmd_str(c, &["WAIT", "2", &DURABLE_WAIT_MS.to_string()])
                .ok()
                .and_then(|v| match v {
                    Value::Int(n) => Some(n),
                    _ => None,
                })
                .unwrap_or(0)
        });
        n == Some(2)
    }

    fn con(&mut self) -> Option<&mut redis::Connection> {
        if self.con.is_none() {
            self.con = connect_master(&self.shared, Instant::now() + Duration::from_secs(20));
        }
        self.con.as_mut()
    }

    /// Runs `args`, reconnecting once on a connection-type error.
    fn call(&mut self, args: &[String]) -> Result<Value, RedisError> {
        for attempt in 0..2 {
            let Some(con) = self.con() else {
                return Err(RedisError::from((redis::ErrorKind::IoError, "no master")));
            };
            match run(con, args) {
                Err(e) if needs_reconnect(&e) => {
                    self.con = None;
                    if attempt == 1 {
                        return Err(e);
                    }
                }
                r => return r,
            }
        }
        Err(RedisError::from((redis::ErrorKind::IoError, "no master")))
    }

    fn run(mut self) {
        while !self.shared.stop.load(SeqCst) {
            self.cycle();
        }
        // Release whatever the last cycle left (nothing: cycles release).
    }

    fn cycle(&mut self) {
        let n = self.shared.owners_seq.fetch_add(1, SeqCst);
        let owner = format!("{}-{n}", self.kind.key());
        let sent = Instant::now();
        let reply = match self.call(&self.kind.acquire_args(&owner)) {
            Ok(v) => v,
            Err(_) => {
                self.shared.tally(|t| t.acquire_errors += 1);
                thread::sleep(Duration::from_millis(20));
                return;
            }
        };
        let token = match reply {
            Value::Int(t) => t as u64,
            _ => return, // nil: not granted within the wait
        };
        if self.shared.durable && !self.wait_all() {
            // Too few replicas have the grant: give it back, report an
            // error, never a grant.
            let _ = self.call(&self.kind.release_args(&owner));
            self.shared.tally(|t| t.acquire_errors += 1);
            return;
        }
        let acked = Instant::now();
        let us = acked.duration_since(sent).as_micros() as u64;
        let probe = self.kind == Kind::Probe;
        self.shared.tally(|t| {
            t.grants += 1;
            t.latencies_us.push(us);
            if probe {
                t.probe_us.push(us);
            }
        });
        let mut valid_until = sent + Duration::from_millis(LEASE_MS);
        let mut end = None;
        let ts = token.to_string();
        let key = self.kind.key().to_string();
        // write, hold a little, renew, write, release
        for step in 0..3 {
            let r = match step {
                0 | 2 => self.write(&key, &ts, valid_until),
                _ => {
                    thread::sleep(Duration::from_millis(10 + self.rng.below(40)));
                    let s = Instant::now();
                    let args: Vec<String> = vec![
                        "DLOCK.RENEW".into(),
                        key.clone(),
                        owner.clone(),
                        "PX".into(),
                        LEASE_MS.to_string(),
                    ];
                    match self.call(&args) {
                        Ok(Value::Int(1)) => {
                            // Durability on: the renewal counts only once
                            // every replica has it; until then the owner
                            // trusts the lease it had.
                            if !self.shared.durable || self.wait_all() {
                                valid_until = s + Duration::from_millis(LEASE_MS);
                            }
                            Step::Held
                        }
                        Ok(_) => lost_or_gone(valid_until),
                        Err(_) => Step::Gone,
                    }
                }
            };
            match r {
                Step::Held => {}
                Step::Lost => {
                    self.shared.tally(|t| t.lost += 1);
                    end = Some(Instant::now());
                    break;
                }
                Step::Gone => {
                    end = Some(Instant::now().min(valid_until));
                    break;
                }
            }
        }
        let end = match end {
            Some(e) => e,
            None => {
                let s = Instant::now();
                match self.call(&self.kind.release_args(&owner)) {
                    Ok(Value::Int(_)) => {}
                    Err(e)
                        if err_string(&e).starts_with("NOTHELD")
                            && Instant::now() + MARGIN < valid_until =>
                    {
                        self.shared.tally(|t| t.lost += 1)
                    }
                    _ => {}
                }
                s
            }
        };
        self.shared
            .holds
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Hold {
                key: self.kind.key(),
                kind: self.kind,
                owner,
                token,
                sent,
                acked,
                end,
                scenario: self.shared.scenario.load(SeqCst),
            });
        // Now and then a late write with the old token: FENCED must refuse
        // it unless the hold is still live there (the log shows it if not).
        if !self.kind.shared() && self.rng.below(3) == 0 {
            let _ = self.call(&fenced(&key, &ts));
        }
    }

    fn write(&mut self, key: &str, token: &str, valid_until: Instant) -> Step {
        if self.kind.shared() {
            // Readers and permits check instead of logging (the log orders
            // only exclusive writers).
            return match self.call(&["DLOCK.CHECK".into(), key.into(), token.into()]) {
                Ok(Value::Int(1)) => Step::Held,
                Ok(_) if Instant::now() + MARGIN < valid_until => Step::Lost,
                _ => Step::Gone,
            };
        }
        match self.call(&fenced(key, token)) {
            Ok(_) => Step::Held,
            Err(e)
                if err_string(&e).starts_with("FENCED")
                    && Instant::now() + MARGIN < valid_until =>
            {
                Step::Lost
            }
            Err(_) => Step::Gone,
        }
    }
}

fn lost_or_gone(valid_until: Instant) -> Step {
    if Instant::now() + MARGIN < valid_until {
        Step::Lost
    } else {
        Step::Gone
    }
}

fn fenced(key: &str, token: &str) -> Vec<String> {
    vec![
        "DLOCK.FENCED".into(),
        key.into(),
        token.into(),
        "RPUSH".into(),
        format!("log:{key}"),
        token.into(),
    ]
}

// ---- topology ---------------------------------------------------------------

struct Topology {
    nodes: Vec<Server>,
    sentinels: Vec<Sentinel>,
    master: usize,
}

impl Topology {
    fn start() -> Topology {
        let opts = ServerOpts::new().args(["--repl-timeout", "5"]);
        let nodes: Vec<Server> = (0..3).map(|_| Server::start_with(opts.clone())).collect();
        for r in &nodes[1..] {
            r.make_replica_of(&nodes[0]);
        }
        let sentinels = (0..3)
            .map(|_| Sentinel::start(NAME, nodes[0].port, 2, 2000))
            .collect();
        let t = Topology {
            nodes,
            sentinels,
            master: 0,
        };
        // Every Sentinel knows both replicas (and each other) before chaos.
        let ok = wait_until(Duration::from_secs(30), || {
            t.sentinels.iter().all(|s| {
                let mut c = s.conn();
                let r: Result<Vec<Value>, _> = redis::cmd("SENTINEL")
                    .arg("REPLICAS")
                    .arg(NAME)
                    .query(&mut c);
                let o: Result<Vec<Value>, _> = redis::cmd("SENTINEL")
                    .arg("SENTINELS")
                    .arg(NAME)
                    .query(&mut c);
                matches!((r, o), (Ok(r), Ok(o)) if r.len() == 2 && o.len() == 2)
            })
        });
        assert!(ok, "sentinels never discovered the topology");
        t
    }

    fn replicas(&self) -> Vec<usize> {
        (0..3).filter(|&i| i != self.master).collect()
    }

    /// The master every Sentinel names, with no failover in progress, when
    /// it answers as a master.
    fn agreed(&self) -> Option<usize> {
        let mut port = None;
        for s in &self.sentinels {
            match s.master_state(NAME) {
                Some((p, flags)) if flags == "master" && port.is_none_or(|q| q == p) => {
                    port = Some(p)
                }
                _ => return None,
            }
        }
        let i = self.nodes.iter().position(|n| Some(n.port) == port)?;
        let role = try_info(&self.nodes[i], "replication")?;
        (parse_info(&role).get("role").map(String::as_str) == Some("master")).then_some(i)
    }

    /// Waits until the Sentinels agree on a master (whichever: a spurious
    /// second failover is part of the chaos) and both other nodes replicate
    /// from it with their links up.
    fn settle(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let mut agreed = None;
            wait_until(Duration::from_secs(60), || {
                agreed = self.agreed();
                agreed.is_some()
            });
            if let Some(m) = agreed {
                self.master = m;
                let port = self.nodes[m].port.to_string();
                let up = wait_until(Duration::from_secs(20), || {
                    self.replicas().iter().all(|&i| {
                        try_info(&self.nodes[i], "replication").is_some_and(|t| {
                            let info = parse_info(&t);
                            info.get("master_port") == Some(&port)
                                && info.get("master_link_status").map(String::as_str) == Some("up")
                        })
                    })
                });
                if up && self.agreed() == Some(m) {
                    return;
                }
            }
            assert!(
                Instant::now() < deadline,
                "the topology never settled\n{}",
                self.sentinels[0].log_tail()
            );
        }
    }

    /// Restarts a killed node as a replica of the current master.
    fn rejoin(&mut self, i: usize) {
        let port = self.nodes[self.master].port.to_string();
        self.nodes[i].opts.args = vec![
            "--repl-timeout".into(),
            "5".into(),
            "--replicaof".into(),
            "127.0.0.1".into(),
            port,
        ];
        self.nodes[i].restart();
    }

    /// Makes `target` the replica Sentinel will promote.
    fn prefer(&self, target: usize) {
        for i in self.replicas() {
            let p = if i == target { "10" } else { "100" };
            let _ = cmd_str(
                &mut self.nodes[i].conn(),
                &["CONFIG", "SET", "replica-priority", p],
            );
        }
    }

    fn sentinel_failover(&self) {
        let ok = wait_until(Duration::from_secs(30), || {
            let mut c = self.sentinels[0].conn();
            match cmd_str(&mut c, &["SENTINEL", "FAILOVER", NAME]) {
                Ok(_) => true,
                Err(e) => err_string(&e).starts_with("INPROG"),
            }
        });
        assert!(
            ok,
            "SENTINEL FAILOVER refused\n{}",
            self.sentinels[0].log_tail()
        );
    }
}

fn promotions_of(s: &Server) -> u64 {
    s.info_field("dlock", "dlock_promotions")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn try_info(s: &Server, section: &str) -> Option<String> {
    let client = redis::Client::open(s.url()).ok()?;
    let mut con = client
        .get_connection_with_timeout(Duration::from_millis(500))
        .ok()?;
    let _ = con.set_read_timeout(Some(Duration::from_secs(2)));
    redis::cmd("INFO").arg(section).query(&mut con).ok()
}

// ---- one mode -----------------------------------------------------------------

#[derive(Default, Clone)]
struct Row {
    rounds: u64,
    grants: u64,
    lost: u64,
    two_owners: u64,
    regressions: u64,
    stale: u64,
    leaked: u64,
    acquire_errors: u64,
    p50_ms: f64,
    p99_ms: f64,
    probe_p50_ms: f64,
    probe_p99_ms: f64,
}

struct ModeResult {
    rows: [Row; 3],
    all: Row,
    promotions: u64,
    /// Scenario (a)'s own grant: answered as a grant, and lost.
    cut_grants_lost: u64,
    cut_grants_refused: u64,
}

fn pct(v: &mut [u64], p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_unstable();
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i.min(v.len() - 1)] as f64 / 1000.0
}

fn run_mode(durable: bool, rounds: usize) -> ModeResult {
    let mut topo = Topology::start();
    let shared = Arc::new(Shared {
        sentinels: topo.sentinels.iter().map(|s| s.port).collect(),
        durable,
        stop: AtomicBool::new(false),
        scenario: AtomicUsize::new(0),
        holds: Mutex::new(Vec::new()),
        tallies: Mutex::new(Default::default()),
        owners_seq: AtomicU64::new(0),
    });
    let kinds = [
        Kind::Mutex,
        Kind::Mutex,
        Kind::Fair,
        Kind::Fair,
        Kind::RwRead,
        Kind::RwWrite,
        Kind::RwWrite,
        Kind::Sem,
        Kind::Sem,
        Kind::Sem,
        Kind::Probe,
    ];
    let workers: Vec<_> = kinds
        .iter()
        .enumerate()
        .map(|(i, &kind)| {
            let w = Worker {
                shared: shared.clone(),
                kind,
                con: None,
                rng: Rng::new(0x5eed + i as u64 + u64::from(durable) * 1000),
            };
            thread::spawn(move || w.run())
        })
        .collect();

    let started = Instant::now();
    let mut rows: [Row; 3] = Default::default();
    let (mut cut_lost, mut cut_refused, mut promotions) = (0, 0, 0);
    let mut orch_holds = Vec::new();
    for round in 0..rounds {
        let scenario = round % 3;
        shared.scenario.store(scenario, SeqCst);
        rows[scenario].rounds += 1;
        thread::sleep(Duration::from_millis(400));
        let old = topo.master;
        let reps = topo.replicas();
        let target = reps[(round / 3) % 2];
        topo.prefer(target);
        let mut promotions_before: Vec<u64> = topo.nodes.iter().map(promotions_of).collect();
        match scenario {
            0 => {
                for &r in &reps {
                    topo.nodes[r].pause();
                }
                let _ = cmd_str(
                    &mut topo.nodes[old].conn(),
                    &["CLIENT", "KILL", "TYPE", "replica"],
                );
                let key = format!("orch{round}");
                let mut mc = topo.nodes[old].conn();
                let sent = Instant::now();
                let granted =
                    match cmd_str(&mut mc, &["DLOCK.ACQUIRE", &key, "orch", "PX", "10000"]) {
                        Ok(Value::Int(t)) => Some(t as u64),
                        _ => None,
                    };
                let answered = match granted {
                    Some(_) if durable => {
                        let n = cmd_str(&mut mc, &["WAIT", "2", "100"]);
                        if matches!(n, Ok(Value::Int(2))) {
                            granted
                        } else {
                            let _ = cmd_str(&mut mc, &["DLOCK.RELEASE", &key, "orch"]);
                            cut_refused += 1;
                            rows[0].acquire_errors += 1;
                            None
                        }
                    }
                    g => g,
                };
                thread::sleep(Duration::from_millis(100));
                topo.nodes[old].stop();
                for &r in &reps {
                    topo.nodes[r].resume();
                }
                topo.sentinel_failover();
                topo.settle_new(old);
                if let Some(t) = answered {
                    rows[0].grants += 1;
                    let mut nc = topo.nodes[topo.master].conn();
                    let live = matches!(
                        cmd_str(&mut nc, &["DLOCK.CHECK", &key, &t.to_string()]),
                        Ok(Value::Int(1))
                    );
                    if !live {
                        cut_lost += 1;
                        rows[0].lost += 1;
                    }
                    orch_holds.push(Hold {
                        key: "orch",
                        kind: Kind::Mutex,
                        owner: "orch".into(),
                        token: t,
                        sent,
                        acked: sent,
                        end: Instant::now(),
                        scenario: 0,
                    });
                    // The next grant of that key, on the new master.
                    let s2 = Instant::now();
                    let _ = cmd_str(&mut nc, &["DLOCK.FORCERELEASE", &key]);
                    if let Ok(Value::Int(t2)) =
                        cmd_str(&mut nc, &["DLOCK.ACQUIRE", &key, "orch2", "PX", "10000"])
                    {
                        orch_holds.push(Hold {
                            key: "orch",
                            kind: Kind::Mutex,
                            owner: "orch2".into(),
                            token: t2 as u64,
                            sent: s2,
                            acked: Instant::now(),
                            end: Instant::now(),
                            scenario: 0,
                        });
                        let _ = cmd_str(&mut nc, &["DLOCK.RELEASE", &key, "orch2"]);
                    }
                }
            }
            1 => {
                topo.nodes[old].stop();
                topo.settle_new(old);
            }
            _ => {
                topo.sentinel_failover();
                topo.settle();
            }
        }
        if scenario < 2 {
            promotions_before[old] = 0; // restarted
        }
        if promotions_of(&topo.nodes[topo.master]) > promotions_before[topo.master] {
            promotions += 1;
        }
        eprintln!(
            "[chaos] durability {} round {round} ({}) done at {:.1}s",
            if durable { "on" } else { "off" },
            SCENARIOS[scenario],
            started.elapsed().as_secs_f64()
        );
    }
    thread::sleep(Duration::from_millis(300));
    shared.stop.store(true, SeqCst);
    for w in workers {
        let _ = w.join();
    }

    // Holds leaked past one lease: nothing may be held a lease later.
    thread::sleep(Duration::from_millis(LEASE_MS + 500));
    let mut mc = topo.nodes[topo.master].conn();
    let mut leaked = 0;
    for key in ["mutex", "fair", "rw", "sem", "probe"] {
        if let Ok(v) = cmd_str(&mut mc, &["DLOCK.INFO", key]) {
            if !matches!(v, Value::Nil) {
                leaked += holders(&v).len() as u64;
            }
        }
    }

    // Stale writes: each exclusive key's log must never go down.
    let mut stale = 0u64;
    for key in ["mutex", "fair", "rw", "probe"] {
        let log: Vec<u64> = redis::cmd("LRANGE")
            .arg(format!("log:{key}"))
            .arg(0)
            .arg(-1)
            .query::<Vec<String>>(&mut mc)
            .unwrap_or_default()
            .iter()
            .filter_map(|t| t.parse().ok())
            .collect();
        let mut top = 0;
        for t in log {
            if t < top {
                stale += 1;
            }
            top = top.max(t);
        }
    }

    let holds = {
        let mut h = shared
            .holds
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        h.extend(orch_holds);
        h
    };
    let (two, regress) = check_history(&holds);
    let tallies = std::mem::take(&mut *shared.tallies.lock().unwrap_or_else(|e| e.into_inner()));
    let mut all = Row::default();
    let mut all_lat = Vec::new();
    let mut all_probe = Vec::new();
    for (s, mut t) in tallies.into_iter().enumerate() {
        let r = &mut rows[s];
        r.grants += t.grants;
        r.lost += t.lost;
        r.acquire_errors += t.acquire_errors;
        r.two_owners = two[s];
        r.regressions = regress[s];
        r.p50_ms = pct(&mut t.latencies_us, 0.50);
        r.p99_ms = pct(&mut t.latencies_us, 0.99);
        r.probe_p50_ms = pct(&mut t.probe_us, 0.50);
        r.probe_p99_ms = pct(&mut t.probe_us, 0.99);
        all_lat.extend(t.latencies_us);
        all_probe.extend(t.probe_us);
        all.rounds += r.rounds;
        all.grants += r.grants;
        all.lost += r.lost;
        all.two_owners += r.two_owners;
        all.regressions += r.regressions;
        all.acquire_errors += r.acquire_errors;
    }
    all.leaked = leaked;
    all.stale = stale;
    all.p50_ms = pct(&mut all_lat, 0.50);
    all.p99_ms = pct(&mut all_lat, 0.99);
    all.probe_p50_ms = pct(&mut all_probe, 0.50);
    all.probe_p99_ms = pct(&mut all_probe, 0.99);
    ModeResult {
        rows,
        all,
        promotions,
        cut_grants_lost: cut_lost,
        cut_grants_refused: cut_refused,
    }
}

impl Topology {
    /// After the master `old` was killed: wait until the Sentinels name
    /// another, bring `old` back as its replica, wait for the topology.
    fn settle_new(&mut self, old: usize) {
        let old_port = self.nodes[old].port;
        let mut new = None;
        let ok = wait_until(Duration::from_secs(60), || {
            let ports: Vec<Option<u16>> =
                self.sentinels.iter().map(|s| s.master_port(NAME)).collect();
            new = ports[0].filter(|&p| p != old_port && ports.iter().all(|q| *q == Some(p)));
            new.is_some()
        });
        assert!(
            ok,
            "sentinels never left {old_port}\n{}",
            self.sentinels[0].log_tail()
        );
        if let Some(i) = self.nodes.iter().position(|n| Some(n.port) == new) {
            self.master = i;
        }
        self.rejoin(old);
        self.settle();
    }
}

/// Two owners at once (Jepsen's mutex check over the owners' beliefs) and
/// token regressions (a grant asked for after another was answered, with a
/// token not above it), per scenario of the later grant.
fn check_history(holds: &[Hold]) -> ([u64; 3], [u64; 3]) {
    let mut two = [0u64; 3];
    let mut regress = [0u64; 3];
    let mut by_key: HashMap<&str, Vec<&Hold>> = HashMap::new();
    for h in holds {
        by_key.entry(h.key).or_default().push(h);
    }
    for (_, mut hs) in by_key {
        hs.sort_by_key(|h| h.acked);
        for (i, b) in hs.iter().enumerate() {
            // Regressions: any earlier-answered grant with a token >= b's.
            if hs[..i]
                .iter()
                .any(|a| a.acked < b.sent && a.token >= b.token && a.owner != b.owner)
            {
                regress[b.scenario] += 1;
            }
            // Overlaps with holds answered before b that b's owner could
            // not share.
            let live: Vec<&&Hold> = hs[..i]
                .iter()
                .filter(|a| a.end > b.acked && a.owner != b.owner)
                .collect();
            let conflict = match b.kind {
                Kind::Sem => live.len() >= SEM_LIMIT,
                Kind::RwRead => live.iter().any(|a| a.kind == Kind::RwWrite),
                _ => !live.is_empty(),
            };
            if conflict {
                two[b.scenario] += 1;
            }
        }
    }
    (two, regress)
}

fn print_table(results: &[(&str, &ModeResult)]) -> String {
    let mut out = String::new();
    out.push_str(
        "| durability | scenario | rounds | grants | lost grants | two owners | token regressions | stale writes accepted | leaked holds | acquire errors | p50 / p99 ms (all) | p50 / p99 ms (uncontended) |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for (mode, r) in results {
        for (s, row) in r.rows.iter().enumerate() {
            out.push_str(&format!(
                "| {mode} | {} | {} | {} | {} | {} | {} | · | · | {} | {:.2} / {:.2} | {:.2} / {:.2} |\n",
                SCENARIOS[s],
                row.rounds,
                row.grants,
                row.lost,
                row.two_owners,
                row.regressions,
                row.acquire_errors,
                row.p50_ms,
                row.p99_ms,
                row.probe_p50_ms,
                row.probe_p99_ms
            ));
        }
        let a = &r.all;
        out.push_str(&format!(
            "| {mode} | **all** | {} | {} | {} | {} | {} | {} | {} | {} | {:.2} / {:.2} | {:.2} / {:.2} |\n",
            a.rounds,
            a.grants,
            a.lost,
            a.two_owners,
            a.regressions,
            a.stale,
            a.leaked,
            a.acquire_errors,
            a.p50_ms,
            a.p99_ms,
            a.probe_p50_ms,
            a.probe_p99_ms
        ));
    }
    for (mode, r) in results {
        out.push_str(&format!(
            "{mode}: promotions counted by the promoted node's INFO dlock: {}; scenario (a)'s own grant: lost {} times, refused (WAIT short) {} times\n",
            r.promotions, r.cut_grants_lost, r.cut_grants_refused
        ));
    }
    out
}

#[test]
fn failover_chaos() {
    let rounds: usize = std::env::var("DLOCK_CHAOS_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3)
        .max(3);
    let off = run_mode(false, rounds);
    let on = run_mode(true, rounds);
    let table = print_table(&[("off", &off), ("on (WAIT 2)", &on)]);
    println!(
        "\nfailover chaos, {rounds} rounds per mode, server {}\n(stale writes and leaked holds are counted over the whole run)\n{table}",
        redis_server_bin().display()
    );
    if let Ok(path) = std::env::var("DLOCK_CHAOS_OUT") {
        let _ = std::fs::write(path, &table);
    }
    // The control: without durability the harness sees grants lost.
    assert!(off.all.lost > 0, "durability off lost no grant:\n{table}");
    assert!(
        off.cut_grants_lost > 0,
        "scenario (a) lost no grant:\n{table}"
    );
    for (mode, r) in [("off", &off), ("on", &on)] {
        assert_eq!(r.all.stale, 0, "{mode}: stale writes accepted\n{table}");
        assert_eq!(r.all.regressions, 0, "{mode}: token regressions\n{table}");
        assert_eq!(r.all.leaked, 0, "{mode}: holds leaked\n{table}");
    }
    assert_eq!(on.all.lost, 0, "on: grants lost\n{table}");
    assert_eq!(
        on.cut_grants_lost, 0,
        "on: scenario (a) answered a grant\n{table}"
    );
    // Every promotion was counted by the promoted node's INFO dlock.
    assert_eq!(on.promotions, rounds as u64, "{table}");
    assert_eq!(off.promotions, rounds as u64, "{table}");
}
