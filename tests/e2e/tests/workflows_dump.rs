//! The workflows on the simulated runtime's on-disk CANN dumps (no collector): compare against the fp32
//! benchmark, diff two runs, find the first overflow. Each injected fault must be found with the right op
//! and step, and a clean pair must show no culprit.

mod common;
use common::*;

const STEPS: u64 = 2;

/// Trains with `model_json` and dumps every op of every step to `<dir>/dump`.
fn dumped_run(
    dir: &std::path::Path,
    tag: &str,
    model_json: &str,
    env: &[(&str, &str)],
) -> std::path::PathBuf {
    let model = model_file(dir, &format!("{tag}.json"), model_json);
    let dump = dir.join(format!("{tag}-dump"));
    let config = dump_config(dir, &format!("{tag}-acl.json"), &dump, "");
    sim_train(&model, STEPS, Some(&config), env);
    dump
}

#[test]
fn clean_mixed_precision_run_matches_the_benchmark() {
    let dir = scratch();
    let model_json = r#"{"fusion": true}"#;
    let dump = dumped_run(dir.path(), "npu", model_json, &[]);
    let bench = dir.path().join("bench");
    sim_bench(&model_file(dir.path(), "bench.json", model_json), STEPS, &bench);
    let (code, report) = analyzer_json(&["compare", path_str(&dump), path_str(&bench)]);
    assert!(report["culprit"].is_null(), "no fault was injected, yet: {}", report["culprit"]);
    assert_eq!(code, 0, "failing ops: {}", report["failing_ops"]);
    let rows = report["rows"].as_array().expect("rows");
    assert!(rows.len() > 50, "only {} pairs were compared", rows.len());
    // Fused kernels are matched to the benchmark's unfused ops through their original op names.
    assert!(rows.iter().any(|r| r["match"] == "provenance"), "no pair matched through original_op");
}

#[test]
fn imprecise_fused_kernel_is_the_culprit_through_its_original_ops() {
    let dir = scratch();
    let model_json = r#"{"fusion": true, "faults": {"imprecise_fused_kernel": true}}"#;
    let dump = dumped_run(dir.path(), "npu", model_json, &[]);
    let bench = dir.path().join("bench");
    sim_bench(&model_file(dir.path(), "bench.json", model_json), STEPS, &bench);
    let (code, report) = analyzer_json(&["compare", path_str(&dump), path_str(&bench), "--step", "0"]);
    assert_eq!(code, 1);
    let culprit = &report["culprit"];
    assert_eq!(culprit["op_type"], "FusedMatMulBiasGelu", "culprit: {culprit}");
    assert_eq!(culprit["step"], 0);
    let originals: Vec<&str> =
        culprit["original_ops"].as_array().expect("original ops").iter().filter_map(|v| v.as_str()).collect();
    assert!(originals.iter().any(|n| n.ends_with("/Gelu")), "original ops: {originals:?}");
}

