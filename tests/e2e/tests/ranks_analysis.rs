//! `analyzer ranks` on 4-rank jobs recorded by the collector: each injected fault is attributed to the
//! rank, op and step it was injected at, and a healthy job raises nothing. One recording per scenario,
//! shared by the tests of this file.

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

const RANKS: &str = "4";
const STEPS: &str = "3";

/// Records `sim-train --ranks 4` of `model_json` with the collector into a run directory.
fn record(dir: &Path, name: &str, model_json: &str) -> PathBuf {
    record_with(dir, name, model_json, RANKS, &[])
}

/// [`record`] with `ranks` ranks and the collector's settings `env`.
fn record_with(dir: &Path, name: &str, model_json: &str, ranks: &str, env: &[(&str, &str)]) -> PathBuf {
    record_args(dir, name, model_json, ranks, env, &[])
}

/// [`record_with`] with more sim-train arguments `args`.
fn record_args(
    dir: &Path,
    name: &str,
    model_json: &str,
    ranks: &str,
    env: &[(&str, &str)],
    args: &[&str],
) -> PathBuf {
    record_saying(dir, name, model_json, ranks, env, args).0
}

/// [`record_args`], with what the run wrote on stderr (the collector's lines among it).
fn record_saying(
    dir: &Path,
    name: &str,
    model_json: &str,
    ranks: &str,
    env: &[(&str, &str)],
    args: &[&str],
) -> (PathBuf, String) {
    let model = model_file(dir, &format!("{name}.json"), model_json);
    let run = dir.join(name);
    let out = Command::new(sim_train_bin())
        .args(["--ranks", ranks, "--steps", STEPS, "--model"])
        .arg(&model)
        .args(args)
        .envs(env.iter().copied())
        .arg("--lib")
        .arg(runtime_lib())
        .arg("--hccl-lib")
        .arg(artifact("libhccl.so"))
        .env("LD_PRELOAD", collector_lib())
        .env("ACCUTRACE_DIR", &run)
        .output()
        .expect("run sim-train");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{name}: {stderr}");
    (run, stderr)
}

struct Runs {
    _dir: tempfile::TempDir,
    healthy: PathBuf,
    overflow: PathBuf,
    bitflip: PathBuf,
    nondeterministic: PathBuf,
    wrong_data: PathBuf,
}

