//! The queries behind the server-side handoff: which waiter a change lets in
//! ([`Lock::next_handoff`]), and a time-only [`Lock::tick_due`] that skips
//! the queue while no queued place can have ended, so that a handoff costs
//! the same whatever the length of the queue.

use super::{Ask, Kind, Lock, Tick, Waiter};

impl Lock {
    /// The blocked waiter that an attempt with its own request would now
    /// serve — grant it, or answer it an error — when the lock changed: the
    /// first such waiter in queue order. `None` when nobody is served. The
    /// command layer serves exactly the waiters named, one call per grant,
    /// until `None`.
    ///
    /// O(1) in the common case: the head is looked at, and the rest of the
    /// queue only when someone behind a head that is not served can be.
    /// Behind such a head (denied, or a queued place of a fair-lock owner
    /// that does not wait on the server) a waiter is denied — strict FIFO
    /// for mutex, fair and semaphore; writer preference for rw READ; a
    /// WRITE that is not an upgrade waits for the head — unless its owner
    /// holds: re-entry, an upgrade, a downgrade, an error such as the
    /// upgrade deadlock, or the case of the reader at the head stalled by
    /// its own READ hold in its lock-delay (that owner holds, and has a
    /// place: the head), behind which other readers are grantable. So the
    /// queue is scanned only when a holder may have a place (the
    /// queued-owner set answers that in O(1); an owner holding while it
    /// waits is rare).
    pub fn next_handoff(&self) -> Option<u64> {
        if self.kind == Kind::Latch {
            // A latch's places are answered when it opens, never handed over.
            return None;
        }
        let head = self.queue.front()?;
        if head.blocked && self.would_serve(head, 0) {
            return Some(head.id);
        }
        let behind = self.holders.iter().any(|h| self.queue.may_have(&h.owner));
        if !behind {
            return None;
        }
        self.queue
            .iter()
            .enumerate()
            .skip(1)
            .find(|(pos, w)| w.blocked && self.would_serve(w, *pos))
            .map(|(_, w)| w.id)
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
    /// queued place may have ended by `now` (see `Queue::due`) or for a
    /// latch, whose places all have deadlines. The result is the same as
    /// `tick(now, |_| true)`.
    pub fn tick_due(&mut self, now: u64) -> Tick {
        let scan = self.kind == Kind::Latch || self.queue.due() <= now;
        self.tick_with(now, |_| true, scan)
    }

    /// [`Lock::next_deadline`] without a scan of the queue, for filing the
    /// lock in the expiry index: never later than it (a queued place is
    /// counted at the bound of `Queue::due`; a timer that fires early finds
    /// nothing due and files the lock again, exactly).
    pub fn next_deadline_hint(&self) -> Option<u64> {
        let due = self.queue.due();
        if self.kind == Kind::Latch || due == 0 {
            return self.next_deadline();
        }
        let h = self.holders.iter().map(|h| h.expires_at).min();
        let w = (due != u64::MAX).then_some(due);
        match (h, w) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}
