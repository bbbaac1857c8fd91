//! Replication of dlock locks: a replica's `DLOCK.INFO` equals its master's
//! after every command (holders, waiters, absolute times, tokens), expiry
//! reaches replicas only as the master's effect, DEBUG DIGEST agrees,
//! promotion keeps the locks and the token order and drops waiters whose
//! connection was on the old master, and replicas refuse writes.
//!
//! Comparisons strip the `ttl` fields (remaining ms, time-dependent) from
//! `DLOCK.INFO`; `expires_at` (absolute unix ms) must be identical.

mod common;
use common::*;

use std::thread;
use std::time::Duration;

use redis::Value;

/// A long lease, so nothing expires unless a test wants it to.
const LONG: &str = "600000";

/// A long fair-queue timeout, so queued fair-lock places never time out here.
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

/// A master and a replica that has completed its first sync.
fn pair() -> (Server, Server) {
    let master = Server::start_with(opts());
    let replica = Server::start_with(opts());
    replica.make_replica_of(&master);
    (master, replica)
}

fn owners(list: &[Value]) -> Vec<String> {
    list.iter()
        .map(|e| String::from_utf8_lossy(as_bytes(field(e, "owner"))).into_owned())
        .collect()
}

// ---------------------------------------------------------------------------
// Command helpers
// ---------------------------------------------------------------------------

/// A command whose reply is a token or nil.
fn token(con: &mut redis::Connection, args: &[&str]) -> Option<i64> {
    match cmd_str(con, args) {
        Ok(Value::Int(t)) => Some(t),
        Ok(Value::Nil) => None,
        Ok(other) => panic!("{args:?}: unexpected reply {other:?}"),
        Err(e) => panic!("{args:?}: {}", err_string(&e)),
    }
}

fn int(con: &mut redis::Connection, args: &[&str]) -> i64 {
    match cmd_str(con, args) {
        Ok(Value::Int(i)) => i,
        Ok(other) => panic!("{args:?}: unexpected reply {other:?}"),
        Err(e) => panic!("{args:?}: {}", err_string(&e)),
    }
}

/// `WAIT 1 5000` on the master (must be acknowledged by the replica), then
/// waits until the replica has applied everything up to the master's offset.
fn sync(master: &Server, replica: &Server) {
    let acked = int(&mut master.conn(), &["WAIT", "1", "5000"]);
    assert_eq!(acked, 1, "the replica did not acknowledge within 5 s");
    wait_replica_synced(master, replica);
}

/// Syncs, then asserts that every key's INFO (ttl stripped) is the same on
/// master and replica. Returns the master's INFO of each key.
fn assert_replicated(master: &Server, replica: &Server, keys: &[&str], step: &str) -> Vec<Value> {
    sync(master, replica);
    let mut mc = master.conn();
    let mut rc = replica.conn();
    keys.iter()
        .map(|k| {
            let m = info_norm(&mut mc, k);
            let r = info_norm(&mut rc, k);
            assert_eq!(
                r, m,
                "after {step}: replica's DLOCK.INFO {k} differs from the master's"
            );
            m
        })
        .collect()
}

/// Runs an acquire command with `WAIT` on its own connection to `s` and
/// waits until `owner` shows up as a blocked waiter of `key` there. The
/// thread returns the reply.
fn spawn_blocked(
    s: &Server,
    key: &str,
    owner: &str,
    args: &[&str],
) -> thread::JoinHandle<redis::RedisResult<Value>> {
    let mut c = s.conn();
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let h = thread::spawn(move || {
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        cmd_str(&mut c, &refs)
    });
    let mut con = s.conn();
    let seen = wait_until(Duration::from_secs(10), || {
        let v = info_raw(&mut con, key);
        v != Value::Nil
            && waiters(&v).iter().any(|w| {
                as_bytes(field(w, "owner")) == owner.as_bytes()
                    && as_bytes(field(w, "state")) == b"blocked"
            })
    });
    assert!(seen, "{owner} never showed up as a blocked waiter of {key}");
    h
}

fn granted(h: thread::JoinHandle<redis::RedisResult<Value>>, what: &str) -> i64 {
    match h.join().expect("waiter thread") {
        Ok(Value::Int(t)) => t,
        other => panic!("{what}: expected a token, got {other:?}"),
    }
}

