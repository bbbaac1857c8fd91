//! Thin, panic-free wrappers over the Redis module API.
//!
//! Every function pointer of `redis_module::raw` is an `Option`; all the ones
//! used here exist on Redis 7.0 and are checked once at load
//! ([`check_api`]). Calls still go through [`rm!`], which falls back to a
//! harmless default instead of unwrapping, so no path here can panic.

pub mod call;
pub mod callbacks;
pub mod command;

use redis_module::raw;
use std::ffi::{c_char, c_int, c_long, c_void, CStr};
use std::marker::PhantomData;
use std::ptr;

pub type RawCtx = *mut raw::RedisModuleCtx;
pub type RawStr = *mut raw::RedisModuleString;
/// What a module timer runs when it fires.
pub type TimerFn = unsafe extern "C" fn(RawCtx, *mut c_void);

pub const OK: c_int = raw::REDISMODULE_OK as c_int;
pub const ERR: c_int = raw::REDISMODULE_ERR as c_int;

/// Calls a module API function pointer, or evaluates the fallback when the
/// server does not export it.
macro_rules! rm {
    ($name:ident ( $($arg:expr),* $(,)? ) else $default:expr) => {
        match redis_module::raw::$name {
            Some(f) => f($($arg),*),
            None => $default,
        }
    };
}
pub(crate) use rm;

/// Names every API this module calls; load fails (with a log line) when the
/// server lacks one, instead of failing later.
pub fn check_api() -> Result<(), &'static str> {
    macro_rules! need {
        ($($name:ident),* $(,)?) => {
            $(
                // SAFETY: reading a function-pointer static that Redis filled
                // in during RedisModule_Init, before any command runs.
                if unsafe { raw::$name }.is_none() {
                    return Err(stringify!($name));
                }
            )*
        };
    }
    need!(
        RedisModule_StringPtrLen,
        RedisModule_CreateString,
        RedisModule_FreeString,
        RedisModule_OpenKey,
        RedisModule_CloseKey,
        RedisModule_KeyType,
        RedisModule_ModuleTypeGetType,
        RedisModule_ModuleTypeGetValue,
        RedisModule_ModuleTypeSetValue,
        RedisModule_DeleteKey,
        RedisModule_ReplyWithLongLong,
        RedisModule_ReplyWithNull,
        RedisModule_ReplyWithError,
        RedisModule_ReplyWithStringBuffer,
        RedisModule_ReplyWithSimpleString,
        RedisModule_ReplyWithArray,
        RedisModule_ReplyWithMap,
        RedisModule_WrongArity,
        RedisModule_Replicate,
        RedisModule_ReplicateVerbatim,
        RedisModule_GetContextFlags,
        RedisModule_SelectDb,
        RedisModule_GetSelectedDb,
        RedisModule_GetClientId,
        RedisModule_CreateTimer,
        RedisModule_StopTimer,
        RedisModule_PublishMessage,
        RedisModule_PublishMessageShard,
        RedisModule_SignalKeyAsReady,
        RedisModule_BlockClientOnKeys,
        RedisModule_GetBlockedClientPrivateData,
        RedisModule_SaveStringBuffer,
        RedisModule_LoadStringBuffer,
        RedisModule_SaveUnsigned,
        RedisModule_LoadUnsigned,
        RedisModule_IsIOError,
        RedisModule_Free,
        RedisModule_EmitAOF,
        RedisModule_DigestAddStringBuffer,
        RedisModule_DigestEndSequence,
        RedisModule_GetKeyNameFromOptCtx,
        RedisModule_GetDbIdFromOptCtx,
        RedisModule_SubscribeToKeyspaceEvents,
        RedisModule_SubscribeToServerEvent,
        RedisModule_GetDetachedThreadSafeContext,
        RedisModule_SetModuleOptions,
        RedisModule_CreateCommand,
        RedisModule_GetCommand,
        RedisModule_SetCommandInfo,
        RedisModule_InfoAddSection,
        RedisModule_InfoAddFieldULongLong,
        RedisModule_RegisterInfoFunc,
        RedisModule_Call,
        RedisModule_CallReplyStringPtr,
        RedisModule_FreeCallReply,
        RedisModule_GetBlockedClientReadyKey,
        RedisModule_UnblockClient,
        RedisModule_CallReplyType,
        RedisModule_ReplyWithCallReply,
        RedisModule_IsKeysPositionRequest,
        RedisModule_KeyAtPos,
        RedisModule_GetCommandKeys,
    );
    // Used where present, never required (newer than Redis 7.0):
    // SetCommandACLCategories, AddACLCategory, CommandFilterGetClientId,
    // GetClientInfoById (with the filter), GetCommandKeysWithFlags,
    // KeyAtPosWithFlags; and AvoidReplicaTraffic (Redis 6.0+, so on every
    // supported server, but a host without it, such as an older simulator,
    // only loses the pause check: see `propagation_paused`).
    Ok(())
}

/// A module string borrowed for `'a`: a command argument (alive for the
/// whole command callback), a key name Redis passes to a callback, or an
/// [`RString`] this module owns. Made only by this module's FFI edge, from a
/// pointer Redis guarantees for `'a`, so reading it is safe.
#[derive(Clone, Copy)]
pub struct RStr<'a> {
    ptr: ptr::NonNull<raw::RedisModuleString>,
    _life: PhantomData<&'a raw::RedisModuleString>,
}

