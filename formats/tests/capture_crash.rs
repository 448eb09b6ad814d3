//! Capture format crash recovery: a writer that dies mid-record (simulated by truncating, zeroing or
//! garbling the last record at every byte position, and for real with SIGKILL) leaves every earlier record
//! intact and a torn tail that the reader reports instead of mistaking it for data.

use accutrace_formats::capture::*;
use accutrace_formats::stats::{content_hash, TensorStats};
use accutrace_formats::DType;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

fn info() -> StreamInfo {
    StreamInfo { stream_id: 0, rank: Some(0), device: 0, pid: 1, host: String::new() }
}

fn op(step: u64) -> OpInfo {
    OpInfo {
        name: format!("net/layer{}/add", step % 4),
        op_type: "Add".into(),
        step,
        task_id: step as u32,
        dump_file: format!("Add.add.{step}.1.99"),
        ..Default::default()
    }
}

/// Deterministic tensor bytes of a step: the reader can check them without the writer.
fn data(step: u64) -> Vec<u8> {
    (0..200 + (step % 50) * 8).map(|i| ((i / 3) as u8).wrapping_add(step as u8)).collect()
}

fn meta() -> TensorMeta {
    TensorMeta {
        io: Io::Output,
        index: 0,
        dtype: DType::UINT8,
        format: 2,
        sub_format: 0,
        device_shape: vec![1],
        original_shape: None,
        original_op: None,
    }
}

fn write_step(w: &mut StreamWriter, step: u64) -> Appended {
    w.append_op(&op(step)).unwrap();
    let d = data(step);
    let s = TensorStats::of_bytes(DType::UINT8, &d).unwrap();
    w.append_tensor(&meta(), &s, content_hash(&d), Some(&d), 1).unwrap()
}

/// Reads a stream, checking every tensor against `data(step)`; returns the steps with their tensor.
fn complete_steps(stream: &StreamReader) -> Vec<u64> {
    let mut steps = Vec::new();
    let mut buf = Vec::new();
    for r in stream.records() {
        if let Record::Tensor(t) = r.unwrap().record {
            t.read_data(&mut buf).unwrap();
            assert_eq!(buf, data(t.op.step), "tensor of step {} intact", t.op.step);
            steps.push(t.op.step);
        }
    }
    steps
}

fn segment(dir: &Path) -> PathBuf {
    dir.join(info().dir_name()).join("seg-000000.acc")
}

#[test]
fn torn_last_record_at_every_byte_position() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = StreamWriter::create(dir.path(), info(), 16 * 1024, Policy::KeepAll).unwrap();
    for step in 0..5 {
        write_step(&mut w, step);
    }
    let Appended::Written { offset: last, bytes, .. } = write_step(&mut w, 5) else { panic!() };
    // Killed before sealing: the segment stays open.
    w.abandon();
    let path = segment(dir.path());
    let pristine = std::fs::read(&path).unwrap();
    let stream_dir = path.parent().unwrap().to_path_buf();

    let intact = StreamReader::open(&stream_dir).unwrap();
    assert_eq!(complete_steps(&intact), vec![0, 1, 2, 3, 4, 5]);
    let tail = intact.torn_tail().expect("an unsealed stream reports where it ends");
    assert_eq!(tail.offset, last + bytes, "after the last complete record");

    let end = (last + bytes) as usize;
    let mut checked = 0;
    for p in last as usize..end {
        for variant in ["truncate", "zero", "garble"] {
            let mut bytes = pristine.clone();
            match variant {
                "truncate" => bytes.truncate(p),
                "zero" => bytes[p..end].fill(0),
                _ => bytes[p..end].iter_mut().enumerate().for_each(|(i, b)| *b ^= 0xA5 ^ i as u8),
            }
            std::fs::write(&path, &bytes).unwrap();
            let stream = StreamReader::open(&stream_dir).unwrap_or_else(|e| panic!("{variant} at {p}: {e}"));
            let tail = stream.torn_tail().unwrap_or_else(|| panic!("{variant} at {p}: no torn tail"));
            assert_eq!(tail.segment, path);
            // Either the last tensor record is gone (torn at its frame), or only its data bytes (outside
            // the frame CRC) were hit and decoding it fails its content hash.
            let mut steps = Vec::new();
            let mut data_error = false;
            let mut buf = Vec::new();
            for r in stream.records() {
                if let Record::Tensor(t) = r.unwrap().record {
                    match t.read_data(&mut buf) {
                        Ok(()) => {
                            assert_eq!(buf, data(t.op.step));
                            steps.push(t.op.step);
                        }
                        Err(e) => {
                            assert_eq!(t.op.step, 5, "{variant} at {p}: {e}");
                            assert!(e.problem.contains("hash") || e.problem.contains("zstd"), "{e}");
                            data_error = true;
                        }
                    }
                }
            }
            assert_eq!(&steps[..5], &[0, 1, 2, 3, 4], "{variant} at {p}");
            if steps.len() == 5 && !data_error {
                assert_eq!(tail.offset, last, "{variant} at {p}: torn at the last frame");
            }
            checked += 1;
        }
    }
    assert!(checked > 300);
}

