//! Integration tests of the blocking client against real redis-server processes
//! started through the workspace's one harness (tests/common).

mod support;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use dlock_client::{Client, LostReason, MultiLock, Options, RedLock, Unlock, WaitMode};
use redis::Value;
use support::*;

fn renewals(server: &Server) -> u64 {
    server
        .info_field("dlock", "dlock_renewals")
        .and_then(|v| v.parse().ok())
        .expect("dlock_renewals in INFO dlock")
}

#[test]
fn release_on_drop_and_unlock_outcomes() {
    let s = Server::start();
    let a = Client::open(s.url()).unwrap();
    let b = Client::open(s.url()).unwrap();
    {
        let g = a.mutex("k").lock().unwrap();
        assert!(g.token() > 0);
        assert!(b
            .mutex("k")
            .try_lock(Duration::ZERO, None)
            .unwrap()
            .is_none());
    }
    assert!(info_nil(&s, "k"), "dropping the guard releases the lock");
    let g = b
        .mutex("k")
        .try_lock(Duration::ZERO, None)
        .unwrap()
        .expect("free");
    assert_eq!(g.unlock().unwrap(), Unlock::Released);
    assert!(info_nil(&s, "k"));
}

#[test]
fn reentrant_per_thread_and_owner_override() {
    let s = Server::start();
    let c = Client::open(s.url()).unwrap();
    let lock = c.mutex("re");
    let outer = lock.lock().unwrap();
    let inner = lock.lock().unwrap();
    assert_eq!(
        outer.token(),
        inner.token(),
        "a reentrant grant keeps the token"
    );
    assert_eq!(outer.owner(), inner.owner());
    // Another thread of the same client is another owner.
    let l2 = lock.clone();
    let other = thread::spawn(move || {
        l2.try_lock(Duration::from_millis(50), None)
            .unwrap()
            .is_some()
    })
    .join()
    .unwrap();
    assert!(!other, "another thread must not get a held mutex");
    // ...unless it uses the same owner explicitly.
    let l3 = lock.clone().with_owner(outer.owner().to_string());
    let same = thread::spawn(move || {
        let g = l3
            .try_lock(Duration::ZERO, None)
            .unwrap()
            .expect("same owner re-enters");
        g.unlock().unwrap()
    })
    .join()
    .unwrap();
    assert_eq!(same, Unlock::StillHeld);
    assert_eq!(inner.unlock().unwrap(), Unlock::StillHeld);
    assert_eq!(outer.unlock().unwrap(), Unlock::Released);
    assert!(info_nil(&s, "re"));
}

#[test]
fn fencing_token_on_the_guard_grows() {
    let s = Server::start();
    let c = Client::open(s.url()).unwrap();
    let g1 = c.mutex("f").lock().unwrap();
    let t1 = g1.token();
    let info = cmd_str(&mut s.conn(), &["DLOCK.INFO", "f"]).unwrap();
    let Value::Array(fields) = info else {
        panic!("INFO: {info:?}")
    };
    assert_eq!(
        fields[3],
        Value::Int(t1 as i64),
        "guard token = DLOCK.INFO token"
    );
    drop(g1);
    let t2 = c.mutex("f").lock().unwrap().token();
    assert!(t2 > t1, "{t2} > {t1}");
    let t3 = c.fair("f2").lock().unwrap().token();
    assert!(t3 > 0);
}

#[test]
fn releasing_a_lost_lock_says_so() {
    let s = Server::start();
    let c = Client::open(s.url()).unwrap();
    let g = c
        .mutex("short")
        .try_lock(Duration::ZERO, Some(Duration::from_millis(150)))
        .unwrap()
        .unwrap();
    let lost = g.lost_signal();
    assert_eq!(
        lost.wait_timeout(Duration::from_secs(5)),
        Some(LostReason::Expired)
    );
    assert!(g.is_lost());
    assert!(wait_until(Duration::from_secs(5), || info_nil(&s, "short")));
    assert_eq!(g.unlock().unwrap(), Unlock::Lost);
}

