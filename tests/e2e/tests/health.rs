//! Training health (issue #15): `analyzer watch` and `analyzer check` on captures of the simulated
//! training. Every injected fault is found by the condition or checklist item that names it; clean runs of
//! the tiny, small and medium presets raise nothing; what statistics alone cannot decide comes out as
//! "can't tell".
//!
//! Runs are recorded once per test binary (each under a name, shared by the tests that need it) with the
//! collector, in `target/<profile>/e2e-health/`, with a fake CANN install and Python site-packages so the
//! manifest has versions to compare. Cost on 2 cores: ~25 captures of a few tiny steps, 3 small steps and 2
//! medium steps (the medium capture is most of it).

mod common;
use common::*;
use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

/// The directory every run of this binary goes into, emptied once per process. A second process of this
/// binary on the same target directory waits for the first to exit (a lock held until then): it would
/// empty the directory under the first one's runs (two at once, 5 runs in 6 failed: `record` refused a run
/// directory the other process had filled, a check read the other's run).
fn base() -> &'static Path {
    static BASE: OnceLock<PathBuf> = OnceLock::new();
    static HELD_UNTIL_EXIT: OnceLock<std::fs::File> = OnceLock::new();
    BASE.get_or_init(|| {
        let lock = target_dir().join("e2e-health.lock");
        let file = std::fs::File::create(&lock)
            .unwrap_or_else(|e| panic!("cannot create the lock file {}: {e}", lock.display()));
        file.lock().unwrap_or_else(|e| panic!("cannot lock {}: {e}", lock.display()));
        HELD_UNTIL_EXIT.get_or_init(|| file);
        let dir = target_dir().join("e2e-health");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create the runs directory");
        // A CANN toolkit and a Python site-packages, as the collector finds them on a real host.
        std::fs::create_dir_all(dir.join("cann/runtime")).unwrap();
        std::fs::write(dir.join("cann/runtime/version.info"), "Version=8.0.RC2\n").unwrap();
        for (sp, torch) in [("site", "2.1.0"), ("site-newer", "2.2.0")] {
            let info = dir.join(sp).join(format!("torch-{torch}.dist-info"));
            std::fs::create_dir_all(&info).unwrap();
            std::fs::write(info.join("METADATA"), format!("Name: torch\nVersion: {torch}\n")).unwrap();
        }
        dir
    })
}

/// How one run is recorded.
#[derive(Clone, Copy)]
struct Spec<'a> {
    model: &'a str,
    steps: u64,
    /// `analyzer record` options (`--histogram`, `--mode tensor`).
    record: &'a [&'a str],
    /// Whether the job turns deterministic computation on (`sim-train --deterministic`).
    deterministic: bool,
    /// The site-packages directory under the base (`site`: torch 2.1.0).
    site: &'a str,
    /// More `sim-train` options.
    train: &'a [&'a str],
    /// More environment of the job (`SIM_RUN_SEED`: run-to-run variation no capture records).
    env: &'a [(&'a str, &'a str)],
}

const TINY: Spec<'static> =
    Spec { model: "{}", steps: 3, record: &[], deterministic: true, site: "site", train: &[], env: &[] };

/// The run recorded under `name` (recorded on first use; later calls wait for it and share it).
fn run(name: &str, spec: Spec<'_>) -> PathBuf {
    static RUNS: OnceLock<Mutex<HashMap<String, Arc<OnceLock<PathBuf>>>>> = OnceLock::new();
    let cell =
        RUNS.get_or_init(Default::default).lock().unwrap().entry(name.to_string()).or_default().clone();
    cell.get_or_init(|| record(name, spec)).clone()
}

