//! The index: what a source knows about its ops and tensors, without touching tensor bytes.
//!
//! Every source (capture, CANN dump tree, .npy directory, msprobe dump) produces one [`Index`]; matching,
//! `diff` and `overflow` work on it alone, and only the metrics ask the source for values.
//!
//! Execution order is what the runtime says about each op ([`Launch`]: the dump's timestamp, task id and
//! stream id), never the order in which a source happened to meet the ops: a capture records a file when
//! its last chunk arrives, and a big tensor's file completes after a smaller one that started later. Every
//! source ends with [`Index::order_by_execution`], so that in every index op ids follow execution order.

use accutrace_formats::capture::CollectiveOp;
/// When the runtime says an op ran (the execution-order key, shared with the capture's step marks).
pub use accutrace_formats::dump::Launch;
use accutrace_formats::dump::PackedLaunch;
use accutrace_formats::histogram::Histogram;
use accutrace_formats::DType;

use crate::problems::InputProblem;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

/// Whether a tensor was an op's input or output (the dump format's own type).
pub use accutrace_formats::dump::Io;
use held_stats::HeldStats;
pub use shared::{SharedName, SharedShape};
pub use stats_place::RecordStats;
use stats_place::{PackedPlace, StatsPlace, StatsReader};

mod held_stats;
mod shared;
mod stats_of;
mod stats_place;

/// Position of a tensor in [`Index::tensors`].
pub type TensorId = usize;
/// Position of an op in [`Index::ops`].
pub type OpId = usize;

/// One tensor as the index knows it.
///
/// Every command holds one per tensor of each run, so what few sources set lies apart in [`TensorExtras`],
/// boxed and absent for most tensors (#18: memory with the tensor count). Read those fields through the
/// accessors (`t.label()`, `t.device_shape()`), set them through [`TensorInfo::set_extras`].
#[derive(Clone, Debug)]
pub struct TensorInfo {
    /// The op's id ([`TensorInfo::op`]) in 32 bits: an index of 2^32 ops would take hundreds of GB.
    pub(crate) op: u32,
    pub io: Io,
    pub index: u32,
    pub dtype: DType,
    /// Host (framework) shape after undoing the device format: shared with every tensor of the index of
    /// the same shape once pushed ([`Index::push_tensor`]).
    pub shape: SharedShape,
    /// [`TensorInfo::original_op`], set through [`TensorInfo::set_original_op`]: the name and the output
    /// index apart, the index beside the other 32-bit fields (16 bytes as a tuple).
    pub(crate) original_op_name: Option<SharedName>,
    pub(crate) original_output: u32,
    /// Where the tensor's statistics are: read through [`Index::stats`], set through [`Index::set_stats`].
    pub(crate) stats: PackedPlace,
    /// 64-bit content hash of the raw bytes (`accutrace_formats::stats::content_hash`), meaningful only
    /// while `has_hash`: read through [`TensorInfo::hash`], set through [`TensorInfo::set_hash`] (a flag
    /// beside the other flags instead of an `Option`'s eight bytes).
    pub(crate) hash_bits: u64,
    pub(crate) has_hash: bool,
    /// Whether the source can produce the values (statistics-only sources cannot).
    pub has_data: bool,
    /// The device shape is `shape` itself (a plain layout, which captures and CANN dumps record for
    /// nearly every tensor): kept as this flag instead of a second copy in the extras.
    pub(crate) device_shape_is_shape: bool,
    /// What few sources know; `None` when they know none of it. Written by [`TensorInfo::set_extras`].
    pub(crate) extras: Option<Box<TensorExtras>>,
    /// Source-private locator of the bytes.
    pub locator: u64,
}

/// What only some sources know about a tensor (device layouts, msprobe's names and gradients, exception
/// dumps' argument positions, `--histogram` captures' counts): the rare part of [`TensorInfo`].
#[derive(Clone, Debug, Default)]
pub struct TensorExtras {
    /// Device format name when it differs from the host layout (`NC1HWC0`, `FRACTAL_NZ`).
    pub device_format: Option<String>,
    pub device_shape: Option<Vec<u64>>,
    /// Counts per power-of-two magnitude and sign, when the capture kept them (`record --histogram`).
    pub histogram: Option<Box<Histogram>>,
    /// The tensor's own name when the source has one that `op.io.index` cannot express (msprobe's nested
    /// arguments: `Functional.linear.0.forward.input.0.1`).
    pub label: Option<String>,
    /// Framework-level dumps (msprobe) record whether the tensor required a gradient.
    pub requires_grad: Option<bool>,
    /// The tensor's position among the kernel's arguments, where the dump records it (a CANN exception
    /// dump, whose tensors without an address are left out, so `index` is not the kernel's own position).
    pub arg_index: Option<u32>,
}

impl TensorInfo {
    /// A tensor with data and nothing else known (no statistics, hash, layout, label): sources set the
    /// rest on it.
    pub fn new(op: OpId, io: Io, index: u32, dtype: DType, shape: Vec<u64>) -> TensorInfo {
        TensorInfo {
            op: op as u32,
            io,
            index,
            dtype,
            shape: shape.into(),
            original_op_name: None,
            original_output: 0,
            stats: PackedPlace::new(StatsPlace::None),
            hash_bits: 0,
            has_hash: false,
            has_data: true,
            device_shape_is_shape: false,
            extras: None,
            locator: 0,
        }
    }

    /// Replaces the rare fields (a device shape equal to `shape` is kept as a flag, and nothing is boxed
    /// when nothing is left): set `shape` first.
    pub fn set_extras(&mut self, mut extras: TensorExtras) {
        self.device_shape_is_shape = extras.device_shape.as_deref() == Some(&self.shape[..]);
        if self.device_shape_is_shape {
            extras.device_shape = None;
        }
        let TensorExtras { device_format, device_shape, histogram, label, requires_grad, arg_index } =
            &extras;
        let any = device_format.is_some()
            || device_shape.is_some()
            || histogram.is_some()
            || label.is_some()
            || requires_grad.is_some()
            || arg_index.is_some();
        self.extras = any.then(|| Box::new(extras));
    }

    /// The op the tensor belongs to.
    pub fn op(&self) -> OpId {
        self.op as OpId
    }

    /// Moves the tensor to op `op` (an id of the index it goes into).
    pub fn set_op(&mut self, op: OpId) {
        self.op = op as u32;
    }

