//! The RedLock algorithm without I/O: the round (acquire on all, count, release on
//! all after a failed round, pause), the quorum, the validity and the watchdog's and
//! release's verdicts. [`crate::RedLock`] and [`crate::aio::AsyncRedLock`] drive it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::Rng;
use redis::{Cmd, RedisResult, Value};

use crate::error::{Error, Result};
use crate::lost::{LostReason, LostSignal, LostState};
use crate::watchdog::{Renewal, Watch};
use crate::{cmd, LockKind, Options, Unlock};

/// What a RedLock handle is, apart from its nodes.
#[derive(Clone, Debug)]
pub(crate) struct RedSpec {
    pub key: String,
    pub prefix: String,
    pub owner: Option<String>,
    pub node_timeout: Duration,
    pub retry_delay: Duration,
    pub opts: Options,
    pub quorum: usize,
}

impl RedSpec {
    /// The spec of a RedLock over `nodes` nodes, the first of which has `first`'s
    /// options.
    pub(crate) fn new(name: String, first: Option<&Options>, nodes: usize) -> Result<RedSpec> {
        let Some(opts) = first else {
            return Err(Error::Invalid(
                "a RedLock needs at least one server, got none".into(),
            ));
        };
        Ok(RedSpec {
            key: name,
            prefix: opts.new_prefix(),
            owner: None,
            node_timeout: Duration::from_millis(100),
            retry_delay: Duration::from_millis(200),
            opts: opts.clone(),
            quorum: quorum_of(nodes),
        })
    }

    pub(crate) fn node_timeout(&mut self, timeout: Duration) {
        self.node_timeout = timeout.max(Duration::from_millis(1));
    }
}

/// How many of `n` nodes must grant: `n/2 + 1`.
pub(crate) fn quorum_of(n: usize) -> usize {
    n.div_euclid(2).saturating_add(1)
}

/// The end of the validity of a lease of `lease` whose request was sent at `sent`:
/// `sent + lease − margin`, the lease clock of every hold (docs/clients.md, rule 1;
/// the margin, min(lease / 2, lease / 100 + 50 ms), is Redlock's clock drift with room
/// for a late timer).
pub(crate) fn valid_from(sent: Instant, lease: Duration) -> Instant {
    crate::core::lease_end(sent, lease)
}

/// The inverse of [`valid_from`]: when the lease ending at `valid_until` was requested.
pub(crate) fn lease_start(valid_until: Instant, lease: Duration) -> Instant {
    valid_until
        .checked_sub(lease.saturating_sub(crate::margin(lease)))
        .unwrap_or(valid_until)
}

/// The outcome of an acquire round started at `start`, evaluated at `now`: the end of
/// its validity when at least `quorum` nodes granted and the validity
/// `lease − elapsed − margin` is still positive, else `None`.
pub(crate) fn granted_until(
    tokens: &[Option<u64>],
    quorum: usize,
    start: Instant,
    now: Instant,
    lease: Duration,
) -> Option<Instant> {
    let granted = tokens.iter().filter(|t| t.is_some()).count();
    let elapsed = now.saturating_duration_since(start);
    (granted >= quorum && elapsed.saturating_add(crate::margin(lease)) < lease)
        .then(|| valid_from(start, lease))
}

/// A random pause of at most `max` between two rounds.
pub(crate) fn retry_pause(max: Duration) -> Duration {
    let max = u64::try_from(max.as_millis()).unwrap_or(u64::MAX);
    Duration::from_millis(if max == 0 {
        0
    } else {
        rand::thread_rng().gen_range(0..=max)
    })
}

