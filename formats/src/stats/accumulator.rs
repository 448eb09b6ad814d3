//! [`StatsAccumulator`]: the statistics of decoded values, pushed in slices; f32 values a block at a time
//! through branch-free kernels compiled per instruction set ([`crate::multiversion!`]).

use super::TensorStats;

/// Independent lanes per accumulator: with f32 min/max/counts and f64 sums they fit the 16 vector registers
/// of baseline x86_64 (SSE2) and aarch64 (NEON) without spilling.
pub(super) const LANES: usize = 8;
/// Values per block of [`StatsAccumulator::push_f32`]: the block's partials live in registers and are
/// merged into the totals once per block (and its u32 counters cannot overflow).
pub(super) const BLOCK: usize = 256;

/// One-pass, chunked statistics: feed decoded values in any number of slices, then [`finish`](Self::finish).
///
/// f32 values go block by block ([`F32_BLOCK`] values) through a branch-free kernel that the compiler
/// vectorizes: min/max and the zero/saturation counts in f32/u32 lanes (exact: they only compare), sums and
/// sums of squares in f64 lanes (each f32 and its square are exact in f64, so only the f64 additions round,
/// as before). The kernel does not test for NaN/inf per value: a non-finite value makes the block's f64 sum of
/// squares NaN or inf, and such a (rare) block is redone by the classifying per-value path. f64 values go
/// through the classifying path in blocks of [`F32_LANES`] values. Lanes and blocks are combined in a fixed
/// order, so the result depends on the values and on the slice boundaries of the pushes only.
#[derive(Clone, Debug)]
pub struct StatsAccumulator {
    limit: f64,
    /// `limit` as f32 when it is exactly an f32 (else NaN: then no f32 value can equal it in f64 either).
    limit32: f32,
    // The totals that `stats::fused` keeps in registers across blocks, merging as `push_f32_block` does.
    pub(super) count: u64,
    pub(super) sum: [f64; LANES],
    pub(super) sumsq: [f64; LANES],
    pub(super) abs_sum: [f64; LANES],
    pub(super) min: [f64; LANES],
    pub(super) max: [f64; LANES],
    nan: [u64; LANES],
    pos_inf: [u64; LANES],
    neg_inf: [u64; LANES],
    pub(super) zero: [u64; LANES],
    pub(super) sat: [u64; LANES],
}

/// Values per block of [`StatsAccumulator::push_f32`], for kernels that form its partials themselves
/// ([`StatsAccumulator::push_f32_block`]).
pub const F32_BLOCK: usize = BLOCK;
/// Lanes of [`BlockF32`]: value `j` of a block goes to lane `j % F32_LANES`.
pub const F32_LANES: usize = LANES;

/// The register-resident partials of one block of finite f32 values (see [`StatsAccumulator`]), as
/// [`StatsAccumulator::push_f32`] forms them: for the block's whole groups of [`F32_LANES`] values, lane `i`
/// holds the values `j` with `j % F32_LANES == i`; `sum` and `sumsq` add them (and their squares) in f64 in
/// order, starting from zero; `min`/`max` are the lane's extremes (infinite when empty), `zero` and `sat`
/// its counts of zeros and of magnitudes equal to the saturation limit; `abs_sum` adds the values' magnitudes
/// like `sum` adds the values.
#[derive(Clone, Copy, Debug)]
pub struct BlockF32 {
    /// Per-lane sums.
    pub sum: [f64; LANES],
    /// Per-lane sums of squares.
    pub sumsq: [f64; LANES],
    /// Per-lane sums of magnitudes.
    pub abs_sum: [f64; LANES],
    /// Per-lane minima.
    pub min: [f32; LANES],
    /// Per-lane maxima.
    pub max: [f32; LANES],
    /// Per-lane counts of zeros.
    pub zero: [u32; LANES],
    /// Per-lane counts of values at the saturation limit.
    pub sat: [u32; LANES],
}

