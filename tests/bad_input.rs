//! Bad input: a table of malformed commands, each with its exact error, run
//! against a server holding a few locks whose state must not change; then
//! oversized inputs; then a deterministic random mix of valid and invalid
//! commands that must all get a reply without crashing the server.

mod common;
use common::*;

use std::collections::HashMap;
use std::time::Duration;

use redis::{Connection, ErrorKind, Value};

// Error texts of src/error.rs (as documented in the README).
const OWNER_EMPTY: &str = "ERR owner must be 1 to 512 bytes, got an empty string";
const OWNER_LONG: &str = "ERR owner must be 1 to 512 bytes, got more than 512";
const PX_RANGE: &str = "ERR PX must be an integer number of milliseconds from 1 to 1099511627776";
const WAIT_RANGE: &str =
    "ERR WAIT must be an integer number of milliseconds from 0 to 1099511627776";
const PX_TWICE: &str = "ERR PX was given more than once";
const WAIT_TWICE: &str = "ERR WAIT was given more than once";
const PX_VALUE: &str = "ERR PX needs a value";
const WAIT_VALUE: &str = "ERR WAIT needs a value";
const ACQUIRE_OPTION: &str =
    "ERR unknown option; expected PX <milliseconds>, WAIT <milliseconds>, BIND or LOCKDELAY <milliseconds>";
const RENEW_OPTION: &str = "ERR unknown option; expected PX <milliseconds>";
const MODE_MISSING: &str = "ERR missing mode; expected READ or WRITE after the owner";
const MODE_BAD: &str = "ERR mode must be READ or WRITE";
const RELEASE_SYNTAX: &str = "ERR syntax error; expected DLOCK.RELEASE key owner [READ|WRITE]";
const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";
const NOTHELD: &str = "NOTHELD the owner does not hold this lock";
const MODE_REQUIRED: &str = "ERR the owner holds both READ and WRITE on this lock";
const MODE_NOT_APPLICABLE: &str = "ERR READ|WRITE applies only to rw locks";
const KIND_MUTEX: &str = "WRONGKIND the key holds a mutex lock";
const KIND_RW: &str = "WRONGKIND the key holds an rw lock";
const KIND_FAIR: &str = "WRONGKIND the key holds a fair lock";
const BAD_PAYLOAD: &str = "ERR invalid lock payload: ";

const LONG: &str = "600000";

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

fn b<T: AsRef<[u8]> + ?Sized>(x: &T) -> Vec<u8> {
    x.as_ref().to_vec()
}

/// `args![a, b"..", vec]`: a command as owned byte strings.
macro_rules! args {
    ($($x:expr),* $(,)?) => { Vec::<Vec<u8>>::from([$(b(&$x)),*]) };
}

/// A command as owned byte strings.
type Args = Vec<Vec<u8>>;

