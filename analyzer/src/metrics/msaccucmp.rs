//! CANN msaccucmp's metrics (graph/op dumps), x = target, y = golden, flattened, in f64.
//!
//! One fused pass gives everything but the KL divergence: sums for cosine, errors, relative errors, the
//! per-side min/max, and shifted sums for mean and standard deviation (values minus each side's first
//! element, which keeps `Σx² - (Σx)²/n` free of cancellation when |mean| >> std and merges across chunks
//! because every chunk uses the same shift). KL needs each side min-max normalised, so it takes two more
//! passes: one for the normalised sums, one for Σ p ln(p/q) (computed directly rather than expanded, so
//! tiny divergences keep their digits).

use super::kernel::{for_lanes, hmax, hmin, hsum, reduce_chunks, Element, LANES};

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

#[derive(Clone, Copy, Debug, Default)]
struct Sums {
    len: u64,
    dot: f64,
    xx: f64,
    yy: f64,
    sum_abs: f64,
    sum_sq: f64,
    max_abs: f64,
    acc_rel: f64,
    max_rel: f64,
    x_min: f64,
    x_max: f64,
    y_min: f64,
    y_max: f64,
    x_sh: f64,
    x_sh2: f64,
    y_sh: f64,
    y_sh2: f64,
    x_absmax: f64,
}

impl Sums {
    fn merge(self, o: Sums) -> Sums {
        Sums {
            len: self.len + o.len,
            dot: self.dot + o.dot,
            xx: self.xx + o.xx,
            yy: self.yy + o.yy,
            sum_abs: self.sum_abs + o.sum_abs,
            sum_sq: self.sum_sq + o.sum_sq,
            max_abs: self.max_abs.max(o.max_abs),
            acc_rel: self.acc_rel + o.acc_rel,
            max_rel: self.max_rel.max(o.max_rel),
            x_min: self.x_min.min(o.x_min),
            x_max: self.x_max.max(o.x_max),
            y_min: self.y_min.min(o.y_min),
            y_max: self.y_max.max(o.y_max),
            x_sh: self.x_sh + o.x_sh,
            x_sh2: self.x_sh2 + o.x_sh2,
            y_sh: self.y_sh + o.y_sh,
            y_sh2: self.y_sh2 + o.y_sh2,
            x_absmax: self.x_absmax.max(o.x_absmax),
        }
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
    let (xr, yr) = (s.x_max - s.x_min, s.y_max - s.y_min);
    let sums = reduce_chunks(
        x,
        y,
        |a, b| {
            let (mut p, mut q) = ([0.0; LANES], [0.0; LANES]);
            for_lanes(a, b, |l, u, v| {
                p[l] += norm01(u, s.x_min, xr);
                q[l] += norm01(v, s.y_min, yr);
            });
            (hsum(&p), hsum(&q))
        },
        |a, b| (a.0 + b.0, a.1 + b.1),
    );
    let (sp, sq) = sums;
    reduce_chunks(
        x,
        y,
        |a, b| {
            let mut k = [0.0; LANES];
            for_lanes(a, b, |l, u, v| {
                let p = norm01(u, s.x_min, xr) / sp;
                let q = norm01(v, s.y_min, yr) / sq;
                k[l] += p * (p / q).ln();
            });
            hsum(&k)
        },
        |a, b| a + b,
    )
}

/// All msaccucmp metrics. `x_is_fp16` enables the OverFlow flag (max |x| >= 65504).
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
        kullback_leibler_divergence: kl(&x[..len], &y[..len], &s),
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
