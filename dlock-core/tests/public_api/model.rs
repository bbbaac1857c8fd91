//! Model-based tests (long pseudo-random operation sequences against a
//! reference) and the regressions they found.

use crate::common::*;
use dlock_core::*;
use std::collections::VecDeque;

// ---------------------------------------------------------------------------
// Model-based test
// ---------------------------------------------------------------------------

/// How open a set of holds is (0 exclusive, 1 several readers, 2 one reader,
/// 3 free): the lock becomes grantable to someone new when this rises.
fn openness_ref(holders: &[Holder]) -> u8 {
    if holders.is_empty() {
        return 3;
    }
    if holders.iter().any(|h| h.mode != Mode::Read) {
        return 0;
    }
    if holders.iter().all(|h| h.owner == holders[0].owner) {
        2
    } else {
        1
    }
}

/// The modes of mutex, rw and fair locks, in the codec's order.
const MODES: [Mode; 3] = [Mode::Exclusive, Mode::Read, Mode::Write];

/// The reference state: what the lock must be after each step.
#[derive(Clone, Debug, PartialEq)]
struct Want {
    kind: Kind,
    last_token: u64,
    holders: Vec<Holder>,
    waiters: VecDeque<Waiter>,
}

impl Want {
    fn of(l: &Lock) -> Want {
        Want {
            kind: l.kind(),
            last_token: l.last_token(),
            holders: l.holders().to_vec(),
            waiters: l.waiters().clone(),
        }
    }
}

#[derive(Debug, Default)]
struct Stats {
    granted: usize,
    reentered: usize,
    denied: usize,
    mode_change: usize,
    deadlock: usize,
    not_applicable: usize,
    enqueued: usize,
    took_over: usize,
    ended: usize,
    released: usize,
    gone: usize,
    freed: usize,
    not_held: usize,
    mode_required: usize,
    renewed: usize,
    expired: usize,
    dropped: usize,
    forced: usize,
    removed: usize,
    deleted: usize,
    round_trips: usize,
}

