//! Byte shuffle (as in blosc): transpose `n` elements of `width` bytes into `width` planes of `n` bytes.
//!
//! Neighbouring activations share their sign and exponent bytes, so after the shuffle the high-byte plane is
//! long runs that zstd compresses far better than the interleaved original. Trailing bytes that do not make
//! a whole element (ragged input) are copied unchanged at the end, so any byte string round-trips.

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

/// Width 2: byte 0 of every element to the first plane, byte 1 to the second. The loop body over fixed-size
/// groups has no bounds checks, so the compiler turns it into vector deinterleaves (SSE2: mask, shift and
/// pack; NEON: uzp); the ragged end goes element by element.
fn transpose2(src: &[u8], planes: &mut [u8], n: usize) {
    let (p0, p1) = planes.split_at_mut(n);
    let groups = src.chunks_exact(2 * GROUP).zip(p0.chunks_exact_mut(GROUP)).zip(p1.chunks_exact_mut(GROUP));
    for ((s, a), b) in groups {
        for k in 0..GROUP {
            a[k] = s[2 * k];
            b[k] = s[2 * k + 1];
        }
    }
    for i in n / GROUP * GROUP..n {
        p0[i] = src[2 * i];
        p1[i] = src[2 * i + 1];
    }
}

/// Width 4, as [`transpose2`] with four planes.
fn transpose4(src: &[u8], planes: &mut [u8], n: usize) {
    let (p0, rest) = planes.split_at_mut(n);
    let (p1, rest) = rest.split_at_mut(n);
    let (p2, p3) = rest.split_at_mut(n);
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
    }
    for i in n / GROUP * GROUP..n {
        p0[i] = src[4 * i];
        p1[i] = src[4 * i + 1];
        p2[i] = src[4 * i + 2];
        p3[i] = src[4 * i + 3];
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

/// Undoes [`shuffle`]: writes the original byte order of `src` into `dst` (same length).
pub fn unshuffle(src: &[u8], width: usize, dst: &mut [u8]) {
    debug_assert_eq!(src.len(), dst.len());
    let len = src.len().min(dst.len());
    if width <= 1 {
        dst[..len].copy_from_slice(&src[..len]);
        return;
    }
    let n = len / width;
    for b in 0..width {
        let plane = &src[b * n..(b + 1) * n];
        for (i, &v) in plane.iter().enumerate() {
            dst[i * width + b] = v;
        }
    }
    dst[n * width..len].copy_from_slice(&src[n * width..len]);
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
                let mut out = Vec::new();
                shuffle(&src, width, &mut out);
                assert_eq!(out, want, "width {width} len {len}");
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
