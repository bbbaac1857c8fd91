//! Server-side handoff (issue 16): a release grants exactly the next waiter
//! and unblocks only that connection, so the other waiters' callbacks never
//! run and a handoff costs the same with 16 or 256 waiters (counted by
//! `INFO dlock` `dlock_ready_callbacks`, not timed). Also: FIFO order, a
//! dead waiter is never granted, a WAIT that ends at the handoff ends in
//! exactly one state, a release inside a script hands over too, and a BIND
//! hold made by a handoff is bound to the waiter's connection.
//!
//! `handoff_cost_by_waiters` (ignored; run by hand) prints the server CPU
//! per handoff with 16, 256 and 4096 waiting connections.

mod common;
use common::*;

use std::time::{Duration, Instant};

const SOON: Duration = Duration::from_secs(10);

/// A raw connection whose replies come within [`SOON`].
fn raw(server: &Server) -> RawConn {
    RawConn::new(server, SOON)
}

fn dlock_stat(con: &mut redis::Connection, field: &str) -> u64 {
    info_field(con, "dlock", &format!("dlock_{field}"))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("INFO dlock has no dlock_{field}"))
}

/// Blocks `n` raw connections on `key` in this order (each is waiting
/// before the next asks), owners `{prefix}{i}`.
fn block_waiters(
    server: &Server,
    key: &str,
    prefix: &str,
    n: usize,
    extra: &[&str],
) -> Vec<RawConn> {
    let mut admin = server.conn();
    let base = dlock_stat(&mut admin, "waiting_clients");
    (0..n)
        .map(|i| {
            let mut c = raw(server);
            let owner = format!("{prefix}{i}");
            let mut args = vec!["DLOCK.ACQUIRE", key, &owner, "PX", "60000", "WAIT", "60000"];
            args.extend_from_slice(extra);
            c.send(&args);
            let want = base + i as u64 + 1;
            assert!(
                wait_until(SOON, || dlock_stat(&mut admin, "waiting_clients") >= want),
                "waiter {i} did not block"
            );
            c
        })
        .collect()
}

fn holder_owner(con: &mut redis::Connection, key: &str) -> Option<String> {
    let info = info_raw(con, key);
    if info == redis::Value::Nil {
        return None;
    }
    holders(&info)
        .first()
        .map(|h| String::from_utf8_lossy(as_bytes(field(h, "owner"))).into_owned())
}

/// N waiters, R releases: each release grants exactly the next waiter in
/// arrival order, no other connection gets a reply, and no waiter's ready
/// callback runs — the same (zero) count per handoff for N = 16 and 256.
#[test]
fn one_release_unblocks_exactly_the_next_waiter_whatever_the_queue() {
    let server = Server::start();
    let mut admin = server.conn();
    for n in [16usize, 256] {
        let key = format!("lock:{n}");
        let granted: i64 = redis::cmd("DLOCK.ACQUIRE")
            .arg(&key)
            .arg("holder")
            .query(&mut admin)
            .unwrap();
        assert!(granted > 0);
        let mut waiters = block_waiters(&server, &key, "w", n, &[]);
        let callbacks = dlock_stat(&mut admin, "ready_callbacks");
        let handoffs = dlock_stat(&mut admin, "handoffs");
        let rounds = 8;
        let mut last_token = granted;
        let mut releaser: Option<usize> = None;
        for round in 0..rounds {
            match releaser {
                None => {
                    let r: i64 = redis::cmd("DLOCK.RELEASE")
                        .arg(&key)
                        .arg("holder")
                        .query(&mut admin)
                        .unwrap();
                    assert_eq!(r, 1);
                }
                Some(i) => {
                    let owner = format!("w{i}");
                    waiters[i].send(&["DLOCK.RELEASE", &key, &owner]);
                    assert_eq!(waiters[i].reply(), ":1");
                }
            }
            // The head, in arrival order, is granted with a newer token.
            let token: i64 = waiters[round]
                .reply()
                .trim_start_matches(':')
                .parse()
                .unwrap();
            assert!(token > last_token, "round {round}");
            last_token = token;
            assert_eq!(
                holder_owner(&mut admin, &key).as_deref(),
                Some(&*format!("w{round}"))
            );
            releaser = Some(round);
        }
        // Nobody else was answered.
        for (i, w) in waiters.iter_mut().enumerate().skip(rounds) {
            assert!(!w.has_reply(), "n={n}: waiter {i} got a reply");
        }
        assert_eq!(dlock_stat(&mut admin, "handoffs") - handoffs, rounds as u64);
        assert_eq!(
            dlock_stat(&mut admin, "ready_callbacks") - callbacks,
            0,
            "n={n}: other waiters' callbacks ran"
        );
        let _: i64 = redis::cmd("DLOCK.FORCERELEASE")
            .arg(&key)
            .query(&mut admin)
            .unwrap();
        drop(waiters);
        let _: () = redis::cmd("DEL").arg(&key).query(&mut admin).unwrap();
    }
    server_ok(&server);
}

