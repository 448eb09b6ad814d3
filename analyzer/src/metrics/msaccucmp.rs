//! CANN msaccucmp's metrics (graph/op dumps), x = target, y = golden, flattened, in f64.
//!
//! One fused pass gives everything but the KL divergence: sums for cosine, errors, relative errors, the
//! per-side min/max, and shifted sums for mean and standard deviation (values minus each side's first
//! element, which keeps `Σx² - (Σx)²/n` free of cancellation when |mean| >> std and merges across chunks
//! because every chunk uses the same shift). KL needs each side min-max normalised, so it takes two more
//! passes: one for the normalised sums, one for Σ p ln(p/q) (computed directly rather than expanded, so
//! tiny divergences keep their digits), and none where the fused pass found the sides equal (KL is +0
//! there). The expanded one-pass form, (1/Σp) Σ p' ln(p'/q') + ln(Σq/Σp) over the unscaled values, was
//! measured against this one: it changed nearly every printed KL, by up to ~1e-16/KL relative
//! (cancellation of two first-order terms), see docs/bench-runs/2026-11-26-kl-pass.md.

use super::kernel::{for_lanes, hmax, hmin, hsum, reduce_chunks, Element, LANES};
use super::sums::MsaccucmpSums as Sums;
use accutrace_formats::multiversion;

/// msaccucmp's metrics of one pair.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct MsaccucmpMetrics {
    /// NaN when exactly one side is all zero.
    pub cosine_similarity: f64,
    pub max_absolute_error: f64,
    pub mean_absolute_error: f64,
    pub root_mean_square_error: f64,
    pub accumulated_relative_error: f64,
    pub relative_euclidean_distance: f64,
    pub max_relative_error: f64,
    pub mean_relative_error: f64,
    pub kullback_leibler_divergence: f64,
    /// (mean, population std) of x and of y.
    pub standard_deviation: ((f64, f64), (f64, f64)),
    /// x is fp16 and reaches its saturation limit (65504).
    pub overflow: bool,
}

impl MsaccucmpMetrics {
    /// The pass guidance: Cosine > 0.99, RED < 0.05, KL < 0.005, RMSE < 1, MeanRelativeError < 1.
    pub fn passes(&self) -> bool {
        self.cosine_similarity > 0.99
            && self.relative_euclidean_distance < 0.05
            && self.kullback_leibler_divergence < 0.005
            && self.root_mean_square_error < 1.0
            && self.mean_relative_error < 1.0
    }
}

fn chunk<X: Element, Y: Element>(x: &[X], y: &[Y], kx: f64, ky: f64) -> Sums {
    let z = [0.0f64; LANES];
    let (mut dot, mut xx, mut yy, mut sa, mut sq, mut rel) = (z, z, z, z, z, z);
    let (mut xs, mut xs2, mut ys, mut ys2) = (z, z, z, z);
    let (mut mabs, mut mrel, mut xabs) = (z, z, z);
    let (mut xmin, mut xmax) = ([f64::INFINITY; LANES], [f64::NEG_INFINITY; LANES]);
    let (mut ymin, mut ymax) = ([f64::INFINITY; LANES], [f64::NEG_INFINITY; LANES]);
    for_lanes(x, y, |l, a, b| {
        dot[l] += a * b;
        xx[l] += a * a;
        yy[l] += b * b;
        let d = a - b;
        let ad = d.abs();
        sa[l] += ad;
        sq[l] += d * d;
        mabs[l] = if ad > mabs[l] { ad } else { mabs[l] };
        // |y| > eps ? |x/y - 1| : 0 (the divide happens either way; the select keeps the loop branch-free)
        let r = (a / b - 1.0).abs();
        let r = if b.abs() > f64::EPSILON { r } else { 0.0 };
        rel[l] += r;
        mrel[l] = if r > mrel[l] { r } else { mrel[l] };
        xmin[l] = if a < xmin[l] { a } else { xmin[l] };
        xmax[l] = if a > xmax[l] { a } else { xmax[l] };
        ymin[l] = if b < ymin[l] { b } else { ymin[l] };
        ymax[l] = if b > ymax[l] { b } else { ymax[l] };
        let (sx, sy) = (a - kx, b - ky);
        xs[l] += sx;
        xs2[l] += sx * sx;
        ys[l] += sy;
        ys2[l] += sy * sy;
        let aa = a.abs();
        xabs[l] = if aa > xabs[l] { aa } else { xabs[l] };
    });
    Sums {
        len: x.len() as u64,
        dot: hsum(&dot),
        xx: hsum(&xx),
        yy: hsum(&yy),
        sum_abs: hsum(&sa),
        sum_sq: hsum(&sq),
        max_abs: hmax(&mabs),
        acc_rel: hsum(&rel),
        max_rel: hmax(&mrel),
        x_min: hmin(&xmin),
        x_max: hmax(&xmax),
        y_min: hmin(&ymin),
        y_max: hmax(&ymax),
        x_sh: hsum(&xs),
        x_sh2: hsum(&xs2),
        y_sh: hsum(&ys),
        y_sh2: hsum(&ys2),
        x_absmax: hmax(&xabs),
    }
}

