//! msprobe's tensor comparison (`msprobe compare`, real-data mode) and statistics comparison.
//!
//! Reproduces msprobe's numbers, not just its formulas (docs/METRICS.md; msprobe's `npy_compare.py`):
//! - inf/NaN at identical positions on both sides are set to 0; elsewhere every metric is "N/A" with the
//!   message "The position of inf or nan in NPU and bench Tensor do not match.";
//! - relative error `|N' - B'| / |B'|` (epsilon added to both where B == 0) is computed in the precision
//!   numpy uses for the loaded arrays ([`RePrecision`]) and so are the thousandth thresholds; the epsilon
//!   is that precision's (see [`RePrecision::rel_err`] for the fixture row that shows it);
//! - Cosine = N.B / (|N| |B|) in f64: both norms <= eps -> 1.0, one -> "Nan" with a message; rounded to 12
//!   decimals, then to 6 when above 0.9999; EucDist = |N - B|; MaxAbsErr, MaxRelativeErr and the ratios
//!   rounded to 12 decimals (`format_value`);
//! - a 0-d tensor gets MaxAbsErr and MaxRelativeErr only (in its own dtype, unwidened), the rest
//!   "unsupported"; a 1-element 1-d tensor gets Cosine "unsupported"; an empty one gets 0 everywhere.

use super::kernel::{for_lanes, hmax, hsum, reduce_chunks, Element, RePrecision, LANES};
use super::sums::MsprobeSums;
use accutrace_formats::msprobe::py_float_repr;
use std::fmt;

/// One cell of msprobe's comparison table.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Cell {
    Value(f64),
    /// msprobe's `Nan` string (a metric that could not be computed, with a message).
    Nan,
    Unsupported,
    /// `N/A` (inf/NaN positions differ).
    NotApplicable,
    ShapeUnmatched,
}

impl Cell {
    pub fn value(self) -> Option<f64> {
        match self {
            Cell::Value(v) => Some(v),
            _ => None,
        }
    }
}

impl fmt::Display for Cell {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Cell::Value(v) => f.write_str(&py_float_repr(*v)),
            Cell::Nan => f.write_str("Nan"),
            Cell::Unsupported => f.write_str("unsupported"),
            Cell::NotApplicable => f.write_str("N/A"),
            Cell::ShapeUnmatched => f.write_str("shape unmatched"),
        }
    }
}

/// The six metrics of a tensor pair, as msprobe writes them, plus its messages.
#[derive(Clone, Debug, PartialEq)]
pub struct MsprobeMetrics {
    pub cosine: Cell,
    pub euc_dist: Cell,
    pub max_abs_err: Cell,
    pub max_relative_err: Cell,
    pub one_thousandth_err_ratio: Cell,
    pub five_thousandths_err_ratio: Cell,
    /// msprobe's Err_message text for the metrics (empty when clean).
    pub message: String,
}

impl MsprobeMetrics {
    fn all(cell: Cell, message: &str) -> Self {
        MsprobeMetrics {
            cosine: cell,
            euc_dist: cell,
            max_abs_err: cell,
            max_relative_err: cell,
            one_thousandth_err_ratio: cell,
            five_thousandths_err_ratio: cell,
            message: message.to_owned(),
        }
    }

    /// Shapes differ: msprobe compares nothing.
    pub fn shape_unmatched() -> Self {
        Self::all(Cell::ShapeUnmatched, "Shape of NPU and bench tensor do not match. Skipped.")
    }

    /// A side has no data (no file, or a non-tensor argument): "unsupported" everywhere.
    pub fn unsupported() -> Self {
        Self::all(Cell::Unsupported, "")
    }

    /// The metric cells in CSV column order.
    pub fn cells(&self) -> [Cell; 6] {
        [
            self.cosine,
            self.euc_dist,
            self.max_abs_err,
            self.max_relative_err,
            self.one_thousandth_err_ratio,
            self.five_thousandths_err_ratio,
        ]
    }
}

/// What msprobe knows besides the values.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MsprobeOptions {
    /// The tensors are 0-d (shape `[]`), as opposed to 1-d of length 1.
    pub zero_dim: bool,
    /// Arithmetic precision of the relative error (from the two dtypes).
    pub re_precision: RePrecision,
}

impl Default for MsprobeOptions {
    fn default() -> Self {
        MsprobeOptions { zero_dim: false, re_precision: RePrecision::F64 }
    }
}

