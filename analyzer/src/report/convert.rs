//! The report of `analyzer convert`: the input problems first (what the source misses, the tensors that
//! could not be read or written), then what was written and what was skipped and why: a summary, or one
//! CSV row or JSON entry per tensor.

use super::{human_bytes, plural, write_json, Format, Output};
use crate::convert::{Converted, ConvertedTensor};
use crate::problems::InputProblems;
use anyhow::Result;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

/// Writes the report of the conversion into `dir` on standard output, in `format`, led by `problems`
/// (which hold every failed tensor).
pub fn write(
    dir: &Path,
    results: &[ConvertedTensor],
    format: Format,
    problems: &InputProblems,
) -> Result<()> {
    let mut out = Output::open(None)?;
    super::lead(problems, format == Format::Table, false, &mut out)?;
    match format {
        Format::Table => summary(&mut out, dir, results)?,
        Format::Csv => {
            let mut w = csv::Writer::from_writer(&mut out);
            w.write_record(["tensor", "file", "status", "bytes", "note"])?;
            for r in results {
                let (status, bytes, note) = match &r.result {
                    Converted::Written { bytes, note } => ("written", bytes.to_string(), note.clone()),
                    Converted::Skipped { reason } => ("skipped", String::new(), Some(reason.clone())),
                    Converted::Failed { reason } => ("failed", String::new(), Some(reason.clone())),
                };
                let file = r.file.display().to_string();
                w.write_record([r.tensor.as_str(), &file, status, &bytes, &note.unwrap_or_default()])?;
            }
            w.flush()?;
        }
        Format::Json => {
            let body = serde_json::json!({ "output": dir, "tensors": results, "input_problems": problems });
            write_json(&mut out, "convert", &body)?;
        }
    }
    out.flush()?;
    Ok(())
}

fn summary(out: &mut impl Write, dir: &Path, results: &[ConvertedTensor]) -> Result<()> {
    let (mut files, mut bytes) = (0u64, 0u64);
    let mut notes: BTreeMap<&str, u64> = BTreeMap::new();
    let mut skipped: BTreeMap<&str, u64> = BTreeMap::new();
    for r in results {
        match &r.result {
            Converted::Written { bytes: b, note } => {
                files += 1;
                bytes += b;
                if let Some(note) = note {
                    *notes.entry(note).or_default() += 1;
                }
            }
            Converted::Skipped { reason } => *skipped.entry(reason).or_default() += 1,
            Converted::Failed { .. } => {}
        }
    }
    writeln!(out, "wrote {files} .npy files ({}) to {}", human_bytes(bytes), dir.display())?;
    for (note, n) in &notes {
        writeln!(out, "note: {note}: {n} tensor{}", plural(*n))?;
    }
    for (why, n) in &skipped {
        writeln!(out, "skipped {n} tensor{}: {why}", plural(*n))?;
    }
    for r in results {
        if let Converted::Failed { reason } = &r.result {
            writeln!(out, "failed: {reason}")?;
        }
    }
    Ok(())
}
