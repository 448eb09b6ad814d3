//! The model file: a JSON `ModelConfig` (what the runtime's `aclmdlLoadFromFile` reads).
//!
//! Every field has a default, so `{}` is a valid model: a tiny transformer whose steps take milliseconds.
//! `"preset": "small" | "medium" | "large"` starts from a benchmark size and the other keys override it.

use crate::Precision;
use serde::{Deserialize, Serialize};

/// Update rule applied to the fp32 master weights.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Optimizer {
    Sgd,
    Adam,
}

/// The MLP's activation (between fc1 and fc2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Activation {
    /// `GeLU` (tanh approximation): the default, and the only one the fused kernel has.
    Gelu,
    /// `Tanh`.
    Tanh,
    /// `Sigmoid`.
    Sigmoid,
    /// `Relu`.
    Relu,
}

/// Loss scaling (used in fp16 only; bf16 and fp32 train unscaled).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LossScale {
    /// Scale of the first step.
    pub initial: f32,
    /// Halve on overflow (and skip the step), double after `growth_interval` good steps.
    pub dynamic: bool,
    pub growth_interval: u32,
    /// Floor for the halving.
    pub min: f32,
    /// Scale an fp32 run too. The benchmark of an fp16 run sets it, as a GPU AMP run with a grad scaler
    /// would: its dumped gradients then carry the same scale as the device's and compare one to one.
    pub in_fp32: bool,
}

impl Default for LossScale {
    fn default() -> Self {
        // 1024 rather than the usual 65536: the tiny default model would overflow at step 0 with 65536, and
        // an overflow that nobody injected would blur the overflow-fault tests.
        LossScale { initial: 1024.0, dynamic: true, growth_interval: 100, min: 1.0, in_fp32: false }
    }
}

/// An op that overflows at one step.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OverflowFault {
    /// Full op name (`model/layer_0/mlp/fc1/MatMul`); matched against every emitted op, forward or backward.
    pub op: String,
    pub step: u64,
    /// Only on this rank of a data-parallel job (`RANK_ID`); absent = every rank.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank: Option<u32>,
}

/// A fault that happens at one step, on one rank or all of them. What happens is the fault's field name in
/// [`Faults`]; the framework (`sim-train`) applies these, not the device.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StepFault {
    pub step: u64,
    /// Only on this rank (`RANK_ID`); absent = every rank.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank: Option<u32>,
}

/// One bit of one master weight flips between two steps: silent memory corruption on one replica.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WeightBitFlip {
    /// Parameter name (`model/layer_0/attn/qkv/weight`; see `params`).
    pub param: String,
    /// The flip happens just before this step's forward pass.
    pub step: u64,
    /// Only on this rank (`RANK_ID`); absent = every rank.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank: Option<u32>,
    /// Element of the parameter (row-major), default 0.
    #[serde(default)]
    pub index: usize,
    /// Bit of the fp32 value, default 23 (the exponent's lowest: the value doubles or halves, survives the
    /// cast to fp16 and overflows nothing).
    #[serde(default = "WeightBitFlip::default_bit")]
    pub bit: u32,
}

impl WeightBitFlip {
    fn default_bit() -> u32 {
        23
    }
}

