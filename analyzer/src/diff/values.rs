//! How two decodings of one tensor differ: the element-wise figures `diff` reports (differing elements,
//! largest absolute difference, largest distance in ulp), from f32 values or, faster, from the tensors'
//! own bytes.

use crate::sources::{HostBlocks, SliceBlocks};
use accutrace_formats::tensor::decode_f32_into;
use accutrace_formats::DType;
use serde::Serialize;

/// How two matched tensors differ (all zero when their bytes are equal).
#[derive(Clone, Debug, Default, Serialize)]
pub struct TensorDiff {
    pub identical: bool,
    pub elements: u64,
    pub differing: u64,
    pub max_abs_diff: f64,
    /// Largest distance in units in the last place of the tensor's own dtype.
    pub max_ulp: u64,
    /// Whether the element-wise figures were measured (both sides had data). Without data (a
    /// statistics-mode capture) only the hashes and the statistics are known.
    pub measured: bool,
    /// Largest change of min, max, mean or L2 norm, when statistics are known on both sides.
    pub stats_delta: Option<f64>,
    pub error: Option<String>,
    /// Found different by the device's statistics alone (`--mode device-stats`: no content hash, no
    /// values), which differ between the runs (JSON: `by_device_statistics: true`, absent otherwise).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub by_device_statistics: bool,
}

impl TensorDiff {
    pub fn share_differing(&self) -> f64 {
        if self.elements == 0 {
            0.0
        } else {
            self.differing as f64 / self.elements as f64
        }
    }
}

/// Element-wise difference of two decodings. NaN equals NaN here: reproducibility is about bits, and a
/// NaN in both runs at one position is the same result.
pub fn compare_values(dtype: DType, a: &[f32], b: &[f32]) -> TensorDiff {
    let mut d = TensorDiff { elements: a.len().max(b.len()) as u64, measured: true, ..Default::default() };
    if a.len() != b.len() {
        d.differing = d.elements;
        d.max_abs_diff = f64::INFINITY;
        d.max_ulp = u64::MAX;
        d.error = Some(format!("element counts differ: {} vs {}", a.len(), b.len()));
        return d;
    }
    for (&x, &y) in a.iter().zip(b) {
        if x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()) {
            continue;
        }
        d.differing += 1;
        let abs = (f64::from(x) - f64::from(y)).abs();
        d.max_abs_diff = if abs.is_nan() { f64::INFINITY } else { d.max_abs_diff.max(abs) };
        d.max_ulp = d.max_ulp.max(ulp_distance(dtype, x, y));
    }
    d.identical = d.differing == 0;
    d
}

/// Distance in units in the last place of `dtype` (fp16, bf16; fp32 otherwise), via the monotonic
/// integer ordering of IEEE bit patterns. Integers count their plain difference.
pub fn ulp_distance(dtype: DType, x: f32, y: f32) -> u64 {
    fn ordered(bits: u64, sign_bit: u64) -> i128 {
        if bits & sign_bit != 0 {
            -((bits & !sign_bit) as i128)
        } else {
            bits as i128
        }
    }
    let (bx, by, sign) = match dtype {
        DType::FLOAT16 => {
            (half::f16::from_f32(x).to_bits() as u64, half::f16::from_f32(y).to_bits() as u64, 0x8000)
        }
        DType::BF16 => {
            (half::bf16::from_f32(x).to_bits() as u64, half::bf16::from_f32(y).to_bits() as u64, 0x8000)
        }
        d if d.is_float() => (x.to_bits() as u64, y.to_bits() as u64, 0x8000_0000),
        _ => return (f64::from(x) - f64::from(y)).abs().min(u64::MAX as f64) as u64,
    };
    (ordered(bx, sign) - ordered(by, sign)).unsigned_abs().min(u64::MAX as u128) as u64
}

/// Elements per block of [`compare_host_blocks`]: both sides' bytes and an fp16 decoding of them stay in L1.
pub(super) const BLOCK: usize = 1024;

