//! `DLOCK.SEMACQUIRE key owner LIMIT n [PERMITS k] [PX lease] [WAIT ms]`
//!
//! A counting semaphore of `n` permits whose holds are leased, fenced and
//! named like lock holds. Reply: the fencing token of the owner's hold on
//! grant (an owner asking again keeps its first token), nil when not granted
//! within WAIT. Waiting uses the blocking machinery of [`super::acquire`]:
//! the state machine grants only the head of the strict FIFO queue, and a
//! grant that leaves permits for the next in line signals the key again.

use super::acquire::{block_on, count_grant, Parsed};
use super::{commit, tick_due};
use crate::args::{self, arg};
use crate::datatype::{Held, LockKey};
use crate::error::{self, Msg};
use crate::ffi::{self, Ctx, RawCtx, RawStr};
use crate::{config, runtime};
use dlock_core::{codec::MAX_SIZE, Grant, Kind, Lock, LockError, Mode, Request, Tokens, Waiter};
use std::collections::HashMap;
use std::ffi::c_int;
use std::sync::{Mutex, MutexGuard};

lazy_static::lazy_static! {
    /// The LIMIT named by each connection waiting in SEMACQUIRE, by waiter
    /// id: when a semaphore with waiters leaves its key (DEL, FLUSHDB, …),
    /// the semaphore made anew for them has that limit.
    static ref LIMITS: Mutex<HashMap<u64, u64>> = Mutex::new(HashMap::new());
}

fn limits() -> MutexGuard<'static, HashMap<u64, u64>> {
    LIMITS.lock().unwrap_or_else(|e| e.into_inner())
}

/// The connection waiting as `id` stopped waiting.
pub(super) fn forget_limit(id: u64) {
    limits().remove(&id);
}

/// A new, empty lock of `kind` for the waiters `places` that lost theirs
/// (a semaphore gets the limit they named).
pub(super) fn fresh_for(kind: Kind, places: &[Waiter]) -> Lock {
    let limit = {
        let map = limits();
        places.iter().find_map(|w| map.get(&w.id).copied())
    };
    match (kind, limit) {
        (Kind::Semaphore, Some(limit)) => Lock::semaphore(limit),
        // (Not reached: live waiters have their limit recorded.) A limit
        // every place fits in keeps the state valid.
        (Kind::Semaphore, None) => Lock::semaphore(
            places
                .iter()
                .map(|w| u64::from(w.permits))
                .max()
                .unwrap_or(1),
        ),
        (other, _) => Lock::new(other),
    }
}

/// A new, empty lock for a waiter of `kind` that finds its key empty.
pub(super) fn fresh(kind: Kind, limit: u64) -> Lock {
    match kind {
        Kind::Semaphore => Lock::semaphore(limit),
        other => Lock::new(other),
    }
}

/// One attempt for a blocked waiter: semaphores ask for its permits under
/// its limit, locks take one hold.
pub(super) fn attempt(
    lock: &mut Lock,
    req: &Request<'_>,
    permits: u32,
    limit: u64,
    now: u64,
    tokens: &mut Tokens,
    now_us: u64,
) -> Result<Grant, LockError> {
    if lock.kind() == Kind::Semaphore {
        lock.acquire_permits(req, permits, limit, now, tokens, now_us)
    } else {
        lock.acquire(req, now, tokens, now_us)
    }
}

/// Gives a blocked waiter a place at the back of the queue.
pub(super) fn enqueue_blocked(
    lock: &mut Lock,
    owner: &[u8],
    mode: Mode,
    permits: u32,
    id: u64,
    deadline: u64,
) -> bool {
    if lock.kind() == Kind::Semaphore {
        lock.enqueue_permits(owner, permits, id, deadline)
    } else {
        lock.enqueue(owner, mode, id, true, deadline)
    }
}

/// An integer in `1..=max`.
fn number(b: &[u8], max: u64, err: Msg) -> Result<u64, Msg> {
    let v = args::millis(b, 1, err)?;
    if v > max {
        return Err(err);
    }
    Ok(v)
}

/// `LIMIT n [PERMITS k] [PX ms] [WAIT ms]` after the owner, in any order,
/// each at most once; LIMIT is required.
fn parse<'a>(args: &[RawStr]) -> Result<Parsed<'a>, Msg> {
    let owner = args::owner(arg(args, 2))?;
    let (mut limit, mut permits, mut px, mut wait) = (None, None, None, None);
    let mut bind = false;
    let mut lock_delay = None;
    let mut i = 3;
    while i < args.len() {
        let name = arg(args, i);
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
                .then(|| arg(args, i + 1))
                .ok_or(error::LOCKDELAY_VALUE)?;
            lock_delay = Some(args::millis(value, 0, error::LOCKDELAY_RANGE)?);
            i += 2;
            continue;
        }
        let value = (i + 1 < args.len()).then(|| arg(args, i + 1));
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
    Ok(Parsed {
        kind: Kind::Semaphore,
        owner,
        mode: Mode::Permit,
        lease: px.unwrap_or_else(config::default_lease_ms),
        wait: wait.unwrap_or(0),
        permits: u32::try_from(permits).map_err(|_| error::PERMITS_RANGE)?,
        limit,
        bind,
        lock_delay: lock_delay.unwrap_or(0),
    })
}

