//! One behaviour suite, run against both halves of the client: the blocking API
//! (`Client`, `MultiLock`, `RedLock`) and the async API (`AsyncClient`,
//! `AsyncMultiLock`, `AsyncRedLock`), on real redis-server processes. Each scenario is
//! written once; `suite!` instantiates it per half, with `sync!` / `wait!` turning
//! each client call into a plain call or an `.await`.

mod support;

use std::time::{Duration, Instant};

use redis::Value;
use support::*;

/// A blocking client call, as is.
macro_rules! sync {
    ($e:expr) => {
        $e
    };
}

/// An async client call, awaited.
macro_rules! wait {
    ($e:expr) => {
        $e.await
    };
}

/// Holds `key` on `s` as owner `other` (not this client), with a 30 s lease.
fn hold_elsewhere(s: &Server, key: &str) -> u64 {
    match cmd_str(
        &mut s.conn(),
        &["DLOCK.ACQUIRE", key, "other", "PX", "30000"],
    ) {
        Ok(Value::Int(t)) => t as u64,
        other => panic!("DLOCK.ACQUIRE answered {other:?}"),
    }
}

/// Releases the hold of `other` on `key` after `delay`, from another thread.
fn release_elsewhere_after(s: &Server, key: &str, delay: Duration) -> std::thread::JoinHandle<()> {
    let mut con = s.conn();
    let key = key.to_string();
    std::thread::spawn(move || {
        std::thread::sleep(delay);
        let r = cmd_str(&mut con, &["DLOCK.RELEASE", &key, "other"]);
        assert_eq!(r, Ok(Value::Int(1)), "the other owner released");
    })
}

fn waits_begun(s: &Server) -> u64 {
    s.info_field("dlock", "dlock_waits_begun")
        .and_then(|v| v.parse().ok())
        .unwrap_or(u64::MAX)
}

