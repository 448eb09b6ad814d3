//! A small histogram of a tensor's values: how many finite, nonzero values have each sign and each binary
//! exponent (`floor(log2 |x|)`). Zeros, NaN and infinities are already counted by the statistics
//! ([`TensorStats`](crate::stats::TensorStats)), so they are not in it.
//!
//! The buckets are fixed, the same for every dtype, so histograms of different tensors and runs add and
//! compare bucket by bucket: exponents [`LOWEST_EXPONENT`]..=[`HIGHEST_EXPONENT`], the lowest bucket also
//! holding every smaller magnitude (subnormals included) and the highest every larger one. They decide the
//! range questions that statistics cannot: what share of a tanh output is saturated (|x| = 1 in fp16, bf16
//! and fp32), how many values of a sigmoid are within [sigmoid(-16.2), sigmoid(16.2)], how many lie in
//! [-1, 0]. Where a bucket straddles a range's bound the answer is a pair of bounds
//! ([`Histogram::count_within`]), never a guess.
//!
//! Computing one costs a pass over the decoded values (the collector does it only when asked:
//! `ACCUTRACE_HISTOGRAM=1`); stored, it takes about one byte per occupied bucket (capture format field
//! `TensorRecord.histogram`, docs/CAPTURE_FORMAT.md).

use crate::{FormatError, Result};
use serde::{Deserialize, Serialize};

/// Exponent of the lowest bucket: it holds every finite nonzero |x| < 2^(LOWEST_EXPONENT + 1).
pub const LOWEST_EXPONENT: i32 = -32;
/// Exponent of the highest bucket: it holds every finite |x| >= 2^HIGHEST_EXPONENT.
pub const HIGHEST_EXPONENT: i32 = 31;
/// Buckets per sign.
pub const BUCKETS: usize = (HIGHEST_EXPONENT - LOWEST_EXPONENT + 1) as usize;

/// Counts of a tensor's finite nonzero values by sign and binary exponent, trimmed to the occupied span:
/// `negative[k]` and `positive[k]` count the values of exponent `lowest + k` (clamped into
/// [`LOWEST_EXPONENT`]..=[`HIGHEST_EXPONENT`]); a missing entry is zero.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Histogram {
    /// Exponent of the first entry of both arrays.
    pub lowest: i32,
    /// Negative values per exponent, from `lowest`.
    pub negative: Vec<u64>,
    /// Positive values per exponent, from `lowest`.
    pub positive: Vec<u64>,
}

/// The smallest and largest magnitude a bucket can hold, both inclusive, for values with `significand_bits`
/// bits of significand (the largest below 2^(e+1) is 2^(e+1) - 2^(e+1-bits)). The lowest bucket starts at
/// the smallest positive f64, the highest ends at infinity (finite values only).
fn magnitudes(exponent: i32, significand_bits: u32) -> (f64, f64) {
    let lo = if exponent <= LOWEST_EXPONENT { f64::from_bits(1) } else { 2f64.powi(exponent) };
    let hi = if exponent >= HIGHEST_EXPONENT {
        f64::INFINITY
    } else {
        let bits = significand_bits.clamp(1, 53) as i32;
        2f64.powi(exponent + 1) - 2f64.powi(exponent + 1 - bits)
    };
    (lo, hi)
}

impl Histogram {
    /// Values counted (finite and nonzero).
    pub fn total(&self) -> u64 {
        self.negative.iter().chain(&self.positive).sum()
    }

    /// Checks that the histogram is one the fixed buckets can produce and that it counts `nonzero` values
    /// (the statistics' finite values minus zeros): a reader's guard against a damaged or foreign record.
    pub fn validate(&self, nonzero: u64) -> Result<()> {
        let len = self.negative.len().max(self.positive.len()) as i64;
        if i64::from(self.lowest) < i64::from(LOWEST_EXPONENT)
            || i64::from(self.lowest) + len - 1 > i64::from(HIGHEST_EXPONENT)
        {
            return Err(FormatError::whole(format!(
                "histogram buckets {}..{} are outside {LOWEST_EXPONENT}..={HIGHEST_EXPONENT}",
                self.lowest,
                i64::from(self.lowest) + len - 1
            )));
        }
        let total = self.negative.iter().chain(&self.positive).try_fold(0u64, |a, &c| a.checked_add(c));
        if total != Some(nonzero) {
            return Err(FormatError::whole(format!(
                "histogram counts {} values, the statistics {nonzero} finite nonzero ones",
                total.map_or_else(|| "more than 2^64".to_string(), |t| t.to_string())
            )));
        }
        Ok(())
    }

