//! diff's results folded: within a part of the runs (the whole runs, or a window of the same steps of
//! each) as each pair's figures are handed over, and part by part into the report. A part holds every op
//! and tensor of its steps, so what is per step (the first difference, an op's inputs) is decided within
//! it; what spans parts (the census, the counts, where the calls' pairing stopped) is carried over.

use super::calls::{collective_differences, ring_firsts, with_collectives, CallPairing, RingFirsts};
use super::comms::CommTags;
use super::measure::{diff_pair, footprint, stats_delta, PairFound};
use super::report::{CensusRow, DiffOptions, DiffReport, FirstDifference, Refusal, UnmatchedTensor};
use super::values::TensorDiff;
use crate::index::{Index, IndexedOp, Io, OpId, RingDeleted, TensorId};
use crate::matching::{match_runs, MatchOptions};
use crate::problems::{InputProblem, InputProblems};
use crate::progress::Progress;
use crate::repeats::measure_pairs_into;
use crate::sources::capture::step_calls::{comm_uses, CommUse};
use crate::sources::capture::windows::WholeRun;
use crate::sources::Source;
use crate::threads::pairs_in_flight;
use std::collections::BTreeMap;
use std::path::Path;

/// Where an op comes in its run's execution order, whichever part it was read in: rank, step, then its
/// order within the part. An index orders its ops by rank, step and launch, and a part holds every op of
/// its steps, so this orders ops as the whole run's index does.
type Placed = (u32, u64, u64);

fn placed(op: &IndexedOp) -> Placed {
    (op.rank, op.step, op.order)
}

/// The report of two runs made from their parts, added in step order ([`DiffFold::add`]): what it holds
/// grows with the ops that differ and the tensors only one run has, not with the tensors compared.
#[derive(Default)]
pub(super) struct DiffFold {
    /// Pairs the selection kept, over every part.
    pub pairs: usize,
    compared: usize,
    differing: usize,
    decoded: usize,
    /// Pairs known by the device's statistics alone: whose statistics differ (among `differing`), agree.
    statistics_differ: usize,
    statistics_agree: usize,
    first_differences: Vec<FirstDifference>,
    census: BTreeMap<(String, u32), (Placed, CensusRow)>,
    /// Each run's tensors the other lacks, with their place in the run's tensor order (an op's tensors
    /// follow their op).
    unmatched: [Vec<((Placed, TensorId), UnmatchedTensor)>; 2],
    /// What each run's parts say they miss, and the tensors that could not be read.
    index_problems: [Vec<InputProblem>; 2],
    read_problems: InputProblems,
    warnings: [Vec<String>; 2],
    matching_warnings: Vec<String>,
    calls: CallPairing,
    /// Each run's first steps its ring left, which may have lost their first calls.
    rings: [RingFirsts; 2],
    /// Which communicator is which in both runs: the census's, else the first part's (the whole runs').
    comms: Option<CommTags>,
}

impl DiffFold {
    /// A fold whose HCCL calls pair from `calls` on (the windows before the parts it will be given left
    /// the pairing there), of runs whose rings deleted `ring_deleted` (the parts' indexes do not say it)
    /// and whose ranks used `comms` (the census's, over each whole run: a part may hold some members'
    /// calls only; `None`: the first part's).
    pub fn starting_with(
        calls: CallPairing,
        ring_deleted: [&[RingDeleted]; 2],
        comms: Option<[Vec<CommUse>; 2]>,
    ) -> DiffFold {
        let comms = comms.map(|[a, b]| CommTags::of([&a, &b]));
        DiffFold { calls, rings: ring_deleted.map(ring_firsts), comms, ..DiffFold::default() }
    }

