//! A recording sink and the metrics the tests compute themselves.

#![allow(dead_code)]

use accutrace_formats::DType;
use sim_model::precision::decode;
use sim_model::{OpEvent, OpSink, OverflowMode, Precision, StepReport, Trainer};

pub struct Tensor {
    pub dtype: DType,
    pub format: i32,
    /// Original (host) shape.
    pub shape: Vec<u64>,
    pub device_shape: Vec<u64>,
    pub bytes: Vec<u8>,
    pub original_op: Option<(String, u32)>,
}

impl Tensor {
    /// Values in host order (device formats undone with the shared layout code, padding cropped).
    pub fn values(&self) -> Vec<f32> {
        let raw = self.raw_values();
        let format = accutrace_formats::layout::Format::from_code(self.format);
        accutrace_formats::layout::to_host(format, &raw, &self.device_shape, &self.shape, self.dtype, 0)
            .unwrap()
    }

    fn raw_values(&self) -> Vec<f32> {
        let p = match self.dtype {
            DType::FLOAT16 => Precision::Fp16,
            DType::BF16 => Precision::Bf16,
            DType::FLOAT => Precision::Fp32,
            DType::INT32 => {
                return self
                    .bytes
                    .chunks_exact(4)
                    .map(|c| i32::from_le_bytes(c.try_into().unwrap()) as f32)
                    .collect()
            }
            other => panic!("unexpected dtype {other:?}"),
        };
        decode(p, &self.bytes)
    }
}

pub struct Op {
    pub op_type: String,
    pub name: String,
    pub inputs: Vec<Tensor>,
    pub outputs: Vec<Tensor>,
    pub status: u64,
}

#[derive(Default)]
pub struct Recorder {
    pub ops: Vec<Op>,
}

impl OpSink for Recorder {
    fn op(&mut self, e: &OpEvent<'_>) {
        let copy = |t: &sim_model::TensorView<'_>| Tensor {
            dtype: t.dtype,
            format: t.format,
            shape: t.original_shape.clone(),
            device_shape: t.device_shape.clone(),
            bytes: t.bytes.to_vec(),
            original_op: t.original_op.clone(),
        };
        self.ops.push(Op {
            op_type: e.op_type.to_string(),
            name: e.op_name.to_string(),
            inputs: e.inputs.iter().map(copy).collect(),
            outputs: e.outputs.iter().map(copy).collect(),
            status: e.overflow_status,
        });
    }
}

impl Recorder {
    pub fn get(&self, name: &str) -> &Op {
        self.ops.iter().find(|o| o.name == name).unwrap_or_else(|| panic!("no op {name}"))
    }
}

/// Runs steps 0..steps, recording only the last.
pub fn run(cfg: &sim_model::ModelConfig, steps: u64, mode: OverflowMode) -> (Recorder, Vec<StepReport>) {
    let mut t = Trainer::new(cfg.clone());
    let mut reports = Vec::new();
    let mut rec = Recorder::default();
    for k in 0..steps {
        rec = Recorder::default();
        reports.push(t.step(k, mode, &mut rec));
    }
    (rec, reports)
}

pub fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let (mut ab, mut aa, mut bb) = (0f64, 0f64, 0f64);
    for (&x, &y) in a.iter().zip(b) {
        let (x, y) = (x as f64, y as f64);
        ab += x * y;
        aa += x * x;
        bb += y * y;
    }
    if aa == 0.0 && bb == 0.0 {
        return 1.0;
    }
    ab / (aa.sqrt() * bb.sqrt())
}
