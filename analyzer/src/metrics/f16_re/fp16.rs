//! The AVX-512 pass over fp16 bytes ([`super::probe_of_f16_bytes`]) on CPUs with AVX512-FP16: the relative
//! errors computed in f16 by the CPU, 32 pairs a step, where [`super::avx512`] computes each operation in
//! f32 and rounds it to f16 (two conversions an operation). The f64 sums are that build's, lane for lane.
//!
//! The same bits: numpy's f16 arithmetic (each operation in f32, rounded to f16) is IEEE f16 arithmetic,
//! since f32 keeps at least 2 x 11 + 2 significant bits, where rounding twice gives the once-rounded result
//! for +, -, x and / (Figueroa, "When is double rounding innocuous?", 1995). Checked on all 2^32 pairs of
//! f16 values against `avx512`'s operations (2026-11-30, #18); the tests check a grid of them and the
//! pass's sums against that build's.
//!
//! The f16 operations are inline assembly: their intrinsics are newer than the workspace's Rust (1.89).

use super::super::kernel::F16_EPSILON;
use super::super::sums::MsprobeSums;
use super::avx512::Sums;
use super::lanes::{portable, ReF16};
use std::arch::x86_64::*;

/// Whether this CPU computes in f16 (AVX512-FP16), and counts a mask's bits in one instruction (POPCNT,
/// which every such CPU has), detected once.
pub(super) fn available() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| {
        std::arch::is_x86_feature_detected!("avx512fp16") && std::arch::is_x86_feature_detected!("popcnt")
    })
}

/// The constants of [`step`], each in all 32 f16 lanes.
pub(super) struct Consts {
    zero: __m512i,
    eps: __m512i,
    abs: __m512i,
    t1: __m512i,
    t5: __m512i,
}

impl Consts {
    /// The thresholds `t1`, `t5` are f16 values (`fused::thresholds_f16`), so their f16 bits are exact.
    #[target_feature(enable = "avx2,f16c,avx512f,avx512bw")]
    pub(super) fn new((t1, t5): (f32, f32)) -> Consts {
        let bits = |v: f32| {
            let h = _mm_extract_epi16::<0>(_mm_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm_set1_ps(v)));
            debug_assert_eq!(_mm_cvtss_f32(_mm_cvtph_ps(_mm_set1_epi16(h as i16))), v, "not an f16 value");
            _mm512_set1_epi16(h as i16)
        };
        Consts {
            zero: _mm512_setzero_si512(),
            eps: bits(F16_EPSILON),
            abs: _mm512_set1_epi16(0x7FFF),
            t1: bits(t1),
            t5: bits(t5),
        }
    }
}

