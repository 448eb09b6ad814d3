//! The command-line contract of docs/CLI.md, through the binary: `--format table|csv|json` on every command,
//! JSON's `schema_version`, diff's verdicts in CSV and JSON, colour and NO_COLOR, a reader that closes the
//! pipe early, `--version`, completions and the man page, help that fits in 100 columns. The runs are the
//! msprobe-tiny fixture (small, real) and copies of it.

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

const ANALYZER: &str = env!("CARGO_BIN_EXE_analyzer");

fn fixture() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/msprobe-tiny");
    assert!(dir.is_dir(), "fixture {} missing: ../shared must sit beside the repository", dir.display());
    dir
}

fn analyzer(args: &[&str]) -> Output {
    Command::new(ANALYZER).args(args).current_dir(fixture()).output().expect("run analyzer")
}

fn stdout(out: &Output) -> String {
    String::from_utf8(out.stdout.clone()).expect("utf-8")
}

/// Runs and checks the exit status is one of `codes`.
fn run(args: &[&str], codes: &[i32]) -> String {
    let out = analyzer(args);
    let code = out.status.code().unwrap_or(-1);
    assert!(codes.contains(&code), "{args:?} exited {code}: {}", String::from_utf8_lossy(&out.stderr));
    stdout(&out)
}

fn json(text: &str, command: &str) -> serde_json::Value {
    let v: serde_json::Value =
        serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
    assert_eq!(v["schema_version"], 1, "{command}: {text:.200}");
    assert_eq!(v["command"], command);
    v
}

/// A copy of the bf16 run in which GELU's output holds its input instead: the same configuration (names,
/// dtypes, shapes), one op that differs while its inputs are identical.
fn altered_target(tmp: &std::path::Path) -> PathBuf {
    let from = fixture().join("target/step0/rank0");
    let to = tmp.join("altered/step0/rank0");
    std::fs::create_dir_all(to.join("dump_tensor_data")).unwrap();
    for entry in std::fs::read_dir(from.join("dump_tensor_data")).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), to.join("dump_tensor_data").join(entry.file_name())).unwrap();
    }
    let dump = std::fs::read_to_string(from.join("dump.json")).unwrap();
    let gelu = "\"data_name\": \"Functional.gelu.0.forward.output.0.pt\"";
    assert!(dump.contains(gelu));
    let altered = dump.replace(gelu, "\"data_name\": \"Functional.gelu.0.forward.input.0.pt\"");
    std::fs::write(to.join("dump.json"), altered).unwrap();
    tmp.join("altered")
}

fn csv_rows(text: &str) -> (Vec<String>, Vec<Vec<String>>) {
    let mut reader = csv::Reader::from_reader(text.as_bytes());
    let header = reader.headers().expect("a header").iter().map(str::to_string).collect();
    let rows = reader.records().map(|r| r.expect("a CSV row").iter().map(str::to_string).collect()).collect();
    (header, rows)
}

/// The keys of each object of pretty-printed JSON, in the order written, innermost objects first (an array
/// counts as an object without keys).
fn keys_in_order(text: &str) -> Vec<Vec<String>> {
    let (mut open, mut done): (Vec<Vec<String>>, Vec<Vec<String>>) = (Vec::new(), Vec::new());
    for line in text.lines().map(str::trim) {
        if let Some((key, _)) = line.strip_prefix('"').and_then(|l| l.split_once("\": ")) {
            open.last_mut().expect("a key inside an object").push(key.to_string());
        }
        if line.ends_with('{') || line.ends_with('[') {
            open.push(Vec::new());
        } else if matches!(line, "}" | "}," | "]" | "],") {
            done.push(open.pop().expect("an object to close"));
        }
    }
    done
}

