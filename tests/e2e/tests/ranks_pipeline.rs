//! The directed collectives end to end: `sim-train --ranks N --pipeline` (two stages; stage 0 sends its
//! activations to stage 1 with HcclSend/HcclRecv and gets the gradient back, each stage sums gradients in its
//! data-parallel group, `--zero` with HcclReduceScatter + HcclAllGather, and an HcclBarrier ends each step)
//! recorded by the collector, then read by `analyzer ranks`, `scan` and `merge`.

mod common;

use accutrace_formats::capture::{CaptureRun, CollectiveInfo, CollectiveOp, Record};
use common::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

const STEPS: u64 = 3;
const MODEL: &str = r#"{"n_layers": 2, "seq": 12}"#;
/// Stage 0's first rank overflows in its forward at step 1.
const NAN_AT_STEP_1: &str = r#"{"n_layers": 2, "seq": 12,
    "faults": {"overflow": {"op": "model/layer_0/mlp/fc1/MatMul", "step": 1, "rank": 0}}}"#;
/// MODEL with four times the layers: a step spans several 64 KiB segments.
const DEEP: &str = r#"{"n_layers": 8, "seq": 12}"#;
const FC1: &str = "model/layer_0/mlp/fc1/MatMul";

/// How a job is run: its ranks, sim-train's extra options, the library it opens as libhccl.so and what
/// is preloaded (the collector, first).
struct Job<'a> {
    ranks: u32,
    options: &'a [&'a str],
    hccl_lib: &'a Path,
    preload: &'a str,
    /// The collector's settings (`ACCUTRACE_SEGMENT_SIZE`, ...), beside ACCUTRACE_DIR.
    env: &'a [(&'a str, &'a str)],
}

/// Runs the pipeline job of `model_json`, recording into `run`; returns stdout and stderr.
fn train(dir: &Path, run: &Path, model_json: &str, job: &Job<'_>) -> (String, String) {
    let model = model_file(dir, "model.json", model_json);
    let out = Command::new(sim_train_bin())
        .args(["--ranks", &job.ranks.to_string(), "--pipeline", "--steps", &STEPS.to_string()])
        .args(job.options)
        .arg("--model")
        .arg(&model)
        .arg("--lib")
        .arg(runtime_lib())
        .arg("--hccl-lib")
        .arg(job.hccl_lib)
        .env("LD_PRELOAD", job.preload)
        .env("ACCUTRACE_DIR", run)
        .env("SIM_ACL_COMPAT_TRACE", "1")
        .envs(job.env.iter().copied())
        .output()
        .expect("run sim-train");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(out.status.success(), "sim-train failed: {:?}\n{stdout}\n{stderr}", out.status);
    (stdout, stderr)
}

/// A job on the simulator's libhccl.so with the collector preloaded; returns stdout.
fn record(dir: &Path, run: &Path, model_json: &str, ranks: u32, options: &[&str]) -> String {
    let (hccl, collector) = (artifact("libhccl.so"), collector_lib());
    let job = Job { ranks, options, hccl_lib: &hccl, preload: path_str(&collector), env: &[] };
    train(dir, run, model_json, &job).0
}

/// Each rank's collective records, by rank.
fn calls(run: &Path) -> BTreeMap<u32, Vec<CollectiveInfo>> {
    let capture = CaptureRun::open(run).unwrap();
    let mut out = BTreeMap::new();
    for stream in &capture.streams {
        let rank = stream.info().rank.expect("RANK_ID names the stream's rank");
        let list: Vec<CollectiveInfo> = stream
            .records()
            .filter_map(|item| match item.unwrap().record {
                Record::Collective(c) => Some(c),
                _ => None,
            })
            .collect();
        assert!(out.insert(rank, list).is_none(), "one stream per rank");
    }
    out
}

/// The calls rank `rank` of a `ranks`-rank pipeline makes, in order.
fn expected_calls(rank: u32, ranks: u32, zero: bool) -> Vec<CollectiveOp> {
    use CollectiveOp::*;
    let group = ranks / 2;
    let mut ops = vec![Broadcast];
    for _ in 0..STEPS {
        ops.extend(if rank < group { [Send, Recv] } else { [Recv, Send] });
        match (group > 1, zero) {
            (true, true) => ops.extend([ReduceScatter, AllGather]),
            (true, false) => ops.push(AllReduce),
            (false, _) => {}
        }
        ops.extend([AllReduce, AllGather, Barrier]);
    }
    ops
}

