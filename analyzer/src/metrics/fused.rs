//! The f32 fast path: one pass over an f32 pair fills msprobe's sums and (optionally) msaccucmp's first
//! pass, for relative error in f32 (bf16 and fp32 pairs, fp16 against fp32) or in f16 (fp16 pairs: `F16`),
//! which covers every floating pair msprobe compares but fp64 ones (see [`RePrecision`]).
//!
//! It computes exactly what the generic kernels compute, in the same lanes and order, so results are
//! bit-identical to them (tests below and in `tests/metrics_merge.rs` check it); only the work differs:
//! - inputs stay f32 where that is exact: the relative error is an f32 division (8 per AVX2 op instead of
//!   a round trip through f64), its maximum and the per-side minima and maxima are taken in f32 (the widened
//!   maximum of f32 values is the maximum of the widened values), counts are u32 lanes;
//! - sums shared by both families (Σ N·B, Σ N², Σ B², Σ (N-B)², max |N-B|) are accumulated once;
//! - no separate inf/NaN detector: Σ N² and Σ B² of f32 values are finite exactly when every input is
//!   (a square of an f32 is below 2^256, far from f64's limit); with finite inputs an f32 relative error is
//!   never NaN (its divisor is nonzero and finite), so msprobe's NaN count is always zero here; an f16
//!   relative error can be (f16 overflows at 65504), so the `F16` build counts NaNs as the generic kernel;
//! - max |x| for msaccucmp's overflow flag comes from x's minimum and maximum;
//! - for `analyzer compare`, [`both_f32_stats`] also forms both sides' statistics in the same pass: the block
//!   partials of formats' `StatsAccumulator::push_f32` (same lanes, same blocks, same f64 additions in the
//!   same order, extremes kept with the same selects), so the statistics are bit for bit `push_f32`'s.
//!
//! Each chunk runs through [`accutrace_formats::multiversion!`]: an AVX-512 or AVX2 build where the CPU has
//! it, the baseline build otherwise (SSE2 on x86_64, NEON on aarch64).

use super::f16_re;
use super::kernel::{fold_chunks, LANES, PARALLEL_MIN};
use super::kernel::{hmax, hmin, hsum, reduce_chunks, round_to_f16, RePrecision};
use super::kernel::{rel_err_f16, rel_err_f32, rel_err_of_f16_values};
use super::sums::{MsaccucmpSums as AccSums, MsprobeSums};
use accutrace_formats::multiversion;
use accutrace_formats::stats::{BlockF32, StatsAccumulator, F32_BLOCK, F32_LANES};

// The statistics' lanes are the kernel's: value `j` goes to lane `j % LANES` in both.
const _: () = assert!(
    F32_LANES == LANES && F32_BLOCK.is_multiple_of(LANES) && super::kernel::CHUNK.is_multiple_of(F32_BLOCK)
);

/// Where one chunk's statistics partials go, as [`StatsAccumulator::push_f32`] forms them: per block of
/// [`F32_BLOCK`] values the two sides' sums, and the chunk's per-lane extremes and counts. A pair of one
/// chunk folds them straight into the accumulators (`acc`); parallel chunks keep their block sums (`sums`:
/// x sum, x sum of squares, x sum of |x|, then y's; 384 bytes per 256 pairs) to be folded in chunk order.
/// The values past the last whole group of [`LANES`] of the pair (its last `len % LANES`) are not in it:
/// `push_f32` gives them to lane 0 one by one.
#[derive(Default)]
pub(crate) struct StatsSink {
    acc: Option<(StatsAccumulator, StatsAccumulator)>,
    sums: Vec<[[f64; LANES]; 6]>,
    extremes: Option<(BlockF32, BlockF32)>,
    count: u64,
}

impl StatsSink {
    /// Folds everything held (block sums in order, then extremes and counts) into `x` and `y`.
    fn fold_into(self, x: &mut StatsAccumulator, y: &mut StatsAccumulator) {
        for [sx, sx2, sxa, sy, sy2, sya] in &self.sums {
            x.push_f32_block(&BlockF32 { sum: *sx, sumsq: *sx2, abs_sum: *sxa, ..EMPTY_BLOCK }, 0);
            y.push_f32_block(&BlockF32 { sum: *sy, sumsq: *sy2, abs_sum: *sya, ..EMPTY_BLOCK }, 0);
        }
        if let Some((xb, yb)) = &self.extremes {
            x.push_f32_block(xb, self.count);
            y.push_f32_block(yb, self.count);
        }
    }
}

