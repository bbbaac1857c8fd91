//! The deadlock detector ([`find_cycle`]) and the wait-for relation
//! ([`Lock::waits_for`]): unit tests, and a property test that builds random
//! states — several locks of random kinds, random holders, queues with
//! blocked and queued places — and compares the detector with a brute-force
//! search of every simple cycle through the start owner, over edges taken
//! from [`Lock::blocked_by`] (the rule DLOCK.INFO reports).

use dlock_core::deadlock::{find_cycle, Search};
use dlock_core::*;
use std::collections::HashMap;

type Graph = HashMap<u8, Vec<(u8, u8)>>;

/// `find_cycle` over a plain graph: owner -> [(key, owner)]; an owner
/// absent from the map waits nowhere.
fn search(g: &Graph, start: u8, max: usize) -> Search<u8, u8> {
    find_cycle(&start, max, |o| g.get(o).cloned())
}

fn graph(edges: &[(u8, u8, u8)]) -> Graph {
    let mut g = Graph::new();
    for &(a, k, b) in edges {
        g.entry(a).or_default().push((k, b));
    }
    g
}

#[test]
fn two_owners_across_two_keys() {
    // 1 waits on key 10 for 2; 2 waits on key 20 for 1.
    let g = graph(&[(1, 10, 2), (2, 20, 1)]);
    assert_eq!(search(&g, 1, 64), Search::Cycle(vec![(1, 10), (2, 20)]));
    assert_eq!(search(&g, 2, 64), Search::Cycle(vec![(2, 20), (1, 10)]));
}

#[test]
fn three_owners_and_the_shortest_cycle() {
    let g = graph(&[(1, 10, 2), (2, 20, 3), (3, 30, 1), (1, 11, 4), (4, 40, 1)]);
    assert_eq!(search(&g, 1, 64), Search::Cycle(vec![(1, 11), (4, 40)]));
    let g = graph(&[(1, 10, 2), (2, 20, 3), (3, 30, 1)]);
    assert_eq!(
        search(&g, 1, 64),
        Search::Cycle(vec![(1, 10), (2, 20), (3, 30)])
    );
}

#[test]
fn a_chain_is_no_cycle() {
    let g = graph(&[(1, 10, 2), (2, 20, 3), (3, 30, 4)]);
    assert_eq!(search(&g, 1, 64), Search::None);
    // A cycle that does not pass through the start is not its business.
    let g = graph(&[(1, 10, 2), (2, 20, 3), (3, 30, 2)]);
    assert_eq!(search(&g, 1, 64), Search::None);
}

#[test]
fn owners_that_wait_nowhere_cost_no_budget() {
    // 1 waits for 2..=50, none of which waits: one owner examined.
    let g = graph(&(2..=50).map(|o| (1, 10, o)).collect::<Vec<_>>());
    assert_eq!(search(&g, 1, 1), Search::None);
    let mut calls = 0;
    let _ = find_cycle(&1u8, 64, |o| {
        calls += 1;
        g.get(o).cloned()
    });
    assert_eq!(calls, 50);
}

#[test]
fn the_bound_truncates() {
    // A cycle of 4 owners: found with 4, truncated with 3.
    let g = graph(&[(1, 10, 2), (2, 20, 3), (3, 30, 4), (4, 40, 1)]);
    assert!(matches!(search(&g, 1, 4), Search::Cycle(c) if c.len() == 4));
    assert_eq!(search(&g, 1, 3), Search::Truncated);
    assert_eq!(search(&g, 1, 0), Search::Truncated);
}

#[test]
fn a_self_loop_is_a_cycle_of_one() {
    let g = graph(&[(1, 10, 1)]);
    assert_eq!(search(&g, 1, 1), Search::Cycle(vec![(1, 10)]));
}

fn hold(l: &mut Lock, owner: &[u8], mode: Mode, lease: u64) {
    let req = Request {
        owner,
        mode,
        lease_ms: lease,
        waiter: None,
    };
    let mut t = Tokens {
        last: l.last_token(),
    };
    let _ = l.acquire(&req, 1000, &mut t, 0);
}