#[test]
fn every_command_speaks_table_csv_and_json() {
    let tmp = tempfile::tempdir().unwrap();
    // inspect (which spelled JSON `--json` in contract version 1; that still works)
    let table = run(&["inspect", "target", "--op", "linear"], &[0]);
    assert!(table.contains("Functional.linear.0.forward"), "{table}");
    let (header, rows) = csv_rows(&run(&["inspect", "target", "--op", "linear", "--format", "csv"], &[0]));
    assert_eq!(header[..3], ["op", "op_type", "step"]);
    assert!(rows.len() >= 6 && rows.iter().all(|r| r[0].contains("linear")), "{rows:?}");
    let v = json(&run(&["inspect", "target", "--op", "linear", "--format", "json"], &[0]), "inspect");
    assert_eq!(
        v["ops"].as_array().map(Vec::len),
        json(&run(&["inspect", "target", "--op", "linear", "--json"], &[0]), "inspect")["ops"]
            .as_array()
            .map(Vec::len)
    );
    let file = tmp.path().join("inspect.json");
    run(&["inspect", "target", "--format", "json", "-o", file.to_str().unwrap()], &[0]);
    json(&std::fs::read_to_string(&file).unwrap(), "inspect");

    // compare (every row with its step and rank; the keys of every object sorted after the envelope's two,
    // as when the report was one serde_json::Value)
    let text = run(&["compare", "target", "bench", "--format", "json"], &[0, 1]);
    let objects = keys_in_order(&text);
    let top = objects.last().expect("the report's object");
    assert_eq!(top[..2], ["schema_version", "command"]);
    assert!(top.len() > 10 && top[2..].is_sorted(), "{top:?}");
    assert!(objects.iter().filter(|k| k.contains(&"cosine".to_string())).count() > 100);
    assert!(objects[..objects.len() - 1].iter().all(|keys| keys.is_sorted()), "{objects:?}");
    let v = json(&text, "compare");
    assert!(v["rows"].as_array().is_some_and(|r| r.len() > 100));
    assert!(v["rows"].as_array().unwrap().iter().all(|r| r["rank"] == 0 && r["step"] == 0), "{v}");
    let all = run(&["compare", "target", "bench", "--all", "--color", "never"], &[0, 1]);
    let heading = all.lines().skip_while(|l| !l.starts_with("Every compared tensor")).nth(1);
    assert_eq!(heading.and_then(|h| h.split_whitespace().next()), Some("rank"), "{all}");
    let (header, _) = csv_rows(&run(&["compare", "target", "bench", "--format", "csv"], &[0, 1]));
    assert_eq!(header[0], "NPU Name");

    // overflow
    let v = json(&run(&["overflow", "target", "--format", "json"], &[0, 1]), "overflow");
    assert!(v["origins"].is_array());
    let (header, _) = csv_rows(&run(&["overflow", "target", "--format", "csv"], &[0, 1]));
    assert_eq!(header[..3], ["step", "rank", "op"]);

    // convert: the summary, or one entry per tensor
    let npy = tmp.path().join("npy");
    let n = npy.to_str().unwrap();
    let v =
        json(&run(&["convert", "target", "-o", n, "--op", "linear", "--format", "json"], &[0]), "convert");
    let tensors = v["tensors"].as_array().unwrap();
    assert!(!tensors.is_empty() && tensors.iter().all(|t| t["status"] == "written"), "{v}");
    let (header, rows) =
        csv_rows(&run(&["convert", "target", "-o", n, "--op", "linear", "--format", "csv"], &[0]));
    assert_eq!(header, ["tensor", "file", "status", "bytes", "note"]);
    assert_eq!(rows.len(), tensors.len());
    assert!(run(&["convert", "target", "-o", n, "--op", "linear"], &[0]).starts_with("wrote "));
}