impl<'a> RStr<'a> {
    /// # Safety
    /// `p` must be null or a module string that stays alive and unchanged
    /// for `'a`.
    pub unsafe fn from_raw(p: *mut raw::RedisModuleString) -> Option<RStr<'a>> {
        ptr::NonNull::new(p).map(|ptr| RStr {
            ptr,
            _life: PhantomData,
        })
    }

    /// The pointer, for passing back to the module API.
    pub fn as_ptr(self) -> RawStr {
        self.ptr.as_ptr()
    }

    /// The string's bytes, alive as long as the string.
    pub fn bytes(self) -> &'a [u8] {
        let mut len: usize = 0;
        // SAFETY: `ptr` is a live module string for 'a (the constructor's
        // contract).
        let p =
            unsafe { rm!(RedisModule_StringPtrLen(self.ptr.as_ptr(), &mut len) else ptr::null()) };
        if p.is_null() {
            &[]
        } else {
            // SAFETY: Redis returned `len` bytes at `p`, alive and unchanged
            // as long as the string, i.e. for 'a.
            unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) }
        }
    }
}

/// The bytes of a module string Redis passed to a callback (a key name of an
/// event or of a type callback). Empty for a null pointer.
///
/// # Safety
/// `s` must be null or a live module string that outlives the returned slice
/// and is not modified meanwhile.
pub unsafe fn bytes<'a>(s: *const raw::RedisModuleString) -> &'a [u8] {
    // SAFETY: the caller's contract is RStr::from_raw's.
    match unsafe { RStr::from_raw(s.cast_mut()) } {
        Some(s) => s.bytes(),
        None => &[],
    }
}

/// The arguments of one command call, alive for `'a` (the callback).
#[derive(Clone, Copy)]
pub struct Args<'a> {
    argv: &'a [RawStr],
}

impl<'a> Args<'a> {
    /// # Safety
    /// `argv`/`argc` must be the arguments Redis passed to the running
    /// command callback, which outlives `'a`.
    pub unsafe fn from_raw(argv: *mut RawStr, argc: c_int) -> Args<'a> {
        let argv = match usize::try_from(argc) {
            // SAFETY: Redis passed `argc` argument pointers at `argv`, alive
            // for the callback (the caller's contract).
            Ok(n) if !argv.is_null() => unsafe { std::slice::from_raw_parts(argv, n) },
            _ => &[],
        };
        Args { argv }
    }

    pub fn len(self) -> usize {
        self.argv.len()
    }

    /// Argument `i` as a module string.
    pub fn string(self, i: usize) -> Option<RStr<'a>> {
        // SAFETY: every argument is a live module string for 'a (the
        // constructor's contract).
        self.argv.get(i).and_then(|&p| unsafe { RStr::from_raw(p) })
    }

    /// The bytes of argument `i` (empty when absent).
    pub fn get(self, i: usize) -> &'a [u8] {
        self.string(i).map_or(&[], RStr::bytes)
    }

    /// The arguments from `i` on.
    pub fn from(self, i: usize) -> Args<'a> {
        Args {
            argv: self.argv.get(i..).unwrap_or(&[]),
        }
    }

    /// The raw argument vector, for passing on to the module API.
    pub fn as_raw(self) -> &'a [RawStr] {
        self.argv
    }
}

/// An owned module string, freed on drop.
pub struct RString(ptr::NonNull<raw::RedisModuleString>);

impl RString {
    /// None when Redis could not make the string.
    pub fn new(b: &[u8]) -> Option<RString> {
        // SAFETY: a null context is allowed; the string is then owned by us
        // and freed in Drop.
        let p = unsafe {
            rm!(RedisModule_CreateString(ptr::null_mut(), b.as_ptr().cast::<c_char>(), b.len()) else ptr::null_mut())
        };
        ptr::NonNull::new(p).map(RString)
    }

    pub fn as_rstr(&self) -> RStr<'_> {
        RStr {
            ptr: self.0,
            _life: PhantomData,
        }
    }

    /// Gives up ownership: the string lives until the process ends.
    pub fn leak(self) -> RStr<'static> {
        let p = self.0;
        std::mem::forget(self);
        RStr {
            ptr: p,
            _life: PhantomData,
        }
    }
}

impl Drop for RString {
    fn drop(&mut self) {
        // SAFETY: created with a null context above, freed exactly once.
        unsafe { rm!(RedisModule_FreeString(ptr::null_mut(), self.0.as_ptr()) else ()) }
    }
}

mod sealed {
    /// The raw context of a context type: named only inside `ffi`, so no
    /// other layer can reach the raw pointer, or add a context type.
    pub trait Raw: Copy {
        fn raw(self) -> crate::ffi::RawCtx;
    }
}

/// The context of one callback, valid for `'cb`: the callback's duration.
///
/// Made only by the trampolines of [`callbacks`] (and the load entry point,
/// [`on_load`]), each for one call and handed to a function generic over
/// `'cb` (a `for<'cb> FnOnce(Ctx<'cb>)`), so a `Ctx` — `Copy`, but every
/// copy with the same lifetime — cannot be kept past its callback. What
/// borrows it (open keys, [`DbScope`], the guards of `storage`) cannot
/// either. The detached context is another type, [`DetachedCtx`], which
/// cannot open keys.
#[derive(Clone, Copy)]
pub struct Ctx<'cb> {
    raw: RawCtx,
    _cb: PhantomData<&'cb ()>,
}

