//! Durable grants (`replicas` / [`Durable`]): `WAIT` on the granting connection,
//! release and error (or retry) when too few replicas acknowledge, `NOREPLICAS` as its
//! own error. Real master + replica through the shared harness (tests/common).

mod support;

use std::thread;
use std::time::{Duration, Instant};

use dlock_client::aio::AsyncClient;
use dlock_client::{Client, Durable, Error, LockKind, Options};
use redis::Value;
use support::*;

/// A master and one replica, the link up and synced.
fn replicated() -> (Server, Server) {
    let master = Server::start();
    let replica = Server::start();
    replica.make_replica_of(&master);
    (master, replica)
}

fn opts() -> Options {
    Options::default()
        .command_timeout(Duration::from_secs(5))
        .connect_timeout(Duration::from_secs(5))
}

/// How many holds `key` has on `server` (0 when no lock exists).
fn holders(server: &Server, key: &str) -> usize {
    let v = cmd_str(&mut server.conn(), &["DLOCK.INFO", key]).expect("DLOCK.INFO");
    let Value::Array(items) = v else { return 0 };
    let mut it = items.iter();
    while let Some(k) = it.next() {
        let next = it.next();
        if matches!(k, Value::BulkString(b) if b == b"holders") {
            if let Some(Value::Array(h)) = next {
                return h.len();
            }
        }
    }
    0
}

