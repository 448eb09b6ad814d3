//! The damage matrix (issue #12): every command that reads a source (inspect, compare, diff, overflow,
//! ranks, convert, report) against every source kind with each kind of damage done
//! to one of its files. A damaged input never gets a silent answer that differs from the intact input's:
//! each cell ends with exit status 2, or an explicit warning (an input-problem lead, a `warning:` line), or
//! exactly the intact input's answer (JSON report, convert's files, report's page) because the command
//! never needed the damaged bytes (a capture's statistics answer `inspect`, its hashes `diff`).
//!
//! Some damage no reader can see, and the cells listed in [`UNDETECTABLE`] say why; they must still end
//! cleanly (exit 0, 1 or 2, no crash).
//!
//! The sources are small (one step of the tiny fused model) and made once; each cell copies the intact
//! source, damages one file, and runs one command: 168 runs of the debug analyzer, 10-20 s on a shared
//! 2-core machine.

mod common;
use common::*;
use std::path::{Path, PathBuf};

const MODEL: &str = r#"{"fusion": true}"#;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Capture,
    DumpTree,
    Npy,
    Msprobe,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Damage {
    Truncate,
    Flip,
    Delete,
    Duplicate,
    ZeroPage,
    AppendGarbage,
}

const DAMAGES: [Damage; 6] = [
    Damage::Truncate,
    Damage::Flip,
    Damage::Delete,
    Damage::Duplicate,
    Damage::ZeroPage,
    Damage::AppendGarbage,
];

/// Damage the format itself cannot reveal: raw tensor bytes with no checksum (a CANN dump file's data, an
/// .npy file's data: the bytes are the values), and files added to or missing from a directory that keeps
/// no list of what it holds (a dump tree, an .npy export).
const UNDETECTABLE: [(Kind, Damage); 5] = [
    (Kind::DumpTree, Damage::Flip),
    (Kind::DumpTree, Damage::Delete),
    (Kind::Npy, Damage::Flip),
    (Kind::Npy, Damage::Delete),
    (Kind::Npy, Damage::Duplicate),
];

fn files_under(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            files_under(&p, out);
        } else {
            out.push(p);
        }
    }
}

/// The file of a source that the damage is done to: the middle one (in name order) of its data files.
fn victim(kind: Kind, root: &Path) -> PathBuf {
    let mut files = Vec::new();
    files_under(root, &mut files);
    let name = |p: &PathBuf| p.file_name().unwrap().to_string_lossy().into_owned();
    files.retain(|p| {
        let n = name(p);
        match kind {
            Kind::Capture => n.starts_with("seg-") && n.ends_with(".acc"),
            Kind::DumpTree => n.split('.').count() >= 5 && !n.ends_with(".npy") && !n.ends_with(".csv"),
            Kind::Npy => n.ends_with(".npy"),
            Kind::Msprobe => n.ends_with(".pt"),
        }
    });
    files.sort();
    assert!(!files.is_empty(), "{kind:?}: no data file under {}", root.display());
    files[files.len() / 2].clone()
}

/// Where a copy of `file` goes for the duplicate damage: a name the source's reader also picks up.
fn duplicate_name(kind: Kind, file: &Path) -> PathBuf {
    let n = file.file_name().unwrap().to_string_lossy().into_owned();
    let dup = match kind {
        // The next index after the last segment the stream can have.
        Kind::Capture => "seg-099999.acc".to_string(),
        // Another dump of the same op and task, a tick later.
        Kind::DumpTree => {
            let (head, ts) = n.rsplit_once('.').unwrap();
            format!("{head}.{}", ts.parse::<u64>().unwrap() + 1)
        }
        Kind::Npy | Kind::Msprobe => format!("copy_{n}"),
    };
    file.with_file_name(dup)
}

