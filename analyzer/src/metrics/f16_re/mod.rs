//! msprobe's relative error in f16 ([`RePrecision::F16`](super::RePrecision::F16): fp16 pairs) over a chunk,
//! with each rounding to f16 done by the CPU's own conversion where it has one: F16C's `vcvtps2ph` (round
//! to nearest even) and `vcvtph2ps` back, two instructions per 8 values, instead of
//! [`round_to_f16`](super::kernel::round_to_f16)'s fifteen integer and float operations. The fused pass
//! (`fused.rs`) runs it beside its f64 sums when it also forms msaccucmp's sums, on x86_64 at
//! [`Level::Avx2`](accutrace_formats::simd::Level::Avx2) and above; with msprobe's metrics alone it runs
//! [`probe_of_f16_values`] instead, its whole loop written with the hardware's rounding (`f16c.rs`, eight
//! pairs a step; `avx512.rs`, sixteen, on CPUs with AVX-512; `fp16.rs`, 32 pairs a step of fp16 bytes
//! computed in f16 by CPUs with AVX512-FP16, the same bits); everywhere else (the portable and SSE2
//! builds, aarch64, pairs with inf/NaN) it computes the same in its own lanes.
//!
//! What the fused pass takes from the relative errors does not depend on their order: their maximum (NaN
//! left out, as numpy's `max` never sees one here: the NaN flag says so), whether one is NaN, the counts
//! below msprobe's two thresholds, and whether every value of both sides is an f16 value (KL's reciprocal
//! path, `msaccucmp::Fp16Values`). So a separate pass over the chunk gives the fused pass's bits exactly,
//! provided each relative error is the same: each operation is [`rel_err_f16`]'s,
//! in the same order, and the rounding is the same function (IEEE round to nearest even into binary16,
//! overflow to infinity, subnormals kept, a NaN stays a NaN); the tests below check it against
//! `round_to_f16` on every f32 exponent and a stride of all bit patterns, and the whole pass against the
//! portable one.

use super::sums::MsprobeSums;
#[cfg(test)]
use lanes::portable;
pub(crate) use lanes::ReF16;

/// msprobe's sums of a pair of f16 values (equal lengths, fewer than 2^32 elements: one chunk of the fused
/// pass), relative error in f16, through the CPU's f16 conversion when it has one and the current
/// [`simd::level`](accutrace_formats::simd::level) allows it; `None` otherwise. The same bits as the fused
/// pass's own lanes (`fused::chunk` without msaccucmp's sums: the same f64 lanes, operations and order, and
/// [`rel_err_of_f16_values`](super::kernel::rel_err_of_f16_values) with the hardware's rounding), for any
/// input; only the work differs: the roundings were two thirds of that pass's instructions.
pub(crate) fn probe_of_f16_values(n: &[f32], b: &[f32], thresholds: (f32, f32)) -> Option<MsprobeSums> {
    debug_assert_eq!(n.len(), b.len());
    #[cfg(target_arch = "x86_64")]
    {
        use accutrace_formats::simd::{level, Level};
        if level() >= Level::Avx512 {
            // SAFETY: level() reports Avx512 only when this CPU has AVX-512 F/DQ/BW/VL, AVX2 and F16C.
            return Some(unsafe { avx512::probe_of_f16_values(n, b, thresholds) });
        }
        if level() >= Level::Avx2 {
            // SAFETY: level() reports Avx2 only when this CPU has AVX2 and F16C (simd::detect).
            return Some(unsafe { f16c::probe_of_f16_values(n, b, thresholds) });
        }
    }
    let _ = (n, b, thresholds);
    None
}

/// [`probe_of_f16_values`] of a pair given as fp16 bytes (little-endian, equal lengths, even): each value
/// widened in the loop as it is read, where the pair as f32 would first be written out and read back.
pub(crate) fn probe_of_f16_bytes(n: &[u8], b: &[u8], thresholds: (f32, f32)) -> Option<MsprobeSums> {
    debug_assert!(n.len() == b.len() && n.len().is_multiple_of(2));
    #[cfg(target_arch = "x86_64")]
    {
        use accutrace_formats::simd::{level, Level};
        if level() >= Level::Avx512 && fp16::available() {
            // SAFETY: as below, and fp16::available() reports AVX512-FP16 (and POPCNT) only where the CPU
            // has them.
            return Some(unsafe { fp16::probe_of_f16_bytes(n, b, thresholds) });
        }
        if level() >= Level::Avx512 {
            // SAFETY: level() reports Avx512 only when this CPU has AVX-512 F/DQ/BW/VL, AVX2 and F16C.
            return Some(unsafe { avx512::probe_of_f16_bytes(n, b, thresholds) });
        }
        if level() >= Level::Avx2 {
            // SAFETY: level() reports Avx2 only when this CPU has AVX2 and F16C (simd::detect).
            return Some(unsafe { f16c::probe_of_f16_bytes(n, b, thresholds) });
        }
    }
    let _ = (n, b, thresholds);
    None
}

/// [`ReF16`] of a pair (equal lengths) through the CPU's f16 conversion, when it has one and the current
/// [`simd::level`](accutrace_formats::simd::level) allows it; `None` otherwise.
pub(crate) fn by_hardware(n: &[f32], b: &[f32], thresholds: (f32, f32)) -> Option<ReF16> {
    debug_assert_eq!(n.len(), b.len());
    #[cfg(target_arch = "x86_64")]
    {
        use accutrace_formats::simd::{level, Level};
        if level() >= Level::Avx512 && fp16::available() {
            // SAFETY: level() reports Avx512 only when this CPU has AVX-512 F/DQ/BW/VL, AVX2 and F16C, and
            // fp16::available() AVX512-FP16 (and POPCNT) only where it has them.
            return Some(unsafe { fp16::re_f16(n, b, thresholds) });
        }
        if level() >= Level::Avx2 {
            // SAFETY: level() reports Avx2 only when this CPU has AVX2 and F16C (simd::detect).
            return Some(unsafe { f16c::re_f16(n, b, thresholds) });
        }
    }
    let _ = (n, b, thresholds);
    None
}

mod lanes;

#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(target_arch = "x86_64")]
mod f16c;
#[cfg(target_arch = "x86_64")]
mod fp16;

#[cfg(test)]
mod tests;
