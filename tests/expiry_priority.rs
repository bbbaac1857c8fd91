//! Waiters first when many leases end at once: the expiry timer serves the
//! locks that connections wait on before it deletes the locks nobody waits
//! on (issue 27). Checked by order, not by time: each waiter, as soon as it
//! is granted, asks DBSIZE on the same connection; most of the other locks
//! must still be there.

mod common;
use common::*;

use std::thread;
use std::time::{Duration, Instant};

/// Locks whose leases end at one instant, nobody waiting on them.
const LOCKS: usize = 20_000;
/// Locks with one blocked waiter each, filed last with leases ending
/// [`LATER_MS`] after the others: deadline order alone would serve them
/// after every other lock is deleted (the fill spreads the others' ends
/// over a millisecond or two).
const WAITED: usize = 5;
const LATER_MS: u64 = 3;

/// PX that makes a lease granted now end at `instant`.
fn px_until(instant: Instant) -> u64 {
    instant
        .saturating_duration_since(Instant::now())
        .as_millis()
        .max(1) as u64
}

#[test]
fn waiters_are_granted_before_most_expired_locks_are_deleted() {
    let server = Server::start();
    let mut admin = server.conn();
    // Generous: the fill must end well before the common instant.
    let instant = Instant::now() + Duration::from_secs(5);
    let mut i = 0;
    while i < LOCKS {
        let end = (i + 1000).min(LOCKS);
        let px = px_until(instant);
        let mut p = redis::pipe();
        for k in i..end {
            p.cmd("DLOCK.ACQUIRE")
                .arg(format!("mass:{k}"))
                .arg("holder")
                .arg("PX")
                .arg(px)
                .ignore();
        }
        let () = p.query(&mut admin).expect("fill");
        i = end;
    }
    for w in 0..WAITED {
        let token: i64 = redis::cmd("DLOCK.ACQUIRE")
            .arg(format!("waited:{w}"))
            .arg("holder")
            .arg("PX")
            .arg(px_until(instant) + LATER_MS)
            .query(&mut admin)
            .expect("acquire a waited lock");
        assert!(token > 0);
    }
    let waiters: Vec<_> = (0..WAITED)
        .map(|w| {
            let mut con = server.conn_with_timeout(Some(Duration::from_secs(60)));
            thread::spawn(move || {
                let token: i64 = redis::cmd("DLOCK.ACQUIRE")
                    .arg(format!("waited:{w}"))
                    .arg("waiter")
                    .arg("PX")
                    .arg(60_000)
                    .arg("WAIT")
                    .arg(60_000)
                    .query(&mut con)
                    .expect("blocked ACQUIRE");
                let left: i64 = redis::cmd("DBSIZE").query(&mut con).expect("DBSIZE");
                (token, left)
            })
        })
        .collect();
    assert!(
        wait_until(Duration::from_secs(10), || {
            server.info_field("clients", "blocked_clients").as_deref() == Some(&WAITED.to_string())
        }),
        "the waiters did not block"
    );
    let held: i64 = redis::cmd("DBSIZE").query(&mut admin).expect("DBSIZE");
    assert!(
        Instant::now() < instant && held == (LOCKS + WAITED) as i64,
        "the fill overran the common lease end ({held} locks held); the machine is too slow \
         for this test's 5 s margin"
    );
    for w in waiters {
        let (token, left) = w.join().expect("waiter thread");
        eprintln!("a waiter was granted with {left} locks left");
        assert!(token > 0, "the waiter was not granted: {token}");
        assert!(
            left > (LOCKS / 2) as i64,
            "a waiter was granted only when {left} of {LOCKS} expired locks were left: the \
             expiry did not serve waiters first"
        );
    }
    // The others all go in the end.
    assert!(
        wait_until(Duration::from_secs(30), || {
            redis::cmd("DBSIZE").query::<i64>(&mut admin).ok() == Some(WAITED as i64)
        }),
        "the expired locks were not all deleted"
    );
}
