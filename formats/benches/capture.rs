//! Capture format benchmark (std::time, no harness): compression of activation-like tensors with and without
//! the byte shuffle, the statistics pass, and the write path (stats + hash + shuffle + zstd + framed records
//! into mmap'd segments) against raw zstd level 1 on the same data with the SAME number of threads, side by
//! side in the same run (1 and 2 threads; `BENCH_THREADS=1,2,4` to change).
//!
//! Run: `cargo bench -p accutrace-formats --bench capture` (results in docs/BENCHMARKS.md).

use accutrace_formats::capture::*;
use accutrace_formats::stats::{content_hash, stats_and_hash, TensorStats};
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
    // A bias broadcast over the batch: one 4096-value row repeated. Its gain comes from matches alone,
    // which is why the writer's zstd parameters still look for them.
    let row: Vec<f32> = (0..4096).map(|_| r.normal()).collect();
    let broadcast: Vec<f32> = (0..n).map(|i| row[i % row.len()]).collect();
    vec![
        ("gaussian", gauss),
        ("layernorm", layernorm),
        ("relu", relu),
        ("gelu", gelu),
        ("broadcast", broadcast),
    ]
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

/// Tensors each thread handles per timed repetition.
const PER_REP: usize = 8;

/// One writer thread of the collector: its own stream (ring of 256 MiB of 64 MiB segments, so segment
/// creation, rolls and deletions are in the steady state), statistics + hash + append with data, zstd-1.
struct WriterThread {
    w: StreamWriter,
    meta: TensorMeta,
}

impl WriterThread {
    fn new(dir: &std::path::Path, id: u32, dtype: DType, len: usize) -> WriterThread {
        let info = StreamInfo { stream_id: id, rank: None, device: 0, pid: 0, host: String::new() };
        let policy = Policy::Ring { max_bytes: 256 << 20 };
        let mut w = StreamWriter::create(dir, info, DEFAULT_SEGMENT_SIZE, policy).unwrap();
        w.append_op(&OpInfo { name: "op".into(), ..Default::default() }).unwrap();
        let meta = TensorMeta {
            io: Io::Output,
            index: 0,
            dtype,
            format: 2,
            sub_format: 0,
            device_shape: vec![len as u64],
            original_shape: None,
            original_op: None,
        };
        WriterThread { w, meta }
    }

    /// What a collector writer thread does per tensor.
    fn write(&mut self, raw: &[u8]) {
        let (stats, hash) = stats_and_hash(self.meta.dtype, raw);
        self.w.append_tensor(&self.meta, &stats.unwrap(), hash, Some(raw), 1).unwrap();
    }
}

/// Runs `work(thread index)` on `threads` scoped threads at once; wall time in seconds.
fn parallel<S: Send>(states: &mut [S], work: impl Fn(&mut S) + Sync) -> f64 {
    let t = Instant::now();
    std::thread::scope(|scope| {
        for s in states.iter_mut() {
            let work = &work;
            scope.spawn(move || work(s));
        }
    });
    t.elapsed().as_secs_f64()
}

