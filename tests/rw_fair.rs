//! End-to-end tests of the read-write lock (DLOCK.RWACQUIRE) and the fair
//! lock (DLOCK.FAIRACQUIRE) against real redis-server processes (issue 3).
//!
//! Every wait on the server is observed through DLOCK.INFO (event-driven
//! polling with generous bounds), never through sleeps that assume a speed.

mod common;
use common::*;

use std::io::Write;
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use redis::{RedisResult, Value};

/// Bound for anything that should happen "at once" on a quiet machine.
const SOON: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------------------
// Replies
// ---------------------------------------------------------------------------

fn text(v: &Value) -> String {
    match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        Value::VerbatimString { text, .. } => text.clone(),
        Value::Int(i) => i.to_string(),
        other => panic!("expected a string, got {other:?}"),
    }
}

fn int(v: &Value) -> i64 {
    match v {
        Value::Int(i) => *i,
        other => text(other)
            .parse()
            .unwrap_or_else(|_| panic!("expected an integer, got {other:?}")),
    }
}

/// Field/value pairs of a flat RESP2 array or a RESP3 map.
fn pairs(v: &Value) -> Vec<(String, Value)> {
    match v {
        Value::Array(items) => items
            .chunks(2)
            .map(|c| (text(&c[0]), c.get(1).cloned().unwrap_or(Value::Nil)))
            .collect(),
        Value::Map(items) => items.iter().map(|(k, v)| (text(k), v.clone())).collect(),
        other => panic!("expected a map, got {other:?}"),
    }
}

/// One holder or waiter of DLOCK.INFO (`state` only for waiters,
/// `count`/`token` only for holders).
#[derive(Clone, Debug, Default)]
struct Entry {
    owner: String,
    mode: String,
    count: i64,
    token: i64,
    ttl: i64,
    state: String,
}

#[derive(Clone, Debug)]
struct Info {
    kind: String,
    token: i64,
    holders: Vec<Entry>,
    waiters: Vec<Entry>,
}

impl Info {
    fn holder(&self, owner: &str, mode: &str) -> Option<&Entry> {
        self.holders
            .iter()
            .find(|h| h.owner == owner && h.mode == mode)
    }
    fn holder_owners(&self) -> Vec<String> {
        self.holders.iter().map(|h| h.owner.clone()).collect()
    }
    fn waiter_owners(&self) -> Vec<String> {
        self.waiters.iter().map(|w| w.owner.clone()).collect()
    }
    fn waiter(&self, owner: &str) -> Option<&Entry> {
        self.waiters.iter().find(|w| w.owner == owner)
    }
}

fn entries(v: &Value) -> Vec<Entry> {
    let Value::Array(items) = v else {
        panic!("expected an array of entries, got {v:?}");
    };
    items
        .iter()
        .map(|item| {
            let mut e = Entry::default();
            for (k, v) in pairs(item) {
                match k.as_str() {
                    "owner" => e.owner = text(&v),
                    "mode" => e.mode = text(&v),
                    "count" => e.count = int(&v),
                    "token" => e.token = int(&v),
                    "ttl" => e.ttl = int(&v),
                    "state" => e.state = text(&v),
                    _ => {}
                }
            }
            e
        })
        .collect()
}

/// DLOCK.INFO parsed; None when no lock exists.
fn info(con: &mut redis::Connection, key: &str) -> Option<Info> {
    let v = cmd_str(con, &["DLOCK.INFO", key]).expect("DLOCK.INFO");
    if v == Value::Nil {
        return None;
    }
    let mut out = Info {
        kind: String::new(),
        token: 0,
        holders: Vec::new(),
        waiters: Vec::new(),
    };
    for (k, v) in pairs(&v) {
        match k.as_str() {
            "kind" => out.kind = text(&v),
            "token" => out.token = int(&v),
            "holders" => out.holders = entries(&v),
            "waiters" => out.waiters = entries(&v),
            _ => {}
        }
    }
    Some(out)
}

fn info_some(con: &mut redis::Connection, key: &str) -> Info {
    info(con, key).unwrap_or_else(|| panic!("DLOCK.INFO {key}: no lock"))
}

/// Waits until the lock's waiters are exactly `expected` (in queue order).
fn wait_waiters(con: &mut redis::Connection, key: &str, expected: &[&str]) -> Info {
    let mut last = None;
    let ok = wait_until(SOON, || {
        last = info(con, key);
        last.as_ref().map(Info::waiter_owners).unwrap_or_default() == expected
    });
    assert!(
        ok,
        "waiters of {key} never became {expected:?}; last INFO: {last:#?}"
    );
    last.expect("lock exists")
}

/// An acquire reply: Some(token) on grant, None for nil.
fn token_reply(r: RedisResult<Value>) -> RedisResult<Option<i64>> {
    match r? {
        Value::Nil => Ok(None),
        Value::Int(t) => {
            assert!(t > 0, "fencing tokens are positive, got {t}");
            Ok(Some(t))
        }
        other => panic!("unexpected acquire reply {other:?}"),
    }
}

fn rwacq(
    con: &mut redis::Connection,
    key: &str,
    owner: &str,
    mode: &str,
    opts: &[&str],
) -> RedisResult<Option<i64>> {
    let mut args = vec!["DLOCK.RWACQUIRE", key, owner, mode];
    args.extend_from_slice(opts);
    token_reply(cmd_str(con, &args))
}

fn fairacq(
    con: &mut redis::Connection,
    key: &str,
    owner: &str,
    opts: &[&str],
) -> RedisResult<Option<i64>> {
    let mut args = vec!["DLOCK.FAIRACQUIRE", key, owner];
    args.extend_from_slice(opts);
    token_reply(cmd_str(con, &args))
}