/// Min-max normalised to [0, 1] and clamped to float32 epsilon; a constant side maps to epsilon. `RECIP`
/// divides through `inv` (the reciprocal of `range`) by [`div_fp16_diff`], which needs `v`, `min` and
/// `min + range` to be finite fp16 values with `min <= v <= min + range` (an [`Fp16Values`] pair).
#[inline(always)]
fn norm01<const RECIP: bool>(v: f64, min: f64, range: f64, inv: f64) -> f64 {
    let eps = f32::EPSILON as f64;
    let d = v - min;
    let q = if RECIP { div_fp16_diff(d, range, inv) } else { d / range };
    let t = if range > 0.0 { q } else { 0.0 };
    if t > eps {
        t
    } else {
        eps
    }
}

/// `a / b`, correctly rounded, through `y = 1.0 / b` for operands that are differences of fp16 values:
/// `a = u - m` and `b = M - m` for finite fp16 values `m <= u <= M`, `m < M`, all held in f64 (where
/// those differences are exact). Three f64 operations (a product, two FMAs) instead of a division, for
/// KL's four normalising divisions per element: its first pass took 0.34 instead of 0.62 ns per element
/// pair on the AVX-512 build (docs/bench-runs/2026-11-26-compare-kernels.md).
///
/// Proof that it returns `RN(a / b)`, round to nearest even in binary64 (u = 2^-53):
/// 1. fp16 values are integer multiples of 2^-24 below 2^16 in magnitude, so `a = A 2^-24` and
///    `b = B 2^-24` with integers `0 <= A <= B`, `1 <= B < 2^41`: exact in binary64.
/// 2. `A = 0`: `q0 = +0`, `r = +0`, the result `+0 = a / b`. Otherwise `x = a / b = A / B` lies in
///    `[2^-41, 1]`; let `2^E <= x < 2^(E+1)`, `-41 <= E <= 0`.
/// 3. `y = RN(1/b) = (1/b)(1 + t1)`, `q0 = RN(a y) = x (1 + t1)(1 + t2)` with `|t1|, |t2| <= u` (no
///    underflow: `1/b` lies in `(2^-17, 2^24]`). So `|q0 - x| <= x (2u + u^2) < 3 2^(E-52)`.
/// 4. `R = a - b q0` is exact in binary64, so the first FMA returns it: `q0 >= 2^(E-1)` is a multiple of
///    2^(E-53), `b q0` of 2^(E-77), and `a` too (`E <= 53`); `|R| = b |x - q0| < 3 B 2^(E-76)`, i.e.
///    fewer than `6 B < 2^44` units of 2^(E-77) (>= 2^-118, far above the subnormals).
/// 5. The second FMA rounds `v = q0 + R y` once. `R y = b (x - q0)(1/b)(1 + t1)`, so
///    `v = x + (x - q0) t1` and `|v - x| < 3 2^(E-105)`.
/// 6. RN changes value only at midpoints between neighbouring binary64 numbers. Near `x` (from 2^(E-1)
///    to 2^(E+2)) each is an integer multiple `M 2^(E-54)`, and `x - M 2^(E-54) = N 2^(E-54) / B` with
///    the integer `N = A 2^(54-E) - B M`. `N != 0`: a midpoint has an odd significand of 54 bits, which
///    would divide `A < 2^41`. So every midpoint is at least `2^(E-54) / B > 2^(E-95)` from `x`, more
///    than `|v - x|`: none lies between `x` and `v`, and `RN(v) = RN(x)`.
///
/// Tested exhaustively over the fp16 numerators of random and chosen ranges (`tests` below), and
/// through KL against the division at every build.
#[inline(always)]
pub(crate) fn div_fp16_diff(a: f64, b: f64, y: f64) -> f64 {
    let q0 = a * y;
    let r = (-q0).mul_add(b, a);
    r.mul_add(y, q0)
}

/// Evidence that both sides of a pair hold only finite fp16 values (binary16 numbers widened to f32),
/// which KL's normalisation through reciprocals needs (`div_fp16_diff`). Not a claim about dtypes: built
/// only by a pass that compared every value of both sides with its rounding to f16 ([`Fp16Values::check`],
/// or the fused pass, which does that comparison per element: `fused.rs`, or `f16_re.rs` beside it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fp16Values {
    _checked: (),
}

