//! msprobe's dump.json reader on arbitrary bytes: errors are fine, panics are not.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = accutrace_formats::msprobe::dump_json::parse(data);
});
