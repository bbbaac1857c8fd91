//! Part 5 (issue 16): handoff cost against the number of waiters, and scale
//! on one node — many held locks whose leases end in the same second,
//! FLUSHALL with them, and 10 000 connections waiting on one lock — with the
//! event loop's longest stall measured while each happens.
//!
//! Thousands of connections are plain TCP sockets speaking RESP: a waiter
//! only has to send one command and later read one reply, so one thread can
//! drive all of them (the server serves waiters in FIFO order, so the driver
//! always knows which socket the next grant arrives on).

use std::io::{self, BufRead, BufReader, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use redis::{Connection, ConnectionLike, Value};

use crate::server::{commandstats, info, RedisServer, READ_TIMEOUT};

// ---- raw RESP connections ----------------------------------------------------

/// One command in RESP.
pub fn resp(args: &[&[u8]]) -> Vec<u8> {
    let mut b = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        b.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        b.extend_from_slice(a);
        b.extend_from_slice(b"\r\n");
    }
    b
}

/// A reply, as much as the bench needs of it.
#[derive(Debug, PartialEq)]
pub enum Reply {
    Int(i64),
    Nil,
    Status(String),
    Error(String),
    Bulk,
    Array(usize),
}

/// One socket (one file descriptor: 10 000 of them must fit the limit).
pub struct Raw {
    r: BufReader<TcpStream>,
}

impl Raw {
    pub fn connect(port: u16) -> io::Result<Raw> {
        let s = TcpStream::connect(("127.0.0.1", port))?;
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(READ_TIMEOUT))?;
        Ok(Raw {
            r: BufReader::new(s),
        })
    }

    pub fn send(&mut self, buf: &[u8]) {
        self.r
            .get_mut()
            .write_all(buf)
            .expect("write to redis-server");
    }

    fn line(&mut self) -> String {
        let mut l = String::new();
        let n = self.r.read_line(&mut l).expect("read from redis-server");
        assert!(n > 0, "redis-server closed the connection");
        l.trim_end().to_string()
    }

    /// Reads one whole reply (nested aggregates are skipped).
    pub fn read(&mut self) -> Reply {
        let l = self.line();
        let (t, rest) = l.split_at(1.min(l.len()));
        match t {
            ":" => Reply::Int(rest.parse().unwrap_or(0)),
            "+" => Reply::Status(rest.into()),
            "-" => Reply::Error(rest.into()),
            "_" => Reply::Nil,
            "$" => {
                let n: i64 = rest.parse().unwrap_or(-1);
                if n < 0 {
                    return Reply::Nil;
                }
                let mut buf = vec![0u8; n as usize + 2];
                io::Read::read_exact(&mut self.r, &mut buf).expect("read bulk");
                Reply::Bulk
            }
            "*" | "%" => {
                let n: i64 = rest.parse().unwrap_or(-1);
                if n < 0 {
                    return Reply::Nil;
                }
                let items = if t == "%" { 2 * n } else { n };
                for _ in 0..items {
                    self.read();
                }
                Reply::Array(n as usize)
            }
            _ => Reply::Error(format!("unexpected reply line {l:?}")),
        }
    }
}

/// This process's open-file limit (soft), from /proc/self/limits.
pub fn fd_limit() -> usize {
    std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("Max open files"))
                .and_then(|l| l.split_whitespace().nth(3).map(str::to_string))
        })
        .and_then(|v| v.parse().ok())
        .unwrap_or(1024)
}

fn info_num(con: &mut Connection, section: &str, field: &str) -> f64 {
    info(con, section)
        .get(field)
        .and_then(|v| v.parse().ok())
        .unwrap_or(f64::NAN)
}

/// Server CPU (user + sys) so far, µs.
fn server_cpu_us(con: &mut Connection) -> f64 {
    let i = info(con, "cpu");
    let f = |k: &str| i.get(k).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (f("used_cpu_user") + f("used_cpu_sys")) * 1e6
}