/// What a bad input must answer.
#[derive(Clone, Debug)]
enum Want {
    /// Redis' standard arity error for this command.
    Arity,
    /// An error reply starting with this text.
    Prefix(&'static str),
}

struct Case {
    args: Vec<Vec<u8>>,
    want: Want,
}

/// The table checks DLOCK.APPLY's payload validation too, so clients may
/// send it here (production servers refuse it: tests/hardening.rs).
fn apply_opts() -> ServerOpts {
    ServerOpts::new().module_args(["apply-from-clients", "yes"])
}

fn show(args: &[Vec<u8>]) -> String {
    let mut out: Vec<String> = args
        .iter()
        .take(8)
        .map(|a| {
            let s = format!("{:?}", String::from_utf8_lossy(a));
            if s.len() > 40 {
                let head: String = s.chars().take(40).collect();
                format!("{head}…({} bytes)", a.len())
            } else {
                s
            }
        })
        .collect();
    if args.len() > 8 {
        out.push(format!("…({} args)", args.len()));
    }
    out.join(" ")
}

fn run(con: &mut Connection, args: &[Vec<u8>]) -> redis::RedisResult<Value> {
    let refs: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
    cmd_raw(con, &refs)
}

/// A reply must come back: a transport error (closed connection, timeout)
/// means the server crashed or hung.
fn check_transport(r: &redis::RedisResult<Value>, args: &[Vec<u8>]) {
    if let Err(e) = r {
        assert!(
            e.kind() != ErrorKind::IoError && !e.is_connection_dropped() && !e.is_timeout(),
            "no reply to {}: {e}",
            show(args)
        );
    }
}

fn check_case(con: &mut Connection, case: &Case) {
    let r = run(con, &case.args);
    check_transport(&r, &case.args);
    let got = match r {
        Ok(v) => panic!("{} should fail, got {v:?}", show(&case.args)),
        Err(e) => err_string(&e),
    };
    match &case.want {
        Want::Arity => {
            let name = String::from_utf8_lossy(&case.args[0]).to_lowercase();
            let want = format!("ERR wrong number of arguments for '{name}' command");
            // Redis names module commands as registered (upper case).
            assert!(
                got.eq_ignore_ascii_case(&want),
                "{}: want {want:?}, got {got:?}",
                show(&case.args)
            );
        }
        Want::Prefix(p) => assert!(
            got.starts_with(p),
            "{}: want an error starting with {p:?}, got {got:?}",
            show(&case.args)
        ),
    }
    let pong = run(con, &args!["PING"]);
    assert_eq!(
        pong.as_ref().ok(),
        Some(&Value::SimpleString("PONG".into())),
        "PING after {}: {pong:?}",
        show(&case.args)
    );
}

fn int(v: &Value) -> i64 {
    match v {
        Value::Int(n) => *n,
        other => panic!("expected an integer reply, got {other:?}"),
    }
}

fn ok(con: &mut Connection, args: &[Vec<u8>]) -> Value {
    run(con, args).unwrap_or_else(|e| panic!("{} failed: {}", show(args), err_string(&e)))
}

/// DLOCK.INFO without its `ttl` fields (they change by themselves); the
/// raw reply otherwise, so every byte of every other field is compared.
fn info_without_ttl(con: &mut Connection, key: &[u8]) -> Value {
    fn strip(v: &Value) -> Value {
        match v {
            Value::Array(items) => {
                let mut out = Vec::new();
                let mut i = 0;
                while i < items.len() {
                    let timed = ["ttl", "held_ms", "waited_ms"].iter().any(|f| {
                        items[i] == Value::BulkString(f.as_bytes().to_vec())
                            || items[i] == Value::SimpleString((*f).into())
                    });
                    if timed {
                        i += 2;
                        continue;
                    }
                    out.push(strip(&items[i]));
                    i += 1;
                }
                Value::Array(out)
            }
            other => other.clone(),
        }
    }
    strip(&ok(con, &args![b"DLOCK.INFO", key]))
}

fn stats(con: &mut Connection) -> HashMap<String, String> {
    let text: String = redis::cmd("INFO")
        .arg("dlock")
        .query(con)
        .expect("INFO dlock");
    parse_info(&text)
}

/// Counters that no refused command may move.
const STILL: [&str; 7] = [
    "dlock_grants",
    "dlock_reentrant_grants",
    "dlock_releases",
    "dlock_renewals",
    "dlock_force_releases",
    "dlock_waits_begun",
    "dlock_locks",
];

/// A snapshot of everything the bad inputs must leave alone.
#[derive(Debug, PartialEq)]
struct Snapshot {
    locks: Vec<Value>,
    dbsize: i64,
    string: Value,
    counters: Vec<String>,
}

const LOCK_KEYS: [&str; 4] = ["mtx", "rw", "rw2", "fair"];

fn snapshot(con: &mut Connection) -> Snapshot {
    let s = stats(con);
    Snapshot {
        locks: LOCK_KEYS
            .iter()
            .map(|k| info_without_ttl(con, k.as_bytes()))
            .collect(),
        dbsize: int(&ok(con, &args!["DBSIZE"])),
        string: ok(con, &args!["GET", "str"]),
        counters: STILL
            .iter()
            .map(|f| s.get(*f).cloned().unwrap_or_default())
            .collect(),
    }
}

/// A mutex `mtx` (owner `a`, count 2), an rw lock `rw` (owner `w` holds
/// WRITE and READ), an rw lock `rw2` (readers r1, r2), a fair lock `fair`
/// (holder f1, queued f2) and a string `str`.
fn setup(con: &mut Connection) {
    // Queued places must outlive the test.
    ok(
        con,
        &args!["CONFIG", "SET", "dlock.fair-queue-timeout-ms", LONG],
    );
    let grants: [Vec<Vec<u8>>; 7] = [
        args!["DLOCK.ACQUIRE", "mtx", "a", "PX", LONG],
        args!["DLOCK.ACQUIRE", "mtx", "a", "PX", LONG],
        args!["DLOCK.RWACQUIRE", "rw", "w", "WRITE", "PX", LONG],
        args!["DLOCK.RWACQUIRE", "rw", "w", "READ", "PX", LONG],
        args!["DLOCK.RWACQUIRE", "rw2", "r1", "READ", "PX", LONG],
        args!["DLOCK.RWACQUIRE", "rw2", "r2", "READ", "PX", LONG],
        args!["DLOCK.FAIRACQUIRE", "fair", "f1", "PX", LONG],
    ];
    for g in &grants {
        assert!(matches!(ok(con, g), Value::Int(_)), "{}", show(g));
    }
    assert_eq!(
        ok(con, &args!["DLOCK.FAIRACQUIRE", "fair", "f2"]),
        Value::Nil
    );
    ok(con, &args!["SET", "str", "value"]);
}

/// A valid DLOCK.APPLY payload built by hand from the layout documented in
/// dlock-core/src/codec.rs: a mutex held by `x` until `expires_at`.
fn valid_payload(expires_at: u64) -> Vec<u8> {
    let mut p = vec![1u8, 0]; // version 1, kind mutex
    varint(&mut p, 5); // last token
    varint(&mut p, 5); // token floor
    varint(&mut p, 1); // one holder
    varint(&mut p, 1); // owner length
    p.push(b'x');
    p.push(0); // mode exclusive
    varint(&mut p, 1); // count
    varint(&mut p, expires_at);
    varint(&mut p, 5); // token
    varint(&mut p, 0); // no waiters
    p
}

/// Deterministic xorshift64 generator.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
    fn bytes(&mut self, max_len: usize) -> Vec<u8> {
        let n = self.below(max_len + 1);
        (0..n).map(|_| self.next() as u8).collect()
    }
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

// ---------------------------------------------------------------------------
// The table
// ---------------------------------------------------------------------------

/// Option errors after `prefix` (a command up to its options).
fn option_cases(prefix: &[Vec<u8>], allow_wait: bool, out: &mut Vec<Case>) {
    let unknown = if allow_wait {
        ACQUIRE_OPTION
    } else {
        RENEW_OPTION
    };
    let mut add = |tail: Vec<Vec<u8>>, want: &'static str| {
        let mut args = prefix.to_vec();
        args.extend(tail);
        out.push(Case {
            args,
            want: Want::Prefix(want),
        });
    };
    // Valueless options.
    add(args!["PX"], PX_VALUE);
    add(args!["px"], PX_VALUE);
    // Repeated options.
    add(args!["PX", "1000", "PX", "1000"], PX_TWICE);
    add(args!["px", "1000", "Px", "2000"], PX_TWICE);
    // Unknown options, binary garbage.
    for opt in [
        &b"FOO"[..],
        b"",
        b"1000",
        b"READ",
        b"NX",
        b"EX",
        b"P\0X",
        b"PX\r\n",
        b"\xff\xfe\xfd",
        b"\0",
        b"PXX",
    ] {
        add(vec![opt.to_vec()], unknown);
        add(vec![opt.to_vec(), b"1000".to_vec()], unknown);
        add(args!["PX", "1000", opt], unknown);
    }
    // Non-integer and out-of-range numbers.
    for n in [
        &b"abc"[..],
        b"1.5",
        b"",
        b"+1",
        b" 1",
        b"1 ",
        b"-1",
        b"0",
        b"-0",
        b"1e3",
        b"0x10",
        b"1099511627777",
        b"18446744073709551616",
        b"99999999999999999999999",
        b"1\x00",
        "\u{ff11}".as_bytes(), // a full-width digit
    ] {
        add(vec![b"PX".to_vec(), n.to_vec()], PX_RANGE);
    }
    if allow_wait {
        add(args!["WAIT"], WAIT_VALUE);
        add(args!["PX", "1000", "WAIT"], WAIT_VALUE);
        add(args!["WAIT", "0", "PX"], PX_VALUE);
        add(args!["WAIT", "0", "WAIT", "0"], WAIT_TWICE);
        add(args!["wait", "10", "PX", "1000", "WAIT", "10"], WAIT_TWICE);
        add(args!["PX", "1000", "WAIT", "0", "PX", "1000"], PX_TWICE);
        // A value that is an option name is a bad number.
        add(args!["PX", "WAIT", "100"], PX_RANGE);
        add(args!["WAIT", "PX", "100"], WAIT_RANGE);
        for n in [
            &b"abc"[..],
            b"1.5",
            b"",
            b"+1",
            b" 1",
            b"-1",
            b"1099511627777",
            b"99999999999999999999999",
        ] {
            add(vec![b"WAIT".to_vec(), n.to_vec()], WAIT_RANGE);
        }
    } else {
        add(args!["WAIT"], RENEW_OPTION);
        add(args!["WAIT", "0"], RENEW_OPTION);
        add(args!["PX", "1000", "WAIT", "0"], RENEW_OPTION);
        add(args!["PX", "1000", "PX"], PX_TWICE);
    }
}

