//! The fused accumulation behind both metric families.
//!
//! One pass over a pair of slices fills an accumulator of sums, maxima and counts. The inner loop works on
//! blocks of [`LANES`] elements with one accumulator per lane (`[f64; LANES]` arrays, no cross-lane
//! dependency), which LLVM turns into SIMD on x86_64 (SSE2/AVX) and aarch64 (NEON) without `unsafe`; a
//! scalar loop takes the remainder. Large inputs are split into [`CHUNK`]-element chunks processed in
//! parallel by rayon; chunk accumulators are merged in index order, a wave of chunks at a time, so the
//! result is identical for any thread count and differs from a single pass only by float rounding.

use rayon::prelude::*;

/// Lanes per block: 8 f64 accumulators = two AVX registers or four NEON registers per quantity.
pub const LANES: usize = 8;
/// Elements per parallel work item (512 KiB of f32 per side): large enough to amortise scheduling.
pub const CHUNK: usize = 1 << 16;
/// Below this, one thread: spawning costs more than it saves.
pub(crate) const PARALLEL_MIN: usize = 1 << 18;

// The f32 fast kernels count in u32 lanes: a chunk never holds more than PARALLEL_MIN elements.
const _: () = assert!(CHUNK <= PARALLEL_MIN && PARALLEL_MIN < u32::MAX as usize);

/// An input element: f32 or f64 lanes from the decoder.
pub trait Element: Copy + Send + Sync + 'static {
    fn f64(self) -> f64;
    /// The slice as f32 when it is one (selects the f32 fast kernels without `Any` or `unsafe`).
    fn as_f32(s: &[Self]) -> Option<&[f32]>;
}
impl Element for f32 {
    #[inline(always)]
    fn f64(self) -> f64 {
        self as f64
    }
    #[inline(always)]
    fn as_f32(s: &[f32]) -> Option<&[f32]> {
        Some(s)
    }
}
impl Element for f64 {
    #[inline(always)]
    fn f64(self) -> f64 {
        self
    }
    #[inline(always)]
    fn as_f32(_: &[f64]) -> Option<&[f32]> {
        None
    }
}

/// The float type numpy computes msprobe's relative error in: msprobe computes `|N - B| / |B|` on the
/// arrays as loaded (bf16 already widened to f32), before widening to f64, so an fp32 pair gets fp32
/// arithmetic and fp32 thresholds (`0.001` becomes `0.0010000000475f32`). Counting in f64 instead would
/// move elements across the 0.001 boundary and change the ratios by 1/N.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RePrecision {
    F64,
    F32,
    F16,
}

impl RePrecision {
    /// numpy's result type for `n - b` as msprobe loads them (`.pt` bf16 -> f32; non-float bench -> f64).
    pub fn for_dtypes(n: accutrace_formats::DType, b: accutrace_formats::DType) -> RePrecision {
        use accutrace_formats::DType as D;
        #[derive(PartialEq, PartialOrd, Clone, Copy)]
        enum C {
            Small, // bool, int8, uint8: fit f16
            Mid,   // int16, uint16: fit f32
            Big,   // 32/64-bit ints: need f64
            H,
            S,
            Dbl,
        }
        let class = |d: D| match d {
            D::FLOAT16 => C::H,
            D::FLOAT | D::BF16 => C::S,
            D::DOUBLE => C::Dbl,
            D::BOOL | D::INT8 | D::UINT8 => C::Small,
            D::INT16 | D::UINT16 => C::Mid,
            _ => C::Big,
        };
        let (cn, cb) = (class(n), class(b));
        if !matches!(cb, C::H | C::S | C::Dbl) {
            return RePrecision::F64; // msprobe casts both to float64 when the bench is not float
        }
        let need = |c: C| match c {
            C::Small | C::H => 0,
            C::Mid | C::S => 1,
            C::Big | C::Dbl => 2,
        };
        match need(cn).max(need(cb)) {
            0 => RePrecision::F16,
            1 => RePrecision::F32,
            _ => RePrecision::F64,
        }
    }

    /// msprobe's thresholds as numpy compares them in this precision (python floats are cast down).
    pub fn thresholds(self) -> (f64, f64) {
        match self {
            RePrecision::F64 => (0.001, 0.005),
            RePrecision::F32 => (0.001f32 as f64, 0.005f32 as f64),
            RePrecision::F16 => (half::f16::from_f64(0.001).to_f64(), half::f16::from_f64(0.005).to_f64()),
        }
    }

