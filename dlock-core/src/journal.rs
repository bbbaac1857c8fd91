//! What changed in a lock's queue since the last commit, so that
//! replication can send the change instead of the whole queue (issue 16).
//!
//! Every edit of [`Lock::waiters`] goes through the helpers here: a place
//! appended at the back, a place removed (by its position, so the journal
//! knows whether it was in the queue at the last commit), a place changed in
//! place (a fair waiter whose wait ended, a queued owner waiting again). A
//! place made since the last commit is sent whole at the end of the delta,
//! so its own changes and its removal need no entry. Anything the journal
//! cannot express (places put at the front, a latch opening, a lock made
//! or loaded) sets "rewrite all": the next commit sends the whole state.
//!
//! The command layer commits after every change ([`Lock::journal_reset`]),
//! so a replica applying the delta has exactly the state of the last
//! commit; the delta names that state's queue length, and
//! [`Lock::apply_delta`] refuses a delta whose base does not match.

use super::codec::DecodeError;
use super::{Holder, Kind, Lock, Waiter};
use std::collections::HashMap;

/// One change of a place that was in the queue at the last commit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Edit {
    /// The place with this id left the queue.
    Removed(u64),
    /// The place with this id is now this place (its id may change: a
    /// queued owner that waits on the server takes its place over).
    Replaced(u64, Waiter),
}

/// The queue's changes since the last commit. Bookkeeping only: equal to
/// every other journal, so two locks in the same state compare equal
/// whatever their history. 16 bytes in every lock: what only a queue needs
/// is boxed, and allocated only while the lock has a queue or edits.
#[derive(Clone, Debug)]
pub struct Journal {
    /// Queue length at the last commit; [`REWRITE`]: the journal cannot
    /// express what happened, send the whole state.
    base_len: u32,
    /// The last `appended` places were made since the last commit.
    appended: u32,
    extra: Option<Box<Extra>>,
}

/// `Journal::base_len` meaning "rewrite all".
const REWRITE: u32 = u32::MAX;

#[derive(Clone, Debug, Default)]
struct Extra {
    /// Changes of places that were in the queue at the last commit, in order.
    edits: Vec<Edit>,
    /// The owners that may have a place in the queue, each with a count
    /// never below its number of places: a superset of those that have one,
    /// or unknown (None: a lock loaded from a payload, until its first
    /// commit with a queue: `Lock::owners_trim`). Every place added
    /// counts once ([`Journal::note_owner`]); a place that leaves through
    /// [`Lock::q_remove`] or [`Lock::q_retain`] (a grant, a wait ended, a
    /// prune) counts down, and its owner leaves at 0, so the holder a
    /// handoff just served is not taken for a queued owner. Other ways out
    /// (a replica applying a delta) do not count down; the map starts again
    /// when a place is added to an empty queue, and is rebuilt from the
    /// queue at a commit that finds it over twice the queue's length
    /// (`Lock::owners_trim`). An owner not in a known map has no place, so
    /// a new owner's request skips the scans of the queue for its own
    /// place (queueing n connections costs O(n), not O(n²)), and a handoff
    /// whose new holder has no place is decided at the head alone.
    owners: Option<HashMap<Box<[u8]>, u32>>,
    /// Ranges holding every id of the queue (a superset), or unknown
    /// (None). Kept by a replica's [`Lock::apply_delta`] so that an
    /// appended place's id is checked against the queue in O(1), not by a
    /// scan; widened by every place added, forgotten by a rewrite.
    ids: Option<IdRanges>,
}

/// At most [`IdRanges::MAX`] disjoint ranges `(lo, hi)`, sorted, holding
/// every id of a queue. Ids come from a per-process counter (seeded at
/// random), so one master's places make one growing range; a failover
/// starts another.
#[derive(Clone, Debug, Default)]
pub(super) struct IdRanges(Vec<(u64, u64)>);

