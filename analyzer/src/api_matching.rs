//! Kernels against API calls: an eager NPU run captures kernels (`MatMulV2_12`), while the benchmark a
//! PyTorch user has is an msprobe dump of API calls (`Functional.linear.3.forward`), one call launching one
//! or more kernels. Names say nothing across the two; execution order, shapes, dtypes and statistics do.
//!
//! Per rank and step, the API calls' output tensors (in call order) are aligned with the kernels (in
//! execution order): an API output pairs with an output of one kernel of the same element count and kind
//! (float or not), kernels never go backwards, and the alignment matches as many API outputs as it can,
//! then prefers the kernel outputs whose statistics (mean, L2 norm, max, min) are closest. Several API
//! outputs may land on one kernel (a fused kernel computes what two calls return). An API call's kernels
//! are those after the previous call's last matched kernel, up to its own last one. What cannot be placed
//! is said: API outputs no kernel matched, and kernels that belong to no call (an optimizer whose internal
//! calls the API dump does not list).

use crate::index::{Index, Io, OpId, TensorId};
use crate::sources::Source;
use crate::threads::{in_flight, tensor_bytes, InFlight};
use accutrace_formats::dtype::Kind;
use accutrace_formats::stats::TensorStats;
use std::collections::{BTreeMap, HashMap, HashSet};

mod table;

use table::{Move, Table};

/// The most bytes the alignment's table may hold at once (one block's moves, checkpoints, two rows of
/// totals; [`table`]): half of #18's 64 MiB, the rest for the index and the compared pairs. Was the whole
/// table, 2 bytes a cell, up to 256 MB.
const TABLE_BYTES: usize = 32 << 20;

/// The most cells one rank and step may take, a bound on time: each fill of the table costs about 10 ns a
/// cell, and a table past [`TABLE_BYTES`] whole is filled two to four times. Beyond it, or beyond what
/// [`TABLE_BYTES`] can hold, that step is not aligned and the comparison says so.
const MAX_CELLS: usize = 1_000_000_000;

/// Kernels with at most this many outputs are aligned exactly (the set of outputs taken is a bit mask).
const MASK_OUTPUTS: usize = 6;

/// One API call of the benchmark and the target kernels that implement it.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ApiCall {
    /// The benchmark op (the API call).
    pub bench_op: OpId,
    /// Target ops (kernels), in execution order.
    pub kernels: Vec<OpId>,
}

/// What the alignment found.
#[derive(Clone, Debug, Default)]
pub struct KernelAlignment {
    /// (target tensor, bench tensor).
    pub pairs: Vec<(TensorId, TensorId)>,
    pub calls: Vec<ApiCall>,
    /// Target output tensors of kernels that belong to no call.
    pub unplaced_target: Vec<TensorId>,
    /// Bench output tensors no kernel matched.
    pub unplaced_bench: Vec<TensorId>,
    /// Warnings: the steps too large to align (their tensors are all unplaced).
    pub warnings: Vec<String>,
    /// Target tensors of those steps, left unplaced for their size rather than for lack of a counterpart.
    pub unaligned_target: usize,
}

/// Whether an op name is an msprobe API call: `{type}.{api}.{call}.{forward|backward}`.
fn is_api_name(name: &str) -> bool {
    let parts: Vec<&str> = name.split('.').collect();
    parts.len() >= 4
        && matches!(parts[parts.len() - 1], "forward" | "backward")
        && parts[parts.len() - 2].bytes().all(|b| b.is_ascii_digit())
}

/// Whether an index records API calls (most of its ops are named so).
pub fn is_api_level(index: &Index) -> bool {
    let api = index.ops.iter().filter(|o| is_api_name(&o.name)).count();
    !index.ops.is_empty() && api * 2 >= index.ops.len()
}

/// What the alignment weighs of an output tensor, read once a step rather than at every cell of every
/// fill of the table (#18: reading them there was two thirds of the alignment's time).
#[derive(Clone, Copy)]
struct Weighed {
    elements: u64,
    /// Float or complex.
    float: bool,
    /// The shape, numbered: equal numbers, equal shapes.
    shape: u32,
    /// Mean, L2 norm, max, min.
    stats: Option<[f64; 4]>,
}

