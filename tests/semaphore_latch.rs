//! DLOCK.SEMACQUIRE and the latch commands (LATCHSET, COUNTDOWN, AWAIT) on
//! real servers: grants, strict FIFO with head-of-line, RELEASE PERMITS,
//! INFO fields, kind errors both ways, notifications, waiting and its end
//! (timeout, disconnect, MULTI), deny-oom, and everything a lock has —
//! RDB, AOF (with and without preamble, after BGREWRITEAOF), DUMP/RESTORE,
//! MEMORY USAGE, DEBUG DIGEST, deterministic replication (a replica's INFO
//! equals its master's after each step) and waiters dropped on restart and
//! promotion. Cluster slot migration is in `sem_latch_cluster.rs`.

mod common;
use common::*;

use std::thread;
use std::time::Duration;

use redis::Value;

const LONG: &str = "600000";

fn reply(con: &mut redis::Connection, args: &[&str]) -> Value {
    cmd_str(con, args).unwrap_or_else(|e| panic!("{args:?}: {}", err_string(&e)))
}

fn int(con: &mut redis::Connection, args: &[&str]) -> i64 {
    match reply(con, args) {
        Value::Int(i) => i,
        other => panic!("{args:?}: unexpected reply {other:?}"),
    }
}

/// A token, or None for nil.
fn token(con: &mut redis::Connection, args: &[&str]) -> Option<i64> {
    match reply(con, args) {
        Value::Int(t) => Some(t),
        Value::Nil => None,
        other => panic!("{args:?}: unexpected reply {other:?}"),
    }
}

fn ok(con: &mut redis::Connection, args: &[&str]) {
    match reply(con, args) {
        Value::Okay => {}
        Value::SimpleString(s) if s == "OK" => {}
        other => panic!("{args:?}: unexpected reply {other:?}"),
    }
}

/// Runs `args` on a new connection in a thread.
fn spawn(s: &Server, args: &[&str]) -> thread::JoinHandle<redis::RedisResult<Value>> {
    let mut c = s.conn();
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    thread::spawn(move || {
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        cmd_str(&mut c, &refs)
    })
}

/// Waits until `key` has `n` blocked waiters.
fn wait_waiters(s: &Server, key: &str, n: usize) {
    let mut con = s.conn();
    let seen = wait_until(Duration::from_secs(10), || {
        let v = info_raw(&mut con, key);
        v != Value::Nil
            && waiters(&v)
                .iter()
                .filter(|w| as_bytes(field(w, "state")) == b"blocked")
                .count()
                == n
    });
    assert!(
        seen,
        "{key} never had {n} blocked waiters: {:?}",
        info_raw(&mut con, key)
    );
}

/// A blocked SEMACQUIRE of `owner` for `k` permits, seen in the queue.
fn sem_waiter(
    s: &Server,
    key: &str,
    owner: &str,
    k: &str,
    queued_before: usize,
) -> thread::JoinHandle<redis::RedisResult<Value>> {
    let h = spawn(
        s,
        &[
            "DLOCK.SEMACQUIRE",
            key,
            owner,
            "LIMIT",
            "3",
            "PERMITS",
            k,
            "PX",
            LONG,
            "WAIT",
            "20000",
        ],
    );
    wait_waiters(s, key, queued_before + 1);
    h
}

fn done(h: thread::JoinHandle<redis::RedisResult<Value>>) -> Value {
    h.join()
        .expect("thread")
        .unwrap_or_else(|e| panic!("waiter failed: {}", err_string(&e)))
}

fn finished(h: &thread::JoinHandle<redis::RedisResult<Value>>) -> bool {
    // Give the server a moment to (wrongly) answer.
    thread::sleep(Duration::from_millis(100));
    h.is_finished()
}

fn holder_permits(info: &Value) -> Vec<(String, i64)> {
    holders(info)
        .iter()
        .map(|h| {
            (
                String::from_utf8_lossy(as_bytes(field(h, "owner"))).into_owned(),
                as_int(field(h, "permits")),
            )
        })
        .collect()
}

// ---------------------------------------------------------------------------
// Semaphore
// ---------------------------------------------------------------------------

