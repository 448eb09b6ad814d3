//! Training steps of ops whose dump says nothing about them: eager (single-operator) dumps.
//!
//! A capture says where each op's step came from (docs/CAPTURE_FORMAT.md, "Steps"): the graph dump's path
//! and the framework's hook are exact as recorded; marker counts are recomputed from the stream's step marks
//! ([`accutrace_formats::capture::step_marks`]); and ops with nothing telling their step get steps inferred
//! here from the period of their op sequence, which the index then says it did (a warning line).
//!
//! Inference: a training step starts with the same ops every time (the forward pass's first ops), while
//! its length may vary (a step skipped after an overflow runs no optimizer ops). The shortest prefix of the
//! sequence whose non-overlapping occurrences stop changing as it grows marks the step starts.

use crate::index::{Index, OpId};
use accutrace_formats::capture::{step_marks, StepMark, StepSource};
use accutrace_formats::dump::Launch;

/// Prefix lengths tried, and how much longer a prefix must still find the same starts.
const MIN_PREFIX: usize = 4;
const MAX_PREFIX: usize = 64;
const CONFIRM: usize = 8;

/// Step starts inferred from a sequence of op types.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InferredSteps {
    /// Index of each step's first op (the first is 0).
    pub starts: Vec<usize>,
    /// The op types each step starts with.
    pub prefix_len: usize,
}

impl InferredSteps {
    /// The step of op `i` of the sequence.
    pub fn step_of(&self, i: usize) -> u64 {
        (self.starts.partition_point(|&s| s <= i) as u64).saturating_sub(1)
    }
}

/// Non-overlapping occurrences of `types[..k]`, scanning from the start.
fn occurrences(types: &[&str], k: usize) -> Vec<usize> {
    let prefix = &types[..k];
    let mut starts = Vec::new();
    let mut i = 0;
    while i + k <= types.len() {
        if &types[i..i + k] == prefix {
            starts.push(i);
            i += k;
        } else {
            i += 1;
        }
    }
    starts
}

/// The steps of `types` (op types in execution order, the first op starting a step), or `None` when the
/// sequence does not repeat.
pub fn infer(types: &[&str]) -> Option<InferredSteps> {
    let n = types.len();
    let mut k = MIN_PREFIX.min(n / 2);
    while k >= 1 && k + CONFIRM <= n && k <= MAX_PREFIX {
        let starts = occurrences(types, k);
        if starts.len() < 2 {
            return None;
        }
        let longer = (k + CONFIRM).min(n);
        if occurrences(types, longer) == starts {
            return Some(InferredSteps { starts, prefix_len: k });
        }
        k += 1;
    }
    None
}

/// Resolves the steps of one capture stream's ops (`ops`: index id and where its step came from, in stream
/// order; each op's launch is the index's) from its step marks, or by inference; notes in `index.warnings`
/// what it inferred. `starts_at_first_segment`: no segment of the stream was deleted (ring policy).
pub fn resolve_capture_steps(
    index: &mut Index,
    ops: &[(OpId, StepSource)],
    marks: &[StepMark],
    starts_at_first_segment: bool,
    stream: &str,
) {
    let launch = |index: &Index, id: OpId| index.ops[id].launch().unwrap_or_default();
    let hook_called = marks.iter().any(|m| m.source == StepSource::Hook);
    let marker_marks = marks.iter().any(|m| m.source == StepSource::Marker);
    if marker_marks {
        let marker_ops: Vec<OpId> =
            ops.iter().filter(|(_, source)| *source == StepSource::Marker).map(|(id, _)| *id).collect();
        let launches: Vec<Launch> = marker_ops.iter().map(|&id| launch(index, id)).collect();
        let first = step_marks::first_step(starts_at_first_segment, marks);
        for (id, step) in marker_ops.iter().zip(step_marks::marker_steps(&launches, marks, first)) {
            index.ops[*id].step = step;
        }
    }
    // Ops with nothing telling their step. Once the framework called accutrace_step_end(), every single-op
    // dump came from a per-step path, the first from step 0's (recorded before the first call as NONE):
    // nothing is unknown. Without a call, the step-0 path told nothing.
    if hook_called {
        return;
    }
    let mut unknown: Vec<OpId> = ops
        .iter()
        .filter(|(_, source)| matches!(source, StepSource::None | StepSource::Hook))
        .map(|(id, _)| *id)
        .collect();
    if unknown.is_empty() {
        return;
    }
    unknown.sort_by_key(|&id| (launch(index, id), id));
    infer_steps(
        index,
        &unknown,
        stream,
        "no Python hook and no ACCUTRACE_STEP_MARKER told them; `analyzer record` installs the hook, or set \
         ACCUTRACE_STEP_MARKER for exact steps",
    );
}

