//! Directories of `.npy` files, as the vendor tools and `analyzer convert` write them.
//!
//! File names (docs/CLI.md), tried in this order on the name without `.npy`:
//! - `{dump file name}.{input|output}.{i}` (msaccucmp's convert; the prefix is a CANN dump file name),
//!   or `{op_type}.{op}.{order}.{input|output}.{i}` (`analyzer convert`);
//! - `{op_name}.{output_index}.{timestamp}` (vendor benchmark dumps, `sim-train bench`);
//! - anything else: `{name}`, the op's output 0.
//!
//! `step{N}` and `rank{N}` directories give step and rank. A `mapping.csv` (`{file name or stem},{original}`)
//! or a `mapping.json` (`sim-train bench`: `[{"file", "op_name", "op_type", "output_index"}]`; `analyzer
//! convert` adds `"original_op"` and `"original_output_index"`, fusion provenance) in a directory or any
//! directory above it restores the real names that sanitizing lost.
//!
//! Indexing maps each file and parses its header only, so data pages are never read.

use super::source::Source;
use crate::index::{Index, Io, Launch, TensorId, TensorInfo};
use crate::problems::InputProblem;
use accutrace_formats::dump::{parse_file_name, MappedFile, NameMapping};
use accutrace_formats::npy::NpyView;
use accutrace_formats::stats::content_hash;
use accutrace_formats::tensor::host_bytes::HostBytes;
use accutrace_formats::DType;
use anyhow::{Context, Result};
use rayon::prelude::*;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Nesting deeper than this is not walked (it also stops symlink loops).
const MAX_DEPTH: usize = 16;
const MAPPING_CSV: &str = "mapping.csv";
const MAPPING_JSON: &str = "mapping.json";

pub struct NpyDirSource {
    root: PathBuf,
    index: Index,
    /// The file of each tensor (`TensorInfo::locator` indexes it).
    files: Vec<PathBuf>,
}

/// What a file name (and the mapping files) say about the tensor a file holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NpyName {
    pub op_name: String,
    pub op_type: String,
    pub io: Io,
    pub index: u32,
    /// When the op ran: a dump file name's fields, a vendor name's timestamp, or convert's execution order.
    pub launch: Option<Launch>,
    /// Fusion provenance (`analyzer convert` keeps it in `mapping.json`): the framework op and output.
    pub original_op: Option<(String, u32)>,
}

/// One entry of `sim-train bench`'s `mapping.json`.
#[derive(Clone, Debug, Default)]
struct JsonEntry {
    op_name: String,
    op_type: Option<String>,
    output_index: Option<u32>,
    original_op: Option<(String, u32)>,
}

/// The mapping files of one directory.
#[derive(Default)]
struct DirMapping {
    csv: NameMapping,
    json: HashMap<String, JsonEntry>,
}

/// The mappings in effect for a directory: its own first, then its ancestors'.
type Mappings = Vec<Arc<DirMapping>>;

/// A `.npy` file found by the walk, before its header is read.
struct Found {
    path: PathBuf,
    name: NpyName,
    step: u64,
    rank: u32,
}

