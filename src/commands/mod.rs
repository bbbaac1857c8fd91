//! The commands: parse, ask the state machine, reply. One file per command
//! family; this file holds the reply harness every handler goes through
//! and command registration.
//!
//! A handler is a plain function `fn(Ctx, Args) -> Outcome`: it parses
//! everything before it opens a key (an error leaves no trace), reaches a
//! stored lock only through `storage`'s guards, commits through
//! `services::commit`, and returns what to reply; [`harness`] turns that
//! into the reply, and an error into an error reply. [`command!`] makes the
//! `extern "C"` entry point Redis calls.

pub mod acquire;
pub mod apply;
pub mod args;
pub mod fence;
pub mod info;
pub mod latch;
pub mod release;
pub mod semaphore;

use crate::error::Msg;
use crate::ffi::{self, rm, Ctx, RawCtx, RawStr};
use redis_module::raw;
use std::ffi::{c_int, CStr, CString};
use std::ptr;

/// What a handler answers.
pub enum Reply {
    Int(i64),
    Null,
    Ok,
    /// The handler replied itself (a map, a relayed reply) or blocked the
    /// connection (its callbacks reply).
    Done,
}

/// Why a command was refused: the error reply.
pub enum Refused {
    /// Wrong number of arguments (Redis' own message).
    Arity,
    /// One of the module's static messages (`crate::error`).
    Msg(Msg),
    /// A message with figures in it.
    Text(CString),
}

impl From<Msg> for Refused {
    fn from(m: Msg) -> Refused {
        Refused::Msg(m)
    }
}

impl From<CString> for Refused {
    fn from(t: CString) -> Refused {
        Refused::Text(t)
    }
}

/// A handler's result.
pub type Outcome = Result<Reply, Refused>;

/// The one place a handler's outcome becomes its reply.
pub fn harness(ctx: Ctx, out: Outcome) -> c_int {
    match out {
        Ok(Reply::Int(v)) => ctx.reply_int(v),
        Ok(Reply::Null) => ctx.reply_null(),
        Ok(Reply::Ok) => ctx.reply_ok(),
        Ok(Reply::Done) => ffi::OK,
        Err(Refused::Arity) => ctx.wrong_arity(),
        Err(Refused::Msg(m)) => ctx.reply_error(m),
        Err(Refused::Text(t)) => ctx.reply_error(&t),
    }
}

/// `command!(name_cmd => handler)`: the `extern "C"` entry point `name_cmd`
/// that Redis calls, running `handler(ctx, args)` through [`harness`].
macro_rules! command {
    ($name:ident => $handler:path) => {
        /// # Safety
        /// Called by Redis with a command context and its arguments.
        pub unsafe extern "C" fn $name(
            ctx: $crate::ffi::RawCtx,
            argv: *mut $crate::ffi::RawStr,
            argc: std::ffi::c_int,
        ) -> std::ffi::c_int {
            // SAFETY: Redis passes the running command's context and its
            // arguments, valid for this call; neither outlives it (`Args`
            // borrows for the call, and the handler keeps no `Ctx`).
            let (ctx, args) = unsafe {
                (
                    $crate::ffi::Ctx::from_raw(ctx),
                    $crate::ffi::Args::from_raw(argv, argc),
                )
            };
            $crate::commands::harness(ctx, $handler(ctx, args))
        }
    };
}
pub(crate) use command;

// ---- registration -----------------------------------------------------------

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

/// One command: name, flags, arity, docs and the flags of its one key.
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

const KEY_RW: u64 = (raw::REDISMODULE_CMD_KEY_RW
    | raw::REDISMODULE_CMD_KEY_ACCESS
    | raw::REDISMODULE_CMD_KEY_UPDATE) as u64;
const KEY_RO: u64 = (raw::REDISMODULE_CMD_KEY_RO | raw::REDISMODULE_CMD_KEY_ACCESS) as u64;
const KEY_OW: u64 = (raw::REDISMODULE_CMD_KEY_OW | raw::REDISMODULE_CMD_KEY_UPDATE) as u64;