#[test]
fn corruption_before_committed_records_is_an_error_not_a_tail() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = StreamWriter::create(dir.path(), info(), 16 * 1024, Policy::KeepAll).unwrap();
    let mut offsets = Vec::new();
    for step in 0..6 {
        w.append_op(&op(step)).unwrap();
        if let Appended::Written { offset, .. } = write_step(&mut w, 100 + step) {
            offsets.push(offset);
        }
    }
    w.abandon();
    let path = segment(dir.path());
    let mut bytes = std::fs::read(&path).unwrap();
    // The head of the third tensor record (kind byte) of an unsealed segment: valid records follow it.
    bytes[offsets[2] as usize + 8] ^= 0xFF;
    std::fs::write(&path, &bytes).unwrap();
    let err = StreamReader::open(path.parent().unwrap()).err().expect("corruption must not pass for a tail");
    assert_eq!(err.path.as_deref(), Some(path.as_path()));
    assert_eq!(err.offset, Some(offsets[2]));
}

#[test]
fn a_torn_segment_creation_is_an_empty_tail() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = StreamWriter::create(dir.path(), info(), 8192, Policy::KeepAll).unwrap();
    for step in 0..40 {
        write_step(&mut w, step);
    }
    w.abandon();
    let stream_dir = dir.path().join(info().dir_name());
    let mut segs: Vec<_> = std::fs::read_dir(&stream_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "acc"))
        .collect();
    segs.sort();
    // A roll seals the full segment first (as the writer does), then creates the next one; the writer dies
    // after creating the next segment's file but before its header was written (or while zero-filling it).
    let end = StreamReader::open(&stream_dir).unwrap().torn_tail().unwrap().offset;
    let last = segs.last().unwrap();
    let mut bytes = std::fs::read(last).unwrap();
    bytes[56..64].copy_from_slice(&end.to_le_bytes());
    std::fs::write(last, &bytes).unwrap();
    let next = stream_dir.join(format!("seg-{:06}.acc", segs.len()));
    std::fs::write(&next, vec![0u8; 3000]).unwrap();
    let stream = StreamReader::open(&stream_dir).unwrap();
    let tail = stream.torn_tail().unwrap();
    assert_eq!((tail.segment.as_path(), tail.offset), (next.as_path(), 0));
    assert_eq!(complete_steps(&stream), (0..40).collect::<Vec<_>>());
}

