//! Device arithmetic: rounding an op's fp32 result to fp16/bf16, the two overflow modes, the status bits,
//! and the little-endian bytes the device holds.

use crate::{OverflowMode, Precision};
use accutrace_formats::DType;
use half::{bf16, f16};

/// AI Core status bit: a float computation produced inf/NaN from finite inputs (docs/CANN.md §4).
pub const STATUS_FLOAT_OVERFLOW: u64 = 0x20;
/// AI Core status bit: fp32 -> fp16 conversion overflow (docs/CANN.md §4).
pub const STATUS_CONVERSION_OVERFLOW: u64 = 0x100;

/// The largest finite value of each precision (the saturation limit).
pub fn max_finite(p: Precision) -> f32 {
    match p {
        Precision::Fp16 => f16::MAX.to_f32(),
        Precision::Bf16 => bf16::MAX.to_f32(),
        Precision::Fp32 => f32::MAX,
    }
}

pub fn dtype(p: Precision) -> DType {
    match p {
        Precision::Fp16 => DType::FLOAT16,
        Precision::Bf16 => DType::BF16,
        Precision::Fp32 => DType::FLOAT,
    }
}

/// Round to nearest-even in `p`, returned as f32 (exact). Overflow gives +-inf, as the hardware's
/// conversion does before the overflow mode is applied.
#[inline]
pub fn round(p: Precision, x: f32) -> f32 {
    match p {
        Precision::Fp16 => f16::from_f32(x).to_f32(),
        Precision::Bf16 => bf16::from_f32(x).to_f32(),
        Precision::Fp32 => x,
    }
}

pub fn round_slice(p: Precision, xs: &mut [f32]) {
    if p != Precision::Fp32 {
        xs.iter_mut().for_each(|x| *x = round(p, *x));
    }
}

/// Turns an op's fp32 results into device values in place and returns the status bits raised.
///
/// `inputs_finite` tells a compute overflow (inf/NaN out of finite inputs: 0x20) from a value that merely
/// carries an upstream inf/NaN along (no bit: the vendor's "first anomaly" rule finds the origin).
/// Saturation mode clamps to +-max and turns NaN into 0 (docs/CANN.md §3); the bits are raised all the same.
pub fn quantize(p: Precision, mode: OverflowMode, xs: &mut [f32], inputs_finite: bool) -> u64 {
    let max = max_finite(p);
    let mut status = 0;
    for x in xs.iter_mut() {
        let raw = *x;
        let mut v = round(p, raw);
        if !v.is_finite() {
            if raw.is_finite() {
                status |= STATUS_CONVERSION_OVERFLOW;
            } else if inputs_finite {
                status |= STATUS_FLOAT_OVERFLOW;
            }
            if mode == OverflowMode::Saturation {
                v = if v.is_nan() { 0.0 } else { max.copysign(v) };
            }
        }
        *x = v;
    }
    status
}

/// Little-endian bytes of values already representable in `p`.
pub fn encode(p: Precision, xs: &[f32]) -> Vec<u8> {
    let mut out = Vec::with_capacity(xs.len() * if p == Precision::Fp32 { 4 } else { 2 });
    match p {
        Precision::Fp16 => xs.iter().for_each(|&x| out.extend_from_slice(&f16::from_f32(x).to_le_bytes())),
        Precision::Bf16 => xs.iter().for_each(|&x| out.extend_from_slice(&bf16::from_f32(x).to_le_bytes())),
        Precision::Fp32 => xs.iter().for_each(|&x| out.extend_from_slice(&x.to_le_bytes())),
    }
    out
}

/// Inverse of [`encode`] (tests and consumers that want values back).
pub fn decode(p: Precision, bytes: &[u8]) -> Vec<f32> {
    match p {
        Precision::Fp16 => bytes.chunks_exact(2).map(|c| f16::from_le_bytes([c[0], c[1]]).to_f32()).collect(),
        Precision::Bf16 => {
            bytes.chunks_exact(2).map(|c| bf16::from_le_bytes([c[0], c[1]]).to_f32()).collect()
        }
        Precision::Fp32 => {
            bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overflow_modes_and_bits() {
        let mut a = vec![1.0, 70000.0, f32::INFINITY, f32::NAN];
        let s = quantize(Precision::Fp16, OverflowMode::Saturation, &mut a, true);
        assert_eq!(a[..3], [1.0, 65504.0, 65504.0]);
        assert_eq!(a[3], 0.0);
        assert_eq!(s, STATUS_CONVERSION_OVERFLOW | STATUS_FLOAT_OVERFLOW);
        let mut b = vec![-70000.0, 65519.0];
        let s = quantize(Precision::Fp16, OverflowMode::InfNan, &mut b, true);
        assert_eq!(b, [f32::NEG_INFINITY, 65504.0]);
        assert_eq!(s, STATUS_CONVERSION_OVERFLOW);
        let mut c = vec![f32::NAN];
        assert_eq!(quantize(Precision::Bf16, OverflowMode::InfNan, &mut c, false), 0);
        assert!(c[0].is_nan());
    }

    #[test]
    fn encode_decode_roundtrip() {
        for p in [Precision::Fp16, Precision::Bf16, Precision::Fp32] {
            let mut xs = vec![0.1, -2.5, 1e-3, 300.0];
            round_slice(p, &mut xs);
            assert_eq!(decode(p, &encode(p, &xs)), xs);
        }
        assert_eq!(encode(Precision::Fp16, &[1.0]), [0x00, 0x3c]);
    }
}
