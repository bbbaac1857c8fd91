//! The client's typed access to DLOCK.INFO, DLOCK.SCAN, DLOCK.STATS and
//! DLOCK.SLOWLOG (issue 23), blocking and async, against a real server.

mod support;

use std::time::Duration;

use dlock_client::{aio::AsyncClient, Client, ScanOptions};
use support::*;

#[test]
fn info_scan_stats_slowlog() {
    let s = Server::start();
    let c = Client::open(s.url()).unwrap();
    let mut r = s.conn();
    let _: i64 = redis::cmd("DLOCK.FAIRACQUIRE")
        .arg("f")
        .arg("h")
        .query(&mut r)
        .unwrap();
    let q: Option<i64> = redis::cmd("DLOCK.FAIRACQUIRE")
        .arg("f")
        .arg("q")
        .query(&mut r)
        .unwrap();
    assert_eq!(q, None);
    let _: i64 = redis::cmd("DLOCK.ACQUIRE")
        .arg("m")
        .arg("o")
        .query(&mut r)
        .unwrap();
    let info = c.info("f").unwrap().unwrap();
    assert_eq!(info.kind, "fair");
    assert!(info.holders[0].held_ms.is_some());
    let w = &info.waiters[0];
    assert_eq!((w.position, w.state.as_str()), (0, "queued"));
    assert_eq!(w.blocked_by, vec![b"h".to_vec()]);
    assert!(w.waited_ms.is_some());
    assert!(c.info("none").unwrap().is_none());
    let mut all = c.scan_all(&ScanOptions::default()).unwrap();
    all.sort();
    assert_eq!(all, vec!["f", "m"]);
    let contended = ScanOptions {
        contended: true,
        count: Some(100),
        ..ScanOptions::default()
    };
    assert_eq!(c.scan_all(&contended).unwrap(), vec!["f"]);
    // Holds of exactly 200 ms.
    for i in 0..2 {
        let _: i64 = redis::cmd("DLOCK.ACQUIRE")
            .arg(format!("e{i}"))
            .arg("o")
            .arg("PX")
            .arg(200)
            .query(&mut r)
            .unwrap();
    }
    assert!(wait_until(Duration::from_secs(10), || {
        let n: i64 = redis::cmd("EXISTS")
            .arg("e0")
            .arg("e1")
            .query(&mut r)
            .unwrap();
        n == 0
    }));
    let stats = c.stats().unwrap();
    assert_eq!(stats.len(), 5);
    let mutex = stats.iter().find(|k| k.kind == "mutex").unwrap();
    assert_eq!(mutex.holds.total(), 2);
    let p = mutex.holds.percentile(99.0).unwrap();
    assert!((200_000..=200_000 * 17 / 16).contains(&p), "{p}");
    c.stats_reset().unwrap();
    assert!(c.stats().unwrap().iter().all(|k| k.holds.total() == 0));
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("dlock.slowlog-hold-ms")
        .arg(0)
        .query(&mut r)
        .unwrap();
    let _: i64 = redis::cmd("DLOCK.RELEASE")
        .arg("m")
        .arg("o")
        .query(&mut r)
        .unwrap();
    let log = c.slowlog(-1).unwrap();
    assert_eq!(log.len(), 1);
    assert_eq!(
        (log[0].key.as_slice(), log[0].outcome.as_str()),
        (&b"m"[..], "released")
    );
    assert_eq!(c.slowlog_len().unwrap(), 1);
    c.slowlog_reset().unwrap();
    assert_eq!(c.slowlog_len().unwrap(), 0);
    // The async client answers the same.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let a = AsyncClient::open(s.url()).unwrap();
        let info = a.info("f").await.unwrap().unwrap();
        assert_eq!(info.waiters[0].blocked_by, vec![b"h".to_vec()]);
        let (next, keys) = a.scan(0, &contended).await.unwrap();
        assert_eq!((next, keys), (0, vec!["f".to_string()]));
        assert_eq!(a.stats().await.unwrap().len(), 5);
        assert!(a.slowlog(10).await.unwrap().is_empty());
    });
}
