//! Eager mode end to end: `sim-train --eager` launches every op with aclopExecuteV2 (or, `--eager-launch`,
//! aclopCompileAndExecute(V2), aclopExecute or aclopExecWithHandle), the simulated runtime
//! dumps them in the single-operator layout, and the collector captures them, reached through
//! `dlsym(handle, name)` (`--resolve handle`, as torch_npu resolves) as well as through the global scope.

mod common;

use accutrace_formats::capture::{CaptureRun, Record, StepSource};
use accutrace_formats::dump::{parse_dump, parse_file_name, FftsForm};
use accutrace_formats::stats::content_hash;
use collector::config::{from_sources, Activation};
use common::*;
use std::collections::{BTreeMap, BTreeSet};

/// Two layers, the fused MLP kernel (an FFTS+ task), fp16 with a loss scale.
const MODEL: &str = r#"{"n_layers": 2, "fusion": true}"#;

/// Every file under `root`, by file name (single-op names are unique: they carry the dump number).
fn files_by_name(root: &std::path::Path) -> BTreeMap<String, Vec<u8>> {
    disk_dump(root).into_iter().map(|((_, name), bytes)| (name, bytes)).collect()
}

#[test]
fn eager_capture_through_dlsym_equals_the_on_disk_eager_dump_bit_for_bit() {
    let s = Scratch::new(MODEL);
    let acl = s.disk_config("disk", "");
    let base = s.run_with(3, Some(&acl), false, &[], &["--eager"]);
    assert_ok(&base);
    let disk = files_by_name(&s.path("disk"));
    assert!(disk.len() > 200, "the disk dump has {} files", disk.len());
    // The single-op layout on disk: {dump_path}/{time}/{device}/{file}, six-field names, FFTS+ sub-tasks.
    let names: Vec<_> = disk.keys().filter_map(|n| parse_file_name(n).ok()).collect();
    assert_eq!(names.len(), disk.len(), "every file name parses");
    assert!(names.iter().all(|n| n.dump_number.is_some()));
    let ffts: Vec<_> = names.iter().filter_map(|n| n.ffts).collect();
    assert!(!ffts.is_empty() && ffts.iter().all(|f| f.form == FftsForm::FftsPlus && f.context_id > 0));

    let run = s.path("run");
    let env = env(&[
        ("ACCUTRACE_DIR", run.to_str().unwrap()),
        ("ACCUTRACE_MODE", "tensor"),
        ("ACCUTRACE_SLOTS", "4"),
        ("ACCUTRACE_WRITERS", "2"),
        ("SIM_ACL_CHUNK_SIZE", "3000"),
        ("ACCUTRACE_SLOT_SIZE", "8K"),
    ]);
    let out = s.run_with(3, None, true, &env, &["--eager", "--resolve", "handle"]);
    assert_ok(&out);
    assert_eq!(stdout(&out), stdout(&base), "training output changed");
    assert_eq!(stderr(&out), "", "the collector logged something");

    let caps = captured(&run);
    let mut seen = BTreeSet::new();
    for c in &caps {
        let bytes = disk.get(&c.dump_file).unwrap_or_else(|| panic!("{} not on disk", c.dump_file));
        seen.insert(c.dump_file.clone());
        let f = parse_dump(bytes).unwrap();
        assert_eq!(c.op_name, f.header.op_name);
        let t = if c.input { &f.inputs[c.index as usize] } else { &f.outputs[c.index as usize] };
        assert_eq!(c.data.as_deref(), Some(t.bytes), "{} {}", c.dump_file, c.index);
        assert_eq!(c.hash, content_hash(t.bytes));
    }
    assert_eq!(seen.len(), disk.len(), "every file on disk is captured");
    let tensors: usize =
        disk.values().map(|b| parse_dump(b).map(|f| f.inputs.len() + f.outputs.len()).unwrap()).sum();
    assert_eq!(caps.len(), tensors);

    // Steps: the per-step dump path set at each accutrace_step_end() (sim-train calls it after each step).
    let capture = CaptureRun::open(&run).unwrap();
    let mut ops = Vec::new();
    let mut hook_marks = 0;
    for r in capture.streams[0].records() {
        match r.unwrap().record {
            Record::Op(o) => ops.push(o),
            Record::StepMark(m) => hook_marks += usize::from(m.source == StepSource::Hook),
            _ => {}
        }
    }
    assert_eq!(hook_marks, 3);
    ops.sort_by_key(|o| o.dump_number);
    let steps: Vec<u64> = ops.iter().map(|o| o.step).collect();
    assert!(steps.windows(2).all(|w| w[0] <= w[1]), "steps follow execution order");
    assert_eq!(steps.iter().collect::<BTreeSet<_>>().len(), 3);
    for (i, o) in ops.iter().enumerate() {
        if i == 0 || ops[i - 1].step != o.step {
            assert_eq!(o.op_type, "GatherV2", "step {} starts with the embedding", o.step);
        }
        assert!(o.step_source == StepSource::Hook || (o.step == 0 && o.step_source == StepSource::None));
    }
    let m = manifest(&run);
    assert_eq!(m.streams[0].counts.step_marks, 3);
    assert!(!run.join(".dump").exists(), "the per-step dump paths are removed at the end");
}

