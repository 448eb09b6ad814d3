//! Per-tensor statistics and the 64-bit content hash: the "tier 1" that every captured tensor gets.
//!
//! Both the collector (writing) and the analyzer (reading CANN dumps, .npy files, other captures) call the
//! same two functions, so the numbers of two sources are comparable by construction:
//! - [`TensorStats::of_bytes`] (or [`StatsAccumulator`] fed with decoded values) for the statistics;
//! - [`content_hash`] for the hash.
//!
//! Conventions (they matter when two tools are compared):
//! - `count` is every element; `nan`, `pos_inf`, `neg_inf` classify the non-finite ones.
//! - `min`, `max`, `mean` and `l2_norm` are over the FINITE values only, accumulated in f64, so one inf
//!   does not hide the rest of the tensor. With no finite value, `min`, `max` and `mean` are NaN and
//!   `l2_norm` is 0.
//! - `zero` counts values equal to zero (+0 and -0).
//! - `at_saturation` counts finite values with `|x|` equal to the dtype's largest finite magnitude
//!   ([`DType::saturation_limit`]): what saturation mode leaves of an overflow (fp16 inf -> +-65504).
//!   Integer tensors count their limits too (127 for int8); whether that means anything is the reader's call.
//! - Complex values are counted per part (re and im are two values).

use crate::tensor;
use crate::{DType, FormatError, Result};
use serde::{Deserialize, Serialize};

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

    /// Statistics of the raw little-endian bytes of `dtype` values, decoded by the shared tensor decoder
    /// ([`tensor::decode_f32_into`]) chunk by chunk through stack buffers: no allocation, whatever the size.
    /// 32/64-bit integers and fp64 go through f64 lanes (f32 would round `i32::MAX` off its limit). The element
    /// count is `bytes * 8 / bits` (a packed int4 tensor of odd length counts its padding nibble); bytes that
    /// do not make whole elements and dtypes the decoder refuses are errors.
    pub fn of_bytes(dtype: DType, bytes: &[u8]) -> Result<TensorStats> {
        let bits = dtype
            .bits()
            .filter(|_| dtype.is_decodable())
            .ok_or_else(|| FormatError::whole(format!("no statistics for dtype {dtype}")))?;
        let elements = bytes.len() as u64 * 8 / u64::from(bits);
        let whole = dtype.byte_size(elements).unwrap_or(0);
        if whole != bytes.len() as u64 {
            return Err(FormatError::at(
                whole,
                format!("{} bytes are not a whole number of {dtype} elements", bytes.len()),
            ));
        }
        let lanes = tensor::lanes_per_element(dtype);
        // CHUNK is a multiple of 8, so chunks of sub-byte types start on byte boundaries.
        let per_chunk = (CHUNK / lanes) as u64;
        let chunk_bytes = dtype.byte_size(per_chunk).unwrap_or(1).max(1) as usize;
        let mut acc = StatsAccumulator::new(dtype.saturation_limit());
        let wide = matches!(
            dtype,
            DType::DOUBLE
                | DType::COMPLEX128
                | DType::INT32
                | DType::QINT32
                | DType::UINT32
                | DType::INT64
                | DType::UINT64
        );
        let mut left = elements;
        for chunk in bytes.chunks(chunk_bytes) {
            let n = (left.min(per_chunk) as usize) * lanes;
            left -= left.min(per_chunk);
            if wide {
                let mut buf = [0f64; CHUNK];
                tensor::decode_f64_into(dtype, chunk, &mut buf[..n])?;
                acc.push_f64(&buf[..n]);
            } else {
                let mut buf = [0f32; CHUNK];
                tensor::decode_f32_into(dtype, chunk, &mut buf[..n])?;
                acc.push_f32(&buf[..n]);
            }
        }
        Ok(acc.finish())
    }
}

/// The 64-bit content hash of a tensor's raw bytes: XXH3-64 with seed 0.
///
/// For `diff`, equal hashes are taken to mean equal bytes and vice versa: a collision between two different
/// tensors of the same op, step and rank has probability about 2^-64, far below any hardware error rate.
/// The hash covers bytes only: the dtype, shape and layout are compared from the metadata.
pub fn content_hash(bytes: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(bytes)
}

/// Values per inner block of the accumulator: independent lanes that the compiler keeps in vector registers.
const LANES: usize = 8;
/// Values decoded per chunk by [`TensorStats::of_bytes`].
const CHUNK: usize = 2048;

/// One-pass, chunked statistics: feed decoded values in any number of slices, then [`finish`](Self::finish).
///
/// Each block of [`LANES`] values is processed branch-free into per-lane accumulators (f64 sums, min/max,
/// u64 counters), which the compiler vectorizes; the lanes are combined once at the end.
#[derive(Clone, Debug)]
pub struct StatsAccumulator {
    limit: f64,
    count: u64,
    sum: [f64; LANES],
    sumsq: [f64; LANES],
    min: [f64; LANES],
    max: [f64; LANES],
    nan: [u64; LANES],
    pos_inf: [u64; LANES],
    neg_inf: [u64; LANES],
    zero: [u64; LANES],
    sat: [u64; LANES],
}

