//! msprobe's own comparison table (its `compare_result` CSV), row for row: every argument the target
//! recorded, tensor or not, in dump order, with its bench counterpart, msprobe's metrics and its `Result`
//! verdict. The verdict is msprobe's per-call rule (`metrics::verdict`), so it is decided here, over all
//! these rows, and handed to the compared tensors' rows too.
//!
//! An msprobe dump lists its arguments itself ([`Index::recorded_args`]: dtype names such as
//! `torch.float32`, statistics as `dump.json` spells them, data file names). Other sources list their
//! tensors, described the way msprobe would: torch dtype names, integer statistics as integers with no
//! mean or norm (what msprobe records for integer tensors), no data file (`-1`).

use super::row::CompareRow;
use crate::filter::Filter;
use crate::index::{Index, RecordedArg, TensorId};
use crate::metrics::verdict::{call_of, verdicts, Verdict, VerdictRow};
use crate::metrics::{Cell, MsprobeMetrics};
use accutrace_formats::msprobe::py_float_repr;
use accutrace_formats::stats::TensorStats;
use std::collections::HashMap;

/// One row of msprobe's table.
#[derive(Clone, Debug)]
pub struct MsprobeRow {
    /// The target's argument.
    pub target: RecordedArg,
    /// Its bench counterpart, when one matched.
    pub bench: Option<RecordedArg>,
    /// Cosine, EucDist, MaxAbsErr, MaxRelativeErr and the two ratios: measured for a compared tensor pair,
    /// "unsupported" for a matched pair that is not one, "N/A" without a counterpart.
    pub metrics: [Cell; 6],
    /// msprobe's `Result` and `Err_message`.
    pub verdict: Verdict,
    /// The row of [`super::Comparison::rows`] this argument was compared in.
    pub compared: Option<usize>,
}

/// The table for `rows` (the compared pairs) of target `ti` against bench `bi`, limited to `filter`.
pub(super) fn build(ti: &Index, bi: &Index, rows: &[CompareRow], filter: &Filter) -> Vec<MsprobeRow> {
    let compared: HashMap<TensorId, usize> = rows.iter().enumerate().map(|(i, r)| (r.target, i)).collect();
    let stats_of = |t: TensorId, side: fn(&CompareRow) -> Option<TensorStats>| {
        compared.get(&t).and_then(|&i| side(&rows[i]))
    };
    let target_args = arguments(ti, |t| stats_of(t, |r| r.target_stats).or(ti.tensors[t].stats));
    // The bench's statistics as the comparison measured them, by bench tensor.
    let bench_measured: HashMap<TensorId, TensorStats> =
        rows.iter().filter_map(|r| Some((r.bench?, r.bench_stats?))).collect();
    let bench_args = arguments(bi, |t| bench_measured.get(&t).copied().or(bi.tensors[t].stats));
    let bench_by_tensor: HashMap<TensorId, usize> =
        bench_args.iter().enumerate().filter_map(|(i, a)| Some((a.tensor?, i))).collect();
    let bench_by_name: HashMap<&str, usize> =
        bench_args.iter().enumerate().map(|(i, a)| (a.name.as_str(), i)).collect();

    let mut table: Vec<MsprobeRow> = Vec::new();
    for arg in target_args.into_iter().filter(|a| filter.keeps_at(&a.op_name, a.step, a.rank)) {
        let row = arg.tensor.and_then(|t| compared.get(&t).copied());
        let (bench, metrics) = match row {
            Some(i) => {
                let bench =
                    rows[i].bench.and_then(|b| bench_by_tensor.get(&b)).map(|&j| bench_args[j].clone());
                (bench, rows[i].msprobe.cells())
            }
            // A tensor the comparison did not pair, or an argument that is no tensor: matched by name, as
            // msprobe matches, without metrics.
            None => match bench_by_name.get(arg.name.as_str()) {
                Some(&j) if arg.tensor.is_none() => {
                    (Some(bench_args[j].clone()), MsprobeMetrics::unsupported().cells())
                }
                _ => (None, [Cell::NotApplicable; 6]),
            },
        };
        table.push(MsprobeRow {
            target: arg,
            bench,
            metrics,
            verdict: Verdict { level: crate::metrics::verdict::Level::Pass, messages: Vec::new() },
            compared: row,
        });
    }
    // One call's rows at a time, as `verdicts` groups them: the checks' text of every row held at once was
    // a second table the size of the comparison (#18: memory must not grow by copies per tensor).
    let mut start = 0;
    while start < table.len() {
        let call = call_of(&table[start].target.name);
        let end = start + table[start..].iter().take_while(|r| call_of(&r.target.name) == call).count();
        let checks: Vec<VerdictRow> = table[start..end].iter().map(verdict_row).collect();
        for (row, verdict) in table[start..end].iter_mut().zip(verdicts(&checks)) {
            row.verdict = verdict;
        }
        start = end;
    }
    table
}

