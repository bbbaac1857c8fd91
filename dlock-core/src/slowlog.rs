//! The ring behind `DLOCK.SLOWLOG`: a bounded log of long waits and holds,
//! newest first, with ids that keep increasing across `RESET` (as Redis'
//! SLOWLOG does). Thresholds are the caller's (config): this keeps entries.

use super::{Kind, Mode};
use std::collections::VecDeque;

/// What was slow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Wait,
    Hold,
}

impl Phase {
    pub fn name(self) -> &'static str {
        match self {
            Phase::Wait => "wait",
            Phase::Hold => "hold",
        }
    }
}

/// How it ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// A wait that ended with the grant.
    Granted,
    /// A wait whose `WAIT` ran out.
    Timeout,
    /// A wait answered with a `DEADLOCK` error.
    Deadlock,
    /// A wait whose connection closed; a `BIND` hold whose connection closed.
    Disconnected,
    /// A wait answered with another error.
    Error,
    /// A hold its owner released.
    Released,
    /// A hold whose lease (or lock-delay) ended.
    Expired,
    /// A hold dropped by `DLOCK.FORCERELEASE`.
    Forced,
    /// A hold whose key was deleted (DEL, FLUSHDB, eviction, overwrite).
    Deleted,
    /// A wait given up by `DLOCK.CANCEL` (answered nil at once).
    Cancelled,
}

impl Outcome {
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Granted => "granted",
            Outcome::Timeout => "timeout",
            Outcome::Deadlock => "deadlock",
            Outcome::Disconnected => "disconnected",
            Outcome::Error => "error",
            Outcome::Released => "released",
            Outcome::Expired => "expired",
            Outcome::Forced => "forced",
            Outcome::Deleted => "deleted",
            Outcome::Cancelled => "cancelled",
        }
    }
}

/// One entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub id: u64,
    /// Unix ms when the wait or hold ended.
    pub ended_ms: u64,
    pub phase: Phase,
    pub key: Box<[u8]>,
    pub owner: Box<[u8]>,
    pub kind: Kind,
    pub mode: Mode,
    pub duration_ms: u64,
    pub outcome: Outcome,
    /// For a wait: who it waited on when it began (empty for a hold).
    pub blocked_by: Vec<Box<[u8]>>,
}

/// The log.
#[derive(Clone, Debug, Default)]
pub struct SlowLog {
    entries: VecDeque<Entry>,
    next_id: u64,
}

impl SlowLog {
    pub fn new() -> SlowLog {
        SlowLog::default()
    }

    /// Adds `e` (its id is assigned here) as the newest entry, dropping the
    /// oldest beyond `max_len` (0 keeps nothing).
    pub fn push(&mut self, mut e: Entry, max_len: usize) {
        e.id = self.next_id;
        self.next_id = self.next_id.saturating_add(1);
        self.entries.push_front(e);
        self.trim(max_len);
    }

    /// Drops the oldest entries beyond `max_len`.
    pub fn trim(&mut self, max_len: usize) {
        self.entries.truncate(max_len);
    }

    /// The newest `n` entries, newest first.
    pub fn newest(&self, n: usize) -> impl Iterator<Item = &Entry> {
        self.entries.iter().take(n)
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Forgets every entry (ids keep increasing).
    pub fn reset(&mut self) {
        self.entries.clear();
    }
}
