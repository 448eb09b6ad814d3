//! A forwarding compatibility library between the job and the runtime (tests/sim-acl-compat): its
//! `aclInit`, `aclFinalize`, `aclmdlExecute`, `acldumpRegCallback`, settings and single-op launches find
//! their target through the global scope, which leads back to the collector's exports. The collector
//! forwards such a re-entered call past the wrapper, its own part running once, and the job runs as without
//! it (it recursed until the stack overflowed and killed the job).

mod common;

use accutrace_formats::dump::parse_dump;
use common::*;

#[test]
fn a_forwarding_compat_library_neither_recurses_nor_changes_the_job_and_the_capture_is_whole() {
    let s = Scratch::new(r#"{"n_layers": 1}"#);
    let a = artifacts();
    let acl = s.disk_config("disk", "");
    // Without the collector the wrapper forwards to the runtime itself (the job as the user runs it).
    let compat_only = env(&[("LD_PRELOAD", a.acl_compat.to_str().unwrap())]);
    let base = s.run(3, Some(&acl), false, &compat_only);
    assert_ok(&base);
    let disk = disk_dump(&s.path("disk"));
    assert!(disk.len() > 50, "the disk dump has {} files", disk.len());

    let run = s.path("run");
    // The collector first, then the wrapper, then (dlopen'ed by sim-train) the runtime. Another tool's dump
    // callback, registered through the global scope after ours, passes through the wrapper too.
    let preload = format!("{}:{}", a.collector.display(), a.acl_compat.display());
    let collector = env(&[
        ("LD_PRELOAD", &preload),
        ("ACCUTRACE_DIR", run.to_str().unwrap()),
        ("ACCUTRACE_MODE", "tensor"),
        ("SIM_ACL_COMPAT_TRACE", "1"),
        ("SIM_ACL_OTHER_DUMP_CALLBACK", "after"),
    ]);
    let out = s.run(3, None, true, &collector);
    assert_ok(&out);
    assert_eq!(stdout(&out), stdout(&base), "training output changed");
    let err = stderr(&out);
    // The wrapper was on both paths, once each: the collector's part ran once, the re-entered call only
    // forwarded past the wrapper.
    assert_eq!(err.matches("acl-compat: aclInit forwarded").count(), 1, "{err}");
    assert_eq!(err.matches("acl-compat: acldumpRegCallback forwarded").count(), 1, "{err}");
    assert_eq!(err.matches("acl-compat: aclFinalize forwarded").count(), 1, "{err}");
    let launches = err.matches("acl-compat: aclmdlExecute forwarded").count() as u64;
    assert!(launches > 0, "{err}");
    assert!(err.contains("another tool registered a dump callback 1 time(s)"), "{err}");

    let caps = captured(&run);
    let disk_tensors: usize =
        disk.values().map(|b| parse_dump(b).map(|f| f.inputs.len() + f.outputs.len()).unwrap()).sum();
    assert_eq!(caps.len(), disk_tensors, "every tensor on disk is captured once");
    for c in &caps {
        assert!(disk.contains_key(&(c.step, c.dump_file.clone())), "{} not on disk", c.dump_file);
    }
    let m = manifest(&run);
    let p = pipeline(&m);
    assert_eq!((p.dropped(), p.files_incomplete, p.files_unparsed), (0, 0, 0));
    assert_eq!((p.other_callback_held_slot, p.other_callbacks_after_ours), (0, 1));
    assert_eq!(p.model_executions, launches, "each launch counted once");
    assert!(m.finished_unix_us.is_some() && m.streams.iter().all(|s| s.sealed));
}

/// The same wrapper in front of the single-op launches: each eager launch (aclopExecuteV2, torch_npu's
/// aclopCompileAndExecute(V2), aclopExecute, aclopExecWithHandle) goes through the wrapper once, runs, and is counted once in `op_executions`.
#[test]
fn a_forwarding_compat_library_in_front_of_the_single_op_launches_is_passed_and_each_launch_counted_once() {
    let s = Scratch::new(r#"{"n_layers": 1}"#);
    let a = artifacts();
    let base = s.run_with(2, None, false, &[], &["--eager"]);
    assert_ok(&base);
    let preload = format!("{}:{}", a.collector.display(), a.acl_compat.display());
    for (launch, name) in [
        ("execute-v2", "aclopExecuteV2"),
        ("compile-and-execute", "aclopCompileAndExecute"),
        ("compile-and-execute-v2", "aclopCompileAndExecuteV2"),
        ("execute", "aclopExecute"),
        ("exec-with-handle", "aclopExecWithHandle"),
    ] {
        let run = s.path(&format!("run-{launch}"));
        let collector = env(&[
            ("LD_PRELOAD", &preload),
            ("ACCUTRACE_DIR", run.to_str().unwrap()),
            ("SIM_ACL_COMPAT_TRACE", "1"),
        ]);
        let out = s.run_with(2, None, true, &collector, &["--eager", "--eager-launch", launch]);
        assert_ok(&out);
        assert_eq!(stdout(&out), stdout(&base), "{launch}: training output changed");
        let err = stderr(&out);
        let launches = err.matches(&format!("acl-compat: {name} forwarded\n")).count() as u64;
        assert!(launches > 50, "{launch}: {launches} launches through the wrapper: {err}");
        assert_eq!(pipeline(&manifest(&run)).op_executions, launches, "{launch}: each launch counted once");
    }
}

/// The same wrapper in front of the settings the collector interposes (`aclrtCtxSetSysParamOpt`,
/// `aclrtSetDeviceSatMode`): each call goes through the wrapper once and the job runs as without the
/// collector, which records both settings (the collector called the wrapper, the wrapper it, until the stack
/// overflowed and killed the job).
#[test]
fn a_forwarding_compat_library_in_front_of_the_settings_is_passed_once_and_the_settings_recorded() {
    let s = Scratch::new(r#"{"n_layers": 1}"#);
    let a = artifacts();
    let args = ["--deterministic", "--overflow-mode", "infnan"];
    let compat_only = env(&[("LD_PRELOAD", a.acl_compat.to_str().unwrap())]);
    let base = s.run_with(2, None, false, &compat_only, &args);
    assert_ok(&base);
    let run = s.path("run");
    let preload = format!("{}:{}", a.collector.display(), a.acl_compat.display());
    let collector = env(&[
        ("LD_PRELOAD", &preload),
        ("ACCUTRACE_DIR", run.to_str().unwrap()),
        ("SIM_ACL_COMPAT_TRACE", "1"),
    ]);
    let out = s.run_with(2, None, true, &collector, &args);
    assert_ok(&out);
    assert_eq!(stdout(&out), stdout(&base), "training output changed");
    let err = stderr(&out);
    assert_eq!(err.matches("acl-compat: aclrtCtxSetSysParamOpt forwarded\n").count(), 1, "{err}");
    assert_eq!(err.matches("acl-compat: aclrtSetDeviceSatMode forwarded\n").count(), 1, "{err}");
    let m = manifest(&run);
    assert_eq!(m.environment.settings.deterministic, Some(1), "{err}");
    assert_eq!(m.environment.settings.overflow_mode.as_deref(), Some("inf_nan"), "{err}");
}
