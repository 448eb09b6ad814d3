//! `analyzer convert`: a CANN dump tree (device formats included) to .npy files and back through the npy
//! source: same op names, types, shapes and values.

use accutrace_formats::dump::encode_dump;
use accutrace_formats::layout::{to_device, Format};
use accutrace_formats::tensor::encode_f32;
use accutrace_formats::DType;
use accutrace_proto::dumpdata::{DumpData, OpInput, OpOutput, Shape};
use analyzer::index::Io;
use analyzer::sources::cann::CannDumpSource;
use analyzer::sources::npy::NpyDirSource;
use analyzer::sources::Source;
use std::path::Path;
use std::process::Command;

/// One tensor: host values and shape, stored on the "device" in `format` as `dtype`.
struct T {
    dtype: DType,
    format: Format,
    shape: Vec<u64>,
    values: Vec<f32>,
}

impl T {
    fn new(dtype: DType, format: Format, shape: &[u64]) -> T {
        let n: u64 = shape.iter().product();
        // Quarter steps: exact in fp16, bf16 and fp32; negative values exercise the sign.
        let values = (0..n).map(|i| (i as f32 - 5.0) * 0.25).collect();
        T { dtype, format, shape: shape.to_vec(), values }
    }

    /// (device shape, device bytes); padding filled with garbage that readers must crop.
    fn device(&self) -> (Vec<u64>, Vec<u8>) {
        let (values, device_shape) =
            to_device(self.format, &self.values, &self.shape, self.dtype, 0, 7.0).unwrap();
        (device_shape, encode_f32(self.dtype, &values).unwrap())
    }
}

fn shape(dims: &[u64]) -> Option<Shape> {
    Some(Shape { dim: dims.to_vec() })
}