#[test]
fn diff_names_the_nondeterministic_op_and_its_propagation() {
    let dir = scratch();
    let op = "model/layer_1/attn/Softmax";
    let a = dumped_run(
        dir.path(),
        "a",
        &format!(r#"{{"run_seed": 1, "faults": {{"nondeterministic_op": "{op}"}}}}"#),
        &[],
    );
    let b = dumped_run(
        dir.path(),
        "b",
        &format!(r#"{{"run_seed": 2, "faults": {{"nondeterministic_op": "{op}"}}}}"#),
        &[],
    );
    let (code, report) = analyzer_json(&["diff", path_str(&a), path_str(&b)]);
    assert_eq!(code, 1);
    let firsts = report["first_differences"].as_array().expect("first differences");
    assert_eq!(firsts.len() as u64, STEPS, "one first difference per step: {firsts:?}");
    // Step 0: the op itself, with identical inputs. Later steps start from weights that the step-0 update
    // already changed, so their first difference is fed by a differing input: propagating, not an origin.
    assert_eq!(firsts[0]["op"], op);
    assert_eq!(firsts[0]["verdict"], "nondeterministic");
    for later in &firsts[1..] {
        assert_eq!(later["verdict"], "propagating", "{later}");
        assert!(!later["differing_inputs"].as_array().expect("inputs").is_empty());
    }
    // Everything downstream differs too, and is reported as propagating, never as the origin.
    let census = report["census"].as_array().expect("census");
    assert!(census.len() > 1);
    assert_eq!(census[0]["op"], op, "the census is in execution order");
    // Within step 0 nothing upstream of the op differs (the forward of layer 0 runs before it).
    let (_, step0) = analyzer_json(&["diff", path_str(&a), path_str(&b), "--step", "0"]);
    let census0 = step0["census"].as_array().expect("census");
    assert_eq!(census0[0]["op"], op);
    assert!(
        census0.iter().all(|c| !c["op"].as_str().unwrap_or_default().starts_with("model/layer_0")),
        "{step0}"
    );
}

#[test]
fn diff_of_identical_runs_is_clean() {
    let dir = scratch();
    let a = dumped_run(dir.path(), "a", "{}", &[]);
    let b = dumped_run(dir.path(), "b", "{}", &[]);
    let (code, report) = analyzer_json(&["diff", path_str(&a), path_str(&b)]);
    assert_eq!(code, 0, "{report}");
    assert_eq!(report["differing_tensors"], 0);
    assert_eq!(report["decoded_tensors"], 0, "identical hashes must not be decoded");
}

#[test]
fn overflow_names_the_op_and_step_in_both_device_modes() {
    for (mode, layout) in [("infnan", "v2"), ("saturation", "legacy")] {
        let dir = scratch();
        let op = "model/layer_0/mlp/fc1/MatMul";
        let model_json = format!(r#"{{"faults": {{"overflow": {{"op": "{op}", "step": 1}}}}}}"#);
        let model = model_file(dir.path(), "m.json", &model_json);
        let dump = dir.path().join("dump");
        let config = dump_config(dir.path(), "acl.json", &dump, "");
        let sat = if mode == "saturation" { "saturation" } else { "infnan" };
        sim_train(&model, 3, Some(&config), &[("SIM_ACL_SAT_MODE", sat), ("SIM_ACL_OPDEBUG_LAYOUT", layout)]);
        let (code, report) = analyzer_json(&["overflow", path_str(&dump)]);
        assert_eq!(code, 1, "{mode}: {report}");
        let first = &report["origins"][0];
        assert_eq!(first["op"], op, "{mode}: {report}");
        assert_eq!(first["step"], 1, "{mode}");
        assert_eq!(first["inputs"], "finite inputs", "{mode}");
        let anomaly = &first["anomaly"];
        if mode == "saturation" {
            assert!(anomaly["saturated"].as_u64().unwrap_or(0) > 0, "saturation mode flags 65504: {anomaly}");
        } else {
            assert!(anomaly["inf"].as_u64().unwrap_or(0) + anomaly["nan"].as_u64().unwrap_or(0) > 0);
        }
    }
}

#[test]
fn fusion_on_off_says_whether_fusion_is_to_blame() {
    let dir = scratch();
    let unfused = dumped_run(dir.path(), "unfused", r#"{"fusion": false}"#, &[]);
    let good = dumped_run(dir.path(), "good", r#"{"fusion": true}"#, &[]);
    let bad =
        dumped_run(dir.path(), "bad", r#"{"fusion": true, "faults": {"imprecise_fused_kernel": true}}"#, &[]);

    // A correct fused kernel agrees with its unfused original ops: fusion is not to blame.
    let (code, report) = analyzer_json(&["compare", path_str(&good), path_str(&unfused), "--step", "0"]);
    let fused = report["fused_kernels"].as_array().expect("fused kernels");
    assert!(!fused.is_empty(), "fused kernels are matched through original_op");
    assert!(fused.iter().all(|k| k["fails"] == false), "{report}");
    assert_eq!(code, 0, "{}", report["failing_ops"]);

    // The imprecise one does not, and is the culprit, named with its original ops.
    let (code, report) = analyzer_json(&["compare", path_str(&bad), path_str(&unfused), "--step", "0"]);
    assert_eq!(code, 1);
    assert_eq!(report["culprit"]["op_type"], "FusedMatMulBiasGelu", "{}", report["culprit"]);
    assert!(report["fused_kernels"].as_array().expect("fused").iter().any(|k| k["fails"] == true));
}

#[test]
fn overflow_from_device_statistics_alone_with_loss_scale_history() {
    let dir = scratch();
    let op = "model/layer_0/mlp/fc1/MatMul";
    let model = model_file(
        dir.path(),
        "m.json",
        &format!(r#"{{"faults": {{"overflow": {{"op": "{op}", "step": 1}}}}}}"#),
    );
    let dump = dir.path().join("stats");
    let config = dump_config(dir.path(), "acl.json", &dump, r#", "dump_data": "stats""#);
    sim_train(&model, 3, Some(&config), &[]);
    let (code, report) = analyzer_json(&["overflow", path_str(&dump)]);
    assert_eq!(code, 1);
    // A statistics CSV names its op only through the (sanitized) file name.
    assert_eq!(report["origins"][0]["op"], "model_layer_0_mlp_fc1_MatMul");
    assert_eq!(report["origins"][0]["step"], 1);
    assert_eq!(report["tensors_without_statistics"], 0);
    // The fp16 loss scale halves after the overflowing step.
    let scales: Vec<(u64, f64)> = report["loss_scale"]
        .as_array()
        .expect("loss scale history")
        .iter()
        .map(|l| (l["step"].as_u64().unwrap_or(99), l["value"].as_f64().unwrap_or(0.0)))
        .collect();
    assert_eq!(scales, vec![(0, 1024.0), (1, 1024.0), (2, 512.0)]);
}
