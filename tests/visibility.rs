//! Visibility (issue 23): `DLOCK.INFO`'s `held_ms`, `waited_ms`, `position`
//! and `blocked_by`, on a master and its replica (grant and wait-start
//! times travel as absolute unix ms), and payloads of older versions (times
//! unknown: -1). Bounds are generous: only the order of magnitude of a
//! ~200 ms wait is checked.

mod common;
use common::*;

use std::thread;
use std::time::{Duration, Instant};

fn opts() -> ServerOpts {
    ServerOpts::new().module_args(["apply-from-clients", "yes"])
}

fn owners(v: &Value) -> Vec<Vec<u8>> {
    as_array(v).iter().map(|o| as_bytes(o).to_vec()).collect()
}

use redis::Value;

/// Waits until `key` has `n` waiters on the server behind `con`.
fn wait_waiters(con: &mut redis::Connection, key: &str, n: usize) {
    let ok = wait_until(Duration::from_secs(10), || {
        let v = info_raw(con, key);
        !matches!(v, Value::Nil) && waiters(&v).len() == n
    });
    assert!(ok, "{key} never had {n} waiters");
}

#[test]
fn held_and_waited_ms_position_and_blocked_by_on_master_and_replica() {
    let master = Server::start_with(opts());
    let replica = Server::start_with(opts());
    replica.make_replica_of(&master);
    let mut m = master.conn();
    let mut r = replica.conn();
    assert!(int(&mut m, &["DLOCK.ACQUIRE", "vis", "holder", "PX", "60000"]) > 0);
    let url = master.url();
    let started = Instant::now();
    let waiter = thread::spawn(move || {
        let mut c = redis::Client::open(url).unwrap().get_connection().unwrap();
        cmd_str(
            &mut c,
            &[
                "DLOCK.ACQUIRE",
                "vis",
                "waiter",
                "PX",
                "1000",
                "WAIT",
                "20000",
            ],
        )
    });
    wait_waiters(&mut m, "vis", 1);
    let url2 = master.url();
    let second = thread::spawn(move || {
        let mut c = redis::Client::open(url2).unwrap().get_connection().unwrap();
        cmd_str(
            &mut c,
            &[
                "DLOCK.ACQUIRE",
                "vis",
                "second",
                "PX",
                "1000",
                "WAIT",
                "20000",
            ],
        )
    });
    wait_waiters(&mut m, "vis", 2);
    thread::sleep(Duration::from_millis(200));
    let v = info_raw(&mut m, "vis");
    let h = &holders(&v)[0];
    let held = as_int(field(h, "held_ms"));
    let bound = started.elapsed().as_millis() as i64 + 50;
    assert!((150..=bound).contains(&held), "held_ms {held}");
    let w0 = &waiters(&v)[0];
    let w1 = &waiters(&v)[1];
    let waited = as_int(field(w0, "waited_ms"));
    assert!((150..=bound).contains(&waited), "waited_ms {waited}");
    assert_eq!(as_int(field(w0, "position")), 0);
    assert_eq!(as_int(field(w1, "position")), 1);
    assert_eq!(owners(field(w0, "blocked_by")), vec![b"holder".to_vec()]);
    assert_eq!(
        owners(field(w1, "blocked_by")),
        vec![b"holder".to_vec(), b"waiter".to_vec()]
    );
    // The replica answers the same, up to the time between the two reads.
    wait_replica_synced(&master, &replica);
    let rv = info_raw(&mut r, "vis");
    assert_eq!(strip_ttl(rv.clone()), strip_ttl(info_raw(&mut m, "vis")));
    let rw0 = &waiters(&rv)[0];
    let rwaited = as_int(field(rw0, "waited_ms"));
    assert!(rwaited >= waited && rwaited <= waited + 5000, "{rwaited}");
    assert!(as_int(field(&holders(&rv)[0], "held_ms")) >= held);
    assert_eq!(owners(field(rw0, "blocked_by")), vec![b"holder".to_vec()]);
    // Re-entry and renewal keep the hold's start.
    int(&mut m, &["DLOCK.ACQUIRE", "vis", "holder", "PX", "60000"]);
    int(&mut m, &["DLOCK.RENEW", "vis", "holder", "PX", "60000"]);
    let v = info_raw(&mut m, "vis");
    assert!(as_int(field(&holders(&v)[0], "held_ms")) >= held);
    // Handoffs: the waiter's hold starts at its grant.
    int(&mut m, &["DLOCK.RELEASE", "vis", "holder"]);
    int(&mut m, &["DLOCK.RELEASE", "vis", "holder"]);
    assert!(waiter.join().unwrap().is_ok());
    let v = info_raw(&mut m, "vis");
    let h = &holders(&v)[0];
    assert_eq!(as_bytes(field(h, "owner")), b"waiter");
    assert!(as_int(field(h, "held_ms")) < 5000);
    assert_eq!(
        owners(field(&waiters(&v)[0], "blocked_by")),
        vec![b"waiter".to_vec()]
    );
    // DUMP / RESTORE keeps the absolute times.
    let dump: Vec<u8> = redis::cmd("DUMP").arg("vis").query(&mut m).unwrap();
    let _: () = redis::cmd("RESTORE")
        .arg("copy")
        .arg(0)
        .arg(dump)
        .query(&mut m)
        .unwrap();
    // (Its blocked places name no connection there and are pruned.)
    let c = info_raw(&mut m, "copy");
    let orig = info_raw(&mut m, "vis");
    assert_eq!(
        strip_ttl(Value::Array(holders(&c).to_vec())),
        strip_ttl(Value::Array(holders(&orig).to_vec()))
    );
    let copied = as_int(field(&holders(&c)[0], "held_ms"));
    let now_held = as_int(field(&holders(&orig)[0], "held_ms"));
    assert!((copied - now_held).abs() < 1000, "{copied} vs {now_held}");
    int(&mut m, &["DLOCK.RELEASE", "vis", "waiter"]);
    assert!(second.join().unwrap().is_ok());
    drop(r);
}

