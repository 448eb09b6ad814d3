//! Another tool's dump callback registered before the collector's (MindSpore's or msprobe's dump): the
//! runtime answers ACL_SUCCESS to the collector's registration and keeps sending every chunk to the first
//! one (`SIM_ACL_OTHER_DUMP_CALLBACK=1` makes the simulated runtime do that through the exported
//! `acldumpRegCallback`, which the collector interposes; `unseen` where no interposer sees it; `after`
//! once the collector's holds the slot). The capture is empty; the collector says why at the end, and every
//! analyzer command that reads it leads with INCOMPLETE INPUT and exits 2, in every dump mode: an empty
//! capture must never read as "no overflow" or PASS. A callback registered after the collector's is the
//! other tool's loss, said at the end, and the capture reads whole.

/// The lead line's words when the collector saw the other callback hold the runtime's slot.
const SLOT_TAKEN: &str = "held the runtime's only dump callback slot";

mod common;

use common::*;
use std::path::Path;
use std::process::Command;

const MODEL: &str = r#"{"n_layers": 2}"#;

/// `analyzer record` of an eager run (which calls accutrace_step_end after each step) with `env`;
/// returns the record's stderr.
fn record_eager(model: &Path, run: &Path, env: &[(&str, &str)]) -> String {
    record_eager_with(model, run, &[], &[], env)
}

/// [`record_eager`] with more `record` options (before `--`) and more sim-train options.
fn record_eager_with(
    model: &Path,
    run: &Path,
    record_args: &[&str],
    train_args: &[&str],
    env: &[(&str, &str)],
) -> String {
    let (collector, lib, sim_train) = (collector_lib(), runtime_lib(), sim_train_bin());
    let out = Command::new(analyzer_bin())
        .args(["record", "-o", path_str(run), "--collector", path_str(&collector), "--no-progress"])
        .args(record_args)
        .arg("--")
        .args([path_str(&sim_train), "--model", path_str(model), "--steps", "2", "--eager"])
        .args(train_args)
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
        stderr.contains("accutrace: ") && stderr.contains(SLOT_TAKEN),
        "the collector names the cause at the end: {stderr}"
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
            lead.starts_with("INCOMPLETE INPUT: ") && lead.contains(SLOT_TAKEN),
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
    assert_eq!(stderr.matches(SLOT_TAKEN).count(), 1, "rank 1 only: {stderr}");
    for args in [vec!["overflow", path_str(&run)], vec!["inspect", path_str(&run)]] {
        let (code, out, err) = analyzer(&args);
        assert_eq!(code, 2, "{args:?}: {out}{err}");
        let lead = out.lines().next().unwrap_or_default();
        assert!(
            lead.starts_with("INCOMPLETE INPUT: ") && lead.contains("rank1") && lead.contains(SLOT_TAKEN),
            "{args:?}: rank 1's empty stream leads the output: {out}{err}"
        );
        assert_eq!(out.matches(SLOT_TAKEN).count(), 1, "rank 0's stream is whole: {out}");
    }
}

/// A graph-mode job (aclmdlExecute, no step hook, no HCCL) whose other callback the collector did not see
/// registered: the collector counts its model executions. Before, nothing it saw said the job ran: it was
/// silent, and the analyzer said only that the capture "holds no ops", read without a problem.
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
            ("SIM_ACL_OTHER_DUMP_CALLBACK", "unseen"),
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no dump chunk arrived") && stderr.contains("model execution"), "{stderr}");
    let (code, out, err) = analyzer(&["overflow", path_str(&run)]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(out.starts_with("INCOMPLETE INPUT: ") && out.contains("no dump chunk arrived"), "{out}{err}");
}