/// Runs `steps` pseudo-random operations on one lock of `kind`, checking the
/// full state after each against a reference and the invariants.
fn model(kind: Kind, seed: u64, steps: usize) -> Stats {
    const OWNERS: [&[u8]; 4] = [b"a", b"b", b"c", b"d"];
    let mut rng = Rng::new(seed);
    let mut lock = Lock::new(kind);
    let mut tokens = Tokens::default();
    let mut now: u64 = 1_000_000;
    let mut next_id: u64 = 1;
    let mut last_new_token = 0;
    let mut st = Stats::default();
    let modes: &[Mode] = if kind == Kind::Rw { &[R, W] } else { &[X] };
    for step in 0..steps {
        let before = lock.clone();
        let tokens_before = tokens;
        let roll = rng.below(100);
        let what: String;
        let mut want = Want::of(&before);
        if roll < 40 {
            // ---- acquire, then maybe enqueue ----
            let owner = OWNERS[rng.below(4) as usize];
            let mode = if rng.chance(3) {
                MODES[rng.below(3) as usize]
            } else {
                modes[rng.below(modes.len() as u64) as usize]
            };
            let own: Vec<u64> = lock
                .waiters()
                .iter()
                .filter(|w| *w.owner == *owner)
                .map(|w| w.id)
                .collect();
            let waiter = if !own.is_empty() && rng.chance(70) {
                Some(own[rng.below(own.len() as u64) as usize])
            } else if rng.chance(5) {
                Some(1 << 40 | rng.below(8))
            } else {
                None
            };
            if waiter.is_none()
                && lock
                    .waiters()
                    .iter()
                    .any(|w| *w.owner == *owner && w.mode != mode)
            {
                // Which place such a request has is unsettled (see the
                // ignored BUG tests below); the model stays out of it.
                continue;
            }
            let pos = match waiter {
                Some(id) => lock.waiters().iter().position(|w| w.id == id),
                None => lock.waiters().iter().position(|w| *w.owner == *owner),
            };
            let lease = 1 + rng.below(300);
            let now_us = if rng.chance(50) {
                now * 1000
            } else {
                rng.below(now * 1000)
            };
            let expect = expected_acquire(&lock, owner, mode, pos);
            let req = Request {
                owner,
                mode,
                lease_ms: lease,
                waiter,
            };
            let got = lock.acquire(&req, now, &mut tokens, now_us);
            what = format!("acquire {req:?} at {now} -> {got:?}, expected {expect:?}");
            match (&expect, got) {
                (Expect::Fail(e), Err(g)) if *e == g => {
                    match g {
                        LockError::UpgradeDeadlock => st.deadlock += 1,
                        _ => st.not_applicable += 1,
                    }
                    assert_eq!(tokens, tokens_before, "step {step}: {what}");
                }
                (Expect::Deny, Ok(Grant::Denied)) => {
                    st.denied += 1;
                    assert_eq!(tokens, tokens_before, "step {step}: {what}");
                    assert_eq!(Want::of(&lock), want, "step {step}: {what}");
                    let has_place = waiter.is_some_and(|id| lock.has_waiter(id));
                    if !has_place && lock.waiters().len() < 8 && rng.chance(80) {
                        let blocked = kind != Kind::Fair || rng.chance(50);
                        let at = now + 1 + rng.below(if blocked { 3000 } else { 400 });
                        let id = next_id;
                        next_id += 1;
                        let made = lock.enqueue(owner, mode, id, blocked, at);
                        let new = Waiter {
                            id,
                            owner: owner.into(),
                            mode,
                            blocked,
                            expires_at: at,
                            permits: 1,
                            since: 0,
                        };
                        let queued = want
                            .waiters
                            .iter()
                            .position(|w| !w.blocked && w.mode == mode && *w.owner == *owner);
                        let want_made = if let Some(p) = queued {
                            want.waiters[p] = new;
                            st.took_over += 1;
                            false
                        } else if !blocked && want.waiters.iter().any(|w| *w.owner == *owner) {
                            false
                        } else {
                            want.waiters.push_back(new);
                            st.enqueued += 1;
                            true
                        };
                        assert_eq!(made, want_made, "step {step}: enqueue after {what}");
                    }
                }
                (Expect::Reenter(i), Ok(Grant::Granted { token, reentrant })) => {
                    st.reentered += 1;
                    assert!(reentrant, "step {step}: {what}");
                    let h = &mut want.holders[*i];
                    assert_eq!(token, h.token, "step {step}: {what}");
                    h.count += 1;
                    h.expires_at = now.saturating_add(lease);
                    // The request's own place, or its owner's queued one; a
                    // place where another connection waits on the server stays.
                    if let Some(p) = pos.filter(|&p| waiter.is_some() || !want.waiters[p].blocked) {
                        want.waiters.remove(p);
                    }
                    assert_eq!(tokens, tokens_before, "step {step}: {what}");
                }
                (Expect::Grant, Ok(Grant::Granted { token, reentrant })) => {
                    st.granted += 1;
                    assert!(!reentrant, "step {step}: {what}");
                    assert!(token > last_new_token, "step {step}: {what}");
                    assert!(token > before.last_token(), "step {step}: {what}");
                    assert!(token >= now_us, "step {step}: {what}");
                    assert_eq!(tokens.last, token, "step {step}: {what}");
                    last_new_token = token;
                    if before.holders().iter().any(|h| *h.owner == *owner) {
                        st.mode_change += 1;
                    }
                    want.last_token = token;
                    want.holders.push(Holder {
                        owner: owner.into(),
                        mode,
                        count: 1,
                        expires_at: now.saturating_add(lease),
                        token,
                        bound: 0,
                        delay_ms: 0,
                        delayed: Delayed::No,
                        granted_at: now,
                    });
                    // The request's own place, or its owner's queued one; a
                    // place where another connection waits on the server stays.
                    if let Some(p) = pos.filter(|&p| waiter.is_some() || !want.waiters[p].blocked) {
                        want.waiters.remove(p);
                    }
                }
                _ => panic!("step {step}: {what}"),
            }
        } else if roll < 47 {
            // ---- wait_ended ----
            let id = match lock.waiters().len() {
                n if n > 0 && rng.chance(85) => lock.waiters()[rng.below(n as u64) as usize].id,
                _ => 1 << 41,
            };
            let deadline = now + 1 + rng.below(400);
            let got = lock.wait_ended(id, deadline);
            what = format!("wait_ended({id}, {deadline}) -> {got}");
            let p = want.waiters.iter().position(|w| w.id == id);
            assert_eq!(got, p.is_some(), "step {step}: {what}");
            if let Some(p) = p {
                st.ended += 1;
                // A fair owner keeps its place as a queued one, unless it
                // already has a queued place (an owner is queued once).
                let w = &want.waiters[p];
                let queued_elsewhere = want
                    .waiters
                    .iter()
                    .any(|o| !o.blocked && o.id != id && o.mode == w.mode && o.owner == w.owner);
                if kind == Kind::Fair && !queued_elsewhere {
                    want.waiters[p].blocked = false;
                    want.waiters[p].expires_at = deadline;
                } else {
                    want.waiters.remove(p);
                }
            }
        } else if roll < 67 {
            // ---- release ----
            let owner = OWNERS[rng.below(4) as usize];
            let mode = match rng.below(100) {
                0..=39 => None,
                40..=94 => Some(modes[rng.below(modes.len() as u64) as usize]),
                _ => Some(MODES[rng.below(3) as usize]),
            };
            let got = lock.release(owner, mode);
            what = format!("release({owner:?}, {mode:?}) -> {got:?}");
            let mine: Vec<usize> = (0..want.holders.len())
                .filter(|&i| *want.holders[i].owner == *owner)
                .filter(|&i| mode.is_none_or(|m| want.holders[i].mode == m))
                .collect();
            let expect = match (mode, mine.as_slice()) {
                (Some(m), _) if !kind.allows(m) => Err(LockError::ModeNotApplicable),
                (_, []) => Err(LockError::NotHeld),
                (_, [i]) => {
                    let i = *i;
                    want.holders[i].count -= 1;
                    let gone = want.holders[i].count == 0;
                    if gone {
                        want.holders.remove(i);
                    }
                    let freed =
                        gone && openness_ref(&want.holders) > openness_ref(before.holders());
                    Ok(Released { gone, freed })
                }
                _ => Err(LockError::ModeRequired),
            };
            assert_eq!(got, expect, "step {step}: {what}");
            match got {
                Ok(r) => {
                    st.released += 1;
                    st.gone += usize::from(r.gone);
                    st.freed += usize::from(r.freed);
                }
                Err(LockError::NotHeld) => st.not_held += 1,
                Err(LockError::ModeRequired) => st.mode_required += 1,
                Err(_) => {}
            }
        } else if roll < 74 {
            // ---- renew ----
            let owner = OWNERS[rng.below(4) as usize];
            let lease = 1 + rng.below(300);
            let got = lock.renew(owner, lease, now);
            what = format!("renew({owner:?}, {lease}) at {now} -> {got}");
            let mut any = false;
            for h in want.holders.iter_mut().filter(|h| *h.owner == *owner) {
                h.expires_at = now + lease;
                any = true;
            }
            assert_eq!(got, any, "step {step}: {what}");
            st.renewed += usize::from(got);
        } else if roll < 92 {
            // ---- time passes, tick ----
            now += rng.below(120);
            let dead: Vec<u64> = lock
                .waiters()
                .iter()
                .filter(|w| w.blocked)
                .map(|w| w.id)
                .filter(|_| rng.chance(15))
                .collect();
            let got = lock.tick(now, |id| !dead.contains(&id));
            what = format!("tick({now}, dead {dead:?}) -> {got:?}");
            want.holders.retain(|h| h.expires_at > now);
            want.waiters.retain(|w| {
                if w.blocked {
                    !dead.contains(&w.id)
                } else {
                    w.expires_at > now
                }
            });
            let expired = before.holders().len() - want.holders.len();
            let expect = Tick {
                expired,
                dropped: before.waiters().len() - want.waiters.len(),
                freed: expired > 0 && openness_ref(&want.holders) > openness_ref(before.holders()),
                ..Tick::default()
            };
            assert_eq!(got, expect, "step {step}: {what}");
            st.expired += got.expired;
            st.dropped += got.dropped;
            st.freed += usize::from(got.freed);
        } else if roll < 94 {
            // ---- force release ----
            let got = lock.force_release();
            what = format!("force_release() -> {got}");
            assert_eq!(got, !want.holders.is_empty(), "step {step}: {what}");
            want.holders.clear();
            st.forced += usize::from(got);
        } else {
            // ---- a waiting connection goes away ----
            let id = match lock.waiters().len() {
                n if n > 0 && rng.chance(85) => lock.waiters()[rng.below(n as u64) as usize].id,
                _ => 1 << 42,
            };
            let got = lock.remove_waiter(id);
            what = format!("remove_waiter({id}) -> {got}");
            let n = want.waiters.len();
            want.waiters.retain(|w| w.id != id);
            assert_eq!(got, n != want.waiters.len(), "step {step}: {what}");
            st.removed += usize::from(got);
        }

        // The whole state is what the reference says; refusals change nothing.
        assert_eq!(
            Want::of(&lock),
            want,
            "step {step}: {what}\nbefore: {before:?}"
        );
        if let Err(e) = invariants(&lock) {
            panic!("step {step}: {what}: {e}\nbefore: {before:?}\nafter: {lock:?}");
        }
        assert!(lock.last_token() <= tokens.last, "step {step}: {what}");
        if lock.is_empty() {
            assert_eq!(lock.next_deadline(), None);
            // An empty lock's key is deleted; tokens must keep increasing.
            if rng.chance(50) {
                lock = Lock::new(kind);
                st.deleted += 1;
            }
        } else if step % 4 == 0 {
            let bytes = encode(&lock, tokens.last);
            assert_eq!(
                decode(&bytes),
                Ok((lock.clone(), tokens.last)),
                "step {step}: round trip"
            );
            st.round_trips += 1;
        }
    }
    st
}

