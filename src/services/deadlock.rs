//! Deadlock detection across locks (docs/deadlocks.md): the wait-for graph
//! among owners blocked on the server on mutex, rw and fair locks.
//!
//! Owner A waits for owner B when B is in `Lock::waits_for` of a place where
//! A's connection waits (the `blocked_by` of DLOCK.INFO, without holds that
//! time alone ends). The search itself is `dlock_core::deadlock::find_cycle`;
//! this file gives it the graph:
//!
//! - [`note_wait`] / [`note_end`] keep an index from owner to the waiter ids
//!   of its connections blocked on mutex, rw and fair locks — memory per
//!   waiter, nothing per held lock. An owner absent from it waits nowhere,
//!   so it costs the search one lookup.
//! - [`check_wait`]: a request about to wait. When its wait would close a
//!   cycle, the request gets `DEADLOCK cycle: …` and nothing is queued.
//! - [`after_handoff`]: a lock changed hands. A holder that is itself
//!   blocked somewhere may now close a cycle through a waiter of this lock;
//!   that waiter is answered `DEADLOCK cycle: …` and its place removed (in
//!   the same commit, so replicas get the removal as the effect).
//!
//! The search examines at most `dlock.deadlock-max-depth` blocked owners
//! (past that the request waits as usual and `deadlock_checks_truncated`
//! counts it). The latest deadlock is kept for `INFO dlock`.

use super::state::{Map as HashMap, Set as HashSet};
use super::{observe, state, waiters};
use crate::ffi::{self, Ctx};
use crate::{config, error, stats, storage};
use dlock_core::deadlock::{find_cycle, Search};
use dlock_core::{Ask, Kind, Lock, Request};
use std::cell::RefCell;
use std::ffi::CString;
use std::rc::Rc;

/// A key in the graph: (db, key).
type Key = Rc<(i32, Box<[u8]>)>;
/// Edges out of one owner: (key it waits on, owner it waits for).
type Edges = Vec<(Key, Box<[u8]>)>;

/// Key -> the connections blocked on it: waiter id -> owner.
type KeyCounts = HashMap<Box<[u8]>, HashMap<u64, Box<[u8]>>>;

/// The latest deadlock, for `INFO dlock`.
struct Last {
    at_ms: u64,
    keys: Vec<Box<[u8]>>,
    owners: Vec<Box<[u8]>>,
}

thread_local! {
    /// Owner -> ids of its connections blocked on mutex, rw and fair locks.
    static INDEX: RefCell<HashMap<Box<[u8]>, Vec<u64>>> = RefCell::new(HashMap::default());
    /// The DEADLOCK reply of a waiter answered at a handoff, until sent.
    static REPLIES: RefCell<HashMap<u64, CString>> = RefCell::new(HashMap::default());
    static LAST: RefCell<Option<Last>> = const { RefCell::new(None) };
    /// db -> key -> connections blocked there (mutex, rw, fair), with their
    /// owners: which owners wait on other keys than the one asked for,
    /// without a look at every waiter of that one.
    static KEYS: RefCell<HashMap<i32, KeyCounts>> = RefCell::new(HashMap::default());
    /// Connections in KEYS.
    static BLOCKED: RefCell<usize> = const { RefCell::new(0) };
}

/// Whether locks of `kind` take part (semaphores and latches do not).
pub fn takes_part(kind: Kind) -> bool {
    matches!(kind, Kind::Mutex | Kind::Rw | Kind::Fair)
}

/// A connection began to wait as `id` for `owner` on a lock of `kind` at
/// (`db`, `key`).
pub fn note_wait(id: u64, owner: &[u8], kind: Kind, db: i32, key: &[u8]) {
    if !takes_part(kind) {
        return;
    }
    state::with(&INDEX, |m| match m.get_mut(owner) {
        Some(ids) => ids.push(id),
        None => {
            m.insert(Box::from(owner), vec![id]);
        }
    });
    state::with(&KEYS, |m| {
        let keys = m.entry(db).or_default();
        let ids = match keys.get_mut(key) {
            Some(ids) => ids,
            None => keys.entry(Box::from(key)).or_default(),
        };
        ids.insert(id, Box::from(owner));
    });
    state::with(&BLOCKED, |n| *n = n.saturating_add(1));
}

