//! The job's resource limits bind the collector too (it lives in the job's process): under each one, the
//! job must run as it would without the collector (same exit status, same printed losses), and whatever
//! the collector could not keep is counted, never silent. `sim-train` runs with `LD_PRELOAD` under a
//! limit set between fork and exec (as `ulimit` does in a shell).

mod common;

use common::*;
use std::os::unix::process::CommandExt;
use std::process::{Command, Output};

/// Runs `cmd` with the soft and hard limit `resource` set to `value` in the child only.
fn with_limit(mut cmd: Command, resource: libc::__rlimit_resource_t, value: u64) -> Output {
    // SAFETY: the closure runs in the forked child before exec and only calls setrlimit (async-signal-safe).
    unsafe {
        cmd.pre_exec(move || {
            let limit = libc::rlimit { rlim_cur: value, rlim_max: value };
            if libc::setrlimit(resource, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd.output().unwrap()
}

fn collector_lines(o: &Output) -> Vec<String> {
    stderr(o).lines().filter(|l| l.starts_with("accutrace:")).map(str::to_string).collect()
}

#[test]
fn a_file_size_limit_below_the_segment_size_shrinks_the_segments() {
    // Tensor mode's 64 MiB segments under `ulimit -f 32768`: the job used to die of SIGXFSZ before step 0.
    let s = Scratch::new("{}");
    let limit = 32 << 20;
    let plain = with_limit(s.command(2, None, false, &[]), libc::RLIMIT_FSIZE, limit);
    assert_ok(&plain);
    let run = s.path("run");
    let e = env(&[("ACCUTRACE_DIR", run.to_str().unwrap()), ("ACCUTRACE_MODE", "tensor")]);
    let out = with_limit(s.command(2, None, true, &e), libc::RLIMIT_FSIZE, limit);
    assert_ok(&out);
    assert_eq!(stdout(&out), stdout(&plain), "training output changed");
    let lines = collector_lines(&out);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains("file size limit"), "{}", lines[0]);
    let m = manifest(&run);
    assert_eq!(m.config["collector"]["segment_size"], limit);
    assert!(m.streams[0].sealed && m.counts.drops == 0 && m.counts.tensors > 0, "{:?}", m.counts);
    for seg in std::fs::read_dir(run.join(&m.streams[0].dir)).unwrap() {
        assert!(seg.unwrap().metadata().unwrap().len() <= limit);
    }
    assert_eq!(captured(&run).len() as u64, m.counts.tensors);
}

#[test]
fn a_record_past_the_file_size_limit_is_a_counted_loss_like_a_full_disk() {
    // The embedding table of a 4096-word vocabulary (random fp16 weights) compresses to more than a 64 KiB
    // segment holds: its record needs a segment of its own, larger than `ulimit -f 64` allows. EFBIG (and
    // the kernel's SIGXFSZ) must not reach the job.
    let s = Scratch::new(r#"{"vocab": 4096, "n_layers": 1}"#);
    let limit = 64 << 10;
    let plain = with_limit(s.command(1, None, false, &[]), libc::RLIMIT_FSIZE, limit);
    assert_ok(&plain);
    let run = s.path("run");
    let e = env(&[
        ("ACCUTRACE_DIR", run.to_str().unwrap()),
        ("ACCUTRACE_MODE", "tensor"),
        ("ACCUTRACE_SEGMENT_SIZE", "64K"),
    ]);
    let out = with_limit(s.command(1, None, true, &e), libc::RLIMIT_FSIZE, limit);
    assert_ok(&out);
    assert_eq!(stdout(&out), stdout(&plain), "training output changed");
    let lines = collector_lines(&out);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains("File too large") && lines[0].contains("disabled"), "{}", lines[0]);
    let m = manifest(&run);
    let p = pipeline(&m);
    assert!(p.files_lost >= 1, "{p:?}");
    assert_eq!(m.counts.drops, p.dropped() + p.files_lost, "the manifest counts every loss");
    assert_eq!(p.chunks, p.chunks_written + p.dropped(), "{p:?}");
    assert_eq!(
        p.files,
        p.files_recorded + p.files_incomplete + p.files_unparsed + p.files_mapping + p.files_lost,
        "{p:?}"
    );
    // What was written before the failure is sealed and reads back whole.
    assert!(m.streams[0].sealed);
    assert_eq!(captured(&run).len() as u64, m.streams[0].counts.tensors);
}

#[test]
fn a_slot_pool_the_memory_limit_refuses_leaves_the_job_alone() {
    // 16 slots of 1 GiB under `ulimit -v` of 2 GiB: the allocation used to abort the process.
    let s = Scratch::new("{}");
    let limit = 2 << 30;
    let plain = with_limit(s.command(2, None, false, &[]), libc::RLIMIT_AS, limit);
    assert_ok(&plain);
    let run = s.path("run");
    let e = env(&[
        ("ACCUTRACE_DIR", run.to_str().unwrap()),
        ("ACCUTRACE_SLOTS", "16"),
        ("ACCUTRACE_SLOT_SIZE", "1G"),
    ]);
    let out = with_limit(s.command(2, None, true, &e), libc::RLIMIT_AS, limit);
    assert_ok(&out);
    assert_eq!(stdout(&out), stdout(&plain), "training output changed");
    let lines = collector_lines(&out);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains("cannot reserve 16 slots") && lines[0].contains("inactive"), "{}", lines[0]);
    assert!(!run.exists(), "an inactive collector creates nothing");
}

#[test]
fn few_file_descriptors_leave_the_job_unchanged() {
    // The job needs a handful of descriptors; the collector keeps 4 (its SIGTERM pipes) and closes every
    // segment's descriptor once mapped. At 8 its manifest cannot always be written: that is logged, and
    // the job is unaffected.
    let s = Scratch::new("{}");
    let plain = with_limit(s.command(2, None, false, &[]), libc::RLIMIT_NOFILE, 8);
    assert_ok(&plain);
    for limit in [8, 16] {
        let run = s.path(&format!("run{limit}"));
        let e = env(&[("ACCUTRACE_DIR", run.to_str().unwrap())]);
        let out = with_limit(s.command(2, None, true, &e), libc::RLIMIT_NOFILE, limit);
        assert_ok(&out);
        assert_eq!(stdout(&out), stdout(&plain), "limit {limit}: training output changed");
        if limit == 16 {
            assert!(collector_lines(&out).is_empty(), "{:?}", collector_lines(&out));
            assert!(manifest(&run).streams[0].sealed);
        }
    }
}

#[test]
fn a_run_directory_that_cannot_be_created_leaves_the_job_alone() {
    // A path under a regular file: no user, root included, can create it (a read-only file system answers
    // the same way, EROFS instead of ENOTDIR).
    let s = Scratch::new("{}");
    let plain = s.run(1, None, false, &[]);
    assert_ok(&plain);
    let run = s.path("model.json/run");
    let out = s.run(1, None, true, &env(&[("ACCUTRACE_DIR", run.to_str().unwrap())]));
    assert_ok(&out);
    assert_eq!(stdout(&out), stdout(&plain));
    let lines = collector_lines(&out);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains("cannot create") && lines[0].contains("inactive"), "{}", lines[0]);
}

#[test]
fn a_run_directory_that_is_a_file_is_named_as_such_and_leaves_the_job_alone() {
    let s = Scratch::new("{}");
    let plain = s.run(1, None, false, &[]);
    assert_ok(&plain);
    let file = s.path("model.json");
    let out = s.run(1, None, true, &env(&[("ACCUTRACE_DIR", file.to_str().unwrap())]));
    assert_ok(&out);
    assert_eq!(stdout(&out), stdout(&plain));
    let lines = collector_lines(&out);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains("a file, not a directory") && lines[0].contains("model.json"), "{}", lines[0]);
    assert!(lines[0].contains("inactive"), "{}", lines[0]);
}

