//! Granting: the one grant attempt of acquire commands, handoffs and
//! ready callbacks ([`attempt`]), a place for a connection about to wait
//! ([`enqueue`]), the one set of steps after a grant ([`granted`]: counted,
//! and the new hold's `LOCKDELAY` and `BIND`), and the server-side handoff
//! ([`hand_over`]), which `commit` runs: the state machine names the
//! waiter(s) the lock can serve now (`Lock::next_handoff`), each is granted
//! with the request kept in its registry entry (`waiters`), the answer is
//! recorded there, and the handles to unblock are collected for after the
//! commit.

use super::waiters::{self, Acquire, Answer, HandOver, Want};
use super::{bound, observe};
use crate::ffi::{self, Ctx};
use crate::stats;
use crate::storage::tokens;
use dlock_core::{Grant, Kind, Lock, LockError, Request};
use std::rc::Rc;

/// Hands `lock` (at `key` in the context's db) over, on the server side, to
/// the waiters it can serve now, in queue order: grants each with its own
/// request, records the reply in its entry, and collects its handle. Places
/// whose connection no longer waits here are dropped, never granted. Stops
/// at the first waiter the state machine denies. O(1) per waiter served.
pub fn hand_over(ctx: Ctx<'_>, key: &[u8], lock: &mut Lock) -> HandOver {
    let db = ctx.db();
    let mut out = HandOver::default();
    let (now, now_us) = ffi::now();
    while let Some(id) = lock.next_handoff() {
        let found = waiters::with(|m| {
            m.get(&id)
                .filter(|e| !e.gone && !e.done && e.w.db == db && *e.w.key == *key)
                .and_then(|e| Some((e.handle?, Rc::clone(&e.w))))
        })
        .flatten();
        let Some((handle, w)) = found else {
            // A gone connection, or a place carried here from elsewhere.
            lock.remove_waiter(id);
            out.changed = true;
            continue;
        };
        let Want::Grant(ask) = &w.want else {
            lock.remove_waiter(id);
            out.changed = true;
            continue;
        };
        let answer = match attempt(ask, Some(id), lock, now, now_us) {
            Ok(Grant::Granted { token, reentrant }) => {
                granted(ctx, (w.client, key), lock, ask, reentrant, true);
                Answer::Token(token)
            }
            Ok(Grant::Denied) => break,
            Err(e) => {
                lock.remove_waiter(id);
                Answer::Error(e)
            }
        };
        waiters::with(|m| {
            if let Some(e) = m.get_mut(&id) {
                e.answer = answer;
                e.done = true;
            }
        });
        out.changed = true;
        out.handles.push(handle);
    }
    out
}

/// Asks the state machine to grant `ask` now (made by the waiter `waiter`,
/// or by a command), issuing its token from the server-wide counter. The one
/// grant attempt of acquire commands, handoffs and ready callbacks.
pub fn attempt(
    ask: &Acquire,
    waiter: Option<u64>,
    lock: &mut Lock,
    now: u64,
    now_us: u64,
) -> Result<Grant, LockError> {
    let req = Request {
        owner: &ask.owner,
        mode: ask.mode,
        lease_ms: ask.lease,
        waiter,
    };
    let mut t = tokens::tokens();
    let outcome = if lock.kind() == Kind::Semaphore {
        lock.acquire_permits(&req, ask.permits, ask.limit, now, &mut t, now_us)
    } else {
        lock.acquire(&req, now, &mut t, now_us)
    };
    tokens::set(t);
    outcome
}

/// Puts the request of a connection about to wait on the server in the
/// queue (a semaphore place carries its permits), its wait starting now
/// unless it takes over a place that has a start. True when a place was
/// made.
pub fn enqueue(lock: &mut Lock, ask: &Acquire, id: u64, deadline: u64) -> bool {
    let made = if lock.kind() == Kind::Semaphore {
        lock.enqueue_permits(&ask.owner, ask.permits, id, deadline)
    } else {
        lock.enqueue(&ask.owner, ask.mode, id, true, deadline)
    };
    lock.stamp_wait(id, ffi::now().0);
    observe::wait_began(lock, id);
    made
}

/// The steps after `attempt` granted `ask` on `lock` (at `key` in the
/// context's db) to connection `client`, the one that asked, the same for
/// a command, a handoff and a ready callback: the grant is counted
/// (`handoff`: a waiting place was served), and a grant that created a
/// hold (not `reentrant`) gives it its `LOCKDELAY` and, with `BIND`, binds
/// it to `client` (whose bound key is recorded). Called before the change
/// is committed, so replicas get both.
pub fn granted(
    ctx: Ctx<'_>,
    (client, key): (u64, &[u8]),
    lock: &mut Lock,
    ask: &Acquire,
    reentrant: bool,
    handoff: bool,
) {
    count_grant(reentrant, handoff);
    if reentrant {
        return;
    }
    if ask.lock_delay > 0 {
        lock.set_lock_delay(&ask.owner, ask.mode, ask.lock_delay);
    }
    if ask.bind && lock.bind_hold(&ask.owner, ask.mode, client) {
        bound::note_bound(client, ctx.db(), key);
    }
}

/// A new, empty lock of `kind` (a semaphore of `limit` permits).
pub fn fresh(kind: Kind, limit: u64) -> Lock {
    match kind {
        Kind::Semaphore => Lock::semaphore(limit),
        other => Lock::new(other),
    }
}

/// Counts a grant.
fn count_grant(reentrant: bool, handoff: bool) {
    stats::add(&stats::counter::grants, 1);
    if reentrant {
        stats::add(&stats::counter::reentrant_grants, 1);
    }
    if handoff {
        stats::add(&stats::counter::handoffs, 1);
    }
}