#[test]
fn semaphore_grants_permits_with_tokens_limit_and_info() {
    let s = Server::start();
    let mut c = s.conn();
    let ta = token(
        &mut c,
        &[
            "DLOCK.SEMACQUIRE",
            "s",
            "a",
            "LIMIT",
            "3",
            "PERMITS",
            "2",
            "PX",
            LONG,
        ],
    )
    .unwrap();
    let tb = token(&mut c, &["dlock.semacquire", "s", "b", "limit", "3"]).unwrap();
    assert!(tb > ta, "tokens increase");
    // Full: nil, nothing changes.
    assert_eq!(
        token(&mut c, &["DLOCK.SEMACQUIRE", "s", "c", "LIMIT", "3"]),
        None
    );
    // Another limit: an error naming the limit in force, nothing changes.
    let before = info_norm(&mut c, "s");
    let e = err(&mut c, &["DLOCK.SEMACQUIRE", "s", "c", "LIMIT", "5"]);
    assert!(e.starts_with("ERR") && e.contains("limit is 3"), "{e}");
    let e = err(
        &mut c,
        &["DLOCK.SEMACQUIRE", "s", "c", "LIMIT", "3", "PERMITS", "4"],
    );
    assert!(e.starts_with("ERR PERMITS") && e.contains("(3)"), "{e}");
    assert_eq!(info_norm(&mut c, "s"), before);
    // INFO: kind, limit, available, permits per holder.
    let info = info_raw(&mut c, "s");
    assert_eq!(as_bytes(field(&info, "kind")), b"semaphore");
    assert_eq!(as_int(field(&info, "limit")), 3);
    assert_eq!(as_int(field(&info, "available")), 0);
    assert_eq!(as_int(field(&info, "token")), tb);
    assert_eq!(
        holder_permits(&info),
        vec![("a".into(), 2), ("b".into(), 1)]
    );
    assert_eq!(as_bytes(field(&holders(&info)[0], "mode")), b"permit");
    // Release k: an error when fewer are held, nothing changes.
    let e = err(&mut c, &["DLOCK.RELEASE", "s", "b", "PERMITS", "2"]);
    assert!(e.starts_with("ERR the owner holds 1 permit"), "{e}");
    assert_eq!(info_norm(&mut c, "s"), before);
    assert!(err(&mut c, &["DLOCK.RELEASE", "s", "zz"]).starts_with("NOTHELD"));
    assert_eq!(int(&mut c, &["DLOCK.RELEASE", "s", "a", "PERMITS", "1"]), 0);
    // Asking again adds permits and keeps the first token.
    let ta2 = token(
        &mut c,
        &["DLOCK.SEMACQUIRE", "s", "a", "LIMIT", "3", "PX", LONG],
    )
    .unwrap();
    assert_eq!(ta2, ta);
    assert_eq!(
        holder_permits(&info_raw(&mut c, "s")),
        vec![("a".into(), 2), ("b".into(), 1)]
    );
    // RELEASE without PERMITS gives one back; 1 when the hold is gone.
    assert_eq!(int(&mut c, &["DLOCK.RELEASE", "s", "b"]), 1);
    assert_eq!(as_int(field(&info_raw(&mut c, "s"), "available")), 1);
    assert_eq!(int(&mut c, &["DLOCK.RENEW", "s", "a", "PX", "900000"]), 1);
    assert_eq!(int(&mut c, &["DLOCK.RENEW", "s", "b"]), 0);
    assert!(err(&mut c, &["DLOCK.RELEASE", "s", "a", "READ"])
        .starts_with("ERR READ|WRITE applies only"));
    // Kind errors both ways.
    assert!(err(&mut c, &["DLOCK.ACQUIRE", "s", "x"])
        .starts_with("WRONGKIND the key holds a semaphore"));
    token(&mut c, &["DLOCK.ACQUIRE", "m", "x"]).unwrap();
    assert!(err(&mut c, &["DLOCK.SEMACQUIRE", "m", "x", "LIMIT", "2"])
        .starts_with("WRONGKIND the key holds a mutex"));
    assert!(err(&mut c, &["DLOCK.RELEASE", "m", "x", "PERMITS", "1"])
        .starts_with("ERR PERMITS applies only to semaphores"));
    ok(&mut c, &["SET", "str", "v"]);
    assert!(err(&mut c, &["DLOCK.SEMACQUIRE", "str", "x", "LIMIT", "2"]).starts_with("WRONGTYPE"));
    // The last release removes the key.
    assert_eq!(int(&mut c, &["DLOCK.RELEASE", "s", "a", "PERMITS", "2"]), 1);
    assert_eq!(info_raw(&mut c, "s"), Value::Nil);
    assert_eq!(int(&mut c, &["EXISTS", "s"]), 0);
    // Commands are registered in lower case, key specs name the key.
    let keys = reply(
        &mut c,
        &[
            "COMMAND",
            "GETKEYS",
            "DLOCK.SEMACQUIRE",
            "k1",
            "o",
            "LIMIT",
            "2",
        ],
    );
    assert_eq!(keys, Value::Array(vec![Value::BulkString(b"k1".to_vec())]));
    for cmd in ["DLOCK.LATCHSET", "DLOCK.COUNTDOWN", "DLOCK.AWAIT"] {
        let args: &[&str] = match cmd {
            "DLOCK.LATCHSET" => &["COMMAND", "GETKEYS", cmd, "k2", "3"],
            _ => &["COMMAND", "GETKEYS", cmd, "k2"],
        };
        assert_eq!(
            reply(&mut c, args),
            Value::Array(vec![Value::BulkString(b"k2".to_vec())])
        );
    }
}