fn table() -> Vec<Case> {
    let mut t: Vec<Case> = Vec::new();
    let mut add = |args: Vec<Vec<u8>>, want: Want| t.push(Case { args, want });
    use Want::{Arity, Prefix};
    let long_owner = vec![b'o'; 513];

    // --- arity: every argument missing --------------------------------------
    for cmd in [
        "DLOCK.ACQUIRE",
        "DLOCK.RWACQUIRE",
        "DLOCK.FAIRACQUIRE",
        "DLOCK.RELEASE",
        "DLOCK.RENEW",
        "dlock.acquire",
        "Dlock.Release",
    ] {
        add(args![cmd], Arity);
        add(args![cmd, "mtx"], Arity);
    }
    for cmd in ["DLOCK.INFO", "DLOCK.FORCERELEASE", "dlock.info"] {
        add(args![cmd], Arity);
        add(args![cmd, "mtx", "x"], Arity);
        add(args![cmd, "mtx", "PX", "1000"], Arity);
    }
    add(args!["DLOCK.APPLY"], Arity);
    add(args!["DLOCK.APPLY", "mtx"], Arity);
    add(args!["DLOCK.APPLY", "mtx", "", "x"], Arity);

    // --- owners -------------------------------------------------------------
    let acquires: [(Args, Args); 4] = [
        (args!["DLOCK.ACQUIRE", "mtx"], vec![]),
        (args!["DLOCK.FAIRACQUIRE", "fair"], vec![]),
        (args!["DLOCK.RWACQUIRE", "rw"], args!["READ"]),
        (args!["DLOCK.RWACQUIRE", "rw2"], args!["WRITE"]),
    ];
    for (head, mode) in &acquires {
        for (owner, want) in [(b(""), OWNER_EMPTY), (long_owner.clone(), OWNER_LONG)] {
            let mut a = head.clone();
            a.push(owner.clone());
            a.extend(mode.clone());
            add(a.clone(), Prefix(want));
            a.extend(args!["PX", "1000", "WAIT", "0"]);
            add(a, Prefix(want));
        }
    }
    for head in [args!["DLOCK.RELEASE", "mtx"], args!["DLOCK.RENEW", "mtx"]] {
        let mut a = head.clone();
        a.push(b(""));
        add(a.clone(), Prefix(OWNER_EMPTY));
        let mut a = head.clone();
        a.push(long_owner.clone());
        add(a, Prefix(OWNER_LONG));
    }
    add(
        args!["DLOCK.RELEASE", "rw", "", "READ"],
        Prefix(OWNER_EMPTY),
    );
    add(
        args!["DLOCK.RENEW", "mtx", "", "PX", "1000"],
        Prefix(OWNER_EMPTY),
    );

    // --- options of every command that has them -------------------------------
    let mut opt_cases = Vec::new();
    for prefix in [
        args!["DLOCK.ACQUIRE", "mtx", "a"],
        args!["DLOCK.ACQUIRE", "mtx", "b"],
        args!["DLOCK.ACQUIRE", "new", "a"],
        args!["DLOCK.FAIRACQUIRE", "fair", "f1"],
        args!["DLOCK.FAIRACQUIRE", "fair", "f2"],
        args!["DLOCK.RWACQUIRE", "rw", "w", "READ"],
        args!["DLOCK.RWACQUIRE", "rw2", "r1", "WRITE"],
        args!["DLOCK.RWACQUIRE", "rw2", "r3", "read"],
    ] {
        option_cases(&prefix, true, &mut opt_cases);
    }
    for prefix in [
        args!["DLOCK.RENEW", "mtx", "a"],
        args!["DLOCK.RENEW", "rw2", "r1"],
    ] {
        option_cases(&prefix, false, &mut opt_cases);
    }
    for c in opt_cases {
        add(c.args, c.want);
    }

    // --- modes ----------------------------------------------------------------
    add(args!["DLOCK.RWACQUIRE", "rw", "w"], Prefix(MODE_MISSING));
    add(args!["DLOCK.RWACQUIRE", "new", "w"], Prefix(MODE_MISSING));
    for m in [
        &b"READX"[..],
        b"",
        b"REA",
        b"READ\0",
        b"READ WRITE",
        b"PX",
        b"WAIT",
        b"EXCLUSIVE",
        b"\xff",
    ] {
        add(args!["DLOCK.RWACQUIRE", "rw", "w", m], Prefix(MODE_BAD));
        add(
            args!["DLOCK.RWACQUIRE", "rw2", "r1", m, "PX", "1000"],
            Prefix(MODE_BAD),
        );
        add(args!["DLOCK.RELEASE", "rw", "w", m], Prefix(MODE_BAD));
        add(args!["DLOCK.RELEASE", "mtx", "a", m], Prefix(MODE_BAD));
    }

    // --- RELEASE --------------------------------------------------------------
    add(
        args!["DLOCK.RELEASE", "mtx", "a", "READ"],
        Prefix(MODE_NOT_APPLICABLE),
    );
    add(
        args!["DLOCK.RELEASE", "mtx", "a", "write"],
        Prefix(MODE_NOT_APPLICABLE),
    );
    add(
        args!["DLOCK.RELEASE", "fair", "f1", "WRITE"],
        Prefix(MODE_NOT_APPLICABLE),
    );
    add(args!["DLOCK.RELEASE", "rw", "w"], Prefix(MODE_REQUIRED));
    add(
        args!["DLOCK.RELEASE", "mtx", "a", "READ", "x"],
        Prefix(RELEASE_SYNTAX),
    );
    add(
        args!["DLOCK.RELEASE", "mtx", "a", "PX", "1000"],
        Prefix(RELEASE_SYNTAX),
    );
    add(
        args!["DLOCK.RELEASE", "rw", "w", "READ", "WRITE"],
        Prefix(RELEASE_SYNTAX),
    );
    add(args!["DLOCK.RELEASE", "mtx", "b"], Prefix(NOTHELD));
    add(args!["DLOCK.RELEASE", "mtx", "A"], Prefix(NOTHELD));
    add(args!["DLOCK.RELEASE", "fair", "f2"], Prefix(NOTHELD));
    add(
        args!["DLOCK.RELEASE", "rw2", "r1", "WRITE"],
        Prefix(NOTHELD),
    );
    add(args!["DLOCK.RELEASE", "rw2", "r3"], Prefix(NOTHELD));
    add(args!["DLOCK.RELEASE", "new", "a"], Prefix(NOTHELD));

    // --- other types and kinds --------------------------------------------------
    for a in [
        args!["DLOCK.ACQUIRE", "str", "a"],
        args!["DLOCK.ACQUIRE", "str", "a", "WAIT", "100000"],
        args!["DLOCK.RWACQUIRE", "str", "a", "READ"],
        args!["DLOCK.FAIRACQUIRE", "str", "a"],
        args!["DLOCK.RELEASE", "str", "a"],
        args!["DLOCK.RELEASE", "str", "a", "WRITE"],
        args!["DLOCK.RENEW", "str", "a"],
        args!["DLOCK.INFO", "str"],
        args!["DLOCK.FORCERELEASE", "str"],
        args!["DLOCK.APPLY", "str", ""],
    ] {
        add(a, Prefix(WRONGTYPE));
    }
    add(args!["DLOCK.ACQUIRE", "rw", "w"], Prefix(KIND_RW));
    add(
        args!["DLOCK.ACQUIRE", "rw2", "x", "WAIT", "100000"],
        Prefix(KIND_RW),
    );
    add(args!["DLOCK.ACQUIRE", "fair", "f1"], Prefix(KIND_FAIR));
    add(
        args!["DLOCK.RWACQUIRE", "mtx", "a", "READ"],
        Prefix(KIND_MUTEX),
    );
    add(
        args!["DLOCK.RWACQUIRE", "fair", "f2", "WRITE"],
        Prefix(KIND_FAIR),
    );
    add(args!["DLOCK.FAIRACQUIRE", "mtx", "a"], Prefix(KIND_MUTEX));
    add(
        args!["DLOCK.FAIRACQUIRE", "rw", "w", "WAIT", "100000"],
        Prefix(KIND_RW),
    );

    // --- APPLY payloads ---------------------------------------------------------
    let valid = valid_payload(now_ms() + 600_000);
    let mut payloads: Vec<Vec<u8>> = vec![
        b"\x01\x00".to_vec(),
        b"\x02".to_vec(),
        b"\xff\xff\xff".to_vec(),
        b"\x00".to_vec(),
        b"\x01".to_vec(),
        b"garbage".to_vec(),
        b"\x01\x03\x01\x01\x00\x00".to_vec(),     // unknown kind
        b"\x01\x00\x00\x00\x00\x00".to_vec(),     // neither holders nor waiters
        b"\x01\x00\x80\x00\x00\x00\x00".to_vec(), // varint not minimal
        [&b"\x01\x00"[..], &[0xff; 10], b"\x01"].concat(), // varint overflow
        [&b"\x01\x00\x05\x05"[..], &[0xff, 0xff, 0xff, 0xff, 0x0f]].concat(), // huge count
    ];
    // The valid payload with a trailing byte, and every truncation of it.
    payloads.push([valid.as_slice(), b"\x00"].concat());
    for n in 1..valid.len() {
        payloads.push(valid[..n].to_vec());
    }
    // A holder whose mode does not fit a mutex, a zero count, a zero token.
    let mut bad_mode = valid.clone();
    bad_mode[7] = 1;
    payloads.push(bad_mode);
    let mut zero_count = valid.clone();
    zero_count[8] = 0;
    payloads.push(zero_count);
    let mut zero_token = valid.clone();
    let last = zero_token.len() - 2;
    zero_token[last] = 0;
    payloads.push(zero_token);
    // Random bytes.
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    for i in 0..60 {
        let mut p = rng.bytes(64);
        if i % 2 == 0 {
            p.insert(0, 1); // past the version byte
        }
        if p.is_empty() {
            p.push(0xff);
        }
        payloads.push(p);
    }
    for p in &payloads {
        for key in ["mtx", "rw", "fair", "str", "new"] {
            add(args!["DLOCK.APPLY", key, p], Prefix(BAD_PAYLOAD));
        }
    }

    // --- 10 000 extra arguments ----------------------------------------------------
    let many = |head: Vec<Vec<u8>>, item: &[&str]| {
        let mut a = head;
        for _ in 0..(10_000 / item.len()) {
            a.extend(item.iter().map(b));
        }
        a
    };
    add(
        many(args!["DLOCK.ACQUIRE", "mtx", "a"], &["x"]),
        Prefix(ACQUIRE_OPTION),
    );
    add(
        many(args!["DLOCK.ACQUIRE", "mtx", "a"], &["PX"]),
        Prefix(PX_RANGE),
    );
    add(
        many(args!["DLOCK.ACQUIRE", "mtx", "a"], &["PX", "1000"]),
        Prefix(PX_TWICE),
    );
    add(
        many(args!["DLOCK.RWACQUIRE", "rw", "w", "READ"], &["WAIT", "0"]),
        Prefix(WAIT_TWICE),
    );
    add(
        many(args!["DLOCK.FAIRACQUIRE", "fair", "f2"], &["\0"]),
        Prefix(ACQUIRE_OPTION),
    );
    add(
        many(args!["DLOCK.RELEASE", "mtx", "a"], &["READ"]),
        Prefix(RELEASE_SYNTAX),
    );
    add(
        many(args!["DLOCK.RENEW", "mtx", "a"], &["PX", "1000"]),
        Prefix(PX_TWICE),
    );
    add(many(args!["DLOCK.INFO", "mtx"], &["x"]), Arity);
    add(many(args!["DLOCK.FORCERELEASE", "mtx"], &["x"]), Arity);
    add(many(args!["DLOCK.APPLY", "mtx"], &["x"]), Arity);
    t
}

