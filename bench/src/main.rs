//! `make bench`: dlock against the locks people use today, in one run.
//!
//! Starts its own redis-server (or `REDIS_SERVER`, e.g. valkey-server) with
//! the module on a free port, measures (1) server time per call (INFO
//! commandstats under a steady load, and in separate pipelined phases),
//! (2) memory per held lock and where the bytes go, (3) contention against
//! Redis' own BLPOP handoff (the floor), SET NX PX, a Redisson-style Lua lock,
//! (4) handoff cost against 16 / 256 / 4096 waiting connections, (5) scale on
//! one node (1 M held locks, their leases ending at once, FLUSHALL, 10 000
//! waiters, with the event loop's longest stall), the semaphore scenario, and
//! prints a Markdown report with every target met / missed (also written to
//! `bench/results.md`). Run with `--help` for the options.

mod contention;
mod deadlock;
mod mass_expiry;
mod memory;
mod percall;
mod report16;
mod report27;
mod scale;
mod scripts;
mod semaphore;
mod server;
mod stats_cost;

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use contention::{Algo, Cell};
use memory::Kind;
use percall::Op;
use server::RedisServer;

/// Lease of every lock the bench takes (Redisson's default watchdog lease).
pub const LEASE_MS: u64 = 30_000;
/// Owner used by single-owner phases: a 36-char uuid and a thread id.
pub const OWNER: &str = "8f14e45f-ceea-467f-a0e6-1d7f3b2c9a01:1";

const USAGE: &str = "\
dlock-bench: dlock against Redis' own BLPOP handoff, SET NX PX, DEL, a compare-and-delete
Lua release and a Redisson-style Lua lock, plus handoff cost against waiters and scale on
one node, in one run, on its own redis-server (REDIS_SERVER=valkey-server works too).

USAGE: cargo run --release -p dlock-bench -- [options]      (or: make bench BENCH_ARGS='...')

  --quick                 fast run: 1 repeat everywhere, 20000 calls, 400 ms cells
  --repeats N             repeats of the per-call and memory parts (default 5)
  --ops N                 calls per operation and repeat (default 100000)
  --pipeline N            commands per pipeline (default 100)
  --locks N               held locks for the memory part (default 100000)
  --duration-ms N         time per contention cell (default 3000)
  --contention-repeats N  repeats of each contention cell (default 3)
  --clients LIST          contention client counts (default 4,16,64)
  --holds-ms LIST         contention hold times in ms (default 0,1)
  --algos LIST            contention algorithms: blpop,dlock,setnx,redisson (default all)
  --waiters LIST          waiting connections for the handoff-cost part (default 16,256,4096)
  --scale-locks N         held locks for the scale part (default 1000000; --quick: 100000)
  --scale-waiters N       connections waiting on one lock in the scale part (default 10000)
  --only LIST             parts to run: percall,memory,contention,semaphore,waiters,scale,deadlock,stats,
                          massexpiry (--scale-locks leases ending at once, 1000 of them waited on)
                          (default all), or waiting: only the --scale-waiters connections waiting on
                          one lock (stall, memory per connection; part of scale)
  --out PATH              report file (default bench/results.md; --quick: bench/results-quick.md)

