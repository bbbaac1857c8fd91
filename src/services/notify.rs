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
use crate::ffi::{AnyCtx, RStr, RString};
use std::cell::{Cell, RefCell};
use std::mem::ManuallyDrop;

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

/// Longest key whose channel string is kept between notices.
const KEPT_KEY: usize = 64;

/// The channel string of the key that was published last, kept so that a
/// lock taken and let go over and over (the usual hot lock) does not create
/// and free its channel string on every release. One entry: a notice for
/// another key replaces it.
struct LastChannel {
    key: [u8; KEPT_KEY],
    len: usize,
    channel: RString,
}

thread_local! {
    /// Never dropped as a whole (no module API call from a thread-local
    /// destructor at exit); a replaced entry is dropped on the spot.
    static LAST: RefCell<ManuallyDrop<Option<LastChannel>>> =
        const { RefCell::new(ManuallyDrop::new(None)) };
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

/// What goes before and after `key` in its notification channel: the
/// channel rule, in one place.
fn channel_parts(key: &[u8]) -> (&'static [u8], &'static [u8]) {
    if has_hash_tag(key) {
        (b"dlock:", b"")
    } else {
        (b"dlock:{", b"}")
    }
}

/// The notification channel of `key`.
pub fn channel(key: &[u8]) -> Vec<u8> {
    let (head, tail) = channel_parts(key);
    [head, key, tail].concat()
}

/// Whether the channel of `key` hashes to the key's own slot.
pub fn same_slot(key: &[u8]) -> bool {
    has_hash_tag(key) || !key.contains(&b'}')
}

/// Publishes `message` for `key`. Replicas and a loading server stay quiet:
/// the master that made the change publishes it.
pub fn publish(ctx: impl AnyCtx, key: &[u8], message: &[u8]) {
    use redis_module::raw::{
        REDISMODULE_CTX_FLAGS_CLUSTER as CLUSTER, REDISMODULE_CTX_FLAGS_LOADING as LOADING,
        REDISMODULE_CTX_FLAGS_SLAVE as REPLICA,
    };
    let flags = ctx.flags();
    if flags & (REPLICA | LOADING) != 0 {
        return;
    }
    let sharded = flags & CLUSTER != 0 && same_slot(key);
    if let Some(m) = cached(message) {
        if publish_kept(ctx, key, m, sharded) {
            return;
        }
    }
    // Most keys are short: build the channel on the stack.
    let mut buf = [0u8; 256];
    if let Some(c) = channel_in(&mut buf, key) {
        ctx.publish(c, message, cached(message), sharded);
        return;
    }
    ctx.publish(&channel(key), message, cached(message), sharded);
}

/// The channel of `key` written into `buf`, when it fits.
fn channel_in<'b>(buf: &'b mut [u8], key: &[u8]) -> Option<&'b [u8]> {
    let (head, tail) = channel_parts(key);
    let n = head.len() + key.len() + tail.len();
    let dst = buf.get_mut(..n)?;
    let (a, rest) = dst.split_at_mut(head.len());
    let (b, c) = rest.split_at_mut(key.len());
    a.copy_from_slice(head);
    b.copy_from_slice(key);
    c.copy_from_slice(tail);
    Some(dst)
}

/// Publishes on the kept channel string of `key` (made and kept when the
/// last notice was for another key). False when the key is too long to keep
/// or the string could not be made: the caller publishes the plain way.
fn publish_kept(ctx: impl AnyCtx, key: &[u8], message: RStr<'static>, sharded: bool) -> bool {
    if key.len() > KEPT_KEY {
        return false;
    }
    let done = LAST.try_with(|last| {
        let Ok(mut last) = last.try_borrow_mut() else {
            return false;
        };
        let hit = last
            .as_ref()
            .is_some_and(|l| l.key.get(..l.len) == Some(key));
        if !hit {
            let mut buf = [0u8; KEPT_KEY + 8];
            let Some(channel) = channel_in(&mut buf, key).and_then(RString::new) else {
                return false;
            };
            let mut kept = [0u8; KEPT_KEY];
            let Some(dst) = kept.get_mut(..key.len()) else {
                return false;
            };
            dst.copy_from_slice(key);
            // The entry replaced is dropped here (its string freed).
            drop(last.replace(LastChannel {
                key: kept,
                len: key.len(),
                channel,
            }));
        }
        match last.as_ref() {
            Some(l) => {
                ctx.publish_strings(l.channel.as_rstr(), message, sharded);
                true
            }
            None => false,
        }
    });
    done.unwrap_or(false)
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
            let mut buf = [0u8; 32];
            assert_eq!(channel_in(&mut buf, key), Some(*chan), "{:?}", key);
            assert_eq!(same_slot(key), *same, "{:?}", key);
        }
        assert_eq!(channel_in(&mut [0u8; 10], b"orders"), None);
    }
}