/// `--overflow` (dump_debug): a clean run rightly delivers nothing, so an empty stream is the normal answer.
/// Rank 1's callback was another tool's; rank 0's capture is whole and has no overflow, so `overflow` said
/// "No op produced inf/NaN", exit 0. The collector now sees the other registration and says so at the end;
/// `overflow` leads with it (naming rank 1's stream and what to do) and exits 2.
#[test]
fn an_overflow_capture_whose_callback_another_tool_held_is_no_all_clear() {
    let dir = scratch();
    let model = model_file(dir.path(), "model.json", MODEL);
    let run = dir.path().join("run");
    let (collector, lib, sim_train, hccl) =
        (collector_lib(), runtime_lib(), sim_train_bin(), artifact("libhccl.so"));
    let out = Command::new(analyzer_bin())
        .args(["record", "-o", path_str(&run), "--collector", path_str(&collector), "--no-progress"])
        .args(["--overflow", "--"])
        .args([path_str(&sim_train), "--model", path_str(&model), "--steps", "2", "--ranks", "2"])
        .args(["--lib", path_str(&lib), "--hccl-lib", path_str(&hccl)])
        .env("SIM_ACL_OTHER_DUMP_CALLBACK", "rank:1")
        .output()
        .expect("run analyzer record");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "record failed: {stderr}");
    assert_eq!(stderr.matches(SLOT_TAKEN).count(), 1, "rank 1's is named at the end: {stderr}");
    let (code, out, err) = analyzer(&["overflow", path_str(&run)]);
    assert_eq!(code, 2, "no all-clear over a capture another tool's callback held: {out}{err}");
    let lead = out.lines().next().unwrap_or_default();
    assert!(
        lead.starts_with("INCOMPLETE INPUT: ")
            && lead.contains("rank1")
            && lead.contains(SLOT_TAKEN)
            && lead.contains("Turn the other tool's dump off"),
        "the cause and what to do lead: {out}{err}"
    );
}

