//! `DLOCK.CANCEL key owner` (docs/commands.md): gives up every place the
//! owner has in the queue of the key — a fair-queue place kept between
//! polls, and every wait blocked on the server on any connection (answered
//! nil at once); holds are untouched; the reply counts the places given up;
//! the next place in line is served at once; replicas get the effect.

mod common;
use common::*;

use redis::{RedisResult, Value};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// A fair-queue timeout far beyond every bound below: a place that is not
/// given up would delay the next owner by a minute.
fn server() -> Server {
    Server::start_with(ServerOpts::new().module_args(["dlock.fair-queue-timeout-ms", "120000"]))
}

/// Sends `args` on a new connection of `s` from a thread: its reply and
/// when it came.
fn blocked(s: &Server, args: &[&str]) -> JoinHandle<(RedisResult<Value>, Instant)> {
    let mut c = s.conn();
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    thread::spawn(move || {
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        let r = cmd_str(&mut c, &a);
        (r, Instant::now())
    })
}

/// How many places the lock at `key` has (0 when there is no lock).
fn places(c: &mut redis::Connection, key: &str) -> usize {
    match info_raw(c, key) {
        Value::Nil => 0,
        info => waiters(&info).len(),
    }
}

/// Waits until the lock at `key` has `n` places.
fn until_places(c: &mut redis::Connection, key: &str, n: usize) {
    assert!(
        wait_until(Duration::from_secs(20), || places(c, key) == n),
        "{key} never had {n} places: {:?}",
        info_raw(c, key)
    );
}

fn join(h: JoinHandle<(RedisResult<Value>, Instant)>) -> (Value, Instant) {
    let (r, at) = h.join().expect("waiting thread");
    (
        r.unwrap_or_else(|e| panic!("wait failed: {}", err_string(&e))),
        at,
    )
}

#[test]
fn a_fair_place_given_up_lets_the_next_owner_in_at_once() {
    let s = server();
    let mut c = s.conn();
    assert!(int(&mut c, &["DLOCK.FAIRACQUIRE", "f", "a"]) > 0);
    // b polls: nil, a place kept for two minutes.
    assert_eq!(ok(&mut c, &["DLOCK.FAIRACQUIRE", "f", "b"]), Value::Nil);
    let w = blocked(&s, &["DLOCK.FAIRACQUIRE", "f", "c", "WAIT", "60000"]);
    until_places(&mut c, "f", 2);
    // The lock is free, but b's place comes first: c keeps waiting.
    assert_eq!(int(&mut c, &["DLOCK.RELEASE", "f", "a"]), 1);
    thread::sleep(Duration::from_millis(300));
    assert!(!w.is_finished(), "c was served ahead of b's place");
    let gave_up = Instant::now();
    assert_eq!(int(&mut c, &["DLOCK.CANCEL", "f", "b"]), 1);
    let (r, at) = join(w);
    assert!(matches!(r, Value::Int(t) if t > 0), "{r:?}");
    let after = at.saturating_duration_since(gave_up);
    println!("next owner served {after:?} after the CANCEL was sent (round trips included)");
    assert!(after < Duration::from_secs(10), "c served {after:?} after");
    // c holds; b has no place left: asking again queues b at the back.
    let info = info_raw(&mut c, "f");
    assert_eq!(holders(&info).len(), 1);
    assert!(waiters(&info).is_empty(), "{info:?}");
    assert_eq!(int(&mut c, &["DLOCK.CANCEL", "f", "b"]), 0);
}

