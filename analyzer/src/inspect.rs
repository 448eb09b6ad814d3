//! `analyzer inspect PATH`: each op with its inputs and outputs and their statistics (decoded where the
//! source stored none). [`report::inspect`](crate::report::inspect) prints it.

use crate::filter::Filter;
use crate::index::TensorId;
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

/// The ops of `source` that `filter` keeps, in execution order, with their tensors.
pub fn inspect(source: &dyn Source, filter: &Filter) -> Vec<OpRow> {
    let index = source.index();
    let ops = filter.op_ids(index);
    ops.par_iter()
        .map(|&o| {
            let op = &index.ops[o];
            let tensors = op.inputs.iter().chain(&op.outputs).map(|&t| tensor_row(source, t)).collect();
            OpRow {
                name: op.name.clone(),
                op_type: op.op_type.clone(),
                step: op.step,
                rank: op.rank,
                tensors,
            }
        })
        .collect()
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
