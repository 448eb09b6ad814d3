//! Capture format benchmark (std::time, no harness): compression of activation-like tensors with and without
//! the byte shuffle, and the write path (stats + hash + shuffle + zstd + framed records into mmap'd segments)
//! against raw zstd level 1 on the same data, one thread each, in the same run.
//!
//! Run: `cargo bench -p accutrace-formats --bench capture` (results in docs/BENCHMARKS.md).

use accutrace_formats::capture::*;
use accutrace_formats::stats::{content_hash, TensorStats};
use accutrace_formats::DType;
use half::{bf16, f16};
use std::time::Instant;

/// Deterministic normal samples (xorshift + Box-Muller).
struct Rng(u64);

impl Rng {
    fn uniform(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        ((self.0 >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }
    fn normal(&mut self) -> f32 {
        ((-2.0 * self.uniform().ln()).sqrt() * (2.0 * std::f64::consts::PI * self.uniform()).cos()) as f32
    }
}

/// Activation-like tensors of `n` values: (name, f32 values).
fn workloads(n: usize) -> Vec<(&'static str, Vec<f32>)> {
    let mut r = Rng(0x9E37_79B9_7F4A_7C15);
    let gauss: Vec<f32> = (0..n).map(|_| r.normal()).collect();
    let layernorm: Vec<f32> =
        (0..n).map(|i| r.normal() * (1.0 + 0.1 * ((i % 768) as f32 / 768.0)) + 0.02).collect();
    let relu: Vec<f32> = (0..n).map(|_| r.normal().max(0.0) * 2.5).collect();
    let gelu: Vec<f32> = (0..n)
        .map(|_| {
            let x = r.normal() * 1.5;
            0.5 * x * (1.0 + (0.797_884_6 * (x + 0.044_715 * x * x * x)).tanh())
        })
        .collect();
    vec![("gaussian", gauss), ("layernorm", layernorm), ("relu", relu), ("gelu", gelu)]
}

fn encode(dtype: DType, values: &[f32]) -> Vec<u8> {
    match dtype {
        DType::FLOAT16 => values.iter().flat_map(|&v| f16::from_f32(v).to_bits().to_le_bytes()).collect(),
        DType::BF16 => values.iter().flat_map(|&v| bf16::from_f32(v).to_bits().to_le_bytes()).collect(),
        _ => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
    }
}

fn gbps(bytes: usize, secs: f64) -> f64 {
    bytes as f64 / secs / 1e9
}

/// Best of `reps` runs of `f`, in seconds.
fn best(reps: usize, mut f: impl FnMut()) -> f64 {
    (0..reps)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

fn main() {
    let n = 4 << 20; // 4 Mi values per tensor
    let reps = 3;
    let dir = tempfile::tempdir_in(std::env::var_os("BENCH_DIR").unwrap_or_else(|| "/tmp".into())).unwrap();
    println!("capture benchmark: {n} values per tensor, best of {reps}, single thread");
    println!(
        "{:<10} {:<6} {:>9} {:>9} {:>10} {:>10} {:>11} {:>11} {:>8}",
        "data",
        "dtype",
        "ratio z1",
        "ratio sz1",
        "zstd1 GB/s",
        "shuf+z1",
        "write GB/s",
        "stats GB/s",
        "w/zstd1"
    );
    let mut tot = (0usize, 0f64, 0f64);
    let mut run = 0;
    for (name, values) in workloads(n) {
        for dtype in [DType::FLOAT16, DType::BF16, DType::FLOAT] {
            let raw = encode(dtype, &values);
            let width = (dtype.bits().unwrap() / 8) as usize;
            let mut plain = Vec::new();
            let mut shuffled = Vec::new();
            let mut z = zstd::bulk::Compressor::new(1).unwrap();
            let t_plain = best(reps, || plain = z.compress(&raw).unwrap());
            let mut sh = Vec::new();
            let t_shuf = best(reps, || {
                shuffle::shuffle(&raw, width, &mut sh);
                shuffled = z.compress(&sh).unwrap();
            });
            let t_stats = best(reps, || {
                std::hint::black_box(TensorStats::of_bytes(dtype, &raw).unwrap());
            });
            // The full write path, steady state: what a collector writer thread does per tensor (stats, hash,
            // shuffle, zstd, framing into mmap'd segments, segment rolls and ring recycling included).
            run += 1;
            let info = StreamInfo { stream_id: run, rank: None, device: 0, pid: 0, host: String::new() };
            let policy = Policy::Ring { max_bytes: 256 << 20 };
            let mut w = StreamWriter::create(dir.path(), info, DEFAULT_SEGMENT_SIZE, policy).unwrap();
            w.append_op(&OpInfo { name: name.into(), ..Default::default() }).unwrap();
            let meta = TensorMeta {
                io: Io::Output,
                index: 0,
                dtype,
                format: 2,
                sub_format: 0,
                device_shape: vec![values.len() as u64],
                original_shape: None,
                original_op: None,
            };
            let per_rep = 8;
            let t_write = best(reps, || {
                for _ in 0..per_rep {
                    let stats = TensorStats::of_bytes(dtype, &raw).unwrap();
                    w.append_tensor(&meta, &stats, content_hash(&raw), Some(&raw), 1).unwrap();
                }
            }) / per_rep as f64;
            drop(w);
            let ratio = |c: &Vec<u8>| raw.len() as f64 / c.len() as f64;
            println!(
                "{:<10} {:<6} {:>9.2} {:>9.2} {:>10.2} {:>10.2} {:>11.2} {:>11.2} {:>7.0}%",
                name,
                dtype.name(),
                ratio(&plain),
                ratio(&shuffled),
                gbps(raw.len(), t_plain),
                gbps(raw.len(), t_shuf),
                gbps(raw.len(), t_write),
                gbps(raw.len(), t_stats),
                100.0 * t_plain / t_write
            );
            tot = (tot.0 + raw.len(), tot.1 + t_plain, tot.2 + t_write);
        }
    }
    println!(
        "overall: raw zstd-1 {:.2} GB/s, capture write path {:.2} GB/s = {:.0}% of raw zstd-1",
        gbps(tot.0, tot.1),
        gbps(tot.0, tot.2),
        100.0 * tot.1 / tot.2
    );
}
