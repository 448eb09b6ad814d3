//! A large tensor's values decoded on the current rayon pool's threads, a wave of chunks at a time, while
//! the previous wave's bytes are hashed beside them; the wave buffers kept per thread ([`WaveBuffers`]).

use super::blocks::{DECODE_BLOCK, PARALLEL_CHUNK};
use super::TensorBlocks;
use crate::capture::planes::Joined;
use crate::Result;

/// The two wave buffers of a parallel decode (at most 2 x `PARALLEL_WAVE_MAX` x `PARALLEL_CHUNK` =
/// 2 MiB), kept per thread between tensors: allocated and freed per tensor, on whichever thread of the pool
/// read it, they stayed behind in that thread's malloc arena (compare on 16 cores: 91 MiB anonymous against
/// 60 with glibc's mmap threshold fixed). A reader that runs reads on other threads for one thread lends
/// them with [`swap_wave_buffers`], so that they stay that thread's.
#[derive(Debug, Default)]
pub struct WaveBuffers(Vec<u8>, Vec<u8>);

thread_local! {
    static WAVE_BUFFERS: std::cell::RefCell<WaveBuffers> =
        const { std::cell::RefCell::new(WaveBuffers(Vec::new(), Vec::new())) };
}

/// Swaps `buffers` with this thread's wave buffers ([`WaveBuffers`]).
pub fn swap_wave_buffers(buffers: &mut WaveBuffers) {
    WAVE_BUFFERS.with(|b| std::mem::swap(&mut *b.borrow_mut(), buffers));
}

impl WaveBuffers {
    /// Bytes they hold.
    pub fn capacity(&self) -> usize {
        self.0.capacity() + self.1.capacity()
    }
}