/// Pushes the master's token counter far above the clock (as if tokens had
/// been issued while the clock was ahead), so that "greater than every token
/// the master issued" is not satisfied by the clock alone. Returns a token
/// the master really granted afterwards (on `key`, held by `owner`).
fn push_tokens_ahead_of_the_clock(con: &mut redis::Connection, key: &str, owner: &str) -> i64 {
    let ahead = now_us() + 10_000_000_000_000; // ~116 days
                                               // dlock's payload (dlock-core/src/codec.rs): a mutex held by "old".
    let mut p = vec![1u8, 0];
    varint(&mut p, ahead); // last token
    varint(&mut p, ahead); // token floor
    varint(&mut p, 1);
    varint(&mut p, 3);
    p.extend_from_slice(b"old");
    p.push(0);
    varint(&mut p, 1);
    varint(&mut p, now_ms() + 600_000);
    varint(&mut p, ahead);
    varint(&mut p, 0);
    let r = cmd_raw(con, &[b"DLOCK.APPLY", b"boost", &p]);
    assert_eq!(r.unwrap(), Value::Okay);
    assert_eq!(int(con, &["DEL", "boost"]), 1);
    let t = token(con, &["DLOCK.ACQUIRE", key, owner, "PX", LONG]).expect("grant");
    assert!(t as u64 > ahead);
    t
}

// ---------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------

#[test]
fn replica_info_equals_master_after_every_command() {
    let (master, replica) = pair();
    let keys = ["mx", "rw", "fair"];
    let mut m = master.conn();
    let mut tokens = Vec::new();
    let step = |what: &str| assert_replicated(&master, &replica, &keys, what);

    // Mutex: acquire, reentrant acquire, a blocked waiter, handoff, renew.
    let ta = token(&mut m, &["DLOCK.ACQUIRE", "mx", "a", "PX", LONG]).unwrap();
    tokens.push(ta);
    step("ACQUIRE");
    assert_eq!(
        token(&mut m, &["DLOCK.ACQUIRE", "mx", "a", "PX", LONG]),
        Some(ta)
    );
    let s = step("reentrant ACQUIRE");
    assert_eq!(as_int(field(&holders(&s[0])[0], "count")), 2);
    let b = spawn_blocked(
        &master,
        "mx",
        "b",
        &["DLOCK.ACQUIRE", "mx", "b", "PX", LONG, "WAIT", "30000"],
    );
    let s = step("a blocked waiter arrives");
    assert_eq!(owners(waiters(&s[0])), ["b"]);
    assert_eq!(int(&mut m, &["DLOCK.RELEASE", "mx", "a"]), 0);
    step("partial RELEASE");
    assert_eq!(int(&mut m, &["DLOCK.RELEASE", "mx", "a"]), 1);
    let tb = granted(b, "handoff to b");
    assert!(tb > ta);
    tokens.push(tb);
    let s = step("RELEASE handing off to the waiter");
    assert_eq!(owners(holders(&s[0])), ["b"]);
    assert!(waiters(&s[0]).is_empty());
    assert_eq!(int(&mut m, &["DLOCK.RENEW", "mx", "b", "PX", "700000"]), 1);
    step("RENEW");

    // Read-write lock: two readers, a waiting writer, writer preference.
    tokens.push(token(&mut m, &["DLOCK.RWACQUIRE", "rw", "r1", "READ", "PX", LONG]).unwrap());
    step("first reader");
    tokens.push(token(&mut m, &["DLOCK.RWACQUIRE", "rw", "r2", "READ", "PX", LONG]).unwrap());
    step("second reader");
    let w = spawn_blocked(
        &master,
        "rw",
        "w",
        &[
            "DLOCK.RWACQUIRE",
            "rw",
            "w",
            "WRITE",
            "PX",
            LONG,
            "WAIT",
            "30000",
        ],
    );
    step("a writer waits");
    assert_eq!(
        token(&mut m, &["DLOCK.RWACQUIRE", "rw", "r3", "READ"]),
        None
    );
    step("a new reader is refused behind the writer");
    assert_eq!(int(&mut m, &["DLOCK.RELEASE", "rw", "r1"]), 1);
    step("one reader leaves");
    assert_eq!(int(&mut m, &["DLOCK.RELEASE", "rw", "r2", "READ"]), 1);
    let tw = granted(w, "writer");
    tokens.push(tw);
    let s = step("the last reader leaves, the writer is granted");
    assert_eq!(owners(holders(&s[1])), ["w"]);

    // Fair lock: holder, a queued poller, force-release keeps the queue.
    tokens.push(token(&mut m, &["DLOCK.FAIRACQUIRE", "fair", "f1", "PX", LONG]).unwrap());
    step("fair holder");
    assert_eq!(
        token(&mut m, &["DLOCK.FAIRACQUIRE", "fair", "f2", "PX", LONG]),
        None
    );
    let s = step("a queued poller");
    assert_eq!(as_bytes(field(&waiters(&s[2])[0], "state")), b"queued");
    thread::sleep(Duration::from_millis(5));
    assert_eq!(
        token(&mut m, &["DLOCK.FAIRACQUIRE", "fair", "f2", "PX", LONG]),
        None
    );
    let s2 = step("the poller asks again");
    assert_ne!(s2[2], s[2], "polling again moves the place's deadline");
    assert_eq!(int(&mut m, &["DLOCK.FORCERELEASE", "fair"]), 1);
    let s = step("FORCERELEASE");
    assert!(holders(&s[2]).is_empty());
    assert_eq!(owners(waiters(&s[2])), ["f2"]);
    assert_eq!(
        token(&mut m, &["DLOCK.FAIRACQUIRE", "fair", "outsider"]),
        None
    );
    step("an outsider queues behind");
    let tf = token(&mut m, &["DLOCK.FAIRACQUIRE", "fair", "f2", "PX", LONG]).unwrap();
    tokens.push(tf);
    step("the first queued owner is granted");

    // Administrative removal and plain deletion.
    assert_eq!(int(&mut m, &["DLOCK.FORCERELEASE", "mx"]), 1);
    let s = step("FORCERELEASE of the mutex");
    assert_eq!(s[0], Value::Nil);
    assert_eq!(int(&mut m, &["DEL", "rw"]), 1);
    let s = step("DEL");
    assert_eq!(s[1], Value::Nil);
    assert_eq!(int(&mut m, &["DLOCK.RELEASE", "fair", "f2"]), 1);
    step("release with a queued owner left");

    // Tokens were increasing throughout.
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");

    // Leave a few locks around and compare digests.
    token(&mut m, &["DLOCK.ACQUIRE", "mx", "z", "PX", LONG]).unwrap();
    token(&mut m, &["DLOCK.RWACQUIRE", "rw", "z", "READ", "PX", LONG]).unwrap();
    token(&mut m, &["DLOCK.RWACQUIRE", "rw", "y", "READ", "PX", LONG]).unwrap();
    step("final locks");
    sync(&master, &replica);
    let md: String = redis::cmd("DEBUG").arg("DIGEST").query(&mut m).unwrap();
    let rd: String = redis::cmd("DEBUG")
        .arg("DIGEST")
        .query(&mut replica.conn())
        .unwrap();
    assert_ne!(md, "0".repeat(40), "the master's dataset is not empty");
    assert_eq!(rd, md, "DEBUG DIGEST differs");
    for k in keys {
        let mv: Value = redis::cmd("DEBUG")
            .arg("DIGEST-VALUE")
            .arg(k)
            .query(&mut m)
            .unwrap();
        let rv: Value = redis::cmd("DEBUG")
            .arg("DIGEST-VALUE")
            .arg(k)
            .query(&mut replica.conn())
            .unwrap();
        assert_eq!(rv, mv, "DEBUG DIGEST-VALUE {k}");
    }
}

