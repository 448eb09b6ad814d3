//! CANN dump files: both file layouts, file names, dump directory trees, op-debug (overflow) records and
//! statistics CSVs (facts in docs/CANN.md §1 and §4).
//!
//! - [`file`](mod@file): parse a dump file (binary or old layout) into zero-copy tensor slices; memory-map files.
//! - [`write`](mod@write): write dump files exactly as CANN does (the simulated runtime uses it).
//! - [`names`]: six-, five- and four-field file names and FFTS+ suffixes; [`mapping`]: `mapping.csv`.
//! - [`launch`]: execution order, from what a file name says about when its op ran.
//! - [`tree`]: walk a dump directory tree into entries in execution order.
//! - [`opdebug`]: decode and encode op-debug overflow payloads; name the status bits.
//! - [`stats_csv`]: the `dump_data: stats` CSV.

pub mod file;
pub mod fuzzing;
pub mod launch;
mod legacy;
pub mod mapping;
pub mod names;
pub mod opdebug;
pub mod stats_csv;
pub mod tree;
pub mod write;

pub use file::{
    format_name, parse_dump, parse_dump_file, BinaryHeader, DumpFile, DumpLayout, DumpTensor, Io, MappedFile,
};
pub use launch::{Launch, PackedLaunch};
pub use mapping::NameMapping;
pub use names::{
    format_file_name, parse_file_name, sanitize_op_name, DumpFileName, FftsForm, FftsSuffix, FileKind,
};
pub use opdebug::{
    aicore_status_names, decode_opdebug, decode_opdebug_file, dha_atomic_status, encode_opdebug,
    find_overflowing_op, l2_atomic_status, AtomicStatus, Engine, EngineRecord, OpDebugLayout, OpDebugRecord,
};
pub use stats_csv::{parse_stats_csv, write_stats_csv, StatsRow};
pub use tree::{step_dir_number, walk_dump_tree, DumpEntry, DumpLocation, DumpTree, STEP_DIR_PREFIX};
pub use write::{encode_dump, encode_legacy_dump, write_dump};
