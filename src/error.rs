//! Every error reply of the module, in one place. Each names what was wrong
//! and what was expected, starts with a code, and never echoes user data
//! (keys and owners are binary and may hold CR, LF or NUL).

use dlock_core::{Kind, LockError};
use std::ffi::{CStr, CString};

pub type Msg = &'static CStr;

pub const OWNER_EMPTY: Msg = c"ERR owner must be 1 to 512 bytes, got an empty string";
pub const OWNER_LONG: Msg = c"ERR owner must be 1 to 512 bytes, got more than 512";
pub const PX_RANGE: Msg =
    c"ERR PX must be an integer number of milliseconds from 1 to 1099511627776";
pub const WAIT_RANGE: Msg =
    c"ERR WAIT must be an integer number of milliseconds from 0 to 1099511627776";
pub const PX_TWICE: Msg = c"ERR PX was given more than once; give each option at most once";
pub const WAIT_TWICE: Msg = c"ERR WAIT was given more than once; give each option at most once";
pub const PX_VALUE: Msg = c"ERR PX needs a value: PX <milliseconds>";
pub const WAIT_VALUE: Msg = c"ERR WAIT needs a value: WAIT <milliseconds>";
pub const ACQUIRE_OPTION: Msg =
    c"ERR unknown option; expected PX <milliseconds>, WAIT <milliseconds>, BIND or LOCKDELAY <milliseconds>";
pub const LOCKDELAY_TWICE: Msg =
    c"ERR LOCKDELAY was given more than once; give each option at most once";
pub const LOCKDELAY_VALUE: Msg = c"ERR LOCKDELAY needs a value: LOCKDELAY <milliseconds>";
pub const LOCKDELAY_RANGE: Msg =
    c"ERR LOCKDELAY must be an integer number of milliseconds from 0 to 1099511627776";
pub const BIND_TWICE: Msg = c"ERR BIND was given more than once; give each option at most once";
pub const BIND_IN_SCRIPT: Msg = c"ERR BIND is not allowed inside a script: a script's connection is not the caller's; send the acquire outside the script (MULTI/EXEC binds to the calling connection)";
pub const RENEW_OPTION: Msg = c"ERR unknown option; expected PX <milliseconds>";
pub const MODE_MISSING: Msg = c"ERR missing mode; expected READ or WRITE after the owner";
pub const MODE_BAD: Msg = c"ERR mode must be READ or WRITE";
pub const RELEASE_SYNTAX: Msg = c"ERR syntax error; expected DLOCK.RELEASE key owner [READ|WRITE] or DLOCK.RELEASE key owner PERMITS k";
pub const WRONGTYPE: Msg = c"WRONGTYPE Operation against a key holding the wrong kind of value";
pub const NOTHELD: Msg =
    c"NOTHELD the owner does not hold this lock (never acquired, lease expired, or force-released)";
pub const MODE_REQUIRED: Msg = c"ERR the owner holds both READ and WRITE on this lock; name the mode to release: READ or WRITE";
pub const MODE_NOT_APPLICABLE: Msg =
    c"ERR READ|WRITE applies only to rw locks; release a mutex or fair lock without a mode";
pub const DEADLOCK: Msg = c"DEADLOCK another reader already waits to upgrade to WRITE; waiting too would deadlock (release READ instead)";
pub const COUNT_OVERFLOW: Msg =
    c"ERR reentrant count limit reached (4294967295 holds of one owner)";
pub const TOKENS_EXHAUSTED: Msg = c"ERR fencing tokens exhausted (2^63 grants)";
pub const APPLY_CLIENT: Msg = c"ERR DLOCK.APPLY is internal: only the master link and AOF loading may apply lock state; use the DLOCK.* lock commands (or RESTORE) instead";
pub const QUEUEFULL: Msg = c"QUEUEFULL this lock's queue holds the most places config dlock.max-queue allows; try again later or raise dlock.max-queue";
pub const OOM_STORE: Msg = c"ERR could not store the lock";
pub const OOM_WAIT: Msg = c"OOM command not allowed when used memory > 'maxmemory': waiting in DLOCK.AWAIT takes a queue place; retry without WAIT or free memory";
pub const DELTA_NO_LOCK: Msg = c"ERR invalid lock payload: a delta payload changes an existing lock, and the key holds none; expected the lock the master had (its full payload first)";

pub const TOKEN_RANGE: Msg =
    c"ERR token must be an integer from 1 to 9223372036854775807 (a fencing token from an acquire)";
