//! Every reply of every command, end to end against a real redis-server with
//! the module loaded: grants, reentry, leases and their expiry, RELEASE,
//! RENEW, INFO (RESP2 and RESP3, binary owners), FORCERELEASE, fencing
//! tokens, WRONGTYPE / WRONGKIND, WAIT inside MULTI and scripts, OOM,
//! command introspection, INFO counters, TYPE / MEMORY USAGE / DEBUG DIGEST,
//! configuration and read-only replicas.

mod common;
use common::*;

use std::collections::HashMap;
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redis::{Connection, RedisResult, Value};

/// A lease long enough never to end during a test.
const LONG: &str = "600000";
/// Generous bound for anything that should happen "at once" or "soon".
const SOON: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis() as i64
}

fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_micros() as i64
}

fn show(args: &[&[u8]]) -> String {
    args.iter()
        .map(|a| {
            let s = String::from_utf8_lossy(a);
            if s.len() > 40 {
                format!("{}…({} bytes)", &s[..40], a.len())
            } else {
                s.into_owned()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Runs a binary-safe command that must not fail.
fn ok_raw(con: &mut Connection, args: &[&[u8]]) -> Value {
    cmd_raw(con, args).unwrap_or_else(|e| panic!("`{}` failed: {}", show(args), err_string(&e)))
}

/// Runs a command that must not fail.
fn ok(con: &mut Connection, args: &[&str]) -> Value {
    let bytes: Vec<&[u8]> = args.iter().map(|s| s.as_bytes()).collect();
    ok_raw(con, &bytes)
}

fn err_raw(con: &mut Connection, args: &[&[u8]]) -> String {
    match cmd_raw(con, args) {
        Ok(v) => panic!("`{}` should fail, got {v:?}", show(args)),
        Err(e) => err_string(&e),
    }
}

fn int(v: &Value) -> i64 {
    match v {
        Value::Int(n) => *n,
        other => panic!("expected an integer reply, got {other:?}"),
    }
}

fn bytes_of(v: &Value) -> Vec<u8> {
    match v {
        Value::BulkString(b) => b.clone(),
        Value::SimpleString(s) => s.clone().into_bytes(),
        Value::Okay => b"OK".to_vec(),
        Value::VerbatimString { text, .. } => text.clone().into_bytes(),
        other => panic!("expected a string reply, got {other:?}"),
    }
}

fn text(v: &Value) -> String {
    String::from_utf8(bytes_of(v)).expect("UTF-8 string reply")
}

/// A grant (Some(token)) or a denial (None) from an acquire command.
fn acq_raw(con: &mut Connection, args: &[&[u8]]) -> Option<i64> {
    match ok_raw(con, args) {
        Value::Int(t) => Some(t),
        Value::Nil => None,
        other => panic!("`{}`: expected a token or nil, got {other:?}", show(args)),
    }
}

fn acq(con: &mut Connection, args: &[&str]) -> Option<i64> {
    let bytes: Vec<&[u8]> = args.iter().map(|s| s.as_bytes()).collect();
    acq_raw(con, &bytes)
}

/// An acquire that must be granted; returns the token.
fn grant(con: &mut Connection, args: &[&str]) -> i64 {
    acq(con, args).unwrap_or_else(|| panic!("`{}` was not granted", args.join(" ")))
}

fn exists(con: &mut Connection, key: &str) -> bool {
    int(&ok(con, &["EXISTS", key])) == 1
}

/// field/value pairs of a RESP2 flat array or a RESP3 map.
fn pairs(v: &Value) -> Vec<(String, Value)> {
    match v {
        Value::Array(items) => {
            assert!(items.len() % 2 == 0, "odd field/value array: {v:?}");
            items
                .chunks(2)
                .map(|c| (text(&c[0]), c[1].clone()))
                .collect()
        }
        Value::Map(m) => m.iter().map(|(k, v)| (text(k), v.clone())).collect(),
        other => panic!("expected a map or a field/value array, got {other:?}"),
    }
}

/// One holder or waiter of `DLOCK.INFO`, fields in reply order.
#[derive(Clone, Debug, PartialEq)]
struct Entry(Vec<(String, Value)>);

impl Entry {
    fn get(&self, field: &str) -> &Value {
        self.0
            .iter()
            .find(|(k, _)| k == field)
            .map(|(_, v)| v)
            .unwrap_or_else(|| panic!("no field {field:?} in {self:?}"))
    }
    fn int(&self, field: &str) -> i64 {
        int(self.get(field))
    }
    fn text(&self, field: &str) -> String {
        text(self.get(field))
    }
    fn bytes(&self, field: &str) -> Vec<u8> {
        bytes_of(self.get(field))
    }
    fn names(&self) -> Vec<&str> {
        self.0.iter().map(|(k, _)| k.as_str()).collect()
    }
}

/// A parsed `DLOCK.INFO` reply.
#[derive(Clone, Debug, PartialEq)]
struct LockInfo {
    fields: Vec<String>,
    kind: String,
    token: i64,
    holders: Vec<Entry>,
    waiters: Vec<Entry>,
}

impl LockInfo {
    fn parse(v: &Value) -> Option<LockInfo> {
        if *v == Value::Nil {
            return None;
        }
        let top = pairs(v);
        let get = |name: &str| {
            top.iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
                .unwrap_or_else(|| panic!("DLOCK.INFO lacks {name:?}: {v:?}"))
        };
        let entries = |name: &str| match get(name) {
            Value::Array(items) => items.iter().map(|e| Entry(pairs(e))).collect(),
            other => panic!("{name} is not an array: {other:?}"),
        };
        Some(LockInfo {
            fields: top.iter().map(|(k, _)| k.clone()).collect(),
            kind: text(&get("kind")),
            token: int(&get("token")),
            holders: entries("holders"),
            waiters: entries("waiters"),
        })
    }

    /// The same without the `ttl` fields (they change by themselves).
    fn without_ttl(&self) -> LockInfo {
        let strip = |es: &Vec<Entry>| {
            es.iter()
                .map(|e| {
                    // Time-dependent: remaining and elapsed ms.
                    let timed = |k: &str| matches!(k, "ttl" | "held_ms" | "waited_ms");
                    Entry(e.0.iter().filter(|(k, _)| !timed(k)).cloned().collect())
                })
                .collect()
        };
        LockInfo {
            holders: strip(&self.holders),
            waiters: strip(&self.waiters),
            ..self.clone()
        }
    }

    fn holder(&self, owner: &[u8]) -> &Entry {
        self.holders
            .iter()
            .find(|h| h.bytes("owner") == owner)
            .unwrap_or_else(|| panic!("no holder {owner:?} in {self:?}"))
    }
}

fn info_raw(con: &mut Connection, key: &[u8]) -> Option<LockInfo> {
    LockInfo::parse(&ok_raw(con, &[b"DLOCK.INFO", key]))
}

fn info(con: &mut Connection, key: &str) -> Option<LockInfo> {
    info_raw(con, key.as_bytes())
}

fn must_info(con: &mut Connection, key: &str) -> LockInfo {
    info(con, key).unwrap_or_else(|| panic!("no lock at {key:?}"))
}

/// `INFO dlock` as numbers.
fn stats(con: &mut Connection) -> HashMap<String, i64> {
    let text: String = redis::cmd("INFO")
        .arg("dlock")
        .query(con)
        .expect("INFO dlock");
    parse_info(&text)
        .into_iter()
        .filter_map(|(k, v)| v.parse().ok().map(|n| (k, n)))
        .collect()
}

/// `after - before` for every `INFO dlock` field that changed.
fn delta(before: &HashMap<String, i64>, after: &HashMap<String, i64>) -> HashMap<String, i64> {
    after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0)))
        .filter(|(_, d)| *d != 0)
        .collect()
}

/// Runs `args` (reply ignored) and checks how `INFO dlock` moved.
fn step(c: &mut Connection, args: &[&str], want: &[(&str, i64)]) {
    let before = stats(c);
    let _ = cmd_str(c, args);
    let d = delta(&before, &stats(c));
    assert_eq!(d, changes(want), "after {args:?}");
}

fn changes(list: &[(&str, i64)]) -> HashMap<String, i64> {
    list.iter()
        .map(|(k, v)| (format!("dlock_{k}"), *v))
        .collect()
}

/// Runs `args` on a fresh connection in a thread (for commands that block).
fn spawn_cmd(s: &Server, args: &[&str]) -> thread::JoinHandle<RedisResult<Value>> {
    let mut con = s.conn();
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    thread::spawn(move || {
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        cmd_str(&mut con, &refs)
    })
}

/// Waits until the lock at `key` has `n` waiters.
fn wait_waiters(con: &mut Connection, key: &str, n: usize) {
    let ok = wait_until(SOON, || {
        info(con, key).is_some_and(|i| i.waiters.len() == n)
    });
    assert!(ok, "{key}: never got {n} waiters: {:?}", info(con, key));
}

/// Runs `args` and `DLOCK.INFO key` in one MULTI/EXEC, so that INFO sees
/// the lock at the instant the command ran (no time passes in between, even
/// on a slow machine). Returns the command's reply and the lock.
fn with_info(con: &mut Connection, args: &[&str], key: &str) -> (Value, Option<LockInfo>) {
    assert_eq!(ok(con, &["MULTI"]), Value::Okay);
    assert_eq!(text(&ok(con, args)), "QUEUED");
    assert_eq!(text(&ok(con, &["DLOCK.INFO", key])), "QUEUED");
    match ok(con, &["EXEC"]) {
        Value::Array(r) if r.len() == 2 => (r[0].clone(), LockInfo::parse(&r[1])),
        other => panic!("EXEC of {args:?}: {other:?}"),
    }
}

/// The remaining lease of `owner`'s first hold right after `args` ran.
fn ttl_after(con: &mut Connection, args: &[&str], key: &str, owner: &str) -> i64 {
    let (reply, info) = with_info(con, args, key);
    assert!(
        matches!(reply, Value::Int(n) if n > 0),
        "{args:?} answered {reply:?}"
    );
    let info = info.unwrap_or_else(|| panic!("no lock at {key} after {args:?}"));
    info.holder(owner.as_bytes()).int("ttl")
}

/// Asserts that a lease of `lease` ms was just set (INFO in the same
/// transaction sees at most a few ms gone).
fn assert_lease(ttl: i64, lease: i64, what: &str) {
    assert!(
        ttl <= lease && ttl > lease - 100,
        "{what}: ttl {ttl}, expected a fresh lease of {lease} ms"
    );
}

fn config_get(con: &mut Connection, name: &str) -> String {
    match ok(con, &["CONFIG", "GET", name]) {
        Value::Array(items) if items.len() == 2 => text(&items[1]),
        Value::Map(m) if m.len() == 1 => text(&m[0].1),
        other => panic!("CONFIG GET {name}: {other:?}"),
    }
}

// ---------------------------------------------------------------------------
// DLOCK.ACQUIRE
// ---------------------------------------------------------------------------

#[test]
fn acquire_grants_a_token_reenters_and_denies_others() {
    let s = Server::start();
    let mut c = s.conn();

    let t = grant(&mut c, &["DLOCK.ACQUIRE", "k", "o1", "PX", "10000"]);
    assert!(t > 0, "token {t}");
    let i1 = must_info(&mut c, "k");
    assert_eq!(i1.kind, "mutex");
    assert_eq!(i1.token, t);
    assert_eq!(i1.holders.len(), 1);
    assert_eq!(i1.holder(b"o1").int("count"), 1);
    assert_eq!(i1.holder(b"o1").int("token"), t);

    // Reentry: same token, count grows, the lease restarts.
    thread::sleep(Duration::from_millis(30));
    assert_eq!(
        acq(&mut c, &["DLOCK.ACQUIRE", "k", "o1", "PX", "10000"]),
        Some(t)
    );
    let i2 = must_info(&mut c, "k");
    assert_eq!(i2.holder(b"o1").int("count"), 2);
    assert!(
        i2.holder(b"o1").int("expires_at") > i1.holder(b"o1").int("expires_at"),
        "lease did not restart: {i1:?} -> {i2:?}"
    );
    // Reentry with a longer lease takes the new lease.
    assert_eq!(
        acq(&mut c, &["DLOCK.ACQUIRE", "k", "o1", "PX", LONG]),
        Some(t)
    );
    let i3 = must_info(&mut c, "k");
    assert_eq!(i3.holder(b"o1").int("count"), 3);
    assert!(i3.holder(b"o1").int("ttl") > 10_000, "{i3:?}");
    assert_eq!(i3.token, t);

    // Another owner: nil, with or without WAIT 0, and no trace left.
    for extra in [&[][..], &["WAIT", "0"][..], &["PX", "5"][..]] {
        let mut args = vec!["DLOCK.ACQUIRE", "k", "o2"];
        args.extend_from_slice(extra);
        assert_eq!(acq(&mut c, &args), None, "{args:?}");
    }
    let i4 = must_info(&mut c, "k");
    assert_eq!(i4.without_ttl(), i3.without_ttl());
    assert!(i4.waiters.is_empty());

    // A WAIT that times out answers nil and leaves no waiter behind.
    let start = Instant::now();
    assert_eq!(
        acq(&mut c, &["DLOCK.ACQUIRE", "k", "o2", "WAIT", "50"]),
        None
    );
    assert!(start.elapsed() >= Duration::from_millis(40));
    assert_eq!(must_info(&mut c, "k").without_ttl(), i3.without_ttl());

    // Options are case-insensitive and may come in any order; the command name too.
    let t2 = grant(
        &mut c,
        &["dlock.acquire", "k2", "o1", "wait", "0", "px", "5000"],
    );
    assert!(t2 > t);
    let t3 = grant(
        &mut c,
        &["Dlock.Acquire", "k3", "o1", "Px", "5000", "Wait", "10"],
    );
    assert!(t3 > t2);
}

#[test]
fn px_sets_the_lease_of_every_acquire_command() {
    let s = Server::start();
    let mut c = s.conn();
    let cases: &[(&[&str], &str)] = &[
        (&["DLOCK.ACQUIRE", "m", "o"], "m"),
        (&["DLOCK.RWACQUIRE", "r", "o", "READ"], "r"),
        (&["DLOCK.RWACQUIRE", "w", "o", "WRITE"], "w"),
        (&["DLOCK.FAIRACQUIRE", "f", "o"], "f"),
    ];
    for (base, key) in cases {
        let mut args = base.to_vec();
        args.extend(["PX", "5000"]);
        let before = now_ms();
        let (reply, i) = with_info(&mut c, &args, key);
        let after = now_ms();
        assert!(int(&reply) > 0, "{args:?}");
        let h = i.expect("lock").holders[0].clone();
        let ttl = h.int("ttl");
        let at = h.int("expires_at");
        assert_lease(ttl, 5000, &format!("{args:?}"));
        assert!(
            at >= before + 5000 - 1000 && at <= after + 5000 + 1000,
            "{args:?}: expires_at {at} not near {before}+5000"
        );
    }
    // The largest lease.
    let args = ["DLOCK.ACQUIRE", "max", "o", "PX", "1099511627776"];
    let ttl = ttl_after(&mut c, &args, "max", "o");
    assert_lease(ttl, 1_099_511_627_776, "max");
    // The smallest lease is accepted (and ends at once).
    grant(&mut c, &["DLOCK.ACQUIRE", "min", "o", "PX", "1"]);
}

#[test]
fn default_lease_follows_config_set_and_get() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(config_get(&mut c, "dlock.default-lease-ms"), "30000");
    assert_eq!(config_get(&mut c, "dlock.fair-queue-timeout-ms"), "5000");

    for (base, key) in [
        (&["DLOCK.ACQUIRE", "m", "o"][..], "m"),
        (&["DLOCK.RWACQUIRE", "r", "o", "READ"][..], "r"),
        (&["DLOCK.FAIRACQUIRE", "f", "o"][..], "f"),
    ] {
        let ttl = ttl_after(&mut c, base, key, "o");
        assert_lease(ttl, 30_000, &format!("{base:?}"));
    }

    assert_eq!(
        ok(&mut c, &["CONFIG", "SET", "dlock.default-lease-ms", "1000"]),
        Value::Okay
    );
    assert_eq!(config_get(&mut c, "dlock.default-lease-ms"), "1000");
    for (base, key) in [
        (&["DLOCK.ACQUIRE", "m2", "o"][..], "m2"),
        (&["DLOCK.RWACQUIRE", "r2", "o", "WRITE"][..], "r2"),
        (&["DLOCK.FAIRACQUIRE", "f2", "o"][..], "f2"),
    ] {
        let ttl = ttl_after(&mut c, base, key, "o");
        assert_lease(ttl, 1000, &format!("{base:?}"));
    }
    // RENEW without PX uses the default lease too.
    let ttl = ttl_after(&mut c, &["DLOCK.RENEW", "m", "o"], "m", "o");
    assert_lease(ttl, 1000, "RENEW");

    // Out-of-range and non-numeric values are refused and change nothing.
    for bad in ["0", "-1", "1099511627777", "abc", ""] {
        let e = err(&mut c, &["CONFIG", "SET", "dlock.default-lease-ms", bad]);
        assert_prefix(&e, "ERR");
        let e = err(
            &mut c,
            &["CONFIG", "SET", "dlock.fair-queue-timeout-ms", bad],
        );
        assert_prefix(&e, "ERR");
    }
    assert_eq!(config_get(&mut c, "dlock.default-lease-ms"), "1000");
    assert_eq!(config_get(&mut c, "dlock.fair-queue-timeout-ms"), "5000");
    // The bounds themselves are accepted.
    for good in ["1", "1099511627776", "30000"] {
        ok(&mut c, &["CONFIG", "SET", "dlock.default-lease-ms", good]);
        assert_eq!(config_get(&mut c, "dlock.default-lease-ms"), good);
    }
}

