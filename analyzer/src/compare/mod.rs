//! The compare engine (`analyzer compare TARGET BENCH`): op by op against a benchmark, and the first op that
//! fails while its inputs pass (the culprit). [`report::compare`](crate::report::compare) prints it.
//!
//! Per tensor pair: msprobe's six metrics and "Accuracy Reached or Not", msaccucmp's metrics, the
//! statistics of both sides, and msprobe's newer Result column. A tensor pair that repeats an earlier pair
//! (each side recorded the tensor twice: an op's output, then the next op's input) with the same stored bytes
//! on each side takes that pair's metrics instead of being read again. accutrace's own verdict (`Status`) is
//! precision only: Accuracy Reached = No, inf/NaN positions that differ, a shape mismatch, or a user
//! threshold. msprobe's Result also flags a dtype change, which every mixed-precision run has, so it is
//! reported but does not make an op fail.

pub mod msprobe_table;
mod row;

use crate::api_matching::{is_api_level, with_output_stats, ApiCall};
use crate::comparable::{different_model, ranks_on_one_side, steps_on_one_side, swapped_sides};
use crate::filter::Filter;
use crate::index::{Index, Io, TensorId, TensorInfo};
use crate::matching::{input_producers, match_runs, MatchKind, MatchOptions, TensorPair};
use crate::metrics::msprobe::{accuracy_reached, Accuracy};
use crate::metrics::verdict::Level;
use crate::metrics::{measure, Cell, Families, MetricsRequest, MsprobeMetrics, PairMetrics};
use crate::outcome::Outcome;
use crate::problems::{InputProblem, InputProblems};
use crate::progress::Progress;
use crate::repeats::measure_pairs;
use crate::sources::{with_lent_buffers, LentBuffers, Source};
use crate::threads::{in_flight, pairs_in_flight, tensor_bytes, Footprint};
use accutrace_formats::tensor::element_count;
use anyhow::Result;
pub use msprobe_table::MsprobeRow;
pub use row::{CompareRow, Measured};
use std::collections::{HashMap, HashSet};

/// An op that fails, with the reason its inputs are or are not clean.
#[derive(Clone, Debug)]
pub struct FailingOp {
    pub op: usize,
    /// Rows of the op's outputs that fail.
    pub failing_rows: Vec<usize>,
    /// Whether the comparison shows its inputs pass: none fails, none comes from an op the benchmark has no
    /// counterpart of, and at least one was judged (the op is a culprit, not a propagator).
    pub inputs_pass: bool,
    /// When no input fails but the comparison cannot vouch for the inputs either: why, in words. The op may
    /// still be the culprit (inputs from no dumped op, after ops of its step that pass).
    pub inputs_unverified: Option<String>,
}

impl FailingOp {
    /// Why this op, the first that fails, cannot be named the culprit (the reports' NO CLEAN CULPRIT).
    pub fn why_not_culprit(&self) -> String {
        match &self.inputs_unverified {
            Some(reason) => format!("cannot be blamed: {reason}"),
            None => {
                "already has failing inputs: the difference comes from data fed to the model or from ops \
                     that were not dumped"
                    .to_string()
            }
        }
    }
}

/// What the comparison says about one input of a failing op.
enum InputEvidence {
    /// Compared and passes, or produced by an op whose compared outputs pass.
    Passes,
    /// Compared and fails, or produced by an op that fails.
    Fails,
    /// Produced by an op none of whose outputs was compared (no counterpart in the benchmark).
    FromUncompared(usize),
    /// Produced by no dumped op: data fed to the model, weights, or a tensor from before the dump.
    GraphInput,
}

/// What to compare and how to judge it: built from the command line, or by any other caller.
#[derive(Clone, Debug, Default)]
pub struct CompareOptions {
    /// Which ops (steps, ranks, names) take part.
    pub filter: Filter,
    /// How target tensors find their bench counterparts.
    pub matching: MatchOptions,
    /// Metric families; `None`: msprobe's alone when a side is an msprobe dump, both otherwise.
    pub families: Option<Families>,
    /// Fail a tensor whose cosine similarity is below this (besides the vendor rules).
    pub cosine_min: Option<f64>,
    /// Fail a tensor whose max absolute error exceeds this (besides the vendor rules).
    pub max_abs_err: Option<f64>,
    /// Show a progress bar on stderr (when stderr is a terminal).
    pub progress: bool,
}

