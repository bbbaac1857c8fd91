//! Lock notifications: one message (`released`, `expired`, `deleted`) on the
//! lock's channel whenever it becomes grantable to someone who could not have
//! it before.
//!
//! Channel: `dlock:` + key when the key has a Redis Cluster hash tag
//! (`{…}` with non-empty content), else `dlock:{` + key + `}`, so the channel
//! hashes to the key's slot. Classic PUBLISH standalone; sharded in cluster
//! mode, except for a tagless key containing `}` whose channel lands in
//! another slot.

use super::cluster::has_hash_tag;
use crate::ffi::{Ctx, RStr, RString};
use std::cell::Cell;

pub const RELEASED: &[u8] = b"released";
pub const EXPIRED: &[u8] = b"expired";
pub const DELETED: &[u8] = b"deleted";
/// A hold taken with `BIND` ended because its connection closed.
pub const DISCONNECTED: &[u8] = b"disconnected";

thread_local! {
    /// The four messages as module strings, made once at load and kept for
    /// the module's life (publishing is on the RELEASE hot path).
    static MESSAGES: [Cell<Option<RStr<'static>>>; 4] = const {
        [Cell::new(None), Cell::new(None), Cell::new(None), Cell::new(None)]
    };
}

/// Creates the cached message strings (at module load).
pub fn init_messages() {
    let _ = MESSAGES.try_with(|m| {
        for (slot, text) in m.iter().zip([RELEASED, EXPIRED, DELETED, DISCONNECTED]) {
            slot.set(RString::new(text).map(RString::leak));
        }
    });
}

fn cached(message: &[u8]) -> Option<RStr<'static>> {
    let i = match message {
        RELEASED => 0,
        EXPIRED => 1,
        DISCONNECTED => 3,
        _ => 2,
    };
    MESSAGES
        .try_with(|m| m.get(i).and_then(Cell::get))
        .ok()
        .flatten()
}

/// The notification channel of `key`.
pub fn channel(key: &[u8]) -> Vec<u8> {
    let mut c = Vec::with_capacity(key.len() + 8);
    if has_hash_tag(key) {
        c.extend_from_slice(b"dlock:");
        c.extend_from_slice(key);
    } else {
        c.extend_from_slice(b"dlock:{");
        c.extend_from_slice(key);
        c.push(b'}');
    }
    c
}

/// Whether the channel of `key` hashes to the key's own slot.
pub fn same_slot(key: &[u8]) -> bool {
    has_hash_tag(key) || !key.contains(&b'}')
}

/// Publishes `message` for `key`. Replicas and a loading server stay quiet:
/// the master that made the change publishes it.
pub fn publish(ctx: Ctx, key: &[u8], message: &[u8]) {
    use redis_module::raw::{
        REDISMODULE_CTX_FLAGS_CLUSTER as CLUSTER, REDISMODULE_CTX_FLAGS_LOADING as LOADING,
        REDISMODULE_CTX_FLAGS_SLAVE as REPLICA,
    };
    let flags = ctx.flags();
    if flags & (REPLICA | LOADING) != 0 {
        return;
    }
    let sharded = flags & CLUSTER != 0 && same_slot(key);
    // Most keys are short: build the channel on the stack.
    let mut buf = [0u8; 256];
    let len = key.len() + 8;
    if len <= buf.len() {
        let (head, tail): (&[u8], &[u8]) = if has_hash_tag(key) {
            (b"dlock:", b"")
        } else {
            (b"dlock:{", b"}")
        };
        let n = head.len() + key.len() + tail.len();
        if let Some(dst) = buf.get_mut(..n) {
            let (a, rest) = dst.split_at_mut(head.len());
            let (b, c) = rest.split_at_mut(key.len());
            a.copy_from_slice(head);
            b.copy_from_slice(key);
            c.copy_from_slice(tail);
            ctx.publish(dst, message, cached(message), sharded);
            return;
        }
    }
    ctx.publish(&channel(key), message, cached(message), sharded);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channels() {
        let cases: &[(&[u8], &[u8], bool)] = &[
            (b"orders", b"dlock:{orders}", true),
            (b"{user1}:lock", b"dlock:{user1}:lock", true),
            (b"a{}b", b"dlock:{a{}b}", false),
            (b"a}b", b"dlock:{a}b}", false),
            (b"a{b", b"dlock:{a{b}", true),
            (b"", b"dlock:{}", true),
        ];
        for (key, chan, same) in cases {
            assert_eq!(channel(key), chan.to_vec(), "{:?}", key);
            assert_eq!(same_slot(key), *same, "{:?}", key);
        }
    }
}
