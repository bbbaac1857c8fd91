//! The queries behind the server-side handoff: which waiter a change lets in
//! ([`Lock::next_handoff`]), and a time-only [`Lock::tick_due`] that skips
//! the queue while no queued place can have ended, so that a handoff costs
//! the same whatever the length of the queue.

use super::{Ask, Kind, Lock, Mode, Tick, Waiter};

/// A lower bound on the end of every queued (not blocked) place of a lock:
/// none ends before it (`u64::MAX`: there is none; 0: unknown, look).
/// Bookkeeping only: not persisted, and equal to every other bound, so two
/// locks in the same state compare equal whatever their history.
#[derive(Clone, Copy, Debug, Default)]
pub struct PlacesDue(pub(super) u64);

impl PartialEq for PlacesDue {
    fn eq(&self, _other: &PlacesDue) -> bool {
        true
    }
}

impl Eq for PlacesDue {}

impl Lock {
    /// The blocked waiter that an attempt with its own request would now
    /// serve — grant it, or answer it an error — when the lock changed: the
    /// head of the queue (mutex, fair lock, semaphore: strict FIFO; rw: the
    /// head, then the next reader behind a reader just granted, one call
    /// each), or, on an rw lock read by one owner only, that owner's place
    /// waiting to upgrade, wherever it is. `None` when nobody is served: the
    /// head is denied, or is a queued place of a fair-lock owner that does
    /// not wait on the server (it asks again itself). Waiters behind a
    /// denied head are denied too (every kind serves in queue order), so the
    /// command layer serves exactly the waiters named, one call per grant.
    pub fn next_handoff(&self) -> Option<u64> {
        if self.kind == Kind::Latch {
            // A latch's places are answered when it opens, never handed over.
            return None;
        }
        let head = self.waiters.front()?;
        if head.blocked && self.would_serve(head, 0) {
            return Some(head.id);
        }
        if self.kind == Kind::Rw && self.openness() == 2 {
            // One owner reads: it may upgrade from any place (O(waiters),
            // only in this case).
            let reader = &self.holders.first()?.owner;
            let (pos, w) = self
                .waiters
                .iter()
                .enumerate()
                .find(|(_, w)| w.blocked && w.mode == Mode::Write && *w.owner == **reader)?;
            if self.would_serve(w, pos) {
                return Some(w.id);
            }
        }
        None
    }

    /// Whether an attempt by the waiter `w`, at `pos` in the queue, would
    /// be answered now (granted, or refused with an error): the rule is
    /// [`Lock::decide`]'s.
    fn would_serve(&self, w: &Waiter, pos: usize) -> bool {
        self.decide(&Ask::of(w), Some(pos)).serves()
    }

    /// [`Lock::tick`] for time alone (every blocked waiter counts as live:
    /// connections that went away are pruned by the events that tell so).
    /// Holds are always looked at (a lock has few); the queue only when a
    /// queued place may have ended by `now` (see [`PlacesDue`]) or for a
    /// latch, whose places all have deadlines. The result is the same as
    /// `tick(now, |_| true)`.
    pub fn tick_due(&mut self, now: u64) -> Tick {
        let scan = self.kind == Kind::Latch || self.places_due.0 <= now;
        self.tick_with(now, |_| true, scan)
    }

    /// Notes that a queued place now ends at `at`.
    pub(super) fn note_place_due(&mut self, at: u64) {
        self.places_due.0 = self.places_due.0.min(at);
    }

    /// After a scan of the whole queue: the exact bound.
    pub(super) fn recompute_places_due(&mut self) {
        self.places_due.0 = self
            .waiters
            .iter()
            .filter(|w| !w.blocked)
            .map(|w| w.expires_at)
            .min()
            .unwrap_or(u64::MAX);
    }

    /// [`Lock::next_deadline`] without a scan of the queue, for filing the
    /// lock in the expiry index: never later than it (a queued place is
    /// counted at the bound of [`PlacesDue`]; a timer that fires early finds
    /// nothing due and files the lock again, exactly).
    pub fn next_deadline_hint(&self) -> Option<u64> {
        if self.kind == Kind::Latch || self.places_due.0 == 0 {
            return self.next_deadline();
        }
        let h = self.holders.iter().map(|h| h.expires_at).min();
        let w = (self.places_due.0 != u64::MAX).then_some(self.places_due.0);
        match (h, w) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}
