//! The module's commands and their replies.

use redis::{Cmd, RedisResult, Value};

use crate::error::{Error, Result};
use crate::{LockKind, Unlock};

/// `DLOCK.ACQUIRE|RWACQUIRE|FAIRACQUIRE key owner [READ|WRITE] PX lease WAIT ms`.
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
        _ => {}
    }
    c.arg("PX").arg(lease_ms.max(1)).arg("WAIT").arg(wait_ms);
    c
}

/// `DLOCK.RELEASE key owner [READ|WRITE]`.
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
        _ => {}
    }
    c
}

/// `DLOCK.RENEW key owner PX lease`.
pub(crate) fn renew(key: &str, owner: &str, lease_ms: u64) -> Cmd {
    let mut c = redis::cmd("DLOCK.RENEW");
    c.arg(key).arg(owner).arg("PX").arg(lease_ms.max(1));
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
