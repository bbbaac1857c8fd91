//! The module world's invariants, checked after every step on each lock as
//! the module's type saves it (`rdb_save`), decoded into a
//! `dlock_core::Lock`: the same value a restart, a replica or a RESTORE
//! gets, read with the core's own spec checks ([`crate::spec`]) rather
//! than a second reading of INFO's text.

use super::ModWorld;
use crate::host::{self, rdb};
use crate::invariant::{fail, Invariant as I, Violation};
use crate::spec::{self, view, Want};
use crate::DBS;
use dlock_core::{codec, Kind, Lock};
use std::collections::BTreeMap;
use std::hash::Hash;

/// Memory budget of the live state (see [`ModWorld::check`]).
const MEM_PER_LOCK: i64 = 4096;
const MEM_PER_ENTRY: i64 = 1024;
const MEM_FIXED: i64 = 256 * 1024;

/// The lock at `key` of `server`'s `db`, decoded from what the type's
/// `rdb_save` writes; None when the key holds no lock.
pub fn decode_key(server: usize, db: i32, key: &[u8]) -> Option<Lock> {
    decode(server, db, key).ok().flatten()
}

/// [`decode_key`], or why the saved value does not decode.
fn decode(server: usize, db: i32, key: &[u8]) -> Result<Option<Lock>, String> {
    let Some(items) = rdb::dump(server, db, key) else {
        return Ok(None);
    };
    match items.as_slice() {
        [rdb::Item::Buf(b)] => codec::decode(b)
            .map(|(l, _)| Some(l))
            .map_err(|e| format!("{e:?}")),
        other => Err(format!("rdb_save wrote {other:?}, not one string buffer")),
    }
}

/// Every lock of `server`, by (db, key), decoded (at keys whose TTL passed
/// too: a replica keeps them until its master's DEL).
fn locks_of(server: usize) -> Result<BTreeMap<(i32, Vec<u8>), Lock>, Violation> {
    let mut out = BTreeMap::new();
    for db in 0..i32::from(DBS) {
        for name in host::module_keys(server, db) {
            match decode(server, db, &name) {
                Ok(Some(l)) => {
                    out.insert((db, name), l);
                }
                Ok(None) => {}
                Err(e) => {
                    return fail(
                        I::PayloadUndecodable,
                        format!(
                            "server {server} db {db} {}: {e}",
                            String::from_utf8_lossy(&name)
                        ),
                    )
                }
            }
        }
    }
    Ok(out)
}

/// The schedule's key index of a key name (`k3` is 3).
fn key_index(name: &[u8]) -> Option<u8> {
    name.strip_prefix(b"k")
        .and_then(|d| std::str::from_utf8(d).ok())
        .and_then(|d| d.parse::<u8>().ok())
}

impl ModWorld {
    /// The invariants, from SPEC. `fire`: the step's turn ran the timers
    /// due; the checks that wait for the module's deferred work run only
    /// once nothing is due, no pause holds it back (nor has just ended) and
    /// no FAILOVER is in progress.
    pub(super) fn check(&mut self, fire: bool) -> Result<(), Violation> {
        let mono = host::mono_ms();
        let mut views = BTreeMap::new();
        let (mut locks, mut entries) = (0i64, 0i64);
        for server in self.masters() {
            // What a pause held back the module does once it is over, at
            // its next look (every 5 ms): judged 10 ms after the pause.
            let catching_up =
                host::with(|h| h.servers[server].pause_ended).is_some_and(|t| mono < t + 10);
            let settled = fire
                && host::next_timer(server).is_none_or(|t| t > mono)
                && !host::paused(server)
                && !catching_up
                && self.failover.is_none();
            let now = host::server_now_ms(server);
            for ((db, name), l) in locks_of(server)? {
                if server == self.m {
                    views.insert((db, name.clone()), view(&l));
                }
                // A key whose TTL passed is gone for every command, deleted
                // or not yet.
                if !host::key_alive(server, db, &name) {
                    continue;
                }
                self.check_lock(server, db, &name, &l, now, settled)?;
                locks += 1;
                entries += (l.holders().len() + l.waiters().len()) as i64;
                // The trace (when asked for): the lock, its waiter ids left
                // out (drawn at random per process).
                if self.tracing {
                    let mut v = view(&l);
                    for w in v.5.iter_mut() {
                        w.id = 0;
                    }
                    (server, db, name, format!("{v:?}")).hash(&mut self.trace);
                }
            }
            // Module-owned memory is bounded by the live state (SPEC: no
            // leak on a lock that never goes idle).
            if settled && server == self.m {
                self.check_memory(&mut locks, &mut entries)?;
            }
        }
        self.check_replica(views)
    }

    /// What the module holds beyond what it held at the start stays
    /// within a budget per lock and per hold or place, plus a fixed
    /// allowance for bounded caches (SLOWLOG entries, histograms).
    fn check_memory(&mut self, locks: &mut i64, entries: &mut i64) -> Result<(), Violation> {
        let excess = host::module_bytes() - self.baseline;
        // The replica holds the same state (the other shard counts in the
        // locks already).
        let copies = 1 + i64::from(self.replica.is_some());
        let over = excess - copies * (MEM_PER_LOCK * *locks + MEM_PER_ENTRY * *entries);
        self.mem_peak = self.mem_peak.max(over);
        if over > MEM_FIXED {
            return fail(
                I::MemoryBeyondLiveState,
                format!(
                    "{excess} B more than at the start, with {locks} locks and {entries} holds and places: \
                     {over} B over their budget ({MEM_PER_LOCK} B a lock, {MEM_PER_ENTRY} B a hold or place), \
                     more than the {MEM_FIXED} B allowance"
                ),
            );
        }
        Ok(())
    }

