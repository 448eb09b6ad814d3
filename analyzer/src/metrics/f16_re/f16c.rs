//! The AVX2 + F16C builds of [`super`]'s passes.

use super::super::kernel::F16_EPSILON;
use super::super::sums::MsprobeSums;
use super::lanes::{portable, ProbeLanes, ReF16};
use std::arch::x86_64::*;

/// Rounds each lane to the nearest f16 value (ties to even; the immediate, not MXCSR, picks the mode)
/// and widens it back.
macro_rules! round {
    ($v:expr) => {
        _mm256_cvtph_ps(_mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>($v))
    };
}

/// One value's rounding through [`round!`], for the tests.
#[cfg(test)]
#[target_feature(enable = "avx2,f16c")]
pub(super) fn round_one(v: f32) -> f32 {
    _mm256_cvtss_f32(round!(_mm256_set1_ps(v)))
}

/// The lanes of a vector of f32.
#[target_feature(enable = "avx")]
fn lanes(v: __m256) -> [f32; 8] {
    let mut out = [0.0f32; 8];
    // SAFETY: `out` is 8 writable f32; storeu takes an unaligned pointer; AVX is enabled here.
    unsafe { _mm256_storeu_ps(out.as_mut_ptr(), v) };
    out
}

/// The lanes of a vector of u32 counts.
#[target_feature(enable = "avx")]
fn counts(v: __m256i) -> u64 {
    let mut out = [0u32; 8];
    // SAFETY: `out` is 32 writable bytes; storeu takes an unaligned pointer; AVX is enabled here.
    unsafe { _mm256_storeu_si256(out.as_mut_ptr().cast::<__m256i>(), v) };
    out.iter().map(|&c| u64::from(c)).sum()
}

/// [`super::by_hardware`] on a CPU with AVX2 and F16C. Lanes count in u32, so the pair goes through in
/// pieces of at most 2^32 vectors' worth (far more than one chunk of the fused pass).
#[target_feature(enable = "avx2,f16c")]
pub(super) fn re_f16(n: &[f32], b: &[f32], (t1, t5): (f32, f32)) -> ReF16 {
    const PIECE: usize = 1 << 30;
    let mut out = ReF16::EMPTY;
    for (n, b) in n.chunks(PIECE).zip(b.chunks(PIECE)) {
        out = out.merge(piece(n, b, (t1, t5)));
    }
    out
}

#[target_feature(enable = "avx2,f16c")]
fn piece(n: &[f32], b: &[f32], (t1, t5): (f32, f32)) -> ReF16 {
    let zero = _mm256_setzero_ps();
    let eps = _mm256_set1_ps(F16_EPSILON);
    let abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFF_FFFF));
    let (t1v, t5v) = (_mm256_set1_ps(t1), _mm256_set1_ps(t5));
    let (mut max, mut nan, mut bad) = (zero, zero, zero);
    let (mut c1, mut c5) = (_mm256_setzero_si256(), _mm256_setzero_si256());
    let (xs, ys) = (n.chunks_exact(8), b.chunks_exact(8));
    let (xt, yt) = (xs.remainder(), ys.remainder());
    for (x, y) in xs.zip(ys) {
        // SAFETY: chunks_exact(8) gives 8 readable f32 on each side; loadu takes unaligned pointers.
        let (x, y) = unsafe { (_mm256_loadu_ps(x.as_ptr()), _mm256_loadu_ps(y.as_ptr())) };
        // rel_err_f16, operation for operation (kernel.rs): both sides rounded to f16, eps for a bench
        // that rounds to zero (and eps added to the target there), the difference and the quotient
        // each rounded to f16, then |.|.
        let (xh, yh) = (round!(x), round!(y));
        let differs = _mm256_or_ps(_mm256_cmp_ps::<_CMP_NEQ_UQ>(xh, x), _mm256_cmp_ps::<_CMP_NEQ_UQ>(yh, y));
        bad = _mm256_or_ps(bad, differs);
        let z = _mm256_cmp_ps::<_CMP_EQ_OQ>(yh, zero);
        let bb = _mm256_blendv_ps(yh, eps, z);
        let nn = _mm256_blendv_ps(xh, round!(_mm256_add_ps(xh, eps)), z);
        let q = round!(_mm256_div_ps(round!(_mm256_sub_ps(nn, bb)), bb));
        let re = _mm256_and_ps(q, abs);
        // max_ps(a, b) is `a > b ? a : b`: a NaN relative error leaves the maximum as it was.
        max = _mm256_max_ps(re, max);
        nan = _mm256_or_ps(nan, _mm256_cmp_ps::<_CMP_UNORD_Q>(re, re));
        // A true comparison is all ones, -1 as an integer: subtracting it counts one.
        c1 = _mm256_sub_epi32(c1, _mm256_castps_si256(_mm256_cmp_ps::<_CMP_LT_OQ>(re, t1v)));
        c5 = _mm256_sub_epi32(c5, _mm256_castps_si256(_mm256_cmp_ps::<_CMP_LT_OQ>(re, t5v)));
    }
    let max = lanes(max).into_iter().fold(0.0f32, |m, v| if v > m { v } else { m });
    let vectors = ReF16 {
        max_re: max,
        re_nan: _mm256_movemask_ps(nan) != 0,
        lt1: counts(c1),
        lt5: counts(c5),
        not_f16: _mm256_movemask_ps(bad) != 0,
    };
    vectors.merge(portable(xt, yt, (t1, t5)))
}

