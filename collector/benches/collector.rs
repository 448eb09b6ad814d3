//! Collector benchmarks (`cargo bench -p accutrace-collector`), each comparison made in the same run:
//! 1. callback cost per chunk (median, p99) vs three plain memcpys of the same chunk: into one hot buffer,
//!    into buffers rotating over as many bytes as the slot pool holds (what a design pays that must not
//!    overwrite bytes a writer still owns), and into a buffer a thread on another CPU reads after each copy
//!    (what handing bytes to another core pays);
//! 2. pipeline throughput (callback -> writer -> sealed segments, tensor mode) vs raw zstd level 1 on the
//!    same files with the same number of compressing threads: 1 and 2 (writer threads encode in parallel;
//!    `ACCUTRACE_BENCH_THREADS=1,2` picks the counts; each figure is the best of `ACCUTRACE_BENCH_REPS`
//!    (default 3) alternating runs), by wall time, by the CPU time of all the process's threads (the
//!    pipeline's include the callback's thread and the segment-preparing helper) and by that of the
//!    compressing threads alone (the pipeline's writer threads, from its manifest);
//! 3. bytes on disk per tensor in stats mode.
//!
//! Input: dump files from `ACCUTRACE_BENCH_DUMP_DIR` (a CANN / sim-train dump tree), else synthetic fp16
//! dump files (`ACCUTRACE_BENCH_MIB`, default 128 MiB). Output directory: `ACCUTRACE_BENCH_OUT` (default:
//! a temporary directory under the system's). `ACCUTRACE_BENCH_ONLY=callback` or `pipeline` runs one part
//! (for profiling).

use accutrace_formats::capture::Manifest;
use accutrace_formats::DType;
use accutrace_proto::dumpdata::{DumpData, OpOutput, Shape};
use ascend_sys::bindings::__IncompleteArrayField;
use ascend_sys::{acldumpChunk, ACLDUMP_CHUNK_DATA_OFFSET, ACLDUMP_CHUNK_HEADER_LEN};
use collector::activate::standalone;
use collector::callback::dump_callback;
use collector::config::{Config, Mode};
use collector::finish::{finish, End};
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// An aligned buffer holding one `acldumpChunk` with its payload.
struct ChunkBuf {
    words: Vec<u64>,
    len: usize,
}

impl ChunkBuf {
    fn new(name: &str, data: &[u8], last: bool) -> ChunkBuf {
        let mut words = vec![0u64; (ACLDUMP_CHUNK_HEADER_LEN + data.len()).div_ceil(8)];
        let mut header = acldumpChunk {
            fileName: [0; 4096],
            bufLen: data.len() as u32,
            isLastChunk: u32::from(last),
            offset: -1,
            flag: 0,
            dataBuf: __IncompleteArrayField::new(),
        };
        for (d, s) in header.fileName.iter_mut().zip(name.bytes()) {
            *d = s as core::ffi::c_char;
        }
        let base = words.as_mut_ptr().cast::<u8>();
        // SAFETY: `words` is 8-byte aligned and holds HEADER_LEN + data.len() bytes >= DATA_OFFSET + data.len().
        unsafe {
            base.cast::<acldumpChunk>().write(header);
            std::ptr::copy_nonoverlapping(data.as_ptr(), base.add(ACLDUMP_CHUNK_DATA_OFFSET), data.len());
        }
        ChunkBuf { words, len: ACLDUMP_CHUNK_HEADER_LEN + data.len() }
    }

    fn call(&self) {
        // SAFETY: a well-formed chunk of `len` bytes, alive for the call.
        unsafe { dump_callback(self.words.as_ptr().cast(), self.len as i32) };
    }
}

fn percentile(sorted: &[u64], q: f64) -> u64 {
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

fn out_dir() -> (Option<tempfile::TempDir>, PathBuf) {
    match std::env::var_os("ACCUTRACE_BENCH_OUT") {
        Some(d) => (None, PathBuf::from(d)),
        None => {
            let t = tempfile::tempdir().unwrap();
            let p = t.path().to_path_buf();
            (Some(t), p)
        }
    }
}

/// Waits for this thread's stores to complete (MFENCE also drains write-combining buffers, which a
/// streaming copy leaves behind), so that a timing includes them and does not pass them to the next one.
fn stores_done() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: MFENCE has no preconditions; SSE2 is part of the x86_64 baseline.
    unsafe {
        std::arch::x86_64::_mm_mfence()
    };
    #[cfg(not(target_arch = "x86_64"))]
    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
}

