//! Part 3: contention. N clients (threads, each with its own connection)
//! loop acquire → hold → release on one key for a fixed time.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::SeqCst};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use redis::{Connection, Value};

use crate::scripts::{self, Shas};
use crate::server::RedisServer;
use crate::LEASE_MS;

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Algo {
    /// `DLOCK.ACQUIRE … WAIT`: the server queues the connection.
    Dlock,
    /// `SET NX PX`, retry after 10 ms; release by compare-and-delete Lua.
    SetNx,
    /// Redisson: Lua acquire, wait for the unlock message (at most the ttl).
    Redisson,
    /// Redis' own FIFO blocking handoff: a list holding one token, acquire
    /// `BLPOP key`, release `RPUSH key token` (no lease, no owner: not a safe
    /// lock, but the floor any server-mediated handoff can reach).
    Blpop,
}

impl Algo {
    pub const ALL: [Algo; 4] = [Algo::Blpop, Algo::Dlock, Algo::SetNx, Algo::Redisson];

    pub fn label(self) -> &'static str {
        match self {
            Algo::Dlock => "**dlock** (WAIT on the server)",
            Algo::SetNx => "SET NX PX, 10 ms retry",
            Algo::Redisson => "Redisson-style (pub/sub)",
            Algo::Blpop => "BLPOP floor (list token)",
        }
    }

    fn tag(self) -> &'static str {
        match self {
            Algo::Dlock => "dlock",
            Algo::SetNx => "setnx",
            Algo::Redisson => "redisson",
            Algo::Blpop => "blpop",
        }
    }
}

/// How long a dlock client waits on the server per request (it re-asks on nil).
pub const DLOCK_WAIT_MS: u64 = 60_000;
/// SET NX PX retry interval.
const SETNX_RETRY: Duration = Duration::from_millis(10);
/// BLPOP timeout, seconds (the client re-asks on nil).
const BLPOP_TIMEOUT_S: u64 = 60;
/// The one token in the BLPOP floor's list.
const TOKEN: &str = "token";
/// Message that stops the Redisson listeners at the end of a cell.
const STOP_MESSAGE: &str = "bench-stop";

/// What one cell (algorithm × clients × hold) measured.
#[derive(Clone, Debug, Default)]
pub struct Cell {
    /// Grants made before the cell's time was up, per second of that time.
    pub grants_per_s: f64,
    /// Client commands (acquire attempts + releases) per grant.
    pub cmds_per_grant: f64,
    /// Waits (first acquire command sent → grant reply), µs.
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
    /// Jain's index over the clients' grant counts (1 = perfectly even).
    pub fairness: f64,
    /// Time the lock sat between holders: release sent by one client →
    /// grant received by the next, µs (p50, p99).
    pub handoff_p50: f64,
    pub handoff_p99: f64,
    pub handoff_mean: f64,
    /// Mean time from grant received to release sent (the hold as done), µs.
    pub hold_actual: f64,
    /// Grants that found another client inside the critical section.
    pub overlaps: u64,
    /// Unexpected replies (release of a lock not held, errors).
    pub errors: u64,
}

#[derive(Default)]
struct ClientOut {
    in_window: u64,
    grants: u64,
    commands: u64,
    waits: Vec<u32>,
    /// (grant received, release sent), ns since the cell's epoch.
    spans: Vec<(u64, u64)>,
    errors: u64,
}

/// Holds the lock for `d`: sleeps most of it, spins the last ~200 µs so the
/// hold is `d`, not `d` plus the timer's slack.
fn hold(d: Duration) {
    if d.is_zero() {
        return;
    }
    let end = Instant::now() + d;
    if d > Duration::from_micros(300) {
        thread::sleep(d - Duration::from_micros(200));
    }
    while Instant::now() < end {
        std::hint::spin_loop();
    }
}

fn owner(client: usize) -> String {
    // A uuid-shaped process id per client, plus a thread id, as Redisson does.
    format!("5c0e3a2b-7d41-4f6e-9a8b-{client:012x}:1")
}

struct Shared {
    epoch: Instant,
    key: String,
    hold: Duration,
    stop: AtomicBool,
    inside: AtomicU32,
    overlaps: AtomicU64,
    shas: Shas,
}

