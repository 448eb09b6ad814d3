//! `analyzer merge` at cluster scale, on synthetic rank summaries: a data-parallel job of N ranks (one
//! communicator, a broadcast of the weights, then per step the ops of a small transformer and three gradient
//! all-reduces; weights and reduced gradients alike on every rank, activations not), with an fp16 overflow
//! injected on one rank that spreads through the next all-reduce. Each size: the summaries written as
//! `analyzer scan` writes them (one Parquet file per rank), then read and analysed as `analyzer merge` does;
//! the answer is checked (the injected rank, step and op), so a broken path is not timed.
//!
//! `cargo bench -p accutrace-analyzer --bench merge` (ACCUTRACE_BENCH_RANKS="1000 10000" chooses the job
//! sizes, ACCUTRACE_BENCH_OPS_PER_STEP="110" the ops per step of each rank, 3 steps).

use accutrace_formats::capture::CollectiveOp;
use analyzer::index::Io;
use analyzer::ranks::events::{CollectiveMeta, Event, EventKind, RankEvents, RunEvents, TensorSummary};
use analyzer::ranks::{analyze, summary};
use std::time::Instant;

const STEPS: u64 = 3;
const OVERFLOW_STEP: u64 = 1;
const ALL_REDUCES_PER_STEP: u64 = 3;

fn numbers(var: &str, default: &[usize]) -> Vec<usize> {
    std::env::var(var)
        .ok()
        .map(|v| v.split_whitespace().filter_map(|n| n.parse().ok()).collect())
        .unwrap_or_else(|| default.to_vec())
}

fn tensor(io: Io, index: u32, hash: u64, inf: bool) -> TensorSummary {
    TensorSummary {
        io,
        index,
        dtype: "FLOAT16".into(),
        float: true,
        elements: 4096,
        nan: 0,
        pos_inf: u64::from(inf),
        neg_inf: 0,
        at_saturation: 0,
        min: -1.0,
        max: if inf { f64::INFINITY } else { 1.0 },
        mean: 0.01,
        l2_norm: 12.5,
        hash: Some(hash),
    }
}

fn mix(parts: &[u64]) -> u64 {
    parts.iter().fold(0xcbf2_9ce4_8422_2325, |h, p| (h ^ p).wrapping_mul(0x100_0000_01b3))
}

/// One rank's events; `overflow`: (rank, op index) where the overflow is injected at OVERFLOW_STEP.
fn rank_events(rank: u32, ranks: u32, ops_per_step: u64, overflow: (u32, u64)) -> RankEvents {
    let mut events = Vec::new();
    let mut seq = 0;
    let mut time = 1_700_000_000_000_000u64;
    let call = |op, tensors: Vec<TensorSummary>, step, time: u64, seq: &mut u64| {
        let meta = CollectiveMeta {
            comm: "root-0001".into(),
            seq: *seq,
            op,
            peer: None,
            comm_rank: rank,
            comm_size: ranks,
        };
        *seq += 1;
        Event { step, time_us: Some(time), kind: EventKind::Collective(meta), tensors }
    };
    let weights = tensor(Io::Input, 0, mix(&[1]), false);
    events.push(call(
        CollectiveOp::Broadcast,
        vec![weights.clone(), TensorSummary { io: Io::Output, ..weights }],
        0,
        time,
        &mut seq,
    ));
    let mut poisoned = false;
    // Gradient all-reduces after each chunk of ops (backward buckets).
    let chunk = (ops_per_step / ALL_REDUCES_PER_STEP).max(1);
    for step in 0..STEPS {
        for k in 0..ops_per_step {
            time += 10;
            let injected = rank == overflow.0 && step == OVERFLOW_STEP && k == overflow.1;
            // The weight (input 1) is replicated; the activation (input 0, output 0) is this rank's own.
            let tensors = vec![
                tensor(Io::Input, 0, mix(&[2, step, k, u64::from(rank)]), poisoned),
                tensor(Io::Input, 1, mix(&[3, step, k]), false),
                tensor(Io::Output, 0, mix(&[4, step, k, u64::from(rank)]), poisoned || injected),
            ];
            poisoned |= injected;
            let kind = EventKind::Op {
                name: format!("model/layer_{}/op_{k}", k / 10).into(),
                op_type: "MatMulV2".into(),
            };
            events.push(Event { step, time_us: Some(time), kind, tensors });
            if (k + 1) % chunk == 0 && (k + 1) / chunk <= ALL_REDUCES_PER_STEP {
                let spread = step == OVERFLOW_STEP && k >= overflow.1 || step > OVERFLOW_STEP;
                let gradient = mix(&[5, step, k]);
                let sent = tensor(Io::Input, 0, mix(&[6, step, k, u64::from(rank)]), poisoned);
                let reduced = tensor(Io::Output, 0, gradient, spread);
                time += 10;
                events.push(call(CollectiveOp::AllReduce, vec![sent, reduced], step, time, &mut seq));
                poisoned |= spread;
            }
        }
    }
    RankEvents { rank, events }
}

fn seconds<T>(f: impl FnOnce() -> T) -> (T, f64) {
    let t = Instant::now();
    let out = f();
    (out, t.elapsed().as_secs_f64())
}

/// The process's peak resident memory, from /proc (Linux).
fn peak_rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(f64::NAN);
    kib / 1024.0
}

fn main() {
    let sizes = numbers("ACCUTRACE_BENCH_RANKS", &[1_000, 10_000]);
    let ops_per_step = numbers("ACCUTRACE_BENCH_OPS_PER_STEP", &[110])[0] as u64;
    println!(
        "{:>7} {:>12} {:>10} {:>10} {:>9} {:>9} {:>11} {:>11} {:>12}",
        "ranks", "events", "KB/rank", "write s", "read s", "analyze s", "merge s", "us/event", "peak RSS MiB"
    );
    for n in sizes {
        let ranks = n as u32;
        let dir = tempfile::tempdir().unwrap();
        let overflow = (ranks / 2, ops_per_step / 2);
        let mut events = 0u64;
        let mut bytes = 0u64;
        let (_, write_s) = seconds(|| {
            for rank in 0..ranks {
                let run = RunEvents {
                    ranks: vec![rank_events(rank, ranks, ops_per_step, overflow)],
                    ..Default::default()
                };
                events += run.ranks[0].events.len() as u64;
                for w in summary::write(&run, &Default::default(), "synthetic", dir.path()).unwrap() {
                    bytes += w.bytes;
                }
            }
        });
        let (run, read_s) = seconds(|| summary::read(&[dir.path().to_path_buf()]).unwrap());
        let (found, analyze_s) = seconds(|| analyze("synthetic", &run, None));
        let first = found.origins.first().expect("the injected overflow is found");
        assert_eq!(
            (first.rank, first.step, first.op.as_str()),
            (
                overflow.0,
                OVERFLOW_STEP,
                format!("model/layer_{}/op_{}", overflow.1 / 10, overflow.1).as_str()
            )
        );
        assert_eq!(found.spread.len(), n, "the overflow reached every rank");
        assert!(found.input_problems.is_empty());
        let merge_s = read_s + analyze_s;
        println!(
            "{n:>7} {events:>12} {:>10.1} {write_s:>10.2} {read_s:>9.2} {analyze_s:>9.2} {merge_s:>11.2} {:>11.2} {:>12.0}",
            bytes as f64 / n as f64 / 1024.0,
            merge_s / events as f64 * 1e6,
            peak_rss_mib()
        );
    }
}
