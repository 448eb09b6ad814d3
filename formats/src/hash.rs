//! The one place that hashes bytes: XXH3-64 with seed 0 and the default secret, the content hash of the
//! capture format (docs/CAPTURE_FORMAT.md), one-shot ([`xxh3_64`]) and streaming ([`Xxh3`]); and XXH64 for
//! the numbers of `mapping.csv` ([`xxh64`]).
//!
//! The implementation is the `twox-hash` crate, which picks its build of XXH3's long-input loop (inputs of
//! more than 240 bytes) at run time, for one-shot and streaming hashes alike: AVX2 on x86_64 CPUs that
//! have it, else SSE2; NEON on aarch64; scalar elsewhere ([`simd_name`] says which). It is the one kernel
//! that does not go through [`crate::simd`]'s level: `simd::with_ceiling` does not lower it. Every build
//! gives the same values (the tests compare them with the reference implementation, `xxhash-rust`, at the
//! build this CPU runs; `twox-hash` tests its builds against each other). Shorter inputs are scalar code
//! at every level.

use std::hash::Hasher as _;
use twox_hash::xxhash3_64::{RawHasher, SecretBuffer};

/// XXH3-64 (seed 0) of `bytes`.
#[inline]
pub fn xxh3_64(bytes: &[u8]) -> u64 {
    twox_hash::XxHash3_64::oneshot(bytes)
}

/// XXH3-64 (seed 0) of bytes fed in pieces: [`update`](Self::update) in order with pieces of any size,
/// then [`digest`](Self::digest), which equals [`xxh3_64`] of the concatenated pieces. No allocation: the
/// state (a 256-byte buffer and the accumulators) lives in the value, and the secret is the static default.
#[derive(Clone)]
pub struct Xxh3(RawHasher<&'static [u8; twox_hash::xxhash3_64::DEFAULT_SECRET_LENGTH]>);

impl Xxh3 {
    /// A hash of nothing yet.
    pub fn new() -> Xxh3 {
        Xxh3(RawHasher::new(SecretBuffer::default()))
    }

    /// Feeds the next bytes.
    #[inline]
    pub fn update(&mut self, bytes: &[u8]) {
        self.0.write(bytes);
    }

    /// The hash of the bytes fed so far (more may be fed after).
    #[inline]
    pub fn digest(&self) -> u64 {
        self.0.finish()
    }

    /// Starts over, as [`Xxh3::new`].
    pub fn reset(&mut self) {
        *self = Xxh3::new();
    }
}

impl Default for Xxh3 {
    fn default() -> Xxh3 {
        Xxh3::new()
    }
}

/// XXH64 of `bytes` with `seed`.
pub fn xxh64(bytes: &[u8], seed: u64) -> u64 {
    twox_hash::XxHash64::oneshot(seed, bytes)
}

/// The instruction set XXH3's long-input loop runs with on this CPU, as `twox-hash` detects it: `avx2` or
/// `sse2` on x86_64, `neon` on aarch64, `scalar` elsewhere.
pub fn simd_name() -> &'static str {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") {
            return "avx2";
        }
        "sse2"
    }
    #[cfg(target_arch = "aarch64")]
    {
        if std::arch::is_aarch64_feature_detected!("neon") {
            return "neon";
        }
        "scalar"
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        "scalar"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Bytes that differ at every position (a hash that skipped or reordered bytes would differ).
    fn bytes(len: usize, salt: u64) -> Vec<u8> {
        let mut x = salt.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 24) as u8
            })
            .collect()
    }

    /// Lengths at every boundary of XXH3's code paths: 0, 1-3, 4-8, 9-16, 17-128, 129-240, the long path
    /// (stripes of 64 bytes, blocks of 1024 with the default secret, the streaming buffer of 256), and
    /// sizes the callers feed (4 KiB chunks, the reader's 16 KiB blocks, a megabyte and a bit).
    const LENGTHS: &[usize] = &[
        0, 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 63, 64, 65, 127, 128, 129, 200, 239, 240, 241, 255,
        256, 257, 511, 512, 513, 1023, 1024, 1025, 1087, 1088, 1089, 2047, 2048, 4096, 4097, 8191, 16384,
        16447, 65536, 1_048_576, 1_048_767,
    ];

    #[test]
    fn one_shot_is_the_reference_xxh3_at_every_path() {
        eprintln!("xxh3 long-input build: {}", simd_name());
        for &len in LENGTHS {
            let data = bytes(len, len as u64);
            assert_eq!(xxh3_64(&data), xxhash_rust::xxh3::xxh3_64(&data), "{len} bytes");
        }
        // The published value of the empty input (XXH3_64bits of "" with seed 0).
        assert_eq!(xxh3_64(b""), 0x2D06_8005_38D3_94C2);
    }

    #[test]
    fn streaming_in_pieces_of_every_size_is_the_one_shot_hash() {
        let mut stream = Xxh3::new();
        for &len in LENGTHS.iter().filter(|&&l| l <= 16447) {
            let data = bytes(len, 7 + len as u64);
            let want = xxhash_rust::xxh3::xxh3_64(&data);
            for piece in [1usize, 3, 63, 64, 65, 240, 255, 256, 257, 1000, 4096] {
                stream.reset();
                for p in data.chunks(piece) {
                    stream.update(p);
                }
                assert_eq!(stream.digest(), want, "{len} bytes in pieces of {piece}");
            }
            // Empty pieces change nothing, and the digest can be read midway.
            stream.reset();
            stream.update(&[]);
            let (a, b) = data.split_at(len / 2);
            stream.update(a);
            assert_eq!(stream.digest(), xxhash_rust::xxh3::xxh3_64(a), "first half of {len}");
            stream.update(&[]);
            stream.update(b);
            assert_eq!(stream.digest(), want, "{len} bytes in two halves");
        }
    }

    #[test]
    fn xxh64_is_the_reference_xxh64() {
        for &len in &LENGTHS[..40] {
            let data = bytes(len, 3);
            for seed in [0, 1, 0x9E37_79B9_7F4A_7C15] {
                assert_eq!(xxh64(&data, seed), xxhash_rust::xxh64::xxh64(&data, seed), "{len} bytes");
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

        /// Random lengths and random split points, one-shot and streaming, against the reference.
        #[test]
        fn random_splits_give_the_reference_hash(
            len in 0usize..20_000,
            salt in any::<u64>(),
            cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..12),
        ) {
            let data = bytes(len, salt);
            let want = xxhash_rust::xxh3::xxh3_64(&data);
            prop_assert_eq!(xxh3_64(&data), want);
            let mut cuts: Vec<usize> = cuts.iter().map(|c| c.index(len + 1)).collect();
            cuts.sort_unstable();
            let mut stream = Xxh3::new();
            let mut from = 0;
            for cut in cuts.into_iter().chain([len]) {
                stream.update(&data[from..cut]);
                from = cut;
            }
            prop_assert_eq!(stream.digest(), want);
        }
    }
}
