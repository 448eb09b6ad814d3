//! The accutrace analyzer: reads captures, CANN dump trees, .npy directories and msprobe dumps, and
//! answers the questions of a diverging port: where does it leave the benchmark (`compare`), is it
//! reproducible (`diff`), where did the first inf/NaN come from (`overflow`).
//!
//! Layout: [`sources`] read runs into an [`index::Index`] ([`steps`]: the steps of eager dumps);
//! [`matching`] pairs two indexes; [`metrics`]
//! compute the vendor-compatible numbers; the engines ([`compare`], [`diff`], [`overflow`], [`inspect`],
//! [`convert`], and [`series`]: a run over its steps) take plain options structs and return what they
//! found; [`report`] prints it, one module per command (`report::html`: the page of `analyzer report`). The command line (clap) lives in the binary only (`src/bin/analyzer/`): the
//! library never sees it.

pub mod api_matching;
pub mod check;
pub mod comparable;
pub mod compare;
pub mod convert;
pub mod diff;
pub mod filter;
pub mod gathered_stats;
pub mod index;
pub mod inspect;
pub mod late_reads;
pub mod matching;
pub mod metrics;
pub mod outcome;
pub mod overflow;
pub mod overflow_records;
pub mod problems;
pub mod progress;
pub mod ranks;
mod repeats;
pub mod report;
pub mod roles;
pub mod series;
pub mod sources;
pub mod steps;
pub mod threads;
pub mod watch;
