//! The scenario matrix (issue #11): every injected fault, at every model size, through every source, gives
//! the same answer: the culprit `compare` names, the first op that diverges, and the overflow origin (or
//! that there is none).
//!
//! Rows: the `tiny` and `small` presets, and a shape no preset has (3 layers, d_model 96, 3 heads, d_ff 200,
//! so FRACTAL_NZ weights are padded). Columns: an imprecise fused kernel, a nondeterministic op in a middle
//! layer, an overflow at a given step and op, shuffled data, a changed learning rate. Each target run is
//! read as:
//! - a capture with one writer and the runtime's default 64 KiB chunks (files of the larger ops span
//!   several chunks);
//! - a capture with three writers, 8 KiB slots and 3000-byte chunks: on every row, chunks of several files
//!   interleave and files complete out of execution order (checked, so the cell cannot pass by luck);
//! - the CANN dump tree of the same training (the simulation is deterministic: the same bytes);
//! - an .npy export (`analyzer convert`) of the three-writer capture.
//!
//! Cost: each cell dumps only the steps its answer needs (one; two for the overflow at step 1), and its runs
//! are shared by all of its assertions.

mod common;
use common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// The matrix's rows.
#[derive(Clone, Copy, Debug)]
enum Size {
    Tiny,
    Small,
    /// Not a preset: 3 layers, d_model 96, 3 heads, d_ff 200; small batch and sequence keep it cheap.
    Odd,
}

impl Size {
    /// A model file's JSON: this size, plus `extra` keys (`"faults": {...}`).
    fn model(self, extra: &str) -> String {
        let size = match self {
            Size::Tiny => r#""preset": "tiny""#,
            Size::Small => r#""preset": "small""#,
            Size::Odd => {
                r#""n_layers": 3, "d_model": 96, "n_heads": 3, "d_ff": 200, "vocab": 100, "batch": 2, "seq": 24"#
            }
        };
        format!("{{{size}, {extra}}}")
    }
}

/// Every row has a `layer_1`: the middle layer of the 3-layer shape, the second of the presets' two.
const MIDDLE_SOFTMAX: &str = "model/layer_1/attn/Softmax";
const MIDDLE_FC1: &str = "model/layer_1/mlp/fc1/MatMul";
const FUSED_KERNEL: &str = "model/layer_0/mlp/fused_matmul_biasadd_gelu";

