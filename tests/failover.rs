//! Tokens across promotion (`dlock.promotion-gap-ms`): a replica cut off
//! from its master misses the last grants; once promoted, its first token
//! still exceeds every token the old master issued — also when its clock is
//! minutes behind (the test-only `dlock.test-clock-offset-ms`), and not
//! with a gap of 0 (so the test can see the failure). The raised floor
//! reaches the new master's replicas and survives a restart from AOF and
//! from RDB; `INFO dlock` counts promotions.
//!
//! How a replica misses grants, honestly: it is frozen (SIGSTOP), the master
//! drops its replication links (`CLIENT KILL TYPE replica`: what a network
//! partition does to them), the master grants, then dies (SIGKILL); the
//! replica is continued and promoted (`REPLICAOF NO ONE`). The grants made
//! after the cut never left the master.

mod common;
use common::*;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

const LONG: &str = "600000";
/// The default gap, in µs.
const GAP_US: i64 = 3_600_000 * 1000;

fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

fn acquire(s: &Server, key: &str, owner: &str) -> i64 {
    int(&mut s.conn(), &["DLOCK.ACQUIRE", key, owner, "PX", LONG])
}

fn promotions(s: &Server) -> i64 {
    s.info_field("dlock", "dlock_promotions")
        .and_then(|v| v.parse().ok())
        .unwrap_or(-1)
}

/// Freezes `replicas` and cuts their replication links at `master`: what
/// the master does from now on never reaches them.
fn cut_off(master: &Server, replicas: &[&Server]) {
    for r in replicas {
        r.pause();
    }
    let mut con = master.conn();
    ok(&mut con, &["CLIENT", "KILL", "TYPE", "replica"]);
    let connected = wait_until(SYNC_TIMEOUT, || {
        master
            .info_field("replication", "connected_slaves")
            .as_deref()
            == Some("0")
    });
    assert!(connected, "master still lists replicas after CLIENT KILL");
}

/// Kills `master` (SIGKILL) and continues the frozen `replicas`.
fn lose_master(master: &mut Server, replicas: &[&Server]) {
    master.stop();
    for r in replicas {
        r.resume();
    }
}

fn promote(s: &Server) {
    ok(&mut s.conn(), &["REPLICAOF", "NO", "ONE"]);
    let up = wait_until(SYNC_TIMEOUT, || {
        s.info_field("replication", "role").as_deref() == Some("master")
    });
    assert!(up, "{} never became a master", s.port);
}

/// Grants on `master` that `replicas` never see; returns the highest token.
fn lost_grants(master: &Server, replicas: &[&Server]) -> i64 {
    cut_off(master, replicas);
    let mut con = master.conn();
    let mut top = 0;
    for i in 0..5 {
        let key = format!("lost{i}");
        top = top.max(int(&mut con, &["DLOCK.ACQUIRE", &key, "old", "PX", LONG]));
    }
    top
}

#[test]
fn promotion_raises_the_token_floor_and_keeps_it() {
    let mut master = Server::start();
    let mut r1 = Server::start_with(ServerOpts::new().args(["--appendonly", "yes"]));
    let r2 = Server::start();
    r1.make_replica_of(&master);
    r2.make_replica_of(&master);
    let seen = acquire(&master, "seen", "a");
    wait_replica_synced(&master, &r1);
    wait_replica_synced(&master, &r2);
    assert_eq!(promotions(&r1), 0);

    let lost = lost_grants(&master, &[&r1, &r2]);
    assert!(lost > seen);
    lose_master(&mut master, &[&r1, &r2]);

    let before = now_us();
    promote(&r1);
    assert_eq!(promotions(&r1), 1, "INFO dlock counts the promotion");
    // r2 follows the new master (a partial resync: both missed the same).
    r2.make_replica_of(&r1);

    // r2 received the raised floor: promoted with gap 0, its first token is
    // still an hour ahead of the clock.
    let mut c2 = r2.conn();
    ok(&mut c2, &["CONFIG", "SET", "dlock.promotion-gap-ms", "0"]);
    promote(&r2);
    let t2 = acquire(&r2, "other", "c");
    assert!(
        t2 >= before + GAP_US,
        "r2's token {t2} does not carry r1's floor (>= {})",
        before + GAP_US
    );

    // Restart r1 from its AOF before it grants anything: the floor-only
    // effect in the AOF keeps it. (A replica that turned its AOF on after
    // its sync writes to a temporary file until that rewrite is done: wait.)
    let written = wait_until(SYNC_TIMEOUT, || {
        let p = parse_info(&r1.info("persistence"));
        p.get("aof_rewrite_in_progress").map(String::as_str) == Some("0")
            && p.get("aof_rewrite_scheduled").map(String::as_str) == Some("0")
    });
    assert!(written, "r1's AOF rewrite never finished");
    r1.restart();
    let t1 = acquire(&r1, "fresh", "b");
    assert!(t1 > lost, "first token after promotion {t1} <= lost {lost}");
    assert!(
        t1 >= before + GAP_US,
        "token {t1} not a gap above the clock at promotion"
    );
    assert!(t1 > seen + GAP_US);

    // From RDB: release everything, save, restart without the AOF.
    let mut c1 = r1.conn();
    for key in ["fresh", "seen"] {
        let _ = cmd_str(&mut c1, &["DLOCK.FORCERELEASE", key]);
    }
    assert_eq!(int(&mut c1, &["DBSIZE"]), 0);
    ok(&mut c1, &["SAVE"]);
    drop(c1);
    r1.opts.args.clear();
    r1.restart();
    let t3 = acquire(&r1, "again", "b");
    assert!(t3 > t1, "after an RDB restart: {t3} <= {t1}");
}