/// Polls `INFO clients` until `field` satisfies `ok` (60 s at most).
fn wait_clients(con: &mut Connection, field: &str, ok: impl Fn(f64) -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if ok(info_num(con, "clients", field)) {
            return true;
        }
        thread::sleep(Duration::from_millis(5));
    }
    false
}

// ---- event-loop stall probe ----------------------------------------------------

/// A client sending PING every millisecond on its own connection; the
/// longest round trip is the longest time the event loop did not serve it.
pub struct Pinger {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<Stall>,
}

#[derive(Clone, Copy, Debug, Default)]
pub struct Stall {
    /// Longest PING round trip, µs.
    pub max_us: f64,
    pub pings: u64,
    /// Round trips over 10 ms.
    pub over_10ms: u64,
}

impl Pinger {
    pub fn start(server: &RedisServer) -> Pinger {
        let mut con = server.conn();
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let handle = thread::spawn(move || {
            let mut st = Stall::default();
            while !s.load(SeqCst) {
                let t = Instant::now();
                let _: String = redis::cmd("PING").query(&mut con).expect("PING");
                let rtt = t.elapsed().as_secs_f64() * 1e6;
                st.pings += 1;
                st.max_us = st.max_us.max(rtt);
                if rtt > 10_000.0 {
                    st.over_10ms += 1;
                }
                thread::sleep(Duration::from_millis(1));
            }
            st
        });
        Pinger { stop, handle }
    }

    pub fn stop(self) -> Stall {
        self.stop.store(true, SeqCst);
        self.handle.join().expect("pinger thread panicked")
    }
}

/// `LATENCY LATEST` → (event, max ms), after `CONFIG SET latency-monitor-threshold 1`.
fn latency_latest(con: &mut Connection) -> Vec<(String, i64)> {
    let v: Value = redis::cmd("LATENCY")
        .arg("LATEST")
        .query(con)
        .unwrap_or(Value::Nil);
    let mut out = Vec::new();
    if let Value::Array(events) = v {
        for e in events {
            if let Value::Array(f) = e {
                let name = match f.first() {
                    Some(Value::BulkString(b)) => String::from_utf8_lossy(b).to_string(),
                    _ => continue,
                };
                let max = match f.get(3) {
                    Some(Value::Int(m)) => *m,
                    _ => 0,
                };
                out.push((name, max));
            }
        }
    }
    out
}

fn latency_reset(con: &mut Connection) {
    let _: Value = redis::cmd("CONFIG")
        .arg("SET")
        .arg("latency-monitor-threshold")
        .arg(1)
        .query(con)
        .expect("CONFIG SET latency-monitor-threshold");
    let _: Value = redis::cmd("LATENCY")
        .arg("RESET")
        .query(con)
        .expect("LATENCY RESET");
}

/// A stall measured around one event: the PING probe plus LATENCY LATEST.
#[derive(Clone, Debug, Default)]
pub struct Event {
    pub what: String,
    /// Wall time of the event, µs.
    pub took_us: f64,
    pub stall: Stall,
    /// Longest PING round trip in an idle second right before (the control).
    pub idle_max_us: f64,
    pub latency: Vec<(String, i64)>,
}

fn idle_control(server: &RedisServer, d: Duration) -> f64 {
    let p = Pinger::start(server);
    thread::sleep(d);
    p.stop().max_us
}

// ---- waiter scaling ------------------------------------------------------------

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum HandAlgo {
    Dlock,
    Blpop,
}

#[derive(Clone, Copy, Debug, Default)]
pub struct ScaleCell {
    pub waiters: usize,
    pub grants_per_s: f64,
    /// Server CPU (INFO cpu user + sys) per grant, µs.
    pub cpu_us: f64,
    /// commandstats usec of the acquire and release commands per grant.
    pub cmd_us: f64,
}

