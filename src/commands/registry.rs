//! Command registration. Every command's metadata — name, flags, arity,
//! summary, complexity, key spec and argument docs — is declared in
//! [`COMMANDS`]; its ACL categories are derived from its flags
//! ([`acl_categories`]). [`register`] hands the table to the server:
//! `RedisModule_CreateCommand`, then `RedisModule_SetCommandInfo` with C
//! structs built by the safe helpers below (Rust struct literals, every
//! field named), then, where the server has it,
//! `RedisModule_SetCommandACLCategories`.
//!
//! Why not redis-module's `#[command]` macro: it cannot load on Redis 7.0
//! and its handler wrapper costs per call (docs/notes-command-macro.md).

use super::{acquire, apply, cancel, fence, info, latch, release, scan, semaphore, stats};
use crate::ffi::{self, rm, Ctx, RawCtx, RawStr};
use redis_module::raw;
use std::ffi::{c_int, CStr, CString};
use std::ptr;

type Handler = unsafe extern "C" fn(RawCtx, *mut RawStr, c_int) -> c_int;

/// One argument for COMMAND DOCS.
struct ArgDoc {
    name: &'static CStr,
    kind: raw::RedisModuleCommandArgType,
    token: Option<&'static CStr>,
    optional: bool,
    /// For a one-of: its pure-token choices.
    choices: &'static [&'static CStr],
}

/// One command: name (lower case, as registered), flags, arity, docs and
/// the flags of its one key (the first argument).
struct CommandDef {
    name: &'static CStr,
    handler: Handler,
    flags: &'static CStr,
    arity: c_int,
    summary: &'static CStr,
    complexity: &'static CStr,
    key_flags: u64,
    args: &'static [ArgDoc],
}

const T_KEY: raw::RedisModuleCommandArgType =
    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_KEY;
const T_STR: raw::RedisModuleCommandArgType =
    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_STRING;
const T_INT: raw::RedisModuleCommandArgType =
    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_INTEGER;
const T_ONEOF: raw::RedisModuleCommandArgType =
    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_ONEOF;
const T_TOKEN: raw::RedisModuleCommandArgType =
    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_PURE_TOKEN;

const fn arg(name: &'static CStr, kind: raw::RedisModuleCommandArgType) -> ArgDoc {
    ArgDoc {
        name,
        kind,
        token: None,
        optional: false,
        choices: &[],
    }
}

const fn opt(name: &'static CStr, token: &'static CStr) -> ArgDoc {
    ArgDoc {
        name,
        kind: T_INT,
        token: Some(token),
        optional: true,
        choices: &[],
    }
}

const fn mode(optional: bool) -> ArgDoc {
    ArgDoc {
        name: c"mode",
        kind: T_ONEOF,
        token: None,
        optional,
        choices: &[c"READ", c"WRITE"],
    }
}

const KEY: ArgDoc = arg(c"key", T_KEY);
const OWNER: ArgDoc = arg(c"owner", T_STR);
const PX: ArgDoc = opt(c"lease", c"PX");
const WAIT: ArgDoc = opt(c"ms", c"WAIT");
const LIMIT: ArgDoc = ArgDoc {
    optional: false,
    ..opt(c"n", c"LIMIT")
};
const PERMITS: ArgDoc = opt(c"k", c"PERMITS");
const BIND: ArgDoc = ArgDoc {
    kind: T_TOKEN,
    ..opt(c"bind", c"BIND")
};
const LOCKDELAY: ArgDoc = opt(c"ms", c"LOCKDELAY");

const KEY_RW: u64 = (raw::REDISMODULE_CMD_KEY_RW
    | raw::REDISMODULE_CMD_KEY_ACCESS
    | raw::REDISMODULE_CMD_KEY_UPDATE) as u64;
const KEY_RO: u64 = (raw::REDISMODULE_CMD_KEY_RO | raw::REDISMODULE_CMD_KEY_ACCESS) as u64;
const KEY_OW: u64 = (raw::REDISMODULE_CMD_KEY_OW | raw::REDISMODULE_CMD_KEY_UPDATE) as u64;

/// The `since` of every command in COMMAND DOCS.
const SINCE: &CStr = c"0.1.0";

