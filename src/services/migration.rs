//! Valkey 9's atomic slot migration (`CLUSTER MIGRATESLOTS`): the source
//! sends the slots' keys to the target as an AOF-format snapshot followed by
//! the stream of later writes, then hands the slots over and drops its copy.
//! Valkey refuses the migration while any loaded module has not declared
//! `VALKEYMODULE_OPTIONS_HANDLE_ATOMIC_SLOT_MIGRATION`; the module declares
//! it on Valkey 9 and later and keeps it true:
//! - the target receives each lock as the type's AOF rewrite writes it
//!   (`DLOCK.APPLY key <encoded lock>`, with the source's token counter), so
//!   holders, absolute lease ends, tokens and queues arrive intact and the
//!   target's counter rises past every token of the slot; later changes come
//!   through the same stream as replication's `DLOCK.APPLY`;
//! - the source drops its copies as the keys leave the keyspace: the type's
//!   unlink hook (`events::unlink2`) takes their expiry entries, and the
//!   deferred `Left` job, seeing that the node no longer serves the slot,
//!   neither publishes `deleted` nor grants: waiting connections are answered
//!   as a BLPOP on a key whose slot moved.

/// `VALKEYMODULE_OPTIONS_HANDLE_ATOMIC_SLOT_MIGRATION` of Valkey's
/// `valkeymodule.h` (9.0 and later).
const VALKEY_OPTIONS_HANDLE_ATOMIC_SLOT_MIGRATION: u32 = 1 << 5;

/// The option bits this service adds for the server (Valkey, version).
pub fn options(valkey: bool, version: (u32, u32)) -> u32 {
    if valkey && version >= (9, 0) {
        VALKEY_OPTIONS_HANDLE_ATOMIC_SLOT_MIGRATION
    } else {
        0
    }
}
