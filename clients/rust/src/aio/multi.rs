//! The async MultiLock: all of several [`AsyncLock`]s, possibly on different servers, or
//! none.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{AsyncGuard, AsyncLock};
use crate::core::multi::{joint_lost, ordered, unlock_outcomes, MultiAcquire};
use crate::error::{Error, Result};
use crate::lost::{LostSignal, LostState};
use crate::Unlock;

/// The async counterpart of [`crate::MultiLock`]: several locks taken together, all or
/// none.
///
/// The locks are taken one by one in the same deterministic order as the blocking
/// MultiLock (server address, then key, then kind), whatever order they were given in,
/// so two MultiLocks over the same locks cannot deadlock each other. When one lock is
/// not granted within what is left of the wait (or fails), every lock already taken is
/// released again in reverse order and the attempt answers `None`.
///
/// ```no_run
/// use std::time::Duration;
/// use dlock_client::aio::{AsyncClient, AsyncMultiLock};
///
/// # #[tokio::main] async fn main() -> dlock_client::Result<()> {
/// let eu = AsyncClient::open("redis://10.0.0.1/")?;
/// let us = AsyncClient::open("redis://10.0.0.2/")?;
/// let both = AsyncMultiLock::new([eu.mutex("account:7"), us.mutex("account:9")])?;
/// if let Some(guard) = both.try_lock(Duration::from_secs(2), None).await? {
///     // move money from account 7 to account 9
///     guard.unlock().await?;
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct AsyncMultiLock {
    locks: Vec<AsyncLock>,
}

impl AsyncMultiLock {
    /// An async MultiLock over `locks` (at least one).
    ///
    /// ```no_run
    /// # use dlock_client::aio::{AsyncClient, AsyncMultiLock};
    /// let c = AsyncClient::open("redis://127.0.0.1/")?;
    /// let m = AsyncMultiLock::new([c.mutex("b"), c.mutex("a")])?;
    /// assert_eq!(m.names(), ["a", "b"]); // the order they are taken in
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn new(locks: impl IntoIterator<Item = AsyncLock>) -> Result<AsyncMultiLock> {
        let locks = ordered(locks, |l| (&l.inner.endpoint.server, l.name(), l.kind()))?;
        Ok(AsyncMultiLock { locks })
    }

    /// The keys, in the order the locks are taken.
    ///
    /// ```no_run
    /// # use dlock_client::aio::{AsyncClient, AsyncMultiLock};
    /// # let c = AsyncClient::open("redis://127.0.0.1/")?;
    /// let m = AsyncMultiLock::new([c.mutex("x")])?;
    /// assert_eq!(m.names(), ["x"]);
    /// # Ok::<(), dlock_client::Error>(())
    /// ```
    pub fn names(&self) -> Vec<&str> {
        self.locks.iter().map(|l| l.name()).collect()
    }

    /// Waits until every lock is held (watchdog leases). On an error the locks taken so
    /// far are released.
    ///
    /// ```no_run
    /// # use dlock_client::aio::{AsyncClient, AsyncMultiLock};
    /// # async fn f(c: AsyncClient) -> dlock_client::Result<()> {
    /// let guard = AsyncMultiLock::new([c.mutex("a"), c.mutex("b")])?.lock().await?;
    /// # Ok(()) }
    /// ```
    pub async fn lock(&self) -> Result<AsyncMultiGuard> {
        self.take(None, None)
            .await?
            .ok_or_else(|| Error::Unexpected("an unbounded wait ended without a grant".into()))
    }

    /// Takes every lock within `wait` in total, or none: on failure the locks taken so
    /// far are released (in reverse order) and the answer is `Ok(None)` (or the error).
    /// `lease` as in [`AsyncLock::try_lock`].
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use dlock_client::aio::{AsyncClient, AsyncMultiLock};
    /// # async fn f(c: AsyncClient) -> dlock_client::Result<()> {
    /// let m = AsyncMultiLock::new([c.mutex("a"), c.mutex("b")])?;
    /// match m.try_lock(Duration::from_millis(200), Some(Duration::from_secs(5))).await? {
    ///     Some(g) => println!("tokens {:?}", g.tokens()),
    ///     None => println!("one of them is busy; nothing is held"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_lock(
        &self,
        wait: Duration,
        lease: Option<Duration>,
    ) -> Result<Option<AsyncMultiGuard>> {
        self.take(Some(wait), lease).await
    }

    /// Drives [`MultiAcquire`]: each lock in order, rolled back on a miss or error.
    async fn take(
        &self,
        wait: Option<Duration>,
        lease: Option<Duration>,
    ) -> Result<Option<AsyncMultiGuard>> {
        let m = MultiAcquire::new(wait, Instant::now());
        let mut held = Vec::with_capacity(self.locks.len());
        for l in &self.locks {
            let answer = l.acquire(m.left(Instant::now()), lease).await;
            match m.file(answer, &mut held) {
                Ok(true) => {}
                other => {
                    rollback(held).await;
                    return other.map(|_| None);
                }
            }
        }
        Ok(Some(AsyncMultiGuard::new(held)))
    }
}

