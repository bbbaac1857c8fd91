//! The Lua baselines, written for this bench after the algorithms people use.

/// Compare-and-delete release of a `SET key owner NX PX` lock.
/// KEYS[1] lock key; ARGV[1] owner. Returns 1 when deleted, 0 otherwise.
pub const CAD_RELEASE: &str = "\
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('del', KEYS[1])
end
return 0";

/// Redisson-style reentrant lock, acquire (as RedissonLock.tryLockInnerAsync):
/// a hash with one field per owner holding its count.
/// KEYS[1] lock key; ARGV[1] lease ms; ARGV[2] owner.
/// Returns nil on grant, else the lock's remaining ttl in ms.
pub const REDISSON_ACQUIRE: &str = "\
if (redis.call('exists', KEYS[1]) == 0) or (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then
  redis.call('hincrby', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return nil
end
return redis.call('pttl', KEYS[1])";

/// Redisson-style reentrant lock, release (as RedissonLock.unlockInnerAsync).
/// KEYS[1] lock key, KEYS[2] unlock channel; ARGV[1] unlock message,
/// ARGV[2] lease ms, ARGV[3] owner.
/// Returns nil when not held, 0 when still held (reentrant), 1 when released.
pub const REDISSON_RELEASE: &str = "\
if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then
  return nil
end
local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1)
if counter > 0 then
  redis.call('pexpire', KEYS[1], ARGV[2])
  return 0
end
redis.call('del', KEYS[1])
redis.call('publish', KEYS[2], ARGV[1])
return 1";

/// Redisson's unlock channel for a lock key.
pub fn redisson_channel(key: &str) -> String {
    format!("redisson_lock__channel:{{{key}}}")
}

/// Redisson's unlock message (`LockPubSub.UNLOCK_MESSAGE`).
pub const UNLOCK_MESSAGE: &str = "0";

/// SHA1s of the loaded scripts.
#[derive(Clone)]
pub struct Shas {
    pub cad: String,
    pub r_acquire: String,
    pub r_release: String,
}

pub fn load(con: &mut redis::Connection) -> Shas {
    let mut load = |src: &str| -> String {
        redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(src)
            .query(con)
            .expect("SCRIPT LOAD")
    };
    Shas {
        cad: load(CAD_RELEASE),
        r_acquire: load(REDISSON_ACQUIRE),
        r_release: load(REDISSON_RELEASE),
    }
}
