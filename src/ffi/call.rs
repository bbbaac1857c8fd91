//! Replies of `RedisModule_Call`, read through safe types: a
//! [`CallReply`] owns the top-level reply (freed on drop); an [`Elem`]
//! borrows it, so no element outlives its reply.

use super::{rm, Ctx, RString, RawStr};
use redis_module::raw;
use std::ffi::CStr;
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
