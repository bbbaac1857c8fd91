//! Module configs: `dlock.default-lease-ms`, `dlock.fair-queue-timeout-ms`,
//! `dlock.max-queue`, `dlock.apply-from-clients`, `dlock.promotion-gap-ms`
//! and the test-only `dlock.test-clock-offset-ms`. Defaults and ranges are
//! the constants here, used by the `redis_module!` registration and the
//! module-argument parser alike.
//!
//! Each way to set a config has one parser: `CONFIG SET` and the config file
//! (`dlock.default-lease-ms 1234`, `--dlock.default-lease-ms 1234`) go
//! through the server's own, with the ranges registered in `lib.rs`; module
//! arguments (`--loadmodule libdlock.so default-lease-ms 1234`) only through
//! [`parse_module_args`] (the `redis_module!` block does not read them: its
//! reader knows no `dlock.` prefix and refuses nothing but a non-number).

use redis_module::configuration::{ConfigurationContext, ConfigurationValue};
use redis_module::RedisError;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering::Relaxed};

// ---- load-time configs ----------------------------------------------------
//
// `dlock.apply-from-clients` and `dlock.test-clock-offset-ms` take effect
// only when the module loads. They are registered as ordinary (mutable)
// configs whose setter, once the module has loaded, accepts only the value
// the config already has: `CONFIG GET *` followed by `CONFIG SET` of every
// value back (what tools and Redis' own "CONFIG sanity" test do) succeeds,
// and a change is refused with an error naming the rule. (Registered as
// IMMUTABLE, the server refuses even the same value, so that round trip
// fails with the module loaded.)

/// Set once the module has loaded: load-time configs refuse changes from then on.
static LOADED: AtomicBool = AtomicBool::new(false);

/// The module has loaded (end of `init`): load-time configs are fixed.
pub fn loaded() {
    LOADED.store(true, Relaxed);
}

/// A config read only when the module loads (see above): the value, and its
/// name for the refusal.
pub struct LoadTime<A> {
    value: A,
    name: &'static str,
}

impl<A> std::ops::Deref for LoadTime<A> {
    type Target = A;
    fn deref(&self) -> &A {
        &self.value
    }
}

fn load_time_refusal(name: &str, now: &str) -> RedisError {
    RedisError::String(format!(
        "dlock.{name} is read only when the module loads (config file or module \
         arguments); CONFIG SET accepts only its current value {now}"
    ))
}

impl ConfigurationValue<bool> for LoadTime<AtomicBool> {
    fn get(&self, _ctx: &ConfigurationContext) -> bool {
        self.value.load(Relaxed)
    }
    fn set(&self, _ctx: &ConfigurationContext, val: bool) -> Result<(), RedisError> {
        let now = self.value.load(Relaxed);
        if LOADED.load(Relaxed) && val != now {
            return Err(load_time_refusal(self.name, if now { "yes" } else { "no" }));
        }
        self.value.store(val, Relaxed);
        Ok(())
    }
}

impl ConfigurationValue<i64> for LoadTime<AtomicI64> {
    fn get(&self, _ctx: &ConfigurationContext) -> i64 {
        self.value.load(Relaxed)
    }
    fn set(&self, _ctx: &ConfigurationContext, val: i64) -> Result<(), RedisError> {
        let now = self.value.load(Relaxed);
        if LOADED.load(Relaxed) && val != now {
            return Err(load_time_refusal(self.name, &now.to_string()));
        }
        self.value.store(val, Relaxed);
        Ok(())
    }
}

/// Largest lease, wait or timeout config, in ms (2^40).
pub const MAX_MS: i64 = 1 << 40;
/// Default `dlock.default-lease-ms`.
pub const DEFAULT_LEASE_MS_DEFAULT: i64 = 30_000;
/// Default `dlock.fair-queue-timeout-ms`.
pub const FAIR_QUEUE_TIMEOUT_MS_DEFAULT: i64 = 5_000;
/// Default and largest `dlock.max-queue`.
pub const MAX_QUEUE_DEFAULT: i64 = 10_000;
pub const MAX_QUEUE_MAX: i64 = 1 << 32;

