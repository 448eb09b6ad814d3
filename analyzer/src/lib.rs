//! The accutrace analyzer: reads captures, CANN dump trees, .npy directories and msprobe dumps, and
//! answers the questions of a diverging port: where does it leave the benchmark (`compare`), is it
//! reproducible (`diff`), where did the first inf/NaN come from (`overflow`).
//!
//! Layout: [`sources`] read runs into an [`index::Index`]; `matching` pairs two indexes; `metrics` compute
//! the vendor-compatible numbers; `commands` and `report` turn them into answers.

pub mod cli;
pub mod commands;
pub mod compare_report;
pub mod filter;
pub mod index;
pub mod matching;
pub mod metrics;
pub mod overflow_records;
pub mod progress;
pub mod report;
pub mod sources;