/// [`compare_values`] of the two decodings, computed from the tensors' own host-layout bytes (fp16, bf16,
/// fp32; `None` for other dtypes or byte counts that are not whole elements of equal length: use the
/// values then).
pub fn compare_host_bytes(dtype: DType, a: &[u8], b: &[u8]) -> Option<TensorDiff> {
    compare_host_blocks(dtype, &mut SliceBlocks::new(a), &mut SliceBlocks::new(b))
}

/// [`compare_host_bytes`] of bytes read block by block ([`HostBlocks`]); `None` (before anything is read)
/// where that gives `None`. Equal blocks are skipped by a byte compare; the others are measured in one
/// pass of 32-bit lanes from the raw bits (fp16 decoded to f32 first): elements that differ, the largest
/// distance in ulp, and the largest |x - y| rounded to f32. That rounding is monotonic, so a block whose
/// largest rounded difference is below the largest seen so far holds no element whose exact difference
/// (in f64, as [`compare_values`] takes it) is the tensor's largest: only the other blocks are measured
/// again in f64, which after the first blocks of a tensor is rare. A block with a NaN takes
/// [`compare_values`]' own loop. So every figure is the value path's, bit for bit. This is diff's hot
/// loop: nearly every element downstream of a nondeterministic op differs.
pub fn compare_host_blocks(
    dtype: DType,
    a: &mut dyn HostBlocks,
    b: &mut dyn HostBlocks,
) -> Option<TensorDiff> {
    let (width, mut total) = pair_to_measure(dtype, a, b)?;
    // At most the f32 rounding of the exact difference behind `total.max_abs_diff` (0: none yet). A block
    // whose rounded differences all lie below it cannot raise the maximum.
    let mut total_f32 = 0f32;
    let (mut buf_a, mut buf_b) = ([0u8; BLOCK * 4], [0u8; BLOCK * 4]);
    let (mut fa, mut fb) = ([0f32; BLOCK], [0f32; BLOCK]);
    let mut left = a.len();
    while left > 0 {
        let take = left.min(BLOCK * width);
        left -= take;
        let ca = a.next_block(&mut buf_a[..take]);
        let cb = b.next_block(&mut buf_b[..take]);
        if ca.len() != take || cb.len() != take {
            // A source shorter than it said: not measured (the caller reads the values instead).
            return None;
        }
        if ca == cb {
            continue;
        }
        let n = take / width;
        let (xa, xb) = (&mut fa[..n], &mut fb[..n]);
        let lanes = match dtype {
            DType::FLOAT16 => {
                decode_f32_into(dtype, ca, xa).ok()?;
                decode_f32_into(dtype, cb, xb).ok()?;
                block_kernel::<2, F16>(ca, cb, xa, xb)
            }
            DType::BF16 => block_kernel::<2, BF16>(ca, cb, &[], &[]),
            _ => block_kernel::<4, F32>(ca, cb, &[], &[]),
        };
        match lanes {
            Some(lanes) => {
                total.differing += lanes.differing;
                total.max_ulp = total.max_ulp.max(lanes.max_ulp);
                // Only a block whose rounded maximum reaches the tensor's can hold its exact maximum.
                if lanes.max_abs_f32 > 0.0 && lanes.max_abs_f32 >= total_f32 {
                    total_f32 = lanes.max_abs_f32;
                    total.max_abs_diff = total.max_abs_diff.max(exact_max_abs(dtype, ca, cb, xa, xb));
                }
            }
            // A NaN in the block: compare_values' own loop, which counts NaN against NaN as equal.
            None => {
                decode_f32_into(dtype, ca, xa).ok()?;
                decode_f32_into(dtype, cb, xb).ok()?;
                let d = compare_values(dtype, xa, xb);
                total.differing += d.differing;
                total.max_ulp = total.max_ulp.max(d.max_ulp);
                // `total_f32` stays: a bound at or below the rounding of the maximum is all the skip needs.
                total.max_abs_diff = total.max_abs_diff.max(d.max_abs_diff);
            }
        }
    }
    total.identical = total.differing == 0;
    Some(total)
}

