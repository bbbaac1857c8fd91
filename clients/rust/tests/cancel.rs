//! A try that gives up leaves no queue place behind (`DLOCK.CANCEL`): the next owner is
//! served at once, not after `dlock.fair-queue-timeout-ms` (5 s). Needs a module with
//! DLOCK.CANCEL (DLOCK_MODULE).

mod support;

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use dlock_client::aio::AsyncClient;
use dlock_client::recipes::Election;
use dlock_client::{Client, Options, WaitMode};
use redis::Value;
use support::*;

/// Far below dlock.fair-queue-timeout-ms (5 s), which frees an abandoned place without
/// CANCEL; far above a hand-over on a loaded machine (milliseconds).
const PROMPT: Duration = Duration::from_millis(2500);

/// The owners waiting on `key`, as DLOCK.INFO lists them.
fn waiters(server: &Server, key: &str) -> Vec<String> {
    let v = cmd_str(&mut server.conn(), &["DLOCK.INFO", key]).unwrap();
    let Value::Array(fields) = v else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for pair in fields.chunks(2) {
        if let [Value::BulkString(name), Value::Array(ws)] = pair {
            if name.as_slice() == b"waiters" {
                for w in ws {
                    if let Value::Array(wf) = w {
                        for p in wf.chunks(2) {
                            if let [Value::BulkString(f), Value::BulkString(o)] = p {
                                if f.as_slice() == b"owner" {
                                    out.push(String::from_utf8_lossy(o).into_owned());
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    out
}

/// `holder` holds `key` (fair) until `release` is sent; `next` then waits (lock())
/// behind whoever gave up, and the test measures how long after the release it is
/// served.
fn next_served_after_release(s: &Server, holder: dlock_client::Guard, key: &str) -> Duration {
    let next = Client::open(s.url()).unwrap();
    let (tx, rx) = mpsc::channel();
    let k = key.to_string();
    let t = thread::spawn(move || {
        let g = next.fair(&k).lock().unwrap();
        tx.send(Instant::now()).unwrap();
        drop(g);
    });
    // The next owner is queued on the server before the holder lets go.
    let deadline = Instant::now() + Duration::from_secs(10);
    while waiters(s, key).is_empty() {
        assert!(Instant::now() < deadline, "the next owner never queued");
        thread::sleep(Duration::from_millis(5));
    }
    let released = Instant::now();
    holder.unlock().unwrap();
    let served = rx.recv_timeout(Duration::from_secs(20)).expect("served");
    t.join().unwrap();
    served.saturating_duration_since(released)
}

#[test]
fn a_fair_try_that_times_out_frees_its_place_at_once() {
    let s = Server::start();
    let a = Client::open(s.url()).unwrap();
    let b = Client::open(s.url()).unwrap();
    let holder = a.fair("f").lock().unwrap();
    // A server-side wait that ends, and a single try (a place kept between polls).
    for wait in [Duration::from_millis(150), Duration::ZERO] {
        assert!(b.fair("f").try_lock(wait, None).unwrap().is_none());
        // The CANCEL goes out in the background, so the caller's deadline is kept.
        assert!(
            wait_until(Duration::from_millis(500), || waiters(&s, "f").is_empty()),
            "the try that gave up ({wait:?}) left its place: {:?}",
            waiters(&s, "f")
        );
    }
    let took = next_served_after_release(&s, holder, "f");
    eprintln!("next owner served {took:?} after the release");
    assert!(
        took < PROMPT,
        "the next owner was served {took:?} after the release"
    );
}

#[test]
fn a_notification_wait_that_gives_up_frees_its_place() {
    let s = Server::start();
    let a = Client::open(s.url()).unwrap();
    let b = Client::open(s.url()).unwrap();
    let holder = a.fair("n").lock().unwrap();
    let lock = b.fair("n").wait_mode(WaitMode::Notifications);
    assert!(lock
        .try_lock(Duration::from_millis(200), None)
        .unwrap()
        .is_none());
    // The CANCEL goes out in the background (CI's loaded machine saw the place
    // still listed when it was asked at once).
    assert!(
        wait_until(Duration::from_millis(500), || waiters(&s, "n").is_empty()),
        "the wait that gave up left its place: {:?}",
        waiters(&s, "n")
    );
    let took = next_served_after_release(&s, holder, "n");
    assert!(took < PROMPT, "served {took:?} after the release");
}

#[test]
fn a_campaign_that_gives_up_leaves_the_queue() {
    let s = Server::start();
    let c = Client::open(s.url()).unwrap();
    let leader = Election::new(&c, "e").owner("leader");
    let term = leader.campaign().unwrap();
    let quitter = Election::new(&c, "e").owner("quitter");
    assert!(quitter
        .try_campaign(Some(Duration::from_millis(150)))
        .unwrap()
        .is_none());
    assert!(
        wait_until(Duration::from_millis(500), || waiters(&s, "e").is_empty()),
        "the campaign that gave up left its place: {:?}",
        waiters(&s, "e")
    );
    // The next campaigner leads right after the leader resigns.
    let (tx, rx) = mpsc::channel();
    let c2 = c.clone();
    let t = thread::spawn(move || {
        let term = Election::new(&c2, "e").owner("next").campaign().unwrap();
        tx.send(Instant::now()).unwrap();
        term.resign().unwrap();
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    while waiters(&s, "e").is_empty() {
        assert!(
            Instant::now() < deadline,
            "the next campaigner never queued"
        );
        thread::sleep(Duration::from_millis(5));
    }
    let resigned = Instant::now();
    term.resign().unwrap();
    let led = rx.recv_timeout(Duration::from_secs(20)).unwrap();
    t.join().unwrap();
    let took = led.saturating_duration_since(resigned);
    assert!(
        took < PROMPT,
        "the next leader came {took:?} after the resign"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_tries_that_time_out_or_are_dropped_free_their_place() {
    let s = Server::start();
    let a = AsyncClient::open(s.url()).unwrap();
    let holder = a.fair("af").lock().await.unwrap();
    let b = AsyncClient::open(s.url()).unwrap();
    // A try that times out.
    let b2 = b.clone();
    let none = tokio::spawn(async move {
        b2.fair("af")
            .try_lock(Duration::from_millis(150), None)
            .await
            .unwrap()
            .is_none()
    })
    .await
    .unwrap();
    assert!(none);
    assert!(waiters(&s, "af").is_empty(), "{:?}", waiters(&s, "af"));
    // A wait whose future is dropped (tokio::time::timeout around lock()).
    let b3 = b.clone();
    tokio::spawn(async move {
        let r = tokio::time::timeout(Duration::from_millis(300), b3.fair("af").lock()).await;
        assert!(r.is_err(), "the holder keeps it");
    })
    .await
    .unwrap();
    // The CANCEL goes out from a background task: wait for it (far less than 5 s).
    let gone = Instant::now();
    while !waiters(&s, "af").is_empty() {
        assert!(
            gone.elapsed() < PROMPT,
            "the dropped wait's place is still there: {:?}",
            waiters(&s, "af")
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    holder.unlock().await.unwrap();
}

#[test]
fn a_failing_cancel_never_fails_the_try() {
    // A user whose ACL refuses DLOCK.CANCEL: the try still answers "not granted".
    let s = Server::start();
    let mut con = s.conn();
    ok(
        &mut con,
        &[
            "ACL",
            "SETUSER",
            "nocancel",
            "on",
            ">pw",
            "~*",
            "&*",
            "+@all",
            "-dlock.cancel",
        ],
    );
    let a = Client::open(s.url()).unwrap();
    let _holder = a.fair("f").lock().unwrap();
    let url = format!("redis://nocancel:pw@127.0.0.1:{}/", s.port);
    let opts = Options::default();
    let b = Client::with_options(url.as_str(), opts).unwrap();
    assert!(b
        .fair("f")
        .try_lock(Duration::from_millis(50), None)
        .unwrap()
        .is_none());
}