fn runs() -> &'static Runs {
    static RUNS: OnceLock<Runs> = OnceLock::new();
    RUNS.get_or_init(|| {
        let dir = scratch();
        let p = dir.path();
        Runs {
            healthy: record(p, "healthy", "{}"),
            overflow: record(p, "overflow", r#"{"faults": {"overflow": {"op": "model/layer_1/mlp/fc2/MatMul", "step": 1, "rank": 2}}}"#),
            bitflip: record(
                p,
                "bitflip",
                r#"{"faults": {"weight_bitflip": {"param": "model/layer_0/attn/proj/weight", "step": 2, "rank": 1, "index": 5}}}"#,
            ),
            nondeterministic: record(p, "nondet", r#"{"faults": {"nondeterministic_reduction": {"step": 1, "rank": 3}}}"#),
            wrong_data: record(p, "data", r#"{"faults": {"wrong_data": {"step": 2, "rank": 0}}}"#),
            _dir: dir,
        }
    })
}

/// The first origin: rank, step, op, finding kinds.
type Anomaly = (u64, u64, String, Vec<String>);

/// `analyzer ranks` as JSON: exit code, the first origin, the whole report.
fn first_anomaly(args: &[&str]) -> (i32, Option<Anomaly>, serde_json::Value) {
    let mut all = vec!["ranks"];
    all.extend_from_slice(args);
    let (code, json) = analyzer_json(&all);
    let first = json["origins"].as_array().unwrap().first().map(|o| {
        let kinds = o["findings"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["kind"].as_str().unwrap().to_string())
            .collect();
        (
            o["rank"].as_u64().unwrap(),
            o["step"].as_u64().unwrap(),
            o["op"].as_str().unwrap().to_string(),
            kinds,
        )
    });
    (code, first, json)
}

fn p(path: &Path) -> &str {
    path_str(path)
}

#[test]
fn a_healthy_job_raises_nothing() {
    let r = runs();
    let (code, first, json) = first_anomaly(&[p(&r.healthy)]);
    assert_eq!((code, first), (0, None), "{json}");
    assert_eq!(json["ranks"].as_array().unwrap().len(), 4);
    assert_eq!(json["calls"].as_u64(), Some(4 * 10), "1 broadcast + 3 per step, on each rank");
    assert!(json["input_problems"].as_array().unwrap().is_empty(), "{json}");
    // The redundancy check compared something at every step.
    for step in ["0", "1", "2"] {
        assert!(json["replicated_per_step"][step].as_u64().unwrap() > 100, "{json}");
    }
    // Against itself as the baseline: still nothing.
    let (code, first, _) = first_anomaly(&[p(&r.healthy), "--baseline", p(&r.healthy)]);
    assert_eq!((code, first), (0, None));
    // The table says so too.
    let (code, out, _) = analyzer(&["ranks", p(&r.healthy)]);
    assert_eq!(code, 0);
    assert!(out.contains("No anomaly across the ranks"), "{out}");
}

#[test]
fn an_overflow_on_one_rank_is_attributed_to_it_and_its_spread_named() {
    let r = runs();
    let (code, first, json) = first_anomaly(&[p(&r.overflow)]);
    assert_eq!(code, 1);
    assert_eq!(first, Some((2, 1, "model/layer_1/mlp/fc2/MatMul".into(), vec!["overflow".into()])), "{json}");
    // It reached the other ranks through the gradient all-reduce of step 1.
    let spread = json["spread"].as_array().unwrap();
    assert_eq!(spread.len(), 4);
    for s in spread {
        if s["rank"] == 2 {
            assert!(s["via"].is_null());
        } else {
            let via = s["via"].as_str().unwrap();
            assert!(via.starts_with("HcclAllReduce #4 ") && via.ends_with("at step 1"), "{via}");
            assert!(s["anomalous_events"].as_u64().unwrap() >= 1);
        }
    }
    let (_, table, _) = analyzer(&["ranks", p(&r.overflow)]);
    assert!(
        table.contains("FIRST ANOMALY: rank 2 step 1: model/layer_1/mlp/fc2/MatMul [MatMulV2]"),
        "{table}"
    );
}

#[test]
fn a_bit_flip_is_attributed_to_the_first_op_reading_the_corrupted_weight() {
    let r = runs();
    let (code, first, json) = first_anomaly(&[p(&r.bitflip)]);
    assert_eq!(code, 1);
    let (rank, step, op, kinds) = first.expect("an origin");
    assert_eq!((rank, step, kinds), (1, 2, vec!["replica-divergence".to_string()]), "{json}");
    assert_eq!(op, "model/layer_0/attn/proj/MatMul", "the forward op that reads attn/proj/weight");
    assert_eq!(json["origins"].as_array().unwrap().len(), 1, "{json}");
}

#[test]
fn a_nondeterministic_reduction_is_attributed_to_the_collective_on_that_rank() {
    let r = runs();
    let (code, first, json) = first_anomaly(&[p(&r.nondeterministic)]);
    assert_eq!(code, 1);
    assert_eq!(first, Some((3, 1, "HcclAllReduce".into(), vec!["collective-disagreement".into()])), "{json}");
    let origin = &json["origins"][0];
    assert_eq!(
        origin["collective"][1], 4,
        "the gradient all-reduce of step 1 (broadcast 0, then 3 per step)"
    );
}

#[test]
fn a_rank_reading_other_data_is_attributed_against_a_good_run() {
    let r = runs();
    // Without a baseline nothing is wrong in the job itself: replicas agree, nothing overflows.
    let (code, first, _) = first_anomaly(&[p(&r.wrong_data)]);
    assert_eq!((code, first), (0, None));
    let (code, first, json) = first_anomaly(&[p(&r.wrong_data), "--baseline", p(&r.healthy)]);
    assert_eq!(code, 1);
    assert_eq!(
        first,
        Some((0, 2, "model/embedding/GatherV2".into(), vec!["baseline-difference".into()])),
        "{json}"
    );
    assert_eq!(json["origins"].as_array().unwrap().len(), 1, "the other ranks only inherit it: {json}");
}

#[test]
fn a_missing_rank_makes_the_answer_partial() {
    let r = runs();
    let dir = scratch();
    let copy = without_rank(&r.healthy, 3, &dir.path().join("three"));
    let (code, out, err) = analyzer(&["ranks", p(&copy)]);
    assert_eq!(code, 2, "{out}\n{err}");
    assert!(out.starts_with("INCOMPLETE INPUT: "), "the problems lead: {out}");
    assert!(out.contains("of 4 members recorded it"), "{out}");
    assert!(!out.contains("No anomaly across the ranks"), "no all-clear on partial data: {out}");
    let (code, json) = analyzer_json(&["ranks", p(&copy)]);
    assert_eq!(code, 2);
    assert_eq!(json["input_problems"][0]["kind"], "incomplete", "{json}");
    let (code, _, _) = analyzer(&["ranks", p(&copy), "--allow-incomplete"]);
    assert_eq!(code, 0, "--allow-incomplete accepts it (the problems still lead)");
    // The report page: the same problems lead it, and no all-clear across ranks is given.
    let file = dir.path().join("three.html");
    let (code, out, err) = analyzer(&["report", p(&copy), "-o", p(&file), "--no-progress"]);
    assert_eq!(code, 2, "{out}\n{err}");
    let html = report_page(&file);
    let problems = html.find("id=\"problems\"").expect("the problems lead the page");
    assert!(problems < html.find("id=\"verdicts\"").unwrap());
    assert!(html.contains("of 4 members recorded it"));
    assert!(html.contains("<b>NO VERDICT</b> across ranks") && !html.contains("NO ANOMALY ACROSS RANKS"));
}

/// The overflow job without rank 2, where it began: the first anomaly left is the gradient all-reduce that
/// brought it to the others, a collective rank 2's member of which is missing. The answer says the origin may
/// be that member, beside naming the recorded members it began on.
#[test]
fn a_first_anomaly_at_a_collective_missing_a_member_says_the_origin_may_be_that_member() {
    let r = runs();
    let dir = scratch();
    let copy = without_rank(&r.overflow, 2, &dir.path().join("without-rank-2"));
    let (code, out, err) = analyzer(&["ranks", p(&copy)]);
    assert_eq!(code, 2, "{out}\n{err}");
    assert!(out.contains("FIRST ANOMALY: ranks 0, 1, 3 step 1: HcclAllReduce"), "{out}");
    let says = "the first anomaly is HcclAllReduce #4 on ";
    let warning = out.lines().find(|l| l.contains(says)).unwrap_or_else(|| panic!("{out}"));
    assert!(
        warning.contains(
            "which 3 of its 4 members recorded (ranks 0, 1, 3): a member that was not recorded may be"
        ),
        "{warning}"
    );
    let (_, json) = analyzer_json(&["ranks", p(&copy)]);
    assert!(
        json["warnings"].as_array().unwrap().iter().any(|w| w.as_str().unwrap().contains(says)),
        "{json}"
    );
    let file = dir.path().join("without-rank-2.html");
    let (code, out, err) = analyzer(&["report", p(&copy), "-o", p(&file), "--no-progress"]);
    assert_eq!(code, 2, "{out}\n{err}");
    assert!(report_page(&file).contains(says), "the page says it beside the first anomaly");
    // With every member recorded nothing of the kind is said.
    let (_, out, _) = analyzer(&["ranks", p(&r.overflow)]);
    assert!(!out.contains(says), "{out}");
}

#[test]
fn ranks_of_two_runs_of_one_job_size_are_named_as_of_different_runs() {
    two_runs_mixed_are_named_as_different(&[]);
}

/// torch_npu makes its communicators with HcclCommInitRootInfoConfig when libhccl.so has it: the collector
/// names them by their root info all the same (it knew only HcclCommInitRootInfo, so these were named by
/// HcclGetCommName, and merge could not tell the runs apart by root info).
#[test]
fn ranks_of_two_runs_whose_communicators_were_made_with_a_config_are_named_as_of_different_runs() {
    two_runs_mixed_are_named_as_different(&["--hccl-comm-config"]);
}

/// Rank 0 scanned from one 2-rank run and rank 1 from another of the same model (sim-train given `args`),
/// into one directory: merge says the ranks are of different runs, by their communicators' root infos.
fn two_runs_mixed_are_named_as_different(args: &[&str]) {
    let dir = scratch();
    let (a, b) = (
        record_args(dir.path(), "run_a", "{}", "2", &[], args),
        record_args(dir.path(), "run_b", "{}", "2", &[], args),
    );
    let (sa, sb, mixed) = (dir.path().join("sa"), dir.path().join("sb"), dir.path().join("mixed"));
    for (run, out) in [(&a, &sa), (&b, &sb)] {
        let (code, out, err) = analyzer(&["scan", p(run), "-o", p(out)]);
        assert_eq!(code, 0, "{out}\n{err}");
    }
    std::fs::create_dir(&mixed).unwrap();
    std::fs::copy(sa.join("rank000000.parquet"), mixed.join("rank000000.parquet")).unwrap();
    std::fs::copy(sb.join("rank000001.parquet"), mixed.join("rank000001.parquet")).unwrap();
    let (code, out, err) = analyzer(&["merge", p(&mixed)]);
    assert_eq!(code, 2, "{out}\n{err}");
    assert!(out.starts_with("INCOMPLETE INPUT: "), "{out}");
    assert!(
        out.contains("the ranks are of different runs: rank 0 made HCCL communicator root-")
            && out.contains("rank 1 made HCCL communicator root-")
            && out.contains("scan each run into its own directory"),
        "{out}"
    );
    // One run's summaries: nothing of the kind.
    let (code, out, _) = analyzer(&["merge", p(&sa)]);
    assert_eq!(code, 0, "{out}");
    assert!(!out.contains("different runs"), "{out}");
}

/// Rank 1's capture is of a collector before `config.communicators` (its manifest has none), so its
/// summary does not record what it made: merge of rank 0 of one run with it says the job identity is
/// unknown and that the ranks' HCCL calls fall apart by communicator (it said only that each collective
/// missed a member); a whole run of such captures merges as before.
#[test]
fn ranks_of_two_runs_one_without_a_recorded_job_identity_are_named_by_their_calls() {
    let dir = scratch();
    let (a, b) =
        (record_with(dir.path(), "run_a", "{}", "2", &[]), record_with(dir.path(), "run_b", "{}", "2", &[]));
    let manifest = b.join("manifest.json");
    let mut m: serde_json::Value = serde_json::from_slice(&std::fs::read(&manifest).unwrap()).unwrap();
    m["config"]
        .as_object_mut()
        .unwrap()
        .remove("communicators")
        .expect("the collector records communicators");
    std::fs::write(&manifest, serde_json::to_vec(&m).unwrap()).unwrap();
    let (sa, sb, mixed) = (dir.path().join("sa"), dir.path().join("sb"), dir.path().join("mixed"));
    for (run, out) in [(&a, &sa), (&b, &sb)] {
        let (code, out, err) = analyzer(&["scan", p(run), "-o", p(out)]);
        assert_eq!(code, 0, "{out}\n{err}");
    }
    std::fs::create_dir(&mixed).unwrap();
    std::fs::copy(sa.join("rank000000.parquet"), mixed.join("rank000000.parquet")).unwrap();
    std::fs::copy(sb.join("rank000001.parquet"), mixed.join("rank000001.parquet")).unwrap();
    let (code, out, err) = analyzer(&["merge", p(&mixed)]);
    assert_eq!(code, 2, "{out}\n{err}");
    assert!(out.starts_with("INCOMPLETE INPUT: job identity unknown for rank 1 "), "{out}");
    assert!(
        out.contains("rank 0 with HCCL communicator root-")
            && out.contains("rank 1 with HCCL communicator root-")
            && out.contains("scan each run into its own directory")
            && !out.contains("the ranks are of different runs"),
        "{out}"
    );
    // The run without the record, whole: its calls meet, nothing to say.
    let (code, out, _) = analyzer(&["merge", p(&sb)]);
    assert_eq!(code, 0, "{out}");
    assert!(!out.contains("job identity unknown"), "{out}");
}

/// The job run twice into one capture directory (relaunched, or its workers restarted by torchrun, with the
/// same ACCUTRACE_DIR): each rank has a stream of each run. `ranks`, and `merge` of its scan, lead with each
/// run's streams (they answered "No anomaly across the ranks", exit 0, over both runs' events as one run's).
#[test]
fn a_capture_directory_two_runs_wrote_into_is_named_as_holding_different_runs() {
    let dir = scratch();
    let run = record_with(dir.path(), "run", "{}", "2", &[]);
    record_with(dir.path(), "run", "{}", "2", &[]);
    let said = |out: &str| {
        // Either rank's process may make its stream directory first.
        out.starts_with(&format!("INCOMPLETE INPUT: {}: the capture holds different runs: 2 streams of ranks 0, 1 (the first stream-000-rank", p(&run)))
            && out.contains("2 streams of ranks 0, 1 (the first stream-002-rank")
            && out.contains("record each run into its own directory")
    };
    let (code, out, err) = analyzer(&["ranks", p(&run)]);
    assert_eq!(code, 2, "{out}\n{err}");
    assert!(said(&out), "{out}");
    let summaries = dir.path().join("summaries");
    let (code, out, err) = analyzer(&["scan", p(&run), "-o", p(&summaries)]);
    assert_eq!(code, 2, "{out}\n{err}");
    let (code, out, err) = analyzer(&["merge", p(&summaries)]);
    assert_eq!(code, 2, "{out}\n{err}");
    assert!(said(&out), "{out}");
    // A job of 2 ranks, then one of 4, into one directory: the manifest keeps the first job's size, so the
    // second's communicators span no job it knows of (it said "No anomaly across the ranks", exit 0).
    let two_sizes = record_with(dir.path(), "sizes", "{}", "2", &[]);
    record_with(dir.path(), "sizes", "{}", "4", &[]);
    let (code, out, err) = analyzer(&["ranks", p(&two_sizes)]);
    assert_eq!(code, 2, "{out}\n{err}");
    assert!(
        out.starts_with(&format!("INCOMPLETE INPUT: {}: the capture holds different runs: 2 streams of ranks 0, 1 (the first stream-000-rank", p(&two_sizes)))
            && out.contains("4 streams of ranks 0-3 (the first stream-002-rank"),
        "{out}"
    );
}

/// The same capture directory two runs wrote into, read by the commands that answer about one run: each
/// leads with the capture's runs and exits 2 (`overflow` said "No op produced inf/NaN ...", exit 0;
/// `compare` of the capture with itself said PASS over both runs' tensors, exit 0; `diff` against a run
/// compared one run's tensors by hash as if the mix were a run, exit 1); a capture of one run is read as
/// before. The second run's collector warns at start (it appended to the directory without a word).
#[test]
fn every_command_reading_a_capture_two_runs_wrote_into_leads_with_its_runs() {
    let dir = scratch();
    let (twice, first) = record_saying(dir.path(), "twice", "{}", "2", &[], &[]);
    let (_, again) = record_saying(dir.path(), "twice", "{}", "2", &[], &[]);
    let once = record_with(dir.path(), "once", "{}", "2", &[]);
    // The collector of the second run says so at start, rank by rank; the first run's says nothing of it.
    assert!(!first.contains("already holds"), "{first}");
    for rank in [0, 1] {
        let said = format!("already holds 1 stream of rank {rank} (the first stream-");
        assert!(again.contains(&said) && again.contains("use a new ACCUTRACE_DIR for each run"), "{again}");
    }
    let lead =
        format!("INCOMPLETE INPUT: {}: the capture holds different runs: 2 streams of ranks 0, 1", p(&twice));
    for args in [
        vec!["overflow", p(&twice)],
        vec!["compare", p(&twice), p(&once)],
        vec!["compare", p(&twice), p(&twice)],
        vec!["diff", p(&once), p(&twice)],
        vec!["inspect", p(&twice)],
        vec!["check", p(&twice)],
        vec!["watch", p(&twice)],
    ] {
        let (code, out, err) = analyzer(&args);
        assert_eq!(code, 2, "{args:?}\n{out}\n{err}");
        assert!(
            out.starts_with(&lead) && out.contains("record each run into its own directory"),
            "{args:?}\n{out}"
        );
    }
    for args in
        [vec!["overflow", p(&once)], vec!["compare", p(&once), p(&once)], vec!["diff", p(&once), p(&once)]]
    {
        let (code, out, err) = analyzer(&args);
        assert_eq!(code, 0, "{args:?}\n{out}\n{err}");
        assert!(!out.contains("INCOMPLETE INPUT") && !out.contains("different runs"), "{args:?}\n{out}");
    }
}

#[test]
fn a_selection_narrows_the_ops_examined_and_one_matching_nothing_is_refused() {
    let r = runs();
    let (code, first, json) = first_anomaly(&[p(&r.overflow), "--step", "1"]);
    assert_eq!(code, 1);
    assert_eq!(first.map(|f| (f.0, f.1, f.2)), Some((2, 1, "model/layer_1/mlp/fc2/MatMul".into())), "{json}");
    assert_eq!(json["steps"], serde_json::json!([1]), "{json}");
    // Before the overflow nothing is anomalous.
    let (code, first, _) = first_anomaly(&[p(&r.overflow), "--step", "0"]);
    assert_eq!((code, first), (0, None));
    let (code, _, err) = analyzer(&["ranks", p(&r.overflow), "--step", "9"]);
    assert_eq!(code, 2);
    assert!(err.contains("step 9 is not in"), "{err}");
}

/// Copies the files of `from` (not its directories: a stream's segments, a scan's events) into `to`.
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_file() {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

/// The names in `dir`, sorted.
fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    names.sort();
    names
}

/// What a scan of the 4-rank job leaves in the shared directory: a summary per rank, and its series.
fn assert_four_summaries(summaries: &Path) {
    let ranks = ["rank000000.parquet", "rank000001.parquet", "rank000002.parquet", "rank000003.parquet"];
    assert_eq!(names_in(summaries), [&ranks[..], &["series"]].concat());
    assert_eq!(names_in(&summaries.join("series")), ranks);
}

/// Splits `run` as two nodes' node-local captures would hold it: streams of ranks 0-1 in `node0`, of ranks
/// 2-3 in `node1`, each with a manifest listing only its own streams.
fn split_nodes(run: &Path, dir: &Path) -> [PathBuf; 2] {
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run.join("manifest.json")).unwrap()).unwrap();
    ["node0", "node1"].map(|node| {
        let here = |rank: u64| (rank < 2) == (node == "node0");
        let to = dir.join(node);
        std::fs::create_dir_all(&to).unwrap();
        let mut m = manifest.clone();
        let streams = m["streams"].as_array_mut().unwrap();
        streams.retain(|s| here(s["info"]["rank"].as_u64().unwrap()));
        for s in streams.iter() {
            let name = s["dir"].as_str().unwrap();
            copy_dir(&run.join(name), &to.join(name));
        }
        std::fs::write(to.join("manifest.json"), serde_json::to_vec(&m).unwrap()).unwrap();
        to
    })
}

