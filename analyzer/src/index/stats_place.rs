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

/// Where a tensor's statistics are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StatsPlace {
    /// The source recorded none.
    None,
    /// In the source's record at the tensor's locator, read through the index's [`RecordStats`].
    InRecord,
    /// In the index's table of held statistics, at this slot (below [`PackedPlace::SLOTS`]).
    Held(u32),
}

/// A [`StatsPlace`] in 4 bytes, as a tensor holds it: the slot, or one of two values no slot takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PackedPlace(u32);

impl PackedPlace {
    const NONE: u32 = u32::MAX;
    const IN_RECORD: u32 = u32::MAX - 1;
    /// How many slots a place can name.
    pub(crate) const SLOTS: usize = Self::IN_RECORD as usize;

    /// `place` packed; a slot past [`PackedPlace::SLOTS`] (which `Index::set_stats` never gives) packs as
    /// [`StatsPlace::None`].
    pub(crate) fn new(place: StatsPlace) -> PackedPlace {
        PackedPlace(match place {
            StatsPlace::None => Self::NONE,
            StatsPlace::InRecord => Self::IN_RECORD,
            StatsPlace::Held(slot) if slot < Self::IN_RECORD => slot,
            StatsPlace::Held(_) => Self::NONE,
        })
    }

    pub(crate) fn get(self) -> StatsPlace {
        match self.0 {
            Self::NONE => StatsPlace::None,
            Self::IN_RECORD => StatsPlace::InRecord,
            slot => StatsPlace::Held(slot),
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_place_packs_into_four_bytes_and_back() {
        let last = PackedPlace::SLOTS as u32 - 1;
        for place in [StatsPlace::None, StatsPlace::InRecord, StatsPlace::Held(0), StatsPlace::Held(last)] {
            assert_eq!(PackedPlace::new(place).get(), place);
        }
        assert_eq!(PackedPlace::new(StatsPlace::Held(last + 1)).get(), StatsPlace::None);
        assert_eq!(std::mem::size_of::<PackedPlace>(), 4);
    }
}
