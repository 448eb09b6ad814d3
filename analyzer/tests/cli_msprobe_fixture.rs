//! `analyzer compare target bench` on the real msprobe fixture reproduces msprobe's own CSV:
//! - `--format msprobe-csv` is msprobe's file: the same header, the same rows in the same order (non-tensor
//!   arguments included), and every cell the same text, but for the six metrics, which agree to 1e-6
//!   relative (msprobe sums in numpy's pairwise order, we in lanes: the last digits of a long sum differ);
//! - `--format csv` (accutrace's columns) carries msprobe's metrics, statistics and Result for every tensor:
//!   msprobe's non-tensor rows are the only ones it lacks.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;

fn fixture() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/msprobe-tiny");
    assert!(dir.is_dir(), "fixture {} missing: ../shared must sit beside the repository", dir.display());
    dir
}

fn read_csv(text: &str) -> Vec<HashMap<String, String>> {
    let mut reader = csv::Reader::from_reader(text.as_bytes());
    let headers = reader.headers().expect("header").clone();
    reader
        .records()
        .map(|r| {
            let r = r.expect("csv row");
            headers.iter().zip(r.iter()).map(|(h, v)| (h.to_string(), v.to_string())).collect()
        })
        .collect()
}

/// Numbers agree to 1e-6 relative; texts (`unsupported`, `N/A`) exactly; "not a number" spellings
/// (`nan`, `None`, empty) agree with each other.
fn same_cell(ours: &str, theirs: &str) -> bool {
    let not_a_number = |s: &str| matches!(s, "nan" | "None" | "" | "Nan");
    match (ours.parse::<f64>(), theirs.parse::<f64>()) {
        (Ok(a), Ok(b)) if a.is_finite() && b.is_finite() => (a - b).abs() <= 1e-6 * b.abs().max(1e-12),
        _ if not_a_number(ours) && not_a_number(theirs) => true,
        _ => ours == theirs,
    }
}