/// A grant that must happen: the token.
fn granted(r: RedisResult<Option<i64>>, what: &str) -> i64 {
    match r {
        Ok(Some(t)) => t,
        Ok(None) => panic!("{what}: expected a grant, got nil"),
        Err(e) => panic!("{what}: expected a grant, got error {}", err_string(&e)),
    }
}

/// A request that must be refused with nil.
fn denied(r: RedisResult<Option<i64>>, what: &str) {
    match r {
        Ok(None) => {}
        Ok(Some(t)) => panic!("{what}: expected nil, got token {t}"),
        Err(e) => panic!("{what}: expected nil, got error {}", err_string(&e)),
    }
}

fn release(
    con: &mut redis::Connection,
    key: &str,
    owner: &str,
    mode: Option<&str>,
) -> RedisResult<i64> {
    let mut args = vec!["DLOCK.RELEASE", key, owner];
    args.extend(mode);
    cmd_str(con, &args).map(|v| int(&v))
}

fn release_ok(con: &mut redis::Connection, key: &str, owner: &str, mode: Option<&str>) -> i64 {
    release(con, key, owner, mode)
        .unwrap_or_else(|e| panic!("DLOCK.RELEASE {key} {owner} {mode:?}: {}", err_string(&e)))
}

// ---------------------------------------------------------------------------
// Commands that block, on their own connection and thread
// ---------------------------------------------------------------------------

type Outcome = (Result<Option<i64>, String>, Instant);

/// One acquire sent from a background thread on its own connection. The
/// thread is detached: if the test fails, dropping the server ends it.
struct Pending {
    what: String,
    rx: mpsc::Receiver<Outcome>,
}

impl Pending {
    fn spawn(server: &Server, args: &[&str]) -> Pending {
        let mut con = server.conn();
        let owned: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let what = owned.join(" ");
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            let refs: Vec<&str> = owned.iter().map(String::as_str).collect();
            let r = token_reply(cmd_str(&mut con, &refs)).map_err(|e| err_string(&e));
            let _ = tx.send((r, Instant::now()));
        });
        Pending { what, rx }
    }

    /// The reply, waiting at most `timeout` (panics when none came).
    fn wait(&self, timeout: Duration) -> Outcome {
        self.rx
            .recv_timeout(timeout)
            .unwrap_or_else(|_| panic!("`{}` got no reply within {timeout:?}", self.what))
    }

    /// The token of a grant that must arrive within `timeout`.
    fn wait_token(&self, timeout: Duration) -> (i64, Instant) {
        match self.wait(timeout) {
            (Ok(Some(t)), at) => (t, at),
            (other, _) => panic!("`{}`: expected a grant, got {other:?}", self.what),
        }
    }

    /// True while no reply came.
    fn still_waiting(&self) -> bool {
        match self.rx.try_recv() {
            Err(mpsc::TryRecvError::Empty) => true,
            Ok(reply) => panic!("`{}` should still wait, but got {reply:?}", self.what),
            Err(mpsc::TryRecvError::Disconnected) => {
                panic!("`{}`: its thread ended without a reply", self.what)
            }
        }
    }
}

