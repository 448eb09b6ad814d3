//! `capture::completeness`: a capture whose manifest and stream files say more than a reader finds is
//! reported, one shortfall per way it is short; a whole capture reports nothing. Each case damages a copy
//! of one capture of two streams (the first spans 6 segments) the way files get lost in practice.

use accutrace_formats::capture::completeness::check;
use accutrace_formats::capture::*;
use accutrace_formats::stats::{content_hash, TensorStats};
use accutrace_formats::DType;
use std::path::Path;

const STEPS: u64 = 60;

fn info(stream_id: u32) -> StreamInfo {
    StreamInfo { stream_id, rank: Some(stream_id), device: 0, pid: 10 + stream_id, host: String::new() }
}

/// A capture of two sealed streams with a manifest that counts them: stream 0 spans several segments.
fn write_capture(dir: &Path) {
    let mut manifest = Manifest::new("test", vec!["train".into()]);
    for (id, steps) in [(0, STEPS), (1, 3)] {
        let mut w = StreamWriter::create(dir, info(id), 8 * 1024, Policy::KeepAll).unwrap();
        for step in 0..steps {
            let op =
                OpInfo { name: format!("net/op{step}"), op_type: "Add".into(), step, ..Default::default() };
            w.append_op(&op).unwrap();
            let data: Vec<u8> = (0..600u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
            let meta = TensorMeta {
                io: Io::Output,
                index: 0,
                dtype: DType::UINT8,
                format: 2,
                sub_format: 0,
                device_shape: vec![600],
                original_shape: None,
                original_op: None,
            };
            let stats = TensorStats::of_bytes(DType::UINT8, &data).unwrap();
            w.append_tensor(&meta, &stats, content_hash(&data), Some(&data), 1).unwrap();
        }
        manifest.streams.push(w.seal().unwrap());
    }
    manifest.counts.tensors = STEPS + 3;
    manifest.write(dir).unwrap();
}

/// The shortfalls of the capture in `dir`, as text, with the records found counted as a reader would.
fn shortfalls(dir: &Path) -> Vec<String> {
    let run = CaptureRun::open(dir).unwrap();
    let tallies: Vec<RecordTally> = run.streams.iter().map(RecordTally::of_stream).collect();
    check(&run, &tallies).iter().map(|s| s.to_string()).collect()
}

fn stream_dir(dir: &Path, id: u32) -> std::path::PathBuf {
    dir.join(info(id).dir_name())
}

fn fresh() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    write_capture(dir.path());
    let segments = std::fs::read_dir(stream_dir(dir.path(), 0)).unwrap().count() - 1;
    assert!(segments >= 4, "the first stream spans several segments: {segments}");
    dir
}

fn one_containing(found: &[String], parts: &[&str]) {
    assert_eq!(found.len(), 1, "{found:#?}");
    for p in parts {
        assert!(found[0].contains(p), "{:?} lacks {p:?}", found[0]);
    }
}

#[test]
fn a_whole_capture_has_no_shortfall() {
    let dir = fresh();
    assert_eq!(shortfalls(dir.path()), Vec::<String>::new());
}

#[test]
fn lost_segments_at_the_start_middle_and_end_are_named_with_the_records_they_held() {
    let segments = {
        let dir = fresh();
        std::fs::read_dir(stream_dir(dir.path(), 0)).unwrap().count() as u64 - 1
    };
    for lost in [0, segments / 2, segments - 1] {
        let dir = fresh();
        std::fs::remove_file(stream_dir(dir.path(), 0).join(segment_file_name(lost))).unwrap();
        let found = shortfalls(dir.path());
        assert_eq!(found.len(), 2, "{found:#?}");
        assert!(found[0].contains(&format!("segment {lost} is missing")), "{found:#?}");
        assert!(
            found[1].contains(&format!("tensor records found, the manifest counts {STEPS}")),
            "{found:#?}"
        );
    }
}

#[test]
fn a_stream_without_its_stream_file_or_directory_is_missing() {
    let dir = fresh();
    std::fs::remove_file(stream_dir(dir.path(), 1).join("stream.json")).unwrap();
    one_containing(&shortfalls(dir.path()), &["stream.json is missing", "3 tensors", "rank 1"]);
    std::fs::remove_dir_all(stream_dir(dir.path(), 1)).unwrap();
    one_containing(&shortfalls(dir.path()), &["directory's missing"]);
}

