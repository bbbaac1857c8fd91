//! Part 1: server time per call (`INFO commandstats`) and pipelined
//! throughput of each lock operation, on fixed key sets so that every
//! release hits a lock that is held.

use std::collections::HashMap;
use std::time::Instant;

use redis::{Connection, ConnectionLike, Value};

use crate::scripts::{self, Shas};
use crate::server::commandstats;
use crate::{LEASE_MS, OWNER};

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Op {
    SetNx,
    Del,
    DlockAcquire,
    DlockRelease,
    CadRelease,
    RedissonAcquire,
    RedissonRelease,
}

impl Op {
    pub const ALL: [Op; 7] = [
        Op::SetNx,
        Op::DlockAcquire,
        Op::RedissonAcquire,
        Op::Del,
        Op::CadRelease,
        Op::DlockRelease,
        Op::RedissonRelease,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Op::SetNx => "`SET key owner NX PX` (acquire floor)",
            Op::Del => "`DEL key` (release floor)",
            Op::DlockAcquire => "**`DLOCK.ACQUIRE key owner PX`**",
            Op::DlockRelease => "**`DLOCK.RELEASE key owner`**",
            Op::CadRelease => "Lua compare-and-delete release (EVALSHA)",
            Op::RedissonAcquire => "Redisson-style Lua acquire (EVALSHA)",
            Op::RedissonRelease => "Redisson-style Lua release (EVALSHA, PUBLISH)",
        }
    }

    /// The `cmdstat_` entry that holds this operation's server time.
    fn stat(self) -> &'static str {
        match self {
            Op::SetNx => "set",
            Op::Del => "del",
            Op::DlockAcquire => "dlock.acquire",
            Op::DlockRelease => "dlock.release",
            Op::CadRelease | Op::RedissonAcquire | Op::RedissonRelease => "evalsha",
        }
    }

    pub fn is_acquire(self) -> bool {
        matches!(self, Op::SetNx | Op::DlockAcquire | Op::RedissonAcquire)
    }

    /// The figure for this baseline on its 2-core machines (µs/call).
    pub fn reference_usec(self) -> Option<f64> {
        match self {
            Op::SetNx => Some(2.8),
            Op::Del => Some(1.1),
            Op::RedissonAcquire => Some(9.9),
            Op::RedissonRelease => Some(7.7),
            _ => None,
        }
    }

    fn command(self, shas: &Shas, i: usize) -> redis::Cmd {
        let key = format!("lock:{i}");
        match self {
            Op::SetNx => redis::cmd("SET")
                .arg(&key)
                .arg(OWNER)
                .arg("NX")
                .arg("PX")
                .arg(LEASE_MS)
                .clone(),
            Op::Del => redis::cmd("DEL").arg(&key).clone(),
            Op::DlockAcquire => redis::cmd("DLOCK.ACQUIRE")
                .arg(&key)
                .arg(OWNER)
                .arg("PX")
                .arg(LEASE_MS)
                .clone(),
            Op::DlockRelease => redis::cmd("DLOCK.RELEASE").arg(&key).arg(OWNER).clone(),
            Op::CadRelease => redis::cmd("EVALSHA")
                .arg(&shas.cad)
                .arg(1)
                .arg(&key)
                .arg(OWNER)
                .clone(),
            Op::RedissonAcquire => redis::cmd("EVALSHA")
                .arg(&shas.r_acquire)
                .arg(1)
                .arg(&key)
                .arg(LEASE_MS)
                .arg(OWNER)
                .clone(),
            Op::RedissonRelease => redis::cmd("EVALSHA")
                .arg(&shas.r_release)
                .arg(2)
                .arg(&key)
                .arg(scripts::redisson_channel(&key))
                .arg(scripts::UNLOCK_MESSAGE)
                .arg(LEASE_MS)
                .arg(OWNER)
                .clone(),
        }
    }

    /// Whether `v` is the reply of a successful grant / a release of a held lock.
    fn ok(self, v: &Value) -> bool {
        match self {
            Op::SetNx => matches!(v, Value::Okay),
            Op::DlockAcquire => matches!(v, Value::Int(t) if *t > 0),
            Op::RedissonAcquire => matches!(v, Value::Nil),
            Op::Del | Op::DlockRelease | Op::CadRelease | Op::RedissonRelease => {
                matches!(v, Value::Int(1))
            }
        }
    }
}

/// One operation's figures in one repeat.
#[derive(Clone, Copy, Debug, Default)]
pub struct Sample {
    /// Server time per call, µs (commandstats usec / calls).
    pub usec: f64,
    /// Pipelined throughput seen by the client, calls per second.
    pub ops_per_s: f64,
}