    /// For outputs: the framework op (and output index) this tensor stands for after fusion. Inline, not
    /// among the extras: graph dumps and captures set it on every output, most often to the op's own name,
    /// which the name is then shared with ([`Index::share_name`]).
    pub fn original_op(&self) -> Option<(&SharedName, u32)> {
        self.original_op_name.as_ref().map(|name| (name, self.original_output))
    }

    pub fn set_original_op(&mut self, original: Option<(SharedName, u32)>) {
        (self.original_op_name, self.original_output) = match original {
            Some((name, output)) => (Some(name), output),
            None => (None, 0),
        };
    }

    /// [`TensorInfo::set_original_op`] by value, for building tensors in one expression.
    pub fn with_original_op(mut self, original: Option<(SharedName, u32)>) -> TensorInfo {
        self.set_original_op(original);
        self
    }

    /// Whether the source recorded the tensor's statistics (read them through [`Index::stats`]).
    pub fn has_stats(&self) -> bool {
        self.stats.get() != StatsPlace::None
    }

    /// The content hash of the tensor's raw bytes, where the source stored one.
    pub fn hash(&self) -> Option<u64> {
        self.has_hash.then_some(self.hash_bits)
    }

    pub fn set_hash(&mut self, hash: Option<u64>) {
        (self.has_hash, self.hash_bits) = (hash.is_some(), hash.unwrap_or(0));
    }

    /// [`TensorInfo::set_hash`] by value, for building tensors in one expression.
    pub fn with_hash(mut self, hash: Option<u64>) -> TensorInfo {
        self.set_hash(hash);
        self
    }

    /// [`TensorInfo::set_extras`] by value, for building tensors in one expression.
    pub fn with_extras(mut self, extras: TensorExtras) -> TensorInfo {
        self.set_extras(extras);
        self
    }

    /// The rare fields, as one value (a copy: for changing one of them and setting them back).
    pub fn extras(&self) -> TensorExtras {
        let mut extras = self.extras.as_deref().cloned().unwrap_or_default();
        extras.device_shape = self.device_shape().map(<[u64]>::to_vec);
        extras
    }

    pub fn device_format(&self) -> Option<&str> {
        self.extras.as_deref()?.device_format.as_deref()
    }

    pub fn device_shape(&self) -> Option<&[u64]> {
        if self.device_shape_is_shape {
            return Some(&self.shape[..]);
        }
        self.extras.as_deref()?.device_shape.as_deref()
    }

    pub fn histogram(&self) -> Option<&Histogram> {
        self.extras.as_deref()?.histogram.as_deref()
    }

    pub fn label(&self) -> Option<&str> {
        self.extras.as_deref()?.label.as_deref()
    }

    pub fn requires_grad(&self) -> Option<bool> {
        self.extras.as_deref()?.requires_grad
    }

    pub fn arg_index(&self) -> Option<u32> {
        self.extras.as_deref()?.arg_index
    }
}

/// Field by field as before the extras were boxed, `histogram` and `arg_index` left out where unset. The
/// statistics are the index's ([`Index::stats`]), not the tensor's: they are not among the fields.
impl Serialize for TensorInfo {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut s = serializer.serialize_struct("TensorInfo", 15)?;
        s.serialize_field("op", &self.op)?;
        s.serialize_field("io", &self.io)?;
        s.serialize_field("index", &self.index)?;
        s.serialize_field("dtype", &self.dtype)?;
        s.serialize_field("shape", &self.shape)?;
        s.serialize_field("device_format", &self.device_format())?;
        s.serialize_field("device_shape", &self.device_shape())?;
        s.serialize_field("original_op", &self.original_op())?;
        match self.histogram() {
            Some(histogram) => s.serialize_field("histogram", histogram)?,
            None => s.skip_field("histogram")?,
        }
        s.serialize_field("hash", &self.hash())?;
        s.serialize_field("label", &self.label())?;
        s.serialize_field("requires_grad", &self.requires_grad())?;
        match self.arg_index() {
            Some(arg_index) => s.serialize_field("arg_index", &arg_index)?,
            None => s.skip_field("arg_index")?,
        }
        s.serialize_field("has_data", &self.has_data)?;
        s.end()
    }
}

/// A tensor of the tests' indexes: data recorded, nothing else known (no statistics, hash, layout, label).
#[cfg(test)]
impl TensorInfo {
    pub(crate) fn for_test(op: OpId, io: Io, index: u32, dtype: DType, shape: Vec<u64>) -> TensorInfo {
        TensorInfo::new(op, io, index, dtype, shape)
    }
}

/// One op executed (a kernel launch, or an API call in framework-level dumps).
///
/// Its tensors are a run of the tensor table, inputs first ([`IndexedOp::inputs`], [`IndexedOp::outputs`]):
/// bounds instead of a list of ids each, whose two heap blocks an op were most of the op table's bytes
/// (#18: memory with the tensor count). [`Index::push_tensor`] extends the run while an op's tensors come
/// together, inputs first; [`Index::order_by_execution`] places every op's tensors so in any case.
#[derive(Clone, Debug)]
pub struct IndexedOp {
    /// Full name as the source names it (`model/layer_0/attn/MatMul`, `Functional.linear.0.forward`).
    pub name: SharedName,
    pub op_type: SharedName,
    pub step: u64,
    pub rank: u32,
    /// Position in execution order within the source (monotonic across steps): equal to the op's id once
    /// [`Index::order_by_execution`] has run, its arrival position before.
    pub order: u64,
    /// What the runtime said about when the op ran ([`IndexedOp::launch`]), its ids in 32 bits: 56 bytes as
    /// an `Option<Launch>` (#18: memory with the op count).
    launch: PackedLaunch,
    /// The op's tensor ids: inputs `first_tensor..first_output`, outputs `first_output..tensors_end`.
    /// 32 bits: [`Index::push_tensor`] refuses, as an input problem, a table longer than that numbers.
    first_tensor: u32,
    first_output: u32,
    tensors_end: u32,
}

impl IndexedOp {
    /// What the runtime said about when the op ran; `None` where the source only has its own order
    /// (an msprobe `dump.json` lists the calls in the order they were made).
    pub fn launch(&self) -> Option<Launch> {
        self.launch.get()
    }

    /// The op's inputs, in order: ids into [`Index::tensors`].
    pub fn inputs(&self) -> std::ops::Range<TensorId> {
        self.first_tensor as TensorId..self.first_output as TensorId
    }

    /// The op's outputs, in order: ids into [`Index::tensors`].
    pub fn outputs(&self) -> std::ops::Range<TensorId> {
        self.first_output as TensorId..self.tensors_end as TensorId
    }