#[test]
fn without_a_manifest_nothing_vouches_for_the_capture() {
    let dir = fresh();
    std::fs::remove_file(dir.path().join("manifest.json")).unwrap();
    one_containing(&shortfalls(dir.path()), &["manifest.json: missing"]);
    // A gap is still visible from the segment numbers alone.
    std::fs::remove_file(stream_dir(dir.path(), 0).join(segment_file_name(1))).unwrap();
    let found = shortfalls(dir.path());
    assert_eq!(found.len(), 2, "{found:#?}");
    assert!(found[1].contains("segment 1 is missing"));
}

#[test]
fn bytes_appended_to_a_segment_are_a_shortfall_though_every_record_reads() {
    let dir = fresh();
    let segment = stream_dir(dir.path(), 0).join(segment_file_name(1));
    let mut bytes = std::fs::read(&segment).unwrap();
    bytes.extend([0x5A; 100]);
    std::fs::write(&segment, bytes).unwrap();
    one_containing(&shortfalls(dir.path()), &["seg-000001.acc", "100 bytes past the segment's size"]);
}

#[test]
fn a_copied_stream_is_not_vouched_for() {
    let dir = fresh();
    let copy = dir.path().join("stream-009-rank1-dev0-pid11");
    std::fs::create_dir(&copy).unwrap();
    for e in std::fs::read_dir(stream_dir(dir.path(), 1)).unwrap() {
        let p = e.unwrap().path();
        std::fs::copy(&p, copy.join(p.file_name().unwrap())).unwrap();
    }
    one_containing(&shortfalls(dir.path()), &["stream-009", "not in the manifest"]);
}

#[test]
fn drops_and_lost_files_in_the_manifest_are_shortfalls() {
    let dir = fresh();
    let mut m = Manifest::read(dir.path()).unwrap();
    m.counts.drops = 650;
    let counters = PipelineCounters {
        dropped_queue_full: 640,
        files_incomplete: 7,
        files_lost: 10,
        ..Default::default()
    };
    m.config = serde_json::json!({ "pipeline": { info(0).dir_name(): counters } });
    m.write(dir.path()).unwrap();
    let found = shortfalls(dir.path());
    assert_eq!(found.len(), 2, "{found:#?}");
    assert!(found[0].contains("dropped or lost 650"), "{found:#?}");
    assert!(found[1].contains("dropped_queue_full 640, files_incomplete 7, files_lost 10"), "{found:#?}");
}

#[test]
fn an_unsealed_stream_is_short_and_says_where_its_records_end() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = StreamWriter::create(dir.path(), info(0), 8 * 1024, Policy::KeepAll).unwrap();
    w.append_op(&OpInfo { name: "a".into(), ..Default::default() }).unwrap();
    let mut m = Manifest::new("test", vec![]);
    m.streams.push(w.summary());
    m.write(dir.path()).unwrap();
    w.abandon();
    one_containing(&shortfalls(dir.path()), &["not sealed", "records end at byte"]);
}

#[test]
fn a_process_that_ran_steps_under_a_dump_of_every_op_but_received_no_chunk_is_short() {
    // Another tool's dump callback registered first takes every chunk: the stream holds step marks only.
    let dir = tempfile::tempdir().unwrap();
    let mut w = StreamWriter::create(dir.path(), info(0), 8 * 1024, Policy::KeepAll).unwrap();
    for step in 1..=2 {
        w.append_step_mark(&StepMark { source: StepSource::Hook, step, ..Default::default() }).unwrap();
    }
    let mut m = Manifest::new("test", vec![]);
    m.streams.push(w.seal().unwrap());
    let with = |counters: serde_json::Value| {
        let mut m = m.clone();
        m.config = serde_json::json!({ "pipeline": { info(0).dir_name(): counters } });
        m.write(dir.path()).unwrap();
        shortfalls(dir.path())
    };
    let found = with(serde_json::json!({ "chunks": 0, "every_op_dumps_set": 3 }));
    one_containing(&found, &["no dump chunk arrived", "2 step mark(s)", "registered first"]);
    // An older collector's counters (no every_op_dumps_set), or an overflow-only or filtered dump, which
    // may rightly deliver nothing: not claimed.
    assert_eq!(with(serde_json::json!({ "chunks": 0 })), Vec::<String>::new());
    assert_eq!(with(serde_json::json!({ "chunks": 0, "every_op_dumps_set": 0 })), Vec::<String>::new());
}