/// `calls` of `WAIT` in INFO commandstats.
fn wait_calls(server: &Server) -> u64 {
    server
        .info_field("commandstats", "cmdstat_wait")
        .and_then(|v| {
            v.split(',')
                .find_map(|kv| kv.strip_prefix("calls=").map(str::to_string))
        })
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

fn kinds(c: &Client) -> Vec<dlock_client::Lock> {
    vec![
        c.mutex("d-mutex"),
        c.fair("d-fair"),
        c.rw("d-rw").read(),
        c.rw("d-rw").write(),
        c.semaphore("d-sem", 3, 2),
    ]
}

#[test]
fn a_live_replica_acknowledges_every_kind_of_grant() {
    let (master, replica) = replicated();
    let c = Client::with_options(master.url(), opts()).unwrap();
    for lock in kinds(&c) {
        let lock = lock.replicas(1, Duration::from_secs(5));
        let before = wait_calls(&master);
        let g = lock.lock().unwrap();
        assert_eq!(
            wait_calls(&master),
            before + 1,
            "{:?}: one WAIT",
            lock.kind()
        );
        // WAIT answered 1: the replica has applied the grant already.
        assert_eq!(holders(&replica, lock.name()), 1, "{:?}", lock.kind());
        // try_lock with an explicit lease too.
        drop(g);
        let g = lock
            .try_lock(Duration::from_secs(1), Some(Duration::from_secs(10)))
            .unwrap()
            .expect("free");
        assert_eq!(holders(&replica, lock.name()), 1);
        g.unlock().unwrap();
    }
}

#[test]
fn a_paused_replica_fails_the_acquire_and_leaves_no_hold() {
    let (master, replica) = replicated();
    let c = Client::with_options(master.url(), opts()).unwrap();
    replica.pause();
    for lock in kinds(&c) {
        let lock = lock.replicas(1, Duration::from_millis(200));
        let t0 = Instant::now();
        match lock.lock() {
            Err(Error::NotDurable {
                wanted: 1,
                acked: 0,
            }) => {}
            other => panic!("{:?}: expected NotDurable, got {other:?}", lock.kind()),
        }
        assert!(t0.elapsed() >= Duration::from_millis(190), "WAIT waited");
        assert_eq!(
            holders(&master, lock.name()),
            0,
            "{:?}: released",
            lock.kind()
        );
        // A reentrant grant on top of a held lock: only the new hold goes.
        let held = c.mutex("d-re").lock().unwrap();
        let e = c
            .mutex("d-re")
            .replicas(1, Duration::from_millis(100))
            .try_lock(Duration::ZERO, None)
            .unwrap_err();
        assert!(e.is_not_durable(), "{e}");
        assert_eq!(held.unlock().unwrap(), dlock_client::Unlock::Released);
    }
    replica.resume();
    // Back: granted again.
    let g = c
        .mutex("d-mutex")
        .replicas(1, Duration::from_secs(5))
        .lock();
    assert!(g.is_ok(), "{g:?}");
}

#[test]
fn retries_when_asked_and_gives_up_after_them() {
    let (master, replica) = replicated();
    let c = Client::with_options(master.url(), opts()).unwrap();
    replica.pause();
    let lock = c
        .mutex("d-retry")
        .durable(Durable::new(1, Duration::from_millis(100)).retries(2));
    let before = wait_calls(&master);
    let e = lock.lock().unwrap_err();
    assert!(e.is_not_durable(), "{e}");
    assert_eq!(wait_calls(&master), before + 3, "one try and two retries");
    // Also for a single try (no wait).
    let e = lock.try_lock(Duration::ZERO, None).unwrap_err();
    assert!(e.is_not_durable(), "{e}");
    assert_eq!(wait_calls(&master), before + 6);
    assert_eq!(holders(&master, "d-retry"), 0);

    // The replica comes back while the client retries: granted.
    let lock = c
        .mutex("d-retry")
        .durable(Durable::new(1, Duration::from_millis(100)).retries(100));
    let resumer = thread::spawn({
        let pid = replica.pid;
        move || {
            thread::sleep(Duration::from_millis(300));
            let _ = std::process::Command::new("kill")
                .args(["-CONT", &pid.to_string()])
                .status();
        }
    });
    let g = lock.lock().expect("granted once the replica is back");
    resumer.join().unwrap();
    assert_eq!(holders(&replica, "d-retry"), 1);
    drop(g);
}

#[test]
fn min_replicas_to_write_refusals_are_their_own_error() {
    let master = Server::start_with(ServerOpts::new().args(["--min-replicas-to-write", "1"]));
    let c = Client::with_options(master.url(), opts()).unwrap();
    let e = c.mutex("d-norep").lock().unwrap_err();
    assert!(e.is_no_replicas(), "{e}");
    let e = c
        .fair("d-norep")
        .replicas(1, Duration::from_millis(100))
        .try_lock(Duration::ZERO, None)
        .unwrap_err();
    assert!(e.is_no_replicas(), "{e}");
    assert_eq!(holders(&master, "d-norep"), 0);
}

/// Waits until `key` has `n` waiters on `server`.
fn waiters(server: &Server, key: &str, n: usize) -> bool {
    wait_until(Duration::from_secs(10), || {
        let v = cmd_str(&mut server.conn(), &["DLOCK.INFO", key]).expect("DLOCK.INFO");
        let Value::Array(items) = v else { return false };
        items
            .chunks(2)
            .any(|kv| matches!(kv, [Value::BulkString(k), Value::Array(w)] if k == b"waiters" && w.len() == n))
    })
}

#[test]
fn a_grant_handed_to_a_blocked_waiter_is_counted() {
    let (master, replica) = replicated();
    let c = Client::with_options(master.url(), opts()).unwrap();
    for kind in [LockKind::Mutex, LockKind::Fair] {
        let key = format!("d-handoff-{kind:?}");
        let holder = match kind {
            LockKind::Fair => c.fair(&key),
            _ => c.mutex(&key),
        };
        // A live replica: the waiter's grant is acknowledged.
        let g = holder.lock().unwrap();
        let waiter = holder.clone().replicas(1, Duration::from_secs(5));
        let t = thread::spawn(move || waiter.lock());
        assert!(waiters(&master, &key, 1));
        drop(g);
        let granted = t.join().unwrap().expect("granted and acknowledged");
        assert!(granted.token() > 0);
        assert_eq!(holders(&replica, &key), 1);
        drop(granted);

        // A paused replica: the handed-over grant is not acknowledged, so the waiter
        // fails and lets it go (were the handoff not counted, WAIT would answer 1).
        let g = holder.lock().unwrap();
        let waiter = holder.clone().replicas(1, Duration::from_millis(300));
        let t = thread::spawn(move || waiter.lock().map(|g| g.token()));
        assert!(waiters(&master, &key, 1));
        replica.pause();
        drop(g);
        match t.join().unwrap() {
            Err(Error::NotDurable {
                wanted: 1,
                acked: 0,
            }) => {}
            other => panic!("{kind:?}: expected NotDurable, got {other:?}"),
        }
        assert_eq!(holders(&master, &key), 0, "{kind:?}: no hold left");
        replica.resume();
        wait_replica_synced(&master, &replica);
    }
}

#[test]
fn the_async_client_is_durable_too() {
    let (master, replica) = replicated();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let c = AsyncClient::with_options(master.url(), opts()).unwrap();
        let g = c
            .semaphore("d-async", 2, 1)
            .replicas(1, Duration::from_secs(5))
            .lock()
            .await
            .unwrap();
        assert_eq!(holders(&replica, "d-async"), 1);
        g.unlock().await.unwrap();
        replica.pause();
        for lock in [c.mutex("d-async-m"), c.rw("d-async-rw").write()] {
            let e = lock
                .durable(Durable::new(1, Duration::from_millis(150)).retries(1))
                .try_lock(Duration::from_secs(1), None)
                .await
                .unwrap_err();
            assert!(e.is_not_durable(), "{e}");
        }
        replica.resume();
    });
    assert_eq!(holders(&master, "d-async-m"), 0);
    assert_eq!(holders(&master, "d-async-rw"), 0);
}

