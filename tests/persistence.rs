//! Persistence of dlock locks: DEBUG RELOAD, restarts from RDB and from AOF
//! (with and without RDB preamble, before and after BGREWRITEAOF),
//! DUMP/RESTORE (also of forged payloads), fencing tokens across restarts,
//! and lease expiry across a restart.
//!
//! Every comparison uses `DLOCK.INFO` with the `ttl` fields (remaining ms,
//! which vary with time) stripped; `expires_at` (absolute unix ms) must be
//! identical before and after.

mod common;
use common::*;

use std::thread;
use std::time::{Duration, Instant};

use redis::Value;

/// A long lease, so nothing expires during a test.
const LONG: &str = "600000";

/// Options with a long fair-queue timeout, so a queued (polling) fair-lock
/// owner keeps its place across a restart.
/// `apply-from-clients`: some tests set a lock's state by hand with
/// DLOCK.APPLY (e.g. tokens ahead of the clock); production servers refuse
/// that (tests/hardening.rs).
fn opts() -> ServerOpts {
    ServerOpts::new().module_args([
        "fair-queue-timeout-ms",
        "60000",
        "apply-from-clients",
        "yes",
    ])
}

fn aof_opts(preamble: &str) -> ServerOpts {
    opts().args([
        "--appendonly",
        "yes",
        "--appendfsync",
        "always",
        "--aof-use-rdb-preamble",
        preamble,
    ])
}

// ---------------------------------------------------------------------------
// Command helpers
// ---------------------------------------------------------------------------

fn ok(con: &mut redis::Connection, args: &[&str]) {
    match cmd_str(con, args) {
        Ok(Value::Okay) => {}
        Ok(Value::SimpleString(s)) if s == "OK" => {}
        Ok(other) => panic!("{args:?}: unexpected reply {other:?}"),
        Err(e) => panic!("{args:?}: {}", err_string(&e)),
    }
}

fn dump(con: &mut redis::Connection, key: &str) -> Vec<u8> {
    match cmd_str(con, &["DUMP", key]) {
        Ok(Value::BulkString(b)) => b,
        other => panic!("DUMP {key}: {other:?}"),
    }
}

fn restore(con: &mut redis::Connection, key: &str, payload: &[u8]) -> redis::RedisResult<Value> {
    cmd_raw(con, &[b"RESTORE", key.as_bytes(), b"0", payload])
}

/// Waits until a BGREWRITEAOF (or a scheduled one) has finished, and checks it worked.
fn wait_aof_rewrite(s: &Server) {
    let mut con = s.conn();
    let done = wait_until(Duration::from_secs(30), || {
        let text: String = redis::cmd("INFO")
            .arg("persistence")
            .query(&mut con)
            .expect("INFO persistence");
        let info = parse_info(&text);
        info.get("aof_rewrite_in_progress").map(String::as_str) == Some("0")
            && info.get("aof_rewrite_scheduled").map(String::as_str) == Some("0")
    });
    assert!(
        done,
        "AOF rewrite did not finish:\n{}",
        s.info("persistence")
    );
    assert_eq!(
        s.info_field("persistence", "aof_last_bgrewrite_status")
            .as_deref(),
        Some("ok"),
        "{}",
        s.logs_tail(20)
    );
}

fn bgrewriteaof(s: &Server) {
    let mut con = s.conn();
    let reply = cmd_str(&mut con, &["BGREWRITEAOF"]).expect("BGREWRITEAOF");
    assert!(
        matches!(&reply, Value::SimpleString(t) if t.contains("rewriting")),
        "{reply:?}"
    );
    wait_aof_rewrite(s);
}

// ---------------------------------------------------------------------------
// The scenario that must survive: a reentrant mutex (count 2), an rw lock with
// two readers, a fair lock with a holder and a queued (polling) owner.
// ---------------------------------------------------------------------------

const KEYS: [&str; 3] = ["m", "rw", "f"];

/// Creates the locks; returns every token granted.
fn setup_locks(con: &mut redis::Connection) -> Vec<i64> {
    let t1 = token(con, &["DLOCK.ACQUIRE", "m", "alice", "PX", LONG]).expect("m granted");
    let t1b = token(con, &["DLOCK.ACQUIRE", "m", "alice", "PX", LONG]).expect("m reentrant");
    assert_eq!(t1, t1b, "a reentrant grant returns the same token");
    let r1 = token(con, &["DLOCK.RWACQUIRE", "rw", "r1", "READ", "PX", LONG]).expect("r1");
    let r2 = token(con, &["DLOCK.RWACQUIRE", "rw", "r2", "READ", "PX", LONG]).expect("r2");
    let f1 = token(con, &["DLOCK.FAIRACQUIRE", "f", "f1", "PX", LONG]).expect("f1");
    assert_eq!(
        token(con, &["DLOCK.FAIRACQUIRE", "f", "f2", "PX", LONG]),
        None,
        "f2 queues"
    );
    let toks = vec![t1, r1, r2, f1];
    check_shape(con);
    toks
}

/// The locks of [`setup_locks`] look as expected.
fn check_shape(con: &mut redis::Connection) {
    let m = info_raw(con, "m");
    assert_eq!(as_bytes(field(&m, "kind")), b"mutex");
    assert_eq!(holders(&m).len(), 1, "{m:?}");
    assert_eq!(as_int(field(&holders(&m)[0], "count")), 2, "{m:?}");
    let rw = info_raw(con, "rw");
    assert_eq!(as_bytes(field(&rw, "kind")), b"rw");
    assert_eq!(holders(&rw).len(), 2, "{rw:?}");
    let f = info_raw(con, "f");
    assert_eq!(as_bytes(field(&f, "kind")), b"fair");
    assert_eq!(holders(&f).len(), 1, "{f:?}");
    assert_eq!(waiters(&f).len(), 1, "{f:?}");
    assert_eq!(as_bytes(field(&waiters(&f)[0], "owner")), b"f2");
    assert_eq!(as_bytes(field(&waiters(&f)[0], "state")), b"queued");
    for key in KEYS {
        let v = info_raw(con, key);
        for h in holders(&v) {
            let ttl = as_int(field(h, "ttl"));
            assert!(ttl > 0 && ttl <= 700_000, "{key}: {v:?}");
        }
    }
}

fn snapshot(con: &mut redis::Connection) -> Vec<Value> {
    KEYS.iter()
        .map(|k| {
            let v = info_norm(con, k);
            assert_ne!(v, Value::Nil, "lock {k} is missing");
            v
        })
        .collect()
}