impl Fp16Values {
    /// `Some` when every value of `x` and `y` is a finite fp16 value.
    pub fn check(x: &[f32], y: &[f32]) -> Option<Fp16Values> {
        let exact = |v: &[f32]| v.iter().all(|&v| v.is_finite() && super::kernel::round_to_f16(v) == v);
        (exact(x) && exact(y)).then_some(Fp16Values { _checked: () })
    }

    /// From a pass over both sides that found each value equal to its f16 rounding (`rounds_exactly`) and
    /// both sums of squares finite (so no infinity passed as an fp16 value).
    pub(super) fn from_pass(rounds_exactly: bool, xx: f64, yy: f64) -> Option<Fp16Values> {
        (rounds_exactly && xx.is_finite() && yy.is_finite()).then_some(Fp16Values { _checked: () })
    }
}

/// Whether `mul_add` is one instruction at the current level: the AVX-512 build (AVX-512F brings FMA;
/// the AVX2 build is compiled without it and would call libm's software `fma`) and aarch64 (FMA is part
/// of its baseline).
fn fma_in_hardware() -> bool {
    use accutrace_formats::simd::{level, Level};
    cfg!(target_arch = "aarch64") || (cfg!(target_arch = "x86_64") && level() >= Level::Avx512)
}

/// KL(p || q) with p from x and q from y, each min-max normalised, clamped, and scaled to sum 1. With
/// `fp16` (and FMA in hardware) the normalisation divides through reciprocals ([`div_fp16_diff`]): the
/// same bits.
fn kl<X: Element, Y: Element>(x: &[X], y: &[Y], s: &Sums, fp16: Option<Fp16Values>) -> f64 {
    if let (Some(x), Some(y)) = (X::as_f32(x), Y::as_f32(y)) {
        return kl_f32(x, y, s, fp16.is_some() && fma_in_hardware());
    }
    let (sp, sq) = reduce_chunks(x, y, |a, b| kl_norm_sums::<X, Y, false>(a, b, s), add_pairs);
    let chunk = |a: &[X], b: &[Y]| kl_terms::<X, Y, false, false>(a, b, s, sp, sq).unwrap_or(0.0);
    reduce_chunks(x, y, chunk, |a, b| a + b)
}

fn add_pairs(a: (f64, f64), b: (f64, f64)) -> (f64, f64) {
    (a.0 + b.0, a.1 + b.1)
}

/// [`kl`] of f32 sides through the per-level builds; `recip` (only for [`Fp16Values`]) divides by the
/// ranges through their reciprocals.
fn kl_f32(x: &[f32], y: &[f32], s: &Sums, recip: bool) -> f64 {
    let (sp, sq) = if recip {
        reduce_chunks(x, y, |a, b| kl_norm_sums_recip_mv(a, b, s), add_pairs)
    } else {
        reduce_chunks(x, y, |a, b| kl_norm_sums_mv(a, b, s), add_pairs)
    };
    let chunk = |a: &[f32], b: &[f32]| {
        let fast =
            if recip { kl_terms_mv::<true>(a, b, s, sp, sq) } else { kl_terms_mv::<false>(a, b, s, sp, sq) };
        fast.unwrap_or_else(|| {
            let exact = if recip {
                kl_terms::<f32, f32, false, true>(a, b, s, sp, sq)
            } else {
                kl_terms::<f32, f32, false, false>(a, b, s, sp, sq)
            };
            exact.unwrap_or(0.0)
        })
    };
    reduce_chunks(x, y, chunk, |a, b| a + b)
}

/// KL's first pass: the sums of the normalised sides.
#[inline(always)]
fn kl_norm_sums<X: Element, Y: Element, const RECIP: bool>(a: &[X], b: &[Y], s: &Sums) -> (f64, f64) {
    let (xr, yr) = (s.x_max - s.x_min, s.y_max - s.y_min);
    let (xi, yi) = (1.0 / xr, 1.0 / yr);
    let (mut p, mut q) = ([0.0; LANES], [0.0; LANES]);
    for_lanes(a, b, |l, u, v| {
        p[l] += norm01::<RECIP>(u, s.x_min, xr, xi);
        q[l] += norm01::<RECIP>(v, s.y_min, yr, yi);
    });
    (hsum(&p), hsum(&q))
}

#[inline(always)]
fn kl_norm_sums_div(a: &[f32], b: &[f32], s: &Sums) -> (f64, f64) {
    kl_norm_sums::<f32, f32, false>(a, b, s)
}

#[inline(always)]
fn kl_norm_sums_recip(a: &[f32], b: &[f32], s: &Sums) -> (f64, f64) {
    kl_norm_sums::<f32, f32, true>(a, b, s)
}

