//! Dump tensors of a dtype accutrace cannot decode (the runtime's HIFLOAT4): named in every command, counted
//! as unreadable input (exit 2), and the op's other tensors read right around them.

use accutrace_formats::dump::{encode_dump, sanitize_op_name};
use accutrace_formats::tensor::encode_f32;
use accutrace_formats::DType;
use accutrace_proto::dumpdata::{DumpData, OpOutput, Shape};
use std::path::Path;

mod support;
use support::analyzer;

/// The message every command gives for the HIFLOAT4 tensor.
const CANNOT_DECODE: &str = "HIFLOAT4: accutrace cannot decode its values yet";

/// A graph-mode dump tree of one step: `layer0/quant` with outputs float16 [3], HIFLOAT4 [5] (dtype 41,
/// packed two to a byte: `hifloat4`), float16 [2]; then `layer0/add` with one float16 output.
fn dump_tree(root: &Path, hifloat4: [u8; 3]) {
    let dir = root.join("20240101120000/0/model/1/0");
    std::fs::create_dir_all(&dir).unwrap();
    let fp16 = |values: &[f32]| encode_f32(DType::FLOAT16, values).unwrap();
    let output = |dtype: DType, n: u64| OpOutput {
        data_type: dtype.code(),
        format: 2,
        shape: Some(Shape { dim: vec![n] }),
        ..Default::default()
    };
    let ops = [
        (
            "Quant",
            "layer0/quant",
            vec![output(DType::FLOAT16, 3), output(DType::from_code(41), 5), output(DType::FLOAT16, 2)],
            vec![fp16(&[1.0, -2.0, 0.5]), hifloat4.to_vec(), fp16(&[3.0, 4.0])],
        ),
        ("Add", "layer0/add", vec![output(DType::FLOAT16, 2)], vec![fp16(&[8.0, 9.0])]),
    ];
    for (k, (op_type, name, outputs, bytes)) in ops.into_iter().enumerate() {
        let ts = 1000 + k as u64;
        let header = DumpData {
            version: "2.0".into(),
            op_name: name.into(),
            dump_time: ts,
            output: outputs,
            ..Default::default()
        };
        let slices: Vec<&[u8]> = bytes.iter().map(Vec::as_slice).collect();
        let file = encode_dump(&header, &[], &slices, &[], &[]).unwrap();
        std::fs::write(dir.join(format!("{op_type}.{}.{ts}.2.{ts}", sanitize_op_name(name))), file).unwrap();
    }
}

/// inspect: the float16 outputs on either side of the HIFLOAT4 one have their own statistics (the file's
/// sizes placed them), the HIFLOAT4 one is named with why it has none, and the listing exits 2.
#[test]
fn inspect_names_the_hifloat4_output_and_reads_the_float16_ones_around_it() {
    let dir = tempfile::tempdir().unwrap();
    dump_tree(dir.path(), [0x21, 0x43, 0x05]);
    let (code, stdout, stderr) = analyzer(&["inspect", dir.path().to_str().unwrap(), "--format", "json"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains(CANNOT_DECODE), "{stderr}");
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let quant = &report["ops"][0];
    assert_eq!(quant["name"], "layer0/quant");
    let tensors = quant["tensors"].as_array().unwrap();
    let stat = |k: usize, what: &str| tensors[k]["stats"][what].as_f64();
    assert_eq!((stat(0, "count"), stat(0, "min"), stat(0, "max")), (Some(3.0), Some(-2.0), Some(1.0)));
    assert_eq!(tensors[1]["dtype"], "HIFLOAT4");
    assert!(tensors[1]["stats"].is_null());
    assert!(tensors[1]["error"].as_str().unwrap().contains(CANNOT_DECODE), "{}", tensors[1]);
    assert_eq!((stat(2, "count"), stat(2, "min"), stat(2, "max")), (Some(2.0), Some(3.0), Some(4.0)));
    let problems = report["input_problems"].as_array().unwrap();
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!(problems[0]["kind"], "unreadable");
    assert!(problems[0]["message"].as_str().unwrap().contains("layer0/quant"), "{problems:?}");
}

/// compare, diff and overflow never give their all-clear over a tensor they could not read: the HIFLOAT4
/// output leads as unreadable input, named, and the exit status is 2. diff of two runs whose HIFLOAT4 bytes
/// are the same says so (equal bits are equal values, whatever the encoding); of runs whose bytes differ,
/// it cannot measure how much and says why.
#[test]
fn compare_diff_and_overflow_count_the_hifloat4_output_as_unreadable_input() {
    let dir = tempfile::tempdir().unwrap();
    let (run, other) = (dir.path().join("run"), dir.path().join("other"));
    dump_tree(&run, [0x21, 0x43, 0x05]);
    dump_tree(&other, [0x21, 0x43, 0x06]);
    let (run, other) = (run.to_str().unwrap(), other.to_str().unwrap());
    for args in [vec!["compare", run, run], vec!["diff", run, other], vec!["overflow", run]] {
        let (code, stdout, stderr) = analyzer(&args);
        assert_eq!(code, 2, "{args:?}: {stdout}{stderr}");
        assert!(stdout.contains("UNREADABLE INPUT"), "{args:?}: {stdout}");
        assert!(stdout.contains(CANNOT_DECODE), "{args:?}: {stdout}");
    }
    let (code, stdout, stderr) = analyzer(&["diff", run, run]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.contains("bit-identical"), "{stdout}");
}