fn assert_same_state(con: &mut redis::Connection, before: &[Value], when: &str) {
    let after = snapshot(con);
    for ((k, b), a) in KEYS.iter().zip(before).zip(&after) {
        assert_eq!(a, b, "lock {k} differs after {when}");
    }
    check_shape(con);
}

/// After the locks came back: they still work as locks, and the next new
/// hold gets a token above every earlier one.
fn exercise_after_reload(con: &mut redis::Connection, earlier: &[i64]) {
    let max = *earlier.iter().max().expect("tokens");
    // Reentrant count 2 survived: two releases are needed.
    assert_eq!(int(con, &["DLOCK.RELEASE", "m", "alice"]), 0);
    assert_eq!(token(con, &["DLOCK.ACQUIRE", "m", "bob"]), None);
    assert_eq!(int(con, &["DLOCK.RELEASE", "m", "alice"]), 1);
    let t = token(con, &["DLOCK.ACQUIRE", "m", "bob", "PX", LONG]).expect("bob gets m");
    assert!(t > max, "token {t} after reload must exceed {max}");
    // Two readers: a writer is refused until both left.
    assert_eq!(token(con, &["DLOCK.RWACQUIRE", "rw", "w", "WRITE"]), None);
    assert_eq!(int(con, &["DLOCK.RELEASE", "rw", "r1"]), 1);
    assert_eq!(int(con, &["DLOCK.RELEASE", "rw", "r2"]), 1);
    let tw = token(con, &["DLOCK.RWACQUIRE", "rw", "w", "WRITE", "PX", LONG]).expect("writer");
    assert!(tw > t);
    // The queued fair owner kept its place: an outsider cannot jump it.
    assert_eq!(int(con, &["DLOCK.RELEASE", "f", "f1"]), 1);
    assert_eq!(token(con, &["DLOCK.FAIRACQUIRE", "f", "outsider"]), None);
    let tf = token(con, &["DLOCK.FAIRACQUIRE", "f", "f2", "PX", LONG]).expect("f2 is next");
    assert!(tf > tw);
}

// ---------------------------------------------------------------------------
// DEBUG RELOAD, RDB, AOF
// ---------------------------------------------------------------------------

#[test]
fn debug_reload_keeps_holds_queue_and_tokens() {
    let s = Server::start_with(opts());
    let mut con = s.conn();
    let toks = setup_locks(&mut con);
    // A connection waiting on the server survives a reload in the same process.
    let tb = token(&mut con, &["DLOCK.ACQUIRE", "mb", "holder", "PX", LONG]).unwrap();
    let waiter = blocked_waiter(&s, "mb", "w", "60000");
    let before = snapshot(&mut con);
    let before_mb = info_norm(&mut con, "mb");
    ok(&mut con, &["DEBUG", "RELOAD"]);
    assert_same_state(&mut con, &before, "DEBUG RELOAD");
    // Give deferred work after the load (pruning of gone waiters) a chance.
    thread::sleep(Duration::from_millis(100));
    assert_eq!(
        info_norm(&mut con, "mb"),
        before_mb,
        "mb after DEBUG RELOAD"
    );
    assert_eq!(int(&mut con, &["DLOCK.RELEASE", "mb", "holder"]), 1);
    let got = waiter.join().expect("waiter thread");
    match got {
        Ok(Value::Int(t)) => assert!(t > tb, "{t} > {tb}"),
        other => panic!("the waiter was not handed the lock after DEBUG RELOAD: {other:?}"),
    }
    exercise_after_reload(&mut con, &toks);
}

#[test]
fn rdb_save_and_restart_keeps_holds_queue_and_tokens() {
    let mut s = Server::start_with(opts());
    let toks = setup_locks(&mut s.conn());
    let before = snapshot(&mut s.conn());
    ok(&mut s.conn(), &["SAVE"]);
    s.restart(); // SIGKILL, start again from dump.rdb
    let mut con = s.conn();
    assert_same_state(&mut con, &before, "restart from RDB");
    exercise_after_reload(&mut con, &toks);
}

#[test]
fn shutdown_save_and_restart_keeps_holds_queue_and_tokens() {
    let mut s = Server::start_with(opts());
    let toks = setup_locks(&mut s.conn());
    let before = snapshot(&mut s.conn());
    s.shutdown_save();
    s.restart();
    let mut con = s.conn();
    assert_same_state(&mut con, &before, "SHUTDOWN SAVE and restart");
    exercise_after_reload(&mut con, &toks);
}

fn aof_roundtrip(preamble: &str) {
    let mut s = Server::start_with(aof_opts(preamble));
    let toks = setup_locks(&mut s.conn());
    let before = snapshot(&mut s.conn());
    // A waiting connection is part of the state, but cannot survive a restart.
    token(
        &mut s.conn(),
        &["DLOCK.ACQUIRE", "wb", "holder", "PX", LONG],
    )
    .unwrap();
    let waiter = blocked_waiter(&s, "wb", "w", "60000");
    let wb_holders = holders(&info_norm(&mut s.conn(), "wb")).to_vec();

    // 1. Replay of the DLOCK.APPLY effects appended to the AOF.
    s.restart();
    assert!(waiter.join().expect("waiter thread").is_err());
    assert_same_state(&mut s.conn(), &before, "restart from AOF");
    let mut con = s.conn();
    let pruned = wait_until(Duration::from_secs(5), || {
        waiters(&info_raw(&mut con, "wb")).is_empty()
    });
    assert!(pruned, "dead waiter kept: {:?}", info_raw(&mut con, "wb"));
    assert_eq!(holders(&info_norm(&mut con, "wb")), wb_holders.as_slice());
    drop(con);

    // 2. After a rewrite (RDB preamble or DLOCK.APPLY per key).
    bgrewriteaof(&s);
    s.restart();
    assert_same_state(&mut s.conn(), &before, "BGREWRITEAOF and restart");

    // 3. Changes after the rewrite land in the incremental file.
    let mut con = s.conn();
    assert_eq!(
        int(&mut con, &["DLOCK.RENEW", "rw", "r1", "PX", "700000"]),
        1
    );
    let before2 = snapshot(&mut con);
    assert_ne!(before2, before, "RENEW moved expires_at");
    drop(con);
    s.restart();
    assert_same_state(&mut s.conn(), &before2, "more writes and restart");

    exercise_after_reload(&mut s.conn(), &toks);
    let after_ops = snapshot_existing(&mut s.conn());
    s.restart();
    assert_eq!(
        snapshot_existing(&mut s.conn()),
        after_ops,
        "state after releases and new grants differs after restart from AOF"
    );
}

