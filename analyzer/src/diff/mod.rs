//! The diff engine (`analyzer diff RUN1 RUN2`): is the run reproducible? Hashes first; only tensors whose
//! hashes differ are decoded, and a tensor that both runs recorded twice with the same stored bytes (an op's
//! output, then the next op's input) only once. Per step and rank, the first op whose output differs is named, and classified: its inputs were
//! identical (the op itself is nondeterministic) or already different (it only propagates).

use crate::comparable::{configuration_differences, not_one_configuration};
use crate::filter::Filter;
use crate::index::{Index, Io, OpId, TensorId, TensorInfo};
use crate::matching::{match_runs, MatchOptions};
use crate::outcome::Outcome;
use crate::problems::{InputProblem, InputProblems};
use crate::progress::Progress;
use crate::repeats::measure_pairs_into;
use crate::sources::Source;
use crate::threads::{largest_tensor_bytes, pairs_for, pairs_in_flight, tensor_bytes, Footprint};
use accutrace_formats::tensor::element_count;
use anyhow::Result;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

mod values;
mod waves;
pub use values::{compare_host_blocks, compare_host_bytes, compare_values, ulp_distance, TensorDiff};
pub use waves::compare_host_waves;

/// The first differing op of one step on one rank.
#[derive(Clone, Debug, Serialize)]
pub struct FirstDifference {
    pub step: u64,
    pub rank: u32,
    pub op: String,
    pub op_type: String,
    /// `nondeterministic` when every input was identical, `propagating` when some input already differed,
    /// `unknown` when inputs were not dumped.
    pub verdict: &'static str,
    pub differing_inputs: Vec<String>,
    pub output: TensorDiff,
}

/// Every op that differed somewhere, per rank: how often and how much.
#[derive(Clone, Debug, Default, Serialize)]
pub struct CensusRow {
    /// The rank the op ran on (a job's ranks each have their row: which ranks differed is the question).
    pub rank: u32,
    pub op: String,
    pub op_type: String,
    pub times: u64,
    pub max_abs_diff: f64,
    pub max_ulp: u64,
    pub max_share_differing: f64,
    /// Largest change of a statistic (min, max, mean, L2 norm) when only statistics were known.
    pub max_stats_delta: f64,
    /// Whether element-wise figures were measured for this op (false for statistics-only captures).
    pub measured: bool,
}

/// Everything `diff` found; the reports print it, JSON serialises it as is.
#[derive(Serialize)]
pub struct DiffReport {
    /// `identical` (every matched tensor identical, none unmatched), `different` (some tensor differs),
    /// `unmatched` (none differs, but some tensor is in one run only), `incomplete` (none of what was
    /// read differs, but input problems lead the report), or `refused` (not one configuration, or no
    /// tensor in common: nothing was compared; the reason is a REFUSED input problem).
    pub verdict: &'static str,
    pub run1: String,
    pub run2: String,
    pub compared_tensors: usize,
    pub differing_tensors: usize,
    pub decoded_tensors: usize,
    pub first_differences: Vec<FirstDifference>,
    pub census: Vec<CensusRow>,
    pub unmatched_run1: Vec<String>,
    pub unmatched_run2: Vec<String>,
    /// The same tensors with where they are (run, step, rank): `unmatched_run1` then `unmatched_run2`.
    pub unmatched: Vec<UnmatchedTensor>,
    /// What the runs miss and which tensors could not be read (neither identical nor different): they
    /// lead the report.
    pub input_problems: InputProblems,
    /// What each run said about itself (`run1: ...`: steps it inferred, files it skipped); no verdict.
    pub warnings: Vec<String>,
}

/// A tensor only one run holds, with its step and rank.
#[derive(Clone, Debug, Serialize)]
pub struct UnmatchedTensor {
    /// `run1` or `run2`.
    pub run: &'static str,
    pub tensor: String,
    pub step: u64,
    pub rank: u32,
}

impl UnmatchedTensor {
    fn of(run: &'static str, index: &Index, t: TensorId) -> UnmatchedTensor {
        let op = &index.ops[index.tensors[t].op()];
        UnmatchedTensor { run, tensor: index.tensor_label(t), step: op.step, rank: op.rank }
    }
}

