//! Every example in `analyzer --help` and each command's `--help` runs, as printed, against runs recorded
//! under the names the examples use (runs/npu with 4 ranks, runs/a, runs/b, bench/, an eager runs/eager with
//! its API-level benchmark msprobe_dump/, and the msprobe fixture
//! as npu_dump/ and gpu_dump/), and answers: exit status 0 or 1, and some output (or the file it names with
//! `-o`). An example whose filter matches nothing exits 2 (`Filter::check`) and fails here. A shell
//! redirection or pipe ends the command line that is run (`analyzer manpage | man -l -` runs
//! `analyzer manpage`); `record` runs the simulated training instead of `python train.py`.

mod common;
use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The commands whose help is read (`analyzer --help` too).
const COMMANDS: [&str; 14] = [
    "inspect",
    "compare",
    "diff",
    "overflow",
    "ranks",
    "scan",
    "merge",
    "report",
    "check",
    "watch",
    "convert",
    "record",
    "completions",
    "manpage",
];

/// The example command lines of one help text: lines that read `Example: analyzer ...`, `$ analyzer ...`
/// or `analyzer ...`.
fn examples(help: &str) -> Vec<String> {
    help.lines()
        .map(|l| l.trim())
        .map(|l| l.strip_prefix("Example:").or_else(|| l.strip_prefix('$')).unwrap_or(l).trim())
        .filter(|l| l.starts_with("analyzer ") && !l.starts_with("analyzer <"))
        .map(str::to_string)
        .collect()
}

/// Shell words: split at spaces, single and double quotes group (no escapes in our examples).
fn words(line: &str) -> Vec<String> {
    let (mut out, mut word, mut quote, mut any) = (Vec::new(), String::new(), None, false);
    for c in line.chars() {
        match (quote, c) {
            (None, '\'' | '"') => (quote, any) = (Some(c), true),
            (Some(q), c) if c == q => quote = None,
            (None, ' ') => {
                if any {
                    out.push(std::mem::take(&mut word));
                }
                any = false;
            }
            (_, c) => {
                word.push(c);
                any = true;
            }
        }
    }
    if any {
        out.push(word);
    }
    out
}

/// The places the examples name, recorded from the tiny model (4 steps and 4 ranks: `convert --step 3` and
/// `overflow --rank 3` select something).
fn world(dir: &Path) {
    let fused = r#"{"fusion": true, "faults": {"imprecise_fused_kernel": true}}"#;
    let model = model_file(dir, "npu.json", fused);
    let (collector, sim_train, lib) = (collector_lib(), sim_train_bin(), runtime_lib());
    let npu = dir.join("runs/npu");
    let mut args =
        vec!["record", "-o", path_str(&npu), "--collector", path_str(&collector), "--mode", "tensor"];
    args.extend(["--", path_str(&sim_train), "--model", path_str(&model), "--lib", path_str(&lib)]);
    args.extend(["--steps", "4", "--ranks", "4"]);
    let (code, stdout, stderr) = analyzer(&args);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    sim_bench(&model, 4, &dir.join("bench"));
    // A good run of the same 4-rank job, for `ranks --baseline` (a run of one rank has no answer across ranks).
    copy_dir(&npu, &dir.join("runs/good"));
    // An eager run (kernels) and msprobe's dump of the same model's PyTorch run (API calls).
    let eager = dir.join("runs/eager");
    let mut args =
        vec!["record", "-o", path_str(&eager), "--collector", path_str(&collector), "--mode", "tensor"];
    args.extend(["--", path_str(&sim_train), "--model", path_str(&model), "--lib", path_str(&lib)]);
    args.extend(["--steps", "2", "--eager"]);
    let (code, stdout, stderr) = analyzer(&args);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    sim_bench_as(&model, 2, &dir.join("msprobe_dump"), "msprobe");
    let fixture = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures/msprobe-tiny");
    std::os::unix::fs::symlink(fixture.join("target"), dir.join("npu_dump")).expect("link the fixture");
    std::os::unix::fs::symlink(fixture.join("bench"), dir.join("gpu_dump")).expect("link the fixture");
    for (run, seed) in [("runs/a", 1), ("runs/b", 2)] {
        let json = format!(
            r#"{{"run_seed": {seed}, "faults": {{"nondeterministic_op": "model/layer_1/attn/Softmax"}}}}"#
        );
        let model = model_file(dir, &format!("{seed}.json"), &json);
        record(&dir.join(run), &model, 2, &[], &[]);
    }
    std::fs::write(dir.join("watch.json"), r#"{"dead_relu": {"enabled": false}}"#).expect("write watch.json");
}

#[test]
fn every_help_example_runs_and_answers() {
    let dir = scratch();
    world(dir.path());
    let mut helps = vec![(String::from("analyzer --help"), vec!["--help".to_string()])];
    helps.extend(
        COMMANDS.iter().map(|c| (format!("analyzer {c} --help"), vec![c.to_string(), "--help".into()])),
    );
    let mut ran = 0;
    for (what, args) in helps {
        let (code, help, _) = analyzer(&args.iter().map(String::as_str).collect::<Vec<_>>());
        assert_eq!(code, 0, "{what}");
        for example in examples(&help) {
            let mut argv = words(&example);
            assert_eq!(argv.remove(0), "analyzer");
            if let Some(shell) = argv.iter().position(|w| w == ">" || w == "|") {
                argv.truncate(shell);
            }
            if argv[0] == "record" {
                // The training command and a fresh run directory stand in for the example's.
                let end = argv.iter().position(|a| a == "--").expect("record examples end in -- COMMAND");
                argv.truncate(end + 1);
                if let Some(o) = argv.iter().position(|a| a == "-o") {
                    argv[o + 1] = format!("{}-recorded-{ran}", argv[o + 1].trim_end_matches('/'));
                }
                let model = model_file(dir.path(), "record.json", "{}");
                let (sim_train, lib) = (sim_train_bin(), runtime_lib());
                for arg in [path_str(&sim_train), "--model", path_str(&model), "--lib", path_str(&lib)] {
                    argv.push(arg.to_string());
                }
            }
            let out = Command::new(analyzer_bin()).args(&argv).current_dir(dir.path()).output().expect("run");
            let code = out.status.code().unwrap_or(-1);
            assert!(
                code == 0 || code == 1,
                "`{example}` (from {what}) exits {code}:\n{}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            let written = argv.iter().position(|a| a == "-o").map(|o| dir.path().join(&argv[o + 1]));
            match written {
                Some(file) if argv[0] != "record" => {
                    assert!(file.exists(), "`{example}` wrote no {}", file.display())
                }
                _ => assert!(!out.stdout.is_empty() || !out.stderr.is_empty(), "`{example}` printed nothing"),
            }
            ran += 1;
        }
    }
    assert!(ran >= COMMANDS.len(), "only {ran} examples found in the help texts");
}

#[test]
fn shell_words_keep_quoted_globs_whole() {
    assert_eq!(
        words("analyzer inspect runs/npu --op 'model/layer_0/*'"),
        ["analyzer", "inspect", "runs/npu", "--op", "model/layer_0/*"]
    );
    assert_eq!(
        examples("Example: analyzer diff a b\n  $ analyzer x\nUsage: analyzer <COMMAND>"),
        ["analyzer diff a b", "analyzer x"]
    );
}
