//! Each injected fault shows where it should and nowhere else.

mod common;

use common::{cosine, run, Recorder};
use sim_model::precision::{STATUS_CONVERSION_OVERFLOW, STATUS_FLOAT_OVERFLOW};
use sim_model::{Activation, ModelConfig, OverflowFault, OverflowMode, Precision};

/// Index of the first op whose inputs or outputs differ in bytes (same op sequence assumed).
fn first_difference(a: &Recorder, b: &Recorder) -> Option<usize> {
    assert_eq!(a.ops.len(), b.ops.len());
    a.ops.iter().zip(&b.ops).position(|(x, y)| {
        assert_eq!(x.name, y.name);
        let bytes =
            |o: &common::Op| o.inputs.iter().chain(&o.outputs).map(|t| t.bytes.clone()).collect::<Vec<_>>();
        bytes(x) != bytes(y)
    })
}

#[test]
fn nondeterministic_op_differs_between_run_seeds_only_there_and_downstream() {
    for (op, fusion) in [
        ("model/layer_1/attn/qkv/MatMul", false),
        ("gradients/model/layer_0/mlp/fc2/MatMul_grad/MatMul_1", false),
        ("model/layer_0/mlp/fused_matmul_biasadd_gelu", true),
        ("model/layer_0/attn/Softmax", false),
    ] {
        let mut cfg = ModelConfig { fusion, ..ModelConfig::default() };
        cfg.faults.nondeterministic_op = Some(op.into());
        let (a, _) = run(&ModelConfig { run_seed: 1, ..cfg.clone() }, 1, OverflowMode::InfNan);
        let (a2, _) = run(&ModelConfig { run_seed: 1, ..cfg.clone() }, 1, OverflowMode::InfNan);
        let (b, _) = run(&ModelConfig { run_seed: 2, ..cfg.clone() }, 1, OverflowMode::InfNan);
        assert_eq!(first_difference(&a, &a2), None, "{op}: same run seed must repeat");
        let first = first_difference(&a, &b).unwrap_or_else(|| panic!("{op}: run seeds gave identical runs"));
        assert_eq!(a.ops[first].name, op);
        // The faulty op's inputs are identical; only its outputs moved.
        let (x, y) = (&a.ops[first], &b.ops[first]);
        assert!(x.inputs.iter().zip(&y.inputs).all(|(s, t)| s.bytes == t.bytes), "{op}");
        // Slightly: still very close.
        let c = cosine(&x.outputs[0].values(), &y.outputs[0].values());
        assert!(c > 0.999, "{op}: {c}");
    }
}

#[test]
fn overflow_fault_appears_first_in_its_op_at_its_step() {
    let op = "model/layer_0/mlp/fc1/MatMul";
    for (precision, mode) in [
        (Precision::Fp16, OverflowMode::InfNan),
        (Precision::Fp16, OverflowMode::Saturation),
        (Precision::Bf16, OverflowMode::InfNan),
        (Precision::Bf16, OverflowMode::Saturation),
    ] {
        let mut cfg = ModelConfig { precision, ..ModelConfig::default() };
        cfg.faults.overflow = Some(OverflowFault { op: op.into(), step: 2, rank: None });
        let mut t = sim_model::Trainer::new(cfg);
        for k in 0..4u64 {
            let mut rec = Recorder::default();
            let r = t.step(k, mode, &mut rec);
            let first = rec.ops.iter().position(|o| o.status != 0);
            if k != 2 {
                assert_eq!(first, None, "{precision:?} {mode:?} step {k}");
                assert!(!r.overflowed);
                continue;
            }
            assert!(r.overflowed && r.skipped, "{r:?}");
            let first = first.expect("status bits at the fault step");
            let o = &rec.ops[first];
            assert_eq!(o.name, op);
            let expected =
                if precision == Precision::Fp16 { STATUS_CONVERSION_OVERFLOW } else { STATUS_FLOAT_OVERFLOW };
            assert_eq!(o.status & expected, expected, "{:#x}", o.status);
            let max = sim_model::precision::max_finite(precision);
            let out = o.outputs[0].values();
            match mode {
                OverflowMode::InfNan => assert!(out.iter().any(|x| x.is_infinite())),
                OverflowMode::Saturation => {
                    assert!(out.iter().all(|x| x.is_finite()) && out.iter().any(|x| x.abs() == max))
                }
            }
            // Nothing before it is anomalous.
            for before in &rec.ops[..first] {
                for t in &before.outputs {
                    assert!(t.values().iter().all(|x| x.is_finite() && x.abs() < max), "{}", before.name);
                }
            }
            // Fp16 halves the loss scale for the next step.
            if precision == Precision::Fp16 {
                assert_eq!(t.loss_scale(), r.loss_scale / 2.0);
            }
        }
    }
}