    /// One lock: mutual exclusion per kind (SPEC, as `spec::exclusion`
    /// words it); once settled, no blocked waiter that SPEC grants now
    /// left waiting (`spec::serves`), and no bound hold without an open
    /// connection that bound it (the key followed through RENAME, MOVE and
    /// SWAPDB; RESTORE and migrations end it).
    fn check_lock(
        &self,
        server: usize,
        db: i32,
        name: &[u8],
        l: &Lock,
        now: u64,
        settled: bool,
    ) -> Result<(), Violation> {
        let key = String::from_utf8_lossy(name);
        if let Err(e) = spec::exclusion(l) {
            return fail(
                I::MutualExclusion,
                format!("server {server} db {db} {key}: {e}: {l:?}"),
            );
        }
        if !settled {
            return Ok(());
        }
        if l.kind() != Kind::Latch {
            for (pos, w) in l.waiters().iter().enumerate() {
                if !w.blocked || w.expires_at <= now {
                    continue;
                }
                // Only waiters whose owner holds nothing are judged: the
                // module serves a waiting connection when the lock changes
                // hands, not when its owner is granted the lock on another
                // connection (a re-entry SPEC would grant; the core world
                // judges those).
                if l.holders().iter().any(|h| *h.owner == *w.owner) {
                    continue;
                }
                let want = Want {
                    owner: &w.owner,
                    mode: w.mode,
                    permits: w.permits,
                };
                // Holds whose lease ended but whose end the module has not
                // committed yet (its timer not due by the monotonic clock)
                // still count as held here, which only makes this check
                // milder.
                if spec::serves(l, &want, pos) {
                    // A place no connection of this server waits for (its
                    // owner has more blocked places here than connections
                    // of this server waiting on the key), on a server that
                    // became master by a promotion, a FAILOVER or a restart
                    // in this run: its prune missed it (finding A).
                    let kidx = key_index(name);
                    let waiting = self
                        .pending
                        .iter()
                        .filter(|((s, _), p)| {
                            *s == server && p.db == db && Some(p.key) == kidx && p.owner == *w.owner
                        })
                        .count();
                    let places = l
                        .waiters()
                        .iter()
                        .filter(|x| x.blocked && *x.owner == *w.owner)
                        .count();
                    // The shape found: a lock with no holder (blocked places
                    // only, which the prune does not visit).
                    let dead = places > waiting && l.holders().is_empty();
                    if dead && self.promoted.contains(&server) {
                        return fail(
                            I::DeadPlaceAfterPromotion,
                            format!(
                                "server {server} db {db} {key}: waiter {} at {pos}, whom no connection \
                                 of this server (master since a promotion or restart) waits for, could be granted: {l:?}",
                                String::from_utf8_lossy(&w.owner)
                            ),
                        );
                    }
                    return fail(
                        I::GrantableWaiterLeft,
                        format!(
                            "server {server} db {db} {key}: waiter {} at {pos} could be granted: {l:?}",
                            String::from_utf8_lossy(&w.owner)
                        ),
                    );
                }
            }
        }
        let kidx = key_index(name);
        let ident = kidx.and_then(|k| self.ident.get(&(db, k))).copied();
        let open: Vec<u64> = self
            .conns
            .values()
            .flat_map(|c| c.slots.iter().copied())
            .collect();
        for h in l.holders() {
            if h.bound == 0 || !h.is_live() || h.expires_at <= now {
                continue;
            }
            let alive = ident.is_some_and(|i| {
                self.bound
                    .iter()
                    .any(|g| g.ident == i && *g.owner == *h.owner && open.contains(&g.client))
            });
            if !alive {
                return fail(
                    I::BoundHoldOutlived,
                    format!(
                        "server {server} db {db} {key}: holder {} is bound, and no connection \
                         that bound it is open: {l:?}",
                        String::from_utf8_lossy(&h.owner)
                    ),
                );
            }
        }
        Ok(())
    }

    /// SPEC: after each command a replica's locks equal the master's. The
    /// replica that lags is compared with the master as it was when the
    /// stream was as long as what the replica applied.
    fn check_replica(&mut self, views: super::Locks) -> Result<(), Violation> {
        let Some(r) = self.replica else {
            return Ok(());
        };
        self.views.push_back((host::stream_len(self.m), views));
        while self.views.len() > usize::from(self.p.lag) + 2 {
            self.views.pop_front();
        }
        let Some((_, want)) = self.views.iter().rev().find(|(at, _)| *at == r.at) else {
            return Ok(());
        };
        let have: super::Locks = locks_of(r.server)?
            .into_iter()
            .map(|(k, l)| (k, view(&l)))
            .collect();
        if have != *want {
            let keys: std::collections::BTreeSet<&(i32, Vec<u8>)> =
                have.keys().chain(want.keys()).collect();
            for k in keys {
                if have.get(k) != want.get(k) {
                    return fail(
                        I::ReplicaDiffers,
                        format!(
                            "db {} {} (replica {} steps late):\nmaster  {:?}\nreplica {:?}",
                            k.0,
                            String::from_utf8_lossy(&k.1),
                            self.p.lag,
                            want.get(k),
                            have.get(k)
                        ),
                    );
                }
            }
        }
        Ok(())
    }
}
