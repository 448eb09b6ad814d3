//! CANN dump trees (graph and single-op layouts, `mapping.csv`) and single dump files.
//!
//! Indexing parses each file's header once (the files are memory-mapped, so tensor pages are never
//! touched) and keeps where every tensor's bytes lie; reading a tensor maps its file and takes that slice,
//! without parsing the header again (a file with 20,000 descriptors used to be parsed 20,000 times).
//!
//! A file that cannot be read is an input problem of the source (named, with the reason), and the rest of
//! the tree is read: one bad file does not hide the others.

use super::buffers::with_values_scratch;
use super::device_stats;
use super::missing_steps::StepsHeld;
use super::source::Source;
use crate::index::{Index, Io, Launch, OpId, TensorExtras, TensorId, TensorInfo};
use crate::overflow_records;
use crate::problems::InputProblem;
use crate::steps;
use accutrace_formats::dump::{self, DumpEntry, FileKind, MappedFile};
use accutrace_formats::layout::Format;
use accutrace_formats::stats::content_hash;
use accutrace_formats::tensor::element_count;
use accutrace_formats::tensor::host::{host_shape, host_values, DeviceTensor};
use accutrace_formats::tensor::host_bytes::{self, HostBytes};
use anyhow::{Context, Result};
use rayon::prelude::*;
use std::collections::BTreeMap;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// One dump: (rank directory, device, op name, dump time). Two files with the same key are copies.
type DumpKey = (Option<u32>, Option<u32>, String, u64);

pub struct CannDumpSource {
    root: PathBuf,
    index: Index,
    /// The dump files that hold tensors ([`StoredTensor::file`] indexes it).
    files: Vec<PathBuf>,
    /// Where each tensor's bytes lie and how they are laid out (`TensorInfo::locator` indexes it).
    stored: Vec<StoredTensor>,
    /// By file: the map, kept once made, of files holding many tensors (see [`KEEP_MAPPED`]); `None` for
    /// the others, which are mapped per read.
    kept_maps: Vec<Option<OnceLock<MappedFile>>>,
}

/// Files with at least this many tensors stay mapped once read: mapping the file again for each of its
/// tensors would cost more than the tensors. Few files are that large, so few maps stay open (a tree of
/// 100,000 small files must not hold 100,000 maps).
const KEEP_MAPPED: usize = 64;

/// A tensor's place in its dump file and its device layout, from the header parsed at indexing.
struct StoredTensor {
    file: usize,
    offset: usize,
    len: usize,
    format: i32,
    original_shape: Vec<u64>,
    sub_format: i32,
}

/// What one header contributes to the index, parsed in parallel before the index is assembled in order.
struct ParsedOp {
    name: String,
    op_type: String,
    /// The header's `dump_time` (µs): with the op name, what makes a dump file unique.
    dump_time: u64,
    tensors: Vec<(TensorInfo, StoredTensor)>,
}