/// The parts of a ranks/merge JSON report that are the answer (not the names of the inputs).
fn answer(json: &serde_json::Value) -> serde_json::Value {
    let keys = ["ranks", "steps", "events", "calls", "communicators", "origins", "spread", "findings"];
    let mut out = serde_json::Map::new();
    for k in keys.iter().chain(&["replicated_per_step", "input_problems", "warnings"]) {
        out.insert(k.to_string(), json[k].clone());
    }
    serde_json::Value::Object(out)
}

#[test]
fn scan_per_node_then_merge_gives_the_answer_of_ranks() {
    let r = runs();
    let dir = scratch();
    for (name, run) in [("overflow", &r.overflow), ("nondet", &r.nondeterministic), ("bitflip", &r.bitflip)] {
        let [node0, node1] = split_nodes(run, &dir.path().join(name));
        let (s0, s1) = (dir.path().join(format!("{name}-s0")), dir.path().join(format!("{name}-s1")));
        for (node, out) in [(&node0, &s0), (&node1, &s1)] {
            let (code, json) = analyzer_json(&["scan", p(node), "-o", p(out)]);
            assert_eq!(code, 0, "{json}");
            let written = json["summaries"].as_array().unwrap();
            assert_eq!(written.len(), 2, "{json}");
            // Each rank's series beside its events, in series/.
            for w in written {
                let file = Path::new(w["series_file"].as_str().unwrap());
                assert_eq!(file.parent(), Some(out.join("series").as_path()), "{json}");
                let (rank, rows) = analyzer::ranks::summary::read_series(file).unwrap();
                assert_eq!(
                    (u64::from(rank), rows.len() as u64),
                    (w["rank"].as_u64().unwrap(), w["series_rows"].as_u64().unwrap())
                );
                let loss: Vec<u64> =
                    rows.iter().filter(|r| r.series == "loss").map(|r| r.first_step).collect();
                assert_eq!(loss, [0, 1, 2], "a loss at each of the {STEPS} steps: {rows:?}");
            }
        }
        let (merged_code, merged) = analyzer_json(&["merge", p(&s0), p(&s1)]);
        let (whole_code, whole) = analyzer_json(&["ranks", p(run)]);
        assert_eq!((merged_code, answer(&merged)), (whole_code, answer(&whole)), "{name}");
        assert_eq!(merged_code, 1, "{name}: {merged}");
        // One node's summaries alone: its collectives miss members, so no answer is given as whole.
        let (code, out, _) = analyzer(&["merge", p(&s0)]);
        assert_eq!(code, 2, "{out}");
        assert!(out.starts_with("INCOMPLETE INPUT: "), "{out}");
    }
    // A baseline of summaries, as ranks --baseline.
    let (good, bad) = (dir.path().join("good"), dir.path().join("bad"));
    assert_eq!(analyzer(&["scan", p(&r.healthy), "-o", p(&good)]).0, 0);
    assert_eq!(analyzer(&["scan", p(&r.wrong_data), "-o", p(&bad)]).0, 0);
    let (code, merged) = analyzer_json(&["merge", p(&bad), "--baseline", p(&good)]);
    let (_, whole) = analyzer_json(&["ranks", p(&r.wrong_data), "--baseline", p(&r.healthy)]);
    assert_eq!((code, answer(&merged)), (1, answer(&whole)));
    // A rank summarized twice, and a summary that is not one: refused, the file named.
    let (code, _, err) = analyzer(&["merge", p(&good), p(&good)]);
    assert_eq!(code, 2);
    assert!(err.contains("summarized twice"), "{err}");
    let broken = dir.path().join("broken");
    copy_dir(&good, &broken);
    let victim = broken.join("rank000002.parquet");
    let whole = std::fs::read(&victim).unwrap();
    // Torn (a scan stopped while copying), and not Parquet at all.
    for body in [&whole[..whole.len() / 2], b"{\"summary_version\": 1, \"rank\": 2}".as_slice()] {
        std::fs::write(&victim, body).unwrap();
        let (code, _, err) = analyzer(&["merge", p(&broken)]);
        assert_eq!(code, 2);
        assert!(err.contains("rank000002.parquet: not a Parquet rank summary"), "{err}");
        assert!(err.contains("copy it again from the node that wrote it, or run `analyzer scan`"), "{err}");
    }
    // Another version, and a Parquet file of another schema: refused, the file and what is wrong named.
    // (The footer is Thrift's compact encoding: after the key, the value's field header, length and bytes.)
    let version_at = |bytes: &[u8]| {
        find(bytes, b"accutrace.summary_version\x18\x013").expect("version 3 in the footer")
            + b"accutrace.summary_version\x18\x01".len()
    };
    let mut altered = whole.clone();
    let version = version_at(&altered);
    altered[version] = b'9';
    std::fs::write(&victim, &altered).unwrap();
    let (code, _, err) = analyzer(&["merge", p(&broken)]);
    assert_eq!(code, 2);
    assert!(
        err.contains("rank000002.parquet: summary version 9; this analyzer reads versions 2 and 3"),
        "{err}"
    );
    // Version 2's events are version 3's (3 added the series files): still read, the same answer.
    altered[version] = b'2';
    std::fs::write(&victim, &altered).unwrap();
    let (_, merged) = analyzer_json(&["merge", p(&broken)]);
    let (_, current) = analyzer_json(&["merge", p(&good)]);
    assert_eq!(answer(&merged), answer(&current));
    let mut altered = whole.clone();
    let at = find(&altered, b"accutrace.summary_version").expect("the version key is in the footer");
    altered[at + b"accutrace.summary_version".len() - 1] = b'X';
    std::fs::write(&victim, &altered).unwrap();
    let (code, _, err) = analyzer(&["merge", p(&broken)]);
    assert_eq!(code, 2);
    assert!(err.contains("rank000002.parquet: no accutrace.summary_version"), "{err}");
    // Summaries of another version of the schema (renamed column) are refused naming the column.
    let mut altered = whole.clone();
    let at = altered.windows(18).position(|w| w == b"collectives_before").expect("the schema names it");
    altered[at] = b'C';
    std::fs::write(&victim, &altered).unwrap();
    let (code, _, err) = analyzer(&["merge", p(&broken)]);
    assert_eq!(code, 2);
    assert!(err.contains("rank000002.parquet") && err.contains("no column `collectives_before`"), "{err}");
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).rposition(|w| w == needle)
}

#[test]
fn the_slurm_recipe_scans_each_node_and_merges() {
    let r = runs();
    let dir = scratch();
    let nodes = split_nodes(&r.overflow, &dir.path().join("nodes"));
    // A stand-in for srun: `--ntasks-per-node=1 CMD` starts CMD once per node, each seeing its own capture
    // as ACCUTRACE_DIR (on a real cluster: the same node-local path on every node).
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let srun = bin.join("srun");
    std::fs::write(
        &srun,
        "#!/bin/sh\n\
         [ \"$1\" = --ntasks-per-node=1 ] || { echo \"srun stand-in: got $1\" >&2; exit 64; }\n\
         shift\n\
         status=0\n\
         for node in $STAND_IN_NODES; do ACCUTRACE_DIR=$node \"$@\" || status=$?; done\n\
         exit $status\n",
    )
    .unwrap();
    std::fs::set_permissions(&srun, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let recipes = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/cluster");
    let analyzer_dir = analyzer_bin().parent().unwrap().to_path_buf();
    let path = format!("{}:{}:{}", bin.display(), analyzer_dir.display(), std::env::var("PATH").unwrap());
    let summaries = dir.path().join("summaries");
    let out = Command::new("bash")
        .arg(recipes.join("slurm-scan.sbatch"))
        .env("PATH", path)
        .env("STAND_IN_NODES", format!("{} {}", p(&nodes[0]), p(&nodes[1])))
        .env("SUMMARIES", &summaries)
        .env("SLURM_SUBMIT_DIR", &recipes)
        .env("SLURM_JOB_ID", "42")
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "merge found the overflow: {stdout}\n{stderr}");
    assert!(
        stdout.contains("FIRST ANOMALY: rank 2 step 1: model/layer_1/mlp/fc2/MatMul [MatMulV2]"),
        "{stdout}\n{stderr}"
    );
    assert_four_summaries(&summaries);
    assert_eq!(stderr.matches(": scanning ").count(), 2, "one scan per node: {stderr}");
}

/// Where the recipes put the capture by default: the collector's `ACCUTRACE_DIR` on each node's local disk.
const NODE_CAPTURE: &str = "/local/accutrace/run";

/// The overflow job's capture as two nodes' local disks hold it: `disk{i}` is node i's file system root,
/// its ranks' capture at `disk{i}/local/accutrace/run` (the recipes' default `ACCUTRACE_DIR`). Stand-in
/// launchers resolve that path on each node's disk, as a real node resolves it on its own.
fn node_disks(dir: &Path) -> [PathBuf; 2] {
    let nodes = split_nodes(&runs().overflow, &dir.join("split"));
    [0, 1].map(|i| {
        let disk = dir.join(format!("disk{i}"));
        let capture = disk.join(NODE_CAPTURE.trim_start_matches('/'));
        std::fs::create_dir_all(capture.parent().unwrap()).unwrap();
        std::fs::rename(&nodes[i], &capture).unwrap();
        disk
    })
}

/// Writes an executable stand-in for a launcher into `bin`.
fn stand_in(bin: &Path, name: &str, script: &str) {
    std::fs::create_dir_all(bin).unwrap();
    let path = bin.join(name);
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
}

fn recipes() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/cluster")
}

/// `PATH` with the stand-ins first, then the analyzer.
fn recipe_path(bin: &Path) -> String {
    let analyzer_dir = analyzer_bin().parent().unwrap().to_path_buf();
    format!("{}:{}:{}", bin.display(), analyzer_dir.display(), std::env::var("PATH").unwrap())
}

/// What every recipe ends with: merge's answer (the overflow injected on rank 2 at step 1), and a summary
/// per rank in the shared directory.
fn assert_merged(stdout: &str, stderr: &str, code: Option<i32>, summaries: &Path) {
    assert_eq!(code, Some(1), "merge found the overflow: {stdout}\n{stderr}");
    assert!(
        stdout.contains("FIRST ANOMALY: rank 2 step 1: model/layer_1/mlp/fc2/MatMul [MatMulV2]"),
        "{stdout}\n{stderr}"
    );
    assert_four_summaries(summaries);
}

