//! What the integration tests of dlock-core share: the table runner and
//! hand-written payloads of the rule tests, the contract's grant rule
//! written independently of `Lock::decide`, the checks the fuzzers run
//! after every step, and a replica kept in step by deltas.
//!
//! Each test crate uses a part of it.
//!
//! The tests of dlock-core live here in tests/, one file per subject,
//! against the public API only. What that API cannot show stays in the
//! crate as unit tests next to its code: the byte codes of kinds and modes
//! (`lib.rs`), the journal's queued-owner set and a replica's known id
//! ranges (`journal.rs`), the compact form's field limits, found with
//! locks no payload may describe (`compact/tests.rs`), and the tests of
//! `deadlines`, `histogram` and `slowlog`.
#![allow(dead_code, unused_imports)]

pub mod check;
pub mod raw;
pub mod replica;
pub mod spec;
pub mod table;

pub use check::*;
pub use dlock_core::codec::*;
pub use dlock_core::rng::Rng;
pub use raw::*;
pub use replica::*;
pub use spec::*;
pub use table::*;
