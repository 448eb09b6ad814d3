//! Reading a recorded capture's tensor data on one core (std::time, no harness): zstd alone on the
//! capture's own frames (the floor of any analysis that needs the values: issue #18) beside the reader's
//! whole decode (zstd, the inverse byte shuffle, the content-hash check), side by side in one run.
//!
//! Run: `ACCUTRACE_BENCH_CAPTURES="RUN..." cargo bench -p accutrace-formats --bench read_capture`, e.g. on
//! the captures `scripts/bench-diff` records (`target/bench-data/diff-medium-4/a` and `b`). Warm page cache:
//! each capture is read once before it is timed. `ACCUTRACE_BENCH_RUNS` (default 3, best kept). Times are
//! the reading thread's CPU time: on a shared machine its wall time also counts other processes' turns.
//! Then the values of the tensors of at least 2 MiB of data, decoded to f32 as compare reads them, on one
//! thread and on the pool's (`RAYON_NUM_THREADS` sets how many): wall time, best of the runs.

use accutrace_formats::capture::reader::{CaptureRun, CapturedTensor, Record};
use accutrace_formats::capture::DataEncoding;
use std::path::Path;
use std::time::Instant;

/// Totals of one pass: (tensors, stored bytes, decoded bytes).
type Totals = (u64, u64, u64);

