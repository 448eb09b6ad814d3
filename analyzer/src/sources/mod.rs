//! Sources: everything the analyzer can read, behind one trait.
//!
//! A source is opened once, builds its [`Index`] (ops, tensors, statistics, hashes) without touching
//! tensor bytes where it can, and decodes a tensor's values only when a metric asks for them.

use crate::index::{Index, TensorId};
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};

/// A run to analyse: a capture, a CANN dump tree, a directory of .npy files, or an msprobe dump.
pub trait Source: Send + Sync {
    /// Short name of the source kind (`capture`, `cann-dump`, `npy`, `msprobe`).
    fn kind(&self) -> &'static str;
    /// What the user pointed at.
    fn root(&self) -> &Path;
    /// Ops and tensors, without bytes.
    fn index(&self) -> &Index;
    /// The tensor's values in host layout (device format undone, padding cropped), C order, as f32.
    fn read_values(&self, tensor: TensorId, out: &mut Vec<f32>) -> Result<()>;
    /// The 64-bit content hash of the tensor's raw bytes: stored when the source has one, else computed.
    fn content_hash(&self, tensor: TensorId) -> Result<u64>;
}

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
        return Ok(match name {
            "dump.json" => Detected::Msprobe(vec![path.to_path_buf()]),
            "manifest.json" => Detected::Capture(path.parent().unwrap_or(Path::new(".")).to_path_buf()),
            _ => Detected::CannDump(path.to_path_buf()),
        });
    }
    if path.join("manifest.json").is_file() {
        return Ok(Detected::Capture(path.to_path_buf()));
    }
    let dump_jsons = find_files_named(path, "dump.json", 4)?;
    if !dump_jsons.is_empty() {
        return Ok(Detected::Msprobe(dump_jsons));
    }
    let mut has_npy = false;
    let mut has_other = false;
    for entry in std::fs::read_dir(path).with_context(|| format!("cannot list {}", path.display()))? {
        let entry = entry.with_context(|| format!("cannot list {}", path.display()))?;
        let file_name = entry.file_name();
        let name = file_name.to_string_lossy();
        if name.ends_with(".npy") {
            has_npy = true;
        } else if entry.file_type().map(|t| t.is_file()).unwrap_or(false) {
            has_other = true;
        }
    }
    if has_npy && !has_other {
        return Ok(Detected::NpyDir(path.to_path_buf()));
    }
    if has_npy || has_other || dir_has_subdirs(path)? {
        return Ok(Detected::CannDump(path.to_path_buf()));
    }
    bail!(
        "{}: empty directory: expected an accutrace capture (manifest.json), a CANN dump tree, \
         a directory of .npy files, or an msprobe dump (dump.json)",
        path.display()
    )
}

fn dir_has_subdirs(path: &Path) -> Result<bool> {
    for entry in std::fs::read_dir(path).with_context(|| format!("cannot list {}", path.display()))? {
        if entry?.file_type()?.is_dir() {
            return Ok(true);
        }
    }
    Ok(false)
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

pub mod cann;
pub mod host;
pub mod npy;

/// Opens any supported source at `path`.
pub fn open(path: &Path) -> Result<Box<dyn Source>> {
    match detect(path)? {
        Detected::CannDump(root) => Ok(Box::new(cann::CannDumpSource::open(&root)?)),
        Detected::NpyDir(root) => Ok(Box::new(npy::NpyDirSource::open(&root)?)),
        other => bail!("{}: {other:?} sources are not supported yet", path.display()),
    }
}
