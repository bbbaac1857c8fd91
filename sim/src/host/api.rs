//! The module API functions of the simulated server, and `GetApi`, which
//! hands them to `RedisModule_Init` by name. Each is checked at compile
//! time against the signature `redis_module::raw` declares for its name
//! ([`install_check`]), so a mismatch cannot reach the module.

use super::{
    enter, fresh_id, leave, rdb, server_of, with, Blocked, Entry, FCtx, FStr, Reply, Timer, Value,
};
use redis_module::raw;
use std::ffi::{c_char, c_int, c_long, c_longlong, c_void, CStr};
use std::ptr;

type Ctx = *mut raw::RedisModuleCtx;
type Str = *mut raw::RedisModuleString;

const OK: c_int = raw::REDISMODULE_OK as c_int;
const ERR: c_int = raw::REDISMODULE_ERR as c_int;

extern "C" {
    fn sim_Replicate(ctx: *mut c_void, cmd: *const c_char, fmt: *const c_char, ...) -> c_int;
    fn sim_Call(ctx: *mut c_void, cmd: *const c_char, fmt: *const c_char, ...) -> *mut c_void;
    fn sim_EmitAOF(io: *mut c_void, cmd: *const c_char, fmt: *const c_char, ...);
    fn sim_Log(ctx: *mut c_void, level: *const c_char, fmt: *const c_char, ...);
    fn sim_LogIOError(io: *mut c_void, level: *const c_char, fmt: *const c_char, ...);
}

/// The arguments the C shim unpacked (csrc/variadic.c's `sim_args`).
#[repr(C)]
pub struct SimArgs {
    n: c_int,
    ptr: [*const c_char; 64],
    len: [usize; 64],
    num: [[c_char; 24]; 64],
}

impl SimArgs {
    pub(super) fn list(&self) -> Vec<Vec<u8>> {
        (0..self.n.clamp(0, 64) as usize)
            .map(|i| {
                if self.ptr[i].is_null() {
                    Vec::new()
                } else {
                    // SAFETY: the shim stored a pointer and length of the
                    // caller's argument, alive for the call.
                    unsafe { std::slice::from_raw_parts(self.ptr[i].cast::<u8>(), self.len[i]) }
                        .to_vec()
                }
            })
            .collect()
    }
}

/// The context `unlink2` gets: the key's name and db.
#[repr(C)]
pub struct OptCtx {
    pub key: Str,
    pub db: c_int,
}

/// The context an info function gets.
pub struct InfoCtx {
    pub fields: Vec<(String, String)>,
}

/// An open key.
struct FKey {
    server: usize,
    db: i32,
    name: Vec<u8>,
    write: bool,
}

/// The [`FCtx`] behind a context.
///
/// # Safety
/// `ctx` is null or a context the host made (an `FCtx`) for the callback
/// that is running, and the host holds no reference to it meanwhile: what
/// every API entry below is given by the module.
unsafe fn fctx<'a>(ctx: Ctx) -> Option<&'a mut FCtx> {
    // SAFETY: the caller's contract.
    unsafe { ctx.cast::<FCtx>().as_mut() }
}

