//! Valkey 9's atomic slot migration (`CLUSTER MIGRATESLOTS`) on a 3-master
//! cluster with the module loaded (services::migration): locks in one slot —
//! held with a lease, contended (a fair queue place and a connection blocked
//! in WAIT), bound (BIND) — move to another master; the target then shows the
//! same holders, lease ends, tokens and queue, issues greater tokens, expires
//! leases; the bound hold has ended; the blocked connection is answered as a
//! BLPOP on the same slot is (`-MOVED`); key specs and notifications work on
//! the target; the source keeps nothing.
//!
//! Runs only where the server has MIGRATESLOTS (Valkey 9.0+: run with
//! `REDIS_SERVER=$(scripts/deps.sh valkey9)`); elsewhere it says so and
//! passes.

mod common;
use common::*;

use std::time::Duration;

use redis::Value;

const LONG: &str = "60000";
const SOON: Duration = Duration::from_secs(20);

fn field<'a>(items: &'a [Value], name: &str) -> Option<&'a Value> {
    items
        .chunks(2)
        .find(|kv| matches!(&kv[0], Value::BulkString(b) if b == name.as_bytes()))
        .map(|kv| &kv[1])
}

/// An INFO reply without the waiters blocked in WAIT: their connections were
/// answered `-MOVED`, so their places do not travel.
fn without_blocked(v: &Value) -> Value {
    let Value::Array(items) = v else {
        return v.clone();
    };
    let blocked = |w: &Value| {
        matches!(w, Value::Array(w) if matches!(field(w, "state"),
            Some(Value::BulkString(s)) if s == b"blocked"))
    };
    Value::Array(
        items
            .chunks(2)
            .flat_map(|kv| match (&kv[0], &kv[1]) {
                (Value::BulkString(k), Value::Array(ws)) if k == b"waiters" => [
                    kv[0].clone(),
                    Value::Array(ws.iter().filter(|w| !blocked(w)).cloned().collect()),
                ],
                _ => [kv[0].clone(), kv[1].clone()],
            })
            .collect(),
    )
}

fn last_token(v: &Value) -> i64 {
    match v {
        Value::Array(items) => match field(items, "token") {
            Some(Value::Int(t)) => *t,
            o => panic!("token: {o:?}"),
        },
        o => panic!("no lock: {o:?}"),
    }
}

fn gauge(node: &Server, name: &str) -> Option<u64> {
    node_info_field(node, "dlock", name).and_then(|v| v.parse().ok())
}

/// Whether the server knows CLUSTER MIGRATESLOTS (Valkey 9.0 and later).
fn has_migrateslots(node: &Server) -> bool {
    let v = cmd_str(
        &mut node.conn(),
        &["COMMAND", "INFO", "CLUSTER|MIGRATESLOTS"],
    );
    matches!(v, Ok(Value::Array(items)) if items.iter().any(|i| *i != Value::Nil))
}