/// The connection waiting as `id` at (`db`, `key`) is done (answered, timed
/// out or gone).
pub fn note_end(id: u64, owner: &[u8], kind: Kind, db: i32, key: &[u8]) {
    if !takes_part(kind) {
        return;
    }
    state::with(&KEYS, |m| {
        if let Some(keys) = m.get_mut(&db) {
            if let Some(ids) = keys.get_mut(key) {
                if ids.remove(&id).is_some() {
                    state::with(&BLOCKED, |n| *n = n.saturating_sub(1));
                }
                if ids.is_empty() {
                    keys.remove(key);
                }
            }
            if keys.is_empty() {
                m.remove(&db);
            }
        }
    });
    state::with(&INDEX, |m| {
        if let Some(ids) = m.get_mut(owner) {
            ids.retain(|i| *i != id);
            if ids.is_empty() {
                m.remove(owner);
            }
        }
    });
    state::with(&REPLIES, |m| m.remove(&id));
}

/// Whether `owner` has a connection blocked on a mutex, rw or fair lock.
fn is_blocked(owner: &[u8]) -> bool {
    state::with(&INDEX, |m| m.contains_key(owner)).unwrap_or(false)
}

/// Whether `owner` has a connection that still waits: blocked, and not yet
/// answered. A holder a handoff just served is still in the index until its
/// connection's blocked client is freed, but it waits for nothing, so no
/// cycle passes through it (what spares every handoff a search).
fn waits_still(owner: &[u8]) -> bool {
    state::with(&INDEX, |m| {
        m.get(owner)
            .is_some_and(|ids| ids.iter().any(|id| waiters::waits(*id)))
    })
    .unwrap_or(true)
}

/// Whether no cycle can pass through a new wait on `lock` at (`db`, `key`)
/// by `owner`, known without reading every waiter of `lock`: the owner
/// neither holds nor waits here, and no owner that holds or waits here
/// (fair queued places aside) is blocked on another key. Then every owner
/// the wait leads to waits only here, and nobody here waits for `owner`.
/// Costs O(connections blocked on other keys); gives up (false) when that
/// is not below this lock's queue.
fn surely_no_cycle(lock: &Lock, owner: &[u8], db: i32, key: &[u8]) -> bool {
    let here_too = lock.holders().iter().any(|h| *h.owner == *owner)
        || is_blocked(owner)
        || (lock.kind() == Kind::Fair && lock.waiters().iter().any(|w| *w.owner == *owner));
    if here_too {
        return false;
    }
    let total = state::with(&BLOCKED, |n| *n).unwrap_or(usize::MAX);
    let others: Option<Vec<Box<[u8]>>> = state::with(&KEYS, |m| {
        let here = m.get(&db).and_then(|k| k.get(key)).map_or(0, HashMap::len);
        let n_others = total.saturating_sub(here);
        if n_others >= lock.waiters().len().saturating_add(lock.holders().len()) {
            return None;
        }
        let mut out = Vec::with_capacity(n_others);
        for (d, keys) in m.iter() {
            for (k, ids) in keys.iter() {
                if *d == db && **k == *key {
                    continue;
                }
                out.extend(ids.values().cloned());
            }
        }
        Some(out)
    })
    .flatten();
    let Some(others) = others else {
        return false;
    };
    // Fair locks keep queued places of owners that wait nowhere on the
    // server: only a look at the queue tells whether one is here.
    if lock.kind() == Kind::Fair && !others.is_empty() {
        return false;
    }
    others
        .iter()
        .all(|o| !lock.holders().iter().any(|h| *h.owner == **o) && !blocked_here(o, db, key))
}

/// Whether a connection of `owner` is blocked at (`db`, `key`).
fn blocked_here(owner: &[u8], db: i32, key: &[u8]) -> bool {
    state::with(&INDEX, |m| {
        m.get(owner)
            .is_some_and(|ids| ids.iter().any(|id| waiters::is_live_at(*id, db, key)))
    })
    .unwrap_or(true)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Blocked {
    Nowhere,
    OnlyHere,
    Elsewhere,
}

/// Where `owner`'s connections are blocked, seen from (`db`, `key`).
fn where_blocked(owner: &[u8], db: i32, key: &[u8]) -> Blocked {
    state::with(&INDEX, |m| match m.get(owner) {
        None => Blocked::Nowhere,
        Some(ids) if ids.iter().all(|id| waiters::is_live_at(*id, db, key)) => Blocked::OnlyHere,
        Some(_) => Blocked::Elsewhere,
    })
    .unwrap_or(Blocked::Elsewhere)
}

/// The DEADLOCK reply recorded for the waiter `id` (answered at a handoff).
pub fn take_reply(id: u64) -> CString {
    state::with(&REPLIES, |m| m.remove(&id))
        .flatten()
        .unwrap_or_else(|| CString::from(c"DEADLOCK cycle: (not recorded)"))
}

/// The lock the caller holds open (its guard), read in place of opening it
/// again.
struct Here<'a> {
    db: i32,
    key: &'a [u8],
    lock: &'a Lock,
}