#[test]
fn waiters_leaving_on_the_master_are_replicated() {
    let (master, replica) = pair();
    let keys = ["wm", "wf"];
    let mut m = master.conn();
    let step = |what: &str| assert_replicated(&master, &replica, &keys, what);
    token(&mut m, &["DLOCK.ACQUIRE", "wm", "a", "PX", LONG]).unwrap();
    token(&mut m, &["DLOCK.FAIRACQUIRE", "wf", "a", "PX", LONG]).unwrap();
    step("holders");

    // A WAIT that runs out on a mutex leaves no waiter behind.
    let t = spawn_blocked(
        &master,
        "wm",
        "b",
        &["DLOCK.ACQUIRE", "wm", "b", "WAIT", "300"],
    );
    step("a short waiter");
    assert_eq!(t.join().expect("thread").expect("reply"), Value::Nil);
    let s = step("the wait timed out");
    assert!(waiters(&s[0]).is_empty(), "{:?}", s[0]);

    // On a fair lock it leaves a queued place.
    let t = spawn_blocked(
        &master,
        "wf",
        "b",
        &["DLOCK.FAIRACQUIRE", "wf", "b", "WAIT", "300"],
    );
    step("a short fair waiter");
    assert_eq!(t.join().expect("thread").expect("reply"), Value::Nil);
    let s = step("the fair wait timed out");
    assert_eq!(owners(waiters(&s[1])), ["b"]);
    assert_eq!(as_bytes(field(&waiters(&s[1])[0], "state")), b"queued");

    // A waiting connection that disconnects leaves the queue.
    let (id_tx, id_rx) = std::sync::mpsc::channel();
    let mut c = master.conn();
    let h = thread::spawn(move || {
        let id: i64 = redis::cmd("CLIENT").arg("ID").query(&mut c).unwrap();
        id_tx.send(id).unwrap();
        cmd_str(&mut c, &["DLOCK.ACQUIRE", "wm", "c", "WAIT", "60000"])
    });
    let id = id_rx.recv().unwrap();
    let mut probe = master.conn();
    assert!(wait_until(Duration::from_secs(10), || {
        owners(waiters(&info_raw(&mut probe, "wm"))) == ["c"]
    }));
    step("a waiter that will disconnect");
    let killed = int(&mut m, &["CLIENT", "KILL", "ID", &id.to_string()]);
    assert_eq!(killed, 1);
    assert!(h.join().expect("thread").is_err());
    assert!(
        wait_until(Duration::from_secs(5), || {
            waiters(&info_raw(&mut probe, "wm")).is_empty()
        }),
        "the disconnected waiter stayed: {:?}",
        info_raw(&mut probe, "wm")
    );
    step("the waiter disconnected");

    // A queued fair place that is not claimed in time is dropped by the master.
    let r = cmd_str(
        &mut m,
        &["CONFIG", "SET", "dlock.fair-queue-timeout-ms", "300"],
    );
    assert_eq!(r.unwrap(), Value::Okay);
    assert_eq!(token(&mut m, &["DLOCK.FAIRACQUIRE", "wf", "b"]), None);
    step("the queued owner polls");
    assert!(
        wait_until(Duration::from_secs(10), || {
            waiters(&info_raw(&mut probe, "wf")).is_empty()
        }),
        "the queued place never timed out: {:?}",
        info_raw(&mut probe, "wf")
    );
    let s = step("the queued place timed out");
    assert_eq!(owners(holders(&s[1])), ["a"]);
}