#[test]
fn bad_inputs_get_their_error_and_change_nothing() {
    let mut s = Server::start_with(apply_opts());
    let mut c = s.conn();

    // The hand-built payload really is valid (so its truncations are
    // meaningful), and an empty payload deletes the lock again.
    let scratch = args!["DLOCK.APPLY", "scratch", valid_payload(now_ms() + 600_000)];
    assert_eq!(ok(&mut c, &scratch), Value::Okay);
    assert!(matches!(
        ok(&mut c, &args!["DLOCK.INFO", "scratch"]),
        Value::Array(_)
    ));
    assert_eq!(
        ok(&mut c, &args!["DLOCK.APPLY", "scratch", ""]),
        Value::Okay
    );
    assert_eq!(int(&ok(&mut c, &args!["EXISTS", "scratch"])), 0);

    setup(&mut c);
    let before = snapshot(&mut c);
    assert_eq!(before.dbsize, 5);
    let cases = table();
    assert!(cases.len() > 1000, "{} cases", cases.len());
    for case in &cases {
        check_case(&mut c, case);
    }
    let after = snapshot(&mut c);
    assert_eq!(after, before, "a refused command changed state");
    assert_eq!(int(&ok(&mut c, &args!["EXISTS", "new"])), 0);
    s.assert_alive();
}