/// A buffer handed back and forth between the timing thread, which copies a chunk into it, and a reader
/// thread pinned to another CPU, which copies it out (as a writer reads a slot) before the next copy in.
/// A copy into it is what handing chunk bytes to another core costs at the least: its stores must first
/// take the buffer's lines back from the reader's cache.
struct HandOff {
    buf: Mutex<Vec<u8>>,
    /// 0: the buffer is the timing thread's; 1: the reader's; 2: the reader should stop.
    turn: AtomicU32,
}

impl HandOff {
    const MINE: u32 = 0;
    const READERS: u32 = 1;
    const STOP: u32 = 2;

    /// The reader's loop: copies the buffer out each time it is handed over, until told to stop.
    fn read_until_stopped(&self, cpu: Option<usize>) {
        if let Some(cpu) = cpu {
            pin_to(cpu);
        }
        let mut out = Vec::new();
        loop {
            match self.turn.load(Ordering::Acquire) {
                Self::STOP => return,
                Self::READERS => {
                    let b = self.buf.lock().unwrap();
                    out.clear();
                    out.extend_from_slice(&b);
                    black_box(&out);
                    drop(b);
                    self.turn.store(Self::MINE, Ordering::Release);
                }
                _ => std::thread::park(),
            }
        }
    }

    /// One timed copy of `payload` into the buffer (after the reader has copied out the previous one),
    /// then hands it to `reader`. Nanoseconds.
    fn timed_copy(&self, payload: &[u8], reader: &std::thread::Thread) -> u64 {
        while self.turn.load(Ordering::Acquire) != Self::MINE {
            std::thread::yield_now();
        }
        let mut b = self.buf.lock().unwrap();
        let t = Instant::now();
        b.copy_from_slice(black_box(payload));
        black_box(&mut *b);
        stores_done();
        let ns = t.elapsed().as_nanos() as u64;
        drop(b);
        self.turn.store(Self::READERS, Ordering::Release);
        reader.unpark();
        ns
    }
}

/// The CPUs this process may run on (Linux), else none.
fn allowed_cpus() -> Vec<usize> {
    // SAFETY: sched_getaffinity fills the set it is given (a zeroed cpu_set_t is an empty, valid one) and
    // CPU_ISSET only reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Vec::new();
        }
        (0..libc::CPU_SETSIZE as usize).filter(|&c| libc::CPU_ISSET(c, &set)).collect()
    }
}

