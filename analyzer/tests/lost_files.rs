//! A capture that lost a file (a copy that skipped a segment from its middle, or its manifest.json): every
//! command still reads it as a capture, leads with what is missing and exits 2, says so once, and takes no
//! gap in the records for something the run did (a skipped step, another configuration).

mod support;

use accutrace_formats::capture::{CaptureRun, Io, Record};
use accutrace_formats::DType;
use std::path::{Path, PathBuf};
use support::{analyzer, RunWriter};

/// Two training steps of six ops each (`model/op{10 * step + j}`, the last an optimizer update), one
/// 3000-byte tensor of finite values per op, in segments of 8 KiB: a few ops per segment.
fn write_run(run: &Path) -> PathBuf {
    let mut w = RunWriter::create(run, 8192);
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    for step in 0..2u64 {
        for (j, op_type) in
            ["MatMulV2", "Add", "MatMulV2", "Add", "MatMulV2", "ApplyAdamD"].into_iter().enumerate()
        {
            w.op_of_step(step, 10 * step + j as u64, op_type);
            let data: Vec<u8> = (0..750)
                .flat_map(|_| {
                    state =
                        state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
                    ((state >> 40) as f32 / (1u64 << 24) as f32 - 0.5).to_le_bytes()
                })
                .collect();
            w.tensor(Io::Output, 0, DType::FLOAT, &data);
        }
    }
    w.finish()
}

/// The segment file that holds the record of op `name`.
fn segment_of(run: &Path, name: &str) -> PathBuf {
    let capture = CaptureRun::open(run).unwrap();
    let found = capture.streams[0].records().find_map(|r| {
        let r = r.unwrap();
        match r.record {
            Record::Op(op) if op.name == name => Some(r.segment.to_path_buf()),
            _ => None,
        }
    });
    found.unwrap_or_else(|| panic!("{name} is in the run"))
}

/// Deletes the segment of the first op of `lost` whose segment holds none of the ops `kept`: the run keeps
/// ops on both sides of the hole.
fn lose_segment(run: &Path, lost: &[&str], kept: &[&str]) {
    let kept: Vec<PathBuf> = kept.iter().map(|k| segment_of(run, k)).collect();
    let segment = lost.iter().map(|l| segment_of(run, l)).find(|s| !kept.contains(s)).unwrap_or_else(|| {
        panic!("each of {lost:?} shares a segment with a kept op: the test needs smaller ones")
    });
    std::fs::remove_file(segment).unwrap();
}

#[test]
fn a_lost_optimizer_op_is_no_skipped_step_and_the_exit_status_2_line_is_said_once() {
    let dir = tempfile::tempdir().unwrap();
    let run = write_run(&dir.path().join("a"));
    let r = run.to_str().unwrap();
    // Step 0's optimizer update is in the lost segment; step 0's first op and step 1's update are not.
    lose_segment(&run, &["model/op5"], &["model/op0", "model/op15"]);

    let (code, out, err) = analyzer(&["overflow", r]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        out.starts_with("INCOMPLETE INPUT: ") && out.contains(" is missing: their records were not read"),
        "{out}"
    );
    assert!(
        !out.contains("was skipped") && !out.contains("NO ORIGIN"),
        "a lost record is no skipped step:\n{out}"
    );

    let (code, out, err) = analyzer(&["watch", r]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(out.starts_with("INCOMPLETE INPUT: "), "{out}");
    assert!(
        !out.contains("was skipped") && !out.contains("NO ORIGIN"),
        "a lost record is no skipped step:\n{out}"
    );
    assert_eq!(out.matches("(exit status 2").count(), 1, "said once:\n{out}");

    let (code, out, err) = analyzer(&["check", r]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(out.starts_with("INCOMPLETE INPUT: "), "{out}");
    assert_eq!(out.matches("(exit status 2").count(), 1, "said once:\n{out}");
}

#[test]
fn diff_of_a_run_with_a_hole_in_a_step_diffs_what_is_left_and_blames_no_configuration() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (write_run(&dir.path().join("a")), write_run(&dir.path().join("b")));
    // A hole inside step 0: its first and last ops are kept, so the step is neither a start nor an end.
    lose_segment(&a, &["model/op1", "model/op2", "model/op3", "model/op4"], &["model/op0", "model/op5"]);

    let (code, out, err) = analyzer(&["diff", a.to_str().unwrap(), b.to_str().unwrap()]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(out.starts_with("INCOMPLETE INPUT: "), "what is lost leads:\n{out}");
    assert!(!out.contains("REFUSED") && !out.contains("not the same configuration"), "{out}");
    assert!(out.contains(" 0 differ"), "what is left is diffed:\n{out}");
    assert!(!out.contains("bit-identical"), "no all-clear over a lost segment:\n{out}");
}

#[test]
fn a_capture_without_its_manifest_is_read_as_a_capture_with_the_loss_leading() {
    let dir = tempfile::tempdir().unwrap();
    let run = write_run(&dir.path().join("a"));
    std::fs::remove_file(run.join("manifest.json")).unwrap();

    let (code, out, err) = analyzer(&["inspect", run.to_str().unwrap()]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(out.starts_with("INCOMPLETE INPUT: ") && out.contains("manifest.json: missing"), "{out}{err}");
    assert!(out.contains("(capture): 12 ops, 12 tensors"), "its streams are read:\n{out}");
    assert!(!err.contains("CANN"), "a capture is no CANN dump tree: {err}");
}

#[test]
fn a_benchmark_that_lost_an_ops_files_gets_no_pass_over_what_is_left() {
    let dir = tempfile::tempdir().unwrap();
    let run = write_run(&dir.path().join("a"));
    let bench = dir.path().join("npy");
    let (code, out, err) = analyzer(&["convert", run.to_str().unwrap(), "-o", bench.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = analyzer(&["compare", run.to_str().unwrap(), bench.to_str().unwrap()]);
    assert_eq!((code, out.contains("PASS: every compared tensor passes")), (0, true), "{out}{err}");

    // The benchmark of the same run, one op's .npy file lost (a copy that skipped it): a dump directory
    // has no manifest to tell, so the pairs left pass, but op 3 was never compared.
    let lost: Vec<PathBuf> =
        walk(&bench).into_iter().filter(|p| p.to_string_lossy().contains("op3")).collect();
    assert_eq!(lost.len(), 1, "{lost:?}");
    std::fs::remove_file(&lost[0]).unwrap();
    let (code, out, err) = analyzer(&["compare", run.to_str().unwrap(), bench.to_str().unwrap()]);
    assert_eq!(code, 1, "no pass over part of the target:\n{out}{err}");
    let warning =
        "WARNING: 1 target tensors (1 ops) in steps and ranks the benchmark holds have no counterpart";
    let (at_warning, at_verdict) = (out.find(warning), out.find("NOT ALL COMPARED: "));
    assert!(at_warning.is_some() && at_warning < at_verdict, "the count leads the verdict:\n{out}");
    assert!(out.contains("model/op3.output.0") && !out.contains("PASS"), "{out}");
    // diff cannot tell a lost file from another op sequence without a manifest: it says both.
    let (code, out, err) = analyzer(&["diff", run.to_str().unwrap(), bench.to_str().unwrap()]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(out.contains("or files lost from a dump copied in part"), "{out}");
}

/// Every file under `dir`.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path);
        }
    }
    files
}
