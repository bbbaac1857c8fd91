//! Callbacks without `unsafe` above the FFI. A service names each of its
//! callbacks as a type implementing one of these traits (a command, a timer,
//! a next-turn callback, the four callbacks of a blocked client, a keyspace
//! or server event, a command filter, the INFO section); the generic
//! `extern "C"` trampolines here receive what Redis passes, turn the raw
//! context into a [`Ctx<'cb>`](Ctx) for the call only (through `Ctx::enter`,
//! which hands it to a closure generic over `'cb`, so neither the context
//! nor what borrows it can outlive the callback), turn a blocked client's
//! private data into its waiter id, and call the service's safe function.
//! Static dispatch: each trampoline is monomorphised for its type, so a
//! callback costs what the hand-written `extern "C" fn` did.

use super::{
    rm, take_blocked_id, Args, BlockCallbacks, Ctx, DetachedCtx, RawCtx, RawStr, TimerFn, ERR, OK,
};
use redis_module::raw;
use std::ffi::{c_int, c_void};
use std::ptr;

/// A module timer's callback.
pub trait Timer {
    /// The timer fired; `ctx` is valid for this call only.
    fn fire(ctx: Ctx<'_>);
}

unsafe extern "C" fn timer_trampoline<T: Timer>(ctx: RawCtx, _data: *mut c_void) {
    // SAFETY: Redis passes a timer callback a context valid for the call;
    // `Timer::fire` gets it for the call only. The data pointer is null
    // (`AnyCtx::create_timer` makes timers without data) and is not read.
    unsafe { Ctx::enter(ctx, T::fire) };
}

/// The timer callback that runs `T::fire`, for [`AnyCtx::create_timer`].
pub fn timer_fn<T: Timer>() -> TimerFn {
    timer_trampoline::<T>
}

/// A callback run once in the event loop's next turn, without a context.
pub trait NextTurn {
    fn run();
}

unsafe extern "C" fn next_turn_trampoline<T: NextTurn>(_data: *mut c_void) {
    T::run();
}

/// Has `T::run` called once in the event loop's next turn. False when the
/// server has no such API (Redis < 7.0) or did not take it.
pub fn next_turn<T: NextTurn>() -> bool {
    // SAFETY: the callback is an extern fn of the shape the API calls,
    // which ignores its data; the data pointer is null, so nothing is
    // owned by the event loop or needs freeing.
    let added = unsafe {
        rm!(RedisModule_EventLoopAddOneShot(Some(next_turn_trampoline::<T>), ptr::null_mut()) else ERR)
    };
    added == OK
}

impl Ctx<'_> {
    /// A new detached context of this module, made from this one. It is
    /// never freed, so it stays valid for the module's life. None when the
    /// server made none.
    pub fn new_detached(self) -> Option<DetachedCtx> {
        // SAFETY: `self` is a valid context (the callback's, during it).
        let p = unsafe {
            rm!(RedisModule_GetDetachedThreadSafeContext(self.as_raw()) else ptr::null_mut())
        };
        // A detached context just made, never freed by this module: valid
        // for the module's life (used on the main thread only: `DetachedCtx`
        // is neither Send nor Sync).
        ptr::NonNull::new(p).map(DetachedCtx)
    }
}

