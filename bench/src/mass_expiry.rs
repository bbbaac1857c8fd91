//! Part `massexpiry` (issue 27): many held locks whose leases end at one
//! instant, a few of them with one blocked waiter each. Goal: the waiters
//! are served first — p99 from the lease end to the waiter's grant ≤ 10 ms —
//! while the deletions and `expired` notices of the other locks trail.
//!
//! The waiters are raw sockets read by one thread with poll(2), so each
//! grant is timed as it arrives; the lease end of each waited lock is its
//! holder's `expires_at` (unix ms) from DLOCK.INFO, so both ends of the
//! figure are read on the same clock. `DLOCK_BENCH_MX_DEBUG=1` prints the
//! grant times at 5 % steps (client and server side) to stderr.

use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redis::{Connection, ConnectionLike, Value};

use crate::scale::{resp, Pinger, Stall};
use crate::server::{info, RedisServer, READ_TIMEOUT};

/// What one run measured.
#[derive(Debug, Default)]
pub struct MassExpiry {
    pub locks: usize,
    pub waiters: usize,
    /// Waiters reduced to the open-file limit (0: not reduced).
    pub wanted_waiters: usize,
    /// The fill overran the common lease end (figures not a same-instant
    /// expiry).
    pub overran: bool,
    /// Lease end → grant per waiter, ms, sorted.
    pub grant_ms: Vec<f64>,
    /// Lease end → grant per waiter as the server saw it (the new holder's
    /// grant time from DLOCK.INFO `held_ms`, 1 ms resolution), ms, sorted.
    pub server_grant_ms: Vec<f64>,
    /// Waiters not granted within the run's bound.
    pub missing: usize,
    /// Longest PING round trip while the leases ended.
    pub stall: Stall,
    /// Longest PING round trip over 500 ms just before (the machine's
    /// noise floor), µs.
    pub idle_max_us: f64,
    /// Lease end (the earliest waited lock's) → DBSIZE down to the waiters'
    /// locks, ms.
    pub all_deleted_ms: f64,
    /// Fill rate.
    pub acquire_per_s: f64,
}

impl MassExpiry {
    pub fn pct(&self, p: f64) -> f64 {
        let v = &self.grant_ms;
        if v.is_empty() {
            return f64::NAN;
        }
        let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
        v[rank.clamp(1, v.len()) - 1]
    }
}

fn unix_us() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64() * 1e6)
        .unwrap_or(0.0)
}

fn dbsize(con: &mut Connection) -> i64 {
    redis::cmd("DBSIZE").query(con).expect("DBSIZE")
}

fn key(k: usize) -> String {
    format!("mx:{k}")
}

/// Acquires `mx:0..n` pipelined (1 000 a batch), the lease of each batch
/// `lease_ms()`; returns the seconds it took.
fn fill(con: &mut Connection, n: usize, mut lease_ms: impl FnMut() -> u64) -> f64 {
    let t0 = Instant::now();
    let mut i = 0;
    while i < n {
        let end = (i + 1000).min(n);
        let px = lease_ms().max(1).to_string();
        let mut buf = Vec::new();
        for k in i..end {
            let key = key(k);
            buf.extend_from_slice(&resp(&[
                b"DLOCK.ACQUIRE",
                key.as_bytes(),
                crate::OWNER.as_bytes(),
                b"PX",
                px.as_bytes(),
            ]));
        }
        let replies = con
            .req_packed_commands(&buf, 0, end - i)
            .expect("fill pipeline");
        for v in &replies {
            assert!(matches!(v, Value::Int(t) if *t > 0), "fill: {v:?}");
        }
        i = end;
    }
    t0.elapsed().as_secs_f64()
}

/// The first `expires_at` in a DLOCK.INFO reply: the holder's lease end.
fn expires_at(v: &Value) -> Option<i64> {
    first_int(v, b"expires_at")
}