#[test]
fn a_multilock_of_durable_locks_is_durable() {
    let (master, replica) = replicated();
    let c = Client::with_options(master.url(), opts()).unwrap();
    let multi = |d| {
        dlock_client::MultiLock::new([
            c.mutex("d-m1").replicas(1, d),
            c.mutex("d-m2").replicas(1, d),
        ])
        .unwrap()
    };
    let g = multi(Duration::from_secs(5)).lock().unwrap();
    assert_eq!(holders(&replica, "d-m1") + holders(&replica, "d-m2"), 2);
    drop(g);
    let m = multi(Duration::from_millis(200)); // short: it fails anyway
    replica.pause();
    assert!(m.lock().unwrap_err().is_not_durable());
    assert_eq!(holders(&master, "d-m1") + holders(&master, "d-m2"), 0);
    replica.resume();
}

/// A quick measurement, not a check: uncontended acquire latency with and without
/// `replicas(1, …)` on loopback. Run with
/// `cargo test --release -p dlock-client --test durable -- --ignored --nocapture`.
#[test]
#[ignore]
fn latency_of_durable_grants() {
    let (master, _replica) = replicated();
    let c = Client::with_options(master.url(), opts()).unwrap();
    let lease = Some(Duration::from_secs(10));
    for (label, lock) in [
        ("none", c.mutex("lat")),
        (
            "replicas=1",
            c.mutex("lat").replicas(1, Duration::from_secs(1)),
        ),
    ] {
        for _ in 0..300 {
            lock.try_lock(Duration::ZERO, lease).unwrap().expect("free");
        }
        let mut ts: Vec<Duration> = (0..5000)
            .map(|_| {
                let t = Instant::now();
                let g = lock.try_lock(Duration::ZERO, lease).unwrap().expect("free");
                let d = t.elapsed();
                g.unlock().unwrap();
                d
            })
            .collect();
        ts.sort();
        let at = |q: f64| ts[((ts.len() as f64) * q) as usize].as_micros();
        println!(
            "rust {label:12} p50 {:>6} us  p99 {:>6} us",
            at(0.5),
            at(0.99)
        );
    }
}
