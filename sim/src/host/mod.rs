//! # The host port, simulated: an in-memory server at the module API
//!
//! The module talks to its server only through the Redis module API: the
//! function pointers `RedisModule_Init` fills in from the context's
//! `GetApi`. That table is the narrowest interface between the services
//! and the server, and the one the real servers implement, so the
//! simulator implements it too: this file is a small single-threaded
//! server — keys in dbs, clients, commands, blocked clients and their
//! callbacks, timers, next-turn callbacks, keyspace and server events,
//! the replication stream, RDB payloads through the type's callbacks —
//! and loads the module's own shared library (`libdlock.so`, the file
//! users load) into it with `dlopen`. Every line of `src/` runs: the
//! commands, the services, `ffi` and `storage`, on simulated time.
//!
//! The server follows what Redis 7 does where the module can tell (the
//! order of unlink, free and the keyspace event in DEL, RENAME and MOVE;
//! the CLIENT_CHANGE event before a closing client's blocked callbacks;
//! `UnblockClient` of a client blocked on keys running its timeout
//! callback at once). It is not a Redis: only what the module calls is
//! here, and a call it does not know is refused as a server without that
//! API would refuse it (the pointer stays null).
//!
//! Everything below is `unsafe` by nature (raw pointers across the C ABI);
//! each function says what it relies on. One rule keeps it sound: the
//! host's state ([`HOST`]) is borrowed only between calls into the module,
//! never across one, because the module calls back into the host.

#![allow(clippy::missing_safety_doc)]

use redis_module::raw;
use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::ffi::{c_char, c_int, c_long, c_longlong, c_void, CStr, CString};
use std::ptr;

mod api;
mod call;
mod clock;
pub mod cluster;
mod cmds;
mod keyspace;
pub mod rdb;

pub use api::install_check;
pub use cmds::{script_reply, Caller};
pub use keyspace::{del, expire, flushdb, move_key, rename, swapdb};

/// The server a simulated host plays, where the module can tell them apart
/// (the version it reads at load, the APIs it finds) and where they differ
/// in what the module meets: Redis 7.0 (Debian's 7.0.15, the oldest
/// supported), Redis 8 (8.2), Valkey 8.1 and Valkey 9 (9.1: atomic slot
/// migration).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Family {
    Redis70,
    Redis8,
    Valkey81,
    Valkey9,
}

impl Family {
    pub const ALL: [Family; 4] = [
        Family::Redis70,
        Family::Redis8,
        Family::Valkey81,
        Family::Valkey9,
    ];

    pub fn is_valkey(self) -> bool {
        matches!(self, Family::Valkey81 | Family::Valkey9)
    }

    /// `redis_version` of INFO server (Valkey keeps 7.2.4 there).
    fn redis_version(self) -> &'static CStr {
        match self {
            Family::Redis70 => c"7.0.15",
            Family::Redis8 => c"8.2.3",
            Family::Valkey81 | Family::Valkey9 => c"7.2.4",
        }
    }

    /// `valkey_version` of INFO server (Valkey only).
    fn valkey_version(self) -> Option<&'static CStr> {
        match self {
            Family::Valkey81 => Some(c"8.1.8"),
            Family::Valkey9 => Some(c"9.1.2"),
            _ => None,
        }
    }

    /// The assertion `propagateNow` fails when something propagates while
    /// clients are paused (as the server logs it).
    fn pause_assertion(self) -> &'static str {
        match self {
            Family::Redis70 => "!(areClientsPaused() && !server.client_pause_in_transaction)",
            _ => {
                "!(isPausedActions(PAUSE_ACTION_REPLICA) && (!server.client_pause_in_transaction))"
            }
        }
    }
}

/// A reply a client received, as a tree.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Reply {
    Int(i64),
    Null,
    Err(String),
    Bulk(Vec<u8>),
    Simple(String),
    Array(Vec<Reply>),
}

impl std::fmt::Display for Reply {
    /// As redis-cli would show it, on one line: strings quoted, arrays in
    /// brackets.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reply::Int(v) => write!(f, "{v}"),
            Reply::Null => write!(f, "nil"),
            Reply::Err(e) => write!(f, "(error) {e}"),
            Reply::Bulk(b) => write!(f, "{:?}", String::from_utf8_lossy(b)),
            Reply::Simple(s) => write!(f, "{s}"),
            Reply::Array(items) => {
                write!(f, "[")?;
                for (i, r) in items.iter().enumerate() {
                    if i > 0 {
                        write!(f, " ")?;
                    }
                    write!(f, "{r}")?;
                }
                write!(f, "]")
            }
        }
    }
}

impl Reply {
    /// The integer, if this is one.
    pub fn int(&self) -> Option<i64> {
        match self {
            Reply::Int(v) => Some(*v),
            _ => None,
        }
    }

    /// The field `name` of a flat field/value array.
    pub fn field(&self, name: &str) -> Option<&Reply> {
        let Reply::Array(items) = self else {
            return None;
        };
        items.chunks(2).find_map(|kv| match kv {
            [Reply::Simple(k), v] if k == name => Some(v),
            [Reply::Bulk(k), v] if k == name.as_bytes() => Some(v),
            _ => None,
        })
    }

    pub fn items(&self) -> &[Reply] {
        match self {
            Reply::Array(v) => v,
            _ => &[],
        }
    }

    pub fn is_err(&self) -> bool {
        matches!(self, Reply::Err(_))
    }
}

/// A module string (`RedisModuleString`): bytes with a NUL after them,
/// reference-counted as the server's (`RetainString`).
pub struct FStr {
    bytes: Vec<u8>,
    refs: std::cell::Cell<usize>,
}

impl FStr {
    pub fn make(b: &[u8]) -> *mut raw::RedisModuleString {
        let mut bytes = Vec::with_capacity(b.len() + 1);
        bytes.extend_from_slice(b);
        bytes.push(0);
        Box::into_raw(Box::new(FStr {
            bytes,
            refs: std::cell::Cell::new(1),
        }))
        .cast()
    }

    /// # Safety
    /// `p` is null or a string made by [`FStr::make`] and not freed.
    pub unsafe fn bytes<'a>(p: *const raw::RedisModuleString) -> &'a [u8] {
        // SAFETY: the caller's contract.
        match unsafe { p.cast::<FStr>().as_ref() } {
            Some(s) => &s.bytes[..s.bytes.len() - 1],
            None => &[],
        }
    }

    /// # Safety
    /// `p` is null or a string made by [`FStr::make`], freed once.
    pub unsafe fn free(p: *mut raw::RedisModuleString) {
        // SAFETY: the caller's contract.
        let Some(s) = (unsafe { p.cast::<FStr>().as_ref() }) else {
            return;
        };
        let n = s.refs.get().saturating_sub(1);
        s.refs.set(n);
        if n == 0 {
            // SAFETY: the last reference, made by Box::into_raw.
            drop(unsafe { Box::from_raw(p.cast::<FStr>()) });
        }
    }

    /// # Safety
    /// `p` is null or a live string made by [`FStr::make`].
    pub unsafe fn retain(p: *mut raw::RedisModuleString) {
        // SAFETY: the caller's contract.
        if let Some(s) = unsafe { p.cast::<FStr>().as_ref() } {
            s.refs.set(s.refs.get() + 1);
        }
    }
}

/// What a key holds.
pub enum Value {
    /// A value of the module's type.
    Module(*mut c_void),
    /// A string (what FENCED's inner commands and plain SETs write).
    Str(Vec<u8>),
}