impl StatsAccumulator {
    /// An empty accumulator; `saturation_limit` is the magnitude counted by `at_saturation` (None: never).
    pub fn new(saturation_limit: Option<f64>) -> Self {
        StatsAccumulator {
            // NaN never compares equal, so "no limit" counts nothing.
            limit: saturation_limit.unwrap_or(f64::NAN),
            count: 0,
            sum: [0.0; LANES],
            sumsq: [0.0; LANES],
            min: [f64::INFINITY; LANES],
            max: [f64::NEG_INFINITY; LANES],
            nan: [0; LANES],
            pos_inf: [0; LANES],
            neg_inf: [0; LANES],
            zero: [0; LANES],
            sat: [0; LANES],
        }
    }

    /// Adds f32 values.
    pub fn push_f32(&mut self, values: &[f32]) {
        let mut blocks = values.chunks_exact(LANES);
        for block in &mut blocks {
            let mut lane = [0f64; LANES];
            for (l, &v) in lane.iter_mut().zip(block) {
                *l = f64::from(v);
            }
            self.block(&lane);
        }
        for &v in blocks.remainder() {
            self.one(0, f64::from(v));
        }
        self.count += values.len() as u64;
    }

    /// Adds f64 values.
    pub fn push_f64(&mut self, values: &[f64]) {
        let mut blocks = values.chunks_exact(LANES);
        for block in &mut blocks {
            let lane: &[f64; LANES] = block.try_into().unwrap_or(&[0.0; LANES]);
            self.block(lane);
        }
        for &v in blocks.remainder() {
            self.one(0, v);
        }
        self.count += values.len() as u64;
    }

    #[inline(always)]
    fn block(&mut self, lane: &[f64; LANES]) {
        // Fast path for the common all-finite block: six accumulators instead of nine, no selects.
        if lane.iter().all(|x| x.is_finite()) {
            for (i, &x) in lane.iter().enumerate() {
                self.sum[i] += x;
                self.sumsq[i] += x * x;
                self.min[i] = if x < self.min[i] { x } else { self.min[i] };
                self.max[i] = if x > self.max[i] { x } else { self.max[i] };
                self.zero[i] += u64::from(x == 0.0);
                self.sat[i] += u64::from(x.abs() == self.limit);
            }
            return;
        }
        for (i, &x) in lane.iter().enumerate() {
            self.one(i, x);
        }
    }

    /// Branch-free update of lane `i` (selects and comparisons instead of ifs and `f64::min`, whose NaN
    /// handling defeats vectorization; non-finite values are replaced before they reach min/max).
    #[inline(always)]
    fn one(&mut self, i: usize, x: f64) {
        let finite = x.is_finite();
        let fx = if finite { x } else { 0.0 };
        let lo = if finite { x } else { f64::INFINITY };
        let hi = if finite { x } else { f64::NEG_INFINITY };
        self.sum[i] += fx;
        self.sumsq[i] += fx * fx;
        self.min[i] = if lo < self.min[i] { lo } else { self.min[i] };
        self.max[i] = if hi > self.max[i] { hi } else { self.max[i] };
        self.nan[i] += u64::from(x.is_nan());
        self.pos_inf[i] += u64::from(x == f64::INFINITY);
        self.neg_inf[i] += u64::from(x == f64::NEG_INFINITY);
        self.zero[i] += u64::from(x == 0.0);
        self.sat[i] += u64::from(fx.abs() == self.limit);
    }

    /// The statistics of everything pushed so far.
    pub fn finish(&self) -> TensorStats {
        let nan: u64 = self.nan.iter().sum();
        let pos_inf: u64 = self.pos_inf.iter().sum();
        let neg_inf: u64 = self.neg_inf.iter().sum();
        let finite = self.count - nan - pos_inf - neg_inf;
        let min = self.min.iter().copied().fold(f64::INFINITY, f64::min);
        let max = self.max.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let sum: f64 = self.sum.iter().sum();
        let sumsq: f64 = self.sumsq.iter().sum();
        TensorStats {
            count: self.count,
            nan,
            pos_inf,
            neg_inf,
            zero: self.zero.iter().sum(),
            min: if finite == 0 { f64::NAN } else { min },
            max: if finite == 0 { f64::NAN } else { max },
            mean: if finite == 0 { f64::NAN } else { sum / finite as f64 },
            l2_norm: sumsq.sqrt(),
            at_saturation: self.sat.iter().sum(),
        }
    }
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

    fn fp16_bytes(values: &[f32]) -> Vec<u8> {
        values.iter().flat_map(|&v| f16::from_f32(v).to_bits().to_le_bytes()).collect()
    }

