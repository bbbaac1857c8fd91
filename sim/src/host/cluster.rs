//! Cluster mode: which simulated server serves each slot, the redirects a
//! server makes (a command on a key of another node's slot; a connection
//! blocked on a key whose slot left), CLUSTER NODES as the module reads it,
//! and the two ways a key moves between masters: MIGRATE with the slot
//! handed over (the classic resharding), and Valkey 9's atomic slot
//! migration (CLUSTER MIGRATESLOTS: the slot's keys sent as the type's AOF
//! rewrite, then the slot handed over and the source's copies deleted).

use super::{
    deliver, fire_event, keyspace, notify, propagate, rdb, unblock_client, with, Caller, Entry,
    Reply, Value,
};
use redis_module::raw;
use std::collections::BTreeMap;
use std::ffi::{c_char, c_int};

/// The slot map: which server serves each slot (the slots not named are
/// the default server's).
pub struct SlotMap {
    default: usize,
    owner: BTreeMap<u16, usize>,
}

impl Default for SlotMap {
    fn default() -> SlotMap {
        SlotMap::new()
    }
}

impl SlotMap {
    pub const fn new() -> SlotMap {
        SlotMap {
            default: 0,
            owner: BTreeMap::new(),
        }
    }

    fn owner_of(&self, slot: u16) -> usize {
        self.owner.get(&slot).copied().unwrap_or(self.default)
    }
}

