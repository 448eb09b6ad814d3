//! fp16, bf16 and f32 bytes straight into [`StatsAccumulator`]'s totals, in one pass at AVX-512.
//!
//! The generic path decodes a chunk into an f32 buffer, then runs two kernels over each block (extremes and
//! counts, then f64 sums), each a chain of dependent additions or selects per lane: on the collector's
//! writer that was a third of its CPU (docs/bench-runs/2026-11-30-collector-xeon.md). Here one loop over
//! two blocks at a time converts each group of `LANES` values in registers and feeds all seven partials
//! (the counts of 16-bit values come from their bits), then merges them into totals kept in registers: the
//! same lanes, the same IEEE operations in the same order per lane (`vminps`/`vmaxps` are the generic
//! kernel's selects), so every partial, total and statistic is bit for bit the generic path's. Blocks with
//! NaN or inf, and the values after the last whole block, go through the generic path.

use super::accumulator::BLOCK;
use super::StatsAccumulator;
use crate::{tensor, DType};

/// How the values lie in the bytes (all little-endian).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Source {
    F16,
    Bf16,
    F32,
}

impl Source {
    fn of(dtype: DType) -> Option<Source> {
        match dtype {
            DType::FLOAT16 => Some(Source::F16),
            DType::BF16 => Some(Source::Bf16),
            DType::FLOAT => Some(Source::F32),
            _ => None,
        }
    }

    fn size(self) -> usize {
        match self {
            Source::F16 | Source::Bf16 => 2,
            Source::F32 => 4,
        }
    }
}

/// Pushes the whole blocks of [`BLOCK`] values at the start of `bytes` (which hold `elements` values of
/// `dtype`) into `acc`, exactly as `acc.push_f32` of their decoded values would; returns how many values it
/// pushed (a multiple of [`BLOCK`]). 0 where the CPU (or the [`crate::simd`] ceiling) is below AVX-512 or
/// `dtype` is none of fp16, bf16, f32: the caller pushes the rest its own way.
pub(super) fn push_whole_blocks(
    dtype: DType,
    bytes: &[u8],
    elements: usize,
    acc: &mut StatsAccumulator,
) -> usize {
    let Some(source) = Source::of(dtype) else { return 0 };
    let blocks = elements.min(bytes.len() / source.size()) / BLOCK;
    if blocks == 0 || !cfg!(target_arch = "x86_64") || crate::simd::level() < crate::simd::Level::Avx512 {
        return 0;
    }
    let block_bytes = BLOCK * source.size();
    let mut values = [0f32; BLOCK];
    let mut done = 0;
    while done < blocks {
        done += merge_finite_blocks(source, &bytes[done * block_bytes..blocks * block_bytes], acc);
        if done == blocks {
            break;
        }
        // Rare: NaN or inf in this block; push_f32 classifies it value by value.
        let block = &bytes[done * block_bytes..(done + 1) * block_bytes];
        if tensor::decode_f32_into(dtype, block, &mut values).is_err() {
            break;
        }
        acc.push_f32(&values);
        done += 1;
    }
    done * BLOCK
}