impl DiffReport {
    /// The report of runs `diff` refused ([`Refusal`]): nothing compared, the reason leading as a REFUSED
    /// input problem after what the runs miss (often why).
    pub fn refused(run1: &dyn Source, run2: &dyn Source, refusal: Refusal) -> DiffReport {
        let mut input_problems = InputProblems::of_sources(&[run1, run2]);
        input_problems.push(InputProblem::refused(refusal.0));
        DiffReport {
            verdict: "refused",
            run1: run1.root().display().to_string(),
            run2: run2.root().display().to_string(),
            compared_tensors: 0,
            differing_tensors: 0,
            decoded_tensors: 0,
            first_differences: Vec::new(),
            census: Vec::new(),
            unmatched_run1: Vec::new(),
            unmatched_run2: Vec::new(),
            unmatched: Vec::new(),
            input_problems,
            warnings: run1.index().warnings_of("run1").chain(run2.index().warnings_of("run2")).collect(),
        }
    }

    /// Findings when a tensor differs or is only in one run.
    pub fn outcome(&self) -> Outcome {
        if self.differing_tensors == 0 && self.unmatched_run1.is_empty() && self.unmatched_run2.is_empty() {
            Outcome::Pass
        } else {
            Outcome::Findings
        }
    }
}

/// Why `diff` will not answer (the runs are not one configuration, or share no tensor): the error
/// [`diff`] returns then. The command writes it as [`DiffReport::refused`]; the report page says why diff
/// did not run.
#[derive(Debug)]
pub struct Refusal(pub String);

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refusal {}

/// Which ops `diff` looks at, and whether it shows progress.
#[derive(Clone, Debug, Default)]
pub struct DiffOptions {
    pub filter: Filter,
    /// Show a progress bar on stderr (when stderr is a terminal).
    pub progress: bool,
}

/// Refuses runs that are not one configuration ([`configuration_differences`]) with a [`Refusal`]; then
/// matches the two runs
/// by name, compares every pair (hashes, then values where they differ), and names
/// the first differing op of each step and rank.
pub fn diff(run1: &dyn Source, run2: &dyn Source, options: &DiffOptions) -> Result<DiffReport> {
    let (i1, i2) = (run1.index(), run2.index());
    // Not one configuration: every difference would be the change, not nondeterminism. Refuse first.
    let differences = configuration_differences(i1, i2, &options.filter);
    if !differences.is_empty() {
        return Err(Refusal(not_one_configuration(run1, run2, &differences)).into());
    }
    let matching = match_runs(i1, i2, &MatchOptions::default());
    let pairs: Vec<_> = matching
        .pairs
        .iter()
        .filter(|p| options.filter.keeps(&i1.ops[i1.tensors[p.target()].op()]))
        .collect();

    if pairs.is_empty() {
        return Err(Refusal(format!(
            "no tensor of {} matched one of {}: the runs share no op names (check --step/--rank/--op)",
            run1.root().display(),
            run2.root().display()
        ))
        .into());
    }
    let progress = Progress::new("diff", pairs.len() as u64, !options.progress);
    // A tensor both runs recorded twice (an op's output, then the next op's input) is read once where each
    // run stores the same bytes for both records: the first pair's data matched its content hashes when it
    // was measured, so the repeat's stored bytes are proved sound without decoding them again.
    let limits = pairs_in_flight(footprint([run1, run2]), [run1, run2]);
    // Threads that measure no pair of their own: a large pair's waves take them (the pairs' threads take
    // waves only when they wait on their own).
    let spare_threads = rayon::current_num_threads() > limits.large;
    let mut folded = Folded::new(i1);
    let mut input_problems = InputProblems::of_sources(&[run1, run2]);
    // Each result is folded as it is handed over, in pair order: no table of every pair's figures is held
    // (#18: memory must not grow with the tensor count beyond one byte a tensor).
    let mut next_pair = pairs.iter();
    measure_pairs_into(
        (run1, run2),
        limits,
        &pairs,
        |p| {
            let d = diff_tensor(run1, run2, p.target(), p.bench(), spare_threads);
            progress.inc(1);
            d
        },
        |d| match d {
            Ok(d) if d.measured => Some(d.clone()),
            _ => None,
        },
        |p, d| {
            progress.inc(1);
            Ok(TensorDiff { stats_delta: stats_delta((i1, p.target()), (i2, p.bench())), ..d.clone() })
        },
        |d| {
            let Some(p) = next_pair.next() else { return };
            match d {
                Ok(d) => folded.add(p.target(), d),
                Err(e) => {
                    // A tensor that could not be read on either side is neither identical nor different.
                    let label = format!("{} vs {}", i1.tensor_label(p.target()), i2.tensor_label(p.bench()));
                    input_problems.push_unreadable(&label, &e);
                    folded.seen[p.target()] = Seen::Unread;
                }
            }
        },
    );
    progress.finish();

    let calls = collective_differences(i1, i2, &options.filter);
    let first_differences = with_collectives(folded.first_differences(), &calls);
    let compared = folded.seen.iter().filter(|s| matches!(s, Seen::Identical | Seen::Differing)).count();
    let differing = folded.seen.iter().filter(|&&s| s == Seen::Differing).count() + calls.len();
    let decoded = folded.decoded;
    let census = folded.census();
    let (unmatched_run1, unmatched_run2): (Vec<String>, Vec<String>) = (
        matching.unmatched_target.iter().map(|&t| i1.tensor_label(t)).collect(),
        matching.unmatched_bench.iter().map(|&t| i2.tensor_label(t)).collect(),
    );
    let unmatched = (matching.unmatched_target.iter().map(|&t| UnmatchedTensor::of("run1", i1, t)))
        .chain(matching.unmatched_bench.iter().map(|&t| UnmatchedTensor::of("run2", i2, t)))
        .collect();
    // Nothing differing among what was read is no "identical" while something was not read.
    let verdict = match (differing, unmatched_run1.is_empty() && unmatched_run2.is_empty()) {
        (0, _) if !input_problems.is_empty() => "incomplete",
        (0, true) => "identical",
        (0, false) => "unmatched",
        _ => "different",
    };
    Ok(DiffReport {
        verdict,
        run1: run1.root().display().to_string(),
        run2: run2.root().display().to_string(),
        compared_tensors: compared,
        differing_tensors: differing,
        decoded_tensors: decoded,
        first_differences,
        census,
        unmatched_run1,
        unmatched_run2,
        unmatched,
        input_problems,
        warnings: (i1.warnings_of("run1").chain(i2.warnings_of("run2")))
            .chain(matching.warnings.iter().cloned())
            .collect(),
    })
}