/// Writes one dump file `{op_type}.{sanitized}.{task}.2.{ts}` under `dir`.
fn write_op(dir: &Path, op_type: &str, name: &str, ts: u64, inputs: &[T], outputs: &[T]) {
    let (ins, outs): (Vec<_>, Vec<_>) =
        (inputs.iter().map(T::device).collect(), outputs.iter().map(T::device).collect());
    let header = DumpData {
        version: "2.0".into(),
        op_name: name.into(),
        dump_time: ts,
        input: inputs
            .iter()
            .zip(&ins)
            .map(|(t, (ds, _))| OpInput {
                data_type: t.dtype.code(),
                format: t.format.code(),
                shape: shape(ds),
                original_shape: shape(&t.shape),
                ..Default::default()
            })
            .collect(),
        output: outputs
            .iter()
            .zip(&outs)
            .map(|(t, (ds, _))| OpOutput {
                data_type: t.dtype.code(),
                format: t.format.code(),
                shape: shape(ds),
                original_shape: shape(&t.shape),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    let in_bytes: Vec<&[u8]> = ins.iter().map(|(_, b)| b.as_slice()).collect();
    let out_bytes: Vec<&[u8]> = outs.iter().map(|(_, b)| b.as_slice()).collect();
    let file = encode_dump(&header, &in_bytes, &out_bytes, &[], &[]).unwrap();
    let sanitized = accutrace_formats::dump::sanitize_op_name(name);
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join(format!("{op_type}.{sanitized}.{ts}.2.{ts}")), file).unwrap();
}

/// A graph-mode dump tree with two steps.
fn dump_tree(root: &Path) {
    for step in 0..2u64 {
        let dir = root.join("20240101120000/0/model/1").join(step.to_string());
        let base = 1000 + step * 100;
        write_op(
            &dir,
            "Conv2D",
            "layer0/conv.1",
            base + 1,
            &[T::new(DType::FLOAT16, Format::ND, &[2, 3]), T::new(DType::INT32, Format::ND, &[4])],
            &[T::new(DType::FLOAT16, Format::NC1HWC0, &[1, 3, 2, 2])],
        );
        write_op(
            &dir,
            "MatMul",
            "layer0/mm",
            base + 2,
            &[],
            &[T::new(DType::FLOAT, Format::FRACTAL_NZ, &[3, 5])],
        );
        write_op(&dir, "Cast", "cast_out", base + 3, &[], &[T::new(DType::BF16, Format::ND, &[5])]);
    }
}

fn analyzer(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_analyzer")).args(args).output().unwrap()
}

#[test]
fn cann_tree_round_trips_through_npy_files() {
    let dir = tempfile::tempdir().unwrap();
    let (dump, out) = (dir.path().join("dump"), dir.path().join("npy"));
    dump_tree(&dump);
    let result = analyzer(&["convert", dump.to_str().unwrap(), "-o", out.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&result.stdout);
    assert!(result.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&result.stderr));
    assert!(stdout.contains("wrote 10 .npy files"), "{stdout}");
    assert!(stdout.contains("bf16 written as float32"), "{stdout}");
    assert!(out.join("step1/rank0/Conv2D.layer0_conv_1.3.output.0.npy").is_file());
    let mapping = std::fs::read_to_string(out.join("mapping.csv")).unwrap();
    assert!(mapping.contains("Conv2D.layer0_conv_1.0.input.0,layer0/conv.1\n"), "{mapping}");

    let cann = CannDumpSource::open(&dump).unwrap();
    // Detected as a .npy directory despite mapping.csv, as `compare` and `inspect` will see it.
    let npy = analyzer::sources::open(&out).unwrap();
    assert_eq!(npy.kind(), "npy");
    let (a, b) = (cann.index(), npy.index());
    assert!(b.warnings.is_empty(), "{:?}", b.warnings);
    assert_eq!(a.ops.len(), b.ops.len());
    for (oa, ob) in a.ops.iter().zip(&b.ops) {
        assert_eq!((&oa.name, &oa.op_type, oa.step, oa.rank), (&ob.name, &ob.op_type, ob.step, ob.rank));
        assert_eq!(
            (oa.inputs().len(), oa.outputs().len()),
            (ob.inputs().len(), ob.outputs().len()),
            "{}",
            oa.name
        );
        for (ta, tb) in oa.tensors().zip(ob.tensors()) {
            let (ia, ib) = (&a.tensors[ta], &b.tensors[tb]);
            assert_eq!((ia.io, ia.index, &ia.shape), (ib.io, ib.index, &ib.shape), "{}", a.tensor_label(ta));
            let expected = if ia.dtype == DType::BF16 { DType::FLOAT } else { ia.dtype };
            assert_eq!(ib.dtype, expected, "{}", a.tensor_label(ta));
            let (mut va, mut vb) = (Vec::new(), Vec::new());
            cann.read_values(ta, &mut va).unwrap();
            npy.read_values(tb, &mut vb).unwrap();
            assert_eq!(va, vb, "{}", a.tensor_label(ta));
        }
    }
    // The NC1HWC0 output came back in host layout: its host values, not the padded device buffer.
    let conv = b.ops.iter().find(|o| o.name == "layer0/conv.1").unwrap();
    let t = conv.outputs().next().unwrap();
    let mut values = Vec::new();
    npy.read_values(t, &mut values).unwrap();
    assert_eq!(values, T::new(DType::FLOAT16, Format::NC1HWC0, &[1, 3, 2, 2]).values);
    assert_eq!(b.tensors[conv.inputs().nth(1).unwrap()].io, Io::Input);
}

#[test]
fn filters_select_what_is_written_and_mapping_rows_accumulate() {
    let dir = tempfile::tempdir().unwrap();
    let (dump, out) = (dir.path().join("dump"), dir.path().join("npy"));
    dump_tree(&dump);
    let (dump, out_s) = (dump.to_str().unwrap(), out.to_str().unwrap());
    let result = analyzer(&["convert", dump, "-o", out_s, "--step", "1", "--op", "*mm*"]);
    assert!(result.status.success(), "{}", String::from_utf8_lossy(&result.stderr));
    let npy = NpyDirSource::open(&out).unwrap();
    let names: Vec<(u64, &str)> = npy.index().ops.iter().map(|o| (o.step, o.name.as_str())).collect();
    assert_eq!(names, [(1, "layer0/mm")]);
    // A second conversion into the same directory keeps the first one's mapping rows.
    let result = analyzer(&["convert", dump, "-o", out_s, "--step", "0", "--op", "conv"]);
    assert!(result.status.success(), "{}", String::from_utf8_lossy(&result.stderr));
    let npy = NpyDirSource::open(&out).unwrap();
    let mut names: Vec<&str> = npy.index().ops.iter().map(|o| o.name.as_str()).collect();
    names.sort();
    assert_eq!(names, ["layer0/conv.1", "layer0/mm"]);
}

#[test]
fn unreadable_source_is_exit_2_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("Add.add.1.2.3");
    std::fs::write(&bad, b"\x05\0\0\0\0\0\0\0xx").unwrap();
    let result = analyzer(&["convert", bad.to_str().unwrap(), "-o", dir.path().join("o").to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&result.stderr);
    assert_eq!(result.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("Add.add.1.2.3"), "{stderr}");
}

#[test]
fn fp64_and_int64_are_written_bit_for_bit() {
    let dir = tempfile::tempdir().unwrap();
    let (dump, out) = (dir.path().join("dump"), dir.path().join("npy"));
    // Values that float32 cannot hold: 2^40 + tiny steps, and integers beyond 2^53.
    let doubles: Vec<f64> = (0..24).map(|i| 2f64.powi(40) + 1.0 + i as f64 * 1e-9).collect();
    let host_shape = [1u64, 4, 2, 3];
    let (device, device_shape) =
        to_device(Format::NC1HWC0, &doubles, &host_shape, DType::DOUBLE, 0, -7.0).unwrap();
    let device_bytes: Vec<u8> = device.iter().flat_map(|v| v.to_le_bytes()).collect();
    let ints: Vec<i64> = (0..5).map(|i| (1i64 << 60) + 3 * i - 2).collect();
    let int_bytes: Vec<u8> = ints.iter().flat_map(|v| v.to_le_bytes()).collect();
    let header = DumpData {
        version: "2.0".into(),
        op_name: "wide".into(),
        dump_time: 5,
        input: vec![OpInput {
            data_type: DType::INT64.code(),
            format: Format::ND.code(),
            shape: shape(&[5]),
            original_shape: shape(&[5]),
            ..Default::default()
        }],
        output: vec![OpOutput {
            data_type: DType::DOUBLE.code(),
            format: Format::NC1HWC0.code(),
            shape: shape(&device_shape),
            original_shape: shape(&host_shape),
            ..Default::default()
        }],
        ..Default::default()
    };
    let file = encode_dump(&header, &[&int_bytes], &[&device_bytes], &[], &[]).unwrap();
    std::fs::create_dir_all(&dump).unwrap();
    std::fs::write(dump.join("Cast.wide.5.2.5"), file).unwrap();

    let result = analyzer(&["convert", dump.to_str().unwrap(), "-o", out.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&result.stdout);
    assert!(result.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&result.stderr));
    assert!(!stdout.contains("precision lost") && !stdout.contains("rounded"), "{stdout}");
    let read = |name: &str| {
        let bytes = std::fs::read(out.join("step0/rank0").join(name)).unwrap();
        let view = accutrace_formats::npy::NpyView::parse(&bytes).unwrap();
        (view.dtype, view.shape.clone(), view.data.to_vec())
    };
    let (dtype, dims, data) = read("Cast.wide.0.output.0.npy");
    assert_eq!((dtype, dims.as_slice()), (DType::DOUBLE, &host_shape[..]));
    assert_eq!(data, doubles.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>());
    let (dtype, dims, data) = read("Cast.wide.0.input.0.npy");
    assert_eq!((dtype, dims.as_slice()), (DType::INT64, &[5u64][..]));
    assert_eq!(data, int_bytes);

    // And again from the .npy directory: the npy source hands its bytes through unchanged.
    let again = dir.path().join("again");
    let result = analyzer(&["convert", out.to_str().unwrap(), "-o", again.to_str().unwrap()]);
    assert!(result.status.success(), "{}", String::from_utf8_lossy(&result.stderr));
    let first = std::fs::read(out.join("step0/rank0/Cast.wide.0.output.0.npy")).unwrap();
    let second = std::fs::read(again.join("step0/rank0/Cast.wide.0.output.0.npy")).unwrap();
    assert_eq!(first, second);
}

#[test]
fn a_capture_converts_its_fp64_tensors_bit_for_bit() {
    use accutrace_formats::capture::{
        Io as CaptureIo, Manifest, OpInfo, Policy, StreamInfo, StreamWriter, TensorMeta,
    };
    use accutrace_formats::stats::{content_hash, TensorStats};
    let dir = tempfile::tempdir().unwrap();
    let (run, out) = (dir.path().join("run"), dir.path().join("npy"));
    std::fs::create_dir_all(&run).unwrap();
    let mut manifest = Manifest::new("test", vec!["train".into()]);
    let info = StreamInfo { stream_id: 0, rank: Some(0), device: 0, pid: 1, host: "test".into() };
    let mut w = StreamWriter::create(&run, info, 1 << 20, Policy::KeepAll).unwrap();
    let op = OpInfo {
        name: "wide".into(),
        op_type: "Cast".into(),
        step: 0,
        task_id: 5,
        stream_id: 2,
        timestamp_us: 5,
        dump_file: "Cast.wide.5.2.5".into(),
        original_names: vec![],
        ..OpInfo::default()
    };
    w.append_op(&op).unwrap();
    let doubles: Vec<f64> = (0..24).map(|i| 2f64.powi(40) + 1.0 + i as f64 * 1e-9).collect();
    let host_shape = [1u64, 4, 2, 3];
    let (device, device_shape) =
        to_device(Format::NC1HWC0, &doubles, &host_shape, DType::DOUBLE, 0, -7.0).unwrap();
    let bytes: Vec<u8> = device.iter().flat_map(|v| v.to_le_bytes()).collect();
    let meta = TensorMeta {
        io: CaptureIo::Output,
        index: 0,
        dtype: DType::DOUBLE,
        format: Format::NC1HWC0.code(),
        sub_format: 0,
        device_shape,
        original_shape: Some(host_shape.to_vec()),
        original_op: None,
    };
    let stats = TensorStats::of_bytes(DType::DOUBLE, &bytes).unwrap();
    w.append_tensor(&meta, &stats, content_hash(&bytes), Some(&bytes), 1).unwrap();
    manifest.streams.push(w.seal().unwrap());
    manifest.write(&run).unwrap();

    let result = analyzer(&["convert", run.to_str().unwrap(), "-o", out.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&result.stdout);
    assert!(result.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&result.stderr));
    assert!(stdout.contains("wrote 1 .npy files") && !stdout.contains("precision lost"), "{stdout}");
    let file = std::fs::read(out.join("step0/rank0/Cast.wide.0.output.0.npy")).unwrap();
    let view = accutrace_formats::npy::NpyView::parse(&file).unwrap();
    assert_eq!((view.dtype, view.shape.as_slice()), (DType::DOUBLE, &host_shape[..]));
    assert_eq!(view.data, doubles.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>());
}
