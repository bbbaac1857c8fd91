//! The latch kind of [`Lock`]: a count set once (`LATCHSET`), lowered by
//! `COUNTDOWN`, and the connections waiting in `AWAIT` as blocked places of
//! mode [`Mode::Await`]. At 0 the latch opens: every place is answered and
//! the key is removed (the lock is then empty). A latch has no holders and
//! issues no tokens.

use super::{Kind, Lock, LockError, Mode};

/// What [`Lock::countdown`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Countdown {
    /// The count went down and is still above 0.
    Counted(u64),
    /// The count reached 0: the latch is open, and these waiters (ids of
    /// connections waiting in AWAIT, in queue order) are to be answered 1.
    Opened(Vec<u64>),
}

impl Lock {
    /// A new latch of `count` (at least 1).
    pub fn latch(count: u64) -> Lock {
        let mut l = Lock::new(Kind::Latch);
        l.size = count;
        l
    }

    /// The count of a latch (`None` for other kinds).
    pub fn latch_count(&self) -> Option<u64> {
        (self.kind == Kind::Latch).then_some(self.size)
    }

    /// Lowers the count by one; at 0 the latch opens (see [`Lock::open`]).
    pub fn countdown(&mut self) -> Result<Countdown, LockError> {
        self.check_kind(Kind::Latch)?;
        self.size = self.size.saturating_sub(1);
        if self.size > 0 {
            return Ok(Countdown::Counted(self.size));
        }
        Ok(Countdown::Opened(self.open()))
    }

    /// Opens a latch at once (FORCERELEASE, deletion): the count becomes 0,
    /// every place leaves the queue and their ids are returned in queue
    /// order, to be answered 1. Nothing happens on other kinds.
    pub fn open(&mut self) -> Vec<u64> {
        if self.kind != Kind::Latch {
            return Vec::new();
        }
        self.size = 0;
        self.queue.take_all()
    }

    /// Adds the connection `id` (named `conn` in INFO) waiting in AWAIT
    /// until `expires_at`, through [`Lock::enqueue`]. True when a place was
    /// made.
    pub fn enqueue_await(&mut self, conn: &[u8], id: u64, expires_at: u64) -> bool {
        self.kind == Kind::Latch && self.enqueue(conn, Mode::Await, id, true, expires_at)
    }
}
