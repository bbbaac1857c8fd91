//! What the integration tests of dlock-core share: the table runner and
//! hand-written payloads of the rule tests, the contract's grant rule
//! written independently of `Lock::decide`, the checks the fuzzers run
//! after every step, and a replica kept in step by deltas.
//!
//! Each test crate uses a part of it.
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
