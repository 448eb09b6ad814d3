//! Two runs whose op names pair nothing past the first op (every op renamed, or one name repeated through
//! the step, as eager kernels are) are paired by execution order, op type and shape at a real step's size:
//! 7,500 tensors a side in one rank and step, where the quadratic table (past 50,000,000 cells, about
//! 7,000 a side) left every one unmatched and said nothing. Run 2 has one extra op in the middle: every
//! other tensor pairs with its own counterpart, and the extra op's tensors alone are unmatched.

mod support;

use accutrace_formats::capture::Io;
use accutrace_formats::DType;
use analyzer::matching::{match_runs, MatchKind, MatchOptions};
use support::RunWriter;

const OPS: u64 = 2_500;
/// Where run 2's extra op runs: before target op `EXTRA_AT`.
const EXTRA_AT: u64 = 1_250;
const TYPES: [&str; 4] = ["MatMul", "Add", "Gelu", "Softmax"];

fn floats(len: u64, value: u64) -> Vec<u8> {
    (0..len).flat_map(|_| (value as f32).to_le_bytes()).collect()
}

/// Op `k`'s three tensors: op types and shapes that repeat, so the order must be aligned, not read off
/// one signature.
fn model_op(run: &mut RunWriter, k: u64) {
    run.tensor(Io::Input, 0, DType::FLOAT, &floats(1 + k % 3, k));
    run.tensor(Io::Input, 1, DType::FLOAT, &floats(2, k));
    run.tensor(Io::Output, 0, DType::FLOAT, &floats(1 + k / 4 % 3, k));
}

/// A run of `OPS` ops in step 0, named by `name`, with (`extra`) an op of a type the other run lacks before
/// op `EXTRA_AT`.
fn write_run(path: &std::path::Path, name: impl Fn(u64) -> String, extra: bool) -> std::path::PathBuf {
    let op_type = |k: u64| TYPES[(k % 4) as usize];
    write_ops(path, OPS, name, op_type, extra.then_some(EXTRA_AT))
}

/// A run of `ops` ops in step 0, named by `name`, of types `op_type`, with an op of a type neither run has
/// before op `extra_at`.
fn write_ops<'t>(
    path: &std::path::Path,
    ops: u64,
    name: impl Fn(u64) -> String,
    op_type: impl Fn(u64) -> &'t str,
    extra_at: Option<u64>,
) -> std::path::PathBuf {
    let mut run = RunWriter::create(path, 1 << 24);
    let mut launched = 0;
    for k in 0..ops {
        if extra_at == Some(k) {
            run.op_named(0, launched, &name(u64::MAX), "Cast");
            run.tensor(Io::Input, 0, DType::FLOAT, &floats(3, 7));
            run.tensor(Io::Output, 0, DType::FLOAT, &floats(3, 7));
            launched += 1;
        }
        run.op_named(0, launched, &name(k), op_type(k));
        model_op(&mut run, k);
        launched += 1;
    }
    run.finish()
}

/// Matches run 1 (`target_name`) against run 2 (`bench_name`, with the extra op) and checks every pair and
/// every leftover; returns how many pairs each way found.
fn check(target_name: impl Fn(u64) -> String, bench_name: impl Fn(u64) -> String) -> (usize, usize) {
    let dir = tempfile::tempdir().unwrap();
    let target = analyzer::sources::open(&write_run(&dir.path().join("a"), target_name, false)).unwrap();
    let bench = analyzer::sources::open(&write_run(&dir.path().join("b"), bench_name, true)).unwrap();
    let (ti, bi) = (target.index(), bench.index());
    assert_eq!(ti.tensors.len(), 3 * OPS as usize, "more than 7,000 tensors in one rank and step");
    let matching = match_runs(ti, bi, &MatchOptions::default());
    assert!(matching.warnings.is_empty(), "{:?}", matching.warnings);
    assert!(
        matching.unmatched_target.is_empty(),
        "{} target tensors unmatched",
        matching.unmatched_target.len()
    );
    assert_eq!(matching.pairs.len(), ti.tensors.len());
    // Ops are numbered in execution order: target op k is run 2's op k before the extra op, k + 1 after.
    let extra_op = EXTRA_AT as usize;
    for p in &matching.pairs {
        let (t, b) = (&ti.tensors[p.target()], &bi.tensors[p.bench()]);
        let counterpart = t.op() + usize::from(t.op() >= extra_op);
        assert_eq!((b.op(), b.io, b.index), (counterpart, t.io, t.index), "{}", ti.tensor_label(p.target()));
        assert_eq!((&b.shape, &bi.ops[b.op()].op_type), (&t.shape, &ti.ops[t.op()].op_type));
    }
    let extra: Vec<usize> = bi.ops[extra_op].tensors().collect();
    assert_eq!(bi.ops[extra_op].op_type, "Cast");
    assert_eq!(matching.unmatched_bench, extra, "the extra op's tensors alone");
    let by = |how| matching.pairs.iter().filter(|p| p.how == how).count();
    (by(MatchKind::Exact), by(MatchKind::Order))
}

/// Another compile renamed every op: names pair nothing, the order pairs all.
#[test]
fn every_op_renamed_pairs_by_order_at_a_real_step_size() {
    let (exact, order) = check(|k| format!("model/op{k}"), |k| format!("renamed/layer{k}/kernel"));
    assert_eq!((exact, order), (0, 3 * OPS as usize));
}

/// An eager step repeats one kernel name: the first op pairs by name, the rest by order, past the extra
/// op of the same name.
#[test]
fn one_name_repeated_through_a_step_pairs_by_order_at_a_real_step_size() {
    let (exact, order) = check(|_| "MatMulV2".into(), |_| "MatMulV2".into());
    assert_eq!((exact, order), (3, 3 * OPS as usize - 3));
}

/// Not a test: the inputs of `scripts/bench-align`, written into `$ALIGN_BENCH_DIR/{N}/` for each N of
/// `$ALIGN_BENCH_TENSORS` (tensors a side, comma-separated): `a` (ops `model/op{k}`), `b` (the same ops
/// renamed, one extra op in the middle) and `u` (renamed, op types drawn at random: unrelated to `a`).
#[test]
#[ignore = "not a test: writes the inputs of scripts/bench-align when it asks"]
fn write_bench_inputs() {
    let dir = std::path::PathBuf::from(std::env::var("ALIGN_BENCH_DIR").expect("ALIGN_BENCH_DIR"));
    let sizes = std::env::var("ALIGN_BENCH_TENSORS").expect("ALIGN_BENCH_TENSORS");
    for n in sizes.split(',') {
        let ops = n.trim().parse::<u64>().expect("a tensor count") / 3;
        let at = |run: &str| dir.join(n.trim()).join(run);
        let renamed = |k: u64| format!("renamed/layer{k}/kernel");
        write_ops(&at("a"), ops, |k| format!("model/op{k}"), |k| TYPES[(k % 4) as usize], None);
        write_ops(&at("b"), ops, renamed, |k| TYPES[(k % 4) as usize], Some(ops / 2));
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        let drawn: Vec<&str> = (0..ops)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                TYPES[(state % 4) as usize]
            })
            .collect();
        write_ops(&at("u"), ops, renamed, |k| drawn[k as usize], None);
    }
}