#[test]
fn payloads_without_times_show_minus_one() {
    let master = Server::start_with(opts());
    let mut m = master.conn();
    // Version 1 (written before the times were kept): a mutex held by "a".
    let mut p = vec![1u8, 0, 1, 2, 1, 1, b'a', 0, 1];
    dlock_core::codec::write_varint(&mut p, now_ms() + 60_000);
    p.extend_from_slice(&[1, 0]);
    let r = cmd_raw(&mut m, &[b"DLOCK.APPLY", b"old", &p]);
    assert!(r.is_ok(), "{r:?}");
    let v = info_raw(&mut m, "old");
    assert_eq!(as_int(field(&holders(&v)[0], "held_ms")), -1);
    // A new hold beside it knows its start; the payload is written with
    // the times from then on.
    int(&mut m, &["DLOCK.RELEASE", "old", "a"]);
    int(&mut m, &["DLOCK.ACQUIRE", "old", "b"]);
    let v = info_raw(&mut m, "old");
    let held = as_int(field(&holders(&v)[0], "held_ms"));
    assert!((0..5000).contains(&held), "{held}");
}

/// One full DLOCK.SCAN iteration with `opts`, running `between` after each
/// call; returns every key returned.
fn scan_all(
    con: &mut redis::Connection,
    opts: &[&str],
    rng: &mut dlock_core::rng::Rng,
    mut between: impl FnMut(&mut redis::Connection, &mut dlock_core::rng::Rng),
) -> std::collections::HashSet<String> {
    let mut seen = std::collections::HashSet::new();
    let mut cursor = "0".to_string();
    let mut calls = 0;
    loop {
        let count = (1 + rng.below(40)).to_string();
        let mut args = vec!["DLOCK.SCAN", cursor.as_str(), "COUNT", count.as_str()];
        args.extend_from_slice(opts);
        let (next, keys): (String, Vec<String>) = redis::cmd(args[0])
            .arg(&args[1..])
            .query(con)
            .expect("DLOCK.SCAN");
        seen.extend(keys);
        calls += 1;
        assert!(calls < 100_000, "the iteration never ended");
        if next == "0" {
            return seen;
        }
        cursor = next;
        between(con, rng);
    }
}