#[test]
fn a_blocked_wait_on_another_connection_is_answered_nil_at_once() {
    let s = server();
    let mut c = s.conn();
    for kind in ["mutex", "fair"] {
        let (key, cmd) = match kind {
            "mutex" => ("m", "DLOCK.ACQUIRE"),
            _ => ("fq", "DLOCK.FAIRACQUIRE"),
        };
        assert!(int(&mut c, &[cmd, key, "a", "PX", "60000"]) > 0);
        let w = blocked(&s, &[cmd, key, "b", "WAIT", "60000"]);
        until_places(&mut c, key, 1);
        let gave_up = Instant::now();
        assert_eq!(int(&mut c, &["DLOCK.CANCEL", key, "b"]), 1, "{kind}");
        let (r, at) = join(w);
        assert_eq!(r, Value::Nil, "{kind}");
        let after = at.saturating_duration_since(gave_up);
        assert!(after < Duration::from_secs(10), "{kind}: {after:?}");
        // No place stays behind (a fair wait that times out would keep one).
        assert_eq!(places(&mut c, key), 0, "{kind}");
        // The hold is a's, untouched.
        assert_eq!(int(&mut c, &["DLOCK.RELEASE", key, "a"]), 1, "{kind}");
    }
}

#[test]
fn every_place_of_the_owner_goes_and_is_counted() {
    let s = server();
    let mut c = s.conn();
    assert!(int(&mut c, &["DLOCK.FAIRACQUIRE", "f", "a"]) > 0);
    assert_eq!(ok(&mut c, &["DLOCK.FAIRACQUIRE", "f", "b"]), Value::Nil);
    // b also waits on the server from two connections; x waits too.
    let w1 = blocked(&s, &["DLOCK.FAIRACQUIRE", "f", "b", "WAIT", "60000"]);
    until_places(&mut c, "f", 1);
    let w2 = blocked(&s, &["DLOCK.FAIRACQUIRE", "f", "b", "WAIT", "60000"]);
    until_places(&mut c, "f", 2);
    let wx = blocked(&s, &["DLOCK.FAIRACQUIRE", "f", "x", "WAIT", "60000"]);
    until_places(&mut c, "f", 3);
    assert_eq!(int(&mut c, &["DLOCK.CANCEL", "f", "b"]), 2);
    assert_eq!(
        s.info_field("dlock", "dlock_places_cancelled").as_deref(),
        Some("2")
    );
    assert_eq!(join(w1).0, Value::Nil);
    assert_eq!(join(w2).0, Value::Nil);
    assert_eq!(places(&mut c, "f"), 1);
    assert!(!wx.is_finished());
    // x is served when a lets go.
    assert_eq!(int(&mut c, &["DLOCK.RELEASE", "f", "a"]), 1);
    assert!(matches!(join(wx).0, Value::Int(t) if t > 0));
}

#[test]
fn a_cancelled_writer_lets_the_readers_behind_it_in() {
    let s = server();
    let mut c = s.conn();
    assert!(int(&mut c, &["DLOCK.RWACQUIRE", "rw", "r1", "READ"]) > 0);
    let ww = blocked(
        &s,
        &["DLOCK.RWACQUIRE", "rw", "w", "WRITE", "WAIT", "60000"],
    );
    until_places(&mut c, "rw", 1);
    // Writer preference: a new reader waits behind the writer.
    let wr = blocked(
        &s,
        &["DLOCK.RWACQUIRE", "rw", "r2", "READ", "WAIT", "60000"],
    );
    until_places(&mut c, "rw", 2);
    assert_eq!(int(&mut c, &["DLOCK.CANCEL", "rw", "w"]), 1);
    assert_eq!(join(ww).0, Value::Nil);
    assert!(matches!(join(wr).0, Value::Int(t) if t > 0));
    assert_eq!(holders(&info_raw(&mut c, "rw")).len(), 2);
}

