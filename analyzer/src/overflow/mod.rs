//! The overflow engine (`analyzer overflow RUN`): the first op (per step and rank) that produced inf/NaN, or values at the
//! dtype's saturation limit, from finite inputs; its device status bits; how far it spread; the steps it
//! happened in (a loss-scale collapse shows as a run of them). Statistics are enough: where a source stored
//! them no tensor byte is read.
//!
//! `mod.rs` holds the report, the analysis of one index and the fold of several (a long capture read a
//! window of steps at a time); the children what the report is made of: a tensor's anomaly, the loss scale,
//! arrivals through collectives, and overflows without an origin.

mod anomaly;
mod arrivals;
mod loss_scale;
mod without_origin;

pub use anomaly::Anomaly;
pub use arrivals::{collective_arrivals, Arrival};
pub use loss_scale::LossScale;
pub(crate) use loss_scale::{scalar_value, scaler_multiply};
pub use without_origin::{without_origin, WithoutOrigin};

use crate::filter::Filter;
use crate::gathered_stats::GatheredStats;
use crate::index::{Index, OpId, TensorId};
use crate::outcome::Outcome;
use crate::problems::{InputProblem, InputProblems, ProblemKind};
use crate::progress::Progress;
use crate::sources::capture::windows::StepWindows;
pub use crate::sources::capture::windows::WholeRun;
use crate::sources::Source;
use crate::threads::tensors_in_flight;
use accutrace_formats::stats::TensorStats;
pub(crate) use loss_scale::loss_scale_candidates;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
pub(crate) use without_origin::{updates_of, without_origin_of, Updates};

#[derive(Serialize)]
pub struct Origin {
    pub step: u64,
    pub rank: u32,
    pub op: String,
    pub op_type: String,
    pub output: String,
    pub anomaly: Anomaly,
    /// `finite inputs` when every input was clean, `inputs not dumped` otherwise.
    pub inputs: &'static str,
    /// Ops of the same step after the origin whose outputs were anomalous too; `None` when the dump holds
    /// only the ops the device flagged ([`Index::only_overflowing_ops`]): the others were not dumped.
    pub spread_to: Option<usize>,
    pub device_status: Vec<DeviceStatus>,
    /// The ranks whose first overflow at this step is this same op (its own rank included; empty when it
    /// alone): each from finite inputs in its own compute, so no rank brought it to another.
    pub independently_on: Vec<u32>,
}

impl Origin {
    /// For an op that overflowed on several ranks at one step, each on its own, the sentence that says so.
    pub fn overflowed_independently(&self) -> Option<String> {
        (self.independently_on.len() > 1).then(|| {
            format!(
                "the same op overflowed on {} at step {}, each from finite inputs in its own compute: \
                 independently, no rank brought it to another",
                crate::filter::rank_ranges(&self.independently_on),
                self.step
            )
        })
    }
}

#[derive(Serialize)]
pub struct DeviceStatus {
    pub engine: String,
    pub status: Vec<String>,
    pub status_names: Vec<String>,
}

#[derive(Serialize)]
pub struct OverflowReport {
    pub run: String,
    pub origins: Vec<Origin>,
    /// Collectives whose output is anomalous from finite inputs on this rank: the overflow arrived there.
    pub arrivals: Vec<Arrival>,
    /// Skipped steps and loss-scale drops that no origin or arrival found here explains.
    pub without_origin: Vec<WithoutOrigin>,
    /// What the data covers when a ring policy deleted its oldest steps (per rank: `rank 0: steps 3-7;
    /// steps 0-2 deleted by the ring policy`); empty when nothing was deleted.
    pub scope: Vec<String>,
    pub steps_with_overflow: Vec<u64>,
    /// Maximal runs of consecutive steps with an overflow: a run means the loss scale kept collapsing.
    pub consecutive_runs: Vec<(u64, u64)>,
    pub loss_scale: Vec<LossScale>,
    /// The dump holds only the ops the device flagged as overflowing (CANN's overflow detection).
    pub only_overflowing_ops: bool,
    pub unattributed_device_records: usize,
    pub tensors_without_statistics: usize,
    /// What the run misses and which tensors could not be read: they lead the report.
    pub input_problems: InputProblems,
    /// What the run said about itself (steps it inferred, files it skipped); no verdict.
    pub warnings: Vec<String>,
}

