//! msprobe's relative error in f16 ([`RePrecision::F16`](super::RePrecision::F16): fp16 pairs) over a chunk,
//! with each rounding to f16 done by the CPU's own conversion where it has one: F16C's `vcvtps2ph` (round
//! to nearest even) and `vcvtph2ps` back, two instructions per 8 values, instead of
//! [`round_to_f16`](super::kernel::round_to_f16)'s fifteen integer and float operations. The fused pass
//! (`fused.rs`) runs it beside its f64 sums when it also forms msaccucmp's sums, on x86_64 at
//! [`Level::Avx2`](accutrace_formats::simd::Level::Avx2) and above; with msprobe's metrics alone it runs
//! [`probe_of_f16_values`] instead, its whole loop written with the hardware's rounding; everywhere else
//! (the portable and SSE2 builds, aarch64, pairs with inf/NaN) it computes the same in its own lanes.
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

use super::kernel::rel_err_f16;
use super::sums::MsprobeSums;

/// The fused pass's relative-error figures of a chunk (see the module's doc).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct ReF16 {
    /// The largest relative error that is not NaN; 0 when there is none.
    pub max_re: f32,
    /// Some relative error is NaN.
    pub re_nan: bool,
    /// How many are below msprobe's thresholds (`t1`, `t5`).
    pub lt1: u64,
    pub lt5: u64,
    /// Some value of either side is not an f16 value (its rounding to f16 is another number, or NaN).
    pub not_f16: bool,
}

// Only the x86_64 build runs the hardware pass, which uses these (aarch64 has no stable f16 conversion
// intrinsics in Rust yet: its fused lanes round in software).
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
impl ReF16 {
    const EMPTY: ReF16 = ReF16 { max_re: 0.0, re_nan: false, lt1: 0, lt5: 0, not_f16: false };

    fn merge(self, o: ReF16) -> ReF16 {
        ReF16 {
            max_re: if o.max_re > self.max_re { o.max_re } else { self.max_re },
            re_nan: self.re_nan || o.re_nan,
            lt1: self.lt1 + o.lt1,
            lt5: self.lt5 + o.lt5,
            not_f16: self.not_f16 || o.not_f16,
        }
    }
}

/// [`ReF16`] of a pair one element at a time with [`rel_err_f16`]: the reference, and the tail past the last
/// whole vector.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) fn portable(n: &[f32], b: &[f32], (t1, t5): (f32, f32)) -> ReF16 {
    use super::kernel::round_to_f16 as r;
    let mut out = ReF16::EMPTY;
    for (&x, &y) in n.iter().zip(b) {
        let re = rel_err_f16(x, y);
        out.max_re = if re > out.max_re { re } else { out.max_re };
        out.re_nan |= re.is_nan();
        out.lt1 += u64::from(re < t1);
        out.lt5 += u64::from(re < t5);
        out.not_f16 |= r(x) != x || r(y) != y;
    }
    out
}

/// msprobe's sums of a pair of f16 values (equal lengths, fewer than 2^32 elements: one chunk of the fused
/// pass), relative error in f16, through the CPU's f16 conversion when it has one and the current
/// [`simd::level`](accutrace_formats::simd::level) allows it; `None` otherwise. The same bits as the fused
/// pass's own lanes (`fused::chunk` without msaccucmp's sums: the same f64 lanes, operations and order, and
/// [`rel_err_of_f16_values`](super::kernel::rel_err_of_f16_values) with the hardware's rounding), for any
/// input; only the work differs: the roundings were two thirds of that pass's instructions.
pub(crate) fn probe_of_f16_values(n: &[f32], b: &[f32], thresholds: (f32, f32)) -> Option<MsprobeSums> {
    debug_assert_eq!(n.len(), b.len());
    #[cfg(target_arch = "x86_64")]
    if accutrace_formats::simd::level() >= accutrace_formats::simd::Level::Avx2 {
        // SAFETY: level() reports Avx2 only when this CPU has AVX2 and F16C (simd::detect).
        return Some(unsafe { f16c::probe_of_f16_values(n, b, thresholds) });
    }
    let _ = (n, b, thresholds);
    None
}

