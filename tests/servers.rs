//! What differs between supported servers (Redis 7.0, 7.2, 7.4+, Valkey 7.2,
//! 8.0, 8.1+), run on whichever `REDIS_SERVER` names:
//! - nothing the module does in reaction to a key or server event changes the
//!   db selected by the connection whose command caused it (Valkey 8.1 runs
//!   keyspace callbacks on that connection and selects the event's db on it);
//! - ACL categories where the server lets modules set them: a user with
//!   `+@write +@read` and a key pattern can use every command;
//! - command names are lower case (`cmdstat_dlock.acquire`).

mod common;
use common::*;

use std::io::Write;
use std::time::Duration;

use redis::Value;

const LONG: &str = "60000";

/// A line on stderr that the test harness does not capture: shown in the
/// output of `cargo test` even when the test passes.
macro_rules! say {
    ($($t:tt)*) => {{
        let _ = writeln!(std::io::stderr(), $($t)*);
    }};
}

fn text(v: &Value) -> String {
    match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        Value::Okay => "OK".into(),
        Value::Int(n) => n.to_string(),
        other => format!("{other:?}"),
    }
}

/// Every string in a (nested) reply.
fn strings(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Array(a) | Value::Set(a) => a.iter().for_each(|x| strings(x, out)),
        Value::Map(m) => m.iter().for_each(|(k, x)| {
            strings(k, out);
            strings(x, out);
        }),
        other => out.push(text(other)),
    }
}

/// Which server this is, for the test output ("redis 7.0.15", "valkey 8.1.8").
fn server_name(con: &mut redis::Connection) -> String {
    let text: String = redis::cmd("INFO").arg("server").query(con).expect("INFO");
    let info = parse_info(&text);
    match info.get("valkey_version") {
        Some(v) => format!("valkey {v}"),
        None => format!(
            "redis {}",
            info.get("redis_version").map_or("?", String::as_str)
        ),
    }
}

/// The db the connection has selected, as the server sees it.
fn selected_db(con: &mut redis::Connection) -> i64 {
    let info = text(&ok(con, &["CLIENT", "INFO"]));
    info.split_whitespace()
        .find_map(|f| f.strip_prefix("db="))
        .and_then(|d| d.parse().ok())
        .unwrap_or_else(|| panic!("no db= in CLIENT INFO: {info}"))
}

/// The connection is still in `db` and still sees its marker key there.
fn assert_still_in(con: &mut redis::Connection, db: i64, what: &str) {
    assert_eq!(
        selected_db(con),
        db,
        "after {what}: the caller's db changed"
    );
    assert_eq!(
        text(&ok(con, &["GET", "marker"])),
        format!("db{db}"),
        "after {what}: the caller no longer sees its own db"
    );
}

fn set_marker(con: &mut redis::Connection, db: i64) {
    ok(con, &["SET", "marker", &format!("db{db}")]);
}

fn acquire(con: &mut redis::Connection, key: &str) {
    let v = ok(con, &["DLOCK.ACQUIRE", key, "o", "PX", LONG]);
    assert!(matches!(v, Value::Int(n) if n > 0), "acquire {key}: {v:?}");
}

/// A second connection, in `db`, waiting on `key` (held by "o") with WAIT.
fn waiter(s: &Server, db: i64, key: &str, wait_ms: &str) -> std::thread::JoinHandle<Value> {
    let mut w = s.conn();
    ok(&mut w, &["SELECT", &db.to_string()]);
    let key = key.to_string();
    let wait_ms = wait_ms.to_string();
    std::thread::spawn(move || ok(&mut w, &["DLOCK.ACQUIRE", &key, "w", "WAIT", &wait_ms]))
}

/// Waits until `n` connections wait on the server.
fn wait_for_waiters(s: &Server, n: u64) {
    let mut c = s.conn();
    let ok = wait_until(Duration::from_secs(20), || {
        info_field(&mut c, "dlock", "dlock_waiting_clients").and_then(|v| v.parse().ok()) == Some(n)
    });
    assert!(ok, "{n} waiting connections expected");
}