fn damage(kind: Kind, file: &Path, how: Damage) {
    let mut bytes = std::fs::read(file).unwrap();
    match how {
        Damage::Truncate => bytes.truncate(bytes.len() / 2),
        Damage::Flip => {
            let at = bytes.len() * 3 / 4;
            bytes[at] ^= 0x5A;
        }
        Damage::Delete => {
            std::fs::remove_file(file).unwrap();
            return;
        }
        Damage::Duplicate => {
            std::fs::write(duplicate_name(kind, file), &bytes).unwrap();
            return;
        }
        Damage::ZeroPage => {
            let start = (bytes.len() / 2) & !4095;
            let end = (start + 4096).min(bytes.len());
            bytes[start..end].fill(0);
        }
        Damage::AppendGarbage => {
            bytes.extend((0..1000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8))
        }
    }
    std::fs::write(file, bytes).unwrap();
}

/// Makes the intact sources: a capture, a CANN dump tree and an .npy export of one step, and the msprobe
/// fixture.
fn sources(dir: &Path) -> Vec<(Kind, PathBuf)> {
    let model = model_file(dir, "model.json", MODEL);
    let capture = dir.join("capture");
    let collector = collector_lib();
    let env = [
        ("LD_PRELOAD", path_str(&collector)),
        ("ACCUTRACE_DIR", path_str(&capture)),
        ("ACCUTRACE_MODE", "tensor"),
        ("ACCUTRACE_SEGMENT_SIZE", "64K"),
    ];
    sim_train(&model, 1, None, &env);
    let tree = dir.join("tree");
    sim_train(&model, 1, Some(&dump_config(dir, "acl.json", &tree, "")), &[]);
    let npy = dir.join("npy");
    sim_bench(&model, 1, &npy);
    let msprobe =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures/msprobe-tiny/target");
    assert!(
        msprobe.is_dir(),
        "fixture {} missing: ../shared must sit beside the repository",
        msprobe.display()
    );
    vec![(Kind::Capture, capture), (Kind::DumpTree, tree), (Kind::Npy, npy), (Kind::Msprobe, msprobe)]
}

/// Whether the command said something is wrong with its input.
fn warned(stdout: &str, stderr: &str) -> bool {
    let said = |s: &str| {
        s.contains("INCOMPLETE INPUT")
            || s.contains("UNREADABLE INPUT")
            || s.lines().any(|l| l.starts_with("warning:") || l.starts_with("error:"))
            || s.contains("\"warnings\": [\n")
    };
    said(stdout) || said(stderr)
}

/// Files with their bytes, by path relative to the directory they were read from.
type Files = Vec<(PathBuf, Vec<u8>)>;

/// Every file under `dir` with its bytes, by path relative to `dir`.
fn tree_bytes(dir: &Path) -> Files {
    let mut files = Vec::new();
    if dir.is_dir() {
        files_under(dir, &mut files);
    }
    files.sort();
    files
        .into_iter()
        .map(|p| (p.strip_prefix(dir).unwrap().to_path_buf(), std::fs::read(&p).unwrap()))
        .collect()
}

/// Every command that reads a source, on `source` (`intact` as the other side), with JSON reports; convert
/// writes into the directory `out`, report its page to `out.html`.
fn commands(source: &str, intact: &str, out: &str) -> Vec<Vec<String>> {
    let page = format!("{out}.html");
    [
        vec!["inspect", source, "--format", "json"],
        vec!["compare", source, intact, "--format", "json"],
        vec!["diff", source, intact, "--format", "json"],
        vec!["overflow", source, "--format", "json"],
        vec!["ranks", source, "--format", "json"],
        vec!["check", source, "--format", "json"],
        vec!["check", source, intact, "--format", "json"],
        vec!["watch", source, "--format", "json"],
        vec!["convert", source, "-o", out, "--format", "json"],
        vec!["report", source, intact, "-o", &page, "--no-progress"],
    ]
    .iter()
    .map(|args| args.iter().map(|a| a.to_string()).collect())
    .collect()
}