/// `analyzer ranks RUN ARGS --format json`: (exit status, report).
fn ranks_json(run: &Path, args: &[&str]) -> (i32, Value) {
    let mut all = vec!["ranks", path_str(run)];
    all.extend(args);
    analyzer_json(&all)
}

/// A clean 2-rank and a clean 4-rank (ZeRO) pipeline: every call is recorded where the job made it, every
/// message arrives as sent, and `ranks`, `ranks --step` and `merge` find nothing wrong with every
/// collective matched.
#[test]
fn a_clean_pipeline_matches_every_collective_and_finds_nothing() {
    for (ranks, options) in [(2u32, &[][..]), (4, &["--zero"][..])] {
        let dir = scratch();
        let run = dir.path().join("run");
        let stdout = record(dir.path(), &run, MODEL, ranks, options);
        assert_eq!(stdout.lines().filter(|l| l.contains("mean loss")).count(), STEPS as usize, "{stdout}");
        let recorded = calls(&run);
        assert_eq!(recorded.keys().copied().collect::<Vec<_>>(), (0..ranks).collect::<Vec<_>>());
        let group = ranks / 2;
        for (&rank, list) in &recorded {
            let ops: Vec<CollectiveOp> = list.iter().map(|c| c.op).collect();
            assert_eq!(ops, expected_calls(rank, ranks, !options.is_empty()), "rank {rank} of {ranks}");
            assert!(list.iter().all(|c| c.result == 0 && c.comm.starts_with("root-")), "rank {rank}");
            let peer = if rank < group { rank + group } else { rank - group };
            for c in list.iter().filter(|c| c.op.is_point_to_point()) {
                assert_eq!((c.peer, c.comm_size), (Some(peer), ranks), "rank {rank}: {c:?}");
            }
            for c in list.iter().filter(|c| c.op == CollectiveOp::ReduceScatter) {
                assert_eq!(c.comm_size, group, "rank {rank}: within the stage's group");
                assert_eq!(c.input.unwrap().size, c.output.unwrap().size * u64::from(group));
            }
        }
        // Every message arrives as sent: the send's input is the matching receive's output, bit for bit.
        for (&rank, list) in &recorded {
            for send in list.iter().filter(|c| c.op == CollectiveOp::Send) {
                let dst = send.peer.unwrap();
                let recv = recorded[&dst]
                    .iter()
                    .find(|c| c.op == CollectiveOp::Recv && c.peer == Some(rank) && c.seq == send.seq)
                    .unwrap_or_else(|| panic!("rank {dst} has no receive of rank {rank}'s #{}", send.seq));
                assert_eq!(send.input.unwrap().content_hash, recv.output.unwrap().content_hash);
            }
        }
        let calls_made: u64 = recorded.values().map(|l| l.len() as u64).sum();
        let (code, out, stderr) = analyzer(&["ranks", path_str(&run)]);
        assert_eq!(code, 0, "{ranks} ranks: {out}\n{stderr}");
        assert!(out.contains("No anomaly across the ranks") && !out.contains("INCOMPLETE"), "{out}");
        let (code, json) = ranks_json(&run, &[]);
        assert_eq!((code, json["calls"].as_u64()), (0, Some(calls_made)), "{json}");
        assert_eq!(json["communicators"].as_array().unwrap().len(), if group > 1 { 3 } else { 1 });
        // One step of it is whole too: every message received at step 1 was sent at step 1.
        for step in 0..STEPS {
            let step = step.to_string();
            let (code, out, stderr) = analyzer(&["ranks", path_str(&run), "--step", &step]);
            assert_eq!(code, 0, "{ranks} ranks, --step {step}: {out}\n{stderr}");
            assert!(out.contains("No anomaly across the ranks") && !out.contains("INCOMPLETE"), "{out}");
        }
        let summaries = dir.path().join("summaries");
        let (code, out, stderr) = analyzer(&["scan", path_str(&run), "-o", path_str(&summaries)]);
        assert_eq!(code, 0, "{out}\n{stderr}");
        let (code, out, stderr) = analyzer(&["merge", path_str(&summaries)]);
        assert_eq!(code, 0, "{ranks} ranks: {out}\n{stderr}");
        assert!(out.contains("No anomaly across the ranks") && !out.contains("INCOMPLETE"), "{out}");
    }
}

