//! msprobe's table is kept only where asked for (`--format msprobe-csv`), yet every compared row takes
//! msprobe's `Result` and messages from it either way (#18: the table held to the end was 72 bytes a target
//! tensor); msprobe's CSV of a comparison that did not keep it is an error, never an empty table.

mod support;

use accutrace_formats::capture::Io;
use accutrace_formats::DType;
use analyzer::compare::{compare, CompareOptions};
use analyzer::metrics::verdict::Level;
use analyzer::report::compare::{write, CompareFormat};
use analyzer::report::{Colour, Destination};
use support::RunWriter;

/// Ops of one input and one output, their values `value(k, n)` (n: 0 the input, 1 the output).
fn run(path: &std::path::Path, value: impl Fn(u64, u64) -> f32) -> std::path::PathBuf {
    let mut run = RunWriter::create(path, 1 << 24);
    for k in 0..40 {
        run.op(k, "Mul");
        for (n, io) in [(0, Io::Input), (1, Io::Output)] {
            run.tensor(io, 0, DType::FLOAT, &value(k, n).to_le_bytes());
        }
    }
    run.finish()
}

#[test]
fn rows_take_msprobes_verdicts_whether_its_table_is_kept_or_not() {
    let dir = tempfile::tempdir().unwrap();
    // The target's every 7th output is inf where the bench's is finite: msprobe's Result is an error there.
    let target = run(&dir.path().join("target"), |k, n| match (k % 7, n) {
        (3, 1) => f32::INFINITY,
        _ => (2 * k + n) as f32,
    });
    let bench = run(&dir.path().join("bench"), |k, n| (2 * k + n) as f32 + 0.25);
    let (target, bench) =
        (analyzer::sources::open(&target).unwrap(), analyzer::sources::open(&bench).unwrap());
    let verdicts = |keep_msprobe_table| {
        let options = CompareOptions { keep_msprobe_table, ..CompareOptions::default() };
        let c = compare(&*target, &*bench, &options);
        assert_eq!(c.msprobe_table.as_ref().map(Vec::len), keep_msprobe_table.then_some(80));
        // Where the table is kept, each row's verdict is its table entry's.
        for entry in c.msprobe_table.iter().flatten() {
            let row = &c.rows[entry.compared().expect("every tensor is compared")];
            assert_eq!((row.result, row.messages()), (entry.level(), entry.messages()));
        }
        let rows: Vec<(Level, Vec<String>)> =
            c.rows.iter().map(|r| (r.result, r.messages().to_vec())).collect();
        (rows, c)
    };
    let ((kept, _), (not_kept, comparison)) = (verdicts(true), verdicts(false));
    assert_eq!(not_kept, kept);
    let errors = kept.iter().filter(|(level, messages)| *level == Level::Error && !messages.is_empty());
    assert_eq!(errors.count(), 6, "{kept:?}");
    // msprobe's CSV needs the table: without it, an error that says so.
    let path = dir.path().join("msprobe.csv");
    let to = Destination { output: Some(&path), colour: Colour::Never };
    let err = write(&comparison, CompareFormat::MsprobeCsv, &to, false).unwrap_err();
    assert!(format!("{err:#}").contains("msprobe's table was not kept"), "{err:#}");
}