/// A child process killed when dropped (also when the test fails).
struct ChildGuard(Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

// ---------------------------------------------------------------------------
// Read-write lock
// ---------------------------------------------------------------------------

#[test]
fn rw_read_is_shared_write_is_exclusive_and_both_are_reentrant() {
    let s = Server::start();
    let mut con = s.conn();

    let r1 = granted(rwacq(&mut con, "k", "r1", "READ", &[]), "r1 READ");
    let r2 = granted(rwacq(&mut con, "k", "r2", "READ", &["PX", "60000"]), "r2");
    let r3 = granted(rwacq(&mut con, "k", "r3", "read", &[]), "r3 READ");
    assert!(r1 < r2 && r2 < r3, "tokens must grow: {r1} {r2} {r3}");
    // Reentry: same token, count grows.
    assert_eq!(
        granted(rwacq(&mut con, "k", "r1", "READ", &[]), "r1 again"),
        r1
    );
    let i = info_some(&mut con, "k");
    assert_eq!(i.kind, "rw");
    assert_eq!(i.token, r3);
    assert_eq!(i.holders.len(), 3, "{i:#?}");
    assert_eq!(
        i.holder("r1", "read").map(|h| (h.count, h.token)),
        Some((2, r1))
    );
    assert_eq!(i.holder("r2", "read").map(|h| h.count), Some(1));
    assert!(i.waiters.is_empty());

    // WRITE is refused while others read (no WAIT: no trace left).
    denied(
        rwacq(&mut con, "k", "w", "WRITE", &[]),
        "w WRITE while read",
    );
    assert!(info_some(&mut con, "k").waiters.is_empty());

    // Releases: count 2 -> 0 (still held), then 1.
    assert_eq!(release_ok(&mut con, "k", "r1", Some("READ")), 0);
    assert_eq!(release_ok(&mut con, "k", "r1", Some("READ")), 1);
    assert_eq!(release_ok(&mut con, "k", "r2", None), 1);
    assert_eq!(release_ok(&mut con, "k", "r3", Some("read")), 1);
    assert!(info(&mut con, "k").is_none(), "an empty lock leaves no key");
    let e = expect_err(release(&mut con, "k", "r1", Some("READ")));
    assert!(e.starts_with("NOTHELD"), "{e}");

    // WRITE: exclusive and reentrant.
    let w = granted(rwacq(&mut con, "k", "w", "WRITE", &[]), "w WRITE");
    assert!(w > r3);
    assert_eq!(
        granted(
            rwacq(&mut con, "k", "w", "WRITE", &["PX", "60000"]),
            "w again"
        ),
        w
    );
    denied(
        rwacq(&mut con, "k", "r1", "READ", &[]),
        "READ while written",
    );
    denied(
        rwacq(&mut con, "k", "w2", "WRITE", &[]),
        "WRITE while written",
    );
    let i = info_some(&mut con, "k");
    assert_eq!(i.holders.len(), 1, "{i:#?}");
    assert_eq!(
        i.holder("w", "write").map(|h| (h.count, h.token)),
        Some((2, w))
    );
    assert!(i.waiters.is_empty());
    assert_eq!(release_ok(&mut con, "k", "w", Some("WRITE")), 0);
    assert_eq!(release_ok(&mut con, "k", "w", None), 1);
    assert!(info(&mut con, "k").is_none());
}

#[test]
fn rw_downgrade_and_release_needs_the_mode_when_both_are_held() {
    let s = Server::start();
    let mut con = s.conn();

    let w = granted(rwacq(&mut con, "k", "a", "WRITE", &[]), "a WRITE");
    // Downgrade: READ at once, a new hold with a greater token.
    let r = granted(rwacq(&mut con, "k", "a", "READ", &[]), "a READ (downgrade)");
    assert!(r > w, "the READ hold is new: {r} > {w}");
    let i = info_some(&mut con, "k");
    assert_eq!(i.holder("a", "write").map(|h| h.token), Some(w));
    assert_eq!(i.holder("a", "read").map(|h| h.token), Some(r));

    // Both held: RELEASE without a mode names the problem and changes nothing.
    let e = expect_err(release(&mut con, "k", "a", None));
    assert!(
        e.starts_with("ERR the owner holds both READ and WRITE"),
        "unexpected error: {e}"
    );
    let after = info_some(&mut con, "k");
    assert_eq!(after.holders.len(), 2, "{after:#?}");

    // Others still wait while a holds WRITE.
    denied(rwacq(&mut con, "k", "b", "READ", &[]), "b READ");
    let c = Pending::spawn(&s, &["DLOCK.RWACQUIRE", "k", "c", "READ", "WAIT", "20000"]);
    wait_waiters(&mut con, "k", &["c"]);

    // Releasing WRITE answers 1 while the READ hold stays; others may read,
    // and the reader waiting on the server is served.
    assert_eq!(release_ok(&mut con, "k", "a", Some("WRITE")), 1);
    let (ct, _) = c.wait_token(SOON);
    assert!(ct > r);
    let i = info_some(&mut con, "k");
    assert!(i.holder("a", "read").is_some());
    assert!(i.holder("a", "write").is_none());
    assert!(i.holder("c", "read").is_some(), "{i:#?}");
    granted(
        rwacq(&mut con, "k", "b", "READ", &[]),
        "b READ after a's WRITE",
    );
    assert_eq!(release_ok(&mut con, "k", "c", None), 1);
    // Only READ left: the mode may be left out.
    assert_eq!(release_ok(&mut con, "k", "a", None), 1);
    assert_eq!(release_ok(&mut con, "k", "b", None), 1);
    assert!(info(&mut con, "k").is_none());

    // A mode the owner does not hold: NOTHELD, nothing changes.
    granted(rwacq(&mut con, "k", "c", "READ", &[]), "c READ");
    let e = expect_err(release(&mut con, "k", "c", Some("WRITE")));
    assert!(e.starts_with("NOTHELD"), "{e}");
    assert_eq!(info_some(&mut con, "k").holders.len(), 1);
}

#[test]
fn rw_only_reader_upgrades_at_once() {
    let s = Server::start();
    let mut con = s.conn();

    let r = granted(rwacq(&mut con, "k", "a", "READ", &[]), "a READ");
    let w = granted(rwacq(&mut con, "k", "a", "WRITE", &[]), "a WRITE (upgrade)");
    assert!(w > r);
    let i = info_some(&mut con, "k");
    assert_eq!(i.holders.len(), 2, "{i:#?}");
    assert!(i.holder("a", "read").is_some() && i.holder("a", "write").is_some());
    denied(
        rwacq(&mut con, "k", "b", "READ", &[]),
        "b READ while a writes",
    );
    // Release WRITE, then READ; with WRITE gone b may read.
    assert_eq!(release_ok(&mut con, "k", "a", Some("WRITE")), 1);
    granted(rwacq(&mut con, "k", "b", "READ", &[]), "b READ");
}

#[test]
fn rw_second_upgrader_gets_deadlock_error_and_server_never_deadlocks() {
    let s = Server::start();
    let mut con = s.conn();

    let r1 = granted(rwacq(&mut con, "k", "r1", "READ", &[]), "r1 READ");
    granted(rwacq(&mut con, "k", "r2", "READ", &[]), "r2 READ");

    // r1 is not alone: its upgrade waits on the server.
    let up = Pending::spawn(
        &s,
        &["DLOCK.RWACQUIRE", "k", "r1", "WRITE", "WAIT", "20000"],
    );
    let i = wait_waiters(&mut con, "k", &["r1"]);
    assert_eq!(i.waiters[0].mode, "write");
    assert_eq!(i.waiters[0].state, "blocked");

    // The second upgrader fails at once, with and without WAIT.
    let e = expect_err(rwacq(&mut con, "k", "r2", "WRITE", &[]));
    assert!(e.starts_with("DEADLOCK"), "unexpected error: {e}");
    let t0 = Instant::now();
    let e = expect_err(rwacq(&mut con, "k", "r2", "WRITE", &["WAIT", "20000"]));
    assert!(e.starts_with("DEADLOCK"), "unexpected error: {e}");
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "DEADLOCK with WAIT must come at once, took {:?}",
        t0.elapsed()
    );
    // Nothing changed; the server still answers; r1 still waits.
    let i = info_some(&mut con, "k");
    assert_eq!(i.waiter_owners(), vec!["r1"], "{i:#?}");
    assert_eq!(i.holders.len(), 2, "{i:#?}");
    let pong: String = redis::cmd("PING").query(&mut con).unwrap();
    assert_eq!(pong, "PONG");
    assert!(up.still_waiting());

    // A waiting upgrader counts as a waiting writer: new readers queue behind.
    denied(
        rwacq(&mut con, "k", "r3", "READ", &[]),
        "new reader behind upgrader",
    );
    // r2 re-enters READ (it already holds it).
    granted(rwacq(&mut con, "k", "r2", "READ", &[]), "r2 READ reentry");

    // r2 lets go of READ: r1 upgrades.
    assert_eq!(release_ok(&mut con, "k", "r2", Some("READ")), 0);
    assert!(up.still_waiting());
    assert_eq!(release_ok(&mut con, "k", "r2", Some("READ")), 1);
    let (w, _) = up.wait_token(SOON);
    assert!(w > r1);
    let i = info_some(&mut con, "k");
    assert_eq!(i.holder("r1", "write").map(|h| h.token), Some(w), "{i:#?}");
    assert!(i.holder("r1", "read").is_some());
    assert!(i.waiters.is_empty(), "{i:#?}");
}