/// The relative errors of 32 pairs of f16 values (`x`, `y`: their bits), `rel_err_of_f16_values`'s
/// operations in f16: eps for a zero bench (and eps added to the target there), the difference, the
/// quotient, |.|. Folds them into the maxima `max_re` (`vmaxph` is `a > b ? a : b`: a NaN leaves it as it
/// was) and returns them with the masks of those that are NaN, below `t1` and below `t5`.
#[inline]
#[target_feature(enable = "avx2,f16c,avx512f,avx512dq,avx512bw,avx512vl,avx512fp16")]
pub(super) fn step(x: __m512i, y: __m512i, k: &Consts, max_re: &mut __m512i) -> (__m512i, u32, u32, u32) {
    let (re, nan, lt1, lt5): (__m512i, u32, u32, u32);
    let (_sum, _nq, _bq): (__m512i, __m512i, __m512i);
    // SAFETY: registers only (no memory, no stack); the function's target features give the instructions
    // and the zmm and mask registers. Predicates: 0 EQ_OQ, 3 UNORD_Q, 0x11 LT_OQ (as `avx512`'s compares).
    unsafe {
        std::arch::asm!(
            "vcmpph {z}, {y}, {zero}, 0",
            "vaddph {t}, {x}, {eps}",
            "vpblendmw {nq} {{{z}}}, {x}, {t}",
            "vpblendmw {bq} {{{z}}}, {y}, {eps}",
            "vsubph {t}, {nq}, {bq}",
            "vdivph {t}, {t}, {bq}",
            "vpandd {re}, {t}, {abs}",
            "vmaxph {max}, {re}, {max}",
            "vcmpph {kn}, {re}, {re}, 3",
            "vcmpph {k1}, {re}, {t1}, 0x11",
            "vcmpph {k5}, {re}, {t5}, 0x11",
            "kmovd {nan:e}, {kn}",
            "kmovd {lt1:e}, {k1}",
            "kmovd {lt5:e}, {k5}",
            x = in(zmm_reg) x,
            y = in(zmm_reg) y,
            zero = in(zmm_reg) k.zero,
            eps = in(zmm_reg) k.eps,
            abs = in(zmm_reg) k.abs,
            t1 = in(zmm_reg) k.t1,
            t5 = in(zmm_reg) k.t5,
            max = inout(zmm_reg) *max_re,
            re = out(zmm_reg) re,
            // Typed, not `_`: an untyped zmm output is printed as a byte register.
            t = out(zmm_reg) _sum,
            nq = out(zmm_reg) _nq,
            bq = out(zmm_reg) _bq,
            z = out(kreg) _,
            kn = out(kreg) _,
            k1 = out(kreg) _,
            k5 = out(kreg) _,
            nan = out(reg) nan,
            lt1 = out(reg) lt1,
            lt5 = out(reg) lt5,
            options(pure, nomem, nostack),
        );
    }
    (re, nan, lt1, lt5)
}

/// [`super::probe_of_f16_bytes`] on a CPU with AVX-512 (F, DQ, BW, VL) and AVX512-FP16. POPCNT counts the
/// masks of the thresholds (#18: without it the two counts were a dozen vector instructions a step, a
/// tenth of the pass's).
#[target_feature(enable = "avx2,f16c,avx512f,avx512dq,avx512bw,avx512vl,avx512fp16,popcnt")]
pub(super) fn probe_of_f16_bytes(n: &[u8], b: &[u8], thresholds: (f32, f32)) -> MsprobeSums {
    use accutrace_formats::tensor::half_bits::f16_to_f32;
    let len = n.len().min(b.len()) / 2;
    let k = Consts::new(thresholds);
    let z64 = _mm512_setzero_pd();
    let mut sums = Sums { dot: z64, nn: z64, bb: z64, dd: z64, max_abs: z64 };
    let mut max_re = _mm512_setzero_si512();
    let (mut nan, mut lt_one, mut lt_five) = (0u32, 0u64, 0u64);
    for s in 0..len / 32 {
        // SAFETY: s < len / 32: 64 bytes from 64s on each side; loadu takes unaligned pointers.
        let (x, y) = unsafe {
            (
                _mm512_loadu_si512(n.as_ptr().add(64 * s).cast()),
                _mm512_loadu_si512(b.as_ptr().add(64 * s).cast()),
            )
        };
        // Pairs 32s.. to lanes 0-7, 32s + 8.. to lanes 0-7 and so on: the order the lanes see them in.
        let wide = |v: __m512i, half: bool| {
            _mm512_cvtph_ps(if half { _mm512_extracti64x4_epi64::<1>(v) } else { _mm512_castsi512_si256(v) })
        };
        for half in [false, true] {
            let (xs, ys) = (wide(x, half), wide(y, half));
            sums.add(_mm512_castps512_ps256(xs), _mm512_castps512_ps256(ys));
            sums.add(_mm512_extractf32x8_ps::<1>(xs), _mm512_extractf32x8_ps::<1>(ys));
        }
        let (_, n1, c1, c5) = step(x, y, &k, &mut max_re);
        nan |= n1;
        lt_one += u64::from(c1.count_ones());
        lt_five += u64::from(c5.count_ones());
    }
    // 32 maxima (none NaN, none negative) to eight: the maximum of all is the same.
    let mut lanes = [0u16; 32];
    // SAFETY: `lanes` is 64 writable bytes; storeu takes an unaligned pointer; AVX-512F is enabled here.
    unsafe { _mm512_storeu_si512(lanes.as_mut_ptr().cast(), max_re) };
    let max_re = std::array::from_fn(|l| {
        let four = [0, 8, 16, 24].map(|o| f16_to_f32(lanes[l + o]));
        four.into_iter().fold(0.0f32, |m, v| if v > m { v } else { m })
    });
    let vectors = sums.lanes(max_re, nan != 0, (lt_one, lt_five));
    let one = |v: &[u8], i: usize| f16_to_f32(u16::from_le_bytes([v[2 * i], v[2 * i + 1]]));
    vectors.finish(len / 32 * 32, len, |i| (one(n, i), one(b, i)), thresholds)
}

