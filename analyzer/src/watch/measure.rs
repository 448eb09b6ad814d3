//! What a tensor's statistics, histogram or values say about the quantities the conditions test: exact
//! values where they decide, bounds where they do not, and never a guess.
//!
//! - mean |x|: exact from the sum of |x| (capture format 4) or the values; otherwise |mean| <= mean |x| <=
//!   min(RMS = L2 / sqrt(n), max |x|), a missing statistic bounding nothing.
//! - the share of values in a range: exact when [min, max] lies inside or outside it, from the values,
//!   from a histogram whose buckets do not straddle the range's ends, or (a range ending at 0 over values
//!   >= 0, as ReLU's) from the zero count; otherwise bounds.
//! - a weight update's ratio mean |after - before| / (mean |before| + epsilon): 0 when the content hashes
//!   are equal, exact from both tensors' values; otherwise at least max(|mean |after| - mean |before||,
//!   |mean after - mean before|) and at most mean |after| + mean |before|, over mean |before| + epsilon.

use accutrace_formats::histogram::Histogram;
use accutrace_formats::stats::TensorStats;
use accutrace_formats::DType;
use serde::Serialize;

/// A quantity, exact (`at_least == at_most`) or bounded.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Measure {
    pub at_least: f64,
    pub at_most: f64,
}

impl Measure {
    pub fn exact(v: f64) -> Measure {
        Measure { at_least: v, at_most: v }
    }

    pub fn between(lo: f64, hi: f64) -> Measure {
        Measure { at_least: lo.min(hi), at_most: hi.max(lo) }
    }

    /// A NaN measured exactly (a NaN loss) is exact too: it prints as `nan`, not as the range `[nan, nan]`.
    pub fn is_exact(&self) -> bool {
        self.at_least == self.at_most || (self.at_least.is_nan() && self.at_most.is_nan())
    }

    /// The value when exact.
    pub fn value(&self) -> Option<f64> {
        self.is_exact().then_some(self.at_least)
    }
}

/// What decided a verdict (or, in a "can't tell", what was all there was).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Evidence {
    /// Per-tensor statistics.
    Statistics,
    /// Content hashes (equal hashes: equal bytes).
    ContentHash,
    /// The histogram of the values.
    Histogram,
    /// The tensor's values.
    Tensor,
}

impl Evidence {
    pub fn as_str(self) -> &'static str {
        match self {
            Evidence::Statistics => "statistics",
            Evidence::ContentHash => "content hashes",
            Evidence::Histogram => "histogram",
            Evidence::Tensor => "tensor values",
        }
    }
}

/// A threshold test's answer.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Verdict {
    Hit,
    NotHit,
    CantTell,
}

/// A hit's test as findings spell it, `abs_mean_gt 1` or `abs_mean_lt 1e-9`: plain decimals where they
/// read well, exponents for very small or large thresholds.
pub fn test_text(param: &str, threshold: f64) -> String {
    let a = threshold.abs();
    if a == 0.0 || (1e-3..1e6).contains(&a) {
        format!("{param} {threshold}")
    } else {
        format!("{param} {threshold:e}")
    }
}

/// `m > threshold`, as far as `m` tells.
pub fn above(m: Measure, threshold: f64) -> Verdict {
    if m.at_least > threshold {
        Verdict::Hit
    } else if m.at_most <= threshold {
        Verdict::NotHit
    } else {
        Verdict::CantTell
    }
}

/// `m < threshold`, as far as `m` tells.
pub fn below(m: Measure, threshold: f64) -> Verdict {
    if m.at_most < threshold {
        Verdict::Hit
    } else if m.at_least >= threshold {
        Verdict::NotHit
    } else {
        Verdict::CantTell
    }
}

/// `m >= threshold`, as far as `m` tells.
pub fn at_least(m: Measure, threshold: f64) -> Verdict {
    if m.at_least >= threshold {
        Verdict::Hit
    } else if m.at_most < threshold {
        Verdict::NotHit
    } else {
        Verdict::CantTell
    }
}

/// What is known of one tensor's values: made when asked, the histogram borrowed from the index or from
/// what was computed of the values (a table of every tensor's copy grew with the tensor count, #18).
#[derive(Clone, Copy, Debug)]
pub struct Known<'a> {
    pub stats: TensorStats,
    /// Whether the zero and saturation counts are exact (accutrace's statistics; device statistics and
    /// msprobe's do not count zeros).
    pub counts_exact: bool,
    pub histogram: Option<&'a Histogram>,
    pub dtype: DType,
    /// The statistics (and histogram) were computed from the tensor's values.
    pub from_values: bool,
}

/// The statistics and histogram of a tensor that stored none, computed from its values.
#[derive(Clone, Debug)]
pub struct FromValues {
    pub stats: TensorStats,
    pub histogram: Histogram,
    pub dtype: DType,
}

