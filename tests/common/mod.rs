//! Shared harness for dlock's integration tests.
//!
//! Every test file does `mod common; use common::*;` and starts its own
//! `redis-server` processes on free loopback ports, each in its own temporary
//! directory. [`Server`]'s `Drop` kills the process and removes the directory,
//! also when the test panics, so tests never leak servers.
//!
//! Environment:
//! - `DLOCK_MODULE`: path of the module to load (default
//!   `<manifest>/target/release/libdlock.so`, or under `$CARGO_TARGET_DIR`).
//! - `REDIS_SERVER`: the redis-server binary (default `redis-server` on PATH).
//! - `DLOCK_KEEP_TEST_DIRS`: when set, test directories (data, redis.log) are kept.
#![allow(dead_code)]

use std::collections::{HashMap, VecDeque};
use std::fs::{self, OpenOptions};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use redis::{RedisError, RedisResult, Value};

mod lockinfo;
#[allow(unused_imports)]
pub use lockinfo::*;
mod sentinel;
#[allow(unused_imports)]
pub use sentinel::*;

/// How long a started server may take to answer PING (and finish loading).
pub const START_TIMEOUT: Duration = Duration::from_secs(20);
/// Read/write timeout of connections handed out by [`Server::conn`], so that a
/// hung command fails the test instead of hanging it forever.
pub const CONN_TIMEOUT: Duration = Duration::from_secs(30);
/// Upper bound for replication to catch up in [`wait_replica_synced`].
pub const SYNC_TIMEOUT: Duration = Duration::from_secs(20);

static DIR_COUNTER: AtomicUsize = AtomicUsize::new(0);

// ---------------------------------------------------------------------------
// Paths and ports
// ---------------------------------------------------------------------------

/// The workspace root: the nearest ancestor of this crate's directory whose
/// Cargo.toml declares `[workspace]` (so member crates, e.g. dlock-client,
/// find the same build as the root crate).
pub fn workspace_dir() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest
        .ancestors()
        .find(|d| fs::read_to_string(d.join("Cargo.toml")).is_ok_and(|t| t.contains("[workspace]")))
        .map(Path::to_path_buf)
        .unwrap_or(manifest)
}

/// `$CARGO_TARGET_DIR` (relative to the workspace root) or `<workspace>/target`.
pub fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(t) if !t.is_empty() => workspace_dir().join(t),
        _ => workspace_dir().join("target"),
    }
}

/// Path of the dlock module: `$DLOCK_MODULE` if set, else
/// `<target_dir()>/release/libdlock.so`.
/// Panics (with the command to run) when the file does not exist.
pub fn module_path() -> PathBuf {
    let path = match std::env::var_os("DLOCK_MODULE") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => target_dir().join("release").join("libdlock.so"),
    };
    if !path.is_file() {
        panic!(
            "dlock module not found at {}: run `cargo build --release` (or `make test`) first, \
             or set DLOCK_MODULE to the module's path",
            path.display()
        );
    }
    path
}

/// The redis-server binary: `$REDIS_SERVER` or `redis-server` from PATH.
pub fn redis_server_bin() -> PathBuf {
    match std::env::var_os("REDIS_SERVER") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => PathBuf::from("redis-server"),
    }
}

/// A currently free TCP port on 127.0.0.1 (bind to port 0, read it, drop the
/// listener). Another process may grab it before we use it; [`Server::start_with`]
/// retries on a new port when redis-server fails to bind.
pub fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    listener.local_addr().expect("local_addr").port()
}

/// Polls `f` every ~5 ms until it returns true (then returns true) or until
/// `timeout` has passed (then returns the result of one last call).
pub fn wait_until(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if f() {
            return true;
        }
        if Instant::now() >= deadline {
            return f();
        }
        thread::sleep(Duration::from_millis(5));
    }
}

/// The last `n` lines of a text file (lossy UTF-8), or a note that it is unreadable.
pub fn file_tail(path: &Path, n: usize) -> String {
    match fs::read(path) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            let lines: Vec<&str> = text.lines().collect();
            let start = lines.len().saturating_sub(n);
            lines[start..].join("\n")
        }
        Err(e) => format!("<cannot read {}: {e}>", path.display()),
    }
}

// ---------------------------------------------------------------------------
// Server options
// ---------------------------------------------------------------------------

/// How to start a [`Server`].
#[derive(Clone, Debug)]
pub struct ServerOpts {
    /// Load the dlock module (default true).
    pub module: bool,
    /// Arguments appended after the module path in `--loadmodule`
    /// (e.g. `["default-lease-ms", "100"]`).
    pub module_args: Vec<String>,
    /// Extra redis-server arguments, passed last so they override the
    /// harness defaults (e.g. `["--appendonly", "yes"]`).
    pub args: Vec<String>,
    /// Start with `--cluster-enabled yes` (own nodes.conf and a free bus port).
    pub cluster: bool,
    /// A program the server runs under, with its arguments, e.g.
    /// `["valgrind", "--tool=callgrind"]` (empty: none). It must keep the
    /// server's process id (as valgrind does): the harness checks it, and
    /// stops the server by it.
    pub wrapper: Vec<String>,
}

impl Default for ServerOpts {
    fn default() -> Self {
        ServerOpts {
            module: true,
            module_args: Vec::new(),
            args: Vec::new(),
            cluster: false,
            wrapper: Vec::new(),
        }
    }
}

impl ServerOpts {
    pub fn new() -> Self {
        Self::default()
    }
    /// Do not load the module (plain redis-server).
    pub fn no_module(mut self) -> Self {
        self.module = false;
        self
    }
    pub fn module_arg(mut self, a: impl Into<String>) -> Self {
        self.module_args.push(a.into());
        self
    }
    pub fn module_args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.module_args.extend(args.into_iter().map(Into::into));
        self
    }
    pub fn arg(mut self, a: impl Into<String>) -> Self {
        self.args.push(a.into());
        self
    }
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }
    pub fn cluster(mut self, on: bool) -> Self {
        self.cluster = on;
        self
    }
    /// Runs the server under `wrapper` (see [`ServerOpts::wrapper`]).
    pub fn wrapper<I, S>(mut self, wrapper: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.wrapper = wrapper.into_iter().map(Into::into).collect();
        self
    }
}

// ---------------------------------------------------------------------------
// Server
// ---------------------------------------------------------------------------

/// One redis-server process on 127.0.0.1, owned by a test.
///
/// `Drop` SIGKILLs it if still running and removes `dir` (unless
/// `DLOCK_KEEP_TEST_DIRS` is set). If the server died on its own (a crash,
/// e.g. a module panic aborting Redis) and the test did not call
/// [`Server::stop`], [`Server::shutdown_save`] or [`Server::wait_exit`],
/// `Drop` fails the test with the tail of redis.log.
pub struct Server {
    pub port: u16,
    pub dir: PathBuf,
    /// PID of the current (or last) process.
    pub pid: u32,
    /// Cluster bus port when `opts.cluster`.
    pub cluster_port: Option<u16>,
    pub opts: ServerOpts,
    child: Option<Child>,
    exit_expected: bool,
}

enum SpawnError {
    /// redis-server could not bind its port(s): retry elsewhere.
    AddrInUse(String),
    Other(String),
}

impl Server {
    /// Starts redis-server with the dlock module loaded.
    pub fn start() -> Server {
        Self::start_with(ServerOpts::default())
    }