/// Registered under these lower-case names (as core commands and other
/// modules are named, so `INFO commandstats` shows `cmdstat_dlock.acquire`;
/// lookups ignore case).
static COMMANDS: &[CommandDef] = &[
    CommandDef {
        name: c"dlock.acquire",
        handler: acquire::acquire_cmd,
        flags: c"write deny-oom",
        arity: -3,
        summary: c"Acquires a reentrant mutex, optionally waiting on the server; replies the fencing token or nil",
        complexity: c"O(1) for a lock with few holders and waiters",
        key_flags: KEY_RW,
        args: &[KEY, OWNER, PX, WAIT, BIND, LOCKDELAY],
    },
    CommandDef {
        name: c"dlock.rwacquire",
        handler: acquire::rwacquire_cmd,
        flags: c"write deny-oom",
        arity: -3,
        summary: c"Acquires the READ or WRITE side of a read-write lock; replies the fencing token or nil",
        complexity: c"O(N) where N is the number of holders and waiters of the lock",
        key_flags: KEY_RW,
        args: &[KEY, OWNER, mode(false), PX, WAIT, BIND, LOCKDELAY],
    },
    CommandDef {
        name: c"dlock.fairacquire",
        handler: acquire::fairacquire_cmd,
        flags: c"write deny-oom",
        arity: -3,
        summary: c"Acquires a fair (FIFO) mutex, keeping the caller's place in the queue; replies the fencing token or nil",
        complexity: c"O(N) where N is the number of waiters of the lock",
        key_flags: KEY_RW,
        args: &[KEY, OWNER, PX, WAIT, BIND, LOCKDELAY],
    },
    CommandDef {
        name: c"dlock.release",
        handler: release::release_cmd,
        flags: c"write",
        arity: -3,
        summary: c"Takes one hold of the owner away; replies 1 when that hold is gone, 0 when it is still held",
        complexity: c"O(N) where N is the number of holders of the lock",
        key_flags: KEY_RW,
        args: &[KEY, OWNER, mode(true), PERMITS],
    },
    CommandDef {
        name: c"dlock.cancel",
        handler: cancel::cancel_cmd,
        flags: c"write",
        arity: 3,
        summary: c"Gives up every queue place of the owner (a fair-queue place, waits blocked on the server, which are answered nil); replies the number of places given up",
        complexity: c"O(N) where N is the number of waiters of the lock",
        key_flags: KEY_RW,
        args: &[KEY, OWNER],
    },
    CommandDef {
        name: c"dlock.renew",
        handler: release::renew_cmd,
        flags: c"write",
        arity: -3,
        summary: c"Restarts the lease of every hold of the owner; replies 1, or 0 when the owner holds nothing",
        complexity: c"O(N) where N is the number of holders of the lock",
        key_flags: KEY_RW,
        args: &[KEY, OWNER, PX],
    },
    CommandDef {
        name: c"dlock.info",
        handler: info::info_cmd,
        flags: c"readonly fast",
        arity: 2,
        summary: c"Describes a lock: kind, last token, holders and waiters; nil when there is no lock",
        complexity: c"O(N) where N is the number of holders and waiters of the lock",
        key_flags: KEY_RO,
        args: &[KEY],
    },
    CommandDef {
        name: c"dlock.scan",
        handler: scan::scan_cmd,
        flags: c"readonly",
        arity: -2,
        summary: c"Lists lock keys of the current db with SCAN's contract, filtered by owner, kind or contention",
        complexity: c"O(1) for every call. O(N) for a complete iteration, N the number of keys in the db",
        key_flags: 0,
        args: &[
            arg(c"cursor", T_INT),
            ArgDoc {
                kind: T_STR,
                ..opt(c"pattern", c"MATCH")
            },
            opt(c"count", c"COUNT"),
            ArgDoc {
                kind: T_STR,
                ..opt(c"owner", c"OWNER")
            },
            ArgDoc {
                kind: T_STR,
                ..opt(c"kind", c"KIND")
            },
            ArgDoc {
                kind: T_TOKEN,
                ..opt(c"contended", c"CONTENDED")
            },
        ],
    },
    CommandDef {
        name: c"dlock.stats",
        handler: stats::stats_cmd,
        flags: c"readonly",
        arity: -1,
        summary: c"Wait and hold time histograms per lock kind since start or the last RESET",
        complexity: c"O(1)",
        key_flags: 0,
        args: &[ArgDoc {
            kind: T_TOKEN,
            ..opt(c"reset", c"RESET")
        }],
    },
    CommandDef {
        name: c"dlock.slowlog",
        handler: stats::slowlog_cmd,
        flags: c"readonly admin",
        arity: -2,
        summary: c"The log of long waits and holds: GET [n], LEN or RESET",
        complexity: c"O(N) where N is the number of entries returned",
        key_flags: 0,
        args: &[ArgDoc {
            kind: T_STR,
            ..arg(c"subcommand", T_STR)
        }],
    },
    CommandDef {
        name: c"dlock.forcerelease",
        handler: release::forcerelease_cmd,
        flags: c"write",
        arity: 2,
        summary: c"Administrative: drops every hold of a lock, wakes waiters; replies 1 when there was a lock",
        complexity: c"O(N) where N is the number of holders and waiters of the lock",
        key_flags: KEY_RW,
        args: &[KEY],
    },
    CommandDef {
        name: c"dlock.semacquire",
        handler: semaphore::semacquire_cmd,
        flags: c"write deny-oom",
        arity: -5,
        summary: c"Acquires permits of a counting semaphore (strict FIFO), optionally waiting on the server; replies the fencing token or nil",
        complexity: c"O(N) where N is the number of holders and waiters of the semaphore",
        key_flags: KEY_RW,
        args: &[KEY, OWNER, LIMIT, PERMITS, PX, WAIT, BIND, LOCKDELAY],
    },
    CommandDef {
        name: c"dlock.latchset",
        handler: latch::latchset_cmd,
        flags: c"write deny-oom",
        arity: 3,
        summary: c"Creates a countdown latch with a count; replies 1, or 0 when a latch exists",
        complexity: c"O(1)",
        key_flags: KEY_RW,
        args: &[KEY, arg(c"count", T_INT)],
    },
    CommandDef {
        name: c"dlock.countdown",
        handler: latch::countdown_cmd,
        flags: c"write",
        arity: 2,
        summary: c"Lowers a latch's count by one and replies the new count; at 0 the latch opens and every AWAIT is answered 1",
        complexity: c"O(1), O(N) when the latch opens, where N is the number of waiting connections",
        key_flags: KEY_RW,
        args: &[KEY],
    },
    CommandDef {
        name: c"dlock.await",
        handler: latch::await_cmd,
        flags: c"write",
        arity: -2,
        summary: c"Waits until a latch opens; replies 1 when open, nil when WAIT ends first",
        complexity: c"O(1)",
        key_flags: KEY_RW,
        args: &[KEY, WAIT],
    },
    CommandDef {
        name: c"dlock.check",
        handler: fence::check_cmd,
        flags: c"readonly fast",
        arity: 3,
        summary: c"Replies 1 when the token is the token of a live hold of the lock, else 0",
        complexity: c"O(N) where N is the number of holders of the lock",
        key_flags: KEY_RO,
        args: &[KEY, arg(c"token", T_INT)],
    },
    CommandDef {
        name: c"dlock.fenced",
        handler: fence::fenced_cmd,
        // getkeys-api: the keys are the lock key and the inner command's
        // (see fence.rs); VARIABLE_FLAGS makes Redis ask for them.
        flags: c"write getkeys-api",
        arity: -4,
        summary: c"Runs a command only while the token is the token of a live hold of the lock; replies the command's reply, or a FENCED error",
        complexity: c"O(N) where N is the number of holders of the lock, plus the complexity of the command",
        key_flags: KEY_RO | raw::REDISMODULE_CMD_KEY_VARIABLE_FLAGS as u64,
        args: &[
            KEY,
            arg(c"token", T_INT),
            arg(c"command", T_STR),
            ArgDoc {
                optional: true,
                ..arg(c"arg", T_STR)
            },
        ],
    },
    CommandDef {
        name: c"dlock.apply",
        handler: apply::apply_cmd,
        flags: c"write",
        arity: 3,
        summary: c"Internal: sets a lock's whole state from a payload (replication and AOF); an empty payload deletes it",
        complexity: c"O(N) where N is the size of the payload",
        key_flags: KEY_OW,
        args: &[KEY, arg(c"payload", T_STR)],
    },
];

