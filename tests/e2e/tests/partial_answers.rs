//! Answers about part of a job, part of a run, or a run compared with itself (the review's B1, B21, B14,
//! B19, B11, B13): `overflow` and `watch` on one node's capture of a job whose other node overflowed, with
//! and without HCCL records; a ring capture that deleted its oldest steps; an eager run's loss scale in
//! `check`; `check` of two runs that never set deterministic computation, and of one run given twice.
//! None of these may read as an all-clear. Recordings are shared by the tests of this file.

mod common;

use common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// Overflow on rank 2 at step 1 of a 4-rank job: the all-reduce carries the NaN to every other rank.
const OVERFLOW_RANK2: &str =
    r#"{"faults": {"overflow": {"op": "model/layer_1/mlp/fc2/MatMul", "step": 1, "rank": 2}}}"#;

/// Records `sim-train --ranks 4 --steps 3` of `model_json` with the collector (and `env`).
fn record_job(dir: &Path, name: &str, model_json: &str, env: &[(&str, &str)]) -> PathBuf {
    record_ranks(dir, name, model_json, 4, 3, env)
}

struct Runs {
    _dir: tempfile::TempDir,
    /// The whole job, HCCL recorded.
    job: PathBuf,
    /// Node 0 of it.
    node: PathBuf,
    /// Node 0 of the same job recorded without HCCL records (`ACCUTRACE_COLLECTIVES=off`).
    node_no_hccl: PathBuf,
}

fn runs() -> &'static Runs {
    static RUNS: OnceLock<Runs> = OnceLock::new();
    RUNS.get_or_init(|| {
        let dir = scratch();
        let p = dir.path();
        let job = record_job(p, "job", OVERFLOW_RANK2, &[]);
        let off = record_job(p, "job_off", OVERFLOW_RANK2, &[("ACCUTRACE_COLLECTIVES", "off")]);
        Runs {
            node: node0(&job, &p.join("node0")),
            node_no_hccl: node0(&off, &p.join("node0_off")),
            job,
            _dir: dir,
        }
    })
}

fn p(path: &Path) -> &str {
    path_str(path)
}

