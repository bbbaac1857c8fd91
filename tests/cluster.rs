//! dlock on Redis Cluster: real redis-server processes with the module loaded,
//! joined into a 3-master cluster by `tests/common`'s [`Cluster`].
//!
//! The tests route every command by slot themselves (CLUSTER KEYSLOT and
//! each node's own CLUSTER SLOTS), as a cluster-aware client does:
//! - lock keys in 200 slots work on the owning master, and any other master
//!   answers `-MOVED <slot> <owner>`; replicas serve DLOCK.INFO after READONLY;
//! - COMMAND GETKEYS / GETKEYSANDFLAGS / INFO report the key of every command;
//! - notifications are sharded (SSUBSCRIBE on the key's node), except for a
//!   tagless key containing `}`, whose notices go out as classic PUBLISH;
//! - a slot migration (SETSLOT IMPORTING/MIGRATING + MIGRATE + SETSLOT NODE)
//!   keeps holders, leases, tokens and the fair queue; a connection blocked on
//!   a key whose slot moves is answered within its WAIT (but, a bug, with a
//!   grant on the source instead of BLPOP's `-MOVED`: see the ignored tests);
//! - CLUSTER FAILOVER: the promoted replica holds the same locks and issues
//!   greater tokens.

mod common;
use common::*;

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use redis::Value;

/// Long enough that no lease or queued place ends during a test.
const LONG: &str = "60000";
/// Bound for a message or a reply that should come at once.
const SOON: Duration = Duration::from_secs(10);
/// How long we listen to make sure that nothing arrives.
const QUIET: Duration = Duration::from_millis(300);

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

fn show(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Asserts that `node` redirects `args` to `owner` for `slot`.
fn assert_moved(con: &mut redis::Connection, args: &[&str], slot: u16, owner: &Server) {
    let e = err(con, args);
    let want = format!("MOVED {slot} 127.0.0.1:{}", owner.port);
    assert_eq!(e, want, "{args:?}");
}

/// The value of `name` in a flat field/value array (RESP2 map).
fn field<'a>(items: &'a [Value], name: &str) -> &'a Value {
    items
        .chunks(2)
        .find(|kv| matches!(&kv[0], Value::BulkString(b) if b == name.as_bytes()))
        .map(|kv| &kv[1])
        .unwrap_or_else(|| panic!("no field {name} in {items:?}"))
}

/// The holders of an INFO reply as (owner, count, token).
fn holders(info: &Value) -> Vec<(String, i64, i64)> {
    let Value::Array(items) = info else {
        panic!("no lock: {info:?}");
    };
    let Value::Array(hs) = field(items, "holders") else {
        panic!("holders: {items:?}");
    };
    hs.iter()
        .map(|h| {
            let Value::Array(h) = h else {
                panic!("holder: {h:?}")
            };
            let owner = match field(h, "owner") {
                Value::BulkString(b) => show(b),
                o => panic!("owner: {o:?}"),
            };
            let (Value::Int(count), Value::Int(token)) = (field(h, "count"), field(h, "token"))
            else {
                panic!("holder: {h:?}");
            };
            (owner, *count, *token)
        })
        .collect()
}

fn last_token(info: &Value) -> i64 {
    let Value::Array(items) = info else {
        panic!("no lock: {info:?}");
    };
    match field(items, "token") {
        Value::Int(t) => *t,
        o => panic!("token: {o:?}"),
    }
}

/// `[first, last]` slot ranges and their master's port, from `node`'s own
/// CLUSTER SLOTS.
fn slot_map(node: &Server) -> Vec<(u16, u16, u16)> {
    let v = ok(&mut node.conn(), &["CLUSTER", "SLOTS"]);
    let Value::Array(ranges) = v else {
        panic!("CLUSTER SLOTS: {v:?}");
    };
    ranges
        .iter()
        .map(|r| match r {
            Value::Array(items) => match (&items[0], &items[1], &items[2]) {
                (Value::Int(a), Value::Int(b), Value::Array(m)) => match &m[1] {
                    Value::Int(p) => (*a as u16, *b as u16, *p as u16),
                    o => panic!("port: {o:?}"),
                },
                o => panic!("range: {o:?}"),
            },
            o => panic!("range: {o:?}"),
        })
        .collect()
}

fn port_of_slot(map: &[(u16, u16, u16)], slot: u16) -> u16 {
    map.iter()
        .find(|(a, b, _)| (*a..=*b).contains(&slot))
        .map(|(_, _, p)| *p)
        .unwrap_or_else(|| panic!("slot {slot} not covered: {map:?}"))
}

