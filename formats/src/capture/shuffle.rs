//! Byte shuffle (as in blosc): transpose `n` elements of `width` bytes into `width` planes of `n` bytes.
//!
//! Neighbouring activations share their sign and exponent bytes, so after the shuffle the high-byte plane is
//! long runs that zstd compresses far better than the interleaved original. Trailing bytes that do not make
//! a whole element (ragged input) are copied unchanged at the end, so any byte string round-trips.

/// Writes the shuffle of `src` into `dst` (cleared first). `width <= 1` copies.
pub fn shuffle(src: &[u8], width: usize, dst: &mut Vec<u8>) {
    dst.clear();
    dst.resize(src.len(), 0);
    if width <= 1 {
        dst.copy_from_slice(src);
        return;
    }
    let n = src.len() / width;
    // Plane by plane: each pass reads with a fixed stride and writes sequentially, which the compiler
    // unrolls; for the common widths the per-width instantiation lets it use constant strides.
    match width {
        2 => planes::<2>(src, n, dst),
        4 => planes::<4>(src, n, dst),
        8 => planes::<8>(src, n, dst),
        _ => {
            for b in 0..width {
                for (i, out) in dst[b * n..(b + 1) * n].iter_mut().enumerate() {
                    *out = src[i * width + b];
                }
            }
        }
    }
    dst[n * width..].copy_from_slice(&src[n * width..]);
}

fn planes<const W: usize>(src: &[u8], n: usize, dst: &mut [u8]) {
    let (planes, _) = dst.split_at_mut(n * W);
    let elements = src[..n * W].chunks_exact(W);
    let mut outs: Vec<&mut [u8]> = planes.chunks_exact_mut(n.max(1)).take(W).collect();
    if n == 0 {
        return;
    }
    for (i, e) in elements.enumerate() {
        for b in 0..W {
            outs[b][i] = e[b];
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
