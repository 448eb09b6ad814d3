//! Helpers for the end-to-end tests: find the built binaries and libraries, run the simulated training
//! and the analyzer as a user would, and read their JSON output.
//!
//! The binaries come from `cargo build --workspace` (scripts/test runs it before the tests); a missing
//! one fails the test with that instruction rather than skipping it.

#![allow(dead_code)]

mod shared_jobs;

// Not every test file records shared jobs.
#[allow(unused_imports)]
pub use shared_jobs::shared_job;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// `target/<profile>`: the directory holding this test executable's `deps/` directory.
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    exe.parent().and_then(Path::parent).expect("target/<profile>/deps/<test>").to_path_buf()
}

/// A built artifact of the workspace; panics with the fix when it is missing.
pub fn artifact(name: &str) -> PathBuf {
    let path = target_dir().join(name);
    assert!(
        path.exists(),
        "{} is missing: build the workspace first (`cargo build --workspace`, or run scripts/test)",
        path.display()
    );
    path
}

pub fn analyzer_bin() -> PathBuf {
    artifact("analyzer")
}

pub fn sim_train_bin() -> PathBuf {
    artifact("sim-train")
}

pub fn runtime_lib() -> PathBuf {
    artifact("libascendcl.so")
}

pub fn collector_lib() -> PathBuf {
    artifact("libcollector.so")
}

/// The text a report writer wrote to a file (as `-o` writes it, without colour), read back.
pub fn report_text(write: impl FnOnce(&analyzer::report::Destination<'_>)) -> String {
    let dir = scratch();
    let path = dir.path().join("report.txt");
    write(&analyzer::report::Destination { output: Some(&path), colour: analyzer::report::Colour::Never });
    std::fs::read_to_string(&path).expect("the report was written")
}

/// A scratch directory for one test.
pub fn scratch() -> tempfile::TempDir {
    tempfile::Builder::new().prefix("accutrace-e2e-").tempdir().expect("temp dir")
}

/// Writes `json` as a model file in `dir` and returns its path.
pub fn model_file(dir: &Path, name: &str, json: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, json).expect("write model file");
    path
}

/// An ACL config that dumps every op's inputs and outputs of the given steps to `dump_path` on disk.
pub fn dump_config(dir: &Path, name: &str, dump_path: &Path, extra: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::create_dir_all(dump_path).expect("create the dump path");
    let json = format!(
        r#"{{"dump": {{"dump_path": "{}", "dump_mode": "all", "dump_list": [], "dump_op_switch": "on"{extra}}}}}"#,
        dump_path.display()
    );
    std::fs::write(&path, json).expect("write acl config");
    path
}