/// Injected faults, all off by default; each is reproducible from the config alone.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Faults {
    /// This op's reduction order is drawn from `run_seed`: runs with different run seeds differ slightly in
    /// this op and downstream of it, and nowhere else.
    pub nondeterministic_op: Option<String>,
    /// This op's output is scaled far past the fp16 (bf16: fp32) maximum at that step.
    pub overflow: Option<OverflowFault>,
    /// The fused MatMul+BiasAdd+Gelu kernel (needs `fusion = true`) accumulates in bf16 and evaluates GELU
    /// with a truncated-series tanh in device precision.
    pub imprecise_fused_kernel: bool,
    /// Batches are drawn in a different order.
    pub shuffle_data: bool,
    /// Multiplies the learning rate (1.0 = off): a changed hyperparameter. 0: weights are never updated;
    /// 1000: the weights explode.
    pub lr_scale: f32,
    /// Data parallel: the rank reads the shard that belongs to the next rank at that step (a sampler given
    /// the wrong rank). Applied by the framework, which feeds the data.
    pub wrong_data: Option<StepFault>,
    /// Data parallel: that step's gradient all-reduce folds the ranks' gradients in another order on the
    /// rank (on every rank, each its own order, without `rank`). Applied by the framework through the
    /// collective library; needs 3 or more ranks.
    pub nondeterministic_reduction: Option<StepFault>,
    /// A master weight's bit flips before a step's forward pass.
    pub weight_bitflip: Option<WeightBitFlip>,
    /// Multiplies the standard deviation of every randomly initialised weight (1.0 = off): weights
    /// initialised too large (10: the loss starts near 20 instead of ln(vocab); from about 30 fp16 overflows
    /// at every step and the loss scale sinks to its floor) or too small (1e-6).
    pub init_scale: f32,
    /// The MLP activation's input is pushed into saturation inside the kernel: multiplied by 10^6 for tanh
    /// and sigmoid (outputs pinned at their limits), shifted by -64 for relu (dead units); no effect on gelu.
    pub saturate_activation: bool,
    /// Parameters whose name starts with this prefix are frozen: the optimizer op still runs for them, but
    /// their update is skipped (a layer left in an optimizer group with learning rate 0).
    pub frozen: Option<String>,
    /// The embedding gradient (`UnsortedSegmentSum`, atomic adds on a real device) sums in an order drawn
    /// from `run_seed` unless the job turned deterministic computation on (`aclrtCtxSetSysParamOpt(
    /// ACL_OPT_DETERMINISTIC, 1)`, `sim-train --deterministic`): run without it, two runs differ there.
    pub missing_determinism: bool,
}

impl Default for Faults {
    fn default() -> Self {
        Faults {
            nondeterministic_op: None,
            overflow: None,
            imprecise_fused_kernel: false,
            shuffle_data: false,
            lr_scale: 1.0,
            wrong_data: None,
            nondeterministic_reduction: None,
            weight_bitflip: None,
            init_scale: 1.0,
            saturate_activation: false,
            frozen: None,
            missing_determinism: false,
        }
    }
}

impl Faults {
    /// The faults rank `rank` of a data-parallel job sees: those with a `rank` key naming another rank are
    /// dropped. (A single-process run is rank 0.)
    pub fn for_rank(&self, rank: u32) -> Faults {
        let here = |r: Option<u32>| r.is_none_or(|r| r == rank);
        Faults {
            overflow: self.overflow.clone().filter(|f| here(f.rank)),
            wrong_data: self.wrong_data.clone().filter(|f| here(f.rank)),
            nondeterministic_reduction: self.nondeterministic_reduction.clone().filter(|f| here(f.rank)),
            weight_bitflip: self.weight_bitflip.clone().filter(|f| here(f.rank)),
            ..self.clone()
        }
    }
}

/// The model file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ModelConfig {
    /// Graph/model name (the dump tree's model_name).
    pub model_name: String,
    pub vocab: usize,
    pub d_model: usize,
    /// Must divide `d_model`.
    pub n_heads: usize,
    pub d_ff: usize,
    pub n_layers: usize,
    pub batch: usize,
    pub seq: usize,
    /// Weights and data.
    pub seed: u64,
    /// Per-run seed: only the `nondeterministic_op` and `missing_determinism` faults read it.
    /// `SIM_RUN_SEED` in the environment overrides it: run-to-run variation that no configuration shows
    /// (a capture records no `SIM_RUN_SEED`), as two real runs of one job differ.
    pub run_seed: u64,
    pub lr: f32,
    pub optimizer: Optimizer,
    pub precision: Precision,
    pub loss_scale: LossScale,
    /// The MLP's activation.
    pub activation: Activation,
    /// Run the MLP's MatMul+BiasAdd+Gelu as one `FusedMatMulBiasGelu` kernel (gelu only).
    pub fusion: bool,
    /// Matmul weights in FRACTAL_NZ and one activation per layer in NC1HWC0 (device precisions only).
    pub device_formats: bool,
    /// Before the optimizer, one `ConcatD` `optimizer/grads/Concat` of every gradient as the device holds
    /// it (an input each: 25 for the default 2 layers): an op of more than 10 tensors, whose statistics
    /// CSV the runtime sends in parts (docs/CANN.md §1). It changes no value of the training.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub grad_concat: bool,
    pub faults: Faults,
    /// Informational: the preset this config started from (`from_json` applies it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preset: Option<String>,
}