/// INFO of every key of the scenario, nil included.
fn snapshot_existing(con: &mut redis::Connection) -> Vec<Value> {
    KEYS.iter().map(|k| info_norm(con, k)).collect()
}

#[test]
fn aof_without_preamble_keeps_holds_queue_and_tokens() {
    aof_roundtrip("no");
}

#[test]
fn aof_with_rdb_preamble_keeps_holds_queue_and_tokens() {
    aof_roundtrip("yes");
}

// ---------------------------------------------------------------------------
// DUMP / RESTORE
// ---------------------------------------------------------------------------

#[test]
fn dump_restore_under_another_name_and_into_another_server() {
    let a = Server::start_with(opts());
    let b = Server::start_with(opts());
    let mut ca = a.conn();
    let mut cb = b.conn();
    let toks = setup_locks(&mut ca);
    let max = *toks.iter().max().unwrap();
    for key in KEYS {
        let payload = dump(&mut ca, key);
        let copy = format!("{key}-copy");
        assert_eq!(restore(&mut ca, &copy, &payload).unwrap(), Value::Okay);
        assert_eq!(
            info_norm(&mut ca, &copy),
            info_norm(&mut ca, key),
            "RESTORE {copy} on the same server"
        );
        let t: String = redis::cmd("TYPE").arg(&copy).query(&mut ca).unwrap();
        assert_eq!(t, "dlocklock");

        assert_eq!(restore(&mut cb, key, &payload).unwrap(), Value::Okay);
        assert_eq!(
            info_norm(&mut cb, key),
            info_norm(&mut ca, key),
            "RESTORE {key} into another server"
        );
        // RESTORE onto an existing key needs REPLACE.
        let e = expect_err(restore(&mut cb, key, &payload));
        assert!(e.starts_with("BUSYKEY"), "{e}");
        let r = cmd_raw(
            &mut cb,
            &[b"RESTORE", key.as_bytes(), b"0", &payload, b"REPLACE"],
        );
        assert_eq!(r.unwrap(), Value::Okay);
        assert_eq!(info_norm(&mut cb, key), info_norm(&mut ca, key));
    }
    // The restored copies work as locks on the other server, and their next
    // grant's token exceeds the tokens they carry.
    exercise_after_reload(&mut cb, &toks);
    let t = token(&mut cb, &["DLOCK.ACQUIRE", "fresh", "x"]).unwrap();
    assert!(t > max);
}

/// A lock restored under another name on the same server carries the
/// original's blocked waiter, whose connection waits on the original key (and
/// is alive in this process, so it is not pruned as a gone connection). The
/// copy must not be stalled by it: once the copy's holder lets go, a new
/// owner must get the copy.
#[test]

fn restored_copy_is_not_stalled_by_a_waiter_of_the_original() {
    let s = Server::start_with(opts());
    let mut con = s.conn();
    let t0 = token(&mut con, &["DLOCK.ACQUIRE", "orig", "a", "PX", LONG]).unwrap();
    let waiter = blocked_waiter(&s, "orig", "w", "20000");
    let payload = dump(&mut con, "orig");
    assert_eq!(restore(&mut con, "copy", &payload).unwrap(), Value::Okay);
    assert_eq!(int(&mut con, &["DLOCK.RELEASE", "copy", "a"]), 1);
    let got = token(
        &mut con,
        &["DLOCK.ACQUIRE", "copy", "b", "PX", LONG, "WAIT", "3000"],
    );
    let copy_info = info_raw(&mut con, "copy");
    // The original is unaffected: its waiter gets it.
    assert_eq!(int(&mut con, &["DLOCK.RELEASE", "orig", "a"]), 1);
    match waiter.join().expect("waiter thread") {
        Ok(Value::Int(t)) => assert!(t > t0),
        other => panic!("the original's waiter was not served: {other:?}"),
    }
    assert!(
        got.is_some(),
        "a new owner could not take the restored copy, stalled behind a waiter \
         that waits on another key: {copy_info:?}"
    );
}

#[test]
fn restore_refuses_payloads_with_a_wrong_checksum() {
    let s = Server::start_with(opts());
    let mut con = s.conn();
    setup_locks(&mut con);
    let payload = dump(&mut con, "f");
    for i in 0..payload.len() {
        for flip in [0x01u8, 0x80, 0xff] {
            let mut bad = payload.clone();
            bad[i] ^= flip;
            let e = expect_err(restore(&mut con, "forged", &bad));
            assert_eq!(
                e, "ERR DUMP payload version or checksum are wrong",
                "byte {i} ^ {flip:#x}"
            );
        }
    }
    assert_eq!(info_raw(&mut con, "forged"), Value::Nil);
    // The original still restores.
    assert_eq!(restore(&mut con, "forged", &payload).unwrap(), Value::Okay);
}

// ---- Redis' DUMP format and crc64 ------------------------------------------

/// Redis' crc64 (Jones polynomial 0xad93d23594c935a9, reflected, init 0,
/// no final xor), bit by bit with the reflected polynomial.
fn crc64(data: &[u8]) -> u64 {
    const POLY_REFLECTED: u64 = 0x95ac_9329_ac4b_c9b5;
    let mut crc: u64 = 0;
    for &b in data {
        crc ^= u64::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ POLY_REFLECTED
            } else {
                crc >> 1
            };
        }
    }
    crc
}

/// Splits a DUMP payload into (object bytes, 2-byte RDB version).
fn split_dump(payload: &[u8]) -> (&[u8], [u8; 2]) {
    assert!(payload.len() > 10, "DUMP payload too short");
    let n = payload.len();
    let crc = u64::from_le_bytes(payload[n - 8..].try_into().unwrap());
    assert_eq!(crc64(&payload[..n - 8]), crc, "crc64 does not match DUMP");
    (&payload[..n - 10], [payload[n - 10], payload[n - 9]])
}

/// A DUMP payload: object bytes, RDB version, valid crc64.
fn seal(object: &[u8], version: [u8; 2]) -> Vec<u8> {
    let mut out = object.to_vec();
    out.extend_from_slice(&version);
    let crc = crc64(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// RDB length encoding (6-bit, 14-bit or 32-bit form).
fn rdb_len(n: usize) -> Vec<u8> {
    if n < 64 {
        vec![n as u8]
    } else if n < 16384 {
        vec![0x40 | (n >> 8) as u8, n as u8]
    } else {
        let mut v = vec![0x80];
        v.extend_from_slice(&(n as u32).to_be_bytes());
        v
    }
}

/// An RDB module object (`RDB_TYPE_MODULE_2`) of the lock type holding one
/// string buffer, uncompressed. `head` is the type byte and module id taken
/// from a real DUMP of a lock.
fn module_object(head: &[u8], data: &[u8]) -> Vec<u8> {
    let mut o = head.to_vec();
    o.push(5); // RDB_MODULE_OPCODE_STRING
    o.extend(rdb_len(data.len()));
    o.extend_from_slice(data);
    o.push(0); // RDB_MODULE_OPCODE_EOF
    o
}

// ---- dlock's payload encoding (dlock-core/src/codec.rs), to forge payloads -------

struct H<'a>(&'a [u8], u8, u64, u64, u64); // owner, mode, count, expires_at, token
struct W<'a>(u64, &'a [u8], u8, u8, u64); // id, owner, mode, blocked, expires_at