#[test]
fn oversized_owners_keys_and_argument_lists() {
    let mut s = Server::start_with(apply_opts());
    let mut c = s.conn();
    setup(&mut c);
    let before = snapshot(&mut c);
    let mb_owner = vec![b'o'; 1 << 20];
    for head in [
        args!["DLOCK.ACQUIRE", "mtx"],
        args!["DLOCK.ACQUIRE", "new"],
        args!["DLOCK.FAIRACQUIRE", "fair"],
        args!["DLOCK.RELEASE", "mtx"],
        args!["DLOCK.RENEW", "mtx"],
    ] {
        let mut a = head;
        a.push(mb_owner.clone());
        check_case(
            &mut c,
            &Case {
                args: a,
                want: Want::Prefix(OWNER_LONG),
            },
        );
    }
    check_case(
        &mut c,
        &Case {
            args: args!["DLOCK.RWACQUIRE", "rw", mb_owner.clone(), "READ"],
            want: Want::Prefix(OWNER_LONG),
        },
    );
    // 512 bytes is the largest owner.
    let max_owner = vec![0xa5u8; 512];
    assert!(matches!(
        ok(
            &mut c,
            &args!["DLOCK.ACQUIRE", "max", max_owner, "PX", LONG]
        ),
        Value::Int(_)
    ));
    assert_eq!(
        int(&ok(&mut c, &args!["DLOCK.RELEASE", "max", max_owner])),
        1
    );

    // A 1 MB key name works like any key.
    let mb_key: Vec<u8> = (0..(1usize << 20)).map(|i| (i % 251) as u8).collect();
    let t = ok(&mut c, &args!["DLOCK.ACQUIRE", mb_key, "o", "PX", LONG]);
    assert!(matches!(t, Value::Int(n) if n > 0), "{t:?}");
    assert!(matches!(
        ok(&mut c, &args!["DLOCK.INFO", mb_key]),
        Value::Array(_)
    ));
    assert_eq!(int(&ok(&mut c, &args!["DLOCK.RENEW", mb_key, "o"])), 1);
    assert_eq!(int(&ok(&mut c, &args!["DLOCK.RELEASE", mb_key, "o"])), 1);
    assert_eq!(int(&ok(&mut c, &args!["EXISTS", mb_key])), 0);
    assert_eq!(ok(&mut c, &args!["DLOCK.INFO", mb_key]), Value::Nil);

    // 10 000 extra arguments with otherwise valid commands.
    let mut a = args!["DLOCK.ACQUIRE", "mtx", "a", "PX", LONG];
    a.extend((0..10_000).map(|i| b(&format!("arg{i}"))));
    check_case(
        &mut c,
        &Case {
            args: a,
            want: Want::Prefix(ACQUIRE_OPTION),
        },
    );
    // (The counters moved with the valid grants above.)
    let after = snapshot(&mut c);
    assert_eq!(
        (after.locks, after.dbsize, after.string),
        (before.locks, before.dbsize, before.string)
    );
    s.assert_alive();
}

// ---------------------------------------------------------------------------
// Random commands
// ---------------------------------------------------------------------------

/// One random command: valid and invalid arguments of every command, with
/// binary bytes. WAIT values are kept tiny so nothing blocks for long.
fn random_command(rng: &mut Rng, payloads: &[Vec<u8>]) -> Vec<Vec<u8>> {
    const NAMES: [&str; 14] = [
        "DLOCK.ACQUIRE",
        "DLOCK.ACQUIRE",
        "DLOCK.RWACQUIRE",
        "DLOCK.RWACQUIRE",
        "DLOCK.FAIRACQUIRE",
        "DLOCK.FAIRACQUIRE",
        "DLOCK.RELEASE",
        "DLOCK.RELEASE",
        "DLOCK.RENEW",
        "DLOCK.INFO",
        "DLOCK.FORCERELEASE",
        "DLOCK.APPLY",
        "dlock.acquire",
        "OTHER",
    ];
    // (DLOCK.FORCERELEASE once in 14 wild commands, i.e. rarely.)
    const KEYS: [&[u8]; 7] = [b"fz0", b"fz1", b"fz2", b"{fz}3", b"fz\0\r\n", b"str", b""];
    const PX: [&str; 12] = [
        "1",
        "5",
        "20",
        "100",
        "30000",
        "0",
        "abc",
        "-1",
        "1.5",
        "",
        "1099511627777",
        "99999999999999999999999",
    ];
    const WAIT: [&str; 8] = ["0", "1", "3", "-1", "abc", "", "1099511627777", "+2"];
    const MODES: [&str; 6] = ["READ", "WRITE", "read", "Write", "READX", ""];
    const LONE: [&str; 6] = ["PX", "WAIT", "READ", "WRITE", "px", "wait"];

    // A token of garbage that is never a plain number (so it can never be a
    // long WAIT).
    fn garbage(rng: &mut Rng) -> Vec<u8> {
        let mut g = rng.bytes(12);
        if g.iter().all(u8::is_ascii_digit) {
            g.push(b'x');
        }
        g
    }
    fn owner(rng: &mut Rng) -> Vec<u8> {
        match rng.below(10) {
            0 => Vec::new(),
            1 => vec![b'o'; 513],
            2 => b"\0\r\n".to_vec(),
            3 => garbage(rng),
            4 => vec![0xff; 512],
            _ => rng.pick(&[b"a", b"b", b"c"]).to_vec(),
        }
    }

    let name = *rng.pick(&NAMES);
    if rng.chance(55) {
        return well_formed(rng, &["0", "1", "3"]);
    }
    let key = rng.pick(&KEYS).to_vec();
    if name == "OTHER" {
        return match rng.below(7) {
            0 | 6 => args!["DEL", key],
            1 => args!["SET", "str", "v"],
            2 => args!["TYPE", key],
            3 => args!["DUMP", key],
            4 => match payloads.last() {
                Some(p) => args!["RESTORE", key, "0", p, "REPLACE"],
                None => args!["EXISTS", key],
            },
            _ => args!["MEMORY", "USAGE", key],
        };
    }
    let mut a = args![name];
    if rng.chance(97) {
        a.push(key);
    }
    match name {
        "DLOCK.INFO" | "DLOCK.FORCERELEASE" => {
            if rng.chance(5) {
                a.push(garbage(rng));
            }
            return a;
        }
        "DLOCK.APPLY" => {
            let p = match rng.below(4) {
                0 => Vec::new(),
                1 => {
                    // A structurally plausible payload, often valid.
                    let kind = rng.below(3) as u8;
                    let mut p = vec![1u8, kind];
                    let token = 1 + rng.below(1000) as u64;
                    varint(&mut p, token);
                    varint(&mut p, token);
                    let holders = rng.below(3);
                    varint(&mut p, holders as u64);
                    for i in 0..holders {
                        varint(&mut p, 1);
                        p.push(b"abc"[i]);
                        p.push(if kind == 1 { 1 } else { 0 });
                        varint(&mut p, 1 + rng.below(3) as u64);
                        varint(&mut p, now_ms() + rng.below(200) as u64);
                        varint(&mut p, token);
                    }
                    let waiters = rng.below(3);
                    varint(&mut p, waiters as u64);
                    for i in 0..waiters {
                        varint(&mut p, 1000 + i as u64);
                        varint(&mut p, 1);
                        p.push(b"xyz"[i]);
                        p.push(if kind == 1 { 2 } else { 0 });
                        p.push(rng.below(2) as u8);
                        varint(&mut p, now_ms() + rng.below(200) as u64);
                    }
                    p
                }
                2 => {
                    let mut p = garbage(rng);
                    p.insert(0, 1);
                    p
                }
                _ => garbage(rng),
            };
            a.push(p);
            if rng.chance(5) {
                a.push(garbage(rng));
            }
            return a;
        }
        _ => {}
    }
    if rng.chance(95) {
        a.push(owner(rng));
    }
    let with_mode = name == "DLOCK.RWACQUIRE" || (name == "DLOCK.RELEASE" && rng.chance(30));
    if with_mode && rng.chance(90) {
        a.push(b(*rng.pick(&MODES)));
    }
    let items = if rng.chance(30) { 0 } else { rng.below(4) };
    for _ in 0..items {
        match rng.below(5) {
            0 | 1 => a.extend(args!["PX", *rng.pick(&PX)]),
            2 => a.extend(args!["WAIT", *rng.pick(&WAIT)]),
            3 => a.push(b(*rng.pick(&LONE))),
            _ => a.push(garbage(rng)),
        }
    }
    a
}