pub struct Entry {
    pub value: Value,
    /// Absolute ms.
    pub expire_at: Option<u64>,
}

/// A context the host hands to the module (`RedisModuleCtx`). The first
/// word is what `RedisModule_Init` reads: the `GetApi` function.
#[repr(C)]
pub struct FCtx {
    getapi: *const c_void,
    server: usize,
    client: u64,
    db: i32,
    /// Extra context flags (REPLICATED, LOADING).
    flags: u32,
    /// The command's arguments (for ReplicateVerbatim).
    argv: Vec<Vec<u8>>,
    /// Replies made, and the open aggregates: (items, items still due).
    out: Vec<Reply>,
    open: Vec<(Vec<Reply>, usize)>,
    /// In a blocked client's callback: its private data and ready key.
    privdata: *mut c_void,
    ready_key: *mut raw::RedisModuleString,
}

impl FCtx {
    fn new(server: usize, client: u64, db: i32) -> Box<FCtx> {
        Box::new(FCtx {
            getapi: api::get_api as *const c_void,
            server,
            client,
            db,
            flags: 0,
            argv: Vec::new(),
            out: Vec::new(),
            open: Vec::new(),
            privdata: ptr::null_mut(),
            ready_key: ptr::null_mut(),
        })
    }

    fn push(&mut self, r: Reply) {
        let mut r = r;
        loop {
            match self.open.last_mut() {
                None => {
                    self.out.push(r);
                    return;
                }
                Some((items, due)) => {
                    items.push(r);
                    *due -= 1;
                    if *due > 0 {
                        return;
                    }
                }
            }
            let (items, _) = self.open.pop().unwrap_or_default();
            r = Reply::Array(items);
        }
    }

    fn open_aggregate(&mut self, n: usize) {
        if n == 0 {
            self.push(Reply::Array(Vec::new()));
        } else {
            self.open.push((Vec::with_capacity(n), n));
        }
    }
}

/// A client blocked by the module on a key.
pub struct Blocked {
    pub client: u64,
    db: i32,
    key: Vec<u8>,
    argv: Vec<Vec<u8>>,
    reply_cb: raw::RedisModuleCmdFunc,
    timeout_cb: raw::RedisModuleCmdFunc,
    free_cb: Option<unsafe extern "C" fn(*mut raw::RedisModuleCtx, *mut c_void)>,
    disconnect_cb: raw::RedisModuleDisconnectFunc,
    privdata: *mut c_void,
    timeout_at: Option<u64>,
    /// Unblocked (served, timed out, by the module, closed): its free
    /// callback is due at the next turn.
    done: bool,
}

pub struct Client {
    pub id: u64,
    pub db: i32,
    /// Replies received, oldest first, with the order the server sent them.
    pub replies: VecDeque<(u64, Reply)>,
    /// The blocked-client id while blocked.
    pub blocked: Option<u64>,
    /// Commands sent and not yet processed (behind a postponed or blocked
    /// one), oldest first, each with the db it was sent in.
    queue: VecDeque<(i32, Vec<Vec<u8>>)>,
    /// Postponed by CLIENT PAUSE: its next command runs when the pause
    /// lets it.
    postponed: bool,
    /// In MULTI: the commands queued for EXEC.
    multi: Option<Vec<Vec<Vec<u8>>>>,
}

struct Timer {
    cb: raw::RedisModuleTimerProc,
    data: *mut c_void,
}

/// One server: its keys, clients and module instance.
pub struct Server {
    pub replica: bool,
    pub loading: bool,
    /// A replica runs a command of its master's link (`current_client ==
    /// server.master`): its keys are never expired then (expireIfNeeded), so
    /// the module's key-event callbacks read a key whose time passed by this
    /// server's clock.
    pub from_master: bool,
    pub dbs: Vec<BTreeMap<Vec<u8>, Entry>>,
    pub clients: BTreeMap<u64, Client>,
    commands: BTreeMap<String, raw::RedisModuleCmdFunc>,
    keyspace_subs: Vec<(c_int, raw::RedisModuleNotificationFunc)>,
    event_subs: Vec<(u64, raw::RedisModuleEventCallback)>,
    methods: Option<raw::RedisModuleTypeMethods>,
    encver: c_int,
    info_fn: raw::RedisModuleInfoFunc,
    timers: BTreeMap<(u64, u64), Timer>,
    oneshots: VecDeque<(raw::RedisModuleEventLoopOneShotFunc, *mut c_void)>,
    ready: Vec<(i32, Vec<u8>)>,
    pub blocked: BTreeMap<u64, Blocked>,
    /// The replication stream: (db, argv) of each replicated command.
    pub repl: Vec<(i32, Vec<Vec<u8>>)>,
    /// Messages published: (channel, message).
    pub published: Vec<(Vec<u8>, Vec<u8>)>,
    /// Configs registered at load: (name, setter, privdata).
    num_configs: Vec<(
        String,
        i64,
        raw::RedisModuleConfigSetNumericFunc,
        *mut c_void,
    )>,
    bool_configs: Vec<(String, bool, raw::RedisModuleConfigSetBoolFunc, *mut c_void)>,
    lib: Lib,
    /// The temp client's id (timers, events, jobs).
    temp_client: u64,
    /// Command name -> (flags as registered, first key position).
    cmd_info: BTreeMap<String, (String, c_int)>,
    pub family: Family,
    /// CLIENT PAUSE (or FAILOVER's): ALL when true, else WRITE; until this
    /// server's clock reads the ms given.
    pub pause: Option<(bool, u64)>,
    /// Clients postponed by the pause, in the order they were.
    postponed: VecDeque<u64>,
    /// A replica was attached once (the replication backlog exists): the
    /// server propagates even with no replica connected.
    pub backlog: bool,
    /// appendonly yes: the AOF is a propagation target.
    pub aof: bool,
    /// Used memory over maxmemory: `deny-oom` commands are refused.
    pub oom: bool,
    /// Cluster mode (`cluster-enabled yes`); the slot map is the host's.
    pub cluster: bool,
    /// This server's clock: its offset (µs) from the simulated time and its
    /// rate drift (ppm of the monotonic time).
    pub clock: (i64, i64),
    /// The module's options (`SetModuleOptions`).
    pub options: c_int,
    /// The base of its AOF: the state it started from (an RDB it loaded),
    /// before the commands of its stream.
    aof_base: Option<rdb::Snapshot>,
    /// Command filters the module registered.
    filters: Vec<raw::RedisModuleCommandFilterFunc>,
    /// When its last pause ended (monotonic ms).
    pub pause_ended: Option<u64>,
}

/// The world of servers this thread simulates.
pub struct Host {
    pub servers: Vec<Server>,
    /// The server whose module is running (for the API calls that take no
    /// context: Alloc, EventLoopAddOneShot, GetClientInfoById).
    cur: usize,
    /// Simulated unix time, µs (what the module reads as the clock; a jump
    /// moves it either way).
    pub now_us: u64,
    /// Simulated monotonic time, ms: module timers run on it, as on
    /// Redis and Valkey (a wall-clock jump does not move them).
    pub mono_ms: u64,
    next_id: u64,
    /// Bytes the modules hold (Alloc/Free), and the live allocations.
    pub module_bytes: i64,
    pub log: Vec<String>,
    /// A server's own assertion failed (it would have aborted): which, and
    /// where. The first one only.
    pub aborted: Option<String>,
    /// Payloads DUMP gave out (RESTORE and MIGRATE take them back by index).
    dumps: Vec<Vec<rdb::Item>>,
    /// Cluster mode: which server serves each slot, and slots in motion.
    pub slots: cluster::SlotMap,
    /// A command runs as a dry run (the FENCED oracle's script): nothing
    /// propagates, no event fires.
    dry_run: bool,
}

