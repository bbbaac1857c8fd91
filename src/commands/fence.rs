//! `DLOCK.CHECK key token`
//! `DLOCK.FENCED key token command [arg ...]`
//!
//! Fencing where the data lives. CHECK replies `1` when `token` is the token
//! of a live hold of the lock at `key` (its lease has not ended: see
//! [`Lock::token_live`](dlock_core::Lock::token_live)), else `0`. FENCED
//! runs `command [arg ...]` only while that is so, in the same step, so a
//! holder paused past its lease can no longer write.
//!
//! FENCED runs the command through `RedisModule_Call` with the flags
//! - `C`: the calling user's ACL rules (command, keys, channels);
//! - `S`: script mode — what a script cannot run is refused (MULTI, EXEC,
//!   WATCH, SUBSCRIBE, EVAL, FCALL, WAIT, …), and blocking commands never
//!   block (the called client denies blocking, as in a script);
//! - `M`: a `deny-oom` command is refused under maxmemory, as if sent
//!   directly (where the server knows the flag; see [`call_flags`]);
//! - `!`: its effects go to replicas and the AOF, as the command replicates
//!   itself; FENCED itself is never propagated, so nothing re-checks a token;
//! - `0`: the reply in the caller's protocol (RESP2 or RESP3).
//!
//! Commands of this module (`DLOCK.*`) are refused inside FENCED.
//!
//! Keys: FENCED is declared with `getkeys-api` and its key spec has
//! `VARIABLE_FLAGS`, so Redis asks [`fenced_cmd`] for the keys: the lock
//! key, then the inner command's keys as Redis finds them
//! (`RedisModule_GetCommandKeysWithFlags`), with their own flags. Cluster
//! routing, `CROSSSLOT` and ACL key patterns therefore cover all of them.

use crate::args::{self, arg};
use crate::datatype::{Held, LockKey};
use crate::error;
use crate::ffi::{self, rm, Ctx, RawCtx, RawStr};
use crate::stats;
use redis_module::raw;
use std::ffi::{c_int, CString};
use std::ptr;
use std::sync::atomic::{AtomicU8, Ordering::Relaxed};

/// # Safety
/// Called by Redis with a valid context and arguments.
pub unsafe extern "C" fn check_cmd(ctx: RawCtx, argv: *mut RawStr, argc: c_int) -> c_int {
    let ctx = Ctx(ctx);
    // SAFETY: argv/argc are the arguments Redis passed to this command.
    let args = unsafe { ffi::args(argv, argc) };
    if args.len() != 3 {
        return ctx.wrong_arity();
    }
    let token = match args::token(arg(args, 2)) {
        Ok(t) => t,
        Err(e) => return ctx.reply_error(e),
    };
    match live(ctx, ffi::arg_ptr(args, 1), token) {
        Ok(l) => ctx.reply_int(i64::from(l)),
        Err(e) => ctx.reply_error(e),
    }
}

/// Whether `token` is live on the lock at `name` now. Opens the key for
/// reading and closes it before returning, so the key is not open while
/// another command runs. Changes nothing (a hold whose lease ended is left
/// for the timer, which ends it and publishes).
fn live(ctx: Ctx, name: RawStr, token: u64) -> Result<bool, error::Msg> {
    let key = ctx.open(name, false);
    match key.held() {
        Held::Other => Err(error::WRONGTYPE),
        Held::Empty => Ok(false),
        Held::Lock(lock) => Ok(lock.token_live(token, ffi::now().0)),
    }
}

/// Whether a command name names a command of this module.
fn is_dlock(name: &[u8]) -> bool {
    name.get(..6)
        .is_some_and(|p| p.eq_ignore_ascii_case(b"dlock."))
}

