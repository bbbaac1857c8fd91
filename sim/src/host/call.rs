//! `RedisModule_Call` as the servers run it for a module (`RM_Call`): the
//! format's flags, the refusals made before the command runs (each with
//! its `errno`, and as an error reply with `E`), the command itself on the
//! host's keys, and its reply as a call-reply object the module reads and
//! frees.

use super::api::SimArgs;
use super::cmds::{self, Caller};
use super::{cluster, with, FCtx, Reply};
use redis_module::raw;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::ptr;

/// A call's reply: the reply and, for an array, its elements (owned by it,
/// freed with it).
pub struct CallReply {
    reply: Reply,
    /// A string's bytes, or an error's message.
    text: Vec<u8>,
    elems: Vec<CallReply>,
}

impl CallReply {
    fn new(reply: Reply) -> Box<CallReply> {
        let text = match &reply {
            Reply::Bulk(b) => b.clone(),
            Reply::Simple(s) | Reply::Err(s) => s.clone().into_bytes(),
            _ => Vec::new(),
        };
        let elems = match &reply {
            Reply::Array(items) => items.iter().cloned().map(|r| *CallReply::new(r)).collect(),
            _ => Vec::new(),
        };
        Box::new(CallReply { reply, text, elems })
    }
}

fn set_errno(e: c_int) {
    // SAFETY: this thread's errno.
    unsafe { *libc::__errno_location() = e };
}

/// A refusal before the command runs: `errno`, and the error as the reply
/// when the caller asked for errors as replies (`E`).
fn refuse(errno: c_int, as_reply: bool, msg: String) -> *mut c_void {
    set_errno(errno);
    if as_reply {
        Box::into_raw(CallReply::new(Reply::Err(msg))).cast()
    } else {
        ptr::null_mut()
    }
}

#[no_mangle]
unsafe extern "C" fn sim_call_argv(
    ctx: *mut c_void,
    cmd: *const c_char,
    fmt: *const c_char,
    args: *const SimArgs,
) -> *mut c_void {
    // SAFETY: the running callback's context (an FCtx of the host).
    let Some(c) = (unsafe { ctx.cast::<FCtx>().as_ref() }) else {
        set_errno(libc::EINVAL);
        return ptr::null_mut();
    };
    let (server, client, db) = (c.server, c.client, c.db);
    let name = if cmd.is_null() {
        String::new()
    } else {
        // SAFETY: a NUL-terminated command name.
        unsafe { CStr::from_ptr(cmd) }
            .to_string_lossy()
            .into_owned()
    };
    let fmt = if fmt.is_null() {
        String::new()
    } else {
        // SAFETY: a NUL-terminated format.
        unsafe { CStr::from_ptr(fmt) }
            .to_string_lossy()
            .into_owned()
    };
    let (mut replicate, mut script, mut oom, mut errors, mut no_writes) =
        (false, false, false, false, false);
    for f in fmt.chars() {
        match f {
            '!' => replicate = true,
            'S' => script = true,
            'M' => oom = true,
            'E' => errors = true,
            'W' => no_writes = true,
            'A' | 'R' | '3' | '0' | 'C' | 'c' | 's' | 'b' | 'l' | 'v' => {}
            _ => {
                set_errno(libc::EBADF);
                return ptr::null_mut();
            }
        }
    }
    let mut argv: Vec<Vec<u8>> = vec![name.clone().into_bytes()];
    // SAFETY: the shim's argument block, alive for the call.
    if let Some(a) = unsafe { args.as_ref() } {
        argv.extend(a.list());
    }
    let lname = name.to_lowercase();
    let Some((flags, first, arity)) = cmds::lookup(server, &lname) else {
        return refuse(
            libc::ENOENT,
            errors,
            format!("ERR Unknown Redis command '{name}'."),
        );
    };
    if !cmds::arity_ok(arity, argv.len()) {
        return refuse(
            libc::EINVAL,
            errors,
            format!("ERR Wrong number of args calling Redis command '{name}'."),
        );
    }
    let has = |f: &str| flags.split(' ').any(|w| w == f);
    if script && has("noscript") {
        return refuse(
            libc::ESPIPE,
            errors,
            format!("ERR command '{lname}' is not allowed on script mode"),
        );
    }
    let (is_oom, replica) = with(|h| (h.servers[server].oom, h.servers[server].replica));
    if oom && is_oom && (has("deny-oom") || has("denyoom")) {
        return refuse(
            libc::ENOSPC,
            errors,
            "OOM command not allowed when used memory > 'maxmemory'.".into(),
        );
    }
    if no_writes && has("write") {
        return refuse(
            libc::ENOSPC,
            errors,
            format!("ERR Write command '{lname}' was called while write is not allowed."),
        );
    }
    if script && has("write") && replica {
        return refuse(
            libc::ESPIPE,
            errors,
            "READONLY You can't write against a read only replica.".into(),
        );
    }
    let refs: Vec<&[u8]> = argv.iter().map(Vec::as_slice).collect();
    let key = (first > 0).then(|| refs.get(first).copied()).flatten();
    if cluster::wrong_node(server, key).is_some() {
        return refuse(
            libc::EPERM,
            errors,
            "ERR Attempted to access a non local key in a cluster node".into(),
        );
    }
    let reply = cmds::exec(server, client, db, &refs, Caller::Call { replicate });
    Box::into_raw(CallReply::new(reply.unwrap_or(Reply::Null))).cast()
}