impl OverflowReport {
    /// The arrival that heads the report when no origin does: the first, unless an overflow without origin
    /// comes at its step or earlier (a rank that shows the overflow with no arrival is nearer its origin).
    pub fn leading_arrival(&self) -> Option<&Arrival> {
        let first = self.arrivals.first().filter(|_| self.origins.is_empty())?;
        match (first.step, self.leading_unexplained_step()) {
            (_, None) => Some(first),
            (Some(arrived), Some(unexplained)) if arrived < unexplained => Some(first),
            _ => None,
        }
    }

    /// The overflow without origin that heads the report when neither an origin nor an arrival does: the
    /// earliest step's (the lowest rank's at a tie).
    pub fn leading_without_origin(&self) -> Option<&WithoutOrigin> {
        if !self.origins.is_empty() || self.leading_arrival().is_some() {
            return None;
        }
        let step = self.leading_unexplained_step()?;
        self.without_origin.iter().find(|w| w.step == step)
    }

    fn leading_unexplained_step(&self) -> Option<u64> {
        self.without_origin.iter().map(|w| w.step).min()
    }

    /// Findings when some op overflowed, an overflow arrived through a collective, or the run shows one
    /// (skipped step, loss-scale drop) whose origin is not in the data.
    pub fn outcome(&self) -> Outcome {
        if self.origins.is_empty() && self.arrivals.is_empty() && self.without_origin.is_empty() {
            Outcome::Pass
        } else {
            Outcome::Findings
        }
    }
}

/// The overflow analysis of the ops of `source` that `filter` keeps.
/// `progress`: a bar on stderr (when it is a terminal) while tensors without stored statistics are decoded.
pub fn overflow(source: &dyn Source, filter: &Filter, progress: bool) -> OverflowReport {
    let mut fold = OverflowFold::default();
    fold.add(source, filter, progress);
    let scope = source.index().ring_scope();
    fold.finish(source.root().display().to_string(), WholeRun { scope, ..WholeRun::default() })
}

/// The overflow analysis of the ops `filter` keeps of a long capture read a window of steps at a time
/// ([`StepWindows`]): the report [`overflow`] makes of the whole capture, holding one window's index at a
/// time. Every window of `windows` is read: those of the selected steps alone where the caller kept them to
/// `filter`'s steps ([`StepWindows::select_steps`]: the report is the selected steps' own, and the census
/// checked every record's checksum). `progress`: a bar of the windows read.
pub fn overflow_by_windows(
    windows: &StepWindows,
    filter: &Filter,
    progress: bool,
) -> anyhow::Result<OverflowReport> {
    let mut fold = OverflowFold::default();
    let count = windows.windows().len();
    // A window's statistics are in its records, read at once: the bar counts windows.
    let bar = Progress::counting("overflow", "windows", count as u64, !progress);
    for w in 0..count {
        let source = windows.open(w)?;
        fold.add(&source, filter, false);
        bar.inc(1);
    }
    bar.finish();
    Ok(fold.finish(windows.root().display().to_string(), windows.whole_run()))
}

/// The overflow analysis of a run made from the analyses of its parts (windows of steps, each an index of
/// its own, added in step order), equal to the analysis of the whole: what is found per step and rank is
/// kept as found, what spans steps (runs of overflowing steps, loss-scale drops, skipped updates, the reads
/// that explain them) is decided once every part is in. What it holds grows with steps, not tensors.
#[derive(Default)]
pub struct OverflowFold {
    origins: Vec<Origin>,
    arrivals: Vec<Arrival>,
    outside: Vec<WithoutOrigin>,
    scales: ScaleCandidates,
    /// Per rank and step, whether an optimizer op ran (the steps and ranks the filter keeps).
    updates: Updates,
    /// Per rank and step that may turn out unexplained: the first read of inf/NaN no op of the step made.
    leaf_reads: BTreeMap<(u32, u64), WithoutOrigin>,
    /// The last loss scale of each rank seen so far, by how it was found (by name, a scaler's multiply).
    last_scales: [BTreeMap<u32, f64>; 2],
    index_problems: Vec<InputProblem>,
    read_problems: InputProblems,
    warnings: Vec<String>,
    only_overflowing_ops: bool,
    unattributed_device_records: usize,
    tensors_without_statistics: usize,
}