#[test]
fn rw_writer_preference_new_readers_wait_holders_reenter() {
    let s = Server::start();
    let mut con = s.conn();

    let r1 = granted(rwacq(&mut con, "k", "r1", "READ", &[]), "r1 READ");
    let writer = Pending::spawn(&s, &["DLOCK.RWACQUIRE", "k", "w", "WRITE", "WAIT", "20000"]);
    let i = wait_waiters(&mut con, "k", &["w"]);
    assert_eq!(i.waiters[0].state, "blocked");

    // A new reader gets nil (and leaves no trace) ...
    denied(rwacq(&mut con, "k", "r2", "READ", &[]), "new reader");
    assert_eq!(info_some(&mut con, "k").waiter_owners(), vec!["w"]);
    // ... while the owner that already reads re-enters with its token.
    assert_eq!(
        granted(rwacq(&mut con, "k", "r1", "READ", &[]), "r1 reentry"),
        r1
    );
    assert_eq!(
        info_some(&mut con, "k")
            .holder("r1", "read")
            .map(|h| h.count),
        Some(2)
    );
    // A new reader that waits queues behind the writer.
    let reader = Pending::spawn(&s, &["DLOCK.RWACQUIRE", "k", "r3", "READ", "WAIT", "20000"]);
    wait_waiters(&mut con, "k", &["w", "r3"]);

    assert_eq!(release_ok(&mut con, "k", "r1", Some("READ")), 0);
    assert!(writer.still_waiting());
    assert_eq!(release_ok(&mut con, "k", "r1", Some("READ")), 1);
    let (wt, _) = writer.wait_token(SOON);
    assert!(wt > r1);
    let i = wait_waiters(&mut con, "k", &["r3"]);
    assert_eq!(i.holder_owners(), vec!["w"]);
    assert!(reader.still_waiting());

    assert_eq!(release_ok(&mut con, "k", "w", None), 1);
    let (rt, _) = reader.wait_token(SOON);
    assert!(rt > wt);
}

#[test]
fn rw_each_hold_has_its_own_lease() {
    let s = Server::start();
    let mut con = s.conn();

    granted(
        rwacq(&mut con, "k", "short", "READ", &["PX", "300"]),
        "short",
    );
    granted(
        rwacq(&mut con, "k", "long", "READ", &["PX", "5000"]),
        "long",
    );
    let w = Pending::spawn(&s, &["DLOCK.RWACQUIRE", "k", "w", "WRITE", "WAIT", "20000"]);
    wait_waiters(&mut con, "k", &["w"]);
    let mut last = None;
    let gone = wait_until(Duration::from_secs(4), || {
        last = info(&mut con, "k");
        last.as_ref().map(Info::holder_owners) == Some(vec!["long".to_string()])
    });
    assert!(gone, "only the long hold should remain: {last:#?}");
    let e = expect_err(release(&mut con, "k", "short", Some("READ")));
    assert!(e.starts_with("NOTHELD"), "{e}");
    // The writer still waits for the other hold.
    assert!(w.still_waiting());
    assert_eq!(last.unwrap().waiter_owners(), vec!["w"]);
    assert_eq!(release_ok(&mut con, "k", "long", Some("READ")), 1);
    w.wait_token(SOON);
}

