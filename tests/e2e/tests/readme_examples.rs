//! Every command README.md shows runs as written on what `scripts/demo` leaves, the way a new user tries
//! them after the demo (its runs/npu, gpu_dump/, runs/graph, bench/, runs/unfused, runs/a, runs/b,
//! runs/overflow). The demo itself runs here (its `DEMO_BIN` skips the build, a few seconds), then:
//! - a `$ command` of README's demo transcript is one the demo ran, and every line README shows under it
//!   is in the demo's output for it (a line ending in ` ...` is a prefix; a bare `...` skips lines);
//!   an `analyzer` command of it, run again, exits 1 when README shows a finding under it, else 0;
//! - an `analyzer` line of README's `sh` blocks, run by bash in the demo's directory, exits 0 or 1 (2 is a
//!   usage or input error: no example is one) and prints something, or writes the file it names with `-o`.
//!   Lines naming `train.py` capture the user's own job and are not run (README says so beside them).
//!
//! docs/CLI.md, the CLI's contract, is held to its examples the same way, on the same demo run (one per
//! test binary): every `$ analyzer ...` line of its transcripts runs in a copy of the demo's runs, exits
//! with the status its `# exit status N` says, and prints every line shown under it; every `analyzer ...`
//! span of its text is a synopsis (`analyzer compare TARGET BENCH`: the command exists), or runs there and
//! answers (exit 0 or 1, some output), or is in `CLI_DOC_SKIPPED` with why the demo cannot run it.

mod common;
use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

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

/// Whether a shown line is in the output: exactly, or as a pattern where it holds `...` (what varies from
/// run to run, or is left out): the parts around each `...` in order, the first starting the line and the
/// last ending it (a line ending in ` ...` is a prefix).
fn shows(output: &[&str], shown: &str) -> bool {
    let shown = shown.trim_end();
    let pieces: Vec<&str> = shown.split("...").collect();
    // The spaces beside a `...` belong to it: `is B ...` is a prefix of `is B: more`.
    let parts: Vec<&str> = (0..pieces.len())
        .map(|i| {
            let piece = if i > 0 { pieces[i].trim_start() } else { pieces[i] };
            if i + 1 < pieces.len() {
                piece.trim_end()
            } else {
                piece
            }
        })
        .collect();
    output.iter().any(|line| {
        let line = line.trim_end();
        let (first, last) = (parts[0], parts[parts.len() - 1]);
        if parts.len() == 1 {
            return line == shown;
        }
        let Some(mut rest) = line.strip_prefix(first) else { return false };
        for middle in &parts[1..parts.len() - 1] {
            let Some(at) = rest.find(middle) else { return false };
            rest = &rest[at + middle.len()..];
        }
        rest.ends_with(last)
    })
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

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn bin_dir() -> PathBuf {
    analyzer_bin().parent().expect("target/debug").to_path_buf()
}

/// `scripts/demo`, run once for the tests of this binary: its directory (under cargo's scratch directory
/// for tests, emptied by the demo first) and its log; Err with the log when it failed. A second process of
/// this binary on the same target directory waits for the first to exit (a lock held until then): its demo
/// would empty the directory under the first one's examples.
fn demo() -> &'static Result<(PathBuf, String), String> {
    static DEMO: OnceLock<Result<(PathBuf, String), String>> = OnceLock::new();
    static HELD_UNTIL_EXIT: OnceLock<std::fs::File> = OnceLock::new();
    DEMO.get_or_init(|| {
        let lock = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("readme-examples-demo.lock");
        let file = std::fs::File::create(&lock)
            .unwrap_or_else(|e| panic!("cannot create the lock file {}: {e}", lock.display()));
        file.lock().unwrap_or_else(|e| panic!("cannot lock {}: {e}", lock.display()));
        HELD_UNTIL_EXIT.get_or_init(|| file);
        let demo_dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("readme-examples-demo");
        let bin = bin_dir();
        // Run from bash with both streams in one pipe, so warnings stay beside the lines they belong to.
        let demo = format!("DEMO_BIN={} DEMO_DIR={} scripts/demo 2>&1", bin.display(), demo_dir.display());
        let (code, log) = run_line(&repo(), &bin, &demo);
        let log = log.replace("\x1b[1m", "").replace("\x1b[0m", "");
        if code == 0 {
            Ok((demo_dir, log))
        } else {
            Err(format!("scripts/demo exits {code}:\n{log}"))
        }
    })
}

