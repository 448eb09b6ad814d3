//! One tensor pair read, measured and judged ([`compare_pair`]): a wave at a time where its metrics fold
//! chunk by chunk (`in_waves`), else whole ([`read_whole`]): both sides at once where the pair is large
//! ([`reads_sides_at_once`]), into decode buffers each measuring thread keeps ([`BUFFERS`],
//! [`SIDE_BUFFERS`]) until the engine frees them; a repeat of an earlier pair takes its metrics; a pair
//! nobody can read is told apart from one whose stored hashes show it identical.

use super::comparison::CompareOptions;
use super::in_waves;
use super::row::{CompareRow, Measured};
use crate::index::{TensorId, TensorInfo};
use crate::matching::TensorPair;
use crate::metrics::msprobe::{accuracy_reached, Accuracy};
use crate::metrics::{measure, Cell, Families, MetricsRequest, MsprobeMetrics, PairMetrics};
use crate::sources::{with_lent_buffers, LentBuffers, Source};
use crate::threads::tensor_bytes;
use accutrace_formats::tensor::element_count;
use anyhow::Result;

thread_local! {
    /// Per-thread decode buffers for [`compare_pair`]: one allocation per thread and size class, not per pair.
    /// Only the threads that measure pairs hold them, the pool's first few ([`in_flight`]), the same ones in
    /// every window, each as large as the pairs it may take: the other threads only help within a pair and
    /// never call [`compare_pair`].
    ///
    /// [`in_flight`]: crate::threads::in_flight
    static BUFFERS: std::cell::Cell<(Vec<f32>, Vec<f32>)> = const { std::cell::Cell::new((Vec::new(), Vec::new())) };
    /// The bench side's decode buffers where [`compare_pair`] reads both sides at once
    /// ([`reads_sides_at_once`]), kept by the measuring thread beside its own: each side's are what
    /// [`Footprint::compare`](crate::threads::Footprint::compare) counts per pair.
    static SIDE_BUFFERS: std::cell::Cell<LentBuffers> = std::cell::Cell::new(LentBuffers::default());
}

/// Frees [`BUFFERS`] and [`SIDE_BUFFERS`] on every thread of the pool once the pairs are measured: as
/// large as the largest pair, they would otherwise stay beside what the next engine of the process keeps
/// (`threads::release_kept_buffers`).
pub(super) fn release_pair_buffers() {
    rayon::broadcast(|_| {
        BUFFERS.with(|c| c.take());
        SIDE_BUFFERS.with(|c| c.take());
        in_waves::release_wave_buffers();
    });
}

/// Pairs at least this large as f32 (either side) read their two sides at once: capture tensors from 2 MiB
/// of fp16 data, where the reader's decode is split over threads too, but its zstd is one serial frame.
const SIDES_AT_ONCE_BYTES: u64 = 4 << 20;

/// Whether [`compare_pair`] reads a pair's two sides at once: a large pair, a bench side that decodes into
/// the buffer ([`Source::decodes_on_read`]: sources that lend values from their map keep `with_values`), and
/// a pool with another thread to take it.
fn reads_sides_at_once(bench: &dyn Source, ti: &TensorInfo, bi: &TensorInfo) -> bool {
    bench.decodes_on_read()
        && rayon::current_num_threads() > 1
        && tensor_bytes(ti).max(tensor_bytes(bi)) >= SIDES_AT_ONCE_BYTES
}

/// What [`compare_pair`] measured from both sides' values: for a pair that repeats this one, where each side
/// stores the same bytes for both, these are its own.
#[derive(Clone)]
pub(super) struct ReadMetrics {
    request: MetricsRequest,
    metrics: PairMetrics,
}