thread_local! {
    static HOST: RefCell<Host> = const { RefCell::new(Host {
        servers: Vec::new(),
        cur: 0,
        now_us: 1_800_000_000_000_000,
        mono_ms: 0,
        next_id: 1000,
        module_bytes: 0,
        log: Vec::new(),
        aborted: None,
        dumps: Vec::new(),
        slots: cluster::SlotMap::new(),
        dry_run: false,
    }) };
}

/// Runs `f` on the host. Never call the module inside `f`.
pub fn with<R>(f: impl FnOnce(&mut Host) -> R) -> R {
    HOST.with(|h| f(&mut h.borrow_mut()))
}

/// The server a context belongs to.
///
/// # Safety
/// `ctx` is null or a context this host made (an [`FCtx`]) and has not
/// freed: every context the module holds is one.
unsafe fn server_of(ctx: *mut raw::RedisModuleCtx) -> usize {
    // SAFETY: the caller's contract.
    unsafe { ctx.cast::<FCtx>().as_ref() }.map_or(0, |c| c.server)
}

/// A number for each reply sent to a blocked client, in sending order.
/// (Called outside any borrow of the host: a thread-local counter.)
fn seq() -> u64 {
    thread_local! {
        static SEQ: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    }
    SEQ.with(|c| {
        c.set(c.get() + 1);
        c.get()
    })
}

fn fresh_id() -> u64 {
    with(|h| {
        h.next_id += 1;
        h.next_id
    })
}

/// A module library loaded with `dlopen`: each copy (a file of its own)
/// has its own statics and thread-locals, so two copies are two servers.
/// `RedisModule_OnLoad`'s signature.
type OnLoad = unsafe extern "C" fn(
    *mut raw::RedisModuleCtx,
    *mut *mut raw::RedisModuleString,
    c_int,
) -> c_int;

pub struct Lib {
    /// Never closed: the module's thread-locals pin it for the process.
    #[allow(dead_code)]
    handle: *mut c_void,
    onload: OnLoad,
}

