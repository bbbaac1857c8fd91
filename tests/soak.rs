//! Soak: 100 000 deterministic random commands against one live server —
//! every DLOCK command with binary, huge, negative, overflowing, missing and
//! extra arguments, forged DLOCK.APPLY payloads, and keyspace commands (DEL,
//! UNLINK, RENAME, MOVE, COPY, SET, PEXPIRE, SELECT, SWAPDB, MULTI/EXEC,
//! FLUSHALL, FLUSHDB, DEBUG RELOAD, ...) sprinkled in — pipelined in batches
//! of 1000 on two connections at once. Checks: every command gets exactly one
//! reply of a sane shape, the server stays up, and after FLUSHALL memory
//! returns to its baseline and no lock or waiter is left.

mod common;
use common::*;

use std::collections::BTreeMap;
use std::thread;
use std::time::{Duration, Instant};

use redis::{ConnectionLike, Value};

/// Commands in the soak proper (split over the workers).
const COMMANDS: usize = 100_000;
/// Commands of the warm-up round that precedes the memory baseline.
const WARMUP: usize = 5_000;
const WORKERS: usize = 2;
const BATCH: usize = 1000;
/// How far above the baseline `used_memory` may end up after FLUSHALL.
const MEMORY_MARGIN: i64 = 256 * 1024;

/// A huge argument: 64 KB to 1 MB of one byte (sometimes digits, so it
/// also exercises number parsing).
fn huge(r: &mut Rng) -> Vec<u8> {
    let len = 64 * 1024 + r.below(960 * 1024) as usize;
    let b = r.pick(&[b'9', b'a', 0u8, 0xff, b'{']);
    vec![b; len]
}

fn key(r: &mut Rng) -> Vec<u8> {
    const POOL: &[&[u8]] = &[
        b"k0",
        b"k1",
        b"k2",
        b"k3",
        b"k4",
        b"k5",
        b"k6",
        b"k7",
        b"{t}a",
        b"{t}b",
        b"a}b",
        b"{}",
        b"",
        b"\0bin\xff",
        b"k\r\n",
        b"dlock:{k0}",
        b"str",
    ];
    match r.below(100) {
        0..=79 => POOL[r.below(POOL.len() as u64) as usize].to_vec(),
        80..=89 => format!("k{}", r.below(300)).into_bytes(),
        _ if r.one_in(400) => huge(r),
        _ => r.bytes(40),
    }
}

fn owner(r: &mut Rng) -> Vec<u8> {
    match r.below(100) {
        0..=79 => format!("o{}", r.below(6)).into_bytes(),
        80..=84 => Vec::new(),
        85..=87 => vec![b'a'; 512],
        88..=89 => vec![b'b'; 513],
        _ if r.one_in(300) => huge(r),
        _ => {
            let mut b = r.bytes(40);
            b.push(0);
            b
        }
    }
}

/// Numbers that are bad in every way, and some good ones.
fn edge_number(r: &mut Rng) -> Vec<u8> {
    const EDGE: &[&str] = &[
        "0",
        "-1",
        "-0",
        "1099511627777",
        "18446744073709551615",
        "18446744073709551616",
        "-9223372036854775808",
        "9223372036854775807",
        "99999999999999999999999999999",
        "abc",
        "1.5",
        " 1",
        "1 ",
        "+1",
        "0x10",
        "1e3",
        "",
        "\0",
        "١٢",
    ];
    match r.below(10) {
        0 => format!("{}", (r.next() | (1 << 41)) as i128).into_bytes(),
        1 => format!("-{}", r.next() >> r.below(64)).into_bytes(),
        2 if r.one_in(50) => vec![b'9'; 64 * 1024 + r.below(960 * 1024) as usize],
        _ => r.pick(EDGE).as_bytes().to_vec(),
    }
}

/// A PX value: valid (short leases so the timers fire, long ones so locks
/// pile up) or bad.
fn px(r: &mut Rng) -> Vec<u8> {
    match r.below(10) {
        0..=2 => format!("{}", 1 + r.below(60)).into_bytes(),
        3..=5 => format!("{}", 1000 + r.below(120_000)).into_bytes(),
        6 => b"1099511627776".to_vec(),
        _ => edge_number(r),
    }
}