#[test]
fn semaphore_is_strict_fifo_and_never_starves_a_large_request() {
    let s = Server::start();
    let mut c = s.conn();
    token(
        &mut c,
        &[
            "DLOCK.SEMACQUIRE",
            "s",
            "a",
            "LIMIT",
            "3",
            "PERMITS",
            "2",
            "PX",
            LONG,
        ],
    )
    .unwrap();
    let b = sem_waiter(&s, "s", "b", "3", 0);
    let cw = sem_waiter(&s, "s", "c", "1", 1);
    // One permit is free, but b (3) is ahead: c and newcomers wait.
    assert_eq!(
        token(&mut c, &["DLOCK.SEMACQUIRE", "s", "d", "LIMIT", "3"]),
        None
    );
    assert!(!finished(&cw));
    assert_eq!(int(&mut c, &["DLOCK.RELEASE", "s", "a", "PERMITS", "1"]), 0);
    assert!(
        !finished(&b) && !finished(&cw),
        "2 free permits fit neither b (3) nor c behind b"
    );
    let info = info_raw(&mut c, "s");
    let ws: Vec<(Vec<u8>, i64)> = waiters(&info)
        .iter()
        .map(|w| {
            (
                as_bytes(field(w, "owner")).to_vec(),
                as_int(field(w, "permits")),
            )
        })
        .collect();
    assert_eq!(ws, vec![(b"b".to_vec(), 3), (b"c".to_vec(), 1)]);
    assert_eq!(int(&mut c, &["DLOCK.RELEASE", "s", "a"]), 1);
    let tb = done(b);
    assert!(matches!(tb, Value::Int(_)), "{tb:?}");
    assert!(!finished(&cw), "c waits while b holds all 3");
    assert_eq!(int(&mut c, &["DLOCK.RELEASE", "s", "b", "PERMITS", "3"]), 1);
    let tc = done(cw);
    match (tb, tc) {
        (Value::Int(x), Value::Int(y)) => assert!(y > x),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        holder_permits(&info_raw(&mut c, "s")),
        vec![("c".into(), 1)]
    );
}

#[test]
fn one_release_serves_every_waiter_that_fits_in_order() {
    let s = Server::start();
    let mut c = s.conn();
    token(
        &mut c,
        &[
            "DLOCK.SEMACQUIRE",
            "s",
            "a",
            "LIMIT",
            "3",
            "PERMITS",
            "3",
            "PX",
            LONG,
        ],
    )
    .unwrap();
    let w1 = sem_waiter(&s, "s", "w1", "1", 0);
    let w2 = sem_waiter(&s, "s", "w2", "2", 1);
    let w3 = sem_waiter(&s, "s", "w3", "1", 2);
    assert_eq!(int(&mut c, &["DLOCK.RELEASE", "s", "a", "PERMITS", "3"]), 1);
    let t1 = done(w1);
    let t2 = done(w2);
    assert!(
        matches!((&t1, &t2), (Value::Int(x), Value::Int(y)) if y > x),
        "{t1:?} {t2:?}"
    );
    assert!(!finished(&w3), "w3 does not fit while w1 and w2 hold 3");
    assert_eq!(int(&mut c, &["DLOCK.RELEASE", "s", "w1"]), 1);
    assert!(matches!(done(w3), Value::Int(_)));
    let info = info_raw(&mut c, "s");
    assert_eq!(as_int(field(&info, "available")), 0);
    assert!(waiters(&info).is_empty());
}

#[test]
fn waiters_of_a_deleted_semaphore_get_a_new_one_with_their_limit() {
    let s = Server::start();
    let mut c = s.conn();
    token(
        &mut c,
        &[
            "DLOCK.SEMACQUIRE",
            "s",
            "a",
            "LIMIT",
            "3",
            "PERMITS",
            "3",
            "PX",
            LONG,
        ],
    )
    .unwrap();
    let w1 = sem_waiter(&s, "s", "w1", "2", 0);
    let w2 = sem_waiter(&s, "s", "w2", "1", 1);
    let mut sub = Subscriber::new(&s, b"dlock:{s}");
    assert_eq!(int(&mut c, &["DEL", "s"]), 1);
    assert_eq!(sub.expect_message(Duration::from_secs(5)).1, b"deleted");
    assert!(matches!(done(w1), Value::Int(_)));
    assert!(matches!(done(w2), Value::Int(_)));
    let info = info_raw(&mut c, "s");
    assert_eq!(as_int(field(&info, "limit")), 3);
    assert_eq!(
        holder_permits(&info),
        vec![("w1".into(), 2), ("w2".into(), 1)]
    );
    // FLUSHDB: the same.
    let w3 = sem_waiter(&s, "s", "w3", "3", 0);
    ok(&mut c, &["FLUSHDB"]);
    assert!(matches!(done(w3), Value::Int(_)));
    assert_eq!(as_int(field(&info_raw(&mut c, "s"), "limit")), 3);
}