/// The forms that set a config at startup: `--loadmodule <path>
/// default-lease-ms 1234` (module argument without the `dlock.` prefix) and
/// `--dlock.default-lease-ms 1234` (a server argument, as in redis.conf), and
/// the module argument with the prefix, `dlock.default-lease-ms 1234`.
#[test]
fn default_lease_from_module_and_server_arguments() {
    let forms = [
        ServerOpts::new().module_args(["default-lease-ms", "1234"]),
        ServerOpts::new().args(["--dlock.default-lease-ms", "1234"]),
        ServerOpts::new().module_args(["dlock.default-lease-ms", "1234"]),
        ServerOpts::new().module_args([
            "default-lease-ms",
            "1234",
            "fair-queue-timeout-ms",
            "4321",
        ]),
    ];
    for opts in forms {
        let s = Server::start_with(opts.clone());
        let mut c = s.conn();
        assert_eq!(
            config_get(&mut c, "dlock.default-lease-ms"),
            "1234",
            "{opts:?}"
        );
        let ttl = ttl_after(&mut c, &["DLOCK.ACQUIRE", "k", "o"], "k", "o");
        assert_lease(ttl, 1234, &format!("{opts:?}"));
        if opts.module_args.len() == 4 {
            assert_eq!(config_get(&mut c, "dlock.fair-queue-timeout-ms"), "4321");
        }
    }
}

