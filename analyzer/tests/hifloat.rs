//! HiFloat tensors (Ascend 950). HiFloat8 is read as numbers (formats::tensor::hifloat8) from dump files
//! and captures: compared against a float32 .npy benchmark, listed by inspect, its inf codes found by
//! overflow. HiFloat4, which accutrace cannot decode, is refused in the same words by both readers.

mod support;

use accutrace_formats::capture::Io;
use accutrace_formats::dump::{encode_dump, sanitize_op_name};
use accutrace_formats::npy;
use accutrace_formats::tensor::encode_f32;
use accutrace_formats::DType;
use accutrace_proto::dumpdata::{DumpData, OpOutput, Shape};
use std::path::Path;
use support::{analyzer, RunWriter};

/// HiFloat8 codes and their values by the vendor's rule (runtime printf/hifloat.cpp): 0x08 = 0 0001 000 is
/// 1.0; 0x09 1.125; 0x10 = 0 001 0 000 is 2^1; 0x18 = 0 001 1 000 is 2^-1; 0x88 -1.0; 0x53 = 0 10 100 11 is
/// 2^-4 * 1.75; 0x6E = 0 11 0111 0 is 2^15, the largest finite.
const CODES: [u8; 7] = [0x08, 0x09, 0x10, 0x18, 0x88, 0x53, 0x6e];
const VALUES: [f32; 7] = [1.0, 1.125, 2.0, 0.5, -1.0, 0.109375, 32768.0];

/// A graph-mode dump tree of one step: `layer0/quant` [Quant] with one HIFLOAT8 output holding `hifloat8`,
/// then `layer0/add` [Add] with one float16 output.
fn dump_tree(root: &Path, hifloat8: &[u8]) {
    let dir = root.join("20240101120000/0/model/1/0");
    std::fs::create_dir_all(&dir).unwrap();
    let output = |dtype: DType, n: usize| OpOutput {
        data_type: dtype.code(),
        format: 2,
        shape: Some(Shape { dim: vec![n as u64] }),
        ..Default::default()
    };
    let add = encode_f32(DType::FLOAT16, &[8.0, 9.0]).unwrap();
    let ops = [
        ("Quant", "layer0/quant", output(DType::HIFLOAT8, hifloat8.len()), hifloat8.to_vec()),
        ("Add", "layer0/add", output(DType::FLOAT16, 2), add),
    ];
    for (k, (op_type, name, output, bytes)) in ops.into_iter().enumerate() {
        let ts = 1000 + k as u64;
        let header = DumpData {
            version: "2.0".into(),
            op_name: name.into(),
            dump_time: ts,
            output: vec![output],
            ..Default::default()
        };
        let file = encode_dump(&header, &[], &[&bytes], &[], &[]).unwrap();
        std::fs::write(dir.join(format!("{op_type}.{}.{ts}.2.{ts}", sanitize_op_name(name))), file).unwrap();
    }
}

/// The benchmark as a .npy directory in the vendor tools' naming (`{op_name}.{output}.{timestamp}.npy`).
fn npy_bench(root: &Path, quant: &[f32]) {
    std::fs::create_dir_all(root).unwrap();
    npy::write_f32(&root.join("layer0_quant.0.1000.npy"), &[quant.len() as u64], quant).unwrap();
    npy::write_f32(&root.join("layer0_add.0.1001.npy"), &[2], &[8.0, 9.0]).unwrap();
}

