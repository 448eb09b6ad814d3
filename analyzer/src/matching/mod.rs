//! Pairs the tensors of two runs: exact names, a user mapping, fusion provenance, msprobe's fuzzy names,
//! and finally an alignment of the two execution orders by op type and shape (`order.rs`); or, for a
//! kernel-level target against an API-level (msprobe) benchmark, the kernels against the API calls
//! ([`crate::api_matching`]).
//!
//! Names are compared after CANN's file-name sanitizing (space . / \ become _), because one side may only
//! know a name from a file name (`model_layer_0_attn_MatMul.0.123.npy`) and the other from a header.

use crate::api_matching::{align_kernels_to_apis, is_api_level};
use crate::index::{Index, Io, OpId, TensorId};
use accutrace_formats::dump::sanitize_op_name;
use anyhow::{Context, Result};
use serde::Serialize;
use std::collections::HashMap;
use std::path::Path;

mod align;
mod order;

/// How a pair was found, strongest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum MatchKind {
    Exact,
    Mapping,
    Provenance,
    Fuzzy,
    Order,
    /// A kernel's output against the output of the API call it implements.
    Api,
}

/// A target tensor and the benchmark tensor it is compared with. The ids in 32 bits (an index numbers at
/// most 2^32 tensors): 12 bytes a pair instead of 24, and compare holds every pair while it measures them
/// (#18: memory with the tensor count).
#[derive(Clone, Debug, Serialize)]
pub struct TensorPair {
    target: u32,
    bench: u32,
    pub how: MatchKind,
}

impl TensorPair {
    /// Tensor `target` of the target run with `bench` of the benchmark: ids an index gave (below 2^32).
    pub fn new(target: TensorId, bench: TensorId, how: MatchKind) -> TensorPair {
        TensorPair { target: target as u32, bench: bench as u32, how }
    }

    pub fn target(&self) -> TensorId {
        self.target as TensorId
    }

    pub fn bench(&self) -> TensorId {
        self.bench as TensorId
    }
}

/// The result of matching: pairs plus everything left over on either side (never dropped silently).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Matching {
    pub pairs: Vec<TensorPair>,
    pub unmatched_target: Vec<TensorId>,
    pub unmatched_bench: Vec<TensorId>,
    /// Kernels against API calls: each call of the benchmark with the target kernels that implement it
    /// (empty unless the target is kernel-level and the benchmark API-level).
    pub api_calls: Vec<crate::api_matching::ApiCall>,
    /// What the user must know about the matching: steps too large to align kernels against API calls, or
    /// whose execution orders differ too much to align within the work allowed.
    pub warnings: Vec<String>,
    /// Target tensors those warnings leave unmatched: whether they have a counterpart is unknown.
    #[serde(skip)]
    pub unaligned_target: usize,
}

#[derive(Clone, Debug, Default)]
pub struct MatchOptions {
    /// `target name -> bench name` pairs from a user mapping file.
    pub mapping: HashMap<String, String>,
    /// Ignore msprobe call indices (`Functional.linear.3.forward` ~ `Functional.linear.0.forward`).
    pub fuzzy: bool,
}

/// Reads a mapping file: one `target_name,bench_name` pair per line; `#` starts a comment.
pub fn read_mapping_file(path: &Path) -> Result<HashMap<String, String>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut mapping = HashMap::new();
    for (line_no, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let (target, bench) = line.split_once(',').with_context(|| {
            format!(
                "{}: line {}: expected `target_name,bench_name`, found {line:?}",
                path.display(),
                line_no + 1
            )
        })?;
        mapping.insert(norm(target.trim()), norm(bench.trim()));
    }
    Ok(mapping)
}

/// A tensor's identity across runs: rank, step, normalized op name (borrowed: each op's is made once, not
/// copied into every tensor's key), io, index.
type Key<'a> = (u32, u64, &'a str, Io, u32);

fn norm(name: &str) -> String {
    sanitize_op_name(name)
}

