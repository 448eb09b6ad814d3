//! Execution order does not depend on how chunks arrive. The files of one dump tree are handed to the
//! collector's dump callback in random chunk sizes, random file orders and random interleavings, with one
//! to three writer threads and small segments; every capture must index the same ops in the same order as
//! the tree itself, tensor for tensor, and give the same answers (`compare`'s culprit, `diff` against the
//! tree: identical).
//!
//! One test in its own binary: the collector is one pipeline per process, run here many times in turn.

mod common;
use analyzer::index::Index;
use ascend_sys::chunk::ChunkBuf;
use collector::activate::standalone;
use collector::config::{Config, Mode};
use collector::finish::{finish, End};
use common::*;
use proptest::prelude::*;
use std::path::{Path, PathBuf};

const FUSED_KERNEL: &str = "model/layer_0/mlp/fused_matmul_biasadd_gelu";

/// Every file under `dir` (path as the runtime would name it, bytes).
fn files_of(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        for entry in std::fs::read_dir(&d).expect("list the dump tree") {
            let path = entry.expect("dir entry").path();
            if path.is_dir() {
                pending.push(path);
            } else {
                let bytes = std::fs::read(&path).expect("read a dump file");
                files.push((path.to_str().expect("UTF-8 path").to_string(), bytes));
            }
        }
    }
    files.sort();
    files
}

/// What the index says, in its order: op by op, each tensor's identity and content.
fn listing(index: &Index, hash: impl Fn(usize) -> u64) -> Vec<String> {
    let mut lines = Vec::new();
    for op in &index.ops {
        lines.push(format!("step {} {} [{}]", op.step, op.name, op.op_type));
        for t in op.tensors() {
            let tensor = &index.tensors[t];
            lines.push(format!(
                "  {}.{} {} {:?} {:016x}",
                tensor.io.as_str(),
                tensor.index,
                tensor.dtype,
                tensor.shape,
                hash(t)
            ));
        }
    }
    lines
}

/// A reproducible stream of choices from proptest's random tape.
struct Tape<'a> {
    values: &'a [u32],
    at: usize,
}

impl Tape<'_> {
    fn below(&mut self, n: usize) -> usize {
        let v = self.values[self.at % self.values.len()] as usize;
        self.at += 1;
        v % n.max(1)
    }
}

/// How one capture receives the files.
#[derive(Clone)]
struct Delivery {
    writers: usize,
    segment_size: u64,
    /// Files whose chunks are in flight at once.
    window: usize,
    /// Chunk sizes are drawn from 1..=max_chunk bytes.
    max_chunk: usize,
    tape: Vec<u32>,
}

impl std::fmt::Debug for Delivery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (w, s, win, c) = (self.writers, self.segment_size, self.window, self.max_chunk);
        let head = &self.tape[..self.tape.len().min(4)];
        write!(f, "{w} writers, {s}-byte segments, {win} files in flight, chunks <= {c} B, tape {head:?}...")
    }
}

fn delivery() -> impl Strategy<Value = Delivery> {
    (1usize..=3, prop::sample::select(vec![64u64 << 10, 256 << 10, 64 << 20]), 1usize..=8, 64usize..=6000)
        .prop_flat_map(|(writers, segment_size, window, max_chunk)| {
            prop::collection::vec(any::<u32>(), 256).prop_map(move |tape| Delivery {
                writers,
                segment_size,
                window,
                max_chunk,
                tape,
            })
        })
}

/// Captures `files` through a standalone collector pipeline, delivered as `d` says.
fn capture(files: &[(String, Vec<u8>)], run: &Path, d: &Delivery) {
    let cfg = Config {
        dir: run.to_path_buf(),
        mode: Mode::Tensor,
        writers: d.writers,
        slots: 16,
        slot_size: 8 << 10,
        segment_size: d.segment_size,
        ..Config::default()
    };
    let pipeline = standalone(cfg).expect("start a standalone pipeline");
    let mut tape = Tape { values: &d.tape, at: 0 };
    // Files in a random order; up to `window` of them in flight, each chunk from a random one of those.
    let mut order: Vec<usize> = (0..files.len()).collect();
    for i in (1..order.len()).rev() {
        order.swap(i, tape.below(i + 1));
    }
    let mut waiting = order.into_iter();
    let mut in_flight: Vec<(usize, usize)> = Vec::new();
    loop {
        while in_flight.len() < d.window {
            match waiting.next() {
                Some(f) => in_flight.push((f, 0)),
                None => break,
            }
        }
        if in_flight.is_empty() {
            break;
        }
        let slot = tape.below(in_flight.len());
        let (f, pos) = in_flight[slot];
        let (name, bytes) = &files[f];
        let end = (pos + 1 + tape.below(d.max_chunk)).min(bytes.len());
        let last = end == bytes.len();
        let chunk = ChunkBuf::of(name.as_bytes(), &bytes[pos..end], last);
        // SAFETY: a well-formed chunk of `callback_len` bytes that outlives the call, as the runtime hands it.
        unsafe { collector::callback::dump_callback(chunk.as_ptr(), chunk.callback_len()) };
        if last {
            in_flight.swap_remove(slot);
        } else {
            in_flight[slot].1 = end;
        }
    }
    finish(pipeline, End::Finalize);
}

#[test]
fn chunk_arrival_order_changes_neither_the_index_nor_the_answers() {
    let dir = scratch();
    let model_json = r#"{"fusion": true, "faults": {"imprecise_fused_kernel": true}}"#;
    let model = model_file(dir.path(), "model.json", model_json);
    let tree = dir.path().join("dump");
    sim_train(&model, 2, Some(&dump_config(dir.path(), "acl.json", &tree, "")), &[]);
    let bench = dir.path().join("bench");
    sim_bench(&model, 2, &bench);

    let reference = analyzer::sources::open(&tree).expect("open the dump tree");
    let expected = listing(reference.index(), |t| reference.content_hash(t).expect("hash a dump tensor"));
    let (code, report) = analyzer_json(&["compare", path_str(&tree), path_str(&bench), "--step", "0"]);
    assert_eq!((code, report["culprit"]["name"].as_str()), (1, Some(FUSED_KERNEL)), "the tree's own answer");

    let files = files_of(&tree);
    let runs = std::cell::Cell::new(0);
    let config = ProptestConfig { cases: 10, failure_persistence: None, ..ProptestConfig::default() };
    proptest!(config, |(d in delivery())| {
        runs.set(runs.get() + 1);
        let run: PathBuf = dir.path().join(format!("capture-{}", runs.get()));
        capture(&files, &run, &d);
        let source = analyzer::sources::open(&run).expect("open the capture");
        let got = listing(source.index(), |t| source.content_hash(t).expect("stored hash"));
        let first_difference = got.iter().zip(&expected).position(|(a, b)| a != b);
        prop_assert!(
            got == expected,
            "{d:?}: {} vs {} lines, first difference at {first_difference:?}: {:?} vs {:?}",
            got.len(),
            expected.len(),
            first_difference.map(|i| &got[i]),
            first_difference.map(|i| &expected[i]),
        );
        let (code, report) = analyzer_json(&["compare", path_str(&run), path_str(&bench), "--step", "0"]);
        prop_assert_eq!((code, report["culprit"]["name"].as_str()), (1, Some(FUSED_KERNEL)));
        let (code, report) = analyzer_json(&["diff", path_str(&run), path_str(&tree)]);
        prop_assert_eq!(code, 0, "the capture holds the tree's bytes: {}", report["census"]);
        std::fs::remove_dir_all(&run).expect("remove the capture");
    });
}