fn lock_payload(kind: u8, last: u64, floor: u64, hs: &[H<'_>], ws: &[W<'_>]) -> Vec<u8> {
    let mut o = vec![1, kind];
    varint(&mut o, last);
    varint(&mut o, floor);
    varint(&mut o, hs.len() as u64);
    for h in hs {
        varint(&mut o, h.0.len() as u64);
        o.extend_from_slice(h.0);
        o.push(h.1);
        varint(&mut o, h.2);
        varint(&mut o, h.3);
        varint(&mut o, h.4);
    }
    varint(&mut o, ws.len() as u64);
    for w in ws {
        varint(&mut o, w.0);
        varint(&mut o, w.1.len() as u64);
        o.extend_from_slice(w.1);
        o.push(w.2);
        o.push(w.3);
        varint(&mut o, w.4);
    }
    o
}

#[test]
fn crc64_matches_redis() {
    assert_eq!(crc64(b"123456789"), 0xe9c6_d914_c4b8_d9ca);
    let s = Server::start_with(opts());
    let mut con = s.conn();
    ok(&mut con, &["SET", "s", "hello"]);
    let payload = dump(&mut con, "s");
    let (object, version) = split_dump(&payload);
    assert_eq!(seal(object, version), payload);
    // A payload we seal ourselves is accepted.
    let resealed = seal(object, version);
    assert_eq!(restore(&mut con, "s2", &resealed).unwrap(), Value::Okay);
    let v: String = redis::cmd("GET").arg("s2").query(&mut con).unwrap();
    assert_eq!(v, "hello");
}

/// RESTORE of a corrupt (but correctly checksummed) payload: an error or, for a
/// corruption that still decodes to a valid lock, a lock that works. Never a
/// crash. Returns whether it was refused.
fn try_forged(s: &mut Server, con: &mut redis::Connection, payload: &[u8], what: &str) -> bool {
    let r = restore(con, "forged", payload);
    let refused = match r {
        Err(e) => {
            let text = err_string(&e);
            assert!(
                text.starts_with("ERR ") || text.starts_with("BUSYKEY"),
                "{what}: unexpected error {text}"
            );
            true
        }
        Ok(_) => {
            // A corruption that happens to be valid (e.g. a changed owner byte):
            // whatever it is, it must be usable and deletable.
            let ty: String = redis::cmd("TYPE").arg("forged").query(con).unwrap();
            if ty == "dlocklock" {
                let info = cmd_str(con, &["DLOCK.INFO", "forged"]);
                assert!(info.is_ok(), "{what}: INFO of restored lock: {info:?}");
                let _ = cmd_str(con, &["DLOCK.FORCERELEASE", "forged"]);
            }
            let _ = cmd_str(con, &["DEL", "forged"]);
            false
        }
    };
    let pong: String = redis::cmd("PING").query(con).unwrap_or_else(|e| {
        panic!(
            "{what}: server gone after RESTORE: {e}\n{}",
            s.logs_tail(30)
        )
    });
    assert_eq!(pong, "PONG");
    refused
}

