//! Turning ops into dump files: selection (dump_list, dump_step, dump_mode, dump_debug, dump_level), the
//! DumpData header, the file name and its place in the dump tree. Encoding is the shared codec's
//! (`accutrace_formats::dump`); delivery is the dump thread's (`dumper`).
//!
//! Two producers, as CANN has them:
//! - a step of a loaded model ([`Emitter`]): `{dump_path}/{time}/{device}/{model}/{model_id}/{step}/`, five-field
//!   names `{op_type}.{op_name}.{task_id}.{stream_id}.{timestamp}` (the older producer), task ids restarting
//!   each step as graph tasks do;
//! - single-operator calls ([`dump_single_op`]): `{dump_path}/{time}/{device}/`, six-field names
//!   `{op_type}.{op_name}.{dump_number}.{task_id}.{stream_id}.{timestamp}` (the current adump), the dump
//!   number counting every file the process dumped; an op that runs as an FFTS+ task also gets kernel-level
//!   files per sub-task, `...{timestamp}.FFTSPLUS.{context_id}.{thread_id}.{device_id}`, and `dump_level`
//!   picks op-level files, kernel-level files or both.

use crate::chunker::{OutFile, INTERLEAVE_WINDOW};
use crate::config::{DumpConfig, DumpDataKind, DumpMode};
use crate::dumper::{self, Delivery};
use crate::overflow::{self, OpDebugLayout};
use crate::payload;
use accutrace_formats::dump::mapping::{NameMapping, MAPPING_FILE};
use accutrace_formats::dump::{
    format_file_name, sanitize_op_name, DumpFileName, FftsForm, FftsSuffix, FileKind,
};
use accutrace_proto::dumpdata::{DumpData, OpInput, OpOutput, OriginalOp, Shape};
use sim_model::{OpEvent, OpSink, TensorView};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Mutex;

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

/// The stream single-operator calls run on when the caller passes none (the default stream).
pub const DEFAULT_STREAM_ID: u32 = 1;

/// Op types the simulated device runs as an FFTS+ task (a mixed cube/vector kernel with sub-tasks): their
/// kernel-level dump is one file per sub-task.
pub const FFTS_PLUS_OP_TYPES: [&str; 1] = ["FusedMatMulBiasGelu"];

/// The FFTS+ sub-tasks such an op runs: (context id, thread id). Both non-zero, as the producer requires for
/// the suffix.
const FFTS_SUB_TASKS: [(u64, u64); 1] = [(1, 1)];

/// Where single-operator calls are dumped.
#[derive(Clone, Debug)]
pub struct SingleOpTarget {
    pub cfg: DumpConfig,
    pub device_id: i32,
    /// `YYYYMMDDhhmmss` of the dump session.
    pub session_dir: String,
    pub opdebug_layout: OpDebugLayout,
    pub delivery: Delivery,
}

impl SingleOpTarget {
    /// `{dump_path}/{YYYYMMDDhhmmss}/{device_id}`.
    pub fn dir(&self) -> PathBuf {
        self.cfg.dump_path.join(&self.session_dir).join(self.device_id.to_string())
    }
}

/// The process's single-op dump state: the dump number and each directory's long-name mapping.
#[derive(Default)]
struct SingleOpState {
    next_dump_number: u64,
    mappings: HashMap<PathBuf, NameMapping>,
}

static SINGLE_OP: Mutex<Option<SingleOpState>> = Mutex::new(None);

/// Forgets the dump numbers and mappings (aclFinalize).
pub fn reset_single_op() {
    *crate::state::lock(&SINGLE_OP) = None;
}

