//! The semaphore kind of [`Lock`]: a limit of permits fixed at creation,
//! holds per owner whose count is their permits (with a lease and the token
//! of the owner's first grant), and one strict FIFO queue: a request is
//! granted only when nobody waits ahead of it and its permits fit, so a
//! request for many permits at the head is never starved by later requests
//! for fewer.

use super::{Ask, Grant, Kind, Lock, LockError, Mode, Released, Request, Tokens};

impl Lock {
    /// A new, empty semaphore of `limit` permits.
    pub fn semaphore(limit: u64) -> Lock {
        let mut l = Lock::new(Kind::Semaphore);
        l.size = limit;
        l
    }

    /// The limit of a semaphore (`None` for other kinds).
    pub fn limit(&self) -> Option<u64> {
        (self.kind == Kind::Semaphore).then_some(self.size)
    }

    /// Permits held by all owners of a semaphore.
    pub fn held_permits(&self) -> u64 {
        self.holders.iter().map(|h| u64::from(h.count)).sum()
    }

    /// Permits of a semaphore nobody holds.
    pub fn available(&self) -> u64 {
        self.size.saturating_sub(self.held_permits())
    }

    /// Whether `k` more permits fit under the limit.
    pub(super) fn sem_fits(&self, k: u32) -> bool {
        self.held_permits().saturating_add(u64::from(k)) <= self.size
    }

    /// Fails unless this is a semaphore of `limit` permits.
    pub fn check_limit(&self, limit: u64) -> Result<(), LockError> {
        self.check_kind(Kind::Semaphore)?;
        if self.size != limit {
            return Err(LockError::LimitMismatch { limit: self.size });
        }
        Ok(())
    }

    /// Tries to grant `permits` permits to `req.owner` on a semaphore of
    /// `limit`. Granted when nobody waits ahead of the request (a request
    /// without a place has everybody ahead) and the permits fit. An owner
    /// that holds already gets its count raised by `permits`, its lease
    /// restarted and its token kept (`reentrant`). On [`Grant::Denied`] and
    /// on errors nothing changed. Call [`Lock::tick`] first.
    pub fn acquire_permits(
        &mut self,
        req: &Request<'_>,
        permits: u32,
        limit: u64,
        now: u64,
        tokens: &mut Tokens,
        now_us: u64,
    ) -> Result<Grant, LockError> {
        self.apply(
            req,
            &Ask::permits(req.owner, permits, limit),
            now,
            tokens,
            now_us,
        )
    }

    /// Puts a denied semaphore request of a connection waiting on the
    /// server at the back of the queue (through [`Lock::enqueue`], so it
    /// obeys the same rules). Returns true when a place was made.
    pub fn enqueue_permits(
        &mut self,
        owner: &[u8],
        permits: u32,
        id: u64,
        expires_at: u64,
    ) -> bool {
        let made = self.enqueue(owner, Mode::Permit, id, true, expires_at);
        if made {
            let last = self.queue.len().saturating_sub(1);
            if self.queue.back().is_some_and(|w| w.id == id) {
                self.queue.edit(last, |w| w.permits = permits);
            }
        }
        made
    }

    /// Gives `permits` of `owner`'s permits back. `gone` when it holds none
    /// afterwards; `freed` always (returned permits make room). Errors, with
    /// nothing changed: not a semaphore, the owner holds nothing, or fewer.
    pub fn release_permits(&mut self, owner: &[u8], permits: u32) -> Result<Released, LockError> {
        match self.kind {
            Kind::Semaphore => {}
            Kind::Latch => return Err(LockError::WrongKind { found: Kind::Latch }),
            _ => return Err(LockError::PermitsNotApplicable),
        }
        let i = self
            .holders
            .iter()
            .position(|h| h.is_live() && h.mode == Mode::Permit && &*h.owner == owner)
            .ok_or(LockError::NotHeld)?;
        let Some(h) = self.holders.get_mut(i) else {
            return Err(LockError::NotHeld);
        };
        if h.count < permits || permits == 0 {
            return Err(LockError::NotEnoughPermits { held: h.count });
        }
        h.count = h.count.saturating_sub(permits);
        let gone = h.count == 0;
        if gone {
            self.holders.remove(i);
        }
        Ok(Released { gone, freed: true })
    }
}

impl Lock {
    /// The kind's own number: a semaphore's limit, a latch's count, else 0.
    pub(crate) fn size(&self) -> u64 {
        self.size
    }

    /// Sets [`Lock::size`] (the codec, after validating it).
    pub(crate) fn with_size(mut self, size: u64) -> Lock {
        self.size = size;
        self
    }
}

impl Lock {
    /// Whether the head of a semaphore's queue may be served now (granted,
    /// or answered an error): after a grant that left permits, the next in
    /// line should look again. [`Lock::decide`] for the head's place.
    pub fn head_may_be_granted(&self) -> bool {
        self.kind == Kind::Semaphore
            && self
                .queue
                .front()
                .is_some_and(|w| self.decide(&Ask::of(w), Some(0)).serves())
    }
}