#[test]
fn transactions_scripts_and_flushes_replicate_their_effects() {
    let (master, replica) = pair();
    let keys = ["tx", "lua", "rd"];
    let mut m = master.conn();
    let step = |what: &str| assert_replicated(&master, &replica, &keys, what);

    // MULTI/EXEC: WAIT acts as 0 inside; each effect is replicated in order.
    let mut pipe = redis::pipe();
    pipe.atomic()
        .cmd("DLOCK.ACQUIRE")
        .arg("tx")
        .arg("a")
        .arg("PX")
        .arg(LONG)
        .cmd("DLOCK.ACQUIRE")
        .arg("tx")
        .arg("b")
        .arg("WAIT")
        .arg("1000")
        .cmd("DLOCK.RELEASE")
        .arg("tx")
        .arg("a")
        .cmd("DLOCK.ACQUIRE")
        .arg("tx")
        .arg("b")
        .arg("PX")
        .arg(LONG);
    let replies: Vec<Value> = pipe.query(&mut m).expect("EXEC");
    assert!(matches!(replies[0], Value::Int(_)), "{replies:?}");
    assert_eq!(replies[1], Value::Nil, "{replies:?}");
    assert_eq!(replies[2], Value::Int(1), "{replies:?}");
    assert!(matches!(replies[3], Value::Int(_)), "{replies:?}");
    let s = step("MULTI/EXEC");
    assert_eq!(owners(holders(&s[0])), ["b"]);

    // A script: effects replication.
    let script =
        "local t = redis.call('DLOCK.RWACQUIRE', KEYS[1], ARGV[1], 'READ', 'PX', ARGV[2]) \
                  redis.call('DLOCK.RWACQUIRE', KEYS[1], 'other', 'READ', 'PX', ARGV[2]) \
                  redis.call('DLOCK.RELEASE', KEYS[1], 'other') \
                  return t";
    let t = cmd_str(&mut m, &["EVAL", script, "1", "lua", "s1", LONG]).expect("EVAL");
    assert!(matches!(t, Value::Int(_)), "{t:?}");
    let s = step("EVAL");
    assert_eq!(owners(holders(&s[1])), ["s1"]);

    // A reader whose lease ends while another stays.
    token(
        &mut m,
        &["DLOCK.RWACQUIRE", "rd", "long", "READ", "PX", LONG],
    )
    .unwrap();
    token(
        &mut m,
        &["DLOCK.RWACQUIRE", "rd", "short", "READ", "PX", "200"],
    )
    .unwrap();
    assert!(wait_until(Duration::from_secs(10), || {
        holders(&info_raw(&mut m, "rd")).len() == 1
    }));
    let s = step("one reader's lease ended");
    assert_eq!(owners(holders(&s[2])), ["long"]);

    // FLUSHALL removes everything on both.
    let r = cmd_str(&mut m, &["FLUSHALL"]).expect("FLUSHALL");
    assert_eq!(r, Value::Okay);
    let s = step("FLUSHALL");
    assert!(s.iter().all(|v| *v == Value::Nil), "{s:?}");
}

