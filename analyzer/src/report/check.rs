//! The reports of `analyzer check`: a terminal checklist (input problems, then one line per item with its
//! reason, details and where to look), CSV of the items, and JSON of everything.

use super::{paint, write_json, Destination, Format, Output};
use crate::check::{CheckReport, Status};
use anyhow::Result;
use std::io::Write;

/// Writes the report in `format` to its destination, led by the input problems.
pub fn write(report: &CheckReport, format: Format, to: &Destination<'_>) -> Result<()> {
    let mut out = Output::open(to.output)?;
    super::lead(&report.input_problems, format == Format::Table, to.output.is_some(), &mut out)?;
    super::lead_warnings(&report.warnings, format == Format::Table, to, &mut out)?;
    match format {
        Format::Json => write_json(&mut out, "check", report)?,
        Format::Csv => {
            let mut w = csv::Writer::from_writer(&mut out);
            w.write_record(["item", "status", "reason", "look_at", "details"])?;
            for i in &report.items {
                w.write_record([
                    i.name,
                    status_word(i.status),
                    &i.reason,
                    &i.look_at,
                    &i.details.join("\n"),
                ])?;
            }
            w.flush()?;
        }
        Format::Table => print_table(&mut out, report, to.paints())?,
    }
    out.flush()?;
    Ok(())
}

/// The status as CSV and JSON spell it.
fn status_word(s: Status) -> &'static str {
    match s {
        Status::Pass => "pass",
        Status::Fail => "fail",
        Status::CantTell => "cant_tell",
    }
}

fn print_table(out: &mut impl Write, r: &CheckReport, colour: bool) -> Result<()> {
    match &r.runs[..] {
        [one] => writeln!(out, "pre-tuning checklist of {one}")?,
        runs => {
            writeln!(out, "pre-tuning checklist comparing")?;
            for (i, run) in runs.iter().enumerate() {
                writeln!(out, "  run {}: {run}", i + 1)?;
            }
        }
    }
    for i in &r.items {
        let (word, code) = match i.status {
            Status::Pass => ("pass      ", "1;32"),
            Status::Fail => ("FAIL      ", "1;31"),
            Status::CantTell => ("can't tell", "1;33"),
        };
        writeln!(out, "\n{} {:<16} {}", paint(word, code, colour), i.name, i.reason)?;
        for d in &i.details {
            writeln!(out, "             {d}")?;
        }
        if i.status != Status::Pass {
            writeln!(out, "             look at: {}", i.look_at)?;
        }
    }
    Ok(())
}