#[test]
fn force_release_fires_the_lost_signal() {
    let s = Server::start();
    let c = Client::with_options(s.url(), fast_watchdog()).unwrap();
    let g = c.mutex("fr").lock().unwrap();
    let lost = g.lost_signal();
    // The client's subscriber is on the lock's channel within a few round trips.
    thread::sleep(Duration::from_millis(300));
    assert_eq!(
        cmd_str(&mut s.conn(), &["DLOCK.FORCERELEASE", "fr"]).unwrap(),
        Value::Int(1)
    );
    // Told by the lock's notice (released, and this guard did not release it).
    assert_eq!(
        lost.wait_timeout(Duration::from_secs(5)),
        Some(LostReason::Forced)
    );
    assert_eq!(g.unlock().unwrap(), Unlock::Lost);
}

#[test]
fn rw_and_fair_handles() {
    let s = Server::start();
    let a = Client::open(s.url()).unwrap();
    let b = Client::open(s.url()).unwrap();
    let r1 = a.rw("doc").read().lock().unwrap();
    let r2 = b
        .rw("doc")
        .read()
        .try_lock(Duration::ZERO, None)
        .unwrap()
        .expect("readers share");
    assert!(b
        .rw("doc")
        .write()
        .try_lock(Duration::from_millis(100), None)
        .unwrap()
        .is_none());
    drop(r1);
    // The other reader's hold remains; a writer waits on the server until it goes.
    let w = thread::spawn(move || {
        let t = Instant::now();
        let g = a
            .rw("doc")
            .write()
            .try_lock(Duration::from_secs(10), None)
            .unwrap();
        (g.map(|g| g.unlock().unwrap()), t.elapsed())
    });
    thread::sleep(Duration::from_millis(200));
    assert_eq!(r2.unlock().unwrap(), Unlock::Released);
    let (outcome, took) = w.join().unwrap();
    assert_eq!(outcome, Some(Unlock::Released));
    assert!(took < Duration::from_secs(8));

    let f = b.fair("queue").lock().unwrap();
    assert_eq!(f.unlock().unwrap(), Unlock::Released);
    assert!(info_nil(&s, "doc") && info_nil(&s, "queue"));
}

#[test]
fn waiting_is_split_into_slices_and_bounded() {
    let s = Server::start();
    let opts = Options::default().wait_slice(Duration::from_millis(200));
    let a = Client::with_options(s.url(), opts.clone()).unwrap();
    let b = Client::with_options(s.url(), opts).unwrap();
    let held = a.mutex("w").lock().unwrap();
    // A bounded wait gives up in time.
    let t = Instant::now();
    assert!(b
        .mutex("w")
        .try_lock(Duration::from_millis(500), None)
        .unwrap()
        .is_none());
    let took = t.elapsed();
    assert!(
        took >= Duration::from_millis(450) && took < Duration::from_secs(5),
        "{took:?}"
    );
    // A long wait (many slices) is granted when the holder lets go.
    let waiter = thread::spawn(move || {
        let g = b.mutex("w").lock().unwrap();
        g.token()
    });
    thread::sleep(Duration::from_millis(900));
    let old = held.token();
    drop(held);
    let token = waiter.join().unwrap();
    assert!(token > old);
    let waits: u64 = s
        .info_field("dlock", "dlock_waits_begun")
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        waits >= 4,
        "waiting used several server-side WAIT slices ({waits})"
    );
}

#[test]
fn notification_mode_waits_without_blocking_a_connection() {
    let s = Server::start();
    let a = Client::open(s.url()).unwrap();
    let b = Client::open(s.url()).unwrap();
    let held = a.mutex("n").lock().unwrap();
    let lock = b.mutex("n").wait_mode(WaitMode::Notifications);
    let t = Instant::now();
    assert!(lock
        .try_lock(Duration::from_millis(300), None)
        .unwrap()
        .is_none());
    assert!(t.elapsed() >= Duration::from_millis(250));
    let waiter = thread::spawn(move || {
        let g = lock.try_lock(Duration::from_secs(20), None).unwrap();
        let at = Instant::now();
        (g.map(|g| g.unlock().unwrap()), at)
    });
    thread::sleep(Duration::from_millis(500));
    let released = Instant::now();
    drop(held);
    let (outcome, at) = waiter.join().unwrap();
    assert_eq!(outcome, Some(Unlock::Released));
    // Woken by the `released` notice, well before the 5 s slice would end.
    assert!(at.duration_since(released) < Duration::from_secs(3));
    assert_eq!(
        s.info_field("dlock", "dlock_waits_begun").as_deref(),
        Some("0"),
        "no connection waited on the server"
    );
}