impl Default for ModelConfig {
    fn default() -> Self {
        ModelConfig {
            model_name: "sim_transformer".into(),
            vocab: 32,
            d_model: 16,
            n_heads: 2,
            d_ff: 32,
            n_layers: 2,
            batch: 2,
            seq: 8,
            seed: 1,
            run_seed: 0,
            lr: 1e-2,
            optimizer: Optimizer::Adam,
            precision: Precision::Fp16,
            loss_scale: LossScale::default(),
            activation: Activation::Gelu,
            fusion: false,
            device_formats: true,
            grad_concat: false,
            faults: Faults::default(),
            preset: None,
        }
    }
}

impl ModelConfig {
    /// Benchmark sizes. Bytes one fp16 step reports (inputs and outputs of every op; measured with
    /// `examples/step_bytes.rs`): `tiny` 0.3 MB, `small` 18 MB, `medium` 230 MB, `large` 2.1 GB
    /// (attention tensors dominate: B*H*S*S each). A `large` step takes ~36 s in release on 2 cores.
    pub fn preset(name: &str) -> Option<ModelConfig> {
        let base = ModelConfig { preset: Some(name.to_string()), ..ModelConfig::default() };
        let sized = |vocab, d_model, n_heads, d_ff, n_layers, batch, seq| ModelConfig {
            vocab,
            d_model,
            n_heads,
            d_ff,
            n_layers,
            batch,
            seq,
            lr: 3e-3,
            ..base.clone()
        };
        match name {
            "tiny" => Some(base.clone()),
            "small" => Some(sized(256, 64, 4, 256, 2, 4, 64)),
            "medium" => Some(sized(512, 128, 4, 512, 4, 8, 128)),
            "large" => Some(sized(1024, 256, 8, 1024, 4, 16, 256)),
            _ => None,
        }
    }

    /// Parses a model file. A `"preset"` key starts from that preset; the other keys override it.
    pub fn from_json(text: &str) -> Result<ModelConfig, String> {
        let value: serde_json::Value = serde_json::from_str(text).map_err(|e| format!("model json: {e}"))?;
        let mut base = serde_json::to_value(ModelConfig::default()).map_err(|e| e.to_string())?;
        if let Some(name) = value.get("preset") {
            let name = name.as_str().ok_or("model json: \"preset\" must be a string")?;
            let preset =
                ModelConfig::preset(name).ok_or_else(|| format!("model json: unknown preset {name:?}"))?;
            base = serde_json::to_value(preset).map_err(|e| e.to_string())?;
        }
        merge(&mut base, value);
        let mut cfg: ModelConfig = serde_json::from_value(base).map_err(|e| format!("model json: {e}"))?;
        if let Ok(seed) = std::env::var("SIM_RUN_SEED") {
            cfg.run_seed =
                seed.trim().parse().map_err(|_| format!("SIM_RUN_SEED={seed:?} is not a whole number"))?;
        }
        cfg.validate()?;
        Ok(cfg)
    }

