//! `BIND` (docs/commands.md, "Options of every acquire command"): a hold
//! bound to the connection that was granted it ends when that connection
//! closes — QUIT, a crash, CLIENT KILL, `timeout` — publishing
//! `disconnected`, and the next waiter is served at once; replicas store the
//! flag; a restart or a promotion ends every bound hold.

mod common;
use common::*;

use redis::Value;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

const LONG: &str = "60000";

fn client_id(con: &mut redis::Connection) -> i64 {
    int(con, &["CLIENT", "ID"])
}

/// Owners holding `key` (empty when there is no lock).
fn owners(con: &mut redis::Connection, key: &str) -> Vec<String> {
    match info_raw(con, key) {
        Value::Nil => vec![],
        info => holders(&info)
            .iter()
            .map(|h| String::from_utf8_lossy(as_bytes(field(h, "owner"))).into_owned())
            .collect(),
    }
}

fn stat(con: &mut redis::Connection, name: &str) -> i64 {
    info_field(con, "dlock", name)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

#[test]
fn a_bound_hold_ends_when_its_connection_closes_and_the_waiter_is_served() {
    let mut server = Server::start();
    let mut admin = server.conn();
    let mut handovers = Vec::new();
    for round in 0..5 {
        let key = format!("b{round}");
        let msgs = subscribe_lock(&server, &key);
        let mut holder = server.conn();
        let token = int(
            &mut holder,
            &["DLOCK.ACQUIRE", &key, "h", "BIND", "PX", LONG],
        );
        // Reentry neither adds nor removes the binding; the count is ignored.
        assert_eq!(
            int(&mut holder, &["DLOCK.ACQUIRE", &key, "h", "PX", LONG]),
            token
        );
        let holder_id = client_id(&mut holder);
        let (tx, rx) = mpsc::channel();
        let mut wc = server.conn();
        let k2 = key.clone();
        thread::spawn(move || {
            let r = cmd_str(
                &mut wc,
                &["DLOCK.ACQUIRE", &k2, "w", "PX", LONG, "WAIT", "30000"],
            );
            let _ = tx.send((r, Instant::now()));
        });
        assert!(wait_until(Duration::from_secs(10), || {
            matches!(info_raw(&mut admin, &key), Value::Nil)
                || waiters(&info_raw(&mut admin, &key)).len() == 1
        }));
        // Close the holder's connection from the server side, as a crash would.
        let killed = Instant::now();
        assert_eq!(
            int(
                &mut admin,
                &["CLIENT", "KILL", "ID", &holder_id.to_string()]
            ),
            1
        );
        let (r, at) = rx
            .recv_timeout(Duration::from_secs(20))
            .expect("the waiter");
        match r {
            Ok(Value::Int(t)) => assert!(t > token),
            other => panic!("waiter: {other:?}"),
        }
        handovers.push(at.duration_since(killed));
        assert_eq!(owners(&mut admin, &key), ["w"]);
        let got: Vec<String> = msgs.try_iter().map(|(m, _)| m).collect();
        let got = if got.is_empty() {
            vec![msgs
                .recv_timeout(Duration::from_secs(5))
                .map(|(m, _)| m)
                .unwrap_or_default()]
        } else {
            got
        };
        assert!(got.iter().any(|m| m == "disconnected"), "{got:?}");
        drop(holder);
    }
    handovers.sort();
    let median = handovers[handovers.len() / 2];
    eprintln!("hand-over after CLIENT KILL of a BIND holder (60 s lease): {handovers:?}, median {median:?}");
    assert!(median < Duration::from_secs(2), "{handovers:?}");
    assert_eq!(stat(&mut admin, "dlock_bound_ends"), 5);
    server.assert_alive();
}

#[test]
fn closing_the_connection_ends_only_bound_holds() {
    let server = Server::start();
    let mut admin = server.conn();
    {
        let mut c = server.conn();
        int(&mut c, &["DLOCK.ACQUIRE", "unbound", "u", "PX", LONG]);
        int(&mut c, &["DLOCK.ACQUIRE", "bound", "b", "BIND", "PX", LONG]);
        int(
            &mut c,
            &["DLOCK.RWACQUIRE", "rw", "r", "READ", "BIND", "PX", LONG],
        );
        int(
            &mut c,
            &["DLOCK.RWACQUIRE", "rw", "other", "READ", "PX", LONG],
        );
        int(
            &mut c,
            &["DLOCK.FAIRACQUIRE", "fair", "f", "PX", LONG, "BIND"],
        );
        int(
            &mut c,
            &[
                "DLOCK.SEMACQUIRE",
                "sem",
                "s",
                "LIMIT",
                "3",
                "PERMITS",
                "2",
                "BIND",
                "PX",
                LONG,
            ],
        );
        int(
            &mut c,
            &["DLOCK.SEMACQUIRE", "sem", "t", "LIMIT", "3", "PX", LONG],
        );
        // QUIT, then the connection is dropped.
        let _ = cmd_str(&mut c, &["QUIT"]);
    }
    assert!(
        wait_until(Duration::from_secs(10), || owners(&mut admin, "bound")
            .is_empty()),
        "the bound mutex ended"
    );
    assert!(wait_until(Duration::from_secs(10), || owners(
        &mut admin, "sem"
    ) == ["t"]));
    assert_eq!(owners(&mut admin, "unbound"), ["u"]);
    assert_eq!(owners(&mut admin, "rw"), ["other"]);
    assert!(owners(&mut admin, "fair").is_empty());
    assert_eq!(
        as_int(field(&info_raw(&mut admin, "sem"), "available")),
        2,
        "the bound holder's 2 permits came back"
    );
}

#[test]
fn bind_in_multi_binds_the_calling_connection_and_scripts_refuse_it() {
    let server = Server::start();
    let mut admin = server.conn();
    {
        let mut c = server.conn();
        ok(&mut c, &["MULTI"]);
        let _ = cmd_str(&mut c, &["DLOCK.ACQUIRE", "m", "o", "BIND", "PX", LONG]);
        ok(&mut c, &["EXEC"]);
        assert_eq!(owners(&mut admin, "m"), ["o"]);
        let r = redis::cmd("EVAL")
            .arg("return redis.pcall('DLOCK.ACQUIRE', KEYS[1], 'o', 'BIND')")
            .arg(1)
            .arg("s")
            .query::<Value>(&mut c);
        let text = match r {
            Ok(v) => value_err_string(&v).unwrap_or_else(|| format!("{v:?}")),
            Err(e) => err_string(&e),
        };
        assert!(
            text.contains("BIND is not allowed inside a script"),
            "{text}"
        );
        assert!(owners(&mut admin, "s").is_empty());
    }
    assert!(wait_until(Duration::from_secs(10), || owners(
        &mut admin, "m"
    )
    .is_empty()));
}

#[test]
fn a_waiter_granted_with_bind_is_bound_to_its_own_connection() {
    let server = Server::start();
    let mut admin = server.conn();
    int(&mut admin, &["DLOCK.ACQUIRE", "h", "first", "PX", LONG]);
    let (tx, rx) = mpsc::channel();
    let mut wc = server.conn();
    let waiter_id = client_id(&mut wc);
    thread::spawn(move || {
        let r = cmd_str(
            &mut wc,
            &[
                "DLOCK.ACQUIRE",
                "h",
                "w",
                "BIND",
                "PX",
                LONG,
                "WAIT",
                "30000",
            ],
        );
        let _ = tx.send(r);
        // Keep the connection open until told.
        thread::sleep(Duration::from_secs(60));
        drop(wc);
    });
    assert!(wait_until(Duration::from_secs(10), || {
        waiters(&info_raw(&mut admin, "h")).len() == 1
    }));
    assert_eq!(int(&mut admin, &["DLOCK.RELEASE", "h", "first"]), 1);
    let r = rx.recv_timeout(Duration::from_secs(10)).expect("granted");
    assert!(matches!(r, Ok(Value::Int(_))), "{r:?}");
    assert_eq!(owners(&mut admin, "h"), ["w"]);
    // The hold is the waiter's connection's: killing the admin's would not
    // end it; killing the waiter's does.
    int(
        &mut admin,
        &["CLIENT", "KILL", "ID", &waiter_id.to_string()],
    );
    assert!(wait_until(Duration::from_secs(10), || owners(
        &mut admin, "h"
    )
    .is_empty()));
}

#[test]
fn restart_from_aof_or_rdb_does_not_resurrect_bound_holds() {
    for aof in [true, false] {
        let opts = if aof {
            ServerOpts::new().args(["--appendonly", "yes", "--appendfsync", "always"])
        } else {
            ServerOpts::new()
        };
        let mut server = Server::start_with(opts);
        let mut c = server.conn();
        int(&mut c, &["DLOCK.ACQUIRE", "bound", "b", "BIND", "PX", LONG]);
        int(&mut c, &["DLOCK.ACQUIRE", "kept", "k", "PX", LONG]);
        if aof {
            server.restart(); // SIGKILL, then replay of the AOF
        } else {
            server.shutdown_save();
            server.restart();
        }
        let mut c = server.conn();
        assert!(
            wait_until(Duration::from_secs(10), || owners(&mut c, "bound")
                .is_empty()),
            "aof {aof}: bound hold resurrected"
        );
        assert_eq!(owners(&mut c, "kept"), ["k"], "aof {aof}");
        // A new owner gets it at once.
        int(&mut c, &["DLOCK.ACQUIRE", "bound", "n", "PX", LONG]);
    }
}

#[test]
fn replicas_keep_the_flag_and_a_promoted_replica_ends_bound_holds() {
    let master = Server::start();
    let replica = Server::start();
    replica.make_replica_of(&master);
    let mut m = master.conn();
    int(&mut m, &["DLOCK.ACQUIRE", "bound", "b", "BIND", "PX", LONG]);
    int(&mut m, &["DLOCK.ACQUIRE", "kept", "k", "PX", LONG]);
    wait_replica_synced(&master, &replica);
    let mut r = replica.conn();
    assert_eq!(info_norm(&mut r, "bound"), info_norm(&mut m, "bound"));
    assert_eq!(owners(&mut r, "bound"), ["b"]);
    // The master keeps the hold while its connection lives; the promoted
    // replica has no such connection and ends it.
    ok(&mut r, &["REPLICAOF", "NO", "ONE"]);
    assert!(
        wait_until(Duration::from_secs(10), || owners(&mut r, "bound")
            .is_empty()),
        "promotion ends bound holds"
    );
    assert_eq!(owners(&mut r, "kept"), ["k"]);
    assert_eq!(owners(&mut m, "bound"), ["b"]);
}

#[test]
fn a_bound_end_reaches_the_replica_as_an_effect() {
    let master = Server::start();
    let replica = Server::start();
    replica.make_replica_of(&master);
    let mut m = master.conn();
    {
        let mut c = master.conn();
        int(&mut c, &["DLOCK.ACQUIRE", "bound", "b", "BIND", "PX", LONG]);
        int(&mut c, &["DLOCK.ACQUIRE", "bound", "b", "PX", LONG]);
    }
    assert!(wait_until(Duration::from_secs(10), || owners(
        &mut m, "bound"
    )
    .is_empty()));
    wait_replica_synced(&master, &replica);
    let mut r = replica.conn();
    assert!(owners(&mut r, "bound").is_empty());
}

#[test]
fn bind_bad_input() {
    let server = Server::start();
    let mut c = server.conn();
    let e = expect_err(cmd_str(
        &mut c,
        &["DLOCK.ACQUIRE", "k", "o", "BIND", "BIND"],
    ));
    assert!(e.contains("BIND was given more than once"), "{e}");
    let e = expect_err(cmd_str(
        &mut c,
        &["DLOCK.SEMACQUIRE", "k", "o", "LIMIT", "2", "BIND", "bind"],
    ));
    assert!(e.contains("BIND was given more than once"), "{e}");
    let e = expect_err(cmd_str(&mut c, &["DLOCK.RENEW", "k", "o", "BIND"]));
    assert!(e.contains("unknown option"), "{e}");
    assert!(owners(&mut c, "k").is_empty());
}

#[test]
fn a_long_lived_connection_binding_many_keys_keeps_only_live_ones() {
    let server = Server::start();
    let mut c = server.conn();
    for i in 0..500 {
        let key = format!("many{i}");
        int(&mut c, &["DLOCK.ACQUIRE", &key, "o", "BIND", "PX", LONG]);
        assert_eq!(int(&mut c, &["DLOCK.RELEASE", &key, "o"]), 1);
    }
    int(&mut c, &["DLOCK.ACQUIRE", "kept", "o", "BIND", "PX", LONG]);
    let mut admin = server.conn();
    assert!(
        wait_until(Duration::from_secs(10), || stat(
            &mut admin,
            "dlock_bound_keys"
        ) <= 40),
        "noted keys grow with released holds: {}",
        stat(&mut admin, "dlock_bound_keys")
    );
    assert_eq!(stat(&mut admin, "dlock_bound_connections"), 1);
    drop(c);
    assert!(wait_until(Duration::from_secs(10), || owners(
        &mut admin, "kept"
    )
    .is_empty()));
    assert_eq!(stat(&mut admin, "dlock_bound_keys"), 0);
}

/// Acquires `key` for `owner` with BIND on a new connection of `s` (in db
/// `db`) and returns that connection.
fn bound_holder(s: &Server, db: i64, key: &str, owner: &str) -> redis::Connection {
    let mut a = s.conn();
    ok(&mut a, &["SELECT", &db.to_string()]);
    assert!(
        int(
            &mut a,
            &["DLOCK.ACQUIRE", key, owner, "PX", "3600000", "BIND"]
        ) > 0
    );
    a
}

/// Owners holding `key` in `db`, seen from `c` (which stays in db 0).
fn owners_in(c: &mut redis::Connection, db: i64, key: &str) -> Vec<String> {
    ok(c, &["SELECT", &db.to_string()]);
    let o = owners(c, key);
    ok(c, &["SELECT", "0"]);
    o
}

fn gone_within(c: &mut redis::Connection, db: i64, key: &str) -> bool {
    wait_until(Duration::from_secs(20), || owners_in(c, db, key).is_empty())
}

#[test]
fn a_bound_hold_follows_its_key_through_rename_and_move() {
    let s = Server::start();
    let mut c = s.conn();
    // RENAME: the hold goes on at the new name while its connection lives,
    // and ends there when it closes.
    let a = bound_holder(&s, 0, "k", "a");
    ok(&mut c, &["RENAME", "k", "k2"]);
    thread::sleep(Duration::from_millis(100));
    assert_eq!(owners_in(&mut c, 0, "k2"), ["a"]);
    drop(a);
    assert!(gone_within(&mut c, 0, "k2"), "{:?}", info_raw(&mut c, "k2"));
    // MOVE to another db, then RENAME there.
    let b = bound_holder(&s, 0, "m", "b");
    assert_eq!(int(&mut c, &["MOVE", "m", "1"]), 1);
    ok(&mut c, &["SELECT", "1"]);
    ok(&mut c, &["RENAME", "m", "m2"]);
    ok(&mut c, &["SELECT", "0"]);
    thread::sleep(Duration::from_millis(100));
    assert_eq!(owners_in(&mut c, 1, "m2"), ["b"]);
    drop(b);
    assert!(gone_within(&mut c, 1, "m2"));
    // MOVE alone.
    let d = bound_holder(&s, 0, "mv", "d");
    assert_eq!(int(&mut c, &["MOVE", "mv", "2"]), 1);
    thread::sleep(Duration::from_millis(100));
    assert_eq!(owners_in(&mut c, 2, "mv"), ["d"]);
    drop(d);
    assert!(gone_within(&mut c, 2, "mv"));
    assert_eq!(stat(&mut c, "dlock_bound_ends"), 3);
}

#[test]
fn a_bound_hold_follows_its_key_through_swapdb() {
    let s = Server::start();
    let mut c = s.conn();
    let a = bound_holder(&s, 0, "k", "a");
    ok(&mut c, &["SWAPDB", "0", "1"]);
    thread::sleep(Duration::from_millis(100));
    assert_eq!(owners_in(&mut c, 1, "k"), ["a"]);
    drop(a);
    assert!(
        gone_within(&mut c, 1, "k"),
        "{:?}",
        owners_in(&mut c, 1, "k")
    );
}

#[test]
fn copy_is_refused_and_a_restored_copy_of_a_bound_hold_ends_there() {
    let s = Server::start();
    let mut c = s.conn();
    let a = bound_holder(&s, 0, "k", "a");
    // COPY of a lock is refused by the server (no copy of a bound hold).
    let e = expect_err(cmd_str(&mut c, &["COPY", "k", "k3"]));
    assert!(e.contains("not supported"), "{e}");
    assert_eq!(int(&mut c, &["EXISTS", "k3"]), 0);
    // RESTORE (as MIGRATE does): the received hold was bound to a
    // connection of the server that dumped it: it ends here at once.
    let dump = match cmd_str(&mut c, &["DUMP", "k"]).expect("DUMP") {
        Value::BulkString(b) => b,
        other => panic!("DUMP: {other:?}"),
    };
    cmd_raw(&mut c, &[b"RESTORE", b"k4", b"0", &dump]).expect("RESTORE");
    assert!(gone_within(&mut c, 0, "k4"), "{:?}", info_raw(&mut c, "k4"));
    // The original stays with its live connection.
    assert_eq!(owners(&mut c, "k"), ["a"]);
    drop(a);
    assert!(gone_within(&mut c, 0, "k"));
}

#[test]
fn a_rename_right_after_the_connection_closed_still_ends_the_hold() {
    let s = Server::start();
    let mut c = s.conn();
    let mut a = bound_holder(&s, 0, "k", "a");
    let id = client_id(&mut a).to_string();
    // In one transaction: the connection is killed (its unbind job looks at
    // `k`), then the key is renamed before that job runs.
    ok(&mut c, &["MULTI"]);
    let _ = cmd_str(&mut c, &["CLIENT", "KILL", "ID", &id]);
    let _ = cmd_str(&mut c, &["RENAME", "k", "k2"]);
    let replies = ok(&mut c, &["EXEC"]);
    assert_eq!(
        replies,
        Value::Array(vec![Value::Int(1), Value::Okay]),
        "{replies:?}"
    );
    assert!(gone_within(&mut c, 0, "k2"), "{:?}", info_raw(&mut c, "k2"));
}

/// Issue 44, item 2 (SPEC: "no command the server runs after the CLIENT
/// KILL sees the hold"): in one pipeline after `CLIENT KILL` of a bound
/// holder, before the job that removes the hold has run, CHECK answers 0,
/// FENCED refuses the dead holder's write and a new acquire is granted (it
/// answered `:1 :1 +OK $-1` and the write landed). With a lock-delay the
/// hold ends into its delay: still no token, and the delay excludes.
#[test]
fn a_killed_bound_holders_token_is_dead_for_the_next_command() {
    let mut s = Server::start();
    let mut admin = s.conn();
    for (n, (key, delay)) in [("plain", "0"), ("delayed", "60000")]
        .into_iter()
        .enumerate()
    {
        let data = format!("{key}:data");
        let mut holder = s.conn();
        let t = int(
            &mut holder,
            &[
                "DLOCK.ACQUIRE",
                key,
                "a",
                "PX",
                LONG,
                "BIND",
                "LOCKDELAY",
                delay,
            ],
        )
        .to_string();
        let id = client_id(&mut holder).to_string();
        let mut b = RawConn::new(&s, Duration::from_secs(10));
        b.send(&["CLIENT", "KILL", "ID", &id]);
        b.send(&["DLOCK.CHECK", key, &t]);
        b.send(&["DLOCK.FENCED", key, &t, "SET", &data, "late"]);
        b.send(&["DLOCK.ACQUIRE", key, "b", "PX", LONG]);
        let replies: Vec<String> = (0..4).map(|_| b.reply()).collect();
        assert_eq!(replies[0], ":1", "{key}: {replies:?}");
        assert_eq!(
            replies[1], ":0",
            "{key}: CHECK of the dead holder's token: {replies:?}"
        );
        assert!(
            replies[2].starts_with("-FENCED"),
            "{key}: FENCED ran the dead holder's write: {replies:?}"
        );
        assert_eq!(
            int(&mut admin, &["EXISTS", &data]),
            0,
            "{key}: the dead holder's write landed"
        );
        if delay == "0" {
            assert!(
                replies[3].starts_with(':'),
                "{key}: acquire refused: {replies:?}"
            );
            assert_eq!(owners(&mut admin, key), ["b"]);
        } else {
            // The delay keeps excluding, as the hold did.
            assert_eq!(replies[3], "nil", "{key}: {replies:?}");
            let info = info_raw(&mut admin, key);
            let h = &holders(&info)[0];
            assert_eq!(as_bytes(field(h, "delayed")), b"disconnected", "{info:?}");
        }
        // Ended once, by whichever came first: the acquire or the job.
        let ended = wait_until(Duration::from_secs(10), || {
            stat(&mut admin, "dlock_bound_ends") == n as i64 + 1
                && stat(&mut admin, "dlock_bound_connections") == 0
        });
        assert!(
            ended,
            "{key}: bound ends {}",
            stat(&mut admin, "dlock_bound_ends")
        );
    }
    s.assert_alive();
}

/// SWAPDB between a bound holder's close and the job that ends its holds
/// (one pipeline: the job runs at the next turn of the event loop): the job
/// ends the hold in the db its lock went to. Before, it looked in the old
/// db and the hold stayed in the lock until its lease ended — the saved
/// value and the replica kept it (found by the simulator: finding E).
#[test]
fn swapdb_before_the_unbind_job_still_ends_the_bound_hold() {
    let mut s = Server::start();
    let mut admin = s.conn();
    let mut holder = s.conn();
    let t = int(
        &mut holder,
        &["DLOCK.ACQUIRE", "swapped", "a", "PX", LONG, "BIND"],
    );
    assert!(t > 0);
    let id = client_id(&mut holder).to_string();
    let ends = stat(&mut admin, "dlock_bound_ends");
    let mut b = RawConn::new(&s, Duration::from_secs(10));
    b.send(&["CLIENT", "KILL", "ID", &id]);
    b.send(&["SWAPDB", "0", "1"]);
    let replies: Vec<String> = (0..2).map(|_| b.reply()).collect();
    assert_eq!(replies, [":1", "+OK"], "{replies:?}");
    let ended = wait_until(Duration::from_secs(10), || {
        stat(&mut admin, "dlock_bound_ends") == ends + 1
    });
    assert!(ended, "the bound hold was never ended by its job");
    ok(&mut admin, &["SELECT", "1"]);
    // The hold's end left nothing at the key: no hold, no lock value.
    assert_eq!(
        int(&mut admin, &["EXISTS", "swapped"]),
        0,
        "the killed holder's hold stayed in the swapped lock: {:?}",
        info_raw(&mut admin, "swapped")
    );
    s.assert_alive();
}
