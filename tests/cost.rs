//! The cost guard (`make test-cost`, part of `make test`): what the server
//! spends in the module per operation, counted by callgrind, against the
//! committed baseline `tests/cost-baseline.txt`.
//!
//! Figures are instructions, not time: callgrind counts every instruction
//! the server executes, the same on a loaded 2-core machine as on an idle
//! one, so a change that makes an operation dearer shows however busy the
//! machine is. Only what the server runs inside the module's entry points
//! counts (`RedisModuleCommandDispatcher`, `moduleHandleBlockedClients`,
//! `moduleTimerHandler`: the commands, the blocked clients' callbacks, the
//! timers, with the module API calls they make), not its event loop, cron
//! or networking, whose share depends on timing. Each figure is one phase
//! of the run divided by its operations; `LASTSAVE` zeroes the counters
//! before a phase and `ECHO` writes them out after it (callgrind's
//! `--zero-before` and `--dump-before`).
//!
//! The figures:
//! - `pair`: one uncontended `DLOCK.ACQUIRE` + `DLOCK.RELEASE` (the lock
//!   made and deleted each time);
//! - `handoff-N`: one server-side handoff with N connections waiting on the
//!   lock: the holder's `RELEASE`, which grants the head of the queue and
//!   answers its connection, and that holder's `ACQUIRE ... WAIT`, which
//!   queues it again at the back (so the queue stays N long).
//!
//! The guard fails when a figure is more than 10 % above its baseline, or
//! when a handoff at 4 096 waiters costs more than 10 % over one at 16 (a
//! handoff is O(1) in the queue: `docs/architecture.md`). Once a change is
//! meant to cost what it costs, `make cost-baseline` rewrites the baseline
//! and its diff goes to review with the change.
//!
//! The baseline belongs to one server build (redis-server 7.0, the minimum
//! supported, as the file says) and one toolchain: the figures include the
//! module API's own work and what the compiler made of the module. On
//! another server the guard refuses to compare.

mod common;
use common::*;

use std::collections::{BTreeMap, VecDeque};
use std::fs;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

/// A figure more than this much over its baseline fails the guard.
const TOLERANCE: f64 = 0.10;
/// Operations per phase: enough that the markers' own cost is noise.
const PAIRS: usize = 200;
const HANDOFFS: usize = 100;
/// Handoffs before a phase is counted, so that the queue, the registry and
/// the allocator are in their steady state.
const WARM_UP: usize = 16;
/// The queue lengths a handoff is counted at.
const QUEUES: [usize; 3] = [16, 256, 4096];
/// Leases and waits that outlast any run, so that no timer fires.
const LONG_MS: &str = "600000";
/// Longest `dlock.slowlog-*-ms`: nothing is logged (what happens when a
/// wait or a hold is slow would depend on how slow callgrind ran), but
/// every wait and hold is observed as with the defaults.
const NEVER_SLOW_MS: &str = "1099511627776";

fn baseline_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/cost-baseline.txt")
}

/// An owner as long as a UUID plus a thread id (what clients send).
fn owner(i: usize) -> String {
    format!("8f14e45f-ceea-467f-a0e6-{i:012}:1")
}

/// `redis-server --version`'s `v=`.
fn server_version() -> String {
    let bin = redis_server_bin();
    let out = Command::new(&bin)
        .arg("--version")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {} --version: {e}", bin.display()));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.split_whitespace()
        .find_map(|w| w.strip_prefix("v="))
        .unwrap_or_else(|| {
            panic!(
                "no version (v=...) in {}'s --version: {text}",
                bin.display()
            )
        })
        .to_string()
}

fn check_valgrind() {
    let found = Command::new("valgrind")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        found,
        "valgrind not found: the cost guard counts with callgrind \
         (make test-cost installs it: scripts/deps.sh valgrind)"
    );
}

/// The server under callgrind, counting only inside the module's entry
/// points, zeroing at `LASTSAVE` and dumping at `ECHO`.
fn start() -> Server {
    let wrapper = [
        "valgrind",
        "--tool=callgrind",
        "--callgrind-out-file=callgrind.out",
        "--collect-atstart=no",
        "--toggle-collect=RedisModuleCommandDispatcher",
        "--toggle-collect=moduleHandleBlockedClients",
        "--toggle-collect=moduleTimerHandler",
        "--zero-before=lastsaveCommand",
        "--dump-before=echoCommand",
    ];
    Server::start_with(
        ServerOpts::new()
            .wrapper(wrapper)
            .module_args(["slowlog-wait-ms", NEVER_SLOW_MS])
            .module_args(["slowlog-hold-ms", NEVER_SLOW_MS]),
    )
}

