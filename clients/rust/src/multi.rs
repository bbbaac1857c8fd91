//! MultiLock: all of several locks, possibly on different servers, or none.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::blocking::{Guard, Lock};
use crate::core::multi::{joint_lost, ordered, unlock_outcomes, MultiAcquire};
use crate::error::{Error, Result};
use crate::lost::{LostSignal, LostState};
use crate::Unlock;

/// Several locks taken together, all or none — like Redisson's `RedissonMultiLock`.
///
/// The locks are taken one by one in a deterministic order (by server address, then
/// key, then kind), whatever order they were given in, so two MultiLocks over the same
/// locks cannot deadlock each other (the server's deadlock detection never has to
/// refuse one MultiLock because of another; see docs/deadlocks.md). When one lock is not granted within what is left
/// of the wait (or fails), every lock already taken is released again in reverse
/// order and the attempt answers `None`.
///
/// ```no_run
/// use std::time::Duration;
/// use dlock_client::{Client, MultiLock};
///
/// let eu = Client::open("redis://10.0.0.1/")?;
/// let us = Client::open("redis://10.0.0.2/")?;
/// let both = MultiLock::new([eu.mutex("account:7"), us.mutex("account:9")])?;
/// if let Some(guard) = both.try_lock(Duration::from_secs(2), None)? {
///     // move money from account 7 to account 9
///     guard.unlock()?;
/// }
/// # Ok::<(), dlock_client::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct MultiLock {
    locks: Vec<Lock>,
}

impl MultiLock {
    /// A MultiLock over `locks` (at least one).
    ///
    /// ```
    /// # use dlock_client::{Client, MultiLock};
    /// let c = Client::open("redis://127.0.0.1/")?;
    /// let m = MultiLock::new([c.mutex("b"), c.mutex("a")])?;
    /// assert_eq!(m.names(), ["a", "b"]); // the order they are taken in
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn new(locks: impl IntoIterator<Item = Lock>) -> Result<MultiLock> {
        let locks = ordered(locks, |l| (&l.inner.server, l.name(), l.kind()))?;
        Ok(MultiLock { locks })
    }

    /// The keys, in the order the locks are taken.
    ///
    /// ```
    /// # use dlock_client::{Client, MultiLock};
    /// # let c = Client::open("redis://127.0.0.1/")?;
    /// let m = MultiLock::new([c.mutex("x")])?;
    /// assert_eq!(m.names(), ["x"]);
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn names(&self) -> Vec<&str> {
        self.locks.iter().map(|l| l.name()).collect()
    }

    /// Waits until every lock is held (watchdog leases).
    ///
    /// ```no_run
    /// # use dlock_client::{Client, MultiLock};
    /// # let c = Client::open("redis://127.0.0.1/")?;
    /// let guard = MultiLock::new([c.mutex("a"), c.mutex("b")])?.lock()?;
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn lock(&self) -> Result<MultiGuard> {
        self.take(None, None)?
            .ok_or_else(|| Error::Unexpected("an unbounded wait ended without a grant".into()))
    }

    /// Takes every lock within `wait` in total, or none: on failure the locks taken so
    /// far are released and the answer is `Ok(None)` (or the error).
    /// `lease` as in [`Lock::try_lock`].
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use dlock_client::{Client, MultiLock};
    /// # let c = Client::open("redis://127.0.0.1/")?;
    /// let m = MultiLock::new([c.mutex("a"), c.mutex("b")])?;
    /// match m.try_lock(Duration::from_millis(200), Some(Duration::from_secs(5)))? {
    ///     Some(g) => println!("tokens {:?}", g.tokens()),
    ///     None => println!("one of them is busy; nothing is held"),
    /// }
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn try_lock(&self, wait: Duration, lease: Option<Duration>) -> Result<Option<MultiGuard>> {
        self.take(Some(wait), lease)
    }

