//! The report of `analyzer convert`: what was written, what was skipped and why, and what failed (an
//! error: some tensor could not be converted).

use super::{human_bytes, plural};
use crate::convert::Converted;
use anyhow::{bail, Result};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

/// Summarises `results` on standard output; an error when any tensor failed.
pub fn write(dir: &Path, results: &[Converted]) -> Result<()> {
    let (mut files, mut bytes) = (0u64, 0u64);
    let mut notes: BTreeMap<&str, u64> = BTreeMap::new();
    let mut skipped: BTreeMap<&str, u64> = BTreeMap::new();
    let mut failed = Vec::new();
    for r in results {
        match r {
            Converted::Written { bytes: b, note } => {
                files += 1;
                bytes += b;
                if let Some(note) = note {
                    *notes.entry(note).or_default() += 1;
                }
            }
            Converted::Skipped(why) => *skipped.entry(why).or_default() += 1,
            Converted::Failed(why) => failed.push(why.as_str()),
        }
    }
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    writeln!(out, "wrote {files} .npy files ({}) to {}", human_bytes(bytes), dir.display())?;
    for (note, n) in &notes {
        writeln!(out, "note: {note}: {n} tensor{}", plural(*n))?;
    }
    for (why, n) in &skipped {
        writeln!(out, "skipped {n} tensor{}: {why}", plural(*n))?;
    }
    if let Some(first) = failed.first() {
        for why in &failed {
            writeln!(out, "failed: {why}")?;
        }
        bail!(
            "{} tensor{} could not be converted; first: {first}",
            failed.len(),
            plural(failed.len() as u64)
        );
    }
    Ok(())
}
