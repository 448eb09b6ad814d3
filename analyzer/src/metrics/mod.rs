//! Comparison metrics of the two vendor families, reproduced number for number (docs/METRICS.md).
//!
//! - [`msprobe`]: Cosine, EucDist, MaxAbsErr, MaxRelativeErr, the thousandth ratios, the statistics
//!   comparison and the "Accuracy Reached or Not" verdict, with msprobe's special cases and rounding.
//! - [`verdict`]: msprobe's newer per-API `Result` column (pass / warning / error).
//! - [`msaccucmp`]: CANN's msaccucmp metrics and pass guidance.
//! - [`kernel`]: the fused, chunked, parallel accumulation both use.
//! - [`sums`]: each family's mergeable first-pass sums.
//! - [`measure`]: the entry point, which picks the fused f32 pass or the generic kernels for a pair.
//! - [`chunked`]: msprobe's metrics of a large pair given a chunk at a time, `measure`'s bit for bit.
//!
//! Everything is computed in f64 over f32 or f64 slices in one streaming pass (KL divergence needs two
//! more, see [`msaccucmp`]); chunks are reduced in index order so results do not depend on thread count.

pub mod chunked;
mod f16_re;
pub(crate) mod fused;
pub mod kernel;
pub mod msaccucmp;
pub mod msprobe;
pub mod sums;
pub mod verdict;

use accutrace_formats::stats::{StatsAccumulator, TensorStats};
use accutrace_formats::DType;
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

/// What to compute for one pair.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MetricsRequest {
    /// msprobe's metrics always; msaccucmp's too with [`Families::All`].
    pub families: Families,
    /// msprobe's rules for the pair: 0-d or not, the precision of the relative error.
    pub msprobe: MsprobeOptions,
    /// The dtypes of target and bench: the statistics' saturation limits, and msaccucmp's OverFlow flag
    /// (a float16 target).
    pub dtypes: (DType, DType),
    /// Also both sides' statistics, bit for bit `TensorStats::of_f32`'s.
    pub stats: bool,
}

impl MetricsRequest {
    /// The request for a pair of these dtypes and this host shape (of the target), with msprobe's
    /// precision rules.
    pub fn for_pair(families: Families, dtypes: (DType, DType), shape: &[u64], stats: bool) -> Self {
        MetricsRequest {
            families,
            msprobe: MsprobeOptions {
                zero_dim: shape.is_empty(),
                re_precision: RePrecision::for_dtypes(dtypes.0, dtypes.1),
            },
            dtypes,
            stats,
        }
    }
}

/// What [`measure`] computed.
#[derive(Clone, Debug, PartialEq)]
pub struct PairMetrics {
    pub msprobe: MsprobeMetrics,
    /// With [`Families::All`].
    pub msaccucmp: Option<MsaccucmpMetrics>,
    /// Target's and bench's statistics, when requested.
    pub stats: Option<(TensorStats, TensorStats)>,
}

/// The metrics (and statistics) of one pair: the one entry point, which decides once between the fused
/// f32 pass (`fused.rs`: every family and both sides' statistics from one pass over the data) and the
/// generic kernels ([`msprobe_metrics`], [`msaccucmp_metrics`], `TensorStats::of_f32`). The fused pass
/// takes pairs of equal, nonzero length, not 0-d, whose relative error msprobe computes in f32 (bf16 and
/// fp32 pairs, fp16 against fp32 or bf16) or in f16 (fp16 pairs); both give the same bits. A pair whose
/// relative error is in f16 holds f16 values, as decoded from its dtypes (fp16, and bool, int8 or uint8
/// against fp16): msprobe's metrics alone take them as such (see `kernel::rel_err_of_f16_values`).
pub fn measure(n: &[f32], b: &[f32], request: &MetricsRequest) -> PairMetrics {
    let fused = n.len() == b.len() && !n.is_empty() && !request.msprobe.zero_dim;
    match request.msprobe.re_precision {
        RePrecision::F32 if fused => measure_fused::<false>(n, b, request),
        RePrecision::F16 if fused => measure_fused::<true>(n, b, request),
        _ => PairMetrics {
            msprobe: msprobe_metrics(n, b, &request.msprobe),
            msaccucmp: (request.families == Families::All)
                .then(|| msaccucmp_metrics(n, b, request.dtypes.0 == DType::FLOAT16)),
            stats: request.stats.then(|| {
                (TensorStats::of_f32(n, request.dtypes.0), TensorStats::of_f32(b, request.dtypes.1))
            }),
        },
    }
}

/// [`measure`] through the fused pass, with msprobe's relative error in f16 (`F16`) or in f32.
fn measure_fused<const F16: bool>(n: &[f32], b: &[f32], request: &MetricsRequest) -> PairMetrics {
    let with_msaccucmp = request.families == Families::All;
    let x_is_fp16 = request.dtypes.0 == DType::FLOAT16;
    let (first, stats) = if request.stats {
        let new = |d: DType| StatsAccumulator::new(d.saturation_limit());
        let (first, sn, sb) =
            fused::both_f32_stats::<F16>(n, b, (new(request.dtypes.0), new(request.dtypes.1)));
        // A side with inf/NaN comes back without statistics: they need `of_f32`'s classifying path.
        let sn = sn.map_or_else(|| TensorStats::of_f32(n, request.dtypes.0), |s| s.finish());
        let sb = sb.map_or_else(|| TensorStats::of_f32(b, request.dtypes.1), |s| s.finish());
        (first, Some((sn, sb)))
    } else if with_msaccucmp {
        (fused::both_f32::<F16>(n, b), None)
    } else {
        (fused::Fused { probe: fused::msprobe_f32::<false, F16>(n, b), ..Default::default() }, None)
    };
    let sums = msprobe::with_nonfinite_rule(n, b, first.probe, || fused::msprobe_f32::<true, F16>(n, b));
    PairMetrics {
        msprobe: msprobe::metrics_of_sums(sums),
        msaccucmp: with_msaccucmp.then(|| {
            let fp16 = msaccucmp::Fp16Values::from_pass(first.fp16, first.acc.xx, first.acc.yy);
            msaccucmp::msaccucmp_from_sums(n, b, &first.acc, x_is_fp16, fp16)
        }),
        stats,
    }
}