    #[test]
    fn empty_tensor() {
        let s = TensorStats::of_f32(&[], DType::FLOAT);
        assert_eq!((s.count, s.nan, s.zero, s.at_saturation), (0, 0, 0, 0));
        assert!(s.min.is_nan() && s.max.is_nan() && s.mean.is_nan());
        assert_eq!(s.l2_norm, 0.0);
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
        assert!((s.l2_norm - 14f64.sqrt()).abs() < 1e-12);
    }

    #[test]
    fn fp16_saturation_is_counted_both_signs() {
        let values = [65504.0, -65504.0, 65504.0, 1.0, 60000.0, f32::INFINITY];
        let s = TensorStats::of_bytes(DType::FLOAT16, &fp16_bytes(&values)).unwrap();
        assert_eq!(s.at_saturation, 3);
        assert_eq!(s.pos_inf, 1);
        assert_eq!(s.max, 65504.0);
        assert!(s.shows_overflow(DType::FLOAT16));
        let ok = TensorStats::of_bytes(DType::FLOAT16, &fp16_bytes(&[1.0, 2.0])).unwrap();
        assert!(!ok.shows_overflow(DType::FLOAT16));
    }

    #[test]
    fn integer_limits_are_exact() {
        let bytes: Vec<u8> =
            [i32::MAX, -i32::MAX, 5, i32::MIN].iter().flat_map(|v| v.to_le_bytes()).collect();
        let s = TensorStats::of_bytes(DType::INT32, &bytes).unwrap();
        assert_eq!(s.at_saturation, 2);
        assert_eq!(s.min, f64::from(i32::MIN));
        assert!(!s.shows_overflow(DType::INT32), "saturated integers are not overflow evidence");
    }

    #[test]
    fn bytes_and_values_agree_across_chunks() {
        // More than one CHUNK and not a multiple of LANES, with specials spread around.
        let values: Vec<f32> = (0..5003)
            .map(|i| match i % 997 {
                0 => f32::NAN,
                1 => f32::INFINITY,
                _ => ((i as f32) * 0.37).sin() * 100.0,
            })
            .collect();
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        let a = TensorStats::of_bytes(DType::FLOAT, &bytes).unwrap();
        let b = TensorStats::of_f32(&values, DType::FLOAT);
        assert_eq!(a, b);
        assert_eq!(a.count, 5003);
        assert_eq!(a.nan, 6);
        let naive_sum: f64 = values.iter().filter(|v| v.is_finite()).map(|&v| f64::from(v)).sum();
        assert!((a.mean * a.finite() as f64 - naive_sum).abs() < 1e-6);
    }

    #[test]
    fn bf16_and_f64() {
        let bytes: Vec<u8> =
            [1.5f32, -2.0].iter().flat_map(|&v| half::bf16::from_f32(v).to_bits().to_le_bytes()).collect();
        let s = TensorStats::of_bytes(DType::BF16, &bytes).unwrap();
        assert_eq!((s.min, s.max, s.mean), (-2.0, 1.5, -0.25));
        let bytes: Vec<u8> = [f64::MAX, 1e300].iter().flat_map(|v| v.to_le_bytes()).collect();
        let s = TensorStats::of_bytes(DType::DOUBLE, &bytes).unwrap();
        assert_eq!((s.at_saturation, s.max), (1, f64::MAX));
    }

    #[test]
    fn ragged_bytes_are_an_error() {
        let err = TensorStats::of_bytes(DType::FLOAT, &[0; 7]).unwrap_err();
        assert_eq!(err.offset, Some(4));
        assert!(TensorStats::of_bytes(DType::STRING, &[0; 8]).is_err());
        assert!(TensorStats::of_bytes(DType::COMPLEX64, &[0; 12]).is_err());
    }

    #[test]
    fn other_dtypes_go_through_the_shared_decoder() {
        // int4, two per byte, low nibble first: 0x7F -> (-1, 7); 0x80 -> (0, -8).
        let s = TensorStats::of_bytes(DType::INT4, &[0x7F, 0x80]).unwrap();
        assert_eq!((s.count, s.min, s.max, s.zero, s.at_saturation), (4, -8.0, 7.0, 1, 1));
        // complex64: parts are values.
        let bytes: Vec<u8> = [1.0f32, f32::NAN, -2.0, 0.0].iter().flat_map(|v| v.to_le_bytes()).collect();
        let s = TensorStats::of_bytes(DType::COMPLEX64, &bytes).unwrap();
        assert_eq!((s.count, s.nan, s.zero, s.min), (4, 1, 1, -2.0));
        // Many chunks of uint1 bits.
        let s = TensorStats::of_bytes(DType::UINT1, &[0xFF; 1000]).unwrap();
        assert_eq!((s.count, s.mean), (8000, 1.0));
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
