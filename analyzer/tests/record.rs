//! `analyzer record`: options checked before anything runs, the collector's environment as the command sees
//! it, the command's exit status passed on; and, when the simulated stack is built, a real capture.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const ANALYZER: &str = env!("CARGO_BIN_EXE_analyzer");

fn record(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(ANALYZER);
    cmd.arg("record").args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A file that stands in for the collector: ld.so cannot preload it, says so, and runs the command anyway.
fn fake_collector(dir: &Path) -> PathBuf {
    let path = dir.join("libfake.so");
    std::fs::write(&path, b"not an ELF file").unwrap();
    path
}

#[test]
fn command_sees_the_collector_environment_and_its_status_is_passed_on() {
    let tmp = tempfile::tempdir().unwrap();
    let collector = fake_collector(tmp.path());
    let (run, env_file) = (tmp.path().join("run"), tmp.path().join("env.txt"));
    let out = record(
        &[
            "-o",
            run.to_str().unwrap(),
            "--collector",
            collector.to_str().unwrap(),
            "--mode",
            "tensor",
            "--policy",
            "ring:1G",
            "--zstd-level",
            "-3",
            "--",
            "sh",
            "-c",
            "env > \"$0\"; exit 3",
            env_file.to_str().unwrap(),
        ],
        // Stale settings in the caller's shell must not reach the command.
        &[("LD_PRELOAD", "/opt/other.so"), ("ACCUTRACE_STEPS", "9"), ("ACCUTRACE_MODE", "stats")],
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("exited with status 3"), "{stderr}");
    let env = std::fs::read_to_string(&env_file).unwrap();
    let lines: Vec<&str> = env.lines().collect();
    let has = |line: String| assert!(lines.contains(&line.as_str()), "missing {line} in\n{env}");
    has(format!("LD_PRELOAD={}:/opt/other.so", collector.display()));
    has(format!("ACCUTRACE_DIR={}", run.display()));
    has("ACCUTRACE_MODE=tensor".into());
    has("ACCUTRACE_POLICY=ring:1073741824".into());
    // A negative level is a value, not an option (clap took "-3" for a flag and refused it).
    has("ACCUTRACE_ZSTD_LEVEL=-3".into());
    assert!(!env.contains("ACCUTRACE_STEPS"), "{env}");
    assert!(!env.contains("ACCUTRACE_OVERFLOW"), "{env}");
}

#[test]
fn a_command_that_leaves_no_capture_is_an_error() {
    let tmp = tempfile::tempdir().unwrap();
    let collector = fake_collector(tmp.path());
    let run = tmp.path().join("run");
    let out =
        record(&["-o", run.to_str().unwrap(), "--collector", collector.to_str().unwrap(), "--", "true"], &[]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("nothing was captured"), "{stderr}");
    assert!(!run.exists(), "the empty run directory is left behind");
}

#[test]
fn a_collector_that_stopped_before_writing_is_not_said_to_be_inactive() {
    // What a full disk leaves: the collector made its stream's directory, then could not write its first
    // segment (ENOSPC), logged it and went inactive. The collector did activate: the message must not send
    // the user to check that the command loads libascendcl.so.
    let tmp = tempfile::tempdir().unwrap();
    let collector = fake_collector(tmp.path());
    let run = tmp.path().join("run");
    let script = "mkdir \"$ACCUTRACE_DIR/stream-000-rank0-dev0-pid1\" && : > \"$ACCUTRACE_DIR/stream-000-rank0-dev0-pid1/seg-000000.acc\"";
    let args =
        ["-o", run.to_str().unwrap(), "--collector", collector.to_str().unwrap(), "--", "sh", "-c", script];
    let out = record(&args, &[]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("nothing was captured"), "{stderr}");
    assert!(!stderr.contains("did not activate"), "the collector did activate: {stderr}");
    assert!(stderr.contains("the collector started but stopped before writing anything"), "{stderr}");
    assert!(stderr.contains("record again"), "what to do: {stderr}");
}

#[test]
fn a_failing_command_is_named_as_the_failure() {
    let tmp = tempfile::tempdir().unwrap();
    let collector = fake_collector(tmp.path());
    let run = tmp.path().join("run");
    let args =
        ["-o", run.to_str().unwrap(), "--collector", collector.to_str().unwrap(), "--", "sh", "-c", "exit 7"];
    let out = record(&args, &[]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(7), "{stderr}");
    assert!(stderr.contains("sh exited with status 7 before anything was captured"), "{stderr}");
    assert!(!stderr.contains("did not activate"), "the collector is not to blame: {stderr}");
    assert!(!run.exists());
}

#[test]
fn a_missing_separator_gets_a_hint() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    for args in [
        vec!["-o", run.to_str().unwrap(), "python", "train.py"],
        vec!["-o", run.to_str().unwrap(), "python", "train.py", "--lr", "0.1"],
    ] {
        let out = record(&args, &[]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains("hint: put the training command after `--`"), "{args:?}: {stderr}");
    }
    // With the separator there is no such hint, whatever else is wrong.
    let out = record(&["-o", run.to_str().unwrap(), "--mode", "nope", "--", "true"], &[]);
    assert!(!text(&out.stderr).contains("hint"), "{}", text(&out.stderr));
    assert!(!run.exists());
}

