//! The index: what a source knows about its ops and tensors, without touching tensor bytes.
//!
//! Every source (capture, CANN dump tree, .npy directory, msprobe dump) produces one [`Index`]; matching,
//! `diff` and `overflow` work on it alone, and only the metrics ask the source for values.

use accutrace_formats::stats::TensorStats;
use accutrace_formats::DType;
use serde::Serialize;

/// Whether a tensor was an op's input or output (the dump format's own type).
pub use accutrace_formats::dump::Io;

/// Position of a tensor in [`Index::tensors`].
pub type TensorId = usize;
/// Position of an op in [`Index::ops`].
pub type OpId = usize;

/// One tensor as the index knows it.
#[derive(Clone, Debug, Serialize)]
pub struct TensorInfo {
    pub op: OpId,
    pub io: Io,
    pub index: u32,
    pub dtype: DType,
    /// Host (framework) shape after undoing the device format.
    pub shape: Vec<u64>,
    /// Device format name when it differs from the host layout (`NC1HWC0`, `FRACTAL_NZ`).
    pub device_format: Option<String>,
    pub device_shape: Option<Vec<u64>>,
    /// For outputs: the framework op (and output index) this tensor stands for after fusion.
    pub original_op: Option<(String, u32)>,
    pub stats: Option<TensorStats>,
    /// 64-bit content hash of the raw bytes (`accutrace_formats::stats::content_hash`), when stored.
    pub hash: Option<u64>,
    /// The tensor's own name when the source has one that `op.io.index` cannot express (msprobe's nested
    /// arguments: `Functional.linear.0.forward.input.0.1`).
    pub label: Option<String>,
    /// Framework-level dumps (msprobe) record whether the tensor required a gradient.
    pub requires_grad: Option<bool>,
    /// Whether the source can produce the values (statistics-only sources cannot).
    pub has_data: bool,
    /// Source-private locator of the bytes.
    #[serde(skip)]
    pub locator: u64,
}

/// One executed op (a kernel launch, or an API call in framework-level dumps).
#[derive(Clone, Debug, Serialize)]
pub struct IndexedOp {
    /// Full name as the source names it (`model/layer_0/attn/MatMul`, `Functional.linear.0.forward`).
    pub name: String,
    pub op_type: String,
    pub step: u64,
    pub rank: u32,
    /// Execution order within the source (monotonic across steps).
    pub order: u64,
    pub inputs: Vec<TensorId>,
    pub outputs: Vec<TensorId>,
}

impl IndexedOp {
    /// Original (pre-fusion) op names this op's outputs stand for, deduplicated, in output order.
    pub fn original_names<'a>(&self, index: &'a Index) -> Vec<&'a str> {
        let mut names: Vec<&str> = Vec::new();
        for &t in &self.outputs {
            if let Some((name, _)) = &index.tensors[t].original_op {
                if !names.contains(&name.as_str()) {
                    names.push(name);
                }
            }
        }
        names
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

/// Everything a source knows, bytes excluded.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Index {
    pub ops: Vec<IndexedOp>,
    pub tensors: Vec<TensorInfo>,
    /// Device overflow records (op-debug files, or captured overflow records), in the order found.
    pub overflow_records: Vec<OverflowRecord>,
    /// Problems found while indexing that did not stop it (unparseable names, torn tails, ...).
    pub warnings: Vec<String>,
}

impl Index {
    /// Adds an op with no tensors yet; returns its id.
    pub fn push_op(&mut self, name: String, op_type: String, step: u64, rank: u32) -> OpId {
        let order = self.ops.len() as u64;
        self.ops.push(IndexedOp {
            name,
            op_type,
            step,
            rank,
            order,
            inputs: Vec::new(),
            outputs: Vec::new(),
        });
        self.ops.len() - 1
    }

    /// Adds a tensor to its op (`tensor.op` must be an id returned by [`Index::push_op`]).
    pub fn push_tensor(&mut self, tensor: TensorInfo) -> TensorId {
        let id = self.tensors.len();
        let op = &mut self.ops[tensor.op];
        match tensor.io {
            Io::Input => op.inputs.push(id),
            Io::Output => op.outputs.push(id),
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

    /// `op.io.index` label used in reports (`model/attn/MatMul.output.0`).
    pub fn tensor_label(&self, id: TensorId) -> String {
        let t = &self.tensors[id];
        if let Some(label) = &t.label {
            return label.clone();
        }
        format!("{}.{}.{}", self.ops[t.op].name, t.io.as_str(), t.index)
    }
}
