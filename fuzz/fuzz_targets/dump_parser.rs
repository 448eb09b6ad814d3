//! Dump files of either layout, and op-debug payloads. Seeds: fuzz/corpus/dump_parser/.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    accutrace_formats::dump::fuzzing::dump_parser(data);
});