/// One pair's row, the target's content hash where the read computed it (for producer links; `None` where
/// the index has one), and what was measured from both sides' values, when they were read and measured:
/// boxed, as it is kept only for a pair that has repeats, while every result of a window is handed on
/// (#18: inline, each pair's result in a window was 528 bytes, read or not; 96 boxed).
/// With `first` (an earlier pair whose two tensors each side stores with the same bytes as this pair's),
/// its metrics are taken instead of reading, where this pair asks for the same ones; all else is this pair's.
pub(super) fn compare_pair(
    target: &dyn Source,
    bench: &dyn Source,
    p: &TensorPair,
    options: &CompareOptions,
    families: Families,
    first: Option<&ReadMetrics>,
) -> (CompareRow, Option<u64>, Option<Box<ReadMetrics>>) {
    let (t, b) = (p.target(), p.bench());
    let (ti, bi) = (&target.index().tensors[t], &bench.index().tensors[b]);
    let mut row = CompareRow::new(t, Some(b), Some(p.how));
    let mut hash = None;
    let mut read = None;
    // Element counts, checked: a shape whose product overflows 64 bits describes no tensor that exists,
    // so its data cannot be read as that shape.
    let (tn, bn) = (element_count(&ti.shape), element_count(&bi.shape));
    if let Some((side, shape)) = [("target", &ti.shape), ("bench", &bi.shape)]
        .into_iter()
        .zip([tn, bn])
        .find_map(|(side, n)| n.is_none().then_some(side))
    {
        row.set_error(Some(format!("{side} shape {shape:?} has more elements than 64 bits count")));
    } else if tn != bn {
        row.set_msprobe(MsprobeMetrics::shape_unmatched());
    } else if ti.has_data && bi.has_data {
        let request = pair_request(families, ti, bi);
        match first.filter(|f| f.request == request) {
            Some(f) => take_metrics(&mut row, &f.metrics, (ti, bi)),
            None => {
                let (metrics, result) =
                    match in_waves::measure_in_waves(target, bench, (t, ti), (b, bi), &request) {
                        Some(metrics) => (Some(metrics), Ok(None)),
                        None => read_whole(target, bench, (t, ti), (b, bi), &request),
                    };
                if let Some(m) = &metrics {
                    take_metrics(&mut row, m, (ti, bi));
                }
                match result {
                    Ok(h) => {
                        hash = h;
                        read = metrics.map(|metrics| Box::new(ReadMetrics { request, metrics }));
                    }
                    Err(err) => row.set_error(Some(format!("{err:#}"))),
                }
            }
        }
    } else if same_stored_content(ti, bi) {
        row.measured = Measured::EqualHashes;
    } else {
        row.measured = Measured::Nothing;
    }
    row.accuracy = accuracy_reached(row.msprobe());
    judge(&mut row, options);
    (row, hash, read)
}

/// The metrics a pair of tensors with data on both sides is measured for: `families`, and the statistics
/// where the index lacks them (they come from the metrics' own pass, bit for bit `of_f32`'s).
pub(super) fn pair_request(families: Families, ti: &TensorInfo, bi: &TensorInfo) -> MetricsRequest {
    let stats = !ti.has_stats() || !bi.has_stats();
    MetricsRequest::for_pair(families, (ti.dtype, bi.dtype), &ti.shape, stats)
}

/// Both sides of a pair read whole into this thread's decode buffers and measured: the metrics, where both
/// were read (they may come with an error the bench's borrowed read reported after them), and the target's
/// content hash where the index has none, or the first error.
fn read_whole(
    target: &dyn Source,
    bench: &dyn Source,
    (t, ti): (TensorId, &TensorInfo),
    (b, bi): (TensorId, &TensorInfo),
    request: &MetricsRequest,
) -> (Option<PairMetrics>, Result<Option<u64>>) {
    // Decode buffers are reused per thread, taken while in use (a thread measures one pair at a time: while
    // it waits inside a parallel kernel it runs only work stolen from kernels).
    let (mut n, mut bv) = BUFFERS.with(|c| c.take());
    // The target's content hash (for producer links) comes from the same read when the index has none.
    let read_target = |n: &mut Vec<f32>| {
        if ti.hash().is_none() {
            target.read_values_and_hash(t, n).map(Some)
        } else {
            target.read_values(t, n).map(|()| None)
        }
    };
    // Both sides at once where it pays: the bench side may then run on another thread, with buffers this
    // thread keeps for it. The target's error comes first, as when read in turn.
    let values = if reads_sides_at_once(bench, ti, bi) {
        let mut side = SIDE_BUFFERS.with(|c| c.take());
        side.on_this_threads_terms();
        let (values, bench_read) = rayon::join(
            || read_target(&mut n),
            || with_lent_buffers(&mut side, || bench.read_values(b, &mut bv)),
        );
        SIDE_BUFFERS.with(|c| c.replace(side));
        values.and_then(|h| bench_read.map(|()| (h, true)))
    } else {
        read_target(&mut n).map(|h| (h, false))
    };
    let mut measured = None;
    let mut measure = |bv: &[f32]| measured = Some(measure(&n, bv, request));
    let result = values.and_then(|(h, bench_read)| {
        if bench_read {
            measure(&bv);
            return Ok(h);
        }
        // The bench values may be borrowed from the source's map (`with_values`) rather than copied.
        bench.with_values(b, &mut bv, &mut measure).map(|()| h)
    });
    BUFFERS.with(|c| c.replace((n, bv)));
    (measured, result)
}

