//! Progress on stderr (docs/CLI.md, "Common options"): every command that can take a while shows it on a
//! terminal, nothing of it reaches a pipe, and `--no-progress` turns it off. The terminal is a pseudo-
//! terminal from util-linux `script` (Debian's bsdutils, an essential package). The runs are the
//! msprobe-tiny fixture and summaries scanned from it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const ANALYZER: &str = env!("CARGO_BIN_EXE_analyzer");

fn fixture() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/msprobe-tiny");
    assert!(dir.is_dir(), "fixture {} missing: ../shared must sit beside the repository", dir.display());
    dir
}

/// What each kind of progress writes: a stage line (`merge: [1/2] reading the summaries (+0.0 s)`) and a
/// bar (`inspect [=====>   ] 3/12 tensors, 0s left`).
fn progress_in(text: &str) -> Vec<&'static str> {
    let marks = [": [1/", "(+0.", "tensors, ", "summaries, "];
    marks.into_iter().filter(|m| text.contains(m)).collect()
}

/// A job of two ranks: the fixture's rank directory twice (`step0/rank0`, `step0/rank1`).
fn two_ranks(tmp: &Path) -> PathBuf {
    let from = fixture().join("target/step0/rank0");
    for rank in ["rank0", "rank1"] {
        let to = tmp.join("job/step0").join(rank);
        std::fs::create_dir_all(to.join("dump_tensor_data")).unwrap();
        std::fs::copy(from.join("dump.json"), to.join("dump.json")).unwrap();
        for entry in std::fs::read_dir(from.join("dump_tensor_data")).unwrap() {
            let entry = entry.unwrap();
            std::fs::copy(entry.path(), to.join("dump_tensor_data").join(entry.file_name())).unwrap();
        }
    }
    tmp.join("job")
}

/// Runs the analyzer in `dir` with stdout and stderr piped (not terminals).
fn piped(dir: &Path, args: &[&str]) -> Output {
    Command::new(ANALYZER).args(args).current_dir(dir).stdin(Stdio::null()).output().expect("run analyzer")
}

/// Runs the analyzer in `dir` under a pseudo-terminal (stdout and stderr both the terminal): what the
/// terminal showed, and the analyzer's exit status.
fn on_terminal(dir: &Path, args: &[&str]) -> (String, i32) {
    let line: Vec<String> =
        std::iter::once(ANALYZER).chain(args.iter().copied()).map(|a| format!("'{a}'")).collect();
    let out = Command::new("script")
        .args(["-qec", &line.join(" "), "/dev/null"])
        .current_dir(dir)
        .env("TERM", "xterm")
        .env("COLUMNS", "120")
        .env("LINES", "40")
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run util-linux `script` ({e}): install bsdutils (Debian) or util-linux")
        });
    let shown = String::from_utf8_lossy(&out.stdout).into_owned();
    (shown, out.status.code().unwrap_or(-1))
}

#[test]
fn nothing_of_the_progress_reaches_a_pipe() {
    let tmp = tempfile::tempdir().unwrap();
    let job = two_ranks(tmp.path());
    let job = job.to_str().unwrap();
    let summaries = tmp.path().join("summaries");
    let summaries = summaries.to_str().unwrap();
    let npy = tmp.path().join("npy");
    let npy = npy.to_str().unwrap();
    let commands: [&[&str]; 10] = [
        &["inspect", "target"],
        &["overflow", "target"],
        &["compare", "target", "bench"],
        &["convert", "target", "-o", npy],
        &["check", "target"],
        &["watch", "target"],
        &["ranks", job],
        &["scan", job, "-o", summaries],
        &["merge", summaries],
        &["report", "target", "bench", "-o", "/dev/null"],
    ];
    for args in commands {
        let out = piped(&fixture(), args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            matches!(out.status.code(), Some(0..=2)),
            "{args:?} exited {:?}: {stderr}",
            out.status.code()
        );
        assert!(progress_in(&stderr).is_empty(), "{args:?} wrote progress into a pipe: {stderr}");
        assert!(!stderr.contains('\r') && !stderr.contains('\x1b'), "{args:?}: {stderr:?}");
    }
}

#[test]
fn a_terminal_shows_progress_and_no_progress_removes_it() {
    let tmp = tempfile::tempdir().unwrap();
    let job = two_ranks(tmp.path());
    let summaries = tmp.path().join("summaries");
    let out = piped(tmp.path(), &["scan", job.to_str().unwrap(), "-o", summaries.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "scan: {}", String::from_utf8_lossy(&out.stderr));
    let summaries = summaries.to_str().unwrap();
    let target = fixture().join("target");
    let target = target.to_str().unwrap();
    // (command, what its progress says on a terminal)
    let cases: [(&[&str], &[&str]); 4] = [
        (&["inspect", target], &["inspect [", "tensors, "]),
        (
            &["merge", summaries],
            &["merge: [1/2] reading the summaries", "merge: [2/2] analysing across ranks"],
        ),
        (&["scan", job.to_str().unwrap(), "-o", summaries], &["scan: [1/3] reading the run"]),
        (&["watch", target], &["watch: [1/2] reading the run", "watch: [2/2] watching the conditions"]),
    ];
    for (args, expected) in cases {
        let (shown, code) = on_terminal(tmp.path(), args);
        assert!(matches!(code, 0..=2), "{args:?} exited {code}: {shown}");
        for e in expected {
            assert!(shown.contains(e), "{args:?} on a terminal does not show `{e}`: {shown:?}");
        }
        // What the other assertions look for is what progress writes.
        assert!(!progress_in(&shown).is_empty(), "{args:?}: progress_in() misses {shown:?}");
        let mut quiet = args.to_vec();
        quiet.push("--no-progress");
        let (shown, code) = on_terminal(tmp.path(), &quiet);
        assert!(matches!(code, 0..=2), "{quiet:?} exited {code}: {shown}");
        assert!(progress_in(&shown).is_empty(), "{quiet:?} still shows progress: {shown:?}");
        // The report itself is still there.
        assert!(!shown.trim().is_empty(), "{quiet:?} showed nothing");
    }
}