/// Locks come and go (and strings, and hash-table growth) while a scan
/// runs: every lock present for the whole iteration is returned at least
/// once, and nothing but locks that match the filters is returned.
#[test]
fn scan_returns_every_lock_present_for_the_whole_iteration() {
    let server = Server::start_with(opts());
    let mut c = server.conn();
    let kinds = ["mutex", "rw", "semaphore"];
    let stable = 300;
    for i in 0..stable {
        let k = format!("s:{i}");
        let owner = format!("o{}", i % 7);
        match kinds[i % 3] {
            "mutex" => int(&mut c, &["DLOCK.ACQUIRE", &k, &owner, "PX", "600000"]),
            "rw" => int(
                &mut c,
                &["DLOCK.RWACQUIRE", &k, &owner, "READ", "PX", "600000"],
            ),
            _ => int(
                &mut c,
                &["DLOCK.SEMACQUIRE", &k, &owner, "LIMIT", "3", "PX", "600000"],
            ),
        };
        let _: () = redis::cmd("SET")
            .arg(format!("str:{i}"))
            .arg(1)
            .query(&mut c)
            .unwrap();
    }
    // A few contended locks (a fair-lock owner queued without waiting).
    for i in 0..10 {
        let k = format!("f:{i}");
        int(&mut c, &["DLOCK.FAIRACQUIRE", &k, "holder", "PX", "600000"]);
        let r = cmd_str(&mut c, &["DLOCK.FAIRACQUIRE", &k, "queued", "PX", "1000"]);
        assert_eq!(r, Ok(Value::Nil));
    }
    let mut next_churn = 0u64;
    for seed in 1..=6u64 {
        let mut rng = dlock_core::rng::Rng::new(seed);
        let (filter, want): (Vec<&str>, Box<dyn Fn(usize) -> bool>) = match seed % 3 {
            0 => (vec![], Box::new(|_| true)),
            1 => (vec!["KIND", "rw"], Box::new(|i| i % 3 == 1)),
            _ => (vec!["OWNER", "o3"], Box::new(|i| i % 7 == 3)),
        };
        let mut churn = |con: &mut redis::Connection, rng: &mut dlock_core::rng::Rng| {
            for _ in 0..rng.below(30) {
                let k = format!("c:{}", rng.below(next_churn + 50));
                if rng.chance(60) {
                    let _ = cmd_str(con, &["DLOCK.RWACQUIRE", &k, "o3", "READ", "PX", "60000"]);
                } else {
                    let _ = cmd_str(con, &["DEL", &k]);
                }
                let s = format!("junk:{}", rng.below(2000));
                let _ = cmd_str(con, &["SET", &s, "x"]);
            }
            next_churn += 5;
        };
        let seen = scan_all(&mut c, &filter, &mut rng, &mut churn);
        for i in (0..stable).filter(|&i| want(i)) {
            assert!(
                seen.contains(&format!("s:{i}")),
                "seed {seed}: s:{i} missing"
            );
        }
        for k in &seen {
            assert!(
                k.starts_with("s:") || k.starts_with("c:") || k.starts_with("f:"),
                "seed {seed}: not a lock: {k}"
            );
            if let Some(i) = k.strip_prefix("s:") {
                assert!(want(i.parse().unwrap()), "seed {seed}: {k} does not match");
            }
        }
    }
    // CONTENDED: exactly the locks with a place; MATCH narrows by name.
    let mut rng = dlock_core::rng::Rng::new(99);
    let seen = scan_all(&mut c, &["CONTENDED"], &mut rng, |_, _| {});
    let want: std::collections::HashSet<String> = (0..10).map(|i| format!("f:{i}")).collect();
    assert_eq!(seen, want);
    let seen = scan_all(
        &mut c,
        &["MATCH", "s:1?", "KIND", "mutex"],
        &mut rng,
        |_, _| {},
    );
    let want: std::collections::HashSet<String> = (10..20)
        .filter(|i| i % 3 == 0)
        .map(|i| format!("s:{i}"))
        .collect();
    assert_eq!(seen, want);
    // Bad input.
    for (args, words) in [
        (vec!["DLOCK.SCAN", "x"], "invalid cursor"),
        (vec!["DLOCK.SCAN", "0", "KIND", "queue"], "KIND must be"),
        (vec!["DLOCK.SCAN", "0", "COUNT", "0"], "COUNT must be"),
        (vec!["DLOCK.SCAN", "0", "OWNER"], "need a value"),
        (
            vec!["DLOCK.SCAN", "0", "CONTENDED", "CONTENDED"],
            "more than once",
        ),
        (vec!["DLOCK.SCAN", "0", "LIMIT", "1"], "unknown option"),
    ] {
        let e = expect_err(cmd_str(&mut c, &args));
        assert!(e.contains(words), "{args:?}: {e}");
    }
}