impl NpyDirSource {
    pub fn open(root: &Path) -> Result<Self> {
        let mut found = Vec::new();
        let mut warnings = Vec::new();
        let location = Location::default().enter(root.file_name().and_then(|n| n.to_str()).unwrap_or(""));
        walk(root, 0, &Vec::new(), location, &mut found, &mut warnings)?;
        // Headers only, in parallel: each file is mapped and its first bytes parsed. A file that does not
        // parse is an input problem; the others are read.
        let headers: Vec<Result<(Vec<u64>, DType)>> = found
            .par_iter()
            .map(|f| {
                let map = MappedFile::open(&f.path)?;
                let view = NpyView::parse(map.bytes()).map_err(|e| e.in_file(&f.path))?;
                Ok((view.shape, view.dtype))
            })
            .collect();
        let mut problems = Vec::new();
        let mut readable = Vec::with_capacity(found.len());
        let mut kept_headers = Vec::with_capacity(found.len());
        for (f, header) in found.into_iter().zip(headers) {
            match header {
                Ok(h) => {
                    readable.push(f);
                    kept_headers.push(h);
                }
                Err(e) => {
                    problems.push(InputProblem::incomplete(format!("{e:#}; the other files were read")))
                }
            }
        }
        if readable.is_empty() {
            if let Some(first) = problems.first() {
                anyhow::bail!("{}: no .npy file could be read; first: {}", root.display(), first.message);
            }
        }
        let (found, headers) = (readable, kept_headers);
        // Group files into ops: same place, step, rank, op and launch. The map's order (by directory and
        // name where launches tie or are unknown) is the arrival order the execution order falls back on.
        let mut groups: BTreeMap<OpKey, Vec<usize>> = BTreeMap::new();
        for (i, f) in found.iter().enumerate() {
            let dir = f.path.parent().map(Path::to_path_buf).unwrap_or_default();
            let key = OpKey {
                step: f.step,
                rank: f.rank,
                untimed: f.name.launch.is_none(),
                launch: f.name.launch.unwrap_or_default(),
                dir,
                op_name: f.name.op_name.clone(),
                op_type: f.name.op_type.clone(),
            };
            groups.entry(key).or_default().push(i);
        }
        let mut index = Index { warnings, problems, ..Index::default() };
        let mut files = Vec::with_capacity(found.len());
        for (key, mut members) in groups {
            members.sort_by_key(|&i| (found[i].name.io, found[i].name.index));
            if let Some(w) = members.windows(2).find(|w| {
                let (a, b) = (&found[w[0]].name, &found[w[1]].name);
                (a.io, a.index) == (b.io, b.index)
            }) {
                index.problems.push(InputProblem::incomplete(format!(
                    "{} and {} both hold {} {} of op {}: one is a copy, or names clash",
                    found[w[0]].path.display(),
                    found[w[1]].path.display(),
                    found[w[0]].name.io.as_str(),
                    found[w[0]].name.index,
                    key.op_name
                )));
            }
            let launch = (!key.untimed).then_some(key.launch);
            let op = index.push_op_at(key.op_name, key.op_type, key.step, key.rank, launch);
            for i in members {
                let (shape, dtype) = headers[i].clone();
                let original_op = found[i].name.original_op.clone().map(|(name, i)| (name.into(), i));
                index.push_tensor(
                    TensorInfo {
                        locator: files.len() as u64,
                        ..TensorInfo::new(op, found[i].name.io, found[i].name.index, dtype, shape)
                    }
                    .with_original_op(original_op),
                );
                files.push(found[i].path.clone());
            }
        }
        // Tensors find their file through `locator`: no table of ours to reorder.
        index.order_by_execution();
        Ok(NpyDirSource { root: root.to_path_buf(), index, files })
    }

