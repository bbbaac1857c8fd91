//! Issue 43's bugs of the Rust client, against real redis-server processes (the
//! client contract, docs/clients.md): each test failed before its fix.

mod support;

use std::time::{Duration, Instant};

use dlock_client::aio::AsyncClient;
use dlock_client::{Client, LostReason, MultiLock, Options, Unlock};
use support::*;

/// Holds `key` as another owner (a raw connection) and releases it after `after`.
fn held_elsewhere_for(s: &Server, key: &str, after: Duration) -> std::thread::JoinHandle<()> {
    let mut con = s.conn();
    let granted = cmd_str(
        &mut con,
        &["DLOCK.ACQUIRE", key, "elsewhere", "PX", "60000"],
    );
    assert!(matches!(granted, Ok(redis::Value::Int(_))), "{granted:?}");
    let key = key.to_string();
    std::thread::spawn(move || {
        std::thread::sleep(after);
        let _ = cmd_str(&mut con, &["DLOCK.RELEASE", &key, "elsewhere"]);
    })
}

/// Issue 43: "with AsyncClient, every wait for a held lock fails after ~500 ms with
/// Err(Redis(timed out))" — redis 1.x times a multiplexed connection's reply out at
/// 500 ms, and the slices were 5 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_wait_outlives_the_transports_default_timeout() {
    let s = Server::start();
    let c = AsyncClient::open(s.url()).unwrap();
    let release = held_elsewhere_for(&s, "k", Duration::from_millis(1500));
    let t = Instant::now();
    let got = c.mutex("k").try_lock(Duration::from_secs(10), None).await;
    let took = t.elapsed();
    release.join().unwrap();
    let g = got.unwrap_or_else(|e| panic!("the wait failed after {took:?}: {e:?}"));
    let g = g.expect("granted when the other owner released");
    assert!(took >= Duration::from_millis(1400), "{took:?}");
    assert_eq!(g.unlock().await.unwrap(), Unlock::Released);
}