/// The watchdog's verdict on the nodes' renew answers (`Some(true)` renewed,
/// `Some(false)` not held, `None` no answer): renewed on a majority, lost when so
/// many say "not held" that no majority can renew any more, else failed (retry).
pub(crate) fn renewal_outcome(answers: &[Option<bool>], quorum: usize) -> Renewal {
    let yes = answers.iter().filter(|a| **a == Some(true)).count();
    let no = answers.iter().filter(|a| **a == Some(false)).count();
    if yes >= quorum {
        Renewal::Renewed
    } else if no > answers.len().saturating_sub(quorum) {
        Renewal::Lost(LostReason::NoQuorum)
    } else {
        Renewal::Failed
    }
}

/// The answer of a RedLock release from each node's outcome: released or still held
/// on a majority (the clock stops); [`Unlock::Unknown`] when fewer than a majority
/// answered; else lost (and `lost` is marked).
pub(crate) fn release_outcome(outcomes: Vec<Unlock>, quorum: usize, lost: &LostState) -> Unlock {
    let count = |u: Unlock| outcomes.iter().filter(|x| **x == u).count();
    if count(Unlock::Released) >= quorum {
        lost.disarm();
        return Unlock::Released;
    }
    if count(Unlock::StillHeld) >= quorum {
        lost.disarm();
        return Unlock::StillHeld;
    }
    if outcomes.len().saturating_sub(count(Unlock::Unknown)) < quorum {
        return Unlock::Unknown;
    }
    lost.mark(LostReason::NoQuorum);
    Unlock::Lost
}

/// What a node that gave no answer (its thread or task did not finish) counts as.
pub(crate) fn no_answer() -> redis::RedisError {
    std::io::Error::new(
        std::io::ErrorKind::Interrupted,
        "the RedLock node gave no answer",
    )
    .into()
}

/// What the RedLock round asks its driver to do next.
pub(crate) enum RedStep {
    /// Send the command to every node concurrently, each with this timeout; then call
    /// [`RedAcquire::on_replies`] with the answers in node order.
    Broadcast(Cmd, Duration),
    /// Pause, then call [`RedAcquire::on_slept`].
    Sleep(Duration),
    /// Finished: the grant, or `None` when the wait ended first.
    Done(Option<RedGrant>),
}

/// A RedLock granted by a majority.
#[derive(Debug)]
pub(crate) struct RedGrant {
    pub owner: String,
    pub tokens: Vec<Option<u64>>,
    pub valid_until: Instant,
}

#[derive(Debug)]
enum RedPhase {
    /// The acquire round started at this instant.
    Granting(Instant),
    /// The release after a failed round.
    Releasing,
}

/// The RedLock acquire loop: rounds until a majority grants within the validity, or
/// the wait ends.
#[derive(Debug)]
pub(crate) struct RedAcquire<'a> {
    spec: &'a RedSpec,
    owner: String,
    lease: Duration,
    deadline: Instant,
    phase: RedPhase,
}