/// Pins the calling thread to `cpu` (best effort).
fn pin_to(cpu: usize) {
    // SAFETY: as in `allowed_cpus`; CPU_SET writes inside the set; pid 0 is the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// Restores the calling thread's affinity to `cpus`.
fn unpin(cpus: &[usize]) {
    // SAFETY: as in `pin_to`.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &c in cpus {
            libc::CPU_SET(c, &mut set);
        }
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// The dump callback on chunks of 4 KiB, 16 KiB, 64 KiB and 1 MiB (one writer thread, policy `block`,
/// stats mode), interleaved in one loop with three memcpys of the same payload from the same source: into
/// one hot buffer (the floor no copy gets below); into destinations rotating over the pool's total size,
/// laid out like its slots (what any design pays that must not overwrite bytes a writer still owns); and
/// into a buffer that a thread on another CPU copies out after each copy ([`HandOff`]: what handing bytes to
/// another core costs at the least; the timing thread runs on the first allowed CPU, the reader on the
/// second, for this part). Timed with `Instant` around each call, up to a full memory fence; median and p99
/// of each.
fn callback_cost(root: &Path) {
    println!("## callback cost per chunk vs memcpy of the same chunk (same run, interleaved)");
    let cpus = allowed_cpus();
    if cpus.len() < 2 {
        println!("(one CPU: the handed-over copy's reader shares it with this thread)");
    }
    println!("| chunk | callback median / p99 | hot memcpy median / p99 | callback / hot | rotating memcpy median / p99 | callback / rotating | handed-over memcpy median / p99 | callback / handed-over |");
    println!("|---|---|---|---|---|---|---|---|");
    for (i, size) in [4usize << 10, 16 << 10, 64 << 10, 1 << 20].into_iter().enumerate() {
        let (slots, slot_size) = (256, size + (8 << 10));
        let cfg = Config {
            dir: root.join(format!("cb-{i}")),
            mode: Mode::Stats,
            slots,
            slot_size,
            segment_size: 8 << 20,
            ..Config::default()
        };
        let p = standalone(cfg).unwrap();
        let payload: Vec<u8> = (0..size).map(|i| (i * 31 % 251) as u8).collect();
        // A complete one-chunk "file" each time: the writer finds it is no dump file and only counts it.
        let chunk = ChunkBuf::new("/bench/20240101000000/0/net/1/0/Op.op.1.2.3", &payload, true);
        let mut dst = vec![0u8; size];
        // As many bytes as the pool, touched up front (no page faults in the timed copies).
        let mut rotating = vec![1u8; slots * slot_size];
        let n = if size >= 1 << 20 { 2_000 } else { 20_000 };
        let (mut cb, mut cp, mut cr) = (Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n));
        let mut ch = Vec::with_capacity(n);
        let hand_off = HandOff { buf: Mutex::new(vec![2u8; size]), turn: AtomicU32::new(HandOff::MINE) };
        // Pinned only now: the pipeline's writer thread, started above, keeps the process's whole CPU set.
        if let Some(&first) = cpus.first() {
            pin_to(first);
        }
        std::thread::scope(|scope| {
            let reader = scope.spawn(|| hand_off.read_until_stopped(cpus.get(1).copied()));
            for i in 0..n {
                let t = Instant::now();
                chunk.call();
                stores_done();
                cb.push(t.elapsed().as_nanos() as u64);
                let t = Instant::now();
                dst.copy_from_slice(black_box(&payload));
                black_box(&mut dst);
                stores_done();
                cp.push(t.elapsed().as_nanos() as u64);
                let at = i % slots * slot_size;
                let d = &mut rotating[at..at + size];
                let t = Instant::now();
                d.copy_from_slice(black_box(&payload));
                black_box(d);
                stores_done();
                cr.push(t.elapsed().as_nanos() as u64);
                ch.push(hand_off.timed_copy(&payload, reader.thread()));
            }
            hand_off.turn.store(HandOff::STOP, Ordering::Release);
            reader.thread().unpark();
        });
        unpin(&cpus);
        finish(p, End::Finalize);
        for v in [&mut cb, &mut cp, &mut cr, &mut ch] {
            v.sort_unstable();
        }
        let s = p.counters.snapshot();
        let median = |v: &[u64]| percentile(v, 0.5);
        println!(
            "| {} KiB | {} / {} ns | {} / {} ns | {:.2} | {} / {} ns | {:.2} | {} / {} ns | {:.2} |  (block waits {}, drops {})",
            size >> 10,
            median(&cb),
            percentile(&cb, 0.99),
            median(&cp),
            percentile(&cp, 0.99),
            median(&cb) as f64 / median(&cp).max(1) as f64,
            median(&cr),
            percentile(&cr, 0.99),
            median(&cb) as f64 / median(&cr).max(1) as f64,
            median(&ch),
            percentile(&ch, 0.99),
            median(&cb) as f64 / median(&ch).max(1) as f64,
            s.block_waits,
            s.dropped()
        );
    }
}

/// Synthetic dump files: one fp16 output each, values like activations (smooth plus noise).
fn synthetic_files(total: usize) -> Vec<(String, Vec<u8>)> {
    let mut files = Vec::new();
    let mut bytes = 0;
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    let mut k = 0u64;
    while bytes < total {
        let elems = [16 << 10, 64 << 10, 256 << 10, 512 << 10][k as usize % 4];
        let values: Vec<f32> = (0..elems)
            .map(|i| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                let noise = (seed >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
                (i as f32 * 0.001 + k as f32).sin() * 2.0 + noise * 0.5
            })
            .collect();
        let data = accutrace_formats::tensor::encode_f32(DType::FLOAT16, &values).unwrap();
        let header = DumpData {
            version: "2.0".into(),
            op_name: format!("model/layer_{}/mlp/fc1/MatMul", k % 8),
            output: vec![OpOutput {
                data_type: DType::FLOAT16.code(),
                format: 2,
                shape: Some(Shape { dim: vec![elems as u64] }),
                original_shape: Some(Shape { dim: vec![elems as u64] }),
                ..OpOutput::default()
            }],
            ..DumpData::default()
        };
        let file = accutrace_formats::dump::encode_dump(&header, &[], &[&data], &[], &[]).unwrap();
        let name = format!(
            "/bench/20240101000000/0/net/1/{}/MatMulV2.model_layer_{}_mlp_fc1_MatMul.{}.2.{}",
            k / 64,
            k % 8,
            10 + k % 64,
            1_704_067_200_000_000 + k
        );
        bytes += file.len();
        files.push((name, file));
        k += 1;
    }
    files
}

fn dump_tree_files(root: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push((p.display().to_string(), std::fs::read(&p).unwrap()));
            }
        }
    }
    out.sort();
    out
}

