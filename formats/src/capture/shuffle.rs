//! Byte shuffle (as in blosc): transpose `n` elements of `width` bytes into `width` planes of `n` bytes.
//!
//! Neighbouring activations share their sign and exponent bytes, so after the shuffle the high-byte plane is
//! long runs that zstd compresses far better than the interleaved original. Trailing bytes that do not make
//! a whole element (ragged input) are copied unchanged at the end, so any byte string round-trips.
//!
//! Widths 2 and 4 (fp16/bf16, fp32) go through hand-written transposes of the target's baseline (SSE2,
//! NEON) chosen by [`crate::simd`], with a portable version beside them; all give the same bytes (tested).

use crate::simd::{self, Level};

/// Writes the shuffle of `src` into `dst` (cleared first). `width <= 1` copies.
pub fn shuffle(src: &[u8], width: usize, dst: &mut Vec<u8>) {
    dst.clear();
    dst.resize(src.len(), 0);
    shuffle_into(src, width, dst);
}

/// [`shuffle`] into a slice of the same length as `src` (every byte of `dst` is written).
pub fn shuffle_into(src: &[u8], width: usize, dst: &mut [u8]) {
    assert_eq!(src.len(), dst.len(), "shuffle: source and destination lengths differ");
    if width <= 1 {
        dst.copy_from_slice(src);
        return;
    }
    let n = src.len() / width;
    let (planes, tail) = dst.split_at_mut(n * width);
    match width {
        2 => transpose2(&src[..2 * n], planes, n),
        4 => transpose4(&src[..4 * n], planes, n),
        8 => planes8(&src[..8 * n], planes, n),
        _ => {
            for b in 0..width {
                for (i, out) in planes[b * n..(b + 1) * n].iter_mut().enumerate() {
                    *out = src[i * width + b];
                }
            }
        }
    }
    tail.copy_from_slice(&src[n * width..]);
}

/// Elements per group of the transposes: a group's planes are one 16-byte vector each.
const GROUP: usize = 16;

/// Width 2: byte 0 of every element to the first plane, byte 1 to the second. Whole groups go through the
/// vector transpose, the ragged end element by element.
fn transpose2(src: &[u8], planes: &mut [u8], n: usize) {
    let (p0, p1) = planes.split_at_mut(n);
    let done = groups2(src, p0, p1);
    for i in done..n {
        p0[i] = src[2 * i];
        p1[i] = src[2 * i + 1];
    }
}

/// Width 4, as [`transpose2`] with four planes.
fn transpose4(src: &[u8], planes: &mut [u8], n: usize) {
    let (p0, rest) = planes.split_at_mut(n);
    let (p1, rest) = rest.split_at_mut(n);
    let (p2, p3) = rest.split_at_mut(n);
    let done = groups4(src, [&mut *p0, &mut *p1, &mut *p2, &mut *p3]);
    for i in done..n {
        p0[i] = src[4 * i];
        p1[i] = src[4 * i + 1];
        p2[i] = src[4 * i + 2];
        p3[i] = src[4 * i + 3];
    }
}

/// The whole groups of [`transpose2`]; returns the elements done. The hand-written SSE2/NEON transposes at
/// [`Level::Baseline`] and up, the portable groups otherwise.
fn groups2(src: &[u8], p0: &mut [u8], p1: &mut [u8]) -> usize {
    #[cfg(target_arch = "x86_64")]
    if simd::level() >= Level::Baseline {
        // SAFETY: the callee's only requirement is the SSE2 target feature, which is part of the x86_64
        // baseline (every x86_64 CPU has it; rustc enables it for every x86_64 target). The callee itself is
        // safe code: slices in, slices out.
        return unsafe { sse2::transpose2(src, p0, p1) };
    }
    #[cfg(target_arch = "aarch64")]
    if simd::level() >= Level::Baseline {
        return neon::transpose2(src, p0, p1);
    }
    portable_groups2(src, p0, p1)
}

