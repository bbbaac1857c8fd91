//! DLOCK.FENCED whose inner command is refused before it runs: one test per
//! kind of refusal (wrong arity, unknown command, MULTI, SUBSCRIBE, a command
//! the user's ACL denies, a write refused under maxmemory) plus the blocking
//! form that answers at once. Each must come back as an error reply naming
//! the refusal, with the server alive and the connection in step afterwards.
//!
//! Valkey 9.1.2 died of SIGSEGV inside `VM_Call` on every one of these (issue
//! 36): in script mode without the `E` call flag its refusal path reads an
//! error text it never made. Run these on every server of the matrix
//! (`make test-rust-matrix`, or SERVER=... with `--test fenced_refusals`).

mod common;
use common::*;

use redis::{Connection, Value};

const LONG: &str = "600000";

fn fenced(con: &mut Connection, token: i64, args: &[&str]) -> redis::RedisResult<Value> {
    let t = token.to_string();
    let mut all = vec!["DLOCK.FENCED", "lk", t.as_str()];
    all.extend_from_slice(args);
    cmd_str(con, &all)
}

/// A server with a held lock `lk`: (server, admin connection, token).
fn held() -> (Server, Connection, i64) {
    let s = Server::start();
    let mut c = s.conn();
    let t = int(&mut c, &["DLOCK.ACQUIRE", "lk", "A", "PX", LONG]);
    assert_eq!(
        fenced(&mut c, t, &["SET", "data", "x"]).expect("FENCED SET"),
        Value::Okay
    );
    (s, c, t)
}

/// The refusal came back as an error starting with `prefix`, the server
/// still runs, and the connection's next reply is its own.
fn assert_refused(s: &mut Server, c: &mut Connection, token: i64, args: &[&str], prefix: &str) {
    let e = expect_err(fenced(c, token, args));
    assert!(
        e.starts_with(prefix),
        "FENCED {args:?}: expected an error starting with {prefix:?}, got {e:?}"
    );
    s.assert_alive();
    assert_eq!(
        ok(c, &["ECHO", "next"]),
        Value::BulkString(b"next".to_vec())
    );
    // The lock and the data are as they were.
    assert_eq!(int(c, &["DLOCK.CHECK", "lk", &token.to_string()]), 1);
    assert_eq!(ok(c, &["GET", "data"]), Value::BulkString(b"x".to_vec()));
}

#[test]
fn wrong_arity_is_an_error_reply() {
    let (mut s, mut c, t) = held();
    let arity = "ERR wrong number of arguments for the command inside DLOCK.FENCED";
    assert_refused(&mut s, &mut c, t, &["GET"], arity);
    assert_refused(&mut s, &mut c, t, &["SET", "data"], arity);
    assert_refused(&mut s, &mut c, t, &["HSET", "h", "f"], arity);
}

#[test]
fn an_unknown_command_is_an_error_reply() {
    let (mut s, mut c, t) = held();
    let unknown = "ERR unknown command inside DLOCK.FENCED";
    assert_refused(&mut s, &mut c, t, &["NOSUCHCMD"], unknown);
    assert_refused(&mut s, &mut c, t, &["NOSUCHCMD", "a", "b"], unknown);
    assert_refused(&mut s, &mut c, t, &["CONFIG", "NOSUCHSUB"], "ERR");
}

#[test]
fn multi_is_an_error_reply() {
    let (mut s, mut c, t) = held();
    let not_allowed = "ERR this command is not allowed inside DLOCK.FENCED";
    for args in [&["MULTI"][..], &["EXEC"], &["WATCH", "data"]] {
        assert_refused(&mut s, &mut c, t, args, not_allowed);
    }
}

#[test]
fn subscribe_is_an_error_reply() {
    let (mut s, mut c, t) = held();
    let not_allowed = "ERR this command is not allowed inside DLOCK.FENCED";
    for args in [
        &["SUBSCRIBE", "ch"][..],
        &["PSUBSCRIBE", "ch*"],
        &["SSUBSCRIBE", "ch"],
    ] {
        assert_refused(&mut s, &mut c, t, args, not_allowed);
    }
}

#[test]
fn an_acl_denied_command_is_an_error_reply() {
    let (mut s, mut c, t) = held();
    ok(
        &mut c,
        &[
            "ACL", "SETUSER", "u", "on", ">pw", "~*", "&*", "+@all", "-set",
        ],
    );
    let client = redis::Client::open(format!("redis://u:pw@127.0.0.1:{}/", s.port)).expect("url");
    let mut u = client.get_connection().expect("connect as u");
    let e = expect_err(fenced(&mut u, t, &["SET", "data", "y"]));
    assert!(e.starts_with("NOPERM"), "{e}");
    s.assert_alive();
    assert_eq!(
        fenced(&mut u, t, &["GET", "data"]).expect("FENCED GET"),
        Value::BulkString(b"x".to_vec())
    );
    // A key outside the user's patterns too.
    ok(
        &mut c,
        &["ACL", "SETUSER", "v", "on", ">pw", "~lk", "+@all"],
    );
    let client = redis::Client::open(format!("redis://v:pw@127.0.0.1:{}/", s.port)).expect("url");
    let mut v = client.get_connection().expect("connect as v");
    let e = expect_err(fenced(&mut v, t, &["SET", "data", "y"]));
    assert!(e.starts_with("NOPERM"), "{e}");
    s.assert_alive();
    assert_eq!(
        ok(&mut c, &["GET", "data"]),
        Value::BulkString(b"x".to_vec())
    );
}

#[test]
fn a_write_refused_under_maxmemory_is_an_error_reply() {
    let (mut s, mut c, t) = held();
    ok(&mut c, &["CONFIG", "SET", "maxmemory", "1"]);
    let e = expect_err(fenced(&mut c, t, &["SET", "other", "1"]));
    assert!(e.starts_with("OOM"), "{e}");
    s.assert_alive();
    // Reads still run.
    assert_eq!(
        fenced(&mut c, t, &["GET", "data"]).expect("FENCED GET"),
        Value::BulkString(b"x".to_vec())
    );
    ok(&mut c, &["CONFIG", "SET", "maxmemory", "0"]);
    assert_eq!(int(&mut c, &["EXISTS", "other"]), 0);
}

/// Nil at once where the server lets a script's blocking form answer at
/// once (Valkey, Redis 7.2+); Redis 7.0 refuses it (docs/operations.md).
#[test]
fn a_blocking_form_answers_at_once() {
    let (mut s, mut c, t) = held();
    match fenced(&mut c, t, &["BLPOP", "empty", "1"]) {
        Ok(v) => assert_eq!(v, Value::Nil),
        Err(e) => {
            let e = err_string(&e);
            assert!(
                e.starts_with("ERR this command is not allowed inside DLOCK.FENCED"),
                "{e}"
            );
        }
    }
    s.assert_alive();
}

/// After each kind of refusal, a command that runs and ends in its own
/// error (WRONGTYPE) is relayed as that error, not taken for a refusal.
#[test]
fn the_commands_own_errors_are_relayed_after_refusals() {
    let (mut s, mut c, t) = held();
    let _ = fenced(&mut c, t, &["NOSUCHCMD"]);
    let _ = fenced(&mut c, t, &["GET"]);
    let e = expect_err(fenced(&mut c, t, &["LPUSH", "data", "1"]));
    assert!(e.starts_with("WRONGTYPE"), "{e}");
    let e = expect_err(fenced(&mut c, t, &["INCR", "data"]));
    assert!(e.starts_with("ERR value is not an integer"), "{e}");
    s.assert_alive();
}
