//! Recorded jobs shared by the tests that only read them: each distinct job (model, ranks, steps,
//! environment) is recorded once per build of the binaries, under the target directory, and every test file
//! that asks for it again reads that recording. The window tests (#18) ask for a few dozen 4-rank jobs, many
//! of them the same; recording each anew cost CI about a minute.
//!
//! A shared recording is read-only: a test that changes a capture copies it first (`copy_dir`).

use super::{artifact, collector_lib, record_ranks, runtime_lib, sim_train_bin};
use std::collections::hash_map::DefaultHasher;
use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

/// The model the window tests record: several layers, so that a step holds a few hundred tensors a rank.
const WINDOWS_MODEL: &str = r#""preset": "medium", "n_layers": 3, "d_model": 32, "n_heads": 2, "d_ff": 64, "vocab": 100, "batch": 2, "seq": 8"#;

/// `sim-train --ranks RANKS --steps STEPS` of [`WINDOWS_MODEL`] with `more` (JSON members after the
/// model's, or empty), the collector preloaded with `env`: the capture's directory, recorded by the first
/// test of this build that asked for the same job.
pub fn shared_job(more: &str, ranks: u32, steps: u64, env: &[(&str, &str)]) -> PathBuf {
    // The model as serde_json prints it, so that spacing and line breaks in a test's text do not make
    // another job.
    let model = format!("{{{WINDOWS_MODEL}{more}}}");
    let model: serde_json::Value =
        serde_json::from_str(&model).unwrap_or_else(|e| panic!("the model is not JSON ({e}): {model}"));
    let mut env: Vec<(&str, &str)> = env.to_vec();
    env.sort();
    let key = format!("{model}\n--ranks {ranks} --steps {steps}\n{env:?}\n{}", binaries_identity());
    // One recording at a time for each job within this test executable; other jobs go on meanwhile.
    static JOBS: OnceLock<Mutex<BTreeMap<String, Arc<OnceLock<PathBuf>>>>> = OnceLock::new();
    let job = JOBS.get_or_init(Default::default).lock().unwrap().entry(key.clone()).or_default().clone();
    job.get_or_init(|| recorded_once(&key, &model.to_string(), ranks, steps, &env)).clone()
}

/// The binaries a recording comes from, each by path, size and modification time: a rebuild makes new jobs.
fn binaries_identity() -> String {
    [sim_train_bin(), collector_lib(), runtime_lib(), artifact("libhccl.so")]
        .iter()
        .map(|path| {
            let meta = std::fs::metadata(path).unwrap();
            let modified = meta.modified().unwrap().duration_since(std::time::UNIX_EPOCH).unwrap();
            format!("{} {} {}", path.display(), meta.len(), modified.as_nanos())
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The job's capture under `target/tmp/shared-jobs/`, recorded now when no test executable has yet.
fn recorded_once(key: &str, model: &str, ranks: u32, steps: u64, env: &[(&str, &str)]) -> PathBuf {
    let jobs = Path::new(env!("CARGO_TARGET_TMPDIR")).join("shared-jobs");
    std::fs::create_dir_all(&jobs).unwrap();
    let mut hasher = DefaultHasher::new();
    key.hash(&mut hasher);
    let dir = jobs.join(format!("{:016x}", hasher.finish()));
    if !dir.join("key").exists() {
        // Recorded aside and renamed into place whole, so that test executables running at once (two
        // `cargo test`s, nextest) see the whole job or none; the first rename wins, a later one fails and
        // its copy is removed with its temporary directory.
        let aside = tempfile::Builder::new().prefix(".recording-").tempdir_in(&jobs).unwrap();
        record_ranks(aside.path(), "run", model, ranks, steps, env);
        std::fs::write(aside.path().join("key"), key).unwrap();
        if std::fs::rename(aside.path(), &dir).is_ok() {
            let _ = aside.keep();
        }
    }
    let recorded = std::fs::read_to_string(dir.join("key")).unwrap();
    assert_eq!(recorded, key, "{}: another job's recording under the same hash", dir.display());
    dir.join("run")
}
