//! Chaos worker: takes one dlock mutex over and over, with the watchdog, and logs every
//! critical section to its own append-only file, for `tests/chaos.rs`.
//!
//! ```sh
//! chaos_worker <url>[,<url>...] <lock> <worker-id> <out-file> <duration-ms>
//! ```
//!
//! The URLs name the servers that may be the master (master first, its replica
//! second). The worker talks to one of them; on any error (connection refused, reset,
//! timeout, `READONLY` from a replica, `LOADING`, `UNBLOCKED`...) it moves to the next
//! one and keeps going, so it survives restarts and a promotion.
//!
//! A critical section: acquire with the watchdog (1 s lease renewed every 300 ms, a
//! fresh owner per attempt, so a grant is never reentrant), log
//! `B <id> <attempt> <token> <start-us> <server-index> <waited-us>`, hold a few ms,
//! check the guard's lost flag, log `E <id> <attempt> <token> <end-us> <lost 0|1>
//! <reason|->`, release and log `U <id> <attempt> <released|still|notheld|err>`. Times
//! are unix microseconds; `waited-us` is how long `try_lock` took.
//! Every line is one `write` on an `O_APPEND` file, so a SIGKILL leaves whole lines.
//!
//! At the end it prints `done sections=N errors=E switches=S` and exits 0.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use dlock_client::{Client, Options, Unlock};
use rand::Rng;

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

fn log(out: &mut File, line: String) {
    // One write per line (the file is unbuffered and opened for append).
    if let Err(e) = out.write_all(line.as_bytes()) {
        eprintln!("chaos_worker: cannot write the log: {e}");
        std::process::exit(2);
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 6 {
        eprintln!(
            "usage: chaos_worker <url>[,<url>...] <lock> <worker-id> <out-file> <duration-ms>"
        );
        std::process::exit(64);
    }
    let urls: Vec<&str> = args[1].split(',').filter(|u| !u.is_empty()).collect();
    let lock_name = args[2].as_str();
    let id: u64 = args[3].parse()?;
    let duration = Duration::from_millis(args[5].parse()?);
    let mut out = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&args[4])?;

    let opts = Options::default()
        .watchdog_lease(Duration::from_secs(1))
        .renew_interval(Duration::from_millis(300))
        // Below the lease: the client starts a grant's lease at the moment it sent the
        // waiting request, so a longer slice can make a fresh grant look lost at once.
        .wait_slice(Duration::from_millis(500))
        .command_timeout(Duration::from_secs(1))
        .connect_timeout(Duration::from_secs(1));
    let clients = urls
        .iter()
        .map(|u| Client::with_options(*u, opts.clone()))
        .collect::<Result<Vec<_>, _>>()?;

    let mut rng = rand::thread_rng();
    let deadline = Instant::now() + duration;
    let (mut cur, mut attempt) = (0usize, 0u64);
    let (mut sections, mut errors, mut switches) = (0u64, 0u64, 0u64);
    while Instant::now() < deadline {
        attempt += 1;
        let lock = clients[cur]
            .mutex(lock_name)
            .with_owner(format!("w{id}-{attempt}"));
        let asked = Instant::now();
        match lock.try_lock(Duration::from_millis(1500), None) {
            Ok(Some(guard)) => {
                let token = guard.token();
                let waited = asked.elapsed().as_micros();
                log(
                    &mut out,
                    format!("B {id} {attempt} {token} {} {cur} {waited}\n", now_us()),
                );
                std::thread::sleep(Duration::from_micros(rng.gen_range(500..6000)));
                let lost = guard.is_lost();
                let reason = match guard.lost_signal().reason() {
                    Some(r) => format!("{r:?}"),
                    None => "-".into(),
                };
                log(
                    &mut out,
                    format!(
                        "E {id} {attempt} {token} {} {} {reason}\n",
                        now_us(),
                        u8::from(lost)
                    ),
                );
                let outcome = match guard.unlock() {
                    Ok(Unlock::Released) => "released",
                    Ok(Unlock::StillHeld) => "still",
                    Ok(Unlock::Lost) => "notheld",
                    Ok(Unlock::Unknown) | Err(_) => "err",
                };
                log(&mut out, format!("U {id} {attempt} {outcome}\n"));
                sections += 1;
            }
            Ok(None) => {}
            Err(_) => {
                // Down, restarting, loading, demoted or not yet promoted: try the next.
                errors += 1;
                switches += 1;
                cur = (cur + 1) % clients.len();
                std::thread::sleep(Duration::from_millis(rng.gen_range(10..40)));
            }
        }
    }
    println!("done sections={sections} errors={errors} switches={switches}");
    Ok(())
}