#[test]
fn diff_reports_carry_the_verdicts() {
    // The same dump twice: identical.
    let v = json(&run(&["diff", "target", "target", "--format", "json"], &[0]), "diff");
    assert_eq!(v["verdict"], "identical");
    let (_, rows) = csv_rows(&run(&["diff", "target", "target", "--format", "csv"], &[0]));
    assert!(rows.is_empty(), "{rows:?}");

    // The bf16 run against the fp32 one is not one configuration: refused (exit 2), no verdict; the
    // reason is a REFUSED input problem (JSON, and on stderr beside it).
    let v = json(&run(&["diff", "target", "bench", "--format", "json"], &[2]), "diff");
    assert_eq!((v["verdict"].as_str(), v["compared_tensors"].as_u64()), (Some("refused"), Some(0)), "{v}");
    let refusal = &v["input_problems"][0];
    assert_eq!(refusal["kind"], "refused", "{v}");
    assert!(refusal["message"].as_str().unwrap().contains("not the same configuration"), "{v}");
    let out = analyzer(&["diff", "target", "bench", "--format", "json"]);
    assert!(String::from_utf8_lossy(&out.stderr).starts_with("REFUSED: "), "{out:?}");

    // One configuration in which GELU's output changed while its input did not.
    let tmp = tempfile::tempdir().unwrap();
    let altered = altered_target(tmp.path());
    let altered = altered.to_str().unwrap();
    let v = json(&run(&["diff", "target", altered, "--format", "json"], &[1]), "diff");
    assert_eq!(v["verdict"], "different");
    let first = &v["first_differences"][0];
    assert_eq!(
        (first["op"].as_str(), first["verdict"].as_str()),
        (Some("Functional.gelu.0.forward"), Some("nondeterministic"))
    );
    let (header, rows) = csv_rows(&run(&["diff", "target", altered, "--format", "csv"], &[1]));
    let col =
        |name: &str| header.iter().position(|h| h == name).unwrap_or_else(|| panic!("no column {name}"));
    let firsts: Vec<&Vec<String>> = rows.iter().filter(|r| r[col("kind")] == "first_difference").collect();
    assert_eq!(firsts.len(), v["first_differences"].as_array().unwrap().len());
    assert_eq!(firsts[0][col("op")], first["op"].as_str().unwrap());
    assert_eq!(firsts[0][col("verdict")], first["verdict"].as_str().unwrap());
    assert!(["nondeterministic", "propagating", "unknown"].contains(&firsts[0][col("verdict")].as_str()));
    let census: Vec<&Vec<String>> = rows.iter().filter(|r| r[col("kind")] == "census").collect();
    assert_eq!(census.len(), v["census"].as_array().unwrap().len());
    assert!(!census.is_empty());
    // A rank in every output: the census's rows (CSV, JSON, the table's column), the first differences.
    assert!(census.iter().all(|r| r[col("rank")] == "0"), "{census:?}");
    assert!(v["census"].as_array().unwrap().iter().all(|c| c["rank"] == 0), "{v}");
    assert!(firsts.iter().all(|r| r[col("rank")] == "0"), "{firsts:?}");
    let table = run(&["diff", "target", altered, "--color", "never"], &[1]);
    let heading = table.lines().skip_while(|l| !l.starts_with("Every op whose output differed")).nth(1);
    assert_eq!(heading.map(|h| h.split_whitespace().take(2).collect::<Vec<_>>()), Some(vec!["rank", "op"]));
    assert!(table.contains("step 0 rank 0: Functional.gelu.0.forward"), "{table}");
}

#[test]
fn colour_is_real_and_asked_for() {
    let plain = run(&["compare", "target", "bench", "--cosine-min", "1.1"], &[1]);
    assert!(!plain.contains('\x1b'), "no colour into a pipe");
    let coloured = run(&["compare", "target", "bench", "--cosine-min", "1.1", "--color", "always"], &[1]);
    assert!(coloured.contains("\x1b[1;31mCULPRIT\x1b[0m"), "{coloured:.400}");
    // `always` is the user's explicit wish, over NO_COLOR; `never` wins over a terminal.
    let out = Command::new(ANALYZER)
        .args(["overflow", "target", "--color", "always"])
        .env("NO_COLOR", "1")
        .current_dir(fixture())
        .output()
        .unwrap();
    assert!(stdout(&out).contains('\x1b'));
    let never = run(&["diff", "target", "target", "--color", "never"], &[0]);
    assert!(!never.contains('\x1b') && never.contains("bit-identical"), "{never}");
}

/// Runs the analyzer into a pipe whose reader has already left (`analyzer ... | head` once `head` has
/// its line): the reading end is closed before the analyzer starts, so its first write to stdout fails
/// with EPIPE, whatever the size of the report.
fn into_closed_pipe(args: &[&str]) -> Output {
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    Command::new(ANALYZER)
        .args(args)
        .current_dir(fixture())
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .expect("run analyzer")
}

