//! End to end: `sim-train` on the simulated runtime, with `LD_PRELOAD=libcollector.so`.
//! The artifacts are built by `common::artifacts()` (cargo build into this test's target directory).

mod common;

use accutrace_formats::capture::{CaptureRun, Policy, Record};
use accutrace_formats::dump::parse_dump;
use accutrace_formats::stats::content_hash;
use common::*;
use std::collections::BTreeSet;
use std::os::unix::process::ExitStatusExt;
use std::time::Duration;

/// Dump files of the tiny default model are a few hundred bytes to a few KiB: these sizes make files span
/// many chunks that interleave, and chunks span several slots.
const SMALL_CHUNKS: &[(&str, &str)] = &[("SIM_ACL_CHUNK_SIZE", "20000"), ("ACCUTRACE_SLOT_SIZE", "8K")];

fn collector_env<'a>(
    run: &'a std::path::Path,
    extra: &[(&'static str, &'a str)],
) -> Vec<(&'static str, String)> {
    let mut v = env(&[("ACCUTRACE_DIR", run.to_str().unwrap())]);
    v.extend(env(extra));
    v
}

fn tensors_in(bytes: &[u8]) -> usize {
    let f = parse_dump(bytes).unwrap();
    f.inputs.len() + f.outputs.len()
}