/// CPU time (user + system) of every thread of this process so far, in seconds.
fn process_cpu() -> f64 {
    // SAFETY: getrusage fills the struct it is given; an all-zero rusage is a valid value to pass.
    let u = unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut u);
        u
    };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    secs(u.ru_utime) + secs(u.ru_stime)
}

/// Wall and CPU seconds of one timed run; `workers`: the CPU of its compressing threads alone (raw zstd's
/// threads, the pipeline's writer threads).
#[derive(Clone, Copy)]
struct Timing {
    wall: f64,
    cpu: f64,
    workers: f64,
}

impl Timing {
    /// Times `f`; `workers` is set to all the process's CPU (callers running other threads replace it).
    fn of(f: impl FnOnce()) -> Timing {
        let (t, c) = (Instant::now(), process_cpu());
        f();
        let cpu = process_cpu() - c;
        Timing { wall: t.elapsed().as_secs_f64(), cpu, workers: cpu }
    }

    fn best(self, other: Timing) -> Timing {
        Timing {
            wall: self.wall.min(other.wall),
            cpu: self.cpu.min(other.cpu),
            workers: self.workers.min(other.workers),
        }
    }

    const NONE: Timing = Timing { wall: f64::INFINITY, cpu: f64::INFINITY, workers: f64::INFINITY };
}

/// The pipeline counters a standalone run left in its manifest.
fn pipeline_counters(m: &Manifest) -> accutrace_formats::capture::PipelineCounters {
    serde_json::from_value(m.config["pipeline"].as_object().unwrap().values().next().unwrap().clone())
        .unwrap()
}

/// Runs `files` through a standalone pipeline in 64 KiB chunks: the callback on this thread, then the
/// drain and seal. Returns its timing (the CPU of every thread: callback, writers, segment preparation)
/// and the manifest.
fn run_pipeline(
    root: &Path,
    tag: &str,
    mode: Mode,
    writers: usize,
    chunks: &[ChunkBuf],
) -> (Timing, Manifest) {
    let dir = root.join(tag);
    let cfg = Config { dir: dir.clone(), mode, slots: 64, slot_size: 1 << 20, writers, ..Config::default() };
    let cfg = Config { segment_size: if mode == Mode::Tensor { 64 << 20 } else { 8 << 20 }, ..cfg };
    let p = standalone(cfg).unwrap();
    let timing = Timing::of(|| {
        for c in chunks {
            c.call();
        }
        finish(p, End::Finalize);
    });
    let manifest = Manifest::read(&dir).unwrap();
    let workers = pipeline_counters(&manifest).writer_cpu_ns as f64 * 1e-9;
    (Timing { workers, ..timing }, manifest)
}

