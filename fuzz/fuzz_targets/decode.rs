//! libFuzzer target: [`dlock_fuzz::decode`] (see fuzz/src/lib.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| dlock_fuzz::decode(data));
