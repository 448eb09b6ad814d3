//! Shared by the end-to-end tests: the artifacts (built on first use with `cargo build` into the same
//! target directory as this test binary: libcollector.so, the simulated libascendcl.so and sim-train),
//! running sim-train with or without the collector preloaded, and reading captures and disk dumps back.
#![allow(dead_code)]

use accutrace_formats::capture::{CaptureRun, Manifest, Record};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

pub struct Artifacts {
    pub collector: PathBuf,
    pub runtime: PathBuf,
    pub sim_train: PathBuf,
    /// A forwarding compatibility library (tests/sim-acl-compat).
    pub acl_compat: PathBuf,
}

/// `cargo build -p accutrace-collector -p sim-ascendcl -p sim-framework -p sim-acl-compat` into this test's
/// target directory and for this test's target (a no-op when up to date), then the four files from
/// `<target>[/<triple>]/<profile>/`.
pub fn artifacts() -> &'static Artifacts {
    static A: OnceLock<Artifacts> = OnceLock::new();
    A.get_or_init(|| {
        let exe = std::env::current_exe().unwrap();
        let profile_dir = exe.parent().unwrap().parent().unwrap().to_path_buf();
        let mut target = profile_dir.parent().unwrap().to_path_buf();
        let profile = profile_dir.file_name().unwrap().to_str().unwrap().to_string();
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.args(["build", "-p", "accutrace-collector", "-p", "sim-ascendcl", "-p", "sim-framework"])
            .args(["-p", "sim-acl-compat"])
            .current_dir(env!("CARGO_MANIFEST_DIR"));
        // A build with `--target <triple>` (the aarch64 run under qemu in scripts/test) puts its profiles one
        // level down, in `<target>/<triple>/`, and the triple starts with this test's own architecture.
        let dir_name = target.file_name().unwrap().to_str().unwrap().to_string();
        if dir_name.starts_with(&format!("{}-", std::env::consts::ARCH)) {
            target = target.parent().unwrap().to_path_buf();
            cmd.args(["--target", &dir_name]);
        }
        cmd.env("CARGO_TARGET_DIR", &target);
        if profile == "release" {
            cmd.arg("--release");
        }
        let out = cmd.output().expect("run cargo build");
        assert!(out.status.success(), "cargo build failed:\n{}", String::from_utf8_lossy(&out.stderr));
        let a = Artifacts {
            collector: profile_dir.join("libcollector.so"),
            runtime: profile_dir.join("libascendcl.so"),
            sim_train: profile_dir.join("sim-train"),
            acl_compat: profile_dir.join("libacl_compat.so"),
        };
        for p in [&a.collector, &a.runtime, &a.sim_train, &a.acl_compat] {
            assert!(p.is_file(), "{} missing after cargo build", p.display());
        }
        a
    })
}

/// A scratch directory with a model file.
pub struct Scratch {
    pub dir: tempfile::TempDir,
}

impl Scratch {
    pub fn new(model_json: &str) -> Scratch {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("model.json"), model_json).unwrap();
        Scratch { dir }
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// An aclInit config that dumps to `rel` on disk with `dump_mode` all (msprobe's: the op switch on).
    pub fn disk_config(&self, rel: &str, extra: &str) -> PathBuf {
        let p = self.path(&format!("{rel}.acl.json"));
        std::fs::create_dir_all(self.path(rel)).unwrap();
        let json = format!(
            r#"{{"dump": {{"dump_path": "{}", "dump_mode": "all", "dump_list": [], "dump_op_switch": "on"{extra}}}}}"#,
            self.path(rel).display()
        );
        std::fs::write(&p, json).unwrap();
        p
    }

    /// sim-train for `steps` steps; `preload`: with libcollector.so; `env`: extra variables.
    pub fn command(
        &self,
        steps: u64,
        acl_config: Option<&Path>,
        preload: bool,
        env: &[(&str, String)],
    ) -> Command {
        self.command_with(steps, acl_config, preload, env, &[])
    }