/// A relative `DEMO_DIR` is the caller's, as a relative `DEMO_BIN` is: the demo empties and writes it
/// there, not under the repository's root (where it went before). Its first command is a stand-in
/// `analyzer` that stops the demo at once.
#[test]
fn a_relative_demo_dir_is_the_directory_the_demo_is_started_from() {
    let dir = scratch();
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    std::fs::write(bin.join("analyzer"), "#!/bin/sh\nexit 3\n").unwrap();
    let mode = std::os::unix::fs::PermissionsExt::from_mode(0o755);
    std::fs::set_permissions(bin.join("analyzer"), mode).unwrap();
    let name = format!("demo-dir-test-{}", std::process::id());
    let demo = format!("DEMO_BIN=bin DEMO_DIR={name} bash {}/scripts/demo 2>&1", repo().display());
    let (code, log) = run_line(dir.path(), &bin, &demo);
    let in_repo = repo().join(&name);
    let wrote_in_repo = in_repo.exists();
    let _ = std::fs::remove_dir_all(&in_repo);
    assert!(!wrote_in_repo, "a relative DEMO_DIR was written under the repository's root:\n{log}");
    assert_eq!(code, 3, "{log}");
    assert!(dir.path().join(&name).join("npu_model.json").is_file(), "{log}");
}

/// The demo empties its directory: a `DEMO_DIR` that holds someone's files (a typo, or `DEMO_DIR=$HOME`)
/// is refused, exit 2, and nothing in it is touched (it was deleted whole).
#[test]
fn a_demo_dir_holding_other_files_is_never_emptied() {
    let dir = scratch();
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    std::fs::create_dir(dir.path().join("mine")).unwrap();
    let precious = dir.path().join("mine/precious.txt");
    std::fs::write(&precious, "keep me").unwrap();
    let demo = format!("DEMO_BIN=bin DEMO_DIR=mine bash {}/scripts/demo 2>&1", repo().display());
    let (code, log) = run_line(dir.path(), &bin, &demo);
    assert_eq!(std::fs::read_to_string(&precious).ok().as_deref(), Some("keep me"), "{log}");
    assert_eq!(code, 2, "{log}");
    assert!(log.contains("holds files the demo did not write"), "{log}");
}

