//! Lock notifications: one message (`released`, `expired`, `deleted`) on the
//! lock's channel whenever it becomes grantable to someone who could not have
//! it before.
//!
//! Channel: `dlock:` + key when the key has a Redis Cluster hash tag
//! (`{…}` with non-empty content), else `dlock:{` + key + `}`, so the channel
//! hashes to the key's slot. Classic PUBLISH standalone; sharded in cluster
//! mode, except for a tagless key containing `}` whose channel lands in
//! another slot.

use crate::ffi::Ctx;

pub const RELEASED: &[u8] = b"released";
pub const EXPIRED: &[u8] = b"expired";
pub const DELETED: &[u8] = b"deleted";

/// Whether `key` has a non-empty hash tag, by Redis Cluster's rule: the first
/// `{` and the first `}` after it, with something in between.
pub fn has_hash_tag(key: &[u8]) -> bool {
    match key.iter().position(|&b| b == b'{') {
        Some(open) => key
            .get(open + 1..)
            .and_then(|rest| rest.iter().position(|&b| b == b'}'))
            .is_some_and(|len| len > 0),
        None => false,
    }
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
    if ctx.is_replica() || ctx.is_loading() {
        return;
    }
    let sharded = ctx.is_cluster() && same_slot(key);
    ctx.publish(&channel(key), message, sharded);
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