/// The callbacks of a client blocked with [`Ctx::block_on_key`]; each
/// `ctx` is the blocked client's, valid for that call only.
pub trait Blocked {
    /// The key was signalled: [`OK`] when the client was served (replied),
    /// [`ERR`] to keep it blocked.
    fn ready(ctx: Ctx<'_>) -> c_int;
    /// The wait ended (or the client was unblocked): reply.
    fn timeout(ctx: Ctx<'_>) -> c_int;
    /// The blocked client is freed; `id` is the waiter id it was blocked
    /// with (its private data, freed here).
    fn free(id: u64);
    /// The blocked client's connection closed.
    fn disconnect(ctx: Ctx<'_>);
}

unsafe extern "C" fn ready_trampoline<B: Blocked>(
    ctx: RawCtx,
    _argv: *mut RawStr,
    _argc: c_int,
) -> c_int {
    // SAFETY: Redis passes the blocked client's context, valid for the
    // call; `Blocked::ready` gets it for the call only. The arguments are
    // not read.
    unsafe { Ctx::enter(ctx, B::ready) }
}

unsafe extern "C" fn timeout_trampoline<B: Blocked>(
    ctx: RawCtx,
    _argv: *mut RawStr,
    _argc: c_int,
) -> c_int {
    // SAFETY: as for `ready_trampoline`.
    unsafe { Ctx::enter(ctx, B::timeout) }
}

unsafe extern "C" fn free_trampoline<B: Blocked>(_ctx: RawCtx, privdata: *mut c_void) {
    // SAFETY: Redis hands the free callback of a client blocked by
    // `Ctx::block_on_key` (the only way `block_callbacks` are used) the
    // private data that function set, once.
    if let Some(id) = unsafe { take_blocked_id(privdata) } {
        B::free(id);
    }
}

unsafe extern "C" fn disconnect_trampoline<B: Blocked>(
    ctx: RawCtx,
    _bc: *mut raw::RedisModuleBlockedClient,
) {
    // SAFETY: Redis passes the blocked client's context, valid for the
    // call; `Blocked::disconnect` gets it for the call only.
    unsafe { Ctx::enter(ctx, B::disconnect) };
}

/// The four callbacks of `B`, for [`Ctx::block_on_key`].
pub fn block_callbacks<B: Blocked>() -> BlockCallbacks {
    BlockCallbacks {
        on_ready: ready_trampoline::<B>,
        on_timeout: timeout_trampoline::<B>,
        on_free: free_trampoline::<B>,
        on_disconnect: disconnect_trampoline::<B>,
    }
}

/// A command's entry point as Redis calls it.
pub type Handler = unsafe extern "C" fn(RawCtx, *mut RawStr, c_int) -> c_int;

/// A command of this module: what its entry point runs.
pub trait Command {
    /// Runs the command; `ctx` and `args` are valid for this call only
    /// (`args` borrows for it, and a `Ctx` must not be kept).
    fn run(ctx: Ctx<'_>, args: Args<'_>) -> c_int;
}

unsafe extern "C" fn command_trampoline<C: Command>(
    ctx: RawCtx,
    argv: *mut RawStr,
    argc: c_int,
) -> c_int {
    // SAFETY: Redis passes the running command's `argc` arguments, valid
    // for this call, which `Command::run` is given for the call only.
    let args = unsafe { Args::from_raw(argv, argc) };
    // SAFETY: Redis passes the running command's context, valid for this
    // call; `Command::run` gets it for the call only.
    unsafe { Ctx::enter(ctx, |ctx| C::run(ctx, args)) }
}

/// The entry point that runs `C::run`, for `RedisModule_CreateCommand`.
pub const fn handler<C: Command>() -> Handler {
    command_trampoline::<C>
}

/// A server event's subscriber (`RedisModule_SubscribeToServerEvent`):
/// `ID` is the event, `on` runs on the main thread for each of its
/// subevents with the context and the event's data, both valid for that
/// call only.
pub trait ServerEvent {
    const ID: u64;
    fn on(ctx: Ctx<'_>, sub: u64, data: EventData<'_>);
}

/// A server event's data, read only through the accessors below (each
/// knows the layout of one event's data); valid for the callback only.
pub struct EventData<'a> {
    /// The event's id: each accessor reads the data only for its event.
    id: u64,
    p: *mut c_void,
    _call: std::marker::PhantomData<&'a ()>,
}

unsafe extern "C" fn server_event_trampoline<E: ServerEvent>(
    ctx: RawCtx,
    event: raw::RedisModuleEvent,
    sub: u64,
    data: *mut c_void,
) {
    // SAFETY: the server passes an event callback a context valid for the
    // call; `ServerEvent::on` gets it, and the data, for the call only
    // (`EventData`'s lifetime is that of this frame).
    unsafe {
        Ctx::enter(ctx, |ctx| {
            E::on(
                ctx,
                sub,
                EventData {
                    id: event.id,
                    p: data,
                    _call: std::marker::PhantomData,
                },
            )
        })
    };
}

/// Subscribes `E` to its event (data version 1); false when the server
/// refused (or has no such event).
pub fn subscribe_server_event<E: ServerEvent>(ctx: Ctx<'_>) -> bool {
    let ev = raw::RedisModuleEvent {
        id: E::ID,
        dataver: 1,
    };
    // SAFETY: `ctx` is a valid context (the callback's, during it); the callback
    // is an extern fn of the shape the API calls.
    let rc = unsafe {
        rm!(RedisModule_SubscribeToServerEvent(ctx.as_raw(), ev, Some(server_event_trampoline::<E>)) else 1)
    };
    rc == 0
}

/// `VALKEYMODULE_EVENT_ATOMIC_SLOT_MIGRATION` (Valkey 9.0 and later).
const EVENT_ATOMIC_SLOT_MIGRATION: u64 = 19;

impl EventData<'_> {
    /// FLUSHDB's db (-1: FLUSHALL); None for another event.
    pub fn flush_db(&self) -> Option<i32> {
        if self.id != raw::REDISMODULE_EVENT_FLUSHDB {
            return None;
        }
        // SAFETY: for this event the server passes null or a
        // `RedisModuleFlushInfo`, live for the callback, which `self`
        // cannot outlive.
        unsafe { self.p.cast::<raw::RedisModuleFlushInfo>().as_ref() }.map(|f| f.dbnum)
    }

    /// SWAPDB's two dbs; None for another event.
    pub fn swapped_dbs(&self) -> Option<(i32, i32)> {
        if self.id != raw::REDISMODULE_EVENT_SWAPDB {
            return None;
        }
        // SAFETY: for this event the server passes null or a
        // `RedisModuleSwapDbInfo`, live for the callback.
        unsafe { self.p.cast::<raw::RedisModuleSwapDbInfo>().as_ref() }
            .map(|i| (i.dbnum_first, i.dbnum_second))
    }

    /// A client-change event's client id; None for another event.
    pub fn client_id(&self) -> Option<u64> {
        if self.id != raw::REDISMODULE_EVENT_CLIENT_CHANGE {
            return None;
        }
        // SAFETY: for this event the server passes null or a
        // `RedisModuleClientInfo`, live for the callback.
        unsafe { self.p.cast::<raw::RedisModuleClientInfo>().as_ref() }.map(|c| c.id)
    }
}

/// A keyspace-event subscriber (`RedisModule_SubscribeToKeyspaceEvents`):
/// `TYPES` are the event classes; `on` runs with the context, the event's
/// name and the key's name, all valid for that call only.
pub trait KeyspaceEvent {
    const TYPES: c_int;
    fn on(ctx: Ctx<'_>, event: &[u8], key: &[u8]);
}

unsafe extern "C" fn keyspace_trampoline<K: KeyspaceEvent>(
    ctx: RawCtx,
    _type: c_int,
    event: *const std::ffi::c_char,
    key: RawStr,
) -> c_int {
    let ev: &[u8] = if event.is_null() {
        &[]
    } else {
        // SAFETY: a non-null event name is a NUL-terminated string the
        // server keeps for the call; the slice does not outlive this frame.
        unsafe { std::ffi::CStr::from_ptr(event) }.to_bytes()
    };
    // SAFETY: null or a key name the server keeps for the call.
    let key = unsafe { super::bytes(key) };
    // SAFETY: the server passes a context valid for the call; `on` gets it
    // for the call only.
    unsafe { Ctx::enter(ctx, |ctx| K::on(ctx, ev, key)) };
    0
}

/// Subscribes `K` to its keyspace events; false when the server refused.
pub fn subscribe_keyspace_events<K: KeyspaceEvent>(ctx: Ctx<'_>) -> bool {
    // SAFETY: a valid context (the load callback's); the callback is an
    // extern fn of the shape the API calls.
    let rc = unsafe {
        rm!(RedisModule_SubscribeToKeyspaceEvents(ctx.as_raw(), K::TYPES, Some(keyspace_trampoline::<K>)) else 1)
    };
    rc == 0
}

/// A command filter (`RedisModule_RegisterCommandFilter`): `filter` sees
/// each command's arguments before it runs (reading them only).
pub trait CommandFilter {
    fn filter(f: FilterCtx<'_>);
}

/// The arguments of one filtered command, valid for the filter call.
#[derive(Clone, Copy)]
pub struct FilterCtx<'a> {
    p: std::ptr::NonNull<raw::RedisModuleCommandFilterCtx>,
    _call: std::marker::PhantomData<&'a ()>,
}

impl<'a> FilterCtx<'a> {
    /// Argument `i` (the command name is 0); empty when absent.
    pub fn arg(self, i: c_int) -> &'a [u8] {
        // SAFETY: the live filter context of this call; an argument is a
        // module string the server keeps for the call (the filter changes
        // none), and an index out of range gives null (empty).
        unsafe {
            super::bytes(
                rm!(RedisModule_CommandFilterArgGet(self.p.as_ptr(), i) else ptr::null_mut()),
            )
        }
    }