#[test]
fn holds_are_untouched_and_nothing_to_give_up_is_zero() {
    let s = server();
    let mut c = s.conn();
    // A missing key: 0, no error, no key made.
    assert_eq!(int(&mut c, &["DLOCK.CANCEL", "none", "a"]), 0);
    assert_eq!(int(&mut c, &["EXISTS", "none"]), 0);
    let t = int(&mut c, &["DLOCK.ACQUIRE", "m", "a", "PX", "60000"]);
    let before = info_norm(&mut c, "m");
    assert_eq!(int(&mut c, &["DLOCK.CANCEL", "m", "a"]), 0);
    assert_eq!(int(&mut c, &["DLOCK.CANCEL", "m", "nobody"]), 0);
    assert_eq!(info_norm(&mut c, "m"), before);
    assert_eq!(int(&mut c, &["DLOCK.CHECK", "m", &t.to_string()]), 1);
    // The holder's own place (an rw upgrade) goes, its READ stays.
    assert!(int(&mut c, &["DLOCK.RWACQUIRE", "rw", "a", "READ"]) > 0);
    assert!(int(&mut c, &["DLOCK.RWACQUIRE", "rw", "b", "READ"]) > 0);
    let up = blocked(
        &s,
        &["DLOCK.RWACQUIRE", "rw", "a", "WRITE", "WAIT", "60000"],
    );
    until_places(&mut c, "rw", 1);
    assert_eq!(int(&mut c, &["DLOCK.CANCEL", "rw", "a"]), 1);
    assert_eq!(join(up).0, Value::Nil);
    assert_eq!(holders(&info_raw(&mut c, "rw")).len(), 2);
    assert_eq!(int(&mut c, &["DLOCK.RELEASE", "rw", "a"]), 1);
}

#[test]
fn bad_input_is_refused_naming_the_problem() {
    let s = server();
    let mut c = s.conn();
    ok(&mut c, &["SET", "str", "v"]);
    let e = expect_err(cmd_str(&mut c, &["DLOCK.CANCEL", "str", "a"]));
    assert!(e.starts_with("WRONGTYPE"), "{e}");
    let e = expect_err(cmd_str(&mut c, &["DLOCK.CANCEL", "m"]));
    assert!(e.contains("wrong number of arguments"), "{e}");
    let e = expect_err(cmd_str(&mut c, &["DLOCK.CANCEL", "m", "a", "b"]));
    assert!(e.contains("wrong number of arguments"), "{e}");
    let e = expect_err(cmd_str(&mut c, &["DLOCK.CANCEL", "m", ""]));
    assert!(e.contains("owner"), "{e}");
    assert_eq!(int(&mut c, &["DLOCK.LATCHSET", "l", "2"]), 1);
    let e = expect_err(cmd_str(&mut c, &["DLOCK.CANCEL", "l", "a"]));
    assert!(e.contains("latch"), "{e}");
}

#[test]
fn a_replica_has_the_masters_state_after_it() {
    let master = server();
    let replica = server();
    replica.make_replica_of(&master);
    let mut c = master.conn();
    assert!(int(&mut c, &["DLOCK.FAIRACQUIRE", "f", "a"]) > 0);
    assert_eq!(ok(&mut c, &["DLOCK.FAIRACQUIRE", "f", "b"]), Value::Nil);
    assert_eq!(ok(&mut c, &["DLOCK.FAIRACQUIRE", "f", "c"]), Value::Nil);
    let w = blocked(&master, &["DLOCK.FAIRACQUIRE", "f", "d", "WAIT", "60000"]);
    until_places(&mut c, "f", 3);
    wait_replica_synced(&master, &replica);
    let mut rc = replica.conn();
    assert_eq!(info_norm(&mut rc, "f"), info_norm(&mut c, "f"));
    assert_eq!(int(&mut c, &["DLOCK.CANCEL", "f", "b"]), 1);
    assert_eq!(int(&mut c, &["DLOCK.CANCEL", "f", "d"]), 1);
    assert_eq!(join(w).0, Value::Nil);
    wait_replica_synced(&master, &replica);
    let on_master = info_norm(&mut c, "f");
    assert_eq!(waiters(&on_master).len(), 1);
    assert_eq!(info_norm(&mut rc, "f"), on_master);
    // A write on the replica is refused as Redis refuses any write.
    let e = expect_err(cmd_str(&mut rc, &["DLOCK.CANCEL", "f", "c"]));
    assert!(e.starts_with("READONLY"), "{e}");
}