#[test]
fn rw_writer_leaving_grants_every_head_reader_together() {
    let s = Server::start();
    let mut con = s.conn();

    let w = granted(rwacq(&mut con, "k", "w", "WRITE", &[]), "w WRITE");
    let mut readers = Vec::new();
    let mut order: Vec<String> = Vec::new();
    for i in 0..4 {
        let name = format!("r{i}");
        readers.push(Pending::spawn(
            &s,
            &["DLOCK.RWACQUIRE", "k", &name, "READ", "WAIT", "10000"],
        ));
        order.push(name);
        let expected: Vec<&str> = order.iter().map(String::as_str).collect();
        wait_waiters(&mut con, "k", &expected);
    }
    let w2 = Pending::spawn(
        &s,
        &["DLOCK.RWACQUIRE", "k", "w2", "WRITE", "WAIT", "10000"],
    );
    order.push("w2".into());
    let expected: Vec<&str> = order.iter().map(String::as_str).collect();
    wait_waiters(&mut con, "k", &expected);
    // A reader behind w2 is not at the head: it waits for w2.
    let late = Pending::spawn(
        &s,
        &["DLOCK.RWACQUIRE", "k", "late", "READ", "WAIT", "10000"],
    );
    order.push("late".into());
    let expected: Vec<&str> = order.iter().map(String::as_str).collect();
    wait_waiters(&mut con, "k", &expected);

    // One release grants all four readers: no other release happens.
    let t0 = Instant::now();
    assert_eq!(release_ok(&mut con, "k", "w", None), 1);
    let mut tokens = Vec::new();
    for r in &readers {
        let (t, at) = r.wait_token(SOON);
        assert!(t > w);
        assert!(
            at.duration_since(t0) < Duration::from_secs(5),
            "a reader took {:?} after the writer left",
            at.duration_since(t0)
        );
        tokens.push(t);
    }
    let mut uniq = tokens.clone();
    uniq.sort_unstable();
    uniq.dedup();
    assert_eq!(
        uniq.len(),
        4,
        "each READ hold has its own token: {tokens:?}"
    );

    // The writer behind them still waits while they read.
    let i = info_some(&mut con, "k");
    let mut holders = i.holder_owners();
    holders.sort();
    assert_eq!(holders, vec!["r0", "r1", "r2", "r3"], "{i:#?}");
    assert_eq!(i.waiter_owners(), vec!["w2", "late"]);
    assert!(w2.still_waiting());
    assert!(late.still_waiting());

    for (n, r) in ["r0", "r1", "r2"].iter().enumerate() {
        assert_eq!(release_ok(&mut con, "k", r, None), 1, "release #{n}");
    }
    assert!(w2.still_waiting());
    assert_eq!(release_ok(&mut con, "k", "r3", None), 1);
    let (t2, _) = w2.wait_token(SOON);
    assert!(tokens.iter().all(|&t| t2 > t));
    let i = wait_waiters(&mut con, "k", &["late"]);
    assert_eq!(i.holder_owners(), vec!["w2"]);
    assert!(late.still_waiting());
    assert_eq!(release_ok(&mut con, "k", "w2", None), 1);
    let (tl, _) = late.wait_token(SOON);
    assert!(tl > t2);
}

#[test]
fn rw_write_lease_end_grants_every_waiting_reader() {
    let s = Server::start();
    let mut con = s.conn();

    let w = granted(rwacq(&mut con, "k", "w", "WRITE", &["PX", "60000"]), "w");
    let mut readers = Vec::new();
    let mut order: Vec<String> = Vec::new();
    for i in 0..3 {
        let name = format!("r{i}");
        readers.push(Pending::spawn(
            &s,
            &["DLOCK.RWACQUIRE", "k", &name, "READ", "WAIT", "20000"],
        ));
        order.push(name);
        let expected: Vec<&str> = order.iter().map(String::as_str).collect();
        wait_waiters(&mut con, "k", &expected);
    }
    // Shorten the writer's lease. No release: the lease ends and all three
    // readers are served together.
    let renewed = cmd_str(&mut con, &["DLOCK.RENEW", "k", "w", "PX", "300"]).expect("RENEW");
    assert_eq!(int(&renewed), 1);
    for r in &readers {
        let (t, _) = r.wait_token(SOON);
        assert!(t > w);
    }
    let i = info_some(&mut con, "k");
    let mut holders = i.holder_owners();
    holders.sort();
    assert_eq!(holders, order, "{i:#?}");
    assert!(i.waiters.is_empty());
}

#[test]
fn rw_writer_that_gives_up_or_disconnects_lets_queued_readers_in() {
    let s = Server::start();
    let mut con = s.conn();
    granted(rwacq(&mut con, "k", "r1", "READ", &[]), "r1");

    // A writer whose WAIT ends: the reader queued behind it is served.
    let w = Pending::spawn(&s, &["DLOCK.RWACQUIRE", "k", "w", "WRITE", "WAIT", "1000"]);
    wait_waiters(&mut con, "k", &["w"]);
    let r2 = Pending::spawn(&s, &["DLOCK.RWACQUIRE", "k", "r2", "READ", "WAIT", "20000"]);
    wait_waiters(&mut con, "k", &["w", "r2"]);
    match w.wait(SOON) {
        (Ok(None), _) => {}
        other => panic!("the writer's WAIT should end with nil: {other:?}"),
    }
    r2.wait_token(SOON);
    let i = info_some(&mut con, "k");
    assert!(i.waiters.is_empty(), "{i:#?}");
    assert_eq!(i.holders.len(), 2);

    // A writer whose connection closes: the reader behind it is served.
    let mut raw = TcpStream::connect(("127.0.0.1", s.port)).expect("connect");
    let packed = redis::cmd("DLOCK.RWACQUIRE")
        .arg("k")
        .arg("wgone")
        .arg("WRITE")
        .arg("WAIT")
        .arg("30000")
        .get_packed_command();
    raw.write_all(&packed).expect("send");
    wait_waiters(&mut con, "k", &["wgone"]);
    let r3 = Pending::spawn(&s, &["DLOCK.RWACQUIRE", "k", "r3", "READ", "WAIT", "20000"]);
    wait_waiters(&mut con, "k", &["wgone", "r3"]);
    assert!(r3.still_waiting());
    let _ = raw.shutdown(std::net::Shutdown::Both);
    drop(raw);
    r3.wait_token(SOON);
    let i = info_some(&mut con, "k");
    assert!(i.waiters.is_empty(), "{i:#?}");
    assert_eq!(i.holders.len(), 3);
}