pub const FENCED_DLOCK: Msg = c"ERR DLOCK.FENCED does not run DLOCK.* commands: lock commands check their owner themselves; to combine them, call DLOCK.CHECK from a script";
pub const FENCED_UNKNOWN: Msg = c"ERR unknown command inside DLOCK.FENCED";
pub const FENCED_XREAD_BLOCK: Msg = c"ERR XREAD and XREADGROUP with BLOCK are not allowed inside DLOCK.FENCED on this server, as in its scripts (Redis before 7.4, Valkey before 8.0); send them without BLOCK";
pub const FENCED_NO_REPLY: Msg = c"ERR DLOCK.FENCED ran the command but the server gave it no reply to pass on (a fault of this server's module API for this command); the command's effects, if any, stand";
pub const SCAN_CURSOR: Msg =
    c"ERR invalid cursor; expected 0 or the cursor the previous DLOCK.SCAN returned";
pub const SCAN_OPTION: Msg = c"ERR unknown option; expected MATCH <pattern>, COUNT <n>, OWNER <owner>, KIND <kind> or CONTENDED";
pub const SCAN_VALUE: Msg = c"ERR MATCH, COUNT, OWNER and KIND need a value";
pub const SCAN_TWICE: Msg =
    c"ERR a DLOCK.SCAN option was given more than once; give each option at most once";
pub const SCAN_COUNT: Msg = c"ERR COUNT must be an integer from 1 to 2147483647";
pub const SCAN_KIND: Msg = c"ERR KIND must be mutex, rw, fair, semaphore or latch";
pub const SCAN_FAILED: Msg = c"ERR DLOCK.SCAN could not scan the keyspace";
pub const STATS_SYNTAX: Msg = c"ERR syntax error; expected DLOCK.STATS or DLOCK.STATS RESET";
pub const SLOWLOG_SYNTAX: Msg =
    c"ERR syntax error; expected DLOCK.SLOWLOG GET [n], DLOCK.SLOWLOG LEN or DLOCK.SLOWLOG RESET";
pub const SLOWLOG_COUNT: Msg =
    c"ERR DLOCK.SLOWLOG GET count must be -1 (all) or an integer from 0 to 2147483647";
pub const FENCED_RELAY: Msg = c"ERR DLOCK.FENCED ran the command but could not pass its reply on";

/// `FENCED ...`: the token is not live, the command did not run. The key
/// appears as printable ASCII only (other bytes as `?`, at most 64 bytes).
pub fn fenced(key: &[u8], token: u64) -> CString {
    let mut shown: String = key
        .iter()
        .take(64)
        .map(|&c| {
            if (0x20..0x7f).contains(&c) && c != b'\'' {
                c as char
            } else {
                '?'
            }
        })
        .collect();
    if key.len() > 64 {
        shown.push_str("...");
    }
    CString::new(format!(
        "FENCED token {token} is not live on lock '{shown}' (released, expired, force-released, superseded, or no lock); the command did not run"
    ))
    .unwrap_or_default()
}

/// Why Redis refused to run the command inside DLOCK.FENCED, from the
/// `errno` of RedisModule_Call (nothing ran).
pub fn fenced_call(errno: i32) -> Msg {
    match errno {
        libc::ENOENT => FENCED_UNKNOWN,
        libc::EINVAL => c"ERR wrong number of arguments for the command inside DLOCK.FENCED",
        libc::ESPIPE => c"ERR this command is not allowed inside DLOCK.FENCED: what a script cannot run is refused (MULTI, EXEC, WATCH, SUBSCRIBE, EVAL, FCALL, WAIT, ...)",
        libc::EACCES => c"NOPERM this user has no permissions to run the command inside DLOCK.FENCED, or to access one of its keys or channels",
        libc::ENOSPC => c"OOM command not allowed when used memory > 'maxmemory'.",
        libc::EPERM => c"ERR the command inside DLOCK.FENCED names a key this node does not serve",
        libc::EROFS => c"CLUSTERDOWN the cluster is down and only accepts reads",
        libc::ENETDOWN => c"CLUSTERDOWN the cluster is down",
        libc::ENOTSUP => c"ERR DLOCK.FENCED found no ACL user on this connection",
        _ => c"ERR DLOCK.FENCED could not run the command",
    }
}

/// The error naming the kind found, for a command on a lock of another kind.
pub fn wrong_kind(found: Kind) -> Msg {
    match found {
        Kind::Mutex => {
            c"WRONGKIND the key holds a mutex lock; use DLOCK.ACQUIRE, RELEASE and RENEW on it"
        }
        Kind::Rw => {
            c"WRONGKIND the key holds an rw lock; use DLOCK.RWACQUIRE, RELEASE and RENEW on it"
        }
        Kind::Fair => {
            c"WRONGKIND the key holds a fair lock; use DLOCK.FAIRACQUIRE, RELEASE and RENEW on it"
        }
        Kind::Semaphore => {
            c"WRONGKIND the key holds a semaphore; use DLOCK.SEMACQUIRE, RELEASE and RENEW on it"
        }
        Kind::Latch => {
            c"WRONGKIND the key holds a latch; use DLOCK.LATCHSET, COUNTDOWN and AWAIT on it"
        }
    }
}