fn acquire_cmd(algo: HandAlgo, key: &str, i: usize, wait: bool) -> Vec<u8> {
    let owner = format!("owner-{i}");
    match algo {
        HandAlgo::Dlock if wait => resp(&[
            b"DLOCK.ACQUIRE",
            key.as_bytes(),
            owner.as_bytes(),
            b"PX",
            b"60000",
            b"WAIT",
            b"60000",
        ]),
        HandAlgo::Dlock => resp(&[
            b"DLOCK.ACQUIRE",
            key.as_bytes(),
            owner.as_bytes(),
            b"PX",
            b"60000",
        ]),
        HandAlgo::Blpop => resp(&[b"BLPOP", key.as_bytes(), b"60"]),
    }
}

fn release_cmd(algo: HandAlgo, key: &str, i: usize) -> Vec<u8> {
    let owner = format!("owner-{i}");
    match algo {
        HandAlgo::Dlock => resp(&[b"DLOCK.RELEASE", key.as_bytes(), owner.as_bytes()]),
        HandAlgo::Blpop => resp(&[b"RPUSH", key.as_bytes(), b"token"]),
    }
}

fn granted(algo: HandAlgo, r: &Reply) -> bool {
    match algo {
        HandAlgo::Dlock => matches!(r, Reply::Int(t) if *t > 0),
        HandAlgo::Blpop => matches!(r, Reply::Array(2)),
    }
}

/// Opens `n` raw connections; the first holds `key`, the others wait on it.
/// Returns them once the server shows `n - 1` blocked clients.
fn queue_up(
    server: &RedisServer,
    admin: &mut Connection,
    algo: HandAlgo,
    key: &str,
    n: usize,
) -> Vec<Raw> {
    let base = info_num(admin, "clients", "blocked_clients");
    if algo == HandAlgo::Blpop {
        let _: i64 = redis::cmd("RPUSH")
            .arg(key)
            .arg("token")
            .query(admin)
            .unwrap();
    }
    let mut cons: Vec<Raw> = (0..n)
        .map(|_| Raw::connect(server.port).expect("connect a waiter"))
        .collect();
    cons[0].send(&acquire_cmd(algo, key, 0, algo == HandAlgo::Blpop));
    let r = cons[0].read();
    assert!(
        granted(algo, &r),
        "{algo:?}: first acquire not granted: {r:?}"
    );
    for (i, c) in cons.iter_mut().enumerate().skip(1) {
        c.send(&acquire_cmd(algo, key, i, true));
    }
    let want = base + (n - 1) as f64;
    assert!(
        wait_clients(admin, "blocked_clients", |b| b >= want),
        "{algo:?}: {} waiters did not all block",
        n - 1
    );
    cons
}

/// Closes the connections and waits until the server has let them go.
fn close_all(admin: &mut Connection, cons: Vec<Raw>) {
    drop(cons);
    wait_clients(admin, "connected_clients", |c| c <= 8.0);
}

/// `n` connections on one key: one holds, `n - 1` wait; the driver makes the
/// holder release and queue up again, reads the grant on the next socket,
/// for `duration`. Server CPU per grant from `INFO cpu`.
pub fn waiter_scaling(
    server: &RedisServer,
    algo: HandAlgo,
    n: usize,
    duration: Duration,
) -> ScaleCell {
    let mut admin = server.conn();
    let key = format!("waiters:{algo:?}:{n}");
    let mut cons = queue_up(server, &mut admin, algo, &key, n);
    let stats = |a: &mut Connection| {
        let s = commandstats(a);
        let names: &[&str] = match algo {
            HandAlgo::Dlock => &["dlock.acquire", "dlock.release"],
            HandAlgo::Blpop => &["blpop", "rpush"],
        };
        names
            .iter()
            .map(|k| s.get(*k).map_or(0, |x| x.1))
            .sum::<u64>() as f64
    };
    let mut h = 0usize;
    // One warm-up round through every waiter: each socket then has its
    // re-queued acquire pending, as in the measured part.
    let step = |cons: &mut Vec<Raw>, h: &mut usize| {
        let mut buf = release_cmd(algo, &key, *h);
        buf.extend_from_slice(&acquire_cmd(algo, &key, *h, true));
        cons[*h].send(&buf);
        let r = cons[*h].read();
        assert!(matches!(r, Reply::Int(_)), "{algo:?}: release reply {r:?}");
        *h = (*h + 1) % n;
        let g = cons[*h].read();
        assert!(granted(algo, &g), "{algo:?}: grant reply {g:?}");
    };
    for _ in 0..n.min(4096) {
        step(&mut cons, &mut h);
    }
    let cpu0 = server_cpu_us(&mut admin);
    let us0 = stats(&mut admin);
    let t0 = Instant::now();
    let mut grants = 0u64;
    while t0.elapsed() < duration {
        for _ in 0..100 {
            step(&mut cons, &mut h);
        }
        grants += 100;
    }
    let secs = t0.elapsed().as_secs_f64();
    let cpu1 = server_cpu_us(&mut admin);
    let us1 = stats(&mut admin);
    close_all(&mut admin, cons);
    let _: i64 = redis::cmd("DEL").arg(&key).query(&mut admin).unwrap();
    ScaleCell {
        waiters: n,
        grants_per_s: grants as f64 / secs,
        cpu_us: (cpu1 - cpu0) / grants as f64,
        cmd_us: (us1 - us0) / grants as f64,
    }
}