/// `analyzer compare target bench FORMAT-AND-MORE` in the fixture: its report (exit 0 or 1, as found).
fn compare(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_analyzer"))
        .args(["compare", "target", "bench"])
        .args(args)
        .current_dir(fixture())
        .output()
        .expect("run analyzer");
    assert!(matches!(out.status.code(), Some(0 | 1)), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("utf-8")
}

#[test]
fn compare_reproduces_msprobe_compare_result_csv() {
    let dir = fixture();
    let ours = read_csv(&compare(&["--format", "csv"]));
    let theirs =
        read_csv(&std::fs::read_to_string(dir.join("msprobe_compare_result.csv")).expect("fixture csv"));
    let ours_by_name: HashMap<&str, &HashMap<String, String>> =
        ours.iter().map(|r| (r["NPU Name"].as_str(), r)).collect();

    let columns = [
        "Bench Name",
        "Cosine",
        "EucDist",
        "MaxAbsErr",
        "MaxRelativeErr",
        "One Thousandth Err Ratio",
        "Five Thousandths Err Ratio",
        "NPU max",
        "NPU min",
        "NPU mean",
        "NPU l2norm",
        "Bench max",
        "Bench min",
        "Bench mean",
        "Bench l2norm",
        "Result",
    ];
    let mut compared = 0;
    let mut mismatches = Vec::new();
    for row in &theirs {
        let name = row["NPU Name"].as_str();
        let Some(our) = ours_by_name.get(name) else {
            // Only non-tensor arguments may be missing: msprobe gives them no dtype of a tensor.
            assert!(!row["NPU Dtype"].starts_with("torch."), "tensor row {name} is missing from our CSV");
            assert_eq!(row["Cosine"], "unsupported", "{name}");
            continue;
        };
        compared += 1;
        for column in columns {
            if !same_cell(&our[column], &row[column]) {
                mismatches
                    .push(format!("{name} {column}: ours {:?}, msprobe {:?}", our[column], row[column]));
            }
        }
    }
    assert!(mismatches.is_empty(), "{} cells differ:\n{}", mismatches.len(), mismatches.join("\n"));
    assert_eq!(compared, ours.len(), "we list rows msprobe does not");
    assert!(compared >= 140, "only {compared} rows compared");
}

#[test]
fn msprobe_csv_is_msprobes_file_cell_by_cell() {
    let dir = fixture();
    let ours = compare(&["--format", "msprobe-csv"]);
    let theirs = std::fs::read_to_string(dir.join("msprobe_compare_result.csv")).expect("fixture csv");
    assert!(!ours.contains('\r'), "msprobe writes LF line ends");
    let table = |text: &str| -> (csv::StringRecord, Vec<csv::StringRecord>) {
        let mut r = csv::Reader::from_reader(text.as_bytes());
        (r.headers().expect("header").clone(), r.records().map(|r| r.expect("row")).collect())
    };
    let ((our_header, our_rows), (their_header, their_rows)) = (table(&ours), table(&theirs));
    assert_eq!(our_header, their_header, "columns");
    let names = |rows: &[csv::StringRecord]| rows.iter().map(|r| r[0].to_string()).collect::<Vec<_>>();
    assert_eq!(names(&our_rows), names(&their_rows), "rows, in msprobe's order");
    let metrics = [
        "Cosine",
        "EucDist",
        "MaxAbsErr",
        "MaxRelativeErr",
        "One Thousandth Err Ratio",
        "Five Thousandths Err Ratio",
    ];
    let (mut exact, mut close, mut differ) = (0, 0, Vec::new());
    for (ours, theirs) in our_rows.iter().zip(&their_rows) {
        for ((column, a), b) in their_header.iter().zip(ours).zip(theirs) {
            if a == b {
                exact += 1;
            } else if metrics.contains(&column) && same_cell(a, b) {
                close += 1;
            } else {
                differ.push(format!("{} {column}: ours {a:?}, msprobe {b:?}", &theirs[0]));
            }
        }
    }
    assert!(differ.is_empty(), "{} cells differ:\n{}", differ.len(), differ.join("\n"));
    assert!(their_rows.len() >= 180 && exact > 20 * their_rows.len(), "{exact} exact cells");
    println!("{exact} cells identical, {close} metric cells within 1e-6");
}

#[test]
fn msaccucmp_metrics_are_opt_in_for_msprobe_dumps() {
    let run = |extra: &[&str]| read_csv(&compare(&[&["--format", "csv"], extra].concat()));
    let filled = |rows: &[HashMap<String, String>]| {
        rows.iter().filter(|r| r["KullbackLeiblerDivergence"].parse::<f64>().is_ok()).count()
    };
    // By default an msprobe pair gets msprobe's metrics, as `msprobe compare` does.
    let default = run(&[]);
    assert_eq!(filled(&default), 0, "msaccucmp columns filled without --metrics all");
    let all = run(&["--metrics", "all"]);
    assert!(filled(&all) >= 100, "only {} rows with a KL divergence", filled(&all));
    // msprobe's own columns do not depend on it.
    assert_eq!(default.len(), all.len());
    for (d, a) in default.iter().zip(&all) {
        for column in
            ["NPU Name", "Cosine", "MaxAbsErr", "MaxRelativeErr", "NPU mean", "Bench l2norm", "Result"]
        {
            assert_eq!(d[column], a[column], "{} {column}", d["NPU Name"]);
        }
    }
}

/// msprobe's `step{N}/rank{M}` layout with one rank's step lost (the fixture's dump.json copied as steps 0
/// and 1 of rank 0 and step 0 of rank 1): the gap leads the answer and the exit status is 2, never an
/// all-clear about step 1 read on one rank of two.
#[test]
fn a_rank_missing_a_step_leads_the_answer() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    for (step, rank) in [(0, 0), (1, 0), (0, 1)] {
        let to = run.join(format!("step{step}/rank{rank}"));
        std::fs::create_dir_all(&to).unwrap();
        std::fs::copy(fixture().join("target/step0/rank0/dump.json"), to.join("dump.json")).unwrap();
    }
    let inspect = |more: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_analyzer"))
            .arg("inspect")
            .arg(&run)
            .args(more)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
        )
    };
    let (code, said) = inspect(&[]);
    assert_eq!(code, Some(2), "{said}");
    assert!(said.contains("rank 1 lacks step 1 that other ranks hold (rank 0 holds step 1"), "{said}");
    assert_eq!(inspect(&["--allow-incomplete"]).0, Some(0));
    // Every rank holding the same steps is no problem.
    std::fs::create_dir_all(run.join("step1/rank1")).unwrap();
    std::fs::copy(fixture().join("target/step0/rank0/dump.json"), run.join("step1/rank1/dump.json")).unwrap();
    let (code, said) = inspect(&[]);
    assert_eq!(code, Some(0), "{said}");
}