/// The element width of `dtype`'s byte kernel and the pair's figures before any block is read, where the
/// kernel takes the pair: a dtype it has, both sides the same whole number of elements.
pub(super) fn pair_to_measure(
    dtype: DType,
    a: &dyn HostBlocks,
    b: &dyn HostBlocks,
) -> Option<(usize, TensorDiff)> {
    let width = bytes_kernel_width(dtype)?;
    if a.len() != b.len() || !a.len().is_multiple_of(width) {
        return None;
    }
    Some((width, TensorDiff { elements: (a.len() / width) as u64, measured: true, ..Default::default() }))
}

/// Whether [`compare_host_bytes`] measures `dtype`.
pub fn has_bytes_kernel(dtype: DType) -> bool {
    bytes_kernel_width(dtype).is_some()
}

fn bytes_kernel_width(dtype: DType) -> Option<usize> {
    match dtype {
        DType::FLOAT16 | DType::BF16 => Some(2),
        DType::FLOAT => Some(4),
        _ => None,
    }
}

/// How [`block_kernel`] gets an element's value from its bits: fp16 from the decoded `xa`/`xb`, bf16 and
/// fp32 from the bits themselves.
const F16: u8 = 0;
const BF16: u8 = 1;
const F32: u8 = 2;

/// One block's figures from the lanes.
#[derive(Clone, Copy, Debug, Default)]
struct Lanes {
    differing: u64,
    /// The largest |x - y| over differing elements, computed in f32 (correctly rounded).
    max_abs_f32: f32,
    max_ulp: u64,
}

/// Independent accumulators of [`block_kernel`]: lane `l` takes elements `l`, `l + LANES`, ..., so the loop
/// body is the same operation on `LANES` values that LLVM turns into vector instructions.
const LANES: usize = 16;

/// The element `i` of little-endian `W`-byte words, as an integer.
#[inline(always)]
fn word<const W: usize>(bytes: &[u8], i: usize) -> u32 {
    if W == 2 {
        u32::from(u16::from_le_bytes([bytes[2 * i], bytes[2 * i + 1]]))
    } else {
        u32::from_le_bytes([bytes[4 * i], bytes[4 * i + 1], bytes[4 * i + 2], bytes[4 * i + 3]])
    }
}

/// A `W`-byte float's bits (fp16/bf16 or fp32) mapped onto integers in the order of their values
/// (sign-magnitude to two's complement, as [`ulp_distance`] does), branch-free. Both zeros map to 0.
#[inline(always)]
fn ordered<const W: usize>(bits: u32) -> i32 {
    let shift = 8 * W as u32 - 1;
    let magnitude = (bits & ((1u32 << shift) - 1)) as i32;
    let negative = -((bits >> shift) as i32);
    // Two's complement negation where the sign bit is set: (m ^ -1) + 1 = -m.
    (magnitude ^ negative) - negative
}

/// Distance in ulp of two `W`-byte floats' bits: at most 2^32 - 2 (fp32's largest magnitudes of opposite
/// signs), so the difference of the larger and the smaller ordered value fits u32 when taken modulo 2^32.
#[inline(always)]
fn ulp_bits<const W: usize>(x: u32, y: u32) -> u32 {
    let (ox, oy) = (ordered::<W>(x), ordered::<W>(y));
    (ox.max(oy) as u32).wrapping_sub(ox.min(oy) as u32)
}

/// The value of element `i` (bits `bits`) as f32: decoded (`KIND` fp16) or from the bits.
#[inline(always)]
fn value<const KIND: u8>(bits: u32, decoded: &[f32], i: usize) -> f32 {
    match KIND {
        F16 => decoded[i],
        BF16 => f32::from_bits(bits << 16),
        _ => f32::from_bits(bits),
    }
}

