//! The AVX-512 build of msprobe's pass over fp16 pairs ([`super::probe_of_f16_values`],
//! [`super::probe_of_f16_bytes`]): sixteen pairs a step, where the AVX2 build ([`super::f16c`]) takes eight.
//!
//! The same bits as that build and as the fused pass's lanes. The f64 sums keep their eight lanes: of the
//! sixteen pairs of step `k`, pairs `16k..16k + 8` are added to lanes 0-7 first, then pairs
//! `16k + 8..16k + 16`, which is the order the lanes see them in groups of eight; products and sums are
//! rounded one by one (no fused multiply-add). The relative errors' figures (their maximum, NaN, the counts
//! below the thresholds) do not depend on which lane a pair went to, so they run in sixteen lanes.

use super::super::kernel::F16_EPSILON;
use super::super::sums::MsprobeSums;
use super::lanes::ProbeLanes;
use std::arch::x86_64::*;

/// Rounds each lane to the nearest f16 value (ties to even, by the immediate) and widens it back.
macro_rules! round {
    ($v:expr) => {
        _mm512_cvtph_ps(_mm512_cvtps_ph::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>($v))
    };
}

/// [`super::probe_of_f16_values`] on a CPU with AVX-512 (F, DQ, BW, VL).
#[target_feature(enable = "avx2,f16c,avx512f,avx512dq,avx512bw,avx512vl")]
pub(super) fn probe_of_f16_values(n: &[f32], b: &[f32], thresholds: (f32, f32)) -> MsprobeSums {
    let sixteen = |v: &[f32], k: usize| {
        // SAFETY: `probe` asks for k < len / 16 (len: the shorter side): 16 f32 from 16k; loadu: unaligned.
        unsafe { _mm512_loadu_ps(v.as_ptr().add(16 * k)) }
    };
    probe(n.len().min(b.len()), |k| (sixteen(n, k), sixteen(b, k)), |i| (n[i], b[i]), thresholds)
}

/// [`super::probe_of_f16_bytes`] on a CPU with AVX-512 (F, DQ, BW, VL).
#[target_feature(enable = "avx2,f16c,avx512f,avx512dq,avx512bw,avx512vl")]
pub(super) fn probe_of_f16_bytes(n: &[u8], b: &[u8], thresholds: (f32, f32)) -> MsprobeSums {
    use accutrace_formats::tensor::half_bits::f16_to_f32;
    let sixteen = |v: &[u8], k: usize| {
        // SAFETY: `probe` asks for k < len / 16 (len: the shorter side): 32 bytes from 32k; unaligned.
        unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(v.as_ptr().add(32 * k).cast::<__m256i>())) }
    };
    let one = |v: &[u8], i: usize| f16_to_f32(u16::from_le_bytes([v[2 * i], v[2 * i + 1]]));
    probe(
        n.len().min(b.len()) / 2,
        |k| (sixteen(n, k), sixteen(b, k)),
        |i| (one(n, i), one(b, i)),
        thresholds,
    )
}

/// The eight f64 lanes of msprobe's sums.
pub(super) struct Sums {
    pub(super) dot: __m512d,
    pub(super) nn: __m512d,
    pub(super) bb: __m512d,
    pub(super) dd: __m512d,
    pub(super) max_abs: __m512d,
}

impl Sums {
    /// Eight pairs added, pair `i` to lane `i`, each operation the lanes' own. The products of two f32
    /// values are exact in f64 (24 + 24 significant bits, exponents far inside f64's), so a fused
    /// multiply-add rounds once where the product and the sum rounded twice, to the same bits: one
    /// instruction for two (#18: the sums were two thirds of the pass over fp16 bytes). The difference
    /// of two f32 values is not always exact in f64, nor its square: `dd` keeps its two roundings.
    #[target_feature(enable = "avx512f")]
    pub(super) fn add(&mut self, x: __m256, y: __m256) {
        let (x, y) = (_mm512_cvtps_pd(x), _mm512_cvtps_pd(y));
        self.dot = _mm512_fmadd_pd(x, y, self.dot);
        self.nn = _mm512_fmadd_pd(x, x, self.nn);
        self.bb = _mm512_fmadd_pd(y, y, self.bb);
        let d = _mm512_sub_pd(x, y);
        self.dd = _mm512_add_pd(self.dd, _mm512_mul_pd(d, d));
        // max_pd(a, b) is `a > b ? a : b`, the lanes' select.
        self.max_abs = _mm512_max_pd(_mm512_abs_pd(d), self.max_abs);
    }