    fn with_view<R>(&self, tensor: TensorId, f: impl FnOnce(&NpyView<'_>) -> Result<R>) -> Result<R> {
        let info = self.index.tensors.get(tensor).with_context(|| format!("no tensor {tensor}"))?;
        let path = &self.files[info.locator as usize];
        let map = MappedFile::open(path)?;
        let view = NpyView::parse(map.bytes()).map_err(|e| e.in_file(path))?;
        f(&view).with_context(|| path.display().to_string())
    }
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct OpKey {
    step: u64,
    rank: u32,
    untimed: bool,
    launch: Launch,
    dir: PathBuf,
    op_name: String,
    op_type: String,
}

impl Source for NpyDirSource {
    /// The values are read where they lie in the map; only other dtypes than f32 are converted (an npy pair
    /// of 8 MiB f32 tensors held about one tensor's size per thread for both sides).
    fn buffers_per_tensor(&self) -> u64 {
        1
    }

    fn kind(&self) -> &'static str {
        "npy"
    }

    fn root(&self) -> &Path {
        &self.root
    }

    fn index(&self) -> &Index {
        &self.index
    }

    fn read_values(&self, tensor: TensorId, out: &mut Vec<f32>) -> Result<()> {
        self.with_view(tensor, |view| view_values(view, out))
    }

    fn content_hash(&self, tensor: TensorId) -> Result<u64> {
        self.with_view(tensor, |view| Ok(view_hash(view)))
    }

    fn with_values(&self, tensor: TensorId, buf: &mut Vec<f32>, f: &mut dyn FnMut(&[f32])) -> Result<()> {
        self.with_view(tensor, |view| {
            match borrowed_f32(view) {
                Some(values) => f(values),
                None => {
                    view_values(view, buf)?;
                    f(buf);
                }
            }
            Ok(())
        })
    }

    fn read_values_and_hash(&self, tensor: TensorId, out: &mut Vec<f32>) -> Result<u64> {
        // One map and one parse for both; the hash reads pages the decode has just brought in.
        self.with_view(tensor, |view| {
            view_values(view, out)?;
            Ok(view_hash(view))
        })
    }

    fn read_host_bytes(&self, tensor: TensorId) -> Result<Option<HostBytes>> {
        self.with_view(tensor, |view| {
            // Already host bytes when stored in C order, little-endian; anything else takes the f32 path.
            let c_order = !view.fortran_order || view.shape.iter().filter(|&&d| d > 1).count() <= 1;
            Ok((c_order && !view.big_endian)
                .then(|| HostBytes { bytes: view.data.to_vec(), shape: view.shape.clone() }))
        })
    }
}

/// The array's values as f32 without a copy, when its data already is host f32 in C order (little-endian
/// f32 on a little-endian machine, 4-byte aligned, every element there): what [`view_values`] would
/// decode, bit for bit.
fn borrowed_f32<'a>(view: &NpyView<'a>) -> Option<&'a [f32]> {
    let c_order = !view.fortran_order || view.shape.iter().filter(|&&d| d > 1).count() <= 1;
    if !(cfg!(target_endian = "little") && c_order && !view.big_endian && view.dtype == DType::FLOAT) {
        return None;
    }
    let elements = usize::try_from(view.elements()).ok()?;
    if elements.checked_mul(4) != Some(view.data.len()) {
        return None;
    }
    // SAFETY: every bit pattern is a valid f32, and `align_to` only puts correctly aligned, whole f32s in
    // the middle slice; it borrows `view.data` for the same lifetime.
    let (head, values, tail) = unsafe { view.data.align_to::<f32>() };
    (head.is_empty() && tail.is_empty()).then_some(values)
}

/// Decodes the array's values in C order into `out`.
fn view_values(view: &NpyView<'_>, out: &mut Vec<f32>) -> Result<()> {
    let c_order = !view.fortran_order || view.shape.iter().filter(|&&d| d > 1).count() <= 1;
    if c_order && !view.big_endian {
        // The common case: decode straight into the caller's buffer (no allocation, no zero-fill).
        let elements =
            usize::try_from(view.elements()).context("npy array does not fit the address space")?;
        accutrace_formats::tensor::host::decode_reusing(view.dtype, view.data, elements, out)
            .map_err(|e| e.shifted(view.data_offset))?;
    } else {
        *out = view.to_f32_c_order()?;
    }
    Ok(())
}

/// Hashes the bytes as a little-endian C-order array would hold them, so that a big-endian or Fortran file
/// hashes like the same tensor from any other source (and two different layouts never collide).
fn view_hash(view: &NpyView<'_>) -> u64 {
    let data = view.data_le();
    let width = (view.dtype.bits().unwrap_or(8) / 8) as usize;
    if view.fortran_order && view.shape.iter().filter(|&&d| d > 1).count() > 1 && width > 0 {
        content_hash(&fortran_bytes_to_c(&data, &view.shape, width))
    } else {
        content_hash(&data)
    }
}

/// Reorders column-major elements of `width` bytes into row-major order.
fn fortran_bytes_to_c(data: &[u8], shape: &[u64], width: usize) -> Vec<u8> {
    let dims: Vec<usize> = shape.iter().map(|&d| d as usize).collect();
    let mut strides = vec![1usize; dims.len()];
    for k in 1..dims.len() {
        strides[k] = strides[k - 1] * dims[k - 1];
    }
    let mut out = Vec::with_capacity(data.len());
    let mut at = vec![0usize; dims.len()];
    for _ in 0..data.len() / width {
        let offset: usize = at.iter().zip(&strides).map(|(i, s)| i * s).sum();
        out.extend_from_slice(&data[offset * width..(offset + 1) * width]);
        for k in (0..dims.len()).rev() {
            at[k] += 1;
            if at[k] < dims[k] {
                break;
            }
            at[k] = 0;
        }
    }
    out
}

/// Step and rank read from `step{N}` / `rank{N}` directory names.
#[derive(Clone, Copy, Default)]
struct Location {
    step: u64,
    rank: u32,
}

