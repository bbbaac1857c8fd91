//! Fencing where the data lives, under faults (issue 14): worker processes
//! (`examples/fenced_worker.rs`) write their critical sections into Redis
//! itself through `DLOCK.FENCED`, while this test
//!
//! - SIGSTOPs a holder in the middle of its critical section for longer than
//!   its lease, then SIGCONTs it: its late writes must be refused (`FENCED`),
//!   and the list of accepted writes must never show a write with an older
//!   token after one with a newer token (0 stale writes accepted);
//! - SIGKILLs a holder that took the lock with `BIND`: the next waiter is
//!   served in milliseconds, against the lease without `BIND`.
//!
//! The figures are printed (`cargo test -- --nocapture`).

mod support;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use dlock_client::Client;
use support::*;

fn worker_bin() -> PathBuf {
    example_bin("fenced_worker")
}

/// A worker process; killed on drop (even when the test fails).
struct Worker {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Worker {
    fn start(server: &Server, id: u32, mode: &str, ms: u64, bind: bool, lease_ms: u64) -> Worker {
        let mut child = Command::new(worker_bin())
            .args([
                server.url(),
                "fc:lock".into(),
                id.to_string(),
                mode.into(),
                ms.to_string(),
                if bind { "1" } else { "0" }.into(),
                lease_ms.to_string(),
                "fc:log".into(),
            ])
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn fenced_worker");
        let out = child.stdout.take().expect("stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Worker { child, lines }
    }

    fn pid(&self) -> String {
        self.child.id().to_string()
    }

    fn signal(&self, sig: &str) {
        let _ = Command::new("kill").args([sig, &self.pid()]).status();
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_paused_holders_late_writes_are_refused_and_no_stale_write_lands() {
    let server = Server::start();
    let workers: Vec<Worker> = (0..4)
        .map(|i| Worker::start(&server, i, "loop", 4_000, false, 300))
        .collect();
    // Pause whoever is granted first, mid-section, for 3 leases.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut paused = None;
    'find: while Instant::now() < deadline {
        for (i, w) in workers.iter().enumerate() {
            if let Ok(line) = w.lines.try_recv() {
                if line.starts_with("G ") {
                    w.signal("-STOP");
                    paused = Some(i);
                    break 'find;
                }
            }
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    let paused = paused.expect("a worker was granted");
    std::thread::sleep(Duration::from_millis(900));
    workers[paused].signal("-CONT");
    // Collect every worker's output until it is done.
    let mut refused = 0;
    let mut grants = 0;
    for w in &workers {
        let end = Instant::now() + Duration::from_secs(30);
        while Instant::now() < end {
            match w.lines.recv_timeout(Duration::from_secs(30)) {
                Ok(l) if l == "done" => break,
                Ok(l) if l.starts_with("R ") => refused += 1,
                Ok(l) if l.starts_with("G ") => grants += 1,
                Ok(_) => {}
                Err(_) => break,
            }
        }
    }
    // The accepted writes, in the order Redis applied them.
    let log: Vec<String> = redis::cmd("LRANGE")
        .arg("fc:log")
        .arg(0)
        .arg(-1)
        .query(&mut server.conn())
        .expect("LRANGE");
    let tokens: Vec<u64> = log
        .iter()
        .map(|e| {
            e.split(':')
                .next()
                .and_then(|t| t.parse().ok())
                .expect("token")
        })
        .collect();
    let stale = tokens.windows(2).filter(|p| p[1] < p[0]).count();
    eprintln!(
        "fenced chaos: {grants} grants, {} writes accepted, {stale} stale writes accepted, \
         {refused} late writes refused (worker {paused} paused 900 ms with a 300 ms lease)",
        log.len()
    );
    assert_eq!(
        stale, 0,
        "a write with an older token landed after a newer one"
    );
    assert!(
        refused >= 1,
        "the paused holder's late write was not refused"
    );
    assert!(
        grants > 10 && log.len() > 30,
        "{grants} grants, {} writes",
        log.len()
    );
}

/// Median hand-over (ms) from SIGKILL of a holder to the grant of a waiter.
fn handover(server: &Server, bind: bool, lease_ms: u64, rounds: usize) -> f64 {
    let client = Client::open(server.url()).unwrap();
    let mut samples = Vec::new();
    for round in 0..rounds {
        let w = Worker::start(server, 100 + round as u32, "hold", 60_000, bind, lease_ms);
        let granted = w
            .lines
            .recv_timeout(Duration::from_secs(20))
            .expect("grant");
        assert!(granted.starts_with("G "), "{granted}");
        let (tx, rx) = mpsc::channel();
        let c = client.clone();
        std::thread::spawn(move || {
            let g = c
                .mutex("fc:lock")
                .try_lock(Duration::from_secs(30), Some(Duration::from_secs(5)))
                .unwrap();
            let _ = tx.send(Instant::now());
            if let Some(g) = g {
                let _ = g.unlock();
            }
        });
        std::thread::sleep(Duration::from_millis(100)); // the waiter waits
        let killed = Instant::now();
        w.signal("-KILL");
        let at = rx
            .recv_timeout(Duration::from_secs(40))
            .expect("the waiter");
        samples.push(at.duration_since(killed).as_secs_f64() * 1000.0);
        drop(w);
    }
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

#[test]
fn a_killed_bind_holder_hands_over_in_milliseconds() {
    let server = Server::start();
    let with_bind = handover(&server, true, 10_000, 3);
    let without = handover(&server, false, 1_500, 1);
    eprintln!(
        "hand-over after SIGKILL of the holder: with BIND {with_bind:.1} ms (10 s lease); \
         without BIND {without:.0} ms (1.5 s lease)"
    );
    assert!(with_bind < 2_000.0, "{with_bind} ms");
    assert!(
        without > 1_000.0,
        "{without} ms: without BIND the lease must run out"
    );
}