macro_rules! suite {
    ($half:ident, $test:meta, [$($kw:tt)*], $call:ident,
     $Client:ty, $Multi:ty, $Red:ty) => {
        mod $half {
            use super::*;
            use dlock_client::{LostReason, Options, Unlock, WaitMode};

            #[$test]
            $($kw)* fn reentrant_hold_and_unlock_outcomes() {
                let s = Server::start();
                let c = <$Client>::open(s.url()).unwrap();
                let lock = c.mutex("r");
                let outer = $call!(lock.lock()).unwrap();
                let inner = $call!(lock.try_lock(Duration::ZERO, None)).unwrap().unwrap();
                assert_eq!(inner.token(), outer.token(), "reentrant: the outer token");
                assert_eq!($call!(inner.unlock()).unwrap(), Unlock::StillHeld);
                assert!($call!(outer.check()).unwrap());
                assert_eq!($call!(outer.unlock()).unwrap(), Unlock::Released);
                assert!(info_nil(&s, "r"));
            }

            #[$test]
            $($kw)* fn force_release_makes_unlock_say_lost() {
                let s = Server::start();
                let c = <$Client>::open(s.url()).unwrap();
                let g = $call!(c.mutex("f").lock()).unwrap();
                assert!($call!(c.mutex("f").force_unlock()).unwrap());
                assert!(!$call!(g.check()).unwrap());
                let signal = g.lost_signal();
                assert_eq!($call!(g.unlock()).unwrap(), Unlock::Lost);
                // The lock's notice (forced), or the release's NOTHELD if that came first.
                let reason = signal.reason();
                assert!(
                    matches!(reason, Some(LostReason::Forced | LostReason::NotHeld)),
                    "{reason:?}"
                );
            }

            #[$test]
            $($kw)* fn server_wait_is_bounded_then_granted_on_release() {
                let s = Server::start();
                let opts = Options::default().wait_slice(Duration::from_millis(200));
                let c = <$Client>::with_options(s.url(), opts).unwrap();
                let held = hold_elsewhere(&s, "w");
                let t = Instant::now();
                let none = $call!(c.mutex("w").try_lock(Duration::from_millis(500), None)).unwrap();
                assert!(none.is_none());
                assert!(t.elapsed() >= Duration::from_millis(450), "waited the whole wait");
                let releaser = release_elsewhere_after(&s, "w", Duration::from_millis(300));
                let g = $call!(c.mutex("w").try_lock(Duration::from_secs(20), None))
                    .unwrap()
                    .expect("granted once the other owner released");
                assert!(g.token() > held);
                releaser.join().unwrap();
                assert!(waits_begun(&s) >= 2, "the server-side WAIT was used, in slices");
                assert_eq!($call!(g.unlock()).unwrap(), Unlock::Released);
            }

            #[$test]
            $($kw)* fn notification_wait_blocks_no_connection() {
                let s = Server::start();
                let c = <$Client>::open(s.url()).unwrap();
                hold_elsewhere(&s, "n");
                let lock = c.mutex("n").wait_mode(WaitMode::Notifications);
                let none = $call!(lock.try_lock(Duration::from_millis(300), None)).unwrap();
                assert!(none.is_none());
                let releaser = release_elsewhere_after(&s, "n", Duration::from_millis(300));
                let released = Instant::now();
                let g = $call!(lock.try_lock(Duration::from_secs(20), None))
                    .unwrap()
                    .expect("granted after the release notice");
                // Woken by the notice, well before the 5 s slice would end.
                assert!(released.elapsed() < Duration::from_secs(4));
                releaser.join().unwrap();
                assert_eq!(waits_begun(&s), 0, "no connection waited on the server");
                assert_eq!($call!(g.unlock()).unwrap(), Unlock::Released);
            }

            #[$test]
            $($kw)* fn explicit_lease_runs_out_and_reports_it() {
                let s = Server::start();
                let c = <$Client>::open(s.url()).unwrap();
                let lease = Some(Duration::from_millis(300));
                let g = $call!(c.mutex("l").try_lock(Duration::ZERO, lease)).unwrap().unwrap();
                let reason = g.lost_signal().wait_timeout(Duration::from_secs(10));
                assert_eq!(reason, Some(LostReason::Expired));
                assert!(wait_until(Duration::from_secs(10), || info_nil(&s, "l")));
                assert_eq!($call!(g.unlock()).unwrap(), Unlock::Lost);
            }

            #[$test]
            $($kw)* fn watchdog_keeps_a_short_lease() {
                let s = Server::start();
                let c = <$Client>::with_options(s.url(), fast_watchdog()).unwrap();
                let g = $call!(c.mutex("d").lock()).unwrap();
                let lost = g.lost_signal().wait_timeout(Duration::from_millis(2500));
                assert_eq!(lost, None, "renewed past three 1 s leases");
                assert!($call!(g.check()).unwrap());
                assert_eq!($call!(g.unlock()).unwrap(), Unlock::Released);
            }

            #[$test]
            $($kw)* fn semaphore_and_rw_sides() {
                let s = Server::start();
                let c = <$Client>::open(s.url()).unwrap();
                let a = $call!(c.semaphore("sem", 3, 2).lock()).unwrap();
                let b = $call!(c.semaphore("sem", 3, 2).with_owner("b").try_lock(Duration::ZERO, None))
                    .unwrap();
                assert!(b.is_none(), "2 + 2 permits exceed the limit of 3");
                assert_eq!($call!(a.unlock()).unwrap(), Unlock::Released);
                let r1 = $call!(c.rw("doc").read().lock()).unwrap();
                let r2 = $call!(c.rw("doc").read().with_owner("r2").lock()).unwrap();
                let w = $call!(c.rw("doc").write().with_owner("w").try_lock(Duration::ZERO, None))
                    .unwrap();
                assert!(w.is_none(), "no writer while readers hold");
                assert_eq!($call!(r1.unlock()).unwrap(), Unlock::Released);
                assert_eq!($call!(r2.unlock()).unwrap(), Unlock::Released);
            }

            #[$test]
            $($kw)* fn multilock_rolls_back_then_takes_all() {
                let s = Server::start();
                let c = <$Client>::open(s.url()).unwrap();
                let m = <$Multi>::new([c.mutex("m2"), c.mutex("m1")]).unwrap();
                assert_eq!(m.names(), ["m1", "m2"]);
                hold_elsewhere(&s, "m2");
                let none = $call!(m.try_lock(Duration::from_millis(200), None)).unwrap();
                assert!(none.is_none());
                assert!(info_nil(&s, "m1"), "m1 was rolled back");
                let releaser = release_elsewhere_after(&s, "m2", Duration::ZERO);
                releaser.join().unwrap();
                let g = $call!(m.try_lock(Duration::from_secs(5), None)).unwrap().unwrap();
                assert_eq!(g.tokens().len(), 2);
                assert!(!g.is_lost());
                assert_eq!(
                    $call!(g.unlock()).unwrap(),
                    vec![Unlock::Released, Unlock::Released]
                );
            }

            #[$test]
            $($kw)* fn redlock_quorum_validity_and_release() {
                let servers: Vec<Server> = (0..3).map(|_| Server::start()).collect();
                let urls: Vec<String> = servers.iter().map(Server::url).collect();
                let lock = <$Red>::open(urls, "red").unwrap();
                assert_eq!(lock.quorum(), 2);
                let lease = Some(Duration::from_secs(10));
                let g = $call!(lock.try_lock(Duration::from_secs(2), lease)).unwrap().unwrap();
                assert!(g.validity() > Duration::from_secs(5));
                assert_eq!(g.tokens().iter().flatten().count(), 3);
                let other = <$Red>::open(servers.iter().map(Server::url), "red")
                    .unwrap()
                    .with_owner("someone-else")
                    .retry_delay(Duration::from_millis(20));
                let none = $call!(other.try_lock(Duration::from_millis(100), lease)).unwrap();
                assert!(none.is_none(), "a second owner gets no majority");
                assert!(servers.iter().all(|s| !info_nil(s, "red")), "its failed round released nothing of ours");
                assert_eq!($call!(g.unlock()).unwrap(), Unlock::Released);
                assert!(servers.iter().all(|s| info_nil(s, "red")));
            }

            #[$test]
            $($kw)* fn latch_opens_at_zero() {
                let s = Server::start();
                let c = <$Client>::open(s.url()).unwrap();
                let latch = c.latch("shards");
                assert!($call!(latch.set(2)).unwrap());
                assert!(!$call!(latch.wait(Duration::from_millis(100))).unwrap());
                assert_eq!($call!(latch.count_down()).unwrap(), 1);
                assert_eq!($call!(latch.count_down()).unwrap(), 0);
                assert!($call!(latch.wait(Duration::from_secs(5))).unwrap());
            }

            #[$test]
            $($kw)* fn one_handshake_auth_and_select() {
                let s = Server::start();
                let pass = cmd_str(&mut s.conn(), &["CONFIG", "SET", "requirepass", "pw"]);
                assert_eq!(pass, Ok(Value::Okay));
                let url = format!("redis://:pw@127.0.0.1:{}/3", s.port);
                let c = <$Client>::open(url.as_str()).unwrap();
                let g = $call!(c.mutex("h").lock()).unwrap();
                let mut con = redis::Client::open(url.as_str()).unwrap().get_connection().unwrap();
                let info = cmd_str(&mut con, &["DLOCK.INFO", "h"]).unwrap();
                assert_ne!(info, Value::Nil, "held in database 3, after AUTH");
                assert_eq!($call!(g.unlock()).unwrap(), Unlock::Released);
            }
        }
    };
}

suite!(
    blocking,
    test,
    [],
    sync,
    dlock_client::Client,
    dlock_client::MultiLock,
    dlock_client::RedLock
);

suite!(
    nonblocking,
    tokio::test(flavor = "multi_thread", worker_threads = 2),
    [async],
    wait,
    dlock_client::aio::AsyncClient,
    dlock_client::aio::AsyncMultiLock,
    dlock_client::aio::AsyncRedLock
);
