//! The statistics an analysis reads of the tensors it looks at: a source's stored ones, read where its index
//! keeps them, and those decoded from values, kept here. A map holding a copy of every stored one was a
//! third of `overflow`'s heap on a statistics capture of 198,840 tensors (#18: memory must not grow by
//! copies per tensor).

use crate::index::{Index, TensorId};
use accutrace_formats::stats::TensorStats;
use std::collections::BTreeMap;

/// Statistics by tensor, of the tensors an analysis asked for ([`crate::overflow::gather_stats`]).
#[derive(Debug, Default)]
pub struct GatheredStats<'a> {
    /// The index whose stored statistics count, and which of its tensors were asked for: one bit a tensor,
    /// so that a tensor outside the analysis has none here, as in a map of the asked ones.
    stored: Option<(&'a Index, Vec<u64>)>,
    /// Statistics decoded from values, of tensors that stored none.
    decoded: BTreeMap<TensorId, TensorStats>,
}

impl<'a> GatheredStats<'a> {
    /// The stored statistics of `tensors` of `index` (tensors without any are left for
    /// [`GatheredStats::insert_decoded`]).
    pub(crate) fn stored_of(index: &'a Index, tensors: impl IntoIterator<Item = TensorId>) -> Self {
        let mut asked = vec![0u64; index.tensors.len().div_ceil(64)];
        for t in tensors.into_iter().filter(|&t| index.tensors[t].has_stats()) {
            asked[t / 64] |= 1 << (t % 64);
        }
        GatheredStats { stored: Some((index, asked)), decoded: BTreeMap::new() }
    }

    /// Statistics of tensor `t` decoded from its values.
    pub(crate) fn insert_decoded(&mut self, t: TensorId, stats: TensorStats) {
        self.decoded.insert(t, stats);
    }

    /// Tensor `t`'s statistics, when it was asked for and they are known.
    pub fn get(&self, t: &TensorId) -> Option<TensorStats> {
        self.stored(*t).or_else(|| self.decoded.get(t).copied())
    }

    pub fn contains_key(&self, t: &TensorId) -> bool {
        self.get(t).is_some()
    }

    /// How many tensors have statistics here.
    pub fn len(&self) -> usize {
        let stored =
            self.stored.as_ref().map_or(0, |(_, asked)| asked.iter().map(|w| w.count_ones() as usize).sum());
        stored + self.decoded.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The tensors with statistics here, in id order.
    pub fn iter(&self) -> impl Iterator<Item = (TensorId, TensorStats)> + '_ {
        let stored = self.stored.as_ref().map_or(0, |(index, _)| index.tensors.len());
        let decoded = self.decoded.keys().next_back().map_or(0, |&t| t + 1);
        (0..stored.max(decoded)).filter_map(|t| Some((t, self.get(&t)?)))
    }

    fn stored(&self, t: TensorId) -> Option<TensorStats> {
        let (index, asked) = self.stored.as_ref()?;
        let word = *asked.get(t / 64)?;
        if (word >> (t % 64)) & 1 == 1 {
            index.stats(t)
        } else {
            None
        }
    }
}

/// Statistics of the caller's own, none stored (tests, and analyses given statistics directly).
impl From<BTreeMap<TensorId, TensorStats>> for GatheredStats<'_> {
    fn from(decoded: BTreeMap<TensorId, TensorStats>) -> Self {
        GatheredStats { stored: None, decoded }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::{Io, TensorInfo};
    use accutrace_formats::DType;

    /// Stored statistics are read from the index for the tensors asked for only; decoded ones are kept.
    #[test]
    fn stored_statistics_count_for_the_tensors_asked_for_only() {
        let mut index = Index::default();
        let op = index.push_op("layer/mm".into(), "MatMul".into(), 0, 0);
        for k in 0..70u32 {
            let t = index.push_tensor(TensorInfo::for_test(op, Io::Output, k, DType::FLOAT, vec![1]));
            if k != 3 {
                index.set_stats(t, Some(TensorStats::of_f32(&[k as f32], DType::FLOAT)));
            }
        }
        let mut stats = GatheredStats::stored_of(&index, [1, 3, 65]);
        stats.insert_decoded(3, TensorStats::of_f32(&[-1.0], DType::FLOAT));
        assert_eq!(stats.get(&1).map(|s| s.max), Some(1.0));
        assert_eq!(stats.get(&65).map(|s| s.max), Some(65.0));
        assert_eq!(stats.get(&3).map(|s| s.max), Some(-1.0), "decoded");
        assert!(!stats.contains_key(&2) && !stats.contains_key(&69) && !stats.contains_key(&500));
        assert_eq!(stats.len(), 3);
        assert_eq!(stats.iter().map(|(t, _)| t).collect::<Vec<_>>(), [1, 3, 65]);
        let given = GatheredStats::from(BTreeMap::from([(7, TensorStats::of_f32(&[2.0], DType::FLOAT))]));
        assert_eq!((given.len(), given.get(&7).map(|s| s.max)), (1, Some(2.0)));
    }
}
