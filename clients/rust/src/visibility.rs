//! Typed access to what the server shows about its locks (issue 23):
//! `DLOCK.INFO` ([`LockInfo`]), `DLOCK.SCAN` ([`ScanOptions`]), `DLOCK.STATS`
//! ([`KindStats`], [`Histogram`]) and `DLOCK.SLOWLOG` ([`SlowEntry`]). The
//! blocking [`Client`] methods are here; [`crate::aio::AsyncClient`] has the same.

use crate::blocking::Client;
use crate::error::{Error, Result};
use redis::{Cmd, Value};

/// One hold in [`LockInfo::holders`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HolderInfo {
    /// The owner id, as sent.
    pub owner: Vec<u8>,
    /// `exclusive`, `read`, `write` or `permit`.
    pub mode: String,
    /// Reentrant count (a semaphore hold: its permits).
    pub count: i64,
    /// The fencing token of the grant that made the hold.
    pub token: i64,
    /// Remaining lease, ms.
    pub ttl_ms: i64,
    /// Time since the hold was first granted, ms (`None`: unknown, loaded from an
    /// older payload).
    pub held_ms: Option<u64>,
}

/// One place in [`LockInfo::waiters`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WaiterInfo {
    /// The owner id (a latch's waiters: the connection's id).
    pub owner: Vec<u8>,
    /// The mode asked for.
    pub mode: String,
    /// `blocked` (a connection waits on the server) or `queued` (a fair-lock place).
    pub state: String,
    /// Time since the place was taken, ms (`None`: unknown).
    pub waited_ms: Option<u64>,
    /// 0-based place in the queue.
    pub position: u64,
    /// The owners that must let go or be served first.
    pub blocked_by: Vec<Vec<u8>>,
}

/// `DLOCK.INFO`: a lock's kind, last token, holders and waiters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LockInfo {
    /// `mutex`, `rw`, `fair`, `semaphore` or `latch`.
    pub kind: String,
    /// The last token issued for the key.
    pub token: i64,
    /// The holds.
    pub holders: Vec<HolderInfo>,
    /// The queue, in order.
    pub waiters: Vec<WaiterInfo>,
}

/// Filters of [`Client::scan`] (`DLOCK.SCAN`); all optional.
#[derive(Clone, Debug, Default)]
pub struct ScanOptions {
    /// `MATCH pattern`.
    pub pattern: Option<String>,
    /// `COUNT n`: work per call (server default 10).
    pub count: Option<u64>,
    /// `OWNER owner`: locks the owner holds or waits on.
    pub owner: Option<String>,
    /// `KIND kind`.
    pub kind: Option<String>,
    /// `CONTENDED`: locks with waiters.
    pub contended: bool,
}

/// A histogram of `DLOCK.STATS`: `(upper bound µs, count)` of its non-empty buckets.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Histogram {
    /// The buckets, in increasing order of bound.
    pub buckets: Vec<(u64, u64)>,
}

impl Histogram {
    /// Durations counted.
    pub fn total(&self) -> u64 {
        self.buckets.iter().fold(0u64, |a, b| a.saturating_add(b.1))
    }

    /// The upper bound (µs) of the bucket holding the `p`-th percentile, as
    /// `INFO dlock` computes it; `None` when empty.
    ///
    /// ```
    /// let h = dlock_client::Histogram { buckets: vec![(100, 9), (200, 1)] };
    /// assert_eq!(h.percentile(50.0), Some(100));
    /// assert_eq!(h.percentile(99.0), Some(200));
    /// ```
    pub fn percentile(&self, p: f64) -> Option<u64> {
        let total = self.total();
        if total == 0 {
            return None;
        }
        let want = ((total as f64) * p.clamp(0.0, 100.0) / 100.0)
            .ceil()
            .max(1.0) as u64;
        let mut seen = 0u64;
        for (bound, count) in &self.buckets {
            seen = seen.saturating_add(*count);
            if seen >= want {
                return Some(*bound);
            }
        }
        self.buckets.last().map(|b| b.0)
    }
}

/// `DLOCK.STATS` of one kind.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KindStats {
    /// `mutex`, `rw`, `fair`, `semaphore` or `latch`.
    pub kind: String,
    /// Waits on the server, arrival to grant, time-out or error.
    pub waits: Histogram,
    /// Holds, grant to end.
    pub holds: Histogram,
}

/// One `DLOCK.SLOWLOG` entry.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SlowEntry {
    /// Increasing id.
    pub id: u64,
    /// Unix ms when the wait or hold ended.
    pub ended_ms: u64,
    /// `wait` or `hold`.
    pub phase: String,
    /// The lock's key.
    pub key: Vec<u8>,
    /// The owner.
    pub owner: Vec<u8>,
    /// The lock's kind.
    pub kind: String,
    /// The mode.
    pub mode: String,
    /// How long, ms.
    pub duration_ms: u64,
    /// `granted`, `timeout`, `deadlock`, `error`, `disconnected`, `released`,
    /// `expired`, `forced` or `deleted`.
    pub outcome: String,
    /// For a wait: whom it waited on when it began.
    pub blocked_by: Vec<Vec<u8>>,
}

