//! # dlock-sim — a deterministic simulator of dlock's lock core
//!
//! One process, one thread, simulated time: a seeded schedule of
//! operations ([`Op`]) is applied to a simulated server ([`World`]) that
//! plays the module's services in memory over dlock-core — many
//! connections, all five kinds with every option the core models (WAIT,
//! BIND, LOCKDELAY, PERMITS, READ/WRITE, fair queue places with their
//! timeout, CHECK), a clock passed in with timers firing late and jumps,
//! keyspace operations as the core sees them (DEL, RENAME, MOVE, DUMP +
//! RESTORE), client kills, restarts from a snapshot through the real codec
//! (RDB payloads, or the AOF's log of replication payloads replayed), and
//! a replica applying every commit's payload (delta or whole state).
//!
//! After every step the invariants of [`spec`] — written from SPEC, not
//! from the code under test — are checked ([`World::check`]). A schedule is
//! a plain list of [`Op`]s, so a failing one replays exactly and is shrunk
//! ([`shrink`]) to a short one, printed as Rust that a regression test can
//! keep (tests/regressions.rs).
//!
//! The host port: the world's `serve`, `commit` and timer handling are what
//! the module's services do over the FFI. The same schedules can drive the
//! services themselves once they talk to the server through one trait (see
//! docs/architecture.md, "Simulator").

pub mod coverage;
pub mod host;
pub mod invariant;
pub mod modworld;
pub mod profile;
pub mod spec;
mod world;

pub use invariant::{Invariant, Violation};
pub use profile::{Faults, Profile};
pub use world::World;

use dlock_core::rng::Rng;

/// One step of a schedule. Small integers index the simulated domain:
/// `slot` a connection slot (0..SLOTS), `db` a database (0..DBS), `key` a
/// key name (`k0`..), `owner` an owner (`o0`..; [`FRESH`] and above: a
/// new owner never seen before, as a UUID per request). Every op can be
/// applied in any state (it does nothing where it makes no sense), so any
/// sub-list of a schedule is a schedule: what shrinking needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// ACQUIRE (kind 0), RWACQUIRE (1; mode 1 READ, 2 WRITE), FAIRACQUIRE
    /// (2), SEMACQUIRE (3; LIMIT `limit` PERMITS `permits`), with PX
    /// `lease`, WAIT `wait` (0: none), BIND, LOCKDELAY `delay` (0: none).
    Acquire {
        slot: u8,
        db: u8,
        key: u8,
        owner: u8,
        kind: u8,
        mode: u8,
        permits: u8,
        limit: u8,
        lease: u16,
        wait: u16,
        bind: bool,
        delay: u16,
    },
    /// RELEASE (mode 0: none given; 1 READ; 2 WRITE), PERMITS `permits`.
    Release {
        db: u8,
        key: u8,
        owner: u8,
        mode: u8,
        permits: u8,
    },
    /// RENEW with PX `lease`.
    Renew {
        db: u8,
        key: u8,
        owner: u8,
        lease: u16,
    },
    /// FORCERELEASE.
    Force { db: u8, key: u8 },
    /// CANCEL: the owner gives up its places (queued and waiting).
    Cancel { db: u8, key: u8, owner: u8 },
    /// CHECK of the `pick`-th token issued so far (from the newest).
    Check { db: u8, key: u8, pick: u8 },
    /// LATCHSET with `count`.
    LatchSet { db: u8, key: u8, count: u8 },
    /// COUNTDOWN.
    Countdown { db: u8, key: u8 },
    /// AWAIT with WAIT `wait`.
    Await {
        slot: u8,
        db: u8,
        key: u8,
        wait: u16,
    },
    /// The connection in `slot` closes (a new one takes the slot).
    Kill { slot: u8 },
    /// The clock moves `ms` on; when `fire`, the timers due run (else they
    /// fire late, at a later Advance).
    Advance { ms: u16, fire: bool },
    /// The clock jumps by `ms` (backwards when negative), no timer runs.
    Jump { ms: i32 },
    /// DEL of the key (waiting connections keep waiting: their places go
    /// to a new lock of the same kind at the key).
    Del { db: u8, key: u8 },
    /// RENAME to key `to` of the same db, when that is free.
    Rename { db: u8, key: u8, to: u8 },
    /// MOVE to db `to`, when the key is free there.
    Move { db: u8, key: u8, to: u8 },
    /// DUMP then RESTORE REPLACE of the key (through the codec).
    Restore { db: u8, key: u8 },
    /// The server restarts from its RDB (`aof` false) or its AOF.
    Restart { aof: bool },
    /// SWAPDB 0 1: every key changes db; waiting connections and bound
    /// holds go with their keys.
    Swapdb,
    /// FLUSHDB of `db`: a DEL of every key in it.
    Flushdb { db: u8 },
    /// PEXPIRE of the key by `ms` (a user's EXPIRE on a lock key): the
    /// server deletes it when the time passes, at a turn or when a command
    /// opens it. The core world ignores it (no key TTLs there).
    Expire { db: u8, key: u8, ms: u16 },
    /// PERSIST of the key (its TTL goes).
    Persist { db: u8, key: u8 },
    /// The replica is promoted: it becomes the master (its state, its
    /// token floor raised by the promotion gap), connections reconnect, a
    /// new replica syncs in full. A replica that lags (the seed's
    /// [`Profile::lag`]) loses the tail of the stream it had not applied.
    Promote,
    /// CLIENT PAUSE `ms` WRITE (ALL when `all`) on the master.
    Pause { all: bool, ms: u16 },
    /// CLIENT UNPAUSE on the master.
    Unpause,
    /// FAILOVER to the replica: writes are paused until the replica has
    /// caught up, then it is promoted and the old master becomes its
    /// replica.
    Failover,
    /// Used memory goes over `maxmemory` (`on`), or back under it.
    Oom { on: bool },
    /// CLIENT UNBLOCK of the connection in `slot`, TIMEOUT (ERROR when
    /// `error`).
    Unblock { slot: u8, error: bool },
    /// COPY of the key to key `to` (in the other db when `todb`).
    Copy { db: u8, key: u8, to: u8, todb: bool },
    /// DLOCK.FENCED of the `pick`-th token issued for the key (from the
    /// newest), with the inner command `cmd` (see [`FENCED_CMDS`]).
    Fenced { db: u8, key: u8, pick: u8, cmd: u8 },
    /// An acquire (kind as in [`Op::Acquire`]) with WAIT `wait` inside
    /// MULTI/EXEC, or a script when `lua`: WAIT acts as 0 there.
    Atomic {
        slot: u8,
        db: u8,
        key: u8,
        owner: u8,
        kind: u8,
        wait: u16,
        lua: bool,
    },
    /// The key moves to the other shard with its slot (cluster seeds):
    /// MIGRATE and the slot handed over, or (`atomic`, Valkey 9) CLUSTER
    /// MIGRATESLOTS of its slot.
    Migrate { key: u8, atomic: bool },
}