/// # Safety
/// Called by Redis with a valid context and arguments, also to ask for the
/// keys of a call (`getkeys-api`).
pub unsafe extern "C" fn fenced_cmd(raw_ctx: RawCtx, argv: *mut RawStr, argc: c_int) -> c_int {
    let ctx = Ctx(raw_ctx);
    // SAFETY: argv/argc are the arguments Redis passed to this command.
    let args = unsafe { ffi::args(argv, argc) };
    // SAFETY: asking about the running callback's own context.
    if unsafe { rm!(RedisModule_IsKeysPositionRequest(raw_ctx) else 0) } != 0 {
        report_keys(raw_ctx, args);
        return ffi::OK;
    }
    if args.len() < 4 {
        return ctx.wrong_arity();
    }
    let token = match args::token(arg(args, 2)) {
        Ok(t) => t,
        Err(e) => return ctx.reply_error(e),
    };
    let name = arg(args, 3);
    if is_dlock(name) {
        return ctx.reply_error(error::FENCED_DLOCK);
    }
    // The command name goes to RedisModule_Call as a C string.
    let Ok(cname) = CString::new(name) else {
        return ctx.reply_error(error::FENCED_UNKNOWN);
    };
    match live(ctx, ffi::arg_ptr(args, 1), token) {
        Err(e) => return ctx.reply_error(e),
        Ok(false) => {
            stats::add(&stats::counter::fenced_refused, 1);
            return ctx.reply_error(&error::fenced(arg(args, 1), token));
        }
        Ok(true) => {}
    }
    let inner = args.get(4..).unwrap_or(&[]);
    match call(raw_ctx, &cname, inner) {
        Ok(reply) => {
            stats::add(&stats::counter::fenced_run, 1);
            // SAFETY: `reply` is the live reply of the call just made; it is
            // freed exactly once, after Redis copied it into our reply.
            unsafe {
                if rm!(RedisModule_CallReplyType(reply) else UNKNOWN) == UNKNOWN {
                    // No reply at all: Valkey 8.1 does this for some commands
                    // (GETDEL or GETSET on a key of another type), and hands
                    // the missing reply to the next module call instead.
                    // Relaying nothing would leave the caller waiting.
                    rm!(RedisModule_FreeCallReply(reply) else ());
                    drain(raw_ctx);
                    return ctx.reply_error(error::FENCED_NO_REPLY);
                }
                let relayed = rm!(RedisModule_ReplyWithCallReply(raw_ctx, reply) else ffi::ERR);
                rm!(RedisModule_FreeCallReply(reply) else ());
                if relayed != ffi::OK {
                    return ctx.reply_error(error::FENCED_RELAY);
                }
            }
            ffi::OK
        }
        Err(code) => ctx.reply_error(error::fenced_call(code)),
    }
}

const UNKNOWN: c_int = raw::REDISMODULE_REPLY_UNKNOWN as c_int;

/// After a call whose reply went missing: a call with no effect (`ECHO ""`,
/// not replicated, no ACL check) takes the stray reply, so it does not
/// reach the next module call, ours or another module's.
fn drain(ctx: RawCtx) {
    // SAFETY: "c" takes one NUL-terminated C string; the reply, if any, is
    // freed at once.
    unsafe {
        let r = rm!(RedisModule_Call(ctx, c"ECHO".as_ptr(), c"c".as_ptr(), c"".as_ptr()) else ptr::null_mut());
        if !r.is_null() {
            rm!(RedisModule_FreeCallReply(r) else ());
        }
    }
}

/// Whether the server accepts the `M` flag of RedisModule_Call: 0 not
/// known yet, 1 yes, 2 no (it answers `EBADF` for an unknown flag, before
/// looking the command up, so asking costs nothing and runs nothing).
static OOM_FLAG: AtomicU8 = AtomicU8::new(0);

/// The RedisModule_Call format: see the module docs above. `v` (the
/// arguments as a vector) only when there are arguments.
fn call_flags(with_oom: bool, with_args: bool) -> &'static std::ffi::CStr {
    match (with_oom, with_args) {
        (true, true) => c"!CS0Mv",
        (true, false) => c"!CS0M",
        (false, true) => c"!CS0v",
        (false, false) => c"!CS0",
    }
}

