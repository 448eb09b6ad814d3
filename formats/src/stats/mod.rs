//! Per-tensor statistics and the 64-bit content hash: the "tier 1" that every captured tensor gets.
//!
//! Both the collector (writing) and the analyzer (reading CANN dumps, .npy files, other captures) call the
//! same two functions, so the numbers of two sources are comparable by construction:
//! - [`TensorStats::of_bytes`] (or [`StatsAccumulator`] fed with decoded values) for the statistics;
//! - [`content_hash`] for the hash.
//!
//! Conventions (they matter when two tools are compared):
//! - `count` is every element; `nan`, `pos_inf`, `neg_inf` classify the non-finite ones.
//! - `min`, `max`, `mean`, `l2_norm` and `abs_sum` are over the FINITE values only, accumulated in f64, so
//!   one inf does not hide the rest of the tensor. With no finite value, `min`, `max` and `mean` are NaN and
//!   `l2_norm` and `abs_sum` are 0.
//! - `zero` counts values equal to zero (+0 and -0).
//! - `at_saturation` counts finite values with `|x|` equal to the dtype's largest finite magnitude
//!   ([`DType::saturation_limit`]): what saturation mode leaves of an overflow (fp16 inf -> +-65504).
//!   Integer tensors count their limits too (127 for int8); whether that means anything is the reader's call.
//! - Complex values are counted per part (re and im are two values).
//!
//! The modules, one job each:
//! - `of_bytes`: the statistics of a tensor's raw bytes, decoded chunk by chunk, with its content hash and
//!   histogram in the same pass ([`stats_and_hash`], [`stats_hash_and_histogram`]).
//! - `stream`: the same for a tensor whose bytes come in pieces ([`StatsStream`]).
//! - `accumulator`: [`StatsAccumulator`], the blocked kernels that sum decoded values, built per instruction
//!   set.
//! - `fused`: fp16, bf16 and f32 bytes into the accumulator's block partials in one pass, at AVX-512.

mod accumulator;
mod fused;
mod of_bytes;
mod stream;

pub use crate::histogram::{Histogram, HistogramAccumulator};
use crate::DType;
pub use accumulator::{BlockF32, StatsAccumulator, F32_BLOCK, F32_LANES};
pub use of_bytes::{stats_and_hash, stats_hash_and_histogram};
use serde::{Deserialize, Serialize};
pub use stream::StatsStream;

/// The statistics of one tensor. See the module documentation for what each field counts.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct TensorStats {
    /// Number of values (elements; two per complex element).
    pub count: u64,
    /// Values that are NaN.
    pub nan: u64,
    /// Values that are +inf.
    pub pos_inf: u64,
    /// Values that are -inf.
    pub neg_inf: u64,
    /// Values equal to zero.
    pub zero: u64,
    /// Smallest finite value; NaN when there is none.
    #[serde(with = "nan_as_null")]
    pub min: f64,
    /// Largest finite value; NaN when there is none.
    #[serde(with = "nan_as_null")]
    pub max: f64,
    /// Mean of the finite values; NaN when there is none.
    #[serde(with = "nan_as_null")]
    pub mean: f64,
    /// Euclidean norm of the finite values.
    pub l2_norm: f64,
    /// Sum of |x| over the finite values (mean |x| = `abs_sum / finite`). `None` where the statistics came
    /// from somewhere that does not keep it: captures before format version 4, device statistics, msprobe.
    #[serde(default)]
    pub abs_sum: Option<f64>,
    /// Finite values whose magnitude equals the dtype's saturation limit.
    pub at_saturation: u64,
}

impl Default for TensorStats {
    fn default() -> Self {
        StatsAccumulator::new(None).finish()
    }
}

impl TensorStats {
    /// Values that are finite.
    pub fn finite(&self) -> u64 {
        self.count - self.nan - self.pos_inf - self.neg_inf
    }

    /// Mean of |x| over the finite values (NaN when there is none), when the sum of |x| is known.
    pub fn abs_mean(&self) -> Option<f64> {
        let finite = self.finite();
        self.abs_sum.map(|s| if finite == 0 { f64::NAN } else { s / finite as f64 })
    }

    /// Whether the tensor holds NaN or inf.
    pub fn has_nonfinite(&self) -> bool {
        self.nan + self.pos_inf + self.neg_inf > 0
    }

    /// Whether a float tensor shows an overflow: NaN, inf, or values at the saturation limit.
    /// (Saturated values in integer tensors are ordinary, so they only count for floats.)
    pub fn shows_overflow(&self, dtype: DType) -> bool {
        self.has_nonfinite() || (dtype.is_float() && self.at_saturation > 0)
    }