/// Registers every command in [`COMMANDS`] with its flags, then its arity,
/// key spec and docs, and, where the server has them, its ACL categories
/// (see [`acl_categories`]). On failure, names the command that failed.
pub fn register(ctx: Ctx<'_>) -> Result<(), &'static CStr> {
    let ctx = ctx.as_raw();
    // SAFETY: reading function-pointer statics filled in by RedisModule_Init.
    let (has_categories, has_add_category) = unsafe {
        (
            { raw::RedisModule_SetCommandACLCategories }.is_some(),
            { raw::RedisModule_AddACLCategory }.is_some(),
        )
    };
    // The module's own category, `@dlock` (Redis 7.4+, Valkey 8+); must be
    // added during OnLoad, before the commands that name it.
    let own_category = has_categories
        && has_add_category
        // SAFETY: a 'static NUL-terminated name, during OnLoad.
        && unsafe { rm!(RedisModule_AddACLCategory(ctx, ACL_CATEGORY.as_ptr()) else ffi::ERR) }
            == ffi::OK;
    for def in COMMANDS {
        // SAFETY: ctx is the OnLoad context; the name and flags are 'static
        // NUL-terminated strings (Redis copies the name); the handler has
        // the signature Redis expects.
        let created = unsafe {
            rm!(RedisModule_CreateCommand(ctx, def.name.as_ptr(), Some(def.handler), def.flags.as_ptr(), 0, 0, 0) else ffi::ERR)
        };
        if created != ffi::OK {
            return Err(def.name);
        }
        // SAFETY: as above; the command was just created under this name.
        let cmd =
            unsafe { rm!(RedisModule_GetCommand(ctx, def.name.as_ptr()) else ptr::null_mut()) };
        // SAFETY: `cmd`, when not null, is the command just created.
        if cmd.is_null() || unsafe { set_info(cmd, def) }.is_err() {
            return Err(def.name);
        }
        if has_categories {
            let Ok(cats) = CString::new(acl_categories(def.flags.to_bytes(), own_category)) else {
                return Err(def.name);
            };
            // SAFETY: cmd is the command just created; Redis parses the
            // NUL-terminated list during the call.
            if unsafe { rm!(RedisModule_SetCommandACLCategories(cmd, cats.as_ptr()) else ffi::ERR) }
                != ffi::OK
            {
                return Err(def.name);
            }
        }
    }
    Ok(())
}

/// The module's ACL category, where the server lets modules add one.
const ACL_CATEGORY: &CStr = c"dlock";

/// A command's ACL categories, derived from its flags: `write` for write
/// commands, `read` for read-only ones, `fast` for fast ones and `slow` for
/// the rest, plus the module's own category when it exists.
fn acl_categories(flags: &[u8], own_category: bool) -> String {
    let has = |f: &[u8]| flags.split(|b| *b == b' ').any(|w| w == f);
    let mut cats = Vec::new();
    if has(b"write") {
        cats.push("write");
    }
    if has(b"readonly") {
        cats.push("read");
    }
    cats.push(if has(b"fast") { "fast" } else { "slow" });
    if own_category {
        cats.push("dlock"); // ACL_CATEGORY
    }
    cats.join(" ")
}

// ---- the C structs of RedisModule_SetCommandInfo ------------------------------

/// Version 1 of the command-info API, with this build's struct sizes (the
/// server reads the arrays with these strides).
static INFO_VERSION: raw::RedisModuleCommandInfoVersion = raw::RedisModuleCommandInfoVersion {
    version: 1,
    sizeof_historyentry: std::mem::size_of::<raw::RedisModuleCommandHistoryEntry>(),
    sizeof_keyspec: std::mem::size_of::<raw::RedisModuleCommandKeySpec>(),
    sizeof_arg: std::mem::size_of::<raw::RedisModuleCommandArg>(),
};

/// An argument with every field absent (no name, no key spec, no token, no
/// flags, no sub-arguments): the base of [`raw_arg`] and [`raw_choice`] and,
/// by its null name, the entry that ends an argument array.
const ARG_NONE: raw::RedisModuleCommandArg = raw::RedisModuleCommandArg {
    name: ptr::null(),
    type_: T_STR,
    key_spec_index: -1,
    token: ptr::null(),
    summary: ptr::null(),
    since: ptr::null(),
    flags: raw::REDISMODULE_CMD_ARG_NONE as c_int,
    deprecated_since: ptr::null(),
    subargs: ptr::null_mut(),
    display_text: ptr::null(),
};

/// The entry that ends a key-spec array: the server stops at the
/// `INVALID` begin-search type.
const KEY_SPEC_END: raw::RedisModuleCommandKeySpec = raw::RedisModuleCommandKeySpec {
    notes: ptr::null(),
    flags: 0,
    begin_search_type: raw::RedisModuleKeySpecBeginSearchType_REDISMODULE_KSPEC_BS_INVALID,
    bs: raw::RedisModuleCommandKeySpec__bindgen_ty_1 {
        index: raw::RedisModuleCommandKeySpec__bindgen_ty_1__bindgen_ty_1 { pos: 0 },
    },
    find_keys_type: raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_OMITTED,
    fk: raw::RedisModuleCommandKeySpec__bindgen_ty_2 {
        range: raw::RedisModuleCommandKeySpec__bindgen_ty_2__bindgen_ty_1 {
            lastkey: 0,
            keystep: 0,
            limit: 0,
        },
    },
};

/// The one key spec of every command: the key is argument 1, alone.
fn key_spec(flags: u64) -> raw::RedisModuleCommandKeySpec {
    raw::RedisModuleCommandKeySpec {
        notes: ptr::null(),
        flags,
        begin_search_type: raw::RedisModuleKeySpecBeginSearchType_REDISMODULE_KSPEC_BS_INDEX,
        bs: raw::RedisModuleCommandKeySpec__bindgen_ty_1 {
            index: raw::RedisModuleCommandKeySpec__bindgen_ty_1__bindgen_ty_1 { pos: 1 },
        },
        find_keys_type: raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_RANGE,
        fk: raw::RedisModuleCommandKeySpec__bindgen_ty_2 {
            range: raw::RedisModuleCommandKeySpec__bindgen_ty_2__bindgen_ty_1 {
                lastkey: 0,
                keystep: 1,
                limit: 0,
            },
        },
    }
}

/// One documented argument; `subargs` is its choices' array (none when it
/// has none), which the caller keeps alive.
fn raw_arg(
    a: &ArgDoc,
    subargs: Option<&mut [raw::RedisModuleCommandArg]>,
) -> raw::RedisModuleCommandArg {
    let subargs = subargs.map_or(ptr::null_mut(), |s| s.as_mut_ptr());
    raw::RedisModuleCommandArg {
        name: a.name.as_ptr(),
        type_: a.kind,
        // The key is key spec 0; no other argument is a key.
        key_spec_index: if a.kind == T_KEY { 0 } else { -1 },
        token: a.token.map_or(ptr::null(), CStr::as_ptr),
        flags: if a.optional {
            raw::REDISMODULE_CMD_ARG_OPTIONAL as c_int
        } else {
            raw::REDISMODULE_CMD_ARG_NONE as c_int
        },
        subargs,
        ..ARG_NONE
    }
}

/// One pure-token choice of a one-of, named as its token.
fn raw_choice(token: &'static CStr) -> raw::RedisModuleCommandArg {
    raw::RedisModuleCommandArg {
        name: token.as_ptr(),
        type_: T_TOKEN,
        token: token.as_ptr(),
        ..ARG_NONE
    }
}

/// The arrays one command's `RedisModuleCommandInfo` points into, owned
/// here until `RedisModule_SetCommandInfo` returns (the server copies what
/// it keeps).
struct InfoArrays {
    key_specs: [raw::RedisModuleCommandKeySpec; 2],
    /// Each argument, then [`ARG_NONE`].
    args: Vec<raw::RedisModuleCommandArg>,
    /// For each one-of argument: its choices, then [`ARG_NONE`]; `args`
    /// point into these heap buffers, which moving the vectors leaves put.
    _choices: Vec<Vec<raw::RedisModuleCommandArg>>,
}

fn info_arrays(def: &CommandDef) -> InfoArrays {
    let mut choices = Vec::new();
    let mut args = Vec::with_capacity(def.args.len() + 1);
    for a in def.args {
        let subargs = if a.choices.is_empty() {
            None
        } else {
            let subs: Vec<raw::RedisModuleCommandArg> = a
                .choices
                .iter()
                .map(|c| raw_choice(c))
                .chain(std::iter::once(ARG_NONE))
                .collect();
            choices.push(subs);
            choices.last_mut().map(Vec::as_mut_slice)
        };
        args.push(raw_arg(a, subargs));
    }
    args.push(ARG_NONE);
    InfoArrays {
        // key_flags 0: a command without keys (DLOCK.SCAN).
        key_specs: if def.key_flags == 0 {
            [KEY_SPEC_END, KEY_SPEC_END]
        } else {
            [key_spec(def.key_flags), KEY_SPEC_END]
        },
        args,
        _choices: choices,
    }
}

/// # Safety
/// `cmd` must be a command this module just created (`GetCommand`).
unsafe fn set_info(cmd: *mut raw::RedisModuleCommand, def: &CommandDef) -> Result<(), ()> {
    let mut arrays = info_arrays(def);
    let info = raw::RedisModuleCommandInfo {
        version: &INFO_VERSION,
        summary: def.summary.as_ptr(),
        complexity: def.complexity.as_ptr(),
        since: SINCE.as_ptr(),
        history: ptr::null_mut(),
        tips: ptr::null(),
        arity: def.arity,
        key_specs: arrays.key_specs.as_mut_ptr(),
        args: arrays.args.as_mut_ptr(),
    };
    // SAFETY: cmd is a command this module just created; `info` and every
    // array and string it points to (`arrays`, 'static strings) outlive the
    // call, each array ends with its end entry, and Redis copies what it
    // keeps during the call.
    let status = unsafe { rm!(RedisModule_SetCommandInfo(cmd, &info) else ffi::ERR) };
    drop(arrays);
    if status == ffi::OK {
        Ok(())
    } else {
        Err(())
    }
}

#[cfg(test)]
mod acl_tests {
    use super::*;

    #[test]
    fn categories_follow_the_flags() {
        let cases: &[(&str, bool, &str)] = &[
            ("write deny-oom", true, "write slow dlock"),
            ("write", false, "write slow"),
            ("readonly fast", true, "read fast dlock"),
            ("readonly", false, "read slow"),
            ("write fast", false, "write fast"),
            ("", false, "slow"),
            // Whole words only.
            ("writeable readonlyx fastest", false, "slow"),
        ];
        for (flags, own, want) in cases {
            assert_eq!(acl_categories(flags.as_bytes(), *own), *want, "{flags:?}");
        }
    }

    #[test]
    fn every_command_has_a_read_or_write_category_and_a_lowercase_name() {
        for def in COMMANDS {
            let cats = acl_categories(def.flags.to_bytes(), true);
            assert!(
                cats.contains("write") || cats.contains("read"),
                "{:?}: {cats}",
                def.name
            );
            let name = def.name.to_bytes();
            assert_eq!(name, name.to_ascii_lowercase(), "{:?}", def.name);
            assert!(name.starts_with(b"dlock."), "{:?}", def.name);
        }
    }

    #[test]
    fn info_arrays_end_with_their_end_entries() {
        for def in COMMANDS {
            let arrays = info_arrays(def);
            assert_eq!(arrays.args.len(), def.args.len() + 1, "{:?}", def.name);
            assert!(arrays.args.last().is_some_and(|a| a.name.is_null()));
            assert!(arrays.args[..def.args.len()]
                .iter()
                .all(|a| !a.name.is_null()));
            let keys: Vec<_> = arrays.args.iter().map(|a| a.key_spec_index).collect();
            if def.key_flags == 0 {
                // A command without keys (DLOCK.SCAN, STATS, SLOWLOG).
                assert!(keys.iter().all(|k| *k == -1), "{:?}", def.name);
                assert_eq!(
                    arrays.key_specs[0].begin_search_type,
                    raw::RedisModuleKeySpecBeginSearchType_REDISMODULE_KSPEC_BS_INVALID
                );
                continue;
            }
            assert_eq!(
                keys.first(),
                Some(&0),
                "{:?}: the key comes first",
                def.name
            );
            assert!(keys[1..].iter().all(|k| *k == -1), "{:?}", def.name);
            assert_eq!(
                arrays.key_specs[1].begin_search_type,
                raw::RedisModuleKeySpecBeginSearchType_REDISMODULE_KSPEC_BS_INVALID
            );
            let mut choices = arrays._choices.iter();
            for (a, doc) in arrays.args.iter().zip(def.args) {
                if doc.choices.is_empty() {
                    assert!(a.subargs.is_null());
                    continue;
                }
                let subs = choices.next().expect("an array per one-of");
                assert_eq!(a.subargs.cast_const(), subs.as_ptr(), "{:?}", def.name);
                assert_eq!(subs.len(), doc.choices.len() + 1);
                for (s, c) in subs.iter().zip(doc.choices) {
                    assert_eq!(s.type_, T_TOKEN);
                    assert_eq!(s.token, c.as_ptr());
                    assert_eq!(s.name, c.as_ptr());
                }
                assert!(subs.last().is_some_and(|s| s.name.is_null()));
            }
            assert!(choices.next().is_none());
        }
    }
}
