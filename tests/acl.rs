//! ACL key patterns: every DLOCK command declares its key, so a user allowed
//! only `~app:*` can use every command on `app:x` and is refused (`NOPERM`)
//! on `other:x`, without any change to `other:x`. Read-only key permissions
//! (`%R~`) allow DLOCK.INFO only.

mod common;
use common::*;

use std::time::Duration;

use redis::Value;

const LONG: &str = "60000";

/// A connection authenticated as `user` / `pw`.
fn conn_as(s: &Server, user: &str, pw: &str) -> redis::Connection {
    let client =
        redis::Client::open(format!("redis://{user}:{pw}@127.0.0.1:{}/", s.port)).expect("client");
    let con = client
        .get_connection_with_timeout(Duration::from_secs(10))
        .unwrap_or_else(|e| panic!("connect as {user}: {e}"));
    con.set_read_timeout(Some(CONN_TIMEOUT)).expect("timeout");
    con
}

/// Every command with `{k}` where the key goes, in an order that works on
/// a fresh key, and its expected reply kind.
fn every_command(k: &str) -> Vec<(Vec<String>, &'static str)> {
    let v = |a: &[&str]| -> Vec<String> {
        a.iter()
            .map(|s| s.replace("{k}", k).replace("{rw}", &format!("{k}:rw")))
            .collect()
    };
    vec![
        (v(&["DLOCK.ACQUIRE", "{k}", "o", "PX", LONG]), "int"),
        (v(&["DLOCK.ACQUIRE", "{k}", "p", "WAIT", "20"]), "nil"),
        (v(&["DLOCK.RENEW", "{k}", "o", "PX", LONG]), "1"),
        (v(&["DLOCK.INFO", "{k}"]), "array"),
        (v(&["DLOCK.RELEASE", "{k}", "o"]), "1"),
        (
            v(&["DLOCK.RWACQUIRE", "{rw}", "o", "READ", "PX", LONG]),
            "int",
        ),
        (v(&["DLOCK.RELEASE", "{rw}", "o", "READ"]), "1"),
        (v(&["DLOCK.FAIRACQUIRE", "{k}", "o", "PX", LONG]), "int"),
        (v(&["DLOCK.FORCERELEASE", "{k}"]), "1"),
        // Permitted by ACL, refused by the module: internal (hardening.rs).
        (v(&["DLOCK.APPLY", "{k}", ""]), "internal"),
    ]
}

fn check_reply(args: &[String], reply: &Value, want: &str) {
    let good = match (want, reply) {
        ("int", Value::Int(n)) => *n > 0,
        ("1", Value::Int(1)) => true,
        ("nil", Value::Nil) => true,
        ("array", Value::Array(_) | Value::Map(_)) => true,
        ("ok", Value::Okay) => true,
        _ => false,
    };
    assert!(good, "{args:?}: expected {want}, got {reply:?}");
}

fn as_strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

#[test]
fn user_limited_to_app_keys_uses_every_command_on_app_and_is_refused_elsewhere() {
    let s = Server::start();
    let mut admin = s.conn();
    ok(
        &mut admin,
        &["ACL", "SETUSER", "app", "on", ">pw", "~app:*", "+@all"],
    );
    // The same rights named command by command.
    ok(
        &mut admin,
        &[
            "ACL",
            "SETUSER",
            "app2",
            "on",
            ">pw",
            "~app:*",
            "-@all",
            "+dlock.acquire",
            "+dlock.rwacquire",
            "+dlock.fairacquire",
            "+dlock.release",
            "+dlock.renew",
            "+dlock.info",
            "+dlock.forcerelease",
            "+dlock.apply",
        ],
    );
    // A lock the users must not touch.
    let other_token = int(&mut admin, &["DLOCK.ACQUIRE", "other:x", "o", "PX", LONG]);
    int(
        &mut admin,
        &["DLOCK.RWACQUIRE", "other:x:rw", "o", "READ", "PX", LONG],
    );
    let other_before = info(&mut admin, "other:x");
    let rw_before = info(&mut admin, "other:x:rw");

    for user in ["app", "app2"] {
        let mut con = conn_as(&s, user, "pw");
        for (args, want) in every_command("app:x") {
            let reply = match cmd_str(&mut con, &as_strs(&args)) {
                // Not NOPERM: the module's own refusal of DLOCK.APPLY.
                Err(e) if want == "internal" && err_string(&e).contains("is internal") => continue,
                Err(e) => panic!("{args:?}: error {}", err_string(&e)),
                Ok(v) => v,
            };
            check_reply(&args, &reply, want);
        }
        assert_eq!(info(&mut admin, "app:x"), Value::Nil);

        let log_before = match ok(&mut admin, &["ACL", "LOG"]) {
            Value::Array(a) => a.len(),
            _ => 0,
        };
        let refused = every_command("other:x");
        for (args, _) in &refused {
            let e = expect_err(cmd_str(&mut con, &as_strs(args)));
            assert!(e.starts_with("NOPERM"), "{user} {args:?}: {e}");
        }
        // Nothing changed on other:x.
        assert_eq!(info(&mut admin, "other:x"), other_before);
        assert_eq!(info(&mut admin, "other:x:rw"), rw_before);
        // ACL LOG names the key (entries for the same user/key/command merge).
        let Value::Array(log) = ok(&mut admin, &["ACL", "LOG", "1"]) else {
            panic!("ACL LOG");
        };
        let Some(Value::Array(entry)) = log.first() else {
            panic!("ACL LOG is empty");
        };
        let text = format!("{entry:?}");
        assert!(
            text.contains("other:x") && text.contains(user),
            "ACL LOG: {text}"
        );
        let log_after = match ok(&mut admin, &["ACL", "LOG"]) {
            Value::Array(a) => a.len(),
            _ => 0,
        };
        assert!(log_after > log_before || log_after >= 8, "ACL LOG grew");
    }
    // The admin's lock is intact and still works.
    assert_eq!(
        int(&mut admin, &["DLOCK.ACQUIRE", "other:x", "o", "PX", LONG]),
        other_token
    );
    assert_eq!(int(&mut admin, &["DLOCK.RELEASE", "other:x", "o"]), 0);
    s.info("server");
}

#[test]
fn read_only_key_permission_allows_only_info() {
    let s = Server::start();
    let mut admin = s.conn();
    ok(
        &mut admin,
        &["ACL", "SETUSER", "reader", "on", ">pw", "%R~app:*", "+@all"],
    );
    int(&mut admin, &["DLOCK.ACQUIRE", "app:x", "o", "PX", LONG]);
    let before = info(&mut admin, "app:x");
    let mut con = conn_as(&s, "reader", "pw");
    assert!(matches!(
        ok(&mut con, &["DLOCK.INFO", "app:x"]),
        Value::Array(_)
    ));
    for (args, _) in every_command("app:x") {
        if args[0] == "DLOCK.INFO" {
            continue;
        }
        let e = expect_err(cmd_str(&mut con, &as_strs(&args)));
        assert!(e.starts_with("NOPERM"), "{args:?}: {e}");
    }
    assert_eq!(info(&mut admin, "app:x"), before);
}
