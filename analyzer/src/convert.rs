//! The convert engine (`analyzer convert SOURCE -o DIR`): every selected tensor as a `.npy` file in host layout, named
//! `DIR/step{S}/rank{R}/{op_type}.{op}.{order}.{input|output}.{i}.npy` (docs/CLI.md), which the npy source
//! reads back. Op names are sanitized for file names; `DIR/mapping.csv` keeps the real ones, and each
//! directory's `mapping.json` the fusion provenance of fused kernels' outputs (`original_op`), so that a
//! comparison of the export still matches them to the unfused ops of a benchmark.
//!
//! A tensor whose dtype NumPy has is written from its own bytes (`Source::read_host_bytes`): bit for bit,
//! fp64 and 64-bit integers included. The others (bf16, fp8, int4, ...), and sources that cannot hand out
//! raw bytes (msprobe), go through `Source::read_values` as f32 and are re-encoded: exact for fp16, fp32,
//! bf16/fp8 (widened to float32) and integers below 2^24; when fp64 or larger integers had to take that
//! path, the summary says they were rounded.

use crate::filter::Filter;
use crate::index::{Io, TensorId};
use crate::problems::{InputProblem, InputProblems};
use crate::progress::Progress;
use crate::sources::Source;
use crate::threads::{in_flight, pairs_in_flight, tensor_bytes, Footprint};
use accutrace_formats::dump::{sanitize_op_name, NameMapping};
use accutrace_formats::npy::{descr_of, write_npy};
use accutrace_formats::tensor::host_bytes::HostBytes;
use accutrace_formats::tensor::{element_count, encode_f32, lanes_per_element};
use accutrace_formats::DType;
use anyhow::{bail, Context, Result};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Integers up to this magnitude survive the trip through f32 exactly.
const F32_EXACT_INT: f32 = 16_777_216.0;

/// One tensor, where it was to go, and what happened to it.
#[derive(serde::Serialize)]
pub struct ConvertedTensor {
    /// The tensor's name (`op.output.0`).
    pub tensor: String,
    /// Its `.npy` file (written unless the result says otherwise).
    pub file: PathBuf,
    /// What happened.
    #[serde(flatten)]
    pub result: Converted,
}

/// What happened to one tensor.
#[derive(serde::Serialize)]
#[serde(tag = "status", rename_all = "lowercase")]
pub enum Converted {
    /// Written: the file's size, and what the user should know about its values.
    Written {
        /// Bytes written.
        bytes: u64,
        /// What the user should know about the values (a dtype widened, integers rounded).
        note: Option<String>,
    },
    /// Not written, and why (no data, a dtype without numbers).
    Skipped {
        /// Why.
        reason: String,
    },
    /// Could not be read or written: what went wrong.
    Failed {
        /// What went wrong.
        reason: String,
    },
}