fn slot_of(con: &mut redis::Connection, key: &str) -> u16 {
    int(con, &["CLUSTER", "KEYSLOT", key]) as u16
}

fn set_all(c: &Cluster, name: &str, value: &str) {
    for n in &c.nodes {
        ok(&mut n.conn(), &["CONFIG", "SET", name, value]);
    }
}

/// Moves `slot` from master `src` to master `dst` the way redis-cli
/// --cluster reshard does: IMPORTING on the target, MIGRATING on the source,
/// MIGRATE of every key, then SETSLOT NODE on the target, the source and
/// every other node; waits until the source redirects the slot.
///
/// Returns the source's refusal of SETSLOT NODE, if it refused.
fn migrate_slot(c: &Cluster, slot: u16, src: usize, dst: usize) -> Option<String> {
    let s = slot.to_string();
    let (sid, did) = (c.ids[src].clone(), c.ids[dst].clone());
    ok(
        &mut c.nodes[dst].conn(),
        &["CLUSTER", "SETSLOT", &s, "IMPORTING", &sid],
    );
    let mut sc = c.nodes[src].conn();
    ok(&mut sc, &["CLUSTER", "SETSLOT", &s, "MIGRATING", &did]);
    let keys: Vec<Vec<u8>> = redis::cmd("CLUSTER")
        .arg("GETKEYSINSLOT")
        .arg(slot)
        .arg(1000)
        .query(&mut sc)
        .expect("GETKEYSINSLOT");
    assert!(!keys.is_empty(), "nothing to migrate in slot {slot}");
    let mut m = redis::cmd("MIGRATE");
    m.arg("127.0.0.1")
        .arg(c.nodes[dst].port)
        .arg("")
        .arg(0)
        .arg(10_000)
        .arg("KEYS");
    for k in &keys {
        m.arg(k.as_slice());
    }
    let r: Value = m
        .query(&mut sc)
        .unwrap_or_else(|e| panic!("MIGRATE: {}", err_string(&e)));
    assert_eq!(r, Value::Okay, "MIGRATE");
    ok(
        &mut c.nodes[dst].conn(),
        &["CLUSTER", "SETSLOT", &s, "NODE", &did],
    );
    // The source refuses while it still holds keys of the slot (see the
    // blocked-waiter tests); it then learns the new owner by gossip and drops
    // them itself.
    let stray = match cmd_str(&mut sc, &["CLUSTER", "SETSLOT", &s, "NODE", &did]) {
        Ok(_) => None,
        Err(e) => {
            let e = err_string(&e);
            assert!(
                e.contains("still hold keys"),
                "SETSLOT NODE on the source: {e}"
            );
            let keys: Vec<Vec<u8>> = redis::cmd("CLUSTER")
                .arg("GETKEYSINSLOT")
                .arg(slot)
                .arg(1000)
                .query(&mut sc)
                .unwrap_or_default();
            eprintln!(
                "[cluster] source refused SETSLOT {slot} NODE: {e}; keys it holds: {:?}",
                keys.iter().map(|k| show(k)).collect::<Vec<_>>()
            );
            Some(e)
        }
    };
    for (i, n) in c.nodes.iter().enumerate() {
        if i != src && i != dst {
            ok(&mut n.conn(), &["CLUSTER", "SETSLOT", &s, "NODE", &did]);
        }
    }
    let moved = wait_until(CLUSTER_TIMEOUT, || {
        c.nodes
            .iter()
            .all(|n| slot_master_port(n, slot) == Some(c.nodes[dst].port))
    });
    assert!(moved, "not every node learned that {slot} moved");
    assert_eq!(c.master_index_of_slot(slot), dst);
    stray
}

fn assert_all_alive(c: &mut Cluster) {
    for n in &mut c.nodes {
        n.assert_alive();
    }
}

// ---------------------------------------------------------------------------
// Routing by slot
// ---------------------------------------------------------------------------