#[test]
fn waits_for_leaves_out_the_owner_and_holds_time_ends() {
    let mut l = Lock::new(Kind::Mutex);
    hold(&mut l, b"a", Mode::Exclusive, 100);
    l.enqueue(b"b", Mode::Exclusive, 1, true, 9_000);
    let ask = Ask::hold(b"c", Mode::Exclusive);
    assert_eq!(l.waits_for(&ask, None, 1000), vec![&b"a"[..], &b"b"[..]]);
    // a's lease is over at 1100 even though nobody ticked the lock.
    assert_eq!(l.waits_for(&ask, None, 1100), vec![&b"b"[..]]);
    // A hold in its lock-delay takes no part.
    let mut d = Lock::new(Kind::Mutex);
    hold(&mut d, b"a", Mode::Exclusive, 100);
    d.set_lock_delay(b"a", Mode::Exclusive, 500);
    let _ = d.tick(1100, |_| true);
    assert!(!d.holders().is_empty());
    assert!(d.waits_for(&ask, None, 1100).is_empty());
    // Semaphores take no part.
    let mut s = Lock::semaphore(1);
    let mut t = Tokens::default();
    let req = Request {
        owner: b"a",
        mode: Mode::Permit,
        lease_ms: 100,
        waiter: None,
    };
    let _ = s.acquire_permits(&req, 1, 1, 1000, &mut t, 0);
    assert!(s
        .waits_for(&Ask::permits(b"c", 1, 1), None, 1000)
        .is_empty());
}

#[test]
fn an_rw_reader_waits_for_writers_only() {
    let mut l = Lock::new(Kind::Rw);
    hold(&mut l, b"r", Mode::Read, 100);
    l.enqueue(b"w", Mode::Write, 1, true, 9_000);
    let read = Ask::hold(b"x", Mode::Read);
    assert_eq!(l.waits_for(&read, None, 1000), vec![&b"w"[..]]);
    let write = Ask::hold(b"x", Mode::Write);
    assert_eq!(l.waits_for(&write, None, 1000), vec![&b"r"[..], &b"w"[..]]);
}

/// A random state: `keys` locks over owners 0..owners, each owner blocked
/// on at most one place (as one connection waits at a time), plus queued
/// places that wait on no connection.
struct World {
    locks: Vec<Lock>,
}

fn owner(o: u8) -> Vec<u8> {
    vec![b'o', o]
}

impl World {
    fn random(seed: u64, keys: usize, owners: u8) -> World {
        let mut r = rng::Rng::new(seed);
        let mut locks = Vec::new();
        let mut id = 1u64;
        let mut blocked_somewhere = vec![false; usize::from(owners)];
        for _ in 0..keys {
            let kind = match r.below(3) {
                0 => Kind::Mutex,
                1 => Kind::Rw,
                _ => Kind::Fair,
            };
            let mut l = Lock::new(kind);
            let modes: &[Mode] = if kind == Kind::Rw {
                &[Mode::Read, Mode::Write]
            } else {
                &[Mode::Exclusive]
            };
            for _ in 0..r.below(4) {
                let o = owner(r.below(u64::from(owners)) as u8);
                let m = modes[r.below(modes.len() as u64) as usize];
                hold(&mut l, &o, m, 10_000);
            }
            for _ in 0..r.below(5) {
                let oi = r.below(u64::from(owners)) as usize;
                let o = owner(oi as u8);
                let m = modes[r.below(modes.len() as u64) as usize];
                let blocked = !blocked_somewhere[oi] && r.below(4) != 0;
                let ask = Ask::hold(&o, m);
                // Only requests the rule denies wait.
                if l.decide(&ask, None) != Decision::Deny {
                    continue;
                }
                if l.enqueue(&o, m, id, blocked, 9_000) && blocked {
                    blocked_somewhere[oi] = true;
                }
                id += 1;
            }
            locks.push(l);
        }
        World { locks }
    }

    /// The edges of owner `o` the module would give: for each blocked place
    /// of `o`, `waits_for` of that place.
    fn waits_for(&self, o: &[u8]) -> Option<Vec<(usize, Vec<u8>)>> {
        let mut out = Vec::new();
        let mut blocked = false;
        for (k, l) in self.locks.iter().enumerate() {
            for (p, w) in l.waiters().iter().enumerate() {
                if w.blocked && *w.owner == *o {
                    blocked = true;
                    for b in l.waits_for(&Ask::of(w), Some(p), 1000) {
                        out.push((k, b.to_vec()));
                    }
                }
            }
        }
        blocked.then_some(out)
    }

    /// The brute-force graph, from `blocked_by` (no hold here is delayed or
    /// over): blocked owner -> owners it waits for, without itself.
    fn brute_edges(&self) -> HashMap<Vec<u8>, Vec<Vec<u8>>> {
        let mut g: HashMap<Vec<u8>, Vec<Vec<u8>>> = HashMap::new();
        for l in &self.locks {
            for (p, w) in l.waiters().iter().enumerate() {
                if !w.blocked {
                    continue;
                }
                let e = g.entry(w.owner.to_vec()).or_default();
                for b in l.blocked_by(p) {
                    if *b != *w.owner {
                        e.push(b.to_vec());
                    }
                }
            }
        }
        g
    }
}

