//! The report's issue-16 sections: per call under load, the memory
//! breakdown, the BLPOP floor comparison, handoff cost against waiters, and
//! scale on one node — each figure with its target.

use std::collections::HashMap;
use std::fmt::Write as _;

use crate::contention::{Algo, Cell};
use crate::memory::{self, Kind};
use crate::percall::{LoadSample, Pair, LOAD_THREADS};
use crate::scale::{Event, HandAlgo, Scale, ScaleCell};
use crate::{dur, median, ratio, spread, us, Target};

fn t16(targets: &mut Vec<Target>, what: String, measured: String, limit: &str, ok: bool) {
    targets.push(Target {
        issue: 16,
        what,
        measured,
        limit: limit.into(),
        ok,
    });
}

/// Per call, measured while a steady load runs (the reported method).
pub fn load(
    s: &mut String,
    targets: &mut Vec<Target>,
    load: &[HashMap<Pair, LoadSample>],
    pairs: usize,
) {
    if load.is_empty() {
        return;
    }
    let _ = writeln!(
        s,
        "### Per call under a steady load (the reported method)\n\n\
         {LOAD_THREADS} connections each send pipelines of 50 `acquire k; release k` pairs on \
         their own keys ({pairs} pairs per lock family and repeat), so every acquire creates a \
         lock and every release deletes it, on a near-empty keyspace, as in real use. Server \
         µs = Δ`usec` / Δ`calls` of `INFO commandstats` over the load: the time inside the \
         command's own function (for a module command: its handler, including the keyspace \
         notifications and PUBLISH it fires and the RM_Replicate bookkeeping; not the \
         propagation to replicas/AOF, which runs after the command; not reading and parsing \
         the request, not writing the reply to the socket, not the event loop). Client µs = \
         median round trip of one unpipelined acquire + release on an idle connection (what \
         a caller waits: network, event loop, parsing, reply writing, both commands).\n"
    );
    let _ = writeln!(
        s,
        "| lock: acquire + release | server µs per pair | × SET NX PX + DEL | acquire µs | release µs | client µs per pair (round trips) | × floor |"
    );
    let _ = writeln!(s, "|---|---:|---:|---:|---:|---:|---:|");
    let opt = |x: f64| {
        if x.is_nan() {
            "(both EVALSHA)".to_string()
        } else {
            us(x)
        }
    };
    for pair in Pair::ALL {
        let v: Vec<f64> = load.iter().map(|r| r[&pair].pair_usec).collect();
        let rf: Vec<f64> = load
            .iter()
            .map(|r| r[&pair].pair_usec / r[&Pair::SetDel].pair_usec)
            .collect();
        let c: Vec<f64> = load.iter().map(|r| r[&pair].client_usec).collect();
        let cf: Vec<f64> = load
            .iter()
            .map(|r| r[&pair].client_usec / r[&Pair::SetDel].client_usec)
            .collect();
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} |",
            pair.label(),
            spread(&v, us),
            ratio(median(rf)),
            opt(median(load.iter().map(|r| r[&pair].acquire_usec).collect())),
            opt(median(load.iter().map(|r| r[&pair].release_usec).collect())),
            spread(&c, us),
            ratio(median(cf)),
        );
    }
    let rf = median(
        load.iter()
            .map(|r| r[&Pair::Dlock].pair_usec / r[&Pair::SetDel].pair_usec)
            .collect(),
    );
    t16(
        targets,
        "per call: server µs of ACQUIRE + RELEASE vs SET NX PX + DEL (commandstats under load)"
            .into(),
        ratio(rf),
        "≤ 1.25×",
        rf <= 1.25,
    );
    s.push('\n');
}

/// The jemalloc size class of an allocation of `n` bytes (x86-64: 8, then
/// steps of 16 up to 128, then four classes per power of two).
fn je(n: usize) -> usize {
    if n <= 8 {
        return 8;
    }
    if n <= 128 {
        return n.div_ceil(16) * 16;
    }
    let lg = usize::BITS - (n - 1).leading_zeros(); // 2^(lg-1) < n <= 2^lg
    let step = 1usize << (lg - 3);
    n.div_ceil(step) * step
}

