//! Services: what the commands share, and what runs without a command.
//! Four sub-layers; a file uses only its own sub-layer and those below
//! (`tests/layers.rs` checks it, and that no import closes a circle):
//!
//! - drivers, beside the commands: [`blocking`] (blocked-client
//!   callbacks), [`expiry`] (the expiry timer), [`jobs`] (the job runner),
//!   [`events`] (keyspace and server events, the type's unlink hook),
//!   [`promotion`] (tokens across promotion), [`swapload`] (a replica's
//!   load into a temporary db), [`migration`] (Valkey 9's atomic slot
//!   migration);
//! - middle: [`commit`] (the one place a change to a stored lock is
//!   committed: handoff, deletion of an empty lock, expiry index,
//!   replication, notification), [`grant`] (the grant attempt, new holds,
//!   the server-side handoff), [`deadlock`] (the wait-for graph of blocked
//!   owners and its search);
//! - registries, data only: [`waiters`] (who waits, for what, with what
//!   answer), [`bound`] (BIND's registry), [`expiry_index`] (locks by
//!   deadline; arms the timer), [`jobq`] (deferred work as data);
//! - base: [`state`] (main-thread state cells), [`hint`] (the handoff
//!   hint), [`notify`] (channels and messages), [`cluster`] (slot
//!   ownership), [`observe`] (wait and hold times: DLOCK.STATS and
//!   DLOCK.SLOWLOG), [`pause`] (client pauses: the module's own work
//!   waits for their end).
//!
//! What a lower sub-layer needs of a higher one is passed down as an
//! argument or handed back as a value; the callbacks of the timers the
//! registries arm are installed at load (`jobs::set_detached`).
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
pub mod migration;
pub mod notify;
pub mod observe;
pub mod pause;
pub mod promotion;
pub mod state;
pub mod swapload;
pub mod waiters;
