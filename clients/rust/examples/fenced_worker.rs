//! Worker for `tests/fenced_chaos.rs`: writes its critical sections into Redis
//! itself, through `DLOCK.FENCED`, so a holder paused past its lease cannot
//! write late.
//!
//! ```sh
//! fenced_worker <url> <lock> <worker-id> <mode: loop|hold> <duration-ms> <bind 0|1> <lease-ms> <log-key>
//! ```
//!
//! `loop`: until the duration ends, take the lock (explicit lease, a fresh owner per
//! attempt), print `G <id> <token>`, append `<token>:<id>:<i>` to the list
//! `<log-key>` three times through `guard.fenced(RPUSH …)` 25 ms apart, print
//! `R <id> <token>` for every write refused as fenced, release. `hold`: take the lock
//! once, print `G <id> <token>` and sleep until killed. Output is line-buffered
//! (flushed per line) so the test can act on it at once. Ends with `done`.

use std::io::Write;
use std::time::{Duration, Instant};

use dlock_client::Client;

fn say(line: String) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 9 {
        eprintln!(
            "usage: fenced_worker <url> <lock> <id> <loop|hold> <duration-ms> <bind 0|1> <lease-ms> <log-key>"
        );
        std::process::exit(64);
    }
    let (url, lock_name, id, mode) = (&args[1], &args[2], &args[3], &args[4]);
    let duration = Duration::from_millis(args[5].parse()?);
    let bind = args[6] == "1";
    let lease = Duration::from_millis(args[7].parse()?);
    let log_key = &args[8];
    let client = Client::open(url.as_str())?;
    let deadline = Instant::now() + duration;
    let mut attempt = 0u64;
    while Instant::now() < deadline {
        attempt += 1;
        let mut lock = client
            .mutex(lock_name.as_str())
            .with_owner(format!("w{id}-{attempt}"));
        if bind {
            lock = lock.bind();
        }
        let Ok(Some(guard)) = lock.try_lock(Duration::from_millis(2000), Some(lease)) else {
            continue;
        };
        let token = guard.token();
        say(format!("G {id} {token}"));
        if mode == "hold" {
            loop {
                std::thread::sleep(Duration::from_secs(60));
            }
        }
        for i in 0..3 {
            let mut push = redis::cmd("RPUSH");
            push.arg(log_key.as_str()).arg(format!("{token}:{id}:{i}"));
            match guard.fenced(&push) {
                Ok(_) => {}
                Err(e) if e.is_fenced() => say(format!("R {id} {token}")),
                Err(e) => eprintln!("fenced_worker {id}: {e}"),
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        let _ = guard.unlock();
    }
    say("done".into());
    Ok(())
}
