//! Statistics CSVs of ops with more than 10 tensors: the runtime writes at most 10 tensors' rows per part,
//! the header only in the first, and hands the dump callback each part as a file of its own, so a capture
//! holds several same-named records of the op. Every part's rows reach the op; a part whose header part
//! is missing is an input problem naming the op (exit 2), never rows silently left out.

mod support;

use std::path::Path;
use support::{analyzer, RunWriter};

const HEADER: &str = "Input/Output,Index,Data Size,Data Type,Format,Shape,Max Value,Min Value,Avg Value,\
                      Count,Nan Count,Negative Inf Count,Positive Inf Count";
const CONCAT: &str = "ConcatD.model_concat.7.2.1700000000000";

/// A row of a finite 4-element fp32 tensor, or one holding an inf when `inf`.
fn row(io: &str, index: usize, inf: bool) -> String {
    let (max, pos_inf) = if inf { ("inf", 1) } else { ("1.5", 0) };
    format!("{io},{index},16,DT_FLOAT,FORMAT_ND,4,{max},-1,0.25,4,0,0,{pos_inf}\n")
}

/// The parts of a ConcatD of 12 inputs and 1 output as the runtime sends them: a header and 10 rows,
/// then 3 rows without a header, each a C string (its NUL counted). The output, in the second part,
/// holds an inf from finite inputs.
fn concat_parts() -> (Vec<u8>, Vec<u8>) {
    let mut first = format!("{HEADER}\n");
    for i in 0..10 {
        first += &row("Input", i, false);
    }
    let second = row("Input", 10, false) + &row("Input", 11, false) + &row("Output", 0, true);
    let c_string = |s: String| [s.into_bytes(), vec![0]].concat();
    (c_string(first), c_string(second))
}

fn write_run(dir: &Path, parts: &[&[u8]]) -> std::path::PathBuf {
    let mut w = RunWriter::create(dir, 1 << 20);
    for part in parts {
        w.stats_csv(0, CONCAT, part);
    }
    w.finish()
}

