//! Lock notifications, end to end: a subscriber on the lock's channel gets
//! `released`, `expired` or `deleted` exactly when the lock becomes grantable
//! to someone who could not have it before, and nothing otherwise.

mod common;
use common::*;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::Value;

/// Bound for a message that should arrive at once.
const SOON: Duration = Duration::from_secs(10);
/// How long we listen to make sure that nothing (more) arrives.
const QUIET: Duration = Duration::from_millis(300);
/// Long enough that no lease ends during a test.
const LONG: &str = "60000";

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock before 1970")
        .as_millis() as i64
}

fn show(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Runs a command that must succeed; returns its reply.
/// The value of `field` in a flat field/value array (RESP2 map).
fn field<'a>(items: &'a [Value], name: &str) -> &'a Value {
    items
        .chunks(2)
        .find(|kv| matches!(&kv[0], Value::BulkString(b) if b == name.as_bytes()))
        .map(|kv| &kv[1])
        .unwrap_or_else(|| panic!("no field {name} in {items:?}"))
}

/// `expires_at` of the first holder in `DLOCK.INFO key`.
fn first_holder_expires_at(con: &mut redis::Connection, key: &str) -> i64 {
    let Value::Array(info) = ok(con, &["DLOCK.INFO", key]) else {
        panic!("DLOCK.INFO {key}: no lock");
    };
    let Value::Array(holders) = field(&info, "holders") else {
        panic!("holders: {info:?}");
    };
    let Some(Value::Array(h)) = holders.first() else {
        panic!("no holder: {info:?}");
    };
    match field(h, "expires_at") {
        Value::Int(t) => *t,
        other => panic!("expires_at: {other:?}"),
    }
}

/// Takes the mutex `key` for `owner` with a long lease; returns the token.
fn hold(con: &mut redis::Connection, key: &str, owner: &str) -> i64 {
    let t = int(con, &["DLOCK.ACQUIRE", key, owner, "PX", LONG]);
    assert!(t > 0);
    t
}

fn read_hold(con: &mut redis::Connection, key: &str, owner: &str, mode: &str) -> i64 {
    int(con, &["DLOCK.RWACQUIRE", key, owner, mode, "PX", LONG])
}

/// Expects the next message to be `payload` on `channel`.
fn expect_msg(sub: &mut Subscriber, channel: &str, payload: &str) {
    let (ch, msg) = sub.expect_message(SOON);
    assert_eq!(
        (show(&ch), show(&msg)),
        (channel.to_string(), payload.to_string()),
        "unexpected notification"
    );
}

/// Expects exactly one message, `payload` on `channel`, and then quiet.
fn expect_only(sub: &mut Subscriber, channel: &str, payload: &str) {
    expect_msg(sub, channel, payload);
    sub.expect_none(QUIET);
}

/// A subscriber to every dlock channel (to see messages on unexpected channels).
fn all_channels(server: &Server) -> Subscriber {
    Subscriber::new_pattern(server, b"dlock:*")
}

fn exists(con: &mut redis::Connection, key: &str) -> bool {
    int(con, &["EXISTS", key]) == 1
}

// ---------------------------------------------------------------------------
// released
// ---------------------------------------------------------------------------

/// The last hold of a mutex going publishes `released`; a partial
/// (reentrant) release publishes nothing.
#[test]
fn released_on_last_release_not_on_partial_release() {
    let server = Server::start();
    let mut con = server.conn();
    let mut sub = Subscriber::new(&server, b"dlock:{k}");
    let t = hold(&mut con, "k", "h");
    assert_eq!(hold(&mut con, "k", "h"), t);
    assert_eq!(hold(&mut con, "k", "h"), t);
    sub.expect_none(QUIET); // grants publish nothing

    assert_eq!(int(&mut con, &["DLOCK.RELEASE", "k", "h"]), 0);
    sub.expect_none(QUIET);
    assert_eq!(int(&mut con, &["DLOCK.RELEASE", "k", "h"]), 0);
    sub.expect_none(QUIET);
    assert_eq!(int(&mut con, &["DLOCK.RELEASE", "k", "h"]), 1);
    expect_only(&mut sub, "dlock:{k}", "released");
    assert!(!exists(&mut con, "k"));
}