/// One acquire: returns once granted, counting the commands sent.
fn acquire(
    algo: Algo,
    con: &mut Connection,
    sh: &Shared,
    me: &str,
    rx: Option<&Receiver<()>>,
    out: &mut ClientOut,
) {
    match algo {
        Algo::Dlock => loop {
            out.commands += 1;
            let r: redis::RedisResult<Value> = redis::cmd("DLOCK.ACQUIRE")
                .arg(&sh.key)
                .arg(me)
                .arg("PX")
                .arg(LEASE_MS)
                .arg("WAIT")
                .arg(DLOCK_WAIT_MS)
                .query(con);
            match r {
                Ok(Value::Int(_)) => return,
                Ok(Value::Nil) => {}
                _ => {
                    out.errors += 1;
                    thread::sleep(SETNX_RETRY);
                }
            }
        },
        Algo::Blpop => loop {
            out.commands += 1;
            let r: redis::RedisResult<Value> = redis::cmd("BLPOP")
                .arg(&sh.key)
                .arg(BLPOP_TIMEOUT_S)
                .query(con);
            match r {
                Ok(Value::Array(_)) => return,
                Ok(Value::Nil) => {}
                _ => {
                    out.errors += 1;
                    thread::sleep(SETNX_RETRY);
                }
            }
        },
        Algo::SetNx => loop {
            out.commands += 1;
            let r: redis::RedisResult<Value> = redis::cmd("SET")
                .arg(&sh.key)
                .arg(me)
                .arg("NX")
                .arg("PX")
                .arg(LEASE_MS)
                .query(con);
            match r {
                Ok(Value::Okay) => return,
                Ok(Value::Nil) => {}
                _ => out.errors += 1,
            }
            thread::sleep(SETNX_RETRY);
        },
        Algo::Redisson => {
            let rx = rx.expect("redisson client has a listener");
            // RedissonLock.lock(): tryAcquire; on failure subscribe, then loop
            // { tryAcquire; wait for an unlock message at most ttl ms }.
            let mut try_acquire = |out: &mut ClientOut| -> Option<i64> {
                out.commands += 1;
                let r: redis::RedisResult<Value> = redis::cmd("EVALSHA")
                    .arg(&sh.shas.r_acquire)
                    .arg(1)
                    .arg(&sh.key)
                    .arg(LEASE_MS)
                    .arg(me)
                    .query(con);
                match r {
                    Ok(Value::Nil) => None,
                    Ok(Value::Int(ttl)) => Some(ttl),
                    _ => {
                        out.errors += 1;
                        Some(10)
                    }
                }
            };
            if try_acquire(out).is_none() {
                return;
            }
            // "Subscribe": the listener is subscribed all along (favours the
            // baseline: no SUBSCRIBE/UNSUBSCRIBE counted); notices from before
            // this wait are dropped, as a fresh subscription would not see them.
            while rx.try_recv().is_ok() {}
            loop {
                let Some(ttl) = try_acquire(out) else { return };
                let wait = if ttl >= 0 { ttl as u64 } else { 5_000 };
                match rx.recv_timeout(Duration::from_millis(wait)) {
                    Ok(()) | Err(RecvTimeoutError::Timeout) => {}
                    Err(RecvTimeoutError::Disconnected) => panic!("redisson listener died"),
                }
            }
        }
    }
}

fn release(algo: Algo, con: &mut Connection, sh: &Shared, me: &str, out: &mut ClientOut) {
    out.commands += 1;
    let mut c = match algo {
        Algo::Dlock => redis::cmd("DLOCK.RELEASE"),
        Algo::SetNx | Algo::Redisson => redis::cmd("EVALSHA"),
        Algo::Blpop => redis::cmd("RPUSH"),
    };
    match algo {
        Algo::Dlock => c.arg(&sh.key).arg(me),
        Algo::Blpop => c.arg(&sh.key).arg(TOKEN),
        Algo::SetNx => c.arg(&sh.shas.cad).arg(1).arg(&sh.key).arg(me),
        Algo::Redisson => c
            .arg(&sh.shas.r_release)
            .arg(2)
            .arg(&sh.key)
            .arg(scripts::redisson_channel(&sh.key))
            .arg(scripts::UNLOCK_MESSAGE)
            .arg(LEASE_MS)
            .arg(me),
    };
    let r: redis::RedisResult<Value> = c.query(con);
    // RPUSH replies with the list's length: 1 (a blocked BLPOP is served
    // after the command).
    if !matches!(r, Ok(Value::Int(1))) {
        out.errors += 1;
    }
}

