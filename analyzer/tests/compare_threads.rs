//! compare of two captures gives one report whatever the pool's size: on 1, 2, 3 and 8 threads the pairs are
//! scheduled differently (large pairs with their two sides read at once and measured in parallel chunks,
//! small pairs beside them, tensors recorded twice read once), and the report must not show it. Three
//! dtypes, odd lengths, inf and NaN where both sides have them and where only one does, and a damaged
//! payload.

mod support;

use accutrace_formats::capture::Io;
use accutrace_formats::DType;
use analyzer::compare::CompareOptions;
use analyzer::metrics::Families;
use std::path::{Path, PathBuf};
use support::{compare_texts, compare_texts_with, damage, RunWriter};

/// Values of a large tensor: at least 4 MiB as f32 (compare reads its two sides at once), more than 2^18
/// values (the metrics' chunks run in parallel) and, as fp16, more than 2 MiB of data (decoded in
/// parallel, in several zstd frames).
const LARGE: usize = (1 << 20) + 77_777;
/// Values of a small tensor.
const SMALL: usize = 40_003;

/// The ops of a run: (dtype, values). Op k's output is recorded again as op k+1's input 0.
const OPS: [(DType, usize); 6] = [
    (DType::FLOAT16, LARGE),
    (DType::FLOAT16, SMALL),
    (DType::FLOAT, LARGE - 10),
    (DType::BF16, 300_001),
    (DType::FLOAT16, LARGE),
    (DType::FLOAT16, 5_001),
];

/// Op `k`'s output as f32 values: smooth activations; op 4 has infinities and NaNs at the same places in
/// both runs. In run 2 every 7th value from op 1 on is a little off (a nondeterministic op 1), op 3's every
/// 1000th is off by 4 (it fails: the culprit), and op 5 has a NaN that run 1 lacks.
fn values(k: usize, run2: bool) -> Vec<f32> {
    (0..OPS[k].1)
        .map(|i| {
            let mut v = (i as f32 * 0.0137 + k as f32).sin() * 3.0;
            if k == 4 && i % 100_003 == 5 {
                v = f32::INFINITY;
            }
            if k == 4 && i % 200_009 == 7 {
                v = f32::NAN;
            }
            if run2 && k >= 1 && i % 7 == 0 {
                v *= 1.0 + 1e-3;
            }
            if run2 && k == 3 && i % 1000 == 0 {
                v += 4.0;
            }
            if run2 && k == 5 && i == 3 {
                v = f32::NAN;
            }
            v
        })
        .collect()
}

/// `v` as the bytes of `dtype`.
fn bytes(dtype: DType, v: &[f32]) -> Vec<u8> {
    match dtype {
        DType::FLOAT16 => v.iter().flat_map(|&x| half::f16::from_f32(x).to_le_bytes()).collect(),
        DType::BF16 => v.iter().flat_map(|&x| half::bf16::from_f32(x).to_le_bytes()).collect(),
        DType::FLOAT => v.iter().flat_map(|&x| x.to_le_bytes()).collect(),
        other => unreachable!("{other:?}"),
    }
}

/// Op `k`'s output as stored.
fn output(k: usize, run2: bool) -> Vec<u8> {
    bytes(OPS[k].0, &values(k, run2))
}

/// A chain of the ops above: op k reads op k-1's output (input 0, op 0 a fixed input) and, for ops 0 and 2,
/// a weight that both runs share (input 1).
fn write_run(dir: &Path, run2: bool) -> PathBuf {
    let mut run = RunWriter::create(&dir.join(if run2 { "b" } else { "a" }), 16 << 20);
    let weight = bytes(DType::FLOAT16, &values(1, false));
    for k in 0..OPS.len() {
        run.op(k as u64, "Gelu");
        match k {
            0 => run.tensor(Io::Input, 0, DType::FLOAT16, &weight),
            _ => run.tensor(Io::Input, 0, OPS[k - 1].0, &output(k - 1, run2)),
        }
        if k % 2 == 0 {
            run.tensor(Io::Input, 1, DType::FLOAT16, &weight);
        }
        run.tensor(Io::Output, 0, OPS[k].0, &output(k, run2));
    }
    run.finish()
}