#[test]
fn full_sync_and_chained_replicas_carry_the_same_state() {
    let master = Server::start_with(opts());
    let mut m = master.conn();
    token(&mut m, &["DLOCK.ACQUIRE", "k", "a", "PX", LONG]).unwrap();
    let w = spawn_blocked(
        &master,
        "k",
        "w",
        &["DLOCK.ACQUIRE", "k", "w", "PX", LONG, "WAIT", "60000"],
    );
    token(&mut m, &["DLOCK.FAIRACQUIRE", "f", "a", "PX", LONG]).unwrap();
    assert_eq!(token(&mut m, &["DLOCK.FAIRACQUIRE", "f", "q"]), None);
    // A replica that joins now gets the state, blocked waiter included, by a
    // full sync, and keeps it (a replica prunes nothing on load)...
    let replica = Server::start_with(opts());
    replica.make_replica_of(&master);
    // ...and so does a replica of that replica.
    let sub = Server::start_with(opts());
    sub.make_replica_of(&replica);
    let keys = ["k", "f"];
    let check = |what: &str| {
        let s = assert_replicated(&master, &replica, &keys, what);
        wait_replica_synced(&replica, &sub);
        let mut sc = sub.conn();
        for (k, v) in keys.iter().zip(&s) {
            assert_eq!(
                &info_norm(&mut sc, k),
                v,
                "{what}: chained replica, key {k}"
            );
        }
        s
    };
    thread::sleep(Duration::from_millis(200)); // room for any deferred pruning
    let s = check("full sync");
    assert_eq!(owners(waiters(&s[0])), ["w"]);
    assert_eq!(int(&mut m, &["DLOCK.RELEASE", "k", "a"]), 1);
    granted(w, "handoff after full sync");
    let s = check("handoff");
    assert_eq!(owners(holders(&s[0])), ["w"]);
    assert_eq!(int(&mut m, &["DLOCK.FORCERELEASE", "f"]), 1);
    check("FORCERELEASE");
}

#[test]
fn expiry_on_the_master_reaches_the_replica() {
    let (master, replica) = pair();
    let mut m = master.conn();
    let mut rsub = Subscriber::new(&replica, b"dlock:{exp}");
    let mut msub = Subscriber::new(&master, b"dlock:{exp}");

    token(&mut m, &["DLOCK.ACQUIRE", "exp", "a", "PX", "300"]).unwrap();
    let gone = wait_until(Duration::from_secs(10), || {
        info_raw(&mut m, "exp") == Value::Nil
    });
    assert!(gone, "the master never expired the lock");
    assert_eq!(msub.expect_message(Duration::from_secs(5)).1, b"expired");
    assert_replicated(&master, &replica, &["exp"], "expiry on the master");
    assert_eq!(info_raw(&mut replica.conn(), "exp"), Value::Nil);
    assert_eq!(int(&mut replica.conn(), &["EXISTS", "exp"]), 0);

    // Expiry handing the lock to a waiter on the master.
    token(&mut m, &["DLOCK.ACQUIRE", "exp", "a", "PX", "1000"]).unwrap();
    let b = spawn_blocked(
        &master,
        "exp",
        "b",
        &["DLOCK.ACQUIRE", "exp", "b", "PX", LONG, "WAIT", "30000"],
    );
    assert_replicated(&master, &replica, &["exp"], "a waiter behind a short lease");
    granted(b, "handoff on expiry");
    let s = assert_replicated(&master, &replica, &["exp"], "expiry handing off");
    assert_eq!(owners(holders(&s[0])), ["b"]);

    // Replicas never publish: the master did (above), the replica's
    // subscribers get nothing of their own.
    rsub.expect_none(Duration::from_millis(300));
}

/// A replica never changes a lock by its own clock: while its master is
/// stopped past a lease's end, the replica keeps the key (and the state it
/// was sent); its reads answer as of now, as the master's do: CHECK 0 and
/// INFO nil for the ended lease (issue 43: INFO listed it with `ttl 0`).
#[test]
fn a_replica_never_expires_anything_by_itself() {
    let (master, replica) = pair();
    let mut m = master.conn();
    let mut r = replica.conn();
    // Long enough to reach the replica before it ends, even on a slow machine.
    let t = token(&mut m, &["DLOCK.ACQUIRE", "frozen", "a", "PX", "1500"]).unwrap();
    sync(&master, &replica);
    let before = info_norm(&mut r, "frozen");
    assert_ne!(
        before,
        Value::Nil,
        "the lock did not reach the replica in time"
    );
    let expires_at = as_int(field(&holders(&before)[0], "expires_at")) as u64;

    master.pause();
    // If the master was too slow to get here before the lease ended, it
    // replicated the expiry already; the check below then proves nothing, so
    // only run it when the lock was still there when the master stopped.
    let still = info_norm(&mut r, "frozen");
    while now_ms() < expires_at + 800 {
        thread::sleep(Duration::from_millis(50));
    }
    let stored = int(&mut r, &["EXISTS", "frozen"]);
    let during = info_raw(&mut r, "frozen");
    let check = int(&mut r, &["DLOCK.CHECK", "frozen", &t.to_string()]);
    master.resume();
    if still != Value::Nil {
        assert_eq!(
            stored, 1,
            "the replica deleted the lock on its own while the master was stopped"
        );
        assert_eq!(during, Value::Nil, "the replica lists an ended lease");
        assert_eq!(check, 0, "the replica's CHECK of an ended lease");
    }
    // The master expires it as soon as it runs again; the replica follows.
    let converged = wait_until(Duration::from_secs(10), || {
        int(&mut r, &["EXISTS", "frozen"]) == 0
    });
    assert!(converged, "replica: {:?}", info_raw(&mut r, "frozen"));
    assert_replicated(
        &master,
        &replica,
        &["frozen"],
        "expiry after resuming the master",
    );
}