/// `analyzer ... | head`: the reader leaves before the report is written. Nothing more on stderr than
/// when everything is read (CSV and JSON put their input problems there), no "Broken pipe", and the exit
/// status is still what was found: every command, in every format (the CSV and JSON writers wrap the
/// EPIPE in their own errors).
#[test]
fn a_closed_pipe_ends_quietly_with_the_findings_status() {
    let tmp = tempfile::tempdir().unwrap();
    let altered = altered_target(tmp.path());
    let altered = altered.to_str().unwrap();
    let page = tmp.path().join("report.html");
    let converted = tmp.path().join("npy");
    let scanned = tmp.path().join("summaries");
    let formats = ["table", "csv", "json"];
    let mut cases: Vec<(Vec<&str>, Option<i32>)> = Vec::new();
    for format in formats.iter().chain(&["msprobe-csv"]) {
        cases.push((
            vec!["compare", "target", "bench", "--all", "--cosine-min", "1.1", "--format", format],
            Some(1),
        ));
        cases.push((vec!["compare", "target", "target", "--all", "--format", format], Some(0)));
    }
    for format in formats {
        cases.push((vec!["inspect", "target", "--format", format], Some(0)));
        cases.push((vec!["diff", "target", altered, "--format", format], Some(1)));
        cases.push((vec!["diff", "target", "target", "--format", format], Some(0)));
        for command in ["overflow", "watch", "check", "ranks"] {
            cases.push((vec![command, "target", "--format", format], None));
        }
        cases.push((vec!["convert", "target", "-o", converted.to_str().unwrap(), "--format", format], None));
        cases.push((vec!["scan", "target", "-o", scanned.to_str().unwrap(), "--format", format], None));
    }
    cases.push((vec!["watch", "--list-conditions"], Some(0)));
    cases.push((vec!["report", "target", "bench", "-o", page.to_str().unwrap()], None));
    for (args, expected) in cases {
        // What the command says and exits with when its reader reads everything (convert and scan write
        // into a new directory each time).
        let fresh = || [&converted, &scanned].map(|dir| std::fs::remove_dir_all(dir).ok());
        fresh();
        let full = analyzer(&args);
        fresh();
        let closed = into_closed_pipe(&args);
        let stderr = String::from_utf8_lossy(&closed.stderr);
        assert!(!stderr.contains("Broken pipe") && !stderr.contains("error"), "{args:?} said: {stderr}");
        assert_eq!(stderr, String::from_utf8_lossy(&full.stderr), "{args:?}");
        assert_eq!(closed.status.code(), full.status.code(), "{args:?}: {stderr}");
        if let Some(expected) = expected {
            assert_eq!(closed.status.code(), Some(expected), "{args:?}: {stderr}");
        }
        assert!(!full.stdout.is_empty(), "{args:?} wrote nothing, so no pipe was tested");
    }
}

/// `analyzer --help` lists each command with its summary: a summary that spans lines is wrapped by clap,
/// in its column and only where the next word would not fit, never at a line break of its doc comment
/// ("... name the first op that" / "fails while its inputs pass").
#[test]
fn the_command_list_keeps_each_summary_in_its_column() {
    let help = run(&["--help"], &[0]);
    let list: Vec<&str> = help
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .collect();
    assert!(list.len() >= 15, "{help}");
    let indent = |l: &str| l.len() - l.trim_start().len();
    // "  compare      Compare ...": the summaries' column.
    let column = |l: &str| {
        let name = l.trim_start().split(' ').next().unwrap_or("");
        indent(l) + name.len() + indent(&l.trim_start()[name.len()..])
    };
    let summaries = column(list[0]);
    assert!(summaries > 4, "{help}");
    let width = list.iter().map(|l| l.len()).max().unwrap_or(0);
    for (i, line) in list.iter().enumerate() {
        if indent(line) == 2 {
            assert_eq!(column(line), summaries, "a command's summary out of its column:\n{help}");
        } else {
            assert_eq!(indent(line), summaries, "a summary broken out of its column:\n{help}");
            let word = line.trim_start().split(' ').next().unwrap_or("");
            assert!(
                list[i - 1].len() + 1 + word.len() > width,
                "a summary broken where its next word fits:\n{}\n{line}",
                list[i - 1]
            );
        }
    }
}