/// Counts one phase: zeroes the counters, runs `phase`, dumps them, and
/// gives the instructions counted divided by `ops`.
fn phase(server: &Server, marker: &mut RawConn, ops: usize, phase: impl FnOnce()) -> u64 {
    marker.send(&["LASTSAVE"]);
    let r = marker.reply();
    assert!(
        r.starts_with(':'),
        "LASTSAVE answered {r}, expected an integer"
    );
    phase();
    marker.send(&["ECHO", "dump"]);
    assert_eq!(marker.reply(), "dump");
    // Dumps are numbered from 1 in the order they were written.
    let n = fs::read_dir(&server.dir)
        .expect("read the server's dir")
        .filter_map(Result::ok)
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name.strip_prefix("callgrind.out.")
                .is_some_and(|n| n.parse::<u32>().is_ok())
        })
        .count();
    let path = server.dir.join(format!("callgrind.out.{n}"));
    let text = fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("read the callgrind dump {}: {e}", path.display()));
    let total: u64 = text
        .lines()
        .find_map(|l| {
            l.strip_prefix("summary:")
                .or_else(|| l.strip_prefix("totals:"))
        })
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no summary: or totals: line in {}", path.display()));
    (total as f64 / ops as f64).round() as u64
}

/// The figures of this build (see the file's doc).
fn measure() -> BTreeMap<String, u64> {
    let server = start();
    let mut figures = BTreeMap::new();
    let timeout = Duration::from_secs(120);
    let mut marker = RawConn::new(&server, timeout);

    let mut solo = RawConn::new(&server, timeout);
    let me = owner(0);
    let pair = phase(&server, &mut marker, PAIRS, || {
        for _ in 0..PAIRS {
            solo.send(&["DLOCK.ACQUIRE", "cost:solo", &me, "PX", LONG_MS]);
            solo.send(&["DLOCK.RELEASE", "cost:solo", &me]);
        }
        for i in 0..PAIRS {
            let (token, released) = (solo.reply(), solo.reply());
            assert!(
                token.starts_with(':') && released == ":1",
                "pair {i}: ACQUIRE answered {token}, RELEASE {released}; expected a token and :1"
            );
        }
    });
    figures.insert("pair".to_string(), pair);

    // The holder, then the queue in FIFO order: each handoff serves the
    // head, and the holder that let go queues again at the back.
    let key = "cost:queue";
    let mut holder = (RawConn::new(&server, timeout), owner(1));
    holder
        .0
        .send(&["DLOCK.ACQUIRE", key, &holder.1, "PX", LONG_MS]);
    let r = holder.0.reply();
    assert!(
        r.starts_with(':'),
        "the first ACQUIRE answered {r}, expected a token"
    );
    let mut queue = VecDeque::new();
    let mut made = 1;
    for n in QUEUES {
        while queue.len() < n {
            made += 1;
            let mut con = RawConn::new(&server, timeout);
            let who = owner(made);
            con.send(&["DLOCK.ACQUIRE", key, &who, "PX", LONG_MS, "WAIT", LONG_MS]);
            queue.push_back((con, who));
        }
        let mut admin = server.conn();
        let all_waiting = wait_until(Duration::from_secs(120), || {
            info_field(&mut admin, "clients", "blocked_clients").as_deref() == Some(&*n.to_string())
        });
        assert!(all_waiting, "{n} connections did not all wait within 120 s");
        for _ in 0..WARM_UP {
            handoff(key, &mut holder, &mut queue);
        }
        let cost = phase(&server, &mut marker, HANDOFFS, || {
            for _ in 0..HANDOFFS {
                handoff(key, &mut holder, &mut queue);
            }
        });
        figures.insert(format!("handoff-{n}"), cost);
    }
    figures
}

/// A waiting connection (or the holder) and its owner.
type Waiting = (RawConn, String);

/// One handoff at `key`: the holder releases, which serves the head of
/// `queue`; it queues again at the back, and the head becomes the holder.
fn handoff(key: &str, holder: &mut Waiting, queue: &mut VecDeque<Waiting>) {
    let (con, who) = holder;
    con.send(&["DLOCK.RELEASE", key, who]);
    let r = con.reply();
    assert_eq!(r, ":1", "{who}'s RELEASE answered {r}");
    con.send(&["DLOCK.ACQUIRE", key, who, "PX", LONG_MS, "WAIT", LONG_MS]);
    let (mut next, next_owner) = queue.pop_front().expect("a waiter at the head");
    let r = next.reply();
    assert!(
        r.starts_with(':'),
        "{next_owner}, at the head, was answered {r}, expected a token"
    );
    let done = std::mem::replace(holder, (next, next_owner));
    queue.push_back(done);
}