impl IdRanges {
    const MAX: usize = 4;
    /// A gap a range is not stretched over while another range fits: ids
    /// of another process (random seeds are ~2^61 apart).
    const GAP: u64 = 1 << 32;

    /// The ranges of the ids of `queue` (one scan).
    pub(super) fn of(queue: &std::collections::VecDeque<Waiter>) -> IdRanges {
        let mut r = IdRanges::default();
        for w in queue {
            r.add(w.id);
        }
        r
    }

    /// False only when no id of the queue is `id`.
    pub(super) fn may_hold(&self, id: u64) -> bool {
        self.0.iter().any(|&(lo, hi)| lo <= id && id <= hi)
    }

    /// Widens the ranges to hold `id`.
    pub(super) fn add(&mut self, id: u64) {
        if self.may_hold(id) {
            return;
        }
        let room = self.0.len() < Self::MAX;
        // The nearest range below `id` (no range lies between them).
        let below = self.0.iter().rposition(|&(_, hi)| hi < id);
        let at = below.map_or(0, |i| i.saturating_add(1));
        match below.and_then(|i| self.0.get_mut(i)) {
            Some(r) if !room || id.saturating_sub(r.1) <= Self::GAP => r.1 = id,
            _ if room => self.0.insert(at, (id, id)),
            _ => {
                // Below every range and no room: the lowest one stretches.
                if let Some(first) = self.0.first_mut() {
                    first.0 = id;
                }
            }
        }
    }
}

impl PartialEq for Journal {
    fn eq(&self, _other: &Journal) -> bool {
        true
    }
}

impl Eq for Journal {}

impl Journal {
    /// The journal of a lock that replicas do not have as it is (made,
    /// loaded, restored or replaced): the next commit sends everything.
    pub(super) fn rewrite_all() -> Journal {
        Journal {
            base_len: REWRITE,
            appended: 0,
            extra: None,
        }
    }

    /// The journal of a lock inflated from its compact form (an empty
    /// queue, no edit): clean, or "send everything" when `rewrite`.
    pub(super) fn compacted(rewrite: bool) -> Journal {
        if rewrite {
            return Journal::rewrite_all();
        }
        Journal {
            base_len: 0,
            appended: 0,
            extra: None,
        }
    }

    /// For a lock with an empty queue: `Some(rewrite)` when the journal is
    /// exactly what [`Journal::compacted`] makes (no edit, nothing
    /// appended; clean at an empty base, or "send everything"), else None.
    pub(super) fn compact_state(&self) -> Option<bool> {
        if self.appended != 0 || !self.edits().is_empty() {
            return None;
        }
        match self.base_len {
            REWRITE => Some(true),
            0 => Some(false),
            _ => None,
        }
    }

    fn rewrite(&self) -> bool {
        self.base_len == REWRITE
    }

    fn base(&self) -> usize {
        self.base_len as usize
    }

    fn appended(&self) -> usize {
        self.appended as usize
    }

    fn edits(&self) -> &[Edit] {
        self.extra.as_ref().map_or(&[], |x| &x.edits)
    }

    fn extra_mut(&mut self) -> &mut Extra {
        self.extra.get_or_insert_with(Box::default)
    }

    fn set_rewrite(&mut self) {
        self.base_len = REWRITE;
        self.appended = 0;
        if let Some(x) = &mut self.extra {
            x.edits = Vec::new();
        }
    }

    /// Whether the place at `pos` of a queue of `len` was made since the
    /// last commit (it is sent whole, so its changes need no entry).
    fn is_new(&self, pos: usize, len: usize) -> bool {
        pos >= len.saturating_sub(self.appended())
    }

    fn push(&mut self, e: Edit) {
        if self.rewrite() {
            return;
        }
        // Removals are bounded by the base; changes in place are not: past
        // this the whole state is as cheap.
        if self.edits().len() > self.base().saturating_add(16) {
            self.set_rewrite();
            return;
        }
        self.extra_mut().edits.push(e);
    }

