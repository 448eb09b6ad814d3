//! Walking a dump directory tree (docs/CANN.md §1):
//! graph dumps `{dump_path}/{YYYYMMDDhhmmss}/{device_id}/{model_name}/{model_id}/{step}/files`, single-op
//! dumps `{dump_path}/{YYYYMMDDhhmmss}/{device_id}/files`.
//!
//! The position of a file is read from the trailing components of its directory's absolute path, so the
//! walk may start at any level (the dump path, a time dir, a device dir, a step dir, or one file).

use super::mapping::{NameMapping, MAPPING_FILE};
use super::names::{parse_file_name, DumpFileName};
use crate::error::{FormatError, Result};
use std::path::{Component, Path, PathBuf};

/// Nesting deeper than this is not a dump tree; the limit also bounds the walk.
const MAX_DEPTH: usize = 12;

/// One dump file found in a tree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DumpEntry {
    /// Where the file is.
    pub path: PathBuf,
    /// Parsed from the original name when the file was renamed through `mapping.csv`.
    pub name: DumpFileName,
    /// The op name from the (original) file name: sanitized, see `DumpData.op_name` for the real one.
    pub op_name: String,
    /// From the `{device}` directory.
    pub device_id: Option<u32>,
    /// From the `{model}` directory (graph dumps).
    pub model_name: Option<String>,
    /// From the `{model_id}` directory (graph dumps).
    pub model_id: Option<u32>,
    /// From the `{step}` directory (graph dumps).
    pub step: Option<u64>,
    /// The `YYYYMMDDhhmmss` directory.
    pub time_dir: Option<String>,
}

/// Entries in execution order, and the files that were skipped and why.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DumpTree {
    /// The dump files, in execution order.
    pub entries: Vec<DumpEntry>,
    /// Unparseable file names and unreadable mapping files; not fatal.
    pub warnings: Vec<FormatError>,
}

/// Walks `root` (a directory at any level of a dump tree, or a single dump file).
/// Entries are sorted by step, timestamp, task id (then device and path, for a stable order).
pub fn walk_dump_tree(root: &Path) -> Result<DumpTree> {
    let root = std::path::absolute(root).map_err(|e| FormatError::io(root, &e))?;
    let meta = std::fs::metadata(&root).map_err(|e| FormatError::io(&root, &e))?;
    let mut tree = DumpTree::default();
    if meta.is_dir() {
        walk(&root, 0, &mut tree)?;
    } else {
        let dir = root.parent().unwrap_or(Path::new("/"));
        let mapping = NameMapping::read_dir(dir).unwrap_or_else(|e| {
            tree.warnings.push(e);
            NameMapping::default()
        });
        let file_name = root.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        add_file(&mut tree, &Location::of(dir), &mapping, root.clone(), &file_name);
    }
    tree.entries.sort_by(|a, b| {
        let key = |e: &DumpEntry| (e.step, e.name.timestamp_us, e.name.task_id, e.device_id);
        key(a).cmp(&key(b)).then_with(|| a.path.cmp(&b.path))
    });
    Ok(tree)
}

fn walk(dir: &Path, depth: usize, tree: &mut DumpTree) -> Result<()> {
    let io = |e: std::io::Error| FormatError::io(dir, &e);
    let mut files = Vec::new();
    let mut subdirs = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let entry = entry.map_err(io)?;
        let path = entry.path();
        // Symlinks are followed to files only: a linked directory could loop.
        let file_type = entry.file_type().map_err(io)?;
        if file_type.is_dir() {
            subdirs.push(path);
        } else if file_type.is_file() || (file_type.is_symlink() && path.is_file()) {
            match entry.file_name().into_string() {
                Ok(name) => files.push((path, name)),
                Err(name) => {
                    tree.warnings.push(FormatError::whole("file name is not UTF-8").in_file(&dir.join(name)))
                }
            }
        }
    }
    if !files.is_empty() {
        let mapping = match files.iter().any(|(_, n)| n == MAPPING_FILE) {
            true => NameMapping::read_dir(dir).unwrap_or_else(|e| {
                tree.warnings.push(e);
                NameMapping::default()
            }),
            false => NameMapping::default(),
        };
        let location = Location::of(dir);
        for (path, name) in files {
            if name != MAPPING_FILE {
                add_file(tree, &location, &mapping, path, &name);
            }
        }
    }
    for sub in subdirs {
        if depth + 1 > MAX_DEPTH {
            tree.warnings.push(
                FormatError::whole(format!("deeper than {MAX_DEPTH} levels: not walked")).in_file(&sub),
            );
            continue;
        }
        walk(&sub, depth + 1, tree)?;
    }
    Ok(())
}

fn add_file(tree: &mut DumpTree, location: &Location, mapping: &NameMapping, path: PathBuf, file_name: &str) {
    match parse_file_name(mapping.resolve(file_name)) {
        Ok(name) => tree.entries.push(DumpEntry {
            op_name: name.op_name.clone(),
            path,
            name,
            device_id: location.device_id,
            model_name: location.model_name.clone(),
            model_id: location.model_id,
            step: location.step,
            time_dir: location.time_dir.clone(),
        }),
        Err(e) => tree.warnings.push(e.in_file(&path)),
    }
}

/// Where a directory sits in the tree, read from its trailing path components.
#[derive(Default)]
struct Location {
    device_id: Option<u32>,
    model_name: Option<String>,
    model_id: Option<u32>,
    step: Option<u64>,
    time_dir: Option<String>,
}

impl Location {
    fn of(dir: &Path) -> Location {
        let parts: Vec<String> = dir
            .components()
            .filter_map(|c| match c {
                Component::Normal(s) => Some(s.to_string_lossy().into_owned()),
                _ => None,
            })
            .collect();
        let n = parts.len();
        let is_time = |s: &str| s.len() == 14 && s.bytes().all(|b| b.is_ascii_digit());
        if n >= 5 && is_time(&parts[n - 5]) {
            if let (Some(device), Some(model_id), Some(step)) =
                (number(&parts[n - 4]), number(&parts[n - 2]), number(&parts[n - 1]))
            {
                return Location {
                    device_id: u32::try_from(device).ok(),
                    model_name: Some(parts[n - 3].clone()),
                    model_id: u32::try_from(model_id).ok(),
                    step: Some(step),
                    time_dir: Some(parts[n - 5].clone()),
                };
            }
        }
        if n >= 2 && is_time(&parts[n - 2]) {
            if let Some(device) = number(&parts[n - 1]) {
                return Location {
                    device_id: u32::try_from(device).ok(),
                    time_dir: Some(parts[n - 2].clone()),
                    ..Location::default()
                };
            }
        }
        Location::default()
    }
}

fn number(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}
