//! Sources: everything the analyzer can read, behind one trait.
//!
//! A source is opened once, builds its [`Index`](crate::index::Index) (ops, tensors, statistics, hashes) without touching
//! tensor bytes where it can, and decodes a tensor's values only when a metric asks for them.

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};

/// Which reader a path needs, decided from what is on disk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Detected {
    Capture(PathBuf),
    Msprobe(Vec<PathBuf>),
    CannDump(PathBuf),
    NpyDir(PathBuf),
}

/// Looks at `path` and names the reader it needs, or says why none fits.
pub fn detect(path: &Path) -> Result<Detected> {
    let meta = std::fs::metadata(path).with_context(|| format!("cannot open {}", path.display()))?;
    if meta.is_file() {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        let parent = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        // Files that belong to a source read as a whole: name that source rather than fail on CANN's names.
        if name.ends_with(".npy") {
            bail!(
                "{}: a single .npy file is not a run: give the directory that holds it ({}), read as a \
                 directory of .npy files (--op selects this file's op)",
                path.display(),
                parent.display()
            );
        }
        if name.ends_with(".acc") || name == "stream.json" {
            bail!(
                "{}: one file of an accutrace capture: give the capture's directory, the one that holds \
                 manifest.json ({})",
                path.display(),
                parent.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new(".")).display()
            );
        }
        if is_rank_summary_name(name) {
            bail!(
                "{}: a rank summary written by `analyzer scan`, not a run: read summaries with `analyzer merge \
                 {}` (every rank's), or give the capture that was scanned",
                path.display(),
                parent.display()
            );
        }
        return Ok(match name {
            "dump.json" => Detected::Msprobe(vec![path.to_path_buf()]),
            "manifest.json" => Detected::Capture(path.parent().unwrap_or(Path::new(".")).to_path_buf()),
            _ => Detected::CannDump(path.to_path_buf()),
        });
    }
    // A capture without its manifest.json (not copied, removed) is still one: its streams are read and the
    // missing manifest leads the report (docs/CAPTURE_FORMAT.md, "Completeness").
    if path.join("manifest.json").is_file() || holds_capture_streams(path) {
        return Ok(Detected::Capture(path.to_path_buf()));
    }
    // The collector made a stream's directory and stopped before its stream.json (a full disk at its first
    // segment): what is left is no CANN dump tree; say what it is.
    if let Some(stream) = stream_dir_without_stream_json(path) {
        bail!(
            "{}: an accutrace run directory that holds no readable capture: there is no manifest.json and {} \
             has no stream.json; if the collector logged an `accutrace: ...` line on the job's stderr (e.g. no \
             space left on device), fix that and record again",
            path.display(),
            stream.display()
        );
    }
    if holds_rank_summaries(path) {
        bail!(
            "{}: a directory of rank summaries written by `analyzer scan` (rank*.parquet), not a run: read \
             them with `analyzer merge {}`, or give the capture that was scanned",
            path.display(),
            path.display()
        );
    }
    let dump_jsons = find_files_named(path, "dump.json", 4)?;
    if !dump_jsons.is_empty() {
        return Ok(Detected::Msprobe(dump_jsons));
    }
    let (npy_files, other_files) = census_files(path, 7)?;
    if npy_files > 0 && other_files == 0 {
        return Ok(Detected::NpyDir(path.to_path_buf()));
    }
    if npy_files + other_files > 0 {
        return Ok(Detected::CannDump(path.to_path_buf()));
    }
    bail!(
        "{}: empty directory: expected an accutrace capture (manifest.json), a CANN dump tree, \
         a directory of .npy files, or an msprobe dump (dump.json)",
        path.display()
    )
}

/// Why `b` is the run `a` itself, when it is: the same directory, a copy of a capture (the same
/// `manifest.json`: one start time, the same processes), or a copy of another source (every op launched at
/// the same dump timestamps, which two runs never share). Comparing a run with itself proves nothing, so
/// the commands that compare two runs lead with this.
pub fn same_run(a: &dyn Source, b: &dyn Source) -> Option<String> {
    let (ra, rb) = (a.root(), b.root());
    if let (Ok(x), Ok(y)) = (ra.canonicalize(), rb.canonicalize()) {
        if x == y {
            return Some(format!(
                "RUN2 is RUN: {} and {} are the same directory; comparing a run with itself proves nothing",
                ra.display(),
                rb.display()
            ));
        }
    }
    let manifest = |r: &Path| std::fs::read(r.join("manifest.json")).ok();
    if let (Some(x), Some(y)) = (manifest(ra), manifest(rb)) {
        if x == y {
            return Some(format!(
                "RUN2 is RUN: {} is a copy of {} (the same manifest.json: one start, the same processes); \
                 comparing a run with itself proves nothing",
                rb.display(),
                ra.display()
            ));
        }
        return None;
    }
    let launches = |s: &dyn Source| -> Option<Vec<(u32, u64)>> {
        s.index().ops.iter().map(|o| o.launch().map(|l| (o.rank, l.timestamp_us))).collect()
    };
    match (launches(a), launches(b)) {
        (Some(x), Some(y)) if !x.is_empty() && x == y => Some(format!(
            "RUN2 is RUN: {} holds the same dump as {} (every op at the same dump timestamp); comparing a run \
             with itself proves nothing",
            rb.display(),
            ra.display()
        )),
        _ => None,
    }
}