/// Lease used when an acquire or RENEW gives no `PX`.
pub static DEFAULT_LEASE_MS: AtomicI64 = AtomicI64::new(DEFAULT_LEASE_MS_DEFAULT);
/// How long a queued fair-lock owner keeps its place without asking again.
pub static FAIR_QUEUE_TIMEOUT_MS: AtomicI64 = AtomicI64::new(FAIR_QUEUE_TIMEOUT_MS_DEFAULT);

pub fn default_lease_ms() -> u64 {
    DEFAULT_LEASE_MS.load(Relaxed).max(1) as u64
}

pub fn fair_queue_timeout_ms() -> u64 {
    FAIR_QUEUE_TIMEOUT_MS.load(Relaxed).max(1) as u64
}

/// Most places one lock's queue may hold (`QUEUEFULL` beyond).
pub static MAX_QUEUE: AtomicI64 = AtomicI64::new(MAX_QUEUE_DEFAULT);

pub fn max_queue() -> usize {
    usize::try_from(MAX_QUEUE.load(Relaxed).max(1)).unwrap_or(usize::MAX)
}

/// Load-time only (see [`LoadTime`]), off by default: accept DLOCK.APPLY
/// from clients too, like Redis' `enable-debug-command`. For test suites
/// and tooling that inject state; never where untrusted clients connect.
pub static APPLY_FROM_CLIENTS: LoadTime<AtomicBool> = LoadTime {
    value: AtomicBool::new(false),
    name: "apply-from-clients",
};

pub fn apply_from_clients() -> bool {
    APPLY_FROM_CLIENTS.load(Relaxed)
}

/// `dlock.deadlock-detect` (yes): look for wait-for cycles when a wait
/// starts and when a lock changes hands.
pub static DEADLOCK_DETECT: AtomicBool = AtomicBool::new(true);

pub fn deadlock_detect() -> bool {
    DEADLOCK_DETECT.load(Relaxed)
}

/// Default and largest `dlock.deadlock-max-depth`: most blocked owners one
/// deadlock search examines.
pub const DEADLOCK_MAX_DEPTH_DEFAULT: i64 = 64;
pub const DEADLOCK_MAX_DEPTH_MAX: i64 = 1_000_000;
pub static DEADLOCK_MAX_DEPTH: AtomicI64 = AtomicI64::new(DEADLOCK_MAX_DEPTH_DEFAULT);

pub fn deadlock_max_depth() -> usize {
    usize::try_from(DEADLOCK_MAX_DEPTH.load(Relaxed).max(1)).unwrap_or(usize::MAX)
}

/// `dlock.stats` (yes): count wait and hold times (`DLOCK.STATS`, the
/// percentiles of `INFO dlock`). Off: nothing is counted (the bench
/// measures the cost with it on and off).
pub static STATS: AtomicBool = AtomicBool::new(true);

pub fn stats() -> bool {
    STATS.load(Relaxed)
}

/// Defaults of `dlock.slowlog-wait-ms`, `dlock.slowlog-hold-ms` and
/// `dlock.slowlog-max-len`, and the largest `slowlog-max-len`.
pub const SLOWLOG_WAIT_MS_DEFAULT: i64 = 1_000;
pub const SLOWLOG_HOLD_MS_DEFAULT: i64 = 60_000;
pub const SLOWLOG_MAX_LEN_DEFAULT: i64 = 128;
pub const SLOWLOG_MAX_LEN_MAX: i64 = 1 << 20;

/// Waits at least this long (ms) go to `DLOCK.SLOWLOG` (0: all, -1: none).
pub static SLOWLOG_WAIT_MS: AtomicI64 = AtomicI64::new(SLOWLOG_WAIT_MS_DEFAULT);
/// Holds at least this long (ms) go to `DLOCK.SLOWLOG` (0: all, -1: none).
pub static SLOWLOG_HOLD_MS: AtomicI64 = AtomicI64::new(SLOWLOG_HOLD_MS_DEFAULT);
/// Entries `DLOCK.SLOWLOG` keeps.
pub static SLOWLOG_MAX_LEN: AtomicI64 = AtomicI64::new(SLOWLOG_MAX_LEN_DEFAULT);