#[test]
fn tensor_capture_equals_the_disk_dump_bit_for_bit() {
    let s = Scratch::new(r#"{"n_layers": 1}"#);
    let acl = s.disk_config("disk", "");
    let base = s.run(3, Some(&acl), false, &[]);
    assert_ok(&base);
    let disk = disk_dump(&s.path("disk"));
    assert!(disk.len() > 50, "the disk dump has {} files", disk.len());

    let run = s.path("run");
    let mut extra = vec![("ACCUTRACE_MODE", "tensor"), ("ACCUTRACE_SLOTS", "4"), ("ACCUTRACE_WRITERS", "2")];
    extra.extend_from_slice(SMALL_CHUNKS);
    extra.push(("ACCUTRACE_SEGMENT_SIZE", "256K"));
    let out = s.run(3, None, true, &collector_env(&run, &extra));
    assert_ok(&out);
    assert_eq!(stdout(&out), stdout(&base), "training output changed");
    assert_eq!(stderr(&out), "", "the collector logged something");

    let caps = captured(&run);
    for c in &caps {
        let bytes = disk.get(&(c.step, c.dump_file.clone())).unwrap_or_else(|| panic!("{c:?} not on disk"));
        let f = parse_dump(bytes).unwrap();
        assert_eq!(c.op_name, f.header.op_name);
        let t = if c.input { &f.inputs[c.index as usize] } else { &f.outputs[c.index as usize] };
        assert_eq!(c.data.as_deref(), Some(t.bytes), "{} {}", c.dump_file, c.index);
        assert_eq!(c.hash, content_hash(t.bytes));
        assert_eq!((c.dtype, &c.device_shape), (t.dtype.code(), &t.device_shape));
    }
    let disk_tensors: usize = disk.values().map(|b| tensors_in(b)).sum();
    assert_eq!(caps.len(), disk_tensors, "every tensor on disk is captured once");
    let steps: BTreeSet<u64> = caps.iter().map(|c| c.step).collect();
    assert_eq!(steps, BTreeSet::from([0, 1, 2]));

    let m = manifest(&run);
    let p = pipeline(&m);
    assert_eq!((p.chunks, p.dropped()), (p.chunks_written, 0));
    assert!(p.chunks_split > 0, "chunks larger than a slot were split");
    assert!(p.writer_cpu_ns > 0, "the writers' CPU time is recorded: {p:?}");
    assert_eq!((p.files as usize, p.files_incomplete, p.files_unparsed), (disk.len(), 0, 0));
    assert_eq!(m.counts.tensors as usize, disk_tensors);
    assert!(m.finished_unix_us.is_some() && m.streams.iter().all(|s| s.sealed));
    assert_eq!(m.overflow_mode.as_deref(), Some("inf_nan"));
    assert!(m.command.iter().any(|a| a.ends_with("sim-train")), "{:?}", m.command);
    // With the callback registered nothing is written at dump_path (the run directory) but our files.
    let names: BTreeSet<String> =
        std::fs::read_dir(&run).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    assert_eq!(names.len(), 3, "{names:?}");
    assert!(
        names.contains("manifest.json") && names.iter().any(|n| n.starts_with("stream-000-rank0-dev0-pid"))
    );
}

#[test]
fn stats_mode_keeps_hashes_and_statistics_only_and_training_is_unchanged() {
    let s = Scratch::new("{}");
    let acl = s.disk_config("disk", "");
    let base = s.run(2, Some(&acl), false, &[]);
    assert_ok(&base);
    let disk = disk_dump(&s.path("disk"));
    let plain = s.run(2, None, false, &[]);
    assert_ok(&plain);

    let run = s.path("run");
    let out = s.run(2, None, true, &collector_env(&run, &[]));
    assert_ok(&out);
    assert_eq!(stdout(&out), stdout(&plain), "training output changed");
    let caps = captured(&run);
    assert_eq!(caps.len(), disk.values().map(|b| tensors_in(b)).sum::<usize>());
    for c in &caps {
        assert!(c.data.is_none() && c.histogram.is_none());
        let f = parse_dump(&disk[&(c.step, c.dump_file.clone())]).unwrap();
        let t = if c.input { &f.inputs[c.index as usize] } else { &f.outputs[c.index as usize] };
        assert_eq!(c.hash, content_hash(t.bytes));
        let want = accutrace_formats::stats::TensorStats::of_bytes(t.dtype, t.bytes).unwrap();
        assert_eq!(format!("{:?}", c.stats), format!("{want:?}"));
    }

    // With histograms: the same statistics, and each tensor's histogram of its dumped bytes.
    let run = s.path("hist");
    let out = s.run(2, None, true, &collector_env(&run, &[("ACCUTRACE_HISTOGRAM", "1")]));
    assert_ok(&out);
    assert_eq!(stdout(&out), stdout(&plain), "training output changed");
    let with = captured(&run);
    assert_eq!(with.len(), caps.len());
    for (c, plain) in with.iter().zip(&caps) {
        let f = parse_dump(&disk[&(c.step, c.dump_file.clone())]).unwrap();
        let t = if c.input { &f.inputs[c.index as usize] } else { &f.outputs[c.index as usize] };
        let (stats, hist) =
            accutrace_formats::stats::TensorStats::of_bytes_with_histogram(t.dtype, t.bytes).unwrap();
        assert_eq!(format!("{:?}", c.stats), format!("{:?}", plain.stats));
        assert_eq!(format!("{:?}", c.stats), format!("{stats:?}"));
        assert_eq!(c.histogram.as_ref(), Some(&hist), "{} {}", c.op_name, c.index);
    }

    // Files in many small chunks of an odd size (cuts inside the length field, the header and elements)
    // are streamed, never put back together: every record as from whole files, with and without histograms.
    let key = |c: &Captured| (c.step, c.dump_file.clone(), c.input, c.index);
    let show = |c: &Captured| {
        format!("{} {:?} {} {:?} {:?}", c.op_name, c.device_shape, c.hash, c.stats, c.histogram)
    };
    for (dir, reference, extra) in [
        ("chunked", &caps, vec![("SIM_ACL_CHUNK_SIZE", "333")]),
        ("chunked-hist", &with, vec![("SIM_ACL_CHUNK_SIZE", "333"), ("ACCUTRACE_HISTOGRAM", "1")]),
    ] {
        let run = s.path(dir);
        let out = s.run(2, None, true, &collector_env(&run, &extra));
        assert_ok(&out);
        assert_eq!(stdout(&out), stdout(&plain), "training output changed");
        let got: std::collections::BTreeMap<_, _> =
            captured(&run).iter().map(|c| (key(c), show(c))).collect();
        let want: std::collections::BTreeMap<_, _> = reference.iter().map(|c| (key(c), show(c))).collect();
        assert_eq!(got.len(), reference.len(), "{dir}: one record per tensor");
        assert_eq!(got, want, "{dir}");
    }
}

#[test]
fn inert_without_dir_and_one_line_for_a_bad_value() {
    let s = Scratch::new("{}");
    let plain = s.run(2, None, false, &[]);
    assert_ok(&plain);
    let inert = s.run(2, None, true, &[]);
    assert_ok(&inert);
    assert_eq!((stdout(&inert), stderr(&inert)), (stdout(&plain), String::new()));

    let run = s.path("run");
    let bad = s.run(2, None, true, &collector_env(&run, &[("ACCUTRACE_POLICY", "ring:lots")]));
    assert_ok(&bad);
    assert_eq!(stdout(&bad), stdout(&plain));
    let err = stderr(&bad);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("accutrace: ACCUTRACE_POLICY=\"ring:lots\""), "{err}");
    assert!(!run.exists(), "an inactive collector creates nothing");
}