#[test]
fn imprecise_fused_kernel_fails_the_cosine_check_while_the_rest_passes() {
    let mut cfg = ModelConfig { fusion: true, ..ModelConfig::default() };
    let (bench, _) = run(&cfg.benchmark(), 1, OverflowMode::InfNan);
    let (good, _) = run(&cfg, 1, OverflowMode::InfNan);
    cfg.faults.imprecise_fused_kernel = true;
    let (bad, _) = run(&cfg, 1, OverflowMode::InfNan);
    let fused = "model/layer_0/mlp/fused_matmul_biasadd_gelu";
    let gelu = bench.get("model/layer_0/mlp/Gelu").outputs[0].values();
    let c_good = cosine(&good.get(fused).outputs[0].values(), &gelu);
    let c_bad = cosine(&bad.get(fused).outputs[0].values(), &gelu);
    assert!(c_good > 0.999, "correct fused kernel: {c_good}");
    assert!(c_bad < 0.99, "imprecise fused kernel: {c_bad}");
    // Every op before the first fused kernel still matches the benchmark.
    for op in bad.ops.iter().take_while(|o| o.name != fused) {
        let c = cosine(&op.outputs[0].values(), &bench.get(&op.name).outputs[0].values());
        assert!(c > 0.999, "{}: {c}", op.name);
    }
}

#[test]
fn shuffled_data_changes_the_first_op_input_and_lr_scale_only_the_update() {
    let base = ModelConfig::default();
    let (a, _) = run(&base, 1, OverflowMode::InfNan);
    let mut shuf = base.clone();
    shuf.faults.shuffle_data = true;
    let (b, _) = run(&shuf, 1, OverflowMode::InfNan);
    assert_eq!(first_difference(&a, &b), Some(0));
    assert_ne!(a.ops[0].inputs[1].bytes, b.ops[0].inputs[1].bytes, "token ids");
    assert_eq!(a.ops[0].inputs[0].bytes, b.ops[0].inputs[0].bytes, "same weights");

    let mut lr = base.clone();
    lr.faults.lr_scale = 3.0;
    let (c, _) = run(&lr, 1, OverflowMode::InfNan);
    let first = first_difference(&a, &c).expect("the update differs");
    assert!(c.ops[first].name.starts_with("optimizer/"), "{}", c.ops[first].name);
    let (a1, _) = run(&base, 2, OverflowMode::InfNan);
    let (c1, _) = run(&lr, 2, OverflowMode::InfNan);
    assert_eq!(first_difference(&a1, &c1), Some(0), "step 1 starts from different weights");
}

/// Mean |x| of a tensor's host values.
fn abs_mean(t: &common::Tensor) -> f64 {
    let v = t.values();
    v.iter().map(|x| f64::from(x.abs())).sum::<f64>() / v.len() as f64
}

#[test]
fn init_scale_scales_the_random_weights_only() {
    let base = ModelConfig::default();
    let (a, _) = run(&base, 1, OverflowMode::InfNan);
    for (scale, low, high) in [(10.0f32, 5.0, 20.0), (1e-6, 1e-7, 1e-5)] {
        let mut cfg = base.clone();
        cfg.faults.init_scale = scale;
        // The first update's var input is the initial master weight (steps skipped for overflow before it
        // change nothing).
        let mut t = sim_model::Trainer::new(cfg);
        let b = (0..8)
            .find_map(|k| {
                let mut rec = Recorder::default();
                t.step(k, OverflowMode::InfNan, &mut rec);
                rec.ops.iter().any(|o| o.name.starts_with("optimizer/")).then_some(rec)
            })
            .expect("an update within 8 steps");
        let qkv = "optimizer/model/layer_0/attn/qkv/weight/ApplyAdam";
        let ratio = abs_mean(&b.get(qkv).inputs[0]) / abs_mean(&a.get(qkv).inputs[0]);
        assert!((low..high).contains(&ratio), "init_scale {scale}: weights scaled by {ratio}");
        // Constant-initialised parameters (layer norm gamma 1, beta 0) are untouched.
        let gamma = "optimizer/model/layer_0/ln_1/gamma/ApplyAdam";
        assert_eq!(a.get(gamma).inputs[0].bytes, b.get(gamma).inputs[0].bytes);
    }
}