/// The module's detached context (`RedisModule_GetDetachedThreadSafeContext`),
/// valid for the module's life and used on the main thread only: what runs
/// where the server gives no context (the unlink hook, next-turn
/// callbacks) arms timers, reads the flags and publishes through it
/// ([`AnyCtx`]). It opens no key: key access needs a callback's [`Ctx`].
#[derive(Clone, Copy)]
pub struct DetachedCtx(ptr::NonNull<raw::RedisModuleCtx>);

impl sealed::Raw for Ctx<'_> {
    #[inline]
    fn raw(self) -> RawCtx {
        self.raw
    }
}

impl sealed::Raw for DetachedCtx {
    #[inline]
    fn raw(self) -> RawCtx {
        self.0.as_ptr()
    }
}

impl<'cb> Ctx<'cb> {
    /// # Safety
    /// `raw` must be a context Redis passed to the running callback, valid
    /// for `'cb`; the caller picks a `'cb` no longer than that callback
    /// ([`Ctx::enter`] does).
    unsafe fn from_raw(raw: RawCtx) -> Ctx<'cb> {
        Ctx {
            raw,
            _cb: PhantomData,
        }
    }
}

impl Ctx<'_> {
    /// Runs `f` with `raw` as a [`Ctx`] of a lifetime `f` cannot name
    /// beyond the call: the only way the FFI edge hands out a context.
    ///
    /// # Safety
    /// `raw` must be a context Redis passed to the running callback, valid
    /// until that callback returns (which is after `f` returns).
    #[inline]
    unsafe fn enter<R>(raw: RawCtx, f: impl for<'cb> FnOnce(Ctx<'cb>) -> R) -> R {
        // SAFETY: valid for the callback (the caller's contract), which
        // outlives this call of `f`; `f` is generic over the lifetime, so
        // neither the context nor what borrows it escapes.
        f(unsafe { Ctx::from_raw(raw) })
    }

    /// The raw context, for passing back to the module API (inside `ffi`:
    /// no other layer can reach it).
    #[inline]
    fn as_raw(self) -> RawCtx {
        self.raw
    }
}

/// What every context of this module may do, a callback's [`Ctx`] or the
/// [`DetachedCtx`]: read the context flags, arm and stop timers, publish.
/// Nothing here reaches a key. (Sealed: only `ffi` implements it.)
pub trait AnyCtx: sealed::Raw {
    #[inline]
    fn flags(self) -> u32 {
        // Inside a command's [`CallScope`] the flags are read once (Redis
        // computes them afresh on every call, ~130 instructions).
        let raw = self.raw();
        let scoped = SCOPE
            .try_with(|s| {
                let v = s.get();
                (v.ctx == raw as usize).then_some(v.flags)
            })
            .ok()
            .flatten();
        match scoped {
            Some(Some(f)) => f,
            Some(None) => {
                let f = read_flags(self);
                let _ = SCOPE.try_with(|s| {
                    let mut v = s.get();
                    v.flags = Some(f);
                    s.set(v);
                });
                f
            }
            None => read_flags(self),
        }
    }

    fn is_replica(self) -> bool {
        self.flags() & raw::REDISMODULE_CTX_FLAGS_SLAVE != 0
    }

    fn is_loading(self) -> bool {
        self.flags() & raw::REDISMODULE_CTX_FLAGS_LOADING != 0
    }

    /// The running command was sent by the master or is being loaded from
    /// the AOF: it replays a change made elsewhere.
    fn is_replay(self) -> bool {
        self.flags() & (raw::REDISMODULE_CTX_FLAGS_REPLICATED | raw::REDISMODULE_CTX_FLAGS_LOADING)
            != 0
    }

    /// Used memory is over `maxmemory` (what refuses `deny-oom` commands).
    fn is_oom(self) -> bool {
        self.flags() & raw::REDISMODULE_CTX_FLAGS_OOM != 0
    }

    fn is_cluster(self) -> bool {
        self.flags() & raw::REDISMODULE_CTX_FLAGS_CLUSTER != 0
    }

    /// Running inside a Lua script or function.
    fn in_script(self) -> bool {
        self.flags() & raw::REDISMODULE_CTX_FLAGS_LUA != 0
    }

    /// Blocking is not allowed (MULTI, scripts, RM_Call).
    fn deny_blocking(self) -> bool {
        self.flags()
            & (raw::REDISMODULE_CTX_FLAGS_MULTI
                | raw::REDISMODULE_CTX_FLAGS_LUA
                | raw::REDISMODULE_CTX_FLAGS_DENY_BLOCKING)
            != 0
    }

    /// Creates a module timer that runs `on` once, `ms` from now, with no
    /// data. Its id, or 0 when the server made none.
    fn create_timer(self, ms: u64, on: TimerFn) -> u64 {
        let ms = i64::try_from(ms).unwrap_or(i64::MAX);
        // SAFETY: `self` is a valid context (a callback's, during it, or the
        // detached one); `on` is an extern fn of the shape the API calls;
        // the data pointer is null, so the timer owns nothing that
        // `stop_timer` or the fire must free.
        unsafe { rm!(RedisModule_CreateTimer(self.raw(), ms, Some(on), ptr::null_mut()) else 0) }
    }

