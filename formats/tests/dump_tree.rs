//! Walking dump directory trees: graph and single-op layouts, any starting level, mapping.csv, warnings.

use accutrace_formats::dump::{walk_dump_tree, FileKind, NameMapping};
use std::fs;
use std::path::Path;

fn touch(path: &Path) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, b"x").unwrap();
}

#[test]
fn graph_tree_is_walked_in_execution_order_with_locations() {
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join("dump/20240101120000/2/resnet50/7");
    let step0 = model.join("0");
    let step1 = model.join("1");
    touch(&step1.join("Conv2D.conv1.5.1.50")); // earlier timestamp, later step
    touch(&step0.join("Relu.relu1.6.1.200"));
    touch(&step0.join("Conv2D.conv1.5.1.100"));
    touch(&step0.join("Add.add2.9.1.200")); // same timestamp as relu1: task id decides
    touch(&step0.join("Opdebug.Node_OpDebug.40.1.150"));
    touch(&step0.join("notes.txt"));
    let long = format!("MatMul.{}.11.1.300", "m".repeat(300));
    let mut mapping = NameMapping::default();
    let short = mapping.file_name_for(&long);
    touch(&step0.join(&short));
    fs::write(step0.join("mapping.csv"), mapping.to_csv()).unwrap();

    let tree = walk_dump_tree(&tmp.path().join("dump")).unwrap();
    let names: Vec<(Option<u64>, u64, &str)> =
        tree.entries.iter().map(|e| (e.step, e.name.timestamp_us, e.name.op_type.as_str())).collect();
    assert_eq!(
        names,
        vec![
            (Some(0), 100, "Conv2D"),
            (Some(0), 150, "Opdebug"),
            (Some(0), 200, "Relu"),
            (Some(0), 200, "Add"),
            (Some(0), 300, "MatMul"),
            (Some(1), 50, "Conv2D"),
        ]
    );
    let first = &tree.entries[0];
    assert_eq!(first.device_id, Some(2));
    assert_eq!(first.model_name.as_deref(), Some("resnet50"));
    assert_eq!(first.model_id, Some(7));
    assert_eq!(first.time_dir.as_deref(), Some("20240101120000"));
    assert_eq!(tree.entries[1].name.kind, FileKind::OpDebug);
    // The renamed file keeps its short path but its original name.
    let matmul = &tree.entries[4];
    assert!(matmul.path.ends_with(&short));
    assert_eq!(matmul.op_name, "m".repeat(300));
    assert_eq!(matmul.name.task_id, 11);
    // notes.txt is a warning naming the file, not a failure.
    assert_eq!(tree.warnings.len(), 1);
    assert!(tree.warnings[0].path.as_ref().unwrap().ends_with("notes.txt"));
    assert!(tree.warnings[0].problem.contains("dot-separated fields"), "{}", tree.warnings[0]);

    // Starting at a step dir, a device dir, or one file keeps the locations.
    let from_step = walk_dump_tree(&step1).unwrap();
    assert_eq!(from_step.entries.len(), 1);
    assert_eq!((from_step.entries[0].step, from_step.entries[0].device_id), (Some(1), Some(2)));
    let from_device = walk_dump_tree(&tmp.path().join("dump/20240101120000/2")).unwrap();
    assert_eq!(from_device.entries.len(), 6);
    let one = walk_dump_tree(&step0.join("Relu.relu1.6.1.200")).unwrap();
    assert_eq!(one.entries.len(), 1);
    assert_eq!((one.entries[0].step, one.entries[0].model_id), (Some(0), Some(7)));
}

#[test]
fn single_op_and_flat_layouts() {
    let tmp = tempfile::tempdir().unwrap();
    touch(&tmp.path().join("ops/20240101120000/3/Add.add.1.2.50"));
    touch(&tmp.path().join("ops/20240101120000/3/MatMul.mm.7.1.99.4.2.5.3"));
    let tree = walk_dump_tree(&tmp.path().join("ops")).unwrap();
    assert_eq!(tree.entries.len(), 2);
    let e = &tree.entries[0];
    assert_eq!((e.device_id, e.step, e.model_name.as_ref()), (Some(3), None, None));
    assert_eq!(e.time_dir.as_deref(), Some("20240101120000"));
    assert_eq!(tree.entries[1].name.ffts.map(|f| f.device_id), Some(3));

    touch(&tmp.path().join("flat/Add.add.1.2.50.csv"));
    let flat = walk_dump_tree(&tmp.path().join("flat")).unwrap();
    assert_eq!(flat.entries[0].name.kind, FileKind::StatsCsv);
    assert_eq!((flat.entries[0].device_id, flat.entries[0].time_dir.as_ref()), (None, None));

    let err = walk_dump_tree(&tmp.path().join("missing")).unwrap_err();
    assert!(err.path.unwrap().ends_with("missing"));
}

#[test]
fn bad_mapping_is_a_warning() {
    let tmp = tempfile::tempdir().unwrap();
    touch(&tmp.path().join("Add.add.1.2.50"));
    fs::write(tmp.path().join("mapping.csv"), "no comma\n").unwrap();
    let tree = walk_dump_tree(tmp.path()).unwrap();
    assert_eq!(tree.entries.len(), 1);
    assert_eq!(tree.warnings.len(), 1);
    assert!(tree.warnings[0].to_string().contains("mapping.csv: at byte 0: line 1"), "{}", tree.warnings[0]);
}