#[test]
fn events_on_locks_leave_the_callers_db_alone() {
    let s = Server::start();
    let mut c = s.conn();
    say!("server: {}", server_name(&mut c));
    for db in [0i64, 2] {
        let d = db.to_string();
        ok(&mut c, &["FLUSHALL"]);
        ok(&mut c, &["SELECT", &d]);
        set_marker(&mut c, db);

        // MOVE (move_to fires in the target db), also of a plain key.
        acquire(&mut c, "mv");
        assert_eq!(ok(&mut c, &["MOVE", "mv", "9"]), Value::Int(1));
        assert_still_in(&mut c, db, "MOVE of a lock");
        ok(&mut c, &["SET", "plain", "1"]);
        assert_eq!(ok(&mut c, &["MOVE", "plain", "9"]), Value::Int(1));
        assert_still_in(&mut c, db, "MOVE of a plain key");

        // MOVE inside MULTI after a SELECT in the same transaction.
        acquire(&mut c, "mv2");
        ok(&mut c, &["MULTI"]);
        ok(&mut c, &["SELECT", &d]);
        ok(&mut c, &["MOVE", "mv2", "9"]);
        ok(&mut c, &["GET", "marker"]);
        let Value::Array(replies) = ok(&mut c, &["EXEC"]) else {
            panic!("EXEC")
        };
        assert_eq!(
            text(&replies[2]),
            format!("db{db}"),
            "GET after MOVE in MULTI"
        );
        assert_still_in(&mut c, db, "MOVE in MULTI");

        // MOVE from a script: the script's later commands and the caller
        // stay in the caller's db.
        acquire(&mut c, "mv3");
        let script = "redis.call('MOVE', KEYS[1], '9'); return redis.call('GET', 'marker')";
        let v = ok(&mut c, &["EVAL", script, "1", "mv3"]);
        assert_eq!(text(&v), format!("db{db}"), "GET after MOVE in a script");
        assert_still_in(&mut c, db, "MOVE in a script");

        // RENAME, of a lock with a waiter (its place is dropped by a job).
        acquire(&mut c, "rn");
        let w = waiter(&s, db, "rn", "1000");
        wait_for_waiters(&s, 1);
        ok(&mut c, &["RENAME", "rn", "rn2"]);
        assert_still_in(&mut c, db, "RENAME");
        let _ = w.join();
        assert_still_in(&mut c, db, "RENAME and the waiter's end");

        // COPY ... DB (copy_to fires in the target db). Locks are not
        // copied (an error), plain keys are.
        acquire(&mut c, "cp");
        let e = expect_err(cmd_str(&mut c, &["COPY", "cp", "cp", "DB", "7"]));
        assert!(e.contains("not supported"), "{e}");
        assert_still_in(&mut c, db, "COPY DB of a lock");
        ok(&mut c, &["SET", "cp2", "1"]);
        assert_eq!(
            ok(&mut c, &["COPY", "cp2", "cp2", "DB", "7"]),
            Value::Int(1)
        );
        assert_still_in(&mut c, db, "COPY DB");
        // ... inside MULTI, after SELECTs queued in the same transaction,
        // with a COPY that copies nothing (no event) among them, while
        // another connection sends its own COPY ... DB before EXEC.
        ok(&mut c, &["SELECT", "8"]);
        set_marker(&mut c, 8);
        ok(&mut c, &["MULTI"]);
        ok(&mut c, &["SELECT", &d]);
        ok(&mut c, &["COPY", "nosuchkey", "cp3", "DB", "7"]);
        ok(&mut c, &["COPY", "cp2", "cp3", "DB", "7"]);
        ok(&mut c, &["GET", "marker"]);
        ok(&mut c, &["SELECT", "8"]);
        ok(&mut c, &["COPY", "marker", "cp4", "DB", "7"]);
        ok(&mut c, &["GET", "marker"]);
        let mut other = s.conn();
        ok(&mut other, &["SELECT", "1"]);
        ok(&mut other, &["SET", "o", "1"]);
        ok(&mut other, &["COPY", "o", "o", "DB", "7"]);
        let Value::Array(replies) = ok(&mut c, &["EXEC"]) else {
            panic!("EXEC")
        };
        assert_eq!(replies[1], Value::Int(0), "COPY of a missing key");
        assert_eq!(
            text(&replies[3]),
            format!("db{db}"),
            "GET after COPY in MULTI"
        );
        assert_eq!(text(&replies[6]), "db8", "GET after a second COPY in MULTI");
        assert_eq!(selected_db(&mut other), 1, "the other connection");
        assert_still_in(&mut c, 8, "COPY DB in MULTI");
        ok(&mut c, &["SELECT", &d]);
        assert_still_in(&mut c, db, "SELECT after MULTI");

        // SWAPDB: the caller keeps its index (and sees the other db's data).
        acquire(&mut c, "sw");
        ok(&mut c, &["SWAPDB", &d, "5"]);
        assert_eq!(selected_db(&mut c), db, "after SWAPDB");
        ok(&mut c, &["SWAPDB", &d, "5"]);
        assert_still_in(&mut c, db, "SWAPDB twice");

        // FLUSHDB of a lock with a waiter: the module opens the key in the
        // flushed db to give the waiter its place back.
        ok(&mut c, &["SELECT", "4"]);
        acquire(&mut c, "fl");
        ok(&mut c, &["SELECT", &d]);
        let w = waiter(&s, 4, "fl", "1000");
        wait_for_waiters(&s, 1);
        ok(&mut c, &["SELECT", "4"]);
        ok(&mut c, &["FLUSHDB"]);
        assert_eq!(selected_db(&mut c), 4, "after FLUSHDB");
        ok(&mut c, &["SELECT", &d]);
        assert_still_in(&mut c, db, "FLUSHDB of another db");
        let _ = w.join();
        acquire(&mut c, "fa");
        ok(&mut c, &["FLUSHALL"]);
        assert_eq!(selected_db(&mut c), db, "after FLUSHALL");
        set_marker(&mut c, db);

        // DEBUG RELOAD: every key fires `loaded` in its own db.
        ok(&mut c, &["SELECT", "6"]);
        acquire(&mut c, "ld");
        ok(&mut c, &["SELECT", &d]);
        acquire(&mut c, "ld");
        ok(&mut c, &["DEBUG", "RELOAD"]);
        assert_still_in(&mut c, db, "DEBUG RELOAD");
    }
}