/// Two vectors of four f64: the fused pass's eight f64 lanes, lanes 0-3 and 4-7.
#[derive(Clone, Copy)]
struct Lanes64(__m256d, __m256d);

/// An intrinsic of two `__m256d` applied to both halves of two [`Lanes64`].
macro_rules! both {
    ($f:ident($a:expr, $b:expr)) => {{
        let (a, b) = ($a, $b);
        Lanes64($f(a.0, b.0), $f(a.1, b.1))
    }};
}

impl Lanes64 {
    #[target_feature(enable = "avx")]
    fn zero() -> Lanes64 {
        Lanes64(_mm256_setzero_pd(), _mm256_setzero_pd())
    }

    /// Each of eight f32 widened, lane for lane.
    #[target_feature(enable = "avx")]
    fn widen(v: __m256) -> Lanes64 {
        Lanes64(_mm256_cvtps_pd(_mm256_castps256_ps128(v)), _mm256_cvtps_pd(_mm256_extractf128_ps::<1>(v)))
    }

    #[target_feature(enable = "avx")]
    fn lanes(self) -> [f64; 8] {
        let mut out = [0.0f64; 8];
        // SAFETY: `out` is 8 writable f64; storeu takes unaligned pointers; AVX is enabled here.
        unsafe {
            _mm256_storeu_pd(out.as_mut_ptr(), self.0);
            _mm256_storeu_pd(out.as_mut_ptr().add(4), self.1);
        }
        out
    }
}

/// [`super::probe_of_f16_values`] on a CPU with AVX2 and F16C.
#[target_feature(enable = "avx2,f16c")]
pub(super) fn probe_of_f16_values(n: &[f32], b: &[f32], thresholds: (f32, f32)) -> MsprobeSums {
    let eight = |v: &[f32], k: usize| {
        // SAFETY: `probe` asks for k < len / 8 (len: the shorter side): 8 f32 from 8k; loadu: unaligned.
        unsafe { _mm256_loadu_ps(v.as_ptr().add(8 * k)) }
    };
    probe(n.len().min(b.len()), |k| (eight(n, k), eight(b, k)), |i| (n[i], b[i]), thresholds)
}

/// [`super::probe_of_f16_bytes`] on a CPU with AVX2 and F16C.
#[target_feature(enable = "avx2,f16c")]
pub(super) fn probe_of_f16_bytes(n: &[u8], b: &[u8], thresholds: (f32, f32)) -> MsprobeSums {
    use accutrace_formats::tensor::half_bits::f16_to_f32;
    let eight = |v: &[u8], k: usize| {
        // SAFETY: `probe` asks for k < len / 8 (len: the shorter side): 16 bytes from 16k; unaligned.
        unsafe { _mm256_cvtph_ps(_mm_loadu_si128(v.as_ptr().add(16 * k).cast::<__m128i>())) }
    };
    let one = |v: &[u8], i: usize| f16_to_f32(u16::from_le_bytes([v[2 * i], v[2 * i + 1]]));
    probe(n.len().min(b.len()) / 2, |k| (eight(n, k), eight(b, k)), |i| (one(n, i), one(b, i)), thresholds)
}