/// [`probe_of_f16_values`] of a pair given as fp16 bytes (little-endian, equal lengths, even): each value
/// widened in the loop as it is read, where the pair as f32 would first be written out and read back.
pub(crate) fn probe_of_f16_bytes(n: &[u8], b: &[u8], thresholds: (f32, f32)) -> Option<MsprobeSums> {
    debug_assert!(n.len() == b.len() && n.len().is_multiple_of(2));
    #[cfg(target_arch = "x86_64")]
    if accutrace_formats::simd::level() >= accutrace_formats::simd::Level::Avx2 {
        // SAFETY: level() reports Avx2 only when this CPU has AVX2 and F16C (simd::detect).
        return Some(unsafe { f16c::probe_of_f16_bytes(n, b, thresholds) });
    }
    let _ = (n, b, thresholds);
    None
}

/// [`ReF16`] of a pair (equal lengths) through the CPU's f16 conversion, when it has one and the current
/// [`simd::level`](accutrace_formats::simd::level) allows it; `None` otherwise.
pub(crate) fn by_hardware(n: &[f32], b: &[f32], thresholds: (f32, f32)) -> Option<ReF16> {
    debug_assert_eq!(n.len(), b.len());
    #[cfg(target_arch = "x86_64")]
    if accutrace_formats::simd::level() >= accutrace_formats::simd::Level::Avx2 {
        // SAFETY: level() reports Avx2 only when this CPU has AVX2 and F16C (simd::detect).
        return Some(unsafe { f16c::re_f16(n, b, thresholds) });
    }
    let _ = (n, b, thresholds);
    None
}

#[cfg(target_arch = "x86_64")]
mod f16c {
    use super::super::kernel::F16_EPSILON;
    use super::{MsprobeSums, ReF16};
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
            let differs =
                _mm256_or_ps(_mm256_cmp_ps::<_CMP_NEQ_UQ>(xh, x), _mm256_cmp_ps::<_CMP_NEQ_UQ>(yh, y));
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
        vectors.merge(super::portable(xt, yt, (t1, t5)))
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
            Lanes64(
                _mm256_cvtps_pd(_mm256_castps256_ps128(v)),
                _mm256_cvtps_pd(_mm256_extractf128_ps::<1>(v)),
            )
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
        probe(
            n.len().min(b.len()) / 2,
            |k| (eight(n, k), eight(b, k)),
            |i| (one(n, i), one(b, i)),
            thresholds,
        )
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
        use super::super::kernel::{hmax, hsum, rel_err_of_f16_values};
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
        let (mut dot, mut nn, mut bb, mut dd) = (dot.lanes(), nn.lanes(), bb.lanes(), dd.lanes());
        let (mut max_abs, mut max_re) = (max_abs.lanes(), lanes(max_re));
        let (mut re_nan, mut lt_one, mut lt_five) = (_mm256_movemask_ps(nan) != 0, counts(c1), counts(c5));
        for (l, i) in (len / 8 * 8..len).enumerate() {
            let (x, y) = one(i);
            let (xd, yd) = (f64::from(x), f64::from(y));
            dot[l] += xd * yd;
            nn[l] += xd * xd;
            bb[l] += yd * yd;
            let d = xd - yd;
            dd[l] += d * d;
            max_abs[l] = if d.abs() > max_abs[l] { d.abs() } else { max_abs[l] };
            let re = rel_err_of_f16_values(x, y);
            max_re[l] = if re > max_re[l] { re } else { max_re[l] };
            re_nan |= re.is_nan();
            lt_one += u64::from(re < t1);
            lt_five += u64::from(re < t5);
        }
        let (nn, bb) = (hsum(&nn), hsum(&bb));
        MsprobeSums {
            len: len as u64,
            dot: hsum(&dot),
            nn,
            bb,
            dd: hsum(&dd),
            max_abs: hmax(&max_abs),
            max_re: hmax(&max_re.map(f64::from)),
            re_nan,
            lt_one,
            lt_five,
            nonfinite: !(nn.is_finite() && bb.is_finite()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use accutrace_formats::simd::{self, Level};

    /// The hardware's rounding (the value in every lane) against `round_to_f16` (itself tested
    /// against the `half` crate), on the bit patterns `round_to_f16_equals_half` takes: every exponent,
    /// every mantissa bit f16 keeps, the ties and their neighbours, and a prime stride.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_hardware_rounds_as_round_to_f16() {
        if simd::detected() < Level::Avx2 {
            return;
        }
        let check = |bits: u32| {
            let x = f32::from_bits(bits);
            // SAFETY: the CPU has AVX2 and F16C (checked above).
            let (got, want) = (unsafe { f16c::round_one(x) }, super::super::kernel::round_to_f16(x));
            assert!(got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()), "{bits:#010x}");
        };
        super::super::kernel::f16_rounding_probes().for_each(check);
    }