/// A block that adds nothing: zero sums, infinite extremes, zero counts.
const EMPTY_BLOCK: BlockF32 = BlockF32 {
    sum: [0.0; LANES],
    sumsq: [0.0; LANES],
    abs_sum: [0.0; LANES],
    min: [f32::INFINITY; LANES],
    max: [f32::NEG_INFINITY; LANES],
    zero: [0; LANES],
    sat: [0; LANES],
};

/// The sums of one fused pass; `acc` is all zero unless the pass was asked for it. `fp16`: the pass
/// compared every value of both sides with its rounding to f16 and found them equal (the `F16` build
/// with msaccucmp's sums; false otherwise).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Fused {
    pub probe: MsprobeSums,
    pub acc: AccSums,
    pub fp16: bool,
}

impl Fused {
    fn merge(self, o: Fused) -> Fused {
        Fused { probe: self.probe.merge(o.probe), acc: self.acc.merge(o.acc), fp16: self.fp16 && o.fp16 }
    }
}

/// msprobe's thresholds in f32 (numpy casts the python floats to the array's f32).
const T1: f32 = 0.001;
const T5: f32 = 0.005;

/// The thresholds as numpy compares them with an f16 relative error (exact f16 values, so exact in f32).
pub(super) fn thresholds_f16() -> (f32, f32) {
    let (t1, t5) = RePrecision::F16.thresholds();
    (t1 as f32, t5 as f32)
}

