//! The tests of dlock-core, against its public API only: one module per
//! subject, their shared parts in `common` (one test binary, so those build
//! once). Run one subject with
//! `cargo test -p dlock-core --release --test public_api SUBJECT::`.
//!
//! What the public API cannot show is tested inside the crate, beside its
//! code: see `common`'s documentation.

mod common;

mod bind;
mod codec;
mod deadlines;
mod deadlock;
mod decide;
mod delta_replication;
mod fair;
mod fencing;
mod fifo;
mod fuzz_lock_delay_bind;
mod fuzz_locks;
mod fuzz_semaphore_latch;
mod handoff;
mod histogram;
mod journal;
mod latch;
mod model;
mod mutex;
mod queries;
mod queue_cap;
mod rw;
mod semaphore;
mod slowlog;
mod tokens;