#[test]
fn waiters_keep_their_db_through_expiry_and_timeout() {
    let s = Server::start();
    let mut c = s.conn();
    ok(&mut c, &["SELECT", "3"]);
    // A lease that ends while a connection waits: the expiry timer serves it.
    let v = ok(&mut c, &["DLOCK.ACQUIRE", "ex", "o", "PX", "200"]);
    assert!(matches!(v, Value::Int(_)), "{v:?}");
    let mut w = s.conn();
    ok(&mut w, &["SELECT", "3"]);
    set_marker(&mut w, 3);
    let v = ok(&mut w, &["DLOCK.ACQUIRE", "ex", "w", "WAIT", "20000"]);
    assert!(matches!(v, Value::Int(_)), "waiter served: {v:?}");
    assert_still_in(&mut w, 3, "being served after an expiry");
    // A wait that times out.
    acquire(&mut c, "to");
    let v = ok(&mut w, &["DLOCK.ACQUIRE", "to", "w", "WAIT", "50"]);
    assert_eq!(v, Value::Nil);
    assert_still_in(&mut w, 3, "a WAIT timeout");
    // Evicted lock keys (allkeys-random) in another db than the caller's.
    ok(&mut c, &["SELECT", "5"]);
    for i in 0..50 {
        acquire(&mut c, &format!("ev{i}"));
    }
    ok(
        &mut w,
        &["CONFIG", "SET", "maxmemory-policy", "allkeys-random"],
    );
    ok(&mut w, &["CONFIG", "SET", "maxmemory", "1"]);
    let _ = cmd_str(&mut w, &["SET", "big", "x"]);
    ok(&mut w, &["CONFIG", "SET", "maxmemory", "0"]);
    assert_eq!(selected_db(&mut w), 3, "after evictions");
}