    /// The place `id` at `pos` of a queue of `len` was removed.
    fn removed(&mut self, pos: usize, len: usize, id: u64) {
        if self.rewrite() {
            return;
        }
        if self.is_new(pos, len) {
            self.appended = self.appended.saturating_sub(1);
        } else {
            self.push(Edit::Removed(id));
        }
    }

    /// `owner` has (or may have) one more place now.
    pub(super) fn note_owner(&mut self, owner: &[u8]) {
        if let Some(set) = self.extra.as_mut().and_then(|x| x.owners.as_mut()) {
            count_up(set, owner);
        }
    }

    /// One place of `owner` left the queue: counted down, and the owner
    /// forgotten at 0 (then it surely has no place).
    fn forget_owner(&mut self, owner: &[u8]) {
        if let Some(set) = self.extra.as_mut().and_then(|x| x.owners.as_mut()) {
            if let Some(n) = set.get_mut(owner) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    set.remove(owner);
                }
            }
        }
    }

    /// Widens the known id ranges (if any) to hold `id`.
    fn note_id(&mut self, id: u64) {
        if let Some(r) = self.extra.as_mut().and_then(|x| x.ids.as_mut()) {
            r.add(id);
        }
    }

    /// The ranges holding every id of the queue, when known.
    pub(super) fn id_ranges(&self) -> Option<&IdRanges> {
        self.extra.as_ref().and_then(|x| x.ids.as_ref())
    }

    /// The queue is empty: no owner has a place; exact from here on.
    fn owners_restart(&mut self) {
        self.extra_mut().owners = Some(HashMap::new());
    }

    /// False only when `owner` surely has no place.
    fn may_have(&self, owner: &[u8]) -> bool {
        self.extra
            .as_ref()
            .and_then(|x| x.owners.as_ref())
            .is_none_or(|set| set.contains_key(owner))
    }
}

/// One more place of `owner` in a queued-owner count (the owner is copied
/// only when it is new to the map).
fn count_up(set: &mut HashMap<Box<[u8]>, u32>, owner: &[u8]) {
    match set.get_mut(owner) {
        Some(n) => *n = n.saturating_add(1),
        None => {
            set.insert(owner.into(), 1);
        }
    }
}

impl Lock {
    /// False only when `owner` surely has no place in the queue.
    pub(super) fn may_queue(&self, owner: &[u8]) -> bool {
        !self.waiters.is_empty() && self.journal.may_have(owner)
    }

    /// Removes the place at `pos`, journaled.
    pub(super) fn q_remove(&mut self, pos: usize) -> Option<Waiter> {
        let len = self.waiters.len();
        let w = self.waiters.remove(pos)?;
        self.journal.removed(pos, len, w.id);
        self.journal.forget_owner(&w.owner);
        Some(w)
    }

    /// Appends a place at the back, journaled.
    pub(super) fn q_push_back(&mut self, w: Waiter) {
        if self.waiters.is_empty() {
            self.journal.owners_restart();
        }
        self.journal.note_owner(&w.owner);
        self.journal.note_id(w.id);
        self.waiters.push_back(w);
        if !self.journal.rewrite() {
            self.journal.appended = self.journal.appended.saturating_add(1);
        }
    }

    /// Changes the place at `pos` in place with `f`, journaled. `f` keeps
    /// the place's owner (the queued-owner set is not told; the fuzzers'
    /// `check_lock` would catch a place whose owner it does not list).
    pub(super) fn q_edit(&mut self, pos: usize, f: impl FnOnce(&mut Waiter)) {
        let len = self.waiters.len();
        let Some(w) = self.waiters.get_mut(pos) else {
            return;
        };
        let old = w.id;
        f(w);
        self.journal.note_id(w.id);
        if !self.journal.rewrite() && !self.journal.is_new(pos, len) {
            let now = w.clone();
            self.journal.push(Edit::Replaced(old, now));
        }
    }

