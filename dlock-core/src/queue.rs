//! A lock's queue: its places in order, and what only the queue needs kept
//! beside them — the journal of its changes since the last commit (for
//! replicating the change rather than the whole queue, see `journal`) and
//! a lower bound on the end of its queued places ([`Queue::due`], so that a
//! tick skips the queue while none can have ended). Both live in the
//! journal's box, allocated only while the lock has a queue or edits: a
//! lock without a queue pays 48 bytes for it (memory per lock).
//!
//! Every edit of the places goes through the methods here, which keep the
//! journal and the bound in step; readers see the places as a `VecDeque`
//! ([`Queue`] derefs to it, read-only), so no edit can bypass them.

use super::journal::{count_up, Edit, IdRanges, Journal};
use super::Waiter;
use std::collections::{HashMap, VecDeque};
use std::ops::Deref;

/// A lock's places in queue order, with their journal and due bound.
/// Equal to another queue when the places are (the bookkeeping never
/// differs between two locks in the same state).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Queue {
    places: VecDeque<Waiter>,
    journal: Journal,
}

impl Deref for Queue {
    type Target = VecDeque<Waiter>;

    fn deref(&self) -> &VecDeque<Waiter> {
        &self.places
    }
}

impl Queue {
    /// The queue of a lock replicas do not have as it is (made, loaded):
    /// the next commit sends everything; its due bound unknown.
    pub(super) fn rewrite_all(places: VecDeque<Waiter>) -> Queue {
        Queue {
            places,
            journal: Journal::rewrite_all(),
        }
    }

    /// The empty queue of a lock inflated from its compact form: clean, or
    /// "send everything" when `rewrite`; no place, so none is due (exact).
    pub(super) fn compacted(rewrite: bool) -> Queue {
        Queue {
            places: VecDeque::new(),
            journal: Journal::compacted(rewrite),
        }
    }

    /// For an empty queue: `Some(rewrite)` when it is exactly what
    /// [`Queue::compacted`] makes, else None.
    pub(super) fn compact_state(&self) -> Option<bool> {
        self.journal.compact_state()
    }

    // ---- the due bound ----------------------------------------------------

    /// A lower bound on the end of every queued (not blocked) place: none
    /// ends before it (`u64::MAX`: there is none; 0: unknown, look).
    /// Bookkeeping only: not persisted, and not compared. Unset, it is what
    /// the queue implies: none for an empty queue, unknown for a queue made
    /// or loaded with places.
    pub(super) fn due(&self) -> u64 {
        match self.journal.due() {
            Some(due) => due,
            None if self.places.is_empty() => u64::MAX,
            None => 0,
        }
    }

    fn set_due(&mut self, due: u64) {
        // An empty queue without a box implies "none": allocate nothing.
        if due != u64::MAX || !self.places.is_empty() || self.journal.due().is_some() {
            self.journal.set_due(due);
        }
    }

    /// Notes that a queued place now ends at `at`.
    pub(super) fn note_due(&mut self, at: u64) {
        let due = self.due().min(at);
        self.set_due(due);
    }

    /// After a scan of the whole queue: the exact bound.
    pub(super) fn recompute_due(&mut self) {
        let due = self
            .places
            .iter()
            .filter(|w| !w.blocked)
            .map(|w| w.expires_at)
            .min()
            .unwrap_or(u64::MAX);
        self.set_due(due);
    }

    // ---- edits, journaled -------------------------------------------------

    /// False only when `owner` surely has no place in the queue.
    pub(super) fn may_have(&self, owner: &[u8]) -> bool {
        !self.places.is_empty() && self.journal.may_have(owner)
    }

    /// Removes the place at `pos`, journaled.
    pub(super) fn remove(&mut self, pos: usize) -> Option<Waiter> {
        let len = self.places.len();
        let w = self.places.remove(pos)?;
        self.journal.removed(pos, len, w.id);
        self.journal.forget_owner(&w.owner);
        Some(w)
    }