#[test]
fn semaphore_waits_end_by_timeout_disconnect_and_multi() {
    let s = Server::start();
    let mut c = s.conn();
    token(
        &mut c,
        &["DLOCK.SEMACQUIRE", "s", "a", "LIMIT", "1", "PX", LONG],
    )
    .unwrap();
    // Timeout: nil, no place left.
    let t = reply(
        &mut c,
        &["DLOCK.SEMACQUIRE", "s", "b", "LIMIT", "1", "WAIT", "50"],
    );
    assert_eq!(t, Value::Nil);
    assert!(waiters(&info_raw(&mut c, "s")).is_empty());
    // A closed connection leaves the queue.
    let mut victim = s.conn();
    let id = int(&mut victim, &["CLIENT", "ID"]);
    let h = thread::spawn(move || {
        cmd_str(
            &mut victim,
            &["DLOCK.SEMACQUIRE", "s", "v", "LIMIT", "1", "WAIT", "30000"],
        )
    });
    wait_waiters(&s, "s", 1);
    int(&mut c, &["CLIENT", "KILL", "ID", &id.to_string()]);
    let _ = h.join();
    let gone = wait_until(Duration::from_secs(5), || {
        waiters(&info_raw(&mut c, "s")).is_empty()
    });
    assert!(gone, "{:?}", info_raw(&mut c, "s"));
    // MULTI: WAIT acts as 0.
    ok(&mut c, &["MULTI"]);
    reply(
        &mut c,
        &["DLOCK.SEMACQUIRE", "s", "m", "LIMIT", "1", "WAIT", "10000"],
    );
    let r = reply(&mut c, &["EXEC"]);
    assert_eq!(r, Value::Array(vec![Value::Nil]));
}

#[test]
fn semaphore_notifications_and_expiry_handoff() {
    let s = Server::start();
    let mut c = s.conn();
    let mut sub = Subscriber::new(&s, b"dlock:{s}");
    token(
        &mut c,
        &[
            "DLOCK.SEMACQUIRE",
            "s",
            "a",
            "LIMIT",
            "2",
            "PERMITS",
            "2",
            "PX",
            LONG,
        ],
    )
    .unwrap();
    // Every release of permits publishes `released`, partial ones too.
    assert_eq!(int(&mut c, &["DLOCK.RELEASE", "s", "a"]), 0);
    assert_eq!(sub.expect_message(Duration::from_secs(5)).1, b"released");
    assert_eq!(int(&mut c, &["DLOCK.RELEASE", "s", "a"]), 1);
    assert_eq!(sub.expect_message(Duration::from_secs(5)).1, b"released");
    // Expiry: the module's timer ends the lease, serves the waiter, publishes.
    token(
        &mut c,
        &["DLOCK.SEMACQUIRE", "s", "b", "LIMIT", "2", "PX", "150"],
    )
    .unwrap();
    let w = sem_waiter_limit2(&s);
    assert!(matches!(done(w), Value::Int(_)));
    assert_eq!(sub.expect_message(Duration::from_secs(5)).1, b"expired");
    assert_eq!(int(&mut c, &["DLOCK.FORCERELEASE", "s"]), 1);
    assert_eq!(sub.expect_message(Duration::from_secs(5)).1, b"released");
    assert_eq!(info_raw(&mut c, "s"), Value::Nil);
}

fn sem_waiter_limit2(s: &Server) -> thread::JoinHandle<redis::RedisResult<Value>> {
    let h = spawn(
        s,
        &[
            "DLOCK.SEMACQUIRE",
            "s",
            "w",
            "LIMIT",
            "2",
            "PERMITS",
            "2",
            "WAIT",
            "10000",
        ],
    );
    wait_waiters(s, "s", 1);
    h
}

