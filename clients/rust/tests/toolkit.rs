//! `Client::semaphore` / `Client::latch`, `Guard::check` / `Guard::fenced`, and their
//! async counterparts, against
//! real redis-server processes: the same behaviour from both halves.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dlock_client::aio::AsyncClient;
use dlock_client::{Client, Unlock};
use redis::Value;
use support::*;

fn available(server: &Server, key: &str) -> i64 {
    let info = info_raw(&mut server.conn(), key);
    if info == Value::Nil {
        return -1;
    }
    as_int(field(&info, "available"))
}

#[test]
fn semaphore_guards_hold_permits_and_give_them_back() {
    let s = Server::start();
    let c = Client::with_options(s.url(), fast_watchdog()).unwrap();
    let two = c.semaphore("sem", 3, 2).lock().unwrap();
    assert!(two.token() > 0);
    assert_eq!(available(&s, "sem"), 1);
    // Another owner (another thread) asking for 2 waits; 1 fits.
    let c2 = c.clone();
    let blocked = std::thread::spawn(move || {
        c2.semaphore("sem", 3, 2)
            .try_lock(Duration::from_millis(200), None)
            .unwrap()
            .is_some()
    })
    .join()
    .unwrap();
    assert!(!blocked);
    let c3 = c.clone();
    let one = std::thread::spawn(move || {
        let g = c3.semaphore("sem", 3, 1).lock().unwrap();
        let t = g.token();
        assert_eq!(g.unlock().unwrap(), Unlock::Released);
        t
    })
    .join()
    .unwrap();
    assert!(one > two.token());
    // The watchdog keeps the permits past several 1 s leases.
    std::thread::sleep(Duration::from_millis(2500));
    assert!(!two.is_lost());
    assert_eq!(available(&s, "sem"), 1);
    assert_eq!(two.unlock().unwrap(), Unlock::Released);
    assert!(info_nil(&s, "sem"));
}

#[test]
fn semaphore_caps_concurrent_holders() {
    let s = Server::start();
    let c = Client::with_options(s.url(), fast_watchdog()).unwrap();
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let workers: Vec<_> = (0..8)
        .map(|_| {
            let (c, inside, most) = (c.clone(), inside.clone(), most.clone());
            std::thread::spawn(move || {
                for _ in 0..5 {
                    let g = c.semaphore("cap", 3, 1).lock().unwrap();
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(5));
                    inside.fetch_sub(1, Ordering::SeqCst);
                    g.unlock().unwrap();
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    let most = most.load(Ordering::SeqCst);
    assert!((1..=3).contains(&most), "at most 3 at once, saw {most}");
    assert!(info_nil(&s, "cap"));
}

#[test]
fn latch_set_count_down_and_wait() {
    let s = Server::start();
    let c = Client::open(s.url()).unwrap();
    let l = c.latch("ready");
    // No latch: open.
    assert!(l.wait(Duration::ZERO).unwrap());
    assert!(l.set(2).unwrap());
    assert!(!l.set(5).unwrap(), "a latch exists: nothing changes");
    let start = Instant::now();
    assert!(!l.wait(Duration::from_millis(150)).unwrap());
    assert!(start.elapsed() >= Duration::from_millis(100));
    let waiter = {
        let l = l.clone();
        std::thread::spawn(move || l.wait(Duration::from_secs(30)).unwrap())
    };
    assert_eq!(l.count_down().unwrap(), 1);
    assert_eq!(l.count_down().unwrap(), 0);
    assert!(waiter.join().unwrap(), "opened");
    assert_eq!(l.count_down().unwrap(), 0, "no latch");
}

#[tokio::test(flavor = "current_thread")]
async fn async_semaphore_and_latch_match_the_blocking_ones() {
    let s = Server::start();
    let c = AsyncClient::open(s.url()).unwrap();
    let g = c.semaphore("asem", 2, 2).lock().await.unwrap();
    assert_eq!(available(&s, "asem"), 0);
    let c2 = c.clone();
    let other = tokio::spawn(async move {
        c2.semaphore("asem", 2, 1)
            .try_lock(Duration::from_millis(150), None)
            .await
            .unwrap()
            .is_some()
    })
    .await
    .unwrap();
    assert!(!other);
    assert_eq!(g.unlock().await.unwrap(), Unlock::Released);

    let l = c.latch("aready");
    assert!(l.set(1).await.unwrap());
    assert!(!l.wait(Duration::from_millis(100)).await.unwrap());
    let l2 = l.clone();
    let waiter = tokio::spawn(async move { l2.wait(Duration::from_secs(30)).await.unwrap() });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(l.count_down().await.unwrap(), 0);
    assert!(waiter.await.unwrap());
}

#[test]
fn guard_check_and_fenced_refuse_a_holder_whose_lease_ended() {
    let s = Server::start();
    let c = Client::open(s.url()).unwrap();
    let g = c
        .mutex("f")
        .try_lock(Duration::ZERO, Some(Duration::from_millis(300)))
        .unwrap()
        .unwrap();
    assert!(g.check().unwrap());
    let mut set = redis::cmd("SET");
    set.arg("data").arg("by-g");
    assert_eq!(g.fenced(&set).unwrap(), Value::Okay);
    // Past the lease, a new holder; the old guard's write is refused.
    std::thread::sleep(Duration::from_millis(400));
    let c2 = c.clone();
    std::thread::spawn(move || {
        let g2 = c2.mutex("f").lock().unwrap();
        let mut set = redis::cmd("SET");
        set.arg("data").arg("by-g2");
        assert_eq!(g2.fenced(&set).unwrap(), Value::Okay);
        std::mem::forget(g2); // keep it held
    })
    .join()
    .unwrap();
    assert!(!g.check().unwrap());
    let mut late = redis::cmd("SET");
    late.arg("data").arg("late");
    let e = g.fenced(&late).unwrap_err();
    assert!(e.is_fenced(), "{e}");
    let v: String = redis::cmd("GET").arg("data").query(&mut s.conn()).unwrap();
    assert_eq!(v, "by-g2");
}

#[tokio::test(flavor = "current_thread")]
async fn async_guard_check_and_fenced() {
    let s = Server::start();
    let c = AsyncClient::open(s.url()).unwrap();
    let g = c.mutex("af").lock().await.unwrap();
    assert!(g.check().await.unwrap());
    let mut incr = redis::cmd("INCR");
    incr.arg("n");
    assert_eq!(g.fenced(&incr).await.unwrap(), Value::Int(1));
    assert_eq!(g.unlock().await.unwrap(), Unlock::Released);
}
