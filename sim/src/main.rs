//! `make sim`: runs the seeded schedules of SEED, SEED+1, … until at least
//! SIM_MIN_OPS operations have run (and SIM_SECONDS have passed, if
//! given), prints how often each operation and fault ran, then
//! `simulated N operations in S seeds: 0 violations`. A violation is
//! shrunk, printed with its seed, profile and replay line, and the exit is
//! non-zero.
//!
//! Each seed's schedule runs twice: on the core world (dlock-core under
//! the services as the simulator models them, `world.rs`) and on the
//! module world (the real `libdlock.so` in simulated servers, in the
//! states the seed's profile draws: `modworld`), unless SIM_WORLDS names
//! one (`core`, `module`). Which seeds run, and in which world, depends on
//! nothing but SEED, SIM_MIN_OPS and SIM_STEPS when SIM_SECONDS is 0: the
//! same run every time (CI's). DLOCK_MODULE names the module file (default
//! target/sim/libdlock.so, the module built with its debug assertions).
//! SIM_TRACE_HASH=1 prints each module run's trace digest (the determinism
//! test compares two processes' digests).

use dlock_sim::{coverage, modworld, run, schedule, shrink_with, to_rust, Op, Profile, Violation};
use std::time::{Duration, Instant};

fn env_u64(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) if !v.trim().is_empty() => v.trim().parse().unwrap_or_else(|_| {
            eprintln!("{name}={v:?}: expected a non-negative integer");
            std::process::exit(2)
        }),
        _ => default,
    }
}

fn report(
    world: &str,
    seed: u64,
    profile: &Profile,
    sched: &[Op],
    v: &Violation,
    run: impl Fn(&[Op]) -> Option<Violation>,
) {
    println!(
        "VIOLATION ({world} world) seed {seed} step {}: {}\n{}",
        v.step, v.what, v.detail
    );
    println!("profile: {profile:?}");
    let (short, sv) = shrink_with(sched, 20_000, run);
    println!(
        "shrunk to {} operations (fails at step {}: {}):\n{}\n{}",
        short.len(),
        sv.step,
        sv.what,
        to_rust(&short),
        sv.detail
    );
    let strict = if v.what.is_open_finding() {
        "SIM_STRICT=1 "
    } else {
        ""
    };
    println!("replay: SEED={seed} SIM_SEEDS=1 {strict}SIM_WORLDS={world} make sim");
}

