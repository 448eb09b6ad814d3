//! Metric throughput on ~256 MiB of fp32 per side (GB/s of input, both sides counted), beside a plain sum
//! over the same bytes in the same run (the memory-bandwidth reference).
//!
//! `CARGO_TARGET_DIR=... cargo bench -p accutrace-analyzer --bench metrics` (ACCUTRACE_BENCH_MIB to resize).

use accutrace_formats::simd;
use accutrace_formats::DType;
use analyzer::metrics::kernel::{plain_sum, round_to_f16, RePrecision};
use analyzer::metrics::msaccucmp::msaccucmp_metrics;
use analyzer::metrics::msprobe::{msprobe_metrics, MsprobeOptions};
use analyzer::metrics::{measure, Families, MetricsRequest};
use std::hint::black_box;
use std::time::Instant;

fn best_of<T>(runs: usize, mut f: impl FnMut() -> T) -> f64 {
    (0..runs)
        .map(|_| {
            let t = Instant::now();
            black_box(f());
            t.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

fn main() {
    let mib: usize = std::env::var("ACCUTRACE_BENCH_MIB").ok().and_then(|v| v.parse().ok()).unwrap_or(256);
    let len = mib * (1 << 20) / 4;
    let n: Vec<f32> =
        (0..len).map(|i| ((i.wrapping_mul(2654435761) >> 8) % 20000) as f32 * 1e-4 - 1.0).collect();
    let b: Vec<f32> = n.iter().enumerate().map(|(i, v)| v + (i % 17) as f32 * 1e-6).collect();
    // The same values rounded to fp16, as a capture's fp16 tensors reach the metrics (f32 lanes).
    let (n16, b16): (Vec<f32>, Vec<f32>) =
        (n.iter().map(|&v| round_to_f16(v)).collect(), b.iter().map(|&v| round_to_f16(v)).collect());
    let bytes = 2.0 * (len * 4) as f64;
    let gbps = |s: f64| bytes / s / 1e9;
    println!("metrics bench: {mib} MiB fp32 per side, {} threads", rayon::current_num_threads());

    let sum = best_of(5, || plain_sum(&n) + plain_sum(&b));
    println!("plain sum (both sides)      {:8.2} GB/s", gbps(sum));
    // Each kernel in each build the CPU can run (`multiversion!`), highest first: AVX-512, AVX2, baseline
    // (the portable level runs the lane kernels' baseline build too).
    for level in simd::available().into_iter().rev().filter(|l| *l != simd::Level::Portable) {
        println!("[{}]", level.name());
        simd::with_ceiling(level, || {
            // `measure`, the entry point: an fp32 pair takes the fused f32 pass.
            let fp32 = (DType::FLOAT, DType::FLOAT);
            let request = MetricsRequest::for_pair(Families::Msprobe, fp32, &[len as u64], false);
            let t = best_of(5, || measure(&n, &b, &request));
            println!("msprobe (fused, RE in f32)  {:8.2} GB/s", gbps(t));
            // An fp16 pair: msprobe's relative error in f16 (the fused pass's F16 build); then both families
            // with KL, what compare of two fp16 captures runs per pair (their statistics come from the index).
            let fp16 = (DType::FLOAT16, DType::FLOAT16);
            let request = MetricsRequest::for_pair(Families::Msprobe, fp16, &[len as u64], false);
            let t = best_of(5, || measure(&n16, &b16, &request));
            println!("msprobe (fused, RE in f16)  {:8.2} GB/s", gbps(t));
            let request = MetricsRequest::for_pair(Families::All, fp16, &[len as u64], false);
            let t = best_of(3, || measure(&n16, &b16, &request));
            println!("fp16 pair, both families    {:8.2} GB/s", gbps(t));
            // The generic kernels, as the pairs the fused pass does not take run them.
            for (label, p) in [
                ("msprobe (generic, RE f32)", RePrecision::F32),
                ("msprobe (generic, RE f64)", RePrecision::F64),
                ("msprobe (generic, RE f16)", RePrecision::F16),
            ] {
                let opts = MsprobeOptions { zero_dim: false, re_precision: p };
                let (n, b) = if p == RePrecision::F16 { (&n16, &b16) } else { (&n, &b) };
                let t = best_of(5, || msprobe_metrics(n, b, &opts));
                println!("{label:<28}{:8.2} GB/s", gbps(t));
            }
            let t = best_of(3, || msaccucmp_metrics(&n[..], &b[..], false));
            println!("msaccucmp (generic, KL)     {:8.2} GB/s", gbps(t));
            // What `analyzer compare` runs per pair of an fp32 capture: both families and both sides' statistics.
            let request = MetricsRequest::for_pair(Families::All, fp32, &[len as u64], true);
            let t = best_of(3, || measure(&n, &b, &request));
            println!("compare's pair (+ stats)    {:8.2} GB/s", gbps(t));
        });
    }

    let one = rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap();
    let request =
        MetricsRequest::for_pair(Families::Msprobe, (DType::FLOAT, DType::FLOAT), &[len as u64], false);
    let sum1 = one.install(|| best_of(3, || plain_sum(&n) + plain_sum(&b)));
    let t1 = one.install(|| best_of(3, || measure(&n, &b, &request)));
    println!("1 thread: plain sum {:.2} GB/s, msprobe {:.2} GB/s", gbps(sum1), gbps(t1));
}
