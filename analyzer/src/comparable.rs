//! Whether two runs can answer the question asked of them, checked before any verdict.
//!
//! - `diff` asks "is this configuration reproducible?": only runs of one configuration can answer, so
//!   [`configuration_differences`] lists what differs (settings the capture recorded, the op sequence,
//!   dtypes, shapes) and `diff` refuses when anything does: a bf16 run against an fp32 one differs
//!   everywhere, and calling that nondeterminism is wrong.
//! - `compare` asks "where does the target leave the benchmark?": [`different_model`] refuses runs of
//!   different models (most pairs differ in shape, or the op sequences do not align),
//!   [`execution_modes_differ`] refuses eager kernels against graph-mode ops (no name ties them, and a
//!   culprit over guessed pairs may be the wrong op), [`kernel_counters_differ`] two eager runs whose kernel
//!   types part (their per-type counters name other kernels from there on), and [`swapped_sides`] warns
//!   when the target and the benchmark look exchanged.

use crate::api_matching::is_api_level;
use crate::filter::Filter;
use crate::index::{Index, IndexedOp, Io, OpId};
use crate::matching::{MatchKind, Matching};
use crate::problems::ProblemKind;
use crate::sources::Source;
use accutrace_formats::tensor::element_count;
use std::collections::{BTreeMap, BTreeSet, HashSet};

mod configuration;
use configuration::{by_step, is_subsequence, sequence};
pub use configuration::{
    configuration_differences, not_one_configuration, not_one_configuration_at, steps_alike_hint,
    ConfigurationDifference, ConfigurationFold,
};

/// Mismatches listed in a refusal before "...".
const LISTED: usize = 3;

/// Why the target and the benchmark are not runs of one model, when they are not: most matched pairs
/// differ in element count, or most of the target's outputs (of the ops `filter` keeps, in steps and ranks
/// the benchmark has) found no counterpart at all (the op sequences do not align). `None` when they look
/// like one model.
pub fn different_model(
    target: &Index,
    bench: &Index,
    matching: &Matching,
    filter: &Filter,
) -> Option<String> {
    let keep = |t: usize| filter.keeps(&target.ops[target.tensors[t].op()]);
    let pairs: Vec<_> = matching.pairs.iter().filter(|p| keep(p.target())).collect();
    // Untrusted dims: a product past 64 bits has no count (checked, never wrapped).
    let count = |shape: &[u64]| element_count(shape);
    let reshaped: Vec<String> = pairs
        .iter()
        .filter(|p| count(&target.tensors[p.target()].shape) != count(&bench.tensors[p.bench()].shape))
        .map(|p| {
            let (t, b) = (target.tensor_label(p.target()), bench.tensor_label(p.bench()));
            let bench_name = if b == t { String::new() } else { format!("{b} ") };
            format!(
                "{t} is {:?} in the target and {bench_name}{:?} in the benchmark",
                target.tensors[p.target()].shape,
                bench.tensors[p.bench()].shape
            )
        })
        .collect();
    // Only where the benchmark has the step and rank at all: fewer steps or ranks are not another model.
    let places: std::collections::HashSet<(u32, u64)> = bench.ops.iter().map(|o| (o.rank, o.step)).collect();
    let in_bench = |t: usize| {
        let op = &target.ops[target.tensors[t].op()];
        places.contains(&(op.rank, op.step))
    };
    let outputs =
        |ids: &mut dyn Iterator<Item = usize>| ids.filter(|&t| target.tensors[t].io == Io::Output).count();
    let selected_outputs = outputs(&mut (0..target.tensors.len()).filter(|&t| keep(t) && in_bench(t)));
    // Kernels against API calls: a kernel output inside a call (a linear's MatMul before its BiasAdd) has no
    // pair of its own but is placed; what no call covers is what `unmatched_target` lists.
    let matched_outputs = if matching.api_calls.is_empty() {
        outputs(&mut pairs.iter().map(|p| p.target()))
    } else {
        let unplaced =
            outputs(&mut matching.unmatched_target.iter().copied().filter(|&t| keep(t) && in_bench(t)));
        selected_outputs.saturating_sub(unplaced)
    };
    let why = if !pairs.is_empty() && reshaped.len() * 2 > pairs.len() {
        let first: Vec<&str> = reshaped.iter().take(LISTED).map(String::as_str).collect();
        format!(
            "{} of {} matched tensor pairs differ in shape: {}",
            reshaped.len(),
            pairs.len(),
            first.join("; ")
        )
    } else if selected_outputs > 0 && matched_outputs * 2 < selected_outputs && matching.unaligned_target > 0
    {
        // Not another model for all we know: the alignment gave up on steps too large or too different.
        return Some(format!(
            "only {matched_outputs} of the target's {selected_outputs} outputs have a counterpart in the \
             benchmark, and whether the other runs are of one model is unknown: {} target tensors were left \
             unaligned, in steps too large or too different to align by execution order (a warning names \
             each). Pass --mapping with `target_name,bench_name` lines to pair them",
            matching.unaligned_target
        ));
    } else if selected_outputs > 0 && matched_outputs * 2 < selected_outputs {
        let unmatched: Vec<String> = matching
            .unmatched_target
            .iter()
            .filter(|&&t| keep(t) && in_bench(t) && target.tensors[t].io == Io::Output)
            .take(LISTED)
            .map(|&t| target.tensor_label(t))
            .collect();
        format!(
            "only {matched_outputs} of the target's {selected_outputs} outputs have a counterpart in the benchmark \
             (by name, --mapping, fusion provenance or execution order): the op sequences do not align; \
             without one: {}",
            unmatched.join(", ")
        )
    } else {
        return None;
    };
    Some(format!(
        "these are not runs of the same model: {why}. Compare a run with a benchmark of the same model (or \
         pass --mapping for ops that only have other names)"
    ))
}

