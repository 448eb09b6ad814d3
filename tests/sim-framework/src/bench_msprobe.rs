//! `sim-train bench --format msprobe`: the fp32 benchmark written as msprobe dumps a PyTorch run (task
//! `tensor`, level L1): one record per API call, `DIR/step{k}/rank0/dump.json` plus one `.npy` per tensor
//! in `dump_tensor_data/`. This is the benchmark a PyTorch user brings: API-level, while the NPU capture of
//! an eager run holds kernels.
//!
//! The sim-model ops are grouped into the torch APIs that would have launched them (`api_of`): a linear
//! layer's MatMul and BiasAdd are one `Functional.linear`, the loss's two kernels one
//! `Functional.cross_entropy`. An API's inputs are its kernels' inputs that none of its kernels produced;
//! its output is its last kernel's (a layer norm's first only, as torch returns only y). The backward
//! kernels of an op (`gradients/{op}_grad/...`) form the backward record of the forward call that ran it,
//! with every gradient they compute as outputs. Optimizer kernels are not recorded (msprobe records the
//! optimizer's own tensor calls, which have no counterpart here). Call numbers count per API name within
//! a step, as msprobe's do.

use crate::bench::write_npy;
use accutrace_formats::stats::{content_hash, TensorStats};
use accutrace_formats::DType;
use anyhow::{Context, Result};
use sim_model::{ModelConfig, OpEvent, OpSink, OverflowMode, Trainer};
use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::path::Path;

/// Runs `steps` steps of `cfg`'s benchmark and writes them under `out`; returns each step's loss.
pub fn run(cfg: &ModelConfig, steps: u64, out: &Path) -> Result<Vec<f32>> {
    let mut trainer = Trainer::new(cfg.benchmark());
    let mut losses = Vec::new();
    for step in 0..steps {
        let dir = out.join(format!("step{step}")).join("rank0");
        let data_dir = dir.join("dump_tensor_data");
        std::fs::create_dir_all(&data_dir).with_context(|| format!("creating {}", data_dir.display()))?;
        let mut sink = ApiSink::default();
        let report = trainer.step(step, OverflowMode::InfNan, &mut sink);
        sink.close_call();
        let json = sink.write(&data_dir)?;
        std::fs::write(dir.join("dump.json"), json).with_context(|| format!("writing {}", dir.display()))?;
        losses.push(report.loss);
    }
    Ok(losses)
}

/// A tensor of an API call: what msprobe records.
struct Tensor {
    dtype: DType,
    shape: Vec<u64>,
    bytes: Vec<u8>,
}

impl Tensor {
    fn of(t: &sim_model::TensorView<'_>) -> Tensor {
        // The benchmark is all ND: device and host layouts are the same bytes.
        Tensor { dtype: t.dtype, shape: t.original_shape.clone(), bytes: t.bytes.to_vec() }
    }
}

/// One API call being assembled from its kernels.
struct Call {
    name: String,
    inputs: Vec<Tensor>,
    outputs: Vec<Tensor>,
    /// Hashes of what the call's own kernels produced (not inputs of the call).
    produced: HashSet<u64>,
    backward: bool,
}

#[derive(Default)]
struct ApiSink {
    calls: Vec<Call>,
    /// The group the open call belongs to (forward: the API's unit; backward: the forward call's name).
    open: Option<String>,
    /// Calls per API name so far in this step.
    counts: HashMap<&'static str, u64>,
    /// Forward op name -> the forward call it belonged to (for its backward kernels).
    forward_call: HashMap<String, String>,
}

/// The torch API of a forward sim-model op, and the unit its kernels share (one call per unit).
fn api_of(op_name: &str) -> Option<(&'static str, String)> {
    let (parent, last) = op_name.rsplit_once('/')?;
    let api = match last {
        "GatherV2" => "Functional.embedding",
        "Add" => "Tensor.__add__",
        "LayerNorm" => "Functional.layer_norm",
        "MatMul" | "BiasAdd" => return Some(("Functional.linear", parent.to_string())),
        "Split" => "Tensor.split",
        "BatchMatMul" => "Torch.matmul",
        "Softmax" => "Functional.softmax",
        "Transpose" => "Tensor.transpose",
        "Gelu" => "Functional.gelu",
        "SoftmaxCrossEntropyWithLogits" | "Mean" if parent == "model/loss" => {
            return Some(("Functional.cross_entropy", parent.to_string()))
        }
        "Mul" if parent.ends_with("/scale") => "Tensor.__mul__",
        _ => return None,
    };
    Some((api, op_name.to_string()))
}

/// The forward op a backward kernel belongs to: `gradients/{op}_grad/...`.
fn forward_op_of(op_name: &str) -> Option<&str> {
    let rest = op_name.strip_prefix("gradients/")?;
    let end = rest.find("_grad/")?;
    Some(&rest[..end])
}

impl ApiSink {
    fn close_call(&mut self) {
        self.open = None;
    }

    fn open_call(&mut self, group: String, name: String, backward: bool) -> &mut Call {
        if self.open.as_deref() != Some(group.as_str()) {
            self.open = Some(group);
            self.calls.push(Call {
                name,
                inputs: Vec::new(),
                outputs: Vec::new(),
                produced: HashSet::new(),
                backward,
            });
        }
        self.calls.last_mut().expect("a call was just opened")
    }