    /// Bounds `(at_least, at_most)` on how many counted values `x` satisfy `lo <= x <= hi`, given that
    /// every finite value lies in `[min, max]` (the statistics' extremes; pass infinities when unknown) and
    /// has `significand_bits` bits of significand (fp16 11, bf16 8, fp32 24; 53 is always safe). A bucket
    /// inside the range counts in both bounds, one that only overlaps it in `at_most`. Zeros are not
    /// counted here: add the statistics' zero count when `lo <= 0 <= hi`.
    pub fn count_within(&self, lo: f64, hi: f64, min: f64, max: f64, significand_bits: u32) -> (u64, u64) {
        let (mut at_least, mut at_most) = (0u64, 0u64);
        for (k, (&neg, &pos)) in self.pairs().enumerate() {
            let (m_lo, m_hi) = magnitudes(self.lowest + k as i32, significand_bits);
            // Signed value intervals (closed: both ends can be values), clipped to [min, max].
            for (count, a, b) in [(pos, m_lo, m_hi), (neg, -m_hi, -m_lo)] {
                if count == 0 {
                    continue;
                }
                let (a, b) = (a.max(min), b.min(max));
                if a > b || b < lo || a > hi {
                    continue;
                }
                at_most += count;
                if a >= lo && b <= hi {
                    at_least += count;
                }
            }
        }
        (at_least, at_most)
    }

    /// `(negative, positive)` per exponent from `lowest`, the shorter array padded with zeros.
    fn pairs(&self) -> impl Iterator<Item = (&u64, &u64)> {
        let n = self.negative.len().max(self.positive.len());
        (0..n).map(|k| (self.negative.get(k).unwrap_or(&0), self.positive.get(k).unwrap_or(&0)))
    }
}

/// Builds a [`Histogram`] from values pushed in any number of slices.
#[derive(Clone, Debug)]
pub struct HistogramAccumulator {
    /// Positive buckets (sign bit 0), then negative ones.
    counts: [u64; 2 * BUCKETS],
}

impl Default for HistogramAccumulator {
    fn default() -> Self {
        Self::new()
    }
}

impl HistogramAccumulator {
    /// Empty.
    pub fn new() -> Self {
        HistogramAccumulator { counts: [0; 2 * BUCKETS] }
    }

    /// Adds f32 values. The exponent comes from the bits: a value decoded from fp16, bf16 or an integer is
    /// exact in f32, so it has its own exponent.
    pub fn push_f32(&mut self, values: &[f32]) {
        for &x in values {
            let bits = x.to_bits();
            let field = ((bits >> 23) & 0xFF) as i32;
            // Subnormals (field 0) fall to the lowest bucket with everything else below it.
            let e = (field - 127).clamp(LOWEST_EXPONENT, HIGHEST_EXPONENT);
            let slot = (bits >> 31) as usize * BUCKETS + (e - LOWEST_EXPONENT) as usize;
            let counted = field != 0xFF && bits & 0x7FFF_FFFF != 0;
            self.counts[slot] += u64::from(counted);
        }
    }

    /// Adds f64 values.
    pub fn push_f64(&mut self, values: &[f64]) {
        for &x in values {
            let bits = x.to_bits();
            let field = ((bits >> 52) & 0x7FF) as i32;
            let e = (field - 1023).clamp(LOWEST_EXPONENT, HIGHEST_EXPONENT);
            let slot = (bits >> 63) as usize * BUCKETS + (e - LOWEST_EXPONENT) as usize;
            let counted = field != 0x7FF && bits & 0x7FFF_FFFF_FFFF_FFFF != 0;
            self.counts[slot] += u64::from(counted);
        }
    }