#[test]
fn activations_run_under_their_own_names_and_the_fault_saturates_them() {
    for (activation, op_type, grad_type) in [
        (Activation::Tanh, "Tanh", "TanhGrad"),
        (Activation::Sigmoid, "Sigmoid", "SigmoidGrad"),
        (Activation::Relu, "Relu", "ReluGrad"),
    ] {
        let cfg = ModelConfig { activation, ..ModelConfig::default() };
        let forward = format!("model/layer_0/mlp/{op_type}");
        let backward = format!("gradients/model/layer_0/mlp/{op_type}_grad/{grad_type}");
        let (clean, reports) = run(&cfg, 3, OverflowMode::InfNan);
        assert!(reports.iter().all(|r| r.loss.is_finite() && !r.overflowed), "{activation:?}");
        assert_eq!(clean.get(&forward).op_type, op_type);
        assert_eq!(clean.get(&backward).op_type, grad_type);
        let out = clean.get(&forward).outputs[0].values();
        // Share of outputs at the activation's limits: +-1 (tanh), 0 or 1 (sigmoid), exactly 0 (relu).
        let pinned = |v: &[f32]| {
            let at = |x: f32| match activation {
                Activation::Tanh => x.abs() == 1.0,
                Activation::Sigmoid => x == 0.0 || x == 1.0,
                _ => x == 0.0,
            };
            v.iter().filter(|&&x| at(x)).count() as f64 / v.len() as f64
        };
        assert!(pinned(&out) < 0.6, "{activation:?} clean: {}", pinned(&out));
        let mut sat = cfg.clone();
        sat.faults.saturate_activation = true;
        let (bad, _) = run(&sat, 1, OverflowMode::InfNan);
        let out = bad.get(&forward).outputs[0].values();
        assert!(pinned(&out) > 0.999, "{activation:?} saturated: {}", pinned(&out));
    }
    let fused = ModelConfig { fusion: true, activation: Activation::Relu, ..ModelConfig::default() };
    assert!(fused.validate().unwrap_err().contains("gelu only"));
}

#[test]
fn a_frozen_layer_keeps_its_weights_while_its_optimizer_ops_run() {
    let mut cfg = ModelConfig::default();
    cfg.faults.frozen = Some("model/layer_1/".into());
    let (rec, _) = run(&cfg, 2, OverflowMode::InfNan);
    let updates: Vec<&common::Op> = rec.ops.iter().filter(|o| o.name.starts_with("optimizer/")).collect();
    assert_eq!(updates.len(), 2 + 10 * 2 + 3, "every parameter's optimizer op still runs");
    for op in updates {
        let frozen = op.name.starts_with("optimizer/model/layer_1/");
        let unchanged = op.inputs[0].bytes == op.outputs[0].bytes;
        assert_eq!(unchanged, frozen, "{}", op.name);
    }
}

#[test]
fn missing_determinism_shows_only_without_the_deterministic_option() {
    let mut cfg = ModelConfig::default();
    cfg.faults.missing_determinism = true;
    let step = |run_seed: u64, deterministic: bool| {
        let mut t = sim_model::Trainer::new(ModelConfig { run_seed, ..cfg.clone() });
        t.set_deterministic(deterministic);
        let mut rec = Recorder::default();
        t.step(0, OverflowMode::InfNan, &mut rec);
        rec
    };
    let (a, b) = (step(1, false), step(2, false));
    let first = first_difference(&a, &b).expect("run seeds differ without the option");
    assert_eq!(a.ops[first].name, "gradients/model/embedding/GatherV2_grad/UnsortedSegmentSum");
    assert_eq!(first_difference(&step(1, true), &step(2, true)), None, "the option makes it reproducible");
}