    /// Appends a place at the back, journaled (a queued place's end noted).
    pub(super) fn push_back(&mut self, w: Waiter) {
        if self.places.is_empty() {
            // No owner has a place, none ends: both exact from here on.
            self.journal.owners_restart();
            self.journal.set_due(u64::MAX);
        }
        self.journal.note_owner(&w.owner);
        self.journal.note_id(w.id);
        if !w.blocked {
            self.note_due(w.expires_at);
        }
        // Exact growth while the queue is short (most are), amortized past.
        if self.places.len() < 8 {
            self.places.reserve_exact(1);
        } else {
            self.places.reserve(1);
        }
        self.places.push_back(w);
        self.journal.appended_one();
    }

    /// Puts a place at the front (a place taken over from a lock that left
    /// its key): the journal cannot express it, the next commit sends the
    /// whole state.
    pub(super) fn push_front(&mut self, w: Waiter) {
        if !w.blocked {
            self.note_due(w.expires_at);
        }
        self.journal.note_owner(&w.owner);
        self.places.push_front(w);
        self.rewrite();
    }

    /// Changes the place at `pos` in place with `f`, journaled. `f` keeps
    /// the place's owner (the queued-owner set is not told; the fuzzers'
    /// `check_lock` would catch a place whose owner it does not list). A
    /// place that is queued after `f` has its end noted.
    pub(super) fn edit(&mut self, pos: usize, f: impl FnOnce(&mut Waiter)) {
        let len = self.places.len();
        let Some(w) = self.places.get_mut(pos) else {
            return;
        };
        let old = w.id;
        f(w);
        let (id, queued_until) = (w.id, (!w.blocked).then_some(w.expires_at));
        let now = (!self.journal.rewrite() && !self.journal.is_new(pos, len)).then(|| w.clone());
        self.journal.note_id(id);
        if let Some(now) = now {
            self.journal.push(Edit::Replaced(old, now));
        }
        if let Some(at) = queued_until {
            self.note_due(at);
        }
    }

    /// Keeps the places `keep` says to keep (in order), journaled.
    pub(super) fn retain(&mut self, keep: impl FnMut(&Waiter) -> bool) {
        self.journal.retain(&mut self.places, keep);
    }

    /// Every place leaves (a latch opening): their ids, in queue order; the
    /// next commit sends the whole state.
    pub(super) fn take_all(&mut self) -> Vec<u64> {
        self.rewrite();
        self.places.drain(..).map(|w| w.id).collect()
    }

    /// Something the journal cannot express changed the queue.
    pub(super) fn rewrite(&mut self) {
        self.journal.set_rewrite();
        self.journal.forget_ids();
    }

    // ---- commits and replication -----------------------------------------

    /// After the change was replicated: the queue as it is now is what
    /// replicas have.
    pub(super) fn committed(&mut self) {
        self.journal.reset(self.places.len());
        self.owners_trim();
    }

    /// Keeps the queued-owner set within twice the queue (plus a little):
    /// places that leave other than by [`Queue::remove`]/[`Queue::retain`]
    /// (a replica's deltas) do not take their owner out, so on a lock that
    /// never goes idle (always held, always a waiter) the set could grow by
    /// every owner that ever queued. Past the bound it is rebuilt from the
    /// queue: O(queue) once per as many places gone, O(1) amortized.
    ///
    /// An unknown set (a lock loaded from a payload: RDB, AOF, a replica's
    /// full state) is built here too, at its first commit with a queue:
    /// otherwise it would stay unknown until the queue empties, which under
    /// steady contention is never, and every handoff would scan the queue.
    fn owners_trim(&mut self) {
        if self.places.is_empty() {
            return;
        }
        let bound = self.places.len().saturating_mul(2).saturating_add(8);
        let rebuild = match self.journal.owners() {
            Some(set) => set.len() > bound,
            None => true,
        };
        if rebuild {
            let mut exact = HashMap::new();
            for w in &self.places {
                count_up(&mut exact, &w.owner);
            }
            self.journal.set_owners(exact);
        }
    }