/// torch_npu's OpCommand launches through aclopCompileAndExecuteV2 (resolved with `dlsym` on a handle) or
/// aclopCompileAndExecute; a job may also launch by handle (aclopExecWithHandle) or through the deprecated
/// aclopExecute: the runtime dumps those ops as aclopExecuteV2's, the collector captures every file, and
/// each launch is counted once in `op_executions`.
#[test]
fn ops_launched_by_the_other_single_op_launches_are_captured_whole_and_counted() {
    let s = Scratch::new(r#"{"n_layers": 1}"#);
    let acl = s.disk_config("disk", "");
    let base = s.run_with(2, Some(&acl), false, &[], &["--eager"]);
    assert_ok(&base);
    let disk = files_by_name(&s.path("disk"));
    // One op-level file per launch (an FFTS+ task's sub-task files come on top).
    let launches = disk.keys().filter(|n| parse_file_name(n).is_ok_and(|n| n.ffts.is_none())).count() as u64;
    assert!(launches > 50, "{launches} launches");
    for (launch, resolve) in [
        ("compile-and-execute-v2", "handle"),
        ("compile-and-execute", "global"),
        ("exec-with-handle", "handle"),
        ("execute", "global"),
    ] {
        let run = s.path(&format!("run-{launch}"));
        let env = env(&[("ACCUTRACE_DIR", run.to_str().unwrap()), ("ACCUTRACE_MODE", "tensor")]);
        let out =
            s.run_with(2, None, true, &env, &["--eager", "--eager-launch", launch, "--resolve", resolve]);
        assert_ok(&out);
        assert_eq!(stdout(&out), stdout(&base), "{launch}: training output changed");
        let caps = captured(&run);
        let files: BTreeSet<&str> = caps.iter().map(|c| c.dump_file.as_str()).collect();
        assert_eq!(files, disk.keys().map(String::as_str).collect(), "{launch}: every file on disk, once");
        assert_eq!(pipeline(&manifest(&run)).op_executions, launches, "{launch}: each launch counted once");
    }
}

#[test]
fn steps_selected_with_the_hook_are_dumped_through_msprobes_skip_step() {
    let s = Scratch::new(r#"{"n_layers": 1}"#);
    let run = s.path("run");
    let env = env(&[("ACCUTRACE_DIR", run.to_str().unwrap()), ("ACCUTRACE_STEPS", "1|3")]);
    let out = s.run_with(5, None, true, &env, &["--eager"]);
    assert_ok(&out);
    let steps: BTreeSet<u64> = captured(&run).iter().map(|c| c.step).collect();
    assert_eq!(steps, BTreeSet::from([1, 3]));
}

#[test]
fn the_generated_dump_config_dumps_in_both_modes_and_the_old_one_dumps_nothing() {
    let s = Scratch::new(r#"{"n_layers": 1}"#);
    for (i, extra) in [
        vec![],
        vec![("ACCUTRACE_MODE", "device-stats")],
        vec![("ACCUTRACE_DUMP_LEVEL", "kernel"), ("ACCUTRACE_IO", "output")],
        vec![("ACCUTRACE_OVERFLOW", "1")],
    ]
    .into_iter()
    .enumerate()
    {
        let dump = s.path(&format!("gen{i}"));
        std::fs::create_dir_all(&dump).unwrap();
        let mut pairs = vec![("ACCUTRACE_DIR".to_string(), dump.to_str().unwrap().to_string())];
        pairs.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        let Activation::Active(cfg) = from_sources(&pairs, None).unwrap() else { panic!("inert") };
        let acl = s.path(&format!("gen{i}.json"));
        std::fs::write(&acl, cfg.dump_json().to_string()).unwrap();
        for args in [&[][..], &["--eager"][..]] {
            let out = s.run_with(1, Some(&acl), false, &[], args);
            assert_ok(&out);
            let files = disk_dump(&dump).len();
            if cfg.overflow {
                // Only overflowing ops are dumped: none here, but the runtime took the configuration.
                assert_eq!(files, 0, "{extra:?}");
            } else {
                assert!(files > 0, "{extra:?} {args:?}: nothing dumped");
            }
            std::fs::remove_dir_all(&dump).unwrap();
            std::fs::create_dir_all(&dump).unwrap();
        }
    }
    // The collector's old configuration: valid, but CANN's NeedDump sets no dump for it.
    let dump = s.path("old");
    std::fs::create_dir_all(&dump).unwrap();
    let old = s.path("old.json");
    let json = format!(
        r#"{{"dump": {{"dump_path": "{}", "dump_mode": "all", "dump_list": [], "dump_data": "tensor", "dump_debug": "off"}}}}"#,
        dump.display()
    );
    std::fs::write(&old, json).unwrap();
    for args in [&[][..], &["--eager"][..]] {
        let out = s.run_with(1, Some(&old), false, &[], args);
        assert_ok(&out);
        assert_eq!(disk_dump(&dump).len(), 0, "{args:?}: the old config dumped something");
        assert!(stderr(&out).contains("No dump config need to be set"), "{}", stderr(&out));
    }
}

/// Every op record of a capture: (step, op name), in recording order.
fn op_steps(run: &std::path::Path) -> Vec<(u64, String)> {
    let capture = CaptureRun::open(run).unwrap();
    let mut ops = Vec::new();
    for r in capture.streams[0].records() {
        if let Record::Op(o) = r.unwrap().record {
            ops.push((o.step, o.name.clone()));
        }
    }
    ops
}

#[test]
fn ops_still_running_on_an_asynchronous_device_at_each_step_end_are_captured_in_their_step() {
    // torch_npu launches asynchronously: when the step hook re-sets the dump, the step's last ops are still
    // queued on the device, and aclmdlFinalizeDump drops the dumps the device has not handed over yet (the
    // simulated runtime with SIM_ACL_ASYNC_DEPTH runs 16 launches behind the host, as adump loses them).
    let s = Scratch::new(r#"{"n_layers": 1}"#);
    let base = s.run_with(3, None, false, &[], &["--eager"]);
    assert_ok(&base);
    let record = |name: &str, extra: &[(&'static str, &str)]| {
        let run = s.path(name);
        let mut pairs = vec![("ACCUTRACE_DIR", run.to_str().unwrap())];
        pairs.extend_from_slice(extra);
        let out = s.run_with(3, None, true, &env(&pairs), &["--eager"]);
        assert_ok(&out);
        // The observer effect: the job's results are bit-identical with and without the collector.
        assert_eq!(stdout(&out), stdout(&base), "training output changed ({name})");
        assert_eq!(stderr(&out), "", "the collector logged something ({name})");
        run
    };
    let sync_run = record("sync", &[]);
    let async_run = record("async", &[("SIM_ACL_ASYNC_DEPTH", "16")]);
    let (sync_ops, async_ops) = (op_steps(&sync_run), op_steps(&async_run));
    let launched = pipeline(&manifest(&async_run)).op_executions;
    assert_eq!(sync_ops.len() as u64, launched, "a synchronous device: every launch is captured");
    let missing: Vec<_> = sync_ops.iter().filter(|o| !async_ops.contains(o)).collect();
    assert!(missing.is_empty(), "{} of {launched} ops lost at step ends: {missing:?}", missing.len());
    assert_eq!(async_ops.len(), sync_ops.len());
    let steps: BTreeSet<u64> = async_ops.iter().map(|(step, _)| *step).collect();
    assert_eq!(steps, BTreeSet::from([0, 1, 2]));
}

#[test]
fn a_failed_device_synchronization_before_a_step_s_finalize_leaves_the_capture_short_saying_why() {
    // The device cannot be waited for: the step ends' in-flight ops are lost, and the capture says so.
    let s = Scratch::new(r#"{"n_layers": 1}"#);
    let run = s.path("run");
    let pairs = [
        ("ACCUTRACE_DIR", run.to_str().unwrap()),
        ("SIM_ACL_ASYNC_DEPTH", "16"),
        ("SIM_ACL_SYNC_DEVICE", "fail"),
    ];
    let out = s.run_with(2, None, true, &env(&pairs), &["--eager"]);
    assert_ok(&out);
    assert!(stderr(&out).contains("aclrtSynchronizeDevice failed (2 time(s)"), "{}", stderr(&out));
    let counters = pipeline(&manifest(&run));
    // The two step ends (the end of capture's is not counted: the device may be reset by then).
    assert_eq!((counters.finalize_syncs_failed, counters.finalize_sync_error), (2, 500001));
    // The loss itself: the runtime's finalize dropped the dumps of the ops the device had not run.
    let ops = op_steps(&run).len() as u64;
    assert!(ops < counters.op_executions, "{ops} ops captured of {} launched", counters.op_executions);
    let capture = CaptureRun::open(&run).unwrap();
    let tallies: Vec<_> = capture
        .streams
        .iter()
        .map(accutrace_formats::capture::completeness::RecordTally::of_stream)
        .collect();
    let short = accutrace_formats::capture::completeness::check(&capture, &tallies);
    assert_eq!(short.len(), 1, "{short:?}");
    assert!(short[0].problem.contains("lost their dumps"), "{short:?}");
}

#[test]
fn an_asynchronous_device_dumps_the_same_files_as_a_synchronous_one_once_synchronized() {
    // The simulated runtime's asynchronous mode delays the dumps, never changes them: without a finalize in
    // between (the job's own dump configuration, no collector), its disk dump is the synchronous one's.
    let s = Scratch::new(r#"{"n_layers": 1}"#);
    let (sync_cfg, async_cfg) = (s.disk_config("sync", ""), s.disk_config("async", ""));
    let sync_out = s.run_with(2, Some(&sync_cfg), false, &[], &["--eager"]);
    let async_env = env(&[("SIM_ACL_ASYNC_DEPTH", "16")]);
    let async_out = s.run_with(2, Some(&async_cfg), false, &async_env, &["--eager"]);
    assert_ok(&sync_out);
    assert_ok(&async_out);
    assert_eq!(stdout(&async_out), stdout(&sync_out), "training output changed");
    let (sync_files, async_files) = (files_by_name(&s.path("sync")), files_by_name(&s.path("async")));
    assert!(sync_files.len() > 100, "{} files", sync_files.len());
    assert_eq!(async_files.keys().collect::<Vec<_>>(), sync_files.keys().collect::<Vec<_>>());
    assert!(async_files == sync_files, "the same files, different bytes");
}