/// KL's second pass: Σ p ln(p / q). `FAST` takes [`ln_fast`] (vectorisable) and reports `None` when a
/// ratio falls outside its domain (then the chunk is redone with `f64::ln`); `RECIP` normalises as
/// [`norm01`] says.
#[inline(always)]
fn kl_terms<X: Element, Y: Element, const FAST: bool, const RECIP: bool>(
    a: &[X],
    b: &[Y],
    s: &Sums,
    sp: f64,
    sq: f64,
) -> Option<f64> {
    let (xr, yr) = (s.x_max - s.x_min, s.y_max - s.y_min);
    let (xi, yi) = (1.0 / xr, 1.0 / yr);
    let mut k = [0.0; LANES];
    let mut outside = [0u32; LANES];
    for_lanes(a, b, |l, u, v| {
        let p = norm01::<RECIP>(u, s.x_min, xr, xi) / sp;
        let q = norm01::<RECIP>(v, s.y_min, yr, yi) / sq;
        let r = p / q;
        let ln = if FAST {
            outside[l] |= u32::from(!(f64::MIN_POSITIVE..=f64::MAX).contains(&r));
            ln_fast(r)
        } else {
            r.ln()
        };
        k[l] += p * ln;
    });
    (outside.iter().all(|&o| o == 0)).then(|| hsum(&k))
}

#[inline(always)]
fn kl_terms_fast<const RECIP: bool>(a: &[f32], b: &[f32], s: &Sums, sp: f64, sq: f64) -> Option<f64> {
    kl_terms::<f32, f32, true, RECIP>(a, b, s, sp, sq)
}

/// Natural logarithm of a positive, normal, finite `x`, branch-free so that LLVM vectorises the loop around
/// it (`f64::ln` is a libm call per element). musl's `log` (fdlibm's algorithm and coefficients): error
/// below 1 ulp, as glibc's; results may differ from glibc's in the last bit (tests check <= 1 ulp).
#[inline(always)]
#[allow(clippy::excessive_precision)] // fdlibm's coefficients, as published
pub(crate) fn ln_fast(x: f64) -> f64 {
    const LN2_HI: f64 = 6.93147180369123816490e-01;
    const LN2_LO: f64 = 1.90821492927058770002e-10;
    const LG1: f64 = 6.666666666666735130e-01;
    const LG2: f64 = 3.999999999940941908e-01;
    const LG3: f64 = 2.857142874366239149e-01;
    const LG4: f64 = 2.222219843214978396e-01;
    const LG5: f64 = 1.818357216161805012e-01;
    const LG6: f64 = 1.531383769920937332e-01;
    const LG7: f64 = 1.479819860511658591e-01;
    let bits = x.to_bits();
    // Reduce x to 2^k (1 + f) with 1 + f in [sqrt(2)/2, sqrt(2)).
    let hx = ((bits >> 32) as u32).wrapping_add(0x3ff00000 - 0x3fe6a09e);
    let k = (hx >> 20) as i32 - 0x3ff;
    let hx = (hx & 0x000fffff) + 0x3fe6a09e;
    let m = f64::from_bits((u64::from(hx) << 32) | (bits & 0xffffffff));
    let f = m - 1.0;
    let hfsq = 0.5 * f * f;
    let s = f / (2.0 + f);
    let z = s * s;
    let w = z * z;
    let t1 = w * (LG2 + w * (LG4 + w * LG6));
    let t2 = z * (LG1 + w * (LG3 + w * (LG5 + w * LG7)));
    let r = t2 + t1;
    let dk = f64::from(k);
    s * (hfsq + r) + dk * LN2_LO - hfsq + f + dk * LN2_HI
}

// Without the AVX-512 build: KL's first pass (two divisions and two sums per element) measured slower with it.
multiversion!(fn kl_norm_sums_mv(a: &[f32], b: &[f32], s: &Sums) -> (f64, f64) = kl_norm_sums_div, up_to Avx2);
// Through reciprocals: FMAs, which only the AVX-512 build has in hardware (`fma_in_hardware`).
multiversion!(fn kl_norm_sums_recip_mv(a: &[f32], b: &[f32], s: &Sums) -> (f64, f64) = kl_norm_sums_recip);
multiversion!(fn kl_terms_mv<const RECIP: bool>(a: &[f32], b: &[f32], s: &Sums, sp: f64, sq: f64) -> Option<f64> = kl_terms_fast);