/// A well-formed lock command on a few keys and owners, so that the random
/// mix reaches grants, reentry, contention, releases, renewals and expiry.
fn well_formed(rng: &mut Rng, waits: &[&str]) -> Vec<Vec<u8>> {
    const KEYS: [&str; 3] = ["fz0", "fz1", "fz2"];
    const OWNERS: [&str; 3] = ["a", "b", "c"];
    const PX: [&str; 5] = ["5", "20", "100", "500", "30000"];
    let owner = *rng.pick(&OWNERS);
    let mode = *rng.pick(&["READ", "WRITE"]);
    // Each key keeps one kind (fz0 mutex, fz1 rw, fz2 fair) most of the time.
    let kind = rng.below(3);
    let key = if rng.chance(90) {
        KEYS[kind]
    } else {
        *rng.pick(&KEYS)
    };
    let mut a = match rng.below(8) {
        0..=2 => match kind {
            0 => args!["DLOCK.ACQUIRE", key, owner],
            1 => args!["DLOCK.RWACQUIRE", key, owner, mode],
            _ => args!["DLOCK.FAIRACQUIRE", key, owner],
        },
        3 if kind == 1 => args!["DLOCK.RELEASE", key, owner, mode],
        3 | 4 => args!["DLOCK.RELEASE", key, owner],
        5 => args!["DLOCK.RENEW", key, owner],
        _ => args!["DLOCK.INFO", key],
    };
    let acquire = a[0].ends_with(b"ACQUIRE");
    if (acquire || a[0] == b"DLOCK.RENEW") && rng.chance(70) {
        a.extend(args!["PX", *rng.pick(&PX)]);
    }
    if acquire && rng.chance(30) {
        a.extend(args!["WAIT", *rng.pick(waits)]);
    }
    a
}

#[test]
fn random_commands_always_get_a_reply() {
    let mut s = Server::start_with(apply_opts());
    let mut c = s.conn();
    ok(&mut c, &args!["SET", "str", "v"]);
    // A second connection runs well-formed commands at the same time, with
    // waits on the server, so grants are handed to waiting connections while
    // the random mix deletes, overwrites and force-releases the same keys.
    let mut other = s.conn();
    let helper = std::thread::spawn(move || {
        let mut rng = Rng(0x853C_49E6_748F_EA9B);
        for _ in 0..400 {
            let a = well_formed(&mut rng, &["0", "5", "20", "50"]);
            let r = run(&mut other, &a);
            check_transport(&r, &a);
        }
    });
    let mut rng = Rng(0x2545_F491_4F6C_DD1D);
    let mut dumps: Vec<Vec<u8>> = Vec::new();
    let (mut oks, mut errs) = (0, 0);
    for i in 0..2000 {
        let a = random_command(&mut rng, &dumps);
        let r = run(&mut c, &a);
        check_transport(&r, &a);
        match r {
            Ok(v) => {
                oks += 1;
                if a[0] == b"DUMP" {
                    if let Value::BulkString(p) = v {
                        dumps.push(p);
                    }
                }
            }
            Err(_) => errs += 1,
        }
        if i % 100 == 99 {
            let pong = run(&mut c, &args!["PING"]);
            assert_eq!(
                pong.ok(),
                Some(Value::SimpleString("PONG".into())),
                "after {i}"
            );
        }
    }
    helper.join().expect("the concurrent connection failed");
    assert!(oks > 200 && errs > 200, "{oks} replies, {errs} errors");
    // The mix reached the state machine, not only the argument parser.
    let st = stats(&mut c);
    for f in ["dlock_grants", "dlock_releases", "dlock_renewals"] {
        let n: i64 = st.get(f).and_then(|v| v.parse().ok()).unwrap_or(0);
        assert!(n >= 10, "only {n} {f} in the random mix: {st:?}");
    }

    // Everything left is consistent and inspectable.
    for key in [&b"fz0"[..], b"fz1", b"fz2", b"{fz}3", b"fz\0\r\n", b""] {
        let r = run(&mut c, &args!["DLOCK.INFO", key]);
        check_transport(&r, &args!["DLOCK.INFO", key]);
        if let Err(e) = r {
            assert!(
                err_string(&e).starts_with("WRONGTYPE"),
                "{}",
                err_string(&e)
            );
        }
    }
    let text: String = redis::cmd("INFO").arg("dlock").query(&mut c).expect("INFO");
    assert!(text.contains("dlock_grants:"), "{text}");
    let idle = wait_until(Duration::from_secs(10), || {
        stats(&mut c)
            .get("dlock_waiting_clients")
            .map(String::as_str)
            == Some("0")
    });
    assert!(idle, "waiting clients left: {:?}", stats(&mut c));
    ok(&mut c, &args!["FLUSHALL"]);
    s.assert_alive();
}

// ---------------------------------------------------------------------------
// Semaphores and latches
// ---------------------------------------------------------------------------

const LIMIT_MISSING: &str = "ERR missing LIMIT; expected LIMIT <n> after the owner";
const LIMIT_RANGE: &str = "ERR LIMIT must be an integer from 1 to 4294967296";
const LIMIT_VALUE: &str = "ERR LIMIT needs a value";
const LIMIT_TWICE: &str = "ERR LIMIT was given more than once";
const PERMITS_RANGE: &str = "ERR PERMITS must be an integer from 1 to the semaphore's LIMIT";
const PERMITS_VALUE: &str = "ERR PERMITS needs a value";
const PERMITS_TWICE: &str = "ERR PERMITS was given more than once";
const PERMITS_OVER: &str = "ERR PERMITS must be from 1 to the semaphore's limit";
const SEM_OPTION: &str = "ERR unknown option; expected LIMIT <n>, PERMITS <k>";
const LIMIT_IN_FORCE: &str = "ERR this semaphore's limit is 3;";
const FEWER_PERMITS: &str = "ERR the owner holds 2 permits of this semaphore, fewer than";
const PERMITS_NOT_APPLICABLE: &str = "ERR PERMITS applies only to semaphores";
const COUNT_RANGE: &str = "ERR count must be an integer from 1 to 4294967296";
const AWAIT_OPTION: &str = "ERR unknown option; expected WAIT <milliseconds>";
const KIND_SEM: &str = "WRONGKIND the key holds a semaphore";
const KIND_LATCH: &str = "WRONGKIND the key holds a latch";