/// The first integer field `name` in a (nested) DLOCK.INFO reply.
fn first_int(v: &Value, name: &[u8]) -> Option<i64> {
    let Value::Array(items) = v else { return None };
    for (i, it) in items.iter().enumerate() {
        match it {
            Value::BulkString(b) if b == name => {
                if let Some(Value::Int(t)) = items.get(i + 1) {
                    return Some(*t);
                }
            }
            Value::Array(_) => {
                if let Some(t) = first_int(it, name) {
                    return Some(t);
                }
            }
            _ => {}
        }
    }
    None
}

/// One waiting connection.
struct Waiter {
    r: BufReader<TcpStream>,
    /// The lease end of the lock it waits on, unix ms.
    end_ms: i64,
}

pub fn run(server: &RedisServer, n: usize, waiters: usize, log: &dyn Fn(&str)) -> MassExpiry {
    let room = crate::scale::fd_limit().saturating_sub(200);
    let w = waiters.min(room).min(n).max(1);
    let mut m = MassExpiry {
        locks: n,
        waiters: w,
        wanted_waiters: if w < waiters { waiters } else { 0 },
        ..MassExpiry::default()
    };
    let mut admin = server.conn();
    let _: () = redis::cmd("FLUSHALL")
        .arg("SYNC")
        .query(&mut admin)
        .unwrap();

    log("massexpiry: calibrating the fill rate");
    let cal = n.min(20_000);
    let secs = fill(&mut admin, cal, || 60_000);
    let _: () = redis::cmd("FLUSHALL")
        .arg("SYNC")
        .query(&mut admin)
        .unwrap();
    let est = secs * n as f64 / cal as f64;
    let margin = Duration::from_secs_f64(est * 2.0 + 3.0);

    log(&format!(
        "massexpiry: acquiring {n} locks pipelined (estimated {est:.1} s), {w} to be waited on"
    ));
    let instant = Instant::now() + margin;
    let took = fill(&mut admin, n, || {
        instant
            .saturating_duration_since(Instant::now())
            .as_millis() as u64
    });
    m.acquire_per_s = n as f64 / took;

    // The waited locks, spread evenly over the fill (so deadline order alone
    // would serve them across the whole expiry).
    let step = n / w;
    let waited: Vec<usize> = (0..w).map(|i| i * step + step / 2).collect();
    let mut ws: Vec<Waiter> = Vec::with_capacity(w);
    for &k in &waited {
        let s = TcpStream::connect(("127.0.0.1", server.port)).expect("connect");
        s.set_nodelay(true).ok();
        s.set_read_timeout(Some(READ_TIMEOUT)).ok();
        let mut r = BufReader::new(s);
        let key = key(k);
        r.get_mut()
            .write_all(&resp(&[
                b"DLOCK.ACQUIRE",
                key.as_bytes(),
                b"mass-expiry-waiter",
                b"PX",
                b"60000",
                b"WAIT",
                b"60000",
            ]))
            .expect("send the waiter's ACQUIRE");
        let v: Value = redis::cmd("DLOCK.INFO")
            .arg(&key)
            .query(&mut admin)
            .expect("DLOCK.INFO");
        let end_ms = expires_at(&v).unwrap_or(0);
        ws.push(Waiter { r, end_ms });
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        let b: usize = info(&mut admin, "clients")
            .get("blocked_clients")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        if b >= w {
            break;
        }
        thread::sleep(Duration::from_millis(5));
    }
    let held = dbsize(&mut admin) as usize;
    if held != n || Instant::now() >= instant {
        m.overran = true;
        eprintln!(
            "dlock-bench: massexpiry: the fill overran the common lease end ({held} of {n} \
             locks still held); the figures are not a same-instant expiry"
        );
    }
    let first_end = ws.iter().map(|x| x.end_ms).min().unwrap_or(0) as f64 * 1e3;
    let ends: Vec<(usize, i64)> = waited
        .iter()
        .copied()
        .zip(ws.iter().map(|x| x.end_ms))
        .collect();
    log(&format!(
        "massexpiry: waiting for {n} leases to end at once ({:.1} s)",
        instant
            .saturating_duration_since(Instant::now())
            .as_secs_f64()
    ));

    // The waiters' grants, timed as they arrive, on a thread of their own.
    let reader = thread::spawn(move || read_grants(ws));
    thread::sleep(
        instant
            .saturating_duration_since(Instant::now())
            .saturating_sub(Duration::from_millis(900)),
    );
    let idle = Pinger::start(server);
    thread::sleep(Duration::from_millis(500));
    m.idle_max_us = idle.stop().max_us;
    thread::sleep(
        instant
            .saturating_duration_since(Instant::now())
            .saturating_sub(Duration::from_millis(300)),
    );
    let pinger = Pinger::start(server);
    let limit = Instant::now() + Duration::from_secs(60);
    let mut gone_us = f64::NAN;
    while Instant::now() < limit {
        if dbsize(&mut admin) <= w as i64 {
            gone_us = unix_us();
            break;
        }
        thread::sleep(Duration::from_millis(2));
    }
    thread::sleep(Duration::from_millis(100));
    m.stall = pinger.stop();
    m.all_deleted_ms = (gone_us - first_end) / 1e3;
    let (mut got, missing) = reader.join().expect("reader thread panicked");
    got.sort_by(|a, b| a.total_cmp(b));
    if std::env::var_os("DLOCK_BENCH_MX_DEBUG").is_some() {
        let q: Vec<String> = (0..=20)
            .map(|i| {
                let j = (i * got.len().saturating_sub(1)) / 20;
                format!("{:.1}", got.get(j).copied().unwrap_or(f64::NAN))
            })
            .collect();
        eprintln!("massexpiry: grant ms at 5 % steps: {}", q.join(" "));
    }
    m.grant_ms = got;
    m.missing = missing;
    for (k, end) in ends {
        let t0 = unix_us();
        let v: Value = redis::cmd("DLOCK.INFO")
            .arg(key(k))
            .query(&mut admin)
            .expect("DLOCK.INFO");
        let t1 = unix_us();
        if let Some(held) = first_int(&v, b"held_ms") {
            let granted = ((t0 + t1) / 2e3).floor() - held as f64;
            m.server_grant_ms.push(granted - end as f64);
        }
    }
    m.server_grant_ms.sort_by(|a, b| a.total_cmp(b));
    if std::env::var_os("DLOCK_BENCH_MX_DEBUG").is_some() {
        let g = &m.server_grant_ms;
        let q: Vec<String> = (0..=20)
            .map(|i| {
                format!(
                    "{:.0}",
                    g.get((i * g.len().saturating_sub(1)) / 20)
                        .copied()
                        .unwrap_or(f64::NAN)
                )
            })
            .collect();
        eprintln!(
            "massexpiry: server-side grant ms at 5 % steps: {}",
            q.join(" ")
        );
    }
    let _: () = redis::cmd("FLUSHALL")
        .arg("SYNC")
        .query(&mut admin)
        .unwrap();
    m
}

