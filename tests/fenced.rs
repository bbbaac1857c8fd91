//! DLOCK.CHECK and DLOCK.FENCED on real servers: the token rule (a lease
//! that ended is not live, even before the timer removed the hold), the
//! reply relayed as the command's own, the FENCED refusal, the rules for
//! inner commands (script rules, blocking forms, MULTI, scripts, DLOCK.*),
//! keys (COMMAND GETKEYS, ACL key patterns, Cluster routing and CROSSSLOT),
//! the caller's ACL, the OOM rule, replication and AOF (what the command
//! did, never FENCED itself), and the INFO counters.

mod common;
use common::*;

use std::fs;
use std::time::{Duration, Instant};

use redis::{Connection, Value};

/// Long enough that no lease ends during a test.
const LONG: &str = "60000";
/// Bound for a reply that must come at once (a blocking form must not block).
const PROMPT: Duration = Duration::from_secs(5);
/// Start of the error of a command refused by the script rules.
const NOT_ALLOWED: &str = "ERR this command is not allowed inside DLOCK.FENCED";
/// Start of the error of a DLOCK.* command inside FENCED.
const NO_DLOCK: &str = "ERR DLOCK.FENCED does not run DLOCK.* commands";
const BAD_TOKEN: &str = "ERR token must be an integer from 1 to 9223372036854775807";

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

fn err(con: &mut Connection, args: &[&str]) -> String {
    expect_err(cmd_str(con, args))
}

fn assert_prefix(text: &str, prefix: &str) {
    assert!(
        text.starts_with(prefix),
        "expected an error starting with {prefix:?}, got {text:?}"
    );
}

fn get(con: &mut Connection, key: &str) -> Option<String> {
    match ok(con, &["GET", key]) {
        Value::Nil => None,
        Value::BulkString(b) => Some(String::from_utf8_lossy(&b).into_owned()),
        other => panic!("GET {key}: {other:?}"),
    }
}

/// Acquires a mutex and returns the token.
fn acquire(con: &mut Connection, key: &str, owner: &str, px: &str) -> i64 {
    int(con, &["DLOCK.ACQUIRE", key, owner, "PX", px])
}

/// `DLOCK.FENCED key token args...`
fn fenced(con: &mut Connection, key: &str, token: i64, args: &[&str]) -> redis::RedisResult<Value> {
    let t = token.to_string();
    let mut all = vec!["DLOCK.FENCED", key, t.as_str()];
    all.extend_from_slice(args);
    cmd_str(con, &all)
}

fn fenced_ok(con: &mut Connection, key: &str, token: i64, args: &[&str]) -> Value {
    fenced(con, key, token, args)
        .unwrap_or_else(|e| panic!("FENCED {key} {token} {args:?}: {}", err_string(&e)))
}

fn fenced_err(con: &mut Connection, key: &str, token: i64, args: &[&str]) -> String {
    expect_err(fenced(con, key, token, args))
}

fn check(con: &mut Connection, key: &str, token: i64) -> i64 {
    int(con, &["DLOCK.CHECK", key, &token.to_string()])
}

/// (fenced_run, fenced_refused) from `INFO dlock`.
fn counters(s: &Server) -> (u64, u64) {
    let f = |name: &str| -> u64 {
        s.info_field("dlock", name)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("INFO dlock has no {name}:\n{}", s.info("dlock")))
    };
    (f("dlock_fenced_run"), f("dlock_fenced_refused"))
}

/// The exact FENCED refusal for `token` on a printable `key`.
fn refusal(key: &str, token: i64) -> String {
    format!(
        "FENCED token {token} is not live on lock '{key}' (released, expired, force-released, superseded, or no lock); the command did not run"
    )
}