    /// Keeps the places `keep` says to keep (in order), journaled.
    pub(super) fn q_retain(&mut self, mut keep: impl FnMut(&Waiter) -> bool) {
        let new_from = self.waiters.len().saturating_sub(self.journal.appended());
        let journal = &mut self.journal;
        let mut pos = 0usize;
        let mut new_gone = 0usize;
        self.waiters.retain(|w| {
            let k = keep(w);
            if !k {
                journal.forget_owner(&w.owner);
                if pos >= new_from {
                    new_gone = new_gone.saturating_add(1);
                } else {
                    journal.push(Edit::Removed(w.id));
                }
            }
            pos = pos.saturating_add(1);
            k
        });
        let new_gone = u32::try_from(new_gone).unwrap_or(u32::MAX);
        journal.appended = journal.appended.saturating_sub(new_gone);
    }

    /// Something the journal cannot express changed the queue.
    pub(super) fn q_rewrite(&mut self) {
        self.journal.set_rewrite();
        if let Some(x) = &mut self.journal.extra {
            x.ids = None;
        }
    }

    /// After the change was replicated (the command layer's commit): the
    /// queue as it is now is what replicas have.
    pub fn journal_reset(&mut self) {
        // A queue longer than u32 can count is always sent whole.
        self.journal.base_len = u32::try_from(self.waiters.len()).unwrap_or(REWRITE);
        self.journal.appended = 0;
        if self.waiters.is_empty() {
            self.journal.extra = None;
        } else if let Some(x) = &mut self.journal.extra {
            x.edits.clear();
            if x.edits.capacity() > 64 {
                x.edits = Vec::new();
            }
        }
        self.owners_trim();
    }

    /// Keeps the queued-owner set within twice the queue (plus a little):
    /// places that leave other than by `q_remove`/`q_retain` (a replica's
    /// deltas) do not take their owner out, so on a lock that never goes
    /// idle (always held, always a waiter) the set could grow by every
    /// owner that ever queued. Past the bound it is rebuilt from the
    /// queue: O(queue) once per as many places gone, O(1) amortized.
    ///
    /// An unknown set (a lock loaded from a payload: RDB, AOF, a replica's
    /// full state) is built here too, at its first commit with a queue:
    /// otherwise it would stay unknown until the queue empties, which under
    /// steady contention is never, and every handoff would scan the queue.
    fn owners_trim(&mut self) {
        if self.waiters.is_empty() {
            return;
        }
        let bound = self.waiters.len().saturating_mul(2).saturating_add(8);
        let rebuild = match self.journal.extra.as_ref().and_then(|x| x.owners.as_ref()) {
            Some(set) => set.len() > bound,
            None => true,
        };
        if rebuild {
            let mut exact = HashMap::new();
            for w in &self.waiters {
                count_up(&mut exact, &w.owner);
            }
            self.journal.extra_mut().owners = Some(exact);
        }
    }

    /// Entries the journal's bookkeeping holds (the queued-owner set and
    /// the edits since the last commit): after a commit, bounded by the
    /// queue's length (the simulator's memory invariant, the tests').
    pub fn journal_entries(&self) -> usize {
        self.journal.extra.as_ref().map_or(0, |x| {
            x.edits.len() + x.owners.as_ref().map_or(0, |o| o.len())
        })
    }

    /// Whether the queue changed since the last commit.
    pub fn journal_dirty(&self) -> bool {
        self.journal.rewrite() || !self.journal.edits().is_empty() || self.journal.appended > 0
    }

    /// Whether the next commit can send a delta ([`super::codec`]'s
    /// `encode_delta`), rather than the whole state.
    pub fn delta_ok(&self) -> bool {
        !self.journal.rewrite()
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
        let from = self.waiters.len().saturating_sub(self.journal.appended());
        (
            self.journal.base(),
            self.journal.edits(),
            self.waiters.range(from..),
        )
    }