/// Calls `element(lane, bits_a, bits_b, x, y)` for every element of a block, in groups of [`LANES`] so
/// that the lane kernels keep one accumulator per lane (the tail's elements go to lane `i % LANES`). Inlined
/// into each kernel's level builds, where the closure is too.
#[inline(always)]
fn for_each_element<const W: usize, const KIND: u8>(
    a: &[u8],
    b: &[u8],
    xa: &[f32],
    xb: &[f32],
    element: &mut impl FnMut(usize, u32, u32, f32, f32),
) {
    let n = a.len() / W;
    let whole = n / LANES * LANES;
    let groups = a.chunks_exact(LANES * W).zip(b.chunks_exact(LANES * W));
    for (g, (ga, gb)) in groups.enumerate() {
        // The group's decoded values (fp16 only; the other dtypes take theirs from the bits).
        let (fx, fy) = if KIND == F16 {
            (&xa[g * LANES..(g + 1) * LANES], &xb[g * LANES..(g + 1) * LANES])
        } else {
            (xa, xb)
        };
        for l in 0..LANES {
            let (ba, bb) = (word::<W>(ga, l), word::<W>(gb, l));
            element(l, ba, bb, value::<KIND>(ba, fx, l), value::<KIND>(bb, fy, l));
        }
    }
    for i in whole..n {
        let (ba, bb) = (word::<W>(a, i), word::<W>(b, i));
        element(i % LANES, ba, bb, value::<KIND>(ba, xa, i), value::<KIND>(bb, xb, i));
    }
}

/// The figures of one block without NaN in 32-bit lanes: elements whose bits differ, the largest distance
/// in ulp of the dtype, and the largest |x - y| in f32 (correctly rounded, so ordered as the exact
/// differences are). `None` when either side holds a NaN. Maxima of non-negative, non-NaN values do not
/// depend on the order they are taken in.
#[inline(always)]
fn block_kernel_lanes<const W: usize, const KIND: u8>(
    a: &[u8],
    b: &[u8],
    xa: &[f32],
    xb: &[f32],
) -> Option<Lanes> {
    let (mut differing, mut max_abs, mut max_ulp, mut nan) =
        ([0u32; LANES], [0f32; LANES], [0u32; LANES], [false; LANES]);
    let mut element = |l: usize, ba: u32, bb: u32, x: f32, y: f32| {
        let differs = ba != bb;
        differing[l] += u32::from(differs);
        // Infinities of opposite sign give an infinite difference; equal infinities have equal bits.
        let d = (x - y).abs();
        let d = if differs { d } else { 0.0 };
        max_abs[l] = if d > max_abs[l] { d } else { max_abs[l] };
        let u = ulp_bits::<W>(ba, bb);
        max_ulp[l] = if u > max_ulp[l] { u } else { max_ulp[l] };
        nan[l] |= x.is_nan() | y.is_nan();
    };
    for_each_element::<W, KIND>(a, b, xa, xb, &mut element);
    if nan.iter().any(|&n| n) {
        return None;
    }
    Some(Lanes {
        differing: differing.iter().map(|&c| u64::from(c)).sum(),
        max_abs_f32: max_abs.iter().fold(0.0, |m, &v| if v > m { v } else { m }),
        max_ulp: u64::from(max_ulp.iter().copied().max().unwrap_or(0)),
    })
}

