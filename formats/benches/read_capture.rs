//! Reading a recorded capture's tensor data on one core (std::time, no harness): zstd alone on the
//! capture's own frames (the floor of any analysis that needs the values: issue #18) beside the reader's
//! whole decode (zstd, the inverse byte shuffle, the content-hash check), side by side in one run.
//!
//! Run: `ACCUTRACE_BENCH_CAPTURES="RUN..." cargo bench -p accutrace-formats --bench read_capture`, e.g. on
//! the captures `scripts/bench-diff` records (`target/bench-data/diff-medium-4/a` and `b`). Warm page cache:
//! each capture is read once before it is timed. `ACCUTRACE_BENCH_RUNS` (default 3, best kept). Times are
//! the reading thread's CPU time: on a shared machine its wall time also counts other processes' turns.

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

/// CPU time of the calling thread, in seconds.
fn thread_cpu() -> f64 {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `t` is a valid timespec to write into; CLOCK_THREAD_CPUTIME_ID exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
}

/// Best of `runs` by CPU time: (CPU s, wall s of that run, totals).
fn best(runs: usize, mut f: impl FnMut() -> Totals) -> (f64, f64, Totals) {
    let mut best = (f64::INFINITY, 0.0, (0, 0, 0));
    for _ in 0..runs {
        let (t0, c0) = (Instant::now(), thread_cpu());
        let totals = f();
        let (wall, cpu) = (t0.elapsed().as_secs_f64(), thread_cpu() - c0);
        if cpu < best.0 {
            best = (cpu, wall, totals);
        }
    }
    best
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
    for dir in captures.to_string_lossy().split_whitespace() {
        let run = CaptureRun::open(Path::new(dir)).expect("capture opens");
        zstd_only(&run, &mut out); // warms the page cache and the buffers
        let (cz, wz, z) = best(runs, || zstd_only(&run, &mut out));
        let (cr, wr, r) = best(runs, || reader(&run, &mut out, &mut scratch));
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
    }
}