/// Whether an op is named as eager frameworks name kernels: its type and a per-type counter
/// (`GatherV2_0`, `MatMulV2_13`), with no place in a graph.
fn names_kernel_by_type(op: &IndexedOp) -> bool {
    op.name.rsplit_once('_').is_some_and(|(op_type, counter)| {
        !counter.is_empty()
            && counter.bytes().all(|b| b.is_ascii_digit())
            && op_type.eq_ignore_ascii_case(&op.op_type)
    })
}

/// Whether most of `ops` are eager kernels named by type and counter.
pub(crate) fn mostly_kernels_by_type(ops: &[&IndexedOp]) -> bool {
    let by_type = ops.iter().filter(|o| names_kernel_by_type(o)).count();
    !ops.is_empty() && by_type * 2 > ops.len()
}

/// Where two eager runs' kernel types part in a step ([`kernel_types_part`]).
pub(crate) struct KernelTypesPart {
    /// The position in `a` of the first pair contradicted: from it on, names may pair other kernels.
    pub from: usize,
    /// What the two sides launched there, in words naming `sides`.
    pub what: String,
}

/// Two ops paired in one step and rank: the position of each in its run's step, and whether their names
/// paired them (else a user's `--mapping` did).
pub(crate) type Anchor = (usize, usize, bool);

/// Where two eager runs' kernel types in execution order part, within one step and rank: at the first
/// pair by name that the type sequences contradict. A kernel's name is its type and a per-type counter
/// (`MatMulV2_2`), so it names the same kernel on both sides only while both launched the same types
/// before it; past a kernel one run fused and the other did not, the counters count other kernels.
///
/// `anchors` are the pairs (position in `a`, position in `b`, made by name) of the step, in any order;
/// a pair that is not by name (a user's `--mapping`) is the user's word and is never contradicted, but the
/// kernels between it and the next pair are still compared. Between two consecutive pairs both sides
/// must have launched the same types (with `holes`, a run that lost records inside a step: one side's
/// types in the other's, in order), and the pairs must keep their order on both sides. What comes before
/// the first pair is not compared: a ring capture that deleted its oldest segments holds the end of a step
/// only, and the counters of what it kept are still the framework's.
pub(crate) fn kernel_types_part(
    a: &[(&str, &str)],
    b: &[(&str, &str)],
    mut anchors: Vec<Anchor>,
    holes: bool,
    sides: [&str; 2],
) -> Option<KernelTypesPart> {
    anchors.sort_unstable();
    anchors.dedup_by_key(|&mut (i, _, _)| i);
    fn types<'s>(seq: &[(&str, &'s str)], range: std::ops::Range<usize>) -> Vec<&'s str> {
        seq[range].iter().map(|&(_, op_type)| op_type).collect()
    }
    // A run of one type reads once, with its count (`FusedMatMulBiasGelu x2`).
    let show = |list: &[&str]| {
        let mut runs: Vec<(&str, usize)> = Vec::new();
        for &op_type in list {
            match runs.last_mut() {
                Some((last, n)) if *last == op_type => *n += 1,
                _ => runs.push((op_type, 1)),
            }
        }
        let words: Vec<String> = runs
            .iter()
            .take(LISTED)
            .map(|&(op_type, n)| if n == 1 { op_type.to_string() } else { format!("{op_type} x{n}") })
            .collect();
        match runs.len() {
            0 => "nothing".to_string(),
            n if n <= LISTED => words.join(", "),
            _ => format!("{}, ... ({} kernels)", words.join(", "), list.len()),
        }
    };
    for window in anchors.windows(2) {
        let [(pa, pb, _), (i, j, by_name)] = [window[0], window[1]];
        if !by_name {
            continue;
        }
        let name = a[i].0;
        if j <= pb {
            return Some(KernelTypesPart {
                from: i,
                what: format!("{name} comes after {} in {} and before it in {}", a[pa].0, sides[0], sides[1]),
            });
        }
        let (between_a, between_b) = (types(a, pa + 1..i), types(b, pb + 1..j));
        let alike = between_a == between_b
            || (holes && (is_subsequence(&between_a, &between_b) || is_subsequence(&between_b, &between_a)));
        if !alike {
            return Some(KernelTypesPart {
                from: i,
                what: format!(
                    "between {} and {name} {} launched {} and {} {}",
                    a[pa].0,
                    sides[0],
                    show(&between_a),
                    sides[1],
                    show(&between_b)
                ),
            });
        }
    }
    None
}

