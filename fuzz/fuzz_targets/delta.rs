//! libFuzzer target: [`dlock_fuzz::delta`] (see fuzz/src/lib.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| dlock_fuzz::delta(data));
