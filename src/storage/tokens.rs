//! The server-wide fencing-token counter: the highest token issued or seen
//! (in a payload, an RDB's aux data, or a replicated effect). Saved as the
//! type's aux data, before the keys, so a restart never issues a token again
//! — where the clock alone would not do that (see [`aux_save2`]).

use crate::ffi::rm;
use dlock_core::Tokens;
use redis_module::raw;
use std::ffi::c_int;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

static LAST: AtomicU64 = AtomicU64::new(0);

/// The counter, to issue tokens from.
pub fn tokens() -> Tokens {
    Tokens { last: last() }
}

/// The highest token issued or seen.
pub fn last() -> u64 {
    LAST.load(Relaxed)
}

/// After issuing from [`tokens`]: keeps the highest.
pub fn set(t: Tokens) {
    observe(t.last);
}

/// Records a token seen in loaded or replicated state.
pub fn observe(token: u64) {
    LAST.fetch_max(token, Relaxed);
}

/// This server became a master: raises the counter to `gap_us` above the
/// higher of the last token seen and the clock `now_us`, so that the next
/// token exceeds every token the old master could have issued that this
/// server never saw (while the two clocks differ by less than the gap).
/// Returns the new floor.
pub fn promote(now_us: u64, gap_us: u64) -> u64 {
    let floor = last()
        .max(now_us)
        .saturating_add(gap_us)
        .min(dlock_core::MAX_TOKEN);
    observe(floor);
    last()
}

/// `aux_save` (Redis 7.0, which lacks `aux_save2`): the counter, always.
///
/// # Safety
/// `rdb` must be the live io handle Redis passes to the callback.
pub unsafe extern "C" fn aux_save(rdb: *mut raw::RedisModuleIO, _when: c_int) {
    // SAFETY: `rdb` is a live io handle during the call (the contract).
    unsafe { rm!(RedisModule_SaveUnsigned(rdb, last()) else ()) };
}

/// `aux_save2` (Redis 7.2+, Valkey; the server then ignores `aux_save`):
/// the counter only when the RDB needs it, so that an RDB of a server that
/// holds no lock loads without the module (issue 44, item 4). Writing
/// nothing leaves the module's aux field out of the RDB. Needed when:
/// - the counter is not behind the clock (`now_us`): tokens are at least
///   the grant's unix time in µs, so a counter behind the clock is carried
///   by the clock of the restarted server (as long as that clock does not
///   step back across the restart), while one ahead of it — for up to
///   `dlock.promotion-gap-ms` after a promotion, or after payloads from a
///   server whose clock ran ahead — must be saved, or a restart would issue
///   tokens below it;
/// - or a lock exists: its value needs the module anyway (and its payload
///   carries the counter too).
///
/// # Safety
/// `rdb` must be the live io handle Redis passes to the callback.
pub unsafe extern "C" fn aux_save2(rdb: *mut raw::RedisModuleIO, when: c_int) {
    let (_, now_us) = crate::ffi::now();
    if last() < now_us && crate::stats::locks() == 0 {
        return;
    }
    // SAFETY: the caller's contract is aux_save's.
    unsafe { aux_save(rdb, when) };
}

pub unsafe extern "C" fn aux_load(
    rdb: *mut raw::RedisModuleIO,
    encver: c_int,
    _when: c_int,
) -> c_int {
    if encver != super::ENCVER {
        return crate::ffi::ERR;
    }
    // SAFETY: `rdb` is a live io handle; the read is checked for an io error.
    let (t, failed) = unsafe {
        (
            rm!(RedisModule_LoadUnsigned(rdb) else 0),
            rm!(RedisModule_IsIOError(rdb) else 1) != 0,
        )
    };
    if failed {
        return crate::ffi::ERR;
    }
    observe(t.min(dlock_core::MAX_TOKEN));
    crate::ffi::OK
}
