//! `manifest.json` of the run directory, shared by every process (rank) that writes a stream into it.
//!
//! Each process merges its own entry under an exclusive `flock` on `run_dir/.accutrace.lock`: it reads the
//! current manifest, replaces its stream's summary and its pipeline counters (`config.pipeline[stream]`),
//! recomputes the run-wide counts as the sum over streams, and writes the file atomically. The same lock
//! serialises stream id allocation. Written at start, every couple of seconds while running, and at the end.

use crate::pipeline::Pipeline;
use accutrace_formats::capture::{Manifest, PipelineCounters, RunCounts, StreamSummary};
use std::collections::BTreeMap;
use std::os::fd::AsRawFd;
use std::path::Path;

/// Environment variables copied into the manifest (besides every variable of [`SELECTED_PREFIXES`]).
pub const SELECTED_ENV: &[&str] = &[
    "RANK_ID",
    "RANK_SIZE",
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "DEVICE_ID",
    "ASCEND_DEVICE_ID",
    "ASCEND_RT_VISIBLE_DEVICES",
    "ASCEND_LAUNCH_BLOCKING",
    "HCCL_DETERMINISTIC",
    "INF_NAN_MODE_ENABLE",
    "ASCEND_TOOLKIT_HOME",
    "ASCEND_GLOBAL_LOG_LEVEL",
    "PYTHONHASHSEED",
    "OMP_NUM_THREADS",
    // The GPU benchmark's counterparts, when a benchmark run is captured too.
    "CUDA_VISIBLE_DEVICES",
    "CUBLAS_WORKSPACE_CONFIG",
    "NCCL_ALGO",
];

/// Prefixes of environment variables copied into the manifest: the CANN runtime's and collective
/// library's settings (determinism, algorithms, devices), ours, and the simulator's.
pub const SELECTED_PREFIXES: &[&str] = &["ASCEND_", "HCCL_", "ACCUTRACE_", "SIM_ACL_"];

/// The run directory's lock, held until dropped.
pub struct RunLock(#[allow(dead_code)] std::fs::File);

impl RunLock {
    pub fn acquire(run_dir: &Path) -> std::io::Result<RunLock> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(run_dir.join(".accutrace.lock"))?;
        // SAFETY: flock on a descriptor we own; blocks until the lock is ours. Closing the file releases it.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(RunLock(file))
    }
}

/// The next free stream id in `run_dir` (largest `stream-NNN-*` plus one). Call with the lock held.
pub fn next_stream_id(run_dir: &Path) -> u32 {
    let mut next = 0;
    if let Ok(entries) = std::fs::read_dir(run_dir) {
        for e in entries.flatten() {
            let name = e.file_name();
            let id = name.to_str().and_then(|n| n.strip_prefix("stream-")).and_then(|n| n.split('-').next());
            if let Some(id) = id.and_then(|d| d.parse::<u32>().ok()) {
                next = next.max(id + 1);
            }
        }
    }
    next
}

/// The stream directories of `rank` already in `run_dir`, sorted (`stream-000-rank0-...`). One run has one
/// process per rank, so these are most likely another run's (the job run again, or its workers restarted,
/// into the same directory); this process's own earlier streams are left out. Call with the lock held.
pub fn streams_of_rank(run_dir: &Path, rank: u32) -> Vec<String> {
    let of_rank = format!("-rank{rank}-");
    let of_this_process = format!("-pid{}", std::process::id());
    let mut found: Vec<String> = std::fs::read_dir(run_dir)
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| {
                    n.starts_with("stream-") && n.contains(&of_rank) && !n.ends_with(&of_this_process)
                })
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    found
}

/// `/proc/self/cmdline`, split at NULs.
pub fn command_line() -> Vec<String> {
    match std::fs::read("/proc/self/cmdline") {
        Ok(bytes) => bytes
            .split(|&b| b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect(),
        Err(_) => std::env::args().collect(),
    }
}

pub fn selected_env() -> BTreeMap<String, String> {
    std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .filter(|(k, _)| {
            SELECTED_ENV.contains(&k.as_str()) || SELECTED_PREFIXES.iter().any(|p| k.starts_with(p))
        })
        .collect()
}

/// Merges this process's state into `manifest.json`; `finished` at the end. Failures are logged once.
pub fn publish(p: &Pipeline, finished: bool) {
    let summary = p.stream().as_ref().map(|w| w.summary());
    if let Err(e) = merge(p, summary, finished) {
        static LOGGED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
        if !LOGGED.swap(true, std::sync::atomic::Ordering::Relaxed) {
            crate::log(&format!("cannot write {}/manifest.json: {e}", p.run_dir.display()));
        }
    }
}

/// [`publish`] with the stream summary given (the sealed one at the end).
pub fn merge(p: &Pipeline, summary: Option<StreamSummary>, finished: bool) -> Result<(), String> {
    let _lock = RunLock::acquire(&p.run_dir).map_err(|e| e.to_string())?;
    let mut m = Manifest::read(&p.run_dir).unwrap_or_else(|_| p.manifest_base.clone());
    if let Some(mode) = p.overflow_mode.lock().unwrap_or_else(|e| e.into_inner()).clone() {
        m.overflow_mode = Some(mode);
    }
    // What the job set wins over what was read: the device is reset (mode back to its default) before
    // the end, and a mode set after activation is not seen by the read at start.
    let settings = crate::settings::observed();
    if let Some(mode) = &settings.overflow_mode {
        m.overflow_mode = Some(mode.clone());
    }
    if settings != Default::default() {
        m.environment.settings = settings;
    }
    if let Some(s) = summary {
        match m.streams.iter_mut().find(|e| e.dir == s.dir) {
            Some(e) => *e = s,
            None => m.streams.push(s),
        }
        m.streams.sort_by_key(|s| s.info.stream_id);
    }
    let snapshot = p.counters.snapshot();
    let mut config = match m.config.take() {
        serde_json::Value::Object(o) => o,
        _ => serde_json::Map::new(),
    };
    config.insert("collector".into(), p.manifest_base.config["collector"].clone());
    config.insert("dump_json".into(), p.manifest_base.config["dump_json"].clone());
    // Always written (an empty list: none made), so that a reader can tell "none" from an older collector.
    let communicators = config.entry("communicators").or_insert_with(|| serde_json::json!({}));
    if let Some(obj) = communicators.as_object_mut() {
        let made = serde_json::to_value(crate::hccl::made()).map_err(|e| e.to_string())?;
        obj.insert(p.stream_dir.clone(), made);
    }
    let pipeline = config.entry("pipeline").or_insert_with(|| serde_json::json!({}));
    if let Some(obj) = pipeline.as_object_mut() {
        obj.insert(p.stream_dir.clone(), serde_json::to_value(&snapshot).map_err(|e| e.to_string())?);
    }
    let mut counts = RunCounts::default();
    for v in pipeline.as_object().into_iter().flat_map(|o| o.values()) {
        if let Ok(s) = serde_json::from_value::<PipelineCounters>(v.clone()) {
            counts.chunks += s.chunks;
            counts.files += s.files;
            counts.tensors += s.tensors;
            counts.bytes_in += s.bytes_in;
            counts.drops += s.losses();
        }
    }
    counts.bytes_out = m.streams.iter().map(|s| s.counts.bytes_out).sum();
    m.counts = counts;
    m.config = serde_json::Value::Object(config);
    m.finished_unix_us = if finished && m.streams.iter().all(|s| s.sealed) { Some(now_us()) } else { None };
    m.write(&p.run_dir).map_err(|e| e.to_string())
}

pub fn now_us() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64)
}
