//! The workflows through the collector: `analyzer record` preloads libcollector.so into the simulated
//! training, and the analyzer answers from the capture. Same faults, same answers as from the dumps.

mod common;
use common::*;
use std::path::{Path, PathBuf};

/// Records `sim-train --model <model_json>` into `<dir>/<tag>` with extra `record` options.
fn recorded_run(dir: &Path, tag: &str, model_json: &str, steps: u64, options: &[&str]) -> PathBuf {
    let model = model_file(dir, &format!("{tag}.json"), model_json);
    let run = dir.join(tag);
    let stdout = record(&run, &model, steps, options, &[]);
    assert!(
        stdout.contains("collector: writer threads used") && stdout.contains("for free slots"),
        "the summary tells what the collector cost:\n{stdout}"
    );
    run
}

#[test]
fn captured_run_names_the_fused_kernel_as_culprit() {
    let dir = scratch();
    let model_json = r#"{"fusion": true, "faults": {"imprecise_fused_kernel": true}}"#;
    let run = recorded_run(dir.path(), "npu", model_json, 2, &["--mode", "tensor"]);
    let bench = dir.path().join("bench");
    sim_bench(&model_file(dir.path(), "bench.json", model_json), 2, &bench);
    let (code, report) = analyzer_json(&["compare", path_str(&run), path_str(&bench)]);
    assert_eq!(code, 1);
    assert_eq!(report["target"]["kind"], "capture");
    assert_eq!(
        report["culprit"]["name"], "model/layer_0/mlp/fused_matmul_biasadd_gelu",
        "{}",
        report["culprit"]
    );
    assert_eq!(report["culprit"]["step"], 0);
}

#[test]
fn statistics_capture_diff_finds_the_nondeterministic_op_without_tensor_bytes() {
    let dir = scratch();
    let op = "model/layer_1/attn/Softmax";
    let json = |seed: u32| format!(r#"{{"run_seed": {seed}, "faults": {{"nondeterministic_op": "{op}"}}}}"#);
    let a = recorded_run(dir.path(), "a", &json(1), 2, &[]);
    let b = recorded_run(dir.path(), "b", &json(2), 2, &[]);
    let (code, report) = analyzer_json(&["diff", path_str(&a), path_str(&b)]);
    assert_eq!(code, 1);
    assert_eq!(report["decoded_tensors"], 0, "a statistics capture has no bytes to decode");
    assert_eq!(report["first_differences"][0]["op"], op);
    assert_eq!(report["first_differences"][0]["verdict"], "nondeterministic");

    // The same seed twice: identical, from hashes alone.
    let c = recorded_run(dir.path(), "c", &json(1), 2, &[]);
    let (code, report) = analyzer_json(&["diff", path_str(&a), path_str(&c)]);
    assert_eq!(code, 0, "{report}");
}

#[test]
fn overflow_capture_carries_the_device_status_bits() {
    let dir = scratch();
    let op = "model/layer_0/mlp/fc1/MatMul";
    let model_json = format!(r#"{{"faults": {{"overflow": {{"op": "{op}", "step": 2}}}}}}"#);
    let run = recorded_run(dir.path(), "overflow", &model_json, 4, &["--overflow"]);
    let (code, report) = analyzer_json(&["overflow", path_str(&run)]);
    assert_eq!(code, 1);
    let first = &report["origins"][0];
    assert_eq!(first["op"], op);
    assert_eq!(first["step"], 2);
    let names: Vec<&str> = first["device_status"][0]["status_names"]
        .as_array()
        .expect("status names")
        .iter()
        .filter_map(|v| v.as_str())
        .collect();
    assert!(names.iter().any(|n| n.contains("fp16 conversion overflow")), "{first}");
    assert_eq!(report["unattributed_device_records"], 0, "the record is tied to the op's dump");
}