// ---- many held locks -------------------------------------------------------------

#[derive(Clone, Debug, Default)]
pub struct Scale {
    pub locks: usize,
    /// Time to acquire them pipelined, s, and the rate.
    pub acquire_s: f64,
    pub acquire_per_s: f64,
    /// used_memory Δ / locks.
    pub bytes_per_lock: f64,
    pub used_memory_mb: f64,
    /// The mass expiry: probe + how late the sampled `expired` notices came.
    pub expiry: Event,
    pub samples: usize,
    pub late_p50_ms: f64,
    pub late_p99_ms: f64,
    pub late_max_ms: f64,
    /// Notices that never came (within 30 s).
    pub missing: usize,
    /// From the lease instant until DBSIZE was 0, ms.
    pub all_gone_ms: f64,
    pub flush_async: Event,
    pub flush_sync: Event,
    pub waiters: usize,
    pub block: Event,
    pub handoff_us: f64,
    pub disconnect: Event,
    /// Baselines with `SET key owner NX PX` locks: the same mass expiry
    /// (Redis' own expiry), and FLUSHALL SYNC.
    pub set_expiry: Event,
    pub set_all_gone_ms: f64,
    pub set_flush_sync: Event,
    /// The same with `BLPOP` waiters on a list (Redis' own blocking).
    pub block_floor: Event,
    pub disconnect_floor: Event,
    /// used_memory Δ per waiting connection (connection included), while
    /// `waiters` connections wait on one lock / in BLPOP on one list.
    pub bytes_per_waiter: f64,
    pub floor_bytes_per_waiter: f64,
}

fn flushall(con: &mut Connection, mode: &str) {
    let mut c = redis::cmd("FLUSHALL");
    if !mode.is_empty() {
        c.arg(mode);
    }
    let _: () = c.query(con).expect("FLUSHALL");
}

/// Acquires `scale:0..n` pipelined, the lease of batch b being `lease(b)`;
/// returns the seconds it took. `set`: `SET key owner NX PX` locks instead
/// (the baseline).
fn fill_with(con: &mut Connection, n: usize, set: bool, mut lease_ms: impl FnMut() -> u64) -> f64 {
    let t0 = Instant::now();
    let mut i = 0;
    while i < n {
        let end = (i + 1000).min(n);
        let px = lease_ms().max(1).to_string();
        let mut buf = Vec::new();
        for k in i..end {
            let key = format!("scale:{k}");
            let (owner, px) = (crate::OWNER.as_bytes(), px.as_bytes());
            buf.extend_from_slice(&if set {
                resp(&[b"SET", key.as_bytes(), owner, b"NX", b"PX", px])
            } else {
                resp(&[b"DLOCK.ACQUIRE", key.as_bytes(), owner, b"PX", px])
            });
        }
        let replies = con
            .req_packed_commands(&buf, 0, end - i)
            .expect("fill pipeline");
        for v in &replies {
            assert!(
                matches!(v, Value::Int(t) if *t > 0) || (set && matches!(v, Value::Okay)),
                "fill: unexpected reply {v:?}"
            );
        }
        i = end;
    }
    t0.elapsed().as_secs_f64()
}