    /// Starts redis-server with `opts` on a free port, retrying on a new port
    /// when the chosen one was taken in the meantime. Panics with the tail of
    /// redis.log if the server exits or does not become ready.
    pub fn start_with(opts: ServerOpts) -> Server {
        // Resolve the module first so a missing build fails with a clear message.
        if opts.module {
            module_path();
        }
        let mut last_err = String::new();
        for _attempt in 0..10 {
            let port = free_port();
            let cluster_port = if opts.cluster {
                let mut p = free_port();
                while p == port {
                    p = free_port();
                }
                Some(p)
            } else {
                None
            };
            let dir = std::env::temp_dir().join("dlock-tests").join(format!(
                "{}-{}-{}",
                std::process::id(),
                DIR_COUNTER.fetch_add(1, Ordering::SeqCst),
                port
            ));
            let _ = fs::remove_dir_all(&dir);
            fs::create_dir_all(&dir)
                .unwrap_or_else(|e| panic!("create test dir {}: {e}", dir.display()));
            let mut server = Server {
                port,
                dir,
                pid: 0,
                cluster_port,
                opts: opts.clone(),
                child: None,
                exit_expected: false,
            };
            match server.spawn_and_wait() {
                Ok(()) => return server,
                Err(SpawnError::AddrInUse(msg)) => {
                    last_err = msg;
                    // `server` is dropped here: process gone, dir removed.
                    continue;
                }
                Err(SpawnError::Other(msg)) => {
                    drop(server); // clean up before panicking (msg has the log tail)
                    panic!("{msg}");
                }
            }
        }
        panic!("could not start redis-server on a free port after 10 attempts:\n{last_err}");
    }

    /// The full redis-server command line (without the binary).
    pub fn command_args(&self) -> Vec<String> {
        let mut a: Vec<String> = vec![
            "--port".into(),
            self.port.to_string(),
            "--bind".into(),
            "127.0.0.1".into(),
            "--dir".into(),
            self.dir.display().to_string(),
            "--save".into(),
            "".into(),
            "--appendonly".into(),
            "no".into(),
            "--enable-debug-command".into(),
            "yes".into(),
            "--daemonize".into(),
            "no".into(),
            "--logfile".into(),
            self.log_path().display().to_string(),
            // Full syncs start at once instead of after the default 5 s delay.
            "--repl-diskless-sync-delay".into(),
            "0".into(),
        ];
        if let Some(bus) = self.cluster_port {
            a.extend([
                "--cluster-enabled".into(),
                "yes".into(),
                "--cluster-config-file".into(),
                self.dir.join("nodes.conf").display().to_string(),
                "--cluster-port".into(),
                bus.to_string(),
            ]);
        }
        if self.opts.module {
            a.push("--loadmodule".into());
            a.push(module_path().display().to_string());
            a.extend(self.opts.module_args.iter().cloned());
        }
        a.extend(self.opts.args.iter().cloned());
        a
    }