/// The next segment is prepared ahead under `PREPARED_SEGMENT_FILE`: readers ignore it (also a leftover
/// from a crash, here with garbage in it), a new writer replaces it, rolls (also of a record larger than a
/// segment, and under the ring policy) keep indices contiguous, and a sealed stream leaves no such file.
#[test]
fn the_prepared_next_segment_is_ignored_by_readers_and_removed_at_the_end() {
    use accutrace_formats::capture::writer::PREPARED_SEGMENT_FILE;
    let dir = tempfile::tempdir().unwrap();
    let stream_dir = dir.path().join(info().dir_name());
    let mut w = StreamWriter::create(dir.path(), info(), 8192, Policy::KeepAll).unwrap();
    for step in 0..40 {
        write_step(&mut w, step);
    }
    w.abandon();
    let tmp = stream_dir.join(PREPARED_SEGMENT_FILE);
    // A killed writer may leave its prepared segment (if it had started one), possibly half-prepared.
    std::fs::write(&tmp, b"garbage, not a segment").unwrap();
    let stream = StreamReader::open(&stream_dir).unwrap();
    assert!(stream.torn_tail().is_some());
    assert_eq!(complete_steps(&stream), (0..40).collect::<Vec<_>>());

    // A new writer of the stream (fresh run directory content) cleans it up.
    let dir = tempfile::tempdir().unwrap();
    let stream_dir = dir.path().join(info().dir_name());
    std::fs::create_dir_all(&stream_dir).unwrap();
    std::fs::write(stream_dir.join(PREPARED_SEGMENT_FILE), vec![7u8; 100]).unwrap();
    let policy = Policy::Ring { max_bytes: 40_000 };
    let mut w = StreamWriter::create(dir.path(), info(), 8192, policy).unwrap();
    for step in 0..200 {
        if step == 100 {
            // Larger than a segment: a segment of its own, the prepared one waits for the next roll.
            w.append_op(&op(step)).unwrap();
            let mut x = 0x9e37_79b9_7f4a_7c15u64;
            let d: Vec<u8> = (0..20_000)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            let s = TensorStats::of_bytes(DType::UINT8, &d).unwrap();
            w.append_tensor(&meta(), &s, content_hash(&d), Some(&d), 1).unwrap();
        } else {
            write_step(&mut w, step);
        }
    }
    let summary = w.seal().unwrap();
    assert!(!stream_dir.join(PREPARED_SEGMENT_FILE).exists(), "sealed: no prepared segment left");
    assert!(summary.counts.segments_deleted > 0);
    let names: Vec<String> = std::fs::read_dir(&stream_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n != "stream.json")
        .collect();
    assert!(names.iter().all(|n| parse_segment_file_name(n).is_some()), "{names:?}");
    let stream = StreamReader::open(&stream_dir).unwrap();
    assert!(stream.torn_tail().is_none());
    let kept = complete_steps(&stream);
    assert_eq!(kept, (kept[0]..200).collect::<Vec<_>>());
    assert!(kept[0] > 100);
    // Every segment but the big one has the configured size.
    let big = names.iter().filter(|n| std::fs::metadata(stream_dir.join(n)).unwrap().len() != 8192).count();
    assert!(big <= 1);
}

const CHILD_ENV: &str = "ACCUTRACE_CAPTURE_SIGKILL_CHILD_DIR";

/// The child half of `sigkill_mid_write_keeps_every_complete_record`: writes until killed. A no-op when
/// run as an ordinary test.
#[test]
fn sigkill_child() {
    let Some(dir) = std::env::var_os(CHILD_ENV) else { return };
    let mut w = StreamWriter::create(Path::new(&dir), info(), 64 * 1024, Policy::KeepAll).unwrap();
    for step in 0.. {
        write_step(&mut w, step);
    }
}

#[test]
fn sigkill_mid_write_keeps_every_complete_record() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "sigkill_child", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, dir.path())
        .spawn()
        .unwrap();
    let stream_dir = dir.path().join(info().dir_name());
    // Let it fill a few segments, then kill it wherever it is (std's kill is SIGKILL on Unix).
    let start = Instant::now();
    while !stream_dir.join("seg-000004.acc").exists() {
        assert!(start.elapsed() < Duration::from_secs(120), "child made no progress");
        assert!(child.try_wait().unwrap().is_none(), "child exited on its own");
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap();
    let status = child.wait().unwrap();
    assert!(!status.success());

    let stream = StreamReader::open(&stream_dir).unwrap();
    // A killed writer leaves an unsealed tail, except when the kill fell inside a roll: after the full
    // segment was sealed and before the next one was published. Then the last segment is sealed, and only
    // the manifest (never written by a killed writer) tells the stream was not (`capture::completeness`).
    if stream.torn_tail().is_none() {
        let last = stream.segment_paths().last().unwrap();
        let sealed = segment::sealed_end(&std::fs::read(last).unwrap()) != 0;
        assert!(sealed, "no torn tail, yet the last segment {} is not sealed", last.display());
    }
    let steps = complete_steps(&stream);
    assert!(steps.len() > 100, "only {} steps", steps.len());
    assert_eq!(steps, (0..steps.len() as u64).collect::<Vec<_>>(), "every complete record, in order");
}

#[test]
fn a_reader_of_a_live_stream_survives_the_seal_cutting_the_last_segment() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = StreamWriter::create(dir.path(), info(), 1 << 20, Policy::KeepAll).unwrap();
    for step in 0..5 {
        write_step(&mut w, step);
    }
    let path = segment(dir.path());
    let full = std::fs::metadata(&path).unwrap().len();
    // An analyzer opens the capture while the job still writes it...
    let live = StreamReader::open(&dir.path().join(info().dir_name())).unwrap();
    assert_eq!(complete_steps(&live), (0..5).collect::<Vec<_>>());
    // ...and the job ends meanwhile. Cutting the segment at its sealed end now would make the reader's
    // pages past it fault (SIGBUS kills this test process): the seal must leave the mapped file whole.
    w.seal().unwrap();
    assert!(live.sum_of_mapped_bytes() > 0);
    assert_eq!(std::fs::metadata(&path).unwrap().len(), full, "not cut while a reader maps it");
    assert_eq!(complete_steps(&live), (0..5).collect::<Vec<_>>());
    drop(live);
    // Opened after the seal: sealed, whole, the same records (the full-length file costs only disk).
    let after = StreamReader::open(&dir.path().join(info().dir_name())).unwrap();
    assert!(after.torn_tail().is_none());
    assert_eq!(complete_steps(&after), (0..5).collect::<Vec<_>>());
}

