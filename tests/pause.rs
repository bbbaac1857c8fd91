//! Client pauses (issue 44, item 1): while clients are paused for writes
//! (`CLIENT PAUSE … WRITE`, and the pause of a `FAILOVER`), the server
//! aborts when anything is propagated, and the module's own timers, its
//! jobs and a `WAIT` that times out used to propagate then: a lease end, a
//! lock-delay end, a fair place's end, a closed `BIND` connection, a wait's
//! time-out and a handoff each killed a server that had something to
//! propagate to (the AOF or a replica). Each case runs with the AOF on and
//! with a replica: the server stays up, nothing ends or is granted during
//! the pause, and after it the master has ended what time ended and its
//! replica agrees. A `FAILOVER` whose replica lags pauses the master for as
//! long as it waits: the master survives it, whether the failover times out
//! or completes.

mod common;
use common::*;

use redis::Value;
use std::thread;
use std::time::{Duration, Instant};

const LONG: &str = "60000";
/// How long a test lets the module's timers run while clients are paused
/// (leases of 100 ms end well inside it).
const IN_PAUSE: Duration = Duration::from_millis(500);

/// Where a change must be propagated to: what makes the server check it.
#[derive(Clone, Copy, Debug)]
enum Sink {
    Aof,
    Replica,
}

const SINKS: [Sink; 2] = [Sink::Aof, Sink::Replica];

/// A master with something to propagate to.
struct Pair {
    master: Server,
    replica: Option<Server>,
    sink: Sink,
}

impl Pair {
    fn start(sink: Sink, module_args: &[&str]) -> Pair {
        let opts = ServerOpts::new().module_args(module_args.iter().copied());
        let master = match sink {
            Sink::Aof => Server::start_with(opts.args(["--appendonly", "yes"])),
            Sink::Replica => Server::start_with(opts),
        };
        let replica = match sink {
            Sink::Aof => None,
            Sink::Replica => {
                let r = Server::start();
                r.make_replica_of(&master);
                Some(r)
            }
        };
        Pair {
            master,
            replica,
            sink,
        }
    }

    /// `CLIENT PAUSE` for writes, long enough for any test: ended by
    /// [`Pair::unpause`].
    fn pause(&self) {
        ok(
            &mut self.master.conn(),
            &["CLIENT", "PAUSE", "60000", "WRITE"],
        );
    }

    fn unpause(&self) {
        ok(&mut self.master.conn(), &["CLIENT", "UNPAUSE"]);
    }

    /// The master survived the module's timers during the pause.
    fn alive(&mut self) {
        thread::sleep(IN_PAUSE);
        self.master.assert_alive();
    }

    /// After the pause: `done` is true on the master, and the replica (if
    /// any) comes to show each of `keys` as the master does (the master's
    /// reads answer as of now at once; the replica learns it from the
    /// master's changes, made once the pause is over).
    fn settles(&mut self, keys: &[&str], done: impl Fn(&mut redis::Connection) -> bool) {
        let mut con = self.master.conn();
        let settled = wait_until(Duration::from_secs(10), || done(&mut con));
        assert!(
            settled,
            "{:?}: the master did not settle after the pause: {:?}",
            self.sink,
            keys.iter()
                .map(|k| info_raw(&mut con, k))
                .collect::<Vec<_>>()
        );
        self.master.assert_alive();
        if let Some(r) = &self.replica {
            let mut rc = r.conn();
            let same = |rc: &mut redis::Connection, con: &mut redis::Connection| {
                keys.iter().all(|k| info_norm(rc, k) == info_norm(con, k))
            };
            let agreed = wait_until(Duration::from_secs(10), || same(&mut rc, &mut con));
            for k in keys {
                assert!(
                    agreed,
                    "{k}: the replica differs from its master: {:?} {:?}",
                    info_norm(&mut rc, k),
                    info_norm(&mut con, k)
                );
            }
        }
    }
}

fn gone(key: &'static str) -> impl Fn(&mut redis::Connection) -> bool {
    move |c| info_raw(c, key) == Value::Nil
}

#[test]
fn leases_and_lock_delays_that_end_during_a_pause_end_after_it() {
    for sink in SINKS {
        let mut p = Pair::start(sink, &[]);
        let mut c = p.master.conn();
        let t = int(&mut c, &["DLOCK.ACQUIRE", "k", "a", "PX", "100"]);
        int(
            &mut c,
            &["DLOCK.ACQUIRE", "d", "a", "PX", "100", "LOCKDELAY", "100"],
        );
        p.pause();
        p.alive();
        // Reads do not wait for the pause: the lease and the delay are over.
        assert_eq!(int(&mut c, &["DLOCK.CHECK", "k", &t.to_string()]), 0);
        assert_eq!(info_raw(&mut c, "k"), Value::Nil);
        assert_eq!(info_raw(&mut c, "d"), Value::Nil);
        p.unpause();
        p.settles(&["k", "d"], |c| gone("k")(c) && gone("d")(c));
        // Tokens still only grow.
        assert!(int(&mut c, &["DLOCK.ACQUIRE", "k", "b", "PX", LONG]) > t);
    }
}