/// Runs the simulated training; panics with its output when it fails.
pub fn sim_train(model: &Path, steps: u64, acl_config: Option<&Path>, env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(sim_train_bin());
    cmd.arg("--model").arg(model).arg("--steps").arg(steps.to_string()).arg("--lib").arg(runtime_lib());
    if let Some(config) = acl_config {
        cmd.arg("--acl-config").arg(config);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run sim-train");
    assert!(out.status.success(), "sim-train failed: {}", String::from_utf8_lossy(&out.stderr));
    out
}

/// Records `sim-train --model <model> --steps <steps>` with `analyzer record` into `run`, with extra `record`
/// options and environment (collector and simulated-runtime variables); panics with the output on failure.
pub fn record(run: &Path, model: &Path, steps: u64, options: &[&str], env: &[(&str, &str)]) -> String {
    let collector = collector_lib();
    let mut args: Vec<&str> = vec!["record", "-o", path_str(run), "--collector", path_str(&collector)];
    args.extend(options);
    let steps = steps.to_string();
    let (lib, sim_train) = (runtime_lib(), sim_train_bin());
    args.extend(["--", path_str(&sim_train), "--model", path_str(model), "--steps", &steps]);
    args.extend(["--lib", path_str(&lib)]);
    let out =
        Command::new(analyzer_bin()).args(&args).envs(env.iter().copied()).output().expect("run analyzer");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "record {} failed:\n{stdout}\n{}",
        run.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Runs the fp32 benchmark into `out_dir`.
pub fn sim_bench(model: &Path, steps: u64, out_dir: &Path) {
    sim_bench_as(model, steps, out_dir, "npy")
}

/// Runs the fp32 benchmark into `out_dir` in `format` (`npy`, or `msprobe`: API calls, as msprobe dumps
/// a PyTorch run).
pub fn sim_bench_as(model: &Path, steps: u64, out_dir: &Path, format: &str) {
    let out = Command::new(sim_train_bin())
        .arg("bench")
        .arg("--model")
        .arg(model)
        .arg("--steps")
        .arg(steps.to_string())
        .args(["--format", format, "-o"])
        .arg(out_dir)
        .output()
        .expect("run sim-train bench");
    assert!(out.status.success(), "sim-train bench failed: {}", String::from_utf8_lossy(&out.stderr));
}

/// Runs the analyzer; returns (exit code, stdout, stderr).
pub fn analyzer(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(analyzer_bin()).args(args).output().expect("run analyzer");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs the analyzer with `--format json` appended and parses stdout.
pub fn analyzer_json(args: &[&str]) -> (i32, serde_json::Value) {
    let mut all: Vec<&str> = args.to_vec();
    all.extend(["--format", "json"]);
    let (code, stdout, stderr) = analyzer(&all);
    let value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("analyzer {args:?} did not print JSON ({e}): {stdout}\n{stderr}"));
    (code, value)
}

pub fn path_str(p: &Path) -> &str {
    p.to_str().expect("UTF-8 temp path")
}

/// Copies the directory tree `from` to `to` (made if missing), to damage or change a copy of a run.
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let p = e.unwrap().path();
        let dest = to.join(p.file_name().unwrap());
        if p.is_dir() {
            copy_dir(&p, &dest);
        } else {
            std::fs::copy(&p, &dest).unwrap();
        }
    }
}

/// `analyzer report`'s page at `path`, after checking it references nothing outside itself.
pub fn report_page(path: &Path) -> String {
    let html = std::fs::read_to_string(path).expect("the report was written");
    assert!(html.starts_with("<!DOCTYPE html>"), "not an HTML page");
    for outside in ["http://", "https://", " src=", "url(", "@import"] {
        assert!(!html.contains(outside), "the page references something outside itself: {outside}");
    }
    for (i, _) in html.match_indices("href=\"") {
        assert!(
            html[i + 6..].starts_with('#'),
            "a link leaves the page: {}",
            &html[i..(i + 60).min(html.len())]
        );
    }
    // Every link on the page leads somewhere on it: a verdict never points at a section that is not there.
    for (i, _) in html.match_indices("href=\"#") {
        let target = &html[i + 7..];
        let target = &target[..target.find('"').expect("a closed href")];
        assert!(
            html.contains(&format!(" id=\"{target}\"")),
            "a link to #{target}, which the page does not hold"
        );
    }
    html
}

/// The SVG element with this id.
pub fn svg_element<'a>(html: &'a str, id: &str) -> &'a str {
    let start = html.find(&format!("<svg id=\"{id}\"")).unwrap_or_else(|| panic!("no plot {id}"));
    let end = html[start..].find("</svg>").expect("closed") + start;
    &html[start..end]
}

/// What node 0 of a 2-node job holds: ranks 0 and 1, and a manifest listing them (as
/// ranks_analysis.rs builds it): the streams of ranks 0 and 1 copied, the manifest's other streams left out.
pub fn node0(run: &Path, to: &Path) -> PathBuf {
    let mut manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run.join("manifest.json")).unwrap()).unwrap();
    std::fs::create_dir_all(to).unwrap();
    let streams = manifest["streams"].as_array_mut().unwrap();
    streams.retain(|s| s["info"]["rank"].as_u64().unwrap() < 2);
    for s in streams.iter() {
        let name = s["dir"].as_str().unwrap();
        copy_dir(&run.join(name), &to.join(name));
    }
    std::fs::write(to.join("manifest.json"), serde_json::to_vec(&manifest).unwrap()).unwrap();
    to.to_path_buf()
}

