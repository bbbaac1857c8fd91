//! What the integration tests of dlock-core share: the table runner and
//! hand-written payloads of the rule tests, the contract's grant rule
//! written independently of `Lock::decide`, the checks the fuzzers run
//! after every step, and a replica kept in step by deltas.
//!
//! The tests of dlock-core live in tests/public_api/, one module per subject,
//! against the public API only. What that API cannot show stays in the
//! crate as unit tests next to its code: the byte codes of kinds and modes
//! (`lib.rs`), the journal's queued-owner set and a replica's known id
//! ranges (`journal.rs`), the compact form's field limits, found with
//! locks no payload may describe (`compact/tests.rs`), the inline form of
//! key names (`deadlines.rs`) and the histogram's bucket index
//! (`histogram.rs`).

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
