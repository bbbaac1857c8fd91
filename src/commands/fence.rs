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
//! - `0`: the reply in the caller's protocol (RESP2 or RESP3);
//! - `E`: a refusal (unknown command, wrong arity, script rules, ACL, OOM,
//!   cluster) comes back as an error reply, with `errno` naming it, rather
//!   than as no reply. Valkey 9.1 needs this: in script mode (`S`) without
//!   `E` its refusal path reads the error text it did not make (a NULL
//!   string) and the server dies of SIGSEGV inside `VM_Call`. With `E` every
//!   server in the matrix makes the text, and FENCED replaces it with its own
//!   message for the `errno` (see [`call`]).
//!
//! Commands of this module (`DLOCK.*`) are refused inside FENCED.
//!
//! Keys: FENCED is declared with `getkeys-api` and its key spec has
//! `VARIABLE_FLAGS`, so Redis asks [`fenced_cmd`] for the keys: the lock
//! key, then the inner command's keys as Redis finds them
//! (`RedisModule_GetCommandKeysWithFlags`), with their own flags. Cluster
//! routing, `CROSSSLOT` and ACL key patterns therefore cover all of them.

use super::args;
use super::{command, Outcome, Refused, Reply};
use crate::error;
use crate::ffi::{self, rm, Args, Ctx, RStr};
use crate::stats;
use crate::storage;
use redis_module::raw;
use std::ffi::{c_int, CString};
use std::ptr;
use std::sync::atomic::{AtomicU8, Ordering::Relaxed};

command!(check_cmd => check);
command!(fenced_cmd => fenced);

fn check(ctx: Ctx<'_>, args: Args<'_>) -> Outcome {
    if args.len() != 3 {
        return Err(Refused::Arity);
    }
    let token = args::token(args.get(2))?;
    let name = args.string(1).ok_or(Refused::Arity)?;
    Ok(Reply::Int(i64::from(live(ctx, name, token)?)))
}

fn live(ctx: Ctx<'_>, name: RStr<'_>, token: u64) -> Result<bool, error::Msg> {
    match storage::read(ctx, name) {
        Err(()) => Err(error::WRONGTYPE),
        Ok(None) => Ok(false),
        Ok(Some(g)) => Ok(g.get().lock().token_live(token, ffi::now().0)),
    }
}

/// Whether a command name names a command of this module.
fn is_dlock(name: &[u8]) -> bool {
    name.get(..6)
        .is_some_and(|p| p.eq_ignore_ascii_case(b"dlock."))
}

/// `DLOCK.FENCED`, also asked for the keys of a call (`getkeys-api`).
fn fenced(ctx: Ctx<'_>, args: Args<'_>) -> Outcome {
    // SAFETY: asking about the running callback's own context.
    if unsafe { rm!(RedisModule_IsKeysPositionRequest(ctx.as_raw()) else 0) } != 0 {
        report_keys(ctx, args);
        return Ok(Reply::Done);
    }
    if args.len() < 4 {
        return Err(Refused::Arity);
    }
    let token = args::token(args.get(2))?;
    let name = args.get(3);
    if is_dlock(name) {
        return Err(error::FENCED_DLOCK.into());
    }
    // The command name goes to RedisModule_Call as a C string.
    let cname = CString::new(name).map_err(|_| error::FENCED_UNKNOWN)?;
    let key = args.string(1).ok_or(Refused::Arity)?;
    if !live(ctx, key, token)? {
        stats::add(&stats::counter::fenced_refused, 1);
        return Err(error::fenced(args.get(1), token).into());
    }
    let reply = call(ctx, &cname, args.from(4)).map_err(error::fenced_call)?;
    stats::add(&stats::counter::fenced_run, 1);
    if reply.is_unknown() {
        // No reply at all: Valkey 8.1 does this for some commands (GETDEL
        // or GETSET on a key of another type), and hands the missing reply
        // to the next module call instead. Relaying nothing would leave the
        // caller waiting.
        drop(reply);
        drain(ctx);
        return Err(error::FENCED_NO_REPLY.into());
    }
    if !reply.relay(ctx) {
        return Err(error::FENCED_RELAY.into());
    }
    Ok(Reply::Done)
}

/// The reply of a RedisModule_Call, freed on drop.
struct CallReply(ptr::NonNull<raw::RedisModuleCallReply>);

impl CallReply {
    fn kind(&self) -> c_int {
        // SAFETY: a live reply of a call made by this module.
        unsafe { rm!(RedisModule_CallReplyType(self.0.as_ptr()) else UNKNOWN) }
    }