/// docs/cluster/mpirun-scan.sh under a stand-in `mpirun` that starts the program once per node with only
/// what `-x` exports (as a remote node's environment), so a variable the recipe forgets to pass fails.
#[test]
fn the_mpirun_recipe_scans_each_node_and_merges() {
    let dir = scratch();
    let disks = node_disks(dir.path());
    let bin = dir.path().join("bin");
    stand_in(
        &bin,
        "mpirun",
        r#"#!/bin/bash
np=; vars=()
while (($#)); do
    case $1 in
        -np) np=$2; shift 2 ;;
        -npernode) [[ $2 == 1 ]] || { echo "mpirun stand-in: -npernode $2" >&2; exit 64; }; shift 2 ;;
        --hostfile) shift 2 ;;
        -x) vars+=("$2"); shift 2 ;;
        -*) echo "mpirun stand-in: unexpected option $1" >&2; exit 64 ;;
        *) break ;;
    esac
done
disks=($STAND_IN_DISKS)
[[ $np == "${#disks[@]}" ]] || { echo "mpirun stand-in: -np $np for ${#disks[@]} nodes" >&2; exit 64; }
status=0
for i in "${!disks[@]}"; do
    env=(PATH="$PATH" OMPI_COMM_WORLD_RANK="$i" OMPI_COMM_WORLD_LOCAL_RANK=0)
    for v in "${vars[@]}"; do
        [[ -v $v ]] || { echo "mpirun stand-in: -x $v is not set" >&2; exit 64; }
        value=${!v}
        # The capture is node-local: the same path, on this node's disk.
        [[ $v == ACCUTRACE_DIR ]] && value=${disks[$i]}$value
        env+=("$v=$value")
    done
    env -i "${env[@]}" "$@" || status=$?
done
exit $status
"#,
    );
    let summaries = dir.path().join("summaries");
    let out = Command::new("sh")
        .arg(recipes().join("mpirun-scan.sh"))
        .env("PATH", recipe_path(&bin))
        .env("STAND_IN_DISKS", format!("{} {}", p(&disks[0]), p(&disks[1])))
        .env("NODES", "2")
        .env("SUMMARIES", &summaries)
        .env_remove("ACCUTRACE_DIR")
        .env_remove("SCAN_NODE")
        .env_remove("ANALYZER")
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_merged(&stdout, &stderr, out.status.code(), &summaries);
    assert_eq!(stderr.matches(": scanning ").count(), 2, "one scan per node: {stderr}");
}

/// docs/cluster/torchrun-scan.sh, started on each of two nodes at once, under a stand-in `torchrun` that
/// runs the program as the node's one worker and then waits for the other node's agent (torchrun's exit
/// barrier): node 0 merges, node 1 only scans.
#[test]
fn the_torchrun_recipe_scans_each_node_and_node_0_merges() {
    let dir = scratch();
    let disks = node_disks(dir.path());
    let bin = dir.path().join("bin");
    stand_in(
        &bin,
        "torchrun",
        r#"#!/bin/bash
nnodes=; node_rank=; nproc=; no_python=
while (($#)); do
    case $1 in
        --nnodes=*) nnodes=${1#*=} ;;
        --node-rank=*) node_rank=${1#*=} ;;
        --nproc-per-node=*) nproc=${1#*=} ;;
        --master-addr=* | --master-port=*) ;;
        --no-python) no_python=1 ;;
        -*) echo "torchrun stand-in: unexpected option $1" >&2; exit 64 ;;
        *) break ;;
    esac
    shift
done
[[ $nproc == 1 && $no_python == 1 && -n $nnodes && -n $node_rank ]] ||
    { echo "torchrun stand-in: want one program per node: $nnodes $node_rank $nproc $no_python" >&2; exit 64; }
disks=($STAND_IN_DISKS)
# The node-local capture, on this node's disk; torchrun's worker variables.
ACCUTRACE_DIR=${disks[$node_rank]}$ACCUTRACE_DIR RANK=$node_rank GROUP_RANK=$node_rank LOCAL_RANK=0 \
    WORLD_SIZE=$nnodes LOCAL_WORLD_SIZE=1 "$@"
status=$?
# The exit barrier: every node's agent waits for the others (30 s here).
touch "$STAND_IN_STORE/exit.$node_rank"
for ((i = 0; i < nnodes; i++)); do
    for ((t = 0; t < 600; t++)); do [[ -e $STAND_IN_STORE/exit.$i ]] && break; sleep 0.05; done
done
((status == 0)) || exit 1
"#,
    );
    let store = dir.path().join("store");
    std::fs::create_dir(&store).unwrap();
    let summaries = dir.path().join("summaries");
    let node = |rank: &str| {
        Command::new("sh")
            .arg(recipes().join("torchrun-scan.sh"))
            .env("PATH", recipe_path(&bin))
            .env("STAND_IN_DISKS", format!("{} {}", p(&disks[0]), p(&disks[1])))
            .env("STAND_IN_STORE", &store)
            .env("NNODES", "2")
            .env("NODE_RANK", rank)
            .env("MASTER_ADDR", "node0")
            .env("SUMMARIES", &summaries)
            .env_remove("ACCUTRACE_DIR")
            .env_remove("SCAN_NODE")
            .env_remove("ANALYZER")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (node1, node0) = (node("1"), node("0"));
    let (out0, out1) = (node0.wait_with_output().unwrap(), node1.wait_with_output().unwrap());
    let stdout1 = String::from_utf8_lossy(&out1.stdout);
    assert_eq!(
        out1.status.code(),
        Some(0),
        "node 1 scans: {stdout1}{}",
        String::from_utf8_lossy(&out1.stderr)
    );
    assert!(stdout1.contains("rank000002.parquet"), "node 1 scans ranks 2-3: {stdout1}");
    assert!(!stdout1.contains("ANOMALY"), "node 1 does not merge: {stdout1}");
    let (stdout, stderr) = (String::from_utf8_lossy(&out0.stdout), String::from_utf8_lossy(&out0.stderr));
    assert_merged(&stdout, &stderr, out0.status.code(), &summaries);
}

/// The command and environment a container of `pod` (a pod template's spec) runs on a node: each path
/// under a volume's mount is rewritten to where the volume lives on this machine (a `hostPath` under the
/// node's disk, a claim in `claims`), and the image's `/opt/accutrace/` is docs/cluster (the image holds
/// the recipes there and `analyzer` on its PATH).
fn container_command(pod: &yaml_rust2::Yaml, disk: &Path, claims: &Path) -> Command {
    let container = &pod["containers"][0];
    let mut mounts: Vec<(String, PathBuf)> = Vec::new();
    for m in container["volumeMounts"].as_vec().expect("volumeMounts") {
        let name = m["name"].as_str().unwrap();
        let volume = pod["volumes"]
            .as_vec()
            .unwrap()
            .iter()
            .find(|v| v["name"].as_str() == Some(name))
            .unwrap_or_else(|| panic!("no volume {name}"));
        let on_host = match (
            volume["hostPath"]["path"].as_str(),
            volume["persistentVolumeClaim"]["claimName"].as_str(),
        ) {
            (Some(path), _) => disk.join(path.trim_start_matches('/')),
            (_, Some(claim)) => claims.join(claim),
            _ => panic!("volume {name}: neither hostPath nor a claim"),
        };
        mounts.push((m["mountPath"].as_str().unwrap().to_string(), on_host));
    }
    mounts.push(("/opt/accutrace".into(), recipes()));
    let resolve = |text: &str| -> String {
        for (mount, on_host) in &mounts {
            if let Some(rest) = text.strip_prefix(mount.as_str()) {
                if rest.is_empty() || rest.starts_with('/') {
                    return format!("{}{rest}", on_host.display());
                }
            }
        }
        text.to_string()
    };
    let argv: Vec<String> = container["command"]
        .as_vec()
        .expect("command")
        .iter()
        .map(|a| resolve(a.as_str().unwrap()))
        .collect();
    let mut command = Command::new(&argv[0]);
    command.args(&argv[1..]).env_clear().env("PATH", recipe_path(Path::new("/nonexistent")));
    for e in container["env"].as_vec().into_iter().flatten() {
        command.env(e["name"].as_str().unwrap(), resolve(e["value"].as_str().unwrap()));
    }
    command
}

/// docs/cluster/volcano-scan.yaml, as Volcano and the kubelets would run it on two nodes: one scan pod per
/// node (the Job's replicas, all or none, at most one per host) reading that node's capture through the
/// hostPath, the summaries on the claim, then the merge pod.
#[test]
fn the_volcano_recipe_scans_each_node_and_merges() {
    let dir = scratch();
    let disks = node_disks(dir.path());
    let text = std::fs::read_to_string(recipes().join("volcano-scan.yaml")).unwrap();
    let docs = yaml_rust2::YamlLoader::load_from_str(&text).expect("the manifests are YAML");
    let (job, merge) = (&docs[0], &docs[1]);
    assert_eq!(
        (job["apiVersion"].as_str(), job["kind"].as_str()),
        (Some("batch.volcano.sh/v1alpha1"), Some("Job"))
    );
    assert_eq!(job["spec"]["schedulerName"].as_str(), Some("volcano"));
    let task = &job["spec"]["tasks"][0];
    let replicas = task["replicas"].as_i64().expect("replicas");
    assert_eq!(job["spec"]["minAvailable"].as_i64(), Some(replicas), "every node scanned, or none");
    assert_eq!(replicas, disks.len() as i64, "one scan pod per node of the job");
    let template = &task["template"];
    let spread =
        &template["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0];
    assert_eq!(spread["topologyKey"].as_str(), Some("kubernetes.io/hostname"), "one scan pod per host");
    let labels = template["metadata"]["labels"].as_hash().expect("labels");
    for (k, v) in spread["labelSelector"]["matchLabels"].as_hash().expect("matchLabels") {
        assert_eq!(labels.get(k), Some(v), "the anti-affinity selects the scan pods themselves");
    }
    let capture_mount = template["spec"]["containers"][0]["volumeMounts"]
        .as_vec()
        .unwrap()
        .iter()
        .find(|m| m["name"].as_str() == Some("capture"))
        .expect("the capture's mount");
    assert_eq!(capture_mount["readOnly"].as_bool(), Some(true), "scan never writes into the capture");
    let claims = dir.path().join("claims");
    let summaries = claims.join("accutrace-summaries");
    std::fs::create_dir_all(&summaries).unwrap();
    // The scan pods (one per node; a node whose capture misses something exits 2, which this one must not).
    for disk in &disks {
        let out = container_command(&template["spec"], disk, &claims).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "scan pod: {}", String::from_utf8_lossy(&out.stderr));
    }
    assert_eq!((merge["kind"].as_str(), merge["apiVersion"].as_str()), (Some("Pod"), Some("v1")));
    let out = container_command(&merge["spec"], &dir.path().join("merge-node"), &claims).output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "merge found the overflow: {stdout}\n{stderr}");
    let json: serde_json::Value = serde_json::from_str(&stdout).expect("the merge pod writes JSON");
    let first = &json["origins"][0];
    assert_eq!(
        (first["rank"].as_u64(), first["step"].as_u64(), first["op"].as_str()),
        (Some(2), Some(1), Some("model/layer_1/mlp/fc2/MatMul")),
        "{stdout}"
    );
    assert_four_summaries(&summaries);
}