/// Why the name pairs of two eager runs cannot be trusted, when they cannot: in a step and rank both hold,
/// the kernel types in execution order part before a pair made by name (`kernel_types_part`), so from
/// there on one name may be another kernel on each side (the other fused a MatMul+BiasAdd+Gelu into one
/// kernel, or another model), whether or not the shapes tell (d_ff == d_model, two identical layers). The
/// whole step is looked at, even where `filter` keeps some ops only: a selection of one kernel hides the
/// fusion before it. Refused rather than re-paired by aligning the types: an alignment of repeated layers'
/// kernels is a guess too, and the fused kernel has no counterpart to compare. `None` for runs of the same
/// kernel types (every step both hold), where no pair the filter keeps lies past a parting, or where
/// `--mapping` tied the shifted kernels.
pub fn kernel_counters_differ(
    target: &Index,
    bench: &Index,
    matching: &Matching,
    filter: &Filter,
) -> Option<String> {
    let (target_ops, bench_ops): (Vec<&IndexedOp>, Vec<&IndexedOp>) = (
        target.ops.iter().filter(|o| filter.keeps(o)).collect(),
        bench.ops.iter().filter(|o| filter.keeps(o)).collect(),
    );
    if !mostly_kernels_by_type(&target_ops)
        || !mostly_kernels_by_type(&bench_ops)
        || is_api_level(target)
        || is_api_level(bench)
    {
        return None;
    }
    let lost = |i: &Index| i.problems.iter().any(|p| p.kind == ProblemKind::Incomplete);
    let holes = lost(target) || lost(bench);
    // Each op's step and rank, and its position there (every op, not only those the filter keeps; none
    // for a sub-task's copy of an op, which `by_step` leaves out).
    let positions = |index: &Index| {
        let steps = by_step(index, &Filter::default());
        let mut at = vec![None; index.ops.len()];
        for (&(rank, step), ops) in &steps {
            for (position, &o) in ops.iter().enumerate() {
                at[o] = Some((rank, step, position));
            }
        }
        (steps, at)
    };
    let ((target_steps, target_at), (bench_steps, bench_at)) = (positions(target), positions(bench));
    let mut anchors: BTreeMap<(u32, u64), Vec<Anchor>> = BTreeMap::new();
    for p in matching.pairs.iter().filter(|p| matches!(p.how, MatchKind::Exact | MatchKind::Mapping)) {
        let (Some((rank, step, i)), Some((bench_rank, bench_step, j))) =
            (target_at[target.tensors[p.target()].op()], bench_at[bench.tensors[p.bench()].op()])
        else {
            continue;
        };
        if (rank, step) == (bench_rank, bench_step) {
            anchors.entry((rank, step)).or_default().push((i, j, p.how == MatchKind::Exact));
        }
    }
    let by_name: Vec<_> = matching
        .pairs
        .iter()
        .filter(|p| p.how == MatchKind::Exact && filter.keeps(&target.ops[target.tensors[p.target()].op()]))
        .collect();
    // Each step's parting (the first step's is told), and the pairs by name the verdict would use past one.
    let (mut first, mut past_partings) = (None, 0);
    for (place @ (rank, step), anchors) in anchors {
        let (ops_t, ops_b) = (&target_steps[&place], &bench_steps[&place]);
        let (seq_t, seq_b) = (sequence(target, ops_t), sequence(bench, ops_b));
        let Some(part) = kernel_types_part(&seq_t, &seq_b, anchors, holes, SIDES) else { continue };
        let past: Vec<_> = by_name
            .iter()
            .filter(|p| {
                matches!(target_at[target.tensors[p.target()].op()], Some((r, s, i)) if (r, s) == place && i >= part.from)
            })
            .collect();
        past_partings += past.len();
        if first.is_some() || past.is_empty() {
            continue;
        }
        let op = &target.ops[ops_t[part.from]];
        let count =
            |ops: &[OpId], index: &Index| ops.iter().filter(|&&o| index.ops[o].op_type == op.op_type).count();
        let (t, b) = (count(ops_t, target), count(ops_b, bench));
        let counts = match t == b {
            true => String::new(),
            false => format!(
                ", and the step has {t} {} kernels in the target and {b} in the benchmark",
                op.op_type
            ),
        };
        let shapes = past
            .iter()
            .find(|p| target.tensors[p.target()].shape != bench.tensors[p.bench()].shape)
            .map_or(String::new(), |p| {
                format!(
                    " ({} is {:?} in the target and {:?} in the benchmark)",
                    target.tensor_label(p.target()),
                    target.tensors[p.target()].shape,
                    bench.tensors[p.bench()].shape
                )
            });
        first = Some(format!(
            "the target and the benchmark both hold eager kernels, named by type and a counter (like {}), \
             but the kernel types in execution order part: in step {step} rank {rank}, {}{counts} (one run \
             fused ops the other did not, or another model), so from {} on one name may be another kernel on \
             each side{shapes}",
            op.name, part.what, op.name
        ));
    }
    Some(format!(
        "{}: {past_partings} of the {} pairs made by name come past such a place and may pair different ops, \
         and a culprit found over them may be the wrong op. Record both runs with the same fusion setting, or \
         pass --mapping with `target_name,bench_name` lines for the kernels that shifted",
        first?,
        by_name.len()
    ))
}

/// How a refusal of `compare` names its two sides.
const SIDES: [&str; 2] = ["the target", "the benchmark"];

/// Why the pairs of an eager run (single-op kernels named by type and counter, `GatherV2_0`) and a
/// graph-mode run (ops named by their place in the graph, `model/embedding/GatherV2`) cannot be trusted,
/// when one side is each (most of the ops `filter` keeps) and names tie at most half of the pairs: the rest
/// were guessed from execution order, op type and shape, and a kernel fused on one side only has no
/// counterpart, so the culprit search skips the op where the difference began and blames a later one.
/// `None` for runs recorded the same way, against API calls (msprobe: their own alignment), or where
/// `--mapping` (or names) tie most pairs.
pub fn execution_modes_differ(
    target: &Index,
    bench: &Index,
    matching: &Matching,
    filter: &Filter,
) -> Option<String> {
    let (target_ops, bench_ops): (Vec<&IndexedOp>, Vec<&IndexedOp>) = (
        target.ops.iter().filter(|o| filter.keeps(o)).collect(),
        bench.ops.iter().filter(|o| filter.keeps(o)).collect(),
    );
    let (eager_target, eager_bench) =
        (mostly_kernels_by_type(&target_ops), mostly_kernels_by_type(&bench_ops));
    if eager_target == eager_bench || is_api_level(target) || is_api_level(bench) {
        return None;
    }
    let pairs: Vec<_> = matching
        .pairs
        .iter()
        .filter(|p| filter.keeps(&target.ops[target.tensors[p.target()].op()]))
        .collect();
    let guessed = pairs.iter().filter(|p| p.how == MatchKind::Order).count();
    if (pairs.len() - guessed) * 2 > pairs.len() {
        return None;
    }
    let (eager_side, eager_ops, other_side, other_ops) = match eager_target {
        true => ("the target", &target_ops, "the benchmark", &bench_ops),
        false => ("the benchmark", &bench_ops, "the target", &target_ops),
    };
    let example = |ops: &[&IndexedOp], kernels: bool| {
        ops.iter().find(|o| names_kernel_by_type(o) == kernels).map_or(String::new(), |o| o.name.to_string())
    };
    let in_graph = other_ops.iter().filter(|o| o.name.contains('/')).count() * 2 > other_ops.len();
    let other = match in_graph {
        true => "graph-mode ops, named by their place in the graph",
        false => "ops named otherwise",
    };
    let paired = match pairs.len() {
        0 => "and execution order, op types and shapes paired none of them".to_string(),
        n => format!(
            "so {} pairs were only guessed from execution order, op types and shapes, and a kernel fused on \
             one side only has no counterpart: a culprit found over these pairs may be the wrong op",
            if guessed == n { format!("all {n}") } else { format!("{guessed} of the {n}") }
        ),
    };
    Some(format!(
        "{eager_side} holds eager kernels, named by type and a counter (like {}), and {other_side} {other} \
         (like {}): no name ties one to the other, {paired}. The two were recorded in different \
         execution modes: record the benchmark the way the target ran (both eager, or both in graph mode), \
         compare an eager run with an msprobe dump of the same model (kernels against API calls), or pass \
         --mapping with `target_name,bench_name` lines",
        example(eager_ops, true),
        example(other_ops, false)
    ))
}

