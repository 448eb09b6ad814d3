//! `sim-train bench`: the fp32 benchmark ("GPU") run on the CPU, written as the vendor tools write
//! benchmark dumps: one `.npy` per original op output.
//!
//! Layout: `DIR/step{k}/{op}.{output_index}.{timestamp}.npy`, where `{op}` is the original op name with
//! `/` replaced by `_`. That replacement loses information (names contain `_` too), so each step directory
//! also holds `mapping.json`: an array of `{"file", "op_name", "op_type", "output_index", "shape",
//! "dtype"}` in execution order, the real names. Timestamps are deterministic pseudo-microseconds
//! (`1_700_000_000_000_000 + step * 1_000_000 + op index`) so that two bench runs are byte-identical and
//! file order follows execution order.

use anyhow::{Context, Result};
use sim_model::{ModelConfig, OpEvent, OpSink, OverflowMode, Trainer};
use std::path::{Path, PathBuf};

const TIMESTAMP_BASE: u64 = 1_700_000_000_000_000;

/// Runs `steps` steps of `cfg`'s benchmark (fp32, unfused, no faults) and writes the dumps under `out`.
/// Returns each step's loss.
pub fn run(cfg: &ModelConfig, steps: u64, out: &Path) -> Result<Vec<f32>> {
    let mut trainer = Trainer::new(cfg.benchmark());
    let mut losses = Vec::new();
    for step in 0..steps {
        let dir = out.join(format!("step{step}"));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let mut sink = NpySink { dir, step, index: 0, mapping: Vec::new(), error: None };
        let report = trainer.step(step, OverflowMode::InfNan, &mut sink);
        if let Some(e) = sink.error {
            return Err(e);
        }
        let mapping = serde_json::to_string_pretty(&sink.mapping)?;
        std::fs::write(sink.dir.join("mapping.json"), mapping)?;
        losses.push(report.loss);
    }
    Ok(losses)
}

/// The file name stem the vendor tools give an op: `/` (and other path-hostile characters) become `_`.
pub fn sanitize(op_name: &str) -> String {
    op_name.chars().map(|c| if c.is_ascii_alphanumeric() || "-_.".contains(c) { c } else { '_' }).collect()
}

struct NpySink {
    dir: PathBuf,
    step: u64,
    index: u64,
    mapping: Vec<serde_json::Value>,
    error: Option<anyhow::Error>,
}

impl OpSink for NpySink {
    fn op(&mut self, e: &OpEvent<'_>) {
        if self.error.is_some() {
            return;
        }
        let ts = TIMESTAMP_BASE + self.step * 1_000_000 + self.index;
        self.index += 1;
        for (i, t) in e.outputs.iter().enumerate() {
            let (name, index) = t.original_op.clone().unwrap_or((e.op_name.to_string(), i as u32));
            let file = format!("{}.{index}.{ts}.npy", sanitize(&name));
            if let Err(err) = write_npy(&self.dir.join(&file), t.dtype, &t.original_shape, t.bytes) {
                self.error = Some(err);
                return;
            }
            self.mapping.push(serde_json::json!({
                "file": file,
                "op_name": name,
                "op_type": e.op_type,
                "output_index": index,
                "shape": t.original_shape,
                "dtype": t.dtype.name(),
            }));
        }
    }
}

/// One `.npy` file of little-endian raw `data` through the shared writer (the benchmark's tensors are ND,
/// so the bytes are already in C order).
pub fn write_npy(path: &Path, dtype: accutrace_formats::DType, shape: &[u64], data: &[u8]) -> Result<()> {
    let write = || -> std::io::Result<()> {
        let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
        accutrace_formats::npy::write_npy(&mut out, dtype, shape, data)?;
        std::io::Write::flush(&mut out)
    };
    write().with_context(|| format!("writing {}", path.display()))
}