    /// Adds a part of each run: the same steps of both, after the steps of the parts added before. Only
    /// what the parts say of themselves is kept when not `measure` (the runs are refused whatever they
    /// hold). `options.progress`: a bar of this part's pairs.
    pub fn add(&mut self, run1: &dyn Source, run2: &dyn Source, options: &DiffOptions, measure: bool) {
        let (i1, i2) = (run1.index(), run2.index());
        for (problems, index) in self.index_problems.iter_mut().zip([i1, i2]) {
            problems.extend(index.problems.iter().cloned());
        }
        for (warnings, index) in self.warnings.iter_mut().zip([i1, i2]) {
            warnings.extend(index.warnings.iter().cloned());
        }
        if !measure {
            return;
        }
        let matching = match_runs(i1, i2, &MatchOptions::default());
        self.matching_warnings.extend(matching.warnings.iter().cloned());
        for ((unmatched, run), (index, tensors)) in self
            .unmatched
            .iter_mut()
            .zip(["run1", "run2"])
            .zip([(i1, &matching.unmatched_target), (i2, &matching.unmatched_bench)])
        {
            // Only the selection's: a tensor of a step, rank or op left out is no finding (as compare's).
            let op = |t: TensorId| &index.ops[index.tensors[t].op()];
            let kept = tensors.iter().copied().filter(|&t| options.filter.keeps(op(t)));
            unmatched.extend(kept.map(|t| ((placed(op(t)), t), UnmatchedTensor::of(run, index, t))));
        }
        let pairs: Vec<_> = matching
            .pairs
            .iter()
            .filter(|p| options.filter.keeps(&i1.ops[i1.tensors[p.target()].op()]))
            .collect();
        self.pairs += pairs.len();
        let progress = Progress::new("diff", pairs.len() as u64, !options.progress);
        // A tensor both runs recorded twice (an op's output, then the next op's input) is read once where
        // each run stores the same bytes for both records: the first pair's data matched its content hashes
        // when it was measured, so the repeat's stored bytes are proved sound without decoding them again.
        let limits = pairs_in_flight(footprint([run1, run2]), [run1, run2]);
        // Threads that measure no pair of their own: a large pair's waves take them (the pairs' threads
        // take waves only when they wait on their own).
        let spare_threads = rayon::current_num_threads() > limits.large;
        let mut folded = Folded::new(i1);
        // Each result is folded as it is handed over, in pair order: no table of every pair's figures is
        // held (#18: memory must not grow with the tensor count beyond one byte a tensor).
        let mut next_pair = pairs.iter();
        measure_pairs_into(
            (run1, run2),
            limits,
            &pairs,
            |p| {
                let d = diff_pair(run1, run2, p.target(), p.bench(), spare_threads);
                progress.inc(1);
                d
            },
            |d| match d {
                Ok(PairFound::Figures(d)) if d.measured => Some(d.clone()),
                _ => None,
            },
            |p, d| {
                progress.inc(1);
                let stats_delta = stats_delta((i1, p.target()), (i2, p.bench()));
                Ok(PairFound::Figures(TensorDiff { stats_delta, ..d.clone() }))
            },
            |d| {
                let Some(p) = next_pair.next() else { return };
                match d {
                    Ok(PairFound::Figures(d)) => folded.add(p.target(), d),
                    Ok(PairFound::StatisticsAgree) => folded.seen[p.target()] = Seen::StatisticsAgree,
                    Err(e) => {
                        // A tensor that could not be read on either side is neither identical nor different.
                        let label =
                            format!("{} vs {}", i1.tensor_label(p.target()), i2.tensor_label(p.bench()));
                        self.read_problems.push_unreadable(&label, &e);
                        folded.seen[p.target()] = Seen::Unread;
                    }
                }
            },
        );
        progress.finish();
        // A whole run's index says what its ring deleted.
        for (rings, index) in self.rings.iter_mut().zip([i1, i2]) {
            rings.extend(ring_firsts(&index.ring_deleted));
        }
        // The calls that parted ranks before a selection's windows, listed as the steps read would list them.
        let unread: Vec<_> =
            self.calls.take_unread().iter().filter_map(|p| p.listed(&options.filter)).collect();
        let [r1, r2] = &self.rings;
        let comms = self.comms.get_or_insert_with(|| {
            let uses = |index: &Index| comm_uses(index.collectives.iter().map(|c| (c.rank, &c.info)));
            CommTags::of([&uses(i1), &uses(i2)])
        });
        let filter = &options.filter;
        let (calls, unpaired) = collective_differences(i1, i2, filter, &mut self.calls, [r1, r2], comms);
        for call in unread.into_iter().chain(unpaired) {
            // After the tensors of its step and rank: a call's place among the ops is not the index's.
            let at = ((call.tensor.rank, call.tensor.step, u64::MAX), TensorId::MAX);
            self.unmatched[call.run].push((at, call.tensor));
        }
        self.first_differences.extend(with_collectives(folded.first_differences(), &calls));
        self.compared +=
            folded.seen.iter().filter(|s| matches!(s, Seen::Identical | Seen::Differing)).count();
        self.differing += folded.seen.iter().filter(|&&s| s == Seen::Differing).count() + calls.len();
        self.decoded += folded.decoded;
        self.statistics_differ += folded.statistics_differ;
        self.statistics_agree += folded.seen.iter().filter(|&&s| s == Seen::StatisticsAgree).count();
        folded.census_into(&mut self.census);
    }

