//! `analyzer inspect PATH`: each op with its inputs and outputs and their statistics (decoded where the
//! source stored none). [`report::inspect`](crate::report::inspect) prints it.

use crate::filter::Filter;
use crate::index::TensorId;
use crate::outcome::Outcome;
use crate::problems::{InputProblem, InputProblems};
use crate::progress::Progress;
use crate::sources::Source;
use accutrace_formats::stats::TensorStats;
use rayon::prelude::*;
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
    let total: usize = ops.iter().map(|&o| index.ops[o].inputs.len() + index.ops[o].outputs.len()).sum();
    let bar = Progress::new("inspect", total as u64, !progress);
    let rows: Vec<OpRow> = ops
        .par_iter()
        .map(|&o| {
            let op = &index.ops[o];
            let tensors: Vec<TensorRow> =
                op.inputs.iter().chain(&op.outputs).map(|&t| tensor_row(source, t)).collect();
            bar.inc(tensors.len() as u64);
            OpRow {
                name: op.name.clone(),
                op_type: op.op_type.clone(),
                step: op.step,
                rank: op.rank,
                tensors,
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

fn tensor_row(source: &dyn Source, t: TensorId) -> TensorRow {
    let info = &source.index().tensors[t];
    let (stats, error) = match &info.stats {
        Some(stats) => (Some(*stats), None),
        None if info.has_data => {
            let mut values = Vec::new();
            match source.read_values(t, &mut values) {
                Ok(()) => (Some(TensorStats::of_f32(&values, info.dtype)), None),
                Err(err) => (None, Some(format!("{err:#}"))),
            }
        }
        None => (None, None),
    };
    TensorRow {
        io: info.io.as_str(),
        index: info.index,
        dtype: info.dtype.to_string(),
        device_format: info.device_format.clone(),
        device_shape: info.device_shape.clone(),
        shape: info.shape.clone(),
        original_op: info.original_op.as_ref().map(|(n, i)| format!("{n}:{i}")),
        stats,
        error,
    }
}