/// FORCERELEASE of a held lock publishes `released`; of no lock, nothing.
#[test]
fn released_on_forcerelease() {
    let server = Server::start();
    let mut con = server.conn();
    let mut sub = all_channels(&server);
    hold(&mut con, "fr", "h");
    hold(&mut con, "fr", "h");
    assert_eq!(int(&mut con, &["DLOCK.FORCERELEASE", "fr"]), 1);
    expect_only(&mut sub, "dlock:{fr}", "released");
    assert!(!exists(&mut con, "fr"));

    assert_eq!(int(&mut con, &["DLOCK.FORCERELEASE", "fr"]), 0);
    assert_eq!(int(&mut con, &["DLOCK.FORCERELEASE", "never"]), 0);
    sub.expect_none(QUIET);
}

/// A RELEASE that fails (not the holder, or no lock) publishes nothing, and
/// neither do grants or denied acquires.
#[test]
fn no_message_when_a_release_fails() {
    let server = Server::start();
    let mut con = server.conn();
    let mut sub = all_channels(&server);
    hold(&mut con, "nh", "h");
    let denied = ok(&mut con, &["DLOCK.ACQUIRE", "nh", "other"]);
    assert_eq!(denied, Value::Nil);
    sub.expect_none(QUIET);

    let e = expect_err(cmd_str(&mut con, &["DLOCK.RELEASE", "nh", "other"]));
    assert!(e.starts_with("NOTHELD"), "{e}");
    let e = expect_err(cmd_str(&mut con, &["DLOCK.RELEASE", "missing", "h"]));
    assert!(e.starts_with("NOTHELD"), "{e}");
    sub.expect_none(QUIET);

    // The holder is untouched; its release still publishes.
    assert_eq!(int(&mut con, &["DLOCK.RELEASE", "nh", "h"]), 1);
    expect_only(&mut sub, "dlock:{nh}", "released");
    let e = expect_err(cmd_str(&mut con, &["DLOCK.RELEASE", "nh", "h"]));
    assert!(e.starts_with("NOTHELD"), "{e}");
    sub.expect_none(QUIET);
}

// ---------------------------------------------------------------------------
// expired
// ---------------------------------------------------------------------------

/// A lease that ends with nobody touching the lock is noticed by the
/// module's timer: `expired` is published soon after the lease's end.
#[test]
fn expired_when_a_lease_ends_untouched() {
    let server = Server::start();
    let mut con = server.conn();
    let mut sub = Subscriber::new(&server, b"dlock:{exp}");
    let expirations = server
        .info_field("dlock", "dlock_expirations")
        .and_then(|v| v.parse::<u64>().ok())
        .expect("dlock_expirations");
    assert!(int(&mut con, &["DLOCK.ACQUIRE", "exp", "h", "PX", "200"]) > 0);
    let expires_at = first_holder_expires_at(&mut con, "exp");

    expect_msg(&mut sub, "dlock:{exp}", "expired");
    let at = now_ms();
    assert!(
        at >= expires_at - 5,
        "`expired` at {at}, before the lease's end {expires_at}"
    );
    assert!(
        at - expires_at < 2000,
        "`expired` arrived {} ms after the lease's end",
        at - expires_at
    );
    sub.expect_none(QUIET);
    assert!(!exists(&mut con, "exp"), "an expired lock leaves no key");
    let after = server
        .info_field("dlock", "dlock_expirations")
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap();
    assert_eq!(after, expirations + 1);
    // The former holder's RELEASE fails and publishes nothing.
    let e = expect_err(cmd_str(&mut con, &["DLOCK.RELEASE", "exp", "h"]));
    assert!(e.starts_with("NOTHELD"), "{e}");
    sub.expect_none(QUIET);
}