fn cstr(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: the module passes NUL-terminated names.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

// ---- allocation --------------------------------------------------------

pub(super) unsafe extern "C" fn alloc(bytes: usize) -> *mut c_void {
    // SAFETY: plain malloc; the size is counted for the memory invariant.
    let p = unsafe { libc::malloc(bytes.max(1)) };
    count(p, 1);
    p
}

unsafe extern "C" fn calloc(n: usize, size: usize) -> *mut c_void {
    // SAFETY: plain calloc.
    let p = unsafe { libc::calloc(n.max(1), size.max(1)) };
    count(p, 1);
    p
}

unsafe extern "C" fn realloc(p: *mut c_void, bytes: usize) -> *mut c_void {
    count(p, -1);
    // SAFETY: p came from these functions (or is null).
    let q = unsafe { libc::realloc(p, bytes.max(1)) };
    count(q, 1);
    q
}

unsafe extern "C" fn free(p: *mut c_void) {
    count(p, -1);
    // SAFETY: p came from these functions (or is null).
    unsafe { libc::free(p) };
}

unsafe extern "C" fn strdup(s: *const c_char) -> *mut c_char {
    // SAFETY: a C string from the module.
    let n = unsafe { libc::strlen(s) } + 1;
    // SAFETY: as alloc.
    let p = unsafe { alloc(n) }.cast::<c_char>();
    // SAFETY: both hold n bytes.
    unsafe { ptr::copy_nonoverlapping(s, p, n) };
    p
}

fn count(p: *mut c_void, sign: i64) {
    if p.is_null() {
        return;
    }
    // SAFETY: p is a live malloc'd block.
    let n = unsafe { libc::malloc_usable_size(p) } as i64;
    // try_with: the thread's state may be gone at exit.
    let _ = super::HOST.try_with(|h| {
        if let Ok(mut h) = h.try_borrow_mut() {
            h.module_bytes += sign * n;
        }
    });
}

// ---- init --------------------------------------------------------------

unsafe extern "C" fn set_module_attribs(_: Ctx, _: *const c_char, _: c_int, _: c_int) {}

unsafe extern "C" fn create_data_type(
    ctx: Ctx,
    _name: *const c_char,
    encver: c_int,
    methods: *mut raw::RedisModuleTypeMethods,
) -> *mut raw::RedisModuleType {
    let s = server_of(ctx);
    // SAFETY: the module passes its methods struct, read once here.
    let m = unsafe { methods.as_ref() }.copied();
    with(|h| {
        h.servers[s].methods = m;
        h.servers[s].encver = encver;
    });
    type_ptr(s)
}

/// The module type's handle: any stable non-null pointer.
fn type_ptr(server: usize) -> *mut raw::RedisModuleType {
    (0x1000 + server * 16) as *mut raw::RedisModuleType
}

unsafe extern "C" fn register_numeric_config(
    ctx: Ctx,
    name: *const c_char,
    default: c_longlong,
    _flags: u32,
    _min: c_longlong,
    _max: c_longlong,
    _get: raw::RedisModuleConfigGetNumericFunc,
    set: raw::RedisModuleConfigSetNumericFunc,
    _apply: raw::RedisModuleConfigApplyFunc,
    privdata: *mut c_void,
) -> c_int {
    let s = server_of(ctx);
    let n = cstr(name);
    with(|h| h.servers[s].num_configs.push((n, default, set, privdata)));
    OK
}

unsafe extern "C" fn register_bool_config(
    ctx: Ctx,
    name: *const c_char,
    default: c_int,
    _flags: u32,
    _get: raw::RedisModuleConfigGetBoolFunc,
    set: raw::RedisModuleConfigSetBoolFunc,
    _apply: raw::RedisModuleConfigApplyFunc,
    privdata: *mut c_void,
) -> c_int {
    let s = server_of(ctx);
    let n = cstr(name);
    with(|h| {
        h.servers[s]
            .bool_configs
            .push((n, default != 0, set, privdata))
    });
    OK
}

/// Applies every registered config's default, as the server does.
unsafe extern "C" fn load_configs(ctx: Ctx) -> c_int {
    let s = server_of(ctx);
    let (nums, bools) = with(|h| {
        let sv = &h.servers[s];
        (sv.num_configs.clone(), sv.bool_configs.clone())
    });
    for (name, v, set, p) in nums {
        if let (Some(set), Ok(c)) = (set, std::ffi::CString::new(name)) {
            let mut err: Str = ptr::null_mut();
            // SAFETY: the module's setter with its private data.
            unsafe { set(c.as_ptr(), v, p, &mut err) };
        }
    }
    for (name, v, set, p) in bools {
        if let (Some(set), Ok(c)) = (set, std::ffi::CString::new(name)) {
            let mut err: Str = ptr::null_mut();
            // SAFETY: as above.
            unsafe { set(c.as_ptr(), c_int::from(v), p, &mut err) };
        }
    }
    OK
}

unsafe extern "C" fn create_command(
    ctx: Ctx,
    name: *const c_char,
    func: raw::RedisModuleCmdFunc,
    flags: *const c_char,
    first: c_int,
    _last: c_int,
    _step: c_int,
) -> c_int {
    let s = server_of(ctx);
    let n = cstr(name).to_lowercase();
    let flags = cstr(flags);
    with(|h| {
        let sv = &mut h.servers[s];
        sv.commands.insert(n.clone(), func);
        sv.cmd_info.insert(n, (flags, first));
    });
    OK
}

unsafe extern "C" fn get_command(ctx: Ctx, name: *const c_char) -> *mut raw::RedisModuleCommand {
    let s = server_of(ctx);
    let n = cstr(name).to_lowercase();
    let known = with(|h| h.servers[s].commands.contains_key(&n));
    if known {
        // An opaque handle: only given back to SetCommandInfo.
        0x2000 as *mut raw::RedisModuleCommand
    } else {
        ptr::null_mut()
    }
}

unsafe extern "C" fn set_command_info(
    _: *mut raw::RedisModuleCommand,
    _: *const raw::RedisModuleCommandInfo,
) -> c_int {
    OK
}

unsafe extern "C" fn subscribe_keyspace(
    ctx: Ctx,
    types: c_int,
    cb: raw::RedisModuleNotificationFunc,
) -> c_int {
    let s = server_of(ctx);
    with(|h| h.servers[s].keyspace_subs.push((types, cb)));
    OK
}

unsafe extern "C" fn subscribe_server_event(
    ctx: Ctx,
    ev: raw::RedisModuleEvent,
    cb: raw::RedisModuleEventCallback,
) -> c_int {
    let s = server_of(ctx);
    with(|h| h.servers[s].event_subs.push((ev.id, cb)));
    OK
}

unsafe extern "C" fn register_info_func(ctx: Ctx, cb: raw::RedisModuleInfoFunc) -> c_int {
    let s = server_of(ctx);
    with(|h| h.servers[s].info_fn = cb);
    OK
}

unsafe extern "C" fn set_module_options(ctx: Ctx, options: c_int) {
    let s = server_of(ctx);
    with(|h| h.servers[s].options = options);
}

unsafe extern "C" fn detached_ctx(ctx: Ctx) -> Ctx {
    let s = server_of(ctx);
    let temp = with(|h| h.servers[s].temp_client);
    // Kept for the module's life (never freed: one per server).
    Box::into_raw(FCtx::new(s, temp, 0)).cast()
}

unsafe extern "C" fn free_thread_safe_ctx(_: Ctx) {}

unsafe extern "C" fn get_server_info(
    _: Ctx,
    _: *const c_char,
) -> *mut raw::RedisModuleServerInfoData {
    // An opaque handle: ServerInfoGetFieldC answers from a fixed table.
    0x3000 as *mut raw::RedisModuleServerInfoData
}

unsafe extern "C" fn server_info_field_c(
    _: *mut raw::RedisModuleServerInfoData,
    field: *const c_char,
) -> *const c_char {
    let family = with(|h| h.servers[h.cur].family);
    match cstr(field).as_str() {
        "redis_version" => family.redis_version().as_ptr(),
        "server_name" if family.is_valkey() => c"valkey".as_ptr(),
        "valkey_version" => family.valkey_version().map_or(ptr::null(), CStr::as_ptr),
        _ => ptr::null(),
    }
}

/// `checkClientPauseTimeoutAndReturnIfPaused`: whether the running server
/// is paused (its pause ended when its time is over).
unsafe extern "C" fn avoid_replica_traffic() -> c_int {
    let cur = with(|h| h.cur);
    c_int::from(super::update_pause(cur))
}

unsafe extern "C" fn free_server_info(_: Ctx, _: *mut raw::RedisModuleServerInfoData) {}

// ---- strings -----------------------------------------------------------

unsafe extern "C" fn string_ptr_len(
    s: *const raw::RedisModuleString,
    len: *mut usize,
) -> *const c_char {
    // SAFETY: every string the module has came from the host (FStr).
    let b = unsafe { FStr::bytes(s) };
    if !len.is_null() {
        // SAFETY: the module passes a place for the length.
        unsafe { *len = b.len() };
    }
    b.as_ptr().cast()
}

#[no_mangle]
unsafe extern "C" fn sim_string_ptr_len(s: *mut c_void, len: *mut usize) -> *const c_char {
    // SAFETY: as string_ptr_len.
    unsafe { string_ptr_len(s.cast(), len) }
}

unsafe extern "C" fn create_string(_: Ctx, p: *const c_char, len: usize) -> Str {
    let b = if p.is_null() {
        &[][..]
    } else {
        // SAFETY: the module passes len bytes at p.
        unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) }
    };
    FStr::make(b)
}

