//! Checks the fuzzers run after every step: the structural invariants of a
//! lock, the agreement of every caller of the grant rule with
//! `Lock::decide`, and the compact form's round trip.

use super::spec::*;
use dlock_core::*;

/// Every structural invariant a lock must keep (also what decode must
/// refuse to break).
pub fn check_lock(l: &Lock) -> Result<(), String> {
    let kind = l.kind();
    // (That every owner with a place is in the journal's queued-owner set
    // is checked inside the crate: journal.rs, its unit tests.)
    for (i, h) in l.holders().iter().enumerate() {
        if h.count == 0 {
            return Err("a hold with count 0".into());
        }
        if !kind.allows(h.mode) {
            return Err(format!("a {:?} hold on a {kind:?} lock", h.mode));
        }
        if h.token == 0 || h.token > l.last_token() {
            return Err("a hold's token is 0 or above the lock's last token".into());
        }
        if h.owner.is_empty() || h.owner.len() > MAX_OWNER_LEN {
            return Err("an owner of bad length".into());
        }
        if l.holders()[i + 1..]
            .iter()
            .any(|o| o.owner == h.owner && o.mode == h.mode)
        {
            return Err("the same hold twice".into());
        }
    }
    match kind {
        Kind::Mutex | Kind::Fair => {
            if l.holders().len() > 1 {
                return Err(format!("{} holders of a {kind:?} lock", l.holders().len()));
            }
        }
        Kind::Rw => {
            if let Some(w) = l.holders().iter().find(|h| h.mode == Mode::Write) {
                if l.holders().iter().any(|h| h.owner != w.owner) {
                    return Err("a WRITE hold next to another owner's hold".into());
                }
            }
        }
        Kind::Semaphore | Kind::Latch => check_kind_rules(l)?,
    }
    for (i, w) in l.waiters().iter().enumerate() {
        if !kind.allows(w.mode) {
            return Err(format!("a {:?} waiter on a {kind:?} lock", w.mode));
        }
        if l.waiters().iter().skip(i + 1).any(|v| v.id == w.id) {
            return Err("two waiters with one id".into());
        }
    }
    if l.last_token() > MAX_TOKEN {
        return Err("token above 2^63-1".into());
    }
    // Whenever the lock has a compact form, it inflates back to the lock.
    compact_round_trip(l);
    Ok(())
}

/// The kind-specific rules [`check_lock`] applies to semaphores and
/// latches.
pub fn check_kind_rules(l: &Lock) -> Result<(), String> {
    match l.kind() {
        Kind::Semaphore => {
            let limit = l.limit().unwrap_or(0);
            if limit == 0 || limit > codec::MAX_SIZE {
                return Err(format!("semaphore limit {limit} out of range"));
            }
            if l.held_permits() > limit {
                return Err(format!(
                    "{} permits held under a limit of {limit}",
                    l.held_permits()
                ));
            }
            if let Some(w) = l
                .waiters()
                .iter()
                .find(|w| w.permits == 0 || u64::from(w.permits) > limit)
            {
                return Err(format!("a waiter asks for {} permits", w.permits));
            }
        }
        Kind::Latch => {
            if !l.holders().is_empty() {
                return Err("a latch with holders".into());
            }
            if l.waiters().iter().any(|w| !w.blocked || w.permits != 1) {
                return Err("a latch place that is not a waiting connection".into());
            }
            if l.latch_count() == Some(0) && !l.waiters().is_empty() {
                return Err("an open latch with waiters".into());
            }
        }
        _ => {}
    }
    Ok(())
}

/// What an attempt gave, compared with what decide said.
pub fn outcome_fits(
    d: Decision,
    out: Result<Grant, LockError>,
    changed: bool,
) -> Result<(), &'static str> {
    let ok = match (d, out) {
        (Decision::Grant, Ok(Grant::Granted { reentrant, .. })) => !reentrant,
        (Decision::Grant, Err(LockError::TokensExhausted)) => !changed,
        (Decision::Reenter, Ok(Grant::Granted { reentrant, .. })) => reentrant,
        (Decision::Deny, Ok(Grant::Denied)) => !changed,
        (Decision::Error(e), Err(g)) => e == g && !changed,
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err("the attempt's outcome is not decide's")
    }
}

