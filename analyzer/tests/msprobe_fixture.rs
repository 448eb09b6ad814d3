//! Reproduces msprobe's own comparison of the `msprobe-tiny` fixture, cell by cell.
//!
//! The fixture is required: a missing fixture fails the test rather than skipping it.

use analyzer::metrics::msprobe::Cell;
use analyzer::sources::msprobe::compare::compare_dumps;
use analyzer::sources::msprobe::MsprobeDump;
use std::path::PathBuf;

fn fixture() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/msprobe-tiny");
    assert!(dir.join("msprobe_compare_result.csv").is_file(), "fixture missing: {}", dir.display());
    dir
}

/// Relative deviation of two numeric cells (absolute when the reference is 0).
fn deviation(ours: f64, theirs: f64) -> f64 {
    if ours == theirs {
        0.0
    } else if theirs == 0.0 {
        ours.abs()
    } else {
        ((ours - theirs) / theirs).abs()
    }
}

#[test]
fn reproduces_msprobe_compare_result_csv() {
    let dir = fixture();
    let target = MsprobeDump::open(&dir.join("target/step0/rank0/dump.json")).unwrap();
    let bench = MsprobeDump::open(&dir.join("bench/step0/rank0")).unwrap();
    assert_eq!(target.task, "tensor");
    let rows = compare_dumps(&target, &bench).unwrap();

    let mut csv = csv::Reader::from_path(dir.join("msprobe_compare_result.csv")).unwrap();
    let header: Vec<String> = csv.headers().unwrap().iter().map(str::to_owned).collect();
    let col =
        |name: &str| header.iter().position(|h| h == name).unwrap_or_else(|| panic!("no column {name}"));
    let records: Vec<csv::StringRecord> = csv.records().map(Result::unwrap).collect();

    // Row set: msprobe lists every target entry in dump order, None arguments included; so do we.
    let theirs: Vec<&str> = records.iter().map(|r| &r[col("NPU Name")]).collect();
    let ours: Vec<&str> = rows.iter().map(|r| r.npu_name.as_str()).collect();
    assert_eq!(ours, theirs, "row sets differ");

    let metric_cols = [
        "Cosine",
        "EucDist",
        "MaxAbsErr",
        "MaxRelativeErr",
        "One Thousandth Err Ratio",
        "Five Thousandths Err Ratio",
    ];
    let stat_cols = [
        "NPU max",
        "NPU min",
        "NPU mean",
        "NPU l2norm",
        "Bench max",
        "Bench min",
        "Bench mean",
        "Bench l2norm",
    ];
    let mut worst = [0.0f64; 6];
    let mut numeric_cells = 0;
    for (row, rec) in rows.iter().zip(&records) {
        let name = &row.npu_name;
        assert_eq!(row.bench_name.as_deref(), Some(&rec[col("Bench Name")]), "{name}");
        for (ours, c) in [
            (&row.npu_dtype, "NPU Dtype"),
            (&row.bench_dtype, "Bench Dtype"),
            (&row.npu_shape, "NPU Tensor Shape"),
            (&row.bench_shape, "Bench Tensor Shape"),
            (&row.npu_requires_grad, "NPU Requires_grad"),
            (&row.bench_requires_grad, "Bench Requires_grad"),
            (&row.err_message, "Err_message"),
            (&row.data_name, "Data_name"),
        ] {
            assert_eq!(ours, &rec[col(c)], "{name}: column {c}");
        }
        assert_eq!(row.result.to_string(), &rec[col("Result")], "{name}: Result");
        for (ours, c) in row.stats.iter().zip(stat_cols) {
            assert_eq!(ours, &rec[col(c)], "{name}: column {c}");
        }
        for (k, (cell, c)) in row.metrics.cells().iter().zip(metric_cols).enumerate() {
            let text = &rec[col(c)];
            match (cell, text.parse::<f64>()) {
                (Cell::Value(v), Ok(t)) => {
                    let d = deviation(*v, t);
                    assert!(d <= 1e-6, "{name}: {c} ours {v} msprobe {t} (deviation {d:e})");
                    worst[k] = worst[k].max(d);
                    numeric_cells += 1;
                }
                _ => assert_eq!(cell.to_string(), text, "{name}: {c}"),
            }
        }
    }
    assert!(numeric_cells > 600, "only {numeric_cells} numeric cells compared");
    for (c, w) in metric_cols.iter().zip(worst) {
        println!("max relative deviation {c}: {w:e}");
    }
}