    fn spawn_and_wait(&mut self) -> Result<(), SpawnError> {
        let out = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("stdout.log"))
            .map_err(|e| SpawnError::Other(format!("open stdout.log: {e}")))?;
        let err = out
            .try_clone()
            .map_err(|e| SpawnError::Other(format!("clone stdout.log: {e}")))?;
        let bin = redis_server_bin();
        let mut command = match self.opts.wrapper.split_first() {
            Some((program, args)) => {
                let mut c = Command::new(program);
                c.args(args).arg(&bin);
                c
            }
            None => Command::new(&bin),
        };
        let child = command
            .args(self.command_args())
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| {
                let program = self
                    .opts
                    .wrapper
                    .first()
                    .map_or(bin.display().to_string(), Clone::clone);
                SpawnError::Other(format!(
                    "cannot run {program}: {e} (install it: sudo apt-get install -y {}, \
                     or `make deps`)",
                    if self.opts.wrapper.is_empty() {
                        "redis-server"
                    } else {
                        &program
                    },
                ))
            })?;
        self.pid = child.id();
        self.child = Some(child);
        self.exit_expected = false;
        self.wait_ready()
    }

    /// Waits until the server answers PING and `INFO persistence` shows `loading:0`.
    fn wait_ready(&mut self) -> Result<(), SpawnError> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(status) = self.try_exit_status() {
                self.exit_expected = true;
                let logs = self.logs_tail(40);
                let msg = format!(
                    "redis-server (port {}) exited during startup with {status}\n\
                     command: {} {}\n{logs}",
                    self.port,
                    redis_server_bin().display(),
                    self.command_args().join(" "),
                );
                if logs.contains("Address already in use") {
                    return Err(SpawnError::AddrInUse(msg));
                }
                return Err(SpawnError::Other(msg));
            }
            if self.is_ready() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(SpawnError::Other(format!(
                    "redis-server (port {}) not ready after {START_TIMEOUT:?}\n{}",
                    self.port,
                    self.logs_tail(40)
                )));
            }
            thread::sleep(Duration::from_millis(10));
        }
    }

    fn is_ready(&self) -> bool {
        let Ok(client) = redis::Client::open(self.url()) else {
            return false;
        };
        let Ok(mut con) = client.get_connection_with_timeout(Duration::from_secs(2)) else {
            return false;
        };
        let _ = con.set_read_timeout(Some(Duration::from_secs(5)));
        let pong: RedisResult<String> = redis::cmd("PING").query(&mut con);
        if pong.is_err() {
            return false; // e.g. LOADING
        }
        // Make sure we reached our own process, not another test's server that
        // grabbed the same port while ours failed to bind it.
        let server: RedisResult<String> = redis::cmd("INFO").arg("server").query(&mut con);
        let pid = self.pid.to_string();
        if !matches!(&server, Ok(text) if parse_info(text).get("process_id") == Some(&pid)) {
            return false;
        }
        let info: RedisResult<String> = redis::cmd("INFO").arg("persistence").query(&mut con);
        matches!(info, Ok(text) if parse_info(&text).get("loading").map(String::as_str) == Some("0"))
    }

    fn try_exit_status(&mut self) -> Option<ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// `redis://127.0.0.1:<port>/`
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub fn client(&self) -> redis::Client {
        redis::Client::open(self.url()).expect("redis::Client::open")
    }

    /// A new connection with 30 s read/write timeouts.
    pub fn conn(&self) -> redis::Connection {
        self.conn_with_timeout(Some(CONN_TIMEOUT))
    }

    /// A new connection with the given read/write timeout (`None`: block forever).
    pub fn conn_with_timeout(&self, timeout: Option<Duration>) -> redis::Connection {
        let con = self
            .client()
            .get_connection_with_timeout(Duration::from_secs(10))
            .unwrap_or_else(|e| {
                panic!(
                    "connect to redis-server on port {}: {e}\n{}",
                    self.port,
                    self.logs_tail(20)
                )
            });
        con.set_read_timeout(timeout).expect("set_read_timeout");
        con.set_write_timeout(timeout).expect("set_write_timeout");
        con
    }

    /// Path of redis.log in the server's dir.
    pub fn log_path(&self) -> PathBuf {
        self.dir.join("redis.log")
    }

    /// Whole redis.log (lossy UTF-8; empty if missing).
    pub fn log(&self) -> String {
        fs::read(self.log_path())
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    }

    /// The last `n` lines of redis.log and of the process's stdout/stderr.
    pub fn logs_tail(&self, n: usize) -> String {
        let mut s = format!(
            "--- tail of {} ---\n{}",
            self.log_path().display(),
            file_tail(&self.log_path(), n)
        );
        let out = self.dir.join("stdout.log");
        if fs::metadata(&out).map(|m| m.len() > 0).unwrap_or(false) {
            s.push_str(&format!(
                "\n--- tail of {} ---\n{}",
                out.display(),
                file_tail(&out, n)
            ));
        }
        s
    }

    /// True while the process exists (also when paused).
    pub fn is_running(&mut self) -> bool {
        self.child.is_some() && self.try_exit_status().is_none()
    }

    /// Panics (with the log tail) unless the process is running and answers PING.
    pub fn assert_alive(&mut self) {
        if !self.is_running() {
            panic!(
                "redis-server on port {} is not running\n{}",
                self.port,
                self.logs_tail(40)
            );
        }
        let pong: RedisResult<String> = redis::cmd("PING").query(&mut self.conn());
        assert_eq!(pong.as_deref().ok(), Some("PONG"), "PING failed: {pong:?}");
    }

    /// SIGKILL the process and wait for it to exit. No-op when not running.
    pub fn stop(&mut self) {
        self.exit_expected = true;
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Waits up to `timeout` for the process to exit on its own (e.g. after a
    /// test sent SHUTDOWN itself) and marks that exit as expected.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        self.exit_expected = true;
        let mut status = None;
        wait_until(timeout, || {
            status = self.try_exit_status();
            status.is_some()
        });
        if status.is_some() {
            self.child = None;
        }
        status
    }

    /// Sends `SHUTDOWN SAVE` (forces an RDB save even with `--save ""`) and
    /// waits for the process to exit. Panics if the server refuses or lingers.
    pub fn shutdown_save(&mut self) {
        let mut con = self.conn();
        let res: RedisResult<Value> = redis::cmd("SHUTDOWN").arg("SAVE").query(&mut con);
        if let Err(e) = &res {
            if !e.is_io_error() && !e.is_connection_dropped() {
                panic!(
                    "SHUTDOWN SAVE refused: {}\n{}",
                    err_string(e),
                    self.logs_tail(20)
                );
            }
        }
        drop(con);
        if self.wait_exit(Duration::from_secs(30)).is_none() {
            self.stop();
            panic!(
                "redis-server on port {} did not exit after SHUTDOWN SAVE ({res:?})\n{}",
                self.port,
                self.logs_tail(20)
            );
        }
    }

    /// Starts the same binary again on the same port, dir and options (to test
    /// loading from RDB / AOF). If the server is still running it is SIGKILLed
    /// first (a crash). Waits until it answers and `loading:0`.
    pub fn restart(&mut self) {
        self.stop();
        let mut last = String::new();
        for _ in 0..50 {
            match self.spawn_and_wait() {
                Ok(()) => return,
                Err(SpawnError::AddrInUse(msg)) => {
                    // The port is briefly unavailable; try again on the same port.
                    last = msg;
                    thread::sleep(Duration::from_millis(100));
                }
                Err(SpawnError::Other(msg)) => panic!("restart failed: {msg}"),
            }
        }
        panic!("restart failed: port {} stayed in use:\n{last}", self.port);
    }

    /// [`Server::restart`] for a start that may fail (e.g. an RDB the
    /// server cannot load): `Err` with the log tail when the process exits
    /// during startup (an exit the test expected), instead of a panic.
    pub fn try_restart(&mut self) -> Result<(), String> {
        self.stop();
        for _ in 0..50 {
            match self.spawn_and_wait() {
                Ok(()) => return Ok(()),
                Err(SpawnError::AddrInUse(_)) => thread::sleep(Duration::from_millis(100)),
                Err(SpawnError::Other(msg)) => {
                    self.stop();
                    return Err(msg);
                }
            }
        }
        Err(format!("port {} stayed in use", self.port))
    }

    fn signal(&self, sig: &str) {
        let status = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.pid.to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{sig} {} failed", self.pid);
    }

    /// Freezes the process (SIGSTOP), e.g. to simulate a hung or partitioned node.
    pub fn pause(&self) {
        self.signal("STOP");
    }

    /// Continues a paused process (SIGCONT).
    pub fn resume(&self) {
        self.signal("CONT");
    }

    /// The text of `INFO <section>`.
    pub fn info(&self, section: &str) -> String {
        redis::cmd("INFO")
            .arg(section)
            .query(&mut self.conn())
            .unwrap_or_else(|e| panic!("INFO {section}: {e}"))
    }

    /// One field of `INFO <section>`, e.g. `info_field("replication", "role")`.
    pub fn info_field(&self, section: &str, field: &str) -> Option<String> {
        parse_info(&self.info(section)).remove(field)
    }

    /// Makes this server a replica of `master` and waits until the link is up
    /// and the replica has caught up with the master's offset.
    pub fn make_replica_of(&self, master: &Server) {
        let mut con = self.conn();
        let _: () = redis::cmd("REPLICAOF")
            .arg("127.0.0.1")
            .arg(master.port)
            .query(&mut con)
            .expect("REPLICAOF");
        let up = wait_until(SYNC_TIMEOUT, || {
            self.info_field("replication", "master_link_status")
                .as_deref()
                == Some("up")
        });
        assert!(
            up,
            "replica {} never got master_link_status:up to master {}\n{}\n{}",
            self.port,
            master.port,
            self.info("replication"),
            self.logs_tail(20)
        );
        wait_replica_synced(master, self);
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let mut crashed: Option<ExitStatus> = None;
        if let Some(mut child) = self.child.take() {
            match child.try_wait() {
                Ok(Some(status)) if !self.exit_expected => crashed = Some(status),
                Ok(Some(_)) => {}
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                }
            }
        }
        let panicking = thread::panicking();
        let tail = if panicking || crashed.is_some() {
            self.logs_tail(30)
        } else {
            String::new()
        };
        if panicking {
            eprintln!(
                "[harness] redis-server port {} dir {}\n{tail}",
                self.port,
                self.dir.display()
            );
        }
        if std::env::var_os("DLOCK_KEEP_TEST_DIRS").is_none() {
            let _ = fs::remove_dir_all(&self.dir);
        }
        if let Some(status) = crashed {
            if !panicking {
                panic!(
                    "redis-server on port {} (pid {}) died unexpectedly with {status}\n{tail}",
                    self.port, self.pid
                );
            }
        }
    }
}

// ---------------------------------------------------------------------------
// INFO and replication helpers
// ---------------------------------------------------------------------------

/// Parses INFO text into field -> value (section headers and blank lines skipped).
pub fn parse_info(text: &str) -> HashMap<String, String> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

/// One field of `INFO <section>` on an existing connection.
pub fn info_field(con: &mut redis::Connection, section: &str, field: &str) -> Option<String> {
    let text: String = redis::cmd("INFO").arg(section).query(con).ok()?;
    parse_info(&text).remove(field)
}

