//! Never a false all-clear (issue #12): each way an input can hold less than it should, made for real on
//! the simulated runtime's captures and dumps (and the real msprobe fixture), must lead the report and make
//! the exit status 2; `--allow-incomplete` keeps the warning and gives the answer's own status.

mod common;
use accutrace_formats::capture::{CaptureRun, Record};
use common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// The clean fused model: its capture passes against its benchmark (exit 0) when nothing is missing.
const CLEAN: &str = r#"{"fusion": true}"#;

/// `sim-train` with the collector preloaded into `<dir>/<tag>`; `env` adds collector options.
fn capture(dir: &Path, tag: &str, model_json: &str, steps: u64, env: &[(&str, &str)]) -> PathBuf {
    let model = model_file(dir, &format!("{tag}.json"), model_json);
    let run = dir.join(tag);
    let collector = collector_lib();
    let mut all = vec![("LD_PRELOAD", path_str(&collector)), ("ACCUTRACE_DIR", path_str(&run))];
    all.extend_from_slice(env);
    sim_train(&model, steps, None, &all);
    run
}

fn stream_dir(run: &Path) -> PathBuf {
    std::fs::read_dir(run)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.join("stream.json").is_file())
        .unwrap()
}

/// The report leads with the input problems (what is lost, then any refusal: nothing left to compare),
/// then says no all-clear.
fn assert_leads(stdout: &str, what: &str) {
    let first = stdout.lines().next().unwrap_or_default();
    assert!(
        ["INCOMPLETE INPUT", "UNREADABLE INPUT", "REFUSED"].iter().any(|kind| first.starts_with(kind)),
        "{what}: the input problems must lead:\n{stdout}"
    );
    assert!(
        !stdout.contains("PASS:") && !stdout.contains("bit-identical on every"),
        "{what}: an all-clear:\n{stdout}"
    );
}

#[test]
fn a_lost_segment_or_stream_file_leads_every_report_and_fails_the_run() {
    let dir = scratch();
    // 64 KiB segments: the capture spans many, and losing the first loses real tensors.
    let env = [("ACCUTRACE_MODE", "tensor"), ("ACCUTRACE_SEGMENT_SIZE", "64K")];
    let intact = capture(dir.path(), "intact", CLEAN, 2, &env);
    let bench = dir.path().join("bench");
    sim_bench(&model_file(dir.path(), "bench.json", CLEAN), 2, &bench);
    let (code, stdout, _) = analyzer(&["compare", path_str(&intact), path_str(&bench)]);
    assert_eq!(code, 0, "the intact capture passes:\n{stdout}");
    assert!(stdout.contains("PASS"), "{stdout}");

    for lost in ["seg-000000.acc", "stream.json"] {
        let run = dir.path().join(format!("without-{lost}"));
        copy_dir(&intact, &run);
        std::fs::remove_file(run.join(stream_dir(&intact).file_name().unwrap()).join(lost)).unwrap();
        let (r, i, b) = (path_str(&run), path_str(&intact), path_str(&bench));
        for args in [vec!["inspect", r], vec!["compare", r, b], vec!["diff", r, i], vec!["overflow", r]] {
            let (code, stdout, stderr) = analyzer(&args);
            assert_eq!(code, 2, "{lost}: {args:?}\n{stdout}\n{stderr}");
            // Without stream.json nothing of the stream is left to compare: what is lost leads, then REFUSED.
            let said = if stdout.is_empty() { &stderr } else { &stdout };
            assert_leads(said, &format!("{lost}: {args:?}"));
            let named = if lost == "stream.json" { "stream.json is missing" } else { "segment 0 is missing" };
            assert!(said.contains(named), "{said}");
        }
        if lost == "stream.json" {
            continue; // no tensor left to compare
        }
        // Accepted: the warning still leads, the exit status is the answer's.
        let (code, stdout, _) = analyzer(&["compare", r, b, "--allow-incomplete"]);
        assert_eq!(code, 0, "what is left passes:\n{stdout}");
        assert!(stdout.starts_with("INCOMPLETE INPUT"), "{stdout}");
        // JSON carries the problems too.
        let (code, report) = analyzer_json(&["compare", r, b]);
        assert_eq!(code, 2);
        assert_eq!(report["input_problems"][0]["kind"], "incomplete", "{}", report["input_problems"]);
    }
}

