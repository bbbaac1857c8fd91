//! Part `stats`: what counting wait and hold times costs (issue 23:
//! `DLOCK.STATS`, `INFO dlock` percentiles, `DLOCK.SLOWLOG`), as throughput
//! with it on against off, in the same server, alternating the order each
//! repeat so drift cancels:
//!
//! - **pairs**: pipelined `DLOCK.ACQUIRE k o` then `DLOCK.RELEASE k o` on
//!   fresh keys (every release ends a hold: one hold recorded per pair);
//! - **handoffs**: the contention cell of 16 clients, 0 ms hold, dlock
//!   (every grant after a wait: one wait and one hold recorded per grant).
//!
//! "on" is the default (`dlock.stats yes`, slowlog thresholds 1000 / 60000
//! ms, so each wait also keeps its `blocked_by` for the slowlog); "off" is
//! `dlock.stats no` with both slowlog thresholds at -1 (nothing observed).

use crate::contention::{self, Algo};
use crate::scripts::Shas;
use crate::server::RedisServer;
use redis::Connection;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

fn set(con: &mut Connection, on: bool) {
    let (stats, wait, hold) = if on {
        ("yes", "1000", "60000")
    } else {
        ("no", "-1", "-1")
    };
    for (k, v) in [
        ("dlock.stats", stats),
        ("dlock.slowlog-wait-ms", wait),
        ("dlock.slowlog-hold-ms", hold),
    ] {
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg(k)
            .arg(v)
            .query(con)
            .expect("CONFIG SET");
    }
}

/// Acquire + release pairs per second, pipelined.
fn pairs(con: &mut Connection, n: usize, pipeline: usize) -> f64 {
    let _: () = redis::cmd("FLUSHALL").arg("SYNC").query(con).unwrap();
    let started = Instant::now();
    for cmd in ["DLOCK.ACQUIRE", "DLOCK.RELEASE"] {
        let mut i = 0;
        while i < n {
            let mut p = redis::pipe();
            for j in i..(i + pipeline).min(n) {
                p.cmd(cmd).arg(format!("sc:{j}")).arg("owner").ignore();
            }
            let _: () = p.query(con).expect("pipeline");
            i += pipeline;
        }
    }
    n as f64 / started.elapsed().as_secs_f64()
}

/// The server's CPU time so far (user + system), seconds.
fn cpu(con: &mut Connection) -> f64 {
    let info: String = redis::cmd("INFO").arg("cpu").query(con).unwrap_or_default();
    info.lines()
        .filter_map(|l| l.split_once(':'))
        .filter(|(k, _)| *k == "used_cpu_user" || *k == "used_cpu_sys")
        .filter_map(|(_, v)| v.trim().parse::<f64>().ok())
        .sum()
}

fn median(xs: &mut [f64]) -> f64 {
    xs.sort_by(|a, b| a.total_cmp(b));
    xs.get(xs.len() / 2).copied().unwrap_or(0.0)
}

/// Runs the part and renders its section of the report.
pub fn run(
    srv: &mut RedisServer,
    shas: &Shas,
    repeats: usize,
    n: usize,
    pipeline: usize,
    duration: Duration,
    log: &dyn Fn(&str),
) -> String {
    let mut con = srv.conn();
    // (pairs/s, grants/s) with counting on and off.
    let mut on = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut off = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for rep in 0..repeats.max(1) {
        let order = if rep % 2 == 0 {
            [true, false]
        } else {
            [false, true]
        };
        for state in order {
            log(&format!(
                "stats cost, repeat {}/{}: counting {}",
                rep + 1,
                repeats.max(1),
                if state { "on" } else { "off" }
            ));
            set(&mut con, state);
            let cpu0 = cpu(&mut con);
            let p = pairs(&mut con, n, pipeline);
            let cpu1 = cpu(&mut con);
            let c = contention::run_cell(srv, shas, Algo::Dlock, 16, 0, duration, rep);
            let cpu2 = cpu(&mut con);
            let grants = c.grants_per_s * duration.as_secs_f64();
            let into = if state { &mut on } else { &mut off };
            into.0.push(p);
            into.1.push(c.grants_per_s);
            into.2.push((cpu1 - cpu0) * 1e6 / n as f64);
            into.3.push((cpu2 - cpu1) * 1e6 / grants.max(1.0));
            srv.check_alive();
        }
    }
    set(&mut con, true);
    let _: () = redis::cmd("FLUSHALL").arg("SYNC").query(&mut con).unwrap();
    let (p_on, p_off) = (median(&mut on.0), median(&mut off.0));
    let (g_on, g_off) = (median(&mut on.1), median(&mut off.1));
    let (pc_on, pc_off) = (median(&mut on.2), median(&mut off.2));
    let (gc_on, gc_off) = (median(&mut on.3), median(&mut off.3));
    let cost = |a: f64, b: f64| if b > 0.0 { (1.0 - a / b) * 100.0 } else { 0.0 };
    let verdict = |c: f64| if c <= 2.0 { "met" } else { "missed" };
    let mut s = String::new();
    let _ = writeln!(s, "\n## Cost of wait and hold statistics (issue 23)\n");
    let _ = writeln!(
        s,
        "Median of {} repeats, counting on (`dlock.stats yes`, slowlog thresholds 1000 / 60000 ms) \
         against off (`dlock.stats no`, both slowlog thresholds -1), alternating. \
         Goal: ≤ 2 % of throughput.\n",
        repeats.max(1)
    );
    let _ = writeln!(s, "| workload | on | off | cost | goal |");
    let _ = writeln!(s, "| --- | ---: | ---: | ---: | --- |");
    let _ = writeln!(
        s,
        "| ACQUIRE + RELEASE pairs/s (pipelined {pipeline}, {n} keys) | {p_on:.0} | {p_off:.0} | {:.1} % | {} |",
        cost(p_on, p_off),
        verdict(cost(p_on, p_off))
    );
    let _ = writeln!(
        s,
        "| handoffs/s (16 clients WAIT on one lock, 0 ms hold) | {g_on:.0} | {g_off:.0} | {:.1} % | {} |",
        cost(g_on, g_off),
        verdict(cost(g_on, g_off))
    );
    let more = |a: f64, b: f64| if b > 0.0 { (a / b - 1.0) * 100.0 } else { 0.0 };
    let _ = writeln!(
        s,
        "| server CPU µs per pair (INFO cpu) | {pc_on:.2} | {pc_off:.2} | {:.1} % | {} |",
        more(pc_on, pc_off),
        verdict(more(pc_on, pc_off))
    );
    let _ = writeln!(
        s,
        "| server CPU µs per handoff (INFO cpu) | {gc_on:.2} | {gc_off:.2} | {:.1} % | {} |",
        more(gc_on, gc_off),
        verdict(more(gc_on, gc_off))
    );
    let _ = writeln!(
        s,
        "\nThroughput on this shared 2-vCPU machine moves by more than the cost measured (the clients share the cores); the server's CPU time per operation is the steadier figure."
    );
    s
}
