//! The reports of `analyzer diff`: a terminal summary (the first differing op per step and rank, then the
//! census of every op that differed), CSV of the census, and JSON of everything.

use super::{fmt_num, Format, Output};
use crate::diff::{DiffReport, TensorDiff};
use anyhow::Result;
use std::io::Write;
use std::path::Path;

/// Writes the report in `format` to `output` (standard output when `None`).
pub fn write(r: &DiffReport, format: Format, output: Option<&Path>) -> Result<()> {
    let mut out = Output::open(output)?;
    match format {
        Format::Json => {
            serde_json::to_writer_pretty(&mut out, r)?;
            writeln!(out)?;
        }
        Format::Csv => write_csv(&mut out, r)?,
        Format::Table => print_table(&mut out, r)?,
    }
    out.flush()?;
    Ok(())
}

fn print_table(out: &mut impl Write, r: &DiffReport) -> Result<()> {
    writeln!(out, "diff {} vs {}", r.run1, r.run2)?;
    writeln!(
        out,
        "{} tensors compared by hash, {} differ ({} decoded to measure the difference)",
        r.compared_tensors, r.differing_tensors, r.decoded_tensors
    )?;
    if r.first_differences.is_empty() {
        writeln!(out, "\nThe runs are bit-identical on every matched tensor.")?;
    } else {
        writeln!(out, "\nFirst differing op per step and rank:")?;
        for f in &r.first_differences {
            writeln!(
                out,
                "  step {} rank {}: {} [{}] is {} ({})",
                f.step,
                f.rank,
                f.op,
                f.op_type,
                match f.verdict {
                    "nondeterministic" => "NONDETERMINISTIC: its inputs were identical",
                    "propagating" => "propagating a difference from its inputs",
                    _ => "different (its inputs were not dumped)",
                },
                size_of_difference(&f.output)
            )?;
            for input in &f.differing_inputs {
                writeln!(out, "      differing input: {input}")?;
            }
        }
        writeln!(out, "\nEvery op whose output differed ({}):", r.census.len())?;
        writeln!(out, "  {:<56} {:>6} {:>12} {:>10} {:>9}", "op", "times", "max |diff|", "max ulp", "share")?;
        const SHOWN: usize = 25;
        for c in r.census.iter().take(SHOWN) {
            if c.measured {
                writeln!(
                    out,
                    "  {:<56} {:>6} {:>12} {:>10} {:>8.2}%",
                    c.op,
                    c.times,
                    fmt_num(c.max_abs_diff),
                    c.max_ulp,
                    100.0 * c.max_share_differing
                )?;
            } else {
                writeln!(
                    out,
                    "  {:<56} {:>6}   hash differs, statistics moved by up to {}",
                    c.op,
                    c.times,
                    fmt_num(c.max_stats_delta)
                )?;
            }
        }
        if r.census.len() > SHOWN {
            writeln!(
                out,
                "  ... {} more ops (--format csv or json lists every one)",
                r.census.len() - SHOWN
            )?;
        }
        if r.census.iter().any(|c| !c.measured) {
            writeln!(out, "  (statistics-only capture: record with --mode tensor for element-wise figures)")?;
        }
    }
    for (side, list) in [("run1", &r.unmatched_run1), ("run2", &r.unmatched_run2)] {
        if !list.is_empty() {
            writeln!(out, "\n{} tensors only in {side}:", list.len())?;
            for name in list.iter().take(20) {
                writeln!(out, "  {name}")?;
            }
            if list.len() > 20 {
                writeln!(out, "  ... and {} more (use --format json for all)", list.len() - 20)?;
            }
        }
    }
    Ok(())
}

/// "max |diff| 0.5, 3 ulp, 1.2% of elements", or what the statistics say when there was no data.
fn size_of_difference(d: &TensorDiff) -> String {
    if d.measured {
        format!(
            "max |diff| {}, {} ulp, {:.2}% of elements",
            fmt_num(d.max_abs_diff),
            d.max_ulp,
            100.0 * d.share_differing()
        )
    } else {
        match d.stats_delta {
            Some(delta) => format!("hash differs; statistics moved by up to {}", fmt_num(delta)),
            None => "hash differs".to_string(),
        }
    }
}

fn write_csv(out: &mut impl Write, r: &DiffReport) -> Result<()> {
    let mut w = csv::Writer::from_writer(out);
    w.write_record([
        "op",
        "op_type",
        "times",
        "max_abs_diff",
        "max_ulp",
        "max_share_differing",
        "max_stats_delta",
        "measured",
    ])?;
    for c in &r.census {
        w.write_record([
            c.op.clone(),
            c.op_type.clone(),
            c.times.to_string(),
            c.max_abs_diff.to_string(),
            c.max_ulp.to_string(),
            c.max_share_differing.to_string(),
            c.max_stats_delta.to_string(),
            c.measured.to_string(),
        ])?;
    }
    w.flush()?;
    Ok(())
}