/// Loss scales found by name, and by a scaler's multiply: the run's are the first where any part names one.
#[derive(Default)]
struct ScaleCandidates {
    named: Vec<LossScale>,
    multiplied: Vec<LossScale>,
}

impl OverflowFold {
    /// Adds the analysis of `source`'s ops that `filter` keeps (a part of the run: its steps come after
    /// those of the parts added before).
    pub fn add(&mut self, source: &dyn Source, filter: &Filter, progress: bool) {
        let index = source.index();
        let ops = filter.op_ids(index);
        let stats = gather_stats(source, &ops, &mut self.read_problems, progress);
        let found = analyse(index, &ops, &stats);
        let arrivals = collective_arrivals(index, filter);
        let origin_steps: BTreeSet<u64> = found.origins.iter().map(|o| o.step).collect();
        let arrived: BTreeSet<(u32, u64)> = arrivals.iter().filter_map(|a| Some((a.rank, a.step?))).collect();
        // A part holds every rank of its steps: an origin explains its step here as in the whole run.
        let outside = outside_selection(source, filter, &ops, &stats, &|rank, step| {
            origin_steps.contains(&step) || arrived.contains(&(rank, step))
        });
        let (named, multiplied) = loss_scale_candidates(index, &ops, &|t| stats.get(&t));
        let updates = updates_of(index, filter);
        // Where the whole run may find a step unexplained: a step without its update, a scale that dropped.
        let mut places: BTreeSet<(u32, u64)> = updates
            .iter()
            .flat_map(|(&rank, steps)| steps.iter().filter(|(_, &u)| !u).map(move |(&step, _)| (rank, step)))
            .collect();
        for (list, last) in [&named, &multiplied].into_iter().zip(&mut self.last_scales) {
            for l in list.iter() {
                if last.insert(l.rank, l.value).is_some_and(|before| l.value < before) {
                    places.insert((l.rank, l.step));
                }
            }
        }
        places.retain(|&(rank, step)| !origin_steps.contains(&step) && !arrived.contains(&(rank, step)));
        for w in leaf_reads(index, &ops, &stats, &places) {
            self.leaf_reads.insert((w.rank, w.step), w);
        }
        for (rank, steps) in updates {
            self.updates.entry(rank).or_default().extend(steps);
        }
        self.origins.extend(found.origins);
        self.arrivals.extend(arrivals);
        self.outside.extend(outside);
        self.scales.named.extend(named);
        self.scales.multiplied.extend(multiplied);
        self.index_problems.extend(index.problems.iter().cloned());
        self.warnings.extend(index.warnings.iter().cloned());
        self.only_overflowing_ops |= index.only_overflowing_ops;
        self.unattributed_device_records += found.unattributed_device_records;
        self.tensors_without_statistics += found.tensors_without_statistics;
    }

