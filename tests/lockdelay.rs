//! `LOCKDELAY ms` (docs/commands.md, "Options of every acquire command"):
//! a hold that ends other than by its owner's RELEASE or a FORCERELEASE —
//! its lease ran out, or its bound connection closed — keeps excluding every
//! owner for `ms` more; nobody can renew or release it; the notice is
//! published when the delay is over and the lock is grantable.

mod common;
use common::*;

use redis::Value;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

/// A field of the first holder, if the lock and the field exist.
fn holder_field(con: &mut redis::Connection, key: &str, name: &str) -> Option<Value> {
    let info = info_raw(con, key);
    let first = match &info {
        Value::Nil => return None,
        info => holders(info).first()?.clone(),
    };
    let items = as_array(&first).to_vec();
    items
        .chunks(2)
        .find(|kv| kv.first() == Some(&Value::BulkString(name.as_bytes().to_vec())))
        .and_then(|kv| kv.get(1).cloned())
}

#[test]
fn a_lease_end_keeps_excluding_for_the_lock_delay() {
    let server = Server::start();
    let mut c = server.conn();
    let msgs = subscribe_lock(&server, "d");
    let start = Instant::now();
    let token = int(
        &mut c,
        &["DLOCK.ACQUIRE", "d", "a", "PX", "200", "LOCKDELAY", "600"],
    );
    let (tx, rx) = mpsc::channel();
    let mut wc = server.conn();
    thread::spawn(move || {
        let r = cmd_str(
            &mut wc,
            &["DLOCK.ACQUIRE", "d", "b", "PX", "60000", "WAIT", "20000"],
        );
        let _ = tx.send((r, Instant::now()));
    });
    // Past the lease, inside the delay: the hold is delayed, nobody's.
    assert!(wait_until(Duration::from_secs(5), || {
        holder_field(&mut c, "d", "delayed") == Some(Value::BulkString(b"expired".to_vec()))
    }));
    assert_eq!(int(&mut c, &["DLOCK.RENEW", "d", "a", "PX", "60000"]), 0);
    let e = expect_err(cmd_str(&mut c, &["DLOCK.RELEASE", "d", "a"]));
    assert!(e.starts_with("NOTHELD"), "{e}");
    assert_eq!(int(&mut c, &["DLOCK.CHECK", "d", &token.to_string()]), 0);
    // Its own owner is excluded too.
    assert_eq!(ok(&mut c, &["DLOCK.ACQUIRE", "d", "a"]), Value::Nil);
    // The waiter is served when the delay ends, not before: lease 200 + 600.
    let (r, at) = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("the waiter");
    assert!(matches!(r, Ok(Value::Int(t)) if t > token), "{r:?}");
    let waited = at.duration_since(start);
    assert!(
        waited >= Duration::from_millis(780),
        "granted {waited:?} after the acquire, before lease + lock-delay (800 ms)"
    );
    assert!(waited < Duration::from_secs(10), "{waited:?}");
    // `expired` was published once, when the delay was over.
    let (m, when) = msgs.recv_timeout(Duration::from_secs(5)).expect("a notice");
    assert_eq!(m, "expired");
    assert!(when.duration_since(start) >= Duration::from_millis(780));
    let stat: i64 = info_field(&mut c, "dlock", "dlock_delayed_ends")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    assert_eq!(stat, 1);
}

#[test]
fn release_and_forcerelease_end_at_once() {
    let server = Server::start();
    let mut c = server.conn();
    int(
        &mut c,
        &[
            "DLOCK.ACQUIRE",
            "r",
            "a",
            "PX",
            "60000",
            "LOCKDELAY",
            "60000",
        ],
    );
    assert_eq!(int(&mut c, &["DLOCK.RELEASE", "r", "a"]), 1);
    int(
        &mut c,
        &[
            "DLOCK.ACQUIRE",
            "r",
            "b",
            "PX",
            "60000",
            "LOCKDELAY",
            "60000",
        ],
    );
    assert_eq!(int(&mut c, &["DLOCK.FORCERELEASE", "r"]), 1);
    int(&mut c, &["DLOCK.ACQUIRE", "r", "c", "PX", "60000"]);
    // A reentrant grant neither adds nor changes the lock-delay.
    int(&mut c, &["DLOCK.ACQUIRE", "r", "c", "LOCKDELAY", "5000"]);
    // (the field appears only on holds that have a lock-delay)
    let info = info_raw(&mut c, "r");
    let fields: Vec<&Value> = as_array(&holders(&info)[0]).iter().step_by(2).collect();
    assert!(
        !fields.contains(&&Value::BulkString(b"lockdelay".to_vec())),
        "{info:?}"
    );
}