/// Merges the blocks of `BLOCK` values of `source` in `bytes` into `acc` in order, up to the first that holds
/// NaN or inf; returns how many it merged.
#[cfg(target_arch = "x86_64")]
fn merge_finite_blocks(source: Source, bytes: &[u8], acc: &mut StatsAccumulator) -> usize {
    // SAFETY: push_whole_blocks calls this only at simd level Avx512, which reports AVX-512 F/VL/DQ/BW, AVX2
    // and F16C only when the CPU has them.
    unsafe {
        match source {
            Source::F16 => avx512::merge_finite_blocks::<0>(bytes, acc),
            Source::Bf16 => avx512::merge_finite_blocks::<1>(bytes, acc),
            Source::F32 => avx512::merge_finite_blocks::<2>(bytes, acc),
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn merge_finite_blocks(_source: Source, _bytes: &[u8], _acc: &mut StatsAccumulator) -> usize {
    unreachable!("push_whole_blocks returns before any block on other targets")
}

/// The magnitude bits (sign cleared) of the fp16 (`source` 0) or bf16 (1) values `x` with `|x| == limit`,
/// or 0xFFFF, which no magnitude (at most 0x7FFF) equals, where there are none. Float equality is bit
/// equality but for zeros (and NaN, which equals nothing).
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
fn limit_bits16(source: u8, limit: f32) -> u16 {
    const NONE: u16 = 0xFFFF;
    if limit.is_nan() || limit < 0.0 {
        return NONE;
    }
    if limit == 0.0 {
        return 0;
    }
    match source {
        0 => {
            let h = half::f16::from_f32(limit);
            if h.to_f32() == limit {
                h.to_bits()
            } else {
                NONE
            }
        }
        1 if limit.to_bits() & 0xFFFF == 0 => (limit.to_bits() >> 16) as u16,
        _ => NONE,
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::{StatsAccumulator, BLOCK};
    use crate::stats::accumulator::LANES;
    use std::arch::x86_64::*;

    /// Group `g` (values `8g..8g+8`) of a block of fp16 (`S` 0), bf16 (1) or f32 (2) values, as f32.
    ///
    /// # Safety
    /// `block` is readable for `8(g+1)` values.
    #[inline]
    #[target_feature(enable = "avx2,f16c,avx512f,avx512vl,avx512dq,avx512bw")]
    unsafe fn group<const S: u8>(block: *const u8, g: usize) -> __m256 {
        // SAFETY: per the contract, the loads (unaligned) stay inside the block.
        unsafe {
            match S {
                0 => _mm256_cvtph_ps(_mm_loadu_si128(block.add(g * 16).cast())),
                1 => {
                    let halves = _mm256_cvtepu16_epi32(_mm_loadu_si128(block.add(g * 16).cast()));
                    _mm256_castsi256_ps(_mm256_slli_epi32::<16>(halves))
                }
                _ => _mm256_loadu_ps(block.add(g * 32).cast()),
            }
        }
    }

    /// One block's partials, `BlockF32`'s in registers: f32 extremes and u32 counts, f64 sums (lane `i` of
    /// every register is the block's lane `i`).
    struct Partials {
        min: __m256,
        max: __m256,
        zero: __m256i,
        sat: __m256i,
        sum: __m512d,
        sumsq: __m512d,
        abs_sum: __m512d,
    }

    impl Partials {
        #[inline]
        #[target_feature(enable = "avx2,f16c,avx512f,avx512vl,avx512dq,avx512bw")]
        fn new() -> Partials {
            Partials {
                min: _mm256_set1_ps(f32::INFINITY),
                max: _mm256_set1_ps(f32::NEG_INFINITY),
                zero: _mm256_setzero_si256(),
                sat: _mm256_setzero_si256(),
                sum: _mm512_setzero_pd(),
                sumsq: _mm512_setzero_pd(),
                abs_sum: _mm512_setzero_pd(),
            }
        }

        /// The next group of LANES values of source `S`: what `extremes_kernel` and `sums_kernel` do with
        /// it, but for the counts of 16-bit sources, which [`Partials::count16`] takes from their bits.
        #[inline]
        #[target_feature(enable = "avx2,f16c,avx512f,avx512vl,avx512dq,avx512bw")]
        fn add<const S: u8>(&mut self, x: __m256, limit: __m256) {
            // MINPS returns its first operand when it is less, else the second: `if x < min { x } else
            // { min }`, the generic kernel's select (which keeps a lane's first zero of either sign).
            self.min = _mm256_min_ps(x, self.min);
            self.max = _mm256_max_ps(x, self.max);
            if S == 2 {
                // An equal lane compares to all ones, -1: subtracting it counts.
                let is_zero = _mm256_cmp_ps::<_CMP_EQ_OQ>(x, _mm256_setzero_ps());
                self.zero = _mm256_sub_epi32(self.zero, _mm256_castps_si256(is_zero));
                let magnitude = _mm256_andnot_ps(_mm256_set1_ps(-0.0), x);
                let is_sat = _mm256_cmp_ps::<_CMP_EQ_OQ>(magnitude, limit);
                self.sat = _mm256_sub_epi32(self.sat, _mm256_castps_si256(is_sat));
            }
            // Widening is exact, and so is |x| widened; a mul then an add is never fused into an FMA.
            let w = _mm512_cvtps_pd(x);
            self.sum = _mm512_add_pd(self.sum, w);
            self.sumsq = _mm512_add_pd(self.sumsq, _mm512_mul_pd(w, w));
            self.abs_sum = _mm512_add_pd(self.abs_sum, _mm512_abs_pd(w));
        }

        /// Whether every value was finite: NaN and ±inf make a square NaN or +inf, and the squares of
        /// finite f32 values cannot overflow a sum of BLOCK of them (`BlockF32::all_finite`'s test).
        #[inline]
        #[target_feature(enable = "avx2,f16c,avx512f,avx512vl,avx512dq,avx512bw")]
        fn all_finite(&self) -> bool {
            // Classes: QNaN, +inf, -inf, SNaN.
            _mm512_fpclass_pd_mask::<0x99>(self.sumsq) == 0
        }

        /// The zero and saturation counts of a block of fp16 or bf16 values from their bits, 32 at a time:
        /// `x == 0` is a magnitude of 0 and `|x| == limit` a magnitude of `limit_bits` (see
        /// [`super::limit_bits16`]); element `e` of a register counts values `j` with `j % 32 == e`, so
        /// lane `i` is the sum of elements `i`, `i + 8`, `i + 16` and `i + 24`, the same counts as the f32
        /// compares give lane by lane.
        ///
        /// # Safety
        /// `block` is readable for BLOCK 16-bit values.
        #[inline]
        #[target_feature(enable = "avx2,f16c,avx512f,avx512vl,avx512dq,avx512bw")]
        unsafe fn count16(&mut self, block: *const u8, limit_bits: u16) {
            let magnitude = _mm512_set1_epi16(0x7FFF);
            let limit = _mm512_set1_epi16(limit_bits as i16);
            let one = _mm512_set1_epi16(1);
            let (mut zero, mut sat) = (_mm512_setzero_si512(), _mm512_setzero_si512());
            for k in 0..BLOCK / 32 {
                // SAFETY: k < BLOCK / 32, so the 64 bytes lie in the block.
                let v = unsafe { _mm512_loadu_si512(block.add(k * 64).cast()) };
                zero = _mm512_mask_add_epi16(zero, _mm512_testn_epi16_mask(v, magnitude), zero, one);
                let m = _mm512_and_si512(v, magnitude);
                sat = _mm512_mask_add_epi16(sat, _mm512_cmpeq_epi16_mask(m, limit), sat, one);
            }
            self.zero = lanes_of(zero);
            self.sat = lanes_of(sat);
        }
    }

    /// The per-lane u32 sums of a register of 32 u16 counts (element `e` belongs to lane `e % 8`, at
    /// position `e % 8` of its 128-bit quarter; each at most BLOCK / 32, so no sum overflows).
    #[inline]
    #[target_feature(enable = "avx2,f16c,avx512f,avx512vl,avx512dq,avx512bw")]
    fn lanes_of(v: __m512i) -> __m256i {
        let low = _mm_add_epi16(_mm512_castsi512_si128(v), _mm512_extracti32x4_epi32::<1>(v));
        let high = _mm_add_epi16(_mm512_extracti32x4_epi32::<2>(v), _mm512_extracti32x4_epi32::<3>(v));
        _mm256_cvtepu16_epi32(_mm_add_epi16(low, high))
    }

    /// The accumulator's totals in registers.
    struct Totals {
        sum: __m512d,
        sumsq: __m512d,
        abs_sum: __m512d,
        min: __m512d,
        max: __m512d,
        zero: __m512i,
        sat: __m512i,
    }

    impl Totals {
        #[inline]
        #[target_feature(enable = "avx2,f16c,avx512f,avx512vl,avx512dq,avx512bw")]
        fn load(acc: &StatsAccumulator) -> Totals {
            // SAFETY: each array is LANES (8) 8-byte values, one register; unaligned loads; AVX-512 F.
            unsafe {
                Totals {
                    sum: _mm512_loadu_pd(acc.sum.as_ptr()),
                    sumsq: _mm512_loadu_pd(acc.sumsq.as_ptr()),
                    abs_sum: _mm512_loadu_pd(acc.abs_sum.as_ptr()),
                    min: _mm512_loadu_pd(acc.min.as_ptr()),
                    max: _mm512_loadu_pd(acc.max.as_ptr()),
                    zero: _mm512_loadu_si512(acc.zero.as_ptr().cast()),
                    sat: _mm512_loadu_si512(acc.sat.as_ptr().cast()),
                }
            }
        }

        #[inline]
        #[target_feature(enable = "avx2,f16c,avx512f,avx512vl,avx512dq,avx512bw")]
        fn store(&self, acc: &mut StatsAccumulator) {
            // SAFETY: as `load`.
            unsafe {
                _mm512_storeu_pd(acc.sum.as_mut_ptr(), self.sum);
                _mm512_storeu_pd(acc.sumsq.as_mut_ptr(), self.sumsq);
                _mm512_storeu_pd(acc.abs_sum.as_mut_ptr(), self.abs_sum);
                _mm512_storeu_pd(acc.min.as_mut_ptr(), self.min);
                _mm512_storeu_pd(acc.max.as_mut_ptr(), self.max);
                _mm512_storeu_si512(acc.zero.as_mut_ptr().cast(), self.zero);
                _mm512_storeu_si512(acc.sat.as_mut_ptr().cast(), self.sat);
            }
        }

        /// `StatsAccumulator::push_f32_block` of one block's partials (its count is added by the caller).
        #[inline]
        #[target_feature(enable = "avx2,f16c,avx512f,avx512vl,avx512dq,avx512bw")]
        fn merge(&mut self, b: &Partials) {
            self.sum = _mm512_add_pd(self.sum, b.sum);
            self.sumsq = _mm512_add_pd(self.sumsq, b.sumsq);
            self.abs_sum = _mm512_add_pd(self.abs_sum, b.abs_sum);
            // `if lo < min { lo } else { min }` of the widened block extremes, as there.
            self.min = _mm512_min_pd(_mm512_cvtps_pd(b.min), self.min);
            self.max = _mm512_max_pd(_mm512_cvtps_pd(b.max), self.max);
            self.zero = _mm512_add_epi64(self.zero, _mm512_cvtepu32_epi64(b.zero));
            self.sat = _mm512_add_epi64(self.sat, _mm512_cvtepu32_epi64(b.sat));
        }
    }

    /// [`super::merge_finite_blocks`]: two blocks at a time, so that each addition chain has another block's
    /// beside it (the chains of one block left the adders idle), merged in order.
    ///
    /// # Safety
    /// The CPU has AVX-512 F/VL/DQ/BW, AVX2 and F16C.
    #[target_feature(enable = "avx2,f16c,avx512f,avx512vl,avx512dq,avx512bw")]
    pub(super) unsafe fn merge_finite_blocks<const S: u8>(bytes: &[u8], acc: &mut StatsAccumulator) -> usize {
        let block_bytes = BLOCK * if S == 2 { 4 } else { 2 };
        let blocks = bytes.len() / block_bytes;
        let limit = _mm256_set1_ps(acc.saturation_limit_f32());
        let limit_bits = super::limit_bits16(S, acc.saturation_limit_f32());
        let mut t = Totals::load(acc);
        let mut done = 0;
        while done < blocks {
            let pa = bytes[done * block_bytes..].as_ptr();
            let mut a = Partials::new();
            if done + 1 < blocks {
                let pb = bytes[(done + 1) * block_bytes..].as_ptr();
                let mut b = Partials::new();
                for g in 0..BLOCK / LANES {
                    // SAFETY: both blocks lie in `bytes` (done + 1 < blocks) and g < BLOCK / LANES.
                    let (x, y) = unsafe { (group::<S>(pa, g), group::<S>(pb, g)) };
                    a.add::<S>(x, limit);
                    b.add::<S>(y, limit);
                }
                if S != 2 {
                    // SAFETY: both blocks lie in `bytes`.
                    unsafe { (a.count16(pa, limit_bits), b.count16(pb, limit_bits)) };
                }
                if !a.all_finite() {
                    break;
                }
                t.merge(&a);
                done += 1;
                if !b.all_finite() {
                    break;
                }
                t.merge(&b);
                done += 1;
            } else {
                for g in 0..BLOCK / LANES {
                    // SAFETY: the block lies in `bytes` (done < blocks) and g < BLOCK / LANES.
                    a.add::<S>(unsafe { group::<S>(pa, g) }, limit);
                }
                if S != 2 {
                    // SAFETY: the block lies in `bytes`.
                    unsafe { a.count16(pa, limit_bits) };
                }
                if !a.all_finite() {
                    break;
                }
                t.merge(&a);
                done += 1;
            }
        }
        t.store(acc);
        acc.count += (done * BLOCK) as u64;
        done
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::simd::{available, with_ceiling, Level};
    use crate::stats::accumulator::LANES;
    use crate::stats::{stats_and_hash, StatsStream, TensorStats};

    /// Values of every kind: ordinary ones of many magnitudes, zeros of both signs, subnormals, the
    /// saturation limits, and, in some blocks only, NaN and infinities (block 0 has none in any dtype).
    fn values(n: usize, seed: u64, specials: bool) -> Vec<f32> {
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..n)
            .map(|i| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let r = (x >> 11) as u32;
                let block = i / BLOCK;
                match r % 64 {
                    0 if specials && block % 3 == 1 => f32::NAN,
                    1 if specials && block % 3 == 1 => f32::INFINITY,
                    2 if specials && block % 5 == 2 => f32::NEG_INFINITY,
                    3 => 0.0,
                    4 => -0.0,
                    5 => 65504.0,
                    6 => -65504.0,
                    // Infinite in fp16 (and f32::MAX in bf16): in odd blocks only.
                    7 if block % 2 == 1 => f32::MAX,
                    8 => 6.0e-8,   // an fp16 subnormal
                    9 => -1.0e-40, // an f32 subnormal
                    10 if block % 2 == 1 => half::bf16::MAX.to_f32(),
                    // Lanes 0 and 1 of blocks 4k: nothing below (above) zero, so their extremes are zeros.
                    _ if block.is_multiple_of(4) && i % LANES == 0 => (r % 7) as f32 * 0.25,
                    _ if block.is_multiple_of(4) && i % LANES == 1 => -((r % 5) as f32),
                    _ => ((r as f32) * 1.0e-6).sin() * (10f32).powi((r % 9) as i32 - 4),
                }
            })
            .collect()
    }

    fn bytes_of(dtype: DType, values: &[f32]) -> Vec<u8> {
        match dtype {
            DType::FLOAT16 => {
                values.iter().flat_map(|&v| half::f16::from_f32(v).to_bits().to_le_bytes()).collect()
            }
            DType::BF16 => {
                values.iter().flat_map(|&v| half::bf16::from_f32(v).to_bits().to_le_bytes()).collect()
            }
            _ => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        }
    }

    /// Debug prints every f64 exactly enough to tell any two apart (and -0 from 0).
    fn show(r: &(crate::Result<TensorStats>, u64)) -> String {
        format!("{:?} {}", r.0, r.1)
    }

    #[test]
    fn every_length_and_alignment_gives_the_portable_bits() {
        let levels = available();
        for dtype in [DType::FLOAT16, DType::BF16, DType::FLOAT] {
            for (n, specials) in [(0, false), (1, true), (255, true), (256, false), (257, true), (513, false)]
                .into_iter()
                .chain([
                    (3 * BLOCK + 7, true),
                    (9 * BLOCK, true),
                    (9 * BLOCK, false),
                    (2048 + 3 * BLOCK + 5, true),
                ])
            {
                let raw = bytes_of(dtype, &values(n, n as u64 + 7, specials));
                for shift in 0..4 {
                    // The same bytes at every offset from a 4-byte boundary.
                    let mut buf = vec![0u8; raw.len() + shift];
                    buf[shift..].copy_from_slice(&raw);
                    let bytes = &buf[shift..];
                    let want = with_ceiling(Level::Portable, || stats_and_hash(dtype, bytes));
                    for &level in &levels {
                        let got = with_ceiling(level, || stats_and_hash(dtype, bytes));
                        assert_eq!(show(&got), show(&want), "{dtype} {n} values, shift {shift}, {level:?}");
                        // Streamed in pieces that cut elements and blocks.
                        let streamed = with_ceiling(level, || {
                            let mut s = StatsStream::new(dtype, false);
                            for piece in bytes.chunks(1000 + shift) {
                                s.update(piece);
                            }
                            s.finish()
                        });
                        assert_eq!(
                            show(&streamed),
                            show(&want),
                            "{dtype} {n} streamed, shift {shift}, {level:?}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn whole_blocks_are_push_f32_of_the_decoded_values() {
        // Under the ceiling's lock: other tests lower the level meanwhile.
        with_ceiling(Level::Avx512, whole_blocks_at_the_cpus_level);
    }

    /// The accumulator after `push_whole_blocks` and `push_f32` of the rest, against `push_f32` of every
    /// decoded value: every lane of every total (Debug tells -0 from 0 and any two f64 apart).
    fn same_accumulator(dtype: DType, vals: &[f32]) {
        let bytes = bytes_of(dtype, vals);
        let mut decoded = vec![0f32; vals.len()];
        tensor::decode_f32_into(dtype, &bytes, &mut decoded).unwrap();
        let limit = dtype.saturation_limit();
        let mut want = StatsAccumulator::new(limit);
        want.push_f32(&decoded);
        let mut got = StatsAccumulator::new(limit);
        let pushed = push_whole_blocks(dtype, &bytes, vals.len(), &mut got);
        let expected = if crate::simd::level() < Level::Avx512 { 0 } else { vals.len() / BLOCK * BLOCK };
        assert_eq!(pushed, expected, "{dtype}: whole blocks only, and only at AVX-512");
        got.push_f32(&decoded[pushed..]);
        assert_eq!(format!("{got:?}"), format!("{want:?}"), "{dtype}, {} values", vals.len());
    }

    fn whole_blocks_at_the_cpus_level() {
        for dtype in [DType::FLOAT16, DType::BF16, DType::FLOAT] {
            for (n, seed) in [(5 * BLOCK + 3, 11), (7 * BLOCK, 12), (BLOCK, 13), (2 * BLOCK - 1, 14)] {
                same_accumulator(dtype, &values(n, seed, true));
                same_accumulator(dtype, &values(n, seed, false));
            }
            // A NaN or an inf in the first, the second, the last block of a pair, or in a lone last block.
            for at in [0, 5, BLOCK + 3, 2 * BLOCK + 7, 3 * BLOCK - 1, 4 * BLOCK + 100] {
                for special in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
                    let mut vals = values(5 * BLOCK, at as u64, false);
                    vals[at] = special;
                    same_accumulator(dtype, &vals);
                }
            }
        }
        assert_eq!(push_whole_blocks(DType::INT8, &[0; 4096], 4096, &mut StatsAccumulator::new(None)), 0);
    }

    #[test]
    fn saturation_limits_as_16_bit_magnitudes() {
        assert_eq!(limit_bits16(0, 65504.0), 0x7BFF);
        assert_eq!(limit_bits16(1, half::bf16::MAX.to_f32()), 0x7F7F);
        assert_eq!(limit_bits16(0, f32::INFINITY), 0x7C00);
        for zero in [0.0, -0.0] {
            assert_eq!((limit_bits16(0, zero), limit_bits16(1, zero)), (0, 0), "|x| == 0 for both zeros");
        }
        // Nothing equals NaN, a negative limit, or one the format cannot hold.
        for (source, limit) in
            [(0, f32::NAN), (1, f32::NAN), (0, -65504.0), (1, -1.0), (0, 65505.0), (1, 1.001)]
        {
            assert_eq!(limit_bits16(source, limit), 0xFFFF, "{source} {limit}");
        }
    }

    #[test]
    fn a_zero_extreme_keeps_the_sign_of_the_lanes_first_zero() {
        // Minima (maxima) that are zeros: which zero a lane keeps depends on the order of its selects.
        let mut x = 5u64;
        for other in [1.5f32, -1.5] {
            let vals: Vec<f32> = (0..5 * BLOCK + 9)
                .map(|_| {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    [0.0, -0.0, other, other][(x >> 62) as usize]
                })
                .collect();
            for dtype in [DType::FLOAT16, DType::BF16, DType::FLOAT] {
                let bytes = bytes_of(dtype, &vals);
                let want = with_ceiling(Level::Portable, || stats_and_hash(dtype, &bytes));
                for level in available() {
                    let got = with_ceiling(level, || stats_and_hash(dtype, &bytes));
                    assert_eq!(show(&got), show(&want), "{dtype} {other} {level:?}");
                }
                with_ceiling(Level::Avx512, || same_accumulator(dtype, &vals));
            }
        }
    }
}