/// One attempt on a copy of `l`, the way the command layer makes it:
/// semaphores through `acquire_permits` (under `limit`), other kinds
/// through `acquire`.
pub fn attempt(
    l: &Lock,
    tokens: &Tokens,
    owner: &[u8],
    mode: Mode,
    permits: u32,
    limit: Option<u64>,
    waiter: Option<u64>,
) -> (Result<Grant, LockError>, bool) {
    let mut c = l.clone();
    let mut t = *tokens;
    let req = Request {
        owner,
        mode,
        lease_ms: 7,
        waiter,
    };
    let now = 1;
    let out = match limit {
        Some(limit) => c.acquire_permits(&req, permits, limit, now, &mut t, 1000),
        None => c.acquire(&req, now, &mut t, 1000),
    };
    let changed = c != *l || t != *tokens;
    (out, changed)
}

/// The waiter the handoff rules pick, asked of decide (written from the
/// doc of `next_handoff`, independently of its code).
pub fn handoff_by_rule(l: &Lock) -> Option<u64> {
    if l.kind() == Kind::Latch {
        return None;
    }
    // The first blocked waiter, in queue order, that decide serves.
    l.waiters()
        .iter()
        .enumerate()
        .find(|(pos, w)| w.blocked && l.decide(&Ask::of(w), Some(*pos)).serves())
        .map(|(_, w)| w.id)
}

/// The model's answer as a decision.
pub fn from_model(e: Expect) -> Decision {
    match e {
        Expect::Fail(e) => Decision::Error(e),
        Expect::Reenter(_) => Decision::Reenter,
        Expect::Grant => Decision::Grant,
        Expect::Deny => Decision::Deny,
    }
}