/// One chunk (at most `PARALLEL_MIN` elements, so u32 counts cannot overflow). `ZERO` maps inf/NaN to 0
/// on both sides (msprobe's rule once positions are known to match); `ACC` adds msaccucmp's sums, shifted
/// by `kx`/`ky`; `STATS` (with `ACC`) also forms both sides' statistics partials into `parts` (saturation
/// limits `lim`), valid for a side whose values are all finite; `F16` takes msprobe's relative error in
/// f16 ([`RePrecision::F16`]) instead of f32. Without `RE` the relative error is left out (its maximum,
/// NaN flag and counts stay zero, and so does the `fp16` flag): [`chunk_f16c`] takes it apart.
#[inline(always)]
fn chunk<const ZERO: bool, const ACC: bool, const STATS: bool, const F16: bool, const RE: bool>(
    n: &[f32],
    b: &[f32],
    kx: f64,
    ky: f64,
    lim: (f32, f32),
    sink: &mut StatsSink,
) -> Fused {
    let len = n.len().min(b.len());
    let (n, b) = (&n[..len], &b[..len]);
    let z = [0.0f64; LANES];
    let (mut dot, mut nn, mut bb, mut dd, mut max_abs) = (z, z, z, z, z);
    let mut max_re = [0.0f32; LANES];
    let (mut lt1, mut lt5, mut re_nan) = ([0u32; LANES], [0u32; LANES], [0u32; LANES]);
    let mut not_f16 = [0u32; LANES];
    let (t1, t5) = if F16 { thresholds_f16() } else { (T1, T5) };
    let (mut sa, mut rel, mut mrel, mut xs, mut xs2, mut ys, mut ys2) = (z, z, z, z, z, z, z);
    let (mut xmin, mut xmax) = ([f32::INFINITY; LANES], [f32::NEG_INFINITY; LANES]);
    let (mut ymin, mut ymax) = ([f32::INFINITY; LANES], [f32::NEG_INFINITY; LANES]);
    // A macro rather than a closure: the closure, called from two loops, was not always inlined into the
    // per-level builds (it then ran as a scalar call per element at the baseline).
    macro_rules! body {
        ($l:expr, $x:expr, $y:expr) => {{
            let (l, x, y): (usize, f32, f32) = ($l, $x, $y);
            let (x, y) = if ZERO && !(x.is_finite() && y.is_finite()) { (0.0, 0.0) } else { (x, y) };
            let (xd, yd) = (x as f64, y as f64);
            dot[l] += xd * yd;
            nn[l] += xd * xd;
            bb[l] += yd * yd;
            let d = xd - yd;
            dd[l] += d * d;
            let ad = d.abs();
            max_abs[l] = if ad > max_abs[l] { ad } else { max_abs[l] };
            if RE {
                // RePrecision::rel_err in f32 or f16: that precision's epsilon added to both sides where
                // the bench is zero.
                // With msaccucmp's sums the roundings of the inputs are formed anyway (`not_f16` below);
                // without, the inputs are taken as the f16 values msprobe's f16 pairs hold.
                let re = match (F16, ACC) {
                    (true, true) => rel_err_f16(x, y),
                    (true, false) => rel_err_of_f16_values(x, y),
                    (false, _) => rel_err_f32(x, y),
                };
                max_re[l] = if re > max_re[l] { re } else { max_re[l] };
                if F16 {
                    re_nan[l] |= u32::from(re.is_nan());
                }
                if F16 && ACC {
                    // msaccucmp's KL divides through reciprocals only for fp16 values (`Fp16Values`); the
                    // roundings are rel_err_f16's own, which LLVM computes once.
                    not_f16[l] |= u32::from(round_to_f16(x) != x) | u32::from(round_to_f16(y) != y);
                }
                lt1[l] += u32::from(re < t1);
                lt5[l] += u32::from(re < t5);
            }
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
        }};
    }
    let blocks = len / LANES;
    let (nb, nr) = n.split_at(blocks * LANES);
    let (bb_, br) = b.split_at(blocks * LANES);
    let (mut sxmin, mut sxmax) = ([f32::INFINITY; LANES], [f32::NEG_INFINITY; LANES]);
    let (mut symin, mut symax) = ([f32::INFINITY; LANES], [f32::NEG_INFINITY; LANES]);
    let (mut xzero, mut xsat, mut yzero, mut ysat) =
        ([0u32; LANES], [0u32; LANES], [0u32; LANES], [0u32; LANES]);
    for (xblock, yblock) in nb.chunks(F32_BLOCK).zip(bb_.chunks(F32_BLOCK)) {
        let (mut sx, mut sx2, mut sxa, mut sy, mut sy2, mut sya) = (z, z, z, z, z, z);
        for (xs_, ys_) in xblock.chunks_exact(LANES).zip(yblock.chunks_exact(LANES)) {
            for l in 0..LANES {
                let (x, y) = (xs_[l], ys_[l]);
                body!(l, x, y);
                if STATS {
                    // StatsAccumulator::push_f32's block partials, lane for lane.
                    let (xd, yd) = (f64::from(x), f64::from(y));
                    sx[l] += xd;
                    sx2[l] += xd * xd;
                    sxa[l] += xd.abs();
                    sy[l] += yd;
                    sy2[l] += yd * yd;
                    sya[l] += yd.abs();
                    sxmin[l] = if x < sxmin[l] { x } else { sxmin[l] };
                    sxmax[l] = if x > sxmax[l] { x } else { sxmax[l] };
                    symin[l] = if y < symin[l] { y } else { symin[l] };
                    symax[l] = if y > symax[l] { y } else { symax[l] };
                    xzero[l] += u32::from(x == 0.0);
                    yzero[l] += u32::from(y == 0.0);
                    xsat[l] += u32::from(x.abs() == lim.0);
                    ysat[l] += u32::from(y.abs() == lim.1);
                }
            }
        }
        if STATS {
            match &mut sink.acc {
                Some((ax, ay)) => {
                    ax.push_f32_block(&BlockF32 { sum: sx, sumsq: sx2, abs_sum: sxa, ..EMPTY_BLOCK }, 0);
                    ay.push_f32_block(&BlockF32 { sum: sy, sumsq: sy2, abs_sum: sya, ..EMPTY_BLOCK }, 0);
                }
                None => sink.sums.push([sx, sx2, sxa, sy, sy2, sya]),
            }
            sink.count += xblock.len() as u64;
        }
    }
    if STATS {
        let xb = BlockF32 { min: sxmin, max: sxmax, zero: xzero, sat: xsat, ..EMPTY_BLOCK };
        let yb = BlockF32 { min: symin, max: symax, zero: yzero, sat: ysat, ..EMPTY_BLOCK };
        match &mut sink.acc {
            Some((ax, ay)) => {
                ax.push_f32_block(&xb, sink.count);
                ay.push_f32_block(&yb, sink.count);
            }
            None => sink.extremes = Some((xb, yb)),
        }
    }
    for (i, (&x, &y)) in nr.iter().zip(br).enumerate() {
        body!(i, x, y);
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
        re_nan: re_nan.iter().any(|&c| c != 0),
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
    Fused { probe, acc, fp16: F16 && ACC && RE && not_f16.iter().all(|&c| c == 0) }
}

multiversion!(fn chunk_mv<const ZERO: bool, const ACC: bool, const STATS: bool, const F16: bool, const RE: bool>(n: &[f32], b: &[f32], kx: f64, ky: f64, lim: (f32, f32), sink: &mut StatsSink) -> Fused = chunk);

/// One chunk through [`chunk_mv`]. With msaccucmp's sums (`ACC`), an f16 relative error (`F16`) goes
/// through the CPU's f16 conversion where it has one (`f16_re`, F16C): the chunk's f64 sums without it,
/// then its figures from a second pass over the same chunk (in cache), which gives the same bits as the
/// fused lanes (see `f16_re`'s doc). There the split took the fused F16 pass from ~1,850 to ~1,010 perf
/// samples of compare a b (medium:4 pair; the lanes had kept roundings and f64 sums together and spilled
/// registers). msprobe's sums alone are light, and one pass measured faster there than the split (~1,280
/// against ~1,490 samples): with F16C that pass is `f16_re::probe_of_f16_values`, the same loop written
/// with the hardware's rounding (1.4-1.5x the lanes' AVX-512 build, one thread); the builds without F16C
/// and the zeroed pass of pairs with inf/NaN compute it in the fused lanes.
#[inline(always)]
fn chunk_f16c<const ZERO: bool, const ACC: bool, const STATS: bool, const F16: bool>(
    n: &[f32],
    b: &[f32],
    kx: f64,
    ky: f64,
    lim: (f32, f32),
    sink: &mut StatsSink,
) -> Fused {
    if F16 && !ACC && !STATS && !ZERO {
        let len = n.len().min(b.len());
        if let Some(probe) = f16_re::probe_of_f16_values(&n[..len], &b[..len], thresholds_f16()) {
            return Fused { probe, ..Fused::default() };
        }
    }
    if F16 && ACC && !ZERO {
        let len = n.len().min(b.len());
        if let Some(re) = f16_re::by_hardware(&n[..len], &b[..len], thresholds_f16()) {
            let mut f = chunk_mv::<ZERO, ACC, STATS, F16, false>(n, b, kx, ky, lim, sink);
            f.probe.max_re = f64::from(re.max_re);
            f.probe.re_nan = re.re_nan;
            (f.probe.lt_one, f.probe.lt_five) = (re.lt1, re.lt5);
            f.fp16 = ACC && !re.not_f16;
            return f;
        }
    }
    chunk_mv::<ZERO, ACC, STATS, F16, true>(n, b, kx, ky, lim, sink)
}

/// msprobe's sums of an f32 pair with relative error in f32, or in f16 with `F16` (`ZERO`: inf/NaN mapped
/// to 0).
pub(crate) fn msprobe_f32<const ZERO: bool, const F16: bool>(n: &[f32], b: &[f32]) -> MsprobeSums {
    reduce_chunks(n, b, msprobe_chunk::<ZERO, F16>, MsprobeSums::merge)
}

/// [`msprobe_f32`]'s sums of one of its chunks.
pub(crate) fn msprobe_chunk<const ZERO: bool, const F16: bool>(n: &[f32], b: &[f32]) -> MsprobeSums {
    chunk_f16c::<ZERO, false, false, F16>(n, b, 0.0, 0.0, (0.0, 0.0), &mut StatsSink::default()).probe
}

/// msprobe's sums (valid when `probe.nonfinite` is false) and msaccucmp's first pass, in one pass.
pub(crate) fn both_f32<const F16: bool>(n: &[f32], b: &[f32]) -> Fused {
    let len = n.len().min(b.len());
    if len == 0 {
        return Fused::default();
    }
    let (kx, ky) = (f64::from(n[0]), f64::from(b[0]));
    let chunk = |x: &[f32], y: &[f32]| {
        chunk_f16c::<false, true, false, F16>(x, y, kx, ky, (0.0, 0.0), &mut StatsSink::default())
    };
    reduce_chunks(&n[..len], &b[..len], chunk, Fused::merge)
}

/// [`both_f32`] that also completes `stats` (fresh accumulators, one per side, `push_f32` of the whole
/// side) in the same pass. A side with a NaN or an infinity gets `None` back: its statistics need
/// `push_f32`'s classifying path.
pub(crate) fn both_f32_stats<const F16: bool>(
    n: &[f32],
    b: &[f32],
    stats: (StatsAccumulator, StatsAccumulator),
) -> (Fused, Option<StatsAccumulator>, Option<StatsAccumulator>) {
    let len = n.len().min(b.len());
    if len == 0 {
        return (Fused::default(), None, None);
    }
    let (n, b) = (&n[..len], &b[..len]);
    let (kx, ky) = (f64::from(n[0]), f64::from(b[0]));
    let (mut sx, mut sy) = stats;
    let lim = (sx.saturation_limit_f32(), sy.saturation_limit_f32());
    let f = if len < PARALLEL_MIN {
        // One chunk (what `reduce_chunks` does below PARALLEL_MIN): fold as the blocks come.
        let mut sink = StatsSink { acc: Some((sx, sy)), ..StatsSink::default() };
        let f = chunk_f16c::<false, true, true, F16>(n, b, kx, ky, lim, &mut sink);
        (sx, sy) = sink.acc.take().expect("the sink keeps its accumulators");
        f
    } else {
        let chunk = |x: &[f32], y: &[f32]| {
            let mut sink =
                StatsSink { sums: Vec::with_capacity(x.len() / F32_BLOCK), ..StatsSink::default() };
            (chunk_f16c::<false, true, true, F16>(x, y, kx, ky, lim, &mut sink), sink)
        };
        // Each chunk's block sums folded into the statistics in chunk order as its wave ends, the sums merged
        // in the same order: what folding them after the last chunk gives, without holding them all.
        let fold = |(f, (mut x, mut y)): (Option<Fused>, _), (g, sink): (Fused, StatsSink)| {
            sink.fold_into(&mut x, &mut y);
            (Some(f.map_or(g, |f: Fused| f.merge(g))), (x, y))
        };
        let (f, (x, y)) = fold_chunks(n, b, chunk, (None, (sx, sy)), fold);
        (sx, sy) = (x, y);
        f.expect("every chunk is folded, and there is at least one")
    };
    let tail = len / LANES * LANES;
    sx.push_f32(&n[tail..]);
    sy.push_f32(&b[tail..]);
    let finite = |s: f64| s.is_finite();
    (f, finite(f.acc.xx).then_some(sx), finite(f.acc.yy).then_some(sy))
}

#[cfg(test)]
mod tests {
    use super::*;
    use accutrace_formats::simd;
    use accutrace_formats::stats::TensorStats;
    use accutrace_formats::DType;

    fn bits(s: &TensorStats) -> [u64; 11] {
        let f = |v: f64| v.to_bits();
        [
            s.count,
            s.nan,
            s.pos_inf,
            s.neg_inf,
            s.zero,
            f(s.min),
            f(s.max),
            f(s.mean),
            f(s.l2_norm),
            s.at_saturation,
            f(s.abs_sum.expect("computed statistics keep the sum of |x|")),
        ]
    }

    /// Values with ±0 (min/max ties), saturation magnitudes and a wide spread; `relu` keeps them >= 0 so
    /// that the minimum is a zero whose sign depends on which one the lanes keep.
    fn values(len: usize, seed: u64, relu: bool) -> Vec<f32> {
        let mut state = seed;
        (0..len)
            .map(|_| {
                state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let r = (state >> 33) as u32;
                let v = match r % 16 {
                    0 => 0.0,
                    1 => -0.0,
                    2 => 65504.0,
                    3 => -65504.0,
                    4 => f32::MAX,
                    _ => (r as f32 / u32::MAX as f32 - 0.5) * 1e3 * (1 + r % 7) as f32,
                };
                if relu && v < 0.0 {
                    if r.is_multiple_of(2) {
                        0.0
                    } else {
                        -0.0
                    }
                } else {
                    v
                }
            })
            .collect()
    }

    /// The `fp16` flag (what lets KL divide through reciprocals) is set only when every value of both sides
    /// is an fp16 value, at every build, serial and parallel; one value that is not (in the lanes or in the
    /// tail, on either side) clears it, and so do the builds that do not check.
    #[test]
    fn the_fp16_flag_holds_only_for_fp16_values() {
        use accutrace_formats::tensor::half_bits::f16_to_f32;
        let new = |d: DType| StatsAccumulator::new(d.saturation_limit());
        let f16 = DType::FLOAT16;
        for len in [3, 1003, PARALLEL_MIN + 13] {
            let x: Vec<f32> =
                (0..len).map(|i| f16_to_f32(((i * 7919) % 0x7C00) as u16 | ((i as u16 & 1) << 15))).collect();
            let y: Vec<f32> = (0..len).map(|i| f16_to_f32(((i * 104_729) % 0x7C00) as u16)).collect();
            for level in simd::available() {
                simd::with_ceiling(level, || {
                    assert!(both_f32::<true>(&x, &y).fp16, "len {len}, {level:?}");
                    assert!(
                        both_f32_stats::<true>(&x, &y, (new(f16), new(f16))).0.fp16,
                        "len {len}, {level:?}"
                    );
                    assert!(!both_f32::<false>(&x, &y).fp16, "len {len}, {level:?}");
                    // Every position and value on the small pairs; one of each on the parallel one (debug
                    // builds run this in CI).
                    let (ats, bads) = if len < PARALLEL_MIN {
                        (vec![0, len / 2, len - 1], vec![1.0 + f32::EPSILON, 65520.0, 1e-9, f32::NAN])
                    } else {
                        (vec![len - 1], vec![1e-9])
                    };
                    for &at in &ats {
                        for &bad in &bads {
                            let (mut xb, mut yb) = (x.clone(), y.clone());
                            xb[at] = bad;
                            assert!(
                                !both_f32::<true>(&xb, &y).fp16,
                                "x[{at}] = {bad:e}, len {len}, {level:?}"
                            );
                            yb[at] = bad;
                            let (f, _, _) = both_f32_stats::<true>(&x, &yb, (new(f16), new(f16)));
                            assert!(!f.fp16, "y[{at}] = {bad:e}, len {len}, {level:?}");
                        }
                    }
                });
            }
        }
    }

    #[test]
    fn statistics_of_the_fused_pass_are_push_f32s_bit_for_bit() {
        let (dx, dy) = (DType::FLOAT16, DType::FLOAT);
        let new = |d: DType| StatsAccumulator::new(d.saturation_limit());
        // Each build the CPU runs against the portable build: the statistics against `push_f32`'s, the sums
        // against the fused pass without statistics.
        for len in [1, 7, 8, 9, 255, 256, 257, 263, 4099, (1 << 18) + 13, 3 << 17] {
            for relu in [false, true] {
                let (x, y) = (values(len, len as u64, relu), values(len, 7 * len as u64 + 1, !relu));
                let ((want_x, want_y), plain, want_f16) = simd::with_ceiling(simd::Level::Portable, || {
                    let stats = (bits(&TensorStats::of_f32(&x, dx)), bits(&TensorStats::of_f32(&y, dy)));
                    // The generic kernel with msprobe's relative error in f16 (values past 65504 make
                    // infinities there, and NaN relative errors).
                    let f16 = super::super::msprobe::msprobe_sums(&x, &y, RePrecision::F16);
                    (stats, both_f32::<false>(&x, &y), f16)
                });
                for level in simd::available() {
                    let (f, sx, sy) =
                        simd::with_ceiling(level, || both_f32_stats::<false>(&x, &y, (new(dx), new(dy))));
                    let (sx, sy) = (sx.expect("finite").finish(), sy.expect("finite").finish());
                    assert_eq!(bits(&sx), want_x, "x, len {len}, {level:?}");
                    assert_eq!(bits(&sy), want_y, "y, len {len}, {level:?}");
                    assert_eq!(f.acc, plain.acc, "len {len}, {level:?}");
                    assert_eq!(f.probe, plain.probe, "len {len}, {level:?}");
                    let (g, _, _) =
                        simd::with_ceiling(level, || both_f32_stats::<true>(&x, &y, (new(dx), new(dy))));
                    assert_eq!(Some(g.probe), want_f16, "F16, len {len}, {level:?}");
                    assert_eq!(g.acc, plain.acc, "F16, len {len}, {level:?}");
                }
            }
        }
        // A side with NaN or inf is left to push_f32's classifying path; the other side still comes back.
        let (mut x, y) = (values(1000, 3, false), values(1000, 4, false));
        x[517] = f32::NAN;
        for level in simd::available() {
            let (_, sx, sy) =
                simd::with_ceiling(level, || both_f32_stats::<false>(&x, &y, (new(dx), new(dy))));
            assert!(sx.is_none());
            assert_eq!(bits(&sy.expect("finite").finish()), bits(&TensorStats::of_f32(&y, dy)));
        }
    }
}
