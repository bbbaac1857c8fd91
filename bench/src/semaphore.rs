//! Part 4: a semaphore under contention. 64 clients (threads, each with its
//! own connection) loop acquire → hold 1 ms → release on one semaphore of 8
//! permits, for a fixed time:
//!
//! - **dlock**: `DLOCK.SEMACQUIRE key me LIMIT 8 PX 30000 WAIT 60000`, then
//!   `DLOCK.RELEASE key me` — the server queues the connection (strict FIFO).
//! - **Redisson model**: RPermitExpirableSemaphore's scripts — a string of
//!   available permits plus a sorted set of permit timeouts (client clocks);
//!   acquire expires old permits, takes one if available, else the client
//!   waits for a message on the semaphore's channel (every release publishes
//!   the new count to every subscriber) or for the nearest permit timeout,
//!   and asks again.
//!
//! Reported: grants/s against the ideal limit/hold, p99 wait, client
//! commands per grant, Jain's fairness over the clients' grant counts, and
//! grants that found `limit` other clients inside (must be 0).

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::SeqCst};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redis::{Connection, Value};

use crate::contention::jain;
use crate::server::RedisServer;
use crate::LEASE_MS;

pub const CLIENTS: usize = 64;
pub const LIMIT: u32 = 8;
pub const HOLD: Duration = Duration::from_millis(1);

const STOP_MESSAGE: &str = "bench-stop";

/// RPermitExpirableSemaphore.tryAcquireAsync, for one permit.
/// KEYS[1] permits, KEYS[2] timeouts zset, KEYS[3] channel;
/// ARGV[1] permit id, ARGV[2] its timeout (unix ms), ARGV[3] now (unix ms,
/// the client's clock). Returns 1 on grant, else the nearest permit timeout
/// (unix ms), or -1 when none.
pub const R_SEM_ACQUIRE: &str = "\
local expired = redis.call('zrangebyscore', KEYS[2], 0, ARGV[3])
if #expired > 0 then
  redis.call('zrem', KEYS[2], unpack(expired))
  local value = redis.call('incrby', KEYS[1], #expired)
  if tonumber(value) > 0 then
    redis.call('publish', KEYS[3], value)
  end
end
local value = redis.call('get', KEYS[1])
if value ~= false and tonumber(value) >= 1 then
  redis.call('decrby', KEYS[1], 1)
  redis.call('zadd', KEYS[2], ARGV[2], ARGV[1])
  return 1
end
local v = redis.call('zrange', KEYS[2], 0, 0, 'WITHSCORES')
if v[1] ~= nil then
  return tonumber(v[2])
end
return -1";

/// RPermitExpirableSemaphore.releaseAsync(permitId).
/// KEYS[1] permits, KEYS[2] timeouts zset, KEYS[3] channel; ARGV[1] permit id.
pub const R_SEM_RELEASE: &str = "\
local removed = redis.call('zrem', KEYS[2], ARGV[1])
if tonumber(removed) ~= 1 then
  return 0
end
local value = redis.call('incrby', KEYS[1], 1)
redis.call('publish', KEYS[3], value)
return 1";

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum SemAlgo {
    Dlock,
    Redisson,
}

impl SemAlgo {
    pub const ALL: [SemAlgo; 2] = [SemAlgo::Dlock, SemAlgo::Redisson];

    pub fn label(self) -> &'static str {
        match self {
            SemAlgo::Dlock => "**dlock** SEMACQUIRE (WAIT on the server)",
            SemAlgo::Redisson => "Redisson RPermitExpirableSemaphore model (Lua + pub/sub)",
        }
    }
}

/// What one run measured.
#[derive(Clone, Debug, Default)]
pub struct SemCell {
    pub grants_per_s: f64,
    pub cmds_per_grant: f64,
    pub p50: f64,
    pub p99: f64,
    pub fairness: f64,
    /// Grants that found `LIMIT` other clients inside.
    pub overlaps: u64,
    /// Most clients inside at once.
    pub max_inside: u32,
    pub errors: u64,
}