#[test]
fn a_cancelled_wait_is_a_wait_in_stats_and_slowlog() {
    let s = Server::start_with(ServerOpts::new().module_args(["dlock.slowlog-wait-ms", "0"]));
    let mut c = s.conn();
    assert!(int(&mut c, &["DLOCK.ACQUIRE", "m", "a", "PX", "60000"]) > 0);
    let w = blocked(&s, &["DLOCK.ACQUIRE", "m", "b", "WAIT", "60000"]);
    until_places(&mut c, "m", 1);
    assert_eq!(int(&mut c, &["DLOCK.CANCEL", "m", "b"]), 1);
    assert_eq!(join(w).0, Value::Nil);
    let found = wait_until(Duration::from_secs(10), || {
        let log = cmd_str(&mut c, &["DLOCK.SLOWLOG", "GET"]).expect("SLOWLOG GET");
        format!("{log:?}").contains("cancelled")
    });
    assert!(found, "{:?}", cmd_str(&mut c, &["DLOCK.SLOWLOG", "GET"]));
    let stats = format!("{:?}", cmd_str(&mut c, &["DLOCK.STATS"]).expect("STATS"));
    assert!(stats.contains("waits"), "{stats}");
    let pct = s.info_field("dlock", "dlock_wait_percentiles_usec_mutex");
    assert!(pct.is_some(), "{}", s.info("dlock"));
}

#[test]
fn command_docs_key_specs_and_acl() {
    let s = server();
    let mut c = s.conn();
    let keys = cmd_str(&mut c, &["COMMAND", "GETKEYS", "DLOCK.CANCEL", "k", "o"]).expect("GETKEYS");
    assert_eq!(keys, Value::Array(vec![Value::BulkString(b"k".to_vec())]));
    let docs = format!(
        "{:?}",
        cmd_str(&mut c, &["COMMAND", "DOCS", "DLOCK.CANCEL"]).expect("DOCS")
    );
    assert!(docs.contains("owner") && docs.contains("summary"), "{docs}");
    // A user allowed DLOCK.CANCEL on lock:* keys may cancel there only.
    ok(
        &mut c,
        &[
            "ACL",
            "SETUSER",
            "u",
            "on",
            "nopass",
            "~lock:*",
            "+dlock.cancel",
        ],
    );
    ok(&mut c, &["AUTH", "u", "x"]);
    assert_eq!(int(&mut c, &["DLOCK.CANCEL", "lock:a", "o"]), 0);
    let e = expect_err(cmd_str(&mut c, &["DLOCK.CANCEL", "other", "o"]));
    assert!(e.starts_with("NOPERM"), "{e}");
}

#[test]
fn a_semaphore_wait_is_given_up_and_the_next_one_served() {
    let s = server();
    let mut c = s.conn();
    assert!(
        int(
            &mut c,
            &["DLOCK.SEMACQUIRE", "sem", "a", "LIMIT", "2", "PERMITS", "1"]
        ) > 0
    );
    // b asks for 2 permits (strict FIFO: c's 1 permit waits behind it).
    let wb = blocked(
        &s,
        &[
            "DLOCK.SEMACQUIRE",
            "sem",
            "b",
            "LIMIT",
            "2",
            "PERMITS",
            "2",
            "WAIT",
            "60000",
        ],
    );
    until_places(&mut c, "sem", 1);
    let wc = blocked(
        &s,
        &[
            "DLOCK.SEMACQUIRE",
            "sem",
            "c",
            "LIMIT",
            "2",
            "WAIT",
            "60000",
        ],
    );
    until_places(&mut c, "sem", 2);
    assert_eq!(int(&mut c, &["DLOCK.CANCEL", "sem", "b"]), 1);
    assert_eq!(join(wb).0, Value::Nil);
    assert!(matches!(join(wc).0, Value::Int(t) if t > 0));
}