impl BlockF32 {
    /// The partials of `values` (whole groups of [`LANES`]), assuming they are all finite.
    #[inline(always)]
    pub(super) fn of(values: &[f32], limit: f32) -> BlockF32 {
        // Two loops over the (L1-resident) block, in two functions: in one loop (or one function) the
        // compiler vectorizes the f32 lanes 2-wide to match the f64 ones, and the accumulators spill.
        let (min, max, zero, sat) = extremes(values, limit);
        let (sum, sumsq, abs_sum) = sums(values);
        BlockF32 { sum, sumsq, abs_sum, min, max, zero, sat }
    }

    /// Whether every value of the block was finite: NaN and ±inf make a square NaN or +inf, and the squares
    /// of finite f32 values (< 2^256) cannot overflow an f64 sum of [`BLOCK`] of them.
    #[inline(always)]
    pub(super) fn all_finite(&self) -> bool {
        self.sumsq.iter().fold(0.0, |a, &s| a + s).is_finite()
    }
}

/// The extremes and counts of [`BlockF32::of`]: f32/u32 lanes (4-wide SSE2/NEON vectors, two of each; one
/// AVX2 vector), the build chosen by [`crate::simd`].
type Extremes = ([f32; LANES], [f32; LANES], [u32; LANES], [u32; LANES]);

/// The min/max/zero/saturation loop of [`BlockF32::of`], compiled into each instruction-set build.
#[inline(always)]
fn extremes_kernel(values: &[f32], limit: f32) -> Extremes {
    let mut min = [f32::INFINITY; LANES];
    let mut max = [f32::NEG_INFINITY; LANES];
    let mut zero = [0u32; LANES];
    let mut sat = [0u32; LANES];
    for group in values.chunks_exact(LANES) {
        for (i, &x) in group.iter().enumerate() {
            // Comparisons and selects (not f32::min, whose NaN rule defeats vectorization): minps/maxps.
            min[i] = if x < min[i] { x } else { min[i] };
            max[i] = if x > max[i] { x } else { max[i] };
            zero[i] += u32::from(x == 0.0);
            sat[i] += u32::from(x.abs() == limit);
        }
    }
    (min, max, zero, sat)
}

/// The sums of [`BlockF32::of`] in f64 lanes: values, squares and magnitudes (each f32, its square and its
/// magnitude are exact in f64), compiled into each instruction-set build.
type Sums = ([f64; LANES], [f64; LANES], [f64; LANES]);

/// The loop of [`Sums`].
#[inline(always)]
fn sums_kernel(values: &[f32]) -> Sums {
    let mut sum = [0f64; LANES];
    let mut sumsq = [0f64; LANES];
    let mut abs_sum = [0f64; LANES];
    for group in values.chunks_exact(LANES) {
        for (i, &x) in group.iter().enumerate() {
            let w = f64::from(x);
            sum[i] += w;
            sumsq[i] += w * w;
            abs_sum[i] += w.abs();
        }
    }
    (sum, sumsq, abs_sum)
}

