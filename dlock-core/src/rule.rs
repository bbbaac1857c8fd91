//! The one grant rule: may this request be granted now?
//!
//! [`Lock::decide`] answers it for every kind — mutex, rw (readers, writer
//! preference, upgrade, downgrade, the upgrade deadlock), fair, semaphore
//! (strict FIFO, permits that fit, the limit) — from the state alone: pure,
//! `&self`, no clock (call [`Lock::tick`] first so ended leases do not
//! count). Everything that asks the question asks it here: the grant itself
//! ([`Lock::acquire`], [`Lock::acquire_permits`] apply the decision), the
//! handoff ([`Lock::next_handoff`]), the command layer's shortcuts
//! ([`Lock::surely_denied`], [`Lock::head_may_be_granted`]) and
//! [`Lock::blocked_by`].

use super::{Holder, Kind, Lock, LockError, Mode, Request, Waiter};
use std::collections::HashSet;

/// What a request asks for, as [`Lock::decide`] sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ask<'a> {
    pub owner: &'a [u8],
    /// The mode asked for (a semaphore ignores it: its holds are permits).
    pub mode: Mode,
    /// Permits asked for on a semaphore; other kinds take one hold.
    pub permits: u32,
    /// `Some(limit)`: a semaphore request naming its limit (`SEMACQUIRE`),
    /// refused on any other kind. `None`: a lock request (`ACQUIRE`,
    /// `RWACQUIRE`, `FAIRACQUIRE`), which on a semaphore asks for `permits`
    /// under the limit in force.
    pub limit: Option<u64>,
}