    /// Stops a timer this module made with [`AnyCtx::create_timer`] (an id
    /// that fired or was stopped already is ignored by the server).
    fn stop_timer(self, id: u64) {
        // SAFETY: `self` is a valid context; the timer's data is null, so
        // nothing is handed back through the (null) out-pointer.
        unsafe { rm!(RedisModule_StopTimer(self.raw(), id, ptr::null_mut()) else 0) };
    }

    /// Publishes `message` on `channel`; `cached` is the message as a module
    /// string kept for the module's life, if there is one.
    fn publish(self, channel: &[u8], message: &[u8], cached: Option<RStr<'static>>, sharded: bool) {
        let Some(c) = RString::new(channel) else {
            return;
        };
        let made;
        let m = match cached {
            Some(m) => m,
            None => {
                let Some(owned) = RString::new(message) else {
                    return;
                };
                made = owned;
                made.as_rstr()
            }
        };
        self.publish_strings(c.as_rstr(), m, sharded);
    }

    /// Publishes `message` on `channel`, both module strings the caller
    /// keeps (publishing does not keep them).
    fn publish_strings(self, channel: RStr<'_>, message: RStr<'_>, sharded: bool) {
        // SAFETY: a valid context; both strings are live for the call
        // (RStr's contract).
        unsafe {
            if sharded {
                rm!(RedisModule_PublishMessageShard(self.raw(), channel.as_ptr(), message.as_ptr()) else ERR);
            } else {
                rm!(RedisModule_PublishMessage(self.raw(), channel.as_ptr(), message.as_ptr()) else ERR);
            }
        }
    }
}

impl AnyCtx for Ctx<'_> {}
impl AnyCtx for DetachedCtx {}

fn read_flags(ctx: impl AnyCtx) -> u32 {
    // SAFETY: a valid context: a callback's during it, or the detached one.
    unsafe { rm!(RedisModule_GetContextFlags(ctx.raw()) else 0) as u32 }
}

impl<'cb> Ctx<'cb> {
    /// Enters the scope of one command call on this context (see
    /// [`CallScope`]); the scope ends when the returned guard is dropped.
    #[must_use]
    pub fn call_scope(self) -> CallScope {
        let prev = SCOPE
            .try_with(|s| {
                s.replace(Scoped {
                    ctx: self.raw as usize,
                    flags: None,
                    now: None,
                })
            })
            .unwrap_or(Scoped::NONE);
        CallScope { prev }
    }

    pub fn reply_int(self, v: i64) -> c_int {
        // SAFETY: replying on the running callback's context.
        unsafe { rm!(RedisModule_ReplyWithLongLong(self.raw, v) else ERR) }
    }

    pub fn reply_null(self) -> c_int {
        // SAFETY: as above.
        unsafe { rm!(RedisModule_ReplyWithNull(self.raw) else ERR) }
    }

    pub fn reply_ok(self) -> c_int {
        // SAFETY: as above; the literal is NUL-terminated.
        unsafe { rm!(RedisModule_ReplyWithSimpleString(self.raw, c"OK".as_ptr()) else ERR) }
    }

    /// Replies with an error. `msg` is our own static text, never user data.
    pub fn reply_error(self, msg: &CStr) -> c_int {
        // SAFETY: as above; msg is NUL-terminated and has no CR/LF.
        unsafe { rm!(RedisModule_ReplyWithError(self.raw, msg.as_ptr()) else ERR) }
    }

    /// Replies with binary-safe bulk data (user data always goes this way).
    pub fn reply_bulk(self, b: &[u8]) -> c_int {
        // SAFETY: as above; the buffer is valid for its length.
        unsafe {
            rm!(RedisModule_ReplyWithStringBuffer(self.raw, b.as_ptr().cast::<c_char>(), b.len()) else ERR)
        }
    }

    pub fn reply_str(self, s: &'static str) -> c_int {
        self.reply_bulk(s.as_bytes())
    }

    pub fn reply_array(self, n: usize) -> c_int {
        // SAFETY: as above.
        unsafe { rm!(RedisModule_ReplyWithArray(self.raw, n as c_long) else ERR) }
    }

    /// A map in RESP3, a flat array of 2n elements in RESP2.
    pub fn reply_map(self, n: usize) -> c_int {
        // SAFETY: as above.
        unsafe { rm!(RedisModule_ReplyWithMap(self.raw, n as c_long) else ERR) }
    }

    pub fn wrong_arity(self) -> c_int {
        // SAFETY: as above.
        unsafe { rm!(RedisModule_WrongArity(self.raw) else ERR) }
    }

    /// Private on purpose: the client of a context may be a connection
    /// (blocked-client callbacks; keyspace callbacks on Valkey 8.1), whose
    /// selected db is its user's state. Select through [`Ctx::use_db`].
    fn select_db(self, db: i32) -> bool {
        // SAFETY: selecting a db on the callback's own client.
        unsafe { rm!(RedisModule_SelectDb(self.raw, db) else ERR) == OK }
    }