#[test]
fn migrateslots_moves_held_contended_and_bound_locks() {
    let mut c = Cluster::start(3, 0);
    if !has_migrateslots(&c.nodes[0]) {
        eprintln!(
            "[slot_migration] SKIPPED: {} has no CLUSTER MIGRATESLOTS (Valkey 9.0+ only); \
             run with REDIS_SERVER=$(scripts/deps.sh valkey9)",
            redis_server_bin().display()
        );
        return;
    }
    for n in &c.nodes {
        ok(
            &mut n.conn(),
            &["CONFIG", "SET", "dlock.fair-queue-timeout-ms", LONG],
        );
    }
    let (held, fair, bound, short) = ("{asm}held", "{asm}fair", "{asm}bound", "{asm}short");
    let slot = c.key_slot(held.as_bytes());
    let src = c.node_index_for_key(held.as_bytes());
    let dst = (src + 1) % 3;
    let mut sc = c.nodes[src].conn();

    // Held with a lease (reentrant), contended (a fair queue place and a
    // connection blocked in WAIT), bound to a connection, and a short lease.
    let t_held = int(&mut sc, &["DLOCK.ACQUIRE", held, "H", "PX", LONG]);
    int(&mut sc, &["DLOCK.ACQUIRE", held, "H", "PX", LONG]);
    int(&mut sc, &["DLOCK.FAIRACQUIRE", fair, "A", "PX", LONG]);
    assert_eq!(ok(&mut sc, &["DLOCK.FAIRACQUIRE", fair, "B"]), Value::Nil);
    let mut binder = c.nodes[src].conn();
    int(
        &mut binder,
        &["DLOCK.ACQUIRE", bound, "b", "BIND", "PX", LONG],
    );
    int(&mut sc, &["DLOCK.ACQUIRE", short, "S", "PX", "12000"]);
    let port = c.nodes[src].port;
    let waiter = spawn_blocking(
        port,
        &[
            "DLOCK.ACQUIRE",
            "{asm}held",
            "W",
            "PX",
            "60000",
            "WAIT",
            "30000",
        ],
    );
    assert!(
        wait_until(SOON, || gauge(&c.nodes[src], "dlock_waiting_clients")
            == Some(1)),
        "the waiter did not block"
    );
    let blpop = spawn_blocking(port, &["BLPOP", "{asm}list", "30"]);
    assert!(
        wait_until(SOON, || {
            node_info_field(&c.nodes[src], "clients", "blocked_clients").as_deref() == Some("2")
        }),
        "BLPOP did not block"
    );
    let before: Vec<Value> = [held, fair, short]
        .iter()
        .map(|k| info(&mut sc, k))
        .collect();
    let max_token = before
        .iter()
        .chain([&info(&mut sc, bound)])
        .map(last_token)
        .max()
        .unwrap_or(0);

    // Who listens on the source for the held lock's notices.
    let mut on_src = Subscriber::new_sharded(&c.nodes[src], b"dlock:{asm}held");

    // The migration itself.
    let s = slot.to_string();
    let did = c.ids[dst].clone();
    let r = cmd_str(
        &mut sc,
        &[
            "CLUSTER",
            "MIGRATESLOTS",
            "SLOTSRANGE",
            &s,
            &s,
            "NODE",
            &did,
        ],
    );
    assert!(r.is_ok(), "CLUSTER MIGRATESLOTS refused: {r:?}");
    let moved = wait_until(Duration::from_secs(60), || {
        let dport = Some(c.nodes[dst].port);
        slot_master_port(&c.nodes[dst], slot) == dport
            && slot_master_port(&c.nodes[src], slot) == dport
    });
    assert!(
        moved,
        "slot {slot} did not move: {:?}\nsource log: {}",
        cmd_str(&mut sc, &["CLUSTER", "GETSLOTMIGRATIONS"]),
        c.nodes[src].logs_tail(30)
    );

    // The blocked connections: DLOCK's waiter is answered as BLPOP is.
    let (bt, br) = blpop.join().expect("blpop thread");
    let (wt, wr) = waiter.join().expect("waiter thread");
    eprintln!(
        "[slot_migration] slot {slot} moved: BLPOP -> {br:?} after {bt:?}; \
         DLOCK.ACQUIRE WAIT -> {wr:?} after {wt:?}"
    );
    let redirect = |r: &Result<Value, String>| match r {
        Err(e) => e.split(' ').next().map(str::to_owned),
        Ok(v) => Some(format!("{v:?}")),
    };
    assert_eq!(
        redirect(&wr),
        redirect(&br),
        "waiter {wr:?} vs BLPOP {br:?}"
    );

    // The source published nothing for the keys that left it (no `deleted`).
    if let Some(m) = on_src.next_message(Duration::from_millis(500)) {
        panic!("the source published {m:?} for a migrated lock");
    }

    // On the target: the same holders, lease ends, tokens and queue.
    let mut dc = c.nodes[dst].conn();
    for (k, b) in [held, fair, short].iter().zip(&before) {
        assert_eq!(
            info(&mut dc, k),
            without_blocked(b),
            "DLOCK.INFO {k} after migration"
        );
    }
    // The bound hold ended (its connection is on another server).
    assert!(
        wait_until(SOON, || ok(&mut dc, &["DLOCK.INFO", bound]) == Value::Nil
            && gauge(&c.nodes[dst], "dlock_bound_ends") == Some(1)),
        "bound hold still there: {:?}",
        ok(&mut dc, &["DLOCK.INFO", bound])
    );
    // The old token is still valid there; a new grant's token is greater.
    assert_eq!(int(&mut dc, &["DLOCK.CHECK", held, &t_held.to_string()]), 1);
    assert_eq!(int(&mut dc, &["DLOCK.RELEASE", fair, "A"]), 1);
    let t_b = int(&mut dc, &["DLOCK.FAIRACQUIRE", fair, "B", "PX", LONG]);
    assert!(t_b > max_token, "{t_b} after {max_token}");
    // Key specs and notifications on the target: COMMAND GETKEYS names
    // the key, and the short lease's expiry is published there.
    assert_eq!(
        ok(
            &mut dc,
            &["COMMAND", "GETKEYS", "DLOCK.ACQUIRE", short, "X"]
        ),
        Value::Array(vec![Value::BulkString(short.as_bytes().to_vec())])
    );
    let mut notices = Subscriber::new_sharded(&c.nodes[dst], b"dlock:{asm}short");
    // Expiry fires on the target.
    let (ch, msg) = notices.expect_message(SOON);
    assert_eq!(
        (ch.as_slice(), msg.as_slice()),
        (&b"dlock:{asm}short"[..], &b"expired"[..])
    );
    assert!(
        wait_until(SOON, || ok(&mut dc, &["DLOCK.INFO", short]) == Value::Nil),
        "the short lease did not expire on the target"
    );
    // The source keeps nothing.
    assert!(
        wait_until(SOON, || {
            gauge(&c.nodes[src], "dlock_locks") == Some(0)
                && gauge(&c.nodes[src], "dlock_waiters") == Some(0)
                && gauge(&c.nodes[src], "dlock_waiting_clients") == Some(0)
                && gauge(&c.nodes[src], "dlock_bound_keys") == Some(0)
        }),
        "source leftovers: {}",
        c.nodes[src].info("dlock")
    );
    for n in &mut c.nodes {
        n.assert_alive();
    }
}
