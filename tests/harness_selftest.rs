//! Self-test of the shared harness in tests/common, against plain redis-server
//! processes with no module loaded (so it runs before the module builds).

mod common;
use common::*;

use std::path::Path;
use std::time::Duration;

use redis::{Commands, Value};

fn plain() -> ServerOpts {
    ServerOpts {
        module: false,
        ..Default::default()
    }
}

fn pid_alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

#[test]
fn start_stop_and_drop_kill_the_process() {
    let mut s = Server::start_with(plain());
    let mut con = s.conn();
    let _: () = con.set("k", "v").unwrap();
    assert_eq!(con.get::<_, String>("k").unwrap(), "v");
    assert!(s.dir.is_dir());
    assert!(s.log_path().is_file());
    assert!(pid_alive(s.pid));
    assert!(s.is_running());
    s.assert_alive();
    s.stop();
    assert!(!pid_alive(s.pid));
    assert!(!s.is_running());
    drop(s);

    let s = Server::start_with(plain());
    let (pid, dir) = (s.pid, s.dir.clone());
    assert!(pid_alive(pid));
    drop(s);
    assert!(!pid_alive(pid), "Drop must kill the server");
    assert!(!dir.exists(), "Drop must remove the test dir");
}

#[test]
fn drop_kills_even_when_the_test_panics() {
    let (tx, rx) = std::sync::mpsc::channel();
    let res = std::thread::spawn(move || {
        let s = Server::start_with(plain());
        tx.send((s.pid, s.dir.clone())).unwrap();
        panic!("simulated test failure");
    })
    .join();
    assert!(res.is_err());
    let (pid, dir) = rx.recv().unwrap();
    assert!(!pid_alive(pid));
    assert!(!dir.exists());
}

#[test]
fn drop_fails_the_test_when_the_server_died_on_its_own() {
    let s = Server::start_with(plain());
    let st = std::process::Command::new("kill")
        .args(["-KILL", &s.pid.to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let mut s = s;
    assert!(wait_until(Duration::from_secs(10), || !s.is_running()));
    let died = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(s)));
    assert!(died.is_err(), "an unexpected exit must be reported");
}

#[test]
fn default_and_user_args() {
    let s = Server::start_with(plain());
    let mut con = s.conn();
    let save: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("save")
        .query(&mut con)
        .unwrap();
    assert_eq!(save, vec!["save".to_string(), String::new()]);
    let dir: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("dir")
        .query(&mut con)
        .unwrap();
    assert!(dir[1].contains("dlock-tests"), "{dir:?}");

    // User args come last and override the defaults.
    let s = Server::start_with(plain().args(["--save", "900 1", "--maxmemory", "10mb"]));
    let mut con = s.conn();
    let save: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("save")
        .query(&mut con)
        .unwrap();
    assert_eq!(save[1], "900 1");
    assert_eq!(
        s.info_field("memory", "maxmemory").as_deref(),
        Some("10485760")
    );
}

#[test]
fn restart_preserves_data_after_shutdown_save() {
    let mut s = Server::start_with(plain());
    let port = s.port;
    let _: () = s.conn().set("persisted", "yes").unwrap();
    let old_pid = s.pid;
    s.shutdown_save();
    assert!(!pid_alive(old_pid));
    assert!(s.dir.join("dump.rdb").is_file());
    s.restart();
    assert_eq!(s.port, port);
    assert_ne!(s.pid, old_pid);
    assert_eq!(s.conn().get::<_, String>("persisted").unwrap(), "yes");
    assert_eq!(s.info_field("persistence", "loading").as_deref(), Some("0"));
}

#[test]
fn restart_after_crash_loads_the_aof() {
    let mut s = Server::start_with(plain().args(["--appendonly", "yes"]));
    let _: () = s.conn().set("aof", "1").unwrap();
    s.restart(); // SIGKILL, then start again
    assert_eq!(s.conn().get::<_, String>("aof").unwrap(), "1");
}

#[test]
fn replica_sync() {
    let master = Server::start_with(plain());
    let replica = Server::start_with(plain());
    let mut m = master.conn();
    let _: () = m.set("before", "1").unwrap();
    replica.make_replica_of(&master);
    let mut r = replica.conn();
    assert_eq!(r.get::<_, String>("before").unwrap(), "1");
    for i in 0..200 {
        let _: () = m.set(format!("k{i}"), i).unwrap();
    }
    wait_replica_synced(&master, &replica);
    assert_eq!(r.get::<_, i64>("k199").unwrap(), 199);
    assert_eq!(
        replica.info_field("replication", "role").as_deref(),
        Some("slave")
    );
    // Writes on a read-only replica are refused.
    let e = expect_err(cmd_str(&mut r, &["SET", "x", "1"]));
    assert!(e.starts_with("READONLY "), "{e}");
}

