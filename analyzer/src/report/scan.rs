//! The report of `analyzer scan`: the input problems first, then one line (CSV row, JSON entry) per rank
//! summary written (its events' file and its series' file).

use super::{human_bytes, plural, write_json, Format, Output};
use crate::problems::InputProblems;
use crate::ranks::summary::Written;
use anyhow::Result;
use std::io::Write;
use std::path::Path;

/// Writes what was written into `dir` on standard output, in `format`, led by `problems`.
pub fn write(dir: &Path, written: &[Written], format: Format, problems: &InputProblems) -> Result<()> {
    let mut out = Output::open(None)?;
    super::lead(problems, format == Format::Table, false, &mut out)?;
    match format {
        Format::Table => {
            let bytes: u64 = written.iter().map(|w| w.bytes + w.series_bytes).sum();
            let n = written.len() as u64;
            writeln!(
                out,
                "{n} rank summar{} ({}) in {}; gather them for `analyzer merge`",
                if n == 1 { "y" } else { "ies" },
                human_bytes(bytes),
                dir.display()
            )?;
            for w in written {
                writeln!(
                    out,
                    "  rank {}: {} event{}, {} -> {}; series: {} bucket{}, {} -> {}",
                    w.rank,
                    w.events,
                    plural(w.events),
                    human_bytes(w.bytes),
                    w.file.display(),
                    w.series_rows,
                    plural(w.series_rows),
                    human_bytes(w.series_bytes),
                    w.series_file.display()
                )?;
            }
        }
        Format::Csv => {
            let mut w = csv::Writer::from_writer(&mut out);
            w.write_record([
                "rank",
                "file",
                "events",
                "bytes",
                "series_file",
                "series_rows",
                "series_bytes",
            ])?;
            for s in written {
                w.write_record([
                    s.rank.to_string(),
                    s.file.display().to_string(),
                    s.events.to_string(),
                    s.bytes.to_string(),
                    s.series_file.display().to_string(),
                    s.series_rows.to_string(),
                    s.series_bytes.to_string(),
                ])?;
            }
            w.flush()?;
        }
        Format::Json => {
            let body = serde_json::json!({ "output": dir, "summaries": written, "input_problems": problems });
            write_json(&mut out, "scan", &body)?;
        }
    }
    out.flush()?;
    Ok(())
}