fn main() {
    let n = 4 << 20; // 4 Mi values per tensor
    let reps = 3;
    let threads: Vec<usize> = std::env::var("BENCH_THREADS")
        .unwrap_or_else(|_| "1,2".into())
        .split(',')
        .filter_map(|t| t.trim().parse().ok())
        .collect();
    let base = std::env::var_os("BENCH_DIR").unwrap_or_else(|| "/tmp".into());
    let dir = tempfile::tempdir_in(base).unwrap();
    println!(
        "capture benchmark: {n} values per tensor, {} cores; single-thread columns best of {reps}",
        std::thread::available_parallelism().map_or(0, |p| p.get())
    );
    println!(
        "{:<10} {:<7} {:>8} {:>9} {:>9} {:>10} {:>8} {:>8} {:>9} {:>10} {:>10}",
        "data",
        "dtype",
        "ratio z1",
        "ratio sz1",
        "ratio szw",
        "zstd1 GB/s",
        "shuf+z1",
        "shuf+zw",
        "shuffle",
        "stats+hash",
        "stats,hash"
    );
    let mut data = Vec::new();
    for (name, values) in workloads(n) {
        for dtype in [DType::FLOAT16, DType::BF16, DType::FLOAT] {
            let raw = encode(dtype, &values);
            let width = (dtype.bits().unwrap() / 8) as usize;
            let mut plain = Vec::new();
            let mut shuffled = Vec::new();
            let mut z = zstd::bulk::Compressor::new(1).unwrap();
            let t_plain = best(reps, || plain = z.compress(&raw).unwrap());
            let mut sh = Vec::new();
            let t_shuffle = best(reps, || shuffle::shuffle(&raw, width, &mut sh));
            let t_shuf = best(reps, || {
                shuffle::shuffle(&raw, width, &mut sh);
                shuffled = z.compress(&sh).unwrap();
            });
            // What the writer does: shuffle + zstd-1 with the parameters it uses for shuffled planes
            // (`DataEncoder`, the writer's own encoder; its context and buffers reused).
            let mut enc = DataEncoder::new();
            let mut buf = Vec::new();
            let mut tuned_len = 0;
            let t_tuned = best(reps, || {
                let e = enc.encode(&raw, dtype, 1, std::mem::take(&mut buf)).unwrap();
                tuned_len = e.payload().len();
                buf = e.into_buffer();
            });
            let t_fused = best(reps, || {
                std::hint::black_box(stats_and_hash(dtype, &raw).0.unwrap());
            });
            let t_separate = best(reps, || {
                std::hint::black_box(TensorStats::of_bytes(dtype, &raw).unwrap());
                std::hint::black_box(content_hash(&raw));
            });
            let ratio = |c: &Vec<u8>| raw.len() as f64 / c.len() as f64;
            println!(
                "{:<10} {:<7} {:>8.2} {:>9.2} {:>9.2} {:>10.2} {:>8.2} {:>8.2} {:>9.2} {:>10.2} {:>10.2}",
                name,
                dtype.name(),
                ratio(&plain),
                ratio(&shuffled),
                raw.len() as f64 / tuned_len as f64,
                gbps(raw.len(), t_plain),
                gbps(raw.len(), t_shuf),
                gbps(raw.len(), t_tuned),
                gbps(raw.len(), t_shuffle),
                gbps(raw.len(), t_fused),
                gbps(raw.len(), t_separate),
            );
            data.push((name, dtype, raw));
        }
    }

    if std::env::var_os("BENCH_ZSTD_SWEEP").is_some() {
        zstd_sweep(&data, reps);
    }
    // Write path vs raw zstd-1, same data, same thread count, measured alternately in the same run. Each of
    // the T threads handles PER_REP tensors per repetition; wall time of the slowest; best of `reps`.
    println!();
    println!(
        "{:<10} {:<7} {:>7} {:>10} {:>10} {:>8}",
        "data", "dtype", "threads", "zstd1 GB/s", "write GB/s", "w/zstd1"
    );
    let mut stream_id = 0;
    let mut overall = Vec::new();
    for &t in &threads {
        let mut tot = (0usize, 0f64, 0f64);
        let mut rows = Vec::new();
        for (name, dtype, raw) in &data {
            let mut zs: Vec<zstd::bulk::Compressor> =
                (0..t).map(|_| zstd::bulk::Compressor::new(1).unwrap()).collect();
            let bound = zstd::zstd_safe::compress_bound(raw.len());
            let mut outs: Vec<Vec<u8>> = (0..t).map(|_| Vec::with_capacity(bound)).collect();
            let mut zstate: Vec<_> = zs.iter_mut().zip(outs.iter_mut()).collect();
            let mut writers: Vec<WriterThread> = (0..t)
                .map(|_| {
                    stream_id += 1;
                    WriterThread::new(dir.path(), stream_id, *dtype, raw.len())
                })
                .collect();
            let (mut t_z, mut t_w) = (f64::INFINITY, f64::INFINITY);
            for _ in 0..reps {
                t_z = t_z.min(parallel(&mut zstate, |(z, out)| {
                    for _ in 0..PER_REP {
                        out.clear();
                        z.compress_to_buffer(raw, *out).unwrap();
                    }
                }));
                t_w = t_w.min(parallel(&mut writers, |w| {
                    for _ in 0..PER_REP {
                        w.write(raw);
                    }
                }));
            }
            drop(writers);
            let bytes = t * PER_REP * raw.len();
            println!(
                "{:<10} {:<7} {:>7} {:>10.2} {:>10.2} {:>7.0}%",
                name,
                dtype.name(),
                t,
                gbps(bytes, t_z),
                gbps(bytes, t_w),
                100.0 * t_z / t_w
            );
            tot = (tot.0 + bytes, tot.1 + t_z, tot.2 + t_w);
            rows.push(t_z / t_w);
        }
        rows.sort_by(f64::total_cmp);
        overall.push((t, tot, rows[rows.len() / 2]));
    }
    // Overall = all bytes / all time (weighted towards the slow relu rows); the median row is less
    // sensitive to one noisy row.
    for (t, tot, median) in overall {
        println!(
            "overall, {t} thread(s): raw zstd-1 {:.2} GB/s, capture write path {:.2} GB/s = {:.0}% of raw zstd-1 \
             (median row {:.0}%)",
            gbps(tot.0, tot.1),
            gbps(tot.0, tot.2),
            100.0 * tot.1 / tot.2,
            100.0 * median
        );
    }
}

