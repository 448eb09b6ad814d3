//! The collector in a 4-rank `sim-train --ranks` job: every HCCL call is recorded on every rank (reached
//! through the collector's `dlsym`, as sim-train resolves HCCL like torch_npu), members agree on the
//! communicator and its sequence numbers, the buffers' hashes say what the collectives did, the host-clock
//! times place each call among the dumped ops, and the job trains exactly as without the collector.

mod common;

use accutrace_formats::capture::{CaptureRun, CollectiveInfo, CollectiveOp, Record};
use common::*;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

const RANKS: u32 = 4;
const STEPS: u64 = 3;

/// Runs the job, with the collector recording into `run` when given; returns stdout.
fn train(dir: &Path, run: Option<&Path>) -> String {
    let model = model_file(dir, "model.json", r#"{"n_layers": 2, "seq": 12}"#);
    let mut cmd = Command::new(sim_train_bin());
    cmd.args(["--ranks", &RANKS.to_string(), "--steps", &STEPS.to_string(), "--model"])
        .arg(&model)
        .arg("--lib")
        .arg(runtime_lib())
        .arg("--hccl-lib")
        .arg(artifact("libhccl.so"));
    if let Some(run) = run {
        cmd.env("LD_PRELOAD", collector_lib()).env("ACCUTRACE_DIR", run);
    }
    let out = cmd.output().expect("run sim-train");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "sim-train failed: {}\n{stdout}", String::from_utf8_lossy(&out.stderr));
    stdout
}

/// One rank's collective records, and its ops as (step, timestamp, name).
struct RankCapture {
    collectives: Vec<CollectiveInfo>,
    ops: Vec<(u64, u64, String)>,
}

fn read(run: &Path) -> BTreeMap<u32, RankCapture> {
    let capture = CaptureRun::open(run).unwrap();
    let mut out = BTreeMap::new();
    for stream in &capture.streams {
        let rank = stream.info().rank.expect("RANK_ID names the stream's rank");
        let mut r = RankCapture { collectives: Vec::new(), ops: Vec::new() };
        for item in stream.records() {
            match item.unwrap().record {
                Record::Collective(c) => r.collectives.push(c),
                Record::Op(op) => r.ops.push((op.step, op.timestamp_us, op.name.clone())),
                _ => {}
            }
        }
        assert!(out.insert(rank, r).is_none(), "one stream per rank");
    }
    out
}

