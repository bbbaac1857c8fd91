//! Deadlock detection across locks (issue 24, docs/deadlocks.md): owners
//! blocked on the server on mutex, rw and fair locks form a wait-for graph;
//! the request whose wait would close a cycle gets `DEADLOCK cycle: …` at
//! once, nothing is queued for it and its other holds stay. Checked: cycles
//! of 2 and 3 owners across keys and kinds, two readers both upgrading (the
//! older DEADLOCK), a cycle through fair-queue order, a cycle found when a
//! lock changes hands (also when it is handed to an owner whose other
//! connection still waits), no error for a chain, for semaphores, or for a place
//! queued without a blocked connection, the search bound, and detection
//! turned off. `two_owners_across_two_keys` prints the time from the
//! closing request to its DEADLOCK reply.

mod common;
use common::*;

use std::time::{Duration, Instant};

const SOON: Duration = Duration::from_secs(10);

fn raw(server: &Server) -> RawConn {
    RawConn::new(server, SOON)
}

fn stat(con: &mut redis::Connection, field: &str) -> u64 {
    info_field(con, "dlock", &format!("dlock_{field}"))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("INFO dlock has no dlock_{field}"))
}

/// Sends `args` on a new connection and waits until it blocks on the server.
fn block(server: &Server, admin: &mut redis::Connection, args: &[&str]) -> RawConn {
    let before = stat(admin, "waiting_clients");
    let mut c = raw(server);
    c.send(args);
    assert!(
        wait_until(SOON, || stat(admin, "waiting_clients") > before),
        "{args:?} did not block"
    );
    c
}

fn cmd(con: &mut redis::Connection, args: &[&str]) -> redis::RedisResult<redis::Value> {
    let mut c = redis::cmd(args[0]);
    for a in &args[1..] {
        c.arg(*a);
    }
    c.query(con)
}

fn int(con: &mut redis::Connection, args: &[&str]) -> i64 {
    match cmd(con, args) {
        Ok(redis::Value::Int(n)) => n,
        other => panic!("{args:?}: {other:?}"),
    }
}

/// Turns `dlock.deadlock-detect` on or off.
fn detect(con: &mut redis::Connection, on: bool) {
    let v = if on { "yes" } else { "no" };
    cmd(con, &["CONFIG", "SET", "dlock.deadlock-detect", v]).unwrap();
}

fn waiters_of(con: &mut redis::Connection, key: &str) -> usize {
    let info = info_raw(con, key);
    if info == redis::Value::Nil {
        return 0;
    }
    waiters(&info).len()
}

/// A holds `orders`, B holds `stock`; A waits for `stock`; B asking for
/// `orders` would close the cycle: B gets DEADLOCK naming both steps, is not
/// queued, keeps `stock`; A waits on and gets `stock` when B lets go.
#[test]
fn two_owners_across_two_keys() {
    let server = Server::start();
    let mut admin = server.conn();
    int(&mut admin, &["DLOCK.ACQUIRE", "orders", "A", "PX", "60000"]);
    int(&mut admin, &["DLOCK.ACQUIRE", "stock", "B", "PX", "60000"]);
    let mut a = block(
        &server,
        &mut admin,
        &[
            "DLOCK.ACQUIRE",
            "stock",
            "A",
            "PX",
            "60000",
            "WAIT",
            "60000",
        ],
    );
    let mut b = raw(&server);
    let t0 = Instant::now();
    b.send(&[
        "DLOCK.ACQUIRE",
        "orders",
        "B",
        "PX",
        "60000",
        "WAIT",
        "60000",
    ]);
    let reply = b.reply();
    let took = t0.elapsed();
    println!("closing request -> DEADLOCK reply: {took:?} (round trip included)");
    assert_eq!(
        reply,
        "-DEADLOCK cycle: \"B\" waits for \"A\" on \"orders\"; \"A\" waits for \"B\" on \"stock\" (nothing was queued for this request; release a lock it holds and retry)"
    );
    assert!(took < SOON);
    // Nothing queued for B; B's hold stays; A still waits.
    assert_eq!(waiters_of(&mut admin, "orders"), 0);
    assert_eq!(waiters_of(&mut admin, "stock"), 1);
    assert!(!a.has_reply());
    assert_eq!(stat(&mut admin, "deadlocks"), 1);
    assert_eq!(
        info_field(&mut admin, "dlock", "dlock_last_deadlock_keys").as_deref(),
        Some("\"orders\" \"stock\"")
    );
    assert_eq!(
        info_field(&mut admin, "dlock", "dlock_last_deadlock_owners").as_deref(),
        Some("\"B\" \"A\"")
    );
    assert!(info_field(&mut admin, "dlock", "dlock_last_deadlock_unix_ms").is_some());
    // The deadlock is in DLOCK.SLOWLOG (whatever its wait): a wait of B on
    // `orders`, outcome `deadlock`, blocked by A.
    let log = cmd(&mut admin, &["DLOCK.SLOWLOG", "GET", "1"]).unwrap();
    let entry = as_array(&as_array(&log)[0]);
    let field = |i: usize| as_bytes(&entry[i]).to_vec();
    assert_eq!(field(2), b"wait");
    assert_eq!(field(3), b"orders");
    assert_eq!(field(4), b"B");
    assert_eq!(field(8), b"deadlock");
    let blockers: Vec<&[u8]> = as_array(&entry[9]).iter().map(as_bytes).collect();
    assert_eq!(blockers, [&b"A"[..]]);
    // And it is a wait in DLOCK.STATS (of 0 µs: refused at once); A's wait
    // goes on and is not counted yet.
    assert_eq!(mutex_waits(&mut admin), 1);
    // B does what the error says: releases and retries. A is served.
    int(&mut admin, &["DLOCK.RELEASE", "stock", "B"]);
    assert!(a.reply().starts_with(':'));
}

