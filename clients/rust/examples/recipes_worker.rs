//! A process for `tests/recipes.rs`: prints one line per event on stdout.
//!
//! ```sh
//! recipes_worker runonce <url> <name> <first-slot> <slots> <period-ms> <at-least-ms> <at-most-ms>
//! recipes_worker elect <url> <name> <id> <bind 0|1> <lease-ms>
//! ```
//!
//! `runonce` runs `run_once(name)` at every period boundary of the wall clock for the
//! given slots; the job counts itself in (fenced INCR/DECR of `name:running`) and logs
//! `slot:pid:token:running` to `name:log`; at the end it prints
//! `done <ran> <skipped> <lost> <max-lateness-us>`.
//! `elect` campaigns as owner `w<id>`; elected, it prints `elected <id> <token> <unix-us>`,
//! proclaims `addr-<id>` and appends `<id>:<token>` to `name:log` (fenced) every 50 ms;
//! when the term is lost it prints `lost <id> <token> <unix-us>` and campaigns again.

use std::io::Write;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use dlock_client::recipes::{run_once, Election, RunOnce, RunOutcome};
use dlock_client::{Client, Options};

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

fn say(line: String) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

fn arg(a: &[String], i: usize) -> String {
    a.get(i).cloned().unwrap_or_else(|| {
        eprintln!("usage: see the header of examples/recipes_worker.rs");
        std::process::exit(2)
    })
}

fn num(a: &[String], i: usize) -> u64 {
    arg(a, i).parse().unwrap_or_else(|_| {
        eprintln!("argument {i} must be a number");
        std::process::exit(2)
    })
}

fn main() -> Result<(), dlock_client::Error> {
    let a: Vec<String> = std::env::args().collect();
    let (mode, url, name) = (arg(&a, 1), arg(&a, 2), arg(&a, 3));
    if mode == "runonce" {
        let client = Client::open(url.as_str())?;
        let (first, slots, period) = (num(&a, 4), num(&a, 5), num(&a, 6));
        let (at_least, at_most) = (num(&a, 7), num(&a, 8));
        let pid = std::process::id();
        let (mut ran, mut skipped, mut lost, mut late) = (0, 0, 0, 0u64);
        for slot in first..first + slots {
            let due = slot * period * 1000;
            let now = now_us();
            if due > now {
                std::thread::sleep(Duration::from_micros(due - now));
            }
            late = late.max(now_us().saturating_sub(due));
            let opts = RunOnce::new(Duration::from_millis(at_most))
                .at_least_for(Duration::from_millis(at_least));
            let out = run_once(
                &client,
                &name,
                opts,
                |job| -> Result<(), dlock_client::Error> {
                    let running = job.fenced(redis::cmd("INCR").arg(format!("{name}:running")))?;
                    std::thread::sleep(Duration::from_millis(20));
                    job.fenced(redis::cmd("DECR").arg(format!("{name}:running")))?;
                    let running = match running {
                        redis::Value::Int(n) => n,
                        _ => -1,
                    };
                    let entry = format!("{slot}:{pid}:{}:{running}", job.token());
                    job.fenced(redis::cmd("RPUSH").arg(format!("{name}:log")).arg(entry))?;
                    Ok(())
                },
            )?;
            match out {
                RunOutcome::Ran { value, .. } => {
                    value?;
                    ran += 1
                }
                RunOutcome::Skipped => skipped += 1,
                RunOutcome::Lost { .. } => lost += 1,
            }
        }
        say(format!("done {ran} {skipped} {lost} {late}"));
        return Ok(());
    }
    let (id, bind, lease) = (num(&a, 4), num(&a, 5) == 1, num(&a, 6));
    let opts = Options::default()
        .watchdog_lease(Duration::from_millis(lease))
        .renew_interval(Duration::from_millis(lease / 3));
    let client = Client::with_options(url.as_str(), opts)?;
    let election = Election::new(&client, name.clone())
        .owner(format!("w{id}"))
        .bind(bind);
    say(format!("ready {id}"));
    loop {
        let term = election.campaign()?;
        say(format!("elected {id} {} {}", term.token(), now_us()));
        let _ = term.proclaim(&format!("addr-{id}"));
        while !term.is_lost() {
            let entry = format!("{id}:{}", term.token());
            let _ = term.fenced(redis::cmd("RPUSH").arg(format!("{name}:log")).arg(entry));
            std::thread::sleep(Duration::from_millis(50));
        }
        say(format!("lost {id} {} {}", term.token(), now_us()));
    }
}