    /// Applies a decoded delta (see [`super::codec::decode_delta`]) to this
    /// lock, the state of the last commit: all or nothing. The codec
    /// validates it against this lock first ([`super::codec::check_delta`]);
    /// nothing changes when it is refused. O(1) per edit whatever the
    /// queue's length for what replication sends most: places appended
    /// (their ids checked against ranges holding the queue's ids, see
    /// [`IdRanges`]), places removed at the head or in queue order (found
    /// where the last one was). Otherwise an id lookup scans the queue, and
    /// past two scans one index of it is built: O(queue) once per delta,
    /// like removing a place in the middle of the queue itself.
    pub fn apply_delta(&mut self, mut d: Delta) -> Result<u64, DecodeError> {
        let super::codec::DeltaPlan {
            replaced,
            gone,
            ids,
        } = super::codec::check_delta(self, &mut d)?;
        // Apply: cannot fail from here. The id ranges of the queue before
        // the delta (found by the check when not known), widened by every
        // id the delta brings in.
        let mut ids = ids
            .or_else(|| self.journal.extra.as_mut().and_then(|x| x.ids.take()))
            .unwrap_or_default();
        for (p, w) in replaced {
            ids.add(w.id);
            if !w.blocked {
                self.note_place_due(w.expires_at);
            }
            if let Some(slot) = self.waiters.get_mut(p) {
                self.journal.note_owner(&w.owner);
                *slot = w;
            }
        }
        let prefix = gone.iter().enumerate().all(|(i, &p)| i == p);
        if prefix {
            for _ in 0..gone.len() {
                self.waiters.pop_front();
            }
        } else if gone.len() <= 4 {
            for &p in gone.iter().rev() {
                self.waiters.remove(p);
            }
        } else {
            let mut next = gone.iter().peekable();
            let mut pos = 0usize;
            self.waiters.retain(|_| {
                let drop = next.peek().is_some_and(|&&p| p == pos);
                if drop {
                    next.next();
                }
                pos = pos.saturating_add(1);
                !drop
            });
        }
        if self.waiters.is_empty() {
            // Every place before the delta left: only its own ids remain.
            ids = IdRanges::default();
        }
        for w in d.appended {
            if !w.blocked {
                self.note_place_due(w.expires_at);
            }
            self.journal.note_owner(&w.owner);
            ids.add(w.id);
            self.waiters.push_back(w);
        }
        if self.waiters.is_empty() {
            // Nothing to know about a queue that is not there: a lock
            // without one carries no box (as on the master).
            self.journal.extra = None;
        } else {
            self.journal.extra_mut().ids = Some(ids);
            self.owners_trim();
        }
        if self.places_due.get() == 0 {
            // Unknown (a lock loaded from a payload): one look now, exact
            // from here on.
            self.recompute_places_due();
        }
        self.holders = smallvec::SmallVec::from_vec(d.holders);
        self.last_token = d.last_token;
        self.size = d.size;
        // A replica's copy: whoever commits it next (after a promotion)
        // sends the whole state.
        self.journal.set_rewrite();
        Ok(d.floor)
    }
}

/// A decoded delta payload: the lock's whole state except its queue, and
/// the queue's edits since the state the replica has.
#[derive(Clone, Debug)]
pub struct Delta {
    pub(super) kind: Kind,
    pub(super) last_token: u64,
    pub(super) floor: u64,
    pub(super) size: u64,
    pub(super) holders: Vec<Holder>,
    pub(super) base_len: usize,
    pub(super) final_len: usize,
    pub(super) edits: Vec<Edit>,
    pub(super) appended: Vec<Waiter>,
}

/// The journal's own bookkeeping, which the public API does not show (the
/// integration tests in tests/public_api/ check everything else).
#[cfg(test)]
mod tests {
    use crate::codec;
    use crate::rng::Rng;
    use crate::{Grant, Kind, Lock, Mode, Request, Tokens};

