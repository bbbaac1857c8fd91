//! Regression tests for issue 21 (bugs found by reading).
//!
//! - `unbind` (a `BIND` hold's connection closed) dropped the effects of
//!   leases that ended at the same instant: no `expired` notice, and the
//!   waiters were not served.
//! - `DLOCK.AWAIT ... WAIT` queued a place under maxmemory OOM. AWAIT stays
//!   a command that always answers (docs/commands.md: COUNTDOWN and AWAIT
//!   always work), so only the wait, which takes a place, is refused.
//! - (Not testable from outside, fixed by type: a waiter's grant that could
//!   not be stored replied a token; a keyspace callback wrote through a key
//!   opened for reading. See tests/layers.rs and docs/architecture.md.)

mod common;
use common::*;

use redis::Value;
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

const LONG: &str = "60000";

/// Owners holding `key` with their `expires_at` (unix ms).
fn holds(con: &mut redis::Connection, key: &str) -> Vec<(String, i64)> {
    match info_raw(con, key) {
        Value::Nil => vec![],
        info => holders(&info)
            .iter()
            .map(|h| {
                let owner = String::from_utf8_lossy(as_bytes(field(h, "owner"))).into_owned();
                (owner, as_int(field(h, "expires_at")))
            })
            .collect(),
    }
}

/// Server time in unix ms from a `TIME` reply.
fn time_ms(v: &Value) -> i64 {
    let Value::Array(parts) = v else {
        panic!("TIME: {v:?}")
    };
    let num = |p: &Value| -> i64 {
        std::str::from_utf8(as_bytes(p))
            .expect("utf8")
            .parse()
            .expect("number")
    };
    num(&parts[0]) * 1000 + num(&parts[1]) / 1000
}

/// A bound hold's connection closes, and at the instant its end runs the
/// leases of the other holders have ended too. Ending the bound hold alone
/// does not free the rw lock (two readers stay), the lease ends do: the
/// writer waiting must be served and `expired` published.
///
/// Deterministic ordering: one pipeline from one connection runs
/// `CLIENT KILL` of the bound holder (Redis frees it synchronously, and the
/// module schedules the unbind as a 0 ms timer, at an instant well before
/// the leases end), then `DEBUG SLEEP` past the leases' end. After the
/// sleep Redis runs the module timers in order of their due time: the
/// unbind job first (due earlier), then the expiry timer. So the unbind
/// sees the leases due, and the expiry timer then finds its entry stale.
/// Before the fix the unbind threw the lease ends' effects away: no wake,
/// no notice, and the writer waited out its whole WAIT.
#[test]
fn unbind_serves_and_publishes_for_leases_ending_at_the_same_instant() {
    let server = Server::start();
    let mut admin = server.conn();
    let key = "u21";
    // Leases of x and y: long enough that the kill surely runs before they
    // end (checked below against the server's clock), short enough that
    // the sleep passes them.
    let lease_ms: i64 = 3000;
    let sleep_s = "5";
    let mut bound = server.conn();
    let bound_id = int(&mut bound, &["CLIENT", "ID"]);
    int(
        &mut bound,
        &["DLOCK.RWACQUIRE", key, "a", "READ", "PX", LONG, "BIND"],
    );
    let lease = lease_ms.to_string();
    int(
        &mut admin,
        &["DLOCK.RWACQUIRE", key, "x", "READ", "PX", &lease],
    );
    int(
        &mut admin,
        &["DLOCK.RWACQUIRE", key, "y", "READ", "PX", &lease],
    );
    let msgs = subscribe_lock(&server, key);
    let (tx, rx) = mpsc::channel();
    let mut wc = server.conn();
    thread::spawn(move || {
        let r = cmd_str(
            &mut wc,
            &[
                "DLOCK.RWACQUIRE",
                key,
                "w",
                "WRITE",
                "PX",
                LONG,
                "WAIT",
                "30000",
            ],
        );
        let _ = tx.send(r);
    });
    assert!(wait_until(Duration::from_secs(10), || {
        waiters(&info_raw(&mut admin, key)).len() == 1
    }));
    let ends = holds(&mut admin, key);
    let first_end = ends
        .iter()
        .filter(|(o, _)| o != "a")
        .map(|(_, e)| *e)
        .min()
        .expect("x and y hold");

    // One write, one query buffer: the kill and the sleep run back to back.
    let replies: Vec<Value> = redis::pipe()
        .cmd("TIME")
        .cmd("CLIENT")
        .arg("KILL")
        .arg("ID")
        .arg(bound_id)
        .cmd("DEBUG")
        .arg("SLEEP")
        .arg(sleep_s)
        .query(&mut admin)
        .expect("pipeline");
    let killed_at = time_ms(&replies[0]);
    assert_eq!(replies[1], Value::Int(1), "CLIENT KILL: {replies:?}");
    assert!(
        killed_at + 500 < first_end,
        "precondition: the kill ran at {killed_at}, too close to the leases' end at \
         {first_end} (machine too slow for this test's margins)"
    );

    // The writer is served at once after the sleep, not at the end of WAIT.
    let got = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the waiting writer was not served after the holds ended");
    match got {
        Ok(Value::Int(t)) if t > 0 => {}
        other => panic!("writer: expected a token, got {other:?}"),
    }
    let now = holds(&mut admin, key);
    assert_eq!(now.len(), 1, "{now:?}");
    assert_eq!(now[0].0, "w");
    // Ending a's hold freed nothing (x and y still read); the lease ends
    // freed the lock: `expired`.
    let (msg, _) = msgs
        .recv_timeout(Duration::from_secs(10))
        .expect("no notice published");
    assert_eq!(msg, "expired");
}

/// `DLOCK.AWAIT key WAIT ms` on a latch queues a place for the connection:
/// under maxmemory (noeviction) it is refused with OOM like the acquire
/// commands, and no place is queued.
#[test]
fn await_with_wait_is_refused_under_oom() {
    let server = Server::start();
    let mut c = server.conn();
    assert_eq!(int(&mut c, &["DLOCK.LATCHSET", "l21", "1"]), 1);
    ok(&mut c, &["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
    // Below used_memory: every deny-oom command is refused.
    ok(&mut c, &["CONFIG", "SET", "maxmemory", "1"]);
    let r = cmd_str(&mut c, &["DLOCK.AWAIT", "l21", "WAIT", "100"]);
    // A look that takes no place still answers.
    let look = cmd_str(&mut c, &["DLOCK.AWAIT", "l21"]);
    ok(&mut c, &["CONFIG", "SET", "maxmemory", "0"]);
    assert!(look.is_ok(), "{look:?}");
    let e = expect_err(r);
    assert!(e.starts_with("OOM"), "{e}");
    let info = info_raw(&mut c, "l21");
    assert!(waiters(&info).is_empty(), "{info:?}");
    assert_eq!(as_int(field(&info, "count")), 1);
}