/// The tensors' [`Weighed`], their shapes numbered through `shapes`.
fn weighed<'i>(index: &'i Index, ids: &[TensorId], shapes: &mut HashMap<&'i [u64], u32>) -> Vec<Weighed> {
    ids.iter()
        .map(|&t| {
            let tensor = &index.tensors[t];
            let next = shapes.len() as u32;
            Weighed {
                elements: tensor.shape.iter().product(),
                float: matches!(tensor.dtype.kind(), Kind::Float | Kind::Complex),
                shape: *shapes.entry(&tensor.shape[..]).or_insert(next),
                stats: index.stats(t).map(|s| [s.mean, s.l2_norm, s.max, s.min]),
            }
        })
        .collect()
}

/// How alike two tensors' statistics are, 0..1 (0 when either has none).
fn similarity(a: Option<[f64; 4]>, b: Option<[f64; 4]>) -> f64 {
    let (Some(a), Some(b)) = (a, b) else { return 0.0 };
    let close = |x: f64, y: f64| -> f64 {
        if !x.is_finite() || !y.is_finite() {
            return if x == y || (x.is_nan() && y.is_nan()) { 1.0 } else { 0.0 };
        }
        let scale = x.abs().max(y.abs()).max(1e-6);
        1.0 - ((x - y).abs() / scale).min(1.0)
    };
    (close(a[0], b[0]) + close(a[1], b[1]) + close(a[2], b[2]) + close(a[3], b[3])) / 4.0
}

/// The index of `source` with statistics for every output tensor that has none (a CANN dump tree is
/// indexed from its headers alone), read from the tensors: the alignment weighs statistics. `None` when
/// nothing is missing. A tensor that cannot be read keeps none (the comparison reports it). Tensors are read
/// as many at once as `limits` lets pairs be measured ([`in_flight`]).
pub fn with_output_stats(source: &dyn Source, limits: InFlight) -> Option<Index> {
    let index = source.index();
    let missing: Vec<TensorId> = (0..index.tensors.len())
        .filter(|&t| {
            let info = &index.tensors[t];
            info.io == Io::Output && !info.has_stats() && info.has_data
        })
        .collect();
    if missing.is_empty() {
        return None;
    }
    let size = |k: usize| tensor_bytes(&index.tensors[missing[k]]);
    let stats: Vec<(TensorId, Option<TensorStats>)> =
        in_flight(limits, missing.len(), size, Vec::new, |values, k| {
            let t = missing[k];
            let read = source.read_values(t, values);
            (t, read.ok().map(|()| TensorStats::of_f32(values, index.tensors[t].dtype)))
        });
    let mut filled = index.clone();
    for (t, s) in stats {
        filled.set_stats(t, s);
    }
    Some(filled)
}

/// Aligns the target's kernels with the benchmark's API calls (module docs). `target_left`/`bench_left`:
/// the tensors no name matched (output tensors are aligned; target inputs are left alone).
pub fn align_kernels_to_apis(
    target: &Index,
    bench: &Index,
    target_left: &[TensorId],
    bench_left: &[TensorId],
) -> KernelAlignment {
    let mut result = KernelAlignment::default();
    let copies = sub_task_copies(target);
    let own: Vec<TensorId> = target_left.iter().copied().filter(|t| !copies.contains_key(t)).collect();
    let group = |index: &Index, ids: &[TensorId]| {
        let mut groups: BTreeMap<(u32, u64), Vec<TensorId>> = BTreeMap::new();
        for &t in ids.iter().filter(|&&t| index.tensors[t].io == Io::Output) {
            let op = &index.ops[index.tensors[t].op()];
            groups.entry((op.rank, op.step)).or_default().push(t);
        }
        for list in groups.values_mut() {
            list.sort_by_key(|&t| (index.ops[index.tensors[t].op()].order, index.tensors[t].index, t));
        }
        groups
    };
    let (targets, mut benches) = (group(target, &own), group(bench, bench_left));
    for (key, t_list) in &targets {
        let b_list = benches.remove(key).unwrap_or_default();
        if !align_step(target, bench, t_list, &b_list, &mut result) {
            result.unaligned_target += t_list.len();
            result.warnings.push(format!(
                "rank {} step {}: {} API outputs against {} kernel outputs are too many to align (the table \
                 would pass {MAX_CELLS} cells or {} MiB): none of them is compared; compare against a benchmark \
                 dumped at kernel level for this step",
                key.0,
                key.1,
                b_list.len(),
                t_list.len(),
                TABLE_BYTES >> 20
            ));
        }
    }
    result.unplaced_bench.extend(benches.into_values().flatten());
    // Sub-task copies follow the op-level output they copy.
    let left: HashSet<TensorId> = target_left.iter().copied().collect();
    let paired: HashMap<TensorId, TensorId> = result.pairs.iter().copied().collect();
    let unplaced: HashSet<TensorId> = result.unplaced_target.iter().copied().collect();
    let mut copies: Vec<(TensorId, TensorId)> =
        copies.into_iter().filter(|(c, _)| left.contains(c)).collect();
    copies.sort_unstable();
    for (copy, of) in copies {
        if let Some(&b) = paired.get(&of) {
            result.pairs.push((copy, b));
        } else if unplaced.contains(&of) {
            result.unplaced_target.push(copy);
        }
    }
    result.unplaced_bench.sort_unstable();
    result.unplaced_target.sort_unstable();
    result
}

