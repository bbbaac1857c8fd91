//! RDB payloads through the module type's own callbacks: DUMP and RESTORE
//! of one key, and a whole snapshot (aux data, then every key) loaded into
//! another server, as a restart or a full sync does.

use super::{enter, leave, methods, notify, unlink_key, with, Entry, FStr, Value};
use redis_module::raw;
use std::ffi::{c_char, c_int, c_void};
use std::ptr;

/// One value the type saved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Item {
    Buf(Vec<u8>),
    U64(u64),
}

/// The IO handle the type's callbacks get.
struct Io {
    items: Vec<Item>,
    pos: usize,
    error: bool,
    key: *mut raw::RedisModuleString,
    db: c_int,
    /// EmitAOF's commands.
    aof: Vec<Vec<Vec<u8>>>,
}

impl Io {
    fn new(items: Vec<Item>, key: &[u8], db: i32) -> Io {
        Io {
            items,
            pos: 0,
            error: false,
            key: FStr::make(key),
            db,
            aof: Vec::new(),
        }
    }
}

impl Drop for Io {
    fn drop(&mut self) {
        // SAFETY: made in Io::new, not kept by the module.
        unsafe { FStr::free(self.key) };
    }
}

/// The [`Io`] behind a handle.
///
/// # Safety
/// `p` is null or an IO handle made here (an [`Io`]) for the callback that
/// is running, and no other reference to it lives meanwhile.
unsafe fn io<'a>(p: *mut raw::RedisModuleIO) -> Option<&'a mut Io> {
    // SAFETY: the caller's contract.
    unsafe { p.cast::<Io>().as_mut() }
}

pub unsafe extern "C" fn save_string_buffer(
    p: *mut raw::RedisModuleIO,
    s: *const c_char,
    len: usize,
) {
    let b = if s.is_null() {
        Vec::new()
    } else {
        // SAFETY: len bytes at s.
        unsafe { std::slice::from_raw_parts(s.cast::<u8>(), len) }.to_vec()
    };
    if let Some(io) = io(p) {
        io.items.push(Item::Buf(b));
    }
}

pub unsafe extern "C" fn load_string_buffer(
    p: *mut raw::RedisModuleIO,
    len: *mut usize,
) -> *mut c_char {
    let Some(io) = io(p) else {
        return ptr::null_mut();
    };
    let Some(Item::Buf(b)) = io.items.get(io.pos).cloned() else {
        io.error = true;
        return ptr::null_mut();
    };
    io.pos += 1;
    // The module frees it with RedisModule_Free.
    // SAFETY: the host's allocator (counted), b.len() bytes copied in.
    let out = unsafe { super::api_alloc(b.len().max(1)) }.cast::<c_char>();
    if out.is_null() {
        io.error = true;
        return ptr::null_mut();
    }
    // SAFETY: out holds at least b.len() bytes.
    unsafe { ptr::copy_nonoverlapping(b.as_ptr().cast::<c_char>(), out, b.len()) };
    if !len.is_null() {
        // SAFETY: a place for the length.
        unsafe { *len = b.len() };
    }
    out
}

pub unsafe extern "C" fn save_unsigned(p: *mut raw::RedisModuleIO, v: u64) {
    if let Some(io) = io(p) {
        io.items.push(Item::U64(v));
    }
}

pub unsafe extern "C" fn load_unsigned(p: *mut raw::RedisModuleIO) -> u64 {
    let Some(io) = io(p) else { return 0 };
    match io.items.get(io.pos) {
        Some(Item::U64(v)) => {
            io.pos += 1;
            *v
        }
        _ => {
            io.error = true;
            0
        }
    }
}

pub unsafe extern "C" fn is_io_error(p: *mut raw::RedisModuleIO) -> c_int {
    io(p).map_or(1, |io| c_int::from(io.error))
}

pub unsafe extern "C" fn key_name_from_io(
    p: *mut raw::RedisModuleIO,
) -> *const raw::RedisModuleString {
    io(p).map_or(ptr::null(), |io| io.key)
}

pub unsafe extern "C" fn db_id_from_io(p: *mut raw::RedisModuleIO) -> c_int {
    io(p).map_or(0, |io| io.db)
}

pub unsafe extern "C" fn digest_add(_: *mut raw::RedisModuleDigest, _: *const c_char, _: usize) {}

pub unsafe extern "C" fn digest_end(_: *mut raw::RedisModuleDigest) {}

#[no_mangle]
unsafe extern "C" fn sim_emit_aof_argv(
    p: *mut c_void,
    cmd: *const c_char,
    args: *const super::api::SimArgs,
) {
    let Some(io) = io(p.cast()) else { return };
    let mut argv = vec![if cmd.is_null() {
        Vec::new()
    } else {
        // SAFETY: a C string.
        unsafe { std::ffi::CStr::from_ptr(cmd) }.to_bytes().to_vec()
    }];
    // SAFETY: the shim's block, alive for the call.
    if let Some(a) = unsafe { args.as_ref() } {
        argv.extend(a.list());
    }
    io.aof.push(argv);
}