/// # Safety
/// Called by Redis with a valid context and arguments.
pub unsafe extern "C" fn semacquire_cmd(ctx: RawCtx, argv: *mut RawStr, argc: c_int) -> c_int {
    // SAFETY: argv/argc are the arguments Redis passed to this command.
    run(Ctx(ctx), unsafe { ffi::args(argv, argc) })
}

fn reply_lock_error(ctx: Ctx, e: LockError) -> c_int {
    ctx.reply_error(&error::lock_error_text(e))
}

fn run(ctx: Ctx, args: &[RawStr]) -> c_int {
    if args.len() < 3 {
        return ctx.wrong_arity();
    }
    let p = match parse(args) {
        Ok(p) => p,
        // PERMITS above LIMIT: name the limit asked for.
        Err(e) if e == error::PERMITS_OVER_LIMIT => {
            let e = LockError::PermitsOverLimit {
                limit: parse_limit(args),
            };
            return reply_lock_error(ctx, e);
        }
        Err(e) => return ctx.reply_error(e),
    };
    if p.bind && ctx.in_script() {
        return ctx.reply_error(error::BIND_IN_SCRIPT);
    }
    let name = ffi::arg_ptr(args, 1);
    let key = ctx.open(name, true);
    let (now, now_us) = ffi::now();
    let mut fresh_lock;
    let lock: &mut Lock = match key.held() {
        Held::Other => return ctx.reply_error(error::WRONGTYPE),
        Held::Lock(l) => l,
        Held::Empty => {
            fresh_lock = Lock::semaphore(p.limit);
            &mut fresh_lock
        }
    };
    // Another kind, or another limit: an error, and nothing changes.
    if let Err(e) = lock.check_limit(p.limit) {
        return reply_lock_error(ctx, e);
    }
    let existed = !lock.is_empty();
    let (changed, mut fx) = tick_due(lock, now);
    let req = Request {
        owner: p.owner,
        mode: Mode::Permit,
        lease_ms: p.lease,
        waiter: None,
    };
    let mut tokens = runtime::tokens();
    let outcome = lock.acquire_permits(&req, p.permits, p.limit, now, &mut tokens, now_us);
    runtime::set_tokens(tokens);
    match outcome {
        Err(e) => {
            if changed {
                commit(ctx, &key, name, lock, fx);
            }
            reply_lock_error(ctx, e)
        }
        Ok(Grant::Granted { token, reentrant }) => {
            count_grant(reentrant, false);
            if !reentrant {
                // SAFETY: name is a live argument of the running command.
                let key_name = unsafe { ffi::bytes(name) };
                let client = ctx.client_id();
                let hold = (p.owner, p.mode, p.bind, p.lock_delay);
                super::new_hold(ctx, client, key_name, lock, hold);
            }
            if !existed {
                if !key.set(std::mem::replace(lock, Lock::semaphore(p.limit))) {
                    return ctx.reply_error(error::OOM_STORE);
                }
                let Held::Lock(stored) = key.held() else {
                    return ctx.reply_error(error::OOM_STORE);
                };
                commit(ctx, &key, name, stored, fx);
            } else {
                commit(ctx, &key, name, lock, fx);
            }
            ctx.reply_int(token as i64)
        }
        Ok(Grant::Denied) => {
            let block = p.wait > 0 && !ctx.deny_blocking();
            if !block {
                if changed {
                    commit(ctx, &key, name, lock, fx);
                }
                return ctx.reply_null();
            }
            if let Err(e) = lock.check_room(p.owner, Mode::Permit, true, config::max_queue()) {
                if changed {
                    commit(ctx, &key, name, lock, fx);
                }
                return reply_lock_error(ctx, e);
            }
            let id = runtime::new_waiter_id();
            let deadline = now.saturating_add(p.wait);
            if existed {
                lock.enqueue_permits(p.owner, p.permits, id, deadline);
                fx.wake = false;
                commit(ctx, &key, name, lock, fx);
            } else {
                // (Not reached: a request on a new semaphore always fits,
                // PERMITS <= LIMIT. Kept so that a place is never lost.)
                let mut l = std::mem::replace(lock, Lock::semaphore(p.limit));
                l.enqueue_permits(p.owner, p.permits, id, deadline);
                if !key.set(l) {
                    return ctx.reply_error(error::OOM_STORE);
                }
                if let Held::Lock(stored) = key.held() {
                    fx.wake = false;
                    commit(ctx, &key, name, stored, fx);
                }
            }
            drop(key);
            limits().insert(id, p.limit);
            block_on(ctx, name, &p, id, deadline);
            ffi::OK
        }
    }
}

/// The LIMIT of a request that parsed up to PERMITS above it.
fn parse_limit(args: &[RawStr]) -> u64 {
    let mut i = 3;
    while i + 1 < args.len() {
        if arg(args, i).eq_ignore_ascii_case(b"LIMIT") {
            return args::millis(arg(args, i + 1), 1, error::LIMIT_RANGE).unwrap_or(0);
        }
        // BIND takes no value.
        i += if arg(args, i).eq_ignore_ascii_case(b"BIND") {
            1
        } else {
            2
        };
    }
    0
}
