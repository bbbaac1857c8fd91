//! Chaos test (issue 6): 8 worker processes (`examples/chaos_worker.rs`) take one dlock
//! mutex with the client crate's watchdog and log every critical section, while the
//! test SIGKILLs workers at random, kills the master and restarts it from its AOF
//! (`appendfsync always`), and promotes the replica. Afterwards the logs are checked
//! the way a fencing resource would check them.
//!
//! Servers start through the workspace's one harness (tests/common).

// The shared harness is linted where it lives (the root crate), not here.
#[path = "../../../tests/common/mod.rs"]
#[allow(clippy::all)]
mod common;

use std::collections::HashMap;
use std::fs::{self, File};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redis::Value;

/// Seed of the fault schedule (which worker dies, jitter of the kills).
const SEED: u64 = 0x00C4_A05D_10C6;
/// Worker processes alive at any time.
const WORKERS: usize = 8;
/// How long faults are injected.
const FAULT_WINDOW: Duration = Duration::from_secs(20);
/// Workers run this much longer than the fault window.
const TAIL: Duration = Duration::from_millis(1500);
/// The lock all workers take.
const LOCK: &str = "chaos:lock";

fn worker_bin() -> PathBuf {
    example_bin("chaos_worker")
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

// ---------------------------------------------------------------------------
// Worker processes
// ---------------------------------------------------------------------------

/// Every worker process the test started; `Drop` SIGKILLs and reaps those still
/// running, also when the test panics.
struct Workers {
    bin: PathBuf,
    urls: String,
    dir: PathBuf,
    /// (worker id, process) of the workers still to be reaped.
    running: Vec<(u64, Child)>,
    next_id: u64,
    /// Worker id -> unix µs after its SIGKILL was reaped.
    killed: HashMap<u64, u64>,
}

impl Workers {
    fn log_path(&self, id: u64) -> PathBuf {
        self.dir.join(format!("w{id}.log"))
    }

    /// Starts one more worker that runs until `until`.
    fn spawn(&mut self, until: Instant) {
        let id = self.next_id;
        self.next_id += 1;
        let ms = until.saturating_duration_since(Instant::now()).as_millis();
        let out = File::create(self.dir.join(format!("w{id}.out"))).expect("worker stdout");
        let err = out.try_clone().expect("clone worker stdout");
        let child = Command::new(&self.bin)
            .args([
                self.urls.clone(),
                LOCK.to_string(),
                id.to_string(),
                self.log_path(id).display().to_string(),
                ms.to_string(),
            ])
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .expect("spawn chaos_worker");
        self.running.push((id, child));
    }

    /// SIGKILLs the `i`-th running worker and records when it was gone.
    fn kill(&mut self, i: usize) -> u64 {
        let (id, mut child) = self.running.remove(i);
        let _ = child.kill();
        let _ = child.wait();
        self.killed.insert(id, now_us());
        id
    }

    /// Waits for every worker to exit on its own (at most `timeout`); returns the
    /// workers that failed (exit status, output).
    fn wait_all(&mut self, timeout: Duration) -> Vec<String> {
        let deadline = Instant::now() + timeout;
        let mut failed: Vec<(u64, String)> = Vec::new();
        while !self.running.is_empty() {
            let mut still = Vec::new();
            for (id, mut child) in self.running.drain(..) {
                match child.try_wait() {
                    Ok(Some(st)) if st.success() => {}
                    Ok(Some(st)) => failed.push((id, st.to_string())),
                    _ => still.push((id, child)),
                }
            }
            self.running = still;
            if Instant::now() >= deadline {
                for (id, mut child) in self.running.drain(..) {
                    let _ = child.kill();
                    let _ = child.wait();
                    failed.push((id, format!("still running after {timeout:?}")));
                }
                break;
            }
            thread::sleep(Duration::from_millis(20));
        }
        failed
            .into_iter()
            .map(|(id, what)| {
                let out = file_tail(&self.dir.join(format!("w{id}.out")), 10);
                format!("worker {id}: {what}\n{out}")
            })
            .collect()
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        for (_, child) in self.running.iter_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The directory of the worker logs; removed on drop unless the test panicked or
/// `DLOCK_KEEP_TEST_DIRS` is set.
struct LogDir(PathBuf);

impl Drop for LogDir {
    fn drop(&mut self) {
        if thread::panicking() || std::env::var_os("DLOCK_KEEP_TEST_DIRS").is_some() {
            eprintln!("[chaos] worker logs kept in {}", self.0.display());
        } else {
            let _ = fs::remove_dir_all(&self.0);
        }
    }
}

// ---------------------------------------------------------------------------
// The records and the checks
// ---------------------------------------------------------------------------

/// One critical section as a worker logged it.
#[derive(Clone, Debug, PartialEq)]
struct Section {
    worker: u64,
    attempt: u64,
    token: u64,
    /// Unix µs.
    start: u64,
    /// Unix µs: logged end, or the kill time for a worker killed inside the section.
    end: u64,
    /// Index of the server that granted it (0: first master, 1: first replica).
    server: usize,
    /// The guard said lost before the section ended.
    lost: bool,
    /// The worker was SIGKILLed inside the section.
    killed: bool,
    /// released, still, notheld, err, or `-` (killed before releasing).
    unlock: String,
    /// µs the worker's `try_lock` took until this grant.
    waited: u64,
    /// Why the guard said lost (`-`: it did not).
    reason: String,
}

impl Section {
    /// Held with a lease the holder still believed valid at the end.
    fn lease_valid(&self) -> bool {
        !self.lost && !self.killed
    }
    fn describe(&self) -> String {
        format!(
            "w{}#{} token {} [{}, {}] server {} lost {} killed {} unlock {}",
            self.worker,
            self.attempt,
            self.token,
            self.start,
            self.end,
            self.server,
            self.lost,
            self.killed,
            self.unlock
        )
    }
}

/// Reads one worker's log. A section without an end line belongs to a killed worker
/// (its end is the kill time); otherwise it is returned in `incomplete`.
fn parse_log(
    text: &str,
    killed_at: Option<u64>,
    sections: &mut Vec<Section>,
    incomplete: &mut Vec<String>,
) {
    let mut open: HashMap<u64, Section> = HashMap::new();
    let mut done: Vec<Section> = Vec::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let num = |i: usize| -> u64 {
            f.get(i)
                .and_then(|s| s.parse().ok())
                .unwrap_or_else(|| panic!("bad worker log line {line:?}"))
        };
        match f.first().copied() {
            Some("B") if f.len() == 7 => {
                open.insert(
                    num(2),
                    Section {
                        worker: num(1),
                        attempt: num(2),
                        token: num(3),
                        start: num(4),
                        end: 0,
                        server: num(5) as usize,
                        lost: false,
                        killed: false,
                        unlock: "-".into(),
                        waited: num(6),
                        reason: "-".into(),
                    },
                );
            }
            Some("E") if f.len() == 7 => {
                let mut s = open
                    .remove(&num(2))
                    .unwrap_or_else(|| panic!("end without begin: {line:?}"));
                assert_eq!(s.token, num(3), "token changed inside {line:?}");
                s.end = num(4);
                s.lost = num(5) == 1;
                s.reason = f[6].to_string();
                done.push(s);
            }
            Some("U") if f.len() == 4 => {
                let attempt = num(2);
                let s = done
                    .iter_mut()
                    .rev()
                    .find(|s| s.attempt == attempt)
                    .unwrap_or_else(|| panic!("unlock without section: {line:?}"));
                s.unlock = f[3].to_string();
            }
            // A SIGKILL can only cut the last line short.
            _ if killed_at.is_some() => {}
            _ => panic!("bad worker log line {line:?}"),
        }
    }
    for (_, mut s) in open {
        match killed_at {
            Some(k) => {
                s.end = k.max(s.start);
                s.killed = true;
                done.push(s);
            }
            None => incomplete.push(s.describe()),
        }
    }
    sections.extend(done);
}

/// What the checks found.
#[derive(Debug, Default)]
struct Findings {
    sections: usize,
    lease_valid: usize,
    lost: usize,
    killed_inside: usize,
    /// Sections whose release answered NOTHELD although the guard never said lost.
    notheld_unflagged: usize,
    /// Overlapping pairs of lease-valid sections granted by the same server (bugs).
    overlaps_same_server: Vec<String>,
    /// Overlapping pairs of lease-valid sections granted by different servers (the
    /// promotion: asynchronous replication, split brain until the old master is
    /// demoted).
    overlaps_across_promotion: Vec<String>,
    /// Lease-valid pairs in start order whose tokens do not increase, same server.
    token_inversions_same_server: Vec<String>,
    token_inversions_across_promotion: Vec<String>,
    /// The same token granted twice (distinct owners), same server.
    duplicate_tokens_same_server: Vec<String>,
    duplicate_tokens_across_servers: usize,
    /// The fencing resource.
    accepted: usize,
    rejected_stale_at_begin: usize,
    rejected_fenced_at_commit: usize,
    /// Overlapping pairs among sections the resource accepted.
    overlaps_accepted: Vec<String>,
    /// Lease-valid sections the resource rejected because of a section granted by the
    /// same server (only possible if the lock was granted twice).
    unexplained_rejections: Vec<String>,
    explained_rejections: usize,
}

impl Findings {
    fn violations(&self) -> Vec<&String> {
        self.overlaps_same_server
            .iter()
            .chain(&self.token_inversions_same_server)
            .chain(&self.duplicate_tokens_same_server)
            .chain(&self.overlaps_accepted)
            .chain(&self.unexplained_rejections)
            .collect()
    }
}

/// Checks the sections: mutual exclusion among lease-valid holders, tokens growing in
/// the order the holders entered, and a fencing resource that sees every section's
/// begin and commit in time order and refuses a token below the highest it has seen.
fn check(mut all: Vec<Section>) -> Findings {
    all.sort_by_key(|s| (s.start, s.end, s.worker, s.attempt));
    let mut f = Findings {
        sections: all.len(),
        lost: all.iter().filter(|s| s.lost).count(),
        killed_inside: all.iter().filter(|s| s.killed).count(),
        notheld_unflagged: all
            .iter()
            .filter(|s| !s.lost && s.unlock == "notheld")
            .count(),
        ..Default::default()
    };

    // Mutual exclusion and token order among lease-valid sections.
    let valid: Vec<&Section> = all.iter().filter(|s| s.lease_valid()).collect();
    f.lease_valid = valid.len();
    for (i, a) in valid.iter().enumerate() {
        for b in &valid[i + 1..] {
            if b.start >= a.end {
                break;
            }
            let pair = format!("{}  <->  {}", a.describe(), b.describe());
            if a.server == b.server {
                f.overlaps_same_server.push(pair);
            } else {
                f.overlaps_across_promotion.push(pair);
            }
        }
    }
    for (j, b) in valid.iter().enumerate() {
        for a in &valid[..j] {
            if a.token >= b.token {
                let pair = format!("{}  then  {}", a.describe(), b.describe());
                if a.server == b.server {
                    f.token_inversions_same_server.push(pair);
                } else {
                    f.token_inversions_across_promotion.push(pair);
                }
            }
        }
    }
    let mut by_token: HashMap<u64, &Section> = HashMap::new();
    for s in &all {
        if let Some(o) = by_token.insert(s.token, s) {
            if o.server == s.server {
                f.duplicate_tokens_same_server.push(format!(
                    "{}  and  {}",
                    o.describe(),
                    s.describe()
                ));
            } else {
                f.duplicate_tokens_across_servers += 1;
            }
        }
    }

    // The fencing resource: every section writes at its begin and commits at its end;
    // a write with a token below the highest seen is refused. Ends sort before begins
    // at the same instant.
    let mut events: Vec<(u64, u8, usize)> = Vec::with_capacity(all.len() * 2);
    for (i, s) in all.iter().enumerate() {
        events.push((s.start, 1, i));
        events.push((s.end, 0, i));
    }
    events.sort_unstable();
    let mut max: Option<(u64, usize)> = None;
    let mut begun = vec![false; all.len()];
    let mut accepted = vec![false; all.len()];
    let mut blocker: Vec<Option<usize>> = vec![None; all.len()];
    for &(_, kind, i) in &events {
        let s = &all[i];
        let newest = max.is_none_or(|(t, _)| s.token >= t);
        if kind == 1 {
            if max.is_none_or(|(t, _)| s.token > t) {
                begun[i] = true;
                max = Some((s.token, i));
            } else {
                f.rejected_stale_at_begin += 1;
                blocker[i] = max.map(|(_, b)| b);
            }
        } else if begun[i] {
            if newest {
                accepted[i] = true;
            } else {
                f.rejected_fenced_at_commit += 1;
                blocker[i] = max.map(|(_, b)| b);
            }
        }
    }
    let acc: Vec<&Section> = all
        .iter()
        .zip(&accepted)
        .filter(|(_, a)| **a)
        .map(|(s, _)| s)
        .collect();
    f.accepted = acc.len();
    for (i, a) in acc.iter().enumerate() {
        for b in &acc[i + 1..] {
            if b.start >= a.end {
                break;
            }
            f.overlaps_accepted
                .push(format!("{}  <->  {}", a.describe(), b.describe()));
        }
    }
    for (i, s) in all.iter().enumerate() {
        let Some(b) = blocker[i] else { continue };
        let b = &all[b];
        if s.lease_valid() && b.server == s.server {
            f.unexplained_rejections.push(format!(
                "{}  refused because of  {}",
                s.describe(),
                b.describe()
            ));
        } else {
            f.explained_rejections += 1;
        }
    }
    f
}

// ---------------------------------------------------------------------------
// The checker on planted faults
// ---------------------------------------------------------------------------

fn sec(worker: u64, token: u64, start: u64, end: u64, server: usize) -> Section {
    Section {
        worker,
        attempt: token,
        token,
        start,
        end,
        server,
        lost: false,
        killed: false,
        unlock: "released".into(),
        waited: 0,
        reason: "-".into(),
    }
}

#[test]
fn checker_finds_planted_faults() {
    // A clean history.
    let clean = vec![
        sec(1, 10, 0, 10, 0),
        sec(2, 11, 10, 20, 0),
        sec(1, 12, 25, 30, 0),
    ];
    let f = check(clean.clone());
    assert!(f.violations().is_empty(), "{f:#?}");
    assert_eq!((f.sections, f.accepted, f.lease_valid), (3, 3, 3));

    // Two lease-valid holders at once on one server.
    let mut h = clean.clone();
    h.push(sec(3, 13, 26, 40, 0));
    let f = check(h);
    assert_eq!(f.overlaps_same_server.len(), 1, "{f:#?}");
    assert_eq!(f.rejected_fenced_at_commit, 1, "{f:#?}");
    assert_eq!(f.unexplained_rejections.len(), 1, "{f:#?}");
    assert!(f.overlaps_accepted.is_empty());

    // A token that went back (e.g. after a restart).
    let mut h = clean.clone();
    h.push(sec(3, 9, 35, 40, 0));
    let f = check(h);
    assert_eq!(f.token_inversions_same_server.len(), 3, "{f:#?}");
    assert_eq!(f.rejected_stale_at_begin, 1, "{f:#?}");
    assert_eq!(f.unexplained_rejections.len(), 1, "{f:#?}");

    // A token granted twice.
    let mut h = clean.clone();
    h.push(sec(3, 12, 35, 40, 0));
    assert_eq!(check(h).duplicate_tokens_same_server.len(), 1);

    // A lost holder overlapping a later one is fenced, not a violation.
    let mut h = clean.clone();
    let mut stale = sec(3, 13, 31, 45, 0);
    stale.lost = true;
    h.push(stale);
    h.push(sec(4, 14, 40, 50, 0));
    let f = check(h);
    assert!(f.violations().is_empty(), "{f:#?}");
    assert_eq!(f.rejected_fenced_at_commit, 1, "{f:#?}");
    assert_eq!(f.explained_rejections, 1, "{f:#?}");

    // Split brain across a promotion: reported, fenced, not a violation.
    let mut h = clean;
    h.push(sec(3, 13, 40, 60, 0));
    h.push(sec(4, 14, 50, 55, 1));
    let f = check(h);
    assert!(f.violations().is_empty(), "{f:#?}");
    assert_eq!(f.overlaps_across_promotion.len(), 1);
    assert_eq!(f.rejected_fenced_at_commit, 1);
}

// ---------------------------------------------------------------------------
// Found by the chaos run
// ---------------------------------------------------------------------------

/// A grant that arrives after waiting on the server longer than the watchdog lease
/// (here 1.5 s, with a 1 s lease and the default 5 s wait slice) is a fresh hold with
/// a full lease on the server. The guard must not call it lost, and its watchdog must
/// keep it.
#[test]

fn a_grant_after_a_long_wait_is_not_born_lost() {
    let s = Server::start();
    let t: i64 = redis::cmd("DLOCK.ACQUIRE")
        .arg("slow")
        .arg("other")
        .arg("PX")
        .arg(1500)
        .query(&mut s.conn())
        .expect("ACQUIRE");
    assert!(t > 0);
    let opts = dlock_client::Options::default()
        .watchdog_lease(Duration::from_secs(1))
        .renew_interval(Duration::from_millis(300));
    let client = dlock_client::Client::with_options(s.url(), opts).expect("client");
    let guard = client.mutex("slow").lock().expect("lock");
    let mine = guard.owner().to_string();
    thread::sleep(Duration::from_millis(100));
    let on_server = || {
        let v = cmd_str(&mut s.conn(), &["DLOCK.INFO", "slow"]).expect("DLOCK.INFO");
        let Some(Value::Array(holders)) = field(&v, "holders") else {
            return None;
        };
        match holders.first().and_then(|h| field(h, "owner")) {
            Some(Value::BulkString(o)) => Some(String::from_utf8_lossy(o).into_owned()),
            _ => None,
        }
    };
    assert_eq!(on_server().as_deref(), Some(mine.as_str()), "granted");
    assert_eq!(
        guard.lost_signal().reason(),
        None,
        "a fresh grant (full lease on the server) is reported lost"
    );
    thread::sleep(Duration::from_millis(1500));
    assert_eq!(
        on_server().as_deref(),
        Some(mine.as_str()),
        "the watchdog let the lease run out while the guard lives"
    );
    assert_eq!(
        guard.unlock().expect("unlock"),
        dlock_client::Unlock::Released
    );
}

// ---------------------------------------------------------------------------
// The chaos run
// ---------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq)]
enum Fault {
    KillWorker,
    RestartMaster,
    Promote,
}

fn lock_info(server: &Server) -> Value {
    cmd_str(&mut server.conn(), &["DLOCK.INFO", LOCK]).expect("DLOCK.INFO")
}

/// `field` of a flat field/value array (RESP2 map).
fn field<'a>(v: &'a Value, name: &str) -> Option<&'a Value> {
    let Value::Array(items) = v else { return None };
    items
        .chunks(2)
        .find(|kv| matches!(&kv[0], Value::BulkString(k) if k.as_slice() == name.as_bytes()))
        .map(|kv| &kv[1])
}