#[test]
fn promoted_replica_keeps_locks_tokens_and_drops_foreign_waiters() {
    let (master, replica) = pair();
    let mut m = master.conn();
    let keys = ["p", "pf", "q"];
    let mut issued = Vec::new();
    issued.push(push_tokens_ahead_of_the_clock(&mut m, "p", "holder"));
    let w = spawn_blocked(
        &master,
        "p",
        "w",
        &["DLOCK.ACQUIRE", "p", "w", "PX", LONG, "WAIT", "60000"],
    );
    issued.push(token(&mut m, &["DLOCK.FAIRACQUIRE", "pf", "f1", "PX", LONG]).unwrap());
    assert_eq!(
        token(&mut m, &["DLOCK.FAIRACQUIRE", "pf", "f2", "PX", LONG]),
        None
    );
    // A key whose last grant the replica only knows from deleted state.
    issued.push(token(&mut m, &["DLOCK.ACQUIRE", "q", "x", "PX", LONG]).unwrap());
    assert_eq!(int(&mut m, &["DEL", "q"]), 1);
    let on_master = assert_replicated(&master, &replica, &keys, "setup");
    assert_eq!(owners(waiters(&on_master[0])), ["w"]);
    let max = *issued.iter().max().unwrap();

    let mut r = replica.conn();
    let reply = cmd_str(&mut r, &["REPLICAOF", "NO", "ONE"]).expect("REPLICAOF NO ONE");
    assert_eq!(reply, Value::Okay);
    assert_eq!(
        replica.info_field("replication", "role").as_deref(),
        Some("master")
    );
    // The same holders; the blocked waiter, whose connection is on the old
    // master, is dropped; the queued fair place (no connection) is kept.
    let pruned = wait_until(Duration::from_secs(5), || {
        waiters(&info_raw(&mut r, "p")).is_empty()
    });
    assert!(pruned, "foreign waiter kept: {:?}", info_raw(&mut r, "p"));
    let p = info_norm(&mut r, "p");
    assert_eq!(holders(&p), holders(&on_master[0]));
    assert_eq!(field(&p, "token"), field(&on_master[0], "token"));
    assert_eq!(info_norm(&mut r, "pf"), on_master[1]);
    assert_eq!(info_raw(&mut r, "q"), Value::Nil);

    // Tokens continue above everything the old master issued.
    let tq = token(&mut r, &["DLOCK.ACQUIRE", "q", "y", "PX", LONG]).unwrap();
    assert!(
        tq > max,
        "token {tq} on the promoted replica must exceed {max}"
    );
    // Nobody stalls the lock once the holder lets go.
    assert_eq!(token(&mut r, &["DLOCK.ACQUIRE", "p", "new"]), None);
    assert_eq!(int(&mut r, &["DLOCK.RELEASE", "p", "holder"]), 1);
    let tp = token(
        &mut r,
        &["DLOCK.ACQUIRE", "p", "new", "PX", LONG, "WAIT", "5000"],
    )
    .expect("the promoted replica hands the lock to a new owner");
    assert!(tp > tq);
    // The fair queue still works in order.
    assert_eq!(int(&mut r, &["DLOCK.RELEASE", "pf", "f1"]), 1);
    assert_eq!(token(&mut r, &["DLOCK.FAIRACQUIRE", "pf", "other"]), None);
    let tf = token(&mut r, &["DLOCK.FAIRACQUIRE", "pf", "f2"]).expect("f2 is next");
    assert!(tf > tp);
    // The promoted replica's own expiry timer works.
    token(&mut r, &["DLOCK.ACQUIRE", "short", "s", "PX", "200"]).unwrap();
    let expired = wait_until(Duration::from_secs(10), || {
        info_raw(&mut r, "short") == Value::Nil
    });
    assert!(expired, "the promoted replica does not expire leases");

    // The old master still serves its own waiter.
    assert_eq!(int(&mut m, &["DLOCK.RELEASE", "p", "holder"]), 1);
    granted(w, "the waiter on the old master");
}