    /// The report on the run `run` whose every part was added.
    pub fn finish(self, run: String, whole: WholeRun) -> OverflowReport {
        let mut origins = self.origins;
        origins.sort_by_key(|o| (o.rank, o.step));
        let mut arrivals = self.arrivals;
        arrivals.sort_by_key(|a| (a.step.is_none(), a.step, a.rank));
        let loss_scale =
            if self.scales.named.is_empty() { self.scales.multiplied } else { self.scales.named };
        let mut loss_scale = loss_scale;
        loss_scale.sort_by_key(|l| (l.rank, l.step));
        let mut index_problems = whole.leading;
        index_problems.extend(self.index_problems);
        index_problems.extend(whole.shortfalls);
        // An origin explains its step on every rank (the overflow flag spans the job); an arrival only its own
        // rank's step: a rank that skipped the step without one is where the overflow began. The op that
        // overflowed first, though the selection leaves it out, explains its step as an origin does.
        let origin_steps: BTreeSet<u64> = origins.iter().map(|o| o.step).collect();
        let arrived: BTreeSet<(u32, u64)> = arrivals.iter().filter_map(|a| Some((a.rank, a.step?))).collect();
        let outside_steps: BTreeSet<u64> = self.outside.iter().map(|w| w.step).collect();
        let explained = |rank: u32, step: u64| {
            origin_steps.contains(&step) || outside_steps.contains(&step) || arrived.contains(&(rank, step))
        };
        let lost_records = index_problems.iter().any(|p| p.kind == ProblemKind::Incomplete);
        let without = without_origin_of(
            &self.updates,
            self.only_overflowing_ops,
            lost_records,
            &loss_scale,
            &explained,
        );
        // The read of inf/NaN that no op of the step produced comes first at its step: it names the op and
        // tensor.
        let places: BTreeSet<(u32, u64)> = without.iter().map(|w| (w.rank, w.step)).collect();
        let mut leaf_reads = self.leaf_reads;
        let mut unexplained: Vec<WithoutOrigin> =
            places.iter().filter_map(|place| leaf_reads.remove(place)).collect();
        unexplained.extend(without);
        unexplained.extend(self.outside);
        unexplained.sort_by_key(|w| (w.rank, w.step));
        let mut input_problems = InputProblems::default();
        for p in index_problems {
            input_problems.push(p);
        }
        for p in self.read_problems.items() {
            input_problems.push(p.clone());
        }
        let (steps_with_overflow, consecutive_runs) = steps_and_runs(&origins);
        OverflowReport {
            run,
            origins,
            arrivals,
            without_origin: unexplained,
            scope: whole.scope,
            steps_with_overflow,
            consecutive_runs,
            loss_scale,
            only_overflowing_ops: self.only_overflowing_ops,
            unattributed_device_records: self.unattributed_device_records,
            tensors_without_statistics: self.tensors_without_statistics,
            input_problems,
            warnings: self.warnings,
        }
    }
}

/// With an op selection (`--op`): the steps whose selected ops read inf/NaN that none of them produced,
/// and whose first overflow, over every op of the step, is an op the selection leaves out. Without this,
/// `--op 'model/layer_2/*'` of a step that overflowed in layer 1 said "No op produced inf/NaN" and exit 0.
/// Nothing is said where the whole step shows no origin either (data fed to the model, ops not dumped).
fn outside_selection(
    source: &dyn Source,
    filter: &Filter,
    ops: &[OpId],
    stats: &GatheredStats,
    explained: &dyn Fn(u32, u64) -> bool,
) -> Vec<WithoutOrigin> {
    let index = source.index();
    if filter.ops.is_empty() || index.only_overflowing_ops {
        return Vec::new();
    }
    let anomalous = |t: &TensorId| {
        stats.get(t).is_some_and(|s| Anomaly::of(&s, index.tensors[*t].dtype.is_float()).any())
    };
    let places: BTreeSet<(u32, u64)> = ops
        .iter()
        .map(|&o| &index.ops[o])
        .filter(|op| op.inputs().any(|t| anomalous(&t)))
        .map(|op| (op.rank, op.step))
        .filter(|place| !explained(place.0, place.1))
        .collect();
    if places.is_empty() {
        return Vec::new();
    }
    let whole: Vec<OpId> =
        (0..index.ops.len()).filter(|&o| places.contains(&(index.ops[o].rank, index.ops[o].step))).collect();
    // Tensors left out that cannot be read are not this selection's problem: they only name no origin.
    let whole_stats = gather_stats(source, &whole, &mut InputProblems::default(), false);
    let full = analyse(index, &whole, &whole_stats);
    full.origins
        .into_iter()
        .map(|o| WithoutOrigin {
            step: o.step,
            rank: o.rank,
            evidence: format!(
                "at step {}, the first overflow is {} [{}] ({}: {}), an op the --op selection leaves out",
                o.step,
                o.op,
                o.op_type,
                o.output,
                o.anomaly.describe()
            ),
        })
        .collect()
}

