//! The .npy directory source: every naming, step/rank directories, mapping files, layouts, bad files.

use accutrace_formats::npy::{write_npy, write_npy_ordered};
use accutrace_formats::stats::content_hash;
use accutrace_formats::DType;
use analyzer::index::Io;
use analyzer::sources::npy::NpyDirSource;
use analyzer::sources::Source;
use analyzer::sources::{detect, Detected};
use std::path::Path;

fn f32_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn write_f32(path: &Path, shape: &[u64], values: &[f32]) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let mut out = Vec::new();
    write_npy(&mut out, DType::FLOAT, shape, &f32_bytes(values)).unwrap();
    std::fs::write(path, out).unwrap();
}

fn op_named<'a>(source: &'a NpyDirSource, name: &str) -> &'a analyzer::index::IndexedOp {
    source.index().ops.iter().find(|o| o.name == name).unwrap_or_else(|| panic!("no op {name}"))
}

/// `sim-train bench -o DIR`: `DIR/step{k}/{op with / as _}.{i}.{ts}.npy` and a `mapping.json` per step.
#[test]
fn bench_layout_with_mapping_json_gives_real_names_types_and_order() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("bench");
    for step in 0..2u64 {
        let step_dir = root.join(format!("step{step}"));
        let base = 1_700_000_000_000_000 + step * 1_000_000;
        // Written out of order on purpose: the timestamps decide.
        let ops = [
            ("model/layer_0/attn/MatMul", "MatMul", 1u64),
            ("model/embed", "Gather", 0),
            ("model/loss", "Loss", 2),
        ];
        let mut mapping = Vec::new();
        for (name, op_type, k) in ops {
            let file = format!("{}.0.{}.npy", name.replace('/', "_"), base + k);
            write_f32(&step_dir.join(&file), &[2, 2], &[k as f32, 1.0, 2.0, step as f32]);
            mapping.push(serde_json::json!({"file": file, "op_name": name, "op_type": op_type,
                "output_index": 0, "shape": [2, 2], "dtype": "FLOAT"}));
        }
        std::fs::write(step_dir.join("mapping.json"), serde_json::to_string(&mapping).unwrap()).unwrap();
    }
    assert_eq!(detect(&root).unwrap(), Detected::NpyDir(root.clone()));
    let source = NpyDirSource::open(&root).unwrap();
    let index = source.index();
    assert!(index.warnings.is_empty(), "{:?}", index.warnings);
    let names: Vec<(u64, &str, &str)> =
        index.ops.iter().map(|o| (o.step, o.name.as_str(), o.op_type.as_str())).collect();
    assert_eq!(
        names,
        [
            (0, "model/embed", "Gather"),
            (0, "model/layer_0/attn/MatMul", "MatMul"),
            (0, "model/loss", "Loss"),
            (1, "model/embed", "Gather"),
            (1, "model/layer_0/attn/MatMul", "MatMul"),
            (1, "model/loss", "Loss"),
        ]
    );
    let t = index.ops[4].outputs().next().unwrap();
    assert_eq!((index.tensors[t].dtype, &index.tensors[t].shape[..]), (DType::FLOAT, &[2u64, 2][..]));
    let mut values = Vec::new();
    source.read_values(t, &mut values).unwrap();
    assert_eq!(values, [1.0, 1.0, 2.0, 1.0]);
    assert_eq!(source.content_hash(t).unwrap(), content_hash(&f32_bytes(&[1.0, 1.0, 2.0, 1.0])));
}

#[test]
fn dump_names_group_inputs_and_outputs_of_one_op_with_step_and_rank_dirs() {
    let dir = tempfile::tempdir().unwrap();
    let leaf = dir.path().join("rank3").join("step7");
    write_f32(&leaf.join("Add.add_1.5.2.200.input.0.npy"), &[2], &[1.0, 2.0]);
    write_f32(&leaf.join("Add.add_1.5.2.200.input.1.npy"), &[2], &[3.0, 4.0]);
    write_f32(&leaf.join("Add.add_1.5.2.200.output.0.npy"), &[2], &[4.0, 6.0]);
    write_f32(&leaf.join("Relu.relu.6.2.100.output.0.npy"), &[1], &[0.0]);
    write_f32(&dir.path().join("loose.npy"), &[3], &[1.0, 2.0, 3.0]);
    let source = NpyDirSource::open(dir.path()).unwrap();
    let index = source.index();
    assert_eq!(index.ops.len(), 3);
    let add = op_named(&source, "add_1");
    assert_eq!((add.op_type.as_str(), add.step, add.rank), ("Add", 7, 3));
    assert_eq!((add.inputs().len(), add.outputs().len()), (2, 1));
    assert_eq!(index.tensors[add.inputs().nth(1).unwrap()].index, 1);
    assert_eq!(index.tensors[add.inputs().nth(1).unwrap()].io, Io::Input);
    // Relu's timestamp is earlier, so it runs first within step 7.
    let relu = index.ops.iter().position(|o| o.name == "relu").unwrap();
    let add_pos = index.ops.iter().position(|o| o.name == "add_1").unwrap();
    assert!(relu < add_pos);
    let loose = op_named(&source, "loose");
    assert_eq!((loose.step, loose.rank, loose.outputs().len()), (0, 0, 1));
}