/// A sealed segment cut short after it was closed (an unfinished copy) is an error that says so and what to
/// do, not a torn tail; a sealed end beyond the segment's own size is a damaged header.
#[test]
fn a_sealed_segment_cut_short_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = StreamWriter::create(dir.path(), info(), 16 * 1024, Policy::KeepAll).unwrap();
    for step in 0..6 {
        write_step(&mut w, step);
    }
    w.seal().unwrap();
    let path = segment(dir.path());
    let intact = std::fs::read(&path).unwrap();
    std::fs::write(&path, &intact[..intact.len() / 2]).unwrap();
    let err =
        StreamReader::open(path.parent().unwrap()).err().expect("a cut file is not a capture").to_string();
    assert!(err.contains("cut short") && err.contains("copy the capture again"), "{err}");

    let mut bytes = intact;
    bytes[56..64].copy_from_slice(&(1u64 << 40).to_le_bytes());
    std::fs::write(&path, &bytes).unwrap();
    let err = StreamReader::open(path.parent().unwrap()).err().expect("a damaged header").to_string();
    assert!(err.contains("the header is damaged"), "{err}");
}

/// Zeros or garbage inside a sealed segment (a damaged disk or copy) is an error that names the file and
/// offset, says the bytes changed after the collector closed the file, and what to do.
#[test]
fn a_zeroed_or_garbled_range_in_a_sealed_segment_says_what_happened() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = StreamWriter::create(dir.path(), info(), 16 * 1024, Policy::KeepAll).unwrap();
    let mut offsets = Vec::new();
    for step in 0..6 {
        if let Appended::Written { offset, .. } = write_step(&mut w, step) {
            offsets.push(offset);
        }
    }
    w.seal().unwrap();
    let path = segment(dir.path());
    let intact = std::fs::read(&path).unwrap();
    let read_all = || -> String {
        let stream = StreamReader::open(path.parent().unwrap()).unwrap();
        let err = stream.records().find_map(|r| r.err()).expect("damage inside a sealed segment is an error");
        assert_eq!(err.path.as_deref(), Some(path.as_path()));
        err.to_string()
    };
    // Zeros from the third tensor record on: the records after it are lost.
    let mut zeroed = intact.clone();
    zeroed[offsets[2] as usize..offsets[4] as usize].fill(0);
    std::fs::write(&path, &zeroed).unwrap();
    let err = read_all();
    assert!(err.contains("no record here") && err.contains("zeroed or overwritten"), "{err}");
    assert!(err.contains("copy the capture again"), "{err}");
    // Garbage in a frame's head: its checksum fails.
    let mut garbled = intact;
    garbled[offsets[2] as usize + 8] ^= 0xFF;
    std::fs::write(&path, &garbled).unwrap();
    let err = read_all();
    assert!(err.contains("copy the capture again"), "{err}");
}

/// A segment before the last one left empty or all zeros (a copy that created the file but wrote nothing)
/// is an error that says so and what to do, not "records follow".
#[test]
fn an_empty_or_zeroed_segment_before_the_last_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = StreamWriter::create(dir.path(), info(), 4096, Policy::KeepAll).unwrap();
    for step in 0..40 {
        write_step(&mut w, step);
    }
    w.seal().unwrap();
    let path = segment(dir.path());
    assert!(path.with_file_name("seg-000001.acc").is_file(), "the stream needs a second segment");
    let len = std::fs::metadata(&path).unwrap().len() as usize;
    for (bytes, said) in [(Vec::new(), "the file is empty"), (vec![0u8; len], "holds only zeros")] {
        std::fs::write(&path, &bytes).unwrap();
        let err = StreamReader::open(path.parent().unwrap()).err().expect("a lost segment is an error");
        assert_eq!(err.path.as_deref(), Some(path.as_path()));
        let err = err.to_string();
        assert!(err.contains(said) && err.contains("copy the capture again"), "{err}");
    }
}