pub fn slowlog_wait_ms() -> i64 {
    SLOWLOG_WAIT_MS.load(Relaxed)
}

pub fn slowlog_hold_ms() -> i64 {
    SLOWLOG_HOLD_MS.load(Relaxed)
}

pub fn slowlog_max_len() -> usize {
    usize::try_from(SLOWLOG_MAX_LEN.load(Relaxed)).unwrap_or(0)
}

/// Default `dlock.promotion-gap-ms` (one hour).
pub const PROMOTION_GAP_MS_DEFAULT: i64 = 3_600_000;

/// How far (ms) the token floor jumps above the last token seen (or the
/// clock, whichever is higher) when this server becomes a master: tokens
/// keep growing across a promotion that lost the last grants, while the
/// old and new master's clocks differ by less than this. 0: no jump.
pub static PROMOTION_GAP_MS: AtomicI64 = AtomicI64::new(PROMOTION_GAP_MS_DEFAULT);

pub fn promotion_gap_ms() -> u64 {
    PROMOTION_GAP_MS.load(Relaxed).max(0) as u64
}

/// Load-time only (see [`LoadTime`]), test-only: milliseconds added to the
/// wall clock the module reads (negative: behind), to test a server whose
/// clock differs from another's without libfaketime (which deadlocks with
/// the servers' jemalloc). Never set it in production.
pub static TEST_CLOCK_OFFSET_MS: LoadTime<AtomicI64> = LoadTime {
    value: AtomicI64::new(0),
    name: "test-clock-offset-ms",
};

pub fn test_clock_offset_ms() -> i64 {
    TEST_CLOCK_OFFSET_MS.load(Relaxed)
}

// ---- module arguments ---------------------------------------------------------

/// One checked module argument: the config and its new value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Setting {
    DefaultLeaseMs(i64),
    FairQueueTimeoutMs(i64),
    MaxQueue(i64),
    ApplyFromClients(bool),
    DeadlockDetect(bool),
    DeadlockMaxDepth(i64),
    Stats(bool),
    SlowlogWaitMs(i64),
    SlowlogHoldMs(i64),
    SlowlogMaxLen(i64),
    PromotionGapMs(i64),
    TestClockOffsetMs(i64),
}

impl Setting {
    fn apply(self) {
        match self {
            Setting::DefaultLeaseMs(v) => DEFAULT_LEASE_MS.store(v, Relaxed),
            Setting::FairQueueTimeoutMs(v) => FAIR_QUEUE_TIMEOUT_MS.store(v, Relaxed),
            Setting::MaxQueue(v) => MAX_QUEUE.store(v, Relaxed),
            Setting::ApplyFromClients(on) => APPLY_FROM_CLIENTS.store(on, Relaxed),
            Setting::DeadlockDetect(on) => DEADLOCK_DETECT.store(on, Relaxed),
            Setting::DeadlockMaxDepth(v) => DEADLOCK_MAX_DEPTH.store(v, Relaxed),
            Setting::Stats(on) => STATS.store(on, Relaxed),
            Setting::SlowlogWaitMs(v) => SLOWLOG_WAIT_MS.store(v, Relaxed),
            Setting::SlowlogHoldMs(v) => SLOWLOG_HOLD_MS.store(v, Relaxed),
            Setting::SlowlogMaxLen(v) => SLOWLOG_MAX_LEN.store(v, Relaxed),
            Setting::PromotionGapMs(v) => PROMOTION_GAP_MS.store(v, Relaxed),
            Setting::TestClockOffsetMs(v) => TEST_CLOCK_OFFSET_MS.store(v, Relaxed),
        }
    }
}

/// How a module argument's value is read.
#[derive(Clone, Copy)]
enum Value {
    /// `yes` or `no`.
    Bool(fn(bool) -> Setting),
    /// An integer in `min..=max`.
    Int(fn(i64) -> Setting, i64, i64),
}

