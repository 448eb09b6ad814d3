//! Dump emission through the C ABI: callback chunks vs the on-disk tree, interleaving, selection,
//! determinism, and overflow (op-debug) records in both payload layouts.

mod common;
use accutrace_formats::dump::opdebug::{decode_opdebug, OpDebugLayout};
use accutrace_formats::dump::{parse_dump, parse_file_name, walk_dump_tree, FileKind};
use ascend_sys::*;
use common::*;
use std::collections::HashMap;
use std::path::Path;

const MODEL: &str = r#"{"model_name": "sim", "n_layers": 1}"#;
const FAULT_OP: &str = "model/layer_0/mlp/fc1/MatMul";

/// A dump config that CANN accepts and that sets a dump: `dump_path` exists, and the op switch is on
/// (`NeedDump`) unless `extra` turns the overflow dump on (which excludes it).
fn dump_json(dir: &Path, dump_path: &Path, extra: &str) -> std::path::PathBuf {
    std::fs::create_dir_all(dump_path).unwrap();
    let switch = if extra.contains(r#""dump_debug": "on""#) { "" } else { r#", "dump_op_switch": "on""# };
    let text = format!(r#"{{"dump": {{"dump_path": "{}"{switch}{extra}}}}}"#, dump_path.display());
    write(dir, &format!("dump{}.json", extra.len()), &text)
}

/// One framework-like session: init, device, [callback], dump config, `steps` steps, teardown.
fn session(model_json: &str, dump_cfg: &Path, steps: usize, callback: bool) {
    let dir = tempfile::tempdir().unwrap();
    let model = write(dir.path(), "model.json", model_json);
    assert_eq!(init(None), ACL_SUCCESS);
    assert_eq!(set_device(0), ACL_SUCCESS);
    if callback {
        assert_eq!(reg_callback(0), ACL_SUCCESS);
    }
    assert_eq!(init_dump(), ACL_SUCCESS);
    assert_eq!(set_dump(dump_cfg), ACL_SUCCESS);
    let (rc, id) = load(&model);
    assert_eq!(rc, ACL_SUCCESS);
    for _ in 0..steps {
        assert_eq!(execute(id), ACL_SUCCESS);
    }
    assert_eq!(finalize_dump(), ACL_SUCCESS);
    if callback {
        unreg_callback();
    }
    assert_eq!(unload(id), ACL_SUCCESS);
    assert_eq!(finalize(), ACL_SUCCESS);
}

#[test]
fn callback_chunks_reassemble_to_the_disk_files_and_interleave() {
    let _g = serial();
    // SAFETY: tests in this binary run one at a time (serial), so no thread reads the environment now.
    unsafe { std::env::set_var("SIM_ACL_CHUNK_SIZE", "100") };
    let dir = tempfile::tempdir().unwrap();
    let dump_path = dir.path().join("dump");
    let cfg = dump_json(dir.path(), &dump_path, r#", "dump_mode": "all""#);

    take_chunks();
    session(MODEL, &cfg, 2, true);
    let chunks = take_chunks();
    let written = std::fs::read_dir(&dump_path).unwrap().count();
    assert_eq!(written, 0, "with a callback registered nothing is written to disk");
    session(MODEL, &cfg, 2, false);
    // SAFETY: serial tests; nothing else reads the environment meanwhile.
    unsafe { std::env::remove_var("SIM_ACL_CHUNK_SIZE") };

    let me = std::thread::current().id();
    for c in &chunks {
        assert_eq!((c.offset, c.flag), (-1, 0));
        assert_eq!(c.len as usize, 4120 + c.data.len());
        assert!(c.data.len() <= 100);
        assert_ne!(c.thread, me, "chunks come from the runtime's dump thread");
    }
    let from_callback = reassemble(&chunks);
    let on_disk = files_under(&dump_path);
    assert!(on_disk.len() > 20, "a step of the model dumps many ops ({} files)", on_disk.len());
    let mut names: Vec<_> = from_callback.keys().collect();
    names.sort();
    let mut disk_names: Vec<_> = on_disk.keys().collect();
    disk_names.sort();
    assert_eq!(names, disk_names, "same file names (full paths)");
    for (name, bytes) in &on_disk {
        assert!(from_callback[name] == *bytes, "{name}: callback bytes differ from the disk file");
    }

    // Interleaving: some file's chunks are not contiguous.
    let mut first_last: HashMap<&str, (usize, usize)> = HashMap::new();
    for (i, c) in chunks.iter().enumerate() {
        first_last.entry(&c.file_name).and_modify(|e| e.1 = i).or_insert((i, i));
    }
    let interleaved =
        first_last.iter().any(|(name, &(a, b))| chunks[a..=b].iter().any(|c| c.file_name != *name));
    assert!(interleaved, "chunks of different files interleave");
}

#[test]
fn disk_tree_parses_with_the_shared_codec_and_is_deterministic() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    session(MODEL, &dump_json(dir.path(), &a, r#", "dump_mode": "all""#), 2, false);
    session(MODEL, &dump_json(dir.path(), &b, r#", "dump_mode": "all" "#), 2, false);

    let tree = walk_dump_tree(&a).unwrap();
    assert!(tree.warnings.is_empty(), "{:?}", tree.warnings);
    let mut steps = std::collections::BTreeSet::new();
    for e in &tree.entries {
        assert_eq!(e.device_id, Some(0));
        assert_eq!(e.model_name.as_deref(), Some("sim"));
        assert_eq!(e.model_id, Some(1));
        assert_eq!(e.time_dir.as_deref(), Some("20240101000000"));
        steps.insert(e.step.unwrap());
        let bytes = std::fs::read(&e.path).unwrap();
        let file = parse_dump(&bytes).unwrap_or_else(|err| panic!("{}: {err}", e.path.display()));
        assert_eq!(file.header.version, "2.0");
        assert_eq!(file.header.dump_time, e.name.timestamp_us);
        assert_eq!(accutrace_formats::dump::sanitize_op_name(&file.header.op_name), e.op_name);
        assert_eq!(e.name.stream_id, Some(2));
        assert!(!file.outputs.is_empty() || !file.inputs.is_empty());
        for t in file.inputs.iter().chain(&file.outputs) {
            assert!(!t.device_shape.is_empty() || t.bytes.len() <= 8, "{}: shape recorded", e.op_name);
        }
    }
    assert_eq!(steps.into_iter().collect::<Vec<_>>(), [0, 1]);

    // Same configuration, same bytes, same names (relative to the dump path).
    let rel = |root: &Path| -> HashMap<String, Vec<u8>> {
        files_under(root)
            .into_iter()
            .map(|(k, v)| (Path::new(&k).strip_prefix(root).unwrap().display().to_string(), v))
            .collect()
    };
    assert!(rel(&a) == rel(&b), "two runs with the same configuration dump identical trees");
}

#[test]
fn dump_list_step_and_mode_select_what_is_dumped() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let dump_path = dir.path().join("d");
    let op = "model/layer_0/attn/Softmax";
    let extra = format!(
        r#", "dump_mode": "input", "dump_step": "1", "dump_list": [{{"model_name": "sim", "layer": ["{op}"]}}]"#
    );
    session(MODEL, &dump_json(dir.path(), &dump_path, &extra), 3, false);
    let tree = walk_dump_tree(&dump_path).unwrap();
    assert_eq!(tree.entries.len(), 1, "{:?}", tree.entries.iter().map(|e| &e.path).collect::<Vec<_>>());
    let e = &tree.entries[0];
    assert_eq!(e.step, Some(1));
    let bytes = std::fs::read(&e.path).unwrap();
    let file = parse_dump(&bytes).unwrap();
    assert_eq!(file.header.op_name, op);
    assert!(!file.inputs.is_empty() && file.outputs.is_empty(), "dump_mode input dumps inputs only");
}

fn overflow_run(layout: &str) -> (Vec<u8>, HashMap<String, Vec<u8>>) {
    // SAFETY: serial tests; nothing else reads the environment meanwhile.
    unsafe { std::env::set_var("SIM_ACL_OPDEBUG_LAYOUT", layout) };
    let dir = tempfile::tempdir().unwrap();
    let dump_path = dir.path().join("d");
    let model = format!(
        r#"{{"model_name": "sim", "n_layers": 1, "faults": {{"overflow": {{"op": "{FAULT_OP}", "step": 1}}}}}}"#
    );
    session(&model, &dump_json(dir.path(), &dump_path, r#", "dump_debug": "on""#), 3, false);
    // SAFETY: serial tests; nothing else reads the environment meanwhile.
    unsafe { std::env::remove_var("SIM_ACL_OPDEBUG_LAYOUT") };
    let files: HashMap<String, Vec<u8>> = files_under(&dump_path)
        .into_iter()
        .map(|(k, v)| {
            // Only overflowing ops are dumped, and only at the faulty step.
            assert_eq!(Path::new(&k).parent().unwrap().file_name().unwrap(), "1", "{k}");
            (k.rsplit('/').next().unwrap().to_string(), v)
        })
        .collect();
    let opdebug =
        files.iter().find(|(k, _)| k.starts_with("Opdebug.Node_OpDebug.")).expect("an op-debug file");
    (opdebug.1.clone(), files)
}

#[test]
fn overflow_writes_opdebug_records_naming_the_op_in_both_layouts() {
    let _g = serial();
    for (env, want) in [("legacy", OpDebugLayout::Legacy), ("v2", OpDebugLayout::Tagged { version: 1 })] {
        let (opdebug, files) = overflow_run(env);
        let file = parse_dump(&opdebug).unwrap();
        assert_eq!(file.header.op_name, "Node_OpDebug");
        let record = decode_opdebug(file.outputs[0].bytes).unwrap();
        assert_eq!(record.layout, want, "{env}");
        let aic = record.engines.iter().find(|r| r.overflowed()).expect("an overflowing engine");
        assert_eq!(aic.stream_id, 2);
        // The op with that task/stream is the faulty op.
        let named: Vec<_> = files
            .keys()
            .filter_map(|k| parse_file_name(k).ok())
            .filter(|n| n.kind == FileKind::Tensor && n.op_type != "Opdebug")
            .filter(|n| n.task_id == aic.task_id && n.stream_id == Some(aic.stream_id))
            .collect();
        assert!(!named.is_empty(), "{env}: no dump file for task {}", aic.task_id);
        assert!(
            named.iter().any(|n| n.op_name == accutrace_formats::dump::sanitize_op_name(FAULT_OP)),
            "{named:?}"
        );
        // ... and its dump is the first with that task/stream after the record (docs/CANN.md §4).
        assert!(named.iter().all(|n| n.timestamp_us > file.header.dump_time), "{named:?}");
    }
}

#[test]
fn stats_mode_writes_one_parsable_csv_per_op() {
    use accutrace_formats::dump::stats_csv::parse_stats_csv;
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let dump_path = dir.path().join("s");
    session(
        MODEL,
        &dump_json(dir.path(), &dump_path, r#", "dump_data": "stats", "dump_mode": "all""#),
        1,
        false,
    );
    let files = files_under(&dump_path);
    assert!(files.len() > 20);
    for (path, bytes) in &files {
        let name = parse_file_name(path.rsplit('/').next().unwrap()).unwrap();
        assert_eq!(name.kind, FileKind::StatsCsv, "{path}");
        let rows = parse_stats_csv(bytes).unwrap_or_else(|e| panic!("{path}: {e}"));
        assert!(!rows.is_empty(), "{path}");
        assert!(rows.iter().all(|r| r.count.is_some() && r.data_size.is_some()), "{path}");
    }
}

#[test]
fn a_second_callback_registration_is_ignored_and_the_first_keeps_receiving() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static SECOND: AtomicUsize = AtomicUsize::new(0);
    unsafe extern "C" fn second(_chunk: *const acldumpChunk, _len: i32) -> i32 {
        SECOND.fetch_add(1, Ordering::Relaxed);
        0
    }
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let cfg = dump_json(dir.path(), &dir.path().join("d"), "");
    let model = write(dir.path(), "model.json", MODEL);
    take_chunks();
    assert_eq!(init(None), ACL_SUCCESS);
    assert_eq!(set_device(0), ACL_SUCCESS);
    assert_eq!(reg_callback(0), ACL_SUCCESS);
    // SAFETY: the pointer comes from the loaded library; `second` has the acldumpCallback signature.
    assert_eq!(unsafe { lib().acldump_reg_callback().unwrap()(Some(second), 0) }, ACL_SUCCESS);
    assert_eq!(init_dump(), ACL_SUCCESS);
    assert_eq!(set_dump(&cfg), ACL_SUCCESS);
    let (rc, id) = load(&model);
    assert_eq!(rc, ACL_SUCCESS);
    assert_eq!(execute(id), ACL_SUCCESS);
    assert_eq!(finalize_dump(), ACL_SUCCESS);
    unreg_callback();
    assert_eq!(unload(id), ACL_SUCCESS);
    assert_eq!(finalize(), ACL_SUCCESS);
    assert!(!take_chunks().is_empty());
    assert_eq!(SECOND.load(Ordering::Relaxed), 0);
}

#[test]
fn stats_csvs_reach_a_callback_as_c_strings() {
    use accutrace_formats::dump::stats_csv::parse_stats_csv;
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let dump_path = dir.path().join("s");
    let cfg = dump_json(dir.path(), &dump_path, r#", "dump_data": "stats", "dump_mode": "all""#);
    take_chunks();
    session(MODEL, &cfg, 1, true);
    let files = reassemble(&take_chunks());
    assert!(files.len() > 20);
    for (path, bytes) in &files {
        // As the real runtime sends them: the text and its NUL (bufLen counts it); on disk there is none.
        assert_eq!(bytes.iter().position(|&b| b == 0), Some(bytes.len() - 1), "{path}");
        let rows = parse_stats_csv(bytes).unwrap_or_else(|e| panic!("{path}: {e}"));
        assert!(!rows.is_empty() && rows.iter().all(|r| r.count.is_some()), "{path}");
    }
}
