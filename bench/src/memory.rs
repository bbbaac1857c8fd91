//! Part 2: memory per held lock — `used_memory` delta over many held locks,
//! and `MEMORY USAGE` of one.

use std::thread;
use std::time::Duration;

use redis::{Connection, ConnectionLike, Value};

use crate::scripts::Shas;
use crate::server::used_memory;
use crate::{LEASE_MS, OWNER};

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Kind {
    SetString,
    RedissonHash,
    Dlock,
}

impl Kind {
    pub const ALL: [Kind; 3] = [Kind::SetString, Kind::RedissonHash, Kind::Dlock];

    pub fn label(self) -> &'static str {
        match self {
            Kind::SetString => "SET-string lock (`SET NX PX`)",
            Kind::RedissonHash => "Redisson-style hash lock",
            Kind::Dlock => "**dlock mutex**",
        }
    }

    /// The figure on its machines (bytes per held lock).
    pub fn reference(self) -> Option<f64> {
        match self {
            Kind::SetString => Some(181.0),
            Kind::RedissonHash => Some(197.0),
            Kind::Dlock => None,
        }
    }

    fn command(self, shas: &Shas, i: usize) -> redis::Cmd {
        let key = format!("lock:{i}");
        let mut c;
        match self {
            Kind::SetString => {
                c = redis::cmd("SET");
                c.arg(&key).arg(OWNER).arg("NX").arg("PX").arg(LEASE_MS);
            }
            Kind::RedissonHash => {
                c = redis::cmd("EVALSHA");
                c.arg(&shas.r_acquire)
                    .arg(1)
                    .arg(&key)
                    .arg(LEASE_MS)
                    .arg(OWNER);
            }
            Kind::Dlock => {
                c = redis::cmd("DLOCK.ACQUIRE");
                c.arg(&key).arg(OWNER).arg("PX").arg(LEASE_MS);
            }
        }
        c
    }
}

#[derive(Clone, Copy, Debug, Default)]
pub struct Sample {
    /// used_memory delta divided by the number of locks, bytes.
    pub per_lock: f64,
    /// `MEMORY USAGE lock:0 SAMPLES 0`, bytes.
    pub usage: f64,
}

fn settle(con: &mut Connection) -> i64 {
    // Let lazy frees and client buffers settle, then read.
    thread::sleep(Duration::from_millis(50));
    used_memory(con)
}

pub fn measure(con: &mut Connection, shas: &Shas, kind: Kind, n: usize) -> Sample {
    let _: () = redis::cmd("FLUSHALL").arg("SYNC").query(con).unwrap();
    let before = settle(con);
    let mut i = 0;
    while i < n {
        let end = (i + 1000).min(n);
        let mut buf = Vec::new();
        for k in i..end {
            buf.extend_from_slice(&kind.command(shas, k).get_packed_command());
        }
        let replies = con.req_packed_commands(&buf, 0, end - i).unwrap();
        for v in &replies {
            let ok = match kind {
                Kind::SetString => matches!(v, Value::Okay),
                Kind::RedissonHash => matches!(v, Value::Nil),
                Kind::Dlock => matches!(v, Value::Int(t) if *t > 0),
            };
            assert!(ok, "{kind:?}: unexpected reply {v:?}");
        }
        i = end;
    }
    let after = settle(con);
    let dbsize: i64 = redis::cmd("DBSIZE").query(con).unwrap();
    assert_eq!(dbsize as usize, n, "{kind:?}: expected {n} keys");
    let usage: i64 = redis::cmd("MEMORY")
        .arg("USAGE")
        .arg("lock:0")
        .arg("SAMPLES")
        .arg(0)
        .query(con)
        .unwrap();
    let _: () = redis::cmd("FLUSHALL").arg("SYNC").query(con).unwrap();
    Sample {
        per_lock: (after - before) as f64 / n as f64,
        usage: usage as f64,
    }
}
