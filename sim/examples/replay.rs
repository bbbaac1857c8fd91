//! Replays the shrunk schedule of a seed with SIM_TRACE on (debugging aid):
//! `SEED=n cargo run --release -p dlock-sim --example replay` (SIM_IGNORE
//! as for `make sim`).
use dlock_sim::{modworld, schedule, shrink_with, to_rust, Profile};
fn main() {
    let seed: u64 = std::env::var("SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let path = std::env::var("DLOCK_MODULE").unwrap_or("target/sim/libdlock.so".into());
    let m = modworld::load(&path).expect("load");
    let p = Profile::of(seed);
    let sched = schedule(seed, 2000);
    if modworld::run_with(&m, &p, &sched).is_none() {
        println!("seed {seed}: no violation");
        return;
    }
    let (short, v) = shrink_with(&sched, 20_000, |s| modworld::run_with(&m, &p, s));
    println!(
        "{p:?}\n{}\n{} ops: {}\n{}",
        to_rust(&short),
        short.len(),
        v.what,
        v.detail
    );
    std::env::set_var("SIM_TRACE", "1");
    let _ = modworld::run_with(&m, &p, &short);
}
