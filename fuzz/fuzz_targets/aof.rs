//! libFuzzer target: [`dlock_fuzz::aof`] (see fuzz/src/lib.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| dlock_fuzz::aof(data));