#[test]
fn an_overflow_capture_without_its_segment_or_stream_file_is_no_all_clear() {
    let dir = scratch();
    let op = "model/layer_0/mlp/fc1/MatMul";
    let model = format!(r#"{{"faults": {{"overflow": {{"op": "{op}", "step": 1}}}}}}"#);
    let intact = capture(dir.path(), "intact", &model, 2, &[("ACCUTRACE_OVERFLOW", "1")]);
    let (code, stdout, _) = analyzer(&["overflow", path_str(&intact)]);
    assert_eq!(code, 1, "the intact capture reports the overflow:\n{stdout}");
    for lost in ["seg-000000.acc", "stream.json"] {
        let run = dir.path().join(format!("without-{lost}"));
        copy_dir(&intact, &run);
        let stream = run.join(stream_dir(&intact).file_name().unwrap());
        std::fs::remove_file(stream.join(lost)).unwrap();
        let (code, stdout, _) = analyzer(&["overflow", path_str(&run)]);
        assert_eq!(code, 2, "{lost}:\n{stdout}");
        assert_leads(&stdout, lost);
        assert!(
            !stdout.contains("No op produced inf/NaN or saturated values from finite inputs.\n"),
            "{stdout}"
        );
    }
}

/// The frame offset and payload end of the first tensor record of `io` (input or output) in a capture.
fn first_tensor_frame(run: &Path, output: bool) -> (PathBuf, u64, String) {
    let capture = CaptureRun::open(run).unwrap();
    for r in capture.streams[0].records() {
        let r = r.unwrap();
        if let Record::Tensor(t) = &r.record {
            let is_output = t.meta.io == accutrace_formats::capture::Io::Output;
            if is_output == output && t.has_data() && t.stored_size() > 0 {
                return (r.segment.to_path_buf(), r.offset, t.op.name.clone());
            }
        }
    }
    panic!("no tensor with data");
}

/// Inverts the last byte of the frame's payload: the head CRC still holds, the content hash does not.
fn corrupt_payload(segment: &Path, frame: u64) {
    let mut bytes = std::fs::read(segment).unwrap();
    let len = u32::from_le_bytes(bytes[frame as usize..frame as usize + 4].try_into().unwrap()) as u64;
    let last = (frame + 8 + len - 1) as usize;
    bytes[last] ^= 0xFF;
    std::fs::write(segment, bytes).unwrap();
}

#[test]
fn a_tensor_that_fails_its_content_hash_is_unreadable_never_a_verdict() {
    let dir = scratch();
    let intact = capture(dir.path(), "intact", CLEAN, 1, &[("ACCUTRACE_MODE", "tensor")]);
    // The same run dumped to disk: inputs and outputs on both sides, every pair equal.
    let bench = dir.path().join("bench");
    let model = model_file(dir.path(), "bench.json", CLEAN);
    sim_train(&model, 1, Some(&dump_config(dir.path(), "acl.json", &bench, "")), &[]);
    for output in [false, true] {
        let run = dir.path().join(format!("corrupt-{output}"));
        copy_dir(&intact, &run);
        let (segment, frame, op) = first_tensor_frame(&run, output);
        corrupt_payload(&segment, frame);
        let (code, stdout, stderr) = analyzer(&["compare", path_str(&run), path_str(&bench), "--op", &op]);
        assert_eq!(code, 2, "output={output}\n{stdout}\n{stderr}");
        assert_leads(&stdout, &op);
        assert!(stdout.contains("could not be read") && stdout.contains("content hash"), "{stdout}");
        assert!(!stdout.contains("CULPRIT"), "an unreadable tensor is never a culprit:\n{stdout}");
        let (_, report) = analyzer_json(&["compare", path_str(&run), path_str(&bench), "--op", &op]);
        let rows = report["rows"].as_array().unwrap();
        assert!(rows.iter().any(|r| r["status"] == "unreadable"), "{report}");
        assert!(rows.iter().all(|r| r["status"] != "fail"), "unreadable is not a failure: {report}");
        // --allow-incomplete does not excuse a tensor that cannot be read.
        let (code, ..) =
            analyzer(&["compare", path_str(&run), path_str(&bench), "--op", &op, "--allow-incomplete"]);
        assert_eq!(code, 2);
    }
}

fn msprobe_fixture() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures/msprobe-tiny");
    assert!(dir.is_dir(), "fixture {} missing: ../shared must sit beside the repository", dir.display());
    dir
}