#[test]
fn locks_in_200_slots_work_on_their_master_and_move_elsewhere() {
    let c = Cluster::start(3, 1);
    let map = slot_map(&c.nodes[0]);
    let masters: Vec<&Server> = c.nodes.iter().filter(|n| node_is_master(n)).collect();
    assert_eq!(masters.len(), 3);
    let mut conns: HashMap<u16, redis::Connection> =
        masters.iter().map(|n| (n.port, n.conn())).collect();
    let by_port: HashMap<u16, &Server> = masters.iter().map(|n| (n.port, *n)).collect();
    let mut ks = c.nodes[0].conn();

    let n_keys = 200;
    let mut slots = HashSet::new();
    let mut per_master: HashMap<u16, usize> = HashMap::new();
    let mut routed = Vec::with_capacity(n_keys);
    for i in 0..n_keys {
        let key = format!("lock:{{{i}}}");
        let owner = format!("owner-{i}");
        let slot = slot_of(&mut ks, &key);
        let port = port_of_slot(&map, slot);
        slots.insert(slot);
        *per_master.entry(port).or_default() += 1;
        let wrong = *masters
            .iter()
            .map(|n| &n.port)
            .find(|p| **p != port)
            .expect("another master");
        let acquire: Vec<&str> = match i % 3 {
            0 => vec!["DLOCK.ACQUIRE", &key, &owner, "PX", LONG],
            1 => vec!["DLOCK.RWACQUIRE", &key, &owner, "READ", "PX", LONG],
            _ => vec!["DLOCK.FAIRACQUIRE", &key, &owner, "PX", LONG],
        };
        let kind = ["mutex", "rw", "fair"][i % 3];
        let owner_node = by_port[&port];

        // Every command on another master is redirected to the owner.
        let wc = conns.get_mut(&wrong).expect("conn");
        assert_moved(wc, &acquire, slot, owner_node);
        assert_moved(wc, &["DLOCK.INFO", &key], slot, owner_node);

        let con = conns.get_mut(&port).expect("conn");
        let token = int(con, &acquire);
        assert!(token > 0);
        assert_eq!(int(con, &acquire), token, "reentrant grant, same token");
        assert_eq!(int(con, &["DLOCK.RENEW", &key, &owner, "PX", LONG]), 1);
        let inf = info(con, &key);
        let Value::Array(items) = &inf else {
            panic!("{key}: no lock on its owner");
        };
        assert_eq!(field(items, "kind"), &Value::BulkString(kind.into()));
        assert_eq!(holders(&inf), vec![(owner.clone(), 2, token)]);

        let wc = conns.get_mut(&wrong).expect("conn");
        assert_moved(wc, &["DLOCK.RENEW", &key, &owner], slot, owner_node);
        assert_moved(wc, &["DLOCK.RELEASE", &key, &owner], slot, owner_node);
        assert_moved(wc, &["DLOCK.FORCERELEASE", &key], slot, owner_node);
        routed.push((key, owner, slot, port, token, inf));
    }
    assert!(slots.len() >= 190, "keys in only {} slots", slots.len());
    for (port, n) in &per_master {
        assert!(*n >= 30, "master {port} got only {n} of {n_keys} keys");
    }
    assert_eq!(per_master.len(), 3, "every master serves some keys");

    // Replicas: after READONLY they serve DLOCK.INFO (read-only) with the
    // master's state; writes are still redirected to the master.
    for m in 0..3 {
        for r in c.replicas_of(m) {
            wait_replica_synced(&c.nodes[m], &c.nodes[r]);
        }
    }
    for (key, owner, slot, port, _, inf) in routed.iter().step_by(7) {
        let m = c
            .nodes
            .iter()
            .position(|n| n.port == *port)
            .expect("master");
        for r in c.replicas_of(m) {
            let mut rc = c.nodes[r].conn();
            assert_moved(&mut rc, &["DLOCK.INFO", key], *slot, &c.nodes[m]);
            ok(&mut rc, &["READONLY"]);
            assert_eq!(&info(&mut rc, key), inf, "replica's INFO of {key}");
            assert_moved(&mut rc, &["DLOCK.RELEASE", key, owner], *slot, &c.nodes[m]);
        }
    }

    // Release everything on the owners.
    for (key, owner, _, port, _, _) in &routed {
        let con = conns.get_mut(port).expect("conn");
        assert_eq!(int(con, &["DLOCK.RELEASE", key, owner]), 0);
        assert_eq!(int(con, &["DLOCK.RELEASE", key, owner]), 1);
        assert_eq!(ok(con, &["DLOCK.INFO", key]), Value::Nil);
        assert_eq!(int(con, &["DLOCK.FORCERELEASE", key]), 0);
    }
    for m in &masters {
        assert_eq!(
            node_info_field(m, "dlock", "dlock_locks").as_deref(),
            Some("0")
        );
    }
}

// ---------------------------------------------------------------------------
// Key specs
// ---------------------------------------------------------------------------