/// Three owners over a mutex, an rw lock and a fair lock; binary owners
/// and keys are quoted and escaped in the reply.
#[test]
fn three_owners_across_kinds() {
    let server = Server::start();
    let mut admin = server.conn();
    int(&mut admin, &["DLOCK.ACQUIRE", "k1", "A", "PX", "60000"]);
    int(
        &mut admin,
        &["DLOCK.RWACQUIRE", "k2", "B\"x", "READ", "PX", "60000"],
    );
    int(
        &mut admin,
        &["DLOCK.FAIRACQUIRE", "k3:y", "C", "PX", "60000"],
    );
    let _a = block(
        &server,
        &mut admin,
        &["DLOCK.RWACQUIRE", "k2", "A", "WRITE", "WAIT", "60000"],
    );
    let _b = block(
        &server,
        &mut admin,
        &["DLOCK.FAIRACQUIRE", "k3:y", "B\"x", "WAIT", "60000"],
    );
    let mut c = raw(&server);
    c.send(&["DLOCK.ACQUIRE", "k1", "C", "WAIT", "60000"]);
    assert_eq!(
        c.reply(),
        "-DEADLOCK cycle: \"C\" waits for \"A\" on \"k1\"; \"A\" waits for \"B\\\"x\" on \"k2\"; \"B\\\"x\" waits for \"C\" on \"k3\\x3ay\" (nothing was queued for this request; release a lock it holds and retry)"
    );
    assert_eq!(waiters_of(&mut admin, "k1"), 0);
}

/// The older DEADLOCK stays: two readers that both wait to upgrade.
#[test]
fn two_readers_both_upgrading() {
    let server = Server::start();
    let mut admin = server.conn();
    int(&mut admin, &["DLOCK.RWACQUIRE", "rw", "r1", "READ"]);
    int(&mut admin, &["DLOCK.RWACQUIRE", "rw", "r2", "READ"]);
    let _r1 = block(
        &server,
        &mut admin,
        &["DLOCK.RWACQUIRE", "rw", "r1", "WRITE", "WAIT", "60000"],
    );
    let err = cmd(
        &mut admin,
        &["DLOCK.RWACQUIRE", "rw", "r2", "WRITE", "WAIT", "60000"],
    )
    .unwrap_err();
    assert_eq!(err.code(), Some("DEADLOCK"));
    assert!(
        err.to_string()
            .contains("another reader already waits to upgrade"),
        "{err}"
    );
}