#[test]
fn model_mutex() {
    let st = model(Kind::Mutex, 1, 20_000);
    assert!(
        st.granted > 500 && st.reentered > 200 && st.denied > 500,
        "{st:?}"
    );
    assert!(
        st.enqueued > 200 && st.ended > 50 && st.removed > 50,
        "{st:?}"
    );
    assert!(
        st.gone > 150 && st.not_held > 200 && st.freed > 300,
        "{st:?}"
    );
    assert!(
        st.expired > 100 && st.dropped > 50 && st.renewed > 100,
        "{st:?}"
    );
    assert!(
        st.not_applicable > 10 && st.forced > 10 && st.deleted > 10,
        "{st:?}"
    );
}

#[test]
fn model_fair() {
    let st = model(Kind::Fair, 2, 20_000);
    assert!(
        st.granted > 500 && st.reentered > 200 && st.denied > 500,
        "{st:?}"
    );
    assert!(
        st.enqueued > 200 && st.took_over > 20 && st.ended > 50,
        "{st:?}"
    );
    assert!(
        st.gone > 150 && st.not_held > 200 && st.freed > 300,
        "{st:?}"
    );
    assert!(
        st.expired > 100 && st.dropped > 50 && st.renewed > 100,
        "{st:?}"
    );
    assert!(
        st.not_applicable > 10 && st.forced > 10 && st.deleted > 10,
        "{st:?}"
    );
}