/// Per rank and step of `places`: the first op that read inf/NaN (or saturated values) in an input no
/// earlier op of the step produced (by content hash): a weight gone bad, the data, or an op not dumped. Without
/// it a weight that turned inf on one rank was "not in this data" while its MatMul was.
fn leaf_reads(
    index: &Index,
    ops: &[OpId],
    stats: &GatheredStats,
    places: &BTreeSet<(u32, u64)>,
) -> Vec<WithoutOrigin> {
    let mut by_place: BTreeMap<(u32, u64), Vec<OpId>> = BTreeMap::new();
    for &o in ops.iter().filter(|&&o| places.contains(&(index.ops[o].rank, index.ops[o].step))) {
        by_place.entry((index.ops[o].rank, index.ops[o].step)).or_default().push(o);
    }
    let anomaly = |t: TensorId| {
        stats.get(&t).map(|s| Anomaly::of(&s, index.tensors[t].dtype.is_float())).filter(|a| a.any())
    };
    let mut found = Vec::new();
    for ((rank, step), mut list) in by_place {
        list.sort_by_key(|&o| index.ops[o].order);
        let mut produced = BTreeSet::new();
        'ops: for o in list {
            let op = &index.ops[o];
            for t in op.inputs() {
                let leaf = index.tensors[t].hash().is_some_and(|h| !produced.contains(&h));
                if let (true, Some(a)) = (leaf, anomaly(t)) {
                    found.push(WithoutOrigin {
                        step,
                        rank,
                        evidence: format!(
                            "{} [{}] read {} in {}, which no op of step {step} produced (a weight, the data, \
                             or an op not dumped)",
                            op.name,
                            op.op_type,
                            a.describe(),
                            index.tensor_label(t)
                        ),
                    });
                    break 'ops;
                }
            }
            produced.extend(op.outputs().filter_map(|t| index.tensors[t].hash()));
        }
    }
    found
}

/// Statistics of every tensor of the selected ops: stored ones, else decoded (in parallel within the memory
/// budget, `threads::tensors_in_flight`, with a progress bar on stderr when `progress` and it is a terminal). A tensor that cannot be read is an input problem.
pub fn gather_stats<'a>(
    source: &'a dyn Source,
    ops: &[OpId],
    problems: &mut InputProblems,
    progress: bool,
) -> GatheredStats<'a> {
    let index = source.index();
    let tensors: Vec<TensorId> = ops.iter().flat_map(|&o| index.ops[o].tensors()).collect();
    let decodes = |t: TensorId| !index.tensors[t].has_stats() && index.tensors[t].has_data;
    // Stored statistics stay in the index, a bit a tensor says which were asked for: copied into a map
    // (and before that carried through the reads' results), they were held two and three times over (#18).
    let mut stats = GatheredStats::stored_of(index, tensors.iter().copied());
    let to_decode: Vec<TensorId> = tensors.into_iter().filter(|&t| decodes(t)).collect();
    let bar = Progress::new("statistics", to_decode.len() as u64, !progress || to_decode.is_empty());
    let found = tensors_in_flight(source, &to_decode, decodes, |values, k| {
        let stats = decoded_stats(source, to_decode[k], values);
        bar.inc(1);
        stats
    });
    bar.finish();
    for (&t, found) in to_decode.iter().zip(found) {
        match found {
            Ok(s) => stats.insert_decoded(t, s),
            Err(e) => problems.push_unreadable(&index.tensor_label(t), &e),
        }
    }
    stats
}

/// The statistics of tensor `t`'s values, decoded into `values` (or lent by the source).
pub(crate) fn decoded_stats(
    source: &dyn Source,
    t: TensorId,
    values: &mut Vec<f32>,
) -> anyhow::Result<TensorStats> {
    let dtype = source.index().tensors[t].dtype;
    let mut stats = None;
    source.with_values(t, values, &mut |v| stats = Some(TensorStats::of_f32(v, dtype)))?;
    stats.ok_or_else(|| anyhow::anyhow!("the source gave no values"))
}