/// Drops the call index of an msprobe API name: `Functional.linear.3.forward` -> `Functional.linear.forward`.
/// Works on sanitized names too (`Functional_linear_3_forward`).
fn fuzzy_name(name: &str) -> String {
    let sep = if name.contains('.') { '.' } else { '_' };
    let parts: Vec<&str> = name.split(sep).collect();
    let direction = parts.iter().rposition(|p| *p == "forward" || *p == "backward");
    match direction {
        Some(d) if d >= 1 && parts[d - 1].chars().all(|c| c.is_ascii_digit()) => {
            let kept: Vec<&str> =
                parts.iter().enumerate().filter(|(i, _)| *i != d - 1).map(|(_, p)| *p).collect();
            kept.join(&sep.to_string())
        }
        _ => name.to_string(),
    }
}

/// The benchmark's tensors found by [`Key`]: its ops by rank, step and normalized name, then the tensor by
/// its place in the op (io, index). Keyed per op, not per tensor (#18: a key a tensor, 49 bytes a slot of a
/// map of 262,144 at 198,840 tensors, was 12.9 MB of diff's heap peak).
struct BenchTensors<'a> {
    index: &'a Index,
    /// The first op of each rank, step and name.
    first_of_key: HashMap<(u32, u64, &'a str), OpId>,
    /// Each op -> the next op of the same rank, step and name (rarely any).
    next_of_key: Vec<Option<OpId>>,
    /// Whether each op's inputs and its outputs each list index k at position k (nearly every op): its
    /// tensor of a place is then found without a scan.
    in_place: Vec<bool>,
}

impl<'a> BenchTensors<'a> {
    /// `names`: each op's normalized name.
    fn new(index: &'a Index, names: &'a [String]) -> Self {
        let mut first_of_key = HashMap::with_capacity(index.ops.len());
        let mut next_of_key = vec![None; index.ops.len()];
        // From the last op back: each op replaces the later one of its key, which becomes its next.
        for (id, op) in index.ops.iter().enumerate().rev() {
            next_of_key[id] = first_of_key.insert((op.rank, op.step, names[id].as_str()), id);
        }
        let at_their_index = |tensors: std::ops::Range<TensorId>| {
            tensors.enumerate().all(|(k, t)| index.tensors[t].index as usize == k)
        };
        let in_place =
            index.ops.iter().map(|op| at_their_index(op.inputs()) && at_their_index(op.outputs())).collect();
        BenchTensors { index, first_of_key, next_of_key, in_place }
    }

    /// The first benchmark tensor (the lowest id) of `key`: that of the first op of the key that has the
    /// place. An ordered index ([`Index::order_by_execution`]) numbers an op's tensors after every earlier
    /// op's, so no later op of the key can hold a lower id, and the walk stops there: a walk of every op
    /// of the name for every tensor would make matching quadratic in the ops that share a name in a step
    /// (20,000 of them: 13 s against 14 ms).
    fn get(&self, &(rank, step, name, io, place): &Key) -> Option<TensorId> {
        let mut op = self.first_of_key.get(&(rank, step, name)).copied();
        while let Some(id) = op {
            let mut listed = match io {
                Io::Input => self.index.ops[id].inputs(),
                Io::Output => self.index.ops[id].outputs(),
            };
            let found = match self.in_place[id] {
                true => listed.nth(place as usize),
                false => listed.find(|&t| self.index.tensors[t].index == place),
            };
            if found.is_some() {
                return found;
            }
            op = self.next_of_key[id];
        }
        None
    }
}

fn key_of<'a>(index: &Index, t: TensorId, name: &'a str) -> Key<'a> {
    let tensor = &index.tensors[t];
    let op = &index.ops[tensor.op()];
    (op.rank, op.step, name, tensor.io, tensor.index)
}

