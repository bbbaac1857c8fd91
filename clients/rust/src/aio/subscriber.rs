//! The async client's subscriber (docs/clients.md, rule 2): one tokio task and one
//! pub/sub connection per [`super::AsyncClient`], as the blocking client's
//! ([`crate::subscriber`]) is one thread: started at the first hold, subscribed to the
//! channels of the client's holds, resubscribed (and every hold checked) after a
//! reconnect; a message checks each hold on its key at once (`DLOCK.CHECK`). The rules
//! are [`crate::core::notice`]'s.
//!
//! The task stops when the client closes (it is aborted), when the client is gone, or
//! after [`LINGER`] without holds. The checks it starts are its own (a `JoinSet`), so
//! none outlives it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use redis::aio::MultiplexedConnection;
use tokio::task::JoinSet;

use super::AsyncInner;
use crate::core::notice::{Check, Notices};
use crate::subscriber::LINGER;

/// The longest pause between two connection attempts.
const MAX_PAUSE: Duration = Duration::from_secs(1);

/// The subscriber task of `weak`'s client.
pub(super) async fn run(weak: Weak<AsyncInner>, notices: Arc<Notices>) {
    let mut pause = Duration::from_millis(50);
    loop {
        if notices.retire(Instant::now(), LINGER) {
            return;
        }
        let Some(inner) = weak.upgrade() else {
            notices.stopped();
            return;
        };
        let timeout = inner.opts.command_timeout;
        let ps = inner.pubsub(inner.opts.connect_timeout).await;
        drop(inner);
        match ps {
            Ok(ps) => {
                pause = Duration::from_millis(50);
                let stop = serve(&weak, &notices, ps, timeout).await;
                notices.reset();
                if stop {
                    return;
                }
            }
            Err(_) => {
                // Down or refusing: the holds' clocks decide meanwhile.
                tokio::time::sleep(pause).await;
                pause = pause.saturating_mul(2).min(MAX_PAUSE);
            }
        }
    }
}

/// Serves one connection until it fails (`false`: connect again) or the subscriber
/// must stop (`true`).
async fn serve(
    weak: &Weak<AsyncInner>,
    notices: &Notices,
    ps: redis::aio::PubSub,
    timeout: Duration,
) -> bool {
    let (mut sink, mut stream) = ps.split();
    let mut checks = JoinSet::new();
    // The checks' own connection (none of the pool's: a BIND hold's stays its own);
    // `stale` once a check found it failed.
    let mut checker: Option<MultiplexedConnection> = None;
    let stale = Arc::new(AtomicBool::new(false));
    loop {
        if notices.retire(Instant::now(), LINGER) {
            return true;
        }
        if notices.must_reconnect() {
            return false;
        }
        let plan = notices.plan();
        if !plan.unsubscribe.is_empty() {
            match tokio::time::timeout(timeout, sink.unsubscribe(&plan.unsubscribe)).await {
                Ok(Ok(())) => notices.unsubscribed(&plan.unsubscribe),
                _ => return false,
            }
        }
        if !plan.subscribe.is_empty() {
            match tokio::time::timeout(timeout, sink.subscribe(&plan.subscribe)).await {
                Ok(Ok(())) => {
                    let found = notices.subscribed(&plan.subscribe);
                    let con = checker_for(weak, &mut checker, &stale, !found.is_empty()).await;
                    if !start_checks(weak, found, con, &stale, &mut checks) {
                        return true;
                    }
                }
                _ => return false,
            }
        }
        tokio::select! {
            msg = stream.next() => match msg {
                Some(msg) => {
                    let found = notices.message(msg.get_channel_name(), msg.get_payload_bytes());
                    let con = checker_for(weak, &mut checker, &stale, !found.is_empty()).await;
                    if !start_checks(weak, found, con, &stale, &mut checks) {
                        return true;
                    }
                }
                None => return false,
            },
            _ = notices.changed.notified() => {}
            // Looks at `retire` now and then.
            _ = tokio::time::sleep(LINGER) => {}
            Some(_) = checks.join_next(), if !checks.is_empty() => {}
        }
    }
}

/// The checks' connection in `slot`, made when missing or `stale` (`None` when it cannot
/// be made: the checks then make their own) — only when checks are `wanted`.
async fn checker_for(
    weak: &Weak<AsyncInner>,
    slot: &mut Option<MultiplexedConnection>,
    stale: &AtomicBool,
    wanted: bool,
) -> Option<MultiplexedConnection> {
    if !wanted {
        return None;
    }
    if stale.swap(false, Ordering::SeqCst) {
        *slot = None;
    }
    if slot.is_none() {
        let inner = weak.upgrade()?;
        *slot = inner.connect(inner.opts.command_timeout).await.ok();
    }
    slot.clone()
}

/// Starts `found` in `set`, on `con` (each once more on a fresh connection after a
/// connection failure, which marks `con` `stale`); false when the client is gone.
fn start_checks(
    weak: &Weak<AsyncInner>,
    found: Vec<Check>,
    con: Option<MultiplexedConnection>,
    stale: &Arc<AtomicBool>,
    set: &mut JoinSet<()>,
) -> bool {
    if found.is_empty() {
        return true;
    }
    let Some(inner) = weak.upgrade() else {
        return false;
    };
    for c in found {
        let (inner, con, stale) = (inner.clone(), con.clone(), stale.clone());
        set.spawn(async move {
            let (r, failed) = inner.run_on(con, &c.cmd, inner.opts.command_timeout).await;
            if failed {
                stale.store(true, Ordering::SeqCst);
            }
            c.answered(&r);
        });
    }
    true
}