accutrace_formats::multiversion!(#[inline(never)] fn block_kernel<const W: usize, const KIND: u8>(a: &[u8], b: &[u8], xa: &[f32], xb: &[f32]) -> Option<Lanes> = block_kernel_lanes);

/// The largest |x - y| in f64 over the elements of a block without NaN whose bits differ: what
/// [`compare_values`] takes, for the blocks [`compare_host_blocks`] measures again (in lanes, as
/// [`block_kernel_lanes`]).
#[inline(always)]
fn exact_kernel_lanes<const W: usize, const KIND: u8>(a: &[u8], b: &[u8], xa: &[f32], xb: &[f32]) -> f64 {
    let mut max_abs = [0f64; LANES];
    let mut element = |l: usize, ba: u32, bb: u32, x: f32, y: f32| {
        let d = (f64::from(x) - f64::from(y)).abs();
        let d = if ba != bb { d } else { 0.0 };
        max_abs[l] = if d > max_abs[l] { d } else { max_abs[l] };
    };
    for_each_element::<W, KIND>(a, b, xa, xb, &mut element);
    max_abs.iter().fold(0.0, |m, &v| if v > m { v } else { m })
}

accutrace_formats::multiversion!(#[inline(never)] fn exact_kernel<const W: usize, const KIND: u8>(a: &[u8], b: &[u8], xa: &[f32], xb: &[f32]) -> f64 = exact_kernel_lanes);

fn exact_max_abs(dtype: DType, a: &[u8], b: &[u8], xa: &[f32], xb: &[f32]) -> f64 {
    match dtype {
        DType::FLOAT16 => exact_kernel::<2, F16>(a, b, xa, xb),
        DType::BF16 => exact_kernel::<2, BF16>(a, b, &[], &[]),
        _ => exact_kernel::<4, F32>(a, b, &[], &[]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use accutrace_formats::simd;

    #[test]
    fn ulp_counts_in_the_dtype() {
        let next = half::f16::from_bits(half::f16::from_f32(1.0).to_bits() + 1).to_f32();
        assert_eq!(ulp_distance(DType::FLOAT16, 1.0, next), 1);
        assert_eq!(ulp_distance(DType::FLOAT, 1.0, f32::from_bits(1.0f32.to_bits() + 3)), 3);
        assert_eq!(ulp_distance(DType::FLOAT, -0.0, 0.0), 0);
        assert_eq!(ulp_distance(DType::FLOAT, f32::from_bits(1), -f32::from_bits(1)), 2);
    }

    #[test]
    fn identical_values_are_identical_and_nan_equals_nan() {
        let d = compare_values(DType::FLOAT, &[1.0, f32::NAN], &[1.0, f32::NAN]);
        assert!(d.identical);
        let d = compare_values(DType::FLOAT, &[1.0, 2.0], &[1.0, 2.5]);
        assert_eq!((d.differing, d.max_abs_diff), (1, 0.5));
    }

    /// Random bit patterns (NaNs, infinities, signed zeros, subnormals included), sparse and dense
    /// differences, lengths that end inside a block: the byte kernel's figures equal the value path's.
    #[test]
    fn host_bytes_kernel_equals_the_value_path() {
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let specials16: [u16; 8] = [0x7C00, 0xFC00, 0x7E00, 0x7C01, 0x8000, 0x0000, 0x0001, 0x8001];
        let specials32: [u32; 6] = [0x7F80_0000, 0xFF80_0000, 0x7FC0_0000, 0x8000_0000, 0, 1];
        for dtype in [DType::FLOAT16, DType::BF16, DType::FLOAT] {
            let width = if dtype == DType::FLOAT { 4 } else { 2 };
            for (len, density, specials) in
                [(1, 1, false), (3000, 1, false), (2500, 5, true), (BLOCK * 3, 97, false), (777, 2, true)]
            {
                let mut a = vec![0u8; len * width];
                a.iter_mut().for_each(|x| *x = next() as u8);
                if !specials {
                    // No NaN: keep the exponent below its all-ones pattern.
                    for e in a.chunks_exact_mut(width) {
                        e[width - 1] &= 0xBF;
                    }
                }
                let mut b = a.clone();
                for e in b.chunks_exact_mut(width) {
                    if next() % density == 0 {
                        let r = next();
                        if specials && r % 7 == 0 {
                            if width == 2 {
                                e.copy_from_slice(&specials16[(r >> 8) as usize % 8].to_le_bytes());
                            } else {
                                e.copy_from_slice(&specials32[(r >> 8) as usize % 6].to_le_bytes());
                            }
                        } else {
                            // Nearby (low mantissa bits) or anywhere.
                            e[0] ^= (r >> 8) as u8;
                            if r % 3 == 0 {
                                e[width - 1] ^= (r >> 16) as u8 & if specials { 0xFF } else { 0x3F };
                            }
                        }
                    }
                }
                let decode = |bytes: &[u8]| {
                    let mut v = vec![0f32; len];
                    decode_f32_into(dtype, bytes, &mut v).unwrap();
                    v
                };
                let want = compare_values(dtype, &decode(&a), &decode(&b));
                let figures = |d: &TensorDiff| {
                    (d.identical, d.elements, d.differing, d.max_abs_diff.to_bits(), d.max_ulp, d.measured)
                };
                // Every build of the lane kernel (AVX-512, AVX2, baseline) gives the value path's figures.
                for level in simd::available() {
                    let got = simd::with_ceiling(level, || compare_host_bytes(dtype, &a, &b).unwrap());
                    assert_eq!(
                        figures(&got),
                        figures(&want),
                        "{dtype} len {len} density {density} {level:?}"
                    );
                }
                assert!(want.differing > 0 || len == 1);
            }
        }
        assert!(compare_host_bytes(DType::INT32, &[0; 4], &[0; 4]).is_none());
    }

    /// Differences that round to the same f32 but not to the same f64 (fp16's largest value against
    /// +-2^-24 and 0; 1.0 against +-2^-30 and 0 in bf16 and fp32), one per block, in every order: the
    /// blocks measured again in f64 find the value path's maximum at every level.
    #[test]
    fn differences_equal_in_f32_keep_the_f64_maximum() {
        let cases: [(DType, u32, [u32; 3], f64); 3] = [
            (DType::FLOAT16, 0x7BFF, [0x0001, 0x0000, 0x8001], 65504.0 + 2f64.powi(-24)),
            (DType::BF16, 0x3F80, [0x3080, 0x0000, 0xB080], 1.0 + 2f64.powi(-30)),
            (DType::FLOAT, 0x3F80_0000, [0x3080_0000, 0, 0xB080_0000], 1.0 + 2f64.powi(-30)),
        ];
        let orders = [[0, 1, 2], [0, 2, 1], [1, 0, 2], [1, 2, 0], [2, 0, 1], [2, 1, 0]];
        for (dtype, x, ys, want_max) in cases {
            let width = if dtype == DType::FLOAT { 4 } else { 2 };
            let put = |v: &mut Vec<u8>, bits: u32| v.extend_from_slice(&bits.to_le_bytes()[..width]);
            for order in orders {
                let len = 3 * BLOCK + 17;
                let (mut a, mut b) = (Vec::new(), Vec::new());
                for i in 0..len {
                    let differing = i % BLOCK == 5 && i / BLOCK < 3;
                    put(&mut a, if differing { x } else { 0 });
                    put(&mut b, if differing { ys[order[i / BLOCK]] } else { 0 });
                }
                let decode = |bytes: &[u8]| {
                    let mut v = vec![0f32; len];
                    decode_f32_into(dtype, bytes, &mut v).unwrap();
                    v
                };
                let want = compare_values(dtype, &decode(&a), &decode(&b));
                assert_eq!((want.differing, want.max_abs_diff), (3, want_max), "{dtype}");
                // The premise: the three differences are one value in f32.
                let rounded: Vec<f32> =
                    ys.iter().map(|&y| (x_value(dtype, x) - x_value(dtype, y)) as f32).collect();
                assert!(rounded.windows(2).all(|w| w[0] == w[1]), "{dtype} {rounded:?}");
                every_level_gives(dtype, &a, &b, &want, &format!("{order:?}"));
            }
        }
    }

    /// The value of `bits` of `dtype` in f64.
    /// Every build of the lane kernel gives `want`'s count of differing elements, largest difference (to
    /// the bit) and largest distance in ulp on the host bytes `a`, `b`.
    fn every_level_gives(dtype: DType, a: &[u8], b: &[u8], want: &TensorDiff, case: &str) {
        for level in simd::available() {
            let got = simd::with_ceiling(level, || compare_host_bytes(dtype, a, b).unwrap());
            assert_eq!(
                (got.differing, got.max_abs_diff.to_bits(), got.max_ulp),
                (want.differing, want.max_abs_diff.to_bits(), want.max_ulp),
                "{dtype} {case} {level:?}"
            );
        }
    }

    fn x_value(dtype: DType, bits: u32) -> f64 {
        let bytes = &bits.to_le_bytes()[..if dtype == DType::FLOAT { 4 } else { 2 }];
        let mut v = [0f32];
        decode_f32_into(dtype, bytes, &mut v).unwrap();
        f64::from(v[0])
    }

    /// Blocks written into the caller's buffer (as a capture's planes are unshuffled) give the figures of
    /// the same bytes borrowed; a source that ends early is not measured.
    #[test]
    fn copied_blocks_equal_borrowed_ones_and_short_sources_are_refused() {
        struct Copied<'a>(&'a [u8], usize, usize);
        impl HostBlocks for Copied<'_> {
            fn len(&self) -> usize {
                self.0.len()
            }
            fn next_block<'s>(&'s mut self, buf: &'s mut [u8]) -> &'s [u8] {
                let n = buf.len().min(self.0.len().min(self.2) - self.1);
                buf[..n].copy_from_slice(&self.0[self.1..self.1 + n]);
                self.1 += n;
                &buf[..n]
            }
        }
        let a: Vec<u8> = (0..5000u32).flat_map(|i| ((i * 7919) as u16 & 0x7BFF).to_le_bytes()).collect();
        let b: Vec<u8> =
            (0..5000u32).flat_map(|i| ((i * 7919 + i % 3) as u16 & 0x7BFF).to_le_bytes()).collect();
        for dtype in [DType::FLOAT16, DType::BF16, DType::FLOAT] {
            let want = compare_host_bytes(dtype, &a, &b).unwrap();
            let got =
                compare_host_blocks(dtype, &mut Copied(&a, 0, a.len()), &mut Copied(&b, 0, b.len())).unwrap();
            assert_eq!(
                (got.differing, got.max_abs_diff.to_bits(), got.max_ulp),
                (want.differing, want.max_abs_diff.to_bits(), want.max_ulp)
            );
            assert!(want.differing > 0);
            assert!(compare_host_blocks(dtype, &mut Copied(&a, 0, 4000), &mut SliceBlocks::new(&b)).is_none());
        }
    }

    /// Blocks with infinities, signed zeros, subnormals and the largest finite values but no NaN: the lane
    /// kernel measures them itself (no fallback), and must still give the value path's figures.
    #[test]
    fn lane_kernel_handles_infinities_and_zeros_without_nan() {
        let specials16: [u16; 10] =
            [0x7C00, 0xFC00, 0x8000, 0x0000, 0x0001, 0x8001, 0x7BFF, 0xFBFF, 0x3C00, 0x3C01];
        let specials32: [u32; 10] = [
            0x7F80_0000,
            0xFF80_0000,
            0x8000_0000,
            0,
            1,
            0x8000_0001,
            0x7F7F_FFFF,
            0xFF7F_FFFF,
            0x3F80_0000,
            0x3F80_0001,
        ];
        for dtype in [DType::FLOAT16, DType::BF16, DType::FLOAT] {
            let (mut a, mut b) = (Vec::new(), Vec::new());
            for len in [5usize, 100, 1500] {
                a.clear();
                b.clear();
                for i in 0..len {
                    let (x, y) = (i % 10, (i * 7 + 3) % 10);
                    if dtype == DType::FLOAT {
                        a.extend_from_slice(&specials32[x].to_le_bytes());
                        b.extend_from_slice(&specials32[y].to_le_bytes());
                    } else {
                        a.extend_from_slice(&specials16[x].to_le_bytes());
                        b.extend_from_slice(&specials16[y].to_le_bytes());
                    }
                }
                let decode = |bytes: &[u8]| {
                    let mut v = vec![0f32; len];
                    decode_f32_into(dtype, bytes, &mut v).unwrap();
                    v
                };
                let want = compare_values(dtype, &decode(&a), &decode(&b));
                // fp16 and fp32: opposite infinities meet (bf16's 0x7C00 is a finite 2^121).
                assert!(want.differing > 0 && (dtype == DType::BF16 || want.max_abs_diff.is_infinite()));
                every_level_gives(dtype, &a, &b, &want, &format!("len {len}"));
            }
        }
        assert!(compare_host_bytes(DType::FLOAT16, &[0; 4], &[0; 2]).is_none());
    }
}
