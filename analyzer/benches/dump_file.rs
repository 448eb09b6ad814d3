//! One CANN dump file with many tensor descriptors (a fused kernel or a concat of thousands of inputs),
//! read the way `analyzer inspect` reads it: open the source (one header parse), then the values of every
//! tensor. Beside it, in the same run, one header parse of the same file: the cost every tensor paid again
//! when the reader parsed the header per tensor (time grew with the square of the descriptors).
//!
//! `cargo bench -p accutrace-analyzer --bench dump_file` (ACCUTRACE_BENCH_DESCRIPTORS="5000 10000 20000"
//! to choose the sizes).

use accutrace_formats::dump::{encode_dump, parse_dump_file, MappedFile};
use accutrace_formats::DType;
use accutrace_proto::dumpdata::{DumpData, OpInput, OpOutput, Shape};
use analyzer::filter::Filter;
use analyzer::sources;
use std::hint::black_box;
use std::time::Instant;

/// A dump file of `n` descriptors (half inputs, half outputs), 8 fp16 values each.
fn write_file(dir: &std::path::Path, n: usize) -> std::path::PathBuf {
    let shape = || Some(Shape { dim: vec![2, 4] });
    let header = DumpData {
        version: "2.0".into(),
        op_name: "model/concat_many".into(),
        input: (0..n / 2)
            .map(|_| OpInput {
                data_type: DType::FLOAT16.code(),
                format: 2,
                shape: shape(),
                ..Default::default()
            })
            .collect(),
        output: (n / 2..n)
            .map(|_| OpOutput {
                data_type: DType::FLOAT16.code(),
                format: 2,
                shape: shape(),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    let bytes: Vec<Vec<u8>> =
        (0..n).map(|i| (0..8u16).flat_map(|v| ((v + i as u16) % 1000).to_le_bytes()).collect()).collect();
    let slices: Vec<&[u8]> = bytes.iter().map(Vec::as_slice).collect();
    let file = encode_dump(&header, &slices[..n / 2], &slices[n / 2..], &[], &[]).unwrap();
    let path = dir.join("ConcatD.model_concat_many.7.2.1700000000000000");
    std::fs::write(&path, file).unwrap();
    path
}

fn seconds(f: impl FnOnce()) -> f64 {
    let t = Instant::now();
    f();
    t.elapsed().as_secs_f64()
}

fn main() {
    let sizes: Vec<usize> = std::env::var("ACCUTRACE_BENCH_DESCRIPTORS")
        .ok()
        .map(|v| v.split_whitespace().filter_map(|n| n.parse().ok()).collect())
        .unwrap_or_else(|| vec![5_000, 10_000, 20_000]);
    println!(
        "{:>11} {:>9} {:>10} {:>12} {:>13} {:>13}",
        "descriptors", "file", "open s", "inspect s", "1 parse ms", "per tensor us"
    );
    for n in sizes {
        let dir = tempfile::tempdir().unwrap();
        let path = write_file(dir.path(), n);
        let size = std::fs::metadata(&path).unwrap().len();
        let map = MappedFile::open(&path).unwrap();
        let parse = (0..5)
            .map(|_| seconds(|| drop(black_box(parse_dump_file(&map).unwrap()))))
            .fold(f64::INFINITY, f64::min);
        let mut source = None;
        let open = seconds(|| source = Some(sources::open(&path).unwrap()));
        let source = source.unwrap();
        let mut found = None;
        let listed =
            seconds(|| found = Some(analyzer::inspect::inspect(source.as_ref(), &Filter::default(), false)));
        let found = found.unwrap();
        assert_eq!(found.ops.iter().map(|o| o.tensors.len()).sum::<usize>(), n);
        assert!(found.input_problems.is_empty());
        println!(
            "{n:>11} {:>7}KB {open:>10.3} {listed:>12.3} {:>13.3} {:>13.2}",
            size / 1024,
            parse * 1e3,
            listed / n as f64 * 1e6
        );
    }
}