// ---------------------------------------------------------------------------
// deleted
// ---------------------------------------------------------------------------

/// A held lock removed from outside the module publishes `deleted` once:
/// DEL, UNLINK, overwrite with SET, RENAME and MOVE (source key's channel).
#[test]
fn deleted_on_del_unlink_set_rename_move() {
    let server = Server::start();
    let mut con = server.conn();
    let mut sub = all_channels(&server);
    let cases: &[(&str, &[&str])] = &[
        ("del", &["DEL", "del"]),
        ("unlink", &["UNLINK", "unlink"]),
        ("set", &["SET", "set", "plain-string"]),
        ("rename", &["RENAME", "rename", "renamed"]),
        ("move", &["MOVE", "move", "1"]),
    ];
    for (key, command) in cases {
        hold(&mut con, key, "h");
        sub.expect_none(Duration::from_millis(50));
        ok(&mut con, command);
        let channel = format!("dlock:{{{key}}}");
        expect_only(&mut sub, &channel, "deleted");
    }
    // RENAME moved the lock, with its holder, to the new name.
    let info = ok(&mut con, &["DLOCK.INFO", "renamed"]);
    assert_ne!(info, Value::Nil, "the renamed lock exists");
    assert_eq!(int(&mut con, &["DLOCK.RELEASE", "renamed", "h"]), 1);
    expect_only(&mut sub, "dlock:{renamed}", "released");
    assert_eq!(
        ok(&mut con, &["GET", "set"]),
        Value::BulkString(b"plain-string".to_vec())
    );
}

/// RENAME onto a held lock: both the source (moved away) and the destination
/// (overwritten) publish `deleted`.
#[test]
fn deleted_on_rename_over_a_held_lock() {
    let server = Server::start();
    let mut con = server.conn();
    let mut sub = all_channels(&server);
    hold(&mut con, "src", "a");
    hold(&mut con, "dst", "b");
    ok(&mut con, &["RENAME", "src", "dst"]);
    let mut got = vec![sub.expect_message(SOON), sub.expect_message(SOON)]
        .into_iter()
        .map(|(c, m)| (show(&c), show(&m)))
        .collect::<Vec<_>>();
    got.sort();
    assert_eq!(
        got,
        [
            ("dlock:{dst}".to_string(), "deleted".to_string()),
            ("dlock:{src}".to_string(), "deleted".to_string()),
        ]
    );
    sub.expect_none(QUIET);
    // dst now holds a's lock.
    assert_eq!(int(&mut con, &["DLOCK.RELEASE", "dst", "a"]), 1);
    expect_only(&mut sub, "dlock:{dst}", "released");
}

/// FLUSHDB and FLUSHALL (sync and async) publish `deleted` for each held lock.
#[test]
fn deleted_on_flushdb_and_flushall() {
    let server = Server::start();
    let mut con = server.conn();
    let mut sub = all_channels(&server);
    for flush in [
        vec!["FLUSHDB"],
        vec!["FLUSHALL"],
        vec!["FLUSHDB", "ASYNC"],
        vec!["FLUSHALL", "ASYNC"],
    ] {
        let key = format!("fl-{}", flush.join("-").to_lowercase());
        hold(&mut con, &key, "h");
        sub.expect_none(Duration::from_millis(50));
        ok(&mut con, &flush);
        expect_only(&mut sub, &format!("dlock:{{{key}}}"), "deleted");
        assert!(!exists(&mut con, &key), "{flush:?}");
    }

    // Two locks at once: one message each.
    hold(&mut con, "x1", "h");
    hold(&mut con, "x2", "h");
    ok(&mut con, &["FLUSHALL"]);
    let mut got: Vec<(String, String)> = (0..2)
        .map(|_| {
            let (c, m) = sub.expect_message(SOON);
            (show(&c), show(&m))
        })
        .collect();
    got.sort();
    assert_eq!(
        got,
        [
            ("dlock:{x1}".to_string(), "deleted".to_string()),
            ("dlock:{x2}".to_string(), "deleted".to_string()),
        ]
    );
    sub.expect_none(QUIET);

    // FLUSHDB of another db publishes nothing for locks in db 0.
    hold(&mut con, "keep", "h");
    ok(&mut con, &["SELECT", "1"]);
    ok(&mut con, &["FLUSHDB"]);
    sub.expect_none(QUIET);
    ok(&mut con, &["SELECT", "0"]);
    assert!(exists(&mut con, "keep"));
}