#[test]
fn watchdog_keeps_a_one_second_lease_for_five_seconds_then_stops() {
    let s = Server::start();
    let c = Client::with_options(s.url(), fast_watchdog()).unwrap();
    let other = Client::open(s.url()).unwrap();
    let g = c.mutex("wd").lock().unwrap();
    let end = Instant::now() + Duration::from_secs(5);
    while Instant::now() < end {
        assert!(other
            .mutex("wd")
            .try_lock(Duration::ZERO, None)
            .unwrap()
            .is_none());
        assert!(!g.is_lost());
        thread::sleep(Duration::from_millis(250));
    }
    assert!(renewals(&s) >= 5, "renewed every ~300 ms");
    assert_eq!(g.unlock().unwrap(), Unlock::Released);
    let after = renewals(&s);
    thread::sleep(Duration::from_millis(1200));
    assert_eq!(renewals(&s), after, "no renewal after release");
    // Dropping (instead of unlock) stops the watchdog too.
    let g = c.mutex("wd2").lock().unwrap();
    thread::sleep(Duration::from_millis(400));
    drop(g);
    let after = renewals(&s);
    thread::sleep(Duration::from_millis(1000));
    assert_eq!(renewals(&s), after, "no renewal after drop");
}

#[test]
fn paused_server_fires_lost_before_the_lease_ends() {
    let s = Server::start();
    let c = Client::with_options(s.url(), fast_watchdog()).unwrap();
    let g = c.mutex("p").lock().unwrap();
    thread::sleep(Duration::from_millis(700)); // a few renewals
    let lost = g.lost_signal();
    s.pause();
    let paused = Instant::now();
    let reason = lost.wait_timeout(Duration::from_secs(10));
    let took = paused.elapsed();
    s.resume();
    assert_eq!(reason, Some(LostReason::Unreachable));
    // The last confirmed renewal is at most one interval (+ slack) before the pause,
    // so the 1 s lease ends at most ~1 s after it.
    assert!(took < Duration::from_millis(2500), "lost after {took:?}");
    assert!(g.is_lost());
    // After the resume, releasing works and reports something (never panics).
    let outcome = g.unlock();
    assert!(outcome.is_ok(), "{outcome:?}");
}

#[test]
fn killed_server_fires_lost() {
    let mut s = Server::start();
    let c = Client::with_options(s.url(), fast_watchdog()).unwrap();
    let g = c.mutex("k").lock().unwrap();
    let lost = g.lost_signal();
    s.stop();
    let t = Instant::now();
    assert_eq!(
        lost.wait_timeout(Duration::from_secs(10)),
        Some(LostReason::Unreachable)
    );
    assert!(
        t.elapsed() < Duration::from_millis(2500),
        "{:?}",
        t.elapsed()
    );
    // The release fails, and once more on a fresh connection: unknown.
    assert_eq!(g.unlock().unwrap(), Unlock::Unknown);
}

#[test]
fn multilock_rolls_back_when_one_lock_is_taken_elsewhere() {
    let s1 = Server::start();
    let s2 = Server::start();
    let c1 = Client::open(s1.url()).unwrap();
    let c2 = Client::open(s2.url()).unwrap();
    let intruder = Client::open(s2.url()).unwrap();
    let taken = intruder.mutex("b").lock().unwrap();

    let m = MultiLock::new([c2.mutex("b"), c1.mutex("a"), c1.mutex("c")]).unwrap();
    let t = Instant::now();
    assert!(m
        .try_lock(Duration::from_millis(400), None)
        .unwrap()
        .is_none());
    assert!(t.elapsed() < Duration::from_secs(5));
    assert!(
        info_nil(&s1, "a") && info_nil(&s1, "c"),
        "rolled back on server 1"
    );

    drop(taken);
    let g = m
        .try_lock(Duration::from_secs(2), None)
        .unwrap()
        .expect("all free now");
    assert_eq!(g.tokens().len(), 3);
    assert!(!info_nil(&s1, "a") && !info_nil(&s1, "c") && !info_nil(&s2, "b"));
    assert_eq!(
        g.unlock().unwrap(),
        vec![Unlock::Released, Unlock::Released, Unlock::Released]
    );
    assert!(info_nil(&s1, "a") && info_nil(&s1, "c") && info_nil(&s2, "b"));
}