/// A pair's metrics into its row: the statistics only where the index (`ti`, `bi`) has none.
fn take_metrics(row: &mut CompareRow, m: &PairMetrics, (ti, bi): (&TensorInfo, &TensorInfo)) {
    row.set_msprobe(m.msprobe.clone());
    row.msaccucmp = m.msaccucmp.map(Box::new);
    if let Some((ts, bs)) = m.stats {
        row.target_measured_stats = (!ti.has_stats()).then(|| Box::new(ts));
        row.bench_measured_stats = (!bi.has_stats()).then(|| Box::new(bs));
    }
}

/// Whether both sides store one content hash for one dtype, shape and device layout: the same bytes read
/// the same way, so identical values without decoding either. Only hashes a source stores count (a
/// capture's, over the bytes as dumped): a hash another source computes may cover other bytes (an msprobe
/// dump hashes its decoded values).
fn same_stored_content(t: &TensorInfo, b: &TensorInfo) -> bool {
    t.hash().is_some()
        && t.hash() == b.hash()
        && t.dtype == b.dtype
        && t.shape == b.shape
        && t.device_format() == b.device_format()
        && t.device_shape() == b.device_shape()
}

/// accutrace's precision verdict for one row.
fn judge(row: &mut CompareRow, options: &CompareOptions) {
    let m = row.msprobe();
    let reason = match (row.accuracy, m.cosine, m.max_abs_err) {
        (Accuracy::Unmatched, _, _) => Some("shapes differ".to_string()),
        (_, Cell::NotApplicable, _) => Some("inf/NaN positions differ".to_string()),
        (Accuracy::No, Cell::Value(cos), Cell::Value(abs)) => {
            Some(format!("cosine {cos} and max abs error {abs} miss msprobe's thresholds"))
        }
        (Accuracy::No, _, _) => Some("msprobe's accuracy rule fails".to_string()),
        (_, Cell::Value(cos), _) if options.cosine_min.is_some_and(|min| cos < min) => {
            Some(format!("cosine {cos} < --cosine-min {}", options.cosine_min.unwrap_or_default()))
        }
        (_, _, Cell::Value(abs)) if options.max_abs_err.is_some_and(|max| abs > max) => {
            Some(format!("max abs error {abs} > --max-abs-err {}", options.max_abs_err.unwrap_or_default()))
        }
        _ => None,
    };
    // A pair that could not be read, or of which nothing was measured, is not judged: its metrics are
    // empty, not bad (and not good either).
    row.failed = reason.is_some() && row.judged();
    row.set_reason(if row.judged() { reason } else { None });
}

#[cfg(test)]
mod tests {
    use super::super::test_data::step;
    use super::*;
    use crate::compare::compare;
    use crate::index::{Index, Io, TensorExtras, TensorId};
    use crate::matching::MatchKind;
    use accutrace_formats::DType;
    use anyhow::Result;

    #[test]
    fn equal_stored_hashes_count_only_for_the_same_bytes_read_the_same_way() {
        let (index, _) = step(&[("a", &[], 1)]);
        let stored = TensorInfo { has_data: false, ..index.tensors[0].clone() }.with_hash(Some(7));
        assert!(same_stored_content(&stored, &stored.clone()));
        let differing = [
            stored.clone().with_hash(Some(8)),
            stored.clone().with_hash(None),
            TensorInfo { dtype: DType::FLOAT16, ..stored.clone() },
            TensorInfo { shape: vec![2, 2].into(), ..stored.clone() },
            stored
                .clone()
                .with_extras(TensorExtras { device_format: Some("NC1HWC0".into()), ..stored.extras() }),
        ];
        for other in &differing {
            assert!(
                !same_stored_content(&stored, other) && !same_stored_content(other, &stored),
                "{other:?}"
            );
        }
        let neither = stored.clone().with_hash(None);
        assert!(!same_stored_content(&neither, &neither.clone()));
    }

    /// One op with one f32 output of `values`, or failing with `error`, as a capture (so that compare reads
    /// a large pair's two sides at once): each read takes a little while and logs the thread it ran on.
    struct Sides {
        index: Index,
        values: Vec<f32>,
        error: Option<&'static str>,
        threads: std::sync::Mutex<Vec<Option<usize>>>,
    }

    impl Sides {
        fn new(values: Vec<f32>, hash: u64, error: Option<&'static str>) -> Sides {
            let mut index = Index::default();
            let op = index.push_op("layer/mm".into(), "MatMul".into(), 0, 0);
            index.push_tensor(
                TensorInfo::for_test(op, Io::Output, 0, DType::FLOAT, vec![values.len() as u64])
                    .with_hash(Some(hash)),
            );
            Sides { index, values, error, threads: Default::default() }
        }
    }