fn server_ok(server: &Server) {
    let pong: String = redis::cmd("PING").query(&mut server.conn()).unwrap();
    assert_eq!(pong, "PONG");
}

/// A waiter whose connection is killed in the same transaction as the
/// release (so before the server frees it) is never granted: the next one is.
#[test]
fn a_dead_waiter_is_never_granted() {
    let server = Server::start();
    let mut admin = server.conn();
    let _: i64 = redis::cmd("DLOCK.ACQUIRE")
        .arg("k")
        .arg("holder")
        .query(&mut admin)
        .unwrap();
    let mut id_con = raw(&server);
    let dead_id = id_con.id();
    // The first waiter is `id_con` itself.
    id_con.send(&["DLOCK.ACQUIRE", "k", "dead", "WAIT", "60000"]);
    assert!(wait_until(SOON, || dlock_stat(
        &mut admin,
        "waiting_clients"
    ) == 1));
    let mut next = block_waiters(&server, "k", "next", 1, &[]);
    let (_, _): (i64, i64) = redis::pipe()
        .atomic()
        .cmd("CLIENT")
        .arg("KILL")
        .arg("ID")
        .arg(&dead_id)
        .cmd("DLOCK.RELEASE")
        .arg("k")
        .arg("holder")
        .query(&mut admin)
        .unwrap();
    let token = next[0].reply();
    assert!(token.starts_with(':'), "{token}");
    assert_eq!(holder_owner(&mut admin, "k").as_deref(), Some("next0"));
    assert!(wait_until(SOON, || dlock_stat(
        &mut admin,
        "waiting_clients"
    ) == 0));
}

/// The WAIT ending (CLIENT UNBLOCK runs the timeout path) and the handoff
/// in one transaction, both orders: the waiter ends in exactly one state —
/// nil and not holding, or the token and holding — and gets one reply.
#[test]
fn wait_end_and_handoff_at_once_end_in_one_state() {
    let server = Server::start();
    let mut admin = server.conn();
    for unblock_first in [true, false] {
        let _: i64 = redis::cmd("DLOCK.ACQUIRE")
            .arg("k")
            .arg("holder")
            .query(&mut admin)
            .unwrap();
        let mut w = raw(&server);
        let id = w.id();
        w.send(&["DLOCK.ACQUIRE", "k", "w", "WAIT", "60000"]);
        assert!(wait_until(SOON, || dlock_stat(
            &mut admin,
            "waiting_clients"
        ) == 1));
        let mut p = redis::pipe();
        p.atomic();
        let unblock = |p: &mut redis::Pipeline| {
            p.cmd("CLIENT").arg("UNBLOCK").arg(&id).ignore();
        };
        if unblock_first {
            unblock(&mut p);
        }
        p.cmd("DLOCK.RELEASE").arg("k").arg("holder").ignore();
        if !unblock_first {
            unblock(&mut p);
        }
        let _: () = p.query(&mut admin).unwrap();
        let reply = w.reply();
        let holder = holder_owner(&mut admin, "k");
        if unblock_first {
            assert_eq!(reply, "nil");
            assert_eq!(holder, None);
        } else {
            assert!(reply.starts_with(':'), "{reply}");
            assert_eq!(holder.as_deref(), Some("w"));
        }
        // Exactly one reply: the next one is the PING's.
        w.send(&["PING"]);
        assert_eq!(w.reply(), "+PONG");
        let _: i64 = redis::cmd("DLOCK.FORCERELEASE")
            .arg("k")
            .query(&mut admin)
            .unwrap();
        assert!(wait_until(SOON, || dlock_stat(
            &mut admin,
            "waiting_clients"
        ) == 0));
    }
}