fn main() {
    let seconds = env_u64("SIM_SECONDS", 0);
    let min_ops = env_u64("SIM_MIN_OPS", 1_000_000);
    let max_seeds = env_u64("SIM_SEEDS", u64::MAX);
    let len = env_u64("SIM_STEPS", 2_000) as usize;
    let trace_hash = std::env::var_os("SIM_TRACE_HASH").is_some();
    // SIM_KEEP_GOING=1: a module-world violation is printed on one line
    // and the run goes on (to survey many seeds).
    let keep_going = std::env::var_os("SIM_KEEP_GOING").is_some();
    // SIM_STRICT=1: an open finding (a known module bug, reported) stops
    // the run as any violation does; by default it is counted and passed.
    let strict = std::env::var_os("SIM_STRICT").is_some();
    let mut violations = 0u64;
    let worlds = std::env::var("SIM_WORLDS").unwrap_or_else(|_| "core,module".into());
    let first = env_u64(
        "SEED",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_secs()),
    );
    let path = std::env::var("DLOCK_MODULE").unwrap_or_else(|_| "target/sim/libdlock.so".into());
    let want_core = worlds.contains("core");
    let want_module = worlds.contains("module");
    // The modules are loaded once, here; every module run forks from this
    // process, so each starts from freshly loaded modules.
    let servers = if want_module {
        match modworld::load(&path) {
            Ok(m) => Some(m),
            Err(e) => {
                eprintln!("dlock-sim: the module world needs the built module ({path}; `make sim` builds it): {e}");
                std::process::exit(2);
            }
        }
    } else {
        None
    };
    println!(
        "dlock-sim: SEED={first} SIM_SECONDS={seconds} SIM_MIN_OPS={min_ops} SIM_STEPS={len} SIM_WORLDS={worlds}{}",
        if want_module { format!(" DLOCK_MODULE={path}") } else { String::new() }
    );
    let start = Instant::now();
    let (mut ops, mut seeds) = (0u64, 0u64);
    let (mut core_ops, mut mod_ops) = (0u64, 0u64);
    let (mut core_time, mut mod_time) = (Duration::ZERO, Duration::ZERO);
    let mut next_report = 10u64;
    // Every seed runs in each world chosen: no choice follows the time a
    // world took, so a run is the same whatever the machine's load.
    let (do_core, do_mod) = (want_core, want_module);
    let mut counts = std::collections::BTreeMap::new();
    let mut open_found = std::collections::BTreeMap::new();
    while seeds < max_seeds && (ops < min_ops || start.elapsed().as_secs() < seconds) {
        let seed = first.wrapping_add(seeds);
        let sched = schedule(seed, len);
        let profile = Profile::of(seed);
        seeds += 1;
        if do_core {
            let t = Instant::now();
            let r = run(&sched);
            core_time += t.elapsed();
            match r {
                None => {
                    ops += sched.len() as u64;
                    core_ops += sched.len() as u64;
                }
                Some(v) => {
                    ops += v.step as u64 + 1;
                    report("core", seed, &profile, &sched, &v, run);
                    println!("simulated {ops} operations in {seeds} seeds: 1 violations");
                    std::process::exit(1);
                }
            }
        }
        if let (true, Some(m)) = (do_mod, &servers) {
            if trace_hash {
                println!(
                    "trace seed {seed}: {:?}",
                    modworld::trace_hash(m, &profile, &sched)
                );
            }
            let t = Instant::now();
            let out = modworld::run_counted(m, &profile, &sched);
            mod_time += t.elapsed();
            for (k, v) in out.coverage {
                *counts.entry(k).or_insert(0) += v;
            }
            match out.violation {
                None => {
                    ops += sched.len() as u64;
                    mod_ops += sched.len() as u64;
                }
                Some(v) if v.what.is_open_finding() && !strict => {
                    // A known module bug (reported, kept as an ignored
                    // test): counted, and the run goes on.
                    ops += v.step as u64 + 1;
                    mod_ops += v.step as u64 + 1;
                    *open_found.entry(v.what.name()).or_insert(0u64) += 1;
                    eprintln!(
                        "  {} (seed {seed} step {}; replay: SEED={seed} SIM_SEEDS=1 SIM_STRICT=1 SIM_WORLDS=module make sim)",
                        v.what, v.step
                    );
                }
                Some(v) if keep_going => {
                    ops += v.step as u64 + 1;
                    violations += 1;
                    println!(
                        "VIOLATION (module world) seed {seed} step {}: {} [{:?}]\n  {}",
                        v.step,
                        v.what,
                        profile.family,
                        v.detail.lines().next().unwrap_or("")
                    );
                }
                Some(v) => {
                    ops += v.step as u64 + 1;
                    report("module", seed, &profile, &sched, &v, |s| {
                        modworld::run_with(m, &profile, s)
                    });
                    println!("{}", coverage::line(&counts));
                    println!("simulated {ops} operations in {seeds} seeds: 1 violations");
                    std::process::exit(1);
                }
            }
        }
        if start.elapsed().as_secs() >= next_report {
            let s = start.elapsed().as_secs_f64();
            eprintln!(
                "  {ops} operations in {seeds} seeds, {:.0} ops/s (core {core_ops}, module {mod_ops})",
                ops as f64 / s
            );
            next_report += 10;
        }
    }
    let s = start.elapsed().as_secs_f64();
    let rate = |n: u64, t: Duration| n as f64 / t.as_secs_f64().max(1e-9);
    eprintln!(
        "{:.0} operations per second ({ops} in {s:.1} s); core world {core_ops} at {:.0}/s, module world {mod_ops} at {:.0}/s",
        ops as f64 / s.max(1e-9),
        rate(core_ops, core_time),
        rate(mod_ops, mod_time)
    );
    if want_module {
        println!("{}", coverage::line(&counts));
        if !open_found.is_empty() {
            let open: Vec<String> = open_found
                .iter()
                .map(|(k, n)| format!("{k}: {n} seeds"))
                .collect();
            println!(
                "open findings met (not violations of this run): {}",
                open.join("; ")
            );
        }
        let missing = coverage::missing(&counts);
        if !missing.is_empty() {
            println!("not reached in this run: {}", missing.join(", "));
        }
    }
    println!("simulated {ops} operations in {seeds} seeds: {violations} violations");
    if violations > 0 {
        std::process::exit(1);
    }
}