#[test]
fn promotion_expires_ended_leases_and_keeps_timing_the_others() {
    let (master, replica) = pair();
    let mut m = master.conn();
    token(&mut m, &["DLOCK.ACQUIRE", "ended", "a", "PX", "1000"]).unwrap();
    token(&mut m, &["DLOCK.ACQUIRE", "later", "a", "PX", "4000"]).unwrap();
    let s = assert_replicated(&master, &replica, &["ended", "later"], "setup");
    let ended_at = as_int(field(&holders(&s[0])[0], "expires_at")) as u64;
    let later_at = as_int(field(&holders(&s[1])[0], "expires_at")) as u64;
    // The master stops before it can replicate the first expiry.
    master.pause();
    let mut r = replica.conn();
    let frozen = info_raw(&mut r, "ended") != Value::Nil;
    while now_ms() < ended_at + 300 {
        thread::sleep(Duration::from_millis(20));
    }
    let mut sub = Subscriber::new(&replica, b"dlock:{later}");
    let reply = cmd_str(&mut r, &["REPLICAOF", "NO", "ONE"]).expect("REPLICAOF NO ONE");
    assert_eq!(reply, Value::Okay);
    if frozen {
        // A lease that ended while this server was a replica ends at promotion.
        let gone = wait_until(Duration::from_secs(5), || {
            info_raw(&mut r, "ended") == Value::Nil
        });
        assert!(
            gone,
            "ended lease kept after promotion: {:?}",
            info_raw(&mut r, "ended")
        );
    }
    assert!(token(&mut r, &["DLOCK.ACQUIRE", "ended", "b", "WAIT", "5000"]).is_some());
    // A lease still running at promotion expires on time.
    if info_raw(&mut r, "later") != Value::Nil {
        let remaining = later_at.saturating_sub(now_ms());
        let (_, msg) = sub.expect_message(Duration::from_millis(remaining + 5000));
        let at = now_ms();
        assert_eq!(msg, b"expired");
        assert!(at + 5 >= later_at, "expired {} ms early", later_at - at);
        assert!(at <= later_at + 3000, "expired {} ms late", at - later_at);
    }
    assert_eq!(info_raw(&mut r, "later"), Value::Nil);
    master.resume();
}

#[test]
fn a_replica_synced_after_every_lock_was_deleted_keeps_the_token_order() {
    let master = Server::start_with(opts());
    let mut m = master.conn();
    let t = push_tokens_ahead_of_the_clock(&mut m, "gone", "a");
    assert_eq!(int(&mut m, &["DEL", "gone"]), 1);
    // Full sync of an empty dataset.
    let replica = Server::start_with(opts());
    replica.make_replica_of(&master);
    let mut r = replica.conn();
    let dbsize: i64 = redis::cmd("DBSIZE").query(&mut r).unwrap();
    assert_eq!(dbsize, 0);
    assert_eq!(
        cmd_str(&mut r, &["REPLICAOF", "NO", "ONE"]).unwrap(),
        Value::Okay
    );
    let t2 = token(&mut r, &["DLOCK.ACQUIRE", "gone", "b"]).unwrap();
    assert!(t2 > t, "token {t2} after promotion must exceed {t}");
}

#[test]
fn a_replica_refuses_lock_writes_but_answers_info() {
    let (master, replica) = pair();
    let mut m = master.conn();
    token(&mut m, &["DLOCK.ACQUIRE", "k", "a", "PX", LONG]).unwrap();
    assert_replicated(&master, &replica, &["k"], "ACQUIRE");
    let mut r = replica.conn();
    let writes: [&[&str]; 8] = [
        &["DLOCK.ACQUIRE", "k", "b"],
        &["DLOCK.ACQUIRE", "new", "b", "WAIT", "100"],
        &["DLOCK.RWACQUIRE", "rw", "b", "READ"],
        &["DLOCK.FAIRACQUIRE", "f", "b"],
        &["DLOCK.RELEASE", "k", "a"],
        &["DLOCK.RENEW", "k", "a"],
        &["DLOCK.FORCERELEASE", "k"],
        &["DLOCK.APPLY", "k", ""],
    ];
    for args in writes {
        let e = expect_err(cmd_str(&mut r, args));
        assert!(e.starts_with("READONLY "), "{args:?}: {e}");
    }
    // Nothing changed anywhere.
    assert_replicated(
        &master,
        &replica,
        &["k", "new", "rw", "f"],
        "refused writes",
    );
    let info = info_raw(&mut r, "k");
    assert_eq!(owners(holders(&info)), ["a"]);
}

/// The commands a master propagates, read from its AOF (the same stream
/// its replicas get), each as its arguments joined by spaces.
struct Propagated {
    dir: std::path::PathBuf,
    read: usize,
}

impl Propagated {
    fn new(master: &Server) -> Propagated {
        Propagated {
            dir: master.dir.join("appendonlydir"),
            read: 0,
        }
    }