/// Hash log, min match and target length, with literal compression forced on.
fn skip_params(hash_log: u32, min_match: u32, target_length: u32) -> Vec<zstd::zstd_safe::CParameter> {
    use zstd::zstd_safe::{CParameter, ParamSwitch};
    vec![
        CParameter::HashLog(hash_log),
        CParameter::MinMatch(min_match),
        CParameter::TargetLength(target_length),
        CParameter::LiteralCompressionMode(ParamSwitch::Enable),
    ]
}

/// `BENCH_ZSTD_SWEEP=1`: zstd parameters on the shuffled planes (ratio and single-thread speed).
fn zstd_sweep(data: &[(&str, DType, Vec<u8>)], reps: usize) {
    use zstd::zstd_safe::CParameter;
    println!("\nzstd sweep on shuffled data: variant ratio GB/s");
    for (name, dtype, raw) in data {
        let width = (dtype.bits().unwrap() / 8) as usize;
        let mut sh = Vec::new();
        shuffle::shuffle(raw, width, &mut sh);
        let variants: Vec<(String, Vec<CParameter>, i32)> = vec![
            ("l1".into(), vec![], 1),
            ("hl8".into(), vec![CParameter::HashLog(8)], 1),
            ("hl9".into(), vec![CParameter::HashLog(9)], 1),
            ("hl10".into(), vec![CParameter::HashLog(10)], 1),
            ("hl11".into(), vec![CParameter::HashLog(11)], 1),
            ("hl12".into(), vec![CParameter::HashLog(12)], 1),
            ("hl10 mm7".into(), vec![CParameter::HashLog(10), CParameter::MinMatch(7)], 1),
            ("hl10 mm5".into(), vec![CParameter::HashLog(10), CParameter::MinMatch(5)], 1),
            // Probing every `1 + TargetLength` positions; literals Huffman-coded regardless (zstd turns
            // them off for the fast strategy with a target length).
            ("hl8 mm7 tl4 lit".into(), skip_params(8, 7, 4), 1),
            ("hl14 mm7 tl64 lit".into(), skip_params(14, 7, 64), 1),
            ("hl8 mm7 tl16 lit".into(), skip_params(8, 7, 16), 1),
            // The writer's choice; the next, a probe per 128 KiB block, is entropy coding alone.
            ("hl8 mm7 tl64 lit".into(), skip_params(8, 7, 64), 1),
            ("hl6 mm7 tl131072 lit".into(), skip_params(6, 7, 131_072), 1),
        ];
        let mut line = format!("{name:<10} {:<7}", dtype.name());
        for (label, params, level) in variants {
            let mut z = zstd::bulk::Compressor::new(level).unwrap();
            for p in params {
                z.set_parameter(p).unwrap();
            }
            let mut out = Vec::new();
            let t = best(reps, || out = z.compress(&sh).unwrap());
            line +=
                &format!(" | {label} {:.3} {:.2}", raw.len() as f64 / out.len() as f64, gbps(raw.len(), t));
        }
        println!("{line}");
    }
}