/// DUMP: the key's value as the type saves it; None when the key holds
/// no module value.
pub fn dump(server: usize, db: i32, key: &[u8]) -> Option<Vec<Item>> {
    let v = with(|h| match h.servers[server].dbs[db as usize].get(key) {
        Some(Entry {
            value: Value::Module(v),
            ..
        }) => Some(*v),
        _ => None,
    })?;
    let save = methods(server)?.rdb_save?;
    let mut io = Io::new(Vec::new(), key, db);
    let prev = enter(server);
    // SAFETY: the type's save with its own value and a host IO.
    unsafe { save((&mut io as *mut Io).cast(), v) };
    leave(prev);
    Some(std::mem::take(&mut io.items))
}

/// The commands the type's AOF rewrite emits for the key's value; None
/// when the key holds no module value.
pub fn aof_rewrite(server: usize, db: i32, key: &[u8]) -> Option<Vec<Vec<Vec<u8>>>> {
    let v = with(|h| match h.servers[server].dbs[db as usize].get(key) {
        Some(Entry {
            value: Value::Module(v),
            ..
        }) => Some(*v),
        _ => None,
    })?;
    let rewrite = methods(server)?.aof_rewrite?;
    let mut io = Io::new(Vec::new(), key, db);
    let name = FStr::make(key);
    let prev = enter(server);
    // SAFETY: the type's AOF rewrite with a host IO, the key's name and its
    // own value.
    unsafe { rewrite((&mut io as *mut Io).cast(), name, v) };
    leave(prev);
    // SAFETY: made above; the module does not keep it.
    unsafe { FStr::free(name) };
    Some(std::mem::take(&mut io.aof))
}

/// Loads a value from `items` through the type's load; None when it
/// refused the payload.
fn load(server: usize, db: i32, key: &[u8], items: Vec<Item>) -> Option<*mut c_void> {
    let m = methods(server)?;
    let load = m.rdb_load?;
    let encver = with(|h| h.servers[server].encver);
    let mut io = Io::new(items, key, db);
    let prev = enter(server);
    // SAFETY: the type's load with a host IO.
    let v = unsafe { load((&mut io as *mut Io).cast(), encver) };
    leave(prev);
    (!v.is_null()).then_some(v)
}

/// Registers a payload DUMP gave out: the reference RESTORE takes back.
pub fn register_dump(items: Vec<Item>) -> Vec<u8> {
    with(|h| {
        h.dumps.push(items);
        format!("\0dump:{}", h.dumps.len() - 1).into_bytes()
    })
}

/// The payload a DUMP reference names.
pub fn dumped(reference: &[u8]) -> Option<Vec<Item>> {
    let n: usize = std::str::from_utf8(reference.strip_prefix(b"\0dump:")?)
        .ok()?
        .parse()
        .ok()?;
    with(|h| h.dumps.get(n).cloned())
}

/// RESTORE key 0 payload REPLACE: the old value goes (unlink, free), the
/// payload's is loaded, `restore` fires; propagated as the same RESTORE.
/// False when the type refused the payload.
pub fn restore(server: usize, db: i32, key: &[u8], reference: &[u8]) -> bool {
    let Some(items) = dumped(reference) else {
        return false;
    };
    let Some(v) = load(server, db, key, items) else {
        return false;
    };
    super::propagate(
        server,
        db,
        vec![
            b"RESTORE".to_vec(),
            key.to_vec(),
            b"0".to_vec(),
            reference.to_vec(),
            b"REPLACE".to_vec(),
        ],
    );
    unlink_key(server, db, key, true);
    with(|h| {
        h.servers[server].dbs[db as usize].insert(
            key.to_vec(),
            Entry {
                value: Value::Module(v),
                expire_at: None,
            },
        )
    });
    notify(server, raw::REDISMODULE_NOTIFY_GENERIC, "restore", db, key);
    true
}

/// One key of a snapshot: db, name, payload, expire time.
type SavedKey = (i32, Vec<u8>, Vec<Item>, Option<u64>);

/// A snapshot: the aux data saved before the keys, then each key.
#[derive(Clone, Default)]
pub struct Snapshot {
    aux: Vec<Item>,
    /// (db, key, payload, expire time).
    keys: Vec<SavedKey>,
}