/// `DLOCK.STATS` as (kind -> (waits, holds)) of (bound, count) pairs.
type Buckets = Vec<(i64, i64)>;
fn stats(con: &mut redis::Connection) -> std::collections::HashMap<String, (Buckets, Buckets)> {
    let v = ok(con, &["DLOCK.STATS"]);
    let pairs = |v: &Value| -> Buckets {
        as_array(v)
            .iter()
            .map(|b| (as_int(&as_array(b)[0]), as_int(&as_array(b)[1])))
            .collect()
    };
    let items = as_array(&v);
    items
        .chunks(2)
        .map(|kv| {
            let kind = String::from_utf8(as_bytes(&kv[0]).to_vec()).unwrap();
            (
                kind,
                (pairs(field(&kv[1], "waits")), pairs(field(&kv[1], "holds"))),
            )
        })
        .collect()
}

/// A connection waits on `key` as `owner` (WAIT 20 s) in a thread.
fn waiter(server: &Server, key: &str, owner: &str) -> thread::JoinHandle<RedisResult<Value>> {
    let url = server.url();
    let (key, owner) = (key.to_string(), owner.to_string());
    thread::spawn(move || {
        let mut c = redis::Client::open(url).unwrap().get_connection().unwrap();
        cmd_str(
            &mut c,
            &[
                "DLOCK.ACQUIRE",
                &key,
                &owner,
                "PX",
                "60000",
                "WAIT",
                "20000",
            ],
        )
    })
}

use redis::RedisResult;

/// Waits of ~200 ms and holds of exactly 300 ms (lease ends) land in the
/// buckets of their length, in DLOCK.STATS and in INFO's percentiles.
#[test]
fn stats_put_known_waits_and_holds_in_their_buckets() {
    let server = Server::start_with(opts());
    let mut c = server.conn();
    for i in 0..3 {
        let key = format!("w{i}");
        int(&mut c, &["DLOCK.ACQUIRE", &key, "holder", "PX", "60000"]);
        let t = waiter(&server, &key, "waiter");
        wait_waiters(&mut c, &key, 1);
        thread::sleep(Duration::from_millis(200));
        int(&mut c, &["DLOCK.RELEASE", &key, "holder"]);
        assert!(t.join().unwrap().is_ok());
        int(&mut c, &["DLOCK.RELEASE", &key, "waiter"]);
    }
    // Holds that end with their 300 ms lease: exactly 300 ms.
    for i in 0..2 {
        int(
            &mut c,
            &[
                "DLOCK.RWACQUIRE",
                &format!("h{i}"),
                "o",
                "WRITE",
                "PX",
                "300",
            ],
        );
    }
    let gone = wait_until(Duration::from_secs(10), || {
        cmd_str(&mut c, &["EXISTS", "h0", "h1"]) == Ok(Value::Int(0))
    });
    assert!(gone);
    let s = stats(&mut c);
    let (waits, holds) = &s["mutex"];
    assert_eq!(waits.iter().map(|b| b.1).sum::<i64>(), 3, "{waits:?}");
    for (bound, _) in waits {
        assert!((190_000..=5_000_000).contains(bound), "{waits:?}");
    }
    // The holders' holds lasted ~200 ms, the waiters' a moment.
    assert_eq!(holds.iter().map(|b| b.1).sum::<i64>(), 6, "{holds:?}");
    let (rw_waits, rw_holds) = &s["rw"];
    assert!(rw_waits.is_empty());
    assert_eq!(rw_holds.len(), 1, "{rw_holds:?}");
    let (bound, count) = rw_holds[0];
    assert_eq!(count, 2);
    assert!((300_000..=300_000 * 17 / 16).contains(&bound), "{bound}");
    // INFO: latencystats' format.
    let info = server.info("dlock");
    let line = info
        .lines()
        .find(|l| l.starts_with("dlock_hold_percentiles_usec_rw:"))
        .unwrap_or_else(|| panic!("{info}"));
    assert_eq!(
        line,
        format!("dlock_hold_percentiles_usec_rw:p50={bound}.000,p99={bound}.000,p99.9={bound}.000")
    );
    let line = info
        .lines()
        .find(|l| l.starts_with("dlock_wait_percentiles_usec:"))
        .unwrap_or_else(|| panic!("{info}"));
    let p50: f64 = line
        .split(['=', ','])
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap();
    assert!((190_000.0..=5_000_000.0).contains(&p50), "{line}");
    // RESET; and off, nothing is counted.
    assert_eq!(ok(&mut c, &["DLOCK.STATS", "RESET"]), Value::Okay);
    assert!(stats(&mut c)
        .values()
        .all(|(w, h)| w.is_empty() && h.is_empty()));
    ok(&mut c, &["CONFIG", "SET", "dlock.stats", "no"]);
    int(&mut c, &["DLOCK.ACQUIRE", "off", "o"]);
    int(&mut c, &["DLOCK.RELEASE", "off", "o"]);
    assert!(stats(&mut c)
        .values()
        .all(|(w, h)| w.is_empty() && h.is_empty()));
    assert!(!server.info("dlock").contains("percentiles"));
    let e = expect_err(cmd_str(&mut c, &["DLOCK.STATS", "NOW"]));
    assert!(
        e.contains("expected DLOCK.STATS or DLOCK.STATS RESET"),
        "{e}"
    );
}