fn client(
    algo: Algo,
    mut con: Connection,
    sh: Arc<Shared>,
    idx: usize,
    rx: Option<Receiver<()>>,
    start: Arc<Barrier>,
) -> ClientOut {
    let me = owner(idx);
    let mut out = ClientOut::default();
    start.wait();
    while !sh.stop.load(SeqCst) {
        let t = Instant::now();
        acquire(algo, &mut con, &sh, &me, rx.as_ref(), &mut out);
        let waited = t.elapsed();
        let granted_at = sh.epoch.elapsed().as_nanos() as u64;
        if !sh.stop.load(SeqCst) {
            out.in_window += 1;
        }
        if sh.inside.fetch_add(1, SeqCst) != 0 {
            sh.overlaps.fetch_add(1, SeqCst);
        }
        hold(sh.hold);
        sh.inside.fetch_sub(1, SeqCst);
        let released_at = sh.epoch.elapsed().as_nanos() as u64;
        release(algo, &mut con, &sh, &me, &mut out);
        out.spans.push((granted_at, released_at));
        out.grants += 1;
        out.waits
            .push(u32::try_from(waited.as_micros()).unwrap_or(u32::MAX));
    }
    out
}

/// A Redisson client's subscription connection: forwards each unlock
/// message on the lock's channel to its client.
fn listener(mut con: Connection, channel: String, tx: Sender<()>, subscribed: Arc<Barrier>) {
    let mut ps = con.as_pubsub();
    ps.subscribe(&channel).expect("SUBSCRIBE");
    subscribed.wait();
    loop {
        let msg = ps.get_message().expect("pub/sub message");
        let payload: String = msg.get_payload().unwrap_or_default();
        if payload == STOP_MESSAGE {
            return;
        }
        let _ = tx.send(());
    }
}

fn percentile(sorted: &[u32], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1] as f64
}

/// Jain's fairness index: (Σx)² / (n·Σx²).
pub fn jain(xs: &[u64]) -> f64 {
    let sum: f64 = xs.iter().map(|&x| x as f64).sum();
    let sq: f64 = xs.iter().map(|&x| (x as f64) * (x as f64)).sum();
    if sq == 0.0 {
        return 0.0;
    }
    sum * sum / (xs.len() as f64 * sq)
}