#[test]
fn rw_upgrader_that_gives_up_leaves_no_deadlock_behind() {
    let s = Server::start();
    let mut con = s.conn();
    granted(rwacq(&mut con, "k", "r1", "READ", &[]), "r1");
    granted(rwacq(&mut con, "k", "r2", "READ", &[]), "r2");
    // r1's upgrade times out: nil, and no place left behind.
    denied(
        rwacq(&mut con, "k", "r1", "WRITE", &["WAIT", "200"]),
        "r1 upgrade that times out",
    );
    assert!(info_some(&mut con, "k").waiters.is_empty());
    // r2 may now wait to upgrade (no DEADLOCK), and gets WRITE when r1 leaves.
    denied(
        rwacq(&mut con, "k", "r2", "WRITE", &[]),
        "r2 upgrade no WAIT",
    );
    let up = Pending::spawn(
        &s,
        &["DLOCK.RWACQUIRE", "k", "r2", "WRITE", "WAIT", "20000"],
    );
    wait_waiters(&mut con, "k", &["r2"]);
    assert_eq!(release_ok(&mut con, "k", "r1", None), 1);
    up.wait_token(SOON);
    let i = info_some(&mut con, "k");
    assert!(i.holder("r2", "write").is_some(), "{i:#?}");
}

#[test]
fn rw_writer_is_not_starved_by_looping_readers() {
    let s = Server::start();
    let mut con = s.conn();
    let stop = Arc::new(AtomicBool::new(false));
    let grants = Arc::new(AtomicUsize::new(0));
    let errors = Arc::new(Mutex::new(Vec::<String>::new()));
    let mut granted_once: Vec<Arc<AtomicBool>> = Vec::new();
    let mut handles = Vec::new();

    for i in 0..8 {
        let mut c = s.conn();
        let (stop, grants, errors) = (stop.clone(), grants.clone(), errors.clone());
        let once = Arc::new(AtomicBool::new(false));
        granted_once.push(once.clone());
        handles.push(thread::spawn(move || {
            let owner = format!("reader-{i}");
            while !stop.load(Ordering::SeqCst) {
                match rwacq(&mut c, "k", &owner, "READ", &["PX", "200", "WAIT", "2000"]) {
                    Ok(Some(_)) => {
                        grants.fetch_add(1, Ordering::SeqCst);
                        once.store(true, Ordering::SeqCst);
                        thread::sleep(Duration::from_millis(20));
                        match release(&mut c, "k", &owner, Some("READ")) {
                            Ok(_) => {}
                            // A slow machine may let the 200 ms lease run out.
                            Err(e) if err_string(&e).starts_with("NOTHELD") => {}
                            Err(e) => errors.lock().unwrap().push(err_string(&e)),
                        }
                    }
                    Ok(None) => {}
                    Err(e) => {
                        errors.lock().unwrap().push(err_string(&e));
                        return;
                    }
                }
            }
        }));
    }
    // The readers are all cycling before the writer arrives.
    let cycling = wait_until(Duration::from_secs(20), || {
        granted_once.iter().all(|g| g.load(Ordering::SeqCst))
    });
    assert!(cycling, "not every reader got READ; errors: {errors:?}");

    let t0 = Instant::now();
    let writer = Pending::spawn(&s, &["DLOCK.RWACQUIRE", "k", "w", "WRITE", "WAIT", "10000"]);
    let (wt, at) = writer.wait_token(Duration::from_secs(15));
    let took = at.duration_since(t0);
    eprintln!("writer granted after {took:?} behind 8 looping readers");
    assert!(wt > 0);
    assert!(
        took < Duration::from_secs(3),
        "the writer waited {took:?} behind looping readers (grants so far: {})",
        grants.load(Ordering::SeqCst)
    );
    let i = info_some(&mut con, "k");
    assert_eq!(i.holder_owners(), vec!["w"], "{i:#?}");

    stop.store(true, Ordering::SeqCst);
    assert_eq!(release_ok(&mut con, "k", "w", None), 1);
    for h in handles {
        h.join().expect("reader thread");
    }
    let errors = errors.lock().unwrap();
    assert!(errors.is_empty(), "reader errors: {errors:?}");
}

// ---------------------------------------------------------------------------
// Fair lock
// ---------------------------------------------------------------------------

#[test]
fn fair_grants_in_first_request_order_polling_and_waiting() {
    let s = Server::start();
    let mut con = s.conn();
    let h = granted(fairacq(&mut con, "k", "holder", &["PX", "60000"]), "holder");

    let (tx, rx) = mpsc::channel::<Result<(String, i64), String>>();
    let mut names: Vec<String> = Vec::new();
    let mut handles = Vec::new();
    for i in 0..10 {
        let name = format!("c{i}");
        let polling = i % 2 == 0;
        let mut c = s.conn();
        let tx = tx.clone();
        let owner = name.clone();
        handles.push(thread::spawn(move || {
            let start = Instant::now();
            let token = loop {
                let r = if polling {
                    fairacq(&mut c, "k", &owner, &["PX", "30000"])
                } else {
                    fairacq(&mut c, "k", &owner, &["PX", "30000", "WAIT", "10000"])
                };
                match r {
                    Ok(Some(t)) => break t,
                    Ok(None) if start.elapsed() < Duration::from_secs(60) => {
                        if polling {
                            thread::sleep(Duration::from_millis(20));
                        }
                    }
                    Ok(None) => {
                        let _ = tx.send(Err(format!("{owner}: never granted")));
                        return;
                    }
                    Err(e) => {
                        let _ = tx.send(Err(format!("{owner}: {}", err_string(&e))));
                        return;
                    }
                }
            };
            let _ = tx.send(Ok((owner.clone(), token)));
            thread::sleep(Duration::from_millis(30));
            if let Err(e) = release(&mut c, "k", &owner, None) {
                let _ = tx.send(Err(format!("{owner} release: {}", err_string(&e))));
            }
        }));
        names.push(name);
        // Start the next client only once this one has its place.
        let expected: Vec<&str> = names.iter().map(String::as_str).collect();
        let i_info = wait_waiters(&mut con, "k", &expected);
        let state = &i_info.waiter(&names[i]).unwrap().state;
        let want = if polling { "queued" } else { "blocked" };
        assert_eq!(state, want, "{i_info:#?}");
    }
    drop(tx);

    assert_eq!(release_ok(&mut con, "k", "holder", None), 1);
    let mut order = Vec::new();
    let mut tokens = vec![h];
    for _ in 0..10 {
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(Ok((name, t))) => {
                order.push(name);
                tokens.push(t);
            }
            Ok(Err(e)) => panic!("fair client failed: {e} (order so far {order:?})"),
            Err(_) => panic!("fair clients stalled; order so far {order:?}"),
        }
    }
    assert_eq!(order, names, "grant order must be first-request order");
    assert!(
        tokens.windows(2).all(|w| w[1] > w[0]),
        "tokens must grow in grant order: {tokens:?}"
    );
    for h in handles {
        h.join().expect("fair client thread");
    }
    if let Ok(Err(e)) = rx.try_recv() {
        panic!("{e}");
    }
    let empty = wait_until(SOON, || info(&mut con, "k").is_none());
    assert!(empty, "lock left behind: {:#?}", info(&mut con, "k"));
}