/// A float dtype's width in bits (fp16/bf16 16, fp32 32, ...), `None` for other types.
fn float_bits(dtype: accutrace_formats::DType) -> Option<u32> {
    dtype.is_float().then(|| dtype.bits()).flatten()
}

/// Of the matched float pairs whose widths differ, how many are narrower on the benchmark's side and how
/// many on the target's: what [`swapped_sides`] weighs (counted apart so that windows of runs add them).
pub fn narrower_sides(ti: &Index, bi: &Index, matching: &Matching) -> [usize; 2] {
    let (mut narrower_bench, mut narrower_target) = (0usize, 0usize);
    for p in &matching.pairs {
        if let (Some(t), Some(b)) =
            (float_bits(ti.tensors[p.target()].dtype), float_bits(bi.tensors[p.bench()].dtype))
        {
            narrower_bench += usize::from(b < t);
            narrower_target += usize::from(t < b);
        }
    }
    [narrower_bench, narrower_target]
}

/// Why the target and the benchmark look exchanged, when they do: the benchmark is an NPU dump (a
/// capture or a CANN dump) while the target is a framework-level dump (.npy, msprobe), or most matched
/// float pairs with different widths are narrower on the benchmark side (fp16/bf16 against fp32:
/// `narrower`, from [`narrower_sides`]). The sentence says how to swap them.
pub fn swapped_sides(target: &dyn Source, bench: &dyn Source, narrower: [usize; 2]) -> Option<String> {
    let npu_dump = |kind: &str| kind == "capture" || kind == "cann-dump";
    let host_dump = |kind: &str| kind == "npy" || kind == "msprobe";
    let [narrower_bench, narrower_target] = narrower;
    let why = if npu_dump(bench.kind()) && host_dump(target.kind()) {
        format!(
            "the benchmark is an NPU dump ({}) and the target a framework dump ({})",
            bench.kind(),
            target.kind()
        )
    } else if narrower_bench > narrower_target {
        format!(
            "{narrower_bench} matched tensors have lower precision in the benchmark than in the target \
             (fp16/bf16 against fp32)"
        )
    } else {
        return None;
    };
    Some(format!(
        "the target and the benchmark look swapped: {why}. The run under suspicion comes first: \
         `analyzer compare {} {}`",
        bench.root().display(),
        target.root().display()
    ))
}

/// When the two runs do not hold the same ranks (among the ops `filter` keeps): the ranks each holds alone,
/// and the selection that compares the ranks both hold. Their tensors are listed as unmatched, never
/// compared: an 8-rank NPU job against a one-GPU benchmark compares rank 0 only, and the report says so.
pub fn ranks_on_one_side(target: &Index, bench: &Index, filter: &Filter) -> Option<String> {
    let ranks = |index: &Index| -> BTreeSet<u64> {
        index.ops.iter().filter(|o| filter.keeps(o)).map(|o| u64::from(o.rank)).collect()
    };
    on_one_side("rank", &ranks(target), &ranks(bench))
}

/// [`ranks_on_one_side`] for steps: a target recorded over 3 steps against a benchmark of one step
/// compares that step only, and the report leads with it rather than with a PASS over one step in three.
pub fn steps_on_one_side(target: &Index, bench: &Index, filter: &Filter) -> Option<String> {
    let steps = |index: &Index| -> BTreeSet<u64> {
        index.ops.iter().filter(|o| filter.keeps(o)).map(|o| o.step).collect()
    };
    on_one_side("step", &steps(target), &steps(bench))
}

/// The target tensors (of those `unmatched` lists) that lie in a step and rank the benchmark holds too, and
/// that no fusion explains: a benchmark that lost an op's files, or a run of another layer count, leaves
/// them, and a verdict over the matched pairs says nothing of them. Steps and ranks one side holds alone
/// have their own warning ([`steps_on_one_side`], [`ranks_on_one_side`]); an op the benchmark fused into
/// a kernel, and the inputs of a target's fused kernel, have no counterpart of their own.
pub fn without_counterpart(
    target: &Index,
    bench: &Index,
    unmatched: &[usize],
    filter: &Filter,
) -> Vec<usize> {
    let places = |index: &Index| -> HashSet<(u32, u64)> {
        index.ops.iter().filter(|o| filter.keeps(o)).map(|o| (o.rank, o.step)).collect()
    };
    let in_bench = places(bench);
    // An op is fused when an output names another op as its origin.
    let origins = |index: &Index, o: OpId| -> Vec<String> {
        index.ops[o]
            .original_names(index)
            .into_iter()
            .filter(|n| *n != index.ops[o].name)
            .map(String::from)
            .collect()
    };
    let fused_in_bench: HashSet<String> = (0..bench.ops.len()).flat_map(|o| origins(bench, o)).collect();
    unmatched
        .iter()
        .copied()
        .filter(|&t| {
            let o = target.tensors[t].op();
            let op = &target.ops[o];
            in_bench.contains(&(op.rank, op.step))
                && !fused_in_bench.contains(op.name.as_str())
                && origins(target, o).is_empty()
        })
        .collect()
}