/// One slowlog entry: (phase, key, owner, duration, outcome, blocked_by).
type Slow = (String, String, String, i64, String, Vec<Vec<u8>>);
fn slowlog(con: &mut redis::Connection) -> Vec<Slow> {
    let v = ok(con, &["DLOCK.SLOWLOG", "GET", "-1"]);
    let text = |v: &Value| String::from_utf8(as_bytes(v).to_vec()).unwrap();
    as_array(&v)
        .iter()
        .map(|e| {
            let e = as_array(e);
            (
                text(&e[2]),
                text(&e[3]),
                text(&e[4]),
                as_int(&e[7]),
                text(&e[8]),
                owners(&e[9]),
            )
        })
        .collect()
}

#[test]
fn slowlog_thresholds_bounded_length_and_reset() {
    let server = Server::start_with(ServerOpts::new().module_args([
        "slowlog-wait-ms",
        "100",
        "slowlog-hold-ms",
        "-1",
    ]));
    let mut c = server.conn();
    int(&mut c, &["DLOCK.ACQUIRE", "k", "holder", "PX", "60000"]);
    // A wait of ~150 ms (granted) and one of a moment.
    let t = waiter(&server, "k", "slow");
    wait_waiters(&mut c, "k", 1);
    thread::sleep(Duration::from_millis(150));
    int(&mut c, &["DLOCK.RELEASE", "k", "holder"]);
    assert!(t.join().unwrap().is_ok());
    let t = waiter(&server, "k", "quick");
    wait_waiters(&mut c, "k", 1);
    int(&mut c, &["DLOCK.RELEASE", "k", "slow"]);
    assert!(t.join().unwrap().is_ok());
    // A wait that times out after 150 ms.
    let r = cmd_str(&mut c, &["DLOCK.ACQUIRE", "k", "late", "WAIT", "150"]);
    assert_eq!(r, Ok(Value::Nil));
    let log = slowlog(&mut c);
    assert_eq!(log.len(), 2, "{log:?}");
    let (phase, key, owner, ms, outcome, by) = &log[1];
    assert_eq!(
        (phase.as_str(), key.as_str(), owner.as_str()),
        ("wait", "k", "slow")
    );
    assert!(*ms >= 140 && *ms < 10_000, "{ms}");
    assert_eq!(outcome, "granted");
    assert_eq!(by, &vec![b"holder".to_vec()]);
    let (_, _, owner, ms, outcome, by) = &log[0];
    assert_eq!((owner.as_str(), outcome.as_str()), ("late", "timeout"));
    assert!(*ms >= 140, "{ms}");
    assert_eq!(by, &vec![b"quick".to_vec()]);
    // Holds: every one at 0; the log keeps the newest max-len entries.
    ok(&mut c, &["CONFIG", "SET", "dlock.slowlog-hold-ms", "0"]);
    ok(&mut c, &["CONFIG", "SET", "dlock.slowlog-max-len", "3"]);
    int(&mut c, &["DLOCK.RELEASE", "k", "quick"]);
    int(&mut c, &["DLOCK.ACQUIRE", "f", "o"]);
    int(&mut c, &["DLOCK.FORCERELEASE", "f"]);
    int(&mut c, &["DLOCK.ACQUIRE", "d", "o"]);
    int(&mut c, &["DEL", "d"]);
    let log = slowlog(&mut c);
    assert_eq!(int(&mut c, &["DLOCK.SLOWLOG", "LEN"]), 3);
    let outcomes: Vec<(&str, &str)> = log.iter().map(|e| (e.1.as_str(), e.4.as_str())).collect();
    assert_eq!(
        outcomes,
        vec![("d", "deleted"), ("f", "forced"), ("k", "released")]
    );
    assert!(log.iter().all(|e| e.0 == "hold" && e.5.is_empty()));
    let v = ok(&mut c, &["DLOCK.SLOWLOG", "GET", "1"]);
    assert_eq!(as_array(&v).len(), 1);
    let ids: Vec<i64> = as_array(&ok(&mut c, &["DLOCK.SLOWLOG", "GET"]))
        .iter()
        .map(|e| as_int(&as_array(e)[0]))
        .collect();
    assert!(ids.windows(2).all(|w| w[0] > w[1]), "{ids:?}");
    assert_eq!(ok(&mut c, &["DLOCK.SLOWLOG", "RESET"]), Value::Okay);
    assert_eq!(int(&mut c, &["DLOCK.SLOWLOG", "LEN"]), 0);
    for (args, words) in [
        (vec!["DLOCK.SLOWLOG", "GET", "-2"], "must be -1 (all)"),
        (vec!["DLOCK.SLOWLOG", "LEN", "1"], "syntax error"),
        (vec!["DLOCK.SLOWLOG", "TAIL"], "syntax error"),
    ] {
        let e = expect_err(cmd_str(&mut c, &args));
        assert!(e.contains(words), "{args:?}: {e}");
    }
}