/// The Redis Cluster hash slot of `key` (CRC16/XMODEM of its hash tag or
/// of the whole key, mod 16384).
pub fn key_slot(key: &[u8]) -> u16 {
    let part = match key.iter().position(|&b| b == b'{') {
        Some(open) => match key[open + 1..].iter().position(|&b| b == b'}') {
            Some(len) if len > 0 => &key[open + 1..open + 1 + len],
            _ => key,
        },
        None => key,
    };
    let mut crc: u16 = 0;
    for &b in part {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc & 0x3fff
}

/// Cluster mode on for `servers`; every slot is `default`'s.
pub fn enable(servers: &[usize], default: usize) {
    with(|h| {
        for s in servers {
            h.servers[*s].cluster = true;
        }
        h.slots = SlotMap {
            default,
            owner: BTreeMap::new(),
        };
    });
}

/// Cluster mode on for one more server (a replica, a restarted master).
pub fn join(server: usize) {
    with(|h| h.servers[server].cluster = true);
}

/// `slot` is served by `server` from now on.
pub fn assign(slot: u16, server: usize) {
    with(|h| {
        h.slots.owner.insert(slot, server);
    });
}

/// The server serving `slot`.
pub fn owner(slot: u16) -> usize {
    with(|h| h.slots.owner_of(slot))
}

/// `new` serves what `old` served (a promoted replica, a restarted node).
pub fn replace(old: usize, new: usize) {
    with(|h| {
        if h.slots.default == old {
            h.slots.default = new;
        }
        for o in h.slots.owner.values_mut() {
            if *o == old {
                *o = new;
            }
        }
    });
}

/// In cluster mode, the slot of `key` when `server` does not serve it.
pub fn wrong_node(server: usize, key: Option<&[u8]>) -> Option<u16> {
    let key = key?;
    with(|h| {
        if !h.servers[server].cluster {
            return None;
        }
        let slot = key_slot(key);
        (h.slots.owner_of(slot) != server).then_some(slot)
    })
}

/// The -MOVED error for `slot`.
pub fn moved(slot: u16) -> String {
    format!("MOVED {slot} 127.0.0.1:{}", 7000 + owner(slot))
}

fn node_id(server: usize) -> String {
    format!("{server:040x}")
}

/// CLUSTER NODES as `server` answers it (its own line is what the module
/// reads: the slots it serves), or None outside cluster mode.
pub fn nodes(server: usize) -> Option<String> {
    with(|h| {
        if !h.servers[server].cluster {
            return None;
        }
        let mut served: Vec<(u16, u16)> = Vec::new();
        let mut start: Option<u16> = None;
        for slot in 0..=16384u16 {
            let mine = slot < 16384 && h.slots.owner_of(slot) == server;
            match (mine, start) {
                (true, None) => start = Some(slot),
                (false, Some(a)) => {
                    served.push((a, slot - 1));
                    start = None;
                }
                _ => {}
            }
        }
        let ranges: Vec<String> = served
            .iter()
            .map(|(a, b)| {
                if a == b {
                    a.to_string()
                } else {
                    format!("{a}-{b}")
                }
            })
            .collect();
        Some(format!(
            "{} 127.0.0.1:{}@{} myself,master - 0 0 1 connected {}\n",
            node_id(server),
            7000 + server,
            17000 + server,
            ranges.join(" ")
        ))
    })
}

/// `clusterRedirectBlockedClientIfNeeded` (clientsCron): a connection
/// blocked by the module on a key of a slot this node no longer serves is
/// answered -MOVED and unblocked (its disconnect callback runs).
pub fn redirect_blocked(server: usize) {
    let away: Vec<(u64, u64, u16)> = with(|h| {
        let s = &h.servers[server];
        if !s.cluster {
            return Vec::new();
        }
        s.blocked
            .iter()
            .filter(|(_, b)| !b.done && b.client != 0)
            .filter_map(|(id, b)| {
                let slot = key_slot(&b.key);
                (h.slots.owner_of(slot) != server).then_some((*id, b.client, slot))
            })
            .collect()
    });
    for (id, client, slot) in away {
        deliver(server, client, Reply::Err(moved(slot)));
        unblock_client(server, id);
    }
}

/// The keys of `slot` on `server` (db 0: cluster mode has one db).
fn keys_in_slot(server: usize, slot: u16) -> Vec<Vec<u8>> {
    with(|h| {
        h.servers[server].dbs[0]
            .keys()
            .filter(|k| key_slot(k) == slot)
            .cloned()
            .collect()
    })
}

/// Moves a string key's entry as is (MIGRATE's DUMP/RESTORE of a string).
fn move_string(src: usize, dst: usize, key: &[u8]) {
    let e = with(|h| match h.servers[src].dbs[0].get(key) {
        Some(Entry {
            value: Value::Str(s),
            expire_at,
        }) => Some((s.clone(), *expire_at)),
        _ => None,
    });
    if let Some((v, expire_at)) = e {
        with(|h| {
            h.servers[dst].dbs[0].insert(
                key.to_vec(),
                Entry {
                    value: Value::Str(v.clone()),
                    expire_at,
                },
            )
        });
        propagate(dst, 0, vec![b"SET".to_vec(), key.to_vec(), v]);
        keyspace::del(src, 0, key);
    }
}

/// The classic resharding of `slot` from `src` to `dst`: MIGRATE of each
/// of its keys (DUMP on the source, RESTORE REPLACE on the target, then
/// DEL on the source, each propagated as the servers do), then the slot
/// handed over (CLUSTER SETSLOT NODE on both). The number of keys moved.
pub fn migrate_slot(src: usize, dst: usize, slot: u16) -> usize {
    let keys = keys_in_slot(src, slot);
    for key in &keys {
        match rdb::dump(src, 0, key) {
            Some(items) => {
                let reference = rdb::register_dump(items);
                rdb::restore(dst, 0, key, &reference);
                keyspace::del(src, 0, key);
            }
            None => move_string(src, dst, key),
        }
    }
    assign(slot, dst);
    keys.len()
}

/// `ValkeyModuleSlotRange` and `ValkeyModuleAtomicSlotMigrationInfo`
/// (version 1): the data of Valkey 9's atomic-slot-migration event.
#[repr(C)]
struct SlotRange {
    start: c_int,
    end: c_int,
}

#[repr(C)]
struct MigrationInfo {
    version: u64,
    job_name: [c_char; 41],
    slot_ranges: *const SlotRange,
    num_slot_ranges: u32,
}

/// `VALKEYMODULE_EVENT_ATOMIC_SLOT_MIGRATION` and its subevents.
const EVENT_ATOMIC_SLOT_MIGRATION: u64 = 19;
const IMPORT_STARTED: u64 = 0;
const EXPORT_STARTED: u64 = 1;
const IMPORT_COMPLETED: u64 = 4;
const EXPORT_COMPLETED: u64 = 5;

/// `VALKEYMODULE_OPTIONS_HANDLE_ATOMIC_SLOT_MIGRATION`: without it on every
/// module, Valkey refuses the migration.
pub const OPTIONS_HANDLE_ATOMIC_SLOT_MIGRATION: c_int = 1 << 5;

fn migration_event(server: usize, sub: u64, slot: u16) {
    let range = SlotRange {
        start: c_int::from(slot),
        end: c_int::from(slot),
    };
    let mut info = MigrationInfo {
        version: 1,
        job_name: [0; 41],
        slot_ranges: &range,
        num_slot_ranges: 1,
    };
    // SAFETY: the event's data lives on this stack for the call, and the
    // range it points to too.
    unsafe {
        fire_event(
            server,
            EVENT_ATOMIC_SLOT_MIGRATION,
            sub,
            (&mut info as *mut MigrationInfo).cast(),
        )
    };
}

/// Valkey 9's CLUSTER MIGRATESLOTS of `slot` from `src` to `dst`: refused
/// (None) unless the module declared it handles it; else the target
/// receives each key of the slot as the type's AOF rewrite writes it
/// (applied as the import's stream, like a master link's), the slot is
/// handed over, the source deletes its copies (`delKeysInSlot`: unlink,
/// DEL propagated, `del`), and both hear that it completed. The number of
/// keys moved.
pub fn migrate_slot_atomic(src: usize, dst: usize, slot: u16) -> Option<usize> {
    let handles = with(|h| {
        [src, dst]
            .iter()
            .all(|s| h.servers[*s].options & OPTIONS_HANDLE_ATOMIC_SLOT_MIGRATION != 0)
    });
    if !handles {
        return None;
    }
    migration_event(dst, IMPORT_STARTED, slot);
    migration_event(src, EXPORT_STARTED, slot);
    let keys = keys_in_slot(src, slot);
    let import = super::connect(dst);
    for key in &keys {
        match rdb::aof_rewrite(src, 0, key) {
            Some(cmds) => {
                for argv in cmds {
                    let refs: Vec<&[u8]> = argv.iter().map(Vec::as_slice).collect();
                    super::cmds::exec(dst, import, 0, &refs, Caller::Master);
                    super::handle_ready(dst);
                }
            }
            None => {
                let v = with(|h| match h.servers[src].dbs[0].get(key.as_slice()) {
                    Some(Entry {
                        value: Value::Str(s),
                        ..
                    }) => Some(s.clone()),
                    _ => None,
                });
                if let Some(v) = v {
                    let argv: [&[u8]; 3] = [b"SET", key, &v];
                    super::cmds::exec(dst, import, 0, &argv, Caller::Master);
                }
            }
        }
    }
    with(|h| h.servers[dst].clients.remove(&import));
    assign(slot, dst);
    for key in &keys {
        super::unlink_key(src, 0, key, true);
        propagate(src, 0, vec![b"DEL".to_vec(), key.clone()]);
        notify(src, raw::REDISMODULE_NOTIFY_GENERIC, "del", 0, key);
    }
    migration_event(dst, IMPORT_COMPLETED, slot);
    migration_event(src, EXPORT_COMPLETED, slot);
    Some(keys.len())
}