/// One search: the graph's edges, read from the locks as needed.
struct Walk<'a> {
    ctx: Ctx<'a>,
    here: Here<'a>,
    now: u64,
    start: &'a [u8],
    /// Keys one of whose places already led to every other owner of the
    /// lock (and the start holds or waits nothing there): any other place
    /// there adds nothing new, so it is not read again (a long queue of one
    /// lock costs one read, not one per waiter).
    saturated: HashSet<(i32, Box<[u8]>)>,
}

impl Walk<'_> {
    /// Whom `owner` waits for, over every place where a connection of it is
    /// blocked; None when it waits nowhere (or nowhere that adds anything).
    fn edges(&mut self, owner: &[u8]) -> Option<Edges> {
        let ids = state::with(&INDEX, |m| m.get(owner).cloned()).flatten()?;
        let mut out: Option<Edges> = None;
        for id in ids {
            let Some((db, key)) = waiters::blocked_at(id) else {
                continue;
            };
            if self.saturated.contains(&(db, key.clone())) {
                continue;
            }
            let got = if db == self.here.db && *key == *self.here.key {
                let lock = self.here.lock;
                self.place_edges(lock, id, db, key, owner)
            } else {
                let ctx = self.ctx;
                storage::with_read(ctx, db, &key.clone(), |s| {
                    self.place_edges(&s.lock(), id, db, key, owner)
                })
                .flatten()
            };
            if let Some(e) = got {
                out.get_or_insert_with(Vec::new).extend(e);
            }
        }
        out
    }

    /// The edges of the blocked place `id` of `owner` in `lock` at `key`.
    fn place_edges(
        &mut self,
        lock: &Lock,
        id: u64,
        db: i32,
        key: Box<[u8]>,
        owner: &[u8],
    ) -> Option<Edges> {
        if !takes_part(lock.kind()) {
            return None;
        }
        let (pos, w) = lock
            .waiters()
            .iter()
            .enumerate()
            .find(|(_, w)| w.id == id)?;
        if !w.blocked {
            return None;
        }
        let to = lock.waits_for(&Ask::of(w), Some(pos), self.now);
        Some(self.label(lock, db, key, owner, to))
    }

    /// `to` as edges on `key`; notes the key as saturated when `to` covers
    /// every other owner of the lock.
    fn label(
        &mut self,
        lock: &Lock,
        db: i32,
        key: Box<[u8]>,
        owner: &[u8],
        to: Vec<&[u8]>,
    ) -> Edges {
        if to.len() >= 4 && covers(lock, &to, owner, self.start) {
            self.saturated.insert((db, key.clone()));
        }
        let k: Key = Rc::new((db, key));
        to.into_iter()
            .map(|o| (Rc::clone(&k), Box::from(o)))
            .collect()
    }
}

/// Whether `to` (owners `owner` waits for in `lock`, each once, never
/// `owner`) names every owner that holds or waits in `lock` but `owner`,
/// while `start` neither holds nor waits there.
fn covers(lock: &Lock, to: &[&[u8]], owner: &[u8], start: &[u8]) -> bool {
    let mut all: HashSet<&[u8]> = HashSet::default();
    for h in lock.holders() {
        all.insert(&h.owner);
    }
    for w in lock.waiters() {
        all.insert(&w.owner);
    }
    if all.contains(start) {
        return false;
    }
    all.remove(owner);
    all.len() == to.len()
}

/// The search's outcome, counted.
fn search(
    walk: &mut Walk<'_>,
    start: &[u8],
    first: Option<Edges>,
) -> Option<Vec<(Box<[u8]>, Key)>> {
    let start: Box<[u8]> = start.into();
    let mut first = first;
    let max = config::deadlock_max_depth();
    let found = find_cycle(&start, max, |o| {
        if *o == start {
            if let Some(f) = first.take() {
                return Some(f);
            }
        }
        walk.edges(o)
    });
    match found {
        Search::Cycle(c) => Some(c),
        Search::Truncated => {
            stats::add(&stats::counter::deadlock_checks_truncated, 1);
            None
        }
        Search::None => None,
    }
}