/// A WAIT value. Valid values stay tiny (a blocked connection stalls its
/// whole pipeline); every other value is out of range or not a number.
fn wait(r: &mut Rng) -> Vec<u8> {
    match r.below(20) {
        0..=9 => b"0".to_vec(),
        10..=13 => format!("{}", 1 + r.below(3)).into_bytes(),
        _ => {
            let v = edge_number(r);
            // Anything that parses as a number in 4..=2^40 would block long.
            match std::str::from_utf8(&v)
                .ok()
                .and_then(|s| s.parse::<u64>().ok())
            {
                Some(n) if (4..=(1u64 << 40)).contains(&n) && is_plain_digits(&v) => b"0".to_vec(),
                _ => v,
            }
        }
    }
}

fn is_plain_digits(v: &[u8]) -> bool {
    v.iter().all(u8::is_ascii_digit)
}

fn mode(r: &mut Rng) -> Vec<u8> {
    const MODES: &[&[u8]] = &[
        b"READ", b"WRITE", b"read", b"write", b"WrItE", b"READX", b"", b"R", b"\0READ",
    ];
    match r.below(10) {
        0..=3 => b"READ".to_vec(),
        4..=6 => b"WRITE".to_vec(),
        _ => r.pick(MODES).to_vec(),
    }
}

/// `[PX x] [WAIT y]` in any order, sometimes repeated, unknown, valueless.
fn options(r: &mut Rng, args: &mut Vec<Vec<u8>>, allow_wait: bool) {
    let n = match r.below(10) {
        0..=2 => 0,
        3..=6 => 1,
        7..=8 => 2,
        _ => 3,
    };
    for _ in 0..n {
        match r.below(12) {
            0..=4 => {
                args.push(r.pick(&[&b"PX"[..], b"px", b"Px"]).to_vec());
                args.push(px(r));
            }
            5..=8 if allow_wait => {
                args.push(r.pick(&[&b"WAIT"[..], b"wait"]).to_vec());
                args.push(wait(r));
            }
            9 => args.push(b"PX".to_vec()), // valueless
            10 => {
                args.push(r.pick(&[&b"FOO"[..], b"", b"READ", b"NX"]).to_vec());
                args.push(px(r));
            }
            _ => args.push(r.bytes(8)),
        }
    }
}

/// A DLOCK.APPLY payload in dlock's encoding (see dlock-core/src/codec.rs),
/// often well formed, often subtly not, sometimes garbage. Tokens stay
/// far below 2^63 so the server keeps issuing tokens.
fn payload(r: &mut Rng) -> Vec<u8> {
    if r.one_in(10) {
        return Vec::new(); // deletes the lock
    }
    if r.one_in(5) {
        return r.bytes(64);
    }
    let now = now_ms();
    let now_us = now * 1000;
    let mut p = vec![if r.one_in(30) { 2 } else { 1 }];
    p.push(if r.one_in(30) { 3 } else { r.below(3) as u8 });
    let last = now_us + r.below(1 << 40);
    varint(&mut p, last);
    varint(&mut p, if r.one_in(2) { 0 } else { last + r.below(1000) });
    let holders = r.below(4);
    varint(&mut p, holders);
    for _ in 0..holders {
        let o = if r.one_in(20) {
            Vec::new()
        } else {
            format!("o{}", r.below(6)).into_bytes()
        };
        varint(&mut p, o.len() as u64);
        p.extend_from_slice(&o);
        let modes = if r.one_in(20) { 5 } else { 3 };
        p.push(r.below(modes) as u8);
        let count = match r.below(10) {
            0 => 0,
            1 => u64::from(u32::MAX),
            2 => u64::from(u32::MAX) + 1,
            _ => 1 + r.below(3),
        };
        varint(&mut p, count);
        let exp = match r.below(6) {
            0 => 0,
            1 => now.saturating_sub(r.below(10_000)),
            2 => u64::MAX,
            _ => now + r.below(100_000),
        };
        varint(&mut p, exp);
        let tok = match r.below(10) {
            0 => 0,
            1 => last + 1,
            _ => 1 + r.below(last),
        };
        varint(&mut p, tok);
    }
    let waiters = r.below(4);
    varint(&mut p, waiters);
    for _ in 0..waiters {
        varint(&mut p, r.below(5));
        let o = format!("o{}", r.below(6)).into_bytes();
        varint(&mut p, o.len() as u64);
        p.extend_from_slice(&o);
        p.push(r.below(3) as u8);
        let flags = if r.one_in(20) { 3 } else { 2 };
        p.push(r.below(flags) as u8);
        varint(&mut p, now + r.below(100_000));
    }
    match r.below(8) {
        0 if !p.is_empty() => {
            let i = r.below(p.len() as u64) as usize;
            p[i] ^= 1 << r.below(8);
        }
        1 => p.truncate(r.below(p.len() as u64) as usize),
        2 => p.extend(r.bytes(4)),
        _ => {}
    }
    p
}