/// (owner, token) of the lock's holder on `server`, if it is held.
fn holder(server: &Server) -> Option<(String, u64)> {
    let info = lock_info(server);
    let Some(Value::Array(holders)) = field(&info, "holders") else {
        return None;
    };
    let h = holders.first()?;
    let owner = match field(h, "owner")? {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        _ => return None,
    };
    match field(h, "token")? {
        Value::Int(t) => Some((owner, *t as u64)),
        _ => None,
    }
}

/// The worker id in an owner `w<id>-<attempt>`.
fn worker_of(owner: &str) -> Option<u64> {
    owner.strip_prefix('w')?.split('-').next()?.parse().ok()
}

#[test]
fn chaos_workers_kills_aof_restart_and_promotion() {
    let t_begin = Instant::now();
    let bin = worker_bin();
    let persist = ServerOpts::new().args(["--appendonly", "yes", "--appendfsync", "always"]);
    let mut master = Server::start_with(persist.clone());
    let replica = Server::start_with(persist);
    replica.make_replica_of(&master);

    let dir = std::env::temp_dir()
        .join("dlock-tests")
        .join(format!("chaos-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).expect("create the log dir");
    let logdir = LogDir(dir.clone());
    let mut workers = Workers {
        bin,
        urls: format!("{},{}", master.url(), replica.url()),
        dir,
        running: Vec::new(),
        next_id: 0,
        killed: HashMap::new(),
    };

    // The schedule: a worker killed every ~2 s, the master killed and restarted from
    // its AOF at ~7 s, the master frozen and the replica promoted at ~13 s.
    let mut rng = StdRng::seed_from_u64(SEED);
    let mut plan: Vec<(Duration, Fault)> = (1..10)
        .map(|k| {
            let jitter = rng.gen_range(0..600u64);
            (
                Duration::from_millis(k * 2000 + jitter - 300),
                Fault::KillWorker,
            )
        })
        .collect();
    plan.push((Duration::from_millis(7000), Fault::RestartMaster));
    plan.push((Duration::from_millis(13000), Fault::Promote));
    plan.sort_by_key(|p| p.0);

    let t0 = Instant::now();
    let t0_us = now_us();
    let until = t0 + FAULT_WINDOW + TAIL;
    for _ in 0..WORKERS {
        workers.spawn(until);
    }
    let mut events: Vec<String> = Vec::new();
    let mut faults = 0usize;
    let (mut restarted_at, mut promoted_at) = (0u64, 0u64);
    for (at, fault) in plan {
        if let Some(wait) = (t0 + at).checked_duration_since(Instant::now()) {
            thread::sleep(wait);
        }
        let when = t0.elapsed().as_secs_f64();
        match fault {
            Fault::KillWorker => {
                // Half the kills hit the holder (its lease then has to run out while
                // the others wait), the others a random worker.
                let current = if promoted_at == 0 { &master } else { &replica };
                let mut what = "a random worker,";
                let mut i = rng.gen_range(0..workers.running.len());
                if rng.gen_bool(0.5) {
                    let mut found = None;
                    wait_until(Duration::from_secs(2), || {
                        found = holder(current)
                            .and_then(|(o, _)| worker_of(&o))
                            .and_then(|id| workers.running.iter().position(|w| w.0 == id));
                        found.is_some()
                    });
                    if let Some(h) = found {
                        (i, what) = (h, "the holder,");
                    }
                }
                let id = workers.kill(i);
                workers.spawn(until);
                events.push(format!("{when:6.2}s SIGKILL {what} worker {id}"));
            }
            Fault::RestartMaster => {
                // Kill it while the lock is held: the hold must come back from the AOF.
                let mut before = None;
                wait_until(Duration::from_secs(2), || {
                    before = holder(&master);
                    before.is_some()
                });
                let t = Instant::now();
                master.restart(); // SIGKILL, then start again on the same AOF
                restarted_at = now_us();
                let after = holder(&master);
                events.push(format!(
                    "{when:6.2}s SIGKILL master holding {before:?}, restarted from AOF in \
                     {:?} holding {after:?}",
                    t.elapsed()
                ));
                if let (Some((_, t0)), Some((_, t1))) = (&before, &after) {
                    assert!(
                        t1 >= t0,
                        "the token went back over the restart: {t0} -> {t1}"
                    );
                }
                assert!(
                    master.log().contains("DB loaded from append only file"),
                    "the master did not load its AOF:\n{}",
                    master.logs_tail(30)
                );
            }
            Fault::Promote => {
                // A failover: the master freezes (SIGSTOP) with clients mid-request,
                // the replica is promoted, the workers move over on their timeouts;
                // then the old master thaws — it still believes it is the master and
                // serves what was queued (split brain) — and is demoted to a replica.
                wait_replica_synced(&master, &replica);
                let t = Instant::now();
                master.pause();
                promoted_at = now_us();
                let _: () = redis::cmd("REPLICAOF")
                    .arg("NO")
                    .arg("ONE")
                    .query(&mut replica.conn())
                    .expect("REPLICAOF NO ONE");
                thread::sleep(Duration::from_millis(1500));
                master.resume();
                master.make_replica_of(&replica);
                events.push(format!(
                    "{when:6.2}s froze the master, promoted the replica, thawed and demoted \
                     the old master after {:?}",
                    t.elapsed()
                ));
            }
        }
        faults += 1;
    }
    let failed =
        workers.wait_all(until.saturating_duration_since(Instant::now()) + Duration::from_secs(20));
    assert!(failed.is_empty(), "workers failed:\n{}", failed.join("\n"));

    // Both servers alive; the lock ends by itself (killed holders' leases run out) and
    // the old master, now a replica, agrees.
    master.assert_alive();
    let mut replica = replica;
    replica.assert_alive();
    assert!(
        wait_until(Duration::from_secs(10), || lock_info(&replica)
            == Value::Nil),
        "the lock never went away on the new master: {:?}",
        lock_info(&replica)
    );
    wait_replica_synced(&replica, &master);
    assert_eq!(
        lock_info(&master),
        Value::Nil,
        "the demoted master disagrees"
    );

    // Read the logs and check.
    let mut sections = Vec::new();
    let mut incomplete = Vec::new();
    for id in 0..workers.next_id {
        let path = workers.log_path(id);
        let text = fs::read_to_string(&path).unwrap_or_default();
        parse_log(
            &text,
            workers.killed.get(&id).copied(),
            &mut sections,
            &mut incomplete,
        );
    }
    assert!(
        incomplete.is_empty(),
        "sections without an end from workers that were not killed:\n{}",
        incomplete.join("\n")
    );
    let per_server = |srv: usize, after: u64| {
        sections
            .iter()
            .filter(|s| s.server == srv && s.start > after)
            .count()
    };
    let after_restart = per_server(0, restarted_at);
    let on_new_master = per_server(1, 0);
    let replica_before_promotion = sections
        .iter()
        .filter(|s| s.server == 1 && s.start < promoted_at)
        .count();
    let unlocks = |what: &str| sections.iter().filter(|s| s.unlock == what).count();
    let unlock_counts = format!(
        "released {}, notheld {}, err {}, still {}, killed before release {}",
        unlocks("released"),
        unlocks("notheld"),
        unlocks("err"),
        unlocks("still"),
        unlocks("-")
    );
    let lost_at: Vec<String> = sections
        .iter()
        .filter(|s| s.lost)
        .map(|s| {
            format!(
                "{:.2}s (server {}, held {:.1} ms, waited {:.0} ms, {})",
                s.start.saturating_sub(t0_us) as f64 / 1e6,
                s.server,
                (s.end - s.start) as f64 / 1e3,
                s.waited as f64 / 1e3,
                s.reason
            )
        })
        .collect();
    let f = check(sections);

    let report = format!(
        "[chaos] seed {SEED:#x}, {} worker processes in all ({WORKERS} at a time), {} faults \
         injected ({} worker SIGKILLs, 1 master SIGKILL + AOF restart, 1 promotion)\n\
         [chaos] events:\n  {}\n\
         [chaos] sections {} (lease-valid {}, lost {}, killed inside {}); after the restart on \
         the master {}; on the promoted replica {}\n\
         [chaos] lost sections began at: {}\n\
         [chaos] unlock outcomes: {unlock_counts}; NOTHELD without a lost flag {}\n\
         [chaos] overlaps among lease-valid sections: same server {}, across the promotion {}\n\
         [chaos] token inversions among lease-valid sections: same server {}, across the \
         promotion {}; duplicate tokens: same server {}, across servers {}\n\
         [chaos] fencing resource: accepted {}, rejected stale at begin {}, fenced at commit {} \
         (explained {}, unexplained {}); overlaps among accepted {}\n\
         [chaos] runtime {:?}",
        workers.next_id,
        faults,
        faults - 2,
        events.join("\n  "),
        f.sections,
        f.lease_valid,
        f.lost,
        f.killed_inside,
        after_restart,
        on_new_master,
        if lost_at.is_empty() {
            "none".to_string()
        } else {
            lost_at.join(", ")
        },
        f.notheld_unflagged,
        f.overlaps_same_server.len(),
        f.overlaps_across_promotion.len(),
        f.token_inversions_same_server.len(),
        f.token_inversions_across_promotion.len(),
        f.duplicate_tokens_same_server.len(),
        f.duplicate_tokens_across_servers,
        f.accepted,
        f.rejected_stale_at_begin,
        f.rejected_fenced_at_commit,
        f.explained_rejections,
        f.unexplained_rejections.len(),
        f.overlaps_accepted.len(),
        t_begin.elapsed(),
    );
    eprintln!("{report}");
    for p in f.overlaps_across_promotion.iter().take(5) {
        eprintln!("[chaos] across the promotion: {p}");
    }

    let violations = f.violations();
    assert!(
        violations.is_empty(),
        "{} violations:\n{}\n{report}",
        violations.len(),
        violations
            .iter()
            .take(20)
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert_eq!(
        replica_before_promotion, 0,
        "the replica granted before it was promoted"
    );
    assert!(f.sections >= 100, "too little progress:\n{report}");
    assert!(after_restart > 0, "no section after the restart:\n{report}");
    assert!(
        on_new_master > 0,
        "no section on the promoted replica:\n{report}"
    );
    drop(workers);
    drop(logdir);
}