/// The whole groups of [`transpose4`]; returns the elements done. Dispatch as in [`groups2`].
fn groups4(src: &[u8], planes: [&mut [u8]; 4]) -> usize {
    #[cfg(target_arch = "x86_64")]
    if simd::level() >= Level::Baseline {
        // SAFETY: as in `groups2`: SSE2 is part of the x86_64 baseline.
        return unsafe { sse2::transpose4(src, planes) };
    }
    #[cfg(target_arch = "aarch64")]
    if simd::level() >= Level::Baseline {
        return neon::transpose4(src, planes);
    }
    portable_groups4(src, planes)
}

/// Portable whole groups of [`transpose2`]: fixed-size groups that the compiler can unroll.
fn portable_groups2(src: &[u8], p0: &mut [u8], p1: &mut [u8]) -> usize {
    let mut done = 0;
    for ((s, a), b) in
        src.chunks_exact(2 * GROUP).zip(p0.chunks_exact_mut(GROUP)).zip(p1.chunks_exact_mut(GROUP))
    {
        for k in 0..GROUP {
            a[k] = s[2 * k];
            b[k] = s[2 * k + 1];
        }
        done += GROUP;
    }
    done
}

/// Portable whole groups of [`transpose4`].
fn portable_groups4(src: &[u8], planes: [&mut [u8]; 4]) -> usize {
    let [p0, p1, p2, p3] = planes;
    let mut done = 0;
    let groups = src
        .chunks_exact(4 * GROUP)
        .zip(p0.chunks_exact_mut(GROUP))
        .zip(p1.chunks_exact_mut(GROUP))
        .zip(p2.chunks_exact_mut(GROUP).zip(p3.chunks_exact_mut(GROUP)));
    for (((s, a), b), (c, d)) in groups {
        for k in 0..GROUP {
            a[k] = s[4 * k];
            b[k] = s[4 * k + 1];
            c[k] = s[4 * k + 2];
            d[k] = s[4 * k + 3];
        }
        done += GROUP;
    }
    done
}

/// Fixed-size views of a slice's whole `N`-byte chunks.
fn arrays<const N: usize>(s: &[u8]) -> impl Iterator<Item = &[u8; N]> {
    s.chunks_exact(N).filter_map(|c| c.try_into().ok())
}

/// Mutable fixed-size views of a slice's whole `N`-byte chunks.
fn arrays_mut<const N: usize>(s: &mut [u8]) -> impl Iterator<Item = &mut [u8; N]> {
    s.chunks_exact_mut(N).filter_map(|c| c.try_into().ok())
}

/// NEON transposes (aarch64's baseline): the structure loads `ld2`/`ld4` deinterleave 2 or 4 byte planes
/// in one instruction.
#[cfg(target_arch = "aarch64")]
mod neon {
    use super::{arrays, arrays_mut, GROUP};
    use std::arch::aarch64::{
        uint8x16x2_t, uint8x16x4_t, vld1q_u8, vld2q_u8, vld4q_u8, vst1q_u8, vst2q_u8, vst4q_u8,
    };

    pub(super) fn transpose2(src: &[u8], p0: &mut [u8], p1: &mut [u8]) -> usize {
        let mut done = 0;
        for ((s, a), b) in arrays::<32>(src).zip(arrays_mut::<16>(p0)).zip(arrays_mut::<16>(p1)) {
            // SAFETY: `s` is 32 readable bytes, `a` and `b` 16 writable bytes each (byte loads and stores
            // need no alignment); NEON is part of the aarch64 baseline.
            unsafe {
                let v = vld2q_u8(s.as_ptr());
                vst1q_u8(a.as_mut_ptr(), v.0);
                vst1q_u8(b.as_mut_ptr(), v.1);
            }
            done += GROUP;
        }
        done
    }