#[test]
fn every_rank_records_its_collectives_matchable_across_ranks() {
    let dir = scratch();
    let run = dir.path().join("run");
    let with = train(dir.path(), Some(&run));
    let without = train(dir.path(), None);
    let lines = |s: &str| {
        let mut v: Vec<String> = s.lines().map(str::to_string).collect();
        v.sort();
        v
    };
    assert_eq!(lines(&with), lines(&without), "the collector changes nothing in training");

    let ranks = read(&run);
    assert_eq!(ranks.keys().copied().collect::<Vec<_>>(), [0, 1, 2, 3]);
    // Per rank: the seed broadcast, then per step the gradient and overflow all-reduces and the loss
    // all-gather, in that order, numbered 0, 1, 2, ... on one communicator.
    let expected_ops: Vec<CollectiveOp> = std::iter::once(CollectiveOp::Broadcast)
        .chain(
            (0..STEPS)
                .flat_map(|_| [CollectiveOp::AllReduce, CollectiveOp::AllReduce, CollectiveOp::AllGather]),
        )
        .collect();
    let comm = ranks[&0].collectives[0].comm.clone();
    assert!(comm.starts_with("root-"), "{comm}");
    for (&rank, r) in &ranks {
        let ops: Vec<CollectiveOp> = r.collectives.iter().map(|c| c.op).collect();
        assert_eq!(ops, expected_ops, "rank {rank}");
        for (i, c) in r.collectives.iter().enumerate() {
            assert_eq!(
                (c.comm.as_str(), c.comm_rank, c.comm_size, c.seq),
                (comm.as_str(), rank, RANKS, i as u64)
            );
            assert_eq!(c.result, 0);
            assert!(c.start_us <= c.end_us);
            assert!(c.output.is_some(), "rank {rank} #{i}: output read");
        }
        assert_eq!(r.collectives[0].peer, Some(0), "broadcast from rank 0");
        assert_eq!(r.collectives[0].input.is_some(), rank == 0, "only the root's broadcast input is read");
    }
    for (i, op) in expected_ops.iter().enumerate() {
        let out_hashes: Vec<u64> =
            ranks.values().map(|r| r.collectives[i].output.unwrap().content_hash).collect();
        assert!(out_hashes.iter().all(|&h| h == out_hashes[0]), "#{i}: every member gets the same result");
        if *op == CollectiveOp::AllReduce && i % 3 == 1 {
            // The gradients: each rank's own before the reduction.
            let in_hashes: Vec<u64> =
                ranks.values().map(|r| r.collectives[i].input.unwrap().content_hash).collect();
            assert!(
                in_hashes.windows(2).all(|w| w[0] != w[1]),
                "#{i}: each rank contributes its own gradients"
            );
            let c = &ranks[&0].collectives[i];
            assert_eq!((c.dtype, c.reduce_op), (3, Some(0)), "fp16 gradients, summed");
            assert_eq!(c.input.unwrap().stats.count, c.count);
        }
    }
    // Host-clock order: the step's backward ops before its gradient all-reduce, its optimizer ops after.
    for (&rank, r) in &ranks {
        for step in 0..STEPS {
            let grads = &r.collectives[1 + 3 * step as usize];
            let of_step = r.ops.iter().filter(|o| o.0 == step);
            for (_, ts, name) in of_step {
                if name.starts_with("optimizer/") {
                    assert!(*ts >= grads.end_us, "rank {rank} step {step}: {name} after the all-reduce");
                } else {
                    assert!(*ts <= grads.start_us, "rank {rank} step {step}: {name} before the all-reduce");
                }
            }
        }
    }
}

