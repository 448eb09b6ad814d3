//! Bad input through the command line: exit status 2 and a message that names the file and the problem.

use std::process::Command;

fn analyzer(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_analyzer")).args(args).output().expect("run analyzer");
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn missing_path_is_a_usage_error_naming_it() {
    let (code, err) = analyzer(&["inspect", "/nonexistent/accutrace-run"]);
    assert_eq!(code, 2);
    assert!(err.contains("/nonexistent/accutrace-run"), "{err}");
}

#[test]
fn a_file_that_is_no_dump_says_so() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("notes.txt");
    std::fs::write(&path, "hello").expect("write");
    let (code, err) = analyzer(&["inspect", path.to_str().expect("utf-8")]);
    assert_eq!(code, 2);
    assert!(err.contains("no CANN dump files found") && err.contains("notes.txt"), "{err}");
}

#[test]
fn a_truncated_dump_file_names_the_file_and_offset() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("MatMulV2.model_layer_0_MatMul.12.2.1700000000000000");
    // A header length far beyond the file.
    let mut bytes = 1_000_000u64.to_le_bytes().to_vec();
    bytes.extend_from_slice(b"short");
    std::fs::write(&path, bytes).expect("write");
    let (code, err) = analyzer(&["inspect", path.to_str().expect("utf-8")]);
    assert_eq!(code, 2);
    assert!(err.contains("MatMulV2.model_layer_0_MatMul") && err.contains("at byte"), "{err}");
}

#[test]
fn compare_with_nothing_in_common_is_an_error_not_a_pass() {
    let fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/fixtures/msprobe-tiny");
    let (target, bench) = (format!("{fixture}/target"), format!("{fixture}/bench"));
    let (code, err) = analyzer(&["compare", &target, &bench, "--op", "no_such_op"]);
    assert_eq!(code, 2);
    assert!(err.contains("--op 'no_such_op' matches no op of") && err.contains("Functional."), "{err}");
}

#[test]
fn a_single_npy_file_or_capture_segment_names_the_directory_to_give() {
    let dir = tempfile::tempdir().expect("temp dir");
    let npy = dir.path().join("bench").join("model_fc1_MatMul.0.1700000000000001.npy");
    std::fs::create_dir_all(npy.parent().expect("a parent")).expect("mkdir");
    std::fs::write(&npy, b"\x93NUMPY").expect("write");
    let (code, err) = analyzer(&["inspect", npy.to_str().expect("utf-8")]);
    assert_eq!(code, 2);
    assert!(err.contains("a single .npy file is not a run") && err.contains("model_fc1_MatMul"), "{err}");
    assert!(!err.contains("CANN"), "a .npy file is no CANN dump: {err}");

    let segment = dir.path().join("run").join("stream-000-rank0-dev0-pid1").join("seg-000000.acc");
    std::fs::create_dir_all(segment.parent().expect("a parent")).expect("mkdir");
    std::fs::write(&segment, b"ACCU").expect("write");
    let (code, err) = analyzer(&["diff", segment.to_str().expect("utf-8"), segment.to_str().expect("utf-8")]);
    assert_eq!(code, 2);
    assert!(err.contains("one file of an accutrace capture") && err.contains("manifest.json"), "{err}");
}

#[test]
fn a_run_directory_the_collector_left_without_a_stream_says_so() {
    // What a disk full at the first segment leaves: the lock, a stream directory with an empty segment,
    // no stream.json, no manifest.json. It is no CANN dump tree.
    let dir = tempfile::tempdir().expect("temp dir");
    let run = dir.path().join("run");
    let stream = run.join("stream-000-rank0-dev0-pid1");
    std::fs::create_dir_all(&stream).expect("mkdir");
    std::fs::write(run.join(".accutrace.lock"), b"").expect("write");
    std::fs::write(stream.join("seg-000000.acc"), b"").expect("write");
    let (code, err) = analyzer(&["inspect", run.to_str().expect("utf-8")]);
    assert_eq!(code, 2);
    assert!(err.contains("holds no readable capture") && err.contains("stream-000-rank0-dev0-pid1"), "{err}");
    assert!(err.contains("record again"), "what to do: {err}");
    assert!(!err.contains("CANN"), "no CANN dump: {err}");
}

#[test]
fn rank_summaries_given_as_a_run_point_to_merge() {
    // `analyzer scan`'s output (rank*.parquet, series/) given to a command that reads runs: the message
    // names merge, not CANN's file names.
    let dir = tempfile::tempdir().expect("temp dir");
    let summaries = dir.path().join("summaries");
    std::fs::create_dir_all(summaries.join("series")).expect("mkdir");
    for r in 0..2 {
        std::fs::write(summaries.join(format!("rank{r:06}.parquet")), b"PAR1").expect("write");
        std::fs::write(summaries.join("series").join(format!("rank{r:06}.parquet")), b"PAR1").expect("write");
    }
    for args in [vec!["ranks"], vec!["inspect"], vec!["report", "-o", "/dev/null"]] {
        let mut args = args.clone();
        let s = summaries.to_str().expect("utf-8");
        args.insert(1, s);
        let (code, err) = analyzer(&args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains("rank summaries") && err.contains("analyzer merge"), "{args:?}: {err}");
        assert!(!err.contains("CANN"), "{args:?}: summaries are no CANN dump: {err}");
    }
    let one = summaries.join("rank000001.parquet");
    let (code, err) = analyzer(&["overflow", one.to_str().expect("utf-8")]);
    assert_eq!(code, 2);
    assert!(err.contains("a rank summary") && err.contains("analyzer merge"), "{err}");
}

#[test]
fn an_msprobe_dump_that_lists_no_call_says_what_to_check() {
    let fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/fixtures/msprobe-tiny/target");
    let dir = tempfile::tempdir().expect("temp dir");
    let dump = dir.path().join("step0").join("rank0");
    std::fs::create_dir_all(&dump).expect("mkdir");
    let text = std::fs::read_to_string(format!("{fixture}/step0/rank0/dump.json")).expect("the fixture");
    let mut json: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    json["data"] = serde_json::json!({});
    std::fs::write(dump.join("dump.json"), json.to_string()).expect("write");
    let (code, err) = analyzer(&["overflow", dir.path().to_str().expect("utf-8")]);
    assert_eq!(code, 2);
    assert!(err.contains("holds no ops") && err.contains("dump.json \"data\" is empty"), "{err}");
}
