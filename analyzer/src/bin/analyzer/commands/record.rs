//! `analyzer record -o DIR [options] -- COMMAND...`: runs COMMAND with `libcollector.so` preloaded and
//! configured through its environment variables (docs/COLLECTOR.md), then says what was captured.
//!
//! Exit status: the command's own (128 + N when a signal N killed it), like `time` or `perf record`, so a
//! wrapper script keeps working; 2 when the options are wrong or the command cannot be started. A command
//! that succeeds but leaves no capture behind (the collector never activated) is an error (2).

use crate::cli::{Format, RecordArgs, RecordDumpLevel, RecordMode};
use accutrace_formats::capture::Policy;
use accutrace_formats::steps::StepSet;
use analyzer::outcome::Outcome;
use analyzer::progress::Stages;
use analyzer::report;
use analyzer::report::record::CaptureSummary;
use anyhow::{bail, Context, Result};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

pub const COLLECTOR_FILE: &str = "libcollector.so";

/// One change to the child's environment: set a variable, or remove an inherited one so that a stale
/// setting in the user's shell cannot override the command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EnvChange {
    Set(&'static str, OsString),
    Remove(&'static str),
}

pub fn run(args: RecordArgs) -> Result<Outcome> {
    let collector = find_collector(args.collector.as_deref(), std::env::current_exe().ok().as_deref())?;
    let env_for = |dir: &Path| collector_env(&args, dir, &collector, std::env::var_os("LD_PRELOAD"));
    let (program, rest) = args.command.split_first().context("no command to run after `--`")?;
    // Everything that can be checked is checked before the run directory is made.
    check_runnable(program)?;
    env_for(Path::new("/"))?;
    let (dir, created) = prepare_output(&args.output)?;
    let mut child = std::process::Command::new(program);
    child.args(rest);
    for change in &env_for(&dir)? {
        match change {
            EnvChange::Set(k, v) => child.env(k, v),
            EnvChange::Remove(k) => child.env_remove(k),
        };
    }
    let hook = match args.no_python_hook {
        false => Some(PythonHook::install(&dir)?),
        true => None,
    };
    if let Some(hook) = &hook {
        child.env("PYTHONPATH", hook.python_path(std::env::var_os("PYTHONPATH")));
    }
    if args.format != Format::Table {
        // Standard output is the summary's, for a machine to read: the command's own goes to stderr.
        child.stdout(std::io::stderr());
    }
    eprintln!("recording into {} with {}", dir.display(), collector.display());
    let status = child.status();
    drop(hook);
    let status = match status {
        Ok(status) => status,
        Err(e) => {
            remove_if_empty(&created);
            bail!("cannot run {program:?}: {e}");
        }
    };
    let code = exit_code(&status);
    // Indexing a large capture takes a while: say so on a terminal.
    Stages::new("record", 1, args.no_progress).start("reading what was captured");
    let summary = CaptureSummary::read(&dir);
    if matches!(summary, Ok(None)) {
        // Nothing was captured: the run directory stays as empty as it was made.
        remove_if_empty(&created);
    }
    match (code, summary) {
        (0, Ok(Some(summary))) => {
            report::reader_may_leave(report::record::write(&summary, args.format.into(), args.overflow))?;
            Ok(Outcome::Pass)
        }
        // The collector made its stream's directory, then stopped before writing anything readable (its
        // first segment could not be written: a full disk, a quota): it did activate, its log line says why.
        (0, Ok(None)) if holds_stream_dir(&dir) => bail!(
            "{}: nothing was captured (no manifest.json, no stream.json): the collector started but stopped \
             before writing anything; its log line on stderr (`accutrace: ...`) names the file and the error \
             (e.g. no space left on device); fix that, remove {} and record again",
            dir.display(),
            dir.display()
        ),
        (0, Ok(None)) => bail!(
            "{}: nothing was captured (no manifest.json, no streams): the collector did not activate; check \
             that the command loads libascendcl.so and enables dumping, and see the collector's log line on stderr",
            dir.display()
        ),
        (0, Err(e)) => Err(e),
        (code, summary) => {
            match summary {
                Ok(Some(summary)) => {
                    eprintln!("{program}: {}; the capture below may be partial", describe(&status));
                    let written = report::record::write(&summary, args.format.into(), args.overflow);
                    if let Err(e) = report::reader_may_leave(written) {
                        eprintln!("error: {e:#}");
                    }
                }
                // The command itself failed: that is the news, not the collector.
                Ok(None) => eprintln!("error: {program} {} before anything was captured", describe(&status)),
                Err(e) => {
                    eprintln!("{program}: {}", describe(&status));
                    eprintln!("error: {e:#}");
                }
            }
            // The child's status is the answer: main only knows 0, 1 and 2.
            std::process::exit(code)
        }
    }
}

/// Whether `dir` holds a collector stream's directory (`stream-*`), complete or not.
fn holds_stream_dir(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|entries| {
        entries.flatten().any(|e| e.file_name().to_string_lossy().starts_with("stream-") && e.path().is_dir())
    })
}