/// The same for one eager process in `--overflow` mode.
#[test]
fn an_eager_overflow_capture_whose_callback_another_tool_held_leads_as_incomplete() {
    let dir = scratch();
    let model = model_file(dir.path(), "model.json", MODEL);
    let run = dir.path().join("run");
    let stderr =
        record_eager_with(&model, &run, &["--overflow"], &[], &[("SIM_ACL_OTHER_DUMP_CALLBACK", "1")]);
    assert!(stderr.contains("accutrace: ") && stderr.contains(SLOT_TAKEN), "named at the end: {stderr}");
    let (code, out, err) = analyzer(&["overflow", path_str(&run)]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(out.starts_with("INCOMPLETE INPUT: ") && out.contains(SLOT_TAKEN), "{out}{err}");
}

/// The other tool registers after the collector: the runtime ignores it, the capture is whole (the overflow
/// the model makes is found). The collector says at the end that the other tool lost its dump; nothing
/// reads incomplete.
#[test]
fn a_callback_registered_after_ours_is_the_other_tool_s_loss_not_ours() {
    let dir = scratch();
    let faulty =
        r#"{"n_layers": 2, "faults": {"overflow": {"op": "model/layer_1/mlp/fc2/MatMul", "step": 1}}}"#;
    let model = model_file(dir.path(), "model.json", faulty);
    let run = dir.path().join("run");
    let stderr =
        record_eager_with(&model, &run, &["--overflow"], &[], &[("SIM_ACL_OTHER_DUMP_CALLBACK", "after")]);
    assert!(
        stderr.contains("registered a dump callback 1 time(s) while the collector's held")
            && stderr.contains("this capture is whole"),
        "the other tool's loss is said at the end: {stderr}"
    );
    assert!(!stderr.contains(SLOT_TAKEN), "{stderr}");
    let (code, out, err) = analyzer(&["overflow", path_str(&run)]);
    assert!(!out.contains("INCOMPLETE INPUT"), "the capture is whole: {out}{err}");
    assert!(out.contains("FIRST OVERFLOW: step 1"), "the overflow arrived through our callback: {out}{err}");
    assert_eq!(code, 1, "an overflow found: {out}{err}");
}

/// An eager job without the step hook and without HCCL (a non-Python job, `--no-python-hook`) whose other
/// callback the collector did not see: only its single-op launches say that it ran. Before, they were not
/// counted and the empty capture read as a clean one that "holds no ops".
#[test]
fn an_eager_job_without_the_step_hook_emptied_by_another_callback_is_named_by_its_single_ops() {
    let dir = scratch();
    let model = model_file(dir.path(), "model.json", MODEL);
    let run = dir.path().join("run");
    let stderr = record_eager_with(
        &model,
        &run,
        &["--no-python-hook"],
        &["--no-step-end"],
        &[("SIM_ACL_OTHER_DUMP_CALLBACK", "unseen")],
    );
    assert!(stderr.contains("no dump chunk arrived") && stderr.contains("single op(s)"), "{stderr}");
    for args in [vec!["overflow", path_str(&run)], vec!["inspect", path_str(&run)]] {
        let (code, out, err) = analyzer(&args);
        assert_eq!(code, 2, "{args:?}: {out}{err}");
        assert!(out.starts_with("INCOMPLETE INPUT: ") && out.contains("no dump chunk arrived"), "{out}{err}");
    }
}

/// An eager job without the step hook launching its ops by each of `launches` (`--eager-launch`,
/// `--resolve`), whose other callback the collector did not see: the collector names the single-op launches
/// at the end, and overflow and inspect lead with INCOMPLETE INPUT and exit 2.
fn single_op_launches_name_an_emptied_capture(launches: &[(&str, &str)]) {
    for &(launch, resolve) in launches {
        let dir = scratch();
        let model = model_file(dir.path(), "model.json", MODEL);
        let run = dir.path().join("run");
        let stderr = record_eager_with(
            &model,
            &run,
            &["--no-python-hook"],
            &["--no-step-end", "--eager-launch", launch, "--resolve", resolve],
            &[("SIM_ACL_OTHER_DUMP_CALLBACK", "unseen")],
        );
        assert!(
            stderr.contains("no dump chunk arrived") && stderr.contains("single op(s)"),
            "{launch}: {stderr}"
        );
        for args in [vec!["overflow", path_str(&run)], vec!["inspect", path_str(&run)]] {
            let (code, out, err) = analyzer(&args);
            assert_eq!(code, 2, "{launch} {args:?}: {out}{err}");
            let lead = out.lines().next().unwrap_or_default();
            assert!(
                lead.starts_with("INCOMPLETE INPUT: ") && lead.contains("no dump chunk arrived"),
                "{launch} {args:?}: {out}{err}"
            );
        }
    }
}

/// The same job on torch_npu's usual eager launch, `aclopCompileAndExecuteV2` (OpCommand, resolved with
/// `dlsym` on a handle as torch_npu's FunctionLoader does) or `aclopCompileAndExecute` (through the global
/// scope): those launches say that it ran too. Before, only aclopExecuteV2 was counted, and this empty
/// capture read as a clean one that "holds no ops".
#[test]
fn an_eager_job_on_compile_and_execute_emptied_by_another_callback_is_named_by_its_single_ops() {
    single_op_launches_name_an_emptied_capture(&[
        ("compile-and-execute-v2", "handle"),
        ("compile-and-execute", "global"),
    ]);
}

/// The same job launching each op by handle (`aclopCreateHandle`, then `aclopExecWithHandle`, a single-op
/// model matched once; resolved with `dlsym` on a handle) or through the deprecated `aclopExecute` (the
/// global scope): those launches say that it ran too. Before, neither was counted, and this empty capture
/// read as a clean one that "holds no ops".
#[test]
fn an_eager_job_on_exec_with_handle_or_execute_emptied_by_another_callback_is_named_by_its_single_ops() {
    single_op_launches_name_an_emptied_capture(&[("exec-with-handle", "handle"), ("execute", "global")]);
}

/// The other tool registers after the collector (ignored) and then turns its dump off with
/// `acldumpUnregCallback`, which removes whichever callback is registered: the collector's. Nothing arrives
/// after that; the collector names it at the end and the capture reads INCOMPLETE INPUT.
#[test]
fn a_callback_removed_by_another_tool_s_unregistration_is_incomplete() {
    let dir = scratch();
    let model = model_file(dir.path(), "model.json", MODEL);
    let run = dir.path().join("run");
    let stderr = record_eager(&model, &run, &[("SIM_ACL_OTHER_DUMP_CALLBACK", "after-unregister")]);
    const REMOVED: &str = "acldumpUnregCallback removed the collector's dump callback";
    assert!(stderr.contains("accutrace: ") && stderr.contains(REMOVED), "named at the end: {stderr}");
    for args in [vec!["overflow", path_str(&run)], vec!["inspect", path_str(&run)]] {
        let (code, out, err) = analyzer(&args);
        assert_eq!(code, 2, "{args:?}: {out}{err}");
        let lead = out.lines().next().unwrap_or_default();
        assert!(lead.starts_with("INCOMPLETE INPUT: ") && lead.contains(REMOVED), "{args:?}: {out}{err}");
    }
}