    /// What the parts added so far say they miss, both runs'.
    pub fn index_problems(&self) -> impl Iterator<Item = &InputProblem> {
        self.index_problems.iter().flatten()
    }

    /// What the runs at `runs` miss, each as a whole ([`WholeRun`]: the problems that lead, the parts',
    /// then the whole's shortfalls), then the tensors that could not be read.
    fn problems(&mut self, whole: [WholeRun; 2]) -> InputProblems {
        let mut problems = InputProblems::default();
        for (run, parts) in whole.into_iter().zip(&mut self.index_problems) {
            let all = run.leading.into_iter().chain(parts.drain(..)).chain(run.shortfalls);
            all.for_each(|p| problems.push(p));
        }
        problems
    }

    /// What the runs say of themselves, named by run, then what the matching warned of.
    fn warnings(&mut self) -> Vec<String> {
        let [w1, w2] = std::mem::take(&mut self.warnings);
        let named = |run: &'static str, w: Vec<String>| w.into_iter().map(move |w| format!("{run}: {w}"));
        named("run1", w1).chain(named("run2", w2)).chain(self.matching_warnings.drain(..)).collect()
    }

    /// The report of runs refused once every part is in: what they miss, then why. What the parts
    /// measured before the refusal was certain (unreadable tensors, the matching's warnings) is not said:
    /// nothing is judged.
    pub fn refused(mut self, runs: [&Path; 2], whole: [WholeRun; 2], refusal: Refusal) -> DiffReport {
        self.matching_warnings.clear();
        let problems = self.problems(whole);
        DiffReport::refused_at(runs, problems, self.warnings(), refusal)
    }

    /// The report once every part is in.
    pub fn finish(mut self, runs: [&Path; 2], whole: [WholeRun; 2]) -> DiffReport {
        let mut input_problems = self.problems(whole);
        // Communicators that could not be told apart: what was paired among them rests on their order.
        for p in self.comms.iter().flat_map(CommTags::problems) {
            input_problems.push(p);
        }
        for p in self.read_problems.items() {
            input_problems.push(p.clone());
        }
        let mut warnings = self.warnings();
        // Agreeing statistics are no all-clear: with nothing proved different they leave the answer open;
        // beside a difference they leave open whether an op before it differed unseen.
        if self.statistics_agree > 0 {
            let said = statistics_agree_said(self.statistics_agree, self.differing > 0);
            match self.differing {
                0 => input_problems.push(InputProblem::incomplete(said)),
                _ => warnings.push(said),
            }
        }
        let mut first_differences = self.first_differences;
        first_differences.sort_by_key(|f| (f.step, f.rank));
        let mut census: Vec<(Placed, CensusRow)> = self.census.into_values().collect();
        census.sort_by_key(|(at, row)| (*at, row.rank));
        let [mut u1, mut u2] = self.unmatched;
        u1.sort_by_key(|(at, _)| *at);
        u2.sort_by_key(|(at, _)| *at);
        let unmatched: Vec<UnmatchedTensor> = u1.into_iter().chain(u2).map(|(_, u)| u).collect();
        let labels =
            |run: &str| unmatched.iter().filter(|u| u.run == run).map(|u| u.tensor.clone()).collect();
        let (unmatched_run1, unmatched_run2): (Vec<String>, Vec<String>) = (labels("run1"), labels("run2"));
        // Nothing differing among what was read is no "identical" while something was not read.
        let verdict = match (self.differing, unmatched_run1.is_empty() && unmatched_run2.is_empty()) {
            (0, _) if !input_problems.is_empty() => "incomplete",
            (0, true) => "identical",
            (0, false) => "unmatched",
            _ => "different",
        };
        DiffReport {
            verdict,
            run1: runs[0].display().to_string(),
            run2: runs[1].display().to_string(),
            compared_tensors: self.compared,
            differing_tensors: self.differing,
            decoded_tensors: self.decoded,
            differing_by_statistics: self.statistics_differ,
            agreeing_by_statistics: self.statistics_agree,
            first_differences,
            census: census.into_iter().map(|(_, row)| row).collect(),
            unmatched_run1,
            unmatched_run2,
            unmatched,
            input_problems,
            warnings,
        }
    }
}