pub type Repeat = HashMap<Op, Sample>;

/// Packed pipelines of `pipeline` commands covering keys 0..n.
fn packed(op: Op, shas: &Shas, n: usize, pipeline: usize) -> Vec<(Vec<u8>, usize)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < n {
        let end = (i + pipeline).min(n);
        let mut buf = Vec::new();
        for k in i..end {
            buf.extend_from_slice(&op.command(shas, k).get_packed_command());
        }
        out.push((buf, end - i));
        i = end;
    }
    out
}

/// Sends the pipelines; returns elapsed seconds. Panics on any reply that is
/// not a grant / a release of a held lock (the bench would measure nonsense).
fn send(con: &mut Connection, op: Op, pipes: &[(Vec<u8>, usize)]) -> f64 {
    let t0 = Instant::now();
    let mut bad = Vec::new();
    for (buf, count) in pipes {
        let replies = con
            .req_packed_commands(buf, 0, *count)
            .unwrap_or_else(|e| panic!("{op:?} pipeline: {e}"));
        for v in replies {
            if !op.ok(&v) && bad.len() < 3 {
                bad.push(v);
            }
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    assert!(
        bad.is_empty(),
        "{op:?}: unexpected replies (first ones: {bad:?})"
    );
    secs
}

fn reset_stats(con: &mut Connection) {
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(con)
        .expect("CONFIG RESETSTAT");
}

/// One measured phase: RESETSTAT, send, read this op's commandstats.
fn measure(con: &mut Connection, op: Op, shas: &Shas, n: usize, pipeline: usize) -> Sample {
    let pipes = packed(op, shas, n, pipeline);
    reset_stats(con);
    let secs = send(con, op, &pipes);
    let stats = commandstats(con);
    let (calls, usec) = stats.get(op.stat()).copied().unwrap_or((0, 0));
    assert_eq!(
        calls as usize,
        n,
        "{op:?}: commandstats counted {calls} calls of {}, expected {n}",
        op.stat()
    );
    Sample {
        usec: usec as f64 / calls as f64,
        ops_per_s: n as f64 / secs,
    }
}

/// One repeat over every operation, each on `n` keys, releases always on the
/// keys the preceding phase acquired.
pub fn run_repeat(con: &mut Connection, shas: &Shas, n: usize, pipeline: usize) -> Repeat {
    // Each lock family starts from an empty keyspace, so each acquire phase
    // pays the same dict growth.
    let flush = |con: &mut Connection| {
        let _: () = redis::cmd("FLUSHALL").arg("SYNC").query(con).unwrap();
    };
    let mut r = Repeat::new();
    flush(con);
    // SET-string lock: acquire, then the two releases people use.
    r.insert(Op::SetNx, measure(con, Op::SetNx, shas, n, pipeline));
    r.insert(Op::Del, measure(con, Op::Del, shas, n, pipeline));
    flush(con);
    send(con, Op::SetNx, &packed(Op::SetNx, shas, n, pipeline));
    r.insert(
        Op::CadRelease,
        measure(con, Op::CadRelease, shas, n, pipeline),
    );
    // dlock.
    flush(con);
    r.insert(
        Op::DlockAcquire,
        measure(con, Op::DlockAcquire, shas, n, pipeline),
    );
    r.insert(
        Op::DlockRelease,
        measure(con, Op::DlockRelease, shas, n, pipeline),
    );
    // Redisson-style Lua lock.
    flush(con);
    r.insert(
        Op::RedissonAcquire,
        measure(con, Op::RedissonAcquire, shas, n, pipeline),
    );
    r.insert(
        Op::RedissonRelease,
        measure(con, Op::RedissonRelease, shas, n, pipeline),
    );
    let left: i64 = redis::cmd("DBSIZE").query(con).unwrap();
    assert_eq!(left, 0, "every lock should be released after a repeat");
    r
}

/// A lock's acquire + release pair, for the load method.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Pair {
    SetDel,
    SetCad,
    Dlock,
    Redisson,
}

impl Pair {
    pub const ALL: [Pair; 4] = [Pair::SetDel, Pair::SetCad, Pair::Dlock, Pair::Redisson];

    pub fn ops(self) -> (Op, Op) {
        match self {
            Pair::SetDel => (Op::SetNx, Op::Del),
            Pair::SetCad => (Op::SetNx, Op::CadRelease),
            Pair::Dlock => (Op::DlockAcquire, Op::DlockRelease),
            Pair::Redisson => (Op::RedissonAcquire, Op::RedissonRelease),
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Pair::SetDel => "SET NX PX + DEL (floor)",
            Pair::SetCad => "SET NX PX + compare-and-delete Lua",
            Pair::Dlock => "**DLOCK.ACQUIRE + DLOCK.RELEASE**",
            Pair::Redisson => "Redisson-style Lua acquire + release",
        }
    }
}

/// One pair's figures under the steady load.
#[derive(Clone, Copy, Debug, Default)]
pub struct LoadSample {
    /// Server µs per pair: Δusec / pairs over the pair's commandstats entries.
    pub pair_usec: f64,
    /// Server µs per call of the acquire and of the release (NaN when both
    /// are EVALSHA and cannot be told apart).
    pub acquire_usec: f64,
    pub release_usec: f64,
    /// Client-observed µs per pair: one connection, no pipelining, acquire
    /// then release, each waiting for its reply (median of the pairs).
    pub client_usec: f64,
}

/// Threads of the steady load, and pairs per pipeline.
pub const LOAD_THREADS: usize = 4;
const LOAD_PIPELINE: usize = 50;

/// The load method: `LOAD_THREADS` connections each send pipelines of
/// `acquire k; release k` pairs on their own keys, so the keyspace stays
/// near-empty (steady state: every acquire creates a lock, every release
/// deletes it, as in real use); server µs per call = Δusec / Δcalls of
/// `INFO commandstats` over the load. Then the client-observed time of one
/// unpipelined pair on one idle connection.
pub fn run_load(
    server: &crate::server::RedisServer,
    shas: &Shas,
    pairs: usize,
) -> HashMap<Pair, LoadSample> {
    let mut admin = server.conn();
    let mut out = HashMap::new();
    for pair in Pair::ALL {
        let (a, b) = pair.ops();
        let _: () = redis::cmd("FLUSHALL")
            .arg("SYNC")
            .query(&mut admin)
            .unwrap();
        reset_stats(&mut admin);
        let per_thread = pairs / LOAD_THREADS;
        let handles: Vec<_> = (0..LOAD_THREADS)
            .map(|t| {
                let mut con = server.conn();
                let shas = shas.clone();
                std::thread::spawn(move || {
                    let mut done = 0;
                    while done < per_thread {
                        let end = (done + LOAD_PIPELINE).min(per_thread);
                        let mut buf = Vec::new();
                        for j in done..end {
                            // Keys of thread t: t, t + T, t + 2T, ... of one
                            // pipeline; reused by the next pipeline.
                            let k = 1_000_000 + t + LOAD_THREADS * (j % LOAD_PIPELINE);
                            buf.extend_from_slice(&a.command(&shas, k).get_packed_command());
                            buf.extend_from_slice(&b.command(&shas, k).get_packed_command());
                        }
                        let replies = con
                            .req_packed_commands(&buf, 0, 2 * (end - done))
                            .unwrap_or_else(|e| panic!("{pair:?} load: {e}"));
                        for (i, v) in replies.iter().enumerate() {
                            let op = if i % 2 == 0 { a } else { b };
                            assert!(op.ok(v), "{op:?} under load: unexpected reply {v:?}");
                        }
                        done = end;
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().expect("load thread panicked");
        }
        let stats = commandstats(&mut admin);
        let n = (pairs / LOAD_THREADS * LOAD_THREADS) as f64;
        let get = |name: &str| stats.get(name).copied().unwrap_or((0, 0));
        let (sa, sb) = (a.stat(), b.stat());
        let pair_usec = if sa == sb {
            get(sa).1 as f64 / n
        } else {
            (get(sa).1 + get(sb).1) as f64 / n
        };
        let per = |name: &str| {
            if sa == sb {
                f64::NAN
            } else {
                let (c, u) = get(name);
                u as f64 / c.max(1) as f64
            }
        };
        // Client-observed: unpipelined pairs on one connection.
        let mut con = server.conn();
        let mut rt: Vec<f64> = (0..2000)
            .map(|i| {
                let k = 2_000_000 + i % 100;
                let t = Instant::now();
                let va: Value = a.command(shas, k).query(&mut con).unwrap();
                let vb: Value = b.command(shas, k).query(&mut con).unwrap();
                let e = t.elapsed().as_secs_f64() * 1e6;
                assert!(a.ok(&va) && b.ok(&vb), "{pair:?}: {va:?} {vb:?}");
                e
            })
            .collect();
        rt.sort_by(|x, y| x.total_cmp(y));
        out.insert(
            pair,
            LoadSample {
                pair_usec,
                acquire_usec: per(sa),
                release_usec: per(sb),
                client_usec: rt[rt.len() / 2],
            },
        );
    }
    out
}
