//! The engine, [`compare`]: matches the runs (or refuses two that are not one model, or that were recorded
//! in different execution modes), measures every pair in parallel within the memory budget, takes
//! msprobe's verdicts from its table, hashes the target tensors the culprit search needs, and finds the
//! culprit.

use super::comparison::{unmeasured_problem, CompareOptions, Comparison};
use super::culprit::{find_culprit_within, hash_needed};
use super::in_waves;
use super::msprobe_table;
use super::pair::{compare_pair, pair_request, release_pair_buffers, ReadMetrics};
use super::row::CompareRow;
use crate::api_matching::{is_api_level, with_output_stats};
use crate::comparable::{
    different_model, execution_modes_differ, kernel_counters_differ, narrower_sides, ranks_on_one_side,
    steps_on_one_side, swapped_sides, without_counterpart, without_counterpart_warning,
};
use crate::index::{Index, Io, TensorId};
use crate::matching::{match_runs, Matching, TensorPair};
use crate::metrics::Families;
use crate::problems::{InputProblem, InputProblems};
use crate::progress::Progress;
use crate::repeats::measure_pairs_into;
use crate::sources::Source;
use crate::threads::{in_flight, pairs_in_flight, tensor_bytes, Footprint};
use anyhow::Result;

/// Matches, measures every pair in parallel, and finds the culprit.
pub fn compare<'a>(
    target: &'a dyn Source,
    bench: &'a dyn Source,
    options: &CompareOptions,
) -> Comparison<'a> {
    compare_part(target, bench, options, None).0
}

/// What a comparison of a window of steps of each run says beyond its [`Comparison`], kept apart so that
/// the windows fold into what the whole runs' comparison says (`super::fold`).
#[derive(Default)]
pub(crate) struct PartFacts {
    /// The matching's warnings, and each side's index's (named by side).
    pub matching_warnings: Vec<String>,
    pub index_warnings: [Vec<String>; 2],
    /// Matched float pairs narrower on the benchmark's side, and on the target's ([`narrower_sides`]).
    pub narrower: [usize; 2],
    /// The target tensors in steps and ranks the benchmark holds that have no counterpart.
    pub without_counterpart: Vec<TensorId>,
    /// Kernels were matched against API calls (their alignment spans the run: not folded).
    pub against_apis: bool,
    /// The pairs that could not be read, in row order, then the tensors whose hash could not be read.
    pub unreadable: Vec<(TensorId, InputProblem)>,
    pub unhashed: Vec<(TensorId, InputProblem)>,
    /// The culprit search tied a failing op's input to a producer another window may hold.
    pub culprit_crosses: bool,
}

