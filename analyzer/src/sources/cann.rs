//! CANN dump trees (graph and single-op layouts, `mapping.csv`) and single dump files.
//!
//! Indexing reads only headers (the files are memory-mapped, so tensor pages are never touched); values and
//! hashes are decoded on demand from a fresh map of the one file that holds them.

use super::device_stats;
use super::source::Source;
use crate::index::{Index, Io, Launch, Reorder, TensorId, TensorInfo};
use crate::overflow_records;
use accutrace_formats::dump::{self, FileKind, MappedFile};
use accutrace_formats::layout::Format;
use accutrace_formats::stats::content_hash;
use accutrace_formats::tensor::host::{host_shape, host_values, DeviceTensor};
use accutrace_formats::tensor::host_bytes::{self, HostBytes};
use anyhow::{Context, Result};
use rayon::prelude::*;
use std::path::{Path, PathBuf};

pub struct CannDumpSource {
    root: PathBuf,
    index: Index,
    /// The file of each op (by op id); `None` for the ops of statistics CSVs, which hold no tensor data.
    files: Vec<Option<PathBuf>>,
}

/// What one header contributes to the index, parsed in parallel before the index is assembled in order.
struct ParsedOp {
    name: String,
    op_type: String,
    tensors: Vec<TensorInfo>,
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
        let (tensor_entries, op_debug_files): (Vec<_>, Vec<_>) =
            tree.entries.into_iter().partition(|e| e.name.kind == FileKind::Tensor);
        let parsed: Vec<Result<ParsedOp>> = tensor_entries.par_iter().map(parse_header).collect();
        let mut files = Vec::with_capacity(tensor_entries.len());
        for (entry, parsed) in tensor_entries.iter().zip(parsed) {
            let parsed = parsed?;
            let step = entry.step.unwrap_or(0);
            let rank = entry.device_id.unwrap_or(0);
            let launch = Launch::of_name(&entry.name);
            let op = index.push_op_at(parsed.name, parsed.op_type, step, rank, Some(launch));
            for mut tensor in parsed.tensors {
                tensor.op = op;
                index.push_tensor(tensor);
            }
            files.push(entry.path.clone());
        }
        let (stats_files, op_debug_files): (Vec<_>, Vec<_>) =
            op_debug_files.into_iter().partition(|e| e.name.kind == FileKind::StatsCsv);
        for entry in &stats_files {
            let bytes = std::fs::read(&entry.path)
                .with_context(|| format!("cannot read {}", entry.path.display()))?;
            let file_name =
                entry.path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            let (step, rank) = (entry.step.unwrap_or(0), entry.device_id.unwrap_or(0));
            device_stats::add_stats_csv(&mut index, &file_name, &bytes, step, rank)
                .map_err(|e| e.in_file(&entry.path))?;
        }
        for entry in &op_debug_files {
            read_op_debug(entry, &tensor_entries, &mut index)?;
        }
        // CANN makes overflow detection exclusive with the data dump: with op-debug files, the tensor files
        // are those of the overflowing ops alone.
        index.only_overflowing_ops = !op_debug_files.is_empty();
        // Statistics CSVs were added after the tensor files: one order for all, from the file names.
        let reorder = index.order_by_execution();
        let mut files: Vec<Option<PathBuf>> = files.into_iter().map(Some).collect();
        files.resize(reorder.ops.len(), None);
        let files = Reorder::apply(&reorder.ops, files);
        Ok(CannDumpSource { root: root.to_path_buf(), index, files })
    }

    fn with_tensor<R>(
        &self,
        tensor: TensorId,
        f: impl FnOnce(&dump::DumpTensor<'_>) -> Result<R>,
    ) -> Result<R> {
        let info = &self.index.tensors[tensor];
        let path = self.files[info.op].as_ref().context("a device statistics op has no tensor data")?;
        let map = MappedFile::open(path)?;
        let file = dump::parse_dump_file(&map)?;
        let list = match info.io {
            Io::Input => &file.inputs,
            Io::Output => &file.outputs,
        };
        let t = list.get(info.index as usize).with_context(|| {
            format!("{}: tensor {} changed since it was indexed", path.display(), info.index)
        })?;
        f(t).with_context(|| format!("{}: {} {}", path.display(), info.io.as_str(), info.index))
    }
}