/// A place kept for an owner that polls (FAIRACQUIRE without WAIT) is
/// waited for by those behind it, but that owner waits on no connection: no
/// error. When it then waits on the server for a lock held by one of them,
/// the fair queue's order closes the cycle.
#[test]
fn a_cycle_through_fair_queue_order() {
    let server = Server::start();
    let mut admin = server.conn();
    int(&mut admin, &["DLOCK.FAIRACQUIRE", "f1", "H", "PX", "60000"]);
    int(&mut admin, &["DLOCK.FAIRACQUIRE", "f2", "A", "PX", "60000"]);
    // B queues on f1 without waiting on the server.
    assert_eq!(
        cmd(&mut admin, &["DLOCK.FAIRACQUIRE", "f1", "B"]).unwrap(),
        redis::Value::Nil
    );
    // A waits on f1 behind H and B's place: no error (B is not blocked).
    let _a = block(
        &server,
        &mut admin,
        &["DLOCK.FAIRACQUIRE", "f1", "A", "WAIT", "60000"],
    );
    // B now waits on f2, held by A, who waits behind B's place on f1.
    let mut b = raw(&server);
    b.send(&["DLOCK.FAIRACQUIRE", "f2", "B", "WAIT", "60000"]);
    assert_eq!(
        b.reply(),
        "-DEADLOCK cycle: \"B\" waits for \"A\" on \"f2\"; \"A\" waits for \"B\" on \"f1\" (nothing was queued for this request; release a lock it holds and retry)"
    );
    // B's place on f1 stays queued; nothing was added on f2.
    assert_eq!(waiters_of(&mut admin, "f1"), 2);
    assert_eq!(waiters_of(&mut admin, "f2"), 0);
}

/// A cycle that exists when detection is turned on is found when one of its
/// locks changes hands: the waiter whose blockers close it is answered
/// DEADLOCK, its place removed (also on a replica), and the others go on.
#[test]
fn a_cycle_found_when_a_lock_changes_hands() {
    let server = Server::start();
    let replica = Server::start();
    replica.make_replica_of(&server);
    let mut admin = server.conn();
    detect(&mut admin, false);
    int(
        &mut admin,
        &["DLOCK.RWACQUIRE", "k1", "A", "READ", "PX", "60000"],
    );
    int(
        &mut admin,
        &["DLOCK.RWACQUIRE", "k1", "C", "READ", "PX", "60000"],
    );
    int(&mut admin, &["DLOCK.ACQUIRE", "k2", "B", "PX", "60000"]);
    let mut b = block(
        &server,
        &mut admin,
        &[
            "DLOCK.RWACQUIRE",
            "k1",
            "B",
            "WRITE",
            "PX",
            "60000",
            "WAIT",
            "60000",
        ],
    );
    let mut a = block(
        &server,
        &mut admin,
        &["DLOCK.ACQUIRE", "k2", "A", "PX", "60000", "WAIT", "60000"],
    );
    assert!(!b.has_reply() && !a.has_reply());
    detect(&mut admin, true);
    // C lets go of k1: its holders change; B's wait closes the cycle.
    int(&mut admin, &["DLOCK.RELEASE", "k1", "C"]);
    assert_eq!(
        b.reply(),
        "-DEADLOCK cycle: \"B\" waits for \"A\" on \"k1\"; \"A\" waits for \"B\" on \"k2\" (nothing was queued for this request; release a lock it holds and retry)"
    );
    assert_eq!(waiters_of(&mut admin, "k1"), 0);
    wait_replica_synced(&server, &replica);
    let mut rc = replica.conn();
    assert_eq!(waiters_of(&mut rc, "k1"), 0);
    // B releases k2 as told; A gets it.
    int(&mut admin, &["DLOCK.RELEASE", "k2", "B"]);
    assert!(a.reply().starts_with(':'));
}

