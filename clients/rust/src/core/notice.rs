//! Prompt notice (docs/clients.md, rule 2) without I/O: which lock channels a client's
//! one subscriber connection must listen on, and which holds to check
//! (`DLOCK.CHECK key token`) when a message arrives or a subscription is (re)made.
//!
//! Every hold of a client registers here from its grant until its owner lets it go.
//! The subscriber (a thread of the blocking client, a task of the async one) asks
//! [`Notices::plan`] what to subscribe to, reports what it did, and runs the
//! [`Check`]s it is handed; a check that answers 0 marks the hold lost with the
//! reason the notice gave.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use redis::{Cmd, RedisResult, Value};

use crate::cmd;
use crate::lost::{LostReason, LostState};

/// A registered hold ([`Notices::watch`]), to give to [`Notices::unwatch`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct NoticeId(u64);

/// One `DLOCK.CHECK` of a hold, and what a `0` means.
#[derive(Debug)]
pub(crate) struct Check {
    lost: Arc<LostState>,
    /// `DLOCK.CHECK key token`.
    pub cmd: Cmd,
    reason: LostReason,
}

impl Check {
    /// Files the check's answer: a dead token marks the hold lost (an error changes
    /// nothing; the lease clock still decides).
    pub(crate) fn answered(&self, r: &RedisResult<Value>) {
        if matches!(r, Ok(Value::Int(0))) {
            self.lost.mark(self.reason);
        }
    }
}

/// What the subscriber must change on its connection.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Plan {
    pub subscribe: Vec<String>,
    pub unsubscribe: Vec<String>,
}

/// Stops a hold's watchdog when the client closes.
pub(crate) type Halt = Box<dyn Fn() + Send + Sync>;

struct Watched {
    channel: String,
    key: String,
    token: u64,
    lost: Arc<LostState>,
    halt: Option<Halt>,
}

#[derive(Default)]
struct Registry {
    next: u64,
    holds: BTreeMap<NoticeId, Watched>,
    /// Channels the subscriber's connection has confirmed.
    subscribed: BTreeSet<String>,
    /// Whether a subscriber runs (or was started).
    running: bool,
    /// Since when no hold is registered (the subscriber stops after a while).
    idle_since: Option<Instant>,
    /// The master may have moved (Sentinel): the subscriber connects again.
    moved: bool,
    closed: bool,
}

impl Registry {
    fn wanted(&self) -> BTreeSet<&str> {
        self.holds.values().map(|w| w.channel.as_str()).collect()
    }

    /// Checks of the live holds on `channel`, each with `reason` for a dead token.
    fn checks(&self, channel: &str, reason: LostReason) -> Vec<Check> {
        self.holds
            .values()
            .filter(|w| w.channel == channel && !w.lost.is_lost())
            .map(|w| Check {
                lost: w.lost.clone(),
                cmd: cmd::check(&w.key, w.token),
                reason,
            })
            .collect()
    }
}

/// The holds of one client object and the state of its subscription.
#[derive(Default)]
pub(crate) struct Notices {
    state: Mutex<Registry>,
    /// Woken when the holds change (the async subscriber waits on it).
    pub changed: tokio::sync::Notify,
}

impl std::fmt::Debug for Notices {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let r = self.lock();
        f.debug_struct("Notices")
            .field("holds", &r.holds.len())
            .field("subscribed", &r.subscribed)
            .finish_non_exhaustive()
    }
}

impl Notices {
    fn lock(&self) -> MutexGuard<'_, Registry> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers the hold of `token` on `key` (`halt` stops its watchdog when the
    /// client closes). Answers its id, and whether the caller must start a subscriber:
    /// none runs, or the one that ran is gone (`alive` false).
    pub(crate) fn watch(
        &self,
        key: &str,
        token: u64,
        lost: Arc<LostState>,
        halt: Option<Halt>,
        alive: bool,
    ) -> (NoticeId, bool) {
        let mut r = self.lock();
        r.next = r.next.wrapping_add(1);
        let id = NoticeId(r.next);
        r.holds.insert(
            id,
            Watched {
                channel: crate::channel_for(key),
                key: key.to_string(),
                token,
                lost,
                halt,
            },
        );
        r.idle_since = None;
        let start = !r.closed && (!r.running || !alive);
        if start {
            r.running = true;
            // A new subscriber starts on a new connection.
            r.subscribed.clear();
        }
        drop(r);
        self.changed.notify_one();
        (id, start)
    }

