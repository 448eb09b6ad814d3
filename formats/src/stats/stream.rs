//! The statistics, hash and histogram of a tensor whose bytes come in pieces ([`StatsStream`]): the same
//! chunks as the one-pass functions decode, so the same bits.

use super::of_bytes::{ChunkPlan, CHUNK};
use super::{Histogram, HistogramAccumulator, StatsAccumulator, TensorStats};
use crate::{DType, FormatError, Result};

/// [`stats_and_hash`] (and [`stats_hash_and_histogram`]) of a tensor whose bytes come in pieces: feed them
/// in order with [`update`](Self::update), in pieces of any size (a piece may end inside an element), then
/// [`finish`](Self::finish). The results are bit for bit those of the whole-tensor functions on the
/// concatenated bytes: the stream carries partial chunks over to the next piece and decodes exactly the
/// 2048-value chunks the whole-tensor pass decodes, and XXH3's streaming digest equals its one-shot
/// hash. A piece is decoded where it lies; only a chunk split across pieces is copied (into a buffer of one
/// chunk). [`reset`](Self::reset) reuses the stream's buffers for the next tensor.
///
/// [`stats_and_hash`]: super::stats_and_hash
/// [`stats_hash_and_histogram`]: super::stats_hash_and_histogram
pub struct StatsStream {
    dtype: DType,
    /// `Err` for a dtype without statistics (the hash is still computed).
    plan: Result<ChunkPlan>,
    hasher: crate::hash::Xxh3,
    acc: StatsAccumulator,
    hist: Option<HistogramAccumulator>,
    /// Bytes of the chunk in progress (fewer than a chunk).
    carry: Vec<u8>,
    /// Bytes seen.
    len: u64,
    /// The first decoding error, after which nothing more is decoded.
    failed: Option<FormatError>,
    buf32: Box<[f32; CHUNK]>,
    buf64: Box<[f64; CHUNK]>,
}

impl StatsStream {
    /// A stream for a tensor of `dtype`; with `histogram`,
    /// [`finish_with_histogram`](Self::finish_with_histogram) also gives its histogram.
    pub fn new(dtype: DType, histogram: bool) -> StatsStream {
        StatsStream {
            dtype,
            plan: ChunkPlan::of(dtype),
            hasher: crate::hash::Xxh3::new(),
            acc: StatsAccumulator::new(dtype.saturation_limit()),
            hist: histogram.then(HistogramAccumulator::new),
            carry: Vec::new(),
            len: 0,
            failed: None,
            buf32: Box::new([0.0; CHUNK]),
            buf64: Box::new([0.0; CHUNK]),
        }
    }

    /// Starts over for a new tensor, keeping the buffers.
    pub fn reset(&mut self, dtype: DType, histogram: bool) {
        self.dtype = dtype;
        self.plan = ChunkPlan::of(dtype);
        self.hasher.reset();
        self.acc = StatsAccumulator::new(dtype.saturation_limit());
        self.hist = histogram.then(HistogramAccumulator::new);
        self.carry.clear();
        self.len = 0;
        self.failed = None;
    }

    /// Bytes fed so far.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether nothing was fed yet.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Feeds the tensor's next bytes.
    pub fn update(&mut self, mut bytes: &[u8]) {
        self.hasher.update(bytes);
        self.len += bytes.len() as u64;
        let plan = match &self.plan {
            Ok(plan) if self.failed.is_none() => *plan,
            _ => return,
        };
        if !self.carry.is_empty() {
            let take = (plan.chunk_bytes - self.carry.len()).min(bytes.len());
            self.carry.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
            if self.carry.len() < plan.chunk_bytes {
                return;
            }
            let carry = std::mem::take(&mut self.carry);
            self.push_full(&plan, &carry);
            self.carry = carry;
            self.carry.clear();
        }
        let mut chunks = bytes.chunks_exact(plan.chunk_bytes);
        for chunk in &mut chunks {
            self.push_full(&plan, chunk);
        }
        self.carry.extend_from_slice(chunks.remainder());
    }

    fn push_full(&mut self, plan: &ChunkPlan, chunk: &[u8]) {
        if self.failed.is_some() {
            return;
        }
        let pushed = plan.push(
            self.dtype,
            chunk,
            plan.per_chunk,
            &mut self.acc,
            self.hist.as_mut(),
            &mut self.buf32[..],
            &mut self.buf64[..],
        );
        if let Err(e) = pushed {
            self.failed = Some(e);
        }
    }