/// Records `sim-train --ranks RANKS --steps STEPS` of `model_json` (written as `dir/NAME.json`) over the
/// simulated HCCL, the collector preloaded and writing to `dir/NAME` (with `env`); that directory.
pub fn record_ranks(
    dir: &Path,
    name: &str,
    model_json: &str,
    ranks: u32,
    steps: u64,
    env: &[(&str, &str)],
) -> PathBuf {
    record_ranks_with(dir, name, model_json, ranks, steps, &[], env)
}

/// [`record_ranks`] with more of sim-train's options (`--pipeline`, `--corrupt-send STEP`).
pub fn record_ranks_with(
    dir: &Path,
    name: &str,
    model_json: &str,
    ranks: u32,
    steps: u64,
    options: &[&str],
    env: &[(&str, &str)],
) -> PathBuf {
    let model = model_file(dir, &format!("{name}.json"), model_json);
    let run = dir.join(name);
    let out = Command::new(sim_train_bin())
        .args(["--ranks", &ranks.to_string(), "--steps", &steps.to_string()])
        .args(options)
        .arg("--model")
        .arg(&model)
        .arg("--lib")
        .arg(runtime_lib())
        .arg("--hccl-lib")
        .arg(artifact("libhccl.so"))
        .env("LD_PRELOAD", collector_lib())
        .env("ACCUTRACE_DIR", &run)
        .envs(env.iter().copied())
        .output()
        .expect("run sim-train");
    assert!(out.status.success(), "{name} ({options:?}): {}", String::from_utf8_lossy(&out.stderr));
    run
}

/// The fewest segment files any stream of the capture at `run` has (a stream's steps spread over several
/// segments when it has many).
pub fn fewest_segments(run: &Path) -> usize {
    std::fs::read_dir(run)
        .unwrap()
        .flatten()
        .filter(|d| d.path().is_dir())
        .map(|d| std::fs::read_dir(d.path()).unwrap().count())
        .min()
        .unwrap()
}

/// A copy of the statistics capture at `from` in `to` whose HCCL calls `edit` rewrote: given each call and
/// its rank, in each stream's order, it returns the calls written in its place (none drops it).
pub fn with_calls_edited(
    from: &Path,
    to: &Path,
    mut edit: impl FnMut(
        u32,
        accutrace_formats::capture::CollectiveInfo,
    ) -> Vec<accutrace_formats::capture::CollectiveInfo>,
) {
    use accutrace_formats::capture::{CaptureRun, Policy, Record, StreamWriter};
    let run = CaptureRun::open(from).unwrap();
    let mut manifest = run.manifest.clone().unwrap();
    manifest.streams.clear();
    for stream in &run.streams {
        let rank = stream.info().rank.expect("a rank's stream");
        let mut writer = StreamWriter::create(to, stream.info().clone(), 8 << 20, Policy::KeepAll).unwrap();
        for item in stream.records() {
            match item.unwrap().record {
                Record::Op(op) => _ = writer.append_op(&op).unwrap(),
                Record::Tensor(t) => {
                    assert!(!t.has_data(), "a statistics capture");
                    let histogram = t.histogram.as_deref();
                    writer
                        .append_tensor_with_histogram(&t.meta, &t.stats, histogram, t.content_hash, None, 1)
                        .unwrap();
                }
                Record::StepMark(mark) => _ = writer.append_step_mark(&mark).unwrap(),
                Record::Collective(call) => {
                    for call in edit(rank, call) {
                        writer.append_collective(&call).unwrap();
                    }
                }
                other => panic!("{other:?} in a recording"),
            }
        }
        manifest.streams.push(writer.seal().unwrap());
    }
    manifest.write(to).unwrap();
}