/// One random command.
fn command(r: &mut Rng) -> Vec<Vec<u8>> {
    let c = |s: &str| s.as_bytes().to_vec();
    let mut a: Vec<Vec<u8>> = Vec::with_capacity(8);
    match r.below(1000) {
        0..=159 => {
            a.push(c(r.pick(&["DLOCK.ACQUIRE", "dlock.acquire"])));
            a.push(key(r));
            a.push(owner(r));
            options(r, &mut a, true);
        }
        160..=299 => {
            a.push(c("DLOCK.RWACQUIRE"));
            a.push(key(r));
            a.push(owner(r));
            if !r.one_in(20) {
                a.push(mode(r));
            }
            options(r, &mut a, true);
        }
        300..=409 => {
            a.push(c("DLOCK.FAIRACQUIRE"));
            a.push(key(r));
            a.push(owner(r));
            options(r, &mut a, true);
        }
        410..=579 => {
            a.push(c("DLOCK.RELEASE"));
            a.push(key(r));
            a.push(owner(r));
            if r.one_in(2) {
                a.push(mode(r));
            }
        }
        580..=659 => {
            a.push(c("DLOCK.RENEW"));
            a.push(key(r));
            a.push(owner(r));
            options(r, &mut a, false);
        }
        660..=739 => {
            a.push(c("DLOCK.INFO"));
            a.push(key(r));
        }
        740..=779 => {
            a.push(c("DLOCK.FORCERELEASE"));
            a.push(key(r));
        }
        780..=829 => {
            a.push(c("DLOCK.APPLY"));
            a.push(key(r));
            a.push(payload(r));
        }
        830..=859 => {
            a.push(c(r.pick(&["DEL", "UNLINK"])));
            a.push(key(r));
            if r.one_in(3) {
                a.push(key(r));
            }
        }
        860..=869 => {
            a.push(c("SET"));
            a.push(c(r.pick(&["str", "k7", "{t}b"])));
            a.push(c("v"));
        }
        870..=879 => {
            a.push(c(r.pick(&["RENAME", "COPY"])));
            a.push(key(r));
            a.push(key(r));
        }
        880..=884 => {
            a.push(c("MOVE"));
            a.push(key(r));
            a.push(c("1"));
        }
        885..=894 => {
            a.push(c("PEXPIRE"));
            a.push(key(r));
            a.push(format!("{}", r.below(50)).into_bytes());
        }
        895..=914 => {
            a.push(c(r.pick(&[
                "TYPE", "DUMP", "EXISTS", "MEMORY", "DEBUG", "OBJECT",
            ])));
            match a[0].as_slice() {
                b"MEMORY" => a.push(c("USAGE")),
                b"DEBUG" => a.push(c("DIGEST-VALUE")),
                b"OBJECT" => a.push(c("FREQ")),
                _ => {}
            }
            a.push(key(r));
        }
        915..=924 => {
            a.push(c("SELECT"));
            a.push(c(r.pick(&["0", "0", "0", "1", "2"])));
        }
        925..=929 => {
            a.push(c("SWAPDB"));
            a.push(c(r.pick(&["0", "1"])));
            a.push(c(r.pick(&["1", "2"])));
        }
        930 => a.push(c("MULTI")),
        931..=941 => a.push(c(r.pick(&["EXEC", "EXEC", "DISCARD"]))),
        942..=944 => {
            a.push(c("CONFIG"));
            a.push(c("SET"));
            a.push(c(r.pick(&[
                "dlock.default-lease-ms",
                "dlock.fair-queue-timeout-ms",
            ])));
            a.push(px(r));
        }
        945..=946 => {
            // Wrong arity.
            a.push(c(r.pick(&[
                "DLOCK.ACQUIRE",
                "DLOCK.RWACQUIRE",
                "DLOCK.FAIRACQUIRE",
                "DLOCK.RELEASE",
                "DLOCK.RENEW",
                "DLOCK.INFO",
                "DLOCK.FORCERELEASE",
                "DLOCK.APPLY",
            ])));
            for _ in 0..r.below(2) {
                a.push(key(r));
            }
        }
        947..=948 => {
            // Extra arguments.
            a.push(c(r.pick(&[
                "DLOCK.INFO",
                "DLOCK.FORCERELEASE",
                "DLOCK.APPLY",
            ])));
            for _ in 0..3 + r.below(4) {
                a.push(r.bytes(12));
            }
        }
        949 if r.one_in(10) => {
            a.push(c(r.pick(&["FLUSHALL", "FLUSHDB"])));
            if r.one_in(2) {
                a.push(c("ASYNC"));
            }
        }
        950 if r.one_in(20) => {
            a.push(c("DEBUG"));
            a.push(c("RELOAD"));
        }
        _ => a.push(c("PING")),
    }
    a
}