/// The baseline file: `server <version>` and `<figure> <instructions>`
/// lines; `#` starts a comment.
fn read_baseline() -> (String, BTreeMap<String, u64>) {
    let path = baseline_path();
    let text = fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "read {}: {e} (make cost-baseline writes it)",
            path.display()
        )
    });
    let mut server = String::new();
    let mut figures = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let mut words = line.split_whitespace();
        let (Some(name), Some(value), None) = (words.next(), words.next(), words.next()) else {
            panic!(
                "{} line {}: '{line}', expected '<name> <value>'",
                path.display(),
                i + 1
            );
        };
        if name == "server" {
            server = value.to_string();
            continue;
        }
        let v = value.replace(',', "").parse().unwrap_or_else(|_| {
            panic!(
                "{} line {}: '{value}' is not a count of instructions",
                path.display(),
                i + 1
            )
        });
        figures.insert(name.to_string(), v);
    }
    (server, figures)
}

fn write_baseline(version: &str, figures: &BTreeMap<String, u64>) {
    let mut text = String::from(
        "# The cost guard's baseline (tests/cost.rs): instructions the server spends in the\n\
         # module's entry points per operation, counted by callgrind. `make test-cost` fails\n\
         # when a figure is more than 10 % above its line; `make cost-baseline` rewrites\n\
         # this file from the build at hand (review its diff with the change that moved it).\n\
         # pair: an uncontended DLOCK.ACQUIRE + DLOCK.RELEASE; handoff-N: a RELEASE that\n\
         # hands the lock to the head of N waiting connections, and the old holder's\n\
         # ACQUIRE ... WAIT that queues it again.\n",
    );
    text.push_str(&format!("server {version}\n"));
    for (name, v) in figures {
        text.push_str(&format!("{name} {v}\n"));
    }
    let path = baseline_path();
    fs::write(&path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    println!("cost guard: wrote {}", path.display());
}

/// The handoff at the longest queue against the one at the shortest.
fn flatness(figures: &BTreeMap<String, u64>) -> f64 {
    let at = |n: usize| figures.get(&format!("handoff-{n}")).copied().unwrap_or(0) as f64;
    at(QUEUES[2]) / at(QUEUES[0]).max(1.0)
}

#[test]
#[ignore = "the cost guard (callgrind, about 15 s): make test-cost"]
fn costs_stay_within_the_baseline() {
    check_valgrind();
    let version = server_version();
    let write = std::env::var_os("DLOCK_COST_WRITE").is_some_and(|v| v == "1");
    let (base_server, baseline) = if write {
        (version.clone(), BTreeMap::new())
    } else {
        read_baseline()
    };
    assert!(
        base_server == version,
        "the baseline was counted on redis-server {base_server} and this is {version}: \
         run the guard on {base_server} (make test-cost COST_SERVER=/path/to/redis-server), \
         or count a baseline on this one (make cost-baseline)"
    );
    let figures = measure();
    let flat = flatness(&figures);

    println!("cost guard: instructions in the module's entry points per operation (callgrind, redis-server {version})");
    println!("| figure | now | baseline | change |");
    println!("|---|---:|---:|---:|");
    let mut over = Vec::new();
    for (name, &now) in &figures {
        match baseline.get(name) {
            Some(&base) => {
                let change = now as f64 / base.max(1) as f64 - 1.0;
                println!("| {name} | {now} | {base} | {:+.1} % |", change * 100.0);
                if change > TOLERANCE {
                    over.push(format!(
                        "{name}: {now} instructions, {:+.1} % over the baseline's {base}",
                        change * 100.0
                    ));
                }
            }
            None => {
                println!("| {name} | {now} | - | - |");
                if !write {
                    over.push(format!("{name}: no baseline (make cost-baseline)"));
                }
            }
        }
    }
    println!(
        "handoff at {} waiters / at {}: {flat:.3}",
        QUEUES[2], QUEUES[0]
    );
    if flat > 1.0 + TOLERANCE {
        over.push(format!(
            "a handoff at {} waiters costs {flat:.2}x one at {}: it grows with the queue \
             (expected the same cost within 10 %)",
            QUEUES[2], QUEUES[0]
        ));
    }
    if write && over.is_empty() {
        write_baseline(&version, &figures);
    }
    assert!(over.is_empty(), "cost guard failed:\n{}", over.join("\n"));
}