fn strings(v: &Value) -> Vec<String> {
    match v {
        Value::Array(items) => items
            .iter()
            .map(|i| match i {
                Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                Value::SimpleString(s) => s.clone(),
                other => format!("{other:?}"),
            })
            .collect(),
        other => panic!("expected an array, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------
// DLOCK.CHECK
// ---------------------------------------------------------------------------

#[test]
fn check_is_one_only_for_a_live_hold() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(check(&mut c, "lk", 1), 0, "no lock");
    let t = acquire(&mut c, "lk", "a", LONG);
    assert_eq!(check(&mut c, "lk", t), 1);
    assert_eq!(check(&mut c, "lk", t + 1), 0, "another token");
    assert_eq!(check(&mut c, "other", t), 0, "another key");
    // Reentry keeps the token live; one release of two keeps it live.
    assert_eq!(acquire(&mut c, "lk", "a", LONG), t);
    assert_eq!(int(&mut c, &["DLOCK.RELEASE", "lk", "a"]), 0);
    assert_eq!(check(&mut c, "lk", t), 1);
    assert_eq!(int(&mut c, &["DLOCK.RELEASE", "lk", "a"]), 1);
    assert_eq!(check(&mut c, "lk", t), 0, "released");

    let t = acquire(&mut c, "lk", "a", LONG);
    assert_eq!(int(&mut c, &["DLOCK.FORCERELEASE", "lk"]), 1);
    assert_eq!(check(&mut c, "lk", t), 0, "force-released");

    // rw: each reader's own token.
    let r1 = int(&mut c, &["DLOCK.RWACQUIRE", "rw", "r1", "READ", "PX", LONG]);
    let r2 = int(&mut c, &["DLOCK.RWACQUIRE", "rw", "r2", "READ", "PX", LONG]);
    assert_eq!((check(&mut c, "rw", r1), check(&mut c, "rw", r2)), (1, 1));
    int(&mut c, &["DLOCK.RELEASE", "rw", "r1"]);
    assert_eq!((check(&mut c, "rw", r1), check(&mut c, "rw", r2)), (0, 1));
    // fair
    let f = int(&mut c, &["DLOCK.FAIRACQUIRE", "fair", "o", "PX", LONG]);
    assert_eq!(check(&mut c, "fair", f), 1);
}

#[test]
fn check_after_the_lease_ended_and_a_new_holder() {
    let s = Server::start();
    let mut c = s.conn();
    let t1 = acquire(&mut c, "lk", "a", "200");
    assert_eq!(check(&mut c, "lk", t1), 1);
    // Wait for the lease to end (event-driven: B waits on the server).
    let t2 = int(
        &mut c,
        &["DLOCK.ACQUIRE", "lk", "b", "PX", LONG, "WAIT", "20000"],
    );
    assert!(t2 > t1);
    assert_eq!(check(&mut c, "lk", t1), 0, "superseded");
    assert_eq!(check(&mut c, "lk", t2), 1);
}

/// Inside one EXEC the expiry timer cannot run: after DEBUG SLEEP past the
/// lease, the hold is still stored (its key exists) but its token is no
/// longer live, FENCED refuses, and INFO (as of now) no longer lists it.
#[test]
fn a_lease_that_ended_is_not_live_before_the_timer_removed_the_hold() {
    let s = Server::start();
    let mut c = s.conn();
    let t = acquire(&mut c, "lk", "a", "100");
    let ts = t.to_string();
    assert_eq!(ok(&mut c, &["MULTI"]), Value::Okay);
    for args in [
        &["DEBUG", "SLEEP", "0.3"][..],
        &["EXISTS", "lk"],
        &["DLOCK.CHECK", "lk", &ts],
        &["DLOCK.FENCED", "lk", &ts, "SET", "x", "late"],
        &["DLOCK.INFO", "lk"],
    ] {
        assert_eq!(
            ok(&mut c, args),
            Value::SimpleString("QUEUED".into()),
            "{args:?}"
        );
    }
    let Value::Array(r) = ok(&mut c, &["EXEC"]) else {
        panic!("EXEC")
    };
    assert_eq!(r[1], Value::Int(1), "the timer ran inside EXEC?");
    assert_eq!(r[2], Value::Int(0), "CHECK on a lease that ended");
    assert_eq!(
        value_err_string(&r[3]).as_deref(),
        Some(refusal("lk", t).as_str())
    );
    assert_eq!(r[4], Value::Nil, "INFO lists a lease that ended");
    assert_eq!(get(&mut c, "x"), None);
}

#[test]
fn check_bad_input() {
    let s = Server::start();
    let mut c = s.conn();
    let t = acquire(&mut c, "lk", "a", LONG);
    assert_prefix(
        &err(&mut c, &["DLOCK.CHECK", "lk"]),
        "ERR wrong number of arguments",
    );
    assert_prefix(
        &err(&mut c, &["DLOCK.CHECK", "lk", "1", "2"]),
        "ERR wrong number of arguments",
    );
    for bad in [
        "0",
        "-1",
        "x",
        "1.5",
        "",
        "9223372036854775808",
        "99999999999999999999",
    ] {
        assert_prefix(&err(&mut c, &["DLOCK.CHECK", "lk", bad]), BAD_TOKEN);
        assert_prefix(
            &expect_err(cmd_str(
                &mut c,
                &["DLOCK.FENCED", "lk", bad, "SET", "x", "1"],
            )),
            BAD_TOKEN,
        );
    }
    assert_eq!(
        int(&mut c, &["DLOCK.CHECK", "lk", "9223372036854775807"]),
        0
    );
    ok(&mut c, &["SET", "str", "v"]);
    assert_prefix(&err(&mut c, &["DLOCK.CHECK", "str", "1"]), "WRONGTYPE");
    assert_prefix(
        &fenced_err(&mut c, "str", t, &["SET", "x", "1"]),
        "WRONGTYPE",
    );
    assert_prefix(
        &err(&mut c, &["DLOCK.FENCED", "lk", &t.to_string()]),
        "ERR wrong number of arguments",
    );
    assert_eq!(get(&mut c, "x"), None, "nothing ran");
    // Binary keys are fine; the refusal shows them as printable text only.
    let key: &[u8] = b"k\r\n\x00'\xff";
    let e = expect_err(cmd_raw(
        &mut c,
        &[b"DLOCK.FENCED", key, b"5", b"SET", b"x", b"1"],
    ));
    assert_eq!(
        e,
        "FENCED token 5 is not live on lock 'k?????' (released, expired, force-released, superseded, or no lock); the command did not run"
    );
}

// ---------------------------------------------------------------------------
// DLOCK.FENCED: run or refuse
// ---------------------------------------------------------------------------

#[test]
fn fenced_relays_the_commands_reply_and_its_errors() {
    let s = Server::start();
    let mut c = s.conn();
    let t = acquire(&mut c, "lk", "a", LONG);
    assert_eq!(fenced_ok(&mut c, "lk", t, &["SET", "x", "1"]), Value::Okay);
    assert_eq!(fenced_ok(&mut c, "lk", t, &["INCR", "x"]), Value::Int(2));
    assert_eq!(
        fenced_ok(&mut c, "lk", t, &["GET", "x"]),
        Value::BulkString(b"2".to_vec())
    );
    assert_eq!(fenced_ok(&mut c, "lk", t, &["GET", "nothing"]), Value::Nil);
    assert_eq!(
        fenced_ok(&mut c, "lk", t, &["PING"]),
        Value::SimpleString("PONG".into())
    );
    assert_eq!(
        fenced_ok(&mut c, "lk", t, &["MGET", "x", "nothing"]),
        Value::Array(vec![Value::BulkString(b"2".to_vec()), Value::Nil])
    );
    // The command's own errors, as its errors.
    ok(&mut c, &["SET", "s", "abc"]);
    assert_eq!(
        fenced_err(&mut c, "lk", t, &["INCR", "s"]),
        err(&mut c, &["INCR", "s"])
    );
    assert_eq!(
        fenced_err(&mut c, "lk", t, &["LPUSH", "s", "v"]),
        err(&mut c, &["LPUSH", "s", "v"])
    );
    assert_prefix(
        &fenced_err(&mut c, "lk", t, &["LPUSH", "s", "v"]),
        "WRONGTYPE",
    );
    // Rejections before the command runs.
    assert_eq!(
        fenced_err(&mut c, "lk", t, &["NOSUCHCOMMAND", "a"]),
        "ERR unknown command inside DLOCK.FENCED"
    );
    assert_eq!(
        expect_err(cmd_raw(
            &mut c,
            &[
                b"DLOCK.FENCED",
                b"lk",
                t.to_string().as_bytes(),
                b"GET\x00",
                b"x"
            ]
        )),
        "ERR unknown command inside DLOCK.FENCED"
    );
    assert_eq!(
        fenced_err(&mut c, "lk", t, &["GET"]),
        "ERR wrong number of arguments for the command inside DLOCK.FENCED"
    );
    assert_eq!(
        fenced_err(&mut c, "lk", t, &["GET", "a", "b"]),
        "ERR wrong number of arguments for the command inside DLOCK.FENCED"
    );
}

#[test]
fn fenced_replies_in_the_callers_protocol() {
    let s = Server::start();
    let mut c = s.conn();
    let t = acquire(&mut c, "lk", "a", LONG);
    ok(&mut c, &["HSET", "h", "f", "v"]);
    let resp2 = fenced_ok(&mut c, "lk", t, &["HGETALL", "h"]);
    assert_eq!(
        resp2,
        Value::Array(vec![
            Value::BulkString(b"f".to_vec()),
            Value::BulkString(b"v".to_vec())
        ])
    );
    let hello = ok(&mut c, &["HELLO", "3"]);
    assert!(matches!(hello, Value::Map(_)), "HELLO 3: {hello:?}");
    assert_eq!(
        fenced_ok(&mut c, "lk", t, &["HGETALL", "h"]),
        Value::Map(vec![(
            Value::BulkString(b"f".to_vec()),
            Value::BulkString(b"v".to_vec())
        )])
    );
    assert_eq!(
        fenced_ok(&mut c, "lk", t, &["HGETALL", "h"]),
        ok(&mut c, &["HGETALL", "h"])
    );
}

#[test]
fn fenced_refuses_unless_the_token_is_live_and_runs_nothing() {
    let s = Server::start();
    let mut c = s.conn();
    let (run0, refused0) = counters(&s);
    ok(&mut c, &["SET", "n", "0"]);
    // No lock at all.
    assert_eq!(
        fenced_err(&mut c, "lk", 7, &["INCR", "n"]),
        refusal("lk", 7)
    );
    let t = acquire(&mut c, "lk", "a", LONG);
    // Wrong token.
    assert_eq!(
        fenced_err(&mut c, "lk", t + 1, &["INCR", "n"]),
        refusal("lk", t + 1)
    );
    assert_eq!(fenced_ok(&mut c, "lk", t, &["INCR", "n"]), Value::Int(1));
    // Released.
    int(&mut c, &["DLOCK.RELEASE", "lk", "a"]);
    assert_eq!(
        fenced_err(&mut c, "lk", t, &["INCR", "n"]),
        refusal("lk", t)
    );
    // Force-released.
    let t = acquire(&mut c, "lk", "a", LONG);
    int(&mut c, &["DLOCK.FORCERELEASE", "lk"]);
    assert_eq!(
        fenced_err(&mut c, "lk", t, &["INCR", "n"]),
        refusal("lk", t)
    );
    // Whatever the command: the FENCED refusal comes first.
    assert_eq!(fenced_err(&mut c, "lk", t, &["MULTI"]), refusal("lk", t));
    assert_eq!(
        get(&mut c, "n").as_deref(),
        Some("1"),
        "a refused command ran"
    );
    // A command error is still a run.
    let t = acquire(&mut c, "lk", "a", LONG);
    ok(&mut c, &["SET", "s", "abc"]);
    assert_prefix(&fenced_err(&mut c, "lk", t, &["INCR", "s"]), "ERR");
    // Rule errors are neither run nor refused.
    assert_prefix(&fenced_err(&mut c, "lk", t, &["MULTI"]), NOT_ALLOWED);
    assert_prefix(
        &fenced_err(&mut c, "lk", t, &["DLOCK.INFO", "lk"]),
        NO_DLOCK,
    );
    let (run, refused) = counters(&s);
    assert_eq!((run - run0, refused - refused0), (2, 5));
}

/// The README walk-through: a holder paused past its lease writes late.
#[test]
fn a_paused_holders_late_write_is_refused() {
    let s = Server::start();
    let mut a = s.conn();
    let mut b = s.conn();
    let ta = acquire(&mut a, "lock:report", "worker-a", "300");
    assert_eq!(
        fenced_ok(&mut a, "lock:report", ta, &["SET", "report", "draft-by-a"]),
        Value::Okay
    );
    // A "pauses"; its lease ends, B gets the lock (waiting on the server).
    let tb = int(
        &mut b,
        &[
            "DLOCK.ACQUIRE",
            "lock:report",
            "worker-b",
            "PX",
            LONG,
            "WAIT",
            "20000",
        ],
    );
    assert!(tb > ta);
    assert_eq!(
        fenced_ok(&mut b, "lock:report", tb, &["SET", "report", "final-by-b"]),
        Value::Okay
    );
    // A wakes up and writes with its old token: refused, B's data stands.
    assert_eq!(
        fenced_err(&mut a, "lock:report", ta, &["SET", "report", "late-by-a"]),
        refusal("lock:report", ta)
    );
    assert_eq!(get(&mut a, "report").as_deref(), Some("final-by-b"));
}

// ---------------------------------------------------------------------------
// Rules for inner commands
// ---------------------------------------------------------------------------

#[test]
fn what_a_script_cannot_run_is_refused() {
    let s = Server::start();
    let mut c = s.conn();
    let t = acquire(&mut c, "lk", "a", LONG);
    let refused: &[&[&str]] = &[
        &["MULTI"],
        &["EXEC"],
        &["DISCARD"],
        &["WATCH", "x"],
        &["UNWATCH"],
        &["SUBSCRIBE", "ch"],
        &["PSUBSCRIBE", "ch*"],
        &["SSUBSCRIBE", "ch"],
        &["UNSUBSCRIBE"],
        &["MONITOR"],
        &["EVAL", "return redis.call('SET', KEYS[1], 'v')", "1", "x"],
        &["EVALSHA", "0000000000000000000000000000000000000000", "0"],
        &["FCALL", "f", "0"],
        &["AUTH", "default", "x"],
        &["HELLO", "3"],
        &["SHUTDOWN", "NOSAVE"],
        &["CLIENT", "PAUSE", "100"],
        &["CONFIG", "SET", "maxmemory", "1"],
    ];
    for args in refused {
        assert_prefix(&fenced_err(&mut c, "lk", t, args), NOT_ALLOWED);
    }
    assert_eq!(get(&mut c, "x"), None);
    assert_eq!(
        strings(&ok(&mut c, &["CONFIG", "GET", "maxmemory"])),
        ["maxmemory", "0"]
    );
    assert_eq!(
        ok(&mut c, &["PING"]),
        Value::SimpleString("PONG".into()),
        "server alive"
    );
}

#[test]
fn dlock_commands_are_refused_inside_fenced() {
    let s = Server::start();
    let mut c = s.conn();
    let t = acquire(&mut c, "lk", "a", LONG);
    let ts = t.to_string();
    for args in [
        &["DLOCK.RELEASE", "lk", "a"][..],
        &["dlock.release", "lk", "a"],
        &["DLOCK.ACQUIRE", "other", "b"],
        &["DLOCK.RENEW", "lk", "a"],
        &["DLOCK.FORCERELEASE", "lk"],
        &["DLOCK.INFO", "lk"],
        &["DLOCK.CHECK", "lk", &ts],
        &["DLOCK.APPLY", "lk", ""],
        &["DLOCK.FENCED", "lk", &ts, "SET", "x", "1"],
        &["Dlock.Fenced", "lk", &ts, "SET", "x", "1"],
        &["DLOCK.NOSUCH"],
    ] {
        assert_prefix(&fenced_err(&mut c, "lk", t, args), NO_DLOCK);
    }
    assert_eq!(get(&mut c, "x"), None);
    assert_eq!(check(&mut c, "lk", t), 1, "the lock is untouched");
    assert_eq!(int(&mut c, &["EXISTS", "other"]), 0);
}

/// Blocking forms never block inside FENCED: they act as in a script on
/// this server (SPEC): each form is run by a script and by FENCED, and both
/// answer the same at once, or both refuse it — Redis 7.0 (and 7.2) scripts
/// cannot run BLPOP & co. at all, and refuse XREAD and XREADGROUP with BLOCK
/// (FENCED answered nil there: issue 44, item 3); later servers answer at
/// once. A stream, group or consumer named BLOCK is no BLOCK option.
#[test]
fn blocking_commands_act_as_in_a_script() {
    let s = Server::start();
    let mut c = s.conn();
    let t = acquire(&mut c, "lk", "a", LONG);
    ok(&mut c, &["XADD", "st", "1-1", "f", "v"]);
    ok(&mut c, &["XGROUP", "CREATE", "st", "g", "$"]);
    ok(&mut c, &["XGROUP", "CREATE", "st", "BLOCK", "$"]);
    let timed = |c: &mut Connection, args: &[&str]| {
        let start = Instant::now();
        let r = cmd_str(c, args).map_err(|e| err_string(&e));
        assert!(
            start.elapsed() < PROMPT,
            "{args:?} blocked for {:?}",
            start.elapsed()
        );
        r
    };
    let forms: &[&[&str]] = &[
        &["XREAD", "BLOCK", "0", "STREAMS", "st", "$"],
        &["XREAD", "COUNT", "5", "BLOCK", "100", "STREAMS", "st", "$"],
        &["xread", "block", "0", "streams", "st", "$"],
        &[
            "XREADGROUP",
            "GROUP",
            "g",
            "c",
            "BLOCK",
            "0",
            "STREAMS",
            "st",
            ">",
        ],
        &[
            "XREADGROUP",
            "GROUP",
            "g",
            "c",
            "NOACK",
            "BLOCK",
            "0",
            "STREAMS",
            "st",
            ">",
        ],
        // Not the BLOCK option: a stream, a group, a consumer named BLOCK.
        &["XREAD", "STREAMS", "BLOCK", "$"],
        &["XREADGROUP", "GROUP", "BLOCK", "c", "STREAMS", "st", ">"],
        &["XREADGROUP", "GROUP", "g", "BLOCK", "STREAMS", "st", ">"],
        &["BLPOP", "l", "0"],
        &["BRPOP", "l", "0"],
        &["BRPOPLPUSH", "l", "m", "0"],
        &["BLMOVE", "l", "m", "LEFT", "RIGHT", "0"],
        &["BLMPOP", "0", "1", "l", "LEFT"],
        &["BZPOPMIN", "z", "0"],
        &["BZPOPMAX", "z", "0"],
        &["BZMPOP", "0", "1", "z", "MIN"],
        &["WAIT", "1", "0"],
    ];
    for form in forms {
        let mut script = vec!["EVAL", "return redis.call(unpack(ARGV))", "0"];
        script.extend_from_slice(form);
        let by_script = timed(&mut c, &script);
        let mut inner = vec!["DLOCK.FENCED", "lk"];
        let t = t.to_string();
        inner.push(&t);
        inner.extend_from_slice(form);
        let by_fenced = timed(&mut c, &inner);
        match (&by_script, &by_fenced) {
            (Ok(a), Ok(b)) => assert_eq!(a, b, "{form:?}"),
            (Err(_), Err(_)) => {}
            _ => panic!("{form:?}: a script answers {by_script:?}, FENCED {by_fenced:?}"),
        }
        let xread_block =
            form[0].eq_ignore_ascii_case("xread") && form[1].eq_ignore_ascii_case("block");
        if let (true, Err(e)) = (xread_block, &by_fenced) {
            assert_prefix(
                e,
                "ERR XREAD and XREADGROUP with BLOCK are not allowed inside DLOCK.FENCED",
            );
        }
    }
    // With data there is nothing to wait for: the element, or the rule.
    ok(&mut c, &["RPUSH", "l", "v"]);
    match fenced(&mut c, "lk", t, &["BLPOP", "l", "0"]) {
        Ok(v) => assert_eq!(strings(&v), ["l", "v"]),
        Err(e) => assert_prefix(&err_string(&e), NOT_ALLOWED),
    }
}

#[test]
fn fenced_inside_multi_and_scripts() {
    let s = Server::start();
    let mut c = s.conn();
    let t = acquire(&mut c, "lk", "a", LONG);
    let ts = t.to_string();
    // MULTI/EXEC: checked when EXEC runs it; the other commands run anyway.
    assert_eq!(ok(&mut c, &["MULTI"]), Value::Okay);
    ok(&mut c, &["DLOCK.FENCED", "lk", &ts, "SET", "m1", "v"]);
    ok(&mut c, &["DLOCK.RELEASE", "lk", "a"]);
    ok(&mut c, &["DLOCK.FENCED", "lk", &ts, "SET", "m2", "v"]);
    ok(&mut c, &["SET", "m3", "v"]);
    let Value::Array(r) = ok(&mut c, &["EXEC"]) else {
        panic!("EXEC")
    };
    assert_eq!(r[0], Value::Okay);
    assert_eq!(
        value_err_string(&r[2]).as_deref(),
        Some(refusal("lk", t).as_str())
    );
    assert_eq!(r[3], Value::Okay);
    assert_eq!(
        (get(&mut c, "m1"), get(&mut c, "m2"), get(&mut c, "m3")),
        (Some("v".into()), None, Some("v".into()))
    );

    // A script may call FENCED (it runs as the script's user) ...
    let t = acquire(&mut c, "lk", "a", LONG);
    let ts = t.to_string();
    let script = "return redis.call('DLOCK.FENCED', KEYS[1], ARGV[1], 'SET', KEYS[2], ARGV[2])";
    assert_eq!(
        ok(
            &mut c,
            &["EVAL", script, "2", "lk", "s1", &ts, "from-script"]
        ),
        Value::Okay
    );
    assert_eq!(get(&mut c, "s1").as_deref(), Some("from-script"));
    // ... and a refusal is an error of the script's call.
    let e = err(&mut c, &["EVAL", script, "2", "lk", "s1", "1", "late"]);
    assert!(e.contains("FENCED token 1 is not live"), "{e}");
    assert_eq!(get(&mut c, "s1").as_deref(), Some("from-script"));
    // Several commands fenced together: DLOCK.CHECK inside one script.
    let multi = "if redis.call('DLOCK.CHECK', KEYS[1], ARGV[1]) == 1 then \
                 redis.call('SET', KEYS[2], 'a'); redis.call('SET', KEYS[3], 'b'); return 1 \
                 else return 0 end";
    assert_eq!(int(&mut c, &["EVAL", multi, "3", "lk", "p", "q", &ts]), 1);
    assert_eq!(int(&mut c, &["EVAL", multi, "3", "lk", "p2", "q2", "1"]), 0);
    assert_eq!(int(&mut c, &["EXISTS", "p", "q", "p2", "q2"]), 2);
}

// ---------------------------------------------------------------------------
// Keys, ACL, OOM
// ---------------------------------------------------------------------------

#[test]
fn command_getkeys_lists_the_lock_key_and_the_commands_keys() {
    let s = Server::start();
    let mut c = s.conn();
    let getkeys = |c: &mut Connection, args: &[&str]| -> Vec<String> {
        let mut all = vec!["COMMAND", "GETKEYS"];
        all.extend_from_slice(args);
        strings(&ok(c, &all))
    };
    assert_eq!(getkeys(&mut c, &["DLOCK.CHECK", "lk", "5"]), ["lk"]);
    assert_eq!(
        getkeys(&mut c, &["DLOCK.FENCED", "lk", "5", "SET", "x", "1"]),
        ["lk", "x"]
    );
    assert_eq!(
        getkeys(
            &mut c,
            &["DLOCK.FENCED", "lk", "5", "MSET", "a", "1", "b", "2"]
        ),
        ["lk", "a", "b"]
    );
    assert_eq!(
        getkeys(
            &mut c,
            &[
                "DLOCK.FENCED",
                "lk",
                "5",
                "LMOVE",
                "src",
                "dst",
                "LEFT",
                "RIGHT"
            ]
        ),
        ["lk", "src", "dst"]
    );
    assert_eq!(
        getkeys(&mut c, &["DLOCK.FENCED", "lk", "5", "PING"]),
        ["lk"]
    );
    assert_eq!(
        getkeys(&mut c, &["DLOCK.FENCED", "lk", "5", "NOSUCH", "x"]),
        ["lk"]
    );
    // Nested FENCED (refused when run) does not recurse.
    assert_eq!(
        getkeys(
            &mut c,
            &[
                "DLOCK.FENCED",
                "lk",
                "5",
                "DLOCK.FENCED",
                "l2",
                "5",
                "SET",
                "y",
                "1"
            ]
        ),
        ["lk"]
    );
    // Flags: the lock key is read; the command's keys keep their own.
    let v = ok(
        &mut c,
        &[
            "COMMAND",
            "GETKEYSANDFLAGS",
            "DLOCK.FENCED",
            "lk",
            "5",
            "SET",
            "x",
            "1",
        ],
    );
    let Value::Array(entries) = v else {
        panic!("{v:?}")
    };
    let first = strings(&entries[0]);
    assert_eq!(first[0], "lk");
    let Value::Array(flags) = &entries[0] else {
        panic!()
    };
    assert_eq!(strings(&flags[1]), ["RO", "access"]);
    assert_eq!(strings(&entries[1])[0], "x");
    // COMMAND INFO: movable keys (cluster clients ask COMMAND GETKEYS).
    let info = format!("{:?}", ok(&mut c, &["COMMAND", "INFO", "dlock.fenced"]));
    assert!(info.contains("movablekeys"), "{info}");
}

fn conn_as(s: &Server, user: &str) -> Connection {
    let client =
        redis::Client::open(format!("redis://{user}:pw@127.0.0.1:{}/", s.port)).expect("client");
    let con = client
        .get_connection_with_timeout(Duration::from_secs(10))
        .unwrap_or_else(|e| panic!("connect as {user}: {e}"));
    con.set_read_timeout(Some(CONN_TIMEOUT)).expect("timeout");
    con
}

#[test]
fn fenced_runs_with_the_callers_acl() {
    let s = Server::start();
    let mut admin = s.conn();
    for rule in [
        &[
            "ACL", "SETUSER", "app", "on", ">pw", "~lock:*", "~app:*", "+@all",
        ][..],
        &[
            "ACL", "SETUSER", "noset", "on", ">pw", "~*", "+@all", "-set",
        ],
        &[
            "ACL", "SETUSER", "reader", "on", ">pw", "~lock:*", "%R~app:*", "+@all",
        ],
        &["ACL", "SETUSER", "nolock", "on", ">pw", "~app:*", "+@all"],
        &[
            "ACL",
            "SETUSER",
            "nofence",
            "on",
            ">pw",
            "~*",
            "+@all",
            "-dlock.fenced",
        ],
        &[
            "ACL",
            "SETUSER",
            "nopub",
            "on",
            ">pw",
            "~*",
            "resetchannels",
            "&allowed",
            "+@all",
        ],
    ] {
        ok(&mut admin, rule);
    }
    let t = acquire(&mut admin, "lock:1", "o", LONG);
    ok(&mut admin, &["SET", "app:r", "readable"]);

    // Keys the user may write: runs. Keys outside its patterns: refused,
    // nothing changes.
    let mut app = conn_as(&s, "app");
    assert_eq!(
        fenced_ok(&mut app, "lock:1", t, &["SET", "app:x", "1"]),
        Value::Okay
    );
    assert_prefix(
        &fenced_err(&mut app, "lock:1", t, &["SET", "other:x", "1"]),
        "NOPERM",
    );
    assert_prefix(
        &fenced_err(
            &mut app,
            "lock:1",
            t,
            &["MSET", "app:y", "1", "other:y", "1"],
        ),
        "NOPERM",
    );
    assert_eq!(
        int(&mut admin, &["EXISTS", "other:x", "other:y", "app:y"]),
        0
    );

    // A command the user may not run: refused (logged in ACL LOG).
    ok(&mut admin, &["ACL", "LOG", "RESET"]);
    let mut noset = conn_as(&s, "noset");
    assert_prefix(
        &fenced_err(&mut noset, "lock:1", t, &["SET", "app:z", "1"]),
        "NOPERM",
    );
    assert_eq!(
        fenced_ok(&mut noset, "lock:1", t, &["GET", "app:r"]),
        Value::BulkString(b"readable".to_vec())
    );
    assert_eq!(int(&mut admin, &["EXISTS", "app:z"]), 0);
    let log = format!("{:?}", ok(&mut admin, &["ACL", "LOG"]));
    assert!(log.contains("noset"), "no ACL LOG entry: {log}");

    // Read-only key patterns: reads run, writes are refused.
    let mut reader = conn_as(&s, "reader");
    assert_eq!(
        fenced_ok(&mut reader, "lock:1", t, &["GET", "app:r"]),
        Value::BulkString(b"readable".to_vec())
    );
    assert_prefix(
        &fenced_err(&mut reader, "lock:1", t, &["SET", "app:r", "changed"]),
        "NOPERM",
    );
    assert_eq!(get(&mut admin, "app:r").as_deref(), Some("readable"));

    // The lock key itself must be readable by the user.
    let mut nolock = conn_as(&s, "nolock");
    assert_prefix(
        &fenced_err(&mut nolock, "lock:1", t, &["GET", "app:r"]),
        "NOPERM",
    );
    assert_prefix(
        &err(&mut nolock, &["DLOCK.CHECK", "lock:1", &t.to_string()]),
        "NOPERM",
    );
    // And FENCED itself must be allowed.
    let mut nofence = conn_as(&s, "nofence");
    assert_prefix(
        &fenced_err(&mut nofence, "lock:1", t, &["GET", "app:r"]),
        "NOPERM",
    );
    assert_eq!(check(&mut nofence, "lock:1", t), 1);
    // Channels too.
    let mut nopub = conn_as(&s, "nopub");
    assert_eq!(
        fenced_ok(&mut nopub, "lock:1", t, &["PUBLISH", "allowed", "m"]),
        Value::Int(0)
    );
    assert_prefix(
        &fenced_err(&mut nopub, "lock:1", t, &["PUBLISH", "secret", "m"]),
        "NOPERM",
    );
}

#[test]
fn under_maxmemory_the_commands_own_oom_rule_applies() {
    let s = Server::start();
    let mut c = s.conn();
    let t = acquire(&mut c, "lk", "a", LONG);
    ok(&mut c, &["SET", "x", "1"]);
    // The server is killed at the end of the test, maxmemory and all.
    ok(&mut c, &["CONFIG", "SET", "maxmemory", "1"]);
    assert_prefix(&fenced_err(&mut c, "lk", t, &["SET", "y", "1"]), "OOM");
    assert_prefix(&err(&mut c, &["SET", "y", "1"]), "OOM");
    assert_eq!(
        fenced_ok(&mut c, "lk", t, &["GET", "x"]),
        Value::BulkString(b"1".to_vec())
    );
    assert_eq!(fenced_ok(&mut c, "lk", t, &["DEL", "x"]), Value::Int(1));
    assert_eq!(
        fenced_err(&mut c, "lk", t + 1, &["DEL", "x"]),
        refusal("lk", t + 1)
    );
    assert_eq!(int(&mut c, &["EXISTS", "y"]), 0);
}

// ---------------------------------------------------------------------------
// Replication, AOF
// ---------------------------------------------------------------------------

/// Every AOF file of `s` as one text.
fn aof_text(s: &Server) -> String {
    let mut text = String::new();
    let dir = s.dir.join("appendonlydir");
    let mut files: Vec<_> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(Result::ok)
        .map(|e| e.path())
        .collect();
    files.sort();
    for f in files {
        text.push_str(&String::from_utf8_lossy(&fs::read(&f).unwrap_or_default()));
    }
    text
}

/// The writes of the scenario: three fenced writes, one refused.
fn fenced_writes(c: &mut Connection) -> i64 {
    let t = acquire(c, "lk", "a", LONG);
    assert_eq!(fenced_ok(c, "lk", t, &["SET", "a", "1"]), Value::Okay);
    assert_eq!(fenced_ok(c, "lk", t, &["INCRBY", "n", "5"]), Value::Int(5));
    assert_eq!(
        fenced_ok(c, "lk", t, &["HSET", "h", "f", "v"]),
        Value::Int(1)
    );
    assert_eq!(
        fenced_ok(c, "lk", t, &["SET", "e", "v", "PX", "600000"]),
        Value::Okay
    );
    assert_eq!(
        fenced_ok(c, "lk", t, &["GET", "a"]),
        Value::BulkString(b"1".to_vec())
    );
    assert_eq!(
        fenced_err(c, "lk", t + 1, &["SET", "refused", "1"]),
        refusal("lk", t + 1)
    );
    t
}

fn assert_scenario_state(c: &mut Connection, what: &str) {
    assert_eq!(get(c, "a").as_deref(), Some("1"), "{what}");
    assert_eq!(get(c, "n").as_deref(), Some("5"), "{what}");
    assert_eq!(
        ok(c, &["HGET", "h", "f"]),
        Value::BulkString(b"v".to_vec()),
        "{what}"
    );
    let pttl = int(c, &["PTTL", "e"]);
    assert!(pttl > 0 && pttl <= 600_000, "{what}: PTTL e = {pttl}");
    assert_eq!(int(c, &["EXISTS", "refused"]), 0, "{what}");
}

#[test]
fn replicas_receive_what_the_command_did() {
    let master = Server::start();
    let replica = Server::start();
    replica.make_replica_of(&master);
    let mut m = master.conn();
    let t = fenced_writes(&mut m);
    wait_replica_synced(&master, &replica);
    let mut r = replica.conn();
    assert_scenario_state(&mut r, "replica");
    let mut keys = strings(&ok(&mut m, &["KEYS", "*"]));
    let mut rkeys = strings(&ok(&mut r, &["KEYS", "*"]));
    keys.sort();
    rkeys.sort();
    assert_eq!(keys, rkeys);
    // CHECK is read-only: it works on the replica, as replicated.
    assert_eq!(check(&mut r, "lk", t), 1);
    assert_eq!(check(&mut r, "lk", t + 1), 0);
    // FENCED writes: refused on a read-only replica, as any write.
    assert_prefix(&fenced_err(&mut r, "lk", t, &["SET", "a", "2"]), "READONLY");
    // After the lock is gone the master's writes still match on the replica.
    int(&mut m, &["DLOCK.RELEASE", "lk", "a"]);
    wait_replica_synced(&master, &replica);
    assert_eq!(check(&mut r, "lk", t), 0);
    assert_scenario_state(&mut r, "replica after release");
}

/// Keys of `db` on `c`, sorted (the connection is left in db 0).
fn keys_in(c: &mut Connection, db: &str) -> Vec<String> {
    ok(c, &["SELECT", db]);
    let mut keys = strings(&ok(c, &["KEYS", "*"]));
    ok(c, &["SELECT", "0"]);
    keys.sort();
    keys
}

/// Issue 44, item 5: a FENCED `COPY … DB n` reaches the replica, in db n,
/// once, as a plain COPY and a FENCED MOVE do. On Valkey 8.1 the copy never
/// arrived: the key event of the copy left the module's calling client in
/// db n, so the server propagated the COPY with db n selected, and the
/// replica found no source there. The caller's db is its own after each.
#[test]
fn a_copy_to_another_db_reaches_the_replica() {
    let master = Server::start();
    let replica = Server::start();
    replica.make_replica_of(&master);
    let mut m = master.conn();
    let t = acquire(&mut m, "lk", "a", LONG);
    for k in ["src", "src2", "src3", "src4"] {
        ok(&mut m, &["SET", k, k]);
    }
    assert_eq!(
        fenced_ok(&mut m, "lk", t, &["COPY", "src", "dst", "DB", "2"]),
        Value::Int(1)
    );
    assert_eq!(int(&mut m, &["COPY", "src2", "dst2", "DB", "2"]), 1);
    assert_eq!(
        fenced_ok(&mut m, "lk", t, &["MOVE", "src3", "3"]),
        Value::Int(1)
    );
    // The module's calling client is in db 0 again: a later FENCED write
    // lands there, on both.
    fenced_ok(&mut m, "lk", t, &["SET", "after", "1"]);
    // Inside MULTI too.
    ok(&mut m, &["MULTI"]);
    let _ = cmd_str(
        &mut m,
        &[
            "DLOCK.FENCED",
            "lk",
            &t.to_string(),
            "COPY",
            "src4",
            "dst4",
            "DB",
            "2",
        ],
    );
    let _ = cmd_str(&mut m, &["SET", "in-multi", "1"]);
    assert_eq!(
        ok(&mut m, &["EXEC"]),
        Value::Array(vec![Value::Int(1), Value::Okay])
    );
    assert_eq!(get(&mut m, "after").as_deref(), Some("1"));
    wait_replica_synced(&master, &replica);
    let mut r = replica.conn();
    for db in ["0", "2", "3"] {
        assert_eq!(keys_in(&mut r, db), keys_in(&mut m, db), "db {db}");
    }
    assert_eq!(keys_in(&mut m, "2"), ["dst", "dst2", "dst4"]);
    ok(&mut r, &["SELECT", "2"]);
    assert_eq!(get(&mut r, "dst").as_deref(), Some("src"));
    assert_eq!(get(&mut r, "dst4").as_deref(), Some("src4"));
}

#[test]
fn the_aof_gets_the_commands_effects_and_replays_them() {
    let mut s = Server::start_with(ServerOpts::new().args([
        "--appendonly",
        "yes",
        "--appendfsync",
        "always",
    ]));
    let t = fenced_writes(&mut s.conn());
    let text = aof_text(&s).to_ascii_lowercase();
    assert!(
        !text.contains("dlock.fenced"),
        "FENCED itself reached the AOF"
    );
    assert!(
        text.contains("incrby"),
        "the command's effect is missing:\n{text}"
    );
    s.restart();
    let mut c = s.conn();
    assert_scenario_state(&mut c, "after restart from the AOF");
    assert_eq!(check(&mut c, "lk", t), 1, "the lock came back too");
}

// ---------------------------------------------------------------------------
// Cluster
// ---------------------------------------------------------------------------

#[test]
fn cluster_routes_by_all_keys_and_refuses_crossslot() {
    let c = Cluster::start(3, 0);
    let lk = "{acct:7}lock";
    let data = "{acct:7}balance";
    let node = c.node_for_key(lk.as_bytes());
    let mut con = node.conn();
    let t = acquire(&mut con, lk, "o", LONG);
    assert_eq!(
        fenced_ok(&mut con, lk, t, &["SET", data, "10"]),
        Value::Okay
    );
    assert_eq!(
        fenced_ok(&mut con, lk, t, &["INCRBY", data, "5"]),
        Value::Int(15)
    );
    // A key in another slot: CROSSSLOT, nothing runs.
    let other = (0..1000)
        .map(|i| format!("other{i}"))
        .find(|k| c.key_slot(k.as_bytes()) != c.key_slot(lk.as_bytes()))
        .expect("a key in another slot");
    assert_prefix(
        &fenced_err(&mut con, lk, t, &["SET", &other, "1"]),
        "CROSSSLOT",
    );
    assert_prefix(
        &fenced_err(&mut con, lk, t, &["MSET", data, "1", &other, "1"]),
        "CROSSSLOT",
    );
    assert_eq!(get(&mut con, data).as_deref(), Some("15"));
    // On another master: MOVED to the lock's node.
    let slot = c.key_slot(lk.as_bytes());
    let elsewhere = c
        .nodes
        .iter()
        .find(|n| n.port != node.port)
        .expect("another node");
    let e = fenced_err(&mut elsewhere.conn(), lk, t, &["SET", data, "1"]);
    assert_eq!(e, format!("MOVED {slot} 127.0.0.1:{}", node.port));
    assert_prefix(
        &err(&mut elsewhere.conn(), &["DLOCK.CHECK", lk, &t.to_string()]),
        "MOVED",
    );
    assert_eq!(check(&mut con, lk, t), 1);
    // The lock's slot decides even for a keyless command.
    assert_eq!(
        fenced_ok(&mut con, lk, t, &["PING"]),
        Value::SimpleString("PONG".into())
    );
}

/// The command may act on the lock key itself, as it could directly: a
/// fenced DEL of the lock deletes it, and a waiter is served at once.
#[test]
fn the_command_may_delete_the_lock_itself() {
    let s = Server::start();
    let mut c = s.conn();
    let t = acquire(&mut c, "lk", "a", LONG);
    let mut w = s.conn();
    let waiter = std::thread::spawn(move || {
        cmd_str(
            &mut w,
            &["DLOCK.ACQUIRE", "lk", "b", "PX", LONG, "WAIT", "20000"],
        )
    });
    let waiting = wait_until(Duration::from_secs(10), || {
        s.info_field("dlock", "dlock_waiting_clients").as_deref() == Some("1")
    });
    assert!(waiting, "the waiter never waited");
    assert_eq!(fenced_ok(&mut c, "lk", t, &["DEL", "lk"]), Value::Int(1));
    let got = waiter.join().expect("waiter thread");
    match got {
        Ok(Value::Int(tb)) => {
            assert!(tb > t);
            assert_eq!(check(&mut c, "lk", tb), 1);
        }
        other => panic!("the waiter was not served after the fenced DEL: {other:?}"),
    }
    assert_eq!(check(&mut c, "lk", t), 0);
    assert_eq!(
        fenced_err(&mut c, "lk", t, &["DEL", "lk"]),
        refusal("lk", t)
    );
}

/// Every command the server has, with a few argument lists, inside FENCED
/// with a live token: each is run or refused at once, and the server stays
/// up (commands a script may not run, blocking forms, DLOCK.*, containers).
#[test]
fn every_command_of_the_server_runs_or_is_refused_without_harm() {
    let s = Server::start();
    let mut c = s.conn();
    let mut names = strings(&ok(&mut c, &["COMMAND", "LIST"]));
    names.sort();
    let variants: &[&[&str]] = &[&[], &["k"], &["k", "1"], &["k", "1", "2", "3"]];
    for name in &names {
        for rest in variants {
            let t = acquire(&mut c, "fence:lk", "o", LONG);
            let mut args = vec![name.as_str()];
            args.extend_from_slice(rest);
            let start = Instant::now();
            let r = fenced(&mut c, "fence:lk", t, &args);
            assert!(
                start.elapsed() < PROMPT,
                "{args:?} took {:?}: {r:?}",
                start.elapsed()
            );
            if name.starts_with("dlock.") {
                assert_prefix(&expect_err(r), NO_DLOCK);
            }
            assert_eq!(
                ok(&mut c, &["PING"]),
                Value::SimpleString("PONG".into()),
                "after {args:?}"
            );
        }
    }
    assert!(names.len() > 100, "{names:?}");
}

/// Valkey 8.1 gives a module call of GETDEL or GETSET on a key of another
/// type no reply, and hands that reply to the next module call. FENCED
/// answers with an error instead of nothing (the caller is not left
/// waiting), and the stray reply does not reach the next call.
#[test]
fn a_command_that_gives_no_reply_does_not_hang_or_shift_replies() {
    let s = Server::start();
    let mut c = s.conn();
    let t = acquire(&mut c, "lk", "a", LONG);
    ok(&mut c, &["ZADD", "z", "1", "m"]);
    for args in [&["GETDEL", "z"][..], &["GETSET", "z", "v"]] {
        let e = fenced_err(&mut c, "lk", t, args);
        assert!(
            e.starts_with("WRONGTYPE") || e.starts_with("ERR DLOCK.FENCED ran the command but"),
            "{args:?}: {e}"
        );
        assert_eq!(
            fenced_ok(&mut c, "lk", t, &["ECHO", "next"]),
            Value::BulkString(b"next".to_vec()),
            "the reply after {args:?}"
        );
    }
    assert_eq!(int(&mut c, &["ZCARD", "z"]), 1);
}