/// What a worker saw.
#[derive(Default)]
struct Tally {
    sent: usize,
    answered: usize,
    /// First word of each reply kind / error code.
    kinds: BTreeMap<String, usize>,
    /// Replies of a shape the command cannot give.
    odd: Vec<String>,
    huge_args: usize,
}

impl Tally {
    fn merge(&mut self, o: Tally) {
        self.sent += o.sent;
        self.answered += o.answered;
        self.huge_args += o.huge_args;
        for (k, v) in o.kinds {
            *self.kinds.entry(k).or_default() += v;
        }
        self.odd.extend(o.odd);
    }
}

/// Known error codes: Redis' own and the module's.
const ERROR_CODES: &[&str] = &[
    "ERR",
    "WRONGTYPE",
    "WRONGKIND",
    "NOTHELD",
    "DEADLOCK",
    "EXECABORT",
    "BUSYKEY",
];

fn classify(cmd: &[Vec<u8>], reply: &Value, in_multi: bool, t: &mut Tally) {
    let name = String::from_utf8_lossy(&cmd[0]).to_ascii_uppercase();
    let kind = match reply {
        Value::ServerError(e) => {
            let code = e.code().to_string();
            if !ERROR_CODES.contains(&code.as_str()) {
                t.odd
                    .push(format!("{name}: unexpected error code {code}: {e:?}"));
            }
            format!("error {code}")
        }
        Value::Nil => "nil".into(),
        Value::Int(_) => "int".into(),
        Value::Okay => "OK".into(),
        Value::SimpleString(s) => s.clone(),
        Value::BulkString(_) => "bulk".into(),
        Value::Array(_) => "array".into(),
        other => format!("{other:?}").chars().take(20).collect(),
    };
    *t.kinds.entry(kind).or_default() += 1;
    if in_multi || matches!(reply, Value::ServerError(_)) {
        return;
    }
    let sane = match name.as_str() {
        "DLOCK.ACQUIRE" | "DLOCK.RWACQUIRE" | "DLOCK.FAIRACQUIRE" => {
            matches!(reply, Value::Nil) || matches!(reply, Value::Int(n) if *n > 0)
        }
        "DLOCK.RELEASE" | "DLOCK.RENEW" | "DLOCK.FORCERELEASE" => {
            matches!(reply, Value::Int(0 | 1))
        }
        "DLOCK.INFO" => matches!(reply, Value::Nil | Value::Array(_)),
        "DLOCK.APPLY" => matches!(reply, Value::Okay),
        _ => true,
    };
    if !sane {
        t.odd.push(format!("{name}: reply {reply:?}"));
    }
}

/// Sends `n` random commands from `seed` on a new connection, pipelined in
/// batches; every command must get one reply.
fn run_worker(port: u16, seed: u64, n: usize) -> Tally {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).expect("client");
    let mut con = client
        .get_connection_with_timeout(Duration::from_secs(10))
        .expect("connect");
    con.set_read_timeout(Some(Duration::from_secs(60)))
        .expect("timeout");
    con.set_write_timeout(Some(Duration::from_secs(60)))
        .expect("timeout");
    let mut r = Rng::new(seed);
    let mut t = Tally::default();
    let mut in_multi = false;
    let mut done = 0;
    while done < n {
        let size = BATCH.min(n - done);
        let cmds: Vec<Vec<Vec<u8>>> = (0..size).map(|_| command(&mut r)).collect();
        let mut packed = Vec::new();
        for c in &cmds {
            let mut cmd = redis::Cmd::new();
            for a in c {
                cmd.arg(a.as_slice());
                if a.len() >= 64 * 1024 {
                    t.huge_args += 1;
                }
            }
            packed.extend(cmd.get_packed_command());
        }
        let replies = con
            .req_packed_commands(&packed, 0, size)
            .unwrap_or_else(|e| panic!("seed {seed}: batch at command {done} failed: {e}"));
        t.sent += size;
        t.answered += replies.len();
        assert_eq!(
            replies.len(),
            size,
            "seed {seed}: batch at command {done}: replies"
        );
        for (c, v) in cmds.iter().zip(&replies) {
            let name = c[0].to_ascii_uppercase();
            let multi_reply = in_multi;
            match name.as_slice() {
                b"MULTI" if !in_multi => in_multi = true,
                b"EXEC" | b"DISCARD" => in_multi = false,
                _ => {}
            }
            classify(c, v, multi_reply && name != b"EXEC", &mut t);
        }
        done += size;
    }
    // Leave no transaction open.
    let _ = cmd_str(&mut con, &["DISCARD"]);
    let pong: String = redis::cmd("PING").query(&mut con).expect("PING");
    assert_eq!(pong, "PONG");
    t
}

