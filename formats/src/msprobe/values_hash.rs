//! The content hash of decoded msprobe values. msprobe's files are pickles with varying framing, so two
//! dumps of the same tensor are told apart by the hash of its values (little-endian f32), not of the file.

/// Feeds the little-endian bytes of `values` to `hasher` through a small buffer (no copy of the whole
/// tensor): xxh3's streaming and one-shot forms give the same hash.
pub(super) fn hash_f32_le(hasher: &mut crate::hash::Xxh3, values: &[f32]) {
    let mut buf = [0u8; 16384];
    for chunk in values.chunks(buf.len() / 4) {
        for (b, v) in buf.chunks_exact_mut(4).zip(chunk) {
            b.copy_from_slice(&v.to_le_bytes());
        }
        hasher.update(&buf[..chunk.len() * 4]);
    }
}

/// [`hash_f32_le`] without the copy where the machine is little-endian: the values' bytes in memory are their
/// little-endian bytes, fed as they lie.
pub(super) fn hash_f32(hasher: &mut crate::hash::Xxh3, values: &[f32]) {
    if cfg!(target_endian = "little") {
        hasher.update(f32_bytes(values));
    } else {
        hash_f32_le(hasher, values);
    }
}

/// `values`' bytes in memory order (zerocopy's view: f32 has no padding, and any alignment suits u8).
pub(super) fn f32_bytes(values: &[f32]) -> &[u8] {
    zerocopy::IntoBytes::as_bytes(values)
}

/// `values`' bytes in memory order, to be written: a positioned read of a little-endian fp32 storage fills
/// them with the values themselves (every bit pattern a write may leave is a valid f32).
pub(super) fn f32_bytes_mut(values: &mut [f32]) -> &mut [u8] {
    zerocopy::IntoBytes::as_mut_bytes(values)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::content_hash;

    #[test]
    fn streamed_hash_is_the_one_shot_hash() {
        for n in [0usize, 1, 3, 4095, 4096, 4097, 100_000] {
            let values: Vec<f32> = (0..n).map(|i| i as f32 * 0.37 - 5.0).collect();
            let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
            let mut hasher = crate::hash::Xxh3::new();
            hash_f32_le(&mut hasher, &values);
            assert_eq!(hasher.digest(), content_hash(&bytes), "{n} values");
            let mut hasher = crate::hash::Xxh3::new();
            hash_f32(&mut hasher, &values);
            assert_eq!(hasher.digest(), content_hash(&bytes), "{n} values, in place");
        }
    }

    #[test]
    fn the_bytes_of_values_are_their_bytes_in_memory() {
        let values = [1.0f32, -2.5, f32::NAN, f32::from_bits(0x0123_4567)];
        let want: Vec<u8> = values.iter().flat_map(|v| v.to_ne_bytes()).collect();
        assert_eq!(f32_bytes(&values), &want[..]);
        let mut written = [0f32; 4];
        f32_bytes_mut(&mut written).copy_from_slice(&want);
        assert!(written.iter().zip(&values).all(|(a, b)| a.to_bits() == b.to_bits()));
        assert!(f32_bytes(&[]).is_empty());
    }
}