/// Two ranks of the job over `hccl_lib` (the library it opens as libhccl.so), `preload`ed, recording into
/// `run`; returns stdout and stderr.
fn train_two_ranks(dir: &Path, run: &Path, hccl_lib: &Path, preload: &str) -> (String, String) {
    let model = model_file(dir, "model.json", r#"{"n_layers": 2, "seq": 12}"#);
    let out = Command::new(sim_train_bin())
        .args(["--ranks", "2", "--steps", &STEPS.to_string(), "--model"])
        .arg(&model)
        .arg("--lib")
        .arg(runtime_lib())
        .arg("--hccl-lib")
        .arg(hccl_lib)
        .env("LD_PRELOAD", preload)
        .env("ACCUTRACE_DIR", run)
        .env("SIM_ACL_COMPAT_TRACE", "1")
        .output()
        .expect("run sim-train");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(out.status.success(), "sim-train failed: {:?}\n{stdout}\n{stderr}", out.status);
    (stdout, stderr)
}

/// A shim libhccl.so between the job and HCCL (tests/sim-acl-compat) whose entry points find their target
/// through the global scope, which leads back to the collector's exports: the collector passes such a
/// re-entered call on past the shim, so the job trains as without the shim (it recursed until the stack
/// overflowed and killed the ranks), each call is recorded once, and the analyzer reads the capture whole.
#[test]
fn a_forwarding_hccl_shim_neither_recurses_nor_records_a_call_twice() {
    let dir = scratch();
    let (plain, shimmed) = (dir.path().join("plain"), dir.path().join("shimmed"));
    let (hccl, shim, collector) = (artifact("libhccl.so"), artifact("libacl_compat.so"), collector_lib());
    let (plain_out, _) = train_two_ranks(dir.path(), &plain, &hccl, path_str(&collector));
    // The collector first, then the shim the job opens as libhccl.so, then the HCCL it forwards to.
    let preload = format!("{}:{}:{}", collector.display(), shim.display(), hccl.display());
    let (shimmed_out, err) = train_two_ranks(dir.path(), &shimmed, &shim, &preload);
    let sorted = |s: &str| {
        let mut v: Vec<&str> = s.lines().collect();
        v.sort_unstable();
        v.join("\n")
    };
    assert_eq!(sorted(&shimmed_out), sorted(&plain_out), "the shim changes nothing in training");
    // The shim was on every call's path, once per call: per rank one init, one broadcast, per step two
    // all-reduces and one all-gather, and one destroy.
    let forwarded = |name: &str| err.matches(&format!("acl-compat: {name} forwarded\n")).count() as u64;
    assert_eq!(forwarded("HcclCommInitRootInfo"), 2, "{err}");
    assert_eq!(forwarded("HcclBroadcast"), 2, "{err}");
    assert_eq!(forwarded("HcclAllReduce"), 2 * 2 * STEPS, "{err}");
    assert_eq!(forwarded("HcclAllGather"), 2 * STEPS, "{err}");
    assert_eq!(forwarded("HcclCommDestroy"), 2, "{err}");
    assert!(!err.contains("was called again"), "a re-entered call found its way on: {err}");

    // Each rank recorded the same calls as without the shim, once each, numbered alike.
    let (plain, shimmed_ranks) = (read(&plain), read(&shimmed));
    assert_eq!(shimmed_ranks.keys().copied().collect::<Vec<_>>(), [0, 1]);
    let comm = shimmed_ranks[&0].collectives[0].comm.clone();
    assert!(comm.starts_with("root-"), "named by the root info the collector saw once: {comm}");
    for (rank, r) in &shimmed_ranks {
        let calls = |r: &RankCapture| -> Vec<_> {
            r.collectives
                .iter()
                .map(|c| {
                    let hashes = (c.input.map(|b| b.content_hash), c.output.map(|b| b.content_hash));
                    (c.op, c.comm_rank, c.comm_size, c.seq, c.count, c.dtype, c.result, hashes)
                })
                .collect()
        };
        assert_eq!(calls(r), calls(&plain[rank]), "rank {rank}");
        assert_eq!(r.collectives.len(), 1 + 3 * STEPS as usize, "rank {rank}");
        assert!(r.collectives.iter().all(|c| c.comm == comm), "rank {rank}: one communicator");
    }
    let manifest = accutrace_formats::capture::Manifest::read(&shimmed).unwrap();
    let made = manifest.config["communicators"].as_object().unwrap();
    assert_eq!(made.len(), 2, "{made:?}");
    for (stream, list) in made {
        assert_eq!(list.as_array().unwrap().len(), 1, "{stream}: the communicator was made once: {list}");
    }

    // The analyzer reads the capture whole: every collective's members agree, nothing is missing.
    let (code, out, stderr) = analyzer(&["ranks", path_str(&shimmed)]);
    assert_eq!(code, 0, "{out}\n{stderr}");
    assert!(out.contains("No anomaly across the ranks") && !out.contains("INCOMPLETE"), "{out}");
    let (code, json) = analyzer_json(&["ranks", path_str(&shimmed)]);
    assert_eq!((code, json["calls"].as_u64()), (0, Some(2 * (1 + 3 * STEPS))), "{json}");
    let summaries = dir.path().join("summaries");
    let (code, out, stderr) = analyzer(&["scan", path_str(&shimmed), "-o", path_str(&summaries)]);
    assert_eq!(code, 0, "{out}\n{stderr}");
    let (code, out, stderr) = analyzer(&["merge", path_str(&summaries)]);
    assert_eq!(code, 0, "{out}\n{stderr}");
    assert!(out.contains("No anomaly across the ranks") && !out.contains("INCOMPLETE"), "{out}");
}