    pub(super) fn transpose4(src: &[u8], planes: [&mut [u8]; 4]) -> usize {
        let [p0, p1, p2, p3] = planes;
        let mut done = 0;
        let outs = arrays_mut::<16>(p0)
            .zip(arrays_mut::<16>(p1))
            .zip(arrays_mut::<16>(p2).zip(arrays_mut::<16>(p3)));
        for (s, ((a, b), (c, d))) in arrays::<64>(src).zip(outs) {
            // SAFETY: `s` is 64 readable bytes, each plane group 16 writable bytes; NEON is baseline.
            unsafe {
                let v = vld4q_u8(s.as_ptr());
                vst1q_u8(a.as_mut_ptr(), v.0);
                vst1q_u8(b.as_mut_ptr(), v.1);
                vst1q_u8(c.as_mut_ptr(), v.2);
                vst1q_u8(d.as_mut_ptr(), v.3);
            }
            done += GROUP;
        }
        done
    }

    /// The inverse of [`transpose2`]: the structure store `st2` interleaves two planes in one instruction.
    pub(super) fn interleave2(p0: &[u8], p1: &[u8], out: &mut [u8]) -> usize {
        let mut done = 0;
        for ((o, a), b) in arrays_mut::<32>(out).zip(arrays::<16>(p0)).zip(arrays::<16>(p1)) {
            // SAFETY: `a` and `b` are 16 readable bytes each, `o` 32 writable bytes (byte loads and stores
            // need no alignment); NEON is part of the aarch64 baseline.
            unsafe {
                let v = uint8x16x2_t(vld1q_u8(a.as_ptr()), vld1q_u8(b.as_ptr()));
                vst2q_u8(o.as_mut_ptr(), v);
            }
            done += GROUP;
        }
        done
    }

    /// The inverse of [`transpose4`] (`st4`).
    pub(super) fn interleave4(planes: [&[u8]; 4], out: &mut [u8]) -> usize {
        let [p0, p1, p2, p3] = planes;
        let mut done = 0;
        let ins = arrays::<16>(p0).zip(arrays::<16>(p1)).zip(arrays::<16>(p2).zip(arrays::<16>(p3)));
        for (o, ((a, b), (c, d))) in arrays_mut::<64>(out).zip(ins) {
            // SAFETY: each plane group is 16 readable bytes, `o` 64 writable bytes; NEON is baseline.
            unsafe {
                let v = uint8x16x4_t(
                    vld1q_u8(a.as_ptr()),
                    vld1q_u8(b.as_ptr()),
                    vld1q_u8(c.as_ptr()),
                    vld1q_u8(d.as_ptr()),
                );
                vst4q_u8(o.as_mut_ptr(), v);
            }
            done += GROUP;
        }
        done
    }
}

/// SSE2 transposes (the x86_64 baseline; the compiler does not vectorize byte deinterleaves without SSSE3).
/// Safe code throughout: vectors are built from and stored to slices through 64-bit integers, which the
/// compiler turns into unaligned 16-byte loads and stores.
#[cfg(target_arch = "x86_64")]
mod sse2 {
    use super::{arrays, arrays_mut, GROUP};
    use std::arch::x86_64::*;

    #[inline]
    #[target_feature(enable = "sse2")]
    fn load(b: &[u8; 16]) -> __m128i {
        let (lo, hi) = b.split_at(8);
        let le = |h: &[u8]| i64::from_le_bytes(h.try_into().unwrap_or([0; 8]));
        _mm_set_epi64x(le(hi), le(lo))
    }

    #[inline]
    #[target_feature(enable = "sse2")]
    fn store(v: __m128i, out: &mut [u8; 16]) {
        let (lo, hi) = out.split_at_mut(8);
        lo.copy_from_slice(&_mm_cvtsi128_si64(v).to_le_bytes());
        hi.copy_from_slice(&_mm_cvtsi128_si64(_mm_unpackhi_epi64(v, v)).to_le_bytes());
    }

    /// Low and high bytes of the 16-bit lanes of `x` then `y`: (16 low bytes, 16 high bytes).
    #[inline]
    #[target_feature(enable = "sse2")]
    fn split16(x: __m128i, y: __m128i) -> (__m128i, __m128i) {
        let mask = _mm_set1_epi16(0xff);
        let lo = _mm_packus_epi16(_mm_and_si128(x, mask), _mm_and_si128(y, mask));
        let hi = _mm_packus_epi16(_mm_srli_epi16::<8>(x), _mm_srli_epi16::<8>(y));
        (lo, hi)
    }

