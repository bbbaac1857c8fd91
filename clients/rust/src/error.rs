//! The crate's error type.

use std::fmt;

/// Errors of the client: a Redis error (I/O, timeout, or an error reply from the
/// server), or a reply this client did not expect. The `is_…` predicates name the kinds
/// of docs/clients.md (rule 5): [`Error::is_timeout`], [`Error::is_wrong_kind`] (and
/// [`Error::is_wrong_type`]),
/// [`Error::is_module_not_loaded`], [`Error::is_deadlock`], [`Error::is_queue_full`],
/// [`Error::is_not_durable`], [`Error::is_connection`] and
/// [`Error::is_invalid_argument`]. A lost hold is not an error: its guard's
/// [`LostSignal`](crate::LostSignal) and [`Unlock`](crate::Unlock) say so.
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
#[non_exhaustive]
pub enum Error {
    /// From the `redis` crate: connection, I/O, timeout, or an error reply such as
    /// `DEADLOCK`, `NOTHELD`, `QUEUEFULL` or `WRONGTYPE` (see the `is_…` predicates).
    Redis(redis::RedisError),
    /// The server answered something this client does not understand.
    Unexpected(String),
    /// An argument was rejected before anything was sent; the message names it (e.g. an
    /// empty key, a zero lease, a renew interval not below its lease, an empty lock
    /// list).
    Invalid(String),
    /// A wait was not granted before its deadline because the connection failed on the
    /// way (server down, refusing connections, or not answering): `source` is the last
    /// failure. (A wait that simply was not granted in time answers `Ok(None)`.)
    Timeout {
        /// How long the caller's wait was.
        waited: std::time::Duration,
        /// The last connection failure.
        source: redis::RedisError,
    },
    /// The key holds a value of another type than a dlock lock (`WRONGTYPE`, e.g. a
    /// string): a wrong kind ([`Error::is_wrong_kind`]) that is not a lock at all
    /// ([`Error::is_wrong_type`]).
    WrongType {
        /// The server's reply.
        source: redis::RedisError,
    },
    /// The key holds a lock of another kind than the command's (e.g. `client.mutex(k)`
    /// on a fair lock's key): the server's `WRONGKIND` reply, with the kind it found.
    WrongKind {
        /// The kind the key holds (`None` when the reply named one this client does
        /// not know).
        found: Option<FoundKind>,
        /// The server's reply, which says which commands fit the key.
        source: redis::RedisError,
    },
    /// The server does not know a `DLOCK.*` command (`ERR unknown command`): the dlock
    /// module is not loaded on it, or is older than the command. The message says how
    /// to check (`MODULE LIST`) and load it (`--loadmodule`).
    UnknownCommand {
        /// The command the server did not know, e.g. `DLOCK.ACQUIRE`.
        command: String,
        /// The server's reply.
        source: redis::RedisError,
    },
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

/// The kind of lock a key holds, as named by a `WRONGKIND` reply ([`Error::WrongKind`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FoundKind {
    /// A reentrant mutex (`DLOCK.ACQUIRE`).
    Mutex,
    /// A read-write lock (`DLOCK.RWACQUIRE`).
    ReadWrite,
    /// A fair lock (`DLOCK.FAIRACQUIRE`).
    Fair,
    /// A semaphore (`DLOCK.SEMACQUIRE`).
    Semaphore,
    /// A countdown latch (`DLOCK.LATCHSET`).
    Latch,
}

impl FoundKind {
    /// The kind named in a `WRONGKIND` reply's text ("the key holds a fair lock; …").
    fn parse(detail: &str) -> Option<FoundKind> {
        let held = detail.split("holds").nth(1)?.trim_start();
        let held = held.split(';').next()?;
        [
            ("a mutex", FoundKind::Mutex),
            ("an rw", FoundKind::ReadWrite),
            ("a read-write", FoundKind::ReadWrite),
            ("a fair", FoundKind::Fair),
            ("a semaphore", FoundKind::Semaphore),
            ("a latch", FoundKind::Latch),
        ]
        .into_iter()
        .find(|(word, _)| held.starts_with(word))
        .map(|(_, k)| k)
    }
}

