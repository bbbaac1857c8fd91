//! Replies of `RedisModule_Call`, read through safe types: a
//! [`CallReply`] owns the top-level reply (freed on drop); an [`Elem`]
//! borrows it, so no element outlives its reply.

use super::{rm, Ctx, RString, RawStr};
use redis_module::raw;
use std::ffi::{c_int, CStr};
use std::marker::PhantomData;
use std::ptr::{self, NonNull};

/// The reply of a `RedisModule_Call`, freed on drop.
pub struct CallReply(NonNull<raw::RedisModuleCallReply>);

impl CallReply {
    /// Runs `cmd words...` (format "v": no ACL check, no replication —
    /// for reads such as SCAN). None when the server gave no reply.
    pub fn call(ctx: Ctx<'_>, cmd: &CStr, words: &[RString]) -> Option<CallReply> {
        let argv: Vec<RawStr> = words.iter().map(|s| s.as_rstr().as_ptr()).collect();
        // SAFETY: "v" takes a pointer to `argv.len()` live module strings
        // and their count (a size_t); the name is NUL-terminated; Redis
        // copies what it keeps during the call.
        let r = unsafe {
            rm!(RedisModule_Call(
                ctx.as_raw(),
                cmd.as_ptr(),
                c"v".as_ptr(),
                argv.as_ptr().cast_mut(),
                argv.len()
            ) else ptr::null_mut())
        };
        NonNull::new(r).map(CallReply)
    }

    /// A SCAN reply: the next cursor and the keys.
    pub fn cursor_and_keys(&self) -> Option<(Vec<u8>, Vec<Vec<u8>>)> {
        let top = Elem(self.0, PhantomData);
        let cursor = top.element(0)?.string()?;
        let keys = top.element(1)?;
        let n = keys.array_len()?;
        let keys = (0..n)
            .filter_map(|i| keys.element(i).and_then(|e| e.string()))
            .collect();
        Some((cursor, keys))
    }
}

impl Drop for CallReply {
    fn drop(&mut self) {
        // SAFETY: the top-level reply of our call, freed exactly once (its
        // elements go with it).
        unsafe { rm!(RedisModule_FreeCallReply(self.0.as_ptr()) else ()) };
    }
}

/// The reply of the call, or one of its elements: valid while the
/// [`CallReply`] it borrows from is.
#[derive(Clone, Copy)]
struct Elem<'a>(
    NonNull<raw::RedisModuleCallReply>,
    PhantomData<&'a CallReply>,
);

impl<'a> Elem<'a> {
    fn kind(self) -> i32 {
        // SAFETY: a live reply (or element) of the call the borrowed
        // CallReply holds; asking its type only reads it.
        unsafe {
            rm!(RedisModule_CallReplyType(self.0.as_ptr()) else raw::REDISMODULE_REPLY_UNKNOWN as i32)
        }
    }

    /// The length of an array reply.
    fn array_len(self) -> Option<usize> {
        if self.kind() != raw::REDISMODULE_REPLY_ARRAY as i32 {
            return None;
        }
        // SAFETY: a live array reply.
        Some(unsafe { rm!(RedisModule_CallReplyLength(self.0.as_ptr()) else 0) })
    }

    /// Element `i` of an array reply (owned by that reply).
    fn element(self, i: usize) -> Option<Elem<'a>> {
        self.array_len()?;
        // SAFETY: a live array reply; an index past its end gives null.
        let e = unsafe {
            rm!(RedisModule_CallReplyArrayElement(self.0.as_ptr(), i) else ptr::null_mut())
        };
        NonNull::new(e).map(|e| Elem(e, PhantomData))
    }

    /// The bytes of a string reply, copied.
    fn string(self) -> Option<Vec<u8>> {
        if self.kind() != raw::REDISMODULE_REPLY_STRING as i32 {
            return None;
        }
        let mut len = 0usize;
        // SAFETY: a live string reply; Redis writes its length to `len` and
        // returns a pointer to that many bytes, valid while the reply is.
        let p = unsafe {
            rm!(RedisModule_CallReplyStringPtr(self.0.as_ptr(), &mut len) else ptr::null())
        };
        if p.is_null() {
            return None;
        }
        // SAFETY: as above: `len` readable bytes at `p`, copied at once.
        Some(unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) }.to_vec())
    }
}

const UNKNOWN: i32 = raw::REDISMODULE_REPLY_UNKNOWN as i32;
const ERROR: i32 = raw::REDISMODULE_REPLY_ERROR as i32;

impl CallReply {
    fn kind(&self) -> i32 {
        Elem(self.0, PhantomData).kind()
    }

    /// The server gave a reply object that holds no reply.
    pub fn is_unknown(&self) -> bool {
        self.kind() == UNKNOWN
    }

    pub fn is_error(&self) -> bool {
        self.kind() == ERROR
    }

    /// Sends this reply as the running command's reply; false when the
    /// server could not.
    pub fn relay(&self, ctx: Ctx<'_>) -> bool {
        // SAFETY: the running command's context; a live reply, which the
        // server copies into the caller's reply.
        unsafe {
            rm!(RedisModule_ReplyWithCallReply(ctx.as_raw(), self.0.as_ptr()) else super::ERR)
                == super::OK
        }
    }
}

