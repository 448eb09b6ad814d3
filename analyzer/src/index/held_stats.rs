//! A tensor's statistics as the index holds them: [`TensorStats`] in 64 bytes instead of 96.
//!
//! An index holds one per tensor whose source cannot read them again (a dump's statistics CSV, msprobe's
//! `dump.json`, values decoded once; a capture's are read from its records: `stats_place`), for every
//! tensor of such a source (#18: memory with the tensor count). The counts that are zero for nearly every
//! tensor (NaN, +inf, -inf, at saturation) are boxed together and absent while zero; a missing `abs_sum`
//! is one NaN bit pattern that no sum of magnitudes makes. [`HeldStats::get`] gives the [`TensorStats`] back, field for field.

use accutrace_formats::stats::TensorStats;

/// The bits of an absent `abs_sum`: a quiet NaN with a payload no arithmetic produces (hardware NaNs carry
/// the canonical payload or one propagated from an input, and a sum of magnitudes has no NaN input).
const NO_ABS_SUM: u64 = 0x7ff8_a5c0_0000_ab5e;

#[derive(Clone, Debug, PartialEq)]
pub(crate) struct HeldStats {
    count: u64,
    zero: u64,
    min: f64,
    max: f64,
    mean: f64,
    l2_norm: f64,
    /// `f64::from_bits(NO_ABS_SUM)` for `None`.
    abs_sum: f64,
    /// NaN, +inf, -inf, at saturation; `None` when all are zero.
    rare: Option<Box<[u64; 4]>>,
}

impl HeldStats {
    pub(crate) fn new(s: &TensorStats) -> HeldStats {
        let rare = [s.nan, s.pos_inf, s.neg_inf, s.at_saturation];
        HeldStats {
            count: s.count,
            zero: s.zero,
            min: s.min,
            max: s.max,
            mean: s.mean,
            l2_norm: s.l2_norm,
            abs_sum: s.abs_sum.unwrap_or(f64::from_bits(NO_ABS_SUM)),
            rare: (rare != [0; 4]).then(|| Box::new(rare)),
        }
    }

    pub(crate) fn get(&self) -> TensorStats {
        let [nan, pos_inf, neg_inf, at_saturation] = self.rare.as_deref().copied().unwrap_or([0; 4]);
        TensorStats {
            count: self.count,
            nan,
            pos_inf,
            neg_inf,
            zero: self.zero,
            min: self.min,
            max: self.max,
            mean: self.mean,
            l2_norm: self.l2_norm,
            abs_sum: (self.abs_sum.to_bits() != NO_ABS_SUM).then_some(self.abs_sum),
            at_saturation,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn same(a: &TensorStats, b: &TensorStats) -> bool {
        // Bit for bit, so that NaN fields (no finite value) compare too.
        format!("{a:?}") == format!("{b:?}")
            && a.abs_sum.map(f64::to_bits) == b.abs_sum.map(f64::to_bits)
            && [a.min, a.max, a.mean, a.l2_norm].map(f64::to_bits)
                == [b.min, b.max, b.mean, b.l2_norm].map(f64::to_bits)
    }

    #[test]
    fn statistics_come_back_field_for_field() {
        let plain = TensorStats::of_f32(&[1.0, -2.0, 0.0, 3.5], accutrace_formats::DType::FLOAT);
        let no_abs_sum = TensorStats { abs_sum: None, ..plain };
        let nan_abs_sum = TensorStats { abs_sum: Some(f64::NAN), ..plain };
        let rare = TensorStats::of_f32(
            &[f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 65504.0, 1.0],
            accutrace_formats::DType::FLOAT16,
        );
        let empty = TensorStats::default();
        for s in [plain, no_abs_sum, nan_abs_sum, rare, empty] {
            let held = HeldStats::new(&s);
            assert!(same(&held.get(), &s), "{s:?} came back as {:?}", held.get());
        }
        assert!(HeldStats::new(&plain).rare.is_none(), "all-zero rare counts are not boxed");
        assert!(HeldStats::new(&rare).rare.is_some());
        assert_eq!([rare.nan, rare.pos_inf, rare.neg_inf, rare.at_saturation], [1, 1, 1, 1]);
    }

    #[test]
    fn held_statistics_take_64_bytes() {
        assert_eq!(std::mem::size_of::<HeldStats>(), 64);
    }
}