/// The inner commands of [`Op::Fenced`] (`{k}` stands for the data key
/// beside the lock key): writes, reads, blocking forms, and what a script
/// may not run.
pub const FENCED_CMDS: &[&[&str]] = &[
    &["SET", "data", "v"],
    &["INCR", "counter"],
    &["GET", "data"],
    &["APPEND", "data", "x"],
    &["XREAD", "COUNT", "1", "BLOCK", "3000", "STREAMS", "st", "$"],
    &["BLPOP", "list", "1"],
    &["MULTI"],
    &["SUBSCRIBE", "ch"],
    &["COPY", "data", "data2", "DB", "1"],
    &["DEL", "data"],
    &["NOSUCHCOMMAND", "x"],
    &["GET"],
];

/// Connection slots.
pub const SLOTS: u8 = 8;
/// Databases.
pub const DBS: u8 = 2;
/// Key names `k0`..: k0 is ACQUIRE's home, k1 RWACQUIRE's, k2
/// FAIRACQUIRE's, k3 SEMACQUIRE's, k4 the latch's; k5 is spare (renames).
pub const KEYS: u8 = 6;
/// Owners `o0`.. below this index; at or above it, a fresh owner.
pub const FRESH: u8 = 6;

/// The schedule of `len` operations of `seed` (its faults drawn as its
/// [`Profile`] says).
pub fn schedule(seed: u64, len: usize) -> Vec<Op> {
    schedule_with(seed, len, &Profile::of(seed).faults)
}