static COMMANDS: &[CommandDef] = &[
    CommandDef {
        name: c"DLOCK.ACQUIRE",
        handler: acquire::acquire_cmd,
        flags: c"write deny-oom",
        arity: -3,
        summary: c"Acquires a reentrant mutex, optionally waiting on the server; replies the fencing token or nil",
        complexity: c"O(1) for a lock with few holders and waiters",
        key_flags: KEY_RW,
        args: &[KEY, OWNER, PX, WAIT],
    },
    CommandDef {
        name: c"DLOCK.RWACQUIRE",
        handler: acquire::rwacquire_cmd,
        flags: c"write deny-oom",
        arity: -3,
        summary: c"Acquires the READ or WRITE side of a read-write lock; replies the fencing token or nil",
        complexity: c"O(N) where N is the number of holders and waiters of the lock",
        key_flags: KEY_RW,
        args: &[KEY, OWNER, mode(false), PX, WAIT],
    },
    CommandDef {
        name: c"DLOCK.FAIRACQUIRE",
        handler: acquire::fairacquire_cmd,
        flags: c"write deny-oom",
        arity: -3,
        summary: c"Acquires a fair (FIFO) mutex, keeping the caller's place in the queue; replies the fencing token or nil",
        complexity: c"O(N) where N is the number of waiters of the lock",
        key_flags: KEY_RW,
        args: &[KEY, OWNER, PX, WAIT],
    },
    CommandDef {
        name: c"DLOCK.RELEASE",
        handler: release::release_cmd,
        flags: c"write",
        arity: -3,
        summary: c"Takes one hold of the owner away; replies 1 when that hold is gone, 0 when it is still held",
        complexity: c"O(N) where N is the number of holders of the lock",
        key_flags: KEY_RW,
        args: &[KEY, OWNER, mode(true), PERMITS],
    },
    CommandDef {
        name: c"DLOCK.RENEW",
        handler: release::renew_cmd,
        flags: c"write",
        arity: -3,
        summary: c"Restarts the lease of every hold of the owner; replies 1, or 0 when the owner holds nothing",
        complexity: c"O(N) where N is the number of holders of the lock",
        key_flags: KEY_RW,
        args: &[KEY, OWNER, PX],
    },
    CommandDef {
        name: c"DLOCK.INFO",
        handler: info::info_cmd,
        flags: c"readonly fast",
        arity: 2,
        summary: c"Describes a lock: kind, last token, holders and waiters; nil when there is no lock",
        complexity: c"O(N) where N is the number of holders and waiters of the lock",
        key_flags: KEY_RO,
        args: &[KEY],
    },
    CommandDef {
        name: c"DLOCK.FORCERELEASE",
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
        args: &[KEY, OWNER, LIMIT, PERMITS, PX, WAIT],
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
                name: c"arg",
                kind: T_STR,
                token: None,
                optional: true,
                choices: &[],
            },
        ],
    },
    CommandDef {
        name: c"DLOCK.APPLY",
        handler: apply::apply_cmd,
        flags: c"write",
        arity: 3,
        summary: c"Internal: sets a lock's whole state from a payload (replication and AOF); an empty payload deletes it",
        complexity: c"O(N) where N is the size of the payload",
        key_flags: KEY_OW,
        args: &[KEY, arg(c"payload", T_STR)],
    },
];