    /// What [`stats_and_hash`] gives for the bytes fed.
    ///
    /// [`stats_and_hash`]: super::stats_and_hash
    pub fn finish(&mut self) -> (Result<TensorStats>, u64) {
        let (stats, hash) = self.finish_all();
        (stats.map(|(s, _)| s), hash)
    }

    /// What [`stats_hash_and_histogram`] gives for the bytes fed (a stream made without `histogram` gives
    /// an empty histogram).
    ///
    /// [`stats_hash_and_histogram`]: super::stats_hash_and_histogram
    pub fn finish_with_histogram(&mut self) -> (Result<(TensorStats, Histogram)>, u64) {
        self.finish_all()
    }

    fn finish_all(&mut self) -> (Result<(TensorStats, Histogram)>, u64) {
        let hash = self.hasher.digest();
        let plan = match &self.plan {
            Ok(plan) => *plan,
            Err(e) => return (Err(e.clone()), hash),
        };
        // The whole-tensor pass refuses ragged bytes before decoding anything.
        if let Err(e) = plan.check_whole(self.dtype, self.len) {
            return (Err(e), hash);
        }
        if let Some(e) = &self.failed {
            return (Err(e.clone()), hash);
        }
        if !self.carry.is_empty() {
            // The last chunk: the elements of the bytes left (fewer than a chunk's).
            let elements = plan.elements(self.carry.len() as u64);
            let carry = std::mem::take(&mut self.carry);
            let pushed = plan.push(
                self.dtype,
                &carry,
                elements,
                &mut self.acc,
                self.hist.as_mut(),
                &mut self.buf32[..],
                &mut self.buf64[..],
            );
            self.carry = carry;
            self.carry.clear();
            if let Err(e) = pushed {
                self.failed = Some(e.clone());
                return (Err(e), hash);
            }
        }
        let hist = self.hist.as_ref().map(HistogramAccumulator::finish).unwrap_or_default();
        (Ok((self.acc.finish(), hist)), hash)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::of_bytes::SMALL;
    use crate::stats::{content_hash, stats_and_hash, stats_hash_and_histogram};
    use crate::tensor;
    use half::f16;

    /// Feeds `bytes` to a stream cut at `cuts` (positions, any order, clamped) and checks every result bit
    /// for bit against the whole-tensor functions.
    fn stream_equals_whole(stream: &mut StatsStream, dtype: DType, bytes: &[u8], cuts: &[usize], hist: bool) {
        let mut cuts: Vec<usize> = cuts.iter().map(|&c| c.min(bytes.len())).collect();
        cuts.sort_unstable();
        stream.reset(dtype, hist);
        let mut at = 0;
        for c in cuts.into_iter().chain([bytes.len()]) {
            stream.update(&bytes[at..c]);
            at = c;
        }
        assert_eq!(stream.len(), bytes.len() as u64);
        let show = |r: &Result<(TensorStats, Histogram)>| match r {
            // Debug of f64 prints the shortest string that round-trips: equal strings, equal bits.
            Ok((s, h)) => format!("{s:?} {h:?}"),
            Err(e) => format!("error {e}"),
        };
        let (got, got_hash) = stream.finish_with_histogram();
        if hist {
            let (want, want_hash) = stats_hash_and_histogram(dtype, bytes);
            assert_eq!((show(&got), got_hash), (show(&want), want_hash), "{dtype}, {} bytes", bytes.len());
        } else {
            let (want, want_hash) = stats_and_hash(dtype, bytes);
            let want = want.map(|s| (s, Histogram::default()));
            assert_eq!((show(&got), got_hash), (show(&want), want_hash), "{dtype}, {} bytes", bytes.len());
        }
        assert_eq!(got_hash, content_hash(bytes), "the hash the reader checks");
    }

    /// Values that exercise every path: normal values, zeros, saturated values and, in some chunks, NaN and
    /// infinities (as raw bytes of each dtype).
    fn varied_bytes(dtype: DType, len: usize, seed: u64) -> Vec<u8> {
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut out = Vec::with_capacity(len);
        while out.len() < len {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let v = ((x >> 11) as f64 / (1u64 << 53) as f64 - 0.5) * 600.0;
            let v = match x % 4001 {
                0 => f64::NAN,
                1 => f64::INFINITY,
                2 => f64::NEG_INFINITY,
                3..=40 => 0.0,
                41..=60 => 65504.0,
                _ => v,
            };
            match dtype {
                DType::FLOAT16 => out.extend(f16::from_f64(v).to_bits().to_le_bytes()),
                DType::BF16 => out.extend(half::bf16::from_f64(v).to_bits().to_le_bytes()),
                DType::FLOAT => out.extend((v as f32).to_le_bytes()),
                DType::DOUBLE => out.extend(v.to_le_bytes()),
                _ => out.extend(x.to_le_bytes()),
            }
        }
        out.truncate(len);
        out
    }

    // The stream has no unsafe code of its own; these tests push megabytes, too slow under Miri.
    #[test]
    #[cfg_attr(miri, ignore)]
    fn a_stream_equals_the_whole_pass_at_chunk_edges() {
        // Splits at, just before and just after the decoder's chunks, inside elements, in pieces of 7 and 11.
        let mut stream = StatsStream::new(DType::FLOAT16, false);
        for dtype in [DType::FLOAT16, DType::BF16, DType::FLOAT, DType::DOUBLE, DType::INT8, DType::INT4] {
            let size = dtype.byte_size(CHUNK as u64).unwrap() as usize;
            for len in [0, 1, 3, size - 1, size, size + 1, 3 * size + 5, 3 * size + 6] {
                let bytes = varied_bytes(dtype, len, len as u64);
                for cuts in
                    [vec![], vec![0], vec![1], vec![size - 1], vec![size, size + 1], vec![len / 2, len / 3]]
                {
                    for hist in [false, true] {
                        stream_equals_whole(&mut stream, dtype, &bytes, &cuts, hist);
                    }
                }
                if len < 3 * size {
                    let every: Vec<usize> = (0..len).step_by(7).chain((0..len).step_by(11)).collect();
                    stream_equals_whole(&mut stream, dtype, &bytes, &every, true);
                }
            }
        }
        // A dtype without statistics still hashes; ragged bytes give the whole pass's error.
        stream_equals_whole(&mut stream, DType::STRING, b"abcdef", &[2], false);
        stream_equals_whole(&mut stream, DType::FLOAT, &[1; 4099], &[4096, 4098], false);
        stream_equals_whole(&mut stream, DType::COMPLEX64, &[0; 8 * CHUNK + 12], &[5, 8 * CHUNK], false);
    }

    #[test]
    fn small_tensors_give_what_the_chunk_sized_buffers_give() {
        // The whole pass decodes a tensor of at most SMALL values through a buffer of that size; the
        // stream always decodes through its chunk-sized ones. Both lane types, complex (2 values per
        // element), sub-byte, at and around the edge, at every SIMD level.
        let mut stream = StatsStream::new(DType::FLOAT16, false);
        for level in crate::simd::available() {
            crate::simd::with_ceiling(level, || {
                for dtype in [
                    DType::FLOAT16,
                    DType::BF16,
                    DType::FLOAT,
                    DType::DOUBLE,
                    DType::INT32,
                    DType::INT64,
                    DType::INT8,
                    DType::INT4,
                    DType::COMPLEX64,
                    DType::COMPLEX128,
                ] {
                    let lanes = tensor::lanes_per_element(dtype);
                    for values in [0, 1, 7, SMALL - 1, SMALL, SMALL + 1, 2 * SMALL] {
                        let elements = (values / lanes) as u64;
                        let len = dtype.byte_size(elements).unwrap() as usize;
                        let bytes = varied_bytes(dtype, len, values as u64);
                        for hist in [false, true] {
                            stream_equals_whole(&mut stream, dtype, &bytes, &[], hist);
                        }
                    }
                }
            });
        }
    }

    #[test]
    #[cfg_attr(miri, ignore)]
    fn a_stream_equals_the_whole_pass_at_every_simd_level() {
        let bytes = varied_bytes(DType::FLOAT16, 5 * 4096 + 6, 7);
        let mut stream = StatsStream::new(DType::FLOAT16, false);
        for level in crate::simd::available() {
            crate::simd::with_ceiling(level, || {
                stream_equals_whole(&mut stream, DType::FLOAT16, &bytes, &[1, 4095, 4097, 9999], false);
            });
        }
    }

    proptest::proptest! {
        #[test]
        #[cfg_attr(miri, ignore)]
        fn a_stream_split_anywhere_equals_the_whole_pass(
            which in 0usize..8,
            len in 0usize..20_000,
            seed in proptest::prelude::any::<u64>(),
            cuts in proptest::collection::vec(0usize..20_000, 0..12),
            hist in proptest::prelude::any::<bool>(),
        ) {
            let dtype = [
                DType::FLOAT16, DType::BF16, DType::FLOAT, DType::DOUBLE, DType::INT8, DType::INT32,
                DType::INT4, DType::COMPLEX64,
            ][which];
            let bytes = varied_bytes(dtype, len, seed);
            let mut stream = StatsStream::new(dtype, hist);
            stream_equals_whole(&mut stream, dtype, &bytes, &cuts, hist);
        }
    }
}