    /// Low and high 16-bit halves of the 32-bit lanes of `x` then `y` (sign-extended first, so the signed
    /// saturating pack of SSE2 keeps every bit pattern).
    #[inline]
    #[target_feature(enable = "sse2")]
    fn split32(x: __m128i, y: __m128i) -> (__m128i, __m128i) {
        let low = |v| _mm_srai_epi32::<16>(_mm_slli_epi32::<16>(v));
        let lo = _mm_packs_epi32(low(x), low(y));
        let hi = _mm_packs_epi32(_mm_srai_epi32::<16>(x), _mm_srai_epi32::<16>(y));
        (lo, hi)
    }

    #[target_feature(enable = "sse2")]
    pub(super) fn transpose2(src: &[u8], p0: &mut [u8], p1: &mut [u8]) -> usize {
        let mut done = 0;
        for ((s, a), b) in arrays::<32>(src).zip(arrays_mut::<16>(p0)).zip(arrays_mut::<16>(p1)) {
            let (x, y) = s.split_at(16);
            let (Ok(x), Ok(y)) = (<&[u8; 16]>::try_from(x), <&[u8; 16]>::try_from(y)) else { break };
            let (lo, hi) = split16(load(x), load(y));
            store(lo, a);
            store(hi, b);
            done += GROUP;
        }
        done
    }

    #[target_feature(enable = "sse2")]
    pub(super) fn transpose4(src: &[u8], planes: [&mut [u8]; 4]) -> usize {
        let [p0, p1, p2, p3] = planes;
        let mut done = 0;
        let outs = arrays_mut::<16>(p0)
            .zip(arrays_mut::<16>(p1))
            .zip(arrays_mut::<16>(p2).zip(arrays_mut::<16>(p3)));
        for (s, ((a, b), (c, d))) in arrays::<64>(src).zip(outs) {
            let mut v = [_mm_setzero_si128(); 4];
            for (v, q) in v.iter_mut().zip(arrays::<16>(s)) {
                *v = load(q);
            }
            // 16-bit halves of elements 0..8 and 8..16, then their bytes.
            let (l0, h0) = split32(v[0], v[1]);
            let (l1, h1) = split32(v[2], v[3]);
            let (b0, b1) = split16(l0, l1);
            let (b2, b3) = split16(h0, h1);
            store(b0, a);
            store(b1, b);
            store(b2, c);
            store(b3, d);
            done += GROUP;
        }
        done
    }

    /// The inverse of [`transpose2`]: bytes of the two planes interleaved (`punpcklbw`/`punpckhbw`).
    #[target_feature(enable = "sse2")]
    pub(super) fn interleave2(p0: &[u8], p1: &[u8], out: &mut [u8]) -> usize {
        let mut done = 0;
        for ((o, a), b) in arrays_mut::<32>(out).zip(arrays::<16>(p0)).zip(arrays::<16>(p1)) {
            let (x, y) = (load(a), load(b));
            let (lo, hi) = o.split_at_mut(16);
            let (Ok(lo), Ok(hi)) = (<&mut [u8; 16]>::try_from(lo), <&mut [u8; 16]>::try_from(hi)) else {
                break;
            };
            store(_mm_unpacklo_epi8(x, y), lo);
            store(_mm_unpackhi_epi8(x, y), hi);
            done += GROUP;
        }
        done
    }

