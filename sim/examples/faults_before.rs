//! Which faults a seed's schedule ran before a step (to sort a survey's
//! findings): `cargo run --release -p dlock-sim --example faults_before SEED:STEP ...`.
use dlock_sim::{coverage, schedule};
fn main() {
    for arg in std::env::args().skip(1) {
        let Some((seed, step)) = arg.split_once(':') else {
            continue;
        };
        let (Ok(seed), Ok(step)) = (seed.parse::<u64>(), step.parse::<usize>()) else {
            continue;
        };
        let ops = schedule(seed, 2000);
        let mut counts = std::collections::BTreeMap::new();
        for op in ops.iter().take(step + 1) {
            let name = coverage::op_name(op);
            if name.ends_with(" op") || matches!(name, "promote" | "restart" | "unpause") {
                *counts.entry(name).or_insert(0) += 1;
            }
        }
        println!(
            "{seed}:{step} {:?} {counts:?}",
            dlock_sim::Profile::of(seed).eager_clients
        );
    }
}
