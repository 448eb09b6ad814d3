//! CANN msaccucmp's metrics (graph/op dumps), x = target, y = golden, flattened, in f64.
//!
//! One fused pass gives everything but the KL divergence: sums for cosine, errors, relative errors, the
//! per-side min/max, and shifted sums for mean and standard deviation (values minus each side's first
//! element, which keeps `Σx² - (Σx)²/n` free of cancellation when |mean| >> std and merges across chunks
//! because every chunk uses the same shift). KL needs each side min-max normalised, so it takes two more
//! passes: one for the normalised sums, one for Σ p ln(p/q) (computed directly rather than expanded, so
//! tiny divergences keep their digits).

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

/// Min-max normalised to [0, 1] and clamped to float32 epsilon; a constant side maps to epsilon.
#[inline(always)]
fn norm01(v: f64, min: f64, range: f64) -> f64 {
    let eps = f32::EPSILON as f64;
    let t = if range > 0.0 { (v - min) / range } else { 0.0 };
    if t > eps {
        t
    } else {
        eps
    }
}

/// KL(p || q) with p from x and q from y, each min-max normalised, clamped, and scaled to sum 1.
fn kl<X: Element, Y: Element>(x: &[X], y: &[Y], s: &Sums) -> f64 {
    if let (Some(x), Some(y)) = (X::as_f32(x), Y::as_f32(y)) {
        let (sp, sq) = reduce_chunks(x, y, |a, b| kl_norm_sums_mv(a, b, s), |a, b| (a.0 + b.0, a.1 + b.1));
        let chunk = |a: &[f32], b: &[f32]| {
            kl_terms_mv(a, b, s, sp, sq)
                .unwrap_or_else(|| kl_terms::<f32, f32, false>(a, b, s, sp, sq).unwrap_or(0.0))
        };
        return reduce_chunks(x, y, chunk, |a, b| a + b);
    }
    let (sp, sq) = reduce_chunks(x, y, |a, b| kl_norm_sums(a, b, s), |a, b| (a.0 + b.0, a.1 + b.1));
    let chunk = |a: &[X], b: &[Y]| kl_terms::<X, Y, false>(a, b, s, sp, sq).unwrap_or(0.0);
    reduce_chunks(x, y, chunk, |a, b| a + b)
}

/// KL's first pass: the sums of the normalised sides.
#[inline(always)]
fn kl_norm_sums<X: Element, Y: Element>(a: &[X], b: &[Y], s: &Sums) -> (f64, f64) {
    let (xr, yr) = (s.x_max - s.x_min, s.y_max - s.y_min);
    let (mut p, mut q) = ([0.0; LANES], [0.0; LANES]);
    for_lanes(a, b, |l, u, v| {
        p[l] += norm01(u, s.x_min, xr);
        q[l] += norm01(v, s.y_min, yr);
    });
    (hsum(&p), hsum(&q))
}

/// KL's second pass: Σ p ln(p / q). `FAST` takes [`ln_fast`] (vectorisable) and reports `None` when a
/// ratio falls outside its domain (then the chunk is redone with `f64::ln`).
#[inline(always)]
fn kl_terms<X: Element, Y: Element, const FAST: bool>(
    a: &[X],
    b: &[Y],
    s: &Sums,
    sp: f64,
    sq: f64,
) -> Option<f64> {
    let (xr, yr) = (s.x_max - s.x_min, s.y_max - s.y_min);
    let mut k = [0.0; LANES];
    let mut outside = [0u32; LANES];
    for_lanes(a, b, |l, u, v| {
        let p = norm01(u, s.x_min, xr) / sp;
        let q = norm01(v, s.y_min, yr) / sq;
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
fn kl_terms_fast(a: &[f32], b: &[f32], s: &Sums, sp: f64, sq: f64) -> Option<f64> {
    kl_terms::<f32, f32, true>(a, b, s, sp, sq)
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
multiversion!(fn kl_norm_sums_mv(a: &[f32], b: &[f32], s: &Sums) -> (f64, f64) = kl_norm_sums, up_to Avx2);
multiversion!(fn kl_terms_mv(a: &[f32], b: &[f32], s: &Sums, sp: f64, sq: f64) -> Option<f64> = kl_terms_fast);

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
    msaccucmp_from_sums(&x[..len], &y[..len], &s, x_is_fp16)
}

/// The metrics from the first pass's sums (`x`, `y` of equal, nonzero length: KL reads them again).
pub(crate) fn msaccucmp_from_sums<X: Element, Y: Element>(
    x: &[X],
    y: &[Y],
    s: &Sums,
    x_is_fp16: bool,
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
        kullback_leibler_divergence: kl(&x[..len], &y[..len], s),
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
