//! The blocking client's subscriber (docs/clients.md, rule 2): one thread and one
//! pub/sub connection per [`crate::Client`], started at the first hold, subscribed to
//! the channels of the client's holds, resubscribed (and every hold checked) after a
//! reconnect. A message on a lock's channel checks each hold on that key at once
//! (`DLOCK.CHECK`). What to subscribe to and what a message means is
//! [`crate::core::notice`]; this only does the I/O.
//!
//! The thread stops when the client closes, when the client is gone, or after
//! [`LINGER`] without holds (the next hold starts it again).

use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::blocking::Inner;
use crate::core::notice::{Check, Notices};

/// How long one read of the subscription blocks before the thread looks for new holds
/// (a hold is checked once its channel is subscribed, so nothing is missed meanwhile).
const POLL: Duration = Duration::from_millis(100);
/// How long the thread stays after the client's last hold.
pub(crate) const LINGER: Duration = Duration::from_secs(2);
/// The longest pause between two connection attempts.
const MAX_PAUSE: Duration = Duration::from_secs(1);

/// Starts the subscriber of `inner`'s client.
pub(crate) fn spawn(inner: &Arc<Inner>) -> std::io::Result<JoinHandle<()>> {
    let weak = Arc::downgrade(inner);
    let notices = inner.notices.clone();
    std::thread::Builder::new()
        .name("dlock-notices".into())
        .spawn(move || run(&weak, &notices))
}

fn run(weak: &Weak<Inner>, notices: &Notices) {
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
        let con = inner.connect(inner.opts.connect_timeout);
        drop(inner);
        match con {
            Ok(mut con) => {
                pause = Duration::from_millis(50);
                let stop = serve(weak, notices, &mut con, timeout);
                notices.reset();
                if stop {
                    return;
                }
            }
            Err(_) => {
                // Down or refusing: the holds' clocks decide meanwhile.
                let until = crate::later(Instant::now(), pause);
                while Instant::now() < until {
                    if notices.is_closed() {
                        notices.stopped();
                        return;
                    }
                    std::thread::sleep(POLL.min(until.saturating_duration_since(Instant::now())));
                }
                pause = pause.saturating_mul(2).min(MAX_PAUSE);
            }
        }
    }
}

/// Serves one connection until it fails (`false`: connect again) or the subscriber
/// must stop (`true`).
fn serve(
    weak: &Weak<Inner>,
    notices: &Notices,
    con: &mut redis::Connection,
    timeout: Duration,
) -> bool {
    // The checks' own connection (none of the pool's: a BIND hold's stays its own).
    let mut checker = None;
    let mut ps = con.as_pubsub();
    loop {
        if notices.retire(Instant::now(), LINGER) {
            return true;
        }
        if notices.must_reconnect() {
            return false;
        }
        let plan = notices.plan();
        if !plan.subscribe.is_empty() || !plan.unsubscribe.is_empty() {
            if ps.set_read_timeout(Some(timeout)).is_err() {
                return false;
            }
            if !plan.unsubscribe.is_empty() {
                if ps.unsubscribe(&plan.unsubscribe).is_err() {
                    return false;
                }
                notices.unsubscribed(&plan.unsubscribe);
            }
            if !plan.subscribe.is_empty() {
                if ps.subscribe(&plan.subscribe).is_err() {
                    return false;
                }
                if !run_checks(weak, notices.subscribed(&plan.subscribe), &mut checker) {
                    return true;
                }
            }
        }
        if ps.set_read_timeout(Some(POLL)).is_err() {
            return false;
        }
        match ps.get_message() {
            Ok(msg) => {
                let checks = notices.message(msg.get_channel_name(), msg.get_payload_bytes());
                if !run_checks(weak, checks, &mut checker) {
                    return true;
                }
            }
            Err(e) if e.is_timeout() => {}
            Err(_) => return false,
        }
    }
}

/// Runs `checks` on the checks' connection in `checker` (each once more on a fresh
/// connection after a connection failure); false when the client is gone.
fn run_checks(
    weak: &Weak<Inner>,
    checks: Vec<Check>,
    checker: &mut Option<redis::Connection>,
) -> bool {
    if checks.is_empty() {
        return true;
    }
    let Some(inner) = weak.upgrade() else {
        return false;
    };
    for c in &checks {
        c.answered(&inner.run_in(checker, &c.cmd, inner.opts.command_timeout));
    }
    true
}