#[test]
fn a_process_whose_callback_slot_another_tool_held_is_short_in_every_dump_mode() {
    // An overflow-only dump of a clean run rightly holds nothing: only the counters say the slot was taken.
    let dir = tempfile::tempdir().unwrap();
    let w = StreamWriter::create(dir.path(), info(0), 8 * 1024, Policy::KeepAll).unwrap();
    let mut m = Manifest::new("test", vec![]);
    m.streams.push(w.seal().unwrap());
    let with = |counters: serde_json::Value| {
        let mut m = m.clone();
        m.config = serde_json::json!({ "pipeline": { info(0).dir_name(): counters } });
        m.write(dir.path()).unwrap();
        shortfalls(dir.path())
    };
    let found = with(serde_json::json!({ "chunks": 0, "other_callback_held_slot": 1 }));
    one_containing(&found, &["held the runtime's only dump callback slot", "Turn the other tool's dump off"]);
    let found = with(serde_json::json!({
        "chunks": 0, "other_callback_held_slot": 1, "other_callbacks_unregistered": 1
    }));
    one_containing(&found, &["held the runtime's only dump callback slot", "unregistered it later"]);
    let found = with(serde_json::json!({ "chunks": 7, "our_callback_removed": 1 }));
    one_containing(&found, &["acldumpUnregCallback removed the collector's dump callback", "1 time(s)"]);
    // Said once, though the every-op dump's check would say it too.
    let found = with(serde_json::json!({
        "chunks": 0, "every_op_dumps_set": 2, "model_executions": 2, "other_callback_held_slot": 1
    }));
    assert_eq!(found.len(), 1, "{found:?}");
    // The other tool's registration after ours was ignored by the runtime: its loss, not ours.
    assert_eq!(
        with(serde_json::json!({ "chunks": 0, "other_callbacks_after_ours": 2 })),
        Vec::<String>::new()
    );
}

#[test]
fn a_process_that_finalized_the_dump_without_synchronizing_the_device_is_short() {
    // Ops launched asynchronously and still running at a step end lose their dumps to aclmdlFinalizeDump:
    // only the counters say the collector could not wait for them.
    let dir = tempfile::tempdir().unwrap();
    let w = StreamWriter::create(dir.path(), info(0), 8 * 1024, Policy::KeepAll).unwrap();
    let mut m = Manifest::new("test", vec![]);
    m.streams.push(w.seal().unwrap());
    let with = |counters: serde_json::Value| {
        let mut m = m.clone();
        m.config = serde_json::json!({ "pipeline": { info(0).dir_name(): counters } });
        m.write(dir.path()).unwrap();
        shortfalls(dir.path())
    };
    let found = with(serde_json::json!({
        "chunks": 7, "finalize_syncs_failed": 3, "finalize_sync_error": 507011
    }));
    one_containing(
        &found,
        &["aclrtSynchronizeDevice failed (3 time(s), last with error code 507011)", "lost their dumps"],
    );
    let found = with(serde_json::json!({ "chunks": 7, "finalize_syncs_unavailable": 4 }));
    one_containing(
        &found,
        &["the runtime has no aclrtSynchronizeDevice", "at 4 step end(s)", "lost their dumps"],
    );
    // Older manifests lack the counters: nothing is said.
    assert_eq!(with(serde_json::json!({ "chunks": 7 })), Vec::<String>::new());
}

#[test]
fn an_eager_process_whose_single_ops_ran_under_a_dump_of_every_op_but_received_no_chunk_is_short() {
    // No step hook, no HCCL: only its successful aclopExecuteV2 calls say that it ran.
    let dir = tempfile::tempdir().unwrap();
    let w = StreamWriter::create(dir.path(), info(0), 8 * 1024, Policy::KeepAll).unwrap();
    let mut m = Manifest::new("test", vec![]);
    m.streams.push(w.seal().unwrap());
    m.config = serde_json::json!({ "pipeline": { info(0).dir_name():
        { "chunks": 0, "every_op_dumps_set": 1, "op_executions": 12 } } });
    m.write(dir.path()).unwrap();
    one_containing(&shortfalls(dir.path()), &["no dump chunk arrived", "12 single op(s)"]);
    // The same process whose finalizes at step ends could not wait for the device: every op may still have
    // been running at each, which explains the empty capture; no other tool is blamed.
    m.config = serde_json::json!({ "pipeline": { info(0).dir_name(): {
        "chunks": 0, "every_op_dumps_set": 1, "op_executions": 12,
        "finalize_syncs_failed": 2, "finalize_sync_error": 500001 } } });
    m.write(dir.path()).unwrap();
    one_containing(
        &shortfalls(dir.path()),
        &["aclrtSynchronizeDevice failed (2 time(s)", "lost their dumps"],
    );
}
