//! `make sim`: runs seeded schedules for SIM_SECONDS (and at least
//! SIM_MIN_OPS operations), from SEED, and prints
//! `simulated N operations in S seeds: 0 violations`. A violation is
//! shrunk, printed with its seed and replay line, and the exit is non-zero.

use dlock_sim::{run, schedule, shrink, to_rust};
use std::time::Instant;

fn env_u64(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) if !v.trim().is_empty() => v.trim().parse().unwrap_or_else(|_| {
            eprintln!("{name}={v:?}: expected a non-negative integer");
            std::process::exit(2)
        }),
        _ => default,
    }
}

fn main() {
    let seconds = env_u64("SIM_SECONDS", 20);
    let min_ops = env_u64("SIM_MIN_OPS", 1_000_000);
    let max_seeds = env_u64("SIM_SEEDS", u64::MAX);
    let len = env_u64("SIM_STEPS", 2_000) as usize;
    let first = env_u64(
        "SEED",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_secs()),
    );
    println!("dlock-sim: SEED={first} SIM_SECONDS={seconds} SIM_MIN_OPS={min_ops} SIM_STEPS={len}");
    let start = Instant::now();
    let (mut ops, mut seeds) = (0u64, 0u64);
    let mut next_report = 10u64;
    while seeds < max_seeds && (start.elapsed().as_secs() < seconds || ops < min_ops) {
        let seed = first.wrapping_add(seeds);
        let sched = schedule(seed, len);
        seeds += 1;
        match run(&sched) {
            None => ops += sched.len() as u64,
            Some(v) => {
                ops += v.step as u64 + 1;
                println!(
                    "VIOLATION seed {seed} step {}: {}\n{}",
                    v.step, v.what, v.detail
                );
                let (short, sv) = shrink(&sched, 20_000);
                println!(
                    "shrunk to {} operations (fails at step {}: {}):\n{}\n{}",
                    short.len(),
                    sv.step,
                    sv.what,
                    to_rust(&short),
                    sv.detail
                );
                println!("replay: SEED={seed} SIM_SEEDS=1 make sim");
                println!("simulated {ops} operations in {seeds} seeds: 1 violations");
                std::process::exit(1);
            }
        }
        if start.elapsed().as_secs() >= next_report {
            let s = start.elapsed().as_secs_f64();
            eprintln!(
                "  {ops} operations in {seeds} seeds, {:.0} ops/s",
                ops as f64 / s
            );
            next_report += 10;
        }
    }
    let s = start.elapsed().as_secs_f64();
    eprintln!(
        "{:.0} operations per second ({ops} in {s:.1} s)",
        ops as f64 / s.max(1e-9)
    );
    println!("simulated {ops} operations in {seeds} seeds: 0 violations");
}
