//! The content hash (XXH3-64): `formats::hash` (twox-hash, its SIMD build picked at run time) beside
//! xxhash-rust (its SIMD picked at compile time: SSE2 on a baseline x86_64 build), one-shot and streamed in
//! the pieces the callers feed (4 KiB statistics chunks, the reader's 16 KiB blocks), in the same run.
//!
//! `cargo bench -p accutrace-formats --bench hash`. Prints GB/s per case (the median of several
//! repetitions over the same buffer, which stays in cache up to its size) and the build each one runs.

use accutrace_formats::hash::{self, Xxh3};
use std::hint::black_box;
use std::time::{Duration, Instant};

const REPS: usize = 15;
/// Bytes hashed per repetition (the buffer is hashed as often as it takes).
const PER_REP: usize = 64 << 20;

fn gbps(bytes: usize, mut f: impl FnMut() -> u64) -> f64 {
    let rounds = (PER_REP / bytes).max(1);
    let mut times: Vec<Duration> = (0..REPS)
        .map(|_| {
            let start = Instant::now();
            let mut x = 0;
            for _ in 0..rounds {
                x ^= f();
            }
            black_box(x);
            start.elapsed()
        })
        .collect();
    times.sort();
    (bytes * rounds) as f64 / times[REPS / 2].as_secs_f64() / 1e9
}

fn main() {
    let build = if cfg!(target_feature = "avx512f") {
        "avx512"
    } else if cfg!(target_feature = "avx2") {
        "avx2"
    } else if cfg!(any(target_feature = "sse2", target_feature = "neon")) {
        "sse2/neon"
    } else {
        "scalar"
    };
    println!(
        "formats::hash runs twox-hash's {} build; xxhash-rust was compiled for {build}",
        hash::simd_name()
    );
    println!(
        "{:>10} {:>12} {:>12} {:>16} {:>16} {:>17} {:>17}",
        "bytes",
        "one-shot xr",
        "one-shot new",
        "4 KiB pieces xr",
        "4 KiB pieces new",
        "16 KiB pieces xr",
        "16 KiB pieces new"
    );
    let data: Vec<u8> = (0..8usize << 20).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    for size in [4 << 10, 64 << 10, 1 << 20, 8 << 20] {
        let d = &data[..size];
        assert_eq!(xxhash_rust::xxh3::xxh3_64(d), hash::xxh3_64(d), "the two disagree on {size} bytes");
        let streamed_xr = |piece: usize| {
            gbps(size, || {
                let mut h = xxhash_rust::xxh3::Xxh3::new();
                for p in black_box(d).chunks(piece) {
                    h.update(p);
                }
                h.digest()
            })
        };
        let streamed_new = |piece: usize| {
            gbps(size, || {
                let mut h = Xxh3::new();
                for p in black_box(d).chunks(piece) {
                    h.update(p);
                }
                h.digest()
            })
        };
        println!(
            "{:>10} {:>12.2} {:>12.2} {:>16.2} {:>16.2} {:>17.2} {:>17.2}",
            size,
            gbps(size, || xxhash_rust::xxh3::xxh3_64(black_box(d))),
            gbps(size, || hash::xxh3_64(black_box(d))),
            streamed_xr(4 << 10),
            streamed_new(4 << 10),
            streamed_xr(16 << 10),
            streamed_new(16 << 10),
        );
    }
}