/// Fails unless `program` names an executable file, as `execvp` looks it up: a name with a slash as given,
/// else in `PATH`. Checked before spawning so that a command that cannot start is the same error (2)
/// everywhere: under qemu-user (the aarch64 tests) a failed exec surfaces as the child exiting 127 instead,
/// because qemu runs posix_spawn's vfork as a fork and the exec error never reaches the parent.
fn check_runnable(program: &str) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let executable =
        |p: &Path| p.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
    let found = if program.contains('/') {
        executable(Path::new(program))
    } else {
        let path = std::env::var_os("PATH").unwrap_or_default();
        std::env::split_paths(&path).any(|dir| executable(&dir.join(program)))
    };
    if !found {
        bail!("cannot run {program:?}: no executable file of that name (as given, or in PATH)");
    }
    Ok(())
}

/// `--collector`, else `libcollector.so` beside the analyzer executable (where `cargo build` puts both).
pub fn find_collector(given: Option<&Path>, exe: Option<&Path>) -> Result<PathBuf> {
    if let Some(path) = given {
        if !path.is_file() {
            bail!("--collector {}: no such file", path.display());
        }
        return std::path::absolute(path).with_context(|| format!("cannot resolve {}", path.display()));
    }
    let beside = exe.and_then(Path::parent).map(|d| d.join(COLLECTOR_FILE));
    match beside {
        Some(path) if path.is_file() => Ok(path),
        _ => bail!(
            "{COLLECTOR_FILE} not found next to the analyzer ({}); build it with \
             `cargo build --release -p accutrace-collector` (it lands beside target/release/analyzer) \
             or pass --collector PATH",
            beside
                .as_deref()
                .and_then(Path::parent)
                .map_or_else(|| "unknown".into(), |d| d.display().to_string())
        ),
    }
}

/// Creates the run directory; refuses one that already holds files, so two runs never mix. Returns its
/// absolute path and the directories this call created, outermost first.
fn prepare_output(dir: &Path) -> Result<(PathBuf, Vec<PathBuf>)> {
    // Absolute, because the command may change its working directory before the collector starts.
    let dir = std::path::absolute(dir).with_context(|| format!("cannot resolve {}", dir.display()))?;
    if dir.exists() && !dir.is_dir() {
        bail!(
            "{}: a file, not a directory; record into a new directory (a capture run owns its directory)",
            dir.display()
        );
    }
    let created: Vec<PathBuf> = dir.ancestors().take_while(|d| !d.exists()).map(Path::to_path_buf).collect();
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut entries = std::fs::read_dir(&dir).with_context(|| format!("cannot list {}", dir.display()))?;
    if entries.next().is_some() {
        bail!("{}: not empty; record into a new directory (a capture run owns its directory)", dir.display());
    }
    Ok((dir, created.into_iter().rev().collect()))
}