/// Calls `f` on every tensor record that carries data.
fn each_tensor(run: &CaptureRun, f: &mut dyn FnMut(&CapturedTensor<'_>)) {
    for stream in &run.streams {
        for record in stream.records() {
            if let Record::Tensor(t) = record.expect("capture reads").record {
                if t.has_data() {
                    f(&t);
                }
            }
        }
    }
}

/// zstd alone: every frame decompressed into one reused buffer by one reused context.
fn zstd_only(run: &CaptureRun, out: &mut Vec<u8>) -> Totals {
    let mut d = zstd::bulk::Decompressor::new().expect("zstd context");
    let mut totals = (0, 0, 0);
    each_tensor(run, &mut |t| {
        let stored = t.stored_bytes();
        out.clear();
        match t.encoding {
            DataEncoding::Zstd { .. } => {
                out.reserve(t.data_size as usize);
                d.decompress_to_buffer(stored, out).expect("zstd decodes");
            }
            _ => out.extend_from_slice(stored),
        }
        totals.0 += 1;
        totals.1 += stored.len() as u64;
        totals.2 += out.len() as u64;
    });
    totals
}

/// The reader's decode, as analyses get the bytes.
fn reader(run: &CaptureRun, out: &mut Vec<u8>, scratch: &mut Vec<u8>) -> Totals {
    let mut totals = (0, 0, 0);
    each_tensor(run, &mut |t| {
        t.read_data_with(out, scratch).expect("tensor decodes");
        totals.0 += 1;
        totals.1 += t.stored_size();
        totals.2 += out.len() as u64;
    });
    totals
}

/// Data of at least this many bytes is what the reader decodes to f32 on several threads.
const LARGE: u64 = 2 << 20;

/// The values of every tensor of at least [`LARGE`] bytes of data, decoded to f32 as compare reads them
/// (`with_tensor_blocks_at` and `decode_f32_into`, the content hash checked), in the current rayon pool.
fn large_values(run: &CaptureRun, out: &mut Vec<f32>, scratch: &mut Vec<u8>) -> Totals {
    let mut totals = (0, 0, 0);
    for stream in &run.streams {
        for record in stream.records() {
            let record = record.expect("capture reads");
            let Record::Tensor(t) = record.record else { continue };
            if !t.has_data() || t.data_size < LARGE {
                continue;
            }
            let read = stream.with_tensor_blocks_at(record.segment_index, record.offset, scratch, |blocks| {
                blocks.decode_f32_into(t.meta.dtype, out)
            });
            assert!(read.expect("tensor reads").expect("values decode"), "values decoded in blocks");
            totals.0 += 1;
            totals.1 += t.stored_size();
            totals.2 += t.data_size;
        }
    }
    totals
}

/// CPU time in seconds on `clock`: `CLOCK_PROCESS_CPUTIME_ID` (every thread of the process) or
/// `CLOCK_THREAD_CPUTIME_ID` (the calling thread).
fn cpu_seconds(clock: libc::clockid_t) -> f64 {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `t` is a valid timespec to write into; both clocks exist on Linux.
    unsafe { libc::clock_gettime(clock, &mut t) };
    t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
}

/// The best of `runs` of `f`: (wall s, CPU s on `clock`, totals) of the run with the least wall time
/// (`by_wall`) or the least CPU time.
fn best_of(
    runs: usize,
    clock: libc::clockid_t,
    by_wall: bool,
    mut f: impl FnMut() -> Totals,
) -> (f64, f64, Totals) {
    let mut best: Option<(f64, f64, Totals)> = None;
    for _ in 0..runs {
        let (t0, c0) = (Instant::now(), cpu_seconds(clock));
        let totals = f();
        let (wall, cpu) = (t0.elapsed().as_secs_f64(), cpu_seconds(clock) - c0);
        let key = |b: &(f64, f64, Totals)| if by_wall { b.0 } else { b.1 };
        if best.as_ref().is_none_or(|b| key(&(wall, cpu, totals)) < key(b)) {
            best = Some((wall, cpu, totals));
        }
    }
    best.unwrap_or((0.0, 0.0, (0, 0, 0)))
}

fn main() {
    let Some(captures) = std::env::var_os("ACCUTRACE_BENCH_CAPTURES") else {
        eprintln!(
            "read_capture: set ACCUTRACE_BENCH_CAPTURES to capture run directories (see the file's doc)"
        );
        return;
    };
    let runs: usize = std::env::var("ACCUTRACE_BENCH_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(3);
    println!("one thread: CPU s (best of {runs}), wall s of that run; GB/s of decoded data per CPU s");
    println!(
        "{:<40} {:>8} {:>9} {:>9} {:>8} {:>8} {:>9} {:>10} {:>8} {:>11}",
        "capture",
        "tensors",
        "stored GB",
        "data GB",
        "zstd CPU",
        "wall",
        "zstd GB/s",
        "reader CPU",
        "wall",
        "reader GB/s"
    );
    let (mut out, mut scratch) = (Vec::new(), Vec::new());
    let mut large = Vec::new();
    for dir in captures.to_string_lossy().split_whitespace() {
        let run = CaptureRun::open(Path::new(dir)).expect("capture opens");
        zstd_only(&run, &mut out); // warms the page cache and the buffers
        let (wz, cz, z) = best_of(runs, libc::CLOCK_THREAD_CPUTIME_ID, false, || zstd_only(&run, &mut out));
        let (wr, cr, r) =
            best_of(runs, libc::CLOCK_THREAD_CPUTIME_ID, false, || reader(&run, &mut out, &mut scratch));
        assert_eq!(z, r, "both passes read the same tensors");
        println!(
            "{:<40} {:>8} {:>9.3} {:>9.3} {:>8.3} {:>8.3} {:>9.2} {:>10.3} {:>8.3} {:>11.2}",
            dir,
            z.0,
            z.1 as f64 / 1e9,
            z.2 as f64 / 1e9,
            cz,
            wz,
            z.2 as f64 / 1e9 / cz,
            cr,
            wr,
            r.2 as f64 / 1e9 / cr
        );
        // The values of the large tensors: on one thread, then on every thread of the pool.
        let one = rayon::ThreadPoolBuilder::new().num_threads(1).build().expect("a pool");
        let (mut values, threads) = (Vec::new(), rayon::current_num_threads());
        large_values(&run, &mut values, &mut scratch);
        let serial = best_of(runs, libc::CLOCK_PROCESS_CPUTIME_ID, true, || {
            one.install(|| large_values(&run, &mut values, &mut scratch))
        });
        let parallel = best_of(runs, libc::CLOCK_PROCESS_CPUTIME_ID, true, || {
            large_values(&run, &mut values, &mut scratch)
        });
        assert_eq!(serial.2, parallel.2, "both passes read the same tensors");
        large.push((dir.to_string(), threads, serial, parallel));
    }
    println!(
        "\nvalues of the tensors of at least 2 MiB of data, decoded to f32 (best of {runs} by wall; process CPU)"
    );
    println!(
        "{:<40} {:>8} {:>9} {:>8} {:>11} {:>10} {:>12} {:>11}",
        "capture", "tensors", "data GB", "threads", "1 thread s", "CPU s", "pool wall s", "CPU s"
    );
    for (dir, threads, serial, parallel) in large {
        println!(
            "{:<40} {:>8} {:>9.3} {:>8} {:>11.3} {:>10.3} {:>12.3} {:>11.3}",
            dir,
            serial.2 .0,
            serial.2 .2 as f64 / 1e9,
            threads,
            serial.0,
            serial.1,
            parallel.0,
            parallel.1
        );
    }
}