#[test]
fn semaphore_and_latchset_are_deny_oom_the_rest_always_works() {
    let s = Server::start();
    let mut c = s.conn();
    token(
        &mut c,
        &["DLOCK.SEMACQUIRE", "s", "a", "LIMIT", "2", "PX", LONG],
    )
    .unwrap();
    assert_eq!(int(&mut c, &["DLOCK.LATCHSET", "l", "2"]), 1);
    ok(&mut c, &["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
    ok(&mut c, &["CONFIG", "SET", "maxmemory", "1"]);
    for args in [
        &["DLOCK.SEMACQUIRE", "s", "b", "LIMIT", "2"][..],
        &["DLOCK.SEMACQUIRE", "new", "b", "LIMIT", "2"],
        &["DLOCK.LATCHSET", "l2", "2"],
        &["DLOCK.LATCHSET", "l", "2"],
    ] {
        assert!(err(&mut c, args).starts_with("OOM"), "{args:?}");
    }
    assert_eq!(reply(&mut c, &["DLOCK.AWAIT", "l"]), Value::Nil);
    assert_eq!(int(&mut c, &["DLOCK.COUNTDOWN", "l"]), 1);
    assert_eq!(int(&mut c, &["DLOCK.RENEW", "s", "a"]), 1);
    assert_eq!(int(&mut c, &["DLOCK.RELEASE", "s", "a"]), 1);
    assert_eq!(int(&mut c, &["DLOCK.FORCERELEASE", "l"]), 1);
    assert_eq!(int(&mut c, &["DBSIZE"]), 0);
    ok(&mut c, &["CONFIG", "SET", "maxmemory", "0"]);
}

// ---------------------------------------------------------------------------
// Latch
// ---------------------------------------------------------------------------

fn awaiter(
    s: &Server,
    key: &str,
    n_before: usize,
) -> thread::JoinHandle<redis::RedisResult<Value>> {
    let h = spawn(s, &["DLOCK.AWAIT", key, "WAIT", "20000"]);
    wait_waiters(s, key, n_before + 1);
    h
}

#[test]
fn latch_counts_down_opens_once_and_answers_every_waiter() {
    let s = Server::start();
    let mut c = s.conn();
    let mut sub = Subscriber::new(&s, b"dlock:{l}");
    assert_eq!(int(&mut c, &["DLOCK.AWAIT", "l"]), 1, "no latch: open");
    assert_eq!(int(&mut c, &["DLOCK.COUNTDOWN", "l"]), 0, "no latch: 0");
    assert_eq!(int(&mut c, &["DLOCK.LATCHSET", "l", "3"]), 1);
    assert_eq!(int(&mut c, &["DLOCK.LATCHSET", "l", "9"]), 0);
    assert_eq!(reply(&mut c, &["DLOCK.AWAIT", "l"]), Value::Nil);
    assert_eq!(
        reply(&mut c, &["DLOCK.AWAIT", "l", "WAIT", "30"]),
        Value::Nil
    );
    let a = awaiter(&s, "l", 0);
    let b = awaiter(&s, "l", 1);
    let info = info_raw(&mut c, "l");
    assert_eq!(as_bytes(field(&info, "kind")), b"latch");
    assert_eq!(as_int(field(&info, "count")), 3);
    assert_eq!(waiters(&info).len(), 2);
    assert_eq!(as_bytes(field(&waiters(&info)[0], "mode")), b"await");
    assert_eq!(int(&mut c, &["DLOCK.COUNTDOWN", "l"]), 2);
    assert_eq!(int(&mut c, &["DLOCK.COUNTDOWN", "l"]), 1);
    assert!(!finished(&a));
    sub.expect_none(Duration::from_millis(50));
    assert_eq!(int(&mut c, &["DLOCK.COUNTDOWN", "l"]), 0);
    assert_eq!(done(a), Value::Int(1));
    assert_eq!(done(b), Value::Int(1));
    assert_eq!(sub.expect_message(Duration::from_secs(5)).1, b"released");
    sub.expect_none(Duration::from_millis(100));
    assert_eq!(int(&mut c, &["EXISTS", "l"]), 0);
    assert_eq!(int(&mut c, &["DLOCK.AWAIT", "l"]), 1);
    assert_eq!(int(&mut c, &["DLOCK.COUNTDOWN", "l"]), 0);
    let stats = s.info("dlock");
    assert!(stats.contains("dlock_latches_opened:1"), "{stats}");
    // Kind errors both ways.
    assert_eq!(int(&mut c, &["DLOCK.LATCHSET", "l", "1"]), 1);
    for args in [
        &["DLOCK.ACQUIRE", "l", "x"][..],
        &["DLOCK.RELEASE", "l", "x"],
        &["DLOCK.RENEW", "l", "x"],
        &["DLOCK.SEMACQUIRE", "l", "x", "LIMIT", "1"],
    ] {
        assert!(
            err(&mut c, args).starts_with("WRONGKIND the key holds a latch"),
            "{args:?}"
        );
    }
    token(&mut c, &["DLOCK.ACQUIRE", "m", "x"]).unwrap();
    for args in [
        &["DLOCK.LATCHSET", "m", "1"][..],
        &["DLOCK.COUNTDOWN", "m"],
        &["DLOCK.AWAIT", "m"],
    ] {
        assert!(
            err(&mut c, args).starts_with("WRONGKIND the key holds a mutex"),
            "{args:?}"
        );
    }
}

#[test]
fn latch_waits_end_by_timeout_and_disconnect_and_multi() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(int(&mut c, &["DLOCK.LATCHSET", "l", "2"]), 1);
    let t = spawn(&s, &["DLOCK.AWAIT", "l", "WAIT", "100"]);
    assert_eq!(done(t), Value::Nil);
    assert!(waiters(&info_raw(&mut c, "l")).is_empty());
    let mut victim = s.conn();
    let id = int(&mut victim, &["CLIENT", "ID"]);
    let h = thread::spawn(move || cmd_str(&mut victim, &["DLOCK.AWAIT", "l", "WAIT", "30000"]));
    wait_waiters(&s, "l", 1);
    let info = info_raw(&mut c, "l");
    assert_eq!(
        as_bytes(field(&waiters(&info)[0], "owner")),
        id.to_string().as_bytes()
    );
    int(&mut c, &["CLIENT", "KILL", "ID", &id.to_string()]);
    let _ = h.join();
    let gone = wait_until(Duration::from_secs(5), || {
        waiters(&info_raw(&mut c, "l")).is_empty()
    });
    assert!(gone);
    // Short waits ending next to a long one: each answers nil (the module's
    // timer may drop a place at its deadline before Redis times the
    // connection out; that is not an opening), the long one stays.
    let long = awaiter(&s, "l", 0);
    let shorts: Vec<_> = (0..5)
        .map(|i| {
            spawn(
                &s,
                &["DLOCK.AWAIT", "l", "WAIT", &(150 + 20 * i).to_string()],
            )
        })
        .collect();
    for h in shorts {
        assert_eq!(done(h), Value::Nil);
    }
    assert!(!finished(&long));
    assert_eq!(waiters(&info_raw(&mut c, "l")).len(), 1);
    assert_eq!(int(&mut c, &["DLOCK.COUNTDOWN", "l"]), 1);
    assert_eq!(int(&mut c, &["DLOCK.COUNTDOWN", "l"]), 0);
    assert_eq!(done(long), Value::Int(1));
    assert_eq!(int(&mut c, &["DLOCK.LATCHSET", "l", "2"]), 1);
    ok(&mut c, &["MULTI"]);
    reply(&mut c, &["DLOCK.AWAIT", "l", "WAIT", "10000"]);
    reply(&mut c, &["DLOCK.COUNTDOWN", "l"]);
    assert_eq!(
        reply(&mut c, &["EXEC"]),
        Value::Array(vec![Value::Nil, Value::Int(1)])
    );
}

#[test]
fn a_latch_removed_any_way_answers_its_waiters() {
    let s = Server::start();
    let mut c = s.conn();
    let mut sub = Subscriber::new(&s, b"dlock:{l}");
    // FORCERELEASE opens it.
    assert_eq!(int(&mut c, &["DLOCK.LATCHSET", "l", "5"]), 1);
    let a = awaiter(&s, "l", 0);
    assert_eq!(int(&mut c, &["DLOCK.FORCERELEASE", "l"]), 1);
    assert_eq!(done(a), Value::Int(1));
    assert_eq!(sub.expect_message(Duration::from_secs(5)).1, b"released");
    assert_eq!(int(&mut c, &["EXISTS", "l"]), 0);
    // DEL: the latch no longer exists, so it is open.
    assert_eq!(int(&mut c, &["DLOCK.LATCHSET", "l", "5"]), 1);
    let a = awaiter(&s, "l", 0);
    assert_eq!(int(&mut c, &["DEL", "l"]), 1);
    assert_eq!(done(a), Value::Int(1));
    assert_eq!(sub.expect_message(Duration::from_secs(5)).1, b"deleted");
    // Opened from a script and from a transaction.
    assert_eq!(int(&mut c, &["DLOCK.LATCHSET", "l", "1"]), 1);
    let a = awaiter(&s, "l", 0);
    let r = reply(
        &mut c,
        &[
            "EVAL",
            "return redis.call('dlock.countdown', KEYS[1])",
            "1",
            "l",
        ],
    );
    assert_eq!(r, Value::Int(0));
    assert_eq!(done(a), Value::Int(1));
    assert_eq!(int(&mut c, &["DLOCK.LATCHSET", "l", "1"]), 1);
    let a = awaiter(&s, "l", 0);
    ok(&mut c, &["MULTI"]);
    reply(&mut c, &["DLOCK.COUNTDOWN", "l"]);
    reply(&mut c, &["DLOCK.AWAIT", "l", "WAIT", "1000"]);
    assert_eq!(
        reply(&mut c, &["EXEC"]),
        Value::Array(vec![Value::Int(0), Value::Int(1)])
    );
    assert_eq!(done(a), Value::Int(1));
    while sub.next_message(Duration::from_millis(100)).is_some() {}
    // FLUSHDB.
    assert_eq!(int(&mut c, &["DLOCK.LATCHSET", "l", "5"]), 1);
    let a = awaiter(&s, "l", 0);
    ok(&mut c, &["FLUSHDB"]);
    assert_eq!(done(a), Value::Int(1));
}

// ---------------------------------------------------------------------------
// Persistence
// ---------------------------------------------------------------------------

fn setup(c: &mut redis::Connection) {
    token(
        c,
        &[
            "DLOCK.SEMACQUIRE",
            "s",
            "a",
            "LIMIT",
            "5",
            "PERMITS",
            "3",
            "PX",
            LONG,
        ],
    )
    .unwrap();
    token(c, &["DLOCK.SEMACQUIRE", "s", "b", "LIMIT", "5", "PX", LONG]).unwrap();
    assert_eq!(int(c, &["DLOCK.LATCHSET", "l", "4"]), 1);
    assert_eq!(int(c, &["DLOCK.COUNTDOWN", "l"]), 3);
}

fn snapshot(c: &mut redis::Connection) -> Vec<Value> {
    ["s", "l"].iter().map(|k| info_norm(c, k)).collect()
}

fn check_after_reload(c: &mut redis::Connection) {
    // Tokens keep increasing, limits and counts are kept.
    let last = as_int(field(&info_raw(c, "s"), "token"));
    let t = token(c, &["DLOCK.SEMACQUIRE", "s", "c", "LIMIT", "5", "PX", LONG]).unwrap();
    assert!(t > last);
    assert!(err(c, &["DLOCK.SEMACQUIRE", "s", "d", "LIMIT", "4"]).contains("limit is 5"));
    assert_eq!(int(c, &["DLOCK.COUNTDOWN", "l"]), 2);
    // A partial release (replicated and appended verbatim) is kept too.
    assert_eq!(int(c, &["DLOCK.RELEASE", "s", "a", "PERMITS", "2"]), 0);
    assert_eq!(as_int(field(&info_raw(c, "s"), "available")), 2);
}

#[test]
fn rdb_restart_keeps_semaphores_and_latches_and_drops_waiters() {
    let mut s = Server::start();
    let mut c = s.conn();
    setup(&mut c);
    // Waiting connections cannot survive a restart.
    token(
        &mut c,
        &["DLOCK.SEMACQUIRE", "full", "a", "LIMIT", "1", "PX", LONG],
    )
    .unwrap();
    let w = spawn(
        &s,
        &[
            "DLOCK.SEMACQUIRE",
            "full",
            "w",
            "LIMIT",
            "1",
            "WAIT",
            "60000",
        ],
    );
    wait_waiters(&s, "full", 1);
    let aw = awaiter(&s, "l", 0);
    let before = snapshot(&mut c);
    drop(c);
    s.shutdown_save();
    assert!(w.join().expect("thread").is_err());
    assert!(aw.join().expect("thread").is_err());
    s.restart();
    let mut c = s.conn();
    let pruned = wait_until(Duration::from_secs(5), || {
        waiters(&info_raw(&mut c, "full")).is_empty() && waiters(&info_raw(&mut c, "l")).is_empty()
    });
    assert!(
        pruned,
        "{:?} {:?}",
        info_raw(&mut c, "full"),
        info_raw(&mut c, "l")
    );
    // Same state but the dropped AWAIT place.
    assert_eq!(info_norm(&mut c, "s"), before[0]);
    assert_eq!(as_int(field(&info_raw(&mut c, "l"), "count")), 3);
    check_after_reload(&mut c);
}

fn aof(preamble: &str) {
    let mut s = Server::start_with(ServerOpts::new().args([
        "--appendonly",
        "yes",
        "--appendfsync",
        "always",
        "--aof-use-rdb-preamble",
        preamble,
    ]));
    setup(&mut s.conn());
    let before = snapshot(&mut s.conn());
    s.restart();
    assert_eq!(snapshot(&mut s.conn()), before, "restart from AOF");
    let mut c = s.conn();
    let r = reply(&mut c, &["BGREWRITEAOF"]);
    assert!(
        matches!(&r, Value::SimpleString(t) if t.contains("rewriting")),
        "{r:?}"
    );
    let rewritten = wait_until(Duration::from_secs(30), || {
        let i = parse_info(&s.info("persistence"));
        i.get("aof_rewrite_in_progress").map(String::as_str) == Some("0")
            && i.get("aof_rewrite_scheduled").map(String::as_str) == Some("0")
    });
    assert!(rewritten);
    drop(c);
    s.restart();
    assert_eq!(snapshot(&mut s.conn()), before, "BGREWRITEAOF and restart");
    check_after_reload(&mut s.conn());
    let after = snapshot(&mut s.conn());
    s.restart();
    assert_eq!(snapshot(&mut s.conn()), after);
    // The latch opens after a restart: its key is gone for good.
    assert_eq!(int(&mut s.conn(), &["DLOCK.COUNTDOWN", "l"]), 1);
    assert_eq!(int(&mut s.conn(), &["DLOCK.COUNTDOWN", "l"]), 0);
    s.restart();
    assert_eq!(info_raw(&mut s.conn(), "l"), Value::Nil);
}

#[test]
fn aof_without_preamble_keeps_semaphores_and_latches() {
    aof("no");
}

#[test]
fn aof_with_preamble_keeps_semaphores_and_latches() {
    aof("yes");
}

#[test]
fn dump_restore_memory_usage_and_digest() {
    let a = Server::start();
    let b = Server::start();
    let mut ca = a.conn();
    let mut cb = b.conn();
    setup(&mut ca);
    for key in ["s", "l"] {
        let payload = match reply(&mut ca, &["DUMP", key]) {
            Value::BulkString(p) => p,
            other => panic!("{other:?}"),
        };
        let copy = format!("{key}-copy");
        cmd_raw(&mut ca, &[b"RESTORE", copy.as_bytes(), b"0", &payload]).expect("RESTORE here");
        cmd_raw(&mut cb, &[b"RESTORE", key.as_bytes(), b"0", &payload]).expect("RESTORE there");
        assert_eq!(info_norm(&mut ca, &copy), info_norm(&mut ca, key));
        assert_eq!(info_norm(&mut cb, key), info_norm(&mut ca, key));
        let mem = int(&mut ca, &["MEMORY", "USAGE", key]);
        assert!(mem > 0, "MEMORY USAGE {key} = {mem}");
        let da = reply(&mut ca, &["DEBUG", "DIGEST-VALUE", key]);
        let db = reply(&mut cb, &["DEBUG", "DIGEST-VALUE", key]);
        assert_eq!(da, db, "digest of {key}");
        assert_eq!(
            reply(&mut ca, &["TYPE", key]),
            Value::SimpleString("dlocklock".into())
        );
    }
    // The digest sees a change.
    let before = reply(&mut ca, &["DEBUG", "DIGEST-VALUE", "l"]);
    int(&mut ca, &["DLOCK.COUNTDOWN", "l"]);
    assert_ne!(reply(&mut ca, &["DEBUG", "DIGEST-VALUE", "l"]), before);
    // MIGRATE moves a semaphore and a latch.
    let port = b
        .url()
        .rsplit(':')
        .next()
        .unwrap_or("")
        .trim_end_matches('/')
        .to_string();
    for key in ["s-copy", "l-copy"] {
        let info = info_norm(&mut ca, key);
        let r = reply(&mut ca, &["MIGRATE", "127.0.0.1", &port, key, "0", "5000"]);
        assert_eq!(r, Value::Okay, "MIGRATE {key}");
        assert_eq!(info_norm(&mut cb, key), info);
        assert_eq!(info_raw(&mut ca, key), Value::Nil);
    }
    // Restored tokens order: a new grant on b is above the copy's tokens.
    let last = as_int(field(&info_raw(&mut cb, "s"), "token"));
    let t = token(&mut cb, &["DLOCK.SEMACQUIRE", "s", "z", "LIMIT", "5"]).unwrap();
    assert!(t > last);
}

// ---------------------------------------------------------------------------
// Replication
// ---------------------------------------------------------------------------

fn sync(master: &Server, replica: &Server) {
    assert_eq!(int(&mut master.conn(), &["WAIT", "1", "5000"]), 1);
    wait_replica_synced(master, replica);
}

fn same(master: &Server, replica: &Server, step: &str) {
    sync(master, replica);
    for key in ["s", "l"] {
        assert_eq!(
            info_norm(&mut replica.conn(), key),
            info_norm(&mut master.conn(), key),
            "{key} after {step}"
        );
    }
}

#[test]
fn replica_info_equals_master_after_every_step_and_promotion_drops_waiters() {
    let master = Server::start();
    let replica = Server::start();
    replica.make_replica_of(&master);
    let mut m = master.conn();
    let steps: &[&[&str]] = &[
        &[
            "DLOCK.SEMACQUIRE",
            "s",
            "a",
            "LIMIT",
            "3",
            "PERMITS",
            "2",
            "PX",
            LONG,
        ],
        &["DLOCK.SEMACQUIRE", "s", "b", "LIMIT", "3", "PX", LONG],
        &["DLOCK.SEMACQUIRE", "s", "a", "LIMIT", "3"],
        &["DLOCK.RELEASE", "s", "a", "PERMITS", "1"],
        &["DLOCK.SEMACQUIRE", "s", "a", "LIMIT", "3", "PX", LONG],
        &["DLOCK.RENEW", "s", "b", "PX", "700000"],
        &["DLOCK.RELEASE", "s", "b"],
        &["DLOCK.LATCHSET", "l", "3"],
        &["DLOCK.COUNTDOWN", "l"],
    ];
    for args in steps {
        let _ = cmd_str(&mut m, args);
        same(&master, &replica, &args.join(" "));
    }
    // Waiters are part of the state.
    let w = spawn(
        &master,
        &[
            "DLOCK.SEMACQUIRE",
            "s",
            "w",
            "LIMIT",
            "3",
            "PERMITS",
            "3",
            "WAIT",
            "60000",
        ],
    );
    wait_waiters(&master, "s", 1);
    let aw = awaiter(&master, "l", 0);
    same(&master, &replica, "waiters");
    assert_eq!(waiters(&info_raw(&mut replica.conn(), "s")).len(), 1);
    // The replica refuses writes.
    let e = err(&mut replica.conn(), &["DLOCK.COUNTDOWN", "l"]);
    assert!(e.starts_with("READONLY"), "{e}");
    // A handoff and an opening replicate.
    assert_eq!(int(&mut m, &["DLOCK.RELEASE", "s", "a", "PERMITS", "2"]), 1);
    assert!(matches!(done(w), Value::Int(_)));
    assert_eq!(int(&mut m, &["DLOCK.COUNTDOWN", "l"]), 1);
    same(&master, &replica, "handoff");
    let d1 = reply(&mut m, &["DEBUG", "DIGEST"]);
    let d2 = reply(&mut replica.conn(), &["DEBUG", "DIGEST"]);
    assert_eq!(d1, d2, "DEBUG DIGEST");
    assert_eq!(int(&mut m, &["DLOCK.COUNTDOWN", "l"]), 0);
    assert_eq!(done(aw), Value::Int(1));
    same(&master, &replica, "opening");
    assert_eq!(info_raw(&mut replica.conn(), "l"), Value::Nil);
    // Promotion: a waiter of the old master's connection is dropped.
    assert_eq!(int(&mut m, &["DLOCK.LATCHSET", "l", "2"]), 1);
    let aw = awaiter(&master, "l", 0);
    same(&master, &replica, "new latch with a waiter");
    ok(&mut replica.conn(), &["REPLICAOF", "NO", "ONE"]);
    let mut r = replica.conn();
    let dropped = wait_until(Duration::from_secs(5), || {
        waiters(&info_raw(&mut r, "l")).is_empty()
    });
    assert!(dropped, "{:?}", info_raw(&mut r, "l"));
    assert_eq!(as_int(field(&info_raw(&mut r, "l"), "count")), 2);
    let last = as_int(field(&info_raw(&mut r, "s"), "token"));
    let t = token(
        &mut r,
        &["DLOCK.SEMACQUIRE", "s", "n", "LIMIT", "3", "PX", LONG],
    );
    assert!(t.is_none_or(|t| t > last));
    assert_eq!(int(&mut m, &["DLOCK.COUNTDOWN", "l"]), 1);
    assert_eq!(int(&mut m, &["DLOCK.COUNTDOWN", "l"]), 0);
    assert_eq!(done(aw), Value::Int(1));
}
