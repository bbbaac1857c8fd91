//! The module as a good citizen of the server it is loaded in (issue 36):
//! - key-event handlers (restore, rename_to, move_to, loaded) read the key
//!   without touching it: `RESTORE ... IDLETIME` / `FREQ` keep what they set;
//! - `CONFIG GET *` then `CONFIG SET` of every dlock value back succeeds
//!   (the load-time configs accept their current value, refuse a change);
//! - a replica with `repl-diskless-load swapdb` loads from the socket into a
//!   temporary db (no "Skipping diskless-load" warnings), and the locks that
//!   came with the load are filed at the swap: after a promotion their
//!   leases still end on time.

mod common;
use common::*;

use redis::{Connection, Value};
use std::time::Duration;

fn idletime(c: &mut Connection, key: &str) -> i64 {
    int(c, &["OBJECT", "IDLETIME", key])
}

fn dump(c: &mut Connection, key: &str) -> Vec<u8> {
    match ok(c, &["DUMP", key]) {
        Value::BulkString(b) => b,
        other => panic!("DUMP {key}: {other:?}"),
    }
}

fn restore(c: &mut Connection, key: &str, payload: &[u8], opt: &str, v: &str) {
    let r = cmd_raw(
        c,
        &[
            b"RESTORE",
            key.as_bytes(),
            b"0",
            payload,
            opt.as_bytes(),
            v.as_bytes(),
        ],
    );
    assert!(r.is_ok(), "RESTORE {key}: {r:?}");
}

/// `OBJECT IDLETIME` rounds to seconds of the LRU clock: 1000 s set, read
/// back a moment later, is 1000 or a little more (never 0).
fn assert_idle_about(c: &mut Connection, key: &str, what: &str) {
    let idle = idletime(c, key);
    assert!(
        (1000..1100).contains(&idle),
        "{what}: OBJECT IDLETIME {key} = {idle}, expected about 1000 (the handler touched the key)"
    );
}

#[test]
fn restore_keeps_the_idle_time_and_the_frequency_it_sets() {
    let s = Server::start();
    let mut c = s.conn();
    // A lock (our type: the handler reads it) and a string (any key fires
    // the same event).
    int(&mut c, &["DLOCK.ACQUIRE", "lk", "A", "PX", "600000"]);
    ok(&mut c, &["SET", "str", "v"]);
    for key in ["lk", "str"] {
        let payload = dump(&mut c, key);
        ok(&mut c, &["DEL", key]);
        restore(&mut c, key, &payload, "IDLETIME", "1000");
        assert_idle_about(&mut c, key, "RESTORE ... IDLETIME 1000");
    }
    // LFU: the frequency RESTORE sets is the one OBJECT FREQ reads.
    ok(
        &mut c,
        &["CONFIG", "SET", "maxmemory-policy", "allkeys-lfu"],
    );
    for key in ["lk", "str"] {
        let payload = dump(&mut c, key);
        ok(&mut c, &["DEL", key]);
        restore(&mut c, key, &payload, "FREQ", "100");
        assert_eq!(int(&mut c, &["OBJECT", "FREQ", key]), 100, "{key}");
    }
    // (RENAME and MOVE touch the key themselves, module or not.)
    let info = format!("{:?}", ok(&mut c, &["DLOCK.INFO", "lk"]));
    assert!(info.contains('A'), "{info}");
}

fn strings(v: &Value) -> Vec<String> {
    match v {
        Value::Array(items) => items
            .iter()
            .map(|i| match i {
                Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                other => format!("{other:?}"),
            })
            .collect(),
        Value::Map(pairs) => pairs
            .iter()
            .flat_map(|(k, v)| [k, v])
            .map(|i| match i {
                Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                other => format!("{other:?}"),
            })
            .collect(),
        other => panic!("not an array: {other:?}"),
    }
}

/// `CONFIG GET *` (the dlock part), then `CONFIG SET` of each value back.
fn round_trip(c: &mut Connection) -> usize {
    let all = strings(&ok(c, &["CONFIG", "GET", "*"]));
    let mut n = 0;
    for pair in all.chunks(2) {
        let [k, v] = pair else { continue };
        if !k.starts_with("dlock.") {
            continue;
        }
        let r = cmd_str(c, &["CONFIG", "SET", k, v]);
        assert!(r.is_ok(), "CONFIG SET {k} {v:?} (its own value): {r:?}");
        n += 1;
    }
    n
}