#[test]
fn version_completions_and_man_page() {
    let version = run(&["--version"], &[0]);
    assert!(version.starts_with("analyzer ") && version.contains("(commit "), "{version}");
    assert!(version.contains("capture format ") && version.contains(", CLI 2)"), "{version}");
    assert!(run(&["compare", "--version"], &[0]).contains("(commit "));
    for (shell, marker) in
        [("bash", "complete -F"), ("zsh", "#compdef analyzer"), ("fish", "complete -c analyzer")]
    {
        let script = run(&["completions", shell], &[0]);
        assert!(script.contains(marker), "{shell}: {script:.300}");
        for sub in ["compare", "diff", "overflow", "inspect", "convert", "record", "msprobe-csv"] {
            assert!(script.contains(sub), "{shell} completion lacks {sub}");
        }
    }
    let man = run(&["manpage"], &[0]);
    assert!(man.starts_with(".ie") || man.contains(".TH analyzer"), "{man:.300}");
    for sub in ["compare", "diff", "overflow", "record", "completions"] {
        assert!(man.contains(sub), "man page lacks {sub}");
    }
}

/// `--op` is a glob matched against the whole name, or a word matched anywhere in it (docs/CLI.md, "Common
/// options"): every command's `--help` says both, and a plain word selects the ops that contain it.
#[test]
fn op_help_says_a_plain_word_matches_anywhere() {
    for command in
        ["inspect", "compare", "diff", "overflow", "report", "ranks", "scan", "check", "watch", "convert"]
    {
        let help = run(&[command, "--help"], &[0]);
        let op = help.split("--op <PATTERN>").nth(1).unwrap_or_default();
        let op = op.split("\n      --").next().unwrap_or_default().split_whitespace().collect::<Vec<_>>();
        let op = op.join(" ");
        assert!(op.contains("whole name") && op.contains("anywhere"), "{command} --help on --op: {op}");
    }
    let selected = run(&["inspect", "target", "--op", "embedding"], &[0]);
    assert!(selected.contains("Functional.embedding.0.forward"), "{selected:.500}");
}

/// The lines of a help text over 100 columns (clap wraps there when the output is not a terminal), or
/// left holding one word by a wrap: a doc line too long for its column, which clap breaks before its last
/// word. A word alone after a line of text is an orphan; `<RUN>` under `Arguments:` is not.
fn badly_wrapped(help: &str) -> Vec<String> {
    let mut bad = Vec::new();
    let mut previous = "";
    for line in help.lines() {
        let text = line.trim();
        if line.chars().count() > 100 {
            bad.push(format!("over 100 columns: {line}"));
        }
        let one_word = !text.is_empty() && !text.contains(' ');
        let a_name = text.starts_with(['<', '[', '-']) || text.ends_with(':');
        if one_word && !a_name && !previous.is_empty() && !previous.ends_with(':') {
            bad.push(format!("a word alone, left over by the wrap of\n  {previous}\n  {text}"));
        }
        previous = text;
    }
    bad
}

#[test]
fn every_help_and_short_help_line_fits_in_100_columns_and_no_word_is_left_alone() {
    let commands = [
        "",
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
    let mut bad = Vec::new();
    // `-h` is the short help: each argument's first paragraph, wrapped beside its name, so a line that
    // fits in `--help` can still leave a word alone there.
    for (command, help_flag) in commands.iter().flat_map(|c| [(*c, "--help"), (*c, "-h")]) {
        let args: Vec<&str> = [command, help_flag].into_iter().filter(|a| !a.is_empty()).collect();
        let help = run(&args, &[0]);
        bad.extend(badly_wrapped(&help).into_iter().map(|b| format!("analyzer {}: {b}", args.join(" "))));
    }
    assert!(
        bad.is_empty(),
        "help lines to re-wrap (the doc comments in src/bin/analyzer/cli):\n{}",
        bad.join("\n")
    );
}
