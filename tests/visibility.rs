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