/// A NaN/inf made in stage 0's forward at step 1: the origin is that op on rank 0; stage 1's receive of
/// the activations comes after the send that carried it, so it is where the anomaly reached stage 1, at
/// step 1, and never an origin; `merge` of the summaries gives the same answer.
#[test]
fn an_overflow_in_stage_0_is_the_origin_and_reaches_stage_1_through_its_receive() {
    for (ranks, options) in [(2u32, &[][..]), (4, &["--zero"][..])] {
        let dir = scratch();
        let run = dir.path().join("run");
        let stdout = record(dir.path(), &run, NAN_AT_STEP_1, ranks, options);
        let skipped = stdout.lines().filter(|l| l.contains(" step 1 ") && l.contains("step skipped")).count();
        assert_eq!(skipped, ranks as usize, "every rank skips step 1: {stdout}");
        let summaries = dir.path().join("summaries");
        let (code, out, stderr) = analyzer(&["scan", path_str(&run), "-o", path_str(&summaries)]);
        assert_eq!(code, 0, "{out}\n{stderr}");
        for (what, json) in
            [("ranks", ranks_json(&run, &[])), ("merge", analyzer_json(&["merge", path_str(&summaries)]))]
        {
            let (code, json) = json;
            assert_eq!(code, 1, "{what}, {ranks} ranks: {json}");
            let origins = json["origins"].as_array().unwrap();
            let first = &origins[0];
            assert_eq!(
                (first["rank"].as_u64(), first["step"].as_u64()),
                (Some(0), Some(1)),
                "{what}: {first}"
            );
            assert_eq!(first["op"], FC1, "{what}: {first}");
            for o in origins {
                assert!(o["collective"].is_null(), "{what}, {ranks} ranks: a call is an origin: {o}");
            }
            let stage_1 = json["spread"]
                .as_array()
                .unwrap()
                .iter()
                .find(|r| r["rank"].as_u64() == Some(u64::from(ranks / 2)))
                .unwrap_or_else(|| panic!("{what}: the anomaly did not reach stage 1: {json}"));
            assert_eq!(stage_1["at"], "HcclRecv", "{what}: {stage_1}");
            assert_eq!(stage_1["step"].as_u64(), Some(1), "{what}: received at step 1: {stage_1}");
            let via = stage_1["via"].as_str().unwrap();
            assert!(via.starts_with("HcclRecv #1 on root-") && via.ends_with("at step 1"), "{what}: {via}");
        }
        // `overflow` places the arrival on stage 1 at the step it was sent at too.
        let (code, json) = analyzer_json(&["overflow", path_str(&run)]);
        assert_eq!(code, 1, "{json}");
        let arrival = json["arrivals"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["call"] == "HcclRecv #1")
            .unwrap_or_else(|| panic!("no arrival through the receive: {json}"));
        assert_eq!(arrival["rank"].as_u64(), Some(u64::from(ranks / 2)), "{arrival}");
        assert_eq!(arrival["step"].as_u64(), Some(1), "{ranks} ranks: {arrival}");
    }
}