#[test]
fn the_report_page_shows_the_first_anomaly_across_ranks_and_its_spread() {
    let r = runs();
    let dir = scratch();
    // A flipped weight bit is no inf/NaN: only the cross-rank analysis sees it.
    let file = dir.path().join("bitflip.html");
    let (code, out, err) = analyzer(&["report", p(&r.bitflip), "-o", p(&file), "--no-progress"]);
    assert_eq!(code, 1, "{out}\n{err}");
    assert!(
        out.contains("\n  FIRST ANOMALY ACROSS RANKS rank 1 step 2: model/layer_0/attn/proj/MatMul [MatMulV2]; it reached"),
        "the terminal gets the answer too: {out}"
    );
    let html = report_page(&file);
    assert!(!html.contains("id=\"problems\""), "nothing is missing from these runs");
    assert!(
        html.contains(
            "<b>FIRST ANOMALY ACROSS RANKS</b> rank 1 step 2: <a href=\"#t-rank-origins\"><code>model/layer_0/attn/proj/MatMul</code></a>"
        ),
        "the verdict names the rank, step and op"
    );
    assert!(html.contains("replica divergence: "), "and what is wrong with it");
    assert!(html.contains("id=\"t-rank-origins\"") && html.contains("id=\"t-rank-spread\""));
    // The rank x step view: four ranks, the first anomaly's cell outlined, the inf/NaN tab beside it.
    let map = svg_element(&html, "heat-rank-events");
    assert!(map.contains("data-rows=\"rank 0\u{1f}rank 1\u{1f}rank 2\u{1f}rank 3\""), "{map}");
    assert!(map.contains("class=\"outline\""));
    assert!(html.contains("<svg id=\"heat-ranks\""));
    // One rank selected: nothing to analyse across ranks, and no answer about it.
    let (code, out, err) =
        analyzer(&["report", p(&r.bitflip), "--rank", "1", "-o", p(&file), "--no-progress"]);
    // (1: check's determinism item fails, collectives run without HCCL_DETERMINISTIC.)
    assert_eq!(code, 1, "{out}\n{err}");
    assert!(!report_page(&file).contains("ACROSS RANKS"), "{out}");

    // A healthy job: the cross-rank answer is an all-clear, and the page says what it compared.
    let file = dir.path().join("healthy.html");
    let (code, out, err) = analyzer(&["report", p(&r.healthy), "-o", p(&file), "--no-progress"]);
    assert_eq!(code, 1, "only check's determinism item: {out}\n{err}");
    assert!(out.contains("  CHECK FAILS determinism: ") && !out.contains("WATCH"), "{out}");
    let html = report_page(&file);
    assert!(html.contains("<b>NO ANOMALY ACROSS RANKS</b> (4 ranks)"));
    assert!(html.contains("replicas agree ("));
    assert!(
        !html.contains("FIRST ANOMALY")
            && !svg_element(&html, "heat-rank-events").contains("class=\"outline\"")
    );

    // Against a good run of the same job as the benchmark (one configuration, so diff runs too), the
    // benchmark is the cross-rank analysis's baseline: the rank that read other data is named.
    let file = dir.path().join("data.html");
    let (code, out, err) =
        analyzer(&["report", p(&r.wrong_data), p(&r.healthy), "-o", p(&file), "--no-progress"]);
    assert_eq!(code, 1, "{out}\n{err}");
    let html = report_page(&file);
    assert!(
        html.contains("<b>FIRST ANOMALY ACROSS RANKS</b> rank 0 step 2: <a href=\"#t-rank-origins\"><code>model/embedding/GatherV2</code>"),
        "{}",
        &html[html.find("id=\"verdicts\"").unwrap()..][..3000]
    );
    assert!(html.contains("differs from the baseline: "));
}

/// A 4-rank job's CANN dump trees as gathered from two nodes: each rank dumped under its own `rank{R}/`
/// path, and devices are numbered per node (ranks 2 and 3 ran on devices 0 and 1 of the second node).
fn dump_by_node(dir: &Path, name: &str, model_json: &str) -> PathBuf {
    let model = model_file(dir, &format!("{name}.json"), model_json);
    let dump = dir.join(format!("{name}-dump"));
    let config = dump_config(dir, &format!("{name}-acl.json"), &dump, "");
    let out = Command::new(sim_train_bin())
        .args(["--ranks", RANKS, "--steps", "2", "--model"])
        .arg(&model)
        .arg("--acl-config")
        .arg(&config)
        .arg("--lib")
        .arg(runtime_lib())
        .arg("--hccl-lib")
        .arg(artifact("libhccl.so"))
        .output()
        .expect("run sim-train");
    assert!(out.status.success(), "{name}: {}", String::from_utf8_lossy(&out.stderr));
    let gathered = dir.join(name);
    for time in std::fs::read_dir(&dump).unwrap() {
        let time = time.unwrap();
        for device in std::fs::read_dir(time.path()).unwrap() {
            let device = device.unwrap();
            let rank: u32 = device.file_name().to_str().unwrap().parse().unwrap();
            let to = gathered.join(format!("rank{rank}")).join(time.file_name());
            std::fs::create_dir_all(&to).unwrap();
            std::fs::rename(device.path(), to.join((rank % 2).to_string())).unwrap();
        }
    }
    gathered
}

/// The directories of `step` under a gathered rank's dump tree (`{time}/{device}/{model}/{model_id}/{step}`).
fn step_dirs(rank_dir: &Path, step: &str) -> Vec<PathBuf> {
    let mut level = vec![rank_dir.to_path_buf()];
    for _ in 0..4 {
        level = level
            .iter()
            .flat_map(|d| std::fs::read_dir(d).unwrap().map(|e| e.unwrap().path()))
            .filter(|d| d.is_dir())
            .collect();
    }
    level.into_iter().map(|d| d.join(step)).filter(|d| d.is_dir()).collect()
}

/// A dump tree in which one rank's last step was lost (a rank that stopped early, a copy cut short): every
/// rank of a job dumps the same steps, so the gap leads each answer and the exit status is 2, never an
/// all-clear about a step read on three ranks of four.
#[test]
fn a_rank_missing_a_step_of_a_dump_tree_leads_every_answer() {
    let dir = scratch();
    let tree = dump_by_node(dir.path(), "cut", "{}");
    let lost = step_dirs(&tree.join("rank3"), "1");
    assert!(!lost.is_empty(), "no step 1 under {}", tree.join("rank3").display());
    for d in &lost {
        std::fs::remove_dir_all(d).unwrap();
    }
    for command in ["overflow", "watch", "inspect"] {
        let (code, out, err) = analyzer(&[command, p(&tree), "--no-progress"]);
        assert_eq!(code, 2, "{command}: {out}\n{err}");
        let said = format!("{out}{err}");
        assert!(said.contains("rank 3 lacks step 1 that other ranks hold"), "{command}: {said}");
        let (code, _, _) = analyzer(&[command, p(&tree), "--no-progress", "--allow-incomplete"]);
        assert_eq!(code, 0, "{command} --allow-incomplete");
    }
    let (code, json) = analyzer_json(&["overflow", p(&tree)]);
    assert_eq!(code, 2);
    let problems = json["input_problems"].as_array().unwrap();
    assert!(
        problems.iter().any(|q| q["message"].as_str().unwrap().contains("rank 3 lacks step 1")),
        "{json}"
    );
}

#[test]
fn dump_trees_from_several_nodes_are_paired_by_their_rank_directories() {
    let dir = scratch();
    let healthy = dump_by_node(dir.path(), "healthy", "{}");
    let nondet = dump_by_node(
        dir.path(),
        "nondet",
        r#"{"faults": {"nondeterministic_reduction": {"step": 1, "rank": 2}}}"#,
    );
    // Device 0 holds ranks 0 and 2: the rank directories tell them apart.
    let (code, json) = analyzer_json(&["inspect", p(&nondet)]);
    assert_eq!(code, 0, "{json}");
    let mut ranks: Vec<u64> =
        json["ops"].as_array().unwrap().iter().map(|o| o["rank"].as_u64().unwrap()).collect();
    ranks.sort_unstable();
    ranks.dedup();
    assert_eq!(ranks, [0, 1, 2, 3]);
    // diff pairs rank with rank: only rank 2's reduced gradient differs, from step 1 on.
    let (code, json) = analyzer_json(&["diff", p(&healthy), p(&nondet)]);
    assert_eq!(code, 1, "{json}");
    let firsts: Vec<(u64, u64)> = json["first_differences"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["step"].as_u64().unwrap(), f["rank"].as_u64().unwrap()))
        .collect();
    assert_eq!(firsts, [(1, 2)], "{json}");
    assert!(json["input_problems"].as_array().unwrap().is_empty(), "{json}");
    // A rank in every output of diff: the census is per op and rank, and only rank 2 differed.
    let census = json["census"].as_array().unwrap();
    assert!(!census.is_empty() && census.iter().all(|c| c["rank"] == 2), "{json}");
    let (code, csv, _) = analyzer(&["diff", p(&healthy), p(&nondet), "--format", "csv"]);
    assert_eq!(code, 1);
    let census_ranks: Vec<&str> =
        csv.lines().filter(|l| l.starts_with("census,")).map(|l| l.split(',').nth(2).unwrap()).collect();
    assert_eq!(census_ranks.len(), census.len(), "{csv}");
    assert!(census_ranks.iter().all(|&r| r == "2"), "{csv}");
    let (_, table, _) = analyzer(&["diff", p(&healthy), p(&nondet)]);
    let rows = table.split("Every op whose output differed").nth(1).expect("the census");
    let mut rows = rows.lines().skip(1);
    let heading: Vec<&str> = rows.next().unwrap().split_whitespace().take(2).collect();
    assert_eq!(heading, ["rank", "op"], "{table}");
    let census_rows: Vec<&str> = rows.take_while(|l| l.starts_with("  ") && !l.contains("...")).collect();
    assert_eq!(census_rows.len(), census.len().min(25), "{table}");
    assert!(census_rows.iter().all(|l| l.split_whitespace().next() == Some("2")), "{table}");
    // compare at a zero threshold fails exactly the tensors the reduction changed: rank 2's, in every form.
    let strict = ["compare", p(&nondet), p(&healthy), "--max-abs-err", "0"];
    let (code, json) = analyzer_json(&strict);
    assert_eq!(code, 1, "{json}");
    let failing: Vec<&serde_json::Value> =
        json["rows"].as_array().unwrap().iter().filter(|r| r["status"] == "fail").collect();
    assert!(!failing.is_empty() && failing.iter().all(|r| r["rank"] == 2 && r["step"].as_u64() >= Some(1)));
    assert!(json["failing_ops"].as_array().unwrap().iter().all(|o| o["rank"] == 2), "{json}");
    let (_, table, _) = analyzer(&strict);
    let failing_ops = table.split("Failing ops in execution order").nth(1).expect("failing ops");
    let failing_ops: Vec<&str> =
        failing_ops.lines().skip(1).take_while(|l| l.starts_with("  step")).collect();
    assert!(!failing_ops.is_empty() && failing_ops.iter().all(|l| l.contains(" rank 2 ")), "{table}");
    // Dump trees hold no HCCL call: no collective's members agree or disagree, so no all-clear across
    // ranks (their job's size is unknown too), here nor on the report page.
    let (code, out, _) = analyzer(&["ranks", p(&healthy)]);
    assert_eq!(code, 2, "{out}");
    assert!(out.starts_with("INCOMPLETE INPUT: no HCCL call was recorded on any of the 4 ranks"), "{out}");
    assert!(!out.contains("members agree"), "{out}");
    let page = dir.path().join("healthy.html");
    let (code, out, err) = analyzer(&["report", p(&healthy), "-o", p(&page), "--no-progress"]);
    assert_eq!(code, 2, "{out}\n{err}");
    assert!(!report_page(&page).contains("NO ANOMALY ACROSS RANKS"), "{out}");
    // compare against one rank's dumps: the other ranks are said not to be compared, before the verdict.
    let one = dir.path().join("rank0-only");
    std::fs::create_dir(&one).unwrap();
    std::fs::rename(healthy.join("rank0"), one.join("rank0")).unwrap();
    let (_, out, _) = analyzer(&["compare", p(&nondet), p(&one)]);
    let warning =
        "WARNING: the target's ranks 1, 2, 3 have no counterpart on the other side: its tensors are \
                   not compared (`--rank 0` compares the ranks both hold)";
    let (at_warning, at_verdict) = (out.find(warning), out.find("PASS"));
    assert!(at_warning.is_some() && at_warning < at_verdict, "{out}");
    // The unmatched tensors are the other ranks', named with their rank (table and JSON).
    assert!(out.contains("target tensors have no counterpart:"), "{out}");
    let listed: Vec<&str> =
        out.lines().filter(|l| l.starts_with("  step ") && l.contains(" rank ")).collect();
    assert!(!listed.is_empty() && listed.iter().all(|l| !l.contains(" rank 0:")), "{out}");
    let (_, json) = analyzer_json(&["compare", p(&nondet), p(&one)]);
    let unmatched = json["unmatched"].as_array().unwrap();
    assert_eq!(unmatched.len(), json["unmatched_target"].as_array().unwrap().len(), "{json}");
    let mut ranks: Vec<u64> = unmatched.iter().map(|u| u["rank"].as_u64().unwrap()).collect();
    ranks.sort_unstable();
    ranks.dedup();
    assert_eq!(ranks, [1, 2, 3], "{json}");
    assert!(unmatched.iter().all(|u| u["side"] == "target"), "{json}");
}

