//! The reports of `analyzer inspect`: a table per op, CSV with a row per tensor, or JSON.

use super::{fmt_num, write_json, Format, Output};
use crate::inspect::{Inspection, OpRow};
use crate::sources::Source;
use anyhow::Result;
use std::io::Write;
use std::path::Path;

/// Writes the listing in `format` to `output` (standard output when `None`), led by the input problems.
pub fn write(source: &dyn Source, found: &Inspection, format: Format, output: Option<&Path>) -> Result<()> {
    let mut out = Output::open(output)?;
    let index = source.index();
    super::lead(&found.input_problems, format == Format::Table, output.is_some(), &mut out)?;
    let rows = &found.ops;
    match format {
        Format::Json => {
            // The keys in the sorted order a `Value` object writes them, as when the listing was one.
            #[derive(serde::Serialize)]
            struct Listing<'a> {
                input_problems: serde_json::Value,
                ops: OpsJson<'a>,
                source: serde_json::Value,
                warnings: serde_json::Value,
            }
            let report = Listing {
                input_problems: serde_json::to_value(&found.input_problems)?,
                ops: OpsJson(rows),
                source: serde_json::json!({ "path": source.root(), "kind": source.kind(), "about": source.about() }),
                warnings: serde_json::to_value(&index.warnings)?,
            };
            write_json(&mut out, "inspect", &report)?;
        }
        Format::Csv => write_csv(&mut out, rows)?,
        Format::Table => print_table(&mut out, source, rows)?,
    }
    out.flush()?;
    Ok(())
}

/// The ops as a JSON array, each op made a `Value` (its keys sorted, as the listing has always written them)
/// only as it is written: a tree of every op at once held three times the listing itself (#18: 594 against
/// 184 MiB anonymous for 198,840 tensors).
struct OpsJson<'a>(&'a [OpRow]);

impl serde::Serialize for OpsJson<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::{Error, SerializeSeq};
        let mut seq = s.serialize_seq(Some(self.0.len()))?;
        for op in self.0 {
            seq.serialize_element(&serde_json::to_value(op).map_err(S::Error::custom)?)?;
        }
        seq.end()
    }
}

/// One row per tensor: its op, where it sits, its layout, its statistics (empty when unknown), and why it
/// could not be decoded when it could not.
fn write_csv(out: &mut impl Write, rows: &[OpRow]) -> Result<()> {
    let mut w = csv::Writer::from_writer(out);
    w.write_record([
        "op",
        "op_type",
        "step",
        "rank",
        "io",
        "index",
        "dtype",
        "device_format",
        "device_shape",
        "shape",
        "original_op",
        "count",
        "min",
        "max",
        "mean",
        "l2norm",
        "nan",
        "inf",
        "error",
    ])?;
    let dims = |s: &[u64]| format!("{s:?}");
    for op in rows {
        for t in &op.tensors {
            let stat = |f: fn(&accutrace_formats::stats::TensorStats) -> String| {
                t.stats.as_ref().map(f).unwrap_or_default()
            };
            w.write_record([
                op.name.clone(),
                op.op_type.clone(),
                op.step.to_string(),
                op.rank.to_string(),
                t.io.to_string(),
                t.index.to_string(),
                t.dtype.clone(),
                t.device_format.clone().unwrap_or_default(),
                t.device_shape.as_deref().map(dims).unwrap_or_default(),
                dims(&t.shape),
                t.original_op.clone().unwrap_or_default(),
                stat(|s| s.count.to_string()),
                stat(|s| s.min.to_string()),
                stat(|s| s.max.to_string()),
                stat(|s| s.mean.to_string()),
                stat(|s| s.l2_norm.to_string()),
                stat(|s| s.nan.to_string()),
                stat(|s| (s.pos_inf + s.neg_inf).to_string()),
                t.error.clone().unwrap_or_default(),
            ])?;
        }
    }
    w.flush()?;
    Ok(())
}

fn print_table(out: &mut impl Write, source: &dyn Source, rows: &[OpRow]) -> Result<()> {
    let index = source.index();
    let (ops, tensors) = (rows.len(), rows.iter().map(|r| r.tensors.len()).sum::<usize>());
    // The totals of what is listed; the source's own when a filter left some out.
    let (all_ops, all_tensors) = (index.ops.len(), index.tensors.len());
    let counts = if ops == all_ops {
        format!("{ops} ops, {tensors} tensors")
    } else {
        format!("{ops} of {all_ops} ops, {tensors} of {all_tensors} tensors (selected by --step/--rank/--op)")
    };
    writeln!(out, "{} ({}): {counts}", source.root().display(), source.kind())?;
    for line in source.about() {
        writeln!(out, "  {line}")?;
    }
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
            if let Some(arg) = t.arg_index {
                writeln!(out, "            kernel argument: {arg} (arg_index)")?;
            }
        }
    }
    Ok(())
}