/// Registers every command under its lower-case name (as core commands and
/// other modules are named, so `INFO commandstats` shows
/// `cmdstat_dlock.acquire`; lookups ignore case), with its flags, then its
/// arity, key spec and docs, and, where the server has them, its ACL
/// categories (see [`acl_categories`]).
pub fn register(ctx: Ctx) -> Result<(), &'static CStr> {
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
    // SAFETY: a 'static NUL-terminated name, during OnLoad.
    let own_category = has_categories
        && has_add_category
        && unsafe { rm!(RedisModule_AddACLCategory(ctx, ACL_CATEGORY.as_ptr()) else ffi::ERR) }
            == ffi::OK;
    for def in COMMANDS {
        let Ok(name) = CString::new(def.name.to_bytes().to_ascii_lowercase()) else {
            return Err(def.name);
        };
        // SAFETY: all strings are NUL-terminated and outlive the calls (Redis
        // copies the name); the handler has the signature Redis expects.
        let created = unsafe {
            rm!(RedisModule_CreateCommand(ctx, name.as_ptr(), Some(def.handler), def.flags.as_ptr(), 0, 0, 0) else ffi::ERR)
        };
        if created != ffi::OK {
            return Err(def.name);
        }
        // SAFETY: as above.
        let cmd = unsafe { rm!(RedisModule_GetCommand(ctx, name.as_ptr()) else ptr::null_mut()) };
        if cmd.is_null() || set_info(cmd, def).is_err() {
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

fn set_info(cmd: *mut raw::RedisModuleCommand, def: &CommandDef) -> Result<(), ()> {
    // SAFETY: (whole function) the structs are zero-initialised C structs
    // (all-null pointers and zero ints are valid "absent" values for every
    // field), filled with 'static strings; Redis copies what it keeps during
    // SetCommandInfo, and every array is terminated by a zeroed entry.
    unsafe {
        let mut spec: [raw::RedisModuleCommandKeySpec; 2] = std::mem::zeroed();
        spec[0].flags = def.key_flags;
        spec[0].begin_search_type =
            raw::RedisModuleKeySpecBeginSearchType_REDISMODULE_KSPEC_BS_INDEX;
        spec[0].bs.index.pos = 1;
        spec[0].find_keys_type = raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_RANGE;
        spec[0].fk.range.lastkey = 0;
        spec[0].fk.range.keystep = 1;
        spec[0].fk.range.limit = 0;

        let mut choices: Vec<Vec<raw::RedisModuleCommandArg>> = Vec::new();
        let mut args: Vec<raw::RedisModuleCommandArg> = Vec::with_capacity(def.args.len() + 1);
        for a in def.args {
            let mut r: raw::RedisModuleCommandArg = std::mem::zeroed();
            r.name = a.name.as_ptr();
            r.type_ = a.kind;
            r.key_spec_index = if a.kind == T_KEY { 0 } else { -1 };
            if let Some(t) = a.token {
                r.token = t.as_ptr();
            }
            if a.optional {
                r.flags = raw::REDISMODULE_CMD_ARG_OPTIONAL as c_int;
            }
            if !a.choices.is_empty() {
                let mut subs: Vec<raw::RedisModuleCommandArg> = Vec::new();
                for c in a.choices {
                    let mut s: raw::RedisModuleCommandArg = std::mem::zeroed();
                    s.name = c.as_ptr();
                    s.type_ = T_TOKEN;
                    s.key_spec_index = -1;
                    s.token = c.as_ptr();
                    subs.push(s);
                }
                subs.push(std::mem::zeroed());
                r.subargs = subs.as_mut_ptr();
                choices.push(subs);
            }
            args.push(r);
        }
        args.push(std::mem::zeroed());

        let version = raw::RedisModuleCommandInfoVersion {
            version: 1,
            sizeof_historyentry: std::mem::size_of::<raw::RedisModuleCommandHistoryEntry>(),
            sizeof_keyspec: std::mem::size_of::<raw::RedisModuleCommandKeySpec>(),
            sizeof_arg: std::mem::size_of::<raw::RedisModuleCommandArg>(),
        };
        let mut info: raw::RedisModuleCommandInfo = std::mem::zeroed();
        info.version = &version;
        info.summary = def.summary.as_ptr();
        info.complexity = def.complexity.as_ptr();
        info.since = c"0.1.0".as_ptr();
        info.arity = def.arity;
        info.key_specs = spec.as_mut_ptr();
        info.args = args.as_mut_ptr();
        let ok = rm!(RedisModule_SetCommandInfo(cmd, &info) else ffi::ERR) == ffi::OK;
        drop(choices);
        if ok {
            Ok(())
        } else {
            Err(())
        }
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
            let lower = def.name.to_bytes().to_ascii_lowercase();
            assert!(lower.starts_with(b"dlock."), "{:?}", def.name);
        }
    }
}
