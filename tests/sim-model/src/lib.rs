//! The simulated device's model: a small transformer trained with real math.
//!
//! The simulated runtime (`tests/sim-runtime`, libascendcl.so) executes it in device precision and dumps
//! every op it reports; the framework (`tests/sim-framework`) executes it in fp32 on the CPU as the
//! benchmark and writes one `.npy` per original op output. Both see the model only through this interface.

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

/// How the device reports a float overflow (cann-facts §3): saturate to +-max / NaN to 0, or produce inf/NaN.
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
    /// AI Core overflow status bits this op raised (0 = none; cann-facts §4 names the bits).
    pub overflow_status: u64,
}

/// Receives every op of a step, in execution order.
pub trait OpSink {
    fn op(&mut self, event: &OpEvent<'_>);
}
