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
/// A hold taken with `BIND` ended because its connection closed.
pub const DISCONNECTED: &[u8] = b"disconnected";

/// The four messages as module strings, made once at load and kept for the
/// module's life (publishing is on the RELEASE hot path).
static MESSAGES: [std::sync::atomic::AtomicUsize; 4] = [
    std::sync::atomic::AtomicUsize::new(0),
    std::sync::atomic::AtomicUsize::new(0),
    std::sync::atomic::AtomicUsize::new(0),
    std::sync::atomic::AtomicUsize::new(0),
];

/// Creates the cached message strings (at module load).
pub fn init_messages() {
    for (slot, text) in MESSAGES
        .iter()
        .zip([RELEASED, EXPIRED, DELETED, DISCONNECTED])
    {
        slot.store(
            crate::ffi::RString::new(text).leak() as usize,
            std::sync::atomic::Ordering::Relaxed,
        );
    }
}

fn cached(message: &[u8]) -> crate::ffi::RawStr {
    let i = match message {
        RELEASED => 0,
        EXPIRED => 1,
        DISCONNECTED => 3,
        _ => 2,
    };
    MESSAGES
        .get(i)
        .map_or(0, |m| m.load(std::sync::atomic::Ordering::Relaxed)) as crate::ffi::RawStr
}

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

/// The Redis Cluster hash slot of `key` (CRC16/XMODEM of the hash tag or
/// the whole key, mod 16384).
pub fn key_slot(key: &[u8]) -> u16 {
    let part = match key.iter().position(|&b| b == b'{') {
        Some(open) => match key
            .get(open + 1..)
            .and_then(|rest| rest.iter().position(|&b| b == b'}').map(|len| (rest, len)))
        {
            Some((rest, len)) if len > 0 => rest.get(..len).unwrap_or(key),
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

/// Whether the `myself` line of CLUSTER NODES serves `slot` and is not
/// migrating it away.
pub fn myself_serves(nodes: &[u8], slot: u16) -> bool {
    let Some(line) = nodes.split(|&b| b == b'\n').find(|l| {
        l.split(|&b| b == b' ')
            .nth(2)
            .is_some_and(|f| f.split(|&b| b == b',').any(|x| x == b"myself"))
    }) else {
        return false;
    };
    let mut serves = false;
    for field in line.split(|&b| b == b' ').skip(8) {
        let f = std::str::from_utf8(field).unwrap_or("").trim();
        if let Some(inner) = f.strip_prefix('[') {
            // "[slot->-node]" migrating away; "[slot-<-node]" importing.
            if let Some((s, _)) = inner.split_once("->-") {
                if s.parse::<u16>().ok() == Some(slot) {
                    return false;
                }
            }
            continue;
        }
        let (a, b) = f.split_once('-').unwrap_or((f, f));
        if let (Ok(a), Ok(b)) = (a.parse::<u16>(), b.parse::<u16>()) {
            serves |= (a..=b).contains(&slot);
        }
    }
    serves
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
    fn slots() {
        // Values from Redis' CLUSTER KEYSLOT.
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"{user1}:lock"), key_slot(b"user1"));
        assert_eq!(key_slot(b"a{}b"), key_slot(b"a{}b"));
        assert_eq!(key_slot(b""), 0);
        let nodes = b"abc 127.0.0.1:7001@17001 master - 0 0 1 connected 0-100 200 [50->-def]\n\
                      xyz 127.0.0.1:7002@17002 myself,master - 0 0 2 connected 0-5460 [7->-abc] [9-<-abc] 6000\n";
        assert!(myself_serves(nodes, 0));
        assert!(myself_serves(nodes, 5460));
        assert!(myself_serves(nodes, 6000));
        assert!(myself_serves(nodes, 9));
        assert!(!myself_serves(nodes, 7), "migrating away");
        assert!(!myself_serves(nodes, 5461));
        assert!(!myself_serves(b"", 0));
    }

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
