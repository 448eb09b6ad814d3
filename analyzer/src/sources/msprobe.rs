//! msprobe dumps as a [`Source`]: every `dump.json` found (`step{N}/rank{N}/dump.json`), its API calls as
//! ops and its tensor arguments as tensors, named exactly as msprobe names them.
//!
//! Non-tensor arguments (Python scalars, `None`, slices) are not tensors and are left out of the index's
//! tensors; every argument is listed in [`Index::recorded_args`], from which `--format msprobe-csv`
//! writes msprobe's own table (non-tensor arguments as "unsupported" rows). Statistics come from `dump.json` (what msprobe
//! computed on the device, in the tensor's dtype), so statistics-only dumps compare too.

use super::source::Source;
use crate::index::{Index, Io, RecordedArg, TensorId, TensorInfo};
use crate::problems::InputProblem;
use accutrace_formats::msprobe::{self, EntryKind, MsprobeDump, MsprobeEntry, StatValue};
use accutrace_formats::stats::TensorStats;
use accutrace_formats::tensor::element_count;
use anyhow::Result;
use std::path::{Path, PathBuf};

pub struct MsprobeSource {
    root: PathBuf,
    dumps: Vec<MsprobeDump>,
    index: Index,
    /// (dump, entry) of each tensor, by tensor id.
    entries: Vec<(usize, usize)>,
}

/// `step3` -> 3 and `rank1` -> 1 from the directories above a dump.json.
fn numbered_component(path: &Path, prefix: &str) -> Option<u64> {
    path.components().rev().find_map(|c| c.as_os_str().to_str()?.strip_prefix(prefix)?.parse().ok())
}

impl MsprobeSource {
    pub fn open(root: &Path, dump_jsons: &[PathBuf]) -> Result<Self> {
        let mut dumps = Vec::new();
        let mut index = Index::default();
        let mut entries = Vec::new();
        let mut first_error = None;
        for path in dump_jsons {
            // One unreadable dump.json (of one step or rank) is an input problem; the others are read.
            let dump = match MsprobeDump::open(path) {
                Ok(dump) => dump,
                Err(e) => {
                    let e =
                        anyhow::Error::new(e).context(format!("cannot read msprobe dump {}", path.display()));
                    index
                        .problems
                        .push(InputProblem::incomplete(format!("{e:#}; the other dumps were read")));
                    first_error.get_or_insert(e);
                    continue;
                }
            };
            let dir = path.parent().unwrap_or(Path::new("."));
            let step = numbered_component(dir, "step").unwrap_or(0);
            let rank = numbered_component(dir, "rank").unwrap_or(0) as u32;
            let d = dumps.len();
            let mut current: Option<(String, usize)> = None;
            let mut counts = (0u32, 0u32);
            for (e, entry) in dump.entries.iter().enumerate() {
                // Every argument is listed for msprobe's own table; the tensors are indexed too.
                let arg = index.recorded_args.len();
                index.recorded_args.push(recorded_arg(entry, step, rank));
                let EntryKind::Tensor(meta) = &entry.kind else { continue };
                let op = match &current {
                    Some((name, id)) if *name == entry.op_name => *id,
                    _ => {
                        let api = entry.op_name.split('.').nth(1).unwrap_or(&entry.op_name).to_string();
                        let id = index.push_op(entry.op_name.clone(), api, step, rank);
                        current = Some((entry.op_name.clone(), id));
                        counts = (0, 0);
                        id
                    }
                };
                let io = match entry.role {
                    msprobe::Role::Input | msprobe::Role::Parameters => Io::Input,
                    msprobe::Role::Output | msprobe::Role::ParametersGrad => Io::Output,
                };
                let slot = if io == Io::Input { &mut counts.0 } else { &mut counts.1 };
                let position = *slot;
                *slot += 1;
                let Some(dtype) = meta.dtype else {
                    index.problems.push(InputProblem::unreadable(format!(
                        "{}: {}: dtype {} is not one this reader decodes; the tensor is left out",
                        path.display(),
                        entry.name,
                        meta.dtype_name
                    )));
                    continue;
                };
                let tensor = index.push_tensor(TensorInfo {
                    op,
                    io,
                    index: position,
                    dtype,
                    shape: meta.shape.clone(),
                    device_format: None,
                    device_shape: None,
                    original_op: None,
                    stats: stats_of(meta),
                    histogram: None,
                    hash: None,
                    label: Some(entry.name.clone()),
                    requires_grad: meta.requires_grad,
                    has_data: meta.data_name.is_some(),
                    locator: 0,
                });
                index.recorded_args[arg].tensor = Some(tensor);
                entries.push((d, e));
            }
            dumps.push(dump);
        }
        if let (true, Some(e)) = (dumps.is_empty(), first_error) {
            return Err(e);
        }
        // msprobe records no launch: `dump.json` lists the calls in the order they were made, which is the
        // order they were added in (per step and rank).
        let reorder = index.order_by_execution();
        let entries = crate::index::Reorder::apply(&reorder.tensors, entries);
        Ok(MsprobeSource { root: root.to_path_buf(), dumps, index, entries })
    }
}