/// Writes every tensor of the ops that `filter` keeps under `output` (created if missing), plus
/// `mapping.csv` for op names that had to be sanitized; says what happened to each tensor. `progress`: a
/// bar on stderr, when it is a terminal, while they are written.
pub fn convert(
    source: &dyn Source,
    filter: &Filter,
    output: &Path,
    progress: bool,
) -> Result<Vec<ConvertedTensor>> {
    let index = source.index();
    let ops = filter.op_ids(index);
    std::fs::create_dir_all(output).with_context(|| format!("cannot create {}", output.display()))?;
    let total: usize = ops.iter().map(|&o| index.ops[o].tensors().len()).sum();
    let progress = Progress::new("converting", total as u64, !progress);
    let renamed = Mutex::new(Vec::new());
    let provenance: Mutex<BTreeMap<PathBuf, Vec<serde_json::Value>>> = Mutex::new(BTreeMap::new());
    let list_of =
        |o: usize, io: Io| if io == Io::Input { index.ops[o].inputs() } else { index.ops[o].outputs() };
    // Every tensor of the kept ops, in op order, inputs then outputs: the order of the results.
    let jobs: Vec<(usize, Io, usize)> = ops
        .iter()
        .flat_map(|&o| [Io::Input, Io::Output].map(|io| (0..list_of(o, io).len()).map(move |p| (o, io, p))))
        .flatten()
        .collect();
    let convert_job = |&(o, io, position): &(usize, Io, usize)| {
        let (op, list) = (&index.ops[o], list_of(o, io));
        let dir = output.join(format!("step{}", op.step)).join(format!("rank{}", op.rank));
        let op_type = match sanitize_op_name(&op.op_type) {
            t if t.is_empty() => "unknown".to_string(),
            t => t,
        };
        let name = sanitize_op_name(&op.name);
        let t = list.start + position;
        let i = file_index(source, list, position);
        let stem = format!("{op_type}.{name}.{}.{}.{i}", op.order, io.as_str());
        if name != op.name {
            renamed.lock().unwrap_or_else(|e| e.into_inner()).push((stem.clone(), op.name.to_string()));
        }
        if let Some((original, index)) = index.tensors[t].original_op() {
            let entry = serde_json::json!({
                "file": format!("{stem}.npy"), "op_name": op.name, "op_type": op.op_type,
                "original_op": original, "original_output_index": index,
            });
            let mut all = provenance.lock().unwrap_or_else(|e| e.into_inner());
            all.entry(dir.clone()).or_default().push(entry);
        }
        let converted = ConvertedTensor {
            tensor: index.tensor_label(t),
            file: dir.join(format!("{stem}.npy")),
            result: convert_one(source, t, &dir, &stem),
        };
        progress.inc(1);
        converted
    };
    // As many tensors at once as compare would read pairs within the memory budget: a conversion holds one
    // tensor's values or bytes and their encoding, no more than a compare pair's two sides. Every thread
    // converting at once held a tensor each (402 MiB on two threads for 144 MiB tensors).
    let limits = pairs_in_flight(Footprint::compare([source, source]), [source, source]);
    let size = |k: usize| tensor_bytes(&index.tensors[list_of(jobs[k].0, jobs[k].1).start + jobs[k].2]);
    let results: Vec<ConvertedTensor> =
        in_flight(limits, jobs.len(), size, || (), |_, k| convert_job(&jobs[k]));
    progress.finish();
    let renamed = renamed.into_inner().unwrap_or_else(|e| e.into_inner());
    write_mapping(output, renamed)?;
    for (dir, entries) in provenance.into_inner().unwrap_or_else(|e| e.into_inner()) {
        write_provenance(&dir, entries)?;
    }
    Ok(results)
}

/// What the source misses, and every tensor that could not be read or written: everything else was
/// written, and these make the exit status 2.
pub fn input_problems(source: &dyn Source, results: &[ConvertedTensor]) -> InputProblems {
    let mut problems = InputProblems::of_sources(&[source]);
    for r in results {
        if let Converted::Failed { reason } = &r.result {
            problems.push(InputProblem::unreadable(reason.clone()));
        }
    }
    problems
}

/// The `{i}` of a tensor's file: its index, or its position when indices repeat within the op (msprobe's
/// nested arguments share one), so that no file overwrites another.
fn file_index(source: &dyn Source, list: std::ops::Range<TensorId>, position: usize) -> u32 {
    let tensors = &source.index().tensors;
    let index = tensors[list.start + position].index;
    let repeated = list.filter(|&t| tensors[t].index == index).count() > 1;
    if repeated {
        position as u32
    } else {
        index
    }
}

