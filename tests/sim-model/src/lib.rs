//! The simulated device's model: a small transformer trained with real math.
//!
//! The simulated runtime (`tests/sim-runtime`, libascendcl.so) executes it in device precision and dumps
//! every op it reports; the framework (`tests/sim-framework`) executes it in fp32 on the CPU as the
//! benchmark and writes one `.npy` per original op output. Both see the model only through this interface.
//!
//! # Use
//! ```no_run
//! # use sim_model::*;
//! let cfg = ModelConfig::from_json("{}").unwrap(); // the model file (`aclmdlLoadFromFile`)
//! let mut trainer = Trainer::new(cfg);
//! let report: StepReport = trainer.step(0, OverflowMode::InfNan, &mut NullSink);
//! ```
//!
//! # Ops of one step, in execution order (`{p}` = `model/layer_{l}`, for each layer l)
//! Forward: `model/embedding/GatherV2` (GatherV2; inputs table, tokens INT32), `model/embedding/pos/Add`
//! (Add); per layer `{p}/ln_1/LayerNorm` (LayerNorm; outputs y, mean, variance), `{p}/attn/qkv/MatMul`
//! (MatMulV2), `{p}/attn/split_heads/Split` (SplitVD; outputs q, k, v as (B, H, S, dh)),
//! `{p}/attn/scores/BatchMatMul` (BatchMatMulV2; q k^T / sqrt(dh)), `{p}/attn/Softmax` (SoftmaxV2, causal),
//! `{p}/attn/context/BatchMatMul` (BatchMatMulV2), `{p}/attn/merge_heads/Transpose` (TransposeD),
//! `{p}/attn/proj/MatMul` (MatMulV2), `{p}/attn/residual/Add` (Add), `{p}/ln_2/LayerNorm`, then either
//! `{p}/mlp/fc1/MatMul` (MatMulV2), `{p}/mlp/fc1/BiasAdd` (BiasAdd), `{p}/mlp/Gelu` (GeLU; with
//! `activation` tanh, sigmoid or relu: `{p}/mlp/Tanh` (Tanh), `.../Sigmoid` (Sigmoid), `.../Relu`
//! (Relu)) or, with `fusion`, ONE `{p}/mlp/fused_matmul_biasadd_gelu` (FusedMatMulBiasGelu) whose output 0
//! has `original_op = ({p}/mlp/Gelu, 0)` and output 1 (the pre-activation) `({p}/mlp/fc1/BiasAdd, 0)`; the
//! fc1 MatMul output has no fused counterpart. Then `{p}/mlp/fc2/MatMul`, `{p}/mlp/fc2/BiasAdd`,
//! `{p}/mlp/residual/Add`; after the layers `model/ln_f/LayerNorm`, `model/lm_head/MatMul`,
//! `model/loss/SoftmaxCrossEntropyWithLogits` (inputs logits, labels INT32; outputs loss, backprop),
//! `model/loss/Mean` (ReduceMeanD, fp32 scalar), and in fp16 only `model/loss/scale/Mul` (Mul, fp32).
//!
//! Backward: `gradients/model/loss/Mean_grad/Mul`, then for every forward op in reverse order
//! `gradients/{forward op}_grad/{op}`: MatMulV2 ops give `..._grad/MatMul` (dx) and `..._grad/MatMul_1`
//! (dW); BatchMatMulV2 `..._grad/BatchMatMul` and `..._grad/BatchMatMul_1`; `..._grad/LayerNormGrad`,
//! `..._grad/SoftmaxGrad`, `{p}/mlp/Gelu_grad/GeluGrad` (`Tanh_grad/TanhGrad`, `Sigmoid_grad/SigmoidGrad`,
//! `Relu_grad/ReluGrad`), `..._BiasAdd_grad/BiasAddGrad`,
//! `{p}/attn/merge_heads/Transpose_grad/Transpose`, `{p}/attn/split_heads/Split_grad/Concat` (ConcatD),
//! residuals `gradients/{p}/{mlp,attn}/residual/Add_grad/AddN`, and finally
//! `gradients/model/embedding/pos/Add_grad/ReduceSum` (ReduceSumD) and
//! `gradients/model/embedding/GatherV2_grad/UnsortedSegmentSum`. Backward names are the same with and
//! without fusion. Then, unless the step is skipped, `optimizer/{param}/ApplyAdam` (ApplyAdamD; inputs
//! var, m, v, unscaled grad; outputs var, m, v, all fp32) or `optimizer/{param}/ApplyGradientDescent`.
//!
//! Device formats: see [`emit`]. Overflow: see [`precision::quantize`].
//!
//! # Data parallel
//! [`Trainer::step`] is [`Trainer::compute_gradients`] (forward and backward on a batch) followed by
//! [`Trainer::apply_gradients`] (the optimizer on gradients summed over replicas). A data-parallel
//! framework runs the halves separately and all-reduces the gradients between them; each rank reads its
//! shard of the data ([`data::shard`]). Faults with a `rank` key apply on that rank only
//! ([`Faults::for_rank`]); `wrong_data` and `nondeterministic_reduction` are the framework's to apply.
//!
//! # Loss channel between the runtime and `sim-train`
//! After each `aclmdlExecute` the runtime makes that step's [`StepReport`] available as one JSON line
//! ([`StepReport::to_json_line`]): (1) exported `size_t simAclLastStepReport(char *buf, size_t len)`
//! copies the NUL-terminated line and returns its length (0 = no step yet); and (2) when env
//! `SIM_ACL_REPORT` names a file, the line is appended to it. `sim-train` uses (1) and falls back to (2).