/// One chunk. `ZERO` maps inf/NaN to 0 on both sides (used once positions are known to match).
#[inline(always)]
fn chunk<N: Element, B: Element, const ZERO: bool>(n: &[N], b: &[B], p: RePrecision) -> MsprobeSums {
    let (t1, t5) = p.thresholds();
    let (mut dot, mut nn, mut bb, mut dd) = ([0.0; LANES], [0.0; LANES], [0.0; LANES], [0.0; LANES]);
    let (mut max_abs, mut max_re, mut bad) = ([0.0f64; LANES], [0.0f64; LANES], [0.0f64; LANES]);
    let (mut re_nan, mut lt1, mut lt5) = ([0u64; LANES], [0u64; LANES], [0u64; LANES]);
    for_lanes(n, b, |l, x, y| {
        let (x, y) = if ZERO && !(x.is_finite() && y.is_finite()) { (0.0, 0.0) } else { (x, y) };
        // x*0 + y*0 is NaN exactly when x or y is inf or NaN: a branch-free non-finite detector.
        bad[l] += x * 0.0 + y * 0.0;
        dot[l] += x * y;
        nn[l] += x * x;
        bb[l] += y * y;
        let d = x - y;
        dd[l] += d * d;
        let ad = d.abs();
        max_abs[l] = if ad > max_abs[l] { ad } else { max_abs[l] };
        let re = p.rel_err(x, y);
        re_nan[l] += u64::from(re.is_nan());
        max_re[l] = if re > max_re[l] { re } else { max_re[l] };
        lt1[l] += u64::from(re < t1);
        lt5[l] += u64::from(re < t5);
    });
    MsprobeSums {
        len: n.len() as u64,
        dot: hsum(&dot),
        nn: hsum(&nn),
        bb: hsum(&bb),
        dd: hsum(&dd),
        max_abs: hmax(&max_abs),
        max_re: hmax(&max_re),
        re_nan: re_nan.iter().any(|&c| c > 0),
        lt_one: lt1.iter().sum(),
        lt_five: lt5.iter().sum(),
        nonfinite: hsum(&bad).is_nan(),
    }
}

/// Monomorphises the chunk per precision so the relative-error branch is outside the loop.
fn sums<N: Element, B: Element, const ZERO: bool>(n: &[N], b: &[B], p: RePrecision) -> MsprobeSums {
    match p {
        RePrecision::F64 => {
            reduce_chunks(n, b, |x, y| chunk::<N, B, ZERO>(x, y, RePrecision::F64), MsprobeSums::merge)
        }
        RePrecision::F32 => {
            reduce_chunks(n, b, |x, y| chunk::<N, B, ZERO>(x, y, RePrecision::F32), MsprobeSums::merge)
        }
        RePrecision::F16 => {
            reduce_chunks(n, b, |x, y| chunk::<N, B, ZERO>(x, y, RePrecision::F16), MsprobeSums::merge)
        }
    }
}

/// msprobe's sums with its inf/NaN rule: `None` when inf/NaN positions differ between the sides.
pub fn msprobe_sums<N: Element, B: Element>(n: &[N], b: &[B], p: RePrecision) -> Option<MsprobeSums> {
    with_nonfinite_rule(n, b, sums::<N, B, false>(n, b, p), || sums::<N, B, true>(n, b, p))
}

/// msprobe's inf/NaN rule on a first pass made with inf/NaN as they are: where some input was inf or NaN,
/// they must sit at the same places (per kind) on both sides, and `zeroed` redoes the pass with them
/// mapped to 0; otherwise `None` (the metrics are "N/A").
pub(crate) fn with_nonfinite_rule<N: Element, B: Element>(
    n: &[N],
    b: &[B],
    first: MsprobeSums,
    zeroed: impl FnOnce() -> MsprobeSums,
) -> Option<MsprobeSums> {
    if !first.nonfinite {
        return Some(first);
    }
    // Rare path: check that inf and NaN sit at the same places (per kind), then recompute with them zeroed.
    let kind = |v: f64| if v.is_nan() { 2u8 } else { u8::from(v.is_infinite()) };
    if n.iter().zip(b).any(|(x, y)| kind(x.f64()) != kind(y.f64())) {
        return None;
    }
    Some(zeroed())
}

/// All six msprobe metrics of a pair of equally shaped tensors (flattened, C order), through the generic
/// kernels. `metrics::measure` is the entry point that picks the fused f32 pass where it applies.
pub fn msprobe_metrics<N: Element, B: Element>(n: &[N], b: &[B], opts: &MsprobeOptions) -> MsprobeMetrics {
    if let Some(m) = special_case(n, b, opts) {
        return m;
    }
    metrics_of_sums(msprobe_sums(n, b, opts.re_precision))
}