    fn commands(&mut self) -> Vec<String> {
        let incr = std::fs::read_dir(&self.dir)
            .expect("appendonlydir")
            .filter_map(|e| e.ok().map(|e| e.path()))
            .find(|p| p.to_string_lossy().ends_with(".incr.aof"))
            .expect("an incremental AOF file");
        let data = std::fs::read(incr).expect("read AOF");
        let mut out = Vec::new();
        let mut lines = data
            .get(self.read..)
            .unwrap_or_default()
            .split(|&b| b == b'\n');
        while let Some(head) = lines.next() {
            let Some(n) = head.strip_prefix(b"*") else {
                break;
            };
            let n: usize = String::from_utf8_lossy(n)
                .trim()
                .parse()
                .expect("array length");
            let mut args = Vec::new();
            for _ in 0..n {
                lines.next().expect("bulk length");
                let arg = lines.next().expect("bulk");
                let arg = arg.strip_suffix(b"\r").unwrap_or(arg);
                args.push(String::from_utf8_lossy(arg).into_owned());
            }
            out.push(args.join(" "));
        }
        self.read = data.len();
        out.retain(|c| !["SELECT", "MULTI", "EXEC"].iter().any(|s| c.starts_with(s)));
        out
    }
}

#[test]
fn a_release_that_ends_only_its_own_hold_is_replicated_as_the_command() {
    let master =
        Server::start_with(opts().args(["--appendonly", "yes", "--appendfsync", "always"]));
    let replica = Server::start_with(opts());
    replica.make_replica_of(&master);
    let mut stream = Propagated::new(&master);
    stream.commands();
    let mut m = master.conn();
    let keys = ["m", "rw"];
    let applies = |cmds: &[String], key: &str| {
        cmds.iter()
            .all(|c| c.starts_with(&format!("DLOCK.APPLY {key} ")))
    };

    // Grants travel as effects: their lease end and token come from the master.
    token(&mut m, &["DLOCK.ACQUIRE", "m", "o1", "PX", LONG]).unwrap();
    token(&mut m, &["DLOCK.ACQUIRE", "m", "o1", "PX", LONG]).unwrap();
    let c = stream.commands();
    assert!(c.len() == 2 && applies(&c, "m"), "{c:?}");
    assert_replicated(&master, &replica, &keys, "two reentrant grants");

    // A release at an instant when nothing else ended: the command itself,
    // which the replica replays without its clock.
    assert_eq!(int(&mut m, &["DLOCK.RELEASE", "m", "o1"]), 0);
    assert_eq!(stream.commands(), ["DLOCK.RELEASE m o1"]);
    assert_replicated(&master, &replica, &keys, "a reentrant release");
    assert_eq!(int(&mut m, &["DLOCK.RELEASE", "m", "o1"]), 1);
    assert_eq!(stream.commands(), ["DLOCK.RELEASE m o1"]);
    assert_replicated(&master, &replica, &keys, "the last release");
    assert_eq!(int(&mut replica.conn(), &["EXISTS", "m"]), 0);

    // A release whose command also found another reader's lease ended on
    // the master: the resulting state, so the replica need not know when
    // that lease ended.
    token(&mut m, &["DLOCK.RWACQUIRE", "rw", "r1", "READ", "PX", LONG]).unwrap();
    token(&mut m, &["DLOCK.RWACQUIRE", "rw", "r2", "READ", "PX", "50"]).unwrap();
    let c = stream.commands();
    assert!(c.len() == 2 && applies(&c, "rw"), "{c:?}");
    // The RELEASE reaches the paused master after r2's lease ended; on
    // resume Redis reads it before its timers run.
    let mut m2 = master.conn_with_timeout(Some(Duration::from_secs(30)));
    master.pause();
    thread::sleep(Duration::from_millis(120));
    let h = thread::spawn(move || int(&mut m2, &["DLOCK.RELEASE", "rw", "r1", "READ"]));
    thread::sleep(Duration::from_millis(100));
    master.resume();
    assert_eq!(h.join().expect("release thread"), 1);
    assert_replicated(
        &master,
        &replica,
        &keys,
        "a release after another lease ended",
    );
    assert_eq!(int(&mut replica.conn(), &["EXISTS", "rw"]), 0);
    // On a slow machine the timer may have ended r2 before the pause: then
    // an APPLY and the verbatim release.
    let c = stream.commands();
    let effect_only = c == ["DLOCK.APPLY rw "];
    let timer_first = c.len() == 2
        && applies(&c[..1], "rw")
        && c.get(1).map(String::as_str) == Some("DLOCK.RELEASE rw r1 READ");
    assert!(effect_only || timer_first, "unexpected propagation: {c:?}");

    // The AOF replays to the same state.
    drop(m);
    let mut master = master;
    token(
        &mut master.conn(),
        &["DLOCK.ACQUIRE", "m", "o2", "PX", LONG],
    )
    .unwrap();
    token(
        &mut master.conn(),
        &["DLOCK.ACQUIRE", "m", "o2", "PX", LONG],
    )
    .unwrap();
    assert_eq!(int(&mut master.conn(), &["DLOCK.RELEASE", "m", "o2"]), 0);
    let before = info_norm(&mut master.conn(), "m");
    master.restart();
    assert_eq!(
        info_norm(&mut master.conn(), "m"),
        before,
        "after replaying the AOF"
    );
}