#[test]
fn a_nodes_capture_sees_the_overflow_that_arrived_through_its_collective() {
    let r = runs();
    let (code, json) = analyzer_json(&["overflow", p(&r.node)]);
    assert_eq!(code, 1, "an overflow seen on this node is a finding: {json:#}");
    assert!(json["origins"].as_array().unwrap().is_empty(), "no op of ranks 0-1 produced it: {json:#}");
    let arrivals = json["arrivals"].as_array().unwrap();
    // The gradients' all-reduce (and the all-gather of the losses after it), on both ranks, at step 1.
    let at = |call: &str| -> Vec<(u64, u64)> {
        let of_call = arrivals.iter().filter(|a| a["call"].as_str().unwrap().starts_with(call));
        of_call.map(|a| (a["rank"].as_u64().unwrap(), a["step"].as_u64().unwrap())).collect()
    };
    assert_eq!(at("HcclAllReduce #"), [(0, 1), (1, 1)], "{json:#}");
    assert_eq!(at("Hccl"), at("Hccl").iter().filter(|&&(_, step)| step == 1).copied().collect::<Vec<_>>());
    assert!(arrivals
        .iter()
        .all(|a| a["anomaly"]["nan"].as_u64() > Some(0) && a["inputs"] == "finite inputs"));

    let (code, out, _) = analyzer(&["overflow", p(&r.node)]);
    assert_eq!(code, 1);
    assert!(out.contains("OVERFLOW ARRIVED THROUGH A COLLECTIVE: step 1 rank 0: HcclAllReduce #"), "{out}");
    assert!(out.contains("run `analyzer ranks` over every rank's capture"), "{out}");
    assert!(!out.contains("No op produced"), "{out}");
    let (_, csv, _) = analyzer(&["overflow", p(&r.node), "--format", "csv"]);
    assert!(csv.lines().nth(1).is_some_and(|l| l.contains("arrived through the collective")), "{csv}");

    let (code, watch) = analyzer_json(&["watch", p(&r.node)]);
    assert_eq!(code, 1, "{:#}", watch["findings"]);
    let arrived: Vec<&Value> = watch["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["condition"] == "tensor_overflow" && f["role"] == "collective output")
        .collect();
    let all_reduce: Vec<u64> = arrived
        .iter()
        .filter(|f| f["op"].as_str().unwrap().starts_with("HcclAllReduce #"))
        .map(|f| f["rank"].as_u64().unwrap())
        .collect();
    assert_eq!(all_reduce, [0, 1], "{:#}", watch["findings"]);
    assert!(arrived.iter().all(|f| f["step"] == 1 && f["detail"].as_str().unwrap().contains("another rank")));

    // The whole job: the origin is still rank 2's MatMul, the other ranks' arrivals beside it.
    let (code, whole) = analyzer_json(&["overflow", p(&r.job)]);
    assert_eq!(code, 1);
    let first = &whole["origins"][0];
    assert_eq!(
        (first["rank"].as_u64(), first["op"].as_str()),
        (Some(2), Some("model/layer_1/mlp/fc2/MatMul"))
    );
    let mut ranks: Vec<u64> =
        whole["arrivals"].as_array().unwrap().iter().map(|a| a["rank"].as_u64().unwrap()).collect();
    ranks.dedup();
    assert_eq!(ranks, [0, 1, 3], "{whole:#}");
}

#[test]
fn a_skipped_step_with_no_origin_in_the_data_is_no_all_clear() {
    let r = runs();
    let (code, json) = analyzer_json(&["overflow", p(&r.node_no_hccl)]);
    assert_eq!(code, 1, "{json:#}");
    assert!(
        json["origins"].as_array().unwrap().is_empty() && json["arrivals"].as_array().unwrap().is_empty()
    );
    let evidence: Vec<String> = json["without_origin"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| format!("rank {} {}", w["rank"], w["evidence"].as_str().unwrap()))
        .collect();
    assert!(
        evidence.contains(&"rank 0 step 1 was skipped (no optimizer op ran)".to_string()),
        "{evidence:?}"
    );
    assert!(evidence.iter().any(|e| e.starts_with("rank 1 the loss scale dropped from")), "{evidence:?}");
    let (code, out, _) = analyzer(&["overflow", p(&r.node_no_hccl)]);
    assert_eq!(code, 1);
    assert!(out.contains("OVERFLOW WITH NO ORIGIN IN THIS DATA: rank 0: step 1 was skipped"), "{out}");
    assert!(!out.contains("No op produced"), "{out}");

    let page = r.node_no_hccl.with_extension("html");
    let (_, out, err) = analyzer(&["report", p(&r.node_no_hccl), "-o", p(&page), "--no-progress"]);
    assert!(out.contains("OVERFLOW WITH NO ORIGIN IN THIS DATA rank 0: step 1 was skipped"), "{out}{err}");
    let (code, out, _) = analyzer(&["watch", p(&r.node_no_hccl)]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("OVERFLOW WITH NO ORIGIN IN THIS DATA"), "{out}");
    assert!(!out.contains("No condition hit"), "{out}");
}

/// A weight of rank 2 turned inf before step 1 (the top bit of one element's exponent flipped): no op produced
/// the inf, and the all-reduce carried NaN to every other rank. `overflow` of the whole job said only that
/// rank 0's overflow "arrived through a collective" from "another rank", and nothing of rank 2: an arrival
/// on any rank explained every rank's skipped step.
#[test]
fn a_weight_gone_inf_on_one_rank_is_named_by_the_op_that_read_it() {
    let dir = scratch();
    let bitflip = r#"{"faults": {"weight_bitflip":
        {"param": "model/layer_1/mlp/fc2/weight", "step": 1, "rank": 2, "bit": 30}}}"#;
    let job = record_job(dir.path(), "bitflip", bitflip, &[]);
    let (code, json) = analyzer_json(&["overflow", p(&job)]);
    assert_eq!(code, 1, "{json:#}");
    let rank2: Vec<&str> = json["without_origin"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|w| w["rank"] == 2 && w["step"] == 1)
        .map(|w| w["evidence"].as_str().unwrap())
        .collect();
    let read = "model/layer_1/mlp/fc2/MatMul [MatMulV2] read 1 inf in model/layer_1/mlp/fc2/MatMul.input.1, \
                which no op of step 1 produced";
    assert!(rank2.first().is_some_and(|e| e.starts_with(read)), "{rank2:?}");
    assert!(rank2.contains(&"step 1 was skipped (no optimizer op ran)"), "{rank2:?}");
    let (code, out, _) = analyzer(&["overflow", p(&job)]);
    assert_eq!(code, 1);
    assert!(out.contains(&format!("OVERFLOW WITH NO ORIGIN IN THIS DATA: rank 2: {read}")), "{out}");
}

