//! The mistakes users make, and what the analyzer says instead of a wrong answer (issue #11, points 2-6):
//! `diff` of runs that are not one configuration, target and benchmark swapped, a benchmark of another
//! model, overflow output that would mislead, selections that match nothing.

mod common;
use common::*;
use std::path::{Path, PathBuf};

const FUSED: &str = r#"{"fusion": true, "faults": {"imprecise_fused_kernel": true}}"#;

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures/msprobe-tiny")
}

/// Records `model_json` (tensor mode) into `dir/tag`; `train` adds sim-train options after the model.
fn captured(dir: &Path, tag: &str, model_json: &str, steps: u64, options: &[&str]) -> PathBuf {
    let model = model_file(dir, &format!("{tag}.json"), model_json);
    let run = dir.join(tag);
    record(&run, &model, steps, options, &[]);
    run
}

/// Runs the analyzer expecting a usage error (a selection that matches nothing): exit 2, nothing on
/// standard output, the message on stderr.
fn usage_error(args: &[&str]) -> String {
    let (code, stdout, stderr) = analyzer(args);
    assert_eq!(code, 2, "{args:?} is refused:\n{stdout}\n{stderr}");
    assert!(stdout.is_empty(), "no report: {stdout}");
    stderr
}

/// Runs the analyzer expecting a refusal: exit 2, the report led by REFUSED (the reason) and no verdict;
/// JSON says the same. Returns the table report.
fn refusal(args: &[&str]) -> String {
    let (code, stdout, stderr) = analyzer(args);
    assert_eq!(code, 2, "{args:?} is refused:\n{stdout}\n{stderr}");
    assert!(stdout.starts_with("REFUSED: "), "the refusal leads the report:\n{stdout}\n{stderr}");
    assert!(stdout.contains("NOT COMPARED"), "{stdout}");
    assert!(
        !stdout.contains("NONDETERMINISTIC") && !stdout.contains("CULPRIT") && !stdout.contains("PASS"),
        "no verdict: {stdout}"
    );
    let (code, json) = analyzer_json(args);
    assert_eq!(code, 2);
    assert!(json["input_problems"].as_array().unwrap().iter().any(|p| p["kind"] == "refused"), "{json}");
    stdout
}

#[test]
fn diff_refuses_runs_of_another_precision_and_points_to_compare() {
    let (target, bench) = (fixture().join("target"), fixture().join("bench"));
    let why = refusal(&["diff", path_str(&target), path_str(&bench)]);
    assert!(why.contains("are not the same configuration"), "{why}");
    assert!(
        why.contains("precision: 43 tensors differ; first: Functional.linear.0.forward.output.0 is BF16 in run 1 and FLOAT in run 2"),
        "{why}"
    );
    assert!(why.contains("these runs differ in precision: compare them with `analyzer compare"), "{why}");

    // A capture against its fp32 benchmark: precision, and the fused kernel against the unfused ops.
    let dir = scratch();
    let run = captured(dir.path(), "npu", FUSED, 1, &["--mode", "tensor"]);
    let bench = dir.path().join("bench");
    sim_bench(&model_file(dir.path(), "bench.json", FUSED), 1, &bench);
    let why = refusal(&["diff", path_str(&run), path_str(&bench)]);
    assert!(why.contains("is FLOAT16 in run 1 and FLOAT in run 2"), "{why}");
    assert!(
        why.contains(
            "op 13 is model/layer_0/mlp/fused_matmul_biasadd_gelu [FusedMatMulBiasGelu] in run 1 and \
                      model/layer_0/mlp/fc1/MatMul [MatMulV2] in run 2"
        ),
        "{why}"
    );
}