/// All msaccucmp metrics, through the generic kernels (`metrics::measure` is the entry point that picks the
/// fused f32 pass where it applies). `x_is_fp16` enables the OverFlow flag (max |x| >= 65504).
pub fn msaccucmp_metrics<X: Element, Y: Element>(x: &[X], y: &[Y], x_is_fp16: bool) -> MsaccucmpMetrics {
    let len = x.len().min(y.len());
    if len == 0 {
        return MsaccucmpMetrics {
            cosine_similarity: f64::NAN,
            kullback_leibler_divergence: f64::NAN,
            ..Default::default()
        };
    }
    let (kx, ky) = (x[0].f64(), y[0].f64());
    let s = reduce_chunks(&x[..len], &y[..len], |a, b| chunk(a, b, kx, ky), Sums::merge);
    msaccucmp_from_sums(&x[..len], &y[..len], &s, x_is_fp16, None)
}

/// Whether the first pass found every pair equal and finite, where KL is +0 without its two passes.
///
/// `Σ |x - y|` is 0 exactly then: a NaN or infinite difference makes it NaN or infinite, a difference of
/// unequal finite values is never 0 (gradual underflow), and a sum of nonnegative values with one
/// positive term is positive. With equal sides both normalise to the same values: the minima, ranges and
/// normalised values agree but for the sign of a zero, which the clamp to eps (or a zero range) erases,
/// so the normalised sums are the same additions in the same order. Every ratio is then exactly 1, every
/// term `p ln 1` is +0 (`ln_fast(1.0)` and `f64::ln(1.0)` are +0), and KL is +0: the passes' own result
/// (`kl_of_equal_sides_is_positive_zero_at_every_level` checks that, at every build).
fn equal_sides(s: &Sums) -> bool {
    s.sum_abs == 0.0
}