fn fill(con: &mut Connection, n: usize, lease_ms: impl FnMut() -> u64) -> f64 {
    fill_with(con, n, false, lease_ms)
}

/// Waits from shortly before `instant` until DBSIZE is 0 (at most 30 s),
/// with the stall probe running: (ms from the instant until then, stall).
fn until_empty(server: &RedisServer, admin: &mut Connection, instant: Instant) -> (f64, Stall) {
    thread::sleep(
        instant
            .saturating_duration_since(Instant::now())
            .saturating_sub(Duration::from_millis(300)),
    );
    let p = Pinger::start(server);
    let mut gone = f64::NAN;
    let deadline = instant + Duration::from_secs(30);
    while Instant::now() < deadline {
        if dbsize(admin) == 0 {
            gone = Instant::now()
                .saturating_duration_since(instant)
                .as_secs_f64()
                * 1e3;
            break;
        }
        thread::sleep(Duration::from_millis(2));
    }
    thread::sleep(Duration::from_millis(100));
    (gone, p.stop())
}

fn dbsize(con: &mut Connection) -> i64 {
    redis::cmd("DBSIZE").query(con).expect("DBSIZE")
}

/// Runs `f` between a PING probe's start and stop, with LATENCY reset before.
fn probed(
    server: &RedisServer,
    admin: &mut Connection,
    what: &str,
    f: impl FnOnce(&mut Connection),
) -> Event {
    let idle = idle_control(server, Duration::from_millis(500));
    latency_reset(admin);
    let p = Pinger::start(server);
    thread::sleep(Duration::from_millis(20));
    let t0 = Instant::now();
    f(admin);
    let took = t0.elapsed().as_secs_f64() * 1e6;
    thread::sleep(Duration::from_millis(20));
    let stall = p.stop();
    Event {
        what: what.into(),
        took_us: took,
        stall,
        idle_max_us: idle,
        latency: latency_latest(admin),
    }
}

/// A mass expiry as an [`Event`]: it took until every key was gone.
fn expiry_event(
    what: String,
    gone_ms: f64,
    stall: Stall,
    idle: f64,
    admin: &mut Connection,
) -> Event {
    Event {
        what,
        took_us: gone_ms * 1e3,
        stall,
        idle_max_us: idle,
        latency: latency_latest(admin),
    }
}

/// used_memory once lazy frees and client buffers settled.
fn settled_memory(con: &mut Connection) -> f64 {
    thread::sleep(Duration::from_millis(100));
    info_num(con, "memory", "used_memory")
}

