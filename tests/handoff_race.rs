//! A waiter whose WAIT times out at the moment the lock is handed to it must
//! end in exactly one state: granted and told so, or not granted and not
//! holding — never holding the lock without a reply.
//!
//! Each trial makes the holder's lease end and the waiter's WAIT end at about
//! the same instant (with offsets on both sides), then checks that the
//! waiter's reply and the server's state agree.

mod common;
use common::*;

use redis::Value;
use std::time::Duration;

fn holds(con: &mut redis::Connection, key: &str, owner: &str) -> bool {
    let info: Value = redis::cmd("DLOCK.INFO").arg(key).query(con).unwrap();
    let Value::Array(fields) = info else {
        return false;
    };
    let mut it = fields.iter();
    while let Some(f) = it.next() {
        let v = it.next();
        if f == &Value::BulkString(b"holders".to_vec()) {
            if let Some(Value::Array(holders)) = v {
                return holders.iter().any(|h| match h {
                    Value::Array(hf) => hf.contains(&Value::BulkString(owner.as_bytes().to_vec())),
                    _ => false,
                });
            }
        }
    }
    false
}

#[test]
fn timeout_at_handoff_ends_in_exactly_one_state() {
    let server = Server::start();
    let mut admin = server.conn();
    let mut granted = 0;
    let mut timed_out = 0;
    // Offsets (ms) of the waiter's WAIT end relative to the holder's lease end.
    let offsets: [i64; 11] = [-6, -4, -2, -1, 0, 0, 0, 1, 2, 4, 6];
    for round in 0..4 {
        for (i, off) in offsets.iter().enumerate() {
            let key = format!("race:{round}:{i}");
            let lease: i64 = 60;
            let token: i64 = redis::cmd("DLOCK.ACQUIRE")
                .arg(&key)
                .arg("holder")
                .arg("PX")
                .arg(lease)
                .query(&mut admin)
                .unwrap();
            assert!(token > 0);
            let mut waiter = server.conn();
            let reply: Option<i64> = redis::cmd("DLOCK.ACQUIRE")
                .arg(&key)
                .arg("waiter")
                .arg("PX")
                .arg(10_000)
                .arg("WAIT")
                .arg(lease + off)
                .query(&mut waiter)
                .unwrap();
            match reply {
                Some(t) => {
                    granted += 1;
                    assert!(t > token, "a handoff issues a newer token");
                    assert!(
                        holds(&mut admin, &key, "waiter"),
                        "told granted, so it holds"
                    );
                    let r: i64 = redis::cmd("DLOCK.RELEASE")
                        .arg(&key)
                        .arg("waiter")
                        .query(&mut admin)
                        .unwrap();
                    assert_eq!(r, 1);
                }
                None => {
                    timed_out += 1;
                    assert!(
                        !holds(&mut admin, &key, "waiter"),
                        "told nil, so it must not hold"
                    );
                    let e = expect_err(
                        redis::cmd("DLOCK.RELEASE")
                            .arg(&key)
                            .arg("waiter")
                            .query::<i64>(&mut admin),
                    );
                    assert!(e.starts_with("NOTHELD"), "{e}");
                    // No waiter may be left behind either.
                    assert!(wait_until(Duration::from_secs(5), || {
                        let v: Value = redis::cmd("DLOCK.INFO")
                            .arg(&key)
                            .query(&mut admin)
                            .unwrap();
                        v == Value::Nil
                    }));
                }
            }
        }
    }
    eprintln!("granted {granted}, timed out {timed_out}");
    assert_eq!(granted + timed_out, 4 * offsets.len());
}