#[test]
fn waits_that_time_out_during_a_pause_are_answered_and_leave_after_it() {
    for sink in SINKS {
        let mut p = Pair::start(sink, &[]);
        let mut c = p.master.conn();
        int(&mut c, &["DLOCK.ACQUIRE", "m", "h", "PX", LONG]);
        int(&mut c, &["DLOCK.FAIRACQUIRE", "f", "h", "PX", LONG]);
        int(&mut c, &["DLOCK.LATCHSET", "l", "1"]);
        let waits: [&'static [&'static str]; 3] = [
            &["DLOCK.ACQUIRE", "m", "w", "PX", LONG, "WAIT", "1000"],
            &["DLOCK.FAIRACQUIRE", "f", "w", "PX", LONG, "WAIT", "1000"],
            &["DLOCK.AWAIT", "l", "WAIT", "1000"],
        ];
        let waiting: Vec<_> = waits
            .iter()
            .map(|w| spawn_blocking(p.master.port, w))
            .collect();
        let all_blocked = wait_until(Duration::from_secs(10), || {
            info_field(&mut c, "dlock", "dlock_waiting_clients").as_deref() == Some("3")
        });
        assert!(all_blocked, "the three waits never blocked");
        p.pause();
        let paused = Instant::now();
        for (w, h) in waits.iter().zip(waiting) {
            let (_, reply) = h.join().expect("waiter thread");
            assert_eq!(reply, Ok(Value::Nil), "{w:?}");
        }
        assert!(
            paused.elapsed() < Duration::from_secs(5),
            "the waits were answered only after the pause"
        );
        p.alive();
        // The mutex and latch places go; the fair owner keeps a queued
        // place: so reads answer during the pause, and the state is so
        // after it.
        let places_ended = |c: &mut redis::Connection| {
            let m = info_raw(c, "m");
            let f = info_raw(c, "f");
            let l = info_raw(c, "l");
            waiters(&m).is_empty()
                && waiters(&l).is_empty()
                && waiters(&f).len() == 1
                && as_bytes(field(&waiters(&f)[0], "state")) == b"queued"
        };
        assert!(places_ended(&mut c), "{:?}", info_raw(&mut c, "f"));
        p.unpause();
        p.settles(&["m", "f", "l"], places_ended);
    }
}

#[test]
fn a_bound_connection_that_closes_during_a_pause_ends_its_holds_after_it() {
    for sink in SINKS {
        let mut p = Pair::start(sink, &[]);
        let mut admin = p.master.conn();
        let mut holder = p.master.conn();
        let t = int(
            &mut holder,
            &["DLOCK.ACQUIRE", "k", "b", "PX", LONG, "BIND"],
        );
        let id = int(&mut holder, &["CLIENT", "ID"]);
        p.pause();
        assert_eq!(
            int(&mut admin, &["CLIENT", "KILL", "ID", &id.to_string()]),
            1
        );
        p.alive();
        // Reads do not wait: the hold ended with its connection.
        assert_eq!(int(&mut admin, &["DLOCK.CHECK", "k", &t.to_string()]), 0);
        assert_eq!(info_raw(&mut admin, "k"), Value::Nil);
        p.unpause();
        p.settles(&["k"], gone("k"));
    }
}

#[test]
fn a_fair_place_that_ends_during_a_pause_ends_after_it() {
    for sink in SINKS {
        let mut p = Pair::start(sink, &["fair-queue-timeout-ms", "100"]);
        let mut c = p.master.conn();
        int(&mut c, &["DLOCK.FAIRACQUIRE", "f", "h", "PX", LONG]);
        assert_eq!(
            cmd_str(&mut c, &["DLOCK.FAIRACQUIRE", "f", "q", "PX", LONG]),
            Ok(Value::Nil)
        );
        p.pause();
        p.alive();
        assert!(waiters(&info_raw(&mut c, "f")).is_empty());
        p.unpause();
        p.settles(&["f"], |c| waiters(&info_raw(c, "f")).is_empty());
    }
}