/// docs/dlock-exporter.lua (redis_exporter's `-script`) run with EVAL:
/// every INFO dlock counter, and each percentile as its own value.
#[test]
fn exporter_script_returns_counters_and_percentiles() {
    let server = Server::start_with(opts());
    let mut c = server.conn();
    let script = std::fs::read_to_string(workspace_dir().join("docs/dlock-exporter.lua")).unwrap();
    for i in 0..3 {
        int(
            &mut c,
            &[
                "DLOCK.RWACQUIRE",
                &format!("e{i}"),
                "o",
                "READ",
                "PX",
                "100",
            ],
        );
    }
    let gone = wait_until(Duration::from_secs(10), || {
        cmd_str(&mut c, &["EXISTS", "e0", "e1", "e2"]) == Ok(Value::Int(0))
    });
    assert!(gone);
    let v: Vec<String> = redis::cmd("EVAL")
        .arg(&script)
        .arg(0)
        .query(&mut c)
        .unwrap();
    assert!(v.len().is_multiple_of(2), "{v:?}");
    let m: std::collections::HashMap<&str, &str> = v
        .chunks(2)
        .map(|kv| (kv[0].as_str(), kv[1].as_str()))
        .collect();
    assert_eq!(m.get("dlock_grants"), Some(&"3"), "{m:?}");
    assert_eq!(m.get("dlock_expirations"), Some(&"3"), "{m:?}");
    assert!(m.contains_key("dlock_locks"), "{m:?}");
    for p in ["p50", "p99", "p99_9"] {
        for name in [
            "dlock_hold_percentiles_usec",
            "dlock_hold_percentiles_usec_rw",
        ] {
            let v: f64 = m[format!("{name}_{p}").as_str()].parse().unwrap();
            assert!(
                (100_000.0..=100_000.0 * 17.0 / 16.0).contains(&v),
                "{name}_{p}: {v}"
            );
        }
    }
    // Every value is a number (what redis_exporter parses).
    assert!(m.values().all(|v| v.parse::<f64>().is_ok()), "{m:?}");
}

