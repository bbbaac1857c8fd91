//! The module's commands and their replies.

use redis::{Cmd, RedisResult, Value};

use crate::error::{Error, Result};
use crate::{LockKind, Unlock};

/// `DLOCK.ACQUIRE|RWACQUIRE|FAIRACQUIRE|SEMACQUIRE key owner [READ|WRITE]
/// [LIMIT n PERMITS k] PX lease WAIT ms`.
pub(crate) fn acquire(kind: LockKind, key: &str, owner: &str, lease_ms: u64, wait_ms: u64) -> Cmd {
    let mut c = redis::cmd(kind.command());
    c.arg(key).arg(owner);
    match kind {
        LockKind::Read => {
            c.arg("READ");
        }
        LockKind::Write => {
            c.arg("WRITE");
        }
        LockKind::Semaphore { limit, permits } => {
            c.arg("LIMIT").arg(limit).arg("PERMITS").arg(permits);
        }
        _ => {}
    }
    c.arg("PX").arg(lease_ms.max(1)).arg("WAIT").arg(wait_ms);
    c
}

/// The acquire options that shape the hold a grant creates.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) struct HoldOpts {
    /// `BIND`: the hold ends when the granting connection closes.
    pub bind: bool,
    /// `LOCKDELAY ms` (0: none).
    pub lock_delay_ms: u64,
}

/// Appends `BIND` / `LOCKDELAY ms` to an acquire.
pub(crate) fn hold_opts(c: &mut Cmd, o: HoldOpts) {
    if o.bind {
        c.arg("BIND");
    }
    if o.lock_delay_ms > 0 {
        c.arg("LOCKDELAY").arg(o.lock_delay_ms);
    }
}

/// `DLOCK.RELEASE key owner [READ|WRITE | PERMITS k]`.
pub(crate) fn release(kind: LockKind, key: &str, owner: &str) -> Cmd {
    let mut c = redis::cmd("DLOCK.RELEASE");
    c.arg(key).arg(owner);
    match kind {
        LockKind::Read => {
            c.arg("READ");
        }
        LockKind::Write => {
            c.arg("WRITE");
        }
        LockKind::Semaphore { permits, .. } => {
            c.arg("PERMITS").arg(permits);
        }
        _ => {}
    }
    c
}

/// `DLOCK.CHECK key token`.
pub(crate) fn check(key: &str, token: u64) -> Cmd {
    let mut c = redis::cmd("DLOCK.CHECK");
    c.arg(key).arg(token);
    c
}

/// `DLOCK.FENCED key token <inner command and its arguments>`.
pub(crate) fn fenced(key: &str, token: u64, inner: &Cmd) -> Cmd {
    let mut c = redis::cmd("DLOCK.FENCED");
    c.arg(key).arg(token);
    for a in inner.args_iter() {
        if let redis::Arg::Simple(bytes) = a {
            c.arg(bytes);
        }
    }
    c
}

/// A CHECK reply.
pub(crate) fn live(v: Value) -> Result<bool> {
    match v {
        Value::Int(1) => Ok(true),
        Value::Int(0) => Ok(false),
        other => Err(Error::Unexpected(format!(
            "DLOCK.CHECK answered {other:?}, expected 1 or 0"
        ))),
    }
}

/// `DLOCK.LATCHSET key count`.
pub(crate) fn latch_set(key: &str, count: u64) -> Cmd {
    let mut c = redis::cmd("DLOCK.LATCHSET");
    c.arg(key).arg(count);
    c
}

/// `DLOCK.COUNTDOWN key`.
pub(crate) fn count_down(key: &str) -> Cmd {
    let mut c = redis::cmd("DLOCK.COUNTDOWN");
    c.arg(key);
    c
}

/// `DLOCK.AWAIT key WAIT ms`.
pub(crate) fn await_latch(key: &str, wait_ms: u64) -> Cmd {
    let mut c = redis::cmd("DLOCK.AWAIT");
    c.arg(key).arg("WAIT").arg(wait_ms);
    c
}

/// An integer reply (LATCHSET: 1/0, COUNTDOWN: the new count).
pub(crate) fn count(v: Value, what: &str) -> Result<u64> {
    match v {
        Value::Int(n) if n >= 0 => Ok(n as u64),
        other => Err(Error::Unexpected(format!(
            "{what} answered {other:?}, expected a count"
        ))),
    }
}

/// An AWAIT reply: `true` open, `false` the wait ended first.
pub(crate) fn opened(v: Value) -> Result<bool> {
    match v {
        Value::Int(1) => Ok(true),
        Value::Nil => Ok(false),
        other => Err(Error::Unexpected(format!(
            "DLOCK.AWAIT answered {other:?}, expected 1 or nil"
        ))),
    }
}

/// The WAIT of one AWAIT slice: what is left of the wait, at most `slice`
/// (whole ms, at least 1 while anything is left).
pub(crate) fn slice_ms(left: std::time::Duration, slice: std::time::Duration) -> u64 {
    let ms = left.min(slice).as_millis();
    u64::try_from(ms).unwrap_or(u64::MAX).max(1)
}

/// `DLOCK.RENEW key owner PX lease`.
pub(crate) fn renew(key: &str, owner: &str, lease_ms: u64) -> Cmd {
    let mut c = redis::cmd("DLOCK.RENEW");
    c.arg(key).arg(owner).arg("PX").arg(lease_ms.max(1));
    c
}

/// `DLOCK.CANCEL key owner`: gives up the owner's queue places (a fair-queue place
/// kept between polls, a wait blocked on the server).
pub(crate) fn cancel(key: &str, owner: &str) -> Cmd {
    let mut c = redis::cmd("DLOCK.CANCEL");
    c.arg(key).arg(owner);
    c
}

/// An acquire reply: the fencing token, or `None` when not granted.
pub(crate) fn token(v: Value) -> Result<Option<u64>> {
    match v {
        Value::Nil => Ok(None),
        Value::Int(t) if t > 0 => Ok(Some(t as u64)),
        other => Err(Error::Unexpected(format!(
            "acquire answered {other:?}, expected a token or nil"
        ))),
    }
}

/// A release reply.
pub(crate) fn unlock(r: RedisResult<Value>) -> Result<Unlock> {
    match r {
        Ok(Value::Int(1)) => Ok(Unlock::Released),
        Ok(Value::Int(0)) => Ok(Unlock::StillHeld),
        Ok(other) => Err(Error::Unexpected(format!(
            "DLOCK.RELEASE answered {other:?}"
        ))),
        Err(e) if e.code() == Some("NOTHELD") => Ok(Unlock::Lost),
        Err(e) => Err(e.into()),
    }
}

/// A renew reply: `Some(true)` renewed, `Some(false)` not held, `None` unexpected.
pub(crate) fn renewed(v: &Value) -> Option<bool> {
    match v {
        Value::Int(1) => Some(true),
        Value::Int(0) => Some(false),
        _ => None,
    }
}