    /// The journal, for its own tests.
    #[cfg(test)]
    pub(super) fn journal(&self) -> &Journal {
        &self.journal
    }

    /// Entries the journal's bookkeeping holds (see `Lock::journal_entries`).
    pub(super) fn journal_entries(&self) -> usize {
        self.journal.entries()
    }

    /// Whether the queue changed since the last commit.
    pub(super) fn dirty(&self) -> bool {
        self.journal.dirty()
    }

    /// Whether the next commit can send a delta rather than the whole state.
    pub(super) fn delta_ok(&self) -> bool {
        !self.journal.rewrite()
    }

    /// The ranges holding every id of the queue, when known.
    pub(super) fn id_ranges(&self) -> Option<&IdRanges> {
        self.journal.id_ranges()
    }

    /// The journal, for the codec: queue length at the last commit, the
    /// edits of its places, and the places made since (at the back).
    pub(super) fn journal_parts(
        &self,
    ) -> (
        usize,
        &[Edit],
        std::collections::vec_deque::Iter<'_, Waiter>,
    ) {
        let from = self.places.len().saturating_sub(self.journal.appended());
        (
            self.journal.base(),
            self.journal.edits(),
            self.places.range(from..),
        )
    }

    /// A replica applies a checked delta to the queue of the last commit:
    /// the places at the positions of `replaced` become theirs, those at
    /// `gone` (ascending) leave, `appended` go at the back. `ids`: the id
    /// ranges of the queue before the delta when the check found them.
    /// Cannot fail. The queue is then a replica's copy: whoever commits it
    /// next (after a promotion) sends the whole state.
    pub(super) fn apply(
        &mut self,
        replaced: HashMap<usize, Waiter>,
        gone: Vec<usize>,
        appended: Vec<Waiter>,
        ids: Option<IdRanges>,
    ) {
        // The id ranges of the queue before the delta (found by the check
        // when not known), widened by every id the delta brings in.
        let mut ids = ids.or_else(|| self.journal.take_ids()).unwrap_or_default();
        for (p, w) in replaced {
            ids.add(w.id);
            if !w.blocked {
                self.note_due(w.expires_at);
            }
            if let Some(slot) = self.places.get_mut(p) {
                self.journal.note_owner(&w.owner);
                *slot = w;
            }
        }
        let prefix = gone.iter().enumerate().all(|(i, &p)| i == p);
        if prefix {
            for _ in 0..gone.len() {
                self.places.pop_front();
            }
        } else if gone.len() <= 4 {
            for &p in gone.iter().rev() {
                self.places.remove(p);
            }
        } else {
            let mut next = gone.iter().peekable();
            let mut pos = 0usize;
            self.places.retain(|_| {
                let drop = next.peek().is_some_and(|&&p| p == pos);
                if drop {
                    next.next();
                }
                pos = pos.saturating_add(1);
                !drop
            });
        }
        if self.places.is_empty() {
            // Every place before the delta left: only its own ids remain.
            ids = IdRanges::default();
        }
        for w in appended {
            if !w.blocked {
                self.note_due(w.expires_at);
            }
            self.journal.note_owner(&w.owner);
            ids.add(w.id);
            self.places.push_back(w);
        }
        if self.places.is_empty() {
            // Nothing to know about a queue that is not there: a lock
            // without one carries no box (as on the master).
            self.journal.drop_extra();
        } else {
            self.journal.set_ids(ids);
            self.owners_trim();
        }
        if self.due() == 0 {
            // Unknown (a lock loaded from a payload): one look now, exact
            // from here on.
            self.recompute_due();
        }
        self.journal.set_rewrite();
    }
}
