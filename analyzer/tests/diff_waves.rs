//! diff of captures whose tensors are large enough to be read in waves on the pool's spare threads (at
//! least 4 MiB of data): the report on a pool of eight threads, where several pairs run at once and each is
//! split into waves, is the one a single thread measures pair by pair, a damaged payload included.

mod support;

use accutrace_formats::capture::Io;
use accutrace_formats::DType;
use analyzer::diff::{diff, DiffOptions};
use std::path::{Path, PathBuf};
use support::RunWriter;

/// fp16 values of 5 MiB of data a tensor: more than a wave threshold, and several waves long.
const N: usize = (5 << 20) / 2 + 7;

/// Op `k`'s output; in run 2, op 1's differ by an ulp at every third value and are NaN
/// at a few, op 2's at a few values far apart, op 0's not at all.
fn output(k: u64, run2: bool) -> Vec<u8> {
    (0..N)
        .flat_map(|i| {
            // Values between 0.125 and 2 that repeat every 4096: a plane that compresses.
            let mut bits = 0x3000 + ((i as u64 * 7 + k * 13) % 4096) as u16;
            if run2 && k == 1 && i % 3 == 0 {
                bits ^= 1;
            }
            if run2 && k == 1 && i % 500_009 == 11 {
                bits = 0x7E00;
            }
            if run2 && k == 2 && i % 1_000_003 == 5 {
                bits ^= 0x0400;
            }
            bits.to_le_bytes()
        })
        .collect()
}

fn write_run(dir: &Path, run2: bool) -> PathBuf {
    let mut run = RunWriter::create(&dir.join(if run2 { "b" } else { "a" }), 64 << 20);
    for k in 0..3u64 {
        run.op(k, "Gelu");
        run.tensor(Io::Output, 0, DType::FLOAT16, &output(k, run2));
    }
    run.finish()
}

/// diff of `a` and `b` as JSON on a pool of `threads` threads.
fn diff_on(threads: usize, a: &Path, b: &Path) -> String {
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
    pool.install(|| {
        let (x, y) = (analyzer::sources::open(a).unwrap(), analyzer::sources::open(b).unwrap());
        serde_json::to_string_pretty(&diff(x.as_ref(), y.as_ref(), &DiffOptions::default()).unwrap()).unwrap()
    })
}

#[test]
fn large_pairs_read_in_waves_give_the_single_threads_report() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (write_run(dir.path(), false), write_run(dir.path(), true));
    let one = diff_on(1, &a, &b);
    assert_eq!(diff_on(8, &a, &b), one);
    let report: serde_json::Value = serde_json::from_str(&one).unwrap();
    assert_eq!(report["verdict"], "different", "{report}");
    assert_eq!(report["decoded_tensors"], 2, "{report}");

    // A byte in the middle of op 1's payload in run 2 (the second of three tensor records in its only
    // segment): the same input problem either way.
    let stream = std::fs::read_dir(&b).unwrap().map(|e| e.unwrap().path()).find(|p| p.is_dir()).unwrap();
    let segment = std::fs::read_dir(&stream).unwrap().map(|e| e.unwrap().path()).next().unwrap();
    let mut bytes = std::fs::read(&segment).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x10;
    std::fs::write(&segment, bytes).unwrap();
    let one = diff_on(1, &a, &b);
    assert_eq!(diff_on(8, &a, &b), one);
    let report: serde_json::Value = serde_json::from_str(&one).unwrap();
    assert!(report["input_problems"].to_string().contains("model/op1"), "{report}");
}