/// Every simple cycle through `start`: the length (in owners) of the
/// shortest, by exhaustive depth-first enumeration of simple paths.
fn brute_shortest(g: &HashMap<Vec<u8>, Vec<Vec<u8>>>, start: &[u8]) -> Option<usize> {
    fn go(
        g: &HashMap<Vec<u8>, Vec<Vec<u8>>>,
        start: &[u8],
        path: &mut Vec<Vec<u8>>,
        best: &mut Option<usize>,
    ) {
        let Some(last) = path.last().cloned() else {
            return;
        };
        for n in g.get(&last).into_iter().flatten() {
            if **n == *start {
                let len = path.len();
                *best = Some(best.map_or(len, |b| b.min(len)));
            } else if !path.contains(n) {
                path.push(n.clone());
                go(g, start, path, best);
                path.pop();
            }
        }
    }
    let mut best = None;
    go(g, start, &mut vec![start.to_vec()], &mut best);
    best
}

/// Blocked owners reachable from `start` (itself included when blocked).
fn reachable_blocked(g: &HashMap<Vec<u8>, Vec<Vec<u8>>>, start: &[u8]) -> usize {
    let mut seen = std::collections::HashSet::new();
    let mut stack = vec![start.to_vec()];
    seen.insert(start.to_vec());
    let mut n = 0;
    while let Some(o) = stack.pop() {
        if let Some(next) = g.get(&o) {
            n += 1;
            for v in next {
                if seen.insert(v.clone()) {
                    stack.push(v.clone());
                }
            }
        }
    }
    n
}

/// Checks every owner of one random state; returns how many cycles were
/// found.
fn check(seed: u64, keys: usize, owners: u8, max: usize) -> Result<usize, String> {
    let w = World::random(seed, keys, owners);
    let mut cycles = 0;
    let g = w.brute_edges();
    for s in 0..owners {
        let start = owner(s);
        let found = find_cycle(&start, max, |o| w.waits_for(o));
        let shortest = brute_shortest(&g, &start);
        let reach = reachable_blocked(&g, &start);
        match &found {
            Search::Cycle(c) => {
                cycles += 1;
                // A real cycle from start, each step an edge of the rule.
                if c.first().map(|p| &p.0) != Some(&start) {
                    return Err(format!("cycle does not start at start: {c:?}"));
                }
                for (i, (o, k)) in c.iter().enumerate() {
                    let next = &c[(i + 1) % c.len()].0;
                    let l = &w.locks[*k];
                    let ok = l.waiters().iter().enumerate().any(|(p, x)| {
                        x.blocked && *x.owner == **o && l.blocked_by(p).contains(&&next[..])
                    });
                    if !ok {
                        return Err(format!("step {i} of {c:?} is no edge"));
                    }
                }
                if Some(c.len()) != shortest {
                    return Err(format!("cycle {c:?} is not a shortest ({shortest:?})"));
                }
            }
            Search::None => {
                if shortest.is_some() {
                    return Err(format!("missed a cycle of {shortest:?} from {s}"));
                }
            }
            Search::Truncated => {
                if reach <= max {
                    return Err(format!("truncated with {reach} <= {max} blocked owners"));
                }
            }
        }
        if reach <= max && matches!(found, Search::Truncated) {
            return Err("truncated within the bound".into());
        }
    }
    Ok(cycles)
}

#[test]
fn random_states_agree_with_brute_force_quick() {
    let mut cycles = 0;
    for seed in 0..300 {
        match check(seed, 4, 6, 64) {
            Ok(n) => cycles += n,
            Err(e) => panic!("seed {seed}: {e}"),
        }
        if let Err(e) = check(seed, 3, 5, 2) {
            panic!("seed {seed} (bound 2): {e}");
        }
    }
    // The states are contended enough to hold cycles.
    assert!(cycles > 50, "only {cycles} cycles");
}

mod prop {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

        /// Random states of several locks: the detector finds exactly the
        /// cycles (shortest first) the brute-force search finds, and
        /// truncates only past its bound.
        #[test]
        fn detector_agrees_with_brute_force(
            seed in any::<u64>(),
            keys in 1usize..6,
            owners in 1u8..8,
            max in 1usize..8,
        ) {
            let r = check(seed, keys, owners, max);
            prop_assert!(r.is_ok(), "{:?}", r);
        }
    }
}