/// Releases `held` in reverse order, each release awaited before the next.
async fn rollback(mut held: Vec<AsyncGuard>) {
    while let Some(g) = held.pop() {
        let _ = g.unlock().await;
    }
}

/// All the locks of an [`AsyncMultiLock`]. Dropping it releases them in reverse order in
/// background tasks (best effort); prefer [`AsyncMultiGuard::unlock`].
///
/// ```no_run
/// # use dlock_client::aio::{AsyncClient, AsyncMultiLock};
/// # async fn f(c: AsyncClient) -> dlock_client::Result<()> {
/// let g = AsyncMultiLock::new([c.mutex("a"), c.mutex("b")])?.lock().await?;
/// assert_eq!(g.tokens().len(), 2);
/// assert!(!g.is_lost());
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct AsyncMultiGuard {
    guards: Vec<AsyncGuard>,
    lost: Arc<LostState>,
}

impl AsyncMultiGuard {
    fn new(guards: Vec<AsyncGuard>) -> AsyncMultiGuard {
        let lost = joint_lost(guards.iter().map(AsyncGuard::lost_state));
        AsyncMultiGuard { guards, lost }
    }

    /// The fencing tokens, in the order the locks were taken ([`AsyncMultiLock::names`]).
    ///
    /// ```no_run
    /// # use dlock_client::aio::{AsyncClient, AsyncMultiLock};
    /// # async fn f(c: AsyncClient) -> dlock_client::Result<()> {
    /// let g = AsyncMultiLock::new([c.mutex("a")])?.lock().await?;
    /// println!("{:?}", g.tokens());
    /// # Ok(()) }
    /// ```
    pub fn tokens(&self) -> Vec<u64> {
        self.guards.iter().map(AsyncGuard::token).collect()
    }

    /// The individual guards, in the order the locks were taken.
    ///
    /// ```no_run
    /// # use dlock_client::aio::{AsyncClient, AsyncMultiLock};
    /// # async fn f(c: AsyncClient) -> dlock_client::Result<()> {
    /// let g = AsyncMultiLock::new([c.mutex("a")])?.lock().await?;
    /// assert_eq!(g.guards()[0].name(), "a");
    /// # Ok(()) }
    /// ```
    pub fn guards(&self) -> &[AsyncGuard] {
        &self.guards
    }

    /// True when any of the locks is lost.
    ///
    /// ```no_run
    /// # use dlock_client::aio::{AsyncClient, AsyncMultiLock};
    /// # async fn f(c: AsyncClient) -> dlock_client::Result<()> {
    /// let g = AsyncMultiLock::new([c.mutex("a")])?.lock().await?;
    /// assert!(!g.is_lost());
    /// # Ok(()) }
    /// ```
    pub fn is_lost(&self) -> bool {
        self.lost.is_lost()
    }

    /// Fires when any of the locks is lost (by a notice, or when the first of their
    /// lease clocks runs out), with that lock's reason.
    ///
    /// ```no_run
    /// # use dlock_client::aio::{AsyncClient, AsyncMultiLock};
    /// # async fn f(c: AsyncClient) -> dlock_client::Result<()> {
    /// let g = AsyncMultiLock::new([c.mutex("a"), c.mutex("b")])?.lock().await?;
    /// let reason = g.lost_signal().lost().await; // completes only when one is lost
    /// # Ok(()) }
    /// ```
    pub fn lost_signal(&self) -> LostSignal {
        LostSignal(self.lost.clone())
    }

    /// Releases every lock (reverse order) and returns each outcome (see
    /// [`crate::Guard::unlock`]; never an error), in the order of
    /// [`AsyncMultiLock::names`].
    ///
    /// ```no_run
    /// # use dlock_client::{aio::{AsyncClient, AsyncMultiLock}, Unlock};
    /// # async fn f(c: AsyncClient) -> dlock_client::Result<()> {
    /// let g = AsyncMultiLock::new([c.mutex("a"), c.mutex("b")])?.lock().await?;
    /// assert_eq!(g.unlock().await?, vec![Unlock::Released, Unlock::Released]);
    /// # Ok(()) }
    /// ```
    pub async fn unlock(mut self) -> Result<Vec<Unlock>> {
        let mut outcomes = Vec::with_capacity(self.guards.len());
        while let Some(g) = self.guards.pop() {
            outcomes.push(g.unlock().await.unwrap_or(Unlock::Unknown));
        }
        Ok(unlock_outcomes(outcomes))
    }
}

impl Drop for AsyncMultiGuard {
    fn drop(&mut self) {
        while let Some(g) = self.guards.pop() {
            drop(g);
        }
    }
}