/// The ACL categories COMMAND INFO lists for `name` (empty on servers where
/// modules cannot set them), and its arity.
fn categories_and_arity(con: &mut redis::Connection, name: &str) -> (Vec<String>, i64) {
    let v = ok(con, &["COMMAND", "INFO", name]);
    let Value::Array(outer) = &v else {
        panic!("COMMAND INFO {name}: {v:?}")
    };
    let Some(Value::Array(ci)) = outer.first() else {
        panic!("COMMAND INFO {name}: {v:?}")
    };
    let arity = match ci.get(1) {
        Some(Value::Int(n)) => *n,
        other => panic!("COMMAND INFO {name} arity: {other:?}"),
    };
    let mut cats = Vec::new();
    if let Some(c) = ci.get(6) {
        strings(c, &mut cats);
    }
    (cats, arity)
}

/// Whether `name` takes a key (COMMAND INFO's first-key position is not 0):
/// DLOCK.SCAN, DLOCK.STATS and DLOCK.SLOWLOG take none, so key patterns do
/// not limit them.
fn has_key(con: &mut redis::Connection, name: &str) -> bool {
    let v = ok(con, &["COMMAND", "INFO", name]);
    match &v {
        Value::Array(outer) => match outer.first() {
            Some(Value::Array(ci)) => !matches!(ci.get(3), Some(Value::Int(0))),
            _ => panic!("COMMAND INFO {name}: {v:?}"),
        },
        _ => panic!("COMMAND INFO {name}: {v:?}"),
    }
}

fn module_commands(con: &mut redis::Connection) -> Vec<String> {
    let mut names = Vec::new();
    strings(
        &ok(con, &["COMMAND", "LIST", "FILTERBY", "MODULE", "dlock"]),
        &mut names,
    );
    names.sort();
    assert!(names.len() >= 8, "module commands: {names:?}");
    names
}

/// `ACL DRYRUN user cmd key x x ...` with as many arguments as the arity asks.
fn dryrun(con: &mut redis::Connection, user: &str, cmd: &str, arity: i64, key: &str) -> Value {
    let n = usize::try_from(arity.abs()).expect("arity");
    let mut args = vec!["ACL", "DRYRUN", user, cmd, key];
    args.extend(std::iter::repeat_n("x", n.saturating_sub(2)));
    ok(con, &args)
}