/// Everything the reports need.
pub struct Comparison<'a> {
    pub target: &'a dyn Source,
    pub bench: &'a dyn Source,
    pub rows: Vec<CompareRow>,
    pub failing_ops: Vec<FailingOp>,
    /// Index into `failing_ops` of the first op that fails while its inputs pass.
    pub culprit: Option<usize>,
    pub unmatched_target: Vec<TensorId>,
    pub unmatched_bench: Vec<TensorId>,
    /// msprobe's own table: every argument the target recorded, in its order (`--format msprobe-csv`).
    pub msprobe_table: Vec<MsprobeRow>,
    /// Why the runs cannot be compared (not one model): nothing was measured; `problems` holds it as a
    /// [`ProblemKind::Refused`](crate::problems::ProblemKind::Refused) entry (as it does when no tensor
    /// matched), so the report leads with it and the exit status is 2.
    pub refused: Option<String>,
    /// What the user should know before reading the answer (target and benchmark look swapped, steps a
    /// source inferred, files it skipped).
    pub warnings: Vec<String>,
    /// What the sources miss and which tensors could not be read: they lead the report.
    pub problems: InputProblems,
    /// Kernels against API calls (a kernel-level target against an API-level benchmark): every call of the
    /// benchmark with the target kernels that implement it; empty otherwise.
    pub api_calls: Vec<ApiCall>,
}

/// The first API call whose output diverges, in the target's execution order, and its kernels.
#[derive(Clone, Debug)]
pub struct DivergingApi<'c> {
    /// The benchmark op (the API call).
    pub bench_op: usize,
    /// The row of its first failing output.
    pub row: usize,
    /// The target kernels that implement it.
    pub kernels: &'c [usize],
    /// Other calls that share one of these kernels (a fused kernel computes several calls).
    pub sharing: Vec<usize>,
}

impl Comparison<'_> {
    /// The first API call whose output fails (kernels against API calls only).
    pub fn first_diverging_api(&self) -> Option<DivergingApi<'_>> {
        let ti = self.target.index();
        let (row, r) = self
            .rows
            .iter()
            .enumerate()
            .filter(|(_, r)| r.failed && r.how == Some(MatchKind::Api) && r.bench.is_some())
            .min_by_key(|(_, r)| (ti.ops[ti.tensors[r.target].op].order, r.target))?;
        let bench_op = self.bench.index().tensors[r.bench?].op;
        let call = self.api_calls.iter().find(|c| c.bench_op == bench_op)?;
        let sharing = self
            .api_calls
            .iter()
            .filter(|c| c.bench_op != bench_op && c.kernels.iter().any(|k| call.kernels.contains(k)))
            .map(|c| c.bench_op)
            .collect();
        Some(DivergingApi { bench_op, row, kernels: &call.kernels, sharing })
    }
}

impl Comparison<'_> {
    /// What the reports call failing op `i` (an index into `failing_ops`): the culprit, an op that fails
    /// while its inputs pass or are unverified, or one that only propagates a failure.
    pub fn failing_tag(&self, i: usize) -> &'static str {
        let f = &self.failing_ops[i];
        if Some(i) == self.culprit {
            "culprit"
        } else if f.inputs_pass {
            "fails, inputs pass"
        } else if f.inputs_unverified.is_some() {
            "fails, inputs unverified"
        } else {
            "propagates"
        }
    }

    /// Matched pairs of which nothing was measured: a side holds no tensor data and the content hashes do
    /// not show them identical ([`Measured::Nothing`]). Never passes; the comparison's input problems say
    /// how many and what to do.
    pub fn unmeasured_pairs(&self) -> usize {
        self.rows.iter().filter(|r| r.unmeasured()).count()
    }

    /// The input problem [`Comparison::unmeasured_pairs`] make (also in `problems`), with what to do.
    pub fn unmeasured_problem(&self) -> Option<InputProblem> {
        unmeasured_problem(&self.rows, self.target.index(), self.bench.index())
    }

    /// Findings when some op fails.
    pub fn outcome(&self) -> Outcome {
        if self.failing_ops.is_empty() {
            Outcome::Pass
        } else {
            Outcome::Findings
        }
    }
}