/// What diff's pairs hold ([`crate::threads`]): each side a tensor as f32 ([`Footprint::DIFF`]), or each
/// side at most the bound of a block-by-block read ([`Source::host_blocks_bytes`]) for the tensors diff
/// reads so, the others as f32: whichever lets more pairs run, since each bounds what a pair holds. A
/// pair large enough to be read in waves also holds their buffers.
fn footprint(sources: [&dyn Source; 2]) -> Footprint {
    let largest = largest_tensor_bytes(sources.map(Source::index));
    let extra = if largest >= waves::WAVES_MIN as u64 { waves::WAVE_BUFFERS } else { 0 };
    let side = |s: &dyn Source| {
        let tensors = s.index().tensors.iter().enumerate().filter(|(_, t)| t.has_data);
        let read = |(id, t): (TensorId, &TensorInfo)| {
            let blocks = s.host_blocks_bytes(id).filter(|_| values::has_bytes_kernel(t.dtype));
            blocks.unwrap_or_else(|| tensor_bytes(t))
        };
        tensors.map(read).max().unwrap_or(0)
    };
    let bounded = Footprint::diff_bounded(side(sources[0]).max(side(sources[1])), extra);
    let plain = Footprint { per_pair: Footprint::DIFF.per_pair + extra, ..Footprint::DIFF };
    let threads = rayon::current_num_threads();
    // The last of equals: the plain count where the bound gains nothing.
    [bounded, plain].into_iter().max_by_key(|f| pairs_for(*f, largest, threads)).unwrap_or(plain)
}

/// The largest change of a statistic (min, max, mean, L2 norm) between two tensors, when both have
/// statistics: tensor `ta` of index `a`, `tb` of `b`.
fn stats_delta((a, ta): (&Index, TensorId), (b, tb): (&Index, TensorId)) -> Option<f64> {
    match (a.stats(ta), b.stats(tb)) {
        (Some(x), Some(y)) => Some(
            [(x.min, y.min), (x.max, y.max), (x.mean, y.mean), (x.l2_norm, y.l2_norm)]
                .iter()
                .map(|(p, q)| (p - q).abs())
                .filter(|d| !d.is_nan())
                .fold(0.0, f64::max),
        ),
        _ => None,
    }
}