    /// The histogram of everything pushed, trimmed to its occupied buckets.
    pub fn finish(&self) -> Histogram {
        let (positive, negative) = self.counts.split_at(BUCKETS);
        let occupied = |k: &usize| negative[*k] != 0 || positive[*k] != 0;
        let Some(first) = (0..BUCKETS).find(occupied) else { return Histogram::default() };
        let trimmed = |side: &[u64]| {
            let end = side.iter().rposition(|&c| c != 0).map_or(first, |last| last + 1);
            side[first..end.max(first)].to_vec()
        };
        Histogram {
            lowest: LOWEST_EXPONENT + first as i32,
            negative: trimmed(negative),
            positive: trimmed(positive),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(values: &[f32]) -> Histogram {
        let mut acc = HistogramAccumulator::new();
        acc.push_f32(values);
        acc.finish()
    }

    #[test]
    fn buckets_are_binary_exponents_per_sign() {
        let h = of(&[1.0, 1.5, 1.99, 2.0, -0.75, 0.0, -0.0, f32::NAN, f32::INFINITY, 3.0]);
        assert_eq!(h.lowest, -1);
        assert_eq!(h.negative, vec![1]);
        assert_eq!(h.positive, vec![0, 3, 2]);
        assert_eq!(h.total(), 6);
        h.validate(6).unwrap();
        assert!(h.validate(7).is_err());
    }

    #[test]
    fn extremes_clamp_into_the_end_buckets() {
        let h = of(&[1e-45, -1e-20, 3e9, f32::MAX]);
        assert_eq!(h.lowest, LOWEST_EXPONENT);
        assert_eq!(h.negative, vec![1]);
        assert_eq!(h.positive.len(), BUCKETS);
        assert_eq!((h.positive[0], h.positive[BUCKETS - 1]), (1, 2));
        let mut wide = HistogramAccumulator::new();
        wide.push_f64(&[1e-300, -f64::MAX, 0.5, f64::NAN, f64::NEG_INFINITY, 0.0]);
        let w = wide.finish();
        assert_eq!(w.total(), 3);
        assert_eq!((w.lowest, w.positive[0], w.negative[BUCKETS - 1]), (LOWEST_EXPONENT, 1, 1));
        assert_eq!(w.positive[(-1 - LOWEST_EXPONENT) as usize], 1);
    }

    #[test]
    fn empty_and_zero_only_tensors_have_an_empty_histogram() {
        assert_eq!(of(&[]), Histogram::default());
        let h = of(&[0.0, -0.0, f32::NAN]);
        assert_eq!(h.total(), 0);
        h.validate(0).unwrap();
    }

    #[test]
    fn range_counts_are_exact_inside_buckets_and_bounds_across_them() {
        // tanh-like output in fp16: the saturated values are exactly +-1 (bucket 0 clipped by max = 1).
        let values = [1.0f32, -1.0, 0.5, 0.99951, -0.25, 1.0];
        let h = of(&values);
        let limit = 8.8f64.tanh();
        assert_eq!(h.count_within(-limit, limit, -1.0, 1.0, 11), (3, 3), "only +-1 fall outside");
        // In fp64 a value of [0.5, 1) may lie above tanh(8.8): bounds only.
        assert_eq!(h.count_within(-limit, limit, -1.0, 1.0, 53), (1, 3));
        // A bucket straddling the bound gives a range, not a guess.
        let h = of(&[0.75, 0.8, 3.0]);
        assert_eq!(h.count_within(0.0, 0.9, 0.75, 3.0, 24), (0, 2));
        assert_eq!(h.count_within(0.0, 4.0, 0.75, 3.0, 24), (3, 3));
        assert_eq!(h.count_within(-1.0, 0.0, 0.75, 3.0, 24), (0, 0));
        // Negative side: [-1, 0] holds -0.5 and -1 exactly; -1.5 is out.
        let h = of(&[-0.5, -1.0, -1.5, 2.0]);
        assert_eq!(h.count_within(-1.0, 0.0, -1.5, 2.0, 24), (1, 3));
        // Tiny positive values are never in [-1, 0].
        let h = of(&[1e-40, -1e-40]);
        assert_eq!(h.count_within(-1.0, 0.0, -1e-40, 1e-40, 24), (1, 1));
    }

    #[test]
    fn damaged_histograms_are_refused() {
        let h = Histogram { lowest: LOWEST_EXPONENT - 1, negative: vec![1], positive: vec![] };
        assert!(h.validate(1).unwrap_err().to_string().contains("outside"));
        let h = Histogram { lowest: HIGHEST_EXPONENT, negative: vec![], positive: vec![1, 1] };
        assert!(h.validate(2).is_err());
        let h = Histogram { lowest: 0, negative: vec![u64::MAX], positive: vec![1] };
        assert!(h.validate(0).unwrap_err().to_string().contains("2^64"));
    }
}
