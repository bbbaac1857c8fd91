//! The README's quick start (blocking), as it appears there: tests/readme.rs checks the
//! README shows this file from its first `use` on, and runs it against a real server.
//! `REDIS_URL=redis://127.0.0.1:6379/ cargo run -p dlock-client --example quickstart`

use std::time::Duration;

use dlock_client::{Client, Unlock};

fn main() -> dlock_client::Result<()> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into());
    let client = Client::open(url.as_str())?;

    // Waits until granted (on the server, FIFO); the watchdog renews the lease while
    // `guard` lives.
    let guard = client.mutex("orders").lock()?;
    println!("holding orders, fencing token {}", guard.token()); // only ever grows
    if guard.is_lost() {
        // stop touching the resource: told no later than the lease could end
    }
    assert_eq!(guard.unlock()?, Unlock::Released);

    // At most 2 s of waiting, a fixed 10 s lease (no watchdog).
    let report = client.mutex("report");
    if let Some(g) = report.try_lock(Duration::from_secs(2), Some(Duration::from_secs(10)))? {
        println!("holding report for at most 10 s");
        drop(g); // dropping releases
    }
    client.close();
    Ok(())
}