/// `waiters` connections waiting on one lock (issue 27): the event loop's
/// longest stall while they start waiting and while they disconnect, one
/// handoff, and used_memory Δ per waiting connection (the connection
/// itself included); first the same with BLPOP, Redis' own blocking, as
/// the control. Fills those fields of `s`.
pub fn run_waiting(
    server: &RedisServer,
    admin: &mut Connection,
    waiters: usize,
    log: &dyn Fn(&str),
    s: &mut Scale,
) {
    flushall(admin, "SYNC");
    log(&format!(
        "scale: {waiters} connections in BLPOP on one list"
    ));
    let mut cons: Vec<Raw> = Vec::new();
    let mem0 = settled_memory(admin);
    s.block_floor = probed(
        server,
        admin,
        &format!("{waiters} BLPOP waiters block (floor)"),
        |a| {
            cons = queue_up(server, a, HandAlgo::Blpop, "scale:list", waiters + 1);
        },
    );
    s.floor_bytes_per_waiter = (settled_memory(admin) - mem0) / waiters as f64;
    s.disconnect_floor = probed(
        server,
        admin,
        &format!("{waiters} BLPOP waiters disconnect (floor)"),
        |a| close_all(a, std::mem::take(&mut cons)),
    );
    flushall(admin, "SYNC");
    log(&format!("scale: {waiters} connections waiting on one lock"));
    s.waiters = waiters;
    let key = "scale:waited";
    let mem0 = settled_memory(admin);
    let e = probed(server, admin, &format!("{waiters} waiters block"), |a| {
        cons = queue_up(server, a, HandAlgo::Dlock, key, waiters + 1);
    });
    s.bytes_per_waiter = (settled_memory(admin) - mem0) / waiters as f64;
    s.block = e;
    // One handoff: the holder releases, the first waiter gets the grant.
    let t = Instant::now();
    cons[0].send(&release_cmd(HandAlgo::Dlock, key, 0));
    let r = cons[0].read();
    assert_eq!(r, Reply::Int(1), "holder's release");
    let g = cons[1].read();
    assert!(granted(HandAlgo::Dlock, &g), "first waiter's grant: {g:?}");
    s.handoff_us = t.elapsed().as_secs_f64() * 1e6;
    // Every waiter disconnects at once.
    s.disconnect = probed(
        server,
        admin,
        &format!("{waiters} waiters disconnect"),
        |a| {
            close_all(a, std::mem::take(&mut cons));
        },
    );
    flushall(admin, "SYNC");
}