/// Every command with sample arguments, and the key flags Redis should report.
const EVERY_COMMAND: &[(&[&str], &str)] = &[
    (
        &["DLOCK.ACQUIRE", "app:{k}1", "o", "PX", "100", "WAIT", "5"],
        "RW",
    ),
    (&["DLOCK.RWACQUIRE", "app:{k}1", "o", "READ"], "RW"),
    (&["DLOCK.FAIRACQUIRE", "app:{k}1", "o", "WAIT", "1"], "RW"),
    (&["DLOCK.RELEASE", "app:{k}1", "o", "WRITE"], "RW"),
    (&["DLOCK.RENEW", "app:{k}1", "o", "PX", "5"], "RW"),
    (&["DLOCK.INFO", "app:{k}1"], "RO"),
    (&["DLOCK.FORCERELEASE", "app:{k}1"], "RW"),
    (&["DLOCK.APPLY", "app:{k}1", "payload"], "OW"),
];

#[test]
fn command_getkeys_and_command_info_report_the_key_of_every_command() {
    let s = Server::start_with(ServerOpts::new().cluster(true));
    let mut con = s.conn();
    for (args, key_flag) in EVERY_COMMAND {
        let name = args[0];
        let mut getkeys = vec!["COMMAND", "GETKEYS"];
        getkeys.extend_from_slice(args);
        assert_eq!(
            ok(&mut con, &getkeys),
            Value::Array(vec![Value::BulkString(b"app:{k}1".to_vec())]),
            "COMMAND GETKEYS {name}"
        );

        let mut gkf = vec!["COMMAND", "GETKEYSANDFLAGS"];
        gkf.extend_from_slice(args);
        let v = ok(&mut con, &gkf);
        let Value::Array(keys) = &v else {
            panic!("GETKEYSANDFLAGS {name}: {v:?}")
        };
        let [Value::Array(kf)] = keys.as_slice() else {
            panic!("GETKEYSANDFLAGS {name}: {v:?}")
        };
        assert_eq!(kf[0], Value::BulkString(b"app:{k}1".to_vec()));
        let Value::Array(flags) = &kf[1] else {
            panic!("{kf:?}")
        };
        let flags: Vec<String> = flags
            .iter()
            .map(|f| match f {
                Value::SimpleString(s) => s.clone(),
                Value::BulkString(b) => show(b),
                o => panic!("flag {o:?}"),
            })
            .collect();
        assert!(
            flags.iter().any(|f| f == key_flag),
            "{name}: key flags {flags:?} lack {key_flag}"
        );

        // COMMAND INFO: first key 1, last key 1, step 1, and one key spec
        // that begins at index 1 and spans one key.
        let v = ok(&mut con, &["COMMAND", "INFO", name]);
        let Value::Array(outer) = &v else {
            panic!("COMMAND INFO {name}: {v:?}")
        };
        let Some(Value::Array(ci)) = outer.first() else {
            panic!("COMMAND INFO {name}: {v:?}")
        };
        let Value::BulkString(reported) = &ci[0] else {
            panic!("{name}: {ci:?}")
        };
        assert!(
            reported.eq_ignore_ascii_case(name.as_bytes()),
            "{name}: {ci:?}"
        );
        assert_eq!(
            (&ci[3], &ci[4], &ci[5]),
            (&Value::Int(1), &Value::Int(1), &Value::Int(1)),
            "{name}: first/last/step"
        );
        let Value::Array(specs) = &ci[8] else {
            panic!("{name}: key specs {:?}", ci[8])
        };
        assert_eq!(specs.len(), 1, "{name}: one key spec");
        let Value::Array(spec) = &specs[0] else {
            panic!("{specs:?}")
        };
        let Value::Array(bs) = field(spec, "begin_search") else {
            panic!("{spec:?}")
        };
        assert_eq!(field(bs, "type"), &Value::BulkString(b"index".to_vec()));
        let Value::Array(bs_spec) = field(bs, "spec") else {
            panic!("{bs:?}")
        };
        assert_eq!(field(bs_spec, "index"), &Value::Int(1), "{name}");
        let Value::Array(fk) = field(spec, "find_keys") else {
            panic!("{spec:?}")
        };
        assert_eq!(field(fk, "type"), &Value::BulkString(b"range".to_vec()));
        let Value::Array(fk_spec) = field(fk, "spec") else {
            panic!("{fk:?}")
        };
        assert_eq!(field(fk_spec, "lastkey"), &Value::Int(0), "{name}");
        let Value::Array(spec_flags) = field(spec, "flags") else {
            panic!("{spec:?}")
        };
        let spec_flags: Vec<String> = spec_flags
            .iter()
            .map(|f| match f {
                Value::SimpleString(s) => s.clone(),
                Value::BulkString(b) => show(b),
                o => panic!("flag {o:?}"),
            })
            .collect();
        assert!(
            spec_flags.iter().any(|f| f == key_flag),
            "{name}: key spec flags {spec_flags:?}"
        );
    }
}

// ---------------------------------------------------------------------------
// Sharded notifications
// ---------------------------------------------------------------------------