/// Decodes one op-debug file and blames the op its records name (tensor entries and ops share positions).
fn read_op_debug(
    entry: &dump::DumpEntry,
    tensor_entries: &[dump::DumpEntry],
    index: &mut Index,
) -> Result<()> {
    let map = MappedFile::open(&entry.path)?;
    let file = dump::parse_dump_file(&map)?;
    let records = dump::decode_opdebug_file(&file).map_err(|e| e.in_file(&entry.path))?;
    let step = entry.step.unwrap_or(0);
    let rank = entry.device_id.unwrap_or(0);
    for record in &records {
        for engine in &record.engines {
            let Some(mut found) =
                overflow_records::from_engine(engine, step, rank, entry.path.display().to_string())
            else {
                continue;
            };
            found.op = dump::find_overflowing_op(entry, engine, tensor_entries)
                .and_then(|op_entry| tensor_entries.iter().position(|e| std::ptr::eq(e, op_entry)));
            index.overflow_records.push(found);
        }
    }
    Ok(())
}

fn parse_header(entry: &dump::DumpEntry) -> Result<ParsedOp> {
    let map = MappedFile::open(&entry.path)?;
    let file = dump::parse_dump_file(&map)?;
    let name = if file.op_name().is_empty() { entry.op_name.clone() } else { file.op_name().to_string() };
    let mut tensors = Vec::with_capacity(file.inputs.len() + file.outputs.len());
    for (io, list) in [(Io::Input, &file.inputs), (Io::Output, &file.outputs)] {
        for t in list {
            let format = Format::from_code(t.format);
            tensors.push(TensorInfo {
                op: 0,
                io,
                index: t.index as u32,
                dtype: t.dtype,
                shape: host_shape(t.format, &t.device_shape, &t.original_shape),
                device_format: (!format.is_identity()).then(|| format.name().into_owned()),
                device_shape: Some(t.device_shape.clone()),
                original_op: t.original_op.as_ref().map(|o| (o.name.clone(), o.output_index)),
                stats: None,
                hash: None,
                label: None,
                requires_grad: None,
                has_data: true,
                locator: 0,
            });
        }
    }
    Ok(ParsedOp { name, op_type: entry.name.op_type.clone(), tensors })
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
        self.with_tensor(tensor, |t| {
            let mut scratch = Vec::new();
            host_values(&device_tensor(t), &mut scratch, out)?;
            Ok(())
        })
    }

    fn content_hash(&self, tensor: TensorId) -> Result<u64> {
        self.with_tensor(tensor, |t| Ok(content_hash(t.bytes)))
    }

    fn read_values_and_hash(&self, tensor: TensorId, out: &mut Vec<f32>) -> Result<u64> {
        self.with_tensor(tensor, |t| {
            let mut scratch = Vec::new();
            host_values(&device_tensor(t), &mut scratch, out)?;
            Ok(content_hash(t.bytes))
        })
    }

    fn read_host_bytes(&self, tensor: TensorId) -> Result<Option<HostBytes>> {
        self.with_tensor(tensor, |t| Ok(host_bytes::host_bytes(&device_tensor(t))?))
    }
}

fn device_tensor<'a>(t: &'a dump::DumpTensor<'a>) -> DeviceTensor<'a> {
    DeviceTensor {
        dtype: t.dtype,
        format: t.format,
        device_shape: &t.device_shape,
        original_shape: &t.original_shape,
        sub_format: t.sub_format,
        bytes: t.bytes,
    }
}
