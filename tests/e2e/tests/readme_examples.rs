//! Every command README.md shows runs as written on what `scripts/demo` leaves, the way a new user tries
//! them after the demo (its runs/npu, gpu_dump/, runs/graph, bench/, runs/unfused, runs/a, runs/b,
//! runs/overflow). The demo itself runs here (its `DEMO_BIN` skips the build, a few seconds), then:
//! - a `$ command` of README's demo transcript is one the demo ran, and every line README shows under it
//!   is in the demo's output for it (a line ending in ` ...` is a prefix; a bare `...` skips lines);
//!   an `analyzer` command of it, run again, exits 1 when README shows a finding under it, else 0;
//! - an `analyzer` line of README's `sh` blocks, run by bash in the demo's directory, exits 0 or 1 (2 is a
//!   usage or input error: no example is one) and prints something, or writes the file it names with `-o`.
//!   Lines naming `train.py` capture the user's own job and are not run (README says so beside them).

mod common;
use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;

/// One command README shows, with the output lines it shows under it (transcript commands only).
struct Example {
    command: String,
    shown: Vec<String>,
    in_transcript: bool,
}

/// The commands of README's code blocks: `$ ` lines of a plain block (a transcript) with the lines under
/// them, and the lines of an `sh` block that are not comments.
fn readme_examples(readme: &str) -> Vec<Example> {
    let (mut out, mut fence): (Vec<Example>, Option<&str>) = (Vec::new(), None);
    for line in readme.lines() {
        if let Some(info) = line.strip_prefix("```") {
            fence = if fence.is_some() { None } else { Some(info.trim()) };
            continue;
        }
        match fence {
            Some("sh") if !line.trim().is_empty() && !line.starts_with('#') => out.push(Example {
                command: line.trim().to_string(),
                shown: Vec::new(),
                in_transcript: false,
            }),
            Some("") => match line.strip_prefix("$ ") {
                // The comment beside a transcript command is README's, not the demo's.
                Some(command) => out.push(Example {
                    command: command.split(" #").next().unwrap_or(command).trim().to_string(),
                    shown: Vec::new(),
                    in_transcript: true,
                }),
                None => {
                    if let Some(last) = out.last_mut().filter(|e| e.in_transcript) {
                        last.shown.push(line.to_string());
                    }
                }
            },
            _ => {}
        }
    }
    out
}

/// What the demo printed for `command` (its `$ command` line shown by the demo's `show`), up to the next
/// command or step heading; None when the demo never ran it.
fn demo_output<'a>(log: &'a str, command: &str) -> Option<Vec<&'a str>> {
    let mut lines = log.lines().skip_while(|l| l.strip_prefix("$ ") != Some(command));
    lines.next()?;
    Some(lines.take_while(|l| !l.starts_with("$ ") && !l.starts_with("== ")).collect())
}

/// Whether README's shown line is in the demo's output: exactly, or as a prefix when it ends in ` ...`.
fn shows(output: &[&str], shown: &str) -> bool {
    let shown = shown.trim_end();
    match shown.strip_suffix(" ...") {
        Some(prefix) => output.iter().any(|l| l.starts_with(prefix)),
        None => output.iter().any(|l| l.trim_end() == shown),
    }
}

/// Runs `command` as a shell line in `dir` with the built binaries first on PATH, as the demo leaves a
/// user's shell: exit status, stdout and stderr.
fn run_line(dir: &Path, bin: &Path, command: &str) -> (i32, String) {
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let out = Command::new("bash")
        .args(["-c", command])
        .current_dir(dir)
        .env("PATH", path)
        .env("SIM_ACL_LIB", runtime_lib())
        .output()
        .expect("run bash");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.code().unwrap_or(-1), text)
}

