//! Deadlock detection's cost (issue 24): the handoff path with
//! `dlock.deadlock-detect` on and off, and the time from the request that
//! closes a cycle to its DEADLOCK reply.
//!
//! Handoff: [`scale::waiter_scaling`] (one holder releases and queues up
//! again with `WAIT`, the next waiter is served on the server) — each grant
//! is one wait start (checked) and one handoff (checked) — with detection on
//! and off, alternating, medians of the repeats; server CPU µs per grant.
//! Two cases: one hot lock (the only key with waiters: the wait-start check
//! is O(1)), and the same with one more connection waiting on another lock
//! (the check then looks each blocker up: O(queue) lookups, no search).

use std::time::{Duration, Instant};

use redis::Connection;

use crate::scale::{self, resp, HandAlgo, Raw, Reply};
use crate::server::{info, RedisServer};
use crate::{median, ratio};

fn set_detect(con: &mut Connection, on: bool) {
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("dlock.deadlock-detect")
        .arg(if on { "yes" } else { "no" })
        .query(con)
        .expect("CONFIG SET dlock.deadlock-detect");
}

fn waiting(con: &mut Connection) -> u64 {
    info(con, "dlock")
        .get("dlock_waiting_clients")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn wait_waiting(con: &mut Connection, at_least: u64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while waiting(con) < at_least {
        assert!(Instant::now() < deadline, "waiters did not block");
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// One row: waiters, (on, off) server CPU µs per grant.
pub struct Row {
    pub case: &'static str,
    pub waiters: usize,
    pub on: f64,
    pub off: f64,
}

/// Runs the handoff comparison and the DEADLOCK reply timing; the report
/// section (markdown).
pub fn run(
    srv: &RedisServer,
    sizes: &[usize],
    repeats: usize,
    duration: Duration,
    log: &dyn Fn(&str),
) -> String {
    let mut admin = srv.conn();
    let mut rows = Vec::new();
    for case in ["one hot lock", "another lock has a waiter"] {
        // The other lock's waiter (second case): held by zz, waited on by yy.
        let mut other: Option<Raw> = None;
        if case != "one hot lock" {
            let _: i64 = redis::cmd("DLOCK.ACQUIRE")
                .arg("dl:other")
                .arg("zz")
                .arg("PX")
                .arg("600000")
                .query(&mut admin)
                .expect("hold dl:other");
            let base = waiting(&mut admin);
            let mut r = Raw::connect(srv.port).expect("connect");
            r.send(&resp(&[
                b"DLOCK.ACQUIRE",
                b"dl:other",
                b"yy",
                b"WAIT",
                b"600000",
            ]));
            wait_waiting(&mut admin, base + 1);
            other = Some(r);
        }
        for &n in sizes {
            let (mut on, mut off) = (Vec::new(), Vec::new());
            for rep in 0..repeats {
                for detect in [rep % 2 == 0, rep % 2 != 0] {
                    log(&format!(
                        "deadlock detection {}: {case}, {n} waiting connections, repeat {}/{repeats}",
                        if detect { "on" } else { "off" },
                        rep + 1
                    ));
                    set_detect(&mut admin, detect);
                    let c = scale::waiter_scaling(srv, HandAlgo::Dlock, n, duration);
                    if detect { &mut on } else { &mut off }.push(c.cpu_us);
                }
            }
            rows.push(Row {
                case,
                waiters: n,
                on: median(on),
                off: median(off),
            });
        }
        set_detect(&mut admin, true);
        if let Some(r) = other {
            drop(r);
            let _: i64 = redis::cmd("DLOCK.FORCERELEASE")
                .arg("dl:other")
                .query(&mut admin)
                .unwrap_or(0);
        }
    }
    let (reply_p50, reply_p99, ping) = reply_time(srv, &mut admin, 200);
    render(&rows, reply_p50, reply_p99, ping, repeats, duration)
}

/// A holds dl:k1, B holds dl:k2, A waits for dl:k2; the time from sending B's
/// `DLOCK.ACQUIRE dl:k1 B WAIT …` to its DEADLOCK reply, µs (p50, p99), and
/// a PING round trip on the same connection (p50) for scale.
fn reply_time(srv: &RedisServer, admin: &mut Connection, rounds: usize) -> (f64, f64, f64) {
    set_detect(admin, true);
    let mut a = Raw::connect(srv.port).expect("connect");
    let mut b = Raw::connect(srv.port).expect("connect");
    let mut times = Vec::with_capacity(rounds);
    let mut pings = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        b.send(&resp(&[b"DLOCK.ACQUIRE", b"dl:k2", b"B", b"PX", b"60000"]));
        assert!(matches!(b.read(), Reply::Int(_)));
        a.send(&resp(&[b"DLOCK.ACQUIRE", b"dl:k1", b"A", b"PX", b"60000"]));
        assert!(matches!(a.read(), Reply::Int(_)));
        let base = waiting(admin);
        a.send(&resp(&[
            b"DLOCK.ACQUIRE",
            b"dl:k2",
            b"A",
            b"PX",
            b"60000",
            b"WAIT",
            b"60000",
        ]));
        wait_waiting(admin, base + 1);
        let t = Instant::now();
        b.send(&resp(&[b"PING"]));
        let _ = b.read();
        pings.push(t.elapsed().as_secs_f64() * 1e6);
        let t = Instant::now();
        b.send(&resp(&[
            b"DLOCK.ACQUIRE",
            b"dl:k1",
            b"B",
            b"PX",
            b"60000",
            b"WAIT",
            b"60000",
        ]));
        let r = b.read();
        times.push(t.elapsed().as_secs_f64() * 1e6);
        assert!(
            matches!(&r, Reply::Error(e) if e.starts_with("DEADLOCK cycle")),
            "expected DEADLOCK, got {r:?}"
        );
        b.send(&resp(&[b"DLOCK.RELEASE", b"dl:k2", b"B"]));
        let _ = b.read();
        assert!(matches!(a.read(), Reply::Int(_)), "A not served");
        a.send(&resp(&[b"DLOCK.RELEASE", b"dl:k2", b"A"]));
        let _ = a.read();
        a.send(&resp(&[b"DLOCK.RELEASE", b"dl:k1", b"A"]));
        let _ = a.read();
    }
    times.sort_by(f64::total_cmp);
    let p99 = times
        .get(times.len() * 99 / 100)
        .copied()
        .unwrap_or(f64::NAN);
    (median(times), p99, median(pings))
}

fn render(rows: &[Row], p50: f64, p99: f64, ping: f64, repeats: usize, d: Duration) -> String {
    let mut s = String::new();
    s.push_str("\n## Deadlock detection (issue 24)\n\n");
    s.push_str(&format!(
        "Handoff path with `dlock.deadlock-detect` on and off: server CPU µs per grant \
         (one release + one wait start + one handoff), median of {repeats} alternating \
         repeat(s) of {} ms.\n\n",
        d.as_millis()
    ));
    s.push_str("| case | waiting connections | on | off | on ÷ off |\n|---|---:|---:|---:|---:|\n");
    for r in rows {
        s.push_str(&format!(
            "| {} | {} | {:.1} µs | {:.1} µs | {} |\n",
            r.case,
            r.waiters,
            r.on,
            r.off,
            ratio(r.on / r.off)
        ));
    }
    s.push_str(&format!(
        "\nClosing request → `DEADLOCK cycle: …` reply (2-owner cycle, round trip \
         included): p50 {p50:.0} µs, p99 {p99:.0} µs; a PING round trip: {ping:.0} µs.\n"
    ));
    s
}
