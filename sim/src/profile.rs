//! What a seed explores besides its schedule: the server it simulates
//! (its family: where Redis 7.0, Redis 8 and Valkey 8.1 / 9 differ), how
//! far the replica lags, the clocks of the servers, cluster mode, and how
//! often each fault happens — drawn per seed, as TigerBeetle's VOPR draws
//! its fault probabilities (swarm testing: a seed with no pauses at all
//! and many restarts reaches states that an even mix of everything does
//! not).

use crate::host::Family;
use dlock_core::rng::Rng;

/// How often each fault is drawn, in operations per thousand (0: never in
/// this seed).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Faults {
    /// CLIENT PAUSE WRITE|ALL, and CLIENT UNPAUSE.
    pub pause: u16,
    /// FAILOVER: a pause, then the replica promoted once it caught up.
    pub failover: u16,
    /// A promotion of the (lagging) replica, and restarts.
    pub promote: u16,
    /// A connection killed (a BIND hold's end).
    pub kill: u16,
    /// DLOCK.FENCED of a token, with an inner command.
    pub fenced: u16,
    /// COPY of a lock key.
    pub copy: u16,
    /// Used memory over maxmemory, and back.
    pub oom: u16,
    /// CLIENT UNBLOCK of a waiting connection.
    pub unblock: u16,
    /// An acquire inside MULTI/EXEC or a script.
    pub atomic: u16,
    /// MIGRATE of a key, or an atomic slot migration (cluster seeds).
    pub migrate: u16,
}

/// One seed's server and faults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Profile {
    pub family: Family,
    /// The replica applies the master's stream this many steps late (a
    /// promotion drops what it had not applied).
    pub lag: u8,
    /// The master writes an AOF (somewhere to propagate even without a
    /// replica).
    pub aof: bool,
    /// Two shards: keys live in slots served by two masters.
    pub cluster: bool,
    /// Clients reach a new master (after a promotion, a FAILOVER or a
    /// restart) before its event loop has turned once: a connection was
    /// open there already, or reconnected within one turn. Otherwise the
    /// new master's timers due run first.
    pub eager_clients: bool,
    /// Each server's clock: its offset (ms) and rate drift (ppm), by the
    /// index of the server in its family's set.
    pub clocks: [(i32, i32); CLOCKS],
    pub faults: Faults,
}

/// Servers whose clocks a profile sets (a family's set: see
/// `modworld::SPARES`).
pub const CLOCKS: usize = 8;

/// The promotion gap the simulated servers load with (ms); clock offsets
/// stay within its assumptions (any two clocks differ by less).
pub const PROMOTION_GAP_MS: u64 = 5_000;

impl Default for Profile {
    /// The server the kept schedules of the module world were found on:
    /// Redis 8, an in-step replica, one clock, no fault drawn.
    fn default() -> Profile {
        Profile {
            family: Family::Redis8,
            lag: 0,
            aof: false,
            cluster: false,
            eager_clients: false,
            clocks: [(0, 0); CLOCKS],
            faults: Faults::default(),
        }
    }
}

impl Profile {
    /// The profile of `seed` (independent of its schedule's draws).
    pub fn of(seed: u64) -> Profile {
        let mut r = Rng::new(seed ^ 0x5357_4152_4d5f_5052);
        let family = r.pick(&Family::ALL);
        let lag = if r.one_in(2) {
            0
        } else {
            r.pick(&[1u8, 2, 4, 9])
        };
        let aof = r.one_in(3);
        // Cluster seeds; half of Valkey 9's, whose atomic slot migration
        // only they reach.
        let cluster = r.one_in(if family == Family::Valkey9 { 2 } else { 5 });
        let eager_clients = r.one_in(3);
        let mut clocks = [(0, 0); CLOCKS];
        if r.one_in(2) {
            // Offsets within ±2 s and drift within ±300 ppm: any two
            // clocks differ by well under the promotion gap over a run.
            for c in clocks.iter_mut() {
                *c = (r.below(4001) as i32 - 2000, r.below(601) as i32 - 300);
            }
        }
        // Swarm testing: each fault is off in about a quarter of the seeds,
        // else drawn from a few levels.
        let mut level = |levels: &[u16]| {
            if r.one_in(4) {
                0
            } else {
                r.pick(levels)
            }
        };
        let faults = Faults {
            pause: level(&[2, 6, 20]),
            failover: level(&[1, 3, 8]),
            promote: level(&[1, 3, 8]),
            kill: level(&[5, 15, 40]),
            fenced: level(&[10, 30, 80]),
            copy: level(&[2, 8, 20]),
            oom: level(&[2, 6, 15]),
            unblock: level(&[3, 10, 30]),
            atomic: level(&[5, 15, 40]),
            migrate: if cluster { level(&[3, 10, 25]) } else { 0 },
        };
        Profile {
            family,
            lag,
            aof,
            cluster,
            eager_clients,
            clocks,
            faults,
        }
    }

    /// Whether the servers' clocks differ in this seed.
    pub fn skewed(&self) -> bool {
        self.clocks.iter().any(|c| *c != (0, 0))
    }
}
