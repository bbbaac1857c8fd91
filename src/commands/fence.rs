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
//!   directly (where the server knows the flag; see [`call`]);
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
use crate::ffi::call::{call_command, CallReply};
use crate::ffi::{self, Args, Ctx, RStr};
use crate::services::commit::as_of;
use crate::services::events;
use crate::stats;
use crate::storage;
use redis_module::raw;
use std::ffi::{c_int, CString};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering::Relaxed};

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

/// Whether `token` is the token of a live hold of the lock at `name`, as
/// of now (`commit::as_of`: a lease that ended, a bound connection that
/// closed, end the hold before their timer or job has run).
fn live(ctx: Ctx<'_>, name: RStr<'_>, token: u64) -> Result<bool, error::Msg> {
    match storage::read(ctx, name) {
        Err(()) => Err(error::WRONGTYPE),
        Ok(None) => Ok(false),
        Ok(Some(g)) => {
            let (now, _) = ffi::now();
            let stored = g.get().lock();
            Ok(as_of(ctx, name.bytes(), &stored, now).token_live(token, now))
        }
    }
}

/// Whether this server's scripts refuse XREAD and XREADGROUP with BLOCK
/// ("… command is not allowed with BLOCK option from scripts": Redis before
/// 7.4, Valkey before 8.0; later ones answer at once, as for every other
/// blocking command). A call in script mode (`S`) is not made by a script
/// client, so the server does not refuse it there: FENCED does (issue 44,
/// item 3). Set at load ([`note_server`]).
static SCRIPTS_REFUSE_XREAD_BLOCK: AtomicBool = AtomicBool::new(false);

/// At load: the server's family and version (`ffi::server_kind`).
pub fn note_server((valkey, version): (bool, (u32, u32))) {
    let refuses = if valkey {
        version < (8, 0)
    } else {
        version < (7, 4)
    };
    SCRIPTS_REFUSE_XREAD_BLOCK.store(refuses, Relaxed);
}

/// Whether `name inner...` is XREAD or XREADGROUP with a BLOCK option on a
/// server whose scripts refuse that. The option is found as the server's
/// own parser finds it: options come before STREAMS, COUNT takes one value
/// (an integer) and GROUP two, so a stream, group or consumer named BLOCK
/// is no option; where the parser would stop at an error first, the
/// command is left to answer it.
fn xread_block_refused(name: &[u8], inner: Args<'_>) -> bool {
    let group = name.eq_ignore_ascii_case(b"xreadgroup");
    if !SCRIPTS_REFUSE_XREAD_BLOCK.load(Relaxed) || !(group || name.eq_ignore_ascii_case(b"xread"))
    {
        return false;
    }
    let n = inner.len();
    let mut i = 0;
    while i < n {
        let o = inner.get(i);
        let more = n - i - 1;
        let is = |w: &[u8]| o.eq_ignore_ascii_case(w);
        if is(b"BLOCK") && more > 0 {
            return true;
        } else if is(b"COUNT") && more > 0 {
            let count = std::str::from_utf8(inner.get(i + 1)).ok();
            if count.and_then(|c| c.parse::<i64>().ok()).is_none() {
                return false;
            }
            i += 2;
        } else if is(b"GROUP") && group && more >= 2 {
            i += 3;
        } else if is(b"NOACK") && group {
            i += 1;
        } else {
            // STREAMS (the options end), or what the command refuses itself.
            return false;
        }
    }
    false
}

/// Whether a command name names a command of this module.
fn is_dlock(name: &[u8]) -> bool {
    name.get(..6)
        .is_some_and(|p| p.eq_ignore_ascii_case(b"dlock."))
}

/// `DLOCK.FENCED`, also asked for the keys of a call (`getkeys-api`).
fn fenced(ctx: Ctx<'_>, args: Args<'_>) -> Outcome {
    if ctx.is_keys_position_request() {
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
    if xread_block_refused(name, args.from(4)) {
        return Err(error::FENCED_XREAD_BLOCK.into());
    }
    let reply =
        events::fenced_call(ctx, || call(ctx, &cname, args.from(4))).map_err(error::fenced_call)?;
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

/// After a call whose reply went missing: a call with no effect (`ECHO ""`,
/// not replicated, no ACL check) takes the stray reply, so it does not
/// reach the next module call, ours or another module's.
fn drain(ctx: Ctx<'_>) {
    let _ = ctx.call_for_string(c"ECHO", c"", |_| ());
}

/// Whether the server accepts the `M` flag of RedisModule_Call: 0 not
/// known yet, 1 yes, 2 no (it answers `EBADF` for an unknown flag, before
/// looking the command up, so asking costs nothing and runs nothing).
static OOM_FLAG: AtomicU8 = AtomicU8::new(0);

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
    let mut with_oom = OOM_FLAG.load(Relaxed) != 2;
    loop {
        let (reply, code) = call_command(ctx, cname, with_oom, inner);
        if let Some(reply) = reply {
            if with_oom {
                OOM_FLAG.store(1, Relaxed);
            }
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
    ctx.key_at(1, Some(LOCK_KEY));
    let inner = args.from(3);
    if inner.len() == 0 || is_dlock(args.get(3)) {
        return;
    }
    for (p, flags) in ctx.command_keys(inner) {
        if let Some(p) = p.checked_add(3) {
            ctx.key_at(p, flags);
        }
    }
}
