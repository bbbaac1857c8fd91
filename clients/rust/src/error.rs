//! The crate's error type.

use std::fmt;

/// Errors of the client: a Redis error (I/O, timeout, or an error reply from the
/// server), or a reply this client did not expect.
///
/// ```no_run
/// # use dlock_client::Client;
/// let client = Client::open("redis://127.0.0.1/")?;
/// match client.rw("doc").write().lock() {
///     Ok(guard) => drop(guard),
///     Err(e) if e.is_deadlock() => eprintln!("another reader waits to upgrade: {e}"),
///     Err(e) => return Err(e),
/// }
/// # Ok::<(), dlock_client::Error>(())
/// ```
#[derive(Debug)]
pub enum Error {
    /// From the `redis` crate: connection, I/O, timeout, or an error reply such as
    /// `WRONGKIND`, `DEADLOCK` or `WRONGTYPE`.
    Redis(redis::RedisError),
    /// The server answered something this client does not understand (is the dlock
    /// module loaded?).
    Unexpected(String),
    /// An argument was rejected before anything was sent (e.g. an empty lock list).
    Invalid(String),
    /// A durable acquire ([`crate::Durable`]) was granted, but fewer than `wanted`
    /// replicas acknowledged the grant within the timeout (`WAIT` answered `acked`).
    /// The grant was released again: nothing is held.
    NotDurable {
        /// Replicas asked for.
        wanted: u32,
        /// Replicas that acknowledged the grant.
        acked: u32,
    },
}

/// `std::result::Result` with this crate's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// The error code of an error reply (`"DEADLOCK"`, `"WRONGKIND"`, `"ERR"`, …).
    ///
    /// ```
    /// let e = dlock_client::Error::Unexpected("x".into());
    /// assert_eq!(e.code(), None);
    /// ```
    pub fn code(&self) -> Option<&str> {
        match self {
            Error::Redis(e) => e.code(),
            _ => None,
        }
    }

    /// True for a `DEADLOCK` reply: a wait that would have closed a wait-for cycle
    /// across locks ([`Error::deadlock`] gives the cycle), or a second reader asked to
    /// upgrade to WRITE while another reader already waits to upgrade.
    ///
    /// ```
    /// let e = dlock_client::Error::Invalid("x".into());
    /// assert!(!e.is_deadlock());
    /// ```
    pub fn is_deadlock(&self) -> bool {
        self.code() == Some("DEADLOCK")
    }

    /// True for the `FENCED` reply of [`crate::Guard::fenced`]: the guard's token was
    /// no longer live (lease ended, released, force-released), so the command did not
    /// run.
    ///
    /// ```
    /// let e = dlock_client::Error::Invalid("x".into());
    /// assert!(!e.is_fenced());
    /// ```
    pub fn is_fenced(&self) -> bool {
        self.code() == Some("FENCED")
    }

    /// True for the `NOREPLICAS` reply: the master refuses writes (acquires included)
    /// because fewer than `min-replicas-to-write` replicas are connected.
    ///
    /// ```
    /// let e = dlock_client::Error::Invalid("x".into());
    /// assert!(!e.is_no_replicas());
    /// ```
    pub fn is_no_replicas(&self) -> bool {
        self.code() == Some("NOREPLICAS")
    }

    /// True for [`Error::NotDurable`]: a grant too few replicas acknowledged (and
    /// which was released again).
    ///
    /// ```
    /// let e = dlock_client::Error::NotDurable { wanted: 1, acked: 0 };
    /// assert!(e.is_not_durable());
    /// ```
    pub fn is_not_durable(&self) -> bool {
        matches!(self, Error::NotDurable { .. })
    }

    /// True when the server could not be reached or did not answer in time.
    ///
    /// ```
    /// let e = dlock_client::Error::Unexpected("x".into());
    /// assert!(!e.is_unreachable());
    /// ```
    pub fn is_unreachable(&self) -> bool {
        match self {
            Error::Redis(e) => is_connection_error(e),
            _ => false,
        }
    }
}

/// True when `e` says the connection is unusable (I/O, timeout, refused, dropped).
pub(crate) fn is_connection_error(e: &redis::RedisError) -> bool {
    e.is_io_error()
        || e.is_timeout()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_unrecoverable_error()
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Redis(e) => write!(f, "redis: {e}"),
            Error::Unexpected(s) => write!(f, "unexpected reply: {s}"),
            Error::Invalid(s) => write!(f, "invalid argument: {s}"),
            Error::NotDurable { wanted, acked } => write!(
                f,
                "not durable: {acked} of {wanted} replicas acknowledged the grant in time \
                 (it was released again)"
            ),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Redis(e) => Some(e),
            _ => None,
        }
    }
}

impl From<redis::RedisError> for Error {
    fn from(e: redis::RedisError) -> Self {
        Error::Redis(e)
    }
}