/// compare of `a` (target) and `b` (bench) on a pool of `threads` threads: the JSON report and msprobe's CSV.
fn compare_on(threads: usize, a: &Path, b: &Path) -> (String, String) {
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
    pool.install(|| {
        let (x, y) = (analyzer::sources::open(a).unwrap(), analyzer::sources::open(b).unwrap());
        compare_texts(x.as_ref(), y.as_ref())
    })
}

/// The reports on 2, 3 and 8 threads, each equal to the one thread's: that one, parsed.
fn same_on_every_pool(a: &Path, b: &Path) -> serde_json::Value {
    let (json, csv) = compare_on(1, a, b);
    for threads in [2, 3, 8] {
        let (j, c) = compare_on(threads, a, b);
        assert!(j == json, "JSON on {threads} threads differs from one thread's:\n{j}\n---\n{json}");
        assert!(c == csv, "CSV on {threads} threads differs from one thread's:\n{c}\n---\n{csv}");
    }
    serde_json::from_str(&json).unwrap()
}

fn row<'a>(report: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    let rows = report["rows"].as_array().unwrap();
    rows.iter().find(|r| r["target"] == name).unwrap_or_else(|| panic!("no row {name}: {report}"))
}

#[test]
fn every_pool_size_gives_the_one_threads_report() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (write_run(dir.path(), false), write_run(dir.path(), true));
    let report = same_on_every_pool(&a, &b);
    // What the runs hold: every tensor matched and measured, op 3 the culprit, op 5's NaN told.
    assert_eq!(report["input_problems"].as_array().map(Vec::len), Some(0), "{report}");
    assert_eq!(report["rows"].as_array().map(Vec::len), Some(15), "{report}");
    assert_eq!(report["culprit"]["name"], "model/op3", "{report}");
    // The large fp32 pair measured from its values: both families, KL included.
    let large = row(&report, "model/op2.output.0");
    assert_eq!(large["measured"], "values", "{large}");
    let acc = &large["msaccucmp"];
    assert!(acc["cosine_similarity"].as_f64().is_some_and(|c| c > 0.99 && c < 1.0), "{large}");
    assert!(acc["kullback_leibler_divergence"].as_f64().is_some_and(|kl| kl > 0.0), "{large}");
    assert_eq!(row(&report, "model/op4.output.0")["status"], "pass", "{report}");
    assert_eq!(row(&report, "model/op5.output.0")["reason"], "inf/NaN positions differ", "{report}");
}

#[test]
fn a_damaged_large_payload_gives_one_report_on_every_pool() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (write_run(dir.path(), false), write_run(dir.path(), true));
    // Records in stream order: op 0's input 0, input 1, output; op 1's input 0, output; op 2's input 0,
    // input 1, output (record 7, the large fp32 one).
    damage(&b, 7);
    let report = same_on_every_pool(&a, &b);
    assert!(report["input_problems"].to_string().contains("model/op2"), "{report}");
}

/// msprobe's metrics alone (the table's, msprobe's CSV's: large pairs are then read and measured a wave at a
/// time) give the msprobe CSV that both families give (every pair read whole), on every pool; so does the
/// run with a damaged large payload.
#[test]
fn msprobes_metrics_alone_give_both_families_msprobe_csv() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (write_run(dir.path(), false), write_run(dir.path(), true));
    let options = |families| CompareOptions { families: Some(families), ..CompareOptions::default() };
    for damaged in [false, true] {
        if damaged {
            damage(&b, 7);
        }
        for threads in [1, 3] {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
            let (alone, both) = pool.install(|| {
                let (x, y) = (analyzer::sources::open(&a).unwrap(), analyzer::sources::open(&b).unwrap());
                let csv = |f| compare_texts_with(x.as_ref(), y.as_ref(), &options(f)).1;
                (csv(Families::Msprobe), csv(Families::All))
            });
            assert!(alone == both, "{threads} threads, damaged {damaged}:\n{alone}\n---\n{both}");
            assert!(alone.lines().count() > 10, "{alone}");
        }
    }
}