/// Every module argument, by its name without the `dlock.` prefix.
const ARGS: &[(&str, Value)] = &[
    (
        "default-lease-ms",
        Value::Int(Setting::DefaultLeaseMs, 1, MAX_MS),
    ),
    (
        "fair-queue-timeout-ms",
        Value::Int(Setting::FairQueueTimeoutMs, 1, MAX_MS),
    ),
    ("max-queue", Value::Int(Setting::MaxQueue, 1, MAX_QUEUE_MAX)),
    ("apply-from-clients", Value::Bool(Setting::ApplyFromClients)),
    ("deadlock-detect", Value::Bool(Setting::DeadlockDetect)),
    (
        "deadlock-max-depth",
        Value::Int(Setting::DeadlockMaxDepth, 1, DEADLOCK_MAX_DEPTH_MAX),
    ),
    ("stats", Value::Bool(Setting::Stats)),
    (
        "slowlog-wait-ms",
        Value::Int(Setting::SlowlogWaitMs, -1, MAX_MS),
    ),
    (
        "slowlog-hold-ms",
        Value::Int(Setting::SlowlogHoldMs, -1, MAX_MS),
    ),
    (
        "slowlog-max-len",
        Value::Int(Setting::SlowlogMaxLen, 0, SLOWLOG_MAX_LEN_MAX),
    ),
    (
        "promotion-gap-ms",
        Value::Int(Setting::PromotionGapMs, 0, MAX_MS),
    ),
    (
        "test-clock-offset-ms",
        Value::Int(Setting::TestClockOffsetMs, -MAX_MS, MAX_MS),
    ),
];

/// Checks the module arguments — `name value` pairs, names with or without
/// the `dlock.` prefix — and returns what they set, in order (a later pair
/// wins). Unknown names, a missing value and out-of-range or non-numeric
/// numbers are errors that say what was wrong and what was expected.
pub fn parse_module_args(args: &[&[u8]]) -> Result<Vec<Setting>, String> {
    if !args.len().is_multiple_of(2) {
        return Err("module arguments must be pairs: <config> <value>".into());
    }
    let mut settings = Vec::with_capacity(args.len() / 2);
    for pair in args.chunks_exact(2) {
        let [name, value] = pair else { continue };
        let name = String::from_utf8_lossy(name);
        let short = name.strip_prefix("dlock.").unwrap_or(&name);
        let given = value.escape_ascii();
        let Some((_, how)) = ARGS.iter().find(|(n, _)| *n == short) else {
            let names: Vec<&str> = ARGS.iter().map(|(n, _)| *n).collect();
            return Err(format!(
                "unknown module argument '{name}'; expected one of {}",
                names.join(", ")
            ));
        };
        settings.push(match *how {
            Value::Bool(setting) => setting(match *value {
                b"yes" => true,
                b"no" => false,
                _ => return Err(format!("{name} must be yes or no, not '{given}'")),
            }),
            Value::Int(setting, min, max) => setting(
                std::str::from_utf8(value)
                    .ok()
                    .and_then(|t| t.parse::<i64>().ok())
                    .filter(|v| (min..=max).contains(v))
                    .ok_or_else(|| {
                        format!("{name} must be an integer from {min} to {max}, not '{given}'")
                    })?,
            ),
        });
    }
    Ok(settings)
}