#[test]
fn a_run_directory_too_long_for_cann_s_dump_path_is_named_with_the_limit() {
    let s = Scratch::new("{}");
    let plain = s.run(2, None, false, &[]);
    // CANN refuses a dump_path over 512 bytes with ACL_ERROR_INVALID_DUMP_CONFIG alone.
    let run = s.path(&["d".repeat(200), "e".repeat(200), "f".repeat(200)].join("/"));
    let out = s.run(2, None, true, &collector_env(&run, &[]));
    assert_ok(&out);
    assert_eq!(stdout(&out), stdout(&plain), "training output changed");
    let err = stderr(&out);
    let ours: Vec<&str> = err.lines().filter(|l| l.starts_with("accutrace:")).collect();
    assert_eq!(ours.len(), 1, "{err}");
    assert!(ours[0].contains("takes at most 512") && ours[0].contains("ACCUTRACE_DIR"), "{err}");
}

#[test]
fn forced_panics_leave_training_running_and_unchanged() {
    let s = Scratch::new("{}");
    let plain = s.run(3, None, false, &[]);
    assert_ok(&plain);
    for point in ["init", "callback", "writer"] {
        let run = s.path(&format!("run-{point}"));
        let out = s.run(3, None, true, &collector_env(&run, &[("ACCUTRACE_TEST_PANIC", point)]));
        assert_ok(&out);
        assert_eq!(stdout(&out), stdout(&plain), "{point}: training output changed");
        let err = stderr(&out);
        let ours: Vec<&str> = err.lines().filter(|l| l.starts_with("accutrace:")).collect();
        assert_eq!(ours.len(), 1, "{point}: {}", stderr(&out));
        assert!(ours[0].contains("panicked"), "{point}: {}", ours[0]);
        if point != "init" {
            // What was written before the failure is sealed and readable.
            let m = manifest(&run);
            assert!(m.streams[0].sealed, "{point}");
            let p = pipeline(&m);
            assert_eq!(p.chunks, p.chunks_written + p.dropped(), "{point}: {p:?}");
            captured(&run);
        }
    }
}

#[test]
fn drops_under_a_slow_writer_are_counted_exactly() {
    let s = Scratch::new("{}");
    let run = s.path("run");
    let mut extra = vec![
        ("ACCUTRACE_QUEUE_FULL", "drop"),
        ("ACCUTRACE_SLOTS", "2"),
        ("ACCUTRACE_TEST_SLOW_WRITER_MS", "2"),
        ("ACCUTRACE_MODE", "tensor"),
    ];
    extra.extend_from_slice(SMALL_CHUNKS);
    extra.push(("SIM_ACL_CHUNK_SIZE", "3000"));
    let out = s.run(2, None, true, &collector_env(&run, &extra));
    assert_ok(&out);
    let m = manifest(&run);
    let p = pipeline(&m);
    assert!(p.dropped_queue_full > 0, "the slow writer made the queue overflow: {p:?}");
    assert_eq!(p.chunks, p.chunks_written + p.dropped(), "{p:?}");
    assert!(p.files_incomplete > 0);
    assert_eq!(
        p.files,
        p.files_recorded + p.files_incomplete + p.files_unparsed + p.files_mapping + p.files_lost,
        "{p:?}"
    );
    assert_eq!(m.counts.drops, p.dropped());
    // Whatever was recorded is whole: every tensor's data matches its hash (read_data checks it).
    let caps = captured(&run);
    assert!(caps.iter().all(|c| c.data.is_some()));
}

#[test]
fn block_policy_loses_nothing_under_a_slow_writer() {
    let s = Scratch::new("{}");
    let run = s.path("run");
    let mut extra = vec![("ACCUTRACE_SLOTS", "2"), ("ACCUTRACE_TEST_SLOW_WRITER_MS", "1")];
    extra.extend_from_slice(SMALL_CHUNKS);
    extra.push(("SIM_ACL_CHUNK_SIZE", "3000"));
    let out = s.run(1, None, true, &collector_env(&run, &extra));
    assert_ok(&out);
    let p = pipeline(&manifest(&run));
    assert!(p.block_waits > 0, "{p:?}");
    assert_eq!((p.dropped(), p.chunks), (0, p.chunks_written));
    assert_eq!((p.files_incomplete, p.files), (0, p.files_recorded + p.files_mapping));
}

