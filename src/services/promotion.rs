//! Tokens across promotion. When this server becomes a master (REPLICAOF NO
//! ONE, a Sentinel failover, CLUSTER FAILOVER: the server's role-change
//! event), the token counter jumps `dlock.promotion-gap-ms` above the
//! higher of the last token this server saw and its clock, so the tokens it
//! issues exceed those of grants the old master made but never replicated.
//!
//! The jump is made in the event callback itself (module memory only, so no
//! grant can slip in before it); a 0 ms job then replicates it — to the new
//! master's replicas and its AOF — as a floor-only `DLOCK.APPLY`
//! (`codec::encode_floor`: it raises the floor and touches no key). RDB
//! saves the counter as the type's aux data.

use super::jobq::{self, Job};
use crate::ffi::{self, AnyCtx, Ctx, RString};
use crate::storage::tokens;
use crate::{config, stats};
use dlock_core::codec;

/// The key name a floor-only `DLOCK.APPLY` carries (any name would do: a
/// floor-only payload touches no key).
const FLOOR_KEY: &[u8] = b"dlock:token-floor";

/// The server just became a master: count it, raise the token floor, and
/// have the new floor replicated.
pub fn promoted() {
    stats::add(&stats::counter::promotions, 1);
    let (_, now_us) = ffi::now();
    let gap_us = config::promotion_gap_ms().saturating_mul(1000);
    tokens::promote(now_us, gap_us);
    jobq::schedule(Job::Floor);
}

/// Replicates the token counter as a floor-only `DLOCK.APPLY` (to replicas
/// and the AOF). Masters only.
pub fn replicate_floor(ctx: Ctx<'_>) {
    if ctx.is_replica() {
        return;
    }
    let Some(name) = RString::new(FLOOR_KEY) else {
        return;
    };
    let payload = codec::encode_floor(tokens::last());
    ctx.replicate_apply(name.as_rstr(), &payload);
}
