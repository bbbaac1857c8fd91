//! Sentinel processes for the failover tests: `<server binary> <conf>
//! --sentinel` (Redis and Valkey alike; no separate redis-sentinel binary is
//! needed), each on a free loopback port in its own directory, stopped by PID
//! on drop like every [`super::Server`].
#![allow(dead_code)]

use std::fs::{self, OpenOptions};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use redis::RedisResult;

use super::{free_port, redis_server_bin, START_TIMEOUT};

static SENTINEL_COUNTER: AtomicUsize = AtomicUsize::new(0);

/// One Sentinel monitoring one master under `name`.
pub struct Sentinel {
    pub port: u16,
    pub dir: PathBuf,
    pub pid: u32,
    child: Option<Child>,
}

impl Sentinel {
    /// Starts a Sentinel that monitors `127.0.0.1:<master_port>` as `name`
    /// with `quorum`, declaring it down after `down_after_ms`.
    pub fn start(name: &str, master_port: u16, quorum: u32, down_after_ms: u64) -> Sentinel {
        let mut last = String::new();
        for _ in 0..10 {
            let port = free_port();
            let dir = std::env::temp_dir().join("dlock-tests").join(format!(
                "{}-sentinel-{}-{port}",
                std::process::id(),
                SENTINEL_COUNTER.fetch_add(1, Ordering::SeqCst)
            ));
            let _ = fs::remove_dir_all(&dir);
            fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
            let conf = dir.join("sentinel.conf");
            let text = format!(
                "port {port}\nbind 127.0.0.1\ndir {dir}\nlogfile {log}\n\
                 sentinel monitor {name} 127.0.0.1 {master_port} {quorum}\n\
                 sentinel down-after-milliseconds {name} {down_after_ms}\n\
                 sentinel failover-timeout {name} 3000\n\
                 sentinel parallel-syncs {name} 2\n",
                dir = dir.display(),
                log = dir.join("sentinel.log").display(),
            );
            fs::write(&conf, text).unwrap_or_else(|e| panic!("write {}: {e}", conf.display()));
            let out = OpenOptions::new()
                .create(true)
                .append(true)
                .open(dir.join("stdout.log"))
                .expect("open stdout.log");
            let err = out.try_clone().expect("clone stdout.log");
            let child = Command::new(redis_server_bin())
                .arg(&conf)
                .arg("--sentinel")
                .current_dir(&dir)
                .stdin(Stdio::null())
                .stdout(out)
                .stderr(err)
                .spawn()
                .unwrap_or_else(|e| panic!("cannot run {}: {e}", redis_server_bin().display()));
            let mut s = Sentinel {
                port,
                dir,
                pid: child.id(),
                child: Some(child),
            };
            let deadline = Instant::now() + START_TIMEOUT;
            loop {
                if let Some(c) = s.child.as_mut() {
                    if c.try_wait().ok().flatten().is_some() {
                        last = s.log_tail();
                        s.child = None;
                        break;
                    }
                }
                let pong: Option<String> = s
                    .try_conn()
                    .and_then(|mut c| redis::cmd("PING").query(&mut c).ok());
                if pong.as_deref() == Some("PONG") {
                    return s;
                }
                if Instant::now() >= deadline {
                    panic!("sentinel on port {port} not ready:\n{}", s.log_tail());
                }
                thread::sleep(Duration::from_millis(10));
            }
        }
        panic!("could not start a sentinel:\n{last}");
    }

    fn try_conn(&self) -> Option<redis::Connection> {
        let client = redis::Client::open(format!("redis://127.0.0.1:{}/", self.port)).ok()?;
        let con = client
            .get_connection_with_timeout(Duration::from_secs(2))
            .ok()?;
        let _ = con.set_read_timeout(Some(Duration::from_secs(10)));
        Some(con)
    }

    /// A connection (panics when the Sentinel does not answer).
    pub fn conn(&self) -> redis::Connection {
        self.try_conn()
            .unwrap_or_else(|| panic!("sentinel {} not reachable", self.port))
    }

    /// `SENTINEL GET-MASTER-ADDR-BY-NAME name`: the master's port.
    pub fn master_port(&self, name: &str) -> Option<u16> {
        let mut con = self.try_conn()?;
        let r: RedisResult<(String, String)> = redis::cmd("SENTINEL")
            .arg("GET-MASTER-ADDR-BY-NAME")
            .arg(name)
            .query(&mut con);
        r.ok().and_then(|(_, p)| p.parse().ok())
    }

    /// `SENTINEL MASTER name`: the master's port and its flags (`master`
    /// alone when it is up and no failover is in progress).
    pub fn master_state(&self, name: &str) -> Option<(u16, String)> {
        let mut con = self.try_conn()?;
        let r: RedisResult<Vec<String>> = redis::cmd("SENTINEL")
            .arg("MASTER")
            .arg(name)
            .query(&mut con);
        let fields = r.ok()?;
        let get = |k: &str| {
            fields
                .chunks_exact(2)
                .find(|kv| kv[0] == k)
                .map(|kv| kv[1].clone())
        };
        Some((get("port")?.parse().ok()?, get("flags")?))
    }

    pub fn log_tail(&self) -> String {
        super::file_tail(&self.dir.join("sentinel.log"), 30)
    }

    /// SIGKILLs the process (no-op when gone).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        self.stop();
        if thread::panicking() {
            eprintln!("[harness] sentinel {}\n{}", self.port, self.log_tail());
        }
        if std::env::var_os("DLOCK_KEEP_TEST_DIRS").is_none() {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}
