//! Capture runs written with the capture writer itself, for tests that need tensors of chosen sizes,
//! dtypes and values without the simulated training: one stream, rank 0, ops named `model/op{k}`.
// Each test binary that includes this module uses part of it.
#![allow(dead_code)]

use accutrace_formats::capture::{
    Io, Manifest, OpInfo, OriginalOp, Policy, StatsCsv, StreamInfo, StreamWriter, TensorMeta,
};
use accutrace_formats::stats::{content_hash, TensorStats};
use accutrace_formats::DType;
use analyzer::compare::{compare, CompareOptions};
use analyzer::report::compare::{write, CompareFormat};
use analyzer::report::{Colour, Destination};
use analyzer::sources::Source;
use std::path::{Path, PathBuf};

/// A run of `ops` Add ops of two inputs and an output, one f32 each, every record's value its own (no pair
/// repeats another), plus `offset` (a benchmark written with another offset differs in every tensor: every
/// pair is read and measured).
pub fn write_add_run(path: &Path, ops: u64, offset: f32) -> PathBuf {
    let mut run = RunWriter::create(path, 1 << 24);
    for k in 0..ops {
        run.op(k, "Add");
        for (n, (io, index)) in [(Io::Input, 0), (Io::Input, 1), (Io::Output, 0)].into_iter().enumerate() {
            let value = (3 * k + n as u64) as f32 + offset;
            run.tensor(io, index, DType::FLOAT, &value.to_le_bytes());
        }
    }
    run.finish()
}

/// A capture run being written: ops, each followed by its tensors.
pub struct RunWriter {
    run: PathBuf,
    manifest: Manifest,
    writer: StreamWriter,
}

impl RunWriter {
    /// A run in `run` (created), its stream cut into segments of `segment_bytes`, every record kept.
    pub fn create(run: &Path, segment_bytes: u64) -> RunWriter {
        std::fs::create_dir_all(run).unwrap();
        let info = StreamInfo { stream_id: 0, rank: Some(0), device: 0, pid: 1, host: "test".into() };
        RunWriter {
            run: run.to_path_buf(),
            manifest: Manifest::new("test", vec!["train".into()]),
            writer: StreamWriter::create(run, info, segment_bytes, Policy::KeepAll).unwrap(),
        }
    }

    /// Op `k` of step 0, `model/op{k}` of type `op_type`: the tensors written next are its own.
    pub fn op(&mut self, k: u64, op_type: &str) {
        self.op_of_step(0, k, op_type);
    }

    /// Op `k` of `step`, `model/op{k}` of type `op_type`: the tensors written next are its own.
    pub fn op_of_step(&mut self, step: u64, k: u64, op_type: &str) {
        self.op_named(step, k, &format!("model/op{k}"), op_type);
    }

    /// Op `k` of `step` named `name`, of type `op_type`: the tensors written next are its own.
    pub fn op_named(&mut self, step: u64, k: u64, name: &str, op_type: &str) {
        let op = OpInfo {
            name: name.into(),
            op_type: op_type.into(),
            step,
            task_id: k as u32,
            stream_id: 2,
            timestamp_us: 10 + k,
            dump_file: format!("{op_type}.model_op{k}.{k}.2.{}", 10 + k),
            ..OpInfo::default()
        };
        self.writer.append_op(&op).unwrap();
    }

    /// Input or output `index` of the last op: `data`, a flat tensor of `dtype` (ND; a sub-byte type fills
    /// every byte), with its statistics and content hash as the collector records them (no statistics for a
    /// dtype accutrace cannot decode).
    pub fn tensor(&mut self, io: Io, index: u32, dtype: DType, data: &[u8]) {
        self.tensor_standing_for(io, index, dtype, data, None);
    }

    /// [`RunWriter::tensor`], recorded as standing for `original_op`'s output `index` after fusion (what
    /// graph dumps and the collector record on every output, most often the op's own name).
    pub fn tensor_standing_for(
        &mut self,
        io: Io,
        index: u32,
        dtype: DType,
        data: &[u8],
        original_op: Option<&str>,
    ) {
        self.append(io, index, dtype, data, original_op, true);
    }