#[test]
fn acl_categories_let_a_write_read_user_use_every_command() {
    let s = Server::start();
    let mut admin = s.conn();
    let server = server_name(&mut admin);
    let names = module_commands(&mut admin);
    let (cats, _) = categories_and_arity(&mut admin, "dlock.info");
    if cats.is_empty() {
        // Redis 7.0 has no RedisModule_SetCommandACLCategories: the commands
        // load without categories (users need +@all or the command names).
        say!(
            "SKIPPED on {server}: the server has no RedisModule_SetCommandACLCategories \
             (ACL categories need Redis 7.2+ or Valkey); commands: {names:?}"
        );
        acquire(&mut admin, "k");
        return;
    }
    let mut all_cats = Vec::new();
    strings(&ok(&mut admin, &["ACL", "CAT"]), &mut all_cats);
    let own = all_cats.iter().any(|c| c == "dlock");
    if !own {
        say!("note on {server}: no RedisModule_AddACLCategory, so no @dlock category");
    }
    for name in &names {
        let (cats, _) = categories_and_arity(&mut admin, name);
        let has = |c: &str| cats.iter().any(|x| x == c);
        assert!(has("@write") || has("@read"), "{name}: {cats:?}");
        assert!(has("@fast") != has("@slow"), "{name}: {cats:?}");
        assert_eq!(has("@dlock"), own, "{name}: {cats:?}");
    }
    ok(
        &mut admin,
        &[
            "ACL", "SETUSER", "app", "on", ">pw", "+@write", "+@read", "~app:*",
        ],
    );
    ok(
        &mut admin,
        &["ACL", "SETUSER", "ro", "on", ">pw", "+@read", "~app:*"],
    );
    for name in &names {
        let (cats, arity) = categories_and_arity(&mut admin, name);
        let v = dryrun(&mut admin, "app", name, arity, "app:x");
        assert_eq!(v, Value::Okay, "app may run {name}: {v:?}");
        if has_key(&mut admin, name) {
            let v = dryrun(&mut admin, "app", name, arity, "other:x");
            assert_ne!(v, Value::Okay, "app may not touch other:x with {name}");
        }
        let v = dryrun(&mut admin, "ro", name, arity, "app:x");
        let read_only = !cats.iter().any(|c| c == "@write");
        assert_eq!(v == Value::Okay, read_only, "+@read user and {name}: {v:?}");
        if own {
            ok(
                &mut admin,
                &["ACL", "SETUSER", "dl", "on", ">pw", "+@dlock", "~*"],
            );
            let v = dryrun(&mut admin, "dl", name, arity, "any");
            assert_eq!(v, Value::Okay, "+@dlock user and {name}: {v:?}");
        }
    }
    // And for real, as that user.
    let client =
        redis::Client::open(format!("redis://app:pw@127.0.0.1:{}/", s.port)).expect("client");
    let mut app = client.get_connection().expect("connect as app");
    acquire(&mut app, "app:x");
    ok(&mut app, &["DLOCK.RENEW", "app:x", "o", "PX", LONG]);
    assert!(matches!(
        ok(&mut app, &["DLOCK.INFO", "app:x"]),
        Value::Array(_) | Value::Map(_)
    ));
    assert_eq!(
        ok(&mut app, &["DLOCK.RELEASE", "app:x", "o"]),
        Value::Int(1)
    );
    ok(
        &mut app,
        &["DLOCK.RWACQUIRE", "app:rw", "o", "READ", "PX", LONG],
    );
    ok(&mut app, &["DLOCK.FAIRACQUIRE", "app:f", "o", "PX", LONG]);
    assert_eq!(
        ok(&mut app, &["DLOCK.FORCERELEASE", "app:f"]),
        Value::Int(1)
    );
    // Permitted by ACL (not NOPERM); refused by the module: internal.
    let e = expect_err(cmd_str(&mut app, &["DLOCK.APPLY", "app:rw", ""]));
    assert!(e.contains("is internal"), "{e}");
    let e = expect_err(cmd_str(&mut app, &["DLOCK.ACQUIRE", "other:x", "o"]));
    assert!(e.starts_with("NOPERM"), "{e}");
    say!(
        "{server}: ACL categories checked on {} commands",
        names.len()
    );
}

#[test]
fn command_names_are_lower_case() {
    let s = Server::start();
    let mut c = s.conn();
    for name in module_commands(&mut c) {
        assert_eq!(name, name.to_lowercase(), "COMMAND LIST");
    }
    // Any case still runs the command; stats use the registered name.
    acquire(&mut c, "k");
    ok(&mut c, &["dlock.release", "k", "o"]);
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut c)
        .expect("INFO");
    assert!(stats.contains("cmdstat_dlock.acquire:calls=1"), "{stats}");
    assert!(stats.contains("cmdstat_dlock.release:calls=1"), "{stats}");
    assert!(!stats.contains("cmdstat_DLOCK"), "{stats}");
}