/// Runs `cname inner...` through RedisModule_Call. `Err(errno)` when Redis
/// refused to run it (nothing ran).
fn call(
    ctx: RawCtx,
    cname: &CString,
    inner: &[RawStr],
) -> Result<*mut raw::RedisModuleCallReply, i32> {
    let mut with_oom = OOM_FLAG.load(Relaxed) != 2;
    loop {
        let fmt = call_flags(with_oom, !inner.is_empty());
        // SAFETY: `fmt` ends with `v` only when we pass the vector and its
        // length (a pointer to `inner.len()` live module strings, a size_t);
        // the other flags take no argument. `cname` is NUL-terminated and
        // outlives the call; Redis copies what it keeps.
        let reply = unsafe {
            if inner.is_empty() {
                rm!(RedisModule_Call(ctx, cname.as_ptr(), fmt.as_ptr()) else ptr::null_mut())
            } else {
                rm!(RedisModule_Call(
                    ctx,
                    cname.as_ptr(),
                    fmt.as_ptr(),
                    inner.as_ptr().cast_mut(),
                    inner.len()
                ) else ptr::null_mut())
            }
        };
        if !reply.is_null() {
            if with_oom {
                OOM_FLAG.store(1, Relaxed);
            }
            return Ok(reply);
        }
        let code = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
        if code == libc::EBADF && with_oom {
            // A server older than the `M` flag (Redis 7.0.0): run the
            // command without it (as any module call runs there, not
            // refused under maxmemory), and remember.
            OOM_FLAG.store(2, Relaxed);
            with_oom = false;
            continue;
        }
        return Err(code);
    }
}

/// Keys of `DLOCK.FENCED key token command [arg ...]`: the lock key (read),
/// then the command's own keys with their own flags. For a `DLOCK.*` inner
/// command (refused when run) only the lock key, which also keeps nested
/// FENCED calls from recursing.
fn report_keys(ctx: RawCtx, args: &[RawStr]) {
    const LOCK_KEY: c_int =
        (raw::REDISMODULE_CMD_KEY_RO | raw::REDISMODULE_CMD_KEY_ACCESS) as c_int;
    key_at(ctx, 1, Some(LOCK_KEY));
    let Some(inner) = args.get(3..).filter(|i| !i.is_empty()) else {
        return;
    };
    if is_dlock(arg(args, 3)) {
        return;
    }
    let Ok(argc) = c_int::try_from(inner.len()) else {
        return;
    };
    let mut n: c_int = 0;
    let mut flags: *mut c_int = ptr::null_mut();
    // SAFETY: `inner` is a slice of the live argument vector; Redis only
    // reads it. The returned arrays (positions, flags) are ours to free.
    unsafe {
        let argv = inner.as_ptr().cast_mut();
        let pos = match raw::RedisModule_GetCommandKeysWithFlags {
            Some(f) => f(ctx, argv, argc, &mut n, &mut flags),
            None => rm!(RedisModule_GetCommandKeys(ctx, argv, argc, &mut n) else ptr::null_mut()),
        };
        if pos.is_null() {
            return;
        }
        let n = usize::try_from(n).unwrap_or(0);
        let positions = std::slice::from_raw_parts(pos, n);
        let key_flags = if flags.is_null() {
            &[][..]
        } else {
            std::slice::from_raw_parts(flags, n)
        };
        for (i, p) in positions.iter().enumerate() {
            if let Some(p) = p.checked_add(3) {
                key_at(ctx, p, key_flags.get(i).copied());
            }
        }
        rm!(RedisModule_Free(pos.cast()) else ());
        if !flags.is_null() {
            rm!(RedisModule_Free(flags.cast()) else ());
        }
    }
}

/// Reports one key position, with its flags when known (full access
/// otherwise, which is what Redis assumes without flags).
fn key_at(ctx: RawCtx, pos: c_int, flags: Option<c_int>) {
    // SAFETY: called only while Redis asks this command for its keys.
    unsafe {
        match (flags, raw::RedisModule_KeyAtPosWithFlags) {
            (Some(f), Some(with_flags)) => with_flags(ctx, pos, f),
            _ => rm!(RedisModule_KeyAtPos(ctx, pos) else ()),
        }
    }
}