impl FromValues {
    pub fn known(&self) -> Known<'_> {
        Known {
            stats: self.stats,
            counts_exact: true,
            histogram: Some(&self.histogram),
            dtype: self.dtype,
            from_values: true,
        }
    }
}

impl Known<'_> {
    /// Significand bits of the dtype's values (fp16 11, bf16 8, fp32 24; 53 when unknown: always safe).
    pub fn significand_bits(&self) -> u32 {
        match self.dtype {
            DType::FLOAT16 => 11,
            DType::BF16 => 8,
            DType::FLOAT => 24,
            _ => 53,
        }
    }

    /// The evidence behind a statistic: the values when they were read, else the statistics.
    pub fn evidence(&self) -> Evidence {
        if self.from_values {
            Evidence::Tensor
        } else {
            Evidence::Statistics
        }
    }

    /// mean |x| over the finite values: exact with the sum of |x|, else at least |mean| and at most the
    /// smaller of the RMS and the largest |x|. Statistics may lack any of these (the device's default
    /// `dump_stats` has no L2 norm): a missing one bounds nothing, so the bound widens (at most infinity)
    /// rather than closing on what is known.
    pub fn abs_mean(&self) -> Option<Measure> {
        let s = &self.stats;
        let finite = s.finite();
        if finite == 0 {
            return None;
        }
        Some(match s.abs_mean() {
            Some(m) => Measure::exact(m),
            None => {
                let lower = if s.mean.is_nan() { 0.0 } else { s.mean.abs() };
                let rms = s.l2_norm / (finite as f64).sqrt();
                // f64::max keeps the known extreme when the other is NaN.
                let largest = s.min.abs().max(s.max.abs());
                let upper = [rms, largest].into_iter().filter(|v| !v.is_nan()).fold(f64::INFINITY, f64::min);
                Measure::between(lower, upper)
            }
        })
    }

    /// Percentage of zeros: exact from the zero count, else where the extremes decide it. Device and msprobe
    /// statistics count no zeros, but a finite tensor whose min and max are 0 is all zeros (a layer whose
    /// gradients vanished), and one whose values all lie on one side of 0 holds none.
    pub fn zero_percentage(&self) -> Option<f64> {
        let s = &self.stats;
        if s.count == 0 {
            return None;
        }
        if self.counts_exact {
            return Some(100.0 * s.zero as f64 / s.count as f64);
        }
        // NaN extremes (statistics that count no NaN either) compare false: undecided.
        if s.has_nonfinite() {
            None
        } else if s.min == 0.0 && s.max == 0.0 {
            Some(100.0)
        } else if s.min > 0.0 || s.max < 0.0 {
            Some(0.0)
        } else {
            None
        }
    }

    /// Percentage of the values in `[lo, hi]`, and what decided it.
    pub fn range_percentage(&self, lo: f64, hi: f64) -> Option<(Measure, Evidence)> {
        let s = &self.stats;
        if s.count == 0 || s.finite() == 0 {
            return None;
        }
        let n = s.count as f64;
        let pct = |m: Measure| Measure::between(100.0 * m.at_least / n, 100.0 * m.at_most / n);
        let finite = s.finite() as f64;
        // Every finite value lies in [min, max].
        if s.min >= lo && s.max <= hi {
            return Some((pct(Measure::exact(finite)), self.evidence()));
        }
        if s.max < lo || s.min > hi {
            return Some((Measure::exact(0.0), self.evidence()));
        }
        // Only zeros can lie in a range that ends at 0 when no value is negative (and the mirror case).
        let zeros_only = (hi == 0.0 && lo <= 0.0 && s.min >= 0.0) || (lo == 0.0 && hi >= 0.0 && s.max <= 0.0);
        if zeros_only && self.counts_exact {
            return Some((pct(Measure::exact(s.zero as f64)), self.evidence()));
        }
        if let Some(h) = self.histogram {
            if self.counts_exact {
                let (a, b) = h.count_within(lo, hi, s.min, s.max, self.significand_bits());
                let zeros = if lo <= 0.0 && hi >= 0.0 { s.zero } else { 0 };
                let m = Measure::between((a + zeros) as f64, (b + zeros) as f64);
                let evidence = if self.from_values { Evidence::Tensor } else { Evidence::Histogram };
                return Some((pct(m), evidence));
            }
        }
        Some((pct(Measure::between(0.0, finite)), self.evidence()))
    }
}

/// The share of `values` in `[lo, hi]`, in percent of all values: the tensor tier's exact answer.
pub fn range_percentage_of(values: &[f32], lo: f64, hi: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let inside = values.iter().filter(|&&v| (lo..=hi).contains(&f64::from(v))).count();
    Some(100.0 * inside as f64 / values.len() as f64)
}