impl CannDumpSource {
    pub fn open(root: &Path) -> Result<Self> {
        let tree = dump::walk_dump_tree(root)
            .with_context(|| format!("cannot read dump tree {}", root.display()))?;
        if tree.entries.is_empty() {
            // Nothing parsed as a dump file: say why rather than report an empty run.
            let why = tree.warnings.first().map(|w| format!(": {w}")).unwrap_or_default();
            anyhow::bail!("{}: no CANN dump files found{why}", root.display());
        }
        let mut index = Index::default();
        index.warnings.extend(tree.warnings.iter().map(|w| w.to_string()));
        // The steps each rank's directories hold, unreadable files included (those are problems already).
        let mut steps_held = StepsHeld::default();
        for entry in &tree.entries {
            if let Some(step) = entry.step {
                steps_held.add(entry.job_rank(), step);
            }
        }
        let (tensor_entries, op_debug_files): (Vec<_>, Vec<_>) =
            tree.entries.into_iter().partition(|e| e.name.kind == FileKind::Tensor);
        let parsed: Vec<Result<ParsedOp>> = tensor_entries.par_iter().map(parse_header).collect();
        let mut files = Vec::with_capacity(tensor_entries.len());
        let mut stored = Vec::new();
        // The op of each tensor entry (None: the file could not be read), for the op-debug records.
        let mut op_of_entry = Vec::with_capacity(tensor_entries.len());
        // CANN writes one file per op execution, and the header holds the op and the time it was dumped:
        // two files with the same device, op and time are one dump twice (a copy), not two executions.
        let mut seen: HashMap<DumpKey, &Path> = HashMap::new();
        // Single-operator ops with no per-step path, per device: their steps are inferred below.
        let mut stepless: BTreeMap<u32, Vec<OpId>> = BTreeMap::new();
        for (entry, parsed) in tensor_entries.iter().zip(parsed) {
            let parsed = match parsed {
                Ok(p) => p,
                Err(e) => {
                    index.problems.push(unreadable_file(&e));
                    op_of_entry.push(None);
                    continue;
                }
            };
            if parsed.dump_time != 0 {
                let key = (entry.rank, entry.device_id, parsed.name.clone(), parsed.dump_time);
                if let Some(first) = seen.insert(key, &entry.path) {
                    index.problems.push(InputProblem::incomplete(format!(
                        "{} and {} hold the same dump ({} dumped at {} us): one is a copy; both were read",
                        first.display(),
                        entry.path.display(),
                        parsed.name,
                        parsed.dump_time
                    )));
                }
            }
            let step = entry.step.unwrap_or(0);
            let rank = entry.job_rank();
            let launch = Launch::of_name(&entry.name);
            let op = index.push_op_at(parsed.name, parsed.op_type, step, rank, Some(launch));
            op_of_entry.push(Some(op));
            if is_single_op_without_step(entry) {
                stepless.entry(rank).or_default().push(op);
            }
            for (mut tensor, mut place) in parsed.tensors {
                tensor.set_op(op);
                tensor.locator = stored.len() as u64;
                place.file = files.len();
                stored.push(place);
                index.push_tensor(tensor);
            }
            files.push(entry.path.clone());
        }
        if let Some(problem) = outside_the_layout(&tensor_entries) {
            index.problems.push(problem);
        }
        if let Some(problem) = steps_held.problem(root) {
            index.problems.push(problem);
        }
        if index.ops.is_empty() && !tensor_entries.is_empty() {
            // Every tensor file is unreadable: there is nothing to answer about.
            let first = index.problems.first().map(|p| p.message.clone()).unwrap_or_default();
            anyhow::bail!("{}: no dump file could be read; first: {first}", root.display());
        }
        let (stats_files, op_debug_files): (Vec<_>, Vec<_>) =
            op_debug_files.into_iter().partition(|e| e.name.kind == FileKind::StatsCsv);
        let mut stats_parts = device_stats::StatsCsvParts::default();
        for entry in &stats_files {
            let added = std::fs::read(&entry.path)
                .with_context(|| format!("cannot read {}", entry.path.display()))
                .and_then(|bytes| {
                    let file_name =
                        entry.path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
                    let (step, rank) = (entry.step.unwrap_or(0), entry.job_rank());
                    let first = index.ops.len();
                    device_stats::add_stats_csv(&mut index, &mut stats_parts, &file_name, &bytes, step, rank)
                        .map_err(|e| anyhow::Error::new(e.in_file(&entry.path)))?;
                    if is_single_op_without_step(entry) {
                        stepless.entry(rank).or_default().extend(first..index.ops.len());
                    }
                    Ok(())
                });
            if let Err(e) = added {
                index.problems.push(unreadable_file(&e));
            }
        }
        for entry in &op_debug_files {
            if let Err(e) = read_op_debug(entry, &tensor_entries, &op_of_entry, &mut index) {
                index.problems.push(unreadable_file(&e));
            }
        }
        for (rank, mut ops) in stepless {
            ops.sort_by_key(|&op| (index.ops[op].launch(), op));
            let stream = format!("{} device {rank}", root.display());
            let how =
                "CANN's single-operator dumps carry no step; set the dump path to step{N}/ at each step, as \
                       msprobe does, for exact steps";
            steps::infer_steps(&mut index, &ops, &stream, how);
        }
        // CANN makes overflow detection exclusive with the data dump: with op-debug files, the tensor files
        // are those of the overflowing ops alone.
        index.only_overflowing_ops = !op_debug_files.is_empty();
        // Statistics CSVs were added after the tensor files: one order for all, from the file names. The
        // tables here follow tensors through their locator, so the new order needs nothing from them.
        index.order_by_execution();
        let mut tensors_per_file = vec![0usize; files.len()];
        for place in &stored {
            tensors_per_file[place.file] += 1;
        }
        let kept_maps = tensors_per_file.iter().map(|&n| (n >= KEEP_MAPPED).then(OnceLock::new)).collect();
        Ok(CannDumpSource { root: root.to_path_buf(), index, files, stored, kept_maps })
    }

