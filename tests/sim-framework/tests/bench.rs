//! `sim-train bench` without the runtime: the files exist, parse as .npy, and hold the right shapes.

use std::path::Path;
use std::process::Command;

/// Parses a v1.0 .npy header: (descr, shape, data offset).
fn npy_header(bytes: &[u8]) -> (String, Vec<u64>, usize) {
    assert_eq!(&bytes[..8], b"\x93NUMPY\x01\x00");
    let len = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
    assert_eq!((10 + len) % 64, 0, "header alignment");
    let header = std::str::from_utf8(&bytes[10..10 + len]).unwrap();
    let descr = header.split("'descr': '").nth(1).unwrap().split('\'').next().unwrap().to_string();
    let shape = header.split("'shape': (").nth(1).unwrap().split(')').next().unwrap();
    let shape =
        shape.split(',').map(str::trim).filter(|s| !s.is_empty()).map(|s| s.parse().unwrap()).collect();
    (descr, shape, 10 + len)
}

fn run_bench(model: &str, steps: u32, out: &Path) -> String {
    let dir = out.parent().unwrap();
    let model_path = dir.join("model.json");
    std::fs::write(&model_path, model).unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_sim-train"))
        .args(["bench", "--model", model_path.to_str().unwrap(), "--steps", &steps.to_string(), "-o"])
        .arg(out)
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout).unwrap()
}

#[test]
fn bench_writes_one_npy_per_original_op_output_with_a_name_mapping() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("bench");
    let stdout = run_bench(r#"{"fusion": true, "precision": "fp16"}"#, 2, &out);
    assert_eq!(stdout.lines().filter(|l| l.contains("loss")).count(), 2, "{stdout}");
    for step in 0..2 {
        let dir = out.join(format!("step{step}"));
        let mapping: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("mapping.json")).unwrap()).unwrap();
        let entries = mapping.as_array().unwrap();
        let npys = std::fs::read_dir(&dir)
            .unwrap()
            .filter(|e| e.as_ref().unwrap().path().extension().is_some_and(|x| x == "npy"));
        assert_eq!(npys.count(), entries.len());
        for e in entries {
            let bytes = std::fs::read(dir.join(e["file"].as_str().unwrap())).unwrap();
            let (descr, shape, offset) = npy_header(&bytes);
            let want: Vec<u64> = e["shape"].as_array().unwrap().iter().map(|d| d.as_u64().unwrap()).collect();
            assert_eq!(shape, want, "{e}");
            assert_eq!(descr, "<f4");
            assert_eq!((bytes.len() - offset) as u64, 4 * want.iter().product::<u64>(), "{e}");
            // The benchmark is never fused: every op stands for itself.
            assert!(!e["op_name"].as_str().unwrap().contains("fused"));
        }
        let find =
            |name: &str| entries.iter().find(|e| e["op_name"] == name).unwrap_or_else(|| panic!("{name}"));
        let qkv = find("model/layer_0/attn/qkv/MatMul");
        assert_eq!(qkv["shape"], serde_json::json!([2, 8, 48]));
        let file = qkv["file"].as_str().unwrap();
        assert!(file.starts_with("model_layer_0_attn_qkv_MatMul.0.") && file.ends_with(".npy"), "{file}");
        let ln = find("model/layer_1/ln_2/LayerNorm");
        assert!(entries.iter().any(|e| e["op_name"] == ln["op_name"] && e["output_index"] == 2));
        find("model/layer_0/mlp/Gelu");
        find("gradients/model/embedding/GatherV2_grad/UnsortedSegmentSum");
    }
}

#[test]
fn bench_output_is_reproducible_and_refuses_bad_models() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    run_bench("{}", 1, &a);
    run_bench("{}", 1, &b);
    let mut names: Vec<_> =
        std::fs::read_dir(a.join("step0")).unwrap().map(|e| e.unwrap().file_name()).collect();
    names.sort();
    assert!(names.len() > 50);
    for n in names {
        assert_eq!(
            std::fs::read(a.join("step0").join(&n)).unwrap(),
            std::fs::read(b.join("step0").join(&n)).unwrap()
        );
    }
    let bad = tmp.path().join("bad.json");
    std::fs::write(&bad, r#"{"n_heads": 3}"#).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_sim-train"))
        .args(["bench", "--model", bad.to_str().unwrap(), "-o", tmp.path().join("c").to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("n_heads"));
}