/// A weight update's ratio mean |after - before| / (mean |before| + epsilon) from statistics alone (or 0
/// when the content hashes say the bytes are equal). `None` when mean |before| is 0 for certain or either
/// side has no finite value: the ratio means nothing for an all-zero weight.
pub fn update_ratio(
    before: &Known<'_>,
    after: &Known<'_>,
    equal_bytes: bool,
    epsilon: f64,
) -> Option<(Measure, Evidence)> {
    if equal_bytes {
        return Some((Measure::exact(0.0), Evidence::ContentHash));
    }
    let (b, a) = (before.abs_mean()?, after.abs_mean()?);
    if b.at_most == 0.0 {
        return None;
    }
    let (mb, ma) = (before.stats.mean, after.stats.mean);
    // |mean|after| - mean|before|| from the two intervals: the smallest gap between them.
    let gap = (a.at_least - b.at_most).max(b.at_least - a.at_most).max(0.0);
    let lower = gap.max((ma - mb).abs());
    let upper = a.at_most + b.at_most;
    let m = Measure::between(lower / (b.at_most + epsilon), upper / (b.at_least + epsilon));
    let evidence =
        if before.from_values && after.from_values { Evidence::Tensor } else { Evidence::Statistics };
    Some((m, evidence))
}

/// The exact update ratio from both tensors' values; `None` for different lengths, no values, or an
/// all-zero weight before the update.
pub fn update_ratio_of(before: &[f32], after: &[f32], epsilon: f64) -> Option<f64> {
    if before.len() != after.len() || before.is_empty() {
        return None;
    }
    let n = before.len() as f64;
    let prev = before.iter().map(|&v| f64::from(v).abs()).sum::<f64>() / n;
    if prev == 0.0 {
        return None;
    }
    let diff = before.iter().zip(after).map(|(&b, &a)| (f64::from(a) - f64::from(b)).abs()).sum::<f64>() / n;
    Some(diff / (prev + epsilon))
}

