//! Keyspace commands on lock keys, as Redis 7 runs them where the module
//! can tell (the order of unlink, free and the keyspace events), each
//! propagating itself as the server does.

use super::{fire_event, free_value, notify, propagate, unlink_key, with, Entry, Value};
use redis_module::raw;

/// DEL: unlink, free, then `del`.
pub fn del(server: usize, db: i32, key: &[u8]) -> bool {
    let exists = with(|h| h.servers[server].dbs[db as usize].contains_key(key));
    if !exists {
        return false;
    }
    unlink_key(server, db, key, true);
    propagate(server, db, vec![b"DEL".to_vec(), key.to_vec()]);
    notify(server, raw::REDISMODULE_NOTIFY_GENERIC, "del", db, key);
    true
}

/// Puts the value (and expire time) of `from` at `to` too, as RENAME and
/// MOVE do before they unlink the source: one module value at two names
/// until then.
fn share_entry(server: usize, from: (i32, &[u8]), to: (i32, &[u8])) {
    with(|h| {
        let dbs = &mut h.servers[server].dbs;
        let Some(e) = dbs[from.0 as usize].get(from.1) else {
            return;
        };
        let value = match &e.value {
            Value::Module(p) => Value::Module(*p),
            Value::Str(s) => Value::Str(s.clone()),
        };
        let expire_at = e.expire_at;
        dbs[to.0 as usize].insert(to.1.to_vec(), Entry { value, expire_at });
    });
}

/// RENAME `from` `to` in `db` (an existing `to` is deleted first): the
/// value is added at `to`, `from` unlinked without freeing it, then
/// `rename_from` and `rename_to`.
pub fn rename(server: usize, db: i32, from: &[u8], to: &[u8]) -> bool {
    if from == to || !with(|h| h.servers[server].dbs[db as usize].contains_key(from)) {
        return false;
    }
    if with(|h| h.servers[server].dbs[db as usize].contains_key(to)) {
        unlink_key(server, db, to, true);
    }
    share_entry(server, (db, from), (db, to));
    // The source goes without its value being freed (now at `to`).
    unlink_key(server, db, from, false);
    propagate(
        server,
        db,
        vec![b"RENAME".to_vec(), from.to_vec(), to.to_vec()],
    );
    notify(
        server,
        raw::REDISMODULE_NOTIFY_GENERIC,
        "rename_from",
        db,
        from,
    );
    notify(server, raw::REDISMODULE_NOTIFY_GENERIC, "rename_to", db, to);
    true
}

/// MOVE `key` from `db` to `to` (refused when `to` has the key).
pub fn move_key(server: usize, db: i32, key: &[u8], to: i32) -> bool {
    if db == to
        || !with(|h| h.servers[server].dbs[db as usize].contains_key(key))
        || with(|h| h.servers[server].dbs[to as usize].contains_key(key))
    {
        return false;
    }
    share_entry(server, (db, key), (to, key));
    unlink_key(server, db, key, false);
    propagate(
        server,
        db,
        vec![b"MOVE".to_vec(), key.to_vec(), to.to_string().into_bytes()],
    );
    notify(
        server,
        raw::REDISMODULE_NOTIFY_GENERIC,
        "move_from",
        db,
        key,
    );
    notify(server, raw::REDISMODULE_NOTIFY_GENERIC, "move_to", to, key);
    true
}

/// SWAPDB `a` `b`: the dbs trade keys, the event fires, and clients
/// blocked on a key that now exists in their db are signalled.
pub fn swapdb(server: usize, a: i32, b: i32) {
    with(|h| h.servers[server].dbs.swap(a as usize, b as usize));
    // SAFETY: an all-zero SwapDbInfo is a valid value (integers).
    let mut info: raw::RedisModuleSwapDbInfo = unsafe { std::mem::zeroed() };
    info.version = 1;
    info.dbnum_first = a;
    info.dbnum_second = b;
    // SAFETY: the event's data (or null) lives on this stack for the call.
    unsafe {
        fire_event(
            server,
            raw::REDISMODULE_EVENT_SWAPDB,
            0,
            (&mut info as *mut raw::RedisModuleSwapDbInfo).cast(),
        )
    };
    with(|h| {
        let s = &mut h.servers[server];
        let ready: Vec<(i32, Vec<u8>)> = s
            .blocked
            .values()
            .filter(|bl| !bl.done && (bl.db == a || bl.db == b))
            .filter(|bl| s.dbs[bl.db as usize].contains_key(&bl.key))
            .map(|bl| (bl.db, bl.key.clone()))
            .collect();
        s.ready.extend(ready);
    });
    propagate(
        server,
        0,
        vec![
            b"SWAPDB".to_vec(),
            a.to_string().into_bytes(),
            b.to_string().into_bytes(),
        ],
    );
}

/// FLUSHDB of `db`: the start event, every value freed (no unlink, as
/// emptyData), the end event.
pub fn flushdb(server: usize, db: i32) {
    // SAFETY: an all-zero FlushInfo is a valid value (integers).
    let mut info: raw::RedisModuleFlushInfo = unsafe { std::mem::zeroed() };
    info.version = 1;
    info.sync = 1;
    info.dbnum = db;
    let p = (&mut info as *mut raw::RedisModuleFlushInfo).cast();
    // SAFETY: the event's data (or null) lives on this stack for the call.
    unsafe {
        fire_event(
            server,
            raw::REDISMODULE_EVENT_FLUSHDB,
            raw::REDISMODULE_SUBEVENT_FLUSHDB_START,
            p,
        )
    };
    let values = with(|h| std::mem::take(&mut h.servers[server].dbs[db as usize]));
    for (_, e) in values {
        if let Value::Module(v) = e.value {
            // SAFETY: the value was just taken out of its key (or its db): ours alone.
            unsafe { free_value(server, v) };
        }
    }
    propagate(server, db, vec![b"FLUSHDB".to_vec()]);
    // SAFETY: the event's data (or null) lives on this stack for the call.
    unsafe {
        fire_event(
            server,
            raw::REDISMODULE_EVENT_FLUSHDB,
            raw::REDISMODULE_SUBEVENT_FLUSHDB_END,
            p,
        )
    };
}

/// PEXPIREAT `key` `at` (None: PERSIST): the key's expire time, the
/// `expire` (or `persist`) event, and the command in the stream (a
/// replica keeps the key until the master's DEL).
pub fn expire(server: usize, db: i32, key: &[u8], at: Option<u64>) -> bool {
    let set = with(|h| match h.servers[server].dbs[db as usize].get_mut(key) {
        Some(e) => {
            e.expire_at = at;
            true
        }
        None => false,
    });
    if set {
        let (ev, argv) = match at {
            Some(t) => (
                "expire",
                vec![
                    b"PEXPIREAT".to_vec(),
                    key.to_vec(),
                    t.to_string().into_bytes(),
                ],
            ),
            None => ("persist", vec![b"PERSIST".to_vec(), key.to_vec()]),
        };
        propagate(server, db, argv);
        notify(server, raw::REDISMODULE_NOTIFY_GENERIC, ev, db, key);
    }
    set
}