unsafe extern "C" fn retain_string(_: Ctx, s: Str) {
    // SAFETY: a live host string.
    unsafe { FStr::retain(s) };
}

unsafe extern "C" fn free_string(_: Ctx, s: Str) {
    // SAFETY: a string the host made, freed once by the module.
    unsafe { FStr::free(s) };
}

// ---- replies -----------------------------------------------------------

unsafe extern "C" fn reply_long_long(ctx: Ctx, v: c_longlong) -> c_int {
    if let Some(c) = fctx(ctx) {
        c.push(Reply::Int(v));
    }
    OK
}

unsafe extern "C" fn reply_null(ctx: Ctx) -> c_int {
    if let Some(c) = fctx(ctx) {
        c.push(Reply::Null);
    }
    OK
}

unsafe extern "C" fn reply_error(ctx: Ctx, e: *const c_char) -> c_int {
    if let Some(c) = fctx(ctx) {
        c.push(Reply::Err(cstr(e)));
    }
    OK
}

unsafe extern "C" fn reply_string_buffer(ctx: Ctx, p: *const c_char, len: usize) -> c_int {
    let b = if p.is_null() {
        Vec::new()
    } else {
        // SAFETY: len bytes at p.
        unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) }.to_vec()
    };
    if let Some(c) = fctx(ctx) {
        c.push(Reply::Bulk(b));
    }
    OK
}

unsafe extern "C" fn reply_simple_string(ctx: Ctx, s: *const c_char) -> c_int {
    if let Some(c) = fctx(ctx) {
        c.push(Reply::Simple(cstr(s)));
    }
    OK
}

unsafe extern "C" fn reply_array(ctx: Ctx, n: c_long) -> c_int {
    if let Some(c) = fctx(ctx) {
        c.open_aggregate(n.max(0) as usize);
    }
    OK
}

unsafe extern "C" fn reply_map(ctx: Ctx, n: c_long) -> c_int {
    if let Some(c) = fctx(ctx) {
        c.open_aggregate(2 * n.max(0) as usize);
    }
    OK
}

unsafe extern "C" fn wrong_arity(ctx: Ctx) -> c_int {
    if let Some(c) = fctx(ctx) {
        c.push(Reply::Err("ERR wrong number of arguments".into()));
    }
    OK
}

// ---- context -----------------------------------------------------------

unsafe extern "C" fn get_context_flags(ctx: Ctx) -> c_int {
    let Some(c) = fctx(ctx) else { return 0 };
    let (replica, loading, oom, cluster, aof) = with(|h| {
        let s = &h.servers[c.server];
        (s.replica, s.loading, s.oom, s.cluster, s.aof)
    });
    let mut f = if replica {
        raw::REDISMODULE_CTX_FLAGS_SLAVE | raw::REDISMODULE_CTX_FLAGS_READONLY
    } else {
        raw::REDISMODULE_CTX_FLAGS_MASTER
    };
    if loading {
        f |= raw::REDISMODULE_CTX_FLAGS_LOADING;
    }
    if oom {
        f |= raw::REDISMODULE_CTX_FLAGS_OOM | raw::REDISMODULE_CTX_FLAGS_MAXMEMORY;
    }
    if cluster {
        f |= raw::REDISMODULE_CTX_FLAGS_CLUSTER;
    }
    if aof {
        f |= raw::REDISMODULE_CTX_FLAGS_AOF;
    }
    f |= c.flags;
    f as c_int
}