#[test]
fn every_readme_example_runs_on_the_demo() {
    let readme = std::fs::read_to_string(repo().join("README.md")).expect("read README.md");
    let bin = bin_dir();
    let (demo_dir, log) = demo().as_ref().unwrap_or_else(|e| panic!("{e}"));
    let demo_dir = demo_dir.as_path();

    let mut failures = Vec::new();
    let mut ran = 0;
    for example in readme_examples(&readme) {
        let command = example.command.as_str();
        if example.in_transcript {
            let Some(output) = demo_output(log, command) else {
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
                let (code, text) = run_line(demo_dir, &bin, command);
                if code != expected {
                    failures
                        .push(format!("`{command}` exits {code}, README's output says {expected}:\n{text}"));
                }
                ran += 1;
            }
        } else if command.starts_with("analyzer ") && !command.contains("train.py") {
            let (code, text) = run_line(demo_dir, &bin, command);
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

/// docs/CLI.md's `analyzer ...` spans the demo cannot run, each with why. An entry the page no longer
/// holds fails the test too, so that the list stays the page's.
const CLI_DOC_SKIPPED: &[(&str, &str)] = &[];

/// One `$ ` line of a docs/CLI.md transcript: the command, the exit status its `# exit status N` comment
/// says (None when it says none), and the lines shown under it.
struct Transcript {
    command: String,
    exit_status: Option<i32>,
    shown: Vec<String>,
}

/// docs/CLI.md's transcripts: the `$ ` lines of its plain code blocks (indented inside a list item too),
/// each with the lines under it.
fn cli_doc_transcripts(doc: &str) -> Vec<Transcript> {
    let (mut out, mut fence): (Vec<Transcript>, Option<(usize, String)>) = (Vec::new(), None);
    for line in doc.lines() {
        let indent = line.len() - line.trim_start().len();
        if let Some(info) = line.trim_start().strip_prefix("```") {
            fence = if fence.is_some() { None } else { Some((indent, info.trim().to_string())) };
            continue;
        }
        let Some((fence_indent, info)) = &fence else { continue };
        if !info.is_empty() {
            continue;
        }
        let line = line.get(*fence_indent..).unwrap_or(line.trim_start());
        match line.strip_prefix("$ ") {
            Some(command) => {
                let (command, comment) = command.split_once(" #").unwrap_or((command, ""));
                let exit_status = comment.trim().strip_prefix("exit status ").and_then(|n| n.parse().ok());
                out.push(Transcript { command: command.trim().to_string(), exit_status, shown: Vec::new() });
            }
            None => {
                if let Some(last) = out.last_mut() {
                    last.shown.push(line.to_string());
                }
            }
        }
    }
    out
}

/// The `analyzer ...` spans of docs/CLI.md's text (outside code blocks), in order, each once; a span that
/// a line break splits is read as one, with a space.
fn cli_doc_spans(doc: &str) -> Vec<String> {
    let mut in_block = false;
    let text: Vec<&str> = doc
        .lines()
        .filter(|line| {
            let fence = line.trim_start().starts_with("```");
            in_block ^= fence;
            !fence && !in_block
        })
        .collect();
    let mut out: Vec<String> = Vec::new();
    // Between backticks: the odd pieces of a split at each backtick.
    for span in text.join("\n").split('`').skip(1).step_by(2) {
        let span = span.split_whitespace().collect::<Vec<_>>().join(" ");
        if span.starts_with("analyzer ") && !out.contains(&span) {
            out.push(span);
        }
    }
    out
}

/// A span that names a command's form rather than a command line: it has a placeholder (an upper-case
/// word such as `RUN`, `[BENCH]`, `DIR...`), `...` or a choice `a|b`.
fn is_synopsis(span: &str) -> bool {
    span.split_whitespace().skip(1).any(|word| {
        let bare = word.trim_matches(|c| c == '[' || c == ']' || c == '.');
        word.contains("...")
            || word.contains('|')
            || (bare.len() > 1 && bare.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit()))
    })
}

#[test]
fn every_cli_doc_example_runs_on_the_demo() {
    let doc = std::fs::read_to_string(repo().join("docs/CLI.md")).expect("read docs/CLI.md");
    let bin = bin_dir();
    let (demo_dir, _) = demo().as_ref().unwrap_or_else(|e| panic!("{e}"));
    // A copy of what the demo recorded, so that what these commands write never meets the README test's.
    let scratch = scratch();
    let dir = scratch.path();
    for made in ["runs", "bench", "gpu_dump"] {
        copy_dir(&demo_dir.join(made), &dir.join(made));
    }

    let mut failures = Vec::new();
    let transcripts = cli_doc_transcripts(&doc);
    for transcript in &transcripts {
        let command = transcript.command.as_str();
        let Some(expected) = transcript.exit_status else {
            failures.push(format!("`$ {command}` says no `# exit status N`"));
            continue;
        };
        let (code, text) = run_line(dir, &bin, command);
        if code != expected {
            failures.push(format!("`{command}` exits {code}, docs/CLI.md says {expected}:\n{text}"));
        }
        let output: Vec<&str> = text.lines().collect();
        for shown in transcript.shown.iter().filter(|l| l.trim() != "...") {
            if !shows(&output, shown) {
                failures.push(format!("`{command}`: docs/CLI.md shows `{shown}`, it printed:\n{text}"));
            }
        }
    }

    let spans = cli_doc_spans(&doc);
    let commands = run_line(dir, &bin, "analyzer --help").1;
    let mut ran = 0;
    for span in &spans {
        let words: Vec<&str> = span.split_whitespace().collect();
        if is_synopsis(span) || words.len() == 2 {
            // A command's form or name: the command exists (`analyzer COMMAND --help` names none).
            let name = words[1];
            let known = name.starts_with('-')
                || name.chars().all(|c| c.is_ascii_uppercase())
                || commands.lines().any(|l| l.trim_start().starts_with(&format!("{name} ")));
            if !known {
                failures.push(format!("`{span}`: `analyzer --help` lists no command `{name}`"));
            }
        } else if CLI_DOC_SKIPPED.iter().any(|(skipped, _)| skipped == span) {
            continue;
        } else {
            let (code, text) = run_line(dir, &bin, span);
            if code != 0 && code != 1 {
                failures.push(format!(
                    "`{span}` exits {code} on the demo's runs (run it in a transcript with its status, or \
                     list it in CLI_DOC_SKIPPED with why):\n{text}"
                ));
            } else if text.trim().is_empty() {
                failures.push(format!("`{span}` printed nothing"));
            }
            ran += 1;
        }
    }
    for (skipped, why) in CLI_DOC_SKIPPED {
        if !spans.iter().any(|s| s == skipped) {
            failures
                .push(format!("CLI_DOC_SKIPPED lists `{skipped}` ({why}), docs/CLI.md no longer shows it"));
        }
    }
    assert!(failures.is_empty(), "docs/CLI.md's examples on the demo:\n\n{}", failures.join("\n\n"));
    assert!(
        transcripts.len() >= 5 && ran >= 2,
        "only {} transcripts and {ran} commands of docs/CLI.md ran: are its blocks still plain ```?",
        transcripts.len()
    );
}

#[test]
fn cli_doc_transcripts_and_spans_are_told_apart() {
    let doc = "Run `analyzer diff RUN1 RUN2`, `analyzer diff`, or `analyzer diff\nruns/a runs/b`.\n\
               - item:\n  ```\n  $ analyzer x --step 5   # exit status 2\n  error: a\n  ```\n\
               ```\n$ analyzer y\n```\n";
    let transcripts = cli_doc_transcripts(doc);
    assert_eq!(transcripts.len(), 2);
    assert_eq!(
        (transcripts[0].command.as_str(), transcripts[0].exit_status, transcripts[0].shown.as_slice()),
        ("analyzer x --step 5", Some(2), ["error: a".to_string()].as_slice())
    );
    assert_eq!((transcripts[1].command.as_str(), transcripts[1].exit_status), ("analyzer y", None));
    assert_eq!(
        cli_doc_spans(doc),
        ["analyzer diff RUN1 RUN2", "analyzer diff", "analyzer diff runs/a runs/b"]
    );
    for synopsis in
        ["analyzer diff RUN1 RUN2", "analyzer report TARGET [BENCH] -o FILE", "analyzer merge DIR... x"]
    {
        assert!(is_synopsis(synopsis), "{synopsis}");
    }
    for example in ["analyzer completions bash|zsh|fish", "analyzer compare ... | head"] {
        assert!(is_synopsis(example), "{example}");
    }
    assert!(
        !is_synopsis("analyzer diff runs/a runs/b") && !is_synopsis("analyzer inspect runs/npu --step 0")
    );
    let output = ["analyzer 0.1.0 (commit 1a2b3c, capture format 4, CLI 2)"];
    assert!(shows(&output, "analyzer 0.1.0 (commit ..., capture format 4, CLI 2)"));
    assert!(!shows(&output, "analyzer 0.1.0 (commit ..., capture format 5, CLI 2)"));
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