/// The pairs msprobe treats apart from the sums: unequal lengths, empty tensors, 0-d tensors.
pub(crate) fn special_case<N: Element, B: Element>(
    n: &[N],
    b: &[B],
    opts: &MsprobeOptions,
) -> Option<MsprobeMetrics> {
    if n.len() != b.len() {
        return Some(MsprobeMetrics::shape_unmatched());
    }
    if n.is_empty() {
        return Some(MsprobeMetrics::all(Cell::Value(0.0), "This is empty data, can not compare."));
    }
    if !opts.zero_dim {
        return None;
    }
    // msprobe skips the inf/NaN rule and the widening to f64 for 0-d tensors.
    let p = opts.re_precision;
    let (x, y) = (n[0].f64(), b[0].f64());
    let abs = match p {
        RePrecision::F64 => (x - y).abs(),
        RePrecision::F32 => (x as f32 - y as f32).abs() as f64,
        RePrecision::F16 => {
            let h = |v: f32| half::f16::from_f32(v).to_f32();
            h(h(x as f32) - h(y as f32)).abs() as f64
        }
    };
    let re = p.rel_err(x, y);
    let mut m = MsprobeMetrics::all(Cell::Unsupported, "");
    m.message = "This is type of 0-d tensor, can not calculate 'Cosine', 'One Thousandth Err Ratio' and \
                 'Five Thousandths Err Ratio'. "
        .into();
    (m.max_abs_err, m.max_relative_err) =
        (nan_or(abs, &mut m.message, "MaxAbsError"), nan_or(re, &mut m.message, "MaxRelativeError"));
    Some(m)
}

/// The metrics from the sums of a pair that is not a [`special_case`]; `None`: inf/NaN positions differ.
pub(crate) fn metrics_of_sums(sums: Option<MsprobeSums>) -> MsprobeMetrics {
    let Some(s) = sums else {
        return MsprobeMetrics::all(
            Cell::NotApplicable,
            "The position of inf or nan in NPU and bench Tensor do not match.",
        );
    };
    let mut message = String::new();
    let cosine = cosine_cell(&s, &mut message);
    let max_abs_err = nan_or(s.max_abs, &mut message, "MaxAbsError");
    let max_re = if s.re_nan { f64::NAN } else { s.max_re };
    let max_relative_err = nan_or(max_re, &mut message, "MaxRelativeError");
    let len = s.len as f64;
    MsprobeMetrics {
        cosine,
        euc_dist: Cell::Value(s.dd.sqrt()),
        max_abs_err,
        max_relative_err,
        one_thousandth_err_ratio: Cell::Value(format_value(s.lt_one as f64 / len)),
        five_thousandths_err_ratio: Cell::Value(format_value(s.lt_five as f64 / len)),
        message,
    }
}

fn nan_or(v: f64, message: &mut String, what: &str) -> Cell {
    if v.is_nan() {
        message.push_str(&format!("Cannot compare by {what}, the data contains nan/inf/-inf in dump data."));
        Cell::Nan
    } else {
        Cell::Value(format_value(v))
    }
}

fn cosine_cell(s: &MsprobeSums, message: &mut String) -> Cell {
    if s.len == 1 {
        message.push_str("This is a 1-d tensor of length 1.");
        return Cell::Unsupported;
    }
    let (a, b) = (s.nn.sqrt(), s.bb.sqrt());
    let eps = f64::EPSILON;
    if a <= eps && b <= eps {
        return Cell::Value(1.0);
    }
    if a <= eps {
        message.push_str("Cannot compare by Cosine Similarity, All the data is Zero in npu dump data.");
        return Cell::Nan;
    }
    if b <= eps {
        message.push_str("Cannot compare by Cosine Similarity, All the data is Zero in Bench dump data.");
        return Cell::Nan;
    }
    let cos = s.dot / (a * b);
    if cos.is_nan() {
        message.push_str("Cannot compare by Cosine Similarity, the dump data has NaN.");
        return Cell::Nan;
    }
    let v = format_value(cos);
    Cell::Value(if v > COSINE_ROUND_ABOVE { py_round(v, 6) } else { v })
}

/// msprobe rounds cosines above this to 6 decimals (`CompareConst.COSINE_THRESHOLD`).
const COSINE_ROUND_ABOVE: f64 = 0.9999;

/// "Accuracy Reached or Not" (older msprobe column).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Accuracy {
    Yes,
    No,
    Unmatched,
    /// msprobe's `None`: Cosine or MaxAbsErr is not a number (unsupported, empty).
    NotComparable,
}