fn pipeline(root: &Path) {
    let files = match std::env::var_os("ACCUTRACE_BENCH_DUMP_DIR") {
        Some(d) => dump_tree_files(Path::new(&d)),
        None => {
            let mib: usize =
                std::env::var("ACCUTRACE_BENCH_MIB").ok().and_then(|v| v.parse().ok()).unwrap_or(128);
            synthetic_files(mib << 20)
        }
    };
    let total: usize = files.iter().map(|(_, b)| b.len()).sum();
    let mut chunks = Vec::new();
    for (name, bytes) in &files {
        let n = bytes.len().div_ceil(64 << 10).max(1);
        for i in 0..n {
            let piece = &bytes[(i * (64 << 10)).min(bytes.len())..((i + 1) * (64 << 10)).min(bytes.len())];
            chunks.push(ChunkBuf::new(name, piece, i + 1 == n));
        }
    }
    let mib = total as f64 / (1 << 20) as f64;
    println!(
        "\n## pipeline throughput: {} files, {mib:.1} MiB, {} chunks of <= 64 KiB",
        files.len(),
        chunks.len()
    );

    let threads: Vec<usize> = std::env::var("ACCUTRACE_BENCH_THREADS")
        .unwrap_or("1,2".into())
        .split(',')
        .filter_map(|t| t.trim().parse().ok())
        .collect();
    // Best of `reps` alternating runs of each (the shared machine's load comes and goes).
    let reps: usize =
        std::env::var("ACCUTRACE_BENCH_REPS").ok().and_then(|v| v.parse().ok()).unwrap_or(3).max(1);
    println!(
        "(best of {reps} alternating runs of each: ACCUTRACE_BENCH_REPS; CPU: all threads of the process)"
    );
    println!("| threads | raw zstd -1 MiB/s | tensor mode MiB/s | tensor / zstd | CPU s: zstd / tensor (all threads) | zstd CPU / tensor CPU | CPU s: zstd / writer threads | zstd CPU / writers' CPU | stats mode MiB/s | zstd bytes | tensor-mode bytes |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    let mut stats_manifest = None;
    let mut tensor_manifests = Vec::new();
    for &n in &threads {
        let (mut z, mut t, mut s) = (Timing::NONE, Timing::NONE, Timing::NONE);
        let (mut zbytes, mut tm, mut sm) = (0, None, None);
        for rep in 0..reps {
            let mut zb = 0;
            let zt = Timing::of(|| zb = raw_zstd(&files, n));
            let (tt, m) = run_pipeline(root, &format!("tensor-{n}-{rep}"), Mode::Tensor, n, &chunks);
            let (st, ms) = run_pipeline(root, &format!("stats-{n}-{rep}"), Mode::Stats, n, &chunks);
            (z, t, s) = (z.best(zt), t.best(tt), s.best(st));
            (zbytes, tm, sm) = (zb, Some(m), Some(ms));
            // Keep the output of the last repetition only (tmpfs space).
            if rep + 1 < reps {
                for tag in [format!("tensor-{n}-{rep}"), format!("stats-{n}-{rep}")] {
                    let _ = std::fs::remove_dir_all(root.join(tag));
                }
            }
        }
        let (Some(tm), Some(sm)) = (tm, sm) else { continue };
        println!(
            "| {n} | {:.0} | {:.0} | {:.2} | {:.3} / {:.3} | {:.2} | {:.3} / {:.3} | {:.2} | {:.0} | {zbytes} | {} |",
            mib / z.wall,
            mib / t.wall,
            z.wall / t.wall,
            z.cpu,
            t.cpu,
            z.cpu / t.cpu,
            z.workers,
            t.workers,
            z.workers / t.workers,
            mib / s.wall,
            tm.streams[0].counts.bytes_out
        );
        tensor_manifests.push((n, tm));
        stats_manifest = Some(sm);
    }
    let Some(sm) = stats_manifest else { return };
    let s = &sm.streams[0].counts;
    println!(
        "\n## stats mode: {} tensors, {} ops, {} frame bytes -> {:.1} bytes per tensor (op records included)",
        s.tensors,
        s.ops,
        s.bytes_out,
        s.bytes_out as f64 / s.tensors.max(1) as f64
    );
    let tagged = tensor_manifests.iter().map(|(n, m)| (format!("tensor, {n} writers"), m));
    for (tag, m) in tagged.chain([("stats".to_string(), &sm)]) {
        let p = pipeline_counters(m);
        println!(
            "{tag}: chunks {} written {} dropped {} block waits {}",
            p.chunks,
            p.chunks_written,
            p.dropped(),
            p.block_waits
        );
    }
}

/// Raw zstd level 1 on the files' bytes (no shuffle, statistics or I/O) by `threads` threads with a
/// context each, each taking the next file not yet taken (so they finish together, whatever the sizes);
/// returns the compressed bytes.
fn raw_zstd(files: &[(String, Vec<u8>)], threads: usize) -> usize {
    let bound = zstd::zstd_safe::compress_bound(files.iter().map(|f| f.1.len()).max().unwrap_or(0));
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut c = zstd::bulk::Compressor::new(1).unwrap();
                    let mut out = Vec::with_capacity(bound);
                    let mut bytes = 0;
                    while let Some((_, b)) = files.get(next.fetch_add(1, Ordering::Relaxed)) {
                        out.clear();
                        bytes += c.compress_to_buffer(b.as_slice(), &mut out).unwrap();
                    }
                    bytes
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).sum()
    })
}

fn main() {
    // `cargo bench` passes --bench; `cargo test --benches` runs this too: keep that quick.
    let quick = !std::env::args().any(|a| a == "--bench");
    if quick {
        std::env::set_var("ACCUTRACE_BENCH_MIB", std::env::var("ACCUTRACE_BENCH_MIB").unwrap_or("4".into()));
    }
    let (_keep, root) = out_dir();
    let only = std::env::var("ACCUTRACE_BENCH_ONLY").unwrap_or_default();
    if !["", "callback", "pipeline"].contains(&only.as_str()) {
        eprintln!("ACCUTRACE_BENCH_ONLY={only}: expected `callback` or `pipeline` (or unset for both)");
        std::process::exit(2);
    }
    if only.is_empty() || only == "callback" {
        callback_cost(&root);
    }
    if only.is_empty() || only == "pipeline" {
        pipeline(&root);
    }
}