#[test]
fn watch_labels_each_ranks_series() {
    let (_, out, _) = analyzer(&["watch", p(&runs().node)]);
    for rank in [0, 1] {
        assert!(out.contains(&format!("\nloss by step, rank {rank}: 0:")), "{out}");
        assert!(out.contains(&format!("\ngradient norm by step, rank {rank} (all parameters): 0:")), "{out}");
    }
}

/// `analyzer record` of `sim-train --model <json> --steps <steps>` with extra record and sim-train options.
fn record_one(dir: &Path, name: &str, json: &str, steps: u64, options: &[&str], train: &[&str]) -> PathBuf {
    let model = model_file(dir, &format!("{name}.json"), json);
    let run = dir.join(name);
    let steps = steps.to_string();
    let (collector, sim, lib) = (collector_lib(), sim_train_bin(), runtime_lib());
    let mut args = vec!["record", "-o", p(&run), "--collector", p(&collector)];
    args.extend(options);
    args.extend(["--", p(&sim)]);
    args.extend(train);
    args.extend(["--model", p(&model), "--steps", &steps, "--lib", p(&lib)]);
    let out = Command::new(analyzer_bin())
        .args(&args)
        .env("ACCUTRACE_SEGMENT_SIZE", "64K")
        .output()
        .expect("run analyzer record");
    assert!(out.status.success(), "{name}: {}", String::from_utf8_lossy(&out.stderr));
    run
}

#[test]
fn a_ring_capture_says_which_steps_its_answers_cover() {
    let dir = scratch();
    let overflow_at_1 = r#"{"faults": {"overflow": {"op": "model/layer_0/mlp/fc1/MatMul", "step": 1}}}"#;
    let run = record_one(dir.path(), "ring", overflow_at_1, 8, &["--policy", "ring:256K"], &[]);
    let (_, json) = analyzer_json(&["overflow", p(&run)]);
    let scope = json["scope"].as_array().unwrap();
    assert_eq!(scope.len(), 1, "{json:#}");
    let scope = scope[0].as_str().unwrap();
    assert!(scope.starts_with("rank 0: steps ") && scope.contains("deleted by the ring policy"), "{scope}");
    for command in ["overflow", "watch"] {
        let (_, out, _) = analyzer(&[command, p(&run)]);
        assert!(out.contains(scope), "{command}: {out}");
        assert!(
            !out.contains("from finite inputs.\n") && !out.contains("could be decided.\n"),
            "{command}: {out}"
        );
    }
    let (code, out, _) = analyzer(&["overflow", p(&run)]);
    if code == 0 {
        assert!(out.contains("from finite inputs in the steps the ring policy kept"), "{out}");
    }
    // The report page says it too.
    let page = dir.path().join("ring.html");
    let (_, out, err) = analyzer(&["report", p(&run), "-o", p(&page), "--no-progress"]);
    assert!(out.contains(&format!("SCOPE: {scope}")), "{out}{err}");
}

