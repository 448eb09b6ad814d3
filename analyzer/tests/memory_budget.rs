//! The memory budget (64 MiB + twice the largest tensor as f32, anonymous) holds on any number of threads:
//! `RAYON_NUM_THREADS` sizes the pool, not the pairs in flight. Run as the command is, in a process of its
//! own, its anonymous memory sampled from /proc while it runs.

mod support;

use accutrace_formats::capture::Io;
use accutrace_formats::DType;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;
use support::RunWriter;

/// Values of each op's output: 6.4 MB as f32, so that ten pairs at once would hold several times the budget.
const N: usize = 1_600_000;
const OPS: usize = 10;

fn write_run(dir: &Path, run2: bool) -> PathBuf {
    let mut run = RunWriter::create(&dir.join(if run2 { "b" } else { "a" }), 64 << 20);
    for k in 0..OPS {
        let data: Vec<u8> = (0..N)
            .flat_map(|i| {
                let v = (i as f32 * 0.011 + k as f32).sin() * if run2 && i % 5 == 0 { 1.001 } else { 1.0 };
                half::f16::from_f32(v).to_le_bytes()
            })
            .collect();
        run.op(k as u64, "Gelu");
        run.tensor(Io::Output, 0, DType::FLOAT16, &data);
    }
    run.finish()
}

/// The largest anonymous resident memory `analyzer args` reached on `threads` threads (RssAnon, sampled
/// every 2 ms), in bytes; the command must have run to its end.
fn peak_anonymous(args: &[&Path], command: &str, threads: usize) -> u64 {
    let mut child = Command::new(env!("CARGO_BIN_EXE_analyzer"))
        .arg(command)
        .args(args)
        .args(["--format", "json"])
        .env("RAYON_NUM_THREADS", threads.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let status = format!("/proc/{}/status", child.id());
    let mut peak = 0;
    loop {
        if let Ok(text) = std::fs::read_to_string(&status) {
            let kib = text
                .lines()
                .find_map(|l| l.strip_prefix("RssAnon:"))
                .map(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().unwrap());
            peak = peak.max(kib.unwrap_or(0) * 1024);
        }
        if let Some(exit) = child.try_wait().unwrap() {
            // compare: 0 or 1 (a verdict); diff: 1 (the runs differ). 2 would be unread data.
            assert!(matches!(exit.code(), Some(0 | 1)), "{command}: {exit:?}");
            return peak;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn rayon_num_threads_does_not_lift_the_memory_budget() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (write_run(dir.path(), false), write_run(dir.path(), true));
    let budget = (64 << 20) + 2 * (N as u64 * 4);
    for command in ["compare", "diff"] {
        let peak = peak_anonymous(&[&a, &b], command, 16);
        assert!(
            peak <= budget,
            "{command} on 16 threads: {} MiB anonymous, budget {} MiB",
            peak >> 20,
            budget >> 20
        );
        // The samples saw the command's buffers (not a vacuous pass): compare holds at least one side's
        // values as f32, diff at least its blocks.
        let least = if command == "compare" { 4 * N as u64 } else { 1 << 20 };
        assert!(peak >= least, "{command}: {} MiB anonymous", peak >> 20);
    }
}