/// MindInsight's "weight not changed" test on the values: every element within atol + rtol |before|.
pub fn unchanged_within(before: &[f32], after: &[f32], rtol: f64, atol: f64) -> Option<bool> {
    (before.len() == after.len()).then(|| {
        before
            .iter()
            .zip(after)
            .all(|(&b, &a)| (f64::from(a) - f64::from(b)).abs() <= atol + rtol * f64::from(b).abs())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use accutrace_formats::stats::HistogramAccumulator;

    /// A tensor's statistics (and histogram, leaked: a test's few live as long as it).
    fn known(values: &[f32], dtype: DType, histogram: bool, abs_sum: bool) -> Known<'static> {
        let mut stats = TensorStats::of_f32(values, dtype);
        if !abs_sum {
            stats.abs_sum = None;
        }
        let histogram = histogram.then(|| {
            let mut h = HistogramAccumulator::new();
            h.push_f32(values);
            &*Box::leak(Box::new(h.finish()))
        });
        Known { stats, counts_exact: true, histogram, dtype, from_values: false }
    }

    #[test]
    fn tests_read_as_plain_decimals_unless_tiny_or_huge() {
        assert_eq!(test_text("abs_mean_gt", 1.0), "abs_mean_gt 1");
        assert_eq!(test_text("range_percentage_gt", 99.9), "range_percentage_gt 99.9");
        assert_eq!(test_text("rtol", 0.0), "rtol 0");
        assert_eq!(test_text("abs_mean_lt", 1e-9), "abs_mean_lt 1e-9");
        assert_eq!(test_text("max_gt", 1e7), "max_gt 1e7");
    }

    #[test]
    fn abs_mean_is_exact_with_the_sum_and_bounded_without() {
        let v = [1.0f32, -3.0, 2.0, 0.0];
        assert_eq!(known(&v, DType::FLOAT, false, true).abs_mean(), Some(Measure::exact(1.5)));
        let m = known(&v, DType::FLOAT, false, false).abs_mean().unwrap();
        assert_eq!(m.at_least, 0.0);
        assert!((m.at_most - (14f64 / 4.0).sqrt()).abs() < 1e-12 && m.at_least <= 1.5 && 1.5 <= m.at_most);
        assert_eq!(above(m, 2.0), Verdict::NotHit);
        assert_eq!(above(m, 1.0), Verdict::CantTell);
        assert_eq!(below(Measure::exact(1e-10), 1e-9), Verdict::Hit);
    }

    /// The device's statistics CSV without `L2norm` (CANN's default `dump_stats`): a gradient whose signed
    /// mean nearly cancels is not "mean |x| = |mean|", which once made watch report it vanishing.
    #[test]
    fn abs_mean_without_the_norm_is_bounded_by_the_extremes() {
        let v = [1e-3f32, -1e-3, 1e-3, -1e-3 + 1e-9];
        let mut k = known(&v, DType::FLOAT, false, false);
        k.stats.l2_norm = f64::NAN;
        let m = k.abs_mean().unwrap();
        assert!(m.at_least < 1e-9 && m.at_most >= 1e-3 - 1e-9, "{m:?}");
        assert_eq!(below(m, 1e-9), Verdict::CantTell);
        // The extremes bound it below the RMS too.
        let v = [0.0f32, 0.0, 0.0, 4.0];
        let m = known(&v, DType::FLOAT, false, false).abs_mean().unwrap();
        assert_eq!((m.at_least, m.at_most), (1.0, 2.0));
        let mut k = known(&[-2.0f32, -2.0], DType::FLOAT, false, false);
        k.stats.l2_norm = f64::NAN;
        assert_eq!(k.abs_mean(), Some(Measure::exact(2.0)));
        // Nothing but the count: nothing bounds it.
        k.stats.mean = f64::NAN;
        (k.stats.min, k.stats.max) = (f64::NAN, f64::NAN);
        assert_eq!(k.abs_mean(), Some(Measure::between(0.0, f64::INFINITY)));
    }

    #[test]
    fn ranges_from_extremes_zeros_histograms_and_values() {
        // A dead ReLU: only zeros lie in [-1, 0] when nothing is negative; statistics decide.
        let relu = [0.0f32, 0.0, 0.0, 3.0];
        let (m, e) = known(&relu, DType::FLOAT16, false, true).range_percentage(-1.0, 0.0).unwrap();
        assert_eq!((m, e), (Measure::exact(75.0), Evidence::Statistics));
        // tanh in fp16: +-1 lie outside [tanh(-8.8), tanh(8.8)]; only a histogram (or the values) says how many.
        let tanh = [1.0f32, -1.0, 0.5, 1.0];
        let limit = 8.8f64.tanh();
        let (m, _) = known(&tanh, DType::FLOAT16, false, true).range_percentage(-limit, limit).unwrap();
        assert_eq!((m.at_least, m.at_most), (0.0, 100.0));
        let (m, e) = known(&tanh, DType::FLOAT16, true, true).range_percentage(-limit, limit).unwrap();
        assert_eq!((m, e), (Measure::exact(25.0), Evidence::Histogram));
        assert_eq!(range_percentage_of(&tanh, -limit, limit), Some(25.0));
        // Inside or outside as a whole: the extremes decide.
        let (m, _) = known(&[0.25, 0.5], DType::FLOAT, false, true).range_percentage(-1.0, 1.0).unwrap();
        assert_eq!(m, Measure::exact(100.0));
        let (m, _) = known(&[2.0, 3.0], DType::FLOAT, false, true).range_percentage(-1.0, 1.0).unwrap();
        assert_eq!(m, Measure::exact(0.0));
    }

    #[test]
    fn update_ratios_are_bounded_by_statistics_and_exact_from_values() {
        let before = [0.5f32, -0.5, 0.5, -0.5];
        let after = [10.0f32, -10.0, 10.0, -10.0];
        let (b, a) = (known(&before, DType::FLOAT, false, true), known(&after, DType::FLOAT, false, true));
        let (m, _) = update_ratio(&b, &a, false, 1e-9).unwrap();
        assert!(m.at_least > 18.0 && above(m, 1.0) == Verdict::Hit, "{m:?}");
        assert!((update_ratio_of(&before, &after, 1e-9).unwrap() - 19.0).abs() < 1e-6);
        // A small update: statistics cannot say whether the ratio is below or above 1.
        let after = [0.51f32, -0.49, 0.5, -0.5];
        let (m, _) = update_ratio(&b, &known(&after, DType::FLOAT, false, true), false, 1e-9).unwrap();
        assert_eq!(above(m, 1.0), Verdict::CantTell);
        assert!(update_ratio_of(&before, &after, 1e-9).unwrap() < 0.02);
        assert_eq!(update_ratio(&b, &b, true, 1e-9).unwrap(), (Measure::exact(0.0), Evidence::ContentHash));
        let zero = known(&[0.0; 4], DType::FLOAT, false, true);
        assert!(update_ratio(&zero, &a, false, 1e-9).is_none(), "an all-zero weight has no ratio");
        assert_eq!(unchanged_within(&before, &after, 0.0, 0.011), Some(true));
        assert_eq!(unchanged_within(&before, &after, 0.0, 0.001), Some(false));
    }

    #[test]
    fn a_nan_measured_exactly_is_exact() {
        assert!(Measure::exact(f64::NAN).is_exact());
        assert!(Measure::exact(f64::NAN).value().is_some_and(f64::is_nan));
        assert!(Measure::exact(f64::INFINITY).value() == Some(f64::INFINITY));
        assert!(!Measure { at_least: f64::NAN, at_most: 1.0 }.is_exact());
        assert!(!Measure::between(0.0, 1.0).is_exact());
    }
}
