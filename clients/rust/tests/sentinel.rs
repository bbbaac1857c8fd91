//! The clients through Redis Sentinel: they find the master, and follow it across a
//! `SENTINEL FAILOVER` (master + replica + Sentinel, through the shared harness).

mod support;

use std::time::{Duration, Instant};

use dlock_client::aio::AsyncClient;
use dlock_client::{Client, Options, Unlock};
use support::*;

const SERVICE: &str = "dl";

fn opts() -> Options {
    Options::default()
        .command_timeout(Duration::from_secs(5))
        .connect_timeout(Duration::from_secs(5))
}

/// Retries `f` (errors are expected right after a failover) for up to 20 s; the
/// value and how many errors came first.
fn eventually<T>(mut f: impl FnMut() -> dlock_client::Result<T>) -> (T, usize) {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut errors = 0;
    loop {
        match f() {
            Ok(v) => return (v, errors),
            Err(e) if Instant::now() < deadline => {
                errors += 1;
                eprintln!("after failover: {e}");
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => panic!("still failing after 20 s: {e}"),
        }
    }
}

#[test]
fn clients_find_the_master_and_follow_a_failover() {
    let master = Server::start();
    let replica = Server::start();
    replica.make_replica_of(&master);
    let sentinel = SentinelProc::start(master.port, SERVICE);
    sentinel.wait_replicas(SERVICE, 1);
    // The first address answers nothing: the client asks the next Sentinel.
    let nobody = format!("redis://127.0.0.1:{}/", free_port());
    let urls = [nobody, sentinel.url()];
    let c = Client::sentinel_with_options(urls.clone(), SERVICE, opts()).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let ac = AsyncClient::sentinel_with_options(urls.clone(), SERVICE, opts()).unwrap();

    let g = c
        .mutex("s-k")
        .replicas(1, Duration::from_secs(5))
        .lock()
        .unwrap();
    let before = g.token();
    assert_eq!(holders(&master, "s-k"), 1, "granted on the master");
    assert_eq!(g.unlock().unwrap(), Unlock::Released);
    rt.block_on(async {
        let g = ac.fair("s-a").lock().await.unwrap();
        g.unlock().await.unwrap();
    });

    let new_port = sentinel.failover(SERVICE, master.port);
    assert_eq!(new_port, replica.port);
    // The promoted replica takes writes once it knows it is a master.
    assert!(wait_until(Duration::from_secs(20), || {
        replica.info_field("replication", "role").as_deref() == Some("master")
    }));

    // The clients ask the Sentinels again at most once a second.
    std::thread::sleep(Duration::from_millis(1100));
    let (g, errors) = eventually(|| c.mutex("s-k").lock());
    assert!(
        errors <= 2,
        "{errors} errors before following the new master"
    );
    assert!(g.token() > before, "the token grows across the failover");
    assert_eq!(holders(&replica, "s-k"), 1, "granted on the new master");
    assert_eq!(g.unlock().unwrap(), Unlock::Released);
    rt.block_on(async {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            match ac.fair("s-a").lock().await {
                Ok(g) => {
                    assert_eq!(holders(&replica, "s-a"), 1);
                    g.unlock().await.unwrap();
                    break;
                }
                Err(e) if Instant::now() < deadline => {
                    eprintln!("async after failover: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => panic!("async client did not follow: {e}"),
            }
        }
    });
}

/// How many holds `key` has on `server`.
fn holders(server: &Server, key: &str) -> usize {
    let v = cmd_str(&mut server.conn(), &["DLOCK.INFO", key]).expect("DLOCK.INFO");
    let redis::Value::Array(items) = v else {
        return 0;
    };
    items
        .chunks(2)
        .find_map(|kv| match kv {
            [redis::Value::BulkString(k), redis::Value::Array(h)] if k == b"holders" => {
                Some(h.len())
            }
            _ => None,
        })
        .unwrap_or(0)
}