const OVERFLOW_ON_RANK_2: &str =
    r#"{"faults": {"overflow": {"op": "model/layer_1/mlp/fc2/MatMul", "step": 1, "rank": 2}}}"#;

#[test]
fn without_hccl_calls_or_with_ranks_of_the_job_missing_no_all_clear_is_given() {
    let dir = scratch();
    // The job's HCCL calls not recorded: one node's part of it has no collective to miss members of.
    let off = record_with(dir.path(), "off", OVERFLOW_ON_RANK_2, RANKS, &[("ACCUTRACE_COLLECTIVES", "off")]);
    let [node0, _] = split_nodes(&off, &dir.path().join("off-nodes"));
    let (code, out, err) = analyzer(&["ranks", p(&node0)]);
    assert_eq!(code, 2, "{out}\n{err}");
    assert!(out.starts_with("INCOMPLETE INPUT: "), "{out}");
    assert!(out.contains("the job had 4 ranks") && out.contains("ranks 2, 3 are missing"), "{out}");
    assert!(out.contains("no HCCL call was recorded on any of the 2 ranks"), "{out}");
    assert!(!out.contains("No anomaly across the ranks") && !out.contains("members agree"), "{out}");
    // Through scan and merge: the job's size travels in the summaries.
    let summaries = dir.path().join("off-s0");
    assert_eq!(analyzer(&["scan", p(&node0), "-o", p(&summaries)]).0, 0, "scan answers for its node");
    let (code, out, _) = analyzer(&["merge", p(&summaries)]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("the job had 4 ranks") && !out.contains("members agree"), "{out}");
    // Every rank present but no call recorded: still no all-clear about collectives nobody saw.
    let (code, json) = analyzer_json(&["ranks", p(&off)]);
    assert_eq!(code, 2, "{json}");
    let problems = json["input_problems"].to_string();
    assert!(problems.contains("no HCCL call was recorded on any of the 4 ranks"), "{json}");
    assert!(!problems.contains("the job had"), "{json}");
    // The report page of the node: no all-clear across ranks either.
    let file = dir.path().join("off-node0.html");
    let (code, out, err) = analyzer(&["report", p(&node0), "-o", p(&file), "--no-progress"]);
    assert_eq!(code, 2, "{out}\n{err}");
    assert!(!report_page(&file).contains("NO ANOMALY ACROSS RANKS"));
    // Collectives recorded, one node's share: the job's size is named too.
    let [node0, _] = split_nodes(&runs().healthy, &dir.path().join("healthy-nodes"));
    let (code, out, _) = analyzer(&["ranks", p(&node0)]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("the job had 4 ranks") && out.contains("of 4 members recorded it"), "{out}");
}

#[test]
fn one_rank_has_no_answer_across_ranks_and_a_partial_selection_speaks_only_of_its_ranks() {
    let r = runs();
    // One rank selected: nothing to compare it with.
    let (code, out, _) = analyzer(&["ranks", p(&r.bitflip), "--rank", "1"]);
    assert_eq!(code, 2, "{out}");
    assert!(out.starts_with("REFUSED: one rank is selected (rank 1, --rank)"), "{out}");
    assert!(out.contains("NO ANSWER ACROSS RANKS") && !out.contains("No anomaly across the ranks"), "{out}");
    // Two of four: the answer is theirs, and the ranks left out are not said to show no anomaly.
    let (code, out, _) = analyzer(&["ranks", p(&r.bitflip), "--rank", "0", "--rank", "1"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.starts_with("WARNING: the answer is for a selection, not the whole job (--rank 0-1)"),
        "{out}"
    );
    assert!(out.contains("FIRST ANOMALY in the selection (--rank 0-1; ranks 2, 3 not examined)"), "{out}");
    assert!(out.contains("ranks 2, 3 not examined (the selection)"), "{out}");
    assert!(!out.contains("ranks 2, 3 met it"), "{out}");
    // The same selection written as a list, as users write ranks, is the same question.
    assert_eq!(analyzer(&["ranks", p(&r.bitflip), "--rank", "0,1"]).1, out);
    let (code, out, _) = analyzer(&["ranks", p(&r.healthy), "--rank", "0", "--rank", "1"]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("No anomaly across the ranks in the selection (--rank 0-1; ranks 2, 3 not examined)"),
        "{out}"
    );
    // A one-rank run.
    let dir = scratch();
    let one = record_with(dir.path(), "one", "{}", "1", &[]);
    let (code, out, _) = analyzer(&["ranks", p(&one)]);
    assert_eq!(code, 2, "{out}");
    assert!(out.starts_with("REFUSED: the run holds one rank (rank 0)"), "{out}");
    assert!(!out.contains("No anomaly across the ranks"), "{out}");
}

/// `--rank 1 --rank 2` of a job that overflowed on rank 0: of ranks 0 and 3 only the HCCL calls were kept, to
/// order the ranks, so neither is the first anomaly, where it began, or reached, in the table, JSON or page.
#[test]
fn a_selection_of_several_ranks_names_no_rank_outside_it_as_the_first_anomaly() {
    let dir = scratch();
    let run = record(
        dir.path(),
        "overflow-rank0",
        r#"{"faults": {"overflow": {"op": "model/layer_1/mlp/fc2/MatMul", "step": 1, "rank": 0}}}"#,
    );
    let selection = ["--rank", "1", "--rank", "2", "--no-progress"];
    let (code, json) = analyzer_json(&[&["ranks", p(&run)][..], &selection].concat());
    assert_eq!(code, 1, "{json}");
    let origins = json["origins"].as_array().unwrap();
    assert_eq!((origins[0]["rank"].as_u64(), origins[0]["step"].as_u64()), (Some(1), Some(1)), "{json}");
    assert_eq!(origins[0]["op"], "HcclAllReduce", "{json}");
    for o in origins {
        assert!([1, 2].contains(&o["rank"].as_u64().unwrap()), "an origin outside the selection: {json}");
    }
    for s in json["spread"].as_array().unwrap() {
        assert!([1, 2].contains(&s["rank"].as_u64().unwrap()), "a spread outside the selection: {json}");
    }
    let per_rank: Vec<&String> = json["anomalous_per_step"].as_object().unwrap().keys().collect();
    assert_eq!(per_rank, ["1", "2"], "{json}");

    let (code, out, _) = analyzer(&[&["ranks", p(&run)][..], &selection].concat());
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(
            "FIRST ANOMALY in the selection (--rank 1-2; ranks 0, 3 not examined): ranks 1, 2 step 1: \
             HcclAllReduce [HcclAllReduce]"
        ),
        "{out}"
    );
    assert!(!out.contains("rank 0 step") && !out.contains("rank 0 where it began"), "{out}");
    assert!(!out.contains("ranks 1, 2 not reached"), "{out}");

    let file = dir.path().join("selection.html");
    let (code, out, err) = analyzer(&[&["report", p(&run), "-o", p(&file)][..], &selection].concat());
    assert!(code == 1, "{out}\n{err}");
    let html = report_page(&file);
    assert!(html.contains("<b>FIRST ANOMALY ACROSS RANKS</b> ranks 1, 2 step 1: "), "{out}");
    assert!(!html.contains("rank 0 step 1"), "{out}");
    // How far it spread is counted among the ranks examined, not the job's.
    assert!(
        html.contains("of the 2 ranks examined (of 4, in the selection <code>--rank 1-2</code>)"),
        "{html}"
    );
}