#[test]
fn cann_mapping_csv_restores_a_renamed_dump_file_name() {
    let dir = tempfile::tempdir().unwrap();
    write_f32(&dir.path().join("4242.output.0.npy"), &[1], &[5.0]);
    std::fs::write(dir.path().join("mapping.csv"), "4242,Conv2D.very_long_conv_name.1.2.300\n").unwrap();
    let source = NpyDirSource::open(dir.path()).unwrap();
    let op = &source.index().ops[0];
    assert_eq!((op.name.as_str(), op.op_type.as_str()), ("very_long_conv_name", "Conv2D"));
}

#[test]
fn fortran_and_big_endian_files_read_in_c_order_and_hash_like_c_order() {
    let dir = tempfile::tempdir().unwrap();
    // The 2x3 array [[0, 1, 2], [3, 4, 5]] stored column-major.
    let column_major = f32_bytes(&[0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
    let mut out = Vec::new();
    write_npy_ordered(&mut out, DType::FLOAT, &[2, 3], &column_major, true).unwrap();
    std::fs::write(dir.path().join("f.npy"), out).unwrap();
    write_f32(&dir.path().join("c.npy"), &[2, 3], &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
    // Big-endian float32, hand-made header.
    let header = "{'descr': '>f4', 'fortran_order': False, 'shape': (2, 3), }";
    let mut be = b"\x93NUMPY\x01\x00".to_vec();
    be.extend_from_slice(&(header.len() as u16).to_le_bytes());
    be.extend_from_slice(header.as_bytes());
    for v in [0.0f32, 1.0, 2.0, 3.0, 4.0, 5.0] {
        be.extend_from_slice(&v.to_be_bytes());
    }
    std::fs::write(dir.path().join("b.npy"), be).unwrap();

    let source = NpyDirSource::open(dir.path()).unwrap();
    let tensor = |name: &str| op_named(&source, name).outputs().next().unwrap();
    let mut hashes = Vec::new();
    for name in ["b", "c", "f"] {
        let mut values = Vec::new();
        source.read_values(tensor(name), &mut values).unwrap();
        assert_eq!(values, [0.0, 1.0, 2.0, 3.0, 4.0, 5.0], "{name}");
        hashes.push(source.content_hash(tensor(name)).unwrap());
    }
    assert!(hashes.iter().all(|&h| h == hashes[0]), "{hashes:x?}");
}

#[test]
fn other_dtypes_keep_their_dtype_and_values() {
    let dir = tempfile::tempdir().unwrap();
    let mut out = Vec::new();
    let ints: Vec<u8> = [-7i64, 0, 1 << 40].iter().flat_map(|v| v.to_le_bytes()).collect();
    write_npy(&mut out, DType::INT64, &[3], &ints).unwrap();
    std::fs::write(dir.path().join("ids.npy"), &out).unwrap();
    let source = NpyDirSource::open(dir.path()).unwrap();
    let t = source.index().ops[0].outputs().next().unwrap();
    assert_eq!(source.index().tensors[t].dtype, DType::INT64);
    let mut values = Vec::new();
    source.read_values(t, &mut values).unwrap();
    assert_eq!(values, [-7.0, 0.0, (1u64 << 40) as f32]);
    assert_eq!(source.content_hash(t).unwrap(), content_hash(&ints));
}

#[test]
fn truncated_or_corrupt_files_are_errors_naming_file_and_offset() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("step0").join("x.0.17.npy");
    write_f32(&path, &[4], &[1.0, 2.0, 3.0, 4.0]);
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() - 3]).unwrap();
    let err = format!("{:#}", NpyDirSource::open(dir.path()).err().expect("truncated file must fail"));
    assert!(err.contains("x.0.17.npy") && err.contains("at byte 128") && err.contains("truncated"), "{err}");

    std::fs::write(&path, b"not numpy at all").unwrap();
    let err = format!("{:#}", NpyDirSource::open(dir.path()).err().expect("bad magic must fail"));
    assert!(err.contains("x.0.17.npy") && err.contains("at byte 0"), "{err}");
}

#[test]
fn stray_files_are_warnings() {
    let dir = tempfile::tempdir().unwrap();
    write_f32(&dir.path().join("a.npy"), &[1], &[1.0]);
    std::fs::write(dir.path().join("notes.txt"), "hi").unwrap();
    let source = NpyDirSource::open(dir.path()).unwrap();
    assert_eq!(source.index().ops.len(), 1);
    assert!(source.index().warnings.iter().any(|w| w.contains("notes.txt")), "{:?}", source.index().warnings);
}