/// The [`CallReply`] behind a handle.
///
/// # Safety
/// `r` is null or a reply (or an element of one) made here and not freed.
unsafe fn reply<'a>(r: *mut raw::RedisModuleCallReply) -> Option<&'a CallReply> {
    // SAFETY: the caller's contract.
    unsafe { r.cast::<CallReply>().as_ref() }
}

pub unsafe extern "C" fn call_reply_type(r: *mut raw::RedisModuleCallReply) -> c_int {
    // SAFETY: a live reply handle of this host.
    let t = match unsafe { reply(r) }.map(|r| &r.reply) {
        Some(Reply::Int(_)) => raw::REDISMODULE_REPLY_INTEGER,
        Some(Reply::Null) => raw::REDISMODULE_REPLY_NULL,
        Some(Reply::Err(_)) => raw::REDISMODULE_REPLY_ERROR,
        Some(Reply::Bulk(_) | Reply::Simple(_)) => raw::REDISMODULE_REPLY_STRING,
        Some(Reply::Array(_)) => raw::REDISMODULE_REPLY_ARRAY,
        None => raw::REDISMODULE_REPLY_UNKNOWN,
    };
    t as c_int
}

pub unsafe extern "C" fn call_reply_string_ptr(
    r: *mut raw::RedisModuleCallReply,
    len: *mut usize,
) -> *const c_char {
    // SAFETY: a live reply handle of this host.
    let Some(r) = (unsafe { reply(r) }) else {
        return ptr::null();
    };
    if !matches!(r.reply, Reply::Bulk(_) | Reply::Simple(_) | Reply::Err(_)) {
        return ptr::null();
    }
    if !len.is_null() {
        // SAFETY: a place for the length.
        unsafe { *len = r.text.len() };
    }
    r.text.as_ptr().cast()
}

pub unsafe extern "C" fn call_reply_length(r: *mut raw::RedisModuleCallReply) -> usize {
    // SAFETY: a live reply handle of this host.
    unsafe { reply(r) }.map_or(0, |r| match &r.reply {
        Reply::Array(items) => items.len(),
        Reply::Bulk(_) | Reply::Simple(_) | Reply::Err(_) => r.text.len(),
        _ => 0,
    })
}

pub unsafe extern "C" fn call_reply_array_element(
    r: *mut raw::RedisModuleCallReply,
    i: usize,
) -> *mut raw::RedisModuleCallReply {
    // SAFETY: a live reply handle of this host.
    match unsafe { reply(r) }.and_then(|r| r.elems.get(i)) {
        Some(e) => ptr::from_ref::<CallReply>(e).cast_mut().cast(),
        None => ptr::null_mut(),
    }
}

pub unsafe extern "C" fn call_reply_integer(r: *mut raw::RedisModuleCallReply) -> i64 {
    // SAFETY: a live reply handle of this host.
    match unsafe { reply(r) }.map(|r| &r.reply) {
        Some(Reply::Int(v)) => *v,
        _ => 0,
    }
}

pub unsafe extern "C" fn free_call_reply(r: *mut raw::RedisModuleCallReply) {
    if !r.is_null() {
        // SAFETY: a top-level reply made by sim_call_argv, freed once (its
        // elements go with it).
        drop(unsafe { Box::from_raw(r.cast::<CallReply>()) });
    }
}

pub unsafe extern "C" fn reply_with_call_reply(
    ctx: *mut raw::RedisModuleCtx,
    r: *mut raw::RedisModuleCallReply,
) -> c_int {
    // SAFETY: the running callback's context, and a live reply handle.
    let (Some(c), Some(r)) = (unsafe { ctx.cast::<FCtx>().as_mut() }, unsafe { reply(r) }) else {
        return raw::REDISMODULE_ERR as c_int;
    };
    c.push(r.reply.clone());
    raw::REDISMODULE_OK as c_int
}