impl Location {
    fn enter(mut self, dir_name: &str) -> Location {
        if let Some(n) = dir_name.strip_prefix("step").and_then(number) {
            self.step = n;
        } else if let Some(n) =
            dir_name.strip_prefix("rank").and_then(number).and_then(|n| u32::try_from(n).ok())
        {
            self.rank = n;
        }
        self
    }
}

fn number(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

fn walk(
    dir: &Path,
    depth: usize,
    parent: &Mappings,
    location: Location,
    found: &mut Vec<Found>,
    warnings: &mut Vec<String>,
) -> Result<()> {
    let list = || format!("cannot list {}", dir.display());
    let mut files = Vec::new();
    let mut subdirs = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(list)? {
        let entry = entry.with_context(list)?;
        let path = entry.path();
        let Ok(name) = entry.file_name().into_string() else {
            warnings.push(format!("{}: file name is not UTF-8; skipped", path.display()));
            continue;
        };
        // `metadata` follows symlinks; the depth limit stops loops.
        let meta = std::fs::metadata(&path).with_context(|| format!("cannot read {}", path.display()))?;
        if meta.is_dir() {
            subdirs.push((path, name));
        } else {
            files.push((path, name));
        }
    }
    files.sort();
    subdirs.sort();
    let mut mappings = parent.clone();
    let own = read_mappings(dir, &files, warnings);
    if let Some(own) = own {
        mappings.insert(0, Arc::new(own));
    }
    for (path, name) in files {
        if let Some(stem) = name.strip_suffix(".npy") {
            let name = name_of(stem, &name, &mappings);
            found.push(Found { path, name, step: location.step, rank: location.rank });
        } else if name != MAPPING_CSV && name != MAPPING_JSON {
            warnings.push(format!("{}: not a .npy file; skipped", path.display()));
        }
    }
    for (sub, name) in subdirs {
        if depth + 1 > MAX_DEPTH {
            warnings.push(format!("{}: deeper than {MAX_DEPTH} levels; not read", sub.display()));
            continue;
        }
        walk(&sub, depth + 1, &mappings, location.enter(&name), found, warnings)?;
    }
    Ok(())
}

/// The directory's own mapping files, if it has any. An unreadable mapping is a warning, not a failure:
/// the files are still usable under their sanitized names.
fn read_mappings(dir: &Path, files: &[(PathBuf, String)], warnings: &mut Vec<String>) -> Option<DirMapping> {
    let has = |n: &str| files.iter().any(|(_, name)| name == n);
    if !has(MAPPING_CSV) && !has(MAPPING_JSON) {
        return None;
    }
    let mut mapping = DirMapping::default();
    if has(MAPPING_CSV) {
        match NameMapping::read_dir(dir) {
            Ok(csv) => mapping.csv = csv,
            Err(e) => warnings.push(format!("{e}; names in this directory stay as the files name them")),
        }
    }
    if has(MAPPING_JSON) {
        let path = dir.join(MAPPING_JSON);
        match read_mapping_json(&path) {
            Ok(json) => mapping.json = json,
            Err(e) => warnings.push(format!("{e:#}; names in this directory stay as the files name them")),
        }
    }
    Some(mapping)
}

/// `mapping.json`: an array of `{"file", "op_name", ["op_type"], ["output_index"]}` (sim-train bench), or an
/// object `{"file name": "op name"}`.
fn read_mapping_json(path: &Path) -> Result<HashMap<String, JsonEntry>> {
    let text = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    let value: serde_json::Value =
        serde_json::from_slice(&text).with_context(|| format!("{}: invalid JSON", path.display()))?;
    let mut out = HashMap::new();
    match value {
        serde_json::Value::Array(rows) => {
            for (i, row) in rows.iter().enumerate() {
                let field = |k: &str| row.get(k).and_then(|v| v.as_str());
                let (Some(file), Some(op_name)) = (field("file"), field("op_name")) else {
                    anyhow::bail!("{}: entry {i} lacks a \"file\" or \"op_name\" string", path.display());
                };
                let output_index =
                    row.get("output_index").and_then(|v| v.as_u64()).and_then(|n| u32::try_from(n).ok());
                let original_index = row.get("original_output_index").and_then(|v| v.as_u64());
                let entry = JsonEntry {
                    op_name: op_name.to_string(),
                    op_type: field("op_type").map(str::to_string),
                    output_index,
                    original_op: field("original_op").map(|n| {
                        (n.to_string(), original_index.and_then(|i| u32::try_from(i).ok()).unwrap_or(0))
                    }),
                };
                out.insert(file.to_string(), entry);
            }
        }
        serde_json::Value::Object(map) => {
            for (file, name) in map {
                let Some(name) = name.as_str() else {
                    anyhow::bail!("{}: the value of {file:?} is not a string", path.display());
                };
                out.insert(file, JsonEntry { op_name: name.to_string(), ..JsonEntry::default() });
            }
        }
        _ => anyhow::bail!("{}: expected an array of entries or an object of names", path.display()),
    }
    Ok(out)
}

/// Looks a key up in the mapping files, innermost directory first.
fn csv_original<'m>(mappings: &'m Mappings, key: &str) -> Option<&'m str> {
    mappings.iter().find_map(|m| m.csv.original(key))
}