pub fn run_scale(server: &RedisServer, n: usize, waiters: usize, log: &dyn Fn(&str)) -> Scale {
    let mut admin = server.conn();
    let mut s = Scale {
        locks: n,
        ..Scale::default()
    };
    flushall(&mut admin, "SYNC");

    // Calibrate the fill rate so that every lease can end at one instant
    // after the fill is done.
    log("scale: calibrating the fill rate");
    let cal = n.min(20_000);
    let secs = fill(&mut admin, cal, || 60_000);
    flushall(&mut admin, "SYNC");
    let est = secs * n as f64 / cal as f64;
    // Generous: a fill that overran the instant would let leases end during
    // the fill (reported below, not a failure of the module).
    let margin = Duration::from_secs_f64(est * 2.0 + 2.0);

    // 1. n locks, every lease ending at `instant`.
    log(&format!(
        "scale: acquiring {n} locks pipelined (estimated {est:.1} s)"
    ));
    let mem0 = info_num(&mut admin, "memory", "used_memory");
    let instant = Instant::now() + margin;
    s.acquire_s = fill(&mut admin, n, || {
        instant
            .saturating_duration_since(Instant::now())
            .as_millis() as u64
    });
    s.acquire_per_s = n as f64 / s.acquire_s;
    let mem1 = info_num(&mut admin, "memory", "used_memory");
    s.bytes_per_lock = (mem1 - mem0) / n as f64;
    s.used_memory_mb = mem1 / 1e6;
    let held = dbsize(&mut admin) as usize;
    if held != n || Instant::now() >= instant {
        eprintln!(
            "dlock-bench: the fill overran the common lease instant ({held} of {n} locks \
             still held); the expiry figures below are not a same-second expiry"
        );
    }

    // Sampled notices: one subscriber on every (n / 1000)-th lock's channel.
    let step = (n / 1000).max(1);
    let sample: Vec<usize> = (0..n).step_by(step).collect();
    s.samples = sample.len();
    let mut sub = server.conn();
    let (tx, rx) = std::sync::mpsc::channel::<Instant>();
    let ready = Arc::new(std::sync::Barrier::new(2));
    let r2 = ready.clone();
    let want = sample.len();
    let channels: Vec<String> = sample
        .iter()
        .map(|k| format!("dlock:{{scale:{k}}}"))
        .collect();
    let subscriber = thread::spawn(move || {
        let mut ps = sub.as_pubsub();
        for ch in &channels {
            ps.subscribe(ch).expect("SUBSCRIBE");
        }
        ps.set_read_timeout(Some(Duration::from_millis(200))).ok();
        r2.wait();
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut got = 0;
        while got < want && Instant::now() < deadline {
            if let Ok(m) = ps.get_message() {
                let p: String = m.get_payload().unwrap_or_default();
                if p == "expired" {
                    got += 1;
                    let _ = tx.send(Instant::now());
                }
            }
        }
    });
    ready.wait();
    log(&format!(
        "scale: waiting for {n} leases to end at once ({:.1} s)",
        instant
            .saturating_duration_since(Instant::now())
            .as_secs_f64()
    ));
    let idle = idle_control(server, Duration::from_millis(500));
    latency_reset(&mut admin);
    let (gone, stall) = until_empty(server, &mut admin, instant);
    subscriber.join().expect("subscriber thread panicked");
    let mut late: Vec<f64> = rx
        .try_iter()
        .map(|t| t.saturating_duration_since(instant).as_secs_f64() * 1e3)
        .collect();
    late.sort_by(|a, b| a.total_cmp(b));
    s.missing = want - late.len();
    let pct = |p: f64| -> f64 {
        if late.is_empty() {
            return f64::NAN;
        }
        let rank = ((p / 100.0) * late.len() as f64).ceil() as usize;
        late[rank.clamp(1, late.len()) - 1]
    };
    s.late_p50_ms = pct(50.0);
    s.late_p99_ms = pct(99.0);
    s.late_max_ms = late.last().copied().unwrap_or(f64::NAN);
    s.all_gone_ms = gone;
    s.expiry = expiry_event(
        format!("{n} leases ending at once"),
        gone,
        stall,
        idle,
        &mut admin,
    );
    flushall(&mut admin, "SYNC");

    // 1b. The baseline: n `SET key owner NX PX` locks whose leases end at
    // one instant, deleted by Redis' own expiry.
    log(&format!(
        "scale: {n} SET NX PX locks expiring at once (baseline)"
    ));
    let instant = Instant::now() + margin;
    fill_with(&mut admin, n, true, || {
        instant
            .saturating_duration_since(Instant::now())
            .as_millis() as u64
    });
    let idle = idle_control(server, Duration::from_millis(500));
    latency_reset(&mut admin);
    let (gone, stall) = until_empty(server, &mut admin, instant);
    s.set_all_gone_ms = gone;
    let what = format!("{n} SET NX PX leases ending at once (baseline)");
    s.set_expiry = expiry_event(what, gone, stall, idle, &mut admin);
    flushall(&mut admin, "SYNC");

    // 2. FLUSHALL ASYNC and FLUSHALL with n held locks; FLUSHALL of n SET
    // locks as the baseline.
    for mode in ["ASYNC", "SYNC"] {
        log(&format!("scale: FLUSHALL {mode} with {n} locks"));
        fill(&mut admin, n, || 600_000);
        let e = probed(
            server,
            &mut admin,
            &format!("FLUSHALL {mode}, {n} locks"),
            |c| flushall(c, mode),
        );
        if mode == "ASYNC" {
            s.flush_async = e;
        } else {
            s.flush_sync = e;
        }
        flushall(&mut admin, "SYNC");
    }
    log(&format!(
        "scale: FLUSHALL SYNC with {n} SET locks (baseline)"
    ));
    fill_with(&mut admin, n, true, || 600_000);
    s.set_flush_sync = probed(
        server,
        &mut admin,
        &format!("FLUSHALL SYNC, {n} SET NX PX locks (baseline)"),
        |c| flushall(c, "SYNC"),
    );
    flushall(&mut admin, "SYNC");

    // 3. `waiters` connections waiting on one lock.
    run_waiting(server, &mut admin, waiters, log, &mut s);
    flushall(&mut admin, "SYNC");
    s
}

#[cfg(test)]
mod tests {
    use super::resp;

    #[test]
    fn resp_encodes_a_command() {
        assert_eq!(
            resp(&[b"BLPOP", b"k", b"60"]),
            b"*3\r\n$5\r\nBLPOP\r\n$1\r\nk\r\n$2\r\n60\r\n".to_vec()
        );
    }
}
