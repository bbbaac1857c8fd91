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
use crate::ffi::command::{
    acl_category_api, ArgDoc, CommandDef, T_INT, T_KEY, T_ONEOF, T_STR, T_TOKEN,
};
use crate::ffi::Ctx;
use redis_module::raw;
use std::ffi::{CStr, CString};

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
    let (has_categories, has_add_category) = acl_category_api();
    // The module's own category, `@dlock` (Redis 7.4+, Valkey 8+); must be
    // added during OnLoad, before the commands that name it.
    let own_category = has_categories && has_add_category && ctx.add_acl_category(ACL_CATEGORY);
    for def in COMMANDS {
        let Some(cmd) = ctx.create_command(def) else {
            return Err(def.name);
        };
        if cmd.set_info(def, SINCE).is_err() {
            return Err(def.name);
        }
        if has_categories {
            let Ok(cats) = CString::new(acl_categories(def.flags.to_bytes(), own_category)) else {
                return Err(def.name);
            };
            if !cmd.set_acl_categories(&cats) {
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

#[cfg(test)]
mod acl_tests {
    use super::*;
    use crate::ffi::command::info_arrays;

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