unsafe extern "C" fn select_db(ctx: Ctx, db: c_int) -> c_int {
    match fctx(ctx) {
        Some(c) if (0..16).contains(&db) => {
            c.db = db;
            OK
        }
        _ => ERR,
    }
}

unsafe extern "C" fn get_selected_db(ctx: Ctx) -> c_int {
    fctx(ctx).map_or(0, |c| c.db)
}

unsafe extern "C" fn get_client_id(ctx: Ctx) -> u64 {
    fctx(ctx).map_or(0, |c| c.client)
}

unsafe extern "C" fn get_client_info_by_id(ci: *mut c_void, id: u64) -> c_int {
    let cur = with(|h| h.cur);
    let found = with(|h| {
        h.servers[cur]
            .clients
            .get(&id)
            .map(|c| (c.db, c.multi.is_some()))
    });
    let Some((db, multi)) = found else { return ERR };
    if !ci.is_null() {
        // SAFETY: a version-1 client info struct the module passes.
        let info = unsafe { &mut *ci.cast::<raw::RedisModuleClientInfo>() };
        info.id = id;
        info.db = db as _;
        info.flags = if multi {
            u64::from(raw::REDISMODULE_CLIENTINFO_FLAG_MULTI)
        } else {
            0
        };
    }
    OK
}

// ---- keys --------------------------------------------------------------

unsafe extern "C" fn open_key(ctx: Ctx, name: Str, mode: c_int) -> *mut raw::RedisModuleKey {
    let Some(c) = fctx(ctx) else {
        return ptr::null_mut();
    };
    let (server, db) = (c.server, c.db);
    // SAFETY: a host string.
    let key = unsafe { FStr::bytes(name) }.to_vec();
    // Lazy expiry, as lookupKey: a master deletes a key whose time passed
    // (firing `expired`) before it answers.
    let now = super::server_now_ms(server);
    // (Nothing expires while loading, as keyIsExpired says; a paused
    // server keeps its dataset as it is.)
    // (Nor on a replica running its master's command: expireIfNeeded answers
    // "not expired" for the master's client.)
    let (expired, keep) = with(|h| {
        let s = &h.servers[server];
        let frozen = s.loading || (s.replica && s.from_master);
        let expired = !frozen
            && s.dbs[db as usize]
                .get(&key)
                .is_some_and(|e| e.expire_at.is_some_and(|t| t <= now));
        (expired, s.replica || s.pause.is_some())
    });
    if expired && !keep {
        super::unlink_key(server, db, &key, true);
        super::propagate(server, db, vec![b"DEL".to_vec(), key.clone()]);
        super::notify(server, raw::REDISMODULE_NOTIFY_EXPIRED, "expired", db, &key);
    }
    let write = mode as u32 & raw::REDISMODULE_WRITE != 0;
    // A replica does not delete a key whose time passed (the master's DEL
    // will), nor does a paused server, but reads do not see it.
    let hidden = !write && expired && keep;
    if hidden {
        return ptr::null_mut();
    }
    let exists = with(|h| h.servers[server].dbs[db as usize].contains_key(&key));
    if !write && !exists {
        return ptr::null_mut();
    }
    Box::into_raw(Box::new(FKey {
        server,
        db,
        name: key,
        write,
    }))
    .cast()
}

/// The [`FKey`] behind a key handle.
///
/// # Safety
/// `k` is null or a handle made by `open_key` and not closed yet.
unsafe fn fkey<'a>(k: *mut raw::RedisModuleKey) -> Option<&'a mut FKey> {
    // SAFETY: the caller's contract.
    unsafe { k.cast::<FKey>().as_mut() }
}

unsafe extern "C" fn close_key(k: *mut raw::RedisModuleKey) {
    if !k.is_null() {
        // SAFETY: made by open_key, closed once.
        drop(unsafe { Box::from_raw(k.cast::<FKey>()) });
    }
}

unsafe extern "C" fn key_type(k: *mut raw::RedisModuleKey) -> c_int {
    let Some(k) = fkey(k) else { return 0 };
    with(
        |h| match h.servers[k.server].dbs[k.db as usize].get(&k.name) {
            None => raw::REDISMODULE_KEYTYPE_EMPTY as c_int,
            Some(Entry {
                value: Value::Module(_),
                ..
            }) => raw::REDISMODULE_KEYTYPE_MODULE as c_int,
            Some(_) => raw::REDISMODULE_KEYTYPE_STRING as c_int,
        },
    )
}

unsafe extern "C" fn module_type_get_type(
    k: *mut raw::RedisModuleKey,
) -> *mut raw::RedisModuleType {
    let Some(k) = fkey(k) else {
        return ptr::null_mut();
    };
    let is_module = with(|h| {
        matches!(
            h.servers[k.server].dbs[k.db as usize].get(&k.name),
            Some(Entry {
                value: Value::Module(_),
                ..
            })
        )
    });
    if is_module {
        type_ptr(k.server)
    } else {
        ptr::null_mut()
    }
}