#[test]
fn no_grant_is_made_during_a_pause() {
    for sink in SINKS {
        let mut p = Pair::start(sink, &[]);
        let mut c = p.master.conn();
        let t = int(&mut c, &["DLOCK.ACQUIRE", "k", "h", "PX", "100"]);
        let mut waiter = RawConn::new(&p.master, Duration::from_secs(30));
        waiter.send(&["DLOCK.ACQUIRE", "k", "w", "PX", LONG, "WAIT", "30000"]);
        let blocked = wait_until(Duration::from_secs(10), || {
            info_field(&mut c, "dlock", "dlock_waiting_clients").as_deref() == Some("1")
        });
        assert!(blocked, "the waiter never blocked");
        p.pause();
        p.alive();
        // The lease ended, but a grant now could not reach the replica of a
        // failover: the waiter is served once the pause is over.
        assert_eq!(int(&mut c, &["DLOCK.CHECK", "k", &t.to_string()]), 0);
        assert!(!waiter.has_reply(), "a grant was made during the pause");
        p.unpause();
        let reply = waiter.reply();
        let token: i64 = reply
            .strip_prefix(':')
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("the waiter got {reply}"));
        assert!(token > t);
        p.settles(&["k"], |c| {
            let info = info_raw(c, "k");
            info != Value::Nil && as_bytes(field(&holders(&info)[0], "owner")) == b"w"
        });
    }
}

/// `master_failover_state` of `INFO replication`.
fn failover_state(s: &Server) -> String {
    s.info_field("replication", "master_failover_state")
        .unwrap_or_default()
}

#[test]
fn a_failover_that_times_out_waiting_for_a_lagging_replica_leaves_the_master_up() {
    let mut master = Server::start_with(ServerOpts::new().args(["--appendonly", "yes"]));
    let replica = Server::start();
    replica.make_replica_of(&master);
    let mut c = master.conn();
    let t = int(&mut c, &["DLOCK.ACQUIRE", "k", "a", "PX", "100"]);
    wait_replica_synced(&master, &replica);
    // The replica cannot answer: the FAILOVER waits for its offset with
    // the master's clients paused, until the time-out.
    replica.pause();
    ok(&mut c, &["FAILOVER", "TIMEOUT", "2000"]);
    thread::sleep(IN_PAUSE);
    master.assert_alive();
    assert_ne!(
        failover_state(&master),
        "no-failover",
        "the failover ended early"
    );
    assert_eq!(int(&mut c, &["DLOCK.CHECK", "k", &t.to_string()]), 0);
    let aborted = wait_until(Duration::from_secs(10), || {
        failover_state(&master) == "no-failover"
    });
    assert!(aborted, "the failover never timed out");
    replica.resume();
    assert_eq!(
        master.info_field("replication", "role").as_deref(),
        Some("master")
    );
    let ended = wait_until(Duration::from_secs(10), || {
        info_raw(&mut c, "k") == Value::Nil
    });
    assert!(ended, "the lease never ended after the failover gave up");
    wait_replica_synced(&master, &replica);
    assert_eq!(info_raw(&mut replica.conn(), "k"), Value::Nil);
    master.assert_alive();
}

#[test]
fn a_failover_that_completes_after_a_lease_ended_during_its_pause() {
    let mut master = Server::start_with(ServerOpts::new().args(["--appendonly", "yes"]));
    let mut replica = Server::start();
    replica.make_replica_of(&master);
    let mut c = master.conn();
    int(&mut c, &["DLOCK.ACQUIRE", "k", "a", "PX", "100"]);
    int(&mut c, &["DLOCK.ACQUIRE", "long", "a", "PX", LONG]);
    wait_replica_synced(&master, &replica);
    replica.pause();
    ok(&mut c, &["FAILOVER", "TIMEOUT", "20000"]);
    thread::sleep(IN_PAUSE);
    master.assert_alive();
    replica.resume();
    // The replica catches up and takes over; the old master follows it
    // and drops what it held back.
    let swapped = wait_until(Duration::from_secs(20), || {
        replica.info_field("replication", "role").as_deref() == Some("master")
            && master.info_field("replication", "role").as_deref() == Some("slave")
    });
    assert!(
        swapped,
        "the failover did not complete: {}",
        master.info("replication")
    );
    let mut nc = replica.conn();
    let ended = wait_until(Duration::from_secs(10), || {
        info_raw(&mut nc, "k") == Value::Nil
    });
    assert!(ended, "the new master never ended the lease");
    wait_replica_synced(&replica, &master);
    assert_eq!(info_raw(&mut master.conn(), "k"), Value::Nil);
    assert_eq!(
        info_norm(&mut master.conn(), "long"),
        info_norm(&mut nc, "long")
    );
    thread::sleep(IN_PAUSE);
    master.assert_alive();
    replica.assert_alive();
}