/// The outputs of FFTS+ sub-task records ([`Index::sub_task_copies`]): each such output -> the op-level
/// output it copies. They follow it (paired with the same API output, or unplaced with it) rather than
/// count as kernels of their own.
fn sub_task_copies(target: &Index) -> HashMap<TensorId, TensorId> {
    let mut copies = HashMap::new();
    for (copy, of) in target.sub_task_copies() {
        copies.extend(target.ops[copy].outputs().zip(target.ops[of].outputs()));
    }
    copies
}

/// One rank and step: `t_list` target output tensors, `b_list` bench output tensors, both in order.
/// `false` when the step is too large to align (its tensors are left unplaced).
fn align_step(
    target: &Index,
    bench: &Index,
    t_list: &[TensorId],
    b_list: &[TensorId],
    out: &mut KernelAlignment,
) -> bool {
    // The kernels, each with its output tensors.
    let mut kernels: Vec<(OpId, Vec<TensorId>)> = Vec::new();
    for &t in t_list {
        let op = target.tensors[t].op();
        match kernels.last_mut() {
            Some((o, outs)) if *o == op => outs.push(t),
            _ => kernels.push((op, vec![t])),
        }
    }
    let (n, m) = (b_list.len(), kernels.len());
    if n == 0 || m == 0 {
        out.unplaced_bench.extend(b_list);
        out.unplaced_target.extend(t_list);
        return true;
    }
    // Kernel j's outputs that could be API output i, with their weights: every match is worth MATCH (so
    // the alignment matches as many as it can first), the same shape SHAPE more (a transposed copy holds
    // the same values, so statistics cannot tell it from the original), closer statistics up to 1 more,
    // and between equals the later kernel LATER more (an API's output is its last kernel's: a linear's
    // BiasAdd, not its MatMul).
    const MATCH: f64 = 100.0;
    const SHAPE: f64 = 2.0;
    const LATER: f64 = 1e-3;
    let mut shapes = HashMap::new();
    let bench_weighed = weighed(bench, b_list, &mut shapes);
    // Kernel j's outputs are t_list[first[j]..][..its outputs].
    let target_weighed = weighed(target, t_list, &mut shapes);
    drop(shapes);
    let first: Vec<usize> = kernels
        .iter()
        .scan(0, |at, k| {
            *at += k.1.len();
            Some(*at - k.1.len())
        })
        .collect();
    // The weight of kernel j's output p (`w`) as API output i (`b`).
    let weight = |j: usize, w: &Weighed, b: &Weighed| {
        let shape = if w.shape == b.shape { SHAPE } else { 0.0 };
        MATCH + shape + similarity(w.stats, b.stats) + LATER * j as f64 / m as f64
    };
    // (output position, target tensor, weight) for each of kernel j's outputs that could be API output i.
    let candidates = |i: usize, j: usize| {
        let seen = bench_weighed[i];
        kernels[j]
            .1
            .iter()
            .zip(&target_weighed[first[j]..])
            .enumerate()
            .filter(move |(_, (_, w))| w.elements == seen.elements && w.float == seen.float)
            .map(move |(p, (&t, w))| (p, t, weight(j, w, &seen)))
    };
    // The best total with i API outputs considered, at kernel j, in state u of kernel j: which of its
    // outputs API outputs took already, so that no two take the same one (a fused kernel answers two calls
    // with two different outputs). A kernel of at most MASK_OUTPUTS outputs keeps the set (a bit mask);
    // a larger one only the last taken (u = position + 1; 0: none), and the rare repeat is settled after.
    // Kernels never go backwards. Filled forward, then traced back a block of rows at a time ([`table`]).
    let by_mask: Vec<bool> = kernels.iter().map(|k| k.1.len() <= MASK_OUTPUTS).collect();
    let states: Vec<usize> = kernels
        .iter()
        .zip(&by_mask)
        .map(|(k, &mask)| if mask { 1 << k.1.len() } else { k.1.len() + 1 })
        .collect();
    let table = Table::new(n, &states, &by_mask);
    let packed = states.iter().all(|&w| w <= Move::STATE as usize + 1);
    let Some(plan) = (packed && table.cells() <= MAX_CELLS).then(|| table.plan(TABLE_BYTES)).flatten() else {
        out.unplaced_bench.extend(b_list);
        out.unplaced_target.extend(t_list);
        return false;
    };
    // As candidates(i, j) without the tensors: the table asks at every cell of every fill.
    let mut fit = |i: usize, j: usize, fits: &mut Vec<(usize, f64)>| {
        let seen = &bench_weighed[i];
        let outputs = &target_weighed[first[j]..first[j] + kernels[j].1.len()];
        for (p, w) in outputs.iter().enumerate() {
            if w.elements == seen.elements && w.float == seen.float {
                fits.push((p, weight(j, w, seen)));
            }
        }
    };
    let mut matched: Vec<Option<(usize, TensorId, f64)>> = table
        .align(plan, &mut fit)
        .into_iter()
        .enumerate()
        .map(|(i, at)| {
            let (j, p) = at?;
            candidates(i, j).find(|c| c.0 == p).map(|(_, t, w)| (j, t, w))
        })
        .collect();
    // One kernel output answers one API output: where two landed on the same (on a kernel of more than
    // MASK_OUTPUTS outputs), the closer keeps it and the other takes the kernel's best output still free.
    let mut owner: HashMap<TensorId, usize> = HashMap::new();
    for i in 0..n {
        let Some((j, t, w)) = matched[i] else { continue };
        let loser = match owner.get(&t) {
            Some(&k) if matched[k].is_some_and(|(_, _, wk)| wk >= w) => i,
            Some(&k) => {
                owner.insert(t, i);
                k
            }
            None => {
                owner.insert(t, i);
                continue;
            }
        };
        matched[loser] = candidates(loser, j)
            .filter(|(_, t, _)| !owner.contains_key(t))
            .max_by(|x, y| x.2.total_cmp(&y.2))
            .map(|(_, t, w)| (j, t, w));
        if let Some((_, t, _)) = matched[loser] {
            owner.insert(t, loser);
        }
    }
    // Calls: consecutive bench outputs of one bench op; a call's kernels run after the previous call's
    // last matched kernel, up to its own last.
    let mut last_kernel: Option<usize> = None;
    let mut placed = vec![false; m];
    let mut i = 0;
    while i < n {
        let op = bench.tensors[b_list[i]].op();
        let start = i;
        while i < n && bench.tensors[b_list[i]].op() == op {
            i += 1;
        }
        let ks: Vec<usize> = matched[start..i].iter().flatten().map(|&(j, _, _)| j).collect();
        for (k, m) in matched[start..i].iter().enumerate() {
            match m {
                Some((_, t, _)) => out.pairs.push((*t, b_list[start + k])),
                None => out.unplaced_bench.push(b_list[start + k]),
            }
        }
        let Some(&last) = ks.iter().max() else {
            out.calls.push(ApiCall { bench_op: op, kernels: Vec::new() });
            continue;
        };
        let first = last_kernel.map_or(0, |l| if l < last { l + 1 } else { l });
        let mut own: Vec<usize> = (first..=last).collect();
        own.extend(ks.iter().copied().filter(|k| *k < first));
        own.sort_unstable();
        own.dedup();
        for &k in &own {
            placed[k] = true;
        }
        out.calls.push(ApiCall { bench_op: op, kernels: own.iter().map(|&k| kernels[k].0).collect() });
        last_kernel = Some(last_kernel.map_or(last, |l| l.max(last)));
    }
    let paired: HashSet<TensorId> = out.pairs.iter().map(|p| p.0).collect();
    for (k, (_, outs)) in kernels.iter().enumerate() {
        if !placed[k] {
            out.unplaced_target.extend(outs.iter().filter(|t| !paired.contains(t)));
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::TensorInfo;
    use accutrace_formats::DType;

    fn tensor(index: &mut Index, op: OpId, io: Io, i: u32, dtype: DType, shape: &[u64], mean: f64) {
        let stats = TensorStats {
            count: 1,
            mean,
            l2_norm: mean.abs(),
            max: mean,
            min: mean,
            ..TensorStats::default()
        };
        let t = index.push_tensor(TensorInfo::for_test(op, io, i, dtype, shape.to_vec()));
        index.set_stats(t, Some(stats));
    }

    #[test]
    fn a_linears_kernels_group_under_its_call_and_the_optimizer_is_unplaced() {
        let mut t = Index::default();
        let mut b = Index::default();
        // Target kernels: MatMul, BiasAdd (the linear), Gelu, ApplyAdamD.
        for (name, ty, mean) in
            [("MatMulV2_0", "MatMulV2", 1.0), ("BiasAdd_0", "BiasAdd", 1.5), ("GeLU_0", "GeLU", 0.9)]
        {
            let op = t.push_op(name.into(), ty.into(), 0, 0);
            tensor(&mut t, op, Io::Input, 0, DType::FLOAT16, &[2, 4], 0.0);
            tensor(&mut t, op, Io::Output, 0, DType::FLOAT16, &[2, 4], mean);
        }
        let opt = t.push_op("ApplyAdamD_0".into(), "ApplyAdamD".into(), 0, 0);
        tensor(&mut t, opt, Io::Output, 0, DType::FLOAT, &[4], 7.0);
        // Bench calls: linear (output = BiasAdd's), gelu, and a call no kernel did.
        for (name, shape, mean) in [
            ("Functional.linear.0.forward", [2u64, 4], 1.5),
            ("Functional.gelu.0.forward", [8, 1], 0.9),
            ("Tensor.view.0.forward", [3, 3], 0.0),
        ] {
            let op = b.push_op(name.into(), "x".into(), 0, 0);
            tensor(&mut b, op, Io::Output, 0, DType::FLOAT, &shape, mean);
        }
        assert!(is_api_level(&b) && !is_api_level(&t));
        let all_t: Vec<TensorId> = (0..t.tensors.len()).collect();
        let all_b: Vec<TensorId> = (0..b.tensors.len()).collect();
        let a = align_kernels_to_apis(&t, &b, &all_t, &all_b);
        // BiasAdd's output (closest statistics, and later) answers the linear; GeLU's the gelu (same count).
        assert_eq!(a.pairs, [(3, 0), (5, 1)]);
        assert_eq!(a.calls[0].kernels, [0, 1], "MatMul and BiasAdd implement the linear");
        assert_eq!(a.calls[1].kernels, [2]);
        assert!(a.calls[2].kernels.is_empty());
        assert_eq!(a.unplaced_bench, [2]);
        assert_eq!(a.unplaced_target, [6], "the optimizer's kernel belongs to no call");
    }

    #[test]
    fn a_step_too_large_to_align_is_said_and_left_unplaced() {
        // 2,001 rows of 500,002 columns: past MAX_CELLS.
        let (mut t, mut b) = (Index::default(), Index::default());
        for k in 0..250_001 {
            let op = t.push_op(format!("Add_{k}"), "Add".into(), 0, 0);
            tensor(&mut t, op, Io::Output, 0, DType::FLOAT16, &[4], 1.0);
        }
        for k in 0..2_000 {
            let op = b.push_op(format!("Tensor.__add__.{k}.forward"), "x".into(), 0, 0);
            tensor(&mut b, op, Io::Output, 0, DType::FLOAT, &[4], 1.0);
        }
        let all_t: Vec<TensorId> = (0..t.tensors.len()).collect();
        let all_b: Vec<TensorId> = (0..b.tensors.len()).collect();
        let a = align_kernels_to_apis(&t, &b, &all_t, &all_b);
        assert!(a.pairs.is_empty() && a.calls.is_empty());
        assert_eq!((a.unplaced_target.len(), a.unplaced_bench.len()), (250_001, 2_000));
        assert!(
            a.warnings[0].starts_with("rank 0 step 0: 2000 API outputs against 250001"),
            "{:?}",
            a.warnings
        );
    }

    #[test]
    fn two_calls_on_one_fused_kernel_take_its_two_outputs() {
        let (mut t, mut b) = (Index::default(), Index::default());
        let op = t.push_op("LayerNorm_0".into(), "LayerNorm".into(), 0, 0);
        tensor(&mut t, op, Io::Output, 0, DType::FLOAT16, &[2, 4], 0.5);
        // Output 0 is the activation, output 1 the linear's result before it; the activation is off.
        let op = t.push_op("FusedMatMulBiasGelu_0".into(), "FusedMatMulBiasGelu".into(), 0, 0);
        tensor(&mut t, op, Io::Output, 0, DType::FLOAT16, &[2, 4], 3.0);
        tensor(&mut t, op, Io::Output, 1, DType::FLOAT16, &[2, 4], -1.0);
        for (name, mean) in [
            ("Functional.layer_norm.0.forward", 0.5),
            ("Functional.linear.0.forward", -1.0),
            ("Functional.gelu.0.forward", 0.2),
        ] {
            let op = b.push_op(name.into(), "x".into(), 0, 0);
            tensor(&mut b, op, Io::Output, 0, DType::FLOAT, &[2, 4], mean);
        }
        let all_t: Vec<TensorId> = (0..t.tensors.len()).collect();
        let all_b: Vec<TensorId> = (0..b.tensors.len()).collect();
        let a = align_kernels_to_apis(&t, &b, &all_t, &all_b);
        assert_eq!(a.pairs, [(0, 0), (2, 1), (1, 2)]);
        assert_eq!((a.calls[1].kernels.as_slice(), a.calls[2].kernels.as_slice()), (&[1][..], &[1][..]));
    }

    #[test]
    fn no_two_api_outputs_take_one_kernel_output() {
        // A layer norm's backward kernel (dx, dgamma, dbeta), then the residual add's AddN, whose output
        // looks more like dx than like the add's benchmark output (a diverged run): the add's output must
        // still go to the AddN, not to dx a second time.
        let (mut t, mut b) = (Index::default(), Index::default());
        let op = t.push_op("LayerNormGrad_0".into(), "LayerNormGrad".into(), 0, 0);
        tensor(&mut t, op, Io::Output, 0, DType::FLOAT16, &[2, 4], 1.0);
        tensor(&mut t, op, Io::Output, 1, DType::FLOAT16, &[4], 2.0);
        tensor(&mut t, op, Io::Output, 2, DType::FLOAT16, &[4], 3.0);
        let op = t.push_op("AddN_0".into(), "AddN".into(), 0, 0);
        tensor(&mut t, op, Io::Output, 0, DType::FLOAT16, &[2, 4], 9.0);
        let op = b.push_op("Functional.layer_norm.0.backward".into(), "x".into(), 0, 0);
        for (i, (shape, mean)) in
            [([2u64, 4].as_slice(), 1.0), (&[4], 2.0), (&[4], 3.0)].into_iter().enumerate()
        {
            tensor(&mut b, op, Io::Output, i as u32, DType::FLOAT, shape, mean);
        }
        let op = b.push_op("Tensor.__add__.0.backward".into(), "x".into(), 0, 0);
        tensor(&mut b, op, Io::Output, 0, DType::FLOAT, &[2, 4], 1.1);
        let all_t: Vec<TensorId> = (0..t.tensors.len()).collect();
        let all_b: Vec<TensorId> = (0..b.tensors.len()).collect();
        let a = align_kernels_to_apis(&t, &b, &all_t, &all_b);
        assert_eq!(a.pairs, [(0, 0), (1, 1), (2, 2), (3, 3)]);
        assert!(a.unplaced_bench.is_empty() && a.unplaced_target.is_empty());
    }
}