pub mod config;
pub mod data;
mod device;
pub mod emit;
mod model;
pub mod ops;
pub mod params;
pub mod precision;
pub mod rng;
mod trainer;

pub use config::{
    Activation, Faults, LossScale, ModelConfig, Optimizer, OverflowFault, StepFault, WeightBitFlip,
};
pub use trainer::{StepGradients, StepReport, Trainer};

use accutrace_formats::DType;
use serde::{Deserialize, Serialize};

/// Arithmetic of the run: the device's mixed precision, or the fp32 benchmark.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    /// fp16 activations with dynamic loss scaling (fp32 master weights).
    Fp16,
    /// bf16 activations (fp32 master weights).
    Bf16,
    /// Everything in fp32: the benchmark ("GPU") side.
    Fp32,
}

/// How the device reports a float overflow (docs/CANN.md §3): saturate to +-max / NaN to 0, or produce inf/NaN.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OverflowMode {
    Saturation,
    InfNan,
}

/// One tensor of an op as the device holds it.
pub struct TensorView<'a> {
    /// Storage dtype (FLOAT16, BF16, FLOAT, INT32, INT64, ...).
    pub dtype: DType,
    /// Device format code (`OutputFormat`: 2 = ND, 3 = NC1HWC0, 29 = FRACTAL_NZ, ...).
    pub format: i32,
    /// Shape in the device format (padded blocks included).
    pub device_shape: Vec<u64>,
    /// Host (framework) shape.
    pub original_shape: Vec<u64>,
    /// Raw little-endian bytes in the device format (padding may hold garbage, as on a real device).
    pub bytes: &'a [u8],
    /// For outputs: the framework op (and its output index) this tensor stands for, after fusion.
    pub original_op: Option<(String, u32)>,
}

/// One executed op (a kernel launch): what a dump file describes.
pub struct OpEvent<'a> {
    /// Op type as the dump file name shows it (`MatMulV2`, `LayerNorm`, `FusedMatMulBiasGelu`, ...).
    pub op_type: &'a str,
    /// Full graph name (`model/layer_0/attn/MatMul`).
    pub op_name: &'a str,
    pub inputs: Vec<TensorView<'a>>,
    pub outputs: Vec<TensorView<'a>>,
    /// AI Core overflow status bits this op raised (0 = none; docs/CANN.md §4 names the bits).
    pub overflow_status: u64,
}

/// Receives every op of a step, in execution order.
pub trait OpSink {
    fn op(&mut self, event: &OpEvent<'_>);

    /// Whether the sink wants this op at all; `false` skips encoding its tensors (a run without dump).
    fn wants(&mut self, _op_name: &str) -> bool {
        true
    }
}

/// A sink that takes nothing (training without dump).
pub struct NullSink;

impl OpSink for NullSink {
    fn op(&mut self, _event: &OpEvent<'_>) {}
    fn wants(&mut self, _op_name: &str) -> bool {
        false
    }
}