pub fn run_cell(
    server: &RedisServer,
    shas: &Shas,
    algo: Algo,
    clients: usize,
    hold_ms: u64,
    duration: Duration,
    rep: usize,
) -> Cell {
    let key = format!("contend:{}:c{clients}:h{hold_ms}:r{rep}", algo.tag());
    let sh = Arc::new(Shared {
        epoch: Instant::now(),
        key: key.clone(),
        hold: Duration::from_millis(hold_ms),
        stop: AtomicBool::new(false),
        inside: AtomicU32::new(0),
        overlaps: AtomicU64::new(0),
        shas: shas.clone(),
    });
    let mut admin = server.conn();
    let channel = scripts::redisson_channel(&key);
    if algo == Algo::Blpop {
        let _: i64 = redis::cmd("RPUSH")
            .arg(&key)
            .arg(TOKEN)
            .query(&mut admin)
            .expect("RPUSH the BLPOP floor's token");
    }

    // Redisson listeners first, all subscribed before the cell starts.
    let mut listeners = Vec::new();
    let mut receivers: Vec<Option<Receiver<()>>> = (0..clients).map(|_| None).collect();
    if algo == Algo::Redisson {
        let subscribed = Arc::new(Barrier::new(clients + 1));
        for rx_slot in receivers.iter_mut() {
            let (tx, rx) = mpsc::channel();
            *rx_slot = Some(rx);
            let con = server.conn();
            let ch = channel.clone();
            let b = subscribed.clone();
            listeners.push(thread::spawn(move || listener(con, ch, tx, b)));
        }
        subscribed.wait();
    }

    let start = Arc::new(Barrier::new(clients + 1));
    let mut handles = Vec::new();
    for (idx, rx) in receivers.into_iter().enumerate() {
        let con = server.conn();
        let sh = sh.clone();
        let b = start.clone();
        handles.push(thread::spawn(move || client(algo, con, sh, idx, rx, b)));
    }
    start.wait();
    let t0 = Instant::now();
    thread::sleep(duration);
    sh.stop.store(true, SeqCst);
    let window = t0.elapsed().as_secs_f64();
    let outs: Vec<ClientOut> = handles
        .into_iter()
        .map(|h| h.join().expect("client thread panicked"))
        .collect();
    if algo == Algo::Redisson {
        let _: i64 = redis::cmd("PUBLISH")
            .arg(&channel)
            .arg(STOP_MESSAGE)
            .query(&mut admin)
            .unwrap();
        for l in listeners {
            l.join().expect("listener thread panicked");
        }
    }
    let exists: i64 = redis::cmd("EXISTS").arg(&key).query(&mut admin).unwrap();
    // The BLPOP floor's list holds its token again once everyone is done.
    let leftover = if algo == Algo::Blpop {
        let len: i64 = redis::cmd("LLEN").arg(&key).query(&mut admin).unwrap();
        let _: i64 = redis::cmd("DEL").arg(&key).query(&mut admin).unwrap();
        u64::from(len != 1)
    } else {
        exists as u64
    };

    let grants: u64 = outs.iter().map(|o| o.grants).sum();
    let in_window: u64 = outs.iter().map(|o| o.in_window).sum();
    let commands: u64 = outs.iter().map(|o| o.commands).sum();
    let per_client: Vec<u64> = outs.iter().map(|o| o.in_window).collect();
    let mut waits: Vec<u32> = outs.iter().flat_map(|o| o.waits.iter().copied()).collect();
    waits.sort_unstable();
    // Mutual exclusion orders the holds: sorted by grant time, each grant
    // follows the previous hold's release.
    let mut spans: Vec<(u64, u64)> = outs.iter().flat_map(|o| o.spans.iter().copied()).collect();
    spans.sort_unstable();
    let mut handoffs: Vec<u32> = spans
        .windows(2)
        .map(|w| u32::try_from(w[1].0.saturating_sub(w[0].1) / 1000).unwrap_or(u32::MAX))
        .collect();
    handoffs.sort_unstable();
    let hold_actual =
        spans.iter().map(|(g, r)| (r - g) as f64).sum::<f64>() / spans.len().max(1) as f64 / 1000.0;
    Cell {
        handoff_p50: percentile(&handoffs, 50.0),
        handoff_p99: percentile(&handoffs, 99.0),
        handoff_mean: handoffs.iter().map(|&x| f64::from(x)).sum::<f64>()
            / handoffs.len().max(1) as f64,
        hold_actual,
        grants_per_s: in_window as f64 / window,
        cmds_per_grant: commands as f64 / grants.max(1) as f64,
        p50: percentile(&waits, 50.0),
        p99: percentile(&waits, 99.0),
        max: waits.last().copied().map_or(f64::NAN, f64::from),
        fairness: jain(&per_client),
        overlaps: sh.overlaps.load(SeqCst),
        errors: outs.iter().map(|o| o.errors).sum::<u64>() + leftover,
    }
}

/// Median round trip of a PING on one idle connection, µs.
pub fn ping_rtt(con: &mut Connection, n: usize) -> f64 {
    let mut v: Vec<u32> = (0..n)
        .map(|_| {
            let t = Instant::now();
            let _: String = redis::cmd("PING").query(con).expect("PING");
            u32::try_from(t.elapsed().as_micros()).unwrap_or(u32::MAX)
        })
        .collect();
    v.sort_unstable();
    percentile(&v, 50.0)
}
