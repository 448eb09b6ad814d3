//! `analyzer inspect PATH`: each op with its inputs and outputs and their statistics.

use super::Outcome;
use crate::cli::InspectArgs;
use crate::index::TensorId;
use crate::report::fmt_num;
use crate::sources::{self, Source};
use accutrace_formats::stats::TensorStats;
use anyhow::Result;
use rayon::prelude::*;
use serde::Serialize;
use std::io::Write;

#[derive(Serialize)]
struct TensorRow {
    io: &'static str,
    index: u32,
    dtype: String,
    device_format: Option<String>,
    device_shape: Option<Vec<u64>>,
    shape: Vec<u64>,
    original_op: Option<String>,
    stats: Option<TensorStats>,
    error: Option<String>,
}

#[derive(Serialize)]
struct OpRow {
    name: String,
    op_type: String,
    step: u64,
    rank: u32,
    tensors: Vec<TensorRow>,
}

pub fn run(args: InspectArgs) -> Result<Outcome> {
    let source = sources::open(&args.path)?;
    let index = source.index();
    let ops = args.filter.op_ids(index);
    let rows: Vec<OpRow> = ops
        .par_iter()
        .map(|&o| {
            let op = &index.ops[o];
            let tensors =
                op.inputs.iter().chain(&op.outputs).map(|&t| tensor_row(source.as_ref(), t)).collect();
            OpRow {
                name: op.name.clone(),
                op_type: op.op_type.clone(),
                step: op.step,
                rank: op.rank,
                tensors,
            }
        })
        .collect();
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    if args.json {
        let report = serde_json::json!({
            "source": { "path": args.path, "kind": source.kind() },
            "warnings": index.warnings,
            "ops": rows,
        });
        serde_json::to_writer_pretty(&mut out, &report)?;
        writeln!(out)?;
    } else {
        print_table(&mut out, source.as_ref(), &rows)?;
    }
    Ok(Outcome::Pass)
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

fn print_table(out: &mut impl Write, source: &dyn Source, rows: &[OpRow]) -> Result<()> {
    let index = source.index();
    writeln!(
        out,
        "{} ({}): {} ops, {} tensors",
        source.root().display(),
        source.kind(),
        index.ops.len(),
        index.tensors.len()
    )?;
    for warning in &index.warnings {
        writeln!(out, "warning: {warning}")?;
    }
    for op in rows {
        writeln!(out, "\n{} [{}] step {} rank {}", op.name, op.op_type, op.step, op.rank)?;
        writeln!(
            out,
            "  {:<9} {:<22} {:<16} {:>9} {:>11} {:>11} {:>11} {:>11} {:>6} {:>6}",
            "tensor", "dtype/format", "shape", "count", "min", "max", "mean", "l2norm", "nan", "inf"
        )?;
        for t in &op.tensors {
            let dtype = match &t.device_format {
                Some(format) => format!("{}/{}", t.dtype, format),
                None => t.dtype.clone(),
            };
            let shape = format!("{:?}", t.shape);
            let label = format!("{}.{}", &t.io[..t.io.len().min(3)], t.index);
            match (&t.stats, &t.error) {
                (Some(s), _) => writeln!(
                    out,
                    "  {:<9} {:<22} {:<16} {:>9} {:>11} {:>11} {:>11} {:>11} {:>6} {:>6}",
                    label,
                    dtype,
                    shape,
                    s.count,
                    fmt_num(s.min),
                    fmt_num(s.max),
                    fmt_num(s.mean),
                    fmt_num(s.l2_norm),
                    s.nan,
                    s.pos_inf + s.neg_inf
                )?,
                (None, Some(err)) => {
                    writeln!(out, "  {label:<9} {dtype:<22} {shape:<16} cannot decode: {err}")?
                }
                (None, None) => writeln!(out, "  {label:<9} {dtype:<22} {shape:<16} (no data)")?,
            }
            if let Some(original) = &t.original_op {
                writeln!(out, "            original op: {original}")?;
            }
        }
    }
    Ok(())
}