/// Hash comparison, and only when hashes differ, a decode of both sides; in waves on the pool's threads
/// where a tensor is large and `spare_threads` says there are threads to take them.
fn diff_tensor(
    a: &dyn Source,
    b: &dyn Source,
    ta: TensorId,
    tb: TensorId,
    spare_threads: bool,
) -> Result<TensorDiff> {
    let (ia, ib) = (&a.index().tensors[ta], &b.index().tensors[tb]);
    let ha = match ia.hash() {
        Some(h) => h,
        None => a.content_hash(ta)?,
    };
    let hb = match ib.hash() {
        Some(h) => h,
        None => b.content_hash(tb)?,
    };
    // Only reported (as a share of differing elements); a shape whose product overflows counts as 0.
    let elements = element_count(&ia.shape).unwrap_or(0);
    if ha == hb && ia.dtype == ib.dtype {
        return Ok(TensorDiff { identical: true, elements, ..Default::default() });
    }
    let stats_delta = stats_delta((a.index(), ta), (b.index(), tb));
    if !(ia.has_data && ib.has_data) {
        // The hashes prove a difference; without data its size is only seen through the statistics.
        return Ok(TensorDiff { elements, stats_delta, ..Default::default() });
    }
    // The tensors' own bytes where the source gives them and the dtype has a byte kernel (the common
    // case: no f32 decoding of whole tensors); the values otherwise. Both give the same figures.
    if ia.dtype == ib.dtype && values::has_bytes_kernel(ia.dtype) {
        // Both tensors read at once, block by block (a capture unshuffles each block of its planes into
        // the kernel's buffer, and checks the content hash once the blocks are read, before
        // `with_host_blocks` returns Ok): the figures, or `None` where a side has no host bytes or the
        // kernel declines.
        let (mut measured, mut inner) = (None, Ok(false));
        a.with_host_blocks(ta, &mut |x| {
            inner = b.with_host_blocks(tb, &mut |y| {
                measured = match spare_threads && x.len() >= waves::WAVES_MIN {
                    true => compare_host_waves(ia.dtype, x, y),
                    false => compare_host_blocks(ia.dtype, x, y),
                }
            });
        })?;
        inner?;
        if let Some(d) = measured {
            return Ok(TensorDiff { stats_delta, ..d });
        }
    }
    let (mut va, mut vb) = (Vec::new(), Vec::new());
    a.read_values(ta, &mut va)?;
    b.read_values(tb, &mut vb)?;
    Ok(TensorDiff { stats_delta, ..compare_values(ia.dtype, &va, &vb) })
}

/// An HCCL call whose receive buffer differs between the runs, as the capture's collective records show it.
struct CallDifference {
    step: u64,
    rank: u32,
    /// Host µs the call began in run 1.
    start_us: u64,
    first: FirstDifference,
}