    /// Selects `db` on this context until the returned scope is dropped,
    /// which selects again the db the context had: whatever client the
    /// context runs on, it ends in the db it started in. None when `db`
    /// cannot be selected. Keys opened in the scope must be dropped first
    /// (declare the scope before them).
    #[must_use]
    pub fn use_db(self, db: i32) -> Option<DbScope<'cb>> {
        let back = self.db();
        if !self.select_db(db) {
            return None;
        }
        Some(DbScope { ctx: self, back })
    }

    /// A scope that selects `back` on this context when dropped (nothing
    /// when None): for callbacks that find their client's db already
    /// changed by the server (see `events`).
    pub fn select_on_drop(self, back: Option<i32>) -> Option<DbScope<'cb>> {
        back.map(|back| DbScope { ctx: self, back })
    }

    /// The id of the context's client (a connection or a temporary client).
    pub fn client_id(self) -> u64 {
        // SAFETY: as above.
        unsafe { rm!(RedisModule_GetClientId(self.raw) else 0) }
    }

    pub fn db(self) -> i32 {
        // SAFETY: as above.
        unsafe { rm!(RedisModule_GetSelectedDb(self.raw) else 0) }
    }

    /// Opens `name` in the selected db, for writing when `write`.
    pub fn open(self, name: RStr<'_>, write: bool) -> Key<'cb> {
        let mode = if write {
            raw::REDISMODULE_READ | raw::REDISMODULE_WRITE
        } else {
            raw::REDISMODULE_READ
        };
        self.open_mode(name, mode)
    }

    /// Opens `name` in the selected db for reading without touching it: its
    /// LRU/LFU and the keyspace hit/miss counts stay as they were (servers
    /// older than NOSTATS ignore that bit), for the module's own bookkeeping, e.g. in
    /// key-event handlers, where RESTORE ... IDLETIME/FREQ has just set them).
    pub fn open_untouched(self, name: RStr<'_>) -> Key<'cb> {
        self.open_mode(
            name,
            raw::REDISMODULE_READ
                | raw::REDISMODULE_OPEN_KEY_NOTOUCH
                | raw::REDISMODULE_OPEN_KEY_NOSTATS,
        )
    }

    fn open_mode(self, name: RStr<'_>, mode: u32) -> Key<'cb> {
        // SAFETY: name is a live module string; the key is closed in Drop.
        let ptr = unsafe {
            rm!(RedisModule_OpenKey(self.raw, name.as_ptr(), mode as c_int) else ptr::null_mut())
        };
        Key {
            ptr,
            _ctx: PhantomData,
        }
    }

    /// Sends `DLOCK.APPLY key payload` to replicas and the AOF: the effect of
    /// a change with absolute times, never a re-execution.
    pub fn replicate_apply(self, name: RStr<'_>, payload: &[u8]) {
        // SAFETY: the format "sb" takes a module string and a (ptr, len)
        // buffer, which is what we pass; all are valid for the call.
        unsafe {
            rm!(RedisModule_Replicate(
                self.raw,
                c"DLOCK.APPLY".as_ptr(),
                c"sb".as_ptr(),
                name.as_ptr(),
                payload.as_ptr().cast::<c_char>(),
                payload.len()
            ) else ERR)
        };
    }

    pub fn replicate_verbatim(self) {
        // SAFETY: called from a command callback.
        unsafe { rm!(RedisModule_ReplicateVerbatim(self.raw) else ERR) };
    }

    /// In a blocked client's ready callback: runs `f` with the key that
    /// was signalled (owned by Redis for the callback), if any.
    pub fn with_ready_key<R>(self, f: impl FnOnce(Option<RStr<'_>>) -> R) -> R {
        // SAFETY: a context's ready key is null or a string Redis keeps for
        // the callback's duration, which `f` cannot outlive (the string's
        // lifetime is that of the closure's argument).
        let key = unsafe {
            RStr::from_raw(rm!(RedisModule_GetBlockedClientReadyKey(self.raw) else ptr::null_mut()))
        };
        f(key)
    }

    pub fn signal_ready(self, name: RStr<'_>) {
        // SAFETY: the key name is valid for the call; the db is the ctx's.
        unsafe { rm!(RedisModule_SignalKeyAsReady(self.raw, name.as_ptr()) else ()) }
    }

    /// Runs `cmd arg` (one C-string argument) through `RedisModule_Call`
    /// and hands its reply's string to `f` (empty when the reply is no
    /// string). None when the call failed.
    pub fn call_for_string<R>(
        self,
        cmd: &CStr,
        arg: &CStr,
        f: impl FnOnce(&[u8]) -> R,
    ) -> Option<R> {
        // SAFETY: "c" takes a NUL-terminated C string; the reply is freed
        // below and its buffer is only read (by `f`) before that.
        unsafe {
            let reply = rm!(RedisModule_Call(self.raw, cmd.as_ptr(), c"c".as_ptr(), arg.as_ptr()) else ptr::null_mut());
            if reply.is_null() {
                return None;
            }
            let mut len: usize = 0;
            let p = rm!(RedisModule_CallReplyStringPtr(reply, &mut len) else ptr::null());
            let text: &[u8] = if p.is_null() {
                &[]
            } else {
                std::slice::from_raw_parts(p.cast::<u8>(), len)
            };
            let r = f(text);
            rm!(RedisModule_FreeCallReply(reply) else ());
            Some(r)
        }
    }
}

/// A client blocked by [`Ctx::block_on_key`], named by the id it was
/// blocked with. The server's handle stays inside `ffi`, in [`LIVE`], from
/// the moment the server returned it until the client's free callback: a
/// `BlockedClient` kept past that (in a registry, a copy) finds no handle,
/// so it can never reach a freed one.
#[derive(Clone, Copy)]
pub struct BlockedClient(u64);

thread_local! {
    /// The handles of the clients this module blocked and the server has
    /// not freed yet, by id (main thread only: blocked clients are made,
    /// unblocked and freed there).
    static LIVE: std::cell::RefCell<std::collections::HashMap<u64, ptr::NonNull<raw::RedisModuleBlockedClient>>> =
        std::cell::RefCell::new(std::collections::HashMap::new());
}

impl BlockedClient {
    /// Unblocks the client with no reply data (its timeout callback
    /// replies); nothing when it was freed already.
    pub fn unblock(&self) {
        let handle = LIVE
            .try_with(|l| l.try_borrow().ok().and_then(|l| l.get(&self.0).copied()))
            .ok()
            .flatten();
        if let Some(bc) = handle {
            // SAFETY: a handle in LIVE was returned by the server and its
            // free callback has not run (it removes the handle first), so
            // it is valid; a null private data. (LIVE's borrow has ended:
            // the server may run our callbacks inside this call.)
            unsafe { rm!(RedisModule_UnblockClient(bc.as_ptr(), ptr::null_mut()) else ERR) };
        }
    }
}

/// What Redis runs for a client blocked by [`Ctx::block_on_key`]: when its
/// key is signalled, when its wait ends (or it is unblocked), when it is
/// freed (with the private data: a `Box<u64>` to give back with
/// [`take_blocked_id`]), and when its connection closes.
pub struct BlockCallbacks {
    pub on_ready: unsafe extern "C" fn(RawCtx, *mut RawStr, c_int) -> c_int,
    pub on_timeout: unsafe extern "C" fn(RawCtx, *mut RawStr, c_int) -> c_int,
    pub on_free: unsafe extern "C" fn(RawCtx, *mut c_void),
    pub on_disconnect: unsafe extern "C" fn(RawCtx, *mut raw::RedisModuleBlockedClient),
}

impl Ctx<'_> {
    /// Blocks the calling connection on the key `name` for up to
    /// `timeout_ms` (0: no limit), with `id` as its private data (read in
    /// the callbacks with [`Ctx::blocked_id`], given back to `on_free` to
    /// free with [`take_blocked_id`]). None when the server did not block
    /// it (then nothing of it remains to free).
    pub fn block_on_key(
        self,
        name: RStr<'_>,
        timeout_ms: u64,
        cbs: &BlockCallbacks,
        id: u64,
    ) -> Option<BlockedClient> {
        let mut keys = [name.as_ptr()];
        let timeout = i64::try_from(timeout_ms).unwrap_or(i64::MAX);
        let private = Box::into_raw(Box::new(id));
        // SAFETY: `self` is the running command's context; the callbacks
        // are extern fns of the shapes the API calls; `keys` holds one live
        // key name for the call (Redis copies it); the private data is a
        // leaked Box<u64> that Redis hands to `on_free` exactly once.
        let bc = unsafe {
            rm!(RedisModule_BlockClientOnKeys(
                self.raw,
                Some(cbs.on_ready),
                Some(cbs.on_timeout),
                Some(cbs.on_free),
                timeout,
                keys.as_mut_ptr(),
                1,
                private.cast::<c_void>()
            ) else ptr::null_mut())
        };
        let Some(handle) = ptr::NonNull::new(bc) else {
            // Blocking failed: nothing will call on_free.
            // SAFETY: Redis did not take the box made above.
            drop(unsafe { Box::from_raw(private) });
            return None;
        };
        // Valid until its free callback, which takes it out again.
        let _ = LIVE.try_with(|l| {
            if let Ok(mut l) = l.try_borrow_mut() {
                l.insert(id, handle);
            }
        });
        // SAFETY: `bc` is the handle just returned, valid until on_free; the
        // callback is an extern fn of the right shape.
        unsafe { rm!(RedisModule_SetDisconnectCallback(bc, Some(cbs.on_disconnect)) else ()) };
        Some(BlockedClient(id))
    }

    /// In a callback of a client blocked by [`Ctx::block_on_key`]: its id
    /// (None for a context without private data).
    pub fn blocked_id(self) -> Option<u64> {
        // SAFETY: every client this module blocks is blocked by
        // `block_on_key`, whose private data is null or a Box<u64> freed
        // only by the free callback (after which no callback of it runs);
        // the value is copied out.
        unsafe {
            rm!(RedisModule_GetBlockedClientPrivateData(self.raw) else ptr::null_mut())
                .cast::<u64>()
                .as_ref()
                .copied()
        }
    }
}

/// The id a free callback is handed (its private data), freeing the box
/// [`Ctx::block_on_key`] made. None for null.
///
/// # Safety
/// `privdata` is the private data Redis passes to the free callback of a
/// client blocked by [`Ctx::block_on_key`], given back once.
pub unsafe fn take_blocked_id(privdata: *mut c_void) -> Option<u64> {
    if privdata.is_null() {
        return None;
    }
    // SAFETY: the Box<u64> leaked by `block_on_key` (the caller's contract).
    let id = *unsafe { Box::from_raw(privdata.cast::<u64>()) };
    // The client is being freed: its handle is no longer valid.
    let _ = LIVE.try_with(|l| {
        if let Ok(mut l) = l.try_borrow_mut() {
            l.remove(&id);
        }
    });
    Some(id)
}

/// See [`Ctx::use_db`].
pub struct DbScope<'cb> {
    ctx: Ctx<'cb>,
    back: i32,
}

impl Drop for DbScope<'_> {
    fn drop(&mut self) {
        if self.ctx.db() != self.back {
            self.ctx.select_db(self.back);
        }
    }
}

