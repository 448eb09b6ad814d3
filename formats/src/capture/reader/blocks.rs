//! [`TensorBlocks`]: a tensor's data read in order, block by block, each block hashed as it is read, and
//! its values decoded to f32 (on one thread here, on several in [`parallel_decode`](super::parallel_decode)).

use super::TensorBlocks;
use crate::capture::planes::{Joined, PlaneBytes};
use crate::Result;

/// The bytes [`TensorBlocks::decode_f32_into`] decodes at a time: whole elements of every width (up to 16
/// bytes), and whole steps of the hardware fp16 conversion (8 values), so that every block but the last
/// takes the path a whole decode gives the same values, and the last the same ragged tail.
pub(super) const DECODE_BLOCK: usize = 32 << 10;
const _: () = assert!(DECODE_BLOCK.is_multiple_of(16 * 8));

/// Data of at least this many bytes is decoded to f32 on several threads where the pool has them
/// ([`TensorBlocks::decode_in_parallel`]). Below it the tasks would cost more than they save, and compare
/// runs pairs of such tensors on every thread at once where the memory budget lets it (the largest tensors
/// of a medium:4 capture, 1 MiB of fp16, on both threads of a 2-core machine), so that splitting their
/// decode would only add the tasks' cost.
const PARALLEL_DECODE_MIN: usize = 2 << 20;
/// The bytes one parallel task unshuffles and decodes: whole [`DECODE_BLOCK`]s, so that its blocks start
/// where the serial loop's do.
pub(super) const PARALLEL_CHUNK: usize = 2 * DECODE_BLOCK;
/// At most this many chunks at once: the two wave buffers (one decoded while the other is hashed) hold at
/// most 2 x 16 x 64 KiB = 2 MiB while a tensor is read.
const PARALLEL_WAVE_MAX: usize = 16;
/// At least this many chunks at once, however few the threads: each wave costs a join and a wake-up.
const PARALLEL_WAVE_MIN: usize = 8;