#[test]
fn a_command_killed_by_a_signal_exits_128_plus_the_signal() {
    let tmp = tempfile::tempdir().unwrap();
    let collector = fake_collector(tmp.path());
    let run = tmp.path().join("run");
    let args = [
        "-o",
        run.to_str().unwrap(),
        "--collector",
        collector.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        "kill -9 $$",
    ];
    let out = record(&args, &[]);
    assert_eq!(out.status.code(), Some(137), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("killed by signal 9"), "{}", text(&out.stderr));
}

#[test]
fn bad_options_stop_before_the_command_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let collector = fake_collector(tmp.path());
    let marker = tmp.path().join("ran");
    let touch = ["--", "sh", "-c", "touch \"$0\"", marker.to_str().unwrap()];
    let run = tmp.path().join("run");
    let (run_s, col) = (run.to_str().unwrap(), collector.to_str().unwrap());
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["-o", run_s, "--collector", col, "--policy", "ring:lots"], "--policy"),
        (vec!["-o", run_s, "--collector", col, "--steps", "3-1"], "backwards"),
        (vec!["-o", run_s, "--collector", col, "--zstd-level", "99"], "--zstd-level"),
        (vec!["-o", run_s, "--collector", col, "--zstd-level", "-8"], "from -7 (fastest) to 22"),
        (vec!["-o", run_s, "--collector", "/nonexistent/libcollector.so"], "--collector"),
    ];
    for (mut args, expected) in cases {
        args.extend_from_slice(&touch);
        let out = record(&args, &[]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
        assert!(!marker.exists(), "{args:?} ran the command");
    }
    // A run directory that already holds files is refused too.
    std::fs::create_dir_all(&run).unwrap();
    std::fs::write(run.join("manifest.json"), "{}").unwrap();
    let mut args = vec!["-o", run_s, "--collector", col];
    args.extend_from_slice(&touch);
    let out = record(&args, &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("not empty"), "{}", text(&out.stderr));
    assert!(!marker.exists());
    // So is a file where the run directory should be, saying what to do (not "cannot create: File exists").
    let file = tmp.path().join("a-file");
    std::fs::write(&file, "").unwrap();
    let mut args = vec!["-o", file.to_str().unwrap(), "--collector", col];
    args.extend_from_slice(&touch);
    let out = record(&args, &[]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("a file, not a directory") && stderr.contains("a-file"), "{stderr}");
    assert!(stderr.contains("record into a new directory"), "{stderr}");
    assert!(!marker.exists());
    // A command that cannot be started leaves no directory behind, not even the parents it needed.
    let fresh = tmp.path().join("fresh");
    let nested = fresh.join("runs/a");
    let out = record(&["-o", nested.to_str().unwrap(), "--collector", col, "--", "/nonexistent/train"], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("cannot run"), "{}", text(&out.stderr));
    assert!(!fresh.exists(), "a failed start left {}", fresh.display());
    // The same for a name looked up in PATH, and for a file that is not executable.
    for program in ["no-such-command-here", col] {
        let out = record(&["-o", nested.to_str().unwrap(), "--collector", col, "--", program], &[]);
        assert_eq!(out.status.code(), Some(2));
        assert!(text(&out.stderr).contains("cannot run"), "{}", text(&out.stderr));
        assert!(!fresh.exists(), "a failed start left {}", fresh.display());
    }
    // Nor do bad options (checked before anything is made).
    let out = record(
        &["-o", nested.to_str().unwrap(), "--collector", col, "--policy", "ring:0", "--", "true"],
        &[],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(!fresh.exists());
}

/// The whole chain on the simulated stack: sim-train on libascendcl.so with libcollector.so preloaded.
/// Needs the other workspace members built into this target directory (`cargo build --workspace`, which
/// `cargo test --workspace` does); skipped, saying so, when they are not there.
#[test]
fn records_the_simulated_framework_when_it_is_built() {
    let bin = Path::new(ANALYZER).parent().unwrap();
    let needed = ["libcollector.so", "libascendcl.so", "sim-train"];
    if let Some(missing) = needed.iter().find(|n| !bin.join(n).is_file()) {
        eprintln!("skipped: {missing} is not built in {}", bin.display());
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join("model.json");
    std::fs::write(&model, r#"{"precision": "fp16"}"#).unwrap();
    let run = tmp.path().join("run");
    let sim = bin.join("sim-train");
    let out = record(
        &[
            "-o",
            run.to_str().unwrap(),
            "--mode",
            "tensor",
            "--steps",
            "1",
            "--",
            sim.to_str().unwrap(),
            "--model",
            model.to_str().unwrap(),
            "--steps",
            "2",
        ],
        &[],
    );
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(stdout.contains("indexed:") && stdout.contains("step 1,"), "{stdout}");
    assert!(run.join("manifest.json").is_file());
    // A one-process job is rank 0, in the summary and in the stream's name.
    assert!(stdout.contains(": rank 0 device"), "{stdout}");
    let streams: Vec<String> = std::fs::read_dir(&run)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("stream-"))
        .collect();
    assert!(!streams.is_empty() && streams.iter().all(|n| n.contains("-rank0-")), "{streams:?}");
    // The last segment is cut at its end: two small steps take well under one 64 MiB segment.
    let bytes: u64 = streams
        .iter()
        .flat_map(|s| std::fs::read_dir(run.join(s)).unwrap())
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum();
    assert!(bytes < 16 << 20, "the capture takes {bytes} bytes");
    // The summary in the other forms.
    let out = record(
        &[
            "-o",
            tmp.path().join("run2").to_str().unwrap(),
            "--format",
            "json",
            "--steps",
            "1",
            "--",
            sim.to_str().unwrap(),
            "--model",
            model.to_str().unwrap(),
            "--steps",
            "2",
        ],
        &[],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((summary["schema_version"].as_u64(), summary["command"].as_str()), (Some(1), Some("record")));
    assert_eq!(summary["streams"][0]["info"]["rank"], 0);
    // Tensor mode keeps data: convert finds values to write.
    let npy = tmp.path().join("npy");
    let out = Command::new(ANALYZER)
        .args(["convert", run.to_str().unwrap(), "-o", npy.to_str().unwrap()])
        .output()
        .unwrap();
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(!stdout.contains("wrote 0 "), "{stdout}");
    assert!(npy.join("step1/rank0").is_dir(), "{stdout}");
}
