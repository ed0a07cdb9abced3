#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| ckpt::fuzz_checks::merge(data));