/// Reads one reply on each waiter's socket as it arrives (poll(2)): the
/// ms from its lock's lease end to the grant, and how many got none.
fn read_grants(mut ws: Vec<Waiter>) -> (Vec<f64>, usize) {
    let mut got = Vec::with_capacity(ws.len());
    let mut fds: Vec<libc::pollfd> = ws
        .iter()
        .map(|x| libc::pollfd {
            fd: x.r.get_ref().as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let mut open = vec![true; ws.len()];
    let mut left = ws.len();
    let deadline = Instant::now() + Duration::from_secs(120);
    while left > 0 && Instant::now() < deadline {
        // SAFETY: `fds` is a live, exclusively borrowed array of
        // `fds.len()` pollfd structs for the whole call.
        let r = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 200) };
        if r <= 0 {
            continue;
        }
        let now = unix_us();
        for (i, f) in fds.iter_mut().enumerate() {
            if f.revents == 0 || !open[i] {
                continue;
            }
            f.revents = 0;
            let mut line = String::new();
            let ok = ws[i].r.read_line(&mut line).is_ok();
            open[i] = false;
            f.fd = -1; // poll ignores negative fds
            left -= 1;
            if ok && line.starts_with(':') && !line.starts_with(":-") && line.trim() != ":0" {
                got.push((now - ws[i].end_ms as f64 * 1e3) / 1e3);
            }
        }
    }
    let missing = ws.len() - got.len();
    (got, missing)
}