/// Checks every caller of the rule against [`Lock::decide`] on `l`, and
/// decide against the specs. `tokens` is the server's counter.
pub fn check_agreement(l: &Lock, tokens: &Tokens) -> Result<(), String> {
    let kind = l.kind();
    let sem_limit = l.limit();
    let no_delay = l.holders().iter().all(Holder::is_live);
    // Every place, as its waiter asks.
    for (pos, w) in l.waiters().iter().enumerate() {
        let d = l.decide(&Ask::of(w), Some(pos));
        if l.surely_denied(w.id) != (d == Decision::Deny) {
            return Err(format!(
                "surely_denied({}) is {} but decide says {d:?}",
                w.id,
                l.surely_denied(w.id)
            ));
        }
        if l.decide_place(w.id) != Some(d) {
            return Err("decide_place differs from decide at the place".into());
        }
        let (out, changed) = attempt(
            l,
            tokens,
            &w.owner,
            w.mode,
            w.permits,
            sem_limit,
            Some(w.id),
        );
        outcome_fits(d, out, changed)
            .map_err(|e| format!("waiter {} at {pos}: {e}: decide {d:?}, got {out:?}", w.id))?;
        let blockers = l.blocked_by(pos);
        for max in [0, 1, 2, 17] {
            let first = l.blocked_by_first(pos, max);
            if first[..] != blockers[..blockers.len().min(max)] {
                return Err(format!(
                    "blocked_by_first({pos}, {max}) = {first:?}, blocked_by = {blockers:?}"
                ));
            }
        }
        if (d == Decision::Deny) == blockers.is_empty() {
            return Err(format!(
                "blocked_by({pos}) = {blockers:?} but decide says {d:?}"
            ));
        }
        for b in &blockers {
            let holds = l.holders().iter().any(|h| *h.owner == **b);
            let ahead = l.waiters().iter().take(pos).any(|o| *o.owner == **b);
            if !holds && !ahead {
                return Err(format!(
                    "blocked_by({pos}) names {b:?}, who neither holds nor waits ahead"
                ));
            }
        }
        if no_delay && kind != Kind::Latch {
            let spec = if kind == Kind::Semaphore {
                let fits = spec_grant(l, Some(pos), w.permits);
                let valid = w.permits >= 1 && sem_limit.is_some_and(|s| u64::from(w.permits) <= s);
                (
                    valid,
                    fits == matches!(
                        d,
                        Decision::Grant
                            | Decision::Reenter
                            | Decision::Error(LockError::CountOverflow)
                    ),
                )
            } else {
                (
                    true,
                    from_model(expected_acquire(l, &w.owner, w.mode, Some(pos))) == d,
                )
            };
            if spec.0 && !spec.1 {
                return Err(format!(
                    "decide says {d:?} for waiter {} at {pos}; the spec differs",
                    w.id
                ));
            }
        }
    }
    // New requests of every owner that holds or waits, and of a stranger,
    // in every mode of the kind and one it does not allow.
    let exclusive = l.exclusive_owner().map(<[u8]>::to_vec);
    let mut owners: Vec<&[u8]> = vec![b"stranger"];
    for o in l
        .holders()
        .iter()
        .map(|h| &*h.owner)
        .chain(l.waiters().iter().map(|w| &*w.owner))
    {
        if !owners.contains(&o) {
            owners.push(o);
        }
    }
    let modes: &[Mode] = match kind {
        Kind::Mutex | Kind::Fair => &[Mode::Exclusive, Mode::Read],
        Kind::Rw => &[Mode::Read, Mode::Write, Mode::Exclusive],
        Kind::Semaphore => &[Mode::Permit],
        Kind::Latch => &[Mode::Await],
    };
    for &owner in &owners {
        for &mode in modes {
            let req = Request {
                owner,
                mode,
                lease_ms: 7,
                waiter: None,
            };
            let place = l.place_of(&req);
            let ask = Ask::hold(owner, mode);
            let d = l.decide(&ask, place);
            let (out, changed) = attempt(l, tokens, owner, mode, 1, None, None);
            outcome_fits(d, out, changed).map_err(|e| {
                format!(
                    "new request {:?} {mode:?} at {place:?}: {e}: decide {d:?}, got {out:?}",
                    String::from_utf8_lossy(owner)
                )
            })?;
            if let Some(o) = &exclusive {
                if **o != *owner && kind.allows(mode) && d != Decision::Deny {
                    return Err(format!(
                        "exclusive_owner {o:?}, yet decide lets {owner:?} {mode:?}: {d:?}"
                    ));
                }
            }
            if no_delay && matches!(kind, Kind::Mutex | Kind::Rw | Kind::Fair) {
                // The model's place of a new request: the owner's place in
                // that mode (when the owner has places in other modes only,
                // which place counts is unsettled: see model.rs).
                let other_mode = l
                    .waiters()
                    .iter()
                    .any(|w| *w.owner == *owner && w.mode != mode);
                let model = from_model(expected_acquire(l, owner, mode, place));
                if !other_mode && model != d {
                    return Err(format!(
                        "decide says {d:?} for {:?} {mode:?} at {place:?}; the model says {model:?}",
                        String::from_utf8_lossy(owner)
                    ));
                }
            }
        }
        // SEMACQUIRE: a few permits under the limit in force, and a wrong
        // limit.
        if let Some(limit) = sem_limit {
            for (k, named) in [(0, limit), (1, limit), (2, limit), (1, limit + 1)] {
                let d = l.decide(&Ask::permits(owner, k, named), None);
                let (out, changed) = attempt(l, tokens, owner, Mode::Permit, k, Some(named), None);
                outcome_fits(d, out, changed).map_err(|e| {
                    format!("SEMACQUIRE {owner:?} {k}/{named}: {e}: decide {d:?}, got {out:?}")
                })?;
            }
        }
    }
    // A semaphore request on another kind.
    if kind != Kind::Semaphore {
        let d = l.decide(&Ask::permits(b"a", 1, 1), None);
        if d != Decision::Error(LockError::WrongKind { found: kind }) {
            return Err(format!("SEMACQUIRE on a {kind:?} lock: {d:?}"));
        }
    }
    let want = handoff_by_rule(l);
    if l.next_handoff() != want {
        return Err(format!(
            "next_handoff is {:?}, the handoff rule with decide names {want:?}",
            l.next_handoff()
        ));
    }
    let head_serves = kind == Kind::Semaphore
        && l.waiters()
            .front()
            .is_some_and(|w| l.decide(&Ask::of(w), Some(0)).serves());
    if l.head_may_be_granted() != head_serves {
        return Err("head_may_be_granted disagrees with decide".into());
    }
    Ok(())
}

pub use dlock_core::checks::compact_round_trip;