/// A registered module type.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct ModuleType(ptr::NonNull<raw::RedisModuleType>);

impl ModuleType {
    /// None for a null pointer (the type is not registered).
    ///
    /// # Safety
    /// `p` must be null or a type registered by this module, alive for the
    /// module's life.
    pub unsafe fn from_raw(p: *mut raw::RedisModuleType) -> Option<ModuleType> {
        ptr::NonNull::new(p).map(ModuleType)
    }
}

/// What an open key holds, as the raw API sees it.
pub enum KeyValue {
    Empty,
    /// A value of the module type asked for (`storage` claims it before it
    /// makes a reference of it).
    Mine(*mut c_void),
    /// Another type, or another module type.
    Other,
}

/// An open key, closed on drop; it borrows the callback's context, so it
/// cannot outlive the callback.
pub struct Key<'cb> {
    ptr: *mut raw::RedisModuleKey,
    _ctx: PhantomData<Ctx<'cb>>,
}

impl Key<'_> {
    /// The value of module type `ty` stored in the key.
    pub fn module_value(&self, ty: ModuleType) -> KeyValue {
        if self.ptr.is_null() {
            return KeyValue::Empty;
        }
        // SAFETY: self.ptr is an open key; these calls only read its type
        // and value pointer.
        unsafe {
            let t = rm!(RedisModule_KeyType(self.ptr) else 0) as isize;
            if t == raw::REDISMODULE_KEYTYPE_EMPTY {
                return KeyValue::Empty;
            }
            if t != raw::REDISMODULE_KEYTYPE_MODULE
                || rm!(RedisModule_ModuleTypeGetType(self.ptr) else ptr::null_mut())
                    != ty.0.as_ptr()
            {
                return KeyValue::Other;
            }
            let v = rm!(RedisModule_ModuleTypeGetValue(self.ptr) else ptr::null_mut());
            if v.is_null() {
                KeyValue::Other
            } else {
                KeyValue::Mine(v)
            }
        }
    }

    /// Stores `value` of module type `ty` in the key (open for writing).
    /// On success Redis owns the value and frees it through the type's free
    /// callback; on failure the caller still owns it.
    ///
    /// # Safety
    /// `value` must be what `ty`'s callbacks expect (and free).
    pub unsafe fn set_module_value(&self, ty: ModuleType, value: *mut c_void) -> bool {
        // SAFETY: the key is open for writing; `value` is what `ty`'s
        // callbacks expect (the caller's contract).
        let status =
            unsafe { rm!(RedisModule_ModuleTypeSetValue(self.ptr, ty.0.as_ptr(), value) else ERR) };
        status == OK
    }

    /// Deletes the key (open for writing) and closes it: the value, freed
    /// by Redis, cannot be reached through this `Key` afterwards.
    pub fn delete(self) {
        // SAFETY: the key is open; DeleteKey fails harmlessly on a key open
        // for reading only.
        unsafe { rm!(RedisModule_DeleteKey(self.ptr) else ERR) };
    }
}

