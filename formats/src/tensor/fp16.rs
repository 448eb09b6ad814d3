//! fp16 bytes to f32 values: the one conversion path every reader and the statistics use.
//!
//! One scalar definition, [`f16_to_f32`](super::half_bits::f16_to_f32) (branch-free, so the portable slice
//! loop vectorizes), and hardware conversion where the CPU has it, chosen by [`crate::simd::level`]:
//! F16C on x86_64 (`vcvtph2ps`, 8 values per instruction, at [`Level::Avx2`]) and NEON on aarch64
//! (`fcvtl`/`fcvtl2`, part of ARMv8's baseline, at [`Level::Baseline`]). Each is exact, as is every fp16 in
//! f32; a NaN stays a NaN of the same sign (hardware quiets a signalling NaN, the scalar path keeps its
//! payload: readers only ask `is_nan`). Tests compare every build on all 65536 patterns.

use super::half_bits::f16_to_f32;
use crate::simd::{self, Level};

/// Converts `min(bytes.len() / 2, out.len())` little-endian fp16 values of `bytes` (any alignment) into `out`.
pub fn fp16_to_f32(bytes: &[u8], out: &mut [f32]) {
    let n = out.len().min(bytes.len() / 2);
    let (bytes, out) = (&bytes[..2 * n], &mut out[..n]);
    #[cfg(target_arch = "x86_64")]
    if simd::level() >= Level::Avx2 {
        // SAFETY: level() reports Avx2 only when the CPU has AVX2 and F16C (and so AVX).
        unsafe { f16c::convert(bytes, out) };
        return;
    }
    #[cfg(target_arch = "aarch64")]
    if simd::level() >= Level::Baseline {
        neon::convert(bytes, out);
        return;
    }
    portable(bytes, out);
}

/// The scalar converter over the slice (`bytes.len() == 2 * out.len()`); vectorized by the compiler.
fn portable(bytes: &[u8], out: &mut [f32]) {
    for (o, b) in out.iter_mut().zip(bytes.chunks_exact(2)) {
        *o = f16_to_f32(u16::from_le_bytes([b[0], b[1]]));
    }
}

/// Values per hardware conversion step (one 16-byte load).
const STEP: usize = 8;

#[cfg(target_arch = "x86_64")]
mod f16c {
    use super::STEP;
    use std::arch::x86_64::{__m128i, _mm256_cvtph_ps, _mm256_storeu_ps, _mm_loadu_si128};

    /// `bytes.len() == 2 * out.len()`. Callers check that the CPU has F16C and AVX.
    #[target_feature(enable = "avx,f16c")]
    pub(super) fn convert(bytes: &[u8], out: &mut [f32]) {
        let mut dst = out.chunks_exact_mut(STEP);
        let mut src = bytes.chunks_exact(2 * STEP);
        for (d, s) in (&mut dst).zip(&mut src) {
            let (Ok(d), Ok(s)) = (<&mut [f32; STEP]>::try_from(d), <&[u8; 2 * STEP]>::try_from(s)) else {
                break;
            };
            // SAFETY: `s` is 16 readable bytes and `d` 8 writable f32; both intrinsics take unaligned
            // pointers; F16C and AVX are enabled for this function.
            unsafe {
                _mm256_storeu_ps(
                    d.as_mut_ptr(),
                    _mm256_cvtph_ps(_mm_loadu_si128(s.as_ptr().cast::<__m128i>())),
                )
            };
        }
        super::portable(src.remainder(), dst.into_remainder());
    }
}

#[cfg(target_arch = "aarch64")]
mod neon {
    use super::STEP;
    use std::arch::aarch64::{float32x4_t, uint16x8_t, vld1q_u8, vreinterpretq_u16_u8, vst1q_f32};

    /// `bytes.len() == 2 * out.len()`. NEON and the fp16 conversions are part of aarch64's baseline.
    pub(super) fn convert(bytes: &[u8], out: &mut [f32]) {
        let mut dst = out.chunks_exact_mut(STEP);
        let mut src = bytes.chunks_exact(2 * STEP);
        for (d, s) in (&mut dst).zip(&mut src) {
            let (Ok(d), Ok(s)) = (<&mut [f32; STEP]>::try_from(d), <&[u8; 2 * STEP]>::try_from(s)) else {
                break;
            };
            let (lo, hi): (float32x4_t, float32x4_t);
            // SAFETY: `s` is 16 readable bytes and `d` 8 writable f32 (vld1q/vst1q need no alignment beyond
            // the element's: u8 and f32 arrays have it). `fcvtl`/`fcvtl2` (half to single precision) are
            // ARMv8.0 Advanced SIMD, which every aarch64 CPU has; the asm touches only its operands and
            // reads FPCR (its default rounding and NaN rules), no memory or flags.
            unsafe {
                let halves: uint16x8_t = vreinterpretq_u16_u8(vld1q_u8(s.as_ptr()));
                std::arch::asm!(
                    "fcvtl {lo:v}.4s, {h:v}.4h",
                    "fcvtl2 {hi:v}.4s, {h:v}.8h",
                    h = in(vreg) halves,
                    lo = out(vreg) lo,
                    hi = out(vreg) hi,
                    options(pure, nomem, nostack, preserves_flags),
                );
                vst1q_f32(d.as_mut_ptr(), lo);
                vst1q_f32(d.as_mut_ptr().add(4), hi);
            }
        }
        super::portable(src.remainder(), dst.into_remainder());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every build the CPU runs, on all 65536 patterns from an unaligned start and on ragged lengths,
    /// against the scalar definition: every bit, NaN payloads aside (quieted by hardware; Miri randomizes
    /// them).
    #[test]
    fn every_build_converts_every_pattern_exactly() {
        // Under Miri (slow), every 257th pattern and the specials.
        let step = if cfg!(miri) { 257 } else { 1 };
        let specials = [0x0000u16, 0x8000, 0x0001, 0x83ff, 0x7bff, 0x7c00, 0xfc00, 0x7c01, 0x7e00, 0xffff];
        let patterns: Vec<u16> = (0..=u16::MAX).step_by(step).chain(specials).collect();
        let mut bytes = vec![0u8];
        bytes.extend(patterns.iter().flat_map(|h| h.to_le_bytes()));
        bytes.push(0xab); // a ragged last byte, which is not a value
        let bytes = &bytes[1..]; // and an odd (unaligned) start
        let key = |v: f32| if v.is_nan() { 0x7fc0_0000 | (v.to_bits() & 0x8000_0000) } else { v.to_bits() };
        let want: Vec<u32> = patterns.iter().map(|&h| key(f16_to_f32(h))).collect();
        for level in simd::available() {
            for n in [patterns.len(), 13, 8, 7, 0] {
                let mut got = vec![f32::NAN; n + 3];
                simd::with_ceiling(level, || fp16_to_f32(&bytes[..2 * n + 1], &mut got));
                let got: Vec<u32> = got[..n].iter().map(|&v| key(v)).collect();
                assert_eq!(got, want[..n], "{level:?}, {n} values");
            }
        }
    }

    #[test]
    fn converts_only_what_both_sides_hold() {
        let bytes = [0x00, 0x3c, 0x00, 0xc0, 0xff];
        let mut out = [7.0f32; 4];
        fp16_to_f32(&bytes, &mut out);
        assert_eq!(out, [1.0, -2.0, 7.0, 7.0]);
        let mut one = [0f32; 1];
        fp16_to_f32(&bytes, &mut one);
        assert_eq!(one, [1.0]);
    }
}