/// `SENTINEL`-less failover by hand on a replica whose clock is five
/// minutes behind the old master's: with the default gap its tokens still
/// exceed the lost ones; with a gap of 0 they do not (the test can see the
/// failure it guards against).
fn clock_behind(gap_ms: &str) -> (i64, i64) {
    let mut master = Server::start();
    let replica = Server::start_with(ServerOpts::new().module_args([
        "test-clock-offset-ms",
        "-300000",
        "promotion-gap-ms",
        gap_ms,
    ]));
    replica.make_replica_of(&master);
    acquire(&master, "seen", "a");
    wait_replica_synced(&master, &replica);
    let lost = lost_grants(&master, &[&replica]);
    lose_master(&mut master, &[&replica]);
    promote(&replica);
    (lost, acquire(&replica, "fresh", "b"))
}

#[test]
fn a_clock_minutes_behind_still_issues_larger_tokens() {
    let (lost, first) = clock_behind("3600000");
    assert!(first > lost, "first token {first} <= lost token {lost}");
}

#[test]
fn with_no_gap_a_clock_behind_issues_smaller_tokens() {
    let (lost, first) = clock_behind("0");
    assert!(
        first < lost,
        "expected the failure the gap prevents: {first} >= {lost}"
    );
}

#[test]
fn configs_gap_settable_clock_offset_immutable() {
    let s = Server::start_with(ServerOpts::new().module_args(["test-clock-offset-ms", "-5000"]));
    let mut con = s.conn();
    ok(
        &mut con,
        &["CONFIG", "SET", "dlock.promotion-gap-ms", "1000"],
    );
    let v = ok(&mut con, &["CONFIG", "GET", "dlock.promotion-gap-ms"]);
    assert!(format!("{v:?}").contains("1000"), "{v:?}");
    let e = expect_err(cmd_str(
        &mut con,
        &["CONFIG", "SET", "dlock.test-clock-offset-ms", "0"],
    ));
    // A load-time config: CONFIG SET refuses a change (the same value
    // passes, for CONFIG GET * / SET round trips: tests/citizen.rs).
    assert!(e.contains("read only when the module loads"), "{e}");
    // The offset moves the clock the module reads: a lease's absolute end.
    let before = now_us() / 1000;
    ok(&mut con, &["DLOCK.ACQUIRE", "k", "o", "PX", "60000"]);
    let info = format!("{:?}", ok(&mut con, &["DLOCK.INFO", "k"]));
    let at = info
        .split("expires_at")
        .nth(1)
        .and_then(|t| {
            t.chars()
                .skip_while(|c| !c.is_ascii_digit())
                .take_while(char::is_ascii_digit)
                .collect::<String>()
                .parse::<i64>()
                .ok()
        })
        .unwrap_or_else(|| panic!("no expires_at in {info}"));
    let want = before + 60000 - 5000;
    assert!(
        (want - 2000..=want + 30_000).contains(&at),
        "expires_at {at} not about {want}"
    );
    let _ = Duration::ZERO;
}

