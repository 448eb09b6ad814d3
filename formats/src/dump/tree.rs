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
    /// From a `rank{R}` directory right above the `{time}` directory ([`DumpLocation::rank`]).
    pub rank: Option<u32>,
    /// From the `{model}` directory (graph dumps).
    pub model_name: Option<String>,
    /// From the `{model_id}` directory (graph dumps).
    pub model_id: Option<u32>,
    /// From the `{step}` directory (graph dumps), or a per-step dump path above a single-operator layout
    /// ([`DumpLocation::step_path`]).
    pub step: Option<u64>,
    /// The `YYYYMMDDhhmmss` directory.
    pub time_dir: Option<String>,
}

impl DumpEntry {
    /// The rank of the job the file belongs to: its `rank{R}` directory, else its device (on one node the
    /// launcher gives each rank its own device), else 0.
    pub fn job_rank(&self) -> u32 {
        self.rank.or(self.device_id).unwrap_or(0)
    }
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
        add_file(&mut tree, &DumpLocation::of(dir), &mapping, root.clone(), &file_name);
    }
    tree.entries.sort_by(|a, b| {
        let key = |e: &DumpEntry| (e.step, e.name.timestamp_us, e.name.task_id, e.rank, e.device_id);
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
        let location = DumpLocation::of(dir);
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

fn add_file(
    tree: &mut DumpTree,
    location: &DumpLocation,
    mapping: &NameMapping,
    path: PathBuf,
    file_name: &str,
) {
    match parse_file_name(mapping.resolve(file_name)) {
        Ok(name) => tree.entries.push(DumpEntry {
            op_name: name.op_name.clone(),
            path,
            name,
            device_id: location.device_id,
            rank: location.rank,
            model_name: location.model_name.clone(),
            model_id: location.model_id,
            step: location.step.or(location.step_path),
            time_dir: location.time_dir.clone(),
        }),
        Err(e) => tree.warnings.push(e.in_file(&path)),
    }
}

/// The name of a per-step dump path: a framework's step hook sets the dump path `{dump_path}/step{N}` at
/// every step (msprobe does, and the collector's `accutrace_step_end`), so that single-operator dumps,
/// which carry no step, land under their step (docs/CANN.md §5).
pub const STEP_DIR_PREFIX: &str = "step";

/// The step of a per-step dump directory (`step3`; msprobe's `step_3` too), if `name` is one.
pub fn step_dir_number(name: &str) -> Option<u64> {
    let rest = name.strip_prefix(STEP_DIR_PREFIX)?;
    number(rest.strip_prefix('_').unwrap_or(rest))
}

/// Where a directory sits in a dump tree, read from its trailing path components.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DumpLocation {
    /// The `{device}` directory.
    pub device_id: Option<u32>,
    /// The `{model}` directory (graph dumps).
    pub model_name: Option<String>,
    /// The `{model_id}` directory (graph dumps).
    pub model_id: Option<u32>,
    /// The `{step}` directory (graph dumps).
    pub step: Option<u64>,
    /// The per-step dump path above a single-operator layout: `.../step{N}/{time}/{device}`, or with a
    /// `rank{R}` directory between, as msprobe writes (`step_dir_number`).
    pub step_path: Option<u64>,
    /// A `rank{R}` directory right above the `{time}` directory: msprobe's `step{N}/rank{R}/`, or a dump
    /// path per rank. On a job of several nodes it tells the ranks apart where device ids cannot: each
    /// node numbers its devices from 0.
    pub rank: Option<u32>,
    /// The `YYYYMMDDhhmmss` directory.
    pub time_dir: Option<String>,
}

impl DumpLocation {
    /// The location of `dir`: graph `.../{time}/{device}/{model}/{model_id}/{step}`, or single-op
    /// `.../{time}/{device}` (under a per-step path or not); nothing known otherwise.
    pub fn of(dir: &Path) -> DumpLocation {
        let parts: Vec<String> = dir
            .components()
            .filter_map(|c| match c {
                Component::Normal(s) => Some(s.to_string_lossy().into_owned()),
                _ => None,
            })
            .collect();
        let n = parts.len();
        let is_time = |s: &str| s.len() == 14 && s.bytes().all(|b| b.is_ascii_digit());
        // The `rank{R}` directory right above the time directory at `time`, if there is one.
        let rank_above = |time: usize| {
            let above = parts[..time].last()?;
            u32::try_from(number(above.strip_prefix("rank")?)?).ok()
        };
        if n >= 5 && is_time(&parts[n - 5]) {
            if let (Some(device), Some(model_id), Some(step)) =
                (number(&parts[n - 4]), number(&parts[n - 2]), number(&parts[n - 1]))
            {
                return DumpLocation {
                    device_id: u32::try_from(device).ok(),
                    model_name: Some(parts[n - 3].clone()),
                    model_id: u32::try_from(model_id).ok(),
                    step: Some(step),
                    step_path: None,
                    rank: rank_above(n - 5),
                    time_dir: Some(parts[n - 5].clone()),
                };
            }
        }
        if n >= 2 && is_time(&parts[n - 2]) {
            if let Some(device) = number(&parts[n - 1]) {
                let above: Vec<&str> = parts[..n - 2].iter().rev().take(2).map(String::as_str).collect();
                let step_path = match above.as_slice() {
                    [rank, step, ..] if rank.strip_prefix("rank").and_then(number).is_some() => {
                        step_dir_number(step)
                    }
                    [step, ..] => step_dir_number(step),
                    [] => None,
                };
                return DumpLocation {
                    device_id: u32::try_from(device).ok(),
                    step_path,
                    rank: rank_above(n - 2),
                    time_dir: Some(parts[n - 2].clone()),
                    ..DumpLocation::default()
                };
            }
        }
        DumpLocation::default()
    }
}

fn number(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_of_graph_single_op_and_per_step_directories() {
        let of = |p: &str| DumpLocation::of(Path::new(p));
        let graph = of("/d/20240101000000/3/net/1/17");
        assert_eq!(
            (graph.device_id, graph.model_id, graph.step, graph.step_path),
            (Some(3), Some(1), Some(17), None)
        );
        assert_eq!(graph.model_name.as_deref(), Some("net"));
        let single = of("/d/20240101000000/0");
        assert_eq!((single.device_id, single.step, single.step_path), (Some(0), None, None));
        assert_eq!(of("/r/.dump/step12/20240101000000/0").step_path, Some(12));
        assert_eq!(of("/dump/step_4/rank1/20240101000000/1").step_path, Some(4), "msprobe's layout");
        assert_eq!(of("/dump/steps/20240101000000/1").step_path, None);
        assert_eq!(of("/dump/step4x/20240101000000/1").step_path, None);
        assert_eq!(
            of("/dump/step2/other/20240101000000/1").step_path,
            None,
            "only a rank dir may sit between"
        );
        assert_eq!(of("/d/2024/0"), DumpLocation::default(), "not a dump time directory");
        // Rank directories: msprobe's, and a dump path per rank (graph and single-op layouts).
        let msprobe = of("/dump/step_4/rank9/20240101000000/1");
        assert_eq!((msprobe.rank, msprobe.device_id, msprobe.step_path), (Some(9), Some(1), Some(4)));
        let graph = of("/dump/rank12/20240101000000/3/net/1/17");
        assert_eq!((graph.rank, graph.device_id, graph.step), (Some(12), Some(3), Some(17)));
        assert_eq!(of("/dump/rank3/20240101000000/0").rank, Some(3));
        assert_eq!(of("/dump/ranks/20240101000000/0").rank, None);
        assert_eq!(of("/dump/rank3/x/20240101000000/0").rank, None, "only right above the time directory");
        assert_eq!(of("/d/20240101000000/3/net/1/17").rank, None);
        assert_eq!(
            (step_dir_number("step7"), step_dir_number("step"), step_dir_number("stepx")),
            (Some(7), None, None)
        );
    }
}