/// A request of `ask` (an owner about to wait on the server at `key` of the
/// context's db, on `lock`, which the caller holds open): `Err(reply)` when
/// its wait would close a cycle — the caller then queues nothing and
/// replies the error.
pub fn check_wait(
    ctx: Ctx<'_>,
    key: &[u8],
    lock: &Lock,
    ask: &waiters::Acquire,
) -> Result<(), CString> {
    if !config::deadlock_detect() || !takes_part(ask.kind) || !takes_part(lock.kind()) {
        return Ok(());
    }
    let db = ctx.db();
    // O(1) on one hot lock; O(connections blocked elsewhere) otherwise,
    // when that is less than this lock's queue.
    if surely_no_cycle(lock, &ask.owner, db, key) {
        return Ok(());
    }
    let (now, _) = ffi::now();
    let core = Ask::hold(&ask.owner, ask.mode);
    // The place the wait takes, as the grant attempt finds it: the owner's
    // queued place in that mode (a fair-lock owner that polled), else the
    // back of the queue.
    let place = lock.place_of(&Request {
        owner: &ask.owner,
        mode: ask.mode,
        lease_ms: ask.lease,
        waiter: None,
    });
    let to = lock.waits_for(&core, place, now);
    // Lookups only, no search, when no cycle can pass: none of the owners
    // waited for is blocked; or those that are wait only here, while the
    // requester neither holds nor has a place here (so nobody here waits
    // for it) — a long queue on one hot lock costs one lookup per waiter.
    let (mut here, mut elsewhere) = (false, false);
    for o in &to {
        match where_blocked(o, db, key) {
            Blocked::Nowhere => {}
            Blocked::OnlyHere => here = true,
            Blocked::Elsewhere => {
                elsewhere = true;
                break;
            }
        }
    }
    let mine_here = lock.holders().iter().any(|h| *h.owner == *ask.owner)
        || lock.waiters().iter().any(|w| *w.owner == *ask.owner);
    if !elsewhere && (!here || !mine_here) {
        return Ok(());
    }
    let mut walk = Walk {
        ctx,
        here: Here { db, key, lock },
        now,
        start: &ask.owner,
        saturated: HashSet::default(),
    };
    let first = walk.label(lock, db, key.into(), &ask.owner, to);
    match search(&mut walk, &ask.owner, Some(first)) {
        Some(cycle) => {
            // The request never waited: the slowlog gets its entry here (a
            // waiter answered at a handoff gets it when its wait ends).
            if let Some(((_, k), (next, _))) = cycle.first().zip(cycle.get(1).or(cycle.first())) {
                observe::log_deadlock(&k.1, ask.kind, &ask.owner, ask.mode, 0, &[&next[..]]);
            }
            Err(found(cycle, now))
        }
        None => Ok(()),
    }
}

/// After `lock` (at `key` of the context's db, held open by the caller)
/// changed hands — a handoff, a release, an expiry: every live holder that is blocked elsewhere
/// may now close a cycle through a waiter here. Each such waiter — the one
/// whose new `blocked_by` closed it — is answered DEADLOCK (through
/// `handed`) and its place removed. True when a place was removed (the
/// caller hands over again and replicates the effect).
pub fn after_handoff(
    ctx: Ctx<'_>,
    key: &[u8],
    lock: &mut Lock,
    handed: &mut waiters::HandOver,
) -> bool {
    if !config::deadlock_detect() || !takes_part(lock.kind()) || !lock.has_blocked() {
        return false;
    }
    let holders: Vec<Box<[u8]>> = lock
        .holders()
        .iter()
        .filter(|h| h.is_live() && waits_still(&h.owner))
        .map(|h| Box::from(&*h.owner))
        .collect();
    let db = ctx.db();
    let mut changed = false;
    for h in holders {
        // Each round answers one waiter; a few rounds cover every waiter a
        // handoff can close a cycle through in practice.
        for _ in 0..8 {
            let (now, _) = ffi::now();
            let cycle = {
                let mut walk = Walk {
                    ctx,
                    here: Here {
                        db,
                        key,
                        lock: &*lock,
                    },
                    now,
                    start: &h,
                    saturated: HashSet::default(),
                };
                search(&mut walk, &h, None)
            };
            let Some(mut cycle) = cycle else { break };
            // The cycle ends with the waiter here that waits for `h`.
            let Some((w, k)) = cycle.last().cloned() else {
                break;
            };
            if k.0 != db || *k.1 != *key {
                break;
            }
            let id = lock.waiters().iter().find_map(|p| {
                (p.blocked
                    && *p.owner == *w
                    && waiters::blocked_at(p.id).is_some_and(|(d, kk)| d == db && *kk == *key))
                .then_some(p.id)
            });
            let Some(id) = id else { break };
            cycle.rotate_right(1);
            let reply = found(cycle, now);
            if !waiters::answer_deadlock(handed, id) {
                break;
            }
            state::with(&REPLIES, |m| m.insert(id, reply));
            lock.remove_waiter(id);
            changed = true;
        }
    }
    changed
}