impl<'a> Ask<'a> {
    /// One hold of `owner` in `mode` ([`Lock::acquire`]).
    pub fn hold(owner: &'a [u8], mode: Mode) -> Ask<'a> {
        Ask {
            owner,
            mode,
            permits: 1,
            limit: None,
        }
    }

    /// `permits` permits of a semaphore of `limit` ([`Lock::acquire_permits`]).
    pub fn permits(owner: &'a [u8], permits: u32, limit: u64) -> Ask<'a> {
        Ask {
            owner,
            mode: Mode::Permit,
            permits,
            limit: Some(limit),
        }
    }

    /// The request a place in the queue stands for (its owner, mode and
    /// permits, under the limit in force).
    pub fn of(w: &'a Waiter) -> Ask<'a> {
        Ask {
            owner: &w.owner,
            mode: w.mode,
            permits: w.permits,
            limit: None,
        }
    }
}

/// The answer of [`Lock::decide`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// A new hold is granted now (it takes a new token).
    Grant,
    /// The owner's live hold is entered again now: one more count (a
    /// semaphore: `permits` more), its lease restarted, its token kept.
    Reenter,
    /// Not now: the request waits (nothing changes).
    Deny,
    /// Refused with this error (nothing changes).
    Error(LockError),
}

impl Decision {
    /// Whether an attempt with this request is answered now (granted or
    /// refused): what the handoff serves.
    pub fn serves(self) -> bool {
        self != Decision::Deny
    }
}

impl Lock {
    /// May `ask`, with `place` its position in the queue (`None`: it has no
    /// place, so everybody waiting is ahead of it), be granted now? The one
    /// rule of docs/commands.md, for every kind:
    ///
    /// - a latch is never acquired (`WrongKind`); a semaphore request
    ///   (`ask.limit` set) on another kind is `WrongKind` too;
    /// - mutex, fair: a live hold of the owner is re-entered (unless its
    ///   count would overflow), whatever the queue; otherwise granted when
    ///   nobody holds and nobody waits ahead;
    /// - rw: re-entry as above; READ when nobody else holds WRITE and no
    ///   writer waits ahead (writer preference), or at once when the owner
    ///   holds already (downgrade); WRITE when nobody else holds, and
    ///   either the owner is the only reader (upgrade, ahead of the queue)
    ///   or nobody waits ahead; a reader asking to upgrade while another
    ///   reader waits to upgrade is `UpgradeDeadlock`;
    /// - semaphore: the limit named must be the one in force and the
    ///   permits within it (else an error); then strict FIFO — granted (or
    ///   the owner's hold raised) only at the head (or with an empty queue)
    ///   and when the permits fit;
    /// - every kind: an owner whose hold (in that mode) is in its
    ///   lock-delay waits for the delay to end; delayed holds exclude as
    ///   they did.
    ///
    /// Pure: no clock, no change. Tokens are not looked at (issuing one may
    /// still fail with `TokensExhausted` when a [`Decision::Grant`] is
    /// applied).
    pub fn decide(&self, ask: &Ask<'_>, place: Option<usize>) -> Decision {
        match self.kind {
            Kind::Latch => return Decision::Error(LockError::WrongKind { found: Kind::Latch }),
            Kind::Semaphore => return self.decide_permits(ask, place),
            Kind::Mutex | Kind::Rw | Kind::Fair => {}
        }
        if ask.limit.is_some() {
            return Decision::Error(LockError::WrongKind { found: self.kind });
        }
        if !self.kind.allows(ask.mode) {
            return Decision::Error(LockError::ModeNotApplicable);
        }
        if let Some(h) = self.live_hold(ask.owner, ask.mode) {
            if h.count == u32::MAX {
                return Decision::Error(LockError::CountOverflow);
            }
            return Decision::Reenter;
        }
        if self.grantable(ask, place) {
            return Decision::Grant;
        }
        if self.upgrade_conflict(ask) {
            return Decision::Error(LockError::UpgradeDeadlock);
        }
        Decision::Deny
    }

    /// [`Lock::decide`] for a semaphore.
    fn decide_permits(&self, ask: &Ask<'_>, place: Option<usize>) -> Decision {
        if ask.limit.is_some_and(|limit| limit != self.size) {
            return Decision::Error(LockError::LimitMismatch { limit: self.size });
        }
        if ask.permits == 0 || u64::from(ask.permits) > self.size {
            return Decision::Error(LockError::PermitsOverLimit { limit: self.size });
        }
        let ahead = place.unwrap_or(self.queue.len());
        // An owner whose hold is in its lock-delay waits for it to end.
        let delayed_mine = self
            .holders
            .iter()
            .any(|h| !h.is_live() && *h.owner == *ask.owner);
        if ahead != 0 || delayed_mine || !self.sem_fits(ask.permits) {
            return Decision::Deny;
        }
        match self.live_hold(ask.owner, Mode::Permit) {
            Some(h) if h.count.checked_add(ask.permits).is_none() => {
                Decision::Error(LockError::CountOverflow)
            }
            Some(_) => Decision::Reenter,
            None => Decision::Grant,
        }
    }

    /// [`Lock::decide`] for the place of the waiter `id` (`None`: it has
    /// none): what an attempt by that waiter with the request its place
    /// stands for would give now.
    pub fn decide_place(&self, id: u64) -> Option<Decision> {
        let (pos, w) = self.queue.iter().enumerate().find(|(_, w)| w.id == id)?;
        Some(self.decide(&Ask::of(w), Some(pos)))
    }

    /// Who must let go, or be served, before the waiter at `place` can be:
    /// [`Lock::blocked_by_ask`] for the request that place stands for.
    /// Empty when there is no such place.
    pub fn blocked_by(&self, place: usize) -> Vec<&[u8]> {
        match self.queue.get(place) {
            Some(w) => self.blocked_by_ask(&Ask::of(w), Some(place)),
            None => Vec::new(),
        }
    }

    /// The owners that must let go of a hold, or be served first, before
    /// `ask` at `place` can be granted; each once, holders first. Empty
    /// exactly when [`Lock::decide`] does not deny it (granted, or an
    /// error). An owner may name itself: its hold in its lock-delay.
    ///
    /// - mutex, fair: every holder, and every owner waiting ahead;
    /// - rw READ: the WRITE holders, the owner's own READ hold in its
    ///   lock-delay, and the writers waiting ahead (writer preference);
    /// - rw WRITE: every other holder and every hold in its lock-delay,
    ///   and, unless the owner holds (an upgrade goes ahead of the
    ///   queue), every owner waiting ahead;
    /// - semaphore: every owner waiting ahead (strict FIFO), the owner's
    ///   own hold in its lock-delay, and, when the permits do not fit,
    ///   every holder.
    pub fn blocked_by_ask(&self, ask: &Ask<'_>, place: Option<usize>) -> Vec<&[u8]> {
        self.blocked_by_ask_first(ask, place, usize::MAX)
    }

    /// The first `max` owners of [`Lock::blocked_by`]: a look at the
    /// holders and at as many places ahead as it takes (one new waiter of
    /// a long queue costs O(`max`), not O(queue)).
    pub fn blocked_by_first(&self, place: usize, max: usize) -> Vec<&[u8]> {
        match self.queue.get(place) {
            Some(w) => self.blocked_by_ask_first(&Ask::of(w), Some(place), max),
            None => Vec::new(),
        }
    }

    /// [`Lock::blocked_by_ask`], at most `max` owners.
    fn blocked_by_ask_first(&self, ask: &Ask<'_>, place: Option<usize>, max: usize) -> Vec<&[u8]> {
        let mut out: Vec<&[u8]> = Vec::new();
        if max == 0 || self.decide(ask, place) != Decision::Deny {
            return out;
        }
        let ahead = self.queue.iter().take(place.unwrap_or(self.queue.len()));
        let own_delayed = |h: &Holder, mode: Option<Mode>| {
            !h.is_live() && *h.owner == *ask.owner && mode.is_none_or(|m| h.mode == m)
        };
        let holders: Vec<&[u8]> = match (self.kind, ask.mode) {
            (Kind::Mutex | Kind::Fair, _) => self.holders.iter().map(|h| &*h.owner).collect(),
            (Kind::Rw, Mode::Read) => self
                .holders
                .iter()
                .filter(|h| h.mode == Mode::Write || own_delayed(h, Some(Mode::Read)))
                .map(|h| &*h.owner)
                .collect(),
            (Kind::Rw, _) => self
                .holders
                .iter()
                .filter(|h| !h.is_live() || *h.owner != *ask.owner)
                .map(|h| &*h.owner)
                .collect(),
            (Kind::Semaphore, _) => {
                let fits = self.sem_fits(ask.permits);
                self.holders
                    .iter()
                    .filter(|h| !fits || own_delayed(h, None))
                    .map(|h| &*h.owner)
                    .collect()
            }
            (Kind::Latch, _) => Vec::new(),
        };
        // Which places ahead count (taken lazily: see `max`).
        let (writers_only, none) = match (self.kind, ask.mode) {
            (Kind::Rw, Mode::Read) => (true, false),
            (Kind::Rw, _) => (false, self.holds_any(ask.owner)),
            _ => (false, false),
        };
        let waiting = ahead
            .take_while(|_| !none)
            .filter(|w| !writers_only || w.mode == Mode::Write)
            .map(|w| &*w.owner);
        // Each owner once: a set past a few owners.
        let mut seen: Option<HashSet<&[u8]>> = None;
        for o in holders.into_iter().chain(waiting) {
            if out.len() >= max {
                break;
            }
            let new = match &mut seen {
                Some(set) => set.insert(o),
                None if out.len() < 16 => !out.contains(&o),
                None => {
                    let set = seen.insert(out.iter().copied().collect());
                    set.insert(o)
                }
            };
            if new {
                out.push(o);
            }
        }
        out
    }

    /// The place in the queue an attempt with `req` takes: by waiter id for
    /// a blocked waiter; otherwise (mutex, rw, fair) the owner's first
    /// place in the same mode (an owner's READ request must not take its
    /// own WRITE place). A semaphore request without a waiter id has no
    /// place: everybody waiting is ahead of it.
    pub fn place_of(&self, req: &Request<'_>) -> Option<usize> {
        match req.waiter {
            Some(id) => self.queue.iter().position(|w| w.id == id),
            None if self.kind == Kind::Semaphore || !self.queue.may_have(req.owner) => None,
            None => self
                .queue
                .iter()
                .position(|w| *w.owner == *req.owner && w.mode == req.mode),
        }
    }

    /// Whether the request can be granted now as a new hold (mutex, rw,
    /// fair; re-entry is decided before). `pos` is its place, if it has one.
    fn grantable(&self, ask: &Ask<'_>, pos: Option<usize>) -> bool {
        let ahead = pos.unwrap_or(self.queue.len());
        // An owner whose hold in this mode is in its lock-delay waits for the
        // delay to end (one hold per owner and mode).
        if self
            .holders
            .iter()
            .any(|h| !h.is_live() && h.mode == ask.mode && *h.owner == *ask.owner)
        {
            return false;
        }
        match (self.kind, ask.mode) {
            (Kind::Mutex | Kind::Fair, _) => self.holders.is_empty() && ahead == 0,
            (Kind::Rw, Mode::Read) => {
                // Downgrade: a WRITE holder may take READ at once.
                if self.holds_any(ask.owner) {
                    return true;
                }
                let write_held = self.holders.iter().any(|h| h.mode == Mode::Write);
                let writer_ahead = self.queue.iter().take(ahead).any(|w| w.mode == Mode::Write);
                !write_held && !writer_ahead
            }
            (Kind::Rw, _) => {
                // A delayed hold excludes its own owner too.
                if self
                    .holders
                    .iter()
                    .any(|h| !h.is_live() || *h.owner != *ask.owner)
                {
                    return false;
                }
                // Upgrade by the only reader goes ahead of the queue: it
                // cannot wait behind writers that wait for its own READ.
                self.holds_any(ask.owner) || ahead == 0
            }
            // Semaphores are decided by `decide_permits`; latches never.
            (Kind::Semaphore | Kind::Latch, _) => false,
        }
    }

    /// Another owner that holds READ already waits to upgrade to WRITE.
    fn upgrade_conflict(&self, ask: &Ask<'_>) -> bool {
        self.kind == Kind::Rw
            && ask.mode == Mode::Write
            && self.live_hold(ask.owner, Mode::Read).is_some()
            && self.live_hold(ask.owner, Mode::Write).is_none()
            && self.queue.iter().any(|w| {
                w.mode == Mode::Write
                    && *w.owner != *ask.owner
                    && self.live_hold(&w.owner, Mode::Read).is_some()
            })
    }
}