#[test]
fn model_rw() {
    let st = model(Kind::Rw, 3, 20_000);
    assert!(
        st.granted > 500 && st.reentered > 200 && st.denied > 500,
        "{st:?}"
    );
    assert!(
        st.mode_change > 50 && st.deadlock > 5 && st.mode_required > 20,
        "{st:?}"
    );
    assert!(
        st.enqueued > 200 && st.ended > 50 && st.removed > 50,
        "{st:?}"
    );
    assert!(
        st.gone > 150 && st.not_held > 200 && st.freed > 300,
        "{st:?}"
    );
    assert!(
        st.expired > 100 && st.dropped > 50 && st.renewed > 100,
        "{st:?}"
    );
    assert!(
        st.not_applicable > 10 && st.forced > 10 && st.deleted > 10,
        "{st:?}"
    );
}

#[test]
fn model_more_seeds() {
    for seed in 10..16 {
        for kind in [Kind::Mutex, Kind::Rw, Kind::Fair] {
            model(kind, seed, 3000);
        }
    }
}

// ---------------------------------------------------------------------------
// Regressions: bugs found by these tests, fixed in Lock::position
// ---------------------------------------------------------------------------

/// A request without a waiter id is matched to its owner's first place in
/// the queue whatever that place's mode, and a grant removes that place.
/// Here reader `a` waits (blocked, id 1) to upgrade; a READ reentry by `a`
/// from another connection removes the upgrade place, so when reader `b`
/// then asks WRITE it is not refused: both readers wait to upgrade and wait
/// for each other until their waits time out (SPEC: "when two readers both
/// wait to upgrade, the second request fails at once with an error").
#[test]