/// Matches, measures every pair in parallel, and finds the culprit.
pub fn compare<'a>(
    target: &'a dyn Source,
    bench: &'a dyn Source,
    options: &CompareOptions,
) -> Comparison<'a> {
    let (ti, bi) = (target.index(), bench.index());
    // Tensors read at once (each with buffers of its size), within the memory budget.
    let limits = pairs_in_flight(Footprint::compare([target, bench]), [target, bench]);
    // Kernels against API calls weigh statistics: sources indexed without them get them read first.
    let kernels_against_apis = is_api_level(bi) && !is_api_level(ti);
    let (ts, bs) = match kernels_against_apis {
        true => (with_output_stats(target, limits), with_output_stats(bench, limits)),
        false => (None, None),
    };
    let matching = match_runs(ts.as_ref().unwrap_or(ti), bs.as_ref().unwrap_or(bi), &options.matching);
    let mut warnings: Vec<String> = swapped_sides(target, bench, &matching).into_iter().collect();
    warnings.extend(ranks_on_one_side(ti, bi, &options.filter));
    warnings.extend(steps_on_one_side(ti, bi, &options.filter));
    warnings.extend(matching.warnings.iter().cloned());
    // What each source said about itself (steps it inferred, files it skipped).
    warnings.extend(ti.warnings_of("target").chain(bi.warnings_of("benchmark")));
    if let Some(why) = different_model(ti, bi, &matching, &options.filter) {
        let mut problems = InputProblems::of_sources(&[target, bench]);
        problems.push(InputProblem::refused(format!(
            "{} vs {}: {why}",
            target.root().display(),
            bench.root().display()
        )));
        return Comparison {
            target,
            bench,
            rows: Vec::new(),
            failing_ops: Vec::new(),
            culprit: None,
            unmatched_target: matching.unmatched_target,
            unmatched_bench: matching.unmatched_bench,
            msprobe_table: Vec::new(),
            refused: Some(why),
            warnings,
            problems,
            api_calls: matching.api_calls,
        };
    }
    let keep = |t: TensorId| options.filter.keeps(&ti.ops[ti.tensors[t].op]);
    let pairs: Vec<_> = matching.pairs.iter().filter(|p| keep(p.target)).collect();
    let progress = Progress::new("compare", pairs.len() as u64, !options.progress);
    let families = families(target, bench, options);
    // A tensor both sides recorded twice (an op's output, then the next op's input) is read once where
    // each side stores the same bytes for both records: the repeat takes the first pair's metrics.
    let compare_one = |p: &TensorPair, first: Option<&ReadMetrics>| {
        let compared = compare_pair(target, bench, p, options, families, first);
        progress.inc(1);
        compared
    };
    let compared = measure_pairs(
        (target, bench),
        limits,
        &pairs,
        |p| compare_one(p, None),
        |(_, _, read): &(CompareRow, Option<u64>, Option<ReadMetrics>)| read.clone(),
        |p, first| compare_one(p, Some(first)),
    );
    progress.finish();
    release_pair_buffers();
    let (mut rows, pair_hashes): (Vec<CompareRow>, Vec<Option<u64>>) =
        compared.into_iter().map(|(row, hash, _)| (row, hash)).unzip();
    // msprobe's Result is decided per API call over every argument msprobe lists, not only the compared
    // tensors: the table does it, and the compared rows take their verdicts from it.
    let mut msprobe_table = msprobe_table::build(ti, bi, &rows, &options.filter);
    for entry in &mut msprobe_table {
        if let Some(i) = entry.compared {
            // msprobe's Result never says pass about values nobody compared.
            if rows[i].unmeasured() {
                entry
                    .verdict
                    .set(Level::Warning, "Not measured: a side holds no tensor data (statistics only).");
            }
            rows[i].result = entry.verdict.level;
            rows[i].messages = entry.verdict.messages.clone();
        }
    }
    let mut problems = InputProblems::of_sources(&[target, bench]);
    if rows.is_empty() {
        // Nothing matched: no answer, and no pass.
        problems.push(InputProblem::refused(format!(
            "no tensor of {} matched one of {} ({} and {} tensors): check --step/--rank/--op, or pass \
             --mapping with `target_name,bench_name` lines",
            target.root().display(),
            bench.root().display(),
            ti.tensors.len(),
            bi.tensors.len()
        )));
    }
    if let Some(p) = unmeasured_problem(&rows, ti, bi) {
        problems.push(p);
    }
    let mut unread = vec![false; ti.tensors.len()];
    for row in rows.iter().filter(|r| r.error.is_some()) {
        unread[row.target] = true;
        let bench_label = row.bench.map(|b| format!(" vs {}", bi.tensor_label(b))).unwrap_or_default();
        let why = row.error.as_deref().unwrap_or_default();
        problems
            .push(InputProblem::unreadable(format!("{}{bench_label}: {why}", ti.tensor_label(row.target))));
    }
    // Content hashes tie each input to the op that produced it. Sources that store none (dump trees, .npy)
    // hashed the compared target tensors while reading their values. The culprit search looks up the
    // producers of failing ops only, so besides every output (a possible producer) only the inputs of
    // failing ops need a hash: those still missing are hashed here, in parallel. The inputs of passing ops
    // are never read (a benchmark of outputs pairs none of them).
    let mut known: Vec<Option<u64>> = vec![None; ti.tensors.len()];
    for (row, hash) in rows.iter().zip(pair_hashes) {
        if hash.is_some() {
            known[row.target] = hash;
        }
    }
    let needed = hash_needed(ti, &rows);
    // As many at once as pairs are measured: a source without stored hashes reads the tensor to hash it.
    let hashes: Vec<Result<Option<u64>>> = in_flight(
        limits,
        known.len(),
        |t| tensor_bytes(&ti.tensors[t]),
        || (),
        |_, t| match (ti.tensors[t].hash, known[t]) {
            (Some(h), _) | (None, Some(h)) => Ok(Some(h)),
            (None, None) if needed[t] && keep(t) && ti.tensors[t].has_data && !unread[t] => {
                target.content_hash(t).map(Some)
            }
            (None, None) => Ok(None),
        },
    );
    let hashes: Vec<Option<u64>> = hashes
        .into_iter()
        .enumerate()
        .map(|(t, hash)| {
            hash.unwrap_or_else(|e| {
                problems.push_unreadable(&ti.tensor_label(t), &e);
                None
            })
        })
        .collect();
    let (failing_ops, culprit) = find_culprit(ti, &rows, &hashes);
    // A benchmark that dumps outputs only (a .npy directory of op outputs) cannot match inputs: that is
    // expected, not a finding, so target inputs are not listed as unmatched then.
    let bench_has_inputs = bi.tensors.iter().any(|t| t.io == Io::Input);
    let unmatched_target = matching
        .unmatched_target
        .into_iter()
        .filter(|&t| keep(t) && (bench_has_inputs || ti.tensors[t].io == Io::Output))
        .collect();
    Comparison {
        target,
        bench,
        rows,
        failing_ops,
        culprit,
        unmatched_target,
        msprobe_table,
        unmatched_bench: matching
            .unmatched_bench
            .into_iter()
            .filter(|&t| options.filter.keeps(&bi.ops[bi.tensors[t].op]))
            .collect(),
        refused: None,
        warnings,
        problems,
        api_calls: matching.api_calls,
    }
}

