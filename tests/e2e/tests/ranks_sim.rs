//! `sim-train --ranks 4` over the stand-in libhccl.so: healthy replicas stay bit-identical, and each
//! injected fault does to the dumped tensors what it says, on the rank it names.

mod common;

use accutrace_formats::dump::{parse_dump, parse_file_name, Io};
use common::*;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

const RANKS: u32 = 4;
const STEPS: u64 = 3;

/// One rank's dumped tensors: (step, op name, io, index) -> raw bytes.
type Tensors = BTreeMap<(u64, String, Io, usize), Vec<u8>>;

/// Runs 4 ranks of `model_json` dumping every op to disk; returns stdout and each rank's tensors.
fn run(model_json: &str) -> (String, Vec<Tensors>) {
    let dir = scratch();
    let model = model_file(dir.path(), "model.json", model_json);
    let dump = dir.path().join("dump");
    let config = dump_config(dir.path(), "acl.json", &dump, "");
    let out = Command::new(sim_train_bin())
        .args(["--ranks", &RANKS.to_string(), "--steps", &STEPS.to_string(), "--lib"])
        .arg(runtime_lib())
        .arg("--hccl-lib")
        .arg(artifact("libhccl.so"))
        .arg("--model")
        .arg(&model)
        .arg("--acl-config")
        .arg(&config)
        .output()
        .expect("run sim-train");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "sim-train failed: {}\n{stdout}", String::from_utf8_lossy(&out.stderr));
    // {dump}/{time}/{device}/{model}/{model_id}/{step}/{file}: the device is the rank.
    let mut ranks = vec![Tensors::new(); RANKS as usize];
    for session in std::fs::read_dir(&dump).unwrap() {
        for device in std::fs::read_dir(session.unwrap().path()).unwrap() {
            let device = device.unwrap().path();
            let rank: usize = device.file_name().unwrap().to_str().unwrap().parse().unwrap();
            collect(&device, &mut ranks[rank]);
        }
    }
    (stdout, ranks)
}

fn collect(dir: &Path, into: &mut Tensors) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            collect(&p, into);
            continue;
        }
        let name = parse_file_name(p.file_name().unwrap().to_str().unwrap()).unwrap();
        let step: u64 = p.parent().unwrap().file_name().unwrap().to_str().unwrap().parse().unwrap();
        let bytes = std::fs::read(&p).unwrap();
        let file = parse_dump(&bytes).unwrap();
        assert!(!name.op_type.is_empty());
        for t in file.inputs.iter().chain(&file.outputs) {
            into.insert((step, file.op_name().to_string(), t.io, t.index), t.bytes.to_vec());
        }
    }
}

/// The ranks whose tensor at `key` differs from rank 0's.
fn differing(ranks: &[Tensors], key: &(u64, String, Io, usize)) -> Vec<usize> {
    let base = &ranks[0][key];
    (1..ranks.len()).filter(|&r| &ranks[r][key] != base).collect()
}

fn key(step: u64, op: &str, io: Io, index: usize) -> (u64, String, Io, usize) {
    (step, op.to_string(), io, index)
}

const QKV_ADAM: &str = "optimizer/model/layer_0/attn/qkv/weight/ApplyAdam";

#[test]
fn healthy_replicas_are_bit_identical_and_read_their_own_shards() {
    let (stdout, ranks) = run("{}");
    assert_eq!(stdout.lines().filter(|l| l.contains("mean loss")).count(), STEPS as usize, "{stdout}");
    let optimizer_outputs: Vec<_> =
        ranks[0].keys().filter(|k| k.1.starts_with("optimizer/") && k.2 == Io::Output).cloned().collect();
    assert!(optimizer_outputs.len() > 3 * 20, "{} optimizer outputs", optimizer_outputs.len());
    for k in &optimizer_outputs {
        assert!(differing(&ranks, k).is_empty(), "replicas differ at {k:?}");
    }
    for step in 0..STEPS {
        let tokens = key(step, "model/embedding/GatherV2", Io::Input, 1);
        assert_eq!(differing(&ranks, &tokens), [1, 2, 3], "each rank reads its own shard at step {step}");
    }
}

#[test]
fn each_fault_acts_on_the_rank_and_step_it_names() {
    // A bit flip on rank 1 before step 1: rank 1's weights differ from step 1 on, nobody else's.
    let (_, ranks) = run(
        r#"{"faults": {"weight_bitflip": {"param": "model/layer_0/attn/qkv/weight", "step": 1, "rank": 1}}}"#,
    );
    assert!(differing(&ranks, &key(0, QKV_ADAM, Io::Output, 0)).is_empty());
    assert_eq!(differing(&ranks, &key(1, QKV_ADAM, Io::Input, 0)), [1]);
    assert_eq!(differing(&ranks, &key(2, QKV_ADAM, Io::Output, 0)), [1]);

    // Rank 2 reads rank 3's shard at step 1, and only then.
    let (_, ranks) = run(r#"{"faults": {"wrong_data": {"step": 1, "rank": 2}}}"#);
    let tokens = |step| key(step, "model/embedding/GatherV2", Io::Input, 1);
    assert_eq!(ranks[2][&tokens(1)], ranks[3][&tokens(1)]);
    assert_ne!(ranks[2][&tokens(0)], ranks[3][&tokens(0)]);
    assert_ne!(ranks[2][&tokens(2)], ranks[3][&tokens(2)]);
    assert!(differing(&ranks, &key(1, QKV_ADAM, Io::Output, 0)).is_empty(), "the replicas still agree");

    // Rank 1 folds step 1's gradients in another order: its update differs, the others agree.
    let (_, ranks) = run(r#"{"faults": {"nondeterministic_reduction": {"step": 1, "rank": 1}}}"#);
    assert!(differing(&ranks, &key(0, QKV_ADAM, Io::Output, 0)).is_empty());
    assert!(differing(&ranks, &key(1, QKV_ADAM, Io::Input, 3)).contains(&1), "rank 1's reduced gradient");
    assert_eq!(differing(&ranks, &key(1, QKV_ADAM, Io::Output, 0)), [1]);

    // An overflow on rank 2 at step 1 makes every rank skip step 1 (the overflow flag is all-reduced).
    let (stdout, ranks) =
        run(r#"{"faults": {"overflow": {"op": "model/layer_0/mlp/fc1/MatMul", "step": 1, "rank": 2}}}"#);
    let skipped: Vec<&str> = stdout.lines().filter(|l| l.contains("step skipped")).collect();
    assert_eq!(skipped.len(), RANKS as usize, "{stdout}");
    assert!(skipped.iter().all(|l| l.contains(" step 1 ")), "{stdout}");
    assert!(!ranks[0].contains_key(&key(1, QKV_ADAM, Io::Output, 0)), "no update at step 1");
    let fc1 = key(1, "model/layer_0/mlp/fc1/MatMul", Io::Output, 0);
    assert!(ranks.iter().all(|r| r.contains_key(&fc1)));
}
