//! Mutual exclusion demo: increments a shared Redis counter under a dlock mutex.
//!
//! Each iteration takes the lock, checks that nobody else is inside the critical
//! section (`INCR <key>:inside` must answer 1), reads the counter, sleeps a little,
//! writes counter + 1 (a read-modify-write that loses updates without the lock),
//! leaves, and releases. Run several copies at once: the counter ends at the sum of
//! their iterations and no copy ever sees an overlap.
//!
//! ```sh
//! cargo build --release            # the module
//! redis-server --loadmodule ./target/release/libdlock.so &
//! for i in 1 2 3; do
//!   cargo run --release -p dlock-client --example counter -- redis://127.0.0.1:6379/ demo 200 &
//! done; wait
//! redis-cli GET demo:counter       # 600
//! ```
//!
//! Prints one line at the end: `done iterations=N overlaps=M lost=L last_token=T`.
//! Exits 1 when it saw an overlap or a lost lock.

use std::time::Duration;

use dlock_client::{Client, Unlock};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let url = args
        .get(1)
        .map(String::as_str)
        .unwrap_or("redis://127.0.0.1:6379/");
    let key = args.get(2).map(String::as_str).unwrap_or("demo");
    let iterations: u64 = args.get(3).map(|s| s.parse()).transpose()?.unwrap_or(100);

    let client = Client::open(url)?;
    let lock = client.mutex(format!("{key}:lock"));
    let mut con = redis::Client::open(url)?.get_connection()?;
    let (counter, inside) = (format!("{key}:counter"), format!("{key}:inside"));

    let (mut overlaps, mut lost, mut last_token) = (0u64, 0u64, 0u64);
    for _ in 0..iterations {
        let guard = lock.lock()?;
        if guard.token() <= last_token {
            overlaps += 1; // fencing tokens only grow
        }
        last_token = guard.token();
        let n: i64 = redis::cmd("INCR").arg(&inside).query(&mut con)?;
        if n != 1 {
            overlaps += 1;
        }
        let value: i64 = redis::cmd("GET")
            .arg(&counter)
            .query::<Option<i64>>(&mut con)?
            .unwrap_or(0);
        std::thread::sleep(Duration::from_micros(200));
        let _: () = redis::cmd("SET")
            .arg(&counter)
            .arg(value + 1)
            .query(&mut con)?;
        let _: i64 = redis::cmd("DECR").arg(&inside).query(&mut con)?;
        if guard.unlock()? != Unlock::Released {
            lost += 1;
        }
    }
    println!(
        "done iterations={iterations} overlaps={overlaps} lost={lost} last_token={last_token}"
    );
    if overlaps > 0 || lost > 0 {
        std::process::exit(1);
    }
    Ok(())
}
