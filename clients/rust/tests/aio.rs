//! Integration tests of the async (tokio) client against real redis-server processes.

mod support;

use std::time::{Duration, Instant};

use dlock_client::aio::{AsyncClient, AsyncMultiLock, AsyncRedLock};
use dlock_client::{LostReason, Options, Unlock};
use support::*;

#[tokio::test(flavor = "current_thread")]
async fn tasks_are_owners_and_drop_releases() {
    let s = Server::start();
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
    let s = Server::start();
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
    let s = Server::start();
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
    let s = Server::start();
    let c = AsyncClient::with_options(s.url(), fast_watchdog()).unwrap();
    let g = c.mutex("fr").lock().await.unwrap();
    assert!(c.mutex("fr").force_unlock().await.unwrap());
    let reason = tokio::time::timeout(Duration::from_secs(5), g.lost_signal().lost()).await;
    // The lock's notice (forced) once the client's subscription is in place — or,
    // when the force-release came first, the check after subscribing or the next
    // renewal (not held).
    assert!(
        matches!(reason, Ok(LostReason::Forced | LostReason::NotHeld)),
        "{reason:?}"
    );
    assert_eq!(g.unlock().await.unwrap(), Unlock::Lost);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_multilock_rolls_back_then_succeeds_once_free() {
    let s1 = Server::start();
    let s2 = Server::start();
    let c1 = AsyncClient::open(s1.url()).unwrap();
    let c2 = AsyncClient::open(s2.url()).unwrap();
    let intruder = AsyncClient::open(s2.url()).unwrap();
    let taken = intruder.mutex("b").lock().await.unwrap();

    let m = AsyncMultiLock::new([c2.mutex("b"), c1.mutex("a"), c1.mutex("c")]).unwrap();
    // The order is deterministic, whatever order the locks are given in.
    let reversed = AsyncMultiLock::new([c1.mutex("c"), c1.mutex("a"), c2.mutex("b")]).unwrap();
    assert_eq!(m.names(), reversed.names());
    let t = Instant::now();
    assert!(m
        .try_lock(Duration::from_millis(400), None)
        .await
        .unwrap()
        .is_none());
    assert!(t.elapsed() < Duration::from_secs(5));
    assert!(
        info_nil(&s1, "a") && info_nil(&s1, "c"),
        "rolled back on server 1"
    );

    assert_eq!(taken.unlock().await.unwrap(), Unlock::Released);
    let g = m
        .try_lock(Duration::from_secs(2), None)
        .await
        .unwrap()
        .expect("all free now");
    assert_eq!(g.tokens().len(), 3);
    assert!(!g.is_lost());
    assert!(!info_nil(&s1, "a") && !info_nil(&s1, "c") && !info_nil(&s2, "b"));
    assert_eq!(
        g.unlock().await.unwrap(),
        vec![Unlock::Released, Unlock::Released, Unlock::Released]
    );
    assert!(info_nil(&s1, "a") && info_nil(&s1, "c") && info_nil(&s2, "b"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_redlock_acquires_with_two_of_five_down_and_fails_with_three() {
    let mut servers: Vec<Server> = (0..5).map(|_| Server::start()).collect();
    let urls: Vec<String> = servers.iter().map(Server::url).collect();
    let lock = AsyncRedLock::open(urls.clone(), "rl").unwrap();
    assert_eq!(lock.quorum(), 3);

    servers[0].stop(); // dead
    servers[1].pause(); // hung
    let lease = Duration::from_secs(10);
    let g = lock
        .try_lock(Duration::from_secs(3), Some(lease))
        .await
        .unwrap()
        .expect("3 of 5 nodes are up");
    assert!(g.validity() > Duration::from_secs(8) && g.validity() < lease);
    assert_eq!(g.tokens().iter().flatten().count(), 3);
    assert!(!g.is_lost() && !g.lost_signal().is_lost());
    for s in &servers[2..] {
        assert!(!info_nil(s, "rl"), "held on every live node");
    }
    assert_eq!(g.unlock().await.unwrap(), Unlock::Released);
    for s in &servers[2..] {
        assert!(info_nil(s, "rl"), "unlock releases on every live node");
    }

    servers[2].pause();
    let other = AsyncRedLock::open(urls, "rl")
        .unwrap()
        .node_timeout(Duration::from_millis(50));
    let t = Instant::now();
    assert!(other
        .try_lock(Duration::from_millis(600), Some(lease))
        .await
        .unwrap()
        .is_none());
    assert!(t.elapsed() < Duration::from_secs(5));
    for s in &servers[3..] {
        assert!(info_nil(s, "rl"), "a failed attempt releases on every node");
    }
    servers[1].resume();
    servers[2].resume();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_redlock_watchdog_renews_on_a_majority_and_reports_loss() {
    let mut servers: Vec<Server> = (0..3).map(|_| Server::start()).collect();
    let urls: Vec<String> = servers.iter().map(Server::url).collect();
    let lock = AsyncRedLock::open_with_options(urls, "rw", fast_watchdog()).unwrap();
    let g = lock.lock().await.unwrap();
    servers[0].stop();
    tokio::time::sleep(Duration::from_millis(2000)).await;
    assert!(!g.is_lost(), "2 of 3 still renew");
    assert!(g.validity() > Duration::ZERO);
    let lost = g.lost_signal();
    servers[1].stop();
    let reason = tokio::time::timeout(Duration::from_secs(10), lost.lost()).await;
    assert_eq!(reason.ok(), Some(LostReason::Unreachable));
    assert_eq!(g.validity(), Duration::ZERO);
}