    /// The owner let the hold go (or the guard is gone): no more checks for it.
    pub(crate) fn unwatch(&self, id: NoticeId) {
        let mut r = self.lock();
        r.holds.remove(&id);
        if r.holds.is_empty() {
            r.idle_since = Some(Instant::now());
        }
        drop(r);
        self.changed.notify_one();
    }

    /// What the subscriber's connection must subscribe to and unsubscribe from now.
    pub(crate) fn plan(&self) -> Plan {
        let r = self.lock();
        let wanted = r.wanted();
        Plan {
            subscribe: wanted
                .iter()
                .filter(|c| !r.subscribed.contains(**c))
                .map(|c| c.to_string())
                .collect(),
            unsubscribe: r
                .subscribed
                .iter()
                .filter(|c| !wanted.contains(c.as_str()))
                .cloned()
                .collect(),
        }
    }

    /// The connection confirmed `channels`: every hold on them is checked, as an end
    /// between its grant and now was not heard (reason [`LostReason::NotHeld`]).
    pub(crate) fn subscribed(&self, channels: &[String]) -> Vec<Check> {
        let mut r = self.lock();
        let mut checks = Vec::new();
        for c in channels {
            r.subscribed.insert(c.clone());
            checks.extend(r.checks(c, LostReason::NotHeld));
        }
        checks
    }

    /// The connection left `channels`.
    pub(crate) fn unsubscribed(&self, channels: &[String]) {
        let mut r = self.lock();
        for c in channels {
            r.subscribed.remove(c);
        }
    }

    /// The subscriber's connection is gone: nothing is subscribed any more (the next
    /// connection subscribes again, and checks every hold).
    pub(crate) fn reset(&self) {
        let mut r = self.lock();
        r.subscribed.clear();
        r.moved = false;
    }

    /// The client found that its master moved (Sentinel): the subscriber's connection
    /// may lead to the old one.
    pub(crate) fn master_moved(&self) {
        self.lock().moved = true;
        self.changed.notify_one();
    }

    /// Whether the subscriber must connect again (the master moved).
    pub(crate) fn must_reconnect(&self) -> bool {
        self.lock().moved
    }

    /// A message on `channel`: check each hold on it, with the reason the message gives.
    pub(crate) fn message(&self, channel: &str, payload: &[u8]) -> Vec<Check> {
        self.lock().checks(channel, LostReason::of_notice(payload))
    }

    /// Whether the subscriber should stop: the client closed, or it had no hold for
    /// `linger`. A subscriber that is told to stop no longer counts as running.
    pub(crate) fn retire(&self, now: Instant, linger: Duration) -> bool {
        let mut r = self.lock();
        let idle = r
            .idle_since
            .is_some_and(|t| now.saturating_duration_since(t) >= linger);
        let stop = r.closed || (r.holds.is_empty() && idle);
        if stop {
            r.running = false;
            r.subscribed.clear();
        }
        stop
    }

    /// The subscriber ended for another reason (its client is gone).
    pub(crate) fn stopped(&self) {
        let mut r = self.lock();
        r.running = false;
        r.subscribed.clear();
    }

    /// Whether the client was closed.
    pub(crate) fn is_closed(&self) -> bool {
        self.lock().closed
    }