/// Waits until `replica` has processed everything `master` had written when
/// this was called: `WAIT 1 5000` on the master, then polls until the
/// replica's `slave_repl_offset` reaches the master's `master_repl_offset`.
pub fn wait_replica_synced(master: &Server, replica: &Server) {
    let mut mc = master.conn();
    let _: RedisResult<i64> = redis::cmd("WAIT").arg(1).arg(5000).query(&mut mc);
    let target: i64 = info_field(&mut mc, "replication", "master_repl_offset")
        .and_then(|v| v.parse().ok())
        .expect("master_repl_offset on master");
    let mut rc = replica.conn();
    let mut last = String::new();
    let ok = wait_until(SYNC_TIMEOUT, || {
        let text: String = match redis::cmd("INFO").arg("replication").query(&mut rc) {
            Ok(t) => t,
            Err(_) => return false,
        };
        let info = parse_info(&text);
        last = text;
        info.get("master_link_status").map(String::as_str) == Some("up")
            && info
                .get("slave_repl_offset")
                .and_then(|v| v.parse::<i64>().ok())
                .is_some_and(|off| off >= target)
    });
    assert!(
        ok,
        "replica {} did not reach master {} offset {target}:\n{last}",
        replica.port, master.port
    );
}

// ---------------------------------------------------------------------------
// Raw commands and exact errors
// ---------------------------------------------------------------------------

/// Sends an arbitrary (binary-safe) command and returns the raw reply.
/// A top-level error reply becomes `Err` (use [`err_string`] for its text);
/// error replies nested in arrays (e.g. EXEC results) are kept as
/// `Value::ServerError` (use [`value_err_string`]).
pub fn cmd_raw(con: &mut impl redis::ConnectionLike, args: &[&[u8]]) -> RedisResult<Value> {
    assert!(!args.is_empty(), "cmd_raw needs at least the command name");
    let mut cmd = redis::Cmd::new();
    for a in args {
        cmd.arg(*a);
    }
    match con.req_command(&cmd)? {
        Value::ServerError(e) => Err(e.into()),
        v => Ok(v),
    }
}

/// [`cmd_raw`] for string arguments: `cmd_str(&mut con, &["DLOCK.INFO", "k"])`.
pub fn cmd_str(con: &mut impl redis::ConnectionLike, args: &[&str]) -> RedisResult<Value> {
    let bytes: Vec<&[u8]> = args.iter().map(|s| s.as_bytes()).collect();
    cmd_raw(con, &bytes)
}

/// Runs a command that must succeed; panics with the error text otherwise.
pub fn ok(con: &mut redis::Connection, args: &[&str]) -> Value {
    cmd_str(con, args).unwrap_or_else(|e| panic!("{args:?}: error {}", err_string(&e)))
}

/// Runs a command that must reply an integer.
pub fn int(con: &mut redis::Connection, args: &[&str]) -> i64 {
    match ok(con, args) {
        Value::Int(n) => n,
        other => panic!("{args:?}: expected an integer, got {other:?}"),
    }
}

/// Appends `v` as an unsigned LEB128 varint, as dlock's payload encoding
/// writes numbers: for tests that forge payloads (the codec's own writer).
#[allow(unused_imports)]
pub use dlock_core::codec::write_varint as varint;

/// xorshift64*: the workspace's tiny deterministic generator, so failures
/// reproduce from their seed.
#[allow(unused_imports)]
pub use dlock_core::rng::Rng;

/// What redis 0.27 stores as the detail of an error reply that had only a
/// code (e.g. `-NOTHELD`).
const NO_DETAIL: &str = "Unknown extension error encountered";

/// The error text exactly as the server sent it (without the leading `-`),
/// e.g. `"ERR wrong number of arguments for 'get' command"` or
/// `"NOTHELD the owner ..."`. redis 0.27 splits a reply into code (first word)
/// and detail (the rest); known codes (ERR, LOADING, ...) become ErrorKinds,
/// unknown ones (NOTHELD, WRONGTYPE, ...) ExtensionError(code, detail).
/// Non-server errors (I/O, type conversion) give their Display text.
pub fn err_string(e: &RedisError) -> String {
    // Written for both redis 0.27 (the module's tests) and 1.x (the client crate's):
    // 0.27 gives NOSUB no code, 1.x gives a code-only reply no detail.
    let code = match e.code() {
        None if format!("{:?}", e.kind()).contains("NoSub") => Some("NOSUB"),
        c => c,
    };
    match (code, e.detail()) {
        (Some(code), Some(NO_DETAIL)) => code.to_string(),
        (Some(code), Some(detail)) => format!("{code} {detail}"),
        (Some(code), None) => code.to_string(),
        (None, _) => e.to_string(),
    }
}

/// For a `Value::ServerError` (e.g. inside an EXEC reply): its exact text.
pub fn value_err_string(v: &Value) -> Option<String> {
    match v {
        Value::ServerError(e) => Some(match e.details() {
            Some(d) => format!("{} {d}", e.code()),
            None => e.code().to_string(),
        }),
        _ => None,
    }
}

/// Unwraps an `Err` from a command and returns its exact text; panics on `Ok`.
pub fn expect_err<T: std::fmt::Debug>(r: RedisResult<T>) -> String {
    match r {
        Ok(v) => panic!("expected an error reply, got {v:?}"),
        Err(e) => err_string(&e),
    }
}

// ---------------------------------------------------------------------------
// Pub/Sub
// ---------------------------------------------------------------------------

/// A dedicated pub/sub connection (RESP2).
///
/// Implemented over a plain `TcpStream` with its own buffer instead of
/// `redis::Connection`: redis 0.27's `recv_response` skips the next reply
/// after a read timeout, and `as_pubsub()` borrows the connection and
/// unsubscribes on drop. Here a timeout never loses or skips a message.
pub struct Subscriber {
    stream: TcpStream,
    buf: Vec<u8>,
    pending: VecDeque<(Vec<u8>, Vec<u8>)>,
}

impl Subscriber {
    /// Connects to `server` and SUBSCRIBEs to `channel` (waits for the confirmation).
    pub fn new(server: &Server, channel: &[u8]) -> Subscriber {
        let mut s = Self::connect(server);
        s.subscribe(channel);
        s
    }

    /// Connects and SSUBSCRIBEs (sharded pub/sub, cluster mode) to `channel`.
    pub fn new_sharded(server: &Server, channel: &[u8]) -> Subscriber {
        let mut s = Self::connect(server);
        s.send_and_confirm("SSUBSCRIBE", channel);
        s
    }

    /// Connects and PSUBSCRIBEs to `pattern`.
    pub fn new_pattern(server: &Server, pattern: &[u8]) -> Subscriber {
        let mut s = Self::connect(server);
        s.send_and_confirm("PSUBSCRIBE", pattern);
        s
    }

    fn connect(server: &Server) -> Subscriber {
        let stream = TcpStream::connect(("127.0.0.1", server.port))
            .unwrap_or_else(|e| panic!("subscriber connect to {}: {e}", server.port));
        let _ = stream.set_nodelay(true);
        stream
            .set_write_timeout(Some(CONN_TIMEOUT))
            .expect("set_write_timeout");
        Subscriber {
            stream,
            buf: Vec::new(),
            pending: VecDeque::new(),
        }
    }

    /// SUBSCRIBEs to one more channel (waits for the confirmation).
    pub fn subscribe(&mut self, channel: &[u8]) {
        self.send_and_confirm("SUBSCRIBE", channel);
    }