// ---------------------------------------------------------------------------
// channel names
// ---------------------------------------------------------------------------

/// The channel is `dlock:` + key when the key has a non-empty hash tag, else
/// `dlock:{` + key + `}`.
#[test]
fn channel_names_with_and_without_hash_tags() {
    let server = Server::start();
    let mut con = server.conn();
    let mut all = all_channels(&server);
    let cases = [
        ("{user1}:lock", "dlock:{user1}:lock"),
        ("orders", "dlock:{orders}"),
        ("a}b", "dlock:{a}b}"),
        ("a{}b", "dlock:{a{}b}"),
        ("x{tag}y", "dlock:x{tag}y"),
    ];
    for (key, channel) in cases {
        let mut sub = Subscriber::new(&server, channel.as_bytes());
        hold(&mut con, key, "h");
        assert_eq!(int(&mut con, &["DLOCK.RELEASE", key, "h"]), 1);
        expect_only(&mut sub, channel, "released");
        expect_only(&mut all, channel, "released");
    }
}

/// The module keeps the channel string of the key it published last: the
/// same key again, keys alternating, a key that is a prefix of the last, an
/// expired notice after a released one, and keys too long to keep all land
/// on their own channel.
#[test]
fn kept_channel_follows_the_key() {
    let server = Server::start();
    let mut con = server.conn();
    let mut all = all_channels(&server);
    let long = "L".repeat(65);
    let long_channel = format!("dlock:{{{long}}}");
    let keys = [
        "ab", "ab", "a", "ab", "{t}x", "{t}xy", &long, &long, "ab", &long,
    ];
    for key in keys {
        let channel = if key.starts_with("{t}") {
            format!("dlock:{key}")
        } else if key == long {
            long_channel.clone()
        } else {
            format!("dlock:{{{key}}}")
        };
        hold(&mut con, key, "h");
        assert_eq!(int(&mut con, &["DLOCK.RELEASE", key, "h"]), 1);
        expect_msg(&mut all, &channel, "released");
    }
    // Another message on the kept channel of `ab`.
    hold(&mut con, "ab", "h");
    assert_eq!(int(&mut con, &["DLOCK.RELEASE", "ab", "h"]), 1);
    expect_msg(&mut all, "dlock:{ab}", "released");
    int(&mut con, &["DLOCK.ACQUIRE", "ab", "h", "PX", "50"]);
    expect_msg(&mut all, "dlock:{ab}", "expired");
    all.expect_none(QUIET);
}

// ---------------------------------------------------------------------------
// rw locks
// ---------------------------------------------------------------------------