impl<'a> RedAcquire<'a> {
    pub(crate) fn new(
        spec: &'a RedSpec,
        owner: String,
        wait: Duration,
        lease: Option<Duration>,
        now: Instant,
    ) -> Result<RedAcquire<'a>> {
        match lease {
            Some(l) => crate::lease_ms(l, "the lease")?,
            None => crate::lease_ms(spec.opts.watchdog_lease, "Options::watchdog_lease")?,
        };
        Ok(RedAcquire {
            spec,
            owner,
            lease: lease.unwrap_or(spec.opts.watchdog_lease),
            deadline: now.checked_add(wait).unwrap_or(now),
            phase: RedPhase::Releasing,
        })
    }

    /// A new round: acquire on every node.
    pub(crate) fn start(&mut self, now: Instant) -> RedStep {
        self.phase = RedPhase::Granting(now);
        let lease_ms = crate::ceil_ms(self.lease).max(1);
        let c = cmd::acquire(LockKind::Mutex, &self.spec.key, &self.owner, lease_ms, 0);
        RedStep::Broadcast(c, self.spec.node_timeout)
    }

    /// The nodes' answers (in node order) to the last broadcast, all in at `now`.
    pub(crate) fn on_replies(&mut self, replies: Vec<RedisResult<Value>>, now: Instant) -> RedStep {
        match self.phase {
            RedPhase::Granting(start) => {
                let tokens: Vec<Option<u64>> = replies
                    .into_iter()
                    .map(|r| r.ok().and_then(|v| cmd::token(v).ok().flatten()))
                    .collect();
                if let Some(valid_until) =
                    granted_until(&tokens, self.spec.quorum, start, now, self.lease)
                {
                    return RedStep::Done(Some(RedGrant {
                        owner: std::mem::take(&mut self.owner),
                        tokens,
                        valid_until,
                    }));
                }
                // Failed round: release on every node (also where the answer was lost).
                self.phase = RedPhase::Releasing;
                let c = cmd::release(LockKind::Mutex, &self.spec.key, &self.owner);
                RedStep::Broadcast(c, self.spec.node_timeout)
            }
            RedPhase::Releasing => match self.deadline.checked_duration_since(now) {
                Some(left) if !left.is_zero() => {
                    RedStep::Sleep(retry_pause(self.spec.retry_delay).min(left))
                }
                _ => RedStep::Done(None),
            },
        }
    }

    /// The pause is over: the next round.
    pub(crate) fn on_slept(&mut self, now: Instant) -> RedStep {
        self.start(now)
    }
}

/// The state of a RedLock hold shared by [`crate::RedLockGuard`] and
/// [`crate::aio::AsyncRedLockGuard`] (and their watchdogs, through an `Arc`).
#[derive(Debug)]
pub(crate) struct RedHold {
    pub key: String,
    pub owner: String,
    pub tokens: Vec<Option<u64>>,
    /// The validity is its lease clock.
    pub lost: Arc<LostState>,
    pub quorum: usize,
    /// The watchdog lease.
    lease: Duration,
}

impl RedHold {
    /// The hold of `grant`, lost at the end of its validity unless the watchdog (no
    /// explicit `lease`) extends it on a majority ([`RedHold::renewed`]).
    pub(crate) fn new(spec: &RedSpec, grant: RedGrant, lease: Option<Duration>) -> RedHold {
        let expiry = match lease {
            Some(_) => LostReason::Expired,
            None => LostReason::Unreachable,
        };
        RedHold {
            key: spec.key.clone(),
            owner: grant.owner,
            tokens: grant.tokens,
            lost: LostState::new(Some(grant.valid_until), expiry),
            quorum: spec.quorum,
            lease: spec.opts.watchdog_lease,
        }
    }

    /// What the watchdog keeps, and its RENEW (sent to every node): only a hold
    /// without an explicit `lease` has one, first confirmed when the granting round
    /// started.
    pub(crate) fn watch(&self, lease: Option<Duration>, opts: &Options) -> Option<(Watch, Cmd)> {
        if lease.is_some() {
            return None;
        }
        let renew = cmd::renew(&self.key, &self.owner, crate::ceil_ms(self.lease).max(1));
        let until = self.lost.valid_until()?;
        let watch = Watch {
            lease: self.lease,
            interval: opts.renew_interval_for(self.lease),
            confirmed: lease_start(until, self.lease),
            lost: self.lost.clone(),
        };
        Some((watch, renew))
    }

    /// How much longer the lock is certainly held, seen at `now`.
    pub(crate) fn validity(&self, now: Instant) -> Duration {
        if self.lost.is_lost() {
            return Duration::ZERO;
        }
        self.lost
            .valid_until()
            .map_or(Duration::ZERO, |u| u.saturating_duration_since(now))
    }

    /// The watchdog's verdict on the nodes' RENEW answers (a majority renewal extends
    /// the validity: the watchdog moves the lease clock).
    pub(crate) fn renewed(&self, replies: Vec<RedisResult<Value>>) -> Renewal {
        let answers: Vec<Option<bool>> = replies
            .iter()
            .map(|r| r.as_ref().ok().and_then(cmd::renewed))
            .collect();
        renewal_outcome(&answers, self.quorum)
    }