unsafe extern "C" fn module_type_get_value(k: *mut raw::RedisModuleKey) -> *mut c_void {
    let Some(k) = fkey(k) else {
        return ptr::null_mut();
    };
    with(
        |h| match h.servers[k.server].dbs[k.db as usize].get(&k.name) {
            Some(Entry {
                value: Value::Module(v),
                ..
            }) => *v,
            _ => ptr::null_mut(),
        },
    )
}

unsafe extern "C" fn module_type_set_value(
    k: *mut raw::RedisModuleKey,
    _mt: *mut raw::RedisModuleType,
    v: *mut c_void,
) -> c_int {
    let Some(k) = fkey(k) else { return ERR };
    if !k.write {
        return ERR;
    }
    // RM_ModuleTypeSetValue deletes the key first (unlink, free).
    super::unlink_key(k.server, k.db, &k.name, true);
    with(|h| {
        h.servers[k.server].dbs[k.db as usize].insert(
            k.name.clone(),
            Entry {
                value: Value::Module(v),
                expire_at: None,
            },
        )
    });
    OK
}

unsafe extern "C" fn delete_key(k: *mut raw::RedisModuleKey) -> c_int {
    let Some(k) = fkey(k) else { return ERR };
    if !k.write {
        return ERR;
    }
    super::unlink_key(k.server, k.db, &k.name, true);
    OK
}

unsafe extern "C" fn signal_key_as_ready(ctx: Ctx, key: Str) {
    let Some(c) = fctx(ctx) else { return };
    // SAFETY: a host string.
    let k = unsafe { FStr::bytes(key) }.to_vec();
    let (s, db) = (c.server, c.db);
    with(|h| h.servers[s].ready.push((db, k)));
}

// ---- replication, pub/sub ---------------------------------------------

#[no_mangle]
unsafe extern "C" fn sim_replicate_argv(
    ctx: *mut c_void,
    cmd: *const c_char,
    args: *const SimArgs,
) -> c_int {
    let Some(c) = fctx(ctx.cast()) else {
        return ERR;
    };
    let mut argv = vec![cstr(cmd).into_bytes()];
    // SAFETY: the shim's argument block, alive for the call.
    if let Some(a) = unsafe { args.as_ref() } {
        argv.extend(a.list());
    }
    let (s, db) = (c.server, c.db);
    super::propagate(s, db, argv);
    OK
}

unsafe extern "C" fn replicate_verbatim(ctx: Ctx) -> c_int {
    let Some(c) = fctx(ctx) else { return ERR };
    let (s, db, argv) = (c.server, c.db, c.argv.clone());
    super::propagate(s, db, argv);
    OK
}

unsafe extern "C" fn publish(ctx: Ctx, channel: Str, msg: Str) -> c_int {
    let s = server_of(ctx);
    // SAFETY: host strings.
    let (c, m) = unsafe { (FStr::bytes(channel).to_vec(), FStr::bytes(msg).to_vec()) };
    with(|h| {
        let p = &mut h.servers[s].published;
        p.push((c, m));
        if p.len() > 4096 {
            p.drain(..2048);
        }
    });
    OK
}

// ---- RM_Call's replies: call.rs; key positions: none asked -------------

unsafe extern "C" fn get_command_keys(
    _: Ctx,
    _: *mut Str,
    _: c_int,
    num: *mut c_int,
) -> *mut c_int {
    if !num.is_null() {
        // SAFETY: a place for the count.
        unsafe { *num = 0 };
    }
    ptr::null_mut()
}

unsafe extern "C" fn is_keys_position_request(_: Ctx) -> c_int {
    0
}

unsafe extern "C" fn key_at_pos(_: Ctx, _: c_int) {}

// ---- blocking ----------------------------------------------------------

unsafe extern "C" fn block_client_on_keys(
    ctx: Ctx,
    reply_cb: raw::RedisModuleCmdFunc,
    timeout_cb: raw::RedisModuleCmdFunc,
    free_cb: Option<unsafe extern "C" fn(Ctx, *mut c_void)>,
    timeout_ms: c_longlong,
    keys: *mut Str,
    nkeys: c_int,
    privdata: *mut c_void,
) -> *mut raw::RedisModuleBlockedClient {
    let Some(c) = fctx(ctx) else {
        return ptr::null_mut();
    };
    if keys.is_null() || nkeys < 1 {
        return ptr::null_mut();
    }
    // SAFETY: nkeys >= 1 live strings at keys.
    let key = unsafe { FStr::bytes(*keys) }.to_vec();
    let id = fresh_id();
    let now = super::server_now_ms(c.server);
    // From a script or inside MULTI the server makes an aborted handle (no
    // client) and replies with an error instead of blocking.
    let lua = c.flags & raw::REDISMODULE_CTX_FLAGS_LUA != 0;
    if lua || c.flags & raw::REDISMODULE_CTX_FLAGS_MULTI != 0 {
        c.push(Reply::Err(
            if lua {
                "ERR Blocking module command called from Lua script"
            } else {
                "ERR Blocking module command called from transaction"
            }
            .into(),
        ));
        let s = c.server;
        with(|h| {
            h.servers[s].blocked.insert(
                id,
                Blocked {
                    client: 0,
                    db: c.db,
                    key,
                    argv: Vec::new(),
                    reply_cb,
                    timeout_cb,
                    free_cb,
                    disconnect_cb: None,
                    privdata,
                    timeout_at: None,
                    done: true,
                },
            )
        });
        return id as usize as *mut raw::RedisModuleBlockedClient;
    }
    let (s, client, db, argv) = (c.server, c.client, c.db, c.argv.clone());
    with(|h| {
        let sv = &mut h.servers[s];
        sv.blocked.insert(
            id,
            Blocked {
                client,
                db,
                key,
                argv,
                reply_cb,
                timeout_cb,
                free_cb,
                disconnect_cb: None,
                privdata,
                timeout_at: (timeout_ms > 0).then(|| now + timeout_ms as u64),
                done: false,
            },
        );
        if let Some(cl) = sv.clients.get_mut(&client) {
            cl.blocked = Some(id);
        }
    });
    id as usize as *mut raw::RedisModuleBlockedClient
}

