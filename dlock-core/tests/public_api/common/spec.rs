//! The grant rule as docs/commands.md states it, written independently of
//! `Lock::decide`: the one test copy of the rule (the fuzzers, the model
//! and the agreement check share it).

use dlock_core::*;

pub fn holds(l: &Lock, owner: &[u8], mode: Mode) -> bool {
    l.holders()
        .iter()
        .any(|h| &*h.owner == owner && h.mode == mode)
}

/// docs/commands.md's rule for a new hold (reentry is handled before): written from
/// the contract, independently of `Lock::grantable`. The one test copy of the
/// rule (the fuzzers and the model-based test share it).
pub fn spec_grantable(l: &Lock, req: &Request<'_>, pos: Option<usize>) -> bool {
    let ahead: Vec<&Waiter> = l
        .waiters()
        .iter()
        .take(pos.unwrap_or(l.waiters().len()))
        .collect();
    let foreign = |pred: &dyn Fn(&Holder) -> bool| {
        l.holders()
            .iter()
            .any(|h| &*h.owner != req.owner && pred(h))
    };
    let owner_holds = l.holders().iter().any(|h| &*h.owner == req.owner);
    match (l.kind(), req.mode) {
        // Free, and the request is the head of the queue (or there is none).
        (Kind::Mutex | Kind::Fair, Mode::Exclusive) => l.holders().is_empty() && ahead.is_empty(),
        // Reentry and downgrade at once; otherwise no foreign WRITE hold
        // and no writer waiting ahead (writer preference).
        (Kind::Rw, Mode::Read) => {
            owner_holds
                || (!foreign(&|h| h.mode == Mode::Write)
                    && !ahead.iter().any(|w| w.mode == Mode::Write))
        }
        // No foreign hold; the only reader upgrades ahead of the queue,
        // anyone else needs an empty queue ahead.
        (Kind::Rw, Mode::Write) => {
            !foreign(&|_| true) && (holds(l, req.owner, Mode::Read) || ahead.is_empty())
        }
        _ => false,
    }
}

/// docs/commands.md: granted when nobody waits ahead and the permits fit.
pub fn spec_grant(l: &Lock, pos: Option<usize>, k: u32) -> bool {
    let ahead = pos.unwrap_or(l.waiters().len());
    let held: u64 = l.holders().iter().map(|h| u64::from(h.count)).sum();
    ahead == 0 && held + u64::from(k) <= l.limit().unwrap_or(0)
}

#[derive(Debug)]
pub enum Expect {
    Fail(LockError),
    Reenter(usize),
    Grant,
    Deny,
}

/// What docs/commands.md gives `owner` asking for `mode`, with `pos` its place.
pub fn expected_acquire(lock: &Lock, owner: &[u8], mode: Mode, pos: Option<usize>) -> Expect {
    if !lock.kind().allows(mode) {
        return Expect::Fail(LockError::ModeNotApplicable);
    }
    let hs = lock.holders();
    let held = |o: &[u8], m: Mode| hs.iter().position(|h| *h.owner == *o && h.mode == m);
    if let Some(i) = held(owner, mode) {
        if hs[i].count == u32::MAX {
            return Expect::Fail(LockError::CountOverflow);
        }
        return Expect::Reenter(i);
    }
    // Mutex, fair and rw rules (semaphore and latch are not modelled here:
    // see semaphore.rs and latch.rs).
    let req = Request {
        owner,
        mode,
        lease_ms: 0,
        waiter: None,
    };
    let grant = spec_grantable(lock, &req, pos);
    if grant {
        return Expect::Grant;
    }
    let upgrading = |o: &[u8]| held(o, Mode::Read).is_some();
    if mode == Mode::Write
        && upgrading(owner)
        && lock
            .waiters()
            .iter()
            .any(|w| w.mode == Mode::Write && *w.owner != *owner && upgrading(&w.owner))
    {
        return Expect::Fail(LockError::UpgradeDeadlock);
    }
    Expect::Deny
}
