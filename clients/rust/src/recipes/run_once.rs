//! `run_once`: ShedLock's `@SchedulerLock` on one dlock mutex.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::{Cmd, Value};

use crate::blocking::Inner;
use crate::core::notice::NoticeId;
use crate::core::{lease_end, renewal};
use crate::error::{Error, Result};
use crate::lost::{LostReason, LostSignal, LostState};
use crate::watchdog::{Watch, Watchdog};
use crate::{ceil_ms, cmd, part, Client};

static RUNS: AtomicU64 = AtomicU64::new(1);

/// The settings of a [`run_once`]: ShedLock's `lockAtMostFor` / `lockAtLeastFor`.
///
/// ```
/// use std::time::Duration;
/// use dlock_client::recipes::RunOnce;
/// let opts = RunOnce::new(Duration::from_secs(60)).at_least_for(Duration::from_secs(5));
/// assert_eq!(opts.at_least_for, Duration::from_secs(5));
/// assert!(!opts.renew);
/// ```
#[derive(Clone, Debug)]
pub struct RunOnce {
    /// The lease: a process that dies mid-job holds the lock no longer than this. A job
    /// that outlives it loses the hold (its lost signal fires), unless [`RunOnce::renew`].
    pub at_most_for: Duration,
    /// After a job that finished sooner, the hold is kept until this long after the
    /// start (its lease is set to the remainder, not released). Default zero.
    pub at_least_for: Duration,
    /// Renew the lease (every `at_most_for / 3`) while the job runs. Default false.
    pub renew: bool,
    /// The start of the run's owner id (default: the client's owner id of the calling
    /// thread); `:run<n>` is appended, unique per run.
    pub owner: Option<String>,
}

impl RunOnce {
    /// A run held for at most `at_most_for`, released when the job ends.
    pub fn new(at_most_for: Duration) -> RunOnce {
        RunOnce {
            at_most_for,
            at_least_for: Duration::ZERO,
            renew: false,
            owner: None,
        }
    }
    /// Sets [`RunOnce::at_least_for`].
    pub fn at_least_for(mut self, d: Duration) -> RunOnce {
        self.at_least_for = d;
        self
    }
    /// Sets [`RunOnce::renew`].
    pub fn renew(mut self, on: bool) -> RunOnce {
        self.renew = on;
        self
    }
    /// Sets [`RunOnce::owner`].
    pub fn owner(mut self, owner: impl Into<String>) -> RunOnce {
        self.owner = Some(owner.into());
        self
    }
}

/// What [`run_once`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum RunOutcome<T> {
    /// The job ran, and the hold lasted to its end.
    Ran {
        /// What the job returned.
        value: T,
        /// The run's fencing token.
        token: u64,
    },
    /// Someone else holds the job's lock: the job did not run (nobody waited).
    Skipped,
    /// The job ran but its hold ended before it did (`at_most_for` passed without
    /// renewal, renewals failed, or the lock was force-released): another process may
    /// have run it meanwhile.
    Lost {
        /// What the job returned.
        value: T,
        /// The run's fencing token.
        token: u64,
        /// Why the hold was lost.
        reason: LostReason,
    },
}

impl<T> RunOutcome<T> {
    /// True unless skipped.
    pub fn ran(&self) -> bool {
        !matches!(self, RunOutcome::Skipped)
    }
    /// The run's fencing token (None when skipped).
    pub fn token(&self) -> Option<u64> {
        match self {
            RunOutcome::Ran { token, .. } | RunOutcome::Lost { token, .. } => Some(*token),
            RunOutcome::Skipped => None,
        }
    }
}

/// What the job of a [`run_once`] gets: the run's token, its lost signal, and fenced
/// commands under that token.
#[derive(Debug)]
pub struct JobContext {
    inner: Arc<Inner>,
    key: String,
    owner: String,
    token: u64,
    lost: Arc<LostState>,
}

impl JobContext {
    /// The run's fencing token.
    pub fn token(&self) -> u64 {
        self.token
    }
    /// The job's lock key.
    pub fn name(&self) -> &str {
        &self.key
    }
    /// The run's owner id.
    pub fn owner(&self) -> &str {
        &self.owner
    }
    /// True once the hold is known to be over (at `at_most_for`, less the lease clock's margin,
    /// without renewal).
    pub fn is_lost(&self) -> bool {
        self.lost.is_lost()
    }
    /// The lost signal, to wait on.
    pub fn lost_signal(&self) -> LostSignal {
        LostSignal(self.lost.clone())
    }
    /// `DLOCK.FENCED key token command…`: runs only while the run's hold lives (an
    /// error with [`Error::is_fenced`] otherwise, and the lost signal fires).
    pub fn fenced(&self, command: &Cmd) -> Result<Value> {
        super::fenced(&self.inner, &self.key, self.token, &self.lost, command)
    }
    /// `DLOCK.CHECK`: is the run's hold still live?
    pub fn check(&self) -> Result<bool> {
        let v = self.inner.run(
            &cmd::check(&self.key, self.token),
            self.inner.opts.command_timeout,
        )?;
        let live = cmd::live(v)?;
        if !live {
            self.lost.mark(LostReason::NotHeld);
        }
        Ok(live)
    }
}

