//! msprobe's comparison table for two msprobe dumps (`msprobe compare -tp target -gp bench`), row for
//! row: matching by exact full name, the six metrics, the statistics from `dump.json`, and the `Result` /
//! `Err_message` verdicts. Every cell is kept as the text msprobe writes, so a report can print it as is
//! and tests can compare it with msprobe's own CSV.

use super::{EntryKind, MsprobeDump, MsprobeTensor, StatValue};
use crate::metrics::msprobe::{msprobe_metrics, Cell, MsprobeMetrics, MsprobeOptions};
use crate::metrics::verdict::{messages_cell, verdicts, Level, VerdictRow};
use crate::metrics::RePrecision;
use accutrace_formats::{DType, Result};
use rayon::prelude::*;
use std::collections::HashMap;

/// One row of the table (target entry plus its bench match).
#[derive(Clone, Debug, PartialEq)]
pub struct CompareRow {
    pub npu_name: String,
    /// `None` when no bench entry has the same name.
    pub bench_name: Option<String>,
    pub npu_dtype: String,
    pub bench_dtype: String,
    pub npu_shape: String,
    pub bench_shape: String,
    pub npu_requires_grad: String,
    pub bench_requires_grad: String,
    pub metrics: MsprobeMetrics,
    /// NPU max, min, mean, l2norm then Bench max, min, mean, l2norm, as msprobe prints them.
    pub stats: [String; 8],
    pub result: Level,
    /// The Err_message cell (`[]` or a JSON list).
    pub err_message: String,
    /// The Data_name cell (`['a.pt', 'a.pt']`, `['-1', '-1']` for non-tensors).
    pub data_name: String,
}

fn dtype_text(e: &MsprobeTensor) -> String {
    match &e.kind {
        EntryKind::Tensor(t) => t.dtype_name.clone(),
        EntryKind::Scalar { type_name, .. } | EntryKind::Other { type_name, .. } => {
            format!("<class '{type_name}'>")
        }
        EntryKind::None => "N/A".into(),
    }
}

fn shape_of(e: &MsprobeTensor) -> Option<Vec<u64>> {
    match &e.kind {
        EntryKind::Tensor(t) => Some(t.shape.clone()),
        EntryKind::Scalar { .. } | EntryKind::Other { .. } => Some(Vec::new()),
        EntryKind::None => None,
    }
}

fn shape_text(s: &Option<Vec<u64>>) -> String {
    match s {
        Some(dims) => format!("[{}]", dims.iter().map(u64::to_string).collect::<Vec<_>>().join(", ")),
        None => "N/A".into(),
    }
}

fn requires_grad_text(e: &MsprobeTensor) -> String {
    match e.tensor().and_then(|t| t.requires_grad) {
        Some(true) => "True".into(),
        Some(false) => "False".into(),
        None => "N/A".into(),
    }
}

fn stats_of(e: &MsprobeTensor) -> [String; 4] {
    match &e.kind {
        EntryKind::Tensor(t) => [t.max.py_repr(), t.min.py_repr(), t.mean.py_repr(), t.norm.py_repr()],
        EntryKind::Scalar { value, .. } => std::array::from_fn(|_| value.py_repr()),
        _ => std::array::from_fn(|_| StatValue::None.py_repr()),
    }
}

fn data_name_of(e: &MsprobeTensor) -> String {
    e.tensor().and_then(|t| t.data_name.clone()).unwrap_or_else(|| "-1".into())
}

/// The metrics of a matched pair: loads both tensors when both sides have data files.
pub fn pair_metrics(
    target: &MsprobeDump,
    n: &MsprobeTensor,
    bench: &MsprobeDump,
    b: &MsprobeTensor,
) -> Result<MsprobeMetrics> {
    let (Some(nt), Some(bt)) = (n.tensor(), b.tensor()) else {
        return Ok(MsprobeMetrics::unsupported());
    };
    if nt.data_name.is_none() || bt.data_name.is_none() {
        return Ok(MsprobeMetrics::unsupported());
    }
    let (nd, nshape, nv) = target.load_values_f64(n)?;
    let (bd, bshape, bv) = bench.load_values_f64(b)?;
    if nshape != bshape {
        return Ok(MsprobeMetrics::shape_unmatched());
    }
    let opts = MsprobeOptions {
        zero_dim: nshape.is_empty(),
        re_precision: RePrecision::for_dtypes(loaded(nd), loaded(bd)),
    };
    Ok(msprobe_metrics(&nv, &bv, &opts))
}