/// Removes the directories `prepare_output` created, innermost first, as long as they are empty.
fn remove_if_empty(created: &[PathBuf]) {
    for dir in created.iter().rev() {
        if std::fs::remove_dir(dir).is_err() {
            return;
        }
    }
}

/// The environment the collector reads (names from docs/COLLECTOR.md), validated.
pub fn collector_env(
    args: &RecordArgs,
    dir: &Path,
    collector: &Path,
    inherited_preload: Option<OsString>,
) -> Result<Vec<EnvChange>> {
    let mode = match args.mode {
        RecordMode::Stats => "stats",
        RecordMode::Tensor => "tensor",
        RecordMode::DeviceStats => "device-stats",
    };
    // The collector's range: negative levels are zstd's faster-than-1 modes.
    if !(-7..=22).contains(&args.zstd_level) {
        bail!("--zstd-level {}: zstd levels run from -7 (fastest) to 22 (smallest)", args.zstd_level);
    }
    let mut env = vec![
        EnvChange::Set("LD_PRELOAD", ld_preload(collector, inherited_preload)?),
        EnvChange::Set("ACCUTRACE_DIR", dir.as_os_str().to_owned()),
        EnvChange::Set("ACCUTRACE_MODE", mode.into()),
        EnvChange::Set("ACCUTRACE_POLICY", parse_policy(&args.policy)?.into()),
        EnvChange::Set("ACCUTRACE_ZSTD_LEVEL", args.zstd_level.to_string().into()),
    ];
    env.push(match &args.steps {
        Some(steps) => EnvChange::Set("ACCUTRACE_STEPS", parse_steps(steps)?.into()),
        None => EnvChange::Remove("ACCUTRACE_STEPS"),
    });
    env.push(match args.ops.is_empty() {
        false => EnvChange::Set("ACCUTRACE_OPS", args.ops.join(",").into()),
        true => EnvChange::Remove("ACCUTRACE_OPS"),
    });
    env.push(EnvChange::Set("ACCUTRACE_IO", args.io.as_str().into()));
    env.push(match args.overflow {
        true => EnvChange::Set("ACCUTRACE_OVERFLOW", "1".into()),
        false => EnvChange::Remove("ACCUTRACE_OVERFLOW"),
    });
    env.push(match args.dump_level {
        Some(level) => EnvChange::Set(
            "ACCUTRACE_DUMP_LEVEL",
            match level {
                RecordDumpLevel::Op => "op",
                RecordDumpLevel::Kernel => "kernel",
                RecordDumpLevel::All => "all",
            }
            .into(),
        ),
        None => EnvChange::Remove("ACCUTRACE_DUMP_LEVEL"),
    });
    env.push(match &args.step_marker {
        Some(marker) => {
            regex_check(marker)?;
            EnvChange::Set("ACCUTRACE_STEP_MARKER", marker.into())
        }
        None => EnvChange::Remove("ACCUTRACE_STEP_MARKER"),
    });
    env.push(match args.histogram {
        true => EnvChange::Set("ACCUTRACE_HISTOGRAM", "1".into()),
        false => EnvChange::Remove("ACCUTRACE_HISTOGRAM"),
    });
    Ok(env)
}

/// The marker must compile where the collector compiles it; say so before the job runs.
fn regex_check(marker: &str) -> Result<()> {
    regex::Regex::new(marker).map(|_| ()).map_err(|e| {
        let one_line = e.to_string().split_whitespace().collect::<Vec<_>>().join(" ");
        anyhow::anyhow!("--step-marker {marker:?}: not a regular expression: {one_line}")
    })
}

/// accutrace's Python start-up hook (`sitecustomize.py`), in a directory of the run that is removed when
/// the command ends.
pub struct PythonHook {
    dir: PathBuf,
}

/// The hook's source, shipped inside the analyzer.
pub const SITECUSTOMIZE: &str = include_str!("sitecustomize.py");