Environment: DLOCK_MODULE (module path, default target/release/libdlock.so),
REDIS_SERVER (redis-server binary), DLOCK_BENCH_KEEP_DIR (keep the server's dir).";

#[derive(Clone, Debug)]
struct Opts {
    quick: bool,
    repeats: usize,
    ops: usize,
    pipeline: usize,
    locks: usize,
    duration_ms: u64,
    contention_repeats: usize,
    clients: Vec<usize>,
    holds_ms: Vec<u64>,
    parts: Vec<String>,
    algos: Vec<Algo>,
    waiters: Vec<usize>,
    scale_locks: usize,
    scale_waiters: usize,
    out: PathBuf,
}

const PARTS: [&str; 9] = [
    "percall",
    "memory",
    "contention",
    "semaphore",
    "waiters",
    "scale",
    "deadlock",
    "stats",
    "massexpiry",
];

fn bench_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn list<T: std::str::FromStr>(s: &str, flag: &str) -> Vec<T> {
    s.split(',')
        .map(|x| {
            x.trim()
                .parse()
                .unwrap_or_else(|_| die(&format!("{flag}: bad value {x:?}")))
        })
        .collect()
}

fn die(msg: &str) -> ! {
    eprintln!("dlock-bench: {msg}\n\n{USAGE}");
    std::process::exit(2)
}

fn parse_args() -> Opts {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let quick = args.iter().any(|a| a == "--quick");
    let mut o = Opts {
        quick,
        repeats: if quick { 1 } else { 5 },
        ops: if quick { 20_000 } else { 100_000 },
        pipeline: 100,
        locks: 100_000,
        duration_ms: if quick { 400 } else { 3000 },
        contention_repeats: if quick { 1 } else { 3 },
        clients: vec![4, 16, 64],
        holds_ms: vec![0, 1],
        parts: PARTS.iter().map(|p| p.to_string()).collect(),
        algos: Algo::ALL.to_vec(),
        waiters: vec![16, 256, 4096],
        scale_locks: if quick { 100_000 } else { 1_000_000 },
        scale_waiters: 10_000,
        out: bench_dir().join(if quick {
            "results-quick.md"
        } else {
            "results.md"
        }),
    };
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        if a == "--quick" {
            continue;
        }
        if a == "-h" || a == "--help" {
            println!("{USAGE}");
            std::process::exit(0);
        }
        let mut val = || {
            it.next()
                .unwrap_or_else(|| die(&format!("{a} needs a value")))
        };
        let num = |v: String| -> usize {
            v.parse()
                .ok()
                .filter(|&n| n > 0)
                .unwrap_or_else(|| die(&format!("{a}: expected a positive integer, got {v:?}")))
        };
        match a.as_str() {
            "--repeats" => o.repeats = num(val()),
            "--ops" => o.ops = num(val()),
            "--pipeline" => o.pipeline = num(val()),
            "--locks" => o.locks = num(val()),
            "--duration-ms" => o.duration_ms = num(val()) as u64,
            "--contention-repeats" => o.contention_repeats = num(val()),
            "--clients" => o.clients = list(&val(), "--clients"),
            "--holds-ms" => o.holds_ms = list(&val(), "--holds-ms"),
            "--only" => o.parts = list(&val(), "--only"),
            "--waiters" => o.waiters = list(&val(), "--waiters"),
            "--scale-locks" => o.scale_locks = num(val()),
            "--scale-waiters" => o.scale_waiters = num(val()),
            "--algos" => {
                o.algos = list::<String>(&val(), "--algos")
                    .iter()
                    .map(|a| match a.as_str() {
                        "dlock" => Algo::Dlock,
                        "setnx" => Algo::SetNx,
                        "redisson" => Algo::Redisson,
                        "blpop" => Algo::Blpop,
                        _ => die(&format!("--algos: unknown algorithm {a:?}")),
                    })
                    .collect()
            }
            "--out" => o.out = PathBuf::from(val()),
            _ => die(&format!("unknown option {a}")),
        }
    }
    if o.waiters.iter().any(|&w| w < 2) {
        die("--waiters: each count must be at least 2 (one holder, one waiter)");
    }
    // Every waiting connection is a socket of this process as well.
    let room = scale::fd_limit().saturating_sub(200);
    for w in o
        .waiters
        .iter_mut()
        .chain(std::iter::once(&mut o.scale_waiters))
    {
        if *w > room {
            eprintln!(
                "dlock-bench: {w} waiting connections exceed this process's open-file limit \
                 (ulimit -n); using {room}"
            );
            *w = room;
        }
    }
    for p in &o.parts {
        if !PARTS.contains(&p.as_str()) && p != "waiting" {
            die(&format!("--only: unknown part {p:?}"));
        }
    }
    o
}

fn module_path() -> PathBuf {
    match std::env::var_os("DLOCK_MODULE") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => {
            let root = bench_dir().join("..");
            let target = match std::env::var_os("CARGO_TARGET_DIR") {
                Some(t) if !t.is_empty() => root.join(t),
                _ => root.join("target"),
            };
            target.join("release").join("libdlock.so")
        }
    }
}

fn redis_bin() -> PathBuf {
    match std::env::var_os("REDIS_SERVER") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => PathBuf::from("redis-server"),
    }
}

// ---- small statistics and formatting helpers --------------------------------

pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.retain(|x| !x.is_nan());
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Median and spread (min–max) of a series, as "m (lo–hi)" when repeated.
pub(crate) fn spread(v: &[f64], f: impl Fn(f64) -> String) -> String {
    let m = median(v.to_vec());
    if v.len() < 2 {
        return f(m);
    }
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!("{} ({}–{})", f(m), f(lo), f(hi))
}

pub(crate) fn us(x: f64) -> String {
    format!("{x:.2}")
}

pub(crate) fn ratio(x: f64) -> String {
    format!("{x:.2}×")
}

fn rate(x: f64) -> String {
    if x >= 10_000.0 {
        format!("{:.0} k", x / 1000.0)
    } else {
        format!("{x:.0}")
    }
}

pub(crate) fn dur(micros: f64) -> String {
    if micros.is_nan() {
        "–".into()
    } else if micros < 1000.0 {
        format!("{micros:.0} µs")
    } else if micros < 1_000_000.0 {
        format!("{:.1} ms", micros / 1000.0)
    } else {
        format!("{:.2} s", micros / 1_000_000.0)
    }
}

