//! The statistics of a tensor's raw bytes in one pass: decoded chunk by chunk through stack buffers by the
//! shared tensor decoder, each chunk hashed (and put in the histogram) while it is in cache.

use super::accumulator::{BLOCK, LANES};
use super::{content_hash, Histogram, HistogramAccumulator, StatsAccumulator, TensorStats};
use crate::tensor;
use crate::{DType, FormatError, Result};

/// Values decoded per chunk by [`TensorStats::of_bytes`] (a multiple of [`BLOCK`], so that pushing a tensor
/// chunk by chunk and pushing it whole give bit-identical results).
pub(super) const CHUNK: usize = 2048;
const _: () = assert!(CHUNK.is_multiple_of(BLOCK) && BLOCK.is_multiple_of(LANES));
/// The values of the buffer [`TensorStats::of_bytes`] decodes a tensor into when the whole tensor fits.
pub(super) const SMALL: usize = 256;
const _: () = assert!(SMALL <= CHUNK);

impl TensorStats {
    /// Statistics of the raw little-endian bytes of `dtype` values, decoded by the shared tensor decoder
    /// ([`tensor::decode_f32_into`]) chunk by chunk through stack buffers: no allocation, whatever the size.
    /// 32/64-bit integers and fp64 go through f64 lanes (f32 would round `i32::MAX` off its limit). The element
    /// count is `bytes * 8 / bits` (a packed int4 tensor of odd length counts its padding nibble); bytes that
    /// do not make whole elements and dtypes the decoder refuses are errors.
    pub fn of_bytes(dtype: DType, bytes: &[u8]) -> Result<TensorStats> {
        Self::of_bytes_visiting(dtype, bytes, None, |_| {})
    }

    /// [`of_bytes`](Self::of_bytes) and the tensor's [`Histogram`] from the same decoded chunks.
    pub fn of_bytes_with_histogram(dtype: DType, bytes: &[u8]) -> Result<(TensorStats, Histogram)> {
        let mut hist = HistogramAccumulator::new();
        let stats = Self::of_bytes_visiting(dtype, bytes, Some(&mut hist), |_| {})?;
        Ok((stats, hist.finish()))
    }

    /// [`of_bytes`](Self::of_bytes) that also hands every raw chunk, in order, to `visit` right before the
    /// chunk is decoded (while it is in cache): the chunks concatenate to `bytes` when the result is `Ok`.
    /// With `hist`, the decoded values also go into it (a pass of its own over the chunk, still in L1).
    fn of_bytes_visiting(
        dtype: DType,
        bytes: &[u8],
        mut hist: Option<&mut HistogramAccumulator>,
        mut visit: impl FnMut(&[u8]),
    ) -> Result<TensorStats> {
        let plan = ChunkPlan::of(dtype)?;
        plan.check_whole(dtype, bytes.len() as u64)?;
        let elements = plan.elements(bytes.len() as u64);
        let mut acc = StatsAccumulator::new(dtype.saturation_limit());
        // Most tensors of a dump are small, and zeroing a whole chunk's buffers took longer than the
        // statistics of a tensor of 64 values: a tensor that fits in SMALL values (one chunk) is decoded
        // through a buffer of that size, of its lane type only.
        if elements.min(plan.per_chunk) as usize * plan.lanes <= SMALL {
            for chunk in bytes.chunks(plan.chunk_bytes) {
                visit(chunk);
                if plan.wide {
                    plan.push(
                        dtype,
                        chunk,
                        elements,
                        &mut acc,
                        hist.as_deref_mut(),
                        &mut [],
                        &mut [0f64; SMALL],
                    )?;
                } else {
                    plan.push(
                        dtype,
                        chunk,
                        elements,
                        &mut acc,
                        hist.as_deref_mut(),
                        &mut [0f32; SMALL],
                        &mut [],
                    )?;
                }
            }
            return Ok(acc.finish());
        }
        let mut left = elements;
        // One reused stack buffer per lane type (8 KiB / 16 KiB: stays in L1 next to the chunk's bytes).
        let mut buf32 = [0f32; CHUNK];
        let mut buf64 = [0f64; CHUNK];
        for chunk in bytes.chunks(plan.chunk_bytes) {
            let n = left.min(plan.per_chunk);
            left -= n;
            visit(chunk);
            plan.push(dtype, chunk, n, &mut acc, hist.as_deref_mut(), &mut buf32, &mut buf64)?;
        }
        Ok(acc.finish())
    }
}

