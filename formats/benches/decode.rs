//! fp16 -> f32 and bf16 -> f32 decoding beside a plain memcpy of the same input bytes, in the same run.
//!
//! `cargo bench -p accutrace-formats --bench decode`. Prints, per case, the median of several repetitions
//! in G elements/s and GB/s of input, and the time relative to the memcpy (1.0 = memcpy speed; the decoder
//! writes twice the bytes it reads, so ~1.5 is what memory bandwidth allows).

use accutrace_formats::simd::{self, Level};
use accutrace_formats::tensor::{decode_f32, decode_f32_into, fp16_to_f32};
use accutrace_formats::DType;
use std::hint::black_box;
use std::time::{Duration, Instant};

const INPUT_BYTES: usize = 64 << 20;
const REPS: usize = 9;

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

fn time(mut f: impl FnMut()) -> Duration {
    f(); // warm-up: page faults and caches, not measured
    median(
        (0..REPS)
            .map(|_| {
                let start = Instant::now();
                f();
                start.elapsed()
            })
            .collect(),
    )
}

fn main() {
    let elements = INPUT_BYTES / 2;
    // Varied, mostly finite fp16/bf16 patterns (a multiplicative hash), so no branch predicts them.
    let input: Vec<u8> = (0..elements as u32)
        .flat_map(|i| ((i.wrapping_mul(2_654_435_761) >> 16) as u16 & 0x7bff).to_le_bytes())
        .collect();
    let mut copy = vec![0u8; INPUT_BYTES];
    let mut out = vec![0f32; elements];
    let mut reused = Vec::with_capacity(elements);

    let memcpy = time(|| copy.copy_from_slice(black_box(&input)));
    let cases: Vec<(&str, Duration)> = vec![
        ("memcpy (same input bytes)", memcpy),
        (
            "fp16->f32 decode_f32_into",
            time(|| decode_f32_into(DType::FLOAT16, black_box(&input), &mut out).unwrap()),
        ),
        (
            "fp16->f32 fp16_to_f32 portable",
            simd::with_ceiling(Level::Portable, || time(|| fp16_to_f32(black_box(&input), &mut out))),
        ),
        ("fp16->f32 fp16_to_f32 (F16C / NEON)", time(|| fp16_to_f32(black_box(&input), &mut out))),
        (
            "fp16->f32 decode_f32 (Vec reused)",
            time(|| decode_f32(DType::FLOAT16, black_box(&input), elements, &mut reused).unwrap()),
        ),
        (
            "bf16->f32 decode_f32_into",
            time(|| decode_f32_into(DType::BF16, black_box(&input), &mut out).unwrap()),
        ),
        (
            "bf16->f32 decode_f32 (Vec reused)",
            time(|| decode_f32(DType::BF16, black_box(&input), elements, &mut reused).unwrap()),
        ),
    ];
    black_box((&copy, &out, &reused));
    println!("input {} MiB ({elements} 16-bit elements), median of {REPS} runs", INPUT_BYTES >> 20);
    println!("{:<36} {:>9} {:>10} {:>9} {:>12}", "case", "ms", "G elem/s", "GB/s in", "x memcpy");
    for (name, t) in cases {
        let s = t.as_secs_f64();
        println!(
            "{name:<36} {:>9.2} {:>10.2} {:>9.2} {:>12.2}",
            s * 1e3,
            elements as f64 / s / 1e9,
            INPUT_BYTES as f64 / s / 1e9,
            s / memcpy.as_secs_f64()
        );
    }
}