/// Issue 43: "watchdog_lease(2 s) keeps a 10 s renew interval; the guard reports
/// Unreachable at 1.98 s". A client given only a lease derives the interval from it.
#[test]
fn the_renew_interval_follows_the_watchdog_lease() {
    let s = Server::start();
    let opts = Options::default().watchdog_lease(Duration::from_secs(2));
    let c = Client::with_options(s.url(), opts).unwrap();
    let g = c.mutex("k").lock().unwrap();
    let lost = g.lost_signal().wait_timeout(Duration::from_secs(5));
    assert_eq!(lost, None, "lost while the server was there");
    let mut con = s.conn();
    let other = cmd_str(&mut con, &["DLOCK.ACQUIRE", "k", "other", "PX", "1000"]).unwrap();
    assert_eq!(other, redis::Value::Nil, "another owner got the lock");
    assert_eq!(g.unlock().unwrap(), Unlock::Released);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_async_renew_interval_follows_the_watchdog_lease() {
    let s = Server::start();
    let opts = Options::default().watchdog_lease(Duration::from_secs(2));
    let c = AsyncClient::with_options(s.url(), opts).unwrap();
    let g = c.mutex("k").lock().await.unwrap();
    let lost = tokio::time::timeout(Duration::from_secs(5), g.lost_signal().lost()).await;
    assert!(lost.is_err(), "lost while the server was there: {lost:?}");
    assert_eq!(g.unlock().await.unwrap(), Unlock::Released);
}

/// Issue 43: "a hold learns of a server-side end only at its next renewal, although
/// the module publishes released/expired/deleted/disconnected on the lock's channel at
/// once". Each end is told within a second (the watchdog renews every 10 s), with the
/// reason the notice gave.
#[test]
fn a_server_side_end_is_told_within_a_second() {
    let s = Server::start();
    let c = Client::open(s.url()).unwrap();
    let mut con = s.conn();
    for (key, act, why) in [
        ("f", "FORCERELEASE", LostReason::Forced),
        ("d", "DEL", LostReason::Deleted),
        ("b", "CLIENT KILL", LostReason::Disconnected),
    ] {
        let lock = match act {
            "CLIENT KILL" => c.mutex(key).bind(),
            _ => c.mutex(key),
        };
        let g = lock.lock().unwrap();
        std::thread::sleep(Duration::from_millis(300));
        let t = Instant::now();
        match act {
            "DEL" => cmd_str(&mut con, &["DEL", key]).unwrap(),
            // Every connection of the client but its subscriber's (type pubsub).
            "CLIENT KILL" => cmd_str(
                &mut con,
                &["CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"],
            )
            .unwrap(),
            _ => cmd_str(&mut con, &["DLOCK.FORCERELEASE", key]).unwrap(),
        };
        let reason = g.lost_signal().wait_timeout(Duration::from_secs(3));
        let took = t.elapsed();
        assert_eq!(reason, Some(why), "{act}: told {reason:?} after {took:?}");
        assert!(took < Duration::from_secs(1), "{act}: told after {took:?}");
        assert_eq!(g.unlock().unwrap(), Unlock::Lost);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_async_hold_hears_of_a_force_release_within_a_second() {
    let s = Server::start();
    let c = AsyncClient::open(s.url()).unwrap();
    let g = c.mutex("f").lock().await.unwrap();
    let sem = c.semaphore("s", 2, 1).lock().await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    for (key, lost) in [("f", g.lost_signal()), ("s", sem.lost_signal())] {
        let t = Instant::now();
        cmd_str(&mut s.conn(), &["DLOCK.FORCERELEASE", key]).unwrap();
        let reason = tokio::time::timeout(Duration::from_secs(3), lost.lost()).await;
        assert_eq!(reason.ok(), Some(LostReason::Forced), "{key}");
        assert!(
            t.elapsed() < Duration::from_secs(1),
            "told after {:?}",
            t.elapsed()
        );
    }
}

/// A MultiLock is lost when any of its locks is; a BIND MultiLock hears of its
/// connection's close.
#[test]
fn a_multilock_hears_of_its_bound_connection_closing() {
    let s = Server::start();
    let c = Client::open(s.url()).unwrap();
    let m = MultiLock::new([c.mutex("a").bind(), c.mutex("b").bind()]).unwrap();
    let g = m.lock().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let t = Instant::now();
    cmd_str(
        &mut s.conn(),
        &["CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"],
    )
    .unwrap();
    let reason = g.lost_signal().wait_timeout(Duration::from_secs(3));
    assert_eq!(reason, Some(LostReason::Disconnected));
    assert!(
        t.elapsed() < Duration::from_secs(1),
        "told after {:?}",
        t.elapsed()
    );
}

/// Issue 43 (Java's "a failed unlock() keeps the lock forever", tried here): the
/// client's pooled connection was killed; unlock retries once on a fresh connection.
#[test]
fn an_unlock_on_a_killed_connection_is_retried_on_a_fresh_one() {
    let s = Server::start();
    let c = Client::open(s.url()).unwrap();
    let g = c.mutex("k").lock().unwrap();
    let mut con = s.conn();
    cmd_str(
        &mut con,
        &["CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"],
    )
    .unwrap();
    assert_eq!(g.unlock().unwrap(), Unlock::Released);
    assert!(info_nil(&s, "k"), "the lock was released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_async_unlock_on_a_killed_connection_is_retried_on_a_fresh_one() {
    let s = Server::start();
    let c = AsyncClient::open(s.url()).unwrap();
    let g = c.mutex("k").lock().await.unwrap();
    cmd_str(
        &mut s.conn(),
        &["CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"],
    )
    .unwrap();
    assert_eq!(g.unlock().await.unwrap(), Unlock::Released);
    assert!(info_nil(&s, "k"), "the lock was released");
}

/// An unlock whose release cannot get through is `Unknown`, and the hold is never
/// renewed again (its lease ends on the server).
#[test]
fn an_unlock_that_cannot_get_through_is_unknown_and_renews_no_more() {
    let s = Server::start();
    let opts = Options::default()
        .watchdog_lease(Duration::from_secs(2))
        .command_timeout(Duration::from_millis(500));
    let c = Client::with_options(s.url(), opts).unwrap();
    let g = c.mutex("k").lock().unwrap();
    let lost = g.lost_signal();
    s.pause();
    let t = Instant::now();
    let outcome = g.unlock().unwrap();
    let took = t.elapsed();
    s.resume();
    assert_eq!(outcome, Unlock::Unknown);
    assert!(
        took < Duration::from_millis(1500),
        "two tries of 500 ms: {took:?}"
    );
    let renewals = || s.info_field("commandstats", "cmdstat_dlock.renew");
    let before = renewals();
    // The hold ends at its lease: the lost signal fires then.
    assert_eq!(
        lost.wait_timeout(Duration::from_secs(3)),
        Some(LostReason::Unreachable)
    );
    assert!(wait_until(Duration::from_secs(3), || info_nil(&s, "k")));
    assert_eq!(renewals(), before, "renewed after unlock");
}

/// A caller's deadline holds within 250 ms when the server does not answer (here:
/// SIGSTOPped, so connections are accepted by the kernel and nothing comes back). The
/// client gives up 100 ms past the deadline; the bound leaves room for a loaded
/// machine's scheduling (before the fix: 7.16 s, the slice plus a 5 s timeout).
#[test]
fn a_deadline_holds_when_the_server_is_frozen() {
    let s = Server::start();
    let c = Client::open(s.url()).unwrap();
    s.pause();
    let t = Instant::now();
    let r = c.mutex("k").try_lock(Duration::from_secs(2), None);
    let took = t.elapsed();
    s.resume();
    assert!(took < Duration::from_millis(2500), "{took:?}: {r:?}");
    // Its one slice's reply never came: not granted in time.
    assert!(matches!(&r, Ok(None)), "{r:?}");
}

/// Refused connections: a wait ends at its deadline with a timeout that carries the
/// failure; a single try fails at once with a connection error.
#[test]
fn a_deadline_holds_when_connections_are_refused() {
    let port = free_port();
    let c = Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
    let t = Instant::now();
    let r = c.mutex("k").try_lock(Duration::from_secs(1), None);
    let took = t.elapsed();
    assert!(matches!(&r, Err(e) if e.is_timeout()), "{r:?}");
    assert!(
        took >= Duration::from_millis(950) && took < Duration::from_millis(1250),
        "{took:?}"
    );
    let t = Instant::now();
    let r = c.mutex("k").try_lock(Duration::ZERO, None);
    assert!(matches!(&r, Err(e) if e.is_connection()), "{r:?}");
    assert!(
        t.elapsed() < Duration::from_millis(500),
        "{:?}",
        t.elapsed()
    );
}

/// The lost signal fires when the lease could have ended, however long a renewal
/// stalls (the server is SIGSTOPped: nothing answers, nothing closes).
#[test]
fn the_lost_signal_keeps_its_time_when_the_server_stops_answering() {
    let s = Server::start();
    let opts = Options::default().watchdog_lease(Duration::from_secs(2));
    let c = Client::with_options(s.url(), opts).unwrap();
    let g = c.mutex("k").lock().unwrap();
    std::thread::sleep(Duration::from_millis(500));
    s.pause();
    let t = Instant::now();
    let reason = g.lost_signal().wait_timeout(Duration::from_secs(5));
    let took = t.elapsed();
    s.resume();
    assert_eq!(reason, Some(LostReason::Unreachable));
    // The last renewal was sent before the pause: 2 s − 70 ms after it at the latest.
    assert!(
        took <= Duration::from_millis(1930),
        "told {took:?} after the pause"
    );
    assert!(g.is_lost(), "every question answers from the same state");
    // The signal was conservative by the margin: the server may still have had the
    // hold when it woke up; the release says which.
    let outcome = g.unlock().unwrap();
    assert!(
        matches!(outcome, Unlock::Lost | Unlock::Released),
        "{outcome:?}"
    );
    assert!(info_nil(&s, "k"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_async_deadline_holds_when_the_server_is_frozen() {
    let s = Server::start();
    let c = AsyncClient::open(s.url()).unwrap();
    s.pause();
    let t = Instant::now();
    let r = c.mutex("k").try_lock(Duration::from_secs(2), None).await;
    let took = t.elapsed();
    s.resume();
    assert!(took < Duration::from_millis(2500), "{took:?}: {r:?}");
    assert!(matches!(&r, Ok(None)), "{r:?}");
}

/// Bad input is refused before anything is sent, naming the argument.
#[test]
fn bad_input_is_refused_before_anything_is_sent() {
    let s = Server::start();
    let c = Client::open(s.url()).unwrap();
    let refused = |r: dlock_client::Result<Option<dlock_client::Guard>>, what: &str| {
        let e = r.unwrap_err();
        assert!(e.is_invalid_argument(), "{what}: {e:?}");
        assert!(e.to_string().contains(what), "the error names {what}: {e}");
    };
    refused(c.mutex("").try_lock(Duration::ZERO, None), "key");
    refused(
        c.mutex("k").try_lock(Duration::ZERO, Some(Duration::ZERO)),
        "lease",
    );
    let huge = Some(Duration::from_millis(1 << 41));
    refused(c.mutex("k").try_lock(Duration::ZERO, huge), "lease");
    refused(
        c.semaphore("s", 2, 3).try_lock(Duration::ZERO, None),
        "permits",
    );
    refused(
        c.mutex("k").with_owner("").try_lock(Duration::ZERO, None),
        "owner",
    );
    // Settings no client can work with are refused when the client is made.
    for (opts, what) in [
        (
            Options::default()
                .watchdog_lease(Duration::from_secs(2))
                .renew_interval(Duration::from_secs(2)),
            "renew_interval",
        ),
        (
            Options::default()
                .watchdog_lease(Duration::from_secs(2))
                .renew_interval(Duration::from_secs(3)),
            "renew_interval",
        ),
        (
            Options::default().watchdog_lease(Duration::ZERO),
            "watchdog_lease",
        ),
    ] {
        let e = Client::with_options(s.url(), opts.clone()).unwrap_err();
        assert!(
            e.is_invalid_argument() && e.to_string().contains(what),
            "{e}"
        );
        let e = AsyncClient::with_options(s.url(), opts).unwrap_err();
        assert!(
            e.is_invalid_argument() && e.to_string().contains(what),
            "{e}"
        );
    }
    let calls = s.info("commandstats");
    assert!(
        !calls.contains("cmdstat_dlock"),
        "a DLOCK command was sent: {calls}"
    );
}

/// A key of another type is the wrong kind (`WRONGTYPE`), as Go's ErrWrongKind.
#[test]
fn a_key_of_another_type_is_the_wrong_kind() {
    let s = Server::start();
    cmd_str(&mut s.conn(), &["SET", "k", "x"]).unwrap();
    let c = Client::open(s.url()).unwrap();
    let e = c.mutex("k").try_lock(Duration::ZERO, None).unwrap_err();
    assert!(e.is_wrong_kind(), "{e:?}");
}

/// `close()` stops the client's background work and is idempotent; commands fail
/// afterwards; a hold still held reports lost when its lease ends (it is not renewed).
#[test]
fn close_stops_everything_and_is_idempotent() {
    let s = Server::start();
    let opts = Options::default().watchdog_lease(Duration::from_secs(1));
    let c = Client::with_options(s.url(), opts).unwrap();
    let g = c.mutex("k").lock().unwrap();
    let released = c.mutex("r").lock().unwrap();
    let r_lost = released.lost_signal();
    assert_eq!(released.unlock().unwrap(), Unlock::Released);
    c.close();
    c.close();
    let e = c.mutex("x").try_lock(Duration::ZERO, None).unwrap_err();
    assert!(e.is_connection(), "{e:?}");
    assert_eq!(
        g.lost_signal().wait_timeout(Duration::from_secs(2)),
        Some(LostReason::Unreachable)
    );
    assert!(
        wait_until(Duration::from_secs(2), || info_nil(&s, "k")),
        "not renewed"
    );
    assert_eq!(r_lost.reason(), None, "a released hold is not lost");
    assert_eq!(g.unlock().unwrap(), Unlock::Unknown, "the client is closed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_close_stops_everything_and_is_idempotent() {
    let s = Server::start();
    let opts = Options::default().watchdog_lease(Duration::from_secs(1));
    let c = AsyncClient::with_options(s.url(), opts).unwrap();
    let g = c.mutex("k").lock().await.unwrap();
    c.close();
    c.close();
    let e = c
        .mutex("x")
        .try_lock(Duration::ZERO, None)
        .await
        .unwrap_err();
    assert!(e.is_connection(), "{e:?}");
    let lost = tokio::time::timeout(Duration::from_secs(2), g.lost_signal().lost()).await;
    assert_eq!(lost.ok(), Some(LostReason::Unreachable));
    assert!(
        info_nil(&s, "k") || {
            tokio::time::sleep(Duration::from_millis(300)).await;
            info_nil(&s, "k")
        }
    );
}