/// Runs `job` unless another process runs it now — ShedLock's `@SchedulerLock`.
///
/// One try (`DLOCK.ACQUIRE name owner PX at_most_for WAIT 0`): when someone else holds
/// `name` the job is skipped, not waited for. See [`RunOnce`] for `at_most_for`,
/// `at_least_for` and `renew`, and `docs/recipes.md` for the semantics. Fails only when
/// the server cannot be reached (the job then did not run) — or, after the job, when the
/// hold could not be released or kept (the lease then ends by itself).
///
/// ```no_run
/// use std::time::Duration;
/// use dlock_client::{Client, recipes::{run_once, RunOnce, RunOutcome}};
///
/// let client = Client::open("redis://127.0.0.1/")?;
/// let opts = RunOnce::new(Duration::from_secs(60)).at_least_for(Duration::from_secs(5));
/// match run_once(&client, "nightly-report", opts, |job| job.token())? {
///     RunOutcome::Ran { value, .. } => println!("ran with token {value}"),
///     RunOutcome::Skipped => println!("another replica runs it"),
///     RunOutcome::Lost { reason, .. } => eprintln!("ran, but the hold ended: {reason:?}"),
/// }
/// # Ok::<(), dlock_client::Error>(())
/// ```
pub fn run_once<T>(
    client: &Client,
    name: &str,
    opts: RunOnce,
    job: impl FnOnce(&JobContext) -> T,
) -> Result<RunOutcome<T>> {
    if opts.at_most_for.is_zero() || opts.at_least_for > opts.at_most_for {
        return Err(Error::Invalid(format!(
            "run_once needs 0 < at_most_for and at_least_for <= at_most_for, got \
             at_most_for {:?} and at_least_for {:?}",
            opts.at_most_for, opts.at_least_for
        )));
    }
    let inner = &client.inner;
    let prefix = opts.owner.clone().unwrap_or_else(|| inner.owner());
    let owner = format!("{prefix}:run{}", RUNS.fetch_add(1, Ordering::Relaxed));
    let lease_ms = ceil_ms(opts.at_most_for).max(1);
    let started = Instant::now();
    let acquire = cmd::acquire(crate::LockKind::Mutex, name, &owner, lease_ms, 0);
    let token = match cmd::token(inner.run(&acquire, inner.opts.command_timeout)?)? {
        Some(t) => t,
        None => return Ok(RunOutcome::Skipped),
    };
    let mut watchdog = None;
    let expiry = match opts.renew {
        true => LostReason::Unreachable,
        false => LostReason::Expired,
    };
    let lost = LostState::new(Some(lease_end(started, opts.at_most_for)), expiry);
    if opts.renew {
        let renew = cmd::renew(name, &owner, lease_ms);
        let i2 = inner.clone();
        watchdog = Some(Watchdog::spawn(
            Watch {
                lease: opts.at_most_for,
                interval: part(opts.at_most_for, 3),
                confirmed: started,
                lost: lost.clone(),
            },
            move |timeout| renewal(i2.run(&renew, timeout)),
        ));
    }
    let notice = inner.watch(name, token, &lost, watchdog.as_ref().map(Watchdog::halt));
    let ctx = JobContext {
        inner: inner.clone(),
        key: name.to_string(),
        owner,
        token,
        lost,
    };
    // Ends the run when the job returns — or unwinds (a panicking job).
    struct Finish<'a> {
        ctx: &'a JobContext,
        watchdog: Option<Watchdog>,
        notice: NoticeId,
        started: Instant,
        at_least_for: Duration,
        done: bool,
    }
    impl Finish<'_> {
        fn finish(&mut self) -> Result<Option<LostReason>> {
            self.done = true;
            if let Some(mut w) = self.watchdog.take() {
                w.stop();
            }
            self.ctx.inner.notices.unwatch(self.notice);
            finish(self.ctx, self.started, self.at_least_for)
        }
    }
    impl Drop for Finish<'_> {
        fn drop(&mut self) {
            if !self.done {
                let _ = self.finish();
            }
        }
    }
    let mut fin = Finish {
        ctx: &ctx,
        watchdog,
        notice,
        started,
        at_least_for: opts.at_least_for,
        done: false,
    };
    let value = job(&ctx);
    let lost = fin.finish()?;
    Ok(match lost {
        Some(reason) => RunOutcome::Lost {
            value,
            token,
            reason,
        },
        None => RunOutcome::Ran { value, token },
    })
}

/// The end of a run: keep the hold for what is left of `at_least_for`, else release
/// it; the lost signal fires when the server says the hold was gone. Answers why the
/// run counts as lost (the signal had fired when the job returned, or the server said
/// so), or `None`.
fn finish(
    ctx: &JobContext,
    started: Instant,
    at_least_for: Duration,
) -> Result<Option<LostReason>> {
    let inner = &ctx.inner;
    let t = inner.opts.command_timeout;
    if let Some(reason) = ctx.lost.reason() {
        // Ours may still be there (only unreachable): let it go.
        let _ = inner.run(
            &cmd::release(crate::LockKind::Mutex, &ctx.key, &ctx.owner),
            t,
        );
        return Ok(Some(reason));
    }
    let left = at_least_for.saturating_sub(started.elapsed());
    if left >= Duration::from_millis(1) {
        let v = inner.run(&cmd::renew(&ctx.key, &ctx.owner, ceil_ms(left)), t)?;
        if cmd::renewed(&v) != Some(true) {
            ctx.lost.mark(LostReason::NotHeld);
            return Ok(Some(LostReason::NotHeld));
        }
    } else {
        let release = cmd::release(crate::LockKind::Mutex, &ctx.key, &ctx.owner);
        if inner.unlock(&release, &ctx.lost) == crate::Unlock::Lost {
            return Ok(ctx.lost.reason());
        }
    }
    Ok(None)
}