/// [`compare`], with what a window's comparison says beyond it ([`PartFacts`]); `bench_inputs`: whether the
/// whole benchmark holds inputs, where `bench` is a window of it (`None`: `bench` is whole).
pub(crate) fn compare_part<'a>(
    target: &'a dyn Source,
    bench: &'a dyn Source,
    options: &CompareOptions,
    bench_inputs: Option<bool>,
) -> (Comparison<'a>, PartFacts) {
    let mut facts = PartFacts::default();
    let (ti, bi) = (target.index(), bench.index());
    // Tensors read at once (each with buffers of its size), within the memory budget.
    let limits = pairs_in_flight(Footprint::compare([target, bench]), [target, bench]);
    // Kernels against API calls weigh statistics: sources indexed without them get them read first.
    let kernels_against_apis = is_api_level(bi) && !is_api_level(ti);
    facts.against_apis = kernels_against_apis;
    let (ts, bs) = match kernels_against_apis {
        true => (with_output_stats(target, limits), with_output_stats(bench, limits)),
        false => (None, None),
    };
    let matching = match_runs(ts.as_ref().unwrap_or(ti), bs.as_ref().unwrap_or(bi), &options.matching);
    facts.narrower = narrower_sides(ti, bi, &matching);
    let mut warnings: Vec<String> = swapped_sides(target, bench, facts.narrower).into_iter().collect();
    warnings.extend(ranks_on_one_side(ti, bi, &options.filter));
    warnings.extend(steps_on_one_side(ti, bi, &options.filter));
    let keep = |t: TensorId| options.filter.keeps(&ti.ops[ti.tensors[t].op()]);
    // A benchmark that dumps outputs only (a .npy directory of op outputs) cannot match inputs: that is
    // expected, not a finding, so target inputs are not listed as unmatched then.
    let bench_has_inputs = bench_inputs.unwrap_or_else(|| bi.tensors.iter().any(|t| t.io == Io::Input));
    let unmatched_target: Vec<TensorId> = matching
        .unmatched_target
        .iter()
        .copied()
        .filter(|&t| keep(t) && (bench_has_inputs || ti.tensors[t].io == Io::Output))
        .collect();
    // Kernels against API calls say what no call covers in their own line.
    let without_counterpart = match matching.api_calls.is_empty() {
        true => without_counterpart(ti, bi, &unmatched_target, &options.filter),
        false => Vec::new(),
    };
    let matched = matching.pairs.iter().filter(|p| keep(p.target())).count();
    warnings.extend(without_counterpart_warning(ti, &without_counterpart, matched));
    warnings.extend(matching.warnings.iter().cloned());
    facts.matching_warnings = matching.warnings.clone();
    // What each source said about itself (steps it inferred, files it skipped).
    facts.index_warnings = [ti.warnings_of("target").collect(), bi.warnings_of("benchmark").collect()];
    warnings.extend(facts.index_warnings.iter().flatten().cloned());
    // Eager kernels against graph-mode ops first: their pairs may also look like another model's.
    let refusal = execution_modes_differ(ti, bi, &matching, &options.filter)
        .or_else(|| kernel_counters_differ(ti, bi, &matching, &options.filter))
        .or_else(|| different_model(ti, bi, &matching, &options.filter));
    if let Some(why) = refusal {
        let mut problems = InputProblems::of_sources(&[target, bench]);
        problems.push(InputProblem::refused(format!(
            "{} vs {}: {why}",
            target.root().display(),
            bench.root().display()
        )));
        let refused = Comparison {
            target,
            bench,
            rows: Vec::new(),
            failing_ops: Vec::new(),
            culprit: None,
            unmatched_target: matching.unmatched_target,
            without_counterpart: 0,
            unmatched_bench: matching.unmatched_bench,
            filter: options.filter.clone(),
            refused: Some(why),
            warnings,
            problems,
            api_calls: matching.api_calls,
        };
        return (refused, facts);
    }
    // The pairs kept, in place: of the matching, only they, what it left unmatched and its API calls are
    // kept (#18: a list of references to those kept was 8 bytes a pair beside them).
    let mut matching = matching;
    matching.pairs.retain(|p| keep(p.target()));
    let Matching { pairs, unmatched_bench, api_calls, .. } = matching;
    let progress = Progress::new("compare", pairs.len() as u64, !options.progress);
    let families = families(target, bench, options);
    // Pairs of large tensors measured in waves hold bounded reads, not both tensors as f32: counted pair by
    // pair, more of them may fit the budget at once.
    let requests = pairs.iter().map(|p| {
        let (t, b) = (p.target(), p.bench());
        (t, b, pair_request(families, &ti.tensors[t], &bi.tensors[b]))
    });
    let by_pair = in_waves::pairs_in_flight_by_pair((target, bench), requests);
    let measuring = if by_pair.large > limits.large { by_pair } else { limits };
    // A tensor both sides recorded twice (an op's output, then the next op's input) is read once where
    // each side stores the same bytes for both records: the repeat takes the first pair's metrics.
    let compare_one = |p: &TensorPair, first: Option<&ReadMetrics>| {
        let compared = compare_pair(target, bench, p, options, families, first);
        progress.inc(1);
        compared
    };
    // Each pair's row goes into its place as its window is done: no table of results beside the rows. Only
    // the hashes a read computed are kept beside them: sources that store hashes (captures) compute none.
    let mut rows: Vec<CompareRow> = Vec::with_capacity(pairs.len());
    let mut pair_hashes: Vec<(TensorId, u64)> = Vec::new();
    measure_pairs_into(
        (target, bench),
        measuring,
        &pairs,
        |p| compare_one(p, None),
        |(_, _, read): &(CompareRow, Option<u64>, Option<Box<ReadMetrics>>)| read.clone(),
        |p, first| compare_one(p, Some(first)),
        |(row, hash, _)| {
            pair_hashes.extend(hash.map(|h| (row.target(), h)));
            rows.push(row);
        },
    );
    progress.finish();
    release_pair_buffers();
    // The pairs are in the rows now (#18: held to the end, 24 bytes a pair beside the rows).
    drop(pairs);
    // msprobe's Result is decided per API call over every argument msprobe lists, not only the compared
    // tensors: its table does it, a call at a time, and the compared rows take their verdicts from it.
    msprobe_table::verdicts(ti, bi, &rows, &options.filter).apply(&mut rows);
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
    for row in rows.iter().filter(|r| r.error().is_some()) {
        unread[row.target()] = true;
        let bench_label = row.bench().map(|b| format!(" vs {}", bi.tensor_label(b))).unwrap_or_default();
        let why = row.error().unwrap_or_default();
        let problem =
            InputProblem::unreadable(format!("{}{bench_label}: {why}", ti.tensor_label(row.target())));
        facts.unreadable.push((row.target(), problem.clone()));
        problems.push(problem);
    }
    // Content hashes tie each input to the op that produced it. Sources that store none (dump trees, .npy)
    // hashed the compared target tensors while reading their values. The culprit search looks up the
    // producers of failing ops only, so besides every output (a possible producer) only the inputs of
    // failing ops need a hash: those still missing are hashed here, in parallel. The inputs of passing ops
    // are never read (a benchmark of outputs pairs none of them). Only the tensors to read go through the
    // pool, and only computed hashes are held beside the index's (#18: a result for every target tensor,
    // its hash stored or not, and the lists of them were about 80 bytes a target tensor at compare's peak).
    let mut computed: Vec<Option<u64>> = Vec::new();
    for (t, h) in pair_hashes {
        remember(&mut computed, ti, t, h);
    }
    let needed = hash_needed(ti, &rows);
    let missing = |t: TensorId| ti.tensors[t].hash().is_none() && computed.get(t).is_none_or(Option::is_none);
    let to_read: Vec<TensorId> = (0..ti.tensors.len())
        .filter(|&t| missing(t) && needed[t] && keep(t) && ti.tensors[t].has_data && !unread[t])
        .collect();
    // As many at once as pairs are measured: a source without stored hashes reads the tensor to hash it.
    let read: Vec<Result<u64>> = in_flight(
        limits,
        to_read.len(),
        |k| tensor_bytes(&ti.tensors[to_read[k]]),
        || (),
        |_, k| target.content_hash(to_read[k]),
    );
    for (t, hash) in to_read.into_iter().zip(read) {
        match hash {
            Ok(h) => remember(&mut computed, ti, t, h),
            Err(e) => {
                let problem = InputProblem::unreadable(format!("{}: {e:#}", ti.tensor_label(t)));
                facts.unhashed.push((t, problem.clone()));
                problems.push(problem);
            }
        }
    }
    let hash = |t: TensorId| ti.tensors[t].hash().or_else(|| computed.get(t).copied().flatten());
    let (failing_ops, culprit, crosses) = find_culprit_within(ti, &rows, hash);
    facts.culprit_crosses = crosses;
    facts.without_counterpart = without_counterpart;
    let comparison = Comparison {
        target,
        bench,
        rows,
        failing_ops,
        culprit,
        unmatched_target,
        without_counterpart: facts.without_counterpart.len(),
        unmatched_bench: unmatched_bench
            .into_iter()
            .filter(|&t| options.filter.keeps(&bi.ops[bi.tensors[t].op()]))
            .collect(),
        filter: options.filter.clone(),
        refused: None,
        warnings,
        problems,
        api_calls,
    };
    (comparison, facts)
}

/// Target tensor `t`'s hash `h`, computed by a read, into `computed` (by tensor; allocated on the first).
fn remember(computed: &mut Vec<Option<u64>>, ti: &Index, t: TensorId, h: u64) {
    computed.resize(ti.tensors.len(), None);
    computed[t] = Some(h);
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
