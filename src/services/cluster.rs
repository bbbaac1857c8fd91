//! Redis Cluster knowledge: hash tags, key slots, and whether this node
//! serves a key's slot (asked of `CLUSTER NODES` on rare paths).

use crate::ffi::{AnyCtx, Ctx};

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

/// In cluster mode: whether this node serves `key`'s slot and is not
/// migrating it away (asks CLUSTER NODES: only on rare paths). Always
/// true outside cluster mode.
pub fn serves(ctx: Ctx<'_>, key: &[u8]) -> bool {
    if !ctx.is_cluster() {
        return true;
    }
    ctx.call_for_string(c"CLUSTER", c"NODES", |nodes| {
        !nodes.is_empty() && myself_serves(nodes, key_slot(key))
    })
    .unwrap_or(false)
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
}
