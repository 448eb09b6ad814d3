//! Another tool's dump callback registered before the collector's (MindSpore's or msprobe's dump): the
//! runtime answers ACL_SUCCESS to the collector's registration and keeps sending every chunk to the first
//! one (`SIM_ACL_OTHER_DUMP_CALLBACK=1` makes the simulated runtime do that). The capture is empty; the
//! collector says why at the end, and every analyzer command that reads it leads with INCOMPLETE INPUT and
//! exits 2: an empty capture must never read as "no overflow" or PASS.

mod common;

use common::*;
use std::path::Path;
use std::process::Command;

const MODEL: &str = r#"{"n_layers": 2}"#;

/// `analyzer record` of an eager run (which calls accutrace_step_end after each step) with `env`;
/// returns the record's stderr.
fn record_eager(model: &Path, run: &Path, env: &[(&str, &str)]) -> String {
    let (collector, lib, sim_train) = (collector_lib(), runtime_lib(), sim_train_bin());
    let out = Command::new(analyzer_bin())
        .args(["record", "-o", path_str(run), "--collector", path_str(&collector), "--no-progress", "--"])
        .args([path_str(&sim_train), "--model", path_str(model), "--steps", "2", "--eager"])
        .args(["--lib", path_str(&lib)])
        .envs(env.iter().copied())
        .output()
        .expect("run analyzer record");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "record failed: {stderr}");
    stderr
}

#[test]
fn a_capture_emptied_by_another_dump_callback_leads_every_command_as_incomplete() {
    let dir = scratch();
    let model = model_file(dir.path(), "model.json", MODEL);
    let run = dir.path().join("run");
    let stderr = record_eager(&model, &run, &[("SIM_ACL_OTHER_DUMP_CALLBACK", "1")]);
    assert!(
        stderr.contains("accutrace: ")
            && stderr.contains("no dump chunk arrived")
            && stderr.contains("registered first"),
        "the collector names the likely cause at the end: {stderr}"
    );
    let bench = dir.path().join("bench");
    sim_bench(&model, 2, &bench);
    for args in [
        vec!["overflow", path_str(&run)],
        vec!["inspect", path_str(&run)],
        vec!["compare", path_str(&run), path_str(&bench)],
    ] {
        let (code, out, err) = analyzer(&args);
        assert_eq!(code, 2, "{args:?} over an empty capture: {out}{err}");
        let lead = out.lines().next().unwrap_or_default();
        assert!(
            lead.starts_with("INCOMPLETE INPUT: ") && lead.contains("no dump chunk arrived"),
            "{args:?}: the empty capture leads the output: {out}{err}"
        );
    }
}

/// The silent case: one rank of a data-parallel job had the other tool's callback, the other rank's capture
/// is whole, so nothing else tells that rank 1 captured nothing (overflow said "No op produced inf/NaN",
/// exit 0). Rank 1 ran no step hook here: its HCCL calls say it ran.
#[test]
fn one_rank_emptied_by_another_dump_callback_is_no_all_clear() {
    let dir = scratch();
    let model = model_file(dir.path(), "model.json", MODEL);
    let run = dir.path().join("run");
    let (collector, lib, sim_train, hccl) =
        (collector_lib(), runtime_lib(), sim_train_bin(), artifact("libhccl.so"));
    let out = Command::new(analyzer_bin())
        .args(["record", "-o", path_str(&run), "--collector", path_str(&collector), "--no-progress", "--"])
        .args([path_str(&sim_train), "--model", path_str(&model), "--steps", "2", "--ranks", "2"])
        .args(["--lib", path_str(&lib), "--hccl-lib", path_str(&hccl)])
        .env("SIM_ACL_OTHER_DUMP_CALLBACK", "rank:1")
        .output()
        .expect("run analyzer record");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "record failed: {stderr}");
    assert_eq!(stderr.matches("no dump chunk arrived").count(), 1, "rank 1 only: {stderr}");
    for args in [vec!["overflow", path_str(&run)], vec!["inspect", path_str(&run)]] {
        let (code, out, err) = analyzer(&args);
        assert_eq!(code, 2, "{args:?}: {out}{err}");
        let lead = out.lines().next().unwrap_or_default();
        assert!(
            lead.starts_with("INCOMPLETE INPUT: ")
                && lead.contains("rank1")
                && lead.contains("no dump chunk arrived"),
            "{args:?}: rank 1's empty stream leads the output: {out}{err}"
        );
        assert_eq!(out.matches("no dump chunk arrived").count(), 1, "rank 0's stream is whole: {out}");
    }
}

/// A graph-mode job (aclmdlExecute, no step hook, no HCCL): the collector counts its model executions.
/// Before, nothing it saw said the job ran: it was silent, and the analyzer said only that the capture
/// "holds no ops", read without a problem.
#[test]
fn a_graph_job_emptied_by_another_dump_callback_is_named_by_its_model_executions() {
    let dir = scratch();
    let model = model_file(dir.path(), "model.json", MODEL);
    let run = dir.path().join("run");
    let out = sim_train(
        &model,
        2,
        None,
        &[
            ("LD_PRELOAD", path_str(&collector_lib())),
            ("ACCUTRACE_DIR", path_str(&run)),
            ("SIM_ACL_OTHER_DUMP_CALLBACK", "1"),
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no dump chunk arrived") && stderr.contains("model execution"), "{stderr}");
    let (code, out, err) = analyzer(&["overflow", path_str(&run)]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(out.starts_with("INCOMPLETE INPUT: ") && out.contains("no dump chunk arrived"), "{out}{err}");
}