unsafe extern "C" fn set_disconnect_callback(
    bc: *mut raw::RedisModuleBlockedClient,
    cb: raw::RedisModuleDisconnectFunc,
) {
    let id = bc as usize as u64;
    let cur = with(|h| h.cur);
    with(|h| {
        if let Some(b) = h.servers[cur].blocked.get_mut(&id) {
            b.disconnect_cb = cb;
        }
    });
}

unsafe extern "C" fn get_blocked_client_private_data(ctx: Ctx) -> *mut c_void {
    fctx(ctx).map_or(ptr::null_mut(), |c| c.privdata)
}

unsafe extern "C" fn get_blocked_client_ready_key(ctx: Ctx) -> Str {
    fctx(ctx).map_or(ptr::null_mut(), |c| c.ready_key)
}

/// For a client blocked on keys: its timeout callback runs at once (it
/// replies), and it is freed at the next turn (RM_UnblockClient).
unsafe extern "C" fn unblock_client(
    bc: *mut raw::RedisModuleBlockedClient,
    _privdata: *mut c_void,
) -> c_int {
    let id = bc as usize as u64;
    let cur = with(|h| h.cur);
    super::time_out_blocked(cur, id);
    OK
}

// ---- timers, next turn -------------------------------------------------

unsafe extern "C" fn create_timer(
    ctx: Ctx,
    ms: raw::mstime_t,
    cb: raw::RedisModuleTimerProc,
    data: *mut c_void,
) -> raw::RedisModuleTimerID {
    let s = server_of(ctx);
    let id = fresh_id();
    let due = super::mono_ms() + ms.max(0) as u64;
    with(|h| h.servers[s].timers.insert((due, id), Timer { cb, data }));
    id
}

unsafe extern "C" fn stop_timer(
    ctx: Ctx,
    id: raw::RedisModuleTimerID,
    data: *mut *mut c_void,
) -> c_int {
    let s = server_of(ctx);
    let t = with(|h| {
        let timers = &mut h.servers[s].timers;
        let k = timers.keys().find(|k| k.1 == id).copied()?;
        timers.remove(&k)
    });
    match t {
        Some(t) => {
            if !data.is_null() {
                // SAFETY: a place for the data.
                unsafe { *data = t.data };
            }
            OK
        }
        None => ERR,
    }
}

unsafe extern "C" fn event_loop_add_one_shot(
    f: raw::RedisModuleEventLoopOneShotFunc,
    data: *mut c_void,
) -> c_int {
    with(|h| {
        let cur = h.cur;
        h.servers[cur].oneshots.push_back((f, data))
    });
    OK
}

unsafe extern "C" fn microseconds() -> raw::ustime_t {
    with(|h| super::clock_of(h, h.cur) as raw::ustime_t)
}

unsafe extern "C" fn milliseconds() -> raw::mstime_t {
    with(|h| (super::clock_of(h, h.cur) / 1000) as raw::mstime_t)
}

// ---- unlink hook context, info -----------------------------------------

unsafe extern "C" fn key_name_from_opt_ctx(
    o: *mut raw::RedisModuleKeyOptCtx,
) -> *const raw::RedisModuleString {
    // SAFETY: the host's OptCtx, alive for the hook.
    unsafe { o.cast::<OptCtx>().as_ref() }.map_or(ptr::null(), |o| o.key)
}

unsafe extern "C" fn db_id_from_opt_ctx(o: *mut raw::RedisModuleKeyOptCtx) -> c_int {
    // SAFETY: as above.
    unsafe { o.cast::<OptCtx>().as_ref() }.map_or(0, |o| o.db)
}

unsafe extern "C" fn info_add_section(_: *mut raw::RedisModuleInfoCtx, _: *const c_char) -> c_int {
    OK
}

unsafe extern "C" fn info_add_u64(
    ctx: *mut raw::RedisModuleInfoCtx,
    f: *const c_char,
    v: u64,
) -> c_int {
    // SAFETY: the host's InfoCtx, alive for the info call.
    if let Some(i) = unsafe { ctx.cast::<InfoCtx>().as_mut() } {
        i.fields.push((cstr(f), v.to_string()));
    }
    OK
}

unsafe extern "C" fn info_add_cstring(
    ctx: *mut raw::RedisModuleInfoCtx,
    f: *const c_char,
    v: *const c_char,
) -> c_int {
    // SAFETY: as above.
    if let Some(i) = unsafe { ctx.cast::<InfoCtx>().as_mut() } {
        i.fields.push((cstr(f), cstr(v)));
    }
    OK
}