/// Runs `total` commands split over [`WORKERS`] concurrent connections.
fn run(port: u16, seed: u64, total: usize) -> Tally {
    let handles: Vec<_> = (0..WORKERS as u64)
        .map(|w| {
            let n = total / WORKERS;
            thread::spawn(move || run_worker(port, seed * 1000 + w, n))
        })
        .collect();
    let mut t = Tally::default();
    for h in handles {
        t.merge(h.join().expect("worker panicked"));
    }
    t
}

fn int_field(s: &Server, section: &str, field: &str) -> i64 {
    s.info_field(section, field)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("INFO {section} {field}"))
}

/// FLUSHALL (sync), forget slow commands, wait for lazy frees; then the
/// lowest `used_memory` of a few samples.
fn flushed_memory(s: &Server) -> i64 {
    let mut con = s.conn();
    let _: () = redis::cmd("FLUSHALL").query(&mut con).expect("FLUSHALL");
    let _: () = redis::cmd("SLOWLOG")
        .arg("RESET")
        .query(&mut con)
        .expect("SLOWLOG");
    let idle = wait_until(Duration::from_secs(20), || {
        int_field(s, "memory", "lazyfree_pending_objects") == 0
            && int_field(s, "clients", "connected_clients") <= 2
    });
    assert!(idle, "lazy frees or soak clients did not finish");
    (0..5)
        .map(|_| {
            thread::sleep(Duration::from_millis(20));
            int_field(s, "memory", "used_memory")
        })
        .min()
        .unwrap_or(i64::MAX)
}

#[test]
fn soak_100k_random_commands_every_one_answered_no_crash_no_leak() {
    let started = Instant::now();
    let mut s = Server::start();

    // Warm-up: allocator pools, error stats, client buffers reach their
    // steady state; then the baseline.
    let warm = run(s.port, 7, WARMUP);
    assert_eq!(warm.answered, warm.sent);
    let baseline = flushed_memory(&s);

    let t = run(s.port, 42, COMMANDS);
    let soak_time = started.elapsed();
    s.assert_alive();
    assert_eq!(t.sent, COMMANDS);
    assert_eq!(t.answered, t.sent, "every command answered");
    assert!(
        t.odd.is_empty(),
        "{} replies of an impossible shape, e.g. {:?}",
        t.odd.len(),
        &t.odd[..t.odd.len().min(10)]
    );

    let used = flushed_memory(&s);
    // Memory freed lazily (client buffers, allocator caches) may take a
    // moment to show: wait for it within a generous bound.
    let mut last = used;
    let back = wait_until(Duration::from_secs(10), || {
        last = int_field(&s, "memory", "used_memory");
        last <= baseline + MEMORY_MARGIN
    });
    let locks = s.info_field("dlock", "dlock_locks");
    let waiting = s.info_field("dlock", "dlock_waiting_clients");
    let places = s.info_field("dlock", "dlock_waiters");
    let dlock_info = s.info("dlock");
    eprintln!(
        "[soak] {} commands ({} huge args) answered in {:?}; used_memory baseline {baseline}, \
         after FLUSHALL {last} ({:+} bytes); replies: {:?}\n{dlock_info}",
        t.sent,
        t.huge_args,
        soak_time,
        last - baseline,
        t.kinds
    );
    assert!(
        back,
        "used_memory {last} stays {} bytes above its baseline {baseline}",
        last - baseline
    );
    assert_eq!(locks.as_deref(), Some("0"), "dlock_locks after FLUSHALL");
    assert_eq!(waiting.as_deref(), Some("0"), "dlock_waiting_clients");
    assert_eq!(places.as_deref(), Some("0"), "dlock_waiters after FLUSHALL");
    // The module still works.
    let mut con = s.conn();
    let tok = cmd_str(&mut con, &["DLOCK.ACQUIRE", "after-soak", "o"]);
    assert!(matches!(tok, Ok(Value::Int(n)) if n > 0), "{tok:?}");
    assert_eq!(
        cmd_str(&mut con, &["DLOCK.RELEASE", "after-soak", "o"]).ok(),
        Some(Value::Int(1))
    );
    let log = s.log();
    assert!(
        !log.contains("panicked") && !log.contains("Guru Meditation"),
        "{}",
        s.logs_tail(40)
    );
}