    /// `|n' - b'| / |b'|` with epsilon added to both where `b == 0`, in this precision.
    ///
    /// The epsilon is the machine epsilon of the array's float type (numpy's `finfo(dtype).eps`), not
    /// float64's (docs/METRICS.md): the fixture proves it. `Tensor.add_.4.forward.input.1` has five zero
    /// bench elements facing NPU values of about 5e-6; msprobe reports MaxRelativeErr 204801 (an element
    /// with a nonzero bench) and counts the five as failing both ratios. With float64's 2.2e-16 they would
    /// give 3e10; float32's 1.19e-7 gives about 60: above the thresholds, below the max, as msprobe shows.
    #[inline(always)]
    pub fn rel_err(self, n: f64, b: f64) -> f64 {
        match self {
            RePrecision::F64 => {
                let z = b == 0.0;
                let bb = if z { b + f64::EPSILON } else { b };
                let nn = if z { n + f64::EPSILON } else { n };
                ((nn - bb) / bb).abs()
            }
            RePrecision::F32 => rel_err_f32(n as f32, b as f32) as f64,
            RePrecision::F16 => rel_err_f16(n as f32, b as f32) as f64,
        }
    }
}

/// [`RePrecision::F32`]'s relative error of f32 inputs, in f32 (what numpy does on float32 arrays).
#[inline(always)]
pub(crate) fn rel_err_f32(n: f32, b: f32) -> f32 {
    let z = b == 0.0;
    let eps = f32::EPSILON;
    let bb = if z { b + eps } else { b };
    let nn = if z { n + eps } else { n };
    ((nn - bb) / bb).abs()
}

/// f16's machine epsilon, 2^-10 (`half::f16::EPSILON`; a test checks they agree).
pub(crate) const F16_EPSILON: f32 = 9.765625e-4;

/// [`RePrecision::F16`]'s relative error of inputs given as f32, as numpy computes it on float16 arrays:
/// each operation in f32, its result rounded to f16 ([`round_to_f16`]). Plain f32/u32 arithmetic that
/// LLVM vectorizes.
#[inline(always)]
pub(crate) fn rel_err_f16(n: f32, b: f32) -> f32 {
    rel_err_of_f16_values(round_to_f16(n), round_to_f16(b))
}

/// [`rel_err_f16`] of two f16 values, as every value of a pair msprobe measures in f16 is: fp16 data, or
/// bool, int8 and uint8 data (which f16 holds exactly) against fp16 ([`RePrecision::for_dtypes`]). Their
/// rounding to f16 is themselves (a NaN stays a NaN), so the two roundings of the inputs, two of five, are
/// left out; for other values it differs from `rel_err_f16`.
#[inline(always)]
pub(crate) fn rel_err_of_f16_values(n: f32, b: f32) -> f32 {
    let r = round_to_f16;
    let z = b == 0.0;
    // numpy's `b + eps` rounded to f16 needs no rounding here: where `b` rounded is ±0, the f32 sum is
    // exactly eps (adding a zero is exact), which is an f16 value (2^-10), so its rounding returns it.
    let bb = if z { F16_EPSILON } else { b };
    let nn = if z { r(n + F16_EPSILON) } else { n };
    r(r(nn - bb) / bb).abs()
}

/// `half::f16::from_f32(x).to_f32()` (round to nearest f16, ties to even; overflow to infinity; f16
/// subnormals; signed zeros) in plain f32/u32 arithmetic that vectorizes, where the `half` crate makes a
/// call per element to its F16C or software conversion and back. Equal bit for bit for every input but
/// NaN, which stays a NaN (quieted, its payload kept: no figure reads a NaN's payload). Tested against
/// `half` on every f32 exponent and a stride of all bit patterns; exhaustively by an ignored test.
#[inline(always)]
pub fn round_to_f16(x: f32) -> f32 {
    let bits = x.to_bits();
    let sign = bits & 0x8000_0000;
    let abs = bits & 0x7FFF_FFFF;
    // f16 normal range (|x| >= 2^-14): 10 of f32's 23 mantissa bits kept, the low 13 rounded half to even;
    // a carry into the exponent is right, and past f16's largest finite value (65504) is infinity.
    let rounded = (abs + 0x0FFF + ((abs >> 13) & 1)) & !0x1FFF;
    let normal = if rounded > 0x477F_E000 { 0x7F80_0000 } else { rounded };
    // Below it f16's subnormals are the multiples of 2^-24: adding 0.5 (whose f32 ulp is 2^-24) rounds
    // |x| < 2^-14 to the nearest of them, ties to even, in hardware; subtracting 0.5 again is exact.
    let subnormal = ((f32::from_bits(abs) + 0.5) - 0.5).to_bits();
    let out = if abs < 0x3880_0000 { subnormal } else { normal };
    let out = if abs > 0x7F80_0000 { abs | 0x0040_0000 } else { out };
    f32::from_bits(sign | out)
}