/// The `RedisModule_Call` format of [`call_command`]: `!CS0E`, with `M`
/// when `with_oom`, and `v` (the arguments as a vector) when `with_args`.
fn command_format(with_oom: bool, with_args: bool) -> &'static CStr {
    match (with_oom, with_args) {
        (true, true) => c"!CS0MEv",
        (true, false) => c"!CS0ME",
        (false, true) => c"!CS0Ev",
        (false, false) => c"!CS0E",
    }
}

/// Runs `cmd args...` through `RedisModule_Call` with the flags `!CS0E`
/// (propagated, the caller's ACL, script mode, the caller's protocol,
/// refusals as error replies) and `M` when `with_oom`: the reply (None when
/// the server gave none) and the `errno` the server left (cleared before
/// the call, so non-zero only when the server set it).
pub fn call_command(
    ctx: Ctx<'_>,
    cmd: &CStr,
    with_oom: bool,
    args: super::Args<'_>,
) -> (Option<CallReply>, i32) {
    let argv = args.as_raw();
    let fmt = command_format(with_oom, !argv.is_empty());
    super::clear_errno();
    // SAFETY: `fmt` ends with `v` exactly when the vector and its length
    // (a pointer to `argv.len()` live module strings, a size_t) are passed;
    // its other flags take no argument. `cmd` is NUL-terminated and
    // outlives the call; the server copies what it keeps.
    let reply = unsafe {
        if argv.is_empty() {
            rm!(RedisModule_Call(ctx.as_raw(), cmd.as_ptr(), fmt.as_ptr()) else ptr::null_mut())
        } else {
            rm!(RedisModule_Call(
                ctx.as_raw(),
                cmd.as_ptr(),
                fmt.as_ptr(),
                argv.as_ptr().cast_mut(),
                argv.len()
            ) else ptr::null_mut())
        }
    };
    let code = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
    (NonNull::new(reply).map(CallReply), code)
}

impl Ctx<'_> {
    /// The running command is asked only for its keys (`getkeys-api`).
    pub fn is_keys_position_request(self) -> bool {
        // SAFETY: asking about the running callback's own context.
        unsafe { rm!(RedisModule_IsKeysPositionRequest(self.as_raw()) else 0) != 0 }
    }

    /// Reports the key at argument `pos` of the running command (asked for
    /// its keys), with its flags when known (full access otherwise, which
    /// is what the server assumes without flags).
    pub fn key_at(self, pos: c_int, flags: Option<c_int>) {
        // SAFETY: the running callback's context; the server ignores the
        // call unless it asked this command for its keys.
        unsafe {
            match (flags, raw::RedisModule_KeyAtPosWithFlags) {
                (Some(f), Some(with_flags)) => with_flags(self.as_raw(), pos, f),
                _ => rm!(RedisModule_KeyAtPos(self.as_raw(), pos) else ()),
            }
        }
    }

    /// The key positions of the command `args` (its name first), each with
    /// its flags where the server gives them
    /// (`RedisModule_GetCommandKeysWithFlags`, else `GetCommandKeys`).
    pub fn command_keys(self, args: super::Args<'_>) -> Vec<(c_int, Option<c_int>)> {
        let argv = args.as_raw();
        let Ok(argc) = c_int::try_from(argv.len()) else {
            return Vec::new();
        };
        if argc == 0 {
            return Vec::new();
        }
        let mut n: c_int = 0;
        let mut flags: *mut c_int = ptr::null_mut();
        // SAFETY: `argv` is a slice of live module strings, which the server
        // only reads; the arrays it returns (positions, flags) are ours to
        // free, below.
        let pos = unsafe {
            let v = argv.as_ptr().cast_mut();
            match raw::RedisModule_GetCommandKeysWithFlags {
                Some(f) => f(self.as_raw(), v, argc, &mut n, &mut flags),
                None => {
                    rm!(RedisModule_GetCommandKeys(self.as_raw(), v, argc, &mut n) else ptr::null_mut())
                }
            }
        };
        if pos.is_null() {
            return Vec::new();
        }
        let n = usize::try_from(n).unwrap_or(0);
        // SAFETY: the server returned `n` positions at `pos`, and (when not
        // null) `n` flags at `flags`, ours until freed below.
        let (positions, key_flags) = unsafe {
            (
                std::slice::from_raw_parts(pos, n),
                if flags.is_null() {
                    &[][..]
                } else {
                    std::slice::from_raw_parts(flags, n)
                },
            )
        };
        let out = positions
            .iter()
            .enumerate()
            .map(|(i, p)| (*p, key_flags.get(i).copied()))
            .collect();
        // SAFETY: the arrays the server allocated for us, freed once, after
        // their last use (copied into `out`).
        unsafe {
            rm!(RedisModule_Free(pos.cast()) else ());
            if !flags.is_null() {
                rm!(RedisModule_Free(flags.cast()) else ());
            }
        }
        out
    }
}