/// The metrics from the first pass's sums (`x`, `y` of equal, nonzero length: KL reads them again);
/// `fp16` when that pass found every value an fp16 value.
pub(crate) fn msaccucmp_from_sums<X: Element, Y: Element>(
    x: &[X],
    y: &[Y],
    s: &Sums,
    x_is_fp16: bool,
    fp16: Option<Fp16Values>,
) -> MsaccucmpMetrics {
    let len = x.len();
    let (kx, ky) = (x[0].f64(), y[0].f64());
    let n = s.len as f64;
    let (nx, ny) = (s.xx.sqrt(), s.yy.sqrt());
    let eps = f64::EPSILON;
    let cosine_similarity = if nx <= eps && ny <= eps {
        1.0
    } else if nx <= eps || ny <= eps {
        f64::NAN
    } else {
        (s.dot / (nx * ny)).min(1.0)
    };
    let red = if ny <= eps { 0.0 } else { (s.sum_sq / s.yy).sqrt() };
    let mean_std = |sh: f64, sh2: f64, k: f64| {
        let m = sh / n;
        (k + m, (sh2 / n - m * m).max(0.0).sqrt())
    };
    MsaccucmpMetrics {
        cosine_similarity,
        max_absolute_error: s.max_abs,
        mean_absolute_error: s.sum_abs / n,
        root_mean_square_error: (s.sum_sq / n).sqrt(),
        accumulated_relative_error: s.acc_rel,
        relative_euclidean_distance: red,
        max_relative_error: s.max_rel,
        mean_relative_error: s.acc_rel / n,
        kullback_leibler_divergence: if equal_sides(s) { 0.0 } else { kl(&x[..len], &y[..len], s, fp16) },
        standard_deviation: (mean_std(s.x_sh, s.x_sh2, kx), mean_std(s.y_sh, s.y_sh2, ky)),
        overflow: x_is_fp16 && s.x_absmax >= 65504.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_values() {
        let x = [1.0, 2.0, 3.0, 4.0];
        let y = [1.0, 2.0, 3.0, 5.0];
        let m = msaccucmp_metrics(&x[..], &y[..], false);
        assert_eq!(m.max_absolute_error, 1.0);
        assert_eq!(m.mean_absolute_error, 0.25);
        assert_eq!(m.root_mean_square_error, 0.5);
        assert!((m.accumulated_relative_error - 0.2).abs() < 1e-15);
        assert!((m.mean_relative_error - 0.05).abs() < 1e-15);
        assert!((m.relative_euclidean_distance - (1.0f64 / 39.0).sqrt()).abs() < 1e-15);
        let cos = 34.0 / (30.0f64.sqrt() * 39.0f64.sqrt());
        assert!((m.cosine_similarity - cos).abs() < 1e-15);
        assert!((m.standard_deviation.0 .0 - 2.5).abs() < 1e-15);
        assert!((m.standard_deviation.0 .1 - 1.25f64.sqrt()).abs() < 1e-15);
        assert!(m.kullback_leibler_divergence > 0.0);
        assert!(!m.passes());
        let same = msaccucmp_metrics(&x[..], &x[..], false);
        assert_eq!(same.kullback_leibler_divergence, 0.0);
        assert_eq!(same.cosine_similarity, 1.0);
        assert!(same.passes());
    }

    #[test]
    fn zero_sides_and_overflow() {
        let z = [0.0f32; 4];
        let one = [1.0f32, 0.0, 0.0, 0.0];
        assert_eq!(msaccucmp_metrics(&z[..], &z[..], false).cosine_similarity, 1.0);
        assert!(msaccucmp_metrics(&one[..], &z[..], false).cosine_similarity.is_nan());
        assert_eq!(msaccucmp_metrics(&one[..], &z[..], false).relative_euclidean_distance, 0.0);
        // Zero golden elements contribute 0 relative error.
        assert_eq!(msaccucmp_metrics(&one[..], &z[..], false).max_relative_error, 0.0);
        assert!(msaccucmp_metrics(&[65504.0f32][..], &[1.0f32][..], true).overflow);
        assert!(!msaccucmp_metrics(&[65504.0f32][..], &[1.0f32][..], false).overflow);
    }

    #[test]
    fn fast_ln_is_within_one_ulp() {
        let ulps = |a: f64, b: f64| (a.to_bits() as i64 - b.to_bits() as i64).unsigned_abs();
        let mut worst = 0;
        let mut v = f64::MIN_POSITIVE;
        while v < f64::MAX / 1.37 {
            for x in [v, v * 1.0000001, v * std::f64::consts::FRAC_1_SQRT_2, v * std::f64::consts::SQRT_2] {
                if x < f64::MIN_POSITIVE {
                    continue; // outside the domain: the KL pass checks its ratios and falls back to f64::ln
                }
                worst = worst.max(ulps(ln_fast(x), x.ln()));
            }
            v *= 1.37;
        }
        let mut state = 0x9e3779b97f4a7c15u64;
        for _ in 0..1_000_000 {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let x = 0.5 + (state >> 11) as f64 / (1u64 << 53) as f64 * 1.5; // [0.5, 2): near 1 is hardest
            worst = worst.max(ulps(ln_fast(x), x.ln()));
        }
        assert!(worst <= 1, "{worst} ulps");
        assert_eq!(ln_fast(1.0), 0.0);
    }

    /// The finite fp16 values, ascending (negative zero left out: it equals zero as a numerator).
    fn fp16_ladder() -> Vec<f64> {
        use accutrace_formats::tensor::half_bits::f16_to_f32;
        let mut v: Vec<f64> = (0u16..=0xFFFF)
            .filter(|&h| h & 0x7C00 != 0x7C00 && h != 0x8000)
            .map(|h| f64::from(f16_to_f32(h)))
            .collect();
        v.sort_by(f64::total_cmp);
        v
    }

    /// `div_fp16_diff` against the division, bit for bit, for every fp16 numerator `u` in `[min, max]`, over
    /// ranges chosen for the proof's edges (the widest, the narrowest, subnormals, divisors whose
    /// significand is all ones or just above a power of two, `u` next to both ends) and random ones. The
    /// uncorrected quotient `RN(a * RN(1/b))` is wrong for some of them: without the correction this fails.
    #[test]
    fn reciprocal_division_of_fp16_differences_is_the_division() {
        let ladder = fp16_ladder();
        let (lo, hi) = (0usize, ladder.len() - 1);
        let at = |h: u16| {
            let v = f64::from(accutrace_formats::tensor::half_bits::f16_to_f32(h));
            ladder.binary_search_by(|p| p.total_cmp(&v)).expect("a finite fp16 value")
        };
        let mut ranges = vec![
            (lo, hi),                 // -65504 to 65504: the widest
            (at(0x0000), at(0x0001)), // 0 to 2^-24: the narrowest
            (at(0x0000), at(0x0400)), // the subnormals and the smallest normal
            (at(0x83FF), at(0x03FF)), // the subnormals of both signs
            (at(0xBC00), at(0x3C00)), // -1 to 1
            (at(0xFBFF), at(0xFBFE)), // -65504 to -65472
            (at(0x0000), at(0x67FF)), // 0 to 2047: a divisor of eleven ones
            (at(0xE7FF), at(0x6800)), // -2047 to 2048
            (at(0xB555), at(0x7BFF)), // -0.33325195 to 65504
            (at(0x3C00), at(0x3C01)), // 1 to 1 + 2^-10
            (at(0xC200), hi),
            (lo, at(0x3C00)),
        ];
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = |n: usize| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (state >> 33) as usize % n
        };
        for _ in 0..300 {
            let (i, j) = (next(ladder.len()), next(ladder.len()));
            if i != j {
                ranges.push((i.min(j), i.max(j)));
            }
        }
        // Narrow ranges in every binade: few numerators, divisors of every shape.
        for _ in 0..150 {
            let i = next(ladder.len() - 40);
            ranges.push((i, i + 1 + next(39)));
        }
        let (mut checked, mut naive_wrong) = (0u64, 0u64);
        for (i, j) in ranges {
            let (min, max) = (ladder[i], ladder[j]);
            let b = max - min;
            let y = 1.0 / b;
            for &u in &ladder[i..=j] {
                let a = u - min;
                let want = a / b;
                let got = div_fp16_diff(a, b, y);
                assert_eq!(got.to_bits(), want.to_bits(), "({u:e} - {min:e}) / ({max:e} - {min:e})");
                naive_wrong += u64::from((a * y).to_bits() != want.to_bits());
                checked += 1;
            }
        }
        assert!(checked > 5_000_000, "{checked}");
        assert!(naive_wrong > 0, "the uncorrected quotient was right every time: the ranges test nothing");
    }

    /// fp16 values of both signs with zeros, subnormals and +-65504.
    fn fp16_values(len: usize, seed: u64) -> Vec<f32> {
        use accutrace_formats::tensor::half_bits::f16_to_f32;
        let mut state = seed;
        (0..len)
            .map(|_| {
                state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let h = (state >> 40) as u16;
                match h % 11 {
                    0 => f16_to_f32(h & 0x8000),
                    1 => f16_to_f32(h & 0x83FF),
                    2 => f16_to_f32(0x7BFF | (h & 0x8000)),
                    _ => f16_to_f32(h & 0xBFFF),
                }
            })
            .collect()
    }

    /// KL through reciprocals equals KL through divisions bit for bit, at every build this CPU runs
    /// (below AVX-512 the FMAs are libm's, which round once as well), serial and parallel, with a side
    /// that is constant.
    #[test]
    fn kl_through_reciprocals_is_kl_through_divisions_at_every_level() {
        use super::super::kernel::PARALLEL_MIN;
        use accutrace_formats::simd;
        for (len, constant) in
            [(1, false), (9, false), (1000, false), (1000, true), (PARALLEL_MIN + 77, false)]
        {
            let x = fp16_values(len, len as u64);
            let y = if constant { vec![0.5f32; len] } else { fp16_values(len, 3 * len as u64 + 1) };
            assert!(Fp16Values::check(&x, &y).is_some());
            let s = reduce_chunks(&x, &y, |a, b| chunk(a, b, f64::from(x[0]), f64::from(y[0])), Sums::merge);
            let want = simd::with_ceiling(simd::Level::Portable, || {
                (kl_norm_sums::<f32, f32, false>(&x, &y, &s), kl_f32(&x, &y, &s, false))
            });
            for level in simd::available() {
                let got = simd::with_ceiling(level, || {
                    (kl_norm_sums_recip_mv(&x, &y, &s), kl_f32(&x, &y, &s, true), kl_f32(&x, &y, &s, false))
                });
                let bits = |v: (f64, f64)| (v.0.to_bits(), v.1.to_bits());
                assert_eq!(bits(got.0), bits(want.0), "len {len}, {level:?}");
                assert_eq!(got.1.to_bits(), want.1.to_bits(), "len {len}, {level:?}");
                assert_eq!(got.2.to_bits(), want.1.to_bits(), "len {len}, {level:?}");
            }
        }
    }

    /// The sides of a pair that [`equal_sides`] takes: equal values, zeros of either sign on either side.
    fn equal_pair(x: &[f32], seed: u64) -> Vec<f32> {
        let mut state = seed;
        x.iter()
            .map(|&v| {
                state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                if v == 0.0 && state >> 63 == 1 {
                    -v
                } else {
                    v
                }
            })
            .collect()
    }

    /// KL's passes give +0 for equal sides, which `msaccucmp_from_sums` returns without running them: at
    /// every build, serial and parallel, through divisions and reciprocals, with constant sides, zeros of
    /// both signs (the only difference the equality lets through) and values that are not fp16. A NaN or an
    /// infinity, at the same place on both sides or on one side, makes the sides unequal, in the generic
    /// kernels' sums and in the fused pass's (both builds, with and without statistics): their KL is the
    /// passes'.
    #[test]
    fn kl_of_equal_sides_is_positive_zero_at_every_level() {
        use super::super::kernel::PARALLEL_MIN;
        use super::super::{measure, Families, MetricsRequest};
        use accutrace_formats::{simd, DType};
        let mut cases: Vec<(Vec<f32>, Vec<f32>)> = Vec::new();
        for len in [1, 9, 1000, PARALLEL_MIN + 77] {
            let x = fp16_values(len, 7 * len as u64);
            let y = equal_pair(&x, len as u64);
            assert_eq!(len > 100, x.iter().zip(&y).any(|(a, b)| a.to_bits() != b.to_bits()), "{len}");
            cases.push((x, y));
            let wide: Vec<f32> = (0..len).map(|i| ((i * 7919) % 1013) as f32 * 1.0e-3 - 0.5).collect();
            cases.push((wide.clone(), wide));
        }
        cases.push((vec![0.0; 100], vec![-0.0; 100]));
        cases.push((vec![-3.5; 17], vec![-3.5; 17]));
        cases.push((vec![1.0e-40, 0.0, -1.0e-45, 3.0e38], vec![1.0e-40, -0.0, -1.0e-45, 3.0e38]));
        // Not equal sides: a NaN or an infinity at the same place on both sides (KL is still +0 there: the
        // clamp takes NaN quotients to eps), and on one side only, against 1.0 (KL > 0).
        let mut unequal = Vec::new();
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            let mut x = fp16_values(1000, 5);
            x[500] = 1.0;
            let y = x.clone();
            x[500] = bad;
            unequal.push((x.clone(), y, false));
            unequal.push((x.clone(), x, true));
        }
        for level in simd::available() {
            simd::with_ceiling(level, || {
                for (x, y) in &cases {
                    let s = reduce_chunks(
                        x,
                        y,
                        |a, b| chunk(a, b, f64::from(x[0]), f64::from(y[0])),
                        Sums::merge,
                    );
                    assert!(equal_sides(&s), "{level:?}, len {}", x.len());
                    for fp16 in [None, Fp16Values::check(x, y)] {
                        let kl = kl(&x[..], &y[..], &s, fp16);
                        assert_eq!(kl.to_bits(), 0, "{level:?}, len {}, {fp16:?}", x.len());
                        let m = msaccucmp_from_sums(&x[..], &y[..], &s, false, fp16);
                        assert_eq!(m.kullback_leibler_divergence.to_bits(), 0, "{level:?}");
                    }
                    let widened: Vec<f64> = y.iter().map(|&v| f64::from(v)).collect();
                    let m = msaccucmp_metrics(&x[..], &widened[..], false);
                    assert_eq!(m.kullback_leibler_divergence.to_bits(), 0, "{level:?}, len {}", x.len());
                }
                for (x, y, same_place) in &unequal {
                    let s = reduce_chunks(
                        x,
                        y,
                        |a, b| chunk(a, b, f64::from(x[0]), f64::from(y[0])),
                        Sums::merge,
                    );
                    assert!(!equal_sides(&s), "{level:?}");
                    let m = msaccucmp_from_sums(&x[..], &y[..], &s, false, None);
                    let kl = kl(&x[..], &y[..], &s, None);
                    assert_eq!(m.kullback_leibler_divergence.to_bits(), kl.to_bits(), "{level:?}");
                    assert_eq!(kl > 0.0, !same_place, "{level:?}: {kl:e}");
                    // Nor the fused pass's sums (both builds, with and without statistics).
                    for dtype in [DType::FLOAT16, DType::FLOAT] {
                        for stats in [false, true] {
                            let shape = [x.len() as u64];
                            let request =
                                MetricsRequest::for_pair(Families::All, (dtype, dtype), &shape, stats);
                            let m = measure(x, y, &request).msaccucmp.expect("msaccucmp's metrics");
                            assert_eq!(m.kullback_leibler_divergence.to_bits(), kl.to_bits(), "{level:?}");
                        }
                    }
                }
            });
        }
    }

    #[test]
    fn fp16_values_are_checked() {
        let x = [0.0f32, -0.0, 65504.0, 5.9604645e-8, -1.5];
        assert!(Fp16Values::check(&x, &x).is_some());
        for bad in [1.0 + f32::EPSILON, f32::INFINITY, f32::NAN, 65520.0, 1e-9] {
            let mut y = x;
            y[3] = bad;
            assert!(Fp16Values::check(&x, &y).is_none(), "{bad:e}");
            assert!(Fp16Values::check(&y, &x).is_none(), "{bad:e}");
        }
        assert!(Fp16Values::from_pass(true, 1.0, f64::INFINITY).is_none());
        assert!(Fp16Values::from_pass(false, 1.0, 1.0).is_none());
    }

    #[test]
    fn std_survives_a_large_mean() {
        let x: Vec<f64> = (0..1000).map(|i| 1e8 + (i % 2) as f64 * 1e-3).collect();
        let m = msaccucmp_metrics(&x[..], &x[..], false);
        // Exactly: half the values sit δ above the other half, so std = δ/2 (a naive two-pass reference
        // loses digits in the mean of values near 1e8; the shifted sums do not).
        let delta = (1e8 + 1e-3) - 1e8;
        assert_eq!(m.standard_deviation.0 .1, delta / 2.0, "{:?}", m.standard_deviation);
        assert!((m.standard_deviation.0 .0 - (1e8 + delta / 2.0)).abs() < 1e-7);
    }
}