    fn send_and_confirm(&mut self, command: &str, channel: &[u8]) {
        let packed = redis::cmd(command).arg(channel).get_packed_command();
        self.stream
            .write_all(&packed)
            .unwrap_or_else(|e| panic!("send {command}: {e}"));
        let confirm = command.to_ascii_lowercase();
        let deadline = Instant::now() + CONN_TIMEOUT;
        loop {
            let Some(frame) = self.read_frame(deadline) else {
                panic!("no confirmation of {command} within {CONN_TIMEOUT:?}");
            };
            if let Some(text) = value_err_string(&frame) {
                panic!("{command} failed: {text}");
            }
            if let Some(msg) = as_message(&frame) {
                self.pending.push_back(msg);
                continue;
            }
            if let Value::Array(items) = &frame {
                if matches!(items.first(), Some(Value::BulkString(k)) if k.as_slice() == confirm.as_bytes())
                    && matches!(items.get(1), Some(Value::BulkString(c)) if c.as_slice() == channel)
                {
                    return;
                }
            }
        }
    }

    /// The next published message as (channel, payload), or None if none
    /// arrives within `timeout`. Handles message, smessage and pmessage.
    pub fn next_message(&mut self, timeout: Duration) -> Option<(Vec<u8>, Vec<u8>)> {
        if let Some(m) = self.pending.pop_front() {
            return Some(m);
        }
        let deadline = Instant::now() + timeout;
        loop {
            let frame = self.read_frame(deadline)?;
            if let Some(m) = as_message(&frame) {
                return Some(m);
            }
            if let Some(text) = value_err_string(&frame) {
                panic!("error on subscriber connection: {text}");
            }
            // Other frames (subscribe confirmations, ...) are skipped.
        }
    }

    /// Like [`Subscriber::next_message`] but panics when nothing arrives.
    pub fn expect_message(&mut self, timeout: Duration) -> (Vec<u8>, Vec<u8>) {
        self.next_message(timeout)
            .unwrap_or_else(|| panic!("no pub/sub message within {timeout:?}"))
    }

    /// Asserts that no message arrives during `duration`.
    pub fn expect_none(&mut self, duration: Duration) {
        if let Some((ch, payload)) = self.next_message(duration) {
            panic!(
                "expected no pub/sub message, got {:?} on {:?}",
                String::from_utf8_lossy(&payload),
                String::from_utf8_lossy(&ch)
            );
        }
    }

    /// Reads one complete RESP frame, or None at `deadline`. Partial data
    /// stays buffered, so a timeout never corrupts the stream.
    fn read_frame(&mut self, deadline: Instant) -> Option<Value> {
        loop {
            if let Some(end) = resp_frame_end(&self.buf, 0) {
                let v = redis::parse_redis_value(&self.buf[..end])
                    .unwrap_or_else(|e| panic!("bad RESP frame from server: {e}"));
                self.buf.drain(..end);
                return Some(v);
            }
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            let wait = (deadline - now).max(Duration::from_millis(1));
            self.stream
                .set_read_timeout(Some(wait))
                .expect("set_read_timeout");
            let mut tmp = [0u8; 4096];
            match self.stream.read(&mut tmp) {
                Ok(0) => panic!("subscriber connection closed by the server"),
                Ok(n) => self.buf.extend_from_slice(&tmp[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    if Instant::now() >= deadline {
                        return None;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => panic!("subscriber read: {e}"),
            }
        }
    }
}

/// (channel, payload) of a message / smessage / pmessage frame.
fn as_message(v: &Value) -> Option<(Vec<u8>, Vec<u8>)> {
    let Value::Array(items) = v else { return None };
    let bulk = |i: usize| match items.get(i) {
        Some(Value::BulkString(b)) => Some(b.clone()),
        _ => None,
    };
    match bulk(0)?.as_slice() {
        b"message" | b"smessage" if items.len() == 3 => Some((bulk(1)?, bulk(2)?)),
        b"pmessage" if items.len() == 4 => Some((bulk(2)?, bulk(3)?)),
        _ => None,
    }
}

/// End offset of the complete RESP frame starting at `pos`, or None if the
/// buffer does not hold all of it yet.
fn resp_frame_end(buf: &[u8], pos: usize) -> Option<usize> {
    let kind = *buf.get(pos)?;
    let cr = pos + 1 + buf.get(pos + 1..)?.windows(2).position(|w| w == b"\r\n")?;
    let after = cr + 2;
    let num = || -> i64 {
        std::str::from_utf8(&buf[pos + 1..cr])
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("bad RESP length line"))
    };
    match kind {
        b'+' | b'-' | b':' | b'_' | b',' | b'#' | b'(' => Some(after),
        b'$' | b'=' | b'!' => {
            let n = num();
            if n < 0 {
                return Some(after);
            }
            let end = after + n as usize + 2;
            (buf.len() >= end).then_some(end)
        }
        b'*' | b'>' | b'~' | b'%' | b'|' => {
            let n = num();
            if n < 0 {
                return Some(after);
            }
            let items = if matches!(kind, b'%' | b'|') {
                2 * n
            } else {
                n
            };
            let mut p = after;
            for _ in 0..items {
                p = resp_frame_end(buf, p)?;
            }
            Some(p)
        }
        other => panic!("unexpected RESP type byte {other:#x}"),
    }
}

// ---------------------------------------------------------------------------
// Redis Cluster
// ---------------------------------------------------------------------------

/// Upper bound for a cluster to form or to agree on a change (gossip).
pub const CLUSTER_TIMEOUT: Duration = Duration::from_secs(30);

/// One node as one node sees it in `CLUSTER NODES`.
#[derive(Clone, Debug)]
pub struct ClusterNodeView {
    pub id: String,
    /// Client port.
    pub port: u16,
    pub flags: Vec<String>,
    /// Id of its master, for a replica.
    pub master: Option<String>,
    pub connected: bool,
}

/// Parses `CLUSTER NODES` text.
pub fn parse_cluster_nodes(text: &str) -> Vec<ClusterNodeView> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() < 8 {
                return None;
            }
            // ip:port@cport[,hostname]
            let port = f[1]
                .split('@')
                .next()
                .and_then(|a| a.rsplit(':').next())
                .and_then(|p| p.parse().ok())
                .unwrap_or(0);
            Some(ClusterNodeView {
                id: f[0].to_string(),
                port,
                flags: f[2].split(',').map(str::to_string).collect(),
                master: (f[3] != "-").then(|| f[3].to_string()),
                connected: f[7] == "connected",
            })
        })
        .collect()
}

/// A Redis Cluster of real redis-server processes with the module loaded.
///
/// [`Cluster::start`] makes `masters` masters that share the 16384 slots
/// evenly and `replicas_per_master` replicas of each. `nodes[i]` for
/// `i < masters` started as master `i`; the replicas of master `m` are
/// `nodes[masters + m * replicas_per_master + j]`. Roles can change later
/// (failover): ask [`Cluster::node_for_key`] / [`Cluster::master_of_slot`]
/// instead of relying on the start layout. The servers stop in their `Drop`.
pub struct Cluster {
    pub nodes: Vec<Server>,
    /// `ids[i]` is the cluster node id of `nodes[i]`.
    pub ids: Vec<String>,
    pub masters: usize,
    pub replicas_per_master: usize,
}

impl Cluster {
    /// Starts a cluster with default [`ServerOpts`] (module loaded).
    pub fn start(masters: usize, replicas_per_master: usize) -> Cluster {
        Self::start_with(masters, replicas_per_master, ServerOpts::new())
    }