/// Counts and records a deadlock; its reply.
fn found(cycle: Vec<(Box<[u8]>, Key)>, now: u64) -> CString {
    stats::add(&stats::counter::deadlocks, 1);
    let reply = reply_text(&cycle);
    let last = Last {
        at_ms: now,
        keys: cycle.iter().map(|(_, k)| k.1.clone()).collect(),
        owners: cycle.iter().map(|(o, _)| o.clone()).collect(),
    };
    state::with(&LAST, |l| *l = Some(last));
    reply
}

/// `DEADLOCK cycle: "a" waits for "b" on "k1"; "b" waits for "a" on "k2"
/// (…)`: every owner and key quoted and escaped (see [`quote`]).
fn reply_text(cycle: &[(Box<[u8]>, Key)]) -> CString {
    let mut s = String::new();
    for (i, (o, k)) in cycle.iter().enumerate() {
        let next = cycle.get(i + 1).or(cycle.first()).map(|p| &p.0);
        if i > 0 {
            s.push_str("; ");
        }
        s.push_str(&quote(o));
        s.push_str(" waits for ");
        s.push_str(&quote(next.map_or(&[][..], |n| &n[..])));
        s.push_str(" on ");
        s.push_str(&quote(&k.1));
    }
    error::deadlock_cycle(&s)
}

/// `bytes` in double quotes, as redis-cli shows a binary string: `\\`,
/// `\"`, `\n`, `\r`, `\t`, printable ASCII as is, every other byte `\xHH`
/// — and `,`, `:` and `=` as `\xHH` too, so an `INFO` line stays one field.
pub fn quote(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() + 2);
    s.push('"');
    for &b in bytes {
        match b {
            b'\\' => s.push_str("\\\\"),
            b'"' => s.push_str("\\\""),
            b'\n' => s.push_str("\\n"),
            b'\r' => s.push_str("\\r"),
            b'\t' => s.push_str("\\t"),
            b',' | b':' | b'=' => s.push_str(&format!("\\x{b:02x}")),
            0x20..=0x7e => s.push(char::from(b)),
            _ => s.push_str(&format!("\\x{b:02x}")),
        }
    }
    s.push('"');
    s
}

/// `INFO dlock` fields of the latest deadlock: its unix ms, keys and owners
/// (quoted, space-separated, in cycle order). None before the first.
pub fn last_fields() -> Option<[(&'static str, String); 3]> {
    state::with(&LAST, |l| {
        l.as_ref().map(|l| {
            let join = |v: &[Box<[u8]>]| v.iter().map(|b| quote(b)).collect::<Vec<_>>().join(" ");
            [
                ("last_deadlock_unix_ms", l.at_ms.to_string()),
                ("last_deadlock_keys", join(&l.keys)),
                ("last_deadlock_owners", join(&l.owners)),
            ]
        })
    })
    .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_keeps_binary_safe_and_info_safe() {
        assert_eq!(quote(b"plain-key_1"), "\"plain-key_1\"");
        assert_eq!(quote(b"a\"b\\c"), "\"a\\\"b\\\\c\"");
        assert_eq!(quote(b"x\r\n\0\xff"), "\"x\\r\\n\\x00\\xff\"");
        assert_eq!(quote(b"a,b:c=d"), "\"a\\x2cb\\x3ac\\x3dd\"");
    }

    #[test]
    fn the_reply_names_each_step() {
        let k1: Key = Rc::new((0, Box::from(&b"k1"[..])));
        let k2: Key = Rc::new((0, Box::from(&b"k2"[..])));
        let c = vec![(Box::from(&b"a"[..]), k1), (Box::from(&b"b"[..]), k2)];
        assert_eq!(
            reply_text(&c).to_str().ok(),
            Some("DEADLOCK cycle: \"a\" waits for \"b\" on \"k1\"; \"b\" waits for \"a\" on \"k2\" (nothing was queued for this request; release a lock it holds and retry)")
        );
    }
}
