//! A CANN exception dump records each tensor's position among the kernel's arguments (`arg_index`):
//! it leaves out tensors without an address, so an input's index is not its argument's. `inspect` shows
//! `arg_index` in its text and JSON where the dump sets it, and nothing where it does not.

use accutrace_formats::dump::{sanitize_op_name, write_dump};
use accutrace_formats::tensor::encode_f32;
use accutrace_formats::DType;
use accutrace_proto::dumpdata::{DumpData, OpInput, OpOutput, Shape};
use std::path::Path;

mod support;
use support::analyzer;

/// A dump tree of one step: `layer0/add` as an exception dump writes it (inputs at arguments 0 and 1,
/// argument 2 left out, the output at argument 3), then `layer0/mul` as an ordinary dump (no `arg_index`).
fn dump_tree(root: &Path) {
    let dir = root.join("20240101120000/0/model/1/0");
    std::fs::create_dir_all(&dir).unwrap();
    let shape = Some(Shape { dim: vec![2] });
    let input = |arg_index: u32| OpInput {
        data_type: DType::FLOAT16.code(),
        format: 2,
        shape: shape.clone(),
        arg_index,
        ..Default::default()
    };
    let output = |arg_index: u32| OpOutput {
        data_type: DType::FLOAT16.code(),
        format: 2,
        shape: shape.clone(),
        arg_index,
        ..Default::default()
    };
    let fp16 = encode_f32(DType::FLOAT16, &[1.0, 2.0]).unwrap();
    let ops = [("Add", "layer0/add", [0, 1], 3), ("Mul", "layer0/mul", [0, 0], 0)];
    for (k, (op_type, name, inputs, out)) in ops.into_iter().enumerate() {
        let ts = 1000 + k as u64;
        let header = DumpData {
            version: "2.0".into(),
            op_name: name.into(),
            dump_time: ts,
            input: inputs.iter().map(|&a| input(a)).collect(),
            output: vec![output(out)],
            ..Default::default()
        };
        let path = dir.join(format!("{op_type}.{}.{ts}.2.{ts}", sanitize_op_name(name)));
        let mut file = std::fs::File::create(path).unwrap();
        write_dump(&mut file, &header, &[&fp16, &fp16], &[&fp16], &[], &[]).unwrap();
    }
}

#[test]
fn inspect_shows_arg_index_where_the_dump_sets_it_and_nothing_where_not() {
    let dir = tempfile::tempdir().unwrap();
    dump_tree(dir.path());
    let root = dir.path().to_str().unwrap();

    let (code, json, err) = analyzer(&["inspect", root, "--format", "json"]);
    assert_eq!(code, 0, "{json}{err}");
    let json: serde_json::Value = serde_json::from_str(&json).unwrap();
    let args = |op: usize| -> Vec<Option<u64>> {
        json["ops"][op]["tensors"].as_array().unwrap().iter().map(|t| t["arg_index"].as_u64()).collect()
    };
    assert_eq!(json["ops"][0]["name"], "layer0/add");
    // Argument 0 (which proto3 leaves unwritten) is shown beside the others the dump set.
    assert_eq!(args(0), [Some(0), Some(1), Some(3)], "{json:#}");
    let mul = json["ops"][1]["tensors"].as_array().unwrap();
    assert!(mul.iter().all(|t| t.get("arg_index").is_none()), "no field where the dump has none: {mul:?}");

    let (code, text, err) = analyzer(&["inspect", root]);
    assert_eq!(code, 0, "{text}{err}");
    let (add, mul) = text.split_at(text.find("layer0/mul").unwrap());
    for arg in [0, 1, 3] {
        assert!(add.contains(&format!("kernel argument: {arg} (arg_index)")), "{text}");
    }
    assert!(!mul.contains("kernel argument"), "{text}");
}
