//! Command registration through the module API: a command's table entry
//! ([`CommandDef`], 'static data only) becomes `RedisModule_CreateCommand`,
//! then `RedisModule_SetCommandInfo` with C structs built here by safe
//! helpers (Rust struct literals, every field named), then, where the server
//! has it, `RedisModule_SetCommandACLCategories`. The C structs and the
//! command handle never leave this file.

use super::callbacks::Handler;
use super::{rm, Ctx, ERR, OK};
use redis_module::raw;
use std::ffi::{c_int, CStr};
use std::marker::PhantomData;
use std::ptr;

/// One argument for COMMAND DOCS.
pub struct ArgDoc {
    pub name: &'static CStr,
    pub kind: raw::RedisModuleCommandArgType,
    pub token: Option<&'static CStr>,
    pub optional: bool,
    /// For a one-of: its pure-token choices.
    pub choices: &'static [&'static CStr],
}

/// One command: name (lower case, as registered), flags, arity, docs and
/// the flags of its one key (the first argument).
pub struct CommandDef {
    pub name: &'static CStr,
    pub handler: Handler,
    pub flags: &'static CStr,
    pub arity: c_int,
    pub summary: &'static CStr,
    pub complexity: &'static CStr,
    pub key_flags: u64,
    pub args: &'static [ArgDoc],
}

pub const T_KEY: raw::RedisModuleCommandArgType =
    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_KEY;
pub const T_STR: raw::RedisModuleCommandArgType =
    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_STRING;
pub const T_INT: raw::RedisModuleCommandArgType =
    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_INTEGER;
pub const T_ONEOF: raw::RedisModuleCommandArgType =
    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_ONEOF;
pub const T_TOKEN: raw::RedisModuleCommandArgType =
    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_PURE_TOKEN;

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
pub(crate) struct InfoArrays {
    pub(crate) key_specs: [raw::RedisModuleCommandKeySpec; 2],
    /// Each argument, then [`ARG_NONE`].
    pub(crate) args: Vec<raw::RedisModuleCommandArg>,
    /// For each one-of argument: its choices, then [`ARG_NONE`]; `args`
    /// point into these heap buffers, which moving the vectors leaves put.
    pub(crate) _choices: Vec<Vec<raw::RedisModuleCommandArg>>,
}

pub(crate) fn info_arrays(def: &CommandDef) -> InfoArrays {
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

/// A command this module created, for setting its info and ACL
/// categories during the load (`'cb`).
pub struct Command<'cb> {
    p: ptr::NonNull<raw::RedisModuleCommand>,
    _ctx: PhantomData<Ctx<'cb>>,
}

impl<'cb> Ctx<'cb> {
    /// Creates the command `def` (its name, handler and flags); None when
    /// the server refused.
    pub fn create_command(self, def: &CommandDef) -> Option<Command<'cb>> {
        // SAFETY: a valid context (the load callback's); the name and flags
        // are 'static NUL-terminated strings (the server copies the name);
        // the handler has the signature the server calls.
        let created = unsafe {
            rm!(RedisModule_CreateCommand(self.as_raw(), def.name.as_ptr(), Some(def.handler), def.flags.as_ptr(), 0, 0, 0) else ERR)
        };
        if created != OK {
            return None;
        }
        // SAFETY: as above; the command was just created under this name.
        let p = unsafe {
            rm!(RedisModule_GetCommand(self.as_raw(), def.name.as_ptr()) else ptr::null_mut())
        };
        ptr::NonNull::new(p).map(|p| Command {
            p,
            _ctx: PhantomData,
        })
    }

    /// Adds the ACL category `name` (during the load); false when the
    /// server refused or lacks the API.
    pub fn add_acl_category(self, name: &'static CStr) -> bool {
        // SAFETY: a valid context (the load callback's); a 'static
        // NUL-terminated name.
        unsafe { rm!(RedisModule_AddACLCategory(self.as_raw(), name.as_ptr()) else ERR) == OK }
    }
}

/// Whether the server has `SetCommandACLCategories` and
/// `AddACLCategory` (Redis 7.4+, Valkey 8+).
pub fn acl_category_api() -> (bool, bool) {
    // SAFETY: reading function-pointer statics filled in by
    // RedisModule_Init.
    unsafe {
        (
            { raw::RedisModule_SetCommandACLCategories }.is_some(),
            { raw::RedisModule_AddACLCategory }.is_some(),
        )
    }
}

impl Command<'_> {
    /// Sets the command's arity, key spec and docs from `def`, with `since`
    /// as its `since`.
    pub fn set_info(&self, def: &CommandDef, since: &'static CStr) -> Result<(), ()> {
        let mut arrays = info_arrays(def);
        let info = raw::RedisModuleCommandInfo {
            version: &INFO_VERSION,
            summary: def.summary.as_ptr(),
            complexity: def.complexity.as_ptr(),
            since: since.as_ptr(),
            history: ptr::null_mut(),
            tips: ptr::null(),
            arity: def.arity,
            key_specs: arrays.key_specs.as_mut_ptr(),
            args: arrays.args.as_mut_ptr(),
        };
        // SAFETY: the command this module just created; `info` and every
        // array and string it points to (`arrays`, 'static strings) outlive
        // the call, each array ends with its end entry, and the server
        // copies what it keeps during the call.
        let status = unsafe { rm!(RedisModule_SetCommandInfo(self.p.as_ptr(), &info) else ERR) };
        drop(arrays);
        if status == OK {
            Ok(())
        } else {
            Err(())
        }
    }

    /// Sets the command's ACL categories (a space-separated list); false
    /// when the server refused.
    pub fn set_acl_categories(&self, categories: &CStr) -> bool {
        // SAFETY: the command this module just created; the server parses
        // the NUL-terminated list during the call.
        unsafe {
            rm!(RedisModule_SetCommandACLCategories(self.p.as_ptr(), categories.as_ptr()) else ERR)
                == OK
        }
    }
}