/// A duration in µs with more precision in the millisecond range.
fn fine(micros: f64) -> String {
    if micros < 1000.0 {
        format!("{micros:.0} µs")
    } else {
        format!("{:.3} ms", micros / 1000.0)
    }
}

fn pass(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "**missed**"
    }
}

fn sh(cmd: &str, args: &[&str]) -> Option<String> {
    let out = std::process::Command::new(cmd).args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The parts added for issue 16.
#[derive(Default)]
struct Extra {
    load: Vec<HashMap<percall::Pair, percall::LoadSample>>,
    waiters: Vec<(scale::HandAlgo, scale::ScaleCell)>,
    scale: Option<scale::Scale>,
    /// The waiting part alone (`--only waiting`, issue 27).
    waiting: Option<scale::Scale>,
    /// The massexpiry part's goal figures (issue 27).
    mass: Option<report27::MassExpiry>,
}

pub(crate) struct Target {
    /// The issue that set it.
    pub issue: u32,
    pub what: String,
    pub measured: String,
    pub limit: String,
    pub ok: bool,
}

// ---- the run ----------------------------------------------------------------

fn main() {
    let o = parse_args();
    let module = module_path();
    let module = module.canonicalize().unwrap_or(module);
    let started = Instant::now();
    eprintln!(
        "dlock-bench: starting redis-server with {}",
        module.display()
    );
    let mut srv = RedisServer::start(&redis_bin(), &module).unwrap_or_else(|e| {
        eprintln!("dlock-bench: {e}");
        std::process::exit(1)
    });
    eprintln!(
        "dlock-bench: redis-server pid {} on port {}",
        srv.pid, srv.port
    );
    let mut con = srv.conn();
    let shas = scripts::load(&mut con);
    let mut sinfo = server::info(&mut con, "server");
    sinfo.extend(server::info(&mut con, "memory"));

    let mut extra = Extra::default();
    // Part 1.
    let mut percall_reps: Vec<percall::Repeat> = Vec::new();
    if o.parts.iter().any(|p| p == "percall") {
        for r in 0..o.repeats {
            eprintln!(
                "[{:>5.1}s] per-call costs, repeat {}/{}",
                started.elapsed().as_secs_f64(),
                r + 1,
                o.repeats
            );
            percall_reps.push(percall::run_repeat(&mut con, &shas, o.ops, o.pipeline));
            srv.check_alive();
            eprintln!(
                "[{:>5.1}s] per-call costs under load, repeat {}/{}",
                started.elapsed().as_secs_f64(),
                r + 1,
                o.repeats
            );
            extra.load.push(percall::run_load(&srv, &shas, o.ops));
            srv.check_alive();
        }
    }

    // Part 2.
    let mut mem: HashMap<Kind, Vec<memory::Sample>> = HashMap::new();
    if o.parts.iter().any(|p| p == "memory") {
        for r in 0..o.repeats {
            eprintln!(
                "[{:>5.1}s] memory per lock, repeat {}/{}",
                started.elapsed().as_secs_f64(),
                r + 1,
                o.repeats
            );
            for k in Kind::ALL {
                let s = memory::measure(&mut con, &shas, k, o.locks);
                mem.entry(k).or_default().push(s);
            }
            srv.check_alive();
        }
    }

    // Part 3.
    let mut cells: HashMap<(Algo, usize, u64), Vec<Cell>> = HashMap::new();
    let mut rtt = None;
    if o.parts.iter().any(|p| p == "contention") {
        rtt = Some(contention::ping_rtt(&mut con, 2000));
        let duration = Duration::from_millis(o.duration_ms);
        for rep in 0..o.contention_repeats {
            for &hold in &o.holds_ms {
                for &c in &o.clients {
                    for &algo in &o.algos {
                        eprintln!(
                            "[{:>5.1}s] contention repeat {}/{}: {:?}, {c} clients, hold {hold} ms",
                            started.elapsed().as_secs_f64(),
                            rep + 1,
                            o.contention_repeats,
                            algo
                        );
                        let cell = contention::run_cell(&srv, &shas, algo, c, hold, duration, rep);
                        srv.check_alive();
                        cells.entry((algo, c, hold)).or_default().push(cell);
                    }
                }
            }
        }
    }

    // Part 4: the semaphore scenario (issue 13).
    let mut sem_section = String::new();
    if o.parts.iter().any(|p| p == "semaphore") {
        let duration = Duration::from_millis(o.duration_ms);
        let mut sem_cells: Vec<(semaphore::SemAlgo, Vec<semaphore::SemCell>)> = Vec::new();
        for algo in semaphore::SemAlgo::ALL {
            let mut runs = Vec::new();
            for rep in 0..o.contention_repeats {
                eprintln!(
                    "[{:>5.1}s] semaphore repeat {}/{}: {algo:?}, 64 clients, limit 8, hold 1 ms",
                    started.elapsed().as_secs_f64(),
                    rep + 1,
                    o.contention_repeats
                );
                runs.push(semaphore::run_cell(&srv, algo, duration, rep));
                srv.check_alive();
            }
            sem_cells.push((algo, runs));
        }
        sem_section = semaphore::render(&sem_cells, duration).0;
    }

    // Part 5: handoff cost against the number of waiting connections.
    if o.parts.iter().any(|p| p == "waiters") {
        let d = Duration::from_millis(if o.quick { 500 } else { 2000 });
        for &n in &o.waiters {
            for algo in [scale::HandAlgo::Blpop, scale::HandAlgo::Dlock] {
                eprintln!(
                    "[{:>5.1}s] handoff cost: {algo:?}, {n} waiting connections",
                    started.elapsed().as_secs_f64()
                );
                let c = scale::waiter_scaling(&srv, algo, n, d);
                srv.check_alive();
                extra.waiters.push((algo, c));
            }
        }
    }

    // Part 6: scale on one node.
    if o.parts.iter().any(|p| p == "scale") {
        let log = |m: &str| eprintln!("[{:>5.1}s] {m}", started.elapsed().as_secs_f64());
        extra.scale = Some(scale::run_scale(&srv, o.scale_locks, o.scale_waiters, &log));
        srv.check_alive();
    } else if o.parts.iter().any(|p| p == "waiting") {
        // Only its 10 000 waiting connections (issue 27).
        let log = |m: &str| eprintln!("[{:>5.1}s] {m}", started.elapsed().as_secs_f64());
        let mut w = scale::Scale::default();
        scale::run_waiting(&srv, &mut srv.conn(), o.scale_waiters, &log, &mut w);
        srv.check_alive();
        extra.waiting = Some(w);
    }

    // Part 7: deadlock detection's cost on the handoff path (issue 24).
    let mut deadlock_section = String::new();
    if o.parts.iter().any(|p| p == "deadlock") {
        let log = |m: &str| eprintln!("[{:>5.1}s] {m}", started.elapsed().as_secs_f64());
        let (sizes, repeats, d): (&[usize], usize, u64) = if o.quick {
            (&[16, 256], 1, 500)
        } else {
            (&[16, 256, 4096], 2, 1500)
        };
        let room = scale::fd_limit().saturating_sub(200);
        let sizes: Vec<usize> = sizes.iter().map(|&n| n.min(room)).collect();
        deadlock_section = deadlock::run(&srv, &sizes, repeats, Duration::from_millis(d), &log);
        srv.check_alive();
    }

    // Part 8: the cost of wait and hold statistics (issue 23).
    let mut stats_section = String::new();
    if o.parts.iter().any(|p| p == "stats") {
        let log = |m: &str| eprintln!("[{:>5.1}s] {m}", started.elapsed().as_secs_f64());
        let d = Duration::from_millis(if o.quick { 1000 } else { o.duration_ms });
        stats_section = stats_cost::run(&mut srv, &shas, o.repeats, o.ops, o.pipeline, d, &log);
    }

    // Part 9: waiters first when many leases end together (issue 27).
    let mut mass_section = String::new();
    if o.parts.iter().any(|p| p == "massexpiry") {
        let log = |m: &str| eprintln!("[{:>5.1}s] {m}", started.elapsed().as_secs_f64());
        let m = mass_expiry::run(&srv, o.scale_locks, 1000, &log);
        srv.check_alive();
        mass_section = mass_expiry::render(&m);
        extra.mass = Some(report27::MassExpiry {
            leases: m.locks,
            locks_with_waiters: m.waiters,
            grant_p99_ms: m.pct(99.0),
            last_deleted_ms: m.all_deleted_ms,
        });
    }

    let mut report = render(
        &o,
        &module,
        &sinfo,
        &percall_reps,
        &mem,
        &cells,
        rtt,
        &extra,
        started,
    );
    report.push_str(&sem_section);
    report.push_str(&deadlock_section);
    report.push_str(&stats_section);
    report.push_str(&mass_section);
    drop(con);
    drop(srv); // stops redis-server
    print!("{report}");
    if let Err(e) = std::fs::write(&o.out, &report) {
        eprintln!("dlock-bench: cannot write {}: {e}", o.out.display());
        std::process::exit(1);
    }
    eprintln!(
        "dlock-bench: wrote {} ({:.0} s)",
        o.out.display(),
        started.elapsed().as_secs_f64()
    );
}

#[allow(clippy::too_many_arguments)]
fn render(
    o: &Opts,
    module: &std::path::Path,
    sinfo: &HashMap<String, String>,
    reps: &[percall::Repeat],
    mem: &HashMap<Kind, Vec<memory::Sample>>,
    cells: &HashMap<(Algo, usize, u64), Vec<Cell>>,
    rtt: Option<f64>,
    extra: &Extra,
    started: Instant,
) -> String {
    let mut s = String::new();
    let mut targets: Vec<Target> = Vec::new();

    // Header: how to reproduce, and where it ran.
    let date = sh("date", &["-u", "+%Y-%m-%d %H:%M UTC"]).unwrap_or_default();
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let nproc = sh("nproc", &[]).unwrap_or_else(|| "?".into());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|k| k.trim().to_string())
        .unwrap_or_default();
    let load = std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default();
    let root = bench_dir().join("..");
    let root_s = root.to_string_lossy().to_string();
    let rev = sh("git", &["-C", &root_s, "rev-parse", "--short", "HEAD"]).unwrap_or_default();
    let dirty = sh(
        "git",
        &["-C", &root_s, "status", "--porcelain", "--", "src"],
    )
    .map(|t| !t.is_empty())
    .unwrap_or(false);
    let mtime = std::fs::metadata(module)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| d.as_secs())
        .and_then(|secs| {
            sh(
                "date",
                &["-u", "-d", &format!("@{secs}"), "+%Y-%m-%d %H:%M UTC"],
            )
        })
        .unwrap_or_default();
    let cmdline = {
        let a: Vec<String> = std::env::args().skip(1).collect();
        let base = if a.is_empty() {
            "make bench".to_string()
        } else {
            format!("cargo run --release -p dlock-bench -- {}", a.join(" "))
        };
        match std::env::var("REDIS_SERVER") {
            Ok(bin) if !bin.is_empty() && bin != "redis-server" => {
                format!("REDIS_SERVER={bin} {base}")
            }
            _ => base,
        }
    };

    let _ = writeln!(
        s,
        "# dlock benchmark{}\n",
        if o.quick { " (quick run)" } else { "" }
    );
    let _ = writeln!(
        s,
        "Reproduce: `{cmdline}` ({date}; {:.0} s).  ",
        started.elapsed().as_secs_f64()
    );
    let _ = writeln!(
        s,
        "Machine: {nproc} CPUs (nproc), {cpu}, Linux {kernel}, load average at the end {load}; \
         {} ({}), started by the bench with `--save \"\" --appendonly no --maxclients 16000`.  ",
        server_name(sinfo),
        sinfo.get("mem_allocator").map_or("?", String::as_str),
    );
    let _ = writeln!(
        s,
        "Module: `{}` built {mtime}, git {rev}{}.  ",
        module.display(),
        if dirty {
            " + uncommitted src/ changes"
        } else {
            ""
        }
    );
    let _ = writeln!(
        s,
        "Figures are medians over repeats, with (min–max) where repeated; ratios are taken \
         within each repeat, then their median. Absolute figures move by ±40 % between runs on \
         a shared machine; ratios within one run hold.\n"
    );

    // ---- part 1 ----
    if !reps.is_empty() || !extra.load.is_empty() {
        let _ = writeln!(s, "## 1. Server time per call\n");
        report16::load(&mut s, &mut targets, &extra.load, o.ops);
    }
    if !reps.is_empty() {
        let _ = writeln!(
            s,
            "### Separate phases on a growing keyspace, and pipelined throughput\n\n\
             {} repeats × {} calls per operation on keys `lock:0..{}`, pipelines of {}, \
             `CONFIG RESETSTAT` before each; server µs/call = `INFO commandstats` usec / calls \
             (for scripts: the whole EVALSHA). Every release hits a held lock (checked).\n",
            reps.len(),
            o.ops,
            o.ops - 1,
            o.pipeline
        );
        let _ = writeln!(
            s,
            "| operation | server µs/call | × floor | pipelined calls/s | × floor | issue's figure (µs) |"
        );
        let _ = writeln!(s, "|---|---:|---:|---:|---:|---:|");
        for op in Op::ALL {
            let floor = if op.is_acquire() { Op::SetNx } else { Op::Del };
            let u: Vec<f64> = reps.iter().map(|r| r[&op].usec).collect();
            let t: Vec<f64> = reps.iter().map(|r| r[&op].ops_per_s).collect();
            let ur: Vec<f64> = reps.iter().map(|r| r[&op].usec / r[&floor].usec).collect();
            let tr: Vec<f64> = reps
                .iter()
                .map(|r| r[&op].ops_per_s / r[&floor].ops_per_s)
                .collect();
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} |",
                op.label(),
                spread(&u, us),
                ratio(median(ur)),
                spread(&t, rate),
                ratio(median(tr)),
                op.reference_usec().map_or("".into(), |x| format!("≈ {x}"))
            );
        }
        // Pairs.
        let pair = |r: &percall::Repeat, a: Op, b: Op| r[&a].usec + r[&b].usec;
        let pairs = [
            (
                "SET NX PX + DEL (floor)",
                Op::SetNx,
                Op::Del,
                Some(2.8 + 1.1),
            ),
            (
                "SET NX PX + compare-and-delete Lua",
                Op::SetNx,
                Op::CadRelease,
                None,
            ),
            (
                "**DLOCK.ACQUIRE + DLOCK.RELEASE**",
                Op::DlockAcquire,
                Op::DlockRelease,
                None,
            ),
            (
                "Redisson-style Lua acquire + release",
                Op::RedissonAcquire,
                Op::RedissonRelease,
                Some(9.9 + 7.7),
            ),
        ];
        let _ = writeln!(
            s,
            "\n| lock: acquire + release | server µs per pair | × (SET NX PX + DEL) | × Redisson pair | issue's figure (µs) |"
        );
        let _ = writeln!(s, "|---|---:|---:|---:|---:|");
        for (label, a, b, refv) in pairs {
            let v: Vec<f64> = reps.iter().map(|r| pair(r, a, b)).collect();
            let rf: Vec<f64> = reps
                .iter()
                .map(|r| pair(r, a, b) / pair(r, Op::SetNx, Op::Del))
                .collect();
            let rr: Vec<f64> = reps
                .iter()
                .map(|r| pair(r, a, b) / pair(r, Op::RedissonAcquire, Op::RedissonRelease))
                .collect();
            let _ = writeln!(
                s,
                "| {label} | {} | {} | {} | {} |",
                spread(&v, us),
                ratio(median(rf)),
                ratio(median(rr)),
                refv.map_or("".into(), |x| format!("≈ {x:.1}"))
            );
        }
        let rf = median(
            reps.iter()
                .map(|r| pair(r, Op::DlockAcquire, Op::DlockRelease) / pair(r, Op::SetNx, Op::Del))
                .collect(),
        );
        let rr = median(
            reps.iter()
                .map(|r| {
                    pair(r, Op::DlockAcquire, Op::DlockRelease)
                        / pair(r, Op::RedissonAcquire, Op::RedissonRelease)
                })
                .collect(),
        );
        let tr = median(
            reps.iter()
                .map(|r| r[&Op::DlockAcquire].ops_per_s / r[&Op::SetNx].ops_per_s)
                .collect(),
        );
        targets.push(Target {
            issue: 5,
            what: "ACQUIRE + RELEASE server time vs SET NX PX + DEL".into(),
            measured: ratio(rf),
            limit: "≤ 1.50×".into(),
            ok: rf <= 1.5,
        });
        targets.push(Target {
            issue: 5,
            what: "ACQUIRE + RELEASE server time vs the Redisson-style pair".into(),
            measured: ratio(rr),
            limit: "≤ 0.40×".into(),
            ok: rr <= 0.4,
        });
        targets.push(Target {
            issue: 5,
            what: "pipelined ACQUIRE throughput vs SET NX PX".into(),
            measured: ratio(tr),
            limit: "≥ 0.75×".into(),
            ok: tr >= 0.75,
        });
        s.push('\n');
    }

    // ---- part 2 ----
    if !mem.is_empty() {
        let n = mem[&Kind::SetString].len();
        let _ = writeln!(
            s,
            "## 2. Memory per held lock\n\n\
             `used_memory` delta over {} held locks (`lock:0..{}`, owner = 36-char uuid + `:1`, \
             lease {} ms) divided by their number, and `MEMORY USAGE lock:0 SAMPLES 0`; \
             {n} repeat(s).\n",
            o.locks,
            o.locks - 1,
            LEASE_MS
        );
        let _ = writeln!(
            s,
            "| lock | bytes per held lock (used_memory Δ) | × SET string | MEMORY USAGE of one | × SET string | issue's figure (B) |"
        );
        let _ = writeln!(s, "|---|---:|---:|---:|---:|---:|");
        let med = |k: Kind, f: fn(&memory::Sample) -> f64| median(mem[&k].iter().map(f).collect());
        let set_pl = med(Kind::SetString, |x| x.per_lock);
        let set_mu = med(Kind::SetString, |x| x.usage);
        for k in Kind::ALL {
            let pl = med(k, |x| x.per_lock);
            let mu = med(k, |x| x.usage);
            let _ = writeln!(
                s,
                "| {} | {pl:.0} | {} | {mu:.0} | {} | {} |",
                k.label(),
                ratio(pl / set_pl),
                ratio(mu / set_mu),
                k.reference().map_or("".into(), |x| format!("≈ {x:.0}"))
            );
        }
        s.push('\n');
        let redis_jemalloc = !sinfo.contains_key("valkey_version")
            && sinfo
                .get("mem_allocator")
                .is_some_and(|a| a.starts_with("jemalloc"));
        report16::memory(
            &mut s,
            &mut targets,
            mem,
            o.locks,
            &server_name(sinfo),
            redis_jemalloc,
        );
        let pl = med(Kind::Dlock, |x| x.per_lock);
        let mu = med(Kind::Dlock, |x| x.usage);
        targets.push(Target {
            issue: 5,
            what: "memory per held lock (used_memory Δ) vs SET-string lock".into(),
            measured: format!("{pl:.0} B vs {set_pl:.0} B"),
            limit: "≤ SET string".into(),
            ok: pl <= set_pl,
        });
        targets.push(Target {
            issue: 5,
            what: "MEMORY USAGE of one held lock vs SET-string lock".into(),
            measured: format!("{mu:.0} B vs {set_mu:.0} B"),
            limit: "≤ SET string".into(),
            ok: mu <= set_mu,
        });
        s.push('\n');
    }

    // ---- part 3 ----
    if !cells.is_empty() {
        let _ = writeln!(
            s,
            "## 3. Contention on one key\n\n\
             Each client is a thread with its own connection (Redisson-style clients have a \
             second one, subscribed to the unlock channel) looping acquire → hold → release \
             for {} ms per cell, {} repeat(s). grants/s counts grants made within that time; \
             wait = first acquire command sent → grant reply (clients finish the wait they are \
             in when time is up; those waits count too); commands per grant = the client's \
             acquire attempts + releases, per grant (Redisson's SUBSCRIBE/UNSUBSCRIBE are not \
             counted: the subscription stays open); fairness = Jain's index over the clients' \
             grant counts; overlaps = grants that found another client inside (must be 0). \
             dlock: `DLOCK.ACQUIRE … WAIT {}`; SET NX PX: retry every 10 ms, release by \
             compare-and-delete Lua; Redisson-style: Lua acquire, on failure wait for an unlock \
             message at most the returned PTTL, retry on each message — with one subscription \
             per simulated client process, every unlock message wakes every waiting client, so \
             each release costs about clients − 1 retries. Hold = sleep + spin to the exact \
             time.\n",
            o.duration_ms,
            o.contention_repeats,
            contention::DLOCK_WAIT_MS
        );
        if let Some(rtt) = rtt {
            let _ = writeln!(
                s,
                "For scale: one PING round trip on an idle connection of this server took \
                 {} (median of 2000, measured before the cells). *Hold done* = mean time from \
                 grant received to release sent (the requested hold plus the client's timer and \
                 scheduling overshoot); *handoff* = release sent by one client → grant received \
                 by the next (the time the lock sits between holders; at least about one round \
                 trip). grants/s ≈ 1 / (hold done + mean handoff), up to the drain at the end.\n",
                dur(rtt)
            );
        }
        for &hold in &o.holds_ms {
            let _ = writeln!(s, "### Hold {hold} ms\n");
            let _ = writeln!(
                s,
                "| algorithm | clients | grants/s | × Redisson | hold done | handoff p50 / mean / p99 | commands per grant | p50 wait | p99 wait | max wait | fairness | overlaps |"
            );
            let _ = writeln!(
                s,
                "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
            );
            for &c in &o.clients {
                for &algo in &o.algos {
                    let Some(v) = cells.get(&(algo, c, hold)) else {
                        continue;
                    };
                    let m = |f: fn(&Cell) -> f64| median(v.iter().map(f).collect());
                    let rel = cells.get(&(Algo::Redisson, c, hold)).map(|red| {
                        median(
                            v.iter()
                                .zip(red.iter())
                                .map(|(a, b)| a.grants_per_s / b.grants_per_s)
                                .collect(),
                        )
                    });
                    let g: Vec<f64> = v.iter().map(|x| x.grants_per_s).collect();
                    let errs: u64 = v.iter().map(|x| x.errors).sum();
                    let _ = writeln!(
                        s,
                        "| {} | {c} | {} | {} | {} | {} / {} / {} | {:.2} | {} | {} | {} | {:.3} | {}{} |",
                        algo.label(),
                        spread(&g, |x| format!("{x:.0}")),
                        rel.map_or("–".into(), ratio),
                        fine(m(|x| x.hold_actual)),
                        dur(m(|x| x.handoff_p50)),
                        dur(m(|x| x.handoff_mean)),
                        dur(m(|x| x.handoff_p99)),
                        m(|x| x.cmds_per_grant),
                        dur(m(|x| x.p50)),
                        dur(m(|x| x.p99)),
                        dur(m(|x| x.max)),
                        m(|x| x.fairness),
                        v.iter().map(|x| x.overlaps).sum::<u64>(),
                        if errs > 0 {
                            format!(" ({errs} errors)")
                        } else {
                            String::new()
                        }
                    );
                }
            }
            if hold == 1 && o.clients.contains(&64) && o.algos.contains(&Algo::Redisson) {
                let _ = writeln!(
                    s,
                    "\nIssue's figure for the Redisson algorithm, 64 clients, 1 ms hold: ≈ 730 \
                     grants/s, p99 wait ≈ 2.4 s, ≈ 6 commands per grant, fairness 0.55."
                );
            }
            s.push('\n');
            // Targets for dlock in this hold.
            for &c in &o.clients {
                let Some(v) = cells.get(&(Algo::Dlock, c, hold)) else {
                    continue;
                };
                let m = |f: fn(&Cell) -> f64| median(v.iter().map(f).collect());
                if hold > 0 {
                    let h = hold as f64 / 1000.0;
                    let g = m(|x| x.grants_per_s);
                    let p99 = m(|x| x.p99);
                    let p99_limit = 1.5 * c as f64 * hold as f64 * 1000.0;
                    let cpg = m(|x| x.cmds_per_grant);
                    let fair = m(|x| x.fairness);
                    targets.push(Target {
                        issue: 5,
                        what: format!("contention {c} clients, hold {hold} ms: grants/s"),
                        measured: format!("{g:.0}"),
                        limit: format!("≥ {:.0} (0.95 / hold)", 0.95 / h),
                        ok: g >= 0.95 / h,
                    });
                    targets.push(Target {
                        issue: 5,
                        what: format!("contention {c} clients, hold {hold} ms: p99 wait"),
                        measured: dur(p99),
                        limit: format!("≤ {} (1.5 × clients × hold)", dur(p99_limit)),
                        ok: p99 <= p99_limit,
                    });
                    targets.push(Target {
                        issue: 5,
                        what: format!("contention {c} clients, hold {hold} ms: commands per grant"),
                        measured: format!("{cpg:.3}"),
                        limit: "≤ 2.05".into(),
                        ok: cpg <= 2.05,
                    });
                    targets.push(Target {
                        issue: 5,
                        what: format!("contention {c} clients, hold {hold} ms: fairness"),
                        measured: format!("{fair:.3}"),
                        limit: "≥ 0.99".into(),
                        ok: fair >= 0.99,
                    });
                } else if let Some(red) = cells.get(&(Algo::Redisson, c, hold)) {
                    let rel = median(
                        v.iter()
                            .zip(red.iter())
                            .map(|(a, b)| a.grants_per_s / b.grants_per_s)
                            .collect(),
                    );
                    targets.push(Target {
                        issue: 5,
                        what: format!(
                            "contention {c} clients, no hold: grants/s vs Redisson-style"
                        ),
                        measured: ratio(rel),
                        limit: "≥ 2.00×".into(),
                        ok: rel >= 2.0,
                    });
                }
            }
        }
        report16::floor(&mut s, &mut targets, cells, &o.clients, &o.holds_ms);
        let overlaps: u64 = cells.values().flatten().map(|c| c.overlaps).sum();
        let errors: u64 = cells.values().flatten().map(|c| c.errors).sum();
        targets.push(Target {
            issue: 5,
            what: "mutual exclusion: overlaps in every cell, all algorithms".into(),
            measured: format!("{overlaps} overlaps, {errors} errors"),
            limit: "0".into(),
            ok: overlaps == 0 && errors == 0,
        });
    }

    report16::waiters(&mut s, &mut targets, &extra.waiters, o.quick);
    if let Some(sc) = &extra.scale {
        report16::scale(&mut s, &mut targets, sc);
    }
    let waiting = extra.scale.as_ref().or(extra.waiting.as_ref());
    if let Some(w) = waiting {
        report27::waiting_section(&mut s, w, &server_name(sinfo));
    }
    report27::goals(
        &mut s,
        &report27::Inputs {
            load: &extra.load,
            reps,
            mem,
            cells,
            mass_expiry: extra.mass.as_ref(),
            waiting,
            server: server_name(sinfo),
        },
    );

    // ---- targets ----
    for issue in [16, 5] {
        let these: Vec<&Target> = targets.iter().filter(|t| t.issue == issue).collect();
        if these.is_empty() {
            continue;
        }
        let met = these.iter().filter(|t| t.ok).count();
        let _ = writeln!(
            s,
            "## Targets (issue {issue}{})\n\n{met} of {} met.\n",
            if issue == 16 {
                ", ratios against baselines measured in this run"
            } else {
                ", earlier"
            },
            these.len()
        );
        let _ = writeln!(s, "| target | measured | target | result |");
        let _ = writeln!(s, "|---|---:|---:|:---:|");
        for t in these {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} |",
                t.what,
                t.measured,
                t.limit,
                pass(t.ok)
            );
        }
        s.push('\n');
    }
    s
}

/// The server's name and version, e.g. `redis-server 7.0.15`, `valkey 8.1.8`.
fn server_name(sinfo: &HashMap<String, String>) -> String {
    let name = sinfo
        .get("server_name")
        .map_or("redis-server", String::as_str);
    let version = sinfo
        .get("valkey_version")
        .or_else(|| sinfo.get("redis_version"))
        .map_or("?", String::as_str);
    format!("{name} {version}")
}