    /// The op's inputs then its outputs.
    pub fn tensors(&self) -> std::ops::Range<TensorId> {
        self.first_tensor as TensorId..self.tensors_end as TensorId
    }

    /// Original (pre-fusion) op names this op's outputs stand for, deduplicated, in output order.
    pub fn original_names<'a>(&self, index: &'a Index) -> Vec<&'a str> {
        let mut names: Vec<&str> = Vec::new();
        for t in self.outputs() {
            if let Some((name, _)) = index.tensors[t].original_op() {
                if !names.contains(&name.as_str()) {
                    names.push(name);
                }
            }
        }
        names
    }
}

/// Field by field as when the tensors were two lists: `inputs` and `outputs` as lists of ids.
impl Serialize for IndexedOp {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut s = serializer.serialize_struct("IndexedOp", 8)?;
        s.serialize_field("name", &self.name)?;
        s.serialize_field("op_type", &self.op_type)?;
        s.serialize_field("step", &self.step)?;
        s.serialize_field("rank", &self.rank)?;
        s.serialize_field("order", &self.order)?;
        s.serialize_field("launch", &self.launch())?;
        s.serialize_field("inputs", &self.inputs().collect::<Vec<_>>())?;
        s.serialize_field("outputs", &self.outputs().collect::<Vec<_>>())?;
        s.end()
    }
}

/// A device overflow (op-debug) record, decoded, with the op it blames when that op was found.
#[derive(Clone, Debug, Serialize)]
pub struct OverflowRecord {
    pub step: u64,
    pub rank: u32,
    /// The op whose task and stream ids the record names (resolved through the dump files).
    pub op: Option<OpId>,
    /// `AIC`, `AIV`, `AICPU`, `SDMA`, `DHA atomic`, `L2 atomic`.
    pub engine: String,
    pub task_id: u64,
    pub stream_id: u64,
    pub status: Vec<u64>,
    /// The status bits, named (`float compute overflow`, ...).
    pub status_names: Vec<String>,
    /// Where the record came from.
    pub file: String,
}

/// One argument of an op as a framework-level dump records it, tensor or not (msprobe lists Python
/// scalars, `None` and the like beside the tensors), with the cells msprobe's own table shows for it.
#[derive(Clone, Debug, Serialize)]
pub struct RecordedArg {
    /// msprobe's full name (`Functional.linear.0.forward.input.0`).
    pub name: String,
    /// The op (API call) it belongs to, its step and its rank.
    pub op_name: String,
    pub step: u64,
    pub rank: u32,
    /// The index's tensor, when the argument is a tensor the index holds.
    pub tensor: Option<TensorId>,
    /// The type as recorded: `torch.float32`, `<class 'int'>`; `None` for a `None` argument.
    pub dtype: Option<String>,
    /// `[]` for scalars; `None` for a `None` argument.
    pub shape: Option<Vec<u64>>,
    pub requires_grad: Option<bool>,
    /// Max, min, mean and norm as the dump spells them (`988`, `0.0011091812048107386`, `None`).
    pub stats: [String; 4],
    /// The tensor's data file (`Functional.linear.0.forward.input.0.pt`), when it has one.
    pub data_name: Option<String>,
}

impl RecordedArg {
    /// The dtype cell: the recorded type, or `N/A`.
    pub fn dtype_text(&self) -> String {
        self.dtype.clone().unwrap_or_else(|| "N/A".into())
    }
}

/// An HCCL call one rank made, as the collector recorded it (captures only).
#[derive(Clone, Debug, Serialize)]
pub struct CollectiveCall {
    pub rank: u32,
    #[serde(skip)]
    pub info: accutrace_formats::capture::CollectiveInfo,
}

/// A capture stream whose ring policy (`record --policy ring:...`) deleted its oldest segments: the steps
/// before `first_step` are gone, and `first_step` may have lost its first ops.
#[derive(Clone, Debug, Serialize)]
pub struct RingDeleted {
    pub rank: u32,
    /// The first step the stream still holds (`None` when it holds no op).
    pub first_step: Option<u64>,
    pub last_step: Option<u64>,
    pub segments_deleted: u64,
}

/// A communicator a rank's process made from an HCCL root info: its identity (`root-{hash}`, the same on
/// every member), the rank's place in it and its size.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct MadeCommunicator {
    pub comm: String,
    pub comm_rank: u32,
    pub comm_size: u32,
}

/// The communicators one process of a capture made from a root info: its stream directory and rank.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamCommunicators {
    pub stream: String,
    pub rank: u32,
    pub made: Vec<MadeCommunicator>,
}

/// Everything a source knows, bytes excluded.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Index {
    pub ops: Vec<IndexedOp>,
    pub tensors: Vec<TensorInfo>,
    /// Device overflow records (op-debug files, or captured overflow records), in the order found.
    pub overflow_records: Vec<OverflowRecord>,
    /// Notes found while indexing that change nothing about the answer (unparseable file names, ...).
    pub warnings: Vec<String>,
    /// The dump holds only the ops the device flagged as overflowing (CANN's `dump_debug: on`, exclusive
    /// with the data dump): how far an overflow spread cannot be seen in it.
    pub only_overflowing_ops: bool,
    /// Every argument a framework-level dump (msprobe) recorded, tensors and others, in dump order; empty
    /// for sources that record tensors only.
    pub recorded_args: Vec<RecordedArg>,
    /// HCCL calls, per rank in the order they were made (captures with collective records only).
    pub collectives: Vec<CollectiveCall>,
    /// Capture streams whose ring policy deleted their oldest steps: every answer is about what is left.
    pub ring_deleted: Vec<RingDeleted>,
    /// What the run recorded about the settings that change results (a capture's manifest: the device
    /// overflow mode and the runtime's environment variables that matter), to tell whether two runs share a
    /// configuration; `None` when the source records none.
    pub settings: Option<BTreeMap<String, String>>,
    /// How many ranks the job had, as the run recorded it (a capture's manifest: `RANK_SIZE`, else
    /// `WORLD_SIZE`), when known.
    #[serde(skip)]
    pub job_ranks: Option<u32>,
    /// The HCCL communicators each rank's process made from a root info (a capture's manifest,
    /// `config.communicators`), by rank; a rank absent is unknown (an older collector, a dump tree).
    #[serde(skip)]
    pub communicators_made: BTreeMap<u32, Vec<MadeCommunicator>>,
    /// The same, by process (a capture's stream directory), in stream order: two runs written into one
    /// capture directory give a rank one stream per run, which only this tells apart.
    #[serde(skip)]
    pub communicators_by_stream: Vec<StreamCommunicators>,
    /// What the source knows it is missing (lost segments or streams, dropped chunks, unsealed streams,
    /// dump files that could not be read): these lead every report and make the exit status 2.
    pub problems: Vec<InputProblem>,
    /// Every distinct op name, op type and original op name, once ([`Index::share_name`]).
    #[serde(skip)]
    pub(crate) names: HashSet<SharedName>,
    /// Every distinct tensor shape, once ([`Index::push_tensor`]).
    #[serde(skip)]
    pub(crate) shapes: HashSet<SharedShape>,
    /// The statistics the index holds ([`Index::set_stats`]), by slot.
    #[serde(skip)]
    pub(crate) held_stats: Vec<HeldStats>,
    /// Reads the statistics a source left in its records ([`Index::stats`]).
    #[serde(skip)]
    pub(crate) record_stats: Option<StatsReader>,
}