#[test]
fn a_deleted_msprobe_tensor_file_is_unreadable_never_pass_nor_culprit() {
    let dir = scratch();
    let fixture = msprobe_fixture();
    let target = dir.path().join("target");
    copy_dir(&fixture.join("target"), &target);
    let bench = fixture.join("bench");
    // An op that passes as dumped: its input's file deleted used to leave "PASS", its output's a culprit.
    let (_, report) = analyzer_json(&["compare", path_str(&target), path_str(&bench)]);
    let rows = report["rows"].as_array().unwrap();
    let passing_op = |io: &str| -> String {
        let op_of =
            |r: &Value| r["target"].as_str().unwrap().split(&format!(".{io}.")).next().unwrap().to_string();
        let candidates: Vec<String> = rows
            .iter()
            .filter(|r| r["target"].as_str().unwrap().contains(&format!(".{io}.")))
            .map(op_of)
            .collect();
        candidates
            .into_iter()
            .find(|op| {
                rows.iter()
                    .filter(|r| r["target"].as_str().unwrap().starts_with(op.as_str()))
                    .all(|r| r["status"] == "pass")
            })
            .unwrap()
    };
    for io in ["input", "output"] {
        let op = passing_op(io);
        let tensor = format!("{op}.{io}.0.pt");
        let file = target.join("step0/rank0/dump_tensor_data").join(&tensor);
        let saved = std::fs::read(&file).unwrap();
        std::fs::remove_file(&file).unwrap();
        let (code, stdout, stderr) = analyzer(&["compare", path_str(&target), path_str(&bench), "--op", &op]);
        assert_eq!(code, 2, "{tensor}\n{stdout}\n{stderr}");
        assert_leads(&stdout, &tensor);
        assert!(stdout.contains(&tensor), "the lead names the file:\n{stdout}");
        assert!(!stdout.contains("CULPRIT"), "{stdout}");
        std::fs::write(&file, saved).unwrap();
    }
}

/// A binary-layout dump file with one input and one output described by `(dtype code, dims)`, each holding
/// `data` bytes.
fn dump_file(path: &Path, op_name: &str, tensors: [(i32, Vec<u64>); 2], data: &[u8]) {
    use accutrace_formats::dump::encode_dump;
    use accutrace_proto::dumpdata::{DumpData, OpInput, OpOutput, Shape};
    let shape = |d: &Vec<u64>| Some(Shape { dim: d.clone() });
    let header = DumpData {
        version: "2.0".into(),
        op_name: op_name.into(),
        dump_time: 1,
        input: vec![OpInput {
            data_type: tensors[0].0,
            format: 2,
            shape: shape(&tensors[0].1),
            ..Default::default()
        }],
        output: vec![OpOutput {
            data_type: tensors[1].0,
            format: 2,
            shape: shape(&tensors[1].1),
            ..Default::default()
        }],
        ..Default::default()
    };
    std::fs::write(path, encode_dump(&header, &[data], &[data], &[], &[]).unwrap()).unwrap();
}