#[test]
fn an_eager_runs_loss_scale_is_found_by_check_and_overflow() {
    let dir = scratch();
    let run = record_one(dir.path(), "eager", "{}", 3, &[], &["--eager"]);
    let (_, json) = analyzer_json(&["check", p(&run)]);
    let item = json["items"].as_array().unwrap().iter().find(|i| i["name"] == "loss_scale").unwrap().clone();
    assert_eq!(item["status"], "pass", "{item:#}");
    assert!(item["details"]
        .as_array()
        .unwrap()
        .iter()
        .any(|d| d.as_str().unwrap().contains("loss scale by step")));
    let (_, out, _) = analyzer(&["overflow", p(&run)]);
    assert!(out.contains("loss scale by step (input of Mul_"), "{out}");
}

#[test]
fn check_says_what_passed_and_never_compares_a_run_with_itself() {
    let dir = scratch();
    // Two runs of one job that never sets deterministic computation.
    let a = record_one(dir.path(), "a", "{}", 2, &[], &[]);
    let b = record_one(dir.path(), "b", "{}", 2, &[], &[]);
    let determinism = |json: &Value| {
        json["items"].as_array().unwrap().iter().find(|i| i["name"] == "determinism").unwrap().clone()
    };
    let (_, json) = analyzer_json(&["check", p(&a), p(&b)]);
    let item = determinism(&json);
    assert_eq!(item["status"], "pass", "{item:#}");
    let reason = item["reason"].as_str().unwrap();
    assert!(reason.contains("step 0: every op both runs dumped gave identical outputs"), "{reason}");
    assert!(reason.contains("not set") && !reason.contains("deterministic computation is on"), "{reason}");

    let copy = dir.path().join("a-copy");
    copy_dir(&a, &copy);
    for second in [&a, &copy] {
        let (_, json) = analyzer_json(&["check", p(&a), p(second)]);
        let first = json["warnings"][0].as_str().unwrap_or_default();
        assert!(first.starts_with("RUN2 is RUN"), "{json:#}");
        assert_ne!(determinism(&json)["status"], "pass", "no evidence from a run compared with itself");
        let (_, out, err) = analyzer(&["check", p(&a), p(second)]);
        assert!(format!("{err}{out}").contains("RUN2 is RUN"), "{out}{err}");
    }
    assert!(analyzer_json(&["check", p(&a), p(&b)]).1["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .all(|w| !w.as_str().unwrap().contains("RUN2 is RUN")));
    let page = dir.path().join("same.html");
    let (_, out, err) = analyzer(&["report", p(&a), p(&a), "-o", p(&page)]);
    let first = out.lines().nth(1).unwrap_or_default();
    assert!(first.contains("WARNING: RUN2 is RUN"), "{out}{err}");
}

#[test]
fn diff_names_the_collective_that_reduced_differently() {
    let dir = scratch();
    let healthy = record_job(dir.path(), "healthy", "{}", &[]);
    let nondet = record_job(
        dir.path(),
        "nondet",
        r#"{"faults": {"nondeterministic_reduction": {"step": 1, "rank": 3}}}"#,
        &[],
    );
    let (code, json) = analyzer_json(&["diff", p(&healthy), p(&nondet)]);
    assert_eq!(code, 1, "{json:#}");
    let firsts = json["first_differences"].as_array().unwrap();
    let first = firsts.iter().find(|f| f["step"] == 1 && f["rank"] == 3).expect("step 1 rank 3 differs");
    assert!(first["op"].as_str().unwrap().starts_with("HcclAllReduce #"), "{json:#}");
    assert_eq!(first["verdict"], "nondeterministic", "{first:#}");
    let (_, out, _) = analyzer(&["diff", p(&healthy), p(&nondet)]);
    assert!(out.contains("HcclAllReduce #") && out.contains("NONDETERMINISTIC"), "{out}");
}
