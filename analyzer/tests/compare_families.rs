//! compare computes the metric families its report shows (docs/CLI.md, `--metrics`): the table and msprobe's
//! CSV show msprobe's metrics alone, so without `--metrics` they are all that is computed, and those reports
//! are the same bytes as with `--metrics all` (msaccucmp's figures were never in them); CSV and JSON carry
//! both families between two captures unless `--metrics msprobe` says otherwise.

mod support;

use accutrace_formats::capture::Io;
use accutrace_formats::DType;
use std::path::{Path, PathBuf};
use std::process::Command;
use support::RunWriter;

const ANALYZER: &str = env!("CARGO_BIN_EXE_analyzer");

/// Op `k`'s output: fp16, bf16 and fp32 activations. In run 2 every 5th value is a little off, and op 2's
/// every 100th by 4 (it fails while its input passes: the culprit).
fn output(k: usize, run2: bool) -> (DType, Vec<u8>) {
    let dtype = [DType::FLOAT16, DType::BF16, DType::FLOAT16, DType::FLOAT][k];
    let values = (0..3_001 + 1_000 * k).map(|i| {
        let mut v = (i as f32 * 0.021 + k as f32).sin() * 2.0;
        if run2 && i % 5 == 0 {
            v *= 1.0 + 2e-4;
        }
        if run2 && k == 2 && i % 100 == 0 {
            v += 4.0;
        }
        v
    });
    let bytes = match dtype {
        DType::FLOAT16 => values.flat_map(|x| half::f16::from_f32(x).to_le_bytes()).collect(),
        DType::BF16 => values.flat_map(|x| half::bf16::from_f32(x).to_le_bytes()).collect(),
        _ => values.flat_map(f32::to_le_bytes).collect(),
    };
    (dtype, bytes)
}

/// Four ops in a chain, op k reading op k-1's output.
fn write_run(dir: &Path, run2: bool) -> PathBuf {
    let mut run = RunWriter::create(&dir.join(if run2 { "b" } else { "a" }), 1 << 20);
    for k in 0..4 {
        run.op(k as u64, "Gelu");
        if k > 0 {
            let (dtype, input) = output(k - 1, run2);
            run.tensor(Io::Input, 0, dtype, &input);
        }
        let (dtype, out) = output(k, run2);
        run.tensor(Io::Output, 0, dtype, &out);
    }
    run.finish()
}

/// `analyzer compare a b ARGS...`: stdout and the exit status.
fn compare(a: &Path, b: &Path, args: &[&str]) -> (String, i32) {
    let out = Command::new(ANALYZER)
        .arg("compare")
        .args([a, b])
        .args(args)
        .args(["--color", "never", "--no-progress"])
        .output()
        .expect("run analyzer");
    let stdout = String::from_utf8(out.stdout).expect("utf-8");
    (stdout, out.status.code().expect("an exit status"))
}

#[test]
fn the_table_and_msprobes_csv_are_the_same_whichever_families_are_computed() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (write_run(dir.path(), false), write_run(dir.path(), true));
    for form in [&[][..], &["--all"], &["--format", "msprobe-csv"]] {
        let default = compare(&a, &b, form);
        assert_eq!(default.1, 1, "{form:?}: op 2 fails: {}", default.0);
        for families in ["all", "msprobe"] {
            let asked = compare(&a, &b, &[form, &["--metrics", families]].concat());
            assert!(asked == default, "{form:?} --metrics {families}:\n{}\n---\n{}", asked.0, default.0);
        }
    }
    let (table, _) = compare(&a, &b, &[]);
    assert!(table.contains("CULPRIT") && table.contains("model/op2"), "{table}");
}

#[test]
fn csv_and_json_carry_both_families_between_captures_unless_asked() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (write_run(dir.path(), false), write_run(dir.path(), true));
    let kl = |args: &[&str]| -> Vec<serde_json::Value> {
        let (json, code) = compare(&a, &b, &[&["--format", "json"], args].concat());
        assert_eq!(code, 1, "{json}");
        let report: serde_json::Value = serde_json::from_str(&json).unwrap();
        let rows = report["rows"].as_array().unwrap().clone();
        assert_eq!(rows.len(), 7, "{report}");
        rows.iter().map(|r| r["msaccucmp"]["kullback_leibler_divergence"].clone()).collect()
    };
    assert!(kl(&[]).iter().all(|k| k.as_f64().is_some_and(|k| k >= 0.0)), "{:?}", kl(&[]));
    assert_eq!(kl(&[]), kl(&["--metrics", "all"]));
    assert!(kl(&["--metrics", "msprobe"]).iter().all(serde_json::Value::is_null));

    let (csv, _) = compare(&a, &b, &["--format", "csv"]);
    let mut reader = csv::Reader::from_reader(csv.as_bytes());
    let at = reader
        .headers()
        .unwrap()
        .iter()
        .position(|h| h == "KullbackLeiblerDivergence")
        .expect("msaccucmp's KL column");
    let cells: Vec<String> = reader.records().map(|r| r.unwrap()[at].to_string()).collect();
    assert!(cells.len() == 7 && cells.iter().all(|c| c.parse::<f64>().is_ok()), "{csv}");
}