/// The connection a handoff serves waits no more, but its owner may still
/// wait on another connection: A is granted k1 while its other connection
/// waits for k2, which B holds, and B waits on k1 behind A — the handoff
/// closes the cycle and B is answered DEADLOCK. (Only a wait answered by
/// the handoff itself is left out of the search.)
#[test]
fn a_handoff_to_an_owner_still_waiting_elsewhere() {
    let server = Server::start();
    let mut admin = server.conn();
    detect(&mut admin, false);
    int(&mut admin, &["DLOCK.ACQUIRE", "k1", "X", "PX", "60000"]);
    int(&mut admin, &["DLOCK.ACQUIRE", "k2", "B", "PX", "60000"]);
    let wait = ["PX", "60000", "WAIT", "60000"];
    let with_wait = |head: &[&'static str]| -> Vec<&'static str> {
        head.iter().copied().chain(wait.iter().copied()).collect()
    };
    let mut a1 = block(
        &server,
        &mut admin,
        &with_wait(&["DLOCK.ACQUIRE", "k1", "A"]),
    );
    let mut a2 = block(
        &server,
        &mut admin,
        &with_wait(&["DLOCK.ACQUIRE", "k2", "A"]),
    );
    let mut b = block(
        &server,
        &mut admin,
        &with_wait(&["DLOCK.ACQUIRE", "k1", "B"]),
    );
    assert!(!a1.has_reply() && !a2.has_reply() && !b.has_reply());
    detect(&mut admin, true);
    let before = stat(&mut admin, "deadlocks");
    // X lets go of k1: A's first connection is served; A still waits for B.
    int(&mut admin, &["DLOCK.RELEASE", "k1", "X"]);
    assert!(a1.reply().starts_with(':'), "A is granted k1");
    let reply = b.reply();
    assert!(
        reply.starts_with("-DEADLOCK cycle: "),
        "B's wait on k1 closes a cycle through A's wait on k2: {reply}"
    );
    assert_eq!(stat(&mut admin, "deadlocks"), before + 1);
    assert_eq!(waiters_of(&mut admin, "k1"), 0);
    // B lets go of k2 as told; A's other connection gets it.
    int(&mut admin, &["DLOCK.RELEASE", "k2", "B"]);
    assert!(a2.reply().starts_with(':'));
}

/// A chain without a cycle waits as before.
#[test]
fn no_error_for_a_chain() {
    let server = Server::start();
    let mut admin = server.conn();
    int(&mut admin, &["DLOCK.ACQUIRE", "k1", "A", "PX", "60000"]);
    int(&mut admin, &["DLOCK.ACQUIRE", "k2", "B", "PX", "60000"]);
    int(&mut admin, &["DLOCK.ACQUIRE", "k3", "C", "PX", "60000"]);
    let mut b = block(
        &server,
        &mut admin,
        &["DLOCK.ACQUIRE", "k1", "B", "WAIT", "60000"],
    );
    let mut c = block(
        &server,
        &mut admin,
        &["DLOCK.ACQUIRE", "k2", "C", "WAIT", "60000"],
    );
    assert!(!b.has_reply() && !c.has_reply());
    assert_eq!(stat(&mut admin, "deadlocks"), 0);
    int(&mut admin, &["DLOCK.RELEASE", "k1", "A"]);
    assert!(b.reply().starts_with(':'));
}

/// Semaphores take no part: a "cycle" through one is no deadlock (any
/// holder, or time, frees permits), so both wait as before.
#[test]
fn no_error_for_semaphores() {
    let server = Server::start();
    let mut admin = server.conn();
    int(
        &mut admin,
        &["DLOCK.SEMACQUIRE", "s", "A", "LIMIT", "1", "PX", "60000"],
    );
    int(&mut admin, &["DLOCK.ACQUIRE", "k", "B", "PX", "60000"]);
    let mut a = block(
        &server,
        &mut admin,
        &["DLOCK.ACQUIRE", "k", "A", "WAIT", "60000"],
    );
    let mut b = block(
        &server,
        &mut admin,
        &["DLOCK.SEMACQUIRE", "s", "B", "LIMIT", "1", "WAIT", "60000"],
    );
    assert!(!a.has_reply() && !b.has_reply());
    assert_eq!(stat(&mut admin, "deadlocks"), 0);
    int(&mut admin, &["DLOCK.RELEASE", "s", "A"]);
    assert!(b.reply().starts_with(':'));
}

/// Past `dlock.deadlock-max-depth` blocked owners the search stops: the
/// request waits as usual and the truncated check is counted.
#[test]
fn the_search_is_bounded() {
    let server = Server::start_with(ServerOpts::new().module_args(["deadlock-max-depth", "1"]));
    let mut admin = server.conn();
    int(&mut admin, &["DLOCK.ACQUIRE", "k1", "A", "PX", "60000"]);
    int(&mut admin, &["DLOCK.ACQUIRE", "k2", "B", "PX", "60000"]);
    let mut a = block(
        &server,
        &mut admin,
        &["DLOCK.ACQUIRE", "k2", "A", "WAIT", "60000"],
    );
    let mut b = block(
        &server,
        &mut admin,
        &["DLOCK.ACQUIRE", "k1", "B", "WAIT", "60000"],
    );
    assert!(!a.has_reply() && !b.has_reply());
    assert_eq!(stat(&mut admin, "deadlocks"), 0);
    assert!(stat(&mut admin, "deadlock_checks_truncated") >= 1);
    // With room for both owners the same cycle is found.
    cmd(
        &mut admin,
        &["CONFIG", "SET", "dlock.deadlock-max-depth", "2"],
    )
    .unwrap();
    int(&mut admin, &["DLOCK.ACQUIRE", "k3", "C", "PX", "60000"]);
    int(&mut admin, &["DLOCK.ACQUIRE", "k4", "D", "PX", "60000"]);
    let _c = block(
        &server,
        &mut admin,
        &["DLOCK.ACQUIRE", "k4", "C", "WAIT", "60000"],
    );
    let err = cmd(&mut admin, &["DLOCK.ACQUIRE", "k3", "D", "WAIT", "60000"]).unwrap_err();
    assert_eq!(err.code(), Some("DEADLOCK"));
}

/// `dlock.deadlock-detect no`: waits as before, until WAIT ends.
#[test]
fn detection_off_waits_as_before() {
    let server = Server::start();
    let mut admin = server.conn();
    detect(&mut admin, false);
    int(&mut admin, &["DLOCK.ACQUIRE", "k1", "A", "PX", "60000"]);
    int(&mut admin, &["DLOCK.ACQUIRE", "k2", "B", "PX", "60000"]);
    let mut a = block(
        &server,
        &mut admin,
        &["DLOCK.ACQUIRE", "k2", "A", "WAIT", "60000"],
    );
    let mut b = block(
        &server,
        &mut admin,
        &["DLOCK.ACQUIRE", "k1", "B", "WAIT", "300"],
    );
    assert_eq!(b.reply(), "nil");
    assert!(!a.has_reply());
    assert_eq!(stat(&mut admin, "deadlocks"), 0);
}

/// A queue on one lock whose waiters wait nowhere else needs no search:
/// even with the smallest bound, nothing is truncated and nobody refused
/// (while another lock has waiters too).
#[test]
fn one_hot_lock_needs_no_search() {
    let server = Server::start_with(ServerOpts::new().module_args(["deadlock-max-depth", "1"]));
    let mut admin = server.conn();
    int(&mut admin, &["DLOCK.ACQUIRE", "hot", "H", "PX", "60000"]);
    // Waiters on another lock too (so the one-key shortcut does not apply).
    int(&mut admin, &["DLOCK.ACQUIRE", "other", "Z", "PX", "60000"]);
    let _o = block(
        &server,
        &mut admin,
        &["DLOCK.ACQUIRE", "other", "Y", "WAIT", "60000"],
    );
    let mut ws: Vec<RawConn> = (0..6)
        .map(|i| {
            let o = format!("w{i}");
            block(
                &server,
                &mut admin,
                &["DLOCK.ACQUIRE", "hot", &o, "WAIT", "60000"],
            )
        })
        .collect();
    assert_eq!(stat(&mut admin, "deadlock_checks_truncated"), 0);
    assert_eq!(stat(&mut admin, "deadlocks"), 0);
    int(&mut admin, &["DLOCK.RELEASE", "hot", "H"]);
    assert!(ws[0].reply().starts_with(':'));
}

/// How many waits DLOCK.STATS counts for mutexes.
fn mutex_waits(con: &mut redis::Connection) -> i64 {
    let v = cmd(con, &["DLOCK.STATS"]).expect("DLOCK.STATS");
    let items = as_array(&v);
    let mutex = items
        .chunks(2)
        .find(|kv| as_bytes(&kv[0]) == b"mutex")
        .map(|kv| kv[1].clone())
        .expect("mutex in DLOCK.STATS");
    as_array(field(&mutex, "waits"))
        .iter()
        .map(|b| as_int(&as_array(b)[1]))
        .sum()
}
