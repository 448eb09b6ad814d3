//! Where the index finds a tensor's statistics ([`StatsPlace`]): nowhere, held in the index's own table
//! (`HeldStats`, 64 bytes), or in the source's record, read again on request ([`RecordStats`]). The index
//! reads and sets them in `stats_of`.
//!
//! A capture's tensor records keep every tensor's statistics, mapped, where the index points (its
//! locator): an index of a long statistics capture holding a copy of each was 64 of the 136 bytes a tensor
//! of every command (#18: memory with the tensor count). Sources that have nowhere to read them again from
//! (a dump's statistics CSV, msprobe's `dump.json`, values decoded once) hold them in the table.

use accutrace_formats::stats::TensorStats;
use std::sync::Arc;

/// Where a tensor's statistics are: 8 bytes a tensor instead of the statistics themselves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StatsPlace {
    /// The source recorded none.
    None,
    /// In the source's record at the tensor's locator, read through the index's [`RecordStats`].
    InRecord,
    /// In the index's table of held statistics, at this slot.
    Held(u32),
}

/// A source that reads a tensor's recorded statistics again by the tensor's locator.
pub trait RecordStats: Send + Sync {
    /// The statistics recorded at `locator`; `None` where they cannot be read (the source's records were
    /// checked when it was indexed, so only bytes changed since then fail).
    fn stats_at(&self, locator: u64) -> Option<TensorStats>;
}

/// The index's [`RecordStats`], shared with its source.
#[derive(Clone)]
pub(crate) struct StatsReader(pub(crate) Arc<dyn RecordStats>);

impl std::fmt::Debug for StatsReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StatsReader")
    }
}