#[test]
fn fair_queued_owner_that_stops_asking_loses_its_place() {
    let s = Server::start();
    let mut con = s.conn();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("dlock.fair-queue-timeout-ms")
        .arg("300")
        .query(&mut con)
        .expect("CONFIG SET dlock.fair-queue-timeout-ms");

    granted(fairacq(&mut con, "k", "holder", &[]), "holder");
    let t0 = Instant::now();
    denied(fairacq(&mut con, "k", "quitter", &[]), "quitter polls once");
    let i = info_some(&mut con, "k");
    let q = i.waiter("quitter").expect("quitter queued");
    assert_eq!(q.state, "queued");
    assert!(q.ttl <= 300, "{q:?}");

    let next = Pending::spawn(&s, &["DLOCK.FAIRACQUIRE", "k", "next", "WAIT", "20000"]);
    wait_waiters(&mut con, "k", &["quitter", "next"]);

    // The lock is free, but the quitter is first: next must not pass it
    // while its place lasts (checked on one atomic INFO snapshot).
    assert_eq!(release_ok(&mut con, "k", "holder", None), 1);
    let i = info_some(&mut con, "k");
    if i.waiter("quitter").is_some() {
        assert!(i.holders.is_empty(), "next jumped the queue: {i:#?}");
    }

    // The quitter's place ends on the server's clock and the queue moves on
    // by itself: next is served.
    thread::sleep(Duration::from_secs(1));
    let (_, at) = next.wait_token(SOON);
    assert!(
        at.duration_since(t0) >= Duration::from_millis(250),
        "next was served before the quitter's place ended"
    );
    let i = info_some(&mut con, "k");
    assert!(i.waiter("quitter").is_none(), "{i:#?}");
    // Asking again takes a new place at the back.
    denied(fairacq(&mut con, "k", "quitter", &[]), "quitter again");
    let i = info_some(&mut con, "k");
    assert_eq!(i.holder_owners(), vec!["next"]);
    assert_eq!(i.waiter_owners(), vec!["quitter"]);
}

#[test]
fn fair_disconnected_waiter_leaves_the_queue_at_once() {
    let s = Server::start();
    let mut con = s.conn();
    granted(fairacq(&mut con, "k", "holder", &[]), "holder");

    // A raw connection we can close while it waits on the server.
    let mut raw = TcpStream::connect(("127.0.0.1", s.port)).expect("connect");
    let packed = redis::cmd("DLOCK.FAIRACQUIRE")
        .arg("k")
        .arg("gone")
        .arg("WAIT")
        .arg("30000")
        .get_packed_command();
    raw.write_all(&packed).expect("send");
    let i = wait_waiters(&mut con, "k", &["gone"]);
    assert_eq!(i.waiters[0].state, "blocked");
    let next = Pending::spawn(&s, &["DLOCK.FAIRACQUIRE", "k", "next", "WAIT", "20000"]);
    wait_waiters(&mut con, "k", &["gone", "next"]);

    let _ = raw.shutdown(std::net::Shutdown::Both);
    drop(raw);
    let t0 = Instant::now();
    wait_waiters(&mut con, "k", &["next"]);
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "the disconnected waiter lingered {:?}",
        t0.elapsed()
    );

    assert_eq!(release_ok(&mut con, "k", "holder", None), 1);
    next.wait_token(SOON);
    let i = info_some(&mut con, "k");
    assert_eq!(i.holder_owners(), vec!["next"]);
    assert!(i.waiters.is_empty(), "{i:#?}");
}

