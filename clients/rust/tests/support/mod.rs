//! What the client crate's integration tests share: the workspace's one
//! harness (tests/common, linted where it lives) and a few helpers.
#![allow(dead_code)]

#[path = "../../../../tests/common/mod.rs"]
#[allow(clippy::all)]
mod common;

pub use common::*;

use dlock_client::Options;
use redis::Value;
use std::time::Duration;

/// Options for watchdog tests: a 1 s lease renewed every 300 ms.
pub fn fast_watchdog() -> Options {
    Options::default()
        .watchdog_lease(Duration::from_secs(1))
        .renew_interval(Duration::from_millis(300))
        .command_timeout(Duration::from_secs(2))
        .connect_timeout(Duration::from_secs(2))
}

/// Whether `key` holds no lock on `server`.
pub fn info_nil(server: &Server, key: &str) -> bool {
    matches!(
        cmd_str(&mut server.conn(), &["DLOCK.INFO", key]),
        Ok(Value::Nil)
    )
}
