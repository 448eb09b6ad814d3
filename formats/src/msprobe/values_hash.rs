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
        }
    }
}