    fn is_unknown(&self) -> bool {
        self.kind() == UNKNOWN
    }

    fn is_error(&self) -> bool {
        self.kind() == ERROR
    }

    /// Sends this reply as the command's reply; false when Redis could not.
    fn relay(&self, ctx: Ctx<'_>) -> bool {
        // SAFETY: the running command's context; a live reply, which Redis
        // copies into the caller's reply.
        unsafe {
            rm!(RedisModule_ReplyWithCallReply(ctx.as_raw(), self.0.as_ptr()) else ffi::ERR)
                == ffi::OK
        }
    }
}

impl Drop for CallReply {
    fn drop(&mut self) {
        // SAFETY: freed exactly once.
        unsafe { rm!(RedisModule_FreeCallReply(self.0.as_ptr()) else ()) };
    }
}

const UNKNOWN: c_int = raw::REDISMODULE_REPLY_UNKNOWN as c_int;
const ERROR: c_int = raw::REDISMODULE_REPLY_ERROR as c_int;

/// After a call whose reply went missing: a call with no effect (`ECHO ""`,
/// not replicated, no ACL check) takes the stray reply, so it does not
/// reach the next module call, ours or another module's.
fn drain(ctx: Ctx<'_>) {
    // SAFETY: "c" takes one NUL-terminated C string; the reply, if any, is
    // freed at once.
    unsafe {
        let r = rm!(RedisModule_Call(ctx.as_raw(), c"ECHO".as_ptr(), c"c".as_ptr(), c"".as_ptr()) else ptr::null_mut());
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
        (true, true) => c"!CS0MEv",
        (true, false) => c"!CS0ME",
        (false, true) => c"!CS0Ev",
        (false, false) => c"!CS0E",
    }
}

/// The `errno` values with which RedisModule_Call refuses a command before
/// running it (unknown, arity, script rules, OOM, ACL, cluster, no user).
fn is_refusal(errno: i32) -> bool {
    matches!(
        errno,
        libc::ENOENT
            | libc::EINVAL
            | libc::ESPIPE
            | libc::ENOSPC
            | libc::EACCES
            | libc::EPERM
            | libc::EROFS
            | libc::ENETDOWN
            | libc::ENOTSUP
    )
}

/// Runs `cname inner...` through RedisModule_Call. `Err(errno)` when Redis
/// refused to run it (nothing ran).
///
/// `errno` is cleared first: the server sets it only when it refuses (it
/// never clears it when the command runs), so an error reply with one of the
/// refusal codes set is a refusal, and any other reply is the command's.
fn call(ctx: Ctx<'_>, cname: &CString, inner: Args<'_>) -> Result<CallReply, i32> {
    let (ctx, inner) = (ctx.as_raw(), inner.as_raw());
    let mut with_oom = OOM_FLAG.load(Relaxed) != 2;
    loop {
        ffi::clear_errno();
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
        let code = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
        if let Some(reply) = ptr::NonNull::new(reply) {
            if with_oom {
                OOM_FLAG.store(1, Relaxed);
            }
            let reply = CallReply(reply);
            if is_refusal(code) && reply.is_error() {
                // Refused before running: FENCED's own message for it.
                return Err(code);
            }
            return Ok(reply);
        }
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
fn report_keys(ctx: Ctx<'_>, args: Args<'_>) {
    const LOCK_KEY: c_int =
        (raw::REDISMODULE_CMD_KEY_RO | raw::REDISMODULE_CMD_KEY_ACCESS) as c_int;
    key_at(ctx, 1, Some(LOCK_KEY));
    let inner = args.from(3).as_raw();
    if inner.is_empty() || is_dlock(args.get(3)) {
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
            Some(f) => f(ctx.as_raw(), argv, argc, &mut n, &mut flags),
            None => {
                rm!(RedisModule_GetCommandKeys(ctx.as_raw(), argv, argc, &mut n) else ptr::null_mut())
            }
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
fn key_at(ctx: Ctx<'_>, pos: c_int, flags: Option<c_int>) {
    let ctx = ctx.as_raw();
    // SAFETY: called only while Redis asks this command for its keys.
    unsafe {
        match (flags, raw::RedisModule_KeyAtPosWithFlags) {
            (Some(f), Some(with_flags)) => with_flags(ctx, pos, f),
            _ => rm!(RedisModule_KeyAtPos(ctx, pos) else ()),
        }
    }
}