// Both up to AVX2. In the AVX-512 build the compiler packs the 8 f32 lanes of min and max into one zmm
// register and merges the two compare masks for every group of 8 values (kunpckbw, vinsertf64x4,
// vextractf64x4): a dependency chain that made `stats_and_hash` of fp16 run at 2.95 GB/s against the AVX2
// build's 4.7-4.9 (one core of the development VM's EPYC; `sums` alone: 3% slower at AVX-512). The AVX2
// build is tested bit-identical to the portable one like every other
// (`every_build_forms_the_same_block_partials`).
crate::multiversion!(
    #[inline(never)] fn extremes(values: &[f32], limit: f32) -> Extremes = extremes_kernel, up_to Avx2
);
crate::multiversion!(#[inline(never)] fn sums(values: &[f32]) -> Sums = sums_kernel, up_to Avx2);

impl StatsAccumulator {
    /// An empty accumulator; `saturation_limit` is the magnitude counted by `at_saturation` (None: never).
    pub fn new(saturation_limit: Option<f64>) -> Self {
        // NaN never compares equal, so "no limit" counts nothing.
        let limit = saturation_limit.unwrap_or(f64::NAN);
        let limit32 = if f64::from(limit as f32) == limit { limit as f32 } else { f32::NAN };
        StatsAccumulator {
            limit,
            limit32,
            count: 0,
            sum: [0.0; LANES],
            sumsq: [0.0; LANES],
            abs_sum: [0.0; LANES],
            min: [f64::INFINITY; LANES],
            max: [f64::NEG_INFINITY; LANES],
            nan: [0; LANES],
            pos_inf: [0; LANES],
            neg_inf: [0; LANES],
            zero: [0; LANES],
            sat: [0; LANES],
        }
    }

    /// Adds f32 values.
    pub fn push_f32(&mut self, values: &[f32]) {
        for block in values.chunks(BLOCK) {
            let whole = block.len() / LANES * LANES;
            let (main, rest) = block.split_at(whole);
            let b = BlockF32::of(main, self.limit32);
            if b.all_finite() {
                self.push_f32_block(&b, 0);
            } else {
                // Rare: NaN or inf in this block. Classify value by value.
                for group in main.chunks_exact(LANES) {
                    for (i, &v) in group.iter().enumerate() {
                        self.one(i, f64::from(v));
                    }
                }
            }
            for &v in rest {
                self.one(0, f64::from(v));
            }
        }
        self.count += values.len() as u64;
    }

    /// Adds the partials of one block of `count` finite values formed elsewhere: pushing the blocks of
    /// [`F32_BLOCK`] values of a slice in order (the last one shorter, its values beyond whole groups of
    /// [`F32_LANES`] then given to [`push_f32`](Self::push_f32)) gives exactly what `push_f32` of the slice
    /// gives. A block of empty lanes changes nothing but the count (a sum that starts at +0 never becomes
    /// -0, so adding +0 leaves it as it is), so extremes and counts may also come in a block of their own.
    pub fn push_f32_block(&mut self, b: &BlockF32, count: u64) {
        for i in 0..LANES {
            self.sum[i] += b.sum[i];
            self.sumsq[i] += b.sumsq[i];
            self.abs_sum[i] += b.abs_sum[i];
            let (lo, hi) = (f64::from(b.min[i]), f64::from(b.max[i]));
            self.min[i] = if lo < self.min[i] { lo } else { self.min[i] };
            self.max[i] = if hi > self.max[i] { hi } else { self.max[i] };
            self.zero[i] += u64::from(b.zero[i]);
            self.sat[i] += u64::from(b.sat[i]);
        }
        self.count += count;
    }

    /// The saturation limit as f32 (NaN when there is none, or when it is not an f32: then no f32 value
    /// equals it), for kernels that count [`BlockF32::sat`] themselves.
    pub fn saturation_limit_f32(&self) -> f32 {
        self.limit32
    }

    /// Adds f64 values.
    pub fn push_f64(&mut self, values: &[f64]) {
        let mut blocks = values.chunks_exact(LANES);
        for block in &mut blocks {
            let lane: &[f64; LANES] = block.try_into().unwrap_or(&[0.0; LANES]);
            self.block(lane);
        }
        for &v in blocks.remainder() {
            self.one(0, v);
        }
        self.count += values.len() as u64;
    }

    #[inline(always)]
    fn block(&mut self, lane: &[f64; LANES]) {
        // Fast path for the common all-finite block: seven accumulators instead of ten, no selects.
        if lane.iter().all(|x| x.is_finite()) {
            for (i, &x) in lane.iter().enumerate() {
                self.sum[i] += x;
                self.sumsq[i] += x * x;
                self.abs_sum[i] += x.abs();
                self.min[i] = if x < self.min[i] { x } else { self.min[i] };
                self.max[i] = if x > self.max[i] { x } else { self.max[i] };
                self.zero[i] += u64::from(x == 0.0);
                self.sat[i] += u64::from(x.abs() == self.limit);
            }
            return;
        }
        for (i, &x) in lane.iter().enumerate() {
            self.one(i, x);
        }
    }

    /// Branch-free update of lane `i` (selects and comparisons instead of ifs and `f64::min`, whose NaN
    /// handling defeats vectorization; non-finite values are replaced before they reach min/max).
    #[inline(always)]
    fn one(&mut self, i: usize, x: f64) {
        let finite = x.is_finite();
        let fx = if finite { x } else { 0.0 };
        let lo = if finite { x } else { f64::INFINITY };
        let hi = if finite { x } else { f64::NEG_INFINITY };
        self.sum[i] += fx;
        self.sumsq[i] += fx * fx;
        self.abs_sum[i] += fx.abs();
        self.min[i] = if lo < self.min[i] { lo } else { self.min[i] };
        self.max[i] = if hi > self.max[i] { hi } else { self.max[i] };
        self.nan[i] += u64::from(x.is_nan());
        self.pos_inf[i] += u64::from(x == f64::INFINITY);
        self.neg_inf[i] += u64::from(x == f64::NEG_INFINITY);
        self.zero[i] += u64::from(x == 0.0);
        self.sat[i] += u64::from(fx.abs() == self.limit);
    }

    /// The statistics of everything pushed so far.
    pub fn finish(&self) -> TensorStats {
        let nan: u64 = self.nan.iter().sum();
        let pos_inf: u64 = self.pos_inf.iter().sum();
        let neg_inf: u64 = self.neg_inf.iter().sum();
        let finite = self.count - nan - pos_inf - neg_inf;
        let min = self.min.iter().copied().fold(f64::INFINITY, f64::min);
        let max = self.max.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let sum: f64 = self.sum.iter().sum();
        let sumsq: f64 = self.sumsq.iter().sum();
        TensorStats {
            count: self.count,
            nan,
            pos_inf,
            neg_inf,
            zero: self.zero.iter().sum(),
            min: if finite == 0 { f64::NAN } else { min },
            max: if finite == 0 { f64::NAN } else { max },
            mean: if finite == 0 { f64::NAN } else { sum / finite as f64 },
            l2_norm: sumsq.sqrt(),
            abs_sum: Some(self.abs_sum.iter().sum()),
            at_saturation: self.sat.iter().sum(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::of_bytes::CHUNK;
    use crate::stats::tests::fp16_bytes;
    use crate::DType;

    /// The plain definition, value by value in f64, that the blocked kernel must reproduce.
    fn reference(values: &[f32], limit: f64) -> TensorStats {
        let finite: Vec<f64> = values.iter().filter(|v| v.is_finite()).map(|&v| f64::from(v)).collect();
        let n = finite.len();
        TensorStats {
            count: values.len() as u64,
            nan: values.iter().filter(|v| v.is_nan()).count() as u64,
            pos_inf: values.iter().filter(|&&v| v == f32::INFINITY).count() as u64,
            neg_inf: values.iter().filter(|&&v| v == f32::NEG_INFINITY).count() as u64,
            zero: values.iter().filter(|&&v| v == 0.0).count() as u64,
            min: if n == 0 { f64::NAN } else { finite.iter().copied().fold(f64::INFINITY, f64::min) },
            max: if n == 0 { f64::NAN } else { finite.iter().copied().fold(f64::NEG_INFINITY, f64::max) },
            mean: if n == 0 { f64::NAN } else { finite.iter().sum::<f64>() / n as f64 },
            l2_norm: finite.iter().map(|x| x * x).sum::<f64>().sqrt(),
            abs_sum: Some(finite.iter().map(|x| x.abs()).sum::<f64>()),
            at_saturation: finite.iter().filter(|x| x.abs() == limit).count() as u64,
        }
    }

    fn assert_close(got: TensorStats, want: TensorStats) {
        let exact = (got.count, got.nan, got.pos_inf, got.neg_inf, got.zero, got.at_saturation);
        let want_exact = (want.count, want.nan, want.pos_inf, want.neg_inf, want.zero, want.at_saturation);
        assert_eq!(exact, want_exact);
        for (g, w) in [(got.min, want.min), (got.max, want.max)] {
            assert!(g == w || (g.is_nan() && w.is_nan()), "{g} vs {w}");
        }
        let abs = |s: &TensorStats| s.abs_sum.expect("computed statistics keep the sum of |x|");
        for (g, w) in [(got.mean, want.mean), (got.l2_norm, want.l2_norm), (abs(&got), abs(&want))] {
            assert!((g - w).abs() <= 1e-12 * w.abs().max(1.0) || (g.is_nan() && w.is_nan()), "{g} vs {w}");
        }
    }

    #[test]
    fn blocked_kernel_matches_the_definition_with_specials_in_some_blocks() {
        // Several BLOCKs and CHUNKs, a ragged tail; specials only in some blocks (the others take the fast
        // path), saturated values and zeros in fast blocks, a -inf in a block of its own.
        let n = 3 * CHUNK + 5 * BLOCK + 13;
        let values: Vec<f32> = (0..n)
            .map(|i| match i {
                _ if i == 3 * BLOCK + 7 => f32::NAN,
                _ if i == 3 * BLOCK + 8 => f32::INFINITY,
                _ if i == 9 * BLOCK + 1 => f32::NEG_INFINITY,
                _ if i % 1009 == 0 => 65504.0,
                _ if i % 1013 == 0 => -65504.0,
                _ if i % 7 == 0 => 0.0,
                _ => half::f16::from_f32(((i as f32) * 0.731).sin() * 300.0).to_f32(),
            })
            .collect();
        let want = reference(&values, 65504.0);
        assert!(want.nan == 1 && want.pos_inf == 1 && want.neg_inf == 1 && want.at_saturation > 4);
        let bytes = fp16_bytes(&values);
        assert_close(TensorStats::of_bytes(DType::FLOAT16, &bytes).unwrap(), want);
        assert_close(TensorStats::of_f32(&values, DType::FLOAT16), want);
        // Any slicing of the pushes gives the same counts and extremes (sums may round differently).
        let mut acc = StatsAccumulator::new(Some(65504.0));
        for piece in values.chunks(37) {
            acc.push_f32(piece);
        }
        assert_close(acc.finish(), want);
        // The same through bf16 and fp32 bytes (no saturation there for these values).
        let bf: Vec<f32> = values.iter().map(|&v| half::bf16::from_f32(v).to_f32()).collect();
        let bf_bytes: Vec<u8> =
            bf.iter().flat_map(|&v| half::bf16::from_f32(v).to_bits().to_le_bytes()).collect();
        assert_close(
            TensorStats::of_bytes(DType::BF16, &bf_bytes).unwrap(),
            reference(&bf, 3.3895313892515355e38),
        );
        let f32_bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_close(
            TensorStats::of_bytes(DType::FLOAT, &f32_bytes).unwrap(),
            reference(&values, f32::MAX as f64),
        );
    }

    #[test]
    fn saturation_limit_that_is_not_an_f32_counts_nothing_in_f32_lanes() {
        // u32::MAX is not an f32; its f32 rounding (2^32) must not count as saturated.
        let s = TensorStats::of_f32(&[4294967296.0; 40], DType::UINT32);
        assert_eq!(s.at_saturation, 0);
        let s = TensorStats::of_f32(&[f32::MAX, -f32::MAX, 1.0, f32::MAX], DType::FLOAT);
        assert_eq!(s.at_saturation, 3);
    }

    #[test]
    fn every_build_forms_the_same_block_partials() {
        let values: Vec<f32> = (0..BLOCK)
            .map(|i| match i % 97 {
                0 => 65504.0,
                1 => -65504.0,
                2 => 0.0,
                3 => -0.0,
                _ => ((i as f32) * 0.37).sin() * 1e3 + (i as f32) * 1e-3,
            })
            .collect();
        let bits = |b: &BlockF32| {
            let f = |a: &[f64; LANES]| a.map(f64::to_bits);
            let g = |a: &[f32; LANES]| a.map(f32::to_bits);
            (f(&b.sum), f(&b.sumsq), f(&b.abs_sum), g(&b.min), g(&b.max), b.zero, b.sat)
        };
        for len in [0, LANES, 5 * LANES, BLOCK] {
            let want = crate::simd::with_ceiling(crate::simd::Level::Portable, || {
                BlockF32::of(&values[..len], 65504.0)
            });
            for level in crate::simd::available() {
                let got = crate::simd::with_ceiling(level, || BlockF32::of(&values[..len], 65504.0));
                assert_eq!(bits(&got), bits(&want), "len {len}, {level:?}");
            }
        }
    }
}