#[test]
fn an_unknown_dtype_or_a_forged_shape_is_an_input_error_naming_the_file() {
    let dir = scratch();
    let fp16 = accutrace_formats::DType::FLOAT16.code();
    let good = [(fp16, vec![2u64, 2]), (fp16, vec![2, 2])];
    let data = [0u8; 8];
    for (case, tensors) in [
        ("dtype", [(fp16, vec![2, 2]), (999, vec![2, 2])]),
        // The product of these dims overflows 64 bits: it used to panic in debug builds and wrap in release.
        ("shape", [(fp16, vec![2, 2]), (fp16, vec![1 << 32, 1 << 32, 1 << 32])]),
    ] {
        let tree = dir.path().join(case);
        std::fs::create_dir_all(&tree).unwrap();
        dump_file(&tree.join("Add.good.1.2.100"), "good", good.clone(), &data);
        dump_file(&tree.join("Add.bad.2.2.200"), "bad", tensors.clone(), &data);
        // For diff: the same op with other bytes, so that it has to be decoded, not only hashed (equal
        // bytes are identical whatever their dtype says).
        let other = dir.path().join(format!("{case}-other"));
        std::fs::create_dir_all(&other).unwrap();
        dump_file(&other.join("Add.good.1.2.100"), "good", good.clone(), &data);
        dump_file(&other.join("Add.bad.2.2.200"), "bad", tensors, &[1u8; 8]);
        let t = path_str(&tree);
        let npy = dir.path().join(format!("{case}-npy"));
        for args in [
            vec!["inspect", t],
            vec!["compare", t, t],
            vec!["diff", t, path_str(&other)],
            vec!["overflow", t],
            vec!["convert", t, "-o", path_str(&npy)],
        ] {
            let (code, stdout, stderr) = analyzer(&args);
            assert_eq!(code, 2, "{case} {args:?}\n{stdout}\n{stderr}");
            assert!(!stderr.contains("panicked"), "{case} {args:?}: {stderr}");
            assert!(
                stdout.contains("Add.bad.2.2.200") || stderr.contains("Add.bad.2.2.200"),
                "{case} {args:?}:\n{stdout}\n{stderr}"
            );
        }
        // convert wrote the good op's tensors nonetheless.
        assert!(npy.join("step0/rank0/Add.good.0.output.0.npy").is_file());
    }
}

#[test]
fn one_bad_file_in_a_dump_tree_is_reported_and_the_rest_is_read() {
    let dir = scratch();
    let model = model_file(dir.path(), "npu.json", CLEAN);
    let dump = dir.path().join("dump");
    sim_train(&model, 1, Some(&dump_config(dir.path(), "acl.json", &dump, "")), &[]);
    let (code, stdout, _) = analyzer(&["inspect", path_str(&dump), "--json"]);
    assert_eq!(code, 0);
    let whole: Value = serde_json::from_str(&stdout).unwrap();
    let ops = whole["ops"].as_array().unwrap().len();
    let tensors: usize =
        whole["ops"].as_array().unwrap().iter().map(|o| o["tensors"].as_array().unwrap().len()).sum();

    // Truncate one dump file (a copy cut short).
    let mut files = Vec::new();
    let mut stack = vec![dump.clone()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                files.push(p);
            }
        }
    }
    files.sort();
    let bad = files.iter().find(|p| p.file_name().unwrap().to_str().unwrap().starts_with("MatMul")).unwrap();
    let bad_name = bad.file_name().unwrap().to_str().unwrap().to_string();
    let len = std::fs::metadata(bad).unwrap().len();
    std::fs::OpenOptions::new().write(true).open(bad).unwrap().set_len(len / 2).unwrap();
    let bad_tensors = whole["ops"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| bad_name.contains(&o["name"].as_str().unwrap().replace('/', "_")))
        .map(|o| o["tensors"].as_array().unwrap().len())
        .next()
        .unwrap();

    let (code, stdout, _) = analyzer(&["inspect", path_str(&dump)]);
    assert_eq!(code, 2, "{stdout}");
    assert_leads(&stdout, "inspect");
    assert!(stdout.lines().next().unwrap().contains(&bad_name), "the bad file is named first:\n{stdout}");
    let (code, stdout, _) = analyzer(&["inspect", path_str(&dump), "--json"]);
    assert_eq!(code, 2);
    let damaged: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(damaged["ops"].as_array().unwrap().len(), ops - 1, "every other op is listed");

    let npy = dir.path().join("npy");
    let (code, stdout, _) = analyzer(&["convert", path_str(&dump), "-o", path_str(&npy)]);
    assert_eq!(code, 2, "{stdout}");
    assert_leads(&stdout, "convert");
    assert!(stdout.contains(&format!("wrote {} .npy files", tensors - bad_tensors)), "{stdout}");
}