#[test]
fn redlock_acquires_with_two_of_five_down_and_fails_with_three() {
    let mut servers: Vec<Server> = (0..5).map(|_| Server::start()).collect();
    let urls: Vec<String> = servers.iter().map(Server::url).collect();
    let lock = RedLock::open(urls.clone(), "rl").unwrap();
    assert_eq!(lock.quorum(), 3);

    servers[0].stop(); // dead
    servers[1].pause(); // hung
    let lease = Duration::from_secs(10);
    let g = lock
        .try_lock(Duration::from_secs(3), Some(lease))
        .unwrap()
        .expect("3 of 5 nodes are up");
    assert!(g.validity() > Duration::from_secs(8) && g.validity() < lease);
    assert_eq!(g.tokens().iter().flatten().count(), 3);
    assert_eq!(g.unlock().unwrap(), Unlock::Released);

    servers[2].pause();
    let other = RedLock::open(urls, "rl")
        .unwrap()
        .node_timeout(Duration::from_millis(50));
    let t = Instant::now();
    assert!(other
        .try_lock(Duration::from_millis(600), Some(lease))
        .unwrap()
        .is_none());
    assert!(t.elapsed() < Duration::from_secs(5));
    for s in &servers[3..] {
        assert!(info_nil(s, "rl"), "a failed attempt releases on every node");
    }
    servers[1].resume();
    servers[2].resume();
}

#[test]
fn redlock_watchdog_renews_on_a_majority_and_reports_loss() {
    let mut servers: Vec<Server> = (0..3).map(|_| Server::start()).collect();
    let urls: Vec<String> = servers.iter().map(Server::url).collect();
    let lock = RedLock::open_with_options(urls, "rw", fast_watchdog()).unwrap();
    let g = lock.lock().unwrap();
    servers[0].stop();
    thread::sleep(Duration::from_millis(2000));
    assert!(!g.is_lost(), "2 of 3 still renew");
    assert!(g.validity() > Duration::ZERO);
    let lost = g.lost_signal();
    servers[1].stop();
    assert_eq!(
        lost.wait_timeout(Duration::from_secs(10)),
        Some(LostReason::Unreachable)
    );
    assert_eq!(g.validity(), Duration::ZERO);
}

/// The `counter` example's binary (built by `cargo test` with the other examples).
fn example_bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap(); // target/<profile>
    let bin = dir.join("examples").join(name);
    if !bin.is_file() {
        let profile = if dir.ends_with("release") {
            vec!["--release"]
        } else {
            vec![]
        };
        let st = Command::new(env!("CARGO"))
            .args(["build", "-p", "dlock-client", "--example", name])
            .args(profile)
            .status()
            .expect("cargo build --example");
        assert!(st.success());
    }
    bin
}

#[test]
fn mutual_exclusion_across_three_processes() {
    let s = Server::start();
    let bin = example_bin("counter");
    let per = 150;
    let children: Vec<_> = (0..3)
        .map(|_| {
            Command::new(&bin)
                .args([s.url(), "mx".into(), per.to_string()])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn counter example")
        })
        .collect();
    for child in children {
        let out = child.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(text.contains("overlaps=0"), "{text}");
    }
    let total: i64 = redis::cmd("GET")
        .arg("mx:counter")
        .query(&mut s.conn())
        .unwrap();
    assert_eq!(total, 3 * per as i64, "no lost update");
    assert!(info_nil(&s, "mx:lock"));
}
