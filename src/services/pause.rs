//! Client pauses: what the module does by itself waits for their end.
//!
//! While clients are paused for writes (`CLIENT PAUSE … WRITE|ALL`, and the
//! pause a `FAILOVER` makes while its replica catches up), the server keeps
//! the dataset and the replication offset still, and aborts when anything is
//! propagated (an assertion in `propagateNow`, fired by a module timer's
//! context as it is freed: issue 44). Commands that write are held back by
//! the server then; what the module starts by itself is not: the expiry
//! timer (lease, lock-delay and queued-place ends, handoffs), the job runner
//! (a closed `BIND` connection's holds, prunes, requeues), a `WAIT` that
//! times out and a ready callback. Each of them asks [`paused`] first and,
//! while it says so, changes no lock: it leaves its work for later (the
//! timers fire again every [`POLL_MS`]; a timed-out wait is answered at once
//! and its place given up by a job). So nothing changes that a replica or
//! the AOF would have to learn, and no grant is made that the replica of a
//! `FAILOVER` could miss; a master that the `FAILOVER` made a replica drops
//! the work (its new master ends what time ended itself).
//!
//! Reads do not wait, nor do the commands that run after the pause before
//! a deferred job: a hold whose lease ended or whose `BIND` connection
//! closed, and the place of a wait that timed out, are over for CHECK,
//! FENCED, INFO, SCAN and every acquire whether or not the timer or the
//! job has run (`commit::settle`, `commit::as_of`), as Redis' own expired
//! keys read as gone before they are deleted.

use crate::ffi;

/// How often a deferred timer looks again while the pause lasts, in ms:
/// the delay between a pause's end and the work it held back.
pub const POLL_MS: u64 = 5;

/// Whether the server forbids propagation now (see the module docs).
pub fn paused() -> bool {
    ffi::propagation_paused()
}