fn record(name: &str, spec: Spec<'_>) -> PathBuf {
    let dir = base();
    let model = model_file(dir, &format!("{name}.json"), spec.model);
    let out = dir.join(name);
    let steps = spec.steps.to_string();
    let (collector, lib, sim) = (collector_lib(), runtime_lib(), sim_train_bin());
    let mut args: Vec<&str> = vec!["record", "-o", path_str(&out), "--collector", path_str(&collector)];
    args.extend(spec.record);
    args.extend([
        "--",
        path_str(&sim),
        "--model",
        path_str(&model),
        "--steps",
        &steps,
        "--lib",
        path_str(&lib),
    ]);
    if spec.deterministic {
        args.push("--deterministic");
    }
    args.extend(spec.train);
    let result = std::process::Command::new(analyzer_bin())
        .args(&args)
        .env("ASCEND_TOOLKIT_HOME", dir.join("cann"))
        .env("PYTHONPATH", dir.join(spec.site))
        .envs(spec.env.iter().copied())
        .output()
        .expect("run analyzer record");
    assert!(
        result.status.success(),
        "record {name} failed: {}{}",
        String::from_utf8_lossy(&result.stdout),
        String::from_utf8_lossy(&result.stderr)
    );
    out
}

/// `analyzer watch RUN [extra] --format json`: (exit code, report).
fn watch(run: &Path, extra: &[&str]) -> (i32, Value) {
    let mut args = vec!["watch", path_str(run)];
    args.extend(extra);
    analyzer_json(&args)
}

/// `analyzer check RUN [RUN2] --format json`: (exit code, item name -> item).
fn check(runs: &[&Path]) -> (i32, HashMap<String, Value>) {
    let mut args = vec!["check"];
    args.extend(runs.iter().map(|r| path_str(r)));
    let (code, v) = analyzer_json(&args);
    let items = v["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|i| (i["name"].as_str().unwrap().to_string(), i.clone()));
    (code, items.collect())
}

fn hits<'a>(report: &'a Value, condition: &str) -> Vec<&'a Value> {
    report["findings"].as_array().unwrap().iter().filter(|f| f["condition"] == condition).collect()
}

fn hit_conditions(report: &Value) -> Vec<String> {
    let mut names: Vec<String> = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["condition"].as_str().unwrap().to_string())
        .collect();
    names.dedup();
    names
}

fn cant_tell<'a>(report: &'a Value, condition: &str) -> Option<&'a Value> {
    report["cant_tell"].as_array().unwrap().iter().find(|g| g["condition"] == condition)
}