/// A collector stream's directory (`stream-*`) in `dir` without its `stream.json`, when `dir` holds no
/// stream with one (else it is a capture, read as such).
fn stream_dir_without_stream_json(dir: &Path) -> Option<PathBuf> {
    let entries = std::fs::read_dir(dir).ok()?;
    entries.flatten().map(|e| e.path()).find(|p| {
        p.is_dir()
            && p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("stream-"))
            && !p.join("stream.json").exists()
    })
}

/// `rank{R:06}.parquet`, the name `analyzer scan` gives a rank's summary.
fn is_rank_summary_name(name: &str) -> bool {
    name.strip_prefix("rank")
        .and_then(|n| n.strip_suffix(".parquet"))
        .is_some_and(|r| !r.is_empty() && r.bytes().all(|b| b.is_ascii_digit()))
}

/// Whether `dir` holds rank summaries (`rank*.parquet`) and no other file: `analyzer scan`'s output.
fn holds_rank_summaries(dir: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else { return false };
    let files: Vec<String> = entries
        .flatten()
        .filter(|e| e.path().is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    !files.is_empty() && files.iter().all(|n| is_rank_summary_name(n))
}

/// Whether `dir` holds a capture's stream directory (one with a `stream.json`).
fn holds_capture_streams(dir: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else { return false };
    entries.flatten().any(|e| e.path().join("stream.json").is_file())
}

/// Counts `.npy` files and other data files under `dir` (name-mapping files do not count as data), at
/// most `depth` levels down and at most a few thousand entries: enough to tell the kinds apart.
fn census_files(dir: &Path, depth: u32) -> Result<(usize, usize)> {
    let (mut npy, mut other) = (0, 0);
    let mut pending = vec![(dir.to_path_buf(), depth)];
    let mut seen = 0usize;
    while let Some((d, left)) = pending.pop() {
        for entry in std::fs::read_dir(&d).with_context(|| format!("cannot list {}", d.display()))? {
            let entry = entry.with_context(|| format!("cannot list {}", d.display()))?;
            seen += 1;
            if seen > 4096 {
                return Ok((npy, other));
            }
            let name = entry.file_name().to_string_lossy().into_owned();
            let file_type = entry.file_type()?;
            if file_type.is_dir() {
                if left > 0 {
                    pending.push((entry.path(), left - 1));
                }
            } else if name.ends_with(".npy") {
                npy += 1;
            } else if name != "mapping.csv" && name != "mapping.json" {
                other += 1;
            }
        }
    }
    Ok((npy, other))
}

/// Files called `name` under `dir`, at most `depth` levels down, sorted (msprobe: `step*/rank*/dump.json`).
fn find_files_named(dir: &Path, name: &str, depth: u32) -> Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    let candidate = dir.join(name);
    if candidate.is_file() {
        found.push(candidate);
        return Ok(found);
    }
    if depth == 0 {
        return Ok(found);
    }
    let mut subdirs: Vec<PathBuf> = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("cannot list {}", dir.display()))? {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            subdirs.push(entry.path());
        }
    }
    subdirs.sort();
    for sub in subdirs {
        found.extend(find_files_named(&sub, name, depth - 1)?);
    }
    Ok(found)
}

mod buffers;
pub(crate) use buffers::{
    keeping_buffers_of_any_size, release_large_buffers, with_lent_buffers, LentBuffers,
};
pub mod cann;
pub mod capture;
pub mod device_stats;
mod missing_steps;
pub mod msprobe;
pub mod npy;
mod source;

pub use source::{HostBlocks, SliceBlocks, Source};

/// Opens any supported source at `path`.
pub fn open(path: &Path) -> Result<Box<dyn Source>> {
    match detect(path)? {
        Detected::CannDump(root) => Ok(Box::new(cann::CannDumpSource::open(&root)?)),
        Detected::Capture(root) => Ok(Box::new(capture::CaptureSource::open(&root)?)),
        Detected::NpyDir(root) => Ok(Box::new(npy::NpyDirSource::open(&root)?)),
        Detected::Msprobe(dumps) => Ok(Box::new(msprobe::MsprobeSource::open(path, &dumps)?)),
    }
}