/// The section of the report, with the goal row.
pub fn render(m: &MassExpiry) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "\n## Waiters first when leases end together (issue 27)\n"
    );
    let _ = writeln!(
        s,
        "{} held locks whose leases end at one instant, {} of them (spread evenly over the \
         fill) with one connection blocked in `DLOCK.ACQUIRE … WAIT` each{}. Lease end → grant \
         is timed per waiter from the holder's `expires_at` (DLOCK.INFO) to the reply's arrival \
         (one client thread, poll(2)); fill rate {:.0} acquires/s.{}\n",
        m.locks,
        m.waiters,
        if m.wanted_waiters > 0 {
            format!(
                " ({} wanted; the open-file limit allows {})",
                m.wanted_waiters, m.waiters
            )
        } else {
            String::new()
        },
        m.acquire_per_s,
        if m.overran {
            " **The fill overran the common lease end: not a same-instant expiry.**"
        } else {
            ""
        }
    );
    let _ = writeln!(s, "| figure | value |");
    let _ = writeln!(s, "| --- | ---: |");
    let _ = writeln!(
        s,
        "| lease end → waiter's grant, p50 / p99 / max | {:.1} / {:.1} / {:.1} ms |",
        m.pct(50.0),
        m.pct(99.0),
        m.grant_ms.last().copied().unwrap_or(f64::NAN)
    );
    let sp = |p: f64| {
        let v = &m.server_grant_ms;
        if v.is_empty() {
            return f64::NAN;
        }
        v[(((p / 100.0) * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1]
    };
    let _ = writeln!(
        s,
        "| the same as the server saw it (new holder's grant time from `held_ms`, 1 ms resolution), p50 / p99 / max | {:.0} / {:.0} / {:.0} ms |",
        sp(50.0),
        sp(99.0),
        sp(100.0)
    );
    let _ = writeln!(s, "| waiters not granted | {} |", m.missing);
    let _ = writeln!(
        s,
        "| lease end → DBSIZE down to the waited locks (every other lock deleted) | {:.0} ms |",
        m.all_deleted_ms
    );
    let _ = writeln!(
        s,
        "| longest PING round trip meanwhile (event-loop stall) | {:.1} ms ({} of {} pings over 10 ms) |",
        m.stall.max_us / 1e3,
        m.stall.over_10ms,
        m.stall.pings
    );
    let _ = writeln!(
        s,
        "| longest PING round trip over 500 ms just before (idle: the machine's noise) | {:.1} ms |",
        m.idle_max_us / 1e3
    );
    let p99 = m.pct(99.0);
    let ok = p99 <= 10.0 && m.missing == 0 && !m.overran;
    let stall_ok = m.stall.max_us <= 10_000.0;
    let _ = writeln!(s, "\n| goal | measured | target | result |");
    let _ = writeln!(s, "|---|---:|---:|:---:|");
    let _ = writeln!(
        s,
        "| mass expiry: lease end → waiter's grant, p99 ({} leases, {} waiters) | {:.1} ms{} | ≤ 10 ms | {} |",
        m.locks,
        m.waiters,
        p99,
        if m.missing > 0 {
            format!(", {} not granted", m.missing)
        } else {
            String::new()
        },
        if ok { "met" } else { "**missed**" }
    );
    let _ = writeln!(
        s,
        "| mass expiry with waiters: longest event-loop stall | {:.1} ms | ≤ 10 ms | {} |",
        m.stall.max_us / 1e3,
        if stall_ok { "met" } else { "**missed**" }
    );
    s
}
