//! The last way to pair tensors no name paired: per rank and step, the two runs' leftovers in execution
//! order, aligned as a longest common subsequence of their signatures ([`align::common_subsequence`]), so an
//! extra or missing op on one side does not shift the rest. This is all that pairs two runs whose op names
//! all differ (another compile renaming ops, a benchmark dumped by another tool) and an eager run's repeats
//! of one name in a step (only the first pairs by name).

use super::align;
use crate::index::{Index, Io, TensorId};
use std::collections::HashMap;

/// The work one rank and step may take ([`align::common_subsequence`]'s budget): two unrelated steps of
/// 100,000 tensors a side spend it in about 0.6 s (release build), while two runs of one model, a few ops
/// apart, align in milliseconds at that size.
pub const WORK_PER_STEP: u64 = 1 << 26;

/// What [`align_by_order`] paired and left.
#[derive(Default)]
pub struct OrderAlignment {
    /// `(target, bench)` tensor pairs.
    pub pairs: Vec<(TensorId, TensorId)>,
    /// Sorted by id.
    pub unmatched_target: Vec<TensorId>,
    /// Sorted by id.
    pub unmatched_bench: Vec<TensorId>,
    /// A line for each rank and step whose alignment ran out of work and left tensors unmatched.
    pub warnings: Vec<String>,
    /// Target tensors so left: unmatched for want of work, not of a counterpart.
    pub unaligned_target: usize,
}

/// Signatures as small ids, equal where the signatures are (both runs share one table): what makes two
/// tensors plausibly the same when names say nothing is the op type (any case), io, index and shape, not
/// the dtype (an fp16 run against an fp32 benchmark is what compare is for).
#[derive(Default)]
struct Signatures<'a> {
    types: HashMap<String, u32>,
    ids: HashMap<(u32, Io, u32, &'a [u64]), u32>,
}

impl<'a> Signatures<'a> {
    fn of(&mut self, index: &'a Index, tensors: &[TensorId]) -> Vec<u32> {
        // Each op type lowercased once, not once a tensor.
        let mut type_ids: HashMap<&'a str, u32> = HashMap::new();
        tensors
            .iter()
            .map(|&t| {
                let tensor = &index.tensors[t];
                let op_type = index.ops[tensor.op()].op_type.as_str();
                let type_id = *type_ids.entry(op_type).or_insert_with(|| {
                    let next = self.types.len() as u32;
                    *self.types.entry(op_type.to_ascii_lowercase()).or_insert(next)
                });
                let next = self.ids.len() as u32;
                *self.ids.entry((type_id, tensor.io, tensor.index, &tensor.shape[..])).or_insert(next)
            })
            .collect()
    }
}

/// Each rank and step's tensors of `ids`, in execution order.
fn by_step(index: &Index, ids: &[TensorId]) -> HashMap<(u32, u64), Vec<TensorId>> {
    let mut groups: HashMap<(u32, u64), Vec<TensorId>> = HashMap::new();
    for &t in ids {
        let op = &index.ops[index.tensors[t].op()];
        groups.entry((op.rank, op.step)).or_default().push(t);
    }
    for list in groups.values_mut() {
        list.sort_by_key(|&t| (index.ops[index.tensors[t].op()].order, t));
    }
    groups
}

/// Pairs the leftover tensors of both runs per rank and step by execution order and signature.
pub fn align_by_order(
    target: &Index,
    bench: &Index,
    target_left: &[TensorId],
    bench_left: &[TensorId],
) -> OrderAlignment {
    align_within(target, bench, target_left, bench_left, WORK_PER_STEP)
}

