//! Per-rank summaries: what `analyzer scan` writes on each node, one file per rank, and `analyzer merge`
//! reads on one host to answer the cross-rank question without the tensors. A summary is exactly a rank's
//! [`RankEvents`] (the events `analyzer ranks` reasons about), so merging gives the same answer as analysing
//! all ranks in one process. Format: JSON, versioned by `summary_version` (docs/CLI.md, `analyzer scan`).

use super::events::{RankEvents, RunEvents};
use crate::problems::InputProblem;
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The summary format's version; a reader refuses others.
pub const SUMMARY_VERSION: u32 = 1;

/// One rank of a job.
#[derive(Debug, Serialize, Deserialize)]
pub struct RankSummary {
    pub summary_version: u32,
    /// The run it was scanned from, as named to `scan`.
    pub run: String,
    pub rank: u32,
    pub events: RankEvents,
    /// What the scan could not place, and what its source misses (kept once, with the scan's lowest rank).
    pub warnings: Vec<String>,
    pub problems: Vec<InputProblem>,
}

/// The file name of rank `rank`'s summary.
pub fn file_name(rank: u32) -> String {
    format!("rank{rank:06}.events.json")
}

/// One summary written by [`write()`].
#[derive(Debug, Serialize)]
pub struct Written {
    pub rank: u32,
    pub file: PathBuf,
    pub events: u64,
    pub bytes: u64,
}

/// Writes one summary per rank of `run` into `dir` (created when missing).
pub fn write(run: &RunEvents, run_name: &str, dir: &Path) -> Result<Vec<Written>> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut written = Vec::new();
    for (n, rank) in run.ranks.iter().enumerate() {
        let first = n == 0;
        let summary = RankSummary {
            summary_version: SUMMARY_VERSION,
            run: run_name.to_string(),
            rank: rank.rank,
            events: rank.clone(),
            warnings: if first { run.warnings.clone() } else { Vec::new() },
            problems: if first { run.problems.clone() } else { Vec::new() },
        };
        let file = dir.join(file_name(rank.rank));
        let body = serde_json::to_vec(&summary)?;
        std::fs::write(&file, &body).with_context(|| format!("cannot write {}", file.display()))?;
        written.push(Written {
            rank: rank.rank,
            file,
            events: rank.events.len() as u64,
            bytes: body.len() as u64,
        });
    }
    Ok(written)
}

/// Every `rank*.events.json` in `dirs` (a directory, or one summary file), as one run. A rank found twice,
/// a file that is not a summary or of another version is an error naming the file.
pub fn read(dirs: &[PathBuf]) -> Result<RunEvents> {
    let mut files = Vec::new();
    for d in dirs {
        if d.is_file() {
            files.push(d.clone());
            continue;
        }
        let entries = std::fs::read_dir(d).with_context(|| format!("cannot read {}", d.display()))?;
        for e in entries {
            let path = e.with_context(|| format!("cannot read {}", d.display()))?.path();
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            if name.starts_with("rank") && name.ends_with(".events.json") {
                files.push(path);
            }
        }
    }
    if files.is_empty() {
        let named: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
        bail!("no rank summaries (rank*.events.json, written by `analyzer scan`) in {}", named.join(", "));
    }
    let mut run = RunEvents::default();
    let mut from: Vec<(u32, PathBuf)> = Vec::new();
    for file in files {
        let s = read_one(&file)?;
        if let Some((_, other)) = from.iter().find(|(r, _)| *r == s.rank) {
            bail!("rank {} is summarized twice: {} and {}", s.rank, other.display(), file.display());
        }
        if s.events.rank != s.rank {
            bail!("{}: says rank {} but holds rank {}'s events", file.display(), s.rank, s.events.rank);
        }
        from.push((s.rank, file));
        run.warnings.extend(s.warnings);
        run.problems.extend(s.problems);
        run.ranks.push(s.events);
    }
    run.ranks.sort_by_key(|r| r.rank);
    Ok(run)
}

fn read_one(file: &Path) -> Result<RankSummary> {
    let f = std::fs::File::open(file).with_context(|| format!("cannot open {}", file.display()))?;
    let value: serde_json::Value = serde_json::from_reader(std::io::BufReader::new(f))
        .with_context(|| format!("{}: not a JSON rank summary", file.display()))?;
    match value.get("summary_version").and_then(|v| v.as_u64()) {
        Some(v) if v == u64::from(SUMMARY_VERSION) => {}
        Some(v) => bail!(
            "{}: summary version {v}; this analyzer reads version {SUMMARY_VERSION} (scan again with it)",
            file.display()
        ),
        None => {
            bail!("{}: no summary_version: not a rank summary written by `analyzer scan`", file.display())
        }
    }
    serde_json::from_value(value).with_context(|| format!("{}: not a valid rank summary", file.display()))
}