/// What a command wrote besides its report: convert's directory and report's page, paths made the
/// intact run's by `normal` where the files are text.
fn written(out: &Path, normal: impl Fn(&str) -> String) -> Files {
    let page = PathBuf::from(format!("{}.html", out.display()));
    let mut files = tree_bytes(out);
    if page.is_file() {
        files.push((PathBuf::from("report.html"), std::fs::read(&page).unwrap()));
        std::fs::remove_file(&page).unwrap();
    }
    for (_, bytes) in &mut files {
        if let Ok(text) = std::str::from_utf8(bytes) {
            *bytes = normal(text).into_bytes();
        }
    }
    files
}

#[test]
fn no_damaged_input_gets_a_silent_answer() {
    let dir = scratch();
    let mut silent = Vec::new();
    let mut table = String::new();
    for (kind, intact) in sources(dir.path()) {
        // The answers of an undamaged copy (against the intact source, as the damaged copies are), to tell
        // a damage the command never read from one it read wrongly.
        let clean_out = dir.path().join(format!("{kind:?}-intact-npy"));
        let i = path_str(&intact);
        let undamaged = dir.path().join(format!("{kind:?}-undamaged"));
        copy_dir(&intact, &undamaged);
        let u = path_str(&undamaged);
        let clean: Vec<(String, Files)> = commands(u, i, path_str(&clean_out))
            .iter()
            .map(|args| {
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                let (code, stdout, stderr) = analyzer(&args);
                // (These sources hold one rank: `ranks` refuses them, there being no answer across ranks.)
                let one_rank =
                    args[0] == "ranks" && code == 2 && stdout.contains("no answer across ranks exists");
                assert!(
                    code == 0 || code == 1 || one_rank,
                    "intact {kind:?} {args:?}: exit {code}\n{stdout}\n{stderr}"
                );
                let stdout = stdout.replace(u, i);
                let files = written(&clean_out, |text| text.replace(u, i));
                let _ = std::fs::remove_dir_all(&clean_out);
                (stdout, files)
            })
            .collect();
        for how in DAMAGES {
            let cell = dir.path().join(format!("{kind:?}-{how:?}"));
            copy_dir(&intact, &cell);
            let file = victim(kind, &cell);
            damage(kind, &file, how);
            let out = dir.path().join(format!("{kind:?}-{how:?}-npy"));
            let (c, o) = (path_str(&cell), path_str(&out));
            // The damaged run's answer with its paths made the intact run's (`out` first: `cell` is its prefix).
            let normal = |text: &str| text.replace(o, path_str(&clean_out)).replace(c, i);
            for (args, (clean_stdout, clean_files)) in commands(c, i, o).iter().zip(&clean) {
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                let (code, stdout, stderr) = analyzer(&args);
                let crashed = !(0..=2).contains(&code);
                assert!(!crashed, "{kind:?} {how:?} {args:?}: exit {code}\n{stderr}");
                // report's standard output only names its page and the page's size, which moves with the
                // length of the paths in it: the page itself is the answer.
                let same_stdout = args[0] == "report" || normal(&stdout) == *clean_stdout;
                let same_answer = same_stdout && written(&out, normal) == *clean_files;
                let ok = code == 2 || warned(&stdout, &stderr) || same_answer;
                let verdict = match (ok, UNDETECTABLE.contains(&(kind, how))) {
                    (true, _) => "ok",
                    (false, true) => "undetectable",
                    (false, false) => "SILENT",
                };
                table.push_str(&format!("{kind:?}\t{how:?}\t{}\t{code}\t{verdict}\n", args[0]));
                if verdict == "SILENT" {
                    silent.push(format!("{kind:?} {how:?} {} (exit {code})", args[0]));
                }
                let _ = std::fs::remove_dir_all(&out);
            }
            let _ = std::fs::remove_dir_all(&cell);
        }
    }
    if let Ok(to) = std::env::var("ACCUTRACE_DAMAGE_TABLE") {
        std::fs::write(to, &table).unwrap();
    }
    assert!(
        silent.is_empty(),
        "damaged inputs answered silently and differently:\n{}\n\n{table}",
        silent.join("\n")
    );
}
