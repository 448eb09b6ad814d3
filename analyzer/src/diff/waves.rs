//! diff of one large tensor pair on every core: both tensors read a wave at a time
//! ([`HostBlocks::with_next_wave`]), each wave's chunks measured on the pool's threads and their figures
//! merged. diff measures as many pairs at once as the memory budget lets it; a pair of tensors of many MiB
//! is then measured nearly alone, and this keeps the other cores at work on it.

use super::values::{compare_host_bytes, pair_to_measure, TensorDiff, BLOCK};
use crate::sources::HostBlocks;
use accutrace_formats::DType;
use rayon::prelude::*;

/// Data bytes from which a pair is measured in waves, where the pool has threads no other pair takes:
/// below it the tasks would cost more than they save (medium:4's largest tensors, 2 MiB, are read as
/// before).
pub const WAVES_MIN: usize = 4 << 20;

/// Bytes of each side read at a time.
const WAVE: usize = 1 << 20;

/// What the two wave buffers of a pair hold (the diff footprint counts them).
pub const WAVE_BUFFERS: u64 = 2 * WAVE as u64;

/// Bytes one task measures: whole kernel blocks of every dtype, so that a chunk's blocks start where the
/// serial loop's do.
const CHUNK: usize = 64 << 10;
const _: () = assert!(CHUNK.is_multiple_of(4 * BLOCK) && WAVE.is_multiple_of(CHUNK));

/// [`compare_host_blocks`](super::values::compare_host_blocks)'s figures, bit for bit, measured a wave at a
/// time, each wave's chunks on the current pool's threads. Differing elements add up and the maxima (of
/// |x - y| in f64, NaN counted as infinite, and of ulp) are maxima of the chunks': neither depends on how
/// the data is cut. `None` as `compare_host_blocks` gives it.
pub fn compare_host_waves(
    dtype: DType,
    a: &mut dyn HostBlocks,
    b: &mut dyn HostBlocks,
) -> Option<TensorDiff> {
    let (_, mut total) = pair_to_measure(dtype, a, b)?;
    let (mut wave_a, mut wave_b) = (vec![0u8; WAVE.min(a.len())], vec![0u8; WAVE.min(a.len())]);
    let mut left = a.len();
    while left > 0 {
        let take = left.min(WAVE);
        left -= take;
        // Each side's wave is hashed while the work after it runs: a's beside b's unshuffle and the
        // kernels, b's beside the kernels.
        let mut chunks: Option<Vec<TensorDiff>> = None;
        a.with_next_wave(&mut wave_a[..take], &mut |xa| {
            b.with_next_wave(&mut wave_b[..take], &mut |xb| {
                // A source shorter than it said is not measured (the caller reads the values instead).
                chunks = (xa.len() == take && xb.len() == take)
                    .then(|| {
                        let pairs = xa.par_chunks(CHUNK).zip(xb.par_chunks(CHUNK));
                        pairs.map(|(x, y)| compare_host_bytes(dtype, x, y)).collect()
                    })
                    .flatten();
            })
        });
        for chunk in chunks? {
            total.differing += chunk.differing;
            total.max_ulp = total.max_ulp.max(chunk.max_ulp);
            total.max_abs_diff = total.max_abs_diff.max(chunk.max_abs_diff);
        }
    }
    total.identical = total.differing == 0;
    Some(total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diff::values::compare_host_blocks;
    use crate::sources::SliceBlocks;

    /// Bytes lent as they are, from a source that says it holds `len` bytes (more, for a short one).
    struct Lent<'a> {
        bytes: &'a [u8],
        len: usize,
    }

    impl HostBlocks for Lent<'_> {
        fn len(&self) -> usize {
            self.len
        }
        fn next_block<'s>(&'s mut self, buf: &'s mut [u8]) -> &'s [u8] {
            let (block, rest) = self.bytes.split_at(buf.len().min(self.bytes.len()));
            self.bytes = rest;
            block
        }
    }

    /// Random bits (NaNs, infinities, zeros of both signs included) with differences sparse and dense,
    /// over several waves and a ragged last chunk, on pools of 1 and 3 threads: the serial loop's figures,
    /// bit for bit; a side shorter than it says is not measured.
    #[test]
    fn waves_on_many_threads_give_the_serial_figures() {
        let mut state = 0x2545_F491_4F6C_DD1Du64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let pools: Vec<rayon::ThreadPool> =
            [1, 3].map(|n| rayon::ThreadPoolBuilder::new().num_threads(n).build().unwrap()).into();
        let mut nan_cases = 0;
        for dtype in [DType::FLOAT16, DType::BF16, DType::FLOAT] {
            let width = if dtype == DType::FLOAT { 4 } else { 2 };
            for (bytes, density) in [(2 * WAVE + 3 * CHUNK + 10 * width, 3), (WAVE + width, 5000), (CHUNK, 1)]
            {
                let a: Vec<u8> = (0..bytes).map(|_| next() as u8).collect();
                let mut b = a.clone();
                for e in b.chunks_exact_mut(width) {
                    if next() % density == 0 {
                        e[0] ^= next() as u8 | 1;
                        if next() % 5 == 0 {
                            e[width - 1] ^= next() as u8;
                        }
                    }
                }
                let want =
                    compare_host_blocks(dtype, &mut SliceBlocks::new(&a), &mut SliceBlocks::new(&b)).unwrap();
                nan_cases += usize::from(want.max_abs_diff.is_infinite());
                let figures = |d: &TensorDiff| {
                    (d.identical, d.elements, d.differing, d.max_abs_diff.to_bits(), d.max_ulp, d.measured)
                };
                for pool in &pools {
                    let got = pool.install(|| {
                        compare_host_waves(dtype, &mut SliceBlocks::new(&a), &mut SliceBlocks::new(&b))
                    });
                    assert_eq!(figures(&got.unwrap()), figures(&want), "{dtype} {bytes} {density}");
                    let short = pool.install(|| {
                        let mut x = Lent { bytes: &a[..bytes - width], len: bytes };
                        compare_host_waves(dtype, &mut x, &mut SliceBlocks::new(&b))
                    });
                    assert!(short.is_none(), "{dtype} {bytes}: a short side was measured");
                }
            }
        }
        assert!(nan_cases > 0, "no case had a NaN against a number");
    }
}
