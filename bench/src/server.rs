//! The bench's own redis-server: started with the module on a free loopback
//! port, stopped by PID when the guard drops (also when the bench panics).

use std::collections::HashMap;
use std::fs::{self, File};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use redis::{Connection, RedisResult};

/// Read timeout of every connection the bench opens, so a hung server fails
/// the bench instead of hanging it (longer than any `WAIT` the bench sends).
pub const READ_TIMEOUT: Duration = Duration::from_secs(120);

/// One redis-server process; `Drop` kills it by PID and removes its directory.
pub struct RedisServer {
    pub port: u16,
    pub pid: u32,
    dir: PathBuf,
    child: Child,
}

/// A currently free port on 127.0.0.1 (bind port 0, read it, let it go).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("bind 127.0.0.1:0")
}

/// The last `n` lines of a file, or a note that it cannot be read.
fn tail(path: &Path, n: usize) -> String {
    match fs::read(path) {
        Ok(b) => {
            let text = String::from_utf8_lossy(&b);
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(n)..].join("\n")
        }
        Err(e) => format!("<cannot read {}: {e}>", path.display()),
    }
}

impl RedisServer {
    /// Starts `bin` with `--loadmodule <a private copy of module>` on a free
    /// port, retrying on another port when the chosen one was taken meanwhile.
    pub fn start(bin: &Path, module: &Path) -> Result<RedisServer, String> {
        let mut last = String::new();
        for _ in 0..10 {
            let port = free_port();
            let dir =
                std::env::temp_dir().join(format!("dlock-bench-{}-{}", std::process::id(), port));
            let _ = fs::remove_dir_all(&dir);
            fs::create_dir_all(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
            // A private copy: a concurrent `cargo build` cannot swap the file
            // under the running server, and the report names what was measured.
            let copy = dir.join("libdlock.so");
            fs::copy(module, &copy).map_err(|e| {
                let _ = fs::remove_dir_all(&dir);
                format!(
                    "cannot read the module at {}: {e}\n(build it with `cargo build --release`, \
                     or set DLOCK_MODULE to its path)",
                    module.display()
                )
            })?;
            let out = File::create(dir.join("stdout.log")).map_err(|e| e.to_string())?;
            let err = out.try_clone().map_err(|e| e.to_string())?;
            let spawned = Command::new(bin)
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
                // Room for the scale part's 10 000 waiting connections.
                .args(["--maxclients", "16000"])
                .arg("--dir")
                .arg(&dir)
                .arg("--logfile")
                .arg(dir.join("redis.log"))
                .arg("--loadmodule")
                .arg(&copy)
                .current_dir(&dir)
                .stdin(Stdio::null())
                .stdout(out)
                .stderr(err)
                .spawn();
            let child = match spawned {
                Ok(c) => c,
                Err(e) => {
                    let _ = fs::remove_dir_all(&dir);
                    return Err(format!(
                        "cannot run {}: {e} (install redis-server 7.0+, e.g. `make deps`, \
                         or set REDIS_SERVER)",
                        bin.display()
                    ));
                }
            };
            let mut server = RedisServer {
                port,
                pid: child.id(),
                dir,
                child,
            };
            match server.wait_ready() {
                Ok(()) => return Ok(server),
                Err(e) => {
                    let retry = e.contains("Address already in use");
                    last = e;
                    drop(server);
                    if !retry {
                        return Err(last);
                    }
                }
            }
        }
        Err(format!(
            "could not start redis-server on a free port:\n{last}"
        ))
    }

    fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!(
                    "redis-server exited during startup with {status}:\n{}\n{}",
                    tail(&self.dir.join("redis.log"), 30),
                    tail(&self.dir.join("stdout.log"), 10)
                ));
            }
            if let Ok(mut con) = self.try_conn() {
                let info: RedisResult<String> = redis::cmd("INFO").arg("server").query(&mut con);
                if let Ok(text) = info {
                    // Our own process, not someone else's server on the same port.
                    if parse_info(&text).get("process_id") == Some(&self.pid.to_string()) {
                        return Ok(());
                    }
                }
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "redis-server not ready after 20 s:\n{}",
                    tail(&self.dir.join("redis.log"), 30)
                ));
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    fn try_conn(&self) -> RedisResult<Connection> {
        let client = redis::Client::open(self.url())?;
        let con = client.get_connection_with_timeout(Duration::from_secs(5))?;
        con.set_read_timeout(Some(READ_TIMEOUT))?;
        con.set_write_timeout(Some(READ_TIMEOUT))?;
        Ok(con)
    }

    /// A new connection with [`READ_TIMEOUT`]; panics when the server is gone.
    pub fn conn(&self) -> Connection {
        self.try_conn().unwrap_or_else(|e| {
            panic!(
                "connect to redis-server on port {}: {e}\n{}",
                self.port,
                tail(&self.dir.join("redis.log"), 20)
            )
        })
    }

    /// Panics with the log tail when the server has died (e.g. a module crash).
    pub fn check_alive(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!(
                "redis-server (pid {}) died with {status}:\n{}",
                self.pid,
                tail(&self.dir.join("redis.log"), 40)
            );
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        // Stop exactly our own process, by its PID.
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::env::var_os("DLOCK_BENCH_KEEP_DIR").is_none() {
            let _ = fs::remove_dir_all(&self.dir);
        } else {
            eprintln!("kept {}", self.dir.display());
        }
    }
}

/// `field:value` lines of an INFO reply.
pub fn parse_info(text: &str) -> HashMap<String, String> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.trim_end().split_once(':'))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// `INFO <section>` as a map.
pub fn info(con: &mut Connection, section: &str) -> HashMap<String, String> {
    let text: String = redis::cmd("INFO")
        .arg(section)
        .query(con)
        .unwrap_or_else(|e| panic!("INFO {section}: {e}"));
    parse_info(&text)
}

/// `INFO commandstats`: command name (lower case) → (calls, total usec).
pub fn commandstats(con: &mut Connection) -> HashMap<String, (u64, u64)> {
    let mut out = HashMap::new();
    for (k, v) in info(con, "commandstats") {
        let Some(name) = k.strip_prefix("cmdstat_") else {
            continue;
        };
        let mut calls = 0;
        let mut usec = 0;
        for kv in v.split(',') {
            match kv.split_once('=') {
                Some(("calls", n)) => calls = n.parse().unwrap_or(0),
                Some(("usec", n)) => usec = n.parse().unwrap_or(0),
                _ => {}
            }
        }
        out.insert(name.to_ascii_lowercase(), (calls, usec));
    }
    out
}

/// `INFO memory` used_memory, in bytes.
pub fn used_memory(con: &mut Connection) -> i64 {
    info(con, "memory")
        .get("used_memory")
        .and_then(|v| v.parse().ok())
        .expect("used_memory in INFO memory")
}