    /// Calls `f` with tensor `tensor`'s bytes and layout; `decodes`: `f` turns them into numbers, so a dtype
    /// that cannot be is refused first, by name.
    fn with_tensor<R>(
        &self,
        tensor: TensorId,
        decodes: bool,
        f: impl FnOnce(&DeviceTensor<'_>) -> Result<R>,
    ) -> Result<R> {
        let info = &self.index.tensors[tensor];
        if !info.has_data {
            anyhow::bail!("{}: device statistics carry no tensor data", self.index.tensor_label(tensor));
        }
        let place = &self.stored[info.locator as usize];
        let path = &self.files[place.file];
        if let Some(why) = decodes.then(|| info.dtype.undecodable_reason()).flatten() {
            // Refused by name before the bytes are mapped: they hold no numbers accutrace can read.
            anyhow::bail!("{}: {} {}: {why}", path.display(), info.io.as_str(), info.index);
        }
        let fresh;
        let map = match &self.kept_maps[place.file] {
            Some(cell) => match cell.get() {
                Some(map) => map,
                None => {
                    let map = MappedFile::open(path)?;
                    cell.get_or_init(|| map)
                }
            },
            None => {
                fresh = MappedFile::open(path)?;
                &fresh
            }
        };
        let bytes = map.bytes().get(place.offset..place.offset + place.len).with_context(|| {
            format!(
                "{}: the file is shorter than when it was indexed ({} {})",
                path.display(),
                info.io.as_str(),
                info.index
            )
        })?;
        let device = DeviceTensor {
            dtype: info.dtype,
            format: place.format,
            device_shape: info.device_shape().unwrap_or_default(),
            original_shape: &place.original_shape,
            sub_format: place.sub_format,
            bytes,
        };
        f(&device).with_context(|| format!("{}: {} {}", path.display(), info.io.as_str(), info.index))
    }
}

/// A dump file that could not be read: what the source is missing.
fn unreadable_file(e: &anyhow::Error) -> InputProblem {
    InputProblem::incomplete(format!("{e:#}; the rest of the dump was read"))
}

/// A single-operator dump file (eager mode) outside any per-step dump path: CANN gives it no step.
fn is_single_op_without_step(entry: &dump::DumpEntry) -> bool {
    entry.step.is_none() && entry.model_name.is_none() && entry.time_dir.is_some()
}

/// Decodes one op-debug file and blames the op its records name.
fn read_op_debug(
    entry: &dump::DumpEntry,
    tensor_entries: &[dump::DumpEntry],
    op_of_entry: &[Option<usize>],
    index: &mut Index,
) -> Result<()> {
    let map = MappedFile::open(&entry.path)?;
    let file = dump::parse_dump_file(&map)?;
    let records = dump::decode_opdebug_file(&file).map_err(|e| e.in_file(&entry.path))?;
    let step = entry.step.unwrap_or(0);
    let rank = entry.job_rank();
    for record in &records {
        for engine in &record.engines {
            let Some(mut found) =
                overflow_records::from_engine(engine, step, rank, entry.path.display().to_string())
            else {
                continue;
            };
            found.op = dump::find_overflowing_op(entry, engine, tensor_entries)
                .and_then(|op_entry| tensor_entries.iter().position(|e| std::ptr::eq(e, op_entry)))
                .and_then(|position| op_of_entry[position]);
            index.overflow_records.push(found);
        }
    }
    Ok(())
}

/// Dump files outside CANN's directory layout (`{time}/{device}/{model}/{model_id}/{step}` or
/// `{time}/{device}`) have no step, device or rank: they are all read as step 0 of rank 0. That is right
/// for a few loose files, but when an op occurs more than once among them, steps or ranks were folded
/// together and every per-step answer about them is wrong: an input problem, never a silent answer.
fn outside_the_layout(entries: &[DumpEntry]) -> Option<InputProblem> {
    let loose: Vec<&DumpEntry> = entries.iter().filter(|e| e.time_dir.is_none()).collect();
    let mut seen: HashMap<&str, &Path> = HashMap::new();
    let (first, again) =
        loose.iter().find_map(|e| seen.insert(e.op_name.as_str(), &e.path).map(|first| (first, e)))?;
    Some(InputProblem::incomplete(format!(
        "{} of {} dump files are outside CANN's directory layout ({{YYYYMMDDhhmmss}}/{{device}}/{{model}}/\
         {{model_id}}/{{step}}), so their steps and ranks are unknown and all were read as step 0 of rank 0; \
         {} occurs more than once among them ({} and {}): several steps or ranks were folded together. \
         Point the analyzer at the dump path that holds the time directories, with their names unchanged",
        loose.len(),
        entries.len(),
        again.op_name,
        first.display(),
        again.path.display()
    )))
}

fn parse_header(entry: &dump::DumpEntry) -> Result<ParsedOp> {
    let map = MappedFile::open(&entry.path)?;
    let file = dump::parse_dump_file(&map)?;
    let name = if file.op_name().is_empty() { entry.op_name.clone() } else { file.op_name().to_string() };
    let mut tensors = Vec::with_capacity(file.inputs.len() + file.outputs.len());
    // Only the runtime's exception dump sets `arg_index`, and proto3 writes no 0: where any tensor of the
    // file has one, each tensor's (0 included) is its argument position; where none has, none is known.
    let arg_indexed = file.inputs.iter().chain(&file.outputs).any(|t| t.arg_index != 0);
    for (io, list) in [(Io::Input, &file.inputs), (Io::Output, &file.outputs)] {
        for t in list {
            if element_count(&t.device_shape).is_none() || element_count(&t.original_shape).is_none() {
                anyhow::bail!(
                    "{}: {} {}: shape {:?} (original {:?}) has more elements than 64 bits count",
                    entry.path.display(),
                    io.as_str(),
                    t.index,
                    t.device_shape,
                    t.original_shape
                );
            }
            let format = Format::from_code(t.format);
            let shape = host_shape(t.format, &t.device_shape, &t.original_shape);
            let info = TensorInfo::new(0, io, t.index as u32, t.dtype, shape)
                .with_original_op(t.original_op.as_ref().map(|o| (o.name.as_str().into(), o.output_index)))
                .with_extras(TensorExtras {
                    device_format: (!format.is_identity()).then(|| format.name().into_owned()),
                    device_shape: Some(t.device_shape.clone()),
                    arg_index: arg_indexed.then_some(t.arg_index),
                    ..TensorExtras::default()
                });
            let place = StoredTensor {
                file: 0,
                offset: t.offset as usize,
                len: t.bytes.len(),
                format: t.format,
                original_shape: t.original_shape.clone(),
                sub_format: t.sub_format,
            };
            tensors.push((info, place));
        }
    }
    Ok(ParsedOp { name, op_type: entry.name.op_type.clone(), dump_time: file.header.dump_time, tensors })
}

impl Source for CannDumpSource {
    fn kind(&self) -> &'static str {
        "cann-dump"
    }

    fn root(&self) -> &Path {
        &self.root
    }

    fn index(&self) -> &Index {
        &self.index
    }

    fn read_values(&self, tensor: TensorId, out: &mut Vec<f32>) -> Result<()> {
        self.with_tensor(tensor, true, |device| {
            with_values_scratch(|scratch| host_values(device, scratch, out))?;
            Ok(())
        })
    }

    fn content_hash(&self, tensor: TensorId) -> Result<u64> {
        self.with_tensor(tensor, false, |device| Ok(content_hash(device.bytes)))
    }

    fn read_values_and_hash(&self, tensor: TensorId, out: &mut Vec<f32>) -> Result<u64> {
        self.with_tensor(tensor, true, |device| {
            with_values_scratch(|scratch| host_values(device, scratch, out))?;
            Ok(content_hash(device.bytes))
        })
    }

    fn read_host_bytes(&self, tensor: TensorId) -> Result<Option<HostBytes>> {
        self.with_tensor(tensor, false, |device| Ok(host_bytes::host_bytes(device)?))
    }
}