thread_local! {
    /// Per-thread decode buffers for [`compare_pair`]: one allocation per thread and size class, not per pair.
    /// Only the threads that measure pairs hold them, the pool's first few ([`in_flight`]), the same ones in
    /// every window, each as large as the pairs it may take: the other threads only help within a pair and
    /// never call [`compare_pair`].
    static BUFFERS: std::cell::Cell<(Vec<f32>, Vec<f32>)> = const { std::cell::Cell::new((Vec::new(), Vec::new())) };
    /// The bench side's decode buffers where [`compare_pair`] reads both sides at once
    /// ([`reads_sides_at_once`]), kept by the measuring thread beside its own: each side's are what
    /// [`Footprint::compare`](crate::threads::Footprint::compare) counts per pair.
    static SIDE_BUFFERS: std::cell::Cell<LentBuffers> = std::cell::Cell::new(LentBuffers::default());
}

/// Frees [`BUFFERS`] and [`SIDE_BUFFERS`] on every thread of the pool once the pairs are measured: as
/// large as the largest pair, they would otherwise stay beside what the next engine of the process keeps
/// (`threads::release_kept_buffers`).
fn release_pair_buffers() {
    rayon::broadcast(|_| {
        BUFFERS.with(|c| c.take());
        SIDE_BUFFERS.with(|c| c.take());
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

/// The metric families to compute: as asked, else msprobe's alone when an msprobe dump is involved (what
/// its users know from `msprobe compare`), both otherwise.
pub fn families(target: &dyn Source, bench: &dyn Source, options: &CompareOptions) -> Families {
    options.families.unwrap_or(if target.kind() == "msprobe" || bench.kind() == "msprobe" {
        Families::Msprobe
    } else {
        Families::All
    })
}

/// What [`compare_pair`] measured from both sides' values: for a pair that repeats this one, where each side
/// stores the same bytes for both, these are its own.
#[derive(Clone)]
struct ReadMetrics {
    request: MetricsRequest,
    metrics: PairMetrics,
}

/// One pair's row, the target's content hash where the read computed it (for producer links; `None` where
/// the index has one), and what was measured from both sides' values, when they were read and measured.
/// With `first` (an earlier pair whose two tensors each side stores with the same bytes as this pair's),
/// its metrics are taken instead of reading, where this pair asks for the same ones; all else is this pair's.
fn compare_pair(
    target: &dyn Source,
    bench: &dyn Source,
    p: &TensorPair,
    options: &CompareOptions,
    families: Families,
    first: Option<&ReadMetrics>,
) -> (CompareRow, Option<u64>, Option<ReadMetrics>) {
    let (t, b) = (p.target, p.bench);
    let (ti, bi) = (&target.index().tensors[t], &bench.index().tensors[b]);
    let mut row = CompareRow {
        target: t,
        bench: Some(b),
        how: Some(p.how),
        msprobe: MsprobeMetrics::unsupported(),
        msaccucmp: None,
        target_stats: ti.stats,
        bench_stats: bi.stats,
        accuracy: Accuracy::NotComparable,
        result: Level::Pass,
        messages: Vec::new(),
        failed: false,
        reason: None,
        error: None,
        measured: Measured::Values,
    };
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
        row.error = Some(format!("{side} shape {shape:?} has more elements than 64 bits count"));
    } else if tn != bn {
        row.msprobe = MsprobeMetrics::shape_unmatched();
    } else if ti.has_data && bi.has_data {
        // Statistics the index lacks come from the metrics' own pass (bit for bit `of_f32`'s).
        let stats = row.target_stats.is_none() || row.bench_stats.is_none();
        let request = MetricsRequest::for_pair(families, (ti.dtype, bi.dtype), &ti.shape, stats);
        match first.filter(|f| f.request == request) {
            Some(f) => take_metrics(&mut row, &f.metrics),
            None => {
                // Decode buffers are reused per thread, taken while in use (a thread measures one pair at a
                // time: while it waits inside a parallel kernel it runs only work stolen from kernels).
                let (mut n, mut bv) = BUFFERS.with(|c| c.take());
                // The target's content hash (for producer links) comes from the same read when the index has
                // none.
                let read_target = |n: &mut Vec<f32>| {
                    if ti.hash.is_none() {
                        target.read_values_and_hash(t, n).map(Some)
                    } else {
                        target.read_values(t, n).map(|()| None)
                    }
                };
                // Both sides at once where it pays: the bench side may then run on another thread, with
                // buffers this thread keeps for it. The target's error comes first, as when read in turn.
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
                let mut measure = |bv: &[f32]| {
                    let m = measure(&n, bv, &request);
                    take_metrics(&mut row, &m);
                    measured = Some(m);
                };
                let values = values.and_then(|(h, bench_read)| {
                    if bench_read {
                        measure(&bv);
                        return Ok(h);
                    }
                    // The bench values may be borrowed from the source's map (`with_values`) rather than
                    // copied.
                    bench.with_values(b, &mut bv, &mut measure).map(|()| h)
                });
                match values {
                    Ok(h) => {
                        hash = h;
                        read = measured.map(|metrics| ReadMetrics { request, metrics });
                    }
                    Err(err) => row.error = Some(format!("{err:#}")),
                }
                BUFFERS.with(|c| c.replace((n, bv)));
            }
        }
    } else if same_stored_content(ti, bi) {
        row.measured = Measured::EqualHashes;
    } else {
        row.measured = Measured::Nothing;
    }
    row.accuracy = accuracy_reached(&row.msprobe);
    judge(&mut row, options);
    (row, hash, read)
}

/// A pair's metrics into its row: the statistics only where the index has none.
fn take_metrics(row: &mut CompareRow, m: &PairMetrics) {
    (row.msprobe, row.msaccucmp) = (m.msprobe.clone(), m.msaccucmp);
    if let Some((ts, bs)) = m.stats {
        row.target_stats = row.target_stats.or(Some(ts));
        row.bench_stats = row.bench_stats.or(Some(bs));
    }
}

/// Whether both sides store one content hash for one dtype, shape and device layout: the same bytes read
/// the same way, so identical values without decoding either. Only hashes a source stores count (a
/// capture's, over the bytes as dumped): a hash another source computes may cover other bytes (an msprobe
/// dump hashes its decoded values).
fn same_stored_content(t: &TensorInfo, b: &TensorInfo) -> bool {
    t.hash.is_some()
        && t.hash == b.hash
        && t.dtype == b.dtype
        && t.shape == b.shape
        && t.device_format == b.device_format
        && t.device_shape == b.device_shape
}

/// The input problem of pairs nothing was measured for (a side holds no tensor data), with what to do.
fn unmeasured_problem(rows: &[CompareRow], ti: &Index, bi: &Index) -> Option<InputProblem> {
    let unmeasured: Vec<&CompareRow> = rows.iter().filter(|r| r.unmeasured()).collect();
    let first = unmeasured.first()?;
    let without =
        |side: &str, count: usize| (count > 0).then(|| format!("in the {side} for {count} of them"));
    let target_side = unmeasured.iter().filter(|r| !ti.tensors[r.target].has_data).count();
    let bench_side = unmeasured.iter().filter(|r| r.bench.is_some_and(|b| !bi.tensors[b].has_data)).count();
    let sides: Vec<String> =
        [without("target", target_side), without("benchmark", bench_side)].into_iter().flatten().collect();
    let bench_label = first.bench.map(|b| format!(" vs {}", bi.tensor_label(b))).unwrap_or_default();
    Some(InputProblem::incomplete(format!(
        "{} of {} matched tensor pairs were not measured: no tensor data {} (a statistics-mode capture keeps \
         statistics and content hashes only; pairs whose hashes are equal count as identical); \
         first: {}{bench_label}. Record with --mode tensor (`analyzer record --mode tensor`, or \
         ACCUTRACE_MODE=tensor for the collector) to compare values; two runs of one configuration compare \
         by content hash with `analyzer diff`",
        unmeasured.len(),
        rows.len(),
        sides.join(", "),
        ti.tensor_label(first.target),
    )))
}

/// accutrace's precision verdict for one row.
fn judge(row: &mut CompareRow, options: &CompareOptions) {
    let m = &row.msprobe;
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
    row.reason = if row.judged() { reason } else { None };
}

/// The target tensors whose content hash [`find_culprit`] can look at: every op's outputs (candidate
/// producers) and the inputs of ops with a failing output (the only ops whose producers it asks for).
fn hash_needed(index: &Index, rows: &[CompareRow]) -> Vec<bool> {
    let mut failed = vec![false; index.tensors.len()];
    for row in rows.iter().filter(|r| r.failed) {
        failed[row.target] = true;
    }
    let mut needed = vec![false; index.tensors.len()];
    for op in &index.ops {
        let fails = op.outputs.iter().any(|&t| failed[t]);
        for &t in op.outputs.iter().chain(op.inputs.iter().filter(|_| fails)) {
            needed[t] = true;
        }
    }
    needed
}

/// Ops whose outputs fail, in execution order, and the culprit: the first of them that the comparison
/// clears of inherited blame. An input passes when its own comparison passes, or, when it was not compared,
/// when the op that produced it (found by content hash) was compared and does not fail. An input from an op
/// that was not compared is no evidence. An op whose inputs come from no dumped op at all (data fed to the
/// model, weights, optimizer state) is cleared only when ops before it in its step were compared and pass:
/// they read the same data, so what is left is the op itself (or its weights).
fn find_culprit(
    index: &Index,
    rows: &[CompareRow],
    hashes: &[Option<u64>],
) -> (Vec<FailingOp>, Option<usize>) {
    let row_of: HashMap<TensorId, usize> = rows.iter().enumerate().map(|(i, r)| (r.target, i)).collect();
    // A pair that could not be read, or of which nothing was measured, was not compared: it neither fails
    // nor clears anything (its producer decides for an input).
    let read_row = |t: &TensorId| row_of.get(t).copied().filter(|&r| rows[r].judged());
    let output_rows = |o: usize| index.ops[o].outputs.iter().filter_map(read_row);
    let op_fails: Vec<bool> = (0..index.ops.len()).map(|o| output_rows(o).any(|r| rows[r].failed)).collect();
    let op_compared: Vec<bool> = (0..index.ops.len()).map(|o| output_rows(o).next().is_some()).collect();
    let producer = input_producers(index, |t| hashes[t]);
    let evidence = |t: TensorId| match (read_row(&t), producer.get(&t)) {
        (Some(r), _) if rows[r].failed => InputEvidence::Fails,
        (Some(_), _) => InputEvidence::Passes,
        (None, Some(&p)) if !op_compared[p] => InputEvidence::FromUncompared(p),
        (None, Some(&p)) if op_fails[p] => InputEvidence::Fails,
        (None, Some(_)) => InputEvidence::Passes,
        (None, None) => InputEvidence::GraphInput,
    };
    let mut failing = Vec::new();
    let mut culprit = None;
    // Steps (per rank) in which an op was compared and passes, and in which one fails, so far.
    let mut passing_seen: HashSet<(u32, u64)> = HashSet::new();
    let mut failing_seen: HashSet<(u32, u64)> = HashSet::new();
    // Op ids follow execution order (`Index::order_by_execution`).
    for (o, (op, &compared)) in index.ops.iter().zip(&op_compared).enumerate() {
        let failing_rows: Vec<usize> = output_rows(o).filter(|&r| rows[r].failed).collect();
        if failing_rows.is_empty() {
            if compared {
                passing_seen.insert((op.rank, op.step));
            }
            continue;
        }
        let inputs: Vec<(TensorId, InputEvidence)> = op.inputs.iter().map(|&t| (t, evidence(t))).collect();
        let any = |f: fn(&InputEvidence) -> bool| inputs.iter().any(|(_, e)| f(e));
        let uncompared = inputs.iter().find_map(|(t, e)| match e {
            InputEvidence::FromUncompared(p) => Some((*t, *p)),
            _ => None,
        });
        let key = (op.rank, op.step);
        let first_failure_of_step = failing_seen.insert(key);
        let after_passing_ops = first_failure_of_step && passing_seen.contains(&key);
        let (inputs_pass, inputs_unverified) = if any(|e| matches!(e, InputEvidence::Fails)) {
            (false, None)
        } else if let Some((t, p)) = uncompared {
            let why = format!(
                "its input {} comes from {} [{}], which has no counterpart in the benchmark (pass --mapping, or \
                 look at that op)",
                index.tensor_label(t),
                index.ops[p].name,
                index.ops[p].op_type
            );
            (false, Some(why))
        } else if any(|e| matches!(e, InputEvidence::Passes)) {
            (true, None)
        } else if after_passing_ops {
            let why =
                "its inputs come from no dumped op (weights, optimizer state) and the benchmark did not \
                       dump them, but the ops before it in its step pass";
            (false, Some(why.to_string()))
        } else {
            let why = "it reads only inputs no dumped op produced (data fed to the model, weights) and the \
                       benchmark did not dump them: either they differ (data order, preprocessing, initial \
                       weights) or the op itself is wrong";
            (false, Some(why.to_string()))
        };
        let cleared =
            inputs_pass || (after_passing_ops && uncompared.is_none() && inputs_unverified.is_some());
        if cleared && culprit.is_none() {
            culprit = Some(failing.len());
        }
        failing.push(FailingOp { op: o, failing_rows, inputs_pass, inputs_unverified });
    }
    (failing, culprit)
}

/// Rows of one op's tensors on one side (inputs first), for the report's neighbourhood view.
pub fn rows_of_op(comparison: &Comparison<'_>, op: usize, io: Option<Io>) -> Vec<usize> {
    let index = comparison.target.index();
    comparison
        .rows
        .iter()
        .enumerate()
        .filter(|(_, r)| {
            let t = &index.tensors[r.target];
            t.op == op && io.is_none_or(|io| t.io == io)
        })
        .map(|(i, _)| i)
        .collect()
}

/// Fused kernels (target ops matched to the bench through `original_op` names) and whether each fails:
/// against an unfused run this answers "does the problem go away without fusion?". Only judged pairs
/// count: a kernel none of whose outputs was read and measured is not listed (it neither agrees nor not).
pub fn fused_kernels(c: &Comparison<'_>) -> Vec<(usize, bool)> {
    let index = c.target.index();
    let mut kernels: Vec<(usize, bool)> = Vec::new();
    for row in &c.rows {
        if row.how != Some(MatchKind::Provenance) || !row.judged() {
            continue;
        }
        let op = index.tensors[row.target].op;
        match kernels.iter_mut().find(|(o, _)| *o == op) {
            Some((_, failed)) => *failed |= row.failed,
            None => kernels.push((op, row.failed)),
        }
    }
    kernels
}

#[cfg(test)]
mod culprit_tests {
    use super::*;
    use crate::index::TensorInfo;
    use accutrace_formats::DType;

    /// A step of ops given as (name, input hashes, output hash); returns the index and the hash of each
    /// tensor (inputs, then the output, per op).
    fn step(ops: &[(&str, &[u64], u64)]) -> (Index, Vec<Option<u64>>) {
        let mut index = Index::default();
        let mut hashes = Vec::new();
        for &(name, inputs, output) in ops {
            let op = index.push_op(name.into(), "T".into(), 0, 0);
            let tensor = |io, i| TensorInfo {
                op,
                io,
                index: i,
                dtype: DType::FLOAT,
                shape: vec![4],
                device_format: None,
                device_shape: None,
                original_op: None,
                stats: None,
                histogram: None,
                hash: None,
                label: None,
                requires_grad: None,
                has_data: true,
                locator: 0,
            };
            for (i, &h) in inputs.iter().enumerate() {
                index.push_tensor(tensor(Io::Input, i as u32));
                hashes.push(Some(h));
            }
            index.push_tensor(tensor(Io::Output, 0));
            hashes.push(Some(output));
        }
        (index, hashes)
    }

    /// Rows for the outputs of the ops named in `compared`, failing where `fails` names them.
    fn rows(index: &Index, compared: &[&str], fails: &[&str]) -> Vec<CompareRow> {
        index
            .ops
            .iter()
            .filter(|op| compared.contains(&op.name.as_str()))
            .map(|op| CompareRow {
                target: op.outputs[0],
                bench: None,
                how: None,
                msprobe: MsprobeMetrics::unsupported(),
                msaccucmp: None,
                target_stats: None,
                bench_stats: None,
                accuracy: Accuracy::NotComparable,
                result: Level::Pass,
                messages: Vec::new(),
                failed: fails.contains(&op.name.as_str()),
                reason: None,
                error: None,
                measured: Measured::Values,
            })
            .collect()
    }

    fn verdict(index: &Index, rows: &[CompareRow], hashes: &[Option<u64>]) -> (Option<String>, Vec<bool>) {
        let (failing, culprit) = find_culprit(index, rows, hashes);
        let culprit = culprit.map(|c| index.ops[failing[c].op].name.clone());
        (culprit, failing.iter().map(|f| f.inputs_unverified.is_some()).collect())
    }

    #[test]
    fn inputs_clear_an_op_only_on_evidence() {
        // data -> embed -> mm (weights) -> act: embed reads only graph inputs (data 1, table 2).
        let (index, hashes) = step(&[("embed", &[1, 2], 10), ("mm", &[10, 3], 11), ("act", &[11], 12)]);
        // mm fails and its input from embed passes: mm is the culprit.
        let (culprit, unverified) =
            verdict(&index, &rows(&index, &["embed", "mm", "act"], &["mm", "act"]), &hashes);
        assert_eq!((culprit.as_deref(), unverified), (Some("mm"), vec![false, false]));
        // The first op fails reading graph inputs only: not the culprit, and nothing after it either.
        let (culprit, unverified) =
            verdict(&index, &rows(&index, &["embed", "mm", "act"], &["embed", "mm", "act"]), &hashes);
        assert_eq!((culprit, unverified), (None, vec![true, false, false]));
        // embed was not compared (no benchmark counterpart): mm's input clears nothing.
        let (culprit, unverified) = verdict(&index, &rows(&index, &["mm", "act"], &["mm", "act"]), &hashes);
        assert_eq!((culprit, unverified), (None, vec![true, false]));
        // An op reading graph inputs only, after ops of its step that pass: the culprit, said so.
        let (index, hashes) = step(&[("embed", &[1], 10), ("update", &[2, 3], 11)]);
        let (failing, culprit) =
            find_culprit(&index, &rows(&index, &["embed", "update"], &["update"]), &hashes);
        let f = &failing[culprit.expect("a culprit")];
        assert_eq!(index.ops[f.op].name, "update");
        assert!(f
            .inputs_unverified
            .as_deref()
            .unwrap_or_default()
            .contains("the ops before it in its step pass"));
    }

    #[test]
    fn a_pair_nothing_was_measured_for_clears_nothing() {
        let (index, hashes) = step(&[("embed", &[1, 2], 10), ("mm", &[10, 3], 11), ("act", &[11], 12)]);
        let mut rows = rows(&index, &["embed", "mm", "act"], &["mm", "act"]);
        // embed's output passes only when measured: without data it is no evidence for mm's input.
        rows[0].measured = Measured::Nothing;
        assert!(!rows[0].passed() && rows[0].unmeasured());
        let (culprit, unverified) = verdict(&index, &rows, &hashes);
        assert_eq!((culprit, unverified), (None, vec![true, false]));
        rows[0].measured = Measured::EqualHashes;
        let (culprit, _) = verdict(&index, &rows, &hashes);
        assert_eq!(culprit.as_deref(), Some("mm"));
    }

    #[test]
    fn equal_stored_hashes_count_only_for_the_same_bytes_read_the_same_way() {
        let (index, _) = step(&[("a", &[], 1)]);
        let stored = TensorInfo { hash: Some(7), has_data: false, ..index.tensors[0].clone() };
        assert!(same_stored_content(&stored, &stored.clone()));
        let differing = [
            TensorInfo { hash: Some(8), ..stored.clone() },
            TensorInfo { hash: None, ..stored.clone() },
            TensorInfo { dtype: DType::FLOAT16, ..stored.clone() },
            TensorInfo { shape: vec![2, 2], ..stored.clone() },
            TensorInfo { device_format: Some("NC1HWC0".into()), ..stored.clone() },
        ];
        for other in &differing {
            assert!(
                !same_stored_content(&stored, other) && !same_stored_content(other, &stored),
                "{other:?}"
            );
        }
        let neither = TensorInfo { hash: None, ..stored.clone() };
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
            index.push_tensor(TensorInfo {
                op,
                io: Io::Output,
                index: 0,
                dtype: DType::FLOAT,
                shape: vec![values.len() as u64],
                device_format: None,
                device_shape: None,
                original_op: None,
                stats: None,
                histogram: None,
                hash: Some(hash),
                label: None,
                requires_grad: None,
                has_data: true,
                locator: 0,
            });
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
            Ok(self.index.tensors[t].hash.unwrap())
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
        let pair = TensorPair { target: 0, bench: 0, how: MatchKind::Exact };
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
                (format!("{row:?}"), row.error, hash)
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
            assert!(comparison.rows[0].error.is_none(), "{:?}", comparison.rows[0].error);
            let kept = rayon::broadcast(|_| {
                let (n, b) = BUFFERS.with(|c| c.take());
                let side = SIDE_BUFFERS.with(|c| c.take());
                n.capacity() + b.capacity() + side.capacity()
            });
            assert_eq!(kept, vec![0; 3], "pair buffers kept per thread");
        });
    }
}