#[test]
fn notifications_are_sharded_on_the_keys_node() {
    let c = Cluster::start(3, 0);
    for (key, chan) in [
        ("{user1}:lock", "dlock:{user1}:lock"),
        ("orders", "dlock:{orders}"),
    ] {
        let node = c.node_for_key(key.as_bytes());
        // The channel hashes to the key's slot: same node.
        assert_eq!(
            c.key_slot(key.as_bytes()),
            c.key_slot(chan.as_bytes()),
            "{key}"
        );
        let mut sharded = Subscriber::new_sharded(node, chan.as_bytes());
        let mut classic = Subscriber::new(node, chan.as_bytes());
        let mut con = node.conn();

        int(&mut con, &["DLOCK.ACQUIRE", key, "a", "PX", LONG]);
        assert_eq!(int(&mut con, &["DLOCK.RELEASE", key, "a"]), 1);
        let (ch, msg) = sharded.expect_message(SOON);
        assert_eq!((show(&ch), show(&msg)), (chan.into(), "released".into()));

        int(&mut con, &["DLOCK.ACQUIRE", key, "a", "PX", "200"]);
        let (ch, msg) = sharded.expect_message(SOON);
        assert_eq!((show(&ch), show(&msg)), (chan.into(), "expired".into()));

        int(&mut con, &["DLOCK.FAIRACQUIRE", key, "b", "PX", LONG]);
        ok(&mut con, &["DEL", key]);
        let (ch, msg) = sharded.expect_message(SOON);
        assert_eq!((show(&ch), show(&msg)), (chan.into(), "deleted".into()));

        sharded.expect_none(QUIET);
        // Sharded messages do not reach classic subscribers.
        classic.expect_none(QUIET);
    }

    // A key without hash tag that contains `}`: its channel `dlock:{a}b}`
    // hashes to slot("a"), not the key's slot, so the notice goes out as a
    // classic PUBLISH, which reaches SUBSCRIBE clients on every node.
    let key = "a}b";
    let chan = "dlock:{a}b}";
    let node = c.node_for_key(key.as_bytes());
    assert_ne!(c.key_slot(key.as_bytes()), c.key_slot(chan.as_bytes()));
    let mut classic: Vec<Subscriber> = c
        .nodes
        .iter()
        .map(|n| Subscriber::new(n, chan.as_bytes()))
        .collect();
    let mut sharded = Subscriber::new_sharded(c.node_for_key(chan.as_bytes()), chan.as_bytes());
    let mut con = node.conn();
    // A classic PUBLISH reaches the other nodes over the cluster bus, which may
    // still be connecting: publish a probe until every subscriber has seen one.
    let mut seen = vec![false; classic.len()];
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while seen.iter().any(|s| !s) && std::time::Instant::now() < deadline {
        let _: i64 = redis::cmd("PUBLISH")
            .arg(chan)
            .arg("probe")
            .query(&mut con)
            .expect("PUBLISH");
        for (i, s) in classic.iter_mut().enumerate() {
            if !seen[i] && s.next_message(Duration::from_millis(200)).is_some() {
                seen[i] = true;
            }
        }
    }
    assert!(
        seen.iter().all(|s| *s),
        "the cluster bus carried no PUBLISH to every node"
    );
    int(&mut con, &["DLOCK.ACQUIRE", key, "a", "PX", LONG]);
    assert_eq!(int(&mut con, &["DLOCK.RELEASE", key, "a"]), 1);
    for s in &mut classic {
        // Skip the probes still in flight.
        let (ch, msg) = loop {
            let (ch, msg) = s.expect_message(SOON);
            if msg != b"probe" {
                break (ch, msg);
            }
        };
        assert_eq!((show(&ch), show(&msg)), (chan.into(), "released".into()));
    }
    sharded.expect_none(QUIET);
}

// ---------------------------------------------------------------------------
// Slot migration
// ---------------------------------------------------------------------------

