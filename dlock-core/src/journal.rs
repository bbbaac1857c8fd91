//! What changed in a lock's queue since the last commit, so that
//! replication can send the change instead of the whole queue (issue 16).
//!
//! Every edit of a lock's queue goes through `Queue` (queue.rs), which
//! journals it here: a place appended at the back, a place removed (by its
//! position, so the journal knows whether it was in the queue at the last
//! commit), a place changed in place (a fair waiter whose wait ended, a
//! queued owner waiting again). A place made since the last commit is sent
//! whole at the end of the delta, so its own changes and its removal need
//! no entry. Anything the journal cannot express (places put at the front,
//! a latch opening, a lock made or loaded) sets "rewrite all": the next
//! commit sends the whole state.
//!
//! The command layer commits after every change (`Lock::journal_reset`),
//! so a replica applying the delta has exactly the state of the last
//! commit; the delta names that state's queue length, and
//! `Lock::apply_delta` (codec.rs) refuses a delta whose base does not match.

use super::Waiter;
use std::collections::{HashMap, VecDeque};

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
    /// commit with a queue: `Queue::owners_trim`). Every place added
    /// counts once ([`Journal::note_owner`]); a place that leaves through
    /// `Queue::remove` or `Queue::retain` (a grant, a wait ended, a
    /// prune) counts down, and its owner leaves at 0, so the holder a
    /// handoff just served is not taken for a queued owner. Other ways out
    /// (a replica applying a delta) do not count down; the map starts again
    /// when a place is added to an empty queue, and is rebuilt from the
    /// queue at a commit that finds it over twice the queue's length
    /// (`Queue::owners_trim`). An owner not in a known map has no place, so
    /// a new owner's request skips the scans of the queue for its own
    /// place (queueing n connections costs O(n), not O(n²)), and a handoff
    /// whose new holder has no place is decided at the head alone.
    owners: Option<HashMap<Box<[u8]>, u32>>,
    /// Ranges holding every id of the queue (a superset), or unknown
    /// (None). Kept by a replica's `Lock::apply_delta` so that an
    /// appended place's id is checked against the queue in O(1), not by a
    /// scan; widened by every place added, forgotten by a rewrite.
    ids: Option<IdRanges>,
    /// The queue's due bound, kept here so that a lock without a queue
    /// carries no room for it (see `Queue::due`); None: what the queue
    /// implies.
    due: Option<u64>,
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
    pub(super) fn of(queue: &VecDeque<Waiter>) -> IdRanges {
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

    pub(super) fn rewrite(&self) -> bool {
        self.base_len == REWRITE
    }

    pub(super) fn base(&self) -> usize {
        self.base_len as usize
    }

    pub(super) fn edits(&self) -> &[Edit] {
        self.extra.as_ref().map_or(&[], |x| &x.edits)
    }

    fn extra_mut(&mut self) -> &mut Extra {
        self.extra.get_or_insert_with(Box::default)
    }

    pub(super) fn set_rewrite(&mut self) {
        self.base_len = REWRITE;
        self.appended = 0;
        if let Some(x) = &mut self.extra {
            x.edits = Vec::new();
        }
    }

    /// Whether the place at `pos` of a queue of `len` was made since the
    /// last commit (it is sent whole, so its changes need no entry).
    pub(super) fn is_new(&self, pos: usize, len: usize) -> bool {
        pos >= len.saturating_sub(self.appended())
    }

    pub(super) fn push(&mut self, e: Edit) {
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
    pub(super) fn removed(&mut self, pos: usize, len: usize, id: u64) {
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
    pub(super) fn forget_owner(&mut self, owner: &[u8]) {
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
    pub(super) fn note_id(&mut self, id: u64) {
        if let Some(r) = self.extra.as_mut().and_then(|x| x.ids.as_mut()) {
            r.add(id);
        }
    }

    /// The ranges holding every id of the queue, when known.
    pub(super) fn id_ranges(&self) -> Option<&IdRanges> {
        self.extra.as_ref().and_then(|x| x.ids.as_ref())
    }

    /// The queue is empty: no owner has a place; exact from here on.
    pub(super) fn owners_restart(&mut self) {
        self.extra_mut().owners = Some(HashMap::new());
    }

    /// False only when `owner` surely has no place.
    pub(super) fn may_have(&self, owner: &[u8]) -> bool {
        self.extra
            .as_ref()
            .and_then(|x| x.owners.as_ref())
            .is_none_or(|set| set.contains_key(owner))
    }
}

/// One more place of `owner` in a queued-owner count (the owner is copied
/// only when it is new to the map).
pub(super) fn count_up(set: &mut HashMap<Box<[u8]>, u32>, owner: &[u8]) {
    match set.get_mut(owner) {
        Some(n) => *n = n.saturating_add(1),
        None => {
            set.insert(owner.into(), 1);
        }
    }
}

impl Journal {
    pub(super) fn appended(&self) -> usize {
        self.appended as usize
    }

    /// One place was appended at the back.
    pub(super) fn appended_one(&mut self) {
        if !self.rewrite() {
            self.appended = self.appended.saturating_add(1);
        }
    }

    /// Keeps the places of `queue` that `keep` says to keep (in order),
    /// journaling those that leave.
    pub(super) fn retain(
        &mut self,
        queue: &mut VecDeque<Waiter>,
        mut keep: impl FnMut(&Waiter) -> bool,
    ) {
        let new_from = queue.len().saturating_sub(self.appended());
        let mut pos = 0usize;
        let mut new_gone = 0usize;
        queue.retain(|w| {
            let k = keep(w);
            if !k {
                self.forget_owner(&w.owner);
                if pos >= new_from {
                    new_gone = new_gone.saturating_add(1);
                } else {
                    self.push(Edit::Removed(w.id));
                }
            }
            pos = pos.saturating_add(1);
            k
        });
        let new_gone = u32::try_from(new_gone).unwrap_or(u32::MAX);
        self.appended = self.appended.saturating_sub(new_gone);
    }

    /// The queue's due bound, when set (see `Queue::due`).
    pub(super) fn due(&self) -> Option<u64> {
        self.extra.as_ref().and_then(|x| x.due)
    }

    /// Sets the queue's due bound.
    pub(super) fn set_due(&mut self, due: u64) {
        self.extra_mut().due = Some(due);
    }

    /// The known id ranges are forgotten (a rewrite).
    pub(super) fn forget_ids(&mut self) {
        if let Some(x) = &mut self.extra {
            x.ids = None;
        }
    }

    /// Takes the known id ranges out (a replica's delta widens them).
    pub(super) fn take_ids(&mut self) -> Option<IdRanges> {
        self.extra.as_mut().and_then(|x| x.ids.take())
    }

    /// The queue's id ranges are now `ids`.
    pub(super) fn set_ids(&mut self, ids: IdRanges) {
        self.extra_mut().ids = Some(ids);
    }

    /// The queue is empty: no bookkeeping box.
    pub(super) fn drop_extra(&mut self) {
        self.extra = None;
    }

    /// After a commit of a queue of `len` places: that is the base.
    pub(super) fn reset(&mut self, len: usize) {
        // A queue longer than u32 can count is always sent whole.
        self.base_len = u32::try_from(len).unwrap_or(REWRITE);
        self.appended = 0;
        if len == 0 {
            self.extra = None;
        } else if let Some(x) = &mut self.extra {
            x.edits.clear();
            if x.edits.capacity() > 64 {
                x.edits = Vec::new();
            }
        }
    }

    /// The queued-owner counts, when known.
    pub(super) fn owners(&self) -> Option<&HashMap<Box<[u8]>, u32>> {
        self.extra.as_ref().and_then(|x| x.owners.as_ref())
    }

    /// The queued-owner counts are now `exact`.
    pub(super) fn set_owners(&mut self, exact: HashMap<Box<[u8]>, u32>) {
        self.extra_mut().owners = Some(exact);
    }

    /// Entries held: the edits and the queued-owner set.
    pub(super) fn entries(&self) -> usize {
        self.extra.as_ref().map_or(0, |x| {
            x.edits.len() + x.owners.as_ref().map_or(0, |o| o.len())
        })
    }

    /// Whether anything changed since the last commit.
    pub(super) fn dirty(&self) -> bool {
        self.rewrite() || !self.edits().is_empty() || self.appended > 0
    }
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
                if let Some(w) = l.waiters().iter().find(|w| !l.queue.may_have(&w.owner)) {
                    panic!("{kind:?} step {step}: {w:?} has a place but may not queue");
                }
                // Every way out here counts down: a known map is exact, so
                // an owner whose last place left (a grant, an ended wait)
                // is not taken for a queued one.
                if let Some(set) = l.queue.journal().owners() {
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
                !l.queue.may_have(&owner),
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
        assert!(back.queue.may_have(b"stranger"), "unknown before a commit");
        back.journal_reset();
        assert!(
            !back.queue.may_have(b"stranger"),
            "known after the first commit"
        );
        assert!(!back.queue.may_have(b"holder"));
        for i in 0..8u64 {
            assert!(back.queue.may_have(format!("w{i}").as_bytes()));
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
        assert!(replica.queue.id_ranges().is_some());
    }
}