#[test]
fn config_get_all_then_set_every_value_back() {
    let s = Server::start();
    let mut c = s.conn();
    assert!(round_trip(&mut c) >= 10, "too few dlock configs listed");
    // The load-time configs refuse a change, with the rule in the error.
    for (name, other) in [
        ("dlock.apply-from-clients", "yes"),
        ("dlock.test-clock-offset-ms", "5"),
    ] {
        let e = expect_err(cmd_str(&mut c, &["CONFIG", "SET", name, other]));
        assert!(e.contains("read only when the module loads"), "{name}: {e}");
    }
    assert_eq!(
        strings(&ok(&mut c, &["CONFIG", "GET", "dlock.apply-from-clients"])),
        ["dlock.apply-from-clients", "no"]
    );
    // DLOCK.APPLY from a client stays refused.
    assert!(cmd_str(&mut c, &["DLOCK.APPLY", "k", "x"]).is_err());

    // Set at load (module arguments): the same value round-trips, a change
    // is refused.
    let s2 = Server::start_with(ServerOpts::new().module_args(["apply-from-clients", "yes"]));
    let mut c2 = s2.conn();
    round_trip(&mut c2);
    let e = expect_err(cmd_str(
        &mut c2,
        &["CONFIG", "SET", "dlock.apply-from-clients", "no"],
    ));
    assert!(e.contains("current value yes"), "{e}");
    // Mutable configs still change.
    ok(
        &mut c2,
        &["CONFIG", "SET", "dlock.default-lease-ms", "1234"],
    );
    assert_eq!(
        strings(&ok(&mut c2, &["CONFIG", "GET", "dlock.default-lease-ms"])),
        ["dlock.default-lease-ms", "1234"]
    );
}

fn swapdb_replica() -> Server {
    Server::start_with(ServerOpts::new().args([
        "--repl-diskless-load",
        "swapdb",
        "--loglevel",
        "verbose",
    ]))
}

fn diskless_master() -> Server {
    Server::start_with(ServerOpts::new().args([
        "--repl-diskless-sync",
        "yes",
        "--repl-diskless-sync-delay",
        "0",
        "--repl-backlog-size",
        "16384",
    ]))
}

fn swaps(log: &str) -> usize {
    log.matches("Swapping active DB with loaded DB").count()
}

/// A full sync that the replica loads asynchronously: same replication id
/// (the replica was synced before), the backlog overrun while the link is
/// down, so PSYNC cannot continue. In the same transaction, after the link
/// is cut, `B` acquires `short` (PX 6000): the replica gets that lock only
/// through the load. Returns its token.
fn force_full_resync(master: &Server, replica: &Server) -> i64 {
    let before = swaps(&replica.log());
    let mut m = master.conn();
    let big = "x".repeat(64 * 1024);
    let mut p = redis::pipe();
    p.atomic()
        .cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("replica")
        .ignore()
        .cmd("SET")
        .arg("filler")
        .arg(&big)
        .ignore()
        .cmd("SET")
        .arg("filler2")
        .arg(&big)
        .ignore()
        .cmd("DLOCK.ACQUIRE")
        .arg("short")
        .arg("B")
        .arg("PX")
        .arg("6000");
    let r: redis::RedisResult<(i64,)> = p.query(&mut m);
    let token = match r {
        Ok((t,)) => t,
        Err(e) => panic!("MULTI CLIENT KILL, SET, DLOCK.ACQUIRE: {e}"),
    };
    let done = wait_until(Duration::from_secs(60), || swaps(&replica.log()) > before);
    assert!(done, "no second swapdb load:\n{}", replica.logs_tail(40));
    wait_replica_synced(master, replica);
    token
}

#[test]
fn a_swapdb_replica_loads_from_the_socket_and_files_the_loaded_locks() {
    let master = diskless_master();
    let mut m = master.conn();
    int(&mut m, &["DLOCK.ACQUIRE", "long", "A", "PX", "600000"]);
    int(&mut m, &["DLOCK.ACQUIRE", "old", "A", "PX", "600000"]);

    let mut replica = swapdb_replica();
    replica.make_replica_of(&master);
    let log = replica.log();
    assert!(
        !log.contains("Skipping diskless-load"),
        "the replica refused diskless load:\n{}",
        replica.logs_tail(40)
    );
    assert_eq!(
        swaps(&log),
        1,
        "first sync not through a temporary db:\n{log}"
    );
    let mut r = replica.conn();
    assert_eq!(int(&mut r, &["EXISTS", "long", "old"]), 2);

    // While the replica still serves the old db: the master's locks change.
    ok(&mut m, &["DLOCK.FORCERELEASE", "old"]);
    let short = force_full_resync(&master, &replica);
    let log = replica.log();
    assert!(
        !log.contains("Skipping diskless-load"),
        "{}",
        replica.logs_tail(40)
    );
    assert_eq!(int(&mut r, &["EXISTS", "old"]), 0);
    assert_eq!(int(&mut r, &["EXISTS", "long", "short"]), 2);
    assert_eq!(
        int(&mut r, &["DLOCK.CHECK", "short", &short.to_string()]),
        1
    );

    // Promoted before the short lease ends: the promoted replica ends it on
    // time, which it can only do for a lock it filed at the swap (`short`
    // reached it only through the load).
    ok(&mut r, &["REPLICAOF", "NO", "ONE"]);
    let ended = wait_until(Duration::from_secs(30), || {
        int(&mut r, &["EXISTS", "short"]) == 0
    });
    assert!(
        ended,
        "the lock loaded at the swap never expired on the promoted replica: {:?}",
        ok(&mut r, &["DLOCK.INFO", "short"])
    );
    assert_eq!(int(&mut r, &["EXISTS", "long"]), 1);
    // And the replica can hand it to a new owner.
    int(&mut r, &["DLOCK.ACQUIRE", "short", "C", "PX", "600000"]);
    replica.assert_alive();
    assert!(replica.log().len() < 4 << 20, "replica log grew past 4 MB");
}