#[no_mangle]
unsafe extern "C" fn sim_log_line(level: *const c_char, line: *const c_char) {
    super::log_line(&cstr(level), &cstr(line));
}

// ---- command filters ---------------------------------------------------

/// The context a command filter gets: the command's arguments (host
/// strings, live for the call) and its client.
pub struct FilterCtx {
    pub args: Vec<Str>,
    pub client: u64,
}

unsafe extern "C" fn register_command_filter(
    ctx: Ctx,
    cb: raw::RedisModuleCommandFilterFunc,
    _flags: c_int,
) -> *mut raw::RedisModuleCommandFilter {
    let s = server_of(ctx);
    with(|h| h.servers[s].filters.push(cb));
    // An opaque handle (only given back to UnregisterCommandFilter).
    0x4000 as *mut raw::RedisModuleCommandFilter
}

/// # Safety
/// `f` is null or the host's filter context of the running filter.
unsafe fn filter_ctx<'a>(f: *mut raw::RedisModuleCommandFilterCtx) -> Option<&'a FilterCtx> {
    // SAFETY: the caller's contract.
    unsafe { f.cast::<FilterCtx>().as_ref() }
}

unsafe extern "C" fn command_filter_args_count(f: *mut raw::RedisModuleCommandFilterCtx) -> c_int {
    // SAFETY: the running filter's context.
    unsafe { filter_ctx(f) }.map_or(0, |c| c.args.len() as c_int)
}

unsafe extern "C" fn command_filter_arg_get(
    f: *mut raw::RedisModuleCommandFilterCtx,
    pos: c_int,
) -> Str {
    // SAFETY: the running filter's context.
    unsafe { filter_ctx(f) }
        .and_then(|c| c.args.get(usize::try_from(pos).ok()?).copied())
        .unwrap_or(ptr::null_mut())
}

unsafe extern "C" fn command_filter_get_client_id(
    f: *mut raw::RedisModuleCommandFilterCtx,
) -> std::ffi::c_ulonglong {
    // SAFETY: the running filter's context.
    unsafe { filter_ctx(f) }.map_or(0, |c| c.client)
}

// ---- the table ---------------------------------------------------------

/// Type-checks `f` against the API pointer `slot` names and gives it as
/// the untyped pointer `GetApi` hands out.
fn entry<T: Copy>(_slot: *const Option<T>, f: T) -> *mut c_void {
    assert_eq!(std::mem::size_of::<T>(), std::mem::size_of::<*mut c_void>());
    // SAFETY: T is a function pointer type (the slot's), the size of a
    // pointer, as checked above.
    unsafe { std::mem::transmute_copy::<T, *mut c_void>(&f) }
}

macro_rules! table {
    ($name:expr, $( $api:ident => $f:expr ),* $(,)?) => {
        match $name {
            $(
                stringify!($api) => {
                    Some(entry(std::ptr::addr_of!(raw::$api), $f))
                }
            )*
            _ => None,
        }
    };
}