    /// Adds a kernel to its call: inputs the call did not produce itself; outputs replace the call's (its
    /// last kernel's are the call's) or, for backward calls, add to them.
    fn add(call: &mut Call, e: &OpEvent<'_>, keep_outputs: usize) {
        for t in &e.inputs {
            if !call.produced.contains(&content_hash(t.bytes)) {
                call.inputs.push(Tensor::of(t));
            }
        }
        if !call.backward {
            call.outputs.clear();
        }
        for t in e.outputs.iter().take(keep_outputs) {
            call.produced.insert(content_hash(t.bytes));
            call.outputs.push(Tensor::of(t));
        }
    }

    /// `dump.json`, with the tensors written into `data_dir`. Written by hand: the calls must stay in the
    /// order they were made (a JSON map of serde_json's would sort them).
    fn write(&self, data_dir: &Path) -> Result<String> {
        let dir = data_dir.display().to_string();
        let mut json = String::new();
        let _ = write!(
            json,
            "{{\n \"task\": \"tensor\",\n \"level\": \"L1\",\n \"framework\": \"pytorch\",\n \"dump_data_dir\": {},\n \"data\": {{",
            serde_json::Value::String(dir)
        );
        for (c, call) in self.calls.iter().enumerate() {
            let direction = if call.backward { "backward" } else { "forward" };
            let key = format!("{}.{direction}", call.name);
            let args = |role: &str, tensors: &[Tensor]| -> Result<String> {
                let mut items = Vec::new();
                for (i, t) in tensors.iter().enumerate() {
                    let file = format!("{key}.{role}.{i}.npy");
                    write_npy(&data_dir.join(&file), t.dtype, &t.shape, &t.bytes)?;
                    items.push(tensor_json(t, &file)?);
                }
                Ok(format!("[{}]", items.join(", ")))
            };
            let (inputs, outputs) = (args("input", &call.inputs)?, args("output", &call.outputs)?);
            let body = if call.backward {
                format!("{{\"input\": {inputs}, \"output\": {outputs}}}")
            } else {
                format!("{{\"input_args\": {inputs}, \"input_kwargs\": {{}}, \"output\": {outputs}}}")
            };
            let comma = if c == 0 { "" } else { "," };
            let _ = write!(json, "{comma}\n  {}: {body}", serde_json::Value::String(key.clone()));
        }
        json.push_str("\n }\n}\n");
        Ok(json)
    }
}

/// One tensor's record: msprobe's fields, statistics over the values (f64, as torch reports them).
fn tensor_json(t: &Tensor, data_name: &str) -> Result<String> {
    let s = TensorStats::of_bytes(t.dtype, &t.bytes).with_context(|| format!("statistics of {data_name}"))?;
    let number = |x: f64| if x.is_finite() { serde_json::json!(x) } else { serde_json::Value::Null };
    let dtype = match t.dtype {
        DType::FLOAT => "torch.float32",
        DType::INT32 => "torch.int32",
        DType::FLOAT16 => "torch.float16",
        DType::BF16 => "torch.bfloat16",
        _ => "torch.float32",
    };
    let value = serde_json::json!({
        "type": "torch.Tensor",
        "dtype": dtype,
        "shape": t.shape,
        "Max": number(s.max),
        "Min": number(s.min),
        "Mean": number(s.mean),
        "Norm": number(s.l2_norm),
        "requires_grad": t.dtype == DType::FLOAT,
        "data_name": data_name,
    });
    Ok(value.to_string())
}

impl OpSink for ApiSink {
    fn op(&mut self, e: &OpEvent<'_>) {
        if let Some(forward) = forward_op_of(e.op_name) {
            let Some(call) = self.forward_call.get(forward).cloned() else { return };
            let c = self.open_call(format!("backward:{call}"), call, true);
            Self::add(c, e, usize::MAX);
            return;
        }
        let Some((api, unit)) = api_of(e.op_name) else {
            self.close_call();
            return;
        };
        if self.open.as_deref() != Some(unit.as_str()) {
            let n = self.counts.entry(api).or_insert(0);
            let name = format!("{api}.{n}");
            *n += 1;
            self.open_call(unit.clone(), name, false);
        }
        let call = self.calls.last_mut().expect("the unit's call is open");
        self.forward_call.insert(e.op_name.to_string(), call.name.clone());
        let keep = if api == "Functional.layer_norm" { 1 } else { usize::MAX };
        Self::add(call, e, keep);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ops_group_into_the_apis_torch_would_call() {
        assert_eq!(
            api_of("model/layer_0/mlp/fc1/MatMul"),
            Some(("Functional.linear", "model/layer_0/mlp/fc1".into()))
        );
        assert_eq!(api_of("model/layer_0/mlp/fc1/BiasAdd").unwrap().1, "model/layer_0/mlp/fc1");
        assert_eq!(api_of("model/loss/Mean").unwrap().0, "Functional.cross_entropy");
        assert_eq!(api_of("model/layer_0/attn/residual/Add").unwrap().0, "Tensor.__add__");
        assert_eq!(api_of("optimizer/wte/ApplyAdam"), None);
        assert_eq!(
            forward_op_of("gradients/model/layer_0/mlp/fc1/MatMul_grad/MatMul_1"),
            Some("model/layer_0/mlp/fc1/MatMul")
        );
        assert_eq!(forward_op_of("model/layer_0/mlp/Gelu"), None);
    }
}