/// One bit of rank 0's activations flips on the way to rank 1 at step 1 (the simulator's link fault): the
/// receive is the one origin, named as a message received other than it was sent, at step 1.
#[test]
fn a_message_damaged_in_transit_is_named_on_its_receive() {
    let dir = scratch();
    let run = dir.path().join("run");
    record(dir.path(), &run, MODEL, 2, &["--corrupt-send", "1"]);
    let recorded = calls(&run);
    let send = recorded[&0].iter().find(|c| c.op == CollectiveOp::Send && c.seq == 1).unwrap();
    let recv = recorded[&1].iter().find(|c| c.op == CollectiveOp::Recv && c.seq == 1).unwrap();
    assert_ne!(send.input.unwrap().content_hash, recv.output.unwrap().content_hash, "the bytes changed");
    let (code, json) = ranks_json(&run, &[]);
    assert_eq!(code, 1, "{json}");
    let origins = json["origins"].as_array().unwrap();
    assert_eq!(origins.len(), 1, "{json}");
    let o = &origins[0];
    assert_eq!(
        (o["rank"].as_u64(), o["step"].as_u64(), o["op"].as_str()),
        (Some(1), Some(1), Some("HcclRecv"))
    );
    let finding = &o["findings"][0];
    assert_eq!(finding["kind"], "collective-disagreement", "{o}");
    let detail = finding["detail"].as_str().unwrap();
    assert!(
        detail.contains("HcclRecv #1 from rank 0") && detail.contains("received other bytes than were sent")
    );
    let (code, out, _) = analyzer(&["ranks", path_str(&run)]);
    assert_eq!(code, 1);
    assert!(
        out.contains("FIRST ANOMALY: rank 1 step 1: HcclRecv [HcclRecv]\n  message #1 on communicator root-"),
        "{out}"
    );
    assert!(out.contains("  rank 0 met it in a collective later and shows no anomaly"), "{out}");
    let page = dir.path().join("report.html");
    let (code, out, stderr) = analyzer(&["report", path_str(&run), "-o", path_str(&page)]);
    assert_eq!(code, 1, "{out}\n{stderr}");
    let html = report_page(&page);
    assert!(html.contains("HcclRecv</code></a> [HcclRecv], message #1 on root-"), "{out}");
}

/// A segment of rank 0's stream, neither its first nor its last, that holds a send of message #1 or later.
/// Chosen by what it holds: which records share a segment depends on when the writer thread ran, so the
/// job is deep enough (`DEEP`) to leave every step's send well inside the stream.
fn segment_of_a_later_send(run: &Path) -> std::path::PathBuf {
    let capture = CaptureRun::open(run).unwrap();
    let stream = capture.streams.iter().find(|s| s.info().rank == Some(0)).expect("rank 0's stream");
    let last = stream.segment_indices().max().expect("rank 0 wrote segments");
    assert!(last >= 2, "rank 0 wrote at least three segments");
    let later_sends: Vec<(u64, &Path)> = stream
        .records()
        .map(|item| item.unwrap())
        .filter(
            |item| matches!(&item.record, Record::Collective(c) if c.op == CollectiveOp::Send && c.seq >= 1),
        )
        .map(|item| (item.segment_index, item.segment))
        .collect();
    let (_, segment) = later_sends
        .iter()
        .find(|(index, _)| (1..last).contains(index))
        .unwrap_or_else(|| panic!("no middle segment of 0..={last} holds a later send: {later_sends:?}"));
    segment.to_path_buf()
}

/// Rank 0's stream lost a segment (written in 64 KiB segments), and with it the sends of some of stage 1's
/// inputs: each receive of such a message came after the ops of the step before and before its own step's
/// (message #k carries step k's activations), so without its send nothing tells which of the two steps it
/// is; the line names both, never the earlier as if known, and leads the answer, in `ranks` and `merge`;
/// the collectives rank 1 waited in behind the lost message are not reported as missing a member.
#[test]
fn a_receive_whose_send_is_lost_names_the_two_steps_it_came_between() {
    let dir = scratch();
    let run = dir.path().join("run");
    let (hccl, collector) = (artifact("libhccl.so"), collector_lib());
    let env = [("ACCUTRACE_SEGMENT_SIZE", "64K")];
    let job = Job { ranks: 2, options: &[], hccl_lib: &hccl, preload: path_str(&collector), env: &env };
    train(dir.path(), &run, DEEP, &job);
    std::fs::remove_file(segment_of_a_later_send(&run)).unwrap();
    let summaries = dir.path().join("summaries");
    let (code, out, stderr) = analyzer(&["scan", path_str(&run), "-o", path_str(&summaries)]);
    assert_eq!(code, 2, "{out}\n{stderr}");
    for (what, args) in
        [("ranks", vec!["ranks", path_str(&run)]), ("merge", vec!["merge", path_str(&summaries)])]
    {
        let (code, json) = analyzer_json(&args);
        assert_eq!(code, 2, "{what}: {json}");
        let unsent: Vec<&str> = json["input_problems"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|p| p["message"].as_str())
            .filter(|m| m.contains("has no matching send"))
            .collect();
        assert!(!unsent.is_empty(), "{what}: a send was lost: {json}");
        for line in &unsent {
            let k: u64 = line.split("message #").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap();
            assert!(k > 0, "{what}: message #0 comes before any op: {line}");
            let expected = format!(
                "rank 1 between step {} and step {k}: HcclRecv message #{k} from communicator rank 0 on root-",
                k - 1
            );
            assert!(line.starts_with(&expected), "{what}: {line}");
            assert!(
                line.ends_with("has no matching send (the send's step would say which)"),
                "{what}: {line}"
            );
        }
        // Rank 1 waited in the collectives after the lost message, which rank 0 recorded too: none is
        // reported as missing a member twice, once for each rank.
        let mut incomplete: Vec<&str> = json["input_problems"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|p| {
                p["message"]
                    .as_str()?
                    .split(": ")
                    .next()
                    .filter(|_| p["message"].to_string().contains("members recorded it"))
            })
            .collect();
        let named = incomplete.len();
        incomplete.sort_unstable();
        incomplete.dedup();
        assert_eq!(incomplete.len(), named, "{what}: a collective named twice: {json}");
        let (_, text, _) = analyzer(&args);
        let before_the_answer = text.split("(exit status 2").next().unwrap();
        assert!(before_the_answer.contains(&format!("INCOMPLETE INPUT: {}", unsent[0])), "{what}: {text}");
    }
}