    /// [`RunWriter::tensor`] as a statistics capture records it: its statistics and content hash, no data.
    pub fn tensor_without_data(&mut self, io: Io, index: u32, dtype: DType, data: &[u8]) {
        self.append(io, index, dtype, data, None, false);
    }

    fn append(
        &mut self,
        io: Io,
        index: u32,
        dtype: DType,
        data: &[u8],
        original_op: Option<&str>,
        keep_data: bool,
    ) {
        let bits = dtype.bits().expect("a dtype of fixed width") as usize;
        let meta = TensorMeta {
            io,
            index,
            dtype,
            format: 2,
            sub_format: 0,
            device_shape: vec![(data.len() * 8 / bits) as u64],
            original_shape: None,
            original_op: original_op.map(|name| OriginalOp { name: name.into(), output_index: index }),
        };
        let stats = match dtype.is_decodable() {
            true => TensorStats::of_bytes(dtype, data).unwrap(),
            false => TensorStats::default(),
        };
        let kept = keep_data.then_some(data);
        self.writer.append_tensor(&meta, &stats, content_hash(data), kept, 1).unwrap();
    }

    /// A statistics CSV record (`dump_data: stats`) of `step`: `csv` as a dump callback got it for
    /// `dump_file`.
    pub fn stats_csv(&mut self, step: u64, dump_file: &str, csv: &[u8]) {
        let rec = StatsCsv { step, dump_file: dump_file.into(), csv: csv.to_vec() };
        self.writer.append_stats_csv(&rec).unwrap();
    }

    /// Seals the stream and writes the manifest: the run's directory.
    pub fn finish(mut self) -> PathBuf {
        self.manifest.streams.push(self.writer.seal().unwrap());
        self.manifest.write(&self.run).unwrap();
        self.run
    }
}

/// Runs the analyzer binary with `args`: its exit status (-1 where a signal ended it), stdout, stderr.
pub fn analyzer(args: &[&str]) -> (i32, String, String) {
    let out =
        std::process::Command::new(env!("CARGO_BIN_EXE_analyzer")).args(args).output().expect("run analyzer");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
}

/// Inverts one byte in the middle of the payload of the `nth` tensor record (0-based, in stream order) of
/// `run`'s only stream.
pub fn damage(run: &Path, nth: usize) {
    use accutrace_formats::capture::{CaptureRun, Record};
    let capture = CaptureRun::open(run).unwrap();
    let (segment, offset, payload) = capture.streams[0]
        .records()
        .filter_map(|r| {
            let r = r.unwrap();
            match r.record {
                Record::Tensor(t) => Some((r.segment.to_path_buf(), r.offset, t.stored_bytes().to_vec())),
                _ => None,
            }
        })
        .nth(nth)
        .unwrap();
    drop(capture);
    let mut bytes = std::fs::read(&segment).unwrap();
    let at = (offset as usize..bytes.len()).find(|&k| bytes[k..].starts_with(&payload)).unwrap();
    bytes[at + payload.len() / 2] ^= 0x10;
    std::fs::write(&segment, bytes).unwrap();
}

/// compare of `target` and `bench` with the default options, as the JSON report and as msprobe's CSV.
pub fn compare_texts(target: &dyn Source, bench: &dyn Source) -> (String, String) {
    compare_texts_with(target, bench, &CompareOptions::default())
}

/// [`compare_texts`] with `options`.
pub fn compare_texts_with(
    target: &dyn Source,
    bench: &dyn Source,
    options: &CompareOptions,
) -> (String, String) {
    let dir = tempfile::tempdir().unwrap();
    let comparison = compare(target, bench, options);
    let text = |format, name: &str| {
        let path = dir.path().join(name);
        let to = Destination { output: Some(&path), colour: Colour::Never };
        write(&comparison, format, &to, false).unwrap();
        std::fs::read_to_string(&path).unwrap()
    };
    (text(CompareFormat::Json, "json"), text(CompareFormat::MsprobeCsv, "csv"))
}
