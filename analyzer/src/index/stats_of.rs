//! A tensor's statistics read and set through the index, wherever they are ([`StatsPlace`]).

use super::held_stats::HeldStats;
use super::stats_place::{PackedPlace, RecordStats, StatsPlace, StatsReader};
use super::{Index, TensorId};
use accutrace_formats::stats::TensorStats;
use std::sync::Arc;

impl Index {
    /// Tensor `t`'s statistics, where the source recorded them (a copy: the index holds them compactly or
    /// reads them again from the source's record).
    pub fn stats(&self, t: TensorId) -> Option<TensorStats> {
        match self.tensors[t].stats.get() {
            StatsPlace::None => None,
            StatsPlace::Held(slot) => Some(self.held_stats[slot as usize].get()),
            StatsPlace::InRecord => self.record_stats.as_ref()?.0.stats_at(self.tensors[t].locator),
        }
    }

    /// Holds `stats` as tensor `t`'s (in the slot it held before, if any); `None` forgets them.
    pub fn set_stats(&mut self, t: TensorId, stats: Option<TensorStats>) {
        let Some(stats) = stats else {
            self.tensors[t].stats = PackedPlace::new(StatsPlace::None);
            return;
        };
        let held = HeldStats::new(&stats);
        let place = match self.tensors[t].stats.get() {
            StatsPlace::Held(slot) => {
                self.held_stats[slot as usize] = held;
                StatsPlace::Held(slot)
            }
            // Past 2^32 - 2 slots none is held: the index already reports that tensors past 2^32 are
            // left out of their ops.
            StatsPlace::None | StatsPlace::InRecord => match self.held_stats.len() < PackedPlace::SLOTS {
                true => {
                    self.held_stats.push(held);
                    StatsPlace::Held((self.held_stats.len() - 1) as u32)
                }
                false => StatsPlace::None,
            },
        };
        self.tensors[t].stats = PackedPlace::new(place);
    }

    /// Tensor `t`'s statistics are in the source's record at its locator, which `reader` reads
    /// ([`Index::read_record_stats_with`]).
    pub(crate) fn set_stats_in_record(&mut self, t: TensorId) {
        self.tensors[t].stats = PackedPlace::new(StatsPlace::InRecord);
    }

    /// Reads the statistics of the tensors set [`set_stats_in_record`](Index::set_stats_in_record)
    /// through `reader`.
    pub(crate) fn read_record_stats_with(&mut self, reader: Arc<dyn RecordStats>) {
        self.record_stats = Some(StatsReader(reader));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::{Io, TensorInfo};
    use accutrace_formats::DType;

    /// Records by locator: the locator is the statistics' only value.
    struct Records;

    impl RecordStats for Records {
        fn stats_at(&self, locator: u64) -> Option<TensorStats> {
            (locator != 99).then(|| TensorStats::of_f32(&[locator as f32], DType::FLOAT))
        }
    }

    #[test]
    fn statistics_come_from_the_table_or_the_record() {
        let mut index = Index::default();
        let op = index.push_op("a".into(), "MatMul".into(), 0, 0);
        let ids: Vec<TensorId> = (0..4u64)
            .map(|k| {
                let t = TensorInfo {
                    locator: [5, 7, 99, 0][k as usize],
                    ..TensorInfo::for_test(op, Io::Output, k as u32, DType::FLOAT, vec![1])
                };
                index.push_tensor(t)
            })
            .collect();
        let held = TensorStats::of_f32(&[2.5, -1.0], DType::FLOAT);
        index.set_stats(ids[0], Some(held));
        index.set_stats_in_record(ids[1]);
        index.set_stats_in_record(ids[2]);
        assert_eq!(index.stats(ids[0]).map(|s| s.max), Some(2.5));
        assert_eq!(index.stats(ids[1]), None, "no reader yet");
        assert!(index.tensors[ids[1]].has_stats());
        index.read_record_stats_with(Arc::new(Records));
        assert_eq!(index.stats(ids[1]).map(|s| s.max), Some(7.0), "read at the tensor's locator");
        assert_eq!(index.stats(ids[2]), None, "a record that cannot be read gives none");
        assert_eq!(index.stats(ids[3]), None);
        assert!(!index.tensors[ids[3]].has_stats());
        // A second set reuses the slot; forgetting clears the place.
        index.set_stats(ids[0], Some(TensorStats::of_f32(&[4.0], DType::FLOAT)));
        assert_eq!((index.stats(ids[0]).map(|s| s.max), index.held_stats.len()), (Some(4.0), 1));
        index.set_stats(ids[1], Some(held));
        assert_eq!((index.stats(ids[1]).map(|s| s.max), index.held_stats.len()), (Some(2.5), 2));
        index.set_stats(ids[0], None);
        assert!(!index.tensors[ids[0]].has_stats());
    }
}