    /// Statistics of f32 values (what [`tensor::decode_f32`] produces), with the dtype's saturation limit.
    ///
    /// [`tensor::decode_f32`]: crate::tensor::decode_f32
    pub fn of_f32(values: &[f32], dtype: DType) -> TensorStats {
        let mut acc = StatsAccumulator::new(dtype.saturation_limit());
        acc.push_f32(values);
        acc.finish()
    }

    /// Statistics of f64 values, with the dtype's saturation limit.
    pub fn of_f64(values: &[f64], dtype: DType) -> TensorStats {
        let mut acc = StatsAccumulator::new(dtype.saturation_limit());
        acc.push_f64(values);
        acc.finish()
    }
}

/// The 64-bit content hash of a tensor's raw bytes: XXH3-64 with seed 0 ([`crate::hash::xxh3_64`]).
///
/// For `diff`, equal hashes are taken to mean equal bytes and vice versa: a collision between two different
/// tensors of the same op, step and rank has probability about 2^-64, far below any hardware error rate.
/// The hash covers bytes only: the dtype, shape and layout are compared from the metadata.
pub fn content_hash(bytes: &[u8]) -> u64 {
    crate::hash::xxh3_64(bytes)
}

/// JSON has no NaN: write it as `null` and read `null` back as NaN.
mod nan_as_null {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(value: &f64, s: S) -> Result<S::Ok, S::Error> {
        if value.is_nan() {
            s.serialize_none()
        } else {
            s.serialize_f64(*value)
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
        Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::f16;

    pub(super) fn fp16_bytes(values: &[f32]) -> Vec<u8> {
        values.iter().flat_map(|&v| f16::from_f32(v).to_bits().to_le_bytes()).collect()
    }

    #[test]
    fn empty_tensor() {
        let s = TensorStats::of_f32(&[], DType::FLOAT);
        assert_eq!((s.count, s.nan, s.zero, s.at_saturation), (0, 0, 0, 0));
        assert!(s.min.is_nan() && s.max.is_nan() && s.mean.is_nan());
        assert_eq!((s.l2_norm, s.abs_sum), (0.0, Some(0.0)));
        assert!(s.abs_mean().unwrap().is_nan());
        let b = TensorStats::of_bytes(DType::FLOAT16, &[]).unwrap();
        assert_eq!((b.count, b.l2_norm), (0, 0.0));
        assert!(b.min.is_nan());
    }

    #[test]
    fn all_nan() {
        let values = vec![f32::NAN; 19];
        let s = TensorStats::of_f32(&values, DType::FLOAT);
        assert_eq!((s.count, s.nan, s.finite()), (19, 19, 0));
        assert!(s.min.is_nan() && s.mean.is_nan());
        assert!(s.has_nonfinite());
    }

    #[test]
    fn inf_mix_keeps_finite_statistics() {
        let values = [1.0, f32::INFINITY, -3.0, f32::NEG_INFINITY, f32::NAN, 0.0, -0.0, 2.0, f32::INFINITY];
        let s = TensorStats::of_f32(&values, DType::FLOAT);
        assert_eq!((s.count, s.nan, s.pos_inf, s.neg_inf, s.zero), (9, 1, 2, 1, 2));
        assert_eq!((s.min, s.max), (-3.0, 2.0));
        assert_eq!(s.mean, 0.0);
        assert_eq!(s.abs_sum, Some(6.0), "|1| + |-3| + |2|: non-finite values are not summed");
        assert_eq!(s.abs_mean(), Some(1.2), "over the 5 finite values, zeros included");
        assert!((s.l2_norm - 14f64.sqrt()).abs() < 1e-12);
    }

    #[test]
    fn json_round_trip_keeps_nan() {
        let s = TensorStats::of_f32(&[f32::NAN], DType::FLOAT);
        let json = serde_json::to_string(&s).unwrap();
        assert!(json.contains("\"min\":null"));
        let back: TensorStats = serde_json::from_str(&json).unwrap();
        assert!(back.min.is_nan() && back.nan == 1);
    }

    #[test]
    fn hash_is_of_bytes() {
        assert_eq!(content_hash(b"abc"), content_hash(b"abc"));
        assert_ne!(content_hash(b"abc"), content_hash(b"abd"));
        assert_eq!(content_hash(b""), xxhash_rust::xxh3::xxh3_64(b""));
    }
}