/// msprobe widens bf16 to f32 when it loads a `.pt`; everything else keeps its dtype.
fn loaded(d: DType) -> DType {
    if d == DType::BF16 {
        DType::FLOAT
    } else {
        d
    }
}

/// The full table in target dump order (msprobe lists every target entry; unmatched ones have no bench).
pub fn compare_dumps(target: &MsprobeDump, bench: &MsprobeDump) -> Result<Vec<CompareRow>> {
    let by_name: HashMap<&str, &MsprobeTensor> = bench.entries.iter().map(|e| (e.name.as_str(), e)).collect();
    let metrics: Vec<Result<MsprobeMetrics>> = target
        .entries
        .par_iter()
        .map(|n| match by_name.get(n.name.as_str()) {
            Some(b) => pair_metrics(target, n, bench, b),
            None => Ok(MsprobeMetrics::unsupported()),
        })
        .collect();
    let mut rows = Vec::with_capacity(target.entries.len());
    for (n, m) in target.entries.iter().zip(metrics) {
        let b = by_name.get(n.name.as_str()).copied();
        let [n0, n1, n2, n3] = stats_of(n);
        let [b0, b1, b2, b3] = b.map(stats_of).unwrap_or_else(|| std::array::from_fn(|_| "N/A".into()));
        let na = || "N/A".to_string();
        rows.push(CompareRow {
            npu_name: n.name.clone(),
            bench_name: b.map(|b| b.name.clone()),
            npu_dtype: dtype_text(n),
            bench_dtype: b.map_or_else(na, dtype_text),
            npu_shape: shape_text(&shape_of(n)),
            bench_shape: b.map_or_else(na, |b| shape_text(&shape_of(b))),
            npu_requires_grad: requires_grad_text(n),
            bench_requires_grad: b.map_or_else(na, requires_grad_text),
            metrics: m?,
            stats: [n0, n1, n2, n3, b0, b1, b2, b3],
            result: Level::Pass,
            err_message: String::new(),
            data_name: format!("['{}', '{}']", data_name_of(n), b.map_or_else(|| "-1".into(), data_name_of)),
        });
    }
    let vrows: Vec<VerdictRow> = rows
        .iter()
        .zip(&target.entries)
        .map(|(r, n)| VerdictRow {
            name: r.npu_name.clone(),
            matched: r.bench_name.is_some(),
            npu_dtype: r.npu_dtype.clone(),
            bench_dtype: r.bench_dtype.clone(),
            npu_shape: shape_of(n),
            bench_shape: r.bench_name.as_deref().and_then(|b| by_name.get(b)).and_then(|b| shape_of(b)),
            npu_requires_grad: r.npu_requires_grad.clone(),
            bench_requires_grad: r.bench_requires_grad.clone(),
            npu_max: r.stats[0].clone(),
            npu_min: r.stats[1].clone(),
            bench_max: r.stats[4].clone(),
            bench_min: r.stats[5].clone(),
            cosine: r.metrics.cosine,
            one_thousandth: r.metrics.one_thousandth_err_ratio,
        })
        .collect();
    for (row, v) in rows.iter_mut().zip(verdicts(&vrows)) {
        row.err_message = messages_cell(&v);
        row.result = v.level;
    }
    Ok(rows)
}

impl CompareRow {
    /// The metric cells as text, in CSV order.
    pub fn metric_texts(&self) -> [String; 6] {
        self.metrics.cells().map(|c: Cell| c.to_string())
    }
}