/// A gradient all-reduce whose sum overflows fp16 from every rank's finite gradients (a loss scale of 2^17 at
/// step 0): its output is one value for every member, so the anomaly began there on all of them together,
/// not on the lowest rank with the others "not reached" and listed as anomalies of their own. A member that
/// did not record the call is not named among them, and the answer says it may be where it began. `overflow`
/// says the same: the overflow began in the call, not "on another rank".
#[test]
fn a_collective_anomalous_on_every_member_began_on_all_of_them() {
    let dir = scratch();
    let run = record(dir.path(), "sum-overflows", r#"{"loss_scale": {"initial": 131072}}"#);
    let (code, json) = analyzer_json(&["ranks", p(&run), "--no-progress"]);
    assert_eq!(code, 1, "{json}");
    let origins = json["origins"].as_array().unwrap();
    assert_eq!(origins.len(), 1, "one origin, not one per member: {json}");
    assert_eq!((origins[0]["rank"].as_u64(), origins[0]["step"].as_u64()), (Some(0), Some(0)), "{json}");
    assert_eq!(origins[0]["op"], "HcclAllReduce", "{json}");
    assert_eq!(origins[0]["began_on"], serde_json::json!([0, 1, 2, 3]), "{json}");
    let spread = json["spread"].as_array().unwrap();
    assert_eq!(spread.len(), 4, "{json}");
    assert!(spread.iter().all(|s| s["via"].is_null()), "each member is where it began: {json}");

    let (code, out, _) = analyzer(&["ranks", p(&run), "--no-progress"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("FIRST ANOMALY: ranks 0-3 step 0: HcclAllReduce [HcclAllReduce]"), "{out}");
    assert!(out.contains("\n  it began there on ranks 0-3 together: "), "{out}");
    assert!(out.contains("\n  ranks 0-3 where it began, together, from HcclAllReduce at step 0"), "{out}");
    assert!(!out.contains("not reached") && !out.contains("other anomalies"), "{out}");
    let (code, csv, _) = analyzer(&["ranks", p(&run), "--format", "csv", "--no-progress"]);
    assert_eq!(code, 1, "{csv}");
    let rows: Vec<&str> = csv.lines().collect();
    assert!(rows[0].ends_with(",detail,began_on,independently_on") && rows.len() == 2, "{csv}");
    assert!(rows[1].starts_with("0,0,0,HcclAllReduce,") && rows[1].ends_with(",0-3,"), "{csv}");

    let file = dir.path().join("sum-overflows.html");
    let (code, out, err) = analyzer(&["report", p(&run), "-o", p(&file), "--no-progress"]);
    assert_eq!(code, 1, "{out}\n{err}");
    let html = report_page(&file);
    assert!(html.contains("<b>FIRST ANOMALY ACROSS RANKS</b> ranks 0-3 step 0: "), "{out}");
    assert!(html.contains("it reached 4 of 4 ranks"), "{out}");
    assert!(html.contains("it began there on ranks 0-3 together: "), "{out}");
    assert!(!html.contains("more anomalies that nothing anomalous happened before"), "{out}");
    assert!(html.contains(", where it began on ranks 0-3 together</td>"), "the origins table: {out}");
    // The answers lead; the checklist's failure (HCCL_DETERMINISTIC unset) follows them, still shown.
    let at = |what: &str| html.find(what).unwrap_or_else(|| panic!("{what}: {out}"));
    assert!(at("<b>OVERFLOW BEGAN IN A COLLECTIVE</b>") < at("<b>FIRST ANOMALY ACROSS RANKS</b>"), "{out}");
    assert!(at("<b>FIRST ANOMALY ACROSS RANKS</b>") < at("<b>CHECK FAILS</b> determinism"), "{out}");
    // `overflow` of the same run: every member's send buffer was finite, so the origin is in this data, the
    // call itself, and not "on another rank".
    assert!(html.contains("<b>OVERFLOW BEGAN IN A COLLECTIVE</b> step 0 ranks 0-3: "), "{out}");
    let (code, out, _) = analyzer(&["overflow", p(&run), "--no-progress"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("OVERFLOW BEGAN IN A COLLECTIVE: step 0 ranks 0-3: HcclAllReduce #1 on "), "{out}");
    assert!(out.contains("  no op produced it: every member's send buffer was finite (ranks 0-3)"), "{out}");
    assert!(!out.contains("not in this data") && !out.contains("arrived through a collective"), "{out}");
    let (_, json) = analyzer_json(&["overflow", p(&run), "--no-progress"]);
    for a in json["arrivals"].as_array().unwrap() {
        assert_eq!(a["began_here_on"], serde_json::json!([0, 1, 2, 3]), "{json}");
    }
    let (_, out, _) = analyzer(&["watch", p(&run), "--no-progress"]);
    assert!(
        out.contains(": began in HcclAllReduce #1 on ") && !out.contains("origin is on another"),
        "{out}"
    );
    // Two of the four members examined: what the others sent was not, so nothing is concluded from it.
    let (_, out, _) = analyzer(&["overflow", p(&run), "--rank", "0-1", "--no-progress"]);
    assert!(out.contains("OVERFLOW ARRIVED THROUGH A COLLECTIVE: step 0 rank 0: "), "{out}");

    // Rank 1's files lost: the three members recorded began there; rank 1 may be where it began.
    let copy = without_rank(&run, 1, &dir.path().join("without-rank-1"));
    let (code, out, err) = analyzer(&["ranks", p(&copy), "--no-progress"]);
    assert_eq!(code, 2, "{out}\n{err}");
    assert!(out.contains("FIRST ANOMALY: ranks 0, 2, 3 step 0: HcclAllReduce"), "{out}");
    assert!(
        out.contains("which 3 of its 4 members recorded (ranks 0, 2, 3): a member that was not"),
        "{out}"
    );
    assert!(!out.contains("not reached"), "{out}");
}

/// A loss scale so high that each rank's own backward overflows at step 0, before the gradient all-reduce
/// joins them: the same op overflowing on several ranks began there on each, independently. The answer read
/// 'rank 2 where it began, ranks 0, 1, 3 not reached', the other ranks' same op among 'other anomalies';
/// now it names them together and says they are independent, in the table, JSON, CSV and the page.
#[test]
fn the_same_op_overflowing_on_several_ranks_in_one_step_began_on_each_independently() {
    let dir = scratch();
    let run = record(dir.path(), "each-overflows", r#"{"loss_scale": {"initial": 262144}}"#);
    let (code, json) = analyzer_json(&["ranks", p(&run), "--no-progress"]);
    assert_eq!(code, 1, "{json}");
    let origins = json["origins"].as_array().unwrap();
    let first = &origins[0];
    let (op, step) = (first["op"].as_str().unwrap(), first["step"].as_u64().unwrap());
    assert!(first["collective"].is_null(), "in its own compute: {json}");
    let alike: Vec<u64> = origins
        .iter()
        .filter(|o| o["op"] == op && o["step"].as_u64() == Some(step))
        .map(|o| o["rank"].as_u64().unwrap())
        .collect();
    assert!(alike.len() > 1, "the same op overflowed on several ranks: {json}");
    let mut sorted = alike.clone();
    sorted.sort_unstable();
    for o in origins.iter().filter(|o| o["op"] == op) {
        assert_eq!(o["independently_on"], serde_json::json!(sorted), "{json}");
    }
    let (code, out, _) = analyzer(&["ranks", p(&run), "--no-progress"]);
    assert_eq!(code, 1, "{out}");
    // The headline names them all (`ranks 2, 3`).
    let head = out.lines().find_map(|l| l.strip_prefix("FIRST ANOMALY: ")).unwrap_or_else(|| panic!("{out}"));
    let ranks = head.split(" step ").next().unwrap();
    assert!(ranks.starts_with("ranks ") && sorted.iter().all(|r| ranks.contains(&r.to_string())), "{out}");
    assert!(head.ends_with(&format!(" step {step}: {op} [{}]", first["op_type"].as_str().unwrap())), "{out}");
    assert!(
        out.contains(&format!(
            "\n  the same op overflowed on {ranks} at step {step}, independently: each in its own compute, \
             before any collective joined them"
        )),
        "{out}"
    );
    for rank in &alike[1..] {
        assert!(out.contains(&format!("\n  rank {rank}: overflow: {op}.output.")), "{out}");
        assert!(
            !out.contains(&format!("\n  rank {rank} step {step}: {op} [")),
            "not among the others: {out}"
        );
    }
    let not_reached = out.lines().find(|l| l.ends_with(" not reached")).unwrap_or_default();
    assert!(alike.iter().all(|r| !not_reached.contains(&r.to_string())), "{out}");

    let (code, csv, _) = analyzer(&["ranks", p(&run), "--format", "csv", "--no-progress"]);
    assert_eq!(code, 1, "{csv}");
    let rows: Vec<&str> = csv.lines().collect();
    assert!(rows[0].ends_with(",began_on,independently_on"), "{csv}");
    let last = |row: &str| row.rsplit(',').next().unwrap().trim_matches('"').to_string();
    let of_op: Vec<&&str> = rows[1..].iter().filter(|r| r.contains(&format!(",{op},"))).collect();
    assert_eq!(of_op.len(), alike.len(), "{csv}");
    assert!(of_op.iter().all(|r| last(r) == last(of_op[0]) && !last(r).is_empty()), "{csv}");

    let file = dir.path().join("each-overflows.html");
    let (code, out, err) = analyzer(&["report", p(&run), "-o", p(&file), "--no-progress"]);
    assert_eq!(code, 1, "{out}\n{err}");
    let html = report_page(&file);
    assert!(html.contains(&format!("<b>FIRST ANOMALY ACROSS RANKS</b> {ranks} step {step}: ")), "{out}");
    assert!(
        html.contains(&format!("the same op overflowed on {ranks} at step {step}, independently")),
        "{out}"
    );
    assert!(html.contains(&format!("none: the same op on {ranks}, independently</td>")), "the origins table");
    let began =
        format!("it began on {} of 4 ranks independently, and rank {}'s reached ", alike.len(), alike[0]);
    assert!(html.contains(&began), "{out}");
    // `overflow` (each rank's first overflowing op at each step) says it of each of them too.
    let (code, json) = analyzer_json(&["overflow", p(&run), "--no-progress"]);
    assert_eq!(code, 1, "{json}");
    let of_op: Vec<&serde_json::Value> =
        json["origins"].as_array().unwrap().iter().filter(|o| o["op"] == op && o["step"] == step).collect();
    assert_eq!(of_op.len(), alike.len(), "{json}");
    assert!(of_op.iter().all(|o| o["independently_on"] == serde_json::json!(sorted)), "{json}");
    let (_, out, _) = analyzer(&["overflow", p(&run), "--no-progress"]);
    let said = format!(
        "\n  the same op overflowed on {ranks} at step {step}, each from finite inputs in its own compute"
    );
    assert_eq!(out.matches(&said).count(), alike.len(), "{out}");
    let (_, csv, _) = analyzer(&["overflow", p(&run), "--format", "csv", "--no-progress"]);
    assert!(
        csv.starts_with("step,rank,op,op_type,output,nan,inf,saturated,spread_to,status,independently_on\n")
    );
    let cells = |row: &str| row.rsplit(',').next().unwrap().to_string();
    let rows: Vec<&str> = csv.lines().filter(|r| r.contains(&format!(",{op},"))).collect();
    assert!(rows.len() == alike.len() && rows.iter().all(|r| cells(r) == cells(rows[0])), "{csv}");
    // The page's overflow verdict says it of its first overflow, as the terminal does.
    let first_overflow = out.split("FIRST OVERFLOW: ").nth(1).unwrap_or_else(|| panic!("{out}"));
    let first_said = first_overflow.split("\n\n").next().unwrap().lines().nth(2).unwrap().trim();
    assert!(first_said.starts_with("the same op overflowed on "), "{out}");
    // The ranks whose own origin at that step is another op: named under the first, with where to learn
    // which came first across the job (this report orders by rank number).
    let origins = json["origins"].as_array().unwrap();
    let first = &origins[0];
    let mut others: Vec<u64> = origins[1..]
        .iter()
        .filter(|o| o["step"] == first["step"] && o["op"] != first["op"])
        .map(|o| o["rank"].as_u64().unwrap())
        .collect();
    others.dedup();
    if !others.is_empty() {
        let named = others.iter().map(u64::to_string).collect::<Vec<_>>().join(", ");
        assert!(
            first_overflow.contains(&format!(
                "\n  ranks {named} began an overflow of their own at step {} too (below): which came first \
                 across the job is what `analyzer ranks {}` orders",
                first["step"],
                p(&run)
            )),
            "{out}"
        );
    }
    assert!(html.contains(&format!("<p class=\"verdict detail\">{first_said}</p>")), "{out}");
}

/// A copy of `run` at `to` without rank `rank`'s streams: as if its node's files were lost.
fn without_rank(run: &Path, rank: u32, to: &Path) -> PathBuf {
    std::fs::create_dir(to).unwrap();
    for e in std::fs::read_dir(run).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().to_string_lossy().into_owned();
        if name.contains(&format!("-rank{rank}-")) {
            continue;
        }
        if e.path().is_dir() {
            copy_dir(&e.path(), &to.join(&name));
        } else {
            std::fs::copy(e.path(), to.join(&name)).unwrap();
        }
    }
    to.to_path_buf()
}

/// A copy of `run` whose rank `rank` stream ends as a killed writer leaves it: its last segment unsealed
/// (sealed end 0) and cut 5000 bytes short mid-record, the manifest saying the stream was not sealed.
fn with_torn_tail(run: &Path, rank: u32, to: &Path) -> PathBuf {
    for name in names_in(run) {
        if run.join(&name).is_dir() {
            copy_dir(&run.join(&name), &to.join(&name));
        } else {
            std::fs::create_dir_all(to).unwrap();
            std::fs::copy(run.join(&name), to.join(&name)).unwrap();
        }
    }
    let stream =
        names_in(to).into_iter().find(|n| n.contains(&format!("-rank{rank}-"))).expect("the rank's stream");
    let mut segments: Vec<String> =
        names_in(&to.join(&stream)).into_iter().filter(|n| n.starts_with("seg-")).collect();
    segments.sort();
    let segment = to.join(&stream).join(segments.last().unwrap());
    let mut bytes = std::fs::read(&segment).unwrap();
    let sealed_end = u64::from_le_bytes(bytes[56..64].try_into().unwrap()) as usize;
    bytes[56..64].fill(0);
    bytes.truncate(sealed_end - 5000);
    std::fs::write(&segment, bytes).unwrap();
    let file = to.join("manifest.json");
    let mut manifest: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    for s in manifest["streams"].as_array_mut().unwrap() {
        if s["dir"] == stream.as_str() {
            s["sealed"] = false.into();
        }
    }
    std::fs::write(&file, serde_json::to_vec(&manifest).unwrap()).unwrap();
    to.to_path_buf()
}

#[test]
fn a_torn_rank_leads_merge_when_another_ranks_summary_is_lost_and_a_baselines_is_named_as_its() {
    let r = runs();
    let dir = scratch();
    let torn = with_torn_tail(&r.healthy, 3, &dir.path().join("torn"));
    let (whole, lost) = (dir.path().join("whole"), dir.path().join("lost"));
    let (code, out, _) = analyzer(&["scan", p(&torn), "-o", p(&whole)]);
    assert_eq!(code, 2, "{out}");
    assert!(out.starts_with("INCOMPLETE INPUT: ") && out.contains("not sealed"), "{out}");
    // Rank 0's summary (the scan's lowest rank) does not reach merge: the missing rank leads, and rank 3's
    // torn tail still shows.
    assert_eq!(analyzer(&["scan", p(&torn), "-o", p(&lost)]).0, 2);
    std::fs::remove_file(lost.join("rank000000.parquet")).unwrap();
    let (code, out, err) = analyzer(&["merge", p(&lost)]);
    assert_eq!(code, 2, "{out}\n{err}");
    assert!(out.starts_with("INCOMPLETE INPUT: the job had 4 ranks"), "{out}");
    assert!(out.contains("ranks 1-3); rank 0 is missing"), "{out}");
    assert!(out.contains("-rank3-") && out.contains("not sealed"), "rank 3's torn tail is lost: {out}");
    assert!(!out.contains("No anomaly across the ranks"), "{out}");
    // The torn run as the baseline: its problem leads as the baseline's, naming it; as the run, as its own.
    let good = dir.path().join("good");
    assert_eq!(analyzer(&["scan", p(&r.healthy), "-o", p(&good)]).0, 0);
    let (code, out, _) = analyzer(&["merge", p(&good), "--baseline", p(&whole)]);
    assert_eq!(code, 2, "{out}");
    let baselines = format!("INCOMPLETE INPUT: in the baseline {}: ", p(&whole));
    assert!(out.lines().any(|l| l.starts_with(&baselines) && l.contains("not sealed")), "{out}");
    let (code, out, _) = analyzer(&["merge", p(&whole), "--baseline", p(&good)]);
    assert_eq!(code, 2, "{out}");
    assert!(out.lines().any(|l| l.starts_with("INCOMPLETE INPUT: ") && l.contains("not sealed")), "{out}");
    assert!(
        !out.contains("INCOMPLETE INPUT: in the baseline"),
        "the run's own problem is not the baseline's: {out}"
    );
    // The same of captures: `ranks --baseline`.
    let (code, out, _) = analyzer(&["ranks", p(&r.healthy), "--baseline", p(&torn)]);
    assert_eq!(code, 2, "{out}");
    let baselines = format!("INCOMPLETE INPUT: in the baseline {}: ", p(&torn));
    assert!(out.lines().any(|l| l.starts_with(&baselines) && l.contains("not sealed")), "{out}");
}

#[test]
fn a_baseline_of_another_job_is_refused_naming_the_ranks_it_lacks() {
    let r = runs();
    let dir = scratch();
    // Another model, two ranks: diff's configuration check refuses it, and the ranks it lacks are named.
    let other = record_with(dir.path(), "other", r#"{"fusion": true}"#, "2", &[]);
    let (code, out, _) = analyzer(&["ranks", p(&r.wrong_data), "--baseline", p(&other)]);
    assert_eq!(code, 2, "{out}");
    assert!(out.starts_with("REFUSED: the baseline "), "{out}");
    assert!(out.contains("ranks: the baseline has no op of ranks 2, 3"), "{out}");
    assert!(!out.contains("FIRST ANOMALY") && out.contains("NO ANSWER ACROSS RANKS"), "{out}");
    let (code, json) =
        analyzer_json(&["ranks", p(&r.wrong_data), "--baseline", p(&other), "--allow-incomplete"]);
    assert_eq!(code, 2, "a refusal is not excused: {json}");
    assert_eq!(json["origins"], serde_json::json!([]), "{json}");
    // The same job with ranks missing (one node's share as the baseline), as runs and as summaries.
    let [node0, _] = split_nodes(&r.healthy, &dir.path().join("healthy-nodes"));
    let (code, out, _) = analyzer(&["ranks", p(&r.wrong_data), "--baseline", p(&node0)]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("REFUSED: ") && out.contains("the baseline has no op of ranks 2, 3"), "{out}");
    let (good, bad) = (dir.path().join("good0"), dir.path().join("bad"));
    assert_eq!(analyzer(&["scan", p(&node0), "-o", p(&good)]).0, 0);
    assert_eq!(analyzer(&["scan", p(&r.wrong_data), "-o", p(&bad)]).0, 0);
    let (code, out, _) = analyzer(&["merge", p(&bad), "--baseline", p(&good)]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("the baseline has no op of ranks 2, 3") && !out.contains("FIRST ANOMALY"), "{out}");
}

#[test]
fn in_an_overflow_capture_other_ranks_calls_are_never_placed_at_step_0() {
    let dir = scratch();
    let run = record_with(dir.path(), "ovf", OVERFLOW_ON_RANK_2, RANKS, &[("ACCUTRACE_OVERFLOW", "1")]);
    let (code, json) = analyzer_json(&["ranks", p(&run)]);
    assert_eq!(code, 1, "{json}");
    let first = &json["origins"][0];
    assert_eq!((first["rank"].as_u64(), first["step"].as_u64()), (Some(2), Some(1)), "{json}");
    let spread = json["spread"].as_array().unwrap();
    assert!(spread.len() > 1, "{json}");
    for s in spread {
        // Known to be step 1 (a member that dumped ops around the call tells it), or unknown: never 0.
        assert!(s["step"].is_null() || s["step"].as_u64() >= Some(1), "{s}");
    }
    for (rank, steps) in json["anomalous_per_step"].as_object().unwrap() {
        assert!(steps.get("0").is_none(), "rank {rank}: nothing anomalous at step 0: {json}");
    }
    let (_, out, _) = analyzer(&["ranks", p(&run)]);
    assert!(!out.contains("at step 0"), "{out}");
}

#[test]
fn a_scan_of_a_selection_is_merged_as_that_selection() {
    let r = runs();
    let dir = scratch();
    let ranks01 = dir.path().join("ranks01");
    let (code, _, err) = analyzer(&["scan", p(&r.overflow), "--rank", "0", "--rank", "1", "-o", p(&ranks01)]);
    assert_eq!(code, 0, "{err}");
    let (code, out, _) = analyzer(&["merge", p(&ranks01)]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.starts_with("WARNING: the answer is for a selection, not the whole job (--rank 0-1)"),
        "{out}"
    );
    assert!(out.contains("FIRST ANOMALY in the selection (--rank 0-1; ranks 2, 3 not examined)"), "{out}");
    let (_, json) = analyzer_json(&["merge", p(&ranks01)]);
    assert_eq!(json["selection"]["ranks"], serde_json::json!([0, 1]), "{json}");
    // One rank scanned: no answer across ranks at all.
    let rank0 = dir.path().join("rank0");
    assert_eq!(analyzer(&["scan", p(&r.overflow), "--rank", "0", "-o", p(&rank0)]).0, 0);
    let (code, out, _) = analyzer(&["merge", p(&rank0)]);
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("REFUSED: one rank is selected (rank 0, --rank)") && !out.contains("FIRST ANOMALY"),
        "{out}"
    );
    // Ops selected: an all-clear is said of the selection only.
    let softmax = dir.path().join("softmax");
    assert_eq!(analyzer(&["scan", p(&r.overflow), "--op", "*Softmax*", "-o", p(&softmax)]).0, 0);
    let (code, out, _) = analyzer(&["merge", p(&softmax)]);
    assert!(out.contains("the answer is for a selection, not the whole job (--op '*Softmax*')"), "{out}");
    assert!(
        code != 0 || out.contains("No anomaly across the ranks in the selection (--op '*Softmax*')"),
        "{out}"
    );
}

/// HCCL calls recorded without their buffers (`ACCUTRACE_COLLECTIVES=meta`): no collective's contents were
/// compared, so neither `ranks` nor `merge` says that the members agree; that leads, exit 2. The same
/// healthy job with buffers (the default) is the all-clear, exit 0.
#[test]
fn collectives_recorded_without_buffers_give_no_all_clear_on_their_contents() {
    let dir = scratch();
    let meta = record_with(dir.path(), "meta", "{}", "2", &[("ACCUTRACE_COLLECTIVES", "meta")]);
    let (code, out, err) = analyzer(&["ranks", p(&meta)]);
    assert_eq!(code, 2, "{out}\n{err}");
    assert!(out.starts_with("INCOMPLETE INPUT: "), "{out}");
    assert!(out.contains("HCCL calls were recorded without their buffers"), "{out}");
    assert!(!out.contains("No anomaly across the ranks") && !out.contains("members agree"), "{out}");
    let summaries = dir.path().join("meta-summaries");
    assert_eq!(analyzer(&["scan", p(&meta), "-o", p(&summaries)]).0, 0, "scan writes the summaries");
    let (code, out, _) = analyzer(&["merge", p(&summaries)]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("without their buffers") && !out.contains("members agree"), "{out}");
    let stats = record_with(dir.path(), "stats", "{}", "2", &[]);
    let (code, out, err) = analyzer(&["ranks", p(&stats)]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("members agree") && !out.contains("without their buffers"), "{out}");
}