/// Splits `n`/`b` into chunks, runs `chunk` on each (in parallel when large) and merges in order.
pub fn reduce_chunks<N, B, A, F, M>(n: &[N], b: &[B], chunk: F, merge: M) -> A
where
    N: Element,
    B: Element,
    A: Send,
    F: Fn(&[N], &[B]) -> A + Sync,
    M: Fn(A, A) -> A,
{
    let merged = fold_chunks(n, b, chunk, None, |acc, part| {
        Some(match acc {
            None => part,
            Some(acc) => merge(acc, part),
        })
    });
    merged.expect("every call of `chunk` is folded, and there is at least one")
}

/// Chunks a wave of [`fold_chunks`] runs at once: work for every core of a large machine, while what their
/// results hold stays a few MiB however long the tensors (a fused pass's block sums for the statistics take
/// 1.5 bytes per element pair: 56 MiB for a pair of 144 MiB tensors, had they been held all at once).
const WAVE_CHUNKS: usize = 64;

/// Splits `n`/`b` into chunks, runs `chunk` on each (in parallel when large, a wave of [`WAVE_CHUNKS`] at a
/// time) and folds the results into `state` in chunk order as each wave ends: the folds of collecting every
/// result first, in the same order, without holding them all. One chunk (the whole slices, perhaps empty)
/// below [`PARALLEL_MIN`].
pub(crate) fn fold_chunks<N, B, A, S, F>(
    n: &[N],
    b: &[B],
    chunk: F,
    state: S,
    mut fold: impl FnMut(S, A) -> S,
) -> S
where
    N: Element,
    B: Element,
    A: Send,
    F: Fn(&[N], &[B]) -> A + Sync,
{
    debug_assert_eq!(n.len(), b.len());
    let len = n.len().min(b.len());
    let (n, b) = (&n[..len], &b[..len]);
    if len < PARALLEL_MIN {
        return fold(state, chunk(n, b));
    }
    let mut state = state;
    let wave = WAVE_CHUNKS * CHUNK;
    for (n, b) in n.chunks(wave).zip(b.chunks(wave)) {
        let parts: Vec<A> = n.par_chunks(CHUNK).zip(b.par_chunks(CHUNK)).map(|(x, y)| chunk(x, y)).collect();
        for part in parts {
            state = fold(state, part);
        }
    }
    state
}

/// Runs `body(lane, n, b)` over blocks of [`LANES`] and the remainder (remainder elements use lane
/// `i % LANES`, so every element lands in exactly one lane accumulator).
#[inline(always)]
pub fn for_lanes<N: Element, B: Element>(n: &[N], b: &[B], mut body: impl FnMut(usize, f64, f64)) {
    let blocks = n.len() / LANES;
    let (nb, nr) = n.split_at(blocks * LANES);
    let (bb, br) = b.split_at(blocks * LANES);
    for (xs, ys) in nb.chunks_exact(LANES).zip(bb.chunks_exact(LANES)) {
        for l in 0..LANES {
            body(l, xs[l].f64(), ys[l].f64());
        }
    }
    for (i, (x, y)) in nr.iter().zip(br).enumerate() {
        body(i, x.f64(), y.f64());
    }
}

/// Sum of lane accumulators in a fixed order.
#[inline]
pub fn hsum(v: &[f64; LANES]) -> f64 {
    // Pairwise, like a SIMD horizontal add: a fixed tree keeps results reproducible.
    let a = [v[0] + v[4], v[1] + v[5], v[2] + v[6], v[3] + v[7]];
    (a[0] + a[2]) + (a[1] + a[3])
}

/// Maximum of lane accumulators (NaN lanes never occur: callers track NaN separately).
#[inline]
pub fn hmax(v: &[f64; LANES]) -> f64 {
    v.iter().copied().fold(f64::NEG_INFINITY, f64::max)
}

/// Minimum of lane accumulators.
#[inline]
pub fn hmin(v: &[f64; LANES]) -> f64 {
    v.iter().copied().fold(f64::INFINITY, f64::min)
}