impl fmt::Display for Accuracy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Accuracy::Yes => "Yes",
            Accuracy::No => "No",
            Accuracy::Unmatched => "Unmatched",
            Accuracy::NotComparable => "None",
        })
    }
}

/// No if (Cosine < 0.99 and MaxAbsErr > 0.001) or Cosine < 0.9 or MaxAbsErr > 1; Unmatched on shape
/// mismatch; N/A (inf/NaN positions differ) counts as No.
pub fn accuracy_reached(m: &MsprobeMetrics) -> Accuracy {
    match (m.cosine, m.max_abs_err) {
        (Cell::ShapeUnmatched, _) => Accuracy::Unmatched,
        (Cell::NotApplicable, _) | (_, Cell::NotApplicable) => Accuracy::No,
        (Cell::Value(cos), Cell::Value(abs)) => {
            if (cos < 0.99 && abs > 0.001) || cos < 0.9 || abs > 1.0 {
                Accuracy::No
            } else {
                Accuracy::Yes
            }
        }
        _ => Accuracy::NotComparable,
    }
}

/// One statistic's difference in statistics mode: `NPU - Bench` and `|diff / Bench| x 100 %`.
#[derive(Clone, Debug, PartialEq)]
pub struct StatDiff {
    /// `None` when a side is not a number (msprobe writes N/A); NaN when the difference is NaN ("Nan").
    pub diff: Option<f64>,
    /// The relative difference as msprobe writes it: `"12.5%"`, `"N/A"` (bench is 0 or not a number),
    /// `"Nan"`.
    pub relative: String,
    /// msprobe's warning test: |diff| / (|max(N, B)| + 1e-10) > 0.5.
    pub warning: bool,
}

/// msprobe's statistics comparison of one statistic (Max, Min, Mean or L2norm).
pub fn stat_diff(npu: Option<f64>, bench: Option<f64>) -> StatDiff {
    let (Some(n), Some(b)) = (npu, bench) else {
        return StatDiff { diff: None, relative: "N/A".into(), warning: false };
    };
    let diff = n - b;
    if diff.is_nan() {
        return StatDiff { diff: Some(f64::NAN), relative: "Nan".into(), warning: false };
    }
    let relative =
        if b == 0.0 { "N/A".into() } else { format!("{}%", py_float_repr((diff / b * 100.0).abs())) };
    let warning = diff.abs() / (n.max(b).abs() + 1e-10) > 0.5;
    StatDiff { diff: Some(diff), relative, warning }
}

/// msprobe's `format_value`: `float('{:.12f}'.format(v))`, i.e. rounded to 12 decimals.
pub fn format_value(v: f64) -> f64 {
    py_round(v, 12)
}

