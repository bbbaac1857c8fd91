//! Recipes on top of the lock commands (blocking API): [`run_once`] — ShedLock's
//! scheduled-job lock — and [`Election`] — etcd's / Curator's leader election.
//!
//! The semantics, shared with the Python package and the Node package, are in
//! `docs/recipes.md`.

mod election;
mod run_once;

pub use election::{value_key, Election, Leader, Observer, Term};
pub use run_once::{run_once, JobContext, RunOnce, RunOutcome};

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;

use redis::{Cmd, Value};

use crate::blocking::Inner;
use crate::cmd;
use crate::error::{Error, Result};
use crate::lost::{LostReason, LostState};

/// A thread subscribed to `channel` that calls `on_message` for every message (until it
/// answers `false`, or `stop` is set). Returns once the subscription is in place, so a
/// state read after it misses no message.
pub(crate) fn listen(
    inner: &Arc<Inner>,
    channel: String,
    stop: Arc<AtomicBool>,
    mut on_message: impl FnMut() -> bool + Send + 'static,
) -> Result<JoinHandle<()>> {
    let timeout = inner.opts.connect_timeout;
    let mut con = inner.connect(timeout)?;
    let (ready_tx, ready_rx) = mpsc::channel::<Result<()>>();
    let handle = std::thread::Builder::new()
        .name("dlock-listen".into())
        .spawn(move || {
            let mut ps = con.as_pubsub();
            if let Err(e) = ps.subscribe(&channel) {
                let _ = ready_tx.send(Err(e.into()));
                return;
            }
            if let Err(e) = ps.set_read_timeout(Some(Duration::from_millis(200))) {
                let _ = ready_tx.send(Err(e.into()));
                return;
            }
            let _ = ready_tx.send(Ok(()));
            while !stop.load(Ordering::SeqCst) {
                match ps.get_message() {
                    Ok(_) => {
                        if stop.load(Ordering::SeqCst) || !on_message() {
                            return;
                        }
                    }
                    Err(e) if e.is_timeout() => {}
                    Err(_) => return,
                }
            }
        })
        .map_err(|e| Error::Unexpected(format!("cannot start a listener thread: {e}")))?;
    match ready_rx.recv_timeout(timeout.saturating_add(Duration::from_secs(1))) {
        Ok(Ok(())) => Ok(handle),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(Error::Unexpected("the subscription did not start".into())),
    }
}

/// `DLOCK.FENCED key token command…` for a recipe's hold: a refusal (the token is no
/// longer live) also fires the hold's lost signal.
pub(crate) fn fenced(
    inner: &Inner,
    key: &str,
    token: u64,
    lost: &LostState,
    command: &Cmd,
) -> Result<Value> {
    let c = cmd::fenced(key, token, command);
    inner.run(&c, inner.opts.command_timeout).map_err(|e| {
        let e = Error::from(e);
        if e.is_fenced() {
            lost.mark(LostReason::NotHeld);
        }
        e
    })
}