/// The one line that says `agree` pairs were known by the device's statistics alone and theirs agree: an
/// input problem where nothing differs, a warning beside a difference (`beside_a_difference`).
fn statistics_agree_said(agree: usize, beside_a_difference: bool) -> String {
    let pairs =
        if agree == 1 { "1 tensor pair holds".to_string() } else { format!("{agree} tensor pairs hold") };
    let consequence = match beside_a_difference {
        true => "each first difference is the first op whose statistics differ, and an op before it may differ unseen",
        false => "that does not show them identical",
    };
    format!(
        "{pairs} only the device's statistics (`--mode device-stats`: no content hash, no values), which agree \
         between the runs: {consequence}; record with `--mode stats` (content hashes) or `--mode tensor` to tell"
    )
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
    /// Its pair is known by the device's statistics alone, which agree: neither identical nor different.
    StatisticsAgree,
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
    statistics_differ: usize,
    /// Per op name and rank: where in the run's execution order it first ran, and its row.
    census: BTreeMap<(&'a str, u32), (Placed, CensusRow)>,
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
            statistics_differ: 0,
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
        self.statistics_differ += usize::from(d.by_device_statistics);
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
                (placed(op), row)
            });
            entry.0 = entry.0.min(placed(op));
            let row = &mut entry.1;
            if !std::mem::replace(&mut self.counted[o], true) {
                row.times += 1;
            }
            row.max_abs_diff = row.max_abs_diff.max(d.max_abs_diff);
            row.max_ulp = row.max_ulp.max(d.max_ulp);
            row.max_share_differing = row.max_share_differing.max(d.share_differing());
            row.max_stats_delta = row.max_stats_delta.max(d.stats_delta.unwrap_or(0.0));
            row.measured |= d.measured;
            row.by_device_statistics |= d.by_device_statistics;
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
            // An input that could not be read may have differed, and so may one whose statistics alone
            // agree: the op cannot be called nondeterministic (a differing input still shows propagation).
            let is = |seen: Seen| move |t: TensorId| self.seen[t] == seen;
            let verdict = if op.inputs().any(is(Seen::Unread)) {
                "unknown"
            } else if !differing_inputs.is_empty() {
                "propagating"
            } else if input_diffs.is_empty() || op.inputs().any(is(Seen::StatisticsAgree)) {
                "unknown"
            } else {
                "nondeterministic"
            };
            let first = FirstDifference {
                step: op.step,
                rank: op.rank,
                op: op.name.to_string(),
                op_type: op.op_type.to_string(),
                verdict,
                differing_inputs,
                output: f.diff.clone(),
                in_transit: false,
            };
            found.push((first, op.launch().map(|l| l.timestamp_us)));
        }
        found
    }

    /// The census rows of this part merged into `into` (per op name and rank: where it first ran, the
    /// largest figures, the executions summed).
    fn census_into(self, into: &mut BTreeMap<(String, u32), (Placed, CensusRow)>) {
        for ((name, rank), (at, row)) in self.census {
            let Some((first, held)) = into.get_mut(&(name.to_string(), rank)) else {
                into.insert((name.to_string(), rank), (at, row));
                continue;
            };
            *first = (*first).min(at);
            held.times += row.times;
            held.max_abs_diff = held.max_abs_diff.max(row.max_abs_diff);
            held.max_ulp = held.max_ulp.max(row.max_ulp);
            held.max_share_differing = held.max_share_differing.max(row.max_share_differing);
            held.max_stats_delta = held.max_stats_delta.max(row.max_stats_delta);
            held.measured |= row.measured;
            held.by_device_statistics |= row.by_device_statistics;
        }
    }
}