/// The tensor a file holds, from its name and the mappings in effect.
fn name_of(stem: &str, file_name: &str, mappings: &Mappings) -> NpyName {
    if let Some(entry) = mappings.iter().find_map(|m| m.json.get(file_name)) {
        let mut name = parse_stem(stem, mappings);
        name.op_name = entry.op_name.clone();
        if let Some(t) = &entry.op_type {
            name.op_type = t.clone();
        }
        if let Some(i) = entry.output_index {
            (name.io, name.index) = (Io::Output, i);
        }
        name.original_op = entry.original_op.clone();
        return name;
    }
    match csv_original(mappings, file_name).or_else(|| csv_original(mappings, stem)) {
        // CANN style: the file was renamed, the original file name is listed.
        Some(original) if original.ends_with(".npy") => {
            parse_stem(original.trim_end_matches(".npy"), mappings)
        }
        // convert style: the real op name of a sanitized one.
        Some(original) => NpyName { op_name: original.to_string(), ..parse_stem(stem, mappings) },
        None => parse_stem(stem, mappings),
    }
}

/// Parses a file name without `.npy` (see the module comment for the forms).
fn parse_stem(stem: &str, mappings: &Mappings) -> NpyName {
    let fields: Vec<&str> = stem.split('.').collect();
    let n = fields.len();
    let io = |f: &str| match f {
        "input" => Some(Io::Input),
        "output" => Some(Io::Output),
        _ => None,
    };
    let small = |f: &str| number(f).and_then(|v| u32::try_from(v).ok());
    if n >= 3 {
        if let (Some(io), Some(index)) = (io(fields[n - 2]), small(fields[n - 1])) {
            let prefix = fields[..n - 2].join(".");
            // `{op_type}.{op}.{order}`: a dump file name has at least four fields, so this is convert's.
            if n == 5 && !fields[0].is_empty() && !fields[1].is_empty() {
                if let Some(order) = number(fields[2]) {
                    let (op_type, op_name) = (fields[0].to_string(), fields[1].to_string());
                    return NpyName {
                        op_name,
                        op_type,
                        io,
                        index,
                        launch: Some(Launch::at(order)),
                        original_op: None,
                    };
                }
            }
            // A dump file name, possibly renamed through mapping.csv.
            let dump_name = csv_original(mappings, &prefix).unwrap_or(&prefix);
            if let Ok(d) = parse_file_name(dump_name) {
                let launch = Some(Launch::of_name(&d));
                return NpyName {
                    op_name: d.op_name,
                    op_type: d.op_type,
                    io,
                    index,
                    launch,
                    original_op: None,
                };
            }
            return NpyName {
                op_name: prefix,
                op_type: String::new(),
                io,
                index,
                launch: None,
                original_op: None,
            };
        }
        if let (Some(index), Some(ts)) = (small(fields[n - 2]), number(fields[n - 1])) {
            let op_name = fields[..n - 2].join(".");
            if !op_name.is_empty() {
                let launch = Some(Launch::at(ts));
                return NpyName {
                    op_name,
                    op_type: String::new(),
                    io: Io::Output,
                    index,
                    launch,
                    original_op: None,
                };
            }
        }
    }
    NpyName {
        op_name: stem.to_string(),
        op_type: String::new(),
        io: Io::Output,
        index: 0,
        launch: None,
        original_op: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn borrowed_values_are_the_decoded_ones() {
        let values: Vec<f32> = (0..1031).map(|i| (i as f32 - 500.0) * 0.37).collect();
        let le: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        let mut bytes = Vec::new();
        accutrace_formats::npy::write_npy(&mut bytes, DType::FLOAT, &[1031], &le).unwrap();
        // Copy into f32-aligned memory, as a page-aligned map of the file is.
        let mut aligned = vec![0f32; bytes.len().div_ceil(4)];
        // SAFETY: `aligned` holds at least `bytes.len()` bytes and any byte pattern is a valid f32.
        let raw = unsafe { std::slice::from_raw_parts_mut(aligned.as_mut_ptr().cast::<u8>(), bytes.len()) };
        raw.copy_from_slice(&bytes);
        let view = NpyView::parse(raw).unwrap();
        let borrowed = borrowed_f32(&view).expect("little-endian f32 in C order is borrowed");
        let mut decoded = Vec::new();
        view_values(&view, &mut decoded).unwrap();
        assert_eq!(
            borrowed.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            values.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
        );
        assert_eq!(
            decoded.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            borrowed.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
        );
        // Misaligned data (or any other dtype) is not borrowed: it goes through the decoder.
        let mut shifted = vec![0u8; bytes.len() + 1];
        shifted[1..].copy_from_slice(&bytes);
        let view = NpyView::parse(&shifted[1..]).unwrap();
        assert!(borrowed_f32(&view).is_none() || (view.data.as_ptr() as usize).is_multiple_of(4));
        let halves: Vec<u8> = values.iter().flat_map(|&v| half::f16::from_f32(v).to_le_bytes()).collect();
        let mut bytes16 = Vec::new();
        accutrace_formats::npy::write_npy(&mut bytes16, DType::FLOAT16, &[1031], &halves).unwrap();
        assert!(borrowed_f32(&NpyView::parse(&bytes16).unwrap()).is_none());
    }

    fn parse(stem: &str) -> NpyName {
        parse_stem(stem, &Vec::new())
    }

    #[test]
    fn parses_every_naming() {
        let n = parse("MatMul.layer_0_attn_mm.7.3.1700000000000123.output.1");
        assert_eq!(
            (n.op_type.as_str(), n.op_name.as_str(), n.io, n.index),
            ("MatMul", "layer_0_attn_mm", Io::Output, 1)
        );
        assert_eq!(
            n.launch,
            Some(Launch { timestamp_us: 1700000000000123, task_id: 7, stream_id: 3, ..Launch::default() })
        );

        let n = parse("Add.add_1.5.42.input.0");
        assert_eq!(
            (n.op_type.as_str(), n.op_name.as_str(), n.io, n.launch.map(|l| (l.timestamp_us, l.task_id))),
            ("Add", "add_1", Io::Input, Some((42, 5)))
        );

        let n = parse("Conv2D.conv1.12.output.0");
        assert_eq!(
            (n.op_type.as_str(), n.op_name.as_str(), n.launch),
            ("Conv2D", "conv1", Some(Launch::at(12)))
        );

        let n = parse("model_layer_0_attn_MatMul.2.1700000000000005");
        assert_eq!(
            (n.op_name.as_str(), n.io, n.index, n.launch),
            ("model_layer_0_attn_MatMul", Io::Output, 2, Some(Launch::at(1700000000000005)))
        );

        let n = parse("weights");
        assert_eq!((n.op_name.as_str(), n.io, n.index, n.launch), ("weights", Io::Output, 0, None));

        // Not a dump name and not convert's: the prefix is the op.
        let n = parse("x.input.3");
        assert_eq!((n.op_name.as_str(), n.io, n.index, n.launch), ("x", Io::Input, 3, None));
    }

    #[test]
    fn fortran_bytes_reorder() {
        // 2x3 array, column-major [0,3,1,4,2,5] is row-major [0,1,2,3,4,5].
        let f: Vec<u8> = [0u8, 3, 1, 4, 2, 5].to_vec();
        assert_eq!(fortran_bytes_to_c(&f, &[2, 3], 1), vec![0, 1, 2, 3, 4, 5]);
    }

    #[test]
    fn location_from_directories() {
        let l = Location::default().enter("step12").enter("rank3").enter("other");
        assert_eq!((l.step, l.rank), (12, 3));
        assert_eq!(Location::default().enter("ranks").rank, 0);
    }
}