    /// Starts a cluster whose nodes all use `opts` (with `cluster` forced on),
    /// assigns slots with CLUSTER ADDSLOTSRANGE, joins the nodes with CLUSTER
    /// MEET, makes replicas with CLUSTER REPLICATE and waits until every node
    /// says `cluster_state:ok`, knows every other node in its role, and every
    /// replica's link to its master is up.
    pub fn start_with(masters: usize, replicas_per_master: usize, opts: ServerOpts) -> Cluster {
        assert!(masters >= 1, "a cluster needs at least one master");
        let total = masters * (1 + replicas_per_master);
        let opts = opts.cluster(true);
        let nodes: Vec<Server> = (0..total)
            .map(|_| Server::start_with(opts.clone()))
            .collect();
        let mut ids = Vec::with_capacity(total);
        for (i, n) in nodes.iter().enumerate() {
            let mut con = n.conn();
            let id: String = redis::cmd("CLUSTER")
                .arg("MYID")
                .query(&mut con)
                .expect("CLUSTER MYID");
            // Distinct epochs up front, as redis-cli --cluster create does.
            let _: RedisResult<()> = redis::cmd("CLUSTER")
                .arg("SET-CONFIG-EPOCH")
                .arg(i + 1)
                .query(&mut con);
            ids.push(id);
        }
        const SLOTS: usize = 16384;
        for (m, node) in nodes.iter().enumerate().take(masters) {
            let first = m * SLOTS / masters;
            let last = (m + 1) * SLOTS / masters - 1;
            let _: () = redis::cmd("CLUSTER")
                .arg("ADDSLOTSRANGE")
                .arg(first)
                .arg(last)
                .query(&mut node.conn())
                .expect("CLUSTER ADDSLOTSRANGE");
        }
        {
            let mut con = nodes[0].conn();
            for n in &nodes[1..] {
                let _: () = redis::cmd("CLUSTER")
                    .arg("MEET")
                    .arg("127.0.0.1")
                    .arg(n.port)
                    .arg(n.cluster_port.expect("cluster bus port"))
                    .query(&mut con)
                    .expect("CLUSTER MEET");
            }
        }
        let cluster = Cluster {
            nodes,
            ids,
            masters,
            replicas_per_master,
        };
        // Every node must know every other before a replica can name its master.
        cluster.wait_nodes(|_, views, c| {
            views.len() == c.nodes.len()
                && views
                    .iter()
                    .all(|v| c.ids.contains(&v.id) && !v.flags.iter().any(|f| f == "handshake"))
        });
        for m in 0..masters {
            for j in 0..replicas_per_master {
                let r = masters + m * replicas_per_master + j;
                let _: () = redis::cmd("CLUSTER")
                    .arg("REPLICATE")
                    .arg(&cluster.ids[m])
                    .query(&mut cluster.nodes[r].conn())
                    .unwrap_or_else(|e| panic!("CLUSTER REPLICATE on node {r}: {e}"));
            }
        }
        cluster.wait_healthy();
        cluster
    }

    /// Polls `CLUSTER NODES` on every node until `ok(node_index, views, self)`
    /// holds for all of them; panics after [`CLUSTER_TIMEOUT`].
    fn wait_nodes(&self, ok: impl Fn(usize, &[ClusterNodeView], &Cluster) -> bool) {
        let mut last = String::new();
        let done = wait_until(CLUSTER_TIMEOUT, || {
            self.nodes.iter().enumerate().all(|(i, n)| {
                let text: String = match redis::cmd("CLUSTER").arg("NODES").query(&mut n.conn()) {
                    Ok(t) => t,
                    Err(_) => return false,
                };
                let good = ok(i, &parse_cluster_nodes(&text), self);
                if !good {
                    last = format!("node {i} (port {}):\n{text}", n.port);
                }
                good
            })
        });
        assert!(
            done,
            "cluster did not converge within {CLUSTER_TIMEOUT:?}; last view of {last}"
        );
    }

    /// Waits until every node says `cluster_state:ok`, sees every node
    /// connected and not failing, agrees with every other node on who
    /// replicates whom, and every replica's link to its master is up.
    pub fn wait_healthy(&self) {
        let total = self.nodes.len();
        let mut reference: Option<Vec<(String, Option<String>)>> = None;
        let done = wait_until(CLUSTER_TIMEOUT, || {
            reference = None;
            for n in &self.nodes {
                if cluster_state(n).as_deref() != Some("ok") {
                    return false;
                }
                let text: String = match redis::cmd("CLUSTER").arg("NODES").query(&mut n.conn()) {
                    Ok(t) => t,
                    Err(_) => return false,
                };
                let views = parse_cluster_nodes(&text);
                if views.len() != total
                    || views.iter().any(|v| {
                        !v.connected
                            || v.flags.iter().any(|f| {
                                matches!(f.as_str(), "handshake" | "fail" | "fail?" | "noaddr")
                            })
                    })
                {
                    return false;
                }
                let mut roles: Vec<(String, Option<String>)> = views
                    .iter()
                    .map(|v| (v.id.clone(), v.master.clone()))
                    .collect();
                roles.sort();
                match &reference {
                    None => reference = Some(roles),
                    Some(r) if *r != roles => return false,
                    Some(_) => {}
                }
                let is_replica = views
                    .iter()
                    .any(|v| v.flags.iter().any(|f| f == "myself") && v.master.is_some());
                if is_replica
                    && node_info_field(n, "replication", "master_link_status").as_deref()
                        != Some("up")
                {
                    return false;
                }
            }
            // Every replica (failovers swap roles, never the count) has a master.
            reference.as_ref().is_some_and(|r| {
                r.iter().filter(|(_, m)| m.is_some()).count()
                    == self.masters * self.replicas_per_master
            })
        });
        if !done {
            let mut report = String::new();
            for (i, n) in self.nodes.iter().enumerate() {
                let text: String = redis::cmd("CLUSTER")
                    .arg("NODES")
                    .query(&mut n.conn())
                    .unwrap_or_default();
                report.push_str(&format!(
                    "--- node {i} port {} state {:?}\n{text}\n",
                    n.port,
                    cluster_state(n)
                ));
            }
            panic!("cluster not healthy within {CLUSTER_TIMEOUT:?}\n{report}");
        }
    }

    /// The hash slot of `key` (CLUSTER KEYSLOT, asked of any live node).
    pub fn key_slot(&self, key: &[u8]) -> u16 {
        let mut last = None;
        for n in &self.nodes {
            let Ok(mut con) = n
                .client()
                .get_connection_with_timeout(Duration::from_secs(5))
            else {
                continue;
            };
            let _ = con.set_read_timeout(Some(CONN_TIMEOUT));
            match redis::cmd("CLUSTER")
                .arg("KEYSLOT")
                .arg(key)
                .query::<i64>(&mut con)
            {
                Ok(s) => return s as u16,
                Err(e) => last = Some(e),
            }
        }
        panic!("CLUSTER KEYSLOT failed on every node: {last:?}");
    }

    /// Index in `nodes` of the master that serves `slot`: the node whose own
    /// `CLUSTER SLOTS` names itself as the slot's master (a node is the
    /// authority on its own slots, also right after a migration).
    pub fn master_index_of_slot(&self, slot: u16) -> usize {
        let mut found = None;
        let ok = wait_until(CLUSTER_TIMEOUT, || {
            found = self
                .nodes
                .iter()
                .position(|n| slot_master_port(n, slot) == Some(n.port) && node_is_master(n));
            found.is_some()
        });
        assert!(ok, "no node claims slot {slot}");
        found.unwrap_or_default()
    }