/// Memory: the issue-16 target and where the bytes go.
pub fn memory(
    s: &mut String,
    targets: &mut Vec<Target>,
    mem: &HashMap<Kind, Vec<memory::Sample>>,
    n: usize,
    server: &str,
    redis_jemalloc: bool,
) {
    let med = |k: Kind, f: fn(&memory::Sample) -> f64| median(mem[&k].iter().map(f).collect());
    let set = med(Kind::SetString, |x| x.per_lock);
    let dl = med(Kind::Dlock, |x| x.per_lock);
    let dl_usage = med(Kind::Dlock, |x| x.usage);
    t16(
        targets,
        "memory: bytes per held lock (used_memory Δ) vs a `SET key owner NX PX` lock".into(),
        format!("{dl:.0} B vs {set:.0} B = {}", ratio(dl / set)),
        "≤ 1.30×",
        dl <= 1.3 * set,
    );
    if !redis_jemalloc {
        let _ = writeln!(
            s,
            "Where the bytes go: the breakdown is computed for Redis 7.x with jemalloc (dictEntry, \
             sds key, robj, expires entry); {server} lays keys out differently, so it is left \
             out here — run the bench on redis-server for it.\n"
        );
        return;
    }
    // Redis 7.0's layout: a key is a dictEntry (24 B, allocated 32) in the
    // db's dict, a bucket pointer per table slot, an sds key (sdshdr5 below
    // 32 bytes: 1 + len + 1), and the value robj.
    let table = n.next_power_of_two() as f64;
    let bucket = 8.0 * table / n as f64;
    let key_sds = (0..n)
        .map(|i| je(format!("lock:{i}").len() + 2) as f64)
        .sum::<f64>()
        / n as f64;
    let owner = crate::OWNER.len();
    let embstr = je(16 + 3 + owner + 1) as f64;
    let entry = je(24) as f64;
    // MEMORY USAGE = value + sds of `lock:0` + sizeof(dictEntry) (24).
    let module_reported = dl_usage - 24.0 - je(8) as f64;
    let _ = writeln!(
        s,
        "Where the bytes go ({n} locks; Redis 7.0 + jemalloc layout, computed; the last row is \
         the measured Δ minus the rows above; measured on {server}):\n"
    );
    let _ = writeln!(s, "| part | SET NX PX lock (B) | dlock mutex (B) |");
    let _ = writeln!(s, "|---|---:|---:|");
    let rows: [(&str, f64, f64); 7] = [
        ("db dict entry (dictEntry 24 B → jemalloc 32)", entry, entry),
        (
            "db dict bucket pointers (8 B × table size / keys)",
            bucket,
            bucket,
        ),
        ("key sds (`lock:N`, sdshdr5, mean size class)", key_sds, key_sds),
        (
            "value: SET = embstr robj (16 + 3 + owner + 1); dlock = robj 16 + moduleValue 16",
            embstr,
            32.0,
        ),
        (
            "expires dict entry + bucket pointers (SET; dlock keeps no Redis TTL)",
            entry + bucket,
            0.0,
        ),
        (
            "module: the lock value as its mem_usage callback reports it (MEMORY USAGE − 24 − key sds)",
            0.0,
            module_reported,
        ),
        ("", 0.0, 0.0),
    ];
    let mut sum_set = 0.0;
    let mut sum_dl = 0.0;
    for (what, a, b) in rows.iter().take(6) {
        sum_set += a;
        sum_dl += b;
        let _ = writeln!(s, "| {what} | {a:.1} | {b:.1} |");
    }
    let _ = writeln!(
        s,
        "| rest: module's expiry index and allocation rounding not in mem_usage, dict growth (measured − rows) | {:.1} | {:.1} |",
        set - sum_set,
        dl - sum_dl
    );
    let _ = writeln!(
        s,
        "| **measured used_memory Δ per lock** | **{set:.0}** | **{dl:.0}** |\n"
    );
}

fn cells_median(
    cells: &HashMap<(Algo, usize, u64), Vec<Cell>>,
    a: Algo,
    c: usize,
    h: u64,
    f: fn(&Cell) -> f64,
) -> Option<f64> {
    cells
        .get(&(a, c, h))
        .map(|v| median(v.iter().map(f).collect()))
}