/// The schedule of `seed` with the faults drawn as `faults` says (none:
/// the operations of the lock commands and the keyspace only).
pub fn schedule_with(seed: u64, len: usize, faults: &Faults) -> Vec<Op> {
    let faults = *faults;
    let mut r = Rng::new(seed);
    // Each seed weighs the operations differently, so some seeds are
    // keyspace-heavy, some all contention, some all lock-delay, some one
    // rw lock among three owners (upgrades, downgrades, delayed readers).
    let heavy = r.below(5);
    let mut f = Rng::new(seed ^ 0x4641_554c_5453);
    (0..len)
        .map(|_| gen_fault(&mut f, &faults).unwrap_or_else(|| gen_op(&mut r, heavy)))
        .collect()
}

/// A fault op, drawn with the seed's probabilities, or None.
fn gen_fault(r: &mut Rng, f: &Faults) -> Option<Op> {
    let roll = r.below(1000) as u16;
    let mut at = 0u16;
    let mut hit = |p: u16| {
        at = at.saturating_add(p);
        roll < at
    };
    let slot = r.below(SLOTS as u64) as u8;
    let db = if r.one_in(6) { 1 } else { 0 };
    let key = r.below(KEYS as u64) as u8;
    Some(if hit(f.pause) {
        if r.one_in(3) {
            Op::Unpause
        } else {
            Op::Pause {
                all: r.one_in(3),
                ms: r.pick(&[10u16, 100, 500, 3000]),
            }
        }
    } else if hit(f.failover) {
        Op::Failover
    } else if hit(f.promote) {
        if r.one_in(2) {
            Op::Promote
        } else {
            Op::Restart { aof: r.one_in(2) }
        }
    } else if hit(f.kill) {
        Op::Kill { slot }
    } else if hit(f.fenced) {
        Op::Fenced {
            db,
            key: r.below(4) as u8,
            pick: r.below(3) as u8,
            cmd: r.below(FENCED_CMDS.len() as u64) as u8,
        }
    } else if hit(f.copy) {
        Op::Copy {
            db,
            key,
            to: r.below(KEYS as u64) as u8,
            todb: r.one_in(2),
        }
    } else if hit(f.oom) {
        Op::Oom { on: !r.one_in(3) }
    } else if hit(f.unblock) {
        Op::Unblock {
            slot,
            error: r.one_in(2),
        }
    } else if hit(f.atomic) {
        let kind = r.below(4) as u8;
        Op::Atomic {
            slot,
            db,
            key: kind,
            owner: r.below(FRESH as u64) as u8,
            kind,
            wait: r.pick(&[0u16, 100, 2000]),
            lua: r.one_in(2),
        }
    } else if hit(f.migrate) {
        Op::Migrate {
            key,
            atomic: r.one_in(2),
        }
    } else {
        return None;
    })
}