/// A BIND hold made by a handoff is bound to the waiter's connection: the
/// releasing connection closing keeps it, the waiter's closing ends it.
#[test]
fn bind_on_a_handed_over_hold_binds_the_waiter() {
    let server = Server::start();
    let mut admin = server.conn();
    let mut releaser = raw(&server);
    releaser.send(&["DLOCK.ACQUIRE", "k", "holder", "BIND"]);
    assert!(releaser.reply().starts_with(':'));
    let mut w = block_waiters(&server, "k", "w", 1, &["BIND"]);
    releaser.send(&["DLOCK.RELEASE", "k", "holder"]);
    assert_eq!(releaser.reply(), ":1");
    assert!(w[0].reply().starts_with(':'));
    let info = info_raw(&mut admin, "k");
    let h = &holders(&info)[0];
    assert_eq!(as_bytes(field(h, "owner")), b"w0");
    drop(releaser);
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(holder_owner(&mut admin, "k").as_deref(), Some("w0"));
    drop(w);
    assert!(
        wait_until(SOON, || holder_owner(&mut admin, "k").is_none()),
        "closing the waiter's connection ends its bound hold"
    );
}

/// Server CPU per handoff with 16, 256 and 4096 waiting connections: a
/// chain of releases, each granted waiter releasing and queueing again.
/// Run by hand: `cargo test --release --test handoff -- --ignored --nocapture`
/// (`DLOCK_MODULE=<path>` to compare another build). With
/// `HANDOFF_CALLGRIND=1` and `REDIS_SERVER` a wrapper that runs the server
/// under `valgrind --tool=callgrind --instr-atstart=no`, it prints the
/// server's instructions per handoff instead (`HANDOFF_ROUNDS`, default
/// 2000, sets the chain's length).
#[test]
#[ignore]
fn handoff_cost_by_waiters() {
    let callgrind = std::env::var_os("HANDOFF_CALLGRIND").is_some();
    let rounds: usize = std::env::var("HANDOFF_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(2_000);
    let sizes: Vec<usize> = std::env::var("HANDOFF_WAITERS")
        .unwrap_or_else(|_| "16,256,4096".into())
        .split(',')
        .filter_map(|n| n.parse().ok())
        .collect();
    for n in sizes {
        let server = Server::start_with(ServerOpts::new().args(["--maxclients", "10000"]));
        let mut admin = server.conn();
        let _: i64 = redis::cmd("DLOCK.ACQUIRE")
            .arg("k")
            .arg("holder")
            .query(&mut admin)
            .unwrap();
        let mut waiters = block_waiters(&server, "k", "w", n, &[]);
        let cpu = |admin: &mut redis::Connection| {
            let mut f = |name| {
                info_field(admin, "cpu", name)
                    .unwrap()
                    .parse::<f64>()
                    .unwrap()
            };
            f("used_cpu_user") + f("used_cpu_sys")
        };
        let control = |arg: &str| {
            let out = std::process::Command::new("callgrind_control")
                .args([arg, &server.pid.to_string()])
                .output()
                .expect("callgrind_control");
            String::from_utf8_lossy(&out.stdout).into_owned()
        };
        if callgrind {
            control("-z");
            control("--instr=on");
        }
        let before = cpu(&mut admin);
        let started = Instant::now();
        let _: i64 = redis::cmd("DLOCK.RELEASE")
            .arg("k")
            .arg("holder")
            .query(&mut admin)
            .unwrap();
        for i in 0..rounds {
            let c = &mut waiters[i % n];
            assert!(c.reply().starts_with(':'));
            let owner = format!("w{}", i % n);
            c.send(&["DLOCK.RELEASE", "k", &owner]);
            c.send(&["DLOCK.ACQUIRE", "k", &owner, "PX", "60000", "WAIT", "60000"]);
            assert_eq!(c.reply(), ":1");
        }
        let used = cpu(&mut admin) - before;
        if callgrind {
            // "Th <n>  <Ir>" lines under "Totals:", one per thread, of the
            // events collected since the zeroing.
            let totals = control("-e");
            if std::env::var_os("HANDOFF_DEBUG").is_some() {
                control("-d");
            }
            control("--instr=off");
            if std::env::var_os("HANDOFF_DEBUG").is_some() {
                println!("{totals}");
            }
            let ir: f64 = totals
                .lines()
                .filter_map(|l| l.trim().strip_prefix("Th "))
                .filter_map(|l| l.split_whitespace().nth(1))
                .filter_map(|t| t.replace(',', "").parse::<f64>().ok())
                .sum();
            println!(
                "waiters={n:5} handoffs={rounds} server_instructions_per_handoff={:.0}",
                ir / rounds as f64
            );
            continue;
        }
        let stats = server.info("commandstats");
        let release = stats
            .lines()
            .find(|l| l.starts_with("cmdstat_dlock.release:"))
            .unwrap_or("")
            .to_string();
        println!(
            "waiters={n:5} handoffs={rounds} server_cpu_per_handoff_us={:.1} wall_per_handoff_us={:.1} {release}",
            used * 1e6 / rounds as f64,
            started.elapsed().as_secs_f64() * 1e6 / rounds as f64,
        );
    }
}

/// A release inside a script hands over too (a mutex and a semaphore in one
/// EVAL), and each waiter gets its token once.
#[test]
fn a_release_inside_a_script_hands_over() {
    let server = Server::start();
    let mut admin = server.conn();
    let _: i64 = redis::cmd("DLOCK.ACQUIRE")
        .arg("k")
        .arg("holder")
        .query(&mut admin)
        .unwrap();
    let _: i64 = redis::cmd("DLOCK.SEMACQUIRE")
        .arg("s")
        .arg("a")
        .arg("LIMIT")
        .arg(1)
        .query(&mut admin)
        .unwrap();
    let mut w = block_waiters(&server, "k", "w", 1, &[]);
    let mut s = raw(&server);
    s.send(&["DLOCK.SEMACQUIRE", "s", "b", "LIMIT", "1", "WAIT", "60000"]);
    assert!(wait_until(SOON, || dlock_stat(
        &mut admin,
        "waiting_clients"
    ) == 2));
    let script = "return {redis.call('DLOCK.RELEASE', KEYS[1], 'holder'), \
                  redis.call('DLOCK.RELEASE', KEYS[2], 'a')}";
    let r: Vec<i64> = redis::cmd("EVAL")
        .arg(script)
        .arg(2)
        .arg("k")
        .arg("s")
        .query(&mut admin)
        .unwrap();
    assert_eq!(r, vec![1, 1]);
    for c in [&mut w[0], &mut s] {
        assert!(c.reply().starts_with(':'));
        c.send(&["PING"]);
        assert_eq!(c.reply(), "+PONG");
    }
    assert_eq!(holder_owner(&mut admin, "k").as_deref(), Some("w0"));
    assert_eq!(holder_owner(&mut admin, "s").as_deref(), Some("b"));
}