    /// Pairs that reach every branch of the relative error: f16 values and values between them, zero and
    /// signed-zero benches, subnormals, values that overflow f16, infinities and NaN.
    fn pair(len: usize, seed: u64) -> (Vec<f32>, Vec<f32>) {
        use accutrace_formats::tensor::half_bits::f16_to_f32;
        let mut state = seed;
        let mut next = || {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (state >> 32) as u32
        };
        let value = |r: u32| match r % 13 {
            0 => 0.0,
            1 => -0.0,
            2 => f16_to_f32((r >> 8) as u16 & 0x83FF), // subnormal or zero
            3 => 65504.0 * (1.0 + (r >> 8) as f32 / 1e7),
            4 => f32::from_bits(r >> 4), // tiny to moderate, rarely f16
            5 => [f32::INFINITY, f32::NEG_INFINITY, f32::NAN][(r >> 8) as usize % 3],
            6 => (r >> 8) as f32 * 1e-9,
            _ => f16_to_f32((r >> 8) as u16 & 0x7BFF | ((r & 0x80) as u16) << 8),
        };
        (0..len).map(|_| (value(next()), value(next()))).unzip()
    }

    /// The hardware's msprobe sums against the fused pass's own lanes (its baseline build, which rounds
    /// in software), bit for bit, on pairs with every branch of the relative error, inf and NaN (whose
    /// sums are void but still the same bits, NaN for NaN), lengths with and without a ragged end; on
    /// finite pairs whose sums show each value's lane; and on a chunk of plain f16 activations.
    #[test]
    fn the_hardware_probe_sums_are_the_fused_lanes() {
        let thresholds = {
            let (t1, t5) = super::super::RePrecision::F16.thresholds();
            (t1 as f32, t5 as f32)
        };
        // A NaN sum's sign and payload depend on which NaN an addition passes on; no figure reads them.
        let bits = |s: &MsprobeSums| {
            let f = |v: f64| if v.is_nan() { f64::NAN.to_bits() } else { v.to_bits() };
            let sums = [f(s.dot), f(s.nn), f(s.bb), f(s.dd), f(s.max_abs), f(s.max_re)];
            (s.len, sums, s.re_nan, s.lt_one, s.lt_five, s.nonfinite)
        };
        let activations = {
            use accutrace_formats::tensor::half_bits::f16_to_f32;
            let (n, b): (Vec<f32>, Vec<f32>) = (0..65_536u32)
                .map(|i| {
                    let h = (i.wrapping_mul(2_654_435_761) >> 16) as u16 & 0xBBFF;
                    (f16_to_f32(h), f16_to_f32(h ^ (i % 3) as u16))
                })
                .unzip();
            (n, b)
        };
        let mut cases: Vec<(Vec<f32>, Vec<f32>)> = vec![activations];
        // Finite f16 values of every exponent, with ragged ends: sums that show which lane each value went
        // to (a lane's sum rounds differently with another value in it).
        for len in (1..=8).map(|r| 1000 + r) {
            cases.extend((0..8u64).map(|seed| {
                let (n, b) = pair(len, seed * 13 + len as u64);
                let finite = |v: f32| if v.is_finite() && v.abs() <= 65504.0 { v } else { 1.5 };
                (n.into_iter().map(finite).collect(), b.into_iter().map(finite).collect())
            }));
        }
        for len in [0, 1, 7, 8, 9, 100, 4099] {
            cases.extend((0..20u64).map(|seed| pair(len, seed * 11 + len as u64)));
        }
        for (n, b) in &cases {
            let want = simd::with_ceiling(Level::Baseline, || {
                super::super::fused::msprobe_chunk::<false, true>(n, b)
            });
            let got = simd::with_ceiling(Level::Avx2, || probe_of_f16_values(n, b, thresholds));
            assert_eq!(got.is_some(), cfg!(target_arch = "x86_64") && simd::detected() >= Level::Avx2);
            if let Some(got) = got {
                assert_eq!(bits(&got), bits(&want), "{} values", n.len());
            }
        }
    }

