//! The capture source's tests' shared data: a stream of tensors written, and the whole decode that
//! `read_values` must give bit for bit.

use super::CaptureSource;
use crate::index::TensorId;
use crate::sources::Source;
use accutrace_formats::capture::{Io, OpInfo, Policy, StepSource, StreamInfo, StreamWriter, TensorMeta};
use accutrace_formats::layout::Format;
use accutrace_formats::stats::{content_hash, TensorStats};
use accutrace_formats::tensor::host::host_values;
use accutrace_formats::DType;
use std::path::Path;

/// xorshift bytes: incompressible, so stored as they are (raw, or zstd's stored blocks of a plane).
pub(super) fn noise(n: usize, mut s: u64) -> Vec<u8> {
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s as u8
        })
        .collect()
}

/// A tensor to write: dtype, format, device shape, host shape, bytes.
pub(super) type Written = (DType, Format, Vec<u64>, Option<Vec<u64>>, Vec<u8>);

/// Writes one stream of `tensors` under one op.
pub(super) fn write(dir: &Path, tensors: &[Written]) {
    write_keeping(dir, tensors, |_| true);
}

/// [`write`], with the data of the tensors `keeps_data` picks (by position) and the statistics alone of
/// the others (`record --stats`).
pub(super) fn write_keeping(dir: &Path, tensors: &[Written], keeps_data: impl Fn(usize) -> bool) {
    let info = StreamInfo { stream_id: 0, rank: Some(0), device: 0, pid: 1000, host: "test".into() };
    let mut w = StreamWriter::create(dir, info, 1 << 20, Policy::KeepAll).unwrap();
    let op = OpInfo {
        name: "layer/matmul".into(),
        op_type: "MatMulV2".into(),
        step: 0,
        task_id: 7,
        stream_id: 2,
        timestamp_us: 1_700_000_000_000_000,
        dump_file: "MatMulV2.layer_matmul.7.2.1700000000000000".into(),
        original_names: vec![],
        dump_number: None,
        step_source: StepSource::Model,
    };
    w.append_op(&op).unwrap();
    for (i, (dtype, format, device_shape, original_shape, bytes)) in tensors.iter().enumerate() {
        let meta = TensorMeta {
            io: Io::Output,
            index: i as u32,
            dtype: *dtype,
            format: format.code(),
            sub_format: 0,
            device_shape: device_shape.clone(),
            original_shape: original_shape.clone(),
            original_op: None,
        };
        let stats = TensorStats::of_bytes(*dtype, bytes).unwrap();
        let data = keeps_data(i).then_some(&bytes[..]);
        w.append_tensor(&meta, &stats, content_hash(bytes), data, 1).unwrap();
    }
    w.seal().unwrap();
}

/// The values and error of the whole decode, [`CaptureSource::read_values`]' path before blocks.
pub(super) fn read_whole(source: &CaptureSource, t: TensorId) -> std::result::Result<Vec<u32>, String> {
    let mut out = Vec::new();
    source
        .with_device_tensor(t, |device| Ok(host_values(device, &mut Vec::new(), &mut out)?))
        .map(|_| out.iter().map(|v| v.to_bits()).collect())
        .map_err(|e| format!("{e:#}"))
}

/// `read_values` of `t` into `out`, asserted to give [`read_whole`]'s values bit for bit or its error;
/// that result.
pub(super) fn read_as_whole(
    source: &CaptureSource,
    t: TensorId,
    out: &mut Vec<f32>,
) -> std::result::Result<Vec<u32>, String> {
    let whole = read_whole(source, t);
    let read = source.read_values(t, out).map_err(|e| format!("{e:#}"));
    let read = read.map(|()| out.iter().map(|v| v.to_bits()).collect::<Vec<u32>>());
    assert!(read == whole, "tensor {t}: {:?} against {:?}", read.map(|v| v.len()), whole.map(|v| v.len()));
    whole
}
