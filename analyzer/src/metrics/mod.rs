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

/// msprobe's `format_value`: `float('{:.12f}'.format(v))`, i.e. rounded to 12 decimals.
pub fn format_value(v: f64) -> f64 {
    if !v.is_finite() {
        return v;
    }
    format!("{v:.12}").parse().unwrap_or(v)
}

/// Python's `round(v, digits)` for the digit counts msprobe uses (correctly rounded decimal).
pub fn py_round(v: f64, digits: usize) -> f64 {
    if !v.is_finite() {
        return v;
    }
    format!("{v:.digits$}").parse().unwrap_or(v)
}

/// Python's `repr(float)`: shortest round-trip digits, positional for 1e-4 <= |v| < 1e16, else
/// scientific with a two-digit exponent (`8.5353851e-05`), `.0` on integral values. msprobe's CSV cells
/// are this text.
pub fn py_float_repr(v: f64) -> String {
    if v.is_nan() {
        return "nan".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "inf" } else { "-inf" }.into();
    }
    if v == 0.0 {
        return if v.is_sign_negative() { "-0.0" } else { "0.0" }.into();
    }
    // Shortest round-trip digit count from `{:e}`, then the digits re-rendered in exact mode: at an exact
    // tie (0.0127658843994140625 to 17 digits) Python rounds half to even, Rust's shortest mode rounds up.
    let shortest = format!("{:e}", v.abs());
    let k = shortest.split_once('e').map_or(1, |(m, _)| m.chars().filter(char::is_ascii_digit).count());
    let sci = format!("{:.*e}", k - 1, v.abs());
    let (mantissa, exp) = sci.split_once('e').expect("{:e} has an exponent");
    let exp: i32 = exp.parse().expect("{:e} exponent is an integer");
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let sign = if v < 0.0 { "-" } else { "" };
    if (-4..16).contains(&exp) {
        let body = if exp >= 0 {
            let int_len = exp as usize + 1;
            if digits.len() <= int_len {
                format!("{digits}{}.0", "0".repeat(int_len - digits.len()))
            } else {
                format!("{}.{}", &digits[..int_len], &digits[int_len..])
            }
        } else {
            format!("0.{}{digits}", "0".repeat((-exp - 1) as usize))
        };
        format!("{sign}{body}")
    } else {
        let esign = if exp < 0 { '-' } else { '+' };
        format!("{sign}{mantissa}e{esign}{:02}", exp.abs())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[allow(clippy::excessive_precision)] // exact binary values, written out to show the tie
    fn python_float_text() {
        for (v, s) in [
            (8.5353851e-05, "8.5353851e-05"),
            (1.0, "1.0"),
            (0.0, "0.0"),
            (988.0, "988.0"),
            (1e-05, "1e-05"),
            (0.0001, "0.0001"),
            (0.06690607783577326, "0.06690607783577326"),
            (204801.0, "204801.0"),
            (1e16, "1e+16"),
            (-2.140625, "-2.140625"),
            (9.313226188509272e-13, "9.313226188509272e-13"),
            (1234567890123456.0, "1234567890123456.0"),
            (0.0127658843994140625, "0.012765884399414062"),
        ] {
            assert_eq!(py_float_repr(v), s);
        }
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