    /// [`Scratch::command`] with more sim-train arguments (`--eager`, `--resolve handle`, ...).
    pub fn command_with(
        &self,
        steps: u64,
        acl_config: Option<&Path>,
        preload: bool,
        env: &[(&str, String)],
        args: &[&str],
    ) -> Command {
        let a = artifacts();
        let mut cmd = Command::new(&a.sim_train);
        cmd.arg("--model").arg(self.path("model.json")).arg("--steps").arg(steps.to_string()).args(args);
        if let Some(c) = acl_config {
            cmd.arg("--acl-config").arg(c);
        }
        cmd.env("SIM_ACL_LIB", &a.runtime).env_remove("LD_PRELOAD").current_dir(self.dir.path());
        for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("ACCUTRACE_")) {
            cmd.env_remove(k);
        }
        if preload {
            cmd.env("LD_PRELOAD", &a.collector);
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd
    }

    pub fn run(
        &self,
        steps: u64,
        acl_config: Option<&Path>,
        preload: bool,
        env: &[(&str, String)],
    ) -> Output {
        self.command(steps, acl_config, preload, env).output().unwrap()
    }

    /// [`Scratch::run`] with more sim-train arguments.
    pub fn run_with(
        &self,
        steps: u64,
        acl_config: Option<&Path>,
        preload: bool,
        env: &[(&str, String)],
        args: &[&str],
    ) -> Output {
        self.command_with(steps, acl_config, preload, env, args).output().unwrap()
    }
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn assert_ok(o: &Output) {
    assert!(
        o.status.success(),
        "sim-train failed: {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        stdout(o),
        stderr(o)
    );
}

/// Every file of an on-disk dump tree: (step, file name) -> bytes.
pub fn disk_dump(root: &Path) -> BTreeMap<(u64, String), Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let rel = p.to_str().unwrap().to_string();
                let (step, _) = collector::writer::step_from_path(&rel);
                out.insert(
                    (step, p.file_name().unwrap().to_str().unwrap().to_string()),
                    std::fs::read(&p).unwrap(),
                );
            }
        }
    }
    out
}

/// A captured tensor, flattened for comparison.
#[derive(Debug, Clone, PartialEq)]
pub struct Captured {
    pub step: u64,
    pub dump_file: String,
    pub op_name: String,
    pub input: bool,
    pub index: u32,
    pub dtype: i32,
    pub device_shape: Vec<u64>,
    pub hash: u64,
    pub data: Option<Vec<u8>>,
    pub stats: accutrace_formats::stats::TensorStats,
    pub histogram: Option<accutrace_formats::histogram::Histogram>,
}

/// Every tensor record of every stream (data decoded when stored); panics on any read error.
pub fn captured(run_dir: &Path) -> Vec<Captured> {
    let run = CaptureRun::open(run_dir).unwrap();
    let mut out = Vec::new();
    for s in &run.streams {
        for r in s.records() {
            if let Record::Tensor(t) = r.unwrap().record {
                let data = t.has_data().then(|| {
                    let mut v = Vec::new();
                    t.read_data(&mut v).unwrap();
                    v
                });
                out.push(Captured {
                    step: t.op.step,
                    dump_file: t.op.dump_file.clone(),
                    op_name: t.op.name.clone(),
                    input: t.meta.io == accutrace_formats::capture::Io::Input,
                    index: t.meta.index,
                    dtype: t.meta.dtype.code(),
                    device_shape: t.meta.device_shape.clone(),
                    hash: t.content_hash,
                    data,
                    stats: t.stats,
                    histogram: t.histogram.map(|h| *h),
                });
            }
        }
    }
    out
}

pub fn manifest(run_dir: &Path) -> Manifest {
    Manifest::read(run_dir).unwrap()
}

/// The pipeline counters of the only stream.
pub fn pipeline(m: &Manifest) -> accutrace_formats::capture::PipelineCounters {
    let p = m.config["pipeline"].as_object().unwrap();
    assert_eq!(p.len(), 1, "one stream expected: {p:?}");
    serde_json::from_value(p.values().next().unwrap().clone()).unwrap()
}

pub fn env(pairs: &[(&'static str, &str)]) -> Vec<(&'static str, String)> {
    pairs.iter().map(|(k, v)| (*k, v.to_string())).collect()
}