#[test]
fn diff_refuses_another_fusion_or_device_mode_and_accepts_the_same_configuration() {
    let dir = scratch();
    let plain = captured(dir.path(), "plain", "{}", 1, &[]);
    let fused = captured(dir.path(), "fused", r#"{"fusion": true}"#, 1, &[]);
    let why = refusal(&["diff", path_str(&plain), path_str(&fused)]);
    assert!(why.contains("op sequence: step 0 rank 0: op "), "{why}");
    assert!(why.contains("these runs differ in their ops"), "{why}");

    // The same model under the other device overflow mode: the manifests tell.
    let saturation = dir.path().join("saturation");
    let model = model_file(dir.path(), "sat.json", "{}");
    record(&saturation, &model, 1, &[], &[("SIM_ACL_SAT_MODE", "saturation")]);
    let why = refusal(&["diff", path_str(&plain), path_str(&saturation)]);
    assert!(why.contains("settings: the device overflow mode is"), "{why}");
    assert!(why.contains("\"saturation\" in run 2"), "{why}");

    // One configuration twice: no refusal, identical.
    let again = captured(dir.path(), "again", "{}", 1, &[]);
    let (code, report) = analyzer_json(&["diff", path_str(&plain), path_str(&again)]);
    assert_eq!(code, 0, "{report}");
}

#[test]
fn compare_warns_when_target_and_benchmark_look_swapped() {
    let dir = scratch();
    let run = captured(dir.path(), "npu", FUSED, 1, &["--mode", "tensor"]);
    let bench = dir.path().join("bench");
    sim_bench(&model_file(dir.path(), "bench.json", FUSED), 1, &bench);
    let (_, stdout, _) = analyzer(&["compare", path_str(&bench), path_str(&run)]);
    let swap = format!("`analyzer compare {} {}`", run.display(), bench.display());
    assert!(stdout.contains("WARNING: the target and the benchmark look swapped"), "{stdout}");
    assert!(stdout.contains("the benchmark is an NPU dump (capture)") && stdout.contains(&swap), "{stdout}");
    // JSON carries it, and standard error still shows it.
    let (_, report) = analyzer_json(&["compare", path_str(&bench), path_str(&run)]);
    assert!(report["warnings"][0].as_str().is_some_and(|w| w.contains(&swap)), "{}", report["warnings"]);
    // The right way round: no warning.
    let (_, report) = analyzer_json(&["compare", path_str(&run), path_str(&bench)]);
    assert_eq!(report["warnings"].as_array().map(Vec::len), Some(0), "{}", report["warnings"]);

    // Two framework dumps: the benchmark side has the lower precision.
    let (target, bench) = (fixture().join("target"), fixture().join("bench"));
    let (_, stdout, _) = analyzer(&["compare", path_str(&bench), path_str(&target)]);
    assert!(
        stdout.contains("matched tensors have lower precision in the benchmark than in the target"),
        "{stdout}"
    );
}

#[test]
fn compare_refuses_a_benchmark_of_another_model() {
    let dir = scratch();
    let run = captured(dir.path(), "npu", FUSED, 1, &["--mode", "tensor"]);
    let other = dir.path().join("other");
    sim_bench(&model_file(dir.path(), "other.json", r#"{"d_model": 24}"#), 1, &other);
    let why = refusal(&["compare", path_str(&run), path_str(&other)]);
    assert!(why.contains("these are not runs of the same model"), "{why}");
    assert!(why.contains("matched tensor pairs differ in shape: model/embedding/GatherV2.output.0 is [2, 8, 16] in the target and [2, 8, 24] in the benchmark"), "{why}");
}

/// Records `model_json` in eager mode (tensor mode, one step, the Python hook's step ends) into `dir/tag`:
/// every op launched on its own, kernels named by type and a counter (`GatherV2_0`), as torch_npu runs.
/// The fused eager run with an imprecise fused kernel, d_ff == d_model: no shape tells the kernels whose
/// counters shift at the fused kernel apart.
const FUSED_D_FF_16: &str = r#"{"fusion": true, "d_ff": 16, "faults": {"imprecise_fused_kernel": true}}"#;

/// The fused run of [`FUSED_D_FF_16`] and its unfused counterpart, captured in `dir`.
fn fused_and_unfused_with_d_ff_16(dir: &Path) -> (PathBuf, PathBuf) {
    let fused = captured_eager(dir, "fused", FUSED_D_FF_16);
    (fused, captured_eager(dir, "unfused", r#"{"fusion": false, "d_ff": 16}"#))
}

fn captured_eager(dir: &Path, tag: &str, model_json: &str) -> PathBuf {
    captured_eager_with(dir, tag, model_json, &[])
}

/// [`captured_eager`] with more options of `analyzer record` (`--dump-level op`).
fn captured_eager_with(dir: &Path, tag: &str, model_json: &str, record_args: &[&str]) -> PathBuf {
    let model = model_file(dir, &format!("{tag}.json"), model_json);
    let run = dir.join(tag);
    let (collector, lib, sim_train) = (collector_lib(), runtime_lib(), sim_train_bin());
    let args = ["record", "-o", path_str(&run), "--collector", path_str(&collector), "--mode", "tensor"];
    let train = ["--", path_str(&sim_train), "--eager", "--model", path_str(&model), "--steps", "1"];
    let (code, stdout, stderr) =
        analyzer(&[&args[..], record_args, &train, &["--lib", path_str(&lib)]].concat());
    assert_eq!(code, 0, "record {tag} failed:\n{stdout}\n{stderr}");
    run
}

/// An eager capture (kernels named `GatherV2_0`) against a graph-mode benchmark (ops named
/// `model/embedding/GatherV2`): no name ties the two, the pairs are guesses from execution order, and the
/// fused kernel of the eager run has no counterpart, so a culprit over them names the wrong op (it named
/// `Mul_1`, the loss gradient, exit 1). compare refuses, says why and what to do; so does report. Runs
/// recorded the same way still compare: graph against graph, eager against eager.
#[test]
fn compare_refuses_eager_kernels_against_graph_mode_ops() {
    let dir = scratch();
    let eager = captured_eager(dir.path(), "eager", FUSED);
    let graph = captured(dir.path(), "graph", FUSED, 1, &["--mode", "tensor"]);
    let bench = dir.path().join("bench");
    sim_bench(&model_file(dir.path(), "bench.json", FUSED), 1, &bench);
    for (target, bench) in [(&eager, &bench), (&graph, &eager)] {
        let why = refusal(&["compare", path_str(target), path_str(bench)]);
        assert!(why.contains("eager kernels, named by type and a counter (like GatherV2_0)"), "{why}");
        assert!(why.contains("graph-mode ops, named by their place in the graph (like model/"), "{why}");
        assert!(why.contains("were only guessed from execution order, op types and shapes"), "{why}");
        assert!(
            why.contains("record the benchmark the way the target ran") && why.contains("--mapping"),
            "{why}"
        );
    }
    let page = dir.path().join("eager.html");
    let (code, stdout, stderr) =
        analyzer(&["report", path_str(&eager), path_str(&bench), "-o", path_str(&page)]);
    assert_eq!(code, 2, "{stdout}\n{stderr}");
    assert!(!stdout.contains("CULPRIT") && !report_page(&page).contains("CULPRIT"), "{stdout}");
    // check pairs no op either, and says why (its exit 1 is mixed_precision: fp16 against fp32, a fact).
    let (_, stdout, _) = analyzer(&["check", path_str(&eager), path_str(&bench)]);
    assert!(
        stdout.contains("no op of one run matches the other's (run 1 holds eager kernels")
            && stdout.contains("recorded in different execution modes"),
        "{stdout}"
    );

    // Recorded the same way: graph against graph names the fused kernel, eager against eager compares.
    let (code, v) = analyzer_json(&["compare", path_str(&graph), path_str(&bench)]);
    assert_eq!(code, 1, "{v}");
    assert_eq!(v["culprit"]["name"], "model/layer_0/mlp/fused_matmul_biasadd_gelu", "{}", v["culprit"]);
    let again = captured_eager(dir.path(), "eager-again", FUSED);
    let (code, v) = analyzer_json(&["compare", path_str(&again), path_str(&eager)]);
    assert_eq!(code, 0, "{v}");
}

/// Two eager runs that fuse differently: kernel names are per-type counters, so `MatMulV2_2` is fc1's
/// matmul in the unfused run and fc2's in the fused one. Pairing by those names named `Mul_1` (the loss
/// scaling) as culprit: refused, and a `--mapping` that ties the shifted kernels is heard before the names.
#[test]
fn compare_refuses_eager_kernels_whose_counters_differ() {
    let dir = scratch();
    let fused = captured_eager(dir.path(), "fused", FUSED);
    let unfused = captured_eager(dir.path(), "unfused", r#"{"fusion": false}"#);
    let why = refusal(&["compare", path_str(&fused), path_str(&unfused)]);
    assert!(why.contains("both hold eager kernels, named by type and a counter"), "{why}");
    assert!(why.contains("25 MatMulV2 kernels in the target and 27 in the benchmark"), "{why}");
    assert!(why.contains("MatMulV2_2.input.0 is [2, 8, 32] in the target and [2, 8, 16]"), "{why}");
    assert!(why.contains("--mapping"), "{why}");
    let page = dir.path().join("fused.html");
    let (code, stdout, stderr) =
        analyzer(&["report", path_str(&fused), path_str(&unfused), "-o", path_str(&page)]);
    assert_eq!(code, 2, "{stdout}\n{stderr}");
    assert!(!stdout.contains("CULPRIT") && !report_page(&page).contains("CULPRIT"), "{stdout}");
    // check's determinism pairs ops by name too: the shifted kernel is no difference of data or weights.
    let (code, stdout, stderr) = analyzer(&["check", path_str(&fused), path_str(&unfused)]);
    assert_eq!(code, 1, "the configuration differs (fusion):\n{stdout}\n{stderr}");
    assert!(!stdout.contains("first differ in the inputs"), "{stdout}");
    assert!(stdout.contains("MatMulV2_2 is not the same op in the two runs"), "{stdout}");
    // The same fusion on both sides: the counters name the same kernels.
    let again = captured_eager(dir.path(), "fused-again", FUSED);
    let (code, v) = analyzer_json(&["compare", path_str(&again), path_str(&fused)]);
    assert_eq!(code, 0, "{v}");
}

/// Two eager runs that fuse differently where the shifted kernels have the same shapes (d_ff == d_model:
/// fc1's and fc2's matmuls are both [16, 16]): `MatMulV2_2` is fc2's matmul in the fused run and fc1's in
/// the unfused one, and no pair by name of it differs in shape. compare of a selection of it (`--op
/// 'M?tMulV2_2'`) compared fc2 with fc1 (exit 1: 'already has failing inputs', data fed to the model), and
/// check's determinism read 'the runs first differ in the inputs of MatMulV2_2: see data and initial
/// weights'. The kernel types in execution order part at the fused kernel: compare refuses and says where,
/// check says the op is not the same in the two runs.
#[test]
fn compare_refuses_eager_kernels_shifted_where_their_shapes_agree() {
    let dir = scratch();
    let (fused, unfused) = fused_and_unfused_with_d_ff_16(dir.path());
    let compare = ["compare", path_str(&fused), path_str(&unfused)];
    for selection in [&[][..], &["--op", "M?tMulV2_2"]] {
        let why = refusal(&[&compare[..], selection].concat());
        assert!(why.contains("the kernel types in execution order part"), "{why}");
        assert!(why.contains("the target launched FusedMatMulBiasGelu and the benchmark nothing"), "{why}");
        assert!(why.contains("from MatMulV2_2 on"), "{why}");
        assert!(why.contains("--mapping"), "{why}");
    }
    let (code, stdout, stderr) = analyzer(&["check", path_str(&fused), path_str(&unfused)]);
    assert_eq!(code, 1, "the configuration differs (fusion):\n{stdout}\n{stderr}");
    assert!(!stdout.contains("first differ in the inputs"), "{stdout}");
    assert!(stdout.contains("MatMulV2_2 is not the same op in the two runs"), "{stdout}");
    // Runs of the same kernels, selection or not, still compare.
    let again = captured_eager(dir.path(), "fused-again", FUSED_D_FF_16);
    for selection in [&[][..], &["--op", "M?tMulV2_2"]] {
        let (code, v) =
            analyzer_json(&[&["compare", path_str(&again), path_str(&fused)][..], selection].concat());
        assert_eq!(code, 0, "{v}");
    }
}

/// A `--mapping` that ties every kernel whose counter shifted is the user's word: fused against unfused
/// eager runs (d_ff == d_model, so no shape tells the shifted kernels apart) then compare fc2's matmul with
/// fc2's, either way round, and nothing pairs the unfused run's fc1 kernels with another op. Given the
/// unfused run as target, its fc1 matmul (`MatMulV2_2`, unmapped) took the fused run's `MatMulV2_2` by name,
/// the one the mapping gives its fc2 matmul, and the pairs shifted on until compare refused (exit 2). A
/// mapping of the first shifted kernel alone is still refused, naming where the runs part.
#[test]
fn compare_hears_a_mapping_of_every_shifted_eager_kernel_either_way_round() {
    let dir = scratch();
    let (fused, unfused) = fused_and_unfused_with_d_ff_16(dir.path());
    let names = |run: &Path| -> Vec<(String, String)> {
        let (code, v) = analyzer_json(&["inspect", path_str(run)]);
        assert_eq!(code, 0, "{v}");
        let ops = v["ops"].as_array().unwrap().iter();
        ops.map(|o| (o["name"].as_str().unwrap().to_string(), o["op_type"].as_str().unwrap().to_string()))
            .collect()
    };
    // The kernels fusion left alone, in execution order: the fused run without its fused kernels, the
    // unfused run without each GeLU and the matmul and bias add before it (fc1).
    let kept_fused: Vec<String> =
        names(&fused).into_iter().filter(|(_, t)| t != "FusedMatMulBiasGelu").map(|(n, _)| n).collect();
    let mut kept_unfused: Vec<String> = Vec::new();
    for (name, op_type) in names(&unfused) {
        if op_type == "GeLU" {
            kept_unfused.truncate(kept_unfused.len() - 2);
        } else {
            kept_unfused.push(name);
        }
    }
    assert_eq!(kept_fused.len(), kept_unfused.len(), "{kept_fused:?}\n{kept_unfused:?}");
    let shifted: Vec<(&String, &String)> =
        kept_fused.iter().zip(&kept_unfused).filter(|(f, u)| f != u).collect();
    assert!(shifted.contains(&(&"MatMulV2_2".to_string(), &"MatMulV2_3".to_string())), "{shifted:?}");
    let mapping = |name: &str, lines: &mut dyn Iterator<Item = String>| {
        let path = dir.path().join(name);
        std::fs::write(&path, lines.collect::<String>()).unwrap();
        path
    };
    let forward = mapping("forward.csv", &mut shifted.iter().map(|(f, u)| format!("{f},{u}\n")));
    let backward = mapping("backward.csv", &mut shifted.iter().map(|(f, u)| format!("{u},{f}\n")));
    for (target, bench, map, fc2, fc1) in [
        (&fused, &unfused, &forward, ("MatMulV2_2", "MatMulV2_3"), "MatMulV2_2"),
        (&unfused, &fused, &backward, ("MatMulV2_3", "MatMulV2_2"), "MatMulV2_2"),
    ] {
        let (code, v) =
            analyzer_json(&["compare", path_str(target), path_str(bench), "--mapping", path_str(map)]);
        assert_ne!(code, 2, "a full mapping is heard: {}", v["refused"]);
        assert!(v["refused"].is_null(), "{}", v["refused"]);
        let rows = v["rows"].as_array().unwrap();
        fn pair(r: &serde_json::Value) -> (&str, &str) {
            (r["target"].as_str().unwrap(), r["bench"].as_str().unwrap())
        }
        let fc2_rows: Vec<_> =
            rows.iter().filter(|r| pair(r).0.starts_with(&format!("{}.", fc2.0))).map(pair).collect();
        assert_eq!(fc2_rows.len(), 3, "fc2's matmul is compared: {fc2_rows:?}");
        assert!(
            fc2_rows.iter().all(|(_, b)| b.starts_with(&format!("{}.", fc2.1))),
            "with fc2's: {fc2_rows:?}"
        );
        // No pair of other op types, and the unfused run's fc1 kernels compared with nothing.
        let kind = |name: &str| name.split('.').next().unwrap().rsplit_once('_').unwrap().0.to_string();
        assert!(rows.iter().map(pair).all(|(t, b)| kind(t) == kind(b)), "{rows:?}");
        let unfused_fc1 = format!("{fc1}.output.0");
        let unmatched_unfused =
            if target == &unfused { &v["unmatched_target"] } else { &v["unmatched_bench"] };
        assert!(
            unmatched_unfused.as_array().unwrap().iter().any(|t| t == &unfused_fc1[..]),
            "{unmatched_unfused}"
        );
    }
    // The first shifted kernel alone: the kernels after it still part, and the refusal says where.
    let first = mapping("first.csv", &mut shifted.iter().take(1).map(|(f, u)| format!("{f},{u}\n")));
    let why = refusal(&["compare", path_str(&fused), path_str(&unfused), "--mapping", path_str(&first)]);
    assert!(why.contains("the kernel types in execution order part: in step 0 rank 0, "), "{why}");
    assert!(
        why.contains("BiasAdd_0 comes after MatMulV2_2 in the target and before it in the benchmark"),
        "{why}"
    );
}

/// The same eager job dumped at `dump_level` "all" (CANN's default: an FFTS+ kernel's op-level file and
/// its sub-task's kernel-level file, the same tensors twice under one name) and at "op". The copies are no
/// kernels of their own: compare refused the pair as differently fused ('the target launched
/// FusedMatMulBiasGelu and the benchmark nothing', exit 2), then said the copies had no counterpart (exit
/// 1), and check called MatMulV2_2 'not the same op in the two runs'. Now they compare through the op-level
/// tensors they copy, both ways.
#[test]
fn eager_runs_dumped_at_another_dump_level_compare_as_the_same_kernels() {
    let dir = scratch();
    let all = captured_eager(dir.path(), "all", FUSED);
    let op_level = captured_eager_with(dir.path(), "op", FUSED, &["--dump-level", "op"]);
    let (_, inspected, _) = analyzer(&["inspect", path_str(&all), "--op", "FusedMatMulBiasGelu_0"]);
    assert_eq!(inspected.matches("FusedMatMulBiasGelu_0 [FusedMatMulBiasGelu]").count(), 2, "{inspected}");
    for (target, bench) in [(&all, &op_level), (&op_level, &all)] {
        let (code, v) = analyzer_json(&["compare", path_str(target), path_str(bench)]);
        assert_eq!(code, 0, "{v}");
        assert_eq!(v["unmatched_target"].as_array().map(Vec::len), Some(0), "{}", v["unmatched_target"]);
        assert_eq!(v["unmatched_bench"].as_array().map(Vec::len), Some(0), "{}", v["unmatched_bench"]);
    }
    let (_, stdout, _) = analyzer(&["check", path_str(&all), path_str(&op_level)]);
    assert!(!stdout.contains("not the same op"), "{stdout}");
    assert!(stdout.contains("every op both runs dumped gave identical outputs"), "{stdout}");
}

#[test]
fn overflow_output_says_only_what_the_dump_shows() {
    let dir = scratch();
    let op = "model/layer_0/mlp/fc1/MatMul";
    let faulty = format!(r#"{{"faults": {{"overflow": {{"op": "{op}", "step": 1}}}}}}"#);
    // Overflow detection dumps only the flagged ops: nothing downstream to count.
    let run = captured(dir.path(), "detect", &faulty, 3, &["--overflow"]);
    let (code, report) = analyzer_json(&["overflow", path_str(&run)]);
    assert_eq!((code, report["origins"][0]["op"].as_str()), (1, Some(op)), "{report}");
    assert!(report["origins"][0]["spread_to"].is_null(), "{}", report["origins"][0]);
    assert_eq!(report["only_overflowing_ops"], true);
    let (_, table, _) = analyzer(&["overflow", path_str(&run)]);
    assert!(table.contains("spread: not visible") && !table.contains("spread to"), "{table}");

    // A full dump counts the spread and reads the loss scale from the power-of-two input of its op.
    let full = captured(dir.path(), "full", &faulty, 3, &[]);
    let (_, report) = analyzer_json(&["overflow", path_str(&full)]);
    assert!(report["origins"][0]["spread_to"].as_u64().is_some_and(|n| n > 0), "{}", report["origins"][0]);
    let (_, table, _) = analyzer(&["overflow", path_str(&full)]);
    assert!(
        table.contains("loss scale by step (input of model/loss/scale/Mul): 0:1024 1:1024 2:512"),
        "{table}"
    );

    // The benchmark dumps outputs only: the loss times the scale is not a loss scale.
    let bench = dir.path().join("bench");
    sim_bench(&model_file(dir.path(), "bench.json", &faulty), 3, &bench);
    let (_, report) = analyzer_json(&["overflow", path_str(&bench)]);
    assert_eq!(report["loss_scale"].as_array().map(Vec::len), Some(0), "{}", report["loss_scale"]);

    // Two ranks: a labelled history per rank.
    let ranks = captured(dir.path(), "ranks", "{}", 2, &[]);
    let (sim_train, lib) = (sim_train_bin(), runtime_lib());
    let two = dir.path().join("two");
    let model = model_file(dir.path(), "two.json", "{}");
    let collector = collector_lib();
    let mut args = vec!["record", "-o", path_str(&two), "--collector", path_str(&collector), "--"];
    args.extend([path_str(&sim_train), "--model", path_str(&model), "--lib", path_str(&lib), "--steps", "2"]);
    args.extend(["--ranks", "2"]);
    let (code, stdout, stderr) = analyzer(&args);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let (_, table, _) = analyzer(&["overflow", path_str(&two)]);
    for rank in ["rank 0", "rank 1"] {
        assert!(
            table.contains(&format!(
                "loss scale by step, {rank} (input of model/loss/scale/Mul): 0:1024 1:1024"
            )),
            "{table}"
        );
    }
    let (_, single, _) = analyzer(&["overflow", path_str(&ranks)]);
    assert!(!single.contains("rank 0 ("), "one rank needs no label: {single}");
}

#[test]
fn selections_that_match_nothing_say_what_there_is() {
    let dir = scratch();
    let run = captured(dir.path(), "npu", FUSED, 3, &["--mode", "tensor"]);
    let bench = dir.path().join("bench");
    sim_bench(&model_file(dir.path(), "bench.json", FUSED), 3, &bench);
    let why = usage_error(&["compare", path_str(&run), path_str(&bench), "--step", "5"]);
    assert!(why.contains(&format!("step 5 is not in {}: its steps are 0-2", run.display())), "{why}");
    let why = usage_error(&["inspect", path_str(&run), "--op", "layer_0/*"]);
    assert!(why.contains("matches no op") && why.contains("try '*layer_0/*'"), "{why}");
    let why = usage_error(&["overflow", path_str(&run), "--rank", "3"]);
    assert!(why.contains("rank 3 is not in") && why.contains("its ranks are 0"), "{why}");
    // The header counts the selection, out of the whole run.
    let (code, stdout, _) = analyzer(&["inspect", path_str(&run), "--step", "1", "--op", "*/Softmax"]);
    assert_eq!(code, 0);
    let header = stdout.lines().next().unwrap_or_default();
    assert!(header.contains(": 2 of ") && header.contains("selected by --step/--rank/--op"), "{header}");
}

/// A target recorded over 3 steps against a benchmark of one: only step 0 has counterparts. The PASS is
/// about that step, so a WARNING leads, naming the steps the benchmark lacks and the `--step` selection
/// that compares the steps both hold; with it, no warning.
#[test]
fn compare_warns_when_the_benchmark_lacks_steps_of_the_target() {
    let dir = scratch();
    let run = captured(dir.path(), "npu", "{}", 3, &["--mode", "tensor"]);
    let bench = dir.path().join("bench");
    sim_bench(&model_file(dir.path(), "bench.json", "{}"), 1, &bench);
    let (run, bench) = (path_str(&run), path_str(&bench));
    let (code, stdout, _) = analyzer(&["compare", run, bench]);
    assert_eq!(code, 0, "{stdout}");
    let warning =
        "WARNING: the target's steps 1, 2 have no counterpart on the other side: its tensors are not \
                   compared (`--step 0` compares the steps both hold)";
    let (at, pass) = (stdout.find(warning), stdout.find("PASS: every compared tensor passes"));
    assert!(at.is_some() && pass.is_some() && at < pass, "the warning leads the PASS:\n{stdout}");
    let (_, report) = analyzer_json(&["compare", run, bench]);
    assert!(report["warnings"].to_string().contains("`--step 0` compares the steps both hold"), "{report}");
    let (code, report) = analyzer_json(&["compare", run, bench, "--step", "0"]);
    assert_eq!(code, 0);
    assert_eq!(report["warnings"].as_array().map(Vec::len), Some(0), "{}", report["warnings"]);
}