#[test]
fn every_part_of_an_op_with_more_than_10_tensors_is_read_as_that_op() {
    let dir = tempfile::tempdir().unwrap();
    let (first, second) = concat_parts();
    let run = write_run(&dir.path().join("run"), &[&first, &second]);
    let run = run.to_str().unwrap();

    let (code, out, err) = analyzer(&["inspect", run, "--format", "json"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(!err.contains("unreadable"), "{err}");
    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
    let ops = json["ops"].as_array().unwrap();
    assert_eq!(ops.len(), 1, "one op, not one per part: {json}");
    assert_eq!(ops[0]["name"], "model_concat");
    let tensors = ops[0]["tensors"].as_array().unwrap();
    assert_eq!(tensors.len(), 13, "{json}");
    assert_eq!(tensors[12]["stats"]["pos_inf"], 1, "the second part's output row: {json}");

    // The inf is in the second part: overflow finds it, produced by the op.
    let (code, out, err) = analyzer(&["overflow", run]);
    assert_eq!(code, 1, "{out}\n{err}");
    assert!(out.contains("FIRST OVERFLOW: step 0 rank 0: model_concat"), "{out}");
    assert!(out.contains("model_concat.output.0: 1 inf"), "{out}");

    // Two such captures pair all 13 tensors of the op (device statistics carry no data: not measured).
    let other = write_run(&dir.path().join("other"), &[&first, &second]);
    let (code, out, err) = analyzer(&["compare", run, other.to_str().unwrap(), "--format", "json"]);
    assert_eq!(code, 2, "{out}\n{err}");
    assert!(err.contains("13 of 13 matched tensor pairs"), "{err}");
}

#[test]
fn a_later_part_headed_again_joins_the_same_op() {
    // The runtime heads a part again when the name fell out of the last 10 it remembers.
    let dir = tempfile::tempdir().unwrap();
    let (first, second) = concat_parts();
    let headed = [format!("{HEADER}\n").into_bytes(), second].concat();
    let run = write_run(&dir.path().join("run"), &[&first, &headed]);
    let (code, out, err) = analyzer(&["inspect", run.to_str().unwrap(), "--format", "json"]);
    assert_eq!(code, 0, "{out}\n{err}");
    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
    let ops = json["ops"].as_array().unwrap();
    assert_eq!(ops.len(), 1, "{json}");
    assert_eq!(ops[0]["tensors"].as_array().unwrap().len(), 13, "{json}");
}

#[test]
fn a_part_without_its_header_part_is_an_input_problem_naming_the_op() {
    let dir = tempfile::tempdir().unwrap();
    let (_, second) = concat_parts();
    let run = write_run(&dir.path().join("run"), &[&second]);
    let (code, out, err) = analyzer(&["inspect", run.to_str().unwrap()]);
    assert_eq!(code, 2, "{out}\n{err}");
    let all = format!("{out}{err}");
    assert!(all.contains("model_concat") && all.contains("without its header line"), "{all}");
}

/// `record --mode device-stats` of sim-train with `optimizer/grads/Concat` (a ConcatD of every gradient:
/// more than 10 inputs) overflowing at step 1, when the simulated stack is built: the simulated runtime
/// sends the op's CSV in parts as the real one does, and every command sees every tensor of the op.
#[test]
fn a_device_stats_capture_of_sim_train_keeps_every_tensor_of_a_concat_of_every_gradient() {
    let bin = Path::new(env!("CARGO_BIN_EXE_analyzer")).parent().unwrap().to_path_buf();
    let needed = ["libcollector.so", "libascendcl.so", "sim-train"];
    if let Some(missing) = needed.iter().find(|n| !bin.join(n).is_file()) {
        eprintln!("skipped: {missing} is not built in {}", bin.display());
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join("model.json");
    std::fs::write(
        &model,
        r#"{"precision": "fp16", "grad_concat": true,
            "faults": {"overflow": {"op": "optimizer/grads/Concat", "step": 1}}}"#,
    )
    .unwrap();
    let sim = bin.join("sim-train");
    let record = |run: &Path| {
        let (code, out, err) = analyzer(&[
            "record",
            "-o",
            run.to_str().unwrap(),
            "--mode",
            "device-stats",
            "--",
            sim.to_str().unwrap(),
            "--model",
            model.to_str().unwrap(),
            "--steps",
            "2",
        ]);
        assert_eq!(code, 0, "{out}\n{err}");
    };
    let (run, other) = (tmp.path().join("run"), tmp.path().join("other"));
    record(&run);
    record(&other);
    let run = run.to_str().unwrap();

    let (code, out, err) = analyzer(&["inspect", run, "--format", "json"]);
    assert_eq!(code, 0, "{err}");
    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
    let concats: Vec<&serde_json::Value> =
        json["ops"].as_array().unwrap().iter().filter(|o| o["name"] == "optimizer_grads_Concat").collect();
    assert_eq!(concats.len(), 2, "one op per step, not one per part");
    for op in concats {
        let tensors = op["tensors"].as_array().unwrap();
        let inputs: Vec<u64> =
            tensors.iter().filter(|t| t["io"] == "input").map(|t| t["index"].as_u64().unwrap()).collect();
        assert!(inputs.len() > 10, "{op}");
        assert_eq!(inputs, (0..inputs.len() as u64).collect::<Vec<_>>(), "every input, in order: {op}");
        assert_eq!(tensors.iter().filter(|t| t["io"] == "output").count(), 1, "{op}");
        assert!(tensors.iter().all(|t| t["stats"]["count"].as_u64() > Some(0)), "{op}");
    }

    // The fault overflows the op's output at step 1: its row is in the CSV's last part.
    let (code, out, err) = analyzer(&["overflow", run]);
    assert_eq!(code, 1, "{out}\n{err}");
    assert!(out.contains("FIRST OVERFLOW: step 1 rank 0: optimizer_grads_Concat"), "{out}");
    assert!(!format!("{out}{err}").contains("INCOMPLETE"), "{out}\n{err}");

    let (code, out, err) = analyzer(&["watch", run]);
    assert!(code == 0 || code == 1, "{out}\n{err}");
    assert!(!format!("{out}{err}").contains("unreadable"), "{out}\n{err}");

    let (code, out, err) = analyzer(&["compare", run, other.to_str().unwrap()]);
    assert_eq!(code, 2, "{out}\n{err}");
    assert!(!err.contains("unreadable"), "{err}");
}