const SEM_KEYS: [&str; 3] = ["sem", "lat", "mtx"];

fn sem_snapshot(con: &mut Connection) -> Snapshot {
    let s = stats(con);
    let mut counters: Vec<String> = STILL
        .iter()
        .map(|f| s.get(*f).cloned().unwrap_or_default())
        .collect();
    counters.push(s.get("dlock_latches_opened").cloned().unwrap_or_default());
    Snapshot {
        locks: SEM_KEYS
            .iter()
            .map(|k| info_without_ttl(con, k.as_bytes()))
            .collect(),
        dbsize: int(&ok(con, &args!["DBSIZE"])),
        string: ok(con, &args!["GET", "str"]),
        counters,
    }
}

fn sem_table() -> Vec<Case> {
    let mut t: Vec<Case> = Vec::new();
    let mut add = |args: Vec<Vec<u8>>, want: Want| t.push(Case { args, want });
    use Want::{Arity, Prefix};
    // Arity: every argument missing.
    for cmd in ["DLOCK.SEMACQUIRE", "dlock.semacquire"] {
        add(args![cmd], Arity);
        add(args![cmd, "sem"], Arity);
        add(args![cmd, "sem", "a"], Arity);
        add(args![cmd, "sem", "a", "LIMIT"], Arity);
    }
    add(args!["DLOCK.LATCHSET"], Arity);
    add(args!["DLOCK.LATCHSET", "lat"], Arity);
    add(args!["DLOCK.LATCHSET", "lat", "1", "2"], Arity);
    add(args!["DLOCK.COUNTDOWN"], Arity);
    add(args!["DLOCK.COUNTDOWN", "lat", "1"], Arity);
    add(args!["DLOCK.AWAIT"], Arity);
    // Owners.
    for key in ["sem", "new"] {
        add(
            args!["DLOCK.SEMACQUIRE", key, "", "LIMIT", "3"],
            Prefix(OWNER_EMPTY),
        );
        add(
            args!["DLOCK.SEMACQUIRE", key, vec![b'o'; 513], "LIMIT", "3"],
            Prefix(OWNER_LONG),
        );
    }
    add(
        args!["DLOCK.RELEASE", "sem", "", "PERMITS", "1"],
        Prefix(OWNER_EMPTY),
    );
    // Options: missing, repeated, valueless, mistyped, out of range.
    for key in ["sem", "new"] {
        let head = args!["DLOCK.SEMACQUIRE", key, "a"];
        let mut case = |tail: Vec<Vec<u8>>, want: &'static str| {
            let mut a = head.clone();
            a.extend(tail);
            add(a, Prefix(want));
        };
        case(args!["PERMITS", "1", "PX", "1000"], LIMIT_MISSING);
        case(args!["PX", "1000"], LIMIT_MISSING);
        case(args!["WAIT", "0", "PERMITS", "1"], LIMIT_MISSING);
        case(args!["LIMIT", "3", "LIMIT", "3"], LIMIT_TWICE);
        case(
            args!["limit", "3", "PERMITS", "1", "Limit", "3"],
            LIMIT_TWICE,
        );
        case(args!["LIMIT", "3", "PERMITS"], PERMITS_VALUE);
        case(args!["PERMITS", "1", "LIMIT"], LIMIT_VALUE);
        case(
            args!["LIMIT", "3", "PERMITS", "1", "PERMITS", "1"],
            PERMITS_TWICE,
        );
        case(args!["LIMIT", "3", "PX"], PX_VALUE);
        case(args!["LIMIT", "3", "WAIT"], WAIT_VALUE);
        case(args!["LIMIT", "3", "PX", "10", "PX", "10"], PX_TWICE);
        case(args!["LIMIT", "3", "WAIT", "0", "WAIT", "0"], WAIT_TWICE);
        case(args!["LIMIT", "3", "PERMITS", "4"], PERMITS_OVER);
        case(args!["LIMIT", "1", "PERMITS", "2"], PERMITS_OVER);
        for bad in [
            &b"0"[..],
            b"-1",
            b"abc",
            b"",
            b"1.5",
            b"+3",
            b" 3",
            b"4294967297",
            b"18446744073709551616",
            b"3\0",
        ] {
            case(vec![b"LIMIT".to_vec(), bad.to_vec()], LIMIT_RANGE);
            case(
                vec![
                    b"LIMIT".to_vec(),
                    b"3".to_vec(),
                    b"PERMITS".to_vec(),
                    bad.to_vec(),
                ],
                PERMITS_RANGE,
            );
            if bad != b"4294967297" {
                case(
                    vec![
                        b"LIMIT".to_vec(),
                        b"3".to_vec(),
                        b"PX".to_vec(),
                        bad.to_vec(),
                    ],
                    PX_RANGE,
                );
            }
        }
        case(args!["LIMIT", "3", "PERMITS", "4294967296"], PERMITS_RANGE);
        for opt in [&b"FOO"[..], b"READ", b"", b"\xff", b"LIMITS", b"NX"] {
            case(
                vec![b"LIMIT".to_vec(), b"3".to_vec(), opt.to_vec()],
                SEM_OPTION,
            );
            case(vec![opt.to_vec(), b"3".to_vec()], SEM_OPTION);
        }
        case(args!["LIMIT", "3", "WAIT", "-1"], WAIT_RANGE);
        case(args!["LIMIT", "3", "WAIT", "1099511627777"], WAIT_RANGE);
    }
    // The limit in force; kinds both ways; WRONGTYPE.
    add(
        args!["DLOCK.SEMACQUIRE", "sem", "b", "LIMIT", "4"],
        Prefix(LIMIT_IN_FORCE),
    );
    add(
        args!["DLOCK.SEMACQUIRE", "sem", "a", "LIMIT", "2", "WAIT", "100"],
        Prefix(LIMIT_IN_FORCE),
    );
    add(
        args!["DLOCK.SEMACQUIRE", "mtx", "a", "LIMIT", "2"],
        Prefix(KIND_MUTEX),
    );
    add(
        args!["DLOCK.SEMACQUIRE", "lat", "a", "LIMIT", "2"],
        Prefix(KIND_LATCH),
    );
    add(
        args!["DLOCK.SEMACQUIRE", "str", "a", "LIMIT", "2"],
        Prefix(WRONGTYPE),
    );
    add(args!["DLOCK.ACQUIRE", "sem", "a"], Prefix(KIND_SEM));
    add(
        args!["DLOCK.RWACQUIRE", "sem", "a", "READ"],
        Prefix(KIND_SEM),
    );
    add(args!["DLOCK.FAIRACQUIRE", "sem", "a"], Prefix(KIND_SEM));
    add(args!["DLOCK.ACQUIRE", "lat", "a"], Prefix(KIND_LATCH));
    add(args!["DLOCK.RELEASE", "lat", "a"], Prefix(KIND_LATCH));
    add(
        args!["DLOCK.RELEASE", "lat", "a", "PERMITS", "1"],
        Prefix(KIND_LATCH),
    );
    add(args!["DLOCK.RENEW", "lat", "a"], Prefix(KIND_LATCH));
    for cmd in [&["DLOCK.COUNTDOWN"][..], &["DLOCK.AWAIT"]] {
        let mut a: Args = cmd.iter().map(b).collect();
        a.push(b("mtx"));
        add(a.clone(), Prefix(KIND_MUTEX));
        a[1] = b("sem");
        add(a.clone(), Prefix(KIND_SEM));
        a[1] = b("str");
        add(a, Prefix(WRONGTYPE));
    }
    add(args!["DLOCK.LATCHSET", "mtx", "2"], Prefix(KIND_MUTEX));
    add(args!["DLOCK.LATCHSET", "sem", "2"], Prefix(KIND_SEM));
    add(args!["DLOCK.LATCHSET", "str", "2"], Prefix(WRONGTYPE));
    // RELEASE PERMITS.
    add(
        args!["DLOCK.RELEASE", "sem", "a", "PERMITS", "3"],
        Prefix(FEWER_PERMITS),
    );
    add(
        args!["DLOCK.RELEASE", "sem", "zz", "PERMITS", "1"],
        Prefix(NOTHELD),
    );
    add(
        args!["DLOCK.RELEASE", "sem", "a", "PERMITS"],
        Prefix(PERMITS_VALUE),
    );
    add(
        args!["DLOCK.RELEASE", "sem", "a", "permits", "1", "PERMITS", "1"],
        Prefix(PERMITS_TWICE),
    );
    add(
        args!["DLOCK.RELEASE", "sem", "a", "PERMITS", "1", "READ"],
        Prefix(RELEASE_SYNTAX),
    );
    add(
        args!["DLOCK.RELEASE", "sem", "a", "READ"],
        Prefix(MODE_NOT_APPLICABLE),
    );
    add(
        args!["DLOCK.RELEASE", "mtx", "a", "PERMITS", "1"],
        Prefix(PERMITS_NOT_APPLICABLE),
    );
    for bad in [&b"0"[..], b"-1", b"x", b"", b"4294967296", b"1.0"] {
        add(
            vec![
                b("DLOCK.RELEASE"),
                b("sem"),
                b("a"),
                b("PERMITS"),
                bad.to_vec(),
            ],
            Prefix(PERMITS_RANGE),
        );
    }
    // LATCHSET count, AWAIT options.
    for bad in [&b"0"[..], b"-1", b"x", b"", b"4294967297", b"1.5", b" 1"] {
        add(
            vec![b("DLOCK.LATCHSET"), b("new"), bad.to_vec()],
            Prefix(COUNT_RANGE),
        );
        add(
            vec![b("DLOCK.LATCHSET"), b("lat"), bad.to_vec()],
            Prefix(COUNT_RANGE),
        );
        // (0 and 4294967297 are valid WAITs.)
        if bad != b"0" && bad != b"4294967297" {
            add(
                vec![b("DLOCK.AWAIT"), b("lat"), b("WAIT"), bad.to_vec()],
                Prefix(WAIT_RANGE),
            );
        }
    }
    add(args!["DLOCK.AWAIT", "lat", "WAIT"], Prefix(WAIT_VALUE));
    add(
        args!["DLOCK.AWAIT", "lat", "WAIT", "1", "WAIT", "1"],
        Prefix(WAIT_TWICE),
    );
    add(args!["DLOCK.AWAIT", "lat", "PX", "1"], Prefix(AWAIT_OPTION));
    add(args!["DLOCK.AWAIT", "lat", "\0"], Prefix(AWAIT_OPTION));
    add(args!["DLOCK.AWAIT", "new", "FOO"], Prefix(AWAIT_OPTION));
    t
}