/// An argument as msprobe's table shows it: a tensor's dtype name, shape, statistics and data file; a
/// scalar as `<class 'int'>` with its value in every statistic; `None` as N/A.
fn recorded_arg(entry: &MsprobeEntry, step: u64, rank: u32) -> RecordedArg {
    let none = || StatValue::None.py_repr();
    let (dtype, shape, requires_grad, stats, data_name) = match &entry.kind {
        EntryKind::Tensor(t) => (
            Some(t.dtype_name.clone()),
            Some(t.shape.clone()),
            t.requires_grad,
            [t.max.py_repr(), t.min.py_repr(), t.mean.py_repr(), t.norm.py_repr()],
            t.data_name.clone(),
        ),
        EntryKind::Scalar { type_name, value } => (
            Some(format!("<class '{type_name}'>")),
            Some(Vec::new()),
            None,
            std::array::from_fn(|_| value.py_repr()),
            None,
        ),
        EntryKind::Other { type_name, .. } => (
            Some(format!("<class '{type_name}'>")),
            Some(Vec::new()),
            None,
            std::array::from_fn(|_| none()),
            None,
        ),
        EntryKind::None => (None, None, None, std::array::from_fn(|_| none()), None),
    };
    RecordedArg {
        name: entry.name.clone(),
        op_name: entry.op_name.clone(),
        step,
        rank,
        tensor: None,
        dtype,
        shape,
        requires_grad,
        stats,
        data_name,
    }
}

/// msprobe's Max/Min/Mean/Norm as [`TensorStats`]; counts msprobe does not record stay 0, except that
/// an inf/NaN extreme is counted once so overflow analysis sees it.
fn stats_of(meta: &msprobe::TensorMeta) -> Option<TensorStats> {
    let (max, min) = (meta.max.as_f64()?, meta.min.as_f64()?);
    let num = |v: &StatValue| v.as_f64().unwrap_or(f64::NAN);
    let count = element_count(&meta.shape)?;
    Some(TensorStats {
        count,
        nan: u64::from(max.is_nan() || min.is_nan()),
        pos_inf: u64::from(max == f64::INFINITY),
        neg_inf: u64::from(min == f64::NEG_INFINITY),
        zero: 0,
        min: if min.is_finite() { min } else { f64::NAN },
        max: if max.is_finite() { max } else { f64::NAN },
        mean: num(&meta.mean),
        l2_norm: num(&meta.norm),
        abs_sum: None,
        at_saturation: 0,
    })
}

impl Source for MsprobeSource {
    fn kind(&self) -> &'static str {
        "msprobe"
    }

    fn root(&self) -> &Path {
        &self.root
    }

    fn index(&self) -> &Index {
        &self.index
    }

    fn read_values(&self, tensor: TensorId, out: &mut Vec<f32>) -> Result<()> {
        let (d, e) = self.entries[tensor];
        self.dumps[d].load_values_into(&self.dumps[d].entries[e], out)?;
        Ok(())
    }

    /// msprobe's files are pickles with varying framing, so the hash is taken over the decoded values.
    fn content_hash(&self, tensor: TensorId) -> Result<u64> {
        let mut values = Vec::new();
        self.read_values_and_hash(tensor, &mut values)
    }

    fn read_values_and_hash(&self, tensor: TensorId, out: &mut Vec<f32>) -> Result<u64> {
        let (d, e) = self.entries[tensor];
        let (_, hash) = self.dumps[d].load_values_and_hash_into(&self.dumps[d].entries[e], out)?;
        Ok(hash)
    }
}