    /// The pass over fp16 bytes against the pass over their values, bit for bit (NaN for NaN), on the
    /// same pairs rounded to f16 (inf, NaN, zeros, subnormals among them), with and without a ragged end.
    #[test]
    fn fp16_bytes_give_the_sums_of_their_values() {
        use accutrace_formats::tensor::half_bits::f16_to_f32;
        let thresholds = {
            let (t1, t5) = super::super::RePrecision::F16.thresholds();
            (t1 as f32, t5 as f32)
        };
        let f = |v: f64| if v.is_nan() { f64::NAN.to_bits() } else { v.to_bits() };
        let bits = |s: &MsprobeSums| {
            let sums = [f(s.dot), f(s.nn), f(s.bb), f(s.dd), f(s.max_abs), f(s.max_re)];
            (s.len, sums, s.re_nan, s.lt_one, s.lt_five, s.nonfinite)
        };
        for len in [0, 1, 7, 8, 9, 100, 4099, 65_536] {
            for seed in 0..6u64 {
                let (n, b) = pair(len, seed * 17 + len as u64);
                let halves =
                    |v: &[f32]| -> Vec<u16> { v.iter().map(|&x| half::f16::from_f32(x).to_bits()).collect() };
                let (hn, hb) = (halves(&n), halves(&b));
                let bytes = |h: &[u16]| h.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>();
                let values = |h: &[u16]| h.iter().map(|&v| f16_to_f32(v)).collect::<Vec<f32>>();
                // Under a ceiling: another test's lowered one would otherwise take the hardware away from
                // one call and not the other (the ceiling is the process's).
                let (want, got) = simd::with_ceiling(Level::Avx2, || {
                    let want = probe_of_f16_values(&values(&hn), &values(&hb), thresholds);
                    (want, probe_of_f16_bytes(&bytes(&hn), &bytes(&hb), thresholds))
                });
                assert_eq!(got.is_some(), want.is_some());
                if let (Some(got), Some(want)) = (got, want) {
                    assert_eq!(bits(&got), bits(&want), "{len} values, seed {seed}");
                }
            }
        }
    }

    #[test]
    fn every_level_gives_the_portable_figures() {
        let thresholds = {
            let (t1, t5) = super::super::RePrecision::F16.thresholds();
            (t1 as f32, t5 as f32)
        };
        for len in [0, 1, 7, 8, 9, 100, 4099] {
            for seed in 0..20u64 {
                let (n, b) = pair(len, seed * 7 + len as u64);
                let want = portable(&n, &b, thresholds);
                for level in simd::available() {
                    let got = simd::with_ceiling(level, || by_hardware(&n, &b, thresholds));
                    let hardware = cfg!(target_arch = "x86_64") && level >= Level::Avx2;
                    assert_eq!(got.is_some(), hardware, "{level:?}");
                    if let Some(got) = got {
                        assert_eq!(
                            got.max_re.to_bits(),
                            want.max_re.to_bits(),
                            "len {len} seed {seed} {level:?}"
                        );
                        assert_eq!(got, want, "len {len} seed {seed} {level:?}");
                    }
                }
                // Every pair of this length in one vector each: each value's own figures.
                if len == 8 {
                    for i in 0..8 {
                        let one = portable(&n[i..=i], &b[i..=i], thresholds);
                        let (mut n1, mut b1) = (vec![1.0f32; 8], vec![1.0f32; 8]);
                        (n1[i], b1[i]) = (n[i], b[i]);
                        for level in simd::available() {
                            if let Some(got) = simd::with_ceiling(level, || by_hardware(&n1, &b1, thresholds))
                            {
                                assert_eq!(got.max_re.to_bits(), one.max_re.to_bits(), "{i} {level:?}");
                                assert_eq!(
                                    (got.re_nan, got.not_f16),
                                    (one.re_nan, one.not_f16),
                                    "{i} {level:?}"
                                );
                                assert_eq!((got.lt1, got.lt5), (one.lt1 + 7, one.lt5 + 7), "{i} {level:?}");
                            }
                        }
                    }
                }
            }
        }
    }
}