/// A plain sum over the same bytes: the benchmark's memory-bandwidth reference.
pub fn plain_sum<T: Element>(x: &[T]) -> f64 {
    let chunk = |xs: &[T], _: &[T]| {
        let mut acc = [0.0; LANES];
        for_lanes(xs, xs, |l, v, _| acc[l] += v);
        hsum(&acc)
    };
    reduce_chunks(x, x, chunk, |a, b| a + b)
}

/// The f32 bit patterns the tests of f16 rounding take: every pattern whose low 12 bits are a few chosen
/// values (every exponent, every mantissa bit f16 keeps, the rounding ties and their neighbours), and a
/// prime stride over all patterns.
#[cfg(test)]
pub(crate) fn f16_rounding_probes() -> impl Iterator<Item = u32> {
    let grid = (0..(1u32 << 20)).flat_map(|high| {
        [0u32, 1, 0x7FF, 0x800, 0x801, 0xFFF].into_iter().map(move |low| (high << 12) | low)
    });
    grid.chain((0..=u32::MAX / 65_521).map(|k| k * 65_521))
}

#[cfg(test)]
mod tests {

    /// `round_to_f16` against the `half` crate: every f32 bit pattern whose low 12 bits are a few
    /// chosen values (every exponent, every f16-relevant mantissa bit, the rounding ties and their
    /// neighbours), and a prime stride over all patterns.
    #[test]
    fn round_to_f16_equals_half() {
        let check = |bits: u32| {
            let x = f32::from_bits(bits);
            let (got, want) = (round_to_f16(x), half::f16::from_f32(x).to_f32());
            assert!(
                got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                "{bits:#010x}: {got:e} vs {want:e}"
            );
        };
        f16_rounding_probes().for_each(check);
    }