/// How [`Index::order_by_execution`] moved things: the previous id of each op and tensor, by new id. A
/// source applies it to its own tables indexed by op or tensor id ([`Reorder::apply`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reorder {
    pub ops: Vec<OpId>,
    pub tensors: Vec<TensorId>,
}

impl Reorder {
    /// `table` (indexed by previous ids, `previous[new]` giving each new id's previous one) in new order.
    /// Permuted in place, cycle by cycle: a second table would double the index's peak while a source
    /// orders its tensors (#18: memory must not grow by a table per tensor).
    pub fn apply<T>(previous: &[usize], mut table: Vec<T>) -> Vec<T> {
        debug_assert_eq!(previous.len(), table.len());
        let mut placed = vec![false; table.len()];
        for start in 0..table.len() {
            // Each swap puts the entry that belongs at `at` there, carrying `start`'s entry along the cycle.
            let mut at = start;
            while !placed[at] {
                placed[at] = true;
                let from = previous[at];
                if from == start {
                    break;
                }
                table.swap(at, from);
                at = from;
            }
        }
        table
    }
}

impl Index {
    /// The ops that copy another: an FFTS+ task's sub-task (kernel-level) record beside the op-level record
    /// of the same task (`dump_level` "all", docs/CANN.md §5) holds that op's tensors again. Each such op ->
    /// the op-level op it copies. They are not ops of their own: two runs whose only difference is the
    /// dump level launched the same kernels.
    pub fn sub_task_copies(&self) -> HashMap<OpId, OpId> {
        let sub_task = |l: &Launch| l.context_id != 0 || l.thread_id != 0;
        // Most runs have no sub-task records: no map of every op-level task then (#18: 5.6 MB of diff's heap
        // peak at 198,840 tensors).
        if !self.ops.iter().any(|op| op.launch().is_some_and(|l| sub_task(&l))) {
            return HashMap::new();
        }
        fn task<'i>(op: &'i IndexedOp, l: &Launch) -> (u32, u64, &'i str, u64, u64) {
            (op.rank, op.step, op.name.as_str(), l.task_id, l.stream_id)
        }
        let mut op_level = HashMap::new();
        for (id, op) in self.ops.iter().enumerate() {
            if let Some(l) = op.launch().filter(|l| !sub_task(l)) {
                op_level.insert(task(op, &l), id);
            }
        }
        let mut copies = HashMap::new();
        for (id, op) in self.ops.iter().enumerate() {
            let Some(l) = op.launch().filter(sub_task) else { continue };
            if let Some(&of) = op_level.get(&task(op, &l)) {
                copies.insert(id, of);
            }
        }
        copies
    }

    /// This index's warnings, each prefixed with the side it describes (`target: ...`), for the report of a
    /// command that reads two sources.
    pub fn warnings_of(&self, side: &str) -> impl Iterator<Item = String> + '_ {
        let side = side.to_string();
        self.warnings.iter().map(move |w| format!("{side}: {w}"))
    }
}

impl Index {
    /// `text` as this index's one copy of it, made on first use: what sources give an output's
    /// `original_op` (ops' names and types are shared by [`Index::push_op`] itself).
    pub fn share_name(&mut self, text: &str) -> SharedName {
        if let Some(name) = self.names.get(text) {
            return name.clone();
        }
        let name = SharedName::from(text);
        self.names.insert(name.clone());
        name
    }

    /// Adds an op with no tensors yet, about which the source knows no launch; returns its id.
    pub fn push_op(&mut self, name: String, op_type: String, step: u64, rank: u32) -> OpId {
        self.push_op_at(name, op_type, step, rank, None)
    }

    /// Adds an op with no tensors yet and what the runtime said about its launch; returns its id.
    pub fn push_op_at(
        &mut self,
        name: String,
        op_type: String,
        step: u64,
        rank: u32,
        launch: Option<Launch>,
    ) -> OpId {
        let order = self.ops.len() as u64;
        // The names given are dropped for the index's shared ones: a copy per op grew with the count (#18).
        let (name, op_type) = (self.share_name(&name), self.share_name(&op_type));
        self.ops.push(IndexedOp {
            name,
            op_type,
            step,
            rank,
            order,
            launch: PackedLaunch::new(launch),
            first_tensor: 0,
            first_output: 0,
            tensors_end: 0,
        });
        self.ops.len() - 1
    }