impl PythonHook {
    /// Writes the hook under `run_dir/.python-hook/`.
    pub fn install(run_dir: &Path) -> Result<PythonHook> {
        let dir = run_dir.join(".python-hook");
        std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let file = dir.join("sitecustomize.py");
        std::fs::write(&file, SITECUSTOMIZE).with_context(|| format!("cannot write {}", file.display()))?;
        Ok(PythonHook { dir })
    }

    /// PYTHONPATH with the hook first, then what the command would have had.
    pub fn python_path(&self, inherited: Option<OsString>) -> OsString {
        let mut value = self.dir.as_os_str().to_owned();
        if let Some(rest) = inherited.filter(|v| !v.is_empty()) {
            value.push(":");
            value.push(rest);
        }
        value
    }
}

impl Drop for PythonHook {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The collector first, then whatever the user already preloads. ld.so splits the list at spaces and
/// colons with no escaping, so a collector path holding either cannot be preloaded.
fn ld_preload(collector: &Path, inherited: Option<OsString>) -> Result<OsString> {
    let text = collector.to_string_lossy();
    if text.contains([' ', ':']) || collector.to_str().is_none() {
        bail!(
            "{}: LD_PRELOAD cannot hold a path with spaces, colons or non-UTF-8 bytes; copy {COLLECTOR_FILE} elsewhere",
            collector.display()
        );
    }
    let mut value = collector.to_string_lossy().into_owned();
    let inherited = inherited.map(|v| v.to_string_lossy().into_owned()).unwrap_or_default();
    // A collector the user already preloads would register twice: keep only ours.
    let is_collector = |entry: &str| Path::new(entry).file_name() == Some(COLLECTOR_FILE.as_ref());
    for entry in inherited.split([' ', ':']).filter(|e| !e.is_empty() && !is_collector(e)) {
        value.push(':');
        value.push_str(entry);
    }
    Ok(value.into())
}

/// `keep`, `ring:SIZE` or `trigger:SIZE:K` (the collector's syntax: `accutrace_formats::capture::Policy`),
/// returned with sizes in plain bytes.
pub fn parse_policy(policy: &str) -> Result<String> {
    Policy::parse(policy).map(|p| p.to_string()).map_err(|e| anyhow::anyhow!("--policy {policy}: {e}"))
}

/// CANN's step list, `0|5|10-20` (`accutrace_formats::steps::StepSet`), returned without spaces.
pub fn parse_steps(steps: &str) -> Result<String> {
    StepSet::parse(steps).map(|s| s.to_string()).map_err(|e| anyhow::anyhow!("--steps {steps:?}: {e}"))
}

/// The exit code to pass on: the child's, or 128 + signal as shells report it.
fn exit_code(status: &std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status.code().or_else(|| status.signal().map(|s| 128 + s)).unwrap_or(1)
}

/// How the command ended, in words: `exited with status 3`, `was killed by signal 9`.
fn describe(status: &std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(signal)) => format!("was killed by signal {signal}"),
        _ => "ended abnormally".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extra: &[&str]) -> RecordArgs {
        use clap::Parser;
        let mut argv = vec!["analyzer", "record", "-o", "/tmp/run"];
        argv.extend_from_slice(extra);
        argv.extend_from_slice(&["--", "python", "train.py"]);
        match crate::cli::Cli::try_parse_from(argv).expect("parses").command {
            crate::cli::Command::Record(a) => a,
            other => panic!("parsed as {other:?}"),
        }
    }

    fn get<'a>(env: &'a [EnvChange], key: &str) -> Option<&'a EnvChange> {
        env.iter().find(|c| matches!(c, EnvChange::Set(k, _) | EnvChange::Remove(k) if *k == key))
    }

    #[test]
    fn policies_validate_and_normalize() {
        assert_eq!(parse_policy("keep").unwrap(), "keep");
        assert_eq!(parse_policy("ring:4G").unwrap(), "ring:4294967296");
        assert_eq!(parse_policy("ring:512MiB").unwrap(), "ring:536870912");
        assert_eq!(parse_policy("trigger:1k:2").unwrap(), "trigger:1024:2");
        assert_eq!(parse_policy("ring:1000").unwrap(), "ring:1000");
        for bad in [
            "",
            "ring",
            "ring:",
            "ring:0",
            "ring:4X",
            "trigger:4G",
            "trigger:4G:-1",
            "keep:1",
            "ring:99999999999T",
        ] {
            let err = parse_policy(bad).unwrap_err();
            assert!(format!("{err:#}").contains("--policy"), "{bad}: {err:#}");
        }
    }

    #[test]
    fn steps_follow_cann_syntax() {
        assert_eq!(parse_steps("0|5|10-20").unwrap(), "0|5|10-20");
        assert_eq!(parse_steps(" 3 | 7-9 ").unwrap(), "3|7-9");
        for bad in ["", "a", "5-", "9-3", "1||2", "-1"] {
            assert!(parse_steps(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn env_sets_every_option_and_removes_stale_ones() {
        let a = args(&[
            "--mode",
            "tensor",
            "--policy",
            "trigger:2G:3",
            "--steps",
            "1-4",
            "--zstd-level",
            "3",
            "--overflow",
            "--histogram",
        ]);
        let env = collector_env(&a, Path::new("/abs/run"), Path::new("/lib/libcollector.so"), None).unwrap();
        let set = |k: &'static str, v: &str| EnvChange::Set(k, v.into());
        assert_eq!(get(&env, "LD_PRELOAD"), Some(&set("LD_PRELOAD", "/lib/libcollector.so")));
        assert_eq!(get(&env, "ACCUTRACE_DIR"), Some(&set("ACCUTRACE_DIR", "/abs/run")));
        assert_eq!(get(&env, "ACCUTRACE_MODE"), Some(&set("ACCUTRACE_MODE", "tensor")));
        assert_eq!(get(&env, "ACCUTRACE_POLICY"), Some(&set("ACCUTRACE_POLICY", "trigger:2147483648:3")));
        assert_eq!(get(&env, "ACCUTRACE_STEPS"), Some(&set("ACCUTRACE_STEPS", "1-4")));
        assert_eq!(get(&env, "ACCUTRACE_ZSTD_LEVEL"), Some(&set("ACCUTRACE_ZSTD_LEVEL", "3")));
        assert_eq!(get(&env, "ACCUTRACE_OVERFLOW"), Some(&set("ACCUTRACE_OVERFLOW", "1")));
        assert_eq!(get(&env, "ACCUTRACE_HISTOGRAM"), Some(&set("ACCUTRACE_HISTOGRAM", "1")));

        let env = collector_env(&args(&[]), Path::new("/r"), Path::new("/c.so"), Some("/x/asan.so".into()))
            .unwrap();
        assert_eq!(get(&env, "LD_PRELOAD"), Some(&set("LD_PRELOAD", "/c.so:/x/asan.so")));
        let stale = Some("/old/libcollector.so /x/a.so:/x/b.so".into());
        let env = collector_env(&args(&[]), Path::new("/r"), Path::new("/c.so"), stale).unwrap();
        assert_eq!(get(&env, "LD_PRELOAD"), Some(&set("LD_PRELOAD", "/c.so:/x/a.so:/x/b.so")));
        assert_eq!(get(&env, "ACCUTRACE_MODE"), Some(&set("ACCUTRACE_MODE", "stats")));
        assert_eq!(get(&env, "ACCUTRACE_POLICY"), Some(&set("ACCUTRACE_POLICY", "keep")));
        assert_eq!(get(&env, "ACCUTRACE_STEPS"), Some(&EnvChange::Remove("ACCUTRACE_STEPS")));
        assert_eq!(get(&env, "ACCUTRACE_OVERFLOW"), Some(&EnvChange::Remove("ACCUTRACE_OVERFLOW")));
        assert_eq!(get(&env, "ACCUTRACE_HISTOGRAM"), Some(&EnvChange::Remove("ACCUTRACE_HISTOGRAM")));
    }

    #[test]
    fn bad_options_are_refused() {
        let err = collector_env(&args(&["--zstd-level", "23"]), Path::new("/r"), Path::new("/c.so"), None)
            .unwrap_err();
        assert!(err.to_string().contains("--zstd-level 23"), "{err}");
        let err = collector_env(&args(&[]), Path::new("/r"), Path::new("/my libs/c.so"), None).unwrap_err();
        assert!(err.to_string().contains("LD_PRELOAD"), "{err}");
        let err =
            collector_env(&args(&["--steps", "x"]), Path::new("/r"), Path::new("/c.so"), None).unwrap_err();
        assert!(err.to_string().contains("--steps"), "{err}");
        let err =
            collector_env(&args(&["--step-marker", "Apply(Adam"]), Path::new("/r"), Path::new("/c.so"), None)
                .unwrap_err();
        assert!(err.to_string().contains("--step-marker") && !err.to_string().contains('\n'), "{err}");
    }

    #[test]
    fn eager_options_reach_the_collector_and_the_hook_comes_first_on_pythonpath() {
        let a = args(&["--dump-level", "kernel", "--step-marker", "^ApplyAdamD$"]);
        let env = collector_env(&a, Path::new("/r"), Path::new("/c.so"), None).unwrap();
        assert_eq!(
            get(&env, "ACCUTRACE_DUMP_LEVEL"),
            Some(&EnvChange::Set("ACCUTRACE_DUMP_LEVEL", "kernel".into()))
        );
        assert_eq!(
            get(&env, "ACCUTRACE_STEP_MARKER"),
            Some(&EnvChange::Set("ACCUTRACE_STEP_MARKER", "^ApplyAdamD$".into()))
        );
        let env = collector_env(&args(&[]), Path::new("/r"), Path::new("/c.so"), None).unwrap();
        assert_eq!(get(&env, "ACCUTRACE_STEP_MARKER"), Some(&EnvChange::Remove("ACCUTRACE_STEP_MARKER")));
        let dir = tempfile::tempdir().unwrap();
        let hook = PythonHook::install(dir.path()).unwrap();
        let file = dir.path().join(".python-hook/sitecustomize.py");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), SITECUSTOMIZE);
        let path = hook.python_path(Some("/a:/b".into()));
        assert_eq!(
            path,
            std::ffi::OsString::from(format!("{}:/a:/b", dir.path().join(".python-hook").display()))
        );
        drop(hook);
        assert!(!file.exists(), "removed with the hook");
    }

    #[test]
    fn collector_is_found_beside_the_executable_or_explained() {
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("analyzer");
        let err = find_collector(None, Some(&exe)).unwrap_err().to_string();
        assert!(err.contains("--collector") && err.contains("cargo build"), "{err}");
        std::fs::write(dir.path().join(COLLECTOR_FILE), b"").unwrap();
        assert_eq!(find_collector(None, Some(&exe)).unwrap(), dir.path().join(COLLECTOR_FILE));
        let err = find_collector(Some(&dir.path().join("nope.so")), Some(&exe)).unwrap_err().to_string();
        assert!(err.contains("nope.so"), "{err}");
    }

    #[test]
    fn output_directory_must_be_new_or_empty() {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("run");
        let nested = run.join("a/b");
        let (made, created) = prepare_output(&nested).unwrap();
        assert!(made.is_absolute() && made.is_dir());
        assert_eq!(created, vec![run.clone(), run.join("a"), run.join("a/b")], "outermost first");
        remove_if_empty(&created);
        assert!(!run.exists(), "what it made is gone again");
        std::fs::create_dir_all(&run).unwrap();
        std::fs::write(run.join("manifest.json"), b"{}").unwrap();
        assert!(prepare_output(&run).unwrap_err().to_string().contains("not empty"));
        // Only empty directories go: a file inside keeps its directory.
        let (_, created) = prepare_output(&run.join("c")).unwrap();
        std::fs::write(run.join("c/keep"), b"").unwrap();
        remove_if_empty(&created);
        assert!(run.join("c/keep").exists());
    }
}