/// `fused::chunk`'s loop (`ZERO`, `ACC`, `STATS` off; `F16`, `RE` on) over `len` pairs (both sides
/// hold at least that many: the loads of `group` rely on it), with the
/// hardware's rounding in [`rel_err_of_f16_values`](super::super::kernel::rel_err_of_f16_values):
/// `group(k)` gives pairs `8k..8k + 8` (element `i` of a group goes to lane `i`), `one(i)` pair `i` of
/// the ragged end (fewer than eight, to lanes 0.. one by one, as there).
#[target_feature(enable = "avx2,f16c")]
fn probe(
    len: usize,
    group: impl Fn(usize) -> (__m256, __m256),
    one: impl Fn(usize) -> (f32, f32),
    (t1, t5): (f32, f32),
) -> MsprobeSums {
    let zero = _mm256_setzero_ps();
    let eps = _mm256_set1_ps(F16_EPSILON);
    let abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFF_FFFF));
    let abs64 = _mm256_castsi256_pd(_mm256_set1_epi64x(0x7FFF_FFFF_FFFF_FFFF));
    let (t1v, t5v) = (_mm256_set1_ps(t1), _mm256_set1_ps(t5));
    let (mut dot, mut nn, mut bb, mut dd, mut max_abs) =
        (Lanes64::zero(), Lanes64::zero(), Lanes64::zero(), Lanes64::zero(), Lanes64::zero());
    let (mut max_re, mut nan) = (zero, zero);
    let (mut c1, mut c5) = (_mm256_setzero_si256(), _mm256_setzero_si256());
    for k in 0..len / 8 {
        let (x, y) = group(k);
        // The f64 sums: products and sums rounded one by one (no fused multiply-add), as the lanes do.
        let (xd, yd) = (Lanes64::widen(x), Lanes64::widen(y));
        dot = both!(_mm256_add_pd(dot, both!(_mm256_mul_pd(xd, yd))));
        nn = both!(_mm256_add_pd(nn, both!(_mm256_mul_pd(xd, xd))));
        bb = both!(_mm256_add_pd(bb, both!(_mm256_mul_pd(yd, yd))));
        let d = both!(_mm256_sub_pd(xd, yd));
        dd = both!(_mm256_add_pd(dd, both!(_mm256_mul_pd(d, d))));
        // max_pd(a, b) is `a > b ? a : b`, the lanes' select.
        max_abs = both!(_mm256_max_pd(both!(_mm256_and_pd(d, Lanes64(abs64, abs64))), max_abs));
        // rel_err_of_f16_values: eps for a zero bench (and rounded eps added to the target there),
        // the difference and the quotient each rounded to f16, then |.|.
        let z = _mm256_cmp_ps::<_CMP_EQ_OQ>(y, zero);
        let bq = _mm256_blendv_ps(y, eps, z);
        let nq = _mm256_blendv_ps(x, round!(_mm256_add_ps(x, eps)), z);
        let re = _mm256_and_ps(round!(_mm256_div_ps(round!(_mm256_sub_ps(nq, bq)), bq)), abs);
        max_re = _mm256_max_ps(re, max_re);
        nan = _mm256_or_ps(nan, _mm256_cmp_ps::<_CMP_UNORD_Q>(re, re));
        c1 = _mm256_sub_epi32(c1, _mm256_castps_si256(_mm256_cmp_ps::<_CMP_LT_OQ>(re, t1v)));
        c5 = _mm256_sub_epi32(c5, _mm256_castps_si256(_mm256_cmp_ps::<_CMP_LT_OQ>(re, t5v)));
    }
    let vectors = ProbeLanes {
        dot: dot.lanes(),
        nn: nn.lanes(),
        bb: bb.lanes(),
        dd: dd.lanes(),
        max_abs: max_abs.lanes(),
        max_re: lanes(max_re),
        re_nan: _mm256_movemask_ps(nan) != 0,
        lt_one: counts(c1),
        lt_five: counts(c5),
    };
    vectors.finish(len / 8 * 8, len, one, (t1, t5))
}