/// Saves `server` as an RDB does.
/// The type's aux data, as an RDB saves it before the keys: through
/// `aux_save2` where the server has it (Redis 7.2+, Valkey: type methods
/// version 5), which may write nothing (then the RDB has no aux field of the
/// module's), else `aux_save`.
fn save_aux(server: usize) -> Vec<Item> {
    let family = with(|h| h.servers[server].family);
    let Some(m) = methods(server) else {
        return Vec::new();
    };
    let f = match (family, m.aux_save2) {
        (super::Family::Redis70, _) | (_, None) => m.aux_save,
        (_, Some(f2)) => Some(f2),
    };
    let Some(f) = f else {
        return Vec::new();
    };
    let mut io = Io::new(Vec::new(), b"", 0);
    let prev = enter(server);
    // SAFETY: the type's aux save with a host IO.
    unsafe {
        f(
            (&mut io as *mut Io).cast(),
            raw::REDISMODULE_AUX_BEFORE_RDB as c_int,
        )
    };
    leave(prev);
    std::mem::take(&mut io.items)
}

pub fn save(server: usize) -> Snapshot {
    let aux = save_aux(server);
    let names: Vec<(i32, Vec<u8>, Option<u64>)> = with(|h| {
        h.servers[server]
            .dbs
            .iter()
            .enumerate()
            .flat_map(|(db, d)| {
                d.iter()
                    .filter(|(_, e)| matches!(e.value, Value::Module(_)))
                    .map(move |(k, e)| (db as i32, k.clone(), e.expire_at))
            })
            .collect()
    });
    let keys = names
        .into_iter()
        .filter_map(|(db, k, at)| dump(server, db, &k).map(|items| (db, k, items, at)))
        .collect();
    Snapshot { aux, keys }
}

/// The token counter `server`'s module saves as its aux data (0: none).
pub fn last_token(server: usize) -> i64 {
    let snap = save_aux(server);
    match snap.as_slice() {
        [Item::U64(t), ..] => i64::try_from(*t).unwrap_or(i64::MAX),
        _ => 0,
    }
}

/// Loads `snap` into the empty `server` as a start from an RDB does:
/// LOADING start, aux, each key with its `loaded` event, LOADING ended.
pub fn load_snapshot(server: usize, snap: &Snapshot) {
    load_snapshot_with(server, snap, &mut || {});
}

/// [`load_snapshot`], calling `midway` when half the keys are loaded (the
/// server answers its clients meanwhile, as `processEventsWhileBlocked`
/// lets it).
pub fn load_snapshot_with(server: usize, snap: &Snapshot, midway: &mut dyn FnMut()) {
    // Its AOF (when it writes one) starts with this as its base.
    with(|h| {
        let s = &mut h.servers[server];
        s.loading = true;
        s.aof_base = Some(snap.clone());
    });
    // SAFETY: the LOADING events carry no data (null).
    unsafe {
        super::fire_event(
            server,
            raw::REDISMODULE_EVENT_LOADING,
            raw::REDISMODULE_SUBEVENT_LOADING_RDB_START,
            ptr::null_mut(),
        )
    };
    load_items(server, snap, midway);
    with(|h| h.servers[server].loading = false);
    // SAFETY: the LOADING events carry no data (null).
    unsafe {
        super::fire_event(
            server,
            raw::REDISMODULE_EVENT_LOADING,
            raw::REDISMODULE_SUBEVENT_LOADING_ENDED,
            ptr::null_mut(),
        )
    };
}

/// The aux data and keys of `snap` loaded into `server` (which is loading).
pub(super) fn load_items(server: usize, snap: &Snapshot, midway: &mut dyn FnMut()) {
    // (No aux field of the module's in the RDB: aux_load is not called.)
    if let Some(f) = methods(server)
        .and_then(|m| m.aux_load)
        .filter(|_| !snap.aux.is_empty())
    {
        let encver = with(|h| h.servers[server].encver);
        let mut io = Io::new(snap.aux.clone(), b"", 0);
        let prev = enter(server);
        // SAFETY: the type's aux load with a host IO.
        unsafe {
            f(
                (&mut io as *mut Io).cast(),
                encver,
                raw::REDISMODULE_AUX_BEFORE_RDB as c_int,
            )
        };
        leave(prev);
    }
    let (replica, now) = (
        with(|h| h.servers[server].replica),
        super::server_now_ms(server),
    );
    let half = snap.keys.len() / 2;
    if snap.keys.is_empty() {
        midway();
    }
    for (i, (db, k, items, at)) in snap.keys.iter().enumerate() {
        if i == half {
            midway();
        }
        // A master does not load a key whose time passed; a replica does
        // (its master's DEL will come).
        if !replica && at.is_some_and(|t| t <= now) {
            continue;
        }
        if let Some(v) = load(server, *db, k, items.clone()) {
            with(|h| {
                h.servers[server].dbs[*db as usize].insert(
                    k.clone(),
                    Entry {
                        value: Value::Module(v),
                        expire_at: *at,
                    },
                )
            });
            notify(server, raw::REDISMODULE_NOTIFY_LOADED, "loaded", *db, k);
        }
    }
}
