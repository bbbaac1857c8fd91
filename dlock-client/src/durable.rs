//! Durable grants: after a grant, `WAIT replicas ms` on the connection that got it,
//! and a release (then an error, or another try) when fewer replicas acknowledge.
//!
//! Replication is asynchronous: a grant the replicas never received is lost when one
//! of them is promoted, and another owner may then be granted the same lock. `WAIT n
//! ms` right after the grant, on the same connection, answers how many replicas have
//! everything that connection wrote so far — the grant included, also when it was
//! handed to this client while it waited blocked on the server (Redis ≥ 7.0.12 and
//! Valkey count such grants). The cost is one round trip plus the replicas' ack.

use std::time::Duration;

use redis::{Cmd, Value};

use crate::error::{Error, Result};

/// The durability asked of every grant of a lock handle: see
/// [`crate::Lock::durable`].
///
/// ```
/// use std::time::Duration;
/// use dlock_client::Durable;
///
/// let d = Durable::new(1, Duration::from_millis(500)).retries(2);
/// assert_eq!((d.replicas, d.retries), (1, 2));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Durable {
    /// How many replicas must acknowledge the grant (`WAIT replicas …`).
    pub replicas: u32,
    /// How long to wait for them (`WAIT … ms`; rounded up to whole ms, at least 1).
    pub timeout: Duration,
    /// How many more times to acquire after a grant too few replicas acknowledged
    /// (each such grant is released first). 0 (the default): fail at once with
    /// [`Error::NotDurable`].
    pub retries: u32,
}

impl Durable {
    /// `replicas` replicas within `timeout`, no retries.
    pub fn new(replicas: u32, timeout: Duration) -> Durable {
        Durable {
            replicas,
            timeout,
            retries: 0,
        }
    }

    /// The same, trying again up to `retries` more times after a short count.
    pub fn retries(mut self, retries: u32) -> Durable {
        self.retries = retries;
        self
    }

    /// `WAIT replicas ms`.
    pub(crate) fn wait(&self) -> Cmd {
        let mut c = redis::cmd("WAIT");
        c.arg(self.replicas)
            .arg(crate::ceil_ms(self.timeout).max(1));
        c
    }

    /// How long the `WAIT` may take to answer.
    pub(crate) fn wait_timeout(&self, command_timeout: Duration) -> Duration {
        self.timeout.saturating_add(command_timeout)
    }
}

/// A `WAIT` reply: the number of replicas that acknowledged.
pub(crate) fn acked(v: Value) -> Result<u32> {
    match v {
        Value::Int(n) if n >= 0 => Ok(u32::try_from(n).unwrap_or(u32::MAX)),
        other => Err(Error::Unexpected(format!(
            "WAIT answered {other:?}, expected a number of replicas"
        ))),
    }
}