/// Python's `round(v, digits)` for the digit counts msprobe uses (correctly rounded decimal).
pub fn py_round(v: f64, digits: usize) -> f64 {
    // Integral values (0 and 1 for identical tensors, most ratios) round to themselves: no text needed.
    if !v.is_finite() || v.fract() == 0.0 {
        return v;
    }
    format!("{v:.digits$}").parse().unwrap_or(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(n: &[f64], b: &[f64]) -> MsprobeMetrics {
        msprobe_metrics(n, b, &MsprobeOptions::default())
    }

    #[test]
    fn epsilon_goes_to_both_sides_where_bench_is_zero() {
        let r = m(&[0.0, 1.0, 1e-20], &[0.0, 1.0, 0.0]);
        // 0 vs 0 -> 0 (passes both ratios); 1e-20 vs 0 -> |(1e-20 + eps) - eps| / eps ~ 4.5e-5.
        let expected = ((1e-20 + f64::EPSILON) - f64::EPSILON) / f64::EPSILON;
        assert_eq!(r.max_relative_err, Cell::Value(format_value(expected)));
        assert_eq!(r.one_thousandth_err_ratio, Cell::Value(1.0));
    }

    #[test]
    fn matching_nonfinite_positions_are_zeroed() {
        let r = m(&[f64::INFINITY, 1.0, f64::NAN, 2.0], &[f64::NEG_INFINITY, 1.0, f64::NAN, 2.0]);
        assert_eq!(r.cosine, Cell::Value(1.0));
        assert_eq!(r.max_abs_err, Cell::Value(0.0));
        assert_eq!(r.euc_dist, Cell::Value(0.0));
        assert_eq!(r.one_thousandth_err_ratio, Cell::Value(1.0));
        assert!(r.message.is_empty());
    }

    #[test]
    fn mismatched_nonfinite_positions_void_everything() {
        let r = m(&[f64::INFINITY, 1.0], &[1.0, 1.0]);
        assert_eq!(r.cells(), [Cell::NotApplicable; 6]);
        assert!(r.message.contains("position of inf or nan"));
        let r = m(&[f64::NAN, 1.0], &[f64::INFINITY, 1.0]);
        assert_eq!(r.cosine, Cell::NotApplicable);
        assert_eq!(accuracy_reached(&r), Accuracy::No);
    }

    #[test]
    fn cosine_zero_norm_cases() {
        assert_eq!(m(&[0.0, 0.0], &[0.0, 0.0]).cosine, Cell::Value(1.0));
        let r = m(&[0.0, 0.0], &[1.0, 0.0]);
        assert_eq!(r.cosine, Cell::Nan);
        assert!(r.message.contains("Zero in npu"));
        let r = m(&[1.0, 0.0], &[0.0, 0.0]);
        assert_eq!(r.cosine, Cell::Nan);
        assert!(r.message.contains("Zero in Bench"));
        assert_eq!(m(&[1.0, 0.0], &[0.0, 1.0]).cosine, Cell::Value(0.0));
        // Below 0.9999 cosines keep 12 decimals.
        let half_sqrt2 = format_value(std::f64::consts::FRAC_1_SQRT_2);
        assert_eq!(m(&[1.0, 1.0], &[1.0, 0.0]).cosine, Cell::Value(half_sqrt2));
    }

    #[test]
    #[allow(clippy::excessive_precision)] // exact f32 values as the fixture's dump.json prints them
    fn one_element_and_zero_dim_and_empty() {
        let r = m(&[2.0], &[1.0]);
        assert_eq!(r.cosine, Cell::Unsupported);
        assert_eq!(r.max_abs_err, Cell::Value(1.0));
        assert_eq!(r.one_thousandth_err_ratio, Cell::Value(0.0));
        let opts = MsprobeOptions { zero_dim: true, re_precision: RePrecision::F32 };
        let r = msprobe_metrics(&[7.136932373046875f32], &[7.137017726898193f32], &opts);
        assert_eq!(r.cosine, Cell::Unsupported);
        assert_eq!(r.euc_dist, Cell::Unsupported);
        assert_eq!(r.one_thousandth_err_ratio, Cell::Unsupported);
        assert_eq!(r.max_abs_err, Cell::Value(8.5353851e-05));
        assert_eq!(r.max_relative_err, Cell::Value(1.1959316e-05));
        let r = m(&[], &[]);
        assert_eq!(r.cells(), [Cell::Value(0.0); 6]);
        assert_eq!(m(&[1.0], &[1.0, 2.0]).cosine, Cell::ShapeUnmatched);
        assert_eq!(accuracy_reached(&m(&[1.0], &[1.0, 2.0])), Accuracy::Unmatched);
    }

    #[test]
    fn thousandth_ratios_and_verdict() {
        let b = [1.0, 1.0, 1.0, 1.0];
        let r = m(&[1.0005, 1.003, 1.01, 1.0], &b);
        assert_eq!(r.one_thousandth_err_ratio, Cell::Value(0.5));
        assert_eq!(r.five_thousandths_err_ratio, Cell::Value(0.75));
        assert_eq!(accuracy_reached(&r), Accuracy::Yes);
        assert_eq!(accuracy_reached(&m(&[3.0, 1.0], &[1.0, 1.0])), Accuracy::No); // MaxAbsErr > 1
        assert_eq!(accuracy_reached(&m(&[1.0, 0.0], &[0.0, 1.0])), Accuracy::No); // cosine 0
        assert_eq!(accuracy_reached(&m(&[2.0], &[1.0])), Accuracy::NotComparable);
    }

    #[test]
    fn statistics_mode() {
        let d = stat_diff(Some(1.5), Some(1.0));
        assert_eq!(d.diff, Some(0.5));
        assert_eq!(d.relative, "50.0%");
        assert!(!d.warning);
        assert_eq!(stat_diff(Some(1.0), Some(0.0)).relative, "N/A");
        assert_eq!(stat_diff(None, Some(0.0)).diff, None);
        assert_eq!(stat_diff(Some(f64::NAN), Some(1.0)).relative, "Nan");
        assert!(stat_diff(Some(10.0), Some(1.0)).warning);
    }

    #[test]
    #[allow(clippy::excessive_precision)]
    fn rounding_like_msprobe() {
        assert_eq!(format_value(0.0054435729980468750), 0.005443572998);
        assert_eq!(format_value(8.535385131835938e-05), 8.5353851e-05);
        assert_eq!(py_round(0.99999624, 6), 0.999996);
        assert_eq!(py_round(0.9999996, 6), 1.0);
    }
}