/// dlock against the BLPOP floor, 64 clients (or the largest count run).
pub fn floor(
    s: &mut String,
    targets: &mut Vec<Target>,
    cells: &HashMap<(Algo, usize, u64), Vec<Cell>>,
    clients: &[usize],
    holds: &[u64],
) {
    let Some(&c) = clients.iter().find(|&&c| c == 64).or(clients.iter().max()) else {
        return;
    };
    if !cells.contains_key(&(Algo::Blpop, c, holds.first().copied().unwrap_or(0))) {
        return;
    }
    let _ = writeln!(
        s,
        "### dlock against the BLPOP floor, {c} clients on one key\n\n\
         Ratios taken within each repeat (same run, same cell), then their median.\n"
    );
    let _ = writeln!(
        s,
        "| hold | BLPOP grants/s | dlock grants/s | ratio | BLPOP p99 wait | dlock p99 wait | ratio |"
    );
    let _ = writeln!(s, "|---|---:|---:|---:|---:|---:|---:|");
    for &h in holds {
        let (Some(b), Some(d)) = (
            cells.get(&(Algo::Blpop, c, h)),
            cells.get(&(Algo::Dlock, c, h)),
        ) else {
            continue;
        };
        let g = median(
            b.iter()
                .zip(d)
                .map(|(b, d)| d.grants_per_s / b.grants_per_s)
                .collect(),
        );
        let p = median(b.iter().zip(d).map(|(b, d)| d.p99 / b.p99).collect());
        let bg: Vec<f64> = b.iter().map(|x| x.grants_per_s).collect();
        let dg: Vec<f64> = d.iter().map(|x| x.grants_per_s).collect();
        let _ = writeln!(
            s,
            "| {h} ms | {} | {} | {} | {} | {} | {} |",
            spread(&bg, |x| format!("{x:.0}")),
            spread(&dg, |x| format!("{x:.0}")),
            ratio(g),
            dur(cells_median(cells, Algo::Blpop, c, h, |x| x.p99).unwrap_or(f64::NAN)),
            dur(cells_median(cells, Algo::Dlock, c, h, |x| x.p99).unwrap_or(f64::NAN)),
            ratio(p)
        );
        if h == 0 {
            t16(
                targets,
                format!("handoff, {c} clients, no hold: dlock grants/s vs BLPOP floor"),
                ratio(g),
                "≥ 0.90×",
                g >= 0.9,
            );
        } else {
            t16(
                targets,
                format!("handoff, {c} clients, hold {h} ms: dlock grants/s vs BLPOP floor"),
                ratio(g),
                "≥ 0.97×",
                g >= 0.97,
            );
            t16(
                targets,
                format!("handoff, {c} clients, hold {h} ms: dlock p99 wait vs BLPOP's"),
                ratio(p),
                "≤ 1.10×",
                p <= 1.1,
            );
        }
    }
    s.push('\n');
}

/// Handoff cost against the number of waiting connections.
pub fn waiters(
    s: &mut String,
    targets: &mut Vec<Target>,
    cells: &[(HandAlgo, ScaleCell)],
    quick: bool,
) {
    if cells.is_empty() {
        return;
    }
    let _ = writeln!(
        s,
        "## 4. Handoff cost against the number of waiters\n\n\
         N connections on one key: one holds, N − 1 wait on the server (`DLOCK.ACQUIRE key \
         owner-i PX 60000 WAIT 60000`; floor: `BLPOP key 60` on a one-token list). One driver \
         thread makes the holder send release + re-queue (pipelined) and reads the grant on \
         the next socket (FIFO), for {} ms after one warm-up round. Server CPU per grant = \
         Δ(used_cpu_user + used_cpu_sys) of `INFO cpu` / grants — the whole process: event \
         loop, socket reads and writes, both commands; commandstats µs = Δusec of the acquire \
         and release commands / grants.\n",
        if quick { 500 } else { 2000 }
    );
    let _ = writeln!(
        s,
        "| waiting connections | BLPOP CPU µs/grant | dlock CPU µs/grant | dlock × BLPOP | dlock commandstats µs/grant | BLPOP grants/s | dlock grants/s |"
    );
    let _ = writeln!(s, "|---:|---:|---:|---:|---:|---:|---:|");
    let mut ns: Vec<usize> = cells.iter().map(|(_, c)| c.waiters).collect();
    ns.dedup();
    let get = |a: HandAlgo, n: usize| {
        cells
            .iter()
            .find(|(x, c)| *x == a && c.waiters == n)
            .map(|x| x.1)
    };
    for &n in &ns {
        let (Some(b), Some(d)) = (get(HandAlgo::Blpop, n), get(HandAlgo::Dlock, n)) else {
            continue;
        };
        let _ = writeln!(
            s,
            "| {n} | {} | {} | {} | {} | {:.0} | {:.0} |",
            us(b.cpu_us),
            us(d.cpu_us),
            ratio(d.cpu_us / b.cpu_us),
            us(d.cmd_us),
            b.grants_per_s,
            d.grants_per_s
        );
    }
    let lo = ns.iter().min().and_then(|&n| get(HandAlgo::Dlock, n));
    let hi = ns.iter().max().and_then(|&n| get(HandAlgo::Dlock, n));
    if let (Some(lo), Some(hi)) = (lo, hi) {
        let figures: Vec<String> = ns
            .iter()
            .filter_map(|&n| get(HandAlgo::Dlock, n).map(|c| format!("{n}: {}", us(c.cpu_us))))
            .collect();
        let r = hi.cpu_us / lo.cpu_us;
        t16(
            targets,
            format!(
                "handoff cost flat in waiters: server CPU µs/grant ({}), {} / {}",
                figures.join(", "),
                hi.waiters,
                lo.waiters
            ),
            ratio(r),
            "≤ 1.50×",
            r <= 1.5,
        );
    }
    s.push('\n');
}