/// inspect gives the HIFLOAT8 output's statistics from its decoded values; compare against a float32
/// benchmark within HiFloat8's precision passes (exit 0) with metrics of those values.
#[test]
fn a_hifloat8_output_reads_as_numbers_and_compares_with_a_float32_benchmark() {
    let dir = tempfile::tempdir().unwrap();
    let (run, bench) = (dir.path().join("run"), dir.path().join("bench"));
    dump_tree(&run, &CODES);
    // The benchmark's values HiFloat8 rounded: 1.1 -> 1.125, 0.11 -> 0.109375; the rest exact.
    npy_bench(&bench, &[1.0, 1.1, 2.0, 0.5, -1.0, 0.11, 32768.0]);
    let (run, bench) = (run.to_str().unwrap(), bench.to_str().unwrap());

    let (code, stdout, stderr) = analyzer(&["inspect", run, "--format", "json"]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let quant = &report["ops"][0]["tensors"][0];
    assert_eq!(quant["dtype"], "HIFLOAT8", "{quant}");
    let stat = |what: &str| quant["stats"][what].as_f64();
    assert_eq!((stat("count"), stat("min"), stat("max")), (Some(7.0), Some(-1.0), Some(32768.0)), "{quant}");
    let sum: f64 = VALUES.iter().map(|&v| f64::from(v)).sum();
    assert!((stat("mean").unwrap() - sum / 7.0).abs() < 1e-9, "{quant}");

    let (code, stdout, stderr) = analyzer(&["compare", run, bench, "--format", "json"]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["input_problems"].as_array().map(Vec::len), Some(0), "{stdout}");
    let row = &report["rows"][0];
    assert_eq!(
        (row["target"].as_str(), row["status"].as_str()),
        (Some("layer0/quant.output.0"), Some("pass"))
    );
    let metric = |what: &str| row[what].as_f64().unwrap();
    // 1.125 against 1.1 (as f32) is the largest error, absolute and relative.
    assert!((metric("max_abs_err") - (1.125 - f64::from(1.1f32))).abs() < 1e-9, "{row}");
    assert!((metric("max_relative_err") - (1.125 / f64::from(1.1f32) - 1.0)).abs() < 1e-9, "{row}");
    assert!(metric("cosine") > 0.9999, "{row}");
    // Two of seven elements are off by more than 0.5%: 1.125 vs 1.1 and 0.109375 vs 0.11.
    assert!((metric("one_thousandth_err_ratio") - 5.0 / 7.0).abs() < 1e-9, "{row}");
    assert!((metric("five_thousandths_err_ratio") - 5.0 / 7.0).abs() < 1e-9, "{row}");
    assert_eq!(row["target_stats"]["at_saturation"], 1, "0x6E is HiFloat8's largest finite: {row}");
}

/// overflow finds HiFloat8's inf codes (0x6F, 0xEF) as an overflow of the op that wrote them, and its largest
/// finite value (0x6E, 2^15) as saturated, exit 1; a run with neither has none, exit 0.
#[test]
fn overflow_finds_the_hifloat8_inf_code_and_saturation() {
    let dir = tempfile::tempdir().unwrap();
    let run = |name: &str, codes: &[u8]| {
        let path = dir.path().join(name);
        dump_tree(&path, codes);
        analyzer(&["overflow", path.to_str().unwrap()])
    };
    let (code, stdout, stderr) = run("clean", &CODES[..6]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    let (code, stdout, stderr) = run("inf", &[0x08, 0x6f, 0xef, 0x10]);
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(stdout.contains("FIRST OVERFLOW: step 0 rank 0: layer0/quant [Quant]"), "{stdout}");
    assert!(stdout.contains("layer0/quant.output.0: 2 inf"), "{stdout}");
    let (code, stdout, stderr) = run("saturated", &[0x08, 0x6e]);
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(stdout.contains("layer0/quant.output.0: 1 saturated"), "{stdout}");
}

/// The message both readers give for a HIFLOAT4 tensor (DType::undecodable_reason).
const HIFLOAT4_CANNOT_DECODE: &str = "HIFLOAT4: accutrace cannot decode its values yet";

/// A capture holds a tensor's raw bytes and the analyzer decodes them: a HIFLOAT8 output reads as its
/// values, and a HIFLOAT4 one is refused with the words a dump tree's gets (it said "dtype HIFLOAT4 cannot
/// be decoded to numbers"), unreadable input, exit 2.
#[test]
fn a_capture_reads_hifloat8_and_refuses_hifloat4_as_a_dump_does() {
    let dir = tempfile::tempdir().unwrap();
    let mut writer = RunWriter::create(&dir.path().join("run"), 1 << 20);
    writer.op(0, "Quant");
    writer.tensor(Io::Output, 0, DType::HIFLOAT8, &CODES);
    writer.op(1, "Quant4");
    writer.tensor(Io::Output, 0, DType::HIFLOAT4, &[0x21, 0x43]);
    let run = writer.finish();
    let run = run.to_str().unwrap();

    // inspect lists the statistics recorded with the tensor (here the formats crate's, of decoded values).
    let (_, stdout, _) = analyzer(&["inspect", run, "--format", "json"]);
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let quant = &report["ops"][0]["tensors"][0];
    assert_eq!((quant["dtype"].as_str(), quant["stats"]["max"].as_f64()), (Some("HIFLOAT8"), Some(32768.0)));

    let (code, stdout, stderr) = analyzer(&["compare", run, run]);
    assert_eq!(code, 2, "{stdout}{stderr}");
    assert!(stdout.contains("UNREADABLE INPUT"), "{stdout}");
    let unreadable = stdout.lines().next().unwrap();
    assert!(unreadable.ends_with(&format!("model/op1.output.0: {HIFLOAT4_CANNOT_DECODE}")), "{stdout}");
    let (code, stdout, stderr) = analyzer(&["compare", run, run, "--format", "json"]);
    assert_eq!(code, 2, "{stdout}{stderr}");
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let row = &report["rows"][0];
    assert_eq!((row["target"].as_str(), row["status"].as_str()), (Some("model/op0.output.0"), Some("pass")));
    assert_eq!(row["max_abs_err"].as_f64(), Some(0.0), "{row}");
    assert_eq!(row["target_stats"]["max"].as_f64(), Some(32768.0), "{row}");
}

/// convert writes a HIFLOAT8 tensor as float32 (numpy has no hifloat8) holding its exact values, and says so.
#[test]
fn convert_writes_hifloat8_as_float32() {
    let dir = tempfile::tempdir().unwrap();
    let (run, out) = (dir.path().join("run"), dir.path().join("npy"));
    dump_tree(&run, &CODES);
    let (code, stdout, stderr) =
        analyzer(&["convert", run.to_str().unwrap(), "-o", out.to_str().unwrap(), "--format", "json"]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.contains("hifloat8 written as float32 (numpy has no hifloat8)"), "{stdout}");
    let file = out.join("step0/rank0/Quant.layer0_quant.0.output.0.npy");
    let bytes = std::fs::read(&file).unwrap_or_else(|e| panic!("{}: {e}\n{stdout}", file.display()));
    let view = npy::NpyView::parse(&bytes).unwrap();
    assert_eq!((view.dtype, view.to_f32_c_order().unwrap()), (DType::FLOAT, VALUES.to_vec()));
}

/// Relative errors of a HiFloat8 tensor against a float benchmark are computed in the precision the other
/// 8-bit floats get (msprobe's numpy result type: float64).
#[test]
fn hifloat8_relative_error_precision_is_the_other_8_bit_floats() {
    use analyzer::metrics::RePrecision;
    for bench in [DType::FLOAT, DType::FLOAT16, DType::BF16, DType::HIFLOAT8] {
        let fp8 = RePrecision::for_dtypes(DType::FLOAT8_E4M3FN, bench);
        assert_eq!(RePrecision::for_dtypes(DType::HIFLOAT8, bench), fp8, "{bench}");
        assert_eq!(fp8, RePrecision::F64, "{bench}");
    }
}
