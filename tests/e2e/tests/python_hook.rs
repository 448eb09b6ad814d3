//! `analyzer record -- python3 train.py`: the Python start-up hook it installs tells the collector where
//! each step ends (after `GradScaler.update`, or `Optimizer.step` without a scaler, a skipped step
//! included) and then runs the
//! `sitecustomize` it shadows. The framework is a stand-in `torch` package (`tests/e2e/python`) that launches
//! its ops on the simulated runtime; no real torch anywhere. Needs `python3` on PATH.

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;

fn python_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("python")
}

/// `analyzer record` of train.py with extra arguments; PYTHONPATH holds the stand-in torch and `extra`.
fn record(run: &Path, extra_path: &Path, record_args: &[&str], train_args: &[&str]) -> (String, String) {
    let python_path = format!("{}:{}", python_dir().display(), extra_path.display());
    let train = python_dir().join("train.py");
    let out = Command::new(analyzer_bin())
        .args(["record", "-o", path_str(run), "--collector", path_str(&collector_lib())])
        .args(record_args)
        .args(["--", "python3", path_str(&train)])
        .args(train_args)
        .env("PYTHONPATH", python_path)
        .env("SIM_ACL_LIB", runtime_lib())
        .env("SITECUSTOMIZE_MARK", run.with_extension("mark"))
        .output()
        .expect("run analyzer record (python3 must be on PATH)");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(out.status.success(), "analyzer record failed:\n{stdout}\n{stderr}");
    (stdout, stderr)
}

/// (op type, step) of every op, in capture order.
fn op_steps(run: &Path) -> Vec<(String, u64)> {
    let (code, stdout, stderr) = analyzer(&["inspect", path_str(run), "--json"]);
    assert_eq!(code, 0, "{stderr}");
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    v["ops"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| (o["op_type"].as_str().unwrap().to_string(), o["step"].as_u64().unwrap()))
        .collect()
}

#[test]
fn the_python_hook_ends_steps_after_optimizer_and_scaler_steps_and_chains_the_users_sitecustomize() {
    let dir = scratch();
    // The user's own sitecustomize, which ours shadows: it must still run.
    let user = dir.path().join("user-site");
    std::fs::create_dir_all(&user).unwrap();
    std::fs::write(
        user.join("sitecustomize.py"),
        "import os\nopen(os.environ['SITECUSTOMIZE_MARK'], 'w').write('ran')\n",
    )
    .unwrap();
    let run = dir.path().join("run");
    let (stdout, stderr) = record(&run, &user, &["--mode", "tensor"], &["--steps", "4", "--skip", "1"]);
    assert!(stdout.contains("trained 5 steps"), "{stdout}\n{stderr}");
    assert_eq!(
        std::fs::read_to_string(run.with_extension("mark")).unwrap(),
        "ran",
        "the user's sitecustomize ran"
    );
    assert!(!run.join(".python-hook").exists(), "the hook's directory is removed after the run");

    let ops = op_steps(&run);
    // forward (3 ops) + SGD (2 apply ops) + scale update; step 1 skips the apply ops; the last step has no
    // scaler: forward + SGD, ended by Optimizer.step itself.
    let full =
        ["GatherV2", "MatMulV2", "Add", "ApplyGradientDescent", "ApplyGradientDescent", "AmpUpdateScale"];
    let mut expected: Vec<(String, u64)> = Vec::new();
    for step in 0..5u64 {
        let types: Vec<&str> = match step {
            1 => vec!["GatherV2", "MatMulV2", "Add", "AmpUpdateScale"],
            4 => full[..5].to_vec(),
            _ => full.to_vec(),
        };
        expected.extend(types.into_iter().map(|t| (t.to_string(), step)));
    }
    assert_eq!(ops, expected);

    // Without the hook the same script's ops carry no step, and the analyzer says so.
    let bare = dir.path().join("bare");
    record(&bare, &user, &["--no-python-hook"], &["--steps", "2"]);
    let (code, stdout, _) = analyzer(&["inspect", path_str(&bare), "--json"]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let warnings = v["warnings"].to_string();
    assert!(warnings.contains("carry no step") || warnings.contains("INFERRED"), "{warnings}");
}