/// What msprobe's per-call checks read of a row.
fn verdict_row(row: &MsprobeRow) -> VerdictRow {
    let (t, b) = (&row.target, row.bench.as_ref());
    let na = || "N/A".to_string();
    VerdictRow {
        name: t.name.clone(),
        matched: b.is_some(),
        npu_dtype: t.dtype_text(),
        bench_dtype: b.map_or_else(na, RecordedArg::dtype_text),
        npu_shape: t.shape.clone(),
        bench_shape: b.and_then(|b| b.shape.clone()),
        npu_requires_grad: bool_text(t.requires_grad),
        bench_requires_grad: b.map_or_else(na, |b| bool_text(b.requires_grad)),
        npu_max: t.stats[0].clone(),
        npu_min: t.stats[1].clone(),
        bench_max: b.map_or_else(na, |b| b.stats[0].clone()),
        bench_min: b.map_or_else(na, |b| b.stats[1].clone()),
        cosine: row.metrics[0],
        one_thousandth: row.metrics[4],
    }
}

/// `True`, `False` or `N/A`, as msprobe prints requires_grad.
pub fn bool_text(value: Option<bool>) -> String {
    match value {
        Some(true) => "True".into(),
        Some(false) => "False".into(),
        None => "N/A".into(),
    }
}

/// The arguments of `index` in its order: the ones it recorded (msprobe), else one per tensor, with the
/// statistics `stats` gives.
fn arguments(index: &Index, stats: impl Fn(TensorId) -> Option<TensorStats>) -> Vec<RecordedArg> {
    if !index.recorded_args.is_empty() {
        return index.recorded_args.clone();
    }
    (0..index.tensors.len())
        .map(|t| {
            let info = &index.tensors[t];
            let op = &index.ops[info.op];
            RecordedArg {
                name: index.tensor_label(t),
                op_name: op.name.clone(),
                step: op.step,
                rank: op.rank,
                tensor: Some(t),
                dtype: Some(info.dtype.torch_name().map_or_else(|| info.dtype.to_string(), str::to_string)),
                shape: Some(info.shape.clone()),
                requires_grad: info.requires_grad(),
                stats: stat_texts(stats(t).as_ref(), info.dtype),
                data_name: None,
            }
        })
        .collect()
}

/// Max, min, mean and L2 norm as msprobe records them: Python floats; for integer and bool tensors the
/// extremes as integers (`988`, `True`) and no mean or norm (`None`).
fn stat_texts(stats: Option<&TensorStats>, dtype: accutrace_formats::DType) -> [String; 4] {
    let none = || "None".to_string();
    let Some(s) = stats else { return std::array::from_fn(|_| none()) };
    if dtype == accutrace_formats::DType::BOOL {
        let b = |v: f64| if v != 0.0 { "True" } else { "False" }.to_string();
        return [b(s.max), b(s.min), none(), none()];
    }
    if !dtype.is_float() && dtype.kind() != accutrace_formats::dtype::Kind::Complex {
        let int = |v: f64| if v.is_finite() { format!("{v:.0}") } else { py_float_repr(v) };
        return [int(s.max), int(s.min), none(), none()];
    }
    [py_float_repr(s.max), py_float_repr(s.min), py_float_repr(s.mean), py_float_repr(s.l2_norm)]
}