#[test]
fn blocked_by_lists_the_first_64_and_counts_them_all() {
    let server = Server::start();
    let mut c = server.conn();
    assert!(int(&mut c, &["DLOCK.FAIRACQUIRE", "long", "holder"]) > 0);
    for i in 0..70 {
        assert_eq!(
            ok(&mut c, &["DLOCK.FAIRACQUIRE", "long", &format!("q{i}")]),
            Value::Nil
        );
    }
    let info = info_raw(&mut c, "long");
    let ws = waiters(&info);
    assert_eq!(ws.len(), 70);
    // The first place waits for the holder; the last for the holder and the
    // 69 places ahead of it.
    assert_eq!(as_array(field(&ws[0], "blocked_by")).len(), 1);
    assert_eq!(as_int(field(&ws[0], "blocked_by_count")), 1);
    let last = &ws[69];
    let by = as_array(field(last, "blocked_by"));
    assert_eq!(by.len(), 64);
    assert_eq!(as_bytes(&by[0]), b"holder");
    assert_eq!(as_int(field(last, "blocked_by_count")), 70);
}

#[test]
fn a_renamed_or_moved_lock_ends_no_hold_and_a_deleted_one_does() {
    let server = Server::start_with(ServerOpts::new().module_args(["slowlog-hold-ms", "0"]));
    let mut c = server.conn();
    assert!(int(&mut c, &["DLOCK.ACQUIRE", "k", "a", "PX", "60000"]) > 0);
    ok(&mut c, &["RENAME", "k", "k2"]);
    assert_eq!(int(&mut c, &["MOVE", "k2", "1"]), 1);
    ok(&mut c, &["SELECT", "1"]);
    // Let the job that records unlinked holds run.
    thread::sleep(Duration::from_millis(200));
    assert!(
        slowlog(&mut c).is_empty(),
        "a rename or move ended a hold: {:?}",
        slowlog(&mut c)
    );
    assert_eq!(int(&mut c, &["DLOCK.RELEASE", "k2", "a"]), 1);
    // A deleted lock's hold ends as `deleted`.
    assert!(int(&mut c, &["DLOCK.ACQUIRE", "d", "b", "PX", "60000"]) > 0);
    assert_eq!(int(&mut c, &["DEL", "d"]), 1);
    let mut log = Vec::new();
    assert!(wait_until(Duration::from_secs(10), || {
        log = slowlog(&mut c);
        log.len() == 2
    }));
    let ends: Vec<(&str, &str, &str)> = log
        .iter()
        .map(|e| (e.1.as_str(), e.2.as_str(), e.4.as_str()))
        .collect();
    assert_eq!(ends, [("d", "b", "deleted"), ("k2", "a", "released")]);
    let holds: i64 = stats(&mut c)["mutex"].1.iter().map(|b| b.1).sum();
    assert_eq!(holds, 2);
}

/// `DLOCK.SCAN 0 COUNT 1000` with `opts`: the keys of one call (the db has
/// few keys).
fn scan_keys(con: &mut redis::Connection, opts: &[&str]) -> Vec<String> {
    let mut args = vec!["0", "COUNT", "1000"];
    args.extend_from_slice(opts);
    let (next, mut keys): (String, Vec<String>) = redis::cmd("DLOCK.SCAN")
        .arg(&args)
        .query(con)
        .expect("DLOCK.SCAN");
    assert_eq!(next, "0");
    keys.sort();
    keys
}