    /// The client closes: every hold is forgotten and its watchdog stopped (its lease
    /// ends on the server; its lost signal fires then, by its clock). Idempotent.
    pub(crate) fn close(&self) {
        let holds = {
            let mut r = self.lock();
            r.closed = true;
            r.subscribed.clear();
            std::mem::take(&mut r.holds)
        };
        self.changed.notify_one();
        for w in holds.into_values() {
            if let Some(halt) = w.halt {
                halt();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(c: &Cmd) -> Vec<String> {
        c.args_iter()
            .filter_map(|a| match a {
                redis::Arg::Simple(b) => Some(String::from_utf8_lossy(b).into_owned()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn subscribes_while_holds_need_it_and_checks_on_each_notice() {
        let n = Notices::default();
        let a = LostState::new(None, LostReason::Unreachable);
        let b = LostState::new(None, LostReason::Unreachable);
        let (ia, start) = n.watch("k", 7, a.clone(), None, false);
        assert!(start, "the first hold starts a subscriber");
        let (_ib, start) = n.watch("{t}:x", 9, b.clone(), None, true);
        assert!(!start, "one subscriber per client");
        let plan = n.plan();
        assert_eq!(plan.subscribe, ["dlock:{k}", "dlock:{t}:x"]);
        // Subscribed: each hold on those channels is checked once.
        let checks = n.subscribed(&plan.subscribe);
        assert_eq!(checks.len(), 2);
        assert_eq!(words(&checks[0].cmd), ["DLOCK.CHECK", "k", "7"]);
        assert_eq!(n.plan(), Plan::default());
        // A force-release: the check answers 0, the hold is lost as forced.
        let checks = n.message("dlock:{k}", b"released");
        assert_eq!(checks.len(), 1);
        checks[0].answered(&Ok(Value::Int(1)));
        assert!(!a.is_lost(), "a live token is not lost");
        checks[0].answered(&Ok(Value::Int(0)));
        assert_eq!(a.reason(), Some(LostReason::Forced));
        assert!(
            n.message("dlock:{k}", b"released").is_empty(),
            "lost: not checked again"
        );
        n.unwatch(ia);
        assert_eq!(n.plan().unsubscribe, ["dlock:{k}"]);
        n.unsubscribed(&["dlock:{k}".to_string()]);
        // The master moved (Sentinel): connect again. The connection drops:
        // everything is subscribed (and checked) again.
        n.master_moved();
        assert!(n.must_reconnect());
        n.reset();
        assert!(!n.must_reconnect());
        assert_eq!(n.plan().subscribe, ["dlock:{t}:x"]);
        let checks = n.message("dlock:{t}:x", b"disconnected");
        checks[0].answered(&Ok(Value::Int(0)));
        assert_eq!(b.reason(), Some(LostReason::Disconnected));
    }

    #[test]
    fn retires_after_a_linger_without_holds_and_closes_once() {
        let n = Notices::default();
        let t0 = Instant::now();
        let lost = LostState::new(None, LostReason::Unreachable);
        let (id, _) = n.watch("k", 1, lost, None, false);
        assert!(!n.retire(t0, Duration::ZERO), "holds: keep running");
        n.unwatch(id);
        let later = Instant::now() + Duration::from_secs(3);
        assert!(!n.retire(Instant::now(), Duration::from_secs(2)));
        assert!(n.retire(later, Duration::from_secs(2)));
        let (_, start) = n.watch(
            "k",
            2,
            LostState::new(None, LostReason::Unreachable),
            None,
            false,
        );
        assert!(start, "a retired subscriber is started again");
        let halted = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let h2 = halted.clone();
        let halt: Halt = Box::new(move || h2.store(true, std::sync::atomic::Ordering::SeqCst));
        n.watch(
            "j",
            3,
            LostState::new(None, LostReason::Unreachable),
            Some(halt),
            true,
        );
        n.close();
        n.close();
        assert!(halted.load(std::sync::atomic::Ordering::SeqCst));
        assert!(n.is_closed() && n.retire(Instant::now(), Duration::from_secs(60)));
        let (_, start) = n.watch(
            "k",
            4,
            LostState::new(None, LostReason::Unreachable),
            None,
            false,
        );
        assert!(!start, "a closed client starts nothing");
    }
}