/// Gives `ops` (one stream's ops that nothing told a step, in execution order) the steps inferred from the
/// period of their op types, and says in `index.warnings` that it did (or that the sequence does not
/// repeat: they keep step 0), with `how_to_know`: how the user gets exact steps.
pub fn infer_steps(index: &mut Index, ops: &[OpId], stream: &str, how_to_know: &str) {
    if ops.is_empty() {
        return;
    }
    let types: Vec<String> = ops.iter().map(|&id| index.ops[id].op_type.to_string()).collect();
    let types: Vec<&str> = types.iter().map(String::as_str).collect();
    match infer(&types) {
        Some(inferred) => {
            for (i, &id) in ops.iter().enumerate() {
                index.ops[id].step = inferred.step_of(i);
            }
            let prefix: Vec<&str> = types[..inferred.prefix_len.min(4)].to_vec();
            index.warnings.push(format!(
                "{stream}: steps INFERRED from the period of the op sequence: {} steps, each starting with \
                 {} ({how_to_know})",
                inferred.starts.len(),
                prefix.join(", ")
            ));
        }
        None => index.warnings.push(format!(
            "{stream}: {} ops carry no step and their sequence does not repeat: all are step 0",
            ops.len()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(skip: bool) -> Vec<&'static str> {
        let mut v =
            vec!["GatherV2", "Add", "LayerNorm", "MatMulV2", "MatMulV2", "SoftmaxV2", "MatMulV2", "Add"];
        v.extend(["LayerNormGrad", "MatMulV2", "MatMulV2", "MatMulV2", "UnsortedSegmentSum"]);
        if !skip {
            v.extend(["ApplyAdamD"; 5]);
        }
        v.push("AmpUpdateScale");
        v
    }

    #[test]
    fn steps_of_different_lengths_are_found_by_their_common_start() {
        let mut seq = Vec::new();
        for s in 0..5 {
            seq.extend(step(s == 2));
        }
        let inferred = infer(&seq).unwrap();
        assert_eq!(inferred.starts.len(), 5);
        let lens: Vec<usize> = inferred.starts.windows(2).map(|w| w[1] - w[0]).collect();
        assert_eq!(lens, [19, 19, 14, 19]);
        assert_eq!((inferred.step_of(0), inferred.step_of(18), inferred.step_of(19)), (0, 0, 1));
        assert_eq!(inferred.step_of(seq.len() - 1), 4);
    }

    #[test]
    fn a_sequence_that_does_not_repeat_is_one_step() {
        assert_eq!(infer(&step(false)), None);
        assert_eq!(infer(&[]), None);
        assert_eq!(infer(&["A"]), None);
    }

    #[test]
    fn a_repeated_first_op_inside_a_step_is_not_a_step_start() {
        // MatMulV2 opens the step and recurs inside it: a longer prefix tells them apart.
        let one = [
            "MatMulV2", "Add", "MatMulV2", "Relu", "MatMulV2", "Add", "Mul", "Sub", "Div", "Exp", "Log",
            "Neg",
        ];
        let seq: Vec<&str> = one.iter().chain(one.iter()).chain(one.iter()).copied().collect();
        let inferred = infer(&seq).unwrap();
        assert_eq!(inferred.starts, [0, 12, 24]);
    }
}