#[test]
fn restore_refuses_corrupt_module_data_with_a_valid_checksum() {
    let mut s = Server::start_with(opts());
    let mut con = s.conn();
    setup_locks(&mut con);
    // A waiter with a blocked flag too, for a richer payload.
    let real = dump(&mut con, "f");
    let (object, version) = split_dump(&real);
    let object = object.to_vec();
    assert_eq!(object[0], 7, "RDB_TYPE_MODULE_2 expected: {object:?}");
    let head = object[..10].to_vec(); // type byte + 0x81 + 8-byte module id

    // Our own framing of a valid lock is accepted (checks the forging tools).
    let exp = now_ms() + 600_000;
    let good = lock_payload(
        2,
        100,
        100,
        &[H(b"holder", 0, 1, exp, 90)],
        &[W(7, b"next", 0, 0, exp), W(8, b"later", 0, 1, exp)],
    );
    let sealed = seal(&module_object(&head, &good), version);
    assert_eq!(restore(&mut con, "crafted", &sealed).unwrap(), Value::Okay);
    let info = info_raw(&mut con, "crafted");
    assert_eq!(as_int(field(&info, "token")), 100);
    assert_eq!(as_bytes(field(&holders(&info)[0], "owner")), b"holder");
    assert_eq!(as_int(field(&holders(&info)[0], "expires_at")), exp as i64);
    assert_eq!(as_bytes(field(&waiters(&info)[0], "owner")), b"next");
    assert_eq!(as_int(field(&waiters(&info)[0], "expires_at")), exp as i64);
    // The blocked waiter names no connection of this server: it is dropped.
    let pruned = wait_until(Duration::from_secs(5), || {
        waiters(&info_raw(&mut con, "crafted")).len() == 1
    });
    assert!(pruned, "{:?}", info_raw(&mut con, "crafted"));

    // 1. Every truncation of the real object, and of our uncompressed one.
    // RESTORE reads on into the 10-byte footer (Redis does not check that
    // the object ends where the footer begins), so a payload short by a byte
    // or two can still load when the footer bytes happen to fit: such a
    // result must then be a working lock (checked by try_forged). Everything
    // shorter must be refused.
    let crafted_obj = module_object(&head, &good);
    for obj in [&object, &crafted_obj] {
        let mut accepted = Vec::new();
        for len in 0..obj.len() {
            let p = seal(&obj[..len], version);
            if !try_forged(&mut s, &mut con, &p, &format!("truncated to {len}")) {
                accepted.push(len);
            }
        }
        assert!(
            accepted.iter().all(|&len| len + 3 > obj.len()),
            "truncations of a {}-byte object accepted at lengths {accepted:?}",
            obj.len()
        );
    }
    // Truncations of the module data inside intact framing.
    for len in 0..good.len() {
        let p = seal(&module_object(&head, &good[..len]), version);
        assert!(
            try_forged(
                &mut s,
                &mut con,
                &p,
                &format!("lock data truncated to {len}")
            ),
            "lock data truncated to {len} of {} bytes was accepted",
            good.len()
        );
    }

    // 2. Random byte flips inside the object part (re-sealed).
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut refused = 0;
    let mut total = 0;
    for round in 0..200 {
        let base: &[u8] = if round % 2 == 0 {
            &object
        } else {
            &crafted_obj
        };
        let mut obj = base.to_vec();
        for _ in 0..1 + rng.below(3) {
            let i = rng.below(obj.len() as u64) as usize;
            obj[i] ^= 1 + rng.below(255) as u8;
        }
        total += 1;
        if try_forged(
            &mut s,
            &mut con,
            &seal(&obj, version),
            &format!("flip round {round}"),
        ) {
            refused += 1;
        }
    }
    eprintln!("random flips: {refused} of {total} refused");
    // Flips inside owner bytes or expiry times can still be valid locks;
    // most must be refused.
    assert!(
        refused * 2 > total,
        "only {refused} of {total} corruptions refused"
    );

    // 3. Structurally broken lock data in intact framing: refused by RESTORE
    // and by DLOCK.APPLY alike.
    let big = (i64::MAX as u64) + 1;
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("unknown version", {
            let mut p = good.clone();
            p[0] = 2;
            p
        }),
        (
            "unknown kind",
            lock_payload(9, 5, 5, &[H(b"a", 0, 1, exp, 5)], &[]),
        ),
        (
            "token above 2^63",
            lock_payload(0, big, 5, &[H(b"a", 0, 1, exp, 5)], &[]),
        ),
        (
            "floor above 2^63",
            lock_payload(0, 5, big, &[H(b"a", 0, 1, exp, 5)], &[]),
        ),
        (
            "count 0",
            lock_payload(0, 5, 5, &[H(b"a", 0, 0, exp, 5)], &[]),
        ),
        (
            "count above u32",
            lock_payload(0, 5, 5, &[H(b"a", 0, 1 << 32, exp, 5)], &[]),
        ),
        (
            "holder token 0",
            lock_payload(0, 5, 5, &[H(b"a", 0, 1, exp, 0)], &[]),
        ),
        (
            "holder token above last",
            lock_payload(0, 5, 5, &[H(b"a", 0, 1, exp, 6)], &[]),
        ),
        (
            "duplicate hold",
            lock_payload(
                1,
                5,
                5,
                &[H(b"a", 1, 1, exp, 4), H(b"a", 1, 1, exp, 5)],
                &[],
            ),
        ),
        (
            "two exclusive holders",
            lock_payload(
                0,
                5,
                5,
                &[H(b"a", 0, 1, exp, 4), H(b"b", 0, 1, exp, 5)],
                &[],
            ),
        ),
        (
            "writer shared with a reader",
            lock_payload(
                1,
                5,
                5,
                &[H(b"a", 2, 1, exp, 4), H(b"b", 1, 1, exp, 5)],
                &[],
            ),
        ),
        (
            "read mode on a mutex",
            lock_payload(0, 5, 5, &[H(b"a", 1, 1, exp, 5)], &[]),
        ),
        (
            "exclusive mode on rw",
            lock_payload(1, 5, 5, &[H(b"a", 0, 1, exp, 5)], &[]),
        ),
        (
            "unknown mode",
            lock_payload(0, 5, 5, &[H(b"a", 7, 1, exp, 5)], &[]),
        ),
        (
            "empty owner",
            lock_payload(0, 5, 5, &[H(b"", 0, 1, exp, 5)], &[]),
        ),
        (
            "owner of 513 bytes",
            lock_payload(0, 5, 5, &[H(&[b'o'; 513], 0, 1, exp, 5)], &[]),
        ),
        (
            "blocked flag 2",
            lock_payload(2, 5, 5, &[H(b"a", 0, 1, exp, 5)], &[W(1, b"b", 0, 2, exp)]),
        ),
        (
            "duplicate waiter id",
            lock_payload(
                2,
                5,
                5,
                &[H(b"a", 0, 1, exp, 5)],
                &[W(1, b"b", 0, 0, exp), W(1, b"c", 0, 0, exp)],
            ),
        ),
        (
            "neither holders nor waiters",
            lock_payload(0, 5, 5, &[], &[]),
        ),
        ("trailing bytes", {
            let mut p = lock_payload(0, 5, 5, &[H(b"a", 0, 1, exp, 5)], &[]);
            p.push(0);
            p
        }),
        ("entry count beyond the payload", {
            let mut p = vec![1, 0, 5, 5];
            varint(&mut p, 1 << 40);
            p
        }),
        ("non-minimal varint", vec![1, 0, 0x85, 0x00, 5, 0]),
        ("varint overflowing 64 bits", {
            let mut p = vec![1, 0];
            p.extend_from_slice(&[0xff; 10]);
            p.push(0x01);
            p
        }),
        ("empty lock data", vec![]),
    ];
    for (what, data) in &cases {
        let p = seal(&module_object(&head, data), version);
        assert!(
            try_forged(&mut s, &mut con, &p, what),
            "RESTORE accepted a payload with {what}"
        );
        if !data.is_empty() {
            let e = expect_err(cmd_raw(&mut con, &[b"DLOCK.APPLY", b"applied", data]));
            assert!(
                e.starts_with("ERR invalid lock payload"),
                "DLOCK.APPLY with {what}: {e}"
            );
        }
        assert_eq!(info_raw(&mut con, "applied"), Value::Nil, "{what}");
    }
    s.assert_alive();
    // Nothing leaked into the keyspace but the scenario and the crafted lock.
    let mut keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut con).unwrap();
    keys.sort();
    assert_eq!(keys, vec!["crafted", "f", "m", "rw"]);
}

/// PING over a plain socket with a 5 s timeout: a hung server fails this
/// instead of blocking the test (a new redis::Connection may send its setup
/// commands without a read timeout).
fn answers_ping(s: &Server) -> bool {
    use std::io::{Read, Write};
    let Ok(mut sock) = std::net::TcpStream::connect(("127.0.0.1", s.port)) else {
        return false;
    };
    let _ = sock.set_read_timeout(Some(Duration::from_secs(5)));
    if sock.write_all(b"*1\r\n$4\r\nPING\r\n").is_err() {
        return false;
    }
    let mut buf = [0u8; 7];
    sock.read_exact(&mut buf).is_ok() && &buf == b"+PONG\r\n"
}

/// Lease ends far beyond any lease a command can grant (leases are at most
/// 2^40 ms) in a forged payload: refused, or kept and reported as given, but
/// never a hung server.
#[test]