    /// Grants `owner` an exclusive hold of `lease_ms` at time 0 (as the
    /// blocked waiter `waiter`, if any); the grant must be made.
    fn grant(l: &mut Lock, t: &mut Tokens, owner: &[u8], lease_ms: u64, waiter: Option<u64>) {
        let req = Request {
            owner,
            mode: Mode::Exclusive,
            lease_ms,
            waiter,
        };
        assert!(matches!(
            l.acquire(&req, 0, t, 0),
            Ok(Grant::Granted { .. })
        ));
    }

    /// Every owner with a place is in the queued-owner set (the set may
    /// only say "surely not" of owners without one), whatever sequence of
    /// queue edits and commits the lock went through. The fuzzers in
    /// tests/public_api/ drive the same operations through the public API.
    #[test]
    fn every_owner_with_a_place_may_queue() {
        const OWNERS: [&[u8]; 5] = [b"a", b"b", b"c", b"d", b"e"];
        let mut rng = Rng::new(0x0a11_0ee5);
        for kind in [Kind::Mutex, Kind::Rw, Kind::Fair] {
            let mut l = Lock::new(kind);
            let mut t = Tokens::default();
            let mut now = 1_000;
            let mut id = 0;
            for step in 0..20_000 {
                let owner = rng.pick(&OWNERS);
                let mode = match kind {
                    Kind::Rw if rng.one_in(2) => Mode::Read,
                    Kind::Rw => Mode::Write,
                    _ => Mode::Exclusive,
                };
                match rng.below(8) {
                    0 | 1 => {
                        id += 1;
                        let blocked = rng.one_in(2);
                        l.enqueue(owner, mode, id, blocked, now + rng.below(50));
                    }
                    2 => {
                        let waiter = l.waiters().front().map(|w| (w.id, w.blocked));
                        let req = Request {
                            owner,
                            mode,
                            lease_ms: rng.below(40),
                            waiter: waiter.filter(|w| w.1).map(|w| w.0),
                        };
                        if let Ok(Grant::Granted { .. }) = l.acquire(&req, now, &mut t, 0) {}
                    }
                    3 => {
                        let _ = l.release(owner, None);
                    }
                    4 => {
                        now += rng.below(30);
                        l.tick(now, |w| w % 3 != 0);
                    }
                    5 => {
                        if let Some(w) = l.waiters().get(rng.below(4) as usize).map(|w| w.id) {
                            if rng.one_in(2) {
                                l.wait_ended(w, now + 20);
                            } else {
                                l.remove_waiter(w);
                            }
                        }
                    }
                    6 => l.journal_reset(),
                    _ => {
                        if !l.is_empty() {
                            if let Ok((back, _)) = codec::decode(&codec::encode(&l, 0)) {
                                l = back;
                            }
                        }
                    }
                }
                if let Some(w) = l.waiters().iter().find(|w| !l.may_queue(&w.owner)) {
                    panic!("{kind:?} step {step}: {w:?} has a place but may not queue");
                }
                // Every way out here counts down: a known map is exact, so
                // an owner whose last place left (a grant, an ended wait)
                // is not taken for a queued one.
                if let Some(set) = l.journal.extra.as_ref().and_then(|x| x.owners.as_ref()) {
                    for o in OWNERS {
                        let places = l.waiters().iter().filter(|w| *w.owner == *o).count();
                        let counted = set.get(o).map_or(0, |n| *n as usize);
                        assert_eq!(
                            counted, places,
                            "{kind:?} step {step}: owner {o:?} counted {counted}, has {places} places"
                        );
                    }
                }
            }
        }
    }

