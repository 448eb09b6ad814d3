//! A tensor's data read a wave at a time, its unshuffle split over the current rayon pool's threads and
//! its hash beside the reader's work ([`TensorBlocks::with_next_wave`]): for readers that split their own
//! work on each wave the same way (diff's kernels), so that one large tensor keeps every core busy where no
//! other tensor is read beside it.

use super::blocks::PARALLEL_CHUNK;
use super::TensorBlocks;
use crate::capture::planes::Joined;

impl TensorBlocks<'_> {
    /// `f` of the next `min(buf.len(), bytes left)` bytes of the data, those [`next_block`](Self::next_block)
    /// gives, hashed in order as it hashes them; but a wave of at least two parallel chunks (64 KiB each) is
    /// unshuffled into `buf` a chunk per task on the current pool's threads where it has several, and
    /// hashed on one of them while `f` runs on the others. Data stored in order is lent as `next_block`
    /// lends it.
    pub fn with_next_wave<R: Send>(&mut self, buf: &mut [u8], f: impl FnOnce(&[u8]) -> R + Send) -> R {
        use rayon::prelude::*;
        let n = buf.len().min(self.len() - self.pos);
        let serial = n < 2 * PARALLEL_CHUNK || rayon::current_num_threads() < 2;
        if serial || self.failed || !self.planes.prepare(self.width, self.pos, self.pos + n) {
            // (Where zstd failed on a frame of this window, `next_block` stands zeros in and marks the read
            // failed.)
            return f(self.next_block(buf));
        }
        let (planes, width, start) = (&self.planes, self.width, self.pos);
        let wave: &[u8] = match planes.in_order(width) {
            Some(data) => &data[start..start + n],
            None => {
                let wave = &mut buf[..n];
                wave.par_chunks_mut(PARALLEL_CHUNK).enumerate().for_each(|(k, chunk)| {
                    planes.read_into(width, start + k * PARALLEL_CHUNK, chunk, &mut Joined::default());
                });
                wave
            }
        };
        let hasher = &mut self.hasher;
        let ((), result) = rayon::join(|| hasher.update(wave), || f(wave));
        self.pos += n;
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::encode::encode_data;
    use crate::capture::planes::WINDOW_BYTES;
    use crate::capture::reader::stored_data::StoredData;
    use crate::capture::reader::test_data::*;
    use crate::DType;
    use std::path::Path;

    /// `s`'s data read in waves of `wave` bytes with windows of `window` bytes, once its hash matched.
    fn read_waves(s: &StoredData<'_>, wave: usize, window: usize) -> crate::Result<Vec<u8>> {
        s.read_blocks_with(Path::new("t"), &mut Vec::new(), window, |blocks| {
            let (mut out, mut buf) = (Vec::new(), vec![0u8; wave]);
            while out.len() < blocks.len() {
                blocks.with_next_wave(&mut buf, |wave| out.extend_from_slice(wave));
            }
            out
        })
    }

    /// Tensors of 1, 2 and 4-byte elements stored in pieces, compressed whole, raw, and (longer than a
    /// window) a window of frames at a time, read in waves of every size (a ragged last chunk, a wave
    /// larger than a window) on pools of 1 and 3 threads: the bytes and the hash block-by-block reading
    /// gives; and with a byte of the payload flipped, the same error.
    #[test]
    fn waves_read_on_many_threads_are_the_serial_reads() {
        let pools: Vec<rayon::ThreadPool> =
            [1, 3].map(|n| rayon::ThreadPoolBuilder::new().num_threads(n).build().unwrap()).into();
        let (mut compared, mut failed) = (0, 0);
        for (dtype, width) in [(DType::INT8, 1), (DType::FLOAT16, 2), (DType::FLOAT, 4)] {
            for bytes in [5 * PARALLEL_CHUNK + 3 * width, (5 << 19) + width] {
                for kind in ["as written", "raw"] {
                    let mut raw = tensor(width, bytes, (bytes + width) as u64);
                    if kind == "raw" {
                        raw.iter_mut()
                            .enumerate()
                            .for_each(|(i, b)| *b = (i.wrapping_mul(2_654_435_761) >> 13) as u8);
                    }
                    let encoded = encode_data(&raw, dtype, 1).unwrap();
                    let s = stored(encoded.payload(), encoded.encoding(), &raw);
                    for window in [WINDOW_BYTES, 256 << 10] {
                        let serial = read_blocks_in(&s, 4096 + width, window, &mut Vec::new()).unwrap();
                        assert!(serial == raw, "{dtype} {bytes} {kind}");
                        for wave in [2 * PARALLEL_CHUNK, 5 * PARALLEL_CHUNK + 7, 1 << 20] {
                            for pool in &pools {
                                let got = pool.install(|| read_waves(&s, wave, window)).unwrap();
                                assert!(got == raw, "{dtype} {bytes} {kind}, window {window}, wave {wave}");
                                compared += 1;
                            }
                        }
                        for at in [s.payload.len() / 3, s.payload.len() - 5] {
                            let mut payload = s.payload.to_vec();
                            payload[at] ^= 0x10;
                            let d = StoredData { payload: &payload, ..stored(s.payload, s.encoding, &raw) };
                            let serial = read_blocks_in(&d, 4096 + width, window, &mut Vec::new());
                            let serial = serial.map_err(|e| e.to_string());
                            for pool in &pools {
                                let got = pool.install(|| read_waves(&d, 3 * PARALLEL_CHUNK, window));
                                assert_eq!(
                                    got.map_err(|e| e.to_string()),
                                    serial,
                                    "{dtype} {bytes} {kind}, {at}"
                                );
                                failed += usize::from(serial.is_err());
                            }
                        }
                    }
                }
            }
        }
        assert!(compared >= 144 && failed > 50, "{compared} compared, {failed} damaged reads failed");
    }
}