#[test]
fn slot_migration_keeps_holders_leases_tokens_and_the_fair_queue() {
    let mut c = Cluster::start(3, 0);
    set_all(&c, "dlock.fair-queue-timeout-ms", LONG);
    let (fair, rw, mutex) = ("{mig}fair", "{mig}rw", "{mig}mutex");
    let slot = c.key_slot(fair.as_bytes());
    let src = c.node_index_for_key(fair.as_bytes());
    let dst = (src + 1) % 3;
    let mut sc = c.nodes[src].conn();

    let t_fair = int(&mut sc, &["DLOCK.FAIRACQUIRE", fair, "A", "PX", LONG]);
    assert_eq!(ok(&mut sc, &["DLOCK.FAIRACQUIRE", fair, "B"]), Value::Nil);
    int(&mut sc, &["DLOCK.RWACQUIRE", rw, "R1", "READ", "PX", LONG]);
    int(&mut sc, &["DLOCK.RWACQUIRE", rw, "R1", "READ", "PX", LONG]);
    int(
        &mut sc,
        &["DLOCK.RWACQUIRE", rw, "R2", "READ", "PX", "50000"],
    );
    let t_mutex = int(&mut sc, &["DLOCK.ACQUIRE", mutex, "M", "PX", "40000"]);
    int(&mut sc, &["DLOCK.ACQUIRE", mutex, "M", "PX", "45000"]);
    let before: Vec<Value> = [fair, rw, mutex].iter().map(|k| info(&mut sc, k)).collect();
    let max_token = before.iter().map(last_token).max().unwrap_or(0);

    assert_eq!(migrate_slot(&c, slot, src, dst), None);

    let mut dc = c.nodes[dst].conn();
    for (k, b) in [fair, rw, mutex].iter().zip(&before) {
        assert_eq!(&info(&mut dc, k), b, "DLOCK.INFO {k} after migration");
        assert_moved(&mut sc, &["DLOCK.INFO", k], slot, &c.nodes[dst]);
        assert_moved(&mut sc, &["DLOCK.ACQUIRE", k, "X"], slot, &c.nodes[dst]);
    }
    assert_eq!(
        node_info_field(&c.nodes[src], "dlock", "dlock_locks").as_deref(),
        Some("0")
    );

    // The fair queue came along: a newcomer queues behind B, B gets the lock
    // once A lets go, with a greater token.
    assert_eq!(ok(&mut dc, &["DLOCK.FAIRACQUIRE", fair, "B"]), Value::Nil);
    assert_eq!(int(&mut dc, &["DLOCK.RELEASE", fair, "A"]), 1);
    assert_eq!(ok(&mut dc, &["DLOCK.FAIRACQUIRE", fair, "X"]), Value::Nil);
    let t_b = int(&mut dc, &["DLOCK.FAIRACQUIRE", fair, "B", "PX", LONG]);
    assert!(t_b > t_fair && t_b > max_token, "{t_b} after {max_token}");
    // Reentrant counts and leases came along too.
    assert_eq!(
        int(&mut dc, &["DLOCK.ACQUIRE", mutex, "M", "PX", LONG]),
        t_mutex
    );
    assert_eq!(int(&mut dc, &["DLOCK.RELEASE", mutex, "M"]), 0);
    assert_eq!(int(&mut dc, &["DLOCK.RELEASE", mutex, "M"]), 0);
    assert_eq!(int(&mut dc, &["DLOCK.RELEASE", mutex, "M"]), 1);
    assert_eq!(int(&mut dc, &["DLOCK.RELEASE", rw, "R1"]), 0);
    assert_eq!(int(&mut dc, &["DLOCK.RELEASE", rw, "R1"]), 1);
    assert_eq!(int(&mut dc, &["DLOCK.RENEW", rw, "R2"]), 1);
    let t_w = int(&mut dc, &["DLOCK.RWACQUIRE", rw, "R2", "WRITE"]);
    assert!(t_w > max_token);
    // A fresh key in the moved slot gets a token above everything seen.
    let t_new = int(&mut dc, &["DLOCK.ACQUIRE", "{mig}new", "N"]);
    assert!(t_new > t_w && t_new > t_b);
    assert_all_alive(&mut c);
}

/// What happened to blocked clients when their key's slot moved.
struct MovedUnderWaiters {
    /// `DLOCK.ACQUIRE {bw}lock C PX 60000 WAIT 8000`: time to reply, reply.
    waiter: (Duration, Result<Value, String>),
    /// `BLPOP {bw}list 8` in the same slot: how Redis itself answers.
    blpop: (Duration, Result<Value, String>),
    /// The source's refusal of SETSLOT NODE (it still held keys), if any.
    refusal: Option<String>,
    src: usize,
    dst: usize,
}