/// The function a name stands for; None for APIs this server lacks (the
/// running server's family: Redis 7.0 lacks what came with 7.2).
fn lookup(name: &str) -> Option<*mut c_void> {
    let family = with(|h| h.servers.get(h.cur).map(|s| s.family));
    if family == Some(super::Family::Redis70)
        && matches!(
            name,
            "RedisModule_CommandFilterGetClientId" | "RedisModule_Microseconds"
        )
    {
        return None;
    }
    // Variadic ones come from the C shim (checked by its prototypes).
    let variadic = match name {
        "RedisModule_Replicate" => Some(sim_Replicate as *const () as *mut c_void),
        "RedisModule_Call" => Some(sim_Call as *const () as *mut c_void),
        "RedisModule_EmitAOF" => Some(sim_EmitAOF as *const () as *mut c_void),
        "RedisModule_Log" => Some(sim_Log as *const () as *mut c_void),
        "RedisModule_LogIOError" => Some(sim_LogIOError as *const () as *mut c_void),
        _ => None,
    };
    if variadic.is_some() {
        return variadic;
    }
    table!(name,
        RedisModule_Alloc => alloc,
        RedisModule_Calloc => calloc,
        RedisModule_Realloc => realloc,
        RedisModule_Free => free,
        RedisModule_Strdup => strdup,
        RedisModule_SetModuleAttribs => set_module_attribs,
        RedisModule_CreateDataType => create_data_type,
        RedisModule_RegisterNumericConfig => register_numeric_config,
        RedisModule_RegisterBoolConfig => register_bool_config,
        RedisModule_LoadConfigs => load_configs,
        RedisModule_CreateCommand => create_command,
        RedisModule_GetCommand => get_command,
        RedisModule_SetCommandInfo => set_command_info,
        RedisModule_SubscribeToKeyspaceEvents => subscribe_keyspace,
        RedisModule_SubscribeToServerEvent => subscribe_server_event,
        RedisModule_RegisterInfoFunc => register_info_func,
        RedisModule_SetModuleOptions => set_module_options,
        RedisModule_GetDetachedThreadSafeContext => detached_ctx,
        RedisModule_FreeThreadSafeContext => free_thread_safe_ctx,
        RedisModule_GetServerInfo => get_server_info,
        RedisModule_ServerInfoGetFieldC => server_info_field_c,
        RedisModule_FreeServerInfo => free_server_info,
        RedisModule_StringPtrLen => string_ptr_len,
        RedisModule_CreateString => create_string,
        RedisModule_FreeString => free_string,
        RedisModule_RetainString => retain_string,
        RedisModule_ReplyWithLongLong => reply_long_long,
        RedisModule_ReplyWithNull => reply_null,
        RedisModule_ReplyWithError => reply_error,
        RedisModule_ReplyWithStringBuffer => reply_string_buffer,
        RedisModule_ReplyWithSimpleString => reply_simple_string,
        RedisModule_ReplyWithArray => reply_array,
        RedisModule_ReplyWithMap => reply_map,
        RedisModule_WrongArity => wrong_arity,
        RedisModule_GetContextFlags => get_context_flags,
        RedisModule_SelectDb => select_db,
        RedisModule_GetSelectedDb => get_selected_db,
        RedisModule_GetClientId => get_client_id,
        RedisModule_GetClientInfoById => get_client_info_by_id,
        RedisModule_OpenKey => open_key,
        RedisModule_CloseKey => close_key,
        RedisModule_KeyType => key_type,
        RedisModule_ModuleTypeGetType => module_type_get_type,
        RedisModule_ModuleTypeGetValue => module_type_get_value,
        RedisModule_ModuleTypeSetValue => module_type_set_value,
        RedisModule_DeleteKey => delete_key,
        RedisModule_SignalKeyAsReady => signal_key_as_ready,
        RedisModule_ReplicateVerbatim => replicate_verbatim,
        RedisModule_PublishMessage => publish,
        RedisModule_PublishMessageShard => publish,
        RedisModule_CallReplyStringPtr => super::call::call_reply_string_ptr,
        RedisModule_FreeCallReply => super::call::free_call_reply,
        RedisModule_CallReplyType => super::call::call_reply_type,
        RedisModule_CallReplyLength => super::call::call_reply_length,
        RedisModule_CallReplyArrayElement => super::call::call_reply_array_element,
        RedisModule_CallReplyInteger => super::call::call_reply_integer,
        RedisModule_IsKeysPositionRequest => is_keys_position_request,
        RedisModule_KeyAtPos => key_at_pos,
        RedisModule_ReplyWithCallReply => super::call::reply_with_call_reply,
        RedisModule_GetCommandKeys => get_command_keys,
        RedisModule_BlockClientOnKeys => block_client_on_keys,
        RedisModule_SetDisconnectCallback => set_disconnect_callback,
        RedisModule_GetBlockedClientPrivateData => get_blocked_client_private_data,
        RedisModule_GetBlockedClientReadyKey => get_blocked_client_ready_key,
        RedisModule_UnblockClient => unblock_client,
        RedisModule_CreateTimer => create_timer,
        RedisModule_StopTimer => stop_timer,
        RedisModule_EventLoopAddOneShot => event_loop_add_one_shot,
        RedisModule_Microseconds => microseconds,
        RedisModule_Milliseconds => milliseconds,
        RedisModule_AvoidReplicaTraffic => avoid_replica_traffic,
        RedisModule_RegisterCommandFilter => register_command_filter,
        RedisModule_CommandFilterArgsCount => command_filter_args_count,
        RedisModule_CommandFilterArgGet => command_filter_arg_get,
        RedisModule_CommandFilterGetClientId => command_filter_get_client_id,
        RedisModule_GetKeyNameFromOptCtx => key_name_from_opt_ctx,
        RedisModule_GetDbIdFromOptCtx => db_id_from_opt_ctx,
        RedisModule_InfoAddSection => info_add_section,
        RedisModule_InfoAddFieldULongLong => info_add_u64,
        RedisModule_InfoAddFieldCString => info_add_cstring,
        RedisModule_SaveStringBuffer => rdb::save_string_buffer,
        RedisModule_LoadStringBuffer => rdb::load_string_buffer,
        RedisModule_SaveUnsigned => rdb::save_unsigned,
        RedisModule_LoadUnsigned => rdb::load_unsigned,
        RedisModule_IsIOError => rdb::is_io_error,
        RedisModule_GetKeyNameFromIO => rdb::key_name_from_io,
        RedisModule_GetDbIdFromIO => rdb::db_id_from_io,
        RedisModule_DigestAddStringBuffer => rdb::digest_add,
        RedisModule_DigestEndSequence => rdb::digest_end,
    )
}

/// `RedisModule_GetApi`: stores the function named `name` at `out`.
pub unsafe extern "C" fn get_api(name: *const c_char, out: *mut c_void) -> c_int {
    match lookup(&cstr(name)) {
        Some(f) if !out.is_null() => {
            // SAFETY: `out` is the address of the module's pointer for
            // this name (REDISMODULE_GET_API).
            unsafe { *out.cast::<*mut c_void>() = f };
            OK
        }
        _ => ERR,
    }
}

/// Every entry of the table resolves (a test calls this).
pub fn install_check() -> usize {
    [
        "RedisModule_OpenKey",
        "RedisModule_Replicate",
        "RedisModule_BlockClientOnKeys",
        "RedisModule_CreateTimer",
    ]
    .iter()
    .filter(|n| lookup(n).is_some())
    .count()
}

/// Server name of the host's blocked handle (for tests).
#[allow(dead_code)]
fn _unused(_: &Blocked, _: Reply) {
    let _ = (enter, leave);
}