/// `CLUSTER FAILOVER` fires the same role change: the promoted replica counts
/// it and its tokens jump the gap; failing back keeps tokens growing.
#[test]
fn cluster_failover_raises_the_floor() {
    let c = Cluster::start(1, 1);
    let (master, replica) = (0, 1);
    let key = "{f}lock";
    let mut mc = c.nodes[master].conn();
    let seen = int(&mut mc, &["DLOCK.ACQUIRE", key, "a", "PX", LONG]);
    wait_replica_synced(&c.nodes[master], &c.nodes[replica]);
    let before = now_us();
    ok(&mut c.nodes[replica].conn(), &["CLUSTER", "FAILOVER"]);
    let promoted = wait_until(CLUSTER_TIMEOUT, || {
        node_is_master(&c.nodes[replica]) && !node_is_master(&c.nodes[master])
    });
    assert!(promoted, "replica was not promoted");
    c.wait_healthy();
    assert_eq!(promotions(&c.nodes[replica]), 1);
    let mut pc = c.nodes[replica].conn();
    int(&mut pc, &["DLOCK.RELEASE", key, "a"]);
    let t = int(&mut pc, &["DLOCK.ACQUIRE", key, "b", "PX", LONG]);
    assert!(t >= before + GAP_US && t > seen + GAP_US, "{t}");
    // Back to the old master (with no gap): tokens keep growing.
    wait_replica_synced(&c.nodes[replica], &c.nodes[master]);
    let mut oc = c.nodes[master].conn();
    ok(&mut oc, &["CONFIG", "SET", "dlock.promotion-gap-ms", "0"]);
    ok(&mut oc, &["CLUSTER", "FAILOVER"]);
    let back = wait_until(CLUSTER_TIMEOUT, || node_is_master(&c.nodes[master]));
    assert!(back, "old master was not promoted back");
    c.wait_healthy();
    int(&mut oc, &["DLOCK.RELEASE", key, "b"]);
    let t2 = int(&mut oc, &["DLOCK.ACQUIRE", key, "c", "PX", LONG]);
    assert!(t2 > t, "{t2} <= {t}");
}

/// A promotion's prune of the old master's waiters runs by a job at the
/// next turn of the new master's event loop; a command that reaches the new
/// master first (here: in the same pipeline as `REPLICAOF NO ONE`) drops
/// them itself. Before, an acquire that found the old holder's lease over
/// queued behind the old master's waiter, whose connection this server
/// never had, and the prune, which walks the locks with deadlines only,
/// missed the lock: it waited for good (found by the simulator: finding A).
#[test]
fn a_command_before_the_promotions_prune_is_not_queued_behind_a_dead_waiter() {
    let master = Server::start();
    let mut replica = Server::start();
    replica.make_replica_of(&master);
    let lease = Duration::from_millis(2000);
    let granted = std::time::Instant::now();
    let t = int(
        &mut master.conn(),
        &["DLOCK.ACQUIRE", "k", "a", "PX", "2000"],
    );
    assert!(t > 0);
    let waiter = spawn_blocking(
        master.port,
        &["DLOCK.ACQUIRE", "k", "w", "PX", "60000", "WAIT", "30000"],
    );
    wait_waiting(&master, 1);
    wait_replica_synced(&master, &replica);
    // The master is cut off (frozen) while `a` holds and `w` waits; the
    // replica has both.
    master.pause();
    let info = info_raw(&mut replica.conn(), "k");
    assert_eq!(
        waiters(&info).len(),
        1,
        "the replica has w's place: {info:?}"
    );
    if let Some(left) = lease.checked_sub(granted.elapsed()) {
        std::thread::sleep(left + Duration::from_millis(100));
    }
    let mut c = RawConn::new(&replica, Duration::from_secs(20));
    c.send(&["REPLICAOF", "NO", "ONE"]);
    c.send(&["DLOCK.ACQUIRE", "k", "x", "PX", "10000", "WAIT", "3000"]);
    let started = std::time::Instant::now();
    let replies: Vec<String> = (0..2).map(|_| c.reply()).collect();
    master.resume();
    assert_eq!(replies[0], "+OK", "{replies:?}");
    assert!(
        replies[1].starts_with(':'),
        "x waited behind the old master's waiter and got {} after {:?}",
        replies[1],
        started.elapsed()
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    let _ = waiter.join();
    replica.assert_alive();
}
