//! The MultiLock rules without I/O: the order locks are taken in, what ends an
//! attempt (and so rolls back what was taken, in reverse), and how the release
//! outcomes are reported. [`crate::MultiLock`] and [`crate::aio::AsyncMultiLock`]
//! drive them.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::lost::LostState;
use crate::{LockKind, Unlock};

/// Collects `locks`, refuses an empty set and sorts them in the order they are taken:
/// by server address, then key, then kind (`key` gives the three).
pub(crate) fn ordered<T>(
    locks: impl IntoIterator<Item = T>,
    key: impl Fn(&T) -> (&str, &str, LockKind),
) -> Result<Vec<T>> {
    let mut locks: Vec<T> = locks.into_iter().collect();
    if locks.is_empty() {
        return Err(Error::Invalid(
            "a MultiLock needs at least one lock, got none".into(),
        ));
    }
    locks.sort_by(|a, b| key(a).cmp(&key(b)));
    Ok(locks)
}

/// One attempt to take all the locks, one by one, within one wait in total.
#[derive(Debug)]
pub(crate) struct MultiAcquire {
    deadline: Option<Instant>,
}

impl MultiAcquire {
    /// An attempt of at most `wait` (`None`: unbounded) starting at `now`.
    pub(crate) fn new(wait: Option<Duration>, now: Instant) -> MultiAcquire {
        MultiAcquire {
            deadline: wait.and_then(|w| now.checked_add(w)),
        }
    }

    /// What is left of the wait at `now`, for the next lock.
    pub(crate) fn left(&self, now: Instant) -> Option<Duration> {
        self.deadline.map(|d| d.saturating_duration_since(now))
    }

    /// Files the next lock's answer: its guard joins `held` and the attempt goes on
    /// (`Ok(true)`), or the attempt ends — not granted in time (`Ok(false)`) or failed
    /// (the error) — and the caller rolls back `held` in reverse order.
    pub(crate) fn file<G>(&self, answer: Result<Option<G>>, held: &mut Vec<G>) -> Result<bool> {
        match answer? {
            Some(g) => {
                held.push(g);
                Ok(true)
            }
            None => Ok(false),
        }
    }
}

/// The lost state of a MultiLock: fires when any of `parts` does, at the latest when
/// the first of their lease clocks runs out.
pub(crate) fn joint_lost<'a>(
    parts: impl IntoIterator<Item = &'a Arc<LostState>>,
) -> Arc<LostState> {
    LostState::joint(parts.into_iter().cloned().collect())
}

/// The outcomes of releasing a MultiLock's locks in reverse order, in the order the
/// locks were taken.
pub(crate) fn unlock_outcomes(reversed: Vec<Unlock>) -> Vec<Unlock> {
    reversed.into_iter().rev().collect()
}