/// `{bw}lock` held by A on its master, C blocked on it with `WAIT 8000`,
/// and, as the reference of how Redis treats a blocked command whose key
/// moves, `BLPOP {bw}list 8` on the same node; then the slot moves.
///
/// Observed on Redis 7.0.15: BLPOP stays blocked while the slot is
/// MIGRATING and gets `-MOVED <slot> <target>` once the source learns the
/// new owner (10 ms to 1 s later, by clientsCron). The DLOCK waiter instead
/// is *granted* (a fresh token) on the source about 10 ms after MIGRATE:
/// MIGRATE deletes the key there, the unlink hook wakes the waiter, and
/// on_ready creates a new lock on the empty key while A still holds the
/// migrated lock on the target. The source then refuses SETSLOT NODE
/// ("still hold keys") or, having heard of the new owner by gossip, drops
/// the stray key silently.
fn migrate_under_blocked_waiters(c: &Cluster) -> MovedUnderWaiters {
    let key = "{bw}lock";
    let slot = c.key_slot(key.as_bytes());
    let src = c.node_index_for_key(key.as_bytes());
    let dst = (src + 1) % 3;
    let mut sc = c.nodes[src].conn();
    int(&mut sc, &["DLOCK.ACQUIRE", key, "A", "PX", LONG]);
    let port = c.nodes[src].port;
    let waiter = spawn_blocking(
        port,
        &[
            "DLOCK.ACQUIRE",
            "{bw}lock",
            "C",
            "PX",
            "60000",
            "WAIT",
            "8000",
        ],
    );
    wait_waiting(&c.nodes[src], 1);
    let blpop = spawn_blocking(port, &["BLPOP", "{bw}list", "8"]);
    let blocked = wait_until(SOON, || {
        node_info_field(&c.nodes[src], "clients", "blocked_clients").as_deref() == Some("2")
    });
    assert!(blocked, "BLPOP did not block");
    let refusal = migrate_slot(c, slot, src, dst);
    let waiter = waiter.join().expect("waiter thread");
    let blpop = blpop.join().expect("blpop thread");
    eprintln!(
        "[cluster] slot {slot} moved under blocked clients: \
         DLOCK.ACQUIRE WAIT 8000 -> {:?} after {:?}; BLPOP 8 -> {:?} after {:?}",
        waiter.1, waiter.0, blpop.1, blpop.0
    );
    MovedUnderWaiters {
        waiter,
        blpop,
        refusal,
        src,
        dst,
    }
}

#[test]
fn blocked_waiter_on_a_migrating_key_is_answered_within_its_wait() {
    let mut c = Cluster::start(3, 0);
    let m = migrate_under_blocked_waiters(&c);
    // Nobody hangs beyond its WAIT (8 s; generous margin for slow CI) ...
    let bound = Duration::from_secs(14);
    assert!(m.waiter.0 < bound, "waiter took {:?}", m.waiter);
    assert!(m.blpop.0 < bound, "BLPOP took {:?}", m.blpop);
    // ... no node crashed, and the lock and its holder are on the target.
    assert_all_alive(&mut c);
    let mut dc = c.nodes[m.dst].conn();
    assert_eq!(holders(&info(&mut dc, "{bw}lock"))[0].0, "A");
    assert_eq!(int(&mut dc, &["DLOCK.RELEASE", "{bw}lock", "A"]), 1);
    wait_waiting(&c.nodes[m.src], 0);
}

#[test]

fn blocked_waiter_on_a_migrating_key_is_redirected_like_blpop_not_granted() {
    let mut c = Cluster::start(3, 0);
    let m = migrate_under_blocked_waiters(&c);
    let moved = |r: &Result<Value, String>| matches!(r, Err(e) if e.starts_with("MOVED "));
    assert!(moved(&m.blpop.1), "Redis redirects BLPOP: {:?}", m.blpop);
    // Like BLPOP: -MOVED to the new owner (at worst a nil after WAIT) --
    // never a grant on the source while A holds the lock on the target.
    assert!(
        moved(&m.waiter.1) || m.waiter.1 == Ok(Value::Nil),
        "the waiter was answered {:?} on node {} while A holds {{bw}}lock on node {}",
        m.waiter.1,
        m.src,
        m.dst
    );
    assert_eq!(
        m.refusal, None,
        "the source recreated a key in the moving slot"
    );
    assert_all_alive(&mut c);
}

#[test]

fn migrating_a_held_lock_publishes_nothing() {
    let c = Cluster::start(3, 0);
    let key = "{pub}lock";
    let slot = c.key_slot(key.as_bytes());
    let src = c.node_index_for_key(key.as_bytes());
    let dst = (src + 1) % 3;
    let mut on_src = Subscriber::new_sharded(&c.nodes[src], b"dlock:{pub}lock");
    int(
        &mut c.nodes[src].conn(),
        &["DLOCK.ACQUIRE", key, "A", "PX", LONG],
    );
    assert_eq!(migrate_slot(&c, slot, src, dst), None);
    on_src.expect_none(QUIET);
    assert_eq!(
        holders(&info(&mut c.nodes[dst].conn(), key))[0].0,
        "A".to_string()
    );
}