    /// The master that serves `slot`.
    pub fn master_of_slot(&self, slot: u16) -> &Server {
        &self.nodes[self.master_index_of_slot(slot)]
    }

    /// The master that serves `key`'s slot.
    pub fn node_for_key(&self, key: &[u8]) -> &Server {
        self.master_of_slot(self.key_slot(key))
    }

    /// Index in `nodes` of the master that serves `key`'s slot.
    pub fn node_index_for_key(&self, key: &[u8]) -> usize {
        self.master_index_of_slot(self.key_slot(key))
    }

    /// Indexes in `nodes` of the current replicas of `nodes[master]`.
    pub fn replicas_of(&self, master: usize) -> Vec<usize> {
        let text: String = redis::cmd("CLUSTER")
            .arg("NODES")
            .query(&mut self.nodes[master].conn())
            .expect("CLUSTER NODES");
        let id = &self.ids[master];
        parse_cluster_nodes(&text)
            .iter()
            .filter(|v| v.master.as_deref() == Some(id.as_str()))
            .filter_map(|v| self.ids.iter().position(|i| *i == v.id))
            .collect()
    }

    /// Index in `nodes` of the node with cluster id `id`.
    pub fn index_of_id(&self, id: &str) -> Option<usize> {
        self.ids.iter().position(|i| i == id)
    }
}

/// The client port of the master of `slot` in `node`'s own CLUSTER SLOTS.
pub fn slot_master_port(node: &Server, slot: u16) -> Option<u16> {
    let client = node.client();
    let mut con = client
        .get_connection_with_timeout(Duration::from_secs(5))
        .ok()?;
    con.set_read_timeout(Some(CONN_TIMEOUT)).ok()?;
    let v: Value = redis::cmd("CLUSTER").arg("SLOTS").query(&mut con).ok()?;
    let Value::Array(ranges) = v else { return None };
    for r in ranges {
        let Value::Array(items) = r else { continue };
        let (Some(Value::Int(first)), Some(Value::Int(last)), Some(Value::Array(master))) =
            (items.first(), items.get(1), items.get(2))
        else {
            continue;
        };
        if (*first..=*last).contains(&i64::from(slot)) {
            if let Some(Value::Int(port)) = master.get(1) {
                return u16::try_from(*port).ok();
            }
        }
    }
    None
}

/// One field of `INFO <section>` of `node`, or `None` when the node cannot
/// be asked (e.g. it is down) instead of a panic.
pub fn node_info_field(node: &Server, section: &str, field: &str) -> Option<String> {
    let mut con = node
        .client()
        .get_connection_with_timeout(Duration::from_secs(5))
        .ok()?;
    con.set_read_timeout(Some(CONN_TIMEOUT)).ok()?;
    info_field(&mut con, section, field)
}

/// `cluster_state` of `CLUSTER INFO` on `node` (`ok` / `fail`), `None` when
/// the node cannot be asked.
pub fn cluster_state(node: &Server) -> Option<String> {
    let mut con = node
        .client()
        .get_connection_with_timeout(Duration::from_secs(5))
        .ok()?;
    con.set_read_timeout(Some(CONN_TIMEOUT)).ok()?;
    let text: String = redis::cmd("CLUSTER").arg("INFO").query(&mut con).ok()?;
    parse_info(&text).remove("cluster_state")
}

/// Whether `INFO replication` of `node` says `role:master`.
pub fn node_is_master(node: &Server) -> bool {
    node_info_field(node, "replication", "role").as_deref() == Some("master")
}

/// Subscribes to the lock channel of `key` (`dlock:{key}`, a key without a
/// hash tag) on `server` and returns every message with the instant it
/// arrived. Returns once the subscription is in place.
pub fn subscribe_lock(server: &Server, key: &str) -> std::sync::mpsc::Receiver<(String, Instant)> {
    let (tx, rx) = std::sync::mpsc::channel();
    let mut con = server.conn();
    let channel = format!("dlock:{{{key}}}");
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    thread::spawn(move || {
        let mut ps = con.as_pubsub();
        ps.subscribe(&channel).expect("SUBSCRIBE");
        let _ = ready_tx.send(());
        ps.set_read_timeout(Some(Duration::from_secs(30))).ok();
        while let Ok(m) = ps.get_message() {
            let text: String = m.get_payload().unwrap_or_default();
            if tx.send((text, Instant::now())).is_err() {
                break;
            }
        }
    });
    ready_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("subscribed");
    rx
}

/// `target/release/examples/<name>` of the client crate, built (once, in
/// release) if missing; `cargo test --workspace` builds it with the other
/// examples.
pub fn example_bin(name: &str) -> PathBuf {
    let bin = target_dir().join("release/examples").join(name);
    if !bin.is_file() {
        let st = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .args([
                "build",
                "--release",
                "-p",
                "dlock-client",
                "--example",
                name,
            ])
            .current_dir(workspace_dir())
            .status()
            .unwrap_or_else(|e| panic!("run cargo build --example {name}: {e}"));
        assert!(st.success(), "cargo build --example {name} failed");
    }
    assert!(bin.is_file(), "{} missing after the build", bin.display());
    bin
}

/// A raw connection: commands are written without waiting for replies, so
/// one thread can keep thousands of connections blocked on the server.
pub struct RawConn {
    w: TcpStream,
    r: std::io::BufReader<TcpStream>,
    timeout: Duration,
}

#[allow(dead_code)]
impl RawConn {
    /// Connects to `server`; a reply not there within `timeout` fails the test.
    pub fn new(server: &Server, timeout: Duration) -> RawConn {
        let w = TcpStream::connect(("127.0.0.1", server.port)).expect("connect");
        w.set_read_timeout(Some(timeout)).expect("timeout");
        let r = std::io::BufReader::new(w.try_clone().expect("clone"));
        RawConn { w, r, timeout }
    }

    pub fn send(&mut self, args: &[&str]) {
        let mut b = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            b.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
        }
        self.w.write_all(&b).expect("write");
    }

    /// One reply as text: `:n`, `+s`, `-err`, a bulk string's content,
    /// `nil` (simple types only).
    pub fn reply(&mut self) -> String {
        use std::io::BufRead;
        let mut line = String::new();
        self.r.read_line(&mut line).expect("read reply");
        let line = line.trim_end().to_string();
        match line.as_bytes().first() {
            Some(b'$') if line == "$-1" => "nil".into(),
            Some(b'_') => "nil".into(),
            Some(b'*') if line == "*-1" => "nil".into(),
            Some(b'$') => {
                let n: usize = line[1..].parse().expect("bulk length");
                let mut buf = vec![0; n + 2];
                self.r.read_exact(&mut buf).expect("bulk");
                String::from_utf8_lossy(&buf[..n]).into_owned()
            }
            _ => line,
        }
    }

    /// Whether a reply is waiting to be read (without blocking for long).
    pub fn has_reply(&mut self) -> bool {
        use std::io::BufRead;
        if !self.r.buffer().is_empty() {
            return true;
        }
        self.w
            .set_read_timeout(Some(Duration::from_millis(1)))
            .expect("timeout");
        let got = matches!(self.r.fill_buf(), Ok(b) if !b.is_empty());
        self.w
            .set_read_timeout(Some(self.timeout))
            .expect("timeout");
        got
    }

    /// Closes the connection at once (the server sees it gone).
    pub fn close(&self) {
        self.w.shutdown(std::net::Shutdown::Both).expect("close");
    }

    /// This connection's `CLIENT ID`.
    pub fn id(&mut self) -> String {
        self.send(&["CLIENT", "ID"]);
        self.reply().trim_start_matches(':').to_string()
    }
}