fn event_row(s: &mut String, e: &Event) {
    let lat: Vec<String> = e
        .latency
        .iter()
        .map(|(n, m)| format!("{n} {m} ms"))
        .collect();
    let _ = writeln!(
        s,
        "| {} | {} | {} | {} | {} | {} |",
        e.what,
        dur(e.took_us),
        dur(e.stall.max_us),
        e.stall.over_10ms,
        dur(e.idle_max_us),
        if lat.is_empty() {
            "–".to_string()
        } else {
            lat.join(", ")
        }
    );
}

/// Scale on one node.
pub fn scale(s: &mut String, targets: &mut Vec<Target>, sc: &Scale) {
    let _ = writeln!(
        s,
        "## 5. Scale on one node\n\n\
         {} held locks (`scale:N`, 38-byte owner) acquired pipelined (1000 per pipeline), the \
         lease of each pipeline set so that every lease ends at the same instant, a few \
         seconds after the last one is acquired. Stall probe: a client sends PING every \
         millisecond on its own connection; its longest round trip is the longest time the \
         event loop left it waiting (on this shared 2-core machine the scheduler alone gives \
         a few ms: *idle* = the same probe in the quiet half-second before). `LATENCY LATEST` \
         (threshold 1 ms, reset before) lists what Redis itself timed. Lateness: a subscriber \
         on the channels of {} evenly spaced locks timestamps each `expired` notice against \
         the instant computed by the client (the server's own instant is up to a pipeline's \
         latency later, so lateness is over-stated, never under).\n",
        sc.locks, sc.samples
    );
    let _ = writeln!(
        s,
        "Fill: {:.2} s ({:.0} k locks/s); memory {:.1} MB used, {:.0} B per lock. Leases: \
         `expired` notice p50 {:.1} ms / p99 {:.1} ms / max {:.1} ms after the instant, {} of \
         {} missing; DBSIZE 0 at {:.1} ms after the instant (the same number of `SET NX PX` \
         locks, deleted by Redis' own expiry: {:.1} ms). One handoff with {} waiters queued: {}.\n",
        sc.acquire_s,
        sc.acquire_per_s / 1000.0,
        sc.used_memory_mb,
        sc.bytes_per_lock,
        sc.late_p50_ms,
        sc.late_p99_ms,
        sc.late_max_ms,
        sc.missing,
        sc.samples,
        sc.all_gone_ms,
        sc.set_all_gone_ms,
        sc.waiters,
        dur(sc.handoff_us)
    );
    let _ = writeln!(
        s,
        "| event | took | longest PING round trip | round trips > 10 ms | idle control | LATENCY LATEST (max) |"
    );
    let _ = writeln!(s, "|---|---:|---:|---:|---:|---|");
    for e in [
        &sc.set_expiry,
        &sc.expiry,
        &sc.flush_async,
        &sc.set_flush_sync,
        &sc.flush_sync,
        &sc.block_floor,
        &sc.block,
        &sc.disconnect_floor,
        &sc.disconnect,
    ] {
        event_row(s, e);
    }
    s.push('\n');
    for e in [
        &sc.expiry,
        &sc.flush_async,
        &sc.flush_sync,
        &sc.block,
        &sc.disconnect,
    ] {
        let measured = if std::ptr::eq(e, &sc.flush_sync) {
            format!(
                "{} (SET NX PX locks: {})",
                dur(e.stall.max_us),
                dur(sc.set_flush_sync.stall.max_us)
            )
        } else {
            dur(e.stall.max_us)
        };
        t16(
            targets,
            format!("scale: longest event-loop stall, {}", e.what),
            measured,
            "≤ 10 ms",
            e.stall.max_us <= 10_000.0,
        );
    }
    let late = sc.late_max_ms.max(sc.all_gone_ms);
    t16(
        targets,
        format!(
            "scale: every lease of {} ends within 100 ms of its instant (max of sampled notices, DBSIZE 0)",
            sc.locks
        ),
        format!(
            "{late:.1} ms, {} notices missing (SET NX PX locks: DBSIZE 0 at {:.1} ms)",
            sc.missing, sc.set_all_gone_ms
        ),
        "≤ 100 ms",
        late <= 100.0 && sc.missing == 0,
    );
}

#[cfg(test)]
mod tests {
    use super::je;

    #[test]
    fn jemalloc_size_classes() {
        // The classes that explain a SET-string lock's 165 B on Redis 7.0.
        assert_eq!(je(8), 8);
        assert_eq!(je(12), 16);
        assert_eq!(je(24), 32);
        assert_eq!(je(58), 64);
        assert_eq!(je(129), 160);
        assert_eq!(je(160), 160);
        assert_eq!(je(161), 192);
        assert_eq!(je(257), 320);
    }
}