/// [`super::by_hardware`] on a CPU with AVX-512 (F, DQ, BW, VL) and AVX512-FP16: `f16c::re_f16`'s figures,
/// 32 pairs a step. Each value is rounded to f16 by `vcvtps2ph` (as there), whether it is an f16 value
/// already found by widening it back (a NaN is not, as there), then [`step`]; the ragged end as there.
#[target_feature(enable = "avx2,f16c,avx512f,avx512dq,avx512bw,avx512vl,avx512fp16,popcnt")]
pub(super) fn re_f16(n: &[f32], b: &[f32], thresholds: (f32, f32)) -> ReF16 {
    let len = n.len().min(b.len());
    let k = Consts::new(thresholds);
    let mut max_re = _mm512_setzero_si512();
    let (mut nan, mut not_f16, mut lt1, mut lt5) = (0u32, 0u32, 0u64, 0u64);
    // 32 values from `32s` rounded to f16 (their bits), and the mask of those whose rounding is another
    // number or NaN.
    let rounded = |v: &[f32], s: usize| {
        const RNE: i32 = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
        // SAFETY: the caller asks for s < len / 32: 32 f32 from 32s; loadu takes unaligned pointers.
        let (lo, hi) = unsafe {
            (_mm512_loadu_ps(v.as_ptr().add(32 * s)), _mm512_loadu_ps(v.as_ptr().add(32 * s + 16)))
        };
        let (rlo, rhi) = (_mm512_cvtps_ph::<RNE>(lo), _mm512_cvtps_ph::<RNE>(hi));
        let differs = |h: __m256i, v: __m512| _mm512_cmp_ps_mask::<_CMP_NEQ_UQ>(_mm512_cvtph_ps(h), v);
        let mask = u32::from(differs(rlo, lo)) | u32::from(differs(rhi, hi)) << 16;
        (_mm512_inserti64x4::<1>(_mm512_castsi256_si512(rlo), rhi), mask)
    };
    for s in 0..len / 32 {
        let ((x, mx), (y, my)) = (rounded(n, s), rounded(b, s));
        not_f16 |= mx | my;
        let (_, n1, c1, c5) = step(x, y, &k, &mut max_re);
        nan |= n1;
        lt1 += u64::from(c1.count_ones());
        lt5 += u64::from(c5.count_ones());
    }
    let mut lanes = [0u16; 32];
    // SAFETY: `lanes` is 64 writable bytes; storeu takes an unaligned pointer; AVX-512F is enabled here.
    unsafe { _mm512_storeu_si512(lanes.as_mut_ptr().cast(), max_re) };
    let max = lanes.iter().map(|&h| accutrace_formats::tensor::half_bits::f16_to_f32(h));
    let vectors = ReF16 {
        max_re: max.fold(0.0f32, |m, v| if v > m { v } else { m }),
        re_nan: nan != 0,
        lt1,
        lt5,
        not_f16: not_f16 != 0,
    };
    let tail = len / 32 * 32;
    vectors.merge(portable(&n[tail..len], &b[tail..len], thresholds))
}