// ---------------------------------------------------------------------------
// Failover
// ---------------------------------------------------------------------------

#[test]
fn promoted_replica_holds_the_same_locks_and_issues_greater_tokens() {
    let mut c = Cluster::start(3, 1);
    set_all(&c, "dlock.fair-queue-timeout-ms", LONG);
    // Three keys served by the first master.
    let keys: Vec<String> = {
        let mut ks = c.nodes[0].conn();
        let map = slot_map(&c.nodes[0]);
        (0..)
            .map(|i| format!("fo:{{{i}}}"))
            .filter(|k| port_of_slot(&map, slot_of(&mut ks, k)) == c.nodes[0].port)
            .take(3)
            .collect()
    };
    let (fair, rw, mutex) = (&keys[0], &keys[1], &keys[2]);
    let master = 0;
    let replica = c.replicas_of(master)[0];
    let mut mc = c.nodes[master].conn();
    int(&mut mc, &["DLOCK.FAIRACQUIRE", fair, "A", "PX", LONG]);
    assert_eq!(ok(&mut mc, &["DLOCK.FAIRACQUIRE", fair, "B"]), Value::Nil);
    int(&mut mc, &["DLOCK.RWACQUIRE", rw, "R1", "READ", "PX", LONG]);
    int(&mut mc, &["DLOCK.RWACQUIRE", rw, "R2", "READ", "PX", LONG]);
    int(&mut mc, &["DLOCK.ACQUIRE", mutex, "M", "PX", LONG]);
    int(&mut mc, &["DLOCK.ACQUIRE", mutex, "M", "PX", LONG]);
    let before: Vec<Value> = keys.iter().map(|k| info(&mut mc, k)).collect();
    let max_token = before.iter().map(last_token).max().unwrap_or(0);
    wait_replica_synced(&c.nodes[master], &c.nodes[replica]);
    {
        let mut rc = c.nodes[replica].conn();
        ok(&mut rc, &["READONLY"]);
        for (k, b) in keys.iter().zip(&before) {
            assert_eq!(&info(&mut rc, k), b, "replica's INFO of {k}");
        }
    }

    ok(&mut c.nodes[replica].conn(), &["CLUSTER", "FAILOVER"]);
    let promoted = wait_until(CLUSTER_TIMEOUT, || {
        node_is_master(&c.nodes[replica])
            && c.nodes.iter().all(|n| {
                slot_master_port(n, c.key_slot(fair.as_bytes())) == Some(c.nodes[replica].port)
            })
    });
    assert!(promoted, "replica {replica} was not promoted");
    c.wait_healthy();
    assert_eq!(c.node_index_for_key(fair.as_bytes()), replica);

    let mut pc = c.nodes[replica].conn();
    for (k, b) in keys.iter().zip(&before) {
        assert_eq!(&info(&mut pc, k), b, "promoted replica's INFO of {k}");
    }
    // The old master is a replica now: writes are redirected.
    let slot = c.key_slot(mutex.as_bytes());
    assert_moved(
        &mut c.nodes[master].conn(),
        &["DLOCK.ACQUIRE", mutex, "Z"],
        slot,
        &c.nodes[replica],
    );

    // Same holders, same queue; new grants get greater tokens.
    assert_eq!(ok(&mut pc, &["DLOCK.FAIRACQUIRE", fair, "X"]), Value::Nil);
    assert_eq!(int(&mut pc, &["DLOCK.RELEASE", fair, "A"]), 1);
    let t_b = int(&mut pc, &["DLOCK.FAIRACQUIRE", fair, "B", "PX", LONG]);
    assert!(t_b > max_token, "token {t_b} after failover <= {max_token}");
    assert_eq!(int(&mut pc, &["DLOCK.RELEASE", mutex, "M"]), 0);
    assert_eq!(int(&mut pc, &["DLOCK.RELEASE", mutex, "M"]), 1);
    let t_z = int(&mut pc, &["DLOCK.ACQUIRE", mutex, "Z"]);
    assert!(t_z > t_b);
    assert_eq!(int(&mut pc, &["DLOCK.RELEASE", rw, "R1"]), 1);
    assert_eq!(
        node_info_field(&c.nodes[replica], "dlock", "dlock_locks").as_deref(),
        Some("3")
    );
    // The new master replicates to the old one.
    wait_replica_synced(&c.nodes[replica], &c.nodes[master]);
    let mut oc = c.nodes[master].conn();
    ok(&mut oc, &["READONLY"]);
    for k in &keys {
        assert_eq!(
            info(&mut oc, k),
            info(&mut pc, k),
            "old master's INFO of {k}"
        );
    }
    assert_all_alive(&mut c);
}
