//! `analyzer inspect PATH`: each op with its inputs and outputs and their statistics (decoded where the
//! source stored none). [`report::inspect`](crate::report::inspect) prints it.

use crate::filter::Filter;
use crate::index::TensorId;
use crate::outcome::Outcome;
use crate::overflow::decoded_stats;
use crate::problems::{InputProblem, InputProblems};
use crate::progress::Progress;
use crate::sources::Source;
use crate::threads::tensors_in_flight;
use accutrace_formats::stats::TensorStats;
use serde::Serialize;

/// One tensor of an op, as `inspect` lists it.
#[derive(Serialize)]
pub struct TensorRow {
    pub io: &'static str,
    pub index: u32,
    pub dtype: String,
    pub device_format: Option<String>,
    pub device_shape: Option<Vec<u64>>,
    pub shape: Vec<u64>,
    pub original_op: Option<String>,
    /// The tensor's position among the kernel's arguments, where the dump records it (an exception dump);
    /// absent from JSON elsewhere.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arg_index: Option<u32>,
    pub stats: Option<TensorStats>,
    pub error: Option<String>,
}

/// One op with its tensors.
#[derive(Serialize)]
pub struct OpRow {
    pub name: String,
    pub op_type: String,
    pub step: u64,
    pub rank: u32,
    pub tensors: Vec<TensorRow>,
}

/// What `inspect` found: the ops, and what could not be read.
pub struct Inspection {
    pub ops: Vec<OpRow>,
    /// What the source misses and the tensors that could not be decoded: they lead the listing.
    pub input_problems: InputProblems,
}

impl Inspection {
    /// `inspect` lists; it finds nothing to fail on, unless the input had problems (main decides).
    pub fn outcome(&self) -> Outcome {
        Outcome::Pass
    }
}

/// The ops of `source` that `filter` keeps, in execution order, with their tensors (`progress`: a bar on
/// stderr, when it is a terminal, while they are read).
pub fn inspect(source: &dyn Source, filter: &Filter, progress: bool) -> Inspection {
    let index = source.index();
    let ops = filter.op_ids(index);
    let tensors: Vec<TensorId> = ops.iter().flat_map(|&o| index.ops[o].tensors()).collect();
    let bar = Progress::new("inspect", tensors.len() as u64, !progress);
    // A tensor without recorded statistics is decoded to compute them: within the memory budget.
    let decodes = |t: TensorId| !index.tensors[t].has_stats() && index.tensors[t].has_data;
    let mut rows = tensors_in_flight(source, &tensors, decodes, |values, k| {
        let row = tensor_row(source, tensors[k], values);
        bar.inc(1);
        row
    })
    .into_iter();
    let rows: Vec<OpRow> = ops
        .iter()
        .map(|&o| {
            let op = &index.ops[o];
            OpRow {
                name: op.name.to_string(),
                op_type: op.op_type.to_string(),
                step: op.step,
                rank: op.rank,
                tensors: rows.by_ref().take(op.tensors().len()).collect(),
            }
        })
        .collect();
    bar.finish();
    let mut input_problems = InputProblems::of_sources(&[source]);
    for op in &rows {
        for t in op.tensors.iter().filter(|t| t.error.is_some()) {
            let label = format!("{}.{}.{}", op.name, t.io, t.index);
            input_problems
                .push(InputProblem::unreadable(format!("{label}: {}", t.error.as_deref().unwrap_or(""))));
        }
    }
    Inspection { ops: rows, input_problems }
}

/// Tensor `t`'s row; `values` is the buffer its values are decoded into (where the source recorded no
/// statistics and cannot lend them from its map).
fn tensor_row(source: &dyn Source, t: TensorId, values: &mut Vec<f32>) -> TensorRow {
    let info = &source.index().tensors[t];
    let (stats, error) = match source.index().stats(t) {
        Some(stats) => (Some(stats), None),
        None if info.has_data => match decoded_stats(source, t, values) {
            Ok(stats) => (Some(stats), None),
            Err(err) => (None, Some(format!("{err:#}"))),
        },
        None => (None, None),
    };
    TensorRow {
        io: info.io.as_str(),
        index: info.index,
        dtype: info.dtype.to_string(),
        device_format: info.device_format().map(str::to_string),
        device_shape: info.device_shape().map(<[u64]>::to_vec),
        shape: info.shape.to_vec(),
        original_op: info.original_op().map(|(n, i)| format!("{n}:{i}")),
        arg_index: info.arg_index(),
        stats,
        error,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::threads::counting::Tensors;
    use std::sync::atomic::Ordering;

    /// Tensors of 512 MiB as f32 (one of them is what the budget allows at once) are read one at a time on a
    /// pool of four threads, where every thread read one at once before; each op keeps its own tensor's row,
    /// in execution order.
    #[test]
    fn large_tensors_are_read_one_at_a_time_and_rows_keep_their_ops() {
        let (large, small) = (128 << 20, 16);
        let elements: Vec<u64> = (0..16).map(|k| if k % 2 == 0 { large } else { small }).collect();
        let source = Tensors::new(&elements);
        let pool = rayon::ThreadPoolBuilder::new().num_threads(4).build().unwrap();
        let inspection = pool.install(|| inspect(&source, &Filter::default(), false));
        assert_eq!(source.reads.load(Ordering::SeqCst), 16, "every tensor read once");
        assert_eq!(source.large_most.load(Ordering::SeqCst), 1, "large tensors read at once");
        assert_eq!(inspection.ops.len(), 16);
        for (k, op) in inspection.ops.iter().enumerate() {
            assert_eq!(op.name, format!("layer_{k}/mm"));
            assert_eq!(op.tensors.len(), 1);
            let stats = op.tensors[0].stats.as_ref().expect("statistics of the values read");
            assert_eq!((stats.count, stats.max), (2, k as f64), "op {k}");
        }
        assert!(inspection.input_problems.is_empty());
    }
}
