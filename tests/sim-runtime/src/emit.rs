//! Turning the ops of one training step into dump files: selection (dump_list, dump_step, dump_mode,
//! dump_debug), the DumpData header, the file name and its place in the dump tree. Encoding is the shared
//! codec's (`accutrace_formats::dump`); delivery is the dump thread's (`dumper`).

use crate::chunker::{OutFile, INTERLEAVE_WINDOW};
use crate::config::{DumpConfig, DumpDataKind, DumpMode};
use crate::dumper::{self, Delivery};
use crate::overflow::{self, OpDebugLayout};
use crate::payload;
use accutrace_formats::dump::mapping::{NameMapping, MAPPING_FILE};
use accutrace_formats::dump::{format_file_name, sanitize_op_name, DumpFileName, FileKind};
use accutrace_proto::dumpdata::{DumpData, OpInput, OpOutput, OriginalOp, Shape};
use sim_model::{OpEvent, OpSink, TensorView};
use std::path::PathBuf;

/// The stream every model's tasks run on (one stream per model, as a static graph has).
pub const MODEL_STREAM_ID: u32 = 2;
/// Task id of the first op of a step; ops keep their task ids from step to step, as graph tasks do.
pub const FIRST_TASK_ID: u32 = 10;
/// Task id of the op-debug node (docs/CANN.md §4: not the overflowing op's, the payload names that one).
pub const OPDEBUG_TASK_ID: u32 = 1;

/// Where and how one step of one model is dumped.
#[derive(Clone, Debug)]
pub struct StepTarget {
    pub cfg: DumpConfig,
    pub model_name: String,
    pub model_id: u32,
    pub device_id: i32,
    pub step: u64,
    /// `YYYYMMDDhhmmss` of the dump session.
    pub session_dir: String,
    pub opdebug_layout: OpDebugLayout,
    pub delivery: Delivery,
}

impl StepTarget {
    /// `{dump_path}/{YYYYMMDDhhmmss}/{device_id}/{model_name}/{model_id}/{step}`.
    pub fn dir(&self) -> PathBuf {
        self.cfg
            .dump_path
            .join(&self.session_dir)
            .join(self.device_id.to_string())
            .join(&self.model_name)
            .join(self.model_id.to_string())
            .join(self.step.to_string())
    }
}

/// Receives the ops of one step; records overflow always and dumps what the target selects.
pub struct Emitter {
    target: Option<StepTarget>,
    dir: PathBuf,
    next_task: u32,
    batch: Vec<OutFile>,
    mapping: NameMapping,
}

impl Emitter {
    /// `target` is `None` when this step is not dumped (the ops still raise overflow status).
    pub fn new(target: Option<StepTarget>) -> Emitter {
        let target = target.filter(|t| t.cfg.selects_step(t.step) && t.cfg.selects_model(&t.model_name));
        let dir = target.as_ref().map(StepTarget::dir).unwrap_or_default();
        Emitter { target, dir, next_task: FIRST_TASK_ID, batch: Vec::new(), mapping: NameMapping::default() }
    }

    /// Hands the rest of the step's files (and the directory's mapping.csv, if any name was too long) to
    /// the dump thread.
    pub fn finish(mut self) {
        if !self.mapping.is_empty() {
            let path = self.dir.join(MAPPING_FILE);
            self.batch.push(OutFile { path, bytes: self.mapping.to_csv().into_bytes() });
        }
        self.flush();
    }

    /// Hands the files made so far to the dump thread (the step goes on: `finish` ends it).
    pub fn flush(&mut self) {
        if let Some(t) = &self.target {
            dumper::send(std::mem::take(&mut self.batch), t.delivery);
        }
    }

    fn push(
        &mut self,
        op_type: &str,
        op_name: &str,
        task_id: u32,
        timestamp_us: u64,
        kind: FileKind,
        bytes: Vec<u8>,
    ) {
        let full = format_file_name(&DumpFileName {
            op_type: op_type.to_string(),
            op_name: sanitize_op_name(op_name),
            dump_number: None,
            task_id: u64::from(task_id),
            stream_id: Some(u64::from(MODEL_STREAM_ID)),
            timestamp_us,
            ffts: None,
            kind,
        });
        let path = self.dir.join(self.mapping.file_name_for(&full));
        self.batch.push(OutFile { path, bytes });
        // Batches of a few files: enough for the dump thread to interleave them, little enough memory.
        if self.batch.len() >= INTERLEAVE_WINDOW {
            self.flush();
        }
    }
}

impl OpSink for Emitter {
    fn op(&mut self, event: &OpEvent<'_>) {
        let task_id = self.next_task;
        self.next_task = self.next_task.wrapping_add(1);
        if event.overflow_status != 0 {
            overflow::record(event.overflow_status);
        }
        let Some(t) = &self.target else { return };
        let (mode, data, layout) = (t.cfg.mode, t.cfg.data, t.opdebug_layout);
        let model_id = t.model_id;

        if t.cfg.debug {
            // Overflow detection: only overflowing ops, as an op-debug record followed by the op's own dump
            // (its timestamp is the smallest one after the record's with that task and stream).
            if event.overflow_status == 0 {
                return;
            }
            let record =
                payload::opdebug_record(layout, model_id, MODEL_STREAM_ID, task_id, event.overflow_status);
            let ts = crate::clock::tick();
            let bytes = opdebug_file(ts, &record);
            self.push("Opdebug", "Node_OpDebug", OPDEBUG_TASK_ID, ts, FileKind::Tensor, bytes);
            let ts = crate::clock::tick();
            let bytes = tensor_file(event, DumpMode::All, ts);
            self.push(event.op_type, event.op_name, task_id, ts, FileKind::Tensor, bytes);
            return;
        }

        if !t.cfg.selects(&t.model_name, event.op_name) {
            return;
        }
        let ts = crate::clock::tick();
        match data {
            DumpDataKind::Tensor => {
                let bytes = tensor_file(event, mode, ts);
                self.push(event.op_type, event.op_name, task_id, ts, FileKind::Tensor, bytes);
            }
            DumpDataKind::Stats => {
                let bytes = payload::stats_csv(event, mode, &t.cfg.stats);
                self.push(event.op_type, event.op_name, task_id, ts, FileKind::StatsCsv, bytes);
            }
        }
    }
}