impl fmt::Display for FoundKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FoundKind::Mutex => "mutex",
            FoundKind::ReadWrite => "read-write lock",
            FoundKind::Fair => "fair lock",
            FoundKind::Semaphore => "semaphore",
            FoundKind::Latch => "latch",
        })
    }
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
            Error::WrongKind { .. } => Some("WRONGKIND"),
            Error::WrongType { .. } => Some("WRONGTYPE"),
            Error::UnknownCommand { source, .. } => source.code(),
            _ => None,
        }
    }

    /// True for a `NOTHELD` reply: the owner held nothing to release or renew (never
    /// acquired, lease ended, or force-released). A guard's `unlock` reports this as
    /// [`crate::Unlock::Lost`] instead.
    ///
    /// ```
    /// let e = dlock_client::Error::Invalid("x".into());
    /// assert!(!e.is_not_held());
    /// ```
    pub fn is_not_held(&self) -> bool {
        self.code() == Some("NOTHELD")
    }

    /// True for [`Error::WrongKind`] — the key holds a lock of another kind
    /// ([`Error::found_kind`] says which) — and for [`Error::WrongType`]: the key holds
    /// no lock at all (`WRONGTYPE`).
    ///
    /// ```
    /// let e = dlock_client::Error::Invalid("x".into());
    /// assert!(!e.is_wrong_kind());
    /// ```
    pub fn is_wrong_kind(&self) -> bool {
        matches!(self, Error::WrongKind { .. } | Error::WrongType { .. })
    }

    /// True for [`Error::WrongType`]: the key holds a value of another type than a
    /// dlock lock (`WRONGTYPE`, e.g. a string or a list) — a wrong kind that is no lock
    /// at all.
    ///
    /// ```
    /// let e = dlock_client::Error::Invalid("x".into());
    /// assert!(!e.is_wrong_type());
    /// ```
    pub fn is_wrong_type(&self) -> bool {
        matches!(self, Error::WrongType { .. })
    }

    /// True for [`Error::Timeout`]: a wait reached its deadline while the connection
    /// failed (see [`std::error::Error::source`] for the failure).
    ///
    /// ```
    /// let e = dlock_client::Error::Invalid("x".into());
    /// assert!(!e.is_timeout());
    /// ```
    pub fn is_timeout(&self) -> bool {
        matches!(self, Error::Timeout { .. })
    }

    /// True for [`Error::Invalid`]: bad input, refused before anything was sent.
    ///
    /// ```
    /// let e = dlock_client::Error::Invalid("the key must not be empty".into());
    /// assert!(e.is_invalid_argument());
    /// ```
    pub fn is_invalid_argument(&self) -> bool {
        matches!(self, Error::Invalid(_))
    }

    /// True when the server does not know the dlock commands: the module is not loaded
    /// (or is older than the command). The message says how to load it. The same as
    /// [`Error::is_unknown_command`] for a `DLOCK.*` command.
    ///
    /// ```
    /// let e = dlock_client::Error::Invalid("x".into());
    /// assert!(!e.is_module_not_loaded());
    /// ```
    pub fn is_module_not_loaded(&self) -> bool {
        matches!(self, Error::UnknownCommand { .. })
    }

    /// The kind of lock the key holds, for [`Error::WrongKind`].
    ///
    /// ```
    /// let e = dlock_client::Error::Invalid("x".into());
    /// assert_eq!(e.found_kind(), None);
    /// ```
    pub fn found_kind(&self) -> Option<FoundKind> {
        match self {
            Error::WrongKind { found, .. } => *found,
            _ => None,
        }
    }

    /// True for a `QUEUEFULL` reply: the lock's queue already holds the most places
    /// `dlock.max-queue` allows; nothing changed (try again later).
    ///
    /// ```
    /// let e = dlock_client::Error::Invalid("x".into());
    /// assert!(!e.is_queue_full());
    /// ```
    pub fn is_queue_full(&self) -> bool {
        self.code() == Some("QUEUEFULL")
    }

    /// True for [`Error::UnknownCommand`] (and any other `unknown command` reply): the
    /// server does not know the command — for a `DLOCK.*` command, the dlock module is
    /// not loaded or is older than the command.
    ///
    /// ```
    /// let e = dlock_client::Error::Invalid("x".into());
    /// assert!(!e.is_unknown_command());
    /// ```
    pub fn is_unknown_command(&self) -> bool {
        match self {
            Error::UnknownCommand { .. } => true,
            Error::Redis(e) => unknown_command(e).is_some(),
            _ => false,
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

    /// True when the connection failed — the server could not be reached, refused,
    /// dropped the connection or did not answer in time — and no deadline covered it
    /// (a wait with a deadline reports [`Error::Timeout`] instead).
    ///
    /// ```
    /// let e = dlock_client::Error::Unexpected("x".into());
    /// assert!(!e.is_connection());
    /// ```
    pub fn is_connection(&self) -> bool {
        match self {
            Error::Redis(e) => is_connection_error(e),
            _ => false,
        }
    }

    /// The old name of [`Error::is_connection`].
    #[deprecated(since = "0.2.0", note = "renamed to Error::is_connection")]
    pub fn is_unreachable(&self) -> bool {
        self.is_connection()
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

/// The command named by an `unknown command 'X', with args …` reply, if `e` is one.
pub(crate) fn unknown_command(e: &redis::RedisError) -> Option<String> {
    if e.code() != Some("ERR") {
        return None;
    }
    let rest = e.detail()?.trim_start().strip_prefix("unknown command")?;
    let rest = rest.trim_start();
    let name = rest
        .strip_prefix('\'')
        .and_then(|r| r.split('\'').next())
        .or_else(|| rest.split_whitespace().next())
        .unwrap_or_default();
    Some(name.to_string())
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Redis(e) => write!(f, "redis: {e}"),
            Error::WrongKind { found, source } => {
                let detail = source.detail().unwrap_or_default();
                match found {
                    Some(k) => write!(f, "wrong kind of lock: the key holds a {k} ({detail})"),
                    None => write!(f, "wrong kind of lock: {detail}"),
                }
            }
            Error::UnknownCommand { command, source } => write!(
                f,
                "the server does not know {command} — is the dlock module loaded, and new \
                 enough to have {command}? `MODULE LIST` on the server should list `dlock`; \
                 load it with `redis-server --loadmodule /path/to/libdlock.so` (or a \
                 `loadmodule` line in redis.conf, or `MODULE LOAD`) (server: {source})"
            ),
            Error::Unexpected(s) => write!(f, "unexpected reply: {s}"),
            Error::Invalid(s) => write!(f, "invalid argument: {s}"),
            Error::Timeout { waited, source } => write!(
                f,
                "timeout: not granted within the wait of {waited:?}; the connection failed \
                 on the way: {source}"
            ),
            Error::WrongType { source } => write!(
                f,
                "wrong kind: the key holds a value of another type, not a dlock lock \
                 (expected no key, or a lock of this kind; server: {source})"
            ),
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
            Error::Redis(e)
            | Error::WrongKind { source: e, .. }
            | Error::WrongType { source: e }
            | Error::Timeout { source: e, .. }
            | Error::UnknownCommand { source: e, .. } => Some(e),
            _ => None,
        }
    }
}

/// Error replies that have a variant of their own become it: `WRONGKIND` →
/// [`Error::WrongKind`], `WRONGTYPE` → [`Error::WrongType`], `unknown command
/// 'DLOCK.…'` → [`Error::UnknownCommand`].
impl From<redis::RedisError> for Error {
    fn from(e: redis::RedisError) -> Self {
        if e.code() == Some("WRONGKIND") {
            let found = e.detail().and_then(FoundKind::parse);
            return Error::WrongKind { found, source: e };
        }
        if e.code() == Some("WRONGTYPE") {
            return Error::WrongType { source: e };
        }
        match unknown_command(&e) {
            Some(command) if command.to_ascii_uppercase().starts_with("DLOCK.") => {
                Error::UnknownCommand { command, source: e }
            }
            _ => Error::Redis(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn found_kinds_are_read_from_the_reply() {
        for (text, kind) in [
            (
                "the key holds a mutex lock; use DLOCK.ACQUIRE",
                FoundKind::Mutex,
            ),
            (
                "the key holds an rw lock; use DLOCK.RWACQUIRE",
                FoundKind::ReadWrite,
            ),
            (
                "the key holds a fair lock; use DLOCK.FAIRACQUIRE",
                FoundKind::Fair,
            ),
            (
                "the key holds a semaphore; use DLOCK.SEMACQUIRE",
                FoundKind::Semaphore,
            ),
            (
                "the key holds a latch; use DLOCK.LATCHSET",
                FoundKind::Latch,
            ),
        ] {
            assert_eq!(FoundKind::parse(text), Some(kind), "{text}");
        }
        assert_eq!(FoundKind::parse("something else"), None);
    }
}
