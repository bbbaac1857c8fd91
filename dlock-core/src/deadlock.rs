//! Deadlock detection across locks: a bounded search of the wait-for graph.
//!
//! The graph's nodes are owners; owner A waits for owner B (an edge A → B,
//! labelled with the key A waits on) when B must let go of a hold, or be
//! served first, before A's blocked request can be granted — the
//! [`Lock::waits_for`] relation, which is [`Lock::blocked_by_ask`] without
//! A itself and without holds that time alone ends (a lease already over, a
//! hold in its lock-delay).
//!
//! [`find_cycle`] searches the graph breadth-first from one owner over an
//! abstract "whom does this owner wait for" function, so the module decides
//! which owners take part (those blocked on the server on mutex, rw and fair
//! locks) and how their places are found. An owner that waits nowhere costs
//! one call that answers `None`; the search examines at most `max_owners`
//! owners that do wait, and answers [`Search::Truncated`] past that.

use super::rule::Ask;
use super::{Holder, Kind, Lock, Mode};
use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::Hash;

/// What [`find_cycle`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Search<K, O> {
    /// A cycle through the start owner, shortest first: each `(owner, key)`
    /// pair says that `owner` waits on `key` for the owner of the next pair
    /// (the last pair's owner waits for the first's). The first pair's
    /// owner is the start.
    Cycle(Vec<(O, K)>),
    /// More owners wait than the search may examine: no cycle was found
    /// among those it did.
    Truncated,
    /// No cycle passes through the start owner.
    None,
}

/// Looks for a cycle of the wait-for graph through `start`.
///
/// `waits_for(owner)` answers `None` when `owner` waits nowhere, or
/// `Some(edges)`: for each owner it waits for, `(key, that owner)`. It is
/// called once for `start` and at most once for every other owner reached;
/// at most `max_owners` calls (`start`'s included) may answer `Some` — the
/// next one that does ends the search as [`Search::Truncated`]. Breadth
/// first, so the cycle found is a shortest one through `start`.
pub fn find_cycle<K: Clone, O: Clone + Eq + Hash>(
    start: &O,
    max_owners: usize,
    mut waits_for: impl FnMut(&O) -> Option<Vec<(K, O)>>,
) -> Search<K, O> {
    // Owner -> (the owner that reached it, the key it was reached over).
    let mut parent: HashMap<O, (O, K)> = HashMap::new();
    let mut seen: HashSet<O> = HashSet::new();
    let mut queue: VecDeque<O> = VecDeque::new();
    seen.insert(start.clone());
    queue.push_back(start.clone());
    let mut examined = 0usize;
    while let Some(u) = queue.pop_front() {
        let Some(edges) = waits_for(&u) else {
            continue;
        };
        if examined >= max_owners {
            return Search::Truncated;
        }
        examined += 1;
        for (key, v) in edges {
            if v == *start {
                return Search::Cycle(path_to(start, &parent, u, key));
            }
            if seen.insert(v.clone()) {
                parent.insert(v.clone(), (u.clone(), key));
                queue.push_back(v);
            }
        }
    }
    Search::None
}

/// The cycle `start` → … → `last` → `start`, where `last` waits on `key`
/// for `start`, as `(owner, key)` pairs from `start`.
fn path_to<K: Clone, O: Clone + Eq + Hash>(
    start: &O,
    parent: &HashMap<O, (O, K)>,
    last: O,
    key: K,
) -> Vec<(O, K)> {
    let mut out = vec![(last.clone(), key)];
    let mut at = last;
    while at != *start {
        let Some((p, k)) = parent.get(&at) else {
            break;
        };
        out.push((p.clone(), k.clone()));
        at = p.clone();
    }
    out.reverse();
    out
}

impl Lock {
    /// The owners the request `ask` at `place` waits for in the wait-for
    /// graph, each once: [`Lock::blocked_by_ask`] without `ask`'s own owner
    /// and without holds that time alone ends (in their lock-delay, or
    /// whose lease ended by `now` but was not ticked yet). Empty for
    /// semaphores and latches, which take no part.
    pub fn waits_for(&self, ask: &Ask<'_>, place: Option<usize>, now: u64) -> Vec<&[u8]> {
        if !matches!(self.kind, Kind::Mutex | Kind::Rw | Kind::Fair) {
            return Vec::new();
        }
        let mut all = self.blocked_by_ask(ask, place);
        all.retain(|o| *o != ask.owner);
        let stale = |h: &Holder| !h.is_live() || h.expires_at <= now;
        if all.is_empty() || !self.holders.iter().any(stale) {
            return all;
        }
        // Some hold ends by time alone: keep an owner only when a hold of
        // its that lasts conflicts, or it waits ahead as blocked_by counts.
        let holds_mine = self
            .holders
            .iter()
            .any(|h| !stale(h) && *h.owner == *ask.owner);
        let conflicts = |h: &Holder| match (self.kind, ask.mode) {
            (Kind::Rw, Mode::Read) => h.mode == Mode::Write,
            _ => true,
        };
        let ahead = place.unwrap_or(self.queue.len());
        let waits_ahead = |o: &[u8]| {
            self.queue.iter().take(ahead).any(|w| {
                *w.owner == *o
                    && match (self.kind, ask.mode) {
                        (Kind::Rw, Mode::Read) => w.mode == Mode::Write,
                        (Kind::Rw, _) => !holds_mine,
                        _ => true,
                    }
            })
        };
        all.retain(|o| {
            waits_ahead(o)
                || self
                    .holders
                    .iter()
                    .any(|h| !stale(h) && *h.owner == **o && conflicts(h))
        });
        all
    }
}