    /// The waiter a handoff serves leaves the queue, and with its last place
    /// its owner leaves the queued-owner set: the next handoff decides at
    /// the head alone instead of taking the new holder for a queued owner
    /// and running the grant rule over the whole queue (what made every
    /// handoff O(queue): 72 µs per RELEASE at 4096 waiters, 7 µs at 16).
    #[test]
    fn a_served_waiter_is_no_queued_owner() {
        let mut l = Lock::new(Kind::Mutex);
        let mut t = Tokens::default();
        grant(&mut l, &mut t, b"holder", 1_000, None);
        let owners: Vec<Vec<u8>> = (0..64u64).map(|i| format!("w{i}").into_bytes()).collect();
        for (i, o) in owners.iter().enumerate() {
            assert!(l.enqueue(o, Mode::Exclusive, i as u64 + 1, true, 60_000));
        }
        l.journal_reset();
        let mut holder: Vec<u8> = b"holder".to_vec();
        for round in 0..200u64 {
            // The holder lets go and queues again at the back; the head is
            // served, as a handoff does.
            assert!(l.release(&holder, None).is_ok());
            assert!(l.enqueue(&holder, Mode::Exclusive, 1_000 + round, true, 60_000));
            let Some(id) = l.next_handoff() else {
                panic!("round {round}: nobody to hand over to");
            };
            let head = l.waiters().front().map(|w| (w.id, w.owner.to_vec()));
            let Some((head_id, owner)) = head else {
                panic!("round {round}: no head");
            };
            assert_eq!(id, head_id, "round {round}: the handoff names the head");
            grant(&mut l, &mut t, &owner, 1_000, Some(id));
            assert!(
                !l.may_queue(&owner),
                "round {round}: the served waiter {owner:?} is still taken for a queued owner"
            );
            l.journal_reset();
            holder = owner;
        }
    }

    /// A lock loaded from a payload with a queue does not know its queued
    /// owners; its first commit learns them, so handoffs under steady
    /// contention after a restart or a failover look at the head alone.
    #[test]
    fn a_loaded_queue_learns_its_owners_at_the_first_commit() {
        let mut l = Lock::new(Kind::Mutex);
        let mut t = Tokens::default();
        grant(&mut l, &mut t, b"holder", 60_000, None);
        for i in 0..8u64 {
            assert!(l.enqueue(
                format!("w{i}").as_bytes(),
                Mode::Exclusive,
                i + 1,
                true,
                60_000
            ));
        }
        let Ok((mut back, _)) = codec::decode(&codec::encode(&l, 0)) else {
            panic!("the payload decodes");
        };
        assert!(back.may_queue(b"stranger"), "unknown before a commit");
        back.journal_reset();
        assert!(!back.may_queue(b"stranger"), "known after the first commit");
        assert!(!back.may_queue(b"holder"));
        for i in 0..8u64 {
            assert!(back.may_queue(format!("w{i}").as_bytes()));
        }
    }

    /// A replica that applied deltas appending places knows the ranges of
    /// its queue's ids (what lets it refuse a duplicate id without a scan:
    /// tests/public_api/delta_replication.rs, `known_id_ranges_still_refuse_duplicates`).
    #[test]
    fn appended_deltas_leave_the_replica_knowing_its_id_ranges() {
        let mut master = Lock::new(Kind::Mutex);
        let mut t = Tokens::default();
        let holder = Request {
            owner: b"h",
            mode: Mode::Exclusive,
            lease_ms: 1_000,
            waiter: None,
        };
        assert!(matches!(
            master.acquire(&holder, 0, &mut t, 1),
            Ok(Grant::Granted { .. })
        ));
        let mut replica = codec::decode(&codec::encode(&master, 0)).map(|(l, _)| l);
        master.journal_reset();
        for (i, seed) in [1u64 << 50, 7, 1 << 61].into_iter().enumerate() {
            let owner = format!("m{i}");
            assert!(master.enqueue(owner.as_bytes(), Mode::Exclusive, seed, true, 9));
            assert!(master.delta_ok());
            let mut delta = Vec::new();
            codec::encode_delta_into(&master, 0, &mut delta);
            master.journal_reset();
            let applied = replica
                .as_mut()
                .map_err(|e| *e)
                .and_then(|r| codec::decode_delta(&delta).and_then(|d| r.apply_delta(d)));
            assert_eq!(applied, Ok(0));
        }
        let replica = replica.expect("the first payload decodes");
        assert_eq!(replica, master);
        assert!(replica.journal.id_ranges().is_some());
    }
}
