//! The reports of `analyzer inspect`: a table per op, or JSON.

use super::{fmt_num, Format, Output};
use crate::inspect::OpRow;
use crate::sources::Source;
use anyhow::Result;
use std::io::Write;

/// Writes the listing in `format` to standard output.
pub fn write(source: &dyn Source, rows: &[OpRow], format: Format) -> Result<()> {
    let mut out = Output::open(None)?;
    let index = source.index();
    match format {
        Format::Json => {
            let report = serde_json::json!({
                "source": { "path": source.root(), "kind": source.kind() },
                "warnings": index.warnings,
                "ops": rows,
            });
            serde_json::to_writer_pretty(&mut out, &report)?;
            writeln!(out)?;
        }
        _ => print_table(&mut out, source, rows)?,
    }
    out.flush()?;
    Ok(())
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