impl Drop for Key<'_> {
    fn drop(&mut self) {
        if !self.ptr.is_null() {
            // SAFETY: opened by Ctx::open, closed once.
            unsafe { rm!(RedisModule_CloseKey(self.ptr) else ()) }
        }
    }
}

/// What one command call reads once: its context's flags and the clock.
#[derive(Clone, Copy)]
struct Scoped {
    /// The context's address; 0: no command scope.
    ctx: usize,
    flags: Option<u32>,
    now: Option<(u64, u64)>,
}

impl Scoped {
    const NONE: Scoped = Scoped {
        ctx: 0,
        flags: None,
        now: None,
    };
}

thread_local! {
    static SCOPE: std::cell::Cell<Scoped> = const { std::cell::Cell::new(Scoped::NONE) };
}

/// The scope of one command call ([`Ctx::call_scope`]): while it lasts, the
/// context's flags are read from Redis once, and [`now`] reads the clock
/// once, so the whole command sees one instant (as Redis' own commands see
/// one cached time). Dropping it restores the scope it was entered in (a
/// command run from a script or `RM_Call` inside another).
pub struct CallScope {
    prev: Scoped,
}

impl Drop for CallScope {
    fn drop(&mut self) {
        let prev = self.prev;
        let _ = SCOPE.try_with(|s| s.set(prev));
    }
}

/// Whether the server forbids propagation now: clients are paused for
/// writes (`CLIENT PAUSE … WRITE|ALL`, or the pause of a `FAILOVER`), so
/// that the dataset and the replication offset stay where they are. The
/// server asserts that nothing is propagated then (Redis 7.0's
/// `areClientsPaused()`, 7.2+ and Valkey's `isPausedActions(
/// PAUSE_ACTION_REPLICA)`, in `propagateNow`) and aborts when a module's
/// timer, blocked-client or event callback replicates during the pause;
/// `RedisModule_AvoidReplicaTraffic` answers exactly that state on every
/// supported server (ending a pause whose time is up first, as the server's
/// own checks do). A server without it (none supported) is taken to say no.
pub fn propagation_paused() -> bool {
    // SAFETY: a function-pointer static filled in by RedisModule_Init; the
    // call takes no argument and reads (and may end) the server's pause.
    unsafe { rm!(RedisModule_AvoidReplicaTraffic() else 0) != 0 }
}

