//! The `.pt` reader (zip archive + safe pickle interpreter + strided gather) on arbitrary bytes:
//! errors are fine, panics and unbounded allocations are not.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = accutrace_formats::msprobe::pt::read_pt_bytes(data);
    let _ = accutrace_formats::msprobe::pickle::load_tensor(data);
});