    /// The inverse of [`transpose4`]: planes 0/1 and 2/3 interleaved by bytes, then the pairs by 16 bits.
    #[target_feature(enable = "sse2")]
    pub(super) fn interleave4(planes: [&[u8]; 4], out: &mut [u8]) -> usize {
        let [p0, p1, p2, p3] = planes;
        let mut done = 0;
        let ins = arrays::<16>(p0).zip(arrays::<16>(p1)).zip(arrays::<16>(p2).zip(arrays::<16>(p3)));
        for (o, ((a, b), (c, d))) in arrays_mut::<64>(out).zip(ins) {
            let (a, b, c, d) = (load(a), load(b), load(c), load(d));
            // Bytes 0-1 and 2-3 of elements 0..8 and 8..16.
            let (ab0, ab1) = (_mm_unpacklo_epi8(a, b), _mm_unpackhi_epi8(a, b));
            let (cd0, cd1) = (_mm_unpacklo_epi8(c, d), _mm_unpackhi_epi8(c, d));
            let quarters = [
                _mm_unpacklo_epi16(ab0, cd0),
                _mm_unpackhi_epi16(ab0, cd0),
                _mm_unpacklo_epi16(ab1, cd1),
                _mm_unpackhi_epi16(ab1, cd1),
            ];
            for (q, out) in quarters.into_iter().zip(arrays_mut::<16>(o)) {
                store(q, out);
            }
            done += GROUP;
        }
        done
    }
}

/// Width 8 (fp64, complex128 parts): one strided pass per element, unrolled by the constant width.
fn planes8(src: &[u8], planes: &mut [u8], n: usize) {
    for (i, e) in src.chunks_exact(8).enumerate() {
        for (b, &byte) in e.iter().enumerate() {
            planes[b * n + i] = byte;
        }
    }
}

/// Undoes [`shuffle`]: writes the original byte order of `src` into `dst` (same length). Widths 2 and 4
/// interleave whole groups with the same dispatch as the shuffle (SSE2 / NEON / portable, same bytes).
pub fn unshuffle(src: &[u8], width: usize, dst: &mut [u8]) {
    debug_assert_eq!(src.len(), dst.len());
    let len = src.len().min(dst.len());
    if width <= 1 {
        dst[..len].copy_from_slice(&src[..len]);
        return;
    }
    let n = len / width;
    interleave(&src[..len], n, width, 0, &mut dst[..n * width]);
    dst[n * width..len].copy_from_slice(&src[n * width..len]);
}

/// Writes bytes `start..start + out.len()` of [`unshuffle`]'s output for `src` into `out`, without the
/// rest: readers that take a tensor block by block (into a buffer that stays in cache) instead of writing
/// it whole and reading it back. Any range of `src`'s length; the same bytes at every level.
pub fn unshuffle_range(src: &[u8], width: usize, start: usize, out: &mut [u8]) {
    let end = start + out.len();
    assert!(end <= src.len(), "unshuffle_range: bytes {start}..{end} of {}", src.len());
    if width <= 1 {
        out.copy_from_slice(&src[start..end]);
        return;
    }
    let n = src.len() / width;
    let whole = n * width;
    // Byte `pos` of the output, one at a time: for a range that starts or ends inside an element, and the
    // ragged tail (stored as it is).
    let byte = |pos: usize| if pos < whole { src[(pos % width) * n + pos / width] } else { src[pos] };
    let head = (start.next_multiple_of(width) - start).min(out.len());
    for (k, o) in out[..head].iter_mut().enumerate() {
        *o = byte(start + k);
    }
    let first = start + head;
    let count = end.min(whole).saturating_sub(first) / width;
    let (elements, rest) = out[head..].split_at_mut(count * width);
    if count > 0 {
        interleave(src, n, width, first / width, elements);
    }
    let from = first + count * width;
    for (k, o) in rest.iter_mut().enumerate() {
        *o = byte(from + k);
    }
}

/// Elements `first..first + out.len() / width` of the `width` planes of `n` bytes at the start of `src`,
/// interleaved into `out`.
fn interleave(src: &[u8], n: usize, width: usize, first: usize, out: &mut [u8]) {
    let count = out.len() / width;
    let plane = |b: usize| &src[b * n + first..b * n + first + count];
    // Element widths up to 16 bytes without an allocation per call; wider ones are rare.
    let mut few: [&[u8]; 16] = [&[]; 16];
    if width <= few.len() {
        for (b, p) in few[..width].iter_mut().enumerate() {
            *p = plane(b);
        }
        return interleave_planes(&few[..width], out);
    }
    interleave_planes(&(0..width).map(plane).collect::<Vec<_>>(), out)
}