/// READ releases publish only when the lock becomes free or is left to a
/// single reader (who may now upgrade); a WRITE release publishes `released`.
#[test]
fn rw_lock_notifications() {
    let server = Server::start();
    let mut con = server.conn();
    let mut sub = all_channels(&server);
    let ch = "dlock:{rw}";

    read_hold(&mut con, "rw", "r1", "READ");
    read_hold(&mut con, "rw", "r2", "READ");
    read_hold(&mut con, "rw", "r3", "READ");
    read_hold(&mut con, "rw", "r3", "READ"); // reentrant
    sub.expect_none(QUIET);

    // Three readers -> two: still shared, nothing published.
    assert_eq!(int(&mut con, &["DLOCK.RELEASE", "rw", "r1", "READ"]), 1);
    sub.expect_none(QUIET);
    // A partial (reentrant) READ release: nothing.
    assert_eq!(int(&mut con, &["DLOCK.RELEASE", "rw", "r3"]), 0);
    sub.expect_none(QUIET);
    // Two readers -> one: the remaining reader may now upgrade (README).
    assert_eq!(int(&mut con, &["DLOCK.RELEASE", "rw", "r2", "READ"]), 1);
    expect_only(&mut sub, ch, "released");
    // The last reader: free.
    assert_eq!(int(&mut con, &["DLOCK.RELEASE", "rw", "r3", "READ"]), 1);
    expect_only(&mut sub, ch, "released");
    assert!(!exists(&mut con, "rw"));

    // WRITE, reentrant: partial release nothing, last release `released`.
    read_hold(&mut con, "rw", "w", "WRITE");
    read_hold(&mut con, "rw", "w", "WRITE");
    assert_eq!(int(&mut con, &["DLOCK.RELEASE", "rw", "w", "WRITE"]), 0);
    sub.expect_none(QUIET);
    assert_eq!(int(&mut con, &["DLOCK.RELEASE", "rw", "w"]), 1);
    expect_only(&mut sub, ch, "released");

    // Downgrade: WRITE then READ by one owner; releasing WRITE leaves a
    // single reader (others may read now): `released`.
    read_hold(&mut con, "rw", "d", "WRITE");
    read_hold(&mut con, "rw", "d", "READ");
    assert_eq!(int(&mut con, &["DLOCK.RELEASE", "rw", "d", "WRITE"]), 1);
    expect_only(&mut sub, ch, "released");
    assert_eq!(int(&mut con, &["DLOCK.RELEASE", "rw", "d", "READ"]), 1);
    expect_only(&mut sub, ch, "released");
    assert!(!exists(&mut con, "rw"));
}

/// The case of two readers, where releasing one leaves a single reader:
/// README says this publishes (`released`, the reader may now upgrade).
#[test]
fn rw_release_of_one_of_two_readers_follows_the_readme() {
    let server = Server::start();
    let mut con = server.conn();
    let mut sub = Subscriber::new(&server, b"dlock:{two}");
    read_hold(&mut con, "two", "r1", "READ");
    read_hold(&mut con, "two", "r2", "READ");
    assert_eq!(int(&mut con, &["DLOCK.RELEASE", "two", "r1"]), 1);
    expect_only(&mut sub, "dlock:{two}", "released");
    assert_eq!(int(&mut con, &["DLOCK.RELEASE", "two", "r2"]), 1);
    expect_only(&mut sub, "dlock:{two}", "released");
}

/// A lease that ends while a connection waits: `expired` is published and
/// the waiter is served.
#[test]
fn expired_with_a_waiter_is_published_and_the_waiter_served() {
    let server = Server::start();
    let mut con = server.conn();
    let mut sub = Subscriber::new(&server, b"dlock:{ew}");
    let t = int(&mut con, &["DLOCK.ACQUIRE", "ew", "h", "PX", "300"]);
    let mut waiter = server.conn();
    let token = int(
        &mut waiter,
        &["DLOCK.ACQUIRE", "ew", "w", "PX", LONG, "WAIT", "10000"],
    );
    assert!(token > t);
    expect_only(&mut sub, "dlock:{ew}", "expired");
    assert_eq!(int(&mut con, &["DLOCK.RELEASE", "ew", "w"]), 1);
    expect_only(&mut sub, "dlock:{ew}", "released");
}

/// README: `DEBUG RELOAD` looks like a flush to subscribers (`deleted`); the
/// lock itself comes back from the RDB with its holder.
#[test]
fn debug_reload_publishes_deleted() {
    let server = Server::start();
    let mut con = server.conn();
    let mut sub = all_channels(&server);
    hold(&mut con, "dr", "h");
    ok(&mut con, &["DEBUG", "RELOAD"]);
    expect_only(&mut sub, "dlock:{dr}", "deleted");
    assert!(exists(&mut con, "dr"), "the lock is reloaded");
    assert_eq!(int(&mut con, &["DLOCK.RELEASE", "dr", "h"]), 1);
    expect_only(&mut sub, "dlock:{dr}", "released");
}