/// The warning [`without_counterpart`]'s tensors get, before the verdict: how many, the first, and that
/// the verdict covers the matched pairs only.
pub fn without_counterpart_warning(target: &Index, tensors: &[usize], matched: usize) -> Option<String> {
    let &first = tensors.first()?;
    let op = &target.ops[target.tensors[first].op()];
    let ops: HashSet<OpId> = tensors.iter().map(|&t| target.tensors[t].op()).collect();
    let first = format!("step {} rank {}: {}", op.step, op.rank, target.tensor_label(first));
    Some(without_counterpart_text([tensors.len(), ops.len(), matched], &first))
}

/// [`without_counterpart_warning`]'s words, of `[tensors, ops, matched]` counts and the first tensor
/// (`step S rank R: label`).
pub fn without_counterpart_text(counts: [usize; 3], first: &str) -> String {
    let [tensors, ops, matched] = counts;
    format!(
        "{tensors} target tensors ({ops} ops) in steps and ranks the benchmark holds have no counterpart in it \
         (first: {first}): they are not compared, and the verdict covers the {matched} matched pairs only (the \
         benchmark lacks these ops: files lost, an op fused there, or another model)"
    )
}

/// The `what`s (rank, step) each side holds alone, and the `--what` selection of those both hold.
pub fn on_one_side(what: &str, t: &BTreeSet<u64>, b: &BTreeSet<u64>) -> Option<String> {
    // A few named one by one, more as ranges ("1-99").
    const NAMED: usize = 8;
    let list = |side: &str, values: Vec<u64>| -> Option<String> {
        let names = match values.len() {
            0 => return None,
            n if n <= NAMED => values.iter().map(u64::to_string).collect::<Vec<_>>().join(", "),
            _ => crate::filter::ranges(&values),
        };
        Some(match values.len() {
            1 => format!("the {side}'s {what} {names} has"),
            _ => format!("the {side}'s {what}s {names} have"),
        })
    };
    let alone: Vec<String> = [
        list("target", t.difference(b).copied().collect()),
        list("benchmark", b.difference(t).copied().collect()),
    ]
    .into_iter()
    .flatten()
    .map(|who| format!("{who} no counterpart on the other side"))
    .collect();
    if alone.is_empty() {
        return None;
    }
    let both: Vec<u64> = t.intersection(b).copied().collect();
    let how = match both.len() {
        0 => format!("no {what} is in both runs"),
        n if n <= NAMED => {
            let selection: Vec<String> = both.iter().map(|v| format!("--{what} {v}")).collect();
            format!("`{}` compares the {what}s both hold", selection.join(" "))
        }
        _ => format!(
            "`--{what} S` for each S in {} compares the {what}s both hold",
            crate::filter::ranges(&both)
        ),
    };
    Some(format!("{}: its tensors are not compared ({how})", alone.join("; ")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::TensorInfo;
    use crate::matching::{match_runs, MatchOptions};
    use accutrace_formats::dump::sanitize_op_name;
    use accutrace_formats::DType;

    /// A run of `ops` (name, output dtype, output shape) in one step.
    fn run(ops: &[(&str, DType, &[u64])]) -> Index {
        let mut index = Index::default();
        for &(name, dtype, shape) in ops {
            let op = index.push_op(name.into(), "T".into(), 0, 0);
            index.push_tensor(TensorInfo::for_test(op, Io::Output, 0, dtype, shape.to_vec()));
        }
        index
    }

    const F16: DType = DType::FLOAT16;

    fn aspects(a: &Index, b: &Index) -> Vec<(&'static str, usize, String)> {
        configuration_differences(a, b, &Filter::default())
            .into_iter()
            .map(|d| (d.aspect, d.count, d.first))
            .collect()
    }

    #[test]
    fn one_configuration_has_no_differences_even_cut_short() {
        let a = run(&[("x", F16, &[2]), ("y", F16, &[2]), ("z", F16, &[2])]);
        assert!(aspects(&a, &a).is_empty());
        // The other run holds only the end, or only the start, of the step.
        assert!(aspects(&a, &run(&[("y", F16, &[2]), ("z", F16, &[2])])).is_empty());
        assert!(aspects(&a, &run(&[("x", F16, &[2])])).is_empty());
    }

    #[test]
    fn precision_shapes_sequence_and_settings_are_named_where_they_differ() {
        let a = run(&[("x", F16, &[2]), ("y", F16, &[2])]);
        let b = run(&[("x", DType::FLOAT, &[2]), ("y", F16, &[3])]);
        assert_eq!(
            aspects(&a, &b),
            [
                (
                    "precision",
                    1,
                    "x.output.0 is FLOAT16 in run 1 and FLOAT in run 2 (step 0 rank 0)".to_string()
                ),
                ("shapes", 1, "y.output.0 is [2] in run 1 and [3] in run 2 (step 0 rank 0)".to_string()),
            ]
        );
        let fused = run(&[("x", F16, &[2]), ("xy", F16, &[2])]);
        assert_eq!(
            aspects(&a, &fused),
            [("op sequence", 1, "step 0 rank 0: op 2 is y [T] in run 1 and xy [T] in run 2".to_string())]
        );
        let (mut s1, mut s2) = (a.clone(), a.clone());
        s1.settings = Some([("HCCL_DETERMINISTIC".to_string(), "TRUE".to_string())].into());
        s2.settings = Some(BTreeMap::new());
        assert_eq!(
            aspects(&s1, &s2),
            [("settings", 1, "HCCL_DETERMINISTIC is \"TRUE\" in run 1 and unset in run 2".to_string())]
        );
        // A source that records no settings is not compared on them.
        assert!(aspects(&s1, &a).is_empty());
    }

    /// Runs whose ops part from step 2 on (one drops an op once its loss scale reaches 1) are no one
    /// configuration, but steps 0-1 hold the same ops: the refusal says `--step 0-1` keeps to them. Not
    /// where another aspect differs too, nor where the first step already differs.
    #[test]
    fn the_steps_before_the_ops_part_are_offered_to_a_step_selection() {
        let steps = |ops_of_step: &dyn Fn(u64) -> Vec<&'static str>| {
            let mut index = Index::default();
            for step in 0..4 {
                for name in ops_of_step(step) {
                    let op = index.push_op(name.into(), "T".into(), step, 0);
                    index.push_tensor(TensorInfo::for_test(op, Io::Output, 0, F16, vec![2]));
                }
            }
            index
        };
        let a = steps(&|_| vec!["x", "scale", "y"]);
        let b = steps(&|step| if step < 2 { vec!["x", "scale", "y"] } else { vec!["x", "y"] });
        let differences = configuration_differences(&a, &b, &Filter::default());
        assert_eq!(differences.len(), 1);
        assert_eq!(differences[0].steps_alike, Some((0, 1)));
        assert_eq!(
            steps_alike_hint(&differences).unwrap(),
            "steps 0-1 hold the same ops in both runs: `--step 0-1` keeps to them"
        );
        let b = steps(&|step| if step < 1 { vec!["x", "scale", "y"] } else { vec!["x", "y"] });
        let one = configuration_differences(&a, &b, &Filter::default());
        assert_eq!(
            steps_alike_hint(&one).unwrap(),
            "step 0 holds the same ops in both runs: `--step 0` keeps to it"
        );
        let b = steps(&|_| vec!["x", "y"]);
        assert_eq!(steps_alike_hint(&configuration_differences(&a, &b, &Filter::default())), None);
        let mut wider = steps(&|step| if step < 2 { vec!["x", "scale", "y"] } else { vec!["x", "y"] });
        wider.tensors[0].dtype = DType::FLOAT;
        let two = configuration_differences(&a, &wider, &Filter::default());
        assert_eq!(two.len(), 2);
        assert_eq!(steps_alike_hint(&two), None, "precision differs too");
    }

    #[test]
    fn another_model_is_told_by_its_shapes_or_by_what_has_no_counterpart() {
        let a = run(&[("x", F16, &[2, 8]), ("y", F16, &[2, 8]), ("z", F16, &[4])]);
        let wider = run(&[("x", F16, &[2, 12]), ("y", F16, &[2, 12]), ("z", F16, &[4])]);
        let why = different_model(
            &a,
            &wider,
            &match_runs(&a, &wider, &MatchOptions::default()),
            &Filter::default(),
        );
        assert!(why.unwrap().contains(
            "2 of 3 matched tensor pairs differ in shape: x.output.0 is [2, 8] in the target and [2, 12]"
        ));
        let other = run(&[("p", F16, &[7]), ("q", F16, &[9]), ("z", F16, &[4])]);
        let why = different_model(
            &a,
            &other,
            &match_runs(&a, &other, &MatchOptions::default()),
            &Filter::default(),
        );
        assert!(why.unwrap().contains("only 1 of the target's 3 outputs have a counterpart"));
        let same = different_model(&a, &a, &match_runs(&a, &a, &MatchOptions::default()), &Filter::default());
        assert_eq!(same, None);
        // Where an alignment gave up (its work or its table spent), what has no counterpart says nothing
        // about the model: the refusal says the answer is unknown, not that the runs differ.
        let gave_up = Matching { unaligned_target: 2, ..match_runs(&a, &other, &MatchOptions::default()) };
        let why = different_model(&a, &other, &gave_up, &Filter::default()).unwrap();
        assert!(
            why.contains("whether the other runs are of one model is unknown: 2 target tensors"),
            "{why}"
        );
        assert!(!why.contains("not runs of the same model"), "{why}");
    }

    /// Eager kernels (`GatherV2_0`) against graph-mode ops (`model/embedding/GatherV2`) pair by execution
    /// order alone: refused, either way round. Runs recorded the same way pair by name, and a mapping that
    /// names every pair ties them: neither is refused.
    #[test]
    fn eager_kernels_against_graph_ops_are_refused_unless_names_tie_them() {
        let ops = |names: &[&str]| {
            let mut index = Index::default();
            for (name, op_type) in names.iter().zip(["GatherV2", "MatMulV2", "MatMulV2"]) {
                let op = index.push_op(name.to_string(), op_type.into(), 0, 0);
                index.push_tensor(TensorInfo::for_test(op, Io::Output, 0, F16, vec![2]));
            }
            index
        };
        let eager = ops(&["GatherV2_0", "MatMulV2_0", "MatMulV2_1"]);
        let graph = ops(&["model/embedding/GatherV2", "model/fc1/MatMul", "model/fc2/MatMul"]);
        let refused = |target: &Index, bench: &Index, options: &MatchOptions| {
            execution_modes_differ(target, bench, &match_runs(target, bench, options), &Filter::default())
        };
        let why = refused(&eager, &graph, &MatchOptions::default()).unwrap();
        assert!(why.starts_with("the target holds eager kernels, named by type and a counter (like GatherV2_0), and the benchmark graph-mode ops, named by their place in the graph (like model/embedding/GatherV2): no name ties one to the other, so all 3 pairs were only guessed"), "{why}");
        let why = refused(&graph, &eager, &MatchOptions::default()).unwrap();
        assert!(why.starts_with("the benchmark holds eager kernels"), "{why}");
        assert_eq!(refused(&eager, &eager, &MatchOptions::default()), None);
        assert_eq!(refused(&graph, &graph, &MatchOptions::default()), None);
        let mapping =
            eager.ops.iter().zip(&graph.ops).map(|(e, g)| (e.name.to_string(), sanitize_op_name(&g.name)));
        let mapped = MatchOptions { mapping: mapping.collect(), ..MatchOptions::default() };
        assert_eq!(refused(&eager, &graph, &mapped), None);
    }

    /// Two eager runs, one fusing fc1's MatMul+Gelu: `MatMulV2_1` is fc2 in one and fc1 in the other.
    /// Refused, either way round; a mapping of the shifted kernel is heard before the names and ties them.
    #[test]
    fn eager_kernels_whose_counters_shifted_are_refused_unless_a_mapping_ties_them() {
        let eager = |kernels: &[(&str, u64)]| {
            let mut index = Index::default();
            for &(name, len) in kernels {
                let op_type = name.rsplit_once('_').unwrap().0;
                let op = index.push_op(name.into(), op_type.into(), 0, 0);
                index.push_tensor(TensorInfo::for_test(op, Io::Output, 0, F16, vec![len]));
            }
            index
        };
        let fused =
            eager(&[("GatherV2_0", 2), ("MatMulV2_0", 4), ("FusedMatMulGelu_0", 8), ("MatMulV2_1", 3)]);
        let unfused = eager(&[
            ("GatherV2_0", 2),
            ("MatMulV2_0", 4),
            ("MatMulV2_1", 8),
            ("Gelu_0", 8),
            ("MatMulV2_2", 3),
        ]);
        let refused = |target: &Index, bench: &Index, options: &MatchOptions| {
            kernel_counters_differ(target, bench, &match_runs(target, bench, options), &Filter::default())
        };
        let why = refused(&fused, &unfused, &MatchOptions::default()).unwrap();
        assert!(
            why.contains("between MatMulV2_0 and MatMulV2_1 the target launched FusedMatMulGelu and the benchmark nothing, and the step has 2 MatMulV2 kernels in the target and 3 in the benchmark"),
            "{why}"
        );
        assert!(why.contains("(MatMulV2_1.output.0 is [3] in the target and [8] in the benchmark)"), "{why}");
        assert!(why.contains("1 of the 3 pairs made by name"), "{why}");
        assert!(refused(&unfused, &fused, &MatchOptions::default()).is_some());
        assert_eq!(refused(&fused, &fused, &MatchOptions::default()), None);
        let mapped = MatchOptions {
            mapping: [("MatMulV2_1".to_string(), "MatMulV2_2".to_string())].into(),
            ..MatchOptions::default()
        };
        let matching = match_runs(&fused, &unfused, &mapped);
        assert!(matching.pairs.iter().any(|p| p.how == MatchKind::Mapping), "{:?}", matching.pairs);
        assert_eq!(refused(&fused, &unfused, &mapped), None);
    }

    /// Eager kernels of (name, type, output length), in one step's execution order.
    fn kernels(ops: &[(&str, &str, u64)]) -> Index {
        let mut index = Index::default();
        for &(name, op_type, len) in ops {
            let op = index.push_op(name.into(), op_type.into(), 0, 0);
            index.push_tensor(TensorInfo::for_test(op, Io::Output, 0, F16, vec![len]));
        }
        index
    }

    fn counters_differ(target: &Index, bench: &Index, filter: &Filter) -> Option<String> {
        kernel_counters_differ(target, bench, &match_runs(target, bench, &MatchOptions::default()), filter)
    }

    /// One run fused fc1's MatMul+Gelu, and every matmul has the same shape (d_ff == d_model): no pair by
    /// name differs in shape, yet `MatMulV2_1` is fc2 in one run and fc1 in the other. The kernel types
    /// part before it: refused, and so is a selection of that kernel alone. A selection of kernels before
    /// the parting is not.
    #[test]
    fn eager_kernels_shifted_with_equal_shapes_are_refused_where_the_types_part() {
        let fused = kernels(&[
            ("GatherV2_0", "GatherV2", 4),
            ("MatMulV2_0", "MatMulV2", 4),
            ("FusedMatMulGelu_0", "FusedMatMulGelu", 4),
            ("MatMulV2_1", "MatMulV2", 4),
            ("Mul_0", "Mul", 1),
        ]);
        let unfused = kernels(&[
            ("GatherV2_0", "GatherV2", 4),
            ("MatMulV2_0", "MatMulV2", 4),
            ("MatMulV2_1", "MatMulV2", 4),
            ("Gelu_0", "Gelu", 4),
            ("MatMulV2_2", "MatMulV2", 4),
            ("Mul_0", "Mul", 1),
        ]);
        let why = counters_differ(&fused, &unfused, &Filter::default()).unwrap();
        assert!(why.contains("the kernel types in execution order part: in step 0 rank 0, between MatMulV2_0 and MatMulV2_1 the target launched FusedMatMulGelu and the benchmark nothing"), "{why}");
        assert!(why.contains("so from MatMulV2_1 on one name may be another kernel on each side: 2 of the 4 pairs made by name come past"), "{why}");
        let why = counters_differ(&unfused, &fused, &Filter::default()).unwrap();
        assert!(why.contains("between MatMulV2_0 and MatMulV2_1 the target launched nothing and the benchmark FusedMatMulGelu"), "{why}");
        let one = Filter { ops: vec!["M?tMulV2_1".into()], ..Filter::default() };
        assert!(counters_differ(&fused, &unfused, &one).unwrap().contains("1 of the 1 pairs made by name"));
        let before = Filter { ops: vec!["GatherV2_0".into(), "M?tMulV2_0".into()], ..Filter::default() };
        assert_eq!(counters_differ(&fused, &unfused, &before), None);
        // Pairs that cross: the same types between the first two, but the benchmark's Mul_0 ran before
        // MatMulV2_0 and the target's after it.
        let crossed = kernels(&[
            ("GatherV2_0", "GatherV2", 4),
            ("Mul_7", "Mul", 1),
            ("MatMulV2_0", "MatMulV2", 4),
            ("Mul_0", "Mul", 1),
        ]);
        let plain =
            kernels(&[("GatherV2_0", "GatherV2", 4), ("Mul_0", "Mul", 1), ("MatMulV2_0", "MatMulV2", 4)]);
        let why = counters_differ(&crossed, &plain, &Filter::default()).unwrap();
        assert!(
            why.contains("Mul_0 comes after MatMulV2_0 in the target and before it in the benchmark"),
            "{why}"
        );
        assert_eq!(counters_differ(&fused, &fused, &Filter::default()), None);
    }

    /// What both runs recorded is compared, not what one lost: a ring capture that holds only the end of a
    /// step (its kernels keep the framework's counters), a capture cut short, and, where a run says it
    /// lost records, kernels missing inside the step, are no parting.
    #[test]
    fn a_step_one_run_recorded_in_part_is_no_parting_of_the_kernel_types() {
        let full = kernels(&[
            ("GatherV2_0", "GatherV2", 4),
            ("MatMulV2_0", "MatMulV2", 4),
            ("Gelu_0", "Gelu", 4),
            ("MatMulV2_1", "MatMulV2", 4),
            ("Mul_0", "Mul", 1),
        ]);
        let end = kernels(&[("Gelu_0", "Gelu", 4), ("MatMulV2_1", "MatMulV2", 4), ("Mul_0", "Mul", 1)]);
        let start = kernels(&[("GatherV2_0", "GatherV2", 4), ("MatMulV2_0", "MatMulV2", 4)]);
        for part in [&end, &start] {
            assert_eq!(counters_differ(part, &full, &Filter::default()), None);
            assert_eq!(counters_differ(&full, part, &Filter::default()), None);
        }
        let mut holed = kernels(&[
            ("GatherV2_0", "GatherV2", 4),
            ("MatMulV2_0", "MatMulV2", 4),
            ("MatMulV2_1", "MatMulV2", 4),
            ("Mul_0", "Mul", 1),
        ]);
        // Unsaid, a kernel missing inside the step may be a fusion: refused.
        assert!(counters_differ(&holed, &full, &Filter::default()).is_some());
        holed.problems.push(crate::problems::InputProblem::incomplete("segment 3 is missing"));
        assert_eq!(counters_differ(&holed, &full, &Filter::default()), None);
        assert_eq!(counters_differ(&full, &holed, &Filter::default()), None);
    }

    #[test]
    fn a_forged_shape_is_counted_without_overflow() {
        let forged = run(&[("x", F16, &[1 << 32, 1 << 32, 1 << 32]), ("y", F16, &[2, 8])]);
        let plain = run(&[("x", F16, &[2, 8]), ("y", F16, &[2, 8])]);
        let matching = match_runs(&forged, &plain, &MatchOptions::default());
        // One of two pairs differs: not "most", and above all no panic on the product of the dims.
        assert_eq!(different_model(&forged, &plain, &matching, &Filter::default()), None);
    }

    #[test]
    fn ranks_held_by_one_side_only_are_named_with_the_selection_that_compares_the_rest() {
        let ranks = |ranks: &[u32]| {
            let mut index = Index::default();
            for &r in ranks {
                index.push_op("x".into(), "T".into(), 0, r);
            }
            index
        };
        let (four, one) = (ranks(&[0, 1, 2, 3]), ranks(&[0]));
        assert_eq!(ranks_on_one_side(&four, &four, &Filter::default()), None);
        assert_eq!(
            ranks_on_one_side(&four, &one, &Filter::default()).as_deref(),
            Some(
                "the target's ranks 1, 2, 3 have no counterpart on the other side: its tensors are not \
                 compared (`--rank 0` compares the ranks both hold)"
            )
        );
        let why = ranks_on_one_side(&one, &ranks(&[1]), &Filter::default()).unwrap();
        assert!(why.contains("target's rank 0 has") && why.contains("benchmark's rank 1 has"), "{why}");
        assert!(why.contains("no rank is in both runs"), "{why}");
        // Selected away: nothing left to say.
        let rank0 = Filter { ranks: vec![0], ..Filter::default() };
        assert_eq!(ranks_on_one_side(&four, &one, &rank0), None);
    }

    #[test]
    fn steps_held_by_one_side_only_are_named_with_the_selection_that_compares_the_rest() {
        let steps = |steps: std::ops::Range<u64>| {
            let mut index = Index::default();
            for s in steps {
                index.push_op("x".into(), "T".into(), s, 0);
            }
            index
        };
        let (three, one) = (steps(0..3), steps(0..1));
        assert_eq!(steps_on_one_side(&three, &three, &Filter::default()), None);
        assert_eq!(
            steps_on_one_side(&three, &one, &Filter::default()).as_deref(),
            Some(
                "the target's steps 1, 2 have no counterpart on the other side: its tensors are not \
                 compared (`--step 0` compares the steps both hold)"
            )
        );
        let why = steps_on_one_side(&steps(0..1), &steps(1..2), &Filter::default()).unwrap();
        assert!(why.contains("target's step 0 has") && why.contains("benchmark's step 1 has"), "{why}");
        assert!(why.contains("no step is in both runs"), "{why}");
        // Many steps read as ranges.
        let why = steps_on_one_side(&steps(0..100), &steps(0..50), &Filter::default()).unwrap();
        assert!(why.contains("steps 50-99 have") && why.contains("`--step S` for each S in 0-49"), "{why}");
        // Selected away: nothing left to say.
        let step0 = Filter { steps: vec![0], ..Filter::default() };
        assert_eq!(steps_on_one_side(&three, &one, &step0), None);
    }
}