    /// Every f32 bit pattern (about a minute in release: `cargo test --release -p accutrace-analyzer --lib
    /// round_to_f16_every -- --ignored`).
    #[test]
    #[ignore]
    fn round_to_f16_every_pattern() {
        for bits in 0..=u32::MAX {
            let x = f32::from_bits(bits);
            let (got, want) = (round_to_f16(x), half::f16::from_f32(x).to_f32());
            assert!(got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()), "{bits:#010x}");
        }
    }

    use super::*;
    use accutrace_formats::DType;

    #[test]
    fn precision_follows_numpy_promotion() {
        use RePrecision::*;
        assert_eq!(RePrecision::for_dtypes(DType::BF16, DType::FLOAT), F32);
        assert_eq!(RePrecision::for_dtypes(DType::FLOAT, DType::FLOAT), F32);
        assert_eq!(RePrecision::for_dtypes(DType::FLOAT16, DType::FLOAT16), F16);
        assert_eq!(RePrecision::for_dtypes(DType::FLOAT16, DType::FLOAT), F32);
        assert_eq!(RePrecision::for_dtypes(DType::INT64, DType::INT64), F64);
        assert_eq!(RePrecision::for_dtypes(DType::INT64, DType::FLOAT), F64);
        assert_eq!(RePrecision::for_dtypes(DType::FLOAT, DType::DOUBLE), F64);
        assert_eq!(RePrecision::for_dtypes(DType::FLOAT, DType::INT32), F64);
    }

    /// `rel_err_f16` against numpy's float16 arithmetic written with the `half` crate, step by step (each
    /// result rounded to f16, `b + eps` too): every f16 value as the target against benches that are zero of
    /// either sign, f16 values and values between them, and targets that are not f16 values.
    #[test]
    fn f16_relative_error_is_numpys() {
        use half::f16;
        let numpy = |n: f32, b: f32| -> f32 {
            let (mut n, mut b) = (f16::from_f32(n), f16::from_f32(b));
            if b.to_f32() == 0.0 {
                b = f16::from_f32(b.to_f32() + f16::EPSILON.to_f32());
                n = f16::from_f32(n.to_f32() + f16::EPSILON.to_f32());
            }
            let d = f16::from_f32(n.to_f32() - b.to_f32());
            f16::from_f32(d.to_f32() / b.to_f32()).to_f32().abs()
        };
        let benches = [0.0f32, -0.0, 1e-30, -3e-8, 6e-8, 1.0, -1.5, 2049.0, 0.1, 65504.0, 70000.0, -1e-5];
        let mut targets: Vec<f32> = (0..=u16::MAX).map(|h| f16::from_bits(h).to_f32()).collect();
        targets.extend([0.1f32, 1.0 + f32::EPSILON, 3e-9, -7e4, 65519.0, 65520.0]);
        for &b in &benches {
            for &n in &targets {
                let (got, want) = (rel_err_f16(n, b), numpy(n, b));
                assert!(got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()), "{n:e} vs {b:e}");
            }
        }
    }

    /// `rel_err_of_f16_values` is `rel_err_f16` wherever both values are f16 values: every f16 target
    /// (NaNs and infinities included) against benches of every f16 exponent and sign, subnormals and zeros.
    #[test]
    fn f16_values_need_no_rounding() {
        let f16 = |h: u16| half::f16::from_bits(h).to_f32();
        let benches =
            (0..=u16::MAX).step_by(523).chain([0x0000, 0x8000, 0x0001, 0x83FF, 0x7BFF, 0x7C00, 0xFE00]);
        let mut pairs = 0u64;
        for b in benches.map(f16) {
            for n in (0..=u16::MAX).map(f16) {
                let (got, want) = (rel_err_of_f16_values(n, b), rel_err_f16(n, b));
                assert!(got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()), "{n:e} vs {b:e}");
                pairs += 1;
            }
        }
        assert!(pairs > 8_000_000, "{pairs}");
    }

    #[test]
    fn f16_epsilon_is_halfs() {
        assert_eq!(F16_EPSILON.to_bits(), half::f16::EPSILON.to_f32().to_bits());
    }

    #[test]
    fn relative_error_rounds_like_numpy() {
        // 1.001f32 vs 1: the f32 quotient is 0.0009999275, below the f32 threshold; in f64 it is too.
        let re = RePrecision::F32.rel_err(1.001f32 as f64, 1.0);
        assert_eq!(re, ((1.001f32 - 1.0f32) / 1.0f32) as f64);
        // Zero bench: epsilon is added to both sides, so equal zeros give 0, not NaN.
        assert_eq!(RePrecision::F64.rel_err(0.0, 0.0), 0.0);
        assert_eq!(RePrecision::F32.rel_err(0.0, 0.0), 0.0);
        assert_eq!(RePrecision::F16.rel_err(0.0, 0.0), 0.0);
        // A nonzero value against a zero bench is measured against the dtype's epsilon.
        assert_eq!(RePrecision::F32.rel_err(f32::EPSILON as f64, 0.0), 1.0);
        assert_eq!(RePrecision::F64.rel_err(f64::EPSILON, 0.0), 1.0);
        let (t1, _) = RePrecision::F32.thresholds();
        assert_eq!(t1, 0.0010000000474974513);
    }

    #[test]
    fn chunked_sum_matches_serial() {
        let x: Vec<f32> = (0..(PARALLEL_MIN + 12345)).map(|i| (i % 97) as f32 * 0.5).collect();
        let serial: f64 = x.iter().map(|&v| v as f64).sum();
        assert_eq!(plain_sum(&x), serial); // exact: all partial sums are integers/2 below 2^53
    }

    /// Chunks are folded in index order, one after the other, across several waves and a ragged last chunk,
    /// on one thread and on three: the sequence of folds collecting every chunk first gives.
    #[test]
    fn chunks_are_folded_in_order_across_waves() {
        let len = 2 * WAVE_CHUNKS * CHUNK + 5 * CHUNK + 123;
        let (n, b) = (vec![0f32; len], vec![0f32; len]);
        let start = |x: &[f32]| (x.as_ptr() as usize - n.as_ptr() as usize) / 4;
        let expected: Vec<(usize, usize)> =
            (0..len).step_by(CHUNK).map(|s| (s, CHUNK.min(len - s))).collect();
        for threads in [1, 3] {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
            let folded = pool.install(|| {
                fold_chunks(
                    &n,
                    &b,
                    |x, y| (start(x), x.len(), y.len()),
                    Vec::new(),
                    |mut seen, (s, l, m)| {
                        assert_eq!(l, m);
                        seen.push((s, l));
                        seen
                    },
                )
            });
            assert!(folded == expected, "{threads} threads");
            // reduce_chunks merges in that order too (string concatenation does not commute).
            let merged = pool
                .install(|| reduce_chunks(&n, &b, |x, _| format!("{},", start(x) / CHUNK), |a, b| a + &b));
            let order: String = (0..expected.len()).map(|k| format!("{k},")).collect();
            assert_eq!(merged, order, "{threads} threads");
        }
        // One chunk below PARALLEL_MIN, the empty pair included.
        assert_eq!(fold_chunks(&n[..10], &b[..10], |x, _| x.len(), 0, |a, l| a + l), 10);
        assert_eq!(fold_chunks(&n[..0], &b[..0], |x, _| x.len(), 7, |a, l| a + l), 7);
    }
}