/// [`interleave`] of planes given one slice each (a tensor's planes read in pieces): element `i` of `out`
/// (`out.len() / planes.len()` of them) takes its byte `b` from `planes[b][i]`. The same bytes at every level.
pub(crate) fn interleave_planes(planes: &[&[u8]], out: &mut [u8]) {
    let width = planes.len();
    if width == 0 {
        return;
    }
    let count = out.len() / width;
    let plane = |b: usize| &planes[b][..count];
    let done = match width {
        2 => ungroups2(plane(0), plane(1), out),
        4 => ungroups4([plane(0), plane(1), plane(2), plane(3)], out),
        _ => 0,
    };
    for b in 0..width {
        for (i, &v) in plane(b)[done..].iter().enumerate() {
            out[(done + i) * width + b] = v;
        }
    }
}

/// The whole groups of the width-2 unshuffle (planes `p0`, `p1` of equal length into `out`); returns the
/// elements done. Dispatch as in [`groups2`].
fn ungroups2(p0: &[u8], p1: &[u8], out: &mut [u8]) -> usize {
    #[cfg(target_arch = "x86_64")]
    if simd::level() >= Level::Baseline {
        // SAFETY: as in `groups2`: SSE2 is part of the x86_64 baseline; the callee is safe code.
        return unsafe { sse2::interleave2(p0, p1, out) };
    }
    #[cfg(target_arch = "aarch64")]
    if simd::level() >= Level::Baseline {
        return neon::interleave2(p0, p1, out);
    }
    portable_ungroups2(p0, p1, out)
}

/// The whole groups of the width-4 unshuffle; returns the elements done. Dispatch as in [`groups2`].
fn ungroups4(planes: [&[u8]; 4], out: &mut [u8]) -> usize {
    #[cfg(target_arch = "x86_64")]
    if simd::level() >= Level::Baseline {
        // SAFETY: as in `groups2`: SSE2 is part of the x86_64 baseline; the callee is safe code.
        return unsafe { sse2::interleave4(planes, out) };
    }
    #[cfg(target_arch = "aarch64")]
    if simd::level() >= Level::Baseline {
        return neon::interleave4(planes, out);
    }
    portable_ungroups4(planes, out)
}

/// Portable whole groups of the width-2 unshuffle.
fn portable_ungroups2(p0: &[u8], p1: &[u8], out: &mut [u8]) -> usize {
    let mut done = 0;
    for ((o, a), b) in out.chunks_exact_mut(2 * GROUP).zip(p0.chunks_exact(GROUP)).zip(p1.chunks_exact(GROUP))
    {
        for k in 0..GROUP {
            o[2 * k] = a[k];
            o[2 * k + 1] = b[k];
        }
        done += GROUP;
    }
    done
}

