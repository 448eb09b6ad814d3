//! Dump file names, stats CSVs and mapping.csv. Seeds: fuzz/corpus/name_parser/.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    accutrace_formats::dump::fuzzing::name_parser(data);
});