fn shape(dims: &[u64]) -> Option<Shape> {
    Some(Shape { dim: dims.to_vec() })
}

fn input_desc(t: &TensorView<'_>) -> OpInput {
    OpInput {
        data_type: t.dtype.code(),
        format: t.format,
        shape: shape(&t.device_shape),
        original_shape: shape(&t.original_shape),
        ..OpInput::default()
    }
}

fn output_desc(t: &TensorView<'_>) -> OpOutput {
    OpOutput {
        data_type: t.dtype.code(),
        format: t.format,
        shape: shape(&t.device_shape),
        original_shape: shape(&t.original_shape),
        original_op: t.original_op.as_ref().map(|(name, index)| OriginalOp {
            name: name.clone(),
            output_index: *index,
            data_type: t.dtype.code(),
            format: t.format,
        }),
        ..OpOutput::default()
    }
}

/// A binary-layout dump file of the op's selected tensors.
pub fn tensor_file(event: &OpEvent<'_>, mode: DumpMode, timestamp_us: u64) -> Vec<u8> {
    let inputs: &[TensorView<'_>] = if mode.inputs() { &event.inputs } else { &[] };
    let outputs: &[TensorView<'_>] = if mode.outputs() { &event.outputs } else { &[] };
    let header = DumpData {
        version: "2.0".into(),
        dump_time: timestamp_us,
        op_name: event.op_name.to_string(),
        input: inputs.iter().map(input_desc).collect(),
        output: outputs.iter().map(output_desc).collect(),
        ..DumpData::default()
    };
    let in_bytes: Vec<&[u8]> = inputs.iter().map(|t| t.bytes).collect();
    let out_bytes: Vec<&[u8]> = outputs.iter().map(|t| t.bytes).collect();
    accutrace_formats::dump::encode_dump(&header, &in_bytes, &out_bytes, &[], &[])
        .expect("header and payload are built from the same tensor lists")
}

/// An `Opdebug.Node_OpDebug` file: the record is `output[0]` (u8, ND).
pub fn opdebug_file(timestamp_us: u64, record: &[u8]) -> Vec<u8> {
    let len = record.len() as u64;
    let header = DumpData {
        version: "2.0".into(),
        dump_time: timestamp_us,
        op_name: "Node_OpDebug".into(),
        output: vec![OpOutput {
            data_type: accutrace_formats::DType::UINT8.code(),
            format: accutrace_proto::dumpdata::OutputFormat::FormatNd as i32,
            shape: shape(&[len]),
            original_shape: shape(&[len]),
            ..OpOutput::default()
        }],
        ..DumpData::default()
    };
    accutrace_formats::dump::encode_dump(&header, &[], &[record], &[], &[])
        .expect("one output described, one given")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse_dump_json;
    use accutrace_formats::DType;

    #[test]
    fn long_names_are_shortened_and_listed_in_mapping_csv() {
        let root = std::env::temp_dir().join(format!("sim-acl-emit-{}", std::process::id()));
        let json = format!(r#"{{"dump": {{"dump_path": "{}"}}}}"#, root.display());
        let cfg = parse_dump_json(&json).unwrap().unwrap();
        let target = StepTarget {
            cfg,
            model_name: "m".into(),
            model_id: 1,
            device_id: 0,
            step: 0,
            session_dir: "20240101000000".into(),
            opdebug_layout: OpDebugLayout::V2,
            delivery: Delivery::Disk,
        };
        let dir = target.dir();
        let long_name = format!("model/{}/Relu", "very_long_scope".repeat(20));
        let bytes = [0u8, 0x3c, 0, 0x40];
        let out = TensorView {
            dtype: DType::FLOAT16,
            format: 2,
            device_shape: vec![2],
            original_shape: vec![2],
            bytes: &bytes,
            original_op: None,
        };
        let event = OpEvent {
            op_type: "Relu",
            op_name: &long_name,
            inputs: vec![],
            outputs: vec![out],
            overflow_status: 0,
        };
        let mut emitter = Emitter::new(Some(target));
        emitter.op(&event);
        emitter.finish();
        dumper::drain();

        let mapping = NameMapping::read_dir(&dir).unwrap();
        assert_eq!(mapping.rows().len(), 1);
        let (short, original) = &mapping.rows()[0];
        assert!(original.starts_with("Relu.model_very_long_scope"), "{original}");
        let file = std::fs::read(dir.join(short)).unwrap();
        let parsed = accutrace_formats::dump::parse_dump(&file).unwrap();
        assert_eq!(parsed.header.op_name, long_name);
        std::fs::remove_dir_all(&root).unwrap();
    }
}
