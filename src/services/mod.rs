//! Services: what the commands share, and what runs without a command.
//! - [`commit`]: the one place a change to a stored lock is committed
//!   (handoff, deletion of an empty lock, expiry index, replication,
//!   notification);
//! - [`blocking`]: the one blocking service and its waiter registry, for
//!   locks, semaphores and latches;
//! - [`deadlock`]: deadlock detection across locks (the wait-for graph of
//!   blocked owners);
//! - [`expiry`]: the expiry index and its timer;
//! - [`jobs`]: deferred work (prune, requeue, unbind) on a 0 ms timer;
//! - [`events`]: keyspace and server events, and the type's unlink hook;
//! - [`bound`] (BIND's registry), [`hint`] (the handoff hint),
//!   [`notify`] (channels and messages), [`cluster`] (slot ownership),
//!   [`state`] (main-thread state cells), [`observe`] (wait and hold
//!   times: DLOCK.STATS and DLOCK.SLOWLOG), [`promotion`] (tokens across
//!   promotion).
//!
//! Services use storage and ffi below them, never the commands above.

pub mod blocking;
pub mod bound;
pub mod cluster;
pub mod commit;
pub mod deadlock;
pub mod events;
pub mod expiry;
pub mod expiry_index;
pub mod grant;
pub mod hint;
pub mod jobq;
pub mod jobs;
pub mod notify;
pub mod observe;
pub mod promotion;
pub mod state;
pub mod waiters;