// ---------------------------------------------------------------------------
// Sentinel
// ---------------------------------------------------------------------------

/// One Redis Sentinel (`redis-server <conf> --sentinel`) on a free port, watching the
/// master at `127.0.0.1:<master_port>` as service `service` (quorum 1, down after
/// 1 s). `Drop` kills it by PID and removes its directory.
pub struct SentinelProc {
    pub port: u16,
    pub dir: PathBuf,
    pub pid: u32,
    child: Option<Child>,
}

impl SentinelProc {
    /// Starts a Sentinel and waits until it names the master.
    pub fn start(master_port: u16, service: &str) -> SentinelProc {
        let mut last = String::new();
        for _attempt in 0..10 {
            let port = free_port();
            let dir = std::env::temp_dir().join("dlock-tests").join(format!(
                "{}-{}-sentinel-{port}",
                std::process::id(),
                DIR_COUNTER.fetch_add(1, Ordering::SeqCst),
            ));
            let _ = fs::remove_dir_all(&dir);
            fs::create_dir_all(&dir).expect("create sentinel dir");
            let conf = dir.join("sentinel.conf");
            fs::write(
                &conf,
                format!(
                    "port {port}\nbind 127.0.0.1\ndir {dir}\nlogfile {log}\n\
                     sentinel monitor {service} 127.0.0.1 {master_port} 1\n\
                     sentinel down-after-milliseconds {service} 1000\n\
                     sentinel failover-timeout {service} 10000\n\
                     sentinel parallel-syncs {service} 1\n",
                    dir = dir.display(),
                    log = dir.join("sentinel.log").display(),
                ),
            )
            .expect("write sentinel.conf");
            let child = Command::new(redis_server_bin())
                .arg(&conf)
                .arg("--sentinel")
                .current_dir(&dir)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("run redis-server --sentinel");
            let mut s = SentinelProc {
                port,
                dir,
                pid: child.id(),
                child: Some(child),
            };
            let ready = wait_until(START_TIMEOUT, || {
                s.master_port(service) == Some(master_port)
            });
            if ready {
                return s;
            }
            last = file_tail(&s.dir.join("sentinel.log"), 20);
            let exited = s
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
                .is_some();
            if !(exited && last.contains("Address already in use")) {
                break;
            }
        }
        panic!("redis-server --sentinel did not start:\n{last}");
    }

    /// `redis://127.0.0.1:<port>/`
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// A connection to this Sentinel.
    pub fn conn(&self) -> Option<redis::Connection> {
        let client = redis::Client::open(self.url()).ok()?;
        let con = client
            .get_connection_with_timeout(Duration::from_secs(2))
            .ok()?;
        con.set_read_timeout(Some(CONN_TIMEOUT)).ok()?;
        Some(con)
    }

    /// The master port this Sentinel names for `service`.
    pub fn master_port(&self, service: &str) -> Option<u16> {
        let mut con = self.conn()?;
        let addr: Vec<String> = redis::cmd("SENTINEL")
            .arg("GET-MASTER-ADDR-BY-NAME")
            .arg(service)
            .query(&mut con)
            .ok()?;
        addr.get(1)?.parse().ok()
    }

    /// Waits until this Sentinel knows `n` replicas of `service` in good standing
    /// (so that a failover has a replica to promote).
    pub fn wait_replicas(&self, service: &str, n: usize) {
        let ok = wait_until(SYNC_TIMEOUT, || {
            let Some(mut con) = self.conn() else {
                return false;
            };
            let replicas: Vec<HashMap<String, String>> = match redis::cmd("SENTINEL")
                .arg("REPLICAS")
                .arg(service)
                .query(&mut con)
            {
                Ok(r) => r,
                Err(_) => return false,
            };
            replicas
                .iter()
                .filter(|r| {
                    r.get("flags").map(String::as_str) == Some("slave")
                        && r.get("master-link-status").map(String::as_str) == Some("ok")
                })
                .count()
                >= n
        });
        assert!(ok, "sentinel {} never saw {n} good replicas", self.port);
    }

    /// `SENTINEL FAILOVER service`, then waits until this Sentinel names a master
    /// other than `old_port`; answers the new master's port.
    pub fn failover(&self, service: &str, old_port: u16) -> u16 {
        let mut con = self.conn().expect("sentinel connection");
        let _: () = redis::cmd("SENTINEL")
            .arg("FAILOVER")
            .arg(service)
            .query(&mut con)
            .expect("SENTINEL FAILOVER");
        let mut now = None;
        let moved = wait_until(SYNC_TIMEOUT, || {
            now = self.master_port(service);
            now.is_some_and(|p| p != old_port)
        });
        assert!(
            moved,
            "no failover away from {old_port}:\n{}",
            file_tail(&self.dir.join("sentinel.log"), 30)
        );
        now.unwrap_or(old_port)
    }
}

impl Drop for SentinelProc {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if thread::panicking() {
            eprintln!(
                "[harness] sentinel port {}\n{}",
                self.port,
                file_tail(&self.dir.join("sentinel.log"), 30)
            );
        }
        if std::env::var_os("DLOCK_KEEP_TEST_DIRS").is_none() {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

/// A DLOCK.INFO-like reply without the fields that tick with the clock
/// (`ttl`, `held_ms`, `waited_ms`), at any depth, so replies from two nodes
/// or two instants can be compared.
pub fn without_ttl(v: &Value) -> Value {
    match v {
        Value::Array(items)
            if items.len().is_multiple_of(2)
                && items
                    .iter()
                    .step_by(2)
                    .all(|k| matches!(k, Value::BulkString(_))) =>
        {
            Value::Array(
                items
                    .chunks(2)
                    .filter(|kv| {
                        !matches!(&kv[0], Value::BulkString(b)
                            if matches!(b.as_slice(), b"ttl" | b"held_ms" | b"waited_ms"))
                    })
                    .flat_map(|kv| [kv[0].clone(), without_ttl(&kv[1])])
                    .collect(),
            )
        }
        Value::Array(items) => Value::Array(items.iter().map(without_ttl).collect()),
        other => other.clone(),
    }
}

/// Runs `args` on a new connection to `port` in a thread; the thread returns
/// how long the reply took and the reply (an error as its text).
pub fn spawn_blocking(
    port: u16,
    args: &'static [&'static str],
) -> thread::JoinHandle<(Duration, Result<Value, String>)> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).expect("client");
    let mut con = client
        .get_connection_with_timeout(Duration::from_secs(20))
        .expect("connect blocking client");
    con.set_read_timeout(Some(Duration::from_secs(60)))
        .expect("read timeout");
    thread::spawn(move || {
        let t = Instant::now();
        let r = cmd_str(&mut con, args).map_err(|e| err_string(&e));
        (t.elapsed(), r)
    })
}