/// README: `dlock.default-lease-ms` has the range 1..2^40, as a module
/// argument too: an out-of-range value, an unknown name or a missing value
/// refuses the load instead of being taken as is.
#[test]

fn module_argument_configs_are_range_checked() {
    let bad_args: [&[&str]; 5] = [
        &["default-lease-ms", "0"],
        &["default-lease-ms", "-5"],
        &["default-lease-ms", "1099511627777"],
        &["foo", "1"],
        &["default-lease-ms"],
    ];
    for bad in bad_args {
        let started = std::panic::catch_unwind(|| {
            Server::start_with(ServerOpts::new().module_args(bad.iter().copied()))
        });
        match started {
            // Refusing to load the module is fine.
            Err(_) => {}
            Ok(s) => {
                let v = config_get(&mut s.conn(), "dlock.default-lease-ms");
                let n: i64 = v.parse().expect("integer config");
                assert!(
                    (1..=1_099_511_627_776).contains(&n),
                    "module arguments {bad:?} gave CONFIG GET {v}"
                );
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Lease expiry
// ---------------------------------------------------------------------------

#[test]
fn a_lease_ends_by_itself() {
    let s = Server::start();
    let mut c = s.conn();
    let before = stats(&mut c);
    grant(&mut c, &["DLOCK.ACQUIRE", "k", "o", "PX", "200"]);
    assert!(exists(&mut c, "k"));
    // Nobody touches the lock: the module's own timer must end it.
    let gone = wait_until(SOON, || !exists(&mut c, "k"));
    assert!(
        gone,
        "lock with PX 200 still exists: {:?}",
        info(&mut c, "k")
    );
    assert_eq!(info(&mut c, "k"), None);
    let d = delta(&before, &stats(&mut c));
    assert_eq!(d.get("dlock_expirations"), Some(&1), "{d:?}");
    assert_eq!(d.get("dlock_locks"), None, "{d:?}");
    // The former holder learns it lost the lock.
    assert_eq!(int(&ok(&mut c, &["DLOCK.RENEW", "k", "o"])), 0);
    assert_prefix(&err(&mut c, &["DLOCK.RELEASE", "k", "o"]), "NOTHELD");
    assert!(
        !exists(&mut c, "k"),
        "RENEW/RELEASE must not create the key"
    );

    // One hold of several ends; the others stay.
    grant(
        &mut c,
        &["DLOCK.RWACQUIRE", "rw", "r1", "READ", "PX", "200"],
    );
    grant(&mut c, &["DLOCK.RWACQUIRE", "rw", "r2", "READ", "PX", LONG]);
    let one_left = wait_until(SOON, || {
        info(&mut c, "rw").is_some_and(|i| i.holders.len() == 1)
    });
    assert!(one_left, "{:?}", info(&mut c, "rw"));
    let i = must_info(&mut c, "rw");
    assert_eq!(i.holders[0].bytes("owner"), b"r2");
    assert_eq!(int(&ok(&mut c, &["DLOCK.RENEW", "rw", "r1"])), 0);
    assert_prefix(
        &err(&mut c, &["DLOCK.RELEASE", "rw", "r1", "READ"]),
        "NOTHELD",
    );
    assert_eq!(must_info(&mut c, "rw").without_ttl(), i.without_ttl());

    // A new owner gets an expired lock, with a greater token.
    let t1 = grant(&mut c, &["DLOCK.FAIRACQUIRE", "f", "a", "PX", "100"]);
    let free = wait_until(SOON, || !exists(&mut c, "f"));
    assert!(free);
    let t2 = grant(&mut c, &["DLOCK.FAIRACQUIRE", "f", "b", "PX", LONG]);
    assert!(t2 > t1);
}

// ---------------------------------------------------------------------------
// DLOCK.RELEASE
// ---------------------------------------------------------------------------

#[test]
fn release_counts_down_and_deletes_the_key_when_free() {
    let s = Server::start();
    let mut c = s.conn();
    for _ in 0..3 {
        grant(&mut c, &["DLOCK.ACQUIRE", "k", "o", "PX", LONG]);
    }
    for left in [2, 1] {
        assert_eq!(int(&ok(&mut c, &["DLOCK.RELEASE", "k", "o"])), 0);
        assert_eq!(must_info(&mut c, "k").holders[0].int("count"), left);
    }
    assert_eq!(int(&ok(&mut c, &["DLOCK.RELEASE", "k", "o"])), 1);
    assert!(!exists(&mut c, "k"));
    assert_eq!(info(&mut c, "k"), None);
    assert_prefix(&err(&mut c, &["DLOCK.RELEASE", "k", "o"]), "NOTHELD");

    // Fair lock.
    grant(&mut c, &["DLOCK.FAIRACQUIRE", "f", "o", "PX", LONG]);
    grant(&mut c, &["DLOCK.FAIRACQUIRE", "f", "o", "PX", LONG]);
    assert_eq!(int(&ok(&mut c, &["DLOCK.RELEASE", "f", "o"])), 0);
    assert_eq!(int(&ok(&mut c, &["DLOCK.RELEASE", "f", "o"])), 1);
    assert!(!exists(&mut c, "f"));

    // rw: an owner holding WRITE and READ must name the mode.
    grant(&mut c, &["DLOCK.RWACQUIRE", "rw", "w", "WRITE", "PX", LONG]);
    grant(&mut c, &["DLOCK.RWACQUIRE", "rw", "w", "READ", "PX", LONG]);
    let both = must_info(&mut c, "rw");
    assert_eq!(both.holders.len(), 2);
    assert_prefix(
        &err(&mut c, &["DLOCK.RELEASE", "rw", "w"]),
        "ERR the owner holds both READ and WRITE on this lock; name the mode to release",
    );
    assert_eq!(must_info(&mut c, "rw").without_ttl(), both.without_ttl());
    // Releasing WRITE answers 1 while the READ hold stays.
    assert_eq!(int(&ok(&mut c, &["DLOCK.RELEASE", "rw", "w", "write"])), 1);
    let i = must_info(&mut c, "rw");
    assert_eq!(i.holders.len(), 1);
    assert_eq!(i.holders[0].text("mode"), "read");
    // Only one mode held now: the mode may be left out.
    assert_eq!(int(&ok(&mut c, &["DLOCK.RELEASE", "rw", "w"])), 1);
    assert!(!exists(&mut c, "rw"));

    // Two readers: releasing one keeps the key.
    grant(&mut c, &["DLOCK.RWACQUIRE", "rw", "r1", "READ", "PX", LONG]);
    grant(&mut c, &["DLOCK.RWACQUIRE", "rw", "r2", "Read", "PX", LONG]);
    assert_eq!(int(&ok(&mut c, &["DLOCK.RELEASE", "rw", "r1", "READ"])), 1);
    assert!(exists(&mut c, "rw"));
    assert_eq!(int(&ok(&mut c, &["DLOCK.RELEASE", "rw", "r2"])), 1);
    assert!(!exists(&mut c, "rw"));
}

#[test]
fn release_by_a_non_holder_is_notheld_and_changes_nothing() {
    let s = Server::start();
    let mut c = s.conn();
    grant(&mut c, &["DLOCK.ACQUIRE", "m", "o", "PX", LONG]);
    grant(&mut c, &["DLOCK.ACQUIRE", "m", "o", "PX", LONG]);
    grant(&mut c, &["DLOCK.RWACQUIRE", "rw", "r1", "READ", "PX", LONG]);
    grant(&mut c, &["DLOCK.FAIRACQUIRE", "f", "f1", "PX", LONG]);
    ok(
        &mut c,
        &["CONFIG", "SET", "dlock.fair-queue-timeout-ms", LONG],
    );
    assert_eq!(acq(&mut c, &["DLOCK.FAIRACQUIRE", "f", "f2"]), None);

    let snap: Vec<LockInfo> = ["m", "rw", "f"]
        .iter()
        .map(|k| must_info(&mut c, k).without_ttl())
        .collect();
    let before = stats(&mut c);
    let cases: &[&[&str]] = &[
        &["DLOCK.RELEASE", "m", "x"],
        &["DLOCK.RELEASE", "m", "O"],
        &["DLOCK.RELEASE", "rw", "r2"],
        &["DLOCK.RELEASE", "rw", "r2", "READ"],
        &["DLOCK.RELEASE", "rw", "r1", "WRITE"],
        &["DLOCK.RELEASE", "f", "f2"], // queued, not a holder
        &["DLOCK.RELEASE", "f", "x"],
        &["DLOCK.RELEASE", "missing", "o"],
    ];
    for args in cases {
        let e = err(&mut c, args);
        assert_eq!(
            e,
            "NOTHELD the owner does not hold this lock (never acquired, lease expired, or force-released)",
            "{args:?}"
        );
    }
    let now: Vec<LockInfo> = ["m", "rw", "f"]
        .iter()
        .map(|k| must_info(&mut c, k).without_ttl())
        .collect();
    assert_eq!(now, snap);
    assert!(!exists(&mut c, "missing"));
    assert_eq!(int(&ok(&mut c, &["DBSIZE"])), 3);
    let d = delta(&before, &stats(&mut c));
    assert!(d.is_empty(), "a refused RELEASE moved counters: {d:?}");
}

// ---------------------------------------------------------------------------
// DLOCK.RENEW
// ---------------------------------------------------------------------------

#[test]
fn renew_restarts_the_lease_of_a_holder_only() {
    let s = Server::start();
    let mut c = s.conn();
    ok(
        &mut c,
        &["CONFIG", "SET", "dlock.fair-queue-timeout-ms", LONG],
    );
    grant(&mut c, &["DLOCK.ACQUIRE", "k", "o", "PX", "60000"]);
    let i1 = must_info(&mut c, "k");
    thread::sleep(Duration::from_millis(30));
    assert_eq!(
        int(&ok(&mut c, &["DLOCK.RENEW", "k", "o", "PX", "60000"])),
        1
    );
    let i2 = must_info(&mut c, "k");
    assert!(
        i2.holders[0].int("expires_at") > i1.holders[0].int("expires_at"),
        "{i1:?} -> {i2:?}"
    );
    // PX is honoured, also a longer one; the count and token do not change.
    let ttl = ttl_after(&mut c, &["DLOCK.RENEW", "k", "o", "px", LONG], "k", "o");
    assert_lease(ttl, 600_000, "RENEW PX");
    let i3 = must_info(&mut c, "k");
    assert_eq!(i3.holders[0].int("count"), 1);
    assert_eq!(i3.token, i1.token);
    assert_eq!(i3.holders[0].int("token"), i1.token);
    // Without PX: the default lease (30000).
    let ttl = ttl_after(&mut c, &["DLOCK.RENEW", "k", "o"], "k", "o");
    assert_lease(ttl, 30_000, "RENEW");

    // Non-holder and missing key: 0, nothing changes, no key created.
    let snap = must_info(&mut c, "k").without_ttl();
    assert_eq!(int(&ok(&mut c, &["DLOCK.RENEW", "k", "x"])), 0);
    assert_eq!(int(&ok(&mut c, &["DLOCK.RENEW", "k", "x", "PX", LONG])), 0);
    assert_eq!(must_info(&mut c, "k").without_ttl(), snap);
    assert_eq!(int(&ok(&mut c, &["DLOCK.RENEW", "missing", "o"])), 0);
    assert!(!exists(&mut c, "missing"));

    // rw: every hold of the owner is renewed.
    grant(
        &mut c,
        &["DLOCK.RWACQUIRE", "rw", "w", "WRITE", "PX", "60000"],
    );
    grant(
        &mut c,
        &["DLOCK.RWACQUIRE", "rw", "w", "READ", "PX", "60000"],
    );
    let (reply, i) = with_info(&mut c, &["DLOCK.RENEW", "rw", "w", "PX", LONG], "rw");
    assert_eq!(reply, Value::Int(1));
    let i = i.expect("lock");
    assert_eq!(i.holders.len(), 2);
    for h in &i.holders {
        assert_lease(h.int("ttl"), 600_000, "RENEW of WRITE and READ");
    }

    // A queued fair-lock owner holds nothing: 0, and it keeps its place.
    grant(&mut c, &["DLOCK.FAIRACQUIRE", "f", "f1", "PX", LONG]);
    assert_eq!(acq(&mut c, &["DLOCK.FAIRACQUIRE", "f", "f2"]), None);
    let snap = must_info(&mut c, "f").without_ttl();
    assert_eq!(int(&ok(&mut c, &["DLOCK.RENEW", "f", "f2", "PX", LONG])), 0);
    assert_eq!(must_info(&mut c, "f").without_ttl(), snap);
}

// ---------------------------------------------------------------------------
// DLOCK.INFO
// ---------------------------------------------------------------------------

const TOP_FIELDS: [&str; 4] = ["kind", "token", "holders", "waiters"];
const HOLDER_FIELDS: [&str; 7] = [
    "owner",
    "mode",
    "count",
    "token",
    "ttl",
    "expires_at",
    "held_ms",
];
const WAITER_FIELDS: [&str; 9] = [
    "owner",
    "mode",
    "state",
    "ttl",
    "expires_at",
    "waited_ms",
    "position",
    "blocked_by",
    "blocked_by_count",
];

#[test]
fn info_reports_every_field() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(ok(&mut c, &["DLOCK.INFO", "missing"]), Value::Nil);

    // Mutex.
    let before = now_ms();
    let t = grant(&mut c, &["DLOCK.ACQUIRE", "m", "o", "PX", "60000"]);
    grant(&mut c, &["DLOCK.ACQUIRE", "m", "o", "PX", "60000"]);
    let after = now_ms();
    let i = must_info(&mut c, "m");
    assert_eq!(i.fields, TOP_FIELDS);
    assert_eq!(i.kind, "mutex");
    assert_eq!(i.token, t);
    assert!(i.waiters.is_empty());
    assert_eq!(i.holders.len(), 1);
    let h = &i.holders[0];
    assert_eq!(h.names(), HOLDER_FIELDS);
    assert_eq!(h.bytes("owner"), b"o");
    assert_eq!(h.text("mode"), "exclusive");
    assert_eq!(h.int("count"), 2);
    assert_eq!(h.int("token"), t);
    let ttl = h.int("ttl");
    assert!(ttl > 0 && ttl <= 60_000, "ttl {ttl}");
    let at = h.int("expires_at");
    assert!(
        at >= before + 60_000 - 1000 && at <= after + 60_000 + 1000,
        "expires_at {at}"
    );

    // rw: two readers, then a writer waiting on the server.
    let r1 = grant(&mut c, &["DLOCK.RWACQUIRE", "rw", "r1", "READ", "PX", LONG]);
    let r2 = grant(&mut c, &["DLOCK.RWACQUIRE", "rw", "r2", "READ", "PX", LONG]);
    assert!(r2 > r1);
    let writer = spawn_cmd(
        &s,
        &["DLOCK.RWACQUIRE", "rw", "w", "WRITE", "WAIT", "30000"],
    );
    wait_waiters(&mut c, "rw", 1);
    let i = must_info(&mut c, "rw");
    assert_eq!(i.fields, TOP_FIELDS);
    assert_eq!(i.kind, "rw");
    assert_eq!(i.token, r2);
    assert_eq!(i.holders.len(), 2);
    for (h, owner, token) in [(&i.holders[0], b"r1", r1), (&i.holders[1], b"r2", r2)] {
        assert_eq!(h.names(), HOLDER_FIELDS);
        assert_eq!(h.bytes("owner"), owner);
        assert_eq!(h.text("mode"), "read");
        assert_eq!(h.int("count"), 1);
        assert_eq!(h.int("token"), token);
    }
    let w = &i.waiters[0];
    assert_eq!(w.names(), WAITER_FIELDS);
    assert_eq!(w.bytes("owner"), b"w");
    assert_eq!(w.text("mode"), "write");
    assert_eq!(w.text("state"), "blocked");
    let ttl = w.int("ttl");
    assert!(ttl > 0 && ttl <= 30_000, "waiter ttl {ttl}");
    let at = w.int("expires_at");
    assert!((at - now_ms() - ttl).abs() < 2000, "waiter expires_at {at}");
    // Writer preference: a new reader is refused and leaves no trace.
    assert_eq!(acq(&mut c, &["DLOCK.RWACQUIRE", "rw", "r3", "READ"]), None);
    assert_eq!(must_info(&mut c, "rw").without_ttl(), i.without_ttl());
    // The readers leave: the writer gets the lock.
    ok(&mut c, &["DLOCK.RELEASE", "rw", "r1"]);
    ok(&mut c, &["DLOCK.RELEASE", "rw", "r2"]);
    let wt = int(&writer.join().expect("writer thread").expect("writer reply"));
    assert!(wt > r2);
    let i = must_info(&mut c, "rw");
    assert!(i.waiters.is_empty());
    assert_eq!(i.holders.len(), 1);
    assert_eq!(i.holders[0].text("mode"), "write");
    assert_eq!(i.holders[0].int("token"), wt);
    assert_eq!(i.token, wt);

    // Fair: a polling owner keeps a queued place.
    let f1 = grant(&mut c, &["DLOCK.FAIRACQUIRE", "f", "f1", "PX", LONG]);
    let (reply, i) = with_info(&mut c, &["DLOCK.FAIRACQUIRE", "f", "f2"], "f");
    assert_eq!(reply, Value::Nil);
    let i = i.expect("lock");
    assert_eq!(i.kind, "fair");
    assert_eq!(i.token, f1);
    assert_eq!(i.holders[0].text("mode"), "exclusive");
    assert_eq!(i.waiters.len(), 1);
    let w = &i.waiters[0];
    assert_eq!(w.names(), WAITER_FIELDS);
    assert_eq!(w.bytes("owner"), b"f2");
    assert_eq!(w.text("mode"), "exclusive");
    assert_eq!(w.text("state"), "queued");
    let ttl = w.int("ttl");
    assert_lease(ttl, 5000, "queued place");
}

#[test]
fn info_returns_binary_owners_exactly() {
    let s = Server::start();
    let mut c = s.conn();
    let all_bytes: Vec<u8> = (0..512).map(|i| (i % 256) as u8).collect();
    let owners: Vec<Vec<u8>> = vec![
        b"a\0b".to_vec(),
        b"\r\n".to_vec(),
        b"\0".to_vec(),
        b"\xff\xfe\x00\r\n$3\r\n*".to_vec(),
        b"-ERR not an error\r\n".to_vec(),
        all_bytes,
    ];
    let key: &[u8] = b"bin\0key\r\n";
    for o in &owners {
        acq_raw(
            &mut c,
            &[b"DLOCK.RWACQUIRE", key, o, b"READ", b"PX", b"600000"],
        )
        .expect("granted");
    }
    let i = info_raw(&mut c, key).expect("lock");
    let got: Vec<Vec<u8>> = i.holders.iter().map(|h| h.bytes("owner")).collect();
    assert_eq!(got, owners);

    // The exact bytes are the identity: a near miss is another owner.
    let m: &[u8] = b"m\0";
    acq_raw(&mut c, &[b"DLOCK.ACQUIRE", m, b"a\0b", b"PX", b"600000"]).expect("granted");
    assert_eq!(
        acq_raw(&mut c, &[b"DLOCK.ACQUIRE", m, b"a\0c"]),
        None,
        "a\\0c is not a\\0b"
    );
    assert_eq!(acq_raw(&mut c, &[b"DLOCK.ACQUIRE", m, b"a"]), None);
    assert_prefix(&err_raw(&mut c, &[b"DLOCK.RELEASE", m, b"a"]), "NOTHELD");
    assert_eq!(int(&ok_raw(&mut c, &[b"DLOCK.RENEW", m, b"a\0b"])), 1);
    assert_eq!(int(&ok_raw(&mut c, &[b"DLOCK.RELEASE", m, b"a\0b"])), 1);
    assert_eq!(int(&ok_raw(&mut c, &[b"EXISTS", m])), 0);
}

#[test]
fn info_is_a_map_in_resp3() {
    let s = Server::start();
    let mut c = s.conn();
    ok(
        &mut c,
        &["CONFIG", "SET", "dlock.fair-queue-timeout-ms", LONG],
    );
    let hello = ok(&mut c, &["HELLO", "3"]);
    assert!(matches!(hello, Value::Map(_)), "HELLO 3: {hello:?}");

    let t = grant(&mut c, &["DLOCK.FAIRACQUIRE", "k", "o", "PX", LONG]);
    assert_eq!(acq(&mut c, &["DLOCK.FAIRACQUIRE", "k", "q"]), None);
    let v = ok(&mut c, &["DLOCK.INFO", "k"]);
    let Value::Map(top) = &v else {
        panic!("DLOCK.INFO in RESP3 is not a map: {v:?}")
    };
    assert_eq!(top.len(), 4);
    for (field, entries) in top {
        if matches!(text(field).as_str(), "holders" | "waiters") {
            let Value::Array(items) = entries else {
                panic!("{field:?} is not an array: {entries:?}")
            };
            assert_eq!(items.len(), 1);
            assert!(matches!(items[0], Value::Map(_)), "{items:?}");
        }
    }
    let i = LockInfo::parse(&v).expect("lock");
    assert_eq!(i.fields, TOP_FIELDS);
    assert_eq!(i.kind, "fair");
    assert_eq!(i.token, t);
    assert_eq!(i.holders[0].names(), HOLDER_FIELDS);
    assert_eq!(i.holders[0].bytes("owner"), b"o");
    assert_eq!(i.waiters[0].names(), WAITER_FIELDS);
    assert_eq!(i.waiters[0].text("state"), "queued");
    assert_eq!(ok(&mut c, &["DLOCK.INFO", "missing"]), Value::Nil);
    // The other replies keep their types in RESP3.
    assert_eq!(
        acq(&mut c, &["DLOCK.ACQUIRE", "m", "o"]).map(|t| t > 0),
        Some(true)
    );
    assert_eq!(int(&ok(&mut c, &["DLOCK.RELEASE", "m", "o"])), 1);
}

// ---------------------------------------------------------------------------
// DLOCK.FORCERELEASE
// ---------------------------------------------------------------------------

#[test]
fn forcerelease_removes_a_lock_whatever_its_holders() {
    let s = Server::start();
    let mut c = s.conn();
    ok(
        &mut c,
        &["CONFIG", "SET", "dlock.fair-queue-timeout-ms", LONG],
    );
    assert_eq!(int(&ok(&mut c, &["DLOCK.FORCERELEASE", "missing"])), 0);
    assert!(!exists(&mut c, "missing"));

    let t1 = grant(&mut c, &["DLOCK.ACQUIRE", "k", "o", "PX", LONG]);
    grant(&mut c, &["DLOCK.ACQUIRE", "k", "o", "PX", LONG]);
    assert_eq!(int(&ok(&mut c, &["DLOCK.FORCERELEASE", "k"])), 1);
    assert!(!exists(&mut c, "k"));
    assert_eq!(info(&mut c, "k"), None);
    assert_eq!(int(&ok(&mut c, &["DLOCK.RENEW", "k", "o"])), 0);
    assert_prefix(&err(&mut c, &["DLOCK.RELEASE", "k", "o"]), "NOTHELD");
    let t2 = grant(&mut c, &["DLOCK.ACQUIRE", "k", "other", "PX", LONG]);
    assert!(t2 > t1);
    assert_eq!(int(&ok(&mut c, &["DLOCK.FORCERELEASE", "k"])), 1);
    assert_eq!(int(&ok(&mut c, &["DLOCK.FORCERELEASE", "k"])), 0);

    // rw with several readers.
    grant(&mut c, &["DLOCK.RWACQUIRE", "rw", "r1", "READ", "PX", LONG]);
    grant(&mut c, &["DLOCK.RWACQUIRE", "rw", "r2", "READ", "PX", LONG]);
    assert_eq!(int(&ok(&mut c, &["DLOCK.FORCERELEASE", "rw"])), 1);
    assert!(!exists(&mut c, "rw"));

    // A waiter on the server is served at once.
    grant(&mut c, &["DLOCK.ACQUIRE", "b", "o", "PX", LONG]);
    let waiter = spawn_cmd(&s, &["DLOCK.ACQUIRE", "b", "w", "WAIT", "30000"]);
    wait_waiters(&mut c, "b", 1);
    assert_eq!(int(&ok(&mut c, &["DLOCK.FORCERELEASE", "b"])), 1);
    let wt = int(&waiter.join().expect("thread").expect("reply"));
    let i = must_info(&mut c, "b");
    assert_eq!(i.holders[0].bytes("owner"), b"w");
    assert_eq!(i.holders[0].int("token"), wt);

    // Fair: queued owners keep their places.
    grant(&mut c, &["DLOCK.FAIRACQUIRE", "f", "f1", "PX", LONG]);
    assert_eq!(acq(&mut c, &["DLOCK.FAIRACQUIRE", "f", "f2"]), None);
    assert_eq!(int(&ok(&mut c, &["DLOCK.FORCERELEASE", "f"])), 1);
    assert_eq!(acq(&mut c, &["DLOCK.FAIRACQUIRE", "f", "f3"]), None);
    assert!(acq(&mut c, &["DLOCK.FAIRACQUIRE", "f", "f2"]).is_some());
}

/// A lease that ended before FORCERELEASE, the expiry timer not yet run
/// (inside one EXEC it cannot), ends as a lease end: counted in
/// `dlock_expirations` and published `expired`, like every other command
/// that finds it over; FORCERELEASE still removes the lock (replies 1).
#[test]
fn forcerelease_counts_a_lease_that_ended_before_it() {
    let s = Server::start();
    let mut c = s.conn();
    let mut sub = Subscriber::new(&s, b"dlock:{k}");
    grant(&mut c, &["DLOCK.ACQUIRE", "k", "o", "PX", "100"]);
    let before = stats(&mut c);
    assert_eq!(ok(&mut c, &["MULTI"]), Value::Okay);
    for args in [&["DEBUG", "SLEEP", "0.3"][..], &["DLOCK.FORCERELEASE", "k"]] {
        assert_eq!(ok(&mut c, args), Value::SimpleString("QUEUED".into()));
    }
    let Value::Array(r) = ok(&mut c, &["EXEC"]) else {
        panic!("EXEC")
    };
    assert_eq!(r[1], Value::Int(1), "FORCERELEASE of a stored lock");
    assert!(!exists(&mut c, "k"));
    let d = delta(&before, &stats(&mut c));
    assert_eq!(
        d,
        changes(&[("force_releases", 1), ("expirations", 1), ("locks", -1)])
    );
    let (_, msg) = sub.expect_message(SOON);
    assert_eq!(msg, b"expired");
    sub.expect_none(Duration::from_millis(200));
}

// ---------------------------------------------------------------------------
// Fencing tokens
// ---------------------------------------------------------------------------

#[test]
fn fencing_tokens_strictly_increase() {
    let s = Server::start();
    let mut c = s.conn();
    let mut last = 0i64;
    let mut check = |t: i64, what: &str| {
        assert!(t > last, "{what}: token {t} not above {last}");
        last = t;
    };
    let start_us = now_us();

    // Tokens are at least the grant's unix time in microseconds.
    let t0 = grant(&mut c, &["DLOCK.ACQUIRE", "k0", "o", "PX", LONG]);
    assert!(t0 >= start_us - 1_000_000, "token {t0} < {start_us} µs");
    check(t0, "first");

    // Acquire / release cycles on one key, alternating owners.
    for i in 0..20 {
        let owner = if i % 2 == 0 { "a" } else { "b" };
        let t = grant(&mut c, &["DLOCK.ACQUIRE", "k", owner, "PX", LONG]);
        check(t, "cycle");
        // A reentrant grant returns the current token.
        assert_eq!(acq(&mut c, &["DLOCK.ACQUIRE", "k", owner]), Some(t));
        ok(&mut c, &["DLOCK.RELEASE", "k", owner]);
        ok(&mut c, &["DLOCK.RELEASE", "k", owner]);
    }

    // Deletion of the key, then a new lock on it.
    check(
        grant(&mut c, &["DLOCK.ACQUIRE", "k", "a", "PX", LONG]),
        "before DEL",
    );
    assert_eq!(int(&ok(&mut c, &["DEL", "k"])), 1);
    check(
        grant(&mut c, &["DLOCK.ACQUIRE", "k", "b", "PX", LONG]),
        "after DEL",
    );
    ok(&mut c, &["UNLINK", "k"]);
    check(
        grant(&mut c, &["DLOCK.ACQUIRE", "k", "a", "PX", LONG]),
        "after UNLINK",
    );
    ok(&mut c, &["FLUSHALL"]);
    check(
        grant(&mut c, &["DLOCK.ACQUIRE", "k", "a", "PX", LONG]),
        "after FLUSHALL",
    );
    ok(&mut c, &["DLOCK.FORCERELEASE", "k"]);
    check(
        grant(&mut c, &["DLOCK.ACQUIRE", "k", "a", "PX", LONG]),
        "after FORCE",
    );

    // Different keys and kinds, interleaved.
    for i in 0..10 {
        let m = format!("m{i}");
        let r = format!("r{i}");
        let f = format!("f{i}");
        check(
            grant(&mut c, &["DLOCK.ACQUIRE", &m, "o", "PX", LONG]),
            "mutex",
        );
        check(
            grant(&mut c, &["DLOCK.RWACQUIRE", &r, "o", "READ", "PX", LONG]),
            "read",
        );
        // A second reader is a new hold: a new, greater token.
        check(
            grant(&mut c, &["DLOCK.RWACQUIRE", &r, "p", "READ", "PX", LONG]),
            "second reader",
        );
        check(
            grant(&mut c, &["DLOCK.FAIRACQUIRE", &f, "o", "PX", LONG]),
            "fair",
        );
    }
    // An upgrade is a new hold too.
    check(
        grant(&mut c, &["DLOCK.RWACQUIRE", "up", "o", "READ", "PX", LONG]),
        "read",
    );
    check(
        grant(&mut c, &["DLOCK.RWACQUIRE", "up", "o", "WRITE", "PX", LONG]),
        "upgrade",
    );
    // The lease ended: the next hold gets a greater token.
    let t = grant(&mut c, &["DLOCK.ACQUIRE", "exp", "o", "PX", "50"]);
    check(t, "short lease");
    assert!(wait_until(SOON, || !exists(&mut c, "exp")));
    check(
        grant(&mut c, &["DLOCK.ACQUIRE", "exp", "o", "PX", LONG]),
        "after expiry",
    );
}

// ---------------------------------------------------------------------------
// WRONGTYPE and WRONGKIND
// ---------------------------------------------------------------------------

#[test]
fn every_command_refuses_a_key_of_another_type() {
    // apply-from-clients: DLOCK.APPLY's WRONGTYPE check is reached only when
    // a client may send it at all.
    let s = Server::start_with(ServerOpts::new().module_args(["apply-from-clients", "yes"]));
    let mut c = s.conn();
    ok(&mut c, &["SET", "str", "v"]);
    ok(&mut c, &["RPUSH", "list", "x"]);
    for key in ["str", "list"] {
        let cases: &[&[&str]] = &[
            &["DLOCK.ACQUIRE", key, "o"],
            &["DLOCK.ACQUIRE", key, "o", "PX", "1000", "WAIT", "10000"],
            &["DLOCK.RWACQUIRE", key, "o", "READ"],
            &["DLOCK.RWACQUIRE", key, "o", "WRITE", "WAIT", "10000"],
            &["DLOCK.FAIRACQUIRE", key, "o"],
            &["DLOCK.FAIRACQUIRE", key, "o", "WAIT", "10000"],
            &["DLOCK.RELEASE", key, "o"],
            &["DLOCK.RELEASE", key, "o", "READ"],
            &["DLOCK.RENEW", key, "o"],
            &["DLOCK.RENEW", key, "o", "PX", "1000"],
            &["DLOCK.INFO", key],
            &["DLOCK.FORCERELEASE", key],
            &["DLOCK.APPLY", key, ""],
        ];
        for args in cases {
            let start = Instant::now();
            let e = err(&mut c, args);
            assert_eq!(
                e, "WRONGTYPE Operation against a key holding the wrong kind of value",
                "{args:?}"
            );
            assert!(start.elapsed() < Duration::from_secs(5), "{args:?} waited");
        }
    }
    assert_eq!(text(&ok(&mut c, &["GET", "str"])), "v");
    assert_eq!(int(&ok(&mut c, &["LLEN", "list"])), 1);
    assert_eq!(int(&ok(&mut c, &["DBSIZE"])), 2);
}

#[test]
fn a_lock_of_another_kind_is_refused_naming_the_kind_found() {
    let s = Server::start();
    let mut c = s.conn();
    grant(&mut c, &["DLOCK.ACQUIRE", "m", "o", "PX", LONG]);
    grant(&mut c, &["DLOCK.RWACQUIRE", "rw", "o", "READ", "PX", LONG]);
    grant(&mut c, &["DLOCK.FAIRACQUIRE", "f", "o", "PX", LONG]);
    let snap: Vec<LockInfo> = ["m", "rw", "f"]
        .iter()
        .map(|k| must_info(&mut c, k).without_ttl())
        .collect();
    let cases: &[(&[&str], &str)] = &[
        (&["DLOCK.ACQUIRE", "rw", "o"], "rw"),
        (&["DLOCK.ACQUIRE", "rw", "x", "WAIT", "10000"], "rw"),
        (&["DLOCK.ACQUIRE", "f", "o"], "fair"),
        (&["DLOCK.ACQUIRE", "f", "x", "WAIT", "10000"], "fair"),
        (&["DLOCK.RWACQUIRE", "m", "o", "READ"], "mutex"),
        (
            &["DLOCK.RWACQUIRE", "m", "x", "WRITE", "WAIT", "10000"],
            "mutex",
        ),
        (&["DLOCK.RWACQUIRE", "f", "o", "WRITE"], "fair"),
        (&["DLOCK.FAIRACQUIRE", "m", "o"], "mutex"),
        (&["DLOCK.FAIRACQUIRE", "m", "x", "WAIT", "10000"], "mutex"),
        (&["DLOCK.FAIRACQUIRE", "rw", "o"], "rw"),
    ];
    for (args, kind) in cases {
        let start = Instant::now();
        let e = err(&mut c, args);
        assert_prefix(&e, "WRONGKIND");
        assert!(
            e.contains(&format!(" {kind} lock")),
            "{args:?}: {e:?} does not name the kind {kind}"
        );
        assert!(start.elapsed() < Duration::from_secs(5), "{args:?} waited");
    }
    assert_eq!(
        err(&mut c, &["DLOCK.ACQUIRE", "rw", "o"]),
        "WRONGKIND the key holds an rw lock; use DLOCK.RWACQUIRE, RELEASE and RENEW on it"
    );
    let now: Vec<LockInfo> = ["m", "rw", "f"]
        .iter()
        .map(|k| must_info(&mut c, k).without_ttl())
        .collect();
    assert_eq!(now, snap);
}

// ---------------------------------------------------------------------------
// WAIT inside MULTI/EXEC and scripts
// ---------------------------------------------------------------------------

#[test]
fn wait_acts_as_zero_inside_multi_and_scripts() {
    let s = Server::start();
    let mut c = s.conn();
    ok(
        &mut c,
        &["CONFIG", "SET", "dlock.fair-queue-timeout-ms", LONG],
    );
    grant(&mut c, &["DLOCK.ACQUIRE", "m", "o", "PX", LONG]);
    grant(&mut c, &["DLOCK.RWACQUIRE", "rw", "o", "WRITE", "PX", LONG]);
    grant(&mut c, &["DLOCK.FAIRACQUIRE", "f", "o", "PX", LONG]);
    let before = stats(&mut c);

    let start = Instant::now();
    assert_eq!(ok(&mut c, &["MULTI"]), Value::Okay);
    for args in [
        &["DLOCK.ACQUIRE", "m", "x", "WAIT", "60000"][..],
        &["DLOCK.RWACQUIRE", "rw", "x", "READ", "WAIT", "60000"][..],
        &["DLOCK.FAIRACQUIRE", "f", "x", "WAIT", "60000"][..],
        &["DLOCK.ACQUIRE", "free", "x", "WAIT", "60000"][..],
    ] {
        assert_eq!(text(&ok(&mut c, args)), "QUEUED");
    }
    let exec = ok(&mut c, &["EXEC"]);
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "EXEC took {:?}",
        start.elapsed()
    );
    let Value::Array(replies) = exec else {
        panic!("EXEC: {exec:?}")
    };
    assert_eq!(replies[..3], [Value::Nil, Value::Nil, Value::Nil]);
    assert!(
        int(&replies[3]) > 0,
        "free lock granted in MULTI: {replies:?}"
    );

    // Nobody waits on the server; the fair lock keeps x as a queued place.
    assert!(must_info(&mut c, "m").waiters.is_empty());
    assert!(must_info(&mut c, "rw").waiters.is_empty());
    let fw = must_info(&mut c, "f").waiters;
    assert_eq!(fw.len(), 1);
    assert_eq!(fw[0].text("state"), "queued");
    let d = delta(&before, &stats(&mut c));
    assert_eq!(d.get("dlock_waits_begun"), None, "{d:?}");

    // Scripts.
    let script = "return redis.call('DLOCK.ACQUIRE', KEYS[1], ARGV[1], 'WAIT', '60000')";
    let start = Instant::now();
    assert_eq!(ok(&mut c, &["EVAL", script, "1", "m", "x"]), Value::Nil);
    assert!(start.elapsed() < Duration::from_secs(20));
    assert!(must_info(&mut c, "m").waiters.is_empty());
    let t = int(&ok(&mut c, &["EVAL", script, "1", "free2", "x"]));
    assert!(t > 0);
    let rw_script =
        "return redis.call('DLOCK.RWACQUIRE', KEYS[1], ARGV[1], 'WRITE', 'WAIT', '60000')";
    let start = Instant::now();
    assert_eq!(ok(&mut c, &["EVAL", rw_script, "1", "rw", "x"]), Value::Nil);
    assert!(start.elapsed() < Duration::from_secs(20));
    assert!(must_info(&mut c, "rw").waiters.is_empty());
}

// ---------------------------------------------------------------------------
// OOM
// ---------------------------------------------------------------------------

#[test]
fn acquires_are_refused_under_oom_but_locks_can_be_let_go() {
    let s = Server::start();
    let mut c = s.conn();
    grant(&mut c, &["DLOCK.ACQUIRE", "m", "o", "PX", LONG]);
    grant(&mut c, &["DLOCK.ACQUIRE", "m2", "o", "PX", LONG]);
    grant(&mut c, &["DLOCK.RWACQUIRE", "rw", "r", "READ", "PX", LONG]);
    grant(&mut c, &["DLOCK.FAIRACQUIRE", "f", "o", "PX", LONG]);
    let snap: Vec<LockInfo> = ["m", "m2", "rw", "f"]
        .iter()
        .map(|k| must_info(&mut c, k).without_ttl())
        .collect();

    ok(&mut c, &["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
    ok(&mut c, &["CONFIG", "SET", "maxmemory", "1"]);
    let refused: &[&[&str]] = &[
        &["DLOCK.ACQUIRE", "new", "o"],
        &["DLOCK.ACQUIRE", "m", "o"], // reentrant
        &["DLOCK.ACQUIRE", "m", "x", "WAIT", "10000"],
        &["DLOCK.RWACQUIRE", "rw", "r", "READ"],
        &["DLOCK.RWACQUIRE", "rw", "r2", "READ"],
        &["DLOCK.RWACQUIRE", "new", "o", "WRITE"],
        &["DLOCK.FAIRACQUIRE", "f", "o"],
        &["DLOCK.FAIRACQUIRE", "f", "x"],
        &["DLOCK.FAIRACQUIRE", "new", "o"],
    ];
    for args in refused {
        assert_prefix(&err(&mut c, args), "OOM");
    }
    let now: Vec<LockInfo> = ["m", "m2", "rw", "f"]
        .iter()
        .map(|k| must_info(&mut c, k).without_ttl())
        .collect();
    assert_eq!(now, snap, "a refused acquire changed a lock");
    assert!(!exists(&mut c, "new"));

    // Letting go always works.
    assert_eq!(int(&ok(&mut c, &["DLOCK.RENEW", "m", "o", "PX", LONG])), 1);
    assert_eq!(int(&ok(&mut c, &["DLOCK.RENEW", "m", "x"])), 0);
    assert_prefix(&err(&mut c, &["DLOCK.RELEASE", "m", "x"]), "NOTHELD");
    assert_eq!(int(&ok(&mut c, &["DLOCK.RELEASE", "m", "o"])), 1);
    assert_eq!(int(&ok(&mut c, &["DLOCK.RELEASE", "rw", "r", "READ"])), 1);
    assert_eq!(int(&ok(&mut c, &["DLOCK.FORCERELEASE", "f"])), 1);
    assert_eq!(int(&ok(&mut c, &["DLOCK.FORCERELEASE", "m2"])), 1);
    assert_eq!(ok(&mut c, &["DLOCK.INFO", "m"]), Value::Nil);
    assert_eq!(int(&ok(&mut c, &["DBSIZE"])), 0);

    ok(&mut c, &["CONFIG", "SET", "maxmemory", "0"]);
    grant(&mut c, &["DLOCK.ACQUIRE", "m", "o"]);
}

// ---------------------------------------------------------------------------
// Command introspection
// ---------------------------------------------------------------------------

/// Every string in a reply tree.
fn strings(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::BulkString(_) | Value::SimpleString(_) | Value::VerbatimString { .. } => {
            out.push(text(v))
        }
        Value::Array(items) | Value::Set(items) => items.iter().for_each(|i| strings(i, out)),
        Value::Map(m) => m.iter().for_each(|(k, v)| {
            strings(k, out);
            strings(v, out);
        }),
        _ => {}
    }
}

#[test]
fn commands_declare_their_key_arity_flags_and_docs() {
    let s = Server::start();
    let mut c = s.conn();
    // (name, arity, a flag it must have, a flag it must not have, args for GETKEYS)
    let cmds: &[(&str, i64, &str, &str, &[&str])] = &[
        ("DLOCK.ACQUIRE", -3, "denyoom", "readonly", &["o"]),
        ("DLOCK.RWACQUIRE", -3, "denyoom", "readonly", &["o", "READ"]),
        ("DLOCK.FAIRACQUIRE", -3, "denyoom", "readonly", &["o"]),
        ("DLOCK.RELEASE", -3, "write", "denyoom", &["o"]),
        ("DLOCK.CANCEL", 3, "write", "denyoom", &["o"]),
        ("DLOCK.RENEW", -3, "write", "denyoom", &["o", "PX", "10"]),
        ("DLOCK.INFO", 2, "readonly", "write", &[]),
        ("DLOCK.FORCERELEASE", 2, "write", "denyoom", &[]),
        ("DLOCK.APPLY", 3, "write", "readonly", &["payload"]),
        (
            "DLOCK.SEMACQUIRE",
            -5,
            "denyoom",
            "readonly",
            &["o", "LIMIT", "2"],
        ),
        ("DLOCK.LATCHSET", 3, "denyoom", "readonly", &["2"]),
        ("DLOCK.COUNTDOWN", 2, "write", "denyoom", &[]),
        ("DLOCK.AWAIT", -2, "write", "denyoom", &["WAIT", "10"]),
        ("DLOCK.CHECK", 3, "readonly", "write", &["5"]),
        ("DLOCK.FENCED", -4, "write", "denyoom", &["5", "PING"]),
    ];
    for (name, arity, has, lacks, rest) in cmds {
        for n in [name.to_string(), name.to_lowercase()] {
            let v = ok(&mut c, &["COMMAND", "INFO", &n]);
            let Value::Array(outer) = &v else {
                panic!("COMMAND INFO {n}: {v:?}")
            };
            let Value::Array(ci) = &outer[0] else {
                panic!("COMMAND INFO {n}: {v:?}")
            };
            assert!(text(&ci[0]).eq_ignore_ascii_case(name), "{ci:?}");
            assert_eq!(int(&ci[1]), *arity, "{name} arity");
            let mut flags = Vec::new();
            strings(&ci[2], &mut flags);
            assert!(flags.iter().any(|f| f == has), "{name} flags {flags:?}");
            assert!(!flags.iter().any(|f| f == lacks), "{name} flags {flags:?}");
            if *has == "denyoom" {
                assert!(flags.iter().any(|f| f == "write"), "{name} {flags:?}");
            }
            assert_eq!(
                (int(&ci[3]), int(&ci[4]), int(&ci[5])),
                (1, 1, 1),
                "{name} first/last/step key"
            );
            // The key specs name argument 1 as the one key.
            let mut specs = Vec::new();
            strings(&ci[8], &mut specs);
            assert!(specs.iter().any(|s| s == "index"), "{name}: {specs:?}");
        }
        for key in ["k", "{user1}:lock", "a b"] {
            let mut args = vec!["COMMAND", "GETKEYS", name, key];
            args.extend_from_slice(rest);
            let v = ok(&mut c, &args);
            assert_eq!(
                v,
                Value::Array(vec![Value::BulkString(key.into())]),
                "{args:?}"
            );
        }
        let docs = ok(&mut c, &["COMMAND", "DOCS", &name.to_lowercase()]);
        let mut words = Vec::new();
        strings(&docs, &mut words);
        assert!(words.iter().any(|w| w == "summary"), "{name}: {words:?}");
        assert!(words.iter().any(|w| w == "arguments"), "{name}: {words:?}");
        assert!(words.iter().any(|w| w == "key"), "{name}: {words:?}");
    }
    let docs = ok(&mut c, &["COMMAND", "DOCS", "dlock.rwacquire"]);
    let mut words = Vec::new();
    strings(&docs, &mut words);
    for w in [
        "arguments",
        "key",
        "owner",
        "mode",
        "READ",
        "WRITE",
        "lease",
        "PX",
        "ms",
        "WAIT",
        "optional",
        "oneof",
    ] {
        assert!(words.iter().any(|x| x == w), "no {w:?} in DOCS: {words:?}");
    }
    // Every acquire command documents BIND and LOCKDELAY.
    for name in [
        "dlock.acquire",
        "dlock.rwacquire",
        "dlock.fairacquire",
        "dlock.semacquire",
    ] {
        let docs = ok(&mut c, &["COMMAND", "DOCS", name]);
        let mut words = Vec::new();
        strings(&docs, &mut words);
        for w in ["BIND", "LOCKDELAY", "pure-token", "integer"] {
            assert!(
                words.iter().any(|x| x == w),
                "{name}: no {w:?} in DOCS: {words:?}"
            );
        }
    }
    // The names are listed among all commands.
    let v = ok(&mut c, &["COMMAND", "LIST", "FILTERBY", "MODULE", "dlock"]);
    let mut names = Vec::new();
    strings(&v, &mut names);
    let mut names: Vec<String> = names.iter().map(|n| n.to_uppercase()).collect();
    names.sort();
    let mut want: Vec<String> = cmds.iter().map(|c| c.0.to_string()).collect();
    // Commands without keys (name, arity, a flag they have).
    let keyless: &[(&str, i64, &str)] = &[
        ("DLOCK.SCAN", -2, "readonly"),
        ("DLOCK.STATS", -1, "readonly"),
        ("DLOCK.SLOWLOG", -2, "admin"),
    ];
    for (name, arity, has) in keyless {
        let v = ok(&mut c, &["COMMAND", "INFO", name]);
        let Value::Array(outer) = &v else {
            panic!("COMMAND INFO {name}: {v:?}")
        };
        let Value::Array(ci) = &outer[0] else {
            panic!("COMMAND INFO {name}: {v:?}")
        };
        assert_eq!(int(&ci[1]), *arity, "{name} arity");
        let mut flags = Vec::new();
        strings(&ci[2], &mut flags);
        assert!(flags.iter().any(|f| f == has), "{name} flags {flags:?}");
        assert_eq!((int(&ci[3]), int(&ci[4]), int(&ci[5])), (0, 0, 0), "{name}");
        want.push(name.to_string());
    }
    want.sort();
    assert_eq!(names, want);
}

// ---------------------------------------------------------------------------
// INFO dlock
// ---------------------------------------------------------------------------

#[test]
fn info_dlock_counters_move_as_documented() {
    let s = Server::start();
    let mut c = s.conn();
    let first = stats(&mut c);
    for f in [
        "grants",
        "reentrant_grants",
        "releases",
        "renewals",
        "expirations",
        "waits_begun",
        "waits_timed_out",
        "handoffs",
        "force_releases",
        "locks",
        "waiters",
        "waiting_clients",
        "state_busy",
    ] {
        assert_eq!(
            first.get(&format!("dlock_{f}")),
            Some(&0),
            "INFO dlock lacks dlock_{f} or it is not 0: {first:?}"
        );
    }
    step(
        &mut c,
        &["DLOCK.ACQUIRE", "k", "o", "PX", LONG],
        &[("grants", 1), ("locks", 1)],
    );
    step(
        &mut c,
        &["DLOCK.ACQUIRE", "k", "o", "PX", LONG],
        &[("grants", 1), ("reentrant_grants", 1)],
    );
    step(&mut c, &["DLOCK.ACQUIRE", "k", "x"], &[]);
    step(&mut c, &["DLOCK.RENEW", "k", "o"], &[("renewals", 1)]);
    step(&mut c, &["DLOCK.RENEW", "k", "x"], &[]);
    step(&mut c, &["DLOCK.RELEASE", "k", "x"], &[]);
    step(&mut c, &["DLOCK.RELEASE", "k", "o"], &[("releases", 1)]);
    step(
        &mut c,
        &["DLOCK.RELEASE", "k", "o"],
        &[("releases", 1), ("locks", -1)],
    );
    step(
        &mut c,
        &["DLOCK.RWACQUIRE", "rw", "r1", "READ", "PX", LONG],
        &[("grants", 1), ("locks", 1)],
    );
    step(
        &mut c,
        &["DLOCK.RWACQUIRE", "rw", "r2", "READ", "PX", LONG],
        &[("grants", 1)],
    );
    step(
        &mut c,
        &["DLOCK.FORCERELEASE", "rw"],
        &[("force_releases", 1), ("locks", -1)],
    );
    step(
        &mut c,
        &["DLOCK.FAIRACQUIRE", "f", "a", "PX", LONG],
        &[("grants", 1), ("locks", 1)],
    );

    // A wait that times out.
    step(
        &mut c,
        &["DLOCK.FAIRACQUIRE", "f", "b", "WAIT", "50"],
        // The fair owner keeps a queued place: still one of the waiters.
        &[("waits_begun", 1), ("waits_timed_out", 1), ("waiters", 1)],
    );
    ok(&mut c, &["DLOCK.FORCERELEASE", "f"]);
    ok(&mut c, &["DEL", "f"]);

    // A wait that ends with a handoff; the gauge of waiting connections.
    grant(&mut c, &["DLOCK.ACQUIRE", "h", "o", "PX", LONG]);
    let before = stats(&mut c);
    let waiter = spawn_cmd(
        &s,
        &["DLOCK.ACQUIRE", "h", "w", "PX", LONG, "WAIT", "30000"],
    );
    wait_waiters(&mut c, "h", 1);
    let mid = delta(&before, &stats(&mut c));
    assert_eq!(
        mid,
        changes(&[("waits_begun", 1), ("waiters", 1), ("waiting_clients", 1)])
    );
    ok(&mut c, &["DLOCK.RELEASE", "h", "o"]);
    int(&waiter.join().expect("thread").expect("reply"));
    let d = delta(&before, &stats(&mut c));
    assert_eq!(
        d,
        changes(&[
            ("waits_begun", 1),
            ("releases", 1),
            ("grants", 1),
            ("handoffs", 1)
        ])
    );

    // Expiry.
    let before = stats(&mut c);
    grant(&mut c, &["DLOCK.ACQUIRE", "e", "o", "PX", "100"]);
    assert!(wait_until(SOON, || !exists(&mut c, "e")));
    let d = delta(&before, &stats(&mut c));
    assert_eq!(d, changes(&[("grants", 1), ("expirations", 1)]));
    // No work was skipped for a state cell found borrowed.
    assert_eq!(stats(&mut c).get("dlock_state_busy"), Some(&0));
}

// ---------------------------------------------------------------------------
// TYPE, MEMORY USAGE, DEBUG DIGEST-VALUE
// ---------------------------------------------------------------------------

#[test]
fn type_memory_usage_and_digest_of_a_lock_key() {
    let s = Server::start();
    let mut c = s.conn();
    grant(&mut c, &["DLOCK.ACQUIRE", "m", "o", "PX", LONG]);
    grant(&mut c, &["DLOCK.RWACQUIRE", "rw", "o", "READ", "PX", LONG]);
    grant(&mut c, &["DLOCK.FAIRACQUIRE", "f", "o", "PX", LONG]);
    for k in ["m", "rw", "f"] {
        assert_eq!(text(&ok(&mut c, &["TYPE", k])), "dlocklock");
        let mem = int(&ok(&mut c, &["MEMORY", "USAGE", k]));
        assert!(mem > 0, "MEMORY USAGE {k} = {mem}");
    }
    // More holders use more memory.
    let small = int(&ok(&mut c, &["MEMORY", "USAGE", "rw"]));
    for i in 0..50 {
        let owner = format!("reader-{i:0>40}");
        grant(
            &mut c,
            &["DLOCK.RWACQUIRE", "rw", &owner, "READ", "PX", LONG],
        );
    }
    let big = int(&ok(&mut c, &["MEMORY", "USAGE", "rw"]));
    assert!(big > small, "MEMORY USAGE did not grow: {small} -> {big}");

    let digest = |c: &mut Connection, k: &str| -> String {
        match ok(c, &["DEBUG", "DIGEST-VALUE", k]) {
            Value::Array(items) if items.len() == 1 => text(&items[0]),
            other => panic!("DEBUG DIGEST-VALUE {k}: {other:?}"),
        }
    };
    let d1 = digest(&mut c, "m");
    assert_eq!(d1.len(), 40, "{d1}");
    assert!(d1.chars().all(|ch| ch.is_ascii_hexdigit()), "{d1}");
    assert_ne!(d1, "0".repeat(40), "digest of a lock is all zeros");
    assert_eq!(digest(&mut c, "m"), d1, "digest is not stable");
    grant(&mut c, &["DLOCK.ACQUIRE", "m", "o", "PX", LONG]);
    assert_ne!(digest(&mut c, "m"), d1, "digest ignores the hold count");
    let db = text(&ok(&mut c, &["DEBUG", "DIGEST"]));
    assert_ne!(db, "0".repeat(40));
}

// ---------------------------------------------------------------------------
// Read-only replica
// ---------------------------------------------------------------------------

#[test]
fn a_replica_refuses_writes_and_answers_info() {
    let master = Server::start();
    let replica = Server::start();
    replica.make_replica_of(&master);
    let mut mc = master.conn();
    let mut rc = replica.conn();
    grant(&mut mc, &["DLOCK.ACQUIRE", "k", "o", "PX", LONG]);
    grant(&mut mc, &["DLOCK.RWACQUIRE", "rw", "r", "READ", "PX", LONG]);
    wait_replica_synced(&master, &replica);
    for k in ["k", "rw"] {
        assert_eq!(
            must_info(&mut rc, k).without_ttl(),
            must_info(&mut mc, k).without_ttl(),
            "replica INFO of {k}"
        );
    }
    assert_eq!(info(&mut rc, "missing"), None);

    let writes: &[&[&str]] = &[
        &["DLOCK.ACQUIRE", "k", "o"],
        &["DLOCK.ACQUIRE", "new", "o", "WAIT", "10000"],
        &["DLOCK.RWACQUIRE", "rw", "r", "READ"],
        &["DLOCK.FAIRACQUIRE", "f", "o"],
        &["DLOCK.RELEASE", "k", "o"],
        &["DLOCK.RENEW", "k", "o"],
        &["DLOCK.FORCERELEASE", "k"],
        &["DLOCK.APPLY", "k", ""],
    ];
    for args in writes {
        assert_prefix(&err(&mut rc, args), "READONLY");
    }
    // Nothing changed on either side.
    for k in ["k", "rw"] {
        assert_eq!(
            must_info(&mut rc, k).without_ttl(),
            must_info(&mut mc, k).without_ttl()
        );
    }
    assert_eq!(must_info(&mut mc, "k").holders[0].int("count"), 1);
}