#[test]
fn inspect_shows_the_collectors_drop_counters() {
    let dir = scratch();
    let env = [
        ("ACCUTRACE_QUEUE_FULL", "drop"),
        ("ACCUTRACE_SLOTS", "2"),
        ("ACCUTRACE_SLOT_SIZE", "8K"),
        ("ACCUTRACE_TEST_SLOW_WRITER_MS", "2"),
        ("SIM_ACL_CHUNK_SIZE", "3000"),
    ];
    let run = capture(dir.path(), "drops", "{}", 1, &env);
    let (code, stdout, _) = analyzer(&["inspect", path_str(&run)]);
    assert_eq!(code, 2, "{stdout}");
    assert_leads(&stdout, "inspect");
    assert!(stdout.contains("dropped_queue_full"), "the drop counters are shown:\n{stdout}");
    assert!(stdout.contains("drops: dropped_queue_full"), "per stream too:\n{stdout}");
}

/// A statistics-mode capture (the collector's and `record`'s default) holds no tensor data: against a
/// benchmark its pairs are not measured, never passed, even with a fault the values would show. Pairs whose
/// content hashes agree are identical (the capture against itself passes). The report page says the same.
#[test]
fn a_statistics_capture_against_a_benchmark_is_not_measured_never_passed() {
    let dir = scratch();
    let faulty = r#"{"fusion": true, "faults": {"imprecise_fused_kernel": true}}"#;
    let run = capture(dir.path(), "stats", faulty, 1, &[]);
    let bench = dir.path().join("bench");
    sim_bench(&model_file(dir.path(), "bench.json", faulty), 1, &bench);
    let (run, bench) = (path_str(&run), path_str(&bench));

    let (code, stdout, stderr) = analyzer(&["compare", run, bench]);
    assert_eq!(code, 2, "values that were not compared are no answer:\n{stdout}\n{stderr}");
    assert_leads(&stdout, "compare of a statistics capture");
    assert!(stdout.contains("not measured") && stdout.contains("--mode tensor"), "what to do:\n{stdout}");
    assert!(stdout.contains("NOT MEASURED: no matched pair was read and measured"), "{stdout}");
    // Accepted: the answer's own status, still no pass.
    let (code, stdout, _) = analyzer(&["compare", run, bench, "--allow-incomplete", "--all"]);
    assert_eq!(code, 0, "{stdout}");
    assert!(!stdout.contains("PASS") && stdout.contains("NO DATA"), "{stdout}");

    let (code, json) = analyzer_json(&["compare", run, bench]);
    assert_eq!(code, 2);
    let rows = json["rows"].as_array().unwrap();
    assert!(!rows.is_empty());
    assert!(rows.iter().all(|r| r["status"] == "unmeasured" && r["measured"] == "nothing"), "{json:#}");
    let problems = json["input_problems"].as_array().unwrap();
    assert!(problems.iter().any(|p| p["kind"] == "incomplete"
        && p["message"].as_str().unwrap().starts_with(&format!("{} of {} matched", rows.len(), rows.len()))));

    let (code, csv, stderr) = analyzer(&["compare", run, bench, "--format", "csv"]);
    assert_eq!(code, 2);
    assert!(stderr.starts_with("INCOMPLETE INPUT"), "the problem leads on stderr:\n{stderr}");
    let body: Vec<&str> = csv.lines().skip(1).collect();
    assert!(!body.is_empty() && body.iter().all(|l| l.contains(",unmeasured,not measured")), "{csv}");

    let (code, msprobe, stderr) = analyzer(&["compare", run, bench, "--format", "msprobe-csv"]);
    assert_eq!(code, 2, "{stderr}");
    let measured_rows: Vec<&str> = msprobe.lines().filter(|l| l.contains("Not measured")).collect();
    assert_eq!(measured_rows.len(), rows.len(), "{msprobe}");
    assert!(measured_rows.iter().all(|l| !l.contains(",pass,")), "msprobe's Result says pass:\n{msprobe}");

    // Equal content hashes are a measurement: the capture against itself is identical, bit for bit.
    let (code, stdout, _) = analyzer(&["compare", run, run]);
    assert_eq!(code, 0, "{stdout}");
    assert!(
        stdout.contains("PASS: every compared tensor passes") && !stdout.contains("not measured"),
        "{stdout}"
    );

    let file = dir.path().join("stats.html");
    let (code, stdout, _) = analyzer(&["report", run, bench, "-o", path_str(&file)]);
    assert_eq!(code, 2, "{stdout}");
    let html = report_page(&file);
    assert!(html.contains("<b>NOT MEASURED</b>") && html.contains("record with <code>--mode tensor</code>"));
    assert!(!html.contains("<b>PASS</b>"), "a pass about values never read");
    // Overflow needs only statistics, which the capture has: compare's unmeasured pairs leave it answered.
    assert!(html.contains("<b>NO OVERFLOW</b>"), "overflow's answer hidden by compare's problem:\n{stdout}");

    // Two statistics captures of one configuration, a weight's bit flipped in one at step 1: diff answers
    // by content hash the pairs compare could not measure, so the page drops compare's problem; compare's
    // verdict still leaves them open, and points at no list of problems the page does not hold
    // (report_page checks every link).
    let flip = r#"{"faults": {"weight_bitflip": {"param": "model/layer_0/attn/proj/weight", "step": 1, "index": 5}}}"#;
    let flipped = capture(dir.path(), "flipped", flip, 2, &[]);
    let clean = capture(dir.path(), "clean", "{}", 2, &[]);
    let file = dir.path().join("pair.html");
    let (code, stdout, _) =
        analyzer(&["report", path_str(&flipped), path_str(&clean), "-o", path_str(&file)]);
    assert_eq!(code, 1, "diff's finding:\n{stdout}");
    let html = report_page(&file);
    assert!(html.contains("<b>FIRST DIFFERENCE</b> step 1"), "{stdout}");
    assert!(!html.contains("id=\"problems\"") && html.contains("<b>NO VERDICT</b>"), "{stdout}");
    assert!(html.contains("pairs not measured are left to diff's verdict"), "{stdout}");
    assert!(!html.contains("<b>PASS</b>"), "a pass about values never read");
}