    /// Reads and parses a model file.
    pub fn from_file(path: &std::path::Path) -> Result<ModelConfig, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        ModelConfig::from_json(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Checks sizes; every `Trainer` is built from a validated config.
    pub fn validate(&self) -> Result<(), String> {
        let dims = [self.vocab, self.d_model, self.n_heads, self.d_ff, self.batch, self.seq];
        if dims.contains(&0) {
            return Err("model json: vocab, d_model, n_heads, d_ff, batch and seq must be positive".into());
        }
        if !self.d_model.is_multiple_of(self.n_heads) {
            return Err(format!(
                "model json: n_heads {} does not divide d_model {}",
                self.n_heads, self.d_model
            ));
        }
        if !(self.lr.is_finite() && self.faults.lr_scale.is_finite()) {
            return Err("model json: lr and lr_scale must be finite".into());
        }
        if !(self.faults.init_scale.is_finite() && self.faults.init_scale > 0.0) {
            return Err("model json: init_scale must be positive".into());
        }
        if self.fusion && self.activation != Activation::Gelu {
            return Err(
                "model json: the fused MLP kernel has gelu only; set fusion false for another activation"
                    .into(),
            );
        }
        if !(self.loss_scale.initial.is_finite() && self.loss_scale.initial > 0.0) {
            return Err("model json: loss_scale.initial must be positive".into());
        }
        if let Some(f) = &self.faults.weight_bitflip {
            if f.bit >= 32 {
                return Err(format!(
                    "model json: weight_bitflip.bit {} is not a bit of an fp32 value",
                    f.bit
                ));
            }
            let params = crate::params::init(self);
            let Some(p) = params.iter().find(|p| p.name == f.param) else {
                return Err(format!("model json: weight_bitflip.param {:?} is not a parameter", f.param));
            };
            if f.index >= p.data.len() {
                return Err(format!(
                    "model json: weight_bitflip.index {} is past {} ({} values)",
                    f.index,
                    p.name,
                    p.data.len()
                ));
            }
        }
        Ok(())
    }

    /// The benchmark of this run: the same model and data in fp32, unfused, without device formats and
    /// without any fault (faults are what the device run got wrong).
    pub fn benchmark(&self) -> ModelConfig {
        ModelConfig {
            precision: Precision::Fp32,
            fusion: false,
            device_formats: false,
            faults: Faults::default(),
            loss_scale: LossScale { in_fp32: self.precision == Precision::Fp16, ..self.loss_scale.clone() },
            ..self.clone()
        }
    }

    pub fn head_dim(&self) -> usize {
        self.d_model / self.n_heads
    }
}

/// Overlays `over` onto `base`, recursing into objects so `{"faults": {"shuffle_data": true}}` keeps the
/// other fault defaults.
fn merge(base: &mut serde_json::Value, over: serde_json::Value) {
    match (base, over) {
        (serde_json::Value::Object(b), serde_json::Value::Object(o)) => {
            for (k, v) in o {
                match b.get_mut(&k) {
                    Some(slot) if slot.is_object() && v.is_object() => merge(slot, v),
                    _ => {
                        b.insert(k, v);
                    }
                }
            }
        }
        (b, o) => *b = o,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_json_is_the_default_model() {
        assert_eq!(ModelConfig::from_json("{}").unwrap(), ModelConfig::default());
    }

    #[test]
    fn preset_keys_are_overridden_and_nested_defaults_kept() {
        let cfg = ModelConfig::from_json(
            r#"{"preset": "small", "precision": "bf16", "faults": {"shuffle_data": true}}"#,
        )
        .unwrap();
        assert_eq!(cfg.d_model, 64);
        assert_eq!(cfg.precision, Precision::Bf16);
        assert!(cfg.faults.shuffle_data);
        assert_eq!(cfg.faults.lr_scale, 1.0);
    }

    #[test]
    fn rank_keys_select_the_faulty_rank() {
        let cfg = ModelConfig::from_json(
            r#"{"faults": {"overflow": {"op": "x", "step": 1, "rank": 2},
                "weight_bitflip": {"param": "model/ln_f/gamma", "step": 3},
                "wrong_data": {"step": 0, "rank": 1}}}"#,
        )
        .unwrap();
        let on2 = cfg.faults.for_rank(2);
        assert_eq!(on2.overflow.as_ref().map(|f| f.step), Some(1));
        assert!(on2.wrong_data.is_none());
        let bitflip = on2.weight_bitflip.as_ref().unwrap();
        assert_eq!((bitflip.index, bitflip.bit), (0, 23));
        let on1 = cfg.faults.for_rank(1);
        assert!(on1.overflow.is_none() && on1.wrong_data.is_some() && on1.weight_bitflip.is_some());
    }

    #[test]
    fn bad_configs_are_refused() {
        assert!(ModelConfig::from_json(r#"{"d_model": 10, "n_heads": 3}"#).is_err());
        assert!(ModelConfig::from_json(r#"{"preset": "huge"}"#).is_err());
        assert!(ModelConfig::from_json(r#"{"no_such_key": 1}"#).is_err());
    }
}