fn forged_far_future_lease_does_not_hang_the_server() {
    let s = Server::start_with(opts());
    let mut con = s.conn_with_timeout(Some(Duration::from_secs(5)));
    // A real DUMP for the framing; its short lease ends (and its timer runs)
    // before the forged locks arrive, so each of those arms the timer itself.
    token(&mut con, &["DLOCK.ACQUIRE", "model", "a", "PX", "50"]).unwrap();
    let real = dump(&mut con, "model");
    let (object, version) = split_dump(&real);
    let head = object[..10].to_vec();
    assert!(wait_until(Duration::from_secs(5), || {
        info_raw(&mut con, "model") == Value::Nil
    }));
    let now = now_ms();
    let cases = [
        ("RESTORE", now + (1u64 << 62)),
        ("DLOCK.APPLY", now + (1u64 << 62)),
        ("RESTORE", now + (1u64 << 53)),
        ("RESTORE", now + (1u64 << 41)),
        ("RESTORE", u64::MAX),
    ];
    for (i, (how, at)) in cases.into_iter().enumerate() {
        let key = format!("far{i}");
        let data = lock_payload(0, 5, 5, &[H(b"a", 0, 1, at, 5)], &[]);
        let r = match how {
            "RESTORE" => restore(&mut con, &key, &seal(&module_object(&head, &data), version)),
            _ => cmd_raw(&mut con, &[b"DLOCK.APPLY", key.as_bytes(), &data]),
        };
        assert!(
            answers_ping(&s),
            "server unresponsive after {how} of a lease ending at {at} (reply: {r:?})"
        );
        if r.is_ok() {
            let info = info_raw(&mut con, &key);
            let shown = as_int(field(&holders(&info)[0], "expires_at"));
            assert_eq!(
                shown as u64, at,
                "{how} {at}: INFO shows expires_at {shown}"
            );
            assert!(shown >= 0, "{how} {at}: INFO shows expires_at {shown}");
            assert!(as_int(field(&holders(&info)[0], "ttl")) >= 0, "{info:?}");
            assert_eq!(int(&mut con, &["DEL", &key]), 1);
        }
        thread::sleep(Duration::from_millis(50));
    }
}

// ---------------------------------------------------------------------------
// Fencing tokens across restarts
// ---------------------------------------------------------------------------

/// Pushes the server's token counter far above the clock, as if tokens had
/// been issued while the clock was ahead (it stepped back since): without
/// that, tokens (at least the unix time in µs) would grow across a restart
/// by the clock alone. Returns a token the server really granted afterwards.
fn push_tokens_ahead_of_the_clock(con: &mut redis::Connection, key: &str) -> i64 {
    let ahead = now_us() + 10_000_000_000_000; // ~116 days
    let p = lock_payload(
        0,
        ahead,
        ahead,
        &[H(b"old", 0, 1, now_ms() + 600_000, ahead)],
        &[],
    );
    let r = cmd_raw(con, &[b"DLOCK.APPLY", b"boost", &p]);
    assert_eq!(r.unwrap(), Value::Okay);
    let t = token(con, &["DLOCK.ACQUIRE", key, "early", "PX", LONG]).expect("grant");
    assert!(
        t as u64 > ahead,
        "token {t} must exceed every token seen ({ahead})"
    );
    t
}

#[test]
fn tokens_keep_increasing_after_release_and_restart_from_rdb() {
    let mut s = Server::start_with(opts());
    let mut con = s.conn();
    // By the clock.
    let t1 = token(&mut con, &["DLOCK.ACQUIRE", "t", "a"]).unwrap();
    assert_eq!(int(&mut con, &["DLOCK.RELEASE", "t", "a"]), 1);
    assert_eq!(info_raw(&mut con, "t"), Value::Nil);
    ok(&mut con, &["SAVE"]);
    drop(con);
    s.restart();
    let mut con = s.conn();
    let t2 = token(&mut con, &["DLOCK.ACQUIRE", "t", "b"]).unwrap();
    assert!(t2 > t1, "{t2} > {t1}");
    assert_eq!(int(&mut con, &["DLOCK.RELEASE", "t", "b"]), 1);

    // With tokens ahead of the clock and no lock left at all.
    let t3 = push_tokens_ahead_of_the_clock(&mut con, "t");
    assert_eq!(int(&mut con, &["DLOCK.RELEASE", "t", "early"]), 1);
    assert_eq!(int(&mut con, &["DLOCK.RELEASE", "boost", "old"]), 1);
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut con).unwrap();
    assert!(keys.is_empty(), "{keys:?}");
    ok(&mut con, &["SAVE"]);
    drop(con);
    s.restart();
    let mut con = s.conn();
    let t4 = token(&mut con, &["DLOCK.ACQUIRE", "t", "c"]).unwrap();
    assert!(t4 > t3, "after restart from RDB: {t4} must exceed {t3}");
    let t5 = token(&mut con, &["DLOCK.ACQUIRE", "other", "c"]).unwrap();
    assert!(t5 > t4);

    // And after DEBUG RELOAD.
    assert_eq!(int(&mut con, &["DEL", "t", "other"]), 2);
    ok(&mut con, &["DEBUG", "RELOAD"]);
    let t6 = token(&mut con, &["DLOCK.ACQUIRE", "t", "d"]).unwrap();
    assert!(t6 > t5);
}

#[test]
fn tokens_keep_increasing_after_del_and_restart_from_aof_by_the_clock() {
    let mut s = Server::start_with(aof_opts("no"));
    let mut con = s.conn();
    let t1 = token(&mut con, &["DLOCK.ACQUIRE", "t", "a", "PX", LONG]).unwrap();
    assert_eq!(int(&mut con, &["DEL", "t"]), 1);
    drop(con);
    s.restart(); // the AOF replays APPLY then DEL
    let mut con = s.conn();
    let t2 = token(&mut con, &["DLOCK.ACQUIRE", "t", "b", "PX", LONG]).unwrap();
    assert!(t2 > t1);
    assert_eq!(int(&mut con, &["DEL", "t"]), 1);
    drop(con);
    bgrewriteaof(&s); // no lock left: an empty base file
    s.restart();
    let mut con = s.conn();
    let t3 = token(&mut con, &["DLOCK.ACQUIRE", "t", "c"]).unwrap();
    assert!(t3 > t2);
}

