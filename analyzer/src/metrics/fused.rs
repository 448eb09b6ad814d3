//! The f32 fast path: one pass over an f32 pair fills msprobe's sums and (optionally) msaccucmp's first
//! pass, for relative error in f32 (every fp16/bf16/fp32 pair msprobe compares; see [`RePrecision`]).
//!
//! It computes exactly what the generic kernels compute, in the same lanes and order, so results are
//! bit-identical to them (tests below and in `tests/metrics_merge.rs` check it); only the work differs:
//! - inputs stay f32 where that is exact: the relative error is an f32 division (8 per AVX2 op instead of
//!   a round trip through f64), its maximum and the per-side minima and maxima are taken in f32 (the widened
//!   maximum of f32 values is the maximum of the widened values), counts are u32 lanes;
//! - sums shared by both families (Σ N·B, Σ N², Σ B², Σ (N-B)², max |N-B|) are accumulated once;
//! - no separate inf/NaN detector: Σ N² and Σ B² of f32 values are finite exactly when every input is
//!   (a square of an f32 is below 2^256, far from f64's limit); with finite inputs an f32 relative error is
//!   never NaN (its divisor is nonzero and finite), so msprobe's NaN count is always zero here;
//! - max |x| for msaccucmp's overflow flag comes from x's minimum and maximum.
//!
//! Each chunk runs through [`multiversion!`]: an AVX2 build where the CPU has it, the baseline build
//! otherwise (SSE2 on x86_64, NEON on aarch64).

use super::kernel::{hmax, hmin, hsum, multiversion, reduce_chunks, LANES};
use super::msaccucmp::Sums as AccSums;
use super::msprobe::MsprobeSums;

/// The sums of one fused pass; `acc` is all zero unless the pass was asked for it.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Fused {
    pub probe: MsprobeSums,
    pub acc: AccSums,
}

impl Fused {
    fn merge(self, o: Fused) -> Fused {
        Fused { probe: self.probe.merge(o.probe), acc: self.acc.merge(o.acc) }
    }
}

/// msprobe's thresholds in f32 (numpy casts the python floats to the array's f32).
const T1: f32 = 0.001;
const T5: f32 = 0.005;