/// How [`TensorStats::of_bytes`] cuts a tensor's bytes into chunks of [`CHUNK`] values (the last one
/// shorter) and decodes each: shared by the whole-tensor pass and [`StatsStream`], so that both push the
/// same chunks and get the same bits.
///
/// [`StatsStream`]: super::StatsStream
#[derive(Clone, Copy, Debug)]
pub(super) struct ChunkPlan {
    bits: u32,
    lanes: usize,
    /// Elements per chunk.
    pub(super) per_chunk: u64,
    /// Bytes per chunk (`per_chunk` elements).
    pub(super) chunk_bytes: usize,
    /// 32/64-bit integers and fp64 go through f64 lanes (f32 would round `i32::MAX` off its limit).
    wide: bool,
}

impl ChunkPlan {
    pub(super) fn of(dtype: DType) -> Result<ChunkPlan> {
        let bits = dtype
            .bits()
            .filter(|_| dtype.is_decodable())
            .ok_or_else(|| FormatError::whole(format!("no statistics for dtype {dtype}")))?;
        let lanes = tensor::lanes_per_element(dtype);
        // CHUNK is a multiple of 8, so chunks of sub-byte types start on byte boundaries.
        let per_chunk = (CHUNK / lanes) as u64;
        let chunk_bytes = dtype.byte_size(per_chunk).unwrap_or(1).max(1) as usize;
        let wide = matches!(
            dtype,
            DType::DOUBLE
                | DType::COMPLEX128
                | DType::INT32
                | DType::QINT32
                | DType::UINT32
                | DType::INT64
                | DType::UINT64
        );
        Ok(ChunkPlan { bits, lanes, per_chunk, chunk_bytes, wide })
    }

    /// Elements in `len` bytes (a packed int4 tensor of odd length counts its padding nibble).
    pub(super) fn elements(&self, len: u64) -> u64 {
        len * 8 / u64::from(self.bits)
    }

    /// An error unless `len` bytes make whole elements.
    pub(super) fn check_whole(&self, dtype: DType, len: u64) -> Result<()> {
        let whole = dtype.byte_size(self.elements(len)).unwrap_or(0);
        if whole != len {
            return Err(FormatError::at(
                whole,
                format!("{len} bytes are not a whole number of {dtype} elements"),
            ));
        }
        Ok(())
    }

    /// Decodes the `elements` elements of `chunk` into the accumulator (and the histogram), through
    /// `buf64` when the plan is wide, else `buf32`: that buffer holds at least the chunk's values.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn push(
        &self,
        dtype: DType,
        chunk: &[u8],
        elements: u64,
        acc: &mut StatsAccumulator,
        hist: Option<&mut HistogramAccumulator>,
        buf32: &mut [f32],
        buf64: &mut [f64],
    ) -> Result<()> {
        let n = elements as usize * self.lanes;
        if self.wide {
            tensor::decode_f64_into(dtype, chunk, &mut buf64[..n])?;
            acc.push_f64(&buf64[..n]);
            if let Some(h) = hist {
                h.push_f64(&buf64[..n]);
            }
        } else {
            // Whole blocks of fp16, bf16 and f32 straight from the bytes where the CPU can (the histogram
            // needs the decoded values); what is left is decoded here. Same bits either way.
            let done = if hist.is_none() { super::fused::push_whole_blocks(dtype, chunk, n, acc) } else { 0 };
            let rest = &chunk[dtype.byte_size(done as u64).unwrap_or(0) as usize..];
            tensor::decode_f32_into(dtype, rest, &mut buf32[..n - done])?;
            acc.push_f32(&buf32[..n - done]);
            if let Some(h) = hist {
                h.push_f32(&buf32[..n]);
            }
        }
        Ok(())
    }
}

