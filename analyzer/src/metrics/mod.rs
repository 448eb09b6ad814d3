//! Comparison metrics of the two vendor families, reproduced number for number (`shared/docs/metrics.md`).
//!
//! - [`msprobe`]: Cosine, EucDist, MaxAbsErr, MaxRelativeErr, the thousandth ratios, the statistics
//!   comparison and the "Accuracy Reached or Not" verdict, with msprobe's special cases and rounding.
//! - [`verdict`]: msprobe's newer per-API `Result` column (pass / warning / error).
//! - [`msaccucmp`]: CANN's msaccucmp metrics and pass guidance.
//! - [`kernel`]: the fused, chunked, parallel accumulation both use.
//!
//! Everything is computed in f64 over f32 or f64 slices in one streaming pass (KL divergence needs two
//! more, see [`msaccucmp`]); chunks are reduced in index order so results do not depend on thread count.

pub(crate) mod fused;
pub mod kernel;
pub mod msaccucmp;
pub mod msprobe;
pub mod verdict;

use accutrace_formats::stats::{StatsAccumulator, TensorStats};
pub use kernel::{Element, RePrecision};
pub use msaccucmp::{msaccucmp_metrics, MsaccucmpMetrics};
pub use msprobe::{msprobe_metrics, Cell, MsprobeMetrics, MsprobeOptions};

/// The metric families a comparison computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Families {
    /// msprobe's: they decide "Accuracy Reached or Not" and the culprit.
    Msprobe,
    /// msprobe's and msaccucmp's.
    All,
}

/// Both families' metrics of one pair, as [`msprobe_metrics`] and [`msaccucmp_metrics`] give them (bit for
/// bit), sharing one pass over the data where they can: f32 pairs whose relative error is f32 (fp16, bf16
/// and fp32 against fp32 or bf16), not 0-d. Other pairs take the two calls.
pub fn both_metrics(
    n: &[f32],
    b: &[f32],
    opts: &MsprobeOptions,
    x_is_fp16: bool,
) -> (MsprobeMetrics, MsaccucmpMetrics) {
    if n.len() != b.len() || n.is_empty() || opts.zero_dim || opts.re_precision != RePrecision::F32 {
        return (msprobe_metrics(n, b, opts), msaccucmp_metrics(n, b, x_is_fp16));
    }
    let f = fused::both_f32(n, b);
    let probe = msprobe::msprobe_metrics_after(n, b, opts, Some(f.probe));
    (probe, msaccucmp::msaccucmp_from_sums(n, b, &f.acc, x_is_fp16))
}

/// msprobe's metrics alone, bit for bit [`msprobe_metrics`], through the fused f32 pass where the pair
/// takes it (see [`both_metrics`]).
pub fn msprobe_metrics_f32(n: &[f32], b: &[f32], opts: &MsprobeOptions) -> MsprobeMetrics {
    if n.len() != b.len() || n.is_empty() || opts.zero_dim || opts.re_precision != RePrecision::F32 {
        return msprobe_metrics(n, b, opts);
    }
    msprobe::msprobe_metrics_after(n, b, opts, Some(fused::both_f32(n, b).probe))
}

/// [`both_metrics`] and the statistics of both sides (`TensorStats::of_f32` of `n` as `n_dtype` and of `b`
/// as `b_dtype`, bit for bit), formed in the same pass where the pair takes the fused f32 path. Without
/// `with_msaccucmp`, msaccucmp's metrics (and their two KL passes) are skipped: `None`.
pub fn both_metrics_and_stats(
    n: &[f32],
    b: &[f32],
    opts: &MsprobeOptions,
    x_is_fp16: bool,
    dtypes: (accutrace_formats::DType, accutrace_formats::DType),
    with_msaccucmp: bool,
) -> (MsprobeMetrics, Option<MsaccucmpMetrics>, TensorStats, TensorStats) {
    let fused =
        n.len() == b.len() && !n.is_empty() && !opts.zero_dim && opts.re_precision == RePrecision::F32;
    if !fused {
        let (probe, acc) = if with_msaccucmp {
            let (probe, acc) = both_metrics(n, b, opts, x_is_fp16);
            (probe, Some(acc))
        } else {
            (msprobe_metrics_f32(n, b, opts), None)
        };
        return (probe, acc, TensorStats::of_f32(n, dtypes.0), TensorStats::of_f32(b, dtypes.1));
    }
    let new = |d: accutrace_formats::DType| StatsAccumulator::new(d.saturation_limit());
    let (f, sn, sb) = fused::both_f32_stats(n, b, (new(dtypes.0), new(dtypes.1)));
    let probe = msprobe::msprobe_metrics_after(n, b, opts, Some(f.probe));
    let acc = with_msaccucmp.then(|| msaccucmp::msaccucmp_from_sums(n, b, &f.acc, x_is_fp16));
    let sn = sn.map_or_else(|| TensorStats::of_f32(n, dtypes.0), |s| s.finish());
    let sb = sb.map_or_else(|| TensorStats::of_f32(b, dtypes.1), |s| s.finish());
    (probe, acc, sn, sb)
}