fn analyse(index: &Index, ops: &[OpId], stats: &GatheredStats) -> Found {
    let anomaly = |t: TensorId| stats.get(&t).map(|s| Anomaly::of(&s, index.tensors[t].dtype.is_float()));
    let mut by_step: BTreeMap<(u32, u64), Vec<OpId>> = BTreeMap::new();
    for &o in ops {
        by_step.entry((index.ops[o].rank, index.ops[o].step)).or_default().push(o);
    }
    let mut origins = Vec::new();
    for ((rank, step), mut list) in by_step {
        list.sort_by_key(|&o| index.ops[o].order);
        let is_bad = |o: OpId| index.ops[o].outputs().any(|t| anomaly(t).is_some_and(|a| a.any()));
        let Some(pos) = list.iter().position(|&o| {
            let op = &index.ops[o];
            is_bad(o) && op.inputs().all(|t| !anomaly(t).is_some_and(|a| a.any()))
        }) else {
            continue;
        };
        let o = list[pos];
        let op = &index.ops[o];
        let (output, found) = op
            .outputs()
            .filter_map(|t| anomaly(t).filter(|a| a.any()).map(|a| (t, a)))
            .next()
            .expect("is_bad guarantees an anomalous output");
        let inputs_known = !op.inputs().is_empty() && op.inputs().all(|t| anomaly(t).is_some());
        let device_status = index
            .overflow_records
            .iter()
            .filter(|r| r.op == Some(o) || (r.op.is_none() && r.step == step && r.rank == rank))
            .map(|r| DeviceStatus {
                engine: r.engine.clone(),
                status: r.status.iter().map(|s| format!("{s:#x}")).collect(),
                status_names: r.status_names.clone(),
            })
            .collect();
        origins.push(Origin {
            step,
            rank,
            op: op.name.to_string(),
            op_type: op.op_type.to_string(),
            output: index.tensor_label(output),
            anomaly: found,
            inputs: if inputs_known { "finite inputs" } else { "inputs not dumped" },
            spread_to: (!index.only_overflowing_ops)
                .then(|| list[pos + 1..].iter().filter(|&&later| is_bad(later)).count()),
            device_status,
            independently_on: Vec::new(),
        });
    }
    // One op overflowing first on several ranks at one step: each began it there, said on each.
    let mut same_op: BTreeMap<(u64, String), Vec<u32>> = BTreeMap::new();
    for o in &origins {
        same_op.entry((o.step, o.op.clone())).or_default().push(o.rank);
    }
    for o in &mut origins {
        let mut ranks = same_op[&(o.step, o.op.clone())].clone();
        ranks.sort_unstable();
        ranks.dedup();
        if ranks.len() > 1 {
            o.independently_on = ranks;
        }
    }
    let unattributed = index.overflow_records.iter().filter(|r| r.op.is_none()).count();
    let without_stats =
        ops.iter().flat_map(|&o| index.ops[o].tensors()).filter(|t| !stats.contains_key(t)).count();
    Found { origins, unattributed_device_records: unattributed, tensors_without_statistics: without_stats }
}

/// What [`analyse`] finds in one index.
struct Found {
    origins: Vec<Origin>,
    unattributed_device_records: usize,
    tensors_without_statistics: usize,
}

/// The steps with an origin, and their maximal runs of consecutive steps (a run means the loss scale kept
/// collapsing).
fn steps_and_runs(origins: &[Origin]) -> (Vec<u64>, Vec<(u64, u64)>) {
    let mut steps: Vec<u64> = origins.iter().map(|o| o.step).collect();
    steps.sort_unstable();
    steps.dedup();
    let mut runs: Vec<(u64, u64)> = Vec::new();
    for &s in &steps {
        match runs.last_mut() {
            Some((_, end)) if *end + 1 == s => *end = s,
            _ => runs.push((s, s)),
        }
    }
    runs.retain(|(a, b)| b > a);
    (steps, runs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::threads::counting::Tensors;
    use std::sync::atomic::Ordering;

    /// Statistics decoded for a source that stored none: tensors of 512 MiB as f32 one at a time on a pool of
    /// four threads (the budget's one), each tensor's own.
    #[test]
    fn statistics_of_large_tensors_are_decoded_one_at_a_time() {
        let elements: Vec<u64> = (0..12).map(|k| if k % 3 == 0 { 128 << 20 } else { 16 }).collect();
        let source = Tensors::new(&elements);
        let ops: Vec<OpId> = (0..elements.len()).collect();
        let mut problems = InputProblems::default();
        let pool = rayon::ThreadPoolBuilder::new().num_threads(4).build().unwrap();
        let stats = pool.install(|| gather_stats(&source, &ops, &mut problems, false));
        assert_eq!(source.large_most.load(Ordering::SeqCst), 1, "large tensors read at once");
        assert!(problems.is_empty());
        assert_eq!(stats.len(), 12);
        for (t, s) in stats.iter() {
            assert_eq!((s.count, s.max), (2, t as f64), "tensor {t}");
        }
    }
}