/// Tokens ahead of the clock, every lock deleted, AOF rewritten with no lock
/// left, restart: the next token must still exceed every earlier one.
fn tokens_after_del_and_rewritten_aof(preamble: &str) {
    let mut s = Server::start_with(aof_opts(preamble));
    let mut con = s.conn();
    let t1 = push_tokens_ahead_of_the_clock(&mut con, "t");
    assert_eq!(int(&mut con, &["DEL", "t", "boost"]), 2);
    drop(con);
    // Replaying the AOF as written restores the counter from the APPLYs.
    s.restart();
    let mut con = s.conn();
    let t2 = token(&mut con, &["DLOCK.ACQUIRE", "t", "b", "PX", LONG]).unwrap();
    assert!(t2 > t1, "after restart from AOF: {t2} must exceed {t1}");
    assert_eq!(int(&mut con, &["DEL", "t"]), 1);
    drop(con);
    // A rewrite with no lock left must still carry the counter.
    bgrewriteaof(&s);
    s.restart();
    let mut con = s.conn();
    let t3 = token(&mut con, &["DLOCK.ACQUIRE", "t", "c"]).unwrap();
    assert!(
        t3 > t2,
        "after DEL, BGREWRITEAOF (preamble {preamble}) and restart: token {t3} must exceed {t2}"
    );
}

#[test]
fn tokens_ahead_of_the_clock_survive_del_and_rewritten_aof_with_preamble() {
    tokens_after_del_and_rewritten_aof("yes");
}

#[test]
#[ignore = "known limitation (README, Fencing tokens): an AOF rewritten without RDB preamble and with no lock left carries no token counter; tokens then follow the clock only"]
fn tokens_ahead_of_the_clock_survive_del_and_rewritten_aof_without_preamble() {
    tokens_after_del_and_rewritten_aof("no");
}

// ---------------------------------------------------------------------------
// Expiry across a restart
// ---------------------------------------------------------------------------

/// Starts `DLOCK.ACQUIRE key owner WAIT ms` on its own connection and waits
/// until the server shows it as a blocked waiter. The thread returns the reply.
fn blocked_waiter(
    s: &Server,
    key: &str,
    owner: &str,
    wait_ms: &str,
) -> thread::JoinHandle<redis::RedisResult<Value>> {
    let mut c = s.conn();
    let (key2, owner2, wait2) = (key.to_string(), owner.to_string(), wait_ms.to_string());
    let h = thread::spawn(move || {
        cmd_str(
            &mut c,
            &[
                "DLOCK.ACQUIRE",
                &key2,
                &owner2,
                "PX",
                "600000",
                "WAIT",
                &wait2,
            ],
        )
    });
    let mut con = s.conn();
    let seen = wait_until(Duration::from_secs(10), || {
        let v = info_raw(&mut con, key);
        v != Value::Nil
            && waiters(&v)
                .iter()
                .any(|w| as_bytes(field(w, "owner")) == owner.as_bytes())
    });
    assert!(seen, "{owner} never showed up as a waiter of {key}");
    h
}

#[test]
fn lease_that_ended_while_the_server_was_down_is_gone_after_restart() {
    let mut s = Server::start_with(opts());
    let mut con = s.conn();
    token(&mut con, &["DLOCK.ACQUIRE", "gone", "a", "PX", "1500"]).expect("grant");
    let waiter = blocked_waiter(&s, "gone", "w", "60000");
    let info = info_raw(&mut con, "gone");
    let expires_at = as_int(field(&holders(&info)[0], "expires_at")) as u64;
    assert_eq!(as_bytes(field(&waiters(&info)[0], "state")), b"blocked");
    ok(&mut con, &["SAVE"]);
    drop(con);
    s.stop(); // the waiting connection dies with the server
    let r = waiter.join().expect("waiter thread");
    assert!(r.is_err(), "the waiter's connection must fail: {r:?}");
    while now_ms() <= expires_at + 100 {
        thread::sleep(Duration::from_millis(50));
    }
    s.restart();
    let mut con = s.conn();
    // A new owner gets the lock at once (at worst after the module's timer).
    let start = Instant::now();
    let t = token(
        &mut con,
        &["DLOCK.ACQUIRE", "gone", "b", "PX", LONG, "WAIT", "10000"],
    );
    assert!(
        t.is_some(),
        "the expired lock was not granted to a new owner"
    );
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    let info = info_raw(&mut con, "gone");
    assert_eq!(holders(&info).len(), 1, "{info:?}");
    assert_eq!(as_bytes(field(&holders(&info)[0], "owner")), b"b");
    assert!(
        waiters(&info).is_empty(),
        "the dead waiter is gone: {info:?}"
    );

    // Same without anyone asking: the key itself disappears promptly.
    token(&mut con, &["DLOCK.ACQUIRE", "gone2", "a", "PX", "1500"]).expect("grant");
    let info = info_raw(&mut con, "gone2");
    let expires_at = as_int(field(&holders(&info)[0], "expires_at")) as u64;
    ok(&mut con, &["SAVE"]);
    drop(con);
    s.stop();
    while now_ms() <= expires_at + 100 {
        thread::sleep(Duration::from_millis(50));
    }
    s.restart();
    let mut con = s.conn();
    let gone = wait_until(Duration::from_secs(5), || {
        info_raw(&mut con, "gone2") == Value::Nil
    });
    assert!(gone, "{:?}", info_raw(&mut con, "gone2"));
    assert_eq!(int(&mut con, &["EXISTS", "gone2"]), 0);
}

#[test]
fn lease_ending_after_restart_expires_on_time() {
    let mut s = Server::start_with(opts());
    let mut con = s.conn();
    token(&mut con, &["DLOCK.ACQUIRE", "soon", "a", "PX", "8000"]).expect("grant");
    let waiter = blocked_waiter(&s, "soon", "w", "60000");
    let info = info_raw(&mut con, "soon");
    let expires_at = as_int(field(&holders(&info)[0], "expires_at")) as u64;
    ok(&mut con, &["SAVE"]);
    drop(con);
    s.stop();
    let _ = waiter.join();
    s.restart();
    let mut sub = Subscriber::new(&s, b"dlock:{soon}");
    let mut con = s.conn();
    let info = info_raw(&mut con, "soon");
    assert_ne!(
        info,
        Value::Nil,
        "restart took longer than the 8 s lease; cannot check its expiry"
    );
    assert_eq!(
        as_int(field(&holders(&info)[0], "expires_at")) as u64,
        expires_at
    );
    // The waiter persisted with the lock has no connection in this process.
    let pruned = wait_until(Duration::from_secs(5), || {
        let v = info_raw(&mut con, "soon");
        v == Value::Nil || waiters(&v).is_empty()
    });
    assert!(pruned, "{:?}", info_raw(&mut con, "soon"));
    let remaining = expires_at.saturating_sub(now_ms());
    let (_, msg) = sub.expect_message(Duration::from_millis(remaining + 5000));
    let at = now_ms();
    assert_eq!(msg, b"expired");
    assert!(at + 5 >= expires_at, "expired {} ms early", expires_at - at);
    assert!(
        at <= expires_at + 3000,
        "expired {} ms late: the module's timer was not re-armed after load",
        at - expires_at
    );
    assert_eq!(info_raw(&mut con, "soon"), Value::Nil);
}