    /// The lanes' sums as arrays, with the pass's other figures: what `ProbeLanes::finish` folds.
    #[target_feature(enable = "avx512f")]
    pub(super) fn lanes(&self, max_re: [f32; 8], re_nan: bool, (lt_one, lt_five): (u64, u64)) -> ProbeLanes {
        ProbeLanes {
            dot: f64s(self.dot),
            nn: f64s(self.nn),
            bb: f64s(self.bb),
            dd: f64s(self.dd),
            max_abs: f64s(self.max_abs),
            max_re,
            re_nan,
            lt_one,
            lt_five,
        }
    }
}

/// A vector of f64 lanes as an array.
#[target_feature(enable = "avx512f")]
fn f64s(v: __m512d) -> [f64; 8] {
    let mut out = [0.0f64; 8];
    // SAFETY: `out` is 8 writable f64; storeu takes an unaligned pointer; AVX-512F is enabled here.
    unsafe { _mm512_storeu_pd(out.as_mut_ptr(), v) };
    out
}

/// The sum of a vector of u32 counts.
#[target_feature(enable = "avx512f")]
fn count(v: __m512i) -> u64 {
    let mut out = [0u32; 16];
    // SAFETY: `out` is 64 writable bytes; storeu takes an unaligned pointer; AVX-512F is enabled here.
    unsafe { _mm512_storeu_si512(out.as_mut_ptr().cast::<__m512i>(), v) };
    out.iter().map(|&c| u64::from(c)).sum()
}

/// `f16c::probe` sixteen pairs a step: `block(k)` gives pairs `16k..16k + 16` of the `len` (both sides
/// hold at least that many: the loads rely on it), `one(i)` pair `i` of the last fewer than sixteen.
#[target_feature(enable = "avx2,f16c,avx512f,avx512dq,avx512bw,avx512vl")]
fn probe(
    len: usize,
    block: impl Fn(usize) -> (__m512, __m512),
    one: impl Fn(usize) -> (f32, f32),
    (t1, t5): (f32, f32),
) -> MsprobeSums {
    let zero = _mm512_setzero_ps();
    let eps = _mm512_set1_ps(F16_EPSILON);
    let (t1v, t5v, ones) = (_mm512_set1_ps(t1), _mm512_set1_ps(t5), _mm512_set1_epi32(1));
    let z64 = _mm512_setzero_pd();
    let mut sums = Sums { dot: z64, nn: z64, bb: z64, dd: z64, max_abs: z64 };
    let (mut max_re, mut nan) = (zero, 0 as __mmask16);
    let (mut c1, mut c5) = (_mm512_setzero_si512(), _mm512_setzero_si512());
    for k in 0..len / 16 {
        let (x, y) = block(k);
        // The first eight pairs, then the last eight: the order each lane sees them in.
        sums.add(_mm512_castps512_ps256(x), _mm512_castps512_ps256(y));
        sums.add(_mm512_extractf32x8_ps::<1>(x), _mm512_extractf32x8_ps::<1>(y));
        // rel_err_of_f16_values as the AVX2 build computes it: eps for a zero bench (and rounded eps added
        // to the target there), the difference and the quotient each rounded to f16, then |.|.
        let z = _mm512_cmp_ps_mask::<_CMP_EQ_OQ>(y, zero);
        let bq = _mm512_mask_blend_ps(z, y, eps);
        let nq = _mm512_mask_blend_ps(z, x, round!(_mm512_add_ps(x, eps)));
        let re = _mm512_abs_ps(round!(_mm512_div_ps(round!(_mm512_sub_ps(nq, bq)), bq)));
        // max_ps(a, b) is `a > b ? a : b`: a NaN relative error leaves the maximum as it was.
        max_re = _mm512_max_ps(re, max_re);
        nan |= _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(re, re);
        c1 = _mm512_mask_add_epi32(c1, _mm512_cmp_ps_mask::<_CMP_LT_OQ>(re, t1v), c1, ones);
        c5 = _mm512_mask_add_epi32(c5, _mm512_cmp_ps_mask::<_CMP_LT_OQ>(re, t5v), c5, ones);
    }
    // Sixteen maxima to eight (no NaN among them): the maximum of all is the same.
    let mut res = [0.0f32; 16];
    // SAFETY: `res` is 16 writable f32; storeu takes an unaligned pointer; AVX-512F is enabled here.
    unsafe { _mm512_storeu_ps(res.as_mut_ptr(), max_re) };
    let max_re = std::array::from_fn(|l| if res[l + 8] > res[l] { res[l + 8] } else { res[l] });
    let vectors = sums.lanes(max_re, nan != 0, (count(c1), count(c5)));
    vectors.finish(len / 16 * 16, len, one, (t1, t5))
}