    pub fn args_count(self) -> c_int {
        // SAFETY: the live filter context of this call.
        unsafe { rm!(RedisModule_CommandFilterArgsCount(self.p.as_ptr()) else 0) }
    }

    /// The id of the client that sent the command (0 when unknown).
    pub fn client_id(self) -> u64 {
        // SAFETY: the live filter context of this call.
        unsafe { rm!(RedisModule_CommandFilterGetClientId(self.p.as_ptr()) else 0) }
    }
}

unsafe extern "C" fn filter_trampoline<F: CommandFilter>(
    fctx: *mut raw::RedisModuleCommandFilterCtx,
) {
    // The server passes a filter context valid for the call; `filter` gets
    // it for the call only (`FilterCtx`'s lifetime is this frame's).
    if let Some(p) = std::ptr::NonNull::new(fctx) {
        F::filter(FilterCtx {
            p,
            _call: std::marker::PhantomData,
        });
    }
}

/// Whether the server's command filters can name the client and look it up
/// (Redis 7.2+, Valkey).
pub fn filters_know_the_client() -> bool {
    // SAFETY: reading function-pointer statics filled in by
    // RedisModule_Init.
    unsafe {
        { raw::RedisModule_CommandFilterGetClientId }.is_some() && {
            raw::RedisModule_GetClientInfoById
        }
        .is_some()
    }
}

/// Registers `F` as a command filter that does not see the module's own
/// calls (`NOSELF`).
pub fn register_command_filter<F: CommandFilter>(ctx: Ctx<'_>) {
    // SAFETY: a valid context (the load callback's); the callback is an
    // extern fn of the shape the API calls.
    unsafe {
        rm!(RedisModule_RegisterCommandFilter(
            ctx.as_raw(),
            Some(filter_trampoline::<F>),
            raw::REDISMODULE_CMDFILTER_NOSELF as c_int
        ) else ptr::null_mut())
    };
}

/// `ValkeyModuleSlotRange`: a range of slots, both ends inclusive.
#[repr(C)]
struct SlotRange {
    start: c_int,
    end: c_int,
}

/// `ValkeyModuleAtomicSlotMigrationInfo` (version 1), the data of Valkey
/// 9's atomic-slot-migration event.
#[repr(C)]
struct MigrationInfo {
    version: u64,
    job_name: [std::ffi::c_char; 41],
    slot_ranges: *const SlotRange,
    num_slot_ranges: u32,
}

impl EventData<'_> {
    /// The slot ranges of an atomic-slot-migration event's data (empty
    /// when absent). Only for that event: its data is a `MigrationInfo`.
    pub fn migration_slot_ranges(&self) -> Vec<(u16, u16)> {
        if self.id != EVENT_ATOMIC_SLOT_MIGRATION {
            return Vec::new();
        }
        // SAFETY: for this event the server passes null or a
        // `MigrationInfo`, live for the callback, which `self` cannot
        // outlive.
        let Some(info) = (unsafe { self.p.cast::<MigrationInfo>().as_ref() }) else {
            return Vec::new();
        };
        if info.slot_ranges.is_null() {
            return Vec::new();
        }
        // SAFETY: the server passes `num_slot_ranges` ranges at
        // `slot_ranges`, live for the callback.
        let rs =
            unsafe { std::slice::from_raw_parts(info.slot_ranges, info.num_slot_ranges as usize) };
        rs.iter()
            .filter_map(|r| Some((u16::try_from(r.start).ok()?, u16::try_from(r.end).ok()?)))
            .collect()
    }
}