fn unexpected(what: &str, v: &Value) -> Error {
    Error::Unexpected(format!("{what}: unexpected reply {v:?}"))
}

fn bytes(v: &Value) -> Vec<u8> {
    match v {
        Value::BulkString(b) => b.clone(),
        Value::SimpleString(s) | Value::VerbatimString { text: s, .. } => s.as_bytes().to_vec(),
        Value::Int(i) => i.to_string().into_bytes(),
        _ => Vec::new(),
    }
}

fn text(v: &Value) -> String {
    String::from_utf8_lossy(&bytes(v)).into_owned()
}

fn int(v: &Value) -> i64 {
    match v {
        Value::Int(i) => *i,
        other => text(other).parse().unwrap_or(0),
    }
}

fn elapsed(v: &Value) -> Option<u64> {
    u64::try_from(int(v)).ok()
}

fn array(v: &Value) -> &[Value] {
    match v {
        Value::Array(a) | Value::Set(a) => a,
        _ => &[],
    }
}

/// A map reply (RESP3) or a flat field/value array (RESP2) as pairs.
fn pairs(v: &Value) -> Vec<(String, &Value)> {
    match v {
        Value::Map(m) => m.iter().map(|(k, v)| (text(k), v)).collect(),
        Value::Array(a) => a
            .chunks(2)
            .filter_map(|c| match c {
                [k, v] => Some((text(k), v)),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// Parses a `DLOCK.INFO` reply (`None`: no lock).
pub(crate) fn parse_info(v: &Value) -> Result<Option<LockInfo>> {
    if matches!(v, Value::Nil) {
        return Ok(None);
    }
    if !matches!(v, Value::Map(_) | Value::Array(_)) {
        return Err(unexpected("DLOCK.INFO", v));
    }
    let mut info = LockInfo::default();
    for (k, val) in pairs(v) {
        match k.as_str() {
            "kind" => info.kind = text(val),
            "token" => info.token = int(val),
            "holders" => {
                for h in array(val) {
                    let mut hi = HolderInfo::default();
                    for (k, val) in pairs(h) {
                        match k.as_str() {
                            "owner" => hi.owner = bytes(val),
                            "mode" => hi.mode = text(val),
                            "count" => hi.count = int(val),
                            "token" => hi.token = int(val),
                            "ttl" => hi.ttl_ms = int(val),
                            "held_ms" => hi.held_ms = elapsed(val),
                            _ => {}
                        }
                    }
                    info.holders.push(hi);
                }
            }
            "waiters" => {
                for w in array(val) {
                    let mut wi = WaiterInfo::default();
                    for (k, val) in pairs(w) {
                        match k.as_str() {
                            "owner" => wi.owner = bytes(val),
                            "mode" => wi.mode = text(val),
                            "state" => wi.state = text(val),
                            "waited_ms" => wi.waited_ms = elapsed(val),
                            "position" => wi.position = elapsed(val).unwrap_or(0),
                            "blocked_by" => wi.blocked_by = array(val).iter().map(bytes).collect(),
                            _ => {}
                        }
                    }
                    info.waiters.push(wi);
                }
            }
            _ => {}
        }
    }
    Ok(Some(info))
}

/// Parses a `DLOCK.SCAN` reply: `(next cursor, keys)`.
pub(crate) fn parse_scan(v: &Value) -> Result<(u64, Vec<String>)> {
    match array(v) {
        [cursor, keys] => {
            let c = text(cursor)
                .parse()
                .map_err(|_| unexpected("DLOCK.SCAN", v))?;
            Ok((c, array(keys).iter().map(text).collect()))
        }
        _ => Err(unexpected("DLOCK.SCAN", v)),
    }
}

/// Parses a `DLOCK.STATS` reply.
pub(crate) fn parse_stats(v: &Value) -> Result<Vec<KindStats>> {
    if !matches!(v, Value::Map(_) | Value::Array(_)) {
        return Err(unexpected("DLOCK.STATS", v));
    }
    let hist = |v: &Value| Histogram {
        buckets: array(v)
            .iter()
            .filter_map(|b| match array(b) {
                [bound, count] => Some((elapsed(bound)?, elapsed(count)?)),
                _ => None,
            })
            .collect(),
    };
    Ok(pairs(v)
        .into_iter()
        .map(|(kind, h)| {
            let mut k = KindStats {
                kind,
                ..KindStats::default()
            };
            for (name, val) in pairs(h) {
                match name.as_str() {
                    "waits" => k.waits = hist(val),
                    "holds" => k.holds = hist(val),
                    _ => {}
                }
            }
            k
        })
        .collect())
}

/// Parses a `DLOCK.SLOWLOG GET` reply.
pub(crate) fn parse_slowlog(v: &Value) -> Result<Vec<SlowEntry>> {
    if !matches!(v, Value::Array(_)) {
        return Err(unexpected("DLOCK.SLOWLOG", v));
    }
    array(v)
        .iter()
        .map(|e| match array(e) {
            [id, ended, phase, key, owner, kind, mode, ms, outcome, by] => Ok(SlowEntry {
                id: elapsed(id).unwrap_or(0),
                ended_ms: elapsed(ended).unwrap_or(0),
                phase: text(phase),
                key: bytes(key),
                owner: bytes(owner),
                kind: text(kind),
                mode: text(mode),
                duration_ms: elapsed(ms).unwrap_or(0),
                outcome: text(outcome),
                blocked_by: array(by).iter().map(bytes).collect(),
            }),
            _ => Err(unexpected("DLOCK.SLOWLOG entry", e)),
        })
        .collect()
}

pub(crate) fn info_cmd(key: &str) -> Cmd {
    let mut c = redis::cmd("DLOCK.INFO");
    c.arg(key);
    c
}

pub(crate) fn scan_cmd(cursor: u64, o: &ScanOptions) -> Cmd {
    let mut c = redis::cmd("DLOCK.SCAN");
    c.arg(cursor);
    if let Some(p) = &o.pattern {
        c.arg("MATCH").arg(p);
    }
    if let Some(n) = o.count {
        c.arg("COUNT").arg(n);
    }
    if let Some(w) = &o.owner {
        c.arg("OWNER").arg(w);
    }
    if let Some(k) = &o.kind {
        c.arg("KIND").arg(k);
    }
    if o.contended {
        c.arg("CONTENDED");
    }
    c
}

pub(crate) fn stats_cmd(reset: bool) -> Cmd {
    let mut c = redis::cmd("DLOCK.STATS");
    if reset {
        c.arg("RESET");
    }
    c
}

pub(crate) fn slowlog_cmd(sub: &str, n: Option<i64>) -> Cmd {
    let mut c = redis::cmd("DLOCK.SLOWLOG");
    c.arg(sub);
    if let Some(n) = n {
        c.arg(n);
    }
    c
}

pub(crate) fn int_reply(what: &str, v: &Value) -> Result<u64> {
    match v {
        Value::Int(i) => u64::try_from(*i).map_err(|_| unexpected(what, v)),
        _ => Err(unexpected(what, v)),
    }
}

impl Client {
    fn query(&self, c: &Cmd) -> Result<Value> {
        Ok(self.inner.run(c, self.inner.opts.command_timeout)?)
    }

    /// `DLOCK.INFO key`: the lock's holders (with `held_ms`) and waiters (with
    /// `waited_ms`, `position`, `blocked_by`); `None` when there is no lock.
    pub fn info(&self, key: &str) -> Result<Option<LockInfo>> {
        parse_info(&self.query(&info_cmd(key))?)
    }

    /// One `DLOCK.SCAN` call: `(next cursor, keys)`; cursor 0 starts and ends a full
    /// iteration (SCAN's contract).
    pub fn scan(&self, cursor: u64, opts: &ScanOptions) -> Result<(u64, Vec<String>)> {
        parse_scan(&self.query(&scan_cmd(cursor, opts))?)
    }

    /// Every lock key of a full `DLOCK.SCAN` iteration (a key may come twice).
    pub fn scan_all(&self, opts: &ScanOptions) -> Result<Vec<String>> {
        let mut out = Vec::new();
        let mut cursor = 0;
        loop {
            let (next, keys) = self.scan(cursor, opts)?;
            out.extend(keys);
            if next == 0 {
                return Ok(out);
            }
            cursor = next;
        }
    }

    /// `DLOCK.STATS`: wait and hold histograms per kind.
    pub fn stats(&self) -> Result<Vec<KindStats>> {
        parse_stats(&self.query(&stats_cmd(false))?)
    }

    /// `DLOCK.STATS RESET`.
    pub fn stats_reset(&self) -> Result<()> {
        self.query(&stats_cmd(true)).map(|_| ())
    }

    /// `DLOCK.SLOWLOG GET n` (`-1`: all), newest first.
    pub fn slowlog(&self, n: i64) -> Result<Vec<SlowEntry>> {
        parse_slowlog(&self.query(&slowlog_cmd("GET", Some(n)))?)
    }

    /// `DLOCK.SLOWLOG LEN`.
    pub fn slowlog_len(&self) -> Result<u64> {
        int_reply("DLOCK.SLOWLOG LEN", &self.query(&slowlog_cmd("LEN", None))?)
    }

    /// `DLOCK.SLOWLOG RESET`.
    pub fn slowlog_reset(&self) -> Result<()> {
        self.query(&slowlog_cmd("RESET", None)).map(|_| ())
    }
}