    impl Source for Sides {
        fn kind(&self) -> &'static str {
            "capture"
        }
        fn decodes_on_read(&self) -> bool {
            true
        }
        fn root(&self) -> &std::path::Path {
            std::path::Path::new("sides")
        }
        fn index(&self) -> &Index {
            &self.index
        }
        fn read_values(&self, _: TensorId, out: &mut Vec<f32>) -> Result<()> {
            self.threads.lock().unwrap().push(rayon::current_thread_index());
            std::thread::sleep(std::time::Duration::from_millis(20));
            if let Some(error) = self.error {
                anyhow::bail!(error);
            }
            out.clear();
            out.extend_from_slice(&self.values);
            Ok(())
        }
        fn content_hash(&self, t: TensorId) -> Result<u64> {
            Ok(self.index.tensors[t].hash().unwrap())
        }
    }

    /// A pair large enough that its two sides are read at once, on a pool of 4 threads, gives the row that
    /// reading them in turn (a pool of one) gives: the metrics of both sides' values, or the target's error
    /// where the target cannot be read, else the bench's; and the two reads did run on two threads.
    #[test]
    fn a_large_pairs_sides_read_at_once_give_the_row_of_sides_read_in_turn() {
        let n = (SIDES_AT_ONCE_BYTES / 4) as usize;
        let a: Vec<f32> = (0..n).map(|i| (i % 1000) as f32 * 1e-3).collect();
        let b: Vec<f32> =
            a.iter().enumerate().map(|(i, v)| v + if i % 7 == 0 { 1e-3 } else { 0.0 }).collect();
        let pool = |threads| rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
        let (one, four) = (pool(1), pool(4));
        let pair = TensorPair::new(0, 0, MatchKind::Exact);
        let options = CompareOptions::default();
        let mut apart = 0;
        for (target_error, bench_error) in [
            (None, None),
            (Some("target unreadable"), None),
            (None, Some("bench unreadable")),
            (Some("t"), Some("b")),
        ] {
            let (target, bench) =
                (Sides::new(a.clone(), 1, target_error), Sides::new(b.clone(), 2, bench_error));
            let row = |pool: &rayon::ThreadPool| {
                let (row, hash, _) =
                    pool.install(|| compare_pair(&target, &bench, &pair, &options, Families::All, None));
                (format!("{row:?}"), row.error().map(str::to_string), hash)
            };
            let in_turn = row(&one);
            bench.threads.lock().unwrap().clear();
            target.threads.lock().unwrap().clear();
            let at_once = row(&four);
            assert_eq!(at_once, in_turn, "{target_error:?} {bench_error:?}");
            assert_eq!(at_once.1.as_deref(), target_error.or(bench_error));
            if target_error.or(bench_error).is_none() {
                assert!(at_once.0.contains("cosine: Value("), "{}", at_once.0);
            }
            let (t, b) = (target.threads.lock().unwrap().clone(), bench.threads.lock().unwrap().clone());
            assert_eq!((t.len(), b.len()), (1, 1), "each side read once");
            apart += usize::from(t != b);
        }
        assert!(apart > 0, "the two sides never ran on two threads");
    }

    /// Once compare returns, no thread of its pool keeps the pairs' decode buffers (the next engine of the
    /// process starts within the budget); the pair was measured with them.
    #[test]
    fn no_thread_keeps_pair_buffers_after_compare() {
        let a: Vec<f32> = (0..(SIDES_AT_ONCE_BYTES / 2) as usize).map(|i| (i % 97) as f32).collect();
        let b: Vec<f32> = a.iter().map(|v| v + 0.5).collect();
        let (target, bench) = (Sides::new(a, 1, None), Sides::new(b, 2, None));
        let pool = rayon::ThreadPoolBuilder::new().num_threads(3).build().unwrap();
        pool.install(|| {
            let comparison = compare(&target, &bench, &CompareOptions::default());
            assert_eq!(comparison.rows.len(), 1);
            assert!(comparison.rows[0].error().is_none(), "{:?}", comparison.rows[0].error());
            let kept = rayon::broadcast(|_| {
                let (n, b) = BUFFERS.with(|c| c.take());
                let side = SIDE_BUFFERS.with(|c| c.take());
                n.capacity() + b.capacity() + side.capacity()
            });
            assert_eq!(kept, vec![0; 3], "pair buffers kept per thread");
        });
    }
}