/// One training run, read through every source: (what it is, its path).
type Sources = Vec<(&'static str, PathBuf)>;

/// Trains `model_json` for `steps` three times (two captures and a dump tree) and exports one capture.
fn sources(dir: &Path, tag: &str, model_json: &str, steps: u64) -> Sources {
    let model = model_file(dir, &format!("{tag}.json"), model_json);
    let one_writer = dir.join(format!("{tag}-capture-1w"));
    record(&one_writer, &model, steps, &["--mode", "tensor"], &[]);
    let interleaved = dir.join(format!("{tag}-capture-3w"));
    let small_slots =
        [("ACCUTRACE_WRITERS", "3"), ("ACCUTRACE_SLOT_SIZE", "8K"), ("SIM_ACL_CHUNK_SIZE", "3000")];
    record(&interleaved, &model, steps, &["--mode", "tensor"], &small_slots);
    assert_completed_out_of_order(&interleaved);
    let tree = dir.join(format!("{tag}-dump"));
    let config = dump_config(dir, &format!("{tag}-acl.json"), &tree, "");
    sim_train(&model, steps, Some(&config), &[]);
    let npy = dir.join(format!("{tag}-npy"));
    let (code, stdout, stderr) = analyzer(&["convert", path_str(&interleaved), "-o", path_str(&npy)]);
    assert_eq!(code, 0, "convert failed:\n{stdout}\n{stderr}");
    vec![
        ("capture, 1 writer", one_writer),
        ("capture, 3 writers, 8K slots", interleaved),
        ("CANN dump tree", tree),
        (".npy export", npy),
    ]
}

/// The capture's op records are not in execution (timestamp) order: the case the index must fix.
fn assert_completed_out_of_order(run: &Path) {
    use accutrace_formats::capture::{CaptureRun, Record};
    let capture = CaptureRun::open(run).expect("open the capture");
    let mut stamps = Vec::new();
    for stream in &capture.streams {
        for item in stream.records() {
            if let Record::Op(op) = item.expect("readable record").record {
                stamps.push((op.step, op.timestamp_us));
            }
        }
    }
    assert!(
        stamps.windows(2).any(|w| w[0] > w[1]),
        "{}: every op was recorded in execution order, so this capture does not test the ordering",
        run.display()
    );
}

/// The fp32 benchmark of `model_json` (faults and fusion are what the device got wrong: the benchmark
/// has neither).
fn bench(dir: &Path, model_json: &str, steps: u64) -> PathBuf {
    let out = dir.join("bench");
    sim_bench(&model_file(dir, "bench.json", model_json), steps, &out);
    out
}

fn compare_step0(via: &str, target: &Path, bench: &Path) -> Value {
    let (code, report) = analyzer_json(&["compare", path_str(target), path_str(bench), "--step", "0"]);
    assert_eq!(code, 1, "{via}: compare finds the fault: {}", report["failing_ops"]);
    report
}

/// The overflow analysis finds nothing: no fault of this cell produces inf/NaN.
fn assert_no_overflow(via: &str, run: &Path) {
    let (code, report) = analyzer_json(&["overflow", path_str(run)]);
    assert_eq!(code, 0, "{via}: {}", report["origins"]);
}

fn imprecise_fused_kernel(size: Size) {
    let dir = scratch();
    let json = size.model(r#""fusion": true, "faults": {"imprecise_fused_kernel": true}"#);
    let bench = bench(dir.path(), &json, 1);
    for (via, target) in sources(dir.path(), "fused", &json, 1) {
        let report = compare_step0(via, &target, &bench);
        assert_eq!(report["culprit"]["name"], FUSED_KERNEL, "{via}: {}", report["culprit"]);
        assert_eq!(
            report["failing_ops"][0]["name"], FUSED_KERNEL,
            "{via}: first failing op in execution order"
        );
        assert_no_overflow(via, &target);
    }
}

fn nondeterministic_middle_op(size: Size) {
    let dir = scratch();
    let json = |seed: u32| {
        size.model(&format!(r#""run_seed": {seed}, "faults": {{"nondeterministic_op": "{MIDDLE_SOFTMAX}"}}"#))
    };
    let a = sources(dir.path(), "a", &json(1), 1);
    let b = sources(dir.path(), "b", &json(2), 1);
    for ((via, a), (_, b)) in a.iter().zip(&b) {
        let (code, report) = analyzer_json(&["diff", path_str(a), path_str(b)]);
        assert_eq!(code, 1, "{via}: {report}");
        let first = &report["first_differences"][0];
        assert_eq!(first["op"], MIDDLE_SOFTMAX, "{via}: {first}");
        assert_eq!(
            (first["step"].as_u64(), first["verdict"].as_str()),
            (Some(0), Some("nondeterministic")),
            "{via}"
        );
        // Everything after it differs too; the census lists it first because it is in execution order.
        assert_eq!(report["census"][0]["op"], MIDDLE_SOFTMAX, "{via}: {}", report["census"][0]);
        assert_no_overflow(via, a);
    }
}

fn overflow_at_step_1(size: Size) {
    let dir = scratch();
    let json = size.model(&format!(r#""faults": {{"overflow": {{"op": "{MIDDLE_FC1}", "step": 1}}}}"#));
    for (via, run) in sources(dir.path(), "overflow", &json, 2) {
        let (code, report) = analyzer_json(&["overflow", path_str(&run)]);
        assert_eq!(code, 1, "{via}: {report}");
        let first = &report["origins"][0];
        assert_eq!(
            (first["op"].as_str(), first["step"].as_u64()),
            (Some(MIDDLE_FC1), Some(1)),
            "{via}: {first}"
        );
        assert_eq!(first["inputs"], "finite inputs", "{via}");
        assert_eq!(report["steps_with_overflow"][0], 1, "{via}: step 0 is clean");
    }
}

fn shuffled_data(size: Size) {
    let dir = scratch();
    let json = size.model(r#""faults": {"shuffle_data": true}"#);
    let bench = bench(dir.path(), &json, 1);
    for (via, target) in sources(dir.path(), "shuffled", &json, 1) {
        // No op is to blame: the first one to fail reads the (different) data, and everything after it
        // inherits the difference.
        let report = compare_step0(via, &target, &bench);
        assert!(report["culprit"].is_null(), "{via}: {}", report["culprit"]);
        let first = &report["failing_ops"][0];
        assert_eq!(first["name"], "model/embedding/GatherV2", "{via}: {first}");
        let why = first["inputs_unverified"].as_str().unwrap_or_default();
        assert!(why.contains("data fed to the model"), "{via}: {first}");
        assert_no_overflow(via, &target);
    }
}

fn changed_learning_rate(size: Size) {
    let dir = scratch();
    let json = size.model(r#""faults": {"lr_scale": 10.0}"#);
    let bench = bench(dir.path(), &json, 1);
    for (via, target) in sources(dir.path(), "lr", &json, 1) {
        // The forward and backward passes of step 0 match; the first update of the weights does not. Its
        // inputs (weights, unscaled gradients) come from no dumped op, but every op before it passes.
        let report = compare_step0(via, &target, &bench);
        let culprit = &report["culprit"];
        assert_eq!(culprit["op_type"], "ApplyAdamD", "{via}: {culprit}");
        assert!(culprit["name"].as_str().is_some_and(|n| n.starts_with("optimizer/")), "{via}: {culprit}");
        assert_eq!(report["failing_ops"][0]["name"], culprit["name"], "{via}: first failing op");
        assert_no_overflow(via, &target);
    }
}

macro_rules! matrix {
    ($($test:ident: $cell:ident($size:ident);)*) => {
        $(
            #[test]
            fn $test() {
                $cell(Size::$size)
            }
        )*
    };
}

matrix! {
    tiny_imprecise_fused_kernel: imprecise_fused_kernel(Tiny);
    small_imprecise_fused_kernel: imprecise_fused_kernel(Small);
    odd_shape_imprecise_fused_kernel: imprecise_fused_kernel(Odd);
    tiny_nondeterministic_middle_op: nondeterministic_middle_op(Tiny);
    small_nondeterministic_middle_op: nondeterministic_middle_op(Small);
    odd_shape_nondeterministic_middle_op: nondeterministic_middle_op(Odd);
    tiny_overflow_at_step_1: overflow_at_step_1(Tiny);
    small_overflow_at_step_1: overflow_at_step_1(Small);
    odd_shape_overflow_at_step_1: overflow_at_step_1(Odd);
    tiny_shuffled_data: shuffled_data(Tiny);
    small_shuffled_data: shuffled_data(Small);
    odd_shape_shuffled_data: shuffled_data(Odd);
    tiny_changed_learning_rate: changed_learning_rate(Tiny);
    small_changed_learning_rate: changed_learning_rate(Small);
    odd_shape_changed_learning_rate: changed_learning_rate(Odd);
}
