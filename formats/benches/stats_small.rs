//! `stats_and_hash` of small tensors (fp16 of 64 to 65,536 values: most files of a dump hold small
//! tensors), in ns per tensor: the fixed cost per tensor beside the per-byte one.
//!
//! `cargo bench -p accutrace-formats --bench stats_small`. The input sits at each of the 64 cache lines of
//! a page in turn, so that no one placement against the stack buffers decides the figure; best of 9. Each
//! size at every instruction-set level this CPU has (at AVX-512, whole blocks take `stats::fused`).

use accutrace_formats::simd::{self, Level};
use accutrace_formats::stats::stats_and_hash;
use accutrace_formats::DType;
use std::hint::black_box;
use std::time::Instant;

fn main() {
    println!("{:>8} {:>8} {:>14} {:>8}", "values", "level", "ns per tensor", "GB/s");
    for values in [64usize, 256, 1024, 4096, 65536] {
        // Finite fp16 values everywhere, so every window of the page holds a tensor like the others.
        let len = values * 2;
        let padded: Vec<u8> = (0..(len + 4096) as u32 / 2)
            .flat_map(|i| ((i.wrapping_mul(2_654_435_761) >> 16) as u16 & 0x3bff).to_le_bytes())
            .collect();
        let reps = ((64usize << 20) / len).max(64);
        for level in simd::available().into_iter().filter(|l| *l >= Level::Avx2) {
            simd::with_ceiling(level, || one(values, &padded, reps, level));
        }
    }
}

/// One line: `values` fp16 values at each cache line of `padded` in turn, `reps` times, best of 9.
fn one(values: usize, padded: &[u8], reps: usize, level: Level) {
    let len = values * 2;
    let mut best = f64::MAX;
    for _ in 0..9 {
        let start = Instant::now();
        let mut x = 0u64;
        for r in 0..reps {
            let at = (r % 64) * 64;
            x ^= stats_and_hash(DType::FLOAT16, black_box(&padded[at..at + len])).1;
        }
        black_box(x);
        best = best.min(start.elapsed().as_secs_f64());
    }
    let ns = best / reps as f64 * 1e9;
    println!("{values:>8} {:>8} {ns:>14.1} {:>8.2}", level.name(), (len * reps) as f64 / best / 1e9);
}
