//! Steps of an eager (single-operator) capture: from the framework's hook (`accutrace_step_end`, which
//! `sim-train --eager` calls as the Python hook would), from `ACCUTRACE_STEP_MARKER`, and inferred by the
//! analyzer from the period of the op sequence. A step that an overflow skips runs fewer ops (no optimizer
//! update); all three ways must still agree op for op.

mod common;

use analyzer::diff::{diff, diff_by_windows, DiffOptions};
use analyzer::filter::Filter;
use analyzer::overflow::{overflow, overflow_by_windows};
use analyzer::sources::capture::windows::StepWindows;
use analyzer::sources::capture::CaptureSource;
use common::*;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

/// fp16, two layers; the MLP overflows at step 1, which is skipped.
const MODEL: &str =
    r#"{"n_layers": 2, "faults": {"overflow": {"op": "model/layer_1/mlp/fc2/MatMul", "step": 1}}}"#;
const STEPS: u64 = 4;

/// Records an eager run of STEPS steps into `run` with the collector preloaded; returns sim-train's stdout.
fn record(model: &Path, run: &Path, env: &[(&str, &str)], args: &[&str]) -> String {
    let mut cmd = Command::new(sim_train_bin());
    cmd.arg("--model").arg(model).arg("--steps").arg(STEPS.to_string()).arg("--lib").arg(runtime_lib());
    cmd.arg("--eager").args(args).env("LD_PRELOAD", collector_lib()).env("ACCUTRACE_DIR", run);
    // Two writers and small slots: files are recorded out of execution order.
    cmd.env("ACCUTRACE_WRITERS", "2").env("ACCUTRACE_SLOTS", "4").env("ACCUTRACE_SLOT_SIZE", "8K");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run sim-train");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && stderr.is_empty(), "sim-train failed or the collector logged: {stderr}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Op name -> step, and the capture's warnings, from `analyzer inspect --json`.
fn steps_of(run: &Path) -> (BTreeMap<String, u64>, Vec<String>) {
    let (code, stdout, stderr) = analyzer(&["inspect", path_str(run), "--json"]);
    assert_eq!(code, 0, "{stderr}");
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let ops = v["ops"].as_array().unwrap();
    let steps =
        ops.iter().map(|o| (o["name"].as_str().unwrap().to_string(), o["step"].as_u64().unwrap())).collect();
    let warnings =
        v["warnings"].as_array().unwrap().iter().map(|w| w.as_str().unwrap().to_string()).collect();
    (steps, warnings)
}

#[test]
fn hook_marker_and_inference_give_the_same_steps_with_a_skipped_step() {
    let dir = scratch();
    let model = model_file(dir.path(), "model.json", MODEL);
    let (hook, marker, inferred) =
        (dir.path().join("hook"), dir.path().join("marker"), dir.path().join("inferred"));
    let out = record(&model, &hook, &[], &[]);
    assert!(out.contains("step 1 loss NaN loss_scale 1024 overflow: step skipped"), "{out}");
    let marker_env = [("ACCUTRACE_STEP_MARKER", "^(ApplyAdamD|AmpUpdateScale)$")];
    assert_eq!(record(&model, &marker, &marker_env, &["--no-step-end"]), out);
    assert_eq!(record(&model, &inferred, &[], &["--no-step-end"]), out);

    let (by_hook, hook_warnings) = steps_of(&hook);
    assert!(hook_warnings.is_empty(), "{hook_warnings:?}");
    let mut per_step = [0usize; STEPS as usize];
    for &s in by_hook.values() {
        per_step[s as usize] += 1;
    }
    // The skipped step ran no optimizer update: fewer ops, every other step the same count.
    assert!(per_step[1] < per_step[0], "{per_step:?}");
    assert_eq!((per_step[0], per_step[0]), (per_step[2], per_step[3]), "{per_step:?}");

    let (by_marker, marker_warnings) = steps_of(&marker);
    assert!(marker_warnings.is_empty(), "{marker_warnings:?}");
    assert_eq!(by_marker, by_hook, "marker steps");

    let (by_inference, warnings) = steps_of(&inferred);
    assert_eq!(by_inference, by_hook, "inferred steps");
    assert!(
        warnings.iter().any(|w| w.contains("steps INFERRED") && w.contains(&format!("{STEPS} steps"))),
        "the analyzer says that it inferred: {warnings:?}"
    );
    // Steps the hook told are read a window of steps at a time (#18); counted or inferred ones need the
    // whole stream.
    let windows = StepWindows::census(&hook, 1).unwrap().expect("the hook's steps read by windows");
    assert_eq!(windows.windows().len(), STEPS as usize);
    for whole_only in [&marker, &inferred] {
        assert!(StepWindows::census(whole_only, 1).unwrap().is_none(), "{}", whole_only.display());
    }
}

/// An eager capture whose steps came from the framework's hook, read a window of steps at a time (#18), says
/// what the whole capture says: the overflow of step 1 (a step 0 of ops recorded before the hook's first
/// call, a skipped step), and its diff against a run whose weight flips a bit at step 2. Two writers and
/// small slots record the files out of execution order.
#[test]
fn an_eager_capture_is_read_by_windows_as_the_whole_capture() {
    let dir = scratch();
    let flipped = MODEL.replacen(
        r#""faults": {"#,
        r#""faults": {"weight_bitflip": {"param": "model/layer_1/mlp/fc2/weight", "step": 2, "bit": 12}, "#,
        1,
    );
    let (model, flipped) =
        (model_file(dir.path(), "model.json", MODEL), model_file(dir.path(), "flipped.json", &flipped));
    let (run, other) = (dir.path().join("run"), dir.path().join("flipped"));
    record(&model, &run, &[], &[]);
    record(&flipped, &other, &[], &[]);

    let whole =
        serde_json::to_value(overflow(&CaptureSource::open(&run).unwrap(), &Filter::default(), false));
    let windows = StepWindows::census(&run, 1).unwrap().expect("read by windows");
    let by_windows = overflow_by_windows(&windows, &Filter::default(), false).unwrap();
    assert_eq!(serde_json::to_value(by_windows).unwrap(), whole.unwrap());

    let options = DiffOptions { filter: Filter::default(), progress: false };
    let [a, b] = [&run, &other].map(|r| CaptureSource::open(r).unwrap());
    let whole = serde_json::to_value(diff(&a, &b, &options).unwrap()).unwrap();
    let [mut a, mut b] = [&run, &other].map(|r| StepWindows::census_with_calls(r, 1).unwrap().unwrap());
    assert!(StepWindows::align(&mut a, &mut b, 1));
    let by_windows = serde_json::to_value(diff_by_windows([&a, &b], &options).unwrap()).unwrap();
    assert_eq!(by_windows, whole);
    let first = &whole["first_differences"][0];
    assert_eq!((&first["step"], &first["rank"]), (&2.into(), &0.into()), "{whole:#}");
}

/// An eager capture (kernels, fp16) against the fp32 benchmark as msprobe dumps a PyTorch run (API
/// calls): the alignment names the API whose output first diverges, with the kernel that computes it.
#[test]
fn a_kernel_capture_against_an_api_level_benchmark_names_the_culprits_api() {
    let dir = scratch();
    // Three layers; layer 0's fused MLP kernel is imprecise (the injected culprit).
    let model = model_file(
        dir.path(),
        "model.json",
        r#"{"preset": "small", "n_layers": 3, "fusion": true, "faults": {"imprecise_fused_kernel": true}}"#,
    );
    let healthy = model_file(dir.path(), "healthy.json", r#"{"n_layers": 2}"#);
    for (m, run, bench) in [(&model, "run", "bench"), (&healthy, "healthy-run", "healthy-bench")] {
        let run = dir.path().join(run);
        record(m, &run, &[("ACCUTRACE_MODE", "tensor")], &[]);
        sim_bench_as(m, STEPS, &dir.path().join(bench), "msprobe");
    }
    // The same eager run dumped to disk by the runtime (no collector): single-operator files with no step.
    let dump = dir.path().join("dump");
    let config = dump_config(dir.path(), "acl.json", &dump, "");
    let out = Command::new(sim_train_bin())
        .args(["--eager", "--steps", &STEPS.to_string(), "--model", path_str(&model), "--lib"])
        .arg(runtime_lib())
        .arg("--acl-config")
        .arg(&config)
        .output()
        .expect("run sim-train");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (code, from_capture) =
        analyzer_json(&["compare", path_str(&dir.path().join("run")), path_str(&dir.path().join("bench"))]);
    let (dump_code, from_dump) =
        analyzer_json(&["compare", path_str(&dump), path_str(&dir.path().join("bench"))]);
    // The dump's steps are inferred (and said); its answer is the capture's.
    assert!(from_dump["warnings"].to_string().contains("steps INFERRED"), "{}", from_dump["warnings"]);
    assert_eq!(dump_code, code);
    for key in ["first_diverging_api", "culprit", "api_calls", "unmatched_target", "unmatched_bench"] {
        assert_eq!(from_dump[key], from_capture[key], "{key}");
    }
    // The capture is the runtime's own dump, bit for bit; diff says which run's steps were inferred.
    let (diff_code, d) = analyzer_json(&["diff", path_str(&dir.path().join("run")), path_str(&dump)]);
    assert_eq!((diff_code, d["verdict"].as_str()), (0, Some("identical")), "{d}");
    assert!(d["warnings"].to_string().contains("run2: ") && d["warnings"].to_string().contains("INFERRED"));
    let v = from_capture;
    assert_eq!(code, 1, "{v}");
    let first = &v["first_diverging_api"];
    assert!(first["api"].as_str().unwrap().starts_with("Functional.gelu.0."), "{first}");
    assert_eq!((first["step"].as_u64(), first["rank"].as_u64()), (Some(0), Some(0)));
    assert_eq!(first["kernels"], serde_json::json!(["FusedMatMulBiasGelu_0"]));
    assert!(first["also_computes"].to_string().contains("Functional.linear."), "{first}");
    assert_eq!(v["culprit"]["name"], "FusedMatMulBiasGelu_0", "{}", v["culprit"]);
    // Every API output found its kernel; what is left over is the optimizer (and the loss-scale update).
    assert_eq!(v["unmatched_bench"].as_array().unwrap().len(), 0, "{}", v["unmatched_bench"]);
    let leftover = v["unmatched_target"].as_array().unwrap();
    assert!(!leftover.is_empty());
    assert!(
        leftover.iter().all(|t| {
            let t = t.as_str().unwrap();
            t.starts_with("ApplyAdamD_") || t.starts_with("AmpUpdateScale_")
        }),
        "{leftover:?}"
    );
    // A linear's kernels (MatMul, BiasAdd) are one call's.
    let calls = v["api_calls"].as_array().unwrap();
    assert!(
        calls.iter().any(|c| c["api"].as_str().unwrap().starts_with("Functional.linear.")
            && c["kernels"].as_array().unwrap().len() == 2),
        "no linear with two kernels"
    );
    // No false culprit: the same model without the fault passes.
    let (code, v) = analyzer_json(&[
        "compare",
        path_str(&dir.path().join("healthy-run")),
        path_str(&dir.path().join("healthy-bench")),
    ]);
    assert_eq!(code, 0, "{}", v["failing_ops"]);
    assert!(v["first_diverging_api"].is_null());

    // The report page (scripts/demo's own: an eager capture against msprobe's dump) leads with the same
    // answer, the API call and its kernels, linked to the failing output as evidence; its terminal lines too.
    let file = dir.path().join("eager.html");
    let (run, bench) = (dir.path().join("run"), dir.path().join("bench"));
    let (code, stdout, stderr) =
        analyzer(&["report", path_str(&run), path_str(&bench), "-o", path_str(&file)]);
    assert_eq!(code, 1, "{stdout}\n{stderr}");
    let html = report_page(&file);
    let verdict =
        html.split("<b>FIRST DIVERGING API</b>").nth(1).unwrap_or_else(|| panic!("no API verdict: {stdout}"));
    let verdict = &verdict[..verdict.find("</p>").unwrap()];
    assert!(verdict.starts_with(" step 0 rank 0: <code>Functional.gelu.0."), "{verdict}");
    assert!(verdict.contains("implemented by <code>FusedMatMulBiasGelu_0</code>"), "{verdict}");
    let evidence = verdict.split("href=\"#").nth(1).and_then(|a| a.split('"').next()).expect("a link");
    let row = html.split(&format!("<tr id=\"{evidence}\">")).nth(1).expect("the linked row");
    assert!(row[..row.find("</tr>").unwrap()].contains("FusedMatMulBiasGelu_0"), "{evidence}");
    let details = &html[html.find("<b>FIRST DIVERGING API</b>").unwrap()..];
    let details = &details[..details.find("</section>").unwrap()];
    assert!(details.contains("the same kernel(s) also compute <code>Functional.linear."), "{details}");
    assert!(details.contains("kernels against ") && details.contains(" API calls: "), "{details}");
    let line =
        stdout.lines().find(|l| l.contains("FIRST DIVERGING API")).unwrap_or_else(|| panic!("{stdout}"));
    assert!(line.trim().starts_with("FIRST DIVERGING API step 0 rank 0: Functional.gelu.0."), "{line}");
    let healthy = dir.path().join("healthy.html");
    let (_, stdout, _) = analyzer(&[
        "report",
        path_str(&dir.path().join("healthy-run")),
        path_str(&dir.path().join("healthy-bench")),
        "-o",
        path_str(&healthy),
    ]);
    assert!(!report_page(&healthy).contains("DIVERGING API"), "{stdout}");
}