#[test]
fn clean_runs_raise_nothing_at_every_size() {
    let runs = [
        run("clean", Spec { steps: 17, record: &["--histogram"], ..TINY }),
        run("small", Spec { model: r#"{"preset": "small"}"#, ..TINY }),
        run("medium", Spec { model: r#"{"preset": "medium"}"#, steps: 2, ..TINY }),
        run("tanh", Spec { model: r#"{"activation": "tanh"}"#, record: &["--histogram"], ..TINY }),
        run("sigmoid", Spec { model: r#"{"activation": "sigmoid"}"#, record: &["--histogram"], ..TINY }),
        run("relu", Spec { model: r#"{"activation": "relu"}"#, ..TINY }),
        run("tensors", Spec { steps: 5, record: &["--mode", "tensor"], ..TINY }),
    ];
    for r in &runs {
        let (code, report) = watch(r, &[]);
        assert_eq!((code, hit_conditions(&report)), (0, vec![]), "{}: {:#}", r.display(), report["findings"]);
        assert!(
            report["labels"]["updates"].as_u64() > Some(20),
            "{}: weights found through the optimizer",
            r.display()
        );
        let loss = report["loss"].as_array().unwrap();
        assert!(!loss.is_empty() && loss.iter().all(|l| l["value"].as_f64().is_some_and(|v| v > 0.5)));
        let (code, items) = check(&[r]);
        assert_eq!(code, 0, "{}: {items:#?}", r.display());
        assert!(items.values().all(|i| i["status"] != "fail"));
        assert_eq!(items["determinism"]["status"], "pass", "the job set deterministic computation");
        assert_eq!(items["loss_scale"]["status"], "pass");
    }
    // The histogram decides the clean tanh's range exactly; the tensors decide every update ratio.
    let (_, tanh) = watch(&runs[3], &[]);
    assert!(cant_tell(&tanh, "tanh_saturated").is_none(), "{:#}", tanh["cant_tell"]);
    let (_, tensors) = watch(&runs[6], &[]);
    assert!(cant_tell(&tensors, "weight_change_too_large").is_none(), "{:#}", tensors["cant_tell"]);
    let decided = |r: &Value, c: &str| {
        r["conditions"].as_array().unwrap().iter().find(|x| x["name"] == c).unwrap()["decided"]
            .as_u64()
            .unwrap()
    };
    assert!(decided(&tensors, "weight_change_too_large") >= 80);
}

#[test]
fn each_fault_is_found_by_its_condition() {
    // (run, model, record options, the condition, the measure it names)
    let faults: [(&str, &str, &[&str], &str, &str); 8] = [
        ("lr0", r#"{"faults": {"lr_scale": 0}}"#, &[], "weight_not_changed", "change"),
        ("lr1000", r#"{"faults": {"lr_scale": 1000}}"#, &[], "weight_change_too_large", "update_ratio"),
        ("init_large", r#"{"faults": {"init_scale": 10}}"#, &[], "weight_initialization", "abs_mean"),
        ("init_small", r#"{"faults": {"init_scale": 1e-6}}"#, &[], "weight_initialization", "abs_mean"),
        (
            "tanh_sat",
            r#"{"activation": "tanh", "faults": {"saturate_activation": true}}"#,
            &["--histogram"],
            "tanh_saturated",
            "range_percentage",
        ),
        (
            "sigmoid_sat",
            r#"{"activation": "sigmoid", "faults": {"saturate_activation": true}}"#,
            &["--histogram"],
            "sigmoid_saturated",
            "range_percentage",
        ),
        (
            "dead_relu",
            r#"{"activation": "relu", "faults": {"saturate_activation": true}}"#,
            &[],
            "dead_relu",
            "range_percentage",
        ),
        ("frozen", r#"{"faults": {"frozen": "model/layer_1/"}}"#, &[], "weight_not_changed", "change"),
    ];
    for (name, model, record, condition, measure) in faults {
        let r = run(name, Spec { model, record, ..TINY });
        let (code, report) = watch(&r, &[]);
        assert_eq!(code, 1, "{name}");
        let found = hits(&report, condition);
        assert!(!found.is_empty(), "{name}: {condition} did not hit: {:#}", report["findings"]);
        let f = found[0];
        assert_eq!(f["measure"], measure, "{name}: {f:#}");
        assert!(f["step"].is_u64() && f["op"].is_string() && f["tensor"].is_string(), "{name}: {f:#}");
        match name {
            "lr0" => {
                assert_eq!(f["evidence"], "content_hash");
                assert_eq!(found.len() as u64, report["labels"]["updates"].as_u64().unwrap(), "every update");
            }
            "frozen" => {
                // Exactly the frozen layer's parameters, every step.
                assert!(found.iter().all(|f| f["param"].as_str().unwrap().starts_with("model/layer_1/")));
                assert_eq!(found.len(), 10 * 3, "10 parameters x 3 steps");
            }
            "init_large" => assert!(f["threshold"].as_str().unwrap().starts_with("abs_mean_gt")),
            "init_small" => assert!(f["threshold"].as_str().unwrap().starts_with("abs_mean_lt")),
            "tanh_sat" | "sigmoid_sat" => assert_eq!(f["evidence"], "histogram"),
            "dead_relu" => {
                assert_eq!(f["evidence"], "statistics", "zeros decide a dead ReLU");
                assert!(f["value"]["at_least"].as_f64().unwrap() > 99.9);
            }
            "lr1000" => assert!(f["value"]["at_least"].as_f64().unwrap() > 1.0),
            _ => {}
        }
        // The table names the same.
        let (_, text, _) = analyzer(&["watch", path_str(&r)]);
        assert!(text.contains(condition) && text.contains(f["tensor"].as_str().unwrap()), "{text}");
    }
}

/// Edits one call's record in `dir/dump.json` as sim-train writes it (a line per call), keeping the calls
/// in their order: msprobe's order is the order the calls were made.
fn edit_call(dir: &Path, call: &str, edit: impl FnOnce(&mut Value)) {
    let path = dir.join("dump.json");
    let mut lines: Vec<String> = std::fs::read_to_string(&path).unwrap().lines().map(String::from).collect();
    let key = format!("\"{call}\": ");
    let at = lines.iter().position(|l| l.trim_start().starts_with(&key));
    let line = &mut lines[at.unwrap_or_else(|| panic!("{call} is not in {}", path.display()))];
    let (indent, rest) = line.split_at(line.len() - line.trim_start().len());
    let rest = &rest[key.len()..];
    let comma = if rest.ends_with(',') { "," } else { "" };
    let mut entry: Value = serde_json::from_str(rest.trim_end_matches(',')).unwrap();
    edit(&mut entry);
    *line = format!("{indent}{key}{entry}{comma}");
    std::fs::write(&path, lines.join("\n")).unwrap();
}

#[test]
fn the_loss_of_an_msprobe_dump_is_watched_and_its_spike_found() {
    // msprobe names PyTorch's loss `Functional.cross_entropy.0.forward`: the report plots it, and watch's
    // loss conditions read the same op (they used to say "no op looks like the loss" and miss the spike).
    let dir = scratch();
    let model = model_file(dir.path(), "m.json", "{}");
    let dump = dir.path().join("gpu_dump");
    sim_bench_as(&model, 3, &dump, "msprobe");
    // Step 2's loss 100 times its value: in dump.json's statistics and in the tensor's .npy (fp32, last).
    let rank = dump.join("step2/rank0");
    edit_call(&rank, "Functional.cross_entropy.0.forward", |call| {
        let loss = &mut call["output"][0];
        for key in ["Max", "Min", "Mean", "Norm"] {
            loss[key] = (loss[key].as_f64().unwrap() * 100.0).into();
        }
        let npy = rank.join("dump_tensor_data").join(loss["data_name"].as_str().unwrap());
        let mut bytes = std::fs::read(&npy).unwrap();
        let at = bytes.len() - 4;
        let value = f32::from_le_bytes(bytes[at..].try_into().unwrap()) * 100.0;
        bytes[at..].copy_from_slice(&value.to_le_bytes());
        std::fs::write(&npy, bytes).unwrap();
    });

    let (code, report) = watch(&dump, &[]);
    assert_eq!(code, 1, "the spike is a finding: {report:#}");
    let loss = report["loss"].as_array().unwrap();
    assert_eq!(loss.len(), 3, "a loss per step: {report:#}");
    assert!(loss.iter().all(|p| p["op"] == "Functional.cross_entropy.0.forward"), "{loss:?}");
    let spike = hits(&report, "loss_too_large");
    assert_eq!(spike.len(), 1, "{:#}", report["findings"]);
    assert_eq!(spike[0]["step"], 2);
    assert!(cant_tell(&report, "loss_overflow").is_none(), "{:#}", report["cant_tell"]);
}

#[test]
fn zero_gradients_in_an_msprobe_dump_are_found_from_its_extremes() {
    // msprobe records Max/Min/Mean/Norm, no zero count: a gradient whose max and min are 0 is all zeros all
    // the same (it used to be "can't tell: the statistics do not count zeros").
    let dir = scratch();
    let model = model_file(dir.path(), "m.json", "{}");
    let dump = dir.path().join("gpu_dump");
    sim_bench_as(&model, 2, &dump, "msprobe");
    // Step 1: every gradient a linear layer's backward returns is zero, in dump.json and in the .npy files.
    let rank = dump.join("step1/rank0");
    let call = "Functional.linear.3.backward";
    edit_call(&rank, call, |entry| {
        let outputs = entry["output"].as_array_mut().expect("the call's outputs");
        for out in outputs.iter_mut().filter(|o| o["Max"].is_number()) {
            for key in ["Max", "Min", "Mean", "Norm"] {
                out[key] = 0.0.into();
            }
            let npy = rank.join("dump_tensor_data").join(out["data_name"].as_str().unwrap());
            let mut bytes = std::fs::read(&npy).unwrap();
            let data = 10 + u16::from_le_bytes([bytes[8], bytes[9]]) as usize; // .npy version 1 header
            bytes[data..].fill(0);
            std::fs::write(&npy, bytes).unwrap();
        }
    });

    let (code, report) = watch(&dump, &[]);
    assert_eq!(code, 1, "zero gradients are a finding: {report:#}");
    let zeros = hits(&report, "tensor_all_zero");
    assert!(!zeros.is_empty(), "{:#}", report["cant_tell"]);
    for hit in &zeros {
        assert_eq!(
            (&hit["step"], &hit["role"], &hit["op"]),
            (&Value::from(1), &Value::from("gradient"), &Value::from(call))
        );
        assert_eq!(hit["evidence"], "statistics");
    }
}

#[test]
fn the_loss_of_an_eager_run_is_the_one_its_scaler_multiplies() {
    // Eager kernels are named by type (Mul_4): no op is named like a loss, and the report plots the
    // one-element input the loss scaler's Mul multiplies by a power of two. watch's loss conditions read the
    // same (they said "no op looks like the loss" and left the NaN loss of the overflowing step to others).
    let json = r#"{"faults": {"overflow": {"op": "model/layer_0/mlp/fc1/MatMul", "step": 2}}}"#;
    let r = run("eager_overflow", Spec { model: json, steps: 4, train: &["--eager"], ..TINY });
    let (code, report) = watch(&r, &[]);
    assert_eq!(code, 1, "{report:#}");
    let loss = report["loss"].as_array().unwrap();
    assert_eq!(loss.len(), 4, "a loss per step: {report:#}");
    assert!(loss.iter().all(|p| p["op"].as_str().unwrap().starts_with("Mul_")), "{loss:?}");
    assert!(loss[2]["value"].is_null() && loss[3]["value"].is_f64(), "step 2's loss is NaN: {loss:?}");
    let nan = hits(&report, "loss_overflow");
    assert_eq!(nan.len(), 1, "{:#}", report["findings"]);
    assert_eq!(nan[0]["step"], 2);
    assert!(cant_tell(&report, "loss_too_large").is_none(), "{:#}", report["cant_tell"]);
    // The same from CANN's own single-op dump tree (no statistics stored: the loss's one value is read).
    let dir = scratch();
    let model = model_file(dir.path(), "m.json", json);
    let config = dump_config(dir.path(), "acl.json", &dir.path().join("dump"), "");
    let out = std::process::Command::new(sim_train_bin())
        .args(["--eager", "--steps", "4", "--model", path_str(&model), "--acl-config", path_str(&config)])
        .args(["--lib", path_str(&runtime_lib())])
        .output()
        .expect("run sim-train");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (code, report) = watch(&dir.path().join("dump"), &[]);
    assert_eq!(code, 1, "{report:#}");
    let nan = hits(&report, "loss_overflow");
    assert_eq!(nan.len(), 1, "{:#}", report["cant_tell"]);
    assert_eq!(nan[0]["step"], 2);
}

#[test]
fn statistics_alone_say_cant_tell_and_name_what_would_decide() {
    // A saturated tanh without a histogram: fp16's +-1 and 0.99951 share a magnitude bucket of the
    // statistics' view; only a histogram or the values tell them apart.
    let r = run(
        "tanh_sat_stats",
        Spec { model: r#"{"activation": "tanh", "faults": {"saturate_activation": true}}"#, ..TINY },
    );
    let (_, report) = watch(&r, &[]);
    assert!(hits(&report, "tanh_saturated").is_empty());
    let g = cant_tell(&report, "tanh_saturated").expect("can't tell");
    assert!(g["would_decide"].as_str().unwrap().contains("--histogram"), "{g:#}");
    assert_eq!(g["count"], 3 * 2, "2 layers x 3 steps");
    // Tensors kept but not read: the update ratios are bounded only.
    let tensors = run("tensors", Spec { steps: 5, record: &["--mode", "tensor"], ..TINY });
    let (_, report) = watch(&tensors, &["--no-tensors"]);
    let g = cant_tell(&report, "weight_change_too_large").expect("can't tell");
    assert!(g["examples"][0]["bounds"]["at_most"].as_f64().unwrap() > 1.0, "{g:#}");
    // Device statistics count no zeros.
    let device = run("device_stats", Spec { record: &["--mode", "device-stats"], ..TINY });
    let (code, report) = watch(&device, &[]);
    let g = cant_tell(&report, "tensor_all_zero").expect("can't tell");
    assert!(g["reason"].as_str().unwrap().contains("zeros"), "{g:#}");
    // Nor do they hold the sum of |x| or, by CANN's default, the L2 norm: mean |x| is bounded by |mean| and
    // the extremes, never taken for |mean|, and this clean run hits nothing (it once hit
    // weight_change_too_large with an update ratio of 213,012).
    assert_eq!((code, hit_conditions(&report)), (0, Vec::<String>::new()), "{:#}", report["findings"]);
    assert!(cant_tell(&report, "weight_change_too_large").is_some(), "{:#}", report["cant_tell"]);
}

#[test]
fn the_checklist_compares_two_runs_item_by_item() {
    let clean = run("clean", Spec { steps: 17, record: &["--histogram"], ..TINY });
    let again = run("clean_again", Spec { steps: 17, record: &["--histogram"], ..TINY });
    let (code, items) = check(&[&clean, &again]);
    assert_eq!(code, 0, "{items:#?}");
    assert!(items.values().all(|i| i["status"] == "pass"), "{items:#?}");

    // The same batches in another order.
    let shuffled =
        run("shuffled", Spec { model: r#"{"faults": {"shuffle_data": true}}"#, steps: 17, ..TINY });
    let (code, items) = check(&[&clean, &shuffled]);
    assert_eq!((code, &items["data"]["status"]), (1, &Value::from("fail")));
    assert!(items["data"]["reason"].as_str().unwrap().contains("shuffle"), "{:#}", items["data"]);
    assert_eq!(items["initial_weights"]["status"], "pass", "same weights, other data");

    // A changed hyperparameter in the model file the command line names, and another torch.
    let lr = run("lr0", Spec { model: r#"{"faults": {"lr_scale": 0}}"#, ..TINY });
    let (_, items) = check(&[&clean, &lr]);
    let config = &items["configuration"];
    assert_eq!(config["status"], "fail");
    assert!(config["details"].to_string().contains("faults.lr_scale: (absent) vs 0"), "{config:#}");
    let newer = run("newer_torch", Spec { site: "site-newer", ..TINY });
    let (_, items) = check(&[&clean, &newer]);
    assert!(items["configuration"]["details"].to_string().contains("version of torch: 2.1.0 vs 2.2.0"));
    let (_, items) = check(&[&clean]);
    let details = items["configuration"]["details"].to_string();
    assert!(details.contains("cann 8.0.RC2") && details.contains("torch 2.1.0"), "{details}");
}

#[test]
fn a_missing_determinism_setting_fails_the_checklist() {
    // Two runs of one configuration, varying only as real runs do (a seed no capture records).
    let model = r#"{"faults": {"missing_determinism": true}}"#;
    let (seed1, seed2) = (&[("SIM_RUN_SEED", "1")][..], &[("SIM_RUN_SEED", "2")][..]);
    let a = run("nondet_1", Spec { model, deterministic: false, env: seed1, ..TINY });
    let b = run("nondet_2", Spec { model, deterministic: false, env: seed2, ..TINY });
    let (code, items) = check(&[&a, &b]);
    assert_eq!(code, 1);
    let d = &items["determinism"];
    assert_eq!(d["status"], "fail");
    assert!(d["reason"].as_str().unwrap().contains("GatherV2_grad/UnsortedSegmentSum"), "{d:#}");
    let (_, items) = check(&[&a]);
    assert_eq!(
        items["determinism"]["status"], "cant_tell",
        "the setting was never seen: {:#}",
        items["determinism"]
    );
    // With the setting on, the same fault reproduces.
    let c = run("det_1", Spec { model, env: seed1, ..TINY });
    let e = run("det_2", Spec { model, env: seed2, ..TINY });
    let (_, items) = check(&[&c, &e]);
    assert_eq!(items["determinism"]["status"], "pass", "{:#}", items["determinism"]);
    // One run with the setting and one without: the reason names both values in words.
    let (_, items) = check(&[&c, &a]);
    let reason = items["determinism"]["reason"].as_str().unwrap();
    assert!(reason.contains("ACL_OPT_DETERMINISTIC 1 vs unset") && !reason.contains("Some("), "{reason}");
    // Their outputs differ from identical inputs, but the setting changed too: no blame on nondeterminism.
    assert!(
        reason.contains("gave different outputs from identical inputs, but the runs are set up differently")
            && reason.contains("cannot tell nondeterminism from the setting change"),
        "{reason}"
    );
    // Set through a function looked up in the runtime's handle (as torch_npu does), the collector still
    // sees it.
    let h = run("det_handle", Spec { model, env: seed1, train: &["--resolve", "handle"], ..TINY });
    let (_, items) = check(&[&h]);
    assert_eq!(items["determinism"]["status"], "pass", "{:#}", items["determinism"]);
    // The runtime's stronger levels (2 strong consistency, 3 batch consistency) are deterministic too.
    let s = run("det_strong", Spec { model, env: seed1, train: &["--deterministic-level", "2"], ..TINY });
    let (_, items) = check(&[&s]);
    let d = &items["determinism"];
    assert_eq!(d["status"], "pass", "{d:#}");
    assert!(
        d.to_string().contains("on, with strong consistency (the job set ACL_OPT_DETERMINISTIC = 2)"),
        "{d:#}"
    );
}

#[test]
fn a_loss_scale_stuck_at_its_floor_fails_and_the_overflow_shows() {
    // Weights 30x too large overflow fp16 at every step: the scale halves from 1024 to its floor 1.
    let r = run("collapse", Spec { model: r#"{"faults": {"init_scale": 30}}"#, steps: 14, ..TINY });
    let (code, items) = check(&[&r]);
    assert_eq!(code, 1);
    let ls = &items["loss_scale"];
    assert_eq!(ls["status"], "fail");
    assert!(
        ls["reason"].as_str().unwrap().contains("collapsed")
            || ls["reason"].as_str().unwrap().contains("floor")
    );
    let (code, report) = watch(&r, &[]);
    assert_eq!(code, 1);
    assert!(!hits(&report, "tensor_overflow").is_empty());
    assert_eq!(report["labels"]["updates"], 0, "no step updated");
    let (_, text, _) = analyzer(&["overflow", path_str(&r)]);
    assert!(text.contains("overflowed in a row: the loss scale is collapsing"), "{text}");
}

#[test]
fn an_overflow_that_persists_unscaled_is_no_collapsing_loss_scale() {
    // bf16 trains without a loss scale: a weight whose exponent bit flipped overflows at every step after
    // it, which overflow calls out without claiming a loss scale that is not there.
    let json = r#"{"precision": "bf16", "faults": {"weight_bitflip":
        {"param": "model/layer_1/mlp/fc1/weight", "step": 2, "bit": 30}}}"#;
    let r = run("bf16_bitflip", Spec { model: json, steps: 5, ..TINY });
    let (code, text, _) = analyzer(&["overflow", path_str(&r)]);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("steps 2-4 overflowed in a row: no loss scale is dumped"), "{text}");
    assert!(!text.contains("collapsing"), "{text}");
}

#[test]
fn reports_options_and_exit_statuses() {
    let r = run("lr0", Spec { model: r#"{"faults": {"lr_scale": 0}}"#, ..TINY });
    let (code, out, _) = analyzer(&["watch", path_str(&r), "--format", "csv"]);
    assert_eq!(code, 1);
    let header = out.lines().next().unwrap();
    assert!(header.starts_with("condition,step,rank,op,op_type,tensor,role,param,measure"), "{header}");
    assert!(out.lines().count() > 20);
    let (code, out, _) = analyzer(&["watch", "--list-conditions", "--set", "weight_too_large.abs_mean_gt=5"]);
    assert_eq!(code, 0);
    assert!(out.contains("on  weight_too_large") && out.contains("abs_mean_gt=5"), "{out}");
    // Turning the hitting condition off leaves a clean report.
    let (code, report) = watch(&r, &["--disable", "weight_not_changed"]);
    assert_eq!(code, 0, "{:#}", report["findings"]);
    let config = base().join("watch.json");
    std::fs::write(&config, r#"{"weight_not_changed": {"enabled": false}}"#).unwrap();
    assert_eq!(watch(&r, &["--config", path_str(&config)]).0, 0);
    for bad in [&["--set", "no_such.x=1"][..], &["--set", "dead_relu.range_start"], &["--enable", "nope"]] {
        let mut args = vec!["watch", path_str(&r)];
        args.extend(bad);
        let (code, _, err) = analyzer(&args);
        assert_eq!(code, 2, "{bad:?}: {err}");
    }
    // A capture that lost data: the checklist still answers, and the exit status is 2.
    let lossy = base().join("lossy");
    copy_dir(&r, &lossy);
    let manifest = lossy.join("manifest.json");
    let mut m: Value = serde_json::from_str(&std::fs::read_to_string(&manifest).unwrap()).unwrap();
    m["counts"]["drops"] = Value::from(3);
    std::fs::write(&manifest, m.to_string()).unwrap();
    let (code, v) = analyzer_json(&["check", path_str(&lossy)]);
    assert_eq!(code, 2);
    let problem = &v["input_problems"][0];
    assert_eq!(problem["kind"], "incomplete", "{v:#}");
    assert!(problem["message"].as_str().unwrap().contains("dropped or lost 3"), "{v:#}");
    let passed: Vec<&Value> =
        v["items"].as_array().unwrap().iter().filter(|i| i["status"] == "pass").collect();
    assert!(passed.is_empty(), "no item passes on an incomplete capture: {passed:#?}");
    let (code, out, _) = analyzer(&["check", path_str(&lossy)]);
    assert_eq!(code, 2);
    assert!(out.starts_with("INCOMPLETE INPUT: "), "the problem leads the table: {out}");
    let (code, out, _) = analyzer(&["watch", path_str(&lossy), "--disable", "weight_not_changed"]);
    assert_eq!(code, 2, "{out}");
    assert!(out.starts_with("INCOMPLETE INPUT: ") && out.contains("NO VERDICT"), "{out}");
    // --allow-incomplete: the answer's own exit status, the warning still leads.
    let (code, out, _) =
        analyzer(&["watch", path_str(&lossy), "--disable", "weight_not_changed", "--allow-incomplete"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.starts_with("INCOMPLETE INPUT: "), "{out}");
}