#[test]
fn fair_sigkilled_waiter_process_drops_out_and_queue_moves_on() {
    let s = Server::start();
    let mut con = s.conn();
    granted(fairacq(&mut con, "k", "holder", &[]), "holder");

    let child = Command::new("redis-cli")
        .args(["-p", &s.port.to_string()])
        .args(["DLOCK.FAIRACQUIRE", "k", "dead", "WAIT", "30000"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn redis-cli (apt-get install redis-tools)");
    let mut child = ChildGuard(child);
    let i = wait_waiters(&mut con, "k", &["dead"]);
    assert_eq!(i.waiters[0].state, "blocked");
    let next = Pending::spawn(&s, &["DLOCK.FAIRACQUIRE", "k", "next", "WAIT", "20000"]);
    wait_waiters(&mut con, "k", &["dead", "next"]);

    child.0.kill().expect("SIGKILL redis-cli");
    child.0.wait().expect("reap redis-cli");
    wait_waiters(&mut con, "k", &["next"]);
    assert!(next.still_waiting());

    assert_eq!(release_ok(&mut con, "k", "holder", None), 1);
    next.wait_token(SOON);
    let i = info_some(&mut con, "k");
    assert_eq!(i.holder_owners(), vec!["next"]);
    assert!(i.waiters.is_empty(), "{i:#?}");
}

#[test]
fn fair_timed_out_waiter_keeps_its_place_until_the_queue_timeout_then_the_queue_moves_on() {
    let s = Server::start();
    let mut con = s.conn();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("dlock.fair-queue-timeout-ms")
        .arg("500")
        .query(&mut con)
        .expect("CONFIG SET dlock.fair-queue-timeout-ms");
    granted(fairacq(&mut con, "k", "holder", &[]), "holder");

    // a waits on the server and gives up: it keeps a queued place.
    let t0 = Instant::now();
    denied(fairacq(&mut con, "k", "a", &["WAIT", "100"]), "a times out");
    let next = Pending::spawn(&s, &["DLOCK.FAIRACQUIRE", "k", "next", "WAIT", "20000"]);
    wait_waiters(&mut con, "k", &["a", "next"]);
    // The lock is free, but a is first: next waits while a's place lasts.
    assert_eq!(release_ok(&mut con, "k", "holder", None), 1);
    let i = info_some(&mut con, "k");
    if i.waiter("a").is_some() {
        assert!(i.holders.is_empty(), "next jumped the queue: {i:#?}");
    }
    // a never asks again: its place ends and next is served by itself.
    let (_, at) = next.wait_token(SOON);
    assert!(
        at.duration_since(t0) >= Duration::from_millis(500),
        "next was served {:?} after a's first request, before a's place ended",
        at.duration_since(t0)
    );
    let i = info_some(&mut con, "k");
    assert_eq!(i.holder_owners(), vec!["next"]);
    assert!(i.waiters.is_empty(), "{i:#?}");
}

#[test]
fn fair_wait_that_times_out_keeps_a_queued_place() {
    let s = Server::start();
    let mut con = s.conn();
    granted(fairacq(&mut con, "k", "holder", &[]), "holder");

    // Default dlock.fair-queue-timeout-ms: 5000.
    denied(
        fairacq(&mut con, "k", "a", &["WAIT", "200"]),
        "a's WAIT times out",
    );
    let i = info_some(&mut con, "k");
    let a = i
        .waiter("a")
        .unwrap_or_else(|| panic!("a lost its place: {i:#?}"));
    assert_eq!(a.state, "queued", "{i:#?}");
    assert!(a.ttl > 0 && a.ttl <= 5000, "{a:?}");

    // b asks later, so b is behind a — even once the lock is free.
    denied(fairacq(&mut con, "k", "b", &[]), "b");
    assert_eq!(info_some(&mut con, "k").waiter_owners(), vec!["a", "b"]);
    // a waits again on the server: from its old place, ahead of b.
    denied(
        fairacq(&mut con, "k", "a", &["WAIT", "200"]),
        "a waits again and times out",
    );
    let i = info_some(&mut con, "k");
    assert_eq!(i.waiter_owners(), vec!["a", "b"], "{i:#?}");
    assert_eq!(i.waiters[0].state, "queued");
    assert_eq!(release_ok(&mut con, "k", "holder", None), 1);
    denied(fairacq(&mut con, "k", "b", &[]), "b before a");
    let ta = granted(fairacq(&mut con, "k", "a", &[]), "a claims its place");
    let i = info_some(&mut con, "k");
    assert_eq!(i.holder("a", "exclusive").map(|h| h.token), Some(ta));
    assert_eq!(i.waiter_owners(), vec!["b"]);
}

// ---------------------------------------------------------------------------
// Kinds
// ---------------------------------------------------------------------------

#[test]
fn wrongkind_when_mixing_kinds_on_one_key() {
    let s = Server::start();
    let mut con = s.conn();
    granted(
        token_reply(cmd_str(&mut con, &["DLOCK.ACQUIRE", "m", "o"])),
        "mutex",
    );
    granted(rwacq(&mut con, "r", "o", "READ", &[]), "rw");
    granted(fairacq(&mut con, "f", "o", &[]), "fair");
    let before: Vec<Info> = ["m", "r", "f"]
        .iter()
        .map(|k| info_some(&mut con, k))
        .collect();

    let cases: [(&[&str], &str); 8] = [
        (&["DLOCK.RWACQUIRE", "m", "x", "READ"], "mutex"),
        (
            &["DLOCK.RWACQUIRE", "m", "x", "WRITE", "WAIT", "100"],
            "mutex",
        ),
        (&["DLOCK.FAIRACQUIRE", "m", "x", "WAIT", "100"], "mutex"),
        (&["DLOCK.ACQUIRE", "r", "x"], "rw"),
        (&["DLOCK.FAIRACQUIRE", "r", "o"], "rw"),
        (&["DLOCK.ACQUIRE", "f", "o", "WAIT", "100"], "fair"),
        (&["DLOCK.RWACQUIRE", "f", "x", "READ"], "fair"),
        (
            &["DLOCK.RWACQUIRE", "f", "o", "WRITE", "WAIT", "100"],
            "fair",
        ),
    ];
    for (args, kind) in cases {
        let e = expect_err(cmd_str(&mut con, args));
        assert!(
            e.starts_with("WRONGKIND") && e.contains(kind),
            "{args:?}: expected WRONGKIND naming {kind}, got {e}"
        );
    }
    // A READ|WRITE mode on a fair or mutex lock is an error too.
    for key in ["m", "f"] {
        let e = expect_err(release(&mut con, key, "o", Some("READ")));
        assert!(
            e.starts_with("ERR READ|WRITE applies only to rw locks"),
            "{e}"
        );
    }
    // Nothing changed.
    for (k, b) in ["m", "r", "f"].iter().zip(before) {
        let now = info_some(&mut con, k);
        assert_eq!(now.kind, b.kind);
        assert_eq!(now.token, b.token);
        assert_eq!(now.holder_owners(), b.holder_owners());
        assert!(now.waiters.is_empty(), "{k}: {now:#?}");
    }
}