impl<'a> TensorBlocks<'a> {
    pub(super) fn new(planes: PlaneBytes<'a>, width: usize) -> TensorBlocks<'a> {
        let (hasher, joined) = (crate::hash::Xxh3::new(), Joined::default());
        TensorBlocks { planes, width, pos: 0, hasher, joined, failed: false }
    }

    /// The data's size in bytes.
    pub fn len(&self) -> usize {
        self.planes.len()
    }

    /// Whether the data is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The next `min(buf.len(), bytes left)` bytes of the data, unshuffled into `buf` or lent as stored.
    pub fn next_block<'s>(&'s mut self, buf: &'s mut [u8]) -> &'s [u8] {
        let n = buf.len().min(self.len() - self.pos);
        self.failed = self.failed || !self.planes.prepare(self.width, self.pos, self.pos + n);
        if self.failed {
            // Not the data: zeros stand in for it, and the read reports the error once `f` returns.
            self.pos += n;
            buf[..n].fill(0);
            return &buf[..n];
        }
        let block = self.planes.read(self.width, self.pos, &mut buf[..n], &mut self.joined);
        self.hasher.update(block);
        self.pos += n;
        block
    }

    /// Decodes the data as `dtype` values into `out` (one lane per element, two for complex; resized to
    /// fit, its memory reused and only its growth zeroed), block by block as it is read: the values
    /// [`decode_reusing`](crate::tensor::host::decode_reusing) gives for the whole bytes, bit for bit,
    /// without a copy of the whole bytes. `Ok(false)`, with nothing read, where the data is not whole
    /// elements of `dtype` (or `dtype` has sub-byte elements, or none that decode) or some was read already:
    /// the caller then decodes the whole bytes, which reports what is wrong. Like everything read from the
    /// blocks, the values stand only once the content hash has matched
    /// ([`StreamReader::with_tensor_blocks_at`]).
    ///
    /// [`StreamReader::with_tensor_blocks_at`]: super::StreamReader::with_tensor_blocks_at
    pub fn decode_f32_into(&mut self, dtype: crate::DType, out: &mut Vec<f32>) -> Result<bool> {
        self.decode_f32_into_from(dtype, out, PARALLEL_DECODE_MIN, |threads| {
            threads.clamp(PARALLEL_WAVE_MIN, PARALLEL_WAVE_MAX)
        })
    }

    /// [`decode_f32_into`](Self::decode_f32_into), split over the current rayon pool's threads
    /// ([`decode_in_parallel`](Self::decode_in_parallel), `chunks(threads)` chunks a wave) where the data is
    /// at least `parallel_min` bytes and the pool has more than one.
    pub(super) fn decode_f32_into_from(
        &mut self,
        dtype: crate::DType,
        out: &mut Vec<f32>,
        parallel_min: usize,
        chunks: impl Fn(usize) -> usize,
    ) -> Result<bool> {
        let width = match dtype.bits() {
            Some(bits) if bits >= 8 && bits % 8 == 0 => bits as usize / 8,
            _ => return Ok(false),
        };
        let lanes = crate::tensor::lanes_per_element(dtype);
        let total = (self.len() / width).checked_mul(lanes);
        let Some(total) =
            total.filter(|_| dtype.is_decodable() && self.pos == 0 && self.len().is_multiple_of(width))
        else {
            return Ok(false);
        };
        if out.len() < total {
            out.resize(total, 0.0);
        } else {
            out.truncate(total);
        }
        let threads = rayon::current_num_threads();
        if self.len() >= parallel_min && threads > 1 && PARALLEL_CHUNK.is_multiple_of(width) {
            self.decode_in_parallel(dtype, width, lanes, out, chunks(threads))?;
            return Ok(true);
        }
        let mut buf = [0u8; DECODE_BLOCK];
        let mut at = 0;
        while self.pos < self.len() {
            let block = self.next_block(&mut buf);
            let n = block.len() / width * lanes;
            crate::tensor::decode_f32_into(dtype, block, &mut out[at..at + n])?;
            at += n;
        }
        Ok(true)
    }

    /// Reads what is left (hashing it) and returns the hash of the whole data; `None` where zstd failed on
    /// a frame read a window at a time.
    pub(super) fn finish(mut self) -> Option<u64> {
        let mut buf = [0u8; 16 << 10];
        while self.pos < self.len() && !self.failed {
            self.next_block(&mut buf);
        }
        (!self.failed).then(|| self.hasher.digest())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::encode::encode_data;
    use crate::capture::planes::WINDOW_BYTES;
    use crate::capture::reader::test_data::*;
    use crate::{simd, DType};
    use std::path::Path;

    /// Tensors of every byte width (fp16 with signalling NaNs, which the hardware conversion quiets and
    /// the scalar one keeps, throughout and in the ragged tail), stored whole or in pieces, of sizes that
    /// shrink and grow into one reused buffer, at every SIMD level: decoded block by block they are the
    /// whole decode's values bit for bit, and the hash still matches. Data that is not whole elements, and
    /// sub-byte or undecodable types, are left to the whole decode, untouched.
    #[test]
    fn values_decoded_block_by_block_are_the_whole_decodes() {
        let mut out = Vec::new();
        let mut quieted = 0;
        for (dtype, width) in BYTE_DTYPES {
            for elements in [70_001, 5, 0, 3, DECODE_BLOCK / width * 3 + 13, 1_000] {
                let mut raw = tensor(width, elements * width, elements as u64 + 11);
                if width == 2 {
                    // Signalling NaNs of both signs: every 16th element and the last three.
                    for (i, e) in raw.chunks_exact_mut(2).enumerate() {
                        if i % 16 == 5 || i + 3 >= elements {
                            e.copy_from_slice(
                                &(0x7C01u16 | (i as u16 & 0x8000 | (i as u16 % 0x100))).to_le_bytes(),
                            );
                        }
                    }
                }
                let encoded = encode_data(&raw, dtype, 1).unwrap();
                let s = stored(encoded.payload(), encoded.encoding(), &raw);
                let bytes = read_whole(&s).unwrap();
                let whole_at = |level| {
                    let mut whole = Vec::new();
                    simd::with_ceiling(level, || {
                        crate::tensor::host::decode_reusing(dtype, &bytes, elements, &mut whole).unwrap()
                    });
                    whole
                };
                let top = whole_at(simd::detected());
                for level in simd::available() {
                    // Garbage left from the last tensor, longer or shorter than this one.
                    out.iter_mut().for_each(|v| *v = -7.0);
                    let path = Path::new("t");
                    let mut scratch = Vec::new();
                    let (planes, planes_width) = s.plane_bytes(path, &mut scratch, WINDOW_BYTES).unwrap();
                    let mut blocks = TensorBlocks::new(planes, planes_width);
                    let taken =
                        simd::with_ceiling(level, || blocks.decode_f32_into(dtype, &mut out)).unwrap();
                    assert!(taken, "{dtype} {elements}");
                    s.check_hash(path, blocks.finish().unwrap()).unwrap();
                    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<u32>>();
                    let whole = whole_at(level);
                    assert!(bits(&out) == bits(&whole), "{dtype}, {elements} elements, {level:?}");
                    quieted += usize::from(bits(&top) != bits(&whole));
                }
            }
        }
        // The hardware conversion quiets the signalling NaNs that the portable one keeps: the levels differ
        // in bits, so a block that split a hardware step differently would show.
        if simd::available().len() > 1 {
            assert!(quieted > 0);
        }
        // Ragged data, a sub-byte type and an undecodable one: nothing read, `out` untouched.
        let raw = tensor(4, 4 * 100 + 1, 3);
        let encoded = encode_data(&raw, DType::FLOAT, 1).unwrap();
        let s = stored(encoded.payload(), encoded.encoding(), &raw);
        for dtype in [DType::FLOAT, DType::INT4, DType::STRING] {
            let mut scratch = Vec::new();
            let (planes, planes_width) = s.plane_bytes(Path::new("t"), &mut scratch, WINDOW_BYTES).unwrap();
            let mut blocks = TensorBlocks::new(planes, planes_width);
            out = vec![1.0; 9];
            assert!(!blocks.decode_f32_into(dtype, &mut out).unwrap(), "{dtype}");
            assert_eq!((blocks.pos, out.len()), (0, 9), "{dtype}");
        }
    }
}