/// Dumps one single-operator call (task `task_id`; the op's status bits are recorded by the caller).
pub fn dump_single_op(t: &SingleOpTarget, event: &OpEvent<'_>, task_id: u32) {
    let mut guard = crate::state::lock(&SINGLE_OP);
    let state = guard.get_or_insert_with(SingleOpState::default);
    let dir = t.dir();
    let mapping = state.mappings.entry(dir.clone()).or_default();
    let rows_before = mapping.rows().len();
    let mut files = Vec::new();
    let mut push =
        |op_type: &str, op_name: &str, task: u32, ffts: Option<FftsSuffix>, kind, bytes: Vec<u8>, ts| {
            let full = format_file_name(&DumpFileName {
                op_type: op_type.to_string(),
                op_name: sanitize_op_name(op_name),
                dump_number: Some(state.next_dump_number),
                task_id: u64::from(task),
                stream_id: Some(u64::from(DEFAULT_STREAM_ID)),
                timestamp_us: ts,
                ffts,
                kind,
            });
            state.next_dump_number += 1;
            files.push(OutFile { path: dir.join(mapping.file_name_for(&full)), bytes });
        };
    if t.cfg.debug {
        if event.overflow_status != 0 {
            let record = payload::opdebug_record(
                t.opdebug_layout,
                0,
                DEFAULT_STREAM_ID,
                task_id,
                event.overflow_status,
            );
            let ts = crate::clock::tick();
            push(
                "Opdebug",
                "Node_OpDebug",
                OPDEBUG_TASK_ID,
                None,
                FileKind::Tensor,
                opdebug_file(ts, &record),
                ts,
            );
            let ts = crate::clock::tick();
            let bytes = tensor_file(event, DumpMode::All, ts);
            push(event.op_type, event.op_name, task_id, None, FileKind::Tensor, bytes, ts);
        }
    } else {
        let ffts_plus = FFTS_PLUS_OP_TYPES.contains(&event.op_type);
        let device_id = u64::try_from(t.device_id).unwrap_or(0);
        let mut suffixes: Vec<Option<FftsSuffix>> = Vec::new();
        if !ffts_plus || t.cfg.level.ops() {
            suffixes.push(None);
        }
        if ffts_plus && t.cfg.level.kernels() {
            suffixes.extend(FFTS_SUB_TASKS.iter().map(|&(context_id, thread_id)| {
                Some(FftsSuffix { context_id, thread_id, device_id, form: FftsForm::FftsPlus })
            }));
        }
        for ffts in suffixes {
            let ts = crate::clock::tick();
            match t.cfg.data {
                DumpDataKind::Tensor => {
                    let bytes = tensor_file(event, t.cfg.mode, ts);
                    push(event.op_type, event.op_name, task_id, ffts, FileKind::Tensor, bytes, ts);
                }
                DumpDataKind::Stats => {
                    let bytes = payload::stats_csv(event, t.cfg.mode, &t.cfg.stats);
                    push(event.op_type, event.op_name, task_id, ffts, FileKind::StatsCsv, bytes, ts);
                }
            }
        }
    }
    // A new long name: the directory's mapping.csv again, whole (a reader keeps the last one).
    if mapping.rows().len() > rows_before {
        files.push(OutFile { path: dir.join(MAPPING_FILE), bytes: mapping.to_csv().into_bytes() });
    }
    drop(guard);
    dumper::send(files, t.delivery);
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
        std::fs::create_dir_all(&root).unwrap();
        let json = format!(r#"{{"dump": {{"dump_path": "{}", "dump_op_switch": "on"}}}}"#, root.display());
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

    #[test]
    fn single_ops_get_six_field_names_ffts_sub_tasks_by_level_and_a_mapping() {
        let root = tempfile::tempdir().unwrap();
        let bytes = [0u8, 0x3c, 0, 0x40];
        let out = || TensorView {
            dtype: DType::FLOAT16,
            format: 2,
            device_shape: vec![2],
            original_shape: vec![2],
            bytes: &bytes,
            original_op: None,
        };
        let event = |op_type: &'static str, op_name: &'static str| OpEvent {
            op_type,
            op_name,
            inputs: vec![out()],
            outputs: vec![out()],
            overflow_status: 0,
        };
        let long_type: &'static str = Box::leak("VeryLongCustomOperatorType".repeat(12).into_boxed_str());
        let mut files = Vec::new();
        for (level, dir) in [("op", "a"), ("kernel", "b"), ("all", "c")] {
            let path = root.path().join(dir);
            std::fs::create_dir_all(&path).unwrap();
            let json = format!(
                r#"{{"dump": {{"dump_path": "{}", "dump_op_switch": "on", "dump_level": "{level}"}}}}"#,
                path.display()
            );
            let target = SingleOpTarget {
                cfg: parse_dump_json(&json).unwrap().unwrap(),
                device_id: 3,
                session_dir: "20240101000000".into(),
                opdebug_layout: OpDebugLayout::V2,
                delivery: Delivery::Disk,
            };
            dump_single_op(&target, &event("Add", "Add_0"), 5);
            dump_single_op(&target, &event("FusedMatMulBiasGelu", "FusedMatMulBiasGelu_0"), 6);
            dump_single_op(&target, &event(long_type, "x_0"), 7);
            dumper::drain();
            let tree = accutrace_formats::dump::walk_dump_tree(&path).unwrap();
            assert!(tree.warnings.is_empty(), "{:?}", tree.warnings);
            files.push(tree.entries);
        }
        let summary = |entries: &[accutrace_formats::dump::DumpEntry]| -> Vec<(String, bool)> {
            entries.iter().map(|e| (e.name.op_type.clone(), e.name.ffts.is_some())).collect()
        };
        let fused = "FusedMatMulBiasGelu".to_string();
        assert_eq!(summary(&files[0])[..2], [("Add".to_string(), false), (fused.clone(), false)]);
        assert_eq!(summary(&files[1])[..2], [("Add".to_string(), false), (fused.clone(), true)]);
        assert_eq!(
            summary(&files[2])[..3],
            [("Add".to_string(), false), (fused.clone(), false), (fused, true)]
        );
        for entries in &files {
            for e in entries {
                // The single-op layout: {dump_path}/{time}/{device}/{file}, no model, no step.
                assert_eq!((e.device_id, e.step, e.model_name.as_deref()), (Some(3), None, None));
                assert!(
                    e.name.dump_number.is_some() && e.name.stream_id == Some(u64::from(DEFAULT_STREAM_ID))
                );
                if let Some(f) = e.name.ffts {
                    assert_eq!(
                        (f.context_id, f.thread_id, f.device_id, f.form),
                        (1, 1, 3, FftsForm::FftsPlus)
                    );
                }
            }
            // The long type's name went through mapping.csv and resolves back.
            let long = entries.iter().find(|e| e.name.op_type == long_type).expect("long name resolved");
            assert!(long.path.file_name().unwrap().to_str().unwrap().bytes().all(|b| b.is_ascii_digit()));
            let bytes = std::fs::read(&long.path).unwrap();
            let parsed = accutrace_formats::dump::parse_dump(&bytes).unwrap();
            assert_eq!(parsed.header.op_name, "x_0");
        }
        // Dump numbers count every file of the process, in order.
        let numbers: Vec<u64> = files.iter().flatten().filter_map(|e| e.name.dump_number).collect();
        let mut sorted = numbers.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), numbers.len(), "dump numbers are unique");
    }
}
