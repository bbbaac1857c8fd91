//! The README's async quick start, as it appears there: tests/readme.rs checks the
//! README shows this file from its first `use` on, and runs it against a real server.
//! `REDIS_URL=redis://127.0.0.1:6379/ cargo run -p dlock-client --example quickstart_async`

use std::time::Duration;

use dlock_client::{aio::AsyncClient, Unlock};

#[tokio::main]
async fn main() -> dlock_client::Result<()> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into());
    let client = AsyncClient::open(url.as_str())?;

    // Waits until granted (on the server, FIFO); the watchdog (a task) renews the lease
    // while `guard` lives.
    let guard = client.mutex("orders").lock().await?;
    println!("holding orders, fencing token {}", guard.token());
    let lost = guard.lost_signal();
    tokio::select! {
        // told no later than the lease could end: stop touching the resource
        reason = lost.lost() => eprintln!("lost orders: {reason}"),
        _ = tokio::time::sleep(Duration::from_millis(100)) => {} // the work
    }
    assert_eq!(guard.unlock().await?, Unlock::Released);

    // At most 2 s of waiting, a fixed 10 s lease (no watchdog).
    let report = client.mutex("report");
    let lease = Some(Duration::from_secs(10));
    if let Some(g) = report.try_lock(Duration::from_secs(2), lease).await? {
        println!("holding report for at most 10 s");
        g.unlock().await?;
    }
    client.close();
    Ok(())
}