/// The same 4-rank ZeRO pipeline through a shim libhccl.so that forwards every entry point through the
/// global scope (tests/sim-acl-compat), which leads back to the collector: every send, receive,
/// reduce-scatter and barrier reaches HCCL once and is recorded once, as without the shim.
#[test]
fn a_forwarding_shim_records_every_directed_call_once() {
    let dir = scratch();
    let (plain, shimmed) = (dir.path().join("plain"), dir.path().join("shimmed"));
    let (hccl, shim, collector) = (artifact("libhccl.so"), artifact("libacl_compat.so"), collector_lib());
    let job =
        Job { ranks: 4, options: &["--zero"], hccl_lib: &hccl, preload: path_str(&collector), env: &[] };
    let (plain_out, _) = train(dir.path(), &plain, MODEL, &job);
    let preload = format!("{}:{}:{}", collector.display(), shim.display(), hccl.display());
    let job = Job { hccl_lib: &shim, preload: &preload, ..job };
    let (shimmed_out, err) = train(dir.path(), &shimmed, MODEL, &job);
    let sorted = |s: &str| {
        let mut v: Vec<&str> = s.lines().collect();
        v.sort_unstable();
        v.join("\n")
    };
    assert_eq!(sorted(&shimmed_out), sorted(&plain_out), "the shim changes nothing in training");
    let forwarded = |name: &str| err.matches(&format!("acl-compat: {name} forwarded\n")).count() as u64;
    for name in ["HcclSend", "HcclRecv", "HcclReduceScatter", "HcclBarrier"] {
        assert_eq!(forwarded(name), 4 * STEPS, "{name}: {err}");
    }
    assert_eq!(forwarded("HcclAllGather"), 4 * 2 * STEPS, "{err}");
    assert!(!err.contains("was called again"), "a re-entered call found its way on: {err}");

    let summary = |c: &CollectiveInfo| {
        let hashes = (c.input.map(|b| b.content_hash), c.output.map(|b| b.content_hash));
        (c.op, c.comm_rank, c.comm_size, c.seq, c.peer, c.count, c.dtype, c.result, hashes)
    };
    let (plain, shimmed_calls) = (calls(&plain), calls(&shimmed));
    assert_eq!(shimmed_calls.keys().copied().collect::<Vec<_>>(), [0, 1, 2, 3]);
    for (rank, list) in &shimmed_calls {
        let ours: Vec<_> = list.iter().map(summary).collect();
        let theirs: Vec<_> = plain[rank].iter().map(summary).collect();
        assert_eq!(ours, theirs, "rank {rank}");
        assert_eq!(list.iter().map(|c| c.op).collect::<Vec<_>>(), expected_calls(*rank, 4, true));
    }
    let (code, out, stderr) = analyzer(&["ranks", path_str(&shimmed)]);
    assert_eq!(code, 0, "{out}\n{stderr}");
    assert!(out.contains("No anomaly across the ranks") && !out.contains("INCOMPLETE"), "{out}");
}
