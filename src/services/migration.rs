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
//!   as a BLPOP on a key whose slot moved: `-MOVED <slot> <target>`, as
//!   Valkey answers the BLPOPs it unblocks there;
//! - holds bound to a connection (BIND) arrive bound elsewhere (the codec
//!   marks them so), and end on the target once the import completes (the
//!   ATOMIC_SLOT_MIGRATION server event, IMPORT_COMPLETED: a prune of every
//!   filed lock, which ends such holds and publishes `disconnected` from
//!   the target, as after a restart or a promotion); the source forgets
//!   which of its connections had bound holds in the exported slots
//!   (EXPORT_COMPLETED), so their later close ends nothing there;
//! - an aborted import: Valkey drops the keys it had imported; their unlink
//!   takes their expiry entries and, the slot not being this node's, the
//!   `Left` job publishes and grants nothing. An aborted export changes
//!   nothing on the source.

use super::jobq::{self, Job};
use super::{bound, cluster};
use crate::ffi::callbacks::{subscribe_server_event, EventData, ServerEvent};
use crate::ffi::Ctx;

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

/// `VALKEYMODULE_EVENT_ATOMIC_SLOT_MIGRATION` and its subevent
/// `IMPORT_COMPLETED` (Valkey 9.0 and later).
const EVENT_ATOMIC_SLOT_MIGRATION: u64 = 19;
const SUBEVENT_IMPORT_COMPLETED: u64 = 4;
const SUBEVENT_EXPORT_COMPLETED: u64 = 5;

/// Subscribes to the atomic slot migration events where the server has
/// them; false when the server refused.
pub fn subscribe(ctx: Ctx<'_>, (valkey, version): (bool, (u32, u32))) -> bool {
    options(valkey, version) == 0 || subscribe_server_event::<Migration>(ctx)
}

struct Migration;

impl ServerEvent for Migration {
    const ID: u64 = EVENT_ATOMIC_SLOT_MIGRATION;

    fn on(_ctx: Ctx<'_>, sub: u64, data: EventData<'_>) {
        match sub {
            SUBEVENT_IMPORT_COMPLETED => {
                // The imported locks are filed (DLOCK.APPLY); their holds
                // bound to a connection of the source end at the next job
                // run.
                jobq::schedule(Job::PruneAll);
            }
            SUBEVENT_EXPORT_COMPLETED => {
                // The slots' locks left with their keys (unlink2 took their
                // expiry entries; blocked connections were redirected):
                // forget which connections had bound holds there.
                let ranges = data.migration_slot_ranges();
                bound::forget_keys(|_, key| {
                    let slot = cluster::key_slot(key);
                    ranges.iter().any(|(a, b)| (*a..=*b).contains(&slot))
                });
            }
            _ => {}
        }
    }
}
