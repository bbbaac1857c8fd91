//! `DLOCK.SEMACQUIRE key owner LIMIT n [PERMITS k] [PX lease] [WAIT ms]`
//!
//! A counting semaphore of `n` permits whose holds are leased, fenced and
//! named like lock holds. Reply: the fencing token of the owner's hold on
//! grant (an owner asking again keeps its first token), nil when not granted
//! within WAIT. Waiting uses the blocking machinery of [`super::acquire`]:
//! the state machine grants only the head of the strict FIFO queue, and a
//! grant that leaves permits for the next in line signals the key again.

use super::acquire::acquire;
use super::args;
use super::{command, Outcome, Refused};
use crate::config;
use crate::error::{self, Msg};
use crate::ffi::{Args, Ctx};
use crate::services::waiters::Acquire;
use dlock_core::{codec::MAX_SIZE, Kind, LockError, Mode};

command!(semacquire_cmd => semacquire);

fn semacquire(ctx: Ctx<'_>, args: Args<'_>) -> Outcome {
    if args.len() < 3 {
        return Err(Refused::Arity);
    }
    let (ask, wait) = match parse(args) {
        Ok(p) => p,
        Err(e) if e == error::PERMITS_OVER_LIMIT => {
            let e = LockError::PermitsOverLimit {
                limit: parse_limit(args),
            };
            return Err(error::lock_error_text(e).into());
        }
        Err(e) => return Err(e.into()),
    };
    let name = args.string(1).ok_or(Refused::Arity)?;
    acquire(ctx, name, ask, wait)
}

fn number(b: &[u8], max: u64, err: Msg) -> Result<u64, Msg> {
    let v = args::millis(b, 1, err)?;
    if v > max {
        return Err(err);
    }
    Ok(v)
}

/// `LIMIT n [PERMITS k] [PX ms] [WAIT ms]` after the owner, in any order,
/// each at most once; LIMIT is required.
fn parse(args: Args<'_>) -> Result<(Acquire, u64), Msg> {
    let owner = args::owner(args.get(2))?;
    let (mut limit, mut permits, mut px, mut wait) = (None, None, None, None);
    let mut bind = false;
    let mut lock_delay = None;
    let mut i = 3;
    while i < args.len() {
        let name = args.get(i);
        if name.eq_ignore_ascii_case(b"BIND") {
            if bind {
                return Err(error::BIND_TWICE);
            }
            bind = true;
            i += 1;
            continue;
        }
        if name.eq_ignore_ascii_case(b"LOCKDELAY") {
            if lock_delay.is_some() {
                return Err(error::LOCKDELAY_TWICE);
            }
            let value = (i + 1 < args.len())
                .then(|| args.get(i + 1))
                .ok_or(error::LOCKDELAY_VALUE)?;
            lock_delay = Some(args::millis(value, 0, error::LOCKDELAY_RANGE)?);
            i += 2;
            continue;
        }
        let value = (i + 1 < args.len()).then(|| args.get(i + 1));
        let (slot, twice, missing): (&mut Option<u64>, Msg, Msg) =
            if name.eq_ignore_ascii_case(b"LIMIT") {
                (&mut limit, error::LIMIT_TWICE, error::LIMIT_VALUE)
            } else if name.eq_ignore_ascii_case(b"PERMITS") {
                (&mut permits, error::PERMITS_TWICE, error::PERMITS_VALUE)
            } else if name.eq_ignore_ascii_case(b"PX") {
                (&mut px, error::PX_TWICE, error::PX_VALUE)
            } else if name.eq_ignore_ascii_case(b"WAIT") {
                (&mut wait, error::WAIT_TWICE, error::WAIT_VALUE)
            } else {
                return Err(error::SEMACQUIRE_OPTION);
            };
        if slot.is_some() {
            return Err(twice);
        }
        let value = value.ok_or(missing)?;
        let v = if name.eq_ignore_ascii_case(b"LIMIT") {
            number(value, MAX_SIZE, error::LIMIT_RANGE)?
        } else if name.eq_ignore_ascii_case(b"PERMITS") {
            number(value, u64::from(u32::MAX), error::PERMITS_RANGE)?
        } else if name.eq_ignore_ascii_case(b"PX") {
            args::millis(value, 1, error::PX_RANGE)?
        } else {
            args::millis(value, 0, error::WAIT_RANGE)?
        };
        *slot = Some(v);
        i += 2;
    }
    let limit = limit.ok_or(error::LIMIT_MISSING)?;
    let permits = permits.unwrap_or(1);
    if permits > limit {
        return Err(error::PERMITS_OVER_LIMIT);
    }
    let ask = Acquire {
        kind: Kind::Semaphore,
        owner: owner.into(),
        mode: Mode::Permit,
        lease: px.unwrap_or_else(config::default_lease_ms),
        permits: u32::try_from(permits).map_err(|_| error::PERMITS_RANGE)?,
        limit,
        bind,
        lock_delay: lock_delay.unwrap_or(0),
    };
    Ok((ask, wait.unwrap_or(0)))
}

/// The LIMIT of a request that parsed up to PERMITS above it.
fn parse_limit(args: Args<'_>) -> u64 {
    let mut i = 3;
    while i + 1 < args.len() {
        if args.get(i).eq_ignore_ascii_case(b"LIMIT") {
            return args::millis(args.get(i + 1), 1, error::LIMIT_RANGE).unwrap_or(0);
        }
        // BIND takes no value.
        i += if args.get(i).eq_ignore_ascii_case(b"BIND") {
            1
        } else {
            2
        };
    }
    0
}