impl Lib {
    /// Loads the module at `path`, copied to `copy` first when given.
    pub fn open(path: &str, copy: Option<&str>) -> Result<Lib, String> {
        let file = match copy {
            Some(c) => {
                std::fs::copy(path, c).map_err(|e| format!("copy {path} to {c}: {e}"))?;
                c
            }
            None => path,
        };
        let cpath = CString::new(file).map_err(|e| e.to_string())?;
        // SAFETY: a path string; RTLD_LOCAL keeps each copy's symbols apart.
        let handle = unsafe { libc::dlopen(cpath.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if handle.is_null() {
            // SAFETY: dlerror returns a C string or null.
            let e = unsafe { libc::dlerror() };
            let msg = if e.is_null() {
                String::from("?")
            } else {
                // SAFETY: non-null C string from dlerror.
                unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
            };
            return Err(format!("dlopen {file}: {msg}"));
        }
        // SAFETY: a handle just opened; a symbol name.
        let sym = unsafe { libc::dlsym(handle, c"RedisModule_OnLoad".as_ptr()) };
        if sym.is_null() {
            return Err(format!("{file}: no RedisModule_OnLoad"));
        }
        // SAFETY: RedisModule_OnLoad has this C signature (redismodule.h).
        let onload = unsafe { std::mem::transmute::<*mut c_void, OnLoad>(sym) };
        Ok(Lib { handle, onload })
    }
}

/// Adds a server of `family` running the module in `lib`, loaded with
/// `args`; its index.
pub fn add_server(lib: Lib, args: &[&str], family: Family) -> Result<usize, String> {
    std::hint::black_box(clock::linked());
    let idx = with(|h| {
        h.next_id += 1;
        let temp = h.next_id;
        h.servers.push(Server {
            replica: false,
            loading: false,
            from_master: false,
            dbs: (0..16).map(|_| BTreeMap::new()).collect(),
            clients: BTreeMap::new(),
            commands: BTreeMap::new(),
            keyspace_subs: Vec::new(),
            event_subs: Vec::new(),
            methods: None,
            encver: 0,
            info_fn: None,
            timers: BTreeMap::new(),
            oneshots: VecDeque::new(),
            ready: Vec::new(),
            blocked: BTreeMap::new(),
            repl: Vec::new(),
            published: Vec::new(),
            num_configs: Vec::new(),
            bool_configs: Vec::new(),
            lib,
            temp_client: temp,
            cmd_info: BTreeMap::new(),
            family,
            pause: None,
            postponed: VecDeque::new(),
            backlog: false,
            aof: false,
            oom: false,
            cluster: false,
            clock: (0, 0),
            options: 0,
            aof_base: None,
            filters: Vec::new(),
            pause_ended: None,
        });
        h.servers.len() - 1
    });
    let onload = with(|h| h.servers[idx].lib.onload);
    let argv: Vec<*mut raw::RedisModuleString> =
        args.iter().map(|a| FStr::make(a.as_bytes())).collect();
    let ctx = Box::into_raw(FCtx::new(idx, 0, 0));
    let prev = enter(idx);
    // SAFETY: the module's OnLoad with a host context and owned strings.
    let status = unsafe { onload(ctx.cast(), argv.as_ptr().cast_mut(), argv.len() as c_int) };
    leave(prev);
    // SAFETY: made above with Box::into_raw; the module keeps no pointer to
    // the OnLoad context (the detached one is another).
    drop(unsafe { Box::from_raw(ctx) });
    for a in argv {
        // SAFETY: made by FStr::make above; OnLoad does not keep its argv.
        unsafe { FStr::free(a) };
    }
    if status != raw::REDISMODULE_OK as c_int {
        let log = with(|h| h.log.join("\n"));
        return Err(format!("module load failed:\n{log}"));
    }
    Ok(idx)
}

/// Makes `server` the running one (module code runs until [`leave`]); the
/// previous, to give to [`leave`].
fn enter(server: usize) -> usize {
    clock::entered();
    with(|h| std::mem::replace(&mut h.cur, server))
}

fn leave(prev: usize) {
    with(|h| h.cur = prev);
    clock::left();
}

/// The simulated time (ms): what a server with no offset reads.
pub fn now_ms() -> u64 {
    with(|h| h.now_us / 1000)
}

/// What `server`'s clock reads (µs): the simulated time plus its offset
/// and its drift over the monotonic time so far.
pub fn server_now_us(server: usize) -> u64 {
    with(|h| clock_of(h, server))
}

/// What `server`'s clock reads (ms).
pub fn server_now_ms(server: usize) -> u64 {
    server_now_us(server) / 1000
}

pub(crate) fn clock_of(h: &Host, server: usize) -> u64 {
    let (offset, ppm) = h.servers.get(server).map_or((0, 0), |s| s.clock);
    // µs of drift: mono ms × ppm / 1000.
    let drift = (h.mono_ms as i64).saturating_mul(ppm) / 1000;
    h.now_us.saturating_add_signed(offset.saturating_add(drift))
}

/// `server`'s clock: offset (µs) and drift (ppm).
pub fn clock(server: usize) -> (i64, i64) {
    with(|h| h.servers[server].clock)
}

/// Gives `server` the clock `c` (offset µs, drift ppm): a restart on the
/// same machine.
pub fn set_clock_raw(server: usize, c: (i64, i64)) {
    with(|h| h.servers[server].clock = c);
}

/// Sets `server`'s clock offset (ms) and drift (ppm).
pub fn set_clock(server: usize, offset_ms: i32, drift_ppm: i32) {
    with(|h| h.servers[server].clock = (i64::from(offset_ms) * 1000, i64::from(drift_ppm)));
}

/// Monotonic ms (module timers).
pub fn mono_ms() -> u64 {
    with(|h| h.mono_ms)
}

/// A new connection on `server`; its id. Fires CLIENT_CHANGE connected.
pub fn connect(server: usize) -> u64 {
    let id = fresh_id();
    with(|h| {
        h.servers[server].clients.insert(
            id,
            Client {
                id,
                db: 0,
                replies: VecDeque::new(),
                blocked: None,
                queue: VecDeque::new(),
                postponed: false,
                multi: None,
            },
        )
    });
    id
}

/// `client` sends one command to `server`: its reply, or None when the
/// reply comes later (the client blocked, was postponed by a pause, or
/// waits behind a command of its own that has not run). Blocked clients
/// whose keys were signalled are served after it, as Redis does after
/// each command.
pub fn command(server: usize, client: u64, argv: &[&[u8]]) -> Option<Reply> {
    let db = with(|h| h.servers[server].clients.get(&client).map_or(0, |c| c.db));
    command_db(server, client, db, argv)
}

/// [`command`] in `db` (the client selected it first, in the same
/// pipeline).
pub fn command_db(server: usize, client: u64, db: i32, argv: &[&[u8]]) -> Option<Reply> {
    let busy = with(|h| {
        let c = h.servers[server].clients.get_mut(&client)?;
        let busy = c.blocked.is_some() || c.postponed || !c.queue.is_empty();
        if busy {
            c.queue
                .push_back((db, argv.iter().map(|a| a.to_vec()).collect()));
        } else {
            c.db = db;
        }
        Some(busy)
    });
    match busy {
        // A closed connection sends nothing.
        None | Some(true) => return None,
        Some(false) => {}
    }
    let r = cmds::process(server, client, argv);
    handle_ready(server);
    r
}

/// `moduleCallCommandFilters`: the module's command filters see a
/// command's arguments and client before the server looks the command up.
pub(crate) fn run_filters(server: usize, client: u64, argv: &[&[u8]]) {
    let filters = with(|h| h.servers[server].filters.clone());
    if filters.is_empty() {
        return;
    }
    let mut fctx = api::FilterCtx {
        args: argv.iter().map(|a| FStr::make(a)).collect(),
        client,
    };
    for f in filters.into_iter().flatten() {
        let prev = enter(server);
        // SAFETY: a filter the module registered, with a host filter
        // context alive for the call.
        unsafe { f((&mut fctx as *mut api::FilterCtx).cast()) };
        leave(prev);
    }
    for a in fctx.args {
        // SAFETY: made above; a filter keeps no argument.
        unsafe { FStr::free(a) };
    }
}

/// Runs the queued commands of `client` (after it was unblocked or its
/// pause ended) until it blocks or is postponed again; their replies go to
/// its queue of replies.
fn drain_queue(server: usize, client: u64) {
    loop {
        let next = with(|h| {
            let c = h.servers[server].clients.get_mut(&client)?;
            if c.blocked.is_some() || c.postponed {
                return None;
            }
            let (db, argv) = c.queue.pop_front()?;
            c.db = db;
            Some(argv)
        });
        let Some(argv) = next else { return };
        let refs: Vec<&[u8]> = argv.iter().map(Vec::as_slice).collect();
        if let Some(r) = cmds::process(server, client, &refs) {
            deliver(server, client, r);
        }
        handle_ready(server);
    }
}

/// A reply sent to `client` outside its command's call (a blocked or
/// postponed client's), in sending order.
pub(crate) fn deliver(server: usize, client: u64, r: Reply) {
    let n = seq();
    with(|h| {
        if let Some(c) = h.servers[server].clients.get_mut(&client) {
            c.replies.push_back((n, r));
        }
    });
}

/// Runs the module's command `argv` for `client` with the extra context
/// `flags`: its reply, or None when the client blocked.
pub(crate) fn run_module(server: usize, client: u64, argv: &[&[u8]], flags: u32) -> Option<Reply> {
    let name = String::from_utf8_lossy(argv.first().copied().unwrap_or_default()).to_lowercase();
    let (func, db) = with(|h| {
        let s = &h.servers[server];
        (
            s.commands.get(&name).copied().flatten(),
            s.clients.get(&client).map_or(0, |c| c.db),
        )
    });
    let Some(func) = func else {
        return Some(Reply::Err(format!("ERR unknown command '{name}'")));
    };
    let mut ctx = FCtx::new(server, client, db);
    ctx.flags = flags;
    ctx.argv = argv.iter().map(|a| a.to_vec()).collect();
    let ctx = Box::into_raw(ctx);
    let args: Vec<*mut raw::RedisModuleString> = argv.iter().map(|a| FStr::make(a)).collect();
    let prev = enter(server);
    let was = running("call");
    // SAFETY: the module's command function, a host context and argv of
    // live strings, both alive for the call.
    unsafe { func(ctx.cast(), args.as_ptr().cast_mut(), args.len() as c_int) };
    running(was);
    leave(prev);
    // SAFETY: made above; the module keeps no pointer to a command's ctx.
    let ctx = unsafe { Box::from_raw(ctx) };
    for a in args {
        // SAFETY: the module keeps no command argument (no RetainString).
        unsafe { FStr::free(a) };
    }
    let blocked = with(|h| {
        let s = &mut h.servers[server];
        if let Some(c) = s.clients.get_mut(&client) {
            c.db = ctx.db;
        }
        s.clients.get(&client).is_some_and(|c| c.blocked.is_some())
    });
    let mut out = ctx.out;
    if blocked && out.is_empty() {
        return None;
    }
    Some(if out.len() == 1 {
        out.remove(0)
    } else {
        Reply::Array(out)
    })
}

thread_local! {
    /// What the server is running (for an assertion's report).
    static RUNNING: std::cell::Cell<&'static str> = const { std::cell::Cell::new("") };
}

/// Notes what the server runs now: the previous value, to put back.
fn running(what: &'static str) -> &'static str {
    RUNNING.with(|r| r.replace(what))
}

/// Propagates `argv` (in `db`) to `server`'s replicas and AOF — the
/// stream, which is both here — as `propagateNow` does, with its
/// assertion: nothing may propagate while clients are paused (the dataset
/// must stay fixed for a failover), when there is somewhere to propagate
/// to (a replication backlog or an AOF) and the server is not loading.
pub(crate) fn propagate(server: usize, db: i32, argv: Vec<Vec<u8>>) {
    let what = RUNNING.with(std::cell::Cell::get);
    with(|h| {
        if h.dry_run {
            return;
        }
        let s = &mut h.servers[server];
        let target = s.backlog || s.aof;
        if s.pause.is_some() && target && !s.loading && !s.replica && h.aborted.is_none() {
            let cmd: Vec<String> = argv
                .iter()
                .map(|a| match std::str::from_utf8(a) {
                    Ok(t) if t.chars().all(|c| c.is_ascii_graphic()) => t.to_owned(),
                    _ => format!("<{} bytes>", a.len()),
                })
                .collect();
            h.aborted = Some(format!(
                "=== ASSERTION FAILED === server {server} ({:?}): propagateNow: \
                 serverAssert({}), propagating `{}` from {} while clients are paused ({})",
                s.family,
                s.family.pause_assertion(),
                cmd.join(" "),
                if what.is_empty() {
                    "the event loop"
                } else {
                    what
                },
                match s.pause {
                    Some((true, _)) => "CLIENT PAUSE ALL",
                    _ => "CLIENT PAUSE WRITE or FAILOVER",
                }
            ));
        }
        s.repl.push((db, argv));
    });
}

/// The first assertion a server failed (it would have aborted), if any.
pub fn aborted() -> Option<String> {
    with(|h| h.aborted.clone())
}

/// Serves clients blocked on the keys signalled ready, in the order they
/// blocked, until no key is ready (a served client's callback may signal
/// more).
pub fn handle_ready(server: usize) {
    for _ in 0..10_000 {
        let ready = with(|h| std::mem::take(&mut h.servers[server].ready));
        if ready.is_empty() {
            return;
        }
        let mut seen: Vec<(i32, Vec<u8>)> = Vec::new();
        for k in ready {
            if !seen.contains(&k) {
                seen.push(k);
            }
        }
        for (db, key) in seen {
            let ids: Vec<u64> = with(|h| {
                h.servers[server]
                    .blocked
                    .iter()
                    .filter(|(_, b)| !b.done && b.db == db && b.key == key)
                    .map(|(id, _)| *id)
                    .collect()
            });
            for id in ids {
                serve_blocked(server, id);
            }
        }
    }
}

/// Runs a blocked client's reply callback for its ready key.
fn serve_blocked(server: usize, id: u64) {
    let Some((client, db, key, argv, cb, privdata)) = with(|h| {
        h.servers[server]
            .blocked
            .get(&id)
            .filter(|b| !b.done)
            .map(|b| {
                (
                    b.client,
                    b.db,
                    b.key.clone(),
                    b.argv.clone(),
                    b.reply_cb,
                    b.privdata,
                )
            })
    }) else {
        return;
    };
    let Some(cb) = cb else { return };
    let mut ctx = FCtx::new(server, client, db);
    ctx.privdata = privdata;
    ctx.ready_key = FStr::make(&key);
    let ctx = Box::into_raw(ctx);
    let args: Vec<*mut raw::RedisModuleString> = argv.iter().map(|a| FStr::make(a)).collect();
    let prev = enter(server);
    let was = running("handleClientsBlockedOnKeys (a blocked client served)");
    // SAFETY: the module's reply callback with a host context and argv.
    let status = unsafe { cb(ctx.cast(), args.as_ptr().cast_mut(), args.len() as c_int) };
    running(was);
    leave(prev);
    // SAFETY: made above.
    let ctx = unsafe { Box::from_raw(ctx) };
    for a in args {
        // SAFETY: not kept by the module.
        unsafe { FStr::free(a) };
    }
    // SAFETY: made above, not kept by the module (the ready key lives for
    // the callback).
    unsafe { FStr::free(ctx.ready_key) };
    for r in ctx.out {
        deliver(server, client, r);
    }
    with(|h| {
        let s = &mut h.servers[server];
        if status != raw::REDISMODULE_OK as c_int {
            return;
        }
        if let Some(b) = s.blocked.get_mut(&id) {
            b.done = true;
        }
        if let Some(c) = s.clients.get_mut(&client) {
            c.blocked = None;
        }
    });
}

/// Runs a blocked client's timeout callback (its wait ended, or the module
/// unblocked it): the reply goes to the client, which is unblocked.
fn time_out_blocked(server: usize, id: u64) {
    let Some((client, db, argv, cb, privdata)) = with(|h| {
        h.servers[server]
            .blocked
            .get_mut(&id)
            .filter(|b| !b.done)
            .map(|b| {
                b.done = true;
                (b.client, b.db, b.argv.clone(), b.timeout_cb, b.privdata)
            })
    }) else {
        return;
    };
    if let Some(cb) = cb {
        let mut ctx = FCtx::new(server, client, db);
        ctx.privdata = privdata;
        let ctx = Box::into_raw(ctx);
        let args: Vec<*mut raw::RedisModuleString> = argv.iter().map(|a| FStr::make(a)).collect();
        let prev = enter(server);
        let was = running("a blocked client's timeout");
        // SAFETY: the module's timeout callback with a host context.
        unsafe { cb(ctx.cast(), args.as_ptr().cast_mut(), args.len() as c_int) };
        running(was);
        leave(prev);
        // SAFETY: made above.
        let ctx = unsafe { Box::from_raw(ctx) };
        for a in args {
            // SAFETY: not kept.
            unsafe { FStr::free(a) };
        }
        for r in ctx.out {
            deliver(server, client, r);
        }
    }
    with(|h| {
        if let Some(c) = h.servers[server].clients.get_mut(&client) {
            c.blocked = None;
        }
    });
}

/// Frees the blocked clients that were unblocked (their free callbacks).
fn free_done_blocked(server: usize) {
    loop {
        let next = with(|h| {
            let s = &mut h.servers[server];
            let id = s.blocked.iter().find(|(_, b)| b.done).map(|(id, _)| *id)?;
            s.blocked.remove(&id)
        });
        let Some(b) = next else { return };
        if let Some(free) = b.free_cb {
            let ctx = Box::into_raw(FCtx::new(server, b.client, b.db));
            let prev = enter(server);
            // SAFETY: the module's free callback with its private data, once.
            unsafe { free(ctx.cast(), b.privdata) };
            leave(prev);
            // SAFETY: made above.
            drop(unsafe { Box::from_raw(ctx) });
        }
    }
}

/// One turn of the event loop of `server` before it sleeps: blocked
/// clients whose wait ended get their timeout reply, ready keys are
/// served, unblocked clients freed, next-turn callbacks run; then, when
/// `fire`, the timers due.
pub fn turn(server: usize, fire: bool) {
    // serverCron: a pause whose time is over ends; the clients it
    // postponed run their commands again (and may be postponed again).
    update_pause(server);
    resume_postponed(server);
    drain_unblocked(server);
    // beforeSleep's fast active-expire cycle (none on a replica or while
    // paused).
    expire_due(server);
    // clientsCron: connections blocked on a key whose slot this node no
    // longer serves are redirected.
    cluster::redirect_blocked(server);
    let now = server_now_ms(server);
    let expired: Vec<u64> = with(|h| {
        h.servers[server]
            .blocked
            .iter()
            .filter(|(_, b)| !b.done && b.timeout_at.is_some_and(|t| t <= now))
            .map(|(id, _)| *id)
            .collect()
    });
    for id in expired {
        time_out_blocked(server, id);
    }
    handle_ready(server);
    free_done_blocked(server);
    // Next-turn callbacks queued by these run at the next turn.
    let shots = with(|h| std::mem::take(&mut h.servers[server].oneshots));
    for (f, data) in shots {
        if let Some(f) = f {
            let prev = enter(server);
            // SAFETY: a one-shot the module queued with its data.
            unsafe { f(data) };
            leave(prev);
        }
    }
    handle_ready(server);
    if fire {
        fire_timers(server);
    }
    handle_ready(server);
    free_done_blocked(server);
}

/// Ends the pause of `server` when its time is over
/// (`checkClientPauseTimeoutAndReturnIfPaused`); whether it is paused.
pub fn update_pause(server: usize) -> bool {
    let now = server_now_ms(server);
    with(|h| {
        let mono = h.mono_ms;
        let s = &mut h.servers[server];
        if s.pause.is_some_and(|(_, end)| end < now) {
            s.pause = None;
            s.pause_ended = Some(mono);
        }
        s.pause.is_some()
    })
}

/// CLIENT PAUSE on `server` for `ms` (ALL or WRITE): the stricter of it
/// and a pause already on, until the later end.
pub fn pause(server: usize, all: bool, ms: u64) {
    let end = server_now_ms(server).saturating_add(ms);
    with(|h| {
        let s = &mut h.servers[server];
        s.pause = Some(match s.pause {
            Some((a, e)) => (a || all, e.max(end)),
            None => (all, end),
        });
    });
}

/// CLIENT UNPAUSE (or the end of FAILOVER's pause).
pub fn unpause(server: usize) {
    with(|h| {
        let mono = h.mono_ms;
        let s = &mut h.servers[server];
        if s.pause.take().is_some() {
            s.pause_ended = Some(mono);
        }
    });
}

/// Clients postponed by a pause that is over run their commands again, in
/// the order they were postponed.
fn resume_postponed(server: usize) {
    if with(|h| h.servers[server].pause.is_some()) {
        return;
    }
    let clients: Vec<u64> = with(|h| {
        let s = &mut h.servers[server];
        let clients: Vec<u64> = s.postponed.drain(..).collect();
        for c in &clients {
            if let Some(cl) = s.clients.get_mut(c) {
                cl.postponed = false;
            }
        }
        clients
    });
    for c in clients {
        drain_queue(server, c);
    }
}

/// `processUnblockedClients`: clients no longer blocked or postponed run
/// the commands they sent meanwhile (in the order they were unblocked:
/// here, of their ids).
fn drain_unblocked(server: usize) {
    let ready: Vec<u64> = with(|h| {
        h.servers[server]
            .clients
            .values()
            .filter(|c| c.blocked.is_none() && !c.postponed && !c.queue.is_empty())
            .map(|c| c.id)
            .collect()
    });
    for c in ready {
        drain_queue(server, c);
    }
}

/// Runs the timers due at the current time, in due order.
pub fn fire_timers(server: usize) {
    let now = mono_ms();
    for _ in 0..100_000 {
        let next = with(|h| {
            let s = &mut h.servers[server];
            let k = *s.timers.keys().next()?;
            if k.0 > now {
                return None;
            }
            s.timers.remove(&k).map(|t| (t, s.temp_client))
        });
        let Some((t, temp)) = next else { return };
        if std::env::var_os("SIM_TRACE_TIMERS").is_some() {
            eprintln!("  timer fires on server {server} at mono {now}");
        }
        if let Some(cb) = t.cb {
            let ctx = Box::into_raw(FCtx::new(server, temp, 0));
            let prev = enter(server);
            let was = running("moduleTimerHandler -> moduleFreeContext");
            // SAFETY: a timer the module armed, with its data.
            unsafe { cb(ctx.cast(), t.data) };
            running(was);
            leave(prev);
            // SAFETY: made above.
            let c = unsafe { Box::from_raw(ctx) };
            debug_assert!(c.out.is_empty());
        }
        handle_ready(server);
    }
}

/// The earliest timer's due time (monotonic ms), if any.
pub fn next_timer(server: usize) -> Option<u64> {
    with(|h| h.servers[server].timers.keys().next().map(|k| k.0))
}

/// Whether next-turn callbacks wait, or blocked clients are to be freed.
pub fn turn_pending(server: usize) -> bool {
    with(|h| {
        let s = &h.servers[server];
        !s.oneshots.is_empty() || !s.ready.is_empty() || s.blocked.values().any(|b| b.done)
    })
}

/// The connection `client` closes: CLIENT_CHANGE disconnected fires first,
/// then a blocked client's disconnect callback (and its free at the next
/// turn), as Redis' freeClient does.
pub fn disconnect(server: usize, client: u64) {
    let db = with(|h| h.servers[server].clients.get(&client).map(|c| c.db));
    let Some(db) = db else { return };
    // SAFETY: an all-zero client info is a valid value (integers, arrays).
    let mut info: raw::RedisModuleClientInfo = unsafe { std::mem::zeroed() };
    info.version = 1;
    info.id = client;
    info.db = db as u16 as _;
    let was = running("freeClient (a connection closed)");
    // SAFETY: the event's data (or null) lives on this stack for the call.
    unsafe {
        fire_event(
            server,
            raw::REDISMODULE_EVENT_CLIENT_CHANGE,
            raw::REDISMODULE_SUBEVENT_CLIENT_CHANGE_DISCONNECTED,
            (&mut info as *mut raw::RedisModuleClientInfo).cast(),
        )
    };
    let bc = with(|h| {
        h.servers[server]
            .clients
            .get(&client)
            .and_then(|c| c.blocked)
    });
    if let Some(id) = bc {
        unblock_client(server, id);
    }
    running(was);
    with(|h| {
        let s = &mut h.servers[server];
        s.clients.remove(&client);
        s.postponed.retain(|c| *c != client);
    });
}

/// `unblockClient` of a client blocked by the module on keys, not by its
/// timeout (the connection closed, CLIENT UNBLOCK ERROR, a cluster
/// redirect, a demotion): `unblockClientFromModule` runs its disconnect
/// callback, and its free callback runs at the next turn. The client is
/// no longer blocked.
pub(crate) fn unblock_client(server: usize, id: u64) {
    let cb = with(|h| {
        h.servers[server].blocked.get_mut(&id).map(|b| {
            let was_done = std::mem::replace(&mut b.done, true);
            (b.disconnect_cb, b.privdata, b.db, b.client, was_done)
        })
    });
    let Some((cb, privdata, db, client, was_done)) = cb else {
        return;
    };
    if let (Some(cb), false) = (cb, was_done) {
        let mut ctx = FCtx::new(server, client, db);
        ctx.privdata = privdata;
        let ctx = Box::into_raw(ctx);
        let prev = enter(server);
        // SAFETY: the module's disconnect callback with the handle it
        // was given (the id as an opaque pointer).
        unsafe {
            cb(
                ctx.cast(),
                id as usize as *mut raw::RedisModuleBlockedClient,
            )
        };
        leave(prev);
        // SAFETY: made above.
        drop(unsafe { Box::from_raw(ctx) });
    }
    with(|h| {
        if let Some(c) = h.servers[server].clients.get_mut(&client) {
            if c.blocked == Some(id) {
                c.blocked = None;
            }
        }
    });
}

/// CLIENT UNBLOCK `client` TIMEOUT (or ERROR): for a client blocked by the
/// module with a timeout callback, TIMEOUT runs that callback (it
/// replies); ERROR replies `-UNBLOCKED` and unblocks it as a closed
/// connection's wait is (its disconnect callback runs). 1 when it was
/// blocked so, else 0.
pub fn client_unblock(server: usize, client: u64, error: bool) -> i64 {
    let id = with(|h| {
        let s = &h.servers[server];
        let id = s.clients.get(&client)?.blocked?;
        s.blocked
            .get(&id)
            .filter(|b| !b.done && b.timeout_cb.is_some())
            .map(|_| id)
    });
    let Some(id) = id else { return 0 };
    if error {
        deliver(
            server,
            client,
            Reply::Err("UNBLOCKED client unblocked via CLIENT UNBLOCK".into()),
        );
        unblock_client(server, id);
    } else {
        time_out_blocked(server, id);
    }
    1
}

/// `disconnectAllBlockedClients`, when a master becomes a replica: every
/// client blocked by the module is answered `-UNBLOCKED` and unblocked.
pub fn unblock_all(server: usize) {
    let ids: Vec<(u64, u64)> = with(|h| {
        h.servers[server]
            .blocked
            .iter()
            .filter(|(_, b)| !b.done)
            .map(|(id, b)| (*id, b.client))
            .collect()
    });
    for (id, client) in ids {
        deliver(
            server,
            client,
            Reply::Err(
                "UNBLOCKED force unblock from blocking operation, instance state changed (master -> replica?)"
                    .into(),
            ),
        );
        unblock_client(server, id);
    }
}

/// Fires server event `id`/`sub` with `data` to the module's subscribers.
///
/// # Safety
/// `data` is null (for the events that carry none) or points to the data
/// structure the server passes with event `id` (version 1), valid for the
/// call.
pub(crate) unsafe fn fire_event(server: usize, id: u64, sub: u64, data: *mut c_void) {
    let subs: Vec<raw::RedisModuleEventCallback> = with(|h| {
        h.servers[server]
            .event_subs
            .iter()
            .filter(|(e, _)| *e == id)
            .map(|(_, f)| *f)
            .collect()
    });
    let temp = with(|h| h.servers[server].temp_client);
    for f in subs.into_iter().flatten() {
        let ctx = Box::into_raw(FCtx::new(server, temp, 0));
        let prev = enter(server);
        // SAFETY: a subscriber the module registered; the event's data
        // lives for the call.
        unsafe {
            f(
                ctx.cast(),
                raw::RedisModuleEvent { id, dataver: 1 },
                sub,
                data,
            )
        };
        leave(prev);
        // SAFETY: made above.
        drop(unsafe { Box::from_raw(ctx) });
    }
}

/// Fires keyspace event `event` of `key` in `db`.
pub fn notify(server: usize, types: c_int, event: &str, db: i32, key: &[u8]) {
    if with(|h| h.dry_run) {
        return;
    }
    let subs: Vec<raw::RedisModuleNotificationFunc> = with(|h| {
        h.servers[server]
            .keyspace_subs
            .iter()
            .filter(|(t, _)| t & types != 0)
            .map(|(_, f)| *f)
            .collect()
    });
    // Valkey 8.1 runs the callbacks on the client whose command fired the
    // event and selects the event's db on it without selecting back (valkey
    // PR #1819, fixed by #4024): what the module's SelectDb leaves there is
    // that client's db afterwards. The others run them on a temporary
    // client.
    let (temp, on_caller) = with(|h| {
        let s = &h.servers[server];
        let caller = EXECUTING
            .with(std::cell::Cell::get)
            .filter(|(sv, c)| *sv == server && s.clients.contains_key(c))
            .map(|(_, c)| c);
        (
            s.temp_client,
            caller.filter(|_| s.family == Family::Valkey81),
        )
    });
    let ev = CString::new(event).unwrap_or_default();
    for f in subs.into_iter().flatten() {
        let ctx = Box::into_raw(FCtx::new(server, on_caller.unwrap_or(temp), db));
        let k = FStr::make(key);
        let prev = enter(server);
        // SAFETY: a subscriber the module registered, with live strings.
        unsafe { f(ctx.cast(), types, ev.as_ptr(), k) };
        leave(prev);
        // SAFETY: made above; the module copies what it keeps.
        unsafe { FStr::free(k) };
        // SAFETY: made above.
        let ctx = unsafe { Box::from_raw(ctx) };
        if let Some(c) = on_caller {
            with(|h| {
                if let Some(cl) = h.servers[server].clients.get_mut(&c) {
                    cl.db = ctx.db;
                }
            });
        }
    }
}

thread_local! {
    /// The client whose command runs (`server.executing_client`): (server,
    /// client).
    static EXECUTING: std::cell::Cell<Option<(usize, u64)>> = const { std::cell::Cell::new(None) };
}

/// Runs `f` with `client` of `server` as the executing client.
pub(crate) fn executing<R>(server: usize, client: u64, f: impl FnOnce() -> R) -> R {
    let prev = EXECUTING.with(|e| e.replace(Some((server, client))));
    let r = f();
    EXECUTING.with(|e| e.set(prev));
    r
}

/// The type's methods (registered at load).
fn methods(server: usize) -> Option<raw::RedisModuleTypeMethods> {
    with(|h| h.servers[server].methods)
}

/// Removes the key's entry, calling the type's unlink and (when `free`)
/// free callbacks for a module value, as dbGenericDelete does. The value
/// when not freed.
pub fn unlink_key(server: usize, db: i32, key: &[u8], free: bool) -> Option<Value> {
    let e = with(|h| h.servers[server].dbs[db as usize].remove(key))?;
    if let Value::Module(v) = e.value {
        if let Some(m) = methods(server) {
            if let Some(unlink2) = m.unlink2 {
                let name = FStr::make(key);
                let mut octx = api::OptCtx { key: name, db };
                let prev = enter(server);
                // SAFETY: the module's unlink hook with its value.
                unsafe { unlink2((&mut octx as *mut api::OptCtx).cast(), v) };
                leave(prev);
                // SAFETY: made above.
                unsafe { FStr::free(name) };
            }
            if free {
                // SAFETY: the value was just taken out of its key (or its db): ours alone.
                unsafe { free_value(server, v) };
                return None;
            }
        }
        return Some(Value::Module(v));
    }
    if free {
        None
    } else {
        Some(e.value)
    }
}

/// Frees a module value through the type's free callback.
///
/// # Safety
/// `v` is a value of the module's type that the caller owns (taken out of
/// a key of `server`) and that nothing else reaches: it is freed here.
pub(crate) unsafe fn free_value(server: usize, v: *mut c_void) {
    if let Some(free) = methods(server).and_then(|m| m.free) {
        let prev = enter(server);
        // SAFETY: a value of the module's type, freed once.
        unsafe { free(v) };
        leave(prev);
    }
}

/// Deletes the keys whose expire time has passed (a master's active
/// expiry): unlink, free, `expired`.
pub fn expire_due(server: usize) {
    // A paused server keeps its dataset as it is (PAUSE_ACTION_EXPIRE).
    if update_pause(server) {
        return;
    }
    let now = server_now_ms(server);
    let due: Vec<(i32, Vec<u8>)> = with(|h| {
        let s = &h.servers[server];
        if s.replica {
            return Vec::new();
        }
        s.dbs
            .iter()
            .enumerate()
            .flat_map(|(db, d)| {
                d.iter()
                    .filter(|(_, e)| e.expire_at.is_some_and(|t| t <= now))
                    .map(move |(k, _)| (db as i32, k.clone()))
            })
            .collect()
    });
    for (db, key) in due {
        unlink_key(server, db, &key, true);
        propagate(server, db, vec![b"DEL".to_vec(), key.clone()]);
        notify(server, raw::REDISMODULE_NOTIFY_EXPIRED, "expired", db, &key);
    }
}

/// Advances the clock by `ms`.
pub fn advance(ms: u64) {
    with(|h| {
        h.now_us += ms * 1000;
        h.mono_ms += ms;
    });
}

/// Sets the clock (a jump, either way).
pub fn set_now_us(us: u64) {
    with(|h| h.now_us = us);
}

/// `INFO dlock` of `server` as (field, value) text pairs.
pub fn info(server: usize) -> Vec<(String, String)> {
    let f = with(|h| h.servers[server].info_fn);
    let Some(f) = f else { return Vec::new() };
    let mut ictx = api::InfoCtx { fields: Vec::new() };
    let prev = enter(server);
    // SAFETY: the module's info function with a host info context.
    unsafe { f((&mut ictx as *mut api::InfoCtx).cast(), 0) };
    leave(prev);
    ictx.fields
}

/// Module-owned bytes now (allocations made through RedisModule_Alloc
/// and not freed).
pub fn module_bytes() -> i64 {
    with(|h| h.module_bytes)
}

/// The host's allocator, for what the module frees with RedisModule_Free.
///
/// # Safety
/// As `malloc`.
pub(crate) unsafe fn api_alloc(n: usize) -> *mut c_void {
    // SAFETY: the caller's contract.
    unsafe { api::alloc(n) }
}

pub(crate) fn log_line(level: &str, line: &str) {
    with(|h| {
        h.log.push(format!("[{level}] {line}"));
        if h.log.len() > 200 {
            h.log.remove(0);
        }
    });
}

#[allow(dead_code)]
fn _types(_: c_long, _: c_longlong, _: *const c_char) {}

/// The keys of `db` holding module values.
pub fn module_keys(server: usize, db: i32) -> Vec<Vec<u8>> {
    with(|h| {
        h.servers[server].dbs[db as usize]
            .iter()
            .filter(|(_, e)| matches!(e.value, Value::Module(_)))
            .map(|(k, _)| k.clone())
            .collect()
    })
}

/// Takes the replies `client` received since the last call.
pub fn take_replies(server: usize, client: u64) -> Vec<(u64, Reply)> {
    with(|h| {
        h.servers[server]
            .clients
            .get_mut(&client)
            .map(|c| c.replies.drain(..).collect())
            .unwrap_or_default()
    })
}

/// Whether `client` is blocked.
pub fn is_blocked(server: usize, client: u64) -> bool {
    with(|h| {
        h.servers[server]
            .clients
            .get(&client)
            .is_some_and(|c| c.blocked.is_some())
    })
}

/// The latest log lines (module warnings), for a violation's detail.
pub fn log_tail() -> String {
    with(|h| {
        h.log
            .iter()
            .rev()
            .take(10)
            .rev()
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    })
}

// ---- replication, restarts, promotion ------------------------------------

/// Applies `from`'s replication stream from entry `start` to `to`, as a
/// replica applies its master's link (or a start replays an AOF): DLOCK.*
/// commands run on a client of `to` with the REPLICATED flag (LOADING
/// comes from `to` loading), keyspace commands as the server runs them.
/// The index to resume from.
pub fn apply_stream(from: usize, to: usize, start: usize, client: u64) -> usize {
    apply_stream_to(from, to, start, usize::MAX, client)
}

/// [`apply_stream`] up to entry `end` (exclusive) at most: a replica that
/// lags.
pub fn apply_stream_to(from: usize, to: usize, start: usize, end: usize, client: u64) -> usize {
    let entries: Vec<(i32, Vec<Vec<u8>>)> = with(|h| {
        let repl = &h.servers[from].repl;
        let end = end.min(repl.len());
        repl.get(start..end).map(<[_]>::to_vec).unwrap_or_default()
    });
    let end = start + entries.len();
    for (db, argv) in entries {
        with(|h| {
            if let Some(c) = h.servers[to].clients.get_mut(&client) {
                c.db = db;
            }
        });
        let refs: Vec<&[u8]> = argv.iter().map(Vec::as_slice).collect();
        run_filters(to, client, &refs);
        with(|h| h.servers[to].from_master = true);
        cmds::exec(to, client, db, &refs, Caller::Master);
        with(|h| h.servers[to].from_master = false);
        handle_ready(to);
    }
    end
}

/// Loads `to` (empty, just loaded) from `from`'s AOF: its replication
/// stream since the start, replayed while loading.
pub fn load_aof(from: usize, to: usize) {
    with(|h| h.servers[to].loading = true);
    // SAFETY: the event's data (or null) lives on this stack for the call.
    unsafe {
        fire_event(
            to,
            raw::REDISMODULE_EVENT_LOADING,
            raw::REDISMODULE_SUBEVENT_LOADING_AOF_START,
            ptr::null_mut(),
        )
    };
    // Redis 7's multi-part AOF: its base (the RDB preamble of the last
    // rewrite: here the state the server started from), then the commands
    // since.
    let base = with(|h| h.servers[from].aof_base.clone());
    if let Some(base) = &base {
        rdb::load_items(to, base, &mut || {});
    }
    with(|h| h.servers[to].aof_base = base);
    let client = connect(to);
    apply_stream(from, to, 0, client);
    with(|h| h.servers[to].clients.remove(&client));
    with(|h| h.servers[to].loading = false);
    // SAFETY: the event's data (or null) lives on this stack for the call.
    unsafe {
        fire_event(
            to,
            raw::REDISMODULE_EVENT_LOADING,
            raw::REDISMODULE_SUBEVENT_LOADING_ENDED,
            ptr::null_mut(),
        )
    };
}

/// Makes `server` a replica (its commands from the master link) or a
/// master, firing the role event on a change.
pub fn set_role(server: usize, replica: bool) {
    let was = with(|h| std::mem::replace(&mut h.servers[server].replica, replica));
    if was != replica {
        let sub = if replica {
            raw::REDISMODULE_EVENT_REPLROLECHANGED_NOW_REPLICA
        } else {
            raw::REDISMODULE_EVENT_REPLROLECHANGED_NOW_MASTER
        };
        // SAFETY: the event's data (or null) lives on this stack for the call.
        unsafe {
            fire_event(
                server,
                raw::REDISMODULE_EVENT_REPLICATION_ROLE_CHANGED,
                sub,
                ptr::null_mut(),
            )
        };
    }
}

/// The length of `server`'s replication stream.
pub fn stream_len(server: usize) -> usize {
    with(|h| h.servers[server].repl.len())
}

// ---- server states the simulation sets -----------------------------------

/// Runs `argv` on `server` as a script run by `client` does (the command's
/// context says so; nothing blocks), in `db`.
pub fn script_command(server: usize, client: u64, db: i32, argv: &[&[u8]]) -> Option<Reply> {
    let r = cmds::exec(server, client, db, argv, Caller::Script);
    handle_ready(server);
    r
}

/// Whether `key` exists in `db` of `server` with its TTL (if any) not
/// passed by that server's clock.
pub fn key_alive(server: usize, db: i32, key: &[u8]) -> bool {
    let now = server_now_ms(server);
    with(|h| {
        h.servers[server].dbs[db as usize]
            .get(key)
            .is_some_and(|e| e.expire_at.is_none_or(|t| t > now))
    })
}

/// Whether `server` is paused (its pause's time over or not).
pub fn paused(server: usize) -> bool {
    with(|h| h.servers[server].pause.is_some())
}

/// Used memory of `server` over maxmemory (`deny-oom` commands refused),
/// or back under it.
pub fn set_oom(server: usize, on: bool) {
    with(|h| h.servers[server].oom = on);
}

/// appendonly on `server`: the AOF is somewhere to propagate to.
pub fn set_aof(server: usize, on: bool) {
    with(|h| h.servers[server].aof = on);
}

/// A replica attached to `server`: its replication backlog exists from
/// now on (something to propagate to, even with no replica connected).
pub fn set_backlog(server: usize) {
    with(|h| h.servers[server].backlog = true);
}

/// Connections of `server` (for the liveness phase: which still wait).
pub fn clients_waiting(server: usize) -> Vec<u64> {
    with(|h| {
        h.servers[server]
            .clients
            .values()
            .filter(|c| c.blocked.is_some() || c.postponed || !c.queue.is_empty())
            .map(|c| c.id)
            .collect()
    })
}