pub fn lock_error(e: LockError) -> Msg {
    match e {
        LockError::WrongKind { found } => wrong_kind(found),
        LockError::NotHeld => NOTHELD,
        LockError::ModeRequired => MODE_REQUIRED,
        LockError::ModeNotApplicable => MODE_NOT_APPLICABLE,
        LockError::UpgradeDeadlock => DEADLOCK,
        LockError::CountOverflow => COUNT_OVERFLOW,
        LockError::TokensExhausted => TOKENS_EXHAUSTED,
        LockError::LimitMismatch { .. } => LIMIT_MISMATCH,
        LockError::PermitsOverLimit { .. } => PERMITS_OVER_LIMIT,
        LockError::PermitsNotApplicable => PERMITS_NOT_APPLICABLE,
        LockError::NotEnoughPermits { .. } => NOT_ENOUGH_PERMITS,
        LockError::QueueFull { .. } => QUEUEFULL,
    }
}

pub const LIMIT_MISMATCH: Msg =
    c"ERR LIMIT differs from the limit of this semaphore; name the limit in force";
pub const PERMITS_OVER_LIMIT: Msg = c"ERR PERMITS must be at most the semaphore's limit";
pub const PERMITS_NOT_APPLICABLE: Msg =
    c"ERR PERMITS applies only to semaphores; release a lock without PERMITS";
pub const NOT_ENOUGH_PERMITS: Msg =
    c"ERR the owner holds fewer permits than PERMITS asks to release";
pub const LIMIT_MISSING: Msg = c"ERR missing LIMIT; expected LIMIT <n> after the owner";
pub const LIMIT_RANGE: Msg = c"ERR LIMIT must be an integer from 1 to 4294967296";
pub const LIMIT_VALUE: Msg = c"ERR LIMIT needs a value: LIMIT <n>";
pub const LIMIT_TWICE: Msg = c"ERR LIMIT was given more than once; give each option at most once";
pub const PERMITS_RANGE: Msg =
    c"ERR PERMITS must be an integer from 1 to the semaphore's LIMIT (at most 4294967295)";
pub const PERMITS_VALUE: Msg = c"ERR PERMITS needs a value: PERMITS <k>";
pub const PERMITS_TWICE: Msg =
    c"ERR PERMITS was given more than once; give each option at most once";
pub const SEMACQUIRE_OPTION: Msg = c"ERR unknown option; expected LIMIT <n>, PERMITS <k>, PX <milliseconds>, WAIT <milliseconds>, BIND or LOCKDELAY <milliseconds>";
pub const COUNT_RANGE: Msg = c"ERR count must be an integer from 1 to 4294967296";
pub const AWAIT_OPTION: Msg = c"ERR unknown option; expected WAIT <milliseconds>";

/// The error for `e`, naming the figures it carries (the limit in force,
/// the permits held): errors of semaphores say what to ask instead.
pub fn lock_error_text(e: LockError) -> CString {
    let text = match e {
        LockError::LimitMismatch { limit } => format!(
            "ERR this semaphore's limit is {limit}; LIMIT must name the limit in force ({limit})"
        ),
        LockError::PermitsOverLimit { limit } => {
            format!("ERR PERMITS must be from 1 to the semaphore's limit ({limit})")
        }
        LockError::NotEnoughPermits { held } => format!(
            "ERR the owner holds {held} permit{} of this semaphore, fewer than PERMITS asks to release; nothing was released",
            if held == 1 { "" } else { "s" }
        ),
        LockError::QueueFull { max } => format!(
            "QUEUEFULL this lock's queue holds {max} places, the most config dlock.max-queue allows; try again later or raise dlock.max-queue"
        ),
        other => return lock_error(other).into(),
    };
    CString::new(text).unwrap_or_default()
}

/// `ERR invalid lock payload: <reason>`; reasons are our own static text.
pub fn bad_payload(reason: &str) -> CString {
    CString::new(format!("ERR invalid lock payload: {reason}")).unwrap_or_default()
}

/// `DEADLOCK cycle: <steps> (…)`: a wait that would close a wait-for cycle
/// (services::deadlock); `steps` names owners and keys quoted and escaped,
/// so no user byte reaches the reply raw.
pub fn deadlock_cycle(steps: &str) -> CString {
    CString::new(format!(
        "DEADLOCK cycle: {steps} (nothing was queued for this request; release a lock it holds and retry)"
    ))
    .unwrap_or_default()
}
