//! The models the runtime executes: `aclmdlLoadFromFile` reads a JSON `sim_model::ModelConfig` and each
//! `aclmdlExecute` runs one training step, reporting every op to the dump emitter.
//!
//! A data-parallel framework instead executes a step in two halves, with model datasets (see `abi`'s
//! `aclmdlExecute`): compute the gradients of the batch it feeds, all-reduce them itself, then apply them.

use sim_model::data::Batch;
use sim_model::{OpSink, OverflowMode, StepGradients};

/// A model as the runtime drives it. The real one wraps the sim-model trainer; tests may plug in others.
pub trait DeviceModel: Send {
    /// The graph name: the dump tree's `{model_name}` and what `dump_list` entries match.
    fn name(&self) -> &str;
    /// Runs training step `step`, reporting every op to `sink` in execution order. Returns the step's
    /// report as one JSON line (loss, loss scale), the framework's view of the step.
    fn step(&mut self, step: u64, mode: OverflowMode, sink: &mut dyn OpSink) -> Option<String>;
    /// The context's deterministic-computation option (`ACL_OPT_DETERMINISTIC`), set before each step.
    fn set_deterministic(&mut self, _on: bool) {}
    /// The sizes of the two-halves interface, `None` for a model without it.
    fn io(&self) -> Option<ModelIo> {
        None
    }
    /// First half of step `step` on `batch` (the model's own data when `None`): the flattened gradients
    /// and whether this replica overflowed. The model keeps the step's loss until the second half.
    fn compute_gradients(
        &mut self,
        _step: u64,
        _mode: OverflowMode,
        _sink: &mut dyn OpSink,
        _batch: Option<Batch>,
    ) -> Result<(Vec<f32>, bool), String> {
        Err("this model has no data-parallel interface".into())
    }
    /// Second half: applies `flat` gradients summed over `divisor` replicas, or skips the update when
    /// `skip`. Returns the step's report line.
    fn apply_gradients(
        &mut self,
        _step: u64,
        _mode: OverflowMode,
        _sink: &mut dyn OpSink,
        _flat: &[f32],
        _skip: bool,
        _divisor: f32,
    ) -> Result<Option<String>, String> {
        Err("this model has no data-parallel interface".into())
    }
}

/// Element counts of the two-halves interface.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModelIo {
    /// Tokens (and labels) per batch: batch x sequence, int32.
    pub batch_values: usize,
    /// Token ids must be below this.
    pub vocab: usize,
    /// Gradient values, every parameter's in order.
    pub grad_values: usize,
    /// The gradients' storage: the model's device precision (fp16, bf16; fp32 for an fp32 model), as a
    /// framework keeping fp32 master weights in its optimizer all-reduces them.
    pub grad_precision: sim_model::Precision,
}

/// Why a model file was refused, mapped onto ACL error codes by the caller.
#[derive(Debug)]
pub enum LoadError {
    /// The file could not be read.
    Read(String),
    /// The file is not a valid model.
    Parse(String),
}

/// Loads a model file (JSON `ModelConfig`). The device knows its rank from `RANK_ID` (as the launcher
/// sets it; unset = 0) and keeps only the faults meant for it.
pub fn load(path: &std::path::Path) -> Result<Box<dyn DeviceModel>, LoadError> {
    let text =
        std::fs::read_to_string(path).map_err(|e| LoadError::Read(format!("{}: {e}", path.display())))?;
    let mut cfg = sim_model::ModelConfig::from_json(&text).map_err(LoadError::Parse)?;
    let rank = match std::env::var("RANK_ID") {
        Ok(v) => {
            v.trim().parse::<u32>().map_err(|_| LoadError::Parse(format!("RANK_ID={v:?} is not a rank")))?
        }
        Err(_) => 0,
    };
    cfg.faults = cfg.faults.for_rank(rank);
    Ok(Box::new(SimTransformer::new(cfg)))
}

/// The sim-model transformer.
struct SimTransformer {
    name: String,
    trainer: sim_model::Trainer,
    /// The first half of a step whose second half has not run yet.
    pending: Option<StepGradients>,
}

impl SimTransformer {
    fn new(cfg: sim_model::ModelConfig) -> SimTransformer {
        SimTransformer { name: cfg.model_name.clone(), trainer: sim_model::Trainer::new(cfg), pending: None }
    }
}

impl DeviceModel for SimTransformer {
    fn name(&self) -> &str {
        &self.name
    }

    fn step(&mut self, step: u64, mode: OverflowMode, sink: &mut dyn OpSink) -> Option<String> {
        self.pending = None;
        Some(self.trainer.step(step, mode, sink).to_json_line(step))
    }

    fn io(&self) -> Option<ModelIo> {
        let cfg = self.trainer.config();
        Some(ModelIo {
            batch_values: cfg.batch * cfg.seq,
            vocab: cfg.vocab,
            grad_values: self.trainer.param_count(),
            grad_precision: cfg.precision,
        })
    }

    fn compute_gradients(
        &mut self,
        step: u64,
        mode: OverflowMode,
        sink: &mut dyn OpSink,
        batch: Option<Batch>,
    ) -> Result<(Vec<f32>, bool), String> {
        let batch = batch.unwrap_or_else(|| sim_model::data::batch(self.trainer.config(), step));
        let grads = self.trainer.compute_gradients(step, mode, sink, &batch);
        let out = (grads.flat(), grads.overflowed);
        self.pending = Some(grads);
        Ok(out)
    }

    fn apply_gradients(
        &mut self,
        step: u64,
        mode: OverflowMode,
        sink: &mut dyn OpSink,
        flat: &[f32],
        skip: bool,
        divisor: f32,
    ) -> Result<Option<String>, String> {
        let mut grads =
            self.pending.take().ok_or("apply without a computed step: execute with outputs first")?;
        self.trainer.unflatten_into(flat, &mut grads).ok_or_else(|| {
            format!("{} gradient values where {} are due", flat.len(), self.trainer.param_count())
        })?;
        let report = self.trainer.apply_gradients(step, mode, sink, grads, skip, divisor);
        Ok(Some(report.to_json_line(step)))
    }

    fn set_deterministic(&mut self, on: bool) {
        self.trainer.set_deterministic(on);
    }
}