#[test]
fn semaphore_and_latch_bad_inputs_get_their_error_and_change_nothing() {
    let mut s = Server::start_with(apply_opts());
    let mut c = s.conn();
    let grants = [
        args![
            "DLOCK.SEMACQUIRE",
            "sem",
            "a",
            "LIMIT",
            "3",
            "PERMITS",
            "2",
            "PX",
            LONG
        ],
        args!["DLOCK.ACQUIRE", "mtx", "a", "PX", LONG],
    ];
    for g in &grants {
        assert!(matches!(ok(&mut c, g), Value::Int(_)), "{}", show(g));
    }
    assert_eq!(int(&ok(&mut c, &args!["DLOCK.LATCHSET", "lat", "2"])), 1);
    ok(&mut c, &args!["SET", "str", "value"]);
    let before = sem_snapshot(&mut c);
    assert_eq!(before.dbsize, 4);
    let cases = sem_table();
    assert!(cases.len() > 150, "{} cases", cases.len());
    for case in &cases {
        check_case(&mut c, case);
    }
    assert_eq!(
        sem_snapshot(&mut c),
        before,
        "a refused command changed state"
    );
    assert_eq!(int(&ok(&mut c, &args!["EXISTS", "new"])), 0);
    // A random mix of well- and ill-formed semaphore and latch commands
    // always gets a reply, and the server stays up.
    let mut rng = Rng(0x5E3A_1A7C);
    let words: [&[u8]; 12] = [
        b"LIMIT", b"PERMITS", b"PX", b"WAIT", b"1", b"2", b"3", b"0", b"-1", b"x", b"", b"\0\xff",
    ];
    for _ in 0..3000 {
        let cmd = *rng.pick(&[
            &b"DLOCK.SEMACQUIRE"[..],
            b"DLOCK.LATCHSET",
            b"DLOCK.COUNTDOWN",
            b"DLOCK.AWAIT",
            b"DLOCK.RELEASE",
            b"DLOCK.INFO",
        ]);
        let key = *rng.pick(&[&b"fz0"[..], b"fz1", b"str", b""]);
        let mut a = vec![cmd.to_vec(), key.to_vec()];
        for _ in 0..rng.below(7) {
            a.push(if rng.chance(80) {
                rng.pick(&words).to_vec()
            } else {
                rng.bytes(6)
            });
        }
        // Never block the connection for long.
        if a.iter().any(|x| x.eq_ignore_ascii_case(b"WAIT")) {
            a.retain(|x| !x.eq_ignore_ascii_case(b"WAIT"));
        }
        let r = run(&mut c, &a);
        check_transport(&r, &a);
    }
    s.assert_alive();
}