    /// Puts ops in execution order: by rank, step, then launch (ops without one after those with one, in
    /// the order they were added). Tensors are renumbered to follow their ops (an op's tensors keep their
    /// relative order), op, overflow-record and recorded-argument references are rewritten, and `order`
    /// becomes the op id. Returns the permutation for the source's own tables.
    pub fn order_by_execution(&mut self) -> Reorder {
        let mut op_order: Vec<OpId> = (0..self.ops.len()).collect();
        op_order.sort_by_key(|&o| {
            let op = &self.ops[o];
            (op.rank, op.step, op.launch().is_none(), op.launch(), op.order)
        });
        let mut new_op = vec![0; self.ops.len()];
        for (new, &old) in op_order.iter().enumerate() {
            new_op[old] = new;
        }
        // Tensors placed by a counting sort on their op's new id, inputs before outputs, each op's inputs and
        // outputs in their previous order: a list of tensors per op was a heap block per op at the peak of
        // indexing, and two an op in the table (#18). Bucket `2 * o` holds the inputs of the op with new id
        // `o`, `2 * o + 1` its outputs; `next_slot[b]` starts as bucket `b`'s first new tensor id.
        let bucket = |tensor: &TensorInfo| 2 * new_op[tensor.op()] + usize::from(tensor.io == Io::Output);
        let mut next_slot = vec![0; 2 * self.ops.len() + 1];
        for tensor in &self.tensors {
            next_slot[bucket(tensor) + 1] += 1;
        }
        for b in 1..next_slot.len() {
            next_slot[b] += next_slot[b - 1];
        }
        let mut tensor_order: Vec<TensorId> = vec![0; self.tensors.len()];
        let mut new_tensor = vec![0; self.tensors.len()];
        for (t, tensor) in self.tensors.iter().enumerate() {
            let slot = &mut next_slot[bucket(tensor)];
            (tensor_order[*slot], new_tensor[t]) = (t, *slot);
            *slot += 1;
        }
        // Each slot now holds the end of its bucket. Past 32 bits (a table `push_tensor` reported as an input
        // problem) the bounds stop at the limit rather than wrap.
        let bound = |b: usize| u32::try_from(next_slot[b]).unwrap_or(u32::MAX);
        let ops = Reorder::apply(&op_order, std::mem::take(&mut self.ops));
        self.ops = ops
            .into_iter()
            .enumerate()
            .map(|(id, mut op)| {
                op.order = id as u64;
                op.first_tensor = if id == 0 { 0 } else { bound(2 * id - 1) };
                (op.first_output, op.tensors_end) = (bound(2 * id), bound(2 * id + 1));
                op
            })
            .collect();
        drop(next_slot);
        let tensors = Reorder::apply(&tensor_order, std::mem::take(&mut self.tensors));
        self.tensors = tensors
            .into_iter()
            .map(|mut t| {
                t.set_op(new_op[t.op()]);
                t
            })
            .collect();
        for record in &mut self.overflow_records {
            record.op = record.op.map(|o| new_op[o]);
        }
        // Recorded arguments keep their dump order; only their tensor references move.
        for arg in &mut self.recorded_args {
            arg.tensor = arg.tensor.map(|t| new_tensor[t]);
        }
        Reorder { ops: op_order, tensors: tensor_order }
    }

    /// Adds a tensor to its op (`tensor.op` must be an id returned by [`Index::push_op`]); its shape and
    /// its `original_op` name become this index's shared ones. The op lists it at once when the op's
    /// tensors come together, inputs first; else from [`Index::order_by_execution`] on.
    pub fn push_tensor(&mut self, mut tensor: TensorInfo) -> TensorId {
        if let Some(name) = &mut tensor.original_op_name {
            *name = self.share_name(name);
        }
        match self.shapes.get(&tensor.shape[..]) {
            Some(shape) => tensor.shape = shape.clone(),
            None => {
                self.shapes.insert(tensor.shape.clone());
            }
        }
        let id = self.tensors.len();
        let Some(end) = u32::try_from(id).ok().and_then(|id| id.checked_add(1)) else {
            if id == u32::MAX as usize {
                self.problems.push(InputProblem::incomplete(format!(
                    "the input holds more than {} tensors, as many as an index numbers: tensors from op {:?} \
                     on are left out of their ops, and every answer is about the rest; read fewer steps or \
                     ranks at a time",
                    u32::MAX,
                    self.ops[tensor.op()].name.as_str()
                )));
            }
            self.tensors.push(tensor);
            return id;
        };
        let op = &mut self.ops[tensor.op()];
        if op.first_tensor == op.tensors_end {
            // No tensor yet: its run starts here.
            (op.first_tensor, op.first_output, op.tensors_end) = (end - 1, end - 1, end - 1);
        }
        // The op's run grows while its tensors come together, inputs first; a tensor elsewhere waits for
        // `order_by_execution`, which every source ends with, to place it.
        let in_place =
            op.tensors_end == end - 1 && (tensor.io == Io::Output || op.first_output == op.tensors_end);
        if in_place {
            if tensor.io == Io::Input {
                op.first_output = end;
            }
            op.tensors_end = end;
        }
        self.tensors.push(tensor);
        id
    }

    /// Distinct steps present, ascending.
    pub fn steps(&self) -> Vec<u64> {
        let mut steps: Vec<u64> = self.ops.iter().map(|o| o.step).collect();
        steps.sort_unstable();
        steps.dedup();
        steps
    }

    /// Distinct ranks present, ascending.
    pub fn ranks(&self) -> Vec<u32> {
        let mut ranks: Vec<u32> = self.ops.iter().map(|o| o.rank).collect();
        ranks.sort_unstable();
        ranks.dedup();
        ranks
    }

    /// The step of each HCCL call of [`Index::collectives`], by the rule of the ranks engine's program
    /// order (`ranks::events`): a call comes before the first op of its rank dumped after it and takes the
    /// step of the op before it (the first op's, for a call before any op). Where only the flagged ops were
    /// dumped ([`Index::only_overflowing_ops`]) a call takes a step only when the ops around it agree on it
    /// (or the op after it is at step 0), else the step another member of the same collective got; `None`
    /// when nobody knows. A receive of a message sent at a later step takes the send's; one between the
    /// ops of two steps whose send is missing has none.
    pub fn collective_steps(&self) -> Vec<Option<u64>> {
        let sparse = self.only_overflowing_ops;
        // One merge walk per rank (ops in execution order, calls in call order), as `ranks::events`
        // interleaves them: linear in ops and calls.
        let mut ops_of: BTreeMap<u32, Vec<&IndexedOp>> = BTreeMap::new();
        for op in &self.ops {
            ops_of.entry(op.rank).or_default().push(op);
        }
        let mut cursor: BTreeMap<u32, usize> = BTreeMap::new();
        // Calls placed after an op of one step and before an op of another (where a receive's send alone
        // tells which step it belongs to).
        let mut between_steps = vec![false; self.collectives.len()];
        let mut steps: Vec<Option<u64>> = self
            .collectives
            .iter()
            .zip(&mut between_steps)
            .map(|(call, between)| {
                let start = call.info.start_us;
                let ops = ops_of.get(&call.rank)?;
                let pos = cursor.entry(call.rank).or_default();
                while *pos < ops.len() && ops[*pos].launch().is_none_or(|l| start >= l.timestamp_us) {
                    *pos += 1;
                }
                let before = pos.checked_sub(1).map(|p| ops[p].step);
                let after = ops.get(*pos).map(|o| o.step);
                *between = matches!((before, after), (Some(a), Some(b)) if a != b);
                if !sparse {
                    return Some(before.unwrap_or(ops[0].step));
                }
                match (before, after) {
                    (Some(a), Some(b)) if a == b => Some(a),
                    (None, Some(0)) => Some(0),
                    _ => None,
                }
            })
            .collect();
        let key =
            |c: &CollectiveCall| (!c.info.op.is_point_to_point()).then(|| (c.info.comm.clone(), c.info.seq));
        let mut known: BTreeMap<(String, u64), u64> = BTreeMap::new();
        for (c, step) in self.collectives.iter().zip(&steps) {
            if let (Some(k), Some(step)) = (key(c), step) {
                known.entry(k).or_insert(*step);
            }
        }
        for (c, step) in self.collectives.iter().zip(&mut steps) {
            if step.is_none() {
                *step = key(c).and_then(|k| known.get(&k).copied());
            }
        }
        // A receive takes the step of its send when that is later or its own is unknown (as
        // `ranks::events`): a pipeline's later stage receives a step's input before any op of that step.
        let mut sent: BTreeMap<(String, u32, u32, u64), u64> = BTreeMap::new();
        for (c, step) in self.collectives.iter().zip(&steps) {
            if let (CollectiveOp::Send, Some(dst), Some(step)) = (c.info.op, c.info.peer, step) {
                sent.insert((c.info.comm.clone(), c.info.comm_rank, dst, c.info.seq), *step);
            }
        }
        // Without its send, a receive between two steps' ops has no step: the op before it gives the
        // earlier, a guess (`ranks::events` says the same).
        let sends: BTreeSet<(String, u32, u32, u64)> = self
            .collectives
            .iter()
            .filter(|c| c.info.op == CollectiveOp::Send)
            .filter_map(|c| Some((c.info.comm.clone(), c.info.comm_rank, c.info.peer?, c.info.seq)))
            .collect();
        for ((c, step), between) in self.collectives.iter().zip(&mut steps).zip(between_steps) {
            let (CollectiveOp::Recv, Some(src)) = (c.info.op, c.info.peer) else { continue };
            let key = (c.info.comm.clone(), src, c.info.comm_rank, c.info.seq);
            let send = sends.contains(&key).then(|| sent.get(&key).copied());
            *step = received_at(*step, between, send);
        }
        steps
    }