// ---------------------------------------------------------------------------
// The token counter as aux data (issue 44, item 4)
// ---------------------------------------------------------------------------

/// Whether the server offers `aux_save2` (Redis 7.2 and later, Valkey),
/// with which the module leaves its aux field out of an RDB that does not
/// need it.
fn has_aux_save2(s: &Server) -> bool {
    let info = parse_info(&s.info("server"));
    if info.contains_key("valkey_version") {
        return true;
    }
    let v: Vec<u32> = info
        .get("redis_version")
        .map(|v| v.split('.').filter_map(|p| p.parse().ok()).collect())
        .unwrap_or_default();
    v.as_slice() >= [7, 2].as_slice()
}

/// A server that loaded the module, took locks of every kind and let them
/// all go, saves an RDB that loads without the module (where the server
/// offers `aux_save2`; it failed with "The RDB file contains AUX module
/// data I can't load: no matching module 'dlocklock'"), and, with the
/// module back, its tokens still grow.
#[test]
fn an_rdb_without_locks_loads_without_the_module() {
    let mut s = Server::start_with(opts());
    let mut c = s.conn();
    let t = token(&mut c, &["DLOCK.ACQUIRE", "m", "a", "PX", "60000"]).expect("grant");
    assert_eq!(int(&mut c, &["DLOCK.RELEASE", "m", "a"]), 1);
    token(
        &mut c,
        &["DLOCK.SEMACQUIRE", "s", "a", "LIMIT", "2", "PX", "60000"],
    );
    assert_eq!(int(&mut c, &["DLOCK.RELEASE", "s", "a"]), 1);
    assert_eq!(int(&mut c, &["DLOCK.LATCHSET", "l", "1"]), 1);
    assert_eq!(int(&mut c, &["DLOCK.COUNTDOWN", "l"]), 0);
    token(&mut c, &["DLOCK.ACQUIRE", "short", "a", "PX", "1"]);
    let gone = wait_until(Duration::from_secs(10), || {
        int(&mut c, &["EXISTS", "short"]) == 0
    });
    assert!(gone, "the 1 ms lease never ended");
    ok(&mut c, &["SET", "plain", "kept"]);
    ok(&mut c, &["SAVE"]);
    drop(c);
    if has_aux_save2(&s) {
        s.opts.module = false;
        s.try_restart()
            .unwrap_or_else(|e| panic!("the RDB did not load without the module:\n{e}"));
        assert_eq!(
            cmd_str(&mut s.conn(), &["GET", "plain"]),
            Ok(Value::BulkString(b"kept".to_vec()))
        );
        s.opts.module = true;
    } else {
        eprintln!("this server has no aux_save2 (Redis 7.0): its RDBs need the module");
    }
    s.restart();
    let mut c = s.conn();
    let after = token(&mut c, &["DLOCK.ACQUIRE", "m", "b", "PX", "60000"]).expect("grant");
    assert!(after > t, "token {after} after the restart, {t} before");
}

/// A counter ahead of the clock (a replica promoted a moment ago: the
/// promotion gap, an hour) is saved even with no lock: the RDB needs the
/// module, and the restarted server keeps issuing above it.
#[test]
fn an_rdb_whose_token_counter_is_ahead_of_the_clock_keeps_it() {
    let master = Server::start();
    let mut r = Server::start_with(opts());
    r.make_replica_of(&master);
    let before = now_us();
    ok(&mut r.conn(), &["REPLICAOF", "NO", "ONE"]);
    let promoted = wait_until(Duration::from_secs(10), || {
        r.info_field("replication", "role").as_deref() == Some("master")
    });
    assert!(promoted, "the replica never became a master");
    let mut c = r.conn();
    let t = token(&mut c, &["DLOCK.ACQUIRE", "m", "a", "PX", "60000"]).expect("grant");
    assert!(
        t >= (before + 3_600_000_000) as i64,
        "token {t}: no promotion gap"
    );
    assert_eq!(int(&mut c, &["DLOCK.RELEASE", "m", "a"]), 1);
    ok(&mut c, &["SAVE"]);
    drop(c);
    if has_aux_save2(&r) {
        r.opts.module = false;
        let e = r
            .try_restart()
            .expect_err("an RDB with a counter ahead of the clock loaded without the module");
        assert!(e.contains("dlocklock"), "{e}");
        r.opts.module = true;
    }
    r.restart();
    let after = token(&mut r.conn(), &["DLOCK.ACQUIRE", "m", "b", "PX", "60000"]).expect("grant");
    assert!(after > t, "token {after} after the restart, {t} before");
}

/// A lock saved under `CLIENT PAUSE` after its holder's lease ended (the
/// pause serves nobody: a waiter's place at its head) and loaded by a
/// restart: the waiter's connection went with the old process, and the
/// prune after the load drops its place, so the next acquire is granted at
/// once. (The simulator's long run found the same after a restart of a
/// lock saved with blocked places only: finding A.)
#[test]
fn a_waiter_saved_under_a_pause_is_pruned_after_a_restart() {
    let mut s = Server::start_with(opts());
    let mut con = s.conn();
    assert!(int(&mut con, &["DLOCK.ACQUIRE", "k", "a", "PX", "300"]) > 0);
    let waiter = spawn_blocking(
        s.port,
        &["DLOCK.ACQUIRE", "k", "w", "PX", "60000", "WAIT", "30000"],
    );
    wait_waiting(&s, 1);
    ok(&mut con, &["CLIENT", "PAUSE", "3000", "WRITE"]);
    std::thread::sleep(Duration::from_millis(500));
    ok(&mut con, &["SAVE"]);
    let saved = info_raw(&mut con, "k");
    s.restart(); // SIGKILL, start again from dump.rdb
    let _ = waiter.join();
    let mut con = s.conn();
    let t = int(
        &mut con,
        &["DLOCK.ACQUIRE", "k", "x", "PX", "10000", "WAIT", "3000"],
    );
    assert!(
        t > 0,
        "x waited behind the old process's waiter: saved {saved:?}, now {:?}",
        info_raw(&mut con, "k")
    );
    s.assert_alive();
}