/// The dtype a tensor is written as, and what the user should know about it.
fn target_dtype(dtype: DType) -> Option<(DType, Option<&'static str>)> {
    let target = match dtype {
        DType::DOUBLE => {
            return Some((dtype, Some("float64 values passed through float32 (precision lost)")))
        }
        DType::COMPLEX128 => {
            return Some((dtype, Some("complex128 values passed through float32 (precision lost)")))
        }
        _ if descr_of(dtype).is_some() => return Some((dtype, None)),
        DType::BF16 => (DType::FLOAT, "bf16 written as float32 (numpy has no bfloat16)"),
        DType::FLOAT8_E4M3FN | DType::FLOAT8_E5M2 => {
            (DType::FLOAT, "fp8 written as float32 (numpy has no float8)")
        }
        DType::HIFLOAT8 => (DType::FLOAT, "hifloat8 written as float32 (numpy has no hifloat8)"),
        DType::COMPLEX32 => (DType::COMPLEX64, "complex32 written as complex64 (numpy has no complex32)"),
        DType::INT4 => (DType::INT8, "int4 written as int8, one value per byte"),
        DType::UINT1 => (DType::UINT8, "uint1 written as uint8, one value per byte"),
        DType::QINT8 => (DType::INT8, "quantized types written as their integer storage"),
        DType::QINT16 => (DType::INT16, "quantized types written as their integer storage"),
        DType::QINT32 => (DType::INT32, "quantized types written as their integer storage"),
        DType::QUINT8 => (DType::UINT8, "quantized types written as their integer storage"),
        DType::QUINT16 => (DType::UINT16, "quantized types written as their integer storage"),
        _ => return None,
    };
    Some((target.0, Some(target.1)))
}

fn convert_one(source: &dyn Source, t: TensorId, dir: &Path, stem: &str) -> Converted {
    let info = &source.index().tensors[t];
    let label = source.index().tensor_label(t);
    if !info.has_data {
        let hint = if source.kind() == "capture" { "; record with --mode tensor to keep data" } else { "" };
        return Converted::Skipped {
            reason: format!("no data in the {} source (statistics only{hint})", source.kind()),
        };
    }
    if !info.dtype.is_known() {
        // Not a type without numbers: a code no CANN version defines, so the bytes cannot be read. The
        // source's own error names the file.
        let why = match source.read_values(t, &mut Vec::new()) {
            Err(e) => format!("{e:#}"),
            Ok(()) => format!("dtype code {} is not a CANN data type", info.dtype.code()),
        };
        return Converted::Failed { reason: format!("{label}: {why}") };
    }
    let Some((target, mut note)) = target_dtype(info.dtype) else {
        return Converted::Skipped { reason: format!("dtype {} cannot be decoded", info.dtype) };
    };
    if target == info.dtype {
        match source.read_host_bytes(t) {
            Ok(Some(host)) => return write_converted(&dir.join(format!("{stem}.npy")), target, &host, label),
            Ok(None) => {}
            Err(e) => return Converted::Failed { reason: format!("{label}: {e:#}") },
        }
    }
    let mut values = Vec::new();
    if let Err(e) = source.read_values(t, &mut values) {
        return Converted::Failed { reason: format!("{label}: {e:#}") };
    }
    let lanes = lanes_per_element(target) as u64;
    let expected = element_count(&info.shape).and_then(|n| n.checked_mul(lanes));
    // A source whose host shape does not fit its values still gets its numbers out, flat.
    let shape = if expected == Some(values.len() as u64) {
        info.shape.to_vec()
    } else {
        note = Some("written flat: the decoded values do not fill the recorded shape");
        vec![values.len() as u64 / lanes]
    };
    let wide_int = matches!(target, DType::INT32 | DType::UINT32 | DType::INT64 | DType::UINT64);
    if wide_int && values.iter().any(|v| v.abs() > F32_EXACT_INT) {
        note = Some("integers beyond 2^24 passed through float32 (rounded)");
    }
    let bytes = match encode_f32(target, &values) {
        Ok(bytes) => bytes,
        Err(e) => return Converted::Failed { reason: format!("{label}: cannot encode as {target}: {e}") },
    };
    let path = dir.join(format!("{stem}.npy"));
    match write_file(&path, target, &shape, &bytes) {
        Ok(written) => Converted::Written { bytes: written, note: note.map(str::to_string) },
        Err(e) => Converted::Failed { reason: format!("{label}: {e:#}") },
    }
}