impl TensorBlocks<'_> {
    /// The values of `width`-byte `dtype` elements (`lanes` f32 each) decoded into `out`, which fits them,
    /// on up to `chunks` threads: the data goes in waves of `chunks` chunks of [`PARALLEL_CHUNK`] bytes,
    /// each chunk unshuffled and decoded by one task into its own part of a wave buffer and of `out`, in
    /// blocks at the offsets of the serial loop (so the same values, bit for bit), while the previous wave's
    /// bytes are hashed, in order, beside them. So the wave buffers hold the unshuffled bytes until they
    /// are hashed; data stored in order (raw, or 1-byte elements in one slice) is decoded and hashed where
    /// it lies, with no buffer. On an error, what was hashed stands as read (`pos`), so that
    /// [`finish`](Self::finish) hashes the rest as the serial loop leaves it to.
    pub(super) fn decode_in_parallel(
        &mut self,
        dtype: crate::DType,
        width: usize,
        lanes: usize,
        out: &mut [f32],
        chunks: usize,
    ) -> Result<()> {
        use rayon::prelude::*;
        let len = self.len();
        let (planes, plane_width, hasher) = (&mut self.planes, self.width, &mut self.hasher);
        let in_order = planes.in_order(plane_width);
        let wave = chunks * PARALLEL_CHUNK;
        // This thread's wave buffers ([`WaveBuffers`]), grown once to the wave, then reused: no allocation or
        // zero-fill per tensor. Every byte hashed was written by this tensor's tasks first.
        let WaveBuffers(mut hashing, mut decoding) =
            WAVE_BUFFERS.with(|b| std::mem::take(&mut *b.borrow_mut()));
        if in_order.is_none() {
            for buffer in [&mut hashing, &mut decoding] {
                if buffer.len() < wave {
                    buffer.resize(wave, 0);
                }
            }
        }
        // Put back however this ends.
        struct Back(Vec<u8>, Vec<u8>);
        impl Drop for Back {
            fn drop(&mut self) {
                let buffers = WaveBuffers(std::mem::take(&mut self.0), std::mem::take(&mut self.1));
                WAVE_BUFFERS.with(|b| *b.borrow_mut() = buffers);
            }
        }
        // The bytes decoded, not yet hashed: in `hashing` (from its start) unless they are in order.
        let mut pending = 0..0;
        let mut pos = 0;
        while pos < len {
            let end = (pos + wave).min(len);
            if !planes.prepare(plane_width, pos, end) {
                // zstd failed on a frame of this window: the read reports the whole decode's error.
                self.failed = true;
                self.pos = len;
                drop(Back(hashing, decoding));
                return Ok(());
            }
            let planes = &*planes;
            let values = &mut out[pos / width * lanes..end / width * lanes];
            let unhashed = match in_order {
                Some(data) => &data[pending.clone()],
                None => &hashing[..pending.len()],
            };
            // Chunk `k` of this wave: bytes `pos + k * PARALLEL_CHUNK` on, into `buf` (empty where in order).
            let chunk = |k: usize, values: &mut [f32], buf: &mut [u8]| -> Result<()> {
                let start = pos + k * PARALLEL_CHUNK;
                let n = PARALLEL_CHUNK.min(end - start);
                let mut joined = Joined::default();
                for at in (0..n).step_by(DECODE_BLOCK) {
                    let m = DECODE_BLOCK.min(n - at);
                    let block = match in_order {
                        Some(data) => &data[start + at..start + at + m],
                        None => {
                            planes.read_into(plane_width, start + at, &mut buf[at..at + m], &mut joined);
                            &buf[at..at + m]
                        }
                    };
                    crate::tensor::decode_f32_into(
                        dtype,
                        block,
                        &mut values[at / width * lanes..(at + m) / width * lanes],
                    )?;
                }
                Ok(())
            };
            let per_chunk = PARALLEL_CHUNK / width * lanes;
            let (_, decoded) = rayon::join(
                || hasher.update(unhashed),
                || -> Vec<Result<()>> {
                    match in_order {
                        Some(_) => values
                            .par_chunks_mut(per_chunk)
                            .enumerate()
                            .map(|(k, values)| chunk(k, values, &mut []))
                            .collect(),
                        None => values
                            .par_chunks_mut(per_chunk)
                            .zip(decoding.par_chunks_mut(PARALLEL_CHUNK))
                            .enumerate()
                            .map(|(k, (values, buf))| chunk(k, values, buf))
                            .collect(),
                    }
                },
            );
            // Hashed up to here: the rest is `finish`'s if this wave failed.
            self.pos = pos;
            if let Err(e) = decoded.into_iter().collect::<Result<()>>() {
                drop(Back(hashing, decoding));
                return Err(e);
            }
            pending = pos..end;
            std::mem::swap(&mut hashing, &mut decoding);
            pos = end;
        }
        hasher.update(match in_order {
            Some(data) => &data[pending],
            None => &hashing[..pending.len()],
        });
        self.pos = len;
        drop(Back(hashing, decoding));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::encode::encode_data;
    use crate::capture::planes::{PlaneBytes, WINDOW_BYTES};
    use crate::capture::reader::stored_data::StoredData;
    use crate::capture::reader::test_data::*;
    use crate::capture::record::DataEncoding;
    use crate::capture::zstd_frames::{zstd_pieces, PieceIn};
    use crate::{simd, DType};
    use std::path::Path;

    /// `data` as one zstd frame of stored blocks (RFC 8878: a single segment, its content size in 4 bytes).
    fn stored_frame(data: &[u8]) -> Vec<u8> {
        let mut frame = vec![0x28, 0xB5, 0x2F, 0xFD, 0xA0];
        frame.extend((data.len() as u32).to_le_bytes());
        let mut blocks = data.chunks(100_000).peekable();
        if data.is_empty() {
            frame.extend([1, 0, 0]);
        }
        while let Some(block) = blocks.next() {
            let header = (block.len() as u32) << 3 | u32::from(blocks.peek().is_none());
            frame.extend(&header.to_le_bytes()[..3]);
            frame.extend(block);
        }
        frame
    }

    /// Tensors of every byte width whose planes are stored in pieces (stored and compressed frames), all
    /// compressed, raw, or 1-byte planes, of sizes from none to several waves with a ragged last chunk and
    /// block, decoded in parallel on pools of 2, 3 and 5 threads (waves of as many chunks) at every SIMD
    /// level: the serial decode's values bit for bit (fp16's signalling NaNs, which the levels treat
    /// differently, included) and its hash; and with a byte of a stored block or of a compressed frame
    /// flipped, its error.
    #[test]
    fn values_decoded_in_parallel_are_the_serial_decodes() {
        // A type of every width up to 8 bytes, bf16 beside fp16, and complex64's two lanes an element: the
        // chunks of the others are cut the same way (the serial decode of them all is tested in `blocks`).
        let skipped = [DType::COMPLEX32, DType::INT32, DType::INT64, DType::COMPLEX128];
        let dtypes = BYTE_DTYPES.into_iter().filter(|(dtype, _)| !skipped.contains(dtype));
        let pools: Vec<rayon::ThreadPool> =
            [2, 3, 5].map(|n| rayon::ThreadPoolBuilder::new().num_threads(n).build().unwrap()).into();
        let (mut compared, mut failed, mut kinds) = (0, 0, std::collections::BTreeSet::new());
        for (dtype, width) in dtypes {
            let sizes = [5, 0, (PARALLEL_CHUNK * 5 + DECODE_BLOCK * 2) / width + 13];
            for (case, elements) in sizes.into_iter().enumerate() {
                for kind in ["pieces", "compressed", "raw", "1-byte pieces"] {
                    let mut raw = tensor(width, elements * width, (elements * width + case) as u64);
                    match kind {
                        "compressed" => raw.iter_mut().enumerate().for_each(|(i, b)| *b = (i / 64 % 3) as u8),
                        "raw" => raw
                            .iter_mut()
                            .enumerate()
                            .for_each(|(i, b)| *b = (i.wrapping_mul(2_654_435_761) >> 13) as u8),
                        _ => {}
                    }
                    if width == 2 {
                        // Signalling NaNs of both signs, spread over the chunks.
                        for (i, e) in raw.chunks_exact_mut(2).enumerate().filter(|(i, _)| i % 997 == 5) {
                            e.copy_from_slice(&(0x7C01u16 | (i as u16 & 0x8000)).to_le_bytes());
                        }
                    }
                    let encoded = encode_data(&raw, dtype, 1).unwrap();
                    let (mut payload, mut encoding) = (encoded.payload().to_vec(), encoded.encoding());
                    if kind == "1-byte pieces" {
                        // Not what the writer makes (it shuffles 2 to 8-byte elements, and stores a 1-byte
                        // tensor raw when it does not compress), but what the reader takes: the data in
                        // order, its first half a frame of stored blocks, then a compressed frame.
                        let half = raw.len() / 2 / width * width;
                        payload = stored_frame(&raw[..half]);
                        payload.extend(zstd::bulk::compress(&raw[half..], 1).unwrap());
                        encoding = DataEncoding::Zstd { shuffle_width: 1 };
                    }
                    let s = stored(&payload, encoding, &raw);
                    let mut scratch = Vec::new();
                    kinds.insert(match s.plane_bytes(Path::new("t"), &mut scratch, WINDOW_BYTES).unwrap() {
                        (PlaneBytes::Whole(_), 1) => "in order",
                        (PlaneBytes::Whole(_), _) => "whole planes",
                        (PlaneBytes::Pieces(_), 1) => "1-byte pieces",
                        (PlaneBytes::Pieces(_), _) => "pieces",
                        (PlaneBytes::Windows(_), _) => "windows",
                    });
                    let mut damaged = Vec::new();
                    if let Some(pieces) = zstd_pieces(s.payload, s.data_size, &mut Vec::new()) {
                        let in_stored =
                            pieces.iter().find(|p| p.0 == PieceIn::Payload).map(|p| p.1.start + 7);
                        damaged.extend(in_stored);
                    }
                    if matches!(s.encoding, DataEncoding::Zstd { .. }) && s.payload.len() > 40 {
                        damaged.push(s.payload.len() / 2);
                    }
                    for level in simd::available() {
                        let serial = simd::with_ceiling(level, || decode_checked(&s, dtype, usize::MAX));
                        let serial = serial.unwrap();
                        for pool in &pools {
                            let parallel =
                                simd::with_ceiling(level, || pool.install(|| decode_checked(&s, dtype, 0)));
                            let parallel = parallel.unwrap();
                            assert!(
                                parallel == serial,
                                "{dtype} {elements} {kind}, {level:?}, {:?}",
                                pool.current_num_threads()
                            );
                            compared += 1;
                        }
                    }
                    for &at in &damaged {
                        let mut payload = s.payload.to_vec();
                        payload[at] ^= 0x10;
                        let d = StoredData { payload: &payload, ..stored(s.payload, s.encoding, &raw) };
                        let serial = decode_checked(&d, dtype, usize::MAX).map_err(|e| e.to_string());
                        for pool in &pools {
                            let parallel =
                                pool.install(|| decode_checked(&d, dtype, 0)).map_err(|e| e.to_string());
                            assert_eq!(parallel, serial, "{dtype} {elements} {kind}, byte {at} flipped");
                            failed += usize::from(parallel.is_err());
                        }
                    }
                }
            }
        }
        assert_eq!(kinds.len(), 4, "{kinds:?}");
        assert!(compared > 100 && failed > 20, "{compared} compared, {failed} damaged reads failed");
    }

    /// A parallel decode leaves its wave buffers with the thread that called it, whichever threads ran its
    /// tasks, and reuses them for the next tensor; `swap_wave_buffers` takes them from that thread.
    #[test]
    fn a_parallel_decode_keeps_its_wave_buffers_on_the_calling_thread() {
        let raw = tensor(2, PARALLEL_CHUNK * 3, 5);
        let encoded = encode_data(&raw, DType::FLOAT16, 1).unwrap();
        let s = stored(encoded.payload(), encoded.encoding(), &raw);
        let pool = rayon::ThreadPoolBuilder::new().num_threads(3).build().unwrap();
        pool.install(|| {
            let mut taken = WaveBuffers::default();
            swap_wave_buffers(&mut taken);
            decode_checked(&s, DType::FLOAT16, 0).unwrap();
            let mut after = WaveBuffers::default();
            swap_wave_buffers(&mut after);
            assert_eq!(after.capacity(), 2 * 3 * PARALLEL_CHUNK, "the wave buffers were not kept");
            let kept = [after.0.as_ptr(), after.1.as_ptr()];
            swap_wave_buffers(&mut after);
            decode_checked(&s, DType::FLOAT16, 0).unwrap();
            let mut again = WaveBuffers::default();
            swap_wave_buffers(&mut again);
            assert!(kept.contains(&again.0.as_ptr()) && kept.contains(&again.1.as_ptr()), "not reused");
            assert_eq!(after.capacity(), 0, "the swap left them with the thread");
        });
    }
}