/// Whether a connection with client id `id` exists on this server (a
/// server without `RedisModule_GetClientInfoById` is taken to say yes).
pub fn client_connected(id: u64) -> bool {
    if id == 0 {
        return false;
    }
    // SAFETY: a null info pointer asks only whether the client exists (the
    // API reads nothing through it and writes nothing then).
    let found = unsafe { rm!(RedisModule_GetClientInfoById(std::ptr::null_mut(), id) else OK) };
    found == OK
}

/// Whether the client `id` is in MULTI, and its selected db; None when
/// there is no such client.
pub fn client_multi_db(id: u64) -> Option<(bool, i32)> {
    // SAFETY: an all-zero `RedisModuleClientInfo` is a valid value (plain
    // integers and arrays).
    let mut info: raw::RedisModuleClientInfo = unsafe { std::mem::zeroed() };
    info.version = 1;
    // SAFETY: the info struct is ours, versioned as the API requires, and
    // written only during the call.
    let found = unsafe {
        rm!(RedisModule_GetClientInfoById((&mut info as *mut raw::RedisModuleClientInfo).cast::<c_void>(), id) else ERR)
    };
    (found == OK).then(|| {
        (
            info.flags & u64::from(raw::REDISMODULE_CLIENTINFO_FLAG_MULTI) != 0,
            i32::from(info.db),
        )
    })
}

/// Unix time in milliseconds and microseconds from one clock reading; in a
/// [`CallScope`], the same reading for the whole command.
pub fn now() -> (u64, u64) {
    let scoped = SCOPE
        .try_with(|s| {
            let v = s.get();
            (v.ctx != 0).then_some(v.now)
        })
        .ok()
        .flatten();
    match scoped {
        Some(Some(t)) => t,
        Some(None) => {
            let t = read_clock();
            let _ = SCOPE.try_with(|s| {
                let mut v = s.get();
                v.now = Some(t);
                s.set(v);
            });
            t
        }
        None => read_clock(),
    }
}

/// The server's clock where it offers one (`RedisModule_Microseconds`,
/// Redis 7.2 and Valkey: the same wall clock, read by the server), so a
/// server that simulates time (sim/, the simulator) sets the module's;
/// the system's otherwise (Redis 7.0).
fn read_clock() -> (u64, u64) {
    // SAFETY: a function-pointer static filled in by RedisModule_Init;
    // the call takes no argument and only reads the clock.
    let server = unsafe { raw::RedisModule_Microseconds.map(|f| f()) };
    let us = match server {
        Some(us) if us > 0 => us as u64,
        _ => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_micros() as u64)
            .unwrap_or(0),
    };
    let offset_us = CLOCK_OFFSET_MS
        .load(std::sync::atomic::Ordering::Relaxed)
        .saturating_mul(1000);
    let us = us.saturating_add_signed(offset_us);
    (us / 1000, us)
}

/// The test-only clock offset (`dlock.test-clock-offset-ms`), in ms, added
/// to every wall-clock read of [`now`].
static CLOCK_OFFSET_MS: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);

/// Sets the test-only clock offset, once at load.
pub fn set_clock_offset_ms(ms: i64) {
    CLOCK_OFFSET_MS.store(ms, std::sync::atomic::Ordering::Relaxed);
}

/// Sets this thread's `errno` to 0, so that a module API call that only
/// sets it on failure can be read afterwards (RedisModule_Call).
pub fn clear_errno() {
    // SAFETY: the location of this thread's errno is always valid to write.
    unsafe {
        #[cfg(any(target_os = "macos", target_os = "ios", target_os = "freebsd"))]
        {
            *libc::__error() = 0;
        }
        #[cfg(not(any(target_os = "macos", target_os = "ios", target_os = "freebsd")))]
        {
            *libc::__errno_location() = 0;
        }
    }
}

/// A field of the server's `INFO server` section (e.g. `server_name`,
/// `valkey_version`), None when the server does not list it.
pub fn server_info_field(ctx: Ctx<'_>, field: &CStr) -> Option<String> {
    // SAFETY: the section and field names are NUL-terminated; the info data
    // is freed once, after the field (copied) was read from it.
    unsafe {
        let info = rm!(RedisModule_GetServerInfo(ctx.raw, c"server".as_ptr()) else ptr::null_mut());
        if info.is_null() {
            return None;
        }
        let v = rm!(RedisModule_ServerInfoGetFieldC(info, field.as_ptr()) else ptr::null());
        let out = (!v.is_null()).then(|| CStr::from_ptr(v).to_string_lossy().into_owned());
        rm!(RedisModule_FreeServerInfo(ctx.raw, info) else ());
        out
    }
}

/// The server's family and version (major, minor), from `INFO server`:
/// Valkey names itself in `server_name` and gives `valkey_version` (its
/// `redis_version` stays 7.2.4 for compatibility).
pub fn server_kind(ctx: Ctx<'_>) -> (bool, (u32, u32)) {
    let valkey = server_info_field(ctx, c"server_name").is_some_and(|n| n == "valkey");
    let field = if valkey {
        c"valkey_version"
    } else {
        c"redis_version"
    };
    let version = server_info_field(ctx, field).unwrap_or_default();
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let major = parts.next().unwrap_or(0);
    let minor = parts.next().unwrap_or(0);
    (valkey, (major, minor))
}
