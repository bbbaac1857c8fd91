//! How often each operation and each fault ran: `make sim` prints it
//! before its last line, so a run that never reached a state says so.
//! Counted in the process that runs the schedule (a forked child for the
//! module world, which sends its counts back with its result).

use std::cell::RefCell;
use std::collections::BTreeMap;

/// The faults and server states the coverage line must show above zero
/// (`make sim` says which did not happen).
pub const FAULTS: &[&str] = &[
    "pause",
    "failover",
    "lagging promotion",
    "skew",
    "migrate",
    "slot migration",
    "FENCED",
    "COPY",
    "OOM",
    "loading",
    "CLIENT UNBLOCK",
    "MULTI/script",
    "kill probe",
    "liveness",
];

thread_local! {
    static COUNTS: RefCell<BTreeMap<String, u64>> = const { RefCell::new(BTreeMap::new()) };
}

/// Counts one `what`.
pub fn hit(what: &str) {
    add(what, 1);
}

/// Counts `n` of `what`.
pub fn add(what: &str, n: u64) {
    COUNTS.with(|c| {
        let mut c = c.borrow_mut();
        match c.get_mut(what) {
            Some(v) => *v += n,
            None => {
                c.insert(what.to_owned(), n);
            }
        }
    });
}

/// The counts so far, emptied.
pub fn take() -> BTreeMap<String, u64> {
    COUNTS.with(|c| std::mem::take(&mut *c.borrow_mut()))
}

/// Adds `counts` (taken elsewhere) to this process's.
pub fn merge(counts: &BTreeMap<String, u64>) {
    for (k, v) in counts {
        add(k, *v);
    }
}

/// The counts as one line: the faults first (in [`FAULTS`]' order, zeros
/// included), then the operations.
pub fn line(counts: &BTreeMap<String, u64>) -> String {
    let mut parts: Vec<String> = FAULTS
        .iter()
        .map(|f| format!("{f} {}", counts.get(*f).copied().unwrap_or(0)))
        .collect();
    parts.extend(
        counts
            .iter()
            .filter(|(k, _)| !FAULTS.contains(&k.as_str()))
            .map(|(k, v)| format!("{k} {v}")),
    );
    format!("coverage: {}", parts.join(", "))
}

/// The faults of [`FAULTS`] that did not happen.
pub fn missing(counts: &BTreeMap<String, u64>) -> Vec<&'static str> {
    FAULTS
        .iter()
        .copied()
        .filter(|f| counts.get(*f).copied().unwrap_or(0) == 0)
        .collect()
}

/// The name an op is counted under.
pub fn op_name(op: &crate::Op) -> &'static str {
    use crate::Op::*;
    match op {
        Acquire { .. } => "acquire",
        Release { .. } => "release",
        Renew { .. } => "renew",
        Force { .. } => "forcerelease",
        Cancel { .. } => "cancel",
        Check { .. } => "check",
        LatchSet { .. } => "latchset",
        Countdown { .. } => "countdown",
        Await { .. } => "await",
        Kill { .. } => "kill",
        Advance { .. } => "advance",
        Jump { .. } => "jump",
        Del { .. } => "del",
        Rename { .. } => "rename",
        Move { .. } => "move",
        Restore { .. } => "restore",
        Restart { .. } => "restart",
        Swapdb => "swapdb",
        Flushdb { .. } => "flushdb",
        Expire { .. } => "expire",
        Persist { .. } => "persist",
        Promote => "promote",
        Pause { .. } => "pause op",
        Unpause => "unpause",
        Failover => "failover op",
        Oom { .. } => "oom op",
        Unblock { .. } => "unblock op",
        Copy { .. } => "copy op",
        Fenced { .. } => "fenced op",
        Atomic { .. } => "atomic op",
        Migrate { .. } => "migrate op",
    }
}