#[test]
fn subscriber_receives_published_messages() {
    let s = Server::start_with(plain());
    let mut sub = Subscriber::new(&s, b"dlock:{lock}");
    let mut con = s.conn();
    sub.expect_none(Duration::from_millis(50));
    let n: i64 = con.publish("dlock:{lock}", "released").unwrap();
    assert_eq!(n, 1);
    assert_eq!(
        sub.next_message(Duration::from_secs(5)),
        Some((b"dlock:{lock}".to_vec(), b"released".to_vec()))
    );
    // Other channels are not delivered; a timeout loses nothing.
    let _: i64 = con.publish("other", "x").unwrap();
    sub.expect_none(Duration::from_millis(100));
    let _: i64 = con.publish("dlock:{lock}", b"\x00bin\r\n").unwrap();
    let _: i64 = con.publish("dlock:{lock}", "expired").unwrap();
    assert_eq!(sub.expect_message(Duration::from_secs(5)).1, b"\x00bin\r\n");
    assert_eq!(sub.expect_message(Duration::from_secs(5)).1, b"expired");

    sub.subscribe(b"second");
    let _: i64 = con.publish("second", "hello").unwrap();
    assert_eq!(
        sub.expect_message(Duration::from_secs(5)),
        (b"second".to_vec(), b"hello".to_vec())
    );

    let mut psub = Subscriber::new_pattern(&s, b"dlock:*");
    let _: i64 = con.publish("dlock:{a}", "deleted").unwrap();
    assert_eq!(
        psub.expect_message(Duration::from_secs(5)),
        (b"dlock:{a}".to_vec(), b"deleted".to_vec())
    );
}

#[test]
fn err_string_reconstructs_the_server_error() {
    let s = Server::start_with(plain());
    let mut con = s.conn();

    let e = expect_err(cmd_str(&mut con, &["FOO", "bar"]));
    assert_eq!(
        e,
        "ERR unknown command 'FOO', with args beginning with: 'bar' "
    );
    let e = expect_err(cmd_str(&mut con, &["GET"]));
    assert_eq!(e, "ERR wrong number of arguments for 'get' command");

    let e = expect_err(cmd_str(
        &mut con,
        &["EVAL", "return redis.error_reply('NOTHELD x y')", "0"],
    ));
    assert_eq!(e, "NOTHELD x y");
    let r: redis::RedisResult<Value> = redis::cmd("EVAL")
        .arg("return redis.error_reply('WRONGKIND the lock is an rw lock')")
        .arg(0)
        .query(&mut con);
    assert_eq!(
        err_string(&r.unwrap_err()),
        "WRONGKIND the lock is an rw lock"
    );

    let _: () = con.set("str", "v").unwrap();
    let e = expect_err(cmd_str(&mut con, &["LPUSH", "str", "x"]));
    assert_eq!(
        e,
        "WRONGTYPE Operation against a key holding the wrong kind of value"
    );

    // Binary-safe arguments and raw replies.
    assert_eq!(
        cmd_raw(&mut con, &[b"SET", b"b\x00in", b"\xff\r\n"]).unwrap(),
        Value::Okay
    );
    assert_eq!(
        cmd_raw(&mut con, &[b"GET", b"b\x00in"]).unwrap(),
        Value::BulkString(b"\xff\r\n".to_vec())
    );
    assert_eq!(cmd_str(&mut con, &["GET", "missing"]).unwrap(), Value::Nil);

    // Errors inside EXEC stay in the array.
    assert_eq!(cmd_str(&mut con, &["MULTI"]).unwrap(), Value::Okay);
    cmd_str(&mut con, &["LPUSH", "str", "x"]).unwrap();
    cmd_str(&mut con, &["GET", "str"]).unwrap();
    match cmd_str(&mut con, &["EXEC"]).unwrap() {
        Value::Array(items) => {
            assert_eq!(
                value_err_string(&items[0]).as_deref(),
                Some("WRONGTYPE Operation against a key holding the wrong kind of value")
            );
            assert_eq!(items[1], Value::BulkString(b"v".to_vec()));
        }
        other => panic!("unexpected EXEC reply {other:?}"),
    }
}

#[test]
fn pause_and_resume() {
    let s = Server::start_with(plain());
    let con = s.conn_with_timeout(Some(Duration::from_millis(200)));
    let mut con = con;
    s.pause();
    let r: redis::RedisResult<String> = redis::cmd("PING").query(&mut con);
    assert!(r.is_err(), "a paused server must not answer");
    s.resume();
    let mut fresh = s.conn();
    let pong: String = redis::cmd("PING").query(&mut fresh).unwrap();
    assert_eq!(pong, "PONG");
}

#[test]
fn parallel_starts_get_distinct_servers() {
    let handles: Vec<_> = (0..6)
        .map(|_| {
            std::thread::spawn(|| {
                let s = Server::start_with(plain());
                let pid: String = s.info_field("server", "process_id").unwrap();
                assert_eq!(pid, s.pid.to_string());
                s.port
            })
        })
        .collect();
    let mut ports: Vec<u16> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    ports.sort();
    ports.dedup();
    assert_eq!(ports.len(), 6);
}

#[test]
fn cluster_mode_starts() {
    let s = Server::start_with(plain().cluster(true));
    assert!(s.cluster_port.is_some());
    assert_eq!(
        s.info_field("cluster", "cluster_enabled").as_deref(),
        Some("1")
    );
}

#[test]
fn wait_until_polls() {
    let mut n = 0;
    assert!(wait_until(Duration::from_secs(1), || {
        n += 1;
        n >= 3
    }));
    assert!(!wait_until(Duration::from_millis(20), || false));
}