/// The statistics ([`TensorStats::of_bytes`]) and the content hash ([`content_hash`]) of a tensor in ONE
/// pass over its bytes: each chunk is hashed and decoded while it is in cache, so the tensor is read from
/// memory once instead of twice. The hash is computed whether or not the statistics succeed, and both
/// results are exactly those of the two separate functions.
pub fn stats_and_hash(dtype: DType, bytes: &[u8]) -> (Result<TensorStats>, u64) {
    let mut hasher = crate::hash::Xxh3::new();
    match TensorStats::of_bytes_visiting(dtype, bytes, None, |chunk| hasher.update(chunk)) {
        Ok(stats) => (Ok(stats), hasher.digest()),
        Err(e) => (Err(e), content_hash(bytes)),
    }
}

/// [`stats_and_hash`] plus the tensor's [`Histogram`], still in one pass over its bytes (the histogram
/// takes the decoded values of each chunk while they are in L1). The statistics and hash are exactly
/// [`stats_and_hash`]'s.
pub fn stats_hash_and_histogram(dtype: DType, bytes: &[u8]) -> (Result<(TensorStats, Histogram)>, u64) {
    let mut hasher = crate::hash::Xxh3::new();
    let mut hist = HistogramAccumulator::new();
    match TensorStats::of_bytes_visiting(dtype, bytes, Some(&mut hist), |chunk| hasher.update(chunk)) {
        Ok(stats) => (Ok((stats, hist.finish())), hasher.digest()),
        Err(e) => (Err(e), content_hash(bytes)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::tests::fp16_bytes;

    #[test]
    fn fp16_saturation_is_counted_both_signs() {
        let values = [65504.0, -65504.0, 65504.0, 1.0, 60000.0, f32::INFINITY];
        let s = TensorStats::of_bytes(DType::FLOAT16, &fp16_bytes(&values)).unwrap();
        assert_eq!(s.at_saturation, 3);
        assert_eq!(s.pos_inf, 1);
        assert_eq!(s.max, 65504.0);
        assert!(s.shows_overflow(DType::FLOAT16));
        let ok = TensorStats::of_bytes(DType::FLOAT16, &fp16_bytes(&[1.0, 2.0])).unwrap();
        assert!(!ok.shows_overflow(DType::FLOAT16));
    }

    #[test]
    fn integer_limits_are_exact() {
        let bytes: Vec<u8> =
            [i32::MAX, -i32::MAX, 5, i32::MIN].iter().flat_map(|v| v.to_le_bytes()).collect();
        let s = TensorStats::of_bytes(DType::INT32, &bytes).unwrap();
        assert_eq!(s.at_saturation, 2);
        assert_eq!(s.min, f64::from(i32::MIN));
        assert!(!s.shows_overflow(DType::INT32), "saturated integers are not overflow evidence");
    }

    #[test]
    fn bytes_and_values_agree_across_chunks() {
        // More than one CHUNK and not a multiple of LANES, with specials spread around.
        let values: Vec<f32> = (0..5003)
            .map(|i| match i % 997 {
                0 => f32::NAN,
                1 => f32::INFINITY,
                _ => ((i as f32) * 0.37).sin() * 100.0,
            })
            .collect();
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        let a = TensorStats::of_bytes(DType::FLOAT, &bytes).unwrap();
        let b = TensorStats::of_f32(&values, DType::FLOAT);
        assert_eq!(a, b);
        assert_eq!(a.count, 5003);
        assert_eq!(a.nan, 6);
        let naive_sum: f64 = values.iter().filter(|v| v.is_finite()).map(|&v| f64::from(v)).sum();
        assert!((a.mean * a.finite() as f64 - naive_sum).abs() < 1e-6);
    }

    #[test]
    fn bf16_and_f64() {
        let bytes: Vec<u8> =
            [1.5f32, -2.0].iter().flat_map(|&v| half::bf16::from_f32(v).to_bits().to_le_bytes()).collect();
        let s = TensorStats::of_bytes(DType::BF16, &bytes).unwrap();
        assert_eq!((s.min, s.max, s.mean), (-2.0, 1.5, -0.25));
        let bytes: Vec<u8> = [f64::MAX, 1e300].iter().flat_map(|v| v.to_le_bytes()).collect();
        let s = TensorStats::of_bytes(DType::DOUBLE, &bytes).unwrap();
        assert_eq!((s.at_saturation, s.max), (1, f64::MAX));
    }

    #[test]
    fn ragged_bytes_are_an_error() {
        let err = TensorStats::of_bytes(DType::FLOAT, &[0; 7]).unwrap_err();
        assert_eq!(err.offset, Some(4));
        assert!(TensorStats::of_bytes(DType::STRING, &[0; 8]).is_err());
        assert!(TensorStats::of_bytes(DType::COMPLEX64, &[0; 12]).is_err());
    }

    #[test]
    fn other_dtypes_go_through_the_shared_decoder() {
        // int4, two per byte, low nibble first: 0x7F -> (-1, 7); 0x80 -> (0, -8).
        let s = TensorStats::of_bytes(DType::INT4, &[0x7F, 0x80]).unwrap();
        assert_eq!((s.count, s.min, s.max, s.zero, s.at_saturation), (4, -8.0, 7.0, 1, 1));
        // complex64: parts are values.
        let bytes: Vec<u8> = [1.0f32, f32::NAN, -2.0, 0.0].iter().flat_map(|v| v.to_le_bytes()).collect();
        let s = TensorStats::of_bytes(DType::COMPLEX64, &bytes).unwrap();
        assert_eq!((s.count, s.nan, s.zero, s.min), (4, 1, 1, -2.0));
        // Many chunks of uint1 bits.
        let s = TensorStats::of_bytes(DType::UINT1, &[0xFF; 1000]).unwrap();
        assert_eq!((s.count, s.mean), (8000, 1.0));
    }

    #[test]
    fn stats_and_hash_equal_the_separate_functions() {
        for len in [0usize, 1, 2, 6, 4094, 4096, 4098, 3 * 4 * CHUNK + 10] {
            let bytes: Vec<u8> = (0..len).map(|i| (i * 131 % 251) as u8).collect();
            for dtype in [DType::FLOAT16, DType::BF16, DType::FLOAT, DType::DOUBLE, DType::INT8, DType::INT4]
            {
                let (stats, hash) = stats_and_hash(dtype, &bytes);
                assert_eq!(hash, content_hash(&bytes), "{dtype} {len}");
                match (stats, TensorStats::of_bytes(dtype, &bytes)) {
                    (Ok(a), Ok(b)) => assert_eq!(format!("{a:?}"), format!("{b:?}"), "{dtype} {len}"),
                    (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string()),
                    (a, b) => panic!("{dtype} {len}: {a:?} vs {b:?}"),
                }
            }
        }
        let (stats, hash) = stats_and_hash(DType::STRING, b"abc");
        assert!(stats.is_err());
        assert_eq!(hash, content_hash(b"abc"));
    }

    #[test]
    fn the_histogram_pass_changes_nothing_else_and_counts_every_chunk() {
        for dtype in [DType::FLOAT16, DType::BF16, DType::FLOAT, DType::DOUBLE, DType::INT32, DType::INT8] {
            let len = 3 * 4 * CHUNK + 10;
            let bytes: Vec<u8> = (0..len).map(|i| (i * 131 % 251) as u8).collect();
            let bytes = &bytes[..len / 8 * 8];
            let (with, hash) = stats_hash_and_histogram(dtype, bytes);
            let (stats, hist) = with.unwrap();
            let (plain, plain_hash) = stats_and_hash(dtype, bytes);
            assert_eq!((format!("{stats:?}"), hash), (format!("{:?}", plain.unwrap()), plain_hash));
            hist.validate(stats.finite() - stats.zero).unwrap();
            let mut values = Vec::new();
            let elements = bytes.len() * 8 / dtype.bits().unwrap() as usize;
            tensor::decode_f64(dtype, bytes, elements, &mut values).unwrap();
            let mut acc = HistogramAccumulator::new();
            acc.push_f64(&values);
            assert_eq!(hist, acc.finish(), "{dtype}");
        }
    }
}