    /// The RELEASE sent to every node.
    pub(crate) fn release(&self) -> Cmd {
        cmd::release(LockKind::Mutex, &self.key, &self.owner)
    }

    /// The answer of `unlock` from the nodes' release outcomes (each released once
    /// more on a fresh connection after a connection failure).
    pub(crate) fn released(&self, outcomes: Vec<Unlock>) -> Unlock {
        release_outcome(outcomes, self.quorum, &self.lost)
    }

    pub(crate) fn signal(&self) -> LostSignal {
        LostSignal(self.lost.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(nodes: usize) -> RedSpec {
        let o = Options::default().watchdog_lease(Duration::from_secs(10));
        let mut s = RedSpec::new("r".into(), Some(&o), nodes).unwrap();
        s.retry_delay = Duration::ZERO;
        s
    }

    #[test]
    fn a_round_needs_a_majority_within_the_validity() {
        let (s, t0) = (spec(3), Instant::now());
        let mut m = RedAcquire::new(&s, "me".into(), Duration::from_secs(1), None, t0).unwrap();
        assert!(matches!(m.start(t0), RedStep::Broadcast(..)));
        let one = vec![
            Ok(Value::Int(4)),
            Ok(Value::Nil),
            Err(redis::RedisError::from((redis::ErrorKind::Io, "down"))),
        ];
        // One of three: release everywhere, then pause.
        assert!(matches!(m.on_replies(one, t0), RedStep::Broadcast(..)));
        assert!(matches!(m.on_replies(vec![], t0), RedStep::Sleep(_)));
        assert!(matches!(m.on_slept(t0), RedStep::Broadcast(..)));
        let two = vec![Ok(Value::Int(4)), Ok(Value::Int(5)), Ok(Value::Nil)];
        match m.on_replies(two, t0 + Duration::from_millis(50)) {
            RedStep::Done(Some(g)) => {
                assert_eq!(g.tokens, [Some(4), Some(5), None]);
                assert_eq!(g.valid_until, valid_from(t0, Duration::from_secs(10)));
            }
            _ => panic!("two of three grant"),
        }
    }

    #[test]
    fn a_slow_round_is_no_grant_and_the_wait_ends() {
        let (s, t0) = (spec(1), Instant::now());
        let mut m = RedAcquire::new(&s, "me".into(), Duration::ZERO, None, t0).unwrap();
        m.start(t0);
        let late = t0 + Duration::from_secs(10);
        assert!(matches!(
            m.on_replies(vec![Ok(Value::Int(1))], late),
            RedStep::Broadcast(..)
        ));
        assert!(matches!(m.on_replies(vec![], late), RedStep::Done(None)));
    }

    #[test]
    fn renewal_and_release_verdicts() {
        assert_eq!(
            renewal_outcome(&[Some(true), Some(true), None], 2),
            Renewal::Renewed
        );
        assert_eq!(
            renewal_outcome(&[Some(false), Some(false), Some(true)], 2),
            Renewal::Lost(LostReason::NoQuorum)
        );
        assert_eq!(
            renewal_outcome(&[Some(false), None, None], 2),
            Renewal::Failed
        );
        let lost = LostState::new(None, LostReason::Unreachable);
        let r = release_outcome(vec![Unlock::Released, Unlock::Lost, Unlock::Lost], 2, &lost);
        assert_eq!(r, Unlock::Lost);
        assert!(lost.is_lost());
        let lost = LostState::new(None, LostReason::Unreachable);
        let r = release_outcome(
            vec![Unlock::Released, Unlock::Unknown, Unlock::Unknown],
            2,
            &lost,
        );
        assert_eq!(r, Unlock::Unknown, "too few answered");
        assert!(!lost.is_lost());
    }
}