/// [`parse_module_args`], then sets the configs; sets nothing on an error.
pub fn apply_module_args(args: &[&[u8]]) -> Result<(), String> {
    for s in parse_module_args(args)? {
        s.apply();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Vec<Setting>, String> {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        parse_module_args(&args)
    }

    #[test]
    fn names_with_and_without_the_prefix() {
        assert_eq!(
            parse(&[
                "default-lease-ms",
                "1234",
                "dlock.fair-queue-timeout-ms",
                "4321",
                "max-queue",
                "2",
                "dlock.apply-from-clients",
                "yes",
                "apply-from-clients",
                "no",
            ]),
            Ok(vec![
                Setting::DefaultLeaseMs(1234),
                Setting::FairQueueTimeoutMs(4321),
                Setting::MaxQueue(2),
                Setting::ApplyFromClients(true),
                Setting::ApplyFromClients(false),
            ])
        );
        assert_eq!(parse(&[]), Ok(vec![]));
    }

    #[test]
    fn bounds_are_accepted() {
        for (name, v) in [
            ("default-lease-ms", MAX_MS),
            ("fair-queue-timeout-ms", MAX_MS),
            ("max-queue", MAX_QUEUE_MAX),
            ("max-queue", 1),
            ("promotion-gap-ms", 0),
            ("promotion-gap-ms", MAX_MS),
            ("test-clock-offset-ms", -MAX_MS),
            ("test-clock-offset-ms", MAX_MS),
        ] {
            let s = v.to_string();
            assert!(parse(&[name, &s]).is_ok(), "{name} {v}");
        }
    }

    #[test]
    fn bad_arguments_say_what_was_wrong_and_what_was_expected() {
        let cases: &[(&[&str], &str)] = &[
            (
                &["default-lease-ms", "0"],
                "default-lease-ms must be an integer from 1 to 1099511627776, not '0'",
            ),
            (
                &["dlock.default-lease-ms", "1099511627777"],
                "dlock.default-lease-ms must be an integer from 1 to 1099511627776, not '1099511627777'",
            ),
            (
                &["fair-queue-timeout-ms", "-5"],
                "fair-queue-timeout-ms must be an integer from 1 to 1099511627776, not '-5'",
            ),
            (
                &["max-queue", "4294967297"],
                "max-queue must be an integer from 1 to 4294967296, not '4294967297'",
            ),
            (
                &["default-lease-ms", "abc"],
                "default-lease-ms must be an integer from 1 to 1099511627776, not 'abc'",
            ),
            (
                &["default-lease-ms", ""],
                "default-lease-ms must be an integer from 1 to 1099511627776, not ''",
            ),
            (
                &["promotion-gap-ms", "-1"],
                "promotion-gap-ms must be an integer from 0 to 1099511627776, not '-1'",
            ),
            (
                &["test-clock-offset-ms", "-1099511627777"],
                "test-clock-offset-ms must be an integer from -1099511627776 to 1099511627776, not '-1099511627777'",
            ),
            (
                &["apply-from-clients", "maybe"],
                "apply-from-clients must be yes or no, not 'maybe'",
            ),
            (
                &["foo", "1"],
                "unknown module argument 'foo'; expected one of default-lease-ms, fair-queue-timeout-ms, max-queue, apply-from-clients, deadlock-detect, deadlock-max-depth, stats, slowlog-wait-ms, slowlog-hold-ms, slowlog-max-len, promotion-gap-ms, test-clock-offset-ms",
            ),
            (
                &["default-lease-ms"],
                "module arguments must be pairs: <config> <value>",
            ),
            // A name where a value belongs is a bad value, not a name.
            (
                &["max-queue", "default-lease-ms", "default-lease-ms", "5"],
                "max-queue must be an integer from 1 to 4294967296, not 'default-lease-ms'",
            ),
        ];
        for (args, want) in cases {
            assert_eq!(parse(args), Err((*want).to_string()), "{args:?}");
        }
    }

    #[test]
    fn visibility_configs() {
        assert_eq!(
            parse(&[
                "stats",
                "no",
                "dlock.slowlog-wait-ms",
                "-1",
                "slowlog-hold-ms",
                "0",
                "slowlog-max-len",
                "0",
            ]),
            Ok(vec![
                Setting::Stats(false),
                Setting::SlowlogWaitMs(-1),
                Setting::SlowlogHoldMs(0),
                Setting::SlowlogMaxLen(0),
            ])
        );
        assert_eq!(
            parse(&["slowlog-wait-ms", "-2"]),
            Err("slowlog-wait-ms must be an integer from -1 to 1099511627776, not '-2'".into())
        );
        assert_eq!(
            parse(&["slowlog-max-len", "1048577"]),
            Err("slowlog-max-len must be an integer from 0 to 1048576, not '1048577'".into())
        );
        assert_eq!(
            parse(&["stats", "on"]),
            Err("stats must be yes or no, not 'on'".into())
        );
    }

    #[test]
    fn a_bad_argument_sets_nothing() {
        let before = MAX_QUEUE.load(Relaxed);
        let args: [&[u8]; 4] = [b"max-queue", b"7", b"foo", b"1"];
        assert!(apply_module_args(&args).is_err());
        assert_eq!(MAX_QUEUE.load(Relaxed), before);
    }
}