/// The module's `INFO` section writer (`RedisModule_RegisterInfoFunc`).
pub trait InfoFunc {
    /// Adds the module's section and fields through `info`, valid for this
    /// call only.
    fn info(info: InfoCtx<'_>);
}

/// The info context of one `INFO` call.
#[derive(Clone, Copy)]
pub struct InfoCtx<'a> {
    p: std::ptr::NonNull<raw::RedisModuleInfoCtx>,
    _call: std::marker::PhantomData<&'a ()>,
}

unsafe extern "C" fn info_trampoline<I: InfoFunc>(
    ictx: *mut raw::RedisModuleInfoCtx,
    _for_crash_report: c_int,
) {
    // The server passes an info context valid for the call; `InfoFunc::info`
    // gets it for the call only (`InfoCtx`'s lifetime is this frame's).
    if let Some(p) = std::ptr::NonNull::new(ictx) {
        I::info(InfoCtx {
            p,
            _call: std::marker::PhantomData,
        });
    }
}

impl InfoCtx<'_> {
    /// Starts the module's own section (named as the module).
    pub fn add_section(self) {
        // SAFETY: the live info context of this call; a null name asks for
        // the module's own section.
        unsafe { rm!(RedisModule_InfoAddSection(self.p.as_ptr(), ptr::null_mut()) else 1) };
    }

    /// Adds the field `name: value` (a name with a NUL is skipped).
    pub fn add_u64(self, name: &str, value: u64) {
        if let Ok(n) = std::ffi::CString::new(name) {
            // SAFETY: the live info context; the name is NUL-terminated and
            // lives through the call.
            unsafe {
                rm!(RedisModule_InfoAddFieldULongLong(self.p.as_ptr(), n.as_ptr(), value) else 1)
            };
        }
    }

    /// Adds the field `name: value` (skipped when either has a NUL).
    pub fn add_str(self, name: &str, value: &str) {
        if let (Ok(n), Ok(v)) = (std::ffi::CString::new(name), std::ffi::CString::new(value)) {
            // SAFETY: the live info context; both strings are NUL-terminated
            // and live through the call (the server copies the value).
            unsafe {
                rm!(RedisModule_InfoAddFieldCString(self.p.as_ptr(), n.as_ptr(), v.as_ptr().cast_mut()) else 1)
            };
        }
    }
}