    /// What a capture covers when its ring policy deleted old steps, one line per rank (`rank 0: steps
    /// 3-7; steps 0-2 deleted by the ring policy`); empty when nothing was deleted.
    pub fn ring_scope(&self) -> Vec<String> {
        ring_scope_of(&self.ring_deleted)
    }

    /// `op.io.index` label used in reports (`model/attn/MatMul.output.0`).
    pub fn tensor_label(&self, id: TensorId) -> String {
        let t = &self.tensors[id];
        if let Some(label) = t.label() {
            return label.to_string();
        }
        format!("{}.{}.{}", self.ops[t.op()].name, t.io.as_str(), t.index)
    }
}

/// The step a receive belongs to ([`Index::collective_steps`]), from its own (the step of the op before it
/// on its rank), whether it was made between the ops of two steps, and its send: `None` where the data
/// lacks it, else the send's own step. A receive takes the step of its send when that is later or its own
/// is unknown (a pipeline's later stage receives a step's input before any op of that step); without its
/// send, one between two steps' ops has none. The census of a capture read by windows places receives by
/// this rule too, so that each window's index gives a receive the step the whole read does.
pub fn received_at(own: Option<u64>, between_steps: bool, send: Option<Option<u64>>) -> Option<u64> {
    match send {
        Some(Some(sent_at)) => Some(own.map_or(sent_at, |own| own.max(sent_at))),
        Some(None) => own,
        None if between_steps => None,
        None => own,
    }
}