#[test]
fn every_readme_example_runs_on_the_demo() {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let readme = std::fs::read_to_string(repo.join("README.md")).expect("read README.md");
    let scratch = scratch();
    let demo_dir = scratch.path().join("demo");
    let bin = analyzer_bin().parent().expect("target/debug").to_path_buf();
    // Run from bash with both streams in one pipe, so warnings stay beside the lines they belong to.
    let demo = format!("DEMO_BIN={} DEMO_DIR={} scripts/demo 2>&1", bin.display(), demo_dir.display());
    let (code, log) = run_line(&repo, &bin, &demo);
    let log = log.replace("\x1b[1m", "").replace("\x1b[0m", "");
    assert_eq!(code, 0, "scripts/demo exits {code}:\n{log}");

    let mut failures = Vec::new();
    let mut ran = 0;
    for example in readme_examples(&readme) {
        let command = example.command.as_str();
        if example.in_transcript {
            let Some(output) = demo_output(&log, command) else {
                failures.push(format!(
                    "`{command}` (README's demo transcript) is not a command scripts/demo runs"
                ));
                continue;
            };
            for shown in example.shown.iter().filter(|l| l.trim() != "...") {
                if !shows(&output, shown) {
                    failures.push(format!(
                        "`{command}`: README shows `{shown}`, the demo printed:\n{}",
                        output.join("\n")
                    ));
                }
            }
            // The demo ran its captures (record, sim-train) already; running them again is refused.
            if command.starts_with("analyzer ") && !command.starts_with("analyzer record ") {
                let finding = example.shown.iter().any(|l| {
                    ["CULPRIT", "FIRST OVERFLOW", "NONDETERMINISTIC"]
                        .iter()
                        .any(|verdict| l.contains(verdict))
                });
                let expected = if finding { 1 } else { 0 };
                let (code, text) = run_line(&demo_dir, &bin, command);
                if code != expected {
                    failures
                        .push(format!("`{command}` exits {code}, README's output says {expected}:\n{text}"));
                }
                ran += 1;
            }
        } else if command.starts_with("analyzer ") && !command.contains("train.py") {
            let (code, text) = run_line(&demo_dir, &bin, command);
            let words: Vec<&str> = command.split_whitespace().collect();
            let written = words.iter().position(|w| *w == "-o").map(|o| words[o + 1]);
            if code != 0 && code != 1 {
                failures.push(format!("`{command}` exits {code} on the demo's runs:\n{text}"));
            } else if written.is_some_and(|file| !demo_dir.join(file).exists()) {
                failures.push(format!("`{command}` wrote no {}", written.unwrap_or_default()));
            } else if written.is_none() && text.trim().is_empty() {
                failures.push(format!("`{command}` printed nothing"));
            }
            ran += 1;
        }
    }
    assert!(failures.is_empty(), "README's examples on the demo:\n\n{}", failures.join("\n\n"));
    assert!(ran >= 10, "only {ran} of README's commands ran: are its code blocks still ```sh and plain ```?");
}

#[test]
fn readme_blocks_give_commands_and_shown_lines() {
    let readme =
        "```sh\n# a comment\nanalyzer diff a b   # why\n```\n```\n$ analyzer x   # note\nOUT 1\n  ...\n```\n";
    let examples = readme_examples(readme);
    assert_eq!(examples.len(), 2);
    assert_eq!(
        (examples[0].command.as_str(), examples[0].in_transcript),
        ("analyzer diff a b   # why", false)
    );
    assert_eq!((examples[1].command.as_str(), examples[1].in_transcript), ("analyzer x", true));
    assert_eq!(examples[1].shown, ["OUT 1", "  ..."]);
    let log = "$ analyzer x\nOUT 1\n  step 0: A is B: more\n$ analyzer y\nOUT 2\n";
    let output = demo_output(log, "analyzer x").expect("ran");
    assert!(shows(&output, "OUT 1") && shows(&output, "  step 0: A is B ...") && !shows(&output, "OUT 2"));
    assert!(demo_output(log, "analyzer z").is_none());
}
