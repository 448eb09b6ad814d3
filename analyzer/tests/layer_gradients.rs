//! A gradient that is NaN in one layer on one rank of a two-rank run (an .npy dump of the optimizer ops,
//! `step{S}/rank{R}/`): `watch`'s text and JSON and `report`'s page name that rank, and no gradient norm
//! of that step reads as a finite value.

use accutrace_formats::npy::write_npy;
use accutrace_formats::DType;
use std::path::Path;
use std::process::Command;

fn write_f32(path: &Path, values: &[f32]) {
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    let mut out = Vec::new();
    write_npy(&mut out, DType::FLOAT, &[values.len() as u64], &bytes).unwrap();
    std::fs::write(path, out).unwrap();
}

/// Steps 0-2 of ranks 0 and 1, each updating `model/layer_0/w` and `model/layer_1/w` with `ApplyAdamD`
/// (inputs: var, m, v, grad); rank 1's layer_1 gradient holds a NaN at step 1.
fn run(root: &Path) {
    for step in 0..3u64 {
        for rank in 0..2u32 {
            let dir = root.join(format!("step{step}/rank{rank}"));
            std::fs::create_dir_all(&dir).unwrap();
            let mut mapping = String::new();
            for (k, layer) in ["layer_0", "layer_1"].into_iter().enumerate() {
                let ts = 1000 + 10 * step + k as u64;
                let stem = format!("ApplyAdamD.optimizer_model_{layer}_w_ApplyAdam.{k}.2.{ts}");
                mapping
                    .push_str(&format!("{stem},ApplyAdamD.optimizer/model/{layer}/w/ApplyAdam.{k}.2.{ts}\n"));
                let g = 0.5 * (k + 1) as f32 / (step + 1) as f32;
                let mut grad = [g, -g, g, g];
                if (step, rank, layer) == (1, 1, "layer_1") {
                    grad[2] = f32::NAN;
                }
                let inputs = [[1.0, 2.0, 3.0, 4.0], [0.1; 4], [0.2; 4], grad];
                for (i, values) in inputs.iter().enumerate() {
                    write_f32(&dir.join(format!("{stem}.input.{i}.npy")), values);
                }
                write_f32(
                    &dir.join(format!("{stem}.output.0.npy")),
                    &[1.0 - 0.01 * step as f32, 2.0, 3.0, 4.0],
                );
            }
            std::fs::write(dir.join("mapping.csv"), mapping).unwrap();
        }
    }
}

fn analyzer(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_analyzer")).args(args).output().expect("run analyzer");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    (out.status.code(), format!("{text}{}", String::from_utf8_lossy(&out.stderr)))
}

#[test]
fn a_nan_gradient_in_one_layer_on_one_rank_is_named_with_its_rank() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("dump");
    run(&root);
    let root_arg = root.to_str().unwrap();

    let (code, text) = analyzer(&["watch", root_arg, "--no-progress"]);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("step 1 rank 1: model/layer_1/w"), "the NaN gradient's hit names its rank: {text}");
    // Rank 1's norm at step 1 is not the finite norm of its other gradient.
    assert!(
        text.contains(
            "gradient norm by step, rank 1 (all parameters): 0:2.236068 1:NaN/inf (1 of 2 gradients) 2:"
        ),
        "{text}"
    );
    assert!(
        text.contains("gradient norm by step, rank 0 (all parameters): 0:2.236068 1:1.118034 2:"),
        "{text}"
    );

    let (code, json) = analyzer(&["watch", root_arg, "--no-progress", "--format", "json"]);
    assert_eq!(code, Some(1), "{json}");
    let json: serde_json::Value = serde_json::from_str(&json).unwrap();
    let norms = json["gradient_norm"].as_array().unwrap();
    let at = |rank: u64| norms.iter().find(|p| p["step"] == 1 && p["rank"] == rank).unwrap();
    assert_eq!((at(1)["gradients"].as_u64(), at(1)["nonfinite_gradients"].as_u64()), (Some(2), Some(1)));
    assert!(at(1)["l2_norm"].is_null(), "an inf/NaN norm is null, never a finite value: {}", at(1));
    assert_eq!(at(0)["nonfinite_gradients"], 0);
    assert!(json["findings"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f["rank"] == 1 && f["step"] == 1 && f["param"] == "model/layer_1/w"));

    let page = dir.path().join("report.html");
    let (code, said) = analyzer(&["report", root_arg, "-o", page.to_str().unwrap(), "--no-progress"]);
    // A dump holds no HCCL call: the cross-rank analysis's input problem leads (exit 2).
    assert_eq!(code, Some(2), "{said}");
    let html = std::fs::read_to_string(&page).unwrap();
    // The gradient plot draws rank 1's layer_1 line (it departs from rank 0's), named in the legend and
    // the caption; the other layer agrees and is not drawn.
    assert!(html.contains("rank 1 layer_1"), "rank 1's NaN layer is not on the page");
    assert!(!html.contains("rank 1 layer_0"), "a layer that agrees with rank 0's is drawn");
    assert!(
        html.contains(
            "per layer, where another rank&#39;s departs from rank 0&#39;s (dashed): rank 1 layer_1"
        ) || html.contains("per layer, where another rank's departs from rank 0's (dashed): rank 1 layer_1")
    );
}