fn segment_bytes(stream_dir: &std::path::Path) -> u64 {
    std::fs::read_dir(stream_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "acc"))
        .map(|p| p.metadata().unwrap().len())
        .sum()
}

#[test]
fn ring_policy_keeps_the_newest_bytes_within_its_size() {
    let s = Scratch::new("{}");
    let run = s.path("run");
    let extra =
        [("ACCUTRACE_MODE", "tensor"), ("ACCUTRACE_POLICY", "ring:512K"), ("ACCUTRACE_SEGMENT_SIZE", "128K")];
    let out = s.run(6, None, true, &collector_env(&run, &extra));
    assert_ok(&out);
    let m = manifest(&run);
    let st = &m.streams[0];
    assert_eq!(st.policy, Policy::Ring { max_bytes: 512 << 10 });
    assert!(st.counts.segments_deleted > 0, "the run wrote more than the ring holds: {:?}", st.counts);
    assert!(segment_bytes(&run.join(&st.dir)) <= 512 << 10);
    let caps = captured(&run);
    assert_eq!(caps.iter().map(|c| c.step).max(), Some(5), "the newest step is kept");
    assert!(caps.iter().map(|c| c.step).min() > Some(0), "the oldest step is gone");
}

#[test]
fn trigger_policy_freezes_at_the_first_overflow_and_keeps_k_more_steps() {
    let model = r#"{"faults": {"overflow": {"op": "model/layer_0/mlp/fc1/MatMul", "step": 3}}}"#;
    let s = Scratch::new(model);
    let run = s.path("run");
    let extra = [("ACCUTRACE_POLICY", "trigger:128K:1"), ("ACCUTRACE_SEGMENT_SIZE", "64K")];
    let out = s.run(8, None, true, &collector_env(&run, &extra));
    assert_ok(&out);
    let m = manifest(&run);
    assert_eq!(m.streams[0].triggered_at_step, Some(3));
    let caps = captured(&run);
    let steps: BTreeSet<u64> = caps.iter().map(|c| c.step).collect();
    assert!(steps.contains(&3) && steps.contains(&4), "{steps:?}");
    assert_eq!(steps.iter().max(), Some(&4), "nothing after the K kept steps");
    let first = caps.iter().find(|c| c.stats.has_nonfinite() || c.stats.at_saturation > 0).unwrap();
    assert_eq!(first.step, 3);
    assert!(pipeline(&m).refused_after_stop > 0);
}

#[test]
fn overflow_mode_records_op_debug_payloads() {
    let model = r#"{"faults": {"overflow": {"op": "model/layer_0/mlp/fc1/MatMul", "step": 1}}}"#;
    let s = Scratch::new(model);
    let run = s.path("run");
    let out = s.run(3, None, true, &collector_env(&run, &[("ACCUTRACE_OVERFLOW", "1")]));
    assert_ok(&out);
    let run_r = CaptureRun::open(&run).unwrap();
    let mut overflow = Vec::new();
    for r in run_r.streams[0].records() {
        if let Record::Overflow(o) = r.unwrap().record {
            overflow.push(o);
        }
    }
    assert!(!overflow.is_empty());
    for o in &overflow {
        assert_eq!(o.step, 1);
        let rec = accutrace_formats::dump::decode_opdebug(&o.payload).unwrap();
        assert!(rec.engines.iter().any(|e| e.overflowed()), "{rec:?}");
    }
}