/// One chunk (at most `PARALLEL_MIN` elements, so u32 counts cannot overflow). `ZERO` maps inf/NaN to 0
/// on both sides (msprobe's rule once positions are known to match); `ACC` adds msaccucmp's sums, shifted
/// by `kx`/`ky`.
#[inline(always)]
fn chunk<const ZERO: bool, const ACC: bool>(n: &[f32], b: &[f32], kx: f64, ky: f64) -> Fused {
    let len = n.len().min(b.len());
    let (n, b) = (&n[..len], &b[..len]);
    let z = [0.0f64; LANES];
    let (mut dot, mut nn, mut bb, mut dd, mut max_abs) = (z, z, z, z, z);
    let mut max_re = [0.0f32; LANES];
    let (mut lt1, mut lt5) = ([0u32; LANES], [0u32; LANES]);
    let (mut sa, mut rel, mut mrel, mut xs, mut xs2, mut ys, mut ys2) = (z, z, z, z, z, z, z);
    let (mut xmin, mut xmax) = ([f32::INFINITY; LANES], [f32::NEG_INFINITY; LANES]);
    let (mut ymin, mut ymax) = ([f32::INFINITY; LANES], [f32::NEG_INFINITY; LANES]);
    let mut body = |l: usize, x: f32, y: f32| {
        let (x, y) = if ZERO && !(x.is_finite() && y.is_finite()) { (0.0, 0.0) } else { (x, y) };
        let (xd, yd) = (x as f64, y as f64);
        dot[l] += xd * yd;
        nn[l] += xd * xd;
        bb[l] += yd * yd;
        let d = xd - yd;
        dd[l] += d * d;
        let ad = d.abs();
        max_abs[l] = if ad > max_abs[l] { ad } else { max_abs[l] };
        // RePrecision::F32.rel_err: f32's epsilon added to both sides where the bench is zero.
        let zb = y == 0.0;
        let by = if zb { y + f32::EPSILON } else { y };
        let nx = if zb { x + f32::EPSILON } else { x };
        let re = ((nx - by) / by).abs();
        max_re[l] = if re > max_re[l] { re } else { max_re[l] };
        lt1[l] += u32::from(re < T1);
        lt5[l] += u32::from(re < T5);
        if ACC {
            sa[l] += ad;
            let r = (xd / yd - 1.0).abs();
            let r = if yd.abs() > f64::EPSILON { r } else { 0.0 };
            rel[l] += r;
            mrel[l] = if r > mrel[l] { r } else { mrel[l] };
            xmin[l] = if x < xmin[l] { x } else { xmin[l] };
            xmax[l] = if x > xmax[l] { x } else { xmax[l] };
            ymin[l] = if y < ymin[l] { y } else { ymin[l] };
            ymax[l] = if y > ymax[l] { y } else { ymax[l] };
            let (sx, sy) = (xd - kx, yd - ky);
            xs[l] += sx;
            xs2[l] += sx * sx;
            ys[l] += sy;
            ys2[l] += sy * sy;
        }
    };
    let blocks = len / LANES;
    let (nb, nr) = n.split_at(blocks * LANES);
    let (bb_, br) = b.split_at(blocks * LANES);
    for (xs_, ys_) in nb.chunks_exact(LANES).zip(bb_.chunks_exact(LANES)) {
        for l in 0..LANES {
            body(l, xs_[l], ys_[l]);
        }
    }
    for (i, (&x, &y)) in nr.iter().zip(br).enumerate() {
        body(i, x, y);
    }
    let widen = |v: &[f32; LANES]| v.map(f64::from);
    let (nn, bb, dd) = (hsum(&nn), hsum(&bb), hsum(&dd));
    let max_abs = hmax(&max_abs);
    let probe = MsprobeSums {
        len: len as u64,
        dot: hsum(&dot),
        nn,
        bb,
        dd,
        max_abs,
        max_re: hmax(&widen(&max_re)),
        re_nan: false,
        lt_one: lt1.iter().map(|&c| u64::from(c)).sum(),
        lt_five: lt5.iter().map(|&c| u64::from(c)).sum(),
        nonfinite: !(nn.is_finite() && bb.is_finite()),
    };
    let acc = if ACC {
        let (x_min, x_max) = (hmin(&widen(&xmin)), hmax(&widen(&xmax)));
        AccSums {
            len: len as u64,
            dot: probe.dot,
            xx: nn,
            yy: bb,
            sum_abs: hsum(&sa),
            sum_sq: dd,
            max_abs,
            acc_rel: hsum(&rel),
            max_rel: hmax(&mrel),
            x_min,
            x_max,
            y_min: hmin(&widen(&ymin)),
            y_max: hmax(&widen(&ymax)),
            x_sh: hsum(&xs),
            x_sh2: hsum(&xs2),
            y_sh: hsum(&ys),
            y_sh2: hsum(&ys2),
            x_absmax: if x_min <= x_max { (-x_min).max(x_max) } else { 0.0 },
        }
    } else {
        AccSums::default()
    };
    Fused { probe, acc }
}

multiversion!(fn chunk_mv<const ZERO: bool, const ACC: bool>(n: &[f32], b: &[f32], kx: f64, ky: f64) -> Fused = chunk);

/// msprobe's sums of an f32 pair with relative error in f32 (`ZERO`: inf/NaN mapped to 0).
pub(crate) fn msprobe_f32<const ZERO: bool>(n: &[f32], b: &[f32]) -> MsprobeSums {
    reduce_chunks(n, b, |x, y| chunk_mv::<ZERO, false>(x, y, 0.0, 0.0), Fused::merge).probe
}

/// msprobe's sums (valid when `probe.nonfinite` is false) and msaccucmp's first pass, in one pass.
pub(crate) fn both_f32(n: &[f32], b: &[f32]) -> Fused {
    let len = n.len().min(b.len());
    if len == 0 {
        return Fused::default();
    }
    let (kx, ky) = (f64::from(n[0]), f64::from(b[0]));
    reduce_chunks(&n[..len], &b[..len], |x, y| chunk_mv::<false, true>(x, y, kx, ky), Fused::merge)
}