/// Writes host bytes as they are; a shape they do not fill is written flat, as on the f32 path.
fn write_converted(path: &Path, dtype: DType, host: &HostBytes, label: String) -> Converted {
    let width = dtype.byte_size(1).unwrap_or(1).max(1);
    let fits = element_count(&host.shape).and_then(|n| n.checked_mul(width)) == Some(host.bytes.len() as u64);
    let (shape, note) = if fits {
        (host.shape.clone(), None)
    } else {
        (
            vec![host.bytes.len() as u64 / width],
            Some("written flat: the data does not fill the recorded shape"),
        )
    };
    match write_file(path, dtype, &shape, &host.bytes) {
        Ok(written) => Converted::Written { bytes: written, note: note.map(str::to_string) },
        Err(e) => Converted::Failed { reason: format!("{label}: {e:#}") },
    }
}

fn write_file(path: &Path, dtype: DType, shape: &[u64], data: &[u8]) -> Result<u64> {
    let context = || format!("cannot write {}", path.display());
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(context)?;
    }
    let file = std::fs::File::create(path).with_context(context)?;
    let mut w = std::io::BufWriter::new(file);
    write_npy(&mut w, dtype, shape, data).with_context(context)?;
    w.flush().with_context(context)?;
    let len = w.get_ref().metadata().with_context(context)?.len();
    Ok(len)
}

/// Adds `{file stem},{real op name}` rows to `DIR/mapping.csv`, keeping the rows of earlier conversions.
fn write_mapping(dir: &Path, mut rows: Vec<(String, String)>) -> Result<()> {
    if rows.is_empty() {
        return Ok(());
    }
    let existing = NameMapping::read_dir(dir)?;
    let mut all: BTreeMap<String, String> = existing.rows().iter().cloned().collect();
    rows.sort();
    all.extend(rows);
    let mut text = String::new();
    for (stem, name) in all {
        // The quoting NameMapping::parse undoes; a newline inside a name would split its row, so it is refused.
        if name.contains(['\n', '\r']) {
            bail!("op name {name:?} holds a line break; it cannot be listed in mapping.csv");
        }
        if name.contains([',', '"']) {
            text.push_str(&format!("{stem},\"{}\"\n", name.replace('"', "\"\"")));
        } else {
            text.push_str(&format!("{stem},{name}\n"));
        }
    }
    let path: PathBuf = dir.join("mapping.csv");
    std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))
}

/// Adds entries `{file, op_name, op_type, original_op, original_output_index}` to `dir/mapping.json` (the
/// npy source's per-directory mapping), replacing earlier conversions' entries for the same files.
fn write_provenance(dir: &Path, entries: Vec<serde_json::Value>) -> Result<()> {
    let path = dir.join("mapping.json");
    let mut all: BTreeMap<String, serde_json::Value> = BTreeMap::new();
    match std::fs::read(&path) {
        Ok(bytes) => {
            let existing: Vec<serde_json::Value> = serde_json::from_slice(&bytes)
                .with_context(|| format!("{}: not an array of mapping entries", path.display()))?;
            for e in existing {
                all.insert(e["file"].as_str().unwrap_or_default().to_string(), e);
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
    for e in entries {
        all.insert(e["file"].as_str().unwrap_or_default().to_string(), e);
    }
    let text = serde_json::to_string_pretty(&all.into_values().collect::<Vec<_>>())?;
    std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dtypes_map_to_numpy_types() {
        assert_eq!(target_dtype(DType::FLOAT16), Some((DType::FLOAT16, None)));
        assert_eq!(target_dtype(DType::INT64), Some((DType::INT64, None)));
        assert_eq!(target_dtype(DType::BF16).map(|t| t.0), Some(DType::FLOAT));
        assert_eq!(target_dtype(DType::FLOAT8_E5M2).map(|t| t.0), Some(DType::FLOAT));
        assert!(target_dtype(DType::DOUBLE).and_then(|t| t.1).is_some());
        assert_eq!(target_dtype(DType::STRING), None);
        assert_eq!(target_dtype(DType::HIFLOAT8).map(|t| t.0), Some(DType::FLOAT));
        assert_eq!(target_dtype(DType::HIFLOAT4), None);
    }
}