#[test]
fn respect_framework_dump_keeps_its_selection_and_captures_instead_of_writing() {
    let s = Scratch::new("{}");
    let acl = s.disk_config("disk", r#", "dump_step": "1""#);
    let run = s.path("run");
    let out = s.run(3, Some(&acl), true, &collector_env(&run, &[("ACCUTRACE_RESPECT_FRAMEWORK_DUMP", "1")]));
    assert_ok(&out);
    assert!(disk_dump(&s.path("disk")).is_empty(), "the callback replaces the disk dump");
    let steps: BTreeSet<u64> = captured(&run).iter().map(|c| c.step).collect();
    assert_eq!(steps, BTreeSet::from([1]), "the framework's dump_step is kept");
}

#[test]
fn collector_options_select_steps_ops_and_io() {
    let s = Scratch::new("{}");
    let run = s.path("run");
    let op = "model/layer_0/mlp/fc1/MatMul";
    let extra = [("ACCUTRACE_STEPS", "0|2"), ("ACCUTRACE_OPS", op), ("ACCUTRACE_IO", "output")];
    let out = s.run(3, None, true, &collector_env(&run, &extra));
    assert_ok(&out);
    let caps = captured(&run);
    assert_eq!(caps.iter().map(|c| c.step).collect::<BTreeSet<_>>(), BTreeSet::from([0, 2]));
    assert!(caps.iter().all(|c| c.op_name == op && !c.input), "{caps:?}");
}

#[test]
fn two_ranks_share_one_run_directory() {
    let s = Scratch::new("{}");
    let run = s.path("run");
    let children: Vec<_> = ["0", "1"]
        .iter()
        .map(|rank| {
            let mut e = collector_env(&run, &[]);
            e.extend(env(&[("RANK_ID", rank), ("ASCEND_DEVICE_ID", rank)]));
            s.command(2, None, true, &e).stdout(std::process::Stdio::null()).spawn().unwrap()
        })
        .collect();
    for mut c in children {
        assert!(c.wait().unwrap().success());
    }
    let m = manifest(&run);
    assert_eq!(m.streams.len(), 2);
    let ids: BTreeSet<u32> = m.streams.iter().map(|s| s.info.stream_id).collect();
    assert_eq!(ids, BTreeSet::from([0, 1]));
    let ranks: BTreeSet<Option<u32>> = m.streams.iter().map(|s| s.info.rank).collect();
    assert_eq!(ranks, BTreeSet::from([Some(0), Some(1)]));
    assert!(m.streams.iter().all(|s| s.sealed && s.info.device == s.info.rank.unwrap() as i32));
    assert!(m.finished_unix_us.is_some());
    assert_eq!(m.counts.tensors, m.streams.iter().map(|s| s.counts.tensors).sum::<u64>());
}

/// Starts a long capture and waits until records are being committed.
fn long_running(s: &Scratch, run: &std::path::Path) -> std::process::Child {
    let extra =
        [("ACCUTRACE_MODE", "tensor"), ("ACCUTRACE_TEST_SLOW_WRITER_MS", "3"), ("ACCUTRACE_SLOTS", "4")];
    let child = s
        .command(100_000, None, true, &collector_env(run, &extra))
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Wait (without a time limit that could fail the test) until the first segment holds records.
    loop {
        let seg = std::fs::read_dir(run).ok().and_then(|d| {
            d.flatten().map(|e| e.path()).find(|p| p.is_dir()).map(|p| p.join("seg-000000.acc"))
        });
        if let Some(seg) = seg {
            if let Ok(run_r) = CaptureRun::open(run) {
                if run_r.streams.first().is_some_and(|st| st.records().take(20).count() == 20) {
                    let _ = seg;
                    break;
                }
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child
}

#[test]
fn sigkill_leaves_every_committed_record_readable() {
    let s = Scratch::new("{}");
    let run = s.path("run");
    let mut child = long_running(&s, &run);
    std::thread::sleep(Duration::from_millis(300));
    child.kill().unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.signal(), Some(libc::SIGKILL));
    let run_r = CaptureRun::open(&run).unwrap();
    let st = &run_r.streams[0];
    let torn = st.torn_tail().expect("an unsealed stream reports where its records end");
    assert!(torn.segment.starts_with(st.dir()));
    let records: Vec<_> = st.records().collect::<Result<_, _>>().unwrap();
    assert!(records.len() >= 20);
    // Every committed tensor decodes and matches its hash.
    let caps = captured(&run);
    assert!(!caps.is_empty() && caps.iter().all(|c| c.data.is_some()));
    // The periodic manifest exists and says the run did not finish.
    let m = manifest(&run);
    assert!(m.finished_unix_us.is_none());
}

#[test]
fn sigterm_seals_the_capture_then_terminates_as_before() {
    let s = Scratch::new("{}");
    let run = s.path("run");
    let mut child = long_running(&s, &run);
    // SAFETY: signalling our own child process.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().unwrap();
    assert_eq!(status.signal(), Some(libc::SIGTERM), "the default action still happens");
    let m = manifest(&run);
    assert!(m.streams[0].sealed && m.finished_unix_us.is_some());
    let run_r = CaptureRun::open(&run).unwrap();
    assert!(run_r.streams[0].torn_tail().is_none());
    let p = pipeline(&m);
    // A chunk the runtime was handing over at the signal may be counted as received only.
    assert!(p.chunks - (p.chunks_written + p.dropped()) <= 1, "{p:?}");
    captured(&run);
}
