//! Integration tests of the async (tokio) client against real redis-server processes.

// The shared harness is linted where it lives (the root crate), not here.
#[path = "../../tests/common/mod.rs"]
#[allow(clippy::all)]
mod common;

use std::path::PathBuf;
use std::sync::Once;
use std::time::{Duration, Instant};

use common::*;
use dlock_client::aio::AsyncClient;
use dlock_client::{LostReason, Options, Unlock};
use redis::Value;

fn setup() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        if std::env::var_os("DLOCK_MODULE").is_none() {
            let target = match std::env::var_os("CARGO_TARGET_DIR") {
                Some(t) if !t.is_empty() => {
                    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").join(t)
                }
                _ => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"),
            };
            std::env::set_var("DLOCK_MODULE", target.join("release/libdlock.so"));
        }
    });
}

fn start() -> Server {
    setup();
    Server::start()
}

fn fast_watchdog() -> Options {
    Options::default()
        .watchdog_lease(Duration::from_secs(1))
        .renew_interval(Duration::from_millis(300))
        .command_timeout(Duration::from_secs(2))
        .connect_timeout(Duration::from_secs(2))
}

fn info_nil(server: &Server, key: &str) -> bool {
    matches!(
        cmd_str(&mut server.conn(), &["DLOCK.INFO", key]),
        Ok(Value::Nil)
    )
}

#[tokio::test(flavor = "current_thread")]
async fn tasks_are_owners_and_drop_releases() {
    let s = start();
    let c = AsyncClient::open(s.url()).unwrap();
    let g = c.mutex("a").lock().await.unwrap();
    assert!(g.token() > 0);
    // Same task: reentrant.
    let again = c
        .mutex("a")
        .try_lock(Duration::ZERO, None)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(again.token(), g.token());
    assert_eq!(again.unlock().await.unwrap(), Unlock::StillHeld);
    // Another task on the same (only) thread is another owner.
    let c2 = c.clone();
    let other = tokio::spawn(async move {
        c2.mutex("a")
            .try_lock(Duration::from_millis(100), None)
            .await
            .unwrap()
            .is_some()
    })
    .await
    .unwrap();
    assert!(!other);
    drop(g); // released by a background task
    let mut freed = false;
    for _ in 0..200 {
        if info_nil(&s, "a") {
            freed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(freed, "dropping an AsyncGuard releases");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waits_across_slices_and_rw() {
    let s = start();
    let opts = Options::default().wait_slice(Duration::from_millis(200));
    let c = AsyncClient::with_options(s.url(), opts).unwrap();
    let w = c.rw("doc").write().lock().await.unwrap();
    let c2 = c.clone();
    let reader = tokio::spawn(async move {
        let t = Instant::now();
        let g = c2
            .rw("doc")
            .read()
            .try_lock(Duration::from_secs(10), None)
            .await
            .unwrap()
            .expect("granted after the writer leaves");
        let took = t.elapsed();
        (g.unlock().await.unwrap(), took)
    });
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(w.unlock().await.unwrap(), Unlock::Released);
    let (outcome, took) = reader.await.unwrap();
    assert_eq!(outcome, Unlock::Released);
    assert!(
        took >= Duration::from_millis(600) && took < Duration::from_secs(8),
        "{took:?}"
    );
    let none = c
        .fair("f")
        .try_lock(Duration::ZERO, Some(Duration::from_secs(5)))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(none.unlock().await.unwrap(), Unlock::Released);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchdog_renews_then_pause_fires_lost() {
    let s = start();
    let c = AsyncClient::with_options(s.url(), fast_watchdog()).unwrap();
    let other = AsyncClient::open(s.url()).unwrap();
    let g = c.mutex("wd").lock().await.unwrap();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(!g.is_lost());
    assert!(other
        .mutex("wd")
        .try_lock(Duration::ZERO, None)
        .await
        .unwrap()
        .is_none());
    let lost = g.lost_signal();
    s.pause();
    let t = Instant::now();
    let reason = tokio::time::timeout(Duration::from_secs(10), lost.lost()).await;
    let took = t.elapsed();
    s.resume();
    assert_eq!(reason.ok(), Some(LostReason::Unreachable));
    assert!(took < Duration::from_millis(2500), "lost after {took:?}");
    assert!(g.unlock().await.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_release_and_lost_unlock() {
    let s = start();
    let c = AsyncClient::with_options(s.url(), fast_watchdog()).unwrap();
    let g = c.mutex("fr").lock().await.unwrap();
    assert!(c.mutex("fr").force_unlock().await.unwrap());
    let reason = tokio::time::timeout(Duration::from_secs(5), g.lost_signal().lost()).await;
    assert_eq!(reason.ok(), Some(LostReason::NotHeld));
    assert_eq!(g.unlock().await.unwrap(), Unlock::Lost);
}
