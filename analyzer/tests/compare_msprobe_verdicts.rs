//! Every compared row takes msprobe's `Result` and messages from msprobe's table, which is made again, a
//! call at a time, where msprobe's CSV writes it, never held (#18: held to the end it was 40 bytes a target
//! argument): the rows' verdicts and the table's agree.

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
fn rows_take_the_verdicts_of_msprobes_table() {
    let dir = tempfile::tempdir().unwrap();
    // The target's every 7th output is inf where the bench's is finite: msprobe's Result is an error there.
    let target = run(&dir.path().join("target"), |k, n| match (k % 7, n) {
        (3, 1) => f32::INFINITY,
        _ => (2 * k + n) as f32,
    });
    let bench = run(&dir.path().join("bench"), |k, n| (2 * k + n) as f32 + 0.25);
    let (target, bench) =
        (analyzer::sources::open(&target).unwrap(), analyzer::sources::open(&bench).unwrap());
    let c = compare(&*target, &*bench, &CompareOptions::default());
    // Each row's verdict is its table entry's.
    let mut entries = 0;
    c.msprobe_table(|entry| {
        let row = &c.rows[entry.row.compared().expect("every tensor is compared")];
        assert_eq!((row.result, row.messages()), (entry.row.level(), entry.row.messages()));
        entries += 1;
        Ok::<(), std::convert::Infallible>(())
    })
    .unwrap();
    assert_eq!(entries, 80, "a row of msprobe's table per target tensor");
    let errors = c.rows.iter().filter(|r| r.result == Level::Error && !r.messages().is_empty());
    assert_eq!(errors.count(), 6, "{:?}", c.rows);
    // msprobe's CSV: a header and the table's 80 rows, 6 of them errors.
    let path = dir.path().join("msprobe.csv");
    let to = Destination { output: Some(&path), colour: Colour::Never };
    write(&c, CompareFormat::MsprobeCsv, &to, false).unwrap();
    let csv = std::fs::read_to_string(&path).unwrap();
    assert_eq!(csv.lines().count(), 81, "{csv}");
    assert_eq!(csv.lines().filter(|l| l.contains(",error,")).count(), 6, "{csv}");
    // An error of the writer ends the table: nothing after it is handed out.
    let mut handed = 0;
    let stopped = c.msprobe_table(|_| {
        handed += 1;
        if handed == 3 {
            Err("stop")
        } else {
            Ok(())
        }
    });
    assert_eq!((stopped, handed), (Err("stop"), 3));
}