/// A dump tree whose `{YYYYMMDDhhmmss}` directory was renamed is outside CANN's layout: its files have no
/// step or device, so every step is read as step 0. That folds the steps together; it must lead as an input
/// problem, never give per-step answers as if nothing were wrong. Loose files with no op twice stay fine.
#[test]
fn a_dump_tree_outside_the_layout_folds_steps_and_says_so() {
    let dir = scratch();
    let model = model_file(dir.path(), "npu.json", CLEAN);
    let dump = dir.path().join("dump");
    sim_train(&model, 2, Some(&dump_config(dir.path(), "acl.json", &dump, "")), &[]);
    let (code, stdout, _) = analyzer(&["overflow", path_str(&dump)]);
    assert_eq!(code, 0, "the intact tree:\n{stdout}");
    assert!(!stdout.contains("outside CANN's directory layout"), "{stdout}");

    let time_dir = std::fs::read_dir(&dump).unwrap().next().unwrap().unwrap().path();
    std::fs::rename(&time_dir, dump.join("renamed")).unwrap();
    for command in ["overflow", "inspect"] {
        let (code, stdout, _) = analyzer(&[command, path_str(&dump)]);
        assert_eq!(code, 2, "{command}:\n{stdout}");
        assert_leads(&stdout, command);
        assert!(stdout.contains("outside CANN's directory layout"), "{command}:\n{stdout}");
    }

    // One file on its own, away from its tree: nothing is folded, nothing to say.
    let mut stack = vec![dump.clone()];
    let mut first = None;
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if first.is_none() && p.extension().is_none_or(|x| x != "csv") {
                first = Some(p);
            }
        }
    }
    let loose = dir.path().join("loose");
    std::fs::create_dir(&loose).unwrap();
    let file = first.unwrap();
    std::fs::copy(&file, loose.join(file.file_name().unwrap())).unwrap();
    let (code, stdout, _) = analyzer(&["inspect", path_str(&loose)]);
    assert_eq!(code, 0, "{stdout}");
}