/// Portable whole groups of the width-4 unshuffle.
fn portable_ungroups4(planes: [&[u8]; 4], out: &mut [u8]) -> usize {
    let [p0, p1, p2, p3] = planes;
    let mut done = 0;
    let groups = out
        .chunks_exact_mut(4 * GROUP)
        .zip(p0.chunks_exact(GROUP))
        .zip(p1.chunks_exact(GROUP))
        .zip(p2.chunks_exact(GROUP).zip(p3.chunks_exact(GROUP)));
    for (((o, a), b), (c, d)) in groups {
        for k in 0..GROUP {
            o[4 * k] = a[k];
            o[4 * k + 1] = b[k];
            o[4 * k + 2] = c[k];
            o[4 * k + 3] = d[k];
        }
        done += GROUP;
    }
    done
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn planes_are_transposed() {
        let src = [1, 2, 3, 4, 5, 6, 7];
        let mut out = Vec::new();
        shuffle(&src, 2, &mut out);
        assert_eq!(out, [1, 3, 5, 2, 4, 6, 7]);
        let mut back = [0; 7];
        unshuffle(&out, 2, &mut back);
        assert_eq!(back, src);
    }

    #[test]
    fn vector_transposes_match_the_definition() {
        for width in [2usize, 3, 4, 8] {
            for len in [0usize, 31, 32, 33, 64 * width + 5, 1000 * width + 3] {
                let src: Vec<u8> = (0..len).map(|i| (i * 97 % 256) as u8).collect();
                let n = len / width;
                let mut want = vec![0u8; len];
                for i in 0..n {
                    for b in 0..width {
                        want[b * n + i] = src[i * width + b];
                    }
                }
                want[n * width..].copy_from_slice(&src[n * width..]);
                for level in simd::available() {
                    let mut out = Vec::new();
                    simd::with_ceiling(level, || shuffle(&src, width, &mut out));
                    assert_eq!(out, want, "width {width} len {len} {level:?}");
                    // The inverse at the same level gives the original bytes back.
                    let mut back = vec![0xA5u8; len];
                    simd::with_ceiling(level, || unshuffle(&want, width, &mut back));
                    assert_eq!(back, src, "unshuffle width {width} len {len} {level:?}");
                }
            }
        }
    }

    /// A tensor unshuffled in blocks of any size (element-aligned or not, ragged tail included) is the
    /// whole unshuffle, at every level.
    #[test]
    fn ranges_are_the_whole_unshuffle_in_pieces() {
        for width in [1usize, 2, 3, 4, 8] {
            for len in [0usize, 5, 33, 64 * width + 5, 1000 * width + 3] {
                let src: Vec<u8> = (0..len).map(|i| (i * 131 % 251) as u8).collect();
                let mut want = vec![0u8; len];
                unshuffle(&src, width, &mut want);
                for level in simd::available() {
                    for piece in [1usize, 3, 16 * width, 100 * width + 1, 4096] {
                        let mut got = Vec::new();
                        let mut start = 0;
                        while start < len {
                            let mut out = vec![0xA5u8; piece.min(len - start)];
                            simd::with_ceiling(level, || unshuffle_range(&src, width, start, &mut out));
                            got.extend_from_slice(&out);
                            start += out.len();
                        }
                        assert_eq!(got, want, "width {width} len {len} piece {piece} {level:?}");
                    }
                }
            }
        }
    }

    /// Planes handed over one slice each (as a capture's stored blocks and decoded frames are) interleave to
    /// the bytes `unshuffle_range` gives from the planes in one slice, at every level.
    #[test]
    fn planes_in_separate_slices_interleave_as_one_slice_does() {
        for width in [1usize, 2, 3, 4, 8] {
            for len in [0usize, 7 * width, 64 * width, 1000 * width] {
                let src: Vec<u8> = (0..len).map(|i| (i * 131 % 251) as u8).collect();
                let n = len / width;
                for level in simd::available() {
                    for (first, count) in [(0, n), (n / 3, n / 2), (n.saturating_sub(5), 5.min(n))] {
                        let mut want = vec![0u8; count * width];
                        simd::with_ceiling(level, || unshuffle_range(&src, width, first * width, &mut want));
                        let planes: Vec<&[u8]> =
                            (0..width).map(|b| &src[b * n + first..b * n + first + count]).collect();
                        let mut got = vec![0xA5u8; count * width];
                        simd::with_ceiling(level, || interleave_planes(&planes, &mut got));
                        assert_eq!(got, want, "width {width} len {len} from {first} {level:?}");
                    }
                }
            }
        }
    }

    proptest! {
        #[test]
        fn round_trip(data in proptest::collection::vec(any::<u8>(), 0..300), width in 0usize..17) {
            let mut out = Vec::new();
            shuffle(&data, width, &mut out);
            prop_assert_eq!(out.len(), data.len());
            let mut back = vec![0; data.len()];
            unshuffle(&out, width, &mut back);
            prop_assert_eq!(back, data);
        }
    }
}