    /// Drives [`MultiAcquire`]: each lock in order, rolled back on a miss or error.
    fn take(&self, wait: Option<Duration>, lease: Option<Duration>) -> Result<Option<MultiGuard>> {
        let m = MultiAcquire::new(wait, Instant::now());
        let mut held = Vec::with_capacity(self.locks.len());
        for l in &self.locks {
            let answer = l.acquire(m.left(Instant::now()), lease);
            if !m
                .file(answer, &mut held)
                .inspect_err(|_| rollback(&mut held))?
            {
                rollback(&mut held);
                return Ok(None);
            }
        }
        Ok(Some(MultiGuard::new(held)))
    }
}

/// Releases `held` in reverse order.
fn rollback(held: &mut Vec<Guard>) {
    while let Some(g) = held.pop() {
        let _ = g.unlock();
    }
}

/// All the locks of a [`MultiLock`]. Releases them (in reverse order) when dropped.
///
/// ```no_run
/// # use dlock_client::{Client, MultiLock};
/// # let c = Client::open("redis://127.0.0.1/")?;
/// let g = MultiLock::new([c.mutex("a"), c.mutex("b")])?.lock()?;
/// assert_eq!(g.tokens().len(), 2);
/// assert!(!g.is_lost());
/// # Ok::<(), dlock_client::Error>(())
/// ```
#[derive(Debug)]
pub struct MultiGuard {
    guards: Vec<Guard>,
    lost: Arc<LostState>,
}

impl MultiGuard {
    fn new(guards: Vec<Guard>) -> MultiGuard {
        let lost = joint_lost(guards.iter().map(Guard::lost_state));
        MultiGuard { guards, lost }
    }

    /// The fencing tokens, in the order the locks were taken ([`MultiLock::names`]).
    ///
    /// ```no_run
    /// # use dlock_client::{Client, MultiLock};
    /// # let c = Client::open("redis://127.0.0.1/")?;
    /// let g = MultiLock::new([c.mutex("a")])?.lock()?;
    /// println!("{:?}", g.tokens());
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn tokens(&self) -> Vec<u64> {
        self.guards.iter().map(Guard::token).collect()
    }

    /// The individual guards, in the order the locks were taken.
    ///
    /// ```no_run
    /// # use dlock_client::{Client, MultiLock};
    /// # let c = Client::open("redis://127.0.0.1/")?;
    /// let g = MultiLock::new([c.mutex("a")])?.lock()?;
    /// assert_eq!(g.guards()[0].name(), "a");
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn guards(&self) -> &[Guard] {
        &self.guards
    }

    /// True when any of the locks is lost.
    ///
    /// ```no_run
    /// # use dlock_client::{Client, MultiLock};
    /// # let c = Client::open("redis://127.0.0.1/")?;
    /// let g = MultiLock::new([c.mutex("a")])?.lock()?;
    /// assert!(!g.is_lost());
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn is_lost(&self) -> bool {
        self.lost.is_lost()
    }

    /// Fires when any of the locks is lost (by a notice, or when the first of their
    /// lease clocks runs out), with that lock's reason.
    ///
    /// ```no_run
    /// # use dlock_client::{Client, MultiLock};
    /// # let c = Client::open("redis://127.0.0.1/")?;
    /// let g = MultiLock::new([c.mutex("a"), c.mutex("b")])?.lock()?;
    /// let lost = g.lost_signal();
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn lost_signal(&self) -> LostSignal {
        LostSignal(self.lost.clone())
    }

    /// Releases every lock (reverse order) and returns each outcome (see
    /// [`crate::Guard::unlock`]; never an error), in the order of
    /// [`MultiLock::names`].
    ///
    /// ```no_run
    /// # use dlock_client::{Client, MultiLock, Unlock};
    /// # let c = Client::open("redis://127.0.0.1/")?;
    /// let g = MultiLock::new([c.mutex("a"), c.mutex("b")])?.lock()?;
    /// assert_eq!(g.unlock()?, vec![Unlock::Released, Unlock::Released]);
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn unlock(mut self) -> Result<Vec<Unlock>> {
        let mut outcomes = Vec::with_capacity(self.guards.len());
        while let Some(g) = self.guards.pop() {
            outcomes.push(g.unlock().unwrap_or(Unlock::Unknown));
        }
        Ok(unlock_outcomes(outcomes))
    }
}

impl Drop for MultiGuard {
    fn drop(&mut self) {
        while let Some(g) = self.guards.pop() {
            drop(g);
        }
    }
}