#[test]
fn a_closed_bound_connection_with_lock_delay_publishes_disconnected_after_the_delay() {
    let server = Server::start();
    let mut admin = server.conn();
    let msgs = subscribe_lock(&server, "bd");
    let mut holder = server.conn();
    int(
        &mut holder,
        &[
            "DLOCK.SEMACQUIRE",
            "bd",
            "a",
            "LIMIT",
            "1",
            "BIND",
            "LOCKDELAY",
            "500",
            "PX",
            "60000",
        ],
    );
    let id = int(&mut holder, &["CLIENT", "ID"]);
    let killed = Instant::now();
    int(&mut admin, &["CLIENT", "KILL", "ID", &id.to_string()]);
    assert!(wait_until(Duration::from_secs(5), || {
        holder_field(&mut admin, "bd", "delayed")
            == Some(Value::BulkString(b"disconnected".to_vec()))
    }));
    // Still excluding: the semaphore's one permit is held by the delay.
    assert_eq!(
        ok(&mut admin, &["DLOCK.SEMACQUIRE", "bd", "b", "LIMIT", "1"]),
        Value::Nil
    );
    let (m, when) = msgs
        .recv_timeout(Duration::from_secs(10))
        .expect("a notice");
    assert_eq!(m, "disconnected");
    assert!(when.duration_since(killed) >= Duration::from_millis(480));
    assert!(
        matches!(
            ok(&mut admin, &["DLOCK.SEMACQUIRE", "bd", "b", "LIMIT", "1"]),
            Value::Int(_)
        ),
        "grantable after the delay"
    );
}

#[test]
fn replicas_and_restarts_keep_the_delayed_hold() {
    let mut master = Server::start_with(ServerOpts::new().args([
        "--appendonly",
        "yes",
        "--appendfsync",
        "always",
    ]));
    let replica = Server::start();
    replica.make_replica_of(&master);
    let mut m = master.conn();
    int(
        &mut m,
        &["DLOCK.ACQUIRE", "k", "a", "PX", "100", "LOCKDELAY", "30000"],
    );
    assert!(wait_until(Duration::from_secs(5), || {
        holder_field(&mut m, "k", "delayed") == Some(Value::BulkString(b"expired".to_vec()))
    }));
    wait_replica_synced(&master, &replica);
    let mut r = replica.conn();
    assert_eq!(info_norm(&mut r, "k"), info_norm(&mut m, "k"));
    master.restart();
    let mut m = master.conn();
    assert_eq!(
        holder_field(&mut m, "k", "delayed"),
        Some(Value::BulkString(b"expired".to_vec())),
        "the AOF replays the delayed hold"
    );
    assert_eq!(ok(&mut m, &["DLOCK.ACQUIRE", "k", "b"]), Value::Nil);
}

#[test]
fn lockdelay_bad_input() {
    let server = Server::start();
    let mut c = server.conn();
    for (args, want) in [
        (
            vec![
                "DLOCK.ACQUIRE",
                "k",
                "o",
                "LOCKDELAY",
                "1",
                "LOCKDELAY",
                "2",
            ],
            "LOCKDELAY was given more than once",
        ),
        (
            vec!["DLOCK.ACQUIRE", "k", "o", "LOCKDELAY"],
            "LOCKDELAY needs a value",
        ),
        (
            vec!["DLOCK.ACQUIRE", "k", "o", "LOCKDELAY", "-1"],
            "LOCKDELAY must be an integer",
        ),
        (
            vec![
                "DLOCK.RWACQUIRE",
                "k",
                "o",
                "READ",
                "LOCKDELAY",
                "1099511627777",
            ],
            "LOCKDELAY must be an integer",
        ),
        (
            vec!["DLOCK.SEMACQUIRE", "k", "o", "LIMIT", "2", "LOCKDELAY", "x"],
            "LOCKDELAY must be an integer",
        ),
        (
            vec!["DLOCK.RENEW", "k", "o", "LOCKDELAY", "5"],
            "unknown option",
        ),
    ] {
        let e = expect_err(cmd_str(&mut c, &args));
        assert!(e.contains(want), "{args:?}: {e}");
    }
    assert_eq!(ok(&mut c, &["DLOCK.INFO", "k"]), Value::Nil);
}