struct Shared {
    key: String,
    zset: String,
    channel: String,
    stop: AtomicBool,
    inside: AtomicU32,
    max_inside: AtomicU32,
    overlaps: AtomicU64,
    acquire_sha: String,
    release_sha: String,
}

#[derive(Default)]
struct Out {
    in_window: u64,
    commands: u64,
    waits: Vec<u32>,
    errors: u64,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

fn hold(d: Duration) {
    let end = Instant::now() + d;
    if d > Duration::from_micros(300) {
        thread::sleep(d - Duration::from_micros(200));
    }
    while Instant::now() < end {
        std::hint::spin_loop();
    }
}

/// One acquire; returns the permit id to release with (Redisson model).
fn acquire(
    algo: SemAlgo,
    con: &mut Connection,
    sh: &Shared,
    me: &str,
    n: u64,
    rx: Option<&Receiver<()>>,
    out: &mut Out,
) -> String {
    match algo {
        SemAlgo::Dlock => loop {
            out.commands += 1;
            let r: redis::RedisResult<Value> = redis::cmd("DLOCK.SEMACQUIRE")
                .arg(&sh.key)
                .arg(me)
                .arg("LIMIT")
                .arg(LIMIT)
                .arg("PX")
                .arg(LEASE_MS)
                .arg("WAIT")
                .arg(60_000)
                .query(con);
            match r {
                Ok(Value::Int(_)) => return String::new(),
                Ok(Value::Nil) => {}
                _ => {
                    out.errors += 1;
                    thread::sleep(Duration::from_millis(10));
                }
            }
        },
        SemAlgo::Redisson => {
            let rx = rx.expect("redisson client has a listener");
            let id = format!("{me}:{n}");
            let mut try_acquire = |out: &mut Out| -> Option<i64> {
                out.commands += 1;
                let now = now_ms();
                let r: redis::RedisResult<Value> = redis::cmd("EVALSHA")
                    .arg(&sh.acquire_sha)
                    .arg(3)
                    .arg(&sh.key)
                    .arg(&sh.zset)
                    .arg(&sh.channel)
                    .arg(&id)
                    .arg(now + LEASE_MS)
                    .arg(now)
                    .query(con);
                match r {
                    Ok(Value::Int(1)) => None,
                    Ok(Value::Int(next)) => Some(next),
                    _ => {
                        out.errors += 1;
                        Some(-1)
                    }
                }
            };
            if try_acquire(out).is_none() {
                return id;
            }
            // Subscribed all along (favours the baseline); older notices dropped.
            while rx.try_recv().is_ok() {}
            loop {
                let Some(next) = try_acquire(out) else {
                    return id;
                };
                let wait = if next > 0 {
                    (next as u64).saturating_sub(now_ms()).clamp(1, 5_000)
                } else {
                    5_000
                };
                match rx.recv_timeout(Duration::from_millis(wait)) {
                    Ok(()) | Err(RecvTimeoutError::Timeout) => {}
                    Err(RecvTimeoutError::Disconnected) => panic!("listener died"),
                }
            }
        }
    }
}

fn release(algo: SemAlgo, con: &mut Connection, sh: &Shared, me: &str, id: &str, out: &mut Out) {
    out.commands += 1;
    let r: redis::RedisResult<Value> = match algo {
        SemAlgo::Dlock => redis::cmd("DLOCK.RELEASE").arg(&sh.key).arg(me).query(con),
        SemAlgo::Redisson => redis::cmd("EVALSHA")
            .arg(&sh.release_sha)
            .arg(3)
            .arg(&sh.key)
            .arg(&sh.zset)
            .arg(&sh.channel)
            .arg(id)
            .query(con),
    };
    if !matches!(r, Ok(Value::Int(1))) {
        out.errors += 1;
    }
}

fn client(
    algo: SemAlgo,
    mut con: Connection,
    sh: Arc<Shared>,
    idx: usize,
    rx: Option<Receiver<()>>,
    start: Arc<Barrier>,
) -> Out {
    let me = format!("5c0e3a2b-7d41-4f6e-9a8b-{idx:012x}:1");
    let mut out = Out::default();
    start.wait();
    let mut n = 0u64;
    while !sh.stop.load(SeqCst) {
        n += 1;
        let t = Instant::now();
        let id = acquire(algo, &mut con, &sh, &me, n, rx.as_ref(), &mut out);
        let waited = t.elapsed();
        if !sh.stop.load(SeqCst) {
            out.in_window += 1;
        }
        let inside = sh.inside.fetch_add(1, SeqCst) + 1;
        sh.max_inside.fetch_max(inside, SeqCst);
        if inside > LIMIT {
            sh.overlaps.fetch_add(1, SeqCst);
        }
        hold(HOLD);
        sh.inside.fetch_sub(1, SeqCst);
        release(algo, &mut con, &sh, &me, &id, &mut out);
        out.waits
            .push(u32::try_from(waited.as_micros()).unwrap_or(u32::MAX));
    }
    out
}

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

pub fn run_cell(server: &RedisServer, algo: SemAlgo, duration: Duration, rep: usize) -> SemCell {
    let mut admin = server.conn();
    let load = |con: &mut Connection, src: &str| -> String {
        redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(src)
            .query(con)
            .expect("SCRIPT LOAD")
    };
    let key = format!("bench:sem:{algo:?}:{rep}");
    let sh = Arc::new(Shared {
        zset: format!("redisson__timeout__set:{{{key}}}"),
        channel: format!("redisson_sc:{{{key}}}"),
        key,
        stop: AtomicBool::new(false),
        inside: AtomicU32::new(0),
        max_inside: AtomicU32::new(0),
        overlaps: AtomicU64::new(0),
        acquire_sha: load(&mut admin, R_SEM_ACQUIRE),
        release_sha: load(&mut admin, R_SEM_RELEASE),
    });
    if algo == SemAlgo::Redisson {
        // trySetPermits(8).
        let _: Value = redis::cmd("SET")
            .arg(&sh.key)
            .arg(LIMIT)
            .query(&mut admin)
            .expect("SET permits");
    }
    let _: Value = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(&mut admin)
        .expect("CONFIG RESETSTAT");
    let start = Arc::new(Barrier::new(CLIENTS + 1));
    let mut listeners = Vec::new();
    let mut handles = Vec::new();
    for i in 0..CLIENTS {
        let rx = if algo == SemAlgo::Redisson {
            let (tx, rx) = mpsc::channel();
            let subscribed = Arc::new(Barrier::new(2));
            let con = server.conn();
            let ch = sh.channel.clone();
            let s2 = subscribed.clone();
            listeners.push(thread::spawn(move || listener(con, ch, tx, s2)));
            subscribed.wait();
            Some(rx)
        } else {
            None
        };
        let con = server.conn();
        let sh2 = sh.clone();
        let st = start.clone();
        handles.push(thread::spawn(move || client(algo, con, sh2, i, rx, st)));
    }
    start.wait();
    let t0 = Instant::now();
    thread::sleep(duration);
    sh.stop.store(true, SeqCst);
    let elapsed = t0.elapsed();
    let outs: Vec<Out> = handles
        .into_iter()
        .map(|h| h.join().expect("client thread"))
        .collect();
    if algo == SemAlgo::Redisson {
        let _: Value = redis::cmd("PUBLISH")
            .arg(&sh.channel)
            .arg(STOP_MESSAGE)
            .query(&mut admin)
            .expect("PUBLISH stop");
        for l in listeners {
            let _ = l.join();
        }
    }
    let grants: u64 = outs.iter().map(|o| o.waits.len() as u64).sum();
    let in_window: u64 = outs.iter().map(|o| o.in_window).sum();
    let commands: u64 = outs.iter().map(|o| o.commands).sum();
    let mut waits: Vec<u32> = outs.iter().flat_map(|o| o.waits.iter().copied()).collect();
    waits.sort_unstable();
    let per_client: Vec<u64> = outs.iter().map(|o| o.waits.len() as u64).collect();
    // Clean up for the next cell.
    let _: Value = redis::cmd("DEL")
        .arg(&sh.key)
        .arg(&sh.zset)
        .query(&mut admin)
        .expect("DEL");
    SemCell {
        grants_per_s: in_window as f64 / elapsed.as_secs_f64(),
        cmds_per_grant: commands as f64 / grants.max(1) as f64,
        p50: percentile(&waits, 50.0),
        p99: percentile(&waits, 99.0),
        fairness: jain(&per_client),
        overlaps: sh.overlaps.load(SeqCst),
        max_inside: sh.max_inside.load(SeqCst),
        errors: outs.iter().map(|o| o.errors).sum(),
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    if v.is_empty() {
        return f64::NAN;
    }
    v[v.len() / 2]
}

/// The report section (markdown) and whether every target was met.
pub fn render(cells: &[(SemAlgo, Vec<SemCell>)], duration: Duration) -> (String, bool) {
    let mut s = String::new();
    let ideal = f64::from(LIMIT) / HOLD.as_secs_f64();
    s.push_str("\n## Semaphore: 64 clients, limit 8, 1 ms hold\n\n");
    s.push_str(&format!(
        "Each client loops acquire one permit → hold 1 ms → release, for {} ms per run \
         (median of {} run(s)). Ideal: limit / hold = {ideal:.0} grants/s. \
         Commands per grant counts the client's acquire attempts and releases.\n\n",
        duration.as_millis(),
        cells.first().map_or(0, |c| c.1.len())
    ));
    s.push_str("| algorithm | grants/s | % of ideal | p50 wait | p99 wait | commands/grant | Jain | max inside | over-limit overlaps | errors |\n");
    s.push_str("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    let mut med = Vec::new();
    for (algo, runs) in cells {
        let m = |f: &dyn Fn(&SemCell) -> f64| median(runs.iter().map(f).collect());
        let g = m(&|c| c.grants_per_s);
        let row = (
            g,
            m(&|c| c.p50),
            m(&|c| c.p99),
            m(&|c| c.cmds_per_grant),
            m(&|c| c.fairness),
            runs.iter().map(|c| c.max_inside).max().unwrap_or(0),
            runs.iter().map(|c| c.overlaps).sum::<u64>(),
            runs.iter().map(|c| c.errors).sum::<u64>(),
        );
        s.push_str(&format!(
            "| {} | {:.0} | {:.0}% | {:.2} ms | {:.2} ms | {:.2} | {:.3} | {} | {} | {} |\n",
            algo.label(),
            row.0,
            100.0 * row.0 / ideal,
            row.1 / 1000.0,
            row.2 / 1000.0,
            row.3,
            row.4,
            row.5,
            row.6,
            row.7
        ));
        med.push((*algo, row));
    }
    let get = |a: SemAlgo| med.iter().find(|m| m.0 == a).map(|m| m.1);
    let mut all = true;
    if let (Some(d), Some(r)) = (get(SemAlgo::Dlock), get(SemAlgo::Redisson)) {
        let checks = [
            (
                format!("grants/s ≥ 2× the Redisson model's: {:.2}×", d.0 / r.0),
                d.0 >= 2.0 * r.0,
            ),
            (
                format!("≤ 2.05 commands per grant: {:.2}", d.3),
                d.3 <= 2.05,
            ),
            (format!("Jain ≥ 0.99: {:.3}", d.4), d.4 >= 0.99),
            (
                format!("zero over-limit overlaps (both): {} and {}", d.6, r.6),
                d.6 == 0 && r.6 == 0,
            ),
        ];
        s.push_str("\nTargets (dlock):\n\n");
        for (text, ok) in checks {
            all &= ok;
            s.push_str(&format!(
                "- {} — {}\n",
                text,
                if ok { "**met**" } else { "**missed**" }
            ));
        }
    }
    (s, all)
}
