//! A selection (`--op`) that holds only part of an answer: the answer says what it leaves out, never an
//! all-clear over it.

mod support;

use accutrace_formats::capture::Io;
use accutrace_formats::DType;
use support::{analyzer, RunWriter};

fn f32s(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

#[test]
fn overflow_of_a_selection_downstream_of_the_first_overflow_names_it_and_is_no_all_clear() {
    let dir = tempfile::tempdir().unwrap();
    // One step: op0 finite, op1 overflows from finite inputs, op2 reads op1's inf.
    let (finite, inf) = (f32s(&[1.0, -2.0, 3.0, 0.5]), f32s(&[1.0, f32::INFINITY, 3.0, 0.5]));
    let mut w = RunWriter::create(&dir.path().join("run"), 1 << 20);
    w.op(0, "MatMulV2");
    w.tensor(Io::Output, 0, DType::FLOAT, &finite);
    w.op(1, "MatMulV2");
    w.tensor(Io::Input, 0, DType::FLOAT, &finite);
    w.tensor(Io::Output, 0, DType::FLOAT, &inf);
    w.op(2, "Add");
    w.tensor(Io::Input, 0, DType::FLOAT, &inf);
    w.tensor(Io::Output, 0, DType::FLOAT, &inf);
    let run = w.finish();
    let run = run.to_str().unwrap();

    let (code, out, err) = analyzer(&["overflow", run]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("FIRST OVERFLOW: step 0 rank 0: model/op1 [MatMulV2]"), "{out}");

    // op2 alone reads inf that no selected op produced: the overflow happened where the selection
    // does not look, and the answer says so and where.
    let (code, out, err) = analyzer(&["overflow", run, "--op", "model/op2"]);
    assert_eq!(code, 1, "an overflow seen in the selection is no all-clear:\n{out}{err}");
    assert!(!out.contains("No op produced inf/NaN"), "{out}");
    assert!(
        out.contains("at step 0, the first overflow is model/op1 [MatMulV2]")
            && out.contains("an op the --op selection leaves out"),
        "{out}"
    );
    // A selection before the overflow holds none of it.
    let (code, out, err) = analyzer(&["overflow", run, "--op", "model/op0"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("No op produced inf/NaN"), "{out}");
}

#[test]
fn overflow_of_a_selection_in_a_skipped_step_names_the_op_it_leaves_out_and_nests_no_parentheses() {
    let dir = tempfile::tempdir().unwrap();
    // Step 0 updates the weights (ApplyAdam). Step 1: op5 overflows from finite inputs, op6 reads its inf,
    // and the update is skipped. Step 2 is skipped with nothing anomalous dumped.
    let (finite, inf) = (f32s(&[1.0, -2.0, 3.0, 0.5]), f32s(&[1.0, f32::INFINITY, 3.0, 0.5]));
    let mut w = RunWriter::create(&dir.path().join("run"), 1 << 20);
    for (step, k, op_type, input, output) in [
        (0, 0, "MatMulV2", &finite, &finite),
        (0, 1, "ApplyAdam", &finite, &finite),
        (1, 4, "MatMulV2", &finite, &finite),
        (1, 5, "MatMulV2", &finite, &inf),
        (1, 6, "Add", &inf, &inf),
        (2, 7, "MatMulV2", &finite, &finite),
    ] {
        w.op_of_step(step, k, op_type);
        w.tensor(Io::Input, 0, DType::FLOAT, input);
        w.tensor(Io::Output, 0, DType::FLOAT, output);
    }
    let run = w.finish();
    let run = run.to_str().unwrap();

    let (code, out, err) = analyzer(&["overflow", run, "--op", "model/op6"]);
    assert_eq!(code, 1, "{out}{err}");
    // The step's first overflow, left out by --op, is the evidence: it names the origin, which the skipped
    // update (its consequence) does not.
    assert!(
        out.contains(
            "rank 0: at step 1, the first overflow is model/op5 [MatMulV2] (model/op5.output.0: 1 inf), \
             an op the --op selection leaves out"
        ),
        "{out}"
    );
    assert!(!out.contains("step 1 was skipped"), "{out}");
    assert!(out.contains("rank 0: step 2 was skipped (no optimizer op ran)"), "{out}");
    // Where to look is said once per heading, in one pair of parentheses.
    for line in out.lines() {
        let mut depth = 0;
        for c in line.chars() {
            depth += match c {
                '(' => 1,
                ')' => -1,
                _ => 0,
            };
            assert!(depth <= 1, "nested parentheses: {line}");
        }
    }
}