/// The HCCL calls of each rank, paired by their place in the rank's call order (same function and
/// sequence number), whose receive buffers' content hashes differ. A call is nondeterministic itself (a
/// reduction in a varying order) when every member's send buffer agrees between the runs; when some
/// member's differs (on this rank or another), the call only propagates that difference.
fn collective_differences(i1: &Index, i2: &Index, filter: &Filter) -> Vec<CallDifference> {
    type Info = accutrace_formats::capture::CollectiveInfo;
    let steps1 = i1.collective_steps();
    let mut pairs: Vec<(u32, &Info, &Info, Option<u64>)> = Vec::new();
    for rank in i1.collectives.iter().map(|c| c.rank).collect::<BTreeSet<u32>>() {
        let calls2: Vec<&Info> = i2.collectives.iter().filter(|c| c.rank == rank).map(|c| &c.info).collect();
        let calls1 = i1.collectives.iter().zip(&steps1).filter(|(c, _)| c.rank == rank);
        for ((a, step), b) in calls1.zip(calls2) {
            let a = &a.info;
            if (a.op, a.seq) != (b.op, b.seq) {
                break;
            }
            pairs.push((rank, a, b, *step));
        }
    }
    // Per call of run 1's communicators: the members whose send buffer differs, and whether any is unknown.
    let mut members: BTreeMap<(&str, u64), (Vec<u32>, bool)> = BTreeMap::new();
    let mut seen: BTreeMap<(&str, u64), u32> = BTreeMap::new();
    for &(rank, a, b, _) in &pairs {
        *seen.entry((a.comm.as_str(), a.seq)).or_default() += 1;
        let entry = members.entry((a.comm.as_str(), a.seq)).or_default();
        match (&a.input, &b.input) {
            (Some(x), Some(y)) if x.content_hash != y.content_hash => entry.0.push(rank),
            (Some(_), Some(_)) => {}
            _ => entry.1 |= !a.op.is_point_to_point() || a.input.is_some() != b.input.is_some(),
        }
    }
    // A collective some member of which is not in the data (one node's capture) cannot be cleared.
    for &(_, a, _, _) in &pairs {
        let key = (a.comm.as_str(), a.seq);
        if !a.op.is_point_to_point() && seen[&key] < a.comm_size {
            members.entry(key).or_default().1 = true;
        }
    }
    let mut found = Vec::new();
    for &(rank, a, b, step) in &pairs {
        let (Some(out_a), Some(out_b)) = (&a.output, &b.output) else { continue };
        if out_a.content_hash == out_b.content_hash {
            continue;
        }
        // A first difference needs a step: a call no op places (an overflow-detection capture) is left out.
        let Some(step) = step else { continue };
        let name = a.op.api_name();
        if !filter.keeps_at(name, step, rank) {
            continue;
        }
        let call = format!("{name} #{}", a.seq);
        let (differ, unknown) = &members[&(a.comm.as_str(), a.seq)];
        let (sa, sb) = (&out_a.stats, &out_b.stats);
        let stats_delta = [(sa.min, sb.min), (sa.max, sb.max), (sa.mean, sb.mean), (sa.l2_norm, sb.l2_norm)]
            .iter()
            .map(|(p, q)| (p - q).abs())
            .filter(|d| !d.is_nan())
            .fold(0.0, f64::max);
        found.push(CallDifference {
            step,
            rank,
            start_us: a.start_us,
            first: FirstDifference {
                step,
                rank,
                op: call.clone(),
                op_type: name.to_string(),
                verdict: if !differ.is_empty() {
                    "propagating"
                } else if *unknown {
                    "unknown"
                } else {
                    "nondeterministic"
                },
                differing_inputs: differ.iter().map(|r| format!("{call}.input.0 (rank {r})")).collect(),
                output: TensorDiff {
                    elements: sa.count,
                    stats_delta: Some(stats_delta),
                    ..Default::default()
                },
            },
        });
    }
    found
}

/// The first difference of each step and rank with the HCCL calls taken into account: a differing call
/// made before the first differing op was launched (or in a step and rank where no op differs) is the
/// first difference there.
fn with_collectives(
    ops: Vec<(FirstDifference, Option<u64>)>,
    calls: &[CallDifference],
) -> Vec<FirstDifference> {
    let mut by_place: BTreeMap<(u64, u32), (FirstDifference, Option<u64>)> =
        ops.into_iter().map(|(f, t)| ((f.step, f.rank), (f, t))).collect();
    for c in calls {
        // An op without a launch time cannot be ordered against the call: the op stays.
        let later_op =
            |(_, launched): &(FirstDifference, Option<u64>)| launched.is_some_and(|t| c.start_us < t);
        if by_place.get(&(c.step, c.rank)).is_none_or(later_op) {
            by_place.insert((c.step, c.rank), (c.first.clone(), Some(c.start_us)));
        }
    }
    let mut found: Vec<FirstDifference> = by_place.into_values().map(|(f, _)| f).collect();
    found.sort_by_key(|f| (f.step, f.rank));
    found
}

/// What diff learnt of a tensor of run 1: one byte a tensor, the figures themselves folded into
/// [`Folded`]'s census and first differences as they come.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Seen {
    /// In no pair diff measured (unmatched, or left out by the filter).
    NotCompared,
    Identical,
    Differing,
    /// Its pair could not be read on either side: neither identical nor different.
    Unread,
}

/// The first differing output so far of one step and rank: the op first in execution order (then by
/// id), and its first differing output.
struct FirstOutput {
    order: u64,
    op: OpId,
    /// The output's place among the op's outputs.
    slot: usize,
    diff: TensorDiff,
}

/// diff's results folded as each pair's is handed over (#18: a table of every pair's figures, and a map
/// of them by tensor, grew with the tensor count): what each tensor of run 1 came to, the census rows,
/// and per step and rank the first differing output so far. Each target tensor is in one pair at most
/// (matching pairs each tensor once).
struct Folded<'a> {
    index: &'a Index,
    seen: Vec<Seen>,
    decoded: usize,
    /// Per op name and rank: the first execution order it ran at, and its row.
    census: BTreeMap<(&'a str, u32), (u64, CensusRow)>,
    /// Ops the census counted already (`times` counts op executions, not outputs).
    counted: Vec<bool>,
    first: BTreeMap<(u64, u32), FirstOutput>,
}

