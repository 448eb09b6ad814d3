//! The models the runtime executes: `aclmdlLoadFromFile` reads a JSON `sim_model::ModelConfig` and each
//! `aclmdlExecute` runs one training step, reporting every op to the dump emitter.

use sim_model::{OpSink, OverflowMode};

/// A model as the runtime drives it. The real one wraps the sim-model trainer; tests may plug in others.
pub trait DeviceModel: Send {
    /// The graph name: the dump tree's `{model_name}` and what `dump_list` entries match.
    fn name(&self) -> &str;
    /// Runs training step `step`, reporting every op to `sink` in execution order. Returns the step's
    /// report as one JSON line (loss, loss scale), the framework's view of the step.
    fn step(&mut self, step: u64, mode: OverflowMode, sink: &mut dyn OpSink) -> Option<String>;
}

/// Why a model file was refused, mapped onto ACL error codes by the caller.
#[derive(Debug)]
pub enum LoadError {
    /// The file could not be read.
    Read(String),
    /// The file is not a valid model.
    Parse(String),
}

/// Loads a model file (JSON `ModelConfig`).
pub fn load(path: &std::path::Path) -> Result<Box<dyn DeviceModel>, LoadError> {
    let text =
        std::fs::read_to_string(path).map_err(|e| LoadError::Read(format!("{}: {e}", path.display())))?;
    let cfg = sim_model::ModelConfig::from_json(&text).map_err(LoadError::Parse)?;
    Ok(Box::new(SimTransformer::new(cfg)))
}

/// The sim-model transformer.
struct SimTransformer {
    name: String,
    trainer: sim_model::Trainer,
}

impl SimTransformer {
    fn new(cfg: sim_model::ModelConfig) -> SimTransformer {
        SimTransformer { name: cfg.model_name.clone(), trainer: sim_model::Trainer::new(cfg) }
    }
}

impl DeviceModel for SimTransformer {
    fn name(&self) -> &str {
        &self.name
    }

    fn step(&mut self, step: u64, mode: OverflowMode, sink: &mut dyn OpSink) -> Option<String> {
        Some(self.trainer.step(step, mode, sink).to_json_line(step))
    }
}