/// Matches every tensor of `target` against `bench`.
pub fn match_runs(target: &Index, bench: &Index, options: &MatchOptions) -> Matching {
    // Each bench op's names made once (#18: a copy of its name in every tensor's key grew with the tensor
    // count: 58 of diff's 214 MB heap at 198,840 tensors a run).
    let bench_names: Vec<String> = bench.ops.iter().map(|op| norm(&op.name)).collect();
    let bench_fuzzy_names: Vec<String> = match options.fuzzy {
        true => bench_names.iter().map(|name| fuzzy_name(name)).collect(),
        false => Vec::new(),
    };
    let bench_by_key = BenchTensors::new(bench, &bench_names);
    let mut bench_by_fuzzy: HashMap<Key, Vec<TensorId>> = HashMap::new();
    if options.fuzzy {
        for t in 0..bench.tensors.len() {
            let op = bench.tensors[t].op();
            bench_by_fuzzy.entry(key_of(bench, t, &bench_fuzzy_names[op])).or_default().push(t);
        }
    }
    let mut bench_used = vec![false; bench.tensors.len()];
    let mut pairs = Vec::new();
    let mut leftover = Vec::new();
    // A benchmark op the mapping gives a target op is that op's alone: the target op of its name is another
    // (an eager kernel's counter shifted), and taking it by name would shift every pair after it.
    let mapped_bench: std::collections::HashSet<&String> = options.mapping.values().collect();

    for t in 0..target.tensors.len() {
        let tensor = &target.tensors[t];
        let name = norm(&target.ops[tensor.op()].name);
        let mut take = |key: &Key, how: MatchKind, used: &mut Vec<bool>| -> bool {
            match bench_by_key.get(key) {
                Some(b) if !used[b] => {
                    used[b] = true;
                    pairs.push(TensorPair::new(t, b, how));
                    true
                }
                _ => false,
            }
        };
        // The user's mapping before the names: an eager kernel's name (`MatMulV2_2`) may be another
        // kernel's on the other side, and the mapping is what says which.
        if let Some(mapped) = options.mapping.get(&name) {
            if take(&key_of(target, t, mapped), MatchKind::Mapping, &mut bench_used) {
                continue;
            }
        }
        let mapped_to_another = mapped_bench.contains(&name) && options.mapping.get(&name) != Some(&name);
        if !mapped_to_another && take(&key_of(target, t, &name), MatchKind::Exact, &mut bench_used) {
            continue;
        }
        if let (Io::Output, Some((original, out_index))) = (tensor.io, tensor.original_op()) {
            let op = &target.ops[tensor.op()];
            let original = norm(original);
            let key = (op.rank, op.step, original.as_str(), Io::Output, out_index);
            if take(&key, MatchKind::Provenance, &mut bench_used) {
                continue;
            }
        }
        if options.fuzzy {
            if let Some(candidates) = bench_by_fuzzy.get(&key_of(target, t, &fuzzy_name(&name))) {
                if let Some(&b) = candidates.iter().find(|&&b| !bench_used[b]) {
                    bench_used[b] = true;
                    pairs.push(TensorPair::new(t, b, MatchKind::Fuzzy));
                    continue;
                }
            }
        }
        leftover.push(t);
    }

    // An FFTS+ sub-task's copy of a tensor whose op-level original was paired is compared through it: one
    // run may have been dumped at `dump_level` "op", which has no such copies.
    let paired_target: Vec<bool> = {
        let mut paired = vec![false; target.tensors.len()];
        pairs.iter().for_each(|p| paired[p.target()] = true);
        paired
    };
    let leftover: Vec<TensorId> = {
        let copies = copied_tensors(target);
        leftover.into_iter().filter(|t| !copies.get(t).is_some_and(|&of| paired_target[of])).collect()
    };
    let bench_copies = copied_tensors(bench);
    let bench_left: Vec<TensorId> = (0..bench.tensors.len())
        .filter(|&b| !bench_used[b] && !bench_copies.get(&b).is_some_and(|&of| bench_used[of]))
        .collect();
    let mut api_calls = Vec::new();
    let (unmatched_target, unmatched_bench, warnings, unaligned_target) =
        if is_api_level(bench) && !is_api_level(target) {
            // Outputs against outputs: an API's arguments are not any one kernel's inputs.
            let a = align_kernels_to_apis(target, bench, &leftover, &bench_left);
            pairs.extend(a.pairs.into_iter().map(|(t, b)| TensorPair::new(t, b, MatchKind::Api)));
            api_calls = a.calls;
            (a.unplaced_target, a.unplaced_bench, a.warnings, a.unaligned_target)
        } else {
            let o = order::align_by_order(target, bench, &leftover, &bench_left);
            pairs.extend(o.pairs.into_iter().map(|(t, b)| TensorPair::new(t, b, MatchKind::Order)));
            (o.unmatched_target, o.unmatched_bench, o.warnings, o.unaligned_target)
        };
    pairs.sort_by_key(|p| (target.ops[target.tensors[p.target()].op()].order, p.target));
    Matching { pairs, unmatched_target, unmatched_bench, api_calls, warnings, unaligned_target }
}