fn bug_reentrant_read_removes_the_upgrade_place() {
    let mut lock = Lock::new(Kind::Rw);
    let mut tokens = Tokens::default();
    for op in [
        Op::Acq("a", R, None, 1000, 100),
        Op::Acq("b", R, None, 1000, 100),
    ] {
        apply(&mut lock, &mut tokens, op);
    }
    assert_eq!(
        apply(&mut lock, &mut tokens, Op::Acq("a", W, Some(1), 1000, 100)),
        DENIED
    );
    assert_eq!(
        apply(&mut lock, &mut tokens, Op::Enq("a", W, 1, true, 9000)),
        Out::Enq(true)
    );
    assert_eq!(
        apply(&mut lock, &mut tokens, Op::Acq("a", R, None, 1000, 100)),
        reentered(1)
    );
    let still_waits = lock.has_waiter(1);
    assert_eq!(
        apply(&mut lock, &mut tokens, Op::Acq("b", W, None, 1000, 100)),
        acq_err(LockError::UpgradeDeadlock),
        "second upgrader must be refused"
    );
    assert!(
        still_waits,
        "a's upgrade place was consumed by an unrelated READ"
    );
}

/// Same root cause, without reentry: `a` waits (blocked, id 1) for WRITE
/// behind reader `c`. A READ request of `a` from another connection is
/// treated as if it stood at `a`'s WRITE place: it is granted and takes that
/// place away. The connection still waiting for WRITE no longer holds back
/// new readers, so a stream of readers can starve it (SPEC: "A stream of new
/// readers must not starve a waiting writer").
#[test]

fn bug_read_request_uses_the_write_place() {
    let mut lock = Lock::new(Kind::Rw);
    let mut tokens = Tokens::default();
    apply(&mut lock, &mut tokens, Op::Acq("c", R, None, 1000, 100));
    assert_eq!(
        apply(&mut lock, &mut tokens, Op::Acq("a", W, Some(1), 1000, 100)),
        DENIED
    );
    apply(&mut lock, &mut tokens, Op::Enq("a", W, 1, true, 9000));
    // A newcomer READ while a writer waits: denied by writer preference.
    let got = apply(&mut lock, &mut tokens, Op::Acq("a", R, None, 1000, 100));
    let still_waits = lock.has_waiter(1);
    let newcomer = apply(&mut lock, &mut tokens, Op::Acq("b", R, None, 1000, 100));
    assert!(
        still_waits,
        "a's WRITE place was removed by its READ grant ({got:?})"
    );
    assert_eq!(got, DENIED, "a READ newcomer passed a waiting writer");
    assert_eq!(newcomer, DENIED, "new readers pass the waiting writer");
}