/// Issue 43: every read agrees with CHECK about which holds are live, also
/// before the module's timer or job has removed an ended hold. Inside one
/// script (the timer cannot run while it does), a lease of 50 ms that
/// ended is not listed by INFO (it was, with `ttl 0`, while CHECK said 0).
/// While clients are paused (the timers and jobs wait for its end), INFO
/// and SCAN of the master leave out an ended lease and the hold of a
/// killed `BIND` connection, show a lock-delay's hold as delayed, and the
/// replica's INFO and CHECK agree with each other by its own clock.
#[test]
fn reads_never_show_a_hold_that_check_calls_dead() {
    let master = Server::start();
    let replica = Server::start();
    replica.make_replica_of(&master);
    let mut c = master.conn();

    let script = "local t = redis.call('DLOCK.ACQUIRE', KEYS[1], 'a', 'PX', '50') \
                  local function us() local n = redis.call('TIME') \
                  return tonumber(n[1]) * 1000000 + tonumber(n[2]) end \
                  local start = us() repeat until us() - start >= 200000 \
                  return {redis.call('DLOCK.INFO', KEYS[1]), redis.call('DLOCK.CHECK', KEYS[1], t)}";
    let r = cmd_str(&mut c, &["EVAL", script, "1", "scripted"]).expect("EVAL");
    assert_eq!(
        r,
        Value::Array(vec![Value::Nil, Value::Int(0)]),
        "INFO and CHECK inside the script"
    );

    let lease = int(&mut c, &["DLOCK.ACQUIRE", "lease", "a", "PX", "100"]);
    let delayed = int(
        &mut c,
        &[
            "DLOCK.ACQUIRE",
            "delayed",
            "a",
            "PX",
            "100",
            "LOCKDELAY",
            "60000",
        ],
    );
    let long = int(&mut c, &["DLOCK.ACQUIRE", "long", "a", "PX", "60000"]);
    let mut b = master.conn();
    let bound = int(
        &mut b,
        &["DLOCK.ACQUIRE", "bound", "b", "PX", "60000", "BIND"],
    );
    let b_id = int(&mut b, &["CLIENT", "ID"]).to_string();
    wait_replica_synced(&master, &replica);
    let mut rc = replica.conn();
    assert_eq!(
        int(&mut rc, &["DLOCK.CHECK", "bound", &bound.to_string()]),
        1
    );

    ok(&mut c, &["CLIENT", "PAUSE", "60000", "WRITE"]);
    assert_eq!(int(&mut c, &["CLIENT", "KILL", "ID", &b_id]), 1);
    thread::sleep(Duration::from_millis(300));
    let check = |con: &mut redis::Connection, key: &str, t: i64| {
        int(con, &["DLOCK.CHECK", key, &t.to_string()])
    };
    for con in [&mut c, &mut rc] {
        assert_eq!(check(con, "lease", lease), 0);
        assert_eq!(check(con, "delayed", delayed), 0);
        assert_eq!(check(con, "long", long), 1);
        assert_eq!(
            info_raw(con, "lease"),
            Value::Nil,
            "an ended lease is listed"
        );
        let d = info_raw(con, "delayed");
        assert_eq!(
            as_bytes(field(&holders(&d)[0], "delayed")),
            b"expired",
            "{d:?}"
        );
    }
    // The master knows the bound connection closed; its replica learns it
    // from the master's end, after the pause.
    assert_eq!(check(&mut c, "bound", bound), 0);
    assert_eq!(
        info_raw(&mut c, "bound"),
        Value::Nil,
        "a killed bound hold is listed"
    );
    assert_eq!(scan_keys(&mut c, &[]), ["delayed", "long"]);
    assert_eq!(scan_keys(&mut c, &["OWNER", "b"]), Vec::<String>::new());
    assert_eq!(check(&mut rc, "bound", bound), 1);
    assert_eq!(holders(&info_raw(&mut rc, "bound")).len(), 1);

    ok(&mut c, &["CLIENT", "UNPAUSE"]);
    let settled = wait_until(Duration::from_secs(10), || {
        int(&mut c, &["EXISTS", "lease", "bound"]) == 0
    });
    assert!(
        settled,
        "the ended holds were never removed after the pause"
    );
    wait_replica_synced(&master, &replica);
    for key in ["lease", "bound", "delayed", "long", "scripted"] {
        assert_eq!(info_norm(&mut rc, key), info_norm(&mut c, key), "{key}");
    }
    assert_eq!(scan_keys(&mut rc, &[]), ["delayed", "long"]);
}