/// Each tensor of an FFTS+ sub-task's copy of an op ([`Index::sub_task_copies`]) -> the op-level tensor
/// in the same place (input or output, and index), unless their content hashes say the bytes differ: such a
/// copy is compared as a tensor of its own, never left unread on the word of its name. A source that hashes
/// only on read (a dump tree) cannot tell, and its copies follow their originals.
fn copied_tensors(index: &Index) -> HashMap<TensorId, TensorId> {
    let mut copied = HashMap::new();
    for (copy, of) in index.sub_task_copies() {
        let of = &index.ops[of];
        for t in index.ops[copy].tensors() {
            let place = (index.tensors[t].io, index.tensors[t].index);
            let original = of.tensors().find(|&o| (index.tensors[o].io, index.tensors[o].index) == place);
            let same_bytes = |o: TensorId| match (index.tensors[t].hash(), index.tensors[o].hash()) {
                (Some(copy), Some(original)) => copy == original,
                _ => true,
            };
            if let Some(o) = original.filter(|&o| same_bytes(o)) {
                copied.insert(t, o);
            }
        }
    }
    copied
}

/// For each input tensor, the op that produced it, found by content hash (an input's bytes equal the
/// producer's output bytes in a dump): the latest op before it in execution order with such an output.
/// `hash` gives a tensor's hash (stored, or computed by the caller); tensors without one link nothing, and
/// inputs no earlier op produced (graph inputs: data, weights) have none.
pub fn input_producers(index: &Index, hash: impl Fn(TensorId) -> Option<u64>) -> HashMap<TensorId, OpId> {
    let mut by_hash: HashMap<u64, OpId> = HashMap::new();
    let mut result = HashMap::new();
    // Op ids follow execution order (`Index::order_by_execution`).
    for (o, op) in index.ops.iter().enumerate() {
        for input in op.inputs() {
            if let Some(&producer) = hash(input).and_then(|h| by_hash.get(&h)) {
                result.insert(input, producer);
            }
        }
        for output in op.outputs() {
            if let Some(h) = hash(output) {
                by_hash.insert(h, o);
            }
        }
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    /// compare holds every pair while it measures them (#18): 24 bytes with `usize` ids.
    #[test]
    fn a_pair_takes_twelve_bytes() {
        assert_eq!(std::mem::size_of::<TensorPair>(), 12);
        let p = TensorPair::new(7, u32::MAX as TensorId, MatchKind::Exact);
        assert_eq!((p.target(), p.bench()), (7, u32::MAX as TensorId));
    }

    /// The benchmark's tensors keyed per op give, for every key, the first tensor (the lowest id) of that
    /// key, as a map of every tensor's key did: ops sharing a rank, step and name, a place listed out of
    /// order, a place listed twice, inputs and outputs of one index.
    #[test]
    fn bench_tensors_give_the_first_tensor_of_each_key() {
        use crate::index::TensorInfo;
        use accutrace_formats::DType;
        let mut bench = Index::default();
        let tensor = |op, io, index| TensorInfo::for_test(op, io, index, DType::FLOAT, vec![1]);
        let a = bench.push_op("a".into(), "Add".into(), 0, 0);
        bench.push_tensor(tensor(a, Io::Output, 1));
        let b = bench.push_op("b".into(), "Mul".into(), 0, 0);
        for (io, index) in [(Io::Input, 0), (Io::Input, 1), (Io::Output, 0), (Io::Output, 0)] {
            bench.push_tensor(tensor(b, io, index));
        }
        let a_again = bench.push_op("a".into(), "Add".into(), 0, 0);
        for (io, index) in [(Io::Input, 0), (Io::Output, 0), (Io::Output, 1)] {
            bench.push_tensor(tensor(a_again, io, index));
        }
        let a_next_step = bench.push_op("a".into(), "Add".into(), 1, 0);
        bench.push_tensor(tensor(a_next_step, Io::Output, 0));
        let names: Vec<String> = bench.ops.iter().map(|op| norm(&op.name)).collect();
        let by_key = BenchTensors::new(&bench, &names);
        for step in [0, 1, 2] {
            for name in ["a", "b", "c"] {
                for io in [Io::Input, Io::Output] {
                    for place in [0, 1, 2] {
                        let key = (0, step, name, io, place);
                        let first = (0..bench.tensors.len())
                            .find(|&t| key_of(&bench, t, &names[bench.tensors[t].op()]) == key);
                        assert_eq!(by_key.get(&key), first, "{key:?}");
                    }
                }
            }
        }
        assert_eq!(by_key.get(&(0, 0, "a", Io::Output, 1)), Some(0), "the first op's, listed out of place");
    }

    #[test]
    fn fuzzy_names_drop_the_call_index_only() {
        assert_eq!(fuzzy_name("Functional.linear.3.forward"), "Functional.linear.forward");
        assert_eq!(fuzzy_name("Functional_linear_3_backward"), "Functional_linear_backward");
        assert_eq!(fuzzy_name("model/layer_0/MatMul"), "model/layer_0/MatMul");
    }

    /// A mapping ties the target's `MatMulV2_3` to the benchmark's `MatMulV2_2`: the target's own
    /// `MatMulV2_2` (another kernel, unmapped, earlier) must not take it by name, or the mapped pair is lost
    /// and every pair after it shifts.
    #[test]
    fn a_benchmark_op_the_mapping_gives_one_target_op_is_taken_by_no_other_by_name() {
        use crate::index::TensorInfo;
        use accutrace_formats::DType;
        let run = |names: &[&str]| {
            let mut index = Index::default();
            for &name in names {
                let op = index.push_op(name.into(), "MatMulV2".into(), 0, 0);
                index.push_tensor(TensorInfo::for_test(op, Io::Output, 0, DType::FLOAT16, vec![4]));
            }
            index
        };
        let (target, bench) = (run(&["MatMulV2_2", "MatMulV2_3"]), run(&["MatMulV2_2"]));
        let options = MatchOptions {
            mapping: [("MatMulV2_3".to_string(), "MatMulV2_2".to_string())].into(),
            ..MatchOptions::default()
        };
        let matching = match_runs(&target, &bench, &options);
        let pairs: Vec<_> = matching.pairs.iter().map(|p| (p.target, p.bench, p.how)).collect();
        assert_eq!(pairs, [(1, 0, MatchKind::Mapping)]);
        // Mapped to itself, a name keeps its own.
        let options = MatchOptions {
            mapping: [("MatMulV2_2".to_string(), "MatMulV2_2".to_string())].into(),
            ..MatchOptions::default()
        };
        let matching = match_runs(&target, &bench, &options);
        assert_eq!(matching.pairs.iter().map(|p| (p.target, p.bench)).collect::<Vec<_>>(), [(0, 0)]);
    }

    /// An FFTS+ kernel dumped at `dump_level` all (its op-level record, then its sub-task's copy) against
    /// the same kernel dumped at `op`: a copy with the original's bytes is compared through it; one whose
    /// bytes differ stays a tensor with no counterpart, said, not left unread.
    #[test]
    fn a_sub_task_copy_is_compared_through_its_original_only_with_the_same_bytes() {
        use crate::index::{Launch, TensorInfo};
        use accutrace_formats::DType;
        let level_all = |copy_hash: u64| {
            let mut index = Index::default();
            for (context_id, hash) in [(0, 7), (1, copy_hash)] {
                let launch = Launch { task_id: 3, context_id, thread_id: context_id, ..Launch::default() };
                let op = index.push_op_at("Fused_0".into(), "Fused".into(), 0, 0, Some(launch));
                let t = index.push_tensor(TensorInfo::for_test(op, Io::Output, 0, DType::FLOAT16, vec![4]));
                index.tensors[t].set_hash(Some(hash));
            }
            index
        };
        let mut op_level = Index::default();
        let op = op_level.push_op_at("Fused_0".into(), "Fused".into(), 0, 0, Some(Launch::default()));
        op_level.push_tensor(TensorInfo::for_test(op, Io::Output, 0, DType::FLOAT16, vec![4]));
        let copied = match_runs(&level_all(7), &op_level, &MatchOptions::default());
        assert_eq!((copied.pairs.len(), copied.unmatched_target.len()), (1, 0));
        let differing = match_runs(&level_all(8), &op_level, &MatchOptions::default());
        assert_eq!(differing.unmatched_target, vec![1]);
    }
}