impl<'a> Folded<'a> {
    fn new(index: &'a Index) -> Folded<'a> {
        Folded {
            index,
            seen: vec![Seen::NotCompared; index.tensors.len()],
            decoded: 0,
            census: BTreeMap::new(),
            counted: vec![false; index.ops.len()],
            first: BTreeMap::new(),
        }
    }

    /// Takes the figures of the pair of `t`; only a differing output's are kept (in the census, and as its
    /// step and rank's first difference while no earlier one is known).
    fn add(&mut self, t: TensorId, d: TensorDiff) {
        if d.measured {
            self.decoded += 1;
        }
        self.seen[t] = if d.identical { Seen::Identical } else { Seen::Differing };
        let index = self.index;
        let tensor = &index.tensors[t];
        let o = tensor.op();
        let op = &index.ops[o];
        if d.identical {
            return;
        }
        if tensor.io == Io::Output {
            let entry = self.census.entry((op.name.as_str(), op.rank)).or_insert_with(|| {
                let row = CensusRow {
                    rank: op.rank,
                    op: op.name.to_string(),
                    op_type: op.op_type.to_string(),
                    ..Default::default()
                };
                (op.order, row)
            });
            entry.0 = entry.0.min(op.order);
            let row = &mut entry.1;
            if !std::mem::replace(&mut self.counted[o], true) {
                row.times += 1;
            }
            row.max_abs_diff = row.max_abs_diff.max(d.max_abs_diff);
            row.max_ulp = row.max_ulp.max(d.max_ulp);
            row.max_share_differing = row.max_share_differing.max(d.share_differing());
            row.max_stats_delta = row.max_stats_delta.max(d.stats_delta.unwrap_or(0.0));
            row.measured |= d.measured;
        }
        // The first differing output of the step and rank: the op first in execution order (ties by id, as
        // a stable sort of the ops leaves them), then its first output in the op's own order.
        let Some(slot) = op.outputs().position(|x| x == t) else { return };
        let candidate = (op.order, o, slot);
        match self.first.entry((op.step, op.rank)) {
            std::collections::btree_map::Entry::Vacant(v) => {
                v.insert(FirstOutput { order: op.order, op: o, slot, diff: d });
            }
            std::collections::btree_map::Entry::Occupied(mut e) => {
                let f = e.get();
                if candidate < (f.order, f.op, f.slot) {
                    e.insert(FirstOutput { order: op.order, op: o, slot, diff: d });
                }
            }
        }
    }

    /// Per step and rank, the first op whose output differs, with its launch time (host µs) when known.
    fn first_differences(&self) -> Vec<(FirstDifference, Option<u64>)> {
        let index = self.index;
        let mut found = Vec::new();
        for f in self.first.values() {
            let op = &index.ops[f.op];
            let compared = |t: &TensorId| matches!(self.seen[*t], Seen::Identical | Seen::Differing);
            let input_diffs: Vec<TensorId> = op.inputs().filter(compared).collect();
            let differing_inputs: Vec<String> = input_diffs
                .iter()
                .filter(|&&t| self.seen[t] == Seen::Differing)
                .map(|&t| index.tensor_label(t))
                .collect();
            // An input that could not be read may have differed: the op cannot be called nondeterministic.
            let verdict = if input_diffs.is_empty() || op.inputs().any(|t| self.seen[t] == Seen::Unread) {
                "unknown"
            } else if differing_inputs.is_empty() {
                "nondeterministic"
            } else {
                "propagating"
            };
            let first = FirstDifference {
                step: op.step,
                rank: op.rank,
                op: op.name.to_string(),
                op_type: op.op_type.to_string(),
                verdict,
                differing_inputs,
                output: f.diff.clone(),
            };
            found.push((first, op.launch().map(|l| l.timestamp_us)));
        }
        found
    }

    /// One row per op name and rank, in execution order (then rank). `times` counts op executions (an op
    /// with three differing outputs in one step counts once).
    fn census(self) -> Vec<CensusRow> {
        let mut rows: Vec<(u64, CensusRow)> = self.census.into_values().collect();
        rows.sort_by_key(|(order, row)| (*order, row.rank));
        rows.into_iter().map(|(_, r)| r).collect()
    }
}