/// [`align_by_order`] with `work` the budget of each rank and step.
fn align_within(
    target: &Index,
    bench: &Index,
    target_left: &[TensorId],
    bench_left: &[TensorId],
    work: u64,
) -> OrderAlignment {
    let target_groups = by_step(target, target_left);
    let mut bench_groups = by_step(bench, bench_left);
    let mut found = OrderAlignment::default();
    let mut signatures = Signatures::default();
    let mut keys: Vec<&(u32, u64)> = target_groups.keys().collect();
    keys.sort();
    for key in keys {
        let t_list = &target_groups[key];
        let b_list = bench_groups.remove(key).unwrap_or_default();
        let (t_sig, b_sig) = (signatures.of(target, t_list), signatures.of(bench, &b_list));
        let aligned = align::common_subsequence(&t_sig, &b_sig, work);
        let mut b_used = vec![false; b_list.len()];
        let mut t_used = vec![false; t_list.len()];
        for &(i, j) in &aligned.pairs {
            found.pairs.push((t_list[i], b_list[j]));
            (t_used[i], b_used[j]) = (true, true);
        }
        found.unmatched_target.extend(t_list.iter().zip(&t_used).filter(|(_, &u)| !u).map(|(&t, _)| t));
        found.unmatched_bench.extend(b_list.iter().zip(&b_used).filter(|(_, &u)| !u).map(|(&b, _)| b));
        let (target_out, bench_out) = aligned.left_out;
        found.unaligned_target += target_out;
        if target_out + bench_out > 0 {
            found.warnings.push(format!(
                "rank {} step {}: {target_out} of the {} target and {bench_out} of the {} benchmark tensors \
                 that no name paired could not be aligned by execution order (op type, io, index and \
                 shape): the two orders differ too much to align within {work} steps of work, so \
                 they are left unmatched; pass --mapping with `target_name,bench_name` lines to pair them",
                key.0,
                key.1,
                t_list.len(),
                b_list.len()
            ));
        }
    }
    found.unmatched_bench.extend(bench_groups.into_values().flatten());
    found.unmatched_bench.sort_unstable();
    found.unmatched_target.sort_unstable();
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::TensorInfo;
    use accutrace_formats::DType;

    /// A run of one step, an op a type of `types` (a letter each), each with one output of 4 elements.
    fn run(types: &str) -> Index {
        let mut index = Index::default();
        for (k, op_type) in types.chars().enumerate() {
            let op = index.push_op(format!("op{k}"), op_type.to_string(), 0, 0);
            index.push_tensor(TensorInfo::for_test(op, Io::Output, 0, DType::FLOAT, vec![4]));
        }
        index
    }

    fn align(target: &Index, bench: &Index, work: u64) -> OrderAlignment {
        let every = |index: &Index| (0..index.tensors.len()).collect::<Vec<_>>();
        align_within(target, bench, &every(target), &every(bench), work)
    }

    /// Op types in any case and an extra op on each side: the rest pair in order, without a warning.
    #[test]
    fn extra_ops_on_either_side_leave_the_rest_paired_in_order() {
        let found = align(&run("ABCDxEF"), &run("aybcdef"), WORK_PER_STEP);
        assert_eq!(found.pairs, [(0, 0), (1, 2), (2, 3), (3, 4), (5, 5), (6, 6)]);
        assert_eq!((found.unmatched_target, found.unmatched_bench), (vec![4], vec![1]));
        assert!(found.warnings.is_empty());
    }

    /// Orders that differ past the work allowed: what is left is said, with the rank, step and counts, and
    /// every tensor is either paired or listed unmatched.
    #[test]
    fn orders_too_far_apart_to_align_are_said_not_left_unmatched_unsaid() {
        let target: String = (0..400).map(|i| ['B', 'C', 'A'][i % 3]).collect();
        let bench: String = (0..400).map(|i| ['A', 'C', 'B', 'D'][i % 4]).collect();
        let (target, bench) = (run(&format!("S{target}E")), run(&format!("S{bench}E")));
        let found = align(&target, &bench, 1_000);
        assert_eq!(found.pairs, [(0, 0), (401, 401)], "the common ends alone");
        assert_eq!((found.unmatched_target.len(), found.unmatched_bench.len()), (400, 400));
        assert_eq!((found.warnings.len(), found.unaligned_target), (1, 400));
        assert!(
            found.warnings[0]
                .starts_with("rank 0 step 0: 400 of the 402 target and 400 of the 402 benchmark"),
            "{}",
            found.warnings[0]
        );
        // With the work it needs, the same orders align in full and say nothing.
        let found = align(&target, &bench, WORK_PER_STEP);
        assert!(found.warnings.is_empty() && found.unaligned_target == 0 && found.pairs.len() > 2);
        assert_eq!(found.pairs.len() + found.unmatched_target.len(), 402);
    }
}
