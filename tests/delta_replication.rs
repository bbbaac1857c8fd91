//! Delta replication (issue 16): with 2000 connections waiting on one lock,
//! every queue change (a waiter queueing, a handoff, a wait timing out, a
//! fair waiter keeping a queued place, a disconnect) reaches the replica and
//! the AOF as the change, not the whole queue — and the replica's
//! `DLOCK.INFO` equals the master's after every phase, as does the master's
//! own after a restart that replays the AOF.

mod common;
use common::*;

use std::time::Duration;

const N: usize = 2000;

/// A raw connection whose replies come within 20 s.
fn raw(server: &Server) -> RawConn {
    RawConn::new(server, Duration::from_secs(20))
}

fn waiting(con: &mut redis::Connection) -> u64 {
    info_field(con, "dlock", "dlock_waiting_clients")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn offset(con: &mut redis::Connection) -> u64 {
    info_field(con, "replication", "master_repl_offset")
        .and_then(|v| v.parse().ok())
        .expect("master_repl_offset")
}

fn same(master: &Server, replica: &Server, keys: &[&str], step: &str) {
    let acked = int(&mut master.conn(), &["WAIT", "1", "10000"]);
    assert_eq!(acked, 1, "{step}: the replica did not acknowledge");
    wait_replica_synced(master, replica);
    let (mut m, mut r) = (master.conn(), replica.conn());
    for k in keys {
        assert_eq!(
            info_norm(&mut r, k),
            info_norm(&mut m, k),
            "after {step}: the replica's DLOCK.INFO {k} differs from the master's"
        );
    }
}

#[test]
fn many_waiters_replicate_as_deltas_and_replay_from_the_aof() {
    let opts = || {
        ServerOpts::new()
            .module_args(["fair-queue-timeout-ms", "600000"])
            .args([
                "--maxclients",
                "10000",
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
            ])
    };
    let mut master = Server::start_with(opts());
    let replica = Server::start_with(opts());
    replica.make_replica_of(&master);
    let mut admin = master.conn();
    let keys = ["m", "f"];
    let _ = int(
        &mut admin,
        &["DLOCK.ACQUIRE", "m", "holder", "PX", "600000"],
    );
    let _ = int(
        &mut admin,
        &["DLOCK.FAIRACQUIRE", "f", "holder", "PX", "600000"],
    );

    // 2000 waiters on the mutex, one in ten with a short wait; 200 on the
    // fair lock, half with a short wait (they keep a queued place).
    let mut conns: Vec<(RawConn, String, bool)> = (0..N)
        .map(|i| {
            let mut c = raw(&master);
            let owner = format!("w{i}");
            let short = i % 10 == 3;
            let wait = if short { "5000" } else { "600000" };
            c.send(&["DLOCK.ACQUIRE", "m", &owner, "PX", "600000", "WAIT", wait]);
            (c, owner, short)
        })
        .collect();
    let mut fair: Vec<RawConn> = (0..200)
        .map(|i| {
            let mut c = raw(&master);
            let wait = if i % 2 == 0 { "5000" } else { "600000" };
            c.send(&["DLOCK.FAIRACQUIRE", "f", &format!("q{i}"), "WAIT", wait]);
            c
        })
        .collect();
    assert!(
        wait_until(Duration::from_secs(30), || waiting(&mut admin)
            == (N + 200) as u64),
        "the waiters did not all block"
    );
    same(&master, &replica, &keys, "2200 waiters queued");

    // The short waits end: mutex places go, fair ones stay as queued places.
    for (c, _, short) in conns.iter_mut().filter(|c| c.2) {
        assert_eq!(c.reply(), "nil", "a short wait on the mutex");
        *short = true;
    }
    for c in fair.iter_mut().step_by(2) {
        assert_eq!(c.reply(), "nil", "a short wait on the fair lock");
    }
    same(&master, &replica, &keys, "waits timed out");

    // 200 handoffs, each granted waiter releasing and queueing again at the
    // back: the replication stream grows by the change, not the queue.
    let before = offset(&mut admin);
    let _ = int(&mut admin, &["DLOCK.RELEASE", "m", "holder"]);
    let mut order: Vec<usize> = (0..N).filter(|&i| !conns[i].2).collect();
    for round in 0..200 {
        let i = order[round];
        let (c, owner, _) = &mut conns[i];
        assert!(c.reply().starts_with(':'), "round {round}: not granted");
        let owner = owner.clone();
        c.send(&["DLOCK.RELEASE", "m", &owner]);
        c.send(&[
            "DLOCK.ACQUIRE",
            "m",
            &owner,
            "PX",
            "600000",
            "WAIT",
            "600000",
        ]);
        assert_eq!(c.reply(), ":1");
        order.push(i);
    }
    let per_handoff = (offset(&mut admin) - before) / 200;
    eprintln!("{per_handoff} replication bytes per handoff cycle with 1800 waiters");
    // The whole state of a 1800-waiter queue is ~20 kB per APPLY.
    assert!(
        per_handoff < 1000,
        "{per_handoff} replication bytes per handoff with 1800 waiters"
    );
    same(&master, &replica, &keys, "200 handoffs");

    // 300 waiters disconnect, from anywhere in the queue (`order[200]`
    // holds the lock now).
    let gone: Vec<usize> = order[201..].iter().copied().step_by(6).take(300).collect();
    let waiting_before = waiting(&mut admin);
    for &i in &gone {
        let (c, _, _) = &mut conns[i];
        c.close();
    }
    assert!(
        wait_until(Duration::from_secs(20), || waiting(&mut admin)
            == waiting_before - gone.len() as u64),
        "the closed waiters did not leave"
    );
    // Their places leave by a prune job: wait until INFO shows it.
    let want = N - N / 10 - 1 - gone.len();
    assert!(
        wait_until(Duration::from_secs(20), || waiters(&info_raw(
            &mut admin, "m"
        ))
        .len()
            == want),
        "the closed waiters' places did not leave"
    );
    same(&master, &replica, &keys, "300 disconnects");

    // The fair lock's holder releases: the head (a queued place) must ask
    // again; nobody is granted on the server. Then everyone still waiting
    // on the mutex gives up (closes), leaving holds and queued places only.
    let _ = int(&mut admin, &["DLOCK.RELEASE", "f", "holder"]);
    drop(fair);
    drop(conns);
    assert!(
        wait_until(Duration::from_secs(20), || waiting(&mut admin) == 0
            && waiters(&info_raw(&mut admin, "m")).is_empty()
            && waiters(&info_raw(&mut admin, "f")).len() == 100),
        "the waiters did not leave: {} waiting, {} on m, {} on f",
        waiting(&mut admin),
        waiters(&info_raw(&mut admin, "m")).len(),
        waiters(&info_raw(&mut admin, "f")).len()
    );
    same(&master, &replica, &keys, "all connections closed");
    let before: Vec<_> = keys.iter().map(|k| info_norm(&mut admin, k)).collect();

    // A crash and a restart from the AOF (every change above is in its
    // command log, the queue edits as deltas): the same state.
    drop(admin);
    master.restart();
    let mut admin = master.conn();
    let after: Vec<_> = keys.iter().map(|k| info_norm(&mut admin, k)).collect();
    assert_eq!(
        after, before,
        "the AOF replay differs from the state before"
    );
}