fn gen_op(r: &mut Rng, heavy: u64) -> Op {
    let db = if r.one_in(6) { 1 } else { 0 };
    // Contention seeds: as many requests as not from a new owner (a UUID
    // per request), which makes long-lived queues see many owners pass.
    let owner = if heavy == 4 {
        r.below(3) as u8
    } else if r.one_in(if heavy == 1 { 2 } else { 5 }) {
        FRESH + r.below(200) as u8 % 50
    } else {
        r.below(FRESH as u64) as u8
    };
    let slot = r.below(SLOTS as u64) as u8;
    let roll = r.below(100);
    let acquire_share = match heavy {
        0 => 55,
        1 => 70,
        _ => 60,
    };
    if roll < acquire_share {
        let kind = if heavy == 4 { 1 } else { r.below(4) as u8 };
        let key = if r.one_in(12) {
            r.below(KEYS as u64) as u8
        } else {
            kind
        };
        let delay = if heavy >= 2 && r.one_in(2) || r.one_in(8) {
            r.pick(&[5u16, 50, 400])
        } else {
            0
        };
        return Op::Acquire {
            slot,
            db,
            key,
            owner,
            kind,
            mode: 1 + r.below(2) as u8,
            permits: 1 + r.below(3) as u8,
            limit: if r.one_in(30) { 2 } else { 3 },
            lease: r.pick(&[20u16, 60, 200, 1000, 5000]),
            wait: if r.chance(60) {
                r.pick(&[10u16, 100, 300, 2000])
            } else {
                0
            },
            bind: r.one_in(4),
            delay,
        };
    }
    let key = if heavy == 4 && !r.one_in(10) {
        1
    } else if r.one_in(10) {
        r.below(KEYS as u64) as u8
    } else {
        r.below(5) as u8
    };
    let mode = r.below(3) as u8;
    match r.below(if heavy == 3 { 26 } else { 20 }) {
        0..=4 => Op::Release {
            db,
            key,
            owner,
            mode,
            permits: 1 + r.below(2) as u8,
        },
        5 => Op::Renew {
            db,
            key,
            owner,
            lease: r.pick(&[50u16, 500]),
        },
        6 if r.one_in(3) => Op::Force { db, key },
        6 => Op::Cancel { db, key, owner },
        7 => Op::Check {
            db,
            key,
            pick: r.below(4) as u8,
        },
        8 => {
            if r.one_in(2) {
                Op::LatchSet {
                    db,
                    key: 4,
                    count: 1 + r.below(3) as u8,
                }
            } else {
                Op::Countdown { db, key: 4 }
            }
        }
        9 => Op::Await {
            slot,
            db,
            key: 4,
            wait: r.pick(&[20u16, 500]),
        },
        10 if r.one_in(3) => Op::Kill { slot },
        10..=14 => Op::Advance {
            ms: r.pick(&[1u16, 7, 25, 90, 400]),
            fire: !r.one_in(4),
        },
        15 if r.one_in(4) => Op::Jump {
            ms: if r.one_in(3) {
                -(r.below(150) as i32)
            } else {
                r.pick(&[1000i32, 10_000])
            },
        },
        16 if r.one_in(20) => match r.below(5) {
            0 => Op::Promote,
            1 => Op::Swapdb,
            2 => Op::Flushdb {
                db: r.below(DBS as u64) as u8,
            },
            _ => Op::Restart { aof: r.one_in(2) },
        },
        17..=25 => match r.below(6) {
            4 => Op::Expire {
                db,
                key,
                ms: r.pick(&[1u16, 50, 400]),
            },
            5 => Op::Persist { db, key },
            0 => Op::Del { db, key },
            1 => Op::Rename {
                db,
                key,
                to: r.below(KEYS as u64) as u8,
            },
            2 => Op::Move {
                db,
                key,
                to: r.below(DBS as u64) as u8,
            },
            _ => Op::Restore { db, key },
        },
        _ => Op::Advance { ms: 1, fire: true },
    }
}

/// Runs `ops` in a new world: the first violation, with its step.
pub fn run(ops: &[Op]) -> Option<Violation> {
    let mut w = World::new();
    for (step, op) in ops.iter().enumerate() {
        if let Err(mut v) = w.step(op) {
            v.step = step;
            return Some(v);
        }
    }
    // The liveness phase (as the module world's): time runs forward with
    // every timer firing, and nothing renews.
    match w.liveness() {
        Err(mut v) => {
            v.step = ops.len();
            Some(v)
        }
        Ok(()) => None,
    }
}

/// Shrinks a failing schedule: the shortest sub-list found (within
/// `budget` runs) that still fails with the same invariant.
pub fn shrink(ops: &[Op], budget: usize) -> (Vec<Op>, Violation) {
    shrink_with(ops, budget, run)
}

/// [`shrink`] with any runner (the core world's [`run`], or the module
/// world's [`modworld::run`]).
pub fn shrink_with(
    ops: &[Op],
    budget: usize,
    run: impl Fn(&[Op]) -> Option<Violation>,
) -> (Vec<Op>, Violation) {
    let Some(first) = run(ops) else {
        panic!("shrink: the schedule does not fail");
    };
    let mut best: Vec<Op> = ops[..=first.step.min(ops.len() - 1)].to_vec();
    let mut found = first;
    let mut runs = 0usize;
    let mut chunk = best.len() / 2;
    while chunk >= 1 && runs < budget {
        let mut i = 0;
        let mut progress = false;
        while i < best.len() && runs < budget {
            let end = (i + chunk).min(best.len());
            let mut cand: Vec<Op> = best[..i].to_vec();
            cand.extend_from_slice(&best[end..]);
            runs += 1;
            match run(&cand) {
                Some(v) if v.what == found.what => {
                    cand.truncate(v.step + 1);
                    best = cand;
                    found = v;
                    progress = true;
                }
                _ => i += chunk,
            }
        }
        if !progress {
            chunk /= 2;
        }
    }
    (best, found)
}

/// Prints a schedule as Rust (an array of [`Op`]s).
pub fn to_rust(ops: &[Op]) -> String {
    let mut s = String::from("[\n");
    for op in ops {
        s.push_str(&format!("    {op:?},\n"));
    }
    s.push(']');
    s
}