impl Ctx<'_> {
    /// Registers `I` as the module's `INFO` section writer (at load).
    pub fn register_info_func<I: InfoFunc>(self) -> bool {
        // SAFETY: a valid context (the load callback's); the callback is an
        // extern fn of the shape the API calls.
        unsafe {
            rm!(RedisModule_RegisterInfoFunc(self.as_raw(), Some(info_trampoline::<I>)) else ERR)
                == OK
        }
    }

    /// Sets the module's options (`RedisModule_SetModuleOptions`, at load).
    pub fn set_module_options(self, options: c_int) {
        // SAFETY: a valid context (the load callback's); the options are
        // plain bits.
        unsafe { rm!(RedisModule_SetModuleOptions(self.as_raw(), options) else ()) };
    }
}

/// Runs the module's load with its context: `ctx` is the context the
/// server passed to `RedisModule_OnLoad` (the `redis_module!` macro's
/// `init` gets it), valid while `f` runs.
pub fn on_load<R>(ctx: &redis_module::Context, f: impl for<'cb> FnOnce(Ctx<'cb>) -> R) -> R {
    // SAFETY: a `redis_module::Context` handed to `init` wraps the OnLoad
    // context, valid for the whole of `init`, which outlives this call; `f`
    // is generic over the lifetime, so nothing keeps the context.
    unsafe { Ctx::enter(ctx.ctx, f) }
}
