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

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;
    use crate::core::{Acquire, LockSpec, Step};
    use crate::{LockKind, Options};

    fn words(step: &Step) -> (bool, Vec<String>) {
        let (pinned, c) = match step {
            Step::Send(c, _) => (false, c),
            Step::SendPinned(c, _) => (true, c),
            _ => panic!("expected a command"),
        };
        let w = c
            .args_iter()
            .filter_map(|a| match a {
                redis::Arg::Simple(b) => Some(String::from_utf8_lossy(b).into_owned()),
                _ => None,
            })
            .collect();
        (pinned, w)
    }

    fn spec(d: Durable) -> LockSpec {
        let mut s = LockSpec::new(
            LockKind::Semaphore {
                limit: 3,
                permits: 2,
            },
            "k".into(),
        );
        s.durable = Some(d);
        s
    }

    #[test]
    fn a_grant_is_confirmed_on_its_connection_then_done() {
        let (o, t0) = (Options::default(), Instant::now());
        let s = spec(Durable::new(2, Duration::from_millis(250)));
        let mut m = Acquire::new(&s, "me".into(), &o, Some(Duration::ZERO), None, t0).unwrap();
        m.start(t0);
        let step = m.on_result(Ok(Value::Int(7)), t0).unwrap();
        assert_eq!(
            words(&step),
            (true, vec!["WAIT".into(), "2".into(), "250".into()])
        );
        match m.on_result(Ok(Value::Int(2)), t0).unwrap() {
            Step::Done(Some(g)) => assert_eq!(g.token, 7),
            _ => panic!("acknowledged: done"),
        }
    }

    #[test]
    fn a_short_count_releases_then_fails_or_tries_again() {
        let (o, t0) = (Options::default(), Instant::now());
        let s = spec(Durable::new(1, Duration::from_millis(100)).retries(1));
        let mut m = Acquire::new(&s, "me".into(), &o, None, None, t0).unwrap();
        m.start(t0);
        m.on_result(Ok(Value::Int(7)), t0).unwrap();
        let step = m.on_result(Ok(Value::Int(0)), t0).unwrap();
        let (pinned, w) = words(&step);
        assert!(!pinned);
        assert_eq!(w, ["DLOCK.RELEASE", "k", "me", "PERMITS", "2"]);
        // One retry left: ask again.
        let (_, w) = words(&m.on_result(Ok(Value::Int(1)), t0).unwrap());
        assert_eq!(w.first().map(String::as_str), Some("DLOCK.SEMACQUIRE"));
        m.on_result(Ok(Value::Int(8)), t0).unwrap();
        m.on_result(Ok(Value::Int(0)), t0).unwrap();
        // The release's own answer does not matter; no retry left: the error.
        let gone = redis::RedisError::from((redis::ErrorKind::Io, "gone"));
        let Err(e) = m.on_result(Err(gone), t0) else {
            panic!("expected the error")
        };
        assert!(
            matches!(
                e,
                Error::NotDurable {
                    wanted: 1,
                    acked: 0
                }
            ),
            "{e}"
        );
    }

    #[test]
    fn a_failed_wait_releases_then_fails_with_its_error() {
        let (o, t0) = (Options::default(), Instant::now());
        let s = spec(Durable::new(1, Duration::from_millis(100)).retries(5));
        let mut m = Acquire::new(&s, "me".into(), &o, None, None, t0).unwrap();
        m.start(t0);
        m.on_result(Ok(Value::Int(7)), t0).unwrap();
        let broken = redis::RedisError::from((redis::ErrorKind::Io, "broken pipe"));
        let (_, w) = words(&m.on_result(Err(broken), t0).unwrap());
        assert_eq!(w.first().map(String::as_str), Some("DLOCK.RELEASE"));
        let Err(e) = m.on_result(Ok(Value::Int(1)), t0) else {
            panic!("expected the error")
        };
        assert!(e.is_connection(), "no retry after a failure: {e}");
    }

    #[test]
    fn not_granted_is_not_confirmed() {
        let (o, t0) = (Options::default(), Instant::now());
        let s = spec(Durable::new(1, Duration::from_millis(100)));
        let mut m = Acquire::new(&s, "me".into(), &o, Some(Duration::ZERO), None, t0).unwrap();
        m.start(t0);
        assert!(matches!(
            m.on_result(Ok(Value::Nil), t0).unwrap(),
            Step::Done(None)
        ));
    }
}