/// Runs `cmd` with at most `threads` processes and threads for its user (RLIMIT_NPROC). Linux does not
/// hold root to that limit, so as root the child drops to the unprivileged `nobody` (65534), which runs
/// nothing else here but other copies of this test, one at a time ([`nobody_to_ourselves`]).
fn with_thread_limit(mut cmd: Command, threads: u64) -> Output {
    // SAFETY: the closure runs in the forked child before exec and only calls setrlimit, geteuid, setgid
    // and setuid (async-signal-safe).
    unsafe {
        cmd.pre_exec(move || {
            let limit = libc::rlimit { rlim_cur: threads, rlim_max: threads };
            if libc::setrlimit(libc::RLIMIT_NPROC, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::geteuid() == 0 && (libc::setgid(65534) != 0 || libc::setuid(65534) != 0) {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd.output().unwrap()
}

/// `sim-train` (steps 1, the scratch model) from copies of the built files inside the scratch directory,
/// which is opened to everyone: the job may run as `nobody`, who cannot reach a private target directory.
fn job_as_anyone(s: &Scratch, preload: bool, e: &[(&str, String)]) -> Command {
    use std::os::unix::fs::PermissionsExt;
    let bin = s.path("bin");
    let a = artifacts();
    if !bin.is_dir() {
        std::fs::create_dir(&bin).unwrap();
        for file in [&a.sim_train, &a.runtime, &a.collector] {
            std::fs::copy(file, bin.join(file.file_name().unwrap())).unwrap();
        }
        for dir in [s.path(""), bin.clone()] {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        }
    }
    let name = |p: &std::path::Path| bin.join(p.file_name().unwrap());
    let mut cmd = Command::new(name(&a.sim_train));
    cmd.arg("--model").arg(s.path("model.json")).args(["--steps", "1"]);
    cmd.env("SIM_ACL_LIB", name(&a.runtime)).env_remove("LD_PRELOAD").current_dir(s.path(""));
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("ACCUTRACE_")) {
        cmd.env_remove(k);
    }
    if preload {
        cmd.env("LD_PRELOAD", name(&a.collector));
    }
    cmd.envs(e.iter().map(|(k, v)| (k, v)));
    cmd
}

/// Holds, until dropped, the machine-wide lock on running jobs as `nobody`. RLIMIT_NPROC counts every thread
/// of the user on the machine, so a copy of this test running at the same time (another checkout's test
/// run) takes threads from this one's limit: with two copies at once 7 runs in 20 failed (fork refused, a
/// job refused a thread, the collector's line missing); one at a time, none of 20 did.
fn nobody_to_ourselves() -> std::fs::File {
    let path = std::env::temp_dir().join("accutrace-tests-run-as-nobody.lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("cannot open the lock file {}: {e}", path.display()));
    file.lock().unwrap_or_else(|e| panic!("cannot lock {}: {e}", path.display()));
    file
}

#[test]
fn too_few_threads_leave_the_job_unchanged() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        // Without root the limit would count every process of this user on the machine (other builds):
        // no number would mean "what the job needs", so this test needs to run the job as another user.
        eprintln!("too_few_threads_leave_the_job_unchanged: not root, cannot run the job as nobody; not run");
        return;
    }
    let _alone = nobody_to_ourselves();
    let s = Scratch::new("{}");
    // The fewest threads the job itself needs: at that limit the collector has none to spare.
    let need = (1..=32)
        .find(|&n| with_thread_limit(job_as_anyone(&s, false, &[]), n).status.success())
        .expect("sim-train runs with 32 threads");
    let plain = with_thread_limit(job_as_anyone(&s, false, &[]), need);
    for limit in [need, need + 1, need + 16] {
        let run = s.path(&format!("run{limit}"));
        let e = env(&[("ACCUTRACE_DIR", run.to_str().unwrap())]);
        let out = with_thread_limit(job_as_anyone(&s, true, &e), limit);
        assert_ok(&out);
        assert_eq!(stdout(&out), stdout(&plain), "limit {limit} (job alone needs {need}): training changed");
        let lines = collector_lines(&out);
        if limit < need + 16 {
            // No room for the collector's threads beside the job's: it stays out, and says so.
            assert_eq!(lines.len(), 1, "{lines:?}");
            assert!(lines[0].contains("ulimit -u") && lines[0].contains("inactive"), "{}", lines[0]);
            assert!(!run.exists(), "an inactive collector creates nothing");
        } else {
            assert!(lines.is_empty(), "{lines:?}");
            assert!(manifest(&run).streams[0].sealed, "limit {limit}: captured and sealed");
        }
    }
}
