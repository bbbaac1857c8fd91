//! Redis Sentinel: clients that find the current master through Sentinels (the
//! `redis` crate's sentinel support) and follow it across a failover.
//!
//! Every new connection asks the Sentinels for the master of the service (and checks
//! with `ROLE` that it is one). Before a command, at most once a second
//! ([`RECHECK`]), the client asks again; when the Sentinels name another master, the
//! idle connections (to the old one, which may still take writes for a while after a
//! failover) are dropped. When a command fails on a pooled connection — the old master
//! died, or was demoted and answers `READONLY` — the idle connections are dropped too;
//! a command refused with `READONLY` (not run) is sent once more on a fresh
//! connection. A command cut off by a dying master is not retried (an acquire may or
//! may not have run): its error reaches the caller, who tries again.
//!
//! ```no_run
//! use dlock_client::Client;
//!
//! let client = Client::sentinel(
//!     ["redis://10.0.0.1:26379/", "redis://10.0.0.2:26379/", "redis://10.0.0.3:26379/"],
//!     "mymaster",
//! )?;
//! let guard = client.mutex("orders").lock()?;
//! # Ok::<(), dlock_client::Error>(())
//! ```

use std::sync::Mutex;
use std::time::{Duration, Instant};

use redis::sentinel::{Sentinel, SentinelNodeConnectionInfo};
use redis::{IntoConnectionInfo, RedisResult};

use crate::core::Endpoint;
use crate::error::{Error, Result};

/// How often, at most, a client asks the Sentinels whether the master moved.
pub(crate) const RECHECK: Duration = Duration::from_secs(1);

/// The master last named, and when it was asked.
#[derive(Default)]
struct Known(Mutex<Option<(String, Instant)>>);

impl Known {
    /// Whether it is time to ask again.
    fn due(&self, now: Instant) -> bool {
        match &*self.0.lock().unwrap_or_else(|e| e.into_inner()) {
            Some((_, at)) => now.saturating_duration_since(*at) >= RECHECK,
            None => true,
        }
    }

    /// Files the master named now; true when it is another than the one before.
    fn moved(&self, client: &redis::Client) -> bool {
        let addr = client.get_connection_info().addr().to_string();
        let mut k = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let moved = matches!(&*k, Some((a, _)) if *a != addr);
        *k = Some((addr, Instant::now()));
        moved
    }
}

/// The Sentinels of one service, for the blocking client.
pub(crate) struct Source {
    sentinel: Mutex<Sentinel>,
    service: String,
    known: Known,
}

impl Source {
    /// A client for the current master (asked of the Sentinels).
    pub(crate) fn master(&self) -> RedisResult<redis::Client> {
        let mut s = self.sentinel.lock().unwrap_or_else(|e| e.into_inner());
        let c = s.master_for(&self.service, Some(&node_info()))?;
        self.known.moved(&c);
        Ok(c)
    }

    /// Asks again when [`RECHECK`] has passed: true when the master moved (drop the
    /// idle connections). An unanswered question counts as no move.
    pub(crate) fn moved(&self) -> bool {
        if !self.known.due(Instant::now()) {
            return false;
        }
        let mut s = self.sentinel.lock().unwrap_or_else(|e| e.into_inner());
        match s.master_for(&self.service, Some(&node_info())) {
            Ok(c) => self.known.moved(&c),
            Err(_) => false,
        }
    }
}

/// The Sentinels of one service, for the async client.
pub(crate) struct AsyncSource {
    sentinel: tokio::sync::Mutex<Sentinel>,
    service: String,
    known: Known,
}

impl AsyncSource {
    /// A client for the current master (asked of the Sentinels).
    pub(crate) async fn master(&self) -> RedisResult<redis::Client> {
        let mut s = self.sentinel.lock().await;
        let c = s
            .async_master_for(&self.service, Some(&node_info()))
            .await?;
        self.known.moved(&c);
        Ok(c)
    }

    /// As [`Source::moved`].
    pub(crate) async fn moved(&self) -> bool {
        if !self.known.due(Instant::now()) {
            return false;
        }
        let mut s = self.sentinel.lock().await;
        match s.async_master_for(&self.service, Some(&node_info())).await {
            Ok(c) => self.known.moved(&c),
            Err(_) => false,
        }
    }
}

/// How masters are connected to: RESP2, no credentials, database 0 (as the crate's
/// own endpoints).
fn node_info() -> SentinelNodeConnectionInfo {
    SentinelNodeConnectionInfo::default().set_redis_connection_info(crate::core::bare_settings())
}

/// The Sentinels' addresses, checked, and an endpoint that stands for the service.
fn open<U: IntoConnectionInfo>(
    sentinels: impl IntoIterator<Item = U>,
    service: &str,
) -> Result<(Sentinel, Endpoint)> {
    let infos = sentinels
        .into_iter()
        .map(|u| u.into_connection_info())
        .collect::<RedisResult<Vec<_>>>()?;
    let Some(first) = infos.first().cloned() else {
        return Err(Error::Invalid(
            "a Sentinel client needs at least one Sentinel address, got none".into(),
        ));
    };
    if service.is_empty() {
        return Err(Error::Invalid(
            "a Sentinel client needs the service (master) name, got an empty one".into(),
        ));
    }
    let mut endpoint = Endpoint::open(first)?;
    endpoint.server = format!("sentinel:{service}");
    endpoint.setup.clear();
    Ok((Sentinel::build(infos)?, endpoint))
}

pub(crate) fn source<U: IntoConnectionInfo>(
    sentinels: impl IntoIterator<Item = U>,
    service: &str,
) -> Result<(Source, Endpoint)> {
    let (sentinel, endpoint) = open(sentinels, service)?;
    let s = Source {
        sentinel: Mutex::new(sentinel),
        service: service.to_string(),
        known: Known::default(),
    };
    Ok((s, endpoint))
}

pub(crate) fn async_source<U: IntoConnectionInfo>(
    sentinels: impl IntoIterator<Item = U>,
    service: &str,
) -> Result<(AsyncSource, Endpoint)> {
    let (sentinel, endpoint) = open(sentinels, service)?;
    let s = AsyncSource {
        sentinel: tokio::sync::Mutex::new(sentinel),
        service: service.to_string(),
        known: Known::default(),
    };
    Ok((s, endpoint))
}