/// [`Index::ring_scope`] of what a capture's ring deleted, per stream.
pub fn ring_scope_of(deleted: &[RingDeleted]) -> Vec<String> {
    deleted
        .iter()
        .map(|r| match (r.first_step, r.last_step) {
            (Some(a), Some(b)) if a > 0 => format!(
                "rank {}: steps {a}-{b}; step{} deleted by the ring policy ({} segment(s)), and step {a} \
                 may have lost its first ops",
                r.rank,
                if a == 1 { " 0".to_string() } else { format!("s 0-{}", a - 1) },
                r.segments_deleted
            ),
            (Some(a), Some(b)) => format!(
                "rank {}: steps {a}-{b} as numbered here; {} segment(s) before them deleted by the ring \
                 policy, which steps they held is unknown",
                r.rank, r.segments_deleted
            ),
            _ => format!(
                "rank {}: no op left; {} segment(s) deleted by the ring policy",
                r.rank, r.segments_deleted
            ),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every command holds a `TensorInfo` per tensor of each run (#18: memory with the tensor count): what
    /// few sources set stays in the boxed `TensorExtras`, so a new field goes there unless most sources
    /// set it. 288 bytes before the extras were boxed.
    #[test]
    fn a_tensor_info_holds_the_common_fields_only() {
        // The op's id, where the statistics are and `original_op`'s output index in 32 bits each, side by
        // side: 80 with the id a `usize`, the place an enum and `original_op` a tuple. Where the statistics
        // are, not the statistics (`PackedPlace`: a capture's record, or a slot of the index's table): 136
        // with them held in every tensor in 64 bytes (`HeldStats`), 176 with a `TensorStats` (96). The
        // hash's presence a flag beside the others: 144 with an `Option<u64>`. Shape and `original_op`'s
        // name one pointer each (`SharedShape`, `SharedName`): 192 with them `Arc<[u64]>` and `Arc<str>`
        // (16 bytes each), 208 with a `Vec` and a `String`.
        assert_eq!(std::mem::size_of::<TensorInfo>(), 64, "bytes a tensor in every index");
        // The launch's ids in 32 bits (`PackedLaunch`, 32 bytes): 104 with an `Option<Launch>` (56). Names
        // one pointer each: 120 with `Arc<str>`s. 160 with a list each of inputs and outputs (and a heap
        // block each beside it) instead of bounds of the tensor table; 176 before that with a `String` each
        // for the name and the type.
        assert_eq!(std::mem::size_of::<IndexedOp>(), 80, "bytes an op in every index");
    }

    #[test]
    fn an_ops_tensors_are_a_run_of_the_table_inputs_first_once_ordered() {
        let mut index = Index::default();
        let a = index.push_op("a".into(), "T".into(), 0, 0);
        let b = index.push_op("b".into(), "T".into(), 0, 0);
        // Together, inputs first: listed at once.
        index.push_tensor(tensor(a, Io::Input, 0));
        index.push_tensor(tensor(a, Io::Output, 0));
        assert_eq!((index.ops[a].inputs(), index.ops[a].outputs()), (0..1, 1..2));
        // An output before an input, and a tensor after another op's: placed by the ordering.
        index.push_tensor(tensor(b, Io::Output, 0));
        index.push_tensor(tensor(b, Io::Input, 0));
        index.push_tensor(tensor(a, Io::Output, 1));
        index.order_by_execution();
        let (op_a, op_b) = (&index.ops[a], &index.ops[b]);
        assert_eq!((op_a.inputs(), op_a.outputs(), op_b.inputs(), op_b.outputs()), (0..1, 1..3, 3..4, 4..5));
        let places: Vec<(OpId, Io, u32)> = index.tensors.iter().map(|t| (t.op(), t.io, t.index)).collect();
        assert_eq!(
            places,
            [
                (a, Io::Input, 0),
                (a, Io::Output, 0),
                (a, Io::Output, 1),
                (b, Io::Input, 0),
                (b, Io::Output, 0)
            ]
        );
        // Serialized as when they were lists.
        let json = serde_json::to_string(op_a).unwrap();
        assert!(json.ends_with(r#""launch":null,"inputs":[0],"outputs":[1,2]}"#), "{json}");
    }

    #[test]
    fn names_and_shapes_are_held_once_per_index_and_read_as_before() {
        let mut index = Index::default();
        let a = index.push_op("model/MatMul".into(), "MatMul".into(), 0, 0);
        let b = index.push_op("model/MatMul".into(), "MatMul".into(), 1, 0);
        let mut fused = TensorInfo::for_test(b, Io::Output, 0, DType::FLOAT16, vec![2]);
        fused.set_original_op(Some(("model/MatMul".into(), 0)));
        let t = index.push_tensor(fused);
        let (name, shared) = (&index.ops[a].name, index.tensors[t].original_op().unwrap().0);
        assert!(name.is_shared_with(&index.ops[b].name) && name.is_shared_with(shared));
        assert!(index.ops[a].op_type.is_shared_with(&index.ops[b].op_type));
        assert_eq!(*name, "model/MatMul");
        assert_eq!(name.as_str(), "model/MatMul");
        assert_eq!(format!("{name} {name:?}"), r#"model/MatMul "model/MatMul""#);
        assert_eq!(serde_json::to_string(&index.tensors[t].original_op()).unwrap(), r#"["model/MatMul",0]"#);
        let other = index.push_tensor(TensorInfo::for_test(a, Io::Input, 0, DType::FLOAT, vec![2]));
        let (shape, again) = (&index.tensors[t].shape, &index.tensors[other].shape);
        assert!(shape.is_shared_with(again));
        assert!(*shape == vec![2] && shape[..] == [2] && vec![2] == *shape);
        assert_eq!(format!("{shape:?} {}", serde_json::to_string(shape).unwrap()), "[2] [2]");
    }

    #[test]
    fn the_extras_are_boxed_only_where_a_source_set_one_and_read_back_as_set() {
        let shape = vec![2, 3];
        let plain = TensorInfo::for_test(0, Io::Output, 0, DType::FLOAT16, shape.clone())
            .with_extras(TensorExtras { device_shape: Some(shape.clone()), ..TensorExtras::default() });
        assert!(plain.extras.is_none(), "a device shape equal to the host shape is a flag");
        assert_eq!(plain.device_shape(), Some(&shape[..]));
        assert_eq!((plain.device_format(), plain.label(), plain.arg_index()), (None, None, None));

        let nz =
            TensorInfo::for_test(0, Io::Output, 0, DType::FLOAT16, shape.clone()).with_extras(TensorExtras {
                device_format: Some("FRACTAL_NZ".into()),
                device_shape: Some(vec![1, 1, 16, 16]),
                label: Some("x.0".into()),
                requires_grad: Some(false),
                arg_index: Some(3),
                ..TensorExtras::default()
            });
        assert_eq!(nz.device_shape(), Some(&[1, 1, 16, 16][..]));
        assert_eq!(
            (nz.device_format(), nz.label(), nz.requires_grad(), nz.arg_index()),
            (Some("FRACTAL_NZ"), Some("x.0"), Some(false), Some(3))
        );
        let json = serde_json::to_string(&nz).unwrap();
        assert!(
            json.contains(r#""device_format":"FRACTAL_NZ","device_shape":[1,1,16,16],"original_op":null"#),
            "{json}"
        );
        assert!(
            json.contains(r#""label":"x.0","requires_grad":false,"arg_index":3,"has_data":true"#),
            "{json}"
        );
        let json = serde_json::to_string(&plain).unwrap();
        assert!(!json.contains("histogram") && !json.contains("arg_index"), "left out where unset: {json}");
        assert!(json.contains(r#""label":null,"requires_grad":null,"has_data":true"#), "{json}");
    }

    #[test]
    fn a_call_takes_the_step_of_the_op_before_it_or_a_members_in_sparse_dumps() {
        use accutrace_formats::capture::{CollectiveInfo, CollectiveOp};
        let call = |rank: u32, seq: u64, start_us: u64| CollectiveCall {
            rank,
            info: CollectiveInfo {
                comm: "c".into(),
                comm_rank: rank,
                comm_size: 2,
                seq,
                op: CollectiveOp::AllReduce,
                count: 1,
                dtype: 0,
                reduce_op: None,
                peer: None,
                input: None,
                output: None,
                start_us,
                end_us: start_us,
                result: 0,
            },
        };
        let mut index = Index::default();
        // Rank 0 dumped ops at steps 0 (t 10, 20) and 1 (t 30); rank 1 dumped nothing: its call gets the
        // step its fellow member got.
        for (step, t) in [(0, 10), (0, 20), (1, 30)] {
            let launch = Launch { timestamp_us: t, ..Launch::default() };
            index.push_op_at(format!("op{t}"), "X".into(), step, 0, Some(launch));
        }
        index.collectives = vec![call(0, 0, 5), call(0, 1, 25), call(0, 2, 40), call(1, 1, 26)];
        assert_eq!(index.collective_steps(), [Some(0), Some(0), Some(1), Some(0)]);
        // Only the flagged ops dumped: the call between steps 0 and 1 is unknown, the one before step 0's
        // first op is at 0; rank 1's call gets its fellow member's step, when that one has one.
        index.only_overflowing_ops = true;
        assert_eq!(index.collective_steps(), [Some(0), None, None, None]);
        index.collectives[1].info.start_us = 15;
        assert_eq!(index.collective_steps(), [Some(0), Some(0), None, Some(0)]);
    }

    #[test]
    fn a_receive_between_two_steps_without_its_send_has_no_step() {
        use accutrace_formats::capture::{CollectiveInfo, CollectiveOp};
        let recv = |seq: u64, start_us: u64| CollectiveCall {
            rank: 1,
            info: CollectiveInfo {
                comm: "c".into(),
                comm_rank: 1,
                comm_size: 2,
                seq,
                op: CollectiveOp::Recv,
                count: 1,
                dtype: 0,
                reduce_op: None,
                peer: Some(0),
                input: None,
                output: None,
                start_us,
                end_us: start_us,
                result: 0,
            },
        };
        // Rank 1 (a pipeline's second stage) received message #0 before its first op, #1 after step 0's
        // ops and before step 1's, #2 among step 1's; rank 0's sends were not recorded.
        let mut index = Index::default();
        for (step, t) in [(0, 10), (1, 30), (1, 50)] {
            let launch = Launch { timestamp_us: t, ..Launch::default() };
            index.push_op_at(format!("op{t}"), "X".into(), step, 1, Some(launch));
        }
        index.collectives = vec![recv(0, 5), recv(1, 20), recv(2, 40)];
        assert_eq!(index.collective_steps(), [Some(0), None, Some(1)]);
    }

    fn tensor(op: OpId, io: Io, index: u32) -> TensorInfo {
        TensorInfo::for_test(op, io, index, DType::FLOAT16, vec![2])
    }

    /// Ops added as they arrived (b's file completed first), with the launch the runtime gave each.
    fn arrived() -> Index {
        let mut index = Index::default();
        let at = |ts: u64, task: u64| Some(Launch { timestamp_us: ts, task_id: task, ..Launch::default() });
        for (name, step, launch) in [
            ("b", 0, at(20, 2)),
            ("late_step", 1, at(5, 1)),
            ("a", 0, at(10, 1)),
            ("untimed", 0, None),
            ("tie", 0, at(20, 1)),
        ] {
            let op = index.push_op_at(name.into(), "T".into(), step, 0, launch);
            index.push_tensor(tensor(op, Io::Input, 0));
            index.push_tensor(tensor(op, Io::Output, 0));
        }
        index.recorded_args.push(RecordedArg {
            name: "b.output.0".into(),
            op_name: "b".into(),
            step: 0,
            rank: 0,
            tensor: Some(1),
            dtype: None,
            shape: None,
            requires_grad: None,
            stats: Default::default(),
            data_name: None,
        });
        index.overflow_records.push(OverflowRecord {
            step: 0,
            rank: 0,
            op: Some(0),
            engine: "AIC".into(),
            task_id: 2,
            stream_id: 0,
            status: vec![],
            status_names: vec![],
            file: String::new(),
        });
        index
    }

    #[test]
    fn ops_follow_their_launch_not_their_arrival() {
        let mut index = arrived();
        let before = index.clone();
        let reorder = index.order_by_execution();
        let names: Vec<&str> = index.ops.iter().map(|o| o.name.as_str()).collect();
        // Step 0 by timestamp (the task id breaks the tie at 20), its untimed op after the timed ones; then
        // step 1, although its timestamp is the smallest.
        assert_eq!(names, ["a", "tie", "b", "untimed", "late_step"]);
        assert!(index.ops.iter().enumerate().all(|(id, op)| op.order == id as u64));
        assert_eq!(reorder.ops, [2, 4, 0, 3, 1]);
        // Every reference still points at the same thing.
        for (new, &old) in reorder.tensors.iter().enumerate() {
            let (t, was) = (&index.tensors[new], &before.tensors[old]);
            assert_eq!((index.ops[t.op()].name.as_str(), t.io), (before.ops[was.op()].name.as_str(), was.io));
        }
        for op in &index.ops {
            for t in op.tensors() {
                assert_eq!(index.ops[index.tensors[t].op()].name, op.name);
            }
        }
        assert_eq!(index.ops[index.overflow_records[0].op.unwrap()].name, "b");
        let arg = index.recorded_args[0].tensor.unwrap();
        assert_eq!(
            (index.ops[index.tensors[arg].op()].name.as_str(), index.tensors[arg].io),
            ("b", Io::Output)
        );
        // Tensor ids follow op ids.
        assert!(index.tensors.windows(2).all(|w| w[0].op <= w[1].op));
    }

    #[test]
    fn ordering_does_not_depend_on_arrival() {
        let mut expected = arrived();
        expected.order_by_execution();
        let names = |index: &Index| index.ops.iter().map(|o| o.name.clone()).collect::<Vec<_>>();
        // The same ops arriving in every rotation of the timed ones give the same order.
        for shift in 1..4 {
            let original = arrived();
            let mut index = Index::default();
            let mut ids: Vec<usize> =
                (0..original.ops.len()).filter(|&o| original.ops[o].launch().is_some()).collect();
            ids.rotate_left(shift);
            ids.extend((0..original.ops.len()).filter(|&o| original.ops[o].launch().is_none()));
            for o in ids {
                let op = &original.ops[o];
                let id = index.push_op_at(
                    op.name.to_string(),
                    op.op_type.to_string(),
                    op.step,
                    op.rank,
                    op.launch(),
                );
                index.push_tensor(tensor(id, Io::Output, 0));
            }
            index.order_by_execution();
            assert_eq!(names(&index), names(&expected), "rotation {shift}");
        }
    }

    #[test]
    fn reorder_applies_a_permutation() {
        assert_eq!(Reorder::apply(&[2, 0, 1], vec!['a', 'b', 'c']), vec!['c', 'a', 'b']);
    }

    /// Ordering a source's tables must not hold two copies of them: at 200,000 tensors of a stats capture
    /// the second copy was a third of `overflow`'s peak (#18). The permuted table is the given buffer.
    #[test]
    fn reorder_permutes_in_place_every_cycle() {
        // Fixed points, a 2-cycle and a 4-cycle: 0 stays, 1<->2, 3->5->6->4->3.
        let previous = [0, 2, 1, 5, 3, 6, 4];
        let table: Vec<String> = (0..previous.len()).map(|i| format!("t{i}")).collect();
        let expected: Vec<String> = previous.iter().map(|&p| table[p].clone()).collect();
        let buffer = table.as_ptr();
        let permuted = Reorder::apply(&previous, table);
        assert_eq!(permuted, expected);
        assert_eq!(permuted.as_ptr(), buffer, "the table was copied");
        assert!(Reorder::apply(&[], Vec::<u8>::new()).is_empty());
    }
}
